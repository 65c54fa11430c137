//! Runner's own settings in its environment (`RUNNER_*` that an operator, or the run that
//! started this one, sets), read and checked once, before any verb runs: a value runner cannot
//! read is an error naming the variable and what it takes (exit 2), never a default in its
//! place. What the code needs of them it asks `support::settings::current`, never the
//! environment. The variables
//! a run gives its children only to be read by them (`RUNNER_ITEM`, `RUNNER_REPO`, …) are not
//! settings and are not read here.

use crate::process::cgroup::Want;
use crate::vocab::Role;
use std::ffi::OsString;
use std::path::PathBuf;
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
    /// What every layer reads ([`crate::support::settings::current`]).
    shared: crate::support::settings::Settings,
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
        Self::read(|var| std::env::var_os(var))
    }

    /// The settings `get` gives (a variable's value, when set).
    fn read(get: impl Fn(&str) -> Option<OsString>) -> Result<Settings, SettingError> {
        let fail = |var: &'static str, value: &str, takes: &str| SettingError {
            var,
            value: value.to_string(),
            takes: takes.to_string(),
        };
        // A setting read as text: one that is not UTF-8 cannot be read.
        let text = |var: &'static str| -> Result<Option<String>, SettingError> {
            match get(var) {
                None => Ok(None),
                Some(v) => v
                    .into_string()
                    .map(Some)
                    .map_err(|v| fail(var, &v.to_string_lossy(), "not valid UTF-8")),
            }
        };
        // A folder: any bytes, an empty value as unset.
        let folder = |var: &str| get(var).filter(|d| !d.is_empty()).map(PathBuf::from);
        let duration = |var: &'static str, takes: &str, bare_seconds: bool| {
            let Some(v) = text(var)? else {
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
        s.shared.host_dir = folder("RUNNER_HOST_DIR");
        s.shared.resources_dir = folder("RUNNER_RESOURCES_DIR");
        s.shared.cgroup = folder("RUNNER_CGROUP");
        s.shared.log = text("RUNNER_LOG")?;
        // A retry of 0 is allowed: a lost connection then fails at once.
        if let Some(v) = text("RUNNER_LEDGER_RETRY")? {
            s.ledger_retry = Some(
                crate::manifest::parse_duration(&v)
                    .map_err(|_| fail("RUNNER_LEDGER_RETRY", &v, "not a duration such as `3m`"))?,
            );
        }
        if let Some(v) = text("RUNNER_LOG_LIMIT")? {
            match crate::support::limits::parse_size(&v) {
                Ok(n) if n > 0 => s.log_limit = Some(n),
                Ok(_) => return Err(fail("RUNNER_LOG_LIMIT", &v, "a log keeps at least a byte")),
                Err(e) => return Err(fail("RUNNER_LOG_LIMIT", &v, &e.to_string())),
            }
        }
        if let Some(v) = text("RUNNER_ROLE")? {
            Role::parse(&v).ok_or_else(|| {
                fail(
                    "RUNNER_ROLE",
                    &v,
                    &format!(
                        "not one of: {}; refusing to guess the ceiling a nested run inherits",
                        Role::ALL.map(Role::as_str).join(", ")
                    ),
                )
            })?;
            s.shared.role = Some(v);
        }
        if let Some(v) = text("RUNNER_MAX_WORKERS")? {
            s.shared.max_workers = Some(v.parse::<u32>().map_err(|_| {
                fail(
                    "RUNNER_MAX_WORKERS",
                    &v,
                    "not a number: the ceiling a nested run inherits cannot be read",
                )
            })?);
        }
        s.shared.repo_path = get("RUNNER_REPO_PATH").map(PathBuf::from);
        if s.shared.role.is_some() {
            s.shared.parent_token = text("RUNNER_TOKEN")?;
        }
        let containment = text("RUNNER_CONTAINMENT")?;
        Want::parse(containment.as_deref()).map_err(|_| {
            fail(
                "RUNNER_CONTAINMENT",
                containment.as_deref().unwrap_or_default(),
                "it takes `auto`, `cgroup` or `process-group`",
            )
        })?;
        s.shared.containment = containment;
        if let Some(v) = text("RUNNER_SANDBOX_WRITABLE")? {
            for p in v.split(':').filter(|p| !p.is_empty()) {
                if !std::path::Path::new(p).is_absolute() {
                    return Err(fail(
                        "RUNNER_SANDBOX_WRITABLE",
                        &v,
                        &format!(
                            "`{p}` is not an absolute folder (it takes absolute folders separated by `:`)"
                        ),
                    ));
                }
                s.shared.sandbox_writable.push(PathBuf::from(p));
            }
        }
        Ok(s)
    }

    /// Put the settings where the code that uses them reads them: `support::settings`, and
    /// the few knobs of lower layers that keep their own value.
    pub(crate) fn install(self) {
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
        crate::support::settings::install(self.shared);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<Settings, SettingError> {
        Settings::read(|var| {
            vars.iter()
                .find(|(k, _)| *k == var)
                .map(|(_, v)| OsString::from(v))
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
        assert_eq!(s.shared.role.as_deref(), Some("worker"));
        assert_eq!(s.shared.max_workers, Some(3));
        assert_eq!(s.shared.containment.as_deref(), Some("process-group"));
        assert_eq!(
            s.shared.sandbox_writable,
            [PathBuf::from("/cache"), PathBuf::from("/other")]
        );
        let none = read(&[]).unwrap();
        assert!(none.git_timeout.is_none() && none.heartbeat_lapse.is_none());
        assert!(none.shared.role.is_none() && none.shared.max_workers.is_none());
        // The token of the run that started this one is read only by a nested run.
        let token = read(&[("RUNNER_TOKEN", "t0k")]).unwrap();
        assert!(token.shared.parent_token.is_none());
        let token = read(&[("RUNNER_TOKEN", "t0k"), ("RUNNER_ROLE", "gate")]).unwrap();
        assert_eq!(token.shared.parent_token.as_deref(), Some("t0k"));
    }

    #[test]
    fn a_setting_that_is_not_utf8_is_named() {
        use std::os::unix::ffi::OsStringExt;
        let e = Settings::read(|var| {
            (var == "RUNNER_MAX_WORKERS").then(|| OsString::from_vec(vec![b'3', 0xff]))
        })
        .unwrap_err();
        assert_eq!(e.var, "RUNNER_MAX_WORKERS");
        assert!(e.to_string().ends_with("not valid UTF-8"), "{e}");
        // A folder may be any bytes.
        let s = Settings::read(|var| {
            (var == "RUNNER_RESOURCES_DIR").then(|| OsString::from_vec(b"/tmp/r\xff".to_vec()))
        })
        .unwrap();
        assert!(s.shared.resources_dir.is_some());
    }
}
