//! Output capture: a child's stdout and stderr teed, line by line and with secrets redacted, to
//! its log file and to a bounded in-memory tail.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::redact::Redactor;

/// Bytes of output kept in memory per process.
pub(crate) const TAIL_BYTES: usize = 64 * 1024;
/// A partial line longer than this is written out without waiting for its end.
const MAX_PENDING_LINE: usize = 64 * 1024;
/// What one process's log keeps unless `RUNNER_LOG_LIMIT` says otherwise: a worker or gate that
/// floods its output (a loop printing, an agent gone wrong) must not fill the disk of an
/// unattended machine before its timeout.
pub(crate) const DEFAULT_LOG_LIMIT: u64 = 100 << 20;

static LOG_LIMIT: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(DEFAULT_LOG_LIMIT);

/// Set how many bytes of output one process's log keeps (`RUNNER_LOG_LIMIT`).
pub(crate) fn set_log_limit(bytes: u64) {
    LOG_LIMIT.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

fn log_limit() -> u64 {
    LOG_LIMIT.load(std::sync::atomic::Ordering::Relaxed)
}

struct State {
    /// Where the log goes: created at the first output, or empty when the process ends
    /// without any.
    log_path: Option<std::path::PathBuf>,
    log: Option<std::fs::File>,
    /// Why the log is not the whole output: the first failure to create or write it (a full
    /// disk). Nothing more is written after it.
    log_error: Option<String>,
    /// How many bytes the log keeps ([`set_log_limit`]).
    limit: u64,
    /// Bytes written to the log, up to its limit.
    written: u64,
    /// Whether what was written last ended a line (or nothing was written).
    line_ended: bool,
    /// Bytes of output past the limit, not logged: the log ends with the tail instead.
    dropped: u64,
    pending: Vec<u8>,
    tail: VecDeque<u8>,
    bytes: u64,
    last: Instant,
    /// Lines matching the counter so far.
    counted: u64,
    /// Reads failure-shaped lines (of gates), as redacted.
    failures: Option<crate::failures::Scanner>,
    /// Lines held back while a secret wrapped over lines may run through them
    /// ([`Redactor::unwrap_lines`]).
    held: Vec<u8>,
}

impl State {
    /// Create the log, once, when there is a path for it.
    fn open_log(&mut self) {
        if self.log.is_some() || self.log_error.is_some() {
            return;
        }
        let Some(path) = self.log_path.take() else {
            return;
        };
        // Its folder is most often there already (made for the worker's usage file).
        let created = std::fs::File::create(&path).or_else(|e| match path.parent() {
            Some(dir) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir).and_then(|()| std::fs::File::create(&path))
            }
            _ => Err(e),
        });
        match created {
            Ok(f) => self.log = Some(f),
            Err(e) => self.log_error = Some(format!("cannot create it: {e}")),
        }
    }

    /// Append to the log; after a failure (a full disk) nothing more, and the failure is kept
    /// to be told. At its limit the log stops after the last whole line that fits and says so;
    /// what follows is counted, and the tail ends the log when the process does
    /// ([`State::close_log`]).
    fn write_log(&mut self, bytes: &[u8]) {
        if self.log_error.is_some() || self.log.is_none() {
            return;
        }
        if self.dropped > 0 {
            self.dropped += bytes.len() as u64;
            return;
        }
        let limit = self.limit;
        let room = usize::try_from(limit.saturating_sub(self.written)).unwrap_or(usize::MAX);
        let keep = if bytes.len() <= room {
            bytes.len()
        } else {
            match bytes[..room].iter().rposition(|b| *b == b'\n') {
                Some(nl) => nl + 1,
                // The log ends after the last whole line written, unless none was: a single
                // line longer than the limit is cut at it.
                None if self.written > 0 => 0,
                None => {
                    let mut cut = room;
                    while cut > 0 && (bytes[cut] & 0xC0) == 0x80 {
                        cut -= 1;
                    }
                    cut
                }
            }
        };
        self.append(&bytes[..keep]);
        if keep < bytes.len() {
            self.dropped = (bytes.len() - keep) as u64;
            let newline = if self.line_ended { "" } else { "\n" };
            let note = format!(
                "{newline}[runner: the log stops here, at its limit of {} (RUNNER_LOG_LIMIT); the output goes on, and its last lines end the log]\n",
                crate::support::limits::format_size(limit)
            );
            self.append(note.as_bytes());
        }
    }

    fn append(&mut self, bytes: &[u8]) {
        let Some(log) = self.log.as_mut() else {
            return;
        };
        match log.write_all(bytes) {
            Ok(()) => {
                self.written += bytes.len() as u64;
                if let Some(last) = bytes.last() {
                    self.line_ended = *last == b'\n';
                }
            }
            Err(e) => {
                let kept = log.metadata().map(|m| m.len()).unwrap_or_default();
                self.log_error = Some(format!("cannot write it past {kept} bytes: {e}"));
            }
        }
    }

    /// A log that reached its limit ends with the output's tail.
    fn close_log(&mut self) {
        if self.dropped == 0 || self.log_error.is_some() {
            return;
        }
        // What was left out, when the tail holds all of it; else the tail, from a character.
        let n = self
            .tail
            .len()
            .min(usize::try_from(self.dropped).unwrap_or(usize::MAX));
        let mut from = self.tail.len() - n;
        while from < self.tail.len() && (self.tail[from] & 0xC0) == 0x80 {
            from += 1;
        }
        let tail: Vec<u8> = self.tail.range(from..).copied().collect();
        let note = format!(
            "[runner: {} bytes of output were not logged; its last {} bytes follow]\n",
            self.dropped,
            tail.len()
        );
        self.append(note.as_bytes());
        self.append(&tail);
    }
}

