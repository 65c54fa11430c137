//! Recognising failures in a gate's output, so that two runs of a gate can be compared failure
//! by failure.
//!
//! Only failure-shaped lines count: the lines in which a test runner names a test that failed
//! (libtest and cargo-nextest, pytest, `go test`, Jest, unittest, TAP), and rustc's numbered
//! errors with their location. A line that merely contains "error" is not a failure: logs are
//! full of them on green runs.
//!
//! Each failure has a fingerprint that stays the same from run to run of the same failure:
//! colour codes are removed, the folder the gate ran in is replaced by `<dir>`, and numbers that
//! vary (durations, line and column numbers, percentages, addresses) are replaced by `N`. The
//! names of tests keep their digits (`test_1` and `test_2` are different tests, so are
//! `test_add[1-2]` and `test_add[2-3]`).

use std::collections::HashSet;

/// One failure: what identifies it, and the line it was read from (colour removed).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Failure {
    pub fingerprint: String,
    pub line: String,
}

/// At most this many failures are kept per run of a gate; a gate failing more has more to fix
/// than a list can say.
pub(crate) const MAX_FAILURES: usize = 500;

/// Reads failures out of a stream of lines. The folders named in `roots` (where the gate ran)
/// are replaced by `<dir>` before anything else.
#[derive(Debug, Default)]
pub(crate) struct Scanner {
    roots: Vec<String>,
    /// A rustc error waiting for its ` --> file:line:col` line.
    pending: Option<Failure>,
    found: Vec<Failure>,
    seen: HashSet<String>,
}

impl Scanner {
    pub fn new(roots: impl IntoIterator<Item = String>) -> Self {
        let mut roots: Vec<String> = roots.into_iter().filter(|r| !r.is_empty()).collect();
        // Longest first: a worktree inside the repository is replaced whole.
        roots.sort_by_key(|r| std::cmp::Reverse(r.len()));
        Scanner {
            roots,
            ..Scanner::default()
        }
    }

    /// Read one line (without its end).
    pub fn line(&mut self, raw: &str) {
        let plain = strip_ansi(raw.trim_end_matches(['\r', '\n']));
        let mut text = plain.clone();
        for r in &self.roots {
            if text.contains(r.as_str()) {
                text = text.replace(r.as_str(), "<dir>");
            }
        }
        if let Some(mut err) = self.pending.take() {
            if let Some(at) = text.trim_start().strip_prefix("--> ") {
                err.fingerprint.push_str(" at ");
                let at = at.trim();
                err.fingerprint
                    .push_str(&normalise_numbers(at.strip_prefix("<dir>/").unwrap_or(at)));
                self.add(err);
                return;
            }
            // No location followed: the error alone.
            self.add(err);
        }
        let Some(fingerprint) = recognise(&text) else {
            return;
        };
        let failure = Failure {
            fingerprint,
            line: plain.trim().to_string(),
        };
        if failure.fingerprint.starts_with("rustc ") {
            self.pending = Some(failure);
        } else {
            self.add(failure);
        }
    }

    fn add(&mut self, f: Failure) {
        if self.found.len() < MAX_FAILURES && self.seen.insert(f.fingerprint.clone()) {
            self.found.push(f);
        }
    }

    /// The failures read, in the order they were first seen.
    pub fn finish(mut self) -> Vec<Failure> {
        if let Some(err) = self.pending.take() {
            self.add(err);
        }
        self.found
    }

    /// The failures read so far (a pending rustc error included).
    pub fn snapshot(&self) -> Vec<Failure> {
        let mut v = self.found.clone();
        if let Some(p) = &self.pending
            && !self.seen.contains(&p.fingerprint)
            && v.len() < MAX_FAILURES
        {
            v.push(p.clone());
        }
        v
    }
}

/// The failures in `text` (a whole output).
pub fn scan(text: &str, roots: impl IntoIterator<Item = String>) -> Vec<Failure> {
    let mut s = Scanner::new(roots);
    for l in text.lines() {
        s.line(l);
    }
    s.finish()
}

