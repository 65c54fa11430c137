#!/usr/bin/env bash
# Benchmark: runner's own overhead. `runner apply -j 2` over ITEMS items in REPOS repositories
# whose worker is `true` and which have no gates, against `xargs -P 2` running the same number of
# `true` commands, in the same session. Each timed run starts from an empty state ledger, so
# every item runs and every claim and result is written. Prints both wall times (median of R
# runs) and the ratio, then the CPU time of each (the commands' own included): how much runner
# adds per item, the best ratio that CPU time allows on this machine's cores, and the most it
# could add per item for 1.1x.
#
#   benches/drain_overhead.sh [ITEMS] [REPOS] [R]      (SANDBOX=off: items unconfined)
set -euo pipefail
items=${1:-2000}
repos=${2:-100}
runs=${3:-3}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"

per=$(( items / repos ))
{
  echo "version: 1"
  echo "name: drain-overhead"
  echo "capacity: {workers: 2}"
  # SANDBOX=off measures runner with items unconfined (default: as the manifest default).
  if [ -n "${SANDBOX:-}" ]; then echo "sandbox: {mode: $SANDBOX}"; fi
  echo "repositories:"
  echo "  - glob: \"repos/*\""
  echo "worker:"
  echo "  run: [\"true\"]"
  echo "items:"
} > "$work/manifest.yaml"
for r in $(seq -f '%03g' 1 "$repos"); do
  d="$work/repos/r$r"
  git init -q -b main "$d"
  git -C "$d" commit -q --allow-empty -m init
  for i in $(seq 1 "$per"); do echo "  - {repo: r$r, id: i$i}" >> "$work/manifest.yaml"; done
done


# Each timed run has a ledger and a reports folder of its own, all removed on exit, not between
# runs: on a file system without a journal (ext4 as some CI machines and containers mount it),
# creating files within a minute of deleting thousands scans the inode table for each one, which
# made the runs after the first measure the previous run's clean-up rather than runner.
# Each prints the wall time and the CPU time (user + system, the commands' own included), in ms.
TIMEFORMAT='%3R %3U %3S'
ms() { awk '{ printf "%d %d\n", $1 * 1000, ($2 + $3) * 1000 }'; }
time_runner() {
  local n_run=$1
  { time "$bin" apply "$work/manifest.yaml" -j 2 --no-progress --state "$work/state-$n_run.db" \
      --report-dir "$work/out-$n_run" 2> /dev/null; } 2>&1 | ms
}
time_parallel() {
  { time (seq "$items" | parallel -j 2 true); } 2>&1 | ms
}
time_xargs() {
  { time (seq "$items" | xargs -P 2 -I{} true); } 2>&1 | ms
}

time_runner 0 > /dev/null
done_count=$(grep -o '"completed": [0-9]*' "$work/out-0/latest/report.json" | head -1 | awk '{print $2}')
[ "$done_count" -eq "$items" ] || { echo "expected $items completed items, found $done_count" >&2; exit 1; }
# Alternate the two, so that a noisy moment of a shared machine weighs on both alike.
rs=(); xs=(); ps=()
# GNU parallel, when installed (Debian: parallel), runs the same commands too.
have_parallel=$(command -v parallel > /dev/null && echo yes || echo no)
rc=(); xc=()
for k in $(seq "$runs"); do
  read -r wall cpu < <(time_runner "$k"); rs+=("$wall"); rc+=("$cpu")
  read -r wall cpu < <(time_xargs); xs+=("$wall"); xc+=("$cpu")
  if [ "$have_parallel" = yes ]; then read -r wall cpu < <(time_parallel); ps+=("$wall"); fi
done
r=$(printf '%s\n' "${rs[@]}" | median)
x=$(printf '%s\n' "${xs[@]}" | median)
rcpu=$(printf '%s\n' "${rc[@]}" | median)
xcpu=$(printf '%s\n' "${xc[@]}" | median)
echo "items: $items over $repos repositories, -j 2, runs: $runs (median)"
echo "runner apply:   ${r} ms"
echo "xargs -P 2:     ${x} ms"
awk -v r="$r" -v x="$x" 'BEGIN { printf "ratio runner/xargs: %.2fx\n", r / x }'
# Where the ratio comes from: CPU time, the commands' own included, and what it allows. With
# every core busy, a drain cannot end before its CPU time divided by the cores.
cores=$(nproc)
awk -v rc="$rcpu" -v xc="$xcpu" -v x="$x" -v n="$items" -v c="$cores" 'BEGIN {
  printf "CPU time:       runner %d ms, xargs %d ms: runner adds %.3f ms per item\n", rc, xc, (rc - xc) / n
  printf "best ratio that CPU time allows on %d cores: %.2fx\n", c, (rc / c) / x
  printf "CPU per item runner may add for 1.1x on %d cores: at most %.3f ms\n", c, (1.1 * x * c - xc) / n
}'
if [ "$have_parallel" = yes ]; then
  p=$(printf '%s\n' "${ps[@]}" | median)
  echo "parallel -j 2:  ${p} ms"
  awk -v r="$r" -v p="$p" 'BEGIN { printf "GNU parallel/runner: %.2fx (runner is that many times faster)\n", p / r }'
else
  echo "GNU parallel: not installed (apt-get install parallel), not compared"
fi
