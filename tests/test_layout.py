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


MIXIN = REPO / "mixin" / "fioscope_mixin"
# imported inside a function on purpose, not to dodge a loop: the dashboards need the generate extra
# (grafana-foundation-sdk), imported only when a command asks for them
LAZY = {("__main__.py", "fioscope_mixin")}


def mixin_imports() -> tuple[dict[str, set[str]], list[str]]:
    """The mixin's modules -> the mixin modules each imports, and the imports made inside a function (file:line)."""
    modules = {p.stem for p in MIXIN.glob("*.py")}
    graph: dict[str, set[str]] = {}
    inner = []
    for path in sorted(MIXIN.glob("*.py")):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "fioscope_mixin":
                named = [node.module.split(".")[1]] if "." in node.module else [a.name for a in node.names]
                deps |= {m for m in named if m in modules}
                if node.col_offset and (path.name, node.module) not in LAZY:
                    inner.append(f"{path.relative_to(REPO)}:{node.lineno}")
        graph[path.stem] = deps - {path.stem}
    return graph, inner


def test_the_mixin_imports_without_a_circle_and_nothing_inside_a_function():
    """Issue 54 item 4: alerts, cause, recording and instance_limit share their PromQL through promql.py; none hides an
    import inside a function to dodge a loop."""
    graph, inner = mixin_imports()
    assert not inner, f"imports inside a function: {inner}"
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        assert module not in path, "an import circle: " + " -> ".join([*path[path.index(module):], module])
        if module in done:
            return
        for dep in sorted(graph[module]):
            visit(dep, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_no_production_module_keeps_settings_in_module_state():
    """Issue 54: a setting arrives by one road. The dashboards read theirs from a Scope passed to each builder, not from
    module globals that a configure() call set (two roads: whoever forgot to call it got the last caller's settings)."""
    found = [f"{path.relative_to(REPO)}:{node.lineno}" for path in production_modules()
             for node in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(node, ast.Global)]
    assert not found, f"module state set from a function: {found}"
