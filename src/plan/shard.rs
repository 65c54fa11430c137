//! Sharding a manifest's repositories over N independent runners (CI jobs, a Kubernetes
//! Indexed Job) without a shared database: each repository belongs to exactly one shard, decided
//! by a stable hash of its identity — its url when it has one, else its name — so the same
//! repository is in the same shard on every machine, in every run, whatever else the manifest
//! holds. With one repository in one shard, two shards never touch one repository.
//!
//! The hash is SHA-256 of the identity, its first 8 bytes as a big-endian key for Lamping and
//! Veach's jump consistent hash: the shards are evenly likely, and going from N to N+1 shards
//! moves only the repositories the new shard takes.

use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;

/// Shard `index` of `total`, counted from 0 as Kubernetes' `JOB_COMPLETION_INDEX` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub total: u32,
}

/// The most shards a manifest may be split into.
pub(crate) const MAX_SHARDS: u32 = 10_000;

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (k, n) = s
            .split_once('/')
            .ok_or_else(|| format!("`{s}` is not K/N (shard K of N, K counted from 0)"))?;
        let index: u32 = k
            .trim()
            .parse()
            .map_err(|_| format!("`{k}` in `{s}` is not a shard number"))?;
        let total: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("`{n}` in `{s}` is not a number of shards"))?;
        if total == 0 || total > MAX_SHARDS {
            return Err(format!(
                "`{s}`: the number of shards must be 1 to {MAX_SHARDS}"
            ));
        }
        if index >= total {
            return Err(format!(
                "`{s}`: shards are counted from 0 to {} (as JOB_COMPLETION_INDEX is)",
                total - 1
            ));
        }
        Ok(Shard { index, total })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.total)
    }
}

impl Shard {
    /// Whether the repository with this identity is in this shard.
    pub fn holds(&self, identity: &str) -> bool {
        of(identity, self.total) == self.index
    }
}

/// What a repository is known by across machines: its url (credentials removed) when it has
/// one, else its name.
pub fn identity(l: &super::repos::Located) -> &str {
    match l.source {
        crate::manifest::SourceKind::Url => &l.location,
        _ => &l.name,
    }
}

/// The shard (of `total`) of the repository with this identity.
pub fn of(identity: &str, total: u32) -> u32 {
    let digest = Sha256::digest(identity.as_bytes());
    let mut key = [0u8; 8];
    key.copy_from_slice(&digest[..8]);
    jump(u64::from_be_bytes(key), total)
}

/// Jump consistent hash (Lamping and Veach, 2014): a bucket in `0..buckets`.
fn jump(mut key: u64, buckets: u32) -> u32 {
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    while j < i64::from(buckets) {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_k_of_n_from_zero() {
        assert_eq!("2/4".parse::<Shard>(), Ok(Shard { index: 2, total: 4 }));
        assert!("4/4".parse::<Shard>().unwrap_err().contains("from 0 to 3"));
        assert!("1/0".parse::<Shard>().is_err());
        assert!("x/2".parse::<Shard>().is_err());
        assert!("2".parse::<Shard>().is_err());
    }

    #[test]
    fn the_same_identity_is_always_in_the_same_shard() {
        // Fixed values: a change of the hash would move repositories between machines.
        assert_eq!(of("api", 4), of("api", 4));
        let spread: Vec<u32> = (0..12).map(|i| of(&format!("repo-{i:02}"), 4)).collect();
        assert_eq!(spread, FIXED_SPREAD);
    }

    /// `of("repo-00".."repo-11", 4)`, recorded once.
    const FIXED_SPREAD: [u32; 12] = [0, 1, 0, 0, 2, 1, 2, 1, 0, 0, 1, 2];

    proptest! {
        #[test]
        fn every_identity_is_in_exactly_one_shard(id in ".{0,40}", total in 1u32..50) {
            let holders = (0..total).filter(|&k| Shard { index: k, total }.holds(&id)).count();
            prop_assert_eq!(holders, 1);
        }

        #[test]
        fn one_more_shard_moves_only_what_it_takes(id in ".{0,40}", total in 1u32..50) {
            let before = of(&id, total);
            let after = of(&id, total + 1);
            prop_assert!(after == before || after == total);
        }
    }
}
