"""Issue 24, capture's side: ``fioscope capture`` and ``fioscope report`` as a careless or hostile user runs them.

Real processes throughout: fio writing into a directory under /var/tmp (no root, no lab disk), the
temporary Prometheus and promtool of the report stage, signals sent the way a terminal (the whole
process group) or a service manager (the process) sends them. The job files here are small fio jobs
written by the tests: one that fails on its first I/O (an unaligned direct read), one that ends long
before its phase, one whose layout is slow (its writes capped in a cgroup).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fioscope.blockdev import device_for_path
from fioscope_testkit.cli import fioscope, fioscope_command
from fioscope_testkit.paths import IOSTAT, checkout_env
from helpers.bundles import disk_directory
from helpers.lab import capped_cgroup
from helpers.report_page import Verdicts, open_in_chromium

JOB = """; default: BS=4k
; default: RUNTIME=10
[{name}]
directory=${{TARGET_DIR}}
rw={rw}
bs=${{BS}}
direct=1
size=8m
runtime={runtime}
time_based
ioengine=psync
"""


def job_file(tmp: Path, name: str, rw: str = "randread", runtime: str = "${RUNTIME}") -> Path:
    path = tmp / f"{name}.fio"
    path.write_text(JOB.format(name=name, rw=rw, runtime=runtime))
    return path


@pytest.fixture
def target() -> Iterator[Path]:
    with disk_directory("capture-hostile") as path:
        yield path


def one_line(proc: subprocess.CompletedProcess, code: int, *words: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr)
    assert all(w in lines[0] for w in words), (words, proc.stderr)
    return lines[0]


def processes_with(text: str) -> list[int]:
    """Living processes whose command line holds ``text`` (fio's job processes carry fio's command line)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                continue
            if text in cmdline and state != "Z":
                out.append(int(entry.name))
    return out


def plan_file(tmp: Path, text: str) -> Path:
    path = tmp / "plan.yaml"
    path.write_text(text)
    return path


# ---- item 8: hostile plan files, refused in one line before anything runs -----------------------------------

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(10)) + "phases: [*k]\n"


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # a bomb that gets expanded dies here, not the machine


@pytest.mark.parametrize("case", ["alias-bomb", "dev-zero", "fifo", "2000-phases", "two-days", "unknown-key", "unknown-top-key"])
def test_hostile_plan_files_are_one_line(tmp_path, target, case):
    if case == "alias-bomb":
        plan, words = plan_file(tmp_path, ALIAS_BOMB), ("aliases",)
    elif case == "dev-zero":
        plan, words = Path("/dev/zero"), ("not a regular file",)
    elif case == "fifo":
        plan, words = tmp_path / "plan.fifo", ("not a regular file",)
        os.mkfifo(plan)
    elif case == "2000-phases":
        plan, words = plan_file(tmp_path, "phases:\n" + "  - {job: cloud-sla-70-30, duration: 1s}\n" * 2000), ("2000 phases", "100")
    elif case == "two-days":
        plan, words = plan_file(tmp_path, "phases:\n  - idle: 1s\n  - {job: cloud-sla-70-30, duration: 2d}\n"), ("lasts 2d", "at most")
    elif case == "unknown-key":
        plan = plan_file(tmp_path, "phases:\n  - idle: 1s\n  - {job: cloud-sla-70-30, durration: 10s}\n")
        words = ("phases[1]", "'durration'")
    else:
        plan, words = plan_file(tmp_path, "phase:\n  - idle: 1s\n"), ("'phase'",)
    out = tmp_path / "out"
    started = time.monotonic()
    proc = subprocess.run(fioscope_command("capture", "--target.dir", target, "--output", out, "--plan", plan),
                          capture_output=True, text=True, timeout=60, env=checkout_env(), preexec_fn=_limited)
    one_line(proc, 2, "--plan", str(plan), *words)
    assert time.monotonic() - started < 15
    assert not out.exists() and not list(target.iterdir())


# ---- low items: flags refused in one line before anything runs ---------------------------------------------------