/// Shared sink for both pipes of one process.
#[derive(Clone)]
pub(crate) struct Collector {
    state: Arc<Mutex<State>>,
    redactor: Arc<Redactor>,
    counter: Option<Arc<regex::Regex>>,
    /// A partial line longer than this is written out without waiting for its end.
    max_line: usize,
}

pub(crate) struct Snapshot {
    pub tail: String,
    pub bytes: u64,
    /// Whether a log file was written.
    pub logged: bool,
    /// Why the log lacks output, when it does: it could not be created or written whole.
    pub log_error: Option<String>,
    /// Bytes of output past the log's limit, not in the log (but for what its tail repeats).
    pub unlogged: u64,
    /// Output lines that matched the counter.
    pub counted: u64,
    /// The failures recognised in the output, when asked for ([`Collector::recognising`]).
    pub failures: Vec<crate::failures::Failure>,
}

impl Collector {
    pub fn new(log_path: Option<std::path::PathBuf>, redactor: Arc<Redactor>) -> Self {
        Collector {
            state: Arc::new(Mutex::new(State {
                log_path,
                log: None,
                log_error: None,
                limit: log_limit(),
                written: 0,
                line_ended: true,
                dropped: 0,
                pending: Vec::new(),
                tail: VecDeque::new(),
                bytes: 0,
                last: Instant::now(),
                counted: 0,
                failures: None,
                held: Vec::new(),
            })),
            redactor,
            counter: None,
            max_line: MAX_PENDING_LINE,
        }
    }

