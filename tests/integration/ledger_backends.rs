//! One suite of ledger behaviour, run against both backends: SQLite (a file) and PostgreSQL (a
//! real server, `tests/postgres/start.sh`). What the engine relies on — a claim is one run's,
//! a provably dead holder's claim is taken over, an item another run finished is not run again,
//! a pause stops every claim, results survive the process — must hold the same on both.

use crate::common;

use runner::events::Event;
use runner::ledger::pg::PgLedger;
use runner::ledger::sqlite::SqliteLedger;
use runner::ledger::{Claim, Holder, ItemKey, Ledger, RunRow};
use runner::vocab::{ItemOutcome, RunEnding};

/// Opens the same ledger again (a second process, or the same one later).
type Open = Box<dyn Fn() -> Box<dyn Ledger>>;

fn backends() -> Vec<(&'static str, Open, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut out: Vec<(&'static str, Open, tempfile::TempDir)> = vec![(
        "sqlite",
        Box::new(move || Box::new(SqliteLedger::open(&path).unwrap()) as Box<dyn Ledger>),
        dir,
    )];
    if let Some(url) = common::postgres_db() {
        out.push((
            "postgres",
            Box::new(move || Box::new(PgLedger::open(&url).unwrap()) as Box<dyn Ledger>),
            tempfile::tempdir().unwrap(),
        ));
    }
    out
}

fn key(item: &str) -> ItemKey {
    ItemKey {
        manifest: "m".into(),
        repo: "r".into(),
        item: item.into(),
        def_hash: "h".into(),
    }
}

fn now() -> String {
    runner::support::clock::now()
}

/// Begin run `id`, held by `holder`.
fn begin(l: &mut dyn Ledger, id: &str, holder: &Holder) {
    begin_at(l, id, holder, &now());
}

/// Begin run `id`, whose view of the ledger was taken at `looked`.
fn begin_at(l: &mut dyn Ledger, id: &str, holder: &Holder, looked: &str) {
    let run = RunRow {
        id: id.into(),
        manifest: "m".into(),
        manifest_path: "/m.yaml".into(),
        manifest_sha256: "0".into(),
        holder: holder.clone(),
        started_by: "test".into(),
        started_at: looked.to_string(),
        ended_at: None,
        ending: None,
        cause: None,
        stop_requested_by: None,
        stop_reason: None,
        containment: None,
        lapsed: false,
    };
    l.begin_run(&run, "{}", 1, "/reports/x").unwrap();
}

fn finish(l: &mut dyn Ledger, run: &str, k: &ItemKey, outcome: ItemOutcome) {
    l.event(
        run,
        Some(k),
        &Event::ItemFinished {
            item: 0,
            outcome,
            reason: None,
            cause: None,
        },
        &now(),
    )
    .unwrap();
    l.commit_results().unwrap();
}

/// A holder on this host whose process has exited: provably dead.
fn dead_holder() -> Holder {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    Holder {
        host: Holder::this_process().host,
        pid,
        start_time: Some(1),
        pid_ns: None,
    }
}

#[test]
fn a_claim_is_one_runs_until_its_result_releases_it() {
    for (name, open, _keep) in backends() {
        let me = Holder::this_process();
        let mut a = open();
        let mut b = open();
        begin(&mut *a, "run-a", &me);
        begin(&mut *b, "run-b", &me);
        assert_eq!(
            a.claim(&key("x"), "run-a", &me).unwrap(),
            Claim::Claimed,
            "{name}"
        );
        assert_eq!(
            b.claim(&key("x"), "run-b", &me).unwrap(),
            Claim::HeldBy {
                run_id: "run-a".into()
            },
            "{name}"
        );
        let live: Vec<String> = b
            .live_claims_of("m")
            .unwrap()
            .into_iter()
            .map(|(k, r)| format!("{}:{r}", k.item))
            .collect();
        assert_eq!(live, ["x:run-a"], "{name}");
        // The result releases the claim, and the item is done: not run again by b.
        finish(&mut *a, "run-a", &key("x"), ItemOutcome::Completed);
        assert!(b.live_claims_of("m").unwrap().is_empty(), "{name}");
        assert_eq!(
            b.claim(&key("x"), "run-b", &me).unwrap(),
            Claim::AlreadyDone {
                run_id: "run-a".into(),
                outcome: "completed".into()
            },
            "{name}"
        );
    }
}

