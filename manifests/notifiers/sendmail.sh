#!/bin/sh
# A notifier for runner: each incident as a mail, handed to the host's `sendmail` (Postfix,
# Exim, msmtp, OpenSMTPD all provide one).
#
#   notify:
#     run: [manifests/notifiers/sendmail.sh, oncall@example.com]
#
# $RUNNER_MAIL_FROM sets the sender (default: the mail system's). $SENDMAIL names another
# program taking `-t`. Needs jq.
set -eu
to=${1:?sendmail.sh: give the address to write to}
notice=$(cat)
field() { printf '%s' "$notice" | jq -r "$1"; }
subject="[runner] $(field .manifest): $(field .notice): $(field .summary)"
# One line, and short: a subject is no place for a stack of text.
subject=$(printf '%s' "$subject" | tr '\r\n' '  ' | cut -c1-200)
{
  [ -z "${RUNNER_MAIL_FROM:-}" ] || printf 'From: %s\n' "$RUNNER_MAIL_FROM"
  printf 'To: %s\nSubject: %s\nContent-Type: text/plain; charset=utf-8\n\n' "$to" "$subject"
  printf '%s\n\n' "$(field .summary)"
  printf '%s' "$notice" | jq -r '
    "kind:       " + .kind,
    "cause:      " + .cause,
    "manifest:   " + .manifest + " (" + .manifest_path + ")",
    "host:       " + .host,
    "first seen: " + .first_seen,
    "last seen:  " + .last_seen + " (" + (.count | tostring) + " run(s))",
    (if .resolved_at then "resolved:   " + .resolved_at else empty end),
    (if (.repositories // []) | length > 0 then "repos:      " + ((.repositories // []) | join(", ")) else empty end),
    (if (.items // []) | length > 0 then "items:      " + ((.items // []) | join(", ")) else empty end),
    (if .report then "report:     " + .report else empty end)'
} | "${SENDMAIL:-sendmail}" -t
