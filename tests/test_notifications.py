"""One notification per episode: the stack's Alertmanager configuration (its inhibit_rules, fioscope_mixin.stack) on a
real Alertmanager, with alerts as the rules raise them for one device's episode.

On one device the alert that names the episode (a stall, a cap, a cause that pages) is the one notification: the
alerts that only describe it (busy, above the SLA, a long queue; never one more severe than the page) and the
informational naming of its own cause stay silent, as do the any-workload pages of a cap that fio's page covers.
Other devices of the same host, host-level alerts, and a symptom with no page beside it are notified as before. A
page is notified after its own short group_wait, the rest an evaluation later.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest
import yaml
from fioscope_mixin import names as n
from fioscope_mixin.settings import load_settings
from fioscope_mixin.stack import alertmanager_config
from fioscope_testkit.binaries import first_installed, require
from fioscope_testkit.net import free_port, wait_for
from helpers.lab import webhook_receiver

# (host, device): the alerts firing for it as (alertname, severity), and the ones its notifications carry
EPISODES = {
    ("h1", "vdb"): ({n.ALERT_DISK_THROTTLED: "warning", n.ALERT_DISK_CAUSE_PROVIDER_CAP: "info", n.ALERT_DISK_SATURATED: "info",
                     n.ALERT_DISK_LATENCY_ABOVE_SLA: "warning", n.ALERT_DISK_AT_PROVISIONED_LIMIT: "info"},
                    {n.ALERT_DISK_THROTTLED}),
    # fio's write test on a capped volume, its page-cache backlog draining at the cap after fio stopped
    ("h2", "vdb"): ({n.ALERT_DISK_THROTTLED_UNDER_FIO_LOAD: "critical", n.ALERT_DISK_THROTTLED: "warning",
                     n.ALERT_DISK_THROTTLED_AFTER_BURST: "warning", n.ALERT_DISK_CAUSE_WRITEBACK_CLIFF: "info"},
                    {n.ALERT_DISK_THROTTLED_UNDER_FIO_LOAD}),
    ("h3", "vdb"): ({n.ALERT_DISK_STALLED: "critical", n.ALERT_DISK_CAUSE_STALL: "info", n.ALERT_DISK_LATENCY_ABOVE_SLA: "warning",
                     n.ALERT_DISK_QUEUE_EXPLODING: "warning"},
                    {n.ALERT_DISK_STALLED}),
    ("h4", "vdb"): ({n.ALERT_DISK_CAUSE_NOISY_NEIGHBOUR: "warning", n.ALERT_DISK_LATENCY_ABOVE_SLA: "warning",
                     n.ALERT_DISK_SATURATED: "info"},
                    {n.ALERT_DISK_CAUSE_NOISY_NEIGHBOUR}),
    # an info page silences info alerts only: the SLA's warning is sent beside it
    ("h5", "nvme0n1"): ({n.ALERT_DISK_AT_PHYSICAL_MAXIMUM: "info", n.ALERT_DISK_CAUSE_DEVICE_MAX: "info", n.ALERT_DISK_SATURATED: "info",
                         n.ALERT_DISK_LATENCY_ABOVE_SLA: "warning"},
                        {n.ALERT_DISK_AT_PHYSICAL_MAXIMUM, n.ALERT_DISK_LATENCY_ABOVE_SLA}),
    # no page beside them: each is the notification (another device of a capped host; a symptom alone; a cause's info alone)
    ("h1", "vdc"): ({n.ALERT_DISK_LATENCY_ABOVE_SLA: "warning"}, {n.ALERT_DISK_LATENCY_ABOVE_SLA}),
    ("h6", "vdb"): ({n.ALERT_DISK_SATURATED: "info", n.ALERT_DISK_QUEUE_EXPLODING: "warning"},
                    {n.ALERT_DISK_SATURATED, n.ALERT_DISK_QUEUE_EXPLODING}),
    ("h7", "vdb"): ({n.ALERT_DISK_CAUSE_PROVIDER_CAP: "info"}, {n.ALERT_DISK_CAUSE_PROVIDER_CAP}),
}
# a host-level alert (no device) on a host whose device pages: never silenced by it
HOST_ALERT = ("h1", n.ALERT_HIGH_IOWAIT_IDLE_CPU, "warning")


def _api(url: str, path: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read()
    return json.loads(text) if text else None


def _ready(url: str) -> bool:
    with urllib.request.urlopen(url + "/-/ready", timeout=2) as response:
        return response.status == 200


def _posted() -> list[dict]:
    def alert(labels: dict) -> dict:
        return {"labels": labels, "annotations": {"summary": labels["alertname"]}, "startsAt": now}

    # started now, as Prometheus sends an alert that just fired: Alertmanager flushes a new group at once, without its
    # group_wait, for an alert that started longer ago than that, racing its inhibitor's view of the pages
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    alerts = [alert({"alertname": name, "severity": severity, "host": host, "device": device,
                     "instance": f"{host}:9100", "job": "node"})
              for (host, device), (firing, _) in EPISODES.items() for name, severity in firing.items()]
    host, name, severity = HOST_ALERT
    return alerts + [alert({"alertname": name, "severity": severity, "host": host, "instance": f"{host}:9100", "job": "node"})]


def test_one_notification_per_episode(tmp_path):
    binary = require(first_installed("prometheus-alertmanager", "alertmanager"))
    with webhook_receiver() as webhook:
        settings = load_settings(["stack.evaluation_interval=6s", "stack.alertmanager_group_interval=1s",
                                  f"stack.alertmanager_webhook={webhook.url}"])
        config = tmp_path / "alertmanager.yml"
        config.write_text(yaml.safe_dump(alertmanager_config(settings)))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = (tmp_path / "alertmanager.log").open("wb")
        proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.path={tmp_path / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                                stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_for(lambda: _ready(url), 30, what="Alertmanager ready")
            # every alert in one batch, pages and what they silence together, as one evaluation's firings arrive
            posted = time.time()
            _api(url, "/api/v2/alerts", _posted())
            expected = {key: notified for key, (_, notified) in EPISODES.items()}
            expected_count = sum(map(len, expected.values())) + 1

            def notified() -> dict[tuple[str, str], set[str]]:
                got: dict[tuple[str, str], set[str]] = {}
                for _, a in webhook.received:
                    got.setdefault((a["labels"]["host"], a["labels"].get("device", "")), set()).add(a["labels"]["alertname"])
                return got

            wait_for(lambda: sum(map(len, notified().values())) >= expected_count, 30, what="the notifications")
            time.sleep(3)  # any notification an inhibit rule missed has arrived by now
            got = notified()
            # a page leaves after its own group_wait (1 s), not the evaluation's (6 s) its silenced alerts wait for it
            waited = {a["labels"]["alertname"]: t - posted for t, a in webhook.received}
            pages = {name: s for name, s in waited.items() if name in n.EPISODE_PAGES and name != n.ALERT_DISK_AT_PHYSICAL_MAXIMUM}
            others = {name: s for name, s in waited.items() if name not in n.EPISODE_PAGES}
            assert pages and max(pages.values()) < 4, pages
            assert others and min(others.values()) >= 5, others
            assert got.pop((HOST_ALERT[0], "")) == {HOST_ALERT[1]}
            assert got == expected
            # silenced by an inhibit rule, not lost: Alertmanager holds each, suppressed, naming what inhibits it
            states = {(a["labels"]["host"], a["labels"].get("device", ""), a["labels"]["alertname"]): a["status"]
                      for a in _api(url, "/api/v2/alerts")}  # type: ignore[union-attr]
            for (host, device), (firing, shown) in EPISODES.items():
                for name in firing:
                    status = states[(host, device, name)]
                    if name in shown:
                        assert status["state"] == "active" and not status["inhibitedBy"], (host, device, name, status)
                    else:
                        assert status["state"] == "suppressed" and status["inhibitedBy"], (host, device, name, status)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                pytest.fail("Alertmanager did not stop")
            finally:
                log.close()
