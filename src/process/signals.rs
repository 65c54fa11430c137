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
/// When each last arrived, in milliseconds since boot (`CLOCK_BOOTTIME`, as process start
/// times count): a process that started after its signal arrived is another one, the pid
/// reused.
static ARRIVED: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
const SEEN: u64 = 1 << 63;

/// A signal's sender, as the kernel gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sender {
    pub pid: i32,
    pub uid: u32,
    /// When the signal arrived, in milliseconds since boot.
    pub arrived_ms: u64,
}

/// Start recording the senders of the stop signals (once per process). Until the first one
/// arrives this changes nothing: a signal's default action still applies where tokio has not
/// taken it over.
pub(crate) fn record_senders() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for (slot, sig) in WATCHED.iter().enumerate() {
            let action = move |info: &libc::siginfo_t| {
                // SAFETY: for signals sent by kill(2), sigqueue(2) or the terminal, the kernel
                // fills in the sender's pid and uid.
                let (pid, uid) = unsafe { (info.si_pid(), info.si_uid()) };
                let mut ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // SAFETY: clock_gettime is async-signal-safe and writes only `ts`.
                unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
                ARRIVED[slot].store(
                    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000,
                    Ordering::SeqCst,
                );
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
pub(crate) fn sender_of(sig: i32) -> Option<Sender> {
    let slot = WATCHED.iter().position(|s| *s == sig)?;
    let v = LAST[slot].load(Ordering::SeqCst);
    (v & SEEN != 0).then_some(Sender {
        pid: (v & 0xffff_ffff) as u32 as i32,
        uid: ((v >> 32) & 0x7fff_ffff) as u32,
        arrived_ms: ARRIVED[slot].load(Ordering::SeqCst),
    })
}

impl Sender {
    /// `pid 4242 (uid 1000 alice, program systemctl, started 812.345 s after boot)`: the user
    /// name and the program when they can be read (the program through `redact`). Never its
    /// arguments: a command line can carry a password or a token, and pattern matching does
    /// not find every one. A pid of 0 is the kernel (a closed terminal's hangup, for one).
    ///
    /// The process is read only while it is the one that sent the signal: one that started after
    /// the signal arrived has the pid reused, and is not named.
    pub(crate) fn describe(&self, redact: impl Fn(&str) -> String) -> String {
        if self.pid == 0 {
            return "the kernel (pid 0)".to_string();
        }
        let started_ms = crate::support::host::process_start_time(self.pid as u32).map(|ticks| {
            // SAFETY: sysconf has no preconditions.
            let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
            ticks * 1000 / hz
        });
        // A tick's rounding aside, a process that started after the signal is another one.
        if started_ms.is_some_and(|s| self.arrived_ms > 0 && s > self.arrived_ms + 20) {
            return format!(
                "pid {} (uid {}; it has exited, the pid belongs to another process now)",
                self.pid, self.uid
            );
        }
        let program = std::fs::read_to_string(format!("/proc/{}/comm", self.pid))
            .ok()
            .map(|c| crate::support::text::printable(c.trim_end()));
        let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(self.uid))
            .ok()
            .flatten()
            .map(|u| format!(" {}", u.name))
            .unwrap_or_default();
        let started = started_ms
            .map(|ms| format!(", started {}.{:03} s after boot", ms / 1000, ms % 1000))
            .unwrap_or_default();
        let program = program
            .map(|p| format!(", program {}", redact(&p)))
            .unwrap_or_default();
        format!(
            "pid {} (uid {}{user}{program}{started})",
            self.pid, self.uid
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_that_started_after_the_signal_is_not_named() {
        // This process started long after the first millisecond since boot.
        let s = Sender {
            pid: std::process::id() as i32,
            uid: 0,
            arrived_ms: 1,
        };
        let d = s.describe(|t| t.to_string());
        assert!(d.contains("the pid belongs to another process now"), "{d}");
        // Arrived now: it is this process, named with its program and start time.
        let now = Sender {
            arrived_ms: u64::MAX / 2,
            ..s
        };
        let d = now.describe(|t| t.to_string());
        assert!(
            d.contains(", program ") && d.contains("s after boot"),
            "{d}"
        );
    }
}
