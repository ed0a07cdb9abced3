//! Path safety: the only place where a path from outside (a hook payload, a
//! ledger line, the command line) becomes a [`RelPath`].
//!
//! A `RelPath` is workspace-relative, lexically normalised, `/`-separated and
//! never empty. It cannot name the workspace root, escape it with `..`, carry a
//! NUL byte, or point into `.agent-runtime/` or any `.git/` directory. Backslashes
//! are ordinary bytes (Linux file names may contain them). Paths are bytes, not
//! strings: a non-UTF-8 file name is kept exactly and serialised as
//! `{"b64": "<base64>"}` instead of a JSON string, so two such names never
//! collide (RELIABILITY.md P7).
//!
//! This module is pure: it never touches the file system. Opening a `RelPath`
//! safely (beneath a directory handle, refusing symlinks) is `fs_util`'s job.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The runtime directory's name, at the workspace root.
pub const RUNTIME_DIR: &str = ".agent-runtime";

/// Longest accepted path, in bytes (Linux `PATH_MAX` is 4096 including the NUL).
pub const MAX_PATH_BYTES: usize = 4095;
/// Longest accepted path component, in bytes (Linux `NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path leaves the workspace (`..` above the root, or absolute elsewhere).
    #[error("E_PATH_OUTSIDE: `{0}` is outside the workspace")]
    Outside(String),
    /// The path is empty, names the root, has a NUL byte or a trailing slash.
    #[error("E_PATH_INVALID: `{path}` is not a valid file path ({why})")]
    Invalid {
        /// The path as given (lossy, for display).
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The path or one of its components is too long.
    #[error("E_PATH_TOO_LONG: `{0}` is too long (at most 4095 bytes, 255 per component)")]
    TooLong(String),
    /// The path is inside `.agent-runtime/` or a `.git/` directory.
    #[error(
        "E_PATH_PROTECTED: `{0}` is inside ckpt's or git's own data; ckpt never records or writes there"
    )]
    Protected(String),
}

impl PathError {
    /// Returns the stable error code (`E_PATH_OUTSIDE`, …).
    pub fn code(&self) -> &'static str {
        match self {
            PathError::Outside(_) => "E_PATH_OUTSIDE",
            PathError::Invalid { .. } => "E_PATH_INVALID",
            PathError::TooLong(_) => "E_PATH_TOO_LONG",
            PathError::Protected(_) => "E_PATH_PROTECTED",
        }
    }
}

/// A checked, normalised, workspace-relative path.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelPath(Vec<u8>);

fn shown(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    let mut out: String = s.chars().take(200).collect();
    out = out.replace('\0', "\\0");
    if s.chars().count() > 200 {
        out.push('…');
    }
    out
}

fn is_dot_git(c: &[u8]) -> bool {
    c.eq_ignore_ascii_case(b".git")
}

impl RelPath {
    /// Checks and normalises a path that is already meant to be workspace-relative
    /// (as stored in the ledger). `..` components are refused outright here: a
    /// recorded path is always normalised, so one that is not was not written by ckpt.
    pub fn from_ledger(bytes: &[u8]) -> Result<RelPath, PathError> {
        if bytes.first() == Some(&b'/') {
            return Err(PathError::Outside(shown(bytes)));
        }
        let rel = Self::normalise(bytes, &[])?;
        if rel.0 != bytes {
            return Err(PathError::Invalid {
                path: shown(bytes),
                why: "recorded paths must already be normalised",
            });
        }
        Ok(rel)
    }

    /// Turns a path from a hook payload or the command line into a `RelPath`.
    ///
    /// Absolute paths must lie lexically under one of `roots` (the workspace root
    /// as given and as canonicalised); no symlink is resolved. Relative paths are
    /// taken relative to `base` (a workspace-relative directory, e.g. the payload's
    /// `cwd`), or the root when `base` is `None`.
    pub fn from_input(
        input: &[u8],
        roots: &[&Path],
        base: Option<&RelPath>,
    ) -> Result<RelPath, PathError> {
        if input.contains(&0) {
            return Err(PathError::Invalid {
                path: shown(input),
                why: "it contains a NUL byte",
            });
        }
        if input.first() == Some(&b'/') {
            let norm = lexical_components(input).map_err(|_| PathError::Outside(shown(input)))?;
            for root in roots {
                let root_c = match lexical_components(root.as_os_str().as_bytes()) {
                    Ok(c) => c,
                    Err(_) => continue,
                };
                if norm.len() >= root_c.len() && norm[..root_c.len()] == root_c[..] {
                    let rest = norm[root_c.len()..].join(&b'/');
                    if rest.is_empty() {
                        return Err(PathError::Invalid {
                            path: shown(input),
                            why: "it is the workspace root itself",
                        });
                    }
                    let trailing = input.ends_with(b"/");
                    let mut r = rest;
                    if trailing {
                        r.push(b'/');
                    }
                    return Self::normalise(&r, &[]);
                }
            }
            return Err(PathError::Outside(shown(input)));
        }
        let prefix: &[u8] = base.map(|b| b.as_bytes()).unwrap_or(b"");
        Self::normalise(input, prefix)
    }

