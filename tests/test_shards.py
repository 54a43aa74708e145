"""Past one Prometheus: the generated shards (fleet.shards) split the hosts folder between them with hashmod.

Real Prometheus servers run the generated prometheus-shard-<i>.yml; hosts are added with fioscope_mixin.hosts while
they run. The e2e of the whole deployment (Thanos sidecars and Query, one Alertmanager, a capped lab disk) is
tests/test_e2e_shards.py.
"""

from __future__ import annotations

import os

import pytest
import yaml
from fioscope_mixin import prometheus
from fioscope_mixin.settings import SettingsError, load_settings
from fioscope_mixin.stack import shard_of
from fioscope_testkit.binaries import PROMETHEUS3_DIR, built, require
from fioscope_testkit.cli import run
from fioscope_testkit.net import free_port, wait_for
from fioscope_testkit.prometheus import PromClient, Prometheus
from helpers.fleet import run_hosts

# both shards get some of these (shard_of is checked against Prometheus below, not assumed)
HOSTS = [f"db-{i}" for i in range(8)]


def shard_files(*overrides: str) -> dict[str, dict]:
    return {rel: yaml.safe_load(text) for rel, text in prometheus.render(load_settings(list(overrides))).items()
            if "prometheus-shard-" in rel}


def test_one_prometheus_has_no_shard_files_and_two_shards_read_the_same_rules_and_hosts():
    assert shard_files() == {}
    files = shard_files("fleet.shards=2")
    single = yaml.safe_load(prometheus.render(load_settings())["provisioning/prometheus/prometheus.yml"])
    assert sorted(files) == [f"provisioning/prometheus/prometheus-shard-{i}.yml" for i in range(2)]
    for i, config in enumerate(files.values()):
        assert config["global"]["external_labels"] == {"shard": str(i)}
        assert config["rule_files"] == single["rule_files"]  # the very rule files promtool tests
        assert config["alerting"] == single["alerting"]  # one Alertmanager
        fleet = [job for job in config["scrape_configs"] if "file_sd_configs" in job]
        assert [job["file_sd_configs"] for job in fleet] == [job["file_sd_configs"] for job in single["scrape_configs"]
                                                             if "file_sd_configs" in job]
    # this host's Alertmanager is scraped once, by shard 0 (etcd only where stack.etcd_endpoints names one: none here)
    jobs = [[job["job_name"] for job in config["scrape_configs"]] for config in files.values()]
    assert jobs == [["prometheus", "node", "fioscope", "alertmanager"], ["prometheus", "node", "fioscope"]]


@pytest.mark.parametrize("value", ["0", "two", "100"])
def test_a_bad_shard_count_is_named(value):
    with pytest.raises(SettingsError, match="fleet.shards"):
        prometheus.render(load_settings([f"fleet.shards={value}"]))


def test_the_shard_configs_pass_promtool(tmp_path):
    require("promtool")
    for rel, text in prometheus.render(load_settings(["fleet.shards=3"])).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    for i in range(3):
        proc = run(["promtool", "check", "config", tmp_path / "provisioning" / "prometheus" / f"prometheus-shard-{i}.yml"])
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_host_added_while_the_shards_run_lands_on_exactly_one_shard(tmp_path):
    require("prometheus")
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    ports = {k: free_port() for k in ("node_exporter", "fioscope", "alertmanager", "etcd")}
    shards = Prometheus.shards(tmp_path / "prom", [f"stack.hosts_dir={hosts}", "stack.host=fleet-stack", "stack.scrape_interval=1s",
                                                   *[f"stack.ports.{k}={v}" for k, v in ports.items()]], 2)
    try:
        for name in HOSTS:  # nothing listens there: a target is listed (down) on the shard that keeps it
            added = run_hosts("--dir", hosts, "add", name, f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}")
            assert added.returncode == 0, added.stderr

        def placed() -> dict[str, list[tuple[int, str]]]:
            out: dict[str, list[tuple[int, str]]] = {}
            for i, prom in enumerate(shards):
                for target in prom.client.targets():
                    if target["labels"].get("host") in HOSTS:
                        out.setdefault(target["labels"]["host"], []).append((i, target["labels"]["job"]))
            return out

        # file_sd sees the files at once; discovery hands them to the scrapers every 5 s
        wait_for(lambda: set(placed()) == set(HOSTS), 20, interval=0.5, what="every host on some shard")
        wait_for(lambda: all(len(v) == 2 for v in placed().values()), 10, what="both jobs of every host")
        for name, where in placed().items():
            # both exporters of a host on one shard (the per-device rules join them), the one hashmod names
            assert sorted(where) == [(shard_of(name, 2), "fioscope"), (shard_of(name, 2), "node")], (name, where)
        assert {shard for where in placed().values() for shard, _ in where} == {0, 1}
    finally:
        for prom in shards:
            prom.stop()


