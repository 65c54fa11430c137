//! One module per verb. Each returns the process exit code; `main` only maps it.
//!
//! Exit codes (the README's table; every verb uses the same meanings): 0 success, 1 the command
//! ran but found failures, 2 bad invocation or invalid manifest, 3 stalled, 4 runner itself
//! failed, 129/130/143 cancelled by SIGHUP/SIGINT/SIGTERM.

/// Print on standard output. A reader that went away (`runner plan m.yaml | head -1`) ends the
/// output quietly and the command's own exit code stands; nothing panics.
macro_rules! out {
    ($($t:tt)*) => { $crate::commands::write_out(format_args!($($t)*), false) };
}

/// [`out!`] with a newline.
macro_rules! outln {
    () => { $crate::commands::write_out(format_args!(""), true) };
    ($($t:tt)*) => { $crate::commands::write_out(format_args!($($t)*), true) };
}

pub mod apply;
pub mod cancel;
pub mod doctor;
pub mod gc;
pub mod init;
pub mod pause;
pub mod plan;
pub mod publish;
pub mod report;
pub mod schema;
pub mod status;
pub mod unlock;
pub mod validate;

/// How many of a manifest's latest runs its history (estimates, the history page) reads.
pub const HISTORY_RUNS: usize = 50;

use crate::cli::{Cli, ColorChoice, Command};
use crate::manifest::{LoadError, LoadedManifest};
use std::io::IsTerminal;
use std::path::Path;

pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILURES: i32 = 1;
pub const EXIT_INVALID: i32 = 2;
pub const EXIT_STALLED: i32 = 3;
pub const EXIT_INTERNAL: i32 = 4;
pub const EXIT_BUDGET: i32 = 5;
/// `apply`: every model an item needed was refused by its provider (a key refused or expired,
/// billing): nothing more was admitted, and the items that could not run are held.
pub const EXIT_REFUSED: i32 = 6;

/// The closed vocabulary of `RUNNER_ROLE`, set for every process runner spawns.
pub const ROLES: &[&str] = &["worker", "gate"];

/// How to write to the terminal.
#[derive(Clone, Copy, Debug)]
pub struct Ui {
    /// Colour on stderr.
    pub color: bool,
}

impl Ui {
    pub fn new(choice: ColorChoice) -> Self {
        let color = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                    && std::env::var("TERM").map_or(true, |t| t != "dumb")
                    && std::io::stderr().is_terminal()
            }
        };
        Ui { color }
    }

    /// Print a warning line on stderr.
    pub fn warn(&self, msg: impl std::fmt::Display) {
        if self.color {
            eprintln!("\x1b[1;33mwarning\x1b[0m: {msg}");
        } else {
            eprintln!("warning: {msg}");
        }
    }

    /// Print an error line on stderr.
    pub fn error(&self, msg: impl std::fmt::Display) {
        if self.color {
            eprintln!("\x1b[1;31merror\x1b[0m: {msg}");
        } else {
            eprintln!("error: {msg}");
        }
    }
}

