"""The root-only lab for the end-to-end tests: lab disks, the native stack over them and an Alertmanager webhook.

Everything is started from the repository's own config files; intervals, windows and `for:` durations are
shortened through alerts/config.yaml overrides (`--set`), never by copying a rule file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from fioscope_mixin import columns
from fioscope_testkit.binaries import require
from fioscope_testkit.cli import run
from fioscope_testkit.native_stack import NativeStack
from fioscope_testkit.net import free_port
from fioscope_testkit.prometheus import PromClient

from helpers.episodes import MARK as EPISODE_MARK
from helpers.processes import Exporter, NodeExporter, only_devices
from helpers.results import config_with_targets

# a lab stack lives minutes: the device's normal from 20 s averages, recomputed every 20 s (not every 3m: the first
# median may come too late for a test)
LEARN_FAST = ["thresholds.throttle.baseline_interval=20s", "thresholds.throttle.baseline_median_interval=20s"]
# the e2e suite's shortened windows and `for:` durations
E2E_SETTINGS = [
    "thresholds.throttle.fio_window=20s", "thresholds.throttle.window=60s",
    "durations.throttled_fio=10s", "durations.throttled=20s",
    "durations.fsync=0s", "durations.etcd_fsync=10s", "thresholds.etcd_window=30s",
    "stack.alertmanager_group_interval=5s", *LEARN_FAST,
]
THROTTLE = ("FioscopeDiskThrottledUnderFioLoad", "FioscopeDiskThrottled")
LAB_LOCK = Path("/tmp/fioscope-lab.lock")
# the scrape interval of lab tests that need a cap seen as a ceiling (lab_stack)
CAP_SCRAPE_INTERVAL = "5s"


def require_root_lab():
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the lab tests need root in CI")
        pytest.skip("needs root (loop devices, cgroups)")
    for tool in ("fio", "losetup", "mkfs.ext4", "prometheus", "iostat"):
        require(tool)


# a loop disk a test beside the e2e suite makes and takes down itself (private_disk, not a lab disk)
PRIVATE_DISK_MARK = "fioscope-private-disk"


def _taken_down_elsewhere(line: str) -> bool:
    return EPISODE_MARK in line or PRIVATE_DISK_MARK in line


def lab_state() -> tuple[list[str], list[Path], list[str]]:
    """Loop devices, lab cgroups and lab mounts on this machine: compared before and after a suite (or the scenario lab),
    so a run killed earlier (its disks still there) does not fail this one. A background episode's are its own
    (helpers.episodes: it takes them down itself), as is a slow test's private disk, left out."""
    mounts = [line for line in Path("/proc/mounts").read_text().splitlines()
              if ("fioscope-lab" in line or "/lab/" in line) and not _taken_down_elsewhere(line)]
    loops = [line for line in subprocess.run(["losetup", "-a"], check=False, capture_output=True, text=True).stdout.splitlines()
             if not _taken_down_elsewhere(line)]
    cgroups = sorted(p for p in Path("/sys/fs/cgroup").rglob("fioscope-lab-*") if p.is_dir() and not _taken_down_elsewhere(p.name))
    return sorted(loops), cgroups, mounts


# what node_exporter's default flags leave out of /sys/block besides partitions (compose.yaml), and loop devices
_NOT_HOST_DISKS = re.compile(r"(loop|ram|zram|fd|sr|nbd)\d+")


def host_disks() -> list[str]:
    """This VM's own whole disks (vda...): not the lab's loop devices."""
    return [name for name in sorted(os.listdir("/sys/block")) if not _NOT_HOST_DISKS.fullmatch(name)]


class HostStack(NativeStack):
    """The native stack of one test's "machine": its node_exporter shows this machine's own whole disks and, of the lab
    disks, only ``disks`` (and the loop devices below them). A lab disk of a test running at once is another machine's
    volume: the machine's limit sums every busy volume a node_exporter shows, and the pages stay silent for it."""

    def __init__(self, *args, disks=(), **kwargs):
        super().__init__(*args, **kwargs)
        lab = [name for d in disks for name in (d.device_name, os.path.basename(d.lower_device)) if name]
        self.devices = sorted({*lab, *host_disks()})

    def commands(self) -> dict[str, list[str]]:
        commands = super().commands()
        if "node_exporter" in commands:
            flags = [flag for flag in commands["node_exporter"] if not flag.startswith("--collector.diskstats.device-")]
            commands["node_exporter"] = [*flags, *only_devices(f"^({'|'.join(self.devices)})$")]
        return commands


