//! The SQLite ledger's own tests: claims, retention, migrations of old schemas, replay.

use super::SqliteLedger;
use super::conn::{WriteTx, exec};
use super::schema::MIGRATIONS;
use crate::events::Event;
use crate::ledger::*;
use crate::vocab::ItemOutcome;
use rusqlite::{Connection, params};
use std::path::Path;

fn key(item: &str) -> ItemKey {
    ItemKey {
        manifest: "m".into(),
        repo: "r".into(),
        item: item.into(),
        def_hash: "h".into(),
    }
}

/// Record item `item`'s result in run `run` (buffered, as the engine does).
fn finished(ledger: &mut SqliteLedger, run: &str, item: &str, outcome: ItemOutcome) {
    let ev = Event::ItemFinished {
        item: 0,
        outcome,
        reason: None,
        cause: None,
    };
    ledger
        .event(run, Some(&key(item)), &ev, &crate::support::clock::now())
        .unwrap();
}

fn run(ledger: &mut SqliteLedger, id: &str) {
    run_by(ledger, id, Holder::this_process());
}

fn run_by(ledger: &mut SqliteLedger, id: &str, holder: Holder) {
    ledger
        .begin_run(
            &RunRow {
                id: id.into(),
                manifest: "m".into(),
                manifest_path: "/m.yaml".into(),
                manifest_sha256: "x".into(),
                holder,
                started_by: "me".into(),
                started_at: crate::support::clock::now(),
                ended_at: None,
                ending: None,
                cause: None,
                stop_requested_by: None,
                stop_reason: None,
                containment: None,
                lapsed: false,
            },
            "{}",
            1,
            "/tmp",
        )
        .unwrap();
}

#[test]
fn a_live_claim_is_never_taken_and_a_dead_one_is() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
    run(&mut l, "a");
    run(&mut l, "b");
    let me = Holder::this_process();
    assert_eq!(l.claim(&key("x"), "a", &me).unwrap(), Claim::Claimed);
    assert_eq!(
        l.claim(&key("x"), "b", &me).unwrap(),
        Claim::HeldBy { run_id: "a".into() }
    );
    // A holder whose start time differs is a reused pid: dead.
    let ghost = Holder {
        start_time: me.start_time.map(|t| t + 1),
        pid_ns: None,
        ..me.clone()
    };
    assert_eq!(l.claim(&key("y"), "a", &ghost).unwrap(), Claim::Claimed);
    assert_eq!(l.claim(&key("y"), "b", &me).unwrap(), Claim::Claimed);
}

/// Retention keeping the latest run of manifest `m`, whatever the age of the others.
fn keep_latest(l: &mut SqliteLedger) -> super::super::Pruned {
    l.prune(&Retention {
        manifest: "m",
        keep_runs: 1,
        cutoff: "",
        at: &crate::support::clock::now(),
        spare: None,
        current: &Vec::new(),
    })
    .unwrap()
}

#[test]
fn pruning_keeps_each_items_latest_result_and_latest_completion() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
    // x: completed, halted, halted, then a live run; y: halted, completed, completed.
    let runs = [
        ("r1", ItemOutcome::Completed, ItemOutcome::Halted),
        ("r2", ItemOutcome::Halted, ItemOutcome::Completed),
        ("r3", ItemOutcome::Halted, ItemOutcome::Completed),
    ];
    for (id, x, y) in runs {
        run(&mut l, id);
        finished(&mut l, id, "x", x);
        finished(&mut l, id, "y", y);
        l.end_run(id, RunEnding::Drained, None, &crate::support::clock::now())
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    run(&mut l, "live");
    let pruned = keep_latest(&mut l);
    let mut gone: Vec<&str> = pruned.runs.iter().map(|(id, _)| id.as_str()).collect();
    gone.sort();
    assert_eq!(gone, ["r1", "r2", "r3"]);
    let left: Vec<(String, String)> = l
        .rows(
            "SELECT item, run_id FROM item_results ORDER BY item, run_id",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let left: Vec<(&str, &str)> = left.iter().map(|(i, r)| (i.as_str(), r.as_str())).collect();
    // x: r1's completion (its latest) and r3's halt (its latest result); y: r3's completion,
    // both at once.
    assert_eq!(left, [("x", "r1"), ("x", "r3"), ("y", "r3")]);
}

#[test]
fn a_dead_run_pruned_leaves_no_claim_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
    let me = Holder::this_process();
    // A run whose runner died mid-item (a reused pid: dead), with its claim still there.
    let ghost = Holder {
        start_time: me.start_time.map(|t| t + 1),
        pid_ns: None,
        ..me.clone()
    };
    run_by(&mut l, "dead", ghost.clone());
    assert_eq!(l.claim(&key("x"), "dead", &ghost).unwrap(), Claim::Claimed);
    std::thread::sleep(std::time::Duration::from_millis(5));
    run(&mut l, "live");
    assert_eq!(l.claim(&key("y"), "live", &me).unwrap(), Claim::Claimed);
    let claims = |l: &SqliteLedger| -> Vec<String> {
        l.rows("SELECT run_id FROM claims ORDER BY run_id", [], |r| {
            r.get(0)
        })
        .unwrap()
    };
    assert_eq!(claims(&l), ["dead", "live"]);
    let pruned = keep_latest(&mut l);
    assert_eq!(pruned.runs.len(), 1);
    assert_eq!(pruned.runs[0].0, "dead");
    assert_eq!(claims(&l), ["live"], "the live run's claim stays");
}

