//! The order a drain admits items in, and what it is expected to take: one pure choice shared
//! by `plan` (which simulates the drain with the estimates) and the scheduler (which makes it
//! live). With one item per repository at a time, and an item waiting for those it names in
//! `after`, the drain cannot end before the longest of: total work / workers, the longest
//! repository's total, and the longest chain of dependencies. Starting first the item with the
//! most work behind it — its repository's pending total, or the longest chain of dependents it
//! heads — gets close to that bound.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};

/// A repository's place in the admission order: the most work behind its best ready item (the
/// repository's pending total, or that item's chain of dependents, whichever is longer), then
/// that chain, then the item listed first.
type Key = (u64, u64, Reverse<usize>);

/// A repository's pending items: those ready to start (every dependency completed), best first,
/// and what all its pending items, ready or not, are expected to take together.
#[derive(Debug, Default)]
struct RepoQueue {
    ready: BTreeSet<(Reverse<u64>, usize)>,
    total: u64,
    pending: usize,
}

/// The pending items by repository; a heap of the repositories by [`Key`] answers
/// [`Backlog::pick`] in logarithmic time (entries a change made stale are dropped as they
/// surface). Items that wait for others (`after`) join their repository's ready set when the
/// last of those completes ([`Backlog::completed`]).
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    by_repo: HashMap<String, RepoQueue>,
    estimates: Vec<u64>,
    heap: BinaryHeap<(Key, String)>,
    /// By item: how many of its dependencies have not completed (empty without dependencies).
    needs: Vec<u32>,
    /// By item: the pending items that wait for it.
    dependents: Vec<Vec<usize>>,
    /// By item: the longest chain of work it heads, itself included (empty: its estimate).
    rank: Vec<u64>,
    /// By item: still pending.
    pending: Vec<bool>,
}

impl Backlog {
    /// `deps`, by item: the items it waits for (empty: none waits).
    pub fn new(
        repo_of: &[String],
        queue: &[usize],
        estimates: Vec<u64>,
        deps: &[Vec<usize>],
    ) -> Self {
        let n = repo_of.len();
        let mut b = Backlog {
            estimates,
            pending: vec![false; n],
            ..Backlog::default()
        };
        for &i in queue {
            b.pending[i] = true;
        }
        if deps.iter().any(|d| !d.is_empty()) {
            b.needs = vec![0; n];
            b.dependents = vec![Vec::new(); n];
            for &i in queue {
                for &d in deps.get(i).into_iter().flatten() {
                    if b.pending.get(d).copied().unwrap_or(false) {
                        b.needs[i] += 1;
                        b.dependents[d].push(i);
                    }
                }
            }
            b.rank = ranks(queue, &b.dependents, |i| b.estimate(i));
        }
        for &i in queue {
            let e = b.estimate(i);
            let r = b.rank_of(i);
            let ready = b.needs.get(i).is_none_or(|&k| k == 0);
            let q = b.by_repo.entry(repo_of[i].clone()).or_default();
            q.total += e;
            q.pending += 1;
            if ready {
                q.ready.insert((Reverse(r), i));
            }
        }
        let repos: Vec<String> = b.by_repo.keys().cloned().collect();
        for r in repos {
            b.push_key(&r);
        }
        b
    }

    pub fn estimate(&self, item: usize) -> u64 {
        self.estimates.get(item).copied().unwrap_or(1).max(1)
    }

    /// The longest chain of work `item` heads: itself, then its longest chain of dependents.
    fn rank_of(&self, item: usize) -> u64 {
        self.rank
            .get(item)
            .copied()
            .unwrap_or_else(|| self.estimate(item))
    }

    fn key(&self, repo: &str) -> Option<Key> {
        let q = self.by_repo.get(repo)?;
        let &(Reverse(rank), first) = q.ready.first()?;
        Some((q.total.max(rank), rank, Reverse(first)))
    }

