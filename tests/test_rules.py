"""Rules and Prometheus/Alertmanager configuration: generated, valid, and unit-tested with promtool."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from fioscope_mixin import names as n
from fioscope_testkit.binaries import PROMETHEUS_LINES, require, require_prometheus, rule_tests_for
from fioscope_testkit.cli import run
from fioscope_testkit.paths import FIXTURES, REPO

ALERTS = REPO / "alerts"
# the rule files and the stack config (the dashboards and Kubernetes objects: test_dashboards, test_kubernetes)
GENERATE = [sys.executable, "-m", "fioscope_mixin", "generate", "--only", "prometheus"]


def test_committed_files_are_generated_from_config():
    proc = run(GENERATE + ["--check"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("line", PROMETHEUS_LINES)
def test_promtool_check_rules_and_config(line):
    """Clean on Prometheus 2.42 and 3.x (3.x lints duplicate rules too)."""
    promtool = require_prometheus("promtool", line)
    proc = run([promtool, "check", "rules", "--lint-fatal", *map(str, sorted(ALERTS.glob("*.rules.yaml")))])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run([promtool, "check", "config", str(REPO / "provisioning" / "prometheus" / "prometheus.yml")])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 rule files found" in proc.stdout


def _record_readers() -> dict[str, set[str]]:
    """Every recorded series of the generated rules and what reads it: an alert (its expression or annotations),
    another rule, a dashboard, or the exporter's code (reports, capture)."""
    rules = [rule for path in sorted(ALERTS.glob("*.rules.yaml"))
             for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]
    readers: dict[str, set[str]] = {rule["record"]: set() for rule in rules if "record" in rule}
    sources = [(rule.get("alert") or rule["record"], rule["expr"] + json.dumps(rule.get("annotations", {}))) for rule in rules]
    sources += [(f"dashboard {path.name}", path.read_text()) for path in sorted((REPO / "dashboards").glob("*.json"))]
    sources += [(f"exporter {path.name}", path.read_text()) for path in sorted((REPO / "exporter").rglob("*.py"))]
    for name in readers:
        reference = re.compile(re.escape(name) + r"(?![\w:])")
        readers[name] = {source for source, text in sources if source != name and reference.search(text)}
    return readers


def test_every_recorded_series_is_read():
    """A fleet pays for every recorded series of every device: none that no alert, rule, dashboard or report reads."""
    readers = _record_readers()
    assert len(readers) > 50
    assert not [name for name, by in readers.items() if not by]
    assert readers["fioscope:disk_read_merges_ratio"] == {"dashboard disk-under-load.json"}


def test_alertmanager_config():
    amtool = require("amtool")
    proc = run([amtool, "check-config", str(REPO / "provisioning" / "alertmanager" / "alertmanager.yml")])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _rule_test_cases() -> list:
    """(file, line) for every promtool test file of each Prometheus line, one test each: the files take 1-30 s each
    (two minutes in all on 2.42), and the workers share them (the 3.x ones wait for a fresh host's promtool build)."""
    paths = sorted((ALERTS / "tests").glob("*.test.yaml"))
    cases = []
    for line in PROMETHEUS_LINES:
        value, marks = (line.values[0], line.marks) if hasattr(line, "values") else (line, ())
        cases += [pytest.param(path.name, value, marks=marks, id=f"{path.name.removesuffix('.test.yaml')}-{value}")
                  for path in rule_tests_for(value, paths)]
    return cases


def test_every_rule_test_file_runs_on_each_line():
    """The files each line runs: all of them, a file generated for 3.x in place of its 2.42 twin."""
    paths = sorted((ALERTS / "tests").glob("*.test.yaml"))
    by_line = {line: {name for name, line_ in (case.values for case in _rule_test_cases()) if line_ == line} for line in "23"}
    assert by_line["2"] == {p.name for p in paths if ".prometheus" not in p.name}
    assert len(by_line["3"]) >= len(by_line["2"]) and all(".prometheus2" not in name for name in by_line["3"])


