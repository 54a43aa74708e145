"""``fioscope capture``: the support engineer's method in one command, on a VM without the stack.

Disk and CPU statistics are recorded for the whole session straight from ``/proc/diskstats``
and ``/proc/stat`` (no iostat process to start, stop or parse; the same counters iostat
reads), while a phase plan runs: idle, the SLA load, idle, an overload, idle (or a plan file).
Before the plan, each load job runs once for a second so fio lays out its files then, not
inside a phase (file creation would read as load during "idle"). The bundle directory holds:

- ``samples/diskstats.jsonl``: every raw sample (time, the /proc lines), as read;
- ``iostat.json``: the same samples as ``iostat -x -t -o JSON`` would print them;
- ``results/``: fio's result files, one per load phase (``prepare/``: the layout runs);
- ``report.html``, its PNGs and ``report.json``: the offline diagnosis of ``iostat.json`` and
  ``results/`` (``fioscope report --iostat``), so the verdicts are decided by the same rules.

Ctrl-C (or SIGTERM) stops the plan (fio is terminated), and the report of what was captured is
still written.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

from fioscope_mixin.units import UnitError, format_duration, parse_duration
from fioscope_mixin.yamlfile import YamlError, load_yaml

from .reporting import ReportError
from .reporting.capture import DiskCounters, iostat_document, iso_time, parse_cpu, parse_diskstats
from .thresholds import Thresholds

log = logging.getLogger("fioscope.capture")

DEFAULT_IDLE = 30.0
DEFAULT_LOAD = 150.0  # the throttling rules flag a capped disk within 2 min of load start (fio_window + rate window + for)
DEFAULT_TAIL = 15.0
DEFAULT_INTERVAL = 2.0  # iostat's customary resolution; 1 s samples of a throttled disk show its token bursts
SLA_ENV = {"READ_IOPS": "700", "WRITE_IOPS": "300"}  # cloud-sla-70-30's own defaults: the SLA load
OVERLOAD_ENV = {"READ_IOPS": "1400", "WRITE_IOPS": "600"}  # 200 %


class CaptureError(ReportError):
    """Bad flags or plan file: one line naming it."""


@dataclass
class Phase:
    kind: str  # idle, load
    seconds: float
    job: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def title(self) -> str:
        if self.kind == "idle":
            return "idle"
        rate = "+".join(self.env[k] for k in ("READ_IOPS", "WRITE_IOPS") if k in self.env)
        return f"{self.job}" + (f" at {rate} IOPS" if rate else "")


def default_plan(idle: float, load: float) -> list[Phase]:
    return [Phase("idle", idle), Phase("load", load, "cloud-sla-70-30", dict(SLA_ENV)), Phase("idle", idle),
            Phase("load", load, "cloud-sla-70-30", dict(OVERLOAD_ENV)), Phase("idle", min(idle, DEFAULT_TAIL))]


def _seconds(value: object, where: str) -> float:
    try:
        return parse_duration(value, positive=True)
    except UnitError as exc:
        raise CaptureError(f"{where}: {exc}") from None


def load_plan(path: str) -> list[Phase]:
    """``phases: [{idle: 30s}, {job: cloud-sla-70-30, duration: 60s, env: {READ_IOPS: 700}}, ...]``."""
    try:
        doc = load_yaml(path)
    except (YamlError, OSError) as exc:
        raise CaptureError(f"--plan {path}: {exc}") from None
    items = doc.get("phases") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not items:
        raise CaptureError(f"--plan {path}: expected a non-empty list under 'phases'")
    plan = []
    for i, item in enumerate(items):
        where = f"--plan {path}: phases[{i}]"
        if not isinstance(item, dict):
            raise CaptureError(f"{where}: expected a mapping")
        if "idle" in item:
            plan.append(Phase("idle", _seconds(item["idle"], f"{where}.idle")))
        elif isinstance(item.get("job"), str) and item["job"]:
            env = item.get("env") or {}
            if not isinstance(env, dict):
                raise CaptureError(f"{where}.env: expected a mapping")
            plan.append(Phase("load", _seconds(item.get("duration", DEFAULT_LOAD), f"{where}.duration"), item["job"],
                              {str(k): str(v) for k, v in env.items()}))
        else:
            raise CaptureError(f"{where}: expected 'idle: DURATION' or 'job: PROFILE'")
    return plan


# ---- the kernel's counters ------------------------------------------------------------------

def whole_disks(sys_block: Path = Path("/sys/block")) -> list[str]:
    """Block devices with a capacity, without RAM disks: what iostat lists, partitions left out."""
    out = []
    for entry in sorted(sys_block.iterdir()) if sys_block.is_dir() else []:
        if entry.name.startswith(("ram", "zram")):
            continue
        try:
            if int((entry / "size").read_text().strip() or 0) > 0:
                out.append(entry.name)
        except (OSError, ValueError):
            continue
    return out


class Sampler(threading.Thread):
    """Reads /proc/diskstats and /proc/stat every ``interval`` seconds until stopped; every sample kept and logged raw."""

    def __init__(self, devices: list[str], interval: float, raw: Path, proc: Path = Path("/proc")):
        super().__init__(daemon=True, name="capture-sampler")
        self.devices = set(devices)
        self.interval = interval
        self.raw = raw
        self.proc = proc
        self.samples: list[tuple[float, dict[str, DiskCounters], dict[str, float]]] = []
        self.stopped = threading.Event()
        self.errors = 0

    def sample(self) -> None:
        try:
            t = time.time()
            disk_text, cpu_text = (self.proc / "diskstats").read_text(), (self.proc / "stat").read_text()
        except OSError as exc:  # one failed read costs one sample, never the session
            self.errors += 1
            log.warning("capture: cannot read %s: %s", self.proc, exc)
            return
        self.samples.append((t, parse_diskstats(disk_text, self.devices), parse_cpu(cpu_text)))
        with self.raw.open("a") as f:
            mine = [ln for ln in disk_text.splitlines() if ln.split()[2:3] and ln.split()[2] in self.devices]
            f.write(json.dumps({"t": t, "diskstats": mine,
                                "stat": next((ln for ln in cpu_text.splitlines() if ln.startswith("cpu ")), "")}) + "\n")

    def run(self) -> None:
        next_at = time.monotonic()
        while not self.stopped.is_set():
            self.sample()
            next_at += self.interval
            self.stopped.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=self.interval + 5)
        self.sample()  # the last interval up to now


# ---- the session ------------------------------------------------------------------------------

class Progress:
    """``[2/5] cloud-sla-70-30 at 700+300 IOPS, 35s left; all done in 2m10s`` on a terminal, one line per phase elsewhere."""

    def __init__(self, plan: list[Phase], stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() and not os.environ.get("CI")
        self.plan = plan

    def phase(self, index: int, started: float) -> None:
        p = self.plan[index]
        this = max(0.0, p.seconds - (time.monotonic() - started))
        left = this + sum(q.seconds for q in self.plan[index + 1:])
        text = f"[{index + 1}/{len(self.plan)}] {p.title}, {format_duration(round(this))} left; all done in {format_duration(round(left))}"
        if self.tty:
            self.stream.write("\r\033[K" + text)
        self.stream.flush()

    def announce(self, index: int) -> None:
        if not self.tty:
            p = self.plan[index]
            self.stream.write(f"capture: [{index + 1}/{len(self.plan)}] {p.title} for {format_duration(p.seconds)}\n")
            self.stream.flush()

    def done(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()


def run_capture(args, thresholds: Thresholds) -> int:
    """``thresholds``: the command's settings (loaded once by the CLI), for the fio results and the report."""
    from .config import ConfigError, Target, check_target, load_config, parse_key_values
    from .reporting.html import write_report
    from .reporting.iostat import offline_diagnosis
    from .runner import Runner
    from .store import Store

    output = Path(args.output)
    idle = _seconds(args.idle, "--idle") if args.idle else DEFAULT_IDLE
    load = _seconds(args.load, "--load") if args.load else DEFAULT_LOAD
    interval = _seconds(args.interval, "--interval") if args.interval else DEFAULT_INTERVAL
    plan = load_plan(args.plan) if args.plan else default_plan(idle, load)
    if output.exists() and any(output.iterdir()):
        raise CaptureError(f"--output {output}: not empty (a bundle goes into a new or empty directory)")
    try:
        extra_env = parse_key_values(args.env, "--env")
        target = check_target(Target(name="capture", directory=Path(args.target_dir)), "--target.dir")
        if not target.directory.is_dir():
            raise CaptureError(f"--target.dir {args.target_dir}: not a directory")
        target = replace(target, cgroup=args.target_cgroup or target.cgroup)
        results = output / "results"
        config = load_config(None, str(results))
        runner = Runner(config, Store(config, thresholds.bucket_bounds))
        for p in plan:  # refuse a bad job before anything runs
            if p.kind == "load":
                runner.prepare(p.job, target, {**p.env, **extra_env, "RUNTIME": str(int(p.seconds))})
    except ConfigError as exc:
        raise CaptureError(str(exc)) from None
    devices = args.device or whole_disks()
    (output / "samples").mkdir(parents=True, exist_ok=True)
    results.mkdir(exist_ok=True)
    stop = threading.Event()

    def interrupt(signum, frame):
        if not stop.is_set():
            print("\ncapture: stopping; writing the report of what was captured (Ctrl-C again aborts)", file=sys.stderr)
            stop.set()
            runner.stop()
        else:
            raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    progress = Progress(plan)
    sampler = Sampler(devices, interval, output / "samples" / "diskstats.jsonl")
    phases_log: list[dict] = []
    try:
        prepare = Runner(load_config(None, str(output / "prepare")), Store(load_config(None, str(output / "prepare"))))
        prepare_cgroup = replace(target, cgroup="")  # a layout needs no throttle: it is not measured
        for job, env in {p.job: p.env for p in plan if p.kind == "load"}.items():  # one layout per job: same files
            if stop.is_set():
                break
            print(f"capture: preparing {job} (fio lays out its files now, not inside a phase)", file=sys.stderr)
            prepare.run(job, prepare_cgroup, {**env, **extra_env, "RUNTIME": "1"})
        sampler.start()
        for i, p in enumerate(plan):
            if stop.is_set():
                break
            progress.announce(i)
            started, wall = time.monotonic(), time.time()
            if p.kind == "idle":
                while not stop.wait(min(1.0, max(0.0, p.seconds - (time.monotonic() - started)))):
                    progress.phase(i, started)
                    if time.monotonic() - started >= p.seconds:
                        break
            else:
                def tick(_report: object, i: int = i, s: float = started) -> None:
                    progress.phase(i, s)

                outcome = runner.run(p.job, target, {**p.env, **extra_env, "RUNTIME": str(int(p.seconds))}, on_report=tick)
                if not outcome.ok and not stop.is_set():
                    print(f"\ncapture: {p.title}: {outcome.message}", file=sys.stderr)
            phases_log.append({"phase": p.kind, "title": p.title, "start": wall, "end": time.time()})
    finally:
        progress.done()
        if sampler.is_alive():
            sampler.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    (output / "phases.json").write_text(json.dumps(phases_log, indent=1) + "\n")
    host = os.uname().nodename
    iostat = output / "iostat.json"
    iostat.write_text(json.dumps(iostat_document(host, sampler.samples)) + "\n")
    if len(sampler.samples) < 3:
        raise CaptureError(f"--output {output}: too few samples for a report ({len(sampler.samples)}); raw samples kept")
    phases_line = ("Phases: " + "; ".join(f"{p['title']} {iso_time(p['start'])[11:19]}–{iso_time(p['end'])[11:19]}" for p in phases_log)
                   + (" (interrupted: the report covers what was captured)" if stop.is_set() else ""))
    report = offline_diagnosis([str(iostat)], str(results) if any(results.glob("*.json")) else None, None, thresholds,
                               title=f"Capture on {host} — {target.directory}", lead=[phases_line])
    path = write_report(report, output)
    print(f"capture: bundle {output} (report {path})")
    return 130 if stop.is_set() else 0
