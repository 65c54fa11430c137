# Shared by runner's agent adapters (sourced, not run). POSIX sh; needs only grep, sed, tail, tee,
# mkfifo and mktemp.
#
# An adapter runs one agent CLI headless on one task, passes on what the agent prints as it
# prints it, writes what the agent reported it used to $RUNNER_USAGE, and exits so that runner
# can tell the provider's failures from the agent's:
#   0   the agent finished
#   75  the provider failed for a while (rate limit, overload, quota): runner rests and
#       retries, then moves along the model chain (EX_TEMPFAIL, runner's default provider code)
#   77  the provider refused the key (authentication, or billing): runner drops the model for
#       the whole run at once (EX_NOPERM, runner's default refused code)
#   any other non-zero code: the agent itself failed (runner counts an attempt)
#
# runner owns retries and waits: each adapter turns its CLI's own API retries off, so that a
# provider failure reaches runner in seconds rather than after the CLI's minutes of back-off,
# and turns off what the CLI sends besides the work (telemetry, update checks, error reports),
# which an unattended drain over private code does not want.

# A folder for the agent's output, removed when the adapter exits: normally, or ended by a
# signal (runner's SIGTERM at a timeout or a cancel), each signal keeping its conventional exit
# code. An adapter killed outright (SIGKILL, as when runner itself is killed) runs no clean-up:
# the next one removes the folders whose adapter is gone, by the pid each holds.
# The pid file is written whole (renamed into place), so that an adapter starting alongside
# never reads it empty and takes a live adapter's folder for a dead one's.
for old in "${TMPDIR:-/tmp}"/runner-agent.*; do
  [ -f "$old/pid" ] || continue
  pid=$(cat "$old/pid" 2> /dev/null)
  [ -n "$pid" ] || continue
  kill -0 "$pid" 2> /dev/null || rm -rf "$old" 2> /dev/null
done
work=$(mktemp -d "${TMPDIR:-/tmp}/runner-agent.XXXXXX") ||
  { echo "runner adapter: cannot make a temporary folder" >&2; exit 1; }
echo $$ > "$work/pid.new" && mv "$work/pid.new" "$work/pid"
out="$work/output"
trap 'rm -rf "$work"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# An extended regular expression an adapter sets when its CLI's own retries cannot be turned
# off: the agent is ended at the first line of its output that matches (its first provider
# failure), which is then in $gave_up, so that runner, not the CLI, decides what follows.
give_up_on=
gave_up=

# Run the agent, "$@", with stdin closed: what it prints (stdout and stderr) goes out as it comes
# — into runner's log, live, so that a stalled stream can be told from a working agent and a
# run cut short keeps what it printed — and into $out, for the usage and the verdict read from
# it afterwards. Sets $code to the agent's exit code. The copy ends with the agent: a process the
# agent left behind that still holds its output is not waited for past 2 s (runner ends such
# processes once the adapter has exited).
#
# With $give_up_on set, each line is also matched as it arrives, and the agent is ended at the
# first that matches — before a CLI that retries at once (aider's first retry is 0.25 s after
# the failure) has sent its second request; that line is then in $gave_up and the run is a
# failed one whatever the CLI's exit code.
run_agent() {
  mkfifo "$work/pipe"
  if [ -n "$give_up_on" ]; then
    mkfifo "$work/scan"
    (
      grep -E --line-buffered -e "$give_up_on" < "$work/scan" 2> /dev/null | {
        if IFS= read -r first; then
          printf '%s\n' "$first" > "$work/gave_up"
          until [ -s "$work/agent" ]; do sleep 0.01; done
          kill "$(cat "$work/agent")" 2> /dev/null
        fi
        cat > /dev/null
      }
    ) > /dev/null 2>&1 &
    scanner=$!
    tee "$out" "$work/scan" < "$work/pipe" &
    copier=$!
    "$@" < /dev/null > "$work/pipe" 2>&1 &
    echo $! > "$work/agent.new" && mv "$work/agent.new" "$work/agent"
    wait $!
    code=$?
  else
    tee "$out" < "$work/pipe" &
    copier=$!
    # In a subshell, so that the adapter's own output stays runner's: a shell reports a
    # command ended by a signal on its stderr, and the copy may be gone by then.
    ("$@" < /dev/null > "$work/pipe" 2>&1)
    code=$?
  fi
  # The copy ends at the agent's last byte, or after 2 s when something still holds the output.
  (
    trap 'kill "$nap" 2> /dev/null; exit 0' TERM
    sleep 2 &
    nap=$!
    wait "$nap" && kill "$copier"
  ) > /dev/null 2>&1 &
  watch=$!
  wait "$copier"
  kill "$watch" 2> /dev/null
  if [ -n "$give_up_on" ]; then
    wait "$scanner"
    gave_up=$(cat "$work/gave_up" 2> /dev/null)
    # Ended for a provider failure, whatever the CLI would have made of it.
    [ -z "$gave_up" ] || [ "$code" -ne 0 ] || code=1
  fi
}