@pytest.mark.parametrize("name, line", _rule_test_cases())
def test_promtool_unit_tests(name, line):
    """Every rule test passes on Prometheus 2.42 and 3.x (3.x's range selectors are left-open: one evaluation's
    difference, which the generated detection test is robust to)."""
    promtool = require_prometheus("promtool", line)
    proc = run([promtool, "test", "rules", str(ALERTS / "tests" / name)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == 1


def rules_of(path: Path) -> list[dict]:
    return [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


def test_every_alert_has_firing_and_silent_cases():
    alerts = {r["alert"] for r in rules_of(ALERTS / "alerts.rules.yaml")}
    firing, silent = set(), set()
    for path in (ALERTS / "tests").glob("*.test.yaml"):
        for group in yaml.safe_load(path.read_text())["tests"]:
            for case in group.get("alert_rule_test", []):
                (firing if case["exp_alerts"] else silent).add(case["alertname"])
    assert alerts - firing == set(), "alerts without a firing case"
    assert alerts - silent == set(), "alerts without a silent case"


def test_every_recording_rule_has_a_value_check():
    records = {r["record"] for r in rules_of(ALERTS / "recording.rules.yaml")}
    text = "".join((ALERTS / "tests" / name).read_text() for name in ("recording.test.yaml", "detection.test.yaml", "cause.test.yaml", "fio.test.yaml",
                                                                  "instance_limit.test.yaml"))
    checked = set(re.findall(r"fioscope:[a-z0-9_:]+", text))
    assert records - checked == set()


def test_alert_metadata_follows_mixin_conventions():
    for rule in rules_of(ALERTS / "alerts.rules.yaml"):
        assert re.fullmatch(r"Fioscope[A-Z][A-Za-z]+", rule["alert"]), rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        ann = rule["annotations"]
        assert set(ann) == {"summary", "description", "runbook_url", "dashboard_url"}
        assert "{{" in ann["description"], f"{rule['alert']}: description should show measured values"
        anchor = ann["runbook_url"].split("#")[1]
        runbook = (REPO / "docs" / "runbook.md").read_text()
        assert re.search(rf"^##+ {rule['alert']}\b", runbook, re.M), f"no runbook section for {rule['alert']}"
        assert anchor == rule["alert"].lower()
    names = {r["alert"] for r in rules_of(ALERTS / "alerts.rules.yaml")}
    assert any("Throttl" in n for n in names) and any("Fsync" in n for n in names)


def test_thresholds_live_in_one_place(tmp_path):
    """The 10 ms line is one setting: changing it changes every fsync rule, and the exporter's verdict agrees."""
    from fioscope import verdicts
    from fioscope.cli import build_parser
    from fioscope_mixin.settings import default_fsync_threshold

    settings = yaml.safe_load((ALERTS / "config.yaml").read_text())
    assert settings["thresholds"]["etcd_fsync_p99_seconds"] == default_fsync_threshold()
    # the CLI's default comes from the same file, not a second constant
    assert build_parser().parse_args(["run", "etcd-wal", "--target.dir", "/x"]).fsync_threshold is None
    assert not hasattr(verdicts, "ETCD_FSYNC_P99_SECONDS")
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "thresholds.etcd_fsync_p99_seconds=0.005"])
    assert proc.returncode == 0, proc.stderr
    generated = (tmp_path / "alerts" / "alerts.rules.yaml").read_text()
    assert "> 0.005" in generated and "> 0.01\n" not in generated
    assert generated.count("0.005") >= 4  # fio last run, near-limit, histogram, etcd WAL


def test_overrides_per_device_sla_and_limits(tmp_path):
    promtool_test_on_generated(tmp_path, "overrides.test.yaml", "thresholds.disk_limits={vdb: {iops: 1000}}",
                               "thresholds.disk_latency_sla_per_device={vdb: 0.010}")


def test_a_load_ending_is_no_stall_at_a_short_rate_window(tmp_path):
    """At the e2e stack's 20 s rate window (shorter than the stall window) a deep-queue load that has just ended is idle,
    not stalled; a disk stalled beside it still is (fixture: stall_short_rate_window.test.yaml)."""
    promtool_test_on_generated(tmp_path, "stall_short_rate_window.test.yaml", "stack.scrape_interval=5s",
                               "stack.evaluation_interval=5s", "stack.rate_window=20s")


def promtool_test_on_generated(tmp_path: Path, fixture: str, *overrides: str) -> None:
    """A promtool test fixture (tests/fixtures/promtool) run against the rules generated with ``overrides``."""
    promtool = require("promtool")
    proc = run(GENERATE + ["--out", str(tmp_path), *(a for o in overrides for a in ("--set", o))])
    assert proc.returncode == 0, proc.stderr
    tests = tmp_path / "alerts" / "tests"
    tests.mkdir()
    shutil.copy(FIXTURES / "promtool" / fixture, tests)
    proc = run([promtool, "test", "rules", str(tests / fixture)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_short_intervals_for_the_e2e_stack(tmp_path):
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "stack.scrape_interval=1s", "--set", "stack.evaluation_interval=1s",
                           "--set", "durations.throttled_fio=5s", "--set", "stack.alertmanager_webhook=http://127.0.0.1:5001/"])
    assert proc.returncode == 0, proc.stderr
    prom = yaml.safe_load((tmp_path / "provisioning" / "prometheus" / "prometheus.yml").read_text())
    assert prom["global"]["scrape_interval"] == "1s"
    am = yaml.safe_load((tmp_path / "provisioning" / "alertmanager" / "alertmanager.yml").read_text())
    assert am["receivers"][0]["webhook_configs"][0]["url"] == "http://127.0.0.1:5001/"
    throttled = [r for r in rules_of(tmp_path / "alerts" / "alerts.rules.yaml") if r["alert"] == "FioscopeDiskThrottledUnderFioLoad"]
    assert throttled[0]["for"] == "5s"


def test_pages_follow_their_records_and_the_rest_run_once_an_interval():
    """The pages of an episode (and the cause alerts) are evaluated three times an interval, every other alert once."""
    groups = {g["name"]: g for g in yaml.safe_load((ALERTS / "alerts.rules.yaml").read_text())["groups"]}
    assert sorted(groups) == ["fioscope-alerts", "fioscope-alerts-sustained", "fioscope-cause-alerts"]
    pages, sustained = ({r["alert"] for r in groups[name]["rules"]} for name in ("fioscope-alerts", "fioscope-alerts-sustained"))
    assert pages == set(n.EPISODE_PAGES) - set(n.CAUSE_ALERTS) and not pages & sustained
    assert pages | sustained | {r["alert"] for r in groups["fioscope-cause-alerts"]["rules"]} >= set(n.ALERTS) - {n.ALERT_DISK_AT_PROVISIONED_LIMIT}
    assert groups["fioscope-alerts"]["interval"] == groups["fioscope-cause-alerts"]["interval"] == "5s"
    assert "interval" not in groups["fioscope-alerts-sustained"]


def test_bad_override_is_refused(tmp_path):
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "nonsense"])
    assert proc.returncode != 0 and "expected key.path=value" in proc.stderr


