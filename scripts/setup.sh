#!/usr/bin/env bash
# Installs what fioscope needs on a Debian 12 host (idempotent): fio, Prometheus (promtool), node_exporter,
# Alertmanager, sysstat (iostat), etcd, Chromium and the Python packages ("base"), and the tools built from Go source
# into ~/.cache/fioscope (each built once, then reused):
#   promtool3 prometheus3   Prometheus 3's promtool and server (the rule tests run on 2.42 and 3.x)
#   kustomize               kustomize and the prometheus-operator CRDs (tests/test_kubernetes.py)
#   dashboard-linter        Grafana's dashboard linter (tests/test_dashboards.py, make lint-dashboards)
#   thanos                  Thanos (the sharded fleet: make up-fleet, tests/test_e2e_shards.py)
# Usage: scripts/setup.sh                      base and every tool, now (CI, make e2e)
#        scripts/setup.sh base                 base only (make up: the stack runs nothing built here)
#        scripts/setup.sh TOOL...              base and these tools, now
#        scripts/setup.sh tests                base and the test suites' tools (TEST_TOOLS and prometheus3), now
#                                              (make test-slow)
#        scripts/setup.sh --background TOOL... base now; the tools built one after another behind this script's exit
#                                              (make test: --background default-suite = TEST_TOOLS; the tests start at
#                                              once, and a test marked needs_tool(TOOL) runs after the others and
#                                              waits for its build, testkit/fioscope_testkit/binaries.py)
# While a tool is built its binary's <binary>.lock is held (flock) and its output goes to <binary>.log.
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_TOOLS=(promtool3 prometheus3 kustomize dashboard-linter thanos)
# the tools without DWARF debug information: a tenth less compiling (promtool 3 cold: 164 s of CPU instead of 182), and
# nothing here runs a debugger on them (a panic's trace needs none)
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-ldflags=-w -gcflags=all=-dwarf=false"
# the default suite's, in the order they are built and their tests run: promtool first (the rule tests on 3.x, the
# longest of these tests), kustomize (14 s) before the linter (2 minutes beside the rule tests), so that its tests run
# while the linter builds. Not the Prometheus 3 server: only two slow tests start one (make test-slow builds it).
TEST_TOOLS=(promtool3 kustomize dashboard-linter)
background=0
if [ "${1:-}" = --background ]; then background=1; shift; fi
case "$*" in
  "") tools=("${ALL_TOOLS[@]}") ;;
  base) tools=() ;;
  default-suite) tools=("${TEST_TOOLS[@]}") ;;
  tests) tools=("${TEST_TOOLS[@]}" prometheus3) ;;
  *) tools=("$@") ;;
esac

packages=(fio prometheus prometheus-node-exporter prometheus-alertmanager sysstat etcd-server e2fsprogs util-linux python3-yaml chromium)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# the mixin with its generate extra (grafana-foundation-sdk for the dashboards), the exporter with its tests, what the
# tests share with bench/ (testkit), and the Kubernetes JSON schemas (kubernetes-validate) tests/test_kubernetes.py
# checks the manifests against offline
python3 -m pip install -q --disable-pip-version-check -e "mixin[generate]" -e "exporter[test]" -e testkit \
  "kubernetes-validate==1.37.0" "jsonschema>=4"
[ ${#tools[@]} -gt 0 ] || exit 0

CACHE="$HOME/.cache/fioscope"
PROMETHEUS3_VERSION=v0.316.0
PROMETHEUS3_DIR="${FIOSCOPE_PROMETHEUS3_CACHE:-$CACHE/prometheus-$PROMETHEUS3_VERSION}"
K8S_CACHE="${FIOSCOPE_K8S_CACHE:-$CACHE/kubernetes}"
PROMETHEUS_OPERATOR_VERSION=v0.79.2
KUSTOMIZE_VERSION=v5.5.0
DASHBOARD_LINTER_VERSION=v0.0.0-20241216132922-9479ff4bfa35
LINTER_BIN="${FIOSCOPE_LINTER_CACHE:-$CACHE/dashboard-linter-$DASHBOARD_LINTER_VERSION}/dashboard-linter"
THANOS_VERSION=v0.42.5
THANOS_BIN="${FIOSCOPE_THANOS_CACHE:-$CACHE/thanos-$THANOS_VERSION}/thanos"

binary_of() {
  case $1 in
    promtool3) echo "$PROMETHEUS3_DIR/promtool" ;;
    prometheus3) echo "$PROMETHEUS3_DIR/prometheus" ;;
    kustomize) echo "$K8S_CACHE/bin/kustomize" ;;
    dashboard-linter) echo "$LINTER_BIN" ;;
    thanos) echo "$THANOS_BIN" ;;
    *) echo "setup.sh: $1: unknown tool (one of: base ${ALL_TOOLS[*]})" >&2; return 2 ;;
  esac
}
for t in "${tools[@]}"; do binary_of "$t" >/dev/null; done
if ! command -v go >/dev/null 2>&1; then
  echo "setup.sh: no Go toolchain: ${tools[*]} not built, their tests will skip (CI fails them)" >&2
  exit 0
