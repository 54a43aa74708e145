"""The one table of iostat's disk columns and CPU modes: for each column, the kernel counter behind it, its
``/proc/diskstats`` field, node_exporter's series of it, and the factor between them.

Everything that turns one into another reads this table: ``fioscope capture``'s /proc sampler, the iostat
loader and the offline backfill (``fioscope.reporting.offline``), the timelines (``fioscope.reporting.timeline``),
the live diagnosis and the recording rules (``fioscope_mixin.recording``). It lives in the mixin because both
packages read it and the exporter depends on the mixin, never the other way round (pure data: it imports only the
rule names, fioscope_mixin.names, for each column's record).

Formulas, as iostat computes them per interval of ``s`` seconds (Δ: a counter's growth, in base units):
a rate column is ``Δ * scale / s``; an await column (``per`` names the completions) is ``Δ * scale / Δper``.
The other way (a column back to a counter, the offline backfill): a rate grows its counter by
``column / scale`` per second; an await by ``column / scale * per-column`` per second.
"""

from __future__ import annotations

from dataclasses import dataclass

from fioscope_mixin import names as n


@dataclass(frozen=True)
class Counter:
    counter: str  # the kernel counter, in base units (requests, bytes, sectors, seconds)
    field: int  # its field in /proc/diskstats, numbered as the kernel's iostats.rst does (1 = reads completed)
    kernel_unit: str  # what diskstats counts it in: "count" (kept), "sectors" (512 bytes: into bytes), "ms" (into seconds)
    series: str  # node_exporter's counter of it (base units as node_exporter publishes them)
    column: str  # the iostat -x column it gives
    scale: float = 1.0  # column units per counter unit (rkB/s: 1/1024 kB per byte; util: 100 % per second busy)
    per: str = ""  # an await column: the counter of completions it divides by
    since: str = ""  # the kernel that added the field (a shorter diskstats line has it not: 0, as iostat prints it)
    # what the reports make of the column (fioscope.reporting: the timeline, report.json, the charts, the offline reader)
    report: int = 0  # its place in report.json's series and the drawn timeline (docs/contracts.md); 0: not drawn
    chart: str = ""  # the device chart that draws it (iops, throughput, await, util, queue); "" none
    unit: str = ""  # the unit report.json gives it in (IO/s, kB/s, ms, %, requests)
    phase: bool = False  # a timeline carries it for the phase table, undrawn (the merges; request sizes follow from kB/s and r/s)
    required: bool = False  # an iostat -o JSON disk entry without it is not read (offline.load.REQUIRED)
    record: str = ""  # the recording rule of the column (fioscope_mixin.recording records it by this name); "" none


DISK: tuple[Counter, ...] = (
    Counter("reads", 1, "count", "node_disk_reads_completed_total", "r/s", report=1, chart="iops", unit="IO/s", required=True,
            record=n.DISK_READ_IOPS),
    Counter("read_merges", 2, "count", "node_disk_reads_merged_total", "rrqm/s", unit="IO/s", phase=True,
            record=n.DISK_READ_MERGES_PER_SECOND),
    Counter("read_bytes", 3, "sectors", "node_disk_read_bytes_total", "rkB/s", 1 / 1024, report=3, chart="throughput", unit="kB/s",
            record=n.DISK_READ_BYTES_PER_SECOND),
    Counter("read_seconds", 4, "ms", "node_disk_read_time_seconds_total", "r_await", 1000, per="reads", report=5, chart="await",
            unit="ms", required=True, record=n.DISK_READ_AWAIT_SECONDS),
    Counter("writes", 5, "count", "node_disk_writes_completed_total", "w/s", report=2, chart="iops", unit="IO/s", required=True,
            record=n.DISK_WRITE_IOPS),
    Counter("write_merges", 6, "count", "node_disk_writes_merged_total", "wrqm/s", unit="IO/s", phase=True,
            record=n.DISK_WRITE_MERGES_PER_SECOND),
    Counter("write_bytes", 7, "sectors", "node_disk_written_bytes_total", "wkB/s", 1 / 1024, report=4, chart="throughput", unit="kB/s",
            record=n.DISK_WRITE_BYTES_PER_SECOND),
    Counter("write_seconds", 8, "ms", "node_disk_write_time_seconds_total", "w_await", 1000, per="writes", report=6, chart="await",
            unit="ms", required=True, record=n.DISK_WRITE_AWAIT_SECONDS),
    # field 9 is the requests in flight now: a gauge, not a counter (iostat reads it not)
    Counter("io_seconds", 10, "ms", "node_disk_io_time_seconds_total", "util", 100, report=8, chart="util", unit="%", required=True,
            record=n.DISK_UTIL_RATIO),
    Counter("weighted_seconds", 11, "ms", "node_disk_io_time_weighted_seconds_total", "aqu-sz", report=7, chart="queue",
            unit="requests", required=True, record=n.DISK_QUEUE_SIZE),
    Counter("discards", 12, "count", "node_disk_discards_completed_total", "d/s", since="4.18", record=n.DISK_DISCARD_IOPS),
    Counter("discard_merges", 13, "count", "node_disk_discards_merged_total", "drqm/s", since="4.18"),
    # node_exporter publishes discarded sectors, not bytes: dkB/s is half of it
    Counter("discard_sectors", 14, "count", "node_disk_discarded_sectors_total", "dkB/s", 1 / 2, since="4.18",
            record=n.DISK_DISCARD_BYTES_PER_SECOND),
    Counter("discard_seconds", 15, "ms", "node_disk_discard_time_seconds_total", "d_await", 1000, per="discards", since="4.18",
            record=n.DISK_DISCARD_AWAIT_SECONDS),
    Counter("flushes", 16, "count", "node_disk_flush_requests_total", "f/s", since="5.5", record=n.DISK_FLUSH_IOPS),
    Counter("flush_seconds", 17, "ms", "node_disk_flush_requests_time_seconds_total", "f_await", 1000, per="flushes", since="5.5",
            record=n.DISK_FLUSH_AWAIT_SECONDS),
)
BY_COLUMN = {c.column: c for c in DISK}
RECORD = {c.column: c.record for c in DISK if c.record}  # iostat column -> its recording rule
CHARTS = ("iops", "throughput", "await", "util", "queue")  # a device's charts, in the page's order (and the phase table's)


