"""``fioscope capture``: the support engineer's method in one command, on a VM without the stack.

Disk and CPU statistics are recorded for the whole session straight from ``/proc/diskstats``
and ``/proc/stat`` (no iostat process to start, stop or parse; the same counters iostat
reads), while a phase plan runs: idle, the SLA load, idle, an overload, idle (or a plan file).
Before the plan, fio lays out each load job's files and runs none of its I/O (``--create_only``, whatever runtime
the job sets), so that file creation never reads as load during "idle". The bundle directory holds:

- ``samples/diskstats.jsonl``: every raw sample (time, the /proc lines), as read;
- ``samples/fio.jsonl``: every fio status report's rates since the one before, per job and direction, as the
  exporter shows them live (the offline rules read the application's write rate: a write-back cliff);
- ``iostat.json``: the same samples as ``iostat -x -t -o JSON`` would print them;
- ``results/``: fio's result files, one per load phase (``prepare/``: the layout runs);
- ``report.html``, its PNGs and ``report.json``: the offline diagnosis of ``iostat.json`` and
  ``results/`` (``fioscope report --iostat``), so the verdicts are decided by the same rules; the rules read the
  sampled counters themselves, handed over in process (a later ``fioscope report`` on the bundle reads them from
  ``samples/``), never rebuilt from iostat.json's rates.

Ctrl-C (or SIGTERM) stops the plan (fio is terminated), and the report of what was captured is
still written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from fioscope_mixin.units import UnitError, format_duration, parse_duration, parse_size
from fioscope_mixin.yamlfile import YamlError, load_yaml

from .config import check_cgroup, check_job_env
from .reporting import ReportError, humanize
from .reporting.iostat_json import DiskCounters, iostat_document, iso_time, parse_cpu, parse_diskstats
from .reporting.offline.load import BUNDLE_FIO_RATES
from .thresholds import Thresholds

if TYPE_CHECKING:
    from .http import Server
    from .runner import Runner
    from .store import Store

log = logging.getLogger("fioscope.capture")

DEFAULT_IDLE = 30.0
DEFAULT_LOAD = 150.0  # the throttling rules flag a capped disk within 2 min of load start (fio_window + rate window + for)
DEFAULT_TAIL = 15.0
DEFAULT_INTERVAL = 2.0  # iostat's customary resolution; 1 s samples of a throttled disk show its token bursts
MIN_INTERVAL, MAX_INTERVAL = 0.1, 3600.0  # 1 ms sampled 1,000 times a second; an hour leaves a report of no points
MAX_PHASES = 100
MAX_PLAN_SECONDS = 24 * 3600.0
SHORT_RUN = 0.5  # a time-based load that ran less than this share of its phase failed (ENOSPC, an I/O error...)
PHASE_GRACE_SECONDS = 5.0  # a load still running this long after its phase's end is stopped (its own runtime, a size)
SLA_ENV = {"READ_IOPS": "700", "WRITE_IOPS": "300"}  # cloud-sla-70-30's own defaults: the SLA load
OVERLOAD_ENV = {"READ_IOPS": "1400", "WRITE_IOPS": "600"}  # 200 %


class CaptureError(ReportError):
    """Bad flags or plan file: one line naming it."""


class LoadFailed(CaptureError):
    """The layout run failed: nothing can be measured (exit 1, not a bad flag)."""


@dataclass
class PlannedPhase:
    """One step of the capture's plan (the phase as measured is ``reporting.phases.Phase``)."""

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


def default_plan(idle: float, load: float) -> list[PlannedPhase]:
    return [PlannedPhase("idle", idle), PlannedPhase("load", load, "cloud-sla-70-30", dict(SLA_ENV)), PlannedPhase("idle", idle),
            PlannedPhase("load", load, "cloud-sla-70-30", dict(OVERLOAD_ENV)), PlannedPhase("idle", min(idle, DEFAULT_TAIL))]


def _seconds(value: object, where: str) -> float:
    try:
        return parse_duration(value, positive=True)
    except UnitError as exc:
        raise CaptureError(f"{where}: {exc}") from None


