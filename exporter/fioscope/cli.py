"""``fioscope serve | run | check`` (and ``lab``, root only).

Exit codes: 0 ok / pass, 1 fio failed or a verdict failed, 2 bad config, job file or arguments.
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from .config import (
    DEFAULT_LISTEN,
    Config,
    ConfigError,
    Target,
    check_cgroup,
    check_job_env,
    check_target,
    load_config,
    parse_duration,
    parse_limits,
)
from .config import parse_key_values as _key_values
from .jobs import check_safe, load_job, resolve_job
from .lab import KINDS as LAB_KINDS

if TYPE_CHECKING:
    from .thresholds import Thresholds

log = logging.getLogger("fioscope")

# a declared rate beyond an exabyte (or IOPS) per second is a typo: "999...9" would be inf
MAX_LIMIT = float(2**60)
# --iodepth x --repeat: the sweep's points, each a fio job section run one after the other
MAX_SWEEP_POINTS = 1000


def load_thresholds(args) -> Thresholds:
    """alerts/config.yaml with the command's --set overrides: read here, once per command, and passed down."""
    from fioscope_mixin.settings import SettingsError

    from .thresholds import load_thresholds as load

    try:
        return load(getattr(args, "set", None))
    except SettingsError as exc:
        raise ConfigError(str(exc)) from None


