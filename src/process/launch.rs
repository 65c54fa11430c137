//! Starting a child without stopping runner until it has started.
//!
//! `posix_spawn` (and the standard library on top of it) creates the child with `vfork`
//! semantics: the calling thread sleeps until the child has called `execve`, then has to be
//! scheduled again. On a machine whose cores are all busy with workers, that wake-up waits for a
//! core, and runner's single event loop — which serves every slot — waits with it, while a core
//! freed by another slot's exit may sit idle. Measured on two busy cores, runner spent about a
//! quarter of a drain runnable but waiting so.
//!
//! Here the child is created with `clone(CLONE_VM)` but without `CLONE_VFORK`: it runs on its own
//! stack in runner's memory until `execve`, and runner carries on at once. What that asks for,
//! and how it is met:
//!
//! - Everything the child reads (program, arguments, environment, directory) and its stack stay
//!   alive and untouched until it has exited: they are owned by [`Launched`], which lets go of
//!   them once it has reaped the child. A [`Launched`] dropped before that leaks them rather than
//!   free memory the child may still use.
//! - The child touches no memory of runner's: it makes system calls directly (no libc wrapper,
//!   which would set the shared `errno`), allocates nothing and takes no lock. A failed step
//!   writes its error number to a close-on-exec status pipe and ends the child with status 127;
//!   once the child has exited, the pipe holds either that number or nothing (its program
//!   started).
//! - No signal handler of runner's runs in the child: all signals are blocked across `clone`, and
//!   every handled signal is at its default before the child unblocks them for `execve`, as
//!   `posix_spawn` does — reset by the kernel as it creates the child (`clone3` with
//!   `CLONE_CLEAR_SIGHAND`), or, where `clone` made it, by the child asking after each signal.
//!   `SIGPIPE` and `SIGXFSZ`, which runner ignores, are reset to their defaults too.
//! - The child has its own copy of the descriptor table (no `CLONE_FILES`), so making the lease
//!   descriptor inheritable there reaches no other child. Until its `execve` closes them, that
//!   copy also holds every other descriptor runner had open, the locks of other repositories'
//!   leases among them: that is why a lease is released by unlocking it, not by closing it
//!   (`crate::lease::Lease::release`).
//! - The kernel hands back a pidfd (`CLONE_PIDFD`), through which runner waits for the exit.
//!
//! Where this is not available (another architecture, a kernel without `CLONE_PIDFD`), callers
//! fall back to the standard library.

use std::ffi::{CString, c_void};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use tokio::io::unix::AsyncFd;

#[cfg(target_arch = "x86_64")]
use clone3::clone3_call;
use clone3::{CLONE_CLEAR_SIGHAND, CLONE_INTO_CGROUP, CloneArgs, ZERO_TIME, runner_pidfd};

/// What the child needs, laid out before `clone` and kept unchanged until it has called
/// `execve`.
struct ChildImage {
    program: CString,
    /// Owned here for the pointers below.
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    /// Owned here for the pointers below.
    _env: Vec<CString>,
    env_ptrs: Vec<*const libc::c_char>,
    cwd: CString,
    stdio: [RawFd; 3],
    inherit: Option<RawFd>,
    status: RawFd,
    /// runner's pid: the child checks, after asking for a parent-death signal, that its parent
    /// is still runner (had runner died in between, the request would be for the wrong parent).
    parent: usize,
    /// `cgroup.procs` files the child writes `0` to (moving itself there) before anything else:
    /// the first `join_len` of them.
    join: [RawFd; MAX_JOIN],
    join_len: usize,
    /// The first of `join` the child writes itself into: 1 when `clone3` created it in the
    /// unified cgroup already.
    join_from: usize,
    /// `clone3` reset the child's handled signals to their defaults (`CLONE_CLEAR_SIGHAND`):
    /// the child need not ask after each signal.
    handlers_cleared: bool,
    /// How the child confines itself just before `execve` (`sandbox.rs`).
    confine: Confine,
    /// With a pid namespace (`confine.pidns`): runner's pidfd, through which the child checks
    /// that runner still lives (its parent is outside its namespace: `getppid` says 0); the
    /// top of the stack its program's process starts on (the lower half of the child's); the
    /// proxy's listener, for that process; and how that process ended, for runner to read once
    /// it has reaped the child (-1: not known).
    runner_pidfd: RawFd,
    /// The write end of [`Launched::done`]'s pipe (-1: none).
    done: RawFd,
    program_stack: usize,
    proxy: std::sync::atomic::AtomicIsize,
    program_status: std::sync::atomic::AtomicI32,
}