def reported(table: tuple[Counter, ...] = DISK) -> tuple[str, ...]:
    """The columns the reports draw and report.json carries, in their order (``report``)."""
    return tuple(c.column for c in sorted((c for c in table if c.report), key=lambda c: c.report))


def tracked(table: tuple[Counter, ...] = DISK) -> tuple[str, ...]:
    """What a report's timeline carries: the drawn columns, then the phase table's own (``phase``)."""
    return (*reported(table), *(c.column for c in table if c.phase and not c.report))


def required(table: tuple[Counter, ...] = DISK) -> tuple[str, ...]:
    """The columns an iostat disk entry must have to be read, in the reports' order."""
    return tuple(c for c in tracked(table) if next(x for x in table if x.column == c).required)


def charted(chart: str, table: tuple[Counter, ...] = DISK) -> tuple[str, ...]:
    """The columns one device chart draws (``chart``), in the reports' order."""
    return tuple(c for c in reported(table) if next(x for x in table if x.column == c).chart == chart)


BY_COUNTER = {c.counter: c for c in DISK}
SERIES = {c.column: c.series for c in DISK}  # iostat column -> node_exporter counter (the recording rules' inputs)
# iostat's columns computed from two others of one interval: request size (kB per request: rkB/s / r/s) and the share
# of requests merged (%rrqm, "rrqm" in its JSON: 100 * rrqm/s / (rrqm/s + r/s)); 0 where the divisor is 0, as iostat prints it
REQUEST_SIZE = {"rareq-sz": ("rkB/s", "r/s"), "wareq-sz": ("wkB/s", "w/s"), "dareq-sz": ("dkB/s", "d/s")}
MERGED_SHARE = {"rrqm": ("rrqm/s", "r/s"), "wrqm": ("wrqm/s", "w/s"), "drqm": ("drqm/s", "d/s")}
# a disk entry of ``iostat -x -o JSON`` (sysstat 12), its keys in its order after "disk_device"
IOSTAT_JSON_DISK = ("r/s", "w/s", "d/s", "f/s", "rkB/s", "wkB/s", "dkB/s", "rrqm/s", "wrqm/s", "drqm/s", "rrqm", "wrqm", "drqm",
                    "r_await", "w_await", "d_await", "f_await", "rareq-sz", "wareq-sz", "dareq-sz", "aqu-sz", "util")
SECTOR_BYTES = 512  # diskstats counts 512-byte sectors whatever the device's block size
# diskstats field 9, the requests in flight now: a gauge iostat does not read, the stall rules do
IN_FLIGHT_SERIES = "node_disk_io_now"
# the device's identity from udev (its model label): how the rules class a device on a host without fioscope's exporter
INFO_SERIES = "node_disk_info"

# avg-cpu: node_exporter's (and /proc/stat's) CPU modes -> iostat's group. iostat's %system counts hard and soft
# interrupts too; guest time is already inside user (the kernel counts it twice), so it is left out.
CPU_SERIES = "node_cpu_seconds_total"
CPU_MODES = ("user", "nice", "system", "iowait", "steal", "idle")  # iostat's avg-cpu groups, in its order
CPU_MODE_OF = {"user": "user", "nice": "nice", "system": "system", "irq": "system", "softirq": "system", "iowait": "iowait",
               "steal": "steal", "idle": "idle"}
PROC_STAT_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")  # /proc/stat's cpu line, in order


def from_kernel(value: float, unit: str) -> float:
    """A diskstats figure in base units: sectors -> bytes, ms -> seconds."""
    return value * SECTOR_BYTES if unit == "sectors" else value / 1000 if unit == "ms" else value


def parse_diskstats(text: str, devices: set[str], counters: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """/proc/diskstats -> {device: {counter: value in base units}} for ``counters``: a line too short for the fields every
    kernel has is left out; a field of a newer kernel (``since``) the line lacks reads 0, as iostat prints it."""
    rows = [BY_COUNTER[c] for c in counters]
    need = 3 + max((r.field for r in rows if not r.since), default=0)  # major, minor, name, then the fields
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < need or f[2] not in devices:
            continue
        out[f[2]] = {r.counter: from_kernel(float(f[2 + r.field]), r.kernel_unit) if 2 + r.field < len(f) else 0.0 for r in rows}
    return out


def parse_proc_stat_cpu(text: str) -> dict[str, float]:
    """/proc/stat's aggregate cpu line as iostat's avg-cpu groups (in ticks: only ratios count); {} without one."""
    for line in text.splitlines():
        f = line.split()
        if f and f[0] == "cpu":
            out = dict.fromkeys(CPU_MODES, 0.0)
            for mode, value in zip(PROC_STAT_MODES, f[1:]):
                out[CPU_MODE_OF[mode]] += float(value)
            return out
    return {}


def cpu_mode_matcher(group: str) -> str:
    """The PromQL matcher of the node_exporter modes iostat counts as ``group``: mode="user", mode=~"system|irq|softirq"."""
    modes = [m for m, g in CPU_MODE_OF.items() if g == group]
    return f'mode="{modes[0]}"' if len(modes) == 1 else f'mode=~"{"|".join(modes)}"'