IDLE_KEYS = frozenset({"idle"})
LOAD_KEYS = frozenset({"job", "duration", "env"})


def load_plan(path: str) -> list[PlannedPhase]:
    """``phases: [{idle: 30s}, {job: cloud-sla-70-30, duration: 60s, env: {READ_IOPS: 700}}, ...]``; read by the one YAML
    loader (a regular file of bounded size, no aliases); an unknown key is refused, naming it."""
    try:
        doc = load_yaml(path)
    except (YamlError, OSError) as exc:
        raise CaptureError(f"--plan {path}: {exc}") from None
    if isinstance(doc, dict) and set(doc) - {"phases"}:
        raise CaptureError(f"--plan {path}: unknown key {sorted(map(str, set(doc) - {'phases'}))[0]!r} (expected 'phases')")
    items = doc.get("phases") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not items:
        raise CaptureError(f"--plan {path}: expected a non-empty list under 'phases'")
    if len(items) > MAX_PHASES:
        raise CaptureError(f"--plan {path}: {len(items)} phases; at most {MAX_PHASES}")
    plan = []
    for i, item in enumerate(items):
        where = f"--plan {path}: phases[{i}]"
        if not isinstance(item, dict):
            raise CaptureError(f"{where}: expected a mapping")
        keys = IDLE_KEYS if "idle" in item else LOAD_KEYS
        unknown = sorted(str(k) for k in item if k not in keys)
        if unknown:
            raise CaptureError(f"{where}: unknown key {unknown[0]!r} (a phase is 'idle: DURATION' or 'job', 'duration', 'env')")
        if "idle" in item:
            plan.append(PlannedPhase("idle", _seconds(item["idle"], f"{where}.idle")))
        elif isinstance(item.get("job"), str) and item["job"]:
            env = check_job_env(item.get("env"), f"{where}.env", CaptureError)
            plan.append(PlannedPhase("load", _seconds(item.get("duration", DEFAULT_LOAD), f"{where}.duration"), item["job"], env))
        else:
            raise CaptureError(f"{where}: expected 'idle: DURATION' or 'job: PROFILE'")
    return plan


def check_plan(plan: list[PlannedPhase], where: str) -> None:
    total = sum(p.seconds for p in plan)
    if total > MAX_PLAN_SECONDS:
        raise CaptureError(f"{where}: the plan lasts {format_duration(total)}; at most {format_duration(MAX_PLAN_SECONDS)}")


def check_interval(text: str | None) -> float:
    if not text:
        return DEFAULT_INTERVAL
    interval = _seconds(text, "--interval")
    if not MIN_INTERVAL <= interval <= MAX_INTERVAL:
        raise CaptureError(f"--interval {text}: must be {format_duration(MIN_INTERVAL)} to {format_duration(MAX_INTERVAL)}")
    return interval


def check_devices(devices: list[str], sys_block: Path = Path("/sys/block"), proc: Path = Path("/proc")) -> None:
    """Each ``--device`` a block device the kernel counts (``/sys/block`` or ``/proc/diskstats``): refused before anything runs."""
    known = {entry.name for entry in sys_block.iterdir()} if sys_block.is_dir() else set()
    try:
        known |= {f[2] for f in (ln.split() for ln in (proc / "diskstats").read_text().splitlines()) if len(f) > 2}
    except OSError:
        pass
    for device in devices:
        if device not in known:
            # repr: a name that is not text (a lone surrogate from undecodable argv bytes) prints escaped
            raise CaptureError(f"--device {device!r}: no such block device in {sys_block} or {proc / 'diskstats'}")


def check_output(output: Path) -> None:
    if output.exists() and not output.is_dir():
        raise CaptureError(f"--output {output}: not a directory (a bundle goes into a new or empty directory)")
    if output.is_dir() and any(output.iterdir()):
        raise CaptureError(f"--output {output}: not empty (a bundle goes into a new or empty directory)")


