//! The ledger's record kinds (DESIGN.md §3), as typed Rust values.
//!
//! A record is the common header (`v`, `seq`, `ts`, `kind`, `session`, `prev`,
//! `hash`) plus the fields of its kind. This module owns the types and their JSON
//! shape; `ledger` owns the bytes on disk, the chain and the lock. Field names are
//! binding: scripts read them. Fields DESIGN.md names are always written (as
//! `null` when empty); fields ckpt adds beyond DESIGN.md are omitted when empty.
//! Readers ignore fields they do not know and skip kinds they do not know.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hash::ContentHash;
use crate::paths::RelPath;

/// The schema version written in every record's `v`.
pub const SCHEMA_VERSION: u32 = 1;

/// A record read back from the ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Position in the ledger: 1, 2, 3 … with no gaps.
    pub seq: u64,
    /// RFC 3339 UTC time of the append.
    pub ts: String,
    /// The session the record belongs to, where one applies.
    pub session: Option<String>,
    /// The previous record's `hash` (`None` for the first record).
    pub prev: Option<String>,
    /// `sha256:<hex>` of this record's line without its `hash` field.
    pub hash: String,
    /// The kind and its fields.
    pub body: Body,
}

/// A record to append: the ledger assigns `seq`, `ts`, `prev` and `hash`.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    /// The session the record belongs to, where one applies.
    pub session: Option<String>,
    /// The kind and its fields.
    pub body: Body,
}

impl Draft {
    /// Returns a draft with no session.
    pub fn new(body: Body) -> Draft {
        Draft {
            session: None,
            body,
        }
    }
    /// Returns a draft in `session`.
    pub fn in_session(session: Option<String>, body: Body) -> Draft {
        Draft { session, body }
    }
}

/// The kind-specific part of a record.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// One lifecycle step of a tool call.
    ToolCall(ToolCall),
    /// One change to one file made during one call (or by an action).
    FilePatch(FilePatch),
    /// A named point in the ledger.
    Checkpoint(CheckpointRecord),
    /// One node of the session tree.
    SessionEntry(SessionEntry),
    /// A change made outside any agent call.
    UserEdit(UserEdit),
    /// Something ckpt itself did (rollback, restore, compensate).
    Action(ActionRecord),
    /// A three-way conflict raised by an action.
    Conflict(ConflictRecord),
    /// A torn tail was backed up and truncated before this record.
    Repair(Repair),
    /// A kind this version does not know; skipped by readers.
    Unknown {
        /// The record's `kind`.
        kind: String,
    },
}

impl Body {
    /// Returns the record's `kind` string.
    pub fn kind(&self) -> &str {
        match self {
            Body::ToolCall(_) => "tool_call",
            Body::FilePatch(_) => "file_patch",
            Body::Checkpoint(_) => "checkpoint",
            Body::SessionEntry(_) => "session_entry",
            Body::UserEdit(_) => "user_edit",
            Body::Action(_) => "action",
            Body::Conflict(_) => "conflict",
            Body::Repair(_) => "repair",
            Body::Unknown { kind } => kind,
        }
    }

    /// Serialises the kind's own fields as a JSON object.
    pub(crate) fn fields_json(&self) -> serde_json::Result<Vec<u8>> {
        match self {
            Body::ToolCall(x) => serde_json::to_vec(x),
            Body::FilePatch(x) => serde_json::to_vec(x),
            Body::Checkpoint(x) => serde_json::to_vec(x),
            Body::SessionEntry(x) => serde_json::to_vec(x),
            Body::UserEdit(x) => serde_json::to_vec(x),
            Body::Action(x) => serde_json::to_vec(x),
            Body::Conflict(x) => serde_json::to_vec(x),
            Body::Repair(x) => serde_json::to_vec(x),
            Body::Unknown { .. } => Ok(b"{}".to_vec()),
        }
    }

    /// Parses the kind's fields out of a whole record line.
    pub(crate) fn parse(kind: &str, line: &[u8]) -> serde_json::Result<Body> {
        Ok(match kind {
            "tool_call" => Body::ToolCall(serde_json::from_slice(line)?),
            "file_patch" => Body::FilePatch(serde_json::from_slice(line)?),
            "checkpoint" => Body::Checkpoint(serde_json::from_slice(line)?),
            "session_entry" => Body::SessionEntry(serde_json::from_slice(line)?),
            "user_edit" => Body::UserEdit(serde_json::from_slice(line)?),
            "action" => Body::Action(serde_json::from_slice(line)?),
            "conflict" => Body::Conflict(serde_json::from_slice(line)?),
            "repair" => Body::Repair(serde_json::from_slice(line)?),
            other => Body::Unknown {
                kind: other.to_string(),
            },
        })
    }
}

