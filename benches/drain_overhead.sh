#!/usr/bin/env bash
# Benchmark: runner's own overhead. `runner apply -j 2` over ITEMS items in REPOS repositories
# whose worker is `true` and which have no gates, against `xargs -P 2` running the same number of
# `true` commands, in the same session. Each timed run starts from an empty state ledger, so
# every item runs and every claim and result is written. Prints both wall times (median of R runs) and the ratio.
#
#   benches/drain_overhead.sh [ITEMS] [REPOS] [R]
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
time_runner() {
  local t0 t1 n_run=$1
  t0=$(now)
  "$bin" apply "$work/manifest.yaml" -j 2 --no-progress --state "$work/state-$n_run.db" \
    --report-dir "$work/out-$n_run" 2> /dev/null
  t1=$(now)
  echo $(( (t1 - t0) / 1000000 ))
}
time_parallel() {
  local t0 t1
  t0=$(now)
  seq "$items" | parallel -j 2 true
  t1=$(now)
  echo $(( (t1 - t0) / 1000000 ))
}
time_xargs() {
  local t0 t1
  t0=$(now)
  seq "$items" | xargs -P 2 -I{} true
  t1=$(now)
  echo $(( (t1 - t0) / 1000000 ))
}

time_runner 0 > /dev/null
done_count=$(grep -o '"completed": [0-9]*' "$work/out-0/latest/report.json" | head -1 | awk '{print $2}')
[ "$done_count" -eq "$items" ] || { echo "expected $items completed items, found $done_count" >&2; exit 1; }
# Alternate the two, so that a noisy moment of a shared machine weighs on both alike.
rs=(); xs=(); ps=()
# GNU parallel, when installed (Debian: parallel), runs the same commands too.
have_parallel=$(command -v parallel > /dev/null && echo yes || echo no)
for k in $(seq "$runs"); do
  rs+=("$(time_runner "$k")")
  xs+=("$(time_xargs)")
  [ "$have_parallel" = yes ] && ps+=("$(time_parallel)")
done
r=$(printf '%s\n' "${rs[@]}" | median)
x=$(printf '%s\n' "${xs[@]}" | median)
echo "items: $items over $repos repositories, -j 2, runs: $runs (median)"
echo "runner apply:   ${r} ms"
echo "xargs -P 2:     ${x} ms"
awk -v r="$r" -v x="$x" 'BEGIN { printf "ratio runner/xargs: %.2fx\n", r / x }'
if [ "$have_parallel" = yes ]; then
  p=$(printf '%s\n' "${ps[@]}" | median)
  echo "parallel -j 2:  ${p} ms"
  awk -v r="$r" -v p="$p" 'BEGIN { printf "GNU parallel/runner: %.2fx (runner is that many times faster)\n", p / r }'
else
  echo "GNU parallel: not installed (apt-get install parallel), not compared"
fi
