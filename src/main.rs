#![forbid(unsafe_code)]

use clap::Parser;

fn main() {
    // A bug must still end in one readable line and a documented exit code, never a trace.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("error: internal error{at}: {msg}; please report this");
    }));
    let cli = runner::cli::Cli::parse();
    let code = std::panic::catch_unwind(|| runner::commands::run(cli))
        .unwrap_or(runner::vocab::EXIT_INTERNAL);
    std::process::exit(code);
}
