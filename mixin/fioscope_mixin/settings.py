"""The one loader of ``alerts/config.yaml`` (docs/contracts.md section 3).

The package carries the file as ``fioscope_mixin/config.yaml`` (a link to ``alerts/config.yaml``
in a checkout, a copy in a built wheel). The rule generator, the dashboards generator, the native
stack and the exporter's defaults all read thresholds, windows and selectors through :func:`load_settings`, so a setting means
the same everywhere. ``--set a.b=c`` overrides are checked against the shipped file: an
unknown key or a path through a scalar is a :class:`SettingsError` naming the key and the
closest valid one; only the per-device maps take new keys (device names).
"""

from __future__ import annotations

import codecs
import copy
import difflib
import fnmatch
import math
import re
from dataclasses import dataclass
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


# ---- what each setting may be: one row per key (``*``: any key of a per-device map), checked by load_settings.
# A new setting is a new row; a key without a row is refused (the tests hold the table to the shipped file).


@dataclass(frozen=True)
class Number:
    """A finite number from ``low`` to ``high`` (``above``: more than ``low``); ``whole``: an integer."""

    low: float
    high: float
    above: bool = False
    whole: bool = False

    def check(self, value: Any) -> str | None:
        if (not isinstance(value, bool) and isinstance(value, int if self.whole else (int, float)) and math.isfinite(value)
                and (value > self.low if self.above else value >= self.low) and value <= self.high):
            return None
        low, high = f"{self.low:g}", f"{self.high:g}"
        span = f"over {low} and at most {high}" if self.above else f"from {low} to {high}"
        return f"expected {'a whole number' if self.whole else 'a number'} {span}, got {value!r}"


@dataclass(frozen=True)
class Duration:
    """A Prometheus duration from ``low`` to ``high`` (``below``: under ``high``); ``off``: 0s also (switched off)."""

    low: str = "0s"
    high: str = "30d"
    below: bool = False
    off: bool = False

    def check(self, value: Any) -> str | None:
        try:
            seconds = parse_duration(value, prometheus=True)
        except UnitError as exc:
            return f"{exc}"
        low, high = parse_duration(self.low), parse_duration(self.high)
        if self.off and seconds == 0:
            return None
        if seconds < low:
            return f"at least {self.low}{' (or 0s: off)' if self.off else ''}, got {value!r}"
        if seconds >= high if self.below else seconds > high:
            return f"{'under' if self.below else 'at most'} {self.high}, got {value!r}"
        return None


