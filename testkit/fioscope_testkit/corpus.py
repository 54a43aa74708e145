"""A hostile corpus of fio outputs: real fio JSON from tests/fixtures, mutated with a fixed seed.

``generate(n)`` returns ``n`` files, each with the outcome the exporter must reach:
``ok`` (published, its job under a unique name) or ``reject`` (counted once as a parse
error, nothing published). Mutations cover what a hostile review found: wrong container
types, 1e400 / NaN / negative numbers, bad percentile keys, JSON nested 1000 deep, lone
surrogates and control characters in label text, bad failure records, absurd timestamps,
truncated and non-JSON files. Special files (symlinks, FIFOs, huge files) are made by the
test itself, see ``special_files``.
"""

from __future__ import annotations

import copy
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

import yaml

from fioscope_testkit.paths import FIO_OUTPUTS

SEED = 20261122
BASES = ["randrw.json", "etcd.json+", "lat_percentiles.json+", "mixed_both.json", "numjobs2.json", "clientserver.json"]
RAW = "@@RAW@@"  # a string replaced by raw JSON text (1e400, NaN) after json.dumps


@dataclass
class CorpusFile:
    name: str
    data: bytes
    expected: str  # "ok" or "reject"
    jobname: str = ""  # the unique job name of an "ok" file
    mutation: str = ""


def _base_docs() -> list[tuple[str, dict]]:
    out = []
    for version in ("fio-3.33", "fio-3.42"):
        for name in BASES:
            out.append((f"{version}/{name}", json.loads((FIO_OUTPUTS / version / name).read_text())))
    return out


def _entries(doc: dict) -> list[dict]:
    return [e for e in doc.get("jobs", doc.get("client_stats", [])) if e.get("jobname") != "All clients"]


def _rename(doc: dict, name: str) -> None:
    for entry in _entries(doc):
        entry["jobname"] = name


def _latency(entry: dict) -> dict:
    """A latency object of this job that fio filled (N > 0), so every key in it is read."""
    for ddir in ("read", "write", "mixed"):
        for stage in ("clat_ns", "lat_ns"):
            lat = entry.get(ddir, {}).get(stage)
            if isinstance(lat, dict) and lat.get("N", 0) > 0:
                return lat
    return entry["sync"]["lat_ns"]


def _ddir(entry: dict) -> dict:
    return next(entry[d] for d in ("read", "write", "mixed") if d in entry and entry[d].get("total_ios", 0) > 0)


def _dumps(doc) -> bytes:
    text = json.dumps(doc)
    while f'"{RAW}' in text:  # "@@RAW@@1e400" -> 1e400
        start = text.index(f'"{RAW}')
        end = text.index('"', start + 1)
        text = text[:start] + text[start + 1 + len(RAW):end] + text[end + 1:]
    return text.encode("utf-8", errors="surrogatepass")


RAW_NUMBERS = ["1e400", "-1e400", "NaN", "Infinity", "-Infinity", "-1", "1e30", "string", "true", "list", "9" * 5000]


def _raw(value: str):
    """A value that json.dumps cannot write (1e400, NaN, 5000 digits) as a placeholder; the others as they are."""
    return {"string": "5", "true": True, "list": [], '"x"': "x"}.get(value, f"{RAW}{value}")


# ---- mutations: (name, expected, function(doc, entry, rng) -> doc or bytes) ---------------------
def _job_options(doc, e, rng):
    e["job options"] = rng.choice([[1, 2], "rw=read", 5, {"bs": {"x": 1}}, {"bs": ["4k"]}, {"bs": True}])


def _global_options(doc, e, rng):
    doc["global options"] = rng.choice([[], "x", 7])


def _percentile_container(doc, e, rng):
    _latency(e)["percentile"] = rng.choice([[], "x", 1.5])


def _bins_container(doc, e, rng):
    _latency(e)["bins"] = rng.choice([[], "x", 3])


