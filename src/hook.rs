//! What each hook does with a normalised [`HookEvent`]: the pre hook stores the
//! before state of the call's files and records `started`; the post hook stores
//! the after state, one `file_patch` per changed file, then `succeeded` or
//! `failed`; the prompt hook makes a checkpoint; the session-start hook makes one
//! too. Before every call, files the agent last wrote are checked for edits the
//! user made since: those become `user_edit` records, with both contents kept.
//!
//! State carried from pre to post lives in `.agent-runtime/state/` (one small
//! file per open call, plus the registry of files the agent last wrote). It is a
//! cache of what the ledger says: the `started` record carries the same before
//! hashes, so recovery never depends on it.
//!
//! Calls that name no file (shell, MCP, unknown tools) are recorded here with
//! their lifecycle only; comparing the workspace around them is `scan`'s job.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};

use serde::{Deserialize, Serialize};

use crate::agent_files::{self, AgentFile, Registry};
use crate::call::{self, FileState};
use crate::capture::{self, Capture, HookEvent, OriginalFile, Outcome, Phase, TargetRole};
use crate::config::Config;
use crate::durable::Keep;
use crate::fs_util::{self, EntryKind, FsError};
use crate::hash::ContentHash;
use crate::paths::{PathError, RelPath};
use crate::record::{
    Body, CallStatus, Compensation, Draft, Idempotency, PatchSource, ToolCall, UserEdit,
};
use crate::workspace::{CheckpointOptions, Workspace, WorkspaceError};

/// Why a hook could not record.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// A declared path cannot be recorded (outside, invalid, protected).
    #[error("cannot record `{path}`: {source}")]
    Path {
        /// The path as the agent sent it.
        path: String,
        /// Why.
        #[source]
        source: PathError,
    },
    /// Recording failed (I/O, ledger, blob store).
    #[error(transparent)]
    Record(#[from] WorkspaceError),
}

impl HookError {
    /// True when the agent is trying to write ckpt's own data: always refused.
    pub fn is_runtime_target(&self) -> bool {
        matches!(self, HookError::Path { source: PathError::Protected(p), .. } if p.starts_with(crate::paths::RUNTIME_DIR))
    }
}

/// What a hook recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookStats {
    /// The call id used (given or made up).
    pub call: Option<String>,
    /// `file_patch` records appended.
    pub patches: usize,
    /// `user_edit` records appended.
    pub user_edits: usize,
    /// The checkpoint made (prompt, session start).
    pub checkpoint: Option<String>,
    /// Things worth a line on stderr that did not stop the hook.
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Snap {
    hash: Option<ContentHash>,
    mode: Option<u32>,
    symlink: bool,
    absent: bool,
}

impl Snap {
    fn from_state(s: &FileState) -> Snap {
        match s {
            FileState::Absent | FileState::NotAFile => Snap {
                hash: None,
                mode: None,
                symlink: false,
                absent: true,
            },
            FileState::File { hash, mode } => Snap {
                hash: Some(*hash),
                mode: Some(*mode),
                symlink: false,
                absent: false,
            },
            FileState::Symlink { hash } => Snap {
                hash: Some(*hash),
                mode: None,
                symlink: true,
                absent: false,
            },
        }
    }
    fn to_state(&self) -> FileState {
        match (self.absent, self.symlink, self.hash) {
            (false, true, Some(hash)) => FileState::Symlink { hash },
            (false, false, Some(hash)) => FileState::File {
                hash,
                mode: self.mode.unwrap_or(0o644),
            },
            _ => FileState::Absent,
        }
    }
}

/// What the pre hook leaves for the post hook of the same call.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CallState {
    call: String,
    session: Option<String>,
    tool: String,
    targets: Vec<(RelPath, Snap)>,
    /// The call names no file: its changes are found by `scan`.
    #[serde(default)]
    scan: bool,
    /// The agent process the call belongs to, when known.
    #[serde(default)]
    proc: Option<crate::sys::procs::ProcId>,
    /// The payload format (`claude`, `codex`, …), for the record that closes
    /// the call without a post.
    #[serde(default)]
    agent: Option<String>,
    /// Its agent ended the turn with the call still open (and its files
    /// changed, so `recover` decides): not running, even if the agent is.
    #[serde(default)]
    turn_ended: bool,
    /// Its effects reach outside the workspace (side effects other than
    /// `fs`) and running it twice is not the same as once: closed without
    /// its post, its outcome is unknown.
    #[serde(default)]
    outside: bool,
}

fn calls_dir(ws: &Workspace) -> Result<OwnedFd, WorkspaceError> {
    let st = ws.state_dir()?;
    let (fd, _) = fs_util::open_or_create_private_dir(st.as_fd(), "calls", ws.durable())
        .map_err(|e| FsError::new("open", ".agent-runtime/state/calls", e))?;
    Ok(fd)
}

fn state_key(s: &str) -> String {
    ContentHash::of(s.as_bytes()).hex()[..32].to_string()
}

fn read_json<T: for<'de> Deserialize<'de>>(dir: &OwnedFd, name: &str) -> Option<T> {
    let mut f = fs_util::open_regular_at(dir.as_fd(), name.as_ref()).ok()?;
    let mut v = Vec::new();
    f.read_to_end(&mut v).ok()?;
    serde_json::from_slice(&v).ok()
}

fn write_json<T: Serialize>(dir: &OwnedFd, name: &str, v: &T) -> Result<(), WorkspaceError> {
    let bytes = serde_json::to_vec(v).map_err(|e| FsError::new("write", name, e.into()))?;
    // A cache of the ledger: atomic (never half-written), not worth an fsync.
    fs_util::write_atomic(
        dir.as_fd(),
        name.as_ref(),
        &bytes,
        0o600,
        false,
        Keep::Cache,
    )
    .map_err(|e| FsError::new("write", format!(".agent-runtime/state/{name}"), e).into())
}

