//! A branch moved without starting git, as `git update-ref -m MSG REF NEW OLD` moves it in a
//! repository that keeps its refs in files: the ref locked by creating `REF.lock` exclusively,
//! its value compared with the expected old one under the lock, the new value written to the
//! lock file, a line appended to the branch's reflog (and to HEAD's, when HEAD is on that
//! branch), then the lock file renamed over the ref.
//!
//! Anything this does not fully understand is left to git before anything is written: a
//! checkout the in-process reader does not read ([`super::local::git_dirs`]: another ref store,
//! another user's repository), a lock already held (git waits for it a
//! little), a ref that is not where expected (git says so in its own words), a symbolic ref.
//!
//! Not through `gix-ref`'s transactions: they read the ref under its lock with a plain `open`,
//! which a FIFO left at the ref's path holds for ever (see `local/heads.rs`); the value is read
//! here as every ref is ([`local::ref_target`]). The moves and their reflog lines are
//! differential-tested against `git update-ref`.

use super::repos::Repos;
use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use super::command;
use super::local;
use super::looked::LogRefs;
use crate::support::refname::{full_object_name, valid_branch_name};

/// One update of a branch.
pub(crate) struct RefUpdate<'a> {
    /// `refs/heads/<branch>`.
    pub refname: &'a str,
    pub new: &'a str,
    /// The value the branch must have for the update to be made; `None`: the branch must not
    /// exist (it is made).
    pub old: Option<&'a str>,
    /// Who made it and when, as a reflog line names them: `Name <email> SECONDS ±HHMM`.
    pub who: &'a str,
    pub message: &'a str,
    pub logs: LogRefs,
}

/// Move the branch in the checkout at `dir` as [`RefUpdate`] says. `None`: nothing was written,
/// ask git. `Some(Err)`: the update failed after the lock was taken (the ref is unchanged; a
/// reflog line may have been written, as git would leave it).
pub(crate) fn update_ref(dir: &Path, u: &RefUpdate<'_>) -> Option<std::io::Result<()>> {
    let (own, common) = local::git_dirs(dir)?;
    let branch = u.refname.strip_prefix("refs/heads/")?;
    if !valid_branch_name(branch)
        || !full_object_name(u.new)
        || u.old.is_some_and(|o| !full_object_name(o))
    {
        return None;
    }
    // HEAD of this checkout: on the branch (its reflog gets the line too), or not.
    let head = crate::support::fs::read_regular(&own.join("HEAD"), Some(4096)).ok()?;
    let head = String::from_utf8(head).ok()?;
    let head_on_branch = match head.strip_suffix('\n')?.strip_prefix("ref: ") {
        Some(target) => target == u.refname,
        None if full_object_name(head.trim_end()) => false,
        None => return None,
    };
    let path = common.join(u.refname);
    // A branch made where a ref's name is its folder, or beneath a ref's name: git says why not.
    if u.old.is_none() && (path.is_dir() || packed_in_the_way(&common, u.refname)?) {
        return None;
    }
    let lock = Lock::take(&path)?;
    if local::ref_target(&common, u.refname)?.as_deref() != u.old {
        return None;
    }
    Some(lock.commit(|file| {
        file.write_all(format!("{}\n", u.new).as_bytes())?;
        let line = log_line(u.old.unwrap_or(NO_OBJECT), u.new, u.who, u.message);
        append_log(&common.join("logs").join(u.refname), u.logs, &line)?;
        if head_on_branch {
            append_log(&own.join("logs/HEAD"), u.logs, &line)?;
        }
        Ok(())
    }))
}

/// The object name a reflog gives the value of a ref that did not exist.
const NO_OBJECT: &str = "0000000000000000000000000000000000000000";

/// Whether `packed-refs` of the common folder `common` holds a ref whose name is a folder of
/// `refname`'s, or one beneath `refname` (either keeps git from making it); `None` when it
/// cannot be read.
fn packed_in_the_way(common: &Path, refname: &str) -> Option<bool> {
    let packed = match crate::support::fs::read_regular(&common.join("packed-refs"), None) {
        Ok(p) => p,
        Err(e) if e.kind() == ErrorKind::NotFound => return Some(false),
        Err(_) => return None,
    };
    let beneath = format!("{refname}/");
    Some(String::from_utf8(packed).ok()?.lines().any(|line| {
        let Some((_, name)) = line.split_once(' ') else {
            return false;
        };
        !line.starts_with('#')
            && !line.starts_with('^')
            && (name.starts_with(&beneath)
                || refname
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('/')))
    }))
}

