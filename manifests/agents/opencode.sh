#!/bin/sh
# runner worker adapter for opencode (`opencode`).
#
# Written against opencode 1.18 as documented in November 2026: `opencode run PROMPT` runs once
# headless; `--model provider/model`; edits stay in the project (the working directory,
# runner's checkout or worktree): permissions that would ask (outside directories) are refused
# headless. `--format json` prints one JSON event per line as the agent works (`step_start`,
# `text`, `tool_use`, `step_finish` with the step's `tokens` and `cost`), and an API error ends
# the run with an `error` event carrying the provider's `statusCode` and message; `--title`
# names the session, which spares the request a small model would make to title it.
#
# Retries: opencode retries a request that failed for a retryable reason (429, 5xx, overload)
# up to five times with growing waits, and no setting or variable changes that. With
# `--print-logs` it logs each request it makes (`stream`) and each that failed (`stream error`),
# which also shows it at work while it starts; the adapter ends it at the first failed one, so
# that a provider failure reaches runner within a second.
# It also turns off what opencode fetches besides the work (the models list, updates, sharing,
# language-server downloads).
#
#   worker:
#     run: ["./agents/opencode.sh", "{model}", "{item.task}"]
#   sandbox:                 # what the CLI writes outside the item (runner confines the rest)
#     writable: [~/.config/opencode, ~/.local/share/opencode, ~/.local/state/opencode, ~/.cache/opencode]
#
# $1: model as provider/model (e.g. anthropic/claude-sonnet-4-5); $2: the task, a task file in
# the repository or its text.
set -u
. "$(dirname "$0")/common.sh"
export OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_SHARE=1 \
  OPENCODE_DISABLE_LSP_DOWNLOAD=1
# Its sessions in a database of the run's own: two opencode runs starting together on one
# user's database fail with "database is locked" (a drain runs several at once). The session's
# events are in runner's log all the same.
export OPENCODE_DB="${OPENCODE_DB:-$work/opencode.db}"
give_up_on='message="stream error".*error\.error="[^"]*([Rr]ate.?limit|[Oo]verload|[Tt]oo many|[Qq]uota|[Ee]xhausted|[Uu]navailable|[Ss]erver error|[^0-9]429([^0-9]|$)|[^0-9]5[0-9][0-9]([^0-9]|$))'
run_agent opencode run --format json --print-logs --log-level INFO \
  --title "runner ${RUNNER_REPO:-}/${RUNNER_ITEM:-task}" --model "$1" "$(prompt_text "${2:-}")"
# Tokens and cost: the sum over its steps (cached input counted as input). A cost of 0 is what
# opencode reports for a model it has no price for: left out, so that runner counts it unknown.
steps=$(grep '"type":[[:space:]]*"step_finish"' "$out")
if [ -n "$steps" ]; then
  input=$(for f in input read write; do json_sum "$f" "$steps"; done |
    awk '{ s += $1 } END { print s + 0 }')
  cost=$(json_sum cost "$steps")
  awk -v c="${cost:-0}" 'BEGIN { exit !(c + 0 > 0) }' || cost=
  write_usage "$input" "$(json_sum output "$steps")" "$cost"
fi
# Its steps, text and tool calls are the work; error events and log lines speak for the CLI.
work_lines='"type":[[:space:]]*"(step_start|step_finish|text|tool_use|reasoning)"'
error=$(grep '"type":[[:space:]]*"error"' "$out" | tail -n 1)
status=$(printf '%s' "$error" | grep -o '"statusCode"[[:space:]]*:[[:space:]]*[0-9]*' |
  sed 's/.*:[[:space:]]*//')
said=$(printf '%s' "$error" |
  sed -En 's/.*"message"[[:space:]]*:[[:space:]]*"((\\.|[^"\\])*)".*/\1/p' | head -n 1)
if [ -n "$gave_up" ]; then
  said=$(printf '%s' "$gave_up" | sed -n 's/.*error\.error="\([^"]*\)".*/\1/p')
fi
# An error event is a failed run, whatever the exit code.
[ -z "$error" ] || [ "$code" -ne 0 ] || code=1
finish "$code" "$out" "$status" "$said"
