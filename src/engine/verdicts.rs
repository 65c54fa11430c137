//! The verdict cache: a gate's result on a tree, reused when the same command with the same
//! environment would run on the same tree again.
//!
//! Only passes are kept for gates that judge an item: a failure is run again (a flaky failure
//! must not stick to a tree), as build systems that cache test results do. A baseline, run on
//! the base commit to learn which failures are already there, keeps its failures too, under keys
//! of its own ([`Kind::Baseline`]).
//!
//! A verdict is keyed by the git tree of the folder the gate runs in (untracked files included,
//! ignored files not), its command line and its environment, runner's variables included
//! (`RUNNER_REPO`, `RUNNER_ITEM`: a gate may judge by them) but for those that change with every
//! run or attempt (run id, attempt, token, feedback and usage files, model), and by the gate's
//! `min_tests` pattern (a verdict keeps how many lines it matched). The folder itself
//! is written as `<dir>`, so that a worktree made anew finds the verdict of the one before. Only verdicts the command gave by
//! exiting are kept: a timeout, a cancellation, a command that could not start or was not found
//! (exit 126 or 127) or one killed by a signal says nothing about the tree.
//!
//! Verdicts are files under `<workspace>/cache/verdicts`, one per key, written atomically: a
//! lost or unreadable one is a miss. The folder is within a worker's reach, so each verdict is
//! sealed with an HMAC under a key the ledger keeps (made once per ledger, in no file of the
//! workspace and in no child's environment): a verdict runner did not write — a worker that
//! computed a key and wrote a pass — does not verify and is not reused. The runs of one ledger
//! share verdicts.

use crate::failures::Failure;
use crate::process::Finished;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What a gate gave on a tree, and where it was first seen.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Verdict {
    pub exit: i32,
    /// Output lines its `min_tests` pattern matched.
    pub counted: u64,
    /// The redacted last part of its output.
    pub tail: String,
    pub failures: Vec<Failure>,
    pub duration_ms: u64,
    /// The run, repository and item whose gate gave it (for a baseline: the item that asked).
    pub run_id: String,
    pub repo: String,
    pub item: String,
    /// When, as RFC 3339.
    pub at: String,
}

impl Verdict {
    /// A finished gate's verdict, unless it says nothing about the tree.
    pub fn of(fin: &Finished, run_id: &str, repo: &str, item: &str) -> Option<Verdict> {
        let exit = fin.exit?;
        if fin.timed_out
            || fin.silenced
            || fin.cancelled
            || fin.spawn_error.is_some()
            || fin.signal.is_some()
            || exit == 126
            || exit == 127
        {
            return None;
        }
        Some(Verdict {
            exit,
            counted: fin.counted,
            tail: fin.tail.clone(),
            failures: fin.failures.clone(),
            duration_ms: fin.duration.as_millis() as u64,
            run_id: run_id.to_string(),
            repo: repo.to_string(),
            item: item.to_string(),
            at: crate::support::clock::now(),
        })
    }

    /// The verdict as a finished gate that took no time.
    pub fn finished(&self) -> Finished {
        Finished {
            exit: Some(self.exit),
            tail: self.tail.clone(),
            counted: self.counted,
            failures: self.failures.clone(),
            any_output: !self.tail.is_empty(),
            tree_gone: true,
            ..Finished::default()
        }
    }

    pub fn duration(&self) -> Duration {
        Duration::from_millis(self.duration_ms)
    }
}

/// Which verdicts a key is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A gate judging an item's work: passes only.
    Gate,
    /// A gate run on the base commit: passes and failures.
    Baseline,
}

/// The key of a verdict: the tree, the command line (its folder as `<dir>`), the environment but
/// for runner's per-item variables, and the `min_tests` pattern whose matches it counts.
pub fn key(
    kind: Kind,
    tree: &str,
    argv: &[String],
    env: &[(String, String)],
    dir: &Path,
    counting: Option<&str>,
) -> String {
    let dir = dir.to_string_lossy();
    let mut h = Sha256::new();
    h.update(match kind {
        Kind::Gate => b"runner.verdict/v1\0".as_slice(),
        Kind::Baseline => b"runner.baseline/v1\0".as_slice(),
    });
    h.update(tree.as_bytes());
    h.update(b"\0");
    for a in argv {
        h.update(a.replace(dir.as_ref(), "<dir>").as_bytes());
        h.update(b"\0");
    }
    h.update(b"\0");
    let mut env: Vec<&(String, String)> = env.iter().filter(|(k, _)| !varies(kind, k)).collect();
    env.sort();
    for (k, v) in env {
        h.update(k.as_bytes());
        h.update(b"=");
        h.update(v.replace(dir.as_ref(), "<dir>").as_bytes());
        h.update(b"\0");
    }
    // A verdict counts the lines `min_tests` matched: another pattern is another question.
    if let Some(p) = counting {
        h.update(b"\0min_tests\0");
        h.update(p.as_bytes());
    }
    crate::support::hex(&h.finalize())
}

