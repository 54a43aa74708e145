"""How long an offline diagnosis of a day of iostat takes (`python3 bench/report_24h.py`).

Builds a 24 h `iostat -x -t -o JSON 60` capture from the lab fixture's samples (shifted in
time, two devices), then times `fioscope report --iostat` end to end and prints the figures.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "tests" / "fixtures" / "iostat" / "capped.json"


def day_of_iostat(path: Path, interval: int = 60) -> int:
    doc = json.loads(SOURCE.read_text())
    host = doc["sysstat"]["hosts"][0]
    samples = host["statistics"][1:]
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    stats = []
    for i in range(24 * 3600 // interval + 1):
        sample = copy.deepcopy(samples[i % len(samples)])
        sample["timestamp"] = (start + dt.timedelta(seconds=i * interval)).strftime("%Y-%m-%dT%H:%M:%S+0000")
        stats.append(sample)
    host["statistics"] = [host["statistics"][0], *stats]
    path.write_text(json.dumps(doc))
    return len(stats)


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        capture = Path(tmp) / "day.json"
        n = day_of_iostat(capture)
        began = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "fioscope", "report", "--iostat", str(capture), "--output", f"{tmp}/out"],
                              capture_output=True, text=True, check=False,
                              env={"PYTHONPATH": str(REPO / "exporter"), "PATH": "/usr/bin:/bin"})
        took = time.monotonic() - began
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return 1
        html = Path(tmp, "out", "report.html").read_text()
        devices = json.loads(Path(tmp, "out", "report.json").read_text())["devices"]
        steps = ", ".join(sorted({f"{d['interval']:g} s{' (downsampled)' if d['downsampled'] else ''}" for d in devices}))
        print(f"offline diagnosis of 24 h of iostat ({n} samples x 2 devices): {took:.1f} s; "
              f"one point per {steps}; report.html {len(html) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
