//! Branch names: git's rules, and the few more a work branch of runner's must obey; and full
//! object names as git writes them.

/// Is `s` a full SHA-1 object name as git writes one (40 lowercase hexadecimal digits)? Such a
/// name always names the same object, and may be written into objects, refs and logs as it is.
pub(crate) fn full_object_name(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Is `name` acceptable to git as a branch name? The rules of `git check-ref-format --branch`,
/// without spawning git for each item.
pub(crate) fn valid_branch_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && !name.starts_with('/')
        && !name.ends_with('/')
        && !name.ends_with('.')
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && name != "@"
        && !name
            .chars()
            .any(|c| c.is_control() || " ~^:?*[\\".contains(c))
        && name
            .split('/')
            .all(|seg| !seg.starts_with('.') && !seg.ends_with(".lock"))
}

/// Why `name` cannot be an item's work branch, when it cannot: git refuses it, or it names
/// something else than a branch of its own (`HEAD`, a full ref that would become
/// `refs/heads/refs/heads/…`).
pub(crate) fn work_branch_problem(name: &str) -> Option<String> {
    if !valid_branch_name(name) {
        return Some(format!("git does not accept `{name}` as a branch name"));
    }
    if name == "HEAD" {
        return Some("`HEAD` is not a branch; name the work branch".into());
    }
    if let Some(short) = name.strip_prefix("refs/heads/") {
        return Some(format!(
            "`{name}` is a full ref; a branch is named without `refs/heads/` (`{short}`)"
        ));
    }
    if name.starts_with("refs/") {
        return Some(format!("`{name}` is a ref, not a branch name"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_names() {
        assert!(valid_branch_name("runner/fix-login"));
        assert!(valid_branch_name("feature/a.b_c-1"));
        for bad in [
            "", "-x", "a..b", "a b", "a~1", "x.lock", "a/", "/a", "a//b", "a/.b", "@", "a@{b",
            "../../x", "-b",
        ] {
            assert!(!valid_branch_name(bad), "{bad}");
        }
        assert!(work_branch_problem("runner/x").is_none());
        for bad in ["HEAD", "refs/heads/x", "refs/tags/v1", "a b"] {
            assert!(work_branch_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn a_full_object_name_is_forty_lowercase_hex_digits() {
        assert!(full_object_name("4b825dc642cb6eb9a060e54bf8d69288fbee4904"));
        for not in [
            "4B825DC642CB6EB9A060E54BF8D69288FBEE4904",
            "4b825dc642cb6eb9a060e54bf8d69288fbee490",
            "4b825dc642cb6eb9a060e54bf8d69288fbee49044",
            "4b825dc642cb6eb9a060e54bf8d69288fbee490g",
            "HEAD",
        ] {
            assert!(!full_object_name(not), "{not}");
        }
    }
}