/// Holds `state/state.lock` while the agent-file registry is read and rewritten.
struct StateLock {
    _file: std::fs::File,
}

impl StateLock {
    fn take(dir: &OwnedFd) -> Result<StateLock, WorkspaceError> {
        let f =
            fs_util::lock_exclusive(dir.as_fd(), "state.lock", ".agent-runtime/state/state.lock")?;
        Ok(StateLock { _file: f })
    }
}

/// Finds files the agent last wrote whose content changed since: each becomes
/// a `user_edit` draft (the new content is stored first).
fn user_edit_drafts(
    ws: &Workspace,
    registry: &mut Registry,
    session: Option<&str>,
) -> Result<Vec<Draft>, WorkspaceError> {
    let mut drafts = Vec::new();
    let changed = registry.changed_on_disk(ws);
    if changed.is_empty() {
        return Ok(drafts);
    }
    // A file another open call declared is being written by that call right
    // now: its change is that call's, not the user's.
    let busy = open_call_targets(ws);
    for (rel, af) in changed {
        if busy.contains(&rel) {
            continue;
        }
        let state = call::snapshot(ws, &rel)?;
        let snap = Snap::from_state(&state);
        if snap.hash != af.hash || snap.symlink != af.symlink {
            drafts.push(Draft::in_session(
                session.map(str::to_string),
                Body::UserEdit(UserEdit {
                    path: rel.clone(),
                    before_hash: af.hash,
                    after_hash: snap.hash,
                    before_mode: af.mode.map(crate::record::file_mode_string),
                    after_mode: state.mode_string(),
                }),
            ));
        }
        let seen = AgentFile::observed(ws, &rel, &state, &af.call);
        registry.insert(rel, seen);
    }
    Ok(drafts)
}

/// Records, as `user_edit`s, the files the agent last wrote that changed since
/// (their new content stored first). Returns how many.
pub(crate) fn flush_user_edits(
    ws: &Workspace,
    session: Option<&str>,
) -> Result<usize, WorkspaceError> {
    let dir = ws.state_dir()?;
    let _g = StateLock::take(&dir)?;
    let mut reg = agent_files::load(ws, &dir);
    let d = user_edit_drafts(ws, &mut reg, session)?;
    if !d.is_empty() {
        ws.ledger().lock()?.append(&d)?;
    }
    // After the records: stat figures refreshed for files whose content did
    // not change (touched, or rewritten as they were) are kept too.
    agent_files::save(&dir, &reg)?;
    Ok(d.len())
}

/// After an action wrote `files`, the registry describes what it left, so
/// the next hook does not take ckpt's own writes for the user's.
pub(crate) fn note_written(
    ws: &Workspace,
    files: &[(RelPath, FileState)],
    by: &str,
) -> Result<(), WorkspaceError> {
    if files.is_empty() {
        return Ok(());
    }
    let dir = ws.state_dir()?;
    let _g = StateLock::take(&dir)?;
    let mut reg = agent_files::load(ws, &dir);
    for (rel, state) in files {
        reg.insert(rel.clone(), AgentFile::observed(ws, rel, state, by));
    }
    agent_files::save(&dir, &reg)
}

/// Resolves a payload's `cwd` to a workspace-relative base directory.
fn base_dir(ws: &Workspace, ev: &HookEvent) -> Option<RelPath> {
    let cwd = ev
        .cwd
        .as_deref()
        .or(ev.workspace_roots.first().map(String::as_str))?;
    ws.rel_path(cwd.as_bytes(), None).ok()
}

fn resolve_targets(
    ws: &Workspace,
    ev: &HookEvent,
) -> Result<Vec<(RelPath, TargetRole)>, HookError> {
    let base = base_dir(ws, ev);
    let mut out: Vec<(RelPath, TargetRole)> = Vec::new();
    for t in &ev.targets {
        let rel = ws
            .rel_path(t.path.as_bytes(), base.as_ref())
            .map_err(|source| HookError::Path {
                path: t.path.clone(),
                source,
            })?;
        if !out.iter().any(|(p, _)| *p == rel) {
            out.push((rel, t.role));
        }
    }
    Ok(out)
}

fn call_id(ws: &Workspace, ev: &HookEvent) -> (String, String) {
    match &ev.call {
        Some(c) => (c.clone(), state_key(c)),
        None => {
            // Agents without call ids: pre and post pair by session, tool and input.
            let key = format!(
                "{}\0{}\0{}",
                ev.session.as_deref().unwrap_or(""),
                ev.tool.as_deref().unwrap_or(""),
                ev.input_hash.as_deref().unwrap_or("")
            );
            (ws.clock().new_id("call_"), state_key(&key))
        }
    }
}

/// How many bytes of the contents a shell post stores are kept in memory for
/// its diffs (beyond it, a diff reads the stored blob back).
const RECENT_BUDGET: usize = 64 << 20;

/// Runs the hook for one event.
pub fn run(ws: &Workspace, cfg: &Config, ev: &HookEvent) -> Result<HookStats, HookError> {
    match ev.phase {
        // The syncs of the call's blobs and patch run together, just before the
        // ledger append that names them (the append syncs the durable set).
        Phase::Pre => then_sync(ws, || pre(ws, cfg, ev)),
        Phase::Post | Phase::PostFailure => then_sync(ws, || post(ws, cfg, ev)),
        Phase::Prompt => {
            let label = ev
                .prompt
                .as_deref()
                .and_then(prompt_label)
                .or_else(|| Some("user prompt".into()));
            checkpoint(ws, ev, label)
        }
        Phase::TurnEnd => turn_end(ws, cfg, ev),
        Phase::SessionStart => {
            let label = format!(
                "session start ({})",
                ev.source.as_deref().unwrap_or("startup")
            );
            checkpoint(ws, ev, Some(label))
        }
    }
}