def test_dashboards_without_the_generate_extra_are_one_line_naming_it(tmp_path):
    """`pip install ./mixin` without [generate] has no dashboard SDK: generating the dashboards says which extra, no
    traceback; the rules still generate (the SDK hidden from the import system here)."""
    hide = ("import sys, runpy; sys.modules['grafana_foundation_sdk'] = None; sys.argv = ['fioscope_mixin', *sys.argv[1:]]; "
            "runpy.run_module('fioscope_mixin', run_name='__main__')")
    proc = run([sys.executable, "-c", hide, "generate", "--out", str(tmp_path)])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "fioscope-mixin[generate]" in proc.stderr, proc.stderr
    proc = run([sys.executable, "-c", hide, "generate", "--out", str(tmp_path), "--only", "prometheus"])
    assert proc.returncode == 0 and (tmp_path / "alerts" / "alerts.rules.yaml").is_file(), proc.stderr


def test_lookback_shorter_than_its_maxima_is_refused(tmp_path):
    """The step-down's and the write-back cliff's peaks are read from two-minute maxima: a shorter lookback is an error
    naming the key."""
    for key in ("thresholds.throttle.step_down_lookback", "thresholds.write_cliff_window"):
        proc = run(GENERATE + ["--out", str(tmp_path), "--set", f"{key}=90s"])
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"{key}: at least 2m" in proc.stderr and "Traceback" not in proc.stderr
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "thresholds.throttle.step_down_lookback=2m"])
    assert proc.returncode == 0, proc.stderr
    assert "max_over_time(fioscope:disk_iops:max2m[2m])" in (tmp_path / "alerts" / "recording.rules.yaml").read_text()


