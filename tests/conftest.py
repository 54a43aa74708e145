"""pytest hooks and fixtures only; what tests share lives in tests/helpers (imported as ``helpers.*``)."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from fioscope_testkit.binaries import order_by_tool, require
from helpers import leaks
from helpers.processes import Exporter

# every process the suite starts inherits it: what helpers.leaks finds a left-behind process by; one per xdist worker
# (workers inherit the controller's environment, and each checks only what its own tests started)
SESSION_TOKEN = os.environ.setdefault(leaks.TOKEN_VAR, uuid.uuid4().hex)
if (_worker := os.environ.get("PYTEST_XDIST_WORKER")) and not SESSION_TOKEN.endswith(f"-{_worker}"):
    SESSION_TOKEN = os.environ[leaks.TOKEN_VAR] = f"{SESSION_TOKEN}-{_worker}"


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: end-to-end suite on lab disks (root, slow); run with -m e2e")
    config.addinivalue_line("markers", "scenario_tail: a lab scenario whose test runs last (its load outlasts the others: "
                                       "the rest of the suite runs beside it)")
    config.addinivalue_line("markers", "quiet_host: an e2e test whose figures the session's other loads spoil: run after "
                                       "everything else, once .ci/run's slow suite beside has ended")
    config.addinivalue_line("markers", "beside_scenarios: an e2e test light on CPU and indifferent to it, run while the lab "
                                       "scenarios' loads go on (tests/helpers/scenarios.py): their minutes of waiting are its")
    config.addinivalue_line("markers", "beside_episode(name): an e2e test run while the background episode `name` goes on "
                                       "(tests/helpers/episodes.py; started by the first such test): its stacks watch only its "
                                       "own disks")
    config.addinivalue_line("markers", "joins_episode: an e2e test that joins a background episode and asserts on it: run right "
                                       "after the tests marked beside_episode (they run first)")
    config.addinivalue_line("markers", "slow: real-component tests of 10 s or more (Prometheus backfills, Chromium, captures); "
                                       "not in the default run, run with -m slow (.ci/run does)")
    config.addinivalue_line("markers", "needs_tool(*tools): tools scripts/setup.sh builds from Go source that the test runs "
                                       "(make test builds them beside the tests; these tests run last and wait for them)")


@pytest.fixture(autouse=True)
def no_process_left_behind(request):
    """A test that leaves fio, Prometheus, node_exporter or fioscope running fails (and they are killed). Not for e2e
    tests: the lab scenarios' session stacks start loads between tests (tests/test_e2e.py checks what the suite leaves)."""
    if request.node.get_closest_marker("e2e"):
        yield
        return
    before = leaks.tracked(SESSION_TOKEN)
    yield
    left = leaks.left_behind(SESSION_TOKEN, before)
    if left:
        leaks.kill(left)
        pytest.fail("left running after the test (killed now): " + "; ".join(f"{pid} {cmd}" for pid, cmd in sorted(left.items())))


@pytest.fixture
def exporter_factory(tmp_path):
    """Start ``fioscope serve`` processes (helpers.processes.Exporter); all are stopped after the test."""
    started = []

    def start(**kwargs) -> Exporter:
        exp = Exporter(tmp_path, **kwargs)
        started.append(exp)
        return exp

    yield start
    for exp in started:
        exp.stop()


@pytest.fixture
def running(tmp_path):
    """A list the test appends its processes to (Exporter, NodeExporter, Prometheus); stopped last first after the test."""
    require("prometheus")
    require("prometheus-node-exporter")
    started: list = []
    yield started
    for proc in reversed(started):
        proc.stop()


def pytest_runtest_logreport(report):
    """Each file's e2e test time (setup, call and teardown), and each test's span in the session (where the wall time
    goes: what runs one after another), printed at the end of the run."""
    if "e2e" in report.keywords:
        path = report.nodeid.split("::")[0]
        _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration
        start, end = report.start - _SESSION_START, report.stop - _SESSION_START
        first, _last = _SPANS.get(report.nodeid, (start, end))
        _SPANS[report.nodeid] = (min(first, start), end)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _FILE_SECONDS:
        return
    terminalreporter.write_line(f"e2e wall time: {time.time() - _SESSION_START:.0f} s; per file (setup, call, teardown; the lab "
                                "scenarios' setup counts where their first test is):")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"  {seconds:7.0f} s  {path}")
    terminalreporter.write_line("e2e timeline (s from the session's start: from, to, the test):")
    for nodeid, (start, end) in sorted(_SPANS.items(), key=lambda kv: kv[1][0]):
        terminalreporter.write_line(f"  {start:6.0f} {end:6.0f}  {nodeid[:150]}")


