"""Files the package carries: the fio profiles and the runbook.

``fio-jobs/`` and ``docs/runbook.md`` at the top of the repository are the source; the package links them
(``fioscope/profiles``, ``fioscope/runbook.md``) and a built wheel holds copies, so an installed ``fioscope``
(venv, pipx, the image) finds them from any working directory. ``FIOSCOPE_JOBS_DIR``
still points elsewhere. alerts/config.yaml is fioscope_mixin's (``fioscope_mixin.settings``).
"""

from __future__ import annotations

import functools
import html
import os
import re
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def profiles_dir() -> Path:
    """Where the shipped fio profiles (``*.fio``) are."""
    return Path(os.environ.get("FIOSCOPE_JOBS_DIR") or _HERE / "profiles")


def _anchor(title: str) -> str:
    """A heading's anchor as GitHub makes it (the alerts' runbook_url ends in one: ``#fioscopediskthrottled``)."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


@functools.cache
def runbook_html() -> bytes:
    """docs/runbook.md as the exporter serves it at /runbook: headings with their anchors, the rest as written
    (escaped, in <pre>): read once, on the first request, never at import."""
    out = ["<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>fioscope runbook</title></head><body>"]
    block: list[str] = []

    def flush() -> None:
        if any(line.strip() for line in block):
            out.append("<pre>" + html.escape("\n".join(block).strip("\n")) + "</pre>")
        block.clear()

    for line in (_HERE / "runbook.md").read_text(encoding="utf-8").splitlines():
        heading = re.match(r"(#{1,6}) (.+)", line)
        if heading:
            flush()
            level, title = len(heading.group(1)), heading.group(2)
            out.append(f'<h{level} id="{html.escape(_anchor(title))}">{html.escape(title)}</h{level}>')
        else:
            block.append(line)
    flush()
    out.append("</body></html>")
    return "\n".join(out).encode()
