//! Whether a checkout has any file its index does not track, read from its folders.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether every file in the working tree at `top` is one of the tracked `paths` (the index's):
/// any other file (untracked, or one git might ignore), a nested repository, a socket or a fifo
/// leaves the answer to git.
pub(super) fn none<'a>(top: &Path, paths: impl Iterator<Item = &'a [u8]>) -> bool {
    let tracked: HashSet<&[u8]> = paths.collect();
    // Every folder that holds a tracked file, at any depth.
    let mut tracked_dirs: HashSet<&[u8]> = HashSet::new();
    for path in &tracked {
        for (i, _) in path.iter().enumerate().filter(|(_, b)| **b == b'/') {
            tracked_dirs.insert(&path[..i]);
        }
    }
    // Folders holding no tracked file are looked into first: any file there is untracked (build
    // output, typically), and the answer is known at once.
    let mut dirs: Vec<Vec<u8>> = vec![Vec::new()];
    let mut strays: Vec<Vec<u8>> = Vec::new();
    while let Some(rel) = strays.pop().or_else(|| dirs.pop()) {
        let Ok(listing) = std::fs::read_dir(top.join(OsStr::from_bytes(&rel))) else {
            return false;
        };
        for entry in listing {
            let Ok(entry) = entry else { return false };
            let name = entry.file_name();
            if name.as_bytes() == b".git" {
                if rel.is_empty() {
                    continue;
                }
                return false;
            }
            let mut path = rel.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(name.as_bytes());
            let Ok(kind) = entry.file_type() else {
                return false;
            };
            if kind.is_dir() {
                if tracked_dirs.contains(path.as_slice()) {
                    dirs.push(path);
                } else {
                    strays.push(path);
                }
            } else if !((kind.is_file() || kind.is_symlink()) && tracked.contains(path.as_slice()))
            {
                return false;
            }
        }
    }
    true
}
