"""Result files and fioscope config files as the tests lay them out."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import yaml
from fioscope_testkit.paths import REPO


def settle(*paths):
    """Age files dropped in by hand past the store's settle time, as if their writer finished a while ago."""
    from fioscope.store import SETTLE_SECONDS

    past = time.time() - SETTLE_SECONDS - 60
    for path in paths:
        os.utime(path, (past, past))


def result_docs(results_dir, prefix):
    """The fio JSON documents of ``prefix``'s result files (failure records left out), oldest name first."""
    return [json.loads(p.read_text()) for p in sorted(results_dir.glob(f"{prefix}-*.json")) if not p.name.endswith(".failure.json")]


def config_with_schedule(tmp_path, schedule: str, limits: str = "") -> tuple:
    """tmp_path/fioscope.yaml: one target ``disk`` (tmp_path/target, with ``limits`` YAML lines) and the ``schedule`` YAML lines.
    Returns (config path, target directory)."""
    target = tmp_path / "target"
    target.mkdir(exist_ok=True)
    config = tmp_path / "fioscope.yaml"
    config.write_text(f"""
results_dir: {tmp_path / 'results'}
scan_interval: 1s
status_interval: 1s
targets:
  - name: disk
    directory: {target}
    {limits}
schedule:
{schedule}
""")
    return config, target


def config_with_targets(path: Path, targets: list[dict]) -> Path:
    """``path``: the given targets, the repository's job files, 1 s scans; results next to it."""
    path.write_text(yaml.safe_dump({"results_dir": str(path.parent / "results"), "jobs_dir": str(REPO / "fio-jobs"),
                                    "scan_interval": "1s", "status_interval": "1s", "targets": targets}))
    return path