/// A prompt's first non-empty line, at most 120 characters, for a checkpoint
/// label. Secrets are redacted before the line is taken and cut (T24), so a
/// key block starting the prompt becomes one marker and a cut never leaves
/// half a token behind; only the first 64 KiB are looked at.
fn prompt_label(prompt: &str) -> Option<String> {
    let p = prompt.trim_start();
    let window = &p[..crate::redact::floor_char_boundary(p, 64 * 1024)];
    let text = crate::redact::redact_str(window);
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(crate::redact::cut_chars(line, 120).0.to_string())
}

/// Runs `f`, then syncs what is still waiting (content no record names
/// yet), whether `f` failed or not.
fn then_sync(
    ws: &Workspace,
    f: impl FnOnce() -> Result<HookStats, HookError>,
) -> Result<HookStats, HookError> {
    let r = f();
    let synced = ws.sync_all().map_err(HookError::from);
    let stats = r?;
    synced?;
    Ok(stats)
}

fn checkpoint(
    ws: &Workspace,
    ev: &HookEvent,
    label: Option<String>,
) -> Result<HookStats, HookError> {
    let mut stats = HookStats {
        user_edits: flush_user_edits(ws, ev.session.as_deref())?,
        ..Default::default()
    };
    let extra = ev.transcript_path.as_ref().map(|t| {
        let mut x = serde_json::json!({"transcript_path": t, "agent": ev.format.as_str()});
        // Where the conversation was, for `restore-session --claude` (read
        // from the file's last 256 KiB; omitted when it cannot be found).
        if ev.format == capture::Format::Claude {
            use crate::claude_transcript::{Position, position};
            match position(std::path::Path::new(t)) {
                Position::Last(u) => x["transcript_last_uuid"] = serde_json::json!(u),
                // The first prompt: the conversation has not begun.
                Position::Empty => x["transcript_empty"] = serde_json::json!(true),
                Position::Unknown => {}
            }
        }
        x
    });
    let rec = ws.checkpoint(CheckpointOptions {
        label,
        session: ev.session.clone(),
        session_leaf: None,
        extra,
    })?;
    stats.checkpoint = Some(rec.checkpoint);
    Ok(stats)
}

/// A call that only reads, with no side effect and safe to repeat (`Read`,
/// `Grep`, `read_file`, …): recorded in one record at its end, with no
/// `started` record and no open-call state (a crash in the middle of it
/// leaves nothing to recover), which halves what it costs the agent.
fn read_only(ev: &HookEvent, class: &crate::config::ToolClass) -> bool {
    ev.capture == Capture::Skip
        && class.side_effects.is_empty()
        && class.idempotency == Idempotency::Idempotent
        && class.compensation.is_none()
        && ev.compensation.is_none()
}

/// The pre of a [`read_only`] call: only the user edits made since the
/// last call are recorded (they are checked before every call).
fn read_only_pre(ws: &Workspace, ev: &HookEvent, call: String) -> Result<HookStats, HookError> {
    let dir = ws.state_dir()?;
    let _g = StateLock::take(&dir)?;
    let mut reg = agent_files::load(ws, &dir);
    let drafts = user_edit_drafts(ws, &mut reg, ev.session.as_deref())?;
    if !drafts.is_empty() {
        append(ws, &drafts)?;
        agent_files::save(&dir, &reg)?;
    }
    Ok(HookStats {
        call: Some(call),
        user_edits: drafts.len(),
        ..Default::default()
    })
}