@pytest.mark.parametrize("flags", ["device-interval", "space", "listen"])
def test_bad_capture_flags_are_one_line_before_anything_runs(tmp_path, target, flags):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    taken = socket.create_server(("127.0.0.1", 0))  # a port another process listens on
    port = taken.getsockname()[1]
    cases = {"device-interval": [(["--device", "nosuchdisk0"], ("--device", "'nosuchdisk0'", "no such block device")),
                                 (["--interval", "1ms"], ("--interval 1ms", "100ms")),
                                 (["--interval", "2h"], ("--interval 2h", "1h"))],
             "space": [(["--env", "SIZE=100t"], ("--target.dir", "100 TiB", "free there", "SIZE="))],
             "listen": [(["--web.listen-address", f"127.0.0.1:{port}"], ("--web.listen-address", f"127.0.0.1:{port}", "in use")),
                        (["--web.listen-address", "nowhere"], ("--web.listen-address", "nowhere")),
                        # issue 51: 65536 exited 1 (the code of a failed load) from bind()'s OverflowError
                        (["--web.listen-address", "127.0.0.1:65536"], ("--web.listen-address", "127.0.0.1:65536")),
                        (["--web.listen-address", "127.0.0.1:NaN"], ("--web.listen-address", "127.0.0.1:NaN")),
                        (["--web.listen-address", "127.0.0.1:0", "--web.config.file", str(a_file)],
                         ("--web.config.file", str(a_file))),
                        (["--web.config.file", str(a_file)], ("--web.config.file", "only with --web.listen-address"))]}[flags]
    for args, words in cases:
        out = tmp_path / "out"
        one_line(fioscope("capture", "--target.dir", target, "--output", out, *args, timeout=60), 2, *words)
        assert not out.exists() and not list(target.iterdir()), args
    for output in (a_file, Path("/dev/null")) if flags == "space" else ():
        one_line(fioscope("capture", "--target.dir", target, "--output", output, timeout=60), 2, "--output", str(output),
                 "not a directory")
    assert a_file.read_text() == "x"
    taken.close()


def test_a_device_name_that_is_not_text_is_one_line(tmp_path, target):
    """argv bytes that are not UTF-8 reach Python as lone surrogates: printed escaped, never a UnicodeEncodeError."""
    cmd = [os.fsencode(c) for c in fioscope_command("capture", "--target.dir", target, "--output", tmp_path / "out")]
    proc = subprocess.run([*cmd, b"--device", b"sd\xff"], capture_output=True, timeout=60, env=checkout_env())
    stderr = proc.stderr.decode(errors="replace")
    assert proc.returncode == 2 and len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert "--device" in stderr and "sd\\udcff" in stderr


def test_a_prometheus_password_is_never_echoed(tmp_path):
    for url in ("http://bob:s3cret-pw@127.0.0.1:1/", "http://bob:s3cret-pw@127.0.0.1:notaport/", "ftp://bob:s3cret-pw@host/"):
        proc = fioscope("report", "--prometheus.url", url, "--last", "1h", "--output", tmp_path / "r", timeout=60)
        line = one_line(proc, 2, "--prometheus.url")
        assert "s3cret-pw" not in proc.stderr + proc.stdout, line


# ---- item 4: failed loads never look healthy -------------------------------------------------------------------------

