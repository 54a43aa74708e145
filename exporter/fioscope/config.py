"""The exporter's run config (``--config.file``): where results live, the targets fio may write to
(with their declared limits and SLA) and the schedule; typed, one error type per failure.

Not to be confused with the *settings* (``alerts/config.yaml``, read by ``fioscope_mixin.settings``):
thresholds, windows and selectors shared by the rules, the dashboards and ``fioscope run``'s
default fsync line. This file says what to run where; the settings say what is good or bad.

Example::

    results_dir: /var/lib/fioscope/results
    targets:
      - name: rootdisk
        directory: /var/lib/fioscope/target
        limits: {read_iops: 700, write_iops: 300}
        sla_latency: 30ms
    schedule:
      - job: etcd-wal
        target: rootdisk
        repeat: 2        # load, idle, load ...
        idle: 60s
        every: 15m       # the whole cycle again
    max_jobs_per_file: 1000  # a result file with more jobs is rejected
    max_series: 250000       # past this, /metrics publishes no job new to it
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

from fioscope_mixin import units
from fioscope_mixin.units import UnitError
from fioscope_mixin.yamlfile import YamlError, load_yaml

from .resources import profiles_dir

DEFAULT_LISTEN = "127.0.0.1:7963"
# a target here (or below a tree) would let a job clobber the system: refused unless destructive
SYSTEM_DIRS = frozenset(map(Path, ("/", "/var", "/var/lib", "/var/log", "/var/cache", "/var/tmp", "/root", "/home", "/tmp",
                                   "/srv", "/opt", "/mnt", "/media", "/usr/local")))
SYSTEM_TREES = tuple(map(Path, ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/dev",
                                "/proc", "/sys", "/run", "/var/run", "/var/lib/dpkg", "/var/lib/apt")))


class ConfigError(Exception):
    """Base of every configuration problem; ``str()`` is one line naming the file."""


class ConfigFileError(ConfigError):
    """The file cannot be read or is not YAML."""


class ConfigValueError(ConfigError):
    """A field has a wrong type or value."""


class UnknownTargetError(ConfigError):
    """A schedule entry names a target the config does not define."""


class UnknownJobError(ConfigError):
    """A job is neither a profile in the jobs directory nor an existing file."""


class UnsafeTargetError(ConfigError):
    """A non-destructive target resolves to /, a system directory or a device."""


@dataclass(frozen=True)
class Limits:
    """What the provider promises for a disk (per second). 0 means not declared."""

    read_iops: float = 0
    write_iops: float = 0
    iops: float = 0  # combined cap, where the provider gives one figure
    read_bandwidth_bytes: float = 0
    write_bandwidth_bytes: float = 0
    bandwidth_bytes: float = 0
    # False: reads and writes share one time budget (1/(a/W + (1-a)/R));
    # True: separate per-direction caps, as cgroup/blkio throttles (min(R/(1-a), W/a)).
    independent: bool = False

    def declared(self) -> bool:
        return any(getattr(self, f) for f in _RATE_FIELDS)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if getattr(self, k)}


_RATE_FIELDS = ("read_iops", "write_iops", "iops", "read_bandwidth_bytes", "write_bandwidth_bytes", "bandwidth_bytes")


@dataclass(frozen=True)
class Target:
    name: str
    directory: Path
    destructive: bool = False  # only then may a job write to a block device or outside `directory`
    limits: Limits = Limits()
    sla_latency_seconds: float = 0.0
    cgroup: str = ""  # run fio inside this cgroup (a lab disk's throttle); needs root


@dataclass(frozen=True)
class ScheduleEntry:
    job: str
    target: str
    repeat: int = 1
    idle_seconds: float = 60.0
    start_delay_seconds: float = 0.0
    every_seconds: float = 0.0  # 0: run the cycle once
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Config:
    source: str = "<defaults>"
    results_dir: Path = Path("results")
    jobs_dir: Path = field(default_factory=profiles_dir)
    scan_interval_seconds: float = 5.0
    status_interval_seconds: float = 1.0
    fio_binary: str = "fio"
    listen_address: str = DEFAULT_LISTEN
    targets: tuple[Target, ...] = ()
    schedule: tuple[ScheduleEntry, ...] = ()
    # bounds against hostile result files: a file with more jobs is rejected; past max_series on
    # /metrics a job new to the exporter is not published (each: one log line and a counter)
    max_jobs_per_file: int = 1000
    max_series: int = 250_000

    def target(self, name: str) -> Target:
        for t in self.targets:
            if t.name == name:
                return t
        raise UnknownTargetError(f"{self.source}: unknown target {name!r} (defined: {', '.join(t.name for t in self.targets) or 'none'})")

    def target_for_directory(self, directory: str) -> Target | None:
        """The configured target whose directory holds ``directory`` (for results dropped in by others)."""
        path = Path(directory)
        for t in self.targets:
            if path == t.directory or t.directory in path.parents:
                return t
        return None


_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def expand_env(text: str, where: str = "") -> str:
    """``${VAR}`` and ``${VAR:-default}``, as in compose files: one config for compose and native.

    Defaults nest (``${A:-${B:-/srv}}``) and are expanded only where used. ``${VAR}`` with VAR
    unset is an error (with ``where``): an empty value would silently turn a path into the
    config's own directory. A malformed ``${`` (no name, not closed, ``}}``) is an error too,
    never a literal ``${...}`` directory.
    """
    return _expand(text, 0, where, strict=True, nested=False)[0]


def _expand(text: str, pos: int, where: str, strict: bool, nested: bool) -> tuple[str, int]:
    """Expand from ``pos`` to the end, or (``nested``) to the ``}`` that closes a default: (text, position after it).
    ``strict``: the text is used (an unset ``${VAR}`` is an error); False inside a default that is not."""
    def bad(problem: str) -> ConfigValueError:
        return ConfigValueError(f"{where or 'config'}: {text!r}: {problem}")

    out: list[str] = []
    while pos < len(text):
        if text.startswith("${", pos):
            m = _VAR_NAME.match(text, pos + 2)
            if not m:
                raise bad("'${' must be followed by a variable name")
            name, pos = m.group(), m.end()
            if text.startswith(":-", pos):
                default, pos = _expand(text, pos + 2, where, strict and not os.environ.get(name), nested=True)
                out.append(os.environ.get(name) or default)
            elif text.startswith("}", pos):
                pos += 1
                if strict and name not in os.environ and where:
                    raise ConfigValueError(f"{where}: ${{{name}}} is not set (export it or write ${{{name}:-default}})")
                out.append(os.environ.get(name, ""))
            else:
                raise bad(f"${{{name} is not closed with '}}'")
            if text.startswith("}", pos) and not nested:
                raise bad("a '}' too many after ${...}")
        elif nested and text[pos] == "}":
            return "".join(out), pos + 1
        else:
            out.append(text[pos])
            pos += 1
    if nested:
        raise bad("'${' is not closed with '}'")
    return "".join(out), pos


def parse_duration(value, where: str, positive: bool = False) -> float:
    """``90``, ``"90s"``, ``"1h30m"``, ``"1d"``, ``"30ms"`` -> seconds, by the one duration parser (fioscope_mixin.units)."""
    try:
        return units.parse_duration(value, positive=positive)
    except UnitError as exc:
        raise ConfigValueError(f"{where}: {exc}") from None


def parse_rate(value, where: str) -> float:
    """A declared limit: ``700``, ``"100MiB"``, ``"125MB/s"`` -> a number per second (a bare k/M/G is 1000-based)."""
    try:
        return units.parse_size(value, kilo=1000)
    except UnitError:
        raise ConfigValueError(f"{where}: {value!r} is not a number (e.g. 700, 100MiB, 125MB/s) up to 1EiB") from None


def parse_key_values(items: list[str] | None, flag: str) -> dict[str, str]:
    """``KEY=VALUE`` flags (``--env``, ``--limit``) as a mapping; ConfigError names the flag and the item."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def mapping(value, where: str, error: type[ConfigError] = ConfigValueError) -> dict:
    """A YAML mapping (``{}`` for none), else ``error`` naming ``where``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise error(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _reject_unknown(data: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigValueError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")


# keys a job's environment may not set (schedule env, ``fioscope run --env``, a capture plan's env):
# they choose the program that runs (PATH: fio itself is run by its absolute path) or the code it
# loads (the dynamic loader's LD_*, glibc's list of variables it ignores for setuid programs,
# shells' and interpreters' start-up hooks). HOME, TMPDIR, TZ stay allowed: they pick data, not code.
REFUSED_ENV = frozenset({
    "PATH", "IFS", "ENV", "BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS4", "CDPATH",
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "NIS_PATH", "NLSPATH",
    "RESOLV_HOST_CONF", "RES_OPTIONS", "MALLOC_TRACE",
})
REFUSED_ENV_PREFIXES = ("LD_", "PYTHON", "PERL5", "PERLLIB", "RUBY", "NODE_", "BASH_FUNC_")


def check_job_env(env, where: str, error: type[Exception] = ConfigValueError) -> dict[str, str]:
    """A job's environment as ``{name: text}``; ``error`` naming ``where`` and the key for a refused or malformed one.

    The one check of every job environment: a job's variables substitute ``${VAR}`` in its file,
    they never pick the program that runs or what it loads.
    """
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise error(f"{where}: expected a mapping, got {type(env).__name__}")
    out: dict[str, str] = {}
    for key, value in env.items():
        name = str(key)
        if not _VAR_NAME.fullmatch(name):
            raise error(f"{where}: {name!a}: not a variable name (letters, digits, _)")
        upper = name.upper()
        if upper in REFUSED_ENV or upper.startswith(REFUSED_ENV_PREFIXES):
            raise error(f"{where}: {name}: refused: it would choose the program fio is or the code it loads "
                        "(fio runs from fioscope's own PATH)")
        if isinstance(value, (dict, list)) or "\x00" in str(value):
            raise error(f"{where}.{name}: expected a text value")
        out[name] = str(value)
    return out


def parse_limits(data, where: str) -> Limits:
    data = dict(mapping(data, where))
    _reject_unknown(data, set(Limits.__dataclass_fields__), where)
    independent = data.pop("independent", False)
    independent = {"true": True, "false": False}.get(str(independent).lower(), independent)
    if not isinstance(independent, bool):
        raise ConfigValueError(f"{where}.independent: must be true or false")
    return Limits(independent=independent, **{k: parse_rate(v, f"{where}.{k}") for k, v in data.items()})


def _count(value, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 10**9:
        raise ConfigValueError(f"{where}: must be a whole number from 1 to 1000000000")
    return value


def _list(value, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigValueError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def check_target(target: Target, where: str) -> Target:
    """The target with its directory resolved (symlinks, ``..``); refused if it is the system's own."""
    directory = target.directory.resolve()
    target = replace(target, directory=directory)
    if target.destructive:
        return target
    reason = ""
    if directory in SYSTEM_DIRS or any(directory == tree or tree in directory.parents for tree in SYSTEM_TREES):
        reason = "is / or a system directory"
    else:
        try:
            mode = os.stat(directory).st_mode
        except OSError:
            mode = 0
        if stat.S_ISBLK(mode) or stat.S_ISCHR(mode):
            reason = "is a device"
    if reason:
        raise UnsafeTargetError(f"{where}: directory {directory} {reason} (mark the target destructive to allow it)")
    return target


