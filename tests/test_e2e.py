"""End-to-end: the whole stack on lab disks whose behaviour we control (root; `pytest -m e2e`).

Real node_exporter, Prometheus, Alertmanager (alerts delivered to a webhook this test
listens on), the fioscope exporter running its schedule, a real etcd. Intervals, windows
and `for:` durations are shortened through alerts/config.yaml overrides (helpers.lab.E2E_SETTINGS).
Figures are printed (run with -s) for the closing note.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from helpers.cli import fioscope
from helpers.dashboard_queries import dashboard_queries, substitute
from helpers.iostat import agree, print_table, sample_agreement
from helpers.lab import CAP_SCRAPE_INTERVAL, THROTTLE, lab_stack, lab_state, require_root_lab
from helpers.net import free_port, wait_for
from helpers.paths import REPO
from helpers.prometheus import PromClient

pytestmark = pytest.mark.e2e

@pytest.fixture(scope="module", autouse=True)
def leaves_nothing_behind():
    require_root_lab()
    from fioscope import lab

    loops, cgroups, mounts = lab_state()
    yield
    loops_after, cgroups_after, mounts_after = lab_state()
    assert loops_after == loops, "a loop device was left"
    assert cgroups_after == cgroups, f"a lab cgroup was left: {sorted(set(cgroups_after) - set(cgroups))}"
    assert mounts_after == mounts, f"a lab mount was left: {sorted(set(mounts_after) - set(mounts))}"
    assert lab.cgroup_version() in (1, 2)


def firing(prom: PromClient, names=THROTTLE) -> list[dict]:
    return [r["metric"] for r in prom.query('ALERTS{alertstate="firing"}') if r["metric"]["alertname"] in names]


def disk_figures(prom: PromClient, device: str) -> str:
    parts = []
    for label, series, fmt in (("IOPS", "fioscope:disk_iops", "{:.0f}"), ("util", "fioscope:disk_util_ratio", "{:.2f}"),
                               ("aqu-sz", "fioscope:disk_queue_size", "{:.1f}"), ("await", "fioscope:disk_await_seconds", "{:.4f} s")):
        value = prom.value(f'{series}{{device="{device}"}}')
        parts.append(f"{label} {fmt.format(value) if value is not None else 'n/a'}")
    return ", ".join(parts)


@pytest.mark.parametrize("overload", [2, 10])
def test_capped_disk_fires_throttling_alert(tmp_path, overload):
    env = {"READ_IOPS": str(700 * overload), "WRITE_IOPS": str(300 * overload), "RUNTIME": "150", "SIZE": "512m"}
    disks = {"capped": {"kind": "throttled", "limits": {"read_iops": 700, "write_iops": 300, "independent": True}}}
    schedule = [{"job": "cloud-sla-70-30", "target": "capped", "start_delay": "3s", "env": env}]
    with lab_stack(tmp_path, disks, schedule, scrape_interval=CAP_SCRAPE_INTERVAL) as (made, stack, webhook, prom):
        device = made["capped"].device_name
        start = wait_for(lambda: prom.value('fio_run_start_timestamp_seconds{jobname="cloud-sla-70-30"} and on (jobname) fio_run_running == 1'),
                         30, what="the load to start")
        fired = wait_for(lambda: webhook.first("FioscopeDiskThrottledUnderFioLoad", device=device), 150, interval=0.5,
                         what="the throttling alert at Alertmanager's webhook")
        fio_iops = prom.value('sum(fio_iops{jobname="cloud-sla-70-30"})') or 0.0
        print(f"\n[capped {overload}x] throttling alert at Alertmanager {fired - start:.0f} s after load start; {disk_figures(prom, device)}; "
              f"live fio IOPS {fio_iops:.0f} (cap 1000)")
        assert fired - start <= 120
        assert prom.value(f'fioscope:disk_util_ratio{{device="{device}"}}') > 0.9


def test_healthy_saturated_disk_does_not_fire(tmp_path):
    # 8 jobs x 128m fits the 2G lab disk
    schedule = [{"job": "rand-read-iops", "target": "fast", "start_delay": "2s", "env": {"RUNTIME": "90", "SIZE": "128m"}}]
    # the capped test's interval: a control is judged where the cap is seen
    with lab_stack(tmp_path, {"fast": {"kind": "healthy"}}, schedule, scrape_interval=CAP_SCRAPE_INTERVAL) as (made, stack, webhook, prom):
        device = made["fast"].device_name
        wait_for(lambda: prom.value('fio_run_running{jobname="rand-read-iops"}') == 1, 30, what="load start")
        peak = {"util": 0.0, "iops": 0.0, "await": 0.0, "queue": 0.0}
        while prom.value('fio_run_running{jobname="rand-read-iops"}') == 1:
            assert not firing(prom), f"throttling alert on a healthy disk: {firing(prom)}"
            for key, series in (("util", "fioscope:disk_util_ratio"), ("iops", "fioscope:disk_iops"),
                                ("await", "fioscope:disk_await_seconds"), ("queue", "fioscope:disk_queue_size")):
                peak[key] = max(peak[key], prom.value(f'{series}{{device="{device}"}}') or 0.0)
            time.sleep(2)
        assert not any(webhook.first(name) for name in THROTTLE)
        others = sorted(webhook.names())
        print(f"\n[healthy saturated] no throttling alert; peaks: util {peak['util']:.2f}, IOPS {peak['iops']:.0f}, "
              f"aqu-sz {peak['queue']:.1f}, await {peak['await'] * 1000:.2f} ms; other alerts delivered: {others or 'none'}")
        assert peak["iops"] > 1000 and peak["util"] > 0.5  # it was really loaded
        assert "FioscopeFioRunFailed" not in others


def test_etcd_wal_on_slow_and_healthy_disk(tmp_path):
    # the healthy disk on memory: a loop file on the host's disk inherits its fsync tail (21.9 ms p99 on a CI host once)
    disks = {"slow": {"kind": "slow-fsync"}, "fast": {"kind": "ram"}}
    with lab_stack(tmp_path, disks) as (made, stack, webhook, prom):
        results = str(tmp_path / "results")
        config = str(tmp_path / "fioscope.yaml")
        ok = fioscope("run", "etcd-wal", "--config.file", config, "--target", "fast", "--results.dir", results, "--env", "SIZE=2m", timeout=900)
        assert ok.returncode == 0 and "fdatasync p99" in ok.stdout and ": pass" in ok.stdout, ok.stdout + ok.stderr
        wait_for(lambda: prom.value('fio_runs_total{jobname="etcd-wal"}') == 1, 20, what="healthy result scraped")
        time.sleep(5)
        assert not firing(prom, ("FioscopeFsyncTooSlowForEtcd",)), "fsync alert on the healthy disk"
        started = time.time()
        slow = fioscope("run", "etcd-wal", "--config.file", config, "--target", "slow", "--results.dir", results, "--env", "SIZE=1m",
                        timeout=900)
        assert slow.returncode == 1 and "FAIL" in slow.stdout, slow.stdout + slow.stderr
        fired = wait_for(lambda: webhook.first("FioscopeFsyncTooSlowForEtcd", jobname="etcd-wal"), 60, what="fsync alert")
        def verdict(out: str) -> str:
            return next(line.strip() for line in out.splitlines() if "fdatasync p99" in line)

        print(f"\n[etcd-wal] healthy: {verdict(ok.stdout)} | slow: {verdict(slow.stdout)}; "
              f"fsync alert at Alertmanager {fired - started:.0f} s after the slow run started")


def test_recording_rules_agree_with_iostat_on_throttled_disk(tmp_path):
    from fioscope import lab

    disk = lab.up("throttled", name="iostat-capped", size="2G", state_dir=tmp_path / "lab")
    try:
        rows = sample_agreement(tmp_path, disk, [str(REPO / "fio-jobs" / "cloud-sla-70-30.fio")], env={"SIZE": "512m", "READ_IOPS": "2100", "WRITE_IOPS": "900"})
    finally:
        lab.down("iostat-capped", tmp_path / "lab")
    print("\n[iostat agreement, throttled lab disk]")
    print_table(rows)
    assert all(r[2] is not None and agree(r[1], r[2], r[3]) for r in rows), rows
    values = {r[0]: r[1] for r in rows}
    assert 650 < values["r/s"] < 750 and values["util"] > 90


def etcd_put_load(url: str, stop: threading.Event, rate: float = 50.0) -> None:
    n = 0
    while not stop.is_set():
        key = base64.b64encode(f"fioscope/{n % 1000}".encode()).decode()
        value = base64.b64encode(os.urandom(256)).decode()
        req = urllib.request.Request(f"{url}/v3/kv/put", data=json.dumps({"key": key, "value": value}).encode(), method="POST")
        with contextlib.suppress(OSError):
            urllib.request.urlopen(req, timeout=5).read()
        n += 1
        stop.wait(1 / rate)


@pytest.mark.parametrize("kind", ["slow-fsync", "ram"])  # ram: healthy whatever the host's own disk does
def test_real_etcd_against_fio_etcd_wal(tmp_path, kind):
    with lab_stack(tmp_path, {"disk": {"kind": kind}}) as (made, stack, webhook, prom):
        disk = made["disk"]
        client = stack.url("etcd")
        peer = f"http://127.0.0.1:{free_port()}"
        etcd = subprocess.Popen(
            ["etcd", "--name", "lab", "--data-dir", f"{disk.mountpoint}/etcd", "--listen-client-urls", client,
             "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"lab={peer}"],
            stdout=(tmp_path / "etcd.log").open("w"), stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=lambda: Path(disk.cgroup, "cgroup.procs").write_text(str(os.getpid())))
        stop = threading.Event()
        try:
            wait_for(lambda: urllib.request.urlopen(f"{client}/health", timeout=2).read(), 30, what="etcd up")
            loader = threading.Thread(target=etcd_put_load, args=(client, stop), daemon=True)
            loader.start()
            time.sleep(45)
            etcd_p99 = prom.value('histogram_quantile(0.99, sum by (le) (rate(etcd_disk_wal_fsync_duration_seconds_bucket{job="etcd"}[40s])))')
            alert = webhook.first("FioscopeEtcdWalFsyncSlow") or firing(prom, ("FioscopeEtcdWalFsyncSlow",))
        finally:
            stop.set()
            os.killpg(etcd.pid, signal.SIGTERM)
            etcd.wait(30)
        fio = fioscope("run", "etcd-wal", "--config.file", str(tmp_path / "fioscope.yaml"), "--target", "disk",
                       "--results.dir", str(tmp_path / "results"), "--env", "SIZE=1m", timeout=900)
        assert fio.returncode in (0, 1) and "fdatasync p99" in fio.stdout, fio.stdout + fio.stderr
        fio_p99 = wait_for(lambda: prom.value('fio_run_latency_seconds{jobname="etcd-wal",ddir="sync",stage="lat",quantile="0.99"}'),
                           20, what="fio result")
        print(f"\n[etcd on {kind}] etcd WAL fsync p99 {etcd_p99 * 1000:.2f} ms, fioscope etcd-wal fdatasync p99 {fio_p99 * 1000:.2f} ms, "
              f"ratio etcd/fio {etcd_p99 / fio_p99:.2f}; etcd fsync alert: {'fired' if alert else 'silent'}")
        if kind == "slow-fsync":
            assert alert and etcd_p99 > 0.010 and fio_p99 > 0.010
        else:
            assert not alert and etcd_p99 < 0.010 and fio_p99 < 0.010


def test_every_dashboard_query_returns_data_during_a_run(tmp_path):
    disks = {"capped": {"kind": "throttled", "limits": {"read_iops": 700, "write_iops": 300, "independent": True}}}
    schedule = [
        {"job": "iodepth-sweep", "target": "capped", "start_delay": "1s", "env": {"RUNTIME": "2", "SIZE": "32m"}},
        # light load first, two minutes: the device's normal await exists (the baseline, 20 s averages here, each
        # recorded 20 s late and only once every scrape of the 60 s since is unsaturated: the sweep's deep queues end
        # just before, and a one-minute light load never had a whole unsaturated minute plus the averaged 20 s)
        {"job": "cloud-sla-70-30", "target": "capped", "start_delay": "2s",
         "env": {"RUNTIME": "120", "SIZE": "64m", "READ_IOPS": "20", "WRITE_IOPS": "10"}},
        {"job": "etcd-wal", "target": "capped", "start_delay": "3s", "env": {"SIZE": "1m"}},
        {"job": "cloud-sla-70-30", "target": "capped", "start_delay": "4s",
         "env": {"RUNTIME": "150", "SIZE": "256m", "READ_IOPS": "2100", "WRITE_IOPS": "900"}},
    ]
    with lab_stack(tmp_path, disks, schedule, scrape_interval=CAP_SCRAPE_INTERVAL) as (made, stack, webhook, prom):
        device = made["capped"].device_name
        wait_for(lambda: prom.value('fio_runs_total{jobname="etcd-wal"}') == 1 and prom.value('fio_run_running{jobname="cloud-sla-70-30"}') == 1,
                 300, interval=1, what="sweep, light run and etcd-wal done; overload running")
        overload_start = time.time()
        # the sweep's deep queues may have paged already, and an alert keeps firing 3 minutes past its condition (one alert
        # per episode): the overload's page may be the sweep's alert still firing. Wait until the alert fires and the
        # overload's own ceiling is recorded (the panels are asked over the overload run)
        fire = "FioscopeDiskThrottledUnderFioLoad"
        wait_for(lambda: prom.query(f'ALERTS{{alertname="{fire}",alertstate="firing",device="{device}"}}')
                 and prom.query(f'fioscope:disk_ceiling{{device="{device}"}}') and time.time() > overload_start + 20,
                 120, interval=1, what="throttling alert and ceiling of the overload run (for the alerts panel)")
        values = {"datasource": "", "host": ".*", "instance": ".*", "device": device, "jobname": ".*", "baseline": "capped",
                  "candidate": "capped", "__rate_interval": "1m"}
        queries = [(dashboard, title, substitute(expr, values), instant) for dashboard, title, expr, instant in dashboard_queries()]

        def shows_data(expr: str, instant: bool) -> bool:
            """What the panel shows now, over the overload run so far (a dashboard open on the last minutes)."""
            return bool(prom.query(expr) if instant else prom.query_range(expr, overload_start - 5, time.time(), 1))

        empty = [q for q in queries if not shows_data(q[2], q[3])]
        print(f"\n[dashboards] {len(queries) - len(empty)} of {len(queries)} panel queries returned data during the run")
        empty = [f"{dashboard}: {title}: {expr}" for dashboard, title, expr, _ in empty]
        assert not empty, "\n".join(empty)
        # etcd-wal ran once: its histogram started at zero, so the across-runs p99 is a number, not NaN
        [across_runs] = [expr for _, title, expr, _ in queries if title.startswith("fdatasync p99") and "histogram_quantile" in expr]
        p99 = [float(r["value"][1]) for r in prom.query(across_runs)]
        print(f"[dashboards] fdatasync p99 across runs after the first etcd-wal run: {p99}")
        assert p99 and all(math.isfinite(v) and v > 0 for v in p99), p99


def test_lab_down_after_a_crash_never_touches_foreign_devices(tmp_path):
    """State on disk lets a new process clean up; a loop device re-used by someone else is left alone."""
    state = tmp_path / "lab"
    made = fioscope("lab", "--state-dir", str(state), "up", "throttled", "--name", "crash")
    assert made.returncode == 0, made.stderr
    disk = json.loads(made.stdout)  # the creating process is gone, as after a crash
    assert os.path.ismount(disk["mountpoint"]) and Path(disk["cgroup"]).is_dir()
    # someone else takes over the loop device number after we lost it
    subprocess.run(["umount", disk["mountpoint"]], check=True)
    subprocess.run(["losetup", "-d", disk["device"]], check=True)
    decoy = tmp_path / "decoy.img"
    subprocess.run(["truncate", "-s", "16M", str(decoy)], check=True)
    subprocess.run(["losetup", disk["device"], str(decoy)], check=True)
    try:
        down = fioscope("lab", "--state-dir", str(state), "down", "--all")
        assert down.returncode == 0, down.stderr
        assert "removed " + disk["cgroup"] in down.stdout and disk["device"] not in down.stdout
        backing = Path("/sys/block") / Path(disk["device"]).name / "loop" / "backing_file"
        assert backing.read_text().strip() == str(decoy), "the lab detached a loop device it did not create"
        assert not Path(disk["cgroup"]).exists() and not (state / "crash").exists()
    finally:
        subprocess.run(["losetup", "-d", disk["device"]])


def test_lab_refuses_clearly_without_root():
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:  # readable by nobody, unlike pytest's root-only tmp_path
        os.chmod(tmp, 0o755)
        shutil.copytree(REPO / "exporter" / "fioscope", Path(tmp) / "fioscope")
        shutil.copytree(REPO / "mixin" / "fioscope_mixin", Path(tmp) / "fioscope_mixin")
        nobody = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-m", "fioscope",
                                 "lab", "--state-dir", f"{tmp}/lab", "up", "healthy"],
                                capture_output=True, text=True, env={**os.environ, "PYTHONPATH": tmp})
    assert nobody.returncode == 2 and nobody.stderr.strip() == "fioscope lab: the lab needs root (loop devices, mounts and cgroups)", nobody.stderr
