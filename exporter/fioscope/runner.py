"""Running fio: one job now (``run_job``), or the configured schedule (``Scheduler``).

fio runs with ``--output-format=json+ --status-interval``; every periodic report on
its stdout updates the live figures, and the final report becomes a result file in
the results directory, which the store ingests like any file dropped there.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .config import Config, ScheduleEntry, Target
from .jobs import JobFile, check_safe, load_job, resolve_job
from .model import RunResult
from .parser import DocumentStream, ParseError, parse_document
from .store import FAILURE_KEY, Store

log = logging.getLogger("fioscope.runner")


@dataclass
class RunOutcome:
    profile: str
    jobnames: list[str]
    ok: bool
    message: str = ""
    result_path: Path | None = None
    result: RunResult | None = None
    document: dict | None = None  # fio's final report as it printed it
    annotations: dict = field(default_factory=dict)


class Runner:
    def __init__(self, config: Config, store: Store):
        self.config = config
        self.store = store
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()  # one fio at a time: two loads on one disk spoil both

    def prepare(self, job: str, target: Target, env: dict[str, str] | None = None) -> JobFile:
        """Resolve, parse and safety-check a job; raises a ConfigError subclass."""
        path = resolve_job(job, self.config.jobs_dir)
        jobfile = load_job(path, {**(env or {}), "TARGET_DIR": str(target.directory)})
        check_safe(jobfile, target)
        return jobfile

    def run(self, job: str, target: Target, env: dict[str, str] | None = None,
            on_report: Callable[[RunResult], None] | None = None) -> RunOutcome:
        """``on_report`` sees every periodic status report (``fioscope run``'s progress line)."""
        env = {**(env or {}), "TARGET_DIR": str(target.directory)}
        jobfile = self.prepare(job, target, env)
        with self._lock:
            self.store.start_run(jobfile.jobnames)
            try:
                outcome = self._run_fio(jobfile, target, env, on_report)
            finally:
                self.store.finish_run(jobfile.jobnames)
            outcome.result_path = self._write_result(outcome)
            self.store.ingest_file(outcome.result_path)
        return outcome

    def stop(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()

    def _run_fio(self, jobfile: JobFile, target: Target, env: dict[str, str],
                 on_report: Callable[[RunResult], None] | None = None) -> RunOutcome:
        annotations = {"target": target.name, "profile": jobfile.path.stem}
        if target.limits.declared():
            annotations["limits"] = target.limits.as_dict()
        if target.sla_latency_seconds:
            annotations["sla_latency_seconds"] = target.sla_latency_seconds
        outcome = RunOutcome(profile=jobfile.path.stem, jobnames=jobfile.jobnames, ok=False, annotations=annotations)
        interval = max(1, round(self.config.status_interval_seconds))
        cmd = [self.config.fio_binary, str(jobfile.path), "--output-format=json+", f"--status-interval={interval}"]
        if not target.directory.is_dir():
            outcome.message = f"target directory {target.directory} does not exist"
            return outcome
        # a lab target's throttle applies to processes inside its cgroup: fio joins it before exec
        join = (lambda: Path(target.cgroup, "cgroup.procs").write_text(str(os.getpid()))) if target.cgroup else None
        try:
            self._process = subprocess.Popen(
                cmd, cwd=target.directory, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env={**os.environ, **jobfile.defaults, **env}, text=True, bufsize=1, preexec_fn=join,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            outcome.message = f"cannot start {self.config.fio_binary}: {getattr(exc, 'strerror', None) or exc}"
            return outcome
        process = self._process
        stderr_lines: list[str] = []
        reader = threading.Thread(target=lambda: stderr_lines.extend(process.stderr), daemon=True)
        reader.start()
        stream = DocumentStream(source=str(jobfile.path))
        try:
            for line in process.stdout:
                for report in stream.feed(line):
                    self.store.update_live(report)
                    if on_report is not None:
                        on_report(report)
        except ParseError as exc:
            log.error("%s: unreadable fio status report: %s", jobfile.path, exc)
        rc = process.wait()
        reader.join(timeout=5)
        self._process = None
        errors = " | ".join(ln.strip() for ln in stderr_lines if ln.strip())[-500:]
        if stream.last_document is None:
            outcome.message = f"fio exited {rc} without a report: {errors or 'no output'}"
            return outcome
        outcome.document = stream.last_document
        # parsed afresh: the stream's copy had its rates rewritten to per-interval figures by update_live
        outcome.result = parse_document(stream.last_document, str(jobfile.path))
        failed_jobs = [j.jobname for j in outcome.result.jobs if j.error]
        if rc != 0 or failed_jobs:
            outcome.message = f"fio exited {rc}" + (f", job error in {', '.join(failed_jobs)}" if failed_jobs else "") + (f": {errors}" if errors else "")
            # a killed fio leaves its last status report: published, but counted as a failed run
            outcome.annotations["failed"] = outcome.message
        else:
            outcome.ok = True
        return outcome

    def _write_result(self, outcome: RunOutcome) -> Path:
        """Atomically write the final report (or a failure record) into the results directory."""
        results = self.config.results_dir
        results.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{time.time_ns() % 1_000_000:06d}"
        if outcome.result is not None:
            document = dict(outcome.document)
            document["fioscope"] = outcome.annotations
            path = results / f"{outcome.profile}-{stamp}.json"
        else:
            document = {FAILURE_KEY: {"jobnames": outcome.jobnames, "profile": outcome.profile,
                                      "message": outcome.message, "timestamp": time.time(), **outcome.annotations}}
            path = results / f"{outcome.profile}-{stamp}.failure.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(document, indent=1))
        tmp.replace(path)
        return path


class Scheduler(threading.Thread):
    """Runs the configured schedule: each entry ``repeat`` times with ``idle`` gaps, every ``every``."""

    def __init__(self, config: Config, runner: Runner, stop: threading.Event):
        super().__init__(name="fioscope-scheduler", daemon=True)
        self.config = config
        self.runner = runner
        self.stop_event = stop

    def run(self) -> None:
        started = time.time()
        due = {i: started + e.start_delay_seconds for i, e in enumerate(self.config.schedule)}
        while due and not self.stop_event.is_set():
            index = min(due, key=due.get)
            if self.stop_event.wait(max(0.0, due[index] - time.time())):
                return
            entry = self.config.schedule[index]
            cycle_start = time.time()
            self._cycle(entry)
            if entry.every_seconds:
                due[index] = max(cycle_start + entry.every_seconds, time.time())
            else:
                del due[index]

    def _cycle(self, entry: ScheduleEntry) -> None:
        target = self.config.target(entry.target)
        for i in range(entry.repeat):
            if i and self.stop_event.wait(entry.idle_seconds):
                return
            try:
                outcome = self.runner.run(entry.job, target, entry.env)
            except Exception as exc:  # a bad job must not stop the schedule or the server
                log.error("schedule %s on %s: %s", entry.job, entry.target, exc)
                return
            if outcome.ok:
                log.info("%s on %s: done, %s", entry.job, entry.target, outcome.result_path)
            else:
                log.error("%s on %s: failed: %s", entry.job, entry.target, outcome.message)
