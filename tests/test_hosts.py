"""``stack/hosts.py add``: hostile names and addresses (tests/corpus.py) are refused with one line, nothing is written,
and the generated Prometheus config with every host file still passes a real ``promtool check config``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import corpus
from conftest import REPO, require

HOSTS = [sys.executable, str(REPO / "stack" / "hosts.py")]


def _prometheus_config(root: Path, hosts: Path) -> Path:
    """The repository's generated prometheus.yml (stack/native.py's generator) with hosts_dir pointing at ``hosts``."""
    sys.path[:0] = [str(REPO / "stack")]
    from fioscope.settings import load_settings
    from native import _generator

    for rel, text in _generator().render(load_settings([f"stack.hosts_dir={hosts}"])).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "provisioning" / "prometheus" / "prometheus.yml"


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
    (hosts / "control.yml").write_text("# host db-7\n: written by stack/hosts.py\n- targets: [a:1]\n")
    assert _promtool_check(config).returncode != 0
