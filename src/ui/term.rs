//! Writing to the terminal: warnings and errors on stderr (coloured where it takes colour), and
//! standard output that a reader may close early (`runner plan m.yaml | head -1`) without a
//! panic or an error.

use std::io::IsTerminal;

/// How to write to the terminal.
#[derive(Clone, Copy, Debug)]
pub struct Ui {
    /// Colour on stderr.
    pub color: bool,
}

impl Ui {
    /// Colour as `forced` says (`--color always` / `never`), else where stderr is a terminal
    /// that takes it and `NO_COLOR` does not refuse it.
    pub fn new(forced: Option<bool>) -> Self {
        let color = forced.unwrap_or_else(|| {
            std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var("TERM").map_or(true, |t| t != "dumb")
                && std::io::stderr().is_terminal()
        });
        Ui { color }
    }

    /// Print a warning line on stderr.
    pub fn warn(&self, msg: impl std::fmt::Display) {
        if self.color {
            eprintln!("\x1b[1;33mwarning\x1b[0m: {msg}");
        } else {
            eprintln!("warning: {msg}");
        }
    }

    /// Print an error line on stderr.
    pub fn error(&self, msg: impl std::fmt::Display) {
        if self.color {
            eprintln!("\x1b[1;31merror\x1b[0m: {msg}");
        } else {
            eprintln!("error: {msg}");
        }
    }
}

/// What [`out!`] and [`outln!`] do: write to standard output; a closed pipe ends the output
/// quietly, any other failure is said once on stderr.
pub(crate) fn write_out(args: std::fmt::Arguments<'_>, newline: bool) {
    write_out_with(|o| {
        o.write_fmt(args)?;
        if newline { o.write_all(b"\n") } else { Ok(()) }
    });
}

/// As [`write_out`], what `write` writes into standard output as it goes (a document of
/// thousands of items is never held as text).
pub(crate) fn write_out_with(write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>) {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    static FAILED: AtomicBool = AtomicBool::new(false);
    if FAILED.load(Ordering::Relaxed) {
        return;
    }
    let mut o = std::io::BufWriter::new(std::io::stdout().lock());
    let r = write(&mut o).and_then(|()| o.flush());
    if let Err(e) = r {
        FAILED.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: cannot write to standard output: {e}");
        }
    }
}
