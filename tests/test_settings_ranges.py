"""Every setting has a range (issue 51 item 8 and its low items): each key of alerts/config.yaml, at NaN, +-inf,
negative, zero, huge and of a wrong type, is refused in one line naming it or accepted only where the rules it makes
pass promtool. The cases come from the shipped file and fioscope_mixin.settings.SCHEMA, so a new key is covered."""

from __future__ import annotations

import copy
import hashlib
import stat
import subprocess
import sys
import time

import pytest
import yaml
from fioscope_mixin import kubernetes, prometheus
from fioscope_mixin.settings import SCHEMA, SettingsError, apply_override, check_settings, load_settings, spec_for
from fioscope_testkit.binaries import require
from fioscope_testkit.cli import run
from fioscope_testkit.net import free_port
from fioscope_testkit.paths import REPO, checkout_env

HOSTILE = [".nan", ".inf", "-.inf", "-1", "-0.5", "0", "1.0e+300", "123456789012", "true", "'maybe'", "'false'", "[1]",
           "{a: 1}", "''", "0s", "1ms", "-1s", "100000w", "'job=\"x'"]
# no setting takes these: a number that is not finite, a list where a value or a section is due
NEVER = {".nan", ".inf", "-.inf", "[1]"}
# an example device for the per-device maps' rows (``*``)
DEVICE = "vdb"


def leaves(node: dict, keys: tuple[str, ...] = ()) -> list[str]:
    out = []
    for key, value in node.items():
        path = (*keys, str(key))
        out += leaves(value, path) if isinstance(value, dict) and value else [".".join(path)]
    return out


def setting_keys() -> list[str]:
    """Every key of the shipped file (the per-device maps themselves included), and one key of each per-device row."""
    per_device = [row.replace("*", DEVICE) for row in SCHEMA if row.startswith("thresholds.") and "*" in row]
    return sorted(set(leaves(load_settings())) | set(per_device))


def refused_in_one_line(key: str, exc: SettingsError) -> str | None:
    text = str(exc)
    if "\n" in text or key.split(".")[0] not in text:
        return f"{key}: not one line naming it: {text!r}"
    return None


def test_every_shipped_setting_has_a_row_and_passes_it():
    missing = [key for key in leaves(load_settings()) if spec_for(tuple(key.split("."))) is None
               and key not in {"thresholds.disk_latency_sla_per_device", "thresholds.disk_limits", "thresholds.disk_cap_per_device"}]
    assert not missing, missing


