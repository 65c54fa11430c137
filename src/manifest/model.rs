//! The typed manifest (version 1), as validated by the loader.
//!
//! These types are the single description of the format: `schemas/manifest.schema.json` is
//! generated from them, and the loader accepts exactly their keys (a test holds the two
//! together). Optional keys stay `Option` so that the manifest can be echoed faithfully; the
//! defaults documented in `docs/manifest.md` live in the accessor methods, in one place.

use super::yaml::Span;
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

pub use super::duration::DurationSpec;
pub(crate) use super::duration::{format_approx, format_duration, parse_duration};
pub(crate) use super::sandbox::DEFAULT_ENV_PASS;
pub use super::sandbox::{EnvPolicy, Network, NetworkPolicy, Sandbox, SandboxMode, SecretRole};

pub(crate) const DEFAULT_WORKER_TIMEOUT: Duration = Duration::from_secs(3600);
pub(crate) const DEFAULT_GATE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(10);
pub(crate) const DEFAULT_ATTEMPTS: u32 = 1;
pub(crate) const DEFAULT_THRESHOLD: u32 = 2;
pub(crate) const DEFAULT_STALL_AFTER: u32 = 3;
pub(crate) const DEFAULT_REVIEW_ROUNDS: u32 = 3;
pub(crate) const DEFAULT_REPORTS_DIR: &str = "runner-reports";
pub(crate) const DEFAULT_WORKSPACE: &str = ".runner/workspace";
pub(crate) const DEFAULT_PROVIDER_EXIT_CODES: &[i32] = &[75];
/// Default `models.provider_failure.refused_exit_codes`: EX_NOPERM, the provider refused the
/// key (authentication, billing).
pub(crate) const DEFAULT_REFUSED_EXIT_CODES: &[i32] = &[77];

/// A runner job manifest.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(title = "runner manifest", deny_unknown_fields)]
pub struct Manifest {
    /// Format version; must be 1.
    #[schemars(range(min = 1, max = 1))]
    pub version: u32,
    /// Label shown in reports; also scopes the state ledger.
    #[schemars(length(min = 1))]
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Capacity>,
    /// Repositories to work on: by `path`, by `url` (cloned into the workspace) or by `glob`.
    pub repositories: Vec<RepositorySpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models: Option<Models>,
    pub worker: Worker,
    /// Run in order after each worker pass; the first failing required gate decides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<Gate>,
    /// Explicit work items.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<ItemSpec>,
    /// Items discovered in every repository by a file glob.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub discover: Vec<DiscoverSpec>,
    /// Items read from trackers: each source is a command printing `runner.items/v1` JSON.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<EnvPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall: Option<Stall>,
    /// Stop admitting new items once the usage workers report reaches this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Push each completed work branch and open or update its pull request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publish: Option<Publish>,
    /// Tell a person of incidents (a stall, a quarantine, a refused key, a spent budget, runner
    /// failing): once per cause over every run, and again when it clears.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notify: Option<Notify>,
    /// Host-wide shared resources and how many commands may hold one at once
    /// (`{browser: 1, heavy-build: 2}`); a gate or the worker names what it `uses`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reports: Option<Reports>,
    /// Where `url:` repositories are cloned and work-branch worktrees live
    /// (default `.runner/workspace`, relative to the manifest's folder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// How a fresh worktree of an item on a work branch is made ready: what the checkout's
    /// ignored files gave its gates (`node_modules`, a virtualenv, an ignored `Cargo.lock`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreePrep>,
    /// How the kernel confines every worker and gate (and a worktree's setup): what they may
    /// write and whether they reach the network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
}

/// How a fresh worktree is made ready before its item's first attempt.
#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct WorktreePrep {
    /// Run once in each fresh worktree, before the first attempt (`npm ci`), with the worker's
    /// environment; a setup that fails holds the item (the next run tries again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup: Option<CommandSpec>,
    /// The setup's time limit (default 30m).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationSpec>,
    /// Ignored paths of the checkout (relative to its top) each worktree gets: a folder linked
    /// (`node_modules`, `.venv`), a file copied (an ignored `Cargo.lock`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub share: Vec<String>,
}

