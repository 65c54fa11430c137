//! Command-line types (clap derive). No behaviour lives here.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// A declarative batch runner: drain work items across many repositories with a bounded pool.
#[derive(Debug, Parser)]
#[command(name = "runner", version, about, propagate_version = true)]
pub struct Cli {
    /// When to use colour on stderr.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, global = true, help_heading = "Global options")]
    pub color: ColorChoice,
    /// Log more of what runner decides and why (`-v` info, `-vv` debug, `-vvv` trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true, help_heading = "Global options")]
    pub verbose: u8,
    /// Log less (`-q` errors only, `-qq` nothing).
    #[arg(short, long, action = clap::ArgAction::Count, global = true, conflicts_with = "verbose", help_heading = "Global options")]
    pub quiet: u8,
    /// The format of diagnostic logs on stderr (`RUNNER_LOG` filters them).
    #[arg(long, value_enum, default_value_t = LogFormatArg::Text, global = true, help_heading = "Global options")]
    pub log_format: LogFormatArg,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Parse and check a manifest; print every problem (exit 0 or 2).
    Validate {
        /// The manifest file.
        manifest: PathBuf,
    },
    /// Show what `apply` would do: repositories, items, holds and order. Runs and writes nothing.
    Plan(PlanArgs),
    /// Drain the queue: run every pending item with a bounded pool; write reports.
    Apply(ApplyArgs),
    /// Live and recent runs, running and held items, leases and pauses.
    Status(StatusArgs),
    /// Re-render a past run's report from the state ledger.
    Report(ReportArgs),
    /// Stop a live run, recording who asked and why.
    Cancel(CancelArgs),
    /// Stop admitting new items for a manifest; running ones finish (durable until `resume`).
    Pause(PauseArgs),
    /// Lift a pause.
    Resume(PauseArgs),
    /// Release a repository's lease and quarantine; refuses while any process of it lives.
    Unlock(UnlockArgs),
    /// Prune history past `reports.keep`: older runs' report folders and their record in the
    /// ledger (each item's latest result stays). `apply` does it after every run.
    Gc(GcArgs),
    /// Check what a drain needs before it starts: repositories reachable, worker and gate
    /// programs on PATH, containment, ledger writable, disk space, and each model's probe.
    Doctor(DoctorArgs),
    /// Write a commented starter manifest for the checkouts in a folder.
    Init(InitArgs),
    /// Publish the work branches of items earlier runs completed and did not publish (or that
    /// moved since): push them and open or update their pull requests.
    Publish(PublishArgs),
    /// A run's guardian (started by `apply`, never by hand): ends what the run started if
    /// runner dies without finishing it.
    #[command(name = "guard-run", hide = true)]
    GuardRun {
        /// The runner whose run it guards.
        #[arg(long = "for")]
        for_pid: u32,
    },
    /// Print the manifest JSON Schema, or that of a file runner writes.
    Schema {
        /// Print the schema of `report.json` instead.
        #[arg(long, group = "of")]
        report: bool,
        /// Print the schema of an `apply --events` line instead.
        #[arg(long, group = "of")]
        events: bool,
        /// Print the schema of `plan --json` instead.
        #[arg(long, group = "of")]
        plan: bool,
        /// Print the schema of `status --json` instead.
        #[arg(long, group = "of")]
        status: bool,
        /// Print the schema of `plan --shards N --json` (a CI matrix) instead.
        #[arg(long, group = "of")]
        matrix: bool,
        /// Print the schema of what a tracker source's command prints (`runner.items/v1`)
        /// instead.
        #[arg(long, group = "of")]
        items: bool,
        /// Print the schema of what the `notify` command reads (`runner.incident/v1`) instead.
        #[arg(long, group = "of")]
        incident: bool,
    },
    /// Print shell completions.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The manifest file.
    pub manifest: PathBuf,
    /// Plan as `apply -j N` would run: the order and the ETA with at most N items at once.
    #[arg(short = 'j', long = "workers", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: Option<u32>,
    /// Print the plan as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Exit 0 when nothing is pending, 2 when work is pending, 1 on error (as Terraform).
    #[arg(long)]
    pub detailed_exitcode: bool,
    /// Plan as `apply --rerun WHICH` would.
    #[arg(long, value_enum, value_name = "WHICH")]
    pub rerun: Option<crate::plan::past::Rerun>,
    /// Plan as `apply --rerun WHICH --fresh` would.
    #[arg(long, requires = "rerun")]
    pub fresh: bool,
    #[command(flatten)]
    pub state: StateArgs,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Plan only shard K of N (K from 0), as `apply --shard K/N` would run it.
    #[arg(long, value_name = "K/N", conflicts_with = "shards")]
    pub shard: Option<crate::plan::shard::Shard>,
    /// Split the plan into N shards and show each one's repositories and pending items; with
    /// `--json`, a CI matrix (`{"include": [{"shard": "0/4", ...}]}`) of the shards with work.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::plan::shard::MAX_SHARDS)))]
    pub shards: Option<u32>,
}

