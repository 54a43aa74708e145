"""etcd's tiered verdict on fdatasync p99: one rule for ``fioscope run``, every report and the alerts.

etcd's hardware guidance: WAL fdatasync p99 below 10 ms. The rules warn from 80 % of that line
(8 ms, ``FioscopeFsyncNearEtcdLimit``) and fail above it (``FioscopeFsyncTooSlowForEtcd``); both
figures come from alerts/config.yaml (``thresholds.etcd_fsync_p99_seconds``,
``etcd_fsync_warning_ratio``), as the command loaded them (``fioscope.thresholds``). A threshold the user
gives (``--fsync.threshold``) replaces the line and is named as theirs, never as etcd's.
``fioscope.verdicts.etcd_fsync`` is the one place that turns the tiers into a report's or ``run``'s Verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from .thresholds import Thresholds


@dataclass(frozen=True)
class FsyncVerdict:
    level: str  # pass, warning, fail, no data
    ok: bool | None  # warning is not a failure; None: no data
    text: str


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def fsync_verdict(p99: float | None, thresholds: Thresholds, user_threshold: float | None = None) -> FsyncVerdict:
    """fdatasync p99 against etcd's tiers (``thresholds``: the command's, loaded once), or against the user's own
    threshold where one is given."""
    if p99 is None:
        return FsyncVerdict("no data", None, "fdatasync p99: no data")
    if user_threshold is not None:
        ok = p99 <= user_threshold
        mine = f"your threshold {_ms(user_threshold)}, --fsync.threshold"
        return FsyncVerdict("pass" if ok else "fail", ok, f"fdatasync p99 {_ms(p99)} ({mine}): {'pass' if ok else 'FAIL'}")
    line, warning = thresholds.fsync_line, thresholds.fsync_warning
    tiers = f"etcd: warning from {_ms(warning)}, fail above {_ms(line)}"
    if p99 > line:
        return FsyncVerdict("fail", False, f"fdatasync p99 {_ms(p99)} ({tiers}): FAIL")
    if p99 >= warning:
        return FsyncVerdict("warning", True, f"fdatasync p99 {_ms(p99)} ({tiers}): WARNING")
    return FsyncVerdict("pass", True, f"fdatasync p99 {_ms(p99)} ({tiers}): pass")

