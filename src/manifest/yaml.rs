//! A spanned YAML tree: the manifest text parsed once, with every node's position kept.
//!
//! Validation walks this tree instead of deserialising straight into typed structs, because a typed
//! serde pass stops at the first problem, and the contract is to report *every* problem at once,
//! each at its line and column. Parsing itself (syntax, duplicate keys, size and nesting budgets)
//! is fatal: past a syntax error the rest of the document has no reliable shape.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// Largest manifest accepted, in bytes. Real manifests are a few KiB; anything near this is a
/// generated or corrupted file, and refusing it early bounds memory and time.
pub(crate) const MAX_MANIFEST_BYTES: usize = 1024 * 1024;
/// Deepest nesting accepted. The manifest format itself needs fewer than ten levels.
pub(crate) const MAX_DEPTH: usize = 32;
/// Most YAML nodes accepted.
pub(crate) const MAX_NODES: usize = 100_000;

/// A byte range in the manifest text, with the 1-based line and column of its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Span {
    pub offset: usize,
    pub len: usize,
    pub line: u64,
    pub column: u64,
}

/// One YAML node and where it stands.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub value: Value,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in document order; keys are nodes so that errors can point at them.
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// The YAML kind named in type errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

/// Why a document could not be parsed into a tree at all.
#[derive(Debug, Clone)]
pub struct ParseError {
    pub message: String,
    pub span: Option<Span>,
}

fn span_of(loc: &serde_saphyr::Location, text: &str) -> Span {
    let sp = loc.span();
    let offset = sp
        .byte_offset()
        .map(|o| o as usize)
        .unwrap_or_else(|| offset_of_line_col(text, loc.line(), loc.column()));
    let len = sp.byte_len().map(|l| l as usize).unwrap_or(0);
    Span {
        offset: offset.min(text.len()),
        len,
        line: loc.line(),
        column: loc.column(),
    }
}

/// Byte offset of a 1-based (line, character column), clamped to the text.
pub(crate) fn offset_of_line_col(text: &str, line: u64, column: u64) -> usize {
    let mut offset = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i as u64 + 1 == line {
            let col = column.saturating_sub(1) as usize;
            return offset
                + l.char_indices()
                    .nth(col)
                    .map(|(b, _)| b)
                    .unwrap_or(l.trim_end_matches('\n').len());
        }
        offset += l.len();
    }
    text.len()
}

/// Parse `text` into a spanned tree under the manifest's size and nesting budgets.
pub fn parse(text: &str) -> Result<Node, ParseError> {
    if text.len() > MAX_MANIFEST_BYTES {
        return Err(ParseError {
            message: format!(
                "the manifest is {} bytes; the limit is {} bytes",
                text.len(),
                MAX_MANIFEST_BYTES
            ),
            span: None,
        });
    }
    if text.trim().is_empty() {
        return Err(ParseError {
            message: "the manifest is empty".into(),
            span: None,
        });
    }
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_DEPTH;
    budget.max_nodes = MAX_NODES;
    budget.max_documents = 1;
    budget.max_aliases = 1_000;
    budget.max_anchors = 1_000;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.strict_booleans = true;
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::Error;
    let raw: RawNode = serde_saphyr::from_str_with_options(text, options).map_err(|e| {
        let inner = e.without_snippet();
        ParseError {
            message: clean_message(&inner.to_string()),
            span: inner.location().map(|l| span_of(&l, text)),
        }
    })?;
    Ok(raw.into_node(text))
}

/// serde-saphyr's messages end with their own "at line X column Y"; the diagnostic shows the
/// position itself, so keep only the sentence.
fn clean_message(msg: &str) -> String {
    if msg.contains("budget breached") {
        return if msg.contains("Depth") {
            format!("the document nests deeper than {MAX_DEPTH} levels")
        } else if msg.contains("Nodes") {
            format!("the document has more than {MAX_NODES} nodes")
        } else if msg.contains("Alias") || msg.contains("Anchor") {
            "the document uses too many anchors or aliases".to_string()
        } else {
            "the document exceeds runner's size limits".to_string()
        };
    }
    if let Some(rest) = msg.strip_prefix("duplicate mapping key: ") {
        let key = rest
            .split(", set DuplicateKeyPolicy")
            .next()
            .unwrap_or(rest);
        let key = key.split(" at line ").next().unwrap_or(key);
        return format!("duplicate key `{}`", key.trim());
    }
    let first = msg.lines().next().unwrap_or(msg).trim();
    let cut = first
        .find(" at line ")
        .map(|i| &first[..i])
        .unwrap_or(first);
    let cut = cut.trim_end_matches('.');
    let mut out = cut.to_string();
    if let Some(c) = out.get(0..1) {
        let lower = c.to_lowercase();
        out.replace_range(0..1, &lower);
    }
    out
}

/// The tree as serde-saphyr hands it over; converted to [`Node`] once the text is at hand.
struct RawNode {
    value: RawValue,
    loc: serde_saphyr::Location,
}