/// A line of the reflog of HEAD in a worktree's own git folder `own`, as git writes it: HEAD
/// from `old` (`None`: it had no value) to `new`, with `message` (none when empty). Nothing is
/// written where only existing reflogs are written to and there is none.
pub(crate) fn log_head(
    own: &Path,
    old: Option<&str>,
    new: &str,
    who: &str,
    logs: LogRefs,
    message: &str,
) -> std::io::Result<()> {
    append_log(
        &own.join("logs/HEAD"),
        logs,
        &log_line(old.unwrap_or(NO_OBJECT), new, who, message),
    )
}

/// `git update-ref -m msg refname new old` in process (`old` `None`: the ref is made, and must
/// not exist), the reflog lines by the committer git would name ([`refs::update_ref`]); `None`
/// where git is to do it.
pub(super) fn update_in_process(
    g: &Repos,
    dir: &Path,
    refname: &str,
    new: &str,
    old: Option<&str>,
    msg: &str,
) -> Option<Result<(), std::io::Error>> {
    let logs = command::ref_logs(g, dir)?;
    let who = reflog_who(g, dir)?;
    update_ref(
        dir,
        &RefUpdate {
            refname,
            new,
            old,
            who: &who,
            message: msg,
            logs,
        },
    )
}

/// Who a reflog line written in process in `dir` names, and when: the committer git would name,
/// at this second (`None` where git is to say).
pub(super) fn reflog_who(g: &Repos, dir: &Path) -> Option<String> {
    let [_, (name, email)] = command::commit_idents(g, dir)?;
    Some(format!("{name} <{email}> {}", git_now()))
}

/// This second in the local time zone as git writes a date in a commit or reflog:
/// `SECONDS ±HHMM`.
fn git_now() -> String {
    let now = jiff::Zoned::now();
    let offset = now.offset().seconds();
    format!(
        "{} {}{:02}{:02}",
        now.timestamp().as_second(),
        if offset < 0 { '-' } else { '+' },
        offset.abs() / 3600,
        offset.abs() % 3600 / 60
    )
}

/// A ref's lock file, removed unless renamed over the ref.
struct Lock {
    path: PathBuf,
    target: PathBuf,
    file: Option<std::fs::File>,
}

impl Lock {
    /// `None` when the lock cannot be taken (held by another, or no place for it).
    fn take(target: &Path) -> Option<Lock> {
        std::fs::create_dir_all(target.parent()?).ok()?;
        let mut name = target.file_name()?.to_os_string();
        name.push(".lock");
        let path = target.with_file_name(name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .ok()?;
        Some(Lock {
            path,
            target: target.to_path_buf(),
            file: Some(file),
        })
    }

    /// Run `write` on the lock file, then put it in the ref's place.
    fn commit(
        mut self,
        write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let mut file = self
            .file
            .take()
            .expect("a lock holds its file until committed");
        write(&mut file)?;
        drop(file);
        std::fs::rename(&self.path, &self.target)?;
        self.path = PathBuf::new();
        Ok(())
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A reflog line as git writes it: the message with runs of whitespace made one space and none
/// at either end.
fn log_line(old: &str, new: &str, who: &str, message: &str) -> String {
    let message = message
        .split([' ', '\t', '\n', '\r'])
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if message.is_empty() {
        format!("{old} {new} {who}\n")
    } else {
        format!("{old} {new} {who}\t{message}\n")
    }
}

/// Append `line` to the reflog at `path`: made when missing unless the setting says only
/// existing reflogs are written to (a branch's reflog and HEAD's are the ones made by default).
fn append_log(path: &Path, logs: LogRefs, line: &str) -> std::io::Result<()> {
    let create = logs != LogRefs::Existing;
    if create && let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match OpenOptions::new().append(true).create(create).open(path) {
        Ok(mut f) => f.write_all(line.as_bytes()),
        Err(e) if !create && e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
