"""Lab scenarios side by side: every scenario's lab disk and load at once, watched by one native stack per scrape interval.

A scenario is a lab disk, the fio load an application puts on it (inside the disk's cgroup) and when that load stops;
or fioscope's own jobs on it (``schedule``: its stack's exporter runs them, from the stack's start, as a user's schedule).
Test modules declare theirs in a module-level ``SCENARIOS`` dict and parametrize their tests with ``scenario`` (its
key); the session's ``scenario_lab`` fixture starts the scenarios of every collected test together, under one stack per
interval each scenario names (several intervals: one disk watched by each stack, as in the envelope's pairs), and each
test asserts on its own device with its own stack's Prometheus and webhook once its load has stopped.

Two cores decide the order. Capped loads are cheap and start at once; what costs CPU (an uncapped direction at 4 KiB, a
burst) waits for what it would starve (``after``), and the uncapped controls and twins run one at a time, a twin after
its capped disk has paged (it runs as long as that took, and 20 s more): a twin under the same load, not beside it.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fioscope_mixin.units import parse_duration
from fioscope_testkit.native_stack import NativeStack
from fioscope_testkit.net import wait_for
from fioscope_testkit.prometheus import PromClient

from helpers.lab import (
    LEARN_FAST,
    Webhook,
    blocked_tasks,
    completed_requests,
    e2e_overrides,
    fio_in_cgroup,
    fio_job,
    lab_disks,
    lab_lock,
    lab_state,
    lay_out,
    require_root_lab,
    started,
    stop_fio,
    webhook_receiver,
    with_schedule,
)
from helpers.results import config_with_targets

# every stack: the default windows and `for:` durations, the device's normal learnt fast (LEARN_FAST), Alertmanager
# regrouping every 5 s; the step-down lookback shorter (the burst allowance is a minute, not hours)
STACK_SETTINGS = ["stack.rate_window=1m", "stack.alertmanager_group_interval=5s", *LEARN_FAST,
                  "thresholds.throttle.step_down_lookback=3m"]
LEARN_TIMEOUT = 240
IDLE_LOAD_CHECK = 30  # seconds after its start a load that has not reached its device is looked into (blocked_tasks)


@dataclass
class Scenario:
    """A lab disk (``kind``, ``limits``) and its load: ``loads`` are fio job sections, one fio process each, laid out
    outside the cgroup and started together inside it. The load stops at ``seconds`` or once ``stop`` says so."""

    kind: str
    loads: list[list[str]]
    seconds: float
    intervals: tuple[str, ...] = ("5s",)
    limits: dict = field(default_factory=dict)
    stop: Callable[[Run], bool] | None = None
    phase: int = 0  # starts once every gating scenario of an earlier phase has stopped
    gate: bool = True  # later phases wait for this one (a long, cheap load does not hold them up)
    alone: bool = False  # one at a time with the other scenarios of its phase marked alone (an uncapped load)
    learn: bool = False  # a light read load first, until the device has its reads' normal
    physical: bool = False  # declared local hardware (thresholds.disk_cap_per_device)
    cap_after: float | None = None  # burst-then-cap: the caps written this long after the load started
    size: str = "2G"
    twin: Scenario | None = None  # an uncapped twin under the same load: scenario "<key> | twin"
    # fioscope schedule entries on this disk's target (job, start_delay, env), run by its stack's exporter inside the
    # disk's cgroup from the stack's start (one interval only: each stack has an exporter of its own)
    schedule: list[dict] = field(default_factory=list)
    target: dict = field(default_factory=dict)  # more of its fioscope target's fields (sla_latency, limits)


@dataclass
class Stack:
    interval: str
    webhook: Webhook
    prom: PromClient
    native: NativeStack


@dataclass
class Run:
    """What happened to one scenario: its disk, the stacks watching it, when its load ran."""

    key: str
    scenario: Scenario
    disk: object
    stacks: dict[str, Stack]
    jobs: list[Path]  # its loads' fio jobs, their files laid out before the stacks started
    start: float | None = None
    end: float | None = None
    error: str = ""
    diagnosis: str = ""  # where the load's processes waited when it had not reached its device (IDLE_LOAD_CHECK)
    lab: ScenarioLab | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def pages(self, interval: str, names: tuple[str, ...], since: float | None = None,
              until: float | None = None) -> list[tuple[float, dict]]:
        """The webhook's firing notifications of ``names`` on this disk's device, received in [since, until]."""
        return [(when, alert) for when, alert in self.stacks[interval].webhook.received
                if alert["labels"].get("alertname") in names and alert["labels"].get("device") == self.disk.device_name
                and (since is None or when >= since) and (until is None or when <= until)]

    def first_page(self, interval: str, names: tuple[str, ...]) -> tuple[float, dict] | None:
        found = self.pages(interval, names, since=self.start)
        return found[0] if found else None


class ScenarioLab:
    def __init__(self, root: Path, scenarios: dict[str, Scenario]):
        self.root = root
        self.scenarios: dict[str, Scenario] = {}
        for key, sc in scenarios.items():
            self.scenarios[key] = sc
            if sc.twin:
                self.scenarios[twin_of(key)] = sc.twin
        self.runs: dict[str, Run] = {}
        self.threads: list[threading.Thread] = []
        self.closing = threading.Event()
        self.t0 = 0.0
        # set by conftest: the last test asking for the lab (the lab is taken down after it), the last before the tail
        # (scenario_tail: the stacks only the tail's scenarios need stay up after it) and the tail's scenarios
        self.last = self.head_last = ""
        self.tail_keys: set[str] = set()
        self._stack = contextlib.ExitStack()
        self._closed = False

    # -- lifecycle

    def open(self) -> ScenarioLab:
        require_root_lab()
        self.before = lab_state()
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def _open(self) -> None:
        es = self._stack
        es.enter_context(lab_lock())
        up = es.enter_context(lab_disks(self.root / "lab"))
        disks = {}
        for i, (key, sc) in enumerate(self.scenarios.items()):
            if sc.cap_after is None:
                disks[key] = up(sc.kind, f"sc{i}-{sc.kind}", **sc.limits)
            else:  # a burst from the load's start, not from `lab up` (no burst timer: the caps are written by _drive)
                disks[key] = up("healthy", f"sc{i}-{sc.kind}")
        # every load's files laid out now, before any stack scrapes: a layout runs outside the disk's cgroup (capped,
        # it would eat the load's first minute), and laid out just before a capped load its uncapped burst stood as the
        # device's recent peak, over the cap (the write cap's layout: 1,020 writes/s in one scrape, no page in 240 s)
        jobs = {key: [fio_job(Path(disks[key].state_dir) / f"load{i}.fio", disks[key].mountpoint, sections)
                      for i, sections in enumerate(sc.loads)] for key, sc in self.scenarios.items()}
        for job in (job for each in jobs.values() for job in each):
            lay_out(job)
        stacks: dict[str, Stack] = {}
        for interval in sorted({i for sc in self.scenarios.values() for i in sc.intervals}, key=parse_duration):
            mine = [key for key, sc in self.scenarios.items() if interval in sc.intervals]
            tmp = self.root / f"stack-{interval}"
            tmp.mkdir()
            assert all(len(self.scenarios[k].intervals) == 1 for k in mine if self.scenarios[k].schedule), \
                "a scheduled scenario is watched by one stack (each stack's exporter would run its jobs)"
            config = with_schedule(config_with_targets(tmp / "fioscope.yaml", [
                {"name": disks[k].name, "directory": disks[k].mountpoint, **self.scenarios[k].target,
                 **({"cgroup": disks[k].cgroup} if self.scenarios[k].schedule else {})} for k in mine]),
                [{**entry, "target": disks[k].name} for k in mine for entry in self.scenarios[k].schedule])
            webhook = es.enter_context(webhook_receiver())
            settings = [f"stack.scrape_interval={interval}", f"stack.evaluation_interval={interval}", *STACK_SETTINGS,
                        *[f"thresholds.disk_cap_per_device.{disks[k].device_name}=physical" for k in mine if self.scenarios[k].physical]]
            native = es.enter_context(started(NativeStack(tmp / "stack", e2e_overrides(webhook.url, rate_window="1m", extra=settings),
                                                          fioscope_config=config)))
            stacks[interval] = Stack(interval, webhook, PromClient(native.url("prometheus")), native)
        self.runs = {key: Run(key, sc, disks[key], {i: stacks[i] for i in sc.intervals}, jobs[key], lab=self)
                     for key, sc in self.scenarios.items()}
        self.stacks = stacks
        for interval, stack in stacks.items():
            devices = "|".join(r.disk.device_name for r in self.runs.values() if interval in r.stacks)
            count = sum(interval in r.stacks for r in self.runs.values())
            wait_for(lambda s=stack, d=devices, n=count: len(s.prom.query(f'node_disk_reads_completed_total{{device=~"{d}"}}')) == n, 90,
                     what=f"the {interval} stack scraping its lab disks")
        self._learn_normals()
        self.t0 = time.time()
        for run in self.runs.values():
            thread = threading.Thread(target=self._drive, args=(run,), name=f"scenario {run.key}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def keep_only(self, keys: set[str]) -> None:
        """Stop the stacks none of ``keys`` is watched by (the tests still to come need only those): an idle stack's
        rules and scrapes cost the rest of the suite CPU."""
        needed = {i for key in keys for i in self.runs[key].stacks}
        for interval, stack in self.stacks.items():
            if interval not in needed:
                stack.native.stop()

    def close(self) -> None:
        """Every load stopped, the stacks stopped, the lab disks taken down; nothing of the lab left behind."""
        if self._closed:
            return
        self._closed = True
        self.closing.set()
        for thread in self.threads:
            thread.join(120)
        self.threads.clear()
        self._stack.close()
        after = lab_state()
        assert after == self.before, f"the scenario lab left something behind: {after} (before: {self.before})"

    # -- the loads

    def _learn_normals(self) -> None:
        """A light random-read load (50/s, one in flight) on every disk that learns, until each stack has the device's
        reads' normal await (the loads below are judged against it; without one, the 10 ms floor)."""
        learners = [r for r in self.runs.values() if r.scenario.learn]
        light = []
        try:
            for run in learners:
                job = fio_job(self.root / f"light-{run.disk.name}.fio", run.disk.mountpoint,
                              ["[light]\nrw=randread\nbs=4k\nsize=64m\niodepth=1\nrate_iops=50\nruntime=600\nfilename=light.dat"])
                lay_out(job)
                light.append(fio_in_cgroup(run.disk.cgroup, job))
            for interval, stack in self.stacks.items():
                mine = [r.disk.device_name for r in learners if interval in r.stacks]
                if mine:
                    wait_for(lambda s=stack, m=mine: len(s.prom.query(
                        f'fioscope:disk_read_await_baseline_seconds{{device=~"{"|".join(m)}"}}')) == len(m),
                        LEARN_TIMEOUT, interval=2, what=f"every lab disk's normal read await at {interval} scrapes")
        finally:
            for proc in light:
                stop_fio(proc)

    def _before(self, run: Run) -> list[Run]:
        """The runs whose loads must have stopped before this one starts."""
        order = list(self.runs.values())
        sc = run.scenario
        return [other for other in order if (other.scenario.gate and other.scenario.phase < sc.phase)
                or (sc.alone and other.scenario.alone and other.scenario.phase == sc.phase and order.index(other) < order.index(run))]

    def _drive(self, run: Run) -> None:
        procs: list[subprocess.Popen] = []
        sc = run.scenario
        try:
            for other in self._before(run):
                while not other.done.wait(0.5):
                    if self.closing.is_set():
                        return
            if self.closing.is_set():
                return
            before = completed_requests(run.disk.device_name)
            run.start = time.time()
            procs = [fio_in_cgroup(run.disk.cgroup, job) for job in run.jobs]
            capped = sc.cap_after is None
            looked = False
            while not self.closing.is_set():
                elapsed = time.time() - run.start
                if not looked and procs and elapsed >= IDLE_LOAD_CHECK:
                    looked = True
                    if completed_requests(run.disk.device_name) == before:
                        run.diagnosis = (f"{IDLE_LOAD_CHECK} s after its start the load had completed nothing on "
                                         f"{run.disk.device_name}:\n{blocked_tasks(run.disk.cgroup)}")
                        print(f"\n[scenario {run.key}] {run.diagnosis}", flush=True)
                if not capped and elapsed >= sc.cap_after:
                    from fioscope import lab

                    run.disk.limits = {**run.disk.limits, **sc.limits}
                    lab.write_limits(run.disk)
                    capped = True
                if elapsed >= sc.seconds or (sc.stop and sc.stop(run)) or (procs and all(p.poll() is not None for p in procs)):
                    break
                time.sleep(0.5)
        except Exception:  # noqa: BLE001 - the scenario's test reports it; the others go on
            run.error = traceback.format_exc()
        finally:
            if sc.kind == "stalled" and procs:
                from fioscope import lab

                lab.lift_limits(run.disk)  # its queued requests drain before fio is stopped
            for proc in procs:
                stop_fio(proc)
            run.end = time.time()
            run.done.set()

    # -- what the tests ask

    def finished(self, key: str) -> Run:
        """The scenario's run once its load has stopped (it may still be waiting for the scenarios before it)."""
        run = self.runs[key]
        while not run.done.wait(1):
            pass
        assert not run.error, f"scenario {key}: {run.error}"
        assert run.start is not None, f"scenario {key} never started"
        return run