# The task: the contents of $1 when it names a readable file (a task file of the item), else $1
# itself; with no task given, the brief of a tracker's item ($RUNNER_BRIEF: the issue's title,
# body and comments, oldest first).
task_text() {
  if [ -z "$1" ] && [ -n "${RUNNER_BRIEF:-}" ] && [ -r "$RUNNER_BRIEF" ]; then
    cat "$RUNNER_BRIEF"
  elif [ -f "$1" ] && [ -r "$1" ]; then cat "$1"; else printf '%s\n' "$1"; fi
}

# The prompt: the task ($1, as task_text reads it) and, on a later attempt, what runner recorded
# of the one before ($RUNNER_FEEDBACK: which step failed, then the end of its output), after the
# task and clearly marked off from it.
prompt_text() {
  task_text "$1"
  if [ -n "${RUNNER_FEEDBACK:-}" ] && [ -r "$RUNNER_FEEDBACK" ]; then
    printf '\n---\nAn earlier attempt at this task did not pass. What runner recorded of it is below, between the markers; fix what it shows, then do the task above.\n<runner-feedback>\n'
    cat "$RUNNER_FEEDBACK"
    printf '</runner-feedback>\n'
  fi
}

# The last value of JSON number field "$1" in file $2 (flat matching: good for the one-object
# and one-event-per-line outputs agents print; one pass, however long the output).
json_number() {
  grep -o "\"$1\"[[:space:]]*:[[:space:]]*[0-9][0-9.eE+-]*" "$2" | tail -n 1 |
    sed 's/.*:[[:space:]]*//'
}

# The sum of the values of JSON number field "$1" in text $2 (flat matching, as json_number), or
# nothing when the field is not there.
json_sum() {
  printf '%s\n' "$2" | grep -o "\"$1\"[[:space:]]*:[[:space:]]*[0-9][0-9.eE+-]*" |
    sed 's/.*:[[:space:]]*//' | awk '{ s += $1; n++ } END { if (n) printf "%.10g\n", s }'
}

# The object value of the first JSON field "$1" in text $2, its braces balanced (braces and
# quotes inside its strings skipped), or nothing.
json_object() {
  printf '%s\n' "$2" | awk -v key="\"$1\"" '
    {
      at = index($0, key)
      if (!at) next
      rest = substr($0, at + length(key))
      sub(/^[[:space:]]*:[[:space:]]*/, "", rest)
      if (substr(rest, 1, 1) != "{") exit
      depth = 0; quoted = 0
      for (i = 1; i <= length(rest); i++) {
        c = substr(rest, i, 1)
        if (quoted) { if (c == "\\") i++; else if (c == "\"") quoted = 0; continue }
        if (c == "\"") quoted = 1
        else if (c == "{") depth++
        else if (c == "}" && --depth == 0) { print substr(rest, 1, i); exit }
      }
      exit
    }'
}

