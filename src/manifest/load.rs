//! The loader: manifest text -> spanned tree -> validated [`Manifest`], reporting every problem.
//!
//! Structure is checked key by key against the model (unknown keys, wrong types, ranges), then
//! the whole document is cross-checked (duplicate names and ids, items naming undeclared
//! repositories, template placeholders against the items that use them, repository overrides
//! that would widen the top level). Checks run on whatever parts parsed, so one mistake does not
//! hide another. Nothing here touches the disk beyond reading the manifest itself.

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
    pub fn resolve(&self, p: &str) -> PathBuf {
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
pub fn load_file(path: &Path) -> Result<LoadedManifest, LoadError> {
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
    let bytes = std::fs::read(path).map_err(read_err)?;
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
pub fn load_str(text: &str, dir: &Path) -> Result<Manifest, Vec<Problem>> {
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
    };
    let manifest = cx.manifest(&root);
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
    "env",
    "stall",
    "reports",
    "workspace",
];
const CAPACITY_KEYS: &[&str] = &["workers", "probe"];
const REPOSITORY_KEYS: &[&str] = &[
    "name",
    "path",
    "url",
    "glob",
    "base",
    "critical_base",
    "worker",
    "gates",
    "models",
    "env",
];
const MODELS_KEYS: &[&str] = &["primary", "fallbacks", "threshold", "provider_failure"];
const PROVIDER_FAILURE_KEYS: &[&str] = &["exit_codes", "patterns", "silence"];
const WORKER_KEYS: &[&str] = &["run", "timeout", "grace", "env", "attempts"];
const GATE_KEYS: &[&str] = &["name", "run", "timeout", "grace", "paths", "required"];
const ITEM_KEYS: &[&str] = &["repo", "id", "branch", "vars"];
const DISCOVER_KEYS: &[&str] = &["glob", "id", "branch", "vars"];
const ENV_KEYS: &[&str] = &["pass", "secrets"];
const STALL_KEYS: &[&str] = &["after"];
const REPORTS_KEYS: &[&str] = &["dir", "formats"];

/// The keys each mapping accepts, by schema definition name; a test checks these against the
/// generated schema so the loader and the schema cannot drift apart.
pub const KEYS_BY_DEFINITION: &[(&str, &[&str])] = &[
    ("Manifest", TOP_KEYS),
    ("Capacity", CAPACITY_KEYS),
    ("RepositorySpec", REPOSITORY_KEYS),
    ("Models", MODELS_KEYS),
    ("ProviderFailure", PROVIDER_FAILURE_KEYS),
    ("Worker", WORKER_KEYS),
    ("WorkerOverride", WORKER_KEYS),
    ("Gate", GATE_KEYS),
    ("ItemSpec", ITEM_KEYS),
    ("DiscoverSpec", DISCOVER_KEYS),
    ("EnvPolicy", ENV_KEYS),
    ("Stall", STALL_KEYS),
    ("Reports", REPORTS_KEYS),
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
fn suggest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
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

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('.')
        && s.len() <= 100
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Item ids: `[A-Za-z0-9._/-]`, no empty, `.` or `..` segment (ids become file names in logs).
pub fn valid_item_id(s: &str) -> bool {
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
pub fn name_from_url(url: &str) -> Option<String> {
    let trimmed = url.trim_end_matches('/');
    let last = trimmed.rsplit(['/', ':']).next()?;
    let last = last
        .strip_suffix(".git")
        .or_else(|| last.strip_suffix(".bundle"))
        .unwrap_or(last);
    valid_name(last).then(|| last.to_string())
}

/// Compile a glob the way runner matches paths: `*` stays within one path segment.
pub fn compile_glob(glob: &str) -> Result<GlobMatcher, String> {
    GlobBuilder::new(glob)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| e.kind().to_string())
}

impl Cx {
    fn err(&mut self, code: &'static str, path: &str, span: Span, msg: impl Into<String>) {
        self.problems.push(Problem::new(code, path, msg).at(span));
    }

    fn err_help(
        &mut self,
        code: &'static str,
        path: &str,
        span: Span,
        msg: impl Into<String>,
        help: impl Into<String>,
    ) {
        self.problems
            .push(Problem::new(code, path, msg).at(span).help(help));
    }

    fn wrong_type(&mut self, node: &Node, path: &str, expected: &str) {
        self.err(
            "wrong-type",
            path,
            node.span,
            format!("expected {expected}, {}", found(node)),
        );
    }

    fn map<'n>(&mut self, node: &'n Node, path: &str, keys: &[&str]) -> Option<MapView<'n>> {
        let Value::Map(entries) = &node.value else {
            self.wrong_type(node, path, "a mapping");
            return None;
        };
        let mut view = MapView {
            span: node.span,
            entries: Vec::with_capacity(entries.len()),
        };
        for (k, v) in entries {
            let Value::Str(key) = &k.value else {
                self.err(
                    "wrong-type",
                    path,
                    k.span,
                    format!("keys must be strings, {}", found(k)),
                );
                continue;
            };
            if !keys.contains(&key.as_str()) {
                let at = if path.is_empty() {
                    "at the top level".to_string()
                } else {
                    format!("in `{path}`")
                };
                let help = match suggest(key, keys) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!("known keys: {}", keys.join(", ")),
                };
                self.err_help(
                    "unknown-key",
                    &child(path, key),
                    k.span,
                    format!("unknown key `{key}` {at}"),
                    help,
                );
                continue;
            }
            view.entries.push((key.as_str(), k, v));
        }
        Some(view)
    }

    fn required<'n>(&mut self, m: &MapView<'n>, path: &str, key: &str) -> Option<&'n Node> {
        let v = m.get(key);
        if v.is_none() {
            let at = if path.is_empty() {
                "at the top level".to_string()
            } else {
                format!("in `{path}`")
            };
            self.err(
                "missing-key",
                &child(path, key),
                m.span,
                format!("missing required key `{key}` {at}"),
            );
        }
        v
    }

    fn string(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            _ => {
                self.wrong_type(node, path, "a string");
                None
            }
        }
    }

    fn nonempty(&mut self, node: &Node, path: &str) -> Option<String> {
        let s = self.string(node, path)?;
        if s.trim().is_empty() {
            self.err("invalid-value", path, node.span, "must not be empty");
            return None;
        }
        Some(s)
    }

    /// A scalar as text: vars may be written as numbers or booleans.
    fn scalar_text(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            Value::Float(f) => Some(f.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => {
                self.wrong_type(node, path, "a string");
                None
            }
        }
    }

    fn int(&mut self, node: &Node, path: &str, min: i128, max: i128) -> Option<i128> {
        let Value::Int(i) = node.value else {
            self.wrong_type(node, path, "an integer");
            return None;
        };
        if i < min || i > max {
            let msg = if i < min {
                format!("must be at least {min}, found {i}")
            } else {
                format!("must be at most {max}, found {i}")
            };
            self.err("invalid-value", path, node.span, msg);
            return None;
        }
        Some(i)
    }

    fn u32(&mut self, node: &Node, path: &str, min: u32, max: u32) -> Option<u32> {
        self.int(node, path, min.into(), max.into())
            .and_then(|i| u32::try_from(i).ok())
    }

    fn boolean(&mut self, node: &Node, path: &str) -> Option<bool> {
        match node.value {
            Value::Bool(b) => Some(b),
            _ => {
                self.wrong_type(node, path, "`true` or `false`");
                None
            }
        }
    }

    fn list<'n>(&mut self, node: &'n Node, path: &str) -> Option<&'n [Node]> {
        match &node.value {
            Value::Seq(v) => Some(v),
            _ => {
                self.wrong_type(node, path, "a list");
                None
            }
        }
    }

    /// A list of non-empty strings, reporting duplicates.
    fn string_list(&mut self, node: &Node, path: &str, what: &str) -> Option<Vec<String>> {
        let nodes = self.list(node, path)?;
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, n) in nodes.iter().enumerate() {
            let p = index(path, i);
            if let Some(s) = self.nonempty(n, &p) {
                if !seen.insert(s.clone()) {
                    self.err(
                        "duplicate",
                        &p,
                        n.span,
                        format!("{what} `{s}` is listed twice"),
                    );
                }
                out.push(s);
            }
        }
        Some(out)
    }

    fn duration(&mut self, node: &Node, path: &str, allow_zero: bool) -> Option<DurationSpec> {
        let text = match &node.value {
            Value::Str(s) => s.clone(),
            Value::Int(i) => {
                self.err_help(
                    "invalid-duration",
                    path,
                    node.span,
                    format!("`{i}` has no unit"),
                    format!("durations take units: `{i}s`, `{i}m`, `{i}h` or `{i}ms`"),
                );
                return None;
            }
            Value::Float(f) => {
                self.err_help(
                    "invalid-duration",
                    path,
                    node.span,
                    format!("`{f}` is not a duration"),
                    "durations take whole numbers with units, e.g. `1500ms`",
                );
                return None;
            }
            _ => {
                self.wrong_type(node, path, "a duration such as `30s`");
                return None;
            }
        };
        match parse_duration(&text) {
            Ok(d) if d.is_zero() && !allow_zero => {
                self.err(
                    "invalid-duration",
                    path,
                    node.span,
                    "must be longer than zero",
                );
                None
            }
            Ok(d) => Some(DurationSpec(d)),
            Err(e) => {
                self.err("invalid-duration", path, node.span, e);
                None
            }
        }
    }

    fn command(&mut self, node: &Node, path: &str) -> Option<CommandSpec> {
        match &node.value {
            Value::Str(s) if s.trim().is_empty() => {
                self.err("invalid-value", path, node.span, "the command is empty");
                None
            }
            Value::Str(s) => Some(CommandSpec::Shell(s.clone())),
            Value::Seq(items) => {
                if items.is_empty() {
                    self.err("invalid-value", path, node.span, "the command is empty");
                    return None;
                }
                let mut out = Vec::new();
                let mut ok = true;
                for (i, n) in items.iter().enumerate() {
                    match self.scalar_text(n, &index(path, i)) {
                        Some(s) => out.push(s),
                        None => ok = false,
                    }
                }
                if ok && out[0].trim().is_empty() {
                    self.err(
                        "invalid-value",
                        path,
                        items[0].span,
                        "the program name is empty",
                    );
                    return None;
                }
                ok.then_some(CommandSpec::Argv(out))
            }
            _ => {
                self.wrong_type(
                    node,
                    path,
                    "a command (a string for `sh -c`, or a list argv)",
                );
                None
            }
        }
    }

    /// A mapping of names to scalar values.
    fn str_map(
        &mut self,
        node: &Node,
        path: &str,
        check_key: fn(&str) -> bool,
        key_rule: &str,
    ) -> Option<BTreeMap<String, String>> {
        let Value::Map(entries) = &node.value else {
            self.wrong_type(node, path, "a mapping");
            return None;
        };
        let mut out = BTreeMap::new();
        for (k, v) in entries {
            let Some(key) = self.scalar_text(k, path) else {
                continue;
            };
            let p = child(path, &key);
            if !check_key(&key) {
                self.err("invalid-value", &p, k.span, format!("`{key}` {key_rule}"));
                continue;
            }
            if let Some(val) = self.scalar_text(v, &p) {
                out.insert(key, val);
            }
        }
        Some(out)
    }

    /// Check a template's placeholders for `ctx`; returns the `{item.<var>}` names it uses.
    fn template(&mut self, node: &Node, path: &str, text: &str, ctx: Context) -> Vec<String> {
        let names = match template::placeholders(text) {
            Ok(n) => n,
            Err(e) => {
                self.err("invalid-template", path, node.span, e);
                return Vec::new();
            }
        };
        let mut vars = Vec::new();
        for name in names {
            match template::check_placeholder(&name, ctx) {
                Ok(Some(v)) => {
                    if !vars.contains(&v) {
                        vars.push(v)
                    }
                }
                Ok(None) => {}
                Err(e) => self.err("unknown-placeholder", path, node.span, e),
            }
        }
        vars
    }

    fn command_templates(
        &mut self,
        node: &Node,
        path: &str,
        cmd: &CommandSpec,
        models: bool,
        owner: Owner,
    ) {
        let nodes: Vec<&Node> = match &node.value {
            Value::Seq(v) => v.iter().collect(),
            _ => vec![node],
        };
        for (i, part) in cmd.parts().into_iter().enumerate() {
            let n = nodes.get(i).copied().unwrap_or(node);
            let p = if matches!(cmd, CommandSpec::Argv(_)) {
                index(path, i)
            } else {
                path.to_string()
            };
            let vars = self.template(n, &p, part, Context::Command { models });
            if !vars.is_empty() {
                self.uses.push(TemplateUse {
                    owner: owner.clone(),
                    path: p,
                    span: n.span,
                    vars,
                });
            }
        }
    }

    fn manifest(&mut self, root: &Node) -> Option<Manifest> {
        let m = self.map(root, "", TOP_KEYS)?;
        let version = self.required(&m, "", "version").and_then(|n| {
            let v = self.int(n, "version", i128::MIN, i128::MAX)?;
            if v != 1 {
                self.err(
                    "unsupported-version",
                    "version",
                    n.span,
                    format!("version {v} is not supported; this runner reads version 1"),
                );
                return None;
            }
            Some(1)
        });
        let name = self.required(&m, "", "name").and_then(|n| {
            let s = self.nonempty(n, "name")?;
            if s.chars().any(char::is_control) || s.len() > 100 {
                self.err(
                    "invalid-value",
                    "name",
                    n.span,
                    "must be at most 100 characters without control characters",
                );
                return None;
            }
            Some(s)
        });
        let capacity = m.get("capacity").map(|n| self.capacity(n));
        let models = m.get("models").map(|n| self.models(n, "models"));
        let has_models = matches!(models, Some(Some(_)));
        let worker = self
            .required(&m, "", "worker")
            .and_then(|n| self.worker(n, "worker", has_models, None));
        let gates = m
            .get("gates")
            .map(|n| self.gates(n, "gates", has_models, None));
        let env = m.get("env").map(|n| self.env(n, "env"));
        let repositories = self
            .required(&m, "", "repositories")
            .and_then(|n| self.repositories(n, has_models));
        let items = m.get("items").map(|n| self.items(n));
        let discover = m.get("discover").map(|n| self.discover(n));
        let stall = m.get("stall").and_then(|n| {
            let s = self.map(n, "stall", STALL_KEYS)?;
            let after = s
                .get("after")
                .map(|a| self.u32(a, "stall.after", 1, 10_000));
            Some(Stall {
                after: after.flatten(),
            })
        });
        let reports = m.get("reports").and_then(|n| self.reports(n));
        let workspace = m
            .get("workspace")
            .and_then(|n| self.nonempty(n, "workspace"));

        // Cross-checks over whatever parsed.
        if let (Some(repos), Some(Some(items))) = (&repositories, &items) {
            self.check_items(repos, items, m.get("items"));
        }
        if let Some(repos) = &repositories {
            self.check_overrides(
                repos,
                worker.as_ref(),
                gates.as_ref().and_then(|g| g.as_ref()),
                models.as_ref().and_then(|m| m.as_ref()),
                env.as_ref().and_then(|e| e.as_ref()),
                root,
            );
            self.check_item_vars(
                repos,
                items.as_ref().and_then(|i| i.as_ref()),
                discover.as_ref().and_then(|d| d.as_ref()),
            );
        }

        if !self.problems.is_empty() {
            return None;
        }
        Some(Manifest {
            version: version?,
            name: name?,
            capacity: capacity.flatten(),
            repositories: repositories?,
            models: models.flatten(),
            worker: worker?,
            gates: gates.flatten().unwrap_or_default(),
            items: items.flatten().unwrap_or_default(),
            discover: discover.flatten().unwrap_or_default(),
            env: env.flatten(),
            stall,
            reports,
            workspace,
        })
    }

    fn capacity(&mut self, node: &Node) -> Option<Capacity> {
        let m = self.map(node, "capacity", CAPACITY_KEYS)?;
        let workers = m.get("workers").map(|n| {
            if let Value::Int(0) = n.value {
                self.err_help(
                    "invalid-value",
                    "capacity.workers",
                    n.span,
                    "`workers: 0` would never run anything",
                    "omit `workers` to use the number of CPUs",
                );
                return None;
            }
            self.u32(n, "capacity.workers", 1, 1024)
        });
        let probe = m.get("probe").map(|n| {
            let c = self.command(n, "capacity.probe")?;
            for part in c.parts() {
                if let Err(e) = template::placeholders(part).and_then(|p| match p.first() {
                    Some(name) => Err(format!(
                        "unknown placeholder `{{{name}}}`; the probe takes no placeholders"
                    )),
                    None => Ok(()),
                }) {
                    self.err("unknown-placeholder", "capacity.probe", n.span, e);
                }
            }
            Some(c)
        });
        Some(Capacity {
            workers: workers.flatten(),
            probe: probe.flatten(),
        })
    }

    fn models(&mut self, node: &Node, path: &str) -> Option<Models> {
        let m = self.map(node, path, MODELS_KEYS)?;
        let primary = self.required(&m, path, "primary").and_then(|n| {
            let p = child(path, "primary");
            if let Value::Null = n.value {
                self.err(
                    "empty-chain",
                    &p,
                    n.span,
                    "the model chain is empty: name a primary model",
                );
                return None;
            }
            let s = self.string(n, &p)?;
            if s.trim().is_empty() {
                self.err(
                    "empty-chain",
                    &p,
                    n.span,
                    "the model chain is empty: name a primary model",
                );
                return None;
            }
            Some(s)
        });
        let fallbacks = m.get("fallbacks").map(|n| {
            let p = child(path, "fallbacks");
            let list = self.string_list(n, &p, "model")?;
            if let (Some(primary), Value::Seq(nodes)) = (&primary, &n.value) {
                for (i, f) in list.iter().enumerate() {
                    if f == primary {
                        self.err(
                            "duplicate",
                            &index(&p, i),
                            nodes[i].span,
                            format!(
                                "model `{f}` is already the primary; a chain names each model once"
                            ),
                        );
                    }
                }
            }
            Some(list)
        });
        let threshold = m
            .get("threshold")
            .map(|n| self.u32(n, &child(path, "threshold"), 1, 100));
        let provider_failure = m.get("provider_failure").map(|n| {
            let p = child(path, "provider_failure");
            let pf = self.map(n, &p, PROVIDER_FAILURE_KEYS)?;
            let exit_codes = pf.get("exit_codes").map(|n| {
                let ep = child(&p, "exit_codes");
                let nodes = self.list(n, &ep)?;
                let mut out = Vec::new();
                for (i, c) in nodes.iter().enumerate() {
                    let code = self.int(c, &index(&ep, i), 1, 255)? as i32;
                    if out.contains(&code) {
                        self.err(
                            "duplicate",
                            &index(&ep, i),
                            c.span,
                            format!("exit code {code} is listed twice"),
                        );
                    }
                    out.push(code);
                }
                Some(out)
            });
            let patterns = pf
                .get("patterns")
                .map(|n| self.string_list(n, &child(&p, "patterns"), "pattern"));
            let silence = pf
                .get("silence")
                .map(|n| self.duration(n, &child(&p, "silence"), false));
            Some(ProviderFailure {
                exit_codes: exit_codes.flatten(),
                patterns: patterns.flatten().unwrap_or_default(),
                silence: silence.flatten(),
            })
        });
        Some(Models {
            primary: primary?,
            fallbacks: fallbacks.flatten().unwrap_or_default(),
            threshold: threshold.flatten(),
            provider_failure: provider_failure.flatten(),
        })
    }

    fn worker(
        &mut self,
        node: &Node,
        path: &str,
        models: bool,
        repo: Option<usize>,
    ) -> Option<Worker> {
        let m = self.map(node, path, WORKER_KEYS)?;
        let run_node = if repo.is_some() {
            m.get("run")
        } else {
            self.required(&m, path, "run")
        };
        let run = run_node.and_then(|n| {
            let p = child(path, "run");
            let cmd = self.command(n, &p)?;
            let owner = match repo {
                Some(r) => Owner::Repo(r, Field::WorkerRun),
                None => Owner::Top(Field::WorkerRun),
            };
            self.command_templates(n, &p, &cmd, models, owner);
            Some(cmd)
        });
        let timeout = m
            .get("timeout")
            .map(|n| self.duration(n, &child(path, "timeout"), false));
        let grace = m
            .get("grace")
            .map(|n| self.duration(n, &child(path, "grace"), true));
        let env = m.get("env").map(|n| {
            let p = child(path, "env");
            let env = self.str_map(
                n,
                &p,
                valid_env_name,
                "is not a valid environment variable name",
            )?;
            if let Value::Map(entries) = &n.value {
                for (k, v) in entries {
                    let Value::Str(key) = &k.value else { continue };
                    let Some(val) = env.get(key) else { continue };
                    let vp = child(&p, key);
                    let vars = self.template(v, &vp, val, Context::Command { models });
                    if !vars.is_empty() {
                        let field = Field::WorkerEnv(key.clone());
                        let owner = match repo {
                            Some(r) => Owner::Repo(r, field),
                            None => Owner::Top(field),
                        };
                        self.uses.push(TemplateUse {
                            owner,
                            path: vp,
                            span: v.span,
                            vars,
                        });
                    }
                }
            }
            Some(env)
        });
        let attempts = m
            .get("attempts")
            .map(|n| self.u32(n, &child(path, "attempts"), 1, 100));
        // A repository override may omit `run`; the caller keeps it apart from a full worker.
        let run = match (run, repo) {
            (Some(r), _) => r,
            (None, Some(_)) if run_node.is_none() => CommandSpec::Argv(Vec::new()),
            (None, _) => return None,
        };
        Some(Worker {
            run,
            timeout: timeout.flatten(),
            grace: grace.flatten(),
            env: env.flatten().unwrap_or_default(),
            attempts: attempts.flatten(),
        })
    }

    fn gates(
        &mut self,
        node: &Node,
        path: &str,
        models: bool,
        repo: Option<usize>,
    ) -> Option<Vec<Gate>> {
        let nodes = self.list(node, path)?;
        let mut out = Vec::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let p = index(path, i);
            let Some(g) = self.map(n, &p, GATE_KEYS) else {
                continue;
            };
            let name = self.required(&g, &p, "name").and_then(|nn| {
                let np = child(&p, "name");
                let s = self.nonempty(nn, &np)?;
                if !valid_name(&s) {
                    self.err(
                        "invalid-value",
                        &np,
                        nn.span,
                        format!("gate name `{s}` may use only letters, digits, `.`, `_` and `-`"),
                    );
                    return None;
                }
                if let Some(first) = names.insert(s.clone(), i) {
                    self.err(
                        "duplicate",
                        &np,
                        nn.span,
                        format!("gate `{s}` is already defined at `{path}[{first}]`"),
                    );
                }
                Some(s)
            });
            let run = self.required(&g, &p, "run").and_then(|rn| {
                let rp = child(&p, "run");
                let cmd = self.command(rn, &rp)?;
                let owner = match repo {
                    Some(r) => Owner::Repo(r, Field::Gates),
                    None => Owner::Top(Field::Gates),
                };
                self.command_templates(rn, &rp, &cmd, models, owner);
                Some(cmd)
            });
            let timeout = g
                .get("timeout")
                .map(|n| self.duration(n, &child(&p, "timeout"), false));
            let grace = g
                .get("grace")
                .map(|n| self.duration(n, &child(&p, "grace"), true));
            let paths = g.get("paths").map(|n| {
                let pp = child(&p, "paths");
                let list = self.string_list(n, &pp, "path glob")?;
                if let Value::Seq(nodes) = &n.value {
                    for (j, glob) in list.iter().enumerate() {
                        if let Err(e) = compile_glob(glob) {
                            self.err(
                                "invalid-glob",
                                &index(&pp, j),
                                nodes[j].span,
                                format!("`{glob}` is not a valid glob: {e}"),
                            );
                        }
                    }
                }
                Some(list)
            });
            let required = g
                .get("required")
                .map(|n| self.boolean(n, &child(&p, "required")));
            if let (Some(name), Some(run)) = (name, run) {
                out.push(Gate {
                    name,
                    run,
                    timeout: timeout.flatten(),
                    grace: grace.flatten(),
                    paths: paths.flatten().unwrap_or_default(),
                    required: required.flatten(),
                });
            }
        }
        Some(out)
    }

    fn env(&mut self, node: &Node, path: &str) -> Option<EnvPolicy> {
        let m = self.map(node, path, ENV_KEYS)?;
        let names = |cx: &mut Cx, key: &str| -> Option<Vec<String>> {
            let n = m.get(key)?;
            let p = child(path, key);
            let list = cx.string_list(n, &p, "variable")?;
            if let Value::Seq(nodes) = &n.value {
                for (i, v) in list.iter().enumerate() {
                    if !valid_env_name(v) {
                        cx.err(
                            "invalid-value",
                            &index(&p, i),
                            nodes[i].span,
                            format!("`{v}` is not a valid environment variable name"),
                        );
                    }
                }
            }
            Some(list)
        };
        let pass = names(self, "pass");
        let secrets = names(self, "secrets");
        Some(EnvPolicy {
            pass,
            secrets: secrets.unwrap_or_default(),
        })
    }

    fn reports(&mut self, node: &Node) -> Option<Reports> {
        let m = self.map(node, "reports", REPORTS_KEYS)?;
        let dir = m.get("dir").and_then(|n| self.nonempty(n, "reports.dir"));
        let formats = m.get("formats").and_then(|n| {
            let nodes = self.list(n, "reports.formats")?;
            if nodes.is_empty() {
                self.err(
                    "invalid-value",
                    "reports.formats",
                    n.span,
                    "name at least one format",
                );
                return None;
            }
            let mut out = Vec::new();
            for (i, f) in nodes.iter().enumerate() {
                let p = index("reports.formats", i);
                let s = self.string(f, &p)?;
                let Some(fmt) = ReportFormat::ALL.into_iter().find(|x| x.name() == s) else {
                    self.err_help(
                        "invalid-value",
                        &p,
                        f.span,
                        format!("unknown report format `{s}`"),
                        "formats: json, markdown, junit, html",
                    );
                    continue;
                };
                if out.contains(&fmt) {
                    self.err(
                        "duplicate",
                        &p,
                        f.span,
                        format!("format `{s}` is listed twice"),
                    );
                }
                out.push(fmt);
            }
            Some(out)
        });
        Some(Reports { dir, formats })
    }

    fn repositories(&mut self, node: &Node, models: bool) -> Option<Vec<RepositorySpec>> {
        let nodes = self.list(node, "repositories")?;
        if nodes.is_empty() {
            self.err(
                "invalid-value",
                "repositories",
                node.span,
                "name at least one repository",
            );
            return None;
        }
        let mut out = Vec::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let p = index("repositories", i);
            let Some(m) = self.map(n, &p, REPOSITORY_KEYS) else {
                continue;
            };
            let sources: Vec<&str> = ["path", "url", "glob"]
                .into_iter()
                .filter(|k| m.has(k))
                .collect();
            if sources.len() != 1 {
                let msg = if sources.is_empty() {
                    "a repository needs exactly one of `path`, `url` or `glob`".to_string()
                } else {
                    format!(
                        "a repository takes exactly one of `path`, `url` or `glob`, found {}",
                        sources
                            .iter()
                            .map(|s| format!("`{s}`"))
                            .collect::<Vec<_>>()
                            .join(" and ")
                    )
                };
                self.err("invalid-repository", &p, m.span, msg);
            }
            let get_str =
                |cx: &mut Cx, key: &str| m.get(key).and_then(|v| cx.nonempty(v, &child(&p, key)));
            let path = get_str(self, "path");
            let url = get_str(self, "url");
            let glob = get_str(self, "glob");
            if let (Some(g), Some(gn)) = (&glob, m.get("glob")) {
                if let Err(e) = compile_glob(g) {
                    self.err(
                        "invalid-glob",
                        &child(&p, "glob"),
                        gn.span,
                        format!("`{g}` is not a valid glob: {e}"),
                    );
                }
                if let Some(nn) = m.get("name") {
                    self.err_help(
                        "invalid-repository",
                        &child(&p, "name"),
                        nn.span,
                        "a `glob` entry cannot take a `name`",
                        "each repository a glob matches is named after its folder",
                    );
                }
            }
            let explicit_name = m.get("name").and_then(|nn| {
                let np = child(&p, "name");
                let s = self.nonempty(nn, &np)?;
                if !valid_name(&s) {
                    self.err("invalid-value", &np, nn.span, format!("repository name `{s}` may use only letters, digits, `.`, `_` and `-`, and may not start with `.`"));
                    return None;
                }
                Some(s)
            });
            let derived = if glob.is_some() {
                None
            } else if let Some(n) = &explicit_name {
                Some(n.clone())
            } else if let Some(pth) = &path {
                let full = normalize(&self.dir.join(pth));
                match full
                    .file_name()
                    .and_then(|f| f.to_str())
                    .filter(|f| valid_name(f))
                {
                    Some(f) => Some(f.to_string()),
                    None => {
                        self.err_help(
                            "invalid-repository",
                            &child(&p, "path"),
                            m.get("path").map_or(m.span, |n| n.span),
                            format!("cannot name a repository after `{pth}`"),
                            "give it a `name`",
                        );
                        None
                    }
                }
            } else if let Some(u) = &url {
                match name_from_url(u) {
                    Some(n) => Some(n),
                    None => {
                        self.err_help(
                            "invalid-repository",
                            &child(&p, "url"),
                            m.get("url").map_or(m.span, |n| n.span),
                            "cannot name a repository after its url",
                            "give it a `name`",
                        );
                        None
                    }
                }
            } else {
                None
            };
            if let Some(name) = &derived {
                let at = m
                    .get("name")
                    .or(m.get("path"))
                    .or(m.get("url"))
                    .map_or(m.span, |n| n.span);
                if let Some(first) = names.insert(name.clone(), i) {
                    self.err_help(
                        "duplicate",
                        &p,
                        at,
                        format!(
                            "repository `{name}` is already declared at `repositories[{first}]`"
                        ),
                        "repository names must be unique; set `name` to tell them apart",
                    );
                }
            }
            let base = m
                .get("base")
                .and_then(|v| self.nonempty(v, &child(&p, "base")));
            let critical_base = m
                .get("critical_base")
                .and_then(|v| self.string_list(v, &child(&p, "critical_base"), "marker"));
            let worker = m
                .get("worker")
                .map(|v| self.worker(v, &child(&p, "worker"), models, Some(i)));
            let gates = m
                .get("gates")
                .map(|v| self.gates(v, &child(&p, "gates"), models, Some(i)));
            let rmodels = m
                .get("models")
                .map(|v| self.models(v, &child(&p, "models")));
            let env = m.get("env").map(|v| self.env(v, &child(&p, "env")));
            let worker = worker.flatten().map(|w| WorkerOverride {
                run: match w.run {
                    CommandSpec::Argv(v) if v.is_empty() => None,
                    r => Some(r),
                },
                timeout: w.timeout,
                grace: w.grace,
                env: w.env,
                attempts: w.attempts,
            });
            out.push(RepositorySpec {
                name: derived.or(explicit_name),
                path,
                url,
                glob,
                base,
                critical_base: critical_base.unwrap_or_default(),
                worker,
                gates: gates.flatten(),
                models: rmodels.flatten(),
                env: env.flatten(),
                span: n.span,
            });
        }
        Some(out)
    }

    fn items(&mut self, node: &Node) -> Option<Vec<ItemSpec>> {
        let nodes = self.list(node, "items")?;
        let mut out = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            let p = index("items", i);
            let Some(m) = self.map(n, &p, ITEM_KEYS) else {
                continue;
            };
            let repo = self
                .required(&m, &p, "repo")
                .and_then(|v| self.nonempty(v, &child(&p, "repo")));
            let id = self.required(&m, &p, "id").and_then(|v| {
                let ip = child(&p, "id");
                let s = self.scalar_text(v, &ip)?;
                if !valid_item_id(&s) {
                    self.err_help("invalid-id", &ip, v.span, format!("item id `{s}` is not valid"), "ids use letters, digits and `.`, `_`, `/`, `-`, with no empty, `.` or `..` segment");
                    return Some(s);
                }
                Some(s)
            });
            let branch = m.get("branch").and_then(|v| {
                let bp = child(&p, "branch");
                let s = self.nonempty(v, &bp)?;
                self.template(v, &bp, &s, Context::Branch);
                Some(s)
            });
            let vars = m.get("vars").map(|v| {
                self.str_map(
                    v,
                    &child(&p, "vars"),
                    valid_var_name,
                    "is not a valid variable name (letters, digits, `_`, `-`)",
                )
            });
            if let (Some(repo), Some(id)) = (repo, id) {
                out.push(ItemSpec {
                    repo,
                    id,
                    branch,
                    vars: vars.flatten().unwrap_or_default(),
                    span: n.span,
                });
            }
        }
        Some(out)
    }

    fn discover(&mut self, node: &Node) -> Option<Vec<DiscoverSpec>> {
        let nodes = self.list(node, "discover")?;
        let mut out = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            let p = index("discover", i);
            let Some(m) = self.map(n, &p, DISCOVER_KEYS) else {
                continue;
            };
            let glob = self.required(&m, &p, "glob").and_then(|v| {
                let gp = child(&p, "glob");
                let g = self.nonempty(v, &gp)?;
                if g.starts_with('/') || g.split('/').any(|s| s == "..") {
                    self.err(
                        "invalid-glob",
                        &gp,
                        v.span,
                        format!("`{g}` must stay inside the repository (relative, without `..`)"),
                    );
                    return None;
                }
                if let Err(e) = compile_glob(&g) {
                    self.err(
                        "invalid-glob",
                        &gp,
                        v.span,
                        format!("`{g}` is not a valid glob: {e}"),
                    );
                    return None;
                }
                Some(g)
            });
            let id = self.required(&m, &p, "id").and_then(|v| {
                let ip = child(&p, "id");
                let s = self.nonempty(v, &ip)?;
                self.template(v, &ip, &s, Context::Discover);
                Some(s)
            });
            let branch = m.get("branch").and_then(|v| {
                let bp = child(&p, "branch");
                let s = self.nonempty(v, &bp)?;
                self.template(v, &bp, &s, Context::DiscoverBranch);
                Some(s)
            });
            let vars = m.get("vars").and_then(|v| {
                let vp = child(&p, "vars");
                let map = self.str_map(
                    v,
                    &vp,
                    valid_var_name,
                    "is not a valid variable name (letters, digits, `_`, `-`)",
                )?;
                if let Value::Map(entries) = &v.value {
                    for (k, val) in entries {
                        if let (Value::Str(key), Some(text)) = (&k.value, map.get(k.value_str())) {
                            self.template(val, &child(&vp, key), text, Context::Discover);
                        }
                    }
                }
                Some(map)
            });
            if let (Some(glob), Some(id)) = (glob, id) {
                out.push(DiscoverSpec {
                    glob,
                    id,
                    branch,
                    vars: vars.unwrap_or_default(),
                    span: n.span,
                });
            }
        }
        Some(out)
    }

    /// Items must name a declared repository (or one a `glob` entry could match) and be unique
    /// within it.
    fn check_items(&mut self, repos: &[RepositorySpec], items: &[ItemSpec], node: Option<&Node>) {
        let item_nodes: &[Node] = match node.map(|n| &n.value) {
            Some(Value::Seq(v)) => v,
            _ => &[],
        };
        let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
        let scopes = RepoScopes::new(repos);
        for (i, item) in items.iter().enumerate() {
            let p = index("items", i);
            let field_span = |key: &str| -> Span {
                item_nodes
                    .iter()
                    .find(|n| n.span == item.span)
                    .and_then(|n| match &n.value {
                        Value::Map(e) => e
                            .iter()
                            .find(|(k, _)| k.value_str() == key)
                            .map(|(_, v)| v.span),
                        _ => None,
                    })
                    .unwrap_or(item.span)
            };
            if scopes.of(&item.repo).is_none() {
                let mut known: Vec<&str> = repos.iter().filter_map(|r| r.name.as_deref()).collect();
                known.dedup();
                let help = match suggest(&item.repo, &known) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None if known.is_empty() => "declare it under `repositories`".to_string(),
                    None => format!("declared repositories: {}", known.join(", ")),
                };
                self.err_help(
                    "undeclared-repo",
                    &child(&p, "repo"),
                    field_span("repo"),
                    format!(
                        "item names repository `{}`, which is not declared",
                        item.repo
                    ),
                    help,
                );
            }
            if let Some(first) = seen.insert((&item.repo, &item.id), i) {
                self.err(
                    "duplicate",
                    &child(&p, "id"),
                    field_span("id"),
                    format!(
                        "item `{}` of repository `{}` is already defined at `items[{first}]`",
                        item.id, item.repo
                    ),
                );
            }
        }
    }

    /// Every `{item.<var>}` a worker or gate template uses must be defined by every item that
    /// will render it: explicit items of the repositories it applies to, and every discovery.
    fn check_item_vars(
        &mut self,
        repos: &[RepositorySpec],
        items: Option<&Vec<ItemSpec>>,
        discover: Option<&Vec<DiscoverSpec>>,
    ) {
        let uses = std::mem::take(&mut self.uses);
        let scopes = RepoScopes::new(repos);
        for u in &uses {
            for var in &u.vars {
                let mut missing: Vec<String> = Vec::new();
                for item in items.into_iter().flatten() {
                    let Some(scope) = scopes.of(&item.repo) else {
                        continue;
                    };
                    if applies(&u.owner, scope, repos) && !item.vars.contains_key(var) {
                        missing.push(format!("item `{}/{}`", item.repo, item.id));
                    }
                }
                for (di, d) in discover.into_iter().flatten().enumerate() {
                    let reaches = (0..repos.len()).any(|r| applies(&u.owner, r, repos));
                    if reaches && !d.vars.contains_key(var) {
                        missing.push(format!("`discover[{di}]`"));
                    }
                }
                if !missing.is_empty() {
                    let n = missing.len();
                    let listed = if n > 3 {
                        format!("{} and {} more", missing[..3].join(", "), n - 3)
                    } else {
                        missing.join(", ")
                    };
                    self.err_help(
                        "undefined-var",
                        &u.path,
                        u.span,
                        format!("`{{item.{var}}}` is not defined by {listed}"),
                        format!(
                            "define `{var}` in the `vars` of every item this template runs for"
                        ),
                    );
                }
            }
        }
        self.uses = uses;
    }

    /// Repository overrides may narrow the top level, never widen it.
    fn check_overrides(
        &mut self,
        repos: &[RepositorySpec],
        worker: Option<&Worker>,
        gates: Option<&Vec<Gate>>,
        models: Option<&Models>,
        env: Option<&EnvPolicy>,
        root: &Node,
    ) {
        let repo_nodes: Vec<&Node> = match &root.value {
            Value::Map(e) => e
                .iter()
                .find(|(k, _)| k.value_str() == "repositories")
                .and_then(|(_, v)| match &v.value {
                    Value::Seq(s) => Some(s.iter().collect()),
                    _ => None,
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        for (i, r) in repos.iter().enumerate() {
            let p = index("repositories", i);
            let rnode = repo_nodes.iter().find(|n| n.span == r.span).copied();
            let at = |path: &[&str]| -> Span {
                rnode
                    .and_then(|n| n.lookup(path))
                    .map_or(r.span, |n| n.span)
            };
            let widened = "a repository may narrow the top level but never widen it";
            if let (Some(w), Some(top)) = (&r.worker, worker) {
                if let Some(t) = w.timeout
                    && t.0 > top.timeout()
                {
                    self.err_help(
                        "widened-override",
                        &format!("{p}.worker.timeout"),
                        at(&["worker", "timeout"]),
                        format!(
                            "{} exceeds the top-level worker timeout of {}",
                            format_duration(t.0),
                            format_duration(top.timeout())
                        ),
                        widened,
                    );
                }
                if let Some(g) = w.grace
                    && g.0 > top.grace()
                {
                    self.err_help(
                        "widened-override",
                        &format!("{p}.worker.grace"),
                        at(&["worker", "grace"]),
                        format!(
                            "{} exceeds the top-level worker grace of {}",
                            format_duration(g.0),
                            format_duration(top.grace())
                        ),
                        widened,
                    );
                }
                if let Some(a) = w.attempts
                    && a > top.attempts()
                {
                    self.err_help(
                        "widened-override",
                        &format!("{p}.worker.attempts"),
                        at(&["worker", "attempts"]),
                        format!("{a} attempts exceed the top level's {}", top.attempts()),
                        widened,
                    );
                }
            }
            if let Some(rg) = &r.gates {
                let top_gates = gates.map(Vec::as_slice).unwrap_or(&[]);
                let ceiling = top_gates
                    .iter()
                    .map(Gate::timeout)
                    .max()
                    .unwrap_or(DEFAULT_GATE_TIMEOUT);
                let grace_ceiling = top_gates
                    .iter()
                    .map(Gate::grace)
                    .max()
                    .unwrap_or(DEFAULT_GRACE);
                for (gi, g) in rg.iter().enumerate() {
                    let same = top_gates.iter().find(|t| t.name == g.name);
                    let (limit, what) = match same {
                        Some(t) => (
                            t.timeout(),
                            format!("the top-level `{}` gate's timeout", t.name),
                        ),
                        None => (ceiling, "the longest top-level gate timeout".to_string()),
                    };
                    if g.timeout() > limit {
                        let gis = gi.to_string();
                        self.err_help(
                            "widened-override",
                            &format!("{p}.gates[{gi}].timeout"),
                            at(&["gates", &gis, "timeout"]),
                            format!(
                                "{} exceeds {what} of {}",
                                format_duration(g.timeout()),
                                format_duration(limit)
                            ),
                            widened,
                        );
                    }
                    let glimit = same.map_or(grace_ceiling, Gate::grace);
                    if g.grace() > glimit {
                        let gis = gi.to_string();
                        self.err_help(
                            "widened-override",
                            &format!("{p}.gates[{gi}].grace"),
                            at(&["gates", &gis, "grace"]),
                            format!(
                                "grace {} exceeds the top level's {}",
                                format_duration(g.grace()),
                                format_duration(glimit)
                            ),
                            widened,
                        );
                    }
                }
            }
            if let Some(rm) = &r.models {
                match models {
                    None => self.err_help(
                        "widened-override",
                        &format!("{p}.models"),
                        at(&["models"]),
                        "the top level names no models, so a repository cannot add any",
                        widened,
                    ),
                    Some(top) => {
                        let chain = top.chain();
                        for (mi, model) in rm.chain().iter().enumerate() {
                            if !chain.contains(model) {
                                let key: Vec<String> = if mi == 0 {
                                    vec!["primary".into()]
                                } else {
                                    vec!["fallbacks".into(), (mi - 1).to_string()]
                                };
                                let keyr: Vec<&str> = std::iter::once("models")
                                    .chain(key.iter().map(String::as_str))
                                    .collect();
                                self.err_help(
                                    "widened-override",
                                    &format!("{p}.models"),
                                    at(&keyr),
                                    format!(
                                        "model `{model}` is not in the top-level chain ({})",
                                        chain.join(", ")
                                    ),
                                    widened,
                                );
                            }
                        }
                    }
                }
            }
            if let Some(re) = &r.env {
                let top_pass = env
                    .map(EnvPolicy::pass)
                    .unwrap_or_else(|| DEFAULT_ENV_PASS.iter().map(|s| s.to_string()).collect());
                let top_secrets = env.map(|e| e.secrets.clone()).unwrap_or_default();
                for (vi, v) in re.pass.iter().flatten().enumerate() {
                    if !top_pass.contains(v) {
                        let vis = vi.to_string();
                        self.err_help(
                            "widened-override",
                            &format!("{p}.env.pass[{vi}]"),
                            at(&["env", "pass", &vis]),
                            format!("`{v}` is not passed by the top level"),
                            widened,
                        );
                    }
                }
                for (vi, v) in re.secrets.iter().enumerate() {
                    if !top_secrets.contains(v) {
                        let vis = vi.to_string();
                        self.err_help(
                            "widened-override",
                            &format!("{p}.env.secrets[{vi}]"),
                            at(&["env", "secrets", &vis]),
                            format!("`{v}` is not a top-level secret"),
                            widened,
                        );
                    }
                }
            }
        }
    }
}

fn valid_var_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The index of the repository entry an item's `repo` refers to: a named entry, or else the first
/// `glob` entry whose last segment could match that name. Globs are compiled once, not per item.
pub struct RepoScopes<'a> {
    repos: &'a [RepositorySpec],
    /// Per entry, the matcher of its glob's last segment (`None` for `**`, which matches all).
    globs: Vec<Option<Option<GlobMatcher>>>,
}

impl<'a> RepoScopes<'a> {
    pub fn new(repos: &'a [RepositorySpec]) -> Self {
        let globs = repos
            .iter()
            .map(|r| {
                r.glob.as_deref().and_then(|g| {
                    let last = g.trim_end_matches('/').rsplit('/').next().unwrap_or(g);
                    if last == "**" {
                        Some(None)
                    } else {
                        Glob::new(last).ok().map(|gl| Some(gl.compile_matcher()))
                    }
                })
            })
            .collect();
        RepoScopes { repos, globs }
    }

    pub fn of(&self, name: &str) -> Option<usize> {
        if let Some(i) = self
            .repos
            .iter()
            .position(|r| r.name.as_deref() == Some(name))
        {
            return Some(i);
        }
        self.globs.iter().position(|g| match g {
            Some(None) => true,
            Some(Some(m)) => m.is_match(name),
            None => false,
        })
    }
}

/// Does a template of `owner` render for items of repository entry `scope`?
fn applies(owner: &Owner, scope: usize, repos: &[RepositorySpec]) -> bool {
    match owner {
        Owner::Repo(r, _) => *r == scope,
        Owner::Top(field) => {
            let r = &repos[scope];
            match field {
                Field::WorkerRun => r.worker.as_ref().is_none_or(|w| w.run.is_none()),
                Field::WorkerEnv(k) => r.worker.as_ref().is_none_or(|w| !w.env.contains_key(k)),
                Field::Gates => r.gates.is_none(),
            }
        }
    }
}

impl Node {
    fn value_str(&self) -> &str {
        match &self.value {
            Value::Str(s) => s,
            _ => "",
        }
    }

    /// Follow a key path (mapping keys, or list indices as numbers) down the tree.
    fn lookup(&self, path: &[&str]) -> Option<&Node> {
        let mut cur = self;
        for key in path {
            cur = match &cur.value {
                Value::Map(e) => e
                    .iter()
                    .find(|(k, _)| k.value_str() == *key)
                    .map(|(_, v)| v)?,
                Value::Seq(s) => s.get(key.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(cur)
    }
}