def test_each_normal_is_a_group_of_its_own_recomputed_within_the_lookback(tmp_path):
    """The three 6h medians each have a group at thresholds.throttle.baseline_median_interval; an interval Prometheus's
    5m lookback would not bridge is an error naming the key."""
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "thresholds.throttle.baseline_median_interval=5m"])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "thresholds.throttle.baseline_median_interval: under 5m" in proc.stderr and "Traceback" not in proc.stderr
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "thresholds.throttle.baseline_median_interval=4m"])
    assert proc.returncode == 0, proc.stderr
    groups = yaml.safe_load((tmp_path / "alerts" / "recording.rules.yaml").read_text())["groups"]
    normals = {n.DISK_AWAIT_BASELINE_SECONDS, n.DISK_READ_AWAIT_BASELINE_SECONDS, n.DISK_WRITE_AWAIT_BASELINE_SECONDS}
    # the groups holding a normal (a 6h median), found by name: the held band's 5-minute medians are no normal
    medians = [g for g in groups if any(r.get("record") in normals for r in g["rules"])]
    assert sorted(r["record"] for g in medians for r in g["rules"]) == sorted(normals)
    assert [(g["interval"], len(g["rules"])) for g in medians] == [("4m", 1)] * 3


def test_the_dashboards_columns_run_every_columns_interval_and_nothing_else_moves(tmp_path):
    """thresholds.columns_interval (a fleet's 1m) puts the iostat columns, merges and avg-cpu groups, which only the
    dashboards and the cause's steal test read, on that interval and leaves every other group as it was; an interval
    Prometheus's 5m lookback would not bridge is an error naming the key."""
    proc = run(GENERATE + ["--out", str(tmp_path / "fleet"), "--set", "thresholds.columns_interval=1m"])
    assert proc.returncode == 0, proc.stderr
    default = run(GENERATE + ["--out", str(tmp_path / "default")])
    assert default.returncode == 0, default.stderr
    fleet, every = ({g["name"]: g for g in yaml.safe_load((tmp_path / d / "alerts" / "recording.rules.yaml").read_text())["groups"]}
                    for d in ("fleet", "default"))
    columns = {"fioscope-iostat-columns", "fioscope-iostat-merges", "fioscope-cpu"}
    assert {name: g.get("interval") for name, g in fleet.items() if name in columns} == dict.fromkeys(columns, "1m")
    assert all("interval" not in every[name] for name in columns)
    assert {name: g for name, g in fleet.items() if name not in columns} == {
        name: g for name, g in every.items() if name not in columns}
    assert [fleet[name]["rules"] for name in sorted(columns)] == [every[name]["rules"] for name in sorted(columns)]
    proc = run(GENERATE + ["--out", str(tmp_path / "late"), "--set", "thresholds.columns_interval=5m"])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "thresholds.columns_interval: under 5m" in proc.stderr and "Traceback" not in proc.stderr


def test_unknown_or_misplaced_override_names_the_key(tmp_path):
    """A typo is an error naming the key and the closest valid one; a path through a value is refused, no traceback."""
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "durations.throtled_fio=10s"])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "durations.throtled_fio" in proc.stderr and "closest: throttled_fio" in proc.stderr
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "durations.fsync.x=1s"])
    assert proc.returncode == 2 and "durations.fsync is a value" in proc.stderr and "Traceback" not in proc.stderr
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "thresholds.disk_limits.vdb.iops=500"])
    assert proc.returncode == 0, proc.stderr
    assert 'fioscope:disk_iops{device="vdb"} / 500' in (tmp_path / "alerts" / "recording.rules.yaml").read_text()


def test_generators_and_stack_share_one_settings_loader():
    """The generators, the native stack and the exporter read alerts/config.yaml only through fioscope_mixin.settings,
    so an override means the same everywhere."""
    from fioscope_mixin.settings import SettingsError, load_settings

    sources = [*(REPO / "mixin").rglob("*.py"), *(REPO / "exporter").rglob("*.py")]
    # a path built to the file (`/ "config.yaml"`, `("alerts/config.yaml")`) anywhere but the loader
    readers = [p.relative_to(REPO) for p in sources if p.name != "settings.py" and re.search(r'(/ |\()"(alerts/)?config\.yaml"', p.read_text())]
    assert readers == [], readers
    for module in ("dashboards", "native", "hosts"):
        assert "from fioscope_mixin.settings import" in (REPO / "mixin" / "fioscope_mixin" / f"{module}.py").read_text(), module
    assert load_settings(["stack.scrape_interval=1s"])["stack"]["scrape_interval"] == "1s"
    try:
        load_settings(["stack.scrape_intervall=1s"])
    except SettingsError as exc:
        assert "closest: scrape_interval" in str(exc)
    else:
        raise AssertionError("typo accepted")


