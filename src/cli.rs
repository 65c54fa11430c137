//! Command-line types (clap derive). No behaviour lives here.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// A declarative batch runner: drain work items across many repositories with a bounded pool.
#[derive(Debug, Parser)]
#[command(name = "runner", version, about, propagate_version = true)]
pub struct Cli {
    /// When to use colour on stderr.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, global = true)]
    pub color: ColorChoice,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Parse and check a manifest; print every problem (exit 0 or 2).
    Validate {
        /// The manifest file.
        manifest: PathBuf,
    },
    /// Show what `apply` would do: repositories, items, holds and order. Runs and writes nothing.
    Plan(PlanArgs),
    /// Print the manifest JSON Schema.
    Schema,
    /// Print shell completions.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The manifest file.
    pub manifest: PathBuf,
    /// Print the plan as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Exit 0 when nothing is pending, 2 when work is pending, 1 on error (as Terraform).
    #[arg(long)]
    pub detailed_exitcode: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Debug, Args, Clone, Default)]
pub struct FilterArgs {
    /// Only repositories whose name matches this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub only: Vec<String>,
    /// Only items whose id matches this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub items: Vec<String>,
}
