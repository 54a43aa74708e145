"""Issue 27 item 3: a capture bundle's ``iostat.json`` is what ``iostat -x -o JSON`` writes: every column sysstat has, the
avg-cpu block, in every report, the first one included (the seed method's notebook takes its device list from it).

The reference is the real thing: sysstat's ``iostat -x -t -o JSON`` run here, its disk entries' keys against the bundle's;
the bundle is made from this machine's /proc (and, slow, by a real ``fioscope capture`` of a small fio load on /var/tmp)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fioscope.blockdev import device_for_path
from fioscope_testkit.cli import fioscope, fioscope_command
from fioscope_testkit.net import free_port, http_get
from fioscope_testkit.paths import checkout_env
from helpers.bundles import disk_directory
from helpers.exposition import parse_exposition


@pytest.fixture
def target() -> Iterator[Path]:
    with disk_directory("capture-iostat") as path:
        yield path


def real_iostat(*devices: str) -> dict:
    """sysstat's own JSON: two reports (since boot, then one 1 s interval)."""
    iostat = shutil.which("iostat")
    if not iostat:
        pytest.fail("iostat is not installed (sysstat; scripts/setup.sh installs it)")
    proc = subprocess.run([iostat, "-x", "-t", "-o", "JSON", *devices, "1", "2"], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "S_TIME_FORMAT": "ISO", "LC_ALL": "C"}, check=True)
    return json.loads(proc.stdout)


def statistics(doc: dict) -> list[dict]:
    [host] = doc["sysstat"]["hosts"]
    return host["statistics"]


def seed_reading(doc: dict) -> dict[str, dict[str, list[float]]]:
    """The seed method's notebook: the devices of the first report, then each column of each device over every report
    (a KeyError where a report lacks a device or a column)."""
    stats = statistics(doc)
    devices = [d["disk_device"] for d in stats[0]["disk"]]
    columns = [k for k in stats[0]["disk"][0] if k != "disk_device"] if devices else []
    out: dict[str, dict[str, list[float]]] = {d: {c: [] for c in columns} for d in devices}
    for report in stats:
        by_name = {d["disk_device"]: d for d in report["disk"]}
        for device in devices:
            for column in columns:
                out[device][column].append(by_name[device][column])
    return out


def kernel_samples(devices: set[str], n: int = 3) -> list:
    from fioscope.reporting.iostat_json import parse_cpu, parse_diskstats

    samples = []
    for _ in range(n):
        samples.append((time.time(), parse_diskstats(Path("/proc/diskstats").read_text(), devices),
                        parse_cpu(Path("/proc/stat").read_text())))
        time.sleep(0.2)
    return samples


def disk_keys(doc: dict) -> set[frozenset[str]]:
    return {frozenset(d) for report in statistics(doc) for d in report["disk"]}


def test_every_report_has_every_column_real_iostat_writes_the_first_one_included(tmp_path):
    from fioscope.reporting.iostat_json import iostat_document
    from fioscope.reporting.offline.load import load_iostat

    device = device_for_path(Path("/var/tmp"))
    reference = real_iostat(device)
    [ref_keys] = disk_keys(reference)
    assert {"rrqm/s", "wrqm/s", "rareq-sz", "wareq-sz", "d/s", "f/s", "util"} <= ref_keys  # sysstat 12's names
    doc = iostat_document("vm", kernel_samples({device}))
    assert disk_keys(doc) == {ref_keys}  # every disk entry of every report: iostat's key set
    [ref_host], [host] = reference["sysstat"]["hosts"], doc["sysstat"]["hosts"]
    assert set(host) == set(ref_host)
    assert {frozenset(r) for r in statistics(doc)} == {frozenset(r) for r in statistics(reference)}
    assert {frozenset(r["avg-cpu"]) for r in statistics(doc)} == {frozenset(statistics(reference)[0]["avg-cpu"])}
    # the seed's reading: the first report names the device, every report has its every column
    reading = seed_reading(doc)
    assert list(reading) == [device] and len(reading[device]) == len(ref_keys) - 1
    assert all(len(v) == 3 for v in reading[device].values())
    # its first report is since boot, as iostat's: the same order of magnitude as iostat's own (same counters)
    first, ref_first = statistics(doc)[0]["disk"][0], statistics(reference)[0]["disk"][0]
    assert first["r/s"] == pytest.approx(ref_first["r/s"], rel=0.5, abs=1.0)
    # the loader drops it, as it drops iostat's; both files load
    path = tmp_path / "iostat.json"
    path.write_text(json.dumps(doc))
    [capture] = load_iostat(str(path))
    assert len(capture.samples) == 2 and set(capture.samples[0].disks) == {device}
    (tmp_path / "real.json").write_text(json.dumps(reference))
    [real] = load_iostat(str(tmp_path / "real.json"))
    assert len(real.samples) == 1 and device in real.samples[0].disks


