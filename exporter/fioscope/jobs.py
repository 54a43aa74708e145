"""fio job files: finding a profile, its default variables, and the write guard.

A profile declares the variables it uses, with defaults, in comment lines::

    ; default: RUNTIME=60
    ; default: SIZE=1g

``TARGET_DIR`` is always set by fioscope to the target's directory.

The guard (``check_safe``) judges a job as fio itself reads it: fio resolves the file
(``fio --showcmd``) with exactly the environment the run will get, and every path the
job can open is checked against the real path of the target. What the guard cannot
model (commands, includes, option names from variables, repeated sections, engines
that reach devices or the network ...) is refused unless the target is destructive.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import resource
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .config import ConfigError, Target, UnknownJobError, check_job_env

_DEFAULT = re.compile(r"^[;#]\s*default:\s*([A-Z_][A-Z0-9_]*)=(.*?)\s*$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# fio --showcmd prints "--name=value" tokens separated by single spaces, values unquoted
_SHOWCMD_OPTION = re.compile(r"(?:^|\s)--(?=[A-Za-z0-9_]+(?:=|\s|$))")
_DEFAULT_FILENAME_FORMAT = "$jobname.$jobnum.$filenum"
SHOWCMD_CPU_SECONDS = 30  # fio's CPU time for --showcmd (it takes milliseconds)
SHOWCMD_WALL_SECONDS = 900  # a backstop for a fio that never returns; a slow disk's page-ins fit many times over

# engines that only do file I/O through the kernel's file interfaces (or none at all)
SAFE_ENGINES = frozenset({
    "sync", "psync", "vsync", "pvsync", "pvsync2", "libaio", "io_uring", "posixaio", "mmap", "splice", "null",
    "falloc", "ftruncate", "filecreate", "filestat", "filedelete", "dircreate", "dirstat", "dirdelete", "cpuio",
})
# options whose effect reaches beyond the files of the job: commands, other files that
# name files (iologs), sysfs/cgroupfs writes, devices
REFUSED_OPTIONS = {
    "exec_prerun": "runs a command",
    "exec_postrun": "runs a command",
    "read_iolog": "replays I/O to the files the log names",
    "replay_redirect": "redirects I/O to a device",
    "merge_blktrace_file": "writes a merged trace file",
    "ioscheduler": "switches the device's I/O scheduler (sysfs)",
    "cgroup": "creates cgroups",
    "cgroup_weight": "creates cgroups",
    "zonemode": "drives a zoned block device",
}
_LOG_OPTIONS = ("write_iolog", "write_bw_log", "write_lat_log", "write_iops_log", "write_hist_log")


class JobFileError(ConfigError):
    """The job file cannot be read or uses a variable without a value."""


class UnsafeJobError(ConfigError):
    """The job would write to a block device or outside the target directory, or cannot be judged."""


@dataclass
class Section:
    name: str
    options: list[tuple[str, str]] = field(default_factory=list)  # in file order, repeats kept

    def values(self, key: str) -> list[str]:
        return [v for k, v in self.options if k == key]


@dataclass
class JobFile:
    path: Path
    defaults: dict[str, str] = field(default_factory=dict)
    # section name -> options (after variable substitution); "global" included
    sections: dict[str, dict[str, str]] = field(default_factory=dict)
    # every section in file order, as read (repeats kept) - what the guard checks
    parsed: list[Section] = field(default_factory=list)
    # the environment fio runs with: the process environment, the file's defaults, fioscope's variables
    environment: dict[str, str] = field(default_factory=dict)
    # what the guard refuses without looking further: (section, option, reason)
    unmodelled: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def jobnames(self) -> list[str]:
        return [name for name in self.sections if name != "global"]

    def option(self, jobname: str, key: str, default: str = "") -> str:
        return self.sections.get(jobname, {}).get(key, self.sections.get("global", {}).get(key, default))


def resolve_job(job: str, jobs_dir: Path) -> Path:
    """A profile name (``etcd-wal``) from ``jobs_dir``, or a path to a job file."""
    for candidate in (jobs_dir / f"{job}.fio", Path(job)):
        if candidate.is_file():
            return candidate.resolve()
    available = ", ".join(sorted(p.stem for p in jobs_dir.glob("*.fio"))) or "none"
    raise UnknownJobError(f"{job}: no such job file or profile in {jobs_dir} (profiles: {available})")


def fio_environment(defaults: dict[str, str], env: dict[str, str]) -> dict[str, str]:
    """The environment fio gets (and substitutes ``${VAR}`` from): fioscope's own, then the job's checked variables."""
    return {**os.environ, **defaults, **check_job_env(env, "job environment", JobFileError)}


@functools.lru_cache(maxsize=16)
def fio_executable(name: str = "fio") -> str:
    """fio's absolute path, looked up once on fioscope's own PATH (never a job's: with ``env=``,
    subprocess would search the child's PATH, so a job's ``PATH`` would pick the program)."""
    found = os.path.abspath(name) if "/" in name else shutil.which(name, path=os.environ.get("PATH", os.defpath))
    if not found or not os.access(found, os.X_OK) or os.path.isdir(found):
        raise JobFileError(f"{name}: no such program on fioscope's PATH ({os.environ.get('PATH', os.defpath)})")
    return found


def load_job(path: Path, env: dict[str, str]) -> JobFile:
    """Parse a job file with ``env`` (plus its own defaults) substituted, as fio will see it."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise JobFileError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    job = JobFile(path=path)
    for line in text.splitlines():
        m = _DEFAULT.match(line.strip())
        if m:
            job.defaults[m.group(1)] = m.group(2)
    check_job_env(job.defaults, f"{path}: default", JobFileError)
    job.environment = fio_environment(job.defaults, env)
    values = job.environment
    current: Section | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = _open_section(job, line[1:-1].strip())
            continue
        if current is None:
            raise JobFileError(f"{path}:{lineno}: option outside a [section]")
        key, _, value = line.partition("=")
        key = key.strip()
        if key.split(None, 1)[:1] == ["include"] and "=" not in line:
            job.unmodelled.append((current.name, "include", "includes another file"))
            continue
        if "$" in key:
            job.unmodelled.append((current.name, key, "takes the option name from a variable"))
            continue

        at = f"{path}:{lineno}"
        value = _VAR.sub(lambda m: _variable(values, m.group(1), at), _strip_comment(value))  # noqa: B023 - used at once
        current.options.append((key, value))
        job.sections.setdefault(current.name, {})[key] = value
    if not job.jobnames:
        raise JobFileError(f"{path}: no job section")
    return job


