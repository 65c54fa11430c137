//! What a confined item tried to write outside its sandbox, recorded as it tried.
//!
//! Landlock denies such a write with `EACCES` and tells only the kernel's audit log (root's,
//! and only where auditing is on): the item's own error message is all anyone would see, and
//! a hostile agent prints none. So runner watches the attempts itself, with a seccomp filter
//! the child installs after its Landlock ruleset (`launch/confine.rs`): every system call that
//! can create, change or remove a file by its name (`open` and `openat` only when asked for
//! writing, so reads cost nothing; and those that change a file's mode, owner, times or
//! extended attributes) waits for runner, which reads the path from the process,
//! resolves it as the process would (its folder, the folder descriptor it named) and lets the
//! call go on unchanged (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`): the kernel and Landlock decide,
//! as they would have. A path outside everything the item may write is recorded as a denied
//! access: the report and the event stream name the process, what it tried and where.
//!
//! The record is a finding for the reviewer, never the protection (that is Landlock's; the
//! path runner resolves can differ from the kernel's when the process changes it meanwhile,
//! which is why nothing is decided here). What it does not see: writes through a descriptor
//! opened earlier (there was nothing to deny), paths under `/proc` (resolved through the
//! process's own view), and `io_uring`, which the filter refuses outright (`EPERM`, as
//! container runtimes do: its requests would bypass the record; programs fall back to plain
//! calls). Calls of the 32-bit ABIs, which the filter cannot read alike, are refused
//! (`ENOSYS`).
//!
//! Hand-written against `linux/seccomp.h` and `linux/filter.h` (through `libc`): the filter is
//! a dozen instructions, and no crate both builds one and hands its listener across a fork.

pub use crate::vocab::DeniedAccess;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What one process tree was denied: the first [`KEPT`] distinct accesses, and how many more.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Denied {
    pub accesses: Vec<DeniedAccess>,
    pub more: u64,
}

/// Distinct denied accesses kept per process tree; the rest are counted.
pub const KEPT: usize = 50;

/// Whether this kernel lets a filter hand its calls to runner (`SECCOMP_GET_NOTIF_SIZES`,
/// Linux 5.0), with structures no larger than runner knows.
pub fn supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        if filter().is_empty() {
            return false;
        }
        let mut sizes = libc::seccomp_notif_sizes {
            seccomp_notif: 0,
            seccomp_notif_resp: 0,
            seccomp_data: 0,
        };
        // SAFETY: the kernel writes the three sizes into `sizes`.
        let r = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_GET_NOTIF_SIZES,
                0,
                &mut sizes as *mut libc::seccomp_notif_sizes,
            )
        };
        r == 0
            && usize::from(sizes.seccomp_notif) <= std::mem::size_of::<libc::seccomp_notif>()
            && usize::from(sizes.seccomp_notif_resp)
                <= std::mem::size_of::<libc::seccomp_notif_resp>()
    })
}

/// `AUDIT_ARCH_*` of this build's architecture (`linux/audit.h`).
#[cfg(target_arch = "x86_64")]
const ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const ARCH: u32 = 0xC000_00B7;

/// Calls that create, change or remove what they name, whatever their flags.
#[cfg(target_arch = "x86_64")]
const ALWAYS: &[libc::c_long] = &[
    libc::SYS_creat,
    libc::SYS_openat2,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_mknod,
    libc::SYS_mknodat,
    libc::SYS_rmdir,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_truncate,
    libc::SYS_chmod,
    libc::SYS_fchmodat,
    libc::SYS_fchmodat2,
    libc::SYS_chown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
    libc::SYS_utime,
    libc::SYS_utimes,
    libc::SYS_futimesat,
    libc::SYS_utimensat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
];
#[cfg(target_arch = "aarch64")]
const ALWAYS: &[libc::c_long] = &[
    libc::SYS_openat2,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_unlinkat,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_truncate,
    libc::SYS_fchmodat,
    452, // fchmodat2
    libc::SYS_fchownat,
    libc::SYS_utimensat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
];

