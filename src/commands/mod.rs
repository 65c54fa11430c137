//! One module per verb. Each returns its exit code, or the [`Failure`] that stopped it, which
//! [`run`] alone says and turns into its exit code; `main` only exits with it.
//!
//! Exit codes (`docs/commands.md`'s table; every verb uses the same meanings): 0 success, 1 the command
//! ran but found failures, 2 bad invocation or invalid manifest, 3 stalled, 4 runner itself
//! failed, 129/130/143 cancelled by SIGHUP/SIGINT/SIGTERM.

/// Print on standard output. A reader that went away (`runner plan m.yaml | head -1`) ends the
/// output quietly and the command's own exit code stands; nothing panics.
macro_rules! out {
    ($($t:tt)*) => { $crate::ui::term::write_out(format_args!($($t)*), false) };
}

/// [`out!`] with a newline.
macro_rules! outln {
    () => { $crate::ui::term::write_out(format_args!(""), true) };
    ($($t:tt)*) => { $crate::ui::term::write_out(format_args!($($t)*), true) };
}

pub mod apply;
pub mod cancel;
pub mod doctor;
pub mod gc;
pub mod init;
pub(crate) mod outputs;
pub mod pause;
pub mod plan;
pub mod publish;
pub mod report;
pub mod schema;
mod settings;
pub mod shared;
pub mod status;
pub mod unlock;
pub mod validate;

use crate::cli::{Cli, ColorChoice, Command};
use crate::session::failure::{Ended, Failure};
use crate::ui::term::Ui;

/// Run the parsed command line; the exit code, every failure said once, here.
pub fn run(cli: Cli) -> i32 {
    crate::process::alloc::one_arena();
    crate::process::ignore_file_size_signal();
    crate::process::not_dumpable();
    let ui = Ui::new(match cli.color {
        ColorChoice::Always => Some(true),
        ColorChoice::Never => Some(false),
        ColorChoice::Auto => None,
    });
    dispatch(&ui, cli).unwrap_or_else(|f| f.report(&ui))
}

fn dispatch(ui: &Ui, cli: Cli) -> Ended {
    // Runner's own settings, read once: one that cannot be read stops here, named.
    settings::Settings::from_env()
        .map_err(Failure::invalid)?
        .install();
    let format = match cli.log_format {
        crate::cli::LogFormatArg::Text => crate::ui::log::LogFormat::Text,
        crate::cli::LogFormatArg::Json => crate::ui::log::LogFormat::Json,
    };
    if let Some(w) = crate::ui::log::init(cli.verbose, cli.quiet, format, ui.color) {
        ui.warn(w);
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
        let role = crate::support::settings::current().role.as_deref();
        if verb == "apply" {
            // A nested apply keeps its `RUNNER_*` environment: its parent's ceiling and
            // repository come from it (and it fails closed without them).
            if role.is_none()
                && let Some(why) = crate::support::host::inside_item()
            {
                return Err(Failure::Invalid(format!(
                    "this runner runs inside an item of a run ({why}) but without the `RUNNER_*` environment it was given: a nested `runner apply` keeps it, so that its parent's ceiling and repository hold"
                )));
            }
        } else {
            let what = match role {
                Some(role) => Some(format!("a {role} (`RUNNER_ROLE` is set)")),
                None => crate::support::host::inside_item()
                    .map(|why| format!("an item of a run ({why})")),
            };
            if let Some(what) = what {
                return Err(Failure::Invalid(format!(
                    "`runner {verb}` is refused inside {what}: runs are steered by their operators"
                )));
            }
        }
    }
    match cli.command {
        Command::Validate { manifest } => validate::run(ui, &manifest),
        Command::Init(args) => init::run(ui, &args),
        Command::Doctor(args) => doctor::run(ui, &args),
        Command::Publish(args) => publish::run(ui, &args),
        Command::Plan(args) => plan::run(ui, &args),
        Command::Apply(args) if args.looping => apply::run_loop(ui, &args),
        Command::Apply(args) => apply::run(ui, &args),
        Command::Status(args) => status::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Cancel(args) => cancel::run(&args),
        Command::Pause(args) => pause::run(&args, true),
        Command::Resume(args) => pause::run(&args, false),
        Command::Unlock(args) => unlock::run(&args),
        Command::Gc(args) => gc::run(ui, &args),
        Command::Schema {
            report,
            events,
            plan,
            status,
            matrix,
            items,
            incident,
        } => schema::run_schema(schema::Of::pick(
            report, events, plan, status, matrix, items, incident,
        )),
        Command::Completions { shell } => schema::run_completions(shell),
        Command::GuardRun { for_pid } => Ok(crate::engine::guard::run(for_pid)),
    }
}