/// Most cgroups a child joins: one of the unified hierarchy and one per v1 controller that
/// enforces a limit.
pub(crate) const MAX_JOIN: usize = 4;

// SAFETY: the pointers point into the image's own strings, which move with it (the heap buffers
// of a `CString` stay put) and are never changed.
unsafe impl Send for ChildImage {}

/// The child's stack, in 16-byte words (its alignment).
type Stack = Box<[MaybeUninit<u128>]>;

/// The size of the child's stack: its few frames need a fraction of it. With a pid namespace,
/// its program's process starts on the lower half.
const STACK_WORDS: usize = 64 * 1024 / 16;

/// Stacks of reaped children, for the next ones (a drain starts thousands of children).
static STACKS: std::sync::Mutex<Vec<Stack>> = std::sync::Mutex::new(Vec::new());

fn take_stack() -> Stack {
    let spare = STACKS.lock().ok().and_then(|mut s| s.pop());
    spare.unwrap_or_else(|| Box::<[u128]>::new_uninit_slice(STACK_WORDS))
}

fn return_stack(stack: Stack) {
    if let Ok(mut s) = STACKS.lock()
        && s.len() < 64
    {
        s.push(stack);
    }
}

/// A child that has been created. Whether its program started is known once it has exited
/// ([`Launched::start_error`]).
pub(crate) struct Launched {
    pub pid: i32,
    /// `None` for a child a thread waits for ([`Waiter::Thread`]).
    pidfd: Option<AsyncFd<OwnedFd>>,
    /// Closes when the child calls `execve`; holds an error number when it failed before.
    status: OwnedFd,
    /// The image and the stack, until the child no longer uses them.
    memory: Option<(Box<ChildImage>, Stack)>,
    /// In a pid namespace: readable once the program has ended (the child, the namespace's
    /// first process, ends after it, but only once every process of the namespace is gone,
    /// which a process stuck in the kernel may keep from ever happening).
    done: Option<AsyncFd<OwnedFd>>,
}

/// Who waits for a launched child.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiter {
    Runtime,
    Thread,
}

/// Why no child was created: `Unsupported` means the caller should start it another way.
pub(crate) enum LaunchError {
    Unsupported,
    Failed(io::Error),
}