def test_the_columns_follow_iostats_formulas_and_an_older_kernels_line_reads_zero_for_what_it_lacks():
    """Merges, %merged, request sizes from two diskstats lines; a 4.17-era line (11 fields: no discards, no flushes) still
    gives every column, d/s and f/s 0, as iostat prints them."""
    from fioscope.reporting.iostat_json import iostat_document, parse_cpu, parse_diskstats

    new = "   7       0 loop0 {r} {rm} {rs} {rt} {w} {wm} {ws} {wt} 0 {io} {wio} {d} 0 {ds} {dt} {f} {ft}"
    a = parse_diskstats(new.format(r=1000, rm=0, rs=8000, rt=500, w=10, wm=0, ws=80, wt=20, io=1000, wio=3000, d=0, ds=0, dt=0,
                                   f=0, ft=0), {"loop0"})
    b = parse_diskstats(new.format(r=1700, rm=300, rs=13600, rt=2600, w=310, wm=100, ws=7280, wt=3020, io=2990, wio=9000, d=4,
                                   ds=4096, dt=8, f=20, ft=10), {"loop0"})
    old = "   8       0 sda {r} {rm} {rs} 0 {w} 0 {ws} 0 0 0 0"
    c = parse_diskstats(old.format(r=10, rm=0, rs=80, w=0, ws=0), {"sda"})
    d = parse_diskstats(old.format(r=30, rm=20, rs=240, w=0, ws=0), {"sda"})
    cpu = parse_cpu("cpu  100 0 50 800 10 0 0 0 0 0\n")
    doc = iostat_document("vm", [(1000.0, {**a, **c}, cpu), (1002.0, {**b, **d}, cpu)], boot=0.0)
    first, second = statistics(doc)
    assert [x["disk_device"] for x in first["disk"]] == ["loop0", "sda"]
    loop0, sda = second["disk"]
    assert loop0["rrqm/s"] == pytest.approx(150) and loop0["wrqm/s"] == pytest.approx(50)
    assert loop0["rrqm"] == pytest.approx(100 * 300 / 1000) and loop0["wrqm"] == pytest.approx(100 * 100 / 400)
    assert loop0["rareq-sz"] == pytest.approx(5600 * 512 / 1024 / 700, abs=0.01)
    assert loop0["wareq-sz"] == pytest.approx(7200 * 512 / 1024 / 300, abs=0.01)
    assert loop0["d/s"] == pytest.approx(2) and loop0["dkB/s"] == pytest.approx(1024) and loop0["dareq-sz"] == pytest.approx(512)
    assert loop0["f/s"] == pytest.approx(10) and loop0["f_await"] == pytest.approx(0.5)
    assert set(sda) == set(loop0) and sda["d/s"] == 0 and sda["f/s"] == 0 and sda["rrqm/s"] == pytest.approx(10)
    assert sda["rareq-sz"] == pytest.approx(160 * 512 / 1024 / 20)


