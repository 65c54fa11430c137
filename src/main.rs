use clap::Parser;

fn main() {
    let cli = runner::cli::Cli::parse();
    let code = runner::commands::run(cli);
    std::process::exit(code);
}