/// The fingerprint of a failure-shaped line, or `None`.
fn recognise(line: &str) -> Option<String> {
    let t = line.trim();
    // libtest: `test tests::name ... FAILED` (also doc tests: `test src/lib.rs - f (line 12)`).
    if let Some(rest) = t.strip_prefix("test ")
        && let Some(name) = rest.strip_suffix(" ... FAILED")
    {
        let name = name.trim_end_matches(" - should panic");
        return Some(format!("test {}", doc_test_lines(name)));
    }
    // libtest, terse (`cargo test -q`): `tests::name --- FAILED`.
    if let Some(name) = t.strip_suffix(" --- FAILED")
        && !name.is_empty()
        && !name.contains(char::is_whitespace)
    {
        return Some(format!("test {name}"));
    }
    // cargo-nextest: `FAIL [   0.004s] crate::bin tests::name` (also `SIGSEGV [...]`, `TIMEOUT`).
    for word in ["FAIL [", "SIGSEGV [", "SIGABRT [", "TIMEOUT ["] {
        if let Some(rest) = t.strip_prefix(word)
            && let Some((_, name)) = rest.split_once(']')
            && !name.trim().is_empty()
        {
            return Some(format!("test {}", name.trim()));
        }
    }
    // rustc: `error[E0425]: cannot find value `x` in this scope` (its location follows).
    if let Some(rest) = t.strip_prefix("error[E")
        && let Some((code, message)) = rest.split_once("]: ")
        && !code.is_empty()
        && code.bytes().all(|b| b.is_ascii_digit())
    {
        return Some(format!("rustc E{code}: {}", normalise_numbers(message)));
    }
    // pytest, short summary: `FAILED tests/test_x.py::test_name - AssertionError: ...`,
    // `ERROR tests/test_x.py - ImportError ...`.
    for word in ["FAILED ", "ERROR "] {
        if let Some(rest) = t.strip_prefix(word) {
            let id = rest.split(" - ").next().unwrap_or(rest).trim();
            if is_pytest_id(id) {
                return Some(format!("test {id}"));
            }
        }
    }
    // pytest, verbose: `tests/test_x.py::test_name FAILED  [ 50%]`.
    if let Some((id, rest)) = t.split_once(' ') {
        let verdict = rest.trim_start();
        if (verdict.starts_with("FAILED") || verdict.starts_with("ERROR"))
            && id.contains("::")
            && is_pytest_id(id)
        {
            return Some(format!("test {id}"));
        }
    }
    // go test: `--- FAIL: TestName (0.00s)`, subtests indented: `--- FAIL: TestName/case (0.00s)`.
    if let Some(rest) = t.strip_prefix("--- FAIL: ") {
        let name = rest.split(" (").next().unwrap_or(rest).trim();
        return Some(format!("test {name}"));
    }
    // go test, a package: `FAIL\texample.com/pkg\t0.005s` or `FAIL\texample.com/pkg [build failed]`.
    if let Some(rest) = t.strip_prefix("FAIL\t").or_else(|| t.strip_prefix("FAIL ")) {
        let mut parts = rest.split(['\t', ' ']).filter(|p| !p.is_empty());
        if let Some(pkg) = parts.next()
            && !pkg.ends_with(".js")
            && !pkg.ends_with(".ts")
            && !pkg.ends_with(".jsx")
            && !pkg.ends_with(".tsx")
            && !pkg.ends_with(".mjs")
            && !pkg.ends_with(".cjs")
        {
            let why = if rest.contains("[build failed]") {
                " [build failed]"
            } else if rest.contains("[setup failed]") {
                " [setup failed]"
            } else {
                ""
            };
            return Some(format!("package {pkg}{why}"));
        }
        // Jest: `FAIL src/sum.test.js` (a test file with a failure).
        if let Some(file) = rest.split_whitespace().next() {
            return Some(format!("file {file}"));
        }
    }
    // Jest: `● Suite › test name` (not `● Console`, which is logged output).
    if let Some(rest) = t.strip_prefix("● ") {
        let name = rest.trim();
        if name != "Console" && !name.is_empty() {
            return Some(format!("test {name}"));
        }
    }
    // unittest: `FAIL: test_name (module.Class.test_name)`, `ERROR: ...`.
    for word in ["FAIL: ", "ERROR: "] {
        if let Some(rest) = t.strip_prefix(word)
            && let Some((name, owner)) = rest.split_once(" (")
            && owner.ends_with(')')
            && !name.contains(' ')
        {
            return Some(format!("test {name} ({owner}"));
        }
    }
    // TAP: `not ok 3 - description` (the number shifts as tests are added).
    if let Some(rest) = t.strip_prefix("not ok ") {
        let rest = rest
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .trim_start();
        let desc = rest.strip_prefix("- ").unwrap_or(rest);
        let desc = desc.split(" # ").next().unwrap_or(desc).trim();
        if !desc.is_empty() {
            return Some(format!("test {desc}"));
        }
    }
    None
}

