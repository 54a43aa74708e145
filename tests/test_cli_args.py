"""Bad arguments to ``fioscope run`` / bad values in a config (issue 16, item 10): exit 2 with ONE line on stderr naming
the flag or file, before any fio runs and without a traceback. Each case ran fio, allocated gigabytes or exited 1 before."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest


def fioscope(*args: str, cwd: Path, env: dict | None = None, memory: int = 0) -> subprocess.CompletedProcess:
    def limit():  # a guard for the --repeat case: 4 GiB of job text would take the machine down, not fail the test
        if memory:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run([sys.executable, "-m", "fioscope", *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, **(env or {})}, preexec_fn=limit, check=False)


def one_line_exit_2(proc: subprocess.CompletedProcess, *words: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-2000:])
    assert all(word in lines[0] for word in words), lines[0]


@pytest.mark.parametrize("extra,words", [
    (["--limit", "write_iops=" + "9" * 400], ["--limit", "write_iops"]),
    (["--limit", "read_iops=1e999"], ["--limit", "read_iops"]),
    (["--limit", "read_iops=inf"], ["--limit", "read_iops"]),
    (["--fsync.threshold", "0"], ["--fsync.threshold"]),
    (["--fsync.threshold", "0ms"], ["--fsync.threshold"]),
    (["--iodepth", "4,4"], ["--iodepth", "4"]),
    (["--iodepth", "1,4,16", "--repeat", "100000000"], ["--repeat"]),
    (["--iodepth", ",".join(str(d) for d in range(1, 2000))], ["--iodepth"]),
])
def test_bad_run_arguments_are_one_line_exit_2(extra, words, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    proc = fioscope("run", "etcd-wal", "--target.dir", str(target), "--results.dir", str(tmp_path / "results"),
                    "--env", "SIZE=64k", *extra, cwd=tmp_path, memory=2 << 30)
    one_line_exit_2(proc, *words)
    assert not list(target.iterdir()), "fio ran"


def test_a_missing_target_directory_is_a_bad_argument(tmp_path):
    proc = fioscope("run", "etcd-wal", "--target.dir", str(tmp_path / "missing"), "--results.dir", str(tmp_path / "results"),
                    cwd=tmp_path)
    one_line_exit_2(proc, "--target.dir", str(tmp_path / "missing"))
    config = tmp_path / "fioscope.yaml"
    config.write_text(f"targets:\n  - name: gone\n    directory: {tmp_path / 'gone'}\n")
    proc = fioscope("run", "etcd-wal", "--config.file", str(config), "--target", "gone", "--results.dir", str(tmp_path / "r"), cwd=tmp_path)
    one_line_exit_2(proc, "gone", str(tmp_path / "gone"))


@pytest.mark.parametrize("directory,env,expected", [
    ("${FIOSCOPE_T_A:-${FIOSCOPE_T_B}}", {"FIOSCOPE_T_B": "from-b"}, "from-b"),
    ("${FIOSCOPE_T_A:-${FIOSCOPE_T_B}}", {"FIOSCOPE_T_A": "from-a"}, "from-a"),
    ("${FIOSCOPE_T_A:-${FIOSCOPE_T_B:-deep}}/x", {}, "deep/x"),
    ("pre-${FIOSCOPE_T_A:-a${FIOSCOPE_T_B:-b}c}-post", {}, "pre-abc-post"),
])
def test_nested_defaults_in_a_config_expand(directory, env, expected, tmp_path):
    """${A:-${B}} is B's value (as in compose files), never a literal '${B}' directory."""
    from fioscope.config import load_config

    config = tmp_path / "fioscope.yaml"
    config.write_text(f"targets:\n  - name: t\n    directory: '{directory}'\n")
    old = {k: os.environ.pop(k, None) for k in ("FIOSCOPE_T_A", "FIOSCOPE_T_B")}
    os.environ.update(env)
    try:
        assert load_config(config).targets[0].directory == (tmp_path / expected).resolve()
    finally:
        for k, v in old.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


@pytest.mark.parametrize("directory", ["${FIOSCOPE_T_A:-${FIOSCOPE_T_B}", "${FIOSCOPE_T_A:-x}}", "${FIOSCOPE_T_A:-${}}", "${1A}"])
def test_malformed_variables_in_a_config_are_one_line_exit_2(directory, tmp_path):
    config = tmp_path / "fioscope.yaml"
    config.write_text(f"targets:\n  - name: t\n    directory: '{directory}'\n")
    proc = fioscope("check", "--config.file", str(config), cwd=tmp_path)
    one_line_exit_2(proc, str(config), "directory")
    assert not any("$" in p.name or "{" in p.name for p in tmp_path.rglob("*")), "a literal ${...} directory was made"


@pytest.mark.parametrize("address", ["127.0.0.1:65536", "127.0.0.1:NaN", "127.0.0.1:99999999999999999999", "127.0.0.1:٣"])
def test_a_listen_address_beyond_the_ports_is_one_line_exit_2(address, tmp_path):
    """Issue 51 (low): 65536 was an OverflowError traceback from bind(); '٣' (str.isdigit) listened on port 3."""
    proc = fioscope("serve", "--results.dir", str(tmp_path / "results"), "--web.listen-address", address, cwd=tmp_path)
    one_line_exit_2(proc, "--web.listen-address", address)