@pytest.mark.slow
def test_failed_loads_make_the_device_inconclusive(tmp_path, target):
    """A load that fails (an unaligned direct read: EINVAL on its first I/O) and one that ends long before its phase:
    both phases red, the device's verdict "inconclusive — the load failed", no IOPS for them, exit 1 (a healthy load
    after them does not make up for them); --keep-files keeps the layout."""
    bad = job_file(tmp_path, "bad")
    short = job_file(tmp_path, "short", runtime="0.2s")
    # the layout runs each job with its last phase's variables: bad's last phase is a good one
    plan = plan_file(tmp_path, f"phases:\n  - idle: 1s\n  - {{job: {bad}, duration: 2s, env: {{BS: '513'}}}}\n  - idle: 1s\n"
                               f"  - {{job: {short}, duration: 3s}}\n  - {{job: {bad}, duration: 1s}}\n  - idle: 1s\n")
    out = tmp_path / "bundle"
    device = device_for_path(target)
    proc = fioscope("capture", "--target.dir", target, "--output", out, "--plan", plan, "--interval", "500ms", "--keep-files",
                    "--device", device, timeout=240)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "inconclusive" in proc.stderr.splitlines()[-1]
    phases = json.loads((out / "phases.json").read_text())
    loads = [p for p in phases if p["phase"] == "load"]
    assert "Invalid argument" in loads[0]["failed"] and "of its 3s phase" in loads[1]["failed"] and "failed" not in loads[2], loads
    report = json.loads((out / "report.json").read_text())
    charted = [d for d in report["devices"] if d["charted"]]
    assert [d["device"] for d in charted] == [device], report["devices"]
    assert all(d["verdict"].startswith(f"{d['device']}: inconclusive — the load failed: ") for d in charted), charted
    assert all("Invalid argument" in d["load_failed"] and "(and 1 more)" in d["verdict"] for d in charted)
    assert not any(d["ok"] for d in charted)
    assert report["summary"][0].startswith("2 load phase(s) failed") and "inconclusive" in report["summary"][0]
    runs = sorted(report["runs"], key=lambda r: r["start"])
    assert [bool(r["failed"]) for r in runs] == [True, True, False], runs
    assert all("IOPS" not in r["label"] for r in runs[:2]) and "IOPS" in runs[2]["label"], runs
    red = [p for d in charted for p in d["phases"] if p["failed"]]
    dom, _ = open_in_chromium(out / "report.html", tmp_path / "page.png")
    [headline] = [h for h in Verdicts(dom).of("headline") if h["data-device"] == charted[0]["device"]]
    assert headline["data-ok"] == "false" and "inconclusive — the load failed" in headline["text"]
    assert bool(red) == ('class="failed"' in dom)  # a failed phase with samples: its row is red on the page
    assert sorted(p.name for p in target.iterdir()) == ["bad.0.0", "short.0.0"]  # --keep-files


def test_layout_failure_is_one_line_and_nothing_measured(tmp_path):
    """The layout run's result is checked: a read-only filesystem fails it, exit 1, nothing measured, no report."""
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    mnt = tmp_path / "ro"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], check=True)
    try:
        (mnt / "t").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        job = tmp_path / "buffered.fio"
        job.write_text(JOB.replace("direct=1", "direct=0").format(name="buffered", rw="randwrite", runtime="${RUNTIME}"))
        plan = plan_file(tmp_path, f"phases:\n  - idle: 1s\n  - {{job: {job}, duration: 2s}}\n")
        out = tmp_path / "bundle"
        proc = fioscope("capture", "--target.dir", mnt / "t", "--output", out, "--plan", plan, timeout=120)
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    *progress, last = proc.stderr.strip().splitlines()
    assert progress == [ln for ln in progress if ln.startswith("capture: preparing")], proc.stderr
    assert all(w in last for w in ("laying out", "Read-only file system", "nothing was measured")), last
    assert not (out / "report.html").exists() and not list((out / "prepare").glob("*.running"))


# ---- etcd-wal honours a phase's duration; layout files removed --------------------------------------------------------

@pytest.mark.slow
def test_etcd_wal_honours_its_phase_and_the_layout_is_removed(tmp_path, target):
    """etcd-wal over 1 GiB of 2,300-byte fdatasync writes would run for minutes: the phase's 2 s cap it (its layout run too)."""
    plan = plan_file(tmp_path, "phases:\n  - idle: 1s\n  - {job: etcd-wal, duration: 2s, env: {SIZE: 1g}}\n  - idle: 1s\n")
    out = tmp_path / "bundle"
    proc = fioscope("capture", "--target.dir", target, "--output", out, "--plan", plan, "--interval", "500ms",
                    "--device", device_for_path(target), timeout=120)
    assert proc.returncode == 0, proc.stderr
    [load] = [p for p in json.loads((out / "phases.json").read_text()) if p["phase"] == "load"]
    assert load["end"] - load["start"] < 5, load
    assert list(target.iterdir()) == []  # etcd-wal's file, laid out for the capture, removed


# ---- items 3 and 6: signals ----------------------------------------------------------------------------------------------

def _start(args: list, tmpdir: Path, **kw) -> subprocess.Popen:
    env = {**checkout_env(), "TMPDIR": str(tmpdir)}
    env.pop("CI", None)
    return subprocess.Popen(fioscope_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, **kw)


