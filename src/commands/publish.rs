//! `runner publish M`: publish what earlier runs completed and did not publish — a manifest that
//! gained a `publish` section, a push that was rejected, a branch that moved since.

use super::shared::load;
use crate::cli::PublishArgs;
use crate::events::Event;
use crate::plan::PlanOptions;
use crate::session::failure::{Ended, Failure};
use crate::ui::term::Ui;
use crate::vocab::ItemOutcome;
use crate::vocab::{EXIT_FAILURES, EXIT_OK};
use std::sync::Arc;

pub fn run(ui: &Ui, args: &PublishArgs) -> Ended {
    let loaded = load(&args.manifest)?;
    let Some(publish) = loaded.manifest.publish.clone() else {
        return Err(Failure::Invalid(format!(
            "`{}` has no `publish` section: nothing says where to publish",
            args.manifest.display()
        )));
    };
    let path = super::shared::state_path(&args.state, Some(&args.manifest));
    let mut ledger = super::shared::open_store(&path)?;
    let opts = PlanOptions {
        fresh: false,
        only: args.filter.only.clone(),
        items: args.filter.items.clone(),
        shard: None,
        // A tracker's items are among what earlier runs completed.
        sources: crate::session::sources::read_all(&loaded, Some(&ledger)),
    };
    // What the command learns of the repositories' git folders.
    let git = crate::git::Repos::default();
    let plan = crate::session::prepare::planned(ui, &git, &loaded, &opts)?;
    let name = loaded.manifest.name.clone();
    let past: std::collections::HashMap<_, _> = ledger.past_outcomes(&name)?.into_iter().collect();
    let published = ledger.publications_of(&name)?;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            return Err(Failure::internal(format_args!(
                "cannot start the runtime: {e}"
            )));
        }
    };
    crate::process::become_subreaper();
    let redactor = Arc::new(crate::session::adapter::redactor(&loaded));
    let token = uuid::Uuid::new_v4().simple().to_string();
    let (_stop_tx, stop_rx) = tokio::sync::watch::channel(crate::process::Stop::Run);
    let (mut done, mut failed, mut current) = (0usize, 0usize, 0usize);
    for it in &plan.items {
        let Some(branch) = &it.branch else { continue };
        let key = crate::plan::past::item_key(&name, it);
        let Some(past) = past.get(&key) else { continue };
        // A tracker that cannot be read is not published for.
        if it.reason == Some(crate::vocab::HoldReason::SourceUnreadable) {
            ui.warn(format_args!(
                "{}/{}: not published: {}",
                it.repo,
                it.id,
                it.detail
                    .as_deref()
                    .unwrap_or("its source could not be read")
            ));
            failed += 1;
            continue;
        }
        if past.outcome != ItemOutcome::Completed {
            continue;
        }
        let Some(repo) = plan.repositories.iter().find(|r| r.name == it.repo) else {
            continue;
        };
        let before = published.get(&(it.repo.clone(), it.id.clone()));
        let tip = crate::git::branch_tip(&git, &repo.path, branch).ok();
        if tip.is_none() {
            ui.warn(format_args!(
                "{}/{}: branch `{branch}` is gone; nothing to publish",
                it.repo, it.id
            ));
            continue;
        }
        if let Some(p) = before
            && p.head.is_some()
            && p.head == tip
        {
            current += 1;
            continue;
        }
        let logs = std::env::temp_dir().join(format!("runner-publish-{token}"));
        let ask = Ask {
            loaded: &loaded,
            git: &git,
            publish: &publish,
            token: &token,
            redactor: &redactor,
        };
        let request = ask.request(it, repo, branch, before, &past.run_id, &logs);
        let outcome = crate::support::blocking::as_event_loop(|| {
            runtime.block_on(crate::engine::publish::publish(request, stop_rx.clone()))
        });
        let ev = Event::Published {
            item: 0,
            remote: publish.remote().to_string(),
            branch: branch.clone(),
            pushed: outcome.pushed,
            head: outcome.head.clone(),
            url: outcome.url.clone(),
            error: outcome.error.clone(),
            answered: None,
            source: crate::engine::publish::source_of(it),
        };
        // Recorded with the run that completed the item: the next publish and apply see it.
        ledger
            .event(&past.run_id, Some(&key), &ev, &crate::support::clock::now())
            .and_then(|()| ledger.flush_all())?;
        match (&outcome.error, &outcome.url) {
            (Some(e), _) => {
                failed += 1;
                ui.error(format_args!("{}/{}: {e}", it.repo, it.id));
            }
            (None, url) => {
                done += 1;
                eprintln!(
                    "runner: {}/{} published `{branch}`{}",
                    it.repo,
                    it.id,
                    url.as_deref().map(|u| format!(": {u}")).unwrap_or_default()
                );
            }
        }
        let _ = std::fs::remove_dir_all(&logs);
    }
    eprintln!(
        "runner: {done} published, {current} already up to date, {failed} failed — exit {}",
        if failed > 0 { EXIT_FAILURES } else { EXIT_OK }
    );
    Ok(if failed > 0 { EXIT_FAILURES } else { EXIT_OK })
}

/// What every publication of the command shares.
struct Ask<'a> {
    loaded: &'a crate::manifest::LoadedManifest,
    git: &'a crate::git::Repos,
    publish: &'a crate::manifest::Publish,
    token: &'a str,
    redactor: &'a Arc<crate::process::redact::Redactor>,
}

impl<'a> Ask<'a> {
    /// The publication of item `it`'s branch, which run `run_id` completed; its command's
    /// output and body file go under `logs`.
    fn request(
        &self,
        it: &'a crate::plan::ItemPlan,
        repo: &'a crate::plan::RepoPlan,
        branch: &'a str,
        before: Option<&'a crate::ledger::Publication>,
        run_id: &str,
        logs: &std::path::Path,
    ) -> crate::engine::publish::Request<'a> {
        let eff = crate::engine::config::effective(self.loaded, repo.entry);
        let env: Vec<(String, String)> = eff
            .env_pass
            .iter()
            .chain(&eff.secrets_for(crate::manifest::SecretRole::Publish))
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v)))
            .collect();
        crate::engine::publish::Request {
            loaded: self.loaded,
            git: self.git,
            publish: self.publish,
            repo: &it.repo,
            repo_path: &repo.path,
            item: &it.id,
            branch,
            previous_url: before.and_then(|p| p.url.as_deref()),
            review_round: None,
            title: format!("runner: {}", it.id),
            body: format!(
                "Work item `{}` in `{}`, completed by runner (run `{run_id}`).\n",
                it.id, it.repo
            ),
            env,
            logs: logs.join(&it.repo).join(&it.id),
            token: self.token,
            redactor: Arc::clone(self.redactor),
        }
    }
}