@pytest.mark.slow
def test_a_real_captures_bundle_reads_as_the_seed_reads_it_and_its_phases_carry_the_new_columns(tmp_path, target):
    """``fioscope capture`` of a small paced load on the machine's disk: its iostat.json has the device in its first report
    and every column of iostat's in every report; report.json's phases carry request sizes and %iowait/%steal."""
    device = device_for_path(target)
    plan = tmp_path / "plan.yaml"
    plan.write_text("phases:\n  - idle: 2s\n  - {job: cloud-sla-70-30, duration: 4s, env: {SIZE: 16m, READ_IOPS: 140, "
                    "WRITE_IOPS: 60, IODEPTH: 4}}\n  - idle: 2s\n")
    out = tmp_path / "bundle"
    proc = fioscope("capture", "--target.dir", target, "--output", out, "--plan", plan, "--interval", "500ms", "--device", device,
                    timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "iostat.json").read_text())
    [ref_keys] = disk_keys(real_iostat(device))
    assert disk_keys(doc) == {ref_keys}
    reading = seed_reading(doc)
    assert list(reading) == [device]
    reports = len(statistics(doc))
    assert reports >= 10 and all(len(v) == reports for v in reading[device].values())
    report = json.loads((out / "report.json").read_text())
    [dev] = [d for d in report["devices"] if d["device"] == device]
    [load] = [p for p in dev["phases"] if p["kind"] == "load"]
    for key in ("rareq-sz", "wareq-sz", "rrqm/s", "wrqm/s", "%iowait", "%steal", "%system"):
        assert isinstance(load[key], float), (key, load)
    # fio's 4k requests (other I/O on the disk may merge or add larger ones: at least 4 kB)
    assert load["rareq-sz"] >= 3.9 and load["rareq-sz"] == pytest.approx(load["rkB/s"] / load["r/s"])
    # fio's own rates per status report, since the report before (the offline rules read its write rate): the paced 140
    # reads and 60 writes of 4 KiB a second once fio is past its first second
    rates = [json.loads(line) for line in (out / "samples" / "fio.jsonl").read_text().splitlines()]
    assert len(rates) >= 3 and {(r["target"], r["device"], r["jobname"]) for r in rates} == {("capture", device, "cloud-sla-70-30")}
    steady = sorted(r["bytes_per_second"]["write"] for r in rates[1:])
    assert steady[len(steady) // 2] == pytest.approx(60 * 4096, rel=0.25), rates
    [phase] = [p for p in json.loads((out / "phases.json").read_text()) if p["phase"] == "load"]
    assert all(phase["start"] <= r["t"] <= phase["end"] for r in rates) and rates == sorted(rates, key=lambda r: r["t"])


@pytest.mark.slow
def test_a_capture_serves_its_live_figures_where_asked_and_stops_serving_at_its_end(tmp_path, target):
    """``--web.listen-address``: while the capture's load runs, its /metrics shows what the exporter's would (the job
    running, its live write rate on the target's device, the paced 60 writes of 4 KiB a second), so a stack watching the
    host sees a capture's load; once the capture has written its report, nothing listens there."""
    device = device_for_path(target)
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    plan = tmp_path / "plan.yaml"
    plan.write_text("phases:\n  - idle: 1s\n  - {job: cloud-sla-70-30, duration: 10s, env: {SIZE: 16m, READ_IOPS: 140, "
                    "WRITE_IOPS: 60, IODEPTH: 4}}\n")
    out = tmp_path / "bundle"
    capture = subprocess.Popen(fioscope_command("capture", "--target.dir", target, "--output", out, "--plan", plan,
                                                "--device", device, "--web.listen-address", f"127.0.0.1:{port}"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=checkout_env())
    rates: list[float] = []
    try:
        deadline = time.monotonic() + 120
        while capture.poll() is None and time.monotonic() < deadline:
            try:
                metrics = parse_exposition(http_get(url, timeout=2))
            except OSError:
                time.sleep(0.2)
                continue
            running = [dict(k) for (name, k), v in metrics.items() if name == "fio_run_running" and v == 1]
            rate = [v for (name, k), v in metrics.items() if name == "fio_bandwidth_bytes_per_second"
                    and dict(k).get("ddir") == "write" and dict(k).get("target") == "capture" and dict(k).get("device") == device]
            if running and rate:
                assert {(r["target"], r["jobname"], r["device"]) for r in running} == {("capture", "cloud-sla-70-30", device)}
                rates.extend(rate)
            time.sleep(0.5)
        _, stderr = capture.communicate(timeout=120)
    finally:
        if capture.poll() is None:
            capture.kill()
    assert capture.returncode == 0, stderr
    assert "serving the live figures on" in stderr
    assert len(rates) >= 5, f"the live write rate seen {len(rates)} times"
    steady = sorted(rates[2:])
    assert steady[len(steady) // 2] == pytest.approx(60 * 4096, rel=0.25), rates
    with pytest.raises(OSError):
        http_get(url, timeout=2)
