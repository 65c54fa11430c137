//! A repository's configuration file read as git reads it, for the few keys runner asks about
//! once per repository (its filter drivers, who commits). A git process for that costs a few
//! milliseconds of a short item; reading the file costs microseconds.
//!
//! [`entries`] parses git's configuration syntax — sections with quoted and old-style
//! subsections, variables with and without a value, quoting, escapes, comments, continued
//! lines — into each variable's canonical name and value, in order. Anything it does not read
//! exactly as git does is `None`, and the caller asks git.

/// Each variable of the configuration `text` as `section[.subsection].name` (section and name
/// lower-cased, the subsection as written) and its value (`None` for a variable written without
/// `=`, which git reads as true), in the file's order. `None` when the text is not one git
/// would read the same way (a syntax error git would report, a NUL).
pub(super) fn entries(text: &str) -> Option<Vec<(String, Option<String>)>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.contains('\0') {
        return None;
    }
    let mut p = Parser {
        chars: text.chars().peekable(),
    };
    let mut out = Vec::new();
    let mut section: Option<String> = None;
    loop {
        let Some(c) = p.next() else {
            return Some(out);
        };
        match c {
            c if c.is_whitespace() => {}
            '#' | ';' => p.skip_line(),
            '[' => section = Some(p.header()?),
            c if c.is_ascii_alphabetic() => {
                let prefix = section.as_deref()?;
                let mut name = String::from(c.to_ascii_lowercase());
                while let Some(&c) = p.chars.peek() {
                    if !(c.is_ascii_alphanumeric() || c == '-') {
                        break;
                    }
                    name.push(c.to_ascii_lowercase());
                    p.chars.next();
                }
                while matches!(p.chars.peek(), Some(' ' | '\t')) {
                    p.chars.next();
                }
                let value = match p.next() {
                    None | Some('\n') => None,
                    Some('=') => Some(p.value()?),
                    Some(_) => return None,
                };
                out.push((format!("{prefix}.{name}"), value));
            }
            _ => return None,
        }
    }
}

struct Parser<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
}

impl Parser<'_> {
    /// The next character, a CR before a newline read as the newline.
    fn next(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\r' && self.chars.peek() == Some(&'\n') {
            return self.chars.next();
        }
        Some(c)
    }

    fn skip_line(&mut self) {
        while let Some(c) = self.next() {
            if c == '\n' {
                return;
            }
        }
    }

    /// A section header after its `[`: `section`, `section "subsection"` or the old
    /// `section.subsection` (lower-cased).
    fn header(&mut self) -> Option<String> {
        let mut name = String::new();
        loop {
            match self.next()? {
                ']' => return (!name.is_empty()).then_some(name),
                c if c.is_ascii_alphanumeric() || c == '-' || c == '.' => {
                    name.push(c.to_ascii_lowercase());
                }
                ' ' | '\t' => break,
                _ => return None,
            }
        }
        // `[section "subsection"]`: only blanks before the quote, nothing but `]` after it.
        if name.is_empty() || name.contains('.') {
            return None;
        }
        let c = loop {
            match self.next()? {
                ' ' | '\t' => {}
                c => break c,
            }
        };
        if c != '"' {
            return None;
        }
        name.push('.');
        loop {
            match self.next()? {
                '"' => break,
                '\n' => return None,
                '\\' => match self.next()? {
                    '\n' => return None,
                    c => name.push(c),
                },
                c => name.push(c),
            }
        }
        (self.next()? == ']').then_some(name)
    }

    /// A value after its `=`, to the end of its line: blanks around it dropped, quotes and
    /// escapes resolved, a comment outside quotes ended at, a line ending in `\` continued.
    fn value(&mut self) -> Option<String> {
        let mut value = String::new();
        // Blanks held until something follows them: trailing ones are not part of the value,
        // nor are those before it.
        let mut blanks = String::new();
        let mut quoted = false;
        loop {
            let Some(c) = self.next() else {
                return (!quoted).then_some(value);
            };
            match c {
                '\n' if quoted => return None,
                '\n' => return Some(value),
                ' ' | '\t' if !quoted => {
                    if !value.is_empty() {
                        blanks.push(c);
                    }
                }
                '#' | ';' if !quoted => {
                    self.skip_line();
                    return Some(value);
                }
                '\\' => {
                    let escaped = match self.next()? {
                        '\n' => continue,
                        'n' => '\n',
                        't' => '\t',
                        'b' => '\u{8}',
                        c @ ('\\' | '"') => c,
                        _ => return None,
                    };
                    value.push_str(&std::mem::take(&mut blanks));
                    value.push(escaped);
                }
                '"' => {
                    value.push_str(&std::mem::take(&mut blanks));
                    quoted = !quoted;
                }
                c => {
                    value.push_str(&std::mem::take(&mut blanks));
                    value.push(c);
                }
            }
        }
    }
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

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
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
    }
}