def twin_of(key: str) -> str:
    return f"{key} | twin"


# -- stop conditions

def once_paged(alerts: tuple[str, ...], then: float = 0, at_least: float = 0) -> Callable[[Run], bool]:
    """Stop ``then`` seconds after ``alerts`` first reached every stack's webhook (and not before ``at_least``)."""
    def stop(run: Run) -> bool:
        hits = [run.first_page(i, alerts) for i in run.stacks]
        if not all(hits):
            return False
        return time.time() >= max(run.start + at_least, max(h[0] for h in hits if h) + then)
    return stop


def as_long_as(capped: str, alert: str, extra: float, at_least: float, otherwise: float) -> Callable[[Run], bool]:
    """A twin's load runs as long as its ``capped`` scenario's did to page on every stack, ``extra`` more (at least
    ``at_least``); ``otherwise`` when the capped disk never paged."""
    def stop(run: Run) -> bool:
        assert run.lab is not None
        other = run.lab.runs[capped]
        hits = [other.first_page(i, (alert,)) for i in other.stacks]
        wanted = max(at_least, max(h[0] - other.start for h in hits if h) + extra) if all(hits) else otherwise
        return time.time() - run.start >= wanted
    return stop


# -- what Prometheus recorded

def firing_samples(prom: PromClient, alertname: str, device: str, start: float, end: float, step: float) -> list[float]:
    """The instants in [start, end] (one a ``step``) at which ``alertname`` was firing on ``device``."""
    series = prom.query_range(f'ALERTS{{alertname="{alertname}",alertstate="firing",device="{device}"}}', start, end, step)
    return sorted(float(t) for one in series for t, _ in one["values"])


