#!/bin/sh
# A tracker source for runner: the open GitHub issues of a repository that carry a label, as
# `runner.items/v1` JSON (see `runner schema --items`), every page of them.
#
#   sources:
#     - name: issue
#       run: [manifests/sources/github.sh, owner/repo, runner]
#       repo: api                       # the declared repository the issues are for
#       branch: "runner/{item}"
#   env: {pass: [PATH, HOME, GH_TOKEN]}  # or `gh auth login` beforehand
#
# Needs the GitHub CLI (`gh`). It only reads: `gh issue list` with the fields runner uses;
# `gh` follows the pages up to `--limit`. Comments come oldest first, as GitHub gives them.
set -eu
if [ $# -lt 1 ]; then
    echo "usage: github.sh OWNER/REPO [LABEL]" >&2
    exit 2
fi
repo=$1
label=${2:-runner}
limit=${RUNNER_SOURCE_LIMIT:-10000}
exec gh issue list --repo "$repo" --label "$label" --state open --limit "$limit" \
    --json number,title,body,url,labels,comments \
    --jq '{schema: "runner.items/v1", items: [.[] | {id: .number, title: .title, body: (.body // ""), url: .url, labels: [.labels[].name], comments: [.comments[] | {author: (.author.login // "ghost"), at: .createdAt, body: .body}]}]}'
