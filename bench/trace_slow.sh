#!/usr/bin/env bash
# Go execution traces of a Prometheus around its slow rule evaluations: takes 20-second traces one after another
# (/debug/pprof/trace) and keeps the last two whenever a group's evaluation in the last 35 s took over THRESHOLD
# seconds; stops when Prometheus does. Read them with bench/gotrace (cd bench/gotrace && go run . TRACE;
# docs/fleet-bench.md, last section).
#
#   bench/trace_slow.sh http://127.0.0.1:9090 /tmp/traces [1.8]
set -euo pipefail
url=${1:?usage: trace_slow.sh PROMETHEUS_URL OUT_DIR [THRESHOLD_SECONDS]}
out=${2:?usage: trace_slow.sh PROMETHEUS_URL OUT_DIR [THRESHOLD_SECONDS]}
threshold=${3:-1.8}
mkdir -p "$out/rolling"
query="max by (rule_group) (max_over_time(prometheus_rule_group_last_duration_seconds[35s])) > $threshold"
while curl -sf -o "$out/rolling/trace-$(date +%s).out" "$url/debug/pprof/trace?seconds=20"; do
  slow=$(curl -sf "$url/api/v1/query" --data-urlencode "query=$query" \
    | python3 -c 'import json, sys; print(" ".join(r["metric"]["rule_group"].split(";")[-1] + "=" + r["value"][1] for r in json.load(sys.stdin)["data"]["result"]))') \
    || break  # Prometheus stopped between the trace and the query
  if [ -n "$slow" ]; then
    echo "$(date +%T) kept: $slow"
    cp "$out"/rolling/trace-*.out "$out/"
  fi
  ls -t "$out"/rolling/trace-*.out | tail -n +3 | xargs -r rm -f
done