def episodes(instants: list[float], step: float) -> list[tuple[float, float]]:
    """Runs of consecutive instants (a gap of more than one ``step`` starts a new one): (first, last) of each firing."""
    out: list[tuple[float, float]] = []
    for t in instants:
        if out and t - out[-1][1] <= step * 1.5:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


# -- why a scenario did not page

def timeline(run: Run, interval: str, step: float = 15) -> str:
    """The device's figures over the run, one column per ``step``: what a test prints when an alert it waited for never
    came (a CI failure explains itself: a cap that never bound, scrapes missed, a rule group late, a verdict's guard)."""
    figures = device_timeline(run.stacks[interval].prom, run.disk.device_name, run.start or 0.0, (run.end or time.time()) + step, step)
    return f"{figures}\n{run.diagnosis}" if run.diagnosis else figures


def scrape_before_load(prom: PromClient, devices: list[str], start: float, end: float, min_rate: float = 0.0) -> float | None:
    """The onset as Prometheus saw it: the last scrape of ``devices`` before the first after ``start`` whose summed
    completions grew by ten or more, and at ``min_rate`` a second or more (a load above a lighter one before it).
    promtool's scenarios put the onset on a scrape, which shows no load yet; a load launched reaches its disk seconds
    later."""
    totals: dict[float, float] = {}
    for counter in ("node_disk_reads_completed_total", "node_disk_writes_completed_total"):
        for one in prom.query(f'{counter}{{device=~"{"|".join(devices)}"}}[{end - start + 60:.0f}s]', at=end):
            for t, v in one["values"]:
                totals[float(t)] = totals.get(float(t), 0.0) + float(v)
    times = sorted(totals)
    return next((a for a, b in zip(times, times[1:]) if b >= start and totals[b] - totals[a] >= max(10.0, min_rate * (b - a))),
                None)