/// Create a child running `program` (also its `argv[0]`) with `args`, exactly the environment
/// `env`, in `cwd`, with copies of `stdio` as its standard input, output and error, in a process
/// group of its own, keeping `inherit` open across `execve`, after moving itself into the
/// cgroups whose `cgroup.procs` files are open as `join` (before it starts anything, so that
/// nothing it starts is outside them). The descriptors need only be open during this call: the
/// child gets a copy of the descriptor table.
///
/// `into`, the unified cgroup's folder (whose `cgroup.procs` is `join[0]`), lets the kernel
/// create the child there (`clone3` with `CLONE_INTO_CGROUP`, Linux 5.7): no move at all. A
/// process that moves itself takes a lock every fork on the machine waits for, and measured
/// here it added a sixth to the life of a short command; where `clone3` is refused, the child
/// moves itself as before.
///
/// `waiter` says who waits for the child: the runtime ([`Launched::wait`]), or a thread
/// ([`Launched::wait_blocking`], which needs no runtime).
#[expect(
    clippy::too_many_arguments,
    reason = "the child's whole description, in one call"
)]
pub(crate) fn launch(
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    cwd: &Path,
    stdio: [RawFd; 3],
    inherit: Option<RawFd>,
    join: &[RawFd],
    into: Option<RawFd>,
    waiter: Waiter,
    confine: Confine,
) -> Result<Launched, LaunchError> {
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) || unsupported() {
        return Err(LaunchError::Unsupported);
    }
    if join.len() > MAX_JOIN {
        return Err(LaunchError::Failed(io::Error::other(format!(
            "a child joins at most {MAX_JOIN} cgroups"
        ))));
    }
    let mut join_fds = [-1; MAX_JOIN];
    join_fds[..join.len()].copy_from_slice(join);
    // A pid namespace needs the child made in it (with its user namespace), and `clone3` to
    // start its program's process on a stack of its own.
    let pidns = confine.pidns
        && cfg!(target_arch = "x86_64")
        && !NO_CLONE3.load(std::sync::atomic::Ordering::Relaxed)
        && runner_pidfd() >= 0;
    let confine = confine.in_pid_namespace(pidns);
    let failed = LaunchError::Failed;
    // In a pid namespace: a pipe the child writes to once its program has ended.
    let done = if pidns {
        Some(
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .map_err(|e| failed(e.into()))?,
        )
    } else {
        None
    };
    let (program, argv, env, cwd) = exec_strings(program, args, env, cwd)?;
    // Read only after the child has exited, when it holds either nothing or the error number.
    let (status_rx, status_tx) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
            .map_err(|e| failed(e.into()))?;
    let mut image = Box::new(ChildImage {
        program,
        argv_ptrs: argv
            .iter()
            .map(|a| a.as_ptr())
            .chain([std::ptr::null()])
            .collect(),
        _argv: argv,
        env_ptrs: env
            .iter()
            .map(|a| a.as_ptr())
            .chain([std::ptr::null()])
            .collect(),
        _env: env,
        cwd,
        parent: own_pid(),
        stdio,
        inherit,
        status: status_tx.as_raw_fd(),
        join: join_fds,
        join_len: join.len(),
        join_from: 0,
        handlers_cleared: false,
        runner_pidfd: if pidns { runner_pidfd() } else { -1 },
        done: done.as_ref().map_or(-1, |(_, tx)| tx.as_raw_fd()),
        program_stack: 0,
        proxy: std::sync::atomic::AtomicIsize::new(-1),
        program_status: std::sync::atomic::AtomicI32::new(-1),
        confine,
    });
    let mut stack = take_stack();
    let mut pidfd: libc::c_int = -1;
    let into = into.filter(|_| !join.is_empty());
    // SAFETY: `image` and `stack` are kept alive and unchanged until the child has called
    // `execve` or exited (they go into `Launched`, or are dropped only once it is reaped).
    let pid = match unsafe { create(&mut image, &mut stack, into, &mut pidfd) } {
        Ok(pid) => pid,
        Err(err) => {
            // No child was created: starting it another way is safe.
            if matches!(err.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
                mark_unsupported();
                return Err(LaunchError::Unsupported);
            }
            return Err(failed(err));
        }
    };
    drop(status_tx);
    let done = match done {
        Some((rx, tx)) => {
            drop(tx);
            // SAFETY: the descriptor is owned by the `AsyncFd` and stays open as long as it does.
            match unsafe { AsyncFd::register_with_interest(rx, tokio::io::Interest::READABLE) } {
                Ok(rx) => Some(rx),
                Err(e) => {
                    // SAFETY: signalling and reaping the child just created; its memory is
                    // let go of only then.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                        libc::waitpid(pid, std::ptr::null_mut(), 0);
                    }
                    return Err(failed(e.into()));
                }
            }
        }
        None => None,
    };
    let mut launched = watched(pid, pidfd, status_rx, (image, stack), waiter)?;
    launched.done = done;
    Ok(launched)
}

/// The child's program, argument vector (the program first), environment (`KEY=value`) and
/// folder as C strings; a NUL byte in any is an error.
fn exec_strings(
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    cwd: &Path,
) -> Result<(CString, Vec<CString>, Vec<CString>, CString), LaunchError> {
    let c = |b: Vec<u8>| CString::new(b).map_err(|e| LaunchError::Failed(io::Error::other(e)));
    let argv: Vec<CString> = std::iter::once(Ok(c(program.as_os_str().as_bytes().to_vec())?))
        .chain(args.iter().map(|a| c(a.as_bytes().to_vec())))
        .collect::<Result<_, _>>()?;
    let env: Vec<CString> = env
        .iter()
        .map(|(k, v)| {
            let mut var = Vec::with_capacity(k.len() + v.len() + 2);
            var.extend_from_slice(k.as_bytes());
            var.push(b'=');
            var.extend_from_slice(v.as_bytes());
            c(var)
        })
        .collect::<Result<_, _>>()?;
    Ok((
        c(program.as_os_str().as_bytes().to_vec())?,
        argv,
        env,
        c(cwd.as_os_str().as_bytes().to_vec())?,
    ))
}

