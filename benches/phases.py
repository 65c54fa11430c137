#!/usr/bin/env python3
"""Where a drain's time per item goes, from its event stream (`runner apply --events FILE`).

For each item, the time between its events, each phase ending at the event that closes it:

  worktree         item-started -> worktree           the work branch's worktree made
  set-up           worktree -> attempt-started        the checkout probed, the cgroup, set-up
  worker           attempt-started -> worker-finished the worker spawned, run and reaped
  snapshot         worker-finished -> gate-started    the worktree's tree taken, the verdict key
  gates            gate-started -> last gate-finished the gates spawned, run and reaped
  commit, clean-up last gate-finished -> work         the commit, the worktree removed
  to the result    work -> item-finished              the item's end reported

and, outside the items' tasks, what the loop spends per item admitting and settling them (the
claim, the lease, the result made durable and the lease let go): the drain's wall time times the
workers, less the time inside items, per item. Prints the mean of each, in milliseconds; the
worker's and gates' own run time (the processes' durations) beside their phases.

    benches/phases.py EVENTS.jsonl
"""

import json
import sys
from datetime import datetime


def at(e):
    return datetime.strptime(e["at"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() * 1000.0


def dur(e):
    d = e.get("duration") or {}
    return d.get("secs", 0) * 1000.0 + d.get("nanos", 0) / 1e6


def main(path):
    items = {}
    run_start = run_end = None
    workers = 1
    for line in open(path, encoding="utf-8"):
        e = json.loads(line)
        kind = e["event"]
        if kind == "run-started":
            run_start = at(e)
            workers = e.get("workers", 1)
        elif kind == "run-ended":
            run_end = at(e)
        elif "item" in e:
            items.setdefault(e["item"], []).append(e)
    phases = ["worktree", "set-up", "worker", "snapshot", "gates", "commit, clean-up", "to the result"]
    sums = dict.fromkeys(phases, 0.0)
    own = {"worker": 0.0, "gates": 0.0}
    inside = 0.0
    n = 0
    for evs in items.values():
        first = {}
        last = {}
        for e in evs:
            first.setdefault(e["event"], e)
            last[e["event"]] = e
        need = ["item-started", "worktree", "attempt-started", "worker-finished", "gate-started",
                "gate-finished", "work", "item-finished"]
        if any(k not in first for k in need):
            continue
        t = {k: at(first[k]) for k in need}
        t["gate-finished"] = at(last["gate-finished"])
        sums["worktree"] += t["worktree"] - t["item-started"]
        sums["set-up"] += t["attempt-started"] - t["worktree"]
        sums["worker"] += t["worker-finished"] - t["attempt-started"]
        sums["snapshot"] += t["gate-started"] - t["worker-finished"]
        sums["gates"] += t["gate-finished"] - t["gate-started"]
        sums["commit, clean-up"] += t["work"] - t["gate-finished"]
        sums["to the result"] += t["item-finished"] - t["work"]
        own["worker"] += sum(dur(e) for e in evs if e["event"] == "worker-finished")
        own["gates"] += sum(dur(e) for e in evs if e["event"] == "gate-finished")
        inside += t["item-finished"] - t["item-started"]
        n += 1
    if n == 0:
        print("no item ran with a worktree, a worker, a gate and a commit: no phases")
        return
    print(f"runner's time per item by phase, mean of {n} items (ms):")
    for p in phases:
        extra = ""
        if p in own:
            extra = f"   (the processes themselves: {own[p] / n:.1f})"
        print(f"  {p:<18} {sums[p] / n:6.1f}{extra}")
    print(f"  {'in the item':<18} {inside / n:6.1f}")
    if run_start is not None and run_end is not None:
        outside = ((run_end - run_start) * workers - inside) / n
        print(f"  {'admit and settle':<18} {outside:6.1f}   (claim, lease, result, release; per slot)")


if __name__ == "__main__":
    main(sys.argv[1])