@contextlib.contextmanager
def lab_lock():
    """The machine-wide lab lock, unless this process already holds it (run under `flock /tmp/fioscope-lab.lock`)."""
    fds = Path("/proc/self/fd")
    if any(os.path.realpath(fd) == str(LAB_LOCK) for fd in fds.iterdir() if fd.is_symlink()):
        yield
        return
    with LAB_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


class Webhook:
    """Alertmanager's webhook receiver: records (receive time, alert) for every firing alert."""

    def __init__(self):
        self.received: list[tuple[float, dict]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                now = time.time()
                for alert in body.get("alerts", []):
                    if alert.get("status") == "firing":
                        owner.received.append((now, alert))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def first(self, alertname: str, **labels) -> float | None:
        for when, alert in self.received:
            if alert["labels"].get("alertname") == alertname and all(alert["labels"].get(k) == v for k, v in labels.items()):
                return when
        return None

    def names(self) -> set[str]:
        return {a["labels"]["alertname"] for _, a in self.received}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def e2e_overrides(webhook_url: str = "", rate_window: str = "20s", extra: list[str] | None = None,
                  scrape_interval: str = "1s") -> list[str]:
    """The native stack on free ports, scraping and evaluating every ``scrape_interval``."""
    ports = {k: free_port() for k in ("prometheus", "alertmanager", "node_exporter", "fioscope", "etcd")}
    sets = [f"stack.ports.{k}={v}" for k, v in ports.items()] + [
        f"stack.scrape_interval={scrape_interval}", f"stack.evaluation_interval={scrape_interval}", f"stack.rate_window={rate_window}",
        # the etcd a lab test may start at stack.url("etcd") is scraped (test_e2e's real etcd)
        f'stack.etcd_endpoints=["127.0.0.1:{ports["etcd"]}"]',
    ]
    if webhook_url:
        sets.append(f"stack.alertmanager_webhook={webhook_url}")
    return sets + (extra or [])


@contextlib.contextmanager
def lab_stack(tmp_path: Path, disks: dict[str, dict], schedule: list[dict] | None = None, scrape_interval: str = "1s"):
    """Lab disks {name: {kind, limits...}}, and the native stack with a fioscope target on each.
    Yields (made disks, stack, webhook, PromClient).

    A test that needs a lab disk's cap seen as a ceiling scrapes at 5 s (``CAP_SCRAPE_INTERVAL``): cgroup v1
    blk-throttle releases its IOPS in 100 ms slices, so at 1 s scrapes a 700/s cap reads 630, 700 or 770 per
    scrape (+/-10 %), which no 5 % flatness test calls flat; at 5 s the same slices are +/-2 %."""
    with lab_disks(tmp_path / "lab") as up, webhook_receiver() as webhook:
        made = {name: up(spec["kind"], name) for name, spec in disks.items()}
        targets = [{"name": name, "directory": d.mountpoint, "cgroup": d.cgroup, "sla_latency": "30ms",
                    **({"limits": disks[name]["limits"]} if "limits" in disks[name] else {})} for name, d in made.items()]
        config = with_schedule(config_with_targets(tmp_path / "fioscope.yaml", targets), schedule or [])
        overrides = e2e_overrides(webhook.url, extra=E2E_SETTINGS, scrape_interval=scrape_interval)
        with started(HostStack(tmp_path / "stack", overrides, fioscope_config=config, disks=made.values())) as stack:
            yield made, stack, webhook, PromClient(stack.url("prometheus"))


def with_schedule(config: Path, schedule: list[dict]) -> Path:
    """The fioscope config file ``config`` with ``schedule`` (its exporter runs those jobs from its start), if any."""
    if schedule:
        config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "schedule": schedule}))
    return config


@contextlib.contextmanager
def lab_disks(state: Path):
    """Yields ``up(kind, name, **limits)``, which makes a 2G lab disk; every disk made is taken down on exit."""
    from fioscope import lab

    made: list[str] = []

    def up(kind: str, name: str, **limits):
        disk = lab.up(kind, name=name, size="2G", state_dir=state, **limits)
        made.append(name)
        return disk

    try:
        yield up
    finally:
        for name in made:
            lab.down(name, state)


