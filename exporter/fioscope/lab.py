"""The throttle lab (root only): loop-backed disks whose behaviour we control.

A lab disk is a sparse file on the host's disk, attached as a loop device with
``--direct-io=on``, formatted ext4 and mounted. A *throttled* disk caps the I/O that
the loop device sends to its backing disk, per cgroup (v1 ``blkio.throttle.*`` or v2
``io.max``); whatever runs inside the lab's cgroup then sees what a guest sees on a
capped cloud disk: IOPS pinned at the cap, util 100 %, aqu-sz ~ iodepth, await of tens
to hundreds of ms. (Capping the loop device itself would hold requests *before* they
reach it, and the guest-side queue would look empty.)

Kinds: ``throttled`` (IOPS per direction), ``read-capped`` / ``write-capped`` (one
direction only), ``bandwidth-capped`` (bytes per second), ``dual-capped`` (IOPS and bytes per
second at once: cgroup v1 writes both ``blkio.throttle.*_iops_device`` and ``*_bps_device``, v2 one
``io.max`` line with riops, wiops, rbps and wbps), ``burst-then-cap`` (uncapped for
``burst_seconds``, then the caps: a timer process writes the throttle, as burst credits
running out or a leaky bucket's burst allowance would), ``stalled`` (2 IOPS each way: under a queue of 32 requests
stay in flight for seconds and almost none complete, a disk in trouble; its caps sit on a loop device of its own
between the disk and its backing file, see ``PRIVATE_CAP_KINDS``), ``slow-fsync``, ``healthy`` and ``ram``
(uncapped, backed by a tmpfs of its own instead of the host's disk: its fsyncs return in microseconds whatever the host's
own disk is doing, the healthy reference for fsync tests on a shared or noisy host; it takes no caps).

Every step is recorded in ``<state-dir>/<name>/state.json`` (root's alone, 0600, replaced whole) before it is taken,
and each device as soon as it is made, so ``down`` removes what was created (the burst timer too), also after a crash.
``down`` believes the state file only as far as it can check it: the file and its directories root's alone, every mount
the disk's own directory's, the cgroup the lab's own by name, every loop device found by its backing file (the disk's
own, or for the stalled kind the loop device on it); anything else refuses the disk in one line, nothing touched.
Every change to the machine goes through a ``Host``; ``DryRun`` records them instead (what ``down`` would do).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from fioscope_mixin.units import UnitError, parse_size

DEFAULT_STATE_DIR = Path("/var/lib/fioscope-lab")
CGROUP_ROOT = Path("/sys/fs/cgroup")
MIB = 1048576
LIMIT_KEYS = ("read_iops", "write_iops", "read_bps", "write_bps")
KINDS: dict[str, dict[str, int]] = {
    # name: default caps (absent = uncapped); flags of `lab up` override them
    "throttled": {"read_iops": 700, "write_iops": 300},
    "read-capped": {"read_iops": 700},
    "write-capped": {"write_iops": 300},
    "bandwidth-capped": {"read_bps": 40 * MIB, "write_bps": 40 * MIB},
    # IOPS and bytes/s caps at once, as a cloud's default volume (gp3: 3000 IOPS and 125 MiB/s), scaled to what a
    # lab host's own disk sustains: small requests meet the IOPS cap, large ones the bandwidth cap
    "dual-capped": {"read_iops": 1000, "write_iops": 1000, "read_bps": 40 * MIB, "write_bps": 40 * MIB},
    "burst-then-cap": {"read_iops": 300, "write_iops": 300},  # after burst_seconds uncapped
    # a stalled device: requests in flight, almost no completions (under fio's queue of 32, each waits ~16 s)
    "stalled": {"read_iops": 2, "write_iops": 2},
    "slow-fsync": {"write_iops": 60},  # each fdatasync costs a data write plus a journal commit: p99 well above 10 ms
    "healthy": {},
    "ram": {},  # backed by memory: no backing disk to cap
}
IN_MEMORY_KINDS = ("ram",)
# Kinds whose caps sit on a loop device of their own (the disk's loop device backed by it, it by the backing file), not on
# the host's disk: at 2 IOPS whatever the disk's processes read from the host's disk waits with its queue (a page of a
# program, a block of the host file system's metadata), and so does every other process that needs that page or block.
# In CI every read load started beside a stalled disk issued nothing until the stalled disk's caps were lifted, 4 min on.
PRIVATE_CAP_KINDS = ("stalled",)
MEMORY_DIR = "ram"  # where an in-memory kind mounts its tmpfs, inside the disk's directory
DEFAULT_BURST_SECONDS = 120
TIMER_MARK = "fioscope-lab-burst-timer"
# a disk's name is a directory and part of a cgroup's name: no separators, no leading dot or dash
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
LOOP_DEVICE = re.compile(r"/dev/loop[0-9]+")
MAJ_MIN = re.compile(r"[0-9]+:[0-9]+")
STEPS = ("tmpfs", "backing_file", "lower_loop", "loop", "mount", "cgroup", "timer")
MAX_STATE_BYTES = 1 << 20  # a state file is a few hundred bytes
MIN_SIZE = MIB
# a ram disk's share of MemAvailable at most: one filled up would push the host into swap or its OOM killer
RAM_SHARE = 0.5


class LabError(Exception):
    """A clear one-line reason the lab cannot do what was asked."""


@dataclass
class LabDisk:
    name: str
    kind: str
    state_dir: str
    backing_file: str = ""
    loop_device: str = ""
    mountpoint: str = ""
    cgroup: str = ""
    cgroup_version: int = 0
    backing_device: str = ""  # MAJ:MIN of the disk the backing file lives on, or of lower_device (what is throttled)
    lower_device: str = ""  # PRIVATE_CAP_KINDS: the loop device between the disk's loop device and its backing file
    limits: dict = field(default_factory=dict)
    burst_seconds: int = 0  # burst-then-cap: uncapped this long after `up`, then `limits`
    timer_pid: int = 0
    created: list = field(default_factory=list)  # steps taken, in order

    @property
    def device_name(self) -> str:
        return os.path.basename(self.loop_device)

    def save(self) -> None:
        """Replace the state file whole, root's alone (0600). Not fsynced: what it records (loop devices, mounts,
        cgroups) does not outlive the machine's power either; a killed process leaves the old file or the new one."""
        path = Path(self.state_dir) / "state.json"
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            os.fchmod(fd, 0o600)  # a temporary file left by an older version keeps the mode it was made with
            handle.write(json.dumps(asdict(self), indent=1))
        tmp.replace(path)

    @classmethod
    def load(cls, directory: Path) -> LabDisk:
        """The state file of the lab disk in ``directory``, refused (LabError, one line naming it) unless root alone
        could have written it and everything it names is the disk's own."""
        path = directory / "state.json"
        disk = cls._parse(path, _read_roots_alone(path))
        _check_own(disk, directory, path)
        return disk

    @classmethod
    def _parse(cls, path: Path, data: bytes) -> LabDisk:
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise LabError(f"{path}: not a lab state file ({str(exc)[:80]})") from None
        if not isinstance(raw, dict):
            raise LabError(f"{path}: not a lab state file (a JSON object expected)")
        # the annotations are strings (from __future__ import annotations): str, int, dict or list
        types = {f.name: {"str": str, "int": int, "dict": dict, "list": list}[str(f.type)] for f in fields(cls)}
        for key, value in raw.items():
            if key not in types:
                raise LabError(f"{path}: not a lab state file (unknown key {key[:40]!r})")
            if type(value) is not types[key]:  # exactly: True is no pid
                raise LabError(f"{path}: {key} is {str(value)[:40]!r}, not a {types[key].__name__}")
        missing = [f.name for f in fields(cls) if f.name not in raw and f.default is MISSING and f.default_factory is MISSING]
        if missing:
            raise LabError(f"{path}: not a lab state file (no {', '.join(missing)})")
        return cls(**raw)