/// A pytest node id: a path to a Python file, optionally with `::` parts.
fn is_pytest_id(id: &str) -> bool {
    !id.contains(' ') && id.split("::").next().is_some_and(|f| f.ends_with(".py"))
}

/// A doc test's name carries the line of its example, which moves as the file is edited.
fn doc_test_lines(name: &str) -> String {
    match name.rfind(" (line ") {
        Some(i) if name.ends_with(')') => format!("{} (line N)", &name[..i]),
        _ => name.to_string(),
    }
}

/// Digits that stand alone (not part of a word such as `test_2` or `E0425`) become `N`; so do
/// hexadecimal addresses.
pub(crate) fn normalise_numbers(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'0'
            && b.get(i + 1) == Some(&b'x')
            && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
            && (i == 0 || !word(b[i - 1]))
        {
            let mut j = i + 2;
            while j < b.len() && b[j].is_ascii_hexdigit() {
                j += 1;
            }
            out.push_str("0xN");
            i = j;
            continue;
        }
        if b[i].is_ascii_digit() && (i == 0 || !word(b[i - 1])) {
            let mut j = i;
            while j < b.len()
                && (b[j].is_ascii_digit()
                    || (b[j] == b'.' && b.get(j + 1).is_some_and(u8::is_ascii_digit)))
            {
                j += 1;
            }
            // Units glued to a number (`0.01s`, `12ms`) are part of what varies.
            let mut k = j;
            while k < b.len() && b[k].is_ascii_alphabetic() {
                k += 1;
            }
            let unit = &text[j..k];
            if matches!(
                unit,
                "" | "s" | "ms" | "us" | "ns" | "m" | "h" | "sec" | "secs"
            ) {
                out.push('N');
                i = if unit.is_empty() { j } else { k };
                continue;
            }
            // A word starting with digits (`3rd`, `2xx`): kept.
            out.push_str(&text[i..k]);
            i = k;
            continue;
        }
        let ch = text[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// `text` without terminal escape sequences (colours, cursor moves, hyperlinks).
pub fn strip_ansi(text: &str) -> String {
    if !text.contains('\u{1b}') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                // Parameters and intermediates, then one final byte in @..~.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                chars.next();
                // An operating system command, ended by BEL or ESC \.
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' {
                        if chars.peek() == Some(&'\\') {
                            chars.next();
                        }
                        break;
                    }
                }
            }
            Some(_) => {
                chars.next();
            }
            None => {}
        }
    }
    out
}

/// How a failing run compares with its baseline.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Compared {
    /// Failures the baseline does not have.
    pub new: Vec<Failure>,
    /// Failures the baseline has too.
    pub forgiven: Vec<Failure>,
}

