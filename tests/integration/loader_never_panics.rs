//! Property tests: the manifest loader returns a result — never panics — for any input: random
//! bytes, random YAML-shaped text, and random mutations of a valid manifest.

use proptest::prelude::*;
use runner::manifest::load::load_bytes;
use std::path::Path;

const VALID: &str = r#"version: 1
name: nightly
capacity: {workers: 4, probe: ["./free-slots.sh"]}
repositories:
  - name: api
    path: ../checkouts/api
    base: main
    critical_base: [9f3c2e1, v2.4.0]
    worker: {timeout: 10m}
  - url: https://example.com/acme/web.git
  - glob: "../checkouts/svc-*"
models:
  primary: model-a
  fallbacks: [model-b]
  provider_failure: {exit_codes: [75], patterns: ["rate limit"], silence: 5m}
worker:
  run: ["agent", "--model", "{model}", "--task", "{item.task}"]
  timeout: 45m
  attempts: 3
gates:
  - {name: build, run: "cargo build", timeout: 20m}
  - {name: test, run: "cargo test", paths: ["src/**"]}
items:
  - {repo: api, id: fix-login, branch: "runner/{item}", vars: {task: "Fix it"}}
discover:
  - {glob: "changes/*/proposal.md", id: "{match.parent}", vars: {task: "{match.path}"}}
env: {pass: [PATH, HOME], secrets: [AGENT_API_KEY]}
stall: {after: 3}
reports: {dir: out, formats: [json, html]}
"#;

fn load(bytes: &[u8]) {
    let _ = load_bytes(bytes, "fuzz.yaml", Path::new("/tmp"));
}

#[test]
fn the_reference_manifest_is_valid() {
    // Its probe, a relative program, must exist beside it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("free-slots.sh"), "#!/bin/sh\necho 2\n").unwrap();
    let r = load_bytes(VALID.as_bytes(), "ok.yaml", dir.path());
    assert!(
        r.is_ok(),
        "{}",
        r.err().map(|e| e.to_string()).unwrap_or_default()
    );
}

fn yamlish() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("\n".to_string()),
        Just("  ".to_string()),
        Just("- ".to_string()),
        Just(": ".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just(", ".to_string()),
        Just("&a ".to_string()),
        Just("*a".to_string()),
        Just("<<: ".to_string()),
        Just("!!str ".to_string()),
        Just("\"".to_string()),
        Just("'".to_string()),
        Just("|\n".to_string()),
        Just("# c".to_string()),
        Just("---\n".to_string()),
        Just("{model}".to_string()),
        Just("{item.".to_string()),
        prop::sample::select(vec![
            "version",
            "name",
            "repositories",
            "worker",
            "run",
            "items",
            "repo",
            "id",
            "gates",
            "timeout",
            "models",
            "primary",
            "fallbacks",
            "path",
            "glob",
            "url",
            "discover",
            "capacity",
            "workers",
            "env",
            "pass",
            "1",
            "0",
            "-3",
            "5m",
            "true",
            "null",
            "~",
        ])
        .prop_map(str::to_string),
        "[a-z0-9]{1,6}",
    ];
    prop::collection::vec(token, 0..80).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        load(&bytes);
    }

    #[test]
    fn yaml_shaped_text_never_panics(text in yamlish()) {
        load(text.as_bytes());
    }

    #[test]
    fn mutated_manifests_never_panic(
        edits in prop::collection::vec((0usize..VALID.len(), any::<u8>(), 0u8..3), 1..8)
    ) {
        let mut bytes = VALID.as_bytes().to_vec();
        for (pos, byte, kind) in edits {
            let pos = pos.min(bytes.len().saturating_sub(1));
            match kind {
                0 => bytes[pos] = byte,
                1 => { bytes.remove(pos); }
                _ => bytes.insert(pos, byte),
            }
        }
        load(&bytes);
    }
}
