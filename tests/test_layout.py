"""The house's layout (issue 54 items 5 and 6): a name says one thing, bench/ stands on its own, test modules stand
apart. Read from the source (ast), so a breach is named by file and line."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from helpers.paths import REPO

PRODUCTION = [REPO / "exporter" / "fioscope", REPO / "mixin" / "fioscope_mixin"]
# the package markers every package has: not names a reader confuses
MARKERS = {"__init__.py", "__main__.py"}
# a class name used twice in the house is two things under one word (issue 54: the capture's plan step and the
# report's measured phase were both ``Phase``)
ONE_CLASS = {"Phase"}


def production_modules() -> list[Path]:
    return sorted(p for root in PRODUCTION for p in root.rglob("*.py"))


def test_no_two_production_modules_share_a_file_name():
    where = defaultdict(list)
    for path in production_modules():
        if path.name not in MARKERS:
            where[path.name].append(str(path.relative_to(REPO)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not shared, shared


def test_no_two_production_classes_share_a_name_the_issue_made_unique():
    where = defaultdict(list)
    for path in production_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.name in ONE_CLASS:
                where[node.name].append(f"{path.relative_to(REPO)}:{node.lineno}")
    shared = {name: places for name, places in where.items() if len(places) > 1}
    assert not shared, shared