fn pre(ws: &Workspace, cfg: &Config, ev: &HookEvent) -> Result<HookStats, HookError> {
    let tool = ev.tool.clone().unwrap_or_else(|| "unknown".into());
    let class = cfg.classify(&tool);
    if read_only(ev, &class) {
        return read_only_pre(ws, ev, call_id(ws, ev).0);
    }
    let targets = if ev.capture == Capture::Declared {
        resolve_targets(ws, ev)?
    } else {
        Vec::new()
    };
    let (call, key) = call_id(ws, ev);
    let dir = ws.state_dir()?;
    let _g = StateLock::take(&dir)?;
    let mut reg = agent_files::load(ws, &dir);
    let mut drafts = user_edit_drafts(ws, &mut reg, ev.session.as_deref())?;
    let user_edits = drafts.len();
    let mut snaps = Vec::new();
    let mut predicted = Vec::new();
    for (rel, _) in &targets {
        let s = call::snapshot(ws, rel)?;
        if s == FileState::NotAFile {
            // A FIFO, socket, device or directory: ckpt records no content
            // for it, and calling it absent would let a rollback delete
            // what the call leaves there (issue 21 item 11).
            return Err(WorkspaceError::from(FsError::new(
                "record",
                rel.to_string(),
                std::io::Error::other(
                    "it is a directory, FIFO, socket or device, not a file ckpt can record",
                ),
            ))
            .into());
        }
        predicted.push(predicted_after(ws, ev, rel, &s));
        snaps.push((rel.clone(), Snap::from_state(&s)));
    }
    let scan = ev.capture == Capture::Scan;
    let compensation = ev
        .compensation
        .as_ref()
        .map(|c| Compensation {
            argv: c.argv.clone(),
            idempotency_key: c.idempotency_key.clone(),
        })
        .or(class.compensation.clone());
    let idempotency = match ev.idempotency.as_deref() {
        Some("idempotent") => Idempotency::Idempotent,
        Some("conditional") => Idempotency::Conditional,
        Some("non_idempotent") => Idempotency::NonIdempotent,
        _ => class.idempotency,
    };
    let side_effects = if ev.side_effects.is_empty() {
        class.side_effects.clone()
    } else {
        ev.side_effects.clone()
    };
    let outside = idempotency != Idempotency::Idempotent && side_effects.iter().any(|e| e != "fs");
    drafts.push(Draft::in_session(
        ev.session.clone(),
        Body::ToolCall(ToolCall {
            call: call.clone(),
            step: 1,
            tool: tool.clone(),
            status: CallStatus::Started,
            input_hash: ev.input_hash.as_deref().and_then(|h| h.parse().ok()),
            risk: Some(class.risk),
            idempotency: Some(idempotency),
            replay_policy: Some(class.replay_policy),
            side_effects,
            paths: targets.iter().map(|(p, _)| p.clone()).collect(),
            result_ref: None,
            compensation,
            error: None,
            agent: Some(ev.format.as_str().to_string()),
            turn: ev.turn.clone(),
            subagent: ev.subagent.clone(),
            before: snaps
                .iter()
                .zip(&predicted)
                .zip(&targets)
                .map(|(((p, s), e), (_, role))| crate::record::PathHash {
                    path: p.clone(),
                    hash: s.hash,
                    mode: s.mode.map(crate::record::file_mode_string),
                    expected: *e,
                    expected_absent: matches!(
                        role,
                        capture::TargetRole::Delete | capture::TargetRole::MoveFrom
                    ),
                })
                .collect(),
            unrecorded: Vec::new(),
            outcome_unknown: false,
        }),
    ));
    let mut warnings = Vec::new();
    if scan {
        warnings = walk_then_record(ws, cfg, &key, &drafts)?;
    } else {
        after_snapshot()?;
        append(ws, &drafts)?;
    }
    crate::timing("pre: recorded");
    agent_files::save(&dir, &reg)?;
    let state = CallState {
        call: call.clone(),
        session: ev.session.clone(),
        tool,
        targets: snaps,
        scan,
        proc: ev.owner,
        agent: Some(ev.format.as_str().to_string()),
        turn_ended: false,
        outside,
    };
    write_json(&calls_dir(ws)?, &format!("{key}.json"), &state)?;
    Ok(HookStats {
        call: Some(call),
        user_edits,
        warnings,
        ..Default::default()
    })
}

fn append(ws: &Workspace, drafts: &[Draft]) -> Result<(), WorkspaceError> {
    ws.ledger().lock()?.append(drafts)?;
    Ok(())
}

fn after_snapshot() -> Result<(), WorkspaceError> {
    crate::failpoint::hit("hook.pre.after_snapshot")
        .map_err(|e| FsError::new("snapshot", ".agent-runtime/index", e).into())
}

/// A shell pre: the workspace is walked first (the command has not started:
/// nothing the agent does can fall between the walk and the record), then
/// the `started` record (`drafts`, which do not depend on the walk) is
/// appended; the append syncs the snapshot the walk saved beside the
/// ledger's own `fdatasync`: one wait for both. Returns once both are
/// durable. If the walk fails, a `failed` record closes the call in the
/// same append, so that it is never left in doubt.
fn walk_then_record(
    ws: &Workspace,
    cfg: &Config,
    key: &str,
    drafts: &[Draft],
) -> Result<Vec<String>, WorkspaceError> {
    let walked = (|| -> Result<Vec<crate::record::Unrecorded>, WorkspaceError> {
        let (snap, skipped) = crate::scan::pre(ws, cfg, key)?;
        ws.dispose(snap);
        after_snapshot()?;
        Ok(skipped)
    })();
    let e = match walked {
        Ok(skipped) => {
            append(ws, drafts)?;
            return Ok(first_use_warning(cfg, &skipped));
        }
        Err(e) => e,
    };
    // The `started` record is the last draft; its call ends `failed`.
    let mut all = drafts.to_vec();
    if let Some(Draft {
        session,
        body: Body::ToolCall(started),
    }) = drafts.last()
    {
        let error = format!(
            "ckpt could not take the workspace snapshot before this call: {}",
            crate::error_line(&e)
        );
        let end = ToolCall::end(
            started.call.clone(),
            started.tool.clone(),
            CallStatus::Failed,
            Some(error),
        );
        let failed = ToolCall {
            agent: started.agent.clone(),
            ..end
        };
        all.push(Draft::in_session(session.clone(), Body::ToolCall(failed)));
    }
    // (If this fails too, nothing says the call started: its post finds no
    // state and says so.)
    let _ = append(ws, &all);
    Err(e)
}

