"""The write guard against real fio: every known bypass is refused and writes nothing outside the target.

Each test lays out ``tmp/target`` (the target), ``tmp/sentinel`` (next to it: what a bypass
writes to) and ``tmp/results``, runs the real ``fioscope`` CLI, and asserts on the filesystem.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from fioscope_testkit.cli import fioscope, fioscope_command
from fioscope_testkit.net import free_port, wait_for
from fioscope_testkit.paths import FIXTURES, REPO, checkout_env

GUARD = FIXTURES / "jobs" / "guard"

# job file, extra --env, what the one-line refusal names
BYPASSES = [
    ("bypass-repeated-section.fio", {}, r"\[j\] \[section\]: repeats a section"),
    ("bypass-directory-colons.fio", {}, r"\[j\] directory=.*/sentinel:.*: outside the target directory"),
    ("bypass-exec-prerun.fio", {}, r"\[j\] exec_prerun=touch .*: runs a command"),
    ("bypass-exec-postrun.fio", {}, r"\[j\] exec_postrun=touch .*: runs a command"),
    ("bypass-include.fio", {}, r"\[j\] include: includes another file"),
    ("bypass-second-global.fio", {}, r"\[global\] \[global\]: is a second \[global\] section"),
    ("bypass-filename-format.fio", {}, r"\[j\] filename_format=../sentinel/\$jobname.*: outside the target directory"),
    ("bypass-option-name-variable.fio", {"OPT": "filename"}, r"\[j\] \$\{OPT\}: takes the option name from a variable"),
    ("bypass-line-variable.fio", {"EXTRA": "filename={sentinel}/line-variable"}, r"\[j\] \$\{EXTRA\}: takes the option name"),
    ("bypass-jobname-path.fio", {}, r"\[../sentinel/jobname\] filename_format=\$jobname.*: outside the target directory"),
    ("bypass-symlink-inside.fio", {}, r"\[j\] filename=link/through-symlink: outside the target directory .*opens .*/sentinel/"),
    ("bypass-hardlink.fio", {}, r"\[j\] filename=hardlink: .*/target/hardlink has 2 hard links"),
    ("bypass-engine-net.fio", {}, r"\[j\] ioengine=net: this engine reaches devices, the network"),
    ("bypass-engine-sg.fio", {}, r"\[j\] ioengine=sg: this engine reaches devices"),
    ("bypass-device.fio", {}, r"\[j\] filename=/dev/null: outside the target directory"),
]
# what fio really does with them when the target is destructive (proves each was a real bypass)
WRITES_OUTSIDE = [name for name, _, _ in BYPASSES if not name.startswith(("bypass-engine", "bypass-device"))]

ALLOWED = {
    "allowed-numjobs.fio": ["j.0.0", "j.1.0", "j.2.0"],
    "allowed-several-jobs.fio": ["a.0.0", "b.0.0", "c.0.0"],
    "allowed-filename.fio": ["data.bin"],
    "allowed-filename-absolute.fio": ["abs.bin", "abs2.bin"],
    "allowed-subdirectory.fio": None,  # two files spread over sub/ and sub/deeper/
    "allowed-filename-format.fio": ["fmt.j.0.0"],
    "allowed-logs.fio": ["j.0.0", "bw_bw.1.log", "lat_lat.1.log"],
}


@pytest.fixture
def layout(tmp_path):
    target, sentinel = tmp_path / "target", tmp_path / "sentinel"
    for d in (target, sentinel, target / "sub" / "deeper"):
        d.mkdir(parents=True)
    (target / "link").symlink_to(sentinel)
    (sentinel / "precious").write_bytes(b"keep me\n" * 16384)  # 128 KiB: fio writes into it rather than laying it out anew
    os.link(sentinel / "precious", target / "hardlink")
    return tmp_path


def outside_target(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` that is not in target/ or results/, with its size and mtime."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        if rel.parts[:1] in (("target",), ("results",)):
            continue
        for name in dirnames + filenames:
            if not rel.parts and name in ("target", "results"):
                continue
            path = Path(dirpath, name)
            out[str(path.relative_to(root))] = (path.lstat().st_size, path.lstat().st_mtime_ns)
    return out


def sentinel_state(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in (root / "sentinel").rglob("*")}


def env_args(env: dict[str, str], root: Path) -> list[str]:
    return [a for k, v in env.items() for a in ("--env", f"{k}={v.format(sentinel=root / 'sentinel')}")]


def destructive_config(root: Path) -> Path:
    path = root / "results" / "destructive.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({"results_dir": str(root / "results"),
                                    "targets": [{"name": "scratch", "directory": str(root / "target"), "destructive": True}]}))
    return path


@pytest.mark.parametrize("job,env,message", BYPASSES, ids=[b[0] for b in BYPASSES])
def test_bypass_is_refused_by_run_and_check(job, env, message, layout):
    before = outside_target(layout)
    proc = fioscope("run", str(GUARD / job), "--target.dir", str(layout / "target"), "--results.dir", str(layout / "results"),
                    *env_args(env, layout), "--env", "SIZE=64k", cwd=layout / "target")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and lines[0].startswith(f"fioscope: {GUARD / job}: "), lines
    assert __import__("re").search(message, lines[0]), lines[0]
    assert "not marked destructive" in lines[0]
    assert outside_target(layout) == before
    assert not list((layout / "target").glob("*.0*")) and not (layout / "results").exists()
    # fioscope check judges a job named on the command line the same way
    check = fioscope("check", str(GUARD / job), "--target.dir", str(layout / "target"))
    assert check.returncode == 2 and __import__("re").search(message, check.stderr), check.stdout + check.stderr


@pytest.mark.parametrize("job", WRITES_OUTSIDE)
def test_same_file_runs_on_a_destructive_target(job, layout):
    env = dict(next(e for n, e, _ in BYPASSES if n == job))
    before = sentinel_state(layout)
    proc = fioscope("run", str(GUARD / job), "--config.file", str(destructive_config(layout)), "--target", "scratch",
                    *env_args(env, layout), cwd=layout / "target")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "result:" in proc.stdout
    assert sentinel_state(layout) != before, "the job was a real bypass: it writes next to the target"


@pytest.mark.parametrize("job", sorted(ALLOWED))
def test_allowed_jobs_pass_the_guard_and_run(job, layout):
    before = outside_target(layout)
    proc = fioscope("run", str(GUARD / job), "--target.dir", str(layout / "target"), "--results.dir", str(layout / "results"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outside_target(layout) == before
    made = {str(p.relative_to(layout / "target")) for p in (layout / "target").rglob("*") if p.is_file()}
    if ALLOWED[job] is None:
        assert len([m for m in made if m.startswith("sub/")]) == 2, made
    else:
        assert set(ALLOWED[job]) <= made, made


def test_check_lists_and_passes_every_shipped_profile():
    proc = fioscope("check", cwd=Path("/"))
    assert proc.returncode == 0, proc.stderr
    shipped = sorted(p.stem for p in (REPO / "fio-jobs").glob("*.fio"))
    assert proc.stdout.strip().endswith(f"{len(shipped)} job files: {', '.join(shipped)})")


def test_check_exits_nonzero_on_any_refusal_among_many(layout):
    proc = fioscope("check", "etcd-wal", str(GUARD / "bypass-exec-prerun.fio"), str(GUARD / "allowed-numjobs.fio"),
                    str(GUARD / "bypass-include.fio"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and "exec_prerun" in lines[0] and "include" in lines[1], lines


def _config(root: Path, directory: Path | str, job: str = "etcd-wal", env: dict | None = None, destructive: bool = False) -> Path:
    path = root / "fioscope.yaml"
    path.write_text(yaml.safe_dump({
        "results_dir": str(root / "results"), "scan_interval": "1s",
        "targets": [{"name": "disk", "directory": str(directory), "destructive": destructive}],
        "schedule": [{"job": job, "target": "disk", "env": env or {}}],
    }))
    return path


def test_schedule_entry_env_bypass_is_refused_by_check_and_serve(layout):
    env = {"EXTRA": f"filename={layout / 'sentinel' / 'from-schedule'}"}
    config = _config(layout, layout / "target", str(GUARD / "bypass-line-variable.fio"), env)
    check = fioscope("check", "--config.file", str(config))
    assert check.returncode == 2 and "${EXTRA}: takes the option name from a variable" in check.stderr, check.stderr
    before = outside_target(layout)
    port = free_port()
    serve = subprocess.Popen(fioscope_command("serve", "--config.file", config, "--web.listen-address", f"127.0.0.1:{port}"),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=checkout_env())
    try:
        log: list[str] = []

        def refused() -> bool:
            log.append(serve.stdout.readline())
            return "takes the option name from a variable" in log[-1]

        wait_for(refused, timeout=20, interval=0, what="the schedule's refusal in the log")
        assert serve.poll() is None, "one refused entry must not stop the server"
    finally:
        serve.terminate()
        serve.wait(timeout=10)
    after = outside_target(layout)
    assert {k: v for k, v in after.items() if k != "fioscope.yaml" and not k.startswith("results")} == \
        {k: v for k, v in before.items() if k != "fioscope.yaml"}
    assert sentinel_state(layout) == {"sentinel/precious": before["sentinel/precious"]}


@pytest.mark.parametrize("link_to", ["/", "{root}/target/../../../../../../../../etc", "/dev/null"])
def test_target_resolving_to_the_system_is_refused(link_to, layout):
    link = layout / "target-link"
    link.symlink_to(link_to.format(root=layout))
    proc = fioscope("run", "etcd-wal", "--target.dir", str(link), "--results.dir", str(layout / "results"), "--env", "SIZE=64k")
    assert proc.returncode == 2, proc.stderr
    assert "--target.dir: directory" in proc.stderr and ("system directory" in proc.stderr or "is a device" in proc.stderr)
    check = fioscope("check", "--config.file", str(_config(layout, link)))
    assert check.returncode == 2 and "targets[0]: directory" in check.stderr
    assert len(check.stderr.strip().splitlines()) == 1
    # marked destructive, the same config loads (and is not run here)
    assert fioscope("check", "--config.file", str(_config(layout, link, destructive=True))).returncode == 0


def test_variable_with_a_line_break_is_refused(layout):
    from fioscope.jobs import JobFileError, load_job

    with pytest.raises(JobFileError, match=r"\$\{TARGET_DIR\} holds a line break"):
        load_job(GUARD / "allowed-filename.fio", {"TARGET_DIR": f"{layout / 'target'}\nfilename=/dev/null"})
