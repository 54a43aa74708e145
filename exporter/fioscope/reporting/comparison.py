"""Comparison report: baseline against candidate, workload by workload, queue depth by depth.

Workloads are matched on what the job did (rw, block size, direction), not on where it ran,
so two targets or two tags of one results directory compare as well as two directories. A
delta is *significant* only where it exceeds ``SIGNIFICANCE`` times the combined run-to-run
spread of the two points (the error bars of the performance report).
"""

from __future__ import annotations

import math

from .charts import response_chart, uses_bandwidth
from .html import Report, Section, Table, Verdict
from .performance import fmt_eng
from .results import Point, Sample, curves

SIGNIFICANCE = 2.0
METRICS = (  # attribute, spread attribute, label, higher is better
    ("iops", "iops_sd", "IOPS", True),
    ("lat_p99", "p99_sd", "p99 latency", False),
    ("bw", "bw_sd", "bandwidth", True),
)


def _fmt(attr: str, value: float) -> str:
    if attr == "iops":
        return f"{value:.0f}"
    return fmt_eng(value, "s" if attr == "lat_p99" else "B/s")


def delta(base: Point, cand: Point, attr: str, spread: str) -> tuple[float, bool]:
    """Relative change of ``attr`` and whether it exceeds the run-to-run spread."""
    b, c = getattr(base, attr), getattr(cand, attr)
    noise = SIGNIFICANCE * math.hypot(getattr(base, spread), getattr(cand, spread))
    change = (c - b) / b if b else (math.inf if c > b else 0.0)  # from nothing: no finite ratio, but a direction
    return change, abs(c - b) > noise and c != b


def _where(depths: list[int], tested: list[int]) -> str:
    """``qd 4–64`` for a run of consecutive tested depths, else each depth: a range must not claim a depth it skips."""
    if len(depths) == 1:
        return f"at qd {depths[0]}"
    first, last = tested.index(depths[0]), tested.index(depths[-1])
    if tested[first:last + 1] == depths:
        return f"at qd {depths[0]}–{depths[-1]}"
    return "at qd " + ", ".join(map(str, depths))


def _percent(value: float) -> str:
    """Whole percent, one decimal below 1 % (a significant change never reads "0 %"), ∞ from a zero baseline."""
    return "∞" if math.isinf(value) else f"{value:.1f}" if value < 1 else f"{value:.0f}"


def _span(changes: list[float]) -> str:
    lo, hi = _percent(min(abs(x) for x in changes) * 100), _percent(max(abs(x) for x in changes) * 100)
    return f"{lo} %" if lo == hi else f"{lo}–{hi} %"


def conclusion(rows: list[tuple[int, dict[str, tuple[float, bool]]]]) -> str:
    """One phrase per metric and direction, e.g. ``150–1500 % higher p99 latency at qd 4–64, 18 % lower at qd 1``.

    A metric that rose at some depths and fell at others says both, each with its own depths and
    the worse direction first: a reader must see where the candidate is worse, not a blended "changed".
    """
    tested = [depth for depth, _ in rows]
    parts = []
    for attr, _, label, higher_better in METRICS:
        phrases: list[str] = []
        worse_first = (("lower", False), ("higher", True)) if higher_better else (("higher", True), ("lower", False))
        for word, rose in worse_first:
            sig = [(depth, d[attr][0]) for depth, d in rows if d[attr][1] and (d[attr][0] > 0) == rose]
            if sig:
                named = f"{word} {label}" if not phrases else word
                phrases.append(f"{_span([x for _, x in sig])} {named} {_where([d for d, _ in sig], tested)}")
        if phrases:
            parts.append(", ".join(phrases))
    return "candidate " + "; ".join(parts) if parts else "no significant difference"


def comparison_report(baseline: list[Sample], candidate: list[Sample], names: tuple[str, str]) -> Report:
    def by_pattern(samples: list[Sample]) -> dict[tuple[str, str, str], list[Point]]:
        out: dict[tuple[str, str, str], list[Point]] = {}
        for w, points in curves(samples).items():
            key = (w.rw, w.bs, w.ddir)
            out[key] = sorted(out.get(key, []) + points, key=lambda p: p.depth)
        return out

    base, cand = by_pattern(baseline), by_pattern(candidate)
    report = Report("comparison", f"fio comparison — {names[0]} (baseline) vs {names[1]} (candidate)")
    report.summary.append(f"A delta is marked significant where it exceeds {SIGNIFICANCE:g}× the combined run-to-run spread "
                          "(standard deviation across repeats, else fio's own).")
    common = sorted(set(base) & set(cand))
    for only, label in ((set(base) - set(cand), "baseline"), (set(cand) - set(base), "candidate")):
        if only:
            report.summary.append(f"Only in the {label}: " + ", ".join(" ".join(k) for k in sorted(only)))
    for key in common:
        b_points, c_points = {p.depth: p for p in base[key]}, {p.depth: p for p in cand[key]}
        depths = sorted(set(b_points) & set(c_points))
        title = " ".join(key)
        table = Table(["queue depth"] + [f"{label} {n}" for _, _, label, _ in METRICS for n in ("baseline", "candidate", "Δ")], [])
        rows = []
        for depth in depths:
            b, c = b_points[depth], c_points[depth]
            deltas = {attr: delta(b, c, attr, spread) for attr, spread, _, _ in METRICS}
            rows.append((depth, deltas))
            cells = [str(depth)]
            for attr, _, _label, _ in METRICS:
                cells += [_fmt(attr, getattr(b, attr)), _fmt(attr, getattr(c, attr)), f"{deltas[attr][0] * 100:+.1f} %"]
                if deltas[attr][1]:
                    table.marked.add((len(table.rows), len(cells) - 1))
            table.rows.append(cells)
        line = conclusion(rows) if rows else "no queue depth in common"
        significant = any(d[1] for _, ds in rows for d in ds.values())
        chart = response_chart(f"compare-{'-'.join(key)}", title,
                               [(names[0], [b_points[d] for d in sorted(b_points)]), (names[1], [c_points[d] for d in sorted(c_points)])],
                               uses_bandwidth(key[1]))
        report.verdicts.append(Verdict("comparison", None, f"{title}: {line}", {"significant": str(significant).lower()}))
        report.sections.append(Section(title, charts=[chart], lines=[line], tables=[table]))
    if not common:
        report.verdicts.append(Verdict("comparison", None, "no workload in common between baseline and candidate",
                                       {"significant": "false"}))
    return report
