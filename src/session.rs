//! The session tree (DESIGN.md §3 `session_entry`) and `restore_session`
//! (§6).
//!
//! **The tree.** A session is a set of `session_entry` records of one
//! `session`, each naming its `parent` (`null` at a root). The session's
//! *current leaf* is the last entry appended in it; [`append`] hangs a new
//! entry under it unless told another parent. Nothing is ever removed: moving
//! the session back appends a `branch` entry whose parent is the entry
//! returned to, so the branch left behind keeps its leaf and stays listed by
//! [`branches`] and readable by [`show_from`].
//!
//! **The fold.** [`show`] walks from a leaf to its root along `parent` links
//! and returns the path root first (branch entries included), the app state
//! in force (the last `app_state` on the path) and the last `compaction`.
//!
//! **restore_session.** [`restore_session`] holds the action lock, records an
//! `action` (`type: restore_session`) `started` with its plan, optionally rolls
//! the files back to the checkpoint (a `rollback_files` action of its own,
//! named in the outcome), optionally forks a Claude Code transcript, then
//! appends the `branch` entry and the action's end in one append.
//!
//! **After a crash.** The session moves only with the `branch` entry, so it is
//! either at its old leaf or on the new branch, never in between. A
//! `restore_session` action `started` without an end is *interrupted*
//! ([`interrupted`]): without its branch entry (`payload.action` names the
//! action) the session is still at its old leaf, and running the same
//! `restore-session` again completes the move (a file rollback that already
//! ran is a no-op the second time); with its branch entry only the end record
//! is missing. The next `restore_session` closes every interrupted one with an
//! end record (`failed` + `interrupted: true`, or `succeeded` when its branch
//! was appended) before doing its own work.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use serde_json::{Value, json};

use crate::LedgerRead;
use crate::action::ActionLock;
use crate::claude_transcript;
use crate::config::Config;
use crate::fs_util::FsError;
use crate::ledger::LedgerLock;
use crate::record::{
    ActionRecord, ActionStatus, ActionType, Body, Draft, EntryType, Record, SessionEntry,
};
use crate::rollback::{self, RollbackOptions, RollbackReport, Selector};
use crate::workspace::{Workspace, WorkspaceError};

/// The longest session id accepted, in bytes.
pub const MAX_SESSION_ID: usize = 256;
/// The largest payload accepted, in bytes of compact JSON.
pub const MAX_PAYLOAD: usize = 512 * 1024;

fn invalid(s: impl Into<String>) -> WorkspaceError {
    WorkspaceError::Invalid(s.into())
}

fn not_applicable(s: String) -> WorkspaceError {
    WorkspaceError::NotApplicable(s)
}

/// Checks a session id: 1 to [`MAX_SESSION_ID`] bytes, no control characters.
pub fn validate_session(session: &str) -> Result<(), WorkspaceError> {
    if session.is_empty() {
        return Err(invalid("the session id is empty; pass --session S"));
    }
    if session.len() > MAX_SESSION_ID {
        return Err(invalid(format!(
            "the session id is {} bytes long; at most {MAX_SESSION_ID} are accepted",
            session.len()
        )));
    }
    if session.chars().any(char::is_control) {
        return Err(invalid(
            "the session id contains control characters; use printable text",
        ));
    }
    Ok(())
}

/// The session's entries in ledger order, with their records.
fn entries_of<'r>(records: &'r [Record], session: &str) -> Vec<(&'r Record, &'r SessionEntry)> {
    records
        .iter()
        .filter(|r| r.session.as_deref() == Some(session))
        .filter_map(|r| match &r.body {
            Body::SessionEntry(e) => Some((r, e)),
            _ => None,
        })
        .collect()
}

/// The session's current leaf: the last entry appended in it.
pub fn leaf(records: &[Record], session: &str) -> Option<String> {
    records.iter().rev().find_map(|r| match &r.body {
        Body::SessionEntry(e) if r.session.as_deref() == Some(session) => Some(e.entry.clone()),
        _ => None,
    })
}

