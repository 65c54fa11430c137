//! The one command builder over git, and the errors of a git call.
//!
//! Every call runs `git -C <dir>` with a fixed locale, no prompts, stdin closed, and
//! `GIT_OPTIONAL_LOCKS=0`; the `GIT_*` variables that would change git's answers are removed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("`git {args}` in `{dir}` {source}")]
    TimedOut {
        args: String,
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot run `git`: {0}")]
    Spawn(#[from] std::io::Error),
    #[error("`git {args}` failed in `{dir}`: {stderr}")]
    Failed {
        args: String,
        dir: String,
        stderr: String,
    },
    /// A work branch on the remote went where the local one cannot follow by a fast-forward.
    #[error("{0}")]
    Diverged(String),
}

/// Variables of git's own that runner's git calls keep: how to reach remotes and who a commit is
/// by are the user's to set. Every other `GIT_*` variable in runner's environment is removed,
/// because each of them can point git at another repository, index or object store, add
/// configuration (`GIT_CONFIG_PARAMETERS`, `GIT_CONFIG_COUNT`, set by `git -c` for hooks and
/// aliases), or change which history git sees (`GIT_NO_REPLACE_OBJECTS`, `GIT_GRAFT_FILE`,
/// `GIT_SHALLOW_FILE`): a runner started from a hook or an alias must still get the answers git
/// gives about the repository it was asked about.
const KEPT_GIT_VARS: &[&str] = &[
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_SSH_VARIANT",
    "GIT_ASKPASS",
    "GIT_EXEC_PATH",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_HTTP_USER_AGENT",
    "GIT_HTTP_PROXY_AUTHMETHOD",
    "GIT_PROXY_COMMAND",
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "GIT_SSL_NO_VERIFY",
    "GIT_TRACE",
    "GIT_TRACE2",
    "GIT_TRACE2_EVENT",
    "GIT_TRACE2_PERF",
];

/// The `GIT_*` variables of runner's environment that its git calls drop (read once).
fn dropped_git_vars() -> &'static [String] {
    static DROPPED: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    DROPPED.get_or_init(|| {
        std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .filter(|k| k.starts_with("GIT_") && !KEPT_GIT_VARS.contains(&k.as_str()))
            .collect()
    })
}

/// A git command with runner's fixed settings: no hooks and no fsmonitor, only the kept `GIT_*`
/// variables, a fixed locale, no prompts, no optional locks, stdin closed.
pub(super) fn base_command() -> Command {
    let mut c = Command::new("git");
    // runner's own git calls run none of the repository's code: no hooks (`worktree add` would
    // run `post-checkout`), no filesystem monitor daemon.
    c.args([
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.fsmonitor=false",
    ]);
    for v in dropped_git_vars() {
        c.env_remove(v);
    }
    c.env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    c
}

/// A `git -C dir` command with runner's fixed settings, and the repository's filter drivers
/// (git LFS and the like: programs that `.gitattributes` runs on every checkout, add and status)
/// turned off, so that no program of the repository's runs outside an item.
pub fn command(dir: &Path) -> Command {
    let mut c = base_command();
    for name in filter_drivers(dir) {
        for key in ["clean", "smudge", "process"] {
            c.arg("-c").arg(format!("filter.{name}.{key}="));
        }
        c.arg("-c").arg(format!("filter.{name}.required=false"));
    }
    c.arg("-C").arg(dir);
    c
}

/// The identity runner commits under when the repository names none.
pub(crate) const DEFAULT_IDENTITY: (&str, &str) = ("runner", "runner@localhost");

/// What runner needs of a folder's configuration, asked of git once: the filter drivers, and
/// who commits.
#[derive(Clone, Debug, Default)]
struct Looked {
    filters: Vec<String>,
    /// Both `user.name` and `user.email` are set.
    identity: bool,
    /// `user.`, `author.` and `committer.` `name` and `email`, as git reads them (the last
    /// value of a key wins).
    idents: std::collections::BTreeMap<String, String>,
    /// A setting that changes how git writes a commit (`commit.gpgSign`,
    /// `i18n.commitEncoding`): commits are left to git.
    commit_settings: bool,
}

