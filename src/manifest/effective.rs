//! The effective configuration of one repository: the top level narrowed by its overrides.

use super::{Gate, LoadedManifest, Models, SecretRole, Worker, WorktreePrep};

#[derive(Clone, Debug)]
pub(crate) struct Effective {
    pub worker: Worker,
    pub gates: Vec<Gate>,
    pub models: Option<Models>,
    pub env_pass: Vec<String>,
    /// Every secret, whichever role it reaches (`secrets_for` says which).
    pub secrets: Vec<String>,
    /// The top level's `env.roles`.
    pub secret_roles: std::collections::BTreeMap<String, Vec<SecretRole>>,
    /// How a fresh worktree is made ready: the repository's `worktree`, else the top level's.
    pub worktree: WorktreePrep,
}

/// Merge the top level with the overrides of `repositories[entry]`. Validation has already
/// ensured the overrides only narrow.
pub(crate) fn effective(loaded: &LoadedManifest, entry: usize) -> Effective {
    let m = &loaded.manifest;
    let spec = &m.repositories[entry];
    let mut worker = m.worker.clone();
    if let Some(o) = &spec.worker {
        if let Some(run) = &o.run {
            worker.run = run.clone();
        }
        worker.timeout = o.timeout.or(worker.timeout);
        worker.grace = o.grace.or(worker.grace);
        worker.attempts = o.attempts.or(worker.attempts);
        for (k, v) in &o.env {
            worker.env.insert(k.clone(), v.clone());
        }
    }
    let gates = spec.gates.clone().unwrap_or_else(|| m.gates.clone());
    let models = match (&spec.models, &m.models) {
        (Some(r), Some(top)) => {
            let mut merged = r.clone();
            if merged.provider_failure.is_none() {
                merged.provider_failure = top.provider_failure.clone();
            }
            if merged.threshold.is_none() {
                merged.threshold = top.threshold;
            }
            for (model, price) in &top.prices {
                merged.prices.entry(model.clone()).or_insert(*price);
            }
            Some(merged)
        }
        (_, top) => top.clone(),
    };
    let top_env = m.env.clone().unwrap_or_default();
    let (env_pass, secrets) = match &spec.env {
        Some(r) => (
            r.pass.clone().unwrap_or_else(|| top_env.pass()),
            if r.secrets.is_empty() {
                top_env.secrets.clone()
            } else {
                r.secrets.clone()
            },
        ),
        None => (top_env.pass(), top_env.secrets.clone()),
    };
    let worktree = spec
        .worktree
        .clone()
        .or_else(|| m.worktree.clone())
        .unwrap_or_default();
    Effective {
        worker,
        gates,
        models,
        env_pass,
        secrets,
        secret_roles: top_env.roles.clone(),
        worktree,
    }
}

impl Effective {
    /// The secrets `role` gets (`env.roles`; by default every role but gates).
    pub(crate) fn secrets_for(&self, role: SecretRole) -> Vec<String> {
        self.secrets
            .iter()
            .filter(|s| {
                self.secret_roles
                    .get(*s)
                    .map_or(SecretRole::DEFAULT.contains(&role), |r| r.contains(&role))
            })
            .cloned()
            .collect()
    }
}
