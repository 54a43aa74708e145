#!/usr/bin/env bash
# Installs what fioscope needs on a Debian 12 host (idempotent): fio, Prometheus (promtool),
# node_exporter, Alertmanager, sysstat (iostat), etcd, and the Python packages.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(fio prometheus prometheus-node-exporter prometheus-alertmanager sysstat etcd-server e2fsprogs util-linux python3-yaml chromium)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# the mixin with its generate extra (grafana-foundation-sdk for the dashboards), the exporter with its tests
python3 -m pip install -q --disable-pip-version-check -e "mixin[generate]" -e "exporter[test]"

# Kubernetes manifests (deploy/kubernetes), checked offline by tests/test_kubernetes.py:
# the Kubernetes JSON schemas (kubernetes-validate), the prometheus-operator CRDs (a Go module
# carries them: example/prometheus-operator-crd/) and kustomize, all into one cache directory.
K8S_CACHE="${FIOSCOPE_K8S_CACHE:-$HOME/.cache/fioscope/kubernetes}"
PROMETHEUS_OPERATOR_VERSION=v0.79.2
KUSTOMIZE_VERSION=v5.5.0
python3 -m pip install -q --disable-pip-version-check "kubernetes-validate==1.37.0" "jsonschema>=4"
if command -v go >/dev/null 2>&1; then
  crds="$K8S_CACHE/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION"
  if [ ! -s "$crds/monitoring.coreos.com_prometheusrules.yaml" ]; then
    dir=$(cd /tmp && go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" \
          | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
    mkdir -p "$crds" && cp "$dir"/example/prometheus-operator-crd/*.yaml "$crds/"
  fi
  if [ ! -x "$K8S_CACHE/bin/kustomize" ]; then
    (cd /tmp && GOBIN="$K8S_CACHE/bin" go install "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION")
  fi
else
  echo "setup.sh: no Go toolchain: the Kubernetes manifest tests will skip (CI fails them)" >&2
fi

# Grafana's dashboard linter (tests/test_dashboards.py, .ci/run): `go install` of this pseudo-version is refused
# (the proxy has no version list for it), so its module source is downloaded, copied somewhere writable and built.
DASHBOARD_LINTER_VERSION=v0.0.0-20241216132922-9479ff4bfa35
LINTER_BIN="${FIOSCOPE_LINTER_CACHE:-$HOME/.cache/fioscope/dashboard-linter-$DASHBOARD_LINTER_VERSION}/dashboard-linter"
if command -v go >/dev/null 2>&1; then
  if [ ! -x "$LINTER_BIN" ]; then
    src=$(cd /tmp && go mod download -json "github.com/grafana/dashboard-linter@$DASHBOARD_LINTER_VERSION" \
          | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
    build=$(mktemp -d)
    cp -r "$src/." "$build/" && chmod -R u+w "$build"
    mkdir -p "$(dirname "$LINTER_BIN")"
    (cd "$build" && go build -o "$LINTER_BIN" .)
    rm -rf "$build"
  fi
else
  echo "setup.sh: no Go toolchain: the dashboard linter test will skip (CI fails it)" >&2
fi

# Prometheus 3 (tests/test_rules.py runs the rule tests on it beside Debian's 2.42): promtool and prometheus of the
# Go module v0.316.0 (= Prometheus 3.x), built once into the cache; the tests find them at PROMETHEUS3_DIR.
PROMETHEUS3_VERSION=v0.316.0
PROMETHEUS3_DIR="${FIOSCOPE_PROMETHEUS3_CACHE:-$HOME/.cache/fioscope/prometheus-$PROMETHEUS3_VERSION}"
if command -v go >/dev/null 2>&1; then
  if [ ! -x "$PROMETHEUS3_DIR/promtool" ] || [ ! -x "$PROMETHEUS3_DIR/prometheus" ]; then
    (cd /tmp && GOBIN="$PROMETHEUS3_DIR" go install "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS3_VERSION" \
       "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS3_VERSION")
  fi
else
  echo "setup.sh: no Go toolchain: the Prometheus 3 rule tests will skip (CI fails them)" >&2
fi
