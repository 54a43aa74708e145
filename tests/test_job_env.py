"""A job's environment never picks the program that runs (issue 24, item 2): ``PATH``, ``LD_*`` and the
like are refused in every job environment (serve schedule, ``fioscope run --env``, a capture plan), and
fio is run by its absolute path found on fioscope's own PATH. Each test plants a fake ``fio`` that
leaves a mark when run, and asserts it never ran."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from fioscope_testkit.binaries import require
from fioscope_testkit.cli import fioscope


@pytest.fixture
def planted(tmp_path) -> tuple[Path, Path]:
    """(a directory holding a ``fio`` that touches ``mark`` and then runs the real fio, mark)."""
    require("fio")
    evil = tmp_path / "evil"
    evil.mkdir()
    mark = tmp_path / "PWNED"
    (evil / "fio").write_text(f"#!/bin/sh\ntouch {mark}\nexec {shutil.which('fio')} \"$@\"\n")
    (evil / "fio").chmod(0o755)
    (tmp_path / "target").mkdir()
    return evil, mark


def _one_line(stderr: str, *names: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    for name in names:
        assert name in lines[0], lines[0]


@pytest.mark.parametrize("key", ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "GCONV_PATH", "PYTHONPATH", "BASH_ENV"])
def test_check_refuses_a_schedule_env_that_picks_the_program_and_runs_nothing(tmp_path, planted, key):
    evil, mark = planted
    config = tmp_path / "fioscope.yaml"
    value = f"{evil}:/usr/bin:/bin" if key == "PATH" else str(evil / "fio")
    config.write_text(f"results_dir: {tmp_path / 'results'}\ntargets: [{{name: d, directory: {tmp_path / 'target'}}}]\n"
                      f"schedule:\n  - {{job: etcd-wal, target: d, env: {{{key}: \"{value}\", SIZE: 512k}}}}\n")
    done = fioscope("check", "--config.file", config, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    _one_line(done.stderr, str(config), f"schedule[0].env: {key}: refused")
    assert not mark.exists()


def test_run_env_refuses_path_and_ld_preload(tmp_path, planted):
    evil, mark = planted
    for item in (f"PATH={evil}:/usr/bin:/bin", f"LD_PRELOAD={evil}/x.so", "ld_audit=x"):
        done = fioscope("run", "etcd-wal", "--target.dir", tmp_path / "target", "--results.dir", tmp_path / "results",
                        "--env", "SIZE=512k", "--env", item, timeout=60)
        assert done.returncode == 2, done.stdout + done.stderr
        _one_line(done.stderr, "--env", f"{item.partition('=')[0]}: refused")
    assert not mark.exists() and not list((tmp_path / "target").iterdir())


def test_capture_plan_env_refuses_path(tmp_path, planted):
    evil, mark = planted
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"phases:\n  - {{job: etcd-wal, duration: 2s, env: {{PATH: \"{evil}:/usr/bin:/bin\"}}}}\n")
    done = fioscope("capture", "--target.dir", tmp_path / "target", "--output", tmp_path / "bundle", "--plan", plan, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    _one_line(done.stderr, str(plan), "phases[0].env: PATH: refused")
    done = fioscope("capture", "--target.dir", tmp_path / "target", "--output", tmp_path / "bundle2", "--env", "LD_PRELOAD=/x.so",
                    timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    _one_line(done.stderr, "--env", "LD_PRELOAD: refused")
    assert not mark.exists()


def test_a_job_file_default_cannot_set_path_either(tmp_path, planted):
    evil, mark = planted
    job = tmp_path / "job.fio"
    job.write_text(f"; default: PATH={evil}:/usr/bin:/bin\n[j]\nrw=write\nsize=64k\nfilename=f\n")
    done = fioscope("run", job, "--target.dir", tmp_path / "target", "--results.dir", tmp_path / "results", timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    _one_line(done.stderr, str(job), "PATH: refused")
    assert not mark.exists()


def test_fio_is_resolved_on_fioscopes_own_path(tmp_path, planted, monkeypatch):
    from fioscope.jobs import fio_executable

    evil, _ = planted
    assert fio_executable("fio") == shutil.which("fio", path=os.environ["PATH"])
    assert fio_executable(str(evil / "fio")) == str(evil / "fio")  # an explicit fio_binary is the operator's choice
    assert Path(fio_executable("fio")).is_absolute()
