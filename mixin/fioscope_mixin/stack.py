"""The stack's own configuration: prometheus.yml and alertmanager.yml (compose and the native stack).

Fleet: the ``node`` and ``fioscope`` jobs scrape this stack's exporters (static, ``host`` =
``stack.host``) and every test host with a file in ``stack.hosts_dir`` (file_sd; one file per host,
written by ``python3 -m fioscope_mixin.hosts add``). A host file lists both of its exporters; each target group
names its job in the ``__fioscope_job`` label, which Prometheus drops after relabelling.
"""

from __future__ import annotations

from fioscope_mixin.settings import SettingsError

FLEET_JOBS = ("node", "fioscope")  # the scrape jobs every host has; file_sd groups say which with JOB_LABEL
JOB_LABEL = "__fioscope_job"
HOST_FILE_GLOB = "*.yml"


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


def fleet_job(st: dict, job: str, local_target: str) -> dict:
    """One of FLEET_JOBS: this stack's exporter plus every host file's group for ``job``."""
    return {
        "job_name": job,
        **scrape_security(st),
        "static_configs": [{"targets": [local_target], "labels": {"host": st["host"], JOB_LABEL: job}}],
        "file_sd_configs": [{"files": [f"{st['hosts_dir'].rstrip('/')}/{HOST_FILE_GLOB}"], "refresh_interval": "1m"}],
        "relabel_configs": [
            {"source_labels": [JOB_LABEL], "regex": job, "action": "keep"},
            # a group without a host label is named after its address
            {"source_labels": ["host", "__address__"], "regex": ";(.+?)(?::\\d+)?", "target_label": "host", "replacement": "$1"},
        ],
    }


def prometheus_config(s: dict) -> dict:
    st = s["stack"]
    if not isinstance(st["etcd_endpoints"], list) or not all(isinstance(e, str) and e for e in st["etcd_endpoints"]):
        raise SettingsError(f"stack.etcd_endpoints: expected a list of host:port, got {st['etcd_endpoints']!r}")
    host, ports = st["listen_host"], st["ports"]

    def target(job: str, port_key: str) -> dict:
        return {"job_name": job, "static_configs": [{"targets": [f"{host}:{ports[port_key]}"]}]}

    return {
        "global": {"scrape_interval": st["scrape_interval"], "evaluation_interval": st["evaluation_interval"]},
        "rule_files": ["../../alerts/recording.rules.yaml", "../../alerts/alerts.rules.yaml"],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"{host}:{ports['alertmanager']}"]}]}]},
        "scrape_configs": [
            target("prometheus", "prometheus"),
            fleet_job(st, "node", f"{host}:{ports['node_exporter']}"),
            fleet_job(st, "fioscope", f"{host}:{ports['fioscope']}"),
            target("alertmanager", "alertmanager"),
            # etcd only where the settings name its endpoints: a target where none runs is only a down target
            *([{"job_name": "etcd", "static_configs": [{"targets": list(st["etcd_endpoints"])}]}] if st["etcd_endpoints"] else []),
        ],
    }


def alertmanager_config(s: dict) -> dict:
    receiver: dict = {"name": "default"}
    if s["stack"]["alertmanager_webhook"]:
        receiver["webhook_configs"] = [{"url": s["stack"]["alertmanager_webhook"], "send_resolved": True}]
    interval = s["stack"]["evaluation_interval"]
    cluster = s["selectors"]["cluster_label"]
    group_by = ([cluster] if cluster else []) + ["alertname", "host", "instance", "device", "target", "jobname"]
    return {
        "route": {"receiver": "default", "group_by": group_by,
                  "group_wait": interval, "group_interval": s["stack"]["alertmanager_group_interval"], "repeat_interval": "4h"},
        "receivers": [receiver],
    }
