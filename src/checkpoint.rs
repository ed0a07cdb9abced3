//! Checkpoints: `checkpoints/ckpt_<id>.json`, written atomically (temp, fsync,
//! rename, fsync dir; B3), then named by a `checkpoint` ledger record.
//!
//! The file anchors the ledger position it covers (`upto_seq` and that record's
//! hash), so a ledger cut back to an earlier valid prefix is detected by
//! `verify` (`ledger_truncated`). The file carries a checksum of its own body; a
//! file whose checksum fails is reported and skipped, never "fixed". The order is
//! pointer-last: the file is durable before the record that names it, and the
//! record is appended under the same ledger lock that fixed `upto_seq`.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use serde::{Deserialize, Serialize};

use crate::durable::{Durable, Keep};
use crate::fs_util::{self, FsError};
use crate::hash::ContentHash;
use crate::record::GitState;

/// The checkpoints directory's name inside `.agent-runtime/`.
pub const CHECKPOINTS_DIR: &str = "checkpoints";

/// The content of a checkpoint file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointFile {
    /// Schema version (1).
    pub v: u32,
    /// The checkpoint id.
    pub checkpoint: String,
    /// Its label.
    pub label: Option<String>,
    /// When it was made (RFC 3339 UTC).
    pub created: String,
    /// The session it was made for, if any.
    pub session: Option<String>,
    /// That session's leaf entry at the time.
    pub session_leaf: Option<String>,
    /// The last ledger record it covers (0: none).
    pub upto_seq: u64,
    /// That record's hash (`None` when `upto_seq` is 0).
    pub upto_hash: Option<String>,
    /// git state, when in a repository.
    pub git: Option<GitState>,
    /// Extra data recorded by the caller (e.g. Claude Code's transcript position).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<serde_json::Value>,
    /// `sha256:` of this file's JSON without the `checksum` field.
    #[serde(default)]
    pub checksum: Option<String>,
}

/// What is wrong with a checkpoint file.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// An I/O failure.
    #[error(transparent)]
    Io(#[from] FsError),
    /// The file is not what it claims to be.
    #[error("checkpoint file `{file}` is damaged: {why}")]
    Damaged {
        /// The file name.
        file: String,
        /// What is wrong.
        why: String,
    },
}

/// Returns `true` when `id` is a well-formed checkpoint id (safe as a file name).
pub fn valid_id(id: &str) -> bool {
    id.starts_with("ckpt_")
        && id.len() <= 64
        && id[5..]
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && id.len() > 5
}

/// Returns the file name of checkpoint `id` (`ckpt_<…>.json`).
pub fn file_name(id: &str) -> String {
    format!("{id}.json")
}

fn body_checksum(file: &CheckpointFile) -> Result<String, serde_json::Error> {
    let mut c = file.clone();
    c.checksum = None;
    Ok(ContentHash::of(&serde_json::to_vec(&c)?).to_string())
}

fn open_dir(rt: &OwnedFd, durable: &Durable) -> io::Result<OwnedFd> {
    Ok(fs_util::open_or_create_private_dir(rt.as_fd(), CHECKPOINTS_DIR, durable)?.0)
}

/// Writes a checkpoint file (durable before the next record, through
/// `durable`); fails if one with that id already exists.
pub fn write(
    rt: &OwnedFd,
    durable: &Durable,
    file: &CheckpointFile,
) -> Result<String, CheckpointError> {
    write_file(rt, durable, file, false)
}

/// Writes a checkpoint file over an existing one (`ckpt repair`
/// re-anchoring it), durable before the next record.
pub fn rewrite(
    rt: &OwnedFd,
    durable: &Durable,
    file: &CheckpointFile,
) -> Result<String, CheckpointError> {
    write_file(rt, durable, file, true)
}

fn write_file(
    rt: &OwnedFd,
    durable: &Durable,
    file: &CheckpointFile,
    replace: bool,
) -> Result<String, CheckpointError> {
    let mut f = file.clone();
    f.checksum = Some(body_checksum(&f).map_err(|e| io_error("serialise", &f.checkpoint, e))?);
    let mut bytes =
        serde_json::to_vec_pretty(&f).map_err(|e| io_error("serialise", &f.checkpoint, e))?;
    bytes.push(b'\n');
    let dir = open_dir(rt, durable).map_err(|e| io_error("open", CHECKPOINTS_DIR, e))?;
    let name = file_name(&f.checkpoint);
    fs_util::write_atomic(
        dir.as_fd(),
        name.as_ref(),
        &bytes,
        0o600,
        !replace,
        Keep::Named(durable),
    )
    .map_err(|e| io_error("write", &name, e))?;
    if !replace {
        note_newest(rt, &f.checkpoint);
    }
    Ok(format!("{CHECKPOINTS_DIR}/{name}"))
}