/// A ledger as a runner that knew only the first `version` migrations left it.
fn at_schema(path: &Path, version: usize) -> Connection {
    let c = Connection::open(path).unwrap();
    for sql in &MIGRATIONS[..version] {
        c.execute_batch(sql).unwrap();
    }
    c.execute_batch(&format!("PRAGMA user_version = {version}"))
        .unwrap();
    c
}

#[test]
fn a_first_schema_ledger_is_migrated_with_its_results() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    {
        let c = at_schema(&path, 1);
        for (run, outcome, at) in [
            ("r1", "failed", "2026-01-01T00:00:00.000Z"),
            ("r2", "completed", "2026-01-02T00:00:00.000Z"),
        ] {
            c.execute(
                "INSERT INTO item_results (manifest, repo, item, def_hash, run_id, outcome, ended_at)
                 VALUES ('m', 'r', 'x', 'h', ?1, ?2, ?3)",
                params![run, outcome, at],
            )
            .unwrap();
        }
    }
    let l = SqliteLedger::open(&path).unwrap();
    let version: i64 = l
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version as usize, MIGRATIONS.len());
    let past = l.past_outcomes("m").unwrap();
    assert_eq!(past.len(), 1);
    assert_eq!(past[0].1.outcome, ItemOutcome::Completed);
    assert_eq!(past[0].1.run_id, "r2");
    let rows: i64 = l
        .conn
        .query_row("SELECT count(*) FROM item_results", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 2, "every result survives the migration");
}

/// The items of a run's replayed events, in order.
fn replayed(ledger: &SqliteLedger, run: &str) -> Vec<usize> {
    let replay = ledger.run_events(run).unwrap().expect("the run is known");
    replay
        .events
        .into_iter()
        .map(|(_, ev)| match ev {
            Event::ItemStarted { item } => item,
            other => panic!("unexpected event {other:?}"),
        })
        .collect()
}

#[test]
fn interleaved_runs_replay_their_own_events_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
    let started = |l: &mut SqliteLedger, run: &str, item| {
        l.event(run, None, &Event::ItemStarted { item }, "now")
            .unwrap();
        l.flush().unwrap();
    };
    started(&mut l, "before", 99);
    run(&mut l, "a");
    started(&mut l, "a", 1);
    run(&mut l, "b");
    started(&mut l, "b", 10);
    started(&mut l, "a", 2);
    started(&mut l, "b", 11);
    l.end_run("a", RunEnding::Drained, None, "now").unwrap();
    started(&mut l, "b", 12);
    started(&mut l, "a", 3);
    assert_eq!(
        replayed(&l, "a"),
        [1, 2],
        "what came after its end is not its own"
    );
    assert_eq!(replayed(&l, "b"), [10, 11, 12]);
}

#[test]
fn a_second_schema_ledger_is_migrated_with_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    {
        let c = at_schema(&path, 2);
        for id in ["a", "b"] {
            c.execute(
                "INSERT INTO runs (id, manifest, manifest_path, manifest_sha256, host, pid,
                     started_by, started_at, workers, plan_json, run_dir)
                 VALUES (?1, 'm', '/m.yaml', 'x', 'h', 1, 'me', 'then', 1, '{}', '/tmp')",
                [id],
            )
            .unwrap();
        }
        // Written out of order: the keyed table kept them by run and sequence.
        for (run, seq, item) in [("b", 2, 11), ("a", 2, 2), ("a", 1, 1), ("b", 1, 10)] {
            let body = serde_json::to_string(&Event::ItemStarted { item }).unwrap();
            c.execute(
                "INSERT INTO events (run_id, seq, at, body) VALUES (?1, ?2, 'then', ?3)",
                params![run, seq, body],
            )
            .unwrap();
        }
    }
    let l = SqliteLedger::open(&path).unwrap();
    assert_eq!(replayed(&l, "a"), [1, 2]);
    assert_eq!(replayed(&l, "b"), [10, 11]);
}