@pytest.mark.slow  # one observing promtool run, ~20 s; detection.test.yaml pins its result in the default run
def test_detection_scenarios_hold():
    """Every cap shape fires its alert naming the ceiling in time, the controls and upper layers stay silent
    (alerts/tests/scenarios.py judges one promtool run; detection.test.yaml pins the result)."""
    require("promtool")
    proc = run([sys.executable, str(ALERTS / "tests" / "scenarios.py"), "--check"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow  # one observing promtool run per line at 5 s steps, ~1 min each
def test_detection_scenarios_hold_at_5s_scrapes():
    """The same scenarios sampled every 5 s against the rules generated for 5 s scrapes: every cap pages within
    30 s of onset (issue 25's target at 5 s), once, for its whole episode; the controls stay silent."""
    require("promtool")
    proc = run([sys.executable, str(ALERTS / "tests" / "scenarios.py"), "--check", "--step", "5"], timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow  # one observing promtool run per line at 1 s resolution, ~25 s each
def test_detection_scenarios_hold_whatever_the_scrape_phase():
    """A live host's scrapes keep an offset of their own to the rule groups' evaluations. Scraped 10 s after each
    evaluation at 15 s, every cap still pages (one evaluation later than in phase: its first loaded scrape is seen
    then) and the controls stay silent. Fio's window of 20 s held two 15 s scrapes only on hosts scraped less than 5 s
    before the evaluation: on the others FioscopeDiskThrottledUnderFioLoad never fired."""
    require("promtool")
    proc = run([sys.executable, str(ALERTS / "tests" / "scenarios.py"), "--check", "--phase", "10"], timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow  # one observing promtool run, ~20 s; cause.test.yaml pins its result in the default run
def test_cause_scenarios_hold():
    """Every slow episode is named by its one cause within two minutes of its onset, never by another, and the
    healthy controls get none (alerts/tests/cause_scenarios.py judges one promtool run; cause.test.yaml pins it)."""
    require("promtool")
    proc = run([sys.executable, str(ALERTS / "tests" / "cause_scenarios.py"), "--check"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow  # one observing promtool run per line at 1 s resolution, ~10 s each
def test_cause_scenarios_hold_whatever_the_scrape_phase():
    """The cause cases scraped 10 s after each evaluation at 15 s: each episode still named by its one cause (one
    evaluation later at most), and a write-back cliff onto a capped volume under fio still paged as throttling (with
    fio's window one scrape long there, it never was)."""
    require("promtool")
    proc = run([sys.executable, str(ALERTS / "tests" / "cause_scenarios.py"), "--check", "--phase", "10"], timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _in_cluster(cluster: str, series: list[dict]) -> list[dict]:
    return [{**s, "series": s["series"].replace("{", f'{{cluster="{cluster}",', 1)} for s in series]


def cluster_test(expected: list[dict], rules_dir: Path) -> dict:
    """Two clusters with the same host, instance and device names, fio loading the device in both:
    east's device is capped at 700 r/s + 300 w/s from 30m, west's stays healthy."""
    import scenarios as sc  # alerts/tests/scenarios.py (pytest.ini's pythonpath): the device models of the detection matrix

    steps, on, off = sc.MINUTES * 60 // sc.STEP, sc.ONSET // sc.STEP, sc.END // sc.STEP
    series: list[dict] = []
    for i, (cluster, model) in enumerate([("east", sc.after_onset(sc.iops_cap)), ("west", sc.light)]):
        series += _in_cluster(cluster, sc.series_of(sc.Device("s6", "vdb", model), i))
        fio = f'cluster="{cluster}",job="fioscope",instance="s6:7963",host="s6",target="t",device="vdb",hostname="",jobname="load"'
        series.append({"series": f"fio_run_running{{{fio}}}", "values": f"0x{on - 1} 1x{off - on - 1} 0x{steps - off}"})
    return {"rule_files": ["../recording.rules.yaml", "../alerts.rules.yaml"], "evaluation_interval": f"{sc.STEP}s",
            "group_eval_order": sc.group_order(rules_dir),
            "tests": [{"name": "two clusters, same names", "interval": f"{sc.STEP}s", "input_series": series,
                       "alert_rule_test": expected}]}


def test_alert_links_open_the_runbook_the_exporter_serves(exporter_factory, tmp_path):
    """Default links: every runbook_url is the exporter's /runbook (the page has the anchor, the markdown escaped) and
    every dashboard_url the path /d/<uid> (docs/rules.md "Alert links"); links.* set by an operator replace both bases."""
    from fioscope_testkit.net import http_get
    exporter = exporter_factory()
    page = http_get(f"http://127.0.0.1:{exporter.port}/runbook", timeout=5)
    ids = set(re.findall(r'<h\d id="([^"]+)"', page))
    uids = {d["uid"] for d in map(json.loads, map(Path.read_text, (REPO / "dashboards").glob("*.json")))}
    for rule in rules_of(ALERTS / "alerts.rules.yaml"):
        base, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert base == "http://127.0.0.1:7963/runbook" and anchor in ids, rule["alert"]
        assert re.fullmatch("/d/(.+)", rule["annotations"]["dashboard_url"])[1] in uids, rule["alert"]
    assert "<pre>" in page and "&gt;" in page and "<script" not in page  # the runbook's own > and < are text
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "links.runbook=https://wiki.example/fioscope",
                           "--set", "links.grafana=https://grafana.example/"])
    assert proc.returncode == 0, proc.stderr
    ann = rules_of(tmp_path / "alerts" / "alerts.rules.yaml")[0]["annotations"]
    assert ann["runbook_url"].startswith("https://wiki.example/fioscope#") and ann["dashboard_url"].startswith("https://grafana.example/d/")


def test_etcd_is_scraped_only_where_the_settings_name_it(tmp_path):
    jobs = [j["job_name"] for j in yaml.safe_load((REPO / "provisioning" / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]]
    assert "etcd" not in jobs and "node" in jobs
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", 'stack.etcd_endpoints=["10.0.0.5:2379", "10.0.0.6:2379"]'])
    assert proc.returncode == 0, proc.stderr
    config = yaml.safe_load((tmp_path / "provisioning" / "prometheus" / "prometheus.yml").read_text())
    [etcd] = [j for j in config["scrape_configs"] if j["job_name"] == "etcd"]
    assert etcd["static_configs"] == [{"targets": ["10.0.0.5:2379", "10.0.0.6:2379"]}]
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "stack.etcd_endpoints=10.0.0.5:2379"])
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1 and "stack.etcd_endpoints" in proc.stderr, proc.stderr


def test_cluster_label_keeps_clusters_apart(tmp_path):
    """selectors.cluster_label: only the capped cluster's device alerts, labelled with its cluster; the
    healthy twin of the same host/instance/device name in the other cluster stays silent."""
    import scenarios as sc
    promtool = require("promtool")
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "selectors.cluster_label=cluster"])
    assert proc.returncode == 0, proc.stderr
    am = yaml.safe_load((tmp_path / "provisioning" / "alertmanager" / "alertmanager.yml").read_text())
    assert am["route"]["group_by"][0] == "cluster"
    description = ("vdb on s6 is throttled at its provider's cap: reads flat at ~700/s, writes flat at ~300/s (no limit declared); util 100%, "
                   "queue 256, await 256ms (the device's normal is 1ms; r_await 256ms against a normal of 1ms; "
                   "w_await 256ms, no normal known yet).")
    fired = [{"exp_labels": {"severity": "critical", "cluster": "east", "instance": "s6:9100", "job": "node", "host": "s6", "device": "vdb"},
              "exp_annotations": {"summary": "Disk throttled while fio loads it", "description": description,
                                  "runbook_url": "http://127.0.0.1:7963/runbook#fioscopediskthrottledunderfioload",
                                  "dashboard_url": "/d/fioscope-disk"}}]
    before, after = sc.duration(sc.ONSET - 60), sc.duration(sc.ONSET + 180)
    expected = [{"eval_time": before, "alertname": "FioscopeDiskThrottledUnderFioLoad", "exp_alerts": []},
                {"eval_time": after, "alertname": "FioscopeDiskThrottledUnderFioLoad", "exp_alerts": fired},
                {"eval_time": after, "alertname": "FioscopeDiskThrottled", "exp_alerts": []}]
    tests = tmp_path / "alerts" / "tests"
    tests.mkdir()
    (tests / "clusters.test.yaml").write_text(yaml.safe_dump(cluster_test(expected, tmp_path / "alerts"), sort_keys=False, width=1000))
    proc = run([promtool, "test", "rules", str(tests / "clusters.test.yaml")])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_one_yaml_loader_takes_merge_keys_and_refuses_duplicates():
    """compose.yaml uses `<<: *anchor` (read with aliases=True: the repository's own file); a merged key overridden
    explicitly is not a duplicate, a key written twice is; any other file's anchors are refused (issue 24: alias bombs)."""
    import pytest
    from fioscope_mixin.yamlfile import YamlError, loads_yaml

    assert loads_yaml("base: &b {a: 1, b: 2}\nx:\n  <<: *b\n  b: 3\n", aliases=True)["x"] == {"a": 1, "b": 3}
    with pytest.raises(YamlError, match="anchors and aliases"):
        loads_yaml("base: &b {a: 1, b: 2}\nx:\n  <<: *b\n  b: 3\n", "t.yaml")
    with pytest.raises(YamlError, match="duplicate key 'b'"):
        loads_yaml("x:\n  b: 1\n  b: 2\n", "t.yaml")


def test_every_rule_and_alert_is_named_in_names_py(tmp_path):
    """fioscope_mixin.names is the one list: every record and alert of the generated rule files is in it, and every
    name in it is generated (with thresholds.disk_limits set, so the rules that need it exist too)."""
    from fioscope_mixin import names

    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "thresholds.disk_limits.vdb.iops=500"])
    assert proc.returncode == 0, proc.stderr
    generated = [r for f in ("recording", "alerts") for r in rules_of(tmp_path / "alerts" / f"{f}.rules.yaml")]
    assert {r["record"] for r in generated if "record" in r} == set(names.RECORDS)
    assert {r["alert"] for r in generated if "alert" in r} == set(names.ALERTS)
    assert set(names.THROTTLING_ALERTS) == {a for a in names.ALERTS if a.startswith("FioscopeDiskThrottled")}
    dashboards = {json.loads(p.read_text())["uid"] for p in (REPO / "dashboards").glob("*.json")}
    assert dashboards == set(names.DASHBOARD_UIDS.values())


