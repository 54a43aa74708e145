"""A README a newcomer reads in ten minutes, the depth in docs/ (issue 54 item 7): the README's length and index, every
link of the README and docs/ resolving, every setting of alerts/config.yaml documented, the first five named at the
top of the file and first in docs/settings.md."""

from __future__ import annotations

import re

from fioscope_mixin.settings import SCHEMA, load_settings
from fioscope_testkit.paths import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
SETTINGS = DOCS / "settings.md"
MAX_README_LINES = 350
# the README's index (issue 54): exporter and settings, rules and alerts, the fleet and Thanos, Kubernetes, the lab,
# capture and reports
INDEX = ["exporter.md", "settings.md", "rules.md", "fleet.md", "kubernetes.md", "lab.md", "reports.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    out, fenced = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            out.add(slug(m[1]))
    return out


def test_the_readme_is_short_and_indexes_the_docs():
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_README_LINES, len(text.splitlines())
    assert "make up" in text and "make test" in text
    missing = [page for page in INDEX if f"](docs/{page})" not in text]
    assert not missing, missing


def test_every_link_of_the_readme_and_the_docs_resolves():
    broken = []
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, broken


def test_every_setting_is_documented():
    text = SETTINGS.read_text()
    missing = [key for key in SCHEMA if f"`{key}`" not in text]
    assert not missing, missing


def first_keys(text: str) -> list[str]:
    """The dotted names in ``text`` (thresholds.x, stack.y) that are keys of the shipped settings."""
    shipped = load_settings()

    def known(key: str) -> bool:
        value = shipped
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                return False
            value = value[part]
        return True

    return [k for k in re.findall(r"\b(?:thresholds|stack)\.[a-z0-9_.]+[a-z0-9_]", text) if known(k)]


def test_the_first_settings_head_the_config_file_and_the_settings_page():
    """alerts/config.yaml opens with the handful a person sets first (the SLA, the promised IOPS, the etcd limit, the
    scrape interval, and where the target is set), each a real key; docs/settings.md lists the same keys first."""
    config = (REPO / "alerts" / "config.yaml").read_text()
    header = config[:config.index("\n\n")]  # the leading comment block
    first = {"thresholds.disk_latency_sla_seconds", "thresholds.disk_limits", "thresholds.etcd_fsync_p99_seconds",
             "stack.scrape_interval"}
    assert first <= set(first_keys(header)), first_keys(header)
    assert "FIOSCOPE_TARGET_DIR" in header and "targets[].directory" in header
    page = SETTINGS.read_text()
    first_section = page[page.index("## First"):page.index("## Advanced")]
    assert first <= set(first_keys(first_section)) and "FIOSCOPE_TARGET_DIR" in first_section
