"""``python -m fioscope_mixin.hosts add``: hostile names and addresses (tests/helpers/corpus.py) are refused with one line, nothing is written,
and the generated Prometheus config with every host file still passes a real ``promtool check config``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import corpus
from helpers.binaries import require
from helpers.native_stack import write_stack_files

HOSTS = [sys.executable, "-m", "fioscope_mixin.hosts"]


def _prometheus_config(root: Path, hosts: Path) -> Path:
    """The repository's generated prometheus.yml with hosts_dir pointing at ``hosts``."""
    return write_stack_files(root, [f"stack.hosts_dir={hosts}"])


def _promtool_check(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([require("promtool"), "check", "config", str(config)], capture_output=True, text=True, check=False)


def test_hostile_host_arguments_are_refused_and_promtool_passes(tmp_path):
    hosts = tmp_path / "hosts"
    config = _prometheus_config(tmp_path / "root", hosts)
    for name, node, fioscope in corpus.GOOD_HOSTS:
        done = subprocess.run([*HOSTS, "--dir", str(hosts), "add", "--", name, node, fioscope], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    before = {p.name: p.read_text() for p in hosts.iterdir()}
    check = _promtool_check(config)
    assert check.returncode == 0, check.stdout + check.stderr
    accepted = []
    for name, node, fioscope in corpus.HOSTILE_HOSTS:
        done = subprocess.run([*HOSTS, "--dir", str(hosts), "add", "--", name, node, fioscope], capture_output=True, text=True, check=False)
        lines = done.stderr.splitlines()
        if not (done.returncode == 2 and len(lines) == 1 and lines[0].startswith("hosts.py: ") and "Traceback" not in done.stderr):
            accepted.append((name, node, fioscope, done.returncode, done.stderr))
    assert not accepted
    assert {p.name: p.read_text() for p in hosts.iterdir()} == before  # nothing written, nothing replaced
    check = _promtool_check(config)
    assert check.returncode == 0, check.stdout + check.stderr
    # control: promtool does read the host files (a file as the old hosts.py wrote for "db-7\n" fails it)
    (hosts / "control.yml").write_text("# host db-7\n: written by fioscope_mixin.hosts\n- targets: [a:1]\n")
    assert _promtool_check(config).returncode != 0
