"""The fleet's test hosts: one small file_sd file per host, picked up by a running Prometheus.

    python3 -m fioscope_mixin.hosts add NAME NODE_ADDR FIOSCOPE_ADDR   # e.g. add db-7 10.0.0.7:9100 10.0.0.7:7963
    python3 -m fioscope_mixin.hosts remove NAME
    python3 -m fioscope_mixin.hosts list

Files go to stack.hosts_dir of alerts/config.yaml (provisioning/prometheus/hosts/ by default; --dir to
override). NAME becomes the ``host`` label of both exporters' series.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import sys
from pathlib import Path

from fioscope_mixin import CHECKOUT as REPO
from fioscope_mixin.settings import SettingsError, load_settings
from fioscope_mixin.stack import JOB_LABEL, shard_count, shard_of
from fioscope_mixin.yamlfile import dump_yaml

# matched with fullmatch: `$` would let a trailing newline through (an invalid file_sd file)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", re.ASCII)
ADDRESS = re.compile(r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>[0-9]{1,5})", re.ASCII)
# a DNS label (RFC 1123; '_' too, as in compose service names): no empty label, no leading or trailing '-'
LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?", re.ASCII)


class HostError(ValueError):
    """Bad input for a host file: the message names the argument."""


def hosts_dir(overrides: list[str] | None = None) -> Path:
    """stack.hosts_dir, relative to provisioning/prometheus/ as in prometheus.yml."""
    return REPO / "provisioning" / "prometheus" / load_settings(overrides)["stack"]["hosts_dir"]


def check_name(name: str, own_host: str) -> None:
    if not NAME.fullmatch(name):
        raise HostError(f"NAME {name!r}: letters, digits, '.', '_' and '-' only (at most 63)")
    if name == own_host:
        raise HostError(f"NAME {name!r}: the stack's own host (stack.host of alerts/config.yaml); choose another name")


def check_address(what: str, address: str) -> None:
    """HOST:PORT as Prometheus scrapes it: an IPv4 address, a [IPv6] address or a DNS name, and a port 1-65535."""
    m = ADDRESS.fullmatch(address)
    ok = m is not None and 0 < int(m["port"]) < 65536
    if m and ok and m["ipv6"]:
        ok = _is_ip(m["ipv6"], 6)
    elif m and ok:
        host = m["host"]
        ok = _is_ip(host, 4) if re.fullmatch(r"[0-9.]+", host) else len(host) <= 253 and all(map(LABEL.fullmatch, host.split(".")))
    if not ok:
        raise HostError(f"{what} {address!r}: expected HOST:PORT (an IPv4 address, [IPv6] or a DNS name; port 1-65535)")


def _is_ip(text: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False


def host_groups(name: str, node_address: str, fioscope_address: str, own_host: str = "") -> list[dict]:
    """The file_sd target groups of one host: its node_exporter and its fioscope exporter."""
    check_name(name, own_host)
    for what, address in (("NODE_ADDR", node_address), ("FIOSCOPE_ADDR", fioscope_address)):
        check_address(what, address)
    return [{"targets": [address], "labels": {"host": name, JOB_LABEL: job}}
            for job, address in (("node", node_address), ("fioscope", fioscope_address))]


def add(directory: Path, name: str, node_address: str, fioscope_address: str, own_host: str = "") -> Path:
    """Write (or replace) the host's file atomically: Prometheus never reads half of it."""
    groups = host_groups(name, node_address, fioscope_address, own_host)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yml"
    tmp = directory / f".{name}.yml.tmp"  # outside the *.yml glob
    tmp.write_text(f"# host {name}: written by python3 -m fioscope_mixin.hosts\n" + dump_yaml(groups))
    os.replace(tmp, path)
    return path


def remove(directory: Path, name: str) -> Path:
    path = directory / f"{name}.yml"
    if not NAME.fullmatch(name) or not path.exists():
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
            settings = load_settings()
            path = add(directory, args.name, args.node_address, args.fioscope_address, str(settings["stack"]["host"]))
            shards = shard_count(settings)
            # every shard reads this folder; hashmod keeps the host on one (shown here, never configured)
            print(f"host {args.name}: {path}" + (f" (shard {shard_of(args.name, shards)} of {shards})" if shards > 1 else ""))
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
