"""The stack's own configuration: prometheus.yml and alertmanager.yml (compose and the native stack)."""

from __future__ import annotations


def prometheus_config(s: dict) -> dict:
    st = s["stack"]
    host, ports = st["listen_host"], st["ports"]

    def target(job: str, port_key: str) -> dict:
        return {"job_name": job, "static_configs": [{"targets": [f"{host}:{ports[port_key]}"]}]}

    return {
        "global": {"scrape_interval": st["scrape_interval"], "evaluation_interval": st["evaluation_interval"]},
        "rule_files": ["../../alerts/recording.rules.yaml", "../../alerts/alerts.rules.yaml"],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"{host}:{ports['alertmanager']}"]}]}]},
        "scrape_configs": [
            target("prometheus", "prometheus"),
            target("node", "node_exporter"),
            target("fioscope", "fioscope"),
            target("alertmanager", "alertmanager"),
            # an etcd on this host, if one runs (its target is simply down otherwise)
            target("etcd", "etcd"),
        ],
    }


def alertmanager_config(s: dict) -> dict:
    receiver: dict = {"name": "default"}
    if s["stack"]["alertmanager_webhook"]:
        receiver["webhook_configs"] = [{"url": s["stack"]["alertmanager_webhook"], "send_resolved": True}]
    interval = s["stack"]["evaluation_interval"]
    return {
        "route": {"receiver": "default", "group_by": ["alertname", "instance", "device", "jobname"],
                  "group_wait": interval, "group_interval": s["stack"]["alertmanager_group_interval"], "repeat_interval": "4h"},
        "receivers": [receiver],
    }