/// Create the child: in the unified cgroup `into` where the kernel can (`clone3`), else with
/// `clone`, the child moving itself. Its pidfd in `pidfd` when the kernel gave one. All signals
/// are blocked across the call so that no handler runs in the child before it has reset them,
/// and the mask is restored in runner right after.
///
/// # Safety
///
/// The child runs `child` on `stack` with `image`: both must stay alive and unchanged until it
/// has called `execve` or exited. `child` makes raw system calls only.
unsafe fn create(
    image: &mut ChildImage,
    stack: &mut Stack,
    into: Option<RawFd>,
    pidfd: &mut libc::c_int,
) -> io::Result<i32> {
    // SAFETY: as the caller promises; the signal mask is restored before returning.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let top = stack.as_mut_ptr().add(stack.len()).cast::<c_void>();
        // The lower half, from its lowest address (`clone3` takes the base and the size).
        image.program_stack = stack.as_mut_ptr() as usize;
        let namespaces = if image.confine.pidns {
            (libc::CLONE_NEWUSER | libc::CLONE_NEWPID) as u64
        } else {
            0
        };
        let created_in = into.and_then(|cgroup| {
            image.join_from = 1;
            image.handlers_cleared = true;
            let pid = clone3_into(
                cgroup,
                stack.as_mut_ptr().cast(),
                stack.len() * 16,
                &raw mut *image,
                pidfd,
                namespaces,
            );
            if pid.is_none() {
                image.join_from = 0;
                image.handlers_cleared = false;
            }
            pid
        });
        let created = match created_in {
            Some(pid) => Ok(pid),
            None => {
                let pid = libc::clone(
                    child,
                    top,
                    libc::CLONE_VM | libc::CLONE_PIDFD | libc::SIGCHLD | namespaces as libc::c_int,
                    (&raw mut *image).cast::<c_void>(),
                    pidfd as *mut libc::c_int,
                );
                if pid < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(pid)
                }
            }
        };
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        created
    }
}

/// The child just created, in a process group of its own and waited for through its pidfd
/// (asked for now if the kernel gave none). A child that cannot be waited for is ended and
/// reaped, and only then is its memory let go.
fn watched(
    pid: i32,
    mut pidfd: libc::c_int,
    status: OwnedFd,
    memory: (Box<ChildImage>, Stack),
    waiter: Waiter,
) -> Result<Launched, LaunchError> {
    // The child puts itself in a group of its own, and so does runner, so that the group exists
    // when this returns, whichever of the two runs first (a signal to the group then reaches
    // the child).
    // SAFETY: setpgid on the child just created; an error means it got there itself.
    unsafe { libc::setpgid(pid, pid) };
    if waiter == Waiter::Thread {
        // Waited for by a thread (`waitpid`): the pidfd is not needed.
        if pidfd >= 0 {
            // SAFETY: the kernel returned this descriptor for the new child; nothing else owns it.
            drop(unsafe { OwnedFd::from_raw_fd(pidfd) });
        }
        return Ok(Launched {
            pid,
            pidfd: None,
            status,
            memory: Some(memory),
            done: None,
        });
    }
    if pidfd < 0 {
        // A kernel (or sandbox) that ignored `CLONE_PIDFD`: ask for one now. The child is not
        // reaped yet, so its pid cannot name another process.
        // SAFETY: pidfd_open on the child just created.
        pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
    }
    let end = |memory: (Box<ChildImage>, Stack)| {
        // SAFETY: signalling and reaping the child just created.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        drop(memory);
    };
    if pidfd < 0 {
        // The child cannot be waited for, so it is ended (it may have started its program: it
        // is not started again another way).
        let err = io::Error::last_os_error();
        end(memory);
        return Err(LaunchError::Failed(err));
    }
    // SAFETY: the kernel returned this descriptor for the new child; nothing else owns it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // SAFETY: the descriptor is owned by the `AsyncFd` and stays open as long as it does.
    match unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) } {
        Ok(pidfd) => Ok(Launched {
            pid,
            pidfd: Some(pidfd),
            status,
            memory: Some(memory),
            done: None,
        }),
        Err(e) => {
            // Not to be waited for asynchronously: end the child, reap it, and only then let go
            // of its memory.
            end(memory);
            Err(LaunchError::Failed(e.into()))
        }
    }
}

static UNSUPPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether children are to be started another way: the kernel has no pidfds (`CLONE_PIDFD`
/// came with Linux 5.2; probed through `pidfd_open`, 5.3), or `clone` refused the flags.
fn unsupported() -> bool {
    static NO_PIDFDS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let no_pidfds = *NO_PIDFDS.get_or_init(|| {
        // SAFETY: a pidfd of this very process, closed at once.
        unsafe {
            let fd = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0);
            if fd >= 0 {
                libc::close(fd as libc::c_int);
            }
            fd < 0
        }
    });
    no_pidfds || UNSUPPORTED.load(std::sync::atomic::Ordering::Relaxed)
}

fn mark_unsupported() {
    UNSUPPORTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

impl Launched {
    /// Wait for the child to exit and reap it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.try_wait()? {
                let status = self.program_status(status);
                // Gone: nothing uses the image or the stack any more.
                if let Some((_, stack)) = self.memory.take() {
                    return_stack(stack);
                }
                return Ok(status);
            }
            let Some(pidfd) = &self.pidfd else {
                return self.wait_blocking();
            };
            if let Some(done) = &self.done {
                let program_ended = tokio::select! {
                    guard = pidfd.readable() => {
                        guard?.clear_ready();
                        false
                    }
                    guard = done.readable() => {
                        guard?.clear_ready();
                        true
                    }
                };
                if program_ended {
                    return self.program_ended().await;
                }
                continue;
            }
            let mut guard = pidfd.readable().await?;
            guard.clear_ready();
        }
    }

    /// The program in the child's pid namespace has ended: how, as the child recorded it. The
    /// child ends once the namespace is empty, normally at once, and is reaped then; one that
    /// does not end soon (a process of the namespace stuck in the kernel) is left, with its
    /// memory, and whatever is stuck is the tree's end to deal with.
    async fn program_ended(&mut self) -> io::Result<ExitStatus> {
        let raw = self.memory.as_ref().map_or(-1, |(image, _)| {
            image
                .program_status
                .load(std::sync::atomic::Ordering::Acquire)
        });
        self.done = None;
        if let Ok(Ok(status)) =
            tokio::time::timeout(std::time::Duration::from_secs(2), Box::pin(self.wait())).await
        {
            return Ok(status);
        }
        Ok(ExitStatus::from_raw(if raw >= 0 { raw } else { 127 << 8 }))
    }

    /// Wait for the child to exit and reap it, blocking this thread.
    pub fn wait_blocking(&mut self) -> io::Result<ExitStatus> {
        let mut status: libc::c_int = 0;
        loop {
            // SAFETY: waitpid on a child of this process, writing into a local.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r == self.pid {
                break;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
        let status = self.program_status(ExitStatus::from_raw(status));
        if let Some((_, stack)) = self.memory.take() {
            return_stack(stack);
        }
        Ok(status)
    }

    /// How the program ended, once the child is reaped: in a pid namespace the child is the
    /// namespace's first process and the program its second, whose end the first recorded.
    fn program_status(&self, child: ExitStatus) -> ExitStatus {
        match &self.memory {
            Some((image, _)) => {
                let raw = image
                    .program_status
                    .load(std::sync::atomic::Ordering::Acquire);
                if raw >= 0 {
                    ExitStatus::from_raw(raw)
                } else {
                    child
                }
            }
            None => child,
        }
    }

    fn try_wait(&self) -> io::Result<Option<ExitStatus>> {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid on a child of this process, writing into a local.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        match r {
            0 => Ok(None),
            r if r == self.pid => Ok(Some(ExitStatus::from_raw(status))),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// After [`Launched::wait`]: the error that kept the child from starting its program, if
    /// one did.
    pub(crate) fn start_error(&self) -> Option<io::Error> {
        let mut code = [0u8; 4];
        match nix::unistd::read(&self.status, &mut code) {
            Ok(4) => Some(io::Error::from_raw_os_error(i32::from_ne_bytes(code))),
            _ => None,
        }
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        // Not known to be gone: the child may still run on this stack and read this image, so
        // they are never freed.
        if let Some(memory) = self.memory.take() {
            std::mem::forget(memory);
        }
    }
}

/// runner's pid, asked of the kernel once (it never forks itself).
fn own_pid() -> usize {
    static PID: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PID.get_or_init(|| std::process::id() as usize)
}

/// Whether `clone3` with `CLONE_INTO_CGROUP` was refused as such (an older kernel, a sandbox
/// that filters it): not asked again.
static NO_CLONE3: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Create the child as `libc::clone` in [`launch`] does, but directly in the cgroup whose folder
/// is open as `cgroup` (and in the namespaces `namespaces` asks for): its pid, or `None` when no
/// child was created.
///
/// # Safety
///
/// As for `libc::clone` with `child`: `stack` (`size` bytes, 16-byte aligned) and `image` stay
/// alive and unchanged until the child has called `execve` or exited; all signals blocked.
#[cfg(target_arch = "x86_64")]
unsafe fn clone3_into(
    cgroup: RawFd,
    stack: *mut u8,
    size: usize,
    image: *mut ChildImage,
    pidfd: &mut libc::c_int,
    namespaces: u64,
) -> Option<i32> {
    if NO_CLONE3.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    let mut args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_PIDFD) as u64
            | CLONE_INTO_CGROUP
            | CLONE_CLEAR_SIGHAND
            | namespaces,
        pidfd: std::ptr::from_mut(pidfd) as u64,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack as u64,
        stack_size: size as u64,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: cgroup as u64,
    };
    // SAFETY: as the caller promises.
    let ret = unsafe { clone3_call(&mut args, child, image.cast()) };
    if ret >= 0 {
        return Some(ret as i32);
    }
    if matches!(
        -ret as i32,
        libc::ENOSYS | libc::E2BIG | libc::EINVAL | libc::EPERM
    ) {
        NO_CLONE3.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    None
}

/// Elsewhere the child moves itself into its cgroups.
///
/// # Safety
///
/// Always safe to call: nothing is created.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn clone3_into(
    _cgroup: RawFd,
    _stack: *mut u8,
    _size: usize,
    _image: *mut ChildImage,
    _pidfd: &mut libc::c_int,
    _namespaces: u64,
) -> Option<i32> {
    None
}

