#!/usr/bin/env bash
# Benchmark: does history cost? `runner plan`, `runner status` and an `apply` that finds nothing
# pending (its start-up, planning and report), for a 200-item manifest, with an empty ledger
# against one holding RUNS recorded runs of it (one real run's plan, events and results copied
# RUNS times), then again after `runner gc` with the default retention (30 runs). Prints the
# median of R timings of each and the ratio to the empty-ledger case.
#
#   benches/history_cost.sh [RUNS] [R]
set -euo pipefail
runs=${1:-1000}
reps=${2:-5}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"

items=200
repos=20
per=$(( items / repos ))
write_manifest() { # $1: the keep clause
  {
    echo "version: 1"
    echo "name: history-cost"
    echo "capacity: {workers: 2}"
    echo "repositories:"
    echo "  - glob: \"repos/*\""
    echo "reports: {keep: $1}"
    echo "worker:"
    echo "  run: [\"true\"]"
    echo "items:"
    for r in $(seq -f '%02g' 1 "$repos"); do
      for i in $(seq 1 "$per"); do echo "  - {repo: r$r, id: i$i}"; done
    done
  } > "$work/manifest.yaml"
}
write_manifest "{runs: 1000000, days: 100000}"
for r in $(seq -f '%02g' 1 "$repos"); do
  d="$work/repos/r$r"
  git init -q -b main "$d"
  git -C "$d" commit -q --allow-empty -m init
done

ms() { # the wall time of a command, in milliseconds
  local t0 t1
  t0=$(now)
  "$@" > /dev/null 2>&1 || true
  t1=$(now)
  echo $(( (t1 - t0) / 1000000 ))
}
measure() { # $1: label; prints label and the medians of plan, status, apply
  local p=() s=() a=()
  for _ in $(seq "$reps"); do
    p+=("$(ms "$bin" plan "$work/manifest.yaml")")
    s+=("$(ms "$bin" status "$work/manifest.yaml")")
    a+=("$(ms "$bin" apply "$work/manifest.yaml" --no-progress)")
  done
  printf '%s %s %s %s\n' "$1" \
    "$(printf '%s\n' "${p[@]}" | median)" \
    "$(printf '%s\n' "${s[@]}" | median)" \
    "$(printf '%s\n' "${a[@]}" | median)"
}

# The real run every copy is made of; then every item is done, so `apply` runs nothing.
"$bin" apply "$work/manifest.yaml" --no-progress 2> /dev/null
base=$(measure "1-run")
python3 - "$work/.runner/state.db" "$runs" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
n = int(sys.argv[2])
(rid,) = db.execute("SELECT id FROM runs ORDER BY started_at LIMIT 1").fetchone()
cols = [r[1] for r in db.execute("PRAGMA table_info(runs)")]
row = dict(zip(cols, db.execute("SELECT * FROM runs WHERE id = ?", (rid,)).fetchone()))
events = db.execute("SELECT seq, at, repo, item, body FROM events WHERE run_id = ?", (rid,)).fetchall()
results = db.execute("SELECT manifest, repo, item, def_hash, outcome, reason, cause, ended_at FROM item_results WHERE run_id = ?", (rid,)).fetchall()
for k in range(n):
    new = f"20240101T{k // 3600:02d}{(k // 60) % 60:02d}{k % 60:02d}Z-{k:06x}"
    stamp = f"2024-01-01T{k // 3600:02d}:{(k // 60) % 60:02d}:{k % 60:02d}.000Z"
    r = dict(row, id=new, started_at=stamp, ended_at=stamp, first_event=None, last_event=None)
    db.execute(f"INSERT INTO runs ({','.join(r)}) VALUES ({','.join('?' * len(r))})", list(r.values()))
    db.executemany("INSERT INTO events (run_id, seq, at, repo, item, body) VALUES (?, ?, ?, ?, ?, ?)",
                   [(new, s, stamp, re, it, b) for (s, _, re, it, b) in events])
    db.executemany("INSERT INTO item_results (manifest, repo, item, def_hash, run_id, outcome, reason, cause, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   [(m, re, it, h, new, o, rs, c, stamp) for (m, re, it, h, o, rs, c, _) in results])
db.commit()
print(f"ledger: {n} runs copied from {rid}: {len(events) * n} events, {len(results) * n} results", file=sys.stderr)
PY
big=$(measure "$runs-runs")
size_big=$(du -k "$work/.runner/state.db" | cut -f1)
write_manifest "{runs: 30}"
gc_ms=$(ms "$bin" gc "$work/manifest.yaml")
after=$(measure "after-gc")

# An empty ledger: plan and status only (an apply there would run every item).
rm -rf "$work/.runner"
empty_plan=(); for _ in $(seq "$reps"); do empty_plan+=("$(ms "$bin" plan "$work/manifest.yaml")"); done
ep=$(printf '%s\n' "${empty_plan[@]}" | median)

echo "200 items in 20 repositories; median of $reps; milliseconds"
echo "case            plan  status  apply(nothing pending)"
echo "empty ledger    $ep     -       -"
for line in "$base" "$big" "$after"; do
  # shellcheck disable=SC2086
  set -- $line
  printf '%-15s %-5s %-7s %s\n' "$1" "$2" "$3" "$4"
done
echo "ledger with $runs runs: ${size_big} KiB; gc down to 30 runs took ${gc_ms} ms"
# shellcheck disable=SC2086
set -- $base; bp=$2; bs=$3; ba=$4
# shellcheck disable=SC2086
set -- $big
awk -v p="$2" -v s="$3" -v a="$4" -v bp="$bp" -v bs="$bs" -v ba="$ba" -v n="$runs" \
  'BEGIN { printf "%d runs vs 1: plan %.2fx, status %.2fx, apply %.2fx\n", n, p / bp, s / bs, a / ba }'
# shellcheck disable=SC2086
set -- $after
awk -v p="$2" -v s="$3" -v a="$4" -v bp="$bp" -v bs="$bs" -v ba="$ba" \
  'BEGIN { printf "after gc vs 1:  plan %.2fx, status %.2fx, apply %.2fx\n", p / bp, s / bs, a / ba }'