/// `open`'s flags that ask for writing.
const WRITE_FLAGS: u32 = (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u32;

/// The filter, built once: the listed calls wait for runner, `io_uring_setup` fails with
/// `EPERM`, another ABI's calls with `ENOSYS`, everything else runs untouched. Empty on an
/// architecture runner has no list for.
pub(crate) fn filter() -> &'static [libc::sock_filter] {
    static FILTER: std::sync::OnceLock<Vec<libc::sock_filter>> = std::sync::OnceLock::new();
    FILTER.get_or_init(build_filter)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn build_filter() -> Vec<libc::sock_filter> {
    use libc::{
        BPF_ABS, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_JSET, BPF_K, BPF_LD, BPF_RET, BPF_W,
        SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO, SECCOMP_RET_USER_NOTIF,
    };
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |code: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    // `struct seccomp_data`: nr (0), arch (4), instruction pointer (8), args (16 + 8 i), the
    // low half of each argument first on these little-endian machines.
    let arg_low = |i: u32| 16 + 8 * i;
    let load = |offset: u32| stmt(BPF_LD | BPF_W | BPF_ABS, offset);
    let ret = |k: u32| stmt(BPF_RET | BPF_K, k);
    let allow = ret(SECCOMP_RET_ALLOW);
    let notify = ret(SECCOMP_RET_USER_NOTIF);

    // The tail, whose positions the jumps count to: flag checks, then the verdicts.
    //   open:    load flags (arg 1); writing? notify : allow
    //   openat:  load flags (arg 2); writing? notify : allow
    //   allow, notify, EPERM, ENOSYS
    let mut tail: Vec<libc::sock_filter> = Vec::new();
    let open_at = tail.len();
    #[cfg(target_arch = "x86_64")]
    {
        tail.push(load(arg_low(1)));
        // jt: to notify (3 ahead: past this, openat's two), jf: to allow (2 ahead).
        tail.push(jump(BPF_JMP | BPF_JSET | BPF_K, WRITE_FLAGS, 3, 2));
    }
    let openat_at = tail.len();
    tail.push(load(arg_low(2)));
    tail.push(jump(BPF_JMP | BPF_JSET | BPF_K, WRITE_FLAGS, 1, 0));
    let allow_at = tail.len();
    tail.push(allow);
    let notify_at = tail.len();
    tail.push(notify);
    let eperm_at = tail.len();
    tail.push(ret(SECCOMP_RET_ERRNO | libc::EPERM as u32));
    let enosys_at = tail.len();
    tail.push(ret(SECCOMP_RET_ERRNO | libc::ENOSYS as u32));

    // The head: the architecture, the ABI, then one comparison per call.
    let mut matches: Vec<(libc::c_long, usize)> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    matches.push((libc::SYS_open, open_at));
    matches.push((libc::SYS_openat, openat_at));
    matches.push((libc::SYS_io_uring_setup, eperm_at));
    matches.extend(ALWAYS.iter().map(|&nr| (nr, notify_at)));
    let _ = open_at;

    let mut head: Vec<libc::sock_filter> = Vec::new();
    // Fixed instructions before the comparisons: load arch, compare, load nr, (x32 check).
    let x32 = cfg!(target_arch = "x86_64");
    let fixed = if x32 { 4 } else { 3 };
    let head_len = fixed + matches.len() + 1; // + the jump to allow when nothing matched
    // Distance from the instruction at `from` (jumps count from the next one) to tail index.
    let to_tail = |from: usize, target: usize| -> u8 {
        u8::try_from(head_len - from - 1 + target).unwrap_or(u8::MAX)
    };
    head.push(load(4));
    // Another architecture's calls (a 32-bit program): refused.
    head.push(jump(
        BPF_JMP | BPF_JEQ | BPF_K,
        ARCH,
        0,
        to_tail(1, enosys_at),
    ));
    head.push(load(0));
    if x32 {
        // x32 calls carry this bit: refused.
        head.push(jump(
            BPF_JMP | BPF_JGE | BPF_K,
            0x4000_0000,
            to_tail(3, enosys_at),
            0,
        ));
    }
    for (nr, target) in matches {
        let at = head.len();
        head.push(jump(
            BPF_JMP | BPF_JEQ | BPF_K,
            nr as u32,
            to_tail(at, target),
            0,
        ));
    }
    let at = head.len();
    // `ja` to allow.
    head.push(libc::sock_filter {
        code: (BPF_JMP | libc::BPF_JA) as u16,
        jt: 0,
        jf: 0,
        k: u32::from(to_tail(at, allow_at)),
    });
    debug_assert_eq!(head.len(), head_len);
    head.extend(tail);
    head
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn build_filter() -> Vec<libc::sock_filter> {
    Vec::new()
}

/// A pair of connected sockets: runner keeps the first, the child gets the second and sends
/// its filter's listener through it.
pub(crate) fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: socketpair writes two descriptors into `fds`.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// What a child handed over (`launch/confine.rs`): its recording filter's listener and its
/// proxy's listener, each where it made one; nothing once it closed its end first. Blocks
/// until the child has sent them or closed the socket (at `execve` at the latest).
pub(crate) fn receive(socket: &OwnedFd) -> (Option<OwnedFd>, Option<OwnedFd>) {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = [0u64; 6];
    // SAFETY: a zeroed `msghdr` is a valid empty one; its pointers are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    loop {
        // SAFETY: recvmsg into the buffers `msg` points to, which live through the call.
        let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return (None, None);
        }
        break;
    }
    let mut fds: Vec<OwnedFd> = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `control`; each descriptor
    // it passed is new to this process and owned by nothing else.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for k in 0..len / 4 {
                    let fd: RawFd = std::ptr::read_unaligned(data.add(4 * k).cast());
                    if fd >= 0 {
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    let mut fds = fds.into_iter();
    let listener = if byte[0] & 1 != 0 { fds.next() } else { None };
    let proxy = if byte[0] & 2 != 0 { fds.next() } else { None };
    (listener, proxy)
}

/// Watch one process tree's attempts through its filter's `listener`: answer every call it
/// hands over until no process of the tree is left, recording those that name a path outside
/// `writable` (canonical paths, and the device files and folders every program may write), or
/// until `stop` is set (a process of the tree that cannot end, frozen or stuck in the kernel,
/// keeps the listener busy for ever). Blocks: run it on a thread of its own.
pub(crate) fn watch(
    listener: OwnedFd,
    writable: &[PathBuf],
    stop: &std::sync::atomic::AtomicBool,
) -> Denied {
    let mut denied = Denied::default();
    let mut seen = std::collections::HashSet::new();
    loop {
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        // SAFETY: poll on one descriptor this thread owns.
        let r = unsafe { libc::poll(&mut pfd, 1, 200) };
        if r < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        if r == 0 {
            continue;
        }
        if pfd.revents & libc::POLLIN == 0 {
            // No process of the tree is left (`POLLHUP`), or the listener failed.
            break;
        }
        // SAFETY: a kernel structure of plain integers, which the kernel wants zeroed.
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl writes one `seccomp_notif` into `notif`.
        let r = unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut notif as *mut libc::seccomp_notif,
            )
        };
        if r < 0 {
            // Its process died meanwhile (`ENOENT`), or a signal: the next one.
            continue;
        }
        let attempt = read_attempt(&notif);
        let valid = id_valid(&listener, notif.id);
        // Its name is read while the call waits for the answer: a process that ends right
        // after it (`sh -c 'echo > /x'`) would otherwise be gone, and named `?`.
        let program = attempt
            .as_ref()
            .filter(|a| valid && !a.paths.is_empty())
            .map(|_| program_name(notif.pid));
        answer(&listener, notif.id);
        let (Some(attempt), Some(program)) = (attempt.filter(|_| valid), program) else {
            continue;
        };
        for (access, kind, path) in attempt.paths {
            if !kind.writes(&path) {
                continue;
            }
            let Some(path) = outside(&path, kind.follows(access), writable) else {
                continue;
            };
            let path = path.to_string_lossy().into_owned();
            if !seen.insert((access, path.clone())) {
                continue;
            }
            if denied.accesses.len() < KEPT {
                denied.accesses.push(DeniedAccess {
                    access: access.to_string(),
                    path,
                    program: program.clone(),
                });
            } else {
                denied.more += 1;
            }
        }
    }
    denied
}