/// The configuration of each folder looked up so far.
static SEEN: std::sync::Mutex<Option<std::collections::HashMap<PathBuf, Looked>>> =
    std::sync::Mutex::new(None);

/// A worktree runner just added at `worktree` reads the configuration of the repository at
/// `repo` (a fresh worktree has none of its own): it has the same filter drivers, known
/// without asking git again.
pub(super) fn same_filters(repo: &Path, worktree: &Path) {
    if let Ok(mut seen) = SEEN.lock()
        && let Some(m) = seen.as_mut()
        && let Some(names) = m.get(repo).cloned()
    {
        m.insert(worktree.to_path_buf(), names);
    }
}

/// The names of the filter drivers configured for the repository at `dir` (its own, global and
/// system configuration), looked up once per folder.
fn filter_drivers(dir: &Path) -> Vec<String> {
    looked_up(dir).filters
}

/// Whether the configuration of the repository at `dir` names who commits (`user.name` and
/// `user.email`), looked up with its filter drivers: once per folder.
pub(super) fn names_identity(dir: &Path) -> bool {
    looked_up(dir).identity
}

/// Who a commit made in `dir` by `git commit-tree` is by, author then committer (name and
/// email), as git would take them: from `GIT_AUTHOR_*` and `GIT_COMMITTER_*`, else the
/// `author.*` or `committer.*` configuration, else `user.*` — or runner's own identity where the
/// configuration names none (as [`super::commit_tree_on`] tells git). `None` where git decides
/// more than that: a date given in the environment, a name or address git would clean up, a
/// commit setting (signing, an encoding).
pub(super) fn commit_idents(dir: &Path) -> Option<[(String, String); 2]> {
    let looked = looked_up(dir);
    let env = |k: &str| std::env::var_os(k);
    if looked.commit_settings
        || env("GIT_AUTHOR_DATE").is_some()
        || env("GIT_COMMITTER_DATE").is_some()
    {
        return None;
    }
    let all_env = [
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
    ]
    .iter()
    .all(|k| env(k).is_some());
    let user = |field: &str| {
        if looked.identity || all_env {
            looked.idents.get(&format!("user.{field}")).cloned()
        } else if field == "name" {
            Some(DEFAULT_IDENTITY.0.to_string())
        } else {
            Some(DEFAULT_IDENTITY.1.to_string())
        }
    };
    let one = |role: &str, field: &str| -> Option<String> {
        let value = match std::env::var(format!(
            "GIT_{}_{}",
            role.to_uppercase(),
            field.to_uppercase()
        )) {
            Ok(v) => v,
            Err(std::env::VarError::NotPresent) => looked
                .idents
                .get(&format!("{role}.{field}"))
                .cloned()
                .or_else(|| user(field))?,
            Err(_) => return None,
        };
        // What git would strip or refuse is git's to handle.
        let crud = |c: char| c <= ' ' || ".,:;<>\"\\'".contains(c);
        let clean = !value.is_empty()
            && !value.contains(['\n', '<', '>'])
            && !value.starts_with(crud)
            && !value.ends_with(crud);
        clean.then_some(value)
    };
    Some([
        (one("author", "name")?, one("author", "email")?),
        (one("committer", "name")?, one("committer", "email")?),
    ])
}

/// Forget what was looked up of `dir`'s configuration (it changed).
#[cfg(test)]
pub(super) fn forget(dir: &Path) {
    if let Ok(mut seen) = SEEN.lock()
        && let Some(m) = seen.as_mut()
    {
        m.remove(dir);
    }
}