/// The child, between `clone` and `execve`. Raw system calls only: see the module comment.
extern "C" fn child(arg: *mut c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildImage` that `launch` keeps alive and unchanged for the child.
    let image = unsafe { &*arg.cast::<ChildImage>() };
    let check = |r: isize| {
        if r < 0 {
            fail(image.status, r)
        }
    };
    // SAFETY: raw system calls on the child's own signal table, descriptors and directory,
    // with pointers into `image` and this stack frame.
    unsafe {
        // Into the item's cgroups first: whatever this child becomes or starts is inside them.
        for &fd in &image.join[image.join_from..image.join_len] {
            check(sys(
                libc::SYS_write,
                [fd as usize, b"0".as_ptr() as usize, 1, 0],
            ));
        }
        // The kernel's `struct sigaction`: handler, flags, restorer, mask; only the handler is
        // read, and an all-zero one is the default disposition with no flags. Where `clone3`
        // reset the handled signals already, only the two runner ignores are left to reset
        // (62 questions fewer: a fifth of a short item's system calls); else each signal is
        // asked after, and reset when handled.
        let default = [0usize; 4];
        let ignored_by_runner = [libc::SIGPIPE as usize, libc::SIGXFSZ as usize];
        let reset = |sig: usize| {
            sys(
                libc::SYS_rt_sigaction,
                [sig, default.as_ptr() as usize, 0, 8],
            );
        };
        if image.handlers_cleared {
            ignored_by_runner.into_iter().for_each(reset);
        } else {
            for sig in 1..=64usize {
                if sig == libc::SIGKILL as usize || sig == libc::SIGSTOP as usize {
                    continue;
                }
                let mut old = [0usize; 4];
                let r = sys(
                    libc::SYS_rt_sigaction,
                    [sig, 0, old.as_mut_ptr() as usize, 8],
                );
                let handled = r == 0 && old[0] != libc::SIG_DFL && old[0] != libc::SIG_IGN;
                if handled || ignored_by_runner.contains(&sig) {
                    reset(sig);
                }
            }
        }
        check(sys(libc::SYS_setpgid, [0, 0, 0, 0]));
        // Killed if runner dies (its processes are then the next run's to end, by token), and
        // no start-up race: a parent already gone means runner died before this line.
        check(sys(
            libc::SYS_prctl,
            [
                libc::PR_SET_PDEATHSIG as usize,
                libc::SIGKILL as usize,
                0,
                0,
            ],
        ));
        let parent_gone = if image.confine.pidns {
            // Made in a pid namespace: its parent is outside it, asked through its pidfd,
            // which reads as ready once runner has ended (`poll`, not waiting).
            let mut pfd = libc::pollfd {
                fd: image.runner_pidfd,
                events: libc::POLLIN,
                revents: 0,
            };
            sys(
                libc::SYS_ppoll,
                [
                    std::ptr::from_mut(&mut pfd) as usize,
                    1,
                    ZERO_TIME.as_ptr() as usize,
                    0,
                ],
            ) != 0
        } else {
            sys(libc::SYS_getppid, [0, 0, 0, 0]) as usize != image.parent
        };
        if parent_gone {
            sys(libc::SYS_exit_group, [127, 0, 0, 0]);
        }
        for (target, &fd) in image.stdio.iter().enumerate() {
            if fd as usize == target {
                check(sys(libc::SYS_fcntl, [target, libc::F_SETFD as usize, 0, 0]));
            } else {
                check(sys(libc::SYS_dup3, [fd as usize, target, 0, 0]));
            }
        }
        if let Some(fd) = image.inherit {
            check(sys(
                libc::SYS_fcntl,
                [fd as usize, libc::F_SETFD as usize, 0, 0],
            ));
        }
        check(sys(libc::SYS_chdir, [image.cwd.as_ptr() as usize, 0, 0, 0]));
        // What `execve` would close goes now: a copy of runner's descriptors keeps the locks
        // on them (a host-wide slot runner has just given back) for as long as the child
        // has them, and confining itself takes a few milliseconds.
        let keep = [
            image.status,
            image.inherit.unwrap_or(-1),
            image.confine.ruleset,
            image.confine.record,
            image.done,
        ];
        close_all_but(keep);
        if image.confine.pidns {
            init(image);
        }
        check(confine::confine_self(&image.confine));
        run_program(image)
    }
}

/// The child as its pid namespace's first process: namespaces and mounts made, it starts the
/// program as the namespace's second process (on the lower half of its stack, itself waiting
/// until that process has called `execve`: `CLONE_VFORK`), then reaps whatever the namespace
/// leaves it until the program's process ends, records how it ended for runner, and ends, and
/// the kernel ends whatever is left in the namespace with it. The program is not the
/// namespace's first process so that signals reach it as they would anywhere (a namespace's
/// first process gets none it has no handler for).
#[cfg(target_arch = "x86_64")]
fn init(image: &ChildImage) -> ! {
    let proxy = confine::prepare(&image.confine);
    if proxy < 0 && proxy != confine::NONE {
        fail(image.status, proxy);
    }
    image
        .proxy
        .store(proxy, std::sync::atomic::Ordering::Relaxed);
    let mut args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK) as u64,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: image.program_stack as u64,
        stack_size: (STACK_WORDS / 2 * 16) as u64,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: 0,
    };
    let arg = std::ptr::from_ref(image).cast_mut().cast::<c_void>();
    // SAFETY: the lower half of the stack is the program's process's alone (this one runs on
    // the upper half, and waits until that one has called `execve` or exited).
    let program = unsafe { clone3_call(&mut args, program, arg) };
    if program < 0 {
        fail(image.status, program);
    }
    // SAFETY: raw system calls on this process's own descriptors and a local.
    unsafe {
        // Nothing of the item's is this process's to keep open: only the pipe that tells
        // runner the program has ended.
        close_all_but_done(image.done);
        let mut status: i32 = 0;
        loop {
            let r = sys(
                libc::SYS_wait4,
                [
                    usize::MAX, // -1: any child
                    std::ptr::from_mut(&mut status) as usize,
                    libc::__WALL as usize,
                    0,
                ],
            );
            if r == program {
                break;
            }
            if r < 0 && r != -(libc::EINTR as isize) {
                status = 127 << 8;
                break;
            }
        }
        image
            .program_status
            .store(status, std::sync::atomic::Ordering::Release);
        sys(
            libc::SYS_write,
            [image.done as usize, b"x".as_ptr() as usize, 1, 0],
        );
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        };
        sys(libc::SYS_exit_group, [code as usize, 0, 0, 0]);
    }
    #[expect(
        clippy::empty_loop,
        reason = "`exit_group` does not return; nothing else may run in the child"
    )]
    loop {}
}

/// Elsewhere no child is made in a pid namespace (`launch` asks for none).
#[cfg(not(target_arch = "x86_64"))]
fn init(image: &ChildImage) -> ! {
    fail(image.status, -(libc::ENOSYS as isize))
}

/// The program's own process in a pid namespace: the rest of its confinement, then its
/// program.
#[cfg(target_arch = "x86_64")]
extern "C" fn program(arg: *mut c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildImage` that `launch` keeps alive and unchanged for the child.
    let image = unsafe { &*arg.cast::<ChildImage>() };
    let proxy = image.proxy.load(std::sync::atomic::Ordering::Relaxed);
    let r = confine::restrict_and_hand_over(&image.confine, proxy);
    if r < 0 {
        fail(image.status, r);
    }
    run_program(image)
}
/// Unblock signals and run the program (`execve`); a failure is reported and ends the process.
fn run_program(image: &ChildImage) -> ! {
    // SAFETY: raw system calls with pointers into `image` and this stack frame.
    unsafe {
        let empty = 0u64;
        let check = |r: isize| {
            if r < 0 {
                fail(image.status, r)
            }
        };
        check(sys(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as usize,
                std::ptr::from_ref(&empty) as usize,
                0,
                8,
            ],
        ));
        let r = sys(
            libc::SYS_execve,
            [
                image.program.as_ptr() as usize,
                image.argv_ptrs.as_ptr() as usize,
                image.env_ptrs.as_ptr() as usize,
                0,
            ],
        );
        fail(image.status, r)
    }
}