#[test]
fn a_finished_item_releases_its_claim_and_is_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
    run(&mut l, "a");
    let me = Holder::this_process();
    l.claim(&key("x"), "a", &me).unwrap();
    finished(&mut l, "a", "x", ItemOutcome::Completed);
    assert_eq!(
        l.live_claims().unwrap().len(),
        1,
        "buffered until committed"
    );
    l.commit_results().unwrap();
    assert!(l.live_claims().unwrap().is_empty());
    let past = l.past_outcomes("m").unwrap();
    assert_eq!(past.len(), 1);
    assert_eq!(past[0].1.outcome, ItemOutcome::Completed);
}

#[test]
fn a_claim_commits_the_results_recorded_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut l = SqliteLedger::open(&path).unwrap();
    run(&mut l, "a");
    let me = Holder::this_process();
    l.claim(&key("x"), "a", &me).unwrap();
    finished(&mut l, "a", "x", ItemOutcome::Failed);
    let other = SqliteLedger::open(&path).unwrap();
    assert!(other.past_outcomes("m").unwrap().is_empty());
    assert_eq!(l.claim(&key("y"), "a", &me).unwrap(), Claim::Claimed);
    let past = other.past_outcomes("m").unwrap();
    assert_eq!(past.len(), 1, "the result went out with the claim");
    assert_eq!(past[0].1.outcome, ItemOutcome::Failed);
    let claims = other.live_claims().unwrap();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].2, "y");
}

#[test]
fn nothing_is_claimed_while_the_manifest_is_paused() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
    run(&mut l, "a");
    l.set_paused("m", "ops", Some("maintenance"), "2026-01-01T00:00:00.000Z")
        .unwrap();
    let me = Holder::this_process();
    match l.claim(&key("x"), "a", &me).unwrap() {
        Claim::Paused(why) => assert!(why.contains("ops") && why.contains("maintenance")),
        other => panic!("claimed while paused: {other:?}"),
    }
    assert!(l.live_claims().unwrap().is_empty());
    assert!(l.clear_paused("m").unwrap());
    assert_eq!(l.claim(&key("x"), "a", &me).unwrap(), Claim::Claimed);
}

#[test]
fn a_write_transaction_is_rolled_back_unless_committed() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
    let pause = |m: &str| {
        let tx = WriteTx::begin(&ledger.conn).unwrap();
        exec(
            &tx,
            "INSERT INTO pauses (manifest, paused_by, paused_at) VALUES (?1, 'me', 'now')",
            [m],
        )
        .unwrap();
        tx
    };
    drop(pause("dropped"));
    pause("kept").commit().unwrap();
    let names: Vec<String> = ledger
        .rows("SELECT manifest FROM pauses", [], |r| r.get(0))
        .unwrap();
    assert_eq!(names, ["kept"]);
}

#[test]
fn a_corrupt_file_is_an_error_and_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("state.db");
    std::fs::write(&p, b"this is not a database, and it must survive").unwrap();
    assert!(SqliteLedger::open(&p).is_err());
    assert_eq!(
        std::fs::read(&p).unwrap(),
        b"this is not a database, and it must survive"
    );
}

#[test]
fn told_not_to_wait_its_commits_leave_the_log_to_be_folded_by_a_flush() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut l = SqliteLedger::open(&path).unwrap();
    run(&mut l, "a");
    l.checkpoint().unwrap();
    let size = || std::fs::metadata(&path).unwrap().len();
    let at_start = size();
    let me = Holder::this_process();
    assert!(l.waits(false));
    // Well past SQLite's 1,000 pages of log, one commit a claim: none folds the log into the
    // database (a fold syncs the file, and these commits are made on the drain's loop).
    for i in 0..1500 {
        finished(&mut l, "a", &format!("before-{i}"), ItemOutcome::Completed);
        assert_eq!(
            l.claim(&key(&format!("x{i}")), "a", &me).unwrap(),
            Claim::Claimed
        );
    }
    assert_eq!(size(), at_start, "a commit folded the log");
    // The ledger's thread folds it, with the tick's flush, once it is that long.
    assert!(l.waits(true));
    l.flush_all().unwrap();
    assert!(size() > at_start, "the log was not folded");
}
