"""Time and peak memory of `fioscope report --iostat` on large and hostile captures.

    python3 bench/report_iostat_scale.py [CASE...]      (default: week-10s day-1s)

Cases: week-10s (a week at 10 s, 8 devices), day-1s (a day at 1 s, 8 devices), year-later (an hour
at 5 s and one sample a year later), gap-30d (an hour, a 30-day gap, an hour), devices-200,
devices-2000 (ten minutes at 5 s), dev-zero (/dev/zero as the capture). Each runs under
/usr/bin/time -v and prints: case, exit code, wall and CPU seconds (user + system of every process: the
measure that holds on a shared machine), peak RSS (the largest process: fioscope,
promtool or the temporary Prometheus), and the first line of stderr. FIOSCOPE_PYTHONPATH runs
another checkout (e.g. the code before a change). The targets (issue 16): week-10s and day-1s
within 1 GiB and a minute; the hostile ones a clear line, fast.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
START = 1_800_000_000  # 2027-01-15
DISK = ('{{"disk_device": "{name}", "r/s": {r:.2f}, "w/s": 12.00, "d/s": 0.00, "f/s": 0.50, "rkB/s": {rkb:.2f}, "wkB/s": 96.00, '
        '"dkB/s": 0.00, "rrqm/s": 0.00, "wrqm/s": 1.00, "drqm/s": 0.00, "rrqm": 0.00, "wrqm": 7.69, "drqm": 0.00, '
        '"r_await": {aw:.2f}, "w_await": 1.20, "d_await": 0.00, "f_await": 0.30, "rareq-sz": 4.00, "wareq-sz": 8.00, '
        '"dareq-sz": 0.00, "aqu-sz": {q:.2f}, "util": {u:.2f}}}')


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(ts))


def write_capture(path: Path, times: list[float], devices: int) -> None:
    """`iostat -x -t -o JSON` as sysstat writes it (one line per disk), plus the since-boot report first."""
    names = [f"sd{chr(97 + i % 26)}{i // 26 or ''}" for i in range(devices)]
    with path.open("w") as f:
        f.write('{"sysstat": {\n\t"hosts": [\n\t\t{\n\t\t\t"nodename": "bench", "sysname": "Linux", "release": "6.1", '
                '"machine": "x86_64", "number-of-cpus": 8, "date": "2027-01-15",\n\t\t\t"statistics": [\n')
        for i, t in enumerate([times[0] - 1, *times]):
            r = 200.0 if (i // 60) % 2 else 150.0
            disks = ",\n".join("\t\t\t\t\t\t" + DISK.format(name=n, r=r, rkb=r * 4, aw=2.0 + j % 3, q=r * 0.002, u=min(99.0, r / 3))
                               for j, n in enumerate(names))
            f.write(('' if i == 0 else ',\n') + f'\t\t\t\t{{\n\t\t\t\t\t"timestamp": "{iso(t)}",\n'
                    '\t\t\t\t\t"avg-cpu":  {"user": 5.00, "nice": 0.00, "system": 3.00, "iowait": 2.00, "steal": 0.00, "idle": 90.00},\n'
                    f'\t\t\t\t\t"disk": [\n{disks}\n\t\t\t\t\t]\n\t\t\t\t}}')
        f.write("\n\t\t\t]\n\t\t}\n\t]\n}}\n")


def every(seconds: float, span: float, start: float = START) -> list[float]:
    return [start + i * seconds for i in range(int(span // seconds) + 1)]


CASES = {
    "week-10s": lambda p: write_capture(p, every(10, 7 * 86400), 8),
    "day-1s": lambda p: write_capture(p, every(1, 86400), 8),
    "year-later": lambda p: write_capture(p, [*every(5, 3600), START + 3600 + 365 * 86400], 2),
    "gap-30d": lambda p: write_capture(p, [*every(5, 3600), *every(5, 3600, START + 30 * 86400)], 2),
    "devices-200": lambda p: write_capture(p, every(5, 600), 200),
    "devices-2000": lambda p: write_capture(p, every(5, 600), 2000),
}


def run(case: str, tmp: Path) -> str:
    capture = Path("/dev/zero") if case == "dev-zero" else tmp / f"{case}.json"
    if case != "dev-zero":
        CASES[case](capture)
    pythonpath = os.environ.get("FIOSCOPE_PYTHONPATH") or f"{REPO / 'exporter'}:{REPO / 'mixin'}"
    env = {**os.environ, "PYTHONPATH": pythonpath}
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "fioscope", "report", "--iostat", str(capture), "--output", str(tmp / case)]
    began = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=1800)
    took = time.monotonic() - began
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))  # type: ignore[union-attr]
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", proc.stderr))
    first = next((ln for ln in proc.stderr.splitlines() if not ln.startswith("\t") and "Command being timed" not in ln), "")
    size = capture.stat().st_size if capture.is_file() else 0
    return (f"{case:13} exit {proc.returncode}  {took:6.1f} s wall {cpu:6.1f} s CPU  peak RSS {rss / 2**20:5.2f} GiB  "
            f"input {size / 2**20:6.1f} MiB  {first[:150]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", choices=[*CASES, "dev-zero"], metavar="CASE",
                        help=f"one of {', '.join([*CASES, 'dev-zero'])} (default: week-10s day-1s)")
    cases = parser.parse_args().cases or ["week-10s", "day-1s"]
    with tempfile.TemporaryDirectory(prefix="fioscope-bench-", dir="/var/tmp") as tmp:
        for case in cases:
            print(run(case, Path(tmp)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