#[test]
fn an_item_finished_after_a_run_looked_is_not_run_again() {
    for (name, open, _keep) in backends() {
        let me = Holder::this_process();
        let mut a = open();
        begin(&mut *a, "run-a", &me);
        assert_eq!(a.claim(&key("s"), "run-a", &me).unwrap(), Claim::Claimed);
        // Run b reads the past (its plan: `s` is pending), and plans for a while...
        let mut b = open();
        let looked = now();
        assert!(b.past_outcomes("m").unwrap().is_empty(), "{name}");
        std::thread::sleep(std::time::Duration::from_millis(20));
        // ...while run a finishes `s`...
        finish(&mut *a, "run-a", &key("s"), ItemOutcome::Completed);
        std::thread::sleep(std::time::Duration::from_millis(20));
        // ...and only then begins: `s` is not run a second time.
        begin_at(&mut *b, "run-b", &me, &looked);
        assert_eq!(
            b.claim(&key("s"), "run-b", &me).unwrap(),
            Claim::AlreadyDone {
                run_id: "run-a".into(),
                outcome: "completed".into()
            },
            "{name}"
        );
    }
}

#[test]
fn a_provably_dead_holders_claim_is_taken_over() {
    for (name, open, _keep) in backends() {
        let dead = dead_holder();
        let me = Holder::this_process();
        let mut a = open();
        begin(&mut *a, "run-dead", &dead);
        assert_eq!(
            a.claim(&key("y"), "run-dead", &dead).unwrap(),
            Claim::Claimed
        );
        assert!(!a.run_is_live("run-dead").unwrap(), "{name}");
        let mut b = open();
        begin(&mut *b, "run-b", &me);
        assert!(b.run_is_live("run-b").unwrap(), "{name}");
        assert_eq!(
            b.claim(&key("y"), "run-b", &me).unwrap(),
            Claim::Claimed,
            "{name}"
        );
        let live = b.live_claims_of("m").unwrap();
        assert_eq!(live.len(), 1, "{name}");
        assert_eq!(live[0].1, "run-b", "{name}");
    }
}

#[test]
fn a_pause_stops_every_claim_until_it_is_lifted() {
    for (name, open, _keep) in backends() {
        let me = Holder::this_process();
        let mut a = open();
        begin(&mut *a, "run-a", &me);
        let mut admin = open();
        admin
            .set_paused("m", "ops", Some("deploy freeze"), &now())
            .unwrap();
        assert!(
            a.paused("m").unwrap().unwrap().contains("deploy freeze"),
            "{name}"
        );
        match a.claim(&key("z"), "run-a", &me).unwrap() {
            Claim::Paused(why) => assert!(why.contains("paused by ops"), "{name}: {why}"),
            other => panic!("{name}: {other:?}"),
        }
        assert!(admin.clear_paused("m").unwrap(), "{name}");
        assert_eq!(
            a.claim(&key("z"), "run-a", &me).unwrap(),
            Claim::Claimed,
            "{name}"
        );
    }
}

#[test]
fn results_outlive_the_process_and_the_latest_decides() {
    for (name, open, _keep) in backends() {
        let me = Holder::this_process();
        {
            let mut a = open();
            begin(&mut *a, "run-1", &me);
            a.claim(&key("w"), "run-1", &me).unwrap();
            finish(&mut *a, "run-1", &key("w"), ItemOutcome::Halted);
            a.end_run("run-1", RunEnding::Drained, None, &now())
                .unwrap();
        }
        {
            let mut a = open();
            begin(&mut *a, "run-2", &me);
            assert_eq!(a.claim(&key("w"), "run-2", &me).unwrap(), Claim::Claimed);
            finish(&mut *a, "run-2", &key("w"), ItemOutcome::Completed);
            a.end_run("run-2", RunEnding::Drained, None, &now())
                .unwrap();
        }
        let l = open();
        let past = l.past_outcomes("m").unwrap();
        assert_eq!(past.len(), 1, "{name}");
        assert_eq!(past[0].1.outcome, ItemOutcome::Completed, "{name}");
        assert_eq!(past[0].1.run_id, "run-2", "{name}");
        assert!(
            !l.run_is_live("run-2").unwrap(),
            "an ended run is not live: {name}"
        );
    }
}

