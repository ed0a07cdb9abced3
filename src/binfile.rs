//! The envelope and readers of ckpt's binary cache files (the stat snapshot,
//! the agent-file registry): an 8-byte magic, a little-endian body, then the
//! sha256 of both, so a rewrite a crash cut short is told apart from a whole
//! one.

use crate::hash::ContentHash;

/// Appends the checksum of everything in `out` (the magic included).
pub(crate) fn seal(out: &mut Vec<u8>) {
    let sum = ContentHash::of(out);
    out.extend_from_slice(sum.as_bytes());
}

/// The body after `magic` when `b` starts with it, holds at least
/// `min_body` bytes and its checksum matches; `None` otherwise.
pub(crate) fn unseal<'a>(b: &'a [u8], magic: &[u8; 8], min_body: usize) -> Option<&'a [u8]> {
    if b.len() < 8 + min_body + 32 || &b[..8] != magic {
        return None;
    }
    let (body, sum) = b.split_at(b.len() - 32);
    (ContentHash::of(body).as_bytes() == sum).then(|| &body[8..])
}

/// The next `n` bytes of `r`.
pub(crate) fn take<'a>(r: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    (r.len() >= n).then(|| {
        let (a, b) = r.split_at(n);
        *r = b;
        a
    })
}

pub(crate) fn u32_le(r: &mut &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(take(r, 4)?.try_into().ok()?))
}

pub(crate) fn u64_le(r: &mut &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(take(r, 8)?.try_into().ok()?))
}
