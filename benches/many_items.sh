#!/usr/bin/env bash
# Benchmark: many items in one large repository, each on its own work branch, against the
# script a user would otherwise write, which adds a worktree for each item and removes it after.
# The repository is a clone of REPO (a real project: the figures need one of at least 20,000
# files; without REPO, one of 20,000 generated files is used). ITEMS items; each item's worker
# edits one file and writes one of its own, one `grep` gate, the work committed. Items of one
# repository run one at a time (one lease a repository), so the script runs them one at a time
# too: `git worktree add -b`, the edit, the gate, `git add -A`, `git commit`, `git worktree
# remove`. Both start from the same clone (branches and worktrees of the previous run removed,
# untimed), alternated, median of R runs; runner with an empty ledger each time.
#
#   benches/many_items.sh [REPO] [ITEMS] [R]        (SANDBOX=off: items unconfined)
set -euo pipefail
src=${1:-}
items=${2:-50}
runs=${3:-1}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"

if [ -n "$src" ]; then
  git clone -q --no-hardlinks "$src" "$work/r"
else
  echo "generating a repository of 20,000 files" >&2
  mkdir -p "$work/r"
  git -C "$work/r" init -q -b main
  for d in $(seq 1 200); do
    mkdir -p "$work/r/d$d"
    for f in $(seq 1 100); do printf 'line %s of %s\n' "$f" "$d" > "$work/r/d$d/f$f.txt"; done
  done
  echo "# generated" > "$work/r/README.md"
  git -C "$work/r" add -A
  git -C "$work/r" commit -q -m init
fi
files=$(git -C "$work/r" ls-files | wc -l)
git -C "$work/r" ls-files --error-unmatch README.md > /dev/null 2>&1 ||
  { echo "the repository has no README.md to edit" >&2; exit 1; }

{
  echo "version: 1"
  echo "name: many-items"
  echo "repositories: [{path: r}]"
  echo "worker:"
  echo '  run: ["sh", "-c", "echo {item} >> README.md && echo {item} > item-{item}.txt"]'
  echo "gates:"
  echo '  - {name: wrote, run: [grep, -q, "{item}", README.md]}'
  [ -n "${SANDBOX:-}" ] && echo "sandbox: {mode: $SANDBOX}"
  echo "items:"
  for k in $(seq 1 "$items"); do echo "  - {repo: r, id: i$k, branch: work/i$k}"; done
} > "$work/manifest.yaml"

cat > "$work/one.sh" <<'SCRIPT'
#!/bin/sh
set -e
r=$1 k=$2
wt="$r.wt-$k"
git -C "$r" worktree add -q -b "work/i$k" "$wt"
cd "$wt"
echo "i$k" >> README.md && echo "i$k" > "item-i$k.txt"
grep -q "i$k" README.md
git add -A
git commit -q -m "item i$k"
cd /
git -C "$r" worktree remove "$wt"
SCRIPT
chmod +x "$work/one.sh"

reset() {
  rm -rf "$work/.runner" "$work"/r.wt-*
  git -C "$work/r" worktree prune
  git -C "$work/r" for-each-ref --format='%(refname:short)' refs/heads/work/ |
    xargs -r git -C "$work/r" branch -q -D
}
TIMEFORMAT='%3R'
ms() { awk '{ printf "%d\n", $1 * 1000 }'; }
time_runner() {
  reset
  { time "$bin" apply "$work/manifest.yaml" --no-progress --state "$work/state-$1.db" \
      --report-dir "$work/out-$1" 2> /dev/null; } 2>&1 | ms
}
time_script() {
  reset
  { time (seq 1 "$items" | xargs -P 1 -I{} "$work/one.sh" "$work/r" {}); } 2>&1 | ms
}
committed() {
  git -C "$work/r" for-each-ref refs/heads/work/ | wc -l
}

rs=(); ss=()
for k in $(seq "$runs"); do
  rs+=("$(time_runner "$k")")
  [ "$(committed)" -eq "$items" ] || { echo "runner did not commit every item" >&2; exit 1; }
  ss+=("$(time_script)")
  [ "$(committed)" -eq "$items" ] || { echo "the script did not commit every item" >&2; exit 1; }
done
r=$(printf '%s\n' "${rs[@]}" | median)
s=$(printf '%s\n' "${ss[@]}" | median)
echo "$items items in one repository of $files files, one at a time, runs: $runs (median)"
echo "runner apply:             ${r} ms   (runs: ${rs[*]})"
echo "script, worktree an item: ${s} ms   (runs: ${ss[*]})"
awk -v r="$r" -v s="$s" -v n="$items" 'BEGIN { printf "ratio runner/script: %.2fx; per item: runner %.0f ms, script %.0f ms\n", r / s, r / n, s / n }'
