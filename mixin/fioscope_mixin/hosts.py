"""The fleet's test hosts: one small file_sd file per host, picked up by a running Prometheus.

    python3 -m fioscope_mixin.hosts add NAME NODE_ADDR FIOSCOPE_ADDR   # e.g. add db-7 10.0.0.7:9100 10.0.0.7:7963
    python3 -m fioscope_mixin.hosts remove NAME
    python3 -m fioscope_mixin.hosts list

Files go to stack.hosts_dir of alerts/config.yaml (provisioning/prometheus/hosts/ by default; --dir to
override). NAME becomes the ``host`` label of both exporters' series.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import yaml

from fioscope_mixin import CHECKOUT as REPO
from fioscope_mixin.settings import SettingsError, load_settings
from fioscope_mixin.stack import JOB_LABEL

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):\d{1,5}$")


class HostError(ValueError):
    """Bad input for a host file: the message names the argument."""


def hosts_dir(overrides: list[str] | None = None) -> Path:
    """stack.hosts_dir, relative to provisioning/prometheus/ as in prometheus.yml."""
    return REPO / "provisioning" / "prometheus" / load_settings(overrides)["stack"]["hosts_dir"]


def host_groups(name: str, node_address: str, fioscope_address: str) -> list[dict]:
    """The file_sd target groups of one host: its node_exporter and its fioscope exporter."""
    if not NAME.match(name):
        raise HostError(f"NAME {name!r}: letters, digits, '.', '_' and '-' only (at most 63)")
    for what, address in (("NODE_ADDR", node_address), ("FIOSCOPE_ADDR", fioscope_address)):
        if not ADDRESS.match(address) or not 0 < int(address.rpartition(":")[2]) < 65536:
            raise HostError(f"{what} {address!r}: expected HOST:PORT")
    return [{"targets": [address], "labels": {"host": name, JOB_LABEL: job}}
            for job, address in (("node", node_address), ("fioscope", fioscope_address))]


def add(directory: Path, name: str, node_address: str, fioscope_address: str) -> Path:
    """Write (or replace) the host's file atomically: Prometheus never reads half of it."""
    groups = host_groups(name, node_address, fioscope_address)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yml"
    tmp = directory / f".{name}.yml.tmp"  # outside the *.yml glob
    tmp.write_text(f"# host {name}: written by python3 -m fioscope_mixin.hosts\n" + yaml.safe_dump(groups, sort_keys=False))
    os.replace(tmp, path)
    return path


def remove(directory: Path, name: str) -> Path:
    path = directory / f"{name}.yml"
    if not NAME.match(name) or not path.exists():
        raise HostError(f"NAME {name!r}: no such host in {directory}")
    path.unlink()
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m fioscope_mixin.hosts", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", type=Path, help="the hosts folder (default: stack.hosts_dir of alerts/config.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    add_cmd = sub.add_parser("add", help="add or replace a host")
    add_cmd.add_argument("name")
    add_cmd.add_argument("node_address", metavar="NODE_ADDR", help="its node_exporter, HOST:PORT")
    add_cmd.add_argument("fioscope_address", metavar="FIOSCOPE_ADDR", help="its fioscope exporter, HOST:PORT")
    sub.add_parser("remove", help="remove a host").add_argument("name")
    sub.add_parser("list", help="list the hosts")
    args = parser.parse_args(argv)
    try:
        directory = args.dir or hosts_dir()
        if args.command == "add":
            print(f"host {args.name}: {add(directory, args.name, args.node_address, args.fioscope_address)}")
        elif args.command == "remove":
            print(f"removed {remove(directory, args.name)}")
        else:
            for path in sorted(directory.glob("*.yml")):
                print(path.stem)
    except (HostError, SettingsError, OSError) as exc:
        print(f"hosts.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