/// A call's lifecycle status. A call's state is its last status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// Announced, not yet approved.
    Planned,
    /// Approved, not yet started.
    Approved,
    /// Started (the pre hook ran).
    Started,
    /// Ended well.
    Succeeded,
    /// Ended with an error.
    Failed,
}

/// How risky a tool is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// Read-only or trivially reversible.
    Low,
    /// Changes files.
    Medium,
    /// Runs commands or reaches outside.
    High,
}

/// Whether running a call twice is the same as running it once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Idempotency {
    /// Safe to repeat.
    Idempotent,
    /// Safe to repeat if the state it expects is still there.
    Conditional,
    /// Never repeat automatically.
    NonIdempotent,
}

/// What recovery may do with a call that did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayPolicy {
    /// Replay without asking.
    Auto,
    /// Ask a person.
    Ask,
    /// Never replay.
    Never,
}

/// A registered counter-action for an external side effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compensation {
    /// The command to run, as argv (never through a shell).
    pub argv: Vec<String>,
    /// Passed as `CKPT_IDEMPOTENCY_KEY`.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// `tool_call`: one lifecycle step of a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call id (Claude Code's `tool_use_id`, or ckpt's `call_…`).
    pub call: String,
    /// 1 for the first lifecycle record of the call, then 2, 3 …
    pub step: u32,
    /// The tool's name (`Edit`, `Bash`, `mcp__github__create_issue`, …).
    pub tool: String,
    /// The status this step records.
    pub status: CallStatus,
    /// sha256 of the tool input's JSON, when there is one.
    #[serde(default)]
    pub input_hash: Option<ContentHash>,
    /// From the tool catalog.
    #[serde(default)]
    pub risk: Option<Risk>,
    /// From the tool catalog.
    #[serde(default)]
    pub idempotency: Option<Idempotency>,
    /// From the tool catalog.
    #[serde(default)]
    pub replay_policy: Option<ReplayPolicy>,
    /// `["fs"]`, `["network"]`, …
    #[serde(default)]
    pub side_effects: Vec<String>,
    /// Declared target paths, if known.
    #[serde(default)]
    pub paths: Vec<RelPath>,
    /// Reference to a stored tool output.
    #[serde(default)]
    pub result_ref: Option<String>,
    /// The registered compensation, if any.
    #[serde(default)]
    pub compensation: Option<Compensation>,
    /// The error text of a failed call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Which agent format the call came from (`claude`, `codex`, `generic`, `library`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The turn the call belongs to (Claude Code's `prompt_id`, Codex's
    /// `turn_id`, Cursor's `generation_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
    /// The subagent that made the call (Claude Code's `agent_id` and
    /// `agent_type`), so its work can be told apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent: Option<Subagent>,
    /// At `started`: the content each declared path had before the call (what
    /// recovery compares the disk with).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<PathHash>,
    /// At the end of a call: paths it changed whose content ckpt could not
    /// store (too large, unreadable), so no patch records them and no
    /// rollback can undo them (RELIABILITY F47).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unrecorded: Vec<Unrecorded>,
    /// On an end ckpt wrote for a call cut short (no after-event came) whose
    /// effects reach outside the workspace (side effects other than `fs`,
    /// not idempotent): whether those effects happened is unknown, so
    /// recovery reports the call uncertain, not failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outcome_unknown: bool,
}

/// A subagent of the session (`tool_call.subagent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subagent {
    /// Its id.
    pub id: String,
    /// Its type (`general-purpose`, …), when given.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl ToolCall {
    /// A call's end (step 2): `status` (`succeeded` or `failed`, with its
    /// `error`); the other fields empty, for the caller to fill.
    pub fn end(call: String, tool: String, status: CallStatus, error: Option<String>) -> ToolCall {
        ToolCall {
            call,
            step: 2,
            tool,
            status,
            input_hash: None,
            risk: None,
            idempotency: None,
            replay_policy: None,
            side_effects: Vec::new(),
            paths: Vec::new(),
            result_ref: None,
            compensation: None,
            error,
            agent: None,
            turn: None,
            subagent: None,
            before: Vec::new(),
            unrecorded: Vec::new(),
            outcome_unknown: false,
        }
    }
}

/// A change a call made that ckpt could not record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unrecorded {
    /// The path.
    pub path: RelPath,
    /// `too_large` (above `max_blob_bytes`), `not_copied_at_first_use`
    /// (above `first_use_max_bytes` when ckpt first saw it: no before
    /// content), or `unreadable`.
    pub reason: String,
    /// The larger of its sizes before and after, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// A path and the hash (and mode) of its content at some point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathHash {
    /// The path.
    pub path: RelPath,
    /// Its content's hash (`None`: absent).
    pub hash: Option<ContentHash>,
    /// git-style mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// At a call's `started`: the hash the file should have once the call
    /// is done, predicted from the tool input (Edit's strings, Write's
    /// content) — what recovery compares the disk with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<ContentHash>,
    /// At a call's `started`: the call removes the file (`*** Delete File:`,
    /// the source of a move), so once it is done the path is absent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expected_absent: bool,
}

