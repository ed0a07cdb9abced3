//! Unified-diff patch artifacts (`artifacts/patches/<patch>.diff`), in the form
//! `git apply` accepts: a `diff --git` header, mode lines, and hunks computed on
//! lines split at `\n` only (a bare `\r` stays inside its line, so CRLF files and
//! stray carriage returns produce valid patches; DEPENDENCIES.md gotcha 3).
//!
//! A binary file, or one with a side above `diff_max_bytes`, gets git's
//! summary instead ([`Binary::Summary`]): its bytes are already in the blob
//! store, and a base85 copy of both sides would more than double what the
//! change costs on disk. `--binary` renders the literal patch from the
//! blobs when someone asks for it.

use similar::TextDiff;

/// One side of a patch: the bytes and the git-style mode, or absent.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// The content (`None`: the path is absent on this side).
    pub bytes: Option<&'a [u8]>,
    /// git-style mode (`100644`, `100755`, `120000`).
    pub mode: Option<&'a str>,
    /// The bytes' git blob id, when the caller knows it (it is then not
    /// computed again for the `index` line).
    pub git_id: Option<[u8; 20]>,
}

/// True when `bytes` look binary to git (a NUL in the first 8000 bytes).
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(8000)].contains(&0)
}

/// Quotes a path the way git does when it has unusual bytes.
pub fn quote_path(prefix: &str, path: &[u8]) -> String {
    let needs = path
        .iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\' || b >= 0x7f);
    if !needs {
        return format!("{prefix}{}", String::from_utf8_lossy(path));
    }
    let mut s = String::from("\"");
    s.push_str(prefix);
    for &b in path {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'\r' => s.push_str("\\r"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\{b:03o}")),
        }
    }
    s.push('"');
    s
}

/// The default of `diff_max_bytes`: a file with a side above it gets git's
/// one-line summary in its patch artifact, not a diff.
pub const DEFAULT_DIFF_MAX_BYTES: u64 = 8 << 20;

/// How a diff shows a file that is binary (or above its size limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    /// git's summary, `Binary files a/x and b/x differ` under the full
    /// `index` line, as `git diff --full-index` prints it: the bytes are in
    /// the blob store, named by the record's hashes. What patch artifacts
    /// and `ckpt diff` hold for binary and large files.
    Summary,
    /// A `GIT binary patch` with both contents, as `git diff --binary`
    /// prints it (`git apply` can apply it).
    Literal,
}

/// Builds a git-apply-compatible diff of `path` from `before` to `after`,
/// binary files as literal patches (`git diff --full-index --binary`).
pub fn unified_diff(path: &[u8], before: Side<'_>, after: Side<'_>) -> Vec<u8> {
    diff(path, before, after, Binary::Literal, u64::MAX)
}

/// Builds the diff of `path` from `before` to `after`: text as a unified
/// diff, binary files as `binary` says, and with [`Binary::Summary`] also a
/// file with a side above `max_bytes` (a diff of it could cost more than the
/// bytes themselves; the blob store keeps them).
pub fn diff(
    path: &[u8],
    before: Side<'_>,
    after: Side<'_>,
    binary: Binary,
    max_bytes: u64,
) -> Vec<u8> {
    let a = quote_path("a/", path);
    let b = quote_path("b/", path);
    let mut out = Vec::new();
    out.extend_from_slice(format!("diff --git {a} {b}\n").as_bytes());
    match (before.bytes, after.bytes) {
        (None, Some(_)) => out.extend_from_slice(
            format!("new file mode {}\n", after.mode.unwrap_or("100644")).as_bytes(),
        ),
        (Some(_), None) => out.extend_from_slice(
            format!("deleted file mode {}\n", before.mode.unwrap_or("100644")).as_bytes(),
        ),
        _ => {
            if let (Some(m1), Some(m2)) = (before.mode, after.mode)
                && m1 != m2
            {
                out.extend_from_slice(format!("old mode {m1}\nnew mode {m2}\n").as_bytes());
            }
        }
    }
    let old = before.bytes.unwrap_or(b"");
    let new = after.bytes.unwrap_or(b"");
    if old == new {
        return out;
    }
    let from = if before.bytes.is_some() {
        a
    } else {
        "/dev/null".to_string()
    };
    let to = if after.bytes.is_some() {
        b
    } else {
        "/dev/null".to_string()
    };
    let large = old.len() as u64 > max_bytes || new.len() as u64 > max_bytes;
    if binary == Binary::Summary && (large || is_binary(old) || is_binary(new)) {
        out.extend_from_slice(index_line(before, after).as_bytes());
        out.extend_from_slice(format!("Binary files {from} and {to} differ\n").as_bytes());
        return out;
    }
    if is_binary(old) || is_binary(new) {
        binary_patch(&mut out, before, after);
        return out;
    }
    // The index line carries the mode when it is unchanged; without it `git
    // apply` would turn a symlink's patch into a regular file.
    out.extend_from_slice(index_line(before, after).as_bytes());
    let old_lines: Vec<&[u8]> = lines(old).collect();
    let new_lines: Vec<&[u8]> = lines(new).collect();
    let diff = TextDiff::configure()
        .newline_terminated(true)
        .diff_slices(&old_lines, &new_lines);
    let mut udiff = diff.unified_diff();
    udiff.context_radius(3).header(&from, &to);
    // Writing into a Vec cannot fail.
    let _ = udiff.to_writer(&mut out);
    out
}

