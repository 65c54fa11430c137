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
#   sandbox:                 # what the CLI writes outside the item (runner confines the rest)
#     writable: [~/.codex]      # $CODEX_HOME
#
# $1: model (e.g. gpt-5-codex); $2: the task, a task file in the repository or its text (none: $RUNNER_BRIEF, a tracker item's brief).
set -u
. "$(dirname "$0")/common.sh"
# runner retries, rests and falls back, so the CLI's own request and stream retries are off,
# and it sends no analytics. Codex 0.171 refuses to amend its built-in `openai` provider, so the
# adapter declares `runner-openai`, the same API (`OPENAI_BASE_URL`, default
# https://api.openai.com/v1, with the key in `OPENAI_API_KEY`) without retries; a provider of
# the user's own config named in `CODEX_PROVIDER` is used instead, its retries turned off.
if [ -n "${CODEX_PROVIDER:-}" ]; then
  set -- "$1" "${2:-}" -c "model_provider=$CODEX_PROVIDER" \
    -c "model_providers.$CODEX_PROVIDER.request_max_retries=0" \
    -c "model_providers.$CODEX_PROVIDER.stream_max_retries=0"
else
  set -- "$1" "${2:-}" -c model_provider=runner-openai \
    -c "model_providers.runner-openai={name=\"OpenAI\",base_url=\"${OPENAI_BASE_URL:-https://api.openai.com/v1}\",env_key=\"OPENAI_API_KEY\",wire_api=\"responses\",request_max_retries=0,stream_max_retries=0,supports_websockets=false}"
fi
model=$1
task=${2:-}
shift 2
# Under runner's confinement (`RUNNER_SANDBOX` set: the kernel already keeps the item to its
# checkout) codex's own sandbox cannot be made — it needs namespaces and writes to /proc that
# runner's denies — and a command it runs would fail unseen: the commands run in runner's.
sandbox=workspace-write
[ -n "${RUNNER_SANDBOX:-}" ] && sandbox=danger-full-access
run_agent codex exec --model "$model" --sandbox "$sandbox" --json "$@" \
  -c analytics.enabled=false "$(prompt_text "$task")"
write_usage "$(json_number input_tokens "$out")" "$(json_number output_tokens "$out")" ""
# Its items (messages, commands and their output, file changes) are the work; error,
# turn.failed and plain lines speak for the CLI.
work_lines='"type":[[:space:]]*"item\.'
finish "$code" "$out"