/// The cache naming the newest checkpoint file (`index/`): checking the
/// ledger's anchors reads it instead of listing `checkpoints/` (32,000 names
/// after 32,000 turns: ~12 ms of every `recover`).
const NEWEST_DIR: &str = "index";
const NEWEST_FILE: &str = "newest-checkpoint";

/// Notes `id` as the newest checkpoint once its file is written (a cache,
/// unsynced: a crash, a failure or a race between two writers can leave it
/// missing, garbage or naming an older checkpoint, which [`newest`] then
/// lists or checks instead).
fn note_newest(rt: &OwnedFd, id: &str) {
    if let Ok(dir) = fs_util::open_dir(rt.as_fd(), NEWEST_DIR) {
        let _ = fs_util::overwrite_in_place(dir.as_fd(), NEWEST_FILE, format!("{id}\n").as_bytes());
    }
}

/// The newest checkpoint that has a file: the one the cache names when its
/// file is there, else the last of [`list_files`]. The cache is as new as
/// the last checkpoint whose writer finished (each one rewrites it); it is
/// never trusted to name a file that is gone.
pub fn newest(rt: &OwnedFd) -> Option<String> {
    let noted = fs_util::open_dir(rt.as_fd(), NEWEST_DIR)
        .ok()
        .and_then(|dir| {
            let (mut f, size) =
                fs_util::open_regular_at_sized(dir.as_fd(), NEWEST_FILE.as_ref()).ok()?;
            (size <= 80).then_some(())?;
            let bytes = fs_util::read_to_end_sized(&mut f, size).ok()?;
            let id = std::str::from_utf8(&bytes).ok()?.strip_suffix('\n')?;
            valid_id(id).then(|| id.to_string())
        })
        .filter(|id| {
            fs_util::open_dir(rt.as_fd(), CHECKPOINTS_DIR).is_ok_and(|d| {
                fs_util::entry_at(d.as_fd(), file_name(id).as_ref())
                    .is_ok_and(|k| matches!(k, fs_util::EntryKind::File { .. }))
            })
        });
    noted.or_else(|| list_files(rt).ok()?.pop())
}

fn io_error(op: &'static str, what: &str, e: impl Into<io::Error>) -> CheckpointError {
    CheckpointError::Io(FsError::new(
        op,
        format!(".agent-runtime/{CHECKPOINTS_DIR}/{what}"),
        e.into(),
    ))
}

/// Reads and checks a checkpoint file.
pub fn read(rt: &OwnedFd, id: &str) -> Result<CheckpointFile, CheckpointError> {
    let name = file_name(id);
    if !valid_id(id) {
        return Err(CheckpointError::Damaged {
            file: name,
            why: "not a checkpoint id".into(),
        });
    }
    let dir = fs_util::open_dir(rt.as_fd(), CHECKPOINTS_DIR)
        .map_err(|e| io_error("open", CHECKPOINTS_DIR, e))?;
    let mut f = fs_util::open_regular_at(dir.as_fd(), name.as_ref())
        .map_err(|e| io_error("open", &name, e))?;
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut f, &mut bytes).map_err(|e| io_error("read", &name, e))?;
    parse(&name, &bytes, id)
}

/// Parses and checks checkpoint file bytes.
pub fn parse(name: &str, bytes: &[u8], id: &str) -> Result<CheckpointFile, CheckpointError> {
    let damaged = |why: String| CheckpointError::Damaged {
        file: name.to_string(),
        why,
    };
    let file: CheckpointFile =
        serde_json::from_slice(bytes).map_err(|e| damaged(format!("not valid JSON ({e})")))?;
    let Some(sum) = &file.checksum else {
        return Err(damaged("it has no checksum".into()));
    };
    let want = body_checksum(&file).map_err(|e| damaged(e.to_string()))?;
    if *sum != want {
        return Err(damaged("its checksum does not match its content".into()));
    }
    if file.checkpoint != id {
        return Err(damaged(format!("it names checkpoint {}", file.checkpoint)));
    }
    Ok(file)
}

/// Lists the checkpoint ids that have a file (ignoring temp files).
pub fn list_files(rt: &OwnedFd) -> io::Result<Vec<String>> {
    let dir = match fs_util::open_dir(rt.as_fd(), CHECKPOINTS_DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    let mut it = rustix::fs::Dir::read_from(&dir)?;
    for ent in it.by_ref() {
        let ent = ent?;
        let name = ent.file_name().to_string_lossy();
        if let Some(id) = name.strip_suffix(".json")
            && valid_id(id)
        {
            out.push(id.to_string());
        }
    }
    out.sort();
    Ok(out)
}