@pytest.mark.slow  # 2,500 cases, 180 of them accepted and rendered: about a minute
def test_every_key_at_every_hostile_value_is_refused_in_one_line_or_makes_rules_promtool_accepts(tmp_path):
    promtool = require("promtool")
    problems, accepted, rule_files = [], 0, {}
    keys = setting_keys()
    assert len(keys) > 120
    shipped = load_settings()
    for key in keys:
        for value in HOSTILE:
            item = f"{key}={value}"
            try:
                # load_settings([item]) without reading the file 2,500 times
                settings = copy.deepcopy(shipped)
                apply_override(settings, item)
                check_settings(settings)
                rendered = prometheus.render(settings)
                if key.startswith(("kubernetes_selectors.", "links.")):
                    rule = kubernetes.prometheus_rule(kubernetes.kubernetes_settings(settings))
                    rendered["kubernetes.rules.yaml"] = yaml.safe_dump({"groups": rule["spec"]["groups"]})
            except SettingsError as exc:
                if problem := refused_in_one_line(key, exc):
                    problems.append(problem)
                continue
            except Exception as exc:  # noqa: BLE001 - a traceback where a one-line refusal was due
                problems.append(f"{item}: {type(exc).__name__}: {exc}")
                continue
            if value in NEVER:
                problems.append(f"{item}: accepted")
                continue
            accepted += 1
            for rel, text in rendered.items():
                if rel.endswith(".rules.yaml"):
                    rule_files.setdefault(hashlib.sha256(text.encode()).hexdigest(), (item, rel, text))
    assert not problems, "\n".join(problems)
    # promtool on every distinct rule file of the accepted cases at once (one process: the CPU is shared)
    paths = []
    for digest, (item, rel, text) in rule_files.items():
        paths.append(tmp_path / f"{digest[:16]}.rules.yaml")
        paths[-1].write_text(f"# {item}: {rel}\n{text}")
    proc = run([promtool, "check", "rules", *paths], timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    print(f"{len(keys)} keys x {len(HOSTILE)} values: {accepted} accepted, {len(paths)} distinct rule files through promtool")


@pytest.mark.parametrize("item", [
    *(f"thresholds.rule_evaluation_busy_ratio={v}" for v in (".nan", ".inf", "1.0e+300", "0", "-0.1", "true")),
    *(f"thresholds.throttle.held_tolerance={v}" for v in (".nan", "-1", "0")),
    "thresholds.rule_evaluation_window=1ms", "thresholds.rule_evaluation_window=0s", "thresholds.columns_interval=1ms",
    "thresholds.throttle.baseline_median_interval=1ms",
    *(f"selectors.{k}={v}" for k in ("prometheus", "node", "device")
      for v in ("'job=\"x'", "'job=\"x\",'", "'job==\"x\"'", "'1job=\"x\"'", "'job=~\"(\"'", "''", "'job=\"a\" job=\"b\"'")),
    "kubernetes_selectors.prometheus='job=~\"[\"'",
    "thresholds.throttle.virtual_models='(unclosed'", "thresholds.throttle.cloud_machines='a\"b'",
    *(f"stack.ports.{p}={v}" for p in ("prometheus", "fioscope") for v in (".nan", "0", "65536", "80.5")),
    *(f"{k}={v}" for k in ("stack.place_rule_groups", "stack.concurrent_rule_eval", "thresholds.throttle.held_at_level",
                           "stack.scrape_tls.enabled") for v in ("'maybe'", "'false'", "'true'", "1")),
    "stack.evaluation_interval=0s",
])
def test_the_issue_s_nonsense_is_refused_in_one_line_naming_the_key(item):
    key = item.partition("=")[0]
    with pytest.raises(SettingsError) as caught:
        load_settings([item])
    assert "\n" not in str(caught.value) and str(caught.value).removeprefix("--set ").startswith(key + ":"), caught.value


def test_well_formed_selectors_and_ranges_are_accepted():
    settings = load_settings(['selectors.prometheus=job=~"prometheus|thanos-.+", instance!="a\\"b"',
                              "thresholds.rule_evaluation_busy_ratio=0.5", "thresholds.columns_interval=1m",
                              "thresholds.throttle.held_tolerance=0.01", "stack.place_rule_groups=true",
                              "thresholds.disk_limits.vdb.iops=3000", "thresholds.disk_cap_per_device.vdb=physical"])
    assert settings["thresholds"]["rule_evaluation_busy_ratio"] == 0.5


@pytest.mark.parametrize("item", ["stack.evaluation_interval=0s", "stack.evaluation_interval=6h", "stack.ports.prometheus=.nan"])
def test_placed_rule_groups_at_a_bad_interval_or_port_are_one_line_not_a_traceback_or_a_hang(item):
    """place_rule_groups with evaluation_interval 0s raised ZeroDivisionError; at 6h it searched for names for ever."""
    start = time.monotonic()
    with pytest.raises(SettingsError, match=f"^{item.partition('=')[0]}: "):
        prometheus.render(load_settings(["stack.place_rule_groups=true", item]))
    assert time.monotonic() - start < 5


def test_placement_at_the_longest_interval_allowed_ends():
    """The longest evaluation interval the settings take (under 5m): every group named in seconds, not hours."""
    start = time.monotonic()
    rendered = prometheus.render(load_settings(["stack.place_rule_groups=true", "stack.evaluation_interval=4m59s"]))
    assert "fioscope-iostat-" in rendered["alerts/recording.rules.yaml"]
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("command", [
    [sys.executable, "-m", "fioscope_mixin", "generate", "--only", "prometheus"],
    [sys.executable, "-m", "fioscope_mixin.native"],
])
@pytest.mark.parametrize("item", ["thresholds.rule_evaluation_busy_ratio=.nan", "selectors.prometheus='job=\"x'",
                                  "stack.place_rule_groups='false'", "stack.ports.prometheus=.inf",
                                  "thresholds.disk_limits=5", "stack.evaluation_interval=6h"])
def test_the_commands_refuse_a_bad_set_in_one_line_naming_the_key(tmp_path, command, item):
    # the launcher on free ports, should it start after all
    where = ["--out", str(tmp_path / "out")] if "generate" in command else [
        "--data-dir", str(tmp_path / "data"),
        *(arg for service in ("prometheus", "alertmanager", "node_exporter", "fioscope")
          if service not in item for arg in ("--set", f"stack.ports.{service}={free_port()}"))]
    proc = subprocess.run([*command, *where, "--set", item], capture_output=True, text=True, env=checkout_env(), timeout=120)
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1, proc.stderr
    assert item.partition("=")[0] in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_alertmanager_yml_with_a_webhook_is_written_0600(tmp_path):
    hook = "stack.alertmanager_webhook=http://127.0.0.1:5001/hook?token=secret"
    out = tmp_path / "out"
    (out / "provisioning" / "alertmanager").mkdir(parents=True)
    (out / "provisioning" / "alertmanager" / "alertmanager.yml").write_text("older copy\n")  # 0644, as left by an earlier run
    proc = subprocess.run([sys.executable, "-m", "fioscope_mixin", "generate", "--only", "prometheus", "--out", str(out),
                           "--set", hook], capture_output=True, text=True, env=checkout_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    written = out / "provisioning" / "alertmanager" / "alertmanager.yml"
    assert "token=secret" in written.read_text()
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "provisioning" / "prometheus" / "prometheus.yml").stat().st_mode) == 0o644

    from fioscope_testkit.native_stack import NativeStack
    stack = NativeStack(tmp_path / "data", [hook])  # writes its generated configuration into <data-dir>/config
    assert stat.S_IMODE((stack.root / "provisioning" / "alertmanager" / "alertmanager.yml").stat().st_mode) == 0o600


def test_the_prometheus_rule_s_runbook_links_are_public():
    """The PrometheusRule's runbook_url is links.kubernetes_runbook (the repository's runbook), never the stack's own
    http://127.0.0.1:7963/runbook; links.runbook, where set, is used everywhere."""
    rule = yaml.safe_load((REPO / "deploy" / "kubernetes" / "base" / "prometheusrule.yaml").read_text())
    urls = {r["annotations"]["runbook_url"].partition("#")[0] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert urls == {load_settings()["links"]["kubernetes_runbook"]}
    assert urls.pop().startswith("https://")
    own = kubernetes.prometheus_rule(kubernetes.kubernetes_settings(load_settings(["links.runbook=https://wiki.example/runbook"])))
    assert {r["annotations"]["runbook_url"].partition("#")[0] for g in own["spec"]["groups"] for r in g["rules"]
            if "alert" in r} == {"https://wiki.example/runbook"}
