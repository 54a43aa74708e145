"""The stack's own configuration: prometheus.yml and alertmanager.yml (compose and the native stack).

Fleet: the ``node`` and ``fioscope`` jobs scrape this stack's exporters (static, ``host`` =
``stack.host``) and every test host with a file in ``stack.hosts_dir`` (file_sd; one file per host,
written by ``python3 -m fioscope_mixin.hosts add``). A host file lists both of its exporters; each target group
names its job in the ``__fioscope_job`` label, which Prometheus drops after relabelling.

Shards (``fleet.shards`` > 1): shard i's prometheus.yml keeps the fleet targets whose ``host`` hashes to i
(hashmod over the host name, so a host's node_exporter and exporter land together and a new host file lands
on exactly one shard with no edit), carries external label ``shard``, and sends its alerts to the one Alertmanager.
Where the hosts folder is and how a running stack shares it with ``hosts add``: docs/fleet.md.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from pathlib import Path

from fioscope_mixin import CHECKOUT
from fioscope_mixin import names as n
from fioscope_mixin.names import DATASOURCE_UID
from fioscope_mixin.settings import SettingsError

FLEET_JOBS = ("node", "fioscope")  # the scrape jobs every host has; file_sd groups say which with JOB_LABEL
JOB_LABEL = "__fioscope_job"
HOST_FILE_GLOB = "*.yml"
SHARD_LABEL = "shard"  # external label of each shard's series and alerts
# prometheus.yml's folder in the checkout: a relative stack.hosts_dir is relative to it (as Prometheus reads it)
CONFIG_DIR = CHECKOUT / "provisioning" / "prometheus"
SHARD_FILE = re.compile(r"prometheus-shard-[0-9]+\.yml")


def scrape_security(st: dict) -> dict:
    """scheme / tls_config / basic_auth of a fleet job, from stack.scrape_tls and stack.scrape_basic_auth."""
    tls, auth = st["scrape_tls"], st["scrape_basic_auth"]
    out: dict = {}
    if tls["enabled"]:
        tls_config = {k: tls[k] for k in ("ca_file", "server_name") if tls[k]}
        if tls["insecure_skip_verify"]:
            tls_config["insecure_skip_verify"] = True
        out = {"scheme": "https", "tls_config": tls_config}
    if bool(auth["username"]) != bool(auth["password_file"]):
        raise SettingsError("stack.scrape_basic_auth: set both username and password_file (the password is never a setting)")
    if auth["username"]:
        if not tls["enabled"]:
            raise SettingsError("stack.scrape_basic_auth: basic auth needs stack.scrape_tls.enabled (no passwords over plain HTTP)")
        out["basic_auth"] = {"username": auth["username"], "password_file": auth["password_file"]}
    return out


def hosts_dir_setting(st: dict) -> str:
    """stack.hosts_dir, checked: Prometheus reads every *.yml in it as target groups, so it is a folder of host files
    alone (never prometheus.yml's own folder, one above it or the root) and a plain name, not a glob."""
    value = st["hosts_dir"]
    norm = posixpath.normpath(value) if isinstance(value, str) and value.strip() else ""
    if not norm or norm == "/" or set(norm.split("/")) <= {".", ".."} or any(c in value for c in "*?[\\\n\0"):
        raise SettingsError("stack.hosts_dir: expected the path of a folder of host files alone (relative to provisioning/prometheus/, "
                            f"or absolute; not that folder or one above it), got {value!r}")
    return value


def hosts_path(s: dict) -> Path:
    """The folder stack.hosts_dir names, absolute: a relative one from the checkout's provisioning/prometheus/, where
    the committed prometheus.yml reads it. The native stack gives its generated config this path (docs/fleet.md)."""
    path = Path(os.path.abspath(CONFIG_DIR / hosts_dir_setting(s["stack"])))
    if path == CONFIG_DIR or path in CONFIG_DIR.parents:  # an absolute path to prometheus.yml's folder or above
        raise SettingsError(f"stack.hosts_dir: {path} holds the stack's own files; give a folder of host files alone")
    return path


def own_target(st: dict, job: str) -> str:
    """This stack's own exporter of one of FLEET_JOBS (host stack.host): listen_host:port."""
    return f"{st['listen_host']}:{st['ports'][{'node': 'node_exporter', 'fioscope': 'fioscope'}[job]]}"


def shard_count(s: dict) -> int:
    shards = s["fleet"]["shards"]
    if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= 64:
        raise SettingsError(f"fleet.shards: expected a whole number 1-64, got {shards!r}")
    return shards


def prometheus_tuning(s: dict, key: str) -> int:
    """stack.<key> (samples_per_chunk, gogc): 0 (Prometheus's own), or the value its Prometheus runs with."""
    value = s["stack"][key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SettingsError(f"stack.{key}: expected 0 (Prometheus's own) or a positive whole number, got {value!r}")
    return value


def samples_per_chunk(s: dict) -> int:
    """stack.samples_per_chunk: the head chunk's samples the native stack's Prometheus is started with (0: its own)."""
    return prometheus_tuning(s, "samples_per_chunk")


def shard_of(host: str, shards: int) -> int:
    """The shard Prometheus's hashmod puts ``host`` on: md5 of the label value, its low 8 bytes big-endian, mod shards."""
    return int.from_bytes(hashlib.md5(host.encode()).digest()[8:], "big") % shards


def shard_relabel(shards: int, shard: int) -> list[dict]:
    """Keep the targets whose host hashes to ``shard`` of ``shards`` (after the host label is set)."""
    return [{"source_labels": ["host"], "modulus": shards, "target_label": "__tmp_fioscope_shard", "action": "hashmod"},
            {"source_labels": ["__tmp_fioscope_shard"], "regex": str(shard), "action": "keep"}]


def fleet_job(st: dict, job: str, shard: tuple[int, int] | None = None) -> dict:
    """One of FLEET_JOBS: this stack's exporter plus every host file's group for ``job``; with ``shard`` = (i, shards)
    only the hosts of shard i."""
    out = {
        "job_name": job,
        **scrape_security(st),
        "static_configs": [{"targets": [own_target(st, job)], "labels": {"host": st["host"], JOB_LABEL: job}}],
        "file_sd_configs": [{"files": [f"{hosts_dir_setting(st).rstrip('/')}/{HOST_FILE_GLOB}"], "refresh_interval": "1m"}],
        "relabel_configs": [
            {"source_labels": [JOB_LABEL], "regex": job, "action": "keep"},
            # a group without a host label is named after its address
            {"source_labels": ["host", "__address__"], "regex": ";(.+?)(?::\\d+)?", "target_label": "host", "replacement": "$1"},
            *(shard_relabel(shard[1], shard[0]) if shard else []),
        ],
    }
    if job == "fioscope" and st["convert_classic_histograms_to_nhcb"]:
        out["convert_classic_histograms_to_nhcb"] = True
    return out


def rule_file_path(rel: str) -> str:
    """A rule file (relative to the repository) as prometheus.yml names it: relative to its directory,
    provisioning/prometheus. A Prometheus started there with a relative --config.file (the native stack) reads it by
    this path, the one in the hash that places its groups (fioscope_mixin.placement)."""
    return posixpath.relpath(rel, "provisioning/prometheus")


def prometheus_config(s: dict, shard: int | None = None) -> dict:
    """prometheus.yml; with ``shard`` (0 .. fleet.shards - 1) that shard's."""
    st = s["stack"]
    if not isinstance(st["etcd_endpoints"], list) or not all(isinstance(e, str) and e for e in st["etcd_endpoints"]):
        raise SettingsError(f"stack.etcd_endpoints: expected a list of host:port, got {st['etcd_endpoints']!r}")
    host, ports = st["listen_host"], st["ports"]
    sharded = (shard, shard_count(s)) if shard is not None else None

    def target(job: str, port: int) -> dict:
        return {"job_name": job, "static_configs": [{"targets": [f"{host}:{port}"]}]}

    global_ = {"scrape_interval": st["scrape_interval"], "evaluation_interval": st["evaluation_interval"]}
    if sharded:
        global_["external_labels"] = {SHARD_LABEL: str(shard)}
    local = [] if shard else [  # this host's Alertmanager and etcd once, on shard 0
        target("alertmanager", ports["alertmanager"]),
        # etcd only where the settings name its endpoints: a target where none runs is only a down target
        *([{"job_name": "etcd", "static_configs": [{"targets": list(st["etcd_endpoints"])}]}] if st["etcd_endpoints"] else []),
    ]
    gogc = prometheus_tuning(s, "gogc")
    return {
        "global": global_,
        # Prometheus 2.53+ and 3 read it (2.42 refuses the block): written only where set
        **({"runtime": {"gogc": gogc}} if gogc else {}),
        "rule_files": [rule_file_path(rel) for rel in n.RULE_FILES],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"{host}:{ports['alertmanager']}"]}]}]},
        "scrape_configs": [
            target("prometheus", shard_port(s, "prometheus", shard or 0)),
            fleet_job(st, "node", sharded),
            fleet_job(st, "fioscope", sharded),
            *local,
        ],
    }


