//! The loader: manifest text -> spanned tree -> validated [`Manifest`], reporting every problem.
//!
//! Structure is checked key by key against the model (unknown keys, wrong types, ranges), then
//! the whole document is cross-checked (duplicate names and ids, items naming undeclared
//! repositories, template placeholders against the items that use them, repository overrides
//! that would widen the top level). Checks run on whatever parts parsed, so one mistake does not
//! hide another. Nothing here touches the disk beyond reading the manifest itself and checking
//! that relative program paths exist.

mod after;
mod checks;
mod items;
mod notify;
mod read;
mod repositories;
mod sandbox;
mod sections;

use super::diag::{ManifestError, Problem};
use super::model::*;
use super::template::{self, Context};
use super::yaml::{self, Node, Span, Value};
use crate::support::fs::normalize;
use crate::support::hex;
use globset::{Glob, GlobBuilder, GlobMatcher};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A manifest as loaded from a file, with where it came from.
#[derive(Clone, Debug)]
pub struct LoadedManifest {
    pub manifest: Manifest,
    /// The path as the user gave it (used in messages).
    pub display_path: String,
    /// Absolute path of the manifest file.
    pub path: PathBuf,
    /// Folder that relative paths resolve against.
    pub dir: PathBuf,
    pub text: Arc<str>,
    /// Hex SHA-256 of the manifest bytes.
    pub sha256: String,
}

impl LoadedManifest {
    /// Resolve a manifest-relative path.
    pub(crate) fn resolve(&self, p: &str) -> PathBuf {
        normalize(&self.dir.join(p))
    }

    /// A problem at plan time, reported like a validation error.
    pub fn error(&self, problems: Vec<Problem>) -> ManifestError {
        ManifestError {
            file: self.display_path.clone(),
            text: self.text.clone(),
            problems,
        }
    }
}

/// Why a manifest could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read manifest `{path}`: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(ManifestError),
}

/// Read and validate the manifest at `path`.
pub(crate) fn load_file(path: &Path) -> Result<LoadedManifest, LoadError> {
    let display_path = path.display().to_string();
    let read_err = |source| LoadError::Read {
        path: display_path.clone(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if meta.is_dir() {
        return Err(read_err(std::io::Error::other(
            "it is a folder, not a file",
        )));
    }
    // A FIFO or a device never ends, or ends somewhere else: refused before a byte is read.
    if !meta.is_file() {
        return Err(read_err(std::io::Error::other(
            "it is not a regular file (a device, a FIFO or a socket)",
        )));
    }
    if meta.len() > yaml::MAX_MANIFEST_BYTES as u64 {
        let text: Arc<str> = Arc::from("");
        return Err(LoadError::Invalid(ManifestError {
            file: display_path,
            text,
            problems: vec![Problem::new(
                "too-large",
                "",
                format!(
                    "the manifest is {} bytes; the limit is {} bytes",
                    meta.len(),
                    yaml::MAX_MANIFEST_BYTES
                ),
            )],
        }));
    }
    // Never more than the limit and one byte, whatever the file claims its size to be.
    let mut bytes = Vec::new();
    {
        use std::io::Read;
        std::fs::File::open(path)
            .and_then(|f| {
                f.take(yaml::MAX_MANIFEST_BYTES as u64 + 1)
                    .read_to_end(&mut bytes)
            })
            .map_err(read_err)?;
    }
    if bytes.len() > yaml::MAX_MANIFEST_BYTES {
        return Err(LoadError::Invalid(ManifestError {
            file: display_path,
            text: Arc::from(""),
            problems: vec![Problem::new(
                "too-large",
                "",
                format!(
                    "the manifest is over {} bytes, the limit",
                    yaml::MAX_MANIFEST_BYTES
                ),
            )],
        }));
    }
    let abs = std::path::absolute(path).map_err(read_err)?;
    let abs = normalize(&abs);
    let dir = abs.parent().map(Path::to_path_buf).unwrap_or_default();
    let sha256 = hex(&Sha256::digest(&bytes));
    let (manifest, text) = load_bytes(&bytes, &display_path, &dir).map_err(LoadError::Invalid)?;
    Ok(LoadedManifest {
        manifest,
        display_path,
        path: abs,
        dir,
        text,
        sha256,
    })
}

/// Validate manifest bytes. `dir` is the folder relative paths resolve against (used only to
/// name a repository given as `path: .`). Never panics, whatever the bytes.
pub fn load_bytes(
    bytes: &[u8],
    file: &str,
    dir: &Path,
) -> Result<(Manifest, Arc<str>), ManifestError> {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            let line = good.iter().filter(|b| **b == b'\n').count() as u64 + 1;
            let text: Arc<str> = Arc::from(String::from_utf8_lossy(bytes).as_ref());
            let col = good.iter().rev().take_while(|b| **b != b'\n').count() as u64 + 1;
            return Err(ManifestError {
                file: file.to_string(),
                text,
                problems: vec![
                    Problem::new(
                        "not-utf8",
                        "",
                        format!("the manifest is not valid UTF-8 (byte {})", e.valid_up_to()),
                    )
                    .at(Span {
                        offset: e.valid_up_to(),
                        len: 1,
                        line,
                        column: col,
                    }),
                ],
            });
        }
    };
    let arc: Arc<str> = Arc::from(text);
    load_str(text, dir)
        .map(|m| (m, arc.clone()))
        .map_err(|problems| ManifestError {
            file: file.to_string(),
            text: arc,
            problems,
        })
}

