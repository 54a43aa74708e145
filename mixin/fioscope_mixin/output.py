"""Write the generated files, or with --check compare them with what is committed and show the difference."""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path


def write_file(path: Path, text: str, private: bool = False) -> None:
    """``text`` into ``path`` (its folders made); ``private`` (a secret inside): 0600 whatever the file was before."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600 if private else 0o644)
    with os.fdopen(fd, "w") as out:
        if private:
            os.fchmod(out.fileno(), 0o600)  # an older copy may be 0644
        out.write(text)


def write_or_check(files: dict[Path, str], check: bool, private: frozenset[Path] = frozenset()) -> int:
    """Write ``files`` (those in ``private`` 0600), or compare them with what is on disk."""
    stale = []
    for path, text in files.items():
        if check:
            current = path.read_text() if path.exists() else ""
            if current != text:
                stale.append(str(path))
                diff = difflib.unified_diff(current.splitlines(True), text.splitlines(True), str(path), f"{path} (generated)")
                sys.stdout.writelines(diff)
        else:
            write_file(path, text, path in private)
    if stale:
        print(f"fioscope_mixin: out of date: {', '.join(stale)} (run python3 -m fioscope_mixin generate)", file=sys.stderr)
        return 1
    return 0
