"""Lab profiles as `fioscope lab up` writes them into the disk's cgroup (root; a 64 MiB disk, a second or two); a
stalled disk beside another under load (e2e: it drops the page cache)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from fioscope_testkit.cli import fioscope
from helpers.lab import blocked_tasks, completed_requests, fio_in_cgroup, fio_job, lab_disks, lab_lock, lay_out, stop_fio


def test_stalled_profile_caps_both_directions_at_two_iops(tmp_path):
    """`lab up stalled`: 2 IOPS each way in the disk's cgroup (what makes a queue of 32 a stall), on a loop device of its
    own between the disk's loop device and its backing file, never on the host's disk; `down` removes both loops."""
    if os.geteuid() != 0:
        pytest.skip("needs root (loop devices, cgroups)")
    from fioscope import lab

    state = tmp_path / "lab"
    with lab_lock():
        made = fioscope("lab", "--state-dir", str(state), "up", "stalled", "--name", "stall-profile", "--size", "64M")
        assert made.returncode == 0, made.stderr
        disk = json.loads(made.stdout)
        cgroup, dev, upper = Path(disk["cgroup"]), disk["backing_device"], Path(disk["device"]).name
        try:
            state_file = json.loads((state / "stall-profile" / "state.json").read_text())
            lower = Path(state_file["lower_device"]).name
            # the chain: the mounted loop device reads and writes the lower one, whose caps hold its requests in flight
            assert Path(f"/sys/block/{upper}/loop/backing_file").read_text().strip() == f"/dev/{lower}"
            assert Path(f"/sys/block/{lower}/loop/backing_file").read_text().strip() == state_file["backing_file"]
            assert Path(f"/sys/block/{lower}/dev").read_text().strip() == dev != lab.whole_disk_of(state)
            if lab.cgroup_version() == 2:
                assert f"{dev} rbps=max wbps=max riops=2 wiops=2" in (cgroup / "io.max").read_text()
            else:
                for direction in ("read", "write"):
                    assert (cgroup / f"blkio.throttle.{direction}_iops_device").read_text().split() == [dev, "2"], direction
                    assert (cgroup / f"blkio.throttle.{direction}_bps_device").read_text().strip() == ""
        finally:
            down = fioscope("lab", "--state-dir", str(state), "down", "stall-profile")
        assert down.returncode == 0, down.stderr
        assert not cgroup.exists() and not os.path.ismount(disk["mountpoint"])
        for loop in (upper, lower):
            assert not Path(f"/sys/block/{loop}/loop/backing_file").exists(), f"{loop} still attached"


def test_ram_disk_is_backed_by_its_own_tmpfs_and_refuses_caps(tmp_path):
    """`lab up ram`: the loop device's backing file on a tmpfs mounted inside the disk's directory (its fsyncs never
    reach the host's disk), direct I/O on, no caps; a cap flag is refused in one line; `down` unmounts the tmpfs."""
    if os.geteuid() != 0:
        pytest.skip("needs root (loop devices, tmpfs, cgroups)")
    state = tmp_path / "lab"
    with lab_lock():
        refused = fioscope("lab", "--state-dir", str(state), "up", "ram", "--name", "ram-capped", "--size", "64M", "--write-iops", "60")
        assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1 and "no caps" in refused.stderr, refused.stderr
        assert not (state / "ram-capped").exists()
        made = fioscope("lab", "--state-dir", str(state), "up", "ram", "--name", "ram-profile", "--size", "64M")
        assert made.returncode == 0, made.stderr
        disk = json.loads(made.stdout)
        try:
            memory = state / "ram-profile" / "ram"
            mounts = {line.split()[1]: line.split()[2] for line in Path("/proc/mounts").read_text().splitlines()}
            assert mounts.get(str(memory)) == "tmpfs"
            loop = Path("/sys/block") / os.path.basename(disk["device"]) / "loop"
            assert (loop / "backing_file").read_text().strip() == str(memory / "backing.img")
            assert (loop / "dio").read_text().strip() == "1"
            assert disk["backing_device"] == "" and not any(disk["limits"].values())
            assert mounts.get(disk["mountpoint"]) == "ext4"
        finally:
            down = fioscope("lab", "--state-dir", str(state), "down", "ram-profile")
        assert down.returncode == 0, down.stderr
        assert not os.path.ismount(memory) and not memory.exists()


@pytest.mark.e2e
def test_a_stalled_disk_holds_up_no_other_lab_disk(tmp_path):
    """A load on another lab disk reaches its device while a stalled disk's load starts beside it, on a cold page cache.

    With the stalled disk's caps on the host's disk (before), the pages its fio read from the host's disk came at 2 IOPS,
    and every other fio that needed one of those pages waited for it in read(2) (folio_wait_bit_common) until the caps
    were lifted: measured here, six loads issued nothing for 60 s; in CI eight scenario tests failed so, four minutes
    each. Caps on a loop device of the stalled disk's own: the other load runs within seconds."""
    if os.geteuid() != 0:
        pytest.skip("needs root (loop devices, cgroups, drop_caches)")
    from fioscope import lab

    with lab_lock(), lab_disks(tmp_path / "lab") as up:
        stalled, other = up("stalled", "hold-stalled"), up("bandwidth-capped", "hold-other")
        jobs = [fio_job(tmp_path / f"{disk.name}.fio", disk.mountpoint,
                        ["[load]\nrw=randread\nbs=4k\nsize=16m\niodepth=32\nruntime=60\nfilename=load.dat"])
                for disk in (stalled, other)]
        for job in jobs:
            lay_out(job)
        Path("/proc/sys/vm/drop_caches").write_text("3")  # every page cold, as on a host whose cache has turned over
        procs = [fio_in_cgroup(stalled.cgroup, jobs[0])]
        try:
            time.sleep(1)  # the stalled disk's fio first: the pages it reads are the ones the other fio waits for
            before, start = completed_requests(other.device_name), time.time()
            procs.append(fio_in_cgroup(other.cgroup, jobs[1]))
            while completed_requests(other.device_name) - before < 1000 and time.time() - start < 20:
                time.sleep(0.5)
            done = completed_requests(other.device_name) - before
            assert done >= 1000, (f"{done} reads on {other.device_name} in 20 s beside the stalled disk:\n"
                                  f"{blocked_tasks(other.cgroup)}")
        finally:
            lab.lift_limits(stalled)  # its queued requests drain before fio is stopped
            for proc in procs:
                stop_fio(proc)
