"""Config and job-file validation: one fixture per failure mode, a typed error, one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
from fioscope.config import (
    ConfigFileError,
    ConfigValueError,
    Target,
    UnknownJobError,
    UnknownTargetError,
    UnsafeTargetError,
    load_config,
)
from fioscope.jobs import (
    JobFileError,
    UnsafeJobError,
    check_safe,
    load_job,
    resolve_job,
)
from fioscope_testkit.cli import fioscope
from fioscope_testkit.paths import FIXTURES, REPO

CONFIGS = FIXTURES / "config"
JOBS = FIXTURES / "jobs"
REPO_JOBS = REPO / "fio-jobs"


def test_default_jobs_dir_is_the_packaged_profiles():
    from fioscope.resources import profiles_dir

    assert load_config(None).jobs_dir == profiles_dir()
    assert sorted(p.name for p in profiles_dir().glob("*.fio")) == sorted(p.name for p in REPO_JOBS.glob("*.fio"))

CASES = [
    ("bad_yaml.yaml", ConfigFileError, "not valid YAML at line"),
    ("unknown_key.yaml", ConfigValueError, "unknown key.*result_dir"),
    ("unknown_target.yaml", UnknownTargetError, "unknown target 'nodisk'"),
    ("bad_duration.yaml", ConfigValueError, "scan_interval: 'soon' is not a duration"),
    ("bad_repeat.yaml", ConfigValueError, r"repeat: must be a whole number"),
    ("missing_name.yaml", ConfigValueError, "'name' and 'directory' are required"),
    ("bad_limit.yaml", ConfigValueError, "limits.read_iops: 'lots' is not a number"),
    ("bad_destructive.yaml", ConfigValueError, "destructive: must be true or false"),
    ("not_a_mapping.yaml", ConfigValueError, "expected a mapping"),
    ("targets_not_list.yaml", ConfigValueError, "targets: expected a list, got int"),
    ("scan_interval_zero.yaml", ConfigValueError, "scan_interval: 0 must be more than 0"),
    ("scan_interval_inf.yaml", ConfigValueError, "scan_interval: inf is not a duration between 0 and 100y"),
    ("unset_variable.yaml", ConfigValueError, r"results_dir: \$\{FIOSCOPE_TEST_UNSET_VARIABLE\} is not set"),
    ("duplicate_key.yaml", ConfigFileError, "not valid YAML at line 3: duplicate key 'scan_interval'"),
    ("target_root.yaml", UnsafeTargetError, r"targets\[0\]: directory / is / or a system directory"),
]


@pytest.mark.parametrize("name,error,message", CASES)
def test_config_failure_modes(name, error, message):
    with pytest.raises(error, match=message) as info:
        load_config(CONFIGS / name)
    assert str(CONFIGS / name) in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name,message", [(n, m) for n, _, m in CASES] + [
    ("unknown_job.yaml", "no-such-profile: no such job file or profile"),
    ("unsafe_job.yaml", "outside the target directory"),
])
def test_check_command_exits_2_with_one_line(name, message):
    proc = fioscope("check", "--config.file", str(CONFIGS / name))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fioscope: ")
    assert __import__("re").search(message, lines[0])


def test_valid_config():
    cfg = load_config(CONFIGS / "valid.yaml")
    assert cfg.results_dir == CONFIGS / "results"
    assert cfg.scan_interval_seconds == 2
    [target] = cfg.targets
    assert target.limits.read_iops == 700 and target.limits.independent
    assert target.sla_latency_seconds == pytest.approx(0.03)
    [entry] = cfg.schedule
    assert (entry.repeat, entry.idle_seconds, entry.every_seconds, entry.env) == (2, 60, 900, {"SIZE": "4m"})
    proc = fioscope("check", "--config.file", str(CONFIGS / "valid.yaml"))
    assert proc.returncode == 0 and "ok (1 targets, 1 schedule entries" in proc.stdout


@pytest.mark.parametrize("profile", sorted(p.stem for p in REPO_JOBS.glob("*.fio")))
def test_every_profile_is_safe_for_its_target(profile, tmp_path):
    job = load_job(resolve_job(profile, REPO_JOBS), {"TARGET_DIR": str(tmp_path)})
    check_safe(job, Target(name="t", directory=tmp_path))
    assert job.jobnames


def test_required_profiles_exist():
    names = {p.stem for p in REPO_JOBS.glob("*.fio")}
    assert {"etcd-wal", "cloud-sla-70-30", "sustained-write", "iodepth-sweep", "seq-write-iops", "rand-write-iops",
            "seq-write-bw", "seq-read-iops", "read-bw", "rand-read-iops"} <= names
    sweep = load_job(REPO_JOBS / "iodepth-sweep.fio", {"TARGET_DIR": "/t"})
    assert [sweep.option(n, "iodepth") for n in sweep.jobnames] == ["1", "2", "4", "8", "16", "32", "64", "128", "256"]
    etcd = load_job(REPO_JOBS / "etcd-wal.fio", {"TARGET_DIR": "/t"})
    assert {k: etcd.option("etcd-wal", k) for k in ("rw", "ioengine", "fdatasync", "bs", "size")} == \
        {"rw": "write", "ioengine": "sync", "fdatasync": "1", "bs": "2300", "size": "22m"}


@pytest.mark.parametrize("job,message", [
    ("outside.fio", "filename=/etc/fioscope-must-not-write: outside the target directory"),
    ("escape.fio", "directory=.*: outside the target directory"),
])
def test_unsafe_jobs_are_refused(job, message, tmp_path):
    target = Target(name="t", directory=tmp_path)
    with pytest.raises(UnsafeJobError, match=message):
        check_safe(load_job(JOBS / job, {"TARGET_DIR": str(tmp_path)}), target)
    # the same job is allowed where the target is explicitly destructive
    check_safe(load_job(JOBS / job, {"TARGET_DIR": str(tmp_path)}), Target(name="t", directory=tmp_path, destructive=True))


def test_block_device_is_refused_even_inside_target(tmp_path):
    dev = Path("/dev/null")  # a character device standing in for a disk
    target = Target(name="t", directory=Path("/dev"))
    job = load_job(JOBS / "blockdev.fio", {"TARGET_DIR": "/dev"})
    job.sections["blockdev"]["filename"] = str(dev)
    with pytest.raises(UnsafeJobError, match="is a device"):
        check_safe(job, target)


def test_missing_variable_names_file_and_line():
    with pytest.raises(JobFileError, match=r"novar.fio:3: \$\{UNDEFINED_SIZE\} has no value"):
        load_job(JOBS / "novar.fio", {"TARGET_DIR": "/t"})


def test_unknown_profile_lists_available():
    with pytest.raises(UnknownJobError, match="profiles: .*etcd-wal"):
        resolve_job("nope", REPO_JOBS)