impl WorktreePrep {
    pub fn timeout(&self) -> Duration {
        self.timeout.map_or(DEFAULT_GATE_TIMEOUT, |d| d.0)
    }
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Capacity {
    /// Upper bound on concurrent items (default: the number of CPUs).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub workers: Option<u32>,
    /// Command printing an integer of free provider slots; the effective bound is
    /// clamp(probe, 1, workers), re-read whenever a slot fills.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<CommandSpec>,
}

/// A command: a list is an argv run directly; a string runs under `sh -c`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum CommandSpec {
    Shell(String),
    Argv(Vec<String>),
}

impl CommandSpec {
    /// Every template string in the command.
    pub(crate) fn parts(&self) -> Vec<&str> {
        match self {
            CommandSpec::Shell(s) => vec![s.as_str()],
            CommandSpec::Argv(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// A repository entry. Exactly one of `path`, `url`, `glob`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RepositorySpec {
    /// Unique name; defaults to the folder name (not allowed with `glob`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A local checkout, relative to the manifest's folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A remote (or bundle, or bare repository) cloned once into the workspace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Every git checkout matching becomes a repository named after its folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// Base branch for new work branches (default: the branch HEAD is on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Commits or refs that every continued work branch must contain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub critical_base: Vec<String>,
    /// A repository that may be absent: when it is not there its items are skipped
    /// (`repo-not-found`) without failing the run. A declared repository that is missing
    /// otherwise makes `apply` exit 1.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// Narrows the top-level worker for this repository.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerOverride>,
    /// Replaces the top-level gates for this repository (timeouts may not exceed the top level's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gates: Option<Vec<Gate>>,
    /// Narrows the model chain: only models of the top-level chain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models: Option<Models>,
    /// Narrows the environment: only variables the top level passes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<EnvPolicy>,
    /// Replaces the top-level `worktree` for this repository.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreePrep>,
    #[serde(skip)]
    #[schemars(skip)]
    pub span: Span,
}

impl RepositorySpec {
    pub(crate) fn source_kind(&self) -> SourceKind {
        if self.url.is_some() {
            SourceKind::Url
        } else if self.glob.is_some() {
            SourceKind::Glob
        } else {
            SourceKind::Path
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Path,
    Url,
    Glob,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Models {
    #[schemars(length(min = 1))]
    pub primary: String,
    /// Tried in order after the primary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
    /// Consecutive provider-class failures on one item's chain before moving on (default 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub threshold: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_failure: Option<ProviderFailure>,
    /// The rest between provider-class failures of one item: exponential with full jitter
    /// (default `{initial: 10s, max: 10m}`); a retry hint in the output is honoured up to `max`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<BackoffSpec>,
    /// What a model's tokens cost, in US dollars per million, by model name (each a model of the
    /// chain): runner prices a worker's reported tokens with it when the worker reports no cost
    /// of its own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, Price>,
}

/// `models.prices.<model>`: US dollars per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Price {
    /// Per million input tokens.
    #[schemars(range(min = 0))]
    pub input: f64,
    /// Per million output tokens.
    #[schemars(range(min = 0))]
    pub output: f64,
}

impl Price {
    /// What `input` and `output` tokens cost at this price.
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input + output as f64 * self.output) / 1_000_000.0
    }
}

/// `models.backoff`.
#[derive(Clone, Copy, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct BackoffSpec {
    /// The longest first rest (default 10s; `0s` turns back-off off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial: Option<DurationSpec>,
    /// The longest rest ever (default 10m).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<DurationSpec>,
}

/// Default `models.backoff.initial`.
pub(crate) const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_secs(10);
/// Default `models.backoff.max`.
pub(crate) const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(600);

impl Models {
    /// `models.backoff` with its defaults: (initial, max).
    pub fn backoff(&self) -> (Duration, Duration) {
        let b = self.backoff.as_ref();
        (
            b.and_then(|b| b.initial)
                .map_or(DEFAULT_BACKOFF_INITIAL, |d| d.0),
            b.and_then(|b| b.max).map_or(DEFAULT_BACKOFF_MAX, |d| d.0),
        )
    }

    /// The chain in the order it is tried.
    pub fn chain(&self) -> Vec<&str> {
        std::iter::once(self.primary.as_str())
            .chain(self.fallbacks.iter().map(String::as_str))
            .collect()
    }
    pub fn threshold(&self) -> u32 {
        self.threshold.unwrap_or(DEFAULT_THRESHOLD)
    }
}

/// How a worker failure is recognised as the provider's fault.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ProviderFailure {
    /// Exit codes that mean a provider failure (default [75], EX_TEMPFAIL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_codes: Option<Vec<i32>>,
    /// Exit codes that mean the provider refused the key — authentication or billing (default
    /// [77], EX_NOPERM): the model is not used again in the run, by any item.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_exit_codes: Option<Vec<i32>>,
    /// Case-insensitive substrings matched against the worker's output tail.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patterns: Vec<String>,
    /// No output for this long counts as a stalled stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub silence: Option<DurationSpec>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Worker {
    /// The command; templates: `{model}`, `{repo}`, `{repo.path}`, `{item}`, `{item.<var>}`,
    /// `{attempt}`, `{run}`.
    pub run: CommandSpec,
    /// Default 1h.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationSpec>,
    /// Time between SIGTERM and SIGKILL when ending the process group (default 10s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace: Option<DurationSpec>,
    /// Extra environment (templates allowed in values).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Worker+gates passes per item before it halts (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub attempts: Option<u32>,
    /// Commit what the worker left (as it stood before the gates ran) when the item completes:
    /// on the work branch, or for an item without one on the checked-out branch (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<bool>,
    /// A pass that changed nothing is a failed attempt (default false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_change: Option<bool>,
    /// What the processes of one item (worker and gates) may use together, enforced by the
    /// item's cgroup: `apply` refuses to start where cgroups cannot enforce them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<WorkerLimits>,
    /// Shared resources (declared in `resources`) held while the worker runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uses: Vec<String>,
    /// A cheap question `apply` (and `doctor`) puts to each model of the chain through this
    /// worker before the queue, as its `{item.task}`, with `RUNNER_PROBE=1`, in an empty
    /// scratch repository: a refused key stops the run before it touches an item.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub probe: Option<String>,
}

/// How long a probe may take.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// `worker.limits`: `{memory: 4G, pids: 512, cpu: 2}`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WorkerLimits(pub crate::support::limits::Limits);

impl Serialize for WorkerLimits {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let l = &self.0;
        let mut m = s.serialize_map(None)?;
        if let Some(b) = l.memory {
            m.serialize_entry("memory", &crate::support::limits::format_size(b))?;
        }
        if let Some(p) = l.pids {
            m.serialize_entry("pids", &p)?;
        }
        if let Some(c) = l.cpu {
            m.serialize_entry("cpu", &c)?;
        }
        m.end()
    }
}

