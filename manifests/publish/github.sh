#!/bin/sh
# A publish adapter for runner: pull requests on GitHub through the GitHub CLI (`gh`).
#
#   publish:
#     pr: [manifests/publish/github.sh, pr, "{branch}"]
#     state: [manifests/publish/github.sh, state]
#
# `pr BRANCH` opens the pull request of BRANCH ($RUNNER_PR_TITLE, the body in $RUNNER_PR_BODY,
# which closes the item's issue when it names one), or, when an earlier run opened it
# ($RUNNER_PR_URL), updates its body, and after a review round ($RUNNER_REVIEW_ROUND) says on
# the pull request what the round pushed, or that it changed nothing ($RUNNER_HEAD_MOVED=0);
# it prints the pull request's URL.
#
# `state` prints where the pull request $RUNNER_PR_URL stands as `runner.pr/v1` JSON: `state`
# (open, merged, closed), `review` (approved, changes-requested, none), `checks` (passing,
# failing, pending, none: the checks taken together), `head` (the commit its branch points at on
# GitHub), the `comments` of the reviews, the conversation and the lines of the diff (with file
# and line) oldest first, runner's own left out, and the `failing_checks`. It only reads.
set -eu
case ${1:-} in
pr)
    branch=${2:?usage: github.sh pr BRANCH}
    if [ -n "${RUNNER_PR_URL:-}" ]; then
        gh pr edit "$RUNNER_PR_URL" --title "$RUNNER_PR_TITLE" --body-file "$RUNNER_PR_BODY" > /dev/null
        if [ -n "${RUNNER_REVIEW_ROUND:-}" ]; then
            if [ "${RUNNER_HEAD_MOVED:-1}" = 1 ]; then
                said="runner pushed review round $RUNNER_REVIEW_ROUND: $(git log -1 --format='%h %s' "refs/heads/$branch")"
            else
                said="runner's review round $RUNNER_REVIEW_ROUND made no change to the branch"
            fi
            gh pr comment "$RUNNER_PR_URL" --body "<!-- runner:writeback round=$RUNNER_REVIEW_ROUND -->
$said" > /dev/null
        fi
        printf '%s\n' "$RUNNER_PR_URL"
    else
        gh pr create --head "$branch" --title "$RUNNER_PR_TITLE" --body-file "$RUNNER_PR_BODY"
    fi
    ;;
state)
    # Comments on lines of the diff come from the REST API (every page), one object a line, asked
    # of the host the pull request is on (a GitHub Enterprise one too). The answer is read whole
    # first: a failed call fails the read, never gives no comments.
    url=${RUNNER_PR_URL#https://}
    host=${url%%/*}
    path=${url#*/}
    repo=${path%/pull/*}
    number=${path##*/pull/}
    lines=$(gh api --hostname "$host" "repos/$repo/pulls/$number/comments" --paginate \
        --jq '.[] | {author: (.user.login // "ghost"), at: (.created_at // ""), body: .body, path: .path, line: (.line // .original_line)}')
    RUNNER_LINE_COMMENTS="[$(printf '%s\n' "$lines" | grep -v '^$' | paste -sd, -)]"
    export RUNNER_LINE_COMMENTS
    exec gh pr view "$RUNNER_PR_URL" --json state,reviewDecision,headRefOid,statusCheckRollup,reviews,comments --jq '
        def verdict: if .__typename == "StatusContext" then (.state // "")
                     elif (.status // "COMPLETED") != "COMPLETED" then "PENDING"
                     else (.conclusion // "") end;
        def failed: . == "FAILURE" or . == "ERROR" or . == "CANCELLED" or . == "TIMED_OUT" or . == "ACTION_REQUIRED";
        [(.statusCheckRollup // [])[] | verdict] as $v
        | {schema: "runner.pr/v1",
           state: (.state | ascii_downcase),
           review: (if .reviewDecision == "CHANGES_REQUESTED" then "changes-requested"
                    elif .reviewDecision == "APPROVED" then "approved" else "none" end),
           checks: (if ($v | length) == 0 then "none"
                    elif any($v[]; failed) then "failing"
                    elif any($v[]; . == "PENDING" or . == "EXPECTED" or . == "QUEUED" or . == "IN_PROGRESS") then "pending"
                    else "passing" end),
           head: .headRefOid,
           comments: ([(.reviews // [])[] | select((.body // "") != "")
                       | {author: (.author.login // "ghost"), at: (.submittedAt // ""), body: .body}]
                      + [(.comments // [])[] | select(.body | contains("runner:writeback") | not)
                       | {author: (.author.login // "ghost"), at: (.createdAt // ""), body: .body}]
                      + ($ENV.RUNNER_LINE_COMMENTS | fromjson)
                     | sort_by(.at)),
           failing_checks: [(.statusCheckRollup // [])[] | select(verdict | failed)
                            | {name: (.name // .context // "check"),
                               summary: (.title // .description // .conclusion // ""),
                               url: (.detailsUrl // .targetUrl)}]}'
    ;;
*)
    echo "usage: github.sh pr BRANCH | github.sh state" >&2
    exit 2
    ;;
esac