/// Close every descriptor from 3 up but those of `keep` (-1: none), with `close_range` (Linux
/// 5.9; where the kernel lacks it, `execve` closes them as before). Raw system calls only.
fn close_all_but(mut keep: [RawFd; 5]) {
    keep.sort_unstable();
    let mut from: usize = 3;
    for fd in keep {
        if fd < 3 {
            continue;
        }
        let fd = fd as usize;
        if fd > from {
            // SAFETY: closing descriptors of the child's own table.
            unsafe { sys(libc::SYS_close_range, [from, fd - 1, 0, 0]) };
        }
        from = from.max(fd + 1);
    }
    // SAFETY: as above.
    unsafe { sys(libc::SYS_close_range, [from, u32::MAX as usize, 0, 0]) };
}

/// Close every descriptor but `done`. Raw system calls only.
fn close_all_but_done(done: RawFd) {
    // SAFETY: closing descriptors of the child's own table.
    unsafe {
        if done > 0 {
            sys(libc::SYS_close_range, [0, done as usize - 1, 0, 0]);
        }
        sys(
            libc::SYS_close_range,
            [(done + 1).max(0) as usize, u32::MAX as usize, 0, 0],
        );
    }
}

/// Report the error of a failed step (a negative system call result) and end the child.
fn fail(status: RawFd, r: isize) -> ! {
    let code = (-r as i32).to_ne_bytes();
    // SAFETY: raw write and exit of the child itself.
    unsafe {
        sys(
            libc::SYS_write,
            [status as usize, code.as_ptr() as usize, 4, 0],
        );
        sys(libc::SYS_exit_group, [127, 0, 0, 0]);
    }
    #[expect(
        clippy::empty_loop,
        reason = "`exit_group` does not return; nothing else may run in the child"
    )]
    loop {}
}

mod clone3;
mod confine;
mod hooks;
mod sys;
pub(crate) use confine::{
    Confine, confine_before_exec, landlock_abi_version, not_dumpable, probe_namespaces,
    probe_pid_namespace,
};
pub(crate) use hooks::ignore_file_size_signal;
pub(super) use hooks::{die_with_parent, join_before_exec, set_cloexec};
use sys::sys;

#[cfg(test)]
mod tests;
