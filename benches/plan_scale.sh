#!/usr/bin/env bash
# Benchmark: `runner plan` over N generated repositories (default 1000), each with a work branch
# to continue and a `critical_base` marker (a tag) that branch must contain, against a shell
# loop doing the least a script would: `git merge-base --is-ancestor` of the marker and the branch
# in every repository. Prints both wall times (median of R runs), their ratio, and plan's peak
# memory.
#
#   benches/plan_scale.sh [N] [R]
set -euo pipefail
n=${1:-1000}
runs=${2:-5}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"

echo "generating $n repositories in $work" >&2
mkdir -p "$work/repos"
for i in $(seq -f '%04g' 1 "$n"); do
  d="$work/repos/r$i"
  git init -q -b main "$d"
  echo "task $i" > "$d/TASK.md"
  git -C "$d" add TASK.md
  git -C "$d" commit -q -m init
  git -C "$d" tag base-fix
  git -C "$d" branch "runner/r$i-task"
done
cat > "$work/manifest.yaml" <<YAML
version: 1
name: plan-scale
repositories:
  - glob: "repos/*"
    critical_base: [base-fix]
worker:
  run: ["true"]
discover:
  - glob: "TASK.md"
    id: "task"
    branch: "runner/{repo}-task"
YAML


time_runner() {
  local t0 t1
  t0=$(now)
  "$bin" plan "$work/manifest.yaml" --json > "$work/plan.json"
  t1=$(now)
  echo $(( (t1 - t0) / 1000000 ))
}
time_loop() {
  local t0 t1
  t0=$(now)
  for d in "$work"/repos/*; do
    git -C "$d" merge-base --is-ancestor base-fix "runner/${d##*/}-task"
  done
  t1=$(now)
  echo $(( (t1 - t0) / 1000000 ))
}

time_runner > /dev/null # warm the file cache
items=$(grep -c '"state": "pending"' "$work/plan.json")
[ "$items" -eq "$n" ] || { echo "expected $n pending items, found $items" >&2; exit 1; }
r=$(for _ in $(seq "$runs"); do time_runner; done | median)
b=$(for _ in $(seq "$runs"); do time_loop; done | median)
echo "repositories: $n  runs: $runs (median)"
echo "runner plan:          ${r} ms"
echo "merge-base loop:      ${b} ms"
awk -v r="$r" -v b="$b" 'BEGIN { printf "loop/runner:          %.2fx (runner is that many times faster)\n", b / r }'
rss=$(python3 -c 'import resource, subprocess, sys
subprocess.run([sys.argv[1], "plan", sys.argv[2], "--json"], stdout=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)' "$bin" "$work/manifest.yaml")
echo "runner plan peak RSS: ${rss} MiB"
