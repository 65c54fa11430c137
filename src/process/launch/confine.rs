//! A child confining itself between `clone` and `execve` (see `sandbox.rs` for the rules and
//! their reasons): its own user and network namespaces, then the Landlock ruleset. Raw system
//! calls only, as everything the child runs (see the module comment of `launch.rs`).

use super::sys::{sys, sys5};
use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

/// What a child does to confine itself, laid out before it starts.
pub(crate) struct Confine {
    /// The Landlock ruleset to restrict itself with (-1: none).
    pub(super) ruleset: RawFd,
    /// A user namespace of its own (mapping the user to itself): outside it, the item has no
    /// capability, so it may not read runner's or another item's memory or environment.
    pub(super) userns: bool,
    /// A network namespace of its own, with loopback only.
    pub(super) netns: bool,
    /// A pid namespace of its own, with its own `/proc`: it sees no process but its own. The
    /// child is created in it (with its user namespace: `launch.rs`), as its init, and starts
    /// the program as its second process.
    pub(super) pidns: bool,
    /// `<uid> <uid> 1` and `<gid> <gid> 1`: the user namespace maps the user to itself.
    uid_map: CString,
    gid_map: CString,
    /// Files covered by `/dev/null`, folders by an empty read-only tmpfs, in a mount namespace
    /// of its own (with a user namespace): there for it, but empty.
    hide: Vec<CString>,
    hide_dirs: Vec<CString>,
    /// Folders covered whole, what it may see of them bound back (see `sandbox::Cover`).
    covers: Vec<CoverC>,
    /// Made read-only in its mount namespace: everything but these (with a user namespace).
    /// Landlock keeps data from being written elsewhere, but not a file's metadata (its mode,
    /// owner, times, extended attributes): a read-only mount does.
    read_only: bool,
    keep_writable: Vec<CString>,
    /// Its folder, entered again once the mounts are made (the one it was in is on the mount
    /// now read-only).
    cwd: Option<CString>,
    /// A proxy listener in its network namespace, handed to runner (`egress.rs`).
    proxy: bool,
    /// The recording filter, its listener handed to runner (`denials.rs`).
    watch: bool,
    /// Where the child sends the listener of the seccomp filter through which runner records
    /// what it tries to write (`denials.rs`); -1: not recorded.
    pub(super) record: RawFd,
}

impl Confine {
    pub(crate) fn none() -> Confine {
        Confine::new(-1, false, false)
    }

    pub(crate) fn new(ruleset: RawFd, userns: bool, netns: bool) -> Confine {
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let map = |id: u32| CString::new(format!("{id} {id} 1\n")).unwrap_or_default();
        Confine {
            ruleset,
            userns,
            netns,
            pidns: false,
            uid_map: map(uid),
            gid_map: map(gid),
            hide: Vec::new(),
            hide_dirs: Vec::new(),
            covers: Vec::new(),
            read_only: false,
            keep_writable: Vec::new(),
            cwd: None,
            proxy: false,
            watch: false,
            record: -1,
        }
    }

    /// Listen for the item's proxy on loopback in its network namespace, and hand the
    /// listener to runner with the recorder's (through the socket of [`Confine::recording`]).
    pub(crate) fn proxying(mut self, proxy: bool) -> Confine {
        self.proxy = proxy;
        self
    }

    /// Make every mount read-only but `writable` (beneath which the item may write), then enter
    /// `cwd` again.
    pub(crate) fn read_only_but(
        mut self,
        writable: &[std::path::PathBuf],
        cwd: &std::path::Path,
    ) -> Confine {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &std::path::Path| CString::new(p.as_os_str().as_bytes()).ok();
        self.read_only = true;
        self.keep_writable = writable.iter().filter_map(|p| c(p)).collect();
        self.cwd = c(cwd);
        self
    }

    /// Hand what runner serves or watches for the child (the recording filter's listener,
    /// made after the Landlock ruleset, which it needs: the filter asks for `no_new_privs`; the
    /// proxy's) to runner through `socket`.
    pub(crate) fn recording(mut self, socket: RawFd, watch: bool) -> Confine {
        self.record = socket;
        self.watch = watch && socket >= 0;
        self
    }

