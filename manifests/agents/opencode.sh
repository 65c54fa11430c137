#!/bin/sh
# runner worker adapter for opencode (`opencode`).
#
# Written against opencode 1.x as documented in November 2026: `opencode run PROMPT` runs once
# headless; `--model provider/model`; edits stay in the project (the working directory,
# runner's checkout or worktree): permissions that would ask (outside directories) are refused
# headless. Provider errors print the SDK's error (`AI_APICallError ... Rate limit`, `Overloaded`,
# `AI_LoadAPIKeyError`). It prints no machine-readable cost here, so no usage is written.
#
#   worker:
#     run: ["./agents/opencode.sh", "{model}", "{item.task}"]
#
# $1: model as provider/model (e.g. anthropic/claude-sonnet-4-5); $2: the task, a task file in
# the repository or its text.
set -u
. "$(dirname "$0")/common.sh"
run_agent opencode run --model "$1" "$(prompt_text "$2")"
finish "$code" "$out"
