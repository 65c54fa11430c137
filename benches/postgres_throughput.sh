#!/usr/bin/env bash
# Benchmark: drains through one PostgreSQL ledger. ITEMS `true` items over REPOS repositories
# (discovered task files), drained by each count of RUNNERS `runner apply` processes at once (each
# `-j 2`) against one fresh database: items per second for the whole drain against one runner's
# (measured in the same invocation), how long claims took (p50, p99) as the runners logged them
# (`claim answered`, RUNNER_LOG=runner::session::fanout=debug), and a check that every item
# completed exactly once. The server is the tests' private one (tests/postgres/start.sh), or
# RUNNER_BENCH_POSTGRES (a URL whose user may create databases).
#
#   benches/postgres_throughput.sh [ITEMS] [REPOS] [RUNNERS]     (RUNNERS default "1 2 4 8")
set -euo pipefail
items=${1:-2000}
repos=${2:-100}
counts=${3:-1 2 4 8}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"
admin=${RUNNER_BENCH_POSTGRES:-$(bash "$root/tests/postgres/start.sh")}
base=${admin%/*}

task_manifest "$work" "$items" "$repos" "reports: {formats: [json]}"
echo "items: $items over $repos repositories; each runner -j 2; one database per row"
printf '%-9s %10s %10s %8s %12s %12s\n' runners wall_ms items/s vs_1 claim_p50_us claim_p99_us
one=
for n in $counts; do
  db="bench_$$_$n"
  psql "$admin" -qc "CREATE DATABASE $db" >/dev/null
  url="$base/$db"
  rm -rf "$work"/logs-*
  t0=$(now)
  pids=()
  for k in $(seq 1 "$n"); do
    RUNNER_LOG=runner::session::fanout=debug "$bin" --log-format json apply "$work/manifest.yaml" \
      --no-progress --state "$url" --report-dir "$work/out-$n-$k" 2> "$work/logs-$k" > /dev/null &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  t1=$(now)
  ms=$(( (t1 - t0) / 1000000 ))
  # Exactly once: every item completed, none recorded or started twice (the runners' reports).
  done_items=$(psql "$url" -Atc "SELECT count(DISTINCT (repo, item)) FROM item_results WHERE outcome = 'completed'")
  results=$(psql "$url" -Atc "SELECT count(*) FROM item_results WHERE outcome = 'completed'")
  started=$(python3 -c 'import json, sys
print(sum(1 for p in sys.argv[1:] for it in json.load(open(p))["items"] if it.get("started_at")))' \
    "$work"/out-"$n"-*/[0-9]*/report.json)
  [ "$done_items" -eq "$items" ] || { echo "expected $items completed items, found $done_items" >&2; exit 1; }
  [ "$results" -eq "$items" ] || { echo "$results completed results for $items items: some item ran twice" >&2; exit 1; }
  [ "$started" -eq "$items" ] || { echo "$started items started for $items items" >&2; exit 1; }
  read -r p50 p99 < <(cat "$work"/logs-* | grep -o '"claim_us":[0-9]*' | cut -d: -f2 | sort -n \
    | awk '{a[NR]=$1} END {print a[int(NR*0.5)+ (NR*0.5>int(NR*0.5))], a[int(NR*0.99)+(NR*0.99>int(NR*0.99))]}')
  [ -n "$p50" ] || { echo "no claim timings in the runners' logs" >&2; exit 1; }
  one=${one:-$ms}
  awk -v n="$n" -v ms="$ms" -v one="$one" -v items="$items" -v p50="$p50" -v p99="$p99" \
    'BEGIN { printf "%-9s %10d %10.0f %7.2fx %12d %12d\n", n, ms, items * 1000 / ms, one / ms, p50, p99 }'
  psql "$admin" -qc "DROP DATABASE $db" >/dev/null
done
