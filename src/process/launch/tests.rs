//! The launcher against real children: what they see, how they end, and what is left open.

use super::*;
use std::io::Read;

/// Launch `program` with `args` and `env` in `cwd` (stdin from /dev/null, both output
/// streams to one pipe), wait for it, and return how it ended, why it did not start (if it
/// did not) and what it printed.
fn run(
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
    cwd: &Path,
    inherit: Option<RawFd>,
) -> (ExitStatus, Option<io::Error>, String) {
    run_joining(program, args, env, cwd, inherit, &[], None)
}

/// [`run`], the child joining the cgroups `join` (and created in `into`) as [`launch`] says.
fn run_joining(
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
    cwd: &Path,
    inherit: Option<RawFd>,
    join: &[RawFd],
    into: Option<RawFd>,
) -> (ExitStatus, Option<io::Error>, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let null = std::fs::File::open("/dev/null").unwrap();
        let (rx, tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let stdio = [null.as_raw_fd(), tx.as_raw_fd(), tx.as_raw_fd()];
        let mut child = registered(|| {
            launch(
                Path::new(program),
                &args,
                &env,
                cwd,
                stdio,
                inherit,
                join,
                into,
                Waiter::Runtime,
                Confine::none(),
            )
        });
        drop(tx);
        let status = child.wait().await.unwrap();
        unregister(child.pid);
        let mut out = String::new();
        std::fs::File::from(rx).read_to_string(&mut out).unwrap();
        (status, child.start_error(), out)
    })
}

/// Launch as runner does: registered as a direct child, so that the censuses of other tests
/// in this process leave it alone.
fn registered(f: impl FnOnce() -> Result<Launched, LaunchError>) -> Launched {
    let mut direct = super::super::census::DIRECT_CHILDREN.lock().unwrap();
    let Ok(child) = f() else {
        panic!("launch failed");
    };
    direct.push(child.pid);
    child
}

fn unregister(pid: i32) {
    super::super::census::DIRECT_CHILDREN
        .lock()
        .unwrap()
        .retain(|p| *p != pid);
}

#[test]
fn a_child_gets_exactly_its_environment_directory_group_and_signal_state() {
    let dir = tempfile::tempdir().unwrap();
    let (status, err, out) = run("/usr/bin/env", &[], &[("ONLY", "this")], dir.path(), None);
    assert!(status.success() && err.is_none());
    assert_eq!(out, "ONLY=this\n");

    let (_, _, out) = run("/bin/pwd", &[], &[], dir.path(), None);
    assert_eq!(Path::new(out.trim()), dir.path().canonicalize().unwrap());

    // Its own process group; no signal blocked, though runner blocks all of them across
    // the launch; SIGPIPE, which runner ignores, back to its default; what runner's own
    // parent had ignored still ignored, as across any exec.
    let script = "echo $$ $(cut -d' ' -f5 /proc/$$/stat)";
    let (status, _, out) = run("/bin/sh", &["-c", script], &[], dir.path(), None);
    assert!(status.success(), "{out}");
    let ids: Vec<&str> = out.trim().split(' ').collect();
    assert_eq!(ids[0], ids[1], "the child leads its own group: {out}");
    // Read by the launched process itself (a shell's own mask moves as it runs commands).
    let status_file = ["-E", "^Sig(Blk|Ign)", "/proc/self/status"];
    let (status, _, out) = run("/bin/grep", &status_file, &[], dir.path(), None);
    assert!(status.success(), "{out}");
    let mut lines = out.lines();
    let mask = |line: &str| u64::from_str_radix(line.split('\t').nth(1).unwrap(), 16).unwrap();
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    let own_ignored = mask(own.lines().find(|l| l.starts_with("SigIgn")).unwrap());
    let pipe = 1u64 << (libc::SIGPIPE - 1);
    assert_ne!(own_ignored & pipe, 0, "runner ignores SIGPIPE");
    assert_eq!(mask(lines.next().unwrap()), 0, "blocked: {out}");
    let ignored = mask(lines.next().unwrap());
    assert_eq!(ignored & pipe, 0, "SIGPIPE ignored: {out}");
    assert_eq!(ignored & !own_ignored, 0, "{out}");
}

#[test]
fn its_group_exists_as_soon_as_it_is_launched() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let null = std::fs::File::open("/dev/null").unwrap();
        let fd = null.as_raw_fd();
        let args = ["30".to_string()];
        let mut child = registered(|| {
            launch(
                Path::new("/bin/sleep"),
                &args,
                &[],
                Path::new("/"),
                [fd, fd, fd],
                None,
                &[],
                None,
                Waiter::Runtime,
                Confine::none(),
            )
        });
        // SAFETY: signalling the group of the child just launched.
        assert_eq!(unsafe { libc::killpg(child.pid, libc::SIGKILL) }, 0);
        let status = child.wait().await.unwrap();
        unregister(child.pid);
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    });
}

