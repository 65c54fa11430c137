#!/bin/sh
# A publish adapter for runner: pull requests on GitHub through the GitHub CLI (`gh`).
#
#   publish:
#     pr: [manifests/publish/github.sh, pr, "{branch}"]
#     state: [manifests/publish/github.sh, state]
#
# `pr BRANCH` opens the pull request of BRANCH ($RUNNER_PR_TITLE, the body in $RUNNER_PR_BODY,
# which closes the item's issue when it names one), or, when an earlier run opened it
# ($RUNNER_PR_URL), updates its body; it prints the pull request's URL.
#
# `state` prints where the pull request $RUNNER_PR_URL stands as `runner.pr/v1` JSON: `state`
# (open, merged, closed), `review` (approved, changes-requested, none), `checks` (passing,
# failing, pending, none: the checks taken together) and `head` (the commit its branch points
# at on GitHub). It only reads.
set -eu
case ${1:-} in
pr)
    branch=${2:?usage: github.sh pr BRANCH}
    if [ -n "${RUNNER_PR_URL:-}" ]; then
        gh pr edit "$RUNNER_PR_URL" --title "$RUNNER_PR_TITLE" --body-file "$RUNNER_PR_BODY" > /dev/null
        printf '%s\n' "$RUNNER_PR_URL"
    else
        gh pr create --head "$branch" --title "$RUNNER_PR_TITLE" --body-file "$RUNNER_PR_BODY"
    fi
    ;;
state)
    exec gh pr view "$RUNNER_PR_URL" --json state,reviewDecision,headRefOid,statusCheckRollup --jq '
        def verdict: if .__typename == "StatusContext" then (.state // "")
                     elif (.status // "COMPLETED") != "COMPLETED" then "PENDING"
                     else (.conclusion // "") end;
        [(.statusCheckRollup // [])[] | verdict] as $v
        | {schema: "runner.pr/v1",
           state: (.state | ascii_downcase),
           review: (if .reviewDecision == "CHANGES_REQUESTED" then "changes-requested"
                    elif .reviewDecision == "APPROVED" then "approved" else "none" end),
           checks: (if ($v | length) == 0 then "none"
                    elif any($v[]; . == "FAILURE" or . == "ERROR" or . == "CANCELLED" or . == "TIMED_OUT" or . == "ACTION_REQUIRED") then "failing"
                    elif any($v[]; . == "PENDING" or . == "EXPECTED" or . == "QUEUED" or . == "IN_PROGRESS") then "pending"
                    else "passing" end),
           head: .headRefOid}'
    ;;
*)
    echo "usage: github.sh pr BRANCH | github.sh state" >&2
    exit 2
    ;;
esac