    fn normalise(input: &[u8], prefix: &[u8]) -> Result<RelPath, PathError> {
        if input.contains(&0) {
            return Err(PathError::Invalid {
                path: shown(input),
                why: "it contains a NUL byte",
            });
        }
        if input.is_empty() {
            return Err(PathError::Invalid {
                path: String::new(),
                why: "it is empty",
            });
        }
        if input.ends_with(b"/") {
            return Err(PathError::Invalid {
                path: shown(input),
                why: "a trailing slash names a directory, not a file",
            });
        }
        let mut parts: Vec<&[u8]> = Vec::new();
        for c in prefix
            .split(|&b| b == b'/')
            .chain(input.split(|&b| b == b'/'))
        {
            match c {
                b"" | b"." => {}
                b".." => {
                    if parts.pop().is_none() {
                        return Err(PathError::Outside(shown(input)));
                    }
                }
                c => {
                    if c.len() > MAX_NAME_BYTES {
                        return Err(PathError::TooLong(shown(input)));
                    }
                    parts.push(c);
                }
            }
        }
        if parts.is_empty() {
            return Err(PathError::Invalid {
                path: shown(input),
                why: "it is the workspace root itself",
            });
        }
        let joined = parts.join(&b'/');
        if joined.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong(shown(input)));
        }
        if parts[0] == RUNTIME_DIR.as_bytes() || parts.iter().any(|c| is_dot_git(c)) {
            return Err(PathError::Protected(shown(&joined)));
        }
        Ok(RelPath(joined))
    }

    /// Returns the path's bytes (`/`-separated).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Returns the path as `&str` when it is valid UTF-8.
    pub fn to_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// Returns the path as an `OsStr`, for system calls.
    pub fn as_os_str(&self) -> &OsStr {
        OsStr::from_bytes(&self.0)
    }

    /// Returns the path as a `Path`, for system calls relative to a directory handle.
    pub fn as_path(&self) -> &Path {
        Path::new(self.as_os_str())
    }

    /// Returns the parent directory (`None` for a top-level name) and the file name.
    pub fn split_parent(&self) -> (Option<&[u8]>, &[u8]) {
        match self.0.iter().rposition(|&b| b == b'/') {
            Some(i) => (Some(&self.0[..i]), &self.0[i + 1..]),
            None => (None, &self.0),
        }
    }

    /// Returns a display form: the path itself, or a lossy form for non-UTF-8 names.
    pub fn display(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }

    /// Returns the components.
    pub fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|&b| b == b'/')
    }
}

/// Splits an absolute path into normalised components; `..` above `/` is an error.
fn lexical_components(p: &[u8]) -> Result<Vec<&[u8]>, ()> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in p.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                parts.pop().ok_or(())?;
            }
            c => parts.push(c),
        }
    }
    Ok(parts)
}

/// Maps keyed by `RelPath` can be searched with the raw bytes of a path
/// (`Eq`, `Ord` and `Hash` are those of the bytes).
impl std::borrow::Borrow<[u8]> for RelPath {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

impl fmt::Debug for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.display())
    }
}