def shard_port(s: dict, service: str, shard: int) -> int:
    """Shard i's port of ``service``: prometheus (stack.ports.prometheus + i), sidecar_grpc or sidecar_http (fleet.ports + i)."""
    base = s["stack"]["ports"]["prometheus"] if service == "prometheus" else s["fleet"]["ports"][service]
    return int(base) + shard


def shard_configs(s: dict) -> dict[str, dict]:
    """{path relative to the repository: prometheus.yml of each shard} when fleet.shards > 1 (beside prometheus.yml,
    so the rule files and the hosts folder are the same relative paths)."""
    shards = shard_count(s)
    if shards == 1:
        return {}
    return {f"provisioning/prometheus/prometheus-shard-{i}.yml": prometheus_config(s, i) for i in range(shards)}


def stale_shard_files(root: Path, s: dict) -> list[Path]:
    """The prometheus-shard-<i>.yml under ``root``'s provisioning/prometheus/ that fleet.shards no longer makes (after a
    reshard from 4 to 2: shards 2 and 3, which nothing would start or regenerate)."""
    keep = {root / rel for rel in shard_configs(s)}
    folder = root / "provisioning" / "prometheus"
    return sorted(p for p in folder.glob("prometheus-shard-*.yml") if SHARD_FILE.fullmatch(p.name) and p not in keep)