    /// Whether it covers anything.
    fn hides(&self) -> bool {
        !self.hide.is_empty() || !self.hide_dirs.is_empty() || !self.covers.is_empty()
    }

    /// Whether it needs a mount namespace of its own.
    fn mounts(&self) -> bool {
        self.hides() || self.read_only || self.pidns
    }

    /// In a pid namespace of its own (with a user namespace only).
    pub(crate) fn in_pid_namespace(mut self, pidns: bool) -> Confine {
        self.pidns = pidns && self.userns;
        self
    }

    /// Cover the files `paths` with `/dev/null` and the folders `dirs` with an empty tmpfs
    /// (those that exist when the child starts), and the folders of `covers` whole, with what
    /// it may see of them bound back.
    pub(crate) fn hiding(
        mut self,
        paths: &[std::path::PathBuf],
        dirs: &[std::path::PathBuf],
        covers: &[crate::process::sandbox::Cover],
    ) -> Confine {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &std::path::PathBuf| CString::new(p.as_os_str().as_bytes()).ok();
        self.hide = paths.iter().filter_map(c).collect();
        self.hide_dirs = dirs.iter().filter_map(c).collect();
        self.covers = covers.iter().filter_map(CoverC::new).collect();
        self
    }
}

/// The child confines itself: its own namespaces, what it may not read covered, loopback up
/// (and the proxy's listener there), the Landlock ruleset, then the recording filter; what
/// runner serves or watches for it is handed over last. Raw system calls only: it runs between
/// `clone` and `execve`, and in a forked child. 0, or the first negative result.
pub(super) fn confine_self(c: &Confine) -> isize {
    let proxy = prepare(c);
    if proxy < 0 && proxy != NONE {
        return proxy;
    }
    restrict_and_hand_over(c, proxy)
}

/// The part of [`confine_self`] that makes namespaces and mounts (done by a pid namespace's
/// init, before it starts the program): the proxy's listener, or [`NONE`].
pub(super) fn prepare(c: &Confine) -> isize {
    let steps: [&dyn Fn(&Confine) -> isize; 6] =
        [&namespaces, &read_only, &hide, &enter, &own_proc, &loopback];
    for step in steps {
        let r = step(c);
        if r < 0 {
            return r;
        }
    }
    proxy_listener(c)
}

/// The part of [`confine_self`] the program's own process does last: the Landlock ruleset,
/// the recording filter, and what runner serves or watches handed over.
pub(super) fn restrict_and_hand_over(c: &Confine, proxy: isize) -> isize {
    let r = restrict(c);
    if r < 0 {
        return r;
    }
    let listener = record(c);
    if listener < 0 && listener != NONE {
        return listener;
    }
    hand_over(c, listener, proxy)
}

/// In a mount namespace of its own: nothing mounted in it reaches the namespace it came from
/// (every mount a slave of its peer there, recursively).
fn private_mounts() -> isize {
    // SAFETY: a raw system call on this process's own mount namespace, with a static string.
    unsafe {
        sys(
            libc::SYS_mount,
            [
                0,
                c"/".as_ptr() as usize,
                0,
                (libc::MS_REC | libc::MS_SLAVE) as usize,
            ],
        )
    }
}

/// In a pid namespace of its own: a `/proc` of that namespace, so that it lists no process
/// but the item's (the one it came with lists every process of the machine).
fn own_proc(c: &Confine) -> isize {
    if !c.pidns {
        return 0;
    }
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: a raw system call reading static strings.
    unsafe {
        sys(
            libc::SYS_mount,
            [
                c"proc".as_ptr() as usize,
                c"/proc".as_ptr() as usize,
                c"proc".as_ptr() as usize,
                flags as usize,
            ],
        )
    }
}

/// What a step that may make a descriptor returns when it made none (below every error
/// number the kernel returns).
pub(super) const NONE: isize = -100_000;