impl Serialize for RelPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.to_str() {
            Some(p) => s.serialize_str(p),
            None => {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("b64", &b64_encode(&self.0))?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for RelPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr<'a> {
            Str(#[serde(borrow)] Cow<'a, str>),
            B64 { b64: String },
        }
        let bytes = match Repr::deserialize(d)? {
            Repr::Str(s) => s.into_owned().into_bytes(),
            Repr::B64 { b64 } => b64_decode(&b64)
                .ok_or_else(|| serde::de::Error::custom("invalid base64 in path"))?,
        };
        RelPath::from_ledger(&bytes).map_err(serde::de::Error::custom)
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Encodes bytes as standard base64 with padding.
pub fn b64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(B64[(n >> 18) as usize & 63] as char);
        out.push(B64[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            B64[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            B64[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// Decodes standard base64 with padding; `None` on any invalid input.
pub fn b64_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(4) {
        return None;
    }
    let val = |c: u8| B64.iter().position(|&x| x == c).map(|v| v as u32);
    let mut out = Vec::with_capacity(b.len() / 4 * 3);
    for (i, q) in b.chunks(4).enumerate() {
        let last = i == b.len() / 4 - 1;
        let pad = q.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for (j, &c) in q.iter().enumerate() {
            let v = if j >= 4 - pad { 0 } else { val(c)? };
            n = (n << 6) | v;
        }
        out.push((n >> 16) as u8);
        if pad < 2 {
            out.push((n >> 8) as u8);
        }
        if pad < 1 {
            out.push(n as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inp(s: &[u8]) -> Result<RelPath, PathError> {
        RelPath::from_input(s, &[Path::new("/ws/root")], None)
    }

    #[test]
    fn normalises_lexically() {
        for (i, o) in [
            ("a/./b", "a/b"),
            ("a//b", "a/b"),
            ("a/../a/b", "a/b"),
            ("/ws/root/src/x.rs", "src/x.rs"),
            ("/ws/root/./src/../src/x.rs", "src/x.rs"),
            ("C:\\..\\x", "C:\\..\\x"),
        ] {
            assert_eq!(inp(i.as_bytes()).unwrap().as_bytes(), o.as_bytes(), "{i}");
        }
    }

    #[test]
    fn refuses_with_specific_codes() {
        let cases: &[(&[u8], &str)] = &[
            (b"../../etc/passwd", "E_PATH_OUTSIDE"),
            (b"/home/u/.bashrc", "E_PATH_OUTSIDE"),
            (b"/ws/rootx/a", "E_PATH_OUTSIDE"),
            (b"/ws/root/../x", "E_PATH_OUTSIDE"),
            (b"/proc/self/root/etc/passwd", "E_PATH_OUTSIDE"),
            (b"a/b/", "E_PATH_INVALID"),
            (b"", "E_PATH_INVALID"),
            (b".", "E_PATH_INVALID"),
            (b"/ws/root", "E_PATH_INVALID"),
            (b"a\0b", "E_PATH_INVALID"),
            (b".agent-runtime/ledger.jsonl", "E_PATH_PROTECTED"),
            (b".git/hooks/pre-commit", "E_PATH_PROTECTED"),
            (b"sub/.git/config", "E_PATH_PROTECTED"),
            (b"x/../.agent-runtime/ledger.jsonl", "E_PATH_PROTECTED"),
        ];
        for (p, code) in cases {
            let e = inp(p).expect_err(&String::from_utf8_lossy(p));
            assert_eq!(e.code(), *code, "{:?}", String::from_utf8_lossy(p));
        }
        let long = vec![b'a'; 256];
        assert_eq!(inp(&long).unwrap_err().code(), "E_PATH_TOO_LONG");
        let deep = "abcdefgh/".repeat(600) + "f";
        assert_eq!(inp(deep.as_bytes()).unwrap_err().code(), "E_PATH_TOO_LONG");
    }

    #[test]
    fn relative_to_a_base_directory() {
        let base = inp(b"src").unwrap();
        let p = RelPath::from_input(b"../README.md", &[Path::new("/ws")], Some(&base)).unwrap();
        assert_eq!(p.as_bytes(), b"README.md");
        assert!(RelPath::from_input(b"../../x", &[Path::new("/ws")], Some(&base)).is_err());
    }

    #[test]
    fn non_utf8_names_round_trip_without_colliding() {
        let a = inp(b"dir/a\xff").unwrap();
        let b = inp(b"dir/a\xfe").unwrap();
        let ja = serde_json::to_string(&a).unwrap();
        let jb = serde_json::to_string(&b).unwrap();
        assert_ne!(ja, jb);
        assert_eq!(serde_json::from_str::<RelPath>(&ja).unwrap(), a);
        assert_eq!(serde_json::from_str::<RelPath>(&jb).unwrap(), b);
        assert_eq!(
            serde_json::to_string(&inp(b"x/y").unwrap()).unwrap(),
            "\"x/y\""
        );
    }

    #[test]
    fn ledger_paths_must_already_be_normal() {
        assert!(RelPath::from_ledger(b"a/b").is_ok());
        assert!(RelPath::from_ledger(b"a/../b").is_err());
        assert!(RelPath::from_ledger(b"/etc/passwd").is_err());
        assert!(RelPath::from_ledger(b"a//b").is_err());
    }

    #[test]
    fn base64_round_trips() {
        for n in 0..20 {
            let data: Vec<u8> = (0..n).map(|i| (i * 37 + 5) as u8).collect();
            assert_eq!(b64_decode(&b64_encode(&data)).unwrap(), data);
        }
        assert!(b64_decode("a=bc").is_none());
    }
}
