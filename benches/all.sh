#!/usr/bin/env bash
# Every benchmark, one after the other, each measuring runner side by side with its baseline in
# the same invocation (alternated runs where it times both), and printing the ratios:
#   drain_overhead.sh  2,000 `true` items over 100 repositories, -j 2, against xargs -P 2 and
#                      GNU parallel -j 2 (when installed)
#   codemod.sh         a sed codemod with a grep gate over 200 repositories, one item each on its
#                      own work branch, -j 2, against a hand-written script under xargs -P 2;
#                      runner's time per item by phase
#   makespan.sh        a seeded heterogeneous workload, a skewed one and one with dependencies
#                      across repositories, workers 4: first and second run against the lower
#                      bound
#   plan_scale.sh      plan over 1,000 repositories with critical_base markers, against a
#                      `git merge-base --is-ancestor` loop (give PLAN_REPOS=10000 for ten thousand)
#   memory.sh          peak RSS and time of a 100,000-item drain (DRAIN_ITEMS) and of a plan of
#                      100,000 items over 10,000 repositories, each against a tenth of it
#   history_cost.sh    plan, status and apply against a ledger of 1,000 runs, and after gc
#   postgres_throughput.sh  100,000 `true` items (PG_ITEMS) through one PostgreSQL ledger by 8
#                      runners against one (PG_RUNNERS): items per second, claim latency
#                      p50/p99, every item exactly once (when PostgreSQL is installed; the tests'
#                      private server is started)
# The 100,000-item drains take most of an hour on 2 cores; DRAIN_ITEMS=10000 PG_ITEMS=2000 for a
# quick look.
#
#   benches/all.sh
set -euo pipefail
here=$(dirname "$0")
cargo build --release --quiet --manifest-path "$here/../Cargo.toml"
export RUNNER_BIN=${RUNNER_BIN:-$(cd "$here/.." && pwd)/target/release/runner}
for b in "drain_overhead.sh 2000 100 5" "codemod.sh ${CODEMOD_REPOS:-200} 3" "makespan.sh 7" "plan_scale.sh ${PLAN_REPOS:-1000} 3" \
         "memory.sh ${DRAIN_ITEMS:-100000} 100000 10000" "history_cost.sh 1000 5"; do
  echo "== benches/$b"
  # shellcheck disable=SC2086
  bash "$here"/$b 2>&1 | grep -v '^generating\|^ledger:'
  echo
done
if ls /usr/lib/postgresql/*/bin/initdb > /dev/null 2>&1; then
  echo "== benches/postgres_throughput.sh ${PG_ITEMS:-100000} 1000 \"${PG_RUNNERS:-1 8}\""
  bash "$here"/postgres_throughput.sh "${PG_ITEMS:-100000}" 1000 "${PG_RUNNERS:-1 8}"
else
  echo "== benches/postgres_throughput.sh: PostgreSQL is not installed (apt-get install postgresql), not measured"
fi