impl JsonSchema for WorkerLimits {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "WorkerLimits".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "memory": {
                    "description": "Memory for the item's processes together: bytes, or with a unit in powers of 1024 (`512M`, `4G`).",
                    "type": ["string", "integer"],
                    "pattern": "^[0-9]+ *([KMGTkmgt](i?[Bb])?|[Bb])?$",
                    "minimum": 1
                },
                "pids": {
                    "description": "Processes and threads at once.",
                    "type": "integer",
                    "minimum": 1
                },
                "cpu": {
                    "description": "CPUs' worth of time: `1.5` is one and a half CPUs.",
                    "type": "number",
                    "exclusiveMinimum": 0
                }
            }
        })
    }
}

impl Worker {
    pub fn commit(&self) -> bool {
        self.commit.unwrap_or(true)
    }
    pub fn require_change(&self) -> bool {
        self.require_change.unwrap_or(false)
    }
    pub fn timeout(&self) -> Duration {
        self.timeout.map_or(DEFAULT_WORKER_TIMEOUT, |d| d.0)
    }
    pub fn grace(&self) -> Duration {
        self.grace.map_or(DEFAULT_GRACE, |d| d.0)
    }
    pub fn attempts(&self) -> u32 {
        self.attempts.unwrap_or(DEFAULT_ATTEMPTS)
    }
}

