//! Spend caps across runs: `budget.daily_usd` counts what workers reported over every run of the
//! manifest in the UTC day. Once reached, no new item is admitted and the rest are held `budget`
//! with the time the day ends; `status` shows spend against the cap; the next day admits again
//! (the ledger's spend moved to yesterday stands in for the clock).

use crate::common;

use common::{outcomes, repo, runner, stderr};
use std::path::Path;

fn apply(root: &Path) -> (i32, serde_json::Value, String) {
    let out = runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress", "--json"])
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), report, stderr(&out))
}

/// What `runner status m.yaml` prints in `root`.
fn status(root: &Path) -> String {
    let st = runner()
        .current_dir(root)
        .args(["status", "m.yaml"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&st.stdout).into_owned()
}

#[test]
fn a_daily_cap_over_several_runs_holds_the_rest_until_the_day_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    repo(&root.join("api"));
    // Each item costs $2, as its worker reports.
    std::fs::write(
        root.join("work.sh"),
        "echo '{\"cost_usd\": 2}' > \"$RUNNER_USAGE\"; echo \"$RUNNER_ITEM\" >> ran.txt\n",
    )
    .unwrap();
    let mut m = format!(
        "version: 1\nname: capped\ncapacity: {{workers: 1}}\nrepositories: [{{path: api}}]\nbudget: {{daily_usd: 5}}\nworker:\n  run: [sh, {}]\nitems:\n",
        root.join("work.sh").display()
    );
    for id in ["a", "b", "c", "d", "e", "f"] {
        m.push_str(&format!("  - {{repo: api, id: {id}}}\n"));
    }
    std::fs::write(root.join("m.yaml"), m).unwrap();

    // Run 1: $2 an item; the third reaches the cap; the rest are held, not cancelled.
    let (code, report, err) = apply(root);
    assert_eq!(code, 5, "{err}");
    assert_eq!(report["ending"], "budget", "{report}");
    let got = outcomes(&report);
    let ran: Vec<_> = got.iter().filter(|o| o.1 == "completed").collect();
    let held: Vec<_> = got
        .iter()
        .filter(|o| o.1 == "held" && o.2 == "budget")
        .collect();
    assert_eq!((ran.len(), held.len()), (3, 3), "{got:?}");
    assert!(
        err.contains("the daily cap of $5.00") && err.contains("$6.00 reported"),
        "{err}"
    );

    // `status` shows the day's spend against the cap.
    let text = status(root);
    assert!(
        text.contains("spend, daily: $6.00 of the $5.00 cap (it resets at "),
        "{text}"
    );

    // `plan` tells beforehand: the three left would be held `budget`.
    let out = runner()
        .current_dir(root)
        .args(["plan", "m.yaml", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let held: Vec<&serde_json::Value> = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["reason"] == "budget")
        .collect();
    assert_eq!(held.len(), 3, "{plan}");
    assert!(plan["counts"].get("pending").is_none(), "{plan}");
    let detail = held[0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("the daily cap of $5.00 (it resets at ")
            && detail.contains("$6.00 reported"),
        "{detail}"
    );

    // Run 2, the same day: nothing starts; what is left is held, saying when the day ends.
    let (code, report, err) = apply(root);
    assert_eq!(code, 5, "{err}");
    let got = outcomes(&report);
    let left: Vec<_> = got.iter().filter(|o| o.1 != "skipped").collect();
    assert_eq!(left.len(), 3, "{got:?}");
    assert!(
        left.iter().all(|o| o.1 == "held" && o.2 == "budget"),
        "{got:?}"
    );
    let cause = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["outcome"] == "held")
        .and_then(|i| i["cause"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        cause.contains("resets at ") && cause.contains("T00:00:00Z"),
        "{cause}"
    );
    let ran = std::fs::read_to_string(root.join("api/ran.txt")).unwrap_or_default();
    assert_eq!(ran.lines().count(), 3, "nothing ran in run 2: {ran}");

    // The next day: yesterday's spend no longer counts; the rest runs.
    let db = rusqlite::Connection::open(root.join(".runner/state.db")).unwrap();
    db.execute("UPDATE spend SET day = '2000-01-01'", [])
        .unwrap();
    drop(db);
    let (code, report, err) = apply(root);
    assert_eq!(code, 5, "the three left reach the cap again: {err}");
    let done = outcomes(&report)
        .into_iter()
        .filter(|o| o.1 == "completed")
        .count();
    assert_eq!(done, 3, "{report}");
    // The history page plots what each run cost: runs 1 and 3 spent $6.00 each; run 2 started
    // nothing and reported no cost (no bar).
    let page = std::fs::read_to_string(root.join("runner-reports/index.html")).unwrap();
    assert!(
        page.contains("aria-label=\"cost of each of the last 3 runs\""),
        "{page}"
    );
    assert_eq!(page.matches("<rect class=\"cost\"").count(), 2, "{page}");
    assert!(page.contains("— $6.00</title>"), "{page}");
}

#[test]
fn a_budget_with_no_amount_is_a_validate_error() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    repo(&root.join("api"));
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: capped\nrepositories: [{path: api}]\nbudget: {}\nworker: {run: 'true'}\n",
    )
    .unwrap();
    let out = runner()
        .current_dir(root)
        .args(["validate", "m.yaml"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("daily_usd") && err.contains("m.yaml"), "{err}");
}

/// A provider that refuses the key bills nothing: the refused attempt's worker, which wrote no
/// usage, does not make the budget unkeepable. The items go on with the next model, whose spend
/// counts.
#[test]
fn a_refused_key_spends_nothing_toward_the_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    repo(&root.join("api"));
    std::fs::write(
        root.join("work.sh"),
        "if [ \"$RUNNER_MODEL\" = opus ]; then echo 'Error: 401 invalid x-api-key' >&2; exit 77; fi\necho '{\"cost_usd\": 1}' > \"$RUNNER_USAGE\"; echo \"$RUNNER_ITEM\" >> ran.txt\n",
    )
    .unwrap();
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: refused\ncapacity: {{workers: 1}}\nrepositories: [{{path: api}}]\nmodels: {{primary: opus, fallbacks: [sonnet]}}\nbudget: {{daily_usd: 5}}\nworker:\n  run: [sh, {}]\nitems: [{{repo: api, id: a}}, {{repo: api, id: b}}]\n",
            root.join("work.sh").display()
        ),
    )
    .unwrap();
    let (code, report, err) = apply(root);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("usage unknown"), "{err}");
    assert_eq!(
        outcomes(&report)
            .iter()
            .filter(|o| o.1 == "completed")
            .count(),
        2,
        "{report}"
    );
    let text = status(root);
    assert!(
        text.contains("spend, daily: $2.00 of the $5.00 cap"),
        "{text}"
    );
}
