"""fio job files: finding a profile, its default variables, and the safety check.

A profile declares the variables it uses, with defaults, in comment lines::

    ; default: RUNTIME=60
    ; default: SIZE=1g

``TARGET_DIR`` is always set by fioscope to the target's directory.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .config import ConfigError, Target, UnknownJobError

_DEFAULT = re.compile(r"^[;#]\s*default:\s*([A-Z_][A-Z0-9_]*)=(.*?)\s*$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_PATH_OPTIONS = ("directory", "filename", "opendir", "write_iolog", "read_iolog", "write_bw_log", "write_lat_log", "write_iops_log")


class JobFileError(ConfigError):
    """The job file cannot be read or uses a variable without a value."""


class UnsafeJobError(ConfigError):
    """The job would write to a block device or outside the target directory."""


@dataclass
class JobFile:
    path: Path
    defaults: dict[str, str] = field(default_factory=dict)
    # section name -> options (after variable substitution); "global" included
    sections: dict[str, dict[str, str]] = field(default_factory=dict)

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


def load_job(path: Path, env: dict[str, str]) -> JobFile:
    """Parse a job file with ``env`` (plus its own defaults) substituted, as fio will see it."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise JobFileError(f"{path}: cannot read: {exc.strerror}") from None
    job = JobFile(path=path)
    for line in text.splitlines():
        m = _DEFAULT.match(line.strip())
        if m:
            job.defaults[m.group(1)] = m.group(2)
    values = {**job.defaults, **env}
    current = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            job.sections.setdefault(current, {})
            continue
        if current is None:
            raise JobFileError(f"{path}:{lineno}: option outside a [section]")
        key, _, value = line.partition("=")

        def substitute(m: re.Match) -> str:
            if m.group(1) not in values:
                raise JobFileError(f"{path}:{lineno}: ${{{m.group(1)}}} has no value (set it or add '; default: {m.group(1)}=...')")
            return values[m.group(1)]

        job.sections[current][key.strip()] = _VAR.sub(substitute, value.strip())
    if not job.jobnames:
        raise JobFileError(f"{path}: no job section")
    return job


def check_safe(job: JobFile, target: Target) -> None:
    """Refuse a job that writes to a block device or outside the target (unless destructive)."""
    if target.destructive:
        return
    root = target.directory.resolve()
    for name in job.jobnames:
        directory = Path(job.option(name, "directory", str(root)))
        for key in _PATH_OPTIONS:
            value = job.option(name, key)
            if not value:
                continue
            # fio separates several files with ':'
            for part in value.split(":") if key == "filename" else [value]:
                path = Path(part) if Path(part).is_absolute() else directory / part
                _check_path(path, root, f"{job.path}: [{name}] {key}={value}", target)


def _check_path(path: Path, root: Path, where: str, target: Target) -> None:
    resolved = path.resolve()
    if resolved != root and root not in resolved.parents:
        raise UnsafeJobError(f"{where}: outside the target directory {root} (target {target.name!r} is not marked destructive)")
    try:
        mode = os.stat(resolved).st_mode
    except OSError:
        return
    if stat.S_ISBLK(mode) or stat.S_ISCHR(mode):
        raise UnsafeJobError(f"{where}: is a device (target {target.name!r} is not marked destructive)")
