//! Secrets out of what people read: a [`Redactor`] replaces each secret value, the forms tools
//! print it in (encoded, escaped, with terminal escapes inside, wrapped over lines), with `***`.

/// Secrets shorter than this are not redacted: replacing every `1` or `ab` would destroy logs
/// without hiding anything worth hiding.
pub(crate) const MIN_SECRET_LEN: usize = 4;

/// Lines held back at most while a secret wrapped over lines may run through them: past this,
/// the oldest is written out as it is.
const MAX_HELD_LINES: usize = 256;

/// Replaces secret values with `***`.
#[derive(Debug, Default)]
pub struct Redactor {
    secrets: Vec<String>,
    /// Every secret and form at once, longest first: at each place the longest that matches
    /// wins (leftmost-first), so a secret containing a shorter one is replaced whole.
    all: Option<regex::bytes::Regex>,
    /// What is also matched where a tool wraps it over lines (`base64` at 76 columns, `od` at
    /// 16 bytes a line): each secret and encoded form long enough not to match by chance,
    /// longest first, with the bytes one can begin with.
    wrapped: Option<Wrapped>,
}

#[derive(Debug)]
struct Wrapped {
    forms: Vec<Vec<u8>>,
    any: regex::bytes::Regex,
    first: [bool; 256],
    longest: usize,
}

impl Redactor {
    /// Each value is a secret, and so is each line of a multi-line one (a PEM key is printed
    /// and read line by line).
    pub fn new(values: impl IntoIterator<Item = String>) -> Self {
        let mut secrets: Vec<String> = Vec::new();
        for v in values {
            if v.contains('\n') {
                secrets.extend(
                    v.lines()
                        .map(|l| l.trim_end_matches('\r').to_string())
                        .filter(|l| l.trim().len() >= MIN_SECRET_LEN),
                );
            }
            secrets.push(v);
        }
        secrets.retain(|v| v.len() >= MIN_SECRET_LEN);
        let encoded: Vec<String> = secrets.iter().flat_map(|v| encoded_forms(v)).collect();
        secrets.extend(encoded);
        // Longest first, so a secret containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        let forms: Vec<Vec<u8>> = secrets
            .iter()
            .filter(|s| s.len() >= MIN_ENCODED_LEN && !s.contains('\n'))
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let wrapped = (!forms.is_empty())
            .then(|| {
                let pattern = forms
                    .iter()
                    .map(|f| regex::escape(&String::from_utf8_lossy(f)))
                    .collect::<Vec<_>>()
                    .join("|");
                let any = regex::bytes::RegexBuilder::new(&pattern)
                    .size_limit(64 << 20)
                    .build()
                    .ok()?;
                let mut first = [false; 256];
                for f in &forms {
                    first[usize::from(f[0])] = true;
                }
                let longest = forms.iter().map(Vec::len).max().unwrap_or_default();
                Some(Wrapped {
                    forms,
                    any,
                    first,
                    longest,
                })
            })
            .flatten();
        let all = (!secrets.is_empty())
            .then(|| {
                let pattern = secrets
                    .iter()
                    .map(|s| regex::escape(s))
                    .collect::<Vec<_>>()
                    .join("|");
                regex::bytes::RegexBuilder::new(&pattern)
                    .size_limit(64 << 20)
                    .unicode(false)
                    .build()
                    .ok()
            })
            .flatten();
        Redactor {
            secrets,
            all,
            wrapped,
        }
    }