/// runner's variables that change from run to run or attempt to attempt, left out of keys; a
/// baseline, which is the repository's and not an item's, leaves the item out too.
fn varies(kind: Kind, name: &str) -> bool {
    matches!(
        name,
        "RUNNER_RUN_ID"
            | "RUNNER_ATTEMPT"
            | "RUNNER_FEEDBACK"
            | "RUNNER_TOKEN"
            | "RUNNER_USAGE"
            | "RUNNER_MAX_WORKERS"
            | "RUNNER_MODEL"
    ) || (kind == Kind::Baseline && name == "RUNNER_ITEM")
}

/// Where verdicts are kept.
#[derive(Clone)]
pub struct Verdicts {
    dir: PathBuf,
    /// Recorded verdicts may be reused (`apply --no-cache` says no; new ones are still kept).
    pub reuse: bool,
    /// The ledger's key that seals them.
    secret: Vec<u8>,
}

impl std::fmt::Debug for Verdicts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verdicts")
            .field("dir", &self.dir)
            .field("reuse", &self.reuse)
            .finish_non_exhaustive()
    }
}

/// A verdict as stored: the verdict and its seal.
#[derive(Serialize, Deserialize)]
struct Sealed {
    verdict: Verdict,
    /// HMAC-SHA256 of the key and the verdict's JSON, in hex.
    mac: String,
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
fn hmac(key: &[u8], message: &[&[u8]]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    for m in message {
        inner.update(m);
    }
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

impl Verdicts {
    /// Verdicts in `workspace`, sealed with the ledger's `secret`.
    pub fn new(workspace: &Path, reuse: bool, secret: &str) -> Self {
        Verdicts {
            dir: dir(workspace),
            reuse,
            secret: secret.as_bytes().to_vec(),
        }
    }

    fn seal(&self, key: &str, body: &[u8]) -> String {
        crate::support::hex(&hmac(&self.secret, &[key.as_bytes(), b"\0", body]))
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The verdict recorded under `key`, when reuse is allowed.
    pub fn get(&self, key: &str) -> Option<Verdict> {
        if !self.reuse {
            return None;
        }
        let bytes = std::fs::read(self.path(key)).ok()?;
        let sealed: Sealed = serde_json::from_slice(&bytes).ok()?;
        let body = serde_json::to_vec(&sealed.verdict).ok()?;
        if !constant_time_eq(self.seal(key, &body).as_bytes(), sealed.mac.as_bytes()) {
            tracing::warn!(
                file = %self.path(key).display(),
                "a cached verdict runner did not write (its seal does not verify) is not reused"
            );
            return None;
        }
        Some(sealed.verdict)
    }

    /// Record `v` under `key` (a failure to is only logged: the cache is an economy).
    pub fn put(&self, key: &str, v: &Verdict) {
        let written = std::fs::create_dir_all(&self.dir).and_then(|()| {
            let body = serde_json::to_vec(v).map_err(std::io::Error::other)?;
            let sealed = Sealed {
                verdict: v.clone(),
                mac: self.seal(key, &body),
            };
            let bytes = serde_json::to_vec(&sealed).map_err(std::io::Error::other)?;
            crate::support::fs::write_atomic(&self.path(key), &bytes)
        });
        if let Err(e) = written {
            tracing::warn!(dir = %self.dir.display(), error = %e, "a gate's verdict could not be cached");
        }
    }
}

/// Whether `a` and `b` are equal, in time that does not depend on where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The verdict folder of a workspace.
pub fn dir(workspace: &Path) -> PathBuf {
    workspace.join("cache").join("verdicts")
}

/// Remove verdicts last written before `cutoff`; returns how many went.
pub fn prune(workspace: &Path, cutoff: SystemTime) -> usize {
    let Ok(entries) = std::fs::read_dir(dir(workspace)) else {
        return 0;
    };
    let mut gone = 0;
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t < cutoff);
        if old && std::fs::remove_file(e.path()).is_ok() {
            gone += 1;
        }
    }
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_is_rfc_4231s() {
        assert_eq!(
            crate::support::hex(&hmac(&[0x0b; 20], &[b"Hi There"])),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            crate::support::hex(&hmac(b"Jefe", &[b"what do ya want ", b"for nothing?"])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_verdict_runner_did_not_seal_is_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let v = Verdicts::new(dir.path(), true, "the ledger's key");
        let verdict = Verdict {
            exit: 0,
            counted: 0,
            tail: String::new(),
            failures: Vec::new(),
            duration_ms: 5,
            run_id: "r".into(),
            repo: "a".into(),
            item: "i".into(),
            at: "2026-01-01T00:00:00Z".into(),
        };
        v.put("k1", &verdict);
        assert!(v.get("k1").is_some());
        // Another key (another ledger, or a worker's guess) does not verify.
        assert!(
            Verdicts::new(dir.path(), true, "a guess")
                .get("k1")
                .is_none()
        );
        // A verdict written as a plain file, or moved to another key, is no verdict.
        std::fs::write(v.path("k2"), serde_json::to_vec(&verdict).unwrap()).unwrap();
        assert!(v.get("k2").is_none());
        std::fs::copy(v.path("k1"), v.path("k3")).unwrap();
        assert!(v.get("k3").is_none());
    }

    #[test]
    fn the_key_ignores_the_folder_and_what_changes_every_attempt() {
        let env = |attempt: &str, dir: &str| {
            vec![
                ("PATH".to_string(), "/usr/bin".to_string()),
                ("RUNNER_ATTEMPT".to_string(), attempt.to_string()),
                ("RUNNER_REPO_PATH".to_string(), dir.to_string()),
            ]
        };
        let argv = |dir: &str| vec!["make".to_string(), format!("-C{dir}")];
        let g = Kind::Gate;
        // The key of a `make -C<dir>` gate on `tree`, in `dir`, at attempt `attempt`.
        let make = |kind, tree: &str, dir: &str, attempt: &str| {
            key(
                kind,
                tree,
                &argv(dir),
                &env(attempt, dir),
                Path::new(dir),
                None,
            )
        };
        let a = make(g, "t1", "/w/a", "1");
        assert_eq!(a, make(g, "t1", "/w/b", "2"));
        assert_ne!(a, make(g, "t2", "/w/a", "1"));
        let mut other = env("1", "/w/a");
        other[0].1 = "/opt/bin".into();
        assert_ne!(
            a,
            key(g, "t1", &argv("/w/a"), &other, Path::new("/w/a"), None)
        );
        let bl = Kind::Baseline;
        assert_ne!(a, make(bl, "t1", "/w/a", "1"));
        // A gate may judge by the item it is run for; a baseline is the repository's.
        let item = |i: &str| vec![("RUNNER_ITEM".to_string(), i.to_string())];
        let at = Path::new("/w");
        assert_ne!(
            key(g, "t", &[], &item("a"), at, None),
            key(g, "t", &[], &item("b"), at, None)
        );
        assert_eq!(
            key(bl, "t", &[], &item("a"), at, None),
            key(bl, "t", &[], &item("b"), at, None)
        );
        // The lines a verdict counted were counted with its `min_tests` pattern.
        assert_ne!(
            key(g, "t", &[], &[], at, Some("^ok")),
            key(g, "t", &[], &[], at, Some("^PASS"))
        );
        assert_ne!(
            key(g, "t", &[], &[], at, Some("^ok")),
            key(g, "t", &[], &[], at, None)
        );
    }

    #[test]
    fn only_exits_are_verdicts() {
        let exited = |code| Finished {
            exit: Some(code),
            ..Finished::default()
        };
        assert!(Verdict::of(&exited(0), "r", "p", "i").is_some());
        assert!(Verdict::of(&exited(1), "r", "p", "i").is_some());
        assert!(Verdict::of(&exited(127), "r", "p", "i").is_none());
        let timed_out = Finished {
            timed_out: true,
            ..exited(1)
        };
        assert!(Verdict::of(&timed_out, "r", "p", "i").is_none());
        let killed = Finished {
            exit: None,
            signal: Some(9),
            ..Finished::default()
        };
        assert!(Verdict::of(&killed, "r", "p", "i").is_none());
    }
}
