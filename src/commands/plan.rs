//! `runner plan M`: what `apply` would do, with no side effects.

use super::shared::load;
use crate::cli::PlanArgs;
use crate::plan::matrix::{ShardMatrix, shard_matrix};
use crate::plan::{ItemState, Plan, PlanOptions, RepoStatus};
use crate::session::failure::{Ended, Failure};
use crate::session::prepare;
use crate::session::standing::Standing;
use crate::ui::term::Ui;
use crate::vocab::{EXIT_FAILURES, EXIT_OK};

pub fn run(ui: &Ui, args: &PlanArgs) -> Ended {
    // With --detailed-exitcode, 2 means "work pending", so errors must be 1 (as Terraform).
    planned(ui, args).map_err(|f| {
        if args.detailed_exitcode {
            Failure::Detailed(Box::new(f))
        } else {
            f
        }
    })
}

fn planned(ui: &Ui, args: &PlanArgs) -> Ended {
    let loaded = load(&args.manifest)?;
    // The ledger is read as it stands: `plan` creates and changes no file.
    let state_path = super::shared::state_path(&args.state, Some(&args.manifest));
    let ledger = crate::ledger::store::open_snapshot(&state_path)?;
    let opts = PlanOptions {
        only: args.filter.only.clone(),
        items: args.filter.items.clone(),
        shard: args.shard,
        fresh: args.fresh,
        // The trackers are read (their commands only read); what they gave is not remembered.
        sources: crate::session::sources::read_all(&loaded, ledger.as_ref()),
    };
    // What the command learns of the repositories' git folders.
    let git = crate::git::Repos::default();
    let mut plan = prepare::planned(ui, &git, &loaded, &opts)?;
    // The worker bound `apply` would settle on: the order and the ETA are simulated with it.
    let workers = crate::session::bounds::settle_workers(ui, &loaded, args.workers)?;
    let standing = match &ledger {
        Some(l) => {
            Standing::read(l, &loaded.manifest.name).map(|s| s.with_pulls(&loaded, &plan, Some(l)))
        }
        // No ledger yet: quarantines kept with the repositories still hold.
        None => Ok(Standing::none()),
    };
    // What a run killed mid-item left in a repository's own checkout, proven its own: `apply`
    // saves it and resets the checkout, so its items are pending (nothing is touched here).
    if let Some(l) = &ledger {
        for (repo, p) in
            crate::engine::inplace::adopt(&git, &mut plan, |run| l.ended_or_unknown(run))
        {
            ui.warn(format_args!(
                "`{repo}`: run `{}` died while its item `{}` worked in the repository's own checkout; `apply` saves what it left uncommitted as a patch and resets the checkout",
                p.run_id, p.item
            ));
        }
    }
    standing?.lay_over(&mut plan, args.rerun, true);
    // A spend cap already spent holds what a run would not start.
    if let Some(l) = &ledger
        && let Some(limit) =
            crate::session::budget::budget_limit(&loaded, &**l, jiff::Timestamp::now())?
        && limit.cap.is_some()
        && limit.usd <= 0.0
    {
        crate::plan::past::budget_spent(&mut plan, &limit.spent_cause(0.0));
    }
    if let Err(e) = crate::session::standing::estimate(&mut plan, workers, ledger.as_ref()) {
        ui.warn(format_args!("no estimates: {e}"));
    }
    if let Some(n) = args.shards {
        let m = shard_matrix(&plan, n);
        if args.json {
            let s = serde_json::to_string_pretty(&m)
                .map_err(|e| Failure::internal(format_args!("cannot encode the shards: {e}")))?;
            outln!("{s}");
        } else {
            out!("{}", render_shards(&m));
        }
        return Ok(if args.detailed_exitcode && m.pending > 0 {
            PENDING
        } else {
            EXIT_OK
        });
    }
    if args.json {
        let s = serde_json::to_string_pretty(&plan)
            .map_err(|e| Failure::internal(format_args!("cannot encode the plan: {e}")))?;
        outln!("{s}");
    } else {
        out!("{}", render_table(&plan, &loaded.display_path));
        match crate::engine::confine::plan(
            &loaded,
            &state_path,
            &crate::plan::repos::workspace_dir(&loaded),
            Vec::new(),
        ) {
            Ok(s) => outln!("sandbox: {}", s.summary),
            Err(e) => outln!("sandbox: {e}"),
        }
        let env = loaded.manifest.env.clone().unwrap_or_default();
        for name in &env.secrets {
            let roles: Vec<&str> = env.roles_of(name).iter().map(|r| r.name()).collect();
            outln!("secret {name} reaches: {}", roles.join(", "));
        }
    }
    // A tracker that could not be read is never "nothing to do".
    if !plan.unreadable_sources.is_empty() {
        return Ok(EXIT_FAILURES);
    }
    let pending = plan.counts.get(&ItemState::Pending).copied().unwrap_or(0);
    if args.detailed_exitcode && pending > 0 {
        return Ok(PENDING);
    }
    Ok(EXIT_OK)
}

/// `plan --detailed-exitcode`: work is pending.
const PENDING: i32 = 2;

