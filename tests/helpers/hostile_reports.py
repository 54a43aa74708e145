"""Hostile inputs for ``fioscope report``: real captures and fio results with names and values an attacker
or a careless user would put there (the report counterpart of tests/corpus.py).

Names: every payload, if it ran, sets ``document.title`` to ``PWNED`` (a test reads the title back from
Chromium). ``$\\undefinedcmd$`` is matplotlib mathtext that does not parse: a chart label must be plain text.
Values: NaN, inf, negative and 1e308 iostat columns, samples out of order, decades apart.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path

from fioscope_testkit.paths import FIXTURES, IOSTAT

PWNED = "PWNED"

SCRIPT = f"<script>document.title='{PWNED}'</script>"
IMG = f"\"><img src=x onerror=\"document.title='{PWNED}'\">"
ATTR = f"' autofocus onfocus='document.title=\"{PWNED}\"' x='"
SVG = f"<svg onload=document.title='{PWNED}'>"  # no slash: usable as a directory name
MATH = "$\\undefinedcmd$"

HOST = f"vm{SCRIPT}"
THROTTLED_DEVICE = f"loop{IMG}{MATH}"  # the capped lab disk, renamed
OTHER_DEVICE = f"vda{ATTR}"
JOBNAME = f"rand-read{SVG}"
TARGET = f"cli{SCRIPT}"
DIRECTORY = f"/srv/{SVG}/{SCRIPT}"
HOSTNAME = f"fio-host{IMG}"
RW = f"randrw{ATTR}"
PAYLOADS = (SCRIPT, IMG, ATTR, SVG)


def iostat_doc(name: str = "capped.json") -> dict:
    return json.loads((IOSTAT / name).read_text())


def statistics(doc: dict) -> list[dict]:
    return doc["sysstat"]["hosts"][0]["statistics"]


def rename_devices(doc: dict, names: dict[str, str]) -> dict:
    for stat in statistics(doc):
        for disk in stat.get("disk", []):
            disk["disk_device"] = names.get(disk["disk_device"], disk["disk_device"])
    return doc


def hostile_capture(path: Path) -> Path:
    """The capped lab capture with a hostile host and hostile device names."""
    doc = rename_devices(iostat_doc(), {"loop0": THROTTLED_DEVICE, "vda": OTHER_DEVICE})
    doc["sysstat"]["hosts"][0]["nodename"] = HOST
    path.write_text(json.dumps(doc))
    return path


def hostile_capped_results(directory: Path) -> Path:
    """The capped run's result file with a hostile job name, target and device (the renamed lab disk)."""
    directory.mkdir(parents=True, exist_ok=True)
    for source in (IOSTAT / "capped-results").glob("*.json"):
        doc = json.loads(source.read_text())
        doc["fioscope"].update(target=TARGET, device=THROTTLED_DEVICE, sla_latency_seconds=0.03)
        for job in doc["jobs"]:
            job["jobname"] = JOBNAME
        (directory / source.name).write_text(json.dumps(doc))
    return directory


def hostile_fio_results(directory: Path) -> Path:
    """Two plain fio outputs (no fioscope annotation) whose directory, hostname and rw are hostile."""
    directory.mkdir(parents=True, exist_ok=True)
    doc = json.loads((FIXTURES / "fio-outputs" / "fio-3.33" / "randrw.json").read_text())
    for depth in (1, 4):
        one = copy.deepcopy(doc)
        for job in one["jobs"]:
            job["hostname"] = HOSTNAME
            job["jobname"] = JOBNAME
            job["job options"].update(directory=DIRECTORY, rw=RW, iodepth=str(depth))
        (directory / f"randrw-qd{depth}.json").write_text(json.dumps(one))
    return directory


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S+0000")


# ---- values and times --------------------------------------------------------------------------

LAB_DEVICE = "loop0"  # the capped lab disk in capped.json
INVALID_VALUES = [("r/s", float("nan")), ("aqu-sz", float("inf")), ("util", -5.0), ("r_await", -1.0), ("util", 1e308)]


def invalid_values_capture(path: Path) -> Path:
    """The capped capture with one unusable value in each of five samples while the disk is at its cap."""
    doc = iostat_doc()
    loaded = [s for s in statistics(doc)[1:] if any(d["disk_device"] == LAB_DEVICE and d["r/s"] > 150 for d in s["disk"])]
    for stat, (column, value) in zip(loaded[2::2], INVALID_VALUES):
        next(d for d in stat["disk"] if d["disk_device"] == LAB_DEVICE)[column] = value
    assert len(loaded[2::2]) >= len(INVALID_VALUES), "the capped capture has fewer loaded samples than expected"
    path.write_text(json.dumps(doc))  # NaN and Infinity as Python's json writes them (and reads them back)
    return path


def shifted(stats: list[dict], seconds: float) -> list[dict]:
    out = copy.deepcopy(stats)
    for stat in out:
        parsed = dt.datetime.fromisoformat(stat["timestamp"])
        stat["timestamp"] = iso(parsed.timestamp() + seconds)
    return out


def with_gap_capture(path: Path, days: float) -> Path:
    """The capped capture, then the same samples again ``days`` later (one gap)."""
    doc = iostat_doc()
    stats = statistics(doc)
    stats += shifted(stats[1:], days * 86400)
    path.write_text(json.dumps(doc))
    return path


def one_late_sample_capture(path: Path, seconds: float) -> Path:
    """The capped capture with its last sample dated ``seconds`` later (a year, or back to 1970)."""
    doc = iostat_doc()
    stats = statistics(doc)
    stats[-1] = shifted([stats[-1]], seconds)[0]
    path.write_text(json.dumps(doc))
    return path


def many_devices_capture(path: Path, devices: int) -> Path:
    doc = iostat_doc()
    for stat in statistics(doc):
        template = stat["disk"][0]
        stat["disk"] = [{**template, "disk_device": f"sd{i}"} for i in range(devices)]
    path.write_text(json.dumps(doc))
    return path


def long_capture(path: Path, hours: float, interval: float = 60.0) -> Path:
    """``hours`` of the capped capture's samples repeated at ``interval`` seconds (longer than one range query)."""
    doc = iostat_doc()
    stats = statistics(doc)
    start = dt.datetime.fromisoformat(stats[1]["timestamp"]).timestamp()
    out = [stats[0]]
    for i in range(int(hours * 3600 / interval)):
        sample = copy.deepcopy(stats[1 + i % (len(stats) - 1)])
        sample["timestamp"] = iso(start + i * interval)
        out.append(sample)
    doc["sysstat"]["hosts"][0]["statistics"] = out
    path.write_text(json.dumps(doc))
    return path


def colliding_devices_capture(path: Path) -> Path:
    """Devices ``sd-a`` and ``sd_a``: one file name each for their charts, not one for both."""
    path.write_text(json.dumps(rename_devices(iostat_doc(), {"loop0": "sd-a", "vda": "sd_a"})))
    return path


def colliding_targets_results(directory: Path) -> Path:
    """Two fio outputs whose only difference is the directory: /a/b and /a_b."""
    directory.mkdir(parents=True, exist_ok=True)
    doc = json.loads((FIXTURES / "fio-outputs" / "fio-3.33" / "randrw.json").read_text())
    for name, target in (("ab", "/a/b"), ("a_b", "/a_b")):
        one = copy.deepcopy(doc)
        for job in one["jobs"]:
            job["job options"]["directory"] = target
        (directory / f"{name}.json").write_text(json.dumps(one))
    return directory