/// Validate manifest text, returning every problem found.
pub(crate) fn load_str(text: &str, dir: &Path) -> Result<Manifest, Vec<Problem>> {
    let root = match yaml::parse(text) {
        Ok(n) => n,
        Err(e) => {
            let code = if e.message.starts_with("duplicate key") {
                "duplicate-key"
            } else if e.message.starts_with("the document") {
                "too-large"
            } else {
                "syntax"
            };
            let mut p = Problem::new(code, "", e.message);
            p.span = e.span;
            return Err(vec![p]);
        }
    };
    if root.value == Value::Null {
        return Err(vec![Problem::new(
            "empty",
            "",
            "the manifest is empty; it needs at least `version`, `name`, `repositories` and `worker`",
        )]);
    }
    let mut cx = Cx {
        problems: Vec::new(),
        dir: dir.to_path_buf(),
        uses: Vec::new(),
        resource_uses: Vec::new(),
    };
    let manifest = cx.manifest(&root);
    if let Some(m) = &manifest {
        cx.check_programs(&root, m);
    }
    cx.problems
        .sort_by_key(|p| p.span.map_or((0, 0), |s| (s.line, s.column)));
    if cx.problems.is_empty() {
        if let Some(m) = manifest {
            return Ok(m);
        }
        cx.problems.push(Problem::new(
            "internal",
            "",
            "the manifest could not be read",
        ));
    }
    Err(cx.problems)
}

const TOP_KEYS: &[&str] = &[
    "version",
    "name",
    "capacity",
    "repositories",
    "models",
    "worker",
    "gates",
    "items",
    "discover",
    "sources",
    "env",
    "stall",
    "budget",
    "publish",
    "notify",
    "reports",
    "workspace",
    "resources",
    "worktree",
    "sandbox",
];
const SANDBOX_KEYS: &[&str] = &["mode", "writable", "network"];
const WORKTREE_KEYS: &[&str] = &["setup", "timeout", "share"];
const BUDGET_KEYS: &[&str] = &["cost_usd", "daily_usd", "monthly_usd"];
const PUBLISH_KEYS: &[&str] = &["push", "remote", "pr", "state", "review_rounds", "timeout"];
const CAPACITY_KEYS: &[&str] = &["workers", "probe"];
const REPOSITORY_KEYS: &[&str] = &[
    "name",
    "path",
    "url",
    "glob",
    "base",
    "critical_base",
    "optional",
    "worker",
    "gates",
    "models",
    "env",
    "worktree",
];
const MODELS_KEYS: &[&str] = &[
    "primary",
    "fallbacks",
    "threshold",
    "provider_failure",
    "backoff",
    "prices",
];
const PRICE_KEYS: &[&str] = &["input", "output"];
const BACKOFF_KEYS: &[&str] = &["initial", "max"];
const PROVIDER_FAILURE_KEYS: &[&str] = &["exit_codes", "refused_exit_codes", "patterns", "silence"];
const WORKER_KEYS: &[&str] = &[
    "run",
    "timeout",
    "grace",
    "env",
    "attempts",
    "commit",
    "require_change",
    "limits",
    "uses",
    "probe",
];
const LIMITS_KEYS: &[&str] = &["memory", "pids", "cpu"];
const WORKER_OVERRIDE_KEYS: &[&str] = &["run", "timeout", "grace", "env", "attempts"];
const GATE_KEYS: &[&str] = &[
    "name",
    "run",
    "timeout",
    "grace",
    "paths",
    "required",
    "min_tests",
    "uses",
    "baseline",
    "cache",
];
const MIN_TESTS_KEYS: &[&str] = &["count", "pattern"];
const ITEM_KEYS: &[&str] = &["repo", "id", "branch", "vars", "after"];
const DISCOVER_KEYS: &[&str] = &["glob", "id", "branch", "vars"];
const SOURCE_KEYS: &[&str] = &[
    "name",
    "run",
    "timeout",
    "repo",
    "labels",
    "branch",
    "vars",
    "writeback",
    "check",
];
const ENV_KEYS: &[&str] = &["pass", "secrets", "roles"];
const STALL_KEYS: &[&str] = &["after"];
const NOTIFY_KEYS: &[&str] = &["run", "timeout", "fallback"];
const NOTIFY_FALLBACK_KEYS: &[&str] = &["run", "timeout", "file"];
const REPORTS_KEYS: &[&str] = &["dir", "formats", "keep", "metrics"];
const KEEP_KEYS: &[&str] = &["runs", "days"];