    /// Takes the lines in `bytes` (the last one may lack its end) after those `held` back, and
    /// gives what can be written now: where a secret runs over line ends (as `base64 -w` and
    /// `od` print one), `***` where it starts and the rest of it taken out of its lines, the
    /// line ends kept. A line stays held while a secret could begin in it and go on into lines
    /// not yet printed; with `all` (the output ended), none does.
    pub(crate) fn unwrap_lines(&self, held: &mut Vec<u8>, bytes: &[u8], all: bool) -> Vec<u8> {
        held.extend_from_slice(bytes);
        let Some(w) = &self.wrapped else {
            return std::mem::take(held);
        };
        // Each line's content (its end left out) as a range of `held`, and the contents joined:
        // the text a wrapped secret is looked for in, with where each line starts in it.
        let lines = |held: &[u8]| {
            let mut ranges = Vec::new();
            let mut at = 0;
            for line in held.split_inclusive(|b| *b == b'\n') {
                let mut n = line.len();
                if line.ends_with(b"\n") {
                    n -= 1;
                    if line[..n].ends_with(b"\r") {
                        n -= 1;
                    }
                }
                ranges.push((at, at + n, at + line.len()));
                at += line.len();
            }
            let mut text = Vec::with_capacity(held.len());
            let mut starts = Vec::with_capacity(ranges.len() + 1);
            for (from, to, _) in &ranges {
                starts.push(text.len());
                text.extend_from_slice(&held[*from..*to]);
            }
            starts.push(text.len());
            (ranges, text, starts)
        };
        let (mut ranges, mut text, mut starts) = lines(held);
        // The line holding byte `at` of the text: the last whose content starts at or before it.
        let line_of = |starts: &[usize], at: usize| starts.partition_point(|s| *s <= at) - 1;
        let spans: Vec<(usize, usize)> = w
            .any
            .find_iter(&text)
            .map(|m| (m.start(), m.end()))
            .filter(|(s, e)| line_of(&starts, *s) != line_of(&starts, e - 1))
            .collect();
        if !spans.is_empty() {
            // Each span's first byte becomes `***`, the rest of it goes; line ends stay.
            let mut mark = vec![0u8; text.len()];
            for (s, e) in spans {
                mark[s] = 1;
                mark[s + 1..e].fill(2);
            }
            let mut out = Vec::with_capacity(held.len());
            for (i, (from, to, end)) in ranges.iter().enumerate() {
                for (k, b) in held[*from..*to].iter().enumerate() {
                    match mark[starts[i] + k] {
                        0 => out.push(*b),
                        1 => out.extend_from_slice(b"***"),
                        _ => {}
                    }
                }
                out.extend_from_slice(&held[*to..*end]);
            }
            *held = out;
            (ranges, text, starts) = lines(held);
        }
        if all {
            return std::mem::take(held);
        }
        // A line is written once no secret can begin in it and run on past what is held: only
        // the last `longest` bytes of the text can.
        let open = |p: usize| {
            let rest = &text[p..];
            w.first[usize::from(text[p])]
                && w.forms
                    .iter()
                    .any(|f| f.len() > rest.len() && f.starts_with(rest))
        };
        let lo = text.len().saturating_sub(w.longest.saturating_sub(1));
        let mut keep = ranges.len();
        for i in (0..ranges.len()).rev() {
            if starts[i + 1] <= lo && starts[i + 1] > starts[i] {
                break;
            }
            if (starts[i].max(lo)..starts[i + 1]).any(open) {
                keep = i;
            }
        }
        keep = keep.max(ranges.len().saturating_sub(MAX_HELD_LINES));
        let mut ready = ranges.get(keep).map_or(held.len(), |r| r.0);
        // A long line not ended yet: a secret still arriving can begin only in its last
        // `longest` bytes, so what comes before them is ready now (cut where no secret is
        // split). Held whole, a line of 40 MB printed without an end would be scanned again at
        // every read.
        if keep + 1 == ranges.len() {
            let (from, to, end) = ranges[keep];
            if to == end && to - from > 2 * w.longest {
                ready = from + self.safe_cut(&held[from..to - w.longest]);
            }
        }
        let rest = held.split_off(ready);
        std::mem::replace(held, rest)
    }

    /// Where `buf` (a partial line) may be cut so that no secret is split: before a suffix that
    /// could be the start of a secret still arriving, and before any secret the cut would
    /// straddle; never inside a character.
    pub(crate) fn safe_cut(&self, buf: &[u8]) -> usize {
        let mut cut = buf.len();
        // The longest suffix that is a proper prefix of a secret.
        for s in &self.secrets {
            let s = s.as_bytes();
            for k in (1..s.len().min(buf.len() + 1)).rev() {
                if buf.ends_with(&s[..k]) {
                    cut = cut.min(buf.len() - k);
                    break;
                }
            }
        }
        // A whole secret across the cut moves the cut to its start.
        loop {
            let straddled = self.secrets.iter().find_map(|s| {
                let s = s.as_bytes();
                (cut.saturating_sub(s.len() - 1)..cut).find(|&p| {
                    p + s.len() <= buf.len() && p + s.len() > cut && buf[p..].starts_with(s)
                })
            });
            match straddled {
                Some(p) => cut = p,
                None => break,
            }
        }
        while cut > 0 && cut < buf.len() && (buf[cut] & 0xC0) == 0x80 {
            cut -= 1;
        }
        cut
    }

