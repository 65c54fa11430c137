#!/bin/sh
# A publish adapter for runner: merge requests on GitLab through the GitLab CLI (`glab api`) and
# `jq`.
#
#   publish:
#     pr: [manifests/publish/gitlab.sh, pr, group/project, "{branch}"]
#     state: [manifests/publish/gitlab.sh, state, group/project]
#
# `pr PROJECT BRANCH` opens the merge request of BRANCH into the project's default branch
# ($RUNNER_PR_TITLE, the description in $RUNNER_PR_BODY, which closes the item's issue when it
# names one), or, when an earlier run opened it ($RUNNER_PR_URL), updates its description, and
# after a review round ($RUNNER_REVIEW_ROUND) says on it what the round pushed, or that it
# changed nothing ($RUNNER_HEAD_MOVED=0); it prints the merge request's URL.
#
# `state PROJECT` prints where the merge request $RUNNER_PR_URL stands as `runner.pr/v1` JSON:
# `state` (open, merged, closed), `review` (changes-requested when a reviewer asked for changes,
# approved once approved), `checks` (from its head pipeline), `head`, the notes people wrote
# oldest first (with file and line for those on the diff; runner's own left out) and the
# pipeline as a failing check. It only reads.
set -eu
usage() {
    echo "usage: gitlab.sh pr PROJECT BRANCH | gitlab.sh state PROJECT" >&2
    exit 2
}
[ $# -ge 2 ] || usage
what=$1
project=$(printf '%s' "$2" | jq -sRr @uri)
iid() { printf '%s' "${RUNNER_PR_URL##*/}"; }
case $what in
pr)
    branch=${3:?usage: gitlab.sh pr PROJECT BRANCH}
    description=$(cat "$RUNNER_PR_BODY")
    if [ -n "${RUNNER_PR_URL:-}" ]; then
        glab api -X PUT "projects/$project/merge_requests/$(iid)" \
            -f "title=$RUNNER_PR_TITLE" -f "description=$description" > /dev/null
        if [ -n "${RUNNER_REVIEW_ROUND:-}" ]; then
            if [ "${RUNNER_HEAD_MOVED:-1}" = 1 ]; then
                said="runner pushed review round $RUNNER_REVIEW_ROUND: $(git log -1 --format='%h %s' "refs/heads/$branch")"
            else
                said="runner's review round $RUNNER_REVIEW_ROUND made no change to the branch"
            fi
            glab api -X POST "projects/$project/merge_requests/$(iid)/notes" -f "body=<!-- runner:writeback round=$RUNNER_REVIEW_ROUND -->
$said" > /dev/null
        fi
        printf '%s\n' "$RUNNER_PR_URL"
    else
        # Each answer read whole before it is parsed: a failed call fails, never prints `null`.
        found=$(glab api "projects/$project")
        target=$(printf '%s' "$found" | jq -er '.default_branch')
        created=$(glab api -X POST "projects/$project/merge_requests" -f "source_branch=$branch" \
            -f "target_branch=$target" -f "title=$RUNNER_PR_TITLE" -f "description=$description")
        printf '%s' "$created" | jq -er '.web_url'
    fi
    ;;
state)
    mr=$(glab api "projects/$project/merge_requests/$(iid)")
    pages=$(glab api --paginate "projects/$project/merge_requests/$(iid)/notes?sort=asc&order_by=created_at&per_page=100")
    notes=$(printf '%s' "$pages" | jq -s 'add // []')
    printf '%s' "$mr" | jq --argjson notes "$notes" '
        {schema: "runner.pr/v1",
         # A state or pipeline status not known here is an error, never taken for another.
         state: ({"opened": "open", "merged": "merged", "closed": "closed", "locked": "closed"}[.state]
                 // error("unknown merge request state `\(.state)`")),
         review: (if .detailed_merge_status == "requested_changes" then "changes-requested"
                  elif (.approved // false) then "approved" else "none" end),
         checks: (if .head_pipeline == null then "none"
                  else ({"success": "passing", "failed": "failing", "canceled": "failing",
                         "running": "pending", "pending": "pending", "created": "pending",
                         "waiting_for_resource": "pending", "preparing": "pending",
                         "scheduled": "pending", "manual": "pending", "skipped": "none"}[.head_pipeline.status]
                        // error("unknown pipeline status `\(.head_pipeline.status)`")) end),
         head: .sha,
         comments: [$notes[] | select((.system | not) and (.body | contains("runner:writeback") | not))
                    | {author: .author.username, at: .created_at, body: .body}
                      + (if .position then {path: .position.new_path, line: .position.new_line} else {} end)],
         failing_checks: (if (.head_pipeline.status // "") == "failed"
                          then [{name: "pipeline", summary: "the head pipeline failed", url: .head_pipeline.web_url}]
                          else [] end)}'
    ;;
*) usage ;;
esac