#[test]
fn an_ended_runs_unreleased_claims_go_with_it() {
    for (name, open, _keep) in backends() {
        let me = Holder::this_process();
        let mut a = open();
        begin(&mut *a, "run-a", &me);
        a.claim(&key("v"), "run-a", &me).unwrap();
        a.end_run("run-a", RunEnding::Cancelled, Some("stopped"), &now())
            .unwrap();
        assert!(a.live_claims_of("m").unwrap().is_empty(), "{name}");
        let mut b = open();
        begin(&mut *b, "run-b", &me);
        assert_eq!(
            b.claim(&key("v"), "run-b", &me).unwrap(),
            Claim::Claimed,
            "{name}"
        );
    }
}

#[test]
fn postgres_a_run_whose_heartbeat_lapsed_loses_its_claims() {
    let Some(url) = common::postgres_db() else {
        return;
    };
    // A runner on another machine: its process cannot be looked at, only its heartbeat.
    let elsewhere = Holder {
        host: "another-machine".into(),
        pid: 4242,
        start_time: Some(7),
        pid_ns: None,
    };
    let me = Holder::this_process();
    let mut a = PgLedger::open(&url).unwrap();
    begin(&mut a, "run-far", &elsewhere);
    assert_eq!(
        a.claim(&key("u"), "run-far", &elsewhere).unwrap(),
        Claim::Claimed
    );
    let mut b = PgLedger::open(&url).unwrap();
    begin(&mut b, "run-near", &me);
    assert_eq!(
        b.claim(&key("u"), "run-near", &me).unwrap(),
        Claim::HeldBy {
            run_id: "run-far".into()
        },
        "a beating run keeps its claim, on whatever machine"
    );
    common::psql(
        &url,
        "UPDATE runs SET heartbeat_at = now() - interval '1 hour' WHERE id = 'run-far'",
    );
    assert!(!b.run_is_live("run-far").unwrap());
    assert_eq!(b.claim(&key("u"), "run-near", &me).unwrap(), Claim::Claimed);
}

#[test]
fn postgres_a_repository_lock_is_one_runners_and_goes_with_its_connection() {
    let Some(url) = common::postgres_db() else {
        return;
    };
    let a = PgLedger::open(&url).unwrap();
    let b = PgLedger::open(&url).unwrap();
    assert!(a.try_lock_repo("https://example.invalid/api.git").unwrap());
    assert!(!b.try_lock_repo("https://example.invalid/api.git").unwrap());
    assert!(b.try_lock_repo("https://example.invalid/web.git").unwrap());
    a.unlock_repo("https://example.invalid/api.git").unwrap();
    assert!(b.try_lock_repo("https://example.invalid/api.git").unwrap());
    b.unlock_repo("https://example.invalid/api.git").unwrap();
    assert!(a.try_lock_repo("https://example.invalid/api.git").unwrap());
    // A runner that goes (its connection closes) gives its repositories back.
    drop(a);
    let mut freed = false;
    for _ in 0..50 {
        if b.try_lock_repo("https://example.invalid/api.git").unwrap() {
            freed = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(freed, "the lock went with the connection");
}

#[test]
fn postgres_runners_starting_together_migrate_once() {
    let Some(url) = common::postgres_db() else {
        return;
    };
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let u = url.clone();
            std::thread::spawn(move || PgLedger::open(&u).map(|_| ()))
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    assert_eq!(
        common::psql(
            &url,
            "SELECT string_agg(version::text, ',' ORDER BY version) FROM runner_migrations"
        ),
        "1,2,3,4,5,6,7,8",
        "each migration applied once"
    );
}
