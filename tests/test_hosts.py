"""``python -m fioscope_mixin.hosts add``: hostile names and addresses (testkit/fioscope_testkit/corpus.py) are refused with one line, nothing is written,
and the generated Prometheus config with every host file still passes a real ``promtool check config``. Adding to a host merges its
targets (a real Prometheus scrapes each once); a target of another host is refused; a planted symbolic link is never followed; an
installed (not editable) package never writes into the Python installation; a hosts_dir that is not a folder of its own is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fioscope_mixin import CHECKOUT
from fioscope_testkit import corpus
from fioscope_testkit.binaries import require
from fioscope_testkit.cli import run
from fioscope_testkit.native_stack import write_stack_files
from fioscope_testkit.net import free_port, wait_for
from fioscope_testkit.prometheus import Prometheus
from helpers.fleet import run_hosts

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


def one_line_refusal(done: subprocess.CompletedProcess, *words: str) -> None:
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, (done.returncode, done.stdout, done.stderr)
    assert all(w in lines[0] for w in words), (words, lines[0])


def test_adding_to_a_host_merges_its_targets_and_a_target_of_another_host_is_refused(tmp_path):
    """The capture listener (docs/reports.md) added under an existing host joins its exporter (both scraped, the node_exporter
    once); under a second name, the node_exporter it shares is refused in one line and nothing is written."""
    require("prometheus")
    hosts = tmp_path / "hosts"
    node, exporter, capture = (f"127.0.0.1:{free_port()}" for _ in range(3))
    assert run_hosts("--dir", hosts, "add", "db-7", node, exporter).returncode == 0
    again = run_hosts("--dir", hosts, "add", "db-7", node, capture)  # the capture's --web.listen-address
    assert again.returncode == 0, again.stderr
    before = (hosts / "db-7.yml").read_text()
    refused = run_hosts("--dir", hosts, "add", "db-7-capture", node, f"127.0.0.1:{free_port()}")
    one_line_refusal(refused, "NODE_ADDR", node, "db-7")
    assert sorted(p.name for p in hosts.iterdir()) == ["db-7.yml"] and (hosts / "db-7.yml").read_text() == before
    # the same address as the fioscope job of another host is refused too
    one_line_refusal(run_hosts("--dir", hosts, "add", "db-8", f"127.0.0.1:{free_port()}", capture), "FIOSCOPE_ADDR", "db-7")
    prom = Prometheus.generated(tmp_path / "prom", [f"stack.hosts_dir={hosts}", "stack.scrape_interval=1s",
                                                    *[f"stack.ports.{k}={free_port()}" for k in ("node_exporter", "fioscope", "alertmanager")]])
    try:
        def scraped() -> list[tuple[str, str]]:
            return sorted((t["labels"]["job"], t["labels"]["instance"]) for t in prom.client.targets()
                          if t["labels"].get("host") == "db-7")

        wait_for(lambda: len(scraped()) >= 3, 20, what="db-7's targets")
        assert scraped() == sorted([("fioscope", exporter), ("fioscope", capture), ("node", node)])
    finally:
        prom.stop()


def test_a_planted_symbolic_link_is_never_followed(tmp_path):
    hosts, victim = tmp_path / "hosts", tmp_path / "victim.yml"
    hosts.mkdir()
    victim.write_text("- targets: ['10.9.9.9:1']\n  labels: {secret: kept}\n")
    (hosts / ".db-7.yml.tmp").symlink_to(victim)  # where hosts.py wrote before its rename
    added = run_hosts("--dir", hosts, "add", "db-7", "10.0.0.7:9100", "10.0.0.7:7963")
    assert added.returncode == 0, added.stderr
    assert victim.read_text() == "- targets: ['10.9.9.9:1']\n  labels: {secret: kept}\n"
    assert (hosts / ".db-7.yml.tmp").is_symlink() and not (hosts / "db-7.yml").is_symlink()
    assert [g["targets"] for g in yaml.safe_load((hosts / "db-7.yml").read_text())] == [["10.0.0.7:9100"], ["10.0.0.7:7963"]]
    assert (hosts / "db-7.yml").stat().st_mode & 0o777 == 0o644  # Prometheus runs as another user in compose
    # a host file that is a link: refused (merging would copy what it points at into a file of the hosts folder)
    (hosts / "db-9.yml").symlink_to(victim)
    one_line_refusal(run_hosts("--dir", hosts, "add", "db-9", "10.0.0.9:9100", "10.0.0.9:7963"), "db-9.yml")
    assert victim.read_text() == "- targets: ['10.9.9.9:1']\n  labels: {secret: kept}\n"
    assert sorted(p.name for p in hosts.iterdir()) == [".db-7.yml.tmp", "db-7.yml", "db-9.yml"]  # no temporary file left


def test_an_installed_package_never_writes_into_the_python_installation(tmp_path):
    """fioscope_mixin copied as pip installs it (not editable): the checkout-relative hosts folder would be inside the
    Python library folder; hosts add refuses in one line naming --dir, and --dir works."""
    site = tmp_path / "lib" / "python3" / "site-packages"
    shutil.copytree(CHECKOUT / "mixin" / "fioscope_mixin", site / "fioscope_mixin", symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(site)}
    hosts = [sys.executable, "-m", "fioscope_mixin.hosts"]
    where = run([sys.executable, "-c", "import fioscope_mixin; print(fioscope_mixin.__file__)"], env=env)
    assert where.stdout.strip() == str(site / "fioscope_mixin" / "__init__.py")  # the copy, not the checkout
    one_line_refusal(run([*hosts, "add", "db-7", "10.0.0.7:9100", "10.0.0.7:7963"], env=env, cwd=tmp_path), "--dir")
    assert not [p for p in tmp_path.rglob("*.yml")]
    done = run([*hosts, "--dir", tmp_path / "hosts", "add", "db-7", "10.0.0.7:9100", "10.0.0.7:7963"], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [p.relative_to(tmp_path) for p in tmp_path.rglob("*.yml")] == [Path("hosts/db-7.yml")]


@pytest.mark.parametrize("value", ["''", ".", "./", "..", "/", "123", "'h*'", "[a]"])
def test_a_hosts_dir_that_is_not_a_folder_of_its_own_is_refused_in_one_line(tmp_path, value):
    """'' globbed /*.yml, '.' read prometheus.yml itself as host files, 123 was a traceback: the generator and the
    native launcher refuse each in one line naming the key, before anything is written or started."""
    generate = run([sys.executable, "-m", "fioscope_mixin", "generate", "--only", "prometheus", "--out", tmp_path / "out",
                    "--set", f"stack.hosts_dir={value}"])
    one_line_refusal(generate, "stack.hosts_dir")
    assert not (tmp_path / "out").exists()
    native = run([sys.executable, "-m", "fioscope_mixin.native", "--data-dir", tmp_path / "data", "--set", f"stack.hosts_dir={value}"],
                 timeout=60)
    assert native.returncode != 0 and len(native.stderr.splitlines()) == 1 and "stack.hosts_dir" in native.stderr, native.stderr
    assert not (tmp_path / "data").exists()
