//! The environment of every spawned worker and gate, built purely from what it is handed.
//!
//! A child gets exactly: the variables of runner's own environment named in `env.pass` or
//! `env.secrets` (those that are set), then the worker's `env` (workers only), then runner's
//! defaults for what neither set (`CARGO_TARGET_DIR` for an item in a worktree), then the
//! `RUNNER_*` set (`RUNNER_FEEDBACK` when there is a failure to hand on). Each name appears once; a later source wins over an earlier one, so no entry
//! of `env.pass` or `worker.env` can stand in for a `RUNNER_*` variable. (Duplicates would be
//! ambiguous: `getenv` returns the first, a shell the last.)

use crate::vocab::Role;
use std::path::Path;

/// The `RUNNER_*` facts of one spawn.
#[derive(Clone, Debug)]
pub(crate) struct RunnerVars<'a> {
    pub run_id: &'a str,
    pub repo: &'a str,
    pub repo_path: &'a str,
    pub item: &'a str,
    pub model: Option<&'a str>,
    pub attempt: u32,
    pub role: Role,
    pub gate: Option<&'a str>,
    pub token: &'a str,
    pub max_workers: u32,
    /// How the previous attempt failed (of this run, or of the previous run for a rerun's
    /// first attempt).
    pub feedback: Option<&'a Path>,
    /// Where a worker may write what it used (`RUNNER_USAGE`).
    pub usage: Option<&'a Path>,
    /// A tracker item's brief (`RUNNER_BRIEF`).
    pub brief: Option<&'a Path>,
    /// Variables runner sets unless `env.pass` or the worker's `env` did (a build cache per
    /// repository for items in worktrees).
    pub defaults: &'a [(String, String)],
    /// The item's private temporary folder, when it has one: `TMPDIR`, whatever `env.pass`
    /// says.
    pub tmpdir: Option<&'a Path>,
    /// What confines it, in words, when the kernel confines its files (`RUNNER_SANDBOX`): an
    /// agent CLI's adapter may then leave its own sandbox off.
    pub sandbox: Option<&'a str>,
    /// Its clients reach the network through runner's proxy (`sandbox.network: [hosts…]`).
    pub proxy: bool,
}