/// Let the call go on as the process made it.
fn answer(listener: &OwnedFd, id: u64) {
    let mut resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: 0,
        flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
    };
    // SAFETY: the ioctl reads one `seccomp_notif_resp`.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &mut resp as *mut libc::seccomp_notif_resp,
        );
    }
}

/// Whether the call `id` still waits: what was read of its process was read of that process,
/// not of one that took its pid.
fn id_valid(listener: &OwnedFd, id: u64) -> bool {
    let mut id = id;
    // SAFETY: the ioctl reads one `u64`.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &mut id as *mut u64,
        ) == 0
    }
}

/// One call's paths, each with what it does to it.
struct Attempt {
    paths: Vec<(&'static str, Kind, PathBuf)>,
}

/// What a call needs of the path it names to be refused for where it is, rather than for what
/// is (or is not) there: a folder made where one exists fails with `EEXIST` wherever it is.
#[derive(Clone, Copy)]
enum Kind {
    /// Makes it: only where nothing is.
    Creates,
    /// Changes or removes it: only where it is.
    Changes,
    /// Makes or replaces it.
    Replaces,
    /// `open` with these flags: writes what is there, or creates it with `O_CREAT`.
    Opens(u64),
}

impl Kind {
    /// Whether the call acts on what a link at its path points to (an open, a change of mode,
    /// times, a truncation), or on the link itself (a removal, a rename, a new name).
    fn follows(self, access: &str) -> bool {
        matches!(self, Kind::Opens(_)) || access == "change metadata" || access == "truncate"
    }

