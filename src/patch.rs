//! Unified-diff patch artifacts (`artifacts/patches/<patch>.diff`), in the form
//! `git apply` accepts: a `diff --git` header, mode lines, and hunks computed on
//! lines split at `\n` only (a bare `\r` stays inside its line, so CRLF files and
//! stray carriage returns produce valid patches; DEPENDENCIES.md gotcha 3).

use similar::TextDiff;

/// One side of a patch: the bytes and the git-style mode, or absent.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// The content (`None`: the path is absent on this side).
    pub bytes: Option<&'a [u8]>,
    /// git-style mode (`100644`, `100755`, `120000`).
    pub mode: Option<&'a str>,
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

/// Builds a git-apply-compatible diff of `path` from `before` to `after`.
pub fn unified_diff(path: &[u8], before: Side<'_>, after: Side<'_>) -> Vec<u8> {
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
    if is_binary(old) || is_binary(new) {
        out.extend_from_slice(
            format!(
                "Binary files {} and {} differ\n",
                if before.bytes.is_some() {
                    a.as_str()
                } else {
                    "/dev/null"
                },
                if after.bytes.is_some() {
                    b.as_str()
                } else {
                    "/dev/null"
                }
            )
            .as_bytes(),
        );
        return out;
    }
    let old_lines: Vec<&[u8]> = old.split_inclusive(|&c| c == b'\n').collect();
    let new_lines: Vec<&[u8]> = new.split_inclusive(|&c| c == b'\n').collect();
    let diff = TextDiff::configure()
        .newline_terminated(true)
        .diff_slices(&old_lines, &new_lines);
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
    let mut udiff = diff.unified_diff();
    udiff.context_radius(3).header(&from, &to);
    // Writing into a Vec cannot fail.
    let _ = udiff.to_writer(&mut out);
    out
}