    fn push_key(&mut self, repo: &str) {
        if let Some(k) = self.key(repo) {
            self.heap.push((k, repo.to_string()));
        }
    }

    /// `item` leaves the queue: admitted, or settled without running.
    pub fn remove(&mut self, repo: &str, item: usize) {
        if !self.pending.get(item).copied().unwrap_or(false) {
            return;
        }
        self.pending[item] = false;
        let (e, r) = (self.estimate(item), self.rank_of(item));
        if let Some(q) = self.by_repo.get_mut(repo) {
            q.ready.remove(&(Reverse(r), item));
            q.total = q.total.saturating_sub(e);
            q.pending = q.pending.saturating_sub(1);
            self.push_key(repo);
        }
    }

    /// `item` completed: the items waiting for it that wait for nothing else now are ready.
    pub fn completed(&mut self, item: usize, repo_of: &[String]) {
        let Some(waiting) = self.dependents.get(item).cloned() else {
            return;
        };
        for i in waiting {
            self.needs[i] = self.needs[i].saturating_sub(1);
            if self.needs[i] == 0 && self.pending[i] {
                let r = self.rank_of(i);
                if let Some(q) = self.by_repo.get_mut(&repo_of[i]) {
                    q.ready.insert((Reverse(r), i));
                }
                self.push_key(&repo_of[i]);
            }
        }
    }

    /// The pending items that wait for `item`.
    pub(crate) fn dependents(&self, item: usize) -> Vec<usize> {
        self.dependents
            .get(item)
            .map(|d| d.iter().copied().filter(|&i| self.pending[i]).collect())
            .unwrap_or_default()
    }

    /// Whether an item of `repo` is still pending.
    pub(crate) fn pending_in(&self, repo: &str) -> bool {
        self.by_repo.get(repo).is_some_and(|q| q.pending > 0)
    }

    /// Every pending item of `repo` leaves.
    pub(crate) fn clear_repo(&mut self, repo: &str, repo_of: &[String]) {
        if let Some(q) = self.by_repo.get_mut(repo) {
            q.ready.clear();
            q.total = 0;
            q.pending = 0;
        }
        for (i, r) in repo_of.iter().enumerate() {
            if r == repo
                && let Some(p) = self.pending.get_mut(i)
            {
                *p = false;
            }
        }
    }

    /// The next item to admit among repositories `free` allows: see [`Key`]. The item stays
    /// pending until [`Backlog::remove`].
    pub(crate) fn pick(&mut self, free: impl Fn(&str) -> bool) -> Option<usize> {
        let mut passed = Vec::new();
        let mut found = None;
        while let Some(entry) = self.heap.pop() {
            if self.key(&entry.1) != Some(entry.0) {
                continue;
            }
            let ok = free(&entry.1);
            let item = (entry.0).2.0;
            passed.push(entry);
            if ok {
                found = Some(item);
                break;
            }
        }
        self.heap.extend(passed);
        found
    }
}

/// Each queued item's longest chain of work: its own estimate, then the longest chain among
/// those waiting for it. Dependents first (a reverse topological order); an item caught in a
/// cycle (validation rules them out) keeps its own estimate.
fn ranks(queue: &[usize], dependents: &[Vec<usize>], est: impl Fn(usize) -> u64) -> Vec<u64> {
    let n = dependents.len();
    let mut rank: Vec<u64> = (0..n).map(&est).collect();
    // Kahn's order over "waits for": an item comes once everything waiting for it has come.
    let mut left: Vec<usize> = vec![0; n];
    let mut waits_for: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &d in queue {
        for &i in &dependents[d] {
            left[d] += 1;
            waits_for[i].push(d);
        }
    }
    let mut order: Vec<usize> = queue.iter().copied().filter(|&i| left[i] == 0).collect();
    let mut k = 0;
    while k < order.len() {
        let i = order[k];
        k += 1;
        for &d in &waits_for[i] {
            rank[d] = rank[d].max(est(d) + rank[i]);
            left[d] -= 1;
            if left[d] == 0 {
                order.push(d);
            }
        }
    }
    rank
}

