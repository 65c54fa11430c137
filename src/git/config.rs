//! A repository's configuration file read as git reads it, for the few keys runner asks about
//! once per repository (its filter drivers, who commits). A git process for that costs a few
//! milliseconds of a short item; reading the file costs microseconds.
//!
//! The syntax — sections with quoted and old-style subsections, variables with and without a
//! value, quoting, escapes, comments, continued lines — is parsed by gitoxide's `gix-config`
//! (fuzzed upstream); [`entries`] turns its events into each variable's canonical name and
//! value, in order, as `git config --list` names them. What git would not read, or a variable
//! before any section, is `None`, and the caller asks git; so is any include, by the caller
//! (the cascade of scopes and includes is git's answer, asked once per run: `command.rs`).
//! The tests hold it to git itself, on files drawn at random from git's syntax.

/// Each variable of the configuration `text` as `section[.subsection].name` (section and name
/// lower-cased, the subsection as written) and its value (`None` for a variable written without
/// `=`, which git reads as true), in the file's order. `None` when the text is not one git
/// would read the same way (a syntax error, a NUL, a variable before any section).
pub(super) fn entries(text: &str) -> Option<Vec<(String, Option<String>)>> {
    use gix_config::parse::{EventRef, Events};
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.contains('\0') {
        return None;
    }
    let events = Events::from_bytes(text.as_bytes(), None).ok()?;
    if events
        .frontmatter()
        .any(|e| matches!(e, EventRef::SectionValueName(_)))
    {
        return None;
    }
    let mut out = Vec::new();
    for section in events.sections() {
        let EventRef::SectionHeader {
            name,
            separator,
            subsection_name,
        } = section.header()
        else {
            return None;
        };
        let mut prefix = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
        if let Some(sub) = subsection_name {
            let sub = std::str::from_utf8(sub).ok()?;
            prefix.push('.');
            // `[section.subsection]`, the old spelling, is lower-cased whole; a quoted one is
            // kept as written.
            match separator.map(|s| -> &[u8] { s.as_ref() }) {
                Some(b".") => prefix.push_str(&sub.to_ascii_lowercase()),
                _ => prefix.push_str(sub),
            }
        }
        let mut key: Option<String> = None;
        let mut has_value = false;
        let mut partial = Vec::new();
        for event in section.body() {
            match event {
                EventRef::SectionValueName(k) => {
                    if let Some(k) = key.take() {
                        out.push((k, None));
                    }
                    let k = std::str::from_utf8(k).ok()?.to_ascii_lowercase();
                    key = Some(format!("{prefix}.{k}"));
                    has_value = false;
                }
                EventRef::KeyValueSeparator => has_value = true,
                EventRef::ValueNotDone(v) => partial.extend_from_slice(v),
                EventRef::Value(v) | EventRef::ValueDone(v) => {
                    partial.extend_from_slice(v);
                    let raw = std::mem::take(&mut partial);
                    let k = key.take()?;
                    let value = if has_value {
                        let v = gix_config::value::normalize(raw.as_slice());
                        Some(String::from_utf8(v.to_vec()).ok()?)
                    } else {
                        None
                    };
                    out.push((k, value));
                }
                _ => {}
            }
        }
        if let Some(k) = key {
            out.push((k, None));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::entries;
    use std::path::Path;
    use std::process::Command;

    /// What `git config --file F --null --list` reads from `text`, as entries.
    fn git_reads(dir: &Path, text: &str) -> Option<Vec<(String, Option<String>)>> {
        let f = dir.join("config");
        std::fs::write(&f, text).unwrap();
        let out = Command::new("git")
            .args(["config", "--file"])
            .arg(&f)
            .args(["--null", "--list"])
            .env("LC_ALL", "C")
            .output()
            .unwrap();
        if !out.status.success() {
            return None;
        }
        let text = String::from_utf8(out.stdout).unwrap();
        Some(
            text.split_terminator('\0')
                .map(|e| match e.split_once('\n') {
                    Some((k, v)) => (k.to_string(), Some(v.to_string())),
                    None => (e.to_string(), None),
                })
                .collect(),
        )
    }

    const AGREED: &[&str] = &[
        "[core]\n\tbare = false\n[user]\n\tname = Ada Lovelace\n\temail = ada@example.invalid\n",
        "[filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n\tsmudge = git-lfs smudge -- %f\n\tprocess = git-lfs filter-process\n\trequired = true\n",
        "[Filter \"Mixed Case\"]\n\tClean = x\n[USER]\nNAME=  spaced   out  \n",
        "[filter.old]\n\tclean = y\n[filter.OLD]\n\tsmudge = z\n",
        "# comment\n; other\n[user] name = \"quoted # not a comment\" # a comment\n",
        "[user]\n\tname = a\\\n b\n\temail = \"x\\ty\\\\z\\\"\"\n",
        "[commit]\n\tgpgsign\n[i18n]\n\tcommitEncoding = ISO-8859-1 ; comment\n",
        "[filter \"with \\\"quote\\\" and \\\\ and \\x\"]\n\tclean = c\n",
        "\u{feff}[user]\r\n\tname = crlf\r\n\temail=\r\n",
        "[a]b=1\n[a]\n\tb\n\tb =\n\tc = \"  kept  \"  trailing  \n",
        "[section \"sub.with.dots\"]\n\tkey = v\n[x-y]\n\tk-1 = v\n",
        "[user]\n\tname = tab\there\n\temail = \"\"\n",
        "[user.]x\n[a.B.c]\n\td = e\n",
    ];

    const REFUSED: &[&str] = &[
        "[user\n\tname = x\n",
        "[user]\n\tname = \"unterminated\n",
        "[user]\n\tname = bad \\q escape\n",
        "[user \"sub\" ]\n\tname = x\n",
        "[user]\n\t1name = x\n",
        "[user]\n\tna_me = x\n",
    ];

    #[test]
    fn reads_each_file_as_git_does() {
        let dir = tempfile::tempdir().unwrap();
        for text in AGREED {
            let git = git_reads(dir.path(), text);
            assert!(git.is_some(), "git refuses {text:?}");
            assert_eq!(entries(text), git, "{text:?}");
        }
    }

    #[test]
    fn leaves_to_git_what_git_refuses() {
        let dir = tempfile::tempdir().unwrap();
        for text in REFUSED {
            assert_eq!(git_reads(dir.path(), text), None, "git reads {text:?}");
            assert_eq!(entries(text), None, "{text:?}");
        }
        // git reads a variable before any section as a name without one; no key runner asks
        // about can be written so, and such a file is left to git.
        assert_eq!(entries("name = before any section\n"), None);
    }

    /// A file of sections and variables, each piece drawn from what git's syntax allows and a
    /// little it does not: headers plain, quoted and old-style, names in mixed case, values
    /// with quotes, escapes, comments, blanks and continued lines.
    fn config_file() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let header = prop_oneof![
            "\\[[a-zA-Z][a-zA-Z0-9-]{0,3}\\]",
            "\\[[a-zA-Z][a-zA-Z-]{0,3}[ \t]{1,2}\"([a-zA-Z .#;=\\]\\-]|\\\\[\"\\\\a-z]){0,6}\"\\]",
            "\\[[a-zA-Z]{1,3}\\.[a-zA-Z.]{0,4}\\]",
        ];
        let variable = "[ \t]{0,2}[a-zA-Z][a-zA-Z0-9-]{0,4}([ \t]{0,2}=[ \t]{0,2}([a-zA-Z0-9 \t#;=.\"]|\\\\[ntb\"\\\\\n]){0,10})?([ \t]*[#;][a-z ]{0,4})?";
        let line = prop_oneof![
            2 => header,
            5 => variable,
            1 => "[ \t]{0,2}[#;][a-z \"]{0,5}",
            1 => Just(String::new()),
        ];
        (
            proptest::collection::vec(line, 1..8),
            prop_oneof![Just("\n"), Just("\r\n")],
        )
            .prop_map(|(lines, end)| {
                let mut text = lines.join(end);
                text.push_str(end);
                text
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]
        /// Whatever it reads, it reads as git does; what it cannot, it leaves to git.
        #[test]
        fn never_reads_a_file_otherwise_than_git(
            body in "(\\[|\\]|\"|\\\\|=|#|;| |\t|\n|\r\n|a|B|n|t|b|\\.|-|1|é){0,40}"
        ) {
            let dir = tempfile::tempdir().unwrap();
            let text = format!("[s \"t\"]\n{body}");
            if let Some(ours) = entries(&text) {
                proptest::prop_assert_eq!(Some(ours), git_reads(dir.path(), &text), "{:?}", text);
            }
        }

        /// The same for files made of git's syntax, where most are read.
        #[test]
        fn reads_files_of_sections_and_variables_as_git_does(text in config_file()) {
            let dir = tempfile::tempdir().unwrap();
            if let Some(ours) = entries(&text) {
                proptest::prop_assert_eq!(Some(ours), git_reads(dir.path(), &text), "{:?}", text);
            }
        }
    }
}