/// What a first walk says of the files it left without a copy (empty:
/// nothing to say).
fn first_use_warning(cfg: &Config, skipped: &[crate::record::Unrecorded]) -> Vec<String> {
    let Some(first) = skipped.first() else {
        return Vec::new();
    };
    let more = match skipped.len() {
        1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    vec![format!(
        "no copy is kept of `{}` ({} bytes){more}: above first_use_max_bytes = {} (or max_blob_bytes), so a shell call that changes one cannot be undone; `ckpt status` lists them",
        first.path,
        first.size.unwrap_or(0),
        cfg.first_use_max_bytes
    )]
}

fn post(ws: &Workspace, cfg: &Config, ev: &HookEvent) -> Result<HookStats, HookError> {
    let (fresh_call, key) = call_id(ws, ev);
    let cdir = calls_dir(ws)?;
    let state: Option<CallState> = read_json(&cdir, &format!("{key}.json"));
    post_with(ws, cfg, ev, fresh_call, &key, state)
}

/// The post of the call whose pre left `state` under `key`.
fn post_with(
    ws: &Workspace,
    cfg: &Config,
    ev: &HookEvent,
    fresh_call: String,
    key: &str,
    state: Option<CallState>,
) -> Result<HookStats, HookError> {
    let cdir = calls_dir(ws)?;
    let mut warnings = Vec::new();
    let class = ev.tool.as_deref().map(|t| cfg.classify(t));
    let one_record = state.is_none() && class.as_ref().is_some_and(|c| read_only(ev, c));
    let (call, session, tool, mut before): (
        String,
        Option<String>,
        String,
        Vec<(RelPath, FileState)>,
    ) = match &state {
        Some(s) => (
            s.call.clone(),
            s.session.clone().or(ev.session.clone()),
            s.tool.clone(),
            s.targets
                .iter()
                .map(|(p, s)| (p.clone(), s.to_state()))
                .collect(),
        ),
        None => {
            if !one_record {
                warnings.push(format!(
                    "no pre hook was recorded for this call{}; recording what is known",
                    ev.call
                        .as_deref()
                        .map(|c| format!(" ({c})"))
                        .unwrap_or_default()
                ));
            }
            (
                ev.call.clone().unwrap_or(fresh_call),
                ev.session.clone(),
                ev.tool.clone().unwrap_or_else(|| "unknown".into()),
                Vec::new(),
            )
        }
    };
    // Targets named only by the post payload (or a post without a pre).
    let mut unknown_before = Vec::new();
    if ev.capture == Capture::Declared {
        for (rel, _) in resolve_targets(ws, ev)? {
            if !before.iter().any(|(p, _)| *p == rel) {
                match reconstruct_before(ws, ev, &rel)? {
                    Some(b) => before.push((rel, b)),
                    None => {
                        warnings.push(format!(
                            "`{rel}` was changed by a call ckpt saw no pre hook for, and what it held before is unknown: not recorded, and a rollback will not touch it"
                        ));
                        unknown_before.push(rel);
                    }
                }
            }
        }
    }
    let dir = ws.state_dir()?;
    let _g = StateLock::take(&dir)?;
    let mut drafts = Vec::new();
    let mut patches = 0;
    let mut reg = agent_files::load(ws, &dir);
    let mut user_edits = 0;
    for (rel, b) in &before {
        let mut b = b.clone();
        // Claude Code's post says what the file held when the tool read it. Trust it
        // only if the tool input turns it into what is on disk now; then a
        // difference from our pre snapshot is the user's edit made during the call.
        if let Some(OriginalFile::Text(orig)) = &ev.original_file {
            let orig_hash = ContentHash::of(orig.as_bytes());
            if b.hash() != Some(orig_hash) && original_is_consistent(ws, ev, rel, orig) {
                let h = ws
                    .blobs()
                    .put_bytes(orig.as_bytes())
                    .map_err(WorkspaceError::from)?;
                drafts.push(Draft::in_session(
                    session.clone(),
                    Body::UserEdit(UserEdit {
                        path: rel.clone(),
                        before_hash: b.hash(),
                        after_hash: Some(h),
                        before_mode: b.mode_string(),
                        after_mode: b.mode_string(),
                    }),
                ));
                user_edits += 1;
                let mode = match b {
                    FileState::File { mode, .. } => mode,
                    _ => 0o644,
                };
                b = FileState::File { hash: h, mode };
            } else if b.hash() != Some(orig_hash) {
                warnings.push(format!(
                    "the agent's originalFile for `{rel}` matches neither ckpt's snapshot nor the result; ckpt's snapshot is used"
                ));
            }
        }
        let after = call::snapshot(ws, rel)?;
        if let Some((d, _)) = call::patch_for(
            ws,
            &call,
            session.as_deref(),
            rel,
            &b,
            &after,
            PatchSource::EditTool,
            cfg.diff_max_bytes,
        )? {
            drafts.push(d);
            patches += 1;
        }
        if after != b {
            reg.insert(rel.clone(), AgentFile::observed(ws, rel, &after, &call));
        }
    }
    // Calls that name no file: compare the workspace with the call's pre snapshot.
    let mut unrecorded: Vec<crate::record::Unrecorded> = unknown_before
        .into_iter()
        .map(|path| crate::record::Unrecorded {
            path,
            reason: "before_unknown".into(),
            size: None,
        })
        .collect();
    if state.as_ref().is_some_and(|s| s.scan) {
        match crate::scan::load_for_call(ws, key) {
            Some(pre_snap) => {
                // Many files: their syncs become one syncfs before the records
                // that name them (the durable set decides, from 32 on).
                // Other shell calls open right now could have made any change we
                // see: name them all rather than guess (issue 3).
                let others = open_scan_calls(ws, &call, session.as_deref());
                // The contents the scan stores (or reads from git) are diffed
                // right after: kept in memory up to a budget, not read back.
                let kept = ws.blobs().keep_recent(RECENT_BUDGET);
                let crate::scan::Scanned { changes, unknown } = crate::scan::post(ws, cfg, &pre_snap)?;
                ws.dispose(pre_snap);
                for u in &unknown {
                    warnings.push(format!(
                        "`{}` changed, but its content before or after the call could not be stored ({}): not recorded, and a rollback will not touch it",
                        u.path,
                        match u.reason.as_str() {
                            "too_large" => format!(
                                "{} bytes, above max_blob_bytes = {}",
                                u.size.unwrap_or(0),
                                cfg.max_blob_bytes
                            ),
                            "not_copied_at_first_use" => format!(
                                "{} bytes: not copied at first use, above first_use_max_bytes = {}",
                                u.size.unwrap_or(0),
                                cfg.first_use_max_bytes
                            ),
                            _ => "unreadable, or a damaged git object".to_string(),
                        }
                    ));
                }
                unrecorded.extend(unknown);
                // A change another call already recorded exactly (an edit tool
                // that ran during this call's window) is that call's, not ours.
                // (Its write must fall inside our window: what we saw before the
                // call differs from what it left, and what is there now is exactly it.)
                crate::timing("post: changes found");
                let mine: Vec<_> = changes
                    .into_iter()
                    .filter(|ch| {
                        let after = Snap::from_state(&ch.after);
                        let before = Snap::from_state(&ch.before);
                        !reg.get(&ch.path).is_some_and(|af| {
                            af.call != call
                                && ch.from.is_none()
                                && af.hash.is_some()
                                && (af.hash, af.mode, af.symlink) == (after.hash, after.mode, after.symlink)
                                && (af.hash, af.mode, af.symlink) != (before.hash, before.mode, before.symlink)
                        })
                    })
                    .collect();
                // Diffs and artifacts, on two threads when there are many.
                let made = crate::par::map(&mine, |ch| match &ch.from {
                    Some(from) => call::rename_patch(ws, &call, session.as_deref(), (from, &ch.path), &ch.before, &ch.after, PatchSource::Shell).map(Some),
                    None => call::patch_for(ws, &call, session.as_deref(), &ch.path, &ch.before, &ch.after, PatchSource::Shell, cfg.diff_max_bytes),
                });
                drop(kept);
                crate::timing("post: patches written");
                for (ch, patch) in mine.iter().zip(made) {
                    if let Some((mut d, _)) = patch? {
                        if !others.is_empty()
                            && let Body::FilePatch(fp) = &mut d.body
                        {
                            fp.candidates = std::iter::once(call.clone()).chain(others.iter().cloned()).collect();
                        }
                        drafts.push(d);
                        patches += 1;
                        if let Some(from) = &ch.from {
                            reg.remove(from);
                        }
                        reg.insert(ch.path.clone(), AgentFile::observed(ws, &ch.path, &ch.after, &call));
                    }
                }
            }
            None => warnings.push("the workspace snapshot taken before this call is missing; its file changes are not recorded".into()),
        }
    }
    let mut failed = ev.phase == Phase::PostFailure || ev.outcome == Some(Outcome::Failed);
    let mut error = ev.error.clone();
    // Codex says how a shell call ended only in its transcript.
    if !failed
        && ev.format == capture::Format::Codex
        && ev.capture == Capture::Scan
        && let (Some(t), Some(c)) = (&ev.transcript_path, &ev.call)
        && let Some(code) = crate::codex_transcript::shell_exit_code(std::path::Path::new(t), c)
        && code != 0
    {
        failed = true;
        error = Some(format!("exit status {code}"));
    }
    let end = if failed {
        let error = error.unwrap_or_else(|| "the tool reported a failure".into());
        ToolCall::end(call.clone(), tool, CallStatus::Failed, Some(error))
    } else {
        ToolCall::end(call.clone(), tool, CallStatus::Succeeded, None)
    };
    let end = match (&class, one_record) {
        // The call's one record: its class too, as a `started` would have.
        (Some(c), true) => ToolCall {
            step: 1,
            input_hash: ev.input_hash.as_deref().and_then(|h| h.parse().ok()),
            risk: Some(c.risk),
            idempotency: Some(c.idempotency),
            replay_policy: Some(c.replay_policy),
            turn: ev.turn.clone(),
            subagent: ev.subagent.clone(),
            ..end
        },
        _ => end,
    };
    drafts.push(Draft::in_session(
        session.clone(),
        Body::ToolCall(ToolCall {
            paths: before.iter().map(|(p, _)| p.clone()).collect(),
            agent: Some(ev.format.as_str().to_string()),
            unrecorded,
            outcome_unknown: ev.outcome_unknown,
            ..end
        }),
    ));
    crate::failpoint::hit("hook.post.before_append").map_err(|e| {
        WorkspaceError::from(FsError::new("append", ".agent-runtime/ledger.jsonl", e))
    })?;
    ws.ledger()
        .lock()
        .map_err(WorkspaceError::from)?
        .append(&drafts)
        .map_err(WorkspaceError::from)?;
    crate::timing("post: recorded");
    agent_files::save(&dir, &reg)?;
    let _ = rustix::fs::unlinkat(
        &cdir,
        format!("{key}.json").as_str(),
        rustix::fs::AtFlags::empty(),
    );
    if state.as_ref().is_some_and(|s| s.scan) {
        crate::scan::forget_call(ws, key);
    }
    Ok(HookStats {
        call: Some(call),
        patches,
        user_edits,
        warnings,
        ..Default::default()
    })
}

/// The hash `rel` should have after the call, predicted from the tool input
/// and the before state just stored (`None` when the input does not say, or
/// the file is not UTF-8 text).
fn predicted_after(
    ws: &Workspace,
    ev: &HookEvent,
    rel: &RelPath,
    before: &FileState,
) -> Option<ContentHash> {
    let exp = expected_for(ev, ws, rel)?;
    if let capture::Expected::Content(text) = exp {
        // A whole-file write: no need to read the before state back.
        return Some(ContentHash::of(text.as_bytes()));
    }
    let text = match before {
        FileState::Absent => String::new(),
        FileState::File { hash, .. } => String::from_utf8(ws.blobs().get(hash).ok()?).ok()?,
        _ => return None,
    };
    capture::apply_expected(&text, exp).map(|t| ContentHash::of(t.as_bytes()))
}

fn expected_for<'a>(
    ev: &'a HookEvent,
    ws: &Workspace,
    rel: &RelPath,
) -> Option<&'a capture::Expected> {
    let base = base_dir(ws, ev);
    ev.targets.iter().find_map(|t| {
        let r = ws.rel_path(t.path.as_bytes(), base.as_ref()).ok()?;
        if r == *rel { t.expected.as_ref() } else { None }
    })
}