def _layout_bytes(jobfile) -> float:
    """What fio lays out for a job file: each job's ``size`` times its ``numjobs`` (0 where fio decides)."""
    total = 0.0
    for name in jobfile.jobnames:
        try:
            total += parse_size(jobfile.option(name, "size", "0")) * max(1, int(jobfile.option(name, "numjobs", "1") or 1))
        except (UnitError, ValueError):
            continue
    return total


def _layout_names(jobnames: list[str]) -> re.Pattern:
    """fio's default file names, ``$jobname.$jobnum.$filenum``."""
    return re.compile("(?:" + "|".join(map(re.escape, jobnames)) + r")\.\d+\.\d+")


def check_space(directory: Path, layouts: dict[str, tuple[float, list[str]]]) -> None:
    """Refuse a plan whose layout does not fit the target's free space, before anything runs. ``layouts``: job -> (bytes,
    fio job names); files of those names already there are reused by fio, so they count as free."""
    have = 0
    for entry in os.scandir(directory):
        if any(_layout_names(names).fullmatch(entry.name) for _, names in layouts.values()) and entry.is_file(follow_symlinks=False):
            have += entry.stat(follow_symlinks=False).st_size
    fs = os.statvfs(directory)
    free = fs.f_bavail * fs.f_frsize + have
    need = sum(size for size, _ in layouts.values())
    if need > free:
        jobs = ", ".join(f"{job} {humanize.binary(size)}" for job, (size, _) in layouts.items())
        raise CaptureError(f"--target.dir {directory}: the loads lay out {humanize.binary(need)} ({jobs}) but "
                           f"{humanize.binary(free)} is free there; give a smaller --env SIZE=")


def remove_layout(directory: Path, jobnames: list[str], before: set[str]) -> list[str]:
    """Remove the regular files fio laid out in ``directory`` during the capture (not those there before it)."""
    if not jobnames:
        return []
    pattern, removed = _layout_names(jobnames), []
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if entry.name not in before and pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed.append(entry.name)
    return removed


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


class FioRates:
    """``samples/fio.jsonl``: at each fio status report, one JSON object per running job (``t``, ``target``, ``device``,
    ``jobname``, ``bytes_per_second``: {ddir: rate}), the capture's store's live figures: rates since the report before,
    as the exporter publishes them. A write-back cliff is the application's write rate falling while the device below
    writes on at its own pace: only these rates show it to the offline rules. A failed write costs its lines, never the
    load (the first one warned, every one counted)."""

    def __init__(self, path: Path, store: Store):
        self.path, self.store = path, store
        self.errors = 0

    def add(self) -> None:
        t = time.time()
        lines = [json.dumps({"t": t, "target": target, "device": device, "jobname": jobname,
                             "bytes_per_second": {ddir: d.bandwidth_bytes for ddir, d in live.directions.items() if ddir != "sync"}}) + "\n"
                 for (target, jobname, _), (device, live) in sorted(self.store.live_jobs().items())]
        try:
            with self.path.open("a") as f:
                f.writelines(lines)
        except OSError as exc:
            self.errors += 1
            if self.errors == 1:  # once a second while fio runs: said once, every loss counted
                log.warning("capture: cannot write %s: %s", self.path, exc.strerror or exc)


# ---- the session ------------------------------------------------------------------------------