CGROUP_FILESYSTEMS = frozenset({"cgroup", "cgroup2"})


def _filesystem_type(path: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> str:
    """The type of the filesystem ``path`` (resolved) lies on: the longest mount point above it in mountinfo."""
    best, kind = -1, ""
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        point = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[4]))  # mountinfo escapes space as \040
        if (point == path or point in path.parents) and len(str(point)) > best:
            best, kind = len(str(point)), rest.split()[0]
    return kind


def check_cgroup(directory: str, where: str) -> str:
    """A real cgroup directory (``cgroup.procs`` in it, on a cgroup or cgroup2 filesystem), resolved; else an error
    naming ``where``: fio joins it by writing its pid to cgroup.procs, which anywhere else is just a file written."""
    path = Path(directory).resolve()
    if not (path / "cgroup.procs").is_file():
        raise ConfigValueError(f"{where} {directory}: not a cgroup directory (no cgroup.procs in it)")
    kind = _filesystem_type(path)
    if kind not in CGROUP_FILESYSTEMS:
        raise ConfigValueError(f"{where} {directory}: not on a cgroup filesystem ({kind or 'unknown'}; see /proc/self/mountinfo)")
    return str(path)


def load_config(path: str | Path | None, results_dir: str | None = None) -> Config:
    """Read and validate a config file; ``None`` gives the defaults (serve what is in results_dir)."""
    if path is None:
        cfg = Config()
    else:
        cfg = _parse_config(Path(path))
    if results_dir:
        cfg = replace(cfg, results_dir=Path(results_dir))
    return cfg


