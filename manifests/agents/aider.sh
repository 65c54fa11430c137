#!/bin/sh
# runner worker adapter for aider (`aider`).
#
# Written against aider 0.86 as documented in November 2026: `--message TEXT` (or
# `--message-file FILE`) does one thing and exits; `--model`; `--yes-always` answers every
# confirmation; `--no-auto-commits` leaves committing to runner; it edits only files of the git
# repository it runs in (runner's checkout or worktree). Provider errors come through litellm
# (`RateLimitError`, `InternalServerError ... Overloaded`, `AuthenticationError`), and a summary
# line `Tokens: 12k sent, 1.5k received. Cost: $0.05 message, $0.05 session.` gives the usage.
#
#   worker:
#     run: ["./agents/aider.sh", "{model}", "{item.task}"]
#   sandbox:                 # what the CLI writes outside the item (runner confines the rest)
#     writable: [~/.aider, ~/.cache]
#
# $1: model (e.g. sonnet, gpt-5); $2: the task, a task file in the repository or its text (none: $RUNNER_BRIEF, a tracker item's brief).
set -u
. "$(dirname "$0")/common.sh"
# What aider keeps of a session stays out of the work: its history files go to the adapter's
# folder, and the repository cache it writes in the working tree (`.aider.tags.cache.*`) is
# removed when it is done — neither `.gitignore` (which aider would otherwise edit, and the
# commit would carry) nor the repository's shared `info/exclude` (which a confined item may not
# write) is touched. No analytics, no update check.
# aider retries a failed request on its own for about a minute (and then exits 0), printing
# `Retrying in N seconds...` after each failure; no option turns that off. The adapter ends it at
# the first, so that the provider failure reaches runner at once, in the words aider printed.
give_up_on='^Retrying in [0-9.]+ seconds'
# The API client's own retries (two, inside each of aider's) off for every model.
printf '%s\n' '- name: aider/extra_params' '  extra_params:' '    max_retries: 0' \
  > "$work/model-settings.yml"
run_agent aider --model "$1" --yes-always --no-auto-commits --no-stream --no-pretty \
  --no-gitignore --input-history-file "$work/input.history" \
  --chat-history-file "$work/chat.history.md" --analytics-disable --no-check-update \
  --model-settings-file "$work/model-settings.yml" \
  --message "$(prompt_text "${2:-}")"
rm -rf ./.aider.tags.cache.*
# "12k" / "1.5k" / "900" tokens, "$0.05 session".
tokens() {
  printf '%s' "$1" | awk '{ n = $1; if (n ~ /k$/) { sub(/k$/, "", n); n = n * 1000 } printf "%d", n }'
}
line=$(grep -E '^Tokens: ' "$out" | tail -1)
if [ -n "$line" ]; then
  sent=$(printf '%s' "$line" | sed -n 's/^Tokens: \([0-9.k]*\) sent.*/\1/p')
  received=$(printf '%s' "$line" | sed -n 's/.*, \([0-9.k]*\) received.*/\1/p')
  cost=$(printf '%s' "$line" | sed -n 's/.*\$\([0-9.]*\) session.*/\1/p')
  write_usage "$(tokens "$sent")" "$(tokens "$received")" "$cost"
fi
# aider exits 0 after an API error it does not retry (a refused key): a `litellm.…Error` line
# after its last reply's `Tokens:` line is a failed run.
if [ "$code" -eq 0 ] && awk '/^litellm\.[A-Za-z]*Error/ { e = NR } /^Tokens: / { t = NR }
  END { exit !(e > t) }' "$out"; then code=1; fi
finish "$code" "$out"
