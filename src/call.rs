//! Recording a call through the library: begin a call (store the before state
//! of its files), write files through ckpt (atomically, inside the workspace),
//! end the call (store the after state, one `file_patch` per changed file, then
//! the final status). Hooks use the same building blocks.
//!
//! Ordering (B1/B2): every blob and patch artifact a record names is durable
//! before the record is appended; the `started` record is durable before the
//! first write to the workspace.

use std::collections::BTreeMap;
use std::os::fd::AsFd;

use serde_json::Value;

use crate::fs_util::{EntryKind, FsError};
use crate::hash::ContentHash;
use crate::patch::{self, Binary, Side};
use crate::paths::RelPath;
use crate::record::{
    Body, CallStatus, Compensation, Draft, FilePatch, Idempotency, PatchOp, PatchSource,
    ReplayPolicy, Risk, SYMLINK_MODE, ToolCall, file_mode_string,
};
use crate::workspace::{Workspace, WorkspaceError};

/// The state of one path, with its content stored as a blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileState {
    /// Nothing at the path.
    Absent,
    /// A regular file.
    File {
        /// Its content's hash (stored).
        hash: ContentHash,
        /// Its permission bits.
        mode: u32,
    },
    /// A symlink; the blob holds the target bytes.
    Symlink {
        /// Hash of the target bytes (stored).
        hash: ContentHash,
    },
    /// A directory, FIFO, socket or device: not content ckpt records.
    NotAFile,
}

impl FileState {
    /// The content hash (`None` when absent or not a file).
    pub fn hash(&self) -> Option<ContentHash> {
        match self {
            FileState::File { hash, .. } | FileState::Symlink { hash } => Some(*hash),
            _ => None,
        }
    }

    /// The exact permission bits of a regular file.
    pub fn perm(&self) -> Option<u32> {
        match self {
            FileState::File { mode, .. } => Some(*mode & 0o7777),
            _ => None,
        }
    }

    /// The git-style mode string (`None` when absent).
    pub fn mode_string(&self) -> Option<String> {
        match self {
            FileState::File { mode, .. } => Some(file_mode_string(*mode)),
            FileState::Symlink { .. } => Some(SYMLINK_MODE.to_string()),
            _ => None,
        }
    }
}

fn fs_err(op: &'static str, rel: &RelPath, e: std::io::Error) -> WorkspaceError {
    WorkspaceError::Io(FsError::new(op, rel.display().to_string(), e))
}

/// Reads the path's current state and stores its content as a blob.
pub fn snapshot(ws: &Workspace, rel: &RelPath) -> Result<FileState, WorkspaceError> {
    match ws
        .files()
        .entry(rel)
        .map_err(|e| fs_err("inspect", rel, e))?
    {
        EntryKind::Absent => Ok(FileState::Absent),
        EntryKind::File { mode, .. } => {
            let (mut f, size) = ws
                .files()
                .open_read_sized(rel)
                .map_err(|e| fs_err("read", rel, e))?;
            let (hash, _) = ws.blobs().put_file_sized(&mut f, size)?;
            Ok(FileState::File {
                hash,
                mode: mode & 0o777,
            })
        }
        EntryKind::Symlink(target) => Ok(FileState::Symlink {
            hash: ws.blobs().put_bytes(&target)?,
        }),
        EntryKind::Dir | EntryKind::Special => Ok(FileState::NotAFile),
    }
}

/// Builds the `file_patch` draft (and writes its diff artifact) for one path
/// whose state went from `before` to `after`. Returns `None` when nothing changed.
/// A binary file, or one with a side above `diff_max` bytes, gets git's
/// summary in its artifact ([`patch::Binary::Summary`]).
#[allow(clippy::too_many_arguments)]
pub fn patch_for(
    ws: &Workspace,
    call: &str,
    session: Option<&str>,
    rel: &RelPath,
    before: &FileState,
    after: &FileState,
    source: PatchSource,
    diff_max: u64,
) -> Result<Option<(Draft, FilePatch)>, WorkspaceError> {
    patch_record(
        ws,
        call,
        session,
        rel,
        (before, after),
        source,
        Some(diff_max),
    )
}