fi

# a Go module's directory in the module cache (downloaded); prints it
module_dir() {  # MODULE@VERSION [GOTOOLCHAIN]
  local dir
  dir=$(cd /tmp && GOTOOLCHAIN=${2:-local} go mod download -json "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])') \
    && [ -d "$dir" ] && echo "$dir"
}
# a Go module's source, copied somewhere writable (for the modules `go install` refuses); prints the directory
module_source() {  # MODULE@VERSION [GOTOOLCHAIN]
  local src build
  src=$(module_dir "$@") || return 1
  build=$(mktemp -d)
  cp -r "$src/." "$build/" && chmod -R u+w "$build"
  echo "$build"
}

# The builds: each writes its binary ($1) whole or not at all (a test that finds the binary can run it), and
# fails where any step does (they run where `set -e` does not apply).
# Prometheus 3's promtool and server, built as its release build is (promu: the version in the binary) from one copy of
# its source, kept beside them (both builds share its compiled packages). Prometheus's own remove_all_sd tag leaves
# out the cloud providers' service discovery (plugins/): the stack and the tests use file_sd alone. promtool still
# imports the Kubernetes discovery for one type switch, and with it client-go: half of promtool's cold build (92 s of
# CPU instead of 163), so that package is replaced by the type alone (scripts/prometheus3/kubernetes.go).
PROMETHEUS3_TAGS=remove_all_sd
PROMETHEUS3_SRC="$PROMETHEUS3_DIR/src"
p3=${PROMETHEUS3_VERSION#v0.}  # the Go module's v0.316.0 is Prometheus 3.16.0
PROMETHEUS3_RELEASE="${p3:0:1}.$((10#${p3:1:2})).${p3#*.}"
prometheus3_source() {
  [ -f "$PROMETHEUS3_SRC/go.mod" ] && return 0
  local copy; copy=$(module_source "github.com/prometheus/prometheus@$PROMETHEUS3_VERSION") || return 1
  rm -f "$copy"/discovery/kubernetes/*.go && cp scripts/prometheus3/kubernetes.go "$copy/discovery/kubernetes/" \
    && mv -T "$copy" "$PROMETHEUS3_SRC" || { rm -rf "$copy"; [ -f "$PROMETHEUS3_SRC/go.mod" ]; }
}
build_prometheus3_cmd() {  # CMD BINARY
  local version=github.com/prometheus/common/version
  prometheus3_source && (cd "$PROMETHEUS3_SRC" && GOWORK=off go build -tags "$PROMETHEUS3_TAGS" -o "$2.new" \
    -ldflags "-w -X $version.Version=$PROMETHEUS3_RELEASE -X $version.Revision=$PROMETHEUS3_VERSION -X $version.Branch=fioscope" \
    "./cmd/$1") && mv "$2.new" "$2"
}
build_promtool3() { build_prometheus3_cmd promtool "$1"; }  # alone: the rule tests need no server
build_prometheus3() { build_prometheus3_cmd prometheus "$1"; }  # after promtool: most of its packages are built
build_kustomize() {  # and the prometheus-operator CRDs (a Go module carries them: example/prometheus-operator-crd/)
  local crds="$K8S_CACHE/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION" dir gobin
  if [ ! -s "$crds/monitoring.coreos.com_prometheusrules.yaml" ]; then
    dir=$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION") || return 1
    mkdir -p "$crds" && cp "$dir"/example/prometheus-operator-crd/*.yaml "$crds/" || return 1
  fi
  gobin=$(mktemp -d)
  (cd /tmp && GOBIN="$gobin" go install "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION") \
    && mv "$gobin/kustomize" "$1" && rmdir "$gobin"
}
build_dashboard-linter() {  # `go install` of this pseudo-version is refused (the proxy has no version list for it)
  local build status=0; build=$(module_source "github.com/grafana/dashboard-linter@$DASHBOARD_LINTER_VERSION") || return 1
  (cd "$build" && go build -o "$1.new" . && mv "$1.new" "$1") || status=$?
  rm -rf "$build"
  return $status
}
build_thanos() {
  # `go install` refuses Thanos's module (replace directives in its go.mod); the tags are its release build's
  # (.promu.yml: slicelabels; without it the sidecar panics decoding labels). It needs Go >= 1.26.10: the Go
  # toolchain module of that version where the local one is older.
  local toolchain build status=0
  toolchain=$(printf '%s\n' "$(go env GOVERSION | sed 's/^go//')" 1.26.10 | sort -V | head -1 | grep -qx 1.26.10 && echo local || echo go1.26.10)
  build=$(module_source "github.com/thanos-io/thanos@$THANOS_VERSION" "$toolchain") || return 1
  (cd "$build" && GOTOOLCHAIN=$toolchain go build -tags netgo,slicelabels -o "$1.new" ./cmd/thanos && mv "$1.new" "$1") || status=$?
  rm -rf "$build"
  return $status
}

# whether TOOL's binary BIN is there as these builds make it: Prometheus 3's says its release (one built before the
# builds stamped it, with the Kubernetes client, is built again)
built_now() {  # TOOL BIN
  [ -x "$2" ] || return 1
  case $1 in
    promtool3|prometheus3) "$2" --version 2>&1 | grep -q "version $PROMETHEUS3_RELEASE " ;;
  esac
}

# build TOOL [FD]: TOOL's binary unless it is there, holding <binary>.lock (FD: already held), output to <binary>.log
build() {
  local tool=$1 fd=${2:-} bin; bin=$(binary_of "$1")
  mkdir -p "$(dirname "$bin")"
  if [ -z "$fd" ]; then exec {fd}>"$bin.lock"; flock "$fd"; fi
  local status=0
  if ! built_now "$tool" "$bin"; then
    echo "setup.sh: building $tool into $bin (log: $bin.log)" >&2
    local t0=$SECONDS
    "build_$tool" "$bin" >"$bin.log" 2>&1 || status=$?
    if [ $status -eq 0 ]; then
      echo "setup.sh: built $tool in $(( SECONDS - t0 )) s" >&2
    else
      tail -n 20 "$bin.log" >&2
      echo "setup.sh: building $tool failed (exit $status): $bin.log" >&2
    fi
  fi
  exec {fd}>&-
  return $status
}

if [ $background -eq 0 ]; then
  for t in "${tools[@]}"; do build "$t"; done
  exit 0
fi
# the locks taken before this script returns, so that a test started right after waits for the build rather than
# skip it (a lock another build holds is waited for by the background builder instead)
held=() pending=()
for t in "${tools[@]}"; do
  bin=$(binary_of "$t")
  if built_now "$t" "$bin"; then held+=(built); continue; fi
  pending+=("$t")
  mkdir -p "$(dirname "$bin")"
  exec {fd}>"$bin.lock"
  if flock -n "$fd"; then held+=("$fd"); else exec {fd}>&-; held+=(""); fi
done
[ ${#pending[@]} -gt 0 ] || exit 0
mkdir -p "$CACHE"
(
  trap '' INT HUP  # a Ctrl-C of the tests leaves the builds to finish for the next run
  renice -n 10 -p $BASHPID >/dev/null  # the tests first: the builds take the CPU they leave
  for i in "${!tools[@]}"; do
    [ "${held[$i]}" = built ] || build "${tools[$i]}" "${held[$i]}" || true
  done
) </dev/null >>"$CACHE/background-builds.log" 2>&1 &
for fd in "${held[@]}"; do [ -z "$fd" ] || [ "$fd" = built ] || exec {fd}>&-; done
echo "setup.sh: building ${pending[*]} in the background (log: $CACHE/background-builds.log); the tests that need one wait for it" >&2
