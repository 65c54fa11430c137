//! `clone3` as the child and a pid namespace's first process use it, and what a child made in
//! a pid namespace asks of runner: raw system calls (see the module comment of `launch.rs`).

use std::ffi::c_void;
use std::os::fd::RawFd;

/// The kernel's `struct clone_args`, as far as its `cgroup` field (`CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
pub(super) struct CloneArgs {
    pub(super) flags: u64,
    pub(super) pidfd: u64,
    pub(super) child_tid: u64,
    pub(super) parent_tid: u64,
    pub(super) exit_signal: u64,
    pub(super) stack: u64,
    pub(super) stack_size: u64,
    pub(super) tls: u64,
    pub(super) set_tid: u64,
    pub(super) set_tid_size: u64,
    pub(super) cgroup: u64,
}

pub(super) const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// The kernel resets every signal with a handler to its default disposition in the new process
/// (Linux 5.5; ignored signals stay ignored).
pub(super) const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;

/// `clone3(args)`, the new process running `f(arg)` on the stack `args` gives and ending with
/// its value: the pid, or the negative error.
///
/// # Safety
///
/// `args` describes a stack that stays alive and unused by anything else until the new
/// process has called `execve` or exited; `f` makes raw system calls only; all signals blocked.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn clone3_call(
    args: &mut CloneArgs,
    f: extern "C" fn(*mut c_void) -> libc::c_int,
    arg: *mut c_void,
) -> isize {
    let ret: isize;
    // SAFETY: the caller keeps the stack for the new process. It starts on that empty stack at
    // the instruction after `syscall` with the registers of this one (`rax` 0): it calls `f`
    // with `arg` and never comes back (`f` ends in `execve` or `exit_group`; should it return,
    // its value is the exit status). This process goes on at the label with the pid or the
    // error; the kernel keeps every register but `rax`, `rcx` and `r11`.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call r13",
            "mov edi, eax",
            "mov eax, 231",
            "syscall",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 as isize => ret,
            in("rdi") std::ptr::from_mut(args),
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") arg,
            in("r13") f,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// A `struct timespec` of zero: a `ppoll` that does not wait.
pub(super) static ZERO_TIME: [i64; 2] = [0, 0];

/// A pidfd of runner itself, opened once and kept (-1 where the kernel gives none): a child
/// made in a pid namespace checks through it that runner still lives.
pub(super) fn runner_pidfd() -> RawFd {
    static PIDFD: std::sync::OnceLock<RawFd> = std::sync::OnceLock::new();
    *PIDFD.get_or_init(|| {
        // SAFETY: pidfd_open on this very process; the descriptor is kept for its lifetime.
        unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) as RawFd }
    })
}
