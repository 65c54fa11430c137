#!/bin/sh
# The example worker: a stand-in for a coding agent. It reads its task file and writes the
# answer the gates check. $1 is the model, $2 the task file (relative to the repository).
set -eu
model=$1
task=$2
echo "working on $RUNNER_ITEM in $RUNNER_REPO with $model (attempt $RUNNER_ATTEMPT)"
sleep 0.3
mkdir -p done
printf 'Done by %s for task %s:\n%s\n' "$model" "$task" "$(cat "$task")" > "done/$RUNNER_ITEM.txt"
echo "wrote done/$RUNNER_ITEM.txt"