/// [`patch_for`]; with `artifact` `None` no diff is written and `patch_ref`
/// is `None` (ckpt's own rollback writes: both sides are blobs, and
/// [`patch_diff`] renders the diff when someone asks for it); `Some(max)`
/// is `patch_for`'s `diff_max`.
pub fn patch_record(
    ws: &Workspace,
    call: &str,
    session: Option<&str>,
    rel: &RelPath,
    (before, after): (&FileState, &FileState),
    source: PatchSource,
    artifact: Option<u64>,
) -> Result<Option<(Draft, FilePatch)>, WorkspaceError> {
    if before == after {
        return Ok(None);
    }
    let op = match (before.hash(), after.hash()) {
        (None, None) => return Ok(None),
        (None, Some(_)) => PatchOp::Create,
        (Some(_), None) => PatchOp::Delete,
        (Some(a), Some(b)) if a == b && before.mode_string() != after.mode_string() => {
            if matches!(before, FileState::Symlink { .. })
                == matches!(after, FileState::Symlink { .. })
            {
                PatchOp::Mode
            } else {
                PatchOp::Modify
            }
        }
        (Some(_), Some(_)) => PatchOp::Modify,
    };
    let load = |s: &FileState| -> Result<Option<std::sync::Arc<Vec<u8>>>, WorkspaceError> {
        match s.hash() {
            Some(h) => Ok(Some(ws.blobs().get_shared(&h)?)),
            None => Ok(None),
        }
    };
    let (b, a) = (load(before)?, load(after)?);
    let (b, a) = (
        b.as_deref().map(Vec::as_slice),
        a.as_deref().map(Vec::as_slice),
    );
    let binary = b.is_some_and(patch::is_binary) || a.is_some_and(patch::is_binary);
    let (bm, am) = (before.mode_string(), after.mode_string());
    let id = ws.clock().new_id("p_");
    let (before_git, after_git) = (git_held(ws, before), git_held(ws, after));
    let patch_ref = if let Some(max) = artifact {
        let diff = diff_of(
            rel,
            Side {
                bytes: b,
                mode: bm.as_deref(),
                git_id: before_git,
            },
            Side {
                bytes: a,
                mode: am.as_deref(),
                git_id: after_git,
            },
            Binary::Summary,
            max,
        );
        Some(write_patch_artifact(ws, &id, &diff)?)
    } else {
        None
    };
    let fp = FilePatch {
        patch: id,
        call: call.to_string(),
        path: rel.clone(),
        op,
        from_path: None,
        before_hash: before.hash(),
        after_hash: after.hash(),
        before_mode: bm,
        after_mode: am,
        before_perm: before.perm(),
        after_perm: after.perm(),
        binary,
        patch_ref,
        source,
        candidates: Vec::new(),
        before_git: before_git.map(|o| crate::hash::hex(&o)),
        after_git: after_git.map(|o| crate::hash::hex(&o)),
    };
    Ok(Some((
        Draft::in_session(session.map(str::to_string), Body::FilePatch(fp.clone())),
        fp,
    )))
}

/// The git blob that holds a side's bytes instead of the store, when this
/// process left them there ([`crate::blob_store::BlobStore::note_git`]).
fn git_held(ws: &Workspace, s: &FileState) -> Option<[u8; 20]> {
    ws.blobs().git_noted(&s.hash()?)
}

/// Builds the `file_patch` draft of a rename (content unchanged, or changed
/// too when `before` and `after` differ) and writes its diff artifact.
pub fn rename_patch(
    ws: &Workspace,
    call: &str,
    session: Option<&str>,
    (from, to): (&RelPath, &RelPath),
    before: &FileState,
    after: &FileState,
    source: PatchSource,
) -> Result<(Draft, FilePatch), WorkspaceError> {
    let diff = rename_diff(
        from,
        to,
        before.mode_string().as_deref(),
        after.mode_string().as_deref(),
    );
    let id = ws.clock().new_id("p_");
    let patch_ref = write_patch_artifact(ws, &id, &diff)?;
    let fp = FilePatch {
        patch: id,
        call: call.to_string(),
        path: to.clone(),
        op: PatchOp::Rename,
        from_path: Some(from.clone()),
        before_hash: before.hash(),
        after_hash: after.hash(),
        before_mode: before.mode_string(),
        after_mode: after.mode_string(),
        before_perm: before.perm(),
        after_perm: after.perm(),
        binary: false,
        patch_ref: Some(patch_ref),
        source,
        candidates: Vec::new(),
        before_git: git_held(ws, before).map(|o| crate::hash::hex(&o)),
        after_git: git_held(ws, after).map(|o| crate::hash::hex(&o)),
    };
    Ok((
        Draft::in_session(session.map(str::to_string), Body::FilePatch(fp.clone())),
        fp,
    ))
}

