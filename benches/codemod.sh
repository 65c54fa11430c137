#!/usr/bin/env bash
# Benchmark: a codemod over many repositories, against the script a user would otherwise write.
# REPOS repositories of 40 small source files each; one item per repository on its own work
# branch, the worker a `sed` edit, one `grep` gate, the edit committed. The baseline does the
# same under `xargs -P 2`: `git worktree add -b`, `sed`, `grep`, `git add -A`, `git commit`,
# `git worktree remove`. Both start from the same repositories (the branches and worktrees of the
# previous run removed, untimed), alternated, median of R runs; runner with an empty ledger each
# time, -j 2. Then one more runner run with `--events` gives its time per item split by phase.
#
#   benches/codemod.sh [REPOS] [R]        (SANDBOX=off: items unconfined)
set -euo pipefail
repos=${1:-200}
runs=${2:-3}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"

echo "generating $repos repositories" >&2
{
  echo "version: 1"
  echo "name: codemod"
  echo "capacity: {workers: 2}"
  echo "repositories:"
  echo "  - glob: \"repos/*\""
  echo "worker:"
  echo "  run: [sed, -i, \"s/old_api(/new_api(/g\", src/mod.rs]"
  echo "gates:"
  echo "  - {name: renamed, run: [grep, -rq, \"new_api(\", src]}"
  # SANDBOX=off measures runner with items unconfined (default: as the manifest default).
  [ -n "${SANDBOX:-}" ] && echo "sandbox: {mode: $SANDBOX}"
  echo "items:"
} > "$work/manifest.yaml"
for r in $(seq -f '%04g' 1 "$repos"); do
  d="$work/repos/r$r"
  mkdir -p "$d/src"
  for f in $(seq 1 39); do
    printf 'pub fn f%s(x: u32) -> u32 {\n    x + %s\n}\n' "$f" "$f" > "$d/src/f$f.rs"
  done
  printf 'pub fn run() {\n    old_api(1);\n    let y = old_api(2);\n    drop(y);\n}\n' > "$d/src/mod.rs"
  git -C "$d" init -q -b main
  git -C "$d" add -A
  git -C "$d" commit -q -m init
  echo "  - {repo: r$r, id: rename, branch: codemod/rename}" >> "$work/manifest.yaml"
done

# The hand-written script: one repository, start to end.
cat > "$work/one.sh" <<'EOF'
#!/bin/sh
set -e
r=$1
wt="$r.wt"
git -C "$r" worktree add -q -b codemod/rename "$wt"
cd "$wt"
sed -i 's/old_api(/new_api(/g' src/mod.rs
grep -rq 'new_api(' src
git add -A
git commit -q -m codemod
cd /
git -C "$r" worktree remove "$wt"
EOF
chmod +x "$work/one.sh"

# Back to the start, untimed: no work branch, no worktree, no runner workspace.
reset() {
  rm -rf "$work/.runner" "$work"/repos/*.wt
  for d in "$work"/repos/r*; do
    case $d in *.wt) continue ;; esac
    git -C "$d" worktree prune
    git -C "$d" branch -q -D codemod/rename 2> /dev/null || true
  done
}

TIMEFORMAT='%3R'
ms() { awk '{ printf "%d\n", $1 * 1000 }'; }
time_runner() {
  reset
  local n=$1
  { time "$bin" apply "$work/manifest.yaml" -j 2 --no-progress --state "$work/state-$n.db" \
      --report-dir "$work/out-$n" 2> /dev/null; } 2>&1 | ms
}
time_script() {
  reset
  { time (printf '%s\n' "$work"/repos/r* | xargs -P 2 -n 1 "$work/one.sh"); } 2>&1 | ms
}
# Both must have done the work: a commit on the branch in every repository.
committed() {
  local n=0
  for d in "$work"/repos/r*; do
    case $d in *.wt) continue ;; esac
    git -C "$d" show codemod/rename:src/mod.rs 2> /dev/null | grep -q 'new_api(' && n=$((n + 1))
  done
  echo "$n"
}

time_runner 0 > /dev/null
[ "$(committed)" -eq "$repos" ] || { echo "runner did not commit in every repository" >&2; exit 1; }
time_script > /dev/null
[ "$(committed)" -eq "$repos" ] || { echo "the script did not commit in every repository" >&2; exit 1; }
rs=(); ss=()
for k in $(seq "$runs"); do
  rs+=("$(time_runner "$k")")
  ss+=("$(time_script)")
done
r=$(printf '%s\n' "${rs[@]}" | median)
s=$(printf '%s\n' "${ss[@]}" | median)
echo "codemod over $repos repositories, -j 2 / xargs -P 2, runs: $runs (median)"
echo "runner apply:        ${r} ms   (runs: ${rs[*]})"
echo "script, xargs -P 2:  ${s} ms   (runs: ${ss[*]})"
awk -v r="$r" -v s="$s" 'BEGIN { printf "ratio runner/script: %.2fx\n", r / s }'

# Where runner's time per item goes, from its event stream (one more run, same shape).
reset
"$bin" apply "$work/manifest.yaml" -j 2 --no-progress --state "$work/state-ev.db" \
  --report-dir "$work/out-ev" --events "$work/events.jsonl" 2> /dev/null
python3 "$root/benches/phases.py" "$work/events.jsonl"
