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

Performance and comparison reports carry empty ``runs`` and ``devices``; a diagnosis's are laid out here
(``diagnosis``, ``idle_device``, ``charted_device``) from what ``diagnosis.diagnose`` decided.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from .phases import Phase, RunWindow
from .timeline import COLUMNS, Timeline


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


def idle_device(device: str, host: str, has_data: bool, cause: dict | None, cause_episodes: list[dict],
                columns: Sequence[str] = COLUMNS) -> dict:
    """A device shown as idle in one line: no chart, empty series; its slow episodes' cause all the same."""
    return {"device": device, "host": host, "verdict": f"{device}: {'idle' if has_data else 'no data'}",
            "ok": True if has_data else None, "idle": True, "charted": False, "series": {c: [] for c in columns},
            "cause": cause, "cause_episodes": cause_episodes}


def charted_device(timeline: Timeline, shown: Timeline, verdict: str, ok: bool | None, load_failed: str | None,
                   phases: list[Phase], throttled: list[tuple[float, float]], cause: dict | None, cause_episodes: list[dict],
                   columns: Sequence[str] = COLUMNS) -> dict:
    """A charted device: its headline, the windows its throttling alert held, the cause of its slow episodes, its phases,
    and ``shown``'s points (exactly those drawn) of ``columns`` (the column table's drawn ones)."""
    return {"device": timeline.device, "host": timeline.host, "verdict": verdict, "ok": ok, "idle": False, "charted": True,
            "load_failed": load_failed,
            "throttled": [[a, b] for a, b in throttled],  # the headline's windows: when the throttling alert held
            "cause": cause, "cause_episodes": cause_episodes,
            "downsampled": shown.downsampled, "interval": timeline.interval,
            "phases": [{"kind": p.kind, "label": p.label, "start": p.start, "end": p.end, "failed": p.failed or None,
                        **{k: (None if math.isnan(v) else v) for k, v in p.stats.items()}} for p in phases],
            "series": {c: [[t, v] for t, v in shown.values(c)] for c in columns}}


def diagnosis(start: float, end: float, runs: list[RunWindow], devices: list[dict], alerts: list[dict]) -> dict:
    """A diagnosis's part of report.json: its window, every run in it, the devices (``idle_device``, ``charted_device``)
    and the alert rules that fired, by name (the page says what they mean, and names them only in its details section)."""
    return {"kind": "diagnosis", "window": {"start": start, "end": end},
            "runs": [{"job": r.job, "start": r.start, "end": r.end, "device": r.device, "host": r.host, "label": r.label,
                      "profile": r.profile, "target": r.target, "iops": r.iops, "failed": r.failed or None} for r in runs],
            "devices": devices, "alerts": alerts}