def add_set_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override alerts/config.yaml (as the stack's and the generator's --set): the thresholds judged by")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fioscope", description="Run fio and publish its results as Prometheus metrics.")
    p.add_argument("--log.level", dest="log_level", default="info", choices=["debug", "info", "warning", "error"])
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve /metrics; run the configured schedule")
    serve.add_argument("--config.file", dest="config_file", help="YAML config (targets, schedule); without it, serve the results dir")
    serve.add_argument("--results.dir", dest="results_dir", help="where result files live (default: from config, else ./results)")
    serve.add_argument("--web.listen-address", dest="listen_address", help=f"HOST:PORT to listen on (default {DEFAULT_LISTEN})")
    serve.add_argument("--web.config.file", dest="web_config_file",
                       help="TLS and basic auth, in the exporter-toolkit format node_exporter takes")

    run = sub.add_parser("run", help="run one fio job now, print a summary and verdicts")
    run.add_argument("job", help="profile name from fio-jobs/ or a path to a job file")
    run.add_argument("--config.file", dest="config_file")
    run.add_argument("--target", help="target name from the config file")
    run.add_argument("--target.dir", dest="target_dir", help="directory to run the job in (instead of --target)")
    run.add_argument("--results.dir", dest="results_dir")
    run.add_argument("--env", action="append", metavar="KEY=VALUE", help="job variable (e.g. RUNTIME=10)")
    run.add_argument("--limit", action="append", metavar="KEY=VALUE", help="declared disk limit, e.g. read_iops=700")
    run.add_argument("--sla.latency", dest="sla_latency", help="p99 latency SLA, e.g. 30ms")
    run.add_argument("--fsync.threshold", dest="fsync_threshold", default=None,
                     help="fdatasync p99 pass line (default: thresholds.etcd_fsync_p99_seconds of alerts/config.yaml, etcd's 10 ms)")

    run.add_argument("--iodepth", help="sweep these queue depths, e.g. 1,4,16,64 (the job's first section, one run per depth)")
    run.add_argument("--repeat", type=int, default=1, help="with --iodepth: run the whole sweep this many times (error bars)")
    run.add_argument("--target.cgroup", dest="target_cgroup", help="run fio inside this cgroup (a lab disk's throttle; root)")

    check = sub.add_parser("check", help="validate the config and job files, then exit")
    check.add_argument("--config.file", dest="config_file")
    check.add_argument("jobs", nargs="*", help="job files or profiles to check (default: every profile)")
    check.add_argument("--target", help="check the jobs against this target of the config (default: a scratch directory)")
    check.add_argument("--target.dir", dest="target_dir", help="check the jobs against this directory")

    add_report_parser(sub)
    add_capture_parser(sub)

    lab = sub.add_parser("lab", help="loop-backed test disks with controlled limits (root only)")
    lab.add_argument("--state-dir", default=None, help="where lab disks and their state live (default /var/lib/fioscope-lab)")
    labsub = lab.add_subparsers(dest="lab_command", required=True)
    lab_up = labsub.add_parser("up", help="create a lab disk: throttled (IOPS), read-capped, write-capped, bandwidth-capped, "
                                          "dual-capped (IOPS and bytes/s), burst-then-cap, stalled (1-2 IOPS), slow-fsync, healthy or ram "
                                          "(uncapped, on memory)")
    lab_up.add_argument("kind", choices=list(LAB_KINDS))
    lab_up.add_argument("--burst-seconds", type=int, default=None, help="burst-then-cap: uncapped this long, then capped (default 120)")
    lab_up.add_argument("--name", default="")
    lab_up.add_argument("--size", default="2G")
    for flag in ("read-iops", "write-iops", "read-bps", "write-bps"):
        lab_up.add_argument(f"--{flag}", type=int, default=None)
    lab_down = labsub.add_parser("down", help="remove a lab disk (or --all), also after a crash")
    lab_down.add_argument("name", nargs="?")
    lab_down.add_argument("--all", action="store_true")
    labsub.add_parser("status", help="list lab disks")
    lab_exec = labsub.add_parser("exec", help="run a command inside a lab disk's cgroup")
    lab_exec.add_argument("name")
    lab_exec.add_argument("argv", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    # a name from argv or the filesystem may hold undecodable bytes (lone surrogates): printed escaped, never a traceback
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # matplotlib's first use on a machine logs its font cache at INFO: not fioscope's news (and a CLI error stays one line)
    logging.getLogger("matplotlib").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "check":
            return cmd_check(args)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "capture":
            return cmd_capture(args)
        return cmd_lab(args)
    except ConfigError as exc:
        print(f"fioscope: {exc}", file=sys.stderr)
        return 2


def cmd_serve(args) -> int:
    from .http import listen
    from .runner import Runner, Scheduler
    from .scanner import ScanLoop
    from .store import Store

    config = load_config(args.config_file, args.results_dir)
    thresholds = load_thresholds(args)
    address = args.listen_address or config.listen_address
    config.results_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config, thresholds.bucket_bounds)
    store.scan()
    store.hold_new_series()
    stop = threading.Event()
    runner = Runner(config, store)
    scan_loop = ScanLoop(store, config.scan_interval_seconds, stop)
    scheduler = Scheduler(config, runner, stop) if config.schedule else None
    try:
        server, web = listen(store, address, args.web_config_file, scan_loop, scheduler)
    except OSError as exc:
        print(f"fioscope: {exc}", file=sys.stderr)
        return 2
    scan_loop.start()
    if scheduler is not None:
        scheduler.start()

    def shutdown(signum, frame):
        stop.set()
        runner.stop()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    scheme = "https" if web and web.tls else "http"
    log.info("serving %s results from %s on %s://%s:%s/metrics", len(store.jobs), config.results_dir, scheme, *server.server_address[:2])
    server.serve_forever()
    return 0