/// One branch of a session, folded from its root to its leaf.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionView {
    /// The session.
    pub session: String,
    /// The leaf shown (`None`: the session has no entries).
    pub leaf: Option<String>,
    /// Whether that leaf is the session's current one.
    pub current: bool,
    /// The path from the root to the leaf, root first (branch entries included).
    pub entries: Vec<SessionEntry>,
    /// The payload of the last `app_state` on the path.
    pub app_state: Option<Value>,
    /// The payload of the last `compaction` on the path.
    pub compaction: Option<Value>,
}

/// The path from the root to `from`, root first. Stops at a parent that is
/// not an entry of the session, and at a loop (neither can be appended by
/// ckpt; a hand-made ledger could hold them).
fn path_to<'r>(index: &HashMap<&str, &'r SessionEntry>, from: &str) -> Vec<&'r SessionEntry> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut at = index.get(from).copied();
    while let Some(e) = at {
        if !seen.insert(e.entry.as_str()) {
            break;
        }
        out.push(e);
        at = e.parent.as_deref().and_then(|p| index.get(p).copied());
    }
    out.reverse();
    out
}

fn fold(
    session: &str,
    leaf: Option<String>,
    current: bool,
    path: Vec<&SessionEntry>,
) -> SessionView {
    let last = |t: EntryType| {
        path.iter()
            .rev()
            .find(|e| e.entry_type == t)
            .map(|e| e.payload.clone())
    };
    SessionView {
        session: session.to_string(),
        leaf,
        current,
        app_state: last(EntryType::AppState),
        compaction: last(EntryType::Compaction),
        entries: path.into_iter().cloned().collect(),
    }
}

/// The session's current branch (see the module doc).
pub fn show(records: &[Record], session: &str) -> SessionView {
    let all = entries_of(records, session);
    let index: HashMap<&str, &SessionEntry> =
        all.iter().map(|(_, e)| (e.entry.as_str(), *e)).collect();
    let leaf = all.last().map(|(_, e)| e.entry.clone());
    let path = leaf
        .as_deref()
        .map(|l| path_to(&index, l))
        .unwrap_or_default();
    fold(session, leaf, true, path)
}

/// The branch that ends at `entry` (any entry of the session, e.g. the leaf
/// of an abandoned branch).
pub fn show_from(
    records: &[Record],
    session: &str,
    entry: &str,
) -> Result<SessionView, WorkspaceError> {
    let all = entries_of(records, session);
    let index: HashMap<&str, &SessionEntry> =
        all.iter().map(|(_, e)| (e.entry.as_str(), *e)).collect();
    if !index.contains_key(entry) {
        return Err(not_an_entry(entry, session));
    }
    let current = all.last().map(|(_, e)| e.entry.as_str()) == Some(entry);
    Ok(fold(
        session,
        Some(entry.to_string()),
        current,
        path_to(&index, entry),
    ))
}

fn not_an_entry(entry: &str, session: &str) -> WorkspaceError {
    WorkspaceError::NoMatch(format!(
        "`{entry}` is not an entry of session `{session}`; see `ckpt session branches --session {session}`"
    ))
}

/// A leaf of the session tree: an entry nothing hangs under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Leaf {
    /// The entry.
    pub entry: String,
    /// How many entries lie above it (a root: 0).
    pub depth: usize,
    /// When it was appended.
    pub last_ts: String,
    /// Whether it is the session's current leaf.
    pub current: bool,
}

/// Every leaf of the session, oldest first.
pub fn branches(records: &[Record], session: &str) -> Vec<Leaf> {
    let all = entries_of(records, session);
    let index: HashMap<&str, &SessionEntry> =
        all.iter().map(|(_, e)| (e.entry.as_str(), *e)).collect();
    let parents: HashSet<&str> = all
        .iter()
        .filter_map(|(_, e)| e.parent.as_deref())
        .collect();
    let current = all.last().map(|(_, e)| e.entry.as_str());
    all.iter()
        .filter(|(_, e)| !parents.contains(e.entry.as_str()))
        .map(|(r, e)| Leaf {
            entry: e.entry.clone(),
            depth: path_to(&index, &e.entry).len().saturating_sub(1),
            last_ts: r.ts.clone(),
            current: current == Some(e.entry.as_str()),
        })
        .collect()
}