/// The keys each mapping accepts, by schema definition name; a test checks these against the
/// generated schema so the loader and the schema cannot drift apart.
pub const KEYS_BY_DEFINITION: &[(&str, &[&str])] = &[
    ("Manifest", TOP_KEYS),
    ("Capacity", CAPACITY_KEYS),
    ("RepositorySpec", REPOSITORY_KEYS),
    ("Models", MODELS_KEYS),
    ("Price", PRICE_KEYS),
    ("ProviderFailure", PROVIDER_FAILURE_KEYS),
    ("Worker", WORKER_KEYS),
    ("WorkerOverride", WORKER_OVERRIDE_KEYS),
    ("Gate", GATE_KEYS),
    ("MinTests", MIN_TESTS_KEYS),
    ("ItemSpec", ITEM_KEYS),
    ("DiscoverSpec", DISCOVER_KEYS),
    ("SourceSpec", SOURCE_KEYS),
    ("EnvPolicy", ENV_KEYS),
    ("Stall", STALL_KEYS),
    ("Notify", NOTIFY_KEYS),
    ("NotifyFallback", NOTIFY_FALLBACK_KEYS),
    ("Reports", REPORTS_KEYS),
    ("WorktreePrep", WORKTREE_KEYS),
    ("Sandbox", SANDBOX_KEYS),
];

/// Which configuration a template belongs to, so that `{item.<var>}` is checked against exactly
/// the items that will render it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Owner {
    /// Top-level `worker.run`, `worker.env.<KEY>` or `gates`.
    Top(Field),
    /// A repository's override, by index into `repositories`.
    Repo(usize, Field),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Field {
    WorkerRun,
    WorkerEnv(String),
    Gates,
}

struct TemplateUse {
    owner: Owner,
    path: String,
    span: Span,
    vars: Vec<String>,
}

struct Cx {
    problems: Vec<Problem>,
    dir: PathBuf,
    uses: Vec<TemplateUse>,
    /// Every `uses` entry: its key path, the resource it names and where.
    resource_uses: Vec<(String, String, Span)>,
}

struct MapView<'n> {
    span: Span,
    entries: Vec<(&'n str, &'n Node, &'n Node)>,
}

impl<'n> MapView<'n> {
    fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, _, v)| *v)
    }
    fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn found(node: &Node) -> String {
    match &node.value {
        Value::Str(s) if s.len() <= 40 => format!("found the string `{s}`"),
        Value::Int(i) => format!("found the integer `{i}`"),
        Value::Bool(b) => format!("found `{b}`"),
        v => format!("found {}", v.kind()),
    }
}

/// Closest known key within two edits, for "did you mean".
pub(crate) fn suggest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The rule every repository name obeys: `[A-Za-z0-9._-]`, not starting with a dot.
pub(crate) fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('.')
        && s.len() <= 100
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Item ids: `[A-Za-z0-9._/-]`, no empty, `.` or `..` segment (ids become file names in logs).
pub(crate) fn valid_item_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 200
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'))
        && s.split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

fn valid_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A repository name derived from a url or bundle path: its last segment without `.git` or
/// `.bundle`.
pub(crate) fn name_from_url(url: &str) -> Option<String> {
    let trimmed = url.trim_end_matches('/');
    let last = trimmed.rsplit(['/', ':']).next()?;
    let last = last
        .strip_suffix(".git")
        .or_else(|| last.strip_suffix(".bundle"))
        .unwrap_or(last);
    valid_name(last).then(|| last.to_string())
}

/// Compile a glob the way runner matches paths: `*` stays within one path segment.
pub(crate) fn compile_glob(glob: &str) -> Result<GlobMatcher, String> {
    GlobBuilder::new(glob)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| e.kind().to_string())
}
