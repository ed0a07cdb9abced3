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

/// Bodies from this size on are checksummed on a second thread while they
/// are parsed.
const PARALLEL_CHECK_FROM: usize = 1 << 20;

/// [`unseal`], with `parse` run on the body (after the magic) while its
/// checksum is checked, on another thread for a large file: what `parse`
/// returns is kept only when the checksum matches. `parse` may therefore
/// see damaged bytes and must not trust them.
pub(crate) fn unseal_with<T>(
    b: &[u8],
    magic: &[u8; 8],
    min_body: usize,
    parse: impl FnOnce(&[u8]) -> Option<T>,
) -> Option<T> {
    if b.len() < 8 + min_body + 32 || &b[..8] != magic {
        return None;
    }
    let (body, sum) = b.split_at(b.len() - 32);
    let check = || ContentHash::of(body).as_bytes() == sum;
    if body.len() < PARALLEL_CHECK_FROM {
        return if check() { parse(&body[8..]) } else { None };
    }
    std::thread::scope(|s| {
        let (parsed, sound) = match std::thread::Builder::new().spawn_scoped(s, check) {
            Ok(h) => {
                let parsed = parse(&body[8..]);
                (parsed, h.join().unwrap_or(false))
            }
            // No thread to be had: one after the other.
            Err(_) => {
                let sound = check();
                (if sound { parse(&body[8..]) } else { None }, sound)
            }
        };
        if sound { parsed } else { None }
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A body parsed while its checksum is checked is kept only when the
    /// checksum matches, below and above the size checked on a second thread.
    #[test]
    fn a_parse_is_kept_only_when_the_checksum_matches() {
        for size in [100, PARALLEL_CHECK_FROM + 100] {
            let mut out = b"CKPTTEST".to_vec();
            out.extend((0..size).map(|i| (i % 251) as u8));
            seal(&mut out);
            let len = |body: &[u8]| Some(body.len());
            assert_eq!(unseal_with(&out, b"CKPTTEST", 16, len), Some(size));
            assert_eq!(unseal_with(&out, b"CKPTELSE", 16, len), None);
            let mut damaged = out.clone();
            damaged[8 + size / 2] ^= 1;
            assert_eq!(unseal_with(&damaged, b"CKPTTEST", 16, len), None, "{size}");
            assert_eq!(unseal(&damaged, b"CKPTTEST", 16), None);
        }
    }
}