def _check_roots_alone(directory: Path, path: Path) -> None:
    """Refuse (one line naming ``path``) a ``directory`` that is not root's or that others may write (or a symlink)."""
    try:
        st = os.lstat(directory)
    except OSError as exc:
        raise LabError(f"{path}: cannot read it ({exc.strerror})") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise LabError(f"{path}: refused: {directory} is not a directory root's alone "
                       f"(owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)})")


def _read_roots_alone(path: Path) -> bytes:
    """``path``, if root alone could have written it: a regular file of root's, 0600, in directories of root's that no
    one else may write (the disk's and the state directory)."""
    _check_roots_alone(path.parent.parent, path)
    _check_roots_alone(path.parent, path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        reason = "a symlink" if os.path.islink(path) else exc.strerror
        raise LabError(f"{path}: refused: {reason}") from None
    st = os.fstat(fd)  # of what was opened, not of what the name may point at by now
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or stat.S_IMODE(st.st_mode) != 0o600:
        os.close(fd)
        raise LabError(f"{path}: refused: not a file root's alone (owner uid {st.st_uid}, mode "
                       f"{stat.filemode(st.st_mode)}; the lab writes it 0600 as root)")
    with os.fdopen(fd, "rb") as handle:
        return handle.read(MAX_STATE_BYTES)


def _backing_file(kind: str, directory: str) -> str:
    """Where a disk of ``kind`` in (the real path) ``directory`` keeps its backing file."""
    return os.path.join(directory, MEMORY_DIR, "backing.img") if kind in IN_MEMORY_KINDS else os.path.join(directory, "backing.img")


def _cgroup_path(name: str, version: int) -> Path:
    """The lab's cgroup for disk ``name`` (v2 at the hierarchy's root, v1 in blkio's)."""
    return (CGROUP_ROOT if version == 2 else CGROUP_ROOT / "blkio") / f"fioscope-lab-{name}"


def _check_own(disk: LabDisk, directory: Path, path: Path) -> None:
    """Refuse (one line naming ``path``) a state file naming anything that is not the disk's own."""
    real = os.path.realpath(directory)

    def refuse(key: str, value: object, own: str) -> LabError:
        return LabError(f"{path}: refused: {key} {str(value)[:80]!r} is not the lab disk's own ({own})")

    if disk.name != directory.name:
        raise refuse("name", disk.name, directory.name)
    if disk.kind not in KINDS:
        raise refuse("kind", disk.kind, "one of " + ", ".join(KINDS))
    if os.path.realpath(disk.state_dir) != real:
        raise refuse("state_dir", disk.state_dir, real)
    owns = {"backing_file": _backing_file(disk.kind, real), "mountpoint": os.path.join(real, "mnt")}
    if disk.cgroup:
        if disk.cgroup_version not in (1, 2):
            raise refuse("cgroup_version", disk.cgroup_version, "1 or 2")
        owns["cgroup"] = os.path.realpath(_cgroup_path(disk.name, disk.cgroup_version))
    for key, own in owns.items():
        value = getattr(disk, key)
        if value and os.path.realpath(value) != own:  # resolved: `..` and symlinks out are seen for what they name
            raise refuse(key, value, own)
    for key, pattern, form in (("loop_device", LOOP_DEVICE, "/dev/loopN"), ("lower_device", LOOP_DEVICE, "/dev/loopN"),
                               ("backing_device", MAJ_MIN, "MAJ:MIN")):
        if getattr(disk, key) and not pattern.fullmatch(getattr(disk, key)):
            raise refuse(key, getattr(disk, key), form)
    if any(step not in STEPS for step in disk.created):
        raise refuse("created", disk.created, ", ".join(STEPS))
    if any(key not in LIMIT_KEYS or type(value) is not int or value < 0 for key, value in disk.limits.items()):
        raise refuse("limits", disk.limits, "integers >= 0 for " + ", ".join(LIMIT_KEYS))
    if disk.timer_pid < 0 or disk.burst_seconds < 0:
        raise refuse("timer_pid", disk.timer_pid, "a pid")


def check_name(name: str) -> None:
    if not NAME.fullmatch(name):
        raise LabError(f"lab disk name {name[:80]!r}: letters, digits, '.', '_' and '-', at most 64, "
                       "starting with a letter or digit")


def disk_size(kind: str, size: object) -> int:
    """``--size`` in bytes by the one size parser (a bare ``G`` is GiB, as truncate reads it): at least 1MiB, and for
    an in-memory kind at most RAM_SHARE of MemAvailable."""
    try:
        nbytes = int(parse_size(size, kilo=1024))
    except UnitError as exc:
        raise LabError(f"--size: {exc}") from None
    if nbytes < MIN_SIZE:
        raise LabError(f"--size: {size!r} is less than 1MiB (too small for an ext4 file system)")
    if kind in IN_MEMORY_KINDS:
        available = _mem_available()
        if nbytes > available * RAM_SHARE:
            raise LabError(f"--size: {size!r} is more than half of the memory available ({available // MIB} MiB): a "
                           f"{kind} disk that fills up would push the host into swap or its OOM killer")
    return nbytes


def _mem_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    raise LabError("--size: cannot read MemAvailable from /proc/meminfo")


def _run(*cmd: str) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise LabError(f"{cmd[0]} not found (install util-linux / e2fsprogs)") from None
    if proc.returncode != 0:
        said = " ".join((proc.stderr.strip() or proc.stdout.strip()).split())  # one line, whatever the tool printed
        raise LabError(f"{' '.join(cmd)}: {said}")
    return proc.stdout.strip()


class Host:
    """The machine as the lab changes it: every command, write, kill and removal goes through here."""

    def run(self, *cmd: str) -> str:
        return _run(*cmd)

    def write(self, path: Path, text: str) -> None:
        path.write_text(text)

    def kill(self, pid: int) -> None:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass

    def rmdir(self, path: Path) -> None:
        path.rmdir()

    def rmtree(self, path: Path) -> None:
        shutil.rmtree(path)

    def unmount(self, mountpoint: str) -> None:
        """Unmount, waiting for exiting processes to let go; lazily as a last resort (the loop then autoclears)."""
        for _ in range(50):
            if subprocess.run(["umount", mountpoint], capture_output=True).returncode == 0:
                return
            time.sleep(0.2)
        _run("umount", "--lazy", mountpoint)


class DryRun(Host):
    """Records what the lab would do instead of doing it (reads still see the real machine)."""

    def __init__(self) -> None:
        self.actions: list[tuple[str, ...]] = []

    def run(self, *cmd: str) -> str:
        self.actions.append(("run", *cmd))
        return ""

    def write(self, path: Path, text: str) -> None:
        self.actions.append(("write", str(path), text))

    def kill(self, pid: int) -> None:
        self.actions.append(("kill", str(pid)))

    def rmdir(self, path: Path) -> None:
        self.actions.append(("rmdir", str(path)))

    def rmtree(self, path: Path) -> None:
        self.actions.append(("rmtree", str(path)))

    def unmount(self, mountpoint: str) -> None:
        self.actions.append(("umount", mountpoint))


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (loop devices, mounts and cgroups)")


def cgroup_version() -> int:
    """1 if the v1 blkio controller is mounted, 2 if the unified hierarchy has io, else 0."""
    if (CGROUP_ROOT / "blkio" / "blkio.throttle.read_iops_device").exists():
        return 1
    controllers = CGROUP_ROOT / "cgroup.controllers"
    if controllers.exists() and "io" in controllers.read_text().split():
        return 2
    return 0


def whole_disk_of(path: Path) -> str:
    """MAJ:MIN of the whole disk holding ``path`` (throttling works per disk, not per partition)."""
    dev = os.stat(path).st_dev
    majmin = f"{os.major(dev)}:{os.minor(dev)}"
    sysdev = Path("/sys/dev/block") / majmin
    if not sysdev.exists():
        raise LabError(f"{path} is not on a block device ({majmin}: tmpfs/overlay?); use --state-dir on a real disk")
    if (sysdev / "partition").exists():
        majmin = (sysdev.resolve().parent / "dev").read_text().strip()
    return majmin


def up(kind: str, name: str = "", size: str = "2G", state_dir: Path = DEFAULT_STATE_DIR,
       read_iops: int | None = None, write_iops: int | None = None,
       read_bps: int | None = None, write_bps: int | None = None, burst_seconds: int | None = None,
       host: Host | None = None) -> LabDisk:
    host = host or Host()
    require_root()
    if kind not in KINDS:
        raise LabError(f"unknown lab disk kind {kind!r} (kinds: {', '.join(KINDS)})")
    name = name or kind
    check_name(name)
    nbytes = disk_size(kind, size)
    if shutil.which("losetup") is None or not Path("/dev/loop-control").exists():
        raise LabError("loop devices are not available (no losetup or /dev/loop-control)")
    given = {"read_iops": read_iops, "write_iops": write_iops, "read_bps": read_bps, "write_bps": write_bps}
    if any(v is not None and v < 0 for v in given.values()) or (burst_seconds is not None and burst_seconds <= 0):
        raise LabError("limits must be >= 0 and --burst-seconds > 0")
    limits = {key: KINDS[kind].get(key, 0) if given[key] is None else given[key] for key in LIMIT_KEYS}
    if burst_seconds is not None and kind != "burst-then-cap":
        raise LabError("--burst-seconds is for the burst-then-cap kind")
    if kind in IN_MEMORY_KINDS and any(limits.values()):
        raise LabError(f"the {kind} kind takes no caps (memory has no backing disk to cap)")
    version = cgroup_version()
    if any(limits.values()) and version == 0:
        raise LabError("no cgroup I/O controller: neither v1 blkio nor v2 io is available")
    directory = state_dir.absolute() / name  # the state file's paths mean the same from any working directory
    if os.path.lexists(directory / "state.json"):
        raise LabError(f"lab disk {name!r} exists already ({directory}); run 'fioscope lab down {name}' first")
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _check_roots_alone(state_dir, directory / "state.json")  # before anything is made: down would refuse it
    directory.mkdir(mode=0o700, exist_ok=True)
    _check_roots_alone(directory, directory / "state.json")
    disk = LabDisk(name=name, kind=kind, state_dir=str(directory), limits=limits, cgroup_version=version,
                   burst_seconds=(burst_seconds or DEFAULT_BURST_SECONDS) if kind == "burst-then-cap" else 0)
    try:
        backing_dir = directory
        if kind in IN_MEMORY_KINDS:
            backing_dir = directory / MEMORY_DIR
            backing_dir.mkdir(exist_ok=True)
            disk.created.append("tmpfs")
            disk.save()
            host.run("mount", "-t", "tmpfs", "-o", f"size={nbytes},mode=0700", f"fioscope-lab-{name}", str(backing_dir))
        disk.backing_file = str(backing_dir / "backing.img")
        disk.created.append("backing_file")
        disk.save()
        host.run("truncate", "-s", str(nbytes), disk.backing_file)
        backs_the_disk = disk.backing_file
        if kind in PRIVATE_CAP_KINDS:
            disk.created.append("lower_loop")
            disk.save()
            disk.lower_device = backs_the_disk = host.run("losetup", "--direct-io=on", "--find", "--show", disk.backing_file)
            disk.save()  # before the next step (killed before this line, down finds it by its backing file)
            disk.backing_device = (Path("/sys/block") / os.path.basename(disk.lower_device) / "dev").read_text().strip()
        elif kind not in IN_MEMORY_KINDS:
            disk.backing_device = whole_disk_of(directory)
        disk.created.append("loop")
        disk.save()
        disk.loop_device = host.run("losetup", "--direct-io=on", "--find", "--show", backs_the_disk)
        disk.save()
        host.run("mkfs.ext4", "-q", "-F", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0", disk.loop_device)
        disk.mountpoint = str(directory / "mnt")
        Path(disk.mountpoint).mkdir(exist_ok=True)
        disk.created.append("mount")
        disk.save()
        host.run("mount", disk.loop_device, disk.mountpoint)
        _make_cgroup(disk, host)
        disk.save()
    except BaseException:  # Ctrl-C too: undo what was made
        if os.path.lexists(directory / "state.json"):
            down(name, state_dir, host)
        raise
    return disk


def _make_cgroup(disk: LabDisk, host: Host) -> None:
    if disk.cgroup_version == 2:
        host.write(CGROUP_ROOT / "cgroup.subtree_control", "+io")
    path = _cgroup_path(disk.name, disk.cgroup_version)
    disk.cgroup = str(path)
    disk.created.append("cgroup")
    disk.save()
    path.mkdir(exist_ok=True)
    if disk.burst_seconds:
        _start_burst_timer(disk)
    else:
        write_limits(disk, host)


def write_limits(disk: LabDisk, host: Host | None = None) -> None:
    """Write the disk's caps into its cgroup (v2 ``io.max`` or v1 ``blkio.throttle.*``)."""
    host = host or Host()
    path, lim, dev = Path(disk.cgroup), disk.limits, disk.backing_device
    if disk.cgroup_version == 2:
        parts = [f"{key}={lim[src]}" for key, src in (("riops", "read_iops"), ("wiops", "write_iops"),
                                                       ("rbps", "read_bps"), ("wbps", "write_bps")) if lim.get(src)]
        if parts:
            host.write(path / "io.max", f"{dev} {' '.join(parts)}")
    else:
        for src, fname in (("read_iops", "read_iops_device"), ("write_iops", "write_iops_device"),
                           ("read_bps", "read_bps_device"), ("write_bps", "write_bps_device")):
            if lim.get(src):
                host.write(path / f"blkio.throttle.{fname}", f"{dev} {lim[src]}")


def remove_cgroup(cgroup: Path, host: Host | None = None) -> None:
    """Kill what is left inside ``cgroup`` (it would keep the cgroup busy), then remove it, retrying while the kernel
    still counts its exiting processes (up to 5 s)."""
    host = host or Host()
    for pid in (cgroup / "cgroup.procs").read_text().split():
        host.kill(int(pid))
    for _ in range(50):
        try:
            host.rmdir(cgroup)
            return
        except OSError:
            time.sleep(0.1)


def lift_limits(disk: LabDisk, host: Host | None = None) -> None:
    """Remove the disk's caps from its cgroup (v1: a limit of 0 removes the rule; v2: ``max``); a missing file is left alone."""
    host = host or Host()
    path, dev = Path(disk.cgroup), disk.backing_device
    writes = ({"io.max": f"{dev} riops=max wiops=max rbps=max wbps=max"} if disk.cgroup_version == 2 else
              {f"blkio.throttle.{f}": f"{dev} 0" for f in ("read_iops_device", "write_iops_device", "read_bps_device", "write_bps_device")})
    for name, line in writes.items():
        try:
            host.write(path / name, line)
        except OSError:  # no such rule or file (an uncapped disk, a removed cgroup)
            pass


def _start_burst_timer(disk: LabDisk) -> None:
    """A detached process that sleeps through the burst, then writes the caps (recorded before it starts)."""
    disk.created.append("timer")
    disk.save()
    code = (f"import time; time.sleep({disk.burst_seconds}); "
            f"from fioscope.lab import LabDisk, write_limits; from pathlib import Path; "
            f"write_limits(LabDisk.load(Path({disk.state_dir!r})))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", code, TIMER_MARK], env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    disk.timer_pid = proc.pid
    disk.save()


def _stop_timer(disk: LabDisk, host: Host) -> bool:
    """Kill the burst timer if it is still ours and alive (a recycled pid is left alone)."""
    if not disk.timer_pid:
        return False
    try:
        cmdline = Path(f"/proc/{disk.timer_pid}/cmdline").read_bytes()
    except OSError:
        return False
    if TIMER_MARK.encode() not in cmdline or repr(disk.state_dir).encode() not in cmdline:  # this disk's timer
        return False
    host.kill(disk.timer_pid)
    return True


def down(name: str, state_dir: Path = DEFAULT_STATE_DIR, host: Host | None = None) -> list[str]:
    """Undo what was made for lab disk ``name``, newest first; returns what was removed.

    Nothing the state file names is taken on trust (LabDisk.load refuses it otherwise): the cgroup is the lab's by
    name, the mounts are in the disk's own directory, and the loop devices are found by their backing file (the disk's
    own, or for a PRIVATE_CAP_KINDS disk the loop device on it), so one attached before its name could be saved goes too.
    """
    host = host or Host()
    require_root()
    check_name(name)
    directory = state_dir / name
    if not os.path.lexists(directory / "state.json"):
        raise LabError(f"no lab disk {name!r} under {state_dir}")
    disk = LabDisk.load(directory)
    real = os.path.realpath(directory)
    removed: list[str] = []
    unmounted: list[str] = []
    if "timer" in disk.created and _stop_timer(disk, host):
        removed.append(f"burst timer {disk.timer_pid}")
    if disk.cgroup and os.path.isdir(disk.cgroup):
        # the caps lifted first: a stalled disk's queued requests would hold its processes (and the mount) for minutes
        lift_limits(disk, host)
        remove_cgroup(Path(disk.cgroup), host)
        removed.append(disk.cgroup)
    mountpoint = os.path.join(real, "mnt")
    if os.path.ismount(mountpoint):
        host.unmount(mountpoint)
        unmounted.append(mountpoint)
        removed.append(mountpoint)
    lower = _loops_backed_by(_backing_file(disk.kind, real))
    upper = [dev for low in lower for dev in _loops_backed_by(low)] if disk.kind in PRIVATE_CAP_KINDS else []
    for device in upper + lower:
        host.run("losetup", "-d", device)
        removed.append(device)
    memory = os.path.join(real, MEMORY_DIR)
    if os.path.ismount(memory):
        host.unmount(memory)
        unmounted.append(memory)
        removed.append(memory)
    left = [m for m in _mounts_under(real) if m not in unmounted]
    if left:  # rmtree would go into it and delete what is mounted there
        raise LabError(f"{directory}: {left[0]} is still mounted inside it; not removing it")
    host.rmtree(directory)
    return removed + [str(directory)]


def _loops_backed_by(file: str) -> list[str]:
    """The loop devices attached to ``file`` (a real path, or a loop device), as the kernel names their backing files;
    a file deleted under its loop device is named with " (deleted)" after it."""
    found = []
    for entry in sorted(Path("/sys/block").glob("loop*/loop/backing_file")):
        try:
            backing = entry.read_text().rstrip("\n")
        except OSError:  # detached meanwhile
            continue
        if backing in (file, f"{file} (deleted)"):
            found.append(f"/dev/{entry.parent.parent.name}")
    return found


def _mounts_under(directory: str) -> list[str]:
    """Mount points at or inside ``directory`` (a real path), from /proc/self/mountinfo."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])  # \040 is a space
        if point == directory or point.startswith(directory + "/"):
            points.append(point)
    return points


def down_all(state_dir: Path = DEFAULT_STATE_DIR, host: Host | None = None) -> tuple[list[str], list[str]]:
    """Every lab disk under ``state_dir`` taken down: (what was removed, one line for each disk that could not be)."""
    removed: list[str] = []
    failed: list[str] = []
    if state_dir.exists():
        for directory in sorted(state_dir.iterdir()):
            if os.path.lexists(directory / "state.json"):
                try:
                    removed += down(directory.name, state_dir, host)
                except LabError as exc:
                    failed.append(str(exc))
                except OSError as exc:
                    failed.append(f"{directory}: {exc}")
    return removed, failed


def status(state_dir: Path = DEFAULT_STATE_DIR) -> list[LabDisk]:
    if not state_dir.exists():
        return []
    return [LabDisk.load(d) for d in sorted(state_dir.iterdir()) if os.path.lexists(d / "state.json")]


def join_cgroup(cgroup: str, pid: int | None = None) -> None:
    """Move a process (default: this one) into a lab cgroup."""
    (Path(cgroup) / "cgroup.procs").write_text(str(pid or os.getpid()))


def exec_in(name: str, argv: list[str], state_dir: Path = DEFAULT_STATE_DIR) -> None:
    """Replace this process with ``argv`` inside the lab disk's cgroup."""
    check_name(name)
    disk = LabDisk.load(state_dir / name)
    if disk.cgroup:
        join_cgroup(disk.cgroup)
    os.execvp(argv[0], argv)
