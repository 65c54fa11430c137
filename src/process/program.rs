//! The program a child runs, found as `execvp` finds it, and the `/dev/null` its input reads.

use std::path::PathBuf;

/// `/dev/null`, opened once: every child's stdin is a copy of it.
pub(super) fn null() -> Option<&'static std::fs::File> {
    static NULL: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    NULL.get_or_init(|| std::fs::File::open("/dev/null").ok())
        .as_ref()
}

/// The program to execute: as given when it names a path, else the first executable file of
/// that name on `path` (with no `PATH`, on [`DEFAULT_PATH`], as `execvp` does).
/// Lookups are remembered per (program, PATH) for absolute PATH entries: a drain starts the
/// same few programs thousands of times.
pub(super) fn resolve_program(
    program: &str,
    path: Option<&str>,
    cwd: &std::path::Path,
) -> Option<PathBuf> {
    use std::collections::HashMap;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Mutex;
    static CACHE: Mutex<Option<HashMap<(String, String), PathBuf>>> = Mutex::new(None);
    if program.contains('/') {
        return Some(cwd.join(program));
    }
    // No `PATH` at all: where `execvp` looks then (glibc's `confstr(_CS_PATH)`).
    let path = path.unwrap_or(DEFAULT_PATH);
    let cacheable = path.split(':').all(|d| d.starts_with('/'));
    let key = (program.to_string(), path.to_string());
    if cacheable
        && let Ok(cache) = CACHE.lock()
        && let Some(hit) = cache.as_ref().and_then(|c| c.get(&key))
        && hit.is_file()
    {
        return Some(hit.clone());
    }
    let found = path
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| cwd.join(d).join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })?;
    if cacheable && let Ok(mut cache) = CACHE.lock() {
        cache
            .get_or_insert_with(HashMap::new)
            .insert(key, found.clone());
    }
    Some(found)
}

/// The search path of a child whose environment has no `PATH`.
const DEFAULT_PATH: &str = "/bin:/usr/bin";
