//! Claude Code transcripts: the one module that knows their format.
//!
//! A Claude Code transcript (`~/.claude/projects/<slug>/<session id>.jsonl`,
//! the `transcript_path` of every hook payload) is JSON lines. Conversation
//! entries carry `uuid`, `parentUuid` (`null` at a root), `sessionId`, `type`
//! (`user`, `assistant`, `system`, …), `message`, `timestamp`, `cwd`, and
//! often `isSidechain`; the conversation is the chain of `parentUuid` links
//! from the last entry back to a root. Other lines (`{"type":"summary",
//! "leafUuid":…}`, snapshots, …) have no `uuid`. The format is Claude Code's
//! own and changes between releases, so ckpt reads it tolerantly and only
//! relies on `uuid` / `parentUuid` / `sessionId`; anything else is copied as is.
//!
//! Two uses:
//! - [`last_uuid`]: at a prompt or session-start hook, the uuid of the last
//!   main-chain entry, read from at most the last [`TAIL_BYTES`] of the file
//!   (hooks must stay cheap; `None` when it cannot be found).
//! - [`fork`] (or [`prepare`] then [`Prepared::write`]): a new transcript that
//!   ends at a given entry, under a new session id, next to the original, so
//!   `claude --resume <id>` opens the conversation as it was at a checkpoint.
//!   The fork holds the entries on the `parentUuid` chain from that entry to
//!   its root, in file order, with `sessionId` set to the new id. Lines that
//!   are not entries (summaries, snapshots) and entries off the chain
//!   (sidechains, later turns, abandoned branches) are dropped: a summary's
//!   `leafUuid` may name an entry past the cut, and Claude Code rebuilds what
//!   it needs from the chain. The original file is never written, and an
//!   existing file is never overwritten.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::durable::Durable;

/// How much of a transcript's end [`last_uuid`] reads.
pub const TAIL_BYTES: u64 = 256 * 1024;
/// The largest transcript [`prepare`] reads.
pub const MAX_TRANSCRIPT: u64 = 512 * 1024 * 1024;

/// What went wrong reading or forking a transcript.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    /// The file cannot be read or written.
    #[error("cannot {op} `{path}`: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Not the format this module knows.
    #[error(
        "`{path}` is not a Claude Code transcript ckpt understands ({why}); ckpt reads JSON lines whose entries are linked by `uuid`/`parentUuid` — if Claude Code changed its format, the adapter in src/claude_transcript.rs needs updating"
    )]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// What did not fit.
        why: String,
    },
    /// The entry to cut at is not in the file.
    #[error(
        "the transcript `{path}` has no entry `{uuid}`; it may have been rewritten or compacted since the checkpoint"
    )]
    NoSuchEntry {
        /// The file.
        path: PathBuf,
        /// The missing uuid.
        uuid: String,
    },
    /// A `parentUuid` chain that cannot be followed.
    #[error("the transcript `{path}` has a broken `parentUuid` chain at `{uuid}`: {why}")]
    Broken {
        /// The file.
        path: PathBuf,
        /// Where the chain breaks.
        uuid: String,
        /// How.
        why: String,
    },
    /// The fork's file name is taken.
    #[error(
        "`{0}` already exists; ckpt never overwrites a transcript (run the command again for a new id)"
    )]
    Exists(PathBuf),
    /// A session id that cannot be a file name.
    #[error("`{0}` cannot be used as a transcript session id")]
    BadId(String),
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> TranscriptError + 'a {
    move |source| TranscriptError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Where a Claude Code conversation is, as [`position`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// The uuid of its last main-chain entry.
    Last(String),
    /// No entry yet: the file is missing or holds none (the first prompt's
    /// hook runs before Claude Code writes the prompt).
    Empty,
    /// Unreadable, or no entry in the part read of a bigger file.
    Unknown,
}

/// Returns the uuid of the last main-chain entry (not a sidechain) of the
/// transcript at `path`, reading at most its last [`TAIL_BYTES`]. `None` when
/// the file is missing or unreadable, or no entry is found there (a torn line
/// being written is skipped). Never reads the whole file.
pub fn last_uuid(path: &Path) -> Option<String> {
    match position(path) {
        Position::Last(u) => Some(u),
        _ => None,
    }
}

