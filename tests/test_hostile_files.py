"""Hostile input, fourth round, the exporter's low items (issue 24): a result file unreadable for a while,
a non-JSON ``*.json`` with secrets in it, ``--target.cgroup`` on any directory, undecodable names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from fioscope_testkit.binaries import require
from fioscope_testkit.cli import fioscope
from fioscope_testkit.net import wait_for
from fioscope_testkit.paths import FIO_OUTPUTS, checkout_env
from helpers.exposition import sample
from helpers.results import settle

# the store's scan as an unprivileged user: imported as root, then privileges dropped; one scan per input line
UNPRIVILEGED_SCAN = """
import json, os, sys
from fioscope.config import load_config
from fioscope.store import Store
store = Store(load_config(None, sys.argv[1]))
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
for _ in sys.stdin:
    store.scan()
    print(json.dumps({"runs": sum(s.runs for s in store.jobs.values()), "errors": store.parse_errors}), flush=True)
"""


def test_a_mode_000_result_file_is_read_once_it_is_chmodded(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("drops privileges to nobody: needs root")
    results = Path(tempfile.mkdtemp(prefix="fioscope-mode000-"))  # pytest's tmp is 0700 root: closed to nobody
    try:
        results.chmod(0o755)
        result = results / "etcd.json"
        shutil.copy(FIO_OUTPUTS / "fio-3.33" / "etcd.json+", result)
        settle(result)
        result.chmod(0)
        scan = subprocess.Popen([sys.executable, "-c", UNPRIVILEGED_SCAN, str(results)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=checkout_env())
        assert scan.stdin is not None and scan.stdout is not None

        def scanned() -> dict:
            scan.stdin.write("scan\n")
            scan.stdin.flush()
            return json.loads(scan.stdout.readline())

        try:
            assert scanned() == {"runs": 0, "errors": 1}  # unreadable: counted once
            assert scanned() == {"runs": 0, "errors": 1}
            result.chmod(0o644)  # neither mtime nor size change
            assert scanned() == {"runs": 1, "errors": 1}  # read now, published once
            assert scanned() == {"runs": 1, "errors": 1}
        finally:
            _, err = scan.communicate(timeout=10)  # closes its stdin: the loop ends
        assert "Permission denied" in err and "Traceback" not in err
    finally:
        shutil.rmtree(results)


def test_a_non_json_file_is_logged_by_name_never_by_content(tmp_path, exporter_factory):
    exp = exporter_factory()
    secret = exp.results / "credentials.json"
    secret.write_text("aws_secret_access_key = hunter2-very-secret\npassword: also-secret\n")
    settle(secret)
    wait_for(lambda: sample(exp.metrics(), "fioscope_result_parse_errors_total") == 1, 20, what="the file rejected")
    line = next(line for line in exp.logs().splitlines() if "credentials.json" in line)
    assert "rejected" in line and "no fio JSON document" in line
    assert "hunter2" not in exp.logs() and "also-secret" not in exp.logs()


@pytest.mark.parametrize("command", ["run", "capture"])
def test_target_cgroup_must_be_a_real_cgroup(tmp_path, command):
    require("fio")
    fake = tmp_path / "not-a-cgroup"
    fake.mkdir()
    (fake / "cgroup.procs").write_text("")
    (tmp_path / "target").mkdir()
    if command == "run":
        argv = ["run", "etcd-wal", "--target.dir", tmp_path / "target", "--results.dir", tmp_path / "results", "--env", "SIZE=256k"]
    else:
        plan = tmp_path / "plan.yaml"
        plan.write_text("phases:\n  - {idle: 1s}\n")
        argv = ["capture", "--target.dir", tmp_path / "target", "--output", tmp_path / "bundle", "--plan", plan]
    for cgroup, problem in ((fake, "not on a cgroup filesystem"), (tmp_path / "target", "not a cgroup directory")):
        done = fioscope(*argv, "--target.cgroup", cgroup, timeout=120)
        assert done.returncode == 2, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "--target.cgroup" in lines[0] and problem in lines[0], done.stderr
    assert (fake / "cgroup.procs").read_text() == ""  # no pid written into an ordinary file
    assert not list((tmp_path / "target").iterdir())


def test_a_config_files_target_cgroup_must_be_a_real_cgroup(tmp_path):
    """The config file's ``cgroup:`` gets --target.cgroup's check: a directory with a cgroup.procs file, anywhere but
    a cgroup filesystem, would have fio's pid written into an ordinary file."""
    fake = tmp_path / "not-a-cgroup"
    fake.mkdir()
    (fake / "cgroup.procs").write_text("")
    (tmp_path / "target").mkdir()
    for cgroup, problem in ((fake, "not on a cgroup filesystem"), (tmp_path / "target", "not a cgroup directory")):
        config = tmp_path / "fioscope.yaml"
        config.write_text(f"targets:\n  - {{name: t, directory: {tmp_path / 'target'}, cgroup: {cgroup}}}\n")
        done = fioscope("check", "--config.file", config, timeout=60)
        assert done.returncode != 0, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "targets[0].cgroup" in lines[0] and problem in lines[0], done.stderr
    assert (fake / "cgroup.procs").read_text() == ""


def test_an_undecodable_target_directory_name_is_no_traceback(tmp_path):
    """A lone surrogate (a name of undecodable bytes) in what fioscope prints or decodes never raises."""
    require("fio")
    target = Path(os.fsdecode(bytes(tmp_path) + b"/t\xff"))
    target.mkdir()
    job = tmp_path / "small.fio"
    job.write_text("[small]\ndirectory=${TARGET_DIR}\nrw=write\nbs=4k\nsize=64k\nfilename=f\n")
    done = subprocess.run([sys.executable, "-m", "fioscope", "run", job, "--target.dir", target, "--results.dir",
                           tmp_path / "results"], capture_output=True, timeout=120,
                          env={**checkout_env(), "PYTHONIOENCODING": "utf-8:strict"})
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    assert "Traceback" not in out and "UnicodeDecodeError" not in out and "UnicodeEncodeError" not in out, out


LAUGHS = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else ', '.join(['lol'] * 9)}]\n" for i in range(9))


@pytest.mark.parametrize("name", ["alias-bomb", "deep-nesting", "fifo", "dev-zero"])
def test_the_one_yaml_loader_refuses_hostile_config_files(tmp_path, name):
    """Anchors/aliases, 5,000-deep nesting, a FIFO and /dev/zero as --config.file: one line, exit 2, at once."""
    path = tmp_path / "fioscope.yaml"
    if name == "alias-bomb":
        path.write_text(LAUGHS + "results_dir: *l8\n")
    elif name == "deep-nesting":
        path.write_text("results_dir: " + "[" * 5000 + "]" * 5000 + "\n")
    elif name == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    started = time.monotonic()
    done = fioscope("check", "--config.file", path, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert time.monotonic() - started < 20
