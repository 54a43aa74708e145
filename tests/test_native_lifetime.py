"""The native launcher's services never outlive it (issue 51 item 7): the real ``python3 -m fioscope_mixin.native``
stopped by two signals in quick succession (the second while it stops its services) or killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fioscope_testkit.net import free_port, wait_for
from fioscope_testkit.paths import checkout_env
from helpers import leaks


def launch(tmp_path) -> tuple[subprocess.Popen, dict[int, str]]:
    """The launcher on free loopback ports with a data directory of its own, once every service is up; and what the
    session ran before it."""
    before = leaks.tracked(os.environ[leaks.TOKEN_VAR])
    ports = [f"stack.ports.{service}={free_port()}" for service in ("prometheus", "alertmanager", "node_exporter", "fioscope")]
    log = tmp_path / "launcher.log"
    proc = subprocess.Popen([sys.executable, "-m", "fioscope_mixin.native", "--data-dir", str(tmp_path / "data"),
                             *(arg for port in ports for arg in ("--set", port))],
                            stdout=log.open("w"), stderr=subprocess.STDOUT, env=checkout_env(),
                            # Ctrl-C's SIGINT as in a terminal's foreground: a run started in the background of a
                            # script (`.ci/run &`) inherits SIGINT ignored, and the launcher would never see it
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_for(lambda: "native stack up" in log.read_text() or proc.poll() is not None, 90, what="the native stack up")
        assert proc.poll() is None, log.read_text()[-2000:]
    except BaseException:
        proc.kill()
        raise
    return proc, before


def parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def children(before: dict[int, str]) -> dict[int, str]:
    """The session's processes started since ``before`` (the launcher's services, fio under fioscope serve) still alive
    after a grace period."""
    return leaks.left_behind(os.environ[leaks.TOKEN_VAR], before, grace=20)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_while_it_stops_leaves_no_service_running(tmp_path, sig):
    proc, before = launch(tmp_path)
    services = [cmd for pid, cmd in leaks.tracked(os.environ[leaks.TOKEN_VAR]).items() if parent(pid) == proc.pid]
    assert len(services) == 4, services  # Prometheus, Alertmanager, node_exporter, fioscope serve (which may run fio)
    proc.send_signal(sig)
    time.sleep(0.1)  # it is stopping Prometheus (the last started, stopped first)
    proc.send_signal(sig)
    try:
        proc.wait(30)
    finally:
        proc.kill()
    left = children(before)
    leaks.kill(left)
    assert not left, left


def test_services_end_with_a_launcher_killed_outright(tmp_path):
    proc, before = launch(tmp_path)
    proc.kill()
    proc.wait()
    left = children(before)
    leaks.kill(left)
    assert not left, left
