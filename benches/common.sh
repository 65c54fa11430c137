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