/// The artifact of a rename from `from` to `to`.
fn rename_diff(from: &RelPath, to: &RelPath, m1: Option<&str>, m2: Option<&str>) -> Vec<u8> {
    let a = crate::patch::quote_path("a/", from.as_bytes());
    let b = crate::patch::quote_path("b/", to.as_bytes());
    let modes = match (m1, m2) {
        (Some(m1), Some(m2)) if m1 != m2 => format!("old mode {m1}\nnew mode {m2}\n"),
        _ => String::new(),
    };
    format!(
        "diff --git {a} {b}\n{modes}similarity index 100%\nrename from {}\nrename to {}\n",
        crate::patch::quote_path("", from.as_bytes()),
        crate::patch::quote_path("", to.as_bytes())
    )
    .into_bytes()
}

/// Whether `have`, patch `p`'s diff artifact, is one that ckpt writes for
/// its recorded before and after (contents from the store, modes, git ids),
/// so `verify` can tell an artifact that was replaced (issue 21 item 6).
/// Two forms are ckpt's: git's summary (binary files, and files above
/// `diff_max_bytes` when the patch was recorded, a setting that may have
/// changed since), and the whole diff (text; binary files recorded before
/// summaries existed hold a literal binary patch).
pub fn artifact_is_sound(
    ws: &Workspace,
    p: &FilePatch,
    have: &[u8],
) -> Result<bool, WorkspaceError> {
    if let (PatchOp::Rename, Some(from)) = (&p.op, &p.from_path) {
        return Ok(have
            == rename_diff(
                from,
                &p.path,
                p.before_mode.as_deref(),
                p.after_mode.as_deref(),
            ));
    }
    // The form it looks like first: one diff computed for a sound artifact.
    let mut forms = [(Binary::Literal, u64::MAX), (Binary::Summary, 0)];
    if have.ends_with(b" differ\n") {
        forms.reverse();
    }
    for (binary, max) in forms {
        if have == recorded_diff(ws, p, true, binary, max)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Writes `artifacts/patches/<id>.diff` (durable before the next record);
/// returns its reference.
pub fn write_patch_artifact(
    ws: &Workspace,
    id: &str,
    diff: &[u8],
) -> Result<String, WorkspaceError> {
    let rt = ws.runtime_dir();
    let err = |e: std::io::Error| {
        WorkspaceError::Io(FsError::new(
            "write",
            format!(".agent-runtime/artifacts/patches/{id}.diff"),
            e,
        ))
    };
    // Usually there: one open (the last component never a symlink) instead
    // of two mkdirat + two openat per patch.
    let dir = match crate::fs_util::open_dir(rt.as_fd(), "artifacts/patches") {
        Ok(d) => d,
        Err(_) => {
            let (art, _) =
                crate::fs_util::open_or_create_private_dir(rt.as_fd(), "artifacts", ws.durable())
                    .map_err(err)?;
            crate::fs_util::open_or_create_private_dir(art.as_fd(), "patches", ws.durable())
                .map_err(err)?
                .0
        }
    };
    let name = format!("{id}.diff");
    crate::fs_util::write_new(dir.as_fd(), name.as_ref(), diff, 0o600, ws.durable())
        .map_err(err)?;
    Ok(format!("artifacts/patches/{name}"))
}

/// Options for [`Workspace::begin_call`].
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// The session (conversation) the call belongs to.
    pub session: Option<String>,
    /// The call id; a new `call_…` id when `None`.
    pub call: Option<String>,
    /// The tool's name.
    pub tool: String,
    /// Paths the call will touch (their before state is stored now).
    pub paths: Vec<RelPath>,
    /// The tool input (its hash is recorded).
    pub input: Option<Value>,
    /// Catalog fields.
    pub risk: Option<Risk>,
    /// Catalog fields.
    pub idempotency: Option<Idempotency>,
    /// Catalog fields.
    pub replay_policy: Option<ReplayPolicy>,
    /// `["fs"]`, `["network"]`, …
    pub side_effects: Vec<String>,
    /// A registered compensation.
    pub compensation: Option<Compensation>,
    /// Files with a side above this get git's one-line summary in their
    /// patch artifact instead of a diff (`None`: the default,
    /// [`patch::DEFAULT_DIFF_MAX_BYTES`]; config `diff_max_bytes`).
    pub diff_max_bytes: Option<u64>,
}

/// What a finished call recorded.
#[derive(Debug, Clone)]
pub struct CallStats {
    /// The call id.
    pub call: String,
    /// One patch per changed file.
    pub patches: Vec<FilePatch>,
}

/// A call in progress, recorded as `started`.
#[must_use = "finish() records how the call ended; without it the call stays in doubt"]
pub struct CallHandle<'w> {
    ws: &'w Workspace,
    id: String,
    session: Option<String>,
    tool: String,
    before: BTreeMap<RelPath, FileState>,
    diff_max: u64,
}

