//! `ckpt recover` (DESIGN §6): after a crash of the agent or of ckpt, say
//! what happened to every call and action, finish what can be finished, and
//! write a note the model can be handed.
//!
//! Calls are classified from their `tool_call` records (RELIABILITY T14):
//! `completed` (last status succeeded), `failed`, `pending` (planned or
//! approved, never started) and `uncertain` (started, never ended). Calls
//! that completed or failed before the last checkpoint are counted, not
//! listed. For an uncertain call that declared its files, each file is
//! compared with the before hash and the predicted after hash the
//! `started` record carries:
//! - every file at its predicted after → `applied`: the after bytes are
//!   stored, a `file_patch` and a `succeeded` record (written by
//!   `ckpt-recover`) close the call; do not repeat it;
//! - every file at its before state → `not_applied`: a `failed` record
//!   ("abandoned") closes the call; safe to retry;
//! - anything else → `diverged`: a pending `conflict` is raised for the file
//!   (never rolled back automatically) and a person is needed.
//!
//! Uncertain calls without declared files (shell, MCP, unknown tools) stay
//! uncertain; they need a person unless the catalog says they are idempotent.
//! Unfinished rollbacks are finished from their plan; other unfinished
//! actions are reported. Running `recover` twice changes nothing the second
//! time.

use std::collections::HashMap;
use std::os::fd::AsFd;

use serde::Serialize;
use serde_json::json;

use crate::action::ActionLock;
use crate::durable::Keep;
use crate::fs_util::{self, FsError};
use crate::hash::ContentHash;
use crate::paths::RelPath;
use crate::record::{
    ActionType, Body, CallStatus, ConflictRecord, Draft, FilePatch, Idempotency, PatchSource,
    Record, ReplayPolicy, Resolution, ToolCall,
};
use crate::recover_index::Suffix;
use crate::rollback;
use crate::workspace::{Workspace, WorkspaceError};
use crate::writeback;

/// What became of one file of an uncertain call.
#[derive(Debug, Clone, Serialize)]
pub struct FileEvidence {
    /// The path.
    pub path: crate::RelPath,
    /// `applied`, `not_applied` or `diverged`.
    pub verdict: &'static str,
    /// Hash before the call.
    pub before: Option<ContentHash>,
    /// Predicted hash after the call, when the input said.
    pub expected: Option<ContentHash>,
    /// Hash now.
    pub current: Option<ContentHash>,
    /// The conflict raised for a diverged file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflict: Option<String>,
}

/// One call's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct CallVerdict {
    /// The call id.
    pub call: String,
    /// The tool.
    pub tool: String,
    /// The session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// `completed`, `failed`, `pending`, `uncertain`, or `running` (started,
    /// and its agent process still runs).
    pub status: &'static str,
    /// For an uncertain file edit: `applied`, `not_applied` or `diverged`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<&'static str>,
    /// What to do about repeating it: `no` (done; do not repeat), `auto`
    /// (safe to run again), `ask` (ask a person first), `never`.
    pub replay: &'static str,
    /// Whether this run of `recover` closed the call in the ledger.
    pub recovered_now: bool,
    /// The files checked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileEvidence>,
    /// The error of a failed call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Declared paths, for the note.
    #[serde(skip)]
    pub paths: Vec<crate::RelPath>,
    /// Whether a person must look at it.
    #[serde(skip)]
    pub needs_person: bool,
}

/// One action's state after recovery.
#[derive(Debug, Clone, Serialize)]
pub struct ActionVerdict {
    /// The action id.
    pub action: String,
    /// `rollback_files`, `restore_session`, `compensate`.
    #[serde(rename = "type")]
    pub action_type: &'static str,
    /// `finished_now`, `interrupted` (reported, needs a person or a rerun).
    pub status: &'static str,
    /// One line.
    pub detail: String,
}

/// What `recover` found and did.
#[derive(Debug, Clone)]
pub struct RecoverReport {
    /// Every call that is not plainly completed, and completed calls since the
    /// last checkpoint.
    pub calls: Vec<CallVerdict>,
    /// Unfinished actions.
    pub actions: Vec<ActionVerdict>,
    /// The note written (`.agent-runtime/RECOVERY.md`).
    pub note: String,
    /// The note's text.
    pub note_text: String,
    /// Whether something needs a person (exit 5).
    pub needs_person: bool,
    /// Bytes of a torn tail cut off (0 when none).
    pub torn_bytes: u64,
    /// Total calls seen.
    pub total_calls: usize,
}

