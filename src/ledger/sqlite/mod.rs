//! The SQLite ledger: WAL mode, a busy timeout, numbered migrations, one writer per process.
//!
//! [`conn`] opens the file and holds what the queries share, [`ledger`] answers the
//! [`Ledger`](super::Ledger) trait, [`schema`] holds the migrations.

mod conn;
mod ledger;
mod schema;
#[cfg(test)]
mod tests;

pub use conn::SqliteLedger;