class Progress:
    """``[2/5] cloud-sla-70-30 at 700+300 IOPS, 35s left; all done in 2m10s`` on a terminal, one line per phase elsewhere."""

    def __init__(self, plan: list[PlannedPhase], stream: TextIO | None = None, stopped: threading.Event | None = None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() and not os.environ.get("CI")
        self.plan = plan
        self.stopped = stopped or threading.Event()

    def phase(self, index: int, started: float) -> None:
        if self.stopped.is_set():  # "stopping" was said: fio's last status reports while it stops print no progress under it
            return
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


def _say(text: str) -> None:
    """One line on stderr from a signal handler: a raw write (the main thread may be inside a buffered write)."""
    with contextlib.suppress(OSError):
        os.write(2, text.encode("utf-8", "backslashreplace"))


class Interrupts:
    """Ctrl-C / SIGTERM. The first stops fio (SIGTERM) and the plan, and the report of what was captured is still
    written; during the report stage it is noted and the report finished. A second during the plan kills fio and its
    job processes (they run in sessions of their own) and skips the report; during the report it aborts it
    (KeyboardInterrupt: the temporary Prometheus is stopped and its directory removed on the way out)."""

    def __init__(self, runners: list):
        self.runners = runners
        self.stop = threading.Event()
        self.aborted = False
        self.reporting = False

    def __call__(self, signum, frame) -> None:
        if not self.stop.is_set():
            self.stop.set()
            _say("\ncapture: " + ("finishing the report of what was captured" if self.reporting
                                  else "stopping; writing the report of what was captured") + " (Ctrl-C again aborts)\n")
            for runner in self.runners:
                runner.stop()
        elif not self.aborted:
            self.aborted = True
            _say("capture: aborting\n")
            if self.reporting:
                raise KeyboardInterrupt
            for runner in self.runners:
                runner.kill()


def phase_env(p: PlannedPhase, extra_env: dict[str, str]) -> dict[str, str]:
    """A load phase's job variables: its duration as RUNTIME (time-based profiles) and MAX_RUNTIME (etcd-wal's cap)."""
    seconds = str(max(1, math.ceil(p.seconds)))  # fio reads runtime=0 as "no limit"
    return {**p.env, **extra_env, "RUNTIME": seconds, "MAX_RUNTIME": seconds}


def _time_based(jobfile) -> bool:
    scopes = [jobfile.sections.get("global", {})] + [jobfile.sections.get(n, {}) for n in jobfile.jobnames]
    return any(scope.get("time_based", "0") not in ("0", "false") for scope in scopes if "time_based" in scope)


def phase_bound(runner: Runner, seconds: float) -> tuple[threading.Timer, threading.Event]:
    """A timer that stops ``runner``'s fio PHASE_GRACE_SECONDS past the end of a phase of ``seconds`` (a job that sets
    its own runtime, not ${RUNTIME}, would outlast it; fio prints its final report: the load that ran its phase), and
    the event it sets when it does."""
    overran = threading.Event()

    def cut() -> None:
        overran.set()
        runner.stop()

    return threading.Timer(seconds + PHASE_GRACE_SECONDS, cut), overran


def load_failure(outcome, seconds: float, time_based: bool) -> str:
    """Why a load phase's run does not count as the load it was meant to be ("" where it does): fio failed, or a
    time-based job ran far shorter than its phase."""
    if not outcome.ok:
        return outcome.message or "fio failed"
    ran = max((j.wall_seconds for j in outcome.result.jobs), default=0.0) if outcome.result else 0.0
    if time_based and ran < SHORT_RUN * seconds:
        return f"fio ran {ran:.2f} s of its {format_duration(seconds)} phase"
    return ""


def serve_live(store: Store, args) -> Server | None:
    """--web.listen-address: the capture's store served as the exporter serves its own (fio's live figures while a
    load runs, each finished phase's results), so a stack watching the host sees the capture's load as it sees the
    exporter's; None without the flag."""
    from .config import ConfigError
    from .http import listen

    if not getattr(args, "listen_address", None):
        if getattr(args, "web_config_file", None):
            raise CaptureError(f"--web.config.file {args.web_config_file}: only with --web.listen-address "
                               "(the capture serves nothing without it)")
        return None
    store.hold_new_series()  # what the capture runs is new: its counters start at zero for rate()
    try:
        server, _ = listen(store, args.listen_address, getattr(args, "web_config_file", None))
    except OSError as exc:  # names the flag
        raise CaptureError(str(exc)) from None
    except ConfigError as exc:
        raise CaptureError(f"--web.config.file: {exc}") from None
    threading.Thread(target=server.serve_forever, name="fioscope-capture-http", daemon=True).start()
    print(f"capture: serving the live figures on {args.listen_address}/metrics", file=sys.stderr)
    return server


def run_capture(args, thresholds: Thresholds) -> int:
    """``thresholds``: the command's settings (loaded once by the CLI), for the fio results and the report."""
    from .blockdev import device_for_path
    from .config import ConfigError, Target, check_target, load_config, parse_key_values
    from .jobs import JobFile
    from .reporting.html import write_report
    from .reporting.offline.pipeline import offline_diagnosis
    from .runner import Runner
    from .store import Store

    output = Path(args.output)
    idle = _seconds(args.idle, "--idle") if args.idle else DEFAULT_IDLE
    load = _seconds(args.load, "--load") if args.load else DEFAULT_LOAD
    interval = check_interval(args.interval)
    plan = load_plan(args.plan) if args.plan else default_plan(idle, load)
    check_plan(plan, f"--plan {args.plan}" if args.plan else "--idle/--load")
    check_output(output)
    if args.device:
        check_devices(args.device)
    try:
        extra_env = check_job_env(parse_key_values(args.env, "--env"), "--env", CaptureError)
        target = check_target(Target(name="capture", directory=Path(args.target_dir)), "--target.dir")
        if not target.directory.is_dir():
            raise CaptureError(f"--target.dir {args.target_dir}: not a directory")
        target = replace(target, cgroup=check_cgroup(args.target_cgroup, "--target.cgroup") if args.target_cgroup else target.cgroup)
        results = output / "results"
        config = load_config(None, str(results))
        runner = Runner(config, Store(config, thresholds.bucket_bounds))
        fio_rates = FioRates(output / BUNDLE_FIO_RATES, runner.store)
        time_based: dict[int, bool] = {}
        layouts: dict[str, tuple[float, list[str]]] = {}
        judged: dict[tuple, JobFile] = {}
        for i, p in enumerate(plan):  # refuse a bad job before anything runs (each job and variables judged once)
            if p.kind == "load":
                key = (p.job, tuple(sorted(phase_env(p, extra_env).items())))
                jobfile = judged[key] = judged.get(key) or runner.prepare(p.job, target, phase_env(p, extra_env))
                time_based[i] = _time_based(jobfile)
                size = max(_layout_bytes(jobfile), layouts.get(p.job, (0.0, []))[0])
                layouts[p.job] = (size, jobfile.jobnames)
    except ConfigError as exc:
        raise CaptureError(str(exc)) from None
    check_space(target.directory, layouts)
    devices = args.device or whole_disks()
    server = serve_live(runner.store, args)  # bound before the bundle exists: a taken port is refused with nothing written
    try:
        (output / "samples").mkdir(parents=True, exist_ok=True)
        results.mkdir(exist_ok=True)
    except OSError as exc:
        raise CaptureError(f"--output {output}: cannot create the bundle: {exc.strerror or exc}") from None
    prepare_config = load_config(None, str(output / "prepare"))
    prepare = Runner(prepare_config, Store(prepare_config))
    interrupts = Interrupts([runner, prepare])
    stop = interrupts.stop
    signals = (signal.SIGINT, signal.SIGTERM)
    for s in signals:
        signal.signal(s, interrupts)
    progress = Progress(plan, stopped=stop)
    sampler = Sampler(devices, interval, output / "samples" / "diskstats.jsonl")
    phases_log: list[dict] = []
    failures: list[tuple[float, float, str, str]] = []
    device = device_for_path(target.directory)
    layout_names = sorted({n for _, names in layouts.values() for n in names})
    before = {entry.name for entry in os.scandir(target.directory)}
    try:
        prepare_cgroup = replace(target, cgroup="")  # a layout needs no throttle: it is not measured
        for job, env in {p.job: p.env for p in plan if p.kind == "load"}.items():  # one layout per job: same files
            if stop.is_set():
                break
            print(f"capture: preparing {job} (fio lays out its files now, not inside a phase)", file=sys.stderr)
            # the files alone: a job that sets its own runtime would otherwise run it all, unmeasured
            outcome = prepare.run(job, prepare_cgroup, {**env, **extra_env, "RUNTIME": "1", "MAX_RUNTIME": "1"}, layout_only=True)
            if not outcome.ok and not stop.is_set():
                raise LoadFailed(f"laying out {job}'s files in {target.directory} failed: {outcome.message}; nothing was measured")
        if not stop.is_set():
            sampler.start()
        for i, p in enumerate(plan):
            if stop.is_set():
                break
            progress.announce(i)
            started, wall = time.monotonic(), time.time()
            failed = ""
            if p.kind == "idle":
                while not stop.wait(min(1.0, max(0.0, p.seconds - (time.monotonic() - started)))):
                    progress.phase(i, started)
                    if time.monotonic() - started >= p.seconds:
                        break
            else:
                def tick(_report: object, i: int = i, s: float = started) -> None:
                    fio_rates.add()
                    progress.phase(i, s)

                bound, overran = phase_bound(runner, p.seconds)
                bound.start()
                try:
                    outcome = runner.run(p.job, target, phase_env(p, extra_env), on_report=tick)
                finally:
                    bound.cancel()
                failed = "" if stop.is_set() or overran.is_set() else load_failure(outcome, p.seconds, time_based[i])
                if failed:
                    print(f"\ncapture: {p.title}: the load failed: {failed}", file=sys.stderr)
            phases_log.append({"phase": p.kind, "title": p.title, "start": wall, "end": time.time(),
                               **({"failed": failed} if failed else {})})
            if failed:
                failures.append((wall, time.time(), failed, device))
    finally:
        progress.done()
        if sampler.is_alive():
            sampler.stop()
        if not args.keep_files:
            remove_layout(target.directory, layout_names, before)
        if phases_log or stop.is_set():
            (output / "phases.json").write_text(json.dumps(phases_log, indent=1) + "\n")
    host = os.uname().nodename
    iostat = output / "iostat.json"
    iostat.write_text(json.dumps(iostat_document(host, sampler.samples)) + "\n")
    try:
        if interrupts.aborted:
            print(f"fioscope capture: aborted; no report (the samples, iostat.json and phases.json are in {output})", file=sys.stderr)
            return 130
        if len(sampler.samples) < 3 and stop.is_set():
            print(f"fioscope capture: interrupted before anything was measured; no report ({output})", file=sys.stderr)
            return 130
        if len(sampler.samples) < 3:
            raise CaptureError(f"--output {output}: too few samples for a report ({len(sampler.samples)}); raw samples kept")
        if fio_rates.errors:
            print(f"capture: {fio_rates.path}: {fio_rates.errors} fio status report(s) not written; the report cannot name a "
                  "write-back cliff where they are missing", file=sys.stderr)
        interrupts.reporting = True
        print(f"capture: writing the report ({len(sampler.samples)} samples; Ctrl-C is noted, the report finished)", file=sys.stderr)
        phases_line = ("Phases: " + "; ".join(f"{p['title']} {iso_time(p['start'])[11:19]}–{iso_time(p['end'])[11:19]}"
                                              + (" (the load failed)" if p.get("failed") else "") for p in phases_log)
                       + (" (interrupted: the report covers what was captured)" if stop.is_set() else ""))
        # said first: the verdicts below judge a load that did not run as planned
        failed_line = [f"{len(failures)} load phase(s) failed ({failures[0][2]}): the disk's verdict is inconclusive."] if failures else []
        report = offline_diagnosis([str(iostat)], str(results) if any(results.glob("*.json")) else None, None, thresholds,
                                   title=f"Capture on {host} — {target.directory}", lead=[*failed_line, phases_line],
                                   failed_loads=failures, kernel={str(iostat): sampler.samples})
        path = write_report(report, output)
    finally:
        # a stray SIGTERM reached the process as it exited, now and then, after a layout run was stopped (fio's doing, it
        # seems; not understood): ignored from here, so the exit code says what happened, not a default handler's -15
        for s in signals:
            signal.signal(s, signal.SIG_IGN)
        if server is not None:  # served until the report is written: the stack's last scrapes see the last phase's results
            server.shutdown()
    print(f"capture: bundle {output} (report {path})")
    if stop.is_set():
        return 130
    if failures:
        print(f"fioscope capture: {len(failures)} load phase(s) failed: the report says inconclusive for {device or 'the target'}",
              file=sys.stderr)
        return 1
    return 0
