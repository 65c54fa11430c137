#!/bin/sh
# runner worker adapter for Gemini CLI (`gemini`).
#
# Written against Gemini CLI 0.1x as documented in November 2026: `gemini -p PROMPT` runs once
# headless; `-m/--model`; `--approval-mode auto_edit` approves file edits (in the working
# directory, runner's checkout or worktree) while tools that would ask are denied headless;
# `--output-format stream-json` prints one JSON event per line as the agent works (init, message,
# tool_use, tool_result, error), the last a `result` whose `stats` carry `input_tokens` and
# `output_tokens` (`--output-format json` would print one object at the end and nothing before:
# a long run would read as a stalled stream; its `prompt` / `candidates` counts are read too).
# Exit codes: 0 success, 1 general or API error, 42 bad input, 53 turn limit. API errors print
# their status (429 RESOURCE_EXHAUSTED, 503 overloaded).
#
#   worker:
#     run: ["./agents/gemini.sh", "{model}", "{item.task}"]
#
# $1: model (e.g. gemini-2.5-pro); $2: the task, a task file in the repository or its text.
set -u
. "$(dirname "$0")/common.sh"
run_agent gemini -p "$(prompt_text "$2")" -m "$1" --approval-mode auto_edit \
  --output-format stream-json
input=$(json_number input_tokens "$out")
output=$(json_number output_tokens "$out")
write_usage "${input:-$(json_number prompt "$out")}" "${output:-$(json_number candidates "$out")}" ""
# Its messages and tool calls are the work; error and result events speak for the CLI.
work_lines='"type":[[:space:]]*"(message|tool_use|tool_result)"'
finish "$code" "$out"