PROMTOOL_3 = PROMETHEUS3_DIR / "promtool"


@pytest.mark.needs_tool("promtool3")
def test_native_histograms_with_custom_buckets_are_an_option_of_the_fioscope_job_for_prometheus_3(tmp_path):
    def jobs(*overrides: str) -> dict[str, dict]:
        config = yaml.safe_load(prometheus.render(load_settings(list(overrides)))["provisioning/prometheus/prometheus.yml"])
        return {job["job_name"]: job for job in config["scrape_configs"]}

    # off by default: Prometheus 2 refuses the key, and the rules and dashboards read the classic _bucket series
    assert not any("convert_classic_histograms_to_nhcb" in job for job in jobs().values())
    on = jobs("stack.convert_classic_histograms_to_nhcb=true")
    assert [name for name, job in on.items() if job.get("convert_classic_histograms_to_nhcb") is True] == ["fioscope"]
    if not built(PROMTOOL_3, "promtool3"):
        pytest.skip(f"{PROMTOOL_3}: Prometheus 3 not built")
    for rel, text in prometheus.render(load_settings(["stack.convert_classic_histograms_to_nhcb=true", "fleet.shards=2"])).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    for name in ("prometheus.yml", "prometheus-shard-0.yml", "prometheus-shard-1.yml"):
        proc = run([PROMTOOL_3, "check", "config", tmp_path / "provisioning" / "prometheus" / name])
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow  # ~30 s of a real Prometheus 3 server (make test-slow builds it; make test builds promtool alone)
@pytest.mark.needs_tool("prometheus3")
def test_concurrent_rule_evaluation_is_an_option_of_the_native_stack_that_prometheus_3_runs(tmp_path, monkeypatch):
    """stack.concurrent_rule_eval, stack.samples_per_chunk and stack.gogc: the native stack starts its Prometheus with
    --enable-feature=concurrent-rule-eval and --storage.tsdb.samples-per-chunk and writes runtime.gogc in its
    prometheus.yml, and a real Prometheus 3 started that way runs with all three and evaluates every rule group
    without error."""
    from fioscope_mixin.native import NativeStack

    off = NativeStack(tmp_path / "off").commands()["prometheus"]
    assert "--enable-feature=concurrent-rule-eval" not in off and not [f for f in off if "samples-per-chunk" in f]
    assert "runtime" not in yaml.safe_load(prometheus.render(load_settings())["provisioning/prometheus/prometheus.yml"])
    for key in ("samples_per_chunk", "gogc"):
        for bad in ("-1", "true", "1.5", "30s"):
            with pytest.raises(SystemExit, match=f"stack.{key}: expected"):
                NativeStack(tmp_path / "bad", [f"stack.{key}={bad}"])
    prometheus_3 = PROMTOOL_3.parent / "prometheus"
    if not built(prometheus_3, "prometheus3"):
        pytest.skip(f"{prometheus_3}: Prometheus 3 not built")
    monkeypatch.setenv("PATH", f"{prometheus_3.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("GOGC", raising=False)  # Prometheus takes the environment's as its default
    stack = NativeStack(tmp_path / "on", [f"stack.ports.prometheus={free_port()}", "stack.evaluation_interval=1s",
                                          "stack.concurrent_rule_eval=true", "stack.samples_per_chunk=30", "stack.gogc=200"],
                        without=("node_exporter", "alertmanager", "fioscope"))
    assert stack.commands()["prometheus"][0] == str(prometheus_3)
    stack.start()
    try:
        client = PromClient(stack.url("prometheus"))

        def evaluated() -> list[dict] | None:
            # the groups at the evaluation interval (those once a minute start at an offset within their minute)
            groups = [g for g in client.rules() if g["interval"] <= 1]
            return groups if len(groups) >= 10 and all(g["lastEvaluation"] > "2000" for g in groups) else None

        groups = wait_for(evaluated, 30, what="every rule group at the evaluation interval evaluated")
        assert "concurrent-rule-eval" in client.flags()["enable-feature"]
        assert client.flags()["storage.tsdb.samples-per-chunk"] == "30"
        assert "\ngo_gc_gogc_percent 200\n" in client.metrics_text()  # runtime.gogc of its prometheus.yml
        unhealthy = [(g["name"], r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] == "err"]
        assert not unhealthy, unhealthy
    finally:
        stack.stop()
