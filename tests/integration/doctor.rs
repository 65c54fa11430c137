//! `runner doctor M`: each check a night's drain needs, run on real checkouts, programs and a
//! worker whose key is refused; it touches nothing.

use crate::common;

use common::{repo, run_in, stderr, stdout};

#[test]
fn doctor_passes_a_sound_manifest_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("a"));
    std::fs::write(
        dir.path().join("m.yaml"),
        r#"version: 1
name: sound
repositories: [{path: a}]
models: {primary: m1}
worker:
  probe: "Reply with the word OK."
  run: ["sh", "-c", "test -n \"$RUNNER_PROBE\" && echo OK"]
gates: [{name: test, run: "grep -q . README.md"}]
items: [{repo: a, id: x}]
"#,
    )
    .unwrap();
    let before = common::tree_fingerprint(dir.path());
    let out = run_in(dir.path(), &["doctor", "m.yaml"]);
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{said}{}", stderr(&out));
    for line in [
        "ok    repositories: 1 reachable",
        "ok    programs: on PATH: sh, grep",
        "ok    ledger: ",
        "ok    disk (the workspace): ",
        "ok    probe of model `m1`: answered",
        "runner doctor: every check passed",
    ] {
        assert!(said.contains(line), "{line}\n{said}");
    }
    assert!(said.contains("containment: "), "{said}");
    assert_eq!(common::tree_fingerprint(dir.path()), before, "{said}");
    assert!(!dir.path().join(".runner").exists());
}

#[test]
fn doctor_names_each_problem_and_a_refused_key_is_exit_6() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("a"));
    std::fs::write(
        dir.path().join("m.yaml"),
        r#"version: 1
name: broken
repositories: [{path: a}, {path: gone}, {url: "./nowhere.git", name: far}]
models: {primary: m1, fallbacks: [m2]}
worker:
  probe: "Reply with the word OK."
  run: ["sh", "-c", "if [ {model} = m1 ]; then echo 'runner adapter: the provider refused the key (authentication): invalid x-api-key'; exit 77; fi; echo '429 rate limit'; exit 75"]
gates: [{name: test, run: "no-such-test-runner --all"}]
items: [{repo: a, id: x}]
"#,
    )
    .unwrap();
    let out = run_in(dir.path(), &["doctor", "m.yaml"]);
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(6), "{said}{}", stderr(&out));
    for line in [
        "FAIL  repository `gone`: ",
        "is missing or not a git checkout",
        "FAIL  repository `far`: `./nowhere.git` cannot be reached: ",
        "FAIL  program `no-such-test-runner`: gate `test` runs it, and it is not on PATH",
        "FAIL  probe of model `m1`: the provider refused the key (authentication): invalid x-api-key",
        "warn  probe of model `m2`: no answer for the provider's reasons (429 rate limit); apply would go on",
        "runner doctor: 4 checks failed — exit 6",
    ] {
        assert!(said.contains(line), "{line}\n{said}");
    }
    // Without the probe, the other problems are exit 1.
    let out = run_in(dir.path(), &["doctor", "m.yaml", "--no-probe"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("probe: skipped (--no-probe)"));
}
