//! Who sent runner a stop signal. The kernel says, in the signal's information (`siginfo_t`):
//! the sender's pid and real uid. A recorder registered beside tokio's handler (both through the
//! one registry, which calls every action registered for a signal) keeps the latest sender of
//! each stop signal in atomics — all a signal handler may safely do; the rest (the sender's user
//! name and command line) is read afterwards, outside the handler, while the sender may still
//! be there to read.

use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

/// SIGINT, SIGTERM, SIGHUP: the signals that stop a run.
const WATCHED: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
static LAST: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
const SEEN: u64 = 1 << 63;

/// A signal's sender, as the kernel gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sender {
    pub pid: i32,
    pub uid: u32,
}

/// Start recording the senders of the stop signals (once per process). Until the first one
/// arrives this changes nothing: a signal's default action still applies where tokio has not
/// taken it over.
pub fn record_senders() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for (slot, sig) in WATCHED.iter().enumerate() {
            let action = move |info: &libc::siginfo_t| {
                // SAFETY: for signals sent by kill(2), sigqueue(2) or the terminal, the kernel
                // fills in the sender's pid and uid.
                let (pid, uid) = unsafe { (info.si_pid(), info.si_uid()) };
                LAST[slot].store(
                    SEEN | (u64::from(uid) << 32) | u64::from(pid as u32),
                    Ordering::SeqCst,
                );
            };
            // SAFETY: the action only stores into a static atomic, which is async-signal-safe;
            // the signals are not ones the registry forbids (SIGKILL, SIGSTOP, …).
            let registered = unsafe { signal_hook_registry::register_sigaction(*sig, action) };
            if let Err(e) = registered {
                tracing::warn!(signal = sig, error = %e, "cannot record who sends this signal");
            }
        }
    });
}

/// The latest sender of `sig`, when one was recorded.
pub fn sender_of(sig: i32) -> Option<Sender> {
    let slot = WATCHED.iter().position(|s| *s == sig)?;
    let v = LAST[slot].load(Ordering::SeqCst);
    (v & SEEN != 0).then_some(Sender {
        pid: (v & 0xffff_ffff) as u32 as i32,
        uid: ((v >> 32) & 0x7fff_ffff) as u32,
    })
}

impl Sender {
    /// `pid 4242 (uid 1000 alice: `systemctl stop nightly`)`; the user name and the command line
    /// when they can be read, the command line through `redact` (it may carry a secret). A pid
    /// of 0 is the kernel (a closed terminal's hangup, for one).
    pub fn describe(&self, redact: impl Fn(&str) -> String) -> String {
        if self.pid == 0 {
            return "the kernel (pid 0)".to_string();
        }
        let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(self.uid))
            .ok()
            .flatten()
            .map(|u| format!(" {}", u.name))
            .unwrap_or_default();
        let cmd = std::fs::read(format!("/proc/{}/cmdline", self.pid))
            .ok()
            .filter(|b| !b.is_empty())
            .map(|b| {
                let words: Vec<String> = b
                    .split(|c| *c == 0)
                    .filter(|w| !w.is_empty())
                    .map(|w| String::from_utf8_lossy(w).into_owned())
                    .collect();
                let line = crate::support::text::printable(&words.join(" "));
                let line = redact(&line);
                let short: String = line.chars().take(200).collect();
                format!(": `{short}`")
            })
            .unwrap_or_default();
        format!("pid {} (uid {}{user}{cmd})", self.pid, self.uid)
    }
}