/// A repository's narrowing of the worker; omitted keys inherit the top level.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct WorkerOverride {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<CommandSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace: Option<DurationSpec>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub attempts: Option<u32>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Gate {
    #[schemars(length(min = 1))]
    pub name: String,
    pub run: CommandSpec,
    /// Default 30m.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GateTimeout>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace: Option<DurationSpec>,
    /// Run only when the item's changed files match one of these globs; else skipped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// A gate with `required: false` is reported but never decides (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// The least number of tests the gate must have run: output lines matching `pattern`
    /// (fewer, and the gate fails, however it exited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_tests: Option<MinTests>,
    /// Shared resources (declared in `resources`) held while the gate runs; waiting for them
    /// does not count against its `timeout`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uses: Vec<String>,
    /// Run the gate once on the repository's base commit too, and forgive the failures it
    /// already has there (default false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<bool>,
    /// Reuse a recorded verdict of this gate on the same tree, command and environment
    /// (default true; `apply --no-cache` turns reuse off for a run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<bool>,
}

/// A floor on the tests a gate ran, counted from its output.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct MinTests {
    #[schemars(range(min = 1))]
    pub count: u32,
    /// A regular expression; each output line it matches counts one test.
    pub pattern: String,
}

impl Gate {
    pub fn baseline(&self) -> bool {
        self.baseline.unwrap_or(false)
    }

    pub fn cache(&self) -> bool {
        self.cache.unwrap_or(true)
    }

    /// The gate's fixed limit; for `auto`, the default (what the run falls back to until the
    /// gate has history).
    pub fn timeout(&self) -> Duration {
        match self.timeout {
            Some(GateTimeout::Fixed(d)) => d.0,
            _ => DEFAULT_GATE_TIMEOUT,
        }
    }
    pub(crate) fn timeout_is_auto(&self) -> bool {
        self.timeout == Some(GateTimeout::Auto)
    }
    pub fn grace(&self) -> Duration {
        self.grace.map_or(DEFAULT_GRACE, |d| d.0)
    }
    pub fn required(&self) -> bool {
        self.required.unwrap_or(true)
    }
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ItemSpec {
    /// Name of a declared repository.
    pub repo: String,
    /// Unique within its repository; `[A-Za-z0-9._/-]`.
    #[schemars(regex(pattern = r"^[A-Za-z0-9._/-]+$"))]
    pub id: String,
    /// Work branch (a template): created from `base`, or continued if it exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Values for `{item.<var>}` placeholders.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    /// Items this one waits for: the id of an item of its repository, or `repo/id`. It runs
    /// once they have completed, in this run or an earlier one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// Where each of `after` is written.
    #[serde(skip)]
    #[schemars(skip)]
    pub after_spans: Vec<Span>,
    /// The items `after` names, `(repository, id)`, as validation found them.
    #[serde(skip)]
    #[schemars(skip)]
    pub after_items: Vec<(String, String)>,
    #[serde(skip)]
    #[schemars(skip)]
    pub span: Span,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct DiscoverSpec {
    /// File glob matched inside each repository, relative to its root.
    pub glob: String,
    /// Item id template over `{match.path}`, `{match.dir}`, `{match.name}`, `{match.stem}`,
    /// `{match.parent}`.
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    #[serde(skip)]
    #[schemars(skip)]
    pub span: Span,
}

/// A tracker the items come from: a command that prints its open items as `runner.items/v1`
/// JSON (see `schemas/items.schema.json`), following the tracker's pages to the end.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SourceSpec {
    /// Names the source; its items' ids are `<name>-<id>`. `[A-Za-z0-9._-]`.
    #[schemars(regex(pattern = r"^[A-Za-z0-9._-]+$"))]
    pub name: String,
    /// Prints the items; run as written (no placeholders) in the manifest's folder with the
    /// manifest's `env`, at `plan` and `apply`. It must only read.
    pub run: CommandSpec,
    /// The longest the command may take (default 2m).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationSpec>,
    /// The repository of an item that names none and carries none of `labels`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// A label naming the repository of an item that carries it (`{"area:web": web}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The work branch of its items (a template over `{repo}` and `{item}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Values for `{item.<var>}` every item of the source gets (an item's own win).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    /// Tells the tracker what became of an item: run as written, with `RUNNER_SOURCE_ID`,
    /// `RUNNER_WRITEBACK_EVENT`, `RUNNER_WRITEBACK_LABEL`, `RUNNER_WRITEBACK_UNLABEL`,
    /// `RUNNER_WRITEBACK_KEY` and `RUNNER_WRITEBACK_BODY` (a comment to post, once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writeback: Option<CommandSpec>,
    /// What `runner doctor` runs to know the tracker can be read and written back (its client
    /// present, authenticated for the host, the labels runner sets there); run as written, with
    /// the same environment as `writeback`. It must only read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<CommandSpec>,
    #[serde(skip)]
    #[schemars(skip)]
    pub span: Span,
}

impl SourceSpec {
    pub fn timeout(&self) -> Duration {
        self.timeout.map_or(Duration::from_secs(120), |d| d.0)
    }
}

/// `publish`: what becomes of a completed item's work branch.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Publish {
    /// Push the branch to `remote` (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub push: Option<bool>,
    /// The remote to push to (default `origin`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// Opens or updates the pull request, in the repository's checkout, after the push: e.g.
    /// `gh pr create --fill --head {branch}`. Templates: `{branch}`, `{item}`, `{repo}`,
    /// `{remote}`; its environment adds `RUNNER_BRANCH`, `RUNNER_REMOTE`, `RUNNER_PR_TITLE`,
    /// `RUNNER_PR_BODY` (a file: the item's summary and diff stat) and, when an earlier run opened
    /// one, `RUNNER_PR_URL`. The last URL it prints is the pull request's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pr: Option<CommandSpec>,
    /// Prints the state of an item's pull request as `runner.pr/v1` JSON (`state`: open,
    /// merged or closed; `review`; `checks`; `head`), read by `plan`, `apply` and `status` for
    /// each published item: merged is done for good, closed is `rejected`. Same templates and
    /// environment as `pr`, with `RUNNER_PR_URL` always set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<CommandSpec>,
    /// How many review rounds runner makes on a pull request whose reviewers ask for changes
    /// (or whose checks fail) before it holds the item `needs-human` (default 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub review_rounds: Option<u32>,
    /// Longest the pull-request command may take (default 2m).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationSpec>,
}