def _job_entry(doc, e, rng):
    key = "jobs" if "jobs" in doc else "client_stats"
    doc[key].append(rng.choice(["job", [1], 5, None]))


def _jobs_container(doc, e, rng):
    key = "jobs" if "jobs" in doc else "client_stats"
    doc[key] = rng.choice([{}, "x", 5])


def _annotation_bad(doc, e, rng):
    doc["fioscope"] = rng.choice([
        [], "x", {"limits": {"read_iops": "lots"}}, {"target": 5}, {"target": "\ud800"}, {"sla_latency_seconds": -1},
        {"limits": {"read_iops": _raw("1e400")}}, {"limits": []}, {"tags": []}, {"tags": {"a": 5}}, {"schema": 99},
        {"device": ["vda"]}, {"failed": 1}, {"target": "x" * 300}, {"limits": {"independent": "maybe"}},
    ])


def _number_field(doc, e, rng):
    where = rng.choice(["entry", "ddir", "lat"])
    value = _raw(rng.choice(RAW_NUMBERS))
    if where == "entry":
        e[rng.choice(["error", "job_runtime"])] = value
    elif where == "ddir":
        _ddir(e)[rng.choice(["total_ios", "iops", "bw_bytes", "io_bytes"])] = value
    else:
        _latency(e)[rng.choice(["N", "mean", "min", "max"])] = value


def _percentile_key(doc, e, rng):
    pct = _latency(e).setdefault("percentile", {})
    # "1e-999990" is in (0, 100] but was a 1,000,135-character quantile label (issue 16)
    keys = ["abc", "", "sNaN", "1e999990", "NaN", "-5", "101", "0", "Infinity", "1" * 40, "1e-999990", "5E-3", "99.9"]
    pct[rng.choice(keys)] = 1000


def _percentile_value(doc, e, rng):
    pct = _latency(e).setdefault("percentile", {})
    pct["99.000000"] = _raw(rng.choice(RAW_NUMBERS))


def _bins_bad(doc, e, rng):
    bins = _latency(e).setdefault("bins", {})
    if rng.random() < 0.5:
        bins[rng.choice(["-5", "abc", "1e3", "", "9" * 30])] = 1
    else:
        bins["1000"] = _raw(rng.choice(RAW_NUMBERS + ["1.5"]))


def _deep(doc, e, rng):
    depth = rng.choice([1000, 5000])
    return (f'{{"fio version": "fio-3.33", "x": {"[" * depth}{"]" * depth}, "jobs": []}}\n').encode()


def _deep_inside(doc, e, rng):
    doc["extra"] = _raw("[" * 1200 + "]" * 1200)


def _surrogate(doc, e, rng):
    where = rng.choice(["jobname", "version", "bs", "directory", "hostname"])
    bad = rng.choice(["\ud800", "a\udfffb", "\udc80x"])
    if where == "jobname":
        e["jobname"] = bad
    elif where == "version":
        doc["fio version"] = "fio-3.33" + bad
    elif where == "hostname":
        e["hostname"] = bad
    else:
        e.setdefault("job options", {})[where] = bad


def _control(doc, e, rng):
    e["jobname"] = rng.choice(["a\nb", "x\x00y", "\x1b[31mred", "tab\there", "x" * 300, "\x85next"])


def _long_option(doc, e, rng):
    e.setdefault("job options", {})["filename"] = "f" * rng.choice([300, 5000])


def _timestamp(doc, e, rng):
    if rng.random() < 0.7:
        doc["timestamp_ms"] = _raw(rng.choice(["NaN", "Infinity", "1e30", "-5", '"x"', "1e400"]))
    else:
        doc.pop("timestamp_ms", None)
        doc["timestamp"] = _raw(rng.choice(["1e15", "NaN", "-1"]))


def _version(doc, e, rng):
    doc["fio version"] = rng.choice([5, ["fio-3.33"], "", None, "fio-2.21"])