    pub(crate) fn redact(&self, text: &str) -> String {
        if self.all.is_none() {
            return text.to_string();
        }
        // Whole secrets (valid UTF-8) are cut out of valid UTF-8 at character boundaries, and
        // an escape sequence is taken whole: the text stays valid.
        String::from_utf8(self.redact_bytes(text.as_bytes()))
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// Redact any bytes (a worker's output need not be text): each secret, and each form of
    /// one, replaced by `***` where it appears as is or with terminal escapes inside it
    /// (`p@ss\x1b[0mw0rd`, a colour changed mid-word: matched in the text as shown and
    /// replaced whole, the escapes within it included). Where secrets overlap, the longest
    /// wins. Linear in the bytes.
    pub(crate) fn redact_bytes(&self, b: &[u8]) -> Vec<u8> {
        let Some(all) = &self.all else {
            return b.to_vec();
        };
        // The shown bytes (escapes left out), and for each where it is in `b`.
        let escaped = b.contains(&0x1b);
        let mut shown = Vec::new();
        let mut at: Vec<usize> = Vec::new();
        if escaped {
            let mut i = 0;
            while i < b.len() {
                if b[i] == 0x1b {
                    i = escape_end(b, i);
                    continue;
                }
                at.push(i);
                shown.push(b[i]);
                i += 1;
            }
        }
        let (text, pos_of): (&[u8], &dyn Fn(usize) -> usize) = if escaped {
            (&shown, &|k| at[k])
        } else {
            (b, &|k| k)
        };
        // Every match, overlapping ones too (a secret that begins inside another one's
        // match), merged into the spans they cover.
        let mut spans: Vec<(usize, usize)> = Vec::new();
        let mut from = 0;
        while let Some(m) = all.find_at(text, from) {
            let (s, e) = (pos_of(m.start()), pos_of(m.end() - 1) + 1);
            match spans.last_mut() {
                Some(last) if s < last.1 => last.1 = last.1.max(e),
                _ => spans.push((s, e)),
            }
            from = m.start() + 1;
        }
        if spans.is_empty() {
            return b.to_vec();
        }
        let mut out = Vec::with_capacity(b.len());
        let mut pos = 0;
        for (s, e) in spans {
            out.extend_from_slice(&b[pos..s]);
            out.extend_from_slice(b"***");
            pos = e;
        }
        out.extend_from_slice(&b[pos..]);
        out
    }
}

/// Where the terminal escape starting at `b[i]` (an ESC) ends: CSI (`ESC [ … final`), OSC
/// (`ESC ] … BEL or ESC \\`), or a two-byte escape; never inside a UTF-8 character.
fn escape_end(b: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    match b.get(j) {
        Some(b'[') => {
            j += 1;
            while j < b.len() && !(0x40..=0x7e).contains(&b[j]) {
                j += 1;
            }
            j += 1;
        }
        Some(b']') => {
            while j < b.len() && b[j] != 0x07 && !(b[j] == 0x1b && b.get(j + 1) == Some(&b'\\')) {
                j += 1;
            }
            j += if b.get(j) == Some(&0x07) { 1 } else { 2 };
        }
        Some(_) => j += 1,
        None => {}
    }
    // A byte that continues a character belongs with it.
    while j < b.len() && (b[j] & 0xC0) == 0x80 {
        j += 1;
    }
    j.min(b.len())
}

/// The shortest encoded form of a secret that is redacted: a few base64 characters would match
/// ordinary text.
const MIN_ENCODED_LEN: usize = 8;

/// The forms a secret takes when a tool prints it encoded rather than as is: base64 (standard
/// and URL-safe, at each of the three alignments it can have inside a longer encoded text, as
/// in `Authorization: Basic base64(user:secret)`: only the characters that depend on the
/// secret alone), percent-encoded (in a URL), JSON-escaped (also with `\/`, and with all but
/// ASCII as `\uXXXX` in either case) and hex (either case) — each when it differs from the value.
fn encoded_forms(value: &str) -> Vec<String> {
    use base64::Engine;
    let bytes = value.as_bytes();
    let mut forms = Vec::new();
    for shift in 0..3 {
        let mut input = vec![0u8; shift];
        input.extend_from_slice(bytes);
        let text = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&input);
        // Characters wholly within the secret's bits: after the prefix's, before a last one
        // shared with what follows.
        let start = (8 * shift).div_ceil(6);
        let end = 8 * input.len() / 6;
        if end > start {
            let middle = &text[start..end];
            forms.push(middle.to_string());
            forms.push(middle.replace('+', "-").replace('/', "_"));
        }
    }
    // Percent-encoded as in a URL, and form-encoded (`+` for a space), each in either case.
    let (mut percent, mut form) = (String::new(), String::new());
    for b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~".contains(b) {
            percent.push(*b as char);
            form.push(*b as char);
        } else {
            percent.push_str(&format!("%{b:02X}"));
            if *b == b' ' {
                form.push('+');
            } else {
                form.push_str(&format!("%{b:02X}"));
            }
        }
    }
    let lower = |s: &str| {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(i) = rest.find('%') {
            out.push_str(&rest[..i]);
            let code = rest.get(i..i + 3).unwrap_or(&rest[i..]);
            out.push_str(&code.to_ascii_lowercase());
            rest = &rest[i + code.len()..];
        }
        out.push_str(rest);
        out
    };
    forms.extend([lower(&percent), lower(&form), percent, form]);
    if let Ok(json) = serde_json::to_string(value) {
        let json = &json[1..json.len() - 1];
        // Some encoders escape `/` too, and some (Python's, by default) all but ASCII.
        forms.push(json.replace('/', "\\/"));
        let (mut lower, mut upper) = (String::new(), String::new());
        for c in json.chars() {
            if c.is_ascii() {
                lower.push(c);
                upper.push(c);
            } else {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    lower.push_str(&format!("\\u{u:04x}"));
                    upper.push_str(&format!("\\u{u:04X}"));
                }
            }
        }
        // And both at once: `\/` and `\uXXXX`.
        forms.extend([
            lower.replace('/', "\\/"),
            upper.replace('/', "\\/"),
            lower,
            upper,
            json.to_string(),
        ]);
    }
    // Hex, as dumps and digest tools print bytes.
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    forms.push(hex.to_uppercase());
    forms.push(hex);
    // And as `od -An -tx1` and `xxd` print them, a space between bytes.
    let spaced: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    forms.push(spaced.join(" ").to_uppercase());
    forms.push(spaced.join(" "));
    forms.retain(|f| f != value && f.len() >= MIN_ENCODED_LEN);
    forms.sort();
    forms.dedup();
    forms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_in_the_forms_tools_print_is_redacted() {
        let secret = "p@ss/w0rd+&x=1 \"q\" é\\z";
        let r = Redactor::new([secret.to_string()]);
        let forms = [
            // Form encoding, and percent-encoding in lower case.
            "p%40ss%2Fw0rd%2B%26x%3D1+%22q%22+%C3%A9%5Cz".to_string(),
            "p%40ss%2fw0rd%2b%26x%3d1%20%22q%22%20%c3%a9%5cz".to_string(),
            // JSON escaping `/` and all but ASCII at once.
            "p@ss\\/w0rd+&x=1 \\\"q\\\" \\u00e9\\\\z".to_string(),
            // Hex with a space between bytes, on one line.
            secret
                .bytes()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" "),
            // An escape sequence inside the printed secret.
            "p@ss/w0\x1b[31mrd+&x=1 \"q\" é\\z".to_string(),
        ];
        for f in forms {
            let line = format!("before {f} after");
            assert_eq!(r.redact(&line), "before *** after", "{f}");
        }
        // Escapes elsewhere stay.
        assert_eq!(r.redact("\x1b[1mbold\x1b[0m"), "\x1b[1mbold\x1b[0m");
    }

    #[test]
    fn any_bytes_are_redacted_as_bytes_and_kept_otherwise() {
        let r = Redactor::new(["s3cr3t-value".to_string()]);
        // Escapes before bytes that are no character, an escape cut short, a secret among them.
        let mut out = vec![0x1b, 0xff, 0x1b, 0xc3, 0xa9, 0x80, 0x1b, b'[', 0xfe];
        out.extend_from_slice(b"xs3cr3t-valuey\x1b");
        out.extend((0..=255u8).rev());
        let got = r.redact_bytes(&out);
        let mut want = vec![0x1b, 0xff, 0x1b, 0xc3, 0xa9, 0x80, 0x1b, b'[', 0xfe];
        want.extend_from_slice(b"x***y\x1b");
        want.extend((0..=255u8).rev());
        assert_eq!(got, want);
        // Every prefix and every chunk of random bytes: never a panic.
        let noise: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for n in 0..200 {
            let _ = r.redact_bytes(&noise[n..n + 300]);
            let _ = r.redact(&String::from_utf8_lossy(&noise[n..n + 300]));
        }
    }

    #[test]
    fn the_longest_secret_wins_whatever_shorter_one_it_contains() {
        let r = Redactor::new([
            "Zq9SECRETvalue-7f3a-XYZ".to_string(),
            "Zq9SECRET".to_string(),
        ]);
        assert_eq!(
            r.redact("Zq9SECRET\x1b[1mvalue-7f3a-XYZ\x1b[0m end"),
            "***\x1b[0m end"
        );
        assert_eq!(r.redact("a Zq9SECRETvalue-7f3a-XYZ b"), "a *** b");
        assert_eq!(r.redact("a Zq9SECRET b"), "a *** b");
        // Two secrets overlapping, neither inside the other: both covered.
        let r = Redactor::new(["1234abcd".to_string(), "abcdefgh".to_string()]);
        assert_eq!(r.redact("x1234abcdefghy"), "x***y");
        assert_eq!(r.redact("x1234\x1b[0mabcdef\x1b[1mghy"), "x***y");
    }

    #[test]
    fn redacts_secrets_longest_first() {
        let r = Redactor::new(["abcd".to_string(), "abcdef".to_string(), "x".to_string()]);
        assert_eq!(r.redact("key=abcdef other=abcd x"), "key=*** other=*** x");
    }

    #[test]
    fn a_secret_printed_encoded_is_redacted_too() {
        use base64::Engine;
        let secret = "tok/0123+4567:89\"ab";
        let r = Redactor::new([secret.to_string()]);
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let url = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        // At each alignment inside a longer encoded text (`user:secret`, as basic auth sends it).
        for user in ["", "u", "us", "use"] {
            for encoded in [
                b64(&format!("{user}:{secret}")),
                url(&format!("{user}{secret}!")),
            ] {
                let text = format!("Authorization: Basic {encoded}");
                let redacted = r.redact(&text);
                assert!(redacted.contains("***"), "{text} -> {redacted}");
                // What is left of the encoding cannot be decoded back into the secret.
                let left = redacted.replace("***", "");
                assert!(!left.contains(&b64(secret)[..8]), "{redacted}");
            }
        }
        assert_eq!(
            r.redact("GET /x?token=tok%2F0123%2B4567%3A89%22ab HTTP/1.1"),
            "GET /x?token=*** HTTP/1.1"
        );
        assert_eq!(
            r.redact(r#"{"token": "tok/0123+4567:89\"ab"}"#),
            r#"{"token": "***"}"#
        );
        // JSON that escapes slashes (as some encoders do), or all but ASCII (as Python's does).
        assert_eq!(
            r.redact(r#"{"token":"tok\/0123+4567:89\"ab"}"#),
            r#"{"token":"***"}"#
        );
        let accented = Redactor::new(["clé-secrète-42".to_string()]);
        for printed in [
            r#"{"k": "cl\u00e9-secr\u00e8te-42"}"#,
            r#"{"k": "cl\u00E9-secr\u00E8te-42"}"#,
        ] {
            assert_eq!(accented.redact(printed), r#"{"k": "***"}"#, "{printed}");
        }
        // Hex, as a dump or a digest tool prints bytes.
        let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
        assert_eq!(r.redact(&format!("bytes {hex} end")), "bytes *** end");
        assert_eq!(
            r.redact(&format!("BYTES {} END", hex.to_uppercase())),
            "BYTES *** END"
        );
        // Short encodings of short secrets are not redacted: they would match ordinary text.
        let short = Redactor::new(["abcd".to_string()]);
        assert_eq!(short.redact("YWJjZA== and abcd"), "YWJjZA== and ***");
    }

    #[test]
    fn each_line_of_a_multi_line_secret_is_a_secret() {
        let key = "-----BEGIN KEY-----\nMIIEvQIBADANBgkq\nhkiG9w0BAQEFAASC\n-----END KEY-----";
        let r = Redactor::new([key.to_string()]);
        let text = "got hkiG9w0BAQEFAASC from the agent";
        assert_eq!(r.redact(text), "got *** from the agent");
    }

    #[test]
    fn a_secret_a_tool_wraps_over_lines_is_redacted() {
        use base64::Engine;
        let secret = "tok-0123456789abcdef";
        let r = Redactor::new([secret.to_string()]);
        let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
        let wrap = |text: &str, width: usize| {
            text.as_bytes()
                .chunks(width)
                .map(|c| format!("{}\n", String::from_utf8_lossy(c)))
                .collect::<String>()
        };
        let hex: Vec<String> = secret.bytes().map(|b| format!("{b:02x}")).collect();
        let od: String = hex
            .chunks(4)
            .map(|c| format!(" {}\n", c.join(" ")))
            .collect();
        for printed in [
            wrap(&b64, 8),
            wrap(&b64, 5),
            od,
            wrap(secret, 7),
            format!("key: {}\r\n{}\r\n", &secret[..9], &secret[9..]),
        ] {
            let mut held = Vec::new();
            let text = format!("before\n{printed}after\n");
            let mut out = Vec::new();
            for line in text.split_inclusive('\n') {
                out.extend(r.unwrap_lines(&mut held, line.as_bytes(), false));
            }
            out.extend(r.unwrap_lines(&mut held, b"", true));
            let out = r.redact(&String::from_utf8(out).unwrap());
            assert!(
                out.starts_with("before\n") && out.ends_with("after\n"),
                "{out:?}"
            );
            assert!(out.contains("***"), "{printed:?} -> {out:?}");
            assert_eq!(
                out.matches('\n').count(),
                text.matches('\n').count(),
                "line ends are kept: {out:?}"
            );
            let joined: String = out.lines().map(|l| l.trim_end_matches('\r')).collect();
            for piece in [&secret[..8], &secret[8..16], &b64[..8], &b64[8..16]] {
                assert!(!joined.contains(piece), "{piece} left in {out:?}");
            }
        }
    }

    #[test]
    fn lines_are_held_back_only_while_a_wrapped_secret_may_run_through_them() {
        let r = Redactor::new(["tok-0123456789abcdef".to_string()]);
        let mut held = Vec::new();
        // Nothing in it can begin the secret: written at once.
        assert_eq!(
            r.unwrap_lines(&mut held, b"plain line\n", false),
            b"plain line\n"
        );
        // It ends with what could be the secret's start: held until the next line says not.
        assert!(r.unwrap_lines(&mut held, b"id tok-01\n", false).is_empty());
        assert_eq!(
            r.unwrap_lines(&mut held, b"and more\n", false),
            b"id tok-01\nand more\n"
        );
        // Held while the secret goes on, then cut where it ran.
        assert!(r.unwrap_lines(&mut held, b"x tok-01\n", false).is_empty());
        assert!(r.unwrap_lines(&mut held, b"23456\n", false).is_empty());
        assert_eq!(
            r.unwrap_lines(&mut held, b"789abcdef y\n", false),
            b"x ***\n\n y\n"
        );
        // The end of the output lets everything out.
        assert!(r.unwrap_lines(&mut held, b"tok-0123\n", false).is_empty());
        assert_eq!(r.unwrap_lines(&mut held, b"", true), b"tok-0123\n");
        // A line that never ends the suspicion is held at most MAX_HELD_LINES deep.
        let long = Redactor::new(["a".repeat(2000)]);
        let mut held = Vec::new();
        let mut out = Vec::new();
        for _ in 0..1000 {
            out.extend(long.unwrap_lines(&mut held, b"a\n", false));
        }
        assert_eq!(held.len(), 2 * MAX_HELD_LINES);
        assert_eq!(out.len(), 2 * (1000 - MAX_HELD_LINES));
        // With no secret long enough, nothing is ever held.
        let none = Redactor::new(["abcd".to_string()]);
        let mut held = Vec::new();
        assert_eq!(none.unwrap_lines(&mut held, b"ab\n", false), b"ab\n");
    }
}
