"""stack.place_rule_groups: the rule groups named so that a real Prometheus (2.42 and 3) starts each at its planned point."""

from __future__ import annotations

import os
from datetime import datetime

import pytest
import yaml
from fioscope_mixin import prometheus
from fioscope_mixin.native import NativeStack, prometheus_major
from fioscope_mixin.placement import CHAIN_COST_MS, TOLERANCE_S, phase_miss, placement_points
from fioscope_mixin.settings import load_settings
from fioscope_testkit.binaries import require, require_prometheus
from fioscope_testkit.net import free_port, wait_for
from fioscope_testkit.prometheus import PromClient

FLEET = ["thresholds.columns_interval=1m", "stack.concurrent_rule_eval=true"]
# lastEvaluation is when the evaluation began: the group's timer wakes a few ms past its instant (more on a busy
# machine), on top of the name's own distance from its point (TOLERANCE_S); a wrong hash is seconds off
START_LATE_S = 0.05


def phase(last_evaluation: str, interval: float) -> float:
    """Seconds after a multiple of ``interval`` of a group's lastEvaluation (RFC 3339, UTC, ns)."""
    seconds, _, fraction = last_evaluation.rstrip("Z").partition(".")
    at = datetime.fromisoformat(seconds + "+00:00").timestamp() + float(f"0.{fraction or 0}")
    return at % interval


@pytest.mark.slow  # ~40 s of a real Prometheus server (make test-slow builds the 3.x one; make test builds promtool alone)
@pytest.mark.parametrize("line", [pytest.param("3", marks=pytest.mark.needs_tool("prometheus3")), "2"])
def test_prometheus_starts_each_placed_group_at_its_point_in_the_order_the_records_flow(tmp_path, monkeypatch, line):
    """With stack.place_rule_groups, a real Prometheus of the native stack (either line: each hashes a group's name its
    own way, and the stack asks its binary which it is) starts every group of the evaluation interval at the point
    planned for it (within 0.05 s, plus its timer's lateness), which is its hash's: Prometheus reads the rule files by
    the path the names were chosen for. The points follow the records (iostat's rates, the envelope, the causes, the
    sustained alerts), each group's share of the interval in proportion to its cost; the groups of a minute have a
    slot of their own. Without the setting the names are the committed ones."""
    server = require_prometheus("prometheus", line)
    fleet = FLEET if line == "3" else [f for f in FLEET if "concurrent_rule_eval" not in f]  # a Prometheus 3 feature
    overrides = [*fleet, "stack.place_rule_groups=true"]
    files = prometheus.deployed_rule_groups(load_settings(overrides), int(line))
    plain = prometheus.rule_groups(load_settings(fleet))
    points = placement_points(plain, "15s")
    names = {g["name"].rsplit("-", 1)[0]: g["name"] for gs in files.values() for g in gs if g["name"] not in
             {p["name"] for ps in plain.values() for p in ps}}
    assert set(names) == set(points) == set(CHAIN_COST_MS)  # every group but the 5 s pages' is placed
    chain = sorted((point, name) for name, (every, point) in points.items() if every == 15)
    assert [name for _, name in chain][:5] == ["fioscope-iostat", "fioscope-iostat-bytes", "fioscope-iostat-util",
                                               "fioscope-iostat-irate", "fioscope-envelope"]
    assert [name for _, name in chain][-3:] == ["fioscope-cause-conditions", "fioscope-cause", "fioscope-alerts-sustained"]
    gaps = [(b - a, name) for (a, name), (b, _) in zip(chain, chain[1:])]
    # each group has a share of the interval (15 s for the chain's 6.7 s of costs: 2.2 ms a ms) before the next starts
    assert min(gap / CHAIN_COST_MS[name] for gap, name in gaps) > 2e-3

    monkeypatch.setenv("PATH", f"{os.path.dirname(server)}{os.pathsep}{os.environ['PATH']}")
    stack = NativeStack(tmp_path / "stack", [*overrides, f"stack.ports.prometheus={free_port()}"],
                        without=("node_exporter", "alertmanager", "fioscope"))
    assert stack.commands()["prometheus"][0] == server
    stack.start()
    try:
        client = PromClient(stack.url("prometheus"))

        def evaluated() -> list[dict] | None:
            groups = [g for g in client.rules() if g["interval"] == 15]
            return groups if all(g["lastEvaluation"] > "2000" for g in groups) else None

        groups = wait_for(evaluated, 45, what="every rule group of the evaluation interval evaluated once")
        seen = {g["name"]: phase(g["lastEvaluation"], 15) for g in groups}
        for base, (every, point) in points.items():
            if every == 15:
                miss = phase_miss(seen[names[base]], point, 15)
                assert miss <= TOLERANCE_S + START_LATE_S, (names[base], seen[names[base]], point)
    finally:
        stack.stop()
    default = yaml.safe_load(prometheus.render(load_settings())["alerts/recording.rules.yaml"])
    assert default["groups"][0]["name"] == "fioscope-iostat"


def test_a_setting_that_is_not_true_or_false_is_refused_in_one_line(tmp_path):
    with pytest.raises(SystemExit, match="^native stack: stack.place_rule_groups: expected true or false, got 'maybe'$"):
        NativeStack(tmp_path / "bad", ["stack.place_rule_groups=maybe"])


def test_the_stack_tells_the_prometheus_line_from_its_binary(tmp_path):
    """Debian's Prometheus says its version; a `go install` build says none, its Go build info names the module's
    version (v0.316.0: Prometheus 3.16.0; here a script that carries that line as Go writes it); a binary that is not
    Prometheus is refused in one line."""
    assert prometheus_major(require("prometheus")) == 2
    unversioned = "#!/bin/sh\necho 'prometheus, version  (branch: , revision: unknown)'\n"
    installed = tmp_path / "installed"
    installed.write_text(unversioned + "# mod\tgithub.com/prometheus/prometheus\tv0.316.0\th1:...\n")
    installed.chmod(0o755)
    assert prometheus_major(str(installed)) == 3
    other = tmp_path / "prometheus"
    other.write_text(unversioned)
    other.chmod(0o755)
    with pytest.raises(SystemExit, match=f"^native stack: {other} does not say which Prometheus it is"):
        prometheus_major(str(other))