/// What a patch did to its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchOp {
    /// The path did not exist before.
    Create,
    /// The content changed.
    Modify,
    /// The path no longer exists.
    Delete,
    /// The path was renamed from `from_path`.
    Rename,
    /// Only the mode changed.
    Mode,
}

/// Who made a patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchSource {
    /// A tool that names its file (Edit, Write, …) or the library's write.
    EditTool,
    /// Found by comparing the workspace around a shell or unknown tool.
    Shell,
    /// Seen by `ckpt watch`.
    Watch,
    /// Written by a ckpt action (rollback, resolve).
    Rollback,
}

/// `file_patch`: one change to one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FilePatch {
    /// The patch id (`p_…`).
    pub patch: String,
    /// The call (or action) that made it.
    pub call: String,
    /// The path after the change.
    pub path: RelPath,
    /// What happened.
    pub op: PatchOp,
    /// The old path of a rename.
    #[serde(default)]
    pub from_path: Option<RelPath>,
    /// Hash of the bytes before (`None`: the path was absent).
    pub before_hash: Option<ContentHash>,
    /// Hash of the bytes after (`None`: the path is absent).
    pub after_hash: Option<ContentHash>,
    /// git-style mode before (`100644`, `100755`, `120000`).
    #[serde(default)]
    pub before_mode: Option<String>,
    /// git-style mode after.
    #[serde(default)]
    pub after_mode: Option<String>,
    /// Exact permission bits before (regular files), so a rollback gives back
    /// `0600` as `0600`, not as git's `100644`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_perm: Option<u32>,
    /// Exact permission bits after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_perm: Option<u32>,
    /// True when either side is binary (NUL in the first 8000 bytes).
    #[serde(default)]
    pub binary: bool,
    /// `artifacts/patches/<patch>.diff`.
    #[serde(default)]
    pub patch_ref: Option<String>,
    /// Who made it.
    pub source: PatchSource,
    /// When the change could have been made by any of several calls open at
    /// once (shell calls of different sessions), all of them; `call` is the
    /// one whose window saw it first. Empty when there is no doubt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<String>,
    /// The git blob id (40 hex) of the before bytes, when ckpt left them in
    /// the repository's object database instead of copying them into
    /// `artifacts/blobs/` (a file committed at HEAD that a shell call
    /// changed): readers of `before_hash` fall back on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_git: Option<String>,
    /// The same for the after bytes (a call that checked a file out of git).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_git: Option<String>,
}

/// git state at a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitState {
    /// The commit HEAD points to (`None` on an unborn branch).
    pub head: Option<String>,
    /// The branch name (`None` when detached).
    pub branch: Option<String>,
    /// Whether the work tree or index differs from HEAD.
    pub dirty: bool,
}

/// `checkpoint`: a named point in the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// The checkpoint id (`ckpt_…`).
    pub checkpoint: String,
    /// The label given with `-m`, or the prompt's first line.
    #[serde(default)]
    pub label: Option<String>,
    /// The last ledger record the checkpoint covers.
    pub upto_seq: u64,
    /// That record's hash (the anchor that detects a truncated ledger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upto_hash: Option<String>,
    /// The session's leaf entry at the checkpoint.
    #[serde(default)]
    pub session_leaf: Option<String>,
    /// git state, when the workspace is a git repository.
    #[serde(default)]
    pub git: Option<GitState>,
    /// `checkpoints/ckpt_<id>.json`.
    #[serde(rename = "ref")]
    pub file_ref: String,
}

/// The type of a session entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryType {
    /// A conversation message.
    Message,
    /// The application state in force from here on.
    AppState,
    /// A compaction (summary) of what came before.
    Compaction,
    /// A move of the session to an earlier entry.
    Branch,
}

/// `session_entry`: one node of the session tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEntry {
    /// The entry id (`e_…`).
    pub entry: String,
    /// The parent entry (`None` at a root).
    pub parent: Option<String>,
    /// What it is.
    #[serde(rename = "type")]
    pub entry_type: EntryType,
    /// Its content.
    pub payload: Value,
}

/// `user_edit`: a change seen outside any agent call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserEdit {
    /// The path.
    pub path: RelPath,
    /// Hash before (what the agent or the last record left).
    pub before_hash: Option<ContentHash>,
    /// Hash now.
    pub after_hash: Option<ContentHash>,
    /// Mode before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_mode: Option<String>,
    /// Mode now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_mode: Option<String>,
}

