"""Write the generated files, or with --check compare them with what is committed and show the difference."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path


def write_or_check(files: dict[Path, str], check: bool) -> int:
    stale = []
    for path, text in files.items():
        if check:
            current = path.read_text() if path.exists() else ""
            if current != text:
                stale.append(str(path))
                diff = difflib.unified_diff(current.splitlines(True), text.splitlines(True), str(path), f"{path} (generated)")
                sys.stdout.writelines(diff)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"fioscope_mixin: out of date: {', '.join(stale)} (run python3 -m fioscope_mixin generate)", file=sys.stderr)
        return 1
    return 0
