"""Issue 51 item 9: the job check (``fio --showcmd``) does not depend on the target's disk.

On the slow disk a capture exists to diagnose, capture refused to start: ``fio --showcmd`` outlasted its 30 s check.
fio resolves no path for --showcmd, but it ran with the target as its working directory (and its start-up opens
it). Here the check runs under strace with a real fio: the fio it starts never enters, opens or stats the target.
"""

from __future__ import annotations

import re
import sys

from helpers.binaries import require
from helpers.cli import run
from helpers.paths import checkout_env

JOB = """; default: RUNTIME=5
[checked]
directory=${TARGET_DIR}
rw=randread
bs=4k
size=4m
runtime=${RUNTIME}
ioengine=psync
"""


def test_the_job_check_never_touches_the_targets_disk(tmp_path):
    require("fio")
    strace = require("strace")
    target = tmp_path / "target-on-the-slow-disk"
    target.mkdir()
    job = tmp_path / "checked.fio"
    job.write_text(JOB)
    code = ("from pathlib import Path; from fioscope.config import Target; from fioscope.jobs import check_safe, load_job;"
            f"check_safe(load_job(Path({str(job)!r}), {{'TARGET_DIR': {str(target)!r}}}), Target('t', Path({str(target)!r})))")
    log = tmp_path / "strace.log"
    proc = run([strace, "-f", "-qq", "-o", log, "-e", "trace=%process,chdir,fchdir,%file", sys.executable, "-c", code],
               env=checkout_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = log.read_text().splitlines()
    fio = {line.split()[0] for line in lines if re.search(r'execve\("[^"]*/fio", \[[^]]*"--showcmd"', line)}
    assert fio, "fio --showcmd did not run"
    # fio's process and the threads and processes it starts (a child's chdir before its exec counts: same pid)
    pids = set(fio)
    for line in lines:
        m = re.match(r"(\d+) +(?:clone|clone3|vfork|fork)\(.*= (\d+)$", line)
        if m and m.group(1) in pids:
            pids.add(m.group(2))
    theirs = [line for line in lines if line.split()[0] in pids]
    touched = [line for line in theirs if str(target) in line or str(tmp_path) + '"' in line]
    assert not touched, touched
    assert any(re.search(r'chdir\("/"\)', line) for line in theirs), theirs[:20]  # run from the root, not the target
