//! What a child the standard library starts does before `execve` where [`super::launch`] is
//! not used, and the descriptor and signal settings runner makes around its children.

use std::io;
use std::os::fd::RawFd;

/// Set or clear `FD_CLOEXEC` on `fd`, a descriptor this process owns (the lease, made
/// inheritable for one child at a time under the spawn lock).
pub(in crate::process) fn set_cloexec(fd: i32, on: bool) {
    // SAFETY: fcntl on a descriptor this process owns; no memory is touched.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            let flags = if on {
                flags | libc::FD_CLOEXEC
            } else {
                flags & !libc::FD_CLOEXEC
            };
            libc::fcntl(fd, libc::F_SETFD, flags);
        }
    }
}

/// Ignore SIGXFSZ in runner itself: under a file-size limit (`ulimit -f`) a write past it then
/// fails (`EFBIG`) and is reported as a full disk is — a log not written whole, a report that
/// could not be written, exit 4 — rather than killing runner with nothing said and temporary
/// files left. Children get the default disposition back (`launch`).
pub(crate) fn ignore_file_size_signal() {
    // SAFETY: setting a signal's disposition to ignore installs no handler; nothing else of the
    // process depends on SIGXFSZ.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// For a helper (git) the standard library starts: it dies with runner (a parent-death signal,
/// SIGKILL), so a helper blocked for ever — a FIFO in place of a file git opens — never
/// outlives a runner that was killed or stopped while it waited. The child checks that runner
/// is still its parent after asking, so a runner that died in between is no race.
pub(in crate::process) fn die_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the hook runs in the forked child before `execve` and makes only `prctl`,
    // `getppid` and `_exit` calls, all async-signal-safe, with no allocation.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(137);
            }
            Ok(())
        });
    }
}

/// For a child the standard library starts: move it into the cgroups whose `cgroup.procs`
/// files are open as `join` before it runs its program, as `launch` does. (The hook makes the
/// standard library fork rather than use `posix_spawn`; only children that join a cgroup pay
/// for that.)
pub(in crate::process) fn join_before_exec(cmd: &mut tokio::process::Command, join: Vec<RawFd>) {
    if join.is_empty() {
        return;
    }
    // SAFETY: the hook runs in the forked child before `execve` and makes only `write` calls on
    // descriptors the child inherited, with a static buffer.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &join {
                if libc::write(fd, b"0".as_ptr().cast(), 1) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}
