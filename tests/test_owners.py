"""One table says which module owns each contract (issue 26 item 6): the same in docs/contracts.md and the runbook,
and every owner it names is a module of the house."""

from __future__ import annotations

import re

from fioscope_testkit.paths import REPO

MARKER = "<!-- owners:"


def owners_table(text: str) -> list[str]:
    """The table's rows: the lines after the marker, up to the first that is not a row."""
    rows = []
    for line in text[text.index(MARKER):].splitlines()[1:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_contracts_and_runbook_hold_the_same_owner_table():
    contracts = owners_table((REPO / "docs" / "contracts.md").read_text())
    runbook = owners_table((REPO / "docs" / "runbook.md").read_text())
    assert contracts == runbook and len(contracts) > 10
    owners = [re.findall(r"`((?:exporter|mixin)/[\w/]+\.py)`", row.split("|")[2]) for row in contracts[2:]]
    assert all(owners), "every row names its owner module"
    missing = [p for row in owners for p in row if not (REPO / p).is_file()]
    assert not missing, missing
    for name in ("settings.py", "names.py", "columns.py", "reportjson.py", "resultfile.py", "thresholds.py"):
        assert any(p.endswith(name) for row in owners for p in row), name
