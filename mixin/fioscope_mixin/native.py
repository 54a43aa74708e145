"""The fioscope stack without Docker: Prometheus, Alertmanager, node_exporter and the exporter
as local processes, from the very files compose.yaml mounts (Grafana needs Docker or a server
of its own; point it at provisioning/grafana).

    python3 -m fioscope_mixin.native             # foreground; Ctrl-C stops everything (make up-native)
    python3 -m fioscope_mixin.native --set stack.scrape_interval=5s --data-dir /tmp/fioscope
    python3 -m fioscope_mixin.native --shards 2   # the sharded fleet: 2 Prometheus + Thanos sidecars, Thanos Query

It runs from a checkout. Without --set it uses the committed files (alerts/*.rules.yaml, provisioning/...);
with --set it generates them with fioscope_mixin.prometheus into <data-dir>/config and uses those (the same
layout, so nothing is copied by hand). node_exporter's flags are read from compose.yaml.
With fleet.shards > 1 (--shards N) it starts shard i's Prometheus (provisioning/prometheus/prometheus-shard-<i>.yml)
with a Thanos sidecar each, and Thanos Query over the sidecars: the dashboards' datasource in the fleet mode
(provisioning/grafana-fleet). Every shard reads the same hosts folder and alerts the one Alertmanager.
"""

from __future__ import annotations

import argparse
import mmap
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from fioscope_mixin import CHECKOUT as REPO
from fioscope_mixin import prometheus
from fioscope_mixin.children import die_with_parent
from fioscope_mixin.hosts import DEFAULT_DATA_DIR, forget_stack, record_stack, settings_fleet
from fioscope_mixin.output import write_file
from fioscope_mixin.settings import SettingsError, load_settings
from fioscope_mixin.stack import private_files, samples_per_chunk, shard_count, shard_port, stale_shard_files
from fioscope_mixin.yamlfile import load_yaml


