//! What the engine reads of the manifest: each repository's effective configuration (the top
//! level narrowed by its overrides, kept in `manifest::effective`), commands rendered to argv,
//! the names that look secret, and `timeout: auto`.

pub(crate) use crate::manifest::effective::{Effective, effective};
use crate::manifest::template;
use crate::manifest::{CommandSpec, LoadedManifest};
use std::time::Duration;

/// Names of variables whose values are redacted even when not listed as secrets.
pub(crate) fn looks_secret(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    ["TOKEN", "SECRET", "PASSWORD", "KEY"]
        .iter()
        .any(|w| n.contains(w))
}

/// A command, or a value of `worker.env`, whose placeholders cannot be filled: what the
/// template renderer said, and which value when it was one of `worker.env`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unrendered {
    #[error("{0}")]
    Command(String),
    #[error("`worker.env.{name}`: {message}")]
    Env { name: String, message: String },
}

/// The argv of a command: templates rendered with `lookup`, a string run under `sh -c`, and a
/// relative program path resolved against the manifest's folder, like every other path.
pub(crate) fn command_argv(
    loaded: &LoadedManifest,
    cmd: &CommandSpec,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<String>, Unrendered> {
    let mut argv = match cmd {
        // Each value is shell-quoted, `{raw:NAME}` excepted: a value is never shell syntax.
        CommandSpec::Shell(s) => {
            let quoted = |name: &str| match name.strip_prefix(template::RAW) {
                Some(raw) => lookup(raw),
                None => lookup(name).map(|v| template::shell_quote(&v)),
            };
            vec![
                "sh".into(),
                "-c".into(),
                template::render(s, quoted).map_err(Unrendered::Command)?,
            ]
        }
        CommandSpec::Argv(v) => v
            .iter()
            .map(|p| {
                template::render(p, |name| {
                    lookup(name.strip_prefix(template::RAW).unwrap_or(name))
                })
            })
            .collect::<Result<_, _>>()
            .map_err(Unrendered::Command)?,
    };
    if let Some(first) = argv.first_mut()
        && first.contains('/')
        && !first.starts_with('/')
    {
        *first = loaded.resolve(first).to_string_lossy().to_string();
    }
    Ok(argv)
}

/// `timeout: auto`: [`AUTO_TIMEOUT_FACTOR`] times the p95 of a gate's passing durations
/// (milliseconds), at least [`AUTO_TIMEOUT_MIN`] and at most the default gate timeout; `None`
/// (the default applies) below [`AUTO_TIMEOUT_SAMPLES`] samples. Returns the limit and the p95.
pub(crate) fn auto_timeout(samples_ms: &[u64]) -> Option<(Duration, Duration)> {
    use crate::manifest::{
        AUTO_TIMEOUT_FACTOR, AUTO_TIMEOUT_MIN, AUTO_TIMEOUT_SAMPLES, DEFAULT_GATE_TIMEOUT,
    };
    if samples_ms.len() < AUTO_TIMEOUT_SAMPLES {
        return None;
    }
    let mut sorted = samples_ms.to_vec();
    sorted.sort_unstable();
    // The nearest-rank p95: the smallest value at or above 95% of the samples.
    let rank = (sorted.len() * 95).div_ceil(100).max(1);
    let p95 = Duration::from_millis(sorted[rank - 1]);
    let limit = (p95 * AUTO_TIMEOUT_FACTOR).clamp(AUTO_TIMEOUT_MIN, DEFAULT_GATE_TIMEOUT);
    // A whole number of seconds (rounded up): the limit said on stderr is the limit kept.
    let limit = Duration::from_secs(limit.as_millis().div_ceil(1000) as u64);
    Some((limit, p95))
}

#[cfg(test)]
mod auto_timeout_tests {
    use super::auto_timeout;
    use std::time::Duration;

    #[test]
    fn three_times_the_p95_within_bounds_once_there_is_history() {
        assert_eq!(auto_timeout(&[1_000; 4]), None, "too few samples");
        // 20 samples: the p95 is the 19th smallest.
        let mut s: Vec<u64> = (1..=20).map(|i| i * 30_000).collect();
        s.reverse();
        let (limit, p95) = auto_timeout(&s).unwrap();
        assert_eq!(p95, Duration::from_secs(570));
        assert_eq!(limit, Duration::from_secs(1710));
        // Quick gates get the floor, slow ones the default ceiling.
        assert_eq!(auto_timeout(&[100; 5]).unwrap().0, Duration::from_secs(60));
        assert_eq!(
            auto_timeout(&[1_500_000; 5]).unwrap().0,
            Duration::from_secs(30 * 60)
        );
        // Measured durations have milliseconds; the limit is whole seconds, rounded up.
        let (limit, p95) = auto_timeout(&[83_449; 5]).unwrap();
        assert_eq!(p95, Duration::from_millis(83_449));
        assert_eq!(limit, Duration::from_secs(251));
    }
}