enum RawValue {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<RawNode>),
    Map(Vec<(RawNode, RawNode)>),
}

impl RawNode {
    fn into_node(self, text: &str) -> Node {
        let mut span = span_of(&self.loc, text);
        let value = match self.value {
            RawValue::Null => Value::Null,
            RawValue::Bool(b) => Value::Bool(b),
            RawValue::Int(i) => Value::Int(i),
            RawValue::Float(f) => Value::Float(f),
            RawValue::Str(s) => Value::Str(s),
            RawValue::Seq(v) => Value::Seq(v.into_iter().map(|n| n.into_node(text)).collect()),
            RawValue::Map(v) => Value::Map(
                v.into_iter()
                    .map(|(k, v)| (k.into_node(text), v.into_node(text)))
                    .collect(),
            ),
        };
        if span.len == 0 {
            span.len = scalar_len(text, span.offset);
        }
        Node { value, span }
    }
}

/// Length of the token starting at `offset`, up to the end of its line, so a label underlines
/// the value rather than a single character.
fn scalar_len(text: &str, offset: usize) -> usize {
    let rest = text.get(offset..).unwrap_or("");
    let line = rest.split('\n').next().unwrap_or("");
    let line = match line.find(" #") {
        Some(i) => &line[..i],
        None => line,
    };
    line.trim_end().len().max(1).min(rest.len().max(1))
}

impl<'de> Deserialize<'de> for RawNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = serde_saphyr::Spanned::<RawValue>::deserialize(d)?;
        Ok(RawNode {
            value: s.value,
            loc: s.referenced,
        })
    }
}

impl<'de> Deserialize<'de> for RawValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = RawValue;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<RawValue, E> {
        Ok(RawValue::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<RawValue, E> {
        Ok(RawValue::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<RawValue, D::Error> {
        RawValue::deserialize(d)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<RawValue, E> {
        Ok(RawValue::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawValue, E> {
        Ok(RawValue::Int(v.into()))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<RawValue, E> {
        Ok(RawValue::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawValue, E> {
        Ok(RawValue::Int(v.into()))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<RawValue, E> {
        Ok(RawValue::Int(i128::try_from(v).unwrap_or(i128::MAX)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawValue, E> {
        Ok(RawValue::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawValue, E> {
        Ok(RawValue::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<RawValue, E> {
        Ok(RawValue::Str(v))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<RawValue, E> {
        Ok(RawValue::Str(String::from_utf8_lossy(v).into_owned()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<RawValue, A::Error> {
        let mut out = Vec::new();
        while let Some(n) = a.next_element::<RawNode>()? {
            out.push(n);
        }
        Ok(RawValue::Seq(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<RawValue, A::Error> {
        let mut out = Vec::new();
        while let Some(k) = a.next_key::<RawNode>()? {
            let v = a.next_value::<RawNode>()?;
            out.push((k, v));
        }
        Ok(RawValue::Map(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_point_at_keys_and_values() {
        let text = "a: 1\nb:\n  - x\n  - {c: true}\n";
        let n = parse(text).unwrap();
        let Value::Map(m) = &n.value else { panic!() };
        assert_eq!(m[0].0.span.line, 1);
        assert_eq!(m[1].0.span.line, 2);
        let Value::Seq(s) = &m[1].1.value else {
            panic!()
        };
        assert_eq!(s[0].span.line, 3);
        assert_eq!(s[0].span.column, 5);
        assert_eq!(&text[s[0].span.offset..s[0].span.offset + 1], "x");
        let Value::Map(inner) = &s[1].value else {
            panic!()
        };
        assert_eq!(inner[0].1.value, Value::Bool(true));
    }

    #[test]
    fn duplicate_keys_fail() {
        let e = parse("a: 1\na: 2\n").unwrap_err();
        assert!(e.message.contains("duplicate"), "{}", e.message);
        assert_eq!(e.span.unwrap().line, 2);
    }

    #[test]
    fn deep_nesting_fails() {
        let text = "[".repeat(200) + &"]".repeat(200);
        assert!(parse(&text).is_err());
    }

    #[test]
    fn syntax_errors_say_what_and_where() {
        for (text, says, line) in [
            ("a: [1, 2\n", "unclosed", 1),
            ("a: 1\na: 2\n", "duplicate", 2),
            ("a:\n  b: 1\n c: 2\n", "expected key", 3),
            ("a: *x\n", "unknown anchor", 1),
            ("- a\nb: 1\n", "expected '-'", 2),
        ] {
            let e = parse(text).unwrap_err();
            assert!(!e.message.trim().is_empty(), "{text:?}: no message");
            assert!(
                e.message.to_lowercase().contains(says),
                "{text:?}: {:?} does not say {says:?}",
                e.message
            );
            let span = e
                .span
                .unwrap_or_else(|| panic!("{text:?}: no place in {e:?}"));
            assert_eq!(span.line, line, "{text:?}: {e:?}");
        }
    }
}