    pub fn push(&self, chunk: &[u8]) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        st.bytes += chunk.len() as u64;
        st.last = Instant::now();
        st.pending.extend_from_slice(chunk);
        let cut = match st.pending.iter().rposition(|b| *b == b'\n') {
            Some(i) => i + 1,
            None if st.pending.len() > self.max_line => {
                // A line too long to wait for is written in part, but never a part of a secret:
                // what could be the start of one is held back until the rest of it comes.
                let cut = self.redactor.safe_cut(&st.pending);
                if cut == 0 {
                    return;
                }
                cut
            }
            None => return,
        };
        let lines: Vec<u8> = st.pending.drain(..cut).collect();
        self.emit(&mut st, &lines, false);
    }

    /// Keep `n` bytes of output in the log (instead of the process-wide limit).
    /// For the unit tests.
    #[cfg(test)]
    pub(crate) fn with_log_limit(self, n: u64) -> Self {
        if let Ok(mut st) = self.state.lock() {
            st.limit = n;
        }
        self
    }

    /// Cut partial lines longer than `n` bytes (instead of 64 KiB).
    /// For the unit tests.
    #[cfg(test)]
    pub(crate) fn with_line_limit(mut self, n: usize) -> Self {
        self.max_line = n;
        self
    }

    /// Count the output lines matching `counter` (whole lines, as written: before redaction).
    pub(crate) fn counting(mut self, counter: Option<Arc<regex::Regex>>) -> Self {
        self.counter = counter;
        self
    }

    /// Recognise failures in the output (see [`crate::failures`]), the folders in
    /// `roots` replaced by `<dir>`.
    pub(crate) fn recognising(self, roots: Option<Vec<String>>) -> Self {
        if let (Some(roots), Ok(mut st)) = (roots, self.state.lock()) {
            st.failures = Some(crate::failures::Scanner::new(roots));
        }
        self
    }

    /// Write out `bytes` (whole lines, or a long line's part); `all` when the output ended.
    fn emit(&self, st: &mut State, bytes: &[u8], all: bool) {
        if let Some(re) = &self.counter {
            let raw = String::from_utf8_lossy(bytes);
            st.counted += raw
                .lines()
                .filter(|l| re.is_match(l.trim_end_matches('\r')))
                .count() as u64;
        }
        let ready = self.redactor.unwrap_lines(&mut st.held, bytes, all);
        if ready.is_empty() {
            return;
        }
        // Redacted as bytes: the log keeps what the process printed, text or not.
        let redacted = self.redactor.redact_bytes(&ready);
        if let Some(scanner) = st.failures.as_mut() {
            for line in String::from_utf8_lossy(&redacted).lines() {
                scanner.line(line);
            }
        }
        st.open_log();
        st.write_log(&redacted);
        st.tail.extend(&redacted);
        let excess = st.tail.len().saturating_sub(TAIL_BYTES);
        st.tail.drain(..excess);
    }

    /// Time since the last output (or since the start, when there was none).
    pub(crate) fn quiet_for(&self) -> Duration {
        self.state
            .lock()
            .map(|s| s.last.elapsed())
            .unwrap_or_default()
    }

    pub fn finish(&self) -> Snapshot {
        let Ok(mut st) = self.state.lock() else {
            return Snapshot {
                tail: String::new(),
                bytes: 0,
                logged: false,
                log_error: None,
                unlogged: 0,
                counted: 0,
                failures: Vec::new(),
            };
        };
        let rest: Vec<u8> = std::mem::take(&mut st.pending);
        if !rest.is_empty() || !st.held.is_empty() {
            self.emit(&mut st, &rest, true);
        }
        // A process that printed nothing has no log (nor a folder made for it): a report names
        // a log exactly when there is output in it. A new file is dear on some file systems and
        // most quick steps are silent.
        st.close_log();
        if let Some(log) = st.log.as_mut()
            && let Err(e) = log.flush()
        {
            st.log_error
                .get_or_insert_with(|| format!("cannot write it: {e}"));
        }
        let bytes: Vec<u8> = st.tail.iter().copied().collect();
        Snapshot {
            tail: String::from_utf8_lossy(&bytes).into_owned(),
            bytes: st.bytes,
            logged: st.log.is_some(),
            log_error: st.log_error.clone(),
            unlogged: st.dropped,
            counted: st.counted,
            failures: st
                .failures
                .as_ref()
                .map(|f| f.snapshot())
                .unwrap_or_default(),
        }
    }
}

