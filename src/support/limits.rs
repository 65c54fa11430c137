//! Resource limits for the processes of one item, and the sizes they are written in.

use serde::Serialize;

/// What one item's processes may use together, enforced by the item's cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Limits {
    /// Bytes of memory (`memory.max`; `memory.limit_in_bytes` on a cgroup v1 hierarchy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Processes and threads at once (`pids.max`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// CPUs' worth of time (`cpu.max`; `cpu.cfs_quota_us` on cgroup v1): `1.5` is one and a half.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        self.memory.is_none() && self.pids.is_none() && self.cpu.is_none()
    }
}

/// A size in bytes: a whole number, optionally followed by `K`, `M`, `G` or `T` (powers of 1024;
/// a trailing `B` or `iB` is allowed: `512M`, `4GiB`). Errors are lowercase fragments.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    if digits == 0 {
        return Err(format!(
            "`{t}` is not a size: a whole number of bytes, or with a unit such as `512M` or `4G`"
        ));
    }
    let (number, unit) = t.split_at(digits);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        other => {
            return Err(format!(
                "`{other}` is not a size unit: use K, M, G or T (powers of 1024)"
            ));
        }
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| format!("`{t}` is too large"))
}

/// A size as [`parse_size`] reads it, in the largest unit that divides it.
pub(crate) fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_powers_of_1024() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert!(parse_size("G").is_err());
        assert!(parse_size("4X").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
        for n in [1, 1024, 4 << 30, 3 << 20, 1500] {
            assert_eq!(parse_size(&format_size(n)), Ok(n));
        }
    }
}
