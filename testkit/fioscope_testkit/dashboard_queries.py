"""The generated dashboards' panel queries as Grafana asks them: every target and annotation, variables filled in."""

from __future__ import annotations

import json

from fioscope_testkit.paths import REPO


def dashboard_queries() -> list[tuple[str, str, str, bool]]:
    """(dashboard, panel title, expr, instant) of every panel target and annotation: Grafana asks a panel's
    target over the dashboard's time range unless it is marked instant (a stat of the last run)."""
    out = []
    for path in sorted((REPO / "dashboards").glob("*.json")):
        d = json.loads(path.read_text())
        out += [(path.name, "annotation " + a["name"], a["expr"], False)
                for a in d.get("annotations", {}).get("list", []) if a.get("expr")]
        for panel in d["panels"]:
            out += [(path.name, panel["title"], t["expr"], bool(t.get("instant"))) for t in panel.get("targets", [])]
    return out


def substitute(expr: str, values: dict[str, str]) -> str:
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    return expr
