#!/bin/sh
# runner worker adapter for Gemini CLI (`gemini`).
#
# Written against Gemini CLI 0.61 as documented in November 2026: `gemini -p PROMPT` runs once
# headless; `-m/--model`; `--approval-mode auto_edit` approves file edits (in the working
# directory, runner's checkout or worktree) while tools that would ask are denied headless;
# `--output-format stream-json` prints one JSON event per line as the agent works (init, message,
# tool_use, tool_result), the last a `result` whose `stats` carry `input_tokens` and
# `output_tokens` for the whole run, then per model (`--output-format json` would print one
# object at the end and nothing before: a long run would read as a stalled stream). An API error
# ends the run with a `result` of status `error` and the error's message, its HTTP `status: NNN`
# and, when the provider sent one, `retryDelayMs: N` on stderr. Headless, it refuses a folder it
# has not been told to trust: runner's worktree is trusted (`GEMINI_CLI_TRUST_WORKSPACE`), so a
# repository's own `.gemini/settings.json` applies, as it would for its developers.
#
# Retries: the CLI tries a failing request up to `general.maxAttempts` times (10) with growing
# waits. That setting is read from the user's `~/.gemini/settings.json` (a system settings file
# counts only in a folder no one else can write), and no flag or variable sets it, so the
# adapter gives the CLI a home of its own for the run (`GEMINI_CLI_HOME`): the user's `.gemini`
# folder linked entry by entry (credentials, trusted folders, history), and its settings with
# `general.maxAttempts: 1`, usage statistics and update checks off, and API-key authentication
# when `GEMINI_API_KEY` is set and the settings choose none.
#
#   worker:
#     run: ["./agents/gemini.sh", "{model}", "{item.task}"]
#   sandbox:                 # what the CLI writes outside the item (runner confines the rest)
#     writable: [~/.gemini]
#
# $1: model (e.g. gemini-2.5-pro); $2: the task, a task file in the repository or its text (none: $RUNNER_BRIEF, a tracker item's brief).
set -u
. "$(dirname "$0")/common.sh"
real="${GEMINI_CLI_HOME:-${HOME:-}}/.gemini"
home="$work/home"
mkdir -p "$home/.gemini"
for entry in "$real"/* "$real"/.[!.]*; do
  [ -e "$entry" ] || continue
  [ "${entry##*/}" = settings.json ] || ln -s "$entry" "$home/.gemini/"
done
# The settings are the user's with runner's changes (node runs the CLI, so it is there); settings
# with comments in them are not rewritten (the CLI's own retries then stay on, and the adapter
# says so).
if ! command -v node > /dev/null 2>&1; then
  echo "runner adapter: node is not on PATH: the CLI's own retries stay on"
  [ ! -e "$real/settings.json" ] || ln -s "$real/settings.json" "$home/.gemini/"
elif ! node -e '
  const fs = require("fs");
  const [from, to, key] = process.argv.slice(1);
  let s = {};
  if (fs.existsSync(from)) s = JSON.parse(fs.readFileSync(from, "utf8"));
  const at = (o, k) => (o[k] && typeof o[k] === "object" ? o[k] : (o[k] = {}));
  at(s, "general").maxAttempts = 1;
  at(s, "general").enableAutoUpdate = false;
  at(s, "general").enableAutoUpdateNotification = false;
  at(s, "privacy").usageStatisticsEnabled = false;
  const auth = at(at(s, "security"), "auth");
  if (!auth.selectedType && key) auth.selectedType = "gemini-api-key";
  fs.writeFileSync(to, JSON.stringify(s, null, 2));
' "$real/settings.json" "$home/.gemini/settings.json" "${GEMINI_API_KEY:-}" 2> /dev/null; then
  echo "runner adapter: $real/settings.json is not plain JSON: the CLI's own retries stay on"
  rm -f "$home/.gemini/settings.json"
  [ ! -e "$real/settings.json" ] || ln -s "$real/settings.json" "$home/.gemini/"
fi
export GEMINI_CLI_HOME="$home" GEMINI_CLI_TRUST_WORKSPACE=true GEMINI_TELEMETRY_ENABLED=false
# The error reports it writes to the temporary folder (the request, the prompt in it) go with the
# adapter's own folder.
mkdir -p "$work/tmp"
TMPDIR="$work/tmp" run_agent gemini -p "$(prompt_text "${2:-}")" -m "$1" --approval-mode auto_edit \
  --output-format stream-json
# The whole run's tokens: the result's first counts (those after them are per model).
result=$(grep '"type":[[:space:]]*"result"' "$out" | tail -n 1)
first() {
  printf '%s' "$result" | grep -o "\"$1\"[[:space:]]*:[[:space:]]*[0-9]*" | head -n 1 |
    sed 's/.*:[[:space:]]*//'
}
input=$(first input_tokens)
output=$(first output_tokens)
# Older versions counted `prompt` and `candidates` tokens per model.
write_usage "${input:-$(json_number prompt "$out")}" "${output:-$(json_number candidates "$out")}" ""
# A result of status `error` is a failed run, whatever the exit code.
if [ "$code" -eq 0 ] && printf '%s' "$result" | grep -q '"status"[[:space:]]*:[[:space:]]*"error"'; then
  code=1
fi
# Its messages and tool calls are the work; error and result events speak for the CLI.
work_lines='"type":[[:space:]]*"(message|tool_use|tool_result)"'
status=$(grep -Ev "$work_lines" "$out" 2> /dev/null | grep -Eo '^[[:space:]]*status: [0-9]{3}' |
  tail -n 1 | grep -Eo '[0-9]{3}')
said=
if [ -n "$status" ]; then
  said=$(printf '%s' "$result" |
    sed -En 's/.*"message"[[:space:]]*:[[:space:]]*"((\\.|[^"\\])*)".*/\1/p' |
    sed 's/\\n/ /g; s/\\"/"/g')
  # The wait the provider asked for, for runner's back-off.
  delay=$(grep -Eo 'retryDelayMs: [0-9]+' "$out" | tail -n 1 | grep -Eo '[0-9]+')
  [ -z "$delay" ] || said="retry after ${delay}ms; $said"
fi
finish "$code" "$out" "$status" "$said"