/// Where the conversation in the transcript at `path` is: [`last_uuid`],
/// telling a conversation that has not begun from one ckpt cannot read.
pub fn position(path: &Path) -> Position {
    let mut f = match crate::fs_util::open_payload_file(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Position::Empty,
        Err(_) => return Position::Unknown,
    };
    let Ok(meta) = f.metadata() else {
        return Position::Unknown;
    };
    let len = meta.len();
    let start = len.saturating_sub(TAIL_BYTES);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return Position::Unknown;
    }
    let mut buf = Vec::with_capacity((len - start) as usize);
    if f.take(TAIL_BYTES).read_to_end(&mut buf).is_err() {
        return Position::Unknown;
    }
    let mut body: &[u8] = &buf;
    if start > 0 {
        // The first line is probably cut: start after it.
        let Some(nl) = memchr::memchr(b'\n', body) else {
            return Position::Unknown;
        };
        body = &body[nl + 1..];
    }
    for line in body.rsplit(|&b| b == b'\n') {
        let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if o.get("isSidechain").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        if let Some(Value::String(u)) = o.get("uuid") {
            return Position::Last(u.clone());
        }
    }
    // The whole file was read and holds no entry of the conversation.
    if start == 0 {
        Position::Empty
    } else {
        Position::Unknown
    }
}

/// A fork read and cut, ready to be written.
#[derive(Debug, Clone)]
pub struct Prepared {
    source: PathBuf,
    entries: Vec<Map<String, Value>>,
}

impl Prepared {
    /// The transcript it was read from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// How many entries the fork holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the fork holds no entry (never: it ends at an entry).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Writes the fork as `<source dir>/<new_session_id>.jsonl` (temp file,
    /// a hard link that refuses to replace, its data and directory entry then
    /// durable before the next record through `durable`) and returns its
    /// path. Fails with [`TranscriptError::Exists`] rather than overwrite.
    pub fn write(
        &self,
        new_session_id: &str,
        durable: &Durable,
    ) -> Result<PathBuf, TranscriptError> {
        if new_session_id.is_empty()
            || new_session_id.len() > 128
            || new_session_id.starts_with('.')
            || !new_session_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(TranscriptError::BadId(new_session_id.to_string()));
        }
        let dir = match self.source.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let target = dir.join(format!("{new_session_id}.jsonl"));
        if target.symlink_metadata().is_ok() {
            return Err(TranscriptError::Exists(target));
        }
        let mut out = Vec::new();
        for e in &self.entries {
            let mut e = e.clone();
            e.insert(
                "sessionId".into(),
                Value::String(new_session_id.to_string()),
            );
            serde_json::to_writer(&mut out, &e).map_err(|e| TranscriptError::Io {
                op: "serialise",
                path: target.clone(),
                source: e.into(),
            })?;
            out.push(b'\n');
        }
        let tmp = dir.join(format!(
            ".{new_session_id}.jsonl.ckpt-{:x}",
            crate::fs_util::random_u64()
        ));
        let written = (|| -> io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&out)?;
            durable.content(&f)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err("write", &tmp)(e));
        }
        // A hard link never replaces an existing name: the fork appears whole
        // or not at all, and a name taken meanwhile is refused.
        let linked = std::fs::hard_link(&tmp, &target);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(TranscriptError::Exists(target));
            }
            Err(e) => return Err(io_err("create", &target)(e)),
        }
        if let Ok(d) = File::open(&dir) {
            durable
                .content_dir(&d)
                .map_err(|e| io_err("sync the directory of", &target)(e))?;
        }
        Ok(target)
    }
}

