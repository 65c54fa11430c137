//! What every adapter command runner starts outside an item shares — a tracker's source or
//! write-back, a forge's pull-request state, a notifier: the command as the manifest writes it,
//! with only the variables and secrets its role is given; what it prints redacted of the
//! manifest's secrets; a failure said in one line.

use crate::engine::config;
use crate::manifest::LoadedManifest;
use crate::process::redact::Redactor;

/// The manifest's redactor: the values of its secrets (`env.secrets`), of passed variables and
/// `worker.env` entries whose names look secret, as runner's environment and the manifest give them.
pub(crate) fn redactor(loaded: &LoadedManifest) -> Redactor {
    let mut names: Vec<String> = Vec::new();
    let mut values: Vec<String> = Vec::new();
    let mut worker_envs = vec![&loaded.manifest.worker.env];
    for spec in &loaded.manifest.repositories {
        if let Some(w) = &spec.worker {
            worker_envs.push(&w.env);
        }
    }
    for env in worker_envs {
        values.extend(
            env.iter()
                .filter(|(k, _)| config::looks_secret(k))
                .map(|(_, v)| v.clone()),
        );
    }
    for entry in 0..loaded.manifest.repositories.len() {
        let eff = config::effective(loaded, entry);
        names.extend(eff.secrets.iter().cloned());
        names.extend(
            eff.env_pass
                .iter()
                .filter(|n| config::looks_secret(n))
                .cloned(),
        );
    }
    names.sort();
    names.dedup();
    values.extend(names.iter().filter_map(|n| std::env::var(n).ok()));
    Redactor::new(values)
}

/// A source's command (to read, or to write back), as written — no placeholders — in `dir` (the
/// manifest's folder, against which a relative program resolves), with only the manifest's
/// `env.pass` and the secrets `env.roles` gives `role` of runner's environment, and
/// `RUNNER_ROLE=gate`.
pub(crate) fn command(
    loaded: &LoadedManifest,
    run: &crate::manifest::CommandSpec,
    dir: &std::path::Path,
    role: crate::manifest::SecretRole,
) -> std::process::Command {
    let argv: Vec<String> = match run {
        crate::manifest::CommandSpec::Shell(s) => vec!["sh".into(), "-c".into(), s.clone()],
        crate::manifest::CommandSpec::Argv(v) => v.clone(),
    };
    let (program, args) = argv
        .split_first()
        .map_or(("true", &[][..]), |(p, a)| (p.as_str(), a));
    let program = if program.contains('/') && !program.starts_with('/') {
        dir.join(program).display().to_string()
    } else {
        program.to_string()
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).current_dir(dir).env_clear();
    let env = loaded.manifest.env.clone().unwrap_or_default();
    let (pass, secrets) = (env.pass(), env.secrets_for(role));
    for name in pass.iter().chain(&secrets) {
        if let Ok(v) = std::env::var(name) {
            cmd.env(name, v);
        }
    }
    cmd.env("RUNNER_ROLE", crate::vocab::Role::Gate.as_str())
        .stdin(std::process::Stdio::null());
    cmd
}

/// `<what> failed (exit 1): <its last line on stderr>`, escaped for a terminal.
pub(crate) fn failed(what: &str, out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.trim().lines().last().unwrap_or("");
    let code = out
        .status
        .code()
        .map_or_else(|| "a signal".to_string(), |c| format!("exit {c}"));
    if last.is_empty() {
        format!("{what} failed ({code})")
    } else {
        format!(
            "{what} failed ({code}): {}",
            crate::support::text::printable(last)
        )
    }
}
