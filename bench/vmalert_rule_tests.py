#!/usr/bin/env python3
"""The rules' promtool tests run by VictoriaMetrics' vmalert-tool: what holds on vmalert and MetricsQL (docs/fleet.md).

    python3 bench/vmalert_rule_tests.py [--vmalert-tool PATH] [--rule-per-group] [alerts/tests/NAME.test.yaml ...]

Each promtool test file is rewritten into vmalert-tool's format and run; per file it prints the alert and expression
checks that failed, of how many, and the first failure. The rewrite changes no rule and no expected value; it only
removes differences of the test tools themselves:

- ``promql_expr_test`` is ``metricsql_expr_test``; an alert check names its rule group; rule files are absolute.
- vmalert-tool's clock starts at 2000-01-01 (promtool's at the epoch): input series named ``*_timestamp_seconds`` are
  shifted by as much, so a result's age reads the same.
- MetricsQL keeps ``__name__`` through ``round()`` where PromQL drops it: an expression check that expects no name
  drops it with ``label_del``.

``--rule-per-group`` also gives every rule a group of its own, in the rule files' order. vmalert writes a group's
results when the whole group has run, so a rule reading a record of its own group reads the previous evaluation's
(in the rules here, 105 of 181 rules do); with one rule a group that difference is gone and what is left is MetricsQL.
vmalert-tool reads float samples only: a file with native histogram input is reported and skipped.
Build vmalert-tool with ``go install github.com/VictoriaMetrics/VictoriaMetrics/app/vmalert-tool@v1.151.0``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from fioscope_mixin.yamlfile import load_yaml

REPO = Path(__file__).resolve().parent.parent

DEFAULT_TOOL = Path.home() / ".cache" / "fioscope" / "victoriametrics-v1.151.0" / "vmalert-tool"
EPOCH_2000 = 946684800  # vmalert-tool's t=0
FAILED_ALERT = re.compile(r"groupname: (\S*), alertname: (\S+), time: (\S+), ")
FAILED_EXPR = re.compile(r'^\s+expr: "(.*)", time: (\S+?),', re.MULTILINE)


def shifted(values: str) -> str:
    """promtool's expanding notation (``a+bxn``, ``axn``, ``_``, ``stale``) with every start value moved to 2000."""
    def move(item: str) -> str:
        m = re.fullmatch(r"([+-]?[\d.]+(?:[eE][+-]?\d+)?)((?:[+-][\d.]+(?:[eE][+-]?\d+)?)?x\d+)?", item)
        if not m:
            return item
        step = m.group(2) or ""
        return f"{float(m.group(1)) + EPOCH_2000:.12g}" + ("+0" + step if step.startswith("x") else step)
    return " ".join(move(item) for item in values.split())


def one_rule_per_group(rule_files: list[str], out: Path) -> tuple[list[str], list[str]]:
    files, order = [], []
    for path in rule_files:
        groups = []
        for group in load_yaml(Path(path))["groups"]:
            for i, rule in enumerate(group["rules"]):
                groups.append({**{k: v for k, v in group.items() if k != "rules"}, "name": f"{group['name']}/{i:03d}",
                               "rules": [rule]})
                order.append(groups[-1]["name"])
        target = out / Path(path).name
        target.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, width=1 << 20))
        files.append(str(target))
    return files, order


