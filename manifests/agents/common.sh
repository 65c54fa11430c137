# Shared by runner's agent adapters (sourced, not run). POSIX sh; needs only grep, sed, tail, tee,
# mkfifo and mktemp.
#
# An adapter runs one agent CLI headless on one task, passes on what the agent prints as it
# prints it, writes what the agent reported it used to $RUNNER_USAGE, and exits so that runner
# can tell the provider's failures from the agent's:
#   0   the agent finished
#   75  the provider failed (rate limit, overload, quota, authentication): runner rests and
#       retries, then moves along the model chain (EX_TEMPFAIL, runner's default provider code)
#   any other non-zero code: the agent itself failed (runner counts an attempt)

# A folder for the agent's output, removed when the adapter exits: normally, or ended by a
# signal (runner's SIGTERM at a timeout or a cancel), each signal keeping its conventional exit
# code. An adapter killed outright (SIGKILL, as when runner itself is killed) runs no clean-up:
# the next one removes the folders whose adapter is gone, by the pid each holds.
for old in "${TMPDIR:-/tmp}"/runner-agent.*; do
  [ -f "$old/pid" ] || continue
  kill -0 "$(cat "$old/pid")" 2> /dev/null || rm -rf "$old" 2> /dev/null
done
work=$(mktemp -d "${TMPDIR:-/tmp}/runner-agent.XXXXXX") ||
  { echo "runner adapter: cannot make a temporary folder" >&2; exit 1; }
echo $$ > "$work/pid"
out="$work/output"
trap 'rm -rf "$work"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# Run the agent, "$@", with stdin closed: what it prints (stdout and stderr) goes out as it comes
# — into runner's log, live, so that a stalled stream can be told from a working agent and a
# run cut short keeps what it printed — and into $out, for the usage and the verdict read from
# it afterwards. Sets $code to the agent's exit code. The copy ends with the agent: a process the
# agent left behind that still holds its output is not waited for past 2 s (runner ends such
# processes once the adapter has exited).
run_agent() {
  mkfifo "$work/pipe"
  tee "$out" < "$work/pipe" &
  copier=$!
  # In a subshell, so that the adapter's own output stays runner's: a shell reports a command
  # ended by a signal on its stderr, and the copy may be gone by then.
  ("$@" < /dev/null > "$work/pipe" 2>&1)
  code=$?
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
}

# The task: the contents of $1 when it names a readable file (a task file of the item), else $1
# itself.
task_text() {
  if [ -f "$1" ] && [ -r "$1" ]; then cat "$1"; else printf '%s\n' "$1"; fi
}

# The last value of JSON number field "$1" in file $2 (flat matching: good for the one-object
# and one-event-per-line outputs agents print; one pass, however long the output).
json_number() {
  grep -o "\"$1\"[[:space:]]*:[[:space:]]*[0-9][0-9.eE+-]*" "$2" | tail -n 1 |
    sed 's/.*:[[:space:]]*//'
}

# Write $RUNNER_USAGE from input tokens $1, output tokens $2 and cost $3 (each may be empty).
write_usage() {
  [ -n "${RUNNER_USAGE:-}" ] || return 0
  [ -n "$1$2$3" ] || return 0
  printf '{"input_tokens": %s, "output_tokens": %s, "cost_usd": %s}\n' \
    "${1:-0}" "${2:-0}" "${3:-0}" > "$RUNNER_USAGE"
}

# The lines of the output that carry the agent's own work — its messages, what its tools read
# and ran — as an extended regular expression, set by an adapter whose CLI prints events: a
# "429" or a "rate limit" there is the task's, not the provider's, so `finish` reads past them.
work_lines=

# Exit as runner should read it: agent exit code $1, agent output in file $2.
finish() {
  code=$1
  [ "$code" -eq 0 ] && exit 0
  if [ -n "$work_lines" ]; then
    tail=$(grep -Ev "$work_lines" "$2" | tail -c 4096)
  else
    tail=$(tail -c 4096 "$2")
  fi
  kind=
  if printf '%s' "$tail" | grep -Eiq 'rate.?limit|too many requests|\b429\b'; then
    kind="rate limit"
  elif printf '%s' "$tail" | grep -Eiq 'overloaded|\b529\b|\b503\b|service unavailable|server (is )?busy|try again later'; then
    kind="overload"
  elif printf '%s' "$tail" | grep -Eiq 'quota|resource.?exhausted|credit balance|billing|insufficient.?funds'; then
    kind="quota"
  elif printf '%s' "$tail" | grep -Eiq '\b401\b|\b403\b|unauthori[sz]ed|invalid.{0,20}(api.?key|x-api-key)|api key (is )?(missing|not valid)|authenticat|not logged in|/login'; then
    kind="authentication"
  fi
  if [ -n "$kind" ]; then
    echo "runner adapter: the provider failed ($kind)"
    exit 75
  fi
  # The agent's own failure; 75 is kept for the provider.
  [ "$code" -eq 75 ] && exit 1
  exit "$code"
}
