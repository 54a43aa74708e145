#!/usr/bin/env python3
"""Generate fioscope's rule files and Prometheus/Alertmanager configuration from alerts/config.yaml.

    python3 alerts/generate.py                 # write into the repository
    python3 alerts/generate.py --check         # exit 1 if the committed files differ
    python3 alerts/generate.py --out DIR --set durations.throttled_fio=10s --set stack.scrape_interval=1s

Outputs (the same layout under --out, so relative paths keep working):
    alerts/recording.rules.yaml   iostat -x equivalents per instance and device (rules_recording.py)
    alerts/alerts.rules.yaml      the alerts (rules_alerts.py)
    provisioning/prometheus/prometheus.yml, provisioning/alertmanager/alertmanager.yml (stack_config.py)
The same files serve compose.yaml and the native stack. Settings are read by fioscope.settings.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# this tree's package and sibling modules first, also when loaded by stack/native.py
for _path in (HERE, REPO / "exporter", REPO / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from codegen import write_or_check  # noqa: E402
from fioscope.settings import SettingsError, load_settings  # noqa: E402
from mixin import dump  # noqa: E402
from rules_alerts import alert_rules  # noqa: E402
from rules_recording import recording_rules  # noqa: E402
from stack_config import alertmanager_config, prometheus_config  # noqa: E402

__all__ = ["SettingsError", "load_settings", "render", "main"]


def render(settings: dict) -> dict[str, str]:
    return {
        "alerts/recording.rules.yaml": dump(recording_rules(settings)),
        "alerts/alerts.rules.yaml": dump(alert_rules(settings)),
        "provisioning/prometheus/prometheus.yml": dump(prometheus_config(settings)),
        "provisioning/alertmanager/alertmanager.yml": dump(alertmanager_config(settings)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO, help="root to write the files under (default: the repository)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a setting of alerts/config.yaml")
    parser.add_argument("--check", action="store_true", help="compare with the files on disk; exit 1 on a difference")
    args = parser.parse_args(argv)
    try:
        files = render(load_settings(args.set))
    except SettingsError as exc:
        print(f"generate.py: {exc}", file=sys.stderr)
        return 2
    return write_or_check({args.out / rel: text for rel, text in files.items()}, args.check, "alerts/generate.py")


if __name__ == "__main__":
    sys.exit(main())
