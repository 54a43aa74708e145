"""``fioscope run --iodepth 1,4,16,64 --repeat 3``: a queue-depth sweep from the command line,
and the progress line ``fioscope run`` shows on a terminal.

The sweep is an ordinary fio job file: the profile's ``[global]`` section and its first job
section, repeated once per queue depth (and per repeat), one after the other (``stonewall``).
Whole sweeps repeat, rather than each point back to back, so slow drift of the disk shows up as
spread instead of as a trend along the curve. The ramp (``ramp_time``, e.g. ``--env RAMP=10``
for the iodepth-sweep profile) is fio's own: excluded from every figure.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import TextIO

from fioscope_mixin.units import UnitError, parse_duration

from .config import ConfigError
from .jobs import JobFile, JobFileError
from .model import RunResult

MAX_DEPTHS = 64
_SECTION = re.compile(r"^\s*\[(.+)\]\s*$")
_IODEPTH = re.compile(r"^\s*iodepth\s*=")


def parse_depths(value: str) -> list[int]:
    try:
        depths = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        depths = []
    if not depths or any(d < 1 or d > 65536 for d in depths) or len(depths) > MAX_DEPTHS:
        raise ConfigError(f"--iodepth {value[:80]!r}: expected a comma-separated list of up to {MAX_DEPTHS} queue depths, e.g. 1,4,16,64")
    twice = sorted({d for d in depths if depths.count(d) > 1})
    if twice:  # two sections of one name: fio would refuse the expanded job file
        raise ConfigError(f"--iodepth {value!r}: {', '.join(map(str, twice))} given twice")
    return depths


def expand(job_text: str, depths: list[int], repeats: int) -> str:
    """The job file of the sweep: ``[global]`` + the first job section once per depth and repeat."""
    head: list[str] = []  # comments (variable defaults) and [global]
    template: list[str] = []
    name = ""
    current = None
    for line in job_text.splitlines():
        m = _SECTION.match(line)
        if m:
            current = m.group(1).strip()
            if current != "global" and not name:
                name = current
            if current == "global":
                head.append(line)
            continue
        if current is None or current == "global":
            head.append(line)
        elif current == name and not _IODEPTH.match(line):
            template.append(line)
    if not name:
        raise ConfigError("--iodepth: the job file has no job section to sweep")
    base = re.sub(r"-?qd\d+$", "", name) or name
    # one file for every point: laid out once, and the sweep needs SIZE of space, not SIZE x points
    shared = [] if any(re.match(r"^\s*filename\s*=", ln) for ln in head + template) else [f"filename={base}.dat"]
    global_extra = ["stonewall", *shared, ""]
    out = head + global_extra if any(_SECTION.match(ln) for ln in head) else head + ["[global]", *global_extra]
    for r in range(1, repeats + 1):
        for depth in depths:
            out += [f"[{base}-qd{depth}" + (f"-r{r}]" if repeats > 1 else "]"), f"iodepth={depth}", *template, ""]
    return "\n".join(out) + "\n"


def _planned_seconds(jobfile: JobFile, jobname: str, option: str) -> float:
    """A job's ``runtime``/``ramp_time`` (fio: bare seconds or a unit, ``1d`` too); a value that is not one is refused
    here, naming the job file, rather than by fio after the sweep was laid out."""
    value = jobfile.option(jobname, option) or "0"
    try:
        return parse_duration(value.lower())  # fio reads time suffixes in any case (10M: ten minutes)
    except UnitError as exc:
        raise JobFileError(f"{jobfile.path}: [{jobname}] {option}: {exc}") from None


def _fmt(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    """``[3/9] sweep-qd4, ETA 4m10s`` on a terminal; nothing in a pipe or under CI."""

    def __init__(self, jobfile: JobFile, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() and not os.environ.get("CI")
        self.names = jobfile.jobnames
        self.planned = {n: _planned_seconds(jobfile, n, "runtime") + _planned_seconds(jobfile, n, "ramp_time") for n in self.names}
        self.sequential = any("stonewall" in jobfile.sections.get(n, {}) or "stonewall" in jobfile.sections.get("global", {})
                              for n in self.names)
        self.started = time.monotonic()

    def line(self, run: RunResult, now: float | None = None) -> str:
        """Which point runs and the ETA, from the planned runtime + ramp of each job: fio's status
        reports carry garbage runtimes for jobs that have not started yet."""
        elapsed = (time.monotonic() if now is None else now) - self.started
        remaining = (sum(self.planned.values()) if self.sequential else max(self.planned.values(), default=0)) - elapsed
        if not self.sequential:
            return f"{len(self.names)} job(s) running, ETA {_fmt(remaining)}"
        done = 0.0
        index = len(self.names) - 1
        for i, name in enumerate(self.names):
            done += self.planned[name]
            if elapsed < done:
                index = i
                break
        return f"[{index + 1}/{len(self.names)}] {self.names[index]}, ETA {_fmt(remaining)}"

    def __call__(self, run: RunResult) -> None:
        if self.enabled:
            self.stream.write("\r\033[K" + self.line(run))
            self.stream.flush()

    def done(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()


def write_sweep(job_path: Path, depths: list[int], repeats: int, directory: Path) -> Path:
    """The expanded sweep as ``<directory>/<profile>.fio`` (the result keeps the profile's name)."""
    out = directory / job_path.name
    out.write_text(expand(job_path.read_text(), depths, repeats))
    return out
