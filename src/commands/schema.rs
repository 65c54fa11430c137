//! `runner schema` and `runner completions SHELL`.

use super::EXIT_OK;
use clap::CommandFactory;

pub fn run_schema(report: bool, events: bool) -> i32 {
    if events {
        match crate::events::events_schema_json() {
            Ok(s) => out!("{s}"),
            Err(e) => {
                eprintln!("error: cannot encode the events schema: {e}");
                return super::EXIT_INTERNAL;
            }
        }
    } else if report {
        match crate::report::report_schema_json() {
            Ok(s) => out!("{s}"),
            Err(e) => {
                eprintln!("error: cannot encode the report schema: {e}");
                return super::EXIT_INTERNAL;
            }
        }
    } else {
        out!("{}", crate::manifest::schema::manifest_schema_json());
    }
    EXIT_OK
}

pub fn run_completions(shell: clap_complete::Shell) -> i32 {
    let mut cmd = crate::cli::Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "runner", &mut buf);
    out!("{}", String::from_utf8_lossy(&buf));
    EXIT_OK
}
