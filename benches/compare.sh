#!/usr/bin/env bash
# Two builds of runner side by side: BASE (a commit, default the previous commit) against the
# working tree, on the same benchmarks in one invocation, alternated (base then new, new then
# base, ...) so that a noisy moment of a shared machine weighs on both alike. Prints each
# benchmark's median for both builds and the ratio new/base (under 1: the working tree is
# faster or smaller). Run it before resolving any change that touches the drain, the launcher
# or git, and give the figures with the build they were measured against.
#
#   benches/compare.sh [BASE] [ROUNDS]
#
# The benchmarks (each script's own headline figure; each script also measures its baseline,
# which is printed by running it alone):
#   drain     benches/drain_overhead.sh 2000 100: 2,000 `true` items over 100 repositories, -j 2
#   codemod   benches/codemod.sh 200: a sed codemod over 200 repositories, one item each
#   plan      benches/plan_scale.sh 1000: plan over 1,000 repositories with critical-base markers
#   memory    benches/memory.sh 10000 10000 1000: peak RSS of a 10,000-item drain
#   makespan  benches/makespan.sh 7: a seeded heterogeneous workload, workers 4 (first run)
# COMPARE_ONLY="drain codemod" measures only those. BASE_BIN=path takes BASE's binary as built
# already (BASE then only names it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
base=${1:-HEAD~1}
rounds=${2:-3}
only=${COMPARE_ONLY:-drain codemod plan memory makespan}

scratch=$(mktemp -d)
cleanup() {
  git -C "$root" worktree remove --force "$scratch/base" > /dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap cleanup EXIT

sha=$(git -C "$root" rev-parse --short "$base")
echo "building base $base ($sha) and the working tree ($(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD || echo ', with changes'))" >&2
if [ -n "${BASE_BIN:-}" ]; then
  base_bin=$BASE_BIN
else
  git -C "$root" worktree add -q --detach "$scratch/base" "$sha"
  cargo build --release --quiet --manifest-path "$scratch/base/Cargo.toml" --target-dir "$scratch/target"
  base_bin="$scratch/target/release/runner"
fi
cargo build --release --quiet --manifest-path "$root/Cargo.toml"
bins=("$base_bin" "$root/target/release/runner")
names=(base new)

# One measurement of benchmark $1 with binary $2: its headline figure.
measure() {
  local out
  case $1 in
  drain)
    out=$(RUNNER_BIN=$2 bash "$here/drain_overhead.sh" 2000 100 1 2>&1)
    awk '/^runner apply:/ { print $3 }' <<< "$out" ;;
  codemod)
    out=$(RUNNER_BIN=$2 bash "$here/codemod.sh" 200 1 2>&1)
    awk '/^runner apply:/ { print $3 }' <<< "$out" ;;
  plan)
    out=$(RUNNER_BIN=$2 bash "$here/plan_scale.sh" 1000 1 2>&1)
    awk '/^runner plan:/ { print $3 }' <<< "$out" ;;
  memory)
    out=$(RUNNER_BIN=$2 bash "$here/memory.sh" 10000 10000 1000 2>&1)
    awk '/^apply, 10000 items/ { print $(NF-1) }' <<< "$out" ;;
  makespan)
    out=$(RUNNER_BIN=$2 bash "$here/makespan.sh" 7 2>&1)
    awk '/lower bound/ && /first run/ { for (i = 1; i < NF; i++) if ($i == "run") { print $(i+1); exit } }' <<< "$out" ;;
  esac
}
unit() { case $1 in memory) echo "MiB peak RSS" ;; *) echo "ms" ;; esac; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A got
for k in $(seq "$rounds"); do
  for b in $only; do
    # Alternate which build goes first.
    if (( k % 2 )); then order="0 1"; else order="1 0"; fi
    for i in $order; do
      v=$(measure "$b" "${bins[$i]}")
      [ -n "$v" ] || { echo "benchmark $b gave no figure with the ${names[$i]} build" >&2; exit 1; }
      got[$b.$i]="${got[$b.$i]:-} $v"
    done
  done
done

echo "base $base ($sha) against the working tree; $rounds rounds alternated, medians; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-10s %12s %12s %8s  %s\n' benchmark base new new/base unit
for b in $only; do
  a=$(tr ' ' '\n' <<< "${got[$b.0]}" | grep . | median)
  n=$(tr ' ' '\n' <<< "${got[$b.1]}" | grep . | median)
  printf '%-10s %12s %12s %8s  %s   (base:%s; new:%s)\n' "$b" "$a" "$n" \
    "$(awk -v a="$a" -v n="$n" 'BEGIN { printf "%.2fx", n / a }')" "$(unit "$b")" "${got[$b.0]}" "${got[$b.1]}"
done
