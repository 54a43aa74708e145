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

Every step is recorded in ``<state-dir>/<name>/state.json`` before it is taken, so
``down`` removes exactly what was created (the burst timer too), also after a crash, and
never touches a device or process it did not create.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

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
        path = Path(self.state_dir) / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(path)

    @classmethod
    def load(cls, state_dir: Path) -> LabDisk:
        return cls(**json.loads((state_dir / "state.json").read_text()))


def _run(*cmd: str) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise LabError(f"{cmd[0]} not found (install util-linux / e2fsprogs)") from None
    if proc.returncode != 0:
        raise LabError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


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
       read_bps: int | None = None, write_bps: int | None = None, burst_seconds: int | None = None) -> LabDisk:
    require_root()
    if kind not in KINDS:
        raise LabError(f"unknown lab disk kind {kind!r} (kinds: {', '.join(KINDS)})")
    name = name or kind
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
    directory = state_dir / name
    if (directory / "state.json").exists():
        raise LabError(f"lab disk {name!r} exists already ({directory}); run 'fioscope lab down {name}' first")
    directory.mkdir(parents=True, exist_ok=True)
    disk = LabDisk(name=name, kind=kind, state_dir=str(directory), limits=limits, cgroup_version=version,
                   burst_seconds=(burst_seconds or DEFAULT_BURST_SECONDS) if kind == "burst-then-cap" else 0)
    try:
        backing_dir = directory
        if kind in IN_MEMORY_KINDS:
            backing_dir = directory / MEMORY_DIR
            backing_dir.mkdir(exist_ok=True)
            disk.created.append("tmpfs")
            disk.save()
            _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", f"fioscope-lab-{name}", str(backing_dir))
        disk.backing_file = str(backing_dir / "backing.img")
        disk.created.append("backing_file")
        disk.save()
        _run("truncate", "-s", size, disk.backing_file)
        backs_the_disk = disk.backing_file
        if kind in PRIVATE_CAP_KINDS:
            disk.created.append("lower_loop")
            disk.save()
            disk.lower_device = backs_the_disk = _run("losetup", "--direct-io=on", "--find", "--show", disk.backing_file)
            disk.backing_device = (Path("/sys/block") / os.path.basename(disk.lower_device) / "dev").read_text().strip()
        elif kind not in IN_MEMORY_KINDS:
            disk.backing_device = whole_disk_of(directory)
        disk.loop_device = _run("losetup", "--direct-io=on", "--find", "--show", backs_the_disk)
        disk.created.append("loop")
        disk.save()
        _run("mkfs.ext4", "-q", "-F", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0", disk.loop_device)
        disk.mountpoint = str(directory / "mnt")
        Path(disk.mountpoint).mkdir(exist_ok=True)
        disk.created.append("mount")
        disk.save()
        _run("mount", disk.loop_device, disk.mountpoint)
        _make_cgroup(disk)
        disk.save()
    except Exception:
        down(name, state_dir)
        raise
    return disk


def _make_cgroup(disk: LabDisk) -> None:
    if disk.cgroup_version == 2:
        parent = CGROUP_ROOT
        (parent / "cgroup.subtree_control").write_text("+io")
        path = parent / f"fioscope-lab-{disk.name}"
    else:
        path = CGROUP_ROOT / "blkio" / f"fioscope-lab-{disk.name}"
    disk.cgroup = str(path)
    disk.created.append("cgroup")
    disk.save()
    path.mkdir(exist_ok=True)
    if disk.burst_seconds:
        _start_burst_timer(disk)
    else:
        write_limits(disk)


def write_limits(disk: LabDisk) -> None:
    """Write the disk's caps into its cgroup (v2 ``io.max`` or v1 ``blkio.throttle.*``)."""
    path, lim, dev = Path(disk.cgroup), disk.limits, disk.backing_device
    if disk.cgroup_version == 2:
        parts = [f"{key}={lim[src]}" for key, src in (("riops", "read_iops"), ("wiops", "write_iops"),
                                                       ("rbps", "read_bps"), ("wbps", "write_bps")) if lim[src]]
        if parts:
            (path / "io.max").write_text(f"{dev} {' '.join(parts)}")
    else:
        for src, fname in (("read_iops", "read_iops_device"), ("write_iops", "write_iops_device"),
                           ("read_bps", "read_bps_device"), ("write_bps", "write_bps_device")):
            if lim[src]:
                (path / f"blkio.throttle.{fname}").write_text(f"{dev} {lim[src]}")


def remove_cgroup(cgroup: Path) -> None:
    """Kill what is left inside ``cgroup`` (it would keep the cgroup busy), then remove it, retrying while the kernel
    still counts its exiting processes (up to 5 s)."""
    for pid in (cgroup / "cgroup.procs").read_text().split():
        try:
            os.kill(int(pid), 9)
        except ProcessLookupError:
            pass
    for _ in range(50):
        try:
            cgroup.rmdir()
            return
        except OSError:
            time.sleep(0.1)


def lift_limits(disk: LabDisk) -> None:
    """Remove the disk's caps from its cgroup (v1: a limit of 0 removes the rule; v2: ``max``); a missing file is left alone."""
    path, dev = Path(disk.cgroup), disk.backing_device
    writes = ({"io.max": f"{dev} riops=max wiops=max rbps=max wbps=max"} if disk.cgroup_version == 2 else
              {f"blkio.throttle.{f}": f"{dev} 0" for f in ("read_iops_device", "write_iops_device", "read_bps_device", "write_bps_device")})
    for name, line in writes.items():
        try:
            (path / name).write_text(line)
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


def _stop_timer(disk: LabDisk) -> bool:
    """Kill the burst timer if it is still ours and alive (a recycled pid is left alone)."""
    if not disk.timer_pid:
        return False
    try:
        cmdline = Path(f"/proc/{disk.timer_pid}/cmdline").read_bytes()
    except OSError:
        return False
    if TIMER_MARK.encode() not in cmdline:
        return False
    try:
        os.kill(disk.timer_pid, 9)
    except ProcessLookupError:
        return False
    return True


def down(name: str, state_dir: Path = DEFAULT_STATE_DIR) -> list[str]:
    """Undo what the state file records, newest first; returns what was removed."""
    require_root()
    directory = state_dir / name
    if not (directory / "state.json").exists():
        raise LabError(f"no lab disk {name!r} under {state_dir}")
    disk = LabDisk.load(directory)
    removed = []
    if "timer" in disk.created and _stop_timer(disk):
        removed.append(f"burst timer {disk.timer_pid}")
    if "cgroup" in disk.created and disk.cgroup and Path(disk.cgroup).exists():
        cg = Path(disk.cgroup)
        # the caps lifted first: a stalled disk's queued requests would hold its processes (and the mount) for minutes
        lift_limits(disk)
        remove_cgroup(cg)
        removed.append(disk.cgroup)
    if "mount" in disk.created and disk.mountpoint and os.path.ismount(disk.mountpoint):
        _unmount(disk.mountpoint)
        removed.append(disk.mountpoint)
    if "loop" in disk.created and disk.loop_device and _loop_backs(disk.loop_device, disk.lower_device or disk.backing_file):
        _run("losetup", "-d", disk.loop_device)
        removed.append(disk.loop_device)
    if "lower_loop" in disk.created and disk.lower_device and _loop_backs(disk.lower_device, disk.backing_file):
        _run("losetup", "-d", disk.lower_device)
        removed.append(disk.lower_device)
    memory = directory / MEMORY_DIR
    if "tmpfs" in disk.created and os.path.ismount(memory):
        _unmount(str(memory))
        removed.append(str(memory))
    shutil.rmtree(directory)
    removed.append(str(directory))
    return removed


def _unmount(mountpoint: str) -> None:
    """Unmount, waiting for exiting processes to let go; lazily as a last resort (the loop then autoclears)."""
    for _ in range(50):
        if subprocess.run(["umount", mountpoint], capture_output=True).returncode == 0:
            return
        time.sleep(0.2)
    _run("umount", "--lazy", mountpoint)


def _loop_backs(loop_device: str, backing_file: str) -> bool:
    """Is ``loop_device`` still attached to our backing file? (never detach someone else's)"""
    path = Path("/sys/block") / os.path.basename(loop_device) / "loop" / "backing_file"
    try:
        return os.path.realpath(path.read_text().strip()) == os.path.realpath(backing_file)
    except OSError:
        return False


def down_all(state_dir: Path = DEFAULT_STATE_DIR) -> list[str]:
    removed = []
    if state_dir.exists():
        for directory in sorted(state_dir.iterdir()):
            if (directory / "state.json").exists():
                removed += down(directory.name, state_dir)
    return removed


def status(state_dir: Path = DEFAULT_STATE_DIR) -> list[LabDisk]:
    if not state_dir.exists():
        return []
    return [LabDisk.load(d) for d in sorted(state_dir.iterdir()) if (d / "state.json").exists()]


def join_cgroup(cgroup: str, pid: int | None = None) -> None:
    """Move a process (default: this one) into a lab cgroup."""
    (Path(cgroup) / "cgroup.procs").write_text(str(pid or os.getpid()))


def exec_in(name: str, argv: list[str], state_dir: Path = DEFAULT_STATE_DIR) -> None:
    """Replace this process with ``argv`` inside the lab disk's cgroup."""
    disk = LabDisk.load(state_dir / name)
    if disk.cgroup:
        join_cgroup(disk.cgroup)
    os.execvp(argv[0], argv)
