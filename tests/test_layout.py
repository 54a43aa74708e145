"""The house's layout (issue 54 items 5 and 6): a name says one thing, bench/ stands on its own, test modules stand
apart. Read from the source (ast), so a breach is named by file and line."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from fioscope_testkit.paths import REPO

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


def imported_modules(path: Path) -> list[tuple[str, int]]:
    """Every module ``path`` imports (absolute names) and the line it does so on."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.module, node.lineno))
    return out


def test_no_bench_script_edits_its_path():
    """bench/ imports what it shares with the tests (fioscope_testkit) as an installed package, by name."""
    edits = []
    for path in sorted((REPO / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) and node.value.id == "sys":
                edits.append(f"{path.relative_to(REPO)}:{node.lineno}: sys.path")
            elif isinstance(node, ast.Attribute) and node.attr == "addsitedir":
                edits.append(f"{path.relative_to(REPO)}:{node.lineno}: site.addsitedir")
    assert not edits, edits


def test_no_test_module_imports_another_test_module():
    """What tests share lives in tests/helpers (or fioscope_testkit); a test module imported by another runs its
    tests' module-level code twice and ties two files' fixtures together."""
    test_modules = {p.stem for root in (REPO / "tests", REPO / "alerts" / "tests") for p in root.rglob("*.py")
                    if p.stem.startswith("test_") or p.stem == "conftest"}
    assert "conftest" in test_modules and len(test_modules) > 50
    borrowed = [f"{path.relative_to(REPO)}:{line}: {module}"
                for root in (REPO / "tests", REPO / "alerts" / "tests", REPO / "testkit") for path in sorted(root.rglob("*.py"))
                for module, line in imported_modules(path) if module.split(".")[0] in test_modules]
    assert not borrowed, borrowed