class PrivateDisk:
    """A loop disk of one test's own (ext4 over a sparse file in ``directory``, mounted at ``directory``/mnt): no lab
    state, cgroup or caps, so nothing else on the machine shares its page cache or its device."""

    def __init__(self, directory: Path, size_mib: int):
        directory.mkdir(parents=True, exist_ok=True)
        self.backing = directory / f"{PRIVATE_DISK_MARK}.img"
        self.mountpoint = directory / "mnt"
        with self.backing.open("wb") as f:
            f.truncate(size_mib << 20)
        self.device = _checked("losetup", "--direct-io=on", "--find", "--show", self.backing)
        try:  # a step failing leaves no loop device behind
            self.majmin = (Path("/sys/block") / Path(self.device).name / "dev").read_text().strip()
            _checked("mkfs.ext4", "-q", "-F", self.device)
            self.mountpoint.mkdir()
            _checked("mount", self.device, self.mountpoint)
        except BaseException:
            self.close()
            raise

    def cold(self) -> None:
        """Every page of its files out of the page cache: unmounted and mounted again."""
        _checked("umount", self.mountpoint)
        _checked("mount", self.device, self.mountpoint)

    def close(self) -> None:
        run(["umount", self.mountpoint])  # not mounted: nothing to do
        run(["losetup", "-d", self.device])


@contextlib.contextmanager
def private_disk(directory: Path, size_mib: int):
    disk = None
    try:
        disk = PrivateDisk(directory, size_mib)
        yield disk
    finally:
        if disk is not None:
            disk.close()


@contextlib.contextmanager
def ram_backend(directory: Path, size_mib: int):
    """A backend in RAM for lab disks to share: ext4 over a loop device over a file on a tmpfs, out of reach of the rest
    of the machine's I/O. Yields the directory to make the lab disks in (their backing device is that loop device's).

    On the VM's own disk, the lab scenarios' loads and the slow suite beside a test set its latency: a paced lab disk
    over it read as busy all the time (util 0.998 in CI) and its normal latency, which a cause is judged against, was
    never learned."""
    ram = directory / "ram"
    ram.mkdir(parents=True)
    # the tmpfs holds what the disks write: their filesystems' metadata and their files (it is sized, not grown)
    _checked("mount", "-t", "tmpfs", "-o", f"size={size_mib + 64}m,mode=0700", "fioscope-test-backend", ram)
    try:
        with private_disk(ram, size_mib) as disk:
            yield disk.mountpoint
    finally:
        run(["umount", ram])


def _checked(*argv) -> str:
    proc = run(argv)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))}: {proc.stderr.strip()}"
    return proc.stdout.strip()


def empty_and_remove(cgroup: Path) -> None:
    """Its processes killed (and waited for: a cgroup with a process in it is not removed), then the cgroup."""
    deadline = time.monotonic() + 30
    while (pids := (cgroup / "cgroup.procs").read_text().split()) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.2)
    cgroup.rmdir()


# a cgroup's I/O limits by name: cgroup v1's blkio.throttle file, cgroup v2's io.max key
IO_LIMITS = {"read_iops": ("blkio.throttle.read_iops_device", "riops"), "write_bps": ("blkio.throttle.write_bps_device", "wbps")}


@contextlib.contextmanager
def capped_cgroup(majmin: str, limit: str, value: int):
    """A cgroup of one test's own whose ``limit`` (IO_LIMITS: read_iops, write_bps) on the disk ``majmin`` is
    ``value``; uncapped, its processes killed and the cgroup removed afterwards. Skips without root or a cgroup I/O
    controller."""
    if os.geteuid() != 0:
        pytest.skip("a cgroup capping a disk's I/O needs root")
    from fioscope.lab import CGROUP_ROOT, cgroup_version

    version = cgroup_version()
    if not version:
        pytest.skip("no cgroup I/O controller")
    v1_file, v2_key = IO_LIMITS[limit]
    cgroup = (CGROUP_ROOT / "blkio" if version == 1 else CGROUP_ROOT) / f"fioscope-test-{limit}-{os.getpid()}-{time.monotonic_ns()}"
    cap, capped, uncapped = ((cgroup / v1_file, f"{majmin} {value}", f"{majmin} 0") if version == 1
                             else (cgroup / "io.max", f"{majmin} {v2_key}={value}", f"{majmin} {v2_key}=max"))
    cgroup.mkdir()
    try:
        cap.write_text(capped)
        yield cgroup
    finally:  # uncapped first: a killed process waits for its throttled I/O before it leaves the cgroup
        cap.write_text(uncapped)
        empty_and_remove(cgroup)


@contextlib.contextmanager
def webhook_receiver():
    webhook = Webhook()
    try:
        yield webhook
    finally:
        webhook.close()