#[derive(Debug, Args, Clone, Default)]
pub struct FilterArgs {
    /// Only repositories whose name matches this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub only: Vec<String>,
    /// Only items whose id matches this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub items: Vec<String>,
}

#[derive(Debug, Args, Clone)]
pub struct ApplyArgs {
    /// The manifest file.
    pub manifest: PathBuf,
    /// Run at most N items at once (may only lower the manifest's bound).
    #[arg(short = 'j', long = "workers", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: Option<u32>,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Write reports under DIR instead of the manifest's `reports.dir`.
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
    /// Print the final report JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Write every event of the run as it happens, one JSON object per line
    /// (`schemas/events.schema.json`), to FILE, or to stdout with `-`.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// Plain line logs even on a terminal.
    #[arg(long)]
    pub no_progress: bool,
    /// Run again items an earlier run finished: `failed` (halted or failed) or `all`.
    #[arg(long, value_enum, value_name = "WHICH")]
    pub rerun: Option<crate::plan::past::Rerun>,
    /// With `--rerun`: start items whose work branch exists again from the base (as it is
    /// now), keeping the old branch as `<branch>.backup-<commit>`, instead of continuing it.
    #[arg(long, requires = "rerun")]
    pub fresh: bool,
    /// Whether items still held fail a run that ran nothing (exit 1, the default: a hold needs
    /// a person) or not (`pass`: a cron drain with nothing new exits 0, and says what stays
    /// held).
    #[arg(long, value_enum, value_name = "WHAT", default_value_t = StandingHolds::Fail)]
    pub standing_holds: StandingHolds,
    /// Drain, look for work again (discovery runs anew), drain again, until a look finds
    /// nothing pending; each round is a run with its own report.
    #[arg(long = "loop")]
    pub looping: bool,
    /// With `--loop`: at most this many rounds (default 100).
    #[arg(long, value_name = "N", requires = "looping")]
    pub max_rounds: Option<u32>,
    /// With `--loop`: pause between rounds (default none).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg, requires = "looping")]
    pub interval: Option<std::time::Duration>,
    #[command(flatten)]
    pub state: StateArgs,
    /// Wait up to DURATION for a repository another run holds, instead of holding its items as
    /// `repo-busy` (e.g. `10m`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg)]
    pub wait_for_locks: Option<std::time::Duration>,
    /// Run every gate, reusing no recorded verdict (new verdicts are still recorded).
    #[arg(long)]
    pub no_cache: bool,
    /// Ask no model the manifest's probe question (`worker.probe`) before the queue.
    #[arg(long)]
    pub no_probe: bool,
    /// Run only the repositories of shard K of N (K from 0, as `JOB_COMPLETION_INDEX`): a
    /// stable hash of each repository's url (or name) decides, so N runners with K = 0..N-1
    /// together run every item once, without a shared ledger.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<crate::plan::shard::Shard>,
}

/// What items still held do to the exit code of a run that ran nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StandingHolds {
    /// Exit 1, as any hold.
    Fail,
    /// Exit 0: nothing new happened.
    Pass,
}

fn parse_duration_arg(s: &str) -> Result<std::time::Duration, String> {
    crate::manifest::parse_duration(s)
}

