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
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)' "$@"
}

drain_manifest() { # $1: folder, $2: items over 100 repositories
  local dir=$1 per=$(( $2 / 100 ))
  mkdir -p "$dir/repos"
  {
    echo "version: 1"; echo "name: memory"; echo "capacity: {workers: 2}"
    echo "repositories:"; echo "  - glob: \"repos/*\""
    echo "worker:"; echo "  run: [\"true\"]"; echo "items:"
    for r in $(seq -f '%03g' 1 100); do
      for i in $(seq 1 "$per"); do echo "  - {repo: r$r, id: i$i}"; done
    done
  } > "$dir/manifest.yaml"
  for r in $(seq -f '%03g' 1 100); do
    [ -d "$dir/repos/r$r" ] && continue
    git init -q -b main "$dir/repos/r$r"
    git -C "$dir/repos/r$r" commit -q --allow-empty -m init
  done
}

plan_manifest() { # $1: folder, $2: items over 1,000 repositories (discovered task files)
  local dir=$1 per=$(( $2 / 1000 ))
  mkdir -p "$dir/repos"
  cat > "$dir/manifest.yaml" <<YAML
version: 1
name: memory-plan
repositories:
  - glob: "repos/*"
worker:
  run: ["true"]
discover:
  - glob: "tasks/*.md"
    id: "{match.stem}"
YAML
  for r in $(seq -f '%04g' 1 1000); do
    local d="$dir/repos/r$r"
    mkdir -p "$d/tasks"
    for i in $(seq 1 "$per"); do : > "$d/tasks/t$i.md"; done
    git init -q -b main "$d"
    git -C "$d" add -A
    git -C "$d" commit -q -m init
  done
}

small=$(( items / 10 ))
drain_manifest "$work/d-small" "$small"
drain_manifest "$work/d-big" "$items"
d_small=$(peak "$bin" apply "$work/d-small/manifest.yaml" --no-progress)
d_big=$(peak "$bin" apply "$work/d-big/manifest.yaml" --no-progress)
psmall=$(( plan_items / 10 ))
plan_manifest "$work/p-small" "$psmall"
plan_manifest "$work/p-big" "$plan_items"
p_small=$(peak "$bin" plan "$work/p-small/manifest.yaml" --json)
p_big=$(peak "$bin" plan "$work/p-big/manifest.yaml" --json)
echo "peak RSS (MiB)"
echo "apply, $small items:  $d_small"
echo "apply, $items items: $d_big"
echo "plan,  $psmall items:  $p_small"
echo "plan,  $plan_items items: $p_big"
awk -v a="$d_small" -v b="$d_big" -v c="$p_small" -v d="$p_big" 'BEGIN {
  printf "growth for 10x the work: apply %.2fx, plan %.2fx\n", b / a, d / c }'
