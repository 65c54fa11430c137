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
#   memory.sh          peak RSS of a 10,000-item drain and a 100,000-item plan, and their growth
#   history_cost.sh    plan, status and apply against a ledger of 1,000 runs, and after gc
#   postgres_throughput.sh  2,000 `true` items through one PostgreSQL ledger by 1, 2 and 4
#                      runners: items per second, claim latency p50/p99 (when PostgreSQL is
#                      installed; the tests' private server is started)
#
#   benches/all.sh
set -euo pipefail
here=$(dirname "$0")
cargo build --release --quiet --manifest-path "$here/../Cargo.toml"
export RUNNER_BIN=${RUNNER_BIN:-$(cd "$here/.." && pwd)/target/release/runner}
for b in "drain_overhead.sh 2000 100 5" "codemod.sh ${CODEMOD_REPOS:-200} 3" "makespan.sh 7" "plan_scale.sh ${PLAN_REPOS:-1000} 3" \
         "memory.sh 10000 100000" "history_cost.sh 1000 5"; do
  echo "== benches/$b"
  # shellcheck disable=SC2086
  bash "$here"/$b 2>&1 | grep -v '^generating\|^ledger:'
  echo
done
if ls /usr/lib/postgresql/*/bin/initdb > /dev/null 2>&1; then
  echo "== benches/postgres_throughput.sh 2000 100"
  bash "$here"/postgres_throughput.sh 2000 100
else
  echo "== benches/postgres_throughput.sh: PostgreSQL is not installed (apt-get install postgresql), not measured"
fi
