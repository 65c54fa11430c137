//! The documentation is checked like code: every link in `README.md` and `docs/*.md` leads to a
//! file that exists (and a `#section` to a heading there), and every example runs.
//!
//! - A YAML block that is a whole manifest (it has `version:`) passes `runner validate`; one
//!   that is a part of a manifest (its top-level keys) does so inside a small manifest that
//!   declares the repositories and items it names; the GitHub workflow's `runner` steps name a
//!   shipped manifest that validates and only flags the verb has.
//! - The JSON a worker writes to `RUNNER_USAGE` is written by a worker of a real drain and read
//!   back from its report.
//! - The commands of a `sh` block are runner's verbs with flags it has; the README's first block
//!   names the example and the test command that exist (CI runs that command; the example is
//!   drained by `apply::the_shipped_example_drains`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::common::{latest_report, repo, run_in, stderr, stdout};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page under docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// A fenced block: its language, its text and the line its fence opens on.
struct Block {
    page: PathBuf,
    lang: String,
    text: String,
    line: usize,
}

impl Block {
    fn at(&self) -> String {
        format!(
            "{}:{}",
            self.page.strip_prefix(root()).unwrap().display(),
            self.line
        )
    }
}

fn blocks(page: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(page).unwrap();
    let mut out = Vec::new();
    let mut open: Option<(String, usize, Vec<&str>)> = None;
    for (n, line) in text.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), n + 1, Vec::new())),
            (Some(_), Some("")) => {
                let (lang, line, lines) = open.take().unwrap();
                out.push(Block {
                    page: page.to_path_buf(),
                    lang,
                    text: lines.join("\n") + "\n",
                    line,
                });
            }
            (Some((_, _, lines)), _) => lines.push(line),
            (None, None) => {}
        }
    }
    assert!(
        open.is_none(),
        "{}: a code block is never closed",
        page.display()
    );
    out
}

/// Headings as GitHub anchors them: lower case, punctuation but `-` and `_` dropped, spaces to
/// `-`. Headings inside code blocks are not headings.
fn anchors(page: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(page).unwrap();
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim().to_lowercase();
        let slug: String = title
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        out.insert(slug);
    }
    out
}

/// Every `](target)` outside code.
fn links(page: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(page).unwrap();
    let mut fenced = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').expect("a link is closed on its line");
            out.push((n + 1, rest[..end].to_string()));
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn every_link_leads_to_a_file_and_section_that_exist() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for page in pages() {
        for (line, target) in links(&page) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            let at = format!("{}:{line}", page.strip_prefix(root()).unwrap().display());
            checked += 1;
            if !file.exists() {
                broken.push(format!("{at}: `{target}`: no such file"));
            } else if let Some(anchor) = anchor
                && !anchors(&file).contains(anchor)
            {
                broken.push(format!("{at}: `{target}`: no such section"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(
        checked > 30,
        "only {checked} links found: is the reader broken?"
    );
}

/// The keys of the small manifest a part of one is checked inside, each on one line, so that a
/// part's own keys replace them whole.
const BASE: &[(&str, &str)] = &[
    ("version", "version: 1"),
    ("name", "name: doc-example"),
    ("repositories", "repositories: [{path: api}, {path: web}]"),
    ("worker", "worker: {run: [\"true\"]}"),
    ("items", "items: [{repo: api, id: a}]"),
];

/// A folder a manifest from the docs validates in: the repositories it may name, and the shipped
/// adapters, sources and notifiers where its relative paths look for them.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in ["api", "web"] {
        let r = dir.path().join(name);
        std::fs::create_dir(&r).unwrap();
        repo(&r);
    }
    let manifests = root().join("manifests");
    std::os::unix::fs::symlink(&manifests, dir.path().join("manifests")).unwrap();
    for sub in ["agents", "sources", "publish", "notifiers"] {
        std::os::unix::fs::symlink(manifests.join(sub), dir.path().join(sub)).unwrap();
    }
    dir
}

fn top_level_keys(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with([' ', '#', '-']) && !l.is_empty())
        .filter_map(|l| l.split_once(':').map(|(k, _)| k.trim().to_string()))
        .collect()
}

fn validate(block: &Block, manifest: &str) {
    let dir = scratch();
    std::fs::write(dir.path().join("runner.yaml"), manifest).unwrap();
    let out = run_in(dir.path(), &["validate", "runner.yaml"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the example at {} does not validate:\n{manifest}\n{}",
        block.at(),
        stderr(&out)
    );
}

/// `runner VERB --help` lists every flag `args` uses.
fn flags_exist(at: &str, args: &[&str]) {
    let verb = args[0];
    let help = stdout(&run_in(root(), &[verb, "--help"]));
    assert!(
        help.contains("Usage:"),
        "{at}: `runner {verb}` is no verb: {help}"
    );
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        let flag = flag.split('=').next().unwrap();
        assert!(
            help.contains(flag),
            "{at}: `runner {verb}` has no `{flag}`:\n{help}"
        );
    }
}

fn check_workflow(block: &Block) {
    let doc: serde_json::Value =
        serde_saphyr::from_str(&block.text).unwrap_or_else(|e| panic!("{}: {e}", block.at()));
    let mut steps = 0;
    for job in doc["jobs"].as_object().unwrap().values() {
        for step in job["steps"].as_array().unwrap() {
            let Some(run) = step["run"].as_str() else {
                continue;
            };
            let Some(args) = run.strip_prefix("runner ") else {
                continue;
            };
            let args: Vec<&str> = args.split_whitespace().collect();
            flags_exist(&block.at(), &args);
            let manifest = args[1];
            assert!(
                root().join(manifest).is_file(),
                "{}: `{manifest}` is not a shipped manifest",
                block.at()
            );
            let out = run_in(root(), &["validate", manifest]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}: {}",
                block.at(),
                stderr(&out)
            );
            steps += 1;
        }
    }
    assert!(steps > 0, "{}: the workflow runs no runner", block.at());
}