struct CallInfo<'r> {
    first: &'r ToolCall,
    started: Option<&'r ToolCall>,
    last: &'r ToolCall,
    session: Option<String>,
    seq_last: u64,
    patches: Vec<&'r FilePatch>,
}

fn replay_for(first: &ToolCall, applied_or_done: bool, evidence_ok: bool) -> &'static str {
    if applied_or_done {
        return "no";
    }
    match (first.replay_policy, first.idempotency) {
        (Some(ReplayPolicy::Never), _) => "never",
        (_, Some(Idempotency::Idempotent)) => "auto",
        (Some(ReplayPolicy::Auto), Some(Idempotency::Conditional)) if evidence_ok => "auto",
        (Some(ReplayPolicy::Auto), None) if evidence_ok => "auto",
        _ => "ask",
    }
}

/// What a person said of a call in doubt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// It did what it was asked (the publish reached the registry).
    Succeeded,
    /// It did not happen, or failed.
    Failed,
}

/// `ckpt recover --settle CALL --as succeeded|failed`: a person who checked
/// a call in doubt (started and never ended, or ended by ckpt with its
/// outcome unknown) records what happened, so recovery stops asking. The
/// end record is the person's (`agent: "person"`); nothing is run or undone.
pub fn settle(ws: &Workspace, call: &str, how: Settled) -> Result<CallStatus, WorkspaceError> {
    let _lock = ActionLock::take(ws)?;
    drop(ws.ledger().lock()?);
    let head = crate::ledger::head_state(ws.runtime_dir().as_fd());
    let read = ws.read_ledger()?;
    ws.refuse_damaged(&read, head, "ckpt settles no call", None)?;
    let (calls, _) = collect_calls(&read.records);
    let Some((_, ci)) = calls.iter().find(|(id, _)| id == call) else {
        return Err(WorkspaceError::UnknownId(call.to_string()));
    };
    let in_doubt = match ci.last.status {
        CallStatus::Started => true,
        CallStatus::Failed => ci.last.outcome_unknown,
        _ => false,
    };
    if !in_doubt {
        return Err(WorkspaceError::NotApplicable(format!(
            "call `{call}` is not in doubt (its last record says {}); nothing to settle",
            serde_json::to_value(ci.last.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        )));
    }
    if crate::hook::running_calls(ws).contains(call) {
        return Err(WorkspaceError::NotApplicable(format!(
            "call `{call}` is still running under its agent; settle it once the agent is done (or gone)"
        )));
    }
    let (status, error) = match how {
        Settled::Succeeded => (CallStatus::Succeeded, "settled by a person: it happened"),
        Settled::Failed => (CallStatus::Failed, "settled by a person: it did not happen"),
    };
    let end = end_of(ci, status, Some(error.to_string()), "person");
    ws.ledger()
        .lock()?
        .append(&[Draft::in_session(ci.session.clone(), Body::ToolCall(end))])?;
    Ok(status)
}

/// The record that ends `ci` as `status`, written by `by` (not the agent):
/// the class fields of its `started` record, one step past its last.
fn end_of(ci: &CallInfo<'_>, status: CallStatus, error: Option<String>, by: &str) -> ToolCall {
    let started = ci.started.unwrap_or(ci.first);
    ToolCall {
        step: ci.last.step + 1,
        input_hash: started.input_hash,
        risk: started.risk,
        idempotency: started.idempotency,
        replay_policy: started.replay_policy,
        side_effects: started.side_effects.clone(),
        paths: started.paths.clone(),
        agent: Some(by.into()),
        ..ToolCall::end(ci.first.call.clone(), ci.first.tool.clone(), status, error)
    }
}

/// Runs recovery (see the module doc).
pub fn recover(ws: &Workspace) -> Result<RecoverReport, WorkspaceError> {
    let _lock = ActionLock::take(ws)?;
    // Taking the ledger lock repairs a torn tail (backed up first).
    let started_at = ws.clock().now_rfc3339();
    drop(ws.ledger().lock()?);
    let head = crate::ledger::head_state(ws.runtime_dir().as_fd());
    // From where the report can change on (a cached cut), or everything.
    let mut suffix = Suffix::read(ws)?;
    crate::trace::event(
        ws.runtime_dir().as_fd(),
        ws.clock(),
        "recover_read",
        json!({"after_seq": suffix.from.seq, "records": suffix.read.records.len()}),
    );
    let read = std::mem::take(&mut suffix.read);
    // A repair record appended just now says how many torn bytes were cut.
    let torn_bytes = match read.records.last() {
        Some(r) if r.ts >= started_at => match &r.body {
            Body::Repair(rp) => rp.dropped_bytes,
            _ => 0,
        },
        _ => 0,
    };
    ws.refuse_damaged(&read, head, "recovery will not act", None)?;
    let records = read.records;

    // Actions first: a rollback cut short is finished from its plan.
    let mut actions = Vec::new();
    for (id, ty) in unfinished_actions(&records) {
        let verdict = match ty {
            ActionType::RollbackFiles => match rollback::finish_action_locked(ws, &records, &id)? {
                Some(f) => {
                    let left = f
                        .files
                        .iter()
                        .filter(|x| {
                            matches!(
                                x.result,
                                rollback::FileResult::Raced | rollback::FileResult::Failed
                            )
                        })
                        .count();
                    ActionVerdict {
                        action: id,
                        action_type: "rollback_files",
                        status: "finished_now",
                        detail: if left == 0 {
                            format!("finished: {} files as planned", f.files.len())
                        } else {
                            format!(
                                "finished; {left} of {} files had changed since and were left as they are",
                                f.files.len()
                            )
                        },
                    }
                }
                None => continue,
            },
            ActionType::RestoreSession => {
                let at = crate::session::interrupted(&records)
                    .into_iter()
                    .find(|r| r.action == id);
                let detail = match at {
                    Some(r) if r.session_at() == "new_branch" => format!(
                        "the session {} moved to its new branch but the restore's end was not recorded; the next `ckpt restore-session` records it",
                        r.session.as_deref().unwrap_or("?")
                    ),
                    Some(r) => format!(
                        "the restore of session {} did not finish: the session is still at its old leaf; run the same `ckpt restore-session` again",
                        r.session.as_deref().unwrap_or("?")
                    ),
                    None => "the session restore did not finish; run the same `ckpt restore-session` again".into(),
                };
                ActionVerdict {
                    action: id,
                    action_type: "restore_session",
                    status: "interrupted",
                    detail,
                }
            }
            ActionType::Gc => {
                let done = crate::gc::finish(ws, &records, &id)?;
                ActionVerdict {
                    action: id,
                    action_type: "gc",
                    status: "finished_now",
                    detail: format!(
                        "finished: {} more files ({} bytes) removed as planned",
                        done.files, done.bytes
                    ),
                }
            }
            ActionType::Compensate => {
                let call = records
                    .iter()
                    .find_map(|r| match &r.body {
                        Body::Action(a) if a.action == id => a
                            .target
                            .get("call")
                            .and_then(|c| c.as_str())
                            .map(str::to_string),
                        _ => None,
                    })
                    .unwrap_or_else(|| "CALL".into());
                ActionVerdict {
                    action: id,
                    action_type: "compensate",
                    status: "interrupted",
                    detail: format!(
                        "the compensation of {call} was started but its end was never recorded: it may or may not have run; check, then `ckpt compensate {call} --force` only if it did not"
                    ),
                }
            }
        };
        actions.push(verdict);
    }
    // Calls whose agent process is gone are closed from what is on disk
    // (a shell call's changes since its pre become its patches); calls
    // whose agent still runs are left to it.
    let cfg = crate::config::Config::load(ws.runtime_dir())?;
    let closed = crate::hook::close_open_calls(ws, &cfg, crate::hook::Close::AgentGone).map_err(
        |e| match e {
            crate::hook::HookError::Record(e) => e,
            crate::hook::HookError::Path { source, .. } => WorkspaceError::Path(source),
        },
    )?;
    let running = crate::hook::running_calls(ws);
    // Re-read: finishing rollbacks and closing calls appended records.
    if actions.iter().any(|a| a.status == "finished_now") || !closed.is_empty() {
        suffix = suffix.reread(ws)?;
    } else {
        suffix.read.records = records;
    }
    let records = &suffix.read.records;

    let (calls, touched) = collect_calls(records);
    let last_ckpt_seq = records
        .iter()
        .rev()
        .find(|r| matches!(r.body, Body::Checkpoint(_)))
        .map(|r| r.seq)
        .unwrap_or(0);
    let open_conflicts: Vec<ConflictRecord> = crate::conflict::list(records)
        .into_iter()
        .filter(|c| c.resolution == Resolution::Pending)
        .collect();
    let total_calls = calls.len() + suffix.calls_before as usize;
    let mut verdicts = Vec::new();
    let mut drafts: Vec<Draft> = Vec::new();
    let mut new_conflicts = Vec::new();
    for (id, ci) in &calls {
        let started = ci.started.unwrap_or(ci.first);
        let mut v = CallVerdict {
            call: id.clone(),
            tool: ci.first.tool.clone(),
            session: ci.session.clone(),
            status: "completed",
            evidence: None,
            replay: "no",
            recovered_now: false,
            files: Vec::new(),
            error: ci.last.error.clone(),
            paths: started.paths.clone(),
            needs_person: false,
        };
        match ci.last.status {
            CallStatus::Succeeded => {
                if ci.seq_last <= last_ckpt_seq {
                    continue;
                }
            }
            // A failure in a turn a checkpoint closed is old news, like a
            // success there: counted, not listed (and it does not hold back
            // the cut `recover` reads from).
            CallStatus::Failed if !ci.last.outcome_unknown && ci.seq_last <= last_ckpt_seq => {
                continue;
            }
            CallStatus::Failed if ci.last.outcome_unknown => {
                // Closed by ckpt without its after-event, and its effects
                // reach outside the workspace: in doubt, not failed.
                v.status = "uncertain";
                v.evidence = Some("outcome_unknown");
                v.replay = replay_for(ci.first, false, false);
                v.needs_person = v.replay != "auto";
            }
            CallStatus::Failed => {
                v.status = "failed";
                v.replay = replay_for(ci.first, false, true);
                check_failed(ws, &touched, ci, &mut v)?;
            }
            CallStatus::Planned | CallStatus::Approved => {
                v.status = "pending";
                v.replay = replay_for(ci.first, false, true);
            }
            CallStatus::Started if running.contains(id) => {
                // Its agent still works on it: not in doubt, not ours to close.
                v.status = "running";
            }
            CallStatus::Started => {
                v.status = "uncertain";
                check_uncertain(
                    ws,
                    ci,
                    &mut v,
                    (&mut drafts, cfg.diff_max_bytes),
                    &open_conflicts,
                    &mut new_conflicts,
                )?;
            }
        }
        // (A read-only call is one record, `step` 1: it has no start.)
        if ci.started.is_none()
            && ci.first.step != 1
            && !matches!(ci.first.status, CallStatus::Planned | CallStatus::Approved)
        {
            // An end without a start (a post hook whose pre never ran).
            v.evidence = Some("no_started_record");
        }
        verdicts.push(v);
    }
    for c in &new_conflicts {
        drafts.push(Draft::new(Body::Conflict(c.clone())));
    }
    if !drafts.is_empty() {
        ws.ledger().lock()?.append(&drafts)?;
    }
    for c in &new_conflicts {
        crate::action::write_conflict_file(ws, c)?;
    }
    let needs_person = verdicts.iter().any(|v| v.needs_person)
        || actions.iter().any(|a| a.status == "interrupted");
    let note_text = note(&verdicts, &actions, torn_bytes, ws.clock().now_rfc3339());
    write_note(ws, &note_text)?;
    suffix.save_next(ws);
    Ok(RecoverReport {
        calls: verdicts,
        actions,
        note: ".agent-runtime/RECOVERY.md".into(),
        note_text,
        needs_person,
        torn_bytes,
        total_calls,
    })
}

pub use crate::open::unfinished_actions;

/// Every call with its records, in the order of its first record, and for
/// every path the seq of the last record that touched it (patch or user edit).
fn collect_calls(records: &[Record]) -> (Vec<(String, CallInfo<'_>)>, HashMap<&RelPath, u64>) {
    let mut calls: Vec<(String, CallInfo<'_>)> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut touched: HashMap<&RelPath, u64> = HashMap::new();
    for r in records {
        match &r.body {
            Body::ToolCall(c) => {
                let i = *index.entry(&c.call).or_insert_with(|| {
                    calls.push((
                        c.call.clone(),
                        CallInfo {
                            first: c,
                            started: None,
                            last: c,
                            session: r.session.clone(),
                            seq_last: r.seq,
                            patches: Vec::new(),
                        },
                    ));
                    calls.len() - 1
                });
                let e = &mut calls[i].1;
                if c.status == CallStatus::Started && e.started.is_none() {
                    e.started = Some(c);
                }
                e.last = c;
                e.seq_last = r.seq;
            }
            Body::FilePatch(p) => {
                touched.insert(&p.path, r.seq);
                if let Some(f) = &p.from_path {
                    touched.insert(f, r.seq);
                }
                if p.source != PatchSource::Rollback
                    && let Some(&i) = index.get(p.call.as_str())
                {
                    calls[i].1.patches.push(p);
                }
            }
            Body::UserEdit(u) => {
                touched.insert(&u.path, r.seq);
            }
            _ => {}
        }
    }
    (calls, touched)
}

/// A failed call's declared files should hold what the call left (its last
/// recorded patch, or the before state). One that holds something else, with
/// no later record touching it, changed in a way nobody recorded: the call
/// becomes uncertain and the file a conflict (T14).
fn check_failed(
    ws: &Workspace,
    touched: &HashMap<&RelPath, u64>,
    ci: &CallInfo<'_>,
    v: &mut CallVerdict,
) -> Result<(), WorkspaceError> {
    let Some(started) = ci.started else {
        return Ok(());
    };
    for b in &started.before {
        let touched_later = touched.get(&b.path).is_some_and(|&seq| seq > ci.seq_last);
        if touched_later {
            continue;
        }
        let left = ci
            .patches
            .iter()
            .rev()
            .find(|p| p.path == b.path)
            .map(|p| p.after_hash)
            .unwrap_or(b.hash);
        let obs = writeback::observe(ws, &b.path, 0)?;
        if obs.state.hash == left {
            continue;
        }
        // Every end record is written after looking at the call's files
        // (what changed during the call became its patches), so a file
        // that differs now was changed after the call ended, by someone
        // else: the call is over, nothing is in doubt (issue 21 item 7:
        // this used to reopen it, raise a conflict and exit 5 on every run).
        v.evidence = Some("changed_since_end");
        v.files.push(FileEvidence {
            path: b.path.clone(),
            verdict: "changed_since_end",
            before: b.hash,
            expected: left,
            current: obs.state.hash,
            conflict: None,
        });
    }
    Ok(())
}

/// The pending conflict for a diverged file of call `v` (an existing open one
/// for the same call and path, or a new one, the file's bytes stored first).
fn raise_diverged(
    ws: &Workspace,
    v: &CallVerdict,
    b: &crate::record::PathHash,
    expected: Option<ContentHash>,
    obs: &writeback::Observed,
    open_conflicts: &[ConflictRecord],
    new_conflicts: &mut Vec<ConflictRecord>,
) -> Result<String, WorkspaceError> {
    if let Some(c) = open_conflicts
        .iter()
        .chain(new_conflicts.iter())
        .find(|c| c.action == v.call && c.path == b.path)
    {
        return Ok(c.conflict.clone());
    }
    let stored = writeback::store_observed(ws, &b.path, obs)?;
    let c = ConflictRecord {
        conflict: ws.clock().new_id("cf_"),
        action: v.call.clone(),
        path: b.path.clone(),
        expected_hash: expected,
        actual_hash: stored,
        agent_patch_ref: None,
        base_ref: b.hash,
        agent_ref: expected.filter(|h| ws.blobs().contains(h)),
        current_ref: stored,
        resolution: Resolution::Pending,
        reason: Some("uncertain_call_diverged".into()),
        patches: Vec::new(),
        redone: Vec::new(),
        base_mode: b.hash.and(b.mode.clone()),
        agent_mode: None,
        current_mode: obs.state.mode.clone(),
        resolved_by: None,
    };
    let id = c.conflict.clone();
    new_conflicts.push(c);
    Ok(id)
}

/// Checks the files of a call that started and never ended.
fn check_uncertain(
    ws: &Workspace,
    ci: &CallInfo<'_>,
    v: &mut CallVerdict,
    (drafts, diff_max): (&mut Vec<Draft>, u64),
    open_conflicts: &[ConflictRecord],
    new_conflicts: &mut Vec<ConflictRecord>,
) -> Result<(), WorkspaceError> {
    let started = ci.started.unwrap_or(ci.first);
    if started.before.is_empty() {
        // Nothing declared (shell, MCP, unknown): its effects are unknown.
        v.replay = replay_for(ci.first, false, false);
        v.needs_person = v.replay != "auto";
        return Ok(());
    }
    let mut all_applied = true;
    let mut all_before = true;
    let mut patch_drafts = Vec::new();
    for b in &started.before {
        let obs = writeback::observe(ws, &b.path, 0)?;
        let cur = obs.state.hash;
        let applied =
            (b.expected.is_some() && cur == b.expected) || (b.expected_absent && cur.is_none());
        let unchanged = cur == b.hash;
        let verdict = if applied {
            "applied"
        } else if unchanged {
            "not_applied"
        } else {
            "diverged"
        };
        all_applied &= applied;
        all_before &= unchanged;
        let mut ev = FileEvidence {
            path: b.path.clone(),
            verdict,
            before: b.hash,
            expected: b.expected,
            current: cur,
            conflict: None,
        };
        if verdict == "applied" && !unchanged {
            let now = crate::call::snapshot(ws, &b.path)?;
            if now.hash() == cur {
                let before_state = match b.hash {
                    None => crate::call::FileState::Absent,
                    Some(h) => crate::call::FileState::File {
                        hash: h,
                        mode: crate::record::perm_of_mode(b.mode.as_deref(), None),
                    },
                };
                if let Some((d, _)) = crate::call::patch_for(
                    ws,
                    &v.call,
                    v.session.as_deref(),
                    &b.path,
                    &before_state,
                    &now,
                    PatchSource::EditTool,
                    diff_max,
                )? {
                    patch_drafts.push(d);
                }
            }
        }
        if verdict == "diverged" {
            ev.conflict = Some(raise_diverged(
                ws,
                v,
                b,
                b.expected,
                &obs,
                open_conflicts,
                new_conflicts,
            )?);
        }
        v.files.push(ev);
    }
    let close = |status: CallStatus, error: Option<String>| {
        Draft::in_session(
            v.session.clone(),
            Body::ToolCall(end_of(ci, status, error, "ckpt-recover")),
        )
    };
    if all_applied {
        v.evidence = Some("applied");
        v.replay = "no";
        v.recovered_now = true;
        drafts.extend(patch_drafts);
        drafts.push(close(CallStatus::Succeeded, None));
    } else if all_before {
        v.evidence = Some("not_applied");
        v.replay = replay_for(ci.first, false, true);
        v.recovered_now = true;
        drafts.push(close(
            CallStatus::Failed,
            Some("abandoned: the process stopped before the tool changed anything (found by ckpt recover)".into()),
        ));
    } else {
        v.evidence = Some("diverged");
        v.replay = "never";
        v.needs_person = true;
    }
    Ok(())
}

fn describe_call(v: &CallVerdict) -> String {
    let mut s = format!("{}({})", v.tool, v.call);
    if !v.paths.is_empty() {
        let shown: Vec<String> = v.paths.iter().take(3).map(|p| p.to_string()).collect();
        s.push_str(&format!(
            " on {}{}",
            shown.join(", "),
            if v.paths.len() > 3 { ", …" } else { "" }
        ));
    }
    s
}

/// The text of RECOVERY.md.
fn note(calls: &[CallVerdict], actions: &[ActionVerdict], torn: u64, now: String) -> String {
    let mut out = format!(
        "# Recovery note\n\nWritten by `ckpt recover` at {now}. Hand this to the model before it continues.\n"
    );
    if torn > 0 {
        out.push_str(&format!(
            "\nThe ledger ended in a half-written record ({torn} bytes); it was backed up and cut off. No acknowledged record was lost.\n"
        ));
    }
    let section = |out: &mut String, title: &str, lines: Vec<String>| {
        if !lines.is_empty() {
            out.push_str(&format!("\n## {title}\n\n"));
            for l in lines {
                out.push_str(&format!("- {l}\n"));
            }
        }
    };
    let mut done = Vec::new();
    let mut retry = Vec::new();
    let mut failed = Vec::new();
    let mut person = Vec::new();
    let mut running = Vec::new();
    for v in calls {
        let d = describe_call(v);
        match (v.status, v.evidence) {
            ("completed", _) => done.push(format!("{d}: completed. Do not repeat it.")),
            ("uncertain", Some("applied")) => done.push(format!(
                "{d}: it reached the disk before the crash (the file matches the expected result); now recorded as completed. Do not repeat it."
            )),
            ("uncertain", Some("not_applied")) => retry.push(format!(
                "{d}: never applied (the file is as it was before). {}",
                if v.replay == "auto" { "Safe to run again if still wanted." } else { "Ask before running it again." }
            )),
            ("uncertain", Some("diverged")) => {
                let cf: Vec<String> = v.files.iter().filter_map(|f| f.conflict.clone()).collect();
                person.push(format!(
                    "{d}: the file is neither as it was before nor as the call would leave it. Do not repeat it; a person must look (`ckpt show {}`).",
                    cf.join("`, `ckpt show ")
                ))
            }
            ("uncertain", _) => {
                let text = format!(
                    "{d} was running when the process stopped; its effects are unknown."
                );
                if v.replay == "auto" {
                    retry.push(format!("{text} The catalog says it is idempotent: safe to run again."))
                } else {
                    person.push(format!("{text} Do not run it again without checking what it did."))
                }
            }
            ("failed", _) => failed.push(format!(
                "{d} failed{}. {}",
                v.error
                    .as_deref()
                    .map(|e| format!(": {}", e.lines().next().unwrap_or("")))
                    .unwrap_or_default(),
                if v.replay == "auto" { "Safe to retry." } else { "Ask before retrying." }
            )),
            ("pending", _) => retry.push(format!("{d} was planned but never started.")),
            ("running", _) => running.push(format!(
                "{d} is still running: the agent process it belongs to is alive. Leave it to the agent."
            )),
            _ => {}
        }
    }
    let total_done = done.len();
    if total_done > 50 {
        let more = total_done - 50;
        done.drain(..more);
        done.insert(0, format!("… {more} earlier completed calls not listed"));
    }
    section(&mut out, "Finished — do not repeat", done);
    section(&mut out, "Did not happen — may be retried", retry);
    section(&mut out, "Failed", failed);
    section(&mut out, "Needs a person", person);
    section(&mut out, "Still running", running);
    section(
        &mut out,
        "ckpt's own actions",
        actions
            .iter()
            .map(|a| format!("{} {}: {}", a.action_type, a.action, a.detail))
            .collect(),
    );
    if calls.is_empty() && actions.is_empty() {
        out.push_str("\nNothing was in doubt: every call ended and every action finished.\n");
    }
    out
}

fn write_note(ws: &Workspace, text: &str) -> Result<(), WorkspaceError> {
    // Built from the ledger (already redacted); redacted again as the note is
    // handed to a model (T24).
    let text = crate::redact::redact_str(text);
    fs_util::write_atomic(
        ws.runtime_dir().as_fd(),
        "RECOVERY.md".as_ref(),
        text.as_bytes(),
        0o600,
        false,
        Keep::Named(ws.durable()),
    )
    .map_err(|e| WorkspaceError::from(FsError::new("write", ".agent-runtime/RECOVERY.md", e)))?;
    // No record follows to sync it: done here, its error reported.
    ws.sync_all()
}

/// JSON for the CLI (DESIGN §5 `recover`).
pub fn to_json(r: &RecoverReport) -> serde_json::Value {
    json!({
        "calls": r.calls,
        "actions": r.actions,
        "note": r.note,
        "needs_person": r.needs_person,
        "torn_bytes": r.torn_bytes,
    })
}