fn unknown(path: &Path, why: impl Into<String>) -> TranscriptError {
    TranscriptError::UnknownFormat {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// Reads the transcript at `path` and cuts it at entry `last_uuid` (see the
/// module doc). Nothing is written.
pub fn prepare(path: &Path, last_uuid: &str) -> Result<Prepared, TranscriptError> {
    let f = crate::fs_util::open_payload_file(path).map_err(io_err("open", path))?;
    let len = f.metadata().map_err(io_err("stat", path))?.len();
    if len > MAX_TRANSCRIPT {
        return Err(unknown(
            path,
            format!("{len} bytes, more than the {MAX_TRANSCRIPT} ckpt reads"),
        ));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(MAX_TRANSCRIPT + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err("read", path))?;
    let complete_last = bytes.ends_with(b"\n");
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let n = lines.len();
    let mut objects: Vec<Map<String, Value>> = Vec::new();
    let mut by_uuid: HashMap<String, usize> = HashMap::new();
    for (i, raw) in lines.iter().enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let v: Value = match serde_json::from_slice(raw) {
            Ok(v) => v,
            // A last line still being written (transcripts are written
            // asynchronously) is not part of the conversation yet.
            Err(_) if i + 1 == n && !complete_last => continue,
            Err(e) => return Err(unknown(path, format!("line {} is not JSON: {e}", i + 1))),
        };
        let Value::Object(o) = v else {
            return Err(unknown(
                path,
                format!("line {} is not a JSON object", i + 1),
            ));
        };
        match o.get("uuid") {
            None => continue, // summaries, snapshots: not entries
            Some(Value::String(u)) => {
                match o.get("parentUuid") {
                    Some(Value::String(_)) | Some(Value::Null) => {}
                    _ => {
                        return Err(unknown(
                            path,
                            format!(
                                "the entry on line {} has a `uuid` but no string-or-null `parentUuid`",
                                i + 1
                            ),
                        ));
                    }
                }
                by_uuid.insert(u.clone(), objects.len());
                objects.push(o);
            }
            Some(_) => {
                return Err(unknown(
                    path,
                    format!("line {} has a `uuid` that is not a string", i + 1),
                ));
            }
        }
    }
    if objects.is_empty() {
        return Err(unknown(path, "no line has a `uuid`"));
    }
    let Some(&start) = by_uuid.get(last_uuid) else {
        return Err(TranscriptError::NoSuchEntry {
            path: path.to_path_buf(),
            uuid: last_uuid.to_string(),
        });
    };
    let mut keep: HashSet<usize> = HashSet::new();
    let mut at = start;
    loop {
        if !keep.insert(at) {
            return Err(TranscriptError::Broken {
                path: path.to_path_buf(),
                uuid: last_uuid.to_string(),
                why: "the chain loops".into(),
            });
        }
        match objects[at].get("parentUuid") {
            Some(Value::String(p)) => match by_uuid.get(p) {
                Some(&i) => at = i,
                None => {
                    let me = objects[at]
                        .get("uuid")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    return Err(TranscriptError::Broken {
                        path: path.to_path_buf(),
                        uuid: me,
                        why: format!("its parent `{p}` is not in the file"),
                    });
                }
            },
            _ => break,
        }
    }
    let mut idx: Vec<usize> = keep.into_iter().collect();
    idx.sort_unstable();
    let entries = idx.into_iter().map(|i| objects[i].clone()).collect();
    Ok(Prepared {
        source: path.to_path_buf(),
        entries,
    })
}

/// Writes a fork of the transcript at `path` that ends at `last_uuid`, under
/// `new_session_id`, next to it; returns the new file's path.
pub fn fork(
    path: &Path,
    last_uuid: &str,
    new_session_id: &str,
    durable: &Durable,
) -> Result<PathBuf, TranscriptError> {
    prepare(path, last_uuid)?.write(new_session_id, durable)
}

/// A new random session id in Claude Code's form (a UUID v4 string).
pub fn new_session_id() -> String {
    let (a, b) = (crate::fs_util::random_u64(), crate::fs_util::random_u64());
    let mut x = [0u8; 16];
    x[..8].copy_from_slice(&a.to_be_bytes());
    x[8..].copy_from_slice(&b.to_be_bytes());
    x[6] = (x[6] & 0x0f) | 0x40;
    x[8] = (x[8] & 0x3f) | 0x80;
    let h: String = x.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_uuid_v4() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
    }

    #[test]
    fn last_uuid_skips_torn_and_sidechain_lines() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.jsonl");
        std::fs::write(
            &p,
            concat!(
                "{\"uuid\":\"a\",\"parentUuid\":null,\"sessionId\":\"s\",\"type\":\"user\"}\n",
                "{\"uuid\":\"b\",\"parentUuid\":\"a\",\"sessionId\":\"s\",\"type\":\"assistant\"}\n",
                "{\"uuid\":\"c\",\"parentUuid\":\"b\",\"isSidechain\":true,\"sessionId\":\"s\"}\n",
                "{\"type\":\"summary\",\"summary\":\"x\",\"leafUuid\":\"b\"}\n",
                "{\"uuid\":\"d\",\"parentU"
            ),
        )
        .unwrap();
        assert_eq!(last_uuid(&p).as_deref(), Some("b"));
        assert_eq!(last_uuid(&d.path().join("missing.jsonl")), None);
    }

    #[test]
    fn last_uuid_reads_only_the_tail() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.jsonl");
        let mut s = String::new();
        let filler = "x".repeat(1000);
        for i in 0..600 {
            let parent = if i == 0 {
                "null".to_string()
            } else {
                format!("\"u{}\"", i - 1)
            };
            s.push_str(&format!(
                "{{\"uuid\":\"u{i}\",\"parentUuid\":{parent},\"sessionId\":\"s\",\"pad\":\"{filler}\"}}\n"
            ));
        }
        std::fs::write(&p, s).unwrap();
        assert_eq!(last_uuid(&p).as_deref(), Some("u599"));
    }
}
