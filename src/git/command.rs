//! The one command builder over git, and the errors of a git call.
//!
//! Every call runs `git -C <dir>` with a fixed locale, no prompts, stdin closed, and
//! `GIT_OPTIONAL_LOCKS=0`; the `GIT_*` variables that would change git's answers are removed.

use super::looked::{Entry, LogRefs, Looked};
use super::repos::Repos;
use std::path::Path;
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
pub fn command(g: &Repos, dir: &Path) -> Command {
    let mut c = base_command();
    for name in filter_drivers(g, dir) {
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

/// The names of the filter drivers configured for the repository at `dir` (its own, global and
/// system configuration), looked up once per folder.
fn filter_drivers(g: &Repos, dir: &Path) -> Vec<String> {
    looked_up(g, dir).filters
}

/// Whether the configuration of the repository at `dir` names who commits (`user.name` and
/// `user.email`), looked up with its filter drivers: once per folder.
pub(super) fn names_identity(g: &Repos, dir: &Path) -> bool {
    looked_up(g, dir).identity
}

/// Who a commit made in `dir` by `git commit-tree` is by, author then committer (name and
/// email), as git would take them: from `GIT_AUTHOR_*` and `GIT_COMMITTER_*`, else the
/// `author.*` or `committer.*` configuration, else `user.*` — or runner's own identity where the
/// configuration names none (as [`super::commit_tree_on`] tells git). `None` where git decides
/// more than that: a date given in the environment, a name or address git would clean up, a
/// commit setting (signing, an encoding).
pub(super) fn commit_idents(g: &Repos, dir: &Path) -> Option<[(String, String); 2]> {
    let looked = looked_up(g, dir);
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

/// Which ref updates the repository at `dir` records in reflogs; `None` where git is to write
/// refs (see [`Looked::ref_logs`]).
pub(super) fn ref_logs(g: &Repos, dir: &Path) -> Option<LogRefs> {
    looked_up(g, dir).ref_logs
}

/// Whether `git worktree add -b` in the repository at `dir` writes only the branch and the
/// worktree's records (see [`Looked::worktree_settings`]).
pub(super) fn plain_worktrees(g: &Repos, dir: &Path) -> bool {
    !looked_up(g, dir).worktree_settings
}

/// Whether git checks files out in the repository at `dir` as they are stored (see
/// [`Looked::checkout_settings`]).
pub(super) fn plain_checkouts(g: &Repos, dir: &Path) -> bool {
    !looked_up(g, dir).checkout_settings
}

/// Whether `git diff --numstat` in the repository at `dir` counts lines as its defaults do (see
/// [`Looked::diff_settings`]).
pub(super) fn plain_diffs(g: &Repos, dir: &Path) -> bool {
    !looked_up(g, dir).diff_settings
}

/// The keys runner reads of a repository's configuration.
const LOOKED_UP: &str = r"^(filter\..*\.(clean|smudge|process)|(user|author|committer)\.(name|email)|commit\.gpgsign|i18n\.commitencoding|core\.(logallrefupdates|sharedrepository|fsync|fsyncmethod|fsyncobjectfiles|sparsecheckout|autocrlf|eol|symlinks|ignorecase|precomposeunicode|protecthfs|protectntfs|attributesfile|checkroundtripencoding|bigfilethreshold)|worktree\.userelativepaths|branch\.autosetupmerge|diff\.(algorithm|context)|attr\.tree)$";

/// What runner needs of `dir`'s configuration, looked up once per folder a run.
fn looked_up(g: &Repos, dir: &Path) -> Looked {
    if let Some(known) = g.looked(dir) {
        return known;
    }
    let (pairs, answered) = match own_entries(g, dir) {
        Some(pairs) => (pairs, true),
        None if g.outer().is_none() => {
            // Until git has answered once, lookups made together wait for that answer rather
            // than each start git.
            let _first = g.first_lookup();
            own_entries(g, dir).map_or_else(|| ask_git(g, dir), |pairs| (pairs, true))
        }
        None => ask_git(g, dir),
    };
    let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
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
        .map(|(k, v)| (k.clone(), v.clone().unwrap_or_default()))
        .collect();
    let checkout_settings = !filters.is_empty()
        || keys.iter().any(|k| {
            matches!(
                *k,
                "core.autocrlf"
                    | "core.eol"
                    | "core.symlinks"
                    | "core.ignorecase"
                    | "core.precomposeunicode"
                    | "core.protecthfs"
                    | "core.protectntfs"
                    | "core.attributesfile"
                    | "core.checkroundtripencoding"
            )
        });
    let looked = Looked {
        filters,
        identity: ["user.name", "user.email"].iter().all(|k| keys.contains(k)),
        idents,
        commit_settings: keys
            .iter()
            .any(|k| *k == "commit.gpgsign" || *k == "i18n.commitencoding"),
        ref_logs: if keys.iter().any(|k| {
            matches!(
                *k,
                "core.sharedrepository"
                    | "core.fsync"
                    | "core.fsyncmethod"
                    | "core.fsyncobjectfiles"
            )
        }) {
            None
        } else {
            pairs
                .iter()
                .rev()
                .find(|(k, _)| k == "core.logallrefupdates")
                .map_or(Some(LogRefs::Normal), |(_, v)| LogRefs::parse(v.as_deref()))
        },
        checkout_settings,
        diff_settings: keys.iter().any(|k| {
            matches!(
                *k,
                "diff.algorithm"
                    | "diff.context"
                    | "core.bigfilethreshold"
                    | "core.attributesfile"
                    | "attr.tree"
            )
        }),
        worktree_settings: keys.iter().any(|k| {
            matches!(
                *k,
                "core.sparsecheckout" | "worktree.userelativepaths" | "branch.autosetupmerge"
            )
        }),
    };
    if answered {
        g.remember(dir, looked.clone());
    }
    looked
}

/// The looked-up entries of `dir`, read from its configuration file in process between the
/// shared scopes git gave for an earlier repository: `None` when git must be asked (the shared
/// scopes are not known or not shared, the checkout or its file is not one read here).
fn own_entries(g: &Repos, dir: &Path) -> Option<Vec<Entry>> {
    let (before, after) = g.outer()?.as_ref()?;
    let text = super::local::plain_config_text(dir)?;
    let re = looked_up_keys();
    let own = super::config::entries(&text)?
        .into_iter()
        .filter(|(k, _)| re.is_match(k));
    Some(
        before
            .iter()
            .cloned()
            .chain(own)
            .chain(after.iter().cloned())
            .collect(),
    )
}

/// [`ask_git`] without the scopes: for a git that cannot tell them (before 2.26), once the
/// shared scopes are known not to be shared, or after a lookup that failed.
fn ask_git_unscoped(dir: &Path) -> (Vec<Entry>, bool) {
    let Some(stdout) = config_lookup(dir, &["--get-regexp", LOOKED_UP]) else {
        return (Vec::new(), false);
    };
    let entries = stdout
        .split(|b| *b == 0)
        .filter(|e| !e.is_empty())
        .map(entry_of)
        .collect();
    (entries, true)
}

/// `git config --null ARGS` in `dir`: what it printed, when it answered (exit 1 is "no such
/// keys"; anything else, such as a folder that is not a repository yet, is no answer).
fn config_lookup(dir: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let mut lookup = base_command();
    lookup
        .arg("-C")
        .arg(dir)
        .args(["config", "--null"])
        .args(args);
    let out = crate::process::spawn_helper(&mut lookup).ok()?;
    matches!(out.status.code(), Some(0 | 1)).then_some(out.stdout)
}

/// `key LF value` (or `key` alone) as `git config --null` prints an entry.
fn entry_of(bytes: &[u8]) -> Entry {
    let mut kv = bytes.splitn(2, |b| *b == b'\n');
    let key = kv.next().map(String::from_utf8_lossy).unwrap_or_default();
    let value = kv.next().map(|v| String::from_utf8_lossy(v).into_owned());
    (key.into_owned(), value)
}

fn looked_up_keys() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(LOOKED_UP).expect("a valid pattern"))
}

/// The looked-up entries of `dir` as git reads them, and whether git answered (exit 1 is "no
/// such keys"; anything else, such as a folder that is not a repository yet, is not
/// remembered). The first answer also tells the scopes every repository shares.
fn ask_git(g: &Repos, dir: &Path) -> (Vec<Entry>, bool) {
    // With each entry's scope, and the includes, which make the shared scopes differ from one
    // repository to another.
    if matches!(g.outer(), Some(None)) {
        return ask_git_unscoped(dir);
    }
    let scoped = format!("{}|^include(if)?\\..*$", LOOKED_UP);
    let Some(stdout) = config_lookup(dir, &["--show-scope", "--get-regexp", &scoped]) else {
        let (entries, answered) = ask_git_unscoped(dir);
        if answered {
            // A git that cannot tell the scopes: every repository is asked.
            g.set_outer(None);
        }
        return (entries, answered);
    };
    // `scope NUL key LF value NUL`, or `scope NUL key NUL` for a key without a value.
    let mut fields = stdout.split(|b| *b == 0);
    let mut scoped_entries: Vec<(String, Entry)> = Vec::new();
    while let (Some(scope), Some(entry)) = (fields.next(), fields.next()) {
        scoped_entries.push((String::from_utf8_lossy(scope).into_owned(), entry_of(entry)));
    }
    let include = |k: &str| k.starts_with("include.") || k.starts_with("includeif.");
    let shared = !scoped_entries
        .iter()
        .any(|(scope, (k, _))| include(k) && !matches!(scope.as_str(), "local" | "worktree"))
        && scoped_entries.iter().all(|(scope, _)| {
            matches!(
                scope.as_str(),
                "system" | "global" | "local" | "worktree" | "command"
            )
        });
    let pick = |which: &[&str]| -> Vec<Entry> {
        scoped_entries
            .iter()
            .filter(|(scope, (k, _))| which.contains(&scope.as_str()) && !include(k))
            .map(|(_, e)| e.clone())
            .collect()
    };
    g.set_outer(shared.then(|| (pick(&["system", "global"]), pick(&["command"]))));
    let all = scoped_entries
        .iter()
        .filter(|(_, (k, _))| !include(k))
        .map(|(_, e)| e.clone())
        .collect();
    (all, true)
}

pub(super) fn run(g: &Repos, dir: &Path, args: &[&str]) -> Result<Output, GitError> {
    // Commands that only read refs and objects run no filter: no need to look the drivers up.
    let mut cmd = if args
        .first()
        .is_some_and(|a| READS_ONLY_REFS_AND_OBJECTS.contains(a))
    {
        let mut c = base_command();
        c.arg("-C").arg(dir);
        c
    } else {
        command(g, dir)
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

pub(super) fn checked(g: &Repos, dir: &Path, args: &[&str]) -> Result<String, GitError> {
    let out = run(g, dir, args)?;
    if !out.status.success() {
        return Err(failed(args.join(" "), dir, &out));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(dir: &Path, config: &str) {
        let ok = Command::new("git")
            .args(["init", "-q"])
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let path = dir.join(".git/config");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(config);
        std::fs::write(&path, text).unwrap();
    }

    #[test]
    fn a_repositorys_own_configuration_is_read_as_git_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let (first, rich, included) = (
            dir.path().join("first"),
            dir.path().join("rich"),
            dir.path().join("included"),
        );
        repo(&first, "");
        repo(
            &rich,
            "[filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n\tRequired\n[Filter \"Other One\"]\n smudge = \"x ; y\"\n\
             [user]\n\tname = \" Ada \"  # comment\n\temail = ada@example.invalid\n[author]\n\tname = A\\\n  B\n\
             [commit]\n\tgpgSign = false\n[i18n]\n\tcommitEncoding\n[user]\n\tname = Last Wins\n",
        );
        repo(&included, "[include]\n\tpath = elsewhere\n");
        let g = Repos::default();
        assert!(ask_git(&g, &first).1);
        let outer = g.outer().expect("set by git's first answer");
        let ours = own_entries(&g, &rich);
        if outer.is_some() {
            let (theirs, answered) = ask_git(&g, &rich);
            assert!(answered);
            assert_eq!(ours, Some(theirs));
            let ours = ours.unwrap();
            assert!(ours.contains(&("filter.Other One.smudge".into(), Some("x ; y".into()))));
        } else {
            // This machine's own configuration includes another file: always asked of git, and
            // the in-process reading is not tried here — which CI must not take for a pass.
            assert!(
                std::env::var_os("CI").is_none(),
                "not run: an include in git's own configuration"
            );
            assert_eq!(ours, None);
        }
        assert_eq!(
            own_entries(&g, &included),
            None,
            "an include is left to git"
        );
    }
}