def _variable(values: dict[str, str], name: str, where: str) -> str:
    if name not in values:
        raise JobFileError(f"{where}: ${{{name}}} has no value (set it or add '; default: {name}=...')")
    if any(c in values[name] for c in "\n\r\0"):
        raise JobFileError(f"{where}: ${{{name}}} holds a line break (fio would read it as more than one option)")
    return values[name]


def _open_section(job: JobFile, name: str) -> Section:
    seen = [s.name for s in job.parsed]
    if "$" in name:
        job.unmodelled.append((name, "[section]", "takes the job name from a variable"))
    elif name == "global" and name in seen:
        job.unmodelled.append((name, "[global]", "is a second [global] section"))
    elif name in seen:
        job.unmodelled.append((name, "[section]", "repeats a section (fio runs both)"))
    elif name == "global" and seen:
        job.unmodelled.append((name, "[global]", "is not the first section (fio applies it to later jobs only)"))
    section = Section(name)
    job.parsed.append(section)
    job.sections.setdefault(name, {})
    return section


def _strip_comment(value: str) -> str:
    for mark in (";", "#"):
        value = value.split(mark, 1)[0]
    return value.strip()


def showcmd(job: JobFile, fio_binary: str = "fio") -> list[Section] | None:
    """The job as fio resolves it (``fio --showcmd``) with the run's environment; None if fio rejects it.

    A file fio rejects is not run by fio at all, so it needs no path check beyond the file's own.
    Bounded by fio's CPU time, not the wall clock: fio's start-up pages in its program and 63 libraries (80 MiB with
    Debian's engines) from the disk holding them, and on the slow disk a capture diagnoses that took over the 30 s this
    check had (out of the page cache, at 5 read IOPS 28 s, at 1 read IOPS 76 s; cached 1.6 s); waiting costs no CPU.
    Run from ``/``: --showcmd resolves no path, and the target's directory is no business of the check.
    """
    argv = [fio_executable(fio_binary), "--showcmd", os.path.abspath(job.path)]
    try:
        with subprocess.Popen(argv, env=job.environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              errors="surrogateescape", cwd="/") as proc:
            with contextlib.suppress(ProcessLookupError):  # it may have finished already
                resource.prlimit(proc.pid, resource.RLIMIT_CPU, (SHOWCMD_CPU_SECONDS, SHOWCMD_CPU_SECONDS))
            try:
                stdout, _ = proc.communicate(timeout=SHOWCMD_WALL_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise
    except (OSError, subprocess.SubprocessError) as exc:
        raise JobFileError(f"{job.path}: cannot run {fio_binary} --showcmd: {getattr(exc, 'strerror', None) or exc}") from None
    if proc.returncode < 0:  # killed (its CPU limit): not a rejection, which would leave only our own reading of the job
        raise JobFileError(f"{job.path}: {fio_binary} --showcmd was killed by signal {-proc.returncode} "
                           f"(more than {SHOWCMD_CPU_SECONDS} s of CPU)")
    if proc.returncode != 0:
        return None
    line = stdout.strip().removeprefix("fio")
    sections = [Section("global")]
    for token in _SHOWCMD_OPTION.split(line)[1:]:
        key, _, value = token.partition("=")
        key, value = key.strip(), value.strip()
        if key == "name":
            sections.append(Section(value))
        else:
            sections[-1].options.append((key, value))
    return sections


def check_safe(job: JobFile, target: Target, fio_binary: str = "fio") -> None:
    """Refuse a job that could write to a device or outside the target (unless destructive)."""
    if target.destructive:
        return
    if job.unmodelled:
        name, option, reason = job.unmodelled[0]
        raise _refusal(f"{job.path}: [{name}] {option}", reason, target)
    root = target.directory.resolve()
    models = [job.parsed]
    resolved = showcmd(job, fio_binary)
    if resolved is not None:
        ours = [s.name for s in job.parsed if s.name != "global"]
        theirs = [s.name for s in resolved[1:]]
        if ours != theirs:
            raise _refusal(f"{job.path}: [{', '.join(theirs)}]", f"fio reads the jobs as {theirs}, not {ours}", target)
        models.append(resolved)
    for model in models:
        for section in model:
            _check_section(job, model, section, root, target)


def _refusal(where: str, reason: str, target: Target) -> UnsafeJobError:
    return UnsafeJobError(f"{where}: {reason} (target {target.name!r} is not marked destructive)")


def _check_section(job: JobFile, sections: list[Section], section: Section, root: Path, target: Target) -> None:
    globals_ = [s for s in sections if s.name == "global"]
    inherited = [opt for g in globals_ for opt in g.options] if section.name != "global" else []
    options = inherited + section.options

    def values(key: str) -> list[str]:
        return [v for k, v in options if k == key]

    def at(key: str, value: str) -> str:
        return f"{job.path}: [{section.name}] {key}={value}"

    def refuse(key: str, value: str, reason: str) -> UnsafeJobError:
        return _refusal(at(key, value), reason, target)

    for key, value in options:
        if key in REFUSED_OPTIONS:
            raise refuse(key, value, REFUSED_OPTIONS[key])
        if key == "ioengine" and value not in SAFE_ENGINES:
            raise refuse(key, value, "this engine reaches devices, the network or other code")
        if key in ("mem", "iomem") and ":" in value:
            raise refuse(key, value, "backs buffers with a file outside the job's files")
        if key == "filename" and value == "-":
            raise refuse(key, value, "reads or writes fio's own stdin/stdout")
    directories = [root / part for value in values("directory") for part in _split_colons(value)] or [root]
    for value in values("directory"):
        for part in _split_colons(value):
            _check_path(root / part, root, at("directory", value), target)
    filenames = values("filename")
    for value in filenames:
        _check_names(_split_colons(value.replace("$jobname", section.name)), directories, root, at("filename", value), target)
    if section.name != "global":  # the name fio makes up for a job without filename=
        for fmt in values("filename_format") or ([] if filenames else [_DEFAULT_FILENAME_FORMAT]):
            name = fmt.replace("$jobname", section.name)
            for token in ("$jobnum", "$filenum", "$clientuid"):
                name = name.replace(token, "0")
            _check_names([name], directories, root, at("filename_format", fmt), target)
    for key in _LOG_OPTIONS:
        for value in values(key):
            _check_path(root / (value + "_log"), root, at(key, value), target)
    for value in values("opendir"):
        _check_tree(root / value, root, at("opendir", value), target)


def _split_colons(value: str) -> list[str]:
    """fio separates several files or directories with ':' (every part is checked, escapes or not)."""
    return [part for part in value.split(":") if part] or [value]


def _check_names(names: list[str], directories: list[Path], root: Path, where: str, target: Target) -> None:
    for name in names:
        candidates = [directory / name for directory in directories]  # an absolute name replaces the directory
        candidates += [Path(f"{directory}/{name}") for directory in directories]  # ... or fio prefixes it anyway
        for candidate in candidates:
            _check_path(candidate, root, where, target)


def _check_path(path: Path, root: Path, where: str, target: Target) -> None:
    resolved = path.resolve()  # symlinks followed: what fio opens
    if resolved != root and root not in resolved.parents:
        raise UnsafeJobError(f"{where}: outside the target directory {root} "
                             f"(opens {resolved}; target {target.name!r} is not marked destructive)")
    try:
        info = os.stat(resolved)
    except OSError:
        return
    if stat.S_ISBLK(info.st_mode) or stat.S_ISCHR(info.st_mode):
        raise UnsafeJobError(f"{where}: is a device ({resolved}; target {target.name!r} is not marked destructive)")
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:  # another name of the same file may live anywhere on the filesystem
        raise UnsafeJobError(f"{where}: {resolved} has {info.st_nlink} hard links (target {target.name!r} is not marked destructive)")


def _check_tree(path: Path, root: Path, where: str, target: Target) -> None:
    _check_path(path, root, where, target)
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        for name in dirnames + filenames:
            _check_path(Path(dirpath) / name, root, where, target)
