//! Content hashes: sha256 digests written as `sha256:<64 hex>`.
//!
//! This module owns the hash type used for blobs, records and checkpoints, and
//! the streaming hasher. It does no file I/O of its own.

use std::fmt;
use std::io::{self, Read};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// A sha256 digest; displayed and serialised as `sha256:<64 lowercase hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash([u8; 32]);

/// The hash of zero bytes (an empty file, which is not the same as an absent one).
pub const EMPTY_SHA256_HEX: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

impl ContentHash {
    /// Returns the hash of `bytes`.
    pub fn of(bytes: &[u8]) -> ContentHash {
        ContentHash(Sha256::digest(bytes).into())
    }

    /// Wraps raw digest bytes.
    pub fn from_bytes(b: [u8; 32]) -> ContentHash {
        ContentHash(b)
    }

    /// Returns the raw 32 digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Returns the 64-character lowercase hex form (without the `sha256:` prefix).
    pub fn hex(&self) -> String {
        hex(&self.0)
    }

    /// Parses 64 lowercase hex digits (no prefix). Anything else is refused, so a
    /// hash can never smuggle a path separator or `..` into a blob path.
    pub fn from_hex(s: &str) -> Option<ContentHash> {
        from_hex_exact(s).map(ContentHash)
    }

    /// Returns a short form for human output (`sha256:` + 12 hex digits).
    pub fn short(&self) -> String {
        let h = self.hex();
        h[..12].to_string()
    }
}

/// Parses exactly `2 × N` lowercase hex digits into `N` bytes.
fn from_hex_exact<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, chunk) in b.chunks_exact(2).enumerate() {
        out[i] = (nibble(chunk[0])? << 4) | nibble(chunk[1])?;
    }
    Some(out)
}

/// Parses a git object id (40 lowercase hex digits).
pub fn oid_from_hex(s: &str) -> Option<[u8; 20]> {
    from_hex_exact(s)
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Writes `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The error for a string that is not `sha256:<64 lowercase hex>`.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a hash of the form sha256:<64 lowercase hex digits>")]
pub struct BadHash(pub String);

impl FromStr for ContentHash {
    type Err = BadHash;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.strip_prefix("sha256:")
            .and_then(ContentHash::from_hex)
            .ok_or_else(|| BadHash(s.chars().take(80).collect()))
    }
}

impl Serialize for ContentHash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ContentHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An incremental sha256 hasher.
#[derive(Default, Clone)]
pub struct Hasher(Sha256);

impl Hasher {
    /// Returns a fresh hasher.
    pub fn new() -> Hasher {
        Hasher(Sha256::new())
    }
    /// Feeds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    /// Returns the digest.
    pub fn finish(self) -> ContentHash {
        ContentHash(self.0.finalize().into())
    }
}

/// Hashes everything `reader` yields, in bounded memory; returns the hash and byte count.
pub fn hash_reader(mut reader: impl Read) -> io::Result<(ContentHash, u64)> {
    let mut h = Hasher::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        let k = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((h.finish(), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_hash_is_the_well_known_constant() {
        assert_eq!(ContentHash::of(b"").hex(), EMPTY_SHA256_HEX);
    }

    #[test]
    fn parse_round_trips_and_refuses_junk() {
        let h = ContentHash::of(b"abc");
        let s = h.to_string();
        assert_eq!(s.parse::<ContentHash>().unwrap(), h);
        assert!("sha256:../../etc/passwd".parse::<ContentHash>().is_err());
        assert!(s.to_uppercase().parse::<ContentHash>().is_err());
        assert!(s[7..].parse::<ContentHash>().is_err(), "prefix is required");
    }
}
