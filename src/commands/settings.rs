//! Runner's own settings in its environment (`RUNNER_*` that an operator sets), read and checked
//! once, before any verb runs: a value runner cannot read is an error naming the variable and
//! what it takes (exit 2), never a default in its place. The variables a run gives its children
//! (`RUNNER_ITEM`, `RUNNER_REPO`, …) are not settings and are not read here.

use crate::process::cgroup::Want;
use crate::vocab::Role;
use std::time::Duration;

/// The settings, as read.
#[derive(Debug, Default)]
pub(crate) struct Settings {
    /// `RUNNER_GIT_TIMEOUT`: how long one of runner's own git calls may take.
    git_timeout: Option<Duration>,
    /// `RUNNER_LEDGER_RETRY`: how long a lost connection to a shared ledger is tried again.
    ledger_retry: Option<Duration>,
    /// `RUNNER_HEARTBEAT_LAPSE`: how long a run of a shared ledger may miss its heartbeat.
    heartbeat_lapse: Option<Duration>,
    /// `RUNNER_LOG_LIMIT`: how much of one process's output its log keeps.
    log_limit: Option<u64>,
}

/// A variable whose value runner cannot read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SettingError {
    pub(crate) var: &'static str,
    pub(crate) value: String,
    /// What the variable takes.
    pub(crate) takes: String,
}

