#!/usr/bin/env bash
# Benchmark: how close a drain ends to the earliest any order could: the longest of total work /
# workers, the longest repository's total and the longest chain of dependencies (`after`).
# Three workloads, `workers: 4`, each item a `sleep`:
#   heterogeneous: 40 repositories with 1-12 items of 20-600 ms (seeded, the same every time);
#   skewed: eleven light repositories (one 300 ms item each) listed first, then one heavy
#   repository with ten 600 ms items;
#   dependencies: 30 repositories with 1-4 items of 50-600 ms, a third of them waiting for one
#   or two items of other repositories listed before them (seeded), then a chain of twelve
#   500 ms items across twelve more repositories, listed last, each waiting for the one before:
#   the chain is as long as the work over the workers, so it must start at once.
# Each is drained twice: a first run (no history: the repositories with the most items, and the
# longest chains, start first) and a second one (`--rerun all`: the recorded durations order it).
# Prints the wall time of each divided by the lower bound. Where jq is installed, each run of the
# first two is also divided by the bound computed from the durations its workers actually took
# (read from its report.json): process start-up (`sh`, then `sleep`) lengthens every item on a
# loaded machine, which no order can avoid, so this second figure is the scheduler's own.
#
#   benches/makespan.sh [SEED]
set -euo pipefail
seed=${1:-7}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"

# $1: name; stdin: lines "repo ms [after,after...]" in manifest order (an item's id is
# `repo-N`, its Nth in the repository; `after` names ids listed before it). Writes the manifest,
# creates the repositories, prints the lower bound in ms.
workload() {
  local name=$1 dir="$work/$1"
  mkdir -p "$dir"
  {
    echo "version: 1"
    echo "name: $name"
    echo "capacity: {workers: 4}"
    echo "repositories:"
    echo "  - glob: \"repos/*\""
    echo "worker:"
    echo "  run: ['sh', '-c', 'sleep {item.s}']"
    echo "items:"
  } > "$dir/manifest.yaml"
  awk -v dir="$dir" '
    { n[$1]++; id = $1 "-" n[$1]; s = sprintf("%.3f", $2 / 1000)
      after = ""; chain[id] = $2
      if (NF >= 3) {
        m = split($3, deps, ",")
        for (d = 1; d <= m; d++) {
          dr = deps[d]; sub(/-[0-9]+$/, "", dr)
          after = after (d > 1 ? ", " : "") dr "/" deps[d]
          if (chain[deps[d]] + $2 > chain[id]) chain[id] = chain[deps[d]] + $2
        }
        after = ", after: [" after "]"
      }
      if (chain[id] > critical) critical = chain[id]
      printf "  - {repo: %s, id: %s, vars: {s: \"%s\"}%s}\n", $1, id, s, after >> (dir "/manifest.yaml")
      repo[$1] += $2; total += $2; if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 } }
    END {
      for (i = 1; i <= k; i++) print order[i] > (dir "/repos.txt")
      longest = 0; for (r in repo) if (repo[r] > longest) longest = repo[r]
      lb = total / 4; if (longest > lb) lb = longest; if (critical > lb) lb = critical
      printf "%d\n", lb
    }'
  while read -r r; do
    git init -q -b main "$dir/repos/$r"
    git -C "$dir/repos/$r" commit -q --allow-empty -m init
  done < "$dir/repos.txt"
}

drain() { # $1: name, then extra arguments; prints wall ms
  local t0 t1
  t0=$(now)
  "$bin" apply "$work/$1/manifest.yaml" --no-progress "${@:2}" 2> /dev/null || true
  t1=$(now)
  echo $(( (t1 - t0) / 1000000 ))
}

lb_het=$(awk -v seed="$seed" 'BEGIN { srand(seed)
  for (r = 1; r <= 40; r++) { n = 1 + int(rand() * 12)
    for (i = 0; i < n; i++) printf "r%02d %d\n", r, 20 + int(rand() * 581) } }' | workload het)
lb_skew=$( { for r in $(seq -w 1 11); do echo "light$r 300"; done
             for _ in $(seq 10); do echo "heavy 600"; done; } | workload skew)
# Ids across repositories: item i of repository rNN is `rNN-i`; a dependency on another
# repository's item listed before.
lb_deps=$( { awk -v seed="$seed" 'BEGIN { srand(seed + 1)
    for (r = 1; r <= 30; r++) { n = 1 + int(rand() * 4)
      for (i = 1; i <= n; i++) {
        line = sprintf("d%02d %d", r, 50 + int(rand() * 551))
        if (k > 0 && rand() < 0.34) {
          a = ids[1 + int(rand() * k)]; line = line " " a
          if (rand() < 0.5) { b = ids[1 + int(rand() * k)]; if (b != a) line = line "," b }
        }
        print line; mine[++j] = sprintf("d%02d-%d", r, i)
      }
      for (; j > 0; j--) ids[++k] = mine[j]
    } }'
  echo "chain01 500"
  for c in $(seq -w 2 12); do printf 'chain%s 500 chain%02d-1\n' "$c" $((10#$c - 1)); done
  } | workload deps)

# The lower bound from the durations the latest run's workers took, in ms (empty without jq).
measured_bound() { # $1: name
  command -v jq > /dev/null || return 0
  jq '[.items[] | {repo, ms: ([.attempts[].worker.duration_ms] | add)}]
      | ((map(.ms) | add) / 4) as $share
      | (group_by(.repo) | map(map(.ms) | add) | max) as $longest
      | [$share, $longest] | max | floor' "$work/$1/runner-reports/latest/report.json"
}

echo "workers 4; wall time / lower bound (lower bound in ms)"
for w in het skew deps; do
  lb=$lb_het; [ "$w" = skew ] && lb=$lb_skew; [ "$w" = deps ] && lb=$lb_deps
  first=$(drain "$w")
  first_lb=""; second_lb=""
  [ "$w" = deps ] || first_lb=$(measured_bound "$w")
  second=$(drain "$w" --rerun all)
  [ "$w" = deps ] || second_lb=$(measured_bound "$w")
  awk -v w="$w" -v lb="$lb" -v a="$first" -v b="$second" 'BEGIN {
    printf "%-5s lower bound %6d  first run %6d (%.3fx)  second run %6d (%.3fx)\n", w, lb, a, a / lb, b, b / lb }'
  if [ -n "$first_lb" ]; then
    awk -v w="$w" -v a="$first" -v b="$second" -v la="$first_lb" -v lb="$second_lb" 'BEGIN {
      printf "%-5s against the durations the workers took: first run %.3fx (bound %d)  second run %.3fx (bound %d)\n", w, a / la, la, b / lb, lb }'
  fi
done