/// Split `failures` into those `baseline` has and those it lacks.
pub fn compare(failures: &[Failure], baseline: &[Failure]) -> Compared {
    let known: HashSet<&str> = baseline.iter().map(|f| f.fingerprint.as_str()).collect();
    let (forgiven, new) = failures
        .iter()
        .cloned()
        .partition(|f| known.contains(f.fingerprint.as_str()));
    Compared { new, forgiven }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prints(text: &str) -> Vec<String> {
        scan(text, ["/tmp/wt".to_string()])
            .into_iter()
            .map(|f| f.fingerprint)
            .collect()
    }

    #[test]
    fn libtest_names_its_failures() {
        let out = "running 3 tests\ntest a::ok ... ok\ntest a::bad ... FAILED\n\
                   test src/lib.rs - f (line 12) ... FAILED\ntest b::p - should panic ... FAILED\n\
                   error: test failed, to rerun pass `--lib`\n";
        assert_eq!(
            prints(out),
            ["test a::bad", "test src/lib.rs - f (line N)", "test b::p"]
        );
    }

    #[test]
    fn libtest_terse_output_names_the_same_failures() {
        let out = "running 3 tests\n.F.\nemoji_test_file --- FAILED\ntests::wide --- FAILED\n\
                   ---- emoji_test_file stdout ----\ntest result: FAILED. 1 passed; 2 failed\n";
        assert_eq!(prints(out), ["test emoji_test_file", "test tests::wide"]);
        // The verbose line names the same failure, so a `-q` gate compares with its base.
        assert_eq!(
            prints("test emoji_test_file ... FAILED\n"),
            ["test emoji_test_file"]
        );
    }

    #[test]
    fn lines_with_error_in_them_are_not_failures() {
        let out = "warning: unused variable: `error`\nerror: could not compile `x`\n\
                   INFO error budget: 3\nlet error = 5;\n";
        assert!(prints(out).is_empty());
    }

    #[test]
    fn rustc_errors_carry_their_place_without_line_numbers() {
        let a = "error[E0425]: cannot find value `x` in this scope\n --> /tmp/wt/src/lib.rs:3:5\n";
        let b = "error[E0425]: cannot find value `x` in this scope\n --> /tmp/wt/src/lib.rs:9:13\n";
        assert_eq!(prints(a), prints(b));
        assert_eq!(
            prints(a),
            ["rustc E0425: cannot find value `x` in this scope at src/lib.rs:N:N"]
        );
    }

    #[test]
    fn test_names_keep_their_digits() {
        let out = "FAILED t/test_m.py::test_add[1-2] - assert 3 == 4\n\
                   FAILED t/test_m.py::test_add[2-3] - assert 5 == 6\n--- FAIL: Test2 (0.01s)\n";
        assert_eq!(
            prints(out),
            [
                "test t/test_m.py::test_add[1-2]",
                "test t/test_m.py::test_add[2-3]",
                "test Test2"
            ]
        );
    }

    #[test]
    fn colour_and_durations_do_not_change_a_fingerprint() {
        let a = "\u{1b}[31m--- FAIL: TestX (0.00s)\u{1b}[0m\nFAIL\tex.com/p\t0.004s\n";
        let b = "--- FAIL: TestX (1.25s)\nFAIL\tex.com/p\t12.300s\n";
        assert_eq!(prints(a), prints(b));
        assert_eq!(prints(a), ["test TestX", "package ex.com/p"]);
    }

    #[test]
    fn numbers_alone_vary_words_with_digits_do_not() {
        assert_eq!(
            normalise_numbers("at src/a.rs:12:5 took 0.5s (3 ms) 0x7ffd12 test_2 E0425 2xx"),
            "at src/a.rs:N:N took N (N ms) 0xN test_2 E0425 2xx"
        );
    }

    #[test]
    fn compare_splits_new_from_known() {
        let f = |p: &str| Failure {
            fingerprint: p.into(),
            line: p.into(),
        };
        let c = compare(&[f("a"), f("b")], &[f("a"), f("c")]);
        assert_eq!(c.forgiven, [f("a")]);
        assert_eq!(c.new, [f("b")]);
    }
}
