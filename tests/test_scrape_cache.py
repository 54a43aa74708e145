"""/metrics is rendered once per change and served from that rendering (issue 52 item 3), and no scrape ever gets a
page older than a change: a result written, a live figure changed, a web config reloaded, each on the very next scrape.

The server is the one ``fioscope serve`` runs (``http.listen``: its selector, workers, auth and reload threads), in
this process so that the test knows when a change has landed; the changes are made by the calls the scan loop, the
runner and the reload thread make, with real fio output.
"""

from __future__ import annotations

import base64
import shutil
import threading
import urllib.request

import bcrypt
import pytest
import yaml
from fioscope.collector import Exposition
from fioscope.collector.exporter import ScrapeTimer
from fioscope.collector.topology import TopologyCollector
from fioscope.config import load_config
from fioscope.http import listen
from fioscope.parser import parse_text
from fioscope.store import Store
from fioscope_testkit.net import wait_for
from fioscope_testkit.paths import FIO_OUTPUTS
from helpers.exposition import parse_exposition, sample
from helpers.results import settle

PASSWORD = "s3cret"
AUTHORIZATION = "Basic " + base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()


def web_config_text() -> str:
    return yaml.safe_dump({"basic_auth_users": {"prometheus": bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()}})


@pytest.fixture
def served(tmp_path):
    """(store, reload status, web config file, results dir, scrape): a served store after its startup scan."""
    results = tmp_path / "results"
    results.mkdir()
    web_file = tmp_path / "web.yml"
    web_file.write_text(web_config_text())
    store = Store(load_config(None, str(results)))
    store.scan()
    store.hold_new_series()  # as serve does: what comes after the startup scan is new
    server, web = listen(store, "127.0.0.1:0", str(web_file))
    assert web is not None
    assert "fioscope-topology" in [t.name for t in threading.enumerate()]  # sysfs read again every scan interval
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    request = urllib.request.Request(f"http://127.0.0.1:{server.server_address[1]}/metrics", headers={"Authorization": AUTHORIZATION})

    def scrape() -> str:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.read().decode()

    try:
        yield store, web.status, web_file, results, scrape
    finally:
        server.shutdown()
        thread.join(10)


def test_every_change_is_on_the_very_next_scrape(served):
    store, status, web_file, results, scrape = served
    page = scrape()
    assert scrape() == page  # nothing changed: the same rendering, byte for byte (its render time included)

    # a result written into the results directory and scanned, as the scan loop does
    settle(shutil.copy(FIO_OUTPUTS / "fio-3.33" / "etcd.json+", results / "etcd.json"))
    store.scan()
    m = parse_exposition(scrape())
    assert sample(m, "fioscope_result_files") == 1
    assert sample(m, "fio_runs_total", jobname="etcd-wal") == 0  # new after startup: at zero once ...
    assert sample(m, "fio_latency_seconds_count", jobname="etcd-wal", ddir="sync", stage="lat") == 0
    m = parse_exposition(scrape())  # ... and with its counts on the next scrape, though nothing changed in between
    assert sample(m, "fio_runs_total", jobname="etcd-wal") == 1
    assert sample(m, "fio_latency_seconds_count", jobname="etcd-wal", ddir="sync", stage="lat") == 1823

    # live figures: a run started, fio's status reports one by one, the run finished, as the runner reports them
    key = ("live", "randrw-status", "")
    reports = parse_text((FIO_OUTPUTS / "fio-3.42" / "status.json").read_text(), source="status.json")
    store.start_run(["randrw-status"], "live")
    assert sample(parse_exposition(scrape()), "fio_run_running", jobname="randrw-status", target="live") == 1
    shown = []
    for report in reports[:-1]:
        store.update_live(report, "live")
        live = store.live_jobs()[key][1].directions["read"]
        m = parse_exposition(scrape())
        shown.append(sample(m, "fio_run_io_bytes", jobname="randrw-status", target="live", ddir="read"))
        assert shown[-1] == live.io_bytes
        assert sample(m, "fio_iops", jobname="randrw-status", target="live", ddir="read") == pytest.approx(live.iops)
    assert shown == sorted(set(shown)) and len(shown) == 4  # each report moved the figure
    store.finish_run(["randrw-status"], "live")
    assert sample(parse_exposition(scrape()), "fio_run_running", jobname="randrw-status", target="live") == 0

    # a web config reload refused (broken YAML), then one taken: the reload thread's verdicts
    web_file.write_text("basic_auth_users: [\n")
    wait_for(lambda: status.failures == 1 and not status.last_successful, 10, what="the reload refused")
    m = parse_exposition(scrape())
    assert sample(m, "fioscope_web_config_reload_failures_total") == 1
    assert sample(m, "fioscope_web_config_last_reload_successful") == 0
    web_file.write_text(web_config_text())
    wait_for(lambda: status.last_successful, 10, what="the reload taken")
    assert sample(parse_exposition(scrape()), "fioscope_web_config_last_reload_successful") == 1

    page = scrape()
    assert scrape() == page


def test_a_changed_disk_topology_is_served_once_read_again(tmp_path):
    """sysfs is read every scan interval (http.listen's fioscope-topology thread), not on a scrape: a device that
    appears is on the first scrape after that reading."""
    sys = tmp_path / "sys"
    (sys / "block").mkdir(parents=True)
    store = Store(load_config(None, str(tmp_path / "results")))
    exposition = Exposition(store, ScrapeTimer(), topology=TopologyCollector(store, sys, tmp_path / "dev-md"))
    page = exposition.render()
    assert b"fioscope_disk_info{" not in page
    disk = sys / "block" / "vdz"
    disk.mkdir()
    (disk / "size").write_text("2048\n")
    assert exposition.render() == page  # not read on a scrape
    exposition.refresh_topology()
    assert b'fioscope_disk_info{device="vdz",kind="disk",name="vdz",parents="",targets=""} 1.0' in exposition.render()
