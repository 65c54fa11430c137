//! What a run may spend: the manifest's `budget` against what the ledger counted over every run
//! of the manifest in the cap's window (a UTC day or month).

use crate::manifest::LoadedManifest;

/// What the run may spend: the least of `budget.cost_usd` and what `budget.daily_usd` and
/// `budget.monthly_usd` leave of the spend the ledger counted over every run of the manifest
/// since the UTC day, or month, began.
pub(crate) fn budget_limit(
    loaded: &LoadedManifest,
    ledger: &dyn crate::ledger::Ledger,
    now: jiff::Timestamp,
) -> crate::ledger::Result<Option<crate::engine::scheduler::BudgetLimit>> {
    use crate::engine::scheduler::BudgetLimit;
    let Some(b) = loaded.manifest.budget else {
        return Ok(None);
    };
    let mut limit = b.cost_usd.map(|usd| BudgetLimit {
        usd,
        cap: None,
        before: 0.0,
    });
    for (cap, window) in [(b.daily_usd, Window::Day), (b.monthly_usd, Window::Month)] {
        let Some(cap) = cap else { continue };
        let (since, resets) = window.bounds(now);
        let before = ledger.spend_since(&loaded.manifest.name, &since)?;
        let left = cap - before;
        if limit.as_ref().is_none_or(|l| left < l.usd) {
            limit = Some(BudgetLimit {
                usd: left,
                cap: Some(format!(
                    "the {} cap of ${cap:.2} (it resets at {resets})",
                    window.name()
                )),
                before,
            });
        }
    }
    Ok(limit)
}

/// A spend cap's window, in UTC.
#[derive(Clone, Copy)]
pub(crate) enum Window {
    Day,
    Month,
}

impl Window {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Window::Day => "daily",
            Window::Month => "monthly",
        }
    }

    /// The first day of the window `now` is in (`YYYY-MM-DD`), and when the next begins.
    pub(crate) fn bounds(self, now: jiff::Timestamp) -> (String, String) {
        let today = now.to_zoned(jiff::tz::TimeZone::UTC).date();
        let (start, next) = match self {
            Window::Day => (today, today.tomorrow().unwrap_or(today)),
            Window::Month => {
                let first = today.first_of_month();
                (
                    first,
                    first
                        .checked_add(jiff::Span::new().months(1))
                        .unwrap_or(first),
                )
            }
        };
        (
            start.strftime("%Y-%m-%d").to_string(),
            next.strftime("%Y-%m-%dT00:00:00Z").to_string(),
        )
    }
}