/// Takes the ledger lock and returns it with a read of the ledger that is
/// current under it (read first without the lock, so writers wait only for a
/// re-read when something was appended in between).
fn read_locked(ws: &Workspace) -> Result<(LedgerLock<'_>, LedgerRead), WorkspaceError> {
    let head = crate::ledger::head_state(std::os::fd::AsFd::as_fd(&**ws.runtime_dir()));
    let read = ws.read_ledger()?;
    let lock = ws.ledger().lock()?;
    let read = if lock.tail().seq == read.tail.seq && lock.tail().hash == read.tail.hash {
        read
    } else {
        ws.read_ledger()?
    };
    ws.refuse_damaged(&read, head, "ckpt will not act", None)?;
    Ok((lock, read))
}

/// Appends an entry of type `entry_type` to `session` and returns its id
/// (`e_…`). Its parent is `parent`, which must be an entry of the session, or
/// else the session's current leaf (`None` for the first entry). `branch`
/// entries are made by [`restore_session`] only.
pub fn append(
    ws: &Workspace,
    session: &str,
    entry_type: EntryType,
    payload: Value,
    parent: Option<String>,
) -> Result<String, WorkspaceError> {
    validate_session(session)?;
    if entry_type == EntryType::Branch {
        return Err(invalid(
            "`branch` entries are made by `ckpt restore-session`, not appended by hand",
        ));
    }
    let size = serde_json::to_vec(&payload)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > MAX_PAYLOAD {
        return Err(invalid(format!(
            "the payload is {size} bytes; at most {MAX_PAYLOAD} are accepted (store large content elsewhere and record a reference)"
        )));
    }
    let id = ws.clock().new_id("e_");
    let (mut lock, read) = read_locked(ws)?;
    let parent = match parent {
        Some(p) => {
            if !entries_of(&read.records, session)
                .iter()
                .any(|(_, e)| e.entry == p)
            {
                return Err(not_an_entry(&p, session));
            }
            Some(p)
        }
        None => leaf(&read.records, session),
    };
    lock.append(&[Draft::in_session(
        Some(session.to_string()),
        Body::SessionEntry(SessionEntry {
            entry: id.clone(),
            parent,
            entry_type,
            payload,
        }),
    )])?;
    Ok(id)
}

// ---------------------------------------------------------------- restore_session

/// What to restore.
#[derive(Debug, Clone, Default)]
pub struct RestoreOptions {
    /// The session.
    pub session: String,
    /// A checkpoint id (`ckpt_…`, made with the session) or an entry id of the session.
    pub to: String,
    /// Also roll the files back to the checkpoint.
    pub with_files: bool,
    /// Also fork the Claude Code transcript the checkpoint recorded.
    pub claude: bool,
}

/// The Claude Code transcript a restore wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaudeFork {
    /// The transcript it was cut from.
    pub source: std::path::PathBuf,
    /// The new transcript.
    pub transcript: std::path::PathBuf,
    /// Its session id.
    pub session_id: String,
    /// How many entries it holds.
    pub entries: usize,
    /// The command that opens it: `claude --resume <id>`.
    pub resume: String,
}

/// What [`restore_session`] did.
#[derive(Debug, Clone)]
pub struct RestoreReport {
    /// The `restore_session` action.
    pub action: String,
    /// The session.
    pub session: String,
    /// The leaf the session left.
    pub from: Option<String>,
    /// The entry the session returned to (`None`: a `--claude` restore of a
    /// checkpoint that recorded no session position).
    pub to: Option<String>,
    /// The checkpoint used (given, or found for an entry with `--with-files`/`--claude`).
    pub checkpoint: Option<String>,
    /// The `branch` entry appended.
    pub branch_entry: Option<String>,
    /// The file rollback, with `--with-files`.
    pub rollback: Option<RollbackReport>,
    /// The transcript fork, with `--claude`.
    pub claude: Option<ClaudeFork>,
    /// With `--claude`, to a checkpoint where the conversation had not
    /// begun (its first prompt): no fork, nothing to resume; a new
    /// `claude` session starts from there.
    pub claude_fresh: bool,
    /// Interrupted restores this run found and closed.
    pub closed_interrupted: Vec<InterruptedRestore>,
}

