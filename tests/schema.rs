//! The checked-in JSON Schema is generated from the Rust types, and the loader accepts exactly
//! the keys the schema describes. Every shipped manifest points at the schema and validates.

mod common;

use runner::manifest::load::KEYS_BY_DEFINITION;
use runner::manifest::schema::manifest_schema_json;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn checked_in_schema_is_up_to_date() {
    let path = root().join("schemas/manifest.schema.json");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = manifest_schema_json();
    if on_disk != generated {
        if std::env::var_os("RUNNER_UPDATE_SCHEMA").is_some() {
            std::fs::write(&path, &generated).unwrap();
        } else {
            panic!(
                "schemas/manifest.schema.json is stale: run `cargo run -- schema > schemas/manifest.schema.json` \
                 (or this test with RUNNER_UPDATE_SCHEMA=1)"
            );
        }
    }
}

#[test]
fn checked_in_report_schema_is_up_to_date() {
    let path = root().join("schemas/report.schema.json");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = runner::report::report_schema_json().unwrap();
    if on_disk != generated {
        if std::env::var_os("RUNNER_UPDATE_SCHEMA").is_some() {
            std::fs::write(&path, &generated).unwrap();
        } else {
            panic!(
                "schemas/report.schema.json is stale: run `cargo run -- schema --report > schemas/report.schema.json`"
            );
        }
    }
}

#[test]
fn runner_schema_prints_the_checked_in_schema() {
    let out = common::run_in(root(), &["schema"]);
    assert_eq!(out.status.code(), Some(0));
    let on_disk = std::fs::read_to_string(root().join("schemas/manifest.schema.json")).unwrap();
    assert_eq!(common::stdout(&out), on_disk);
}

#[test]
fn loader_keys_match_schema_properties() {
    let schema: serde_json::Value = serde_json::from_str(&manifest_schema_json()).unwrap();
    for (def, keys) in KEYS_BY_DEFINITION {
        let obj = if *def == "Manifest" {
            &schema
        } else {
            &schema["$defs"][*def]
        };
        let props: Vec<&str> = obj["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("no properties for {def}"))
            .keys()
            .map(String::as_str)
            .collect();
        let mut a = props.clone();
        a.sort();
        let mut b = keys.to_vec();
        b.sort();
        assert_eq!(
            a, b,
            "keys of `{def}` differ between the loader and the schema"
        );
        assert_eq!(
            obj["additionalProperties"],
            serde_json::json!(false),
            "{def} must deny unknown keys"
        );
    }
}

fn shipped_manifests() -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for top in ["examples", "manifests"] {
        let mut stack = vec![root().join(top)];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml")
                    && std::fs::read_to_string(&p)
                        .is_ok_and(|t| t.contains("\nversion: 1") || t.starts_with("version: 1"))
                {
                    out.push(p);
                }
            }
        }
    }
    out
}

#[test]
fn shipped_manifests_carry_the_schema_line_and_validate() {
    let files = shipped_manifests();
    assert!(
        !files.is_empty(),
        "no manifests under examples/ or manifests/"
    );
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            text.lines()
                .next()
                .is_some_and(|l| l.starts_with("# yaml-language-server: $schema=")
                    && l.ends_with("schemas/manifest.schema.json")),
            "{} lacks the yaml-language-server schema line",
            f.display()
        );
        let out = common::run_in(root(), &["validate", f.to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            f.display(),
            common::stderr(&out)
        );
    }
}
