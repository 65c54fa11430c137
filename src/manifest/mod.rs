//! The manifest: YAML text in, a validated [`Manifest`] out, or every problem with its place.

pub mod diag;
pub mod duration;
pub(crate) mod effective;
pub mod load;
pub mod model;
pub mod sandbox;
pub mod schema;
pub mod template;
pub mod yaml;

pub use diag::ManifestError;
pub use diag::Problem;
pub use load::LoadError;
pub use load::LoadedManifest;
pub(crate) use load::{compile_glob, load_file, valid_name};
pub use model::*;
