//! `timeout: auto` on a gate: the default until five passing runs of it are recorded, then three
//! times their p95, at least a minute.

mod common;

use common::{repo, run_in, stderr};

#[test]
fn an_auto_timeout_comes_from_the_gates_history() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: auto\nrepositories: [{path: r}]\nworker: {run: \"true\"}\ngates:\n  - {name: test, timeout: auto, run: 'sleep 0.05'}\n  - {name: lint, timeout: 10s, run: 'true'}\nitems: [{repo: r, id: a}]\n",
    )
    .unwrap();
    for round in 0..6 {
        let args: &[&str] = if round == 0 {
            &["apply", "m.yaml", "--no-progress"]
        } else {
            &["apply", "m.yaml", "--no-progress", "--rerun", "all"]
        };
        let out = run_in(root, args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{err}");
        if round < 5 {
            assert!(
                err.contains(&format!(
                    "gate `test`: timeout auto = 30m, the default, until 5 passing runs are recorded ({round} so far)"
                )),
                "{err}"
            );
        } else {
            assert!(
                err.contains("gate `test`: timeout auto = 1m (p95 ")
                    && err.contains("over 5 passing runs)"),
                "{err}"
            );
        }
        assert!(!err.contains("gate `lint`: timeout auto"), "{err}");
    }
    let out = run_in(root, &["validate", "m.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
