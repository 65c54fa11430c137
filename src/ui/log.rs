//! Diagnostic logging (`tracing`) on stderr, for people and machines.
//!
//! Off by default beyond warnings: what a user reads is the progress display and its line log.
//! `-v` shows what runner decides (info), `-vv` why (debug: the scheduler's decisions, leases,
//! the census), `-vvv` everything (trace); `-q` leaves errors only, `-qq` nothing. `RUNNER_LOG`
//! (an env-filter such as `runner::engine=debug`) wins over the flags. `--log-format json` writes
//! one JSON object per event, with its spans (run, item, attempt, gate).
//!
//! Every event is written whole with one write, and while progress bars are drawn it is written
//! with them suspended, so bars and log lines never garble each other.

use indicatif::MultiProgress;
use std::io::Write;
use std::sync::Mutex;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// The output format of diagnostic logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The progress bars being drawn, if any: log lines are written around them.
static BARS: Mutex<Option<MultiProgress>> = Mutex::new(None);

/// Progress bars are drawn on `multi` from now on (`None`: no longer).
pub(super) fn set_bars(multi: Option<MultiProgress>) {
    *BARS.lock().unwrap_or_else(|p| p.into_inner()) = multi;
}

/// The level the flags ask for.
fn level(verbose: u8, quiet: u8) -> &'static str {
    match (quiet, verbose) {
        (q, _) if q >= 2 => "off",
        (1, _) => "error",
        (_, 0) => "warn",
        (_, 1) => "info",
        (_, 2) => "debug",
        _ => "trace",
    }
}

/// The filter: `RUNNER_LOG` when set, else the flags' level for runner (warnings of others).
/// An unreadable `RUNNER_LOG` is reported and the flags are used.
fn filter(verbose: u8, quiet: u8, runner_log: Option<&str>) -> (EnvFilter, Option<String>) {
    let from_flags = || {
        let lvl = level(verbose, quiet);
        let others = if lvl == "off" || lvl == "error" {
            lvl
        } else {
            "warn"
        };
        EnvFilter::new(format!("{others},runner={lvl}"))
    };
    match runner_log.filter(|s| !s.trim().is_empty()) {
        Some(s) => match EnvFilter::try_new(s) {
            Ok(f) => (f, None),
            Err(e) => (
                from_flags(),
                Some(format!(
                    "`RUNNER_LOG` is not a filter runner understands ({e}): `{s}`"
                )),
            ),
        },
        None => (from_flags(), None),
    }
}

/// Install the process's logger. Returns a warning to show when `RUNNER_LOG` was not understood.
pub fn init(verbose: u8, quiet: u8, format: LogFormat, color: bool) -> Option<String> {
    let env = crate::support::settings::current().log.clone();
    let (filter, warning) = filter(verbose, quiet, env.as_deref());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Stderr);
    // People read seconds since start; machines get RFC 3339 times.
    let installed = match format {
        LogFormat::Text => builder
            .with_timer(tracing_subscriber::fmt::time::uptime())
            .with_ansi(color)
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
    // Already installed (a second call in one process) is not an error worth a word.
    let _ = installed;
    warning
}

/// Makes one [`EventBuf`] per event.
struct Stderr;

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = EventBuf;
    fn make_writer(&'a self) -> EventBuf {
        EventBuf(Vec::with_capacity(256))
    }
}

/// One event's text, written to stderr whole when dropped, around the progress bars.
struct EventBuf(Vec<u8>);

impl Write for EventBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuf {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let bars = BARS.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let write = || {
            let _ = std::io::stderr().lock().write_all(&self.0);
        };
        match bars {
            Some(m) => m.suspend(write),
            None => write(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_choose_the_level_and_runner_log_wins() {
        assert_eq!(level(0, 0), "warn");
        assert_eq!(level(1, 0), "info");
        assert_eq!(level(2, 0), "debug");
        assert_eq!(level(5, 0), "trace");
        assert_eq!(level(3, 1), "error");
        assert_eq!(level(0, 2), "off");
        let (f, w) = filter(0, 0, Some("runner::engine=debug"));
        assert!(w.is_none());
        assert_eq!(f.to_string(), "runner::engine=debug");
        let (f, w) = filter(2, 0, None);
        assert!(w.is_none());
        assert_eq!(f.to_string(), "runner=debug,warn");
        let (f, w) = filter(1, 0, Some("runner=[{"));
        assert!(w.unwrap().contains("RUNNER_LOG"));
        assert_eq!(f.to_string(), "runner=info,warn");
    }
}