def read_yaml(path: Path, error: type[ConfigError] = ConfigFileError):
    """A YAML file's content by the one YAML loader; ``error`` (one line naming the file) if unreadable,
    not YAML or with a duplicate key."""
    try:
        return load_yaml(path)
    except YamlError as exc:
        raise error(str(exc)) from None


def _parse_config(path: Path) -> Config:
    src = str(path)
    data = read_yaml(path)
    data = mapping(data, src)
    top = {"results_dir", "jobs_dir", "scan_interval", "status_interval", "fio_binary", "listen_address", "targets", "schedule",
           "max_jobs_per_file", "max_series"}
    _reject_unknown(data, top, src)
    base = path.resolve().parent

    def rel(p, where: str) -> Path:
        text = expand_env(str(p), where)
        if not text.strip():
            raise ConfigValueError(f"{where}: empty path")
        path = Path(text)
        return path if path.is_absolute() else base / path

    targets = []
    for i, t in enumerate(_list(data.get("targets"), f"{src}: targets")):
        where = f"{src}: targets[{i}]"
        t = mapping(t, where)
        _reject_unknown(t, {"name", "directory", "destructive", "limits", "sla_latency", "cgroup"}, where)
        if not t.get("name") or not t.get("directory"):
            raise ConfigValueError(f"{where}: 'name' and 'directory' are required")
        if not isinstance(t.get("destructive", False), bool):
            raise ConfigValueError(f"{where}.destructive: must be true or false")
        targets.append(check_target(Target(
            name=str(t["name"]),
            directory=rel(t["directory"], f"{where}.directory"),
            destructive=t.get("destructive", False),
            limits=parse_limits(t.get("limits"), f"{where}.limits"),
            sla_latency_seconds=parse_duration(t.get("sla_latency", 0), f"{where}.sla_latency"),
            # fio joins it by writing its pid there: the same check as --target.cgroup
            cgroup=check_cgroup(str(t["cgroup"]), f"{where}.cgroup") if t.get("cgroup") else "",
        ), where))
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ConfigValueError(f"{src}: targets: duplicate name")

    cfg = Config(
        source=src,
        results_dir=rel(data.get("results_dir", "results"), f"{src}: results_dir"),
        jobs_dir=rel(data["jobs_dir"], f"{src}: jobs_dir") if "jobs_dir" in data else profiles_dir(),
        scan_interval_seconds=parse_duration(data.get("scan_interval", 5), f"{src}: scan_interval", positive=True),
        status_interval_seconds=parse_duration(data.get("status_interval", 1), f"{src}: status_interval", positive=True),
        fio_binary=str(data.get("fio_binary", "fio")),
        listen_address=str(data.get("listen_address", DEFAULT_LISTEN)),
        targets=tuple(targets),
        max_jobs_per_file=_count(data.get("max_jobs_per_file", Config.max_jobs_per_file), f"{src}: max_jobs_per_file"),
        max_series=_count(data.get("max_series", Config.max_series), f"{src}: max_series"),
    )
    schedule = []
    for i, s in enumerate(_list(data.get("schedule"), f"{src}: schedule")):
        where = f"{src}: schedule[{i}]"
        s = mapping(s, where)
        _reject_unknown(s, {"job", "target", "repeat", "idle", "start_delay", "every", "env"}, where)
        if not s.get("job") or not s.get("target"):
            raise ConfigValueError(f"{where}: 'job' and 'target' are required")
        cfg.target(str(s["target"]))  # raises UnknownTargetError
        repeat = s.get("repeat", 1)
        if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
            raise ConfigValueError(f"{where}.repeat: must be a whole number >= 1")
        job = str(s["job"])
        if "/" in job or job.endswith(".fio"):  # a path, relative to the config file
            job = str(rel(job, f"{where}.job"))
        schedule.append(ScheduleEntry(
            job=job,
            target=str(s["target"]),
            repeat=repeat,
            idle_seconds=parse_duration(s.get("idle", 60), f"{where}.idle"),
            start_delay_seconds=parse_duration(s.get("start_delay", 0), f"{where}.start_delay"),
            every_seconds=parse_duration(s.get("every", 0), f"{where}.every"),
            env=check_job_env(s.get("env"), f"{where}.env"),
        ))
    return replace(cfg, schedule=tuple(schedule))