impl RestoreReport {
    /// Whether the file rollback left files unwritten (the action ended `failed`).
    pub fn incomplete(&self) -> bool {
        self.rollback.as_ref().is_some_and(|r| r.incomplete())
    }

    /// How many conflicts the file rollback raised.
    pub fn conflicts(&self) -> usize {
        self.rollback.as_ref().map_or(0, |r| r.conflicts.len())
    }
}

/// A `restore_session` action that started and never ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InterruptedRestore {
    /// The action.
    pub action: String,
    /// Its session.
    pub session: Option<String>,
    /// The entry it was moving to.
    pub to_entry: Option<String>,
    /// Its branch entry, if it was appended (the session moved).
    pub branch_entry: Option<String>,
}

impl InterruptedRestore {
    /// Where the session is: `"new_branch"` or `"old_leaf"`.
    pub fn session_at(&self) -> &'static str {
        if self.branch_entry.is_some() {
            "new_branch"
        } else {
            "old_leaf"
        }
    }
}

/// Every `restore_session` action that started and never ended, oldest first
/// (read-only; for `ckpt recover` and the next restore).
pub fn interrupted(records: &[Record]) -> Vec<InterruptedRestore> {
    let mut open: Vec<InterruptedRestore> = Vec::new();
    for r in records {
        match &r.body {
            Body::Action(a) if a.action_type == ActionType::RestoreSession => match a.status {
                ActionStatus::Started => open.push(InterruptedRestore {
                    action: a.action.clone(),
                    session: r.session.clone(),
                    to_entry: a
                        .plan
                        .as_ref()
                        .and_then(|p| p.get("to_entry"))
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    branch_entry: None,
                }),
                _ => open.retain(|o| o.action != a.action),
            },
            Body::SessionEntry(e) if e.entry_type == EntryType::Branch => {
                if let Some(act) = e.payload.get("action").and_then(Value::as_str)
                    && let Some(o) = open.iter_mut().find(|o| o.action == act)
                {
                    o.branch_entry = Some(e.entry.clone());
                }
            }
            _ => {}
        }
    }
    open
}

fn end_draft(session: Option<&str>, action: &str, status: ActionStatus, outcome: Value) -> Draft {
    Draft::in_session(
        session.map(str::to_string),
        Body::Action(ActionRecord {
            action: action.to_string(),
            action_type: ActionType::RestoreSession,
            status,
            target: Value::Null,
            plan: None,
            outcome: Some(outcome),
        }),
    )
}

/// Closes interrupted restores with an end record (see the module doc).
fn close_interrupted(
    ws: &Workspace,
    records: &[Record],
) -> Result<Vec<InterruptedRestore>, WorkspaceError> {
    let open = interrupted(records);
    if open.is_empty() {
        return Ok(open);
    }
    let drafts: Vec<Draft> = open
        .iter()
        .map(|o| {
            let (status, outcome) = match &o.branch_entry {
                Some(b) => (
                    ActionStatus::Succeeded,
                    json!({"interrupted": true, "session_at": "new_branch", "branch_entry": b,
                           "note": "the branch was appended before the interruption; only this end record was missing"}),
                ),
                None => (
                    ActionStatus::Failed,
                    json!({"interrupted": true, "session_at": "old_leaf", "branch_entry": null,
                           "note": "interrupted before the branch entry: the session stayed at its old leaf; run the same restore-session again to complete it"}),
                ),
            };
            end_draft(o.session.as_deref(), &o.action, status, outcome)
        })
        .collect();
    ws.ledger().lock()?.append(&drafts)?;
    Ok(open)
}

fn fail_point(name: &str) -> Result<(), WorkspaceError> {
    crate::failpoint::hit(name).map_err(|e| {
        WorkspaceError::Io(FsError::new(
            "restore session",
            ".agent-runtime/ledger.jsonl",
            e,
        ))
    })
}