def _truncated(doc, e, rng):
    data = _dumps(doc)
    return data[: rng.randrange(10, len(data) - 5)]


def _not_json(doc, e, rng):
    return rng.choice([b"", b"{}", b"[]", b"\x00\x01\x02\xff" * 50, b"hello\n", b'{"fio version": "fio-3.33"}', bytes(rng.randrange(256) for _ in range(500))])


INVALID = [
    ("job-options", _job_options), ("global-options", _global_options), ("percentile-container", _percentile_container),
    ("bins-container", _bins_container), ("job-entry", _job_entry), ("jobs-container", _jobs_container),
    ("annotation", _annotation_bad), ("number", _number_field), ("percentile-key", _percentile_key),
    ("percentile-value", _percentile_value), ("bins", _bins_bad), ("deep", _deep), ("deep-inside", _deep_inside),
    ("surrogate", _surrogate), ("control", _control), ("long-option", _long_option), ("timestamp", _timestamp),
    ("version", _version), ("truncated", _truncated), ("not-json", _not_json),
]


def _valid_values(doc, e, rng):
    for entry in _entries(doc):
        for ddir in ("read", "write"):
            if ddir in entry:
                entry[ddir]["iops"] = round(rng.uniform(0, 1e6), 3)


def _valid_extra(doc, e, rng):
    doc["x-extra"] = {"nested": [1, None, {"y": "z"}], "n": _raw(rng.choice(["NaN", "1e400"]))}  # unknown keys are ignored
    e["x-job-extra"] = [True, False]


def _valid_annotation(doc, e, rng):
    doc["fioscope"] = {"schema": 1, "target": "corpus-target", "device": "", "directory": "/srv/corpus", "profile": "p",
                       "tags": {"config": "baseline"}, "unknown-key": [1, 2], "sla_latency_seconds": 0.03}


def _valid_no_percentiles(doc, e, rng):
    for entry in _entries(doc):
        for ddir in ("read", "write", "trim", "mixed"):
            for stage in ("slat_ns", "clat_ns", "lat_ns"):
                if isinstance(entry.get(ddir, {}).get(stage), dict):
                    entry[ddir][stage].pop("percentile", None)


VALID = [("plain", lambda d, e, r: None), ("values", _valid_values), ("extra-keys", _valid_extra),
         ("annotation-ok", _valid_annotation), ("no-percentiles", _valid_no_percentiles)]


def _failure(rng, index: int) -> CorpusFile:
    name = f"c{index:03d}-failure"
    good = {"fioscope_failure": {"schema": 1, "jobnames": [name], "profile": "p", "message": "fio exited 1",
                                 "timestamp": 1790000000.0, "target": "corpus-target", "device": "", "directory": "/srv/corpus"}}
    if rng.random() < 0.3:
        return CorpusFile(f"{name}.failure.json", _dumps(good), "ok", name, "failure-ok")
    bad = copy.deepcopy(good)
    record = bad["fioscope_failure"]
    choice = rng.randrange(8)
    if choice == 0:
        record["jobnames"] = [1]
    elif choice == 1:
        record["jobnames"] = rng.choice(["x", [], [None], ["\ud800"], {"a": 1}])
    elif choice == 2:
        record["timestamp"] = _raw(rng.choice(["NaN", "1e30", "Infinity", "-1", '"x"']))
    elif choice == 3:
        bad = {"fioscope_failure": rng.choice([[], "x", 5])}
    elif choice == 4:
        bad = {"other": record}
    elif choice == 5:
        record["message"] = rng.choice([5, ["x"], "a\x00b"])
    elif choice == 6:
        record["target"] = rng.choice([5, "\ud800", "x" * 300])
    else:
        return CorpusFile(f"{name}.failure.json", _dumps(bad)[:40], "reject", mutation="failure-truncated")
    return CorpusFile(f"{name}.failure.json", _dumps(bad), "reject", mutation=f"failure-{choice}")


