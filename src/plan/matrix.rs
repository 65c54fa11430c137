//! A plan split into shards for a CI matrix (`plan --shards N --json`): which repositories and
//! how much pending work each shard has, by the shards of [`super::shard`].

/// A plan split into shards: what `plan --shards N --json` prints, a CI matrix.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(crate) struct ShardMatrix {
    /// Always `runner.matrix/v1`.
    pub schema: String,
    pub shards: u32,
    /// Pending items in all.
    pub pending: usize,
    /// The shards with pending work (a matrix entry each); those without are left out.
    pub include: Vec<ShardEntry>,
}

#[derive(serde::Serialize, schemars::JsonSchema)]
pub(crate) struct ShardEntry {
    /// `K/N`, as `apply --shard` takes it.
    pub shard: String,
    pub index: u32,
    pub repositories: Vec<String>,
    pub pending: usize,
    /// The shard's expected work: the sum of its pending items' estimates (from history).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate_ms: Option<u64>,
}

/// Which repositories and pending items each of `n` shards has.
pub(crate) fn shard_matrix(plan: &super::model::Plan, n: u32) -> ShardMatrix {
    let mut entries: Vec<ShardEntry> = (0..n)
        .map(|k| ShardEntry {
            shard: super::shard::Shard { index: k, total: n }.to_string(),
            index: k,
            repositories: Vec::new(),
            pending: 0,
            estimate_ms: None,
        })
        .collect();
    let mut of_repo = std::collections::HashMap::new();
    for r in &plan.repositories {
        let identity = match r.source {
            crate::manifest::SourceKind::Url => r.location.as_str(),
            _ => r.name.as_str(),
        };
        let k = super::shard::of(identity, n) as usize;
        entries[k].repositories.push(r.name.clone());
        of_repo.insert(r.name.as_str(), k);
    }
    let mut pending = 0;
    for it in plan
        .items
        .iter()
        .filter(|i| i.state == crate::vocab::ItemState::Pending)
    {
        let k = of_repo
            .get(it.repo.as_str())
            .copied()
            .unwrap_or_else(|| super::shard::of(&it.repo, n) as usize);
        let e = &mut entries[k];
        e.pending += 1;
        if let Some(ms) = it.estimate_ms {
            e.estimate_ms = Some(e.estimate_ms.unwrap_or(0) + ms);
        }
        pending += 1;
    }
    ShardMatrix {
        schema: "runner.matrix/v1".into(),
        shards: n,
        pending,
        include: entries.into_iter().filter(|e| e.pending > 0).collect(),
    }
}
