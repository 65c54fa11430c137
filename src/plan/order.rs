//! The order a drain admits items in, and what it is expected to take: one pure choice shared
//! by `plan` (which simulates the drain with the estimates) and the scheduler (which makes it
//! live). With one item per repository at a time, the drain cannot end before
//! max(total work / workers, the longest repository's total); starting the repository with the
//! most work left first, and its longest item first, gets close to that bound.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};

/// A repository's place in the admission order: most work left, then its longest item, then
/// the item listed first.
type Key = (u64, u64, Reverse<usize>);

/// The pending items by repository, each repository's longest first, and what each
/// repository's pending items are expected to take together; a heap of the repositories by
/// [`Key`] answers [`Backlog::pick`] in logarithmic time (entries a change made stale are
/// dropped as they surface).
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    by_repo: HashMap<String, (VecDeque<usize>, u64)>,
    estimates: Vec<u64>,
    heap: BinaryHeap<(Key, String)>,
}

impl Backlog {
    pub fn new(repo_of: &[String], queue: &[usize], estimates: Vec<u64>) -> Self {
        let mut b = Backlog {
            by_repo: HashMap::new(),
            estimates,
            heap: BinaryHeap::new(),
        };
        for &i in queue {
            let e = b.estimate(i);
            let entry = b.by_repo.entry(repo_of[i].clone()).or_default();
            entry.0.push_back(i);
            entry.1 += e;
        }
        let est = b.estimates.clone();
        let of = |i: usize| est.get(i).copied().unwrap_or(1).max(1);
        for (q, _) in b.by_repo.values_mut() {
            q.make_contiguous().sort_by_key(|&i| (Reverse(of(i)), i));
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

    fn key(&self, repo: &str) -> Option<Key> {
        let (q, total) = self.by_repo.get(repo)?;
        let first = *q.front()?;
        Some((*total, self.estimate(first), Reverse(first)))
    }

    fn push_key(&mut self, repo: &str) {
        if let Some(k) = self.key(repo) {
            self.heap.push((k, repo.to_string()));
        }
    }

    pub fn remove(&mut self, repo: &str, item: usize) {
        let e = self.estimate(item);
        if let Some((q, total)) = self.by_repo.get_mut(repo)
            && let Some(pos) = q.iter().position(|&i| i == item)
        {
            q.remove(pos);
            *total = total.saturating_sub(e);
            self.push_key(repo);
        }
    }

    /// Whether an item of `repo` is still pending.
    pub(crate) fn pending_in(&self, repo: &str) -> bool {
        self.by_repo.get(repo).is_some_and(|(q, _)| !q.is_empty())
    }

    /// Every pending item of `repo` leaves.
    pub(crate) fn clear_repo(&mut self, repo: &str) {
        if let Some((q, total)) = self.by_repo.get_mut(repo) {
            q.clear();
            *total = 0;
        }
    }

    /// The next item to admit among repositories `free` allows: the repository with the most
    /// work pending first (its longest chain starts earliest), its longest item first; ties go to
    /// the item listed first. The item stays pending until [`Backlog::remove`].
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

/// A drain simulated with the estimates as the durations, every item succeeding: the order items
/// start in and when the last one ends (milliseconds). The same choice as the scheduler's.
pub(crate) fn simulate(
    repo_of: &[String],
    queue: &[usize],
    estimates: &[u64],
    workers: u32,
) -> (Vec<usize>, u64) {
    let trace = trace(repo_of, queue, estimates, workers);
    let end = trace.iter().map(|t| t.2).max().unwrap_or(0);
    (trace.into_iter().map(|t| t.0).collect(), end)
}

/// The simulated drain: (item, start, end) in start order.
pub fn trace(
    repo_of: &[String],
    queue: &[usize],
    estimates: &[u64],
    workers: u32,
) -> Vec<(usize, u64, u64)> {
    let mut backlog = Backlog::new(repo_of, queue, estimates.to_vec());
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
    }
}

/// The earliest any drain could end: max(total / workers, the longest repository's total).
pub(crate) fn lower_bound(
    repo_of: &[String],
    queue: &[usize],
    estimates: &[u64],
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
    total.div_ceil(u64::from(workers.max(1))).max(longest)
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
    let (order, makespan) = simulate(&repo_of, &queue, &est, plan.capacity.workers);
    for (rank, &i) in order.iter().enumerate() {
        plan.items[i].start = Some(rank + 1);
    }
    plan.expected = (run_median.is_some() && !queue.is_empty()).then(|| super::Expected {
        makespan_ms: makespan,
        lower_bound_ms: lower_bound(&repo_of, &queue, &est, plan.capacity.workers),
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
            let t = trace(&repo_of, &queue, &est, workers);
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
            let (_, makespan) = simulate(&repo_of, &queue, &est, workers);
            prop_assert!(makespan >= lower_bound(&repo_of, &queue, &est, workers));
        }

        #[test]
        fn independent_items_end_within_the_lpt_bound_of_the_optimum(
            est in proptest::collection::vec(1u64..100, 1..8),
            workers in 1u32..4,
        ) {
            // Each item in its own repository: the classic LPT guarantee holds.
            let repo_of: Vec<String> = (0..est.len()).map(|i| format!("r{i}")).collect();
            let queue: Vec<usize> = (0..est.len()).collect();
            let (_, makespan) = simulate(&repo_of, &queue, &est, workers);
            let m = workers as u64;
            let opt = optimum(&est, workers as usize);
            // makespan <= (4/3 - 1/(3m)) * opt, in integers.
            prop_assert!(3 * m * makespan <= (4 * m - 1) * opt, "{makespan} vs optimum {opt}");
        }
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
        let (order, makespan) = simulate(&repo_of, &queue, &est, 4);
        assert_eq!(repo_of[order[0]], "heavy");
        assert_eq!(makespan, lower_bound(&repo_of, &queue, &est, 4));
        // Without history (every item alike) the repository with the most items goes first too.
        let (order, _) = simulate(&repo_of, &queue, &[], 4);
        assert_eq!(repo_of[order[0]], "heavy");
    }
}
