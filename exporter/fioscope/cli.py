"""``fioscope serve | run | check`` (and ``lab``, root only).

Exit codes: 0 ok / pass, 1 fio failed or a verdict failed, 2 bad config, job file or arguments.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path

from .config import (
    DEFAULT_LISTEN,
    Config,
    ConfigError,
    Target,
    load_config,
    parse_duration,
    parse_limits,
)
from .jobs import check_safe, load_job, resolve_job

log = logging.getLogger("fioscope")


def _key_values(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fioscope", description="Run fio and publish its results as Prometheus metrics.")
    p.add_argument("--log.level", dest="log_level", default="info", choices=["debug", "info", "warning", "error"])
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve /metrics; run the configured schedule")
    serve.add_argument("--config.file", dest="config_file", help="YAML config (targets, schedule); without it, serve the results dir")
    serve.add_argument("--results.dir", dest="results_dir", help="where result files live (default: from config, else ./results)")
    serve.add_argument("--web.listen-address", dest="listen_address", help=f"HOST:PORT to listen on (default {DEFAULT_LISTEN})")

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

    run.add_argument("--target.cgroup", dest="target_cgroup", help="run fio inside this cgroup (a lab disk's throttle; root)")

    check = sub.add_parser("check", help="validate the config and job files, then exit")
    check.add_argument("--config.file", dest="config_file")
    check.add_argument("jobs", nargs="*", help="job files or profiles to check (default: every profile)")

    lab = sub.add_parser("lab", help="loop-backed test disks with controlled limits (root only)")
    lab.add_argument("--state-dir", default=None, help="where lab disks and their state live (default /var/lib/fioscope-lab)")
    labsub = lab.add_subparsers(dest="lab_command", required=True)
    lab_up = labsub.add_parser("up", help="create a lab disk: throttled (IOPS), read-capped, write-capped, bandwidth-capped, "
                                          "burst-then-cap, slow-fsync or healthy")
    lab_up.add_argument("kind", choices=["throttled", "read-capped", "write-capped", "bandwidth-capped", "burst-then-cap",
                                         "slow-fsync", "healthy"])
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
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "check":
            return cmd_check(args)
        return cmd_lab(args)
    except ConfigError as exc:
        print(f"fioscope: {exc}", file=sys.stderr)
        return 2


def cmd_serve(args) -> int:
    from .collector import Exposition
    from .collector.exporter import ScrapeTimer
    from .http import serve
    from .runner import Runner, Scheduler
    from .store import Store

    config = load_config(args.config_file, args.results_dir)
    config.results_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config)
    store.scan()
    timer = ScrapeTimer()
    try:
        server = serve(Exposition(store, timer), timer, args.listen_address or config.listen_address)
    except (OSError, ValueError) as exc:
        print(f"fioscope: cannot listen on {args.listen_address or config.listen_address}: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    runner = Runner(config, store)

    def scan_loop():
        while not stop.wait(config.scan_interval_seconds):
            store.scan()

    threading.Thread(target=scan_loop, name="fioscope-scan", daemon=True).start()
    if config.schedule:
        Scheduler(config, runner, stop).start()

    def shutdown(signum, frame):
        stop.set()
        runner.stop()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    log.info("serving %s results from %s on http://%s/metrics", len(store.jobs), config.results_dir, "%s:%s" % server.server_address[:2])
    server.serve_forever()
    return 0


def _run_target(args, config: Config) -> Target:
    if args.target:
        target = config.target(args.target)
    elif args.target_dir:
        target = config.target_for_directory(str(Path(args.target_dir).resolve())) or Target(name="cli", directory=Path(args.target_dir).resolve())
    else:
        raise ConfigError("run: give --target NAME (with --config.file) or --target.dir DIR")
    limits = parse_limits(_key_values(args.limit, "--limit"), "--limit") if args.limit else target.limits
    sla = parse_duration(args.sla_latency, "--sla.latency") if args.sla_latency else target.sla_latency_seconds
    return replace(target, limits=limits, sla_latency_seconds=sla, cgroup=args.target_cgroup or target.cgroup)


def cmd_run(args) -> int:
    from .report import job_verdicts, summary_lines
    from .runner import Runner
    from .settings import default_fsync_threshold
    from .store import Store

    config = load_config(args.config_file, args.results_dir)
    target = _run_target(args, config)
    fsync_threshold = (parse_duration(args.fsync_threshold, "--fsync.threshold") if args.fsync_threshold
                       else default_fsync_threshold())
    runner = Runner(config, Store(config))
    signal.signal(signal.SIGTERM, lambda s, f: runner.stop())
    outcome = runner.run(args.job, target, _key_values(args.env, "--env"))
    if outcome.result is None:
        print(f"fioscope: {outcome.profile} failed: {outcome.message}", file=sys.stderr)
        return 1
    ok = outcome.ok
    for job in outcome.result.jobs:
        print("\n".join(summary_lines(job)))
        for verdict in job_verdicts(job, target.limits, target.sla_latency_seconds, fsync_threshold):
            print(f"  {verdict.text}")
            ok = ok and verdict.ok
    if not outcome.ok:
        print(f"fioscope: {outcome.profile} failed: {outcome.message}", file=sys.stderr)
    print(f"result: {outcome.result_path}")
    return 0 if ok else 1


def cmd_check(args) -> int:
    config = load_config(args.config_file)
    jobs = args.jobs or sorted(p.stem for p in config.jobs_dir.glob("*.fio"))
    probe = Target(name="check", directory=Path("/nonexistent-fioscope-target"))
    checked = 0
    for job in jobs:
        load_job(resolve_job(job, config.jobs_dir), {"TARGET_DIR": str(probe.directory)})
        checked += 1
    for entry in config.schedule:
        target = config.target(entry.target)
        check_safe(load_job(resolve_job(entry.job, config.jobs_dir), {**entry.env, "TARGET_DIR": str(target.directory)}), target)
    print(f"{config.source}: ok ({len(config.targets)} targets, {len(config.schedule)} schedule entries, {checked} job files)")
    return 0


def cmd_lab(args) -> int:
    import json

    from . import lab

    state_dir = Path(args.state_dir) if args.state_dir else lab.DEFAULT_STATE_DIR
    try:
        if args.lab_command == "up":
            disk = lab.up(args.kind, args.name, args.size, state_dir, args.read_iops, args.write_iops,
                          args.read_bps, args.write_bps, args.burst_seconds)
            print(json.dumps({"name": disk.name, "device": disk.loop_device, "mountpoint": disk.mountpoint,
                              "cgroup": disk.cgroup, "limits": disk.limits, "burst_seconds": disk.burst_seconds}))
        elif args.lab_command == "down":
            if not args.all and not args.name:
                raise lab.LabError("down: name a lab disk or give --all")
            removed = lab.down_all(state_dir) if args.all else lab.down(args.name, state_dir)
            print("\n".join(f"removed {r}" for r in removed) or "nothing to remove")
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
