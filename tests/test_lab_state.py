"""`fioscope lab down` on state files it must not believe, and `lab up` leaving nothing behind when it fails (root).

The hostile state files are taken down as a dry run: `lab.DryRun` records every command, write, kill and removal the
lab would make while its reads still see this machine (its mounts, cgroups and loop devices), so a state file naming
`/`, another cgroup or another owner's loop device shows what `down` would do to them without doing it. The tests with
loop devices take the machine-wide lab lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fioscope_testkit.cli import fioscope, run
from fioscope_testkit.paths import checkout_env
from helpers.lab import lab_lock

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the lab is root only)")


def plant(state: Path, name: str, **fields) -> Path:
    """A lab disk's directory under ``state`` whose state file (root's, 0600, unless a test changes it) says ``fields``."""
    directory = state / name
    directory.mkdir(parents=True)
    fields = {"name": name, "kind": "healthy", "state_dir": str(directory), "created": ["backing_file"],
              "backing_file": str(directory / "backing.img"), **fields}
    path = directory / "state.json"
    path.write_text(json.dumps(fields))
    path.chmod(0o600)
    return path


def refused(state: Path, name: str):
    """``down`` as a dry run: (the LabError's message or None, what it would have done)."""
    from fioscope import lab

    host = lab.DryRun()
    try:
        lab.down(name, state, host)
    except lab.LabError as exc:
        return str(exc), host.actions
    return None, host.actions


def assert_refused_untouched(state: Path, name: str) -> None:
    message, actions = refused(state, name)
    assert actions == [], f"down would have done: {actions}"
    assert message and len(message.splitlines()) == 1 and str(state / name / "state.json") in message, message
    assert (state / name / "state.json").exists()


def depth_to_root(path: Path) -> str:
    return "/".join([".."] * len(path.resolve().parts[1:]))


@pytest.mark.parametrize("where", ["/", "/proc", "dotdot", "symlink"])
def test_down_refuses_a_mountpoint_that_is_not_the_disks_own(tmp_path, where):
    """`mountpoint: /` ran `umount /` (then lazily); any mount outside the disk's directory, by `..` or a symlink, too."""
    state = tmp_path / "lab"
    directory = state / "hostile"
    mountpoint = {"/": "/", "/proc": "/proc", "dotdot": f"{directory}/{depth_to_root(directory)}/proc",
                  "symlink": f"{directory}/out/proc"}[where]
    plant(state, "hostile", created=["backing_file", "loop", "mount"], mountpoint=mountpoint)
    if where == "symlink":
        (directory / "out").symlink_to("/")
    assert os.path.ismount(mountpoint)  # a real mount: the old `down` unmounted it
    assert_refused_untouched(state, "hostile")


def own_cgroup() -> str:
    """This process's cgroup in the hierarchy the lab uses (v1 blkio or v2)."""
    from fioscope import lab

    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if lab.cgroup_version() == 1 and "blkio" in controllers.split(","):
            return str(lab.CGROUP_ROOT / "blkio") + path
        if lab.cgroup_version() == 2 and controllers == "":
            return str(lab.CGROUP_ROOT) + path
    pytest.skip("no cgroup I/O controller")


@pytest.mark.parametrize("which", ["this process's", "the hierarchy's root by .."])
def test_down_refuses_a_cgroup_outside_the_labs(tmp_path, which):
    """A cgroup path naming any directory got every PID in its cgroup.procs SIGKILLed and its caps written."""
    from fioscope import lab

    version = lab.cgroup_version()
    base = lab.CGROUP_ROOT / "blkio" if version == 1 else lab.CGROUP_ROOT
    cgroup = own_cgroup() if which == "this process's" else f"{base}/fioscope-lab-hostile/.."
    plant(tmp_path / "lab", "hostile", created=["backing_file", "cgroup"], cgroup=cgroup, cgroup_version=version,
          backing_device="8:0")
    assert str(os.getpid()) in Path(own_cgroup(), "cgroup.procs").read_text().split()
    lab_named = base / "fioscope-lab-hostile"
    lab_named.mkdir()  # the lab's own name, whose `..` is the hierarchy's root
    try:
        assert_refused_untouched(tmp_path / "lab", "hostile")
    finally:
        lab_named.rmdir()


@pytest.fixture
def foreign_loop(tmp_path):
    """A loop device of someone else's: its backing file outside any lab directory."""
    with lab_lock():
        image = tmp_path / "foreign.img"
        image.write_bytes(b"")
        os.truncate(image, 16 << 20)
        device = run(["losetup", "--find", "--show", image]).stdout.strip()
        assert device.startswith("/dev/loop"), device
        try:
            yield device, image
        finally:
            run(["losetup", "-d", device])


@pytest.mark.parametrize("field", ["loop_device", "lower_device"])
def test_down_leaves_a_loop_device_backed_by_another_file_alone(tmp_path, foreign_loop, field):
    """Another owner's loop device and backing file, named in the state file, passed the ownership check."""
    device, image = foreign_loop
    kind = "stalled" if field == "lower_device" else "healthy"
    plant(tmp_path / "lab", "hostile", kind=kind, created=["backing_file", "lower_loop", "loop"], backing_file=str(image),
          **{field: device})
    assert_refused_untouched(tmp_path / "lab", "hostile")
    assert Path(f"/sys/block/{Path(device).name}/loop/backing_file").read_text().strip() == str(image)


def test_down_detaches_no_loop_device_whose_backing_file_is_not_the_disks(tmp_path, foreign_loop):
    """The state file names the disk's own backing file but another owner's loop device: that device is not detached."""
    device, _ = foreign_loop
    plant(tmp_path / "lab", "own-file", created=["backing_file", "loop"], loop_device=device)
    message, actions = refused(tmp_path / "lab", "own-file")
    assert message is None and actions == [("rmtree", str(tmp_path / "lab" / "own-file"))], (message, actions)


@pytest.mark.parametrize("change", ["mode 0644", "not root's", "directory writable by others", "a symlink"])
def test_down_refuses_a_state_file_that_is_not_roots_alone(tmp_path, change):
    """Only a state file root alone could have written is believed; anything else is one line, nothing done."""
    state = tmp_path / "lab"
    path = plant(state, "careless")
    if change == "mode 0644":
        path.chmod(0o644)
    elif change == "not root's":
        os.chown(path, 65534, 65534)
    elif change == "directory writable by others":
        path.parent.chmod(0o777)
    else:
        path.rename(tmp_path / "elsewhere.json")
        path.symlink_to(tmp_path / "elsewhere.json")
    assert_refused_untouched(state, "careless")


@pytest.mark.parametrize("malformed", ["{not json", '{"name": "a-bad", "colour": 1}', "[1, 2]",
                                       '{"name": "a-bad", "kind": "healthy", "state_dir": 3}', "directory"])
def test_down_all_continues_past_a_state_file_it_cannot_read(tmp_path, malformed):
    """`down --all` stopped at the first malformed state file (a TypeError); now one line for it, the next torn down."""
    from fioscope import lab

    state = tmp_path / "lab"
    bad = plant(state, "a-bad")
    if malformed == "directory":
        bad.unlink()
        bad.mkdir()
    else:
        bad.write_text(malformed)
    plant(state, "b-good")
    host = lab.DryRun()
    removed, failed = lab.down_all(state, host)
    assert host.actions == [("rmtree", str(state / "b-good"))] and removed == [str(state / "b-good")], host.actions
    assert len(failed) == 1 and str(bad) in failed[0] and "\n" not in failed[0], failed


def attached_under(root: Path) -> list[str]:
    """Loop devices backed by a file under ``root`` (also deleted ones), and those stacked on them, uppermost first."""
    backing = {p.parent.parent.name: p.read_text().strip() for p in Path("/sys/block").glob("loop*/loop/backing_file")}
    lower = [dev for dev, file in backing.items() if file.startswith(f"{root}/")]
    upper = [dev for dev, file in backing.items() if file in {f"/dev/{d}" for d in lower}]
    return upper + lower


def detach_leftovers(root: Path) -> list[str]:
    """What a failing run leaked, detached so the next run starts clean; returns it."""
    left = attached_under(root)
    for dev in left:
        run(["losetup", "-d", f"/dev/{dev}"])
    return left


def test_stalled_up_whose_upper_losetup_fails_leaves_no_loop_device(tmp_path):
    """The lower loop device's name was never saved: when the upper `losetup` failed, `down` deleted the backing file
    under it and left it attached. The failure is injected through the lab's Host (every other step real)."""
    from fioscope import lab

    class UpperLosetupFails(lab.Host):
        def run(self, *cmd: str) -> str:
            if cmd[:2] == ("losetup", "--direct-io=on") and cmd[-1].startswith("/dev/loop"):  # attaching the upper
                raise lab.LabError("losetup: injected failure of the upper loop device")
            return super().run(*cmd)

    state = tmp_path / "lab"
    with lab_lock():
        try:
            with pytest.raises(lab.LabError, match="injected"):
                lab.up("stalled", "stall-fails", "64M", state, host=UpperLosetupFails())
            assert not (state / "stall-fails").exists()
        finally:
            leaked = detach_leftovers(state)
        assert leaked == [], f"left attached: {leaked}"


def test_stalled_up_killed_between_its_loop_devices_is_undone_by_down(tmp_path):
    """`lab up stalled` SIGKILLed right after its lower loop device is attached (before its name could be written):
    `fioscope lab down` still detaches it, and nothing of the disk is left."""
    state = tmp_path / "lab"
    code = ("import os, signal, sys\nfrom pathlib import Path\nfrom fioscope import lab\n"
            "class DiesAfterTheLowerLoop(lab.Host):\n"
            "    def run(self, *cmd):\n"
            "        out = super().run(*cmd)\n"
            "        if cmd[0] == 'losetup':\n"
            "            os.kill(os.getpid(), signal.SIGKILL)\n"
            "        return out\n"
            "lab.up('stalled', 'stall-dies', '64M', Path(sys.argv[1]), host=DiesAfterTheLowerLoop())\n")
    with lab_lock():
        try:
            died = subprocess.run([sys.executable, "-c", code, str(state)], env=checkout_env(), capture_output=True,
                                  text=True, timeout=120)
            assert died.returncode == -signal.SIGKILL, died.stderr
            assert attached_under(state), "the lower loop device was not attached before the kill"
            down = fioscope("lab", "--state-dir", str(state), "down", "stall-dies")
            assert down.returncode == 0, down.stderr
            assert not (state / "stall-dies").exists()
        finally:
            leaked = detach_leftovers(state)
        assert leaked == [], f"left attached: {leaked}"


def test_down_all_takes_down_the_good_disk_beside_a_malformed_state_file(tmp_path):
    """The CLI: one stderr line naming the malformed state file, the real disk beside it taken down, exit non-zero;
    a state file `up` writes is root's and 0600."""
    state = tmp_path / "lab"
    with lab_lock():
        made = fioscope("lab", "--state-dir", str(state), "up", "healthy", "--name", "b-good", "--size", "64M")
        assert made.returncode == 0, made.stderr
        disk = json.loads(made.stdout)
        try:
            written = os.stat(state / "b-good" / "state.json")
            assert (written.st_uid, written.st_mode & 0o777) == (0, 0o600), oct(written.st_mode)
            bad = plant(state, "a-bad")
            bad.write_text('{"name": "a-bad", "colour": 1}')
            down = fioscope("lab", "--state-dir", str(state), "down", "--all")
            assert down.returncode != 0 and down.stderr.count("\n") == 1 and str(bad) in down.stderr, down.stderr
            assert "Traceback" not in down.stderr
            assert not (state / "b-good").exists() and not os.path.ismount(disk["mountpoint"])
            assert not Path(f"/sys/block/{Path(disk['device']).name}/loop/backing_file").exists()
        finally:
            if (state / "b-good").exists():
                fioscope("lab", "--state-dir", str(state), "down", "b-good")
            detach_leftovers(state)


def mem_available() -> int:
    line = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemAvailable:"))
    return int(line.split()[1]) * 1024


@pytest.mark.parametrize("size", ["64M,nr_inodes=1", "64M,mode=0777", "lots", "0", "-1G", "", "1E", "available"])
def test_ram_size_is_checked_before_anything_is_made(tmp_path, size):
    """`lab up ram --size` was spliced into tmpfs's mount options and never compared with the memory there is: now a
    size by the one size parser, at least 1MiB, at most half of MemAvailable, or one line and nothing made."""
    if size == "available":
        size = str(mem_available())
    state = tmp_path / "lab"
    mounts = Path("/proc/mounts").read_text()
    with lab_lock():
        try:
            made = fioscope("lab", "--state-dir", str(state), "up", "ram", "--name", "ram-size", f"--size={size}")
            assert made.returncode != 0, made.stdout
            assert len(made.stderr.strip().splitlines()) == 1 and "--size" in made.stderr, made.stderr
            assert not (state / "ram-size").exists()
            assert Path("/proc/mounts").read_text() == mounts
        finally:
            if (state / "ram-size" / "state.json").exists():
                fioscope("lab", "--state-dir", str(state), "down", "ram-size")
            detach_leftovers(state)
