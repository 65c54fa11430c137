//! The manifest: YAML text in, a validated [`Manifest`] out, or every problem with its place.

pub mod diag;
pub mod load;
pub mod model;
pub mod schema;
pub mod template;
pub mod yaml;

pub use diag::{ManifestError, Problem};
pub use load::{LoadError, LoadedManifest, compile_glob, load_file, valid_name};
pub use model::*;
