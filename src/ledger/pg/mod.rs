//! The PostgreSQL ledger: one queue shared by runners on several machines.
//!
//! What SQLite gets from living on one machine, PostgreSQL gets from the server:
//!
//! - **Claims** are rows; a fresh one is inserted or nothing (`ON CONFLICT DO NOTHING`), and a
//!   claim that exists is examined with `SELECT … FOR UPDATE SKIP LOCKED`, so two runners never
//!   wait on each other for an item: the one that does not get the row moves on.
//! - **Liveness** is a heartbeat: every run's row carries `heartbeat_at`, refreshed every few
//!   seconds by the runner's connection (`session::heartbeat`). A claim whose run has not beaten
//!   for `session::lapse` (or whose holder is provably dead on this host) is taken over.
//! - **A repository's exclusivity** across machines is a session-level advisory lock keyed by
//!   the repository's identity (its url, or its name): held by the runner's connection while an
//!   item runs there, and released by the server when that connection drops — a machine that
//!   dies gives its repositories back at once.
//!
//! The client runs on a thread of its own (the `postgres` crate blocks on a runtime of its own,
//! which may not be entered from runner's event loop); callers send it work and wait for the
//! answer, as they wait on SQLite. Events are buffered and written with the next claim or
//! result, as in SQLite.

//!
//! [`session`] is the client's thread and connection, [`client`] the ledger's handle,
//! [`buffer`] what waits for the next write, [`ledger`] the answers to the
//! [`Ledger`](super::Ledger) trait, [`schema`] the migrations.

mod buffer;
mod client;
mod incidents;
mod ledger;
mod schema;
mod session;

pub use client::PgLedger;
pub use session::shown;
pub(crate) use session::{is_url, set_heartbeat_lapse, set_ledger_retry};