/// A drain simulated with the estimates as the durations, every item succeeding: the order items
/// start in and when the last one ends (milliseconds). The same choice as the scheduler's.
pub(crate) fn simulate(
    repo_of: &[String],
    queue: &[usize],
    estimates: &[u64],
    deps: &[Vec<usize>],
    workers: u32,
) -> (Vec<usize>, u64) {
    let trace = trace(repo_of, queue, estimates, deps, workers);
    let end = trace.iter().map(|t| t.2).max().unwrap_or(0);
    (trace.into_iter().map(|t| t.0).collect(), end)
}

/// The simulated drain: (item, start, end) in start order.
pub fn trace(
    repo_of: &[String],
    queue: &[usize],
    estimates: &[u64],
    deps: &[Vec<usize>],
    workers: u32,
) -> Vec<(usize, u64, u64)> {
    let mut backlog = Backlog::new(repo_of, queue, estimates.to_vec(), deps);
    let workers = workers.max(1) as usize;
    let mut running: Vec<(u64, usize)> = Vec::new();
    let mut busy: HashSet<&str> = HashSet::new();
    let (mut now, mut out) = (0u64, Vec::with_capacity(queue.len()));
    loop {
        while running.len() < workers
            && let Some(i) = backlog.pick(|r| !busy.contains(r))
        {
            backlog.remove(&repo_of[i], i);
            busy.insert(&repo_of[i]);
            let end = now + backlog.estimate(i);
            running.push((end, i));
            out.push((i, now, end));
        }
        let Some(k) = (0..running.len()).min_by_key(|&k| running[k]) else {
            return out;
        };
        let (end, i) = running.swap_remove(k);
        now = end;
        busy.remove(repo_of[i].as_str());
        backlog.completed(i, repo_of);
    }
}

/// The earliest any drain could end: the longest of total / workers, the longest repository's
/// total and the longest chain of dependencies.
pub(crate) fn lower_bound(
    repo_of: &[String],
    queue: &[usize],
    estimates: &[u64],
    deps: &[Vec<usize>],
    workers: u32,
) -> u64 {
    let est = |i: usize| estimates.get(i).copied().unwrap_or(1).max(1);
    let mut per_repo: HashMap<&str, u64> = HashMap::new();
    let mut total = 0u64;
    for &i in queue {
        total += est(i);
        *per_repo.entry(repo_of[i].as_str()).or_default() += est(i);
    }
    let longest = per_repo.values().copied().max().unwrap_or(0);
    let chain = if deps.iter().any(|d| !d.is_empty()) {
        let b = Backlog::new(repo_of, queue, estimates.to_vec(), deps);
        queue.iter().map(|&i| b.rank_of(i)).max().unwrap_or(0)
    } else {
        0
    };
    total
        .div_ceil(u64::from(workers.max(1)))
        .max(longest)
        .max(chain)
}

fn median(v: &mut [u64]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[(v.len() - 1) / 2])
}