/// Where the state ledger is.
#[derive(Debug, Args, Clone, Default)]
pub struct StateArgs {
    /// The state ledger (default: `.runner/state.db` beside the manifest).
    #[arg(long, value_name = "PATH", env = "RUNNER_STATE")]
    pub state: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The manifest whose ledger to read (or give `--state`).
    pub manifest: Option<PathBuf>,
    #[command(flatten)]
    pub state: StateArgs,
    /// Print the status as JSON on stdout.
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,
    /// Print the manifest's metrics in Prometheus's text format (what `reports.metrics`
    /// receives after every run).
    #[arg(long, requires = "manifest", conflicts_with_all = ["json", "watch"])]
    pub metrics: bool,
    /// A live view of the running drains, redrawn until interrupted: each run's items with
    /// attempt, model, phase, elapsed time and what they wait for, its counts and ETA (plain
    /// lines, one picture after the other, when stdout is not a terminal).
    #[arg(long)]
    pub watch: bool,
    /// With `--watch`: how often to redraw.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration_arg, requires = "watch")]
    pub interval: std::time::Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportFormatArg {
    /// `report.json`: the whole report, for machines.
    Json,
    /// `summary.md`: for people, pull requests and CI step summaries.
    Markdown,
    /// `junit.xml`: for CI test tabs.
    Junit,
    /// `index.html`: the run's timeline and items, one self-contained page.
    Html,
    /// Every format, as files (into `--out`, or the run's own report folder).
    All,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The run id, or `latest` for the most recent run (of `--manifest`, when given).
    pub run: String,
    /// The manifest whose ledger to read (or give `--state`).
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    #[command(flatten)]
    pub state: StateArgs,
    /// Which rendering to print (with `--out`: to write).
    #[arg(long, value_enum, default_value_t = ReportFormatArg::Json)]
    pub format: ReportFormatArg,
    /// Write the rendering as a file into this folder (`report.json`, `summary.md`, `junit.xml`,
    /// `index.html`) instead of printing it. `--format all` without it rewrites the run's own
    /// report folder.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The run id.
    pub run: String,
    /// Why; recorded with who asked.
    #[arg(long)]
    pub reason: Option<String>,
    /// Return once the run has ended, with its ending.
    #[arg(long)]
    pub wait: bool,
    /// With `--wait`: give up after this long.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg, requires = "wait")]
    pub timeout: Option<std::time::Duration>,
    /// The manifest whose ledger to read (or give `--state`).
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    #[command(flatten)]
    pub state: StateArgs,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The manifest.
    #[arg(required_unless_present = "host", conflicts_with = "host")]
    pub manifest: Option<PathBuf>,
    /// Every drain on this host, of every manifest (of this user): kept in the host folder
    /// (`RUNNER_HOST_DIR`, else `$XDG_STATE_HOME/runner/host`), so it outlives a reboot.
    #[arg(long)]
    pub host: bool,
    /// Why; recorded with who asked.
    #[arg(long)]
    pub reason: Option<String>,
    /// (`pause`) Return once no item of the manifest runs any more.
    #[arg(long)]
    pub wait: bool,
    /// With `--wait`: give up after this long (the pause stays), listing what still runs.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg, requires = "wait")]
    pub timeout: Option<std::time::Duration>,
    #[command(flatten)]
    pub state: StateArgs,
}

#[derive(Debug, Args)]
pub struct PublishArgs {
    /// The manifest (its `publish` section says how).
    pub manifest: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub state: StateArgs,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The folder whose git checkouts become the manifest's repositories.
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Where to write the manifest, relative to the folder.
    #[arg(long, short, default_value = "runner.yaml")]
    pub output: PathBuf,
    /// Replace a manifest (and adapter scripts) already there.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// The manifest whose history to prune.
    pub manifest: PathBuf,
    #[command(flatten)]
    pub state: StateArgs,
    /// The reports folder, when runs were given `--report-dir`.
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The manifest to check.
    pub manifest: PathBuf,
    #[command(flatten)]
    pub state: StateArgs,
    /// Ask no model the probe question (`worker.probe`).
    #[arg(long)]
    pub no_probe: bool,
}

#[derive(Debug, Args)]
pub struct UnlockArgs {
    /// The repository's folder, or with `--manifest` its name there.
    pub repo: PathBuf,
    /// Why; recorded with who lifted the quarantine and when.
    #[arg(long)]
    pub reason: Option<String>,
    /// End the processes a dead holder left that keep the lease (a live holder is still
    /// refused).
    #[arg(long)]
    pub kill: bool,
    /// The manifest whose ledger to update (or give `--state`).
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    #[command(flatten)]
    pub state: StateArgs,
}
