"""``report.json`` beside ``report.html``: what the picture shows, for a program to check.

Contract (docs/contracts.md; add freely, rename nothing):

- ``"runs"``: ``[{"job", "start", "end"}]``, Unix seconds (float), every fio run in the window;
- ``"devices"``: ``[{"device": kernel name, "verdict": text, "series": {column: [[unix_seconds, value], ...]}}]``
  with iostat's column names and units (``r/s``, ``w/s``, ``rkB/s``, ``wkB/s``, ``r_await``,
  ``w_await`` in ms, ``aqu-sz``, ``util`` in %), exactly the points drawn (empty for a device
  shown as idle in one line, not charted);
- ``"alerts"`` (diagnosis): every alert that fired, ``{"alert", "summary", "labels", "start", "end"}``: the rules by
  name, which the page says in plain words (a verdict's ``data.alerts`` names the rules behind it);
- ``"verdicts"``: every verdict of the page (kind, ok, decided, text, data); ``decided`` false: the check's rule needs a
  longer window than was measured (its ``for:`` longer than the capture or its loads), so ``ok`` is null: not a pass.

Performance and comparison reports carry empty ``runs`` and ``devices``.
"""

from __future__ import annotations

import json
import math
from typing import Any


def _finite(value: Any) -> Any:
    """JSON has no NaN: a missing figure is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def report_json(report: Any) -> str:
    """The JSON text of a ``html.Report``."""
    doc = {"kind": report.kind, "title": report.title, "runs": [], "devices": [], **report.json,
           "summary": list(report.summary),
           "verdicts": [{"kind": v.kind, "ok": v.ok, "decided": v.decided, "text": v.text, "data": v.data} for v in report.verdicts]
           + [{"kind": v.kind, "ok": v.ok, "decided": v.decided, "text": v.text, "data": v.data, "section": s.title}
              for s in report.sections for v in s.verdicts]}
    return json.dumps(_finite(doc), indent=1, allow_nan=False) + "\n"