@contextlib.contextmanager
def started(stack: NativeStack):
    """The native stack started, and stopped on exit."""
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def fio_job(path: Path, directory: str, sections: list[str], global_opts: str = "") -> Path:
    """A fio job file: time-based direct I/O in ``directory``, the given job sections."""
    path.write_text(f"[global]\ndirectory={directory}\ndirect=1\nioengine=libaio\ntime_based=1\n{global_opts}\n" + "\n".join(sections))
    return path


def lay_out(job: Path) -> None:
    """Create the job's files before the load, outside any cgroup (a capped layout would eat the load's first minute)."""
    subprocess.run(["fio", "--create_only=1", "--output=/dev/null", str(job)], check=True, stdout=subprocess.DEVNULL)


def fio_in_cgroup(cgroup: str, job: Path) -> subprocess.Popen:
    """fio running ``job`` inside ``cgroup`` (an application's load, capped by the lab disk), in a session of its own;
    stop_fio ends its job processes too. Niced: two uncapped 4 KiB loads take both cores of this VM, and the stack that
    watches them (scrapes, rule evaluations) must not be what they starve: the disks see the same I/O."""
    def join_cgroup_niced() -> None:
        Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
        os.nice(10)

    return subprocess.Popen(["fio", "--output=/dev/null", str(job)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=join_cgroup_niced)


def completed_requests(device_name: str) -> float:
    """Reads and writes a block device has completed since boot (/proc/diskstats, as the capture reads it)."""
    counters = columns.parse_diskstats(Path("/proc/diskstats").read_text(), {device_name}, ("reads", "writes"))[device_name]
    return counters["reads"] + counters["writes"]


def blocked_tasks(cgroup: str) -> str:
    """Where the processes of ``cgroup`` and every task in uninterruptible sleep are waiting in the kernel (state,
    wchan, kernel stack): what a load that issues no I/O is stuck on. CI once had every read load beside a stalled disk
    issue nothing for four minutes, and nothing said why."""
    pids = set(Path(cgroup, "cgroup.procs").read_text().split()) if Path(cgroup).exists() else set()
    lines = []
    for stat in Path("/proc").glob("[0-9]*/task/[0-9]*/stat"):
        try:
            comm_state = stat.read_text().rsplit(")", 1)
            state, tid, pid = comm_state[1].split()[0], stat.parent.name, stat.parent.parent.parent.name
            if pid not in pids and state != "D":
                continue
            task = stat.parent
            lines.append(f"{comm_state[0].split('(', 1)[1]} pid {pid} tid {tid} state {state} wchan "
                         f"{(task / 'wchan').read_text()}\n" + "".join(f"    {frame}" for frame in (task / "stack").read_text().splitlines(True)))
        except OSError:  # gone meanwhile
            continue
    return "\n".join(lines) or "no task of the cgroup, none in uninterruptible sleep"


def stop_fio(proc: subprocess.Popen) -> None:
    """SIGKILL fio and every job process it started. Each job process starts a session of its own, so killing fio's
    process group left the jobs running into the next test (the light loads of the envelope e2e ran on through every
    test). fio is stopped first: a job started between listing and killing would survive."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGSTOP)
    for pid in [*_descendants(proc.pid), proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _descendants(pid: int) -> list[int]:
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:  # gone already
        return []
    return [d for child in children for d in (child, *_descendants(child))]


def fleet_host(tmp_path: Path, host: str, kind: str, state: Path, load: dict[str, str]) -> tuple:
    """One test host of a fleet on this machine: a 1G lab disk of ``kind``, a real exporter running cloud-sla-70-30 with
    ``load`` on it from 20 s on, and a node_exporter that shows only that disk. Returns (disk, exporter, node_exporter);
    the caller stops both and takes the disk down (fioscope.lab.down(host, state))."""
    from fioscope import lab

    disk = lab.up(kind, name=host, size="1G", state_dir=state)
    started: list = []
    try:
        (tmp_path / host).mkdir()
        config = config_with_targets(tmp_path / host / "fioscope.yaml",
                                     [{"name": "lab", "directory": disk.mountpoint, "cgroup": disk.cgroup}])
        config.write_text(config.read_text() + "schedule:\n- {job: cloud-sla-70-30, target: lab, start_delay: 20s, env: "
                          + "{" + ", ".join(f"{k}: '{v}'" for k, v in load.items()) + "}}\n")
        started.append(Exporter(tmp_path / host, config=config, results=tmp_path / host / "results"))
        started.append(NodeExporter(tmp_path / host / "node.log", device_include=f"^{disk.device_name}$"))
    except BaseException:  # nothing of a half-made host is left behind
        for proc in started:
            proc.stop()
        lab.down(host, state)
        raise
    return disk, *started
