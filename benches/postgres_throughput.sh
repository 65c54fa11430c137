#!/usr/bin/env bash
# Benchmark: drains through one PostgreSQL ledger. ITEMS `true` items over REPOS repositories,
# drained by 1, 2 and 4 `runner apply` processes at once (each `-j 2`) against one database:
# items per second for the whole drain, and how long claims took (p50, p99) as the runners
# logged them (`claim answered`, RUNNER_LOG=runner::commands::apply=debug). The server is the
# tests' private one (tests/postgres/start.sh), or RUNNER_BENCH_POSTGRES (a URL whose user may
# create databases).
#
#   benches/postgres_throughput.sh [ITEMS] [REPOS]
set -euo pipefail
items=${1:-2000}
repos=${2:-100}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"
admin=${RUNNER_BENCH_POSTGRES:-$(bash "$root/tests/postgres/start.sh")}
base=${admin%/*}

per=$(( items / repos ))
{
  echo "version: 1"
  echo "name: pg-throughput"
  echo "capacity: {workers: 2}"
  echo "repositories:"
  echo "  - glob: \"repos/*\""
  echo "worker:"
  echo "  run: [\"true\"]"
  echo "reports: {formats: [json]}"
  echo "items:"
} > "$work/manifest.yaml"
for r in $(seq -f '%03g' 1 "$repos"); do
  git init -q -b main "$work/repos/r$r"
  git -C "$work/repos/r$r" commit -q --allow-empty -m init
  for i in $(seq 1 "$per"); do echo "  - {repo: r$r, id: i$i}" >> "$work/manifest.yaml"; done
done

echo "items: $items over $repos repositories; each runner -j 2; one database per row"
printf '%-9s %10s %10s %12s %12s\n' runners wall_ms items/s claim_p50_us claim_p99_us
for n in 1 2 4; do
  db="bench_$$_$n"
  psql "$admin" -qc "CREATE DATABASE $db" >/dev/null
  url="$base/$db"
  rm -rf "$work"/logs-*
  t0=$(now)
  pids=()
  for k in $(seq 1 "$n"); do
    RUNNER_LOG=runner::commands::apply=debug "$bin" --log-format json apply "$work/manifest.yaml" \
      --no-progress --state "$url" --report-dir "$work/out-$n-$k" 2> "$work/logs-$k" > /dev/null &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  t1=$(now)
  ms=$(( (t1 - t0) / 1000000 ))
  done_items=$(psql "$url" -Atc "SELECT count(DISTINCT (repo, item)) FROM item_results WHERE outcome = 'completed'")
  [ "$done_items" -eq "$items" ] || { echo "expected $items completed items, found $done_items" >&2; exit 1; }
  read -r p50 p99 < <(cat "$work"/logs-* | grep -o '"claim_us":[0-9]*' | cut -d: -f2 | sort -n \
    | awk '{a[NR]=$1} END {print a[int(NR*0.5)+ (NR*0.5>int(NR*0.5))], a[int(NR*0.99)+(NR*0.99>int(NR*0.99))]}')
  awk -v n="$n" -v ms="$ms" -v items="$items" -v p50="$p50" -v p99="$p99" \
    'BEGIN { printf "%-9s %10d %10.0f %12d %12d\n", n, ms, items * 1000 / ms, p50, p99 }'
  psql "$admin" -qc "DROP DATABASE $db" >/dev/null
done