/// Its own user namespace (mapping the user to itself), with its network and mount namespaces
/// where asked; or, without a user namespace, a network namespace made directly.
fn namespaces(c: &Confine) -> isize {
    // SAFETY: raw system calls with pointers into `c` and this stack frame.
    unsafe {
        if c.userns {
            let net = if c.netns { libc::CLONE_NEWNET } else { 0 };
            let mnt = if c.mounts() { libc::CLONE_NEWNS } else { 0 };
            // In a pid namespace, the user namespace came with it (`clone`).
            let user = if c.pidns { 0 } else { libc::CLONE_NEWUSER };
            let r = sys(libc::SYS_unshare, [(user | net | mnt) as usize, 0, 0, 0]);
            if r < 0 {
                return r;
            }
            if c.mounts() {
                let r = private_mounts();
                if r < 0 {
                    return r;
                }
            }
            for (file, text) in [
                (c"/proc/self/setgroups", c"deny".to_bytes()),
                (c"/proc/self/uid_map", c.uid_map.as_bytes()),
                (c"/proc/self/gid_map", c.gid_map.as_bytes()),
            ] {
                let fd = sys(
                    libc::SYS_openat,
                    [
                        libc::AT_FDCWD as usize,
                        file.as_ptr() as usize,
                        (libc::O_WRONLY | libc::O_CLOEXEC) as usize,
                        0,
                    ],
                );
                if fd < 0 {
                    return fd;
                }
                let w = sys(
                    libc::SYS_write,
                    [fd as usize, text.as_ptr() as usize, text.len(), 0],
                );
                sys(libc::SYS_close, [fd as usize, 0, 0, 0]);
                if w < 0 {
                    return w;
                }
            }
            0
        } else if c.netns {
            sys(libc::SYS_unshare, [libc::CLONE_NEWNET as usize, 0, 0, 0])
        } else {
            0
        }
    }
}

/// In its own mount namespace, nothing it does reaching the user's: every mount read-only but
/// binds of what it may write (made first, so that they stay writable; a file it may write
/// beneath no folder it may write is bound alone). Landlock decides what is written where; a
/// read-only mount also stops what Landlock does not cover, changes to a file's mode, owner,
/// times and extended attributes. Sockets, pipes and devices work on a read-only mount as
/// before.
fn read_only(c: &Confine) -> isize {
    if !c.userns || !c.read_only {
        return 0;
    }
    // `struct mount_attr`: attributes set, cleared, propagation, user namespace.
    let set = [MOUNT_ATTR_RDONLY, 0u64, 0, 0];
    let clear = [0u64, MOUNT_ATTR_RDONLY, 0, 0];
    // SAFETY: raw system calls with pointers into `c` and static strings.
    unsafe {
        for path in &c.keep_writable {
            let r = sys(
                libc::SYS_mount,
                [
                    path.as_ptr() as usize,
                    path.as_ptr() as usize,
                    0,
                    (libc::MS_BIND | libc::MS_REC) as usize,
                ],
            );
            if r < 0 && r != -(libc::ENOENT as isize) {
                return r;
            }
        }
        let r = setattr6(c"/", &set, AT_RECURSIVE);
        if r < 0 {
            return r;
        }
        for path in &c.keep_writable {
            let mut r = setattr6(path, &clear, AT_RECURSIVE);
            if r == -(libc::EPERM as isize) {
                // A mount beneath it that was read-only where the namespace came from stays so.
                r = setattr6(path, &clear, 0);
            }
            // `EPERM` again: the folder itself was read-only there (a runner run inside a
            // confined item: the outer confinement's rules stand); it stays read-only.
            if r < 0
                && r != -(libc::ENOENT as isize)
                && r != -(libc::EINVAL as isize)
                && r != -(libc::EPERM as isize)
            {
                return r;
            }
        }
    }
    0
}

/// Its folder entered again once every mount is made: the one it was in may lie beneath a
/// mount made since (made read-only, or a covered folder's entry bound back), and a folder
/// entered before a cover was made would lead (by `..`) to what the cover hides.
fn enter(c: &Confine) -> isize {
    match &c.cwd {
        // SAFETY: a raw system call reading a string of `c`.
        Some(cwd) => unsafe { sys(libc::SYS_chdir, [cwd.as_ptr() as usize, 0, 0, 0]) },
        None => 0,
    }
}

