"""One hosts folder and one shard count wherever the native stack was started from (docs/fleet.md): a stack started
with --shards 2 (so its configuration is generated into its data directory) reads the very folder ``hosts add`` writes,
and ``hosts add`` prints the shard that scrapes the host. A reshard leaves no shard file behind.
"""

from __future__ import annotations

import os
from pathlib import Path

from fioscope_mixin.native import NativeStack
from fioscope_mixin.stack import shard_of
from fioscope_testkit.binaries import require
from fioscope_testkit.cli import run
from fioscope_testkit.net import free_port, free_port_block, wait_for
from fioscope_testkit.paths import REPO
from fioscope_testkit.prometheus import PromClient
from helpers.fleet import run_hosts

CONFIG_DIR = REPO / "provisioning" / "prometheus"  # a relative stack.hosts_dir is relative to it
THANOS = Path.home() / ".cache" / "fioscope" / "thanos-v0.42.5" / "thanos"


def test_a_host_added_to_a_native_stack_of_two_shards_is_scraped_by_exactly_one(tmp_path):
    """``--shards 2`` is an override: the stack's configuration is generated into <data-dir>/config. stack.hosts_dir
    is relative, as in alerts/config.yaml (here a folder of this test's, named from the checkout's
    provisioning/prometheus/): both the shards and ``hosts add`` must resolve it to the same folder."""
    require("prometheus")
    hosts = tmp_path / "hosts"
    data = tmp_path / "data"
    overrides = [f"stack.hosts_dir={os.path.relpath(hosts, CONFIG_DIR)}", "stack.scrape_interval=1s", "stack.host=fleet-stack",
                 f"stack.ports.prometheus={free_port_block(2)}", f"stack.ports.alertmanager={free_port()}",
                 f"stack.ports.node_exporter={free_port()}", f"stack.ports.fioscope={free_port()}",
                 f"fleet.ports.sidecar_grpc={free_port_block(2)}", f"fleet.ports.sidecar_http={free_port_block(2)}",
                 f"fleet.ports.query={free_port()}", f"fleet.ports.query_grpc={free_port()}",
                 "fleet.shards=2"]  # what --shards 2 adds
    # the shards are what this test is about: Thanos's sidecars and Query start only where setup built Thanos
    thanos = () if os.access(THANOS, os.X_OK) else ("sidecar-0", "sidecar-1", "thanos-query")
    stack = NativeStack(data, overrides, without=("node_exporter", "fioscope", *thanos))
    stack.start()
    try:
        shards = [PromClient(f"http://{stack.shard_address('prometheus', i)}") for i in range(2)]
        names = ["db-0", "db-1", "db-2"]  # shards 1, 0, 0 (shard_of; Prometheus's own hashmod decides below)
        assert {shard_of(name, 2) for name in names} == {0, 1}
        added = {}
        for name in names:  # nothing listens there: a target is listed (down) on the shard that keeps it
            node, exporter = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
            done = run_hosts("--data-dir", data, "add", name, node, exporter)
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == f"host {name}: {hosts / f'{name}.yml'} (shard {shard_of(name, 2)} of 2)"
            added[name] = {("node", node), ("fioscope", exporter)}

        def placed() -> dict[str, list[tuple[int, str, str]]]:
            out: dict[str, list[tuple[int, str, str]]] = {}
            for i, client in enumerate(shards):
                for target in client.targets():
                    if target["labels"].get("host") in names:
                        out.setdefault(target["labels"]["host"], []).append((i, target["labels"]["job"], target["labels"]["instance"]))
            return out

        # file_sd reads the folder at once; discovery hands it to the scrapers every 5 s
        wait_for(lambda: all(len(placed().get(name, [])) == 2 for name in names), 30, interval=0.5, what="every host's two targets")
        for name, where in placed().items():
            assert len(where) == 2 and {shard for shard, _, _ in where} == {shard_of(name, 2)}, (name, where)  # on one shard
            assert {(job, instance) for _, job, instance in where} == added[name]
    finally:
        stack.stop()
    # stopped: its record is gone, and hosts add says so rather than guess
    after = run_hosts("--data-dir", data, "add", "db-3", f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}")
    assert after.returncode == 2 and "no native stack is running" in after.stderr and len(after.stderr.splitlines()) == 1


def test_a_reshard_leaves_no_shard_file_behind(tmp_path):
    """From 4 shards to 2: shards 2 and 3's prometheus-shard-<i>.yml are removed by the generator (and are out of date
    under check) and by the native stack in its data directory."""
    folder = tmp_path / "out" / "provisioning" / "prometheus"

    def generate(*args: str) -> int:
        return run(["python3", "-m", "fioscope_mixin", *args, "--only", "prometheus", "--out", tmp_path / "out"]).returncode

    def shard_files(where: Path) -> list[str]:
        return sorted(p.name for p in where.glob("prometheus-shard-*"))

    assert generate("generate", "--set", "fleet.shards=4") == 0
    assert shard_files(folder) == [f"prometheus-shard-{i}.yml" for i in range(4)]
    (folder / "prometheus-shard-1.yml.orig").write_text("a user's own file: never touched")
    assert generate("check", "--set", "fleet.shards=2") == 1  # shards 2 and 3 are out of date
    assert generate("generate", "--set", "fleet.shards=2") == 0
    assert shard_files(folder) == ["prometheus-shard-0.yml", "prometheus-shard-1.yml", "prometheus-shard-1.yml.orig"]
    assert generate("check", "--set", "fleet.shards=2") == 0

    NativeStack(tmp_path / "data", ["fleet.shards=4"])
    NativeStack(tmp_path / "data", ["fleet.shards=2"])
    assert shard_files(tmp_path / "data" / "config" / "provisioning" / "prometheus") == [f"prometheus-shard-{i}.yml" for i in range(2)]
