#!/bin/sh
# runner worker adapter for the OpenAI Codex CLI (`codex`).
#
# Written against codex-cli 0.5x as documented in November 2026: `codex exec PROMPT` runs once
# headless; `--model`; `--sandbox workspace-write` lets it write only inside the working
# directory (runner's checkout or worktree); `--json` prints JSONL events, the last
# `turn.completed` carrying `usage.input_tokens` / `usage.output_tokens`; `--skip-git-repo-check`
# is not needed (runner runs it in a git checkout). Stdin is closed so that it never waits for
# piped input. Exit code 0 on success, non-zero on error; provider errors print their HTTP
# status (429, 5xx) or "exceeded your current quota".
#
#   worker:
#     run: ["./agents/codex.sh", "{model}", "{item.task}"]
#
# $1: model (e.g. gpt-5-codex); $2: the task, a task file in the repository or its text.
set -u
. "$(dirname "$0")/common.sh"
run_agent codex exec --model "$1" --sandbox workspace-write --json "$(task_text "$2")"
write_usage "$(json_number input_tokens "$out")" "$(json_number output_tokens "$out")" ""
# Its items (messages, commands and their output, file changes) are the work; error,
# turn.failed and plain lines speak for the CLI.
work_lines='"type":[[:space:]]*"item\.'
finish "$code" "$out"