/// In its own mount namespace: what it may not read covered (a file by `/dev/null`, a folder
/// by an empty read-only tmpfs); nothing mounted here reaches the namespace it came from.
fn hide(c: &Confine) -> isize {
    if !c.userns || !c.hides() {
        return 0;
    }
    let files = c
        .hide
        .iter()
        .map(|p| (p, c"/dev/null", None, libc::MS_BIND));
    let dirs = c.hide_dirs.iter().map(|p| {
        let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        (p, c"tmpfs", Some(c"tmpfs"), flags)
    });
    // SAFETY: raw system calls with pointers into `c` and static strings.
    unsafe {
        for (path, source, fstype, flags) in files.chain(dirs) {
            let r = sys(
                libc::SYS_mount,
                [
                    source.as_ptr() as usize,
                    path.as_ptr() as usize,
                    fstype.map_or(0, |t| t.as_ptr() as usize),
                    flags as usize,
                ],
            );
            if r < 0 && r != -(libc::ENOENT as isize) {
                return r;
            }
        }
    }
    for cover in &c.covers {
        let r = cover.make();
        if r < 0 && r != -(libc::ENOENT as isize) {
            return r;
        }
    }
    0
}

/// A folder covered whole, laid out for the child (see `sandbox::Cover`).
struct CoverC {
    dir: CString,
    /// Each entry kept: its name, its path, and what it is.
    keep: Vec<(CString, CString, KeptC)>,
}

enum KeptC {
    Dir,
    File,
    Link(CString),
}

impl CoverC {
    fn new(cover: &crate::process::sandbox::Cover) -> Option<CoverC> {
        use crate::process::sandbox::Kept;
        use std::os::unix::ffi::OsStrExt;
        let c = |b: &[u8]| CString::new(b).ok();
        let mut keep = Vec::new();
        for (name, kept) in &cover.keep {
            let kind = match kept {
                Kept::Dir => KeptC::Dir,
                Kept::File => KeptC::File,
                Kept::Link(target) => KeptC::Link(c(target.as_os_str().as_bytes())?),
            };
            let path = cover.dir.join(name);
            keep.push((c(name.as_bytes())?, c(path.as_os_str().as_bytes())?, kind));
        }
        Some(CoverC {
            dir: c(cover.dir.as_os_str().as_bytes())?,
            keep,
        })
    }

