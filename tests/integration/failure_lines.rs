//! Failures read from real output: each pair of files under `tests/failures/` was captured once
//! from a real run of the tool (colour forced on), first on a "base" with known failures, then
//! on a copy in another folder with one failure added (and, for some, a verbose mode, so the
//! same failure is printed in other words). Durations, paths and colour differ between the two;
//! the fingerprints must not, and only the added failure may be new.
//!
//! Captured with: `cargo test --color always` (libtest, Rust 1.95), `python3 -m pytest
//! --color=yes` and `-v` (pytest 8.3.3), `go test ./...` and `go test -v ./...` (Go 1.19),
//! `FORCE_COLOR=1 npx jest --ci` and `--verbose` (Jest 29).

use runner::failures::{compare, scan, strip_ansi};

fn read(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/failures")
        .join(name);
    // Read as bytes: the captures hold colour codes and non-ASCII symbols as the tools wrote them.
    String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned()
}

fn prints(name: &str, root: &str) -> Vec<String> {
    scan(&read(name), [root.to_string()])
        .into_iter()
        .map(|f| f.fingerprint)
        .collect()
}

/// The base's failures, and what the item run adds to them.
fn check(tool: &str, base_root: &str, item_root: &str, base: &[&str], new: &[&str]) {
    let b = scan(&read(&format!("{tool}-base.txt")), [base_root.to_string()]);
    let i = scan(&read(&format!("{tool}-item.txt")), [item_root.to_string()]);
    let fp: Vec<&str> = b.iter().map(|f| f.fingerprint.as_str()).collect();
    assert_eq!(fp, base, "{tool}: the base's failures");
    let c = compare(&i, &b);
    let got: Vec<&str> = c.new.iter().map(|f| f.fingerprint.as_str()).collect();
    assert_eq!(got, new, "{tool}: new failures");
    let mut forgiven: Vec<&str> = c.forgiven.iter().map(|f| f.fingerprint.as_str()).collect();
    forgiven.sort_unstable();
    let mut all = base.to_vec();
    all.sort_unstable();
    assert_eq!(
        forgiven, all,
        "{tool}: every failure of the base is seen again"
    );
    // The lines shown are the tool's own, without colour.
    for f in b.iter().chain(&i) {
        assert!(!f.line.contains('\u{1b}'), "{tool}: {:?}", f.line);
    }
}

#[test]
fn cargo_test() {
    check(
        "cargo",
        "/tmp/cap/calc",
        "/tmp/cap/calc2",
        &["test tests::halves"],
        &["test tests::adds"],
    );
}

#[test]
fn cargo_test_that_does_not_compile() {
    assert_eq!(
        prints("cargo-compile.txt", "/tmp/cap/calc2"),
        ["rustc E0425: cannot find value `undefined_value` in this scope at src/lib.rs:N:N"]
    );
}

#[test]
fn pytest() {
    check(
        "pytest",
        "/tmp/cap/py",
        "/tmp/cap/py2",
        &[
            "test tests/test_calc.py::test_known_broken",
            "test tests/test_calc.py::test_table[2-3-6]",
            "test tests/test_calc.py::test_errors",
        ],
        &["test tests/test_calc.py::test_subtracts"],
    );
}

#[test]
fn go_test() {
    check(
        "go",
        "/tmp/cap/go",
        "/tmp/cap/go2",
        &[
            "test TestKnownBroken",
            "test TestTable",
            "test TestTable/two",
            "package example.com/calc/calc",
        ],
        &["test TestSubtracts"],
    );
}

#[test]
fn jest() {
    check(
        "jest",
        "/tmp/cap/js",
        "/tmp/cap/js2",
        &["file src/sum.test.js", "test sum › known broken"],
        &["file src/other.test.js", "test subtracts"],
    );
}

#[test]
fn lines_that_only_say_error_are_not_failures() {
    // Each capture holds such lines: an assertion message, a logged line, a summary.
    for (file, line) in [
        ("go-base.txt", "error: Add(2, 2) = 4, want 5"),
        ("jest-base.txt", "error: this is only logged"),
        (
            "pytest-base.txt",
            "RuntimeError: error: something went wrong",
        ),
        (
            "cargo-base.txt",
            "error: test failed, to rerun pass `--lib`",
        ),
    ] {
        assert!(
            strip_ansi(&read(file)).contains(line),
            "{file} holds {line:?}"
        );
        let found = scan(&read(file), Vec::<String>::new());
        assert!(
            found.iter().all(|f| !f.fingerprint.contains("error:")),
            "{file}: {found:?}"
        );
    }
}
