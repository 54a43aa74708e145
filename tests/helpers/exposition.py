"""The exporter's /metrics text: parsed with prometheus_client's own parser, one series looked up, promtool's verdict."""

from __future__ import annotations

import subprocess

from fioscope_testkit.binaries import require

# every per-job series carries these (docs/contracts.md section 1)
IDENTITY = ("target", "device", "hostname")


def parse_exposition(text: str) -> dict[tuple[str, frozenset], float]:
    """{(name, frozenset(labels.items())): value} using prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(metrics: dict, name: str, **labels) -> float:
    """The one sample of ``name`` whose labels are ``labels`` plus, for ``fio_`` series, the identity labels (any value).

    A test that does not name target, device and hostname still requires them present and the match unique.
    """
    want = {k: str(v) for k, v in labels.items()}
    found = []
    for (n, frozen), value in metrics.items():
        have = dict(frozen)
        keys = set(want) | (set(IDENTITY) if n.startswith("fio_") else set())
        if n == name and set(have) == keys and all(have[k] == v for k, v in want.items()):
            found.append(value)
    if len(found) != 1:
        raise KeyError(f"{name}{want}: {len(found)} samples")
    return found[0]


def promtool_check_metrics(text: str) -> subprocess.CompletedProcess:
    return subprocess.run([require("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
