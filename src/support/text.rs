//! Text recorded from users, workers and other processes, made safe to show on a terminal.

use std::fmt::Write;

/// `s` with every control character escaped (`\e` as `\u{1b}`, a newline as `\n`), so that
/// recorded text (a pause reason, a cause, a worker's line) can neither move the cursor, recolour
/// nor clear a terminal, nor pass for a line of runner's own.
pub(crate) fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(
            super::printable("ok \u{1b}[2J\u{1b}]0;pwned\u{7}\nnext — é"),
            "ok \\u{1b}[2J\\u{1b}]0;pwned\\u{7}\\nnext — é"
        );
    }
}
