//! The floors of the code (README, "Design"): every `crate::` path in a module must point to a
//! module below it. Reads the sources, so an arrow pointing back up fails here, not in review.

use std::collections::BTreeSet;
use std::path::Path;

/// Each top-level module and the modules it may name. Anything absent from a row is an arrow
/// against the flow.
const FLOORS: &[(&str, &[&str])] = &[
    ("vocab", &[]),
    ("support", &[]),
    ("events", &["vocab"]),
    ("manifest", &["support"]),
    ("lease", &["support"]),
    ("process", &["support", "vocab", "lease"]),
    ("git", &["support", "process"]),
    ("plan", &["support", "vocab", "manifest", "git"]),
    (
        "engine",
        &[
            "support", "vocab", "events", "manifest", "lease", "process", "git", "plan",
        ],
    ),
    ("ledger", &["support", "vocab", "events", "plan"]),
    ("report", &["support", "vocab", "events", "plan"]),
    ("ui", &["support", "vocab", "events", "plan"]),
    ("cli", &["vocab", "manifest", "plan"]),
    (
        "commands",
        &[
            "support", "vocab", "events", "manifest", "lease", "process", "git", "plan", "engine",
            "ledger", "report", "ui", "cli",
        ],
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a source file belongs to (`src/engine/item.rs` -> `engine`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Every `crate::name` in the code of `text`, comments left out.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let before = rest[..i].chars().next_back();
            let after = &rest[i + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // `$crate::` and `some_crate::` are not paths into this crate.
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
                && !name.is_empty()
            {
                out.insert(name);
            }
            rest = after;
        }
    }
    out
}

#[test]
fn every_import_points_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut against = Vec::new();
    let mut unknown = BTreeSet::new();
    for f in &files {
        let module = module_of(&src, f);
        if module == "lib" || module == "main" {
            continue;
        }
        let Some((_, allowed)) = FLOORS.iter().find(|(m, _)| *m == module) else {
            unknown.insert(module);
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for target in crate_paths(&text) {
            if target != module && !allowed.contains(&target.as_str()) {
                against.push(format!(
                    "{} names `crate::{target}`, which is not below `{module}`",
                    f.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "modules missing from the floor table: {unknown:?}"
    );
    assert!(
        against.is_empty(),
        "imports against the flow:\n{}",
        against.join("\n")
    );
}

#[test]
fn the_scanner_sees_paths_and_skips_comments() {
    let seen = crate_paths(
        "use crate::engine::x;\n// crate::report\nlet a = crate::ui::f(); // crate::ledger\n$crate::z; tokio_crate::w;",
    );
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        vec!["engine".to_string(), "ui".to_string()]
    );
}

#[test]
fn every_module_of_the_crate_has_a_floor() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    for line in lib.lines() {
        if let Some(m) = line.strip_prefix("pub mod ") {
            let m = m.trim_end_matches(';');
            assert!(
                FLOORS.iter().any(|(name, _)| *name == m),
                "`{m}` has no row in the floor table"
            );
        }
    }
}
