//! Wall-clock timestamps as runner writes them in the ledger and the reports.

/// The current time as RFC 3339 UTC with exactly three fractional digits. Fixed width matters:
/// the ledger compares these strings, and `…:05Z` must not sort after `…:05.123Z`.
pub fn now() -> String {
    stamp(jiff::Timestamp::now())
}

/// `t` in the format of [`now`].
pub fn stamp(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_have_a_fixed_width_and_sort_as_time() {
        let t = |s: &str| super::stamp(s.parse::<jiff::Timestamp>().unwrap());
        let whole = t("2026-11-29T10:28:05Z");
        let later = t("2026-11-29T10:28:05.123Z");
        let round = t("2026-11-29T10:28:05.160Z");
        assert_eq!(whole, "2026-11-29T10:28:05.000Z");
        assert_eq!(round, "2026-11-29T10:28:05.160Z");
        assert!(whole < later && later < round);
        assert_eq!(super::now().len(), whole.len());
    }
}