fn looked_up(dir: &Path) -> Looked {
    use std::collections::HashMap;
    if let Ok(seen) = SEEN.lock()
        && let Some(known) = seen.as_ref().and_then(|m| m.get(dir))
    {
        return known.clone();
    }
    // One call for both: each git process costs a few milliseconds of a short item.
    let mut lookup = base_command();
    lookup.arg("-C").arg(dir).args([
        "config",
        "--null",
        "--get-regexp",
        r"^(filter\..*\.(clean|smudge|process)|(user|author|committer)\.(name|email)|commit\.gpgsign|i18n\.commitencoding)$",
    ]);
    // Exit 1 is "no such keys"; anything else (not a repository yet) is not remembered.
    let out = crate::process::spawn_helper(&mut lookup).ok();
    let answered = out
        .as_ref()
        .is_some_and(|o| matches!(o.status.code(), Some(0 | 1)));
    let stdout = out.map(|o| o.stdout).unwrap_or_default();
    let pairs: Vec<(&str, Option<&str>)> = stdout
        .split(|b| *b == 0)
        .filter_map(|entry| {
            let mut kv = entry.splitn(2, |b| *b == b'\n');
            let key = std::str::from_utf8(kv.next()?).ok()?;
            Some((key, kv.next().and_then(|v| std::str::from_utf8(v).ok())))
        })
        .collect();
    let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
    let mut filters: Vec<String> = keys
        .iter()
        .filter_map(|key| {
            let rest = key.strip_prefix("filter.")?;
            let (name, _) = rest.rsplit_once('.')?;
            Some(name.to_string())
        })
        .collect();
    filters.sort();
    filters.dedup();
    let idents = pairs
        .iter()
        .filter(|(k, _)| {
            !k.starts_with("filter.") && (k.ends_with(".name") || k.ends_with(".email"))
        })
        .map(|(k, v)| (k.to_string(), v.unwrap_or_default().to_string()))
        .collect();
    let looked = Looked {
        filters,
        identity: ["user.name", "user.email"].iter().all(|k| keys.contains(k)),
        idents,
        commit_settings: keys
            .iter()
            .any(|k| *k == "commit.gpgsign" || *k == "i18n.commitencoding"),
    };
    if answered && let Ok(mut seen) = SEEN.lock() {
        seen.get_or_insert_with(HashMap::new)
            .insert(dir.to_path_buf(), looked.clone());
    }
    looked
}

pub(super) fn run(dir: &Path, args: &[&str]) -> Result<Output, GitError> {
    // Commands that only read refs and objects run no filter: no need to look the drivers up.
    let mut cmd = if args
        .first()
        .is_some_and(|a| READS_ONLY_REFS_AND_OBJECTS.contains(a))
    {
        let mut c = base_command();
        c.arg("-C").arg(dir);
        c
    } else {
        command(dir)
    };
    crate::process::spawn_helper(cmd.args(args)).map_err(|e| timed_out(e, args, dir))
}

/// git commands that never check out, add, diff or show file contents, so never run a filter
/// driver or textconv program.
const READS_ONLY_REFS_AND_OBJECTS: &[&str] = &[
    "rev-parse",
    "merge-base",
    "for-each-ref",
    "show-ref",
    "symbolic-ref",
    "rev-list",
];

/// A helper that ran out of time or was ended by a stop, named with its arguments; any other
/// error as it is.
fn timed_out(e: std::io::Error, args: &[&str], dir: &Path) -> GitError {
    if matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted
    ) {
        GitError::TimedOut {
            args: args.join(" "),
            dir: dir.display().to_string(),
            source: e,
        }
    } else {
        GitError::Spawn(e)
    }
}

/// The error of a git call that exited unsuccessfully, with what it printed on stderr.
pub(super) fn failed(args: impl Into<String>, dir: &Path, out: &std::process::Output) -> GitError {
    GitError::Failed {
        args: args.into(),
        dir: dir.display().to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    }
}

pub(super) fn checked(dir: &Path, args: &[&str]) -> Result<String, GitError> {
    let out = run(dir, args)?;
    if !out.status.success() {
        return Err(failed(args.join(" "), dir, &out));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
