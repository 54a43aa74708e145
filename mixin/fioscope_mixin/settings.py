"""The one loader of ``alerts/config.yaml`` (docs/contracts.md section 3).

The package carries the file as ``fioscope_mixin/config.yaml`` (a link to ``alerts/config.yaml``
in a checkout, a copy in a built wheel). The rule generator, the dashboards generator, the native
stack and the exporter's defaults all read thresholds, windows and selectors through :func:`load_settings`, so a setting means
the same everywhere. ``--set a.b=c`` overrides are checked against the shipped file: an
unknown key or a path through a scalar is a :class:`SettingsError` naming the key and the
closest valid one; only the per-device maps take new keys (device names).
"""

from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any

from fioscope_mixin.units import UnitError, parse_duration
from fioscope_mixin.yamlfile import YamlError, load_yaml, loads_yaml

CONFIG_PATH = Path(__file__).resolve().parent / "config.yaml"
# maps keyed by device name: any key is valid below them
FREE_FORM_MAPS = {("thresholds", "disk_limits"), ("thresholds", "disk_latency_sla_per_device"), ("thresholds", "disk_cap_per_device")}


class SettingsError(ValueError):
    """A settings file or override that cannot be used; the message names the key."""


def duration(settings: dict, *keys: str) -> float:
    """The setting at ``keys`` (e.g. "stack", "rate_window") in seconds; SettingsError names the key."""
    value: Any = settings
    for key in keys:
        value = value[key]
    try:
        return parse_duration(value)
    except UnitError as exc:
        raise SettingsError(f"{'.'.join(keys)}: {exc}") from None


def _read(path: Path) -> dict:
    try:
        data = load_yaml(path)
    except YamlError as exc:
        raise SettingsError(str(exc)) from None
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
                value = loads_yaml(raw, f"--set {path}")
            except YamlError as exc:
                raise SettingsError(str(exc)) from None
            old = node.get(key)
            if isinstance(old, dict) and not isinstance(value, dict) and (parent + (key,)) not in FREE_FORM_MAPS:
                raise SettingsError(f"--set {path}: is a section; set one of {', '.join(map(str, old))}")
            if isinstance(old, (int, float)) and not isinstance(old, bool) and not isinstance(value, (int, float)):
                raise SettingsError(f"--set {path}: expected a number, got {raw!r}")
            node[key] = value
        else:
            node = node.setdefault(key, {}) if free else node[key]


# settings that go into PromQL or a rule's for: as Prometheus durations
_DURATION_SUFFIXES = ("window", "interval", "lookback", "_after")


def _check_durations(node: dict, keys: tuple[str, ...] = ()) -> None:
    """Every duration setting in Prometheus's own form: a typo is an error here, not a rule Prometheus refuses
    (or, in the offline diagnosis, an alert whose ``for:`` counts as 0 s)."""
    for key, value in node.items():
        path = (*keys, str(key))
        if isinstance(value, dict):
            _check_durations(value, path)
        elif keys[:1] == ("durations",) or str(key).endswith(_DURATION_SUFFIXES):
            try:
                parse_duration(value, prometheus=True)
            except UnitError as exc:
                raise SettingsError(f"{'.'.join(path)}: {exc}") from None


def load_settings(overrides: list[str] | None = None, path: Path | None = None) -> dict:
    """alerts/config.yaml with ``--set`` overrides applied (a fresh dict each call)."""
    settings = copy.deepcopy(_read(path or CONFIG_PATH))
    for item in overrides or []:
        apply_override(settings, item)
    _check_durations(settings)
    return settings


def default_fsync_threshold() -> float:
    """The fdatasync p99 line (etcd's 10 ms) every part uses: the alerts, the dashboards, ``fioscope run``."""
    try:
        return float(load_settings()["thresholds"]["etcd_fsync_p99_seconds"])
    except (KeyError, TypeError, ValueError) as exc:  # SettingsError is a ValueError
        raise SettingsError(f"{CONFIG_PATH}: no usable thresholds.etcd_fsync_p99_seconds ({exc})") from None