def _wait_for_line(proc: subprocess.Popen, text: str, timeout: float = 120) -> str:
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen and time.monotonic() < deadline and proc.poll() is None:
        seen += proc.stderr.readline()
    assert text in seen, seen
    return seen


@pytest.mark.parametrize("signals", [1, 2])
def test_signals_while_laying_out_stop_fio_and_its_jobs(tmp_path, target, signals):
    """SIGTERM while fio lays out (here: 8 MiB as 2,048 files, each flushed at 128 KiB/s, a minute: the capture runs
    in a cgroup capping its writes to the target's disk) stops it between two files; two in a row kill it (fio lays
    out in its own process: no job process yet). Either way: no fio left writing to the target, no .running marker, no
    layout file, phases.json written, exit 130. (One file's flush cannot be cut short: the kernel holds fio in it, SIGKILL or not.)"""
    disk = (Path("/sys/block") / device_for_path(target) / "dev").read_text().strip()
    with capped_cgroup(disk, "write_bps", 128 << 10) as cgroup:
        _signals_while_laying_out(tmp_path, target, signals, cgroup)


def test_a_job_s_own_runtime_runs_neither_in_its_layout_nor_past_its_phase(tmp_path, target):
    """A job that sets its own runtime, not ${RUNTIME}: fio lays out its files and runs none of its I/O
    (--create_only; it ran all of it, unmeasured, before: a job of runtime=600 loaded the customer's disk for ten
    minutes before the capture began), and its phase ends on time (stopped 5 s past its end, counted as the load
    it was, not failed)."""
    fixed = job_file(tmp_path, "fixedruntime", runtime="60")
    plan = plan_file(tmp_path, f"phases:\n  - idle: 1s\n  - {{job: {fixed}, duration: 2s}}\n")
    out = tmp_path / "bundle"
    proc = fioscope("capture", "--target.dir", target, "--output", out, "--plan", plan, "--interval", "500ms",
                    "--device", device_for_path(target), timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    [prepared] = [json.loads(path.read_text()) for path in (out / "prepare").rglob("*.json")]
    assert [(job["job_runtime"], job["read"]["total_ios"]) for job in prepared["jobs"]] == [(0, 0)], prepared["jobs"]
    load = json.loads((out / "phases.json").read_text())[-1]
    assert load["phase"] == "load" and "failed" not in load and load["end"] - load["start"] < 15, load
    [result] = [json.loads(path.read_text()) for path in (out / "results").glob("*.json")]
    assert [job["read"]["total_ios"] > 0 for job in result["jobs"]] == [True]  # its load, measured


def _signals_while_laying_out(tmp_path: Path, target: Path, signals: int, cgroup: Path) -> None:
    slow = job_file(tmp_path, "slowlayout", rw="randread", runtime="60")  # a read job's files are written whole
    slow.write_text(slow.read_text() + "nrfiles=2048\n")
    plan = plan_file(tmp_path, f"phases:\n  - idle: 1s\n  - {{job: {slow}, duration: 2s}}\n")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = tmp_path / "bundle"
    proc = _start(["capture", "--target.dir", target, "--output", out, "--plan", plan], tmpdir)
    (cgroup / "cgroup.procs").write_text(str(proc.pid))  # as it starts: the fio it starts later is in the cgroup too
    try:
        seen = _wait_for_line(proc, "capture: preparing")
        deadline = time.monotonic() + 30
        while not processes_with(str(slow)) and time.monotonic() < deadline:  # fio, laying out its file
            time.sleep(0.1)
        assert processes_with(str(slow))
        time.sleep(1)
        sent = time.monotonic()
        for _ in range(signals):
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.05)
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    left = processes_with(str(slow))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"fio processes left writing to the target: {left}"
    assert proc.returncode == 130 and took < 15, (proc.returncode, took, seen + stderr)
    assert "Traceback" not in seen + stderr
    assert not list(out.rglob("*.running")), list(out.rglob("*"))
    assert (out / "phases.json").is_file()
    assert list(target.iterdir()) == []