    /// Cover the folder with an empty tmpfs, bind each kept entry back from the folder beneath
    /// it (reached through a descriptor taken before: the path leads to the tmpfs then), make
    /// each kept link again, and make the tmpfs read-only. An entry gone, or no longer of its
    /// kind, since the plan stays hidden. 0, or the first negative result.
    fn make(&self) -> isize {
        // SAFETY: raw system calls with pointers into `self` and static strings; the
        // descriptors made here are closed here.
        unsafe {
            let below = sys(
                libc::SYS_openat,
                [
                    libc::AT_FDCWD as usize,
                    self.dir.as_ptr() as usize,
                    (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as usize,
                    0,
                ],
            );
            if below < 0 {
                return below;
            }
            let r = self.fill(below);
            sys(libc::SYS_close, [below as usize, 0, 0, 0]);
            r
        }
    }

    /// # Safety
    ///
    /// `below` is a descriptor of the folder, taken before it was covered.
    unsafe fn fill(&self, below: isize) -> isize {
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        let skip = |r: isize| {
            [libc::ENOENT, libc::ENOTDIR, libc::EISDIR, libc::EEXIST].contains(&(-r as i32))
        };
        // SAFETY: raw system calls with pointers into `self` and static strings.
        unsafe {
            let r = sys5(
                libc::SYS_mount,
                [
                    c"tmpfs".as_ptr() as usize,
                    self.dir.as_ptr() as usize,
                    c"tmpfs".as_ptr() as usize,
                    flags as usize,
                    c"mode=0755".as_ptr() as usize,
                ],
            );
            if r < 0 {
                return r;
            }
            for (name, path, kind) in &self.keep {
                let at = libc::AT_FDCWD as usize;
                let p = path.as_ptr() as usize;
                let made = match kind {
                    KeptC::Link(target) => {
                        sys(libc::SYS_symlinkat, [target.as_ptr() as usize, at, p, 0])
                    }
                    KeptC::Dir => sys(libc::SYS_mkdirat, [at, p, 0o755, 0]),
                    KeptC::File => sys(
                        libc::SYS_mknodat,
                        [at, p, (libc::S_IFREG | 0o644) as usize, 0],
                    ),
                };
                if made < 0 {
                    return made;
                }
                if matches!(kind, KeptC::Link(_)) {
                    continue;
                }
                let tree = sys(
                    libc::SYS_open_tree,
                    [
                        below as usize,
                        name.as_ptr() as usize,
                        OPEN_TREE_CLONE
                            | libc::O_CLOEXEC as usize
                            | AT_RECURSIVE
                            | libc::AT_SYMLINK_NOFOLLOW as usize,
                        0,
                    ],
                );
                if tree < 0 {
                    if skip(tree) {
                        continue;
                    }
                    return tree;
                }
                let moved = sys5(
                    libc::SYS_move_mount,
                    [
                        tree as usize,
                        c"".as_ptr() as usize,
                        at,
                        p,
                        MOVE_MOUNT_F_EMPTY_PATH,
                    ],
                );
                sys(libc::SYS_close, [tree as usize, 0, 0, 0]);
                if moved < 0 && !skip(moved) {
                    return moved;
                }
            }
        }
        setattr6(&self.dir, &[MOUNT_ATTR_RDONLY, 0, 0, 0], 0)
    }
}

/// `open_tree`'s flag for a copy of the tree (`linux/mount.h`), and `move_mount`'s for a
/// source given by its descriptor alone.
const OPEN_TREE_CLONE: usize = 1;
const MOVE_MOUNT_F_EMPTY_PATH: usize = 0x4;

/// Loopback up in a new network namespace (`struct ifreq`: the name, then the flags as a
/// short).
fn loopback(c: &Confine) -> isize {
    if !c.netns {
        return 0;
    }
    // SAFETY: raw system calls with pointers into this stack frame.
    unsafe {
        let sock = sys(
            libc::SYS_socket,
            [
                libc::AF_INET as usize,
                (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC) as usize,
                0,
                0,
            ],
        );
        if sock < 0 {
            return sock;
        }
        let mut ifreq = [0u8; 40];
        ifreq[..2].copy_from_slice(b"lo");
        let r = sys(
            libc::SYS_ioctl,
            [sock as usize, 0x8913, ifreq.as_mut_ptr() as usize, 0],
        );
        if r < 0 {
            return r;
        }
        let flags =
            i16::from_ne_bytes([ifreq[16], ifreq[17]]) | (libc::IFF_UP | libc::IFF_RUNNING) as i16;
        ifreq[16..18].copy_from_slice(&flags.to_ne_bytes());
        let r = sys(
            libc::SYS_ioctl,
            [sock as usize, 0x8914, ifreq.as_mut_ptr() as usize, 0],
        );
        sys(libc::SYS_close, [sock as usize, 0, 0, 0]);
        r.min(0)
    }
}

/// The Landlock ruleset, after `no_new_privs` (which Landlock asks for). Without a user
/// namespace, a confined item run as root loses `CAP_SYS_PTRACE`: runner's memory and
/// environment (runner being not dumpable) stay out of its reach.
fn restrict(c: &Confine) -> isize {
    if c.ruleset < 0 {
        return 0;
    }
    // SAFETY: raw system calls on this process's own flags and the ruleset it was given.
    unsafe {
        if !c.userns && sys(libc::SYS_geteuid, [0, 0, 0, 0]) == 0 {
            let r = sys(
                libc::SYS_prctl,
                [libc::PR_CAPBSET_DROP as usize, CAP_SYS_PTRACE, 0, 0],
            );
            if r < 0 {
                return r;
            }
        }
        let r = sys(
            libc::SYS_prctl,
            [libc::PR_SET_NO_NEW_PRIVS as usize, 1, 0, 0],
        );
        if r < 0 {
            return r;
        }
        let r = sys(LANDLOCK_RESTRICT_SELF, [c.ruleset as usize, 0, 0, 0]);
        if r < 0 {
            return r;
        }
    }
    0
}

/// The recording filter (`denials.rs`): its listener, or [`NONE`] where runner does not
/// record.
fn record(c: &Confine) -> isize {
    if !c.watch || c.ruleset < 0 {
        return NONE;
    }
    let filter = crate::process::denials::filter();
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: a raw system call reading the static filter.
    let listener = unsafe {
        sys(
            libc::SYS_seccomp,
            [
                libc::SECCOMP_SET_MODE_FILTER as usize,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as usize,
                std::ptr::from_ref(&prog) as usize,
                0,
            ],
        )
    };
    if listener == -(libc::EBUSY as isize) {
        // Already recorded: a runner run inside a confined item, whose filter's listener is
        // the outer runner's (the kernel allows one per process tree), sees this one's calls
        // too.
        return NONE;
    }
    listener
}

/// The item's proxy listener (`egress.rs`), on `127.0.0.1` in its own network namespace; or
/// [`NONE`] where it has none.
fn proxy_listener(c: &Confine) -> isize {
    if !c.proxy || !c.netns || c.record < 0 {
        return NONE;
    }
    // SAFETY: raw system calls with pointers into this stack frame.
    unsafe {
        let sock = sys(
            libc::SYS_socket,
            [
                libc::AF_INET as usize,
                (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as usize,
                0,
                0,
            ],
        );
        if sock < 0 {
            return sock;
        }
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: crate::process::egress::PROXY_PORT.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
            },
            sin_zero: [0; 8],
        };
        let r = sys(
            libc::SYS_bind,
            [
                sock as usize,
                std::ptr::from_ref(&addr) as usize,
                std::mem::size_of::<libc::sockaddr_in>(),
                0,
            ],
        );
        let r = if r < 0 {
            r
        } else {
            sys(libc::SYS_listen, [sock as usize, 128, 0, 0])
        };
        if r < 0 {
            sys(libc::SYS_close, [sock as usize, 0, 0, 0]);
            return r;
        }
        sock
    }
}

