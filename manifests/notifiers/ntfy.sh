#!/bin/sh
# A notifier for runner: each incident as a push notification through ntfy (ntfy.sh or a server
# of your own).
#
#   notify:
#     run: [manifests/notifiers/ntfy.sh]          # the topic's URL from $NTFY_URL
#   env:
#     secrets: [NTFY_URL, NTFY_TOKEN]             # NTFY_TOKEN: optional access token
#
# Raised incidents go out at high priority, resolved ones at the default. Needs curl and jq.
set -eu
url=${1:-${NTFY_URL:-}}
[ -n "$url" ] || { echo "ntfy.sh: no topic URL (give it as the argument or in NTFY_URL)" >&2; exit 2; }
. "$(dirname "$0")/curl-secrets.sh"
notice=$(cat)
field() { printf '%s' "$notice" | jq -r "$1"; }
if [ "$(field .notice)" = resolved ]; then
  priority=default tags=white_check_mark
else
  priority=high tags=rotating_light
fi
title="runner $(field .manifest): $(field .kind) $(field .notice)"
message="$(field .summary)
seen by $(field .count) run(s) since $(field .first_seen) on $(field .host)"
set -- -fsS --max-time 20 -o /dev/null -H "Title: $title" -H "Priority: $priority" -H "Tags: $tags" --data-binary @-
if [ -n "${NTFY_TOKEN:-}" ]; then
  printf '%s' "$message" | secret_curl "$url" "Authorization: Bearer $NTFY_TOKEN" -- "$@"
else
  printf '%s' "$message" | secret_curl "$url" -- "$@"
fi