@pytest.mark.slow
def test_a_load_stopped_by_ctrl_c_is_the_load_so_far_not_a_failed_load(tmp_path, target):
    """Ctrl-C during a load phase: fio is stopped (it exits 128 on SIGTERM) and the report covers what was captured. The
    stopped run is that load's first seconds, not a failed load: before, its result said "fio exited 128", and the
    report called the disk "inconclusive — the load failed" (the noisy-neighbour e2e's capture, stopped at its end)."""
    job = job_file(tmp_path, "steady")
    plan = plan_file(tmp_path, f"phases:\n  - idle: 2s\n  - {{job: {job}, duration: 60s}}\n")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = tmp_path / "bundle"
    proc = _start(["capture", "--target.dir", target, "--output", out, "--plan", plan, "--interval", "1s"], tmpdir)
    try:
        seen = _wait_for_line(proc, "[2/2]")
        time.sleep(5)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "Traceback" not in seen + stderr, seen + stderr
    report = json.loads((out / "report.json").read_text())
    [run] = report["runs"]
    assert run["failed"] is None and run["iops"] > 0, run
    # (a device idle through the capture is one line, without phases: any other disk of a busy host)
    loads = [p for d in report["devices"] for p in d.get("phases", []) if p["kind"] == "load"]
    assert loads and not any(p["failed"] or "load failed" in p["label"] for p in loads), loads
    assert not any("load failed" in d["verdict"] or "inconclusive" in d["verdict"] for d in report["devices"]), \
        [d["verdict"] for d in report["devices"]]
    assert "interrupted" in json.dumps(report["summary"]), report["summary"]


def _prometheus_under(tmpdir: Path) -> list[int]:
    return processes_with(f"--storage.tsdb.path={tmpdir}")


def interrupt_the_report(proc: subprocess.Popen, tmpdir: Path, send) -> tuple[str, list[int]]:
    """Once the temporary Prometheus (under ``tmpdir``) runs, ``send()`` the signals; then (stderr, the Prometheus
    processes left running: killed here, after they were counted)."""
    try:
        deadline = time.monotonic() + 60
        while not _prometheus_under(tmpdir) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert _prometheus_under(tmpdir), "the temporary Prometheus never started"
        send()
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    time.sleep(0.5)
    left = _prometheus_under(tmpdir)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return stderr, left


@pytest.mark.slow
@pytest.mark.parametrize("signals", [1, 2])
def test_ctrl_c_during_captures_report(tmp_path, target, signals):
    """Ctrl-C at the terminal (SIGINT to the whole process group: the temporary Prometheus and promtool too) while the
    report is written: one is noted and the report finished (exit 130); a second aborts it, and neither the temporary
    Prometheus nor its directory is left."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = tmp_path / "bundle"
    plan = plan_file(tmp_path, "phases:\n  - idle: 2s\n")
    proc = _start(["capture", "--target.dir", target, "--output", out, "--plan", plan, "--interval", "500ms",
                   "--device", device_for_path(target)], tmpdir)
    seen = _wait_for_line(proc, "capture: writing the report")

    def ctrl_c() -> None:
        for _ in range(signals):
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.3)

    stderr, left = interrupt_the_report(proc, tmpdir, ctrl_c)
    assert proc.returncode == 130, seen + stderr
    assert "Traceback" not in seen + stderr
    assert not left and not list(tmpdir.iterdir()), (left, list(tmpdir.iterdir()))
    assert (out / "report.html").is_file() == (signals == 1), seen + stderr
    assert (out / "phases.json").is_file() and (out / "iostat.json").is_file()


def test_sigterm_during_report_stops_the_temporary_prometheus(tmp_path):
    """``fioscope report --iostat``, SIGTERM while its temporary Prometheus runs: it is stopped, its directory removed,
    exit 130 with one line."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = _start(["report", "--iostat", IOSTAT / "capped.json", "--results", IOSTAT / "capped-results", "--output",
                   tmp_path / "report"], tmpdir)
    stderr, left = interrupt_the_report(proc, tmpdir, lambda: proc.send_signal(signal.SIGTERM))
    assert not left and not list(tmpdir.iterdir()), (left, list(tmpdir.iterdir()))
    assert proc.returncode == 130 and stderr.strip().splitlines() == ["fioscope report: interrupted; nothing written"], stderr
    assert not (tmp_path / "report" / "report.html").exists()
