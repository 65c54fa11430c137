#!/usr/bin/env bash
# A hostile worker: item `a1` tries to reach out of its item in every way the list in
# tests/integration/confinement.rs names, and prints one line per attempt: `attempt NAME: escaped` when
# the attempt did what it meant to, `attempt NAME: denied` when it did not. Other items sleep
# so that they are running while `a1` attacks them.
# Arguments: the test's root folder, the port of a listener on loopback.
root=$1
port=$2
ws=$root/.runner/workspace
if [ "$RUNNER_ITEM" != a1 ]; then
  # Its private temporary folder (its TMPDIR when confined) holds a note of its own.
  mkdir -p "$ws/tmp/$RUNNER_REPO" && echo "note of $RUNNER_ITEM" > "$ws/tmp/$RUNNER_REPO/note"
  exec -a "sleeper-$RUNNER_ITEM" sleep 4
fi
sleep 1.5
say() { if [ "$2" = 0 ]; then echo "attempt $1: escaped"; else echo "attempt $1: denied"; fi; }
try() { local name=$1; shift; ( "$@" ) >/dev/null 2>&1; say "$name" $?; }

# Other items' work: a worktree item and an in-place one, found by their processes' folders too.
try other-worktree sh -c "echo planted > '$ws/worktrees/b/b1/planted-by-a1'"
try other-checkout sh -c "echo planted > '$root/c/planted-by-a1'"
peer=
for d in /proc/[0-9]*; do
  if tr '\0' ' ' < "$d/cmdline" 2>/dev/null | grep -q '^sleeper-b1'; then peer=${d#/proc/}; fi
done
# Another item's processes: their command lines (a prompt on one is another item's brief).
try peer-cmdline test -n "$peer"
try peer-cwd sh -c "ls /proc/$peer/cwd/ | grep -q README"
try other-repo-read sh -c "grep -q hello '$root/b/README.md'"
try other-worktree-read sh -c "grep -q hello '$ws/worktrees/b/b1/README.md'"
try other-tmpdir sh -c "grep -q 'note of b1' '$ws/tmp/b/note'"
# runner's ledger, read and written.
try ledger-read sh -c "head -c 16 '$root/.runner/state.db' | grep -q SQLite"
# (the first byte written again as it is: the ledger is changed in no other way)
try ledger-write sh -c "printf S | dd of='$root/.runner/state.db' bs=1 count=1 conv=notrunc 2>/dev/null && head -c 1 '$root/.runner/state.db' | grep -q S"
# The manifest, the gate script beside it, the reports.
try manifest sh -c ": >> '$root/m.yaml'"
try gate-script sh -c ": >> '$root/gate.sh'"
try reports sh -c "echo forged > '$root/runner-reports/forged'"
# Their metadata, which Landlock does not cover: a mode (as it is: the gate must still run),
# a time, the reports' folder.
try gate-mode chmod u+rw "$root/gate.sh"
try manifest-time touch -m -d '2001-01-01 00:00' "$root/m.yaml"
try reports-mode chmod u+rwx "$root/runner-reports"
# Secrets: runner's environment, and another item's.
try runner-environ sh -c "tr '\0' '\n' < /proc/$PPID/environ | grep -q RUNNER_ONLY_SECRET"
try peer-environ sh -c "tr '\0' '\n' < /proc/$peer/environ | grep -q s3cr3t-b1"
# Signals to runner.
try signal-runner kill -0 "$PPID"
# The user's home.
try home-gitconfig sh -c "echo '[core] pager = evil' >> '$HOME/.gitconfig'"
try home-ssh sh -c "mkdir -p '$HOME/.ssh' && echo evil >> '$HOME/.ssh/authorized_keys'"
# The repository's shared git state, from the item's worktree.
try git-config git config core.fsmonitor "$root/evil.sh"
try git-hook sh -c "echo evil > '$root/a/.git/hooks/post-checkout'"
try git-branch git branch planted-branch
try git-tag git tag planted-tag
try git-main sh -c "git update-ref refs/heads/main HEAD"
try git-info sh -c "echo '*' >> '$root/a/.git/info/exclude'"
# io_uring, whose requests would bypass the record of denied writes.
try io-uring python3 -c 'import ctypes, sys; p = (ctypes.c_ubyte * 120)(); sys.exit(0 if ctypes.CDLL(None).syscall(425, 4, p) >= 0 else 1)'
# Temporary files outside its own TMPDIR, and the network.
try shared-tmp sh -c "echo x > /tmp/planted-by-a1-$$ && rm -f /tmp/planted-by-a1-$$"
try network bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && echo hello >&3"
# What it may do: its own worktree and TMPDIR (controls: these must say escaped).
try own-worktree sh -c "echo work > own-work.txt"
try own-tmpdir sh -c "echo x > \"\$TMPDIR/scratch\""
exit 0