# Write $RUNNER_USAGE from input tokens $1, output tokens $2 and cost $3 (each may be empty: a
# cost the CLI did not print is left out, and runner counts it unknown, never zero).
write_usage() {
  [ -n "${RUNNER_USAGE:-}" ] || return 0
  [ -n "$1$2$3" ] || return 0
  if [ -n "$3" ]; then
    printf '{"input_tokens": %s, "output_tokens": %s, "cost_usd": %s}\n' \
      "${1:-0}" "${2:-0}" "$3" > "$RUNNER_USAGE"
  else
    printf '{"input_tokens": %s, "output_tokens": %s}\n' "${1:-0}" "${2:-0}" > "$RUNNER_USAGE"
  fi
}

# The lines of the output that carry the agent's own work — its messages, what its tools read
# and ran — as an extended regular expression, set by an adapter whose CLI prints events: a
# "429" or a "rate limit" there is the task's, not the provider's, so `finish` reads past them.
work_lines=

# Exit as runner should read it: agent exit code $1, agent output in file $2; $3 and $4, when the
# adapter read them from the CLI's structured output, the provider's HTTP status and message.
finish() {
  code=$1
  [ "$code" -eq 0 ] && exit 0
  # A request runner's proxy refused (a host `sandbox.network` does not list: an update check,
  # a price list) is not the provider's answer, whatever status it carries.
  proxied='proxy|tunnel connection|sandbox\.network'
  if [ -n "$work_lines" ]; then
    tail=$(grep -Ev "$work_lines" "$2" | grep -Eiv "$proxied" | tail -c 4096)
  else
    tail=$(grep -Eiv "$proxied" "$2" | tail -c 4096)
  fi
  status=${3:-}
  said=${4:-}
  billing='credit balance|billing|insufficient.?funds|insufficient_quota|exceeded your current quota|payment required|\b402\b'
  auth='\b401\b|\b403\b|unauthori[sz]ed|forbidden|invalid.{0,20}(api.?key|x-api-key)|api key (is )?(missing|not valid|expired)|authenticat|not logged in|/login'
  limit='rate.?limit|too many requests|\b429\b|quota|resource.?exhausted'
  busy='overloaded|\b529\b|\b503\b|service unavailable|server (is )?busy|try again later'
  kind=
  case "$status" in
    401 | 403) kind=authentication ;;
    402) kind=billing ;;
    429) kind="rate limit" ;;
    500 | 502 | 503 | 504 | 529) kind=overload ;;
  esac
  # The provider's words, from its status line when the adapter has it; else from the message
  # the adapter read from the CLI's error, which speaks before any other line (a log line of a
  # side request the CLI made, refused with a 403, is not the provider refusing the key); else
  # the line of the output that names the failure.
  for text in "$said" "$tail"; do
    for k in billing auth limit busy; do
      [ -z "$kind" ] || break 2
      eval "pattern=\$$k"
      line=$(printf '%s\n' "$text" | grep -Ei "$pattern" | tail -n 1)
      [ -n "$line" ] || continue
      case $k in
        billing) kind=billing ;;
        auth) kind=authentication ;;
        limit) kind="rate limit" ;;
        busy) kind=overload ;;
      esac
      [ -n "$said" ] || said=$line
    done
  done
  said=$(printf '%s' "$said" | tr -s '\n\t' '  ' | cut -c1-240)
  case "$kind" in
    authentication | billing)
      echo "runner adapter: the provider refused the key ($kind): ${said:-no message}"
      exit 77
      ;;
    "rate limit" | overload)
      echo "runner adapter: the provider failed ($kind)${said:+: $said}"
      exit 75
      ;;
  esac
  # The agent's own failure; 75 and 77 are kept for the provider.
  case "$code" in 75 | 77) exit 1 ;; esac
  exit "$code"
}
