"""The fleet's test hosts: one small file_sd file per host, picked up by a running Prometheus.

    python3 -m fioscope_mixin.hosts add NAME NODE_ADDR FIOSCOPE_ADDR   # e.g. add db-7 10.0.0.7:9100 10.0.0.7:7963
    python3 -m fioscope_mixin.hosts remove NAME
    python3 -m fioscope_mixin.hosts list

Which folder and which shard count (docs/fleet.md): those of the native stack running from the data directory
(--data-dir, default ./data), which records them there; with none running, stack.hosts_dir and fleet.shards of
alerts/config.yaml. --dir names the folder outright. NAME becomes the ``host`` label of both exporters' series;
adding to a host merges its targets, and a target another host (or the stack itself) already has is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fioscope_mixin import CHECKOUT as REPO
from fioscope_mixin.settings import SettingsError, load_settings
from fioscope_mixin.stack import FLEET_JOBS, HOST_FILE_GLOB, JOB_LABEL, hosts_path, own_target, shard_count, shard_of
from fioscope_mixin.yamlfile import YamlError, dump_yaml, load_yaml

# matched with fullmatch: `$` would let a trailing newline through (an invalid file_sd file)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", re.ASCII)
ADDRESS = re.compile(r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>[0-9]{1,5})", re.ASCII)
# a DNS label (RFC 1123; '_' too, as in compose service names): no empty label, no leading or trailing '-'
LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?", re.ASCII)
DEFAULT_DATA_DIR = REPO / "data"  # the native stack's --data-dir
RECORD = "fleet.yaml"  # in a running native stack's data directory: its hosts folder and shard count
# a checkout holds this package at mixin/fioscope_mixin; an installed wheel's CHECKOUT is the Python library folder
IN_CHECKOUT = REPO / "mixin" / "fioscope_mixin" == Path(__file__).resolve().parent


class HostError(ValueError):
    """Bad input for a host file: the message names the argument."""


@dataclass
class Fleet:
    """What ``hosts`` needs of the stack whose hosts it edits: the folder its Prometheus reads, its shard count, and
    its own host's name and exporters (never a fleet host's)."""
    directory: Path
    shards: int
    host: str
    targets: dict[str, str]  # job: address

    def as_record(self) -> dict:
        return {"hosts_dir": str(self.directory), "shards": self.shards, "host": self.host, "targets": self.targets}


def settings_fleet(settings: dict) -> Fleet:
    """The fleet ``settings`` make (stack.hosts_dir from the checkout's provisioning/prometheus/, fleet.shards)."""
    st = settings["stack"]
    return Fleet(hosts_path(settings), shard_count(settings), str(st["host"]), {job: own_target(st, job) for job in FLEET_JOBS})


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` whole (a reader never sees half of it) through a temporary file beside it that mkstemp creates
    with O_CREAT | O_EXCL | O_NOFOLLOW under a random name: nothing planted there beforehand is followed or reused."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # outside the *.yml glob
    try:
        with os.fdopen(fd, "w") as stream:
            stream.write(text)
            os.fchmod(stream.fileno(), 0o644)  # Prometheus (another user in compose) reads it; mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def record_stack(data_dir: Path, fleet: Fleet) -> None:
    """The native stack, at start: its fleet, for ``hosts`` run while it runs (with this process's id). The hosts folder
    is made too: Prometheus watches a folder that exists at its start, and sees one made later only at file_sd's refresh."""
    fleet.directory.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(data_dir / RECORD, f"# the native stack running from here: read by {__name__}\n"
                     + dump_yaml({"pid": os.getpid(), **fleet.as_record()}))


def forget_stack(data_dir: Path) -> None:
    """The native stack, at stop: its record removed (only its own: another may have started since)."""
    path = data_dir / RECORD
    with contextlib.suppress(OSError, YamlError):
        record = load_yaml(path, nofollow=True)
        if isinstance(record, dict) and record.get("pid") == os.getpid():
            path.unlink()


def running_stack(data_dir: Path) -> Fleet | None:
    """The fleet of the native stack running from ``data_dir``; None if none (no record, or its process is gone)."""
    path = data_dir / RECORD
    if not path.exists():
        return None
    try:
        record = load_yaml(path, nofollow=True)
        if not isinstance(record, dict) or not isinstance(record.get("pid"), int) or isinstance(record["pid"], bool):
            raise HostError(f"{path}: not a native stack's record (no pid): remove it")
        if not _alive(record["pid"]):
            return None
        targets = record["targets"]
        if not isinstance(targets, dict) or not all(isinstance(targets.get(job), str) for job in FLEET_JOBS):
            raise HostError(f"{path}: targets: expected the stack's {' and '.join(FLEET_JOBS)} addresses")
        fleet = Fleet(Path(str(record["hosts_dir"])), shard_count({"fleet": {"shards": record["shards"]}}), str(record["host"]), targets)
    except (YamlError, KeyError, SettingsError) as exc:
        raise HostError(f"{path}: not a native stack's record: {exc}") from None
    if not fleet.directory.is_absolute():
        raise HostError(f"{path}: hosts_dir: expected an absolute path, got {fleet.directory}")
    return fleet


def _alive(pid: int) -> bool:
    if pid <= 0:  # kill(0 or -n) would ask about a process group
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: alive
        return True
    return True


def resolve(directory: Path | None, data_dir: Path | None) -> Fleet:
    """The fleet ``hosts`` edits: the running native stack's (its data directory's record), else the settings';
    ``directory`` (--dir) overrides the folder, keeping the stack's shard count if it is the stack's folder."""
    stack = running_stack(data_dir or DEFAULT_DATA_DIR) if data_dir or IN_CHECKOUT else None
    if data_dir and stack is None:
        raise HostError(f"--data-dir {data_dir}: no native stack is running from it (no live {RECORD})")
    if directory is not None:
        directory = Path(os.path.abspath(directory))
        if stack is None or stack.directory != directory:
            # a folder of some stack: alerts/config.yaml's shard count and host name; its own exporters unknown
            fleet = settings_fleet(load_settings())
            return Fleet(directory, fleet.shards, fleet.host, {})
    if stack is not None:
        return stack
    if not IN_CHECKOUT:  # the default folder would be inside the Python installation
        raise HostError(f"fioscope_mixin is installed ({Path(__file__).resolve().parent}), not run from a checkout: give --dir, "
                        "the folder your Prometheus reads host files from (its stack.hosts_dir)")
    return settings_fleet(load_settings())


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


def scraped(directory: Path, skip: str) -> dict[str, str]:
    """{address: "host NAME (job JOB)"} of every host file in ``directory`` but ``skip``'s. A file that cannot be read
    is skipped with one warning (Prometheus refuses it too)."""
    out: dict[str, str] = {}
    for path in sorted(directory.glob(HOST_FILE_GLOB)):
        if path.stem == skip:
            continue
        try:
            groups = read_host_file(path)
        except HostError as exc:
            print(f"hosts.py: warning: {exc} (skipped)", file=sys.stderr)
            continue
        for group in groups:
            labels = group.get("labels") or {}
            for target in group["targets"]:
                out.setdefault(target, f"host {labels.get('host', path.stem)} (job {labels.get(JOB_LABEL, '?')}, {path.name})")
    return out


def read_host_file(path: Path) -> list[dict]:
    """A host file's target groups (a symbolic link refused: its content would be written back)."""
    try:
        groups = load_yaml(path, nofollow=True)
    except YamlError as exc:
        raise HostError(str(exc)) from None
    if not isinstance(groups, list) or not all(
            isinstance(g, dict) and isinstance(g.get("targets"), list) and all(isinstance(t, str) for t in g["targets"])
            and isinstance(g.get("labels") or {}, dict) for g in groups):
        raise HostError(f"{path}: not a list of target groups (targets: [HOST:PORT], labels): fix or remove it")
    return groups


def add(fleet: Fleet, name: str, node_address: str, fioscope_address: str) -> Path:
    """Add the host's exporters to its file (merged with the targets it has), atomically: Prometheus never reads half
    of it. A target another host's file or the stack itself scrapes is refused (one exporter, one ``host``)."""
    new = host_groups(name, node_address, fioscope_address, fleet.host)
    others = scraped(fleet.directory, name) if fleet.directory.is_dir() else {}
    others.update({address: f"this stack's own host {fleet.host} (job {job})" for job, address in fleet.targets.items()})
    for what, group in zip(("NODE_ADDR", "FIOSCOPE_ADDR"), new):
        address = group["targets"][0]
        if address in others:
            raise HostError(f"{what} {address!r}: already scraped as {others[address]} (an exporter is one host's)")
    path = fleet.directory / f"{name}.yml"
    groups = read_host_file(path) if path.exists() or path.is_symlink() else []
    for group in new:
        address, labels = group["targets"][0], group["labels"]
        if not any(address in g["targets"] for g in groups if (g.get("labels") or {}).get(JOB_LABEL) == labels[JOB_LABEL]):
            same = next((g for g in groups if g.get("labels") == labels), None)
            if same:
                same["targets"].append(address)
            else:
                groups.append(group)
    fleet.directory.mkdir(parents=True, exist_ok=True)
    write_atomically(path, f"# host {name}: written by python3 -m fioscope_mixin.hosts\n" + dump_yaml(groups))
    return path


def remove(directory: Path, name: str) -> Path:
    path = directory / f"{name}.yml"
    if not NAME.fullmatch(name) or not path.exists():
        raise HostError(f"NAME {name!r}: no such host in {directory}")
    path.unlink()
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m fioscope_mixin.hosts", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="the running native stack's --data-dir (default ./data): its hosts folder and "
                        "shard count; with none running there, stack.hosts_dir and fleet.shards of alerts/config.yaml")
    parser.add_argument("--dir", type=Path, help="the hosts folder (default: the running stack's, else stack.hosts_dir)")
    sub = parser.add_subparsers(dest="command", required=True)
    add_cmd = sub.add_parser("add", help="add a host, or add targets to a host")
    add_cmd.add_argument("name")
    add_cmd.add_argument("node_address", metavar="NODE_ADDR", help="its node_exporter, HOST:PORT")
    add_cmd.add_argument("fioscope_address", metavar="FIOSCOPE_ADDR", help="its fioscope exporter (or a capture's listener), HOST:PORT")
    sub.add_parser("remove", help="remove a host").add_argument("name")
    sub.add_parser("list", help="list the hosts")
    args = parser.parse_args(argv)
    try:
        fleet = resolve(args.dir, args.data_dir)
        if args.command == "add":
            path = add(fleet, args.name, args.node_address, args.fioscope_address)
            # every shard reads this folder; hashmod keeps the host on one (shown here, never configured)
            shard = f" (shard {shard_of(args.name, fleet.shards)} of {fleet.shards})" if fleet.shards > 1 else ""
            print(f"host {args.name}: {path}{shard}")
        elif args.command == "remove":
            print(f"removed {remove(fleet.directory, args.name)}")
        else:
            for path in sorted(fleet.directory.glob(HOST_FILE_GLOB)):
                print(path.stem)
    except (HostError, SettingsError, OSError) as exc:
        print(f"hosts.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
