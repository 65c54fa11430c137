//! Durations as a manifest writes them (`500ms`, `30s`, `1h30m`) and as runner prints them.

use schemars::JsonSchema;
use serde::Serialize;
use std::time::Duration;

/// A duration written with units: `500ms`, `30s`, `10m`, `2h`, or a sum such as `1h30m`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DurationSpec(pub Duration);

impl Serialize for DurationSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

impl JsonSchema for DurationSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A duration with units: `500ms`, `30s`, `10m`, `2h`, or a sum such as `1h30m`.",
            "pattern": "^([0-9]+(ms|s|m|h))+$"
        })
    }
}

/// Parse a duration with units. Errors are lowercase fragments for diagnostics.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("a duration needs a number and a unit, e.g. `30s`".into());
    }
    if t.starts_with('-') {
        return Err(format!("`{t}` is negative; durations are never negative"));
    }
    let mut total: u128 = 0;
    let bytes = t.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if start == i {
            return Err(format!(
                "`{t}` is not a duration; write a number followed by `ms`, `s`, `m` or `h`"
            ));
        }
        let n: u128 = t[start..i]
            .parse()
            .map_err(|_| format!("`{t}` is too large"))?;
        let ustart = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let ms_per = match &t[ustart..i] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "" => {
                return Err(format!(
                    "`{t}` has no unit; write e.g. `{n}s` or `{n}m` (units: `ms`, `s`, `m`, `h`)"
                ));
            }
            u => {
                return Err(format!(
                    "`{u}` in `{t}` is not a unit; use `ms`, `s`, `m` or `h`"
                ));
            }
        };
        total = total
            .checked_add(n.checked_mul(ms_per).ok_or(format!("`{t}` is too large"))?)
            .ok_or(format!("`{t}` is too large"))?;
    }
    // A year is far beyond any sensible timeout; larger values are typos.
    if total > 366 * 24 * 3_600_000 {
        return Err(format!("`{t}` is longer than a year"));
    }
    Ok(Duration::from_millis(total as u64))
}

/// The shortest exact spelling of a duration in the manifest's units.
pub(crate) fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = ms;
    if !rest.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    rest /= 1000;
    let h = rest / 3600;
    let m = (rest % 3600) / 60;
    let s = rest % 60;
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// A measured or estimated duration for a person to read, to the precision that matters at its
/// size: `850ms`, `2.6s`, `28s`, `4m5s`, `1h12m`.
pub(crate) fn format_approx(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..10_000 => format!("{:.1}s", ms as f64 / 1000.0),
        10_000..3_600_000 => format_duration(Duration::from_secs(((ms + 500) / 1000) as u64)),
        _ => format_duration(Duration::from_secs(((ms + 30_000) / 60_000 * 60) as u64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approximate_durations_read_plainly() {
        let f = |ms| format_approx(Duration::from_millis(ms));
        assert_eq!(f(0), "0ms");
        assert_eq!(f(850), "850ms");
        assert_eq!(f(2583), "2.6s");
        assert_eq!(f(27_720), "28s");
        assert_eq!(f(27_499), "27s");
        assert_eq!(f(58_768), "59s");
        assert_eq!(f(59_600), "1m");
        assert_eq!(f(245_400), "4m5s");
        assert_eq!(f(4_331_000), "1h12m");
    }

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("30").unwrap_err().contains("no unit"));
        assert!(parse_duration("-5s").unwrap_err().contains("negative"));
        assert!(parse_duration("5d").unwrap_err().contains("not a unit"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999999999999h").is_err());
        assert!(parse_duration("9000h").unwrap_err().contains("year"));
    }

    #[test]
    fn durations_round_trip() {
        for s in ["500ms", "30s", "10m", "2h", "1h30m", "1h1m1s", "1500ms"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
    }
}
