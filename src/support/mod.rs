//! Small helpers every layer uses: atomic file writes, the clock, this host's and a process's
//! identity, hex. Like [`crate::vocab`], this module imports nothing of runner's, so any module
//! may import it without an arrow pointing up.

pub mod blocking;
pub mod clock;
pub mod fs;
pub mod host;
pub mod hosts;
pub mod limits;
pub mod refname;
pub mod settings;
pub mod text;

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_lowercase_and_two_digits_per_byte() {
        assert_eq!(super::hex(&[0, 15, 16, 255]), "000f10ff");
        assert_eq!(super::hex(&[]), "");
    }
}
