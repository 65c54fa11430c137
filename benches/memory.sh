#!/usr/bin/env bash
# Benchmark: runner's peak memory (RSS) as work grows — a drain of ITEMS `true` items over 100
# repositories, and a `plan` of PLAN_ITEMS items discovered over 1,000 repositories — each next to
# the same at a tenth of the size, to show how it grows.
#
#   benches/memory.sh [ITEMS] [PLAN_ITEMS]
set -euo pipefail
items=${1:-10000}
plan_items=${2:-100000}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"

peak() { # the peak RSS of a command, in MiB
  python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
if r.returncode != 0:
    sys.exit("failed (exit %d): %s" % (r.returncode, r.stderr.decode(errors="replace")[-2000:]))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)' "$@"
}

# $1: folder, $2: items, $3: repositories. Each repository holds its share of the items as
# committed task files the manifest discovers (a manifest listing 100,000 items would pass the
# manifest's 1 MiB limit); `true` does each, two at once.
task_manifest() {
  local dir=$1 per=$(( $2 / $3 ))
  mkdir -p "$dir/repos"
  cat > "$dir/manifest.yaml" <<YAML
version: 1
name: memory
capacity: {workers: 2}
repositories:
  - glob: "repos/*"
worker:
  run: ["true"]
discover:
  - glob: "tasks/*.md"
    id: "{match.stem}"
YAML
  for r in $(seq -f '%05g' 1 "$3"); do
    local d="$dir/repos/r$r"
    mkdir -p "$d/tasks"
    (cd "$d/tasks" && seq -f 't%g.md' 1 "$per" | xargs touch)
    git init -q -b main "$d"
    git -C "$d" add -A
    git -C "$d" commit -q -m init
  done
}

small=$(( items / 10 ))
task_manifest "$work/d-small" "$small" 100
task_manifest "$work/d-big" "$items" 100
d_small=$(peak "$bin" apply "$work/d-small/manifest.yaml" --no-progress)
d_big=$(peak "$bin" apply "$work/d-big/manifest.yaml" --no-progress)
psmall=$(( plan_items / 10 ))
task_manifest "$work/p-small" "$psmall" 1000
task_manifest "$work/p-big" "$plan_items" 1000
p_small=$(peak "$bin" plan "$work/p-small/manifest.yaml" --json)
p_big=$(peak "$bin" plan "$work/p-big/manifest.yaml" --json)
echo "peak RSS (MiB)"
echo "apply, $small items:  $d_small"
echo "apply, $items items: $d_big"
echo "plan,  $psmall items:  $p_small"
echo "plan,  $plan_items items: $p_big"
awk -v a="$d_small" -v b="$d_big" -v c="$p_small" -v d="$p_big" 'BEGIN {
  printf "growth for 10x the work: apply %.2fx, plan %.2fx\n", b / a, d / c }'