fn original_is_consistent(ws: &Workspace, ev: &HookEvent, rel: &RelPath, orig: &str) -> bool {
    let Some(exp) = expected_for(ev, ws, rel) else {
        return false;
    };
    let Some(predicted) = capture::apply_expected(orig, exp) else {
        return false;
    };
    matches!(ws.files().read(rel), Ok(now) if now == predicted.as_bytes())
}

/// The before state of a file named only by a post event: Claude's
/// `originalFile` when it is consistent, else the tool input reversed, else
/// what the agent last left there, else unknown (treated as absent).
fn reconstruct_before(
    ws: &Workspace,
    ev: &HookEvent,
    rel: &RelPath,
) -> Result<Option<FileState>, WorkspaceError> {
    let mode = match ws.files().entry(rel) {
        Ok(EntryKind::File { mode, .. }) => mode & 0o777,
        _ => 0o644,
    };
    // The agent's word that the file held these bytes, if the tool input
    // turns them into what is on disk. (Its `originalFile: null`, "there
    // was no file", is not taken on trust with no pre to confirm it: a
    // rollback would delete the file, issue 21 item 9.)
    if let Some(OriginalFile::Text(t)) = &ev.original_file
        && original_is_consistent(ws, ev, rel, t)
    {
        return Ok(Some(FileState::File {
            hash: ws.blobs().put_bytes(t.as_bytes())?,
            mode,
        }));
    }
    if let (Some(exp), Ok(now)) = (expected_for(ev, ws, rel), ws.files().read(rel))
        && let Ok(now) = String::from_utf8(now)
        && let Some(prev) = capture::reverse_expected(&now, exp)
    {
        return Ok(Some(FileState::File {
            hash: ws.blobs().put_bytes(prev.as_bytes())?,
            mode,
        }));
    }
    let dir = ws.state_dir()?;
    let reg = agent_files::load(ws, &dir);
    if let Some(af) = reg.get(rel)
        && let Some(h) = af.hash
    {
        return Ok(Some(FileState::File {
            hash: h,
            mode: af.mode.unwrap_or(mode),
        }));
    }
    // Nothing tells what it held: ckpt does not claim to know.
    Ok(None)
}

