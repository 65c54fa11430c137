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
# and line) oldest first, runner's own left out, and the `failing_checks` (with what each check
# run's output says: its title and summary). It only reads; it needs jq.
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
    # Everything is asked of the host the pull request is on (a GitHub Enterprise one too), and
    # each answer is read whole first: a failed call fails the read, never gives "no comments"
    # or "no checks".
    url=${RUNNER_PR_URL#https://}
    host=${url%%/*}
    path=${url#*/}
    repo=${path%/pull/*}
    number=${path##*/pull/}
    view=$(gh pr view "$RUNNER_PR_URL" --json state,reviewDecision,headRefOid,statusCheckRollup,reviews,comments)
    # Comments on lines of the diff come from the REST API (every page), one object a line.
    lines=$(gh api --hostname "$host" "repos/$repo/pulls/$number/comments" --paginate \
        --jq '.[] | {author: (.user.login // "ghost"), at: (.created_at // ""), body: .body, path: .path, line: (.line // .original_line)}')
    # What a failing check run says of itself (its output's title and summary) is not in the
    # pull request's rollup: asked of the head commit's check runs, when one failed.
    runs=
    if printf '%s' "$view" | jq -e '[(.statusCheckRollup // [])[] | select(.__typename == "CheckRun" and .status == "COMPLETED" and (.conclusion == "FAILURE" or .conclusion == "TIMED_OUT" or .conclusion == "CANCELLED" or .conclusion == "ACTION_REQUIRED"))] | length > 0' > /dev/null; then
        head=$(printf '%s' "$view" | jq -r .headRefOid)
        runs=$(gh api --hostname "$host" "repos/$repo/commits/$head/check-runs?per_page=100" --paginate \
            --jq '.check_runs[] | {name: .name, title: (.output.title // ""), summary: (.output.summary // "")}')
    fi
    printf '%s' "$view" | jq \
        --argjson lines "[$(printf '%s\n' "$lines" | grep -v '^$' | paste -sd, -)]" \
        --argjson runs "[$(printf '%s\n' "$runs" | grep -v '^$' | paste -sd, -)]" '
        def verdict: if .__typename == "StatusContext" then (.state // "")
                     elif (.status // "COMPLETED") != "COMPLETED" then "PENDING"
                     else (.conclusion // "") end;
        def failed: . == "FAILURE" or . == "ERROR" or . == "CANCELLED" or . == "TIMED_OUT" or . == "ACTION_REQUIRED";
        # A check run says what failed in its title and summary; a status in its description;
        # where neither says anything, its conclusion, named as such.
        def told($name): ([$runs[] | select(.name == $name) | [.title, .summary] | map(select(. != "")) | join(": ")]
                          | map(select(. != "")) | first) // "";
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
                      + $lines
                     | sort_by(.at)),
           failing_checks: [(.statusCheckRollup // [])[] | select(verdict | failed)
                            | (.name // .context // "check") as $name
                            | verdict as $verdict
                            | {name: $name,
                               summary: ((if .__typename == "StatusContext" then (.description // "") else told($name) end)
                                         | if . == "" then "concluded \($verdict | ascii_downcase), with nothing more said" else . end),
                               url: (.detailsUrl // .targetUrl)}]}'
    ;;
*)
    echo "usage: github.sh pr BRANCH | github.sh state" >&2
    exit 2
    ;;
esac
