//! How a command fails: one type every verb, and the run a verb drives, returns when it could
//! not do its job, turned into its message and exit code in one place (`commands::run`), as the
//! exit-code table of `docs/commands.md` documents.
//!
//! A verb that did its job returns its own exit code (`Ok`): 0, or 1 when what it found failed
//! (a halted item, a check that did not pass), or a drain's 3, 5, 6, 129/130/143. `Err` is for
//! what stopped it: what it was asked could not be done (exit 1), its input (exit 2) or runner
//! itself (exit 4).

use crate::manifest::LoadError;
use crate::ui::term::Ui;
use crate::vocab::{EXIT_FAILURES, EXIT_INTERNAL, EXIT_INVALID};

/// Why a command could not do its job.
#[derive(Debug)]
pub enum Failure {
    /// The manifest could not be read, or is invalid: every problem, each with its place.
    Manifest(LoadError),
    /// Bad input: an argument, a run or repository that is not there, a manifest its run
    /// cannot use (exit 2). Nothing ran.
    Invalid(String),
    /// What it was asked could not be done, though it ran: a run that is not live to cancel,
    /// a lease still held, a wait that timed out (exit 1).
    Failed(String),
    /// runner itself failed: the state ledger, a file it had to write (exit 4).
    Internal(String),
    /// Any of these under `plan --detailed-exitcode`, where 2 means work is pending: exit 1.
    Detailed(Box<Failure>),
}

/// What a verb returns: its own exit code, or why it could not do its job.
pub type Ended = Result<i32, Failure>;

impl Failure {
    pub fn invalid(why: impl std::fmt::Display) -> Failure {
        Failure::Invalid(why.to_string())
    }

    pub fn failed(why: impl std::fmt::Display) -> Failure {
        Failure::Failed(why.to_string())
    }

    pub fn internal(why: impl std::fmt::Display) -> Failure {
        Failure::Internal(why.to_string())
    }

    /// The exit code the table gives it.
    pub fn code(&self) -> i32 {
        match self {
            Failure::Manifest(_) | Failure::Invalid(_) => EXIT_INVALID,
            Failure::Failed(_) => EXIT_FAILURES,
            Failure::Internal(_) => EXIT_INTERNAL,
            Failure::Detailed(_) => EXIT_FAILURES,
        }
    }

    /// Say it on stderr, once, and give the exit code.
    pub fn report(self, ui: &Ui) -> i32 {
        let code = self.code();
        self.say(ui);
        code
    }

    fn say(self, ui: &Ui) {
        match self {
            Failure::Manifest(LoadError::Invalid(e)) => eprint!("{}", e.render(ui.color)),
            Failure::Manifest(e) => ui.error(e),
            Failure::Invalid(why) | Failure::Failed(why) | Failure::Internal(why) => ui.error(why),
            Failure::Detailed(inner) => inner.say(ui),
        }
    }
}

impl From<LoadError> for Failure {
    fn from(e: LoadError) -> Failure {
        Failure::Manifest(e)
    }
}

/// A ledger that cannot be read or written is runner's own failure.
impl From<crate::ledger::LedgerError> for Failure {
    fn from(e: crate::ledger::LedgerError) -> Failure {
        Failure::internal(e)
    }
}
