# Shared by the benchmark scripts: build runner, a scratch folder removed on exit, a git
# identity for generated repositories, and timing helpers.
# Sets: root, bin, work.
root=$(cd "$(dirname "$0")/.." && pwd)
# RUNNER_BIN: measure that binary instead (another build, side by side with this one).
if [ -n "${RUNNER_BIN:-}" ]; then
  bin=$RUNNER_BIN
else
  cargo build --release --quiet --manifest-path "$root/Cargo.toml"
  bin="$root/target/release/runner"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid

# Nanoseconds since the epoch.
now() { date +%s%N; }
# The median of the numbers on stdin.
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# A manifest in folder $1 of $2 `true` items over $3 repositories (generated in $1/repos), run
# two at once; any further arguments are more top-level manifest lines. Each repository holds its
# share of the items as committed task files the manifest discovers (a manifest listing 100,000
# items would pass the manifest's 1 MiB limit).
task_manifest() {
  local dir=$1 per=$(( $2 / $3 )) repos=$3
  shift 3
  mkdir -p "$dir/repos"
  {
    printf '%s\n' "version: 1" "name: tasks" "capacity: {workers: 2}" "repositories:" \
      '  - glob: "repos/*"' "worker:" '  run: ["true"]' "discover:" '  - glob: "tasks/*.md"' \
      '    id: "{match.stem}"'
    [ $# -eq 0 ] || printf '%s\n' "$@"
  } > "$dir/manifest.yaml"
  for r in $(seq -f '%05g' 1 "$repos"); do
    local d="$dir/repos/r$r"
    mkdir -p "$d/tasks"
    (cd "$d/tasks" && seq -f 't%g.md' 1 "$per" | xargs touch)
    git init -q -b main "$d"
    git -C "$d" add -A
    git -C "$d" commit -q -m init
  done
}