/// A cgroup of its own under this process's, in the unified hierarchy, or `None` where
/// this process may not make one.
fn own_cgroup_child(name: &str) -> Option<std::path::PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = own.lines().find_map(|l| l.strip_prefix("0::"))?.to_string();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let fields: Vec<&str> = pre.split(' ').collect();
        (post.starts_with("cgroup2 ") && fields.get(3) == Some(&"/"))
            .then(|| fields.get(4).map(|m| m.to_string()))?
    })?;
    let dir = Path::new(&mount)
        .join(own.trim_start_matches('/'))
        .join(name);
    std::fs::create_dir(&dir).ok()?;
    Some(dir)
}

#[test]
fn a_child_is_in_its_cgroup_when_created_there_and_when_it_moves_itself() {
    let name = format!("runner-launch-test-{}", std::process::id());
    let Some(dir) = own_cgroup_child(&name) else {
        eprintln!("skipped: no cgroup can be made here");
        return;
    };
    let procs = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))
        .unwrap();
    let folder = std::fs::File::open(&dir).unwrap();
    let here = tempfile::tempdir().unwrap();
    for into in [Some(folder.as_raw_fd()), None] {
        let (status, err, out) = run_joining(
            "/bin/cat",
            &["/proc/self/cgroup"],
            &[],
            here.path(),
            None,
            &[procs.as_raw_fd()],
            into,
        );
        assert!(status.success() && err.is_none(), "{status:?} {err:?}");
        let unified = out.lines().find(|l| l.starts_with("0::")).unwrap_or("");
        assert!(
            unified.ends_with(&format!("/{name}")),
            "created in it: {}: {out}",
            into.is_some()
        );
        // The kernel took `clone3` with every flag asked (the cgroup, the handlers reset):
        // nothing fell back to `clone`.
        assert!(!NO_CLONE3.load(std::sync::atomic::Ordering::Relaxed));
        // Either way, no signal blocked, SIGPIPE back to its default, what was ignored before
        // runner still ignored.
        let (status, _, out) = run_joining(
            "/bin/grep",
            &["-E", "^Sig(Blk|Ign)", "/proc/self/status"],
            &[],
            here.path(),
            None,
            &[procs.as_raw_fd()],
            into,
        );
        assert!(status.success(), "{out}");
        let mask = |line: &str| u64::from_str_radix(line.split('\t').nth(1).unwrap(), 16).unwrap();
        let own = std::fs::read_to_string("/proc/self/status").unwrap();
        let own_ignored = mask(own.lines().find(|l| l.starts_with("SigIgn")).unwrap());
        let mut lines = out.lines();
        assert_eq!(mask(lines.next().unwrap()), 0, "blocked: {out}");
        let ignored = mask(lines.next().unwrap());
        let (pipe, xfsz) = (1u64 << (libc::SIGPIPE - 1), 1u64 << (libc::SIGXFSZ - 1));
        assert_eq!(
            ignored & (pipe | xfsz),
            0,
            "SIGPIPE or SIGXFSZ ignored: {out}"
        );
        assert_eq!(ignored & !own_ignored, 0, "{out}");
    }
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_program_that_cannot_start_is_an_error_not_an_exit() {
    let dir = tempfile::tempdir().unwrap();
    let (_, err, _) = run("/nonexistent/program", &[], &[], dir.path(), None);
    assert_eq!(err.map(|e| e.kind()), Some(io::ErrorKind::NotFound));
    let plain = dir.path().join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    let (_, err, _) = run(plain.to_str().unwrap(), &[], &[], dir.path(), None);
    assert_eq!(err.map(|e| e.kind()), Some(io::ErrorKind::PermissionDenied));
    let (_, err, _) = run("/bin/true", &[], &[], &dir.path().join("gone"), None);
    assert_eq!(err.map(|e| e.kind()), Some(io::ErrorKind::NotFound));
}

#[test]
fn only_the_inherited_descriptor_stays_open() {
    let dir = tempfile::tempdir().unwrap();
    let kept = std::fs::File::create(dir.path().join("kept")).unwrap();
    let other = std::fs::File::create(dir.path().join("other")).unwrap();
    let (k, o) = (kept.as_raw_fd(), other.as_raw_fd());
    let script = format!("test -e /proc/$$/fd/{k} && ! test -e /proc/$$/fd/{o}");
    let (status, _, out) = run("/bin/sh", &["-c", &script], &[], dir.path(), Some(k));
    assert!(status.success(), "{out}");
    // And runner's own copy is still close-on-exec.
    let flags = nix::fcntl::fcntl(&kept, nix::fcntl::FcntlArg::F_GETFD).unwrap();
    assert_ne!(flags & libc::FD_CLOEXEC, 0);
}

/// A descriptor runner left open across `execve` (not close-on-exec) does not reach the child
/// either: the child closes all but its own before it confines itself, so that no copy of
/// runner's descriptors — and the locks on them, a host slot just given back — lives on in it.
#[test]
fn a_descriptor_left_inheritable_does_not_reach_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let leaked = std::fs::File::create(dir.path().join("leaked")).unwrap();
    let fd = leaked.as_raw_fd();
    set_cloexec(fd, false);
    let script = format!("! test -e /proc/$$/fd/{fd}");
    let (status, _, out) = run("/bin/sh", &["-c", &script], &[], dir.path(), None);
    set_cloexec(fd, true);
    assert!(status.success(), "the child had descriptor {fd}: {out}");
}
