"""A rendered report as a person sees it: opened in headless Chromium with the network off, its verdict items read back."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fioscope_testkit.paths import IOSTAT


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("chromium is not installed (scripts/setup.sh installs it)")
    return path


def open_in_chromium(html: Path, screenshot: Path) -> tuple[str, list[str]]:
    """(DOM after rendering, console messages); network off: a dead proxy, no name resolution."""
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run(base + ["--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120, check=False)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = subprocess.run(base + [f"--screenshot={screenshot}", "--window-size=1100,2400", html.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)
    assert shot.returncode == 0 and screenshot.stat().st_size > 10_000, shot.stderr[-2000:]
    console = [ln for ln in (dom.stderr + shot.stderr).splitlines() if ":CONSOLE" in ln or "net::ERR" in ln]
    return dom.stdout, console


class Verdicts(HTMLParser):
    """The verdict items of a rendered report: their data-* attributes and text; ``text`` is all the page's text, what a
    person reads (not the markup: a chart's base64 PNG can hold any four letters, "MB/s" among them)."""

    def __init__(self, dom: str):
        super().__init__()
        self.items: list[dict] = []
        self._open: dict | None = None
        self.images: list[str] = []
        self.external: list[str] = []
        self.text = ""
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "li" and "verdict" in (a.get("class") or ""):
            self._open = {**a, "text": ""}
            self.items.append(self._open)
        if tag == "img":
            self.images.append(a.get("src", ""))
        for key in ("src", "href"):
            if re.match(r"^(https?:)?//", a.get(key) or ""):
                self.external.append(a[key])

    def handle_endtag(self, tag):
        if tag == "li":
            self._open = None

    def handle_data(self, data):
        self.text += data
        if self._open is not None:
            self._open["text"] += data

    def of(self, kind: str, **data: str) -> list[dict]:
        return [v for v in self.items if v.get("data-kind") == kind and all(v.get(f"data-{k}") == x for k, x in data.items())]


def rendered(out: Path, tmp_path: Path) -> Verdicts:
    dom, console = open_in_chromium(out / "report.html", tmp_path / "screenshot.png")
    assert console == [], console
    page = Verdicts(dom)
    assert page.external == [], "the report must open with no network"
    assert page.images and all(src.startswith("data:image/png;base64,") for src in page.images)
    return page


def lab_device(results: Path) -> str:
    capture = json.loads((IOSTAT / f"{results.name.split('-')[0]}.json").read_text())  # capped-results -> capped.json
    return next(d["disk_device"] for d in capture["sysstat"]["hosts"][0]["statistics"][1]["disk"] if d["disk_device"].startswith("loop"))