/// Give the plan's pending items their estimates (from `durations`: what each `(repo, item)`
/// took in recent runs, milliseconds) and their expected start order, and the plan its expected
/// makespan when there is any history.
pub fn estimate(plan: &mut super::Plan, durations: &HashMap<(String, String), Vec<u64>>) {
    use super::ItemState;
    let mut own: HashMap<(&str, &str), u64> = HashMap::new();
    let mut by_repo: HashMap<&str, Vec<u64>> = HashMap::new();
    let mut all: Vec<u64> = Vec::new();
    for ((repo, item), d) in durations {
        let mut d = d.clone();
        if let Some(m) = median(&mut d) {
            own.insert((repo.as_str(), item.as_str()), m);
            by_repo.entry(repo.as_str()).or_default().push(m);
            all.push(m);
        }
    }
    let run_median = median(&mut all);
    let repo_median: HashMap<&str, u64> = by_repo
        .into_iter()
        .filter_map(|(r, mut v)| Some((r, median(&mut v)?)))
        .collect();
    let estimates: Vec<Option<u64>> = plan
        .items
        .iter()
        .map(|it| {
            (it.state == ItemState::Pending)
                .then(|| {
                    own.get(&(it.repo.as_str(), it.id.as_str()))
                        .or_else(|| repo_median.get(it.repo.as_str()))
                        .copied()
                        .or(run_median)
                })
                .flatten()
        })
        .collect();
    for (it, e) in plan.items.iter_mut().zip(&estimates) {
        it.estimate_ms = e.map(|e| e.max(1));
    }
    let queue: Vec<usize> = plan
        .items
        .iter()
        .enumerate()
        .filter(|(_, it)| it.state == ItemState::Pending)
        .map(|(i, _)| i)
        .collect();
    let repo_of: Vec<String> = plan.items.iter().map(|it| it.repo.clone()).collect();
    let est = plan.estimates();
    let deps = super::deps::pending_deps(plan);
    let (order, makespan) = simulate(&repo_of, &queue, &est, &deps, plan.capacity.workers);
    for (rank, &i) in order.iter().enumerate() {
        plan.items[i].start = Some(rank + 1);
    }
    plan.expected = (run_median.is_some() && !queue.is_empty()).then(|| super::Expected {
        makespan_ms: makespan,
        lower_bound_ms: lower_bound(&repo_of, &queue, &est, &deps, plan.capacity.workers),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn repos(of: &[u8]) -> Vec<String> {
        of.iter().map(|r| format!("r{r}")).collect()
    }

    /// The best makespan of independent items on `m` workers, by trying every assignment.
    fn optimum(est: &[u64], m: usize) -> u64 {
        let n = est.len();
        let mut best = u64::MAX;
        for code in 0..m.pow(n as u32) {
            let mut load = vec![0u64; m];
            let mut c = code;
            for e in est {
                load[c % m] += e;
                c /= m;
            }
            best = best.min(load.into_iter().max().unwrap_or(0));
        }
        best
    }

    proptest! {
        #[test]
        fn the_simulated_drain_keeps_every_rule_and_never_beats_the_bound(
            items in proptest::collection::vec((0u8..6, 1u64..1000), 0..40),
            workers in 1u32..6,
        ) {
            let repo_of = repos(&items.iter().map(|x| x.0).collect::<Vec<_>>());
            let est: Vec<u64> = items.iter().map(|x| x.1).collect();
            let queue: Vec<usize> = (0..items.len()).collect();
            let t = trace(&repo_of, &queue, &est, &[], workers);
            // Every item once.
            let mut seen: Vec<usize> = t.iter().map(|x| x.0).collect();
            seen.sort_unstable();
            prop_assert_eq!(&seen, &queue);
            for (i, &(a, s1, e1)) in t.iter().enumerate() {
                prop_assert_eq!(e1 - s1, est[a]);
                // One item of a repository at a time; at most `workers` at any start.
                let at_once = t.iter().filter(|&&(_, s2, e2)| s2 <= s1 && s1 < e2).count();
                prop_assert!(at_once <= workers as usize);
                for &(b, s2, e2) in &t[i + 1..] {
                    if repo_of[a] == repo_of[b] {
                        prop_assert!(e1 <= s2 || e2 <= s1, "{a} and {b} overlap in {}", repo_of[a]);
                    }
                }
            }
            let (_, makespan) = simulate(&repo_of, &queue, &est, &[], workers);
            prop_assert!(makespan >= lower_bound(&repo_of, &queue, &est, &[], workers));
        }

        #[test]
        fn dependencies_are_kept_and_the_bound_holds(
            items in proptest::collection::vec((0u8..5, 1u64..1000, proptest::collection::vec(0usize..40, 0..3)), 1..40),
            workers in 1u32..5,
        ) {
            // Each item may wait for items listed before it (so there is no cycle).
            let repo_of = repos(&items.iter().map(|x| x.0).collect::<Vec<_>>());
            let est: Vec<u64> = items.iter().map(|x| x.1).collect();
            let deps: Vec<Vec<usize>> = items
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    let mut d: Vec<usize> = x.2.iter().filter(|&&d| d < i).copied().collect();
                    d.dedup();
                    d
                })
                .collect();
            let queue: Vec<usize> = (0..items.len()).collect();
            let t = trace(&repo_of, &queue, &est, &deps, workers);
            prop_assert_eq!(t.len(), items.len());
            let end_of: HashMap<usize, u64> = t.iter().map(|&(i, _, e)| (i, e)).collect();
            for &(i, s, _) in &t {
                for &d in &deps[i] {
                    prop_assert!(end_of[&d] <= s, "{i} started before {d}, which it waits for, ended");
                }
            }
            let (_, makespan) = simulate(&repo_of, &queue, &est, &deps, workers);
            prop_assert!(makespan >= lower_bound(&repo_of, &queue, &est, &deps, workers));
        }

        #[test]
        fn independent_items_end_within_the_lpt_bound_of_the_optimum(
            est in proptest::collection::vec(1u64..100, 1..8),
            workers in 1u32..4,
        ) {
            // Each item in its own repository: the classic LPT guarantee holds.
            let repo_of: Vec<String> = (0..est.len()).map(|i| format!("r{i}")).collect();
            let queue: Vec<usize> = (0..est.len()).collect();
            let (_, makespan) = simulate(&repo_of, &queue, &est, &[], workers);
            let m = workers as u64;
            let opt = optimum(&est, workers as usize);
            // makespan <= (4/3 - 1/(3m)) * opt, in integers.
            prop_assert!(3 * m * makespan <= (4 * m - 1) * opt, "{makespan} vs optimum {opt}");
        }
    }

    #[test]
    fn the_longest_chain_of_dependencies_starts_first() {
        // Nine short independent items listed first, then a chain of three across
        // repositories: its head starts first, and the drain meets the bound (started last, the
        // chain would end at 600).
        let mut repo_of: Vec<String> = (0..9).map(|i| format!("free{i}")).collect();
        repo_of.extend(["c1".into(), "c2".into(), "c3".into()]);
        let est = vec![100u64; 12];
        let mut deps = vec![Vec::new(); 12];
        deps[10] = vec![9];
        deps[11] = vec![10];
        let queue: Vec<usize> = (0..12).collect();
        let (order, makespan) = simulate(&repo_of, &queue, &est, &deps, 3);
        assert_eq!(order[0], 9);
        let bound = lower_bound(&repo_of, &queue, &est, &deps, 3);
        assert_eq!(bound, 400, "work 1200 / 3 workers");
        assert_eq!(makespan, bound);
    }

    #[test]
    fn a_heavy_repository_listed_last_starts_first() {
        // Eleven light repositories, then one with ten long items.
        let mut repo_of: Vec<String> = (0..11).map(|i| format!("light{i}")).collect();
        let mut est = vec![100u64; 11];
        for _ in 0..10 {
            repo_of.push("heavy".into());
            est.push(1000);
        }
        let queue: Vec<usize> = (0..repo_of.len()).collect();
        let (order, makespan) = simulate(&repo_of, &queue, &est, &[], 4);
        assert_eq!(repo_of[order[0]], "heavy");
        assert_eq!(makespan, lower_bound(&repo_of, &queue, &est, &[], 4));
        // Without history (every item alike) the repository with the most items goes first too.
        let (order, _) = simulate(&repo_of, &queue, &[], &[], 4);
        assert_eq!(repo_of[order[0]], "heavy");
    }
}
