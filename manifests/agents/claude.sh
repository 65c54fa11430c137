#!/bin/sh
# runner worker adapter for Claude Code (`claude`).
#
# Written against Claude Code 2.x as documented in November 2026: `claude -p PROMPT` runs once
# headless; `--model`; `--output-format stream-json` (which `-p` takes only with `--verbose`)
# prints one JSON event per line as the agent works, the last one the result object with
# `total_cost_usd` and `usage.input_tokens` / `usage.output_tokens` (`--output-format json`
# would print that object alone, at the end, and nothing before: a long run would read as a
# stalled stream); `--permission-mode acceptEdits` lets it edit
# files in the working directory (runner's checkout or worktree) without asking, while other
# tools that would ask are denied. Exit code 0 on success, 1 on any error; API errors print their
# HTTP status (429 rate limit, 529 overloaded) and type.
#
#   worker:
#     run: ["./agents/claude.sh", "{model}", "{item.task}"]
#   sandbox:                 # what the CLI writes outside the item (runner confines the rest)
#     writable: [~/.claude, ~/.claude.json]
#
# Checked against Claude Code 2.1.332: an API error ends the run with a result event carrying
# `is_error`, `api_error_status` (401, 429, 529, …) and the provider's message in `result`;
# `CLAUDE_CODE_MAX_RETRIES=0` makes it give up at the first error instead of retrying ten times
# over minutes (printing only `api_retry` events meanwhile). It does not show a `Retry-After`.
#
# $1: model (e.g. claude-sonnet-4-5); $2: the task, a task file in the repository or its text (none: $RUNNER_BRIEF, a tracker item's brief).
set -u
. "$(dirname "$0")/common.sh"
# runner retries, rests and falls back; the CLI sends nothing but the work.
export CLAUDE_CODE_MAX_RETRIES="${CLAUDE_CODE_MAX_RETRIES:-0}"
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 \
  DISABLE_AUTOUPDATER=1
run_agent claude -p "$(prompt_text "${2:-}")" --model "$1" --output-format stream-json --verbose \
  --permission-mode acceptEdits
# Tokens and cost from one source: the result's `modelUsage`, per model, side requests (a
# smaller model's) included — its `usage` counts the main loop's tokens only, while
# `total_cost_usd` prices them all. Input tokens count the cached ones read and written.
result=$(grep '"type":[[:space:]]*"result"' "$out" | tail -n 1)
used=$(json_object modelUsage "$result")
if printf '%s' "$used" | grep -q '"inputTokens"'; then
  tokens() { for f in "$@"; do json_sum "$f" "$used"; done | awk '{ s += $1 } END { print s + 0 }'; }
  write_usage "$(tokens inputTokens cacheReadInputTokens cacheCreationInputTokens)" \
    "$(tokens outputTokens)" "$(json_sum costUSD "$used")"
else
  write_usage "$(json_number input_tokens "$out")" "$(json_number output_tokens "$out")" \
    "$(json_number total_cost_usd "$out")"
fi
# A result event can report an error with exit 0 in some versions: trust its `is_error` too (the
# result's only: a tool call that failed along the way carries one of its own).
if [ "$code" -eq 0 ] && grep '"type":[[:space:]]*"result"' "$out" |
  grep -q '"is_error"[[:space:]]*:[[:space:]]*true'; then code=1; fi
# Its messages and tool results are the work; the result event and plain lines speak for the CLI.
work_lines='"type":[[:space:]]*"(assistant|user)"'
# The provider's status and words, as the result event gives them.
status=$(printf '%s' "$result" | grep -o '"api_error_status"[[:space:]]*:[[:space:]]*[0-9]*' |
  sed 's/.*:[[:space:]]*//')
said=
[ -z "$status" ] ||
  said=$(printf '%s' "$result" | sed -n 's/.*"result"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
finish "$code" "$out" "$status" "$said"
