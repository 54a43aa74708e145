"""Running fio: one job now (``run_job``), or the configured schedule (``Scheduler``).

fio runs with ``--output-format=json+ --status-interval``; every periodic report on
its stdout updates the live figures, and the final report becomes a result file in
the results directory, which the store ingests like any file dropped there.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from .blockdev import device_for_path
from .config import Config, ConfigError, ScheduleEntry, Target
from .jobs import JobFile, check_safe, fio_executable, load_job, resolve_job
from .lifetime import RUN_TAG, child_setup
from .model import RunResult
from .parser import DocumentStream
from .proctree import kill_tree
from .resultfile import (
    Annotation,
    FailureRecord,
    finish_running,
    note_fio_pid,
    printable,
    run_tag,
    write_failure,
    write_result,
    write_running,
)
from .store import Store

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
    annotation: Annotation = field(default_factory=Annotation)


class Runner:
    def __init__(self, config: Config, store: Store):
        self.config = config
        self.store = store
        self._process: subprocess.Popen | None = None
        self._stopped: subprocess.Popen | None = None  # the fio that stop() asked to end
        self._lock = threading.Lock()  # one fio at a time: two loads on one disk spoil both

    def prepare(self, job: str, target: Target, env: dict[str, str] | None = None) -> JobFile:
        """Resolve, parse and safety-check a job; raises a ConfigError subclass."""
        path = resolve_job(job, self.config.jobs_dir)
        jobfile = load_job(path, {**(env or {}), "TARGET_DIR": str(target.directory)})
        check_safe(jobfile, target, self.config.fio_binary)
        return jobfile

    def run(self, job: str, target: Target, env: dict[str, str] | None = None,
            on_report: Callable[[RunResult], None] | None = None, layout_only: bool = False) -> RunOutcome:
        """``on_report`` sees every periodic status report (``fioscope run``'s progress line). ``layout_only``: fio
        lays out the job's files and runs none of its I/O (``--create_only``), whatever runtime the job sets."""
        env = {**(env or {}), "TARGET_DIR": str(target.directory)}
        jobfile = self.prepare(job, target, env)
        annotation = Annotation(
            target=target.name, device=device_for_path(target.directory), directory=printable(str(target.directory)),
            profile=jobfile.path.stem, limits=target.limits if target.limits.declared() else None,
            sla_latency_seconds=target.sla_latency_seconds,
        )
        with self._lock:
            # a marker while fio runs: if fioscope dies now, the next scan counts the run as failed
            marker = write_running(self.config.results_dir, jobfile.jobnames, annotation)
            self.store.start_run(jobfile.jobnames, target.name, annotation.device)
            try:
                outcome = self._run_fio(jobfile, target, env, annotation, on_report, marker, layout_only)
            finally:
                self.store.finish_run(jobfile.jobnames, target.name)
            try:
                outcome.result_path = self._write_result(outcome)
            finally:
                finish_running(marker)
            self.store.ingest_file(outcome.result_path, settled=True)
        return outcome

    def stop(self) -> None:
        """SIGTERM fio: it ends its jobs and prints its final report. A run stopped so is a shorter run, not a failed
        one (fio exits 128): its result carries no failure, though ``run`` does not call it ok."""
        process = self._process
        if process is not None and process.poll() is None:
            self._stopped = process
            process.terminate()

    def kill(self) -> None:
        """SIGKILL fio and its job processes (they run in sessions of their own); ``run`` then returns a failed
        outcome and removes its ``.running`` marker as after any failed run."""
        process = self._process
        if process is not None and process.returncode is None:
            kill_tree(process.pid)

    def _run_fio(self, jobfile: JobFile, target: Target, env: dict[str, str], annotation: Annotation,
                 on_report: Callable[[RunResult], None] | None = None, marker: Path | None = None,
                 layout_only: bool = False) -> RunOutcome:
        outcome = RunOutcome(profile=jobfile.path.stem, jobnames=jobfile.jobnames, ok=False, annotation=annotation)
        interval = max(1, round(self.config.status_interval_seconds))
        if not target.directory.is_dir():
            outcome.message = f"target directory {target.directory} does not exist"
            return outcome
        try:  # by its absolute path: the job's environment never picks the program
            cmd = [fio_executable(self.config.fio_binary), str(jobfile.path), "--output-format=json+", f"--status-interval={interval}",
                   *(["--create_only=1"] if layout_only else [])]
        except ConfigError as exc:
            outcome.message = f"cannot start fio: {exc}"
            return outcome
        # a lab target's throttle applies to processes inside its cgroup: fio joins it before exec
        join = (lambda: Path(target.cgroup, "cgroup.procs").write_text(str(os.getpid()))) if target.cgroup else None
        # fio never outlives fioscope: a death signal, and a tag its job processes inherit (lifetime.py)
        environment = {**jobfile.environment, RUN_TAG: run_tag(marker)} if marker else jobfile.environment
        try:
            self._process = subprocess.Popen(
                cmd, cwd=target.directory, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=environment, text=True, errors="surrogateescape", bufsize=1, preexec_fn=child_setup(join),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            outcome.message = f"cannot start {self.config.fio_binary}: {getattr(exc, 'strerror', None) or exc}"
            return outcome
        process = self._process
        if marker is not None:
            note_fio_pid(marker, process.pid)
        assert process.stdout is not None and process.stderr is not None  # both are pipes
        stderr_lines: list[str] = []
        reader = threading.Thread(target=lambda: stderr_lines.extend(process.stderr or ()), daemon=True)
        reader.start()
        stream = DocumentStream(source=str(jobfile.path))
        try:
            for line in process.stdout:
                for report in stream.feed(line):
                    self.store.update_live(report, target.name)
                    if on_report is not None:
                        on_report(report)
        except ValueError as exc:  # ParseError, or a status report with values out of range
            log.error("%s: unreadable fio status report: %s", jobfile.path, exc)
        rc = process.wait()
        reader.join(timeout=5)
        self._process = None
        errors = " | ".join(ln.strip() for ln in stderr_lines if ln.strip())[-500:]
        if stream.last_document is None:
            outcome.message = f"fio exited {rc} without a report: {errors or 'no output'}"
            return outcome
        if stream.last_run is None:
            outcome.message = f"fio exited {rc}, its final report is unreadable: {errors or 'see the log'}"
            return outcome
        outcome.document = stream.last_document
        outcome.result = stream.last_run  # fio's own figures: update_live works on copies
        failed_jobs = [j.jobname for j in outcome.result.jobs if j.error]
        if rc != 0 and not failed_jobs and self._stopped is process:  # Ctrl-C'd: the load so far, published as such
            outcome.message = f"stopped on request (fio exited {rc})"
        elif rc != 0 or failed_jobs:
            outcome.message = (f"fio exited {rc}" + (f", job error in {', '.join(failed_jobs)}" if failed_jobs else "")
                               + (f": {errors}" if errors else ""))
            # a killed fio leaves its last status report: published, but counted as a failed run
            outcome.annotation = replace(outcome.annotation, failed=outcome.message)
        else:
            outcome.ok = True
        return outcome

    def _write_result(self, outcome: RunOutcome) -> Path:
        """Atomically write the final report (or a failure record) into the results directory."""
        results = self.config.results_dir
        if outcome.result is not None and outcome.document is not None:
            return write_result(results, outcome.document, outcome.annotation)
        ann = outcome.annotation
        return write_failure(results, FailureRecord(
            jobnames=tuple(outcome.jobnames), profile=outcome.profile, message=outcome.message, timestamp=time.time(),
            target=ann.target, device=ann.device, directory=ann.directory,
        ))


MAX_WAIT_SECONDS = 3600.0


def _seconds(value: float) -> float:
    """A schedule duration as the loop uses it: NaN, negative or infinite count as 0 (never / now)."""
    return value if isinstance(value, (int, float)) and 0 < value < float("inf") else 0.0


class Scheduler(threading.Thread):
    """Runs the configured schedule: each entry ``repeat`` times with ``idle`` gaps, every ``every``."""

    def __init__(self, config: Config, runner: Runner, stop: threading.Event):
        super().__init__(name="fioscope-scheduler", daemon=True)
        self.config = config
        self.runner = runner
        self.stop_event = stop

    def run(self) -> None:
        started = time.time()
        due = {i: started + _seconds(e.start_delay_seconds) for i, e in enumerate(self.config.schedule)}
        while due and not self.stop_event.is_set():
            index = min(due, key=lambda i: due[i])
            delay = due[index] - time.time()
            if delay > 0:  # waits are capped, so a far-off date never overflows the wait
                if self.stop_event.wait(min(delay, MAX_WAIT_SECONDS)):
                    return
                continue
            entry = self.config.schedule[index]
            cycle_start = time.time()
            try:
                self._cycle(entry)
            except Exception:  # one bad entry must not stop the schedule
                log.exception("schedule entry %s on %s failed", entry.job, entry.target)
            if _seconds(entry.every_seconds):
                due[index] = max(cycle_start + _seconds(entry.every_seconds), time.time())
            else:
                del due[index]

    def _cycle(self, entry: ScheduleEntry) -> None:
        try:
            target = self.config.target(entry.target)
        except Exception as exc:  # noqa: BLE001 - named in the log, the other entries go on
            log.error("schedule %s on %s: %s", entry.job, entry.target, exc)
            return
        for i in range(entry.repeat):
            if i and self.stop_event.wait(min(_seconds(entry.idle_seconds), MAX_WAIT_SECONDS)):
                return
            try:
                outcome = self.runner.run(entry.job, target, entry.env)
            except Exception as exc:  # noqa: BLE001 - a bad job must not stop the schedule or the server
                log.error("schedule %s on %s: %s", entry.job, entry.target, exc)
                return
            if outcome.ok:
                log.info("%s on %s: done, %s", entry.job, entry.target, outcome.result_path)
            else:
                log.error("%s on %s: failed: %s", entry.job, entry.target, outcome.message)
