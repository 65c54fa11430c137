//! What runner reads of a folder's git configuration ([`super::command`] looks it up; a run's
//! [`super::Repos`] keeps it): the filter drivers it turns off, who commits, and the settings
//! that leave a commit, a ref move, a checkout or a diff to git.

/// A configuration entry: its key and value (`None` for a key without `=`).
pub(super) type Entry = (String, Option<String>);

/// What runner needs of a folder's configuration, asked of git once: the filter drivers, and
/// who commits.
#[derive(Clone, Debug, Default)]
pub(super) struct Looked {
    pub(super) filters: Vec<String>,
    /// Both `user.name` and `user.email` are set.
    pub(super) identity: bool,
    /// `user.`, `author.` and `committer.` `name` and `email`, as git reads them (the last
    /// value of a key wins).
    pub(super) idents: std::collections::BTreeMap<String, String>,
    /// A setting that changes how git writes a commit (`commit.gpgSign`,
    /// `i18n.commitEncoding`): commits are left to git.
    pub(super) commit_settings: bool,
    /// Which ref updates git records in a reflog (`core.logAllRefUpdates`); `None` where ref
    /// updates are left to git: a value git would refuse, or a setting that changes how git
    /// writes refs and logs (`core.sharedRepository`, `core.fsync` and its kin).
    pub(super) ref_logs: Option<LogRefs>,
    /// A setting that changes what `git worktree add -b` writes beyond the branch and the
    /// worktree's records (`core.sparseCheckout`: the patterns copied; `branch.autoSetupMerge`:
    /// tracking set up; `worktree.useRelativePaths`): worktrees are left to git.
    pub(super) worktree_settings: bool,
    /// A setting that changes how git checks files out (line endings, links, case, protected
    /// names, an attributes file, encodings) or a filter driver: checkouts are left to git.
    pub(super) checkout_settings: bool,
    /// A setting that changes what `git diff --numstat` counts (`diff.algorithm`,
    /// `diff.context`, `core.bigFileThreshold`, an attributes file or tree): its totals are left
    /// to git.
    pub(super) diff_settings: bool,
}

/// `core.logAllRefUpdates` as git reads it in a repository with a working tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogRefs {
    /// Only reflogs that exist are written to (`false`).
    Existing,
    /// Branches, remote-tracking refs, notes and HEAD get a reflog (`true`, the default).
    Normal,
    /// Every ref gets one (`always`).
    Always,
}

impl LogRefs {
    /// The setting's last value (`None`: a key without `=`, which reads as true); `None` for a
    /// value git would refuse.
    pub(super) fn parse(value: Option<&str>) -> Option<LogRefs> {
        let Some(v) = value else {
            return Some(LogRefs::Normal);
        };
        let v = v.to_ascii_lowercase();
        match v.as_str() {
            "always" => Some(LogRefs::Always),
            "true" | "yes" | "on" => Some(LogRefs::Normal),
            "false" | "no" | "off" | "" => Some(LogRefs::Existing),
            _ => match v.parse::<i64>() {
                Ok(0) => Some(LogRefs::Existing),
                Ok(_) => Some(LogRefs::Normal),
                Err(_) => None,
            },
        }
    }
}