impl Workspace {
    /// Begins a call: stores the before state of `paths`, then appends `started`.
    pub fn begin_call(&self, opts: CallOptions) -> Result<CallHandle<'_>, WorkspaceError> {
        let CallOptions {
            session,
            call,
            tool,
            paths,
            input,
            risk,
            idempotency,
            replay_policy,
            side_effects,
            compensation,
            diff_max_bytes,
        } = opts;
        let id = call.unwrap_or_else(|| self.clock().new_id("call_"));
        let mut before = BTreeMap::new();
        for p in &paths {
            before.insert(p.clone(), snapshot(self, p)?);
        }
        let input_hash = input
            .as_ref()
            .map(|v| ContentHash::of(v.to_string().as_bytes()));
        self.ledger().append(Draft::in_session(
            session.clone(),
            Body::ToolCall(ToolCall {
                call: id.clone(),
                step: 1,
                tool: tool.clone(),
                status: CallStatus::Started,
                input_hash,
                risk,
                idempotency,
                replay_policy,
                side_effects,
                paths,
                result_ref: None,
                compensation,
                error: None,
                agent: Some("library".into()),
                turn: None,
                subagent: None,
                before: vec![],
                unrecorded: Vec::new(),
                outcome_unknown: false,
            }),
        ))?;
        Ok(CallHandle {
            ws: self,
            id,
            session,
            tool,
            before,
            diff_max: diff_max_bytes.unwrap_or(patch::DEFAULT_DIFF_MAX_BYTES),
        })
    }
}

impl CallHandle<'_> {
    /// The call id.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn ensure_before(&mut self, rel: &RelPath) -> Result<(), WorkspaceError> {
        if !self.before.contains_key(rel) {
            let s = snapshot(self.ws, rel)?;
            self.before.insert(rel.clone(), s);
        }
        Ok(())
    }

    /// Writes a file through ckpt: its before state is stored first, then the new
    /// bytes are written atomically beneath the workspace root. A new file gets
    /// mode 0644; an existing one keeps its mode.
    pub fn write_file(&mut self, rel: &RelPath, data: &[u8]) -> Result<(), WorkspaceError> {
        self.ensure_before(rel)?;
        let mode = match &self.before[rel] {
            FileState::File { mode, .. } => *mode,
            FileState::NotAFile => {
                return Err(fs_err(
                    "write",
                    rel,
                    std::io::Error::other("it is a directory or special file"),
                ));
            }
            _ => 0o644,
        };
        self.ws
            .files()
            .write_file(rel, data, mode)
            .map_err(|e| fs_err("write", rel, e))
    }

    /// Deletes a file through ckpt (its content is stored first).
    pub fn delete_file(&mut self, rel: &RelPath) -> Result<(), WorkspaceError> {
        self.ensure_before(rel)?;
        self.ws
            .files()
            .remove(rel)
            .map_err(|e| fs_err("delete", rel, e))
    }

    /// Ends the call: stores the after state of every path, appends one
    /// `file_patch` per change and the final status, in one durable append.
    pub fn finish(
        self,
        status: CallStatus,
        error: Option<String>,
    ) -> Result<CallStats, WorkspaceError> {
        let mut drafts = Vec::new();
        let mut patches = Vec::new();
        for (rel, before) in &self.before {
            let after = snapshot(self.ws, rel)?;
            if let Some((d, p)) = patch_for(
                self.ws,
                &self.id,
                self.session.as_deref(),
                rel,
                before,
                &after,
                PatchSource::EditTool,
                self.diff_max,
            )? {
                drafts.push(d);
                patches.push(p);
            }
        }
        drafts.push(Draft::in_session(
            self.session.clone(),
            Body::ToolCall(ToolCall {
                paths: self.before.keys().cloned().collect(),
                agent: Some("library".into()),
                ..ToolCall::end(self.id.clone(), self.tool.clone(), status, error)
            }),
        ));
        let mut lock = self.ws.ledger().lock()?;
        lock.append(&drafts)?;
        Ok(CallStats {
            call: self.id,
            patches,
        })
    }
}

