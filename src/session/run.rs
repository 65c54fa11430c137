//! A session's three steps: a run prepared, drained and finished.

use super::parts::{Options, Session};
use super::{finish, prepare};
use crate::engine::DrainEnd;
use crate::ui::term::Ui;
use std::time::Duration;

impl Session {
    /// Load the ledger's standing over the plan, begin the run in the ledger and build the
    /// engine's context. `Err` says why no run began.
    pub fn prepare(
        ui: &Ui,
        loaded: crate::manifest::LoadedManifest,
        opts: Options,
    ) -> Result<Session, super::failure::Failure> {
        prepare::prepare(ui, loaded, opts)
    }

    /// Drain the queue on one event loop; `Err` says why it could not begin.
    pub fn drain(&mut self, ui: &Ui) -> Result<DrainEnd, super::failure::Failure> {
        crate::process::become_subreaper();
        // The drain's loop and every item's task on this thread, git questions and the larger
        // checks on a blocking pool whose threads end soon after their work. An item's processes
        // are started by this thread, which lives as long as the run (a parent-death signal
        // follows the thread that started the child). Item tasks on two more threads cost a
        // drain of quick items more than they saved: each hand-off between the loop and a task
        // thread is a wake-up on the other core and back (docs/performance.md).
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("runner-blocking")
            .thread_keep_alive(Duration::from_secs(1))
            .build()
            .map_err(|e| {
                super::failure::Failure::internal(format_args!("cannot start the runtime: {e}"))
            })?;
        // What the run starts is ended by its guardian if runner dies without finishing it (a
        // run started by a worker is its parent's to guard).
        let guard = if self.cx.parent_token.is_none() {
            let log = self.cx.run_dir.join("logs").join("guardian.log");
            match crate::engine::guard::Guard::start(
                &self.cx.run_id,
                &self.cx.token,
                &self.cx.contained.run_dirs(),
                &log,
            ) {
                Ok(g) => Some(g),
                Err(e) => {
                    ui.warn(format_args!(
                        "the run has no guardian ({e}): if runner is killed, what its items started lives on until a later run in their repositories"
                    ));
                    None
                }
            }
        } else {
            None
        };
        let cx = self.cx.clone();
        let sink = &mut self.sink;
        sink.drain_begins();
        let end = crate::support::blocking::as_event_loop(|| {
            runtime.block_on(crate::engine::drain(cx, &mut *sink))
        });
        sink.drain_ended();
        if let Some(g) = guard {
            // The repositories this run quarantined: watched until nothing of their items is
            // left.
            let quarantined: Vec<std::path::PathBuf> = self
                .cx
                .plan
                .repositories
                .iter()
                .filter_map(|r| r.common_dir.clone())
                .filter(|c| {
                    crate::lease::quarantined(c).is_some_and(|q| q.run_id == self.cx.run_id)
                })
                .collect();
            g.stand_down(&quarantined);
        }
        Ok(end)
    }

    /// End the run: ledger, reports, retention, history page, last line. Returns the exit code.
    pub fn finish(self, ui: &Ui, end: DrainEnd) -> i32 {
        finish::finish(ui, self, end)
    }
}