/// Moves `opts.session` back to a checkpoint or entry (see the module doc).
pub fn restore_session(
    ws: &Workspace,
    cfg: &Config,
    opts: &RestoreOptions,
) -> Result<RestoreReport, WorkspaceError> {
    let session = opts.session.as_str();
    validate_session(session)?;
    let lock = ActionLock::take(ws)?;
    let head = crate::ledger::head_state(std::os::fd::AsFd::as_fd(&**ws.runtime_dir()));
    let read = ws.read_ledger()?;
    let to = (opts.to.starts_with("ckpt_")).then_some(opts.to.as_str());
    ws.refuse_damaged(&read, head, "ckpt will not act", to)?;
    let records = &read.records;
    let entries = entries_of(records, session);
    let is_entry = |id: &str| entries.iter().any(|(_, e)| e.entry == id);

    // Resolve the target: a checkpoint of this session, or one of its entries.
    let (to_entry, checkpoint) = if opts.to.starts_with("ckpt_") {
        let Some((rec, c)) = records.iter().find_map(|r| match &r.body {
            Body::Checkpoint(c) if c.checkpoint == opts.to => Some((r, c)),
            _ => None,
        }) else {
            return Err(WorkspaceError::UnknownId(opts.to.clone()));
        };
        match rec.session.as_deref() {
            Some(s) if s == session => {}
            Some(s) => {
                return Err(not_applicable(format!(
                    "checkpoint {} belongs to session `{s}`, not `{session}`; pass --session {s} or a checkpoint of `{session}`",
                    opts.to
                )));
            }
            None => {
                return Err(not_applicable(format!(
                    "checkpoint {} was made without a session; make checkpoints with `ckpt checkpoint --session {session}` to restore the session to them",
                    opts.to
                )));
            }
        }
        match &c.session_leaf {
            Some(e) if is_entry(e) => (Some(e.clone()), Some(c.checkpoint.clone())),
            Some(e) => {
                return Err(not_applicable(format!(
                    "checkpoint {} names entry `{e}`, which is not in session `{session}`; run `ckpt verify`",
                    opts.to
                )));
            }
            None if opts.claude => (None, Some(c.checkpoint.clone())),
            None => {
                return Err(not_applicable(format!(
                    "checkpoint {} records no position in session `{session}` (the session had no entries then); pick an entry from `ckpt session show --session {session}`",
                    opts.to
                )));
            }
        }
    } else {
        if !is_entry(&opts.to) {
            return Err(not_applicable(format!(
                "`{}` is neither a checkpoint nor an entry of session `{session}`; see `ckpt session show --session {session}` or `ckpt log`",
                opts.to
            )));
        }
        let checkpoint = if opts.with_files || opts.claude {
            let found = records.iter().rev().find_map(|r| match &r.body {
                Body::Checkpoint(c)
                    if r.session.as_deref() == Some(session)
                        && c.session_leaf.as_deref() == Some(opts.to.as_str()) =>
                {
                    Some(c.checkpoint.clone())
                }
                _ => None,
            });
            Some(found.ok_or_else(|| {
                not_applicable(format!(
                    "no checkpoint of session `{session}` records entry `{}`, so there is no file state (or transcript position) to go back to; pass --to CKPT, or drop --with-files/--claude",
                    opts.to
                ))
            })?)
        } else {
            None
        };
        (Some(opts.to.clone()), checkpoint)
    };

    // --claude: read and cut the transcript before anything is recorded, so a
    // format ckpt does not know changes nothing.
    let claude = if opts.claude {
        let ck = checkpoint.as_deref().unwrap_or_default();
        let file = ws.checkpoint_file(ck)?;
        let extra = file.extra.unwrap_or(Value::Null);
        let path = extra.get("transcript_path").and_then(Value::as_str);
        let last = extra.get("transcript_last_uuid").and_then(Value::as_str);
        let empty = extra.get("transcript_empty").and_then(Value::as_bool) == Some(true);
        match (path, last) {
            (Some(path), Some(last)) => Some(claude_transcript::prepare(
                std::path::Path::new(path),
                last,
            )?),
            // The conversation had not begun: nothing to fork, nothing to resume.
            (Some(_), None) if empty => None,
            _ => {
                return Err(not_applicable(format!(
                    "checkpoint {ck} has no Claude Code transcript position (it was not made by a Claude Code prompt or session-start hook, or the transcript was unreadable then); restore without --claude"
                )));
            }
        }
    } else {
        None
    };

    // Only now that the request is valid: end what a crash left open.
    let closed_interrupted = close_interrupted(ws, records)?;
    let from_leaf = leaf(records, session);
    let action = ws.clock().new_id("act_");
    let mut plan = json!({
        "from_leaf": from_leaf,
        "to_entry": to_entry,
        "with_files": opts.with_files,
    });
    if let Some(c) = &checkpoint {
        plan["checkpoint"] = json!(c);
    }
    if let Some(p) = &claude {
        plan["claude_transcript"] = json!(p.source().display().to_string());
    }
    let claude_fresh = opts.claude && claude.is_none();
    if claude_fresh {
        plan["claude_fresh"] = json!(true);
    }
    ws.ledger().lock()?.append(&[Draft::in_session(
        Some(session.to_string()),
        Body::Action(ActionRecord {
            action: action.clone(),
            action_type: ActionType::RestoreSession,
            status: ActionStatus::Started,
            target: json!({"session": session, "to": opts.to}),
            plan: Some(plan),
            outcome: None,
        }),
    )])?;
    fail_point("restore.after_started")?;

    let fail = |why: String| -> Result<(), WorkspaceError> {
        ws.ledger().lock()?.append(&[end_draft(
            Some(session),
            &action,
            ActionStatus::Failed,
            json!({"error": why, "session_at": "old_leaf", "branch_entry": null}),
        )])?;
        Ok(())
    };

    let rollback = if opts.with_files {
        let ck = checkpoint.clone().unwrap_or_default();
        match rollback::rollback_locked(
            ws,
            cfg,
            &RollbackOptions {
                selector: Selector::To(ck),
                paths: Vec::new(),
                dry_run: false,
            },
            &lock,
        ) {
            Ok(r) => Some(r),
            Err(e) => {
                fail(crate::error_line(&e))?;
                return Err(e);
            }
        }
    } else {
        None
    };
    fail_point("restore.after_rollback")?;

    let claude = match claude {
        Some(p) => {
            let id = claude_transcript::new_session_id();
            match p.write(&id, ws.durable()) {
                Ok(path) => Some(ClaudeFork {
                    source: p.source().to_path_buf(),
                    transcript: path,
                    entries: p.len(),
                    resume: format!("claude --resume {id}"),
                    session_id: id,
                }),
                Err(e) => {
                    fail(crate::error_line(&e))?;
                    return Err(e.into());
                }
            }
        }
        None => None,
    };
    fail_point("restore.before_branch")?;

    // The move itself: the branch entry and the action's end, in one append.
    let (mut ledger, read) = read_locked(ws)?;
    let from = leaf(&read.records, session);
    let mut drafts = Vec::new();
    let branch_entry = match &to_entry {
        Some(t) => {
            let id = ws.clock().new_id("e_");
            let mut payload = json!({"from": from, "to": t, "action": action});
            if let Some(c) = &checkpoint {
                payload["checkpoint"] = json!(c);
            }
            if let Some(r) = &rollback {
                payload["rollback_action"] = json!(r.action);
            }
            drafts.push(Draft::in_session(
                Some(session.to_string()),
                Body::SessionEntry(SessionEntry {
                    entry: id.clone(),
                    parent: Some(t.clone()),
                    entry_type: EntryType::Branch,
                    payload,
                }),
            ));
            Some(id)
        }
        None => None,
    };
    let incomplete = rollback.as_ref().is_some_and(|r| r.incomplete());
    let mut outcome = json!({
        "from": from,
        "to": to_entry,
        "branch_entry": branch_entry,
        "session_at": if branch_entry.is_some() { "new_branch" } else { "old_leaf" },
    });
    if let Some(r) = &rollback {
        outcome["rollback_action"] = json!(r.action);
        outcome["conflicts"] = json!(r.conflicts.len());
        if incomplete {
            outcome["error"] =
                json!("some files were not rolled back (raced or failed); see the rollback action");
        }
    }
    if let Some(c) = &claude {
        outcome["claude_transcript"] = json!(c.transcript.display().to_string());
        outcome["claude_session"] = json!(c.session_id);
    }
    if claude_fresh {
        outcome["claude_fresh"] = json!(true);
    }
    drafts.push(end_draft(
        Some(session),
        &action,
        if incomplete {
            ActionStatus::Failed
        } else {
            ActionStatus::Succeeded
        },
        outcome,
    ));
    ledger.append(&drafts)?;
    drop(ledger);
    drop(lock);
    Ok(RestoreReport {
        action,
        session: session.to_string(),
        from,
        to: to_entry,
        checkpoint,
        branch_entry,
        rollback,
        claude,
        claude_fresh,
        closed_interrupted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, session: &str, body: Body) -> Record {
        Record {
            seq,
            ts: format!("2026-01-01T00:00:0{seq}.000Z"),
            session: Some(session.into()),
            prev: None,
            hash: String::new(),
            body,
        }
    }

    fn entry(id: &str, parent: Option<&str>, t: EntryType, payload: Value) -> Body {
        Body::SessionEntry(SessionEntry {
            entry: id.into(),
            parent: parent.map(str::to_string),
            entry_type: t,
            payload,
        })
    }

    fn started(id: &str) -> Body {
        Body::Action(ActionRecord {
            action: id.into(),
            action_type: ActionType::RestoreSession,
            status: ActionStatus::Started,
            target: json!({"session": "s", "to": "e_1"}),
            plan: Some(json!({"to_entry": "e_1"})),
            outcome: None,
        })
    }

    #[test]
    fn a_bad_session_id_is_an_invalid_argument() {
        for bad in ["", "a\u{7}b", &"x".repeat(MAX_SESSION_ID + 1)] {
            assert!(
                matches!(validate_session(bad), Err(WorkspaceError::Invalid(_))),
                "{bad:?}"
            );
        }
        assert!(validate_session("sess-1").is_ok());
    }

    #[test]
    fn interrupted_tells_old_leaf_from_new_branch() {
        let m = EntryType::Message;
        let mut records = vec![
            rec(1, "s", entry("e_1", None, m, json!("a"))),
            rec(2, "s", entry("e_2", Some("e_1"), m, json!("b"))),
            rec(3, "s", started("act_1")),
        ];
        let i = interrupted(&records);
        assert_eq!(i.len(), 1);
        assert_eq!(i[0].session_at(), "old_leaf");
        assert_eq!(leaf(&records, "s").as_deref(), Some("e_2"));
        // The branch made it to the ledger, the end did not.
        records.push(rec(
            4,
            "s",
            entry(
                "e_3",
                Some("e_1"),
                EntryType::Branch,
                json!({"action": "act_1"}),
            ),
        ));
        let i = interrupted(&records);
        assert_eq!(i[0].session_at(), "new_branch");
        assert_eq!(i[0].branch_entry.as_deref(), Some("e_3"));
        assert_eq!(show(&records, "s").entries.len(), 2);
        assert_eq!(branches(&records, "s").len(), 2);
        records.push(rec(
            5,
            "s",
            end_draft(Some("s"), "act_1", ActionStatus::Succeeded, json!({})).body,
        ));
        assert!(interrupted(&records).is_empty());
    }

    #[test]
    fn a_parent_loop_in_a_hand_made_ledger_does_not_hang() {
        let m = EntryType::Message;
        let records = vec![
            rec(1, "s", entry("e_1", Some("e_2"), m, json!("a"))),
            rec(2, "s", entry("e_2", Some("e_1"), m, json!("b"))),
        ];
        assert_eq!(show(&records, "s").entries.len(), 2);
        assert!(branches(&records, "s").is_empty());
    }

    #[test]
    fn session_ids_are_checked() {
        assert!(validate_session("abc-123 ✓").is_ok());
        assert!(validate_session("").is_err());
        assert!(validate_session("a\nb").is_err());
        assert!(validate_session(&"x".repeat(MAX_SESSION_ID + 1)).is_err());
    }
}