/// The type of an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionType {
    /// Undo agent patches.
    RollbackFiles,
    /// Move a session to an earlier point.
    RestoreSession,
    /// Run a registered compensation.
    Compensate,
    /// Remove stored contents no kept checkpoint needs (`ckpt gc`).
    Gc,
}

/// The status of an action step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionStatus {
    /// Plan recorded, work under way.
    Started,
    /// Finished.
    Succeeded,
    /// Stopped with an error.
    Failed,
}

/// `action`: something ckpt itself did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// The action id (`act_…`).
    pub action: String,
    /// What kind of action.
    #[serde(rename = "type")]
    pub action_type: ActionType,
    /// This step's status.
    pub status: ActionStatus,
    /// What was asked.
    #[serde(default)]
    pub target: Value,
    /// At `started`: every file and its intended result.
    #[serde(default)]
    pub plan: Option<Value>,
    /// At the end: what happened.
    #[serde(default)]
    pub outcome: Option<Value>,
}

/// How a conflict was settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// Open.
    Pending,
    /// The user's file was kept.
    KeepUser,
    /// The undo was applied over the user's file (which was stored first).
    ApplyAgent,
    /// The user merged by hand.
    ManualMerge,
}

/// `conflict`: a three-way conflict raised by an action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConflictRecord {
    /// The conflict id (`cf_…`).
    pub conflict: String,
    /// The action that raised it.
    pub action: String,
    /// The path.
    pub path: RelPath,
    /// What the agent left.
    pub expected_hash: Option<ContentHash>,
    /// What is there now.
    pub actual_hash: Option<ContentHash>,
    /// The agent's patch artifact.
    #[serde(default)]
    pub agent_patch_ref: Option<String>,
    /// Blob of the content before the agent's patch.
    #[serde(default)]
    pub base_ref: Option<ContentHash>,
    /// Blob of the content the agent left.
    #[serde(default)]
    pub agent_ref: Option<ContentHash>,
    /// Blob of the content now.
    #[serde(default)]
    pub current_ref: Option<ContentHash>,
    /// How it was settled.
    pub resolution: Resolution,
    /// Why the undo could not be merged (`overlap`, `binary_changed`,
    /// `deleted_by_user`, `created_then_edited`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The agent patches the conflict holds back, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<String>,
    /// The agent patches it held back from being put back in (a `--to`
    /// before a later rollback).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redone: Vec<String>,
    /// git-style modes of base, agent and current (`None`: absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_mode: Option<String>,
    /// Mode the agent left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_mode: Option<String>,
    /// Mode now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_mode: Option<String>,
    /// At a resolution: the action that wrote the file (`apply_agent`,
    /// `--manual`), when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<String>,
}

/// `repair`: a torn tail was backed up and cut off before this record; or
/// (`ckpt repair`) the record that stands for a lost one (`lost` names its
/// seq), or the summary of a whole repair.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repair {
    /// How many bytes were cut (or, `ckpt repair`, set aside).
    pub dropped_bytes: u64,
    /// The backup file (in `.agent-runtime/`) holding the whole ledger before the cut.
    pub backup: String,
    /// `ckpt repair`: the seqs whose records were lost (damaged, or cut off
    /// the end); each has a `repair` record standing in for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<u64>,
    /// `ckpt repair`: the first seq whose record was rewritten to chain on
    /// (its content kept, its `prev` and `hash` new).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rechained_from: Option<u64>,
    /// `ckpt repair`: checkpoints re-anchored to the rewritten records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<String>,
    /// `ckpt repair`: damaged blobs moved aside (`damaged/blobs/`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blobs: Vec<String>,
    /// `ckpt repair`: the damage that was found (what `verify` said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// Returns the git-style mode string for a regular file's permission bits.
pub fn file_mode_string(perm: u32) -> String {
    if perm & 0o111 != 0 {
        "100755".to_string()
    } else {
        "100644".to_string()
    }
}

/// The permission bits a file of git-style `mode` gets: `base` (the bits it
/// had) with the execute bits made to agree with the mode, or 0755 / 0644
/// when nothing is known.
pub fn perm_of_mode(mode: Option<&str>, base: Option<u32>) -> u32 {
    let exec = mode == Some("100755");
    match base {
        Some(p) if (p & 0o111 != 0) == exec => p,
        Some(p) if exec => p | ((p & 0o444) >> 2),
        Some(p) => p & !0o111,
        None if exec => 0o755,
        None => 0o644,
    }
}

/// The git-style mode string of a symlink.
pub const SYMLINK_MODE: &str = "120000";
