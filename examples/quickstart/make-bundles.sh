#!/bin/sh
# Rebuilds the example repositories shipped as git bundles in repos/.
# Each is a tiny project with a few task files that the manifest discovers as work items.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GIT_AUTHOR_NAME=runner GIT_AUTHOR_EMAIL=runner@example.invalid
export GIT_COMMITTER_NAME=runner GIT_COMMITTER_EMAIL=runner@example.invalid
export GIT_AUTHOR_DATE='2026-01-01T00:00:00Z' GIT_COMMITTER_DATE='2026-01-01T00:00:00Z'
make_repo() {
  name=$1; shift
  d="$tmp/$name"
  git init -q -b main "$d"
  printf '# %s\n\nAn example repository for runner.\n' "$name" > "$d/README.md"
  for task in "$@"; do
    mkdir -p "$d/tasks/$task"
    printf 'Write the file `done/%s.txt` saying what was done.\n' "$task" > "$d/tasks/$task/task.md"
  done
  git -C "$d" add .
  git -C "$d" commit -q -m "initial import"
  git -C "$d" bundle create -q "$here/repos/$name.bundle" --all
}
make_repo greeter add-greeting add-farewell
make_repo calculator add-sum add-product add-docs
make_repo notes tidy-index
