#!/bin/sh
# A notifier for runner: POST each incident's JSON (`runner schema --incident`) as it is to a
# webhook — a receiver of your own, an incident tool's generic endpoint.
#
#   notify:
#     run: [manifests/notifiers/webhook.sh]       # the URL from $RUNNER_WEBHOOK_URL
#   env:
#     secrets: [RUNNER_WEBHOOK_URL]              # passed to the notifier, redacted everywhere
#
# The URL may be given as the first argument instead. $RUNNER_WEBHOOK_TOKEN, when set, is sent
# as a bearer token. A reply other than 2xx fails the delivery: runner says so and the next run
# sends the notice again.
set -eu
url=${1:-${RUNNER_WEBHOOK_URL:-}}
[ -n "$url" ] || { echo "webhook.sh: no URL (give it as the argument or in RUNNER_WEBHOOK_URL)" >&2; exit 2; }
. "$(dirname "$0")/curl-secrets.sh"
if [ -n "${RUNNER_WEBHOOK_TOKEN:-}" ]; then
  secret_curl "$url" "Authorization: Bearer $RUNNER_WEBHOOK_TOKEN" -- \
    -fsS --max-time 20 -o /dev/null -H 'Content-Type: application/json' --data-binary @-
else
  secret_curl "$url" -- -fsS --max-time 20 -o /dev/null -H 'Content-Type: application/json' --data-binary @-
fi
