"""deploy/kubernetes: the kustomize base and overlays render, every object validates offline against
the real Kubernetes schemas and prometheus-operator CRDs, the PrometheusRule is alerts/*.rules.yaml
with kube-prometheus's selectors, the DaemonSet fits the image exporter/Dockerfile builds, and the
ConfigMap schedule is one the real config loader and job checks accept.

The schemas and kustomize come from scripts/setup.sh (a cache directory, FIOSCOPE_K8S_CACHE); in CI a
missing one fails the tests instead of skipping them.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from fioscope_mixin.kubernetes import kubernetes_settings
from fioscope_mixin.prometheus import RULE_FILES
from fioscope_mixin.rule import runbook_base
from fioscope_mixin.settings import load_settings
from fioscope_testkit.binaries import built, require, rule_tests_for
from fioscope_testkit.paths import REPO

DEPLOY = REPO / "deploy" / "kubernetes"
OVERLAYS = ("base", "overlays/control-plane", "overlays/all-nodes")
K8S_CACHE = Path(os.environ.get("FIOSCOPE_K8S_CACHE", Path.home() / ".cache" / "fioscope" / "kubernetes"))
SETUP = (REPO / "scripts" / "setup.sh").read_text()
PROMETHEUS_OPERATOR_VERSION = re.search(r"^PROMETHEUS_OPERATOR_VERSION=(\S+)", SETUP, re.MULTILINE).group(1)
KUBERNETES_VERSION = "1.32.0"  # the API the manifests target; kubernetes-validate carries its schemas
CRD_GROUP = "monitoring.coreos.com"
# job names of the stack -> as kube-prometheus (node-exporter) and kube-prometheus-stack (kube-etcd) scrape them
KUBE_JOBS = {"node": "node-exporter", "etcd": "kube-etcd"}
# kustomize and the CRDs: make test builds them behind the tests (scripts/setup.sh --tests)
pytestmark = pytest.mark.needs_tool("kustomize")
KUSTOMIZE = K8S_CACHE / "bin" / "kustomize"


def _needed(present: bool, what: str) -> None:
    """Like fioscope_testkit.binaries.require() for things setup.sh puts in the cache: skip locally, fail in CI."""
    if not present:
        message = f"{what} missing: run scripts/setup.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def kustomize() -> str:
    if built(KUSTOMIZE, "kustomize"):
        return str(KUSTOMIZE)
    if shutil.which("kustomize"):
        return require("kustomize")
    _needed(False, f"kustomize ({KUSTOMIZE})")


@pytest.fixture(scope="module")
def rendered(kustomize) -> dict[str, list[dict]]:
    out = {}
    for name in OVERLAYS:
        proc = subprocess.run([kustomize, "build", str(DEPLOY / name)], capture_output=True, text=True, check=False, timeout=60)
        assert proc.returncode == 0, f"kustomize build {name}: {proc.stderr}"
        out[name] = [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
    return out


def find(docs: list[dict], kind: str, name: str | None = None) -> dict:
    matches = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(matches) == 1, f"{kind} {name or ''}: {len(matches)} objects"
    return matches[0]


def pod_spec(docs: list[dict]) -> dict:
    return find(docs, "DaemonSet", "fioscope")["spec"]["template"]["spec"]


def container(spec: dict, name: str, init: bool = False) -> dict:
    return next(c for c in spec["initContainers" if init else "containers"] if c["name"] == name)


def schedule_config(docs: list[dict]) -> str:
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("fioscope-config"))
    return cm["data"]["fioscope.yaml"]


# ---------------------------------------------------------------------------- schemas
def test_generated_files_are_committed():
    proc = subprocess.run([sys.executable, "-m", "fioscope_mixin", "check", "--only", "kubernetes"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def kubernetes_validate():
    try:
        import kubernetes_validate
    except ImportError:
        _needed(False, "kubernetes-validate (pip)")
    return kubernetes_validate


@pytest.mark.slow
def test_builtin_objects_validate_against_kubernetes_schemas(rendered, kubernetes_validate):
    checked = set()
    for name, docs in rendered.items():
        for doc in docs:
            if doc["apiVersion"].startswith(CRD_GROUP):
                continue
            try:
                kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{name}: {doc['kind']} {doc['metadata']['name']}: {exc.message} at {list(exc.path)}")
            checked.add(doc["kind"])
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
            "DaemonSet", "Service", "ConfigMap"} <= checked


def test_kubernetes_schema_check_can_fail(kubernetes_validate):
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"clusterIp": "None"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


class _CrdLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """PyYAML reads a bare ``=`` (an enum value in the CRDs) as YAML 1.1's obsolete value tag."""


_CrdLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@pytest.fixture(scope="module")
def crd_schemas() -> dict[str, dict]:
    """{group/version/Kind: openAPIV3Schema} of the kinds deploy/kubernetes uses (the big CRDs are slow to read)."""
    directory = K8S_CACHE / f"prometheus-operator-{PROMETHEUS_OPERATOR_VERSION}"
    built(KUSTOMIZE, "kustomize")  # the CRDs come in kustomize's build: waited for with it
    _needed(any(directory.glob("*.yaml")), f"prometheus-operator {PROMETHEUS_OPERATOR_VERSION} CRDs ({directory})")
    schemas = {}
    for plural in ("servicemonitors", "podmonitors", "prometheusrules"):
        crd = yaml.load((directory / f"{CRD_GROUP}_{plural}.yaml").read_text(), Loader=_CrdLoader)  # a SafeLoader
        for version in crd["spec"]["versions"]:
            schemas[f"{crd['spec']['group']}/{version['name']}/{crd['spec']['names']['kind']}"] = version["schema"]["openAPIV3Schema"]
    return schemas


def unknown_fields(value, schema: dict, path: str = "") -> list[str]:
    """Fields the schema does not know (the API server prunes them silently; a typo would vanish)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict) and "properties" in schema:
        found = []
        for key, item in value.items():
            if key in schema["properties"]:
                found += unknown_fields(item, schema["properties"][key], f"{path}.{key}")
            elif not schema.get("additionalProperties"):
                found.append(f"{path}.{key}")
        return found
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        return [f for key, item in value.items() for f in unknown_fields(item, schema["additionalProperties"], f"{path}.{key}")]
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [f for i, item in enumerate(value) for f in unknown_fields(item, schema["items"], f"{path}[{i}]")]
    return []


def crd_problems(doc: dict, schemas: dict) -> list[str]:
    import jsonschema

    schema = schemas.get(f"{doc['apiVersion']}/{doc['kind']}")
    if schema is None:
        return [f"no CRD for {doc['apiVersion']} {doc['kind']}"]
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in jsonschema.Draft4Validator(schema).iter_errors(doc)]
    return errors + [f"{field}: unknown field" for field in unknown_fields(doc, schema)]


def test_custom_resources_validate_against_prometheus_operator_crds(rendered, crd_schemas):
    kinds = set()
    for name, docs in rendered.items():
        for doc in docs:
            if doc["apiVersion"].startswith(CRD_GROUP):
                assert crd_problems(doc, crd_schemas) == [], f"{name}: {doc['kind']} {doc['metadata']['name']}"
                kinds.add(doc["kind"])
    assert kinds == {"ServiceMonitor", "PrometheusRule"}


def test_crd_check_can_fail(rendered, crd_schemas):
    monitor = copy.deepcopy(find(rendered["base"], "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["bearerTokenFiel"] = monitor["spec"]["endpoints"][0].pop("bearerTokenFile")
    assert crd_problems(monitor, crd_schemas) == [".spec.endpoints[0].bearerTokenFiel: unknown field"]
    rule = copy.deepcopy(find(rendered["base"], "PrometheusRule"))
    rule["spec"]["groups"][0]["rules"][0]["for"] = "five minutes"
    assert any("does not match" in p for p in crd_problems(rule, crd_schemas))


def test_node_exporter_host_patch_applies_to_kube_prometheus_servicemonitor(tmp_path, kustomize, crd_schemas):
    # kube-prometheus's node-exporter ServiceMonitor (manifests/nodeExporter-serviceMonitor.yaml), as it ships
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "node-exporter", "namespace": "monitoring"},
        "spec": {"jobLabel": "app.kubernetes.io/name",
                 "selector": {"matchLabels": {"app.kubernetes.io/name": "node-exporter"}},
                 "endpoints": [{"port": "https", "scheme": "https", "interval": "15s",
                                "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
                                "tlsConfig": {"insecureSkipVerify": True},
                                "relabelings": [{"action": "replace", "regex": "(.*)", "replacement": "$1",
                                                 "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance"}]}]},
    }
    (tmp_path / "servicemonitor.yaml").write_text(yaml.safe_dump(monitor))
    shutil.copy(DEPLOY / "kube-prometheus" / "node-exporter-host-label.yaml", tmp_path / "patch.yaml")
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": ["servicemonitor.yaml"],
        "patches": [{"path": "patch.yaml", "target": {"kind": "ServiceMonitor", "name": "node-exporter"}}]}))
    proc = subprocess.run([kustomize, "build", str(tmp_path)], capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    patched = yaml.safe_load(proc.stdout)
    assert crd_problems(patched, crd_schemas) == []
    relabelings = patched["spec"]["endpoints"][0]["relabelings"]
    assert relabelings[0]["targetLabel"] == "instance"  # kube-prometheus's own label stays
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "host", "action": "replace"} in relabelings


def test_objects_fit_kubectl_apply(rendered):
    # `kubectl apply -k` keeps each object in its last-applied-configuration annotation: at most 256 KiB
    for name, docs in rendered.items():
        namespaced = [d for d in docs if d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding")]
        assert {d["metadata"].get("namespace") for d in namespaced} == {"fioscope"}, name
        for doc in docs:
            assert len(json.dumps(doc, separators=(",", ":"))) < 256 * 1024 - 1024, f"{name}: {doc['kind']} {doc['metadata']['name']}"


# ---------------------------------------------------------------------------- rules
def _rule_strings(node, swap):
    """Every string in a rule structure with ``swap`` applied (selectors back to the stack's)."""
    if isinstance(node, dict):
        return {k: _rule_strings(v, swap) for k, v in node.items()}
    if isinstance(node, list):
        return [_rule_strings(v, swap) for v in node]
    if isinstance(node, str):
        for old, new in swap.items():
            node = node.replace(old, new)
    return node


def selector_swaps() -> dict[str, str]:
    """kube-prometheus selector -> the compose/native stack's, for every selector that differs; and the PrometheusRule's
    runbook (links.kubernetes_runbook) -> the stack's."""
    kube, stack = kubernetes_settings(load_settings())["selectors"], load_settings()["selectors"]
    return {**{kube[key]: stack[key] for key in stack if kube[key] != stack[key]}, **runbook_swap()}


def runbook_swap() -> dict[str, str]:
    """The PrometheusRule's runbook base -> the stack's (both followed by #<alert>)."""
    return {runbook_base(kubernetes_settings(load_settings())) + "#": runbook_base(load_settings()) + "#"}


def test_prometheus_rule_is_the_rule_files_with_kube_prometheus_selectors(rendered):
    swaps = selector_swaps()
    assert 'job="node-exporter"' in swaps
    groups = find(rendered["base"], "PrometheusRule")["spec"]["groups"]
    exprs = json.dumps(groups)
    assert 'job=\\"node-exporter\\"' in exprs and 'job=\\"node\\"' not in exprs
    committed = [g for rel in RULE_FILES for g in yaml.safe_load((REPO / rel).read_text())["groups"]]
    assert _rule_strings(groups, swaps) == committed


@pytest.mark.slow  # the project's rule tests once more, ~30 s: the default run has them as the stack runs them
def test_prometheus_rule_passes_promtool_check_and_the_project_rule_tests(rendered, tmp_path):
    promtool = require("promtool")
    groups = find(rendered["base"], "PrometheusRule")["spec"]["groups"]
    rules = tmp_path / "alerts"
    (rules / "tests").mkdir(parents=True)
    (rules / "recording.rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    (rules / "alerts.rules.yaml").write_text("groups: []\n")  # the PrometheusRule holds both
    proc = subprocess.run([promtool, "check", "rules", str(rules / "recording.rules.yaml")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the project's unit tests, their series labelled as kube-prometheus (and kube-prometheus-stack, for
    # etcd) label them. Files no relabelling touches (fio.test.yaml: job="fioscope" only) meet rules
    # identical to the stack's and run in test_rules.py already.
    kube = kubernetes_settings(load_settings())["selectors"]
    for selector, job in KUBE_JOBS.items():  # the selectors of alerts/config.yaml are named after the jobs
        matcher = re.fullmatch(r'job(=~?)"([^"]+)"', kube[selector])
        assert matcher and (re.fullmatch(matcher.group(2), job) if matcher.group(1) == "=~" else matcher.group(2) == job), kube[selector]
    for test in rule_tests_for("2", sorted((REPO / "alerts" / "tests").glob("*.yaml"))):
        text = original = test.read_text()
        for stack_job, kube_job in KUBE_JOBS.items():
            text = text.replace(f'job="{stack_job}"', f'job="{kube_job}"')
            text = re.sub(rf"\bjob: {re.escape(stack_job)}$", f"job: {kube_job}", text, flags=re.MULTILINE)
        if text != original:
            for kube_runbook, stack_runbook in runbook_swap().items():  # the alerts' expected links
                text = text.replace(stack_runbook, kube_runbook)
            (rules / "tests" / test.name).write_text(text)
    tests = sorted(map(str, (rules / "tests").glob("*.yaml")))
    assert {Path(t).name for t in tests} >= {"disk.test.yaml", "recording.test.yaml", "detection.test.yaml", "fsync.test.yaml"}
    proc = subprocess.run([promtool, "test", "rules", *tests], capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr


def test_service_monitor_labels_series_as_the_rules_expect(rendered):
    monitor = find(rendered["base"], "ServiceMonitor")
    service = find(rendered["base"], "Service", "fioscope")
    # job="fioscope": the value of the Service label jobLabel names, what selectors.fioscope matches
    job = service["metadata"]["labels"][monitor["spec"]["jobLabel"]]
    assert f'job="{job}"' == kubernetes_settings(load_settings())["selectors"]["fioscope"]
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in monitor["spec"]["endpoints"][0]["relabelings"]}
    assert relabel["host"] == relabel["instance"] == ["__meta_kubernetes_pod_node_name"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]


def test_dashboards_are_configmaps_for_the_grafana_sidecar(rendered):
    maps = [d for d in rendered["base"] if d["kind"] == "ConfigMap" and d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    files = {name: json.loads(text) for m in maps for name, text in m["data"].items()}
    assert set(files) == {p.name for p in (REPO / "dashboards").glob("*.json")}
    for name, dashboard in files.items():
        committed = json.loads((REPO / "dashboards" / name).read_text())
        for variable in committed["templating"]["list"]:
            if variable["type"] == "datasource":
                variable["current"] = {"selected": True, "text": "prometheus", "value": "prometheus"}
        assert dashboard == committed, name


# ---------------------------------------------------------------------------- the DaemonSet and the image
def dockerfile() -> dict:
    text = (REPO / "exporter" / "Dockerfile").read_text()
    final = text.split("\nFROM ")[-1]  # the runtime stage
    return {
        "entrypoint": json.loads(re.search(r"^ENTRYPOINT (.+)$", final, re.MULTILINE).group(1)),
        "user": int(re.search(r"^USER (\d+)$", final, re.MULTILINE).group(1)),
        "port": int(re.search(r"^EXPOSE (\d+)$", final, re.MULTILINE).group(1)),
        "directories": set(re.findall(r"(/var/lib/fioscope/\w+)", final)),
    }


def test_daemonset_runs_the_image_exporter_dockerfile_builds(rendered):
    image = dockerfile()
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]["fioscope"]
    assert compose["build"]["dockerfile"] == "exporter/Dockerfile"
    version = re.search(r'^version = "([^"]+)"', (REPO / "exporter" / "pyproject.toml").read_text(), re.MULTILINE).group(1)
    assert compose["image"] == f"fioscope:{version}"
    for name, docs in rendered.items():
        spec = pod_spec(docs)
        main = container(spec, "fioscope")
        assert main["image"] == compose["image"], name
        assert "command" not in main  # the image's ENTRYPOINT runs ...
        from fioscope.cli import build_parser

        args = build_parser().parse_args(main["args"])  # ... with arguments fioscope accepts
        assert image["entrypoint"] == ["fioscope"] and args.command == "serve"
        assert args.listen_address == f"127.0.0.1:{image['port']}"
        assert spec["securityContext"]["runAsUser"] == image["user"] == 10001
        mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
        # the directories the image makes for uid 10001 are the ones the node's hostPaths cover
        assert image["directories"] == {"/var/lib/fioscope/target", "/var/lib/fioscope/results"}
        volumes = {v["name"]: v for v in spec["volumes"]}
        for directory in image["directories"]:
            assert volumes[mounts[directory]]["hostPath"]["type"] == "DirectoryOrCreate", directory
        # the config file the args name is in the mounted ConfigMap, and its paths are those mounts
        config_dir, config_file = os.path.split(args.config_file)
        assert "configMap" in volumes[mounts[config_dir]]
        schedule = yaml.safe_load(schedule_config(docs))
        assert schedule["results_dir"] == "/var/lib/fioscope/results"
        assert [t["directory"] for t in schedule["targets"]] == ["/var/lib/fioscope/target"]
        assert config_file == "fioscope.yaml"
        # kube-rbac-proxy forwards to the exporter's loopback port; only the probe's path skips authorization
        # (kube-rbac-proxy refuses to start with both --allow-paths and --ignore-paths)
        proxy = container(spec, "kube-rbac-proxy")
        assert f"--upstream=http://{args.listen_address}/" in proxy["args"]
        flags = dict(arg.split("=", 1) for arg in proxy["args"])
        assert flags["--ignore-paths"] == proxy["readinessProbe"]["httpGet"]["path"] == "/-/healthy"
        assert "--allow-paths" not in flags
        # the init container hands the same directories to the image's user, nothing else
        init = container(spec, "own-directories", init=True)
        assert init["image"] == compose["image"]
        assert init["command"][:2] == ["chown", f"{image['user']}:{image['user']}"]
        assert set(init["command"][2:]) == image["directories"]
        assert {m["mountPath"] for m in init["volumeMounts"]} == image["directories"]


def test_pod_runs_without_privileges(rendered):
    for docs in rendered.values():
        spec = pod_spec(docs)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not spec.get("hostNetwork") and not spec.get("hostPID")
        for c in spec["containers"] + spec["initContainers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, c["name"]
            assert sc["capabilities"]["drop"] == ["ALL"], c["name"]
            assert not sc.get("privileged"), c["name"]
            assert c["resources"]["requests"] and c["resources"]["limits"], c["name"]
            if c["name"] == "own-directories":  # the only root process: one chown, CAP_CHOWN only
                assert sc["capabilities"]["add"] == ["CHOWN"] and sc["runAsUser"] == 0
            else:
                assert "add" not in sc["capabilities"] and sc.get("runAsUser", spec["securityContext"]["runAsUser"]) != 0
        assert all(v["hostPath"]["path"] not in ("/", "/var/lib/etcd") for v in spec["volumes"] if "hostPath" in v)


def _setpriv(security: dict, uid: int, gid: int) -> list[str]:
    """The container's user, capabilities and no_new_privs as setpriv(1) applies them to one process."""
    caps = ",".join(["-all"] + [f"+{c.lower()}" for c in security["capabilities"].get("add", [])])
    argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", f"--inh-caps={caps}", f"--bounding-set={caps}"]
    return argv + (["--no-new-privs"] if security["allowPrivilegeEscalation"] is False else [])


@pytest.fixture
def node_dir():
    """A directory the pod's user can reach, as a hostPath's parents are (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="fioscope-k8s-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_the_pod_s_privileges_are_enough_for_the_chown_and_for_fio(rendered, node_dir):
    """The init container's chown and fio's etcd-wal run with exactly the user, capabilities and
    writable paths the manifest grants (setpriv, and a mount namespace with / read-only), on a
    directory as a hostPath DirectoryOrCreate leaves it: root-owned, 0755."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to the pod's users and make / read-only in a mount namespace")
    for tool in ("setpriv", "unshare", "fio"):
        require(tool)
    spec = pod_spec(rendered["overlays/control-plane"])
    init, main = container(spec, "own-directories", init=True), container(spec, "fioscope")
    host = {m["mountPath"]: node_dir / m["name"] for m in main["volumeMounts"] if m["name"] in ("target", "results")}
    for directory in host.values():
        directory.mkdir(mode=0o755)
    (host["/var/lib/fioscope/target"] / "left-alone").write_text("root's")
    pod_user = (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"])
    job = resolve_profile("etcd-wal")

    def fio() -> subprocess.CompletedProcess:
        target = host["/var/lib/fioscope/target"]
        script = (f"mount --make-rprivate / && mount --bind {target} {target} && mount -o remount,bind,ro / && "
                  f"exec {shlex.join(_setpriv(main['securityContext'], *pod_user))} fio --output-format=json {job}")
        assert main["securityContext"]["readOnlyRootFilesystem"] is True
        return subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, check=False, timeout=120,
                              env={**os.environ, "TARGET_DIR": str(target), "SIZE": "1m", "MAX_RUNTIME": "60"})

    denied = fio()  # without the init container, uid 10001 cannot write the directory
    assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied.stderr
    chown = [arg if arg not in host else str(host[arg]) for arg in init["command"]]
    without_cap = _setpriv({**init["securityContext"], "capabilities": {"drop": ["ALL"]}}, 0, 0)
    assert subprocess.run(without_cap + chown, capture_output=True, check=False).returncode != 0  # CAP_CHOWN is needed ...
    proc = subprocess.run(_setpriv(init["securityContext"], 0, 0) + chown, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr  # ... and enough
    assert {(d.stat().st_uid, d.stat().st_gid) for d in host.values()} == {pod_user}
    assert (host["/var/lib/fioscope/target"] / "left-alone").stat().st_uid == 0  # not recursive
    proc = fio()
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)["jobs"][0]
    assert report["error"] == 0 and report["sync"]["lat_ns"]["percentile"]["99.000000"] > 0
    assert all(p.stat().st_uid == pod_user[0] for p in host["/var/lib/fioscope/target"].glob("etcd-wal.*"))


def resolve_profile(name: str) -> Path:
    from fioscope.jobs import resolve_job
    from fioscope.resources import profiles_dir

    return resolve_job(name, profiles_dir())


def test_overlays_select_nodes_and_target_directories(rendered):
    base, control, every = (pod_spec(rendered[n]) for n in OVERLAYS)
    target = {n: next(v["hostPath"]["path"] for v in pod_spec(rendered[n])["volumes"] if v["name"] == "target") for n in OVERLAYS}
    # control plane: only there, past its taints, in a directory beside etcd's data dir
    assert control["nodeSelector"]["node-role.kubernetes.io/control-plane"] == ""
    assert {t["key"] for t in control["tolerations"]} == {"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"}
    assert Path(target["overlays/control-plane"]).parent == Path("/var/lib/etcd").parent
    assert target["overlays/control-plane"] != "/var/lib/etcd"
    # all nodes: every taint tolerated, no role selected
    assert every["tolerations"] == [{"operator": "Exists"}]
    assert "node-role.kubernetes.io/control-plane" not in every["nodeSelector"]
    assert "tolerations" not in base
    assert target["base"] == target["overlays/all-nodes"] == "/var/lib/fioscope/target"


# ---------------------------------------------------------------------------- the schedule
@pytest.mark.parametrize("name", OVERLAYS)
def test_configmap_schedule_is_accepted_by_the_config_loader(rendered, tmp_path, name):
    from fioscope.config import load_config
    from fioscope.jobs import check_safe, load_job, resolve_job
    from fioscope.resources import profiles_dir

    path = tmp_path / "fioscope.yaml"
    path.write_text(schedule_config(rendered[name]))
    config = load_config(path)
    assert config.results_dir == Path("/var/lib/fioscope/results")
    # the etcd check on a schedule by default; heavier profiles only where a user adds them
    assert [(e.job, e.every_seconds) for e in config.schedule] == [("etcd-wal", 6 * 3600)]
    for entry in config.schedule:
        target = config.target(entry.target)
        # the profile the image ships, with the job's variables, stays inside the target directory
        job = load_job(resolve_job(entry.job, profiles_dir()), {**entry.env, "TARGET_DIR": str(target.directory)})
        check_safe(job, target)
    if name == "overlays/control-plane":
        assert [t.name for t in config.targets] == ["etcd"]


def test_documented_install_commands_use_the_overlays():
    section = (REPO / "docs" / "kubernetes.md").read_text()
    applied = {shlex.split(line.strip())[-1] for line in section.splitlines() if line.strip().startswith("kubectl apply -k")}
    assert applied and all((REPO / path).is_dir() for path in applied), applied
