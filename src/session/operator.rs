//! Who is asking: the operator a run, a cancel, a pause or an unlock is recorded with.

/// Who is asking, for provenance: `alice (uid 1000)@host`, the user named by the process's real
/// uid (never `$USER`, which anyone can set), `as worker` when a worker or gate asks (its
/// `RUNNER_ROLE`), and `via `runner cancel`` naming the control used.
pub fn who(control: &str) -> String {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| format!("{} (uid {uid})", u.name))
        .unwrap_or_else(|| format!("uid {uid}"));
    let role = crate::support::settings::current()
        .role
        .clone()
        .filter(|r| {
            !r.is_empty()
                && r.len() <= 32
                && r.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        .map(|r| format!(" as {r}"))
        .unwrap_or_default();
    format!(
        "{user}@{}{role} via `runner {control}`",
        crate::support::host::hostname()
    )
}