    /// Whether the call, naming `path`, would write at all.
    fn writes(self, path: &Path) -> bool {
        let exists = std::fs::symlink_metadata(path).is_ok();
        match self {
            Kind::Creates => !exists,
            Kind::Changes => exists,
            Kind::Replaces => true,
            Kind::Opens(flags) => {
                let create = flags & libc::O_CREAT as u64 != 0;
                let exclusive = flags & libc::O_EXCL as u64 != 0;
                let write = flags & (libc::O_WRONLY | libc::O_RDWR | libc::O_TRUNC) as u64 != 0;
                if exists {
                    write && !(create && exclusive)
                } else {
                    create
                }
            }
        }
    }
}

/// What a call names: what it does, what it needs, its folder descriptor argument (none: the
/// process's folder), its path argument.
type Named = (&'static str, Kind, Option<u64>, u64);

/// What the call in `notif` tries, its paths resolved against its process's folders.
fn read_attempt(notif: &libc::seccomp_notif) -> Option<Attempt> {
    use Kind::{Changes, Creates, Opens, Replaces};
    let pid = notif.pid as i32;
    let a = notif.data.args;
    let nr = libc::c_long::from(notif.data.nr);
    let named: Vec<Named> = match nr {
        n if n == libc::SYS_openat2 => {
            // `struct open_how` starts with its flags.
            let flags = read_u64(pid, a[2])?;
            vec![("write", Opens(flags), Some(a[0]), a[1])]
        }
        n if n == libc::SYS_openat => vec![("write", Opens(a[2]), Some(a[0]), a[1])],
        n if n == libc::SYS_mkdirat => vec![("create folder", Creates, Some(a[0]), a[1])],
        n if n == libc::SYS_mknodat => vec![("create node", Creates, Some(a[0]), a[1])],
        n if n == libc::SYS_unlinkat => vec![("remove", Changes, Some(a[0]), a[1])],
        n if n == libc::SYS_renameat || n == libc::SYS_renameat2 => vec![
            ("rename", Changes, Some(a[0]), a[1]),
            ("rename", Replaces, Some(a[2]), a[3]),
        ],
        n if n == libc::SYS_linkat => vec![("link", Creates, Some(a[2]), a[3])],
        n if n == libc::SYS_symlinkat => vec![("symlink", Creates, Some(a[1]), a[2])],
        n if n == libc::SYS_truncate => vec![("truncate", Changes, None, a[0])],
        n if n == libc::SYS_fchmodat || n == 452 || n == libc::SYS_fchownat => {
            vec![("change metadata", Changes, Some(a[0]), a[1])]
        }
        // A null path changes the descriptor's own file (`futimens`): nothing named.
        n if n == libc::SYS_utimensat && a[1] == 0 => return None,
        n if n == libc::SYS_utimensat => vec![("change metadata", Changes, Some(a[0]), a[1])],
        n if n == libc::SYS_setxattr
            || n == libc::SYS_lsetxattr
            || n == libc::SYS_removexattr
            || n == libc::SYS_lremovexattr =>
        {
            vec![("change metadata", Changes, None, a[0])]
        }
        _ => legacy(nr, &a)?,
    };
    let mut paths = Vec::with_capacity(named.len());
    for (access, kind, dirfd, ptr) in named {
        let name = read_path(pid, ptr)?;
        if name.is_empty() {
            continue;
        }
        let name = PathBuf::from(OsStr::from_bytes(&name));
        let full = if name.is_absolute() {
            name
        } else {
            let base = match dirfd.map(|d| d as i32) {
                None | Some(libc::AT_FDCWD) => format!("/proc/{pid}/cwd"),
                Some(fd) => format!("/proc/{pid}/fd/{fd}"),
            };
            std::fs::read_link(base).ok()?.join(name)
        };
        paths.push((access, kind, full));
    }
    Some(Attempt { paths })
}

/// The calls only x86-64 has, which name paths relative to the process's folder.
#[cfg(target_arch = "x86_64")]
fn legacy(nr: libc::c_long, a: &[u64; 6]) -> Option<Vec<Named>> {
    use Kind::{Changes, Creates, Opens, Replaces};
    let creat = (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64;
    Some(match nr {
        n if n == libc::SYS_open => vec![("write", Opens(a[1]), None, a[0])],
        n if n == libc::SYS_creat => vec![("write", Opens(creat), None, a[0])],
        n if n == libc::SYS_mkdir => vec![("create folder", Creates, None, a[0])],
        n if n == libc::SYS_mknod => vec![("create node", Creates, None, a[0])],
        n if n == libc::SYS_rmdir || n == libc::SYS_unlink => {
            vec![("remove", Changes, None, a[0])]
        }
        n if n == libc::SYS_rename => vec![
            ("rename", Changes, None, a[0]),
            ("rename", Replaces, None, a[1]),
        ],
        n if n == libc::SYS_link => vec![("link", Creates, None, a[1])],
        n if n == libc::SYS_symlink => vec![("symlink", Creates, None, a[1])],
        n if n == libc::SYS_chmod
            || n == libc::SYS_chown
            || n == libc::SYS_lchown
            || n == libc::SYS_utime
            || n == libc::SYS_utimes =>
        {
            vec![("change metadata", Changes, None, a[0])]
        }
        n if n == libc::SYS_futimesat => vec![("change metadata", Changes, Some(a[0]), a[1])],
        _ => return None,
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn legacy(_: libc::c_long, _: &[u64; 6]) -> Option<Vec<Named>> {
    None
}

/// Read `buf.len()` bytes of process `pid`'s memory at `addr`; how many could be read.
fn read_memory(pid: i32, addr: u64, buf: &mut [u8]) -> usize {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    usize::try_from(n).unwrap_or(0)
}

fn read_u64(pid: i32, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    (read_memory(pid, addr, &mut b) == 8).then(|| u64::from_ne_bytes(b))
}

/// The NUL-terminated path at `addr` in `pid`'s memory (at most `PATH_MAX` bytes), read a page
/// at a time so that a path ending just before an unmapped page is read whole.
fn read_path(pid: i32, addr: u64) -> Option<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < libc::PATH_MAX as usize {
        let chunk = (PAGE - at % PAGE) as usize;
        let mut buf = vec![0u8; chunk];
        let n = read_memory(pid, at, &mut buf);
        if n == 0 {
            return None;
        }
        if let Some(end) = buf[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    None
}

/// `path`'s canonical form when it is outside every folder the item may write: judged on
/// that form (the existing part resolved, links followed; the last one only when the call
/// `follows` it) in runner's view, which is the item's but for what its mount namespace hides
/// (never writable). Paths under `/proc` and the standard streams' names are not judged: they
/// resolve through the process's own view.
fn outside(path: &Path, follows: bool, writable: &[PathBuf]) -> Option<PathBuf> {
    let lexical = path.to_string_lossy();
    if lexical.starts_with("/proc/")
        || lexical.starts_with("/dev/fd/")
        || lexical.starts_with("/dev/std")
    {
        return None;
    }
    let whole = if follows {
        std::fs::canonicalize(path).ok()
    } else {
        None
    };
    let canonical = match whole {
        Some(p) => p,
        None => {
            let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
                return None;
            };
            // The parent must exist for the call to reach a decision at all.
            std::fs::canonicalize(parent).ok()?.join(name)
        }
    };
    if canonical.starts_with("/proc") {
        return None;
    }
    (!writable.iter().any(|w| canonical.starts_with(w))).then_some(canonical)
}

/// The name the kernel keeps for process `pid` (`comm`), or `?` once it is gone.
fn program_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every jump of the filter lands inside it, on an instruction after it, and the filter
    /// ends in verdicts: the kernel would refuse it otherwise, and the child fail to start.
    #[test]
    fn every_jump_of_the_filter_lands_inside_it() {
        let f = filter();
        assert!(!f.is_empty());
        for (i, ins) in f.iter().enumerate() {
            let class = u32::from(ins.code) & 0x07;
            if class == libc::BPF_JMP {
                let op = u32::from(ins.code) & 0xf0;
                let targets: Vec<usize> = if op == libc::BPF_JA {
                    vec![i + 1 + ins.k as usize]
                } else {
                    vec![i + 1 + usize::from(ins.jt), i + 1 + usize::from(ins.jf)]
                };
                for t in targets {
                    assert!(t < f.len(), "instruction {i} jumps to {t} of {}", f.len());
                    assert!(ins.jt < u8::MAX && ins.jf < u8::MAX);
                }
            }
        }
        let last = f.last().unwrap();
        assert_eq!(u32::from(last.code), libc::BPF_RET | libc::BPF_K);
    }
}