/// The last `lines` lines of `text`, at most `max` bytes.
pub(crate) fn last_lines(text: &str, lines: usize, max: usize) -> String {
    let mut start = text.len();
    let trimmed = text.trim_end_matches('\n');
    let mut count = 0;
    for (i, c) in trimmed.char_indices().rev() {
        if c == '\n' {
            count += 1;
            if count == lines {
                start = i + 1;
                break;
            }
        }
        start = i;
    }
    let mut s = &trimmed[start.min(trimmed.len())..];
    if s.len() > max {
        let mut cut = s.len() - max;
        while !s.is_char_boundary(cut) {
            cut += 1;
        }
        s = &s[cut..];
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A collector logging to a fresh file, keeping `limit` bytes.
    fn limited(limit: u64) -> (tempfile::TempDir, std::path::PathBuf, Collector) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let c = Collector::new(
            Some(path.clone()),
            Arc::new(Redactor::new(["s3cr3t-value".to_string()])),
        )
        .with_log_limit(limit);
        (dir, path, c)
    }

    #[test]
    fn a_log_stops_at_its_limit_on_a_whole_line_and_ends_with_the_tail() {
        let (_dir, path, c) = limited(100);
        let lines: Vec<String> = (0..10_000)
            .map(|i| format!("line {i:05} s3cr3t-value\n"))
            .collect();
        for chunk in lines.chunks(7) {
            c.push(chunk.concat().as_bytes());
        }
        let snap = c.finish();
        let log = std::fs::read_to_string(&path).unwrap();
        let (head, rest) = log.split_once("[runner: the log stops here").unwrap();
        assert!(head.len() <= 100 && head.ends_with('\n'), "{head:?}");
        assert!(head.starts_with("line 00000 ***\n"), "{head:?}");
        let (_, tail) = rest.split_once("bytes follow]\n").unwrap();
        assert!(tail.ends_with("line 09999 ***\n"), "the last lines end it");
        assert!(
            tail.len() <= TAIL_BYTES && tail.len() > TAIL_BYTES - 20,
            "{}",
            tail.len()
        );
        assert!(!log.contains("s3cr3t"), "redacted in both parts");
        assert!(snap.log_error.is_none(), "nothing failed");
        assert!(snap.unlogged > 100_000, "{}", snap.unlogged);
        assert_eq!(
            snap.bytes,
            lines.iter().map(|l| l.len() as u64).sum::<u64>()
        );
    }

    #[test]
    fn a_log_a_little_over_its_limit_is_whole_but_for_the_notes() {
        let (_dir, path, c) = limited(30);
        c.push("first line is here\nsecond line is here\nthird é\n".as_bytes());
        let snap = c.finish();
        let log = std::fs::read_to_string(&path).unwrap();
        let notes: Vec<&str> = log.lines().filter(|l| l.starts_with("[runner:")).collect();
        assert_eq!(notes.len(), 2, "{log}");
        let text: String = log
            .lines()
            .filter(|l| !l.starts_with("[runner:"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(text, "first line is here\nsecond line is here\nthird é\n");
        assert_eq!(snap.unlogged, 29);
        // A first line longer than the whole limit is cut at it, on a character.
        let (_dir, path, c) = limited(10);
        c.push("a very lxémon line\nnext\n".as_bytes());
        assert_eq!(c.finish().unlogged, "émon line\nnext\n".len() as u64);
        let log = std::fs::read_to_string(&path).unwrap();
        assert!(
            log.starts_with("a very lx\n[runner: the log stops here"),
            "{log}"
        );
        // Under the limit: the log is the output, and complete.
        let (_dir, path, c) = limited(1000);
        c.push(b"short\n");
        assert_eq!(c.finish().unlogged, 0);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "short\n");
    }

    #[test]
    fn redacts_across_chunk_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let c = Collector::new(
            Some(path.clone()),
            Arc::new(Redactor::new(["s3cr3t-value".to_string()])),
        );
        c.push(b"token s3cr");
        c.push(b"3t-value here\nnext");
        let snap = c.finish();
        let log = std::fs::read_to_string(&path).unwrap();
        assert_eq!(log, "token *** here\nnext");
        assert_eq!(snap.tail, log);
    }

    proptest::proptest! {
        /// Any secret, any output around it, any split into chunks, long lines cut: the secret
        /// (and each line of a multi-line one) never reaches the log or the tail.
        #[test]
        fn a_secret_never_reaches_the_log_however_it_arrives(
            secret in "[a-zA-Z0-9+/=]{4,24}(\n[a-zA-Z0-9+/=]{4,24}){0,2}",
            before in "[ a-z\n]{0,40}",
            after in "[ a-z\n]{0,40}",
            cuts in proptest::collection::vec(0usize..200, 0..8),
            line_limit in 8usize..64,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("log");
            let c = Collector::new(Some(path.clone()), Arc::new(Redactor::new([secret.clone()])))
                .with_line_limit(line_limit);
            let text = format!("{before}{secret}{after}{secret}");
            let bytes = text.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort();
            let mut at = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                c.push(&bytes[at..cut.max(at)]);
                at = cut.max(at);
            }
            let snap = c.finish();
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            for shown in [&log, &snap.tail] {
                proptest::prop_assert!(!shown.contains(&secret), "{:?} in {:?}", secret, shown);
                for line in secret.lines() {
                    proptest::prop_assert!(!shown.contains(line), "{:?} in {:?}", line, shown);
                }
            }
        }
    }

    proptest::proptest! {
        /// A secret (or its base64) wrapped at any width, amid any lines, pushed in any chunks:
        /// no line-wide piece of it reaches the log.
        #[test]
        fn a_secret_wrapped_over_lines_never_reaches_the_log(
            secret in "[a-zA-Z0-9_-]{8,40}",
            encode in proptest::bool::ANY,
            width in 3usize..20,
            before in "[ a-z\n]{0,40}",
            after in "[ a-z\n]{0,40}",
            cuts in proptest::collection::vec(0usize..400, 0..8),
        ) {
            use base64::Engine;
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("log");
            let c = Collector::new(Some(path.clone()), Arc::new(Redactor::new([secret.clone()])));
            let shown = if encode {
                base64::engine::general_purpose::STANDARD.encode(&secret)
            } else {
                secret.clone()
            };
            let wrapped: String = shown
                .as_bytes()
                .chunks(width)
                .map(|c| format!("{}\n", String::from_utf8_lossy(c)))
                .collect();
            let text = format!("{before}\n{wrapped}{after}");
            let bytes = text.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort();
            let mut at = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                c.push(&bytes[at..cut.max(at)]);
                at = cut.max(at);
            }
            c.finish();
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            let joined: String = log.lines().collect();
            // What is left of an encoding's last group is shared with what follows it.
            let core = if encode { &shown[..shown.len().saturating_sub(4)] } else { &shown[..] };
            proptest::prop_assert!(
                core.len() < 8 || !joined.contains(core),
                "{:?} in {:?}", core, log
            );
            proptest::prop_assert_eq!(log.matches('\n').count(), text.matches('\n').count());
        }
    }

    #[test]
    fn tail_is_bounded() {
        let c = Collector::new(None, Arc::new(Redactor::default()));
        for _ in 0..10_000 {
            c.push(b"0123456789abcdef\n");
        }
        let snap = c.finish();
        assert!(snap.tail.len() <= TAIL_BYTES);
        assert_eq!(snap.bytes, 170_000);
    }

    #[test]
    fn last_lines_keeps_the_end() {
        assert_eq!(last_lines("a\nb\nc\n", 2, 100), "b\nc");
        assert_eq!(last_lines("abc", 5, 2), "bc");
    }
}
