#!/bin/sh
# A tracker source for runner: GitHub issues through the GitHub CLI (`gh`).
#
#   sources:
#     - name: issue
#       run: [manifests/sources/github.sh, list, owner/repo, runner]
#       writeback: [manifests/sources/github.sh, writeback, owner/repo]
#       check: [manifests/sources/github.sh, check, owner/repo]     # for `runner doctor`
#       repo: api                       # the declared repository the issues are for
#       branch: "runner/{item}"
#   env: {pass: [PATH, HOME, GH_TOKEN]}  # or `gh auth login` beforehand
#
# A repository is `OWNER/REPO` on the host `gh` works with (github.com, or $GH_HOST), or
# `HOST/OWNER/REPO` on a GitHub Enterprise host: every call, the REST ones too, goes to that host.
# An Enterprise host needs GH_HOST (or `gh auth login --hostname HOST`) and GH_ENTERPRISE_TOKEN.
#
# `list OWNER/REPO [LABEL]` prints the open issues carrying LABEL (default `runner`) as
# `runner.items/v1` JSON (`runner schema --items`), every page of them (`gh` follows the pages up
# to `--limit`), comments oldest first as GitHub gives them, every one of them (an issue with
# more than 100 has the rest read page by page; a failed page fails the read). It only reads.
#
# `writeback OWNER/REPO` tells issue $RUNNER_SOURCE_ID what became of its item: it sets the label
# $RUNNER_WRITEBACK_LABEL, takes off those of $RUNNER_WRITEBACK_UNLABEL the issue has, and posts
# the comment in $RUNNER_WRITEBACK_BODY (when there is one) unless a comment already carries its
# key ($RUNNER_WRITEBACK_KEY): a run that died after posting and before runner recorded it does
# not post it again. The labels must exist in the repository (`gh label create runner:working`,
# and runner:done, runner:halted, runner:held).
#
# `check OWNER/REPO [LABEL]` (what `runner doctor` runs) says whether gh is installed, logged in
# to the repository's host, and whether the repository has LABEL and the labels runner sets;
# non-zero with what is missing and how to make it. It only reads.
set -eu
usage() {
    echo "usage: github.sh list OWNER/REPO [LABEL] | github.sh writeback OWNER/REPO | github.sh check OWNER/REPO [LABEL]" >&2
    exit 2
}
[ $# -ge 2 ] || usage
what=$1
repo=$2
# The host, for `gh api`: the one the repository names, else gh's own.
case $repo in
*/*/*) host=${repo%%/*} path=${repo#*/} ;;
*) host=${GH_HOST:-github.com} path=$repo ;;
esac
case $what in
list)
    label=${3:-runner}
    limit=${RUNNER_SOURCE_LIMIT:-10000}
    listed=$(gh issue list --repo "$repo" --label "$label" --state open --limit "$limit" \
        --json number,title,body,url,labels,comments)
    # `gh issue list` gives each issue's first 100 comments and no more: an issue with 100 has
    # its comments read again, every page of them (REST). A page that fails fails the read:
    # no item is worked on a cut brief.
    more='{}'
    for n in $(printf '%s' "$listed" | jq -r '.[] | select((.comments | length) >= 100) | .number'); do
        all=$(gh api --hostname "$host" --paginate "repos/$path/issues/$n/comments?per_page=100" \
            --jq '.[] | {author: (.user.login // "ghost"), at: .created_at, body: .body}')
        more=$(printf '%s\n' "$all" | jq -s --arg n "$n" --argjson more "$more" '$more + {($n): .}')
    done
    printf '%s' "$listed" | jq --argjson more "$more" '
        {schema: "runner.items/v1",
         items: [.[] | {id: .number, title: .title, body: (.body // ""), url: .url,
                        labels: [.labels[].name],
                        comments: ($more[.number | tostring]
                                   // [.comments[] | {author: (.author.login // "ghost"), at: .createdAt, body: .body}])}]}'
    ;;
writeback)
    issue=$RUNNER_SOURCE_ID
    # What the issue carries now: its labels, and the keys of runner's comments on it.
    has=$(gh issue view "$issue" --repo "$repo" --json labels --jq '.labels[].name')
    set -- --add-label "$RUNNER_WRITEBACK_LABEL"
    old_ifs=$IFS
    IFS=,
    for l in $RUNNER_WRITEBACK_UNLABEL; do
        if printf '%s\n' "$has" | grep -qxF "$l"; then
            set -- "$@" --remove-label "$l"
        fi
    done
    IFS=$old_ifs
    gh issue edit "$issue" --repo "$repo" "$@" > /dev/null
    if [ -n "${RUNNER_WRITEBACK_BODY:-}" ] && [ -s "$RUNNER_WRITEBACK_BODY" ]; then
        posted=$(gh issue view "$issue" --repo "$repo" --json comments --jq '.comments[].body')
        if printf '%s\n' "$posted" | grep -qF "runner:writeback key=$RUNNER_WRITEBACK_KEY -->"; then
            exit 0
        fi
        gh issue comment "$issue" --repo "$repo" --body-file "$RUNNER_WRITEBACK_BODY" > /dev/null
    fi
    ;;
check)
    command -v gh > /dev/null || { echo "github.sh: gh is not installed (https://cli.github.com)" >&2; exit 1; }
    if ! said=$(gh auth status --hostname "$host" 2>&1); then
        why=$(printf '%s\n' "$said" | sed 's/^[[:space:]]*[-X✓!]*[[:space:]]*//' | grep -v '^$' | tail -1)
        echo "github.sh: gh is not logged in to $host: $why (GH_HOST and GH_ENTERPRISE_TOKEN for an Enterprise host, GH_TOKEN for github.com, or gh auth login --hostname $host)" >&2
        exit 1
    fi
    have=$(gh label list --repo "$repo" --limit 1000 --json name --jq '.[].name')
    missing=
    for l in "${3:-runner}" runner:working runner:done runner:halted runner:held; do
        printf '%s\n' "$have" | grep -qxF "$l" || missing="$missing $l"
    done
    if [ -n "$missing" ]; then
        echo "github.sh: $repo has no label$missing (gh label create LABEL --repo $repo, for each)" >&2
        exit 1
    fi
    echo "$(gh --version | head -1 | cut -d' ' -f1-3), logged in to $host; $repo has the labels runner reads and sets"
    ;;
*) usage ;;
esac
