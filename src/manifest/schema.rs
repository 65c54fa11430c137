//! The manifest's JSON Schema, generated from the model types.

use super::model::Manifest;

/// The schema as pretty JSON with a trailing newline, exactly as checked in at
/// `schemas/manifest.schema.json`.
pub fn manifest_schema_json() -> String {
    let schema = schemars::schema_for!(Manifest);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}
