#!/bin/sh
# A notifier for runner: each incident as one message to a Slack incoming webhook (or anything
# that takes Slack's `{"text": …}`: Mattermost, Rocket.Chat, Discord's `/slack` endpoint).
#
#   notify:
#     run: [manifests/notifiers/slack.sh]         # the URL from $SLACK_WEBHOOK_URL
#   env:
#     secrets: [SLACK_WEBHOOK_URL]
#
# Needs curl and jq.
set -eu
url=${1:-${SLACK_WEBHOOK_URL:-}}
[ -n "$url" ] || { echo "slack.sh: no URL (give it as the argument or in SLACK_WEBHOOK_URL)" >&2; exit 2; }
. "$(dirname "$0")/curl-secrets.sh"
jq -c '{text: (
    (if .notice == "resolved" then ":white_check_mark: " else ":rotating_light: " end)
    + "*runner `" + .manifest + "`* on " + .host + ": " + .summary
    + "\n" + .kind + " · seen by " + (.count | tostring) + " run(s) since " + .first_seen
    + (if (.items // []) | length > 0 then "\nitems: " + ((.items // [])[:10] | join(", ")) else "" end)
    + (if .report then "\nreport: " + .report else "" end)
  )}' \
  | secret_curl "$url" -- -fsS --max-time 20 -o /dev/null -H 'Content-Type: application/json' --data-binary @-