/// The state of every call whose pre has run and whose post has not.
fn open_calls(ws: &Workspace) -> Vec<CallState> {
    open_calls_keyed(ws).into_iter().map(|(_, s)| s).collect()
}

/// [`open_calls`] with each one's state key.
fn open_calls_keyed(ws: &Workspace) -> Vec<(String, CallState)> {
    let Ok(dir) = calls_dir(ws) else {
        return Vec::new();
    };
    let Ok(mut it) = rustix::fs::Dir::read_from(&dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Some(Ok(e)) = it.next() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(key) = name.strip_suffix(".json")
            && let Some(s) = read_json::<CallState>(&dir, &name)
        {
            out.push((key.to_string(), s));
        }
    }
    out.sort_by(|a, b| a.1.call.cmp(&b.1.call));
    out
}

/// Why open calls are closed without their post.
#[derive(Debug, Clone, Copy)]
pub enum Close<'a> {
    /// The agent ended the turn or the session (`turn-end`): every call of
    /// that session still open was rejected, blocked or cut short.
    TurnEnded(Option<&'a str>),
    /// The agent's session ended (`SessionEnd`, Codex's `Interrupt`): as
    /// [`Close::TurnEnded`], except shell calls whose agent process is known,
    /// whose command may outlive the agent (Gemini CLI 0.61 fires
    /// `SessionEnd` on Ctrl-C while the command still runs): those are
    /// closed once that process is gone ([`Close::AgentGone`], by
    /// `recover` or a rollback), with everything the command wrote.
    SessionEnded(Option<&'a str>),
    /// The agent process a call belongs to is gone (killed, crashed).
    AgentGone,
}

/// One call closed without its post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedCall {
    /// The call.
    pub call: String,
    /// The tool.
    pub tool: String,
    /// What was recorded: `changes` (what changed since its pre, as its
    /// patches), `never_ran` (its files are as before), `ended` (nothing to
    /// compare), `left` (its declared files changed: `ckpt recover`
    /// tells applied from diverged), or `pending` (named, not closed: a
    /// dry run).
    pub how: &'static str,
    /// Patches recorded for it.
    pub patches: usize,
}

/// Whether the open call `s` is one `why` closes.
fn closes(s: &CallState, why: Close<'_>) -> bool {
    match why {
        Close::TurnEnded(session) => s.session.as_deref() == session,
        Close::SessionEnded(session) => {
            s.session.as_deref() == session && !(s.scan && s.proc.is_some())
        }
        Close::AgentGone => s
            .proc
            .is_some_and(|p| crate::sys::procs::alive(&p) == Some(false)),
    }
}

/// The open calls whose agent process still runs (`ckpt recover` leaves
/// them alone).
pub fn running_calls(ws: &Workspace) -> std::collections::HashSet<String> {
    open_calls(ws)
        .into_iter()
        .filter(|s| {
            !s.turn_ended
                && s.proc
                    .is_some_and(|p| crate::sys::procs::alive(&p) == Some(true))
        })
        .map(|s| s.call)
        .collect()
}

/// The open calls `why` would close, without closing them: (call, tool).
pub fn closable_calls(ws: &Workspace, why: Close<'_>) -> Vec<(String, String)> {
    open_calls(ws)
        .into_iter()
        .filter(|s| closes(s, why))
        .map(|s| (s.call, s.tool))
        .collect()
}

