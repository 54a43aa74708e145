"""The one loader of ``alerts/config.yaml`` (docs/contracts.md section 3).

The rule generator, the dashboards generator, the native stack and the CLI's defaults all
read thresholds, windows and selectors through :func:`load_settings`, so a setting means
the same everywhere. ``--set a.b=c`` overrides are checked against the shipped file: an
unknown key or a path through a scalar is a :class:`SettingsError` naming the key and the
closest valid one; only the per-device maps take new keys (device names).
"""

from __future__ import annotations

import copy
import difflib
import re
from pathlib import Path
from typing import Any

import yaml

from fioscope.config import ConfigError
from fioscope.resources import alerts_config_path

# maps keyed by device name: any key is valid below them
FREE_FORM_MAPS = {("thresholds", "disk_limits"), ("thresholds", "disk_latency_sla_per_device"), ("thresholds", "disk_cap_per_device")}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class SettingsError(ValueError):
    """A settings file or override that cannot be used; the message names the key."""


def seconds(duration: Any) -> float:
    """'1m' / '30s' / '1h' / 0.5 -> seconds (for the few places that compute with durations)."""
    if isinstance(duration, (int, float)) and not isinstance(duration, bool):
        return float(duration)
    match = _DURATION.match(str(duration))
    if not match:
        raise SettingsError(f"{duration!r} is not a duration (e.g. 30s, 5m, 6h)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _read(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"{path}: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: not a mapping")
    return data


def _closest(key: str, candidates: list[str]) -> str:
    match = difflib.get_close_matches(key, candidates, n=1, cutoff=0.0)
    return f" (closest: {match[0]})" if match else ""


def apply_override(settings: dict, item: str) -> None:
    """Apply one ``key.path=value`` (value parsed as YAML) in place, refusing unknown keys."""
    path, sep, raw = item.partition("=")
    if not sep or not path:
        raise SettingsError(f"--set {item!r}: expected key.path=value")
    keys = path.split(".")
    node: Any = settings
    for depth, key in enumerate(keys):
        parent = tuple(keys[:depth])
        if not isinstance(node, dict):
            raise SettingsError(f"--set {path}: {'.'.join(parent)} is a value, not a section")
        free = any(parent[:len(m)] == m for m in FREE_FORM_MAPS)
        if key not in node and not free:
            valid = ".".join(parent + (key,))
            raise SettingsError(f"--set {path}: unknown setting {valid}{_closest(key, [str(k) for k in node])}")
        if depth == len(keys) - 1:
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError as exc:
                raise SettingsError(f"--set {path}: bad value {raw!r}: {str(exc).splitlines()[0]}") from None
            old = node.get(key)
            if isinstance(old, dict) and not isinstance(value, dict) and (parent + (key,)) not in FREE_FORM_MAPS:
                raise SettingsError(f"--set {path}: is a section; set one of {', '.join(map(str, old))}")
            if isinstance(old, (int, float)) and not isinstance(old, bool) and not isinstance(value, (int, float)):
                raise SettingsError(f"--set {path}: expected a number, got {raw!r}")
            node[key] = value
        else:
            node = node.setdefault(key, {}) if free else node[key]


def load_settings(overrides: list[str] | None = None, path: Path | None = None) -> dict:
    """alerts/config.yaml with ``--set`` overrides applied (a fresh dict each call)."""
    settings = copy.deepcopy(_read(path or alerts_config_path()))
    for item in overrides or []:
        apply_override(settings, item)
    return settings


def default_fsync_threshold() -> float:
    """The fdatasync p99 line (etcd's 10 ms) every part uses: the alerts, the dashboards, ``fioscope run``."""
    try:
        return float(load_settings()["thresholds"]["etcd_fsync_p99_seconds"])
    except (SettingsError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{alerts_config_path()}: no usable thresholds.etcd_fsync_p99_seconds ({exc})") from None
