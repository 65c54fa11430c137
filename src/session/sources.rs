//! Reading the manifest's trackers (`sources`): each source's command run once, its output
//! checked, and what it gave the last time a run read it taken from the ledger, so that a source
//! that cannot be read holds its items instead of dropping them.

use crate::ledger::store::Store;
use crate::manifest::{LoadedManifest, SourceSpec};
use crate::plan::source::{self, SourceItem, SourceRead};
use std::time::Duration;

/// Read every source of `loaded`. `ledger` (when there is one) tells what each gave before.
pub fn read_all(loaded: &LoadedManifest, ledger: Option<&Store>) -> Vec<SourceRead> {
    let redactor = super::prepare::redactor(loaded);
    let published = ledger
        .and_then(|l| l.publications_of(&loaded.manifest.name).ok())
        .unwrap_or_default();
    loaded
        .manifest
        .sources
        .iter()
        .map(|spec| {
            // Its items with a pull request not yet seen merged or closed.
            let mut followed: Vec<source::Followed> = published
                .iter()
                .filter(|(_, p)| p.url.is_some() && p.settled.is_none())
                .filter_map(|((repo, item), p)| {
                    let s = p.source.as_ref().filter(|s| s.name == spec.name)?;
                    Some(source::Followed {
                        repo: repo.clone(),
                        item: item.clone(),
                        branch: p.branch.clone(),
                        source_id: s.id.clone(),
                        title: s.title.clone(),
                        url: s.url.clone(),
                    })
                })
                .collect();
            followed.sort_by(|a, b| (&a.repo, &a.item).cmp(&(&b.repo, &b.item)));
            let previous = ledger
                .and_then(|l| l.source_items(&loaded.manifest.name, &spec.name).ok())
                .flatten()
                .and_then(|json| source::parse(&json).ok())
                .unwrap_or_default();
            let items = read(loaded, spec).map_err(|e| redactor.redact(&e));
            SourceRead {
                name: spec.name.clone(),
                items,
                previous,
                followed,
            }
        })
        .collect()
}

/// Remember what each source that could be read gave: a later run that cannot read it holds
/// these.
pub fn remember(
    ledger: &mut Store,
    loaded: &LoadedManifest,
    reads: &[SourceRead],
) -> crate::ledger::Result<()> {
    let manifest = &loaded.manifest.name;
    // An issue may quote a secret's value: the ledger keeps it redacted, as every log does.
    let redactor = super::prepare::redactor(loaded);
    let at = crate::support::clock::now();
    for r in reads {
        let Ok(items) = &r.items else {
            continue;
        };
        let doc = source::ItemsDoc {
            schema: source::ITEMS_SCHEMA.to_string(),
            items: items.clone(),
        };
        let json = redactor.redact(&serde_json::to_string(&doc).unwrap_or_default());
        ledger.set_source_items(manifest, &r.name, &json, &at)?;
    }
    Ok(())
}

/// A source's command (to read, or to write back), as written — no placeholders — in `dir` (the
/// manifest's folder, against which a relative program resolves), with only the manifest's
/// `env.pass` and the secrets `env.roles` gives `role` of runner's environment, and
/// `RUNNER_ROLE=gate`.
pub(super) fn command(
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

/// Run one source's command in the manifest's folder, with the manifest's `env.pass` and
/// `env.secrets`, at most its `timeout`; its items, or why they cannot be had.
fn read(loaded: &LoadedManifest, spec: &SourceSpec) -> Result<Vec<SourceItem>, String> {
    let dir = loaded.path.parent().unwrap_or(std::path::Path::new("."));
    let mut cmd = command(loaded, &spec.run, dir, crate::manifest::SecretRole::Source);
    let program = cmd.get_program().to_string_lossy().to_string();
    cmd.env("RUNNER_SOURCE", &spec.name);
    let timeout = spec.timeout();
    let out =
        crate::process::spawn_helper_within(&mut cmd, timeout).map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => {
                format!("its command took longer than {}", shown(timeout))
            }
            std::io::ErrorKind::Interrupted => "its command was ended: the run is stopping".into(),
            _ => format!("its command `{program}` cannot be run: {e}"),
        })?;
    if !out.status.success() {
        return Err(failed("its command", &out));
    }
    let text = String::from_utf8(out.stdout).map_err(|_| "its output is not UTF-8".to_string())?;
    source::parse(&text)
}

/// Run source `spec`'s `check` (what `runner doctor` asks: the client present, authenticated,
/// the labels there): what it printed last when it passed, why when not; `None` without one.
pub fn check(loaded: &LoadedManifest, spec: &SourceSpec) -> Option<Result<String, String>> {
    let run = spec.check.as_ref()?;
    let dir = loaded.path.parent().unwrap_or(std::path::Path::new("."));
    let mut cmd = command(loaded, run, dir, crate::manifest::SecretRole::Source);
    cmd.env("RUNNER_SOURCE", &spec.name);
    let redactor = super::prepare::redactor(loaded);
    let out = match crate::process::spawn_helper_within(&mut cmd, spec.timeout()) {
        Ok(out) => out,
        Err(e) => return Some(Err(format!("its check cannot be run: {e}"))),
    };
    Some(if out.status.success() {
        let said = String::from_utf8_lossy(&out.stdout);
        Ok(redactor.redact(&crate::support::text::printable(
            said.trim().lines().last().unwrap_or("passed"),
        )))
    } else {
        Err(redactor.redact(&failed("its check", &out)))
    })
}

/// `<what> failed (exit 1): <its last line on stderr>`, escaped for a terminal.
pub(super) fn failed(what: &str, out: &std::process::Output) -> String {
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

fn shown(d: Duration) -> String {
    crate::manifest::format_duration(d)
}