fn check_yaml(block: &Block) {
    if block.text.starts_with("# .github/workflows/") {
        return check_workflow(block);
    }
    let keys = top_level_keys(&block.text);
    assert!(!keys.is_empty(), "{}: no keys in the example", block.at());
    if keys.iter().any(|k| k == "version") {
        return validate(block, &block.text);
    }
    let mut manifest: String = BASE
        .iter()
        .filter(|(key, _)| !keys.iter().any(|k| k == key))
        .map(|(_, line)| format!("{line}\n"))
        .collect();
    manifest.push_str(&block.text);
    validate(block, &manifest);
}

/// The `RUNNER_USAGE` example, written by a worker and read back from the report.
fn check_usage(block: &Block) {
    let usage: serde_json::Value =
        serde_json::from_str(&block.text).unwrap_or_else(|e| panic!("{}: {e}", block.at()));
    let dir = scratch();
    std::fs::write(dir.path().join("usage.json"), &block.text).unwrap();
    let manifest = format!(
        "version: 1\nname: usage\nrepositories: [{{path: api}}]\nworker: {{run: 'cat {} > \"$RUNNER_USAGE\"'}}\nitems: [{{repo: api, id: a, branch: runner/a}}]\n",
        dir.path().join("usage.json").display()
    );
    std::fs::write(dir.path().join("runner.yaml"), manifest).unwrap();
    let out = run_in(dir.path(), &["apply", "runner.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let total = &report["usage"]["total"];
    for (key, value) in usage.as_object().unwrap() {
        assert_eq!(
            total[key].as_f64(),
            value.as_f64(),
            "{}: `{key}` in the report: {total}",
            block.at()
        );
    }
}

fn check_sh(block: &Block, first: bool) {
    let lines: Vec<&str> = block
        .text
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .collect();
    if first {
        assert_eq!(
            lines,
            [
                "cargo run --locked -- apply examples/quickstart/manifest.yaml",
                "tests/run.sh"
            ],
            "{}: the README's two commands",
            block.at()
        );
        assert!(root().join("examples/quickstart/manifest.yaml").is_file());
        let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
        assert!(
            ci.lines().any(|l| l == "tests/run.sh"),
            "CI runs the README's test command"
        );
        return;
    }
    for line in lines {
        let args: Vec<&str> = line
            .strip_prefix("runner ")
            .unwrap_or_else(|| panic!("{}: `{line}` is not runner", block.at()))
            .split_whitespace()
            .collect();
        flags_exist(&block.at(), &args);
    }
}

#[test]
fn every_example_in_the_docs_runs() {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for page in pages() {
        let is_readme = page.ends_with("README.md");
        for (n, block) in blocks(&page).iter().enumerate() {
            match block.lang.as_str() {
                "yaml" => check_yaml(block),
                "json" => check_usage(block),
                "sh" => check_sh(block, is_readme && n == 0),
                other => panic!(
                    "{}: an example in `{other}`, which no test reads",
                    block.at()
                ),
            }
            *counts.entry(block.lang.clone()).or_default() += 1;
        }
    }
    // The README's commands, its tour and the workflow; manifest parts; the usage file.
    assert!(
        counts["yaml"] >= 5 && counts["sh"] >= 2 && counts["json"] >= 1,
        "{counts:?}"
    );
}

/// runner's verbs, as the command table names them.
const VERBS: &[&str] = &[
    "init",
    "validate",
    "publish",
    "plan",
    "apply",
    "status",
    "report",
    "doctor",
    "gc",
    "cancel",
    "pause",
    "resume",
    "unlock",
    "schema",
    "completions",
];

/// Every flag the command table of `docs/commands.md` names in a verb's row is a flag of that
/// verb (or of every verb), as `runner VERB --help` lists it: a flag renamed or removed cannot
/// stay documented.
#[test]
fn every_flag_the_command_table_names_exists() {
    let table = std::fs::read_to_string(root().join("docs/commands.md")).unwrap();
    let global = stdout(&run_in(root(), &["--help"]));
    let mut checked = 0;
    let mut missing = Vec::new();
    for row in table.lines().filter(|l| l.starts_with("| `runner ")) {
        let verb = row["| `runner ".len()..].split([' ', '`']).next().unwrap();
        if verb.starts_with('-') {
            continue;
        }
        // Flags as the row writes them: inside backticks, `--name`; a span that names another
        // verb first (`status --json`) is that verb's.
        for span in row.split('`').skip(1).step_by(2) {
            let first = span
                .strip_prefix("runner ")
                .unwrap_or(span)
                .split(' ')
                .next()
                .unwrap();
            let of = if span.contains(" --") && VERBS.contains(&first) {
                first
            } else {
                verb
            };
            let help = stdout(&run_in(root(), &[of, "--help"]));
            assert!(help.contains("Usage:"), "`runner {of}`: {help}");
            for word in span.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
                let Some(name) = word.strip_prefix("--") else {
                    continue;
                };
                if name.is_empty() {
                    continue;
                }
                checked += 1;
                let flag = format!("--{name}");
                let known = |h: &str| {
                    h.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                        .any(|w| w == flag)
                };
                if !known(&help) && !known(&global) {
                    missing.push(format!("`runner {of}`: `{flag}`"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "flags docs/commands.md names that runner does not have:\n{}",
        missing.join("\n")
    );
    assert!(
        checked > 30,
        "only {checked} flags found: is the reader broken?"
    );
}
