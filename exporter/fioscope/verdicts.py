"""Verdicts: a named pass/fail (or informational) judgement with the figures behind it, and the ones
``fioscope run`` prints under its short summary of a job (fdatasync p99 against etcd's line, delivered
IOPS and p99 against the target's declared limits and SLA). The reports (``fioscope report``) give
the same kind of judgement over a window or a curve.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .config import Limits
from .etcd import fsync_verdict
from .model import JobResult, Latency
from .promised import promised_iops, write_share
from .thresholds import Thresholds

# delivered IOPS below this share of what was asked for (or promised) fails an SLA check
DELIVERY_PASS_RATIO = 0.9


@dataclass
class Verdict:
    kind: str  # stable name for tools and tests: etcd-fsync, delivery, throttled, sla, knee, ...
    ok: bool | None  # None: informational
    text: str
    data: dict = field(default_factory=dict)  # figures behind the verdict (data-* attributes in a report)
    # False: the check needs a longer window than what was measured (a rule's ``for:`` longer than the capture or its
    # loads), so it could not fail: ok is None and the text says "not decided", with the figure it would judge
    decided: bool = True


def p99(lat: Latency | None) -> float | None:
    return lat.percentiles.get("0.99") if lat else None


def _fmt_ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.2f} ms"


def etcd_fsync(p99: float | None, thresholds: Thresholds, label: str = "", data: dict | None = None,
               user_threshold: float | None = None) -> Verdict:
    """The etcd-fsync verdict of one fdatasync p99: the tiers' text after ``label``, the level and p99 in its data."""
    tiered = fsync_verdict(p99, thresholds, user_threshold)
    figures = {**(data or {}), "level": tiered.level, "p99-seconds": f"{p99:.6f}" if p99 is not None else ""}
    return Verdict("etcd-fsync", tiered.ok, f"{label}: {tiered.text}" if label else tiered.text, figures)


def requested_iops(job: JobResult) -> float:
    """The rate the job asked for (fio's rate_iops=read[,write], times numjobs); 0 if unlimited."""
    raw = job.options.get("rate_iops", "")
    share = write_share(job.options)
    if not raw or share is None:
        return 0.0
    per_dir = [float(x) if x.strip() else 0.0 for x in raw.split(",")]
    read, write = per_dir[0], per_dir[1] if len(per_dir) > 1 else per_dir[0]
    numjobs = int(job.options.get("numjobs", "1") or 1)
    return ((read if share < 1 else 0) + (write if share > 0 else 0)) * numjobs


def job_verdicts(job: JobResult, limits: Limits, sla_seconds: float, fsync_threshold: float | None,
                 thresholds: Thresholds) -> list[Verdict]:
    """``fsync_threshold``: the user's --fsync.threshold; None judges fdatasync by etcd's tiers."""
    verdicts = []
    sync = job.directions.get("sync")
    if sync is not None:
        # etcd's tiers (warning from 8 ms, fail above 10 ms), or the user's own threshold, named as theirs;
        # fioscope run fails a job whose fdatasync has no p99 (a report calls that no data)
        fsync = etcd_fsync(p99(sync.latencies.get("lat")), thresholds, user_threshold=fsync_threshold)
        verdicts.append(replace(fsync, ok=fsync.ok is True))
    worst = max((p99(d.latencies.get("clat")) or 0.0 for k, d in job.directions.items() if k != "sync"), default=0.0)
    promised = promised_iops(limits, job.options)
    if promised or sla_seconds:
        expected = min(x for x in (promised, requested_iops(job)) if x) if (promised or requested_iops(job)) else 0
        delivered = job.total_iops
        ok = (not sla_seconds or worst <= sla_seconds) and (not expected or delivered >= DELIVERY_PASS_RATIO * expected)
        parts = [f"delivered {delivered:.0f} IOPS"]
        if promised:
            parts.append(f"= {100 * delivered / promised:.0f} % of the promised {promised:.0f} IOPS")
        if expected and expected != promised:
            parts.append(f"(asked for {expected:.0f})")
        parts.append(f"at p99 {_fmt_ms(worst)}")
        if sla_seconds:
            parts.append(f"(SLA {_fmt_ms(sla_seconds)})")
        verdicts.append(Verdict("delivery", ok, " ".join(parts) + f": {'pass' if ok else 'FAIL'}",
                                {"iops": delivered, "promised-iops": promised, "p99-seconds": worst, "sla-seconds": sla_seconds}))
    return verdicts


def summary_lines(job: JobResult) -> list[str]:
    lines = [f"{job.jobname}: {job.runtime_seconds:.1f} s" + (f", fio error {job.error}" if job.error else "")]
    for ddir, d in sorted(job.directions.items()):
        if ddir == "sync":
            quantiles = lat.percentiles if (lat := d.latencies.get("lat")) else {}
            lines.append(f"  sync : {d.total_ios} calls, p50 {_fmt_ms(quantiles.get('0.5'))}, p99 {_fmt_ms(quantiles.get('0.99'))},"
                         f" p99.9 {_fmt_ms(quantiles.get('0.999'))}")
            continue
        clat = d.latencies.get("clat")
        lines.append(
            f"  {ddir:5}: {d.iops:10.0f} IOPS {d.bandwidth_bytes / 2**20:9.1f} MiB/s"
            f"  clat p50 {_fmt_ms(clat.percentiles.get('0.5') if clat else None)} p99 {_fmt_ms(p99(clat))}"
        )
    return lines
