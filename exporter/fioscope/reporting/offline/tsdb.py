"""The temporary TSDB: series written as OpenMetrics as they are produced, backfilled with ``promtool tsdb
create-blocks-from openmetrics`` (one block for the whole capture: promtool reads its input once per block), and served
by a temporary Prometheus (loopback, free port), restartable to load new blocks.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

from ...lifetime import child_setup
from .. import ReportError
from .counters import MAX_SAMPLE_GAP, MIN_GRID_STEP, Family, Grid
from .load import MAX_SPAN


def write_openmetrics(path: Path, families: Iterable[Family], counters: Iterable[tuple[str, str, list[tuple[float, float]]]] = ()) -> None:
    """Families as they come (a metric name in one family only: OpenMetrics keeps a metric together),
    then ``counter_points`` series (grouped by name already); written as produced, never all in memory."""
    with path.open("w") as f:
        for family in families:
            for name in sorted(family):
                for labels, points in family[name].items():
                    f.writelines(_lines(f"{name}{labels} ", sorted(points)))
        for name, labels, points in counters:
            f.writelines(_lines(f"{name}{labels} ", points))
        f.write("# EOF\n")


def _lines(prefix: str, points: Iterable[tuple[float, float]]) -> Iterator[str]:
    for t, v in points:
        text = repr(v)
        yield f"{prefix}{text if text[-1] not in 'nf' else _number(v)} {t:.3f}\n"  # nan, inf: OpenMetrics spells them NaN, +Inf


def _number(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def backfill(source: Path, blocks: Path, what: str) -> None:
    # one block for the whole capture (at most MAX_SPAN): promtool reads its input once per block
    _run(["promtool", "tsdb", "create-blocks-from", "openmetrics", f"--max-block-duration={int(MAX_SPAN // 3600) + 24}h",
          str(source), str(blocks)], what)


def _run(cmd: list[str], what: str) -> None:
    try:
        # a session of its own: a Ctrl-C at the terminal is fioscope's to handle (capture finishes its report)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, start_new_session=True)
    except FileNotFoundError:
        raise ReportError(f"offline diagnosis needs {cmd[0]} (Debian: apt-get install prometheus)") from None
    if proc.returncode != 0:
        raise ReportError(f"{what} failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:] or ['?']}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TemporaryPrometheus:
    """A Prometheus on loopback over a TSDB directory, restartable to pick up new blocks."""

    def __init__(self, data: Path, workdir: Path):
        self.data = data
        self.config = workdir / "prometheus.yml"
        self.config.write_text("global: {}\n")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.grid = Grid(0.0, MIN_GRID_STEP)  # set by backfilled()

    def start(self) -> None:
        cmd = [shutil.which("prometheus") or "prometheus", f"--config.file={self.config}", f"--storage.tsdb.path={self.data}",
               f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=100y", "--log.level=error",
               # a backfilled series has no staleness marker: a recorded series that stopped (a slow episode's end)
               # would read as holding for the default 5 minutes; two grid steps reach the last sample of any series
               f"--query.lookback-delta={math.ceil(2 * max(self.grid.step, MAX_SAMPLE_GAP))}s"]
        try:
            # a session of its own: a Ctrl-C at the terminal does not kill it under a report being finished; stop() does,
            # and the death signal does if the report itself is killed (SIGKILL included: no orphan Prometheus)
            self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                            preexec_fn=child_setup())
        except FileNotFoundError:
            raise ReportError("offline diagnosis needs prometheus (Debian: apt-get install prometheus)") from None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                stderr = self.process.stderr.read() if self.process.stderr else ""
                raise ReportError(f"temporary Prometheus exited: {stderr.strip()[-300:]}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
            time.sleep(0.2)
        raise ReportError("temporary Prometheus did not become ready in 60 s")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            except BaseException:  # interrupted while waiting: never left running
                process.kill()
                process.wait()
                raise