impl Publish {
    pub fn push(&self) -> bool {
        self.push.unwrap_or(true)
    }
    pub fn remote(&self) -> &str {
        self.remote.as_deref().unwrap_or("origin")
    }
    pub fn timeout(&self) -> Duration {
        self.timeout.map_or(Duration::from_secs(120), |d| d.0)
    }
    pub fn review_rounds(&self) -> u32 {
        self.review_rounds.unwrap_or(DEFAULT_REVIEW_ROUNDS)
    }
}

/// Placeholders `publish.pr` may use.
pub(crate) const PUBLISH_VARS: &[&str] = &["branch", "item", "repo", "remote"];

/// The placeholders a worktree's `setup` may use: it runs once per fresh worktree, for its
/// item.
pub(crate) const SETUP_VARS: &[&str] = &["repo", "repo.path", "item"];

/// `budget`: what may be spent, as workers report it in `$RUNNER_USAGE` — by one run, and by
/// every run of the manifest in a UTC day or month (at least one of the three).
#[derive(Clone, Copy, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Budget {
    /// US dollars: once the run's reported cost reaches it, no new item starts (items running
    /// finish) and the run ends `budget` (exit 5).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cost_usd: Option<f64>,
    /// US dollars a UTC day, over every run of the manifest (every machine's on a shared
    /// ledger): once reached, no new item starts and the rest are held `budget` until the day
    /// ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub daily_usd: Option<f64>,
    /// The same for a UTC calendar month.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub monthly_usd: Option<f64>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Stall {
    /// Consecutive halted items with no gate passing anywhere before the run ends `stalled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub after: Option<u32>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Reports {
    /// Relative to the manifest's folder (default `runner-reports`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// Default: all four.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub formats: Option<Vec<ReportFormat>>,
    /// How much history is kept: report folders and the ledger's record of older runs are pruned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep: Option<Keep>,
    /// Where the manifest's metrics are written after every run, in Prometheus's text format
    /// (relative to the manifest's folder): e.g. node-exporter's textfile collector folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
}

