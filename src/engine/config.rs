//! The effective configuration of one repository: the top level narrowed by its overrides.

use crate::manifest::template;
use crate::manifest::{CommandSpec, EnvPolicy, Gate, LoadedManifest, Models, Worker};

#[derive(Clone, Debug)]
pub struct Effective {
    pub worker: Worker,
    pub gates: Vec<Gate>,
    pub models: Option<Models>,
    pub env_pass: Vec<String>,
    pub secrets: Vec<String>,
}

/// Merge the top level with the overrides of `repositories[entry]`. Validation has already
/// ensured the overrides only narrow.
pub fn effective(loaded: &LoadedManifest, entry: usize) -> Effective {
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
            Some(merged)
        }
        (_, top) => top.clone(),
    };
    let top_env = m.env.clone().unwrap_or(EnvPolicy {
        pass: None,
        secrets: Vec::new(),
    });
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
    Effective {
        worker,
        gates,
        models,
        env_pass,
        secrets,
    }
}

/// Names of variables whose values are redacted even when not listed as secrets.
pub fn looks_secret(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    ["TOKEN", "SECRET", "PASSWORD", "KEY"]
        .iter()
        .any(|w| n.contains(w))
}

/// The argv of a command: templates rendered with `lookup`, a string run under `sh -c`, and a
/// relative program path resolved against the manifest's folder, like every other path.
pub fn command_argv(
    loaded: &LoadedManifest,
    cmd: &CommandSpec,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<String>, String> {
    let mut argv = match cmd {
        // Each value is shell-quoted, `{raw:NAME}` excepted: a value is never shell syntax.
        CommandSpec::Shell(s) => {
            let quoted = |name: &str| match name.strip_prefix(template::RAW) {
                Some(raw) => lookup(raw),
                None => lookup(name).map(|v| template::shell_quote(&v)),
            };
            vec!["sh".into(), "-c".into(), template::render(s, quoted)?]
        }
        CommandSpec::Argv(v) => v
            .iter()
            .map(|p| {
                template::render(p, |name| {
                    lookup(name.strip_prefix(template::RAW).unwrap_or(name))
                })
            })
            .collect::<Result<_, _>>()?,
    };
    if let Some(first) = argv.first_mut()
        && first.contains('/')
        && !first.starts_with('/')
    {
        *first = loaded.resolve(first).to_string_lossy().to_string();
    }
    Ok(argv)
}