/// A patch's unified diff: its artifact, or for a patch recorded without
/// one (a rollback's write) rendered from its before and after blobs, binary
/// and large files summarised. With [`Binary::Literal`] (`--binary`), the
/// whole diff from the blobs, binary files as literal patches.
pub fn patch_diff(
    ws: &Workspace,
    p: &FilePatch,
    binary: Binary,
) -> Result<Vec<u8>, WorkspaceError> {
    let renamed = matches!((&p.op, &p.from_path), (PatchOp::Rename, Some(_)));
    if binary == Binary::Literal && !renamed {
        return recorded_diff(ws, p, true, Binary::Literal, u64::MAX);
    }
    if p.patch_ref.is_some() {
        return read_patch_artifact(ws, &p.patch);
    }
    recorded_diff(ws, p, false, Binary::Summary, patch::DEFAULT_DIFF_MAX_BYTES)
}

/// The diff of patch `p`'s recorded before and after contents (from the
/// store), with the git blob ids it recorded when `with_git_ids`.
fn recorded_diff(
    ws: &Workspace,
    p: &FilePatch,
    with_git_ids: bool,
    binary: Binary,
    max: u64,
) -> Result<Vec<u8>, WorkspaceError> {
    let load = |h: Option<crate::hash::ContentHash>| -> Result<Option<Vec<u8>>, WorkspaceError> {
        h.map(|h| ws.blobs().get(&h))
            .transpose()
            .map_err(Into::into)
    };
    let git = |hex: &Option<String>| {
        hex.as_deref()
            .filter(|_| with_git_ids)
            .and_then(crate::hash::oid_from_hex)
    };
    let (b, a) = (load(p.before_hash)?, load(p.after_hash)?);
    Ok(diff_of(
        &p.path,
        Side {
            bytes: b.as_deref(),
            mode: p.before_mode.as_deref(),
            git_id: git(&p.before_git),
        },
        Side {
            bytes: a.as_deref(),
            mode: p.after_mode.as_deref(),
            git_id: git(&p.after_git),
        },
        binary,
        max,
    ))
}

/// The diff of `rel` from `(bytes, mode)` before to after ([`patch::diff`]).
fn diff_of(rel: &RelPath, before: Side<'_>, after: Side<'_>, binary: Binary, max: u64) -> Vec<u8> {
    patch::diff(rel.as_bytes(), before, after, binary, max)
}

/// Reads a patch's diff artifact. The id must be a plain id (letters, digits,
/// `_`, `-`): the path is built from it, never taken from a ledger field.
pub fn read_patch_artifact(ws: &Workspace, patch: &str) -> Result<Vec<u8>, WorkspaceError> {
    let err = |e: std::io::Error| {
        WorkspaceError::Io(FsError::new(
            "read",
            format!(".agent-runtime/artifacts/patches/{patch}.diff"),
            e,
        ))
    };
    if patch.is_empty()
        || patch.len() > 64
        || !patch
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(err(std::io::Error::other("not a patch id")));
    }
    let rt = ws.runtime_dir();
    let art = crate::fs_util::open_dir(rt.as_fd(), "artifacts").map_err(err)?;
    let dir = crate::fs_util::open_dir(art.as_fd(), "patches").map_err(err)?;
    let mut f = crate::fs_util::open_regular_at(dir.as_fd(), format!("{patch}.diff").as_ref())
        .map_err(err)?;
    let mut v = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut v).map_err(err)?;
    Ok(v)
}
