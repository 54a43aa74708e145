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
python3 -m pip install -q --disable-pip-version-check -e "exporter[test]" -r dashboards/requirements.txt
