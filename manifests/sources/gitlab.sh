#!/bin/sh
# A tracker source for runner: GitLab issues through the GitLab CLI (`glab api`) and `jq`.
#
#   sources:
#     - name: issue
#       run: [manifests/sources/gitlab.sh, list, group/project, runner]
#       writeback: [manifests/sources/gitlab.sh, writeback, group/project]
#       check: [manifests/sources/gitlab.sh, check, group/project]    # for `runner doctor`
#       repo: api
#       branch: "runner/{item}"
#   env: {pass: [PATH, HOME, GITLAB_TOKEN]}   # or `glab auth login` beforehand
#
# `list PROJECT [LABEL]` prints the open issues carrying LABEL (default `runner`) as
# `runner.items/v1` JSON (`runner schema --items`): every page of them (`--paginate`), each with
# the notes people wrote, oldest first (GitLab's system notes left out). It only reads.
#
# `writeback PROJECT` tells issue $RUNNER_SOURCE_ID what became of its item: the label
# $RUNNER_WRITEBACK_LABEL on, those of $RUNNER_WRITEBACK_UNLABEL off, and the note in
# $RUNNER_WRITEBACK_BODY (when there is one) posted unless a note already carries its key
# ($RUNNER_WRITEBACK_KEY).
#
# `check PROJECT [LABEL]` (what `runner doctor` runs) says whether glab is installed and logged
# in to the host (GITLAB_HOST for a self-hosted GitLab), and whether the project has LABEL and
# the labels runner sets; non-zero with what is missing. It only reads.
set -eu
usage() {
    echo "usage: gitlab.sh list PROJECT [LABEL] | gitlab.sh writeback PROJECT | gitlab.sh check PROJECT [LABEL]" >&2
    exit 2
}
# A failed call ends the script with what it was doing and glab's own words: never an empty
# list, never a note posted without knowing the notes already there.
said=$(mktemp)
trap 'rm -f "$said"' EXIT
fail() {
    echo "gitlab.sh: $*" >&2
    exit 1
}
# `api WHAT ARGS...`: `glab api ARGS...`, its answer on standard output.
api() {
    what=$1
    shift
    glab api "$@" 2> "$said" || fail "$what: $(tr '\n' ' ' < "$said")"
}
[ $# -ge 2 ] || usage
what=$1
# The project's path, URL-encoded as the API takes it (group%2Fproject).
project=$(printf '%s' "$2" | jq -sRr @uri)
notes() {
    # Every page, as one array; read whole before it is parsed, so that a failed page fails.
    pages=$(api "cannot read the notes of issue $1 of $2" --paginate \
        "projects/$project/issues/$1/notes?sort=asc&order_by=created_at&per_page=100") || exit 1
    printf '%s' "$pages" | jq -s 'add // []'
}
case $what in
list)
    label=$(printf '%s' "${3:-runner}" | jq -sRr @uri)
    pages=$(api "cannot list the issues of $2" --paginate \
        "projects/$project/issues?state=opened&labels=$label&per_page=100") || exit 1
    issues=$(printf '%s' "$pages" | jq -s 'add // []')
    by_issue=
    for iid in $(printf '%s' "$issues" | jq -r '.[].iid'); do
        these=$(notes "$iid" "$2") || exit 1
        by_issue="$by_issue$(printf '%s' "$these" | jq -c --arg iid "$iid" '{iid: ($iid | tonumber), notes: .}')
"
    done
    printf '%s' "$by_issue" | jq -s --argjson issues "$issues" '
        (map({key: (.iid | tostring), value: .notes}) | from_entries) as $notes
        | {schema: "runner.items/v1",
           items: [$issues[] | {id: .iid, title: .title, body: (.description // ""), url: .web_url,
                                labels: .labels,
                                comments: [($notes[.iid | tostring] // [])[] | select(.system | not)
                                           | {author: .author.username, at: .created_at, body: .body}]}]}'
    ;;
writeback)
    issue=$RUNNER_SOURCE_ID
    api "cannot label issue $issue of $2" -X PUT "projects/$project/issues/$issue" \
        -f "add_labels=$RUNNER_WRITEBACK_LABEL" -f "remove_labels=$RUNNER_WRITEBACK_UNLABEL" > /dev/null
    if [ -n "${RUNNER_WRITEBACK_BODY:-}" ] && [ -s "$RUNNER_WRITEBACK_BODY" ]; then
        existing=$(notes "$issue" "$2") || exit 1
        if printf '%s' "$existing" | jq -r '.[].body' | grep -qF "runner:writeback key=$RUNNER_WRITEBACK_KEY -->"; then
            exit 0
        fi
        api "cannot post on issue $issue of $2" -X POST "projects/$project/issues/$issue/notes" \
            -f "body=$(cat "$RUNNER_WRITEBACK_BODY")" > /dev/null
    fi
    ;;
check)
    # glab installed, and logged in to the host: the project's labels read through it.
    command -v glab > /dev/null || fail "glab is not installed (https://gitlab.com/gitlab-org/cli)"
    pages=$(api "cannot read the labels of $2 (GITLAB_HOST and GITLAB_TOKEN for a self-hosted GitLab, or glab auth login)" \
        --paginate "projects/$project/labels?per_page=100") || exit 1
    have=$(printf '%s' "$pages" | jq -rs 'add // [] | .[].name')
    missing=
    for l in "${3:-runner}" runner:working runner:done runner:halted runner:held; do
        printf '%s\n' "$have" | grep -qxF "$l" || missing="$missing $l"
    done
    [ -z "$missing" ] || fail "$2 has no label$missing (glab label create --name LABEL -R $2, for each)"
    echo "glab logged in to ${GITLAB_HOST:-gitlab.com}; $2 has the labels runner reads and sets"
    ;;
*) usage ;;
esac