/// The child's environment. `outer` reads runner's own environment; `worker_env` is the
/// worker's `env` with its templates rendered (empty for gates).
pub(crate) fn child_env(
    outer: impl Fn(&str) -> Option<String>,
    pass: &[String],
    secrets: &[String],
    worker_env: &[(String, String)],
    v: &RunnerVars<'_>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    fn put(env: &mut Vec<(String, String)>, k: &str, val: String) {
        env.retain(|(name, _)| name != k);
        env.push((k.to_string(), val));
    }
    for name in pass.iter().chain(secrets) {
        if let Some(val) = outer(name) {
            put(&mut env, name, val);
        }
    }
    if v.role == Role::Worker {
        for (k, val) in worker_env {
            put(&mut env, k, val.clone());
        }
    }
    for (k, val) in v.defaults {
        if !env.iter().any(|(name, _)| name == k) {
            env.push((k.clone(), val.clone()));
        }
    }
    let mut set = |k: &str, val: String| put(&mut env, k, val);
    if let Some(t) = v.tmpdir {
        set("TMPDIR", t.to_string_lossy().to_string());
    }
    if let Some(s) = v.sandbox {
        set("RUNNER_SANDBOX", s.to_string());
    }
    if v.proxy {
        for (k, val) in crate::process::egress::proxy_env() {
            set(&k, val);
        }
    }
    set("RUNNER_RUN_ID", v.run_id.to_string());
    set("RUNNER_REPO", v.repo.to_string());
    set("RUNNER_REPO_PATH", v.repo_path.to_string());
    set("RUNNER_ITEM", v.item.to_string());
    set("RUNNER_MODEL", v.model.unwrap_or_default().to_string());
    set("RUNNER_ATTEMPT", v.attempt.to_string());
    set("RUNNER_ROLE", v.role.as_str().to_string());
    set("RUNNER_TOKEN", v.token.to_string());
    set("RUNNER_MAX_WORKERS", v.max_workers.to_string());
    if let Some(g) = v.gate {
        set("RUNNER_GATE", g.to_string());
    }
    if let Some(f) = v.feedback {
        set("RUNNER_FEEDBACK", f.to_string_lossy().to_string());
    }
    if let Some(u) = v.usage {
        set("RUNNER_USAGE", u.to_string_lossy().to_string());
    }
    if let Some(b) = v.brief {
        set("RUNNER_BRIEF", b.to_string_lossy().to_string());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    const RUNNER_SET: &[&str] = &[
        "RUNNER_RUN_ID",
        "RUNNER_REPO",
        "RUNNER_REPO_PATH",
        "RUNNER_ITEM",
        "RUNNER_MODEL",
        "RUNNER_ATTEMPT",
        "RUNNER_ROLE",
        "RUNNER_TOKEN",
        "RUNNER_MAX_WORKERS",
    ];

    fn vars(role: Role, attempt: u32, feedback: Option<&Path>) -> RunnerVars<'_> {
        RunnerVars {
            run_id: "run-1",
            repo: "api",
            repo_path: "/w/api",
            item: "fix",
            model: Some("m"),
            attempt,
            role,
            gate: (role == Role::Gate).then_some("test"),
            token: "tok",
            max_workers: 3,
            feedback,
            usage: None,
            brief: None,
            defaults: &[],
            tmpdir: None,
            sandbox: None,
            proxy: false,
        }
    }

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[A-Z]{1,3}",
            Just("PATH".to_string()),
            Just("RUNNER_ROLE".to_string()),
            Just("RUNNER_TOKEN".to_string()),
        ]
    }

    #[test]
    fn a_gate_gets_no_worker_env_and_names_its_gate() {
        let outer = |k: &str| (k == "PATH").then(|| "/bin".to_string());
        let env = child_env(
            outer,
            &["PATH".into(), "HOME".into()],
            &[],
            &[("MODE".into(), "batch".into())],
            &vars(Role::Gate, 1, None),
        );
        let m: BTreeMap<_, _> = env.into_iter().collect();
        assert_eq!(m["PATH"], "/bin");
        assert!(!m.contains_key("HOME"), "unset variables are not invented");
        assert!(!m.contains_key("MODE"), "worker env reached a gate");
        assert_eq!(m["RUNNER_ROLE"], "gate");
        assert_eq!(m["RUNNER_GATE"], "test");
        assert!(!m.contains_key("RUNNER_FEEDBACK"));
    }

    #[test]
    fn feedback_is_handed_on_when_there_is_some() {
        let f = Path::new("/logs/1-feedback.txt");
        let first = child_env(|_| None, &[], &[], &[], &vars(Role::Worker, 1, None));
        assert!(!first.iter().any(|(k, _)| k == "RUNNER_FEEDBACK"));
        let second = child_env(|_| None, &[], &[], &[], &vars(Role::Worker, 2, Some(f)));
        assert!(
            second
                .iter()
                .any(|(k, v)| k == "RUNNER_FEEDBACK" && v == "/logs/1-feedback.txt")
        );
    }

    proptest! {
        #[test]
        fn exactly_pass_secrets_worker_env_and_the_runner_set(
            outer in proptest::collection::btree_map(name(), "[a-z]{0,4}", 0..8),
            pass in proptest::collection::vec(name(), 0..6),
            secrets in proptest::collection::vec(name(), 0..4),
            worker_env in proptest::collection::vec((name(), "[a-z]{0,4}"), 0..5),
            gate in any::<bool>(),
        ) {
            let role = if gate { Role::Gate } else { Role::Worker };
            let v = vars(role, 1, None);
            let env = child_env(|k| outer.get(k).cloned(), &pass, &secrets, &worker_env, &v);

            let names: Vec<&String> = env.iter().map(|(k, _)| k).collect();
            let unique: BTreeSet<&String> = names.iter().copied().collect();
            prop_assert_eq!(names.len(), unique.len(), "a name twice: {:?}", names);

            let mut want: BTreeSet<String> = pass
                .iter()
                .chain(&secrets)
                .filter(|n| outer.contains_key(*n))
                .cloned()
                .collect();
            if !gate {
                want.extend(worker_env.iter().map(|(k, _)| k.clone()));
            }
            want.extend(RUNNER_SET.iter().map(|s| s.to_string()));
            if gate {
                want.insert("RUNNER_GATE".into());
            }
            let got: BTreeSet<String> = env.iter().map(|(k, _)| k.clone()).collect();
            prop_assert_eq!(&got, &want);

            let m: BTreeMap<String, String> = env.into_iter().collect();
            // The runner set wins over everything; the worker's env over passed variables.
            prop_assert_eq!(&m["RUNNER_ROLE"], if gate { "gate" } else { "worker" });
            prop_assert_eq!(&m["RUNNER_TOKEN"], "tok");
            for (k, val) in &m {
                if k.starts_with("RUNNER_") {
                    continue;
                }
                let from_worker = worker_env.iter().rev().find(|(n, _)| n == k).filter(|_| !gate);
                match from_worker {
                    Some((_, w)) => prop_assert_eq!(val, w),
                    None => prop_assert_eq!(Some(val), outer.get(k)),
                }
            }
        }
    }
}
