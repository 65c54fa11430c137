//! `runner schema` and `runner completions SHELL`.

use super::EXIT_OK;
use clap::CommandFactory;

pub fn run_schema(report: bool) -> i32 {
    if report {
        match crate::report::report_schema_json() {
            Ok(s) => print!("{s}"),
            Err(e) => {
                eprintln!("error: cannot encode the report schema: {e}");
                return super::EXIT_INTERNAL;
            }
        }
    } else {
        print!("{}", crate::manifest::schema::manifest_schema_json());
    }
    EXIT_OK
}

pub fn run_completions(shell: clap_complete::Shell) -> i32 {
    let mut cmd = crate::cli::Cli::command();
    clap_complete::generate(shell, &mut cmd, "runner", &mut std::io::stdout());
    EXIT_OK
}
