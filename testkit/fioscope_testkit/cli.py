"""Running commands: any command, and the ``fioscope`` CLI of this checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fioscope_testkit.paths import checkout_env


def run(argv, timeout: float = 300, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """``argv`` run to completion: text stdout and stderr captured, a non-zero exit returned (not raised)."""
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, check=False)


def fioscope_command(*args) -> list[str]:
    """The argv of ``python -m fioscope ARGS`` (for a process a test starts and stops itself, like ``serve``)."""
    return [sys.executable, "-m", "fioscope", *map(str, args)]


def fioscope(*args, timeout: float = 300, cwd: Path | None = None, tty: bool = False) -> subprocess.CompletedProcess:
    """``fioscope ARGS`` of this checkout, run to completion; ``tty``: under a pseudo-terminal, as a person at a shell sees it."""
    env = checkout_env()
    cmd = fioscope_command(*args)
    if tty:
        env.pop("CI", None)  # CI turns the terminal progress off
        cmd = ["script", "-qec", " ".join(f"'{c}'" for c in cmd), "/dev/null"]
    return run(cmd, timeout=timeout, cwd=cwd, env=env)
