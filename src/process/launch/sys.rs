//! One raw system call, as the child between `clone` and `execve` makes them (see the module
//! comment of `launch.rs`).

/// A raw system call: no libc wrapper, so nothing is written to runner's `errno`.
///
/// # Safety
///
/// `n` must be a system call of this architecture and `a` its arguments as the kernel expects
/// them: every pointer among them valid for what that call reads or writes. Made by the child
/// between `clone` and `execve`, it must touch no memory of runner's but the [`ChildImage`].
pub(super) unsafe fn sys(n: libc::c_long, a: [usize; 4]) -> isize {
    // SAFETY: as the caller promises; the fifth argument is zero (calls such as `prctl`
    // check it).
    unsafe { sys5(n, [a[0], a[1], a[2], a[3], 0]) }
}

/// A raw system call with five arguments (the sixth zero).
///
/// # Safety
///
/// As for [`sys`].
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn sys5(n: libc::c_long, a: [usize; 5]) -> isize {
    let ret: isize;
    // SAFETY: the caller passes a valid system call and arguments.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            // The sixth argument is zero: calls such as `prctl` check it.
            in("r9") 0usize,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// As on x86-64.
///
/// # Safety
///
/// As for the x86-64 `sys5`: a valid system call with valid arguments.
#[cfg(target_arch = "aarch64")]
pub(super) unsafe fn sys5(n: libc::c_long, a: [usize; 5]) -> isize {
    let ret: isize;
    // SAFETY: the caller passes a valid system call and arguments.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a[0] as isize => ret,
            in("x1") a[1],
            in("x2") a[2],
            in("x3") a[3],
            in("x4") a[4],
            in("x5") 0usize,
            options(nostack),
        );
    }
    ret
}

/// No raw system calls here: `launch` reports itself unsupported before any is made.
///
/// # Safety
///
/// Always safe to call; `unsafe` only to match the other architectures.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(super) unsafe fn sys5(_n: libc::c_long, _a: [usize; 5]) -> isize {
    -(libc::ENOSYS as isize)
}