def fleet_datasource(s: dict) -> dict:
    """Grafana's datasource for the sharded fleet: the dashboards' uid, at Thanos Query (the global layer)."""
    return {"apiVersion": 1, "datasources": [{
        "name": "Prometheus", "uid": DATASOURCE_UID, "type": "prometheus", "access": "proxy",
        "url": f"http://{s['stack']['listen_host']}:{s['fleet']['ports']['query']}", "isDefault": True,
        "jsonData": {"timeInterval": s["stack"]["scrape_interval"]}}]}


ALERTMANAGER_CONFIG = "provisioning/alertmanager/alertmanager.yml"


def private_files(s: dict) -> list[str]:
    """The generated files (relative to the repository) that carry a secret, written 0600: alertmanager.yml with a
    webhook (its URL often holds a token)."""
    return [ALERTMANAGER_CONFIG] if s["stack"]["alertmanager_webhook"] else []


def alertmanager_config(s: dict) -> dict:
    receiver: dict = {"name": "default"}
    if s["stack"]["alertmanager_webhook"]:
        receiver["webhook_configs"] = [{"url": s["stack"]["alertmanager_webhook"], "send_resolved": True}]
    interval = s["stack"]["evaluation_interval"]
    cluster = s["selectors"]["cluster_label"]
    group_by = ([cluster] if cluster else []) + ["alertname", "host", "instance", "device", "target", "jobname"]
    # a page is its device's only alert of its group (group_by names the device): group_wait batches nothing for it and
    # only delays it. The alerts it silences keep a group_wait of an evaluation, for the page to arrive first; a page
    # an inhibit rule can silence (fio's page covers the any-workload ones) still waits a moment for its inhibitor
    page = {"matchers": [_alertname(n.EPISODE_PAGES), 'severity=~"critical|warning"'],
            "group_wait": s["stack"]["alertmanager_page_group_wait"]}
    return {
        "route": {"receiver": "default", "group_by": group_by,
                  "group_wait": interval, "group_interval": s["stack"]["alertmanager_group_interval"], "repeat_interval": "4h",
                  "routes": [page]},
        "receivers": [receiver],
        "inhibit_rules": inhibit_rules(s),
    }


def _alertname(names: tuple[str, ...] | str) -> str:
    return f'alertname="{names}"' if isinstance(names, str) else f'alertname=~"{"|".join(names)}"'


def inhibit_rules(s: dict) -> list[dict]:
    """One notification per episode of a device (names.EPISODE_PAGES): its page silences the alerts that only describe
    it (of its severity or below), the informational naming of its own cause, and, under fio's load, the any-workload
    pages of the same cap. On one device only (the cluster, host and device equal; a host-level alert has no device
    and is never silenced)."""
    cluster = s["selectors"]["cluster_label"]
    equal = ([cluster] if cluster else []) + ["host", "device"]
    # never a more severe alert than the page: an info page (the device's own maximum) silences info alerts only. (A
    # cause alert's info form names the cause another page gives: the write-back cliff's matches both sides of the
    # second rule, which Alertmanager lets only an alert of the source side alone silence)
    rules = [([_alertname(n.EPISODE_PAGES), 'severity=~"critical|warning"'], [_alertname(n.EPISODE_SYMPTOMS)]),
             ([_alertname(n.EPISODE_PAGES)], [_alertname(n.EPISODE_SYMPTOMS + n.CAUSE_ALERTS), 'severity="info"']),
             ([_alertname(n.FIO_EPISODE_PAGE)], [_alertname(n.FIO_EPISODE_FOLLOWERS)])]
    return [{"source_matchers": source, "target_matchers": target, "equal": list(equal)} for source, target in rules]