/// Run the parsed command line; returns the exit code.
pub fn run(cli: Cli) -> i32 {
    crate::process::alloc::one_arena();
    crate::process::ignore_file_size_signal();
    let ui = Ui::new(cli.color);
    // How long runner's own git calls may take (a clone over a slow link may need more).
    if let Ok(v) = std::env::var("RUNNER_GIT_TIMEOUT") {
        match crate::manifest::parse_duration(&v) {
            Ok(d) if !d.is_zero() => crate::process::set_helper_timeout(d),
            _ => {
                ui.error(format_args!(
                    "`RUNNER_GIT_TIMEOUT` is `{v}`, not a duration such as `10m`"
                ));
                return EXIT_INVALID;
            }
        }
    }
    // How long a lost connection to a shared ledger is tried again.
    if let Ok(v) = std::env::var("RUNNER_LEDGER_RETRY") {
        match crate::manifest::parse_duration(&v) {
            Ok(d) => crate::ledger::pg::set_ledger_retry(d),
            Err(_) => {
                ui.error(format_args!(
                    "`RUNNER_LEDGER_RETRY` is `{v}`, not a duration such as `3m`"
                ));
                return EXIT_INVALID;
            }
        }
    }
    // How much of one process's output its log keeps.
    if let Ok(v) = std::env::var("RUNNER_LOG_LIMIT") {
        match crate::support::limits::parse_size(&v) {
            Ok(n) if n > 0 => crate::process::output::set_log_limit(n),
            Ok(_) => {
                ui.error("`RUNNER_LOG_LIMIT` is 0: a log keeps at least a byte");
                return EXIT_INVALID;
            }
            Err(e) => {
                ui.error(format_args!("`RUNNER_LOG_LIMIT`: {e}"));
                return EXIT_INVALID;
            }
        }
    }
    let format = match cli.log_format {
        crate::cli::LogFormatArg::Text => crate::ui::log::LogFormat::Text,
        crate::cli::LogFormatArg::Json => crate::ui::log::LogFormat::Json,
    };
    if let Some(w) = crate::ui::log::init(cli.verbose, cli.quiet, format, ui.color) {
        ui.warn(w);
    }
    if let Ok(role) = std::env::var("RUNNER_ROLE")
        && !ROLES.contains(&role.as_str())
    {
        ui.error(format_args!(
            "`RUNNER_ROLE` is `{role}`, which is not one of: {}; refusing to guess the ceiling a nested run inherits",
            ROLES.join(", ")
        ));
        return EXIT_INVALID;
    }
    // Steering runs is for operators: a worker or gate that could cancel, pause or unlock would
    // steer the very run it belongs to. Whether this is one is told from what it cannot change
    // (its cgroup, its ancestry), not only from `RUNNER_ROLE`, which it can unset.
    let verb = match &cli.command {
        Command::Cancel(_) => Some("cancel"),
        Command::Pause(_) => Some("pause"),
        Command::Resume(_) => Some("resume"),
        Command::Unlock(_) => Some("unlock"),
        Command::Apply(_) => Some("apply"),
        _ => None,
    };
    if let Some(verb) = verb {
        let role = std::env::var("RUNNER_ROLE").ok();
        if verb == "apply" {
            // A nested apply keeps its `RUNNER_*` environment: its parent's ceiling and
            // repository come from it (and it fails closed without them).
            if role.is_none()
                && let Some(why) = crate::support::host::inside_item()
            {
                ui.error(format_args!(
                    "this runner runs inside an item of a run ({why}) but without the `RUNNER_*` environment it was given: a nested `runner apply` keeps it, so that its parent's ceiling and repository hold"
                ));
                return EXIT_INVALID;
            }
        } else {
            let what = match role {
                Some(role) => Some(format!("a {role} (`RUNNER_ROLE` is set)")),
                None => crate::support::host::inside_item()
                    .map(|why| format!("an item of a run ({why})")),
            };
            if let Some(what) = what {
                ui.error(format_args!(
                    "`runner {verb}` is refused inside {what}: runs are steered by their operators"
                ));
                return EXIT_INVALID;
            }
        }
    }
    match cli.command {
        Command::Validate { manifest } => validate::run(&ui, &manifest),
        Command::Init(args) => init::run(&ui, &args),
        Command::Doctor(args) => doctor::run(&ui, &args),
        Command::Publish(args) => publish::run(&ui, &args),
        Command::Plan(args) => plan::run(&ui, &args),
        Command::Apply(args) if args.looping => apply::run_loop(&ui, &args),
        Command::Apply(args) => apply::run(&ui, &args),
        Command::Status(args) => status::run(&ui, &args),
        Command::Report(args) => report::run(&ui, &args),
        Command::Cancel(args) => cancel::run(&ui, &args),
        Command::Pause(args) => pause::run(&ui, &args, true),
        Command::Resume(args) => pause::run(&ui, &args, false),
        Command::Unlock(args) => unlock::run(&ui, &args),
        Command::Gc(args) => gc::run(&ui, &args),
        Command::Schema {
            report,
            events,
            plan,
            status,
            matrix,
        } => schema::run_schema(schema::Of::pick(report, events, plan, status, matrix)),
        Command::Completions { shell } => schema::run_completions(shell),
    }
}

/// Load a manifest, printing its problems on failure. `Err` carries the exit code.
pub fn load(ui: &Ui, path: &Path) -> Result<LoadedManifest, i32> {
    match crate::manifest::load_file(path) {
        Ok(m) => Ok(m),
        Err(LoadError::Invalid(e)) => {
            eprint!("{}", e.render(ui.color));
            Err(EXIT_INVALID)
        }
        Err(e @ LoadError::Read { .. }) => {
            ui.error(e);
            Err(EXIT_INVALID)
        }
    }
}

/// Plan a loaded manifest, or print why it cannot be planned (a manifest diagnostic rendered
/// like a load error) and give `None`, for the caller to pick its exit code.
pub fn plan(
    ui: &Ui,
    loaded: &LoadedManifest,
    opts: &crate::plan::PlanOptions,
) -> Option<crate::plan::Plan> {
    match crate::plan::plan(loaded, opts) {
        Ok(p) => {
            for w in &p.warnings {
                ui.warn(w);
            }
            Some(p)
        }
        Err(crate::plan::PlanError::Invalid(e)) => {
            eprint!("{}", e.render(ui.color));
            None
        }
        Err(e) => {
            ui.error(e);
            None
        }
    }
}

/// The state ledger's path: `--state` / `RUNNER_STATE`, else `.runner/state.db` beside the
/// manifest, else in the current folder.
/// The manifest's reports folder, or `given` (`--report-dir`).
pub fn reports_dir(loaded: &LoadedManifest, given: Option<&Path>) -> std::path::PathBuf {
    match given {
        Some(d) => std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf()),
        None => loaded.resolve(
            loaded
                .manifest
                .reports
                .as_ref()
                .and_then(|r| r.dir.as_deref())
                .unwrap_or(crate::manifest::DEFAULT_REPORTS_DIR),
        ),
    }
}