/// Closes the open calls `why` names, from what is on disk: a shell call
/// (or any call ckpt compares the workspace around) gets what changed since
/// its pre recorded as its patches, as its post would have, and ends
/// `failed` with the reason; a call that names files ends `failed` if they
/// are as before (it never ran), and is left to `ckpt recover` if they
/// changed; any other call ends `failed`.
pub fn close_open_calls(
    ws: &Workspace,
    cfg: &Config,
    why: Close<'_>,
) -> Result<Vec<ClosedCall>, HookError> {
    let mut out = Vec::new();
    for (key, st) in open_calls_keyed(ws) {
        if !closes(&st, why) {
            continue;
        }
        let reason = match why {
            Close::TurnEnded(_) | Close::SessionEnded(_) => {
                "no after-event came before the agent ended its turn"
            }
            Close::AgentGone => "interrupted: the agent process it ran under is gone",
        };
        let changed = st
            .targets
            .iter()
            .map(|(rel, b)| Ok(Snap::from_state(&call::snapshot(ws, rel)?) != *b))
            .collect::<Result<Vec<bool>, WorkspaceError>>()?;
        let (how, error) = if st.scan {
            (
                "changes",
                format!(
                    "{reason}; what changed in the workspace since it started is recorded as its work"
                ),
            )
        } else if changed.iter().any(|c| *c) {
            if let Close::TurnEnded(_) | Close::SessionEnded(_) = why {
                // Not running any more, whatever its agent does now.
                let st = CallState {
                    turn_ended: true,
                    ..st.clone()
                };
                write_json(&calls_dir(ws)?, &format!("{key}.json"), &st)?;
            }
            out.push(ClosedCall {
                call: st.call.clone(),
                tool: st.tool.clone(),
                how: "left",
                patches: 0,
            });
            continue;
        } else if st.targets.is_empty() {
            ("ended", reason.to_string())
        } else {
            (
                "never_ran",
                format!("{reason}; its files are as before, so it never ran"),
            )
        };
        let format = st
            .agent
            .as_deref()
            .and_then(|a| a.parse().ok())
            .unwrap_or(capture::Format::Generic);
        let mut ev = HookEvent::empty(format, Phase::PostFailure);
        ev.call = Some(st.call.clone());
        ev.session = st.session.clone();
        ev.tool = Some(st.tool.clone());
        ev.capture = if st.scan {
            Capture::Scan
        } else {
            Capture::Skip
        };
        ev.outcome = Some(Outcome::Failed);
        ev.error = Some(if st.outside {
            format!(
                "{error}; it reaches outside the workspace, and whether it did is unknown: check before running it again"
            )
        } else {
            error
        });
        ev.outcome_unknown = st.outside;
        let (call, tool) = (st.call.clone(), st.tool.clone());
        let stats = then_sync(ws, || post_with(ws, cfg, &ev, call.clone(), &key, Some(st)))?;
        out.push(ClosedCall {
            call,
            tool,
            how,
            patches: stats.patches,
        });
    }
    Ok(out)
}

/// `turn-end`: closes the session's calls still open.
fn turn_end(ws: &Workspace, cfg: &Config, ev: &HookEvent) -> Result<HookStats, HookError> {
    // Only this session's: calls of a gone agent are closed by the commands
    // a person runs after a crash (`recover`, `rollback`), never by another
    // agent's hook.
    let session = ev.session.as_deref();
    let why = match ev.source.as_deref() {
        Some("SessionEnd" | "Interrupt" | "sessionEnd") => Close::SessionEnded(session),
        _ => Close::TurnEnded(session),
    };
    let closed = close_open_calls(ws, cfg, why)?;
    Ok(HookStats {
        warnings: closed_warnings(&closed),
        ..Default::default()
    })
}

/// One line per call closed without its post, for stderr.
pub fn closed_warnings(closed: &[ClosedCall]) -> Vec<String> {
    closed
        .iter()
        .map(|c| match c.how {
            "changes" => format!(
                "call {} ({}) ended without an after-event; {} change(s) since it started are recorded as its work (`ckpt diff --call {}`)",
                c.call, c.tool, c.patches, c.call
            ),
            "left" => format!(
                "call {} ({}) ended without an after-event and its files changed; run `ckpt recover` to tell whether it finished",
                c.call, c.tool
            ),
            "pending" => format!(
                "call {} ({}) was cut short (its agent process is gone) and what it changed is not recorded yet: run `ckpt recover`, or any rollback, to record it as that call's",
                c.call, c.tool
            ),
            _ => format!(
                "call {} ({}) ended without an after-event; recorded as not run",
                c.call, c.tool
            ),
        })
        .collect()
}

/// The ids of shell (scan) calls other than `me` that are open.
/// Only calls that may still be running count: not one whose turn ended
/// or whose agent process is gone (closed later, from what changed by
/// then), and one whose agent is unknown only within `session` — a shell
/// call left in doubt was a candidate author of every later shell change
/// in every session, so a rollback of any of them conflicted (issue 21
/// item 10).
fn open_scan_calls(ws: &Workspace, me: &str, session: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = open_calls(ws)
        .into_iter()
        .filter(|s| s.scan && s.call != me && !s.turn_ended)
        .filter(|s| match s.proc.map(|p| crate::sys::procs::alive(&p)) {
            Some(Some(alive)) => alive,
            _ => s.session.as_deref() == session,
        })
        .map(|s| s.call)
        .collect();
    out.sort();
    out
}

/// The paths declared by open calls.
fn open_call_targets(ws: &Workspace) -> std::collections::HashSet<RelPath> {
    open_calls(ws)
        .into_iter()
        .flat_map(|s| s.targets.into_iter().map(|(p, _)| p))
        .collect()
}