def binary(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit(f"native stack: none of {', '.join(names)} is installed "
                     "(apt-get install prometheus prometheus-node-exporter prometheus-alertmanager)")


def prometheus_major(path: str) -> int:
    """The major version of the Prometheus at ``path``: placed rule groups are named for its line's hash
    (fioscope_mixin.placement). Its --version says it (``prometheus, version 2.42.0+ds``), except a `go install`
    build's, whose Go build info names its module's version (v0.316.0 is Prometheus 3.16.0)."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
        said = re.search(r"version (\d+)\.", out.stdout + out.stderr)
        if said:
            return int(said.group(1))
        marker = b"\tgithub.com/prometheus/prometheus\tv0."
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as image:
            at = image.find(marker)
            module = re.match(rb"(\d+)\.", image[at + len(marker):at + len(marker) + 8]) if at >= 0 else None
        if module:
            return 3 if int(module.group(1)) >= 300 else 2
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    raise SystemExit(f"native stack: {path} does not say which Prometheus it is (--version, its Go build info)")


def node_exporter_flags() -> list[str]:
    """compose.yaml's node-exporter flags, less what only makes sense in a container."""
    compose = load_yaml(REPO / "compose.yaml", aliases=True)
    flags = compose["services"]["node-exporter"]["command"]
    # compose escapes $ as $$
    return [f.replace("$$", "$") for f in flags if not f.startswith(("--path.rootfs", "--web.listen-address"))]


class NativeStack:
    def __init__(self, data_dir: Path, overrides: list[str] | None = None, fioscope_config: Path | None = None,
                 env: dict[str, str] | None = None, fioscope_command: list[str] | None = None,
                 without: tuple[str, ...] = ()):
        self.data_dir = data_dir.resolve()
        self.without = without  # services not started (a benchmark plays the exporters itself)
        self.overrides = overrides or []
        try:
            self.settings = load_settings(self.overrides)
            self.shards = shard_count(self.settings)
            self.samples_per_chunk = samples_per_chunk(self.settings)
            # the hosts folder as an absolute path, so that a config generated into <data-dir>/config reads the folder
            # `hosts add` writes to (docs/fleet.md); recorded in the data directory at start
            self.fleet = settings_fleet(self.settings)
            self.settings["stack"]["hosts_dir"] = str(self.fleet.directory)
            # the configuration the overrides make (the committed one is the defaults'), refused as a whole if bad
            major = prometheus_major(binary("prometheus")) if self.overrides and self.settings["stack"]["place_rule_groups"] else 3
            rendered = prometheus.render(self.settings, major) if self.overrides else {}
        except SettingsError as exc:
            raise SystemExit(f"native stack: {exc}") from None
        self.root = self.data_dir / "config" if self.overrides else REPO
        for rel, text in rendered.items():
            write_file(self.root / rel, text, rel in private_files(self.settings))
        for path in stale_shard_files(self.root, self.settings) if self.overrides else []:
            path.unlink()  # a reshard's leftovers
        self.fioscope_config = fioscope_config or REPO / "provisioning" / "fioscope" / "fioscope.yaml"
        self.env = env or {}
        self.fioscope_command = fioscope_command or [sys.executable, "-m", "fioscope"]
        self.procs: dict[str, subprocess.Popen] = {}

    def address(self, service: str) -> str:
        return f"{self.settings['stack']['listen_host']}:{self.settings['stack']['ports'][service]}"

    def url(self, service: str, path: str = "") -> str:
        return f"http://{self.address(service)}{path}"

    def shard_address(self, service: str, shard: int) -> str:
        """Shard i's prometheus, sidecar_grpc or sidecar_http."""
        return f"{self.settings['stack']['listen_host']}:{shard_port(self.settings, service, shard)}"

    def query_url(self, path: str = "") -> str:
        """Where the dashboards' queries go: Thanos Query over the shards, or the one Prometheus."""
        if self.shards == 1:
            return self.url("prometheus", path)
        return f"http://{self.settings['stack']['listen_host']}:{self.settings['fleet']['ports']['query']}{path}"

    def thanos(self) -> str:
        path = Path(os.path.expanduser(str(self.settings["fleet"]["thanos_binary"])))
        if not os.access(path, os.X_OK):
            raise SystemExit(f"native stack: fleet.thanos_binary {path}: not built (scripts/setup.sh builds Thanos v0.42.5 there)")
        return str(path)

    def prometheus_flags(self) -> list[str]:
        """Flags every Prometheus of the stack takes beside its config, storage and address."""
        st = self.settings["stack"]
        flags = ["--web.enable-lifecycle"] + (["--enable-feature=concurrent-rule-eval"] if st["concurrent_rule_eval"] else [])
        if self.samples_per_chunk:
            flags.append(f"--storage.tsdb.samples-per-chunk={self.samples_per_chunk}")
        return flags

    def shard_commands(self) -> dict[str, list[str]]:
        """Shard i's Prometheus and Thanos sidecar, and Thanos Query over the sidecars."""
        d, out = self.data_dir, {}
        for i in range(self.shards):
            out[f"prometheus-{i}"] = [binary("prometheus"), f"--config.file=prometheus-shard-{i}.yml",
                                      f"--storage.tsdb.path={d / f'prometheus-{i}'}",
                                      f"--web.listen-address={self.shard_address('prometheus', i)}", *self.prometheus_flags()]
        if {"thanos-query", *(f"sidecar-{i}" for i in range(self.shards))} <= set(self.without):
            return out  # the shards alone (Thanos need not be built)
        thanos = self.thanos()
        for i in range(self.shards):
            out[f"sidecar-{i}"] = [thanos, "sidecar", f"--tsdb.path={d / f'prometheus-{i}'}",
                                   f"--prometheus.url=http://{self.shard_address('prometheus', i)}",
                                   f"--grpc-address={self.shard_address('sidecar_grpc', i)}",
                                   f"--http-address={self.shard_address('sidecar_http', i)}"]
        listen, ports = self.settings["stack"]["listen_host"], self.settings["fleet"]["ports"]
        endpoints = [f"--endpoint={self.shard_address('sidecar_grpc', i)}" for i in range(self.shards)]
        out["thanos-query"] = [thanos, "query", f"--http-address={listen}:{ports['query']}",
                               f"--grpc-address={listen}:{ports['query_grpc']}", *endpoints]
        return out

    def commands(self) -> dict[str, list[str]]:
        d = self.data_dir
        prometheus_cmd = {
            "prometheus": [binary("prometheus"), "--config.file=prometheus.yml",
                           f"--storage.tsdb.path={d / 'prometheus'}", f"--web.listen-address={self.address('prometheus')}",
                           *self.prometheus_flags()],
        } if self.shards == 1 else self.shard_commands()
        return {
            "node_exporter": [binary("prometheus-node-exporter", "node_exporter"), f"--web.listen-address={self.address('node_exporter')}",
                              *node_exporter_flags()],
            "alertmanager": [binary("prometheus-alertmanager", "alertmanager"),
                             f"--config.file={self.root / 'provisioning' / 'alertmanager' / 'alertmanager.yml'}",
                             f"--storage.path={d / 'alertmanager'}", f"--web.listen-address={self.address('alertmanager')}",
                             "--cluster.listen-address="],
            "fioscope": [*self.fioscope_command, "serve", f"--config.file={self.fioscope_config}",
                         f"--web.listen-address={self.address('fioscope')}"],
            **prometheus_cmd,
        }

    def working_dir(self, name: str) -> Path:
        """Prometheus runs in its config's directory, named by a relative --config.file: it then reads the rule files
        as ../../alerts/*.rules.yaml wherever the stack lives, the path placed rule groups are named for
        (fioscope_mixin.stack.rule_file_path); everything else in the data directory."""
        return self.root / "provisioning" / "prometheus" if name.startswith("prometheus") else self.data_dir

    def health_urls(self) -> dict[str, str]:
        shards = {} if self.shards == 1 else {
            **{f"prometheus-{i}": f"http://{self.shard_address('prometheus', i)}/-/ready" for i in range(self.shards)},
            **{f"sidecar-{i}": f"http://{self.shard_address('sidecar_http', i)}/-/ready" for i in range(self.shards)},
            "thanos-query": self.query_url("/-/ready")}
        return {"node_exporter": self.url("node_exporter", "/metrics"), "alertmanager": self.url("alertmanager", "/-/ready"),
                "fioscope": self.url("fioscope", "/-/healthy"), "prometheus": self.url("prometheus", "/-/ready"), **shards}

    def start(self, timeout: float = 60) -> None:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "FIOSCOPE_RESULTS_DIR": str(self.data_dir / "results"),
               "FIOSCOPE_TARGET_DIR": str(self.data_dir / "target"), **self.env}
        Path(env["FIOSCOPE_TARGET_DIR"]).mkdir(parents=True, exist_ok=True)
        try:
            record_stack(self.data_dir, self.fleet)  # for `hosts add` while it runs
            for name, cmd in self.commands().items():  # dependencies first, Prometheus last (as compose's depends_on)
                if name in self.without:
                    continue
                # a session of its own (the terminal's Ctrl-C is the launcher's to handle), ended with the launcher
                # however it ends (SIGKILL included)
                self.procs[name] = subprocess.Popen(cmd, stdout=(logs / f"{name}.log").open("w"), stderr=subprocess.STDOUT,
                                                    env=env, cwd=self.working_dir(name), start_new_session=True,
                                                    preexec_fn=die_with_parent())
                self._wait_healthy(name, timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self, name: str, timeout: float) -> None:
        url = self.health_urls()[name]
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.procs[name].poll() is not None:
                log = (self.data_dir / "logs" / f"{name}.log").read_text()[-2000:]
                raise RuntimeError(f"{name} exited with {self.procs[name].returncode}:\n{log}")
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"{name} not healthy at {url} after {timeout}s")

    def stop(self) -> None:
        """Stop every service, the last started first. A signal meanwhile (a second Ctrl-C, a SIGTERM) never leaves one
        running: it kills every one still running at once."""
        hurry = False

        def kill_all(*_: object) -> None:
            nonlocal hurry
            hurry = True
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.kill()

        handlers = {}
        if threading.current_thread() is threading.main_thread():  # only the main thread handles signals
            handlers = {sig: signal.signal(sig, kill_all) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for name in reversed(list(self.procs)):
                proc = self.procs[name]
                if proc.poll() is None:
                    if hurry:
                        proc.kill()
                    else:
                        proc.terminate()
                    try:
                        proc.wait(15)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            self.procs.clear()
            forget_stack(self.data_dir)
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python3 -m fioscope_mixin.native", description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="TSDB, results, target and logs (default ./data)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override alerts/config.yaml")
    parser.add_argument("--shards", type=int, metavar="N", help="N Prometheus shards under Thanos Query (= --set fleet.shards=N)")
    args = parser.parse_args()
    stack = NativeStack(args.data_dir, args.set + ([f"fleet.shards={args.shards}"] if args.shards is not None else []))
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        stack.start()
        queries = "Prometheus" if stack.shards == 1 else f"Thanos Query over {stack.shards} shards"
        print(f"fioscope native stack up: {queries} {stack.query_url()}  Alertmanager {stack.url('alertmanager')}  "
              f"fioscope {stack.url('fioscope', '/metrics')}  node_exporter {stack.url('node_exporter', '/metrics')}  "
              f"(logs in {args.data_dir / 'logs'}; Ctrl-C stops)", flush=True)
        while all(p.poll() is None for p in stack.procs.values()):
            time.sleep(1)
        dead = [n for n, p in stack.procs.items() if p.poll() is not None]
        print(f"native stack: {', '.join(dead)} exited; see {args.data_dir / 'logs'}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