@dataclass(frozen=True)
class Flag:
    """true or false (YAML's own booleans; the string 'false' is not one)."""

    def check(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else f"expected true or false, got {value!r}"


@dataclass(frozen=True)
class Text:
    """A string matching ``pattern`` (the whole of it); ``what`` says what it is."""

    pattern: str = r"[^\n]*"
    what: str = "one line of text"

    def check(self, value: Any) -> str | None:
        if isinstance(value, str) and re.fullmatch(self.pattern, value):
            return None
        return f"expected {self.what}, got {value!r}"


@dataclass(frozen=True)
class Selector:
    """A PromQL label-matcher list, ``name op "value", ...`` (``empty``: or nothing)."""

    empty: bool = False

    def check(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return f"expected PromQL label matchers (e.g. job=\"node\"), got {value!r}"
        if self.empty and not value.strip():
            return None
        problem = matcher_problem(value)
        return f"{problem} in {value!r} (expected PromQL label matchers, e.g. job=\"node\")" if problem else None


@dataclass(frozen=True)
class Regex:
    """A regular expression the rules put inside a PromQL string (``label=~"(?i:<it>)"``)."""

    def check(self, value: Any) -> str | None:
        problem = matcher_problem(f'x=~"(?i:{value})"') if isinstance(value, str) and value else "not a regular expression"
        return f"{problem}: {value!r}" if problem else None


@dataclass(frozen=True)
class Endpoints:
    """A list of host:port."""

    def check(self, value: Any) -> str | None:
        if isinstance(value, list) and all(isinstance(e, str) and re.fullmatch(_HOST_PORT, e) for e in value):
            return None
        return f"expected a list of host:port, got {value!r}"


Spec = Number | Duration | Flag | Text | Selector | Regex | Endpoints

_LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
# a PromQL string as Go's strconv.Unquote reads it (double or single quotes)
_STRING = (r'"(?:[^"\\\n]|\\[abfnrtv\\"]|\\x[0-9a-fA-F]{2}|\\[0-7]{3}|\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8})*"'
           r"|'(?:[^'\\\n]|\\[abfnrtv\\']|\\x[0-9a-fA-F]{2}|\\[0-7]{3}|\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8})*'")
_MATCHER = re.compile(rf"\s*({_LABEL})\s*(=~|!~|!=|=)\s*({_STRING})\s*")
_DEVICE = r"[A-Za-z0-9_:/\-]+"  # a device name as node_exporter labels it (it goes into PromQL strings)
_HOST_PORT = r"[A-Za-z0-9.\-]+:\d{1,5}|\[[0-9A-Fa-f:.]+\]:\d{1,5}"
_URL = Text(r"|https?://[^\s\"'<>{}]+", "empty or an http(s):// URL")
_NAME = Text(r"[^\s\"'\\{}]+", "a name without spaces or quotes")
_PATH = Text(r"[^\n\"]*", "a path")
SECONDS = Number(0, 3600, above=True)  # a latency line: over 0, at most an hour
SHARE = Number(0, 1, above=True)  # a share of something: over 0, at most all of it
TOLERANCE = Number(0, 1)  # a share off a line: 0 (none) to all
SHARE_OR_OFF = Number(0, 2, above=True)  # a share of a resource; over 1 never reached: that test switched off
FACTOR = Number(1, 1000)  # times a device's own figure
PORT = Number(1, 65535, whole=True)
WINDOW = Duration("10s", "30d")  # a range a rule reads: at least a scrape or two
FOR = Duration("0s", "1d")  # an alert's for:
# a record's group interval: under Prometheus's 5m lookback (a record read later lapses between two evaluations)
GROUP_INTERVAL = Duration("1s", "5m", below=True)


def matcher_problem(text: str) -> str | None:
    """What is wrong with ``text`` as a PromQL label-matcher list (``name op "value", ...``), or None."""
    at = 0
    while True:
        m = _MATCHER.match(text, at)
        if not m:
            return f"no label matcher at character {at + 1}"
        if m.group(2) in ("=~", "!~"):
            try:
                re.compile(codecs.decode(m.group(3)[1:-1], "unicode_escape"))
            except (re.error, UnicodeDecodeError) as exc:
                return f"bad regular expression ({exc})"
        at = m.end()
        if at == len(text):
            return None
        if text[at] != ",":
            return f"expected ',' at character {at + 1}"
        at += 1


SCHEMA: dict[str, Spec] = {
    "links.runbook": _URL,
    "links.grafana": _URL,
    "links.kubernetes_runbook": Text(r"https?://[^\s\"'<>{}]+", "an http(s):// URL"),
    "kubernetes_selectors.*": Selector(),
    "selectors.node": Selector(),
    "selectors.fioscope": Selector(),
    "selectors.etcd": Selector(),
    "selectors.prometheus": Selector(),
    "selectors.device": Selector(),
    "selectors.cluster_label": Text(rf"|{_LABEL}", "empty or a label name"),
    "stack.scrape_interval": Duration("1s", "10m"),
    "stack.evaluation_interval": GROUP_INTERVAL,
    "stack.rate_window": WINDOW,
    "stack.listen_host": Text(r"[A-Za-z0-9.\-:\[\]]+", "a host name or address"),
    "stack.ports.*": PORT,
    "stack.etcd_endpoints": Endpoints(),
    "stack.alertmanager_webhook": _URL,
    "stack.alertmanager_group_interval": Duration("1s", "1d"),
    "stack.alertmanager_page_group_wait": Duration("0s", "1h"),
    "stack.host": _NAME,
    "stack.hosts_dir": _PATH,
    "stack.scrape_tls.enabled": Flag(),
    "stack.scrape_tls.ca_file": _PATH,
    "stack.scrape_tls.server_name": Text(r"[A-Za-z0-9.\-]*", "empty or a host name"),
    "stack.scrape_tls.insecure_skip_verify": Flag(),
    "stack.scrape_basic_auth.username": Text(r"[^\n:\"]*", "a user name (no ':')"),
    "stack.scrape_basic_auth.password_file": _PATH,
    "stack.convert_classic_histograms_to_nhcb": Flag(),
    "stack.concurrent_rule_eval": Flag(),
    "stack.samples_per_chunk": Number(0, 100_000, whole=True),
    "stack.gogc": Number(0, 100_000, whole=True),
    "stack.place_rule_groups": Flag(),
    "fleet.shards": Number(1, 64, whole=True),
    "fleet.thanos_binary": _PATH,
    "fleet.ports.*": PORT,
    "thresholds.etcd_fsync_p99_seconds": SECONDS,
    "thresholds.etcd_fsync_warning_ratio": SHARE,
    "thresholds.etcd_backend_commit_p99_seconds": SECONDS,
    "thresholds.fsync_histogram_window": WINDOW,
    "thresholds.fsync_histogram_interval": GROUP_INTERVAL,
    "thresholds.columns_interval": Duration("1s", "5m", below=True, off=True),
    "thresholds.etcd_window": WINDOW,
    "thresholds.disk_latency_sla_seconds": SECONDS,
    "thresholds.disk_latency_sla_per_device.*": SECONDS,
    **{f"thresholds.disk_limits.*.{key}": Number(0, 2**60, above=True) for key in (
        "iops", "read_iops", "write_iops", "bandwidth_bytes", "read_bandwidth_bytes", "write_bandwidth_bytes")},
    "thresholds.disk_cap_per_device.*": Text("provider|physical", "provider or physical"),
    "thresholds.at_limit_ratio": SHARE,
    "thresholds.util_saturated_ratio": SHARE,
    "thresholds.queue_size_exploding": Number(0, 1e6, above=True),
    "thresholds.queue_rise_ratio": FACTOR,
    "thresholds.queue_window": WINDOW,
    "thresholds.iowait_ratio": SHARE,
    "thresholds.iowait_busy_cpu_ratio": SHARE,
    "thresholds.write_cliff_ratio": Number(0, 1, above=True),
    "thresholds.write_cliff_window": Duration("2m", "30d"),  # its peaks are read from the rates' 2m maxima
    "thresholds.results_stale_after": Duration("1m", "365d"),
    "thresholds.rule_evaluation_busy_ratio": SHARE,
    "thresholds.rule_evaluation_window": WINDOW,
    "thresholds.throttle.virtual_models": Regex(),
    "thresholds.throttle.local_models": Regex(),
    "thresholds.throttle.remote_models": Regex(),
    "thresholds.throttle.remote_transports": Regex(),
    "thresholds.throttle.cloud_machines": Regex(),
    "thresholds.throttle.util_min_ratio": SHARE,
    "thresholds.throttle.flatness_max_cv": SHARE,
    "thresholds.throttle.ceiling_tolerance": TOLERANCE,
    "thresholds.throttle.flat_off_share": TOLERANCE,
    "thresholds.throttle.envelope_tolerance": TOLERANCE,
    "thresholds.throttle.off_ceiling_share": TOLERANCE,
    "thresholds.throttle.size_spread_ratio": FACTOR,
    "thresholds.throttle.peak_lookback": WINDOW,
    "thresholds.throttle.short_burst": Duration("0s", "5m"),
    "thresholds.throttle.held_at_level": Flag(),
    "thresholds.throttle.held_tolerance": SHARE,  # 0: no sample ever equals its peak, never a page
    "thresholds.throttle.held_start_tolerance": SHARE,
    "thresholds.throttle.held_quantile": Number(0, 0.5, above=True),  # the band's lower quantile (the upper: 1 - it)
    "thresholds.throttle.held_spread_windows": Number(1, 100, whole=True),
    "thresholds.throttle.page_with_cause": Duration("15s", "1h", off=True),
    "thresholds.throttle.min_iops": Number(0, 1e9),
    "thresholds.throttle.min_bytes_per_second": Number(0, 2**60),
    "thresholds.throttle.queue_min": Number(0, 1e6),
    "thresholds.throttle.await_min_seconds": Number(0, 3600),
    "thresholds.throttle.await_baseline_factor": FACTOR,
    "thresholds.throttle.baseline_window": WINDOW,
    "thresholds.throttle.baseline_interval": Duration("10s", "1h"),
    "thresholds.throttle.baseline_median_interval": GROUP_INTERVAL,
    "thresholds.throttle.fio_window": WINDOW,
    "thresholds.throttle.window": WINDOW,
    "thresholds.throttle.window_scrapes": Number(1, 1000, whole=True),
    "thresholds.throttle.step_down_ratio": Number(1, 1000, above=True),
    "thresholds.throttle.step_down_lookback": Duration("2m", "30d"),  # its peaks are read from the rates' 2m maxima
    "thresholds.cause.slow_await_factor": FACTOR,
    "thresholds.cause.demand_tolerance": TOLERANCE,
    "thresholds.cause.demand_lookback": WINDOW,
    "thresholds.cause.stall_min_in_flight": Number(0, 1e6, above=True),
    "thresholds.cause.stall_completions_per_request": Number(0, 1e6, above=True),
    "thresholds.cause.min_samples": Number(1, 1000, whole=True),
    "thresholds.cause.hold": Duration("1s", "1h"),
    "thresholds.cause.wait_factor": FACTOR,
    "thresholds.cause.wait_min_seconds": Number(0, 3600),
    "thresholds.cause.cpu_pressure_ratio": SHARE_OR_OFF,
    "thresholds.cause.steal_ratio": SHARE_OR_OFF,
    "thresholds.cause.idle_util_ratio": SHARE,
    "thresholds.instance_limit.min_volumes": Number(2, 1000, whole=True),
    "thresholds.instance_limit.tolerance": Number(0, 1, above=True),
    "thresholds.instance_limit.share_window": WINDOW,
    "thresholds.instance_limit.share_move_ratio": Number(0, 1, above=True),
    "thresholds.instance_limit.share_move_factor": Number(1, 1000),
    "thresholds.instance_limit.exceeded_min_ratio": Number(0, 1),
    "thresholds.stall.window": WINDOW,
    "thresholds.stall.min_in_flight": Number(0, 1e6, above=True),
    "thresholds.stall.max_iops": Number(0, 1e9),
    "thresholds.stall.request_seconds": SECONDS,
    "thresholds.stall.await_seconds": SECONDS,
    "thresholds.stall.collapse_ratio": SHARE,
    "thresholds.disk_keep_firing_for": FOR,
    "durations.*": FOR,
}


def spec_for(path: tuple[str, ...]) -> Spec | None:
    """The row of SCHEMA for the setting at ``path`` (its own, else a ``*`` row), or None."""
    dotted = ".".join(path)
    if dotted in SCHEMA:
        return SCHEMA[dotted]
    return next((spec for key, spec in SCHEMA.items() if "*" in key and fnmatch.fnmatchcase(dotted, key)
                 and key.count(".") == dotted.count(".")), None)


def _is_section(path: tuple[str, ...]) -> bool:
    """Whether some row of SCHEMA lies below ``path``."""
    return any(fnmatch.fnmatchcase(".".join(key.split(".")[:len(path)]), ".".join(path)) or
               fnmatch.fnmatchcase(".".join(path), ".".join(key.split(".")[:len(path)]))
               for key in SCHEMA if key.count(".") >= len(path))


def check_settings(node: dict, keys: tuple[str, ...] = ()) -> None:
    """Every setting against its row of SCHEMA: SettingsError (one line naming the key) at the first that fails."""
    for key, value in node.items():
        path = (*keys, str(key))
        if keys in FREE_FORM_MAPS and not (isinstance(key, str) and re.fullmatch(_DEVICE, key)):
            raise SettingsError(f"{'.'.join(keys)}: {key!r} is not a device name (letters, digits, _ - : /)")
        spec = spec_for(path)
        if spec is None and _is_section(path):
            if value is None and path in FREE_FORM_MAPS:
                continue  # a per-device map left empty
            if not isinstance(value, dict):
                raise SettingsError(f"{'.'.join(path)}: expected a section (a mapping), got {value!r}")
            check_settings(value, path)
        elif spec is None:
            raise SettingsError(f"{'.'.join(path)}: not a known setting (fioscope_mixin.settings.SCHEMA has no row for it)")
        elif (problem := spec.check(value)) is not None:
            raise SettingsError(f"{'.'.join(path)}: {problem}")


def load_settings(overrides: list[str] | None = None, path: Path | None = None) -> dict:
    """alerts/config.yaml with ``--set`` overrides applied (a fresh dict each call)."""
    settings = copy.deepcopy(_read(path or CONFIG_PATH))
    for item in overrides or []:
        apply_override(settings, item)
    check_settings(settings)
    return settings


def default_fsync_threshold() -> float:
    """The fdatasync p99 line (etcd's 10 ms) every part uses: the alerts, the dashboards, ``fioscope run``."""
    try:
        return float(load_settings()["thresholds"]["etcd_fsync_p99_seconds"])
    except (KeyError, TypeError, ValueError) as exc:  # SettingsError is a ValueError
        raise SettingsError(f"{CONFIG_PATH}: no usable thresholds.etcd_fsync_p99_seconds ({exc})") from None
