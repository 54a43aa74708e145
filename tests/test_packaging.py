"""An installed fioscope (and fioscope-mixin) carries its profiles and settings: built as the image builds it,
installed in a fresh venv, run outside the repo."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from fioscope_testkit.paths import REPO

pytestmark = pytest.mark.e2e  # builds a wheel (setuptools from the index) and a venv: ~15 s


def docker_build_context(dest: Path) -> Path:
    """What the Dockerfile's build stage has in /src: its COPY lines, replayed (links kept as links)."""
    lines = re.findall(r"^COPY (?!--)(.+)$", (REPO / "exporter" / "Dockerfile").read_text().split("\nFROM ")[1], re.MULTILINE)
    assert lines, "the build stage copies the sources"
    for line in lines:
        *sources, target = line.split()
        for source in sources:
            _copy(REPO / source.rstrip("/"), dest / target.rstrip("/") / Path(source).name if len(sources) > 1 else dest / target.rstrip("/"))
    return dest


def _copy(src: Path, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, out, symlinks=True, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    else:
        shutil.copy2(src, out)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("pkg")
    context = docker_build_context(work / "src")
    # as the image does it: pip builds the wheel in its own build environment (setuptools from the index)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
                    str(work / "wheels"), str(context / "mixin"), str(context / "exporter")], check=True, cwd=context)
    [wheel] = (work / "wheels").glob("fioscope-0*.whl")
    [mixin_wheel] = (work / "wheels").glob("fioscope_mixin-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist()) | set(zipfile.ZipFile(mixin_wheel).namelist())
    assert {f"fioscope/profiles/{p.name}" for p in (REPO / "fio-jobs").glob("*.fio")} <= names
    assert "fioscope_mixin/config.yaml" in names and not any("config.yaml" in n for n in zipfile.ZipFile(wheel).namelist())
    # every link the packages hold into the repository (profiles, settings) is in a wheel
    linked = {str(p.relative_to(package.parent)) for package in (REPO / "exporter" / "fioscope", REPO / "mixin" / "fioscope_mixin")
              for p in package.rglob("*") if p.is_file() and package not in p.resolve().parents}
    assert linked and linked <= names, sorted(linked - names)
    venv = work / "venv"
    # system site packages give prometheus_client and PyYAML without a download
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    # --ignore-installed: a copy in the system site (an editable install of another checkout) never stands in for the wheel
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps", "--no-index", "--ignore-installed", str(mixin_wheel), str(wheel)],
                   check=True)
    return venv / "bin" / "fioscope"


def run_outside(fioscope: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FIOSCOPE_JOBS_DIR")}
    return subprocess.run([str(fioscope), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120, check=False)


def test_installed_fioscope_runs_a_profile_from_anywhere(installed, tmp_path):
    target, results = tmp_path / "target", tmp_path / "results"
    target.mkdir()
    proc = run_outside(installed, "run", "etcd-wal", "--target.dir", str(target), "--results.dir", str(results),
                       "--env", "SIZE=2m", cwd=tmp_path)
    assert "no such job file" not in proc.stderr
    assert re.search(r"fdatasync p99 .*: (pass|WARNING|FAIL)$", proc.stdout, re.MULTILINE), proc.stdout + proc.stderr
    assert list(results.glob("etcd-wal-*.json"))


def test_installed_check_lists_the_profiles(installed, tmp_path):
    proc = run_outside(installed, "check", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert all(p.stem in proc.stdout for p in (REPO / "fio-jobs").glob("*.fio")), proc.stdout
    for package in ("fioscope", "fioscope_mixin"):
        assert str(REPO) not in run_outside(installed.parent / "python", "-c", f"import {package}; print({package}.__file__)",
                                            cwd=tmp_path).stdout


def test_installed_mixin_reads_its_settings_and_generates_only_where_told(installed, tmp_path):
    """The wheel's copy of alerts/config.yaml is the settings; without a checkout, generate needs --out."""
    python = installed.parent / "python"
    proc = run_outside(python, "-c", "from fioscope_mixin.settings import default_fsync_threshold; print(default_fsync_threshold())",
                       cwd=tmp_path)
    assert proc.returncode == 0 and float(proc.stdout) > 0, proc.stderr
    proc = run_outside(python, "-m", "fioscope_mixin", "generate", cwd=tmp_path)
    assert proc.returncode == 2 and "--out" in proc.stderr and list(tmp_path.iterdir()) == []
    proc = run_outside(python, "-m", "fioscope_mixin", "generate", "--only", "prometheus", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "alerts" / "alerts.rules.yaml").read_text() == (REPO / "alerts" / "alerts.rules.yaml").read_text()
