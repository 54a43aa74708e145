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

FIXTURES = Path(__file__).resolve().parent / "fixtures"
IOSTAT = FIXTURES / "iostat"
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