/// Send runner what it serves or watches for this child (`SCM_RIGHTS` over `c.record`): the
/// first byte says which (1: the recording filter's listener, 2: the proxy's), then close
/// them here, and the socket: nothing the item runs may answer its own calls or its own
/// proxy.
fn hand_over(c: &Confine, listener: isize, proxy: isize) -> isize {
    if c.record < 0 {
        return 0;
    }
    let mut fds = [0i32; 2];
    let mut n = 0;
    let mut which = 0u8;
    if listener >= 0 {
        fds[n] = listener as i32;
        n += 1;
        which |= 1;
    }
    if proxy >= 0 {
        fds[n] = proxy as i32;
        n += 1;
        which |= 2;
    }
    // SAFETY: raw system calls with pointers into this stack frame.
    unsafe {
        if n == 0 {
            sys(libc::SYS_close, [c.record as usize, 0, 0, 0]);
            return 0;
        }
        let byte = [which];
        let iov = libc::iovec {
            iov_base: byte.as_ptr().cast_mut().cast(),
            iov_len: 1,
        };
        // `struct cmsghdr` (length, level, type) then the descriptors, 8-byte aligned.
        let mut control = [0u64; 4];
        let header = std::mem::size_of::<libc::cmsghdr>();
        let words = control.as_mut_ptr().cast::<u8>();
        std::ptr::write_unaligned(words.cast::<libc::cmsghdr>(), {
            let mut h: libc::cmsghdr = std::mem::zeroed();
            h.cmsg_len = (header + 4 * n) as _;
            h.cmsg_level = libc::SOL_SOCKET;
            h.cmsg_type = libc::SCM_RIGHTS;
            h
        });
        for (k, fd) in fds.iter().take(n).enumerate() {
            std::ptr::write_unaligned(words.add(header + 4 * k).cast::<i32>(), *fd);
        }
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = std::ptr::from_ref(&iov).cast_mut();
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = ((header + 4 * n + 7) & !7) as _;
        let sent = sys(
            libc::SYS_sendmsg,
            [
                c.record as usize,
                std::ptr::from_ref(&msg) as usize,
                libc::MSG_NOSIGNAL as usize,
                0,
            ],
        );
        for fd in fds.iter().take(n) {
            sys(libc::SYS_close, [*fd as usize, 0, 0, 0]);
        }
        sys(libc::SYS_close, [c.record as usize, 0, 0, 0]);
        sent.min(0)
    }
}

