#!/bin/sh
# runner worker adapter for Gemini CLI (`gemini`).
#
# Written against Gemini CLI 0.1x as documented in November 2026: `gemini -p PROMPT` runs once
# headless; `-m/--model`; `--approval-mode auto_edit` approves file edits (in the working
# directory, runner's checkout or worktree) while tools that would ask are denied headless;
# `--output-format json` prints one object with `response`, `stats` (token counts) and `error`.
# Exit codes: 0 success, 1 general or API error, 42 bad input, 53 turn limit. API errors print
# their status (429 RESOURCE_EXHAUSTED, 503 overloaded).
#
#   worker:
#     run: ["./agents/gemini.sh", "{model}", "{item.task}"]
#
# $1: model (e.g. gemini-2.5-pro); $2: the task, a task file in the repository or its text.
set -u
. "$(dirname "$0")/common.sh"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
gemini -p "$(task_text "$2")" -m "$1" --approval-mode auto_edit --output-format json \
  < /dev/null > "$out" 2>&1
code=$?
cat "$out"
write_usage "$(json_number prompt "$out")" "$(json_number candidates "$out")" ""
finish "$code" "$out"
