//! Reading the pull requests earlier runs opened (`publish.state`): for each item of the plan
//! that was published with a pull request, the publish adapter asked where it stands now.

use crate::ledger::store::Store;
use crate::manifest::{CommandSpec, LoadedManifest};
use crate::plan::Plan;
use crate::plan::pull::{self, PrStatus, PullRequest, Pulls};

/// The state of every pull request of `plan`'s items that the ledger knows of; none without
/// `publish.state` or a ledger.
pub fn read(loaded: &LoadedManifest, plan: &Plan, ledger: Option<&Store>) -> Pulls {
    let mut out = Pulls::new();
    let (Some(publish), Some(ledger)) = (&loaded.manifest.publish, ledger) else {
        return out;
    };
    let Some(cmd) = &publish.state else {
        return out;
    };
    let Ok(published) = ledger.publications_of(&loaded.manifest.name) else {
        return out;
    };
    // What to ask: every published item of the plan with a pull request, in plan order.
    let mut asks = Vec::new();
    for it in &plan.items {
        let key = (it.repo.clone(), it.id.clone());
        let Some(p) = published.get(&key) else {
            continue;
        };
        let Some(url) = &p.url else {
            continue;
        };
        let Some(repo) = plan.repositories.iter().find(|r| r.name == it.repo) else {
            continue;
        };
        asks.push((key, url.clone(), repo.path.clone(), p));
    }
    let redactor = super::adapter::redactor(loaded);
    // Each answer is a forge round trip (a second or more through `gh`): asked a few at a time,
    // bounded so that a drain of hundreds of pull requests neither waits for each in turn nor
    // opens hundreds of connections at once.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let answers: Vec<std::sync::Mutex<Option<PullRequest>>> =
        asks.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let threads = asks.len().min(STATE_READS_AT_ONCE);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((key, url, path, p)) = asks.get(i) else {
                        break;
                    };
                    let read = state_of(loaded, cmd, path, &key.0, &key.1, &p.branch, url)
                        .map_err(|e| redactor.redact(&e));
                    let mut pr = answer(url, &p.head, p.rounds, read);
                    pr.answered = p.answered.clone();
                    *answers[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(pr);
                }
            });
        }
    });
    for ((key, ..), pr) in asks.iter().zip(answers) {
        if let Some(pr) = pr.into_inner().unwrap_or_else(|e| e.into_inner()) {
            out.insert(key.clone(), pr);
        }
    }
    out
}

/// How many `publish.state` commands run at once.
const STATE_READS_AT_ONCE: usize = 8;

/// What one reading of a pull request says: its state, or `unknown` with why it could not be read.
fn answer(
    url: &str,
    pushed: &Option<String>,
    rounds: u32,
    read: Result<pull::PrDoc, String>,
) -> PullRequest {
    match read {
        Ok(doc) => PullRequest {
            url: url.to_string(),
            state: doc.state,
            review: doc.review,
            checks: doc.checks,
            head: doc.head,
            pushed: pushed.clone(),
            detail: None,
            rounds,
            comments: doc.comments,
            failing_checks: doc.failing_checks,
            answered: Default::default(),
        },
        Err(why) => PullRequest {
            url: url.to_string(),
            state: PrStatus::Unknown,
            review: Default::default(),
            checks: Default::default(),
            head: None,
            pushed: pushed.clone(),
            detail: Some(why),
            rounds,
            comments: Vec::new(),
            failing_checks: Vec::new(),
            answered: Default::default(),
        },
    }
}

/// Run `publish.state` for one pull request, in the repository's checkout.
fn state_of(
    loaded: &LoadedManifest,
    cmd: &CommandSpec,
    repo_path: &std::path::Path,
    repo: &str,
    item: &str,
    branch: &str,
    url: &str,
) -> Result<pull::PrDoc, String> {
    let publish = loaded.manifest.publish.as_ref();
    let remote = publish.map_or("origin", |p| p.remote()).to_string();
    let lookup = |name: &str| match name {
        "branch" => Some(branch.to_string()),
        "item" => Some(item.to_string()),
        "repo" => Some(repo.to_string()),
        "remote" => Some(remote.clone()),
        _ => None,
    };
    let argv = crate::engine::config::command_argv(loaded, cmd, lookup)
        .map_err(|e| format!("`publish.state`: {e}"))?;
    let dir = loaded.path.parent().unwrap_or(std::path::Path::new("."));
    let mut c = super::adapter::command(
        loaded,
        &CommandSpec::Argv(argv),
        dir,
        crate::manifest::SecretRole::Publish,
    );
    c.current_dir(repo_path)
        .env("RUNNER_PR_URL", url)
        .env("RUNNER_BRANCH", branch)
        .env("RUNNER_REMOTE", &remote)
        .env("RUNNER_REPO", repo)
        .env("RUNNER_ITEM", item);
    let timeout = publish.map_or(std::time::Duration::from_secs(120), |p| p.timeout());
    let out = crate::process::spawn_helper_within(&mut c, timeout)
        .map_err(|e| format!("`publish.state` cannot be run: {e}"))?;
    if !out.status.success() {
        return Err(super::adapter::failed("`publish.state`", &out));
    }
    pull::parse(&String::from_utf8_lossy(&out.stdout)).map_err(|e| format!("`publish.state`: {e}"))
}