def generate(count: int = 777, seed: int = SEED) -> list[CorpusFile]:
    rng = random.Random(seed)
    bases = _base_docs()
    files = []
    for index in range(count):
        roll = rng.random()
        if roll < 0.08:
            files.append(_failure(rng, index))
            continue
        base_name, base = rng.choice(bases)
        doc = copy.deepcopy(base)
        name = f"c{index:03d}"
        _rename(doc, name)
        doc["timestamp_ms"] = int(doc.get("timestamp_ms", 0)) + index  # distinct content per file
        entry = _entries(doc)[0]
        valid = roll < 0.35
        mutation, func = rng.choice(VALID if valid else INVALID)
        out = func(doc, entry, rng)
        data = out if isinstance(out, bytes) else _dumps(doc)
        files.append(CorpusFile(f"{name}-{mutation}.json", data, "ok" if valid else "reject",
                                name if valid else "", f"{mutation} on {base_name}"))
    return files


def write(files: list[CorpusFile], directory: Path, mtime: float | None = None) -> None:
    for f in files:
        path = directory / f.name
        path.write_bytes(f.data)
        if mtime is not None:
            os.utime(path, (mtime, mtime))


# ---- hostile web configs (--web.config.file): each must be refused, at start and on a hot reload ----------
def hostile_web_configs(good: str) -> list[tuple[str, str]]:
    """(name, text) of web config files that must never take effect; ``good`` is a working config's text
    (TLS and basic auth) with ``basic_auth_users`` after ``tls_server_config``."""
    cut = good.index("basic_auth_users")
    return [
        ("empty", ""),
        ("whitespace", "\n  \n"),
        ("comments-only", "# nothing here\n"),
        ("null", "null\n"),
        ("truncated-before-users", good[:cut]),  # valid YAML: TLS without basic auth
        ("truncated-mid-hash", good[: good.index("$2", cut) + 12] + "\n"),
        ("list", "- tls_server_config\n"),
        ("scalar", "tls_server_config\n"),
        ("users-not-mapping", "basic_auth_users: [prometheus]\n"),
        ("tls-not-mapping", "tls_server_config: yes\nbasic_auth_users: {}\n"),
        ("only-headers", "http_server_config:\n  headers: {X-Frame-Options: deny}\n"),
        ("broken-yaml", "basic_auth_users: [broken\n"),
        ("binary", "\x00\x01\x02\xff"),
    ]


def hostile_typed_web_configs(good: dict) -> list[tuple[str, str]]:
    """(name, text) of web configs of the wrong types or hostile YAML (issue 24): each refused on reload.
    ``good``: a working config (tls_server_config with cert_file/key_file, basic_auth_users)."""
    def variant(path: tuple[str, ...], value) -> str:
        data = copy.deepcopy(good)
        node = data
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
        return yaml.safe_dump(data)

    users = yaml.safe_dump({"basic_auth_users": good["basic_auth_users"]})
    tls = {k: v for k, v in good["tls_server_config"].items() if k != "cert_file"}
    laughs = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else ', '.join(['lol'] * 9)}]\n" for i in range(6))
    return [
        ("cert-list", yaml.safe_dump({"tls_server_config": {**tls, "cert": [1]}}) + users),
        ("key-mapping", variant(("tls_server_config", "key_file"), {"a": "b"})),
        ("key-inline-mapping", yaml.safe_dump({"tls_server_config": {"cert_file": good["tls_server_config"]["cert_file"], "key": {"a": "b"}}})
         + users),
        ("key-binary", variant(("tls_server_config", "key_file"), b"server.key")),
        ("deep-nesting", users + "http_server_config: {headers: {X-Frame-Options: " + "[" * 5000 + "]" * 5000 + "}}\n"),
        ("alias-bomb", users + laughs + "http_server_config: {headers: {X-Frame-Options: *l5}}\n"),
        ("header-crlf", variant(("http_server_config", "headers", "X-Frame-Options"), "deny\r\nSet-Cookie: a=b")),
        ("prefer-not-bool", variant(("tls_server_config", "prefer_server_cipher_suites"), "yes please")),
        ("user-list", variant(("basic_auth_users", "prometheus"), ["$2y$10$x"])),
        ("user-cost-31", variant(("basic_auth_users", "prometheus"), "$2b$31$" + "a" * 53)),
    ]


