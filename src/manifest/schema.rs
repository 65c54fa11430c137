//! The manifest's JSON Schema, generated from the model types.

use super::model::Manifest;
use serde_json::Value;

/// The schema as pretty JSON with a trailing newline, exactly as checked in at
/// `schemas/manifest.schema.json`.
pub fn manifest_schema_json() -> String {
    let schema = schemars::schema_for!(Manifest);
    let mut value = schema.to_value();
    drop_null(&mut value);
    // A `Value` always encodes: its alternate display is the pretty JSON.
    format!("{value:#}\n")
}

/// The loader rejects `key: null` for optional keys (omit the key instead), so the schema must
/// not admit null either: schemars models `Option<T>` as "T or null".
fn drop_null(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if let Some(Value::Array(types)) = map.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let t = types.remove(0);
                    map.insert("type".into(), t);
                }
            }
            if let Some(Value::Array(any)) = map.get("anyOf") {
                let rest: Vec<Value> = any
                    .iter()
                    .filter(|s| s.get("type").and_then(Value::as_str) != Some("null"))
                    .cloned()
                    .collect();
                if rest.len() == 1 && rest.len() < any.len() {
                    map.remove("anyOf");
                    if let Value::Object(inner) = &rest[0] {
                        for (k, val) in inner {
                            map.entry(k.clone()).or_insert_with(|| val.clone());
                        }
                    }
                }
            }
            for val in map.values_mut() {
                drop_null(val);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null),
        _ => {}
    }
}