def device_timeline(prom: PromClient, device: str, start: float, end: float, step: float = 15, window: str = "long",
                    alert: str = "") -> str:
    """One device's figures and the envelope ``window``'s verdict records from ``start`` to ``end``, a column per ``step``;
    with ``alert``, that alert's state (1 pending, 2 firing)."""
    dev = f'device="{device}"'
    rows = {
        "r/s": f"fioscope:disk_read_iops:irate{{{dev}}}",
        "w/s": f"fioscope:disk_write_iops:irate{{{dev}}}",
        "util": f"fioscope:disk_util_ratio{{{dev}}}",
        "aqu-sz": f"fioscope:disk_queue_size{{{dev}}}",
        "await ms": f"1000 * fioscope:disk_await_seconds{{{dev}}}",
        "MiB/s busy": f"fioscope:disk_busy_bytes_per_second:irate{{{dev}}} / 1048576",
        "slow sat": f"count(fioscope:disk_slow_saturated_await_seconds{{{dev}}})",
        "sat window": f'count(fioscope:disk_saturated_window_scrapes{{window="{window}",{dev}}})',
        "at envelope": f'count(fioscope:disk_at_envelope_await_seconds{{window="{window}",{dev}}})',
        "held flat": f'count(fioscope:disk_held_flat_mean{{window="{window}",{dev}}})',
        "ceil long": f'count(fioscope:disk_ceiling{{window="long",{dev}}})',
        "ceil short": f'count(fioscope:disk_ceiling{{window="short",{dev}}})',
        "ceil below": f"count(fioscope:disk_ceiling_below{{{dev}}})",
        "step-down": f"count(fioscope:disk_step_down_ratio{{{dev}}})",
        "physical": f"count(fioscope:disk_physical_device{{{dev}}})",
        "in flight": f"max(node_disk_io_now{{{dev}}})",
        "flight 1m": f"max(avg_over_time(node_disk_io_now{{{dev}}}[1m]))",
        "iops rate": f"fioscope:disk_iops{{{dev}}}",
        "stalled": f"count(fioscope:disk_stalled_in_flight{{{dev}}})",
        "fio load": f"count(fioscope:disk_fio_load{{{dev}}})",
        "pending": f'count(ALERTS{{alertstate="pending",{dev}}})',
        "firing": f'count(ALERTS{{alertstate="firing",{dev}}})',
        **({"alert": f'2 * max(ALERTS{{alertname="{alert}",alertstate="firing",{dev}}}) or max(ALERTS{{alertname="{alert}",{dev}}})'}
           if alert else {}),
        "samples/m": f"count_over_time(node_disk_reads_completed_total{{{dev}}}[1m])",
        "scrape s": "max(scrape_duration_seconds)",
        "rules s": "max(prometheus_rule_group_last_duration_seconds)",
        "missed": "sum(prometheus_rule_group_iterations_missed_total)",
    }
    times = [start + i * step for i in range(int((end - start) // step) + 1)]
    lines = [f"{device} from load start, every {step:g} s (blank: no sample):",
             f"{'':>11}" + "".join(f"{t - start:>7.0f}" for t in times)]
    for label, expr in rows.items():
        try:
            series = prom.query_range(expr, start, end, step)
        except Exception as exc:  # noqa: BLE001 - a diagnostic must not hide the failure it explains
            lines.append(f"{label:>11} (query failed: {exc})")
            continue
        values = {round(float(t) - start): float(v) for one in series[:1] for t, v in one["values"]}
        lines.append(f"{label:>11}" + "".join(f"{values[round(t - start)]:>7.3g}" if round(t - start) in values else f"{'':>7}"
                                             for t in times))
    try:
        firing = ", ".join(sorted({f'{a["metric"]["alertname"]} ({a["metric"]["alertstate"]})'
                                   for a in prom.query(f"ALERTS{{{dev}}}", at=end)})) or "none"
    except Exception as exc:  # noqa: BLE001 - as above
        firing = f"(query failed: {exc})"
    lines.append(f"alerts at the end: {firing}")
    try:
        stalled = "; ".join(f'{one["metric"]} = {one["value"][1]}'
                            for one in prom.query(f"fioscope:disk_stalled_in_flight{{{dev}}} or node_disk_io_now{{{dev}}}", at=end))
    except Exception as exc:  # noqa: BLE001 - as above
        stalled = f"(query failed: {exc})"
    lines.append(f"stall record and in flight at the end: {stalled}")
    return "\n".join(lines)