pub fn state_path(state: &crate::cli::StateArgs, manifest: Option<&Path>) -> std::path::PathBuf {
    if let Some(p) = &state.state {
        return p.clone();
    }
    let dir = manifest
        .and_then(|m| std::path::absolute(m).ok())
        .and_then(|m| m.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| std::path::PathBuf::from("."));
    dir.join(".runner").join("state.db")
}

/// Who is asking, for provenance: `alice (uid 1000)@host`, the user named by the process's real
/// uid (never `$USER`, which anyone can set), `as worker` when a worker or gate asks (its
/// `RUNNER_ROLE`), and `via `runner cancel`` naming the control used.
pub fn who(control: &str) -> String {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| format!("{} (uid {uid})", u.name))
        .unwrap_or_else(|| format!("uid {uid}"));
    let role = std::env::var("RUNNER_ROLE")
        .ok()
        .filter(|r| {
            !r.is_empty()
                && r.len() <= 32
                && r.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        .map(|r| format!(" as {r}"))
        .unwrap_or_default();
    format!(
        "{user}@{}{role} via `runner {control}`",
        crate::support::host::hostname()
    )
}

/// The items running now (of `run`, or of any run of `manifest`) for a provenance record:
/// ` while 2 items ran: api/parse, web/login` (at most ten named), or nothing.
pub(crate) fn affected(
    ledger: &dyn crate::ledger::Ledger,
    manifest: &str,
    run: Option<&str>,
) -> String {
    let Ok(claims) = ledger.live_claims_of(manifest) else {
        return String::new();
    };
    let names: Vec<String> = claims
        .iter()
        .filter(|(_, r)| run.is_none_or(|id| id == r))
        .map(|(k, _)| format!("{}/{}", k.repo, k.item))
        .collect();
    match names.len() {
        0 => " while no item ran".to_string(),
        n => format!(
            " while {n} item{} ran: {}{}",
            if n == 1 { "" } else { "s" },
            names
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            if n > 10 { ", …" } else { "" }
        ),
    }
}

/// Open the SQLite ledger at `path`, which must exist: reading commands never create one.
fn open_existing(ui: &Ui, path: &Path) -> Result<crate::ledger::sqlite::SqliteLedger, i32> {
    if !path.exists() {
        ui.error(format_args!(
            "no state ledger at `{}`; give the manifest or `--state`",
            path.display()
        ));
        return Err(EXIT_INVALID);
    }
    crate::ledger::sqlite::SqliteLedger::open(path).map_err(|e| {
        ui.error(e);
        EXIT_INTERNAL
    })
}

/// Open the ledger for a reading command: a shared PostgreSQL ledger (`--state postgres://…`),
/// or the SQLite file, which must exist (reading commands never create one).
pub(crate) fn open_store(ui: &Ui, path: &Path) -> Result<crate::ledger::store::Store, i32> {
    if crate::ledger::pg::is_url(&path.to_string_lossy()) {
        return crate::ledger::store::Store::open(path).map_err(|e| {
            ui.error(e);
            EXIT_INTERNAL
        });
    }
    open_existing(ui, path).map(crate::ledger::store::Store::Sqlite)
}

/// A looked-up run, or the exit code after saying why there is none.
pub(crate) fn found<T>(
    ui: &Ui,
    r: crate::ledger::Result<Option<T>>,
    run: &str,
    path: &Path,
) -> Result<T, i32> {
    match r {
        Ok(Some(v)) => Ok(v),
        Ok(None) => {
            let shown = crate::support::text::printable(run);
            // A manifest given where a run id goes is the likely slip.
            let hint = if Path::new(run).is_file() {
                format!(
                    "; `{shown}` is a file: give a run id (`runner status {shown}` lists the runs) and `--manifest {shown}`"
                )
            } else {
                String::new()
            };
            ui.error(format_args!(
                "no run `{shown}` in `{}`{hint}",
                path.display()
            ));
            Err(EXIT_INVALID)
        }
        Err(e) => {
            ui.error(e);
            Err(EXIT_INTERNAL)
        }
    }
}

/// What [`out!`] and [`outln!`] do: write to standard output; a closed pipe ends the output
/// quietly, any other failure is said once on stderr.
pub fn write_out(args: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    static FAILED: AtomicBool = AtomicBool::new(false);
    if FAILED.load(Ordering::Relaxed) {
        return;
    }
    let mut o = std::io::stdout().lock();
    let r = o
        .write_fmt(args)
        .and_then(|()| if newline { o.write_all(b"\n") } else { Ok(()) })
        .and_then(|()| o.flush());
    if let Err(e) = r {
        FAILED.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: cannot write to standard output: {e}");
        }
    }
}

/// The quarantines in force for `plan`'s repositories: those kept with each repository (seen by
/// every manifest), and those this ledger recorded; as `(path, run, reason)`.
pub fn quarantines_of(
    plan: &crate::plan::Plan,
    mut recorded: Vec<(String, String, String)>,
) -> Vec<(String, String, String)> {
    for r in &plan.repositories {
        if let Some(common) = &r.common_dir
            && let Some(q) = crate::lease::quarantined(common)
        {
            recorded.push((r.path.display().to_string(), q.run_id, q.reason));
        }
    }
    recorded
}