def test_per_device_class_override_comes_first(tmp_path):
    """thresholds.disk_cap_per_device wins over every other answer (docs/device-class.md): instance storage declared a
    provider's volume is one; a remote volume's model on a cloud machine declared physical is local hardware; the
    devices not declared keep the machine's answer."""
    promtool = require("promtool")
    proc = run(GENERATE + ["--out", str(tmp_path), "--set", "thresholds.disk_cap_per_device={nvme1n1: provider, sdb: physical}"])
    assert proc.returncode == 0, proc.stderr

    def info(name: str, **labels: str) -> dict:
        pairs = {"job": "fioscope", "instance": "g:7963", "host": "g", **labels}
        return {"series": name + "{" + ",".join(f'{k}="{v}"' for k, v in pairs.items()) + "}", "values": "1x8"}
    series = [info("fioscope_machine_info", sys_vendor="Google", product_name="Google Compute Engine", chassis_asset_tag="",
                   bios_vendor="", product_family="", chassis_vendor=""),
              info("fioscope_disk_model_info", device="nvme1n1", vendor="", model="nvme_card"),
              info("fioscope_disk_model_info", device="nvme2n1", vendor="", model="nvme_card1"),
              info("fioscope_disk_model_info", device="sdb", vendor="Google", model="PersistentDisk"),
              info("fioscope_disk_model_info", device="nvme3n1", vendor="", model="Contoso Volume")]  # not declared: the cloud's
    test = {"rule_files": [str(tmp_path / "alerts" / "recording.rules.yaml")], "evaluation_interval": "15s",
            "tests": [{"interval": "15s", "input_series": series, "promql_expr_test": [
                {"expr": "fioscope:disk_physical_device", "eval_time": "1m", "exp_samples": [
                    {"labels": f'fioscope:disk_physical_device{{device="{d}",host="g"}}', "value": 1} for d in ("nvme2n1", "sdb")]}]}]}
    (tmp_path / "override.test.yaml").write_text(yaml.safe_dump(test))
    proc = run([promtool, "test", "rules", str(tmp_path / "override.test.yaml")])
    assert proc.returncode == 0, proc.stdout + proc.stderr