/// `mount_setattr(AT_FDCWD, path, flags, attr, sizeof attr)`.
fn setattr6(path: &std::ffi::CStr, attr: &[u64; 4], flags: usize) -> isize {
    // SAFETY: a raw system call reading `path` and `attr`.
    unsafe {
        super::sys::sys5(
            libc::SYS_mount_setattr,
            [
                libc::AT_FDCWD as usize,
                path.as_ptr() as usize,
                flags,
                attr.as_ptr() as usize,
                std::mem::size_of_val(attr),
            ],
        )
    }
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: usize = 0x8000;

/// The capability to trace any process (`linux/capability.h`).
const CAP_SYS_PTRACE: usize = 19;

/// `landlock_create_ruleset` and `landlock_restrict_self`: one number on every architecture.
const LANDLOCK_CREATE_RULESET: libc::c_long = 444;
const LANDLOCK_RESTRICT_SELF: libc::c_long = 446;

/// The kernel's Landlock ABI version (`landlock_create_ruleset(NULL, 0, VERSION)`), or a
/// negative error where Landlock is absent or disabled.
pub(crate) fn landlock_abi_version() -> i32 {
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return -1;
    }
    // SAFETY: a query that reads and writes no memory.
    unsafe { sys(LANDLOCK_CREATE_RULESET, [0, 0, 1, 0]) as i32 }
}

/// Whether a child can get a pid namespace with a `/proc` of its own (inside a user namespace
/// of its own): tried in a forked child, whose own child is that namespace's first process.
pub(crate) fn probe_pid_namespace() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    in_forked_child(|| {
        let confine = Confine::new(-1, true, false);
        let r = namespaces(&confine);
        if r < 0 {
            return r;
        }
        // SAFETY: raw system calls of the forked child on its own memory.
        let r = unsafe {
            sys(
                libc::SYS_unshare,
                [(libc::CLONE_NEWPID | libc::CLONE_NEWNS) as usize, 0, 0, 0],
            )
        };
        if r < 0 {
            return r;
        }
        // The namespace's first process: the child's own child.
        let mounted = in_forked_child(|| {
            let r = private_mounts();
            if r < 0 {
                return r;
            }
            own_proc(&Confine::new(-1, true, false).in_pid_namespace(true))
        });
        if mounted { 0 } else { -1 }
    })
}

/// Whether a child can get the namespaces of its own `userns` and `netns` say: tried in a
/// forked child that only makes raw system calls.
pub(crate) fn probe_namespaces(userns: bool, netns: bool) -> bool {
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return false;
    }
    let confine = Confine::new(-1, userns, netns);
    in_forked_child(|| confine_self(&confine))
}

/// Run `step` in a forked child, which ends at once: whether it succeeded (returned 0 or more).
fn in_forked_child(step: impl Fn() -> isize) -> bool {
    // SAFETY: the forked child makes raw system calls on its own memory only and exits.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return false;
        }
        if pid == 0 {
            let r = step();
            sys(libc::SYS_exit_group, [usize::from(r < 0), 0, 0, 0]);
            #[expect(
                clippy::empty_loop,
                reason = "`exit_group` does not return; nothing else may run in the child"
            )]
            loop {}
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                return false;
            }
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

/// For a child the standard library starts: confine it as [`launch`] does.
pub(crate) fn confine_before_exec(cmd: &mut tokio::process::Command, confine: Confine) {
    if confine.ruleset < 0 && !confine.userns && !confine.netns {
        return;
    }
    // SAFETY: the hook runs in the forked child before `execve` and makes raw system calls
    // only, on memory `confine` owns.
    unsafe {
        cmd.pre_exec(move || {
            let r = confine_self(&confine);
            if r < 0 {
                return Err(io::Error::from_raw_os_error(-r as i32));
            }
            Ok(())
        });
    }
}

/// Make runner not dumpable: another process of the user (an item's) may then not read its
/// memory or its environment (`/proc/<runner>/environ`, which holds every secret `env.pass`
/// keeps from items), nor attach to it, without `CAP_SYS_PTRACE` — which confined items do
/// not have. Children are dumpable again once they run their program.
pub(crate) fn not_dumpable() {
    // SAFETY: a prctl on this process's own flag; no memory is touched.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}
