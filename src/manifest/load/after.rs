//! `after` on items: each names an item of the manifest's `items` (the id of one of its own
//! repository, or `repo/id`), and the dependencies make no cycle. Resolution is shared with the
//! plan, which finds the items the same way.

use super::*;

/// The manifest's explicit items by `(repository, id)`.
struct ItemIndex<'a>(HashMap<(&'a str, &'a str), usize>);

impl<'a> ItemIndex<'a> {
    fn new(items: &'a [ItemSpec]) -> Self {
        ItemIndex(
            items
                .iter()
                .enumerate()
                .map(|(i, it)| ((it.repo.as_str(), it.id.as_str()), i))
                .collect(),
        )
    }

    fn get(&self, repo: &str, id: &str) -> Option<usize> {
        self.0.get(&(repo, id)).copied()
    }
}

/// The item `entry` of an item of repository `own` names: an item of `own` with that id first
/// (ids may hold `/`), else `repo/id` split at its first `/` (repository names hold none).
fn resolve_after(own: &str, entry: &str, index: &ItemIndex<'_>) -> Option<usize> {
    index.get(own, entry).or_else(|| {
        let (repo, id) = entry.split_once('/')?;
        index.get(repo, id)
    })
}

impl Cx {
    /// Every `after` entry names a known item, not the item itself, and no chain of them comes
    /// back to where it started.
    /// Each item's `after_items` is filled with what its entries name.
    pub(super) fn check_after(&mut self, items: &mut [ItemSpec]) {
        if items.iter().all(|it| it.after.is_empty()) {
            return;
        }
        let index = ItemIndex::new(items);
        let mut edges: Vec<Vec<(usize, usize)>> = vec![Vec::new(); items.len()];
        for (i, it) in items.iter().enumerate() {
            for (k, entry) in it.after.iter().enumerate() {
                let p = index_path(i, k);
                let span = it.after_spans.get(k).copied().unwrap_or(it.span);
                match resolve_after(&it.repo, entry, &index) {
                    Some(j) if j == i => self.err(
                        "cycle",
                        &p,
                        span,
                        format!("item `{}/{}` waits for itself", it.repo, it.id),
                    ),
                    Some(j) => edges[i].push((j, k)),
                    None => {
                        let mut known: Vec<String> = items
                            .iter()
                            .filter(|o| o.repo == it.repo)
                            .map(|o| o.id.clone())
                            .chain(items.iter().map(|o| format!("{}/{}", o.repo, o.id)))
                            .collect();
                        known.sort();
                        known.dedup();
                        let refs: Vec<&str> = known.iter().map(String::as_str).collect();
                        let help = match suggest(entry, &refs) {
                            Some(s) => format!("did you mean `{s}`?"),
                            None => "name an item of `items`: its id, for one of the same repository, or `repo/id`".into(),
                        };
                        self.err_help(
                            "unknown-item",
                            &p,
                            span,
                            format!(
                                "item `{}/{}` waits for `{entry}`, which is no item of `items`",
                                it.repo, it.id
                            ),
                            help,
                        );
                    }
                }
            }
        }
        let named: Vec<Vec<(String, String)>> = edges
            .iter()
            .map(|e| {
                e.iter()
                    .map(|&(j, _)| (items[j].repo.clone(), items[j].id.clone()))
                    .collect()
            })
            .collect();
        for cycle in cycles(&edges) {
            let (first, k) = cycle[0];
            let it = &items[first];
            let path: Vec<String> = cycle
                .iter()
                .map(|&(i, _)| format!("`{}/{}`", items[i].repo, items[i].id))
                .chain(std::iter::once(format!("`{}/{}`", it.repo, it.id)))
                .collect();
            self.err_help(
                "cycle",
                &index_path(first, k),
                it.after_spans.get(k).copied().unwrap_or(it.span),
                format!("`after` makes a cycle: {}", path.join(" → ")),
                "an item cannot wait, even through others, for itself: take one `after` out",
            );
        }
        drop(index);
        for (it, n) in items.iter_mut().zip(named) {
            it.after_items = n;
        }
    }
}

fn index_path(item: usize, k: usize) -> String {
    index(&child(&index("items", item), "after"), k)
}

/// Each cycle of the graph once, as `(item, the index of its `after` entry that leads on)` from
/// the item listed first in it. Iterative, so that a chain of any length cannot overflow the
/// stack.
fn cycles(edges: &[Vec<(usize, usize)>]) -> Vec<Vec<(usize, usize)>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut mark = vec![Mark::New; edges.len()];
    let mut found = Vec::new();
    for start in 0..edges.len() {
        if mark[start] != Mark::New {
            continue;
        }
        // The path from `start`: each item with the next of its edges to follow.
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        mark[start] = Mark::OnPath;
        while let Some(&mut (node, ref mut next)) = path.last_mut() {
            let Some(&(to, _)) = edges[node].get(*next) else {
                mark[node] = Mark::Done;
                path.pop();
                continue;
            };
            *next += 1;
            match mark[to] {
                Mark::New => {
                    mark[to] = Mark::OnPath;
                    path.push((to, 0));
                }
                Mark::OnPath => {
                    let from = path.iter().position(|&(n, _)| n == to).unwrap_or(0);
                    let mut cycle: Vec<(usize, usize)> = path[from..]
                        .iter()
                        .map(|&(n, nx)| (n, edges[n][nx - 1].1))
                        .collect();
                    // From the item listed first, so one cycle reads the same whichever way in.
                    let low = (0..cycle.len()).min_by_key(|&c| cycle[c].0).unwrap_or(0);
                    cycle.rotate_left(low);
                    found.push(cycle);
                }
                Mark::Done => {}
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::cycles;

    #[test]
    fn cycles_are_found_once_each_from_their_first_item() {
        // 0 → 1 → 2 → 0, and 3 → 4 → 3, and 5 → 0 (into a cycle, not one).
        let e = |v: &[usize]| v.iter().map(|&t| (t, 0)).collect::<Vec<_>>();
        let edges = vec![e(&[1]), e(&[2]), e(&[0]), e(&[4]), e(&[3]), e(&[0])];
        let found: Vec<Vec<usize>> = cycles(&edges)
            .into_iter()
            .map(|c| c.into_iter().map(|(n, _)| n).collect())
            .collect();
        assert_eq!(found, vec![vec![0, 1, 2], vec![3, 4]]);
        // A diamond is no cycle.
        let edges = vec![e(&[1, 2]), e(&[3]), e(&[3]), vec![]];
        assert!(cycles(&edges).is_empty());
        // A long chain does not overflow.
        let chain: Vec<Vec<(usize, usize)>> =
            (0..200_000).map(|i| e(&[i + 1])).chain([vec![]]).collect();
        assert!(cycles(&chain).is_empty());
    }
}