/// Retention: a run is pruned once it is not among the latest `runs` runs of its manifest, or
/// once it started more than `days` days ago — whichever comes first. A live run never is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Keep {
    /// Default 30.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<u32>,
    /// Default 90.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub days: Option<u32>,
}

impl Keep {
    pub(crate) const DEFAULT_RUNS: u32 = 30;
    pub(crate) const DEFAULT_DAYS: u32 = 90;

    pub fn runs(&self) -> u32 {
        self.runs.unwrap_or(Self::DEFAULT_RUNS)
    }

    pub fn days(&self) -> u32 {
        self.days.unwrap_or(Self::DEFAULT_DAYS)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReportFormat {
    Json,
    Markdown,
    Junit,
    Html,
}

impl ReportFormat {
    pub(crate) const ALL: [ReportFormat; 4] = [
        ReportFormat::Json,
        ReportFormat::Markdown,
        ReportFormat::Junit,
        ReportFormat::Html,
    ];
    pub fn name(self) -> &'static str {
        match self {
            ReportFormat::Json => "json",
            ReportFormat::Markdown => "markdown",
            ReportFormat::Junit => "junit",
            ReportFormat::Html => "html",
        }
    }
}

/// A gate's time limit: a duration, or `auto` — a multiple of the gate's recorded p95
/// duration ([`AUTO_TIMEOUT_FACTOR`], bounded by [`AUTO_TIMEOUT_MIN`] and the default), the
/// default until [`AUTO_TIMEOUT_SAMPLES`] passing runs of it are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateTimeout {
    Fixed(DurationSpec),
    Auto,
}

/// `timeout: auto` is this many times the gate's p95 duration.
pub(crate) const AUTO_TIMEOUT_FACTOR: u32 = 3;
/// ... and never less than this.
pub(crate) const AUTO_TIMEOUT_MIN: Duration = Duration::from_secs(60);
/// ... once this many passing runs of the gate are recorded (of the latest 50).
pub(crate) const AUTO_TIMEOUT_SAMPLES: usize = 5;

impl Serialize for GateTimeout {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            GateTimeout::Fixed(d) => d.serialize(s),
            GateTimeout::Auto => s.serialize_str("auto"),
        }
    }
}

impl JsonSchema for GateTimeout {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GateTimeout".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let duration = g.subschema_for::<DurationSpec>();
        schemars::json_schema!({
            "description": "A duration, or `auto`: three times the gate's recorded p95 duration (at least 1m, at most the 30m default), the default until 5 passing runs are recorded.",
            "anyOf": [duration, {"const": "auto"}]
        })
    }
}

/// How long a notifier may take unless its `timeout` says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// `notify`: the command told of each incident, one JSON object on its stdin
/// (`schemas/incident.schema.json`); `manifests/notifiers/` has a webhook, Slack, ntfy and mail.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Notify {
    /// Runs in the manifest's folder with the manifest's `env` (its secrets are redacted from
    /// what it is sent); a failure is reported and retried by the next run, never the run's.
    pub run: CommandSpec,
    /// How long it may take before it is ended (default 30s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationSpec>,
    /// Where a notice goes when `run` cannot take it, tried in order: another notifier
    /// (`{run: [...], timeout: 20s}`) or a file the notice is appended to as one JSON line
    /// (`{file: /var/log/runner/notices.jsonl}`). A notice none of them took stays owed: the
    /// next run sends it, and the next notice that gets through names it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback: Vec<NotifyFallback>,
}

impl Notify {
    pub fn timeout(&self) -> Duration {
        self.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0)
    }
}

/// One place a notice goes when the ones before it could not take it: exactly one of `run` and
/// `file`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct NotifyFallback {
    /// A notifier, run as `notify.run` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<CommandSpec>,
    /// With `run`: how long it may take before it is ended (default 30s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationSpec>,
    /// A file (relative to the manifest's folder) the notice is appended to, one JSON object a
    /// line, written through to the disk; made when missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

impl NotifyFallback {
    pub fn timeout(&self) -> Duration {
        self.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0)
    }
}