# ---- hostile `stack/hosts.py add NAME NODE_ADDR FIOSCOPE_ADDR` arguments: each refused, nothing written ----------
GOOD_NODE, GOOD_FIOSCOPE = "10.0.0.7:9100", "10.0.0.7:7963"
HOSTILE_HOSTS = [
    ("db-7\n", GOOD_NODE, GOOD_FIOSCOPE),  # a trailing newline made invalid file_sd YAML (issue 16)
    ("db-7\r", GOOD_NODE, GOOD_FIOSCOPE),
    ("db-7 ", GOOD_NODE, GOOD_FIOSCOPE),
    (" db-7", GOOD_NODE, GOOD_FIOSCOPE),
    ("db\t7", GOOD_NODE, GOOD_FIOSCOPE),
    ("db-7\x1b[31m", GOOD_NODE, GOOD_FIOSCOPE),
    ("local", GOOD_NODE, GOOD_FIOSCOPE),  # the stack's own host (stack.host of alerts/config.yaml)
    ("../x", GOOD_NODE, GOOD_FIOSCOPE),
    ("x" * 64, GOOD_NODE, GOOD_FIOSCOPE),
    ("", GOOD_NODE, GOOD_FIOSCOPE),
    ("db-7", GOOD_NODE + "\n", GOOD_FIOSCOPE),
    ("db-7", GOOD_NODE, GOOD_FIOSCOPE + "\n"),
    ("db-7", " " + GOOD_NODE, GOOD_FIOSCOPE),
    ("db-7", "10.0.0.7 :9100", GOOD_FIOSCOPE),
    ("db-7", "10.0.0.7:0", GOOD_FIOSCOPE),
    ("db-7", "10.0.0.7:65536", GOOD_FIOSCOPE),
    ("db-7", "10.0.0.7:09100x", GOOD_FIOSCOPE),
    ("db-7", "10.0.0.7", GOOD_FIOSCOPE),
    ("db-7", ":9100", GOOD_FIOSCOPE),
    ("db-7", "999.0.0.1:9100", GOOD_FIOSCOPE),
    ("db-7", "[zz::1]:9100", GOOD_FIOSCOPE),
    ("db-7", "::1:9100", GOOD_FIOSCOPE),
    ("db-7", "-db.example:9100", GOOD_FIOSCOPE),
    ("db-7", "db..example:9100", GOOD_FIOSCOPE),
    ("db-7", "db/7:9100", GOOD_FIOSCOPE),
    ("db-7", "http://db-7:9100", GOOD_FIOSCOPE),
]
GOOD_HOSTS = [("db-7", GOOD_NODE, GOOD_FIOSCOPE), ("db_8.rack-2", "[::1]:9100", "db-8.example.org:7963"),
              ("LOCAL2", "localhost:9100", "127.0.0.1:7963")]


# ---- result files with many jobs (issue 16: 5,000 jobs made every scrape 245 MiB) ----------------------------
def many_jobs(count: int, prefix: str, base: str = "fio-3.33/etcd.json+") -> bytes:
    """fio output whose first job (what the exporter reads of it) is repeated ``count`` times as ``<prefix>-<i>``."""
    doc = json.loads((FIO_OUTPUTS / base).read_text())
    entry = {k: v for k, v in doc["jobs"][0].items() if k in ("error", "job_runtime", "job options", "read", "write", "sync")}
    doc["jobs"] = [{**entry, "jobname": f"{prefix}-{i}"} for i in range(count)]
    return json.dumps(doc, separators=(",", ":")).encode()
