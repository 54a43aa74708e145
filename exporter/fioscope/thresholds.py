"""The settings the exporter judges by, loaded once where a command starts and passed down.

``alerts/config.yaml`` (with a command's ``--set`` overrides) is read by ``fioscope_mixin.settings``, the
one loader, exactly once per command (``fioscope serve``, ``run``, ``report``, ``capture``): the CLI
builds a :class:`Thresholds` and hands it to whatever judges (etcd's fsync tiers, the await SLA, the
histogram's bounds, the offline diagnosis's rules). Nothing here reads a file at import, so a live report
and an offline one judge by the same overridden figures as the rules they are read against.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from fioscope_mixin.settings import SettingsError, duration, load_settings


@dataclass(frozen=True)
class Thresholds:
    fsync_line: float  # thresholds.etcd_fsync_p99_seconds: etcd's 10 ms
    fsync_warning: float  # ... times etcd_fsync_warning_ratio: 8 ms
    disk_latency_sla: float
    disk_latency_sla_per_device: Mapping[str, float]
    evaluation_interval: float  # stack.evaluation_interval in seconds: the offline diagnosis's grid
    # the whole settings: the offline diagnosis evaluates the rules generated from them
    settings: dict = field(repr=False, compare=False)

    @classmethod
    def from_settings(cls, settings: dict) -> Thresholds:
        try:
            t = settings["thresholds"]
            line = float(t["etcd_fsync_p99_seconds"])
            return cls(fsync_line=line, fsync_warning=line * float(t["etcd_fsync_warning_ratio"]),
                       disk_latency_sla=float(t["disk_latency_sla_seconds"]),
                       disk_latency_sla_per_device={str(k): float(v) for k, v in (t.get("disk_latency_sla_per_device") or {}).items()},
                       evaluation_interval=duration(settings, "stack", "evaluation_interval"), settings=settings)
        except (KeyError, TypeError, ValueError) as exc:  # SettingsError is a ValueError
            raise SettingsError(f"alerts/config.yaml: unusable thresholds ({exc})") from None

    def sla_seconds(self, device: str) -> float:
        """The await SLA of ``device``: its own where one is set, else every device's."""
        return self.disk_latency_sla_per_device.get(device, self.disk_latency_sla)

    @cached_property
    def bucket_bounds(self) -> tuple[float, ...]:
        """``le`` bounds of fio_latency_seconds for these thresholds (fioscope.histogram)."""
        from .histogram import bucket_bounds

        return bucket_bounds(self.settings)


def load_thresholds(overrides: list[str] | None = None) -> Thresholds:
    """alerts/config.yaml with ``overrides`` (``--set key.path=value``); SettingsError names the key."""
    return Thresholds.from_settings(load_settings(overrides))


@functools.cache
def shipped() -> Thresholds:
    """alerts/config.yaml as shipped, for a library caller that passes none (read on first use, never at import)."""
    return load_thresholds()