impl std::fmt::Display for SettingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` is `{}`: {}", self.var, self.value, self.takes)
    }
}

impl Settings {
    /// The settings of this process's environment.
    pub(crate) fn from_env() -> Result<Settings, SettingError> {
        Self::read(|var| std::env::var(var).ok())
    }

    /// The settings `get` gives (a variable's value, when set).
    fn read(get: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingError> {
        let fail = |var: &'static str, value: &str, takes: &str| SettingError {
            var,
            value: value.to_string(),
            takes: takes.to_string(),
        };
        let duration = |var: &'static str, takes: &str, bare_seconds: bool| {
            let Some(v) = get(var) else {
                return Ok(None);
            };
            let parsed = match v.trim().parse::<u64>() {
                Ok(secs) if bare_seconds => Ok(Duration::from_secs(secs)),
                _ => crate::manifest::parse_duration(&v),
            };
            match parsed {
                Ok(d) if !d.is_zero() => Ok(Some(d)),
                _ => Err(fail(var, &v, takes)),
            }
        };
        let mut s = Settings {
            git_timeout: duration(
                "RUNNER_GIT_TIMEOUT",
                "not a duration such as `10m` (above 0)",
                false,
            )?,
            heartbeat_lapse: duration(
                "RUNNER_HEARTBEAT_LAPSE",
                "not a duration such as `30s` or `1m` (or a number of seconds above 0)",
                true,
            )?,
            ..Settings::default()
        };
        // A retry of 0 is allowed: a lost connection then fails at once.
        if let Some(v) = get("RUNNER_LEDGER_RETRY") {
            s.ledger_retry = Some(
                crate::manifest::parse_duration(&v)
                    .map_err(|_| fail("RUNNER_LEDGER_RETRY", &v, "not a duration such as `3m`"))?,
            );
        }
        if let Some(v) = get("RUNNER_LOG_LIMIT") {
            match crate::support::limits::parse_size(&v) {
                Ok(n) if n > 0 => s.log_limit = Some(n),
                Ok(_) => return Err(fail("RUNNER_LOG_LIMIT", &v, "a log keeps at least a byte")),
                Err(e) => return Err(fail("RUNNER_LOG_LIMIT", &v, &e.to_string())),
            }
        }
        if let Some(v) = get("RUNNER_ROLE")
            && Role::parse(&v).is_none()
        {
            return Err(fail(
                "RUNNER_ROLE",
                &v,
                &format!(
                    "not one of: {}; refusing to guess the ceiling a nested run inherits",
                    Role::ALL.map(Role::as_str).join(", ")
                ),
            ));
        }
        if let Some(v) = get("RUNNER_MAX_WORKERS")
            && v.parse::<u32>().is_err()
        {
            return Err(fail(
                "RUNNER_MAX_WORKERS",
                &v,
                "not a number: the ceiling a nested run inherits cannot be read",
            ));
        }
        if let Some(v) = get("RUNNER_CONTAINMENT")
            && Want::parse(Some(&v)).is_err()
        {
            return Err(fail(
                "RUNNER_CONTAINMENT",
                &v,
                "it takes `auto`, `cgroup` or `process-group`",
            ));
        }
        if let Some(v) = get("RUNNER_SANDBOX_WRITABLE")
            && let Some(bad) = v
                .split(':')
                .find(|p| !p.is_empty() && !std::path::Path::new(p).is_absolute())
        {
            return Err(fail(
                "RUNNER_SANDBOX_WRITABLE",
                &v,
                &format!(
                    "`{bad}` is not an absolute folder (it takes absolute folders separated by `:`)"
                ),
            ));
        }
        Ok(s)
    }

    /// Put the settings where the code that uses them reads them.
    pub(crate) fn apply(&self) {
        if let Some(d) = self.git_timeout {
            crate::process::set_helper_timeout(d);
        }
        if let Some(d) = self.ledger_retry {
            crate::ledger::store::set_retry(d);
        }
        if let Some(d) = self.heartbeat_lapse {
            crate::ledger::store::set_heartbeat_lapse(d);
        }
        if let Some(n) = self.log_limit {
            crate::process::output::set_log_limit(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<Settings, SettingError> {
        Settings::read(|var| {
            vars.iter()
                .find(|(k, _)| *k == var)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn every_setting_runner_cannot_read_is_named_with_what_it_takes() {
        for (var, value) in [
            ("RUNNER_GIT_TIMEOUT", "soon"),
            ("RUNNER_GIT_TIMEOUT", "0s"),
            ("RUNNER_HEARTBEAT_LAPSE", "1 minute"),
            ("RUNNER_HEARTBEAT_LAPSE", "0"),
            ("RUNNER_LEDGER_RETRY", "-3m"),
            ("RUNNER_LOG_LIMIT", "0"),
            ("RUNNER_LOG_LIMIT", "lots"),
            ("RUNNER_ROLE", "admin"),
            ("RUNNER_MAX_WORKERS", "two"),
            // Read as the run reads it: a padded number is not one.
            ("RUNNER_MAX_WORKERS", " 3"),
            ("RUNNER_CONTAINMENT", "docker"),
            ("RUNNER_SANDBOX_WRITABLE", "/cache:relative/dir"),
        ] {
            let e = read(&[(var, value)]).unwrap_err();
            assert_eq!((e.var, e.value.as_str()), (var, value));
            assert!(
                e.to_string()
                    .starts_with(&format!("`{var}` is `{value}`: "))
            );
        }
    }

    #[test]
    fn what_runner_reads_is_taken_as_written() {
        let s = read(&[
            ("RUNNER_HEARTBEAT_LAPSE", "1m"),
            ("RUNNER_GIT_TIMEOUT", "90s"),
            ("RUNNER_LEDGER_RETRY", "0s"),
            ("RUNNER_LOG_LIMIT", "1MiB"),
            ("RUNNER_ROLE", "worker"),
            ("RUNNER_MAX_WORKERS", "3"),
            ("RUNNER_CONTAINMENT", "process-group"),
            ("RUNNER_SANDBOX_WRITABLE", "/cache::/other"),
        ])
        .unwrap();
        assert_eq!(s.heartbeat_lapse, Some(Duration::from_secs(60)));
        assert_eq!(s.git_timeout, Some(Duration::from_secs(90)));
        assert_eq!(s.ledger_retry, Some(Duration::ZERO));
        assert_eq!(s.log_limit, Some(1 << 20));
        assert_eq!(
            read(&[("RUNNER_HEARTBEAT_LAPSE", "45")])
                .unwrap()
                .heartbeat_lapse,
            Some(Duration::from_secs(45))
        );
        let none = read(&[]).unwrap();
        assert!(none.git_timeout.is_none() && none.heartbeat_lapse.is_none());
    }
}
