"""fdatasync p99 of every etcd-wal-like job (one that measured fsync/fdatasync) among report inputs, with etcd's verdict.

Read through the exporter's parser (``fioscope.parser``), as the exporter reads result files; the
verdict is ``fioscope.verdicts.etcd_fsync``, the one rule ``fioscope run`` and the diagnosis use.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..parser import ParseError, parse_file
from ..thresholds import Thresholds
from ..verdicts import Verdict, etcd_fsync

log = logging.getLogger("fioscope.report")


def fsync_verdicts(sources: list[str], thresholds: Thresholds, side: str = "") -> list[Verdict]:
    """One verdict per job with an fdatasync measurement in the given result files."""
    out = []
    for source in sorted(set(sources)):
        try:
            runs = parse_file(Path(source))
        except (ParseError, OSError, ValueError) as exc:
            log.warning("%s: skipped for fdatasync: %s", source, exc)
            continue
        for run in runs[-1:]:
            for job in run.jobs:
                sync = job.directions.get("sync")
                lat = sync.latencies.get("lat") if sync else None
                if lat is None:
                    continue
                where = run.annotation.target if run.annotation.present and run.annotation.target else Path(source).name
                label = f"{side + ': ' if side else ''}etcd fsync: {job.jobname} ({where})"
                out.append(etcd_fsync(lat.percentiles.get("0.99"), thresholds, label, {"jobname": job.jobname}))
    return out
