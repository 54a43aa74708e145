"""make test starts the tests at once and builds the Go tools behind them (scripts/setup.sh --background default-suite):
the default suite needs Prometheus 3's promtool, not its server; a test that needs a tool is marked so, runs after the
others and waits for the build (fioscope_testkit.binaries)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fioscope_testkit.binaries import (
    PROMETHEUS3_VERSION,
    TEST_TOOLS,
    built,
    require_prometheus,
    wait_for_build,
)
from fioscope_testkit.cli import run
from fioscope_testkit.paths import REPO

# the tests of a real Prometheus 3 server: each times a server's rule evaluation, which promtool does not do; ~30-40 s
# each, in the slow suite (make test-slow builds the server). Every other test of 3.x runs on promtool.
SERVER_TESTS = {
    "tests/test_rule_placement.py::test_prometheus_starts_each_placed_group_at_its_point_in_the_order_the_records_flow[3]",
    "tests/test_shards.py::test_concurrent_rule_evaluation_is_an_option_of_the_native_stack_that_prometheus_3_runs",
}
# writes the collected default suite, in the order it runs, with each test's needs_tool marks
MARKS_PLUGIN = """
import json, os
from fioscope_testkit.binaries import needed_tools
def pytest_collection_finish(session):
    with open(os.environ["TOOL_MARKS_OUT"], "w") as out:
        json.dump([[item.nodeid, sorted(needed_tools(item))] for item in session.items], out)
"""


def pytest_env(**extra: str) -> dict[str, str]:
    """This environment for a pytest run of its own (none of this run's xdist worker or current test)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    return {**env, **extra}


def collected(tmp_path_factory, *args: str) -> list[tuple[str, set[str]]]:
    """The tests pytest ``args`` collects, in the order they run, each with the tools it is marked as needing."""
    plugin = tmp_path_factory.mktemp("plugin")
    (plugin / "tool_marks.py").write_text(MARKS_PLUGIN)
    out = plugin / "marks.json"
    env = pytest_env(TOOL_MARKS_OUT=str(out), PYTHONPATH=os.pathsep.join([str(plugin), os.environ.get("PYTHONPATH", "")]))
    proc = run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0", "-p", "tool_marks",
                *args], cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [(nodeid, set(tools)) for nodeid, tools in json.loads(out.read_text())]


@pytest.fixture(scope="module")
def default_suite(tmp_path_factory) -> list[tuple[str, set[str]]]:
    return collected(tmp_path_factory)


def test_the_default_suite_needs_prometheus_3_s_promtool_not_its_server(default_suite, tmp_path_factory):
    assert not [nodeid for nodeid, tools in default_suite if "prometheus3" in tools]
    line_3 = {nodeid: tools for nodeid, tools in default_suite
              if nodeid.endswith("[3]") or ("::test_promtool_unit_tests[" in nodeid and nodeid.endswith("-3]"))}
    assert len(line_3) >= 2 and all(tools == {"promtool3"} for tools in line_3.values()), line_3
    # the server's tests are the slow suite's (its setup builds the server)
    slow = collected(tmp_path_factory, "-m", "slow", *sorted({nodeid.split("::")[0] for nodeid in SERVER_TESTS}))
    assert {nodeid for nodeid, tools in slow if "prometheus3" in tools} == SERVER_TESTS


def test_the_tests_that_need_a_tool_run_last_in_the_order_make_test_builds_them(default_suite):
    assert {tool for _, tools in default_suite for tool in tools} <= set(TEST_TOOLS)  # make test builds each
    ranks = [max((TEST_TOOLS.index(tool) + 1 for tool in tools), default=0) for _, tools in default_suite]
    assert ranks == sorted(ranks) and ranks[0] == 0 and set(ranks) == set(range(len(TEST_TOOLS) + 1))


def test_a_test_waits_for_the_build_that_holds_the_binary_s_lock(tmp_path):
    binary = tmp_path / "tool"
    assert not wait_for_build(binary)  # neither built nor being built: at once
    (tmp_path / "tool.lock").touch()
    # a build as scripts/setup.sh runs one: the lock held (flock) while the binary is written whole
    builder = subprocess.Popen(["flock", str(tmp_path / "tool.lock"), "sh", "-c",
                                f"sleep 2; cp /bin/true {binary}.new; mv {binary}.new {binary}"])
    try:
        time.sleep(0.5)
        start = time.monotonic()
        assert wait_for_build(binary)
        assert time.monotonic() - start > 1
    finally:
        builder.wait(10)
    (tmp_path / "other.lock").touch()  # a build that ended without its binary
    assert not wait_for_build(tmp_path / "other")


def test_a_test_that_needs_a_tool_it_is_not_marked_for_fails_in_one_line(tmp_path):
    with pytest.raises(pytest.fail.Exception, match=r"needs .*/prometheus: mark it @pytest.mark.needs_tool\('prometheus3'\)"):
        built(tmp_path / "prometheus", "prometheus3")


@pytest.mark.needs_tool("promtool3")
def test_promtool_3_is_the_cached_release_without_the_kubernetes_client(tmp_path):
    """scripts/setup.sh builds Prometheus 3 as its release build names it, with the discovery it leaves out
    refused by name (Kubernetes's is a type stub there: client-go's clients were half of promtool's cold build)."""
    promtool = require_prometheus("promtool", "3")
    module = PROMETHEUS3_VERSION.removeprefix("v0.")  # the Go module's v0.316.0 is Prometheus 3.16.0
    release = f"{module[0]}.{int(module[1:3])}.{module.split('.', 1)[1]}"
    said = run([promtool, "--version"])
    assert f"promtool, version {release} " in said.stdout and "remove_all_sd" in said.stdout, said.stdout
    assert b"k8s.io/client-go/kubernetes" not in Path(promtool).read_bytes()  # the typed clients: a go install has them
    config = tmp_path / "prometheus.yml"
    config.write_text("scrape_configs:\n- job_name: file\n  file_sd_configs: [{files: [hosts/*.yml]}]\n")
    assert run([promtool, "check", "config", config]).returncode == 0
    config.write_text("scrape_configs:\n- job_name: k8s\n  kubernetes_sd_configs: [{role: pod}]\n")
    refused = run([promtool, "check", "config", config])
    assert refused.returncode != 0 and "kubernetes_sd_configs" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
