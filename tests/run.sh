#!/usr/bin/env bash
# The test suite, as the README gives it: `cargo test`, then the checks that could not run on
# this machine (an outside tool missing: Chromium, xmllint, junitparser, jsonschema,
# PostgreSQL, ...), each named with why. In CI (`CI` set) such a check fails instead.
# Arguments go to `cargo test`.
set -uo pipefail
cd "$(dirname "$0")/.."
dir="$PWD/target/not-run"
rm -rf "$dir"
mkdir -p "$dir"
RUNNER_NOT_RUN_DIR="$dir" cargo test --locked "$@"
code=$?
shopt -s nullglob
missing=("$dir"/*)
if [ ${#missing[@]} -gt 0 ]; then
  echo
  echo "NOT RUN: ${#missing[@]} check(s) could not run here and are not passes (.ci/run installs what they need):"
  cat "${missing[@]}" | sort | sed 's/^/  /'
else
  echo
  echo "every check ran"
fi
exit $code