/// Splits `bytes` into lines, each with its `\n` (the last one may have
/// none): `split_inclusive`, with the newlines found by `memchr` (a
/// byte-at-a-time split was a tenth of a 100-file shell post's CPU time).
pub(crate) fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    let mut ends = memchr::memchr_iter(b'\n', bytes);
    std::iter::from_fn(move || {
        if start >= bytes.len() {
            return None;
        }
        let end = ends.next().map_or(bytes.len(), |i| i + 1);
        let line = &bytes[start..end];
        start = end;
        Some(line)
    })
}

/// The `index <old>..<new>[ <mode>]` line: full git blob ids (binary patches
/// need them) and the mode when it is unchanged.
fn index_line(before: Side<'_>, after: Side<'_>) -> String {
    let id = |side: Side<'_>| match (side.bytes, side.git_id) {
        (Some(_), Some(known)) => crate::hash::hex(&known),
        (Some(b), None) => crate::git::blob_id(b),
        (None, _) => "0".repeat(40),
    };
    let mode = match (before.bytes, after.bytes, before.mode, after.mode) {
        (Some(_), Some(_), Some(m1), Some(m2)) if m1 == m2 => format!(" {m1}"),
        _ => String::new(),
    };
    format!("index {}..{}{mode}\n", id(before), id(after))
}

/// Writes a `GIT binary patch` (literal forward and reverse hunks) with the full
/// `index` line `git apply` requires for binary files.
fn binary_patch(out: &mut Vec<u8>, before: Side<'_>, after: Side<'_>) {
    out.extend_from_slice(index_line(before, after).as_bytes());
    out.extend_from_slice(b"GIT binary patch\n");
    literal_hunk(out, after.bytes.unwrap_or(b""));
    out.push(b'\n');
    literal_hunk(out, before.bytes.unwrap_or(b""));
    out.push(b'\n');
}

fn literal_hunk(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(format!("literal {}\n", data.len()).as_bytes());
    let z = zlib_stored(data);
    for line in z.chunks(52) {
        let n = line.len() as u8;
        out.push(if n <= 26 { b'A' + n - 1 } else { b'a' + n - 27 });
        base85(out, line);
        out.push(b'\n');
    }
}

/// A zlib stream of uncompressed ("stored") deflate blocks: what `git apply`
/// inflates, without a compression dependency. Binary patches are artifacts for
/// people and `git apply`; the blob store keeps the real content.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut z = Vec::with_capacity(data.len() + data.len() / 65535 * 5 + 11);
    z.extend_from_slice(&[0x78, 0x01]);
    let mut chunks = data.chunks(65535).peekable();
    if chunks.peek().is_none() {
        z.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(c) = chunks.next() {
        z.push(u8::from(chunks.peek().is_none()));
        let len = c.len() as u16;
        z.extend_from_slice(&len.to_le_bytes());
        z.extend_from_slice(&(!len).to_le_bytes());
        z.extend_from_slice(c);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    z.extend_from_slice(&((b << 16) | a).to_be_bytes());
    z
}

fn base85(out: &mut Vec<u8>, data: &[u8]) {
    const ALPHABET: &[u8; 85] =
        b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";
    for chunk in data.chunks(4) {
        let mut v = 0u32;
        for i in 0..4 {
            v = (v << 8) | u32::from(*chunk.get(i).unwrap_or(&0));
        }
        let mut enc = [0u8; 5];
        for e in enc.iter_mut().rev() {
            *e = ALPHABET[(v % 85) as usize];
            v /= 85;
        }
        out.extend_from_slice(&enc);
    }
}

#[cfg(test)]
mod tests {
    use super::lines;

    #[test]
    fn lines_split_like_split_inclusive() {
        for s in [
            &b""[..],
            b"\n",
            b"\n\n",
            b"a",
            b"a\n",
            b"a\nb",
            b"a\r\nb\r\n",
            b"\na\n\nb",
            b"no newline at all",
        ] {
            let want: Vec<&[u8]> = s.split_inclusive(|&b| b == b'\n').collect();
            let got: Vec<&[u8]> = lines(s).collect();
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(s));
        }
    }
}