/// The shards as a table.
fn render_shards(m: &ShardMatrix) -> String {
    let mut out = format!(
        "{} pending item{} over {} shard{} ({} with work)\n",
        m.pending,
        if m.pending == 1 { "" } else { "s" },
        m.shards,
        if m.shards == 1 { "" } else { "s" },
        m.include.len()
    );
    out.push_str("SHARD      PENDING  REPOSITORIES\n");
    for e in &m.include {
        out.push_str(&format!(
            "{:<10} {:>7}  {}\n",
            e.shard,
            e.pending,
            e.repositories.join(", ")
        ));
    }
    out
}

/// What an item's work branch will be: continued (and how far behind its base), new, or
/// started anew with the old one kept.
fn branch_detail(plan: &Plan, it: &crate::plan::ItemPlan) -> String {
    let Some(b) = &it.branch else {
        return String::new();
    };
    let base = plan
        .repositories
        .iter()
        .find(|r| r.name == it.repo)
        .and_then(|r| r.base.clone())
        .unwrap_or_else(|| "HEAD".into());
    if let Some(backup) = &it.replaces {
        return format!("starts anew from `{base}`; the old `{b}` is kept as `{backup}`");
    }
    match (it.continues, it.behind) {
        (Some(true), Some(0)) => format!("continues `{b}`"),
        (Some(true), Some(n)) => format!(
            "continues `{b}`, {n} commit{} behind `{base}` (`--rerun … --fresh` starts it anew from there)",
            if n == 1 { "" } else { "s" }
        ),
        (Some(true), None) => format!("continues `{b}`"),
        _ => format!("new branch `{b}`"),
    }
}

/// The human plan: a header, the repositories that need attention, then one row per item.
pub(crate) fn render_table(plan: &Plan, display_path: &str) -> String {
    let mut out = String::new();
    let count = |s: ItemState| plan.counts.get(&s).copied().unwrap_or(0);
    out.push_str(&format!(
        "plan `{}` ({}), up to {} worker{} at once\n",
        plan.manifest.name,
        display_path,
        plan.capacity.workers,
        if plan.capacity.workers == 1 { "" } else { "s" }
    ));
    let missing = plan
        .repositories
        .iter()
        .filter(|r| r.status == RepoStatus::NotFound)
        .count();
    let to_clone = plan
        .repositories
        .iter()
        .filter(|r| r.status == RepoStatus::ToClone)
        .count();
    let n_repos = plan.repositories.len();
    let mut repo_line = format!(
        "{n_repos} repositor{}",
        if n_repos == 1 { "y" } else { "ies" }
    );
    if missing > 0 {
        repo_line.push_str(&format!(", {missing} not found"));
    }
    if to_clone > 0 {
        repo_line.push_str(&format!(", {to_clone} to clone"));
    }
    out.push_str(&format!(
        "{repo_line}; {} item{}: {} pending, {} done, {} held, {} skipped\n",
        plan.items.len(),
        if plan.items.len() == 1 { "" } else { "s" },
        count(ItemState::Pending),
        count(ItemState::Done),
        count(ItemState::Held),
        count(ItemState::Skipped),
    ));
    for r in &plan.repositories {
        if r.status != RepoStatus::Found
            && let Some(note) = &r.note
        {
            out.push_str(&format!("  repository `{}`: {note}\n", r.name));
        }
    }
    for s in &plan.unreadable_sources {
        out.push_str(&format!(
            "  source `{}` could not be read: {}\n",
            s.name, s.detail
        ));
    }
    if plan.items.is_empty() {
        // A source that could not be read may have had items: never "none found" then.
        out.push_str(if plan.unreadable_sources.is_empty() {
            "no items found\n"
        } else {
            "no items: a source could not be read\n"
        });
        return out;
    }
    if count(ItemState::Pending) > 0 {
        out.push_str(&match plan.expected {
            Some(e) => format!(
                "expected to take {} (the least any order could: {}); the repository with the most work left starts first\n",
                crate::manifest::format_approx(std::time::Duration::from_millis(e.makespan_ms)),
                crate::manifest::format_approx(std::time::Duration::from_millis(e.lower_bound_ms)),
            ),
            None => "no history yet: the repositories with the most pending items start first\n"
                .to_string(),
        });
    }
    out.push('\n');
    let rows: Vec<[String; 8]> = plan
        .items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            [
                (i + 1).to_string(),
                it.repo.clone(),
                it.id.clone(),
                if it.waiting_on.is_empty() {
                    it.state.as_str().to_string()
                } else {
                    "waiting".to_string()
                },
                it.start.map_or(String::new(), |s| s.to_string()),
                it.estimate_ms.map_or(String::new(), |ms| {
                    crate::manifest::format_approx(std::time::Duration::from_millis(ms))
                }),
                it.reason.map_or(String::new(), |r| r.as_str().to_string()),
                it.detail
                    .clone()
                    .unwrap_or_else(|| match &it.waiting_on[..] {
                        [] => branch_detail(plan, it),
                        deps => format!("after {}", deps.join(", ")),
                    }),
            ]
        })
        .collect();
    let header = [
        "#", "REPO", "ITEM", "STATE", "START", "EST", "REASON", "DETAIL",
    ];
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{:<w$}  ", c, w = widths[i]));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    out.push_str(&line(&header.map(String::from)));
    for r in &rows {
        out.push_str(&line(r));
    }
    out
}