def convert(test_file: Path, out: Path, rule_per_group: bool) -> Path:
    doc = load_yaml(test_file)
    rule_files = [str((test_file.parent / f).resolve()) for f in doc["rule_files"]]
    group_of = {rule["alert"]: group["name"] for f in rule_files for group in load_yaml(Path(f))["groups"]
                for rule in group["rules"] if "alert" in rule}
    converted = {"rule_files": rule_files, "evaluation_interval": doc.get("evaluation_interval", "1m")}
    if rule_per_group:
        converted["rule_files"], order = one_rule_per_group(rule_files, out)
        rank = {name: i for i, name in enumerate(doc.get("group_eval_order", []))}
        converted["group_eval_order"] = sorted(order, key=lambda name: rank.get(name.rsplit("/", 1)[0], -1))
    elif "group_eval_order" in doc:
        converted["group_eval_order"] = doc["group_eval_order"]
    tests = []
    for test in doc["tests"]:
        series = [{"series": str(s["series"]),
                   "values": shifted(str(s["values"])) if re.match(r"[\w:]*_timestamp_seconds\b", str(s["series"]))
                   else str(s["values"])} for s in test.get("input_series", [])]
        alerts = [{"eval_time": a["eval_time"], **({} if rule_per_group else {"groupname": group_of.get(a["alertname"], "?")}),
                   "alertname": a["alertname"], "exp_alerts": a.get("exp_alerts") or []} for a in test.get("alert_rule_test", [])]
        exprs = []
        for e in test.get("promql_expr_test", []):
            samples = e.get("exp_samples") or []
            nameless = samples and all("__name__" not in str(s.get("labels", "")) and str(s.get("labels", "{")).lstrip()[:1] in ("{", "")
                                       for s in samples)
            exprs.append({"expr": f'label_del(({e["expr"]}), "__name__")' if nameless else e["expr"],
                          "eval_time": e["eval_time"], "exp_samples": samples})
        tests.append({k: v for k, v in {"name": test.get("name"), "interval": test.get("interval"), "input_series": series,
                                        "external_labels": test.get("external_labels"), "alert_rule_test": alerts,
                                        "metricsql_expr_test": exprs}.items() if v})
    converted["tests"] = tests
    target = out / test_file.name
    target.write_text(yaml.safe_dump(converted, sort_keys=False, width=1 << 20, allow_unicode=True))
    return target


def checks(test_file: Path) -> tuple[int, int]:
    doc = load_yaml(test_file)
    return (sum(len(t.get("alert_rule_test", [])) for t in doc["tests"]),
            sum(len(t.get("promql_expr_test", [])) for t in doc["tests"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="promtool test files (default: alerts/tests/*.test.yaml)")
    parser.add_argument("--vmalert-tool", type=Path, default=DEFAULT_TOOL, help=f"the vmalert-tool binary (default {DEFAULT_TOOL})")
    parser.add_argument("--rule-per-group", action="store_true", help="every rule in a group of its own (see above)")
    args = parser.parse_args()
    if not args.vmalert_tool.is_file():
        parser.error(f"--vmalert-tool {args.vmalert_tool}: not found (go install .../app/vmalert-tool@v1.151.0)")
    files = args.files or sorted((REPO / "alerts" / "tests").glob("*.test.yaml"))
    print(f"{'file':32} {'alert checks failed':>20} {'expr checks failed':>19}  first failure")
    for test_file in files:
        if "{{" in test_file.read_text():
            print(f"{test_file.name:32} skipped: native histogram input (vmalert-tool reads float samples only)")
            continue
        with tempfile.TemporaryDirectory(prefix="vmalert-tool-") as tmp:
            converted = convert(test_file, Path(tmp), args.rule_per_group)
            run = subprocess.run([str(args.vmalert_tool), "unittest", *(["--disableAlertgroupLabel"] if args.rule_per_group else []),
                                  f"--files={converted}"], check=False, capture_output=True, text=True, cwd=tmp)
        output = run.stdout + run.stderr
        alerts, exprs = checks(test_file)
        failed_alerts = {m[1:] for m in FAILED_ALERT.findall(output)}
        failed_exprs = set(FAILED_EXPR.findall(output))
        alert_match, expr_match = FAILED_ALERT.search(output), FAILED_EXPR.search(output)
        first = (f"{alert_match[2]} at {alert_match[3]}" if alert_match else f"{expr_match[1]} at {expr_match[2]}" if expr_match
                 else next((line for line in output.splitlines() if "fail" in line.lower()), "") if run.returncode else "")
        print(f"{test_file.name:32} {len(failed_alerts):>9} of {alerts:<8} {len(failed_exprs):>8} of {exprs:<8}  {first[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
