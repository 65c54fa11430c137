//! Manifest diagnostics: every problem found in one pass, each pinned to a place in the file.
//!
//! A [`Problem`] carries a stable code, the key path (`gates[1].timeout`), a message and the
//! span of the offending node. [`ManifestError`] holds all of them with the manifest text and
//! renders them through miette, so each shows `file:line:col`, the offending line and a pointer.

use super::yaml::Span;
use miette::{Diagnostic, GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource};
use std::fmt;
use std::sync::Arc;

/// One thing wrong with a manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Stable, kebab-case kind of problem, e.g. `unknown-key`.
    pub code: &'static str,
    /// Where in the document, as a key path (`repositories[2].name`); empty for the whole file.
    pub path: String,
    pub message: String,
    pub span: Option<Span>,
    pub help: Option<String>,
}

impl Problem {
    pub fn new(code: &'static str, path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            code,
            path: path.into(),
            message: message.into(),
            span: None,
            help: None,
        }
    }
    pub fn at(mut self, span: Span) -> Self {
        self.span = Some(span);
        self
    }
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// Every problem of one manifest, with the text they point into.
#[derive(Debug, Clone)]
pub struct ManifestError {
    /// The manifest's name as the user gave it.
    pub file: String,
    pub text: Arc<str>,
    pub problems: Vec<Problem>,
}

impl ManifestError {
    /// Render every problem, then a one-line count. `color` picks the themed renderer.
    pub fn render(&self, color: bool) -> String {
        let theme = if color {
            GraphicalTheme::unicode()
        } else {
            GraphicalTheme::unicode_nocolor()
        };
        let handler = GraphicalReportHandler::new_themed(theme)
            .with_width(100)
            .with_links(false);
        let mut out = String::new();
        for p in &self.problems {
            let d = Rendered {
                problem: p,
                source: NamedSource::new(&self.file, self.text.clone()),
                text_len: self.text.len(),
            };
            let plain = match p.span {
                Some(s) => format!(
                    "error: {}:{}:{}: {}\n",
                    self.file,
                    s.line,
                    s.column,
                    Plain(p)
                ),
                None => format!("error: {}: {}\n", self.file, Plain(p)),
            };
            // Very long lines (minified or generated YAML) are shown without the source excerpt:
            // the excerpt would be unreadable, and the renderer cannot lay them out.
            if p.span
                .is_some_and(|s| line_len(&self.text, s.offset) > MAX_EXCERPT_LINE)
            {
                out.push_str(&plain);
                continue;
            }
            let mut one = String::new();
            let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                handler.render_report(&mut one, &d)
            }));
            match rendered {
                Ok(Ok(())) => out.push_str(&one),
                _ => out.push_str(&plain),
            }
        }
        let n = self.problems.len();
        out.push_str(&format!(
            "error: `{}` has {} problem{}\n",
            self.file,
            n,
            if n == 1 { "" } else { "s" }
        ));
        out
    }
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.problems {
            match p.span {
                Some(s) => writeln!(f, "{}:{}:{}: {}", self.file, s.line, s.column, p.message)?,
                None => writeln!(f, "{}: {}", self.file, p.message)?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for ManifestError {}

/// Longest source line shown as an excerpt.
const MAX_EXCERPT_LINE: usize = 300;

fn line_len(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    end - start
}

/// A problem as one line of text: key path and message.
struct Plain<'a>(&'a Problem);

impl fmt::Display for Plain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.path.is_empty() {
            f.write_str(&self.0.message)
        } else {
            write!(f, "`{}`: {}", self.0.path, self.0.message)
        }
    }
}

struct Rendered<'a> {
    problem: &'a Problem,
    source: NamedSource<Arc<str>>,
    text_len: usize,
}

impl fmt::Debug for Rendered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.problem.message)
    }
}

impl fmt::Display for Rendered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Plain(self.problem).fmt(f)
    }
}

impl std::error::Error for Rendered<'_> {}

impl Diagnostic for Rendered<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(format!("manifest::{}", self.problem.code)))
    }
    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.problem
            .help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.problem.span.map(|_| &self.source as _)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let span = self.problem.span?;
        let offset = span.offset.min(self.text_len);
        let len = span.len.min(self.text_len - offset);
        Some(Box::new(std::iter::once(
            LabeledSpan::new_primary_with_span(Some("here".into()), (offset, len)),
        )))
    }
}