def _run_target(args, config: Config) -> Target:
    if args.target:
        target = config.target(args.target)
    elif args.target_dir:
        target = config.target_for_directory(str(Path(args.target_dir).resolve())) or \
            check_target(Target(name="cli", directory=Path(args.target_dir)), "--target.dir")
    else:
        raise ConfigError("run: give --target NAME (with --config.file) or --target.dir DIR")
    if not target.directory.is_dir():  # a bad argument, not a failed run
        where = f"--target {target.name}" if args.target else "--target.dir"
        raise ConfigError(f"{where}: directory {target.directory} does not exist")
    limits = parse_limits(_key_values(args.limit, "--limit"), "--limit") if args.limit else target.limits
    for key, value in limits.as_dict().items():
        if key != "independent" and not (math.isfinite(value) and value <= MAX_LIMIT):
            raise ConfigError(f"--limit {key}: {value:g} is not a finite rate up to {MAX_LIMIT:g}")
    sla = parse_duration(args.sla_latency, "--sla.latency") if args.sla_latency else target.sla_latency_seconds
    cgroup = check_cgroup(args.target_cgroup, "--target.cgroup") if args.target_cgroup else target.cgroup
    return replace(target, limits=limits, sla_latency_seconds=sla, cgroup=cgroup)


def cmd_run(args) -> int:
    from .runner import Runner
    from .store import Store
    from .sweep import Progress, parse_depths, write_sweep
    from .verdicts import job_verdicts, summary_lines

    config = load_config(args.config_file, args.results_dir)
    target = _run_target(args, config)
    # without --fsync.threshold: etcd's tiers from alerts/config.yaml (read here, exit 2 if unreadable)
    thresholds = load_thresholds(args)
    fsync_threshold = parse_duration(args.fsync_threshold, "--fsync.threshold", positive=True) if args.fsync_threshold else None
    depths = parse_depths(args.iodepth) if args.iodepth else []
    if depths and not 1 <= args.repeat <= MAX_SWEEP_POINTS // len(depths):
        raise ConfigError(f"--repeat {args.repeat}: must be 1 to {MAX_SWEEP_POINTS // len(depths)} "
                          f"(at most {MAX_SWEEP_POINTS} sweep points with {len(depths)} depths)")
    runner = Runner(config, Store(config, thresholds.bucket_bounds))
    signal.signal(signal.SIGTERM, lambda s, f: runner.stop())
    env = check_job_env(_key_values(args.env, "--env"), "--env", ConfigError)
    with tempfile.TemporaryDirectory(prefix="fioscope-sweep-") as sweep_dir:
        job = args.job
        if depths:
            job = str(write_sweep(resolve_job(job, config.jobs_dir), depths, args.repeat, Path(sweep_dir)))
        progress = Progress(runner.prepare(job, target, env))
        try:
            outcome = runner.run(job, target, env, on_report=progress)
        except OSError as exc:  # the results directory cannot be written
            print(f"fioscope: {config.results_dir}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        finally:
            progress.done()
    if outcome.result is None:
        print(f"fioscope: {outcome.profile} failed: {outcome.message}", file=sys.stderr)
        return 1
    ok = outcome.ok
    for job in outcome.result.jobs:
        print("\n".join(summary_lines(job)))
        for verdict in job_verdicts(job, target.limits, target.sla_latency_seconds, fsync_threshold, thresholds):
            print(f"  {verdict.text}")
            ok = ok and verdict.ok is not False
    if not outcome.ok:
        print(f"fioscope: {outcome.profile} failed: {outcome.message}", file=sys.stderr)
    print(f"result: {outcome.result_path}")
    return 0 if ok else 1


def cmd_check(args) -> int:
    """Every job named here and every schedule entry, through the same guard as a run; exit 2 on any refusal."""
    import tempfile

    config = load_config(args.config_file)
    jobs = args.jobs or sorted(p.stem for p in config.jobs_dir.glob("*.fio"))
    problems: list[str] = []

    def judge(job: str, target: Target, env: dict[str, str]) -> None:
        try:
            # fio --showcmd of fioscope's own PATH, never the config's fio_binary: checking a config runs nothing it names
            check_safe(load_job(resolve_job(job, config.jobs_dir), {**env, "TARGET_DIR": str(target.directory)}), target)
        except ConfigError as exc:
            problems.append(str(exc))

    with tempfile.TemporaryDirectory(prefix="fioscope-check-") as scratch:
        if args.target:
            probe = config.target(args.target)
        elif args.target_dir:
            probe = check_target(Target(name="cli", directory=Path(args.target_dir)), "--target.dir")
        else:
            probe = Target(name="check", directory=Path(scratch).resolve())
        for job in jobs:
            judge(job, probe, {})
        for entry in config.schedule:
            judge(entry.job, config.target(entry.target), entry.env)
    for problem in problems:
        print(f"fioscope: {problem}", file=sys.stderr)
    if problems:
        return 2
    print(f"{config.source}: ok ({len(config.targets)} targets, {len(config.schedule)} schedule entries, "
          f"{len(jobs)} job files: {', '.join(jobs)})")
    return 0


def add_report_parser(sub) -> None:
    report = sub.add_parser("report", help="write an HTML report: diagnosis (Prometheus or iostat files), performance, comparison",
                            description="Diagnosis: --prometheus.url (+ --last/--from/--to) or --iostat FILE...; "
                                        "performance: --results DIR; comparison: --baseline and --candidate.")
    report.add_argument("--output", required=True, help="directory for report.html and the chart PNGs")
    report.add_argument("--pdf", action="store_true", help="also write report.pdf")
    report.add_argument("--prometheus.url", dest="prometheus_url", help="diagnosis from this Prometheus")
    report.add_argument("--last", help="window ending now, e.g. 1h, 24h (default 1h)")
    report.add_argument("--from", dest="start", help="window start: unix seconds or ISO 8601 (UTC unless it says otherwise)")
    report.add_argument("--to", dest="end", help="window end (default now)")
    report.add_argument("--host", help="only this host (the host label); default every host")
    report.add_argument("--device", action="append", help="only this device (repeatable); default every device")
    report.add_argument("--iostat", nargs="+", metavar="FILE", help="offline diagnosis from `iostat -x -t -o JSON` files")
    report.add_argument("--results", help="fio result files: a performance report, or the fio runs of a diagnosis")
    report.add_argument("--latency-target", dest="latency_target", help="p99 latency target for the performance report, e.g. 5ms")
    report.add_argument("--baseline", help="comparison: a results directory, or target=NAME / tag:KEY=VALUE within --results")
    report.add_argument("--candidate", help="comparison: like --baseline")
    add_set_flag(report)


def add_capture_parser(sub) -> None:
    capture = sub.add_parser("capture", help="the support method in one command: record disk and CPU statistics while fio runs "
                                             "idle and load phases, then write a bundle with report.html",
                             description="Records /proc/diskstats and /proc/stat for the whole session while a phase plan runs "
                                         "(default: idle, cloud-sla-70-30 at 700+300 IOPS, idle, the same at 200 %, idle), "
                                         "then writes --output: raw samples, iostat.json, fio results, report.html, PNGs, report.json. "
                                         "Exit 0: every load ran as planned; 1: a load failed (the report says inconclusive); "
                                         "2: bad flags or plan, or the loads do not fit the free space; 130: interrupted "
                                         "(Ctrl-C or SIGTERM: fio stopped, the report of what was captured written; "
                                         "a second one aborts without a report).")
    capture.add_argument("--target.dir", dest="target_dir", required=True, help="directory on the disk under test (fio writes only there)")
    capture.add_argument("--output", required=True, help="bundle directory (new or empty)")
    capture.add_argument("--plan", help="phase plan YAML: phases: [{idle: 30s}, {job: PROFILE, duration: 60s, env: {K: V}}, ...]")
    capture.add_argument("--idle", help="default plan: length of each idle phase (default 30s)")
    capture.add_argument("--load", help="default plan: length of each load phase (default 2m30s: the throttling rules need ~2 min of load)")
    capture.add_argument("--interval", help="time between samples, 100ms to 1h (default 2s)")
    capture.add_argument("--device", action="append", help="record only this block device (repeatable; default every disk)")
    capture.add_argument("--env", action="append", metavar="KEY=VALUE", help="job variable for every load phase, e.g. SIZE=256m")
    capture.add_argument("--target.cgroup", dest="target_cgroup", help="run fio inside this cgroup (a lab disk's throttle; root)")
    capture.add_argument("--keep-files", dest="keep_files", action="store_true",
                         help="keep the files fio laid out in --target.dir (default: removed at the end)")
    capture.add_argument("--web.listen-address", dest="listen_address",
                         help="also serve the capture's live fio figures on HOST:PORT/metrics, as `fioscope serve` does, for a "
                              "stack watching this host (default: no listener)")
    capture.add_argument("--web.config.file", dest="web_config_file",
                         help="with --web.listen-address: TLS and basic auth, in the exporter-toolkit format node_exporter takes")
    add_set_flag(capture)


def cmd_capture(args) -> int:
    from .capture import LoadFailed, run_capture
    from .reporting import ReportError

    thresholds = load_thresholds(args)
    try:
        return run_capture(args, thresholds)
    except LoadFailed as exc:
        print(f"fioscope capture: {exc}", file=sys.stderr)
        return 1
    except ReportError as exc:
        print(f"fioscope capture: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fioscope capture: aborted", file=sys.stderr)
        return 130
    except Exception as exc:  # never a traceback; the log at debug level has it
        log.debug("capture failed", exc_info=True)
        print(f"fioscope capture: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def cmd_report(args) -> int:
    from .reporting import ReportError
    from .reporting.main import run_report

    thresholds = load_thresholds(args)
    once = _interrupt_once()
    previous = {s: signal.signal(s, once) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        path = run_report(args, thresholds)
    except KeyboardInterrupt:
        print("fioscope report: interrupted; nothing written", file=sys.stderr)
        return 130
    except ReportError as exc:
        print(f"fioscope report: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # never a traceback for a report; the log at debug level has it
        log.debug("report failed", exc_info=True)
        print(f"fioscope report: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    print(f"report: {path}")
    return 0


def _interrupt_once():
    """SIGINT or SIGTERM as KeyboardInterrupt, once: the way out (stopping the temporary Prometheus, removing its
    directory) runs, and is not itself cut short by a second signal. SIGTERM's default would skip it."""
    raised = []

    def handler(signum, frame):
        if not raised:
            raised.append(signum)
            raise KeyboardInterrupt

    return handler


def cmd_lab(args) -> int:
    import json

    from . import lab

    state_dir = Path(args.state_dir) if args.state_dir else lab.DEFAULT_STATE_DIR
    try:
        if args.lab_command == "up":
            disk = lab.up(args.kind, args.name, args.size, state_dir, args.read_iops, args.write_iops,
                          args.read_bps, args.write_bps, args.burst_seconds)
            print(json.dumps({"name": disk.name, "device": disk.loop_device, "mountpoint": disk.mountpoint,
                              "cgroup": disk.cgroup, "backing_device": disk.backing_device, "limits": disk.limits,
                              "burst_seconds": disk.burst_seconds}))
        elif args.lab_command == "down":
            if not args.all and not args.name:
                raise lab.LabError("down: name a lab disk or give --all")
            removed, failed = lab.down_all(state_dir) if args.all else (lab.down(args.name, state_dir), [])
            print("\n".join(f"removed {r}" for r in removed) or "nothing to remove")
            for line in failed:  # the other disks were still taken down
                print(f"fioscope lab: {line}", file=sys.stderr)
            if failed:
                return 2
        elif args.lab_command == "status":
            for disk in lab.status(state_dir):
                print(f"{disk.name}: {disk.kind} {disk.loop_device} on {disk.mountpoint} limits {disk.limits} cgroup {disk.cgroup}")
        elif args.lab_command == "exec":
            argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            if not argv:
                raise lab.LabError("exec: give a command after --")
            lab.exec_in(args.name, argv, state_dir)
    except (lab.LabError, OSError) as exc:
        print(f"fioscope lab: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
