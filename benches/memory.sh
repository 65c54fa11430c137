#!/usr/bin/env bash
# Benchmark: runner's peak memory (RSS) and wall time as work grows — a drain of ITEMS `true` items
# over 100 repositories, and a `plan` of PLAN_ITEMS items discovered over PLAN_REPOS repositories
# (the plan's time the median of 3, its file cache warm) — each next to the same at a tenth of the
# size, to show how it grows.
#
#   benches/memory.sh [ITEMS] [PLAN_ITEMS] [PLAN_REPOS]     (SANDBOX=off: items unconfined)
set -euo pipefail
items=${1:-10000}
plan_items=${2:-100000}
plan_repos=${3:-10000}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"

peak() { # the peak RSS of a command, in MiB, and its wall time in ms (the median of $RUNS runs)
  RUNS=${RUNS:-1} python3 -c 'import os, resource, subprocess, sys, time
times = []
for _ in range(int(os.environ["RUNS"])):
    t = time.monotonic()
    r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    times.append((time.monotonic() - t) * 1000)
    if r.returncode != 0:
        sys.exit("failed (exit %d): %s" % (r.returncode, r.stderr.decode(errors="replace")[-2000:]))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, int(sorted(times)[len(times) // 2]))' "$@"
}

small=$(( items / 10 ))
# Both drains run over the same repositories, ITEMS / 100 task files each, the small one
# discovering a tenth of them: an item proves its checkout unchanged by looking at every file
# the index names, so repositories that grew with the items would measure the larger checkout,
# not the count. Each drain has its own ledger and reports.
task_manifest "$work/d" "$items" 100 ${SANDBOX:+"sandbox: {mode: $SANDBOX}"}
sed 's#glob: "tasks/\*.md"#glob: "tasks/t*0.md"#' "$work/d/manifest.yaml" > "$work/d/small.yaml"
drain() { # $1: the manifest's name
  peak "$bin" apply "$work/d/$1.yaml" --no-progress --state "$work/$1.db" --report-dir "$work/out-$1"
}
read -r d_small d_small_ms < <(drain small)
read -r d_big d_big_ms < <(drain manifest)
for run in small manifest; do
  n=$(grep -o '"completed": [0-9]*' "$work/out-$run/latest/report.json" | head -1 | awk '{print $2}')
  want=$([ "$run" = small ] && echo "$small" || echo "$items")
  [ "$n" = "$want" ] || { echo "the $run drain completed $n items, not $want" >&2; exit 1; }
done
psmall=$(( plan_items / 10 ))
task_manifest "$work/p-small" "$psmall" "$(( plan_repos / 10 ))"
task_manifest "$work/p-big" "$plan_items" "$plan_repos"
"$bin" plan "$work/p-big/manifest.yaml" --json > /dev/null # warm the file cache
read -r p_small p_small_ms < <(RUNS=3 peak "$bin" plan "$work/p-small/manifest.yaml" --json)
read -r p_big p_big_ms < <(RUNS=3 peak "$bin" plan "$work/p-big/manifest.yaml" --json)
echo "                                          peak RSS MiB  wall ms"
printf '%-42s %12s %8s\n' "apply, $small items / 100 repos" "$d_small" "$d_small_ms" \
  "apply, $items items / 100 repos" "$d_big" "$d_big_ms" \
  "plan,  $psmall items / $(( plan_repos / 10 )) repos" "$p_small" "$p_small_ms" \
  "plan,  $plan_items items / $plan_repos repos" "$p_big" "$p_big_ms"
awk -v a="$d_small" -v b="$d_big" -v c="$p_small" -v d="$p_big" -v pt="$p_small_ms" -v bt="$p_big_ms" \
  -v at="$d_small_ms" -v ab="$d_big_ms" -v n="$small" 'BEGIN {
  printf "apply time per item: %.3f ms at %d items, %.3f ms at %d (%.2fx)\n", at / n, n, ab / (10 * n), 10 * n, (ab / 10) / at
  printf "growth for 10x the work: apply memory %.2fx; plan memory %.2fx, plan time %.2fx\n", b / a, d / c, bt / pt }'
