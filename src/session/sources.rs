//! Reading the manifest's trackers (`sources`): each source's command run once, its output
//! checked, and what it gave the last time a run read it taken from the ledger, so that a source
//! that cannot be read holds its items instead of dropping them.

use crate::ledger::store::Store;
use crate::manifest::{LoadedManifest, SourceSpec};
use crate::plan::source::{self, SourceItem, SourceRead};
use std::time::Duration;

/// Read every source of `loaded`. `ledger` (when there is one) tells what each gave before.
pub fn read_all(loaded: &LoadedManifest, ledger: Option<&Store>) -> Vec<SourceRead> {
    let redactor = super::adapter::redactor(loaded);
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
    let redactor = super::adapter::redactor(loaded);
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

/// Run one source's command in the manifest's folder, with the manifest's `env.pass` and
/// `env.secrets`, at most its `timeout`; its items, or why they cannot be had.
fn read(loaded: &LoadedManifest, spec: &SourceSpec) -> Result<Vec<SourceItem>, String> {
    let dir = loaded.path.parent().unwrap_or(std::path::Path::new("."));
    let mut cmd =
        super::adapter::command(loaded, &spec.run, dir, crate::manifest::SecretRole::Source);
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
        return Err(super::adapter::failed("its command", &out));
    }
    let text = String::from_utf8(out.stdout).map_err(|_| "its output is not UTF-8".to_string())?;
    source::parse(&text)
}

/// Run source `spec`'s `check` (what `runner doctor` asks: the client present, authenticated,
/// the labels there): what it printed last when it passed, why when not; `None` without one.
pub fn check(loaded: &LoadedManifest, spec: &SourceSpec) -> Option<Result<String, String>> {
    let run = spec.check.as_ref()?;
    let dir = loaded.path.parent().unwrap_or(std::path::Path::new("."));
    let mut cmd = super::adapter::command(loaded, run, dir, crate::manifest::SecretRole::Source);
    cmd.env("RUNNER_SOURCE", &spec.name);
    let redactor = super::adapter::redactor(loaded);
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
        Err(redactor.redact(&super::adapter::failed("its check", &out)))
    })
}

fn shown(d: Duration) -> String {
    crate::manifest::format_duration(d)
}
