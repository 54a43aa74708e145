"""FioscopeRuleEvaluationSlow on a real Prometheus: its selectors meet the series Prometheus writes about its own groups."""

from __future__ import annotations

from fioscope_mixin import names as n
from fioscope_mixin.native import NativeStack
from fioscope_testkit.binaries import require
from fioscope_testkit.net import free_port, wait_for
from fioscope_testkit.prometheus import PromClient


def test_rule_evaluation_alert_reads_the_real_prometheus_own_series(tmp_path):
    """The native stack's Prometheus scrapes itself; with a threshold any evaluation passes (a millionth of a 1 s
    interval, over a 10 s window), the alert fires for fioscope's groups, named as Prometheus names them
    (``<rule file>;<group>``), under the job the selector names: a wrong selector or group pattern never fires. The
    promtool cases (alerts/tests/prometheus.test.yaml) hold the thresholds and someone else's group; this holds the
    series and labels they assume."""
    require("prometheus")
    overrides = ["stack.scrape_interval=1s", "stack.evaluation_interval=1s", f"stack.ports.prometheus={free_port()}",
                 "thresholds.rule_evaluation_busy_ratio=0.000001", "thresholds.rule_evaluation_window=10s",
                 "durations.rule_evaluation_slow=0s"]
    stack = NativeStack(tmp_path / "stack", overrides, without=("node_exporter", "alertmanager", "fioscope"))
    stack.start()
    try:
        client = PromClient(stack.url("prometheus"))
        alerts = wait_for(lambda: client.query(f'ALERTS{{alertname="{n.ALERT_RULE_EVALUATION_SLOW}",alertstate="firing"}}'),
                          60, what=f"{n.ALERT_RULE_EVALUATION_SLOW} firing")
        groups = {a["metric"]["rule_group"] for a in alerts}
        assert any(g.endswith(";fioscope-iostat") for g in groups), groups
        assert {a["metric"]["job"] for a in alerts} == {"prometheus"}
    finally:
        stack.stop()