_FILE_SECONDS: dict[str, float] = {}
_SPANS: dict[str, tuple[float, float]] = {}
_SESSION_START = time.time()


def _scenario_items(items) -> list:
    """The tests that ask for the scenario lab, less those skipped by a true skipif (their loads are not started)."""
    return [item for item in items if "scenario_lab" in getattr(item, "fixturenames", ())
            and not item.get_closest_marker("beside_scenarios")
            and not any(m.args and m.args[0] for m in item.iter_markers("skipif"))]


def pytest_collection_modifyitems(session, config, items):
    """First the tests marked beside_episode (a background episode runs beside them), then those marked joins_episode
    (they join it); then those marked beside_scenarios, with the scenario lab already up (its loads run side by side
    from then on), then the lab scenarios' tests (each waits for its own load to end), then the rest, those marked
    scenario_tail last: the rest of the suite runs while their long loads go on; after them those marked quiet_host
    (real etcd times its fsyncs with its goroutines: a RAM disk's p99 read 16.8 ms while the slow suite still ran). Before that, the tests that need a
    tool make test builds after those that need none (fioscope_testkit.binaries.order_by_tool).

    The episodes first: `.ci/run` runs the slow suite (CPU work, at the lowest priority) beside the e2e suite's first
    ~17 minutes, and the lab scenarios' loads meet less of it so (beside all of it at the same nice as their fio, every
    envelope scenario named a wait above the disk beside its cap: fio's completions waited for the CPU)."""
    order_by_tool(items)
    episode = [item for item in items if item.get_closest_marker("beside_episode")]
    episode += [item for item in items if item.get_closest_marker("joins_episode")]
    scenario = _scenario_items(items)
    beside = [item for item in items if item.get_closest_marker("beside_scenarios")] if scenario else []
    tail = [item for item in scenario if item.get_closest_marker("scenario_tail")]
    head = [item for item in scenario if item not in tail]
    quiet = [item for item in items if item.get_closest_marker("quiet_host") and item not in scenario + beside + episode]
    rest = [item for item in items if item not in scenario and item not in beside and item not in episode and item not in quiet]
    items[:] = episode + beside + head + rest + tail + quiet


@pytest.fixture(scope="session")
def episodes(tmp_path_factory):
    """The background episodes (helpers.episodes), each started once; waited for at the session's end."""
    from helpers.episodes import Episodes

    running = Episodes(lambda name: tmp_path_factory.mktemp(name))
    yield running
    running.close()


@pytest.fixture(autouse=True)
def episode_running_beside(request):
    """A beside_episode test starts its episode (once) before its own setup."""
    marker = request.node.get_closest_marker("beside_episode")
    if marker:
        request.getfixturevalue("episodes").start(marker.args[0])
    yield


@pytest.fixture(autouse=True)
def scenarios_running_beside(request):
    """A beside_scenarios test starts the scenario lab before its own setup (a session fixture: it is up once), so its
    minutes run while the scenarios' loads do. A lab that failed to open fails its own tests (pytest keeps the error),
    not this one."""
    if request.node.get_closest_marker("beside_scenarios") and _scenario_items(request.session.items):
        try:
            request.getfixturevalue("scenario_lab")
        except Exception:  # noqa: BLE001 - reported by every scenario test that asks for the lab
            pass
    yield


@pytest.fixture(scope="session")
def scenario_lab(request, tmp_path_factory):
    """Every collected test's lab scenario (tests/helpers/scenarios.py), started together once; taken down after the
    last test that asks for it."""
    from helpers.scenarios import ScenarioLab

    wanted = {}
    for item in _scenario_items(request.session.items):
        key = item.callspec.params["scenario"]
        wanted[key] = item.module.SCENARIOS[key]
    lab = ScenarioLab(tmp_path_factory.mktemp("scenarios"), wanted)
    items = _scenario_items(request.session.items)
    lab.last = items[-1].nodeid
    tail = [item for item in items if item.get_closest_marker("scenario_tail")]
    lab.head_last = next((item.nodeid for item in reversed(items) if item not in tail), "")
    lab.tail_keys = {item.callspec.params["scenario"] for item in tail}
    request.config.stash[SCENARIO_LAB] = lab
    lab.open()
    yield lab
    lab.close()


SCENARIO_LAB = pytest.StashKey()


def pytest_runtest_teardown(item, nextitem):
    """The scenario lab down as soon as its last test is done (not at the end of the session)."""
    lab = item.config.stash.get(SCENARIO_LAB, None)
    if lab is not None and item.nodeid == lab.last:
        lab.close()
    elif lab is not None and item.nodeid == lab.head_last:  # only the tail's long loads go on beside the rest of the suite
        lab.keep_only(lab.tail_keys)
