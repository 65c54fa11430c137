#!/bin/sh
# A tracker source for runner: a plain Markdown file of tasks, kept in a repository or beside the
# manifest — for a backlog that lives in no tracker.
#
#   sources:
#     - name: task
#       run: [manifests/sources/tasks.sh, list, TASKS.md]
#       writeback: [manifests/sources/tasks.sh, writeback, TASKS.log]   # optional
#       repo: api                 # for tasks that name no repository
#       branch: "runner/{item}"
#
# The file: each `## ` heading is a task, its title the heading's text. `## [bump-serde] Bump
# serde to 1.0.220` gives the task the id `bump-serde` (the item `task-bump-serde`); a heading
# without `[id]` takes the slug of its title (`## Fix the login redirect` is
# `fix-the-login-redirect`), so renaming it makes a new task — give an id to tasks you may
# rename. Lines right under the heading, before the first blank line, of the form `key: value`
# (the key lower case) are fields: `repo: web` routes the task, `labels: deps, small` labels it
# (for the source's `labels` routing), any other key is a var (`size: 3` is `{item.size}`). The
# rest, up to the next `## `, is the task's body, which the worker gets in $RUNNER_BRIEF.
# Anything before the first `## ` (a title, an introduction) is not a task. A task removed from
# the file is no longer pending; two tasks with one id make the source unreadable (runner says
# which id), so nothing is run twice or lost by a slip.
#
#   # Backlog
#
#   ## [bump-serde] Bump serde to 1.0.220
#   repo: api
#   labels: deps
#
#   The changelog says nothing breaks; run the tests with --all-features.
#
# `list FILE` prints the tasks as `runner.items/v1` JSON (`runner schema --items`); it only reads.
#
# `writeback LOG` appends one line per outcome to LOG — time, item, event, label, pull request —
# unless LOG already holds its key ($RUNNER_WRITEBACK_KEY): a record of what became of each task
# beside the file, written once however often cron starts the drain. The task file itself is
# never edited.
set -eu
usage() {
    echo "usage: tasks.sh list FILE | tasks.sh writeback LOG" >&2
    exit 2
}
[ $# -eq 2 ] || usage
case $1 in
list)
    file=$2
    if [ ! -r "$file" ]; then
        echo "tasks.sh: cannot read the task file \`$file\`" >&2
        exit 1
    fi
    exec jq -Rs '
        def trim: sub("^\\s+"; "") | sub("\\s+$"; "");
        def slug: ascii_downcase | gsub("[^a-z0-9._-]+"; "-") | sub("^-+"; "") | sub("-+$"; "");
        def close: if .cur then .tasks += [.cur] else . end;
        reduce (split("\n")[] | sub("\r$"; "")) as $l ({tasks: [], cur: null, head: false};
            if ($l | test("^## ")) then
                close
                | ($l | sub("^##\\s+"; "") | trim) as $h
                | ($h | capture("^\\[(?<id>[^\\]]+)\\]\\s*(?<title>.*)$")
                      // {id: ($h | slug), title: $h}) as $t
                | .cur = {id: ($t.id | trim), title: ($t.title | trim), body: "", labels: [], vars: {}}
                | .head = true
            elif .cur == null then .
            elif .head and ($l | test("^[a-z_][a-z0-9_]*:\\s")) then
                ($l | capture("^(?<k>[a-z_][a-z0-9_]*):\\s*(?<v>.*)$")) as $kv
                | if $kv.k == "repo" then .cur.repo = ($kv.v | trim)
                  elif $kv.k == "labels" then
                      .cur.labels = ($kv.v | split(",") | map(trim) | map(select(. != "")))
                  else .cur.vars[$kv.k] = ($kv.v | trim) end
            else .head = false | .cur.body += $l + "\n" end)
        | close
        | {schema: "runner.items/v1", items: [.tasks[] | .body |= trim]}
    ' "$file"
    ;;
writeback)
    log=$2
    key=${RUNNER_WRITEBACK_KEY:-}
    if [ -n "$key" ] && [ -f "$log" ] && grep -qF " key=$key" "$log"; then
        exit 0
    fi
    line="$(date -u +%Y-%m-%dT%H:%M:%SZ) $RUNNER_ITEM $RUNNER_WRITEBACK_EVENT $RUNNER_WRITEBACK_LABEL"
    [ -z "${RUNNER_PR_URL:-}" ] || line="$line $RUNNER_PR_URL"
    [ -z "$key" ] || line="$line key=$key"
    printf '%s\n' "$line" >> "$log"
    ;;
*) usage ;;
esac
