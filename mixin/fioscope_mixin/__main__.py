"""python3 -m fioscope_mixin: write or check every generated file of the repository.

    python3 -m fioscope_mixin generate            # rules, alerts, stack config, dashboards, Kubernetes objects
    python3 -m fioscope_mixin check               # exit 1 (and show the diff) if a committed file differs
    python3 -m fioscope_mixin generate --out DIR --set durations.throttled_fio=10s --set stack.scrape_interval=1s
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fioscope_mixin import CHECKOUT, prometheus
from fioscope_mixin.output import write_or_check
from fioscope_mixin.settings import SettingsError, load_settings
from fioscope_mixin.stack import private_files, stale_shard_files

PARTS = ("prometheus", "dashboards", "kubernetes")


def render(settings: dict, parts: tuple[str, ...] = PARTS) -> dict[str, str]:
    """{path relative to the repository: text} of the generated files of ``parts``."""
    files = {}
    if "prometheus" in parts:
        files.update(prometheus.render(settings))
    # the dashboards need grafana-foundation-sdk (the generate extra): imported only when asked for
    if "dashboards" in parts:
        from fioscope_mixin import dashboards
        files.update(dashboards.render(settings))
    if "kubernetes" in parts:
        from fioscope_mixin import kubernetes
        files.update(kubernetes.render(settings))
    return files


DASHBOARD_SDK = "grafana_foundation_sdk"  # the generate extra's one package (mixin/pyproject.toml)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m fioscope_mixin", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("command", choices=("generate", "check"), help="check = generate --check")
    parser.add_argument("--check", action="store_true", help="compare with the files on disk; exit 1 on a difference")
    parser.add_argument("--out", type=Path, help="root to write under, in the repository's layout (default: this checkout)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a setting of alerts/config.yaml")
    parser.add_argument("--only", action="append", choices=PARTS, help="generate only these parts (repeatable; default: all)")
    args = parser.parse_args(argv)
    root = args.out or CHECKOUT
    if args.out is None and not (CHECKOUT / "alerts").is_dir():
        parser.error(f"{CHECKOUT} is not a fioscope checkout: give --out DIR")
    try:
        settings = load_settings(args.set)
        files = render(settings, tuple(args.only or PARTS))
    except SettingsError as exc:
        print(f"fioscope_mixin: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # the dashboards' SDK: only the generate extra installs it
        if (exc.name or "").partition(".")[0] != DASHBOARD_SDK:
            raise  # any other missing module is a broken install, not a missing extra
        print(f"fioscope_mixin: the dashboards (and the Kubernetes objects that carry them) need {exc.name} "
              "(pip install 'fioscope-mixin[generate]'), or generate the Prometheus files alone with --only prometheus",
              file=sys.stderr)
        return 2
    check = args.check or args.command == "check"
    code = write_or_check({root / rel: text for rel, text in files.items()}, check,
                          frozenset(root / rel for rel in private_files(settings)))
    # a shard file fleet.shards no longer makes (a reshard from 4 to 2): removed, or out of date under check
    stale = stale_shard_files(root, settings) if "provisioning/prometheus/prometheus.yml" in files else []
    if check and stale:
        print(f"fioscope_mixin: out of date: {', '.join(map(str, stale))} (no such shard: run python3 -m fioscope_mixin generate)",
              file=sys.stderr)
        return 1
    for path in stale:
        path.unlink()
    return code


if __name__ == "__main__":
    sys.exit(main())
