#!/usr/bin/env bash
# A fresh host's first `make test`, as near as one machine allows, timed: a fresh clone of this checkout, an empty HOME
# (no Go module or build cache, no ~/.cache/fioscope builds, no pip cache) and a fresh Python environment first on
# PATH (setup.sh downloads and installs every pip package). Prints the wall time and each background build's.
# With --apt (root, debootstrap): the Debian packages setup.sh installs, timed apart in a fresh Debian 12 root
# (apt-get update and install, as setup.sh runs them), the part a host that already has them does not pay.
#
#   bench/first_make_test.sh [--apt] [WORK_DIR]     (WORK_DIR default /tmp/first-make-test; emptied first)
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
apt=0
if [ "${1:-}" = --apt ]; then apt=1; shift; fi
work=${1:-/tmp/first-make-test}

if [ $apt -eq 1 ]; then
  root="$work/debian-root"
  packages=$(sed -n 's/^packages=(\(.*\))$/\1/p' "$repo/scripts/setup.sh")
  rm -rf "$root" && mkdir -p "$root"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$work.debootstrap.log" 2>&1 \
    || { echo "first_make_test.sh: debootstrap failed ($work.debootstrap.log)" >&2; exit 1; }
  cp /etc/resolv.conf "$root/etc/"
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod +x "$root/usr/sbin/policy-rc.d"  # no services
  mount -t proc proc "$root/proc"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086  # the package list, word by word
  chroot "$root" sh -c "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $packages" \
    >"$work.apt.log" 2>&1
  rc=$?
  took=$(echo "$(date +%s.%N) - $t0" | bc)
  umount "$root/proc"
  echo "Debian packages in a fresh root: exit $rc, $(printf '%.0f' "$took") s ($(grep -E '^Need to get' "$work.apt.log"); log $work.apt.log)"
  rm -rf "$root"
fi

rm -rf "$work" && mkdir -p "$work/home"
git clone -q "$repo" "$work/clone" && python3 -m venv "$work/venv" || exit 1
cd "$work/clone" || exit 1
start=$(date +%s)
HOME="$work/home" PATH="$work/venv/bin:$PATH" make test >"$work/make-test.log" 2>&1
rc=$?
echo "make test from a fresh clone: exit $rc, $(( $(date +%s) - start )) s ($(tail -n 1 "$work/make-test.log" | tr -d '='))"
grep -h "built\|failed" "$work/home/.cache/fioscope/background-builds.log" 2>/dev/null | sed 's/^/  /'
echo "  log: $work/make-test.log"
exit $rc
