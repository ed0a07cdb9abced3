//! `rollback_files` (DESIGN §6): undo the agent's patches, and only those.
//!
//! **Selection.** A selector picks agent patches (`source` other than
//! `rollback` and `watch`): every one after a checkpoint, one call's, one
//! session's, the last N calls that changed files; or, with `--action`, the
//! patches an earlier rollback or resolve wrote (undoing them is a redo).
//! `--path` narrows to matching paths.
//!
//! **Planning** (read-only). Patches are undone newest first on a virtual copy
//! of the affected paths, each as a three-way merge: ancestor = the patch's
//! after, ours = the path now, theirs = the patch's before
//! ([`crate::merge::undo_patch`]). A path still holding what the agent left
//! gets the before state back exactly (mode included); a path already holding
//! the before state is left alone (so rolling back twice is a no-op); anything
//! else is merged when it is text, or becomes a conflict: overlapping edits, a
//! binary or oversized file changed since, a created file edited since, a
//! deleted path re-created, a file deleted or replaced by a symlink, a patch
//! that could belong to a call outside the selection. A path with a conflict is
//! left exactly as it is, and older patches of that path wait with it.
//! Each step is first rebased past the agent changes it was made on that are
//! out of effect now ([`Planner::rebase`]), and checked against the agent's
//! later changes that stay ([`Planner::built_on`], every selector).
//!
//! **Doing.** Before the first write: every content the plan overwrites or
//! writes is in the blob store (synced), the `action` `started` record holds
//! the plan, conflicts are recorded, and `state/pending_action` names the
//! action. Each file is then written back by [`crate::writeback::prepare`]
//! and [`crate::writeback::commit`] (temp file synced, compare, rename). At the end one append records a `file_patch`
//! (`source: "rollback"`, `call` = the action) per file written and the
//! action's end. A crash in between is finished by [`finish_interrupted`],
//! which every later command runs: each planned file is compared with its
//! planned before and after state, so finishing twice changes nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::call::{self, FileState};
use crate::config::Config;
use crate::durable::Keep;
use crate::effect::{self, Effects};
use crate::fs_util::{self, FsError};
use crate::hash::ContentHash;
use crate::merge::{self, MergeOutcome};
use crate::paths::RelPath;
use crate::record::{
    ActionRecord, ActionStatus, ActionType, Body, ConflictRecord, Draft, FilePatch, PatchOp,
    PatchSource, Record, Resolution, SYMLINK_MODE, file_mode_string,
};
use crate::workspace::{Workspace, WorkspaceError};
use crate::writeback::{self, Observed, PathState, Written};

/// Which patches a rollback undoes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// Every agent patch after this checkpoint.
    To(String),
    /// One call's patches.
    Call(String),
    /// One session's patches.
    Session(String),
    /// The patches of one subagent's calls (Claude Code's `agent_id`).
    Subagent(String),
    /// The last N calls that changed files.
    Last(usize),
    /// The patches an earlier action wrote (undoing a rollback or resolve).
    Action(String),
    /// `ckpt undo`: every change in effect made after the newest checkpoint
    /// that has changes in effect after it.
    Undo,
    /// `ckpt redo`: undo the newest `ckpt undo` still in effect.
    Redo,
    /// Every agent change in effect (what `status` and `diff` describe).
    Everything,
}

impl Selector {
    /// The checkpoint a `--to` names.
    fn checkpoint(&self) -> Option<&str> {
        match self {
            Selector::To(c) => Some(c),
            _ => None,
        }
    }

    fn target(&self, r: &RollbackReport) -> Value {
        match self {
            Selector::To(c) => json!({"to": c}),
            Selector::Call(c) => json!({"call": c}),
            Selector::Session(s) => json!({"session": s}),
            Selector::Subagent(a) => json!({"subagent": a}),
            Selector::Last(n) => json!({"last": n}),
            Selector::Action(a) => json!({"action": a}),
            Selector::Undo => json!({"undo": r.undo_to.clone().flatten()}),
            Selector::Redo => json!({"redo": r.redo_of}),
            Selector::Everything => json!({"everything": true}),
        }
    }
}

/// What to roll back, and how.
#[derive(Debug, Clone)]
pub struct RollbackOptions {
    /// The selector.
    pub selector: Selector,
    /// Only paths matching one of these globs (or under one of these
    /// directories); empty: every path.
    pub paths: Vec<String>,
    /// Plan only: write nothing at all.
    pub dry_run: bool,
}

/// What became of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileResult {
    /// The before state is back, byte for byte.
    Restored,
    /// The agent's change was taken out; later edits were kept.
    Merged,
    /// The file the agent created is gone.
    Deleted,
    /// The file the agent deleted is back.
    Recreated,
    /// Nothing to do: the path already holds the before state.
    Unchanged,
    /// Left as it is; a conflict record was raised.
    Conflict,
    /// Someone changed the file while the rollback ran: not written.
    Raced,
    /// Could not be written (the reason is in `note`); left as it was.
    Failed,
}

impl FileResult {
    /// Whether the plan writes the file.
    pub fn writes(self) -> bool {
        matches!(
            self,
            FileResult::Restored | FileResult::Merged | FileResult::Deleted | FileResult::Recreated
        )
    }

    /// The word the JSON output and the table use.
    pub fn as_str(self) -> &'static str {
        match self {
            FileResult::Restored => "restored",
            FileResult::Merged => "merged",
            FileResult::Deleted => "deleted",
            FileResult::Recreated => "recreated",
            FileResult::Unchanged => "unchanged",
            FileResult::Conflict => "conflict",
            FileResult::Raced => "raced",
            FileResult::Failed => "failed",
        }
    }
}

/// One file of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedFile {
    /// The path.
    pub path: RelPath,
    /// What the plan does (and, after the run, what happened).
    pub result: FileResult,
    /// The state the plan was computed on.
    pub from: PathState,
    /// The state the plan leaves.
    pub to: PathState,
    /// The patches undone (or held back by a conflict), newest first.
    pub patches: Vec<String>,
    /// The agent patches put back in (a `--to` that takes back a later
    /// rollback), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redone: Vec<String>,
    /// For the path a renamed file is at now: the path an undone rename
    /// moves it back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renamed_to: Option<RelPath>,
    /// For a file the agent created (or renamed here): when its call
    /// started. Directories on its way born since then are removed with it
    /// once empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dirs_since: Option<String>,
    /// The directories removed with the file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dirs_removed: Vec<RelPath>,
    /// The conflict raised for this file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<String>,
    /// A short explanation (`kept your edits`, why it conflicts, an error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The result of a rollback (or of its dry run).
#[derive(Debug, Clone)]
pub struct RollbackReport {
    /// The action id (made up, not recorded, on a dry run).
    pub action: String,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// Every file the selected patches touched, by path.
    pub files: Vec<PlannedFile>,
    /// The conflicts raised.
    pub conflicts: Vec<ConflictRecord>,
    /// How many patches were selected.
    pub patches: usize,
    /// Changes the selected calls made that ckpt could not record (too
    /// large, unreadable), with their call: left as they are.
    pub unrecorded: Vec<(String, crate::record::Unrecorded)>,
    /// For `ckpt undo`: the checkpoint stepped back to (`Some(None)`: the
    /// start of the history).
    pub undo_to: Option<Option<String>>,
    /// For `ckpt redo`: the undo it takes back (`None`: nothing to redo).
    pub redo_of: Option<String>,
    /// How many patches the selector names, in effect or not (more than
    /// `patches` when some were taken out already).
    pub named: usize,
    /// What moved in git that the rollback did not put back (ckpt never
    /// writes `.git/`): the checkpoint compared with, and what moved.
    pub git: Option<(String, crate::git::Moved)>,
    /// Calls whose agent process is gone, closed before planning (what a
    /// shell call changed became its patches, so the rollback covers it);
    /// on a dry run, those a real run would close (`how`: `pending`).
    pub closed: Vec<crate::hook::ClosedCall>,
    /// Seqs whose records were lost to damage (`ckpt repair` stood records
    /// in for them): changes they recorded cannot be taken back.
    pub lost: Vec<u64>,
    /// Contents the plan computed (merges), by path.
    pub(crate) merged: HashMap<RelPath, Rc<Vec<u8>>>,
}

impl RollbackReport {
    /// The bytes the plan leaves at `f.path` (`None`: absent, or not
    /// readable now), for `ckpt diff`.
    pub fn planned_bytes(&self, ws: &Workspace, f: &PlannedFile) -> Option<Vec<u8>> {
        let h = f.to.hash?;
        if let Some(b) = self.merged.get(&f.path)
            && ContentHash::of(b) == h
        {
            return Some(b.to_vec());
        }
        ws.blobs().get(&h).ok()
    }

    /// Whether a file failed or raced (the action ended `failed`).
    pub fn incomplete(&self) -> bool {
        self.files
            .iter()
            .any(|f| matches!(f.result, FileResult::Raced | FileResult::Failed))
    }
}

/// The plan of what `opts` selects over `records`, written nowhere: what
/// `status` and `diff` describe (the caller checked the ledger).
pub fn dry_plan(
    ws: &Workspace,
    cfg: &Config,
    records: &[Record],
    selector: Selector,
) -> Result<RollbackReport, WorkspaceError> {
    let opts = RollbackOptions {
        selector,
        paths: Vec::new(),
        dry_run: true,
    };
    plan(ws, cfg, records, &opts, String::new())
}

/// The calls a real run would close first (their agent is gone): a dry run
/// writes nothing, so it only names them.
pub fn pending_closes(ws: &Workspace) -> Vec<crate::hook::ClosedCall> {
    crate::hook::closable_calls(ws, crate::hook::Close::AgentGone)
        .into_iter()
        .map(|(call, tool)| crate::hook::ClosedCall {
            call,
            tool,
            how: "pending",
            patches: 0,
        })
        .collect()
}

/// Rolls back what `opts` selects (see the module doc).
pub fn rollback(
    ws: &Workspace,
    cfg: &Config,
    opts: &RollbackOptions,
) -> Result<RollbackReport, WorkspaceError> {
    if opts.dry_run {
        let records = plan_records(ws, &opts.selector)?;
        let id = ws.clock().new_id("act_");
        let mut report = plan(ws, cfg, &records, opts, id)?;
        report.closed = pending_closes(ws);
        return Ok(report);
    }
    let lock = crate::action::ActionLock::take(ws)?;
    rollback_locked(ws, cfg, opts, &lock)
}

/// [`rollback`] for a caller that already holds the [`ActionLock`](crate::action::ActionLock) (e.g.
/// `restore_session --with-files`, which runs the rollback inside its own
/// action). Never a dry run.
pub(crate) fn rollback_locked(
    ws: &Workspace,
    cfg: &Config,
    opts: &RollbackOptions,
    _lock: &crate::action::ActionLock,
) -> Result<RollbackReport, WorkspaceError> {
    finish_interrupted_locked(ws)?;
    let gone = crate::hook::Close::AgentGone;
    let closed = if crate::hook::closable_calls(ws, gone).is_empty() {
        Vec::new()
    } else {
        // Closing appends records: never to a history that cannot be read
        // whole.
        read_whole(ws, None)?;
        crate::hook::close_open_calls(ws, cfg, gone).map_err(|e| match e {
            crate::hook::HookError::Record(e) => e,
            crate::hook::HookError::Path { source, .. } => WorkspaceError::Path(source),
        })?
    };
    crate::hook::flush_user_edits(ws, None)?;
    let records = plan_records(ws, &opts.selector)?;
    let id = ws.clock().new_id("act_");
    let mut report = plan(ws, cfg, &records, opts, id)?;
    crate::timing("rollback: planned");
    report.closed = closed;
    if report.files.is_empty() && matches!(opts.selector, Selector::Undo | Selector::Redo) {
        // Nothing to undo or redo: nothing recorded.
        return Ok(report);
    }
    let target = opts.selector.target(&report);
    run_plan(ws, &mut report, target)?;
    report.git = git_moved(ws, &records, &opts.selector, &report);
    Ok(report)
}

/// git's HEAD and index compared with the checkpoint the rollback went back
/// to (`--to`, `undo`), or the newest one before the first change it undid,
/// for the files it wrote. `None` when nothing moved, nothing was written,
/// or there is no git state to compare with.
fn git_moved(
    ws: &Workspace,
    records: &[Record],
    sel: &Selector,
    report: &RollbackReport,
) -> Option<(String, crate::git::Moved)> {
    let written: Vec<RelPath> = report
        .files
        .iter()
        .filter(|f| f.result.writes())
        .map(|f| f.path.clone())
        .collect();
    if written.is_empty() {
        return None;
    }
    let ids = patch_seqs(records);
    let first = report
        .files
        .iter()
        .flat_map(|f| f.patches.iter().chain(&f.redone))
        .filter_map(|id| ids.get(id.as_str()).copied())
        .min()?;
    let wanted = match (sel, &report.undo_to) {
        (Selector::To(c), _) | (_, Some(Some(c))) => Some(c.as_str()),
        _ => None,
    };
    let (id, state) = records.iter().rev().find_map(|r| match &r.body {
        Body::Checkpoint(c) if wanted.map_or(c.upto_seq < first, |w| w == c.checkpoint) => {
            Some((c.checkpoint.clone(), c.git.clone()?))
        }
        _ => None,
    })?;
    let file_id = |rel: &RelPath| {
        let f = report.files.iter().find(|f| f.path == *rel)?;
        report.planned_bytes(ws, f).map(|b| crate::git::blob_id(&b))
    };
    let moved = crate::git::moved_since(ws.root(), &state, &written, &file_id)?;
    (moved.head.is_some() || !moved.staged.is_empty()).then_some((id, moved))
}

/// The records a plan of `sel` reads, refused if damaged: for `--last`
/// and `--call`, the reduced view with those calls' paths read back
/// ([`crate::ledger_view::for_rollback`]: damage is looked for from the
/// view's anchor on, as `recover` looks from its cut); else, or when the
/// view cannot answer, the whole ledger ([`read_whole`]).
fn plan_records(ws: &Workspace, sel: &Selector) -> Result<Vec<Record>, WorkspaceError> {
    use crate::ledger_view::Pick;
    let pick = match sel {
        Selector::Last(n) => Some(Pick::Last(*n)),
        Selector::Call(c) => Some(Pick::Call(c)),
        _ => None,
    };
    if let Some(pick) = pick.filter(|_| !ws.whole_reads()) {
        // The head anchor is written after each append: read it first.
        let head = crate::ledger::head_state(ws.runtime_dir().as_fd());
        if let Some((records, read)) = crate::ledger_view::for_rollback(ws, pick)? {
            ws.refuse_damaged(&read, head, "ckpt will not act", None)?;
            return Ok(records);
        }
    }
    Ok(read_whole(ws, sel.checkpoint())?.records)
}

/// The whole ledger, refused if damaged at any anchor `verify` checks
/// (and at checkpoint `also`'s).
fn read_whole(ws: &Workspace, also: Option<&str>) -> Result<crate::LedgerRead, WorkspaceError> {
    // The head anchor is written after each append: read it first.
    let head = crate::ledger::head_state(ws.runtime_dir().as_fd());
    let read = ws.read_ledger()?;
    ws.refuse_damaged(&read, head, "ckpt will not act", also)?;
    Ok(read)
}

// ---------------------------------------------------------------- selection

/// What a selector picks: patches to take out and patches to put back in,
/// each oldest first.
struct Selection<'r> {
    /// In-effect patches to take out (agent patches; ckpt patches for
    /// `--action` and `redo`).
    undo: Vec<&'r FilePatch>,
    /// Agent patches to put back in (`--to` a checkpoint before a rollback).
    redo: Vec<&'r FilePatch>,
    /// The calls (or action) selected: a patch whose candidate calls reach
    /// outside them cannot be undone without guessing.
    calls: BTreeSet<String>,
    /// Whether every patch of the range is selected whatever its call
    /// (`--to`, `undo`): no ambiguity between calls is possible.
    all_selected: bool,
    /// Every path the selector names, in effect or not (for `--path`).
    touched: Vec<&'r FilePatch>,
    /// For `undo`: the checkpoint stepped back to (`None`: the start).
    undo_to: Option<Option<String>>,
    /// For `redo`: the undo taken back.
    redo_of: Option<String>,
    /// Every agent patch in effect, oldest first.
    live: Vec<&'r FilePatch>,
    /// Flags-only entries the action being undone left (`--action`, `redo`).
    pseudo: Vec<(RelPath, String, Option<String>)>,
    /// `--to`: paths where ckpt's own later changes are taken back even if
    /// no agent change moves.
    reset_paths: BTreeSet<RelPath>,
    /// Every id in effect now (the agent's, ckpt's, flags-only entries).
    live_ids: HashSet<String>,
    /// For each ckpt patch: the ids it flipped (taking it out flips them
    /// back, so they are its own doing, not changes gone from under it).
    flipped: HashMap<String, HashSet<String>>,
}

/// Each file patch's ledger position, by id.
fn patch_seqs(records: &[Record]) -> HashMap<&str, u64> {
    records
        .iter()
        .filter_map(|r| match &r.body {
            Body::FilePatch(p) => Some((p.patch.as_str(), r.seq)),
            _ => None,
        })
        .collect()
}

fn checkpoint_seq(records: &[Record], ck: &str) -> Option<u64> {
    records.iter().find_map(|r| match &r.body {
        Body::Checkpoint(c) if c.checkpoint == *ck => Some(c.upto_seq),
        _ => None,
    })
}

/// The patches `sel` picks (see [`Selection`]).
fn select<'r>(records: &'r [Record], sel: &Selector) -> Result<Selection<'r>, WorkspaceError> {
    let now = Effects::replay(records, None);
    let live = now.live_agent();
    let first = records.first().map_or(0, |r| r.seq);
    let unknown = |id: &str| crate::retention::unknown_id(first, id);
    let mut out = Selection {
        undo: Vec::new(),
        redo: Vec::new(),
        calls: BTreeSet::new(),
        all_selected: false,
        touched: Vec::new(),
        undo_to: None,
        redo_of: None,
        live: live.iter().map(|(_, p)| *p).collect(),
        pseudo: Vec::new(),
        reset_paths: BTreeSet::new(),
        live_ids: now.live_ids(),
        flipped: HashMap::new(),
    };
    let agent_patches = || {
        records.iter().filter_map(|r| match &r.body {
            Body::FilePatch(p) if effect::is_agent(p) => Some((r, p)),
            _ => None,
        })
    };
    // A patch belongs to the selected calls when its call, or one of the
    // calls that could have made it, is selected.
    let of_calls = |p: &FilePatch, calls: &BTreeSet<String>| {
        calls.contains(&p.call) || p.candidates.iter().any(|c| calls.contains(c))
    };
    match sel {
        Selector::To(ck) => {
            let upto = checkpoint_seq(records, ck).ok_or_else(|| unknown(ck))?;
            let then = Effects::replay(records, Some(upto));
            out.all_selected = true;
            out.undo = live
                .iter()
                .filter(|(_, p)| !then.live(&p.patch))
                .map(|(_, p)| *p)
                .collect();
            out.redo = then
                .live_agent()
                .into_iter()
                .filter(|(_, p)| !now.live(&p.patch))
                .map(|(_, p)| p)
                .collect();
            out.touched = agent_patches()
                .filter(|(r, _)| r.seq > upto)
                .map(|(_, p)| p)
                .chain(out.redo.iter().copied())
                .collect();
            out.reset_paths = now.ckpt_paths_after(upto);
            for r in records.iter().filter(|r| r.seq > upto) {
                if let Body::ToolCall(c) = &r.body {
                    out.calls.insert(c.call.clone());
                }
            }
        }
        Selector::Undo | Selector::Everything => {
            let from = if *sel == Selector::Everything {
                None
            } else {
                // The newest checkpoint before the newest change in effect.
                // Turns are told by when the agent made the changes.
                let newest = live.iter().map(|(r, _)| r.seq).max();
                newest.and_then(|n| {
                    records.iter().rev().find_map(|r| match &r.body {
                        Body::Checkpoint(c) if c.upto_seq < n => {
                            Some((c.upto_seq, c.checkpoint.clone()))
                        }
                        _ => None,
                    })
                })
            };
            out.all_selected = true;
            if *sel == Selector::Undo {
                out.undo_to = Some(from.as_ref().map(|(_, c)| c.clone()));
            }
            // Everything the kept history holds: changes at or before a
            // `ckpt gc` horizon have lost their contents.
            let upto = from
                .map(|(s, _)| s)
                .unwrap_or_else(|| crate::retention::horizon(records));
            out.undo = live
                .iter()
                .filter(|(r, _)| r.seq > upto)
                .map(|(_, p)| *p)
                .collect();
            out.touched = out.undo.clone();
        }
        Selector::Call(c) => {
            let known = records.iter().any(|r| match &r.body {
                Body::ToolCall(t) => t.call == *c,
                Body::FilePatch(p) => p.call == *c,
                _ => false,
            });
            if !known {
                return Err(unknown(c));
            }
            out.calls.insert(c.clone());
        }
        Selector::Session(s) => {
            if !records.iter().any(|r| r.session.as_deref() == Some(s)) {
                return Err(WorkspaceError::NoMatch(format!(
                    "no records of session `{s}` in this workspace; run `ckpt log` to see the sessions"
                )));
            }
            for r in records.iter().filter(|r| r.session.as_deref() == Some(s)) {
                match &r.body {
                    Body::ToolCall(c) => {
                        out.calls.insert(c.call.clone());
                    }
                    Body::FilePatch(p) if effect::is_agent(p) => {
                        out.calls.insert(p.call.clone());
                    }
                    _ => {}
                }
            }
        }
        Selector::Subagent(a) => {
            for r in records {
                if let Body::ToolCall(c) = &r.body
                    && c.subagent.as_ref().is_some_and(|s| s.id == *a)
                {
                    out.calls.insert(c.call.clone());
                }
            }
            if out.calls.is_empty() {
                return Err(WorkspaceError::NoMatch(format!(
                    "no calls of subagent `{a}` in this workspace; `ckpt log` names the subagents"
                )));
            }
        }
        Selector::Last(n) => {
            // The newest N calls with a change still in effect.
            // By when the calls made them.
            let mut by_record = live.clone();
            by_record.sort_by_key(|(r, _)| r.seq);
            let mut order: Vec<&str> = Vec::new();
            for (_, p) in by_record.iter().rev() {
                if !order.contains(&p.call.as_str()) {
                    if order.len() == *n {
                        break;
                    }
                    order.push(&p.call);
                }
            }
            out.calls.extend(order.iter().map(|s| s.to_string()));
        }
        Selector::Redo => {
            if let Some(a) = redo_target(records) {
                out.calls.insert(a.clone());
                out.undo = records
                    .iter()
                    .filter_map(|r| match &r.body {
                        Body::FilePatch(p)
                            if p.call == a
                                && p.source == PatchSource::Rollback
                                && now.live(&p.patch) =>
                        {
                            Some(p)
                        }
                        _ => None,
                    })
                    .collect();
                out.touched = out.undo.clone();
                out.pseudo = now.live_pseudo_of(&a);
                out.redo_of = Some(a);
            }
        }
        Selector::Action(a) => {
            let known = records
                .iter()
                .any(|r| matches!(&r.body, Body::Action(x) if x.action == *a));
            if !known {
                return Err(unknown(a));
            }
            out.calls.insert(a.clone());
            let mine = records.iter().filter_map(|r| match &r.body {
                Body::FilePatch(p) if p.call == *a && p.source == PatchSource::Rollback => Some(p),
                _ => None,
            });
            out.touched = mine.clone().collect();
            out.undo = mine.filter(|p| now.live(&p.patch)).collect();
            out.pseudo = now.live_pseudo_of(a);
        }
    }
    if matches!(
        sel,
        Selector::Call(_) | Selector::Session(_) | Selector::Subagent(_) | Selector::Last(_)
    ) {
        out.touched = agent_patches()
            .filter(|(_, p)| of_calls(p, &out.calls))
            .map(|(_, p)| p)
            .collect();
        out.undo = live
            .iter()
            .filter(|(_, p)| of_calls(p, &out.calls))
            .map(|(_, p)| *p)
            .collect();
    }
    for p in out.undo.iter().chain(&out.redo) {
        if p.source == PatchSource::Rollback {
            out.flipped.insert(
                p.patch.clone(),
                now.flipped_by(&p.patch).map(str::to_string).collect(),
            );
        }
    }
    Ok(out)
}

/// The newest `ckpt undo` whose changes are still in effect: what `ckpt
/// redo` takes back.
fn redo_target(records: &[Record]) -> Option<String> {
    let now = Effects::replay(records, None);
    let undos: BTreeSet<&str> = records
        .iter()
        .filter_map(|r| match &r.body {
            Body::Action(a)
                if a.action_type == ActionType::RollbackFiles
                    && a.status == ActionStatus::Started
                    && a.target.get("undo").is_some() =>
            {
                Some(a.action.as_str())
            }
            _ => None,
        })
        .collect();
    // Newest first: the undo's start record orders them.
    records.iter().rev().find_map(|r| match &r.body {
        Body::Action(a)
            if a.status == ActionStatus::Started
                && undos.contains(a.action.as_str())
                && (!now.live_pseudo_of(&a.action).is_empty()
                    || records.iter().any(|x| {
                        matches!(&x.body, Body::FilePatch(p)
                            if p.call == a.action
                                && p.source == PatchSource::Rollback
                                && now.live(&p.patch))
                    })) =>
        {
            Some(a.action.clone())
        }
        _ => None,
    })
}

/// Compiled `--path` filters: a glob, or a path and everything under it.
struct PathFilter(Vec<(globset::GlobMatcher, String)>);

impl PathFilter {
    fn new(pats: &[String]) -> Result<PathFilter, WorkspaceError> {
        let mut v = Vec::new();
        for p in pats {
            let g = globset::Glob::new(p).map_err(|e| {
                WorkspaceError::Invalid(format!("`--path {p}` is not a valid glob: {e}"))
            })?;
            v.push((g.compile_matcher(), p.trim_end_matches('/').to_string()));
        }
        Ok(PathFilter(v))
    }

    fn matches(&self, rel: &RelPath) -> bool {
        self.0.is_empty() || self.0.iter().any(|pat| Self::one(pat, rel))
    }

    fn one((g, prefix): &(globset::GlobMatcher, String), rel: &RelPath) -> bool {
        let s = rel.display();
        g.is_match(s.as_ref())
            || (s.len() > prefix.len()
                && s.starts_with(prefix.as_str())
                && s.as_bytes()[prefix.len()] == b'/')
    }

    /// The first pattern that matches none of the patches' paths (as git
    /// says "pathspec did not match").
    fn unmatched(&self, patches: &[&FilePatch]) -> Option<&str> {
        self.0.iter().find_map(|pat| {
            let hit = patches.iter().any(|p| {
                Self::one(pat, &p.path) || p.from_path.as_ref().is_some_and(|f| Self::one(pat, f))
            });
            (!hit).then_some(pat.0.glob().glob())
        })
    }
}

// ---------------------------------------------------------------- planning

#[derive(Clone)]
enum Bytes {
    Loaded(Rc<Vec<u8>>),
    InStore,
    TooLarge,
}

#[derive(Clone)]
struct Virtual {
    state: PathState,
    bytes: Bytes,
}

#[derive(Default)]
struct PathInfo {
    patches: Vec<String>,
    /// Agent patches put back in (`--to` a checkpoint before a rollback).
    redone: Vec<String>,
    merged: bool,
    conflict: Option<(&'static str, FilePatch)>,
    failed: Option<String>,
    note: Option<&'static str>,
    /// For the two paths of an undone rename: the other one, and whether this
    /// is the path the file moves back to.
    renamed: Option<(RelPath, bool)>,
}

enum Decision {
    Set(Virtual, bool, Option<&'static str>),
    Keep,
    Conflict(&'static str),
    Failed(String),
}

struct Planner<'w> {
    ws: &'w Workspace,
    merge_max: u64,
    disk: HashMap<RelPath, Observed>,
    cur: HashMap<RelPath, Virtual>,
    info: BTreeMap<RelPath, PathInfo>,
    /// Contents made while planning that the store does not hold (a
    /// change rebased past changes taken out since, see [`Planner::rebase`]).
    extra: HashMap<ContentHash, Rc<Vec<u8>>>,
}

fn side(hash: Option<ContentHash>, mode: &Option<String>, perm: Option<u32>) -> PathState {
    PathState {
        hash,
        mode: hash.and(mode.clone()),
        perm: hash.and(perm),
    }
}

/// The permission bits to give back with `before`: exactly the recorded
/// ones when the file is absent or still has the bits the agent left;
/// otherwise the file's own bits with only the exec bit following `before`
/// (older records carry no exact bits).
fn perm_back(before: &PathState, after: &PathState, cur: &PathState) -> Option<u32> {
    match before.perm {
        Some(bp) if cur.hash.is_none() || (after.perm.is_some() && cur.perm == after.perm) => {
            Some(bp)
        }
        _ => cur.perm,
    }
}

#[derive(PartialEq, Eq)]
enum Kind {
    Absent,
    File,
    Symlink,
    Other,
}

fn kind(s: &PathState) -> Kind {
    match (&s.hash, s.mode.as_deref()) {
        (None, None) => Kind::Absent,
        (None, Some(_)) => Kind::Other,
        (Some(_), Some(SYMLINK_MODE)) => Kind::Symlink,
        (Some(_), _) => Kind::File,
    }
}

/// Same content and kind (the exec bit aside).
fn same_content(a: &PathState, b: &PathState) -> bool {
    a.hash == b.hash && kind(a) == kind(b)
}

pub(crate) fn file_state(
    hash: Option<ContentHash>,
    mode: Option<&str>,
    perm: Option<u32>,
) -> PathState {
    match (hash, mode) {
        (None, _) => PathState::absent(),
        (Some(h), Some(SYMLINK_MODE)) => PathState {
            hash: Some(h),
            mode: Some(SYMLINK_MODE.to_string()),
            perm: None,
        },
        (Some(h), m) => {
            let p = crate::record::perm_of_mode(m, perm);
            PathState {
                hash: Some(h),
                mode: Some(file_mode_string(p)),
                perm: Some(p),
            }
        }
    }
}

impl<'w> Planner<'w> {
    fn load(&mut self, rel: &RelPath) -> Result<(), WorkspaceError> {
        if self.disk.contains_key(rel) {
            return Ok(());
        }
        let obs = match writeback::observe(self.ws, rel, self.merge_max) {
            Ok(o) => o,
            Err(e) => {
                // An unsafe or unreadable path: never written, reported.
                self.info.entry(rel.clone()).or_default().failed = Some(crate::error_line(&e));
                Observed::other_kind()
            }
        };
        let bytes = match &obs.bytes {
            Some(b) => Bytes::Loaded(Rc::new(b.clone())),
            None if obs.state.hash.is_some() => Bytes::TooLarge,
            None => Bytes::InStore,
        };
        self.cur.insert(
            rel.clone(),
            Virtual {
                state: obs.state.clone(),
                bytes,
            },
        );
        self.disk.insert(rel.clone(), obs);
        Ok(())
    }

    fn bytes_of(&self, v: &Virtual) -> Result<Option<Rc<Vec<u8>>>, WorkspaceError> {
        match (&v.bytes, &v.state.hash) {
            (Bytes::Loaded(b), _) => Ok(Some(b.clone())),
            (Bytes::TooLarge, _) | (_, None) => Ok(None),
            (Bytes::InStore, Some(h)) => Ok(Some(Rc::new(self.ws.blobs().get(h)?))),
        }
    }

    fn blob(&self, h: &Option<ContentHash>) -> Result<Result<Vec<u8>, String>, WorkspaceError> {
        let Some(h) = h else {
            return Ok(Ok(Vec::new()));
        };
        if let Some(b) = self.extra.get(h) {
            return Ok(Ok(b.to_vec()));
        }
        match self.ws.blobs().get(h) {
            Ok(b) => Ok(Ok(b)),
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    fn decide(&self, p: &FilePatch, cur: &Virtual) -> Result<Decision, WorkspaceError> {
        let after = side(p.after_hash, &p.after_mode, p.after_perm);
        let before = side(p.before_hash, &p.before_mode, p.before_perm);
        let c = &cur.state;
        if same_content(c, &after) {
            if before.hash.is_none() {
                return Ok(Decision::Set(
                    Virtual {
                        state: PathState::absent(),
                        bytes: Bytes::InStore,
                    },
                    false,
                    None,
                ));
            }
            let mode_kept = kind(&after) == Kind::File && c.mode != after.mode;
            let state = if mode_kept {
                // F46: the user changed the mode since; keep theirs.
                PathState {
                    hash: before.hash,
                    mode: if kind(&before) == Kind::File {
                        c.mode.clone()
                    } else {
                        before.mode.clone()
                    },
                    perm: if kind(&before) == Kind::File {
                        c.perm
                    } else {
                        None
                    },
                }
            } else {
                file_state(
                    before.hash,
                    before.mode.as_deref(),
                    perm_back(&before, &after, c),
                )
            };
            let bytes = match before.hash.and_then(|h| self.extra.get(&h)) {
                Some(b) => Bytes::Loaded(b.clone()),
                None => Bytes::InStore,
            };
            return Ok(Decision::Set(
                Virtual { state, bytes },
                false,
                mode_kept.then_some("kept your mode change"),
            ));
        }
        if same_content(c, &before) {
            return Ok(Decision::Keep);
        }
        let reason = match (kind(c), kind(&before), kind(&after)) {
            (Kind::Absent, _, _) => Some("deleted_by_user"),
            (Kind::Other, _, _) => Some("not_a_file"),
            (_, Kind::Absent, _) => Some("created_then_edited"),
            (_, _, Kind::Absent) => Some("recreated_by_user"),
            (Kind::Symlink, _, Kind::File) => Some("replaced_by_symlink"),
            (Kind::File, _, Kind::Symlink) => Some("replaced_by_file"),
            (Kind::Symlink, _, _) | (_, Kind::Symlink, _) => Some("symlink_changed"),
            _ if p.binary => Some("binary_changed"),
            _ => None,
        };
        if let Some(r) = reason {
            return Ok(Decision::Conflict(r));
        }
        let Some(cur_b) = self.bytes_of(cur)? else {
            return Ok(Decision::Conflict("too_large"));
        };
        let before_b = match self.blob(&before.hash)? {
            Ok(b) => b,
            Err(e) => {
                return Ok(Decision::Failed(format!(
                    "the agent's before state is not usable: {e}"
                )));
            }
        };
        let after_b = match self.blob(&after.hash)? {
            Ok(b) => b,
            Err(e) => {
                return Ok(Decision::Failed(format!(
                    "the agent's after state is not usable: {e}"
                )));
            }
        };
        if before_b.len() as u64 > self.merge_max || after_b.len() as u64 > self.merge_max {
            return Ok(Decision::Conflict("too_large"));
        }
        match merge::undo_patch(&before_b, &after_b, &cur_b) {
            Ok(MergeOutcome::Clean(out)) => {
                let mode_kept = c.mode != after.mode;
                let state = if mode_kept {
                    PathState {
                        hash: Some(ContentHash::of(&out)),
                        mode: c.mode.clone(),
                        perm: c.perm,
                    }
                } else {
                    file_state(
                        Some(ContentHash::of(&out)),
                        before.mode.as_deref(),
                        perm_back(&before, &after, c),
                    )
                };
                Ok(Decision::Set(
                    Virtual {
                        state,
                        bytes: Bytes::Loaded(Rc::new(out)),
                    },
                    true,
                    Some(if mode_kept {
                        "kept your edits and your mode change"
                    } else {
                        "kept your edits"
                    }),
                ))
            }
            Ok(MergeOutcome::Conflict { .. }) => Ok(Decision::Conflict("overlap")),
            Ok(MergeOutcome::Binary) => Ok(Decision::Conflict("binary_changed")),
            Err(e) => Ok(Decision::Conflict(match e {
                merge::MergeError::TooLarge { .. } => "too_large",
                _ => "merge_failed",
            })),
        }
    }

    /// Undoes one step: a patch, or a run of one path's patches that follow
    /// each other (`ids`, newest first) taken as one net patch. With `redo`,
    /// `p` is reversed: undoing it puts the patches `ids` back.
    fn undo(&mut self, p: &FilePatch, ids: &[String], step: Step) -> Result<(), WorkspaceError> {
        if p.op == PatchOp::Rename
            && let Some(from) = &p.from_path
        {
            return self.undo_rename(p, from, ids, step);
        }
        let rel = p.path.clone();
        self.load(&rel)?;
        let info = self.info.entry(rel.clone()).or_default();
        step.note(info, ids);
        if info.conflict.is_some() || info.failed.is_some() {
            return Ok(());
        }
        let cur = self.cur[&rel].clone();
        let d = self.decide(p, &cur)?;
        self.apply_decision(&rel, p, d);
        Ok(())
    }

    /// One planned step: `p` (undoing it takes the change out, or puts it
    /// back when reversed) rebased past the changes `gone` it was made on,
    /// and checked against the later changes `on_top` that stay.
    fn step(
        &mut self,
        p: &FilePatch,
        ids: &[String],
        step: Step,
        gone: &Gone<'_>,
        on_top: &[&FilePatch],
    ) -> Result<(), WorkspaceError> {
        let orig = p;
        let Some(p) = self.rebase(p, gone)? else {
            return self.hold(orig, ids, step, "built_on_undone");
        };
        if p.before_hash == p.after_hash && p.before_mode == p.after_mode && p.op != PatchOp::Rename
        {
            return self.noop(&p, ids, step);
        }
        if !on_top.is_empty() && self.built_on(&p, on_top)? {
            return self.hold(orig, ids, step, "later_call");
        }
        self.undo(&p, ids, step)?;
        // A conflict names the change as recorded (its contents are
        // stored; the rebased ones may not be).
        if let Some((_, c)) = self
            .info
            .get_mut(&orig.path)
            .and_then(|i| i.conflict.as_mut())
            && c.patch == orig.patch
        {
            *c = orig.clone();
        }
        Ok(())
    }

    /// Puts `p` (reversed) back under the later changes `deps` that were
    /// made on it and stay (oldest first): each is in the file without `p`
    /// now (rebased past it), so they are taken out as they are, newest
    /// first, `p` goes back, and they go back in as they were made. Any step
    /// that does not apply cleanly is a `later_call` conflict.
    fn back_under(
        &mut self,
        p: &FilePatch,
        ids: &[String],
        gone: &Gone<'_>,
        rest: &[&FilePatch],
        deps: &[(&FilePatch, Gone<'_>)],
    ) -> Result<(), WorkspaceError> {
        let orig = p;
        let Some(p) = self.rebase(p, gone)? else {
            return self.hold(orig, ids, Step::Back, "built_on_undone");
        };
        if !rest.is_empty() && self.built_on(&p, rest)? {
            return self.hold(orig, ids, Step::Back, "later_call");
        }
        let (mut out, mut back) = (Vec::new(), Vec::new());
        for (q, under) in deps {
            let keep = |d: &&FilePatch| !ids.contains(&d.patch);
            let with_p = Gone {
                before: under.before.iter().copied().filter(keep).collect(),
                after: under.after.iter().copied().filter(keep).collect(),
            };
            let (Some(now), Some(then)) = (self.rebase(q, under)?, self.rebase(q, &with_p)?) else {
                return self.hold(orig, ids, Step::Back, "later_call");
            };
            out.push(now);
            back.push(reversed(&then));
        }
        self.load(&p.path)?;
        let blocked = self
            .info
            .get(&p.path)
            .is_some_and(|i| i.conflict.is_some() || i.failed.is_some());
        if blocked {
            return self.noop(&p, ids, Step::Back);
        }
        let mut v = self.cur[&p.path].clone();
        let mut merged = false;
        let steps = out.into_iter().rev().chain([p.clone()]).chain(back);
        for step in steps {
            match self.decide(&step, &v)? {
                Decision::Set(next, m, _) => {
                    merged |= m;
                    v = next;
                }
                Decision::Keep => {}
                Decision::Conflict(_) | Decision::Failed(_) => {
                    return self.hold(orig, ids, Step::Back, "later_call");
                }
            }
        }
        let info = self.info.entry(p.path.clone()).or_default();
        Step::Back.note(info, ids);
        info.merged |= merged;
        self.cur.insert(p.path.clone(), v);
        Ok(())
    }

    /// Holds `p`'s path with a conflict (`reason`) instead of undoing it.
    fn hold(
        &mut self,
        p: &FilePatch,
        ids: &[String],
        step: Step,
        reason: &'static str,
    ) -> Result<(), WorkspaceError> {
        for r in std::iter::once(&p.path).chain(p.from_path.as_ref()) {
            self.load(r)?;
            let info = self.info.entry(r.clone()).or_default();
            step.note(info, ids);
            if info.conflict.is_none() && info.failed.is_none() {
                info.conflict = Some((reason, p.clone()));
            }
        }
        Ok(())
    }

    /// Whether any of the patches `on_top` (in effect, staying, later on
    /// the same path) was built on the change `step` takes back (`step`'s
    /// after → before): on recorded contents alone, the lines `step`
    /// changes, found in each one's before, overlap the lines it changed
    /// (identical edits included), or either is a creation, deletion or
    /// rename. A later change whose before does not hold `step`'s change
    /// (it was out then, and put back since) was not built on it. Then there is
    /// no right answer, as for `git revert`.
    fn built_on(&self, step: &FilePatch, on_top: &[&FilePatch]) -> Result<bool, WorkspaceError> {
        if step.before_hash.is_none() || step.after_hash.is_none() || step.binary {
            return Ok(true);
        }
        let (Ok(sb), Ok(sa)) = (self.blob(&step.before_hash)?, self.blob(&step.after_hash)?) else {
            return Ok(true);
        };
        for q in on_top {
            if q.op == PatchOp::Rename
                || q.binary
                || q.before_hash.is_none()
                || q.after_hash.is_none()
            {
                return Ok(true);
            }
            let (Ok(qb), Ok(qa)) = (self.blob(&q.before_hash)?, self.blob(&q.after_hash)?) else {
                return Ok(true);
            };
            if [&sb, &sa, &qb, &qa]
                .iter()
                .any(|b| b.len() as u64 > self.merge_max)
            {
                return Ok(true);
            }
            // `q`'s before without `step`'s change: the lines in question are
            // where it differs from `q`'s before.
            let without = match merge::undo_patch(&sb, &sa, &qb) {
                Ok(MergeOutcome::Clean(out)) if out != qb => out,
                // `step`'s change is not in its before (it was out when that
                // change was made, and came back later): not built on it.
                Ok(_) => continue,
                Err(_) => return Ok(true),
            };
            if merge::changes_overlap(&qb, &without, &qa) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// `p` as it reads without the changes in `gone` (oldest first:
    /// recorded before it, in effect when it was made, out of effect now):
    /// each is taken out of the side it was under, newest first (a run of
    /// patches has its before from its first and its after from its last,
    /// each made on what was in effect then). So a change
    /// made on top of one taken out since is seen for what it is without
    /// it, often nothing at all (a call that deleted what an earlier,
    /// undone call created), and taking it out or putting it back never
    /// brings back the undone call's work. `None` when a side cannot be
    /// worked out: `p` changed what the undone change made (no right
    /// answer). Renames are left as recorded.
    fn rebase(
        &mut self,
        p: &FilePatch,
        gone: &Gone<'_>,
    ) -> Result<Option<FilePatch>, WorkspaceError> {
        let all = || gone.before.iter().chain(&gone.after);
        if all().next().is_none()
            || p.op == PatchOp::Rename
            || all().any(|d| d.op == PatchOp::Rename)
        {
            return Ok(Some(p.clone()));
        }
        // Consecutive undone changes as one net change (a file one call
        // made and the next deleted is nothing to take out).
        let nets = |v: &[&FilePatch]| -> Vec<FilePatch> {
            runs(v)
                .into_iter()
                .map(|(n, _)| n)
                .filter(|n| n.before_hash != n.after_hash || n.before_mode != n.after_mode)
                .collect()
        };
        let mut r = p.clone();
        let mut b = side(r.before_hash, &r.before_mode, r.before_perm);
        for d in nets(&gone.before).iter().rev() {
            let Some(x) = self.take_out_of(d, b)? else {
                return Ok(None);
            };
            b = x;
        }
        let mut a = side(r.after_hash, &r.after_mode, r.after_perm);
        for d in nets(&gone.after).iter().rev() {
            let Some(x) = self.take_out_of(d, a)? else {
                return Ok(None);
            };
            a = x;
        }
        (r.before_hash, r.before_mode, r.before_perm) = (b.hash, b.mode, b.perm);
        (r.after_hash, r.after_mode, r.after_perm) = (a.hash, a.mode, a.perm);
        Ok(Some(r))
    }

    /// Content `x` with the change `d` taken out: `d`'s before where `x`
    /// is its after, `x` itself where `x` is its before (not in it),
    /// otherwise a clean three-way merge of text, or `None`.
    fn take_out_of(
        &mut self,
        d: &FilePatch,
        x: PathState,
    ) -> Result<Option<PathState>, WorkspaceError> {
        if x.hash == d.after_hash {
            return Ok(Some(side(d.before_hash, &d.before_mode, d.before_perm)));
        }
        if x.hash == d.before_hash {
            return Ok(Some(x));
        }
        if x.hash.is_none() || d.before_hash.is_none() || d.after_hash.is_none() || d.binary {
            return Ok(None);
        }
        let (Ok(db), Ok(da), Ok(xb)) = (
            self.blob(&d.before_hash)?,
            self.blob(&d.after_hash)?,
            self.blob(&x.hash)?,
        ) else {
            return Ok(None);
        };
        if [&db, &da, &xb]
            .iter()
            .any(|b| b.len() as u64 > self.merge_max)
        {
            return Ok(None);
        }
        match merge::undo_patch(&db, &da, &xb) {
            Ok(MergeOutcome::Clean(out)) => {
                let h = ContentHash::of(&out);
                self.extra.entry(h).or_insert_with(|| Rc::new(out));
                Ok(Some(PathState { hash: Some(h), ..x }))
            }
            _ => Ok(None),
        }
    }

    /// A step that, rebased, changes nothing: its patches flip, nothing
    /// is written for it.
    fn noop(&mut self, p: &FilePatch, ids: &[String], step: Step) -> Result<(), WorkspaceError> {
        self.load(&p.path)?;
        step.note(self.info.entry(p.path.clone()).or_default(), ids);
        Ok(())
    }

    fn apply_decision(&mut self, rel: &RelPath, p: &FilePatch, d: Decision) {
        let info = self.info.entry(rel.clone()).or_default();
        match d {
            Decision::Set(v, merged, note) => {
                info.merged |= merged;
                if note.is_some() {
                    info.note = note;
                }
                self.cur.insert(rel.clone(), v);
            }
            Decision::Keep => {}
            Decision::Conflict(reason) => info.conflict = Some((reason, p.clone())),
            Decision::Failed(e) => info.failed = Some(e),
        }
    }

    fn undo_rename(
        &mut self,
        p: &FilePatch,
        from: &RelPath,
        ids: &[String],
        step: Step,
    ) -> Result<(), WorkspaceError> {
        let to = p.path.clone();
        self.load(&to)?;
        self.load(from)?;
        for r in [&to, from] {
            step.note(self.info.entry(r.clone()).or_default(), ids);
        }
        let blocked = [&to, from].iter().any(|r| {
            let i = &self.info[*r];
            i.conflict.is_some() || i.failed.is_some()
        });
        if blocked {
            return Ok(());
        }
        let after = side(p.after_hash, &p.after_mode, p.after_perm);
        let before = side(p.before_hash, &p.before_mode, p.before_perm);
        let (cur_to, cur_from) = (self.cur[&to].state.clone(), self.cur[from].state.clone());
        if same_content(&cur_to, &after) && kind(&cur_from) == Kind::Absent {
            let state = file_state(
                before.hash,
                before.mode.as_deref(),
                perm_back(&before, &after, &cur_to),
            );
            let moved = self.cur[&to].bytes.clone();
            self.cur.insert(
                to.clone(),
                Virtual {
                    state: PathState::absent(),
                    bytes: Bytes::InStore,
                },
            );
            let bytes = if before.hash == after.hash {
                moved
            } else {
                Bytes::InStore
            };
            self.cur.insert(from.clone(), Virtual { state, bytes });
            if let Some(i) = self.info.get_mut(&to) {
                i.renamed = Some((from.clone(), false));
            }
            if let Some(i) = self.info.get_mut(from) {
                i.renamed = Some((to.clone(), true));
            }
            return Ok(());
        }
        if kind(&cur_to) == Kind::Absent && same_content(&cur_from, &before) {
            return Ok(());
        }
        let reason = if kind(&cur_from) != Kind::Absent {
            "rename_source_taken"
        } else {
            "renamed_then_changed"
        };
        self.info.get_mut(&to).expect("inserted above").conflict = Some((reason, p.clone()));
        Ok(())
    }
}

/// Plans the rollback (no writes); see the module doc.
fn plan(
    ws: &Workspace,
    cfg: &Config,
    records: &[Record],
    opts: &RollbackOptions,
    action: String,
) -> Result<RollbackReport, WorkspaceError> {
    let sel = select(records, &opts.selector)?;
    let filter = PathFilter::new(&opts.paths)?;
    let keep = |p: &&FilePatch| {
        filter.matches(&p.path) || p.from_path.as_ref().is_some_and(|f| filter.matches(f))
    };
    if let Some(pat) = filter.unmatched(&sel.touched) {
        return Err(WorkspaceError::NoMatch(format!(
            "`--path {pat}` matches no file the selection changed; run `ckpt status` or `ckpt log` to see the agent's files"
        )));
    }
    let undo: Vec<&FilePatch> = sel.undo.iter().copied().filter(keep).collect();
    let redo: Vec<&FilePatch> = sel.redo.iter().copied().filter(keep).collect();
    let mut pl = Planner {
        ws,
        merge_max: cfg.merge_max_bytes,
        disk: HashMap::new(),
        cur: HashMap::new(),
        info: BTreeMap::new(),
        extra: HashMap::new(),
    };
    let seq = patch_seqs(records);
    let at = |id: &str| seq.get(id).copied().unwrap_or(0);
    if let Some((p, h)) =
        crate::retention::collected_patch(ws, records, &at, undo.iter().chain(redo.iter()).copied())
    {
        return Err(WorkspaceError::Collected(
            match opts.selector.checkpoint() {
                Some(ck) if crate::retention::collected_checkpoints(records).contains(ck) => {
                    format!(
                        "checkpoint {ck} is older than what `ckpt gc` kept (it collected the contents of the history up to seq {h}); roll back to a kept checkpoint instead (`ckpt gc --dry-run` lists them)"
                    )
                }
                _ => format!(
                    "the contents of call {}'s change to `{}` were collected by `ckpt gc` (history up to seq {h}): it can no longer be undone; narrow the rollback with --path, or pick a later call",
                    p.call, p.path
                ),
            },
        ));
    }
    let undone: BTreeSet<&str> = undo.iter().map(|p| p.patch.as_str()).collect();
    // The agent patches in effect that stay in effect, by path: a selected
    // change they were built on cannot be taken out (or put back) under them.
    let mut staying: HashMap<&RelPath, Vec<&FilePatch>> = HashMap::new();
    for p in sel
        .live
        .iter()
        .filter(|p| !undone.contains(p.patch.as_str()))
    {
        staying.entry(&p.path).or_default().push(p);
        if let Some(f) = &p.from_path {
            staying.entry(f).or_default().push(p);
        }
    }
    let later = |path: &RelPath, after: u64| -> Vec<&FilePatch> {
        staying
            .get(path)
            .map(|v| v.iter().copied().filter(|p| at(&p.patch) > after).collect())
            .unwrap_or_default()
    };
    // What is in effect as the plan goes (taken out, put back), and every
    // agent change of each path, oldest first: a step's change is rebased
    // past the agent's changes it was made on that are out now. (Not past
    // ckpt's own: a rollback taken out without a write was taken out
    // because a later one had already put the file back, so its absence
    // is that later one's content, not a change gone from under it.)
    let mut virt: HashSet<String> = sel.live_ids.clone();
    let mut of_path: HashMap<&RelPath, Vec<(u64, &FilePatch)>> = HashMap::new();
    for r in records {
        if let Body::FilePatch(p) = &r.body
            && effect::is_agent(p)
        {
            of_path.entry(&p.path).or_default().push((r.seq, p));
        }
    }
    let mut then: HashMap<u64, HashSet<String>> = HashMap::new();
    let flipped = &sel.flipped;
    // Under the patch recorded at `at_seq`: the agent's changes recorded
    // before it, in effect then, out now (and not flipped by the step's own
    // patches: their absence is that patch's doing).
    let mut gone_at = |path: &RelPath, ids: &[String], at_seq: u64, virt: &HashSet<String>| {
        let own = |id: &str| {
            ids.iter()
                .any(|i| flipped.get(i).is_some_and(|f| f.contains(id)))
        };
        let out: Vec<(u64, &FilePatch)> = of_path
            .get(path)
            .into_iter()
            .flatten()
            .filter(|(s, p)| {
                *s < at_seq && !virt.contains(&p.patch) && !ids.contains(&p.patch) && !own(&p.patch)
            })
            .copied()
            .collect();
        if out.is_empty() {
            return Vec::new();
        }
        let live_then = then
            .entry(at_seq)
            .or_insert_with(|| Effects::replay(records, Some(at_seq.saturating_sub(1))).live_ids());
        out.into_iter()
            .filter(|(_, p)| live_then.contains(&p.patch))
            .map(|(_, p)| p)
            .collect::<Vec<&FilePatch>>()
    };
    // A put-back step is the patch reversed: its before is the last
    // patch's after.
    let sides = |ids: &[String], step: Step| {
        let first = ids.iter().map(|i| at(i)).min().unwrap_or(0);
        let last = ids.iter().map(|i| at(i)).max().unwrap_or(0);
        match step {
            Step::Out => (first, last),
            Step::Back => (last, first),
        }
    };
    let mut gone = |path: &RelPath, ids: &[String], virt: &HashSet<String>, step: Step| {
        let (b, a) = sides(ids, step);
        Gone {
            before: gone_at(path, ids, b, virt),
            after: gone_at(path, ids, a, virt),
        }
    };
    // Taken out newest first, then put back oldest first (a reversed patch
    // undone puts the patch back).
    for (p, ids) in runs(&undo).iter().rev() {
        let ambiguous = !sel.all_selected && p.candidates.iter().any(|c| !sel.calls.contains(c));
        if ambiguous {
            pl.load(&p.path)?;
            let info = pl.info.entry(p.path.clone()).or_default();
            info.patches.extend(ids.iter().cloned());
            if info.conflict.is_none() {
                info.conflict = Some(("ambiguous_attribution", p.clone()));
            }
            continue;
        }
        let first = ids.iter().map(|i| at(i)).min().unwrap_or(0);
        let was = gone(&p.path, ids, &virt, Step::Out);
        // (One removal per id: a `retain` over `virt` for each run made a
        // plan of every change in effect quadratic in their number.)
        for i in ids {
            virt.remove(i);
        }
        pl.step(p, ids, Step::Out, &was, &later(&p.path, first))?;
    }
    let back: Vec<FilePatch> = redo.iter().rev().map(|p| reversed(p)).collect();
    let back: Vec<&FilePatch> = back.iter().collect();
    for (p, ids) in runs(&back).iter().rev() {
        let last = ids.iter().map(|i| at(i)).max().unwrap_or(0);
        // Later changes that stay and were made on this one (in effect
        // then, out now): the file holds them without it, and with it back
        // they are what they were.
        let (mut deps, mut rest) = (Vec::new(), Vec::new());
        for q in later(&p.path, last) {
            let q_ids = std::slice::from_ref(&q.patch);
            let under = gone(&q.path, q_ids, &virt, Step::Out);
            if under.before.iter().any(|d| ids.contains(&d.patch)) {
                deps.push((q, under));
            } else {
                rest.push(q);
            }
        }
        let was = gone(&p.path, ids, &virt, Step::Back);
        virt.extend(ids.iter().cloned());
        if deps.is_empty() {
            pl.step(p, ids, Step::Back, &was, &rest)?;
        } else {
            pl.back_under(p, ids, &was, &rest, &deps)?;
        }
    }
    for path in sel.reset_paths.iter().filter(|p| filter.matches(p)) {
        // Nothing of the agent's moves here, but ckpt's own later change is
        // taken back with the rest (recorded as `unchanged`).
        pl.load(path)?;
        pl.info.entry(path.clone()).or_default();
    }
    for (path, id, found) in &sel.pseudo {
        // A file an earlier action found already as planned: its flags
        // flip back, nothing is written — only while the file still holds
        // what that action found (else the flags would say the agent's
        // change is out while its content is in the file).
        if filter.matches(path) {
            pl.load(path)?;
            let now = pl.cur[path].state.hash.map(|h| h.to_string());
            let info = pl.info.entry(path.clone()).or_default();
            if now == *found {
                info.patches.push(id.clone());
            }
        }
    }
    let calls = sel.calls;
    let picked_len = undo.len() + redo.len() + sel.pseudo.len();
    let mut files = Vec::new();
    let mut conflicts = Vec::new();
    for (rel, info) in &pl.info {
        let orig = pl.disk[rel].state.clone();
        let fin = pl.cur[rel].state.clone();
        let (result, to, note) = if let Some(e) = &info.failed {
            (FileResult::Failed, orig.clone(), Some(e.clone()))
        } else if let Some((reason, p)) = &info.conflict {
            let id = ws.clock().new_id("cf_");
            conflicts.push(ConflictRecord {
                conflict: id,
                action: action.clone(),
                path: rel.clone(),
                expected_hash: p.after_hash,
                actual_hash: orig.hash,
                agent_patch_ref: p.patch_ref.clone(),
                base_ref: p.before_hash,
                agent_ref: p.after_hash,
                current_ref: orig.hash,
                resolution: Resolution::Pending,
                reason: Some(reason.to_string()),
                patches: info.patches.clone(),
                redone: info.redone.clone(),
                base_mode: p.before_hash.and(p.before_mode.clone()),
                agent_mode: p.after_hash.and(p.after_mode.clone()),
                current_mode: orig.mode.clone(),
                resolved_by: None,
            });
            (
                FileResult::Conflict,
                orig.clone(),
                Some(conflict_reason_text(reason).to_string()),
            )
        } else if fin.same(&orig) && (fin.perm.is_none() || fin.perm == orig.perm) {
            (FileResult::Unchanged, orig.clone(), None)
        } else if fin.hash.is_none() {
            let note = match &info.renamed {
                Some((other, false)) => Some(format!("renamed back to {other}")),
                _ => None,
            };
            (FileResult::Deleted, fin, note)
        } else if orig.hash.is_none() {
            let note = match &info.renamed {
                Some((other, true)) => Some(format!("renamed back from {other}")),
                _ => None,
            };
            (FileResult::Recreated, fin, note)
        } else if info.merged {
            (FileResult::Merged, fin, info.note.map(str::to_string))
        } else {
            (FileResult::Restored, fin, info.note.map(str::to_string))
        };
        let conflict = conflicts
            .last()
            .filter(|c| result == FileResult::Conflict && c.path == *rel)
            .map(|c| c.conflict.clone());
        files.push(PlannedFile {
            path: rel.clone(),
            result,
            from: orig,
            to,
            patches: info.patches.clone(),
            redone: info.redone.clone(),
            renamed_to: match (&info.renamed, result) {
                (Some((other, false)), FileResult::Deleted) => Some(other.clone()),
                _ => None,
            },
            dirs_since: None,
            dirs_removed: Vec::new(),
            conflict,
            note,
        });
    }
    // A file the agent created goes with the directories made for it: when
    // did the call that created it start?
    let mut by_id: HashMap<&str, &FilePatch> = HashMap::new();
    for p in undo.iter().copied() {
        by_id.insert(&p.patch, p);
    }
    let mut started: HashMap<&str, u64> = HashMap::new();
    for r in records {
        match &r.body {
            Body::ToolCall(t) => {
                if let Some(ms) = crate::ids::parse_rfc3339(&r.ts) {
                    started.entry(&t.call).or_insert(ms);
                }
            }
            // A file an earlier rollback re-created goes as the call's did:
            // from when that action began (before its first write, which
            // its plan's record follows).
            Body::Action(a) => {
                let ms = a
                    .plan
                    .as_ref()
                    .and_then(|p| p.get("began_ms"))
                    .and_then(Value::as_u64)
                    .or_else(|| crate::ids::parse_rfc3339(&r.ts));
                if let Some(ms) = ms {
                    started.entry(&a.action).or_insert(ms);
                }
            }
            _ => {}
        }
    }
    for f in files.iter_mut().filter(|f| f.result == FileResult::Deleted) {
        f.dirs_since = f
            .patches
            .iter()
            .filter_map(|id| by_id.get(id.as_str()))
            .filter(|p| p.before_hash.is_none() || p.op == PatchOp::Rename)
            .filter_map(|p| started.get(p.call.as_str()))
            .min()
            .map(|&ms| crate::ids::rfc3339(ms));
    }
    // Merged contents are new: keep them for the write (stored at run time).
    // What the selected calls changed but could not record (F47).
    let unrecorded = records
        .iter()
        .filter_map(|r| match &r.body {
            Body::ToolCall(t) if calls.contains(&t.call) => Some(t),
            _ => None,
        })
        .flat_map(|t| t.unrecorded.iter().map(|u| (t.call.clone(), u.clone())))
        .filter(|(_, u)| filter.matches(&u.path))
        .collect();
    let mut report = RollbackReport {
        action,
        dry_run: opts.dry_run,
        files,
        conflicts,
        patches: picked_len,
        unrecorded,
        undo_to: sel.undo_to,
        redo_of: sel.redo_of,
        named: sel.touched.iter().filter(|p| keep(p)).count(),
        git: None,
        closed: Vec::new(),
        lost: records
            .iter()
            .filter_map(|r| match &r.body {
                Body::Repair(rp) if rp.rechained_from.is_none() => Some(rp.lost.iter().copied()),
                _ => None,
            })
            .flatten()
            .collect(),
        merged: pl
            .cur
            .iter()
            .filter_map(|(k, v)| match &v.bytes {
                Bytes::Loaded(b) if pl.info.contains_key(k) => Some((k.clone(), b.clone())),
                _ => None,
            })
            .collect(),
    };
    if opts.dry_run {
        check_contents(ws, &pl, &mut report);
    } else {
        store_contents(ws, &pl, &mut report)?;
    }
    Ok(report)
}

/// Groups the selected patches (oldest first) into undo steps, oldest first:
/// consecutive patches of one path whose before is the previous one's after
/// (nothing else changed the file in between) become one net patch, so a
/// file several calls edited is undone as one change — and recognised as
/// already undone when it holds the first before state. Renames stay alone.
/// Each step carries its patch ids, newest first.
fn runs(picked: &[&FilePatch]) -> Vec<(FilePatch, Vec<String>)> {
    let mut steps: Vec<(FilePatch, Vec<String>)> = Vec::new();
    let mut open: HashMap<RelPath, usize> = HashMap::new();
    for p in picked {
        if p.op == PatchOp::Rename {
            open.remove(&p.path);
            if let Some(f) = &p.from_path {
                open.remove(f);
            }
            steps.push(((*p).clone(), vec![p.patch.clone()]));
            continue;
        }
        if let Some(&i) = open.get(&p.path) {
            let (net, ids) = &mut steps[i];
            if effect::chains_onto(net, p) {
                effect::extend_net(net, p);
                // Oldest first while building (a file edited by k calls
                // would otherwise cost k² moves), newest first at the end.
                ids.push(p.patch.clone());
                continue;
            }
        }
        open.insert(p.path.clone(), steps.len());
        steps.push(((*p).clone(), vec![p.patch.clone()]));
    }
    for (_, ids) in &mut steps {
        ids.reverse();
    }
    steps
}

/// The agent changes a step's change was made on that are out of effect
/// now: under its before side (in effect when its first patch was made),
/// and under its after side (when its last was), oldest first.
struct Gone<'r> {
    before: Vec<&'r FilePatch>,
    after: Vec<&'r FilePatch>,
}

/// What a planning step does to the bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A selected patch taken out.
    Out,
    /// A patch put back in.
    Back,
}

impl Step {
    fn note(self, info: &mut PathInfo, ids: &[String]) {
        match self {
            Step::Out => info.patches.extend(ids.iter().cloned()),
            Step::Back => info.redone.extend(ids.iter().cloned()),
        }
    }
}

/// `p` the other way round: undoing it puts `p` back.
fn reversed(p: &FilePatch) -> FilePatch {
    let mut r = p.clone();
    std::mem::swap(&mut r.before_hash, &mut r.after_hash);
    std::mem::swap(&mut r.before_mode, &mut r.after_mode);
    std::mem::swap(&mut r.before_perm, &mut r.after_perm);
    std::mem::swap(&mut r.before_git, &mut r.after_git);
    r.op = match p.op {
        PatchOp::Create => PatchOp::Delete,
        PatchOp::Delete => PatchOp::Create,
        op => op,
    };
    if p.op == PatchOp::Rename
        && let Some(from) = &p.from_path
    {
        r.path = from.clone();
        r.from_path = Some(p.path.clone());
    }
    r
}

/// One line for a conflict's reason code.
pub fn conflict_reason_text(reason: &str) -> &'static str {
    match reason {
        "overlap" => "your edits overlap the agent's change",
        "binary_changed" => "binary file changed since the agent wrote it",
        "too_large" => "file changed since and too large to merge",
        "deleted_by_user" => "you deleted the file after the agent changed it",
        "created_then_edited" => "the agent created this file and it was edited since",
        "recreated_by_user" => "the agent deleted this path and it was re-created since",
        "replaced_by_symlink" => "the file was replaced by a symlink since",
        "replaced_by_file" => "the agent's symlink was replaced by a file since",
        "symlink_changed" => "the symlink changed since the agent wrote it",
        "not_a_file" => "a directory or special file is at this path now",
        "renamed_then_changed" => "the file the agent renamed was changed or moved since",
        "rename_source_taken" => "the agent renamed this file and its old path is taken now",
        "ambiguous_attribution" => {
            "this change may belong to a call outside the selection (calls overlapped)"
        }
        "built_on_undone" => {
            "the agent's change was made on one that has been taken out since; there is no right answer"
        }
        "later_call" => {
            "a later call changed the same lines, so this change cannot be taken out (or put back) under it"
        }
        "merge_failed" => "the three-way merge could not run",
        "uncertain_call_diverged" => {
            "a call was cut short and the file is neither as before nor as the call would leave it"
        }
        _ => "the undo could not be merged",
    }
}

/// What a dry run can tell of the run without writing: a file whose content
/// to restore is not in the store, or whose directory this process cannot
/// write, would fail.
fn check_contents(ws: &Workspace, pl: &Planner<'_>, report: &mut RollbackReport) {
    for f in report.files.iter_mut().filter(|f| f.result.writes()) {
        let missing = f.to.hash.filter(|h| {
            !ws.blobs().contains(h)
                && !matches!(&pl.cur[&f.path].bytes, Bytes::Loaded(b) if ContentHash::of(b) == *h)
        });
        let why = if let Some(h) = missing {
            Some(format!(
                "the content to restore ({}) was never stored (file too large when it was captured?); left as it is",
                h.short()
            ))
        } else {
            writeback::check_writable(ws, &f.path)
                .err()
                .map(|e| crate::error_line(&e))
        };
        if let Some(note) = why {
            f.result = FileResult::Failed;
            f.note = Some(note);
            f.to = f.from.clone();
        }
    }
}

/// Puts into the blob store, before anything is written, every content the
/// plan overwrites (the user's bytes) or writes (merged results), and checks
/// that every content it restores is there. A file whose bytes changed since
/// they were planned on is marked raced; one whose target is missing, failed.
fn store_contents(
    ws: &Workspace,
    pl: &Planner<'_>,
    report: &mut RollbackReport,
) -> Result<(), WorkspaceError> {
    // Durable before the plan that names them is appended (the ledger's
    // append syncs them, together).
    for f in report.files.iter_mut() {
        if !(f.result.writes() || f.result == FileResult::Conflict) {
            continue;
        }
        if let Some(h) = f.from.hash {
            let stored = writeback::store_observed(ws, &f.path, &pl.disk[&f.path])?.unwrap_or(h);
            if stored != h {
                if f.result == FileResult::Conflict {
                    // Record what is there now.
                    if let Some(c) = report.conflicts.iter_mut().find(|c| c.path == f.path) {
                        c.actual_hash = Some(stored);
                        c.current_ref = Some(stored);
                    }
                } else {
                    f.result = FileResult::Raced;
                    f.note =
                        Some("changed while the rollback was being planned; left as it is".into());
                    f.to = f.from.clone();
                    continue;
                }
            }
        }
        if !f.result.writes() {
            continue;
        }
        if let Some(h) = f.to.hash
            && !ws.blobs().contains(&h)
        {
            match &pl.cur[&f.path].bytes {
                Bytes::Loaded(b) if ContentHash::of(b) == h => {
                    ws.blobs().put_bytes(b)?;
                }
                _ => {
                    f.result = FileResult::Failed;
                    f.note = Some(format!(
                        "the content to restore ({}) was never stored (file too large when it was captured?); left as it is",
                        h.short()
                    ));
                    f.to = f.from.clone();
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- doing

/// Records the plan, writes the files, records the end. Shared by a fresh
/// rollback and by [`finish_interrupted`].
pub(crate) fn run_plan(
    ws: &Workspace,
    report: &mut RollbackReport,
    target: Value,
) -> Result<(), WorkspaceError> {
    run_plan_settling(ws, report, target, None)
}

/// [`run_plan`] for a resolve: `settle` (the conflict's new state) is appended
/// in the same write as the action's end, unless the file raced or failed, so
/// no crash can leave the file written and the conflict unsettled.
pub(crate) fn run_plan_settling(
    ws: &Workspace,
    report: &mut RollbackReport,
    target: Value,
    settle: Option<ConflictRecord>,
) -> Result<(), WorkspaceError> {
    let action = report.action.clone();
    // A resolve's settlement rides in the plan, so finishing the action after
    // a crash appends it too.
    let mut plan_value = json!({
        "files": report.files,
        "patches": report.patches,
        // Before the first directory this action may make (`dirs_since`),
        // by the file system's clock, which dates those directories: the
        // system clock runs ahead of it by up to a tick, more on a loaded
        // VM, and a directory this action made then looked older than the
        // action and stayed (a flaky model-test failure, session 17).
        "began_ms": crate::scan::fs_now_ms(ws).unwrap_or_else(|| ws.clock().now_ms()),
    });
    if let Some(c) = &settle {
        plan_value["settle"] = json!(c);
    }
    let mut drafts = vec![Draft::new(Body::Action(ActionRecord {
        action: action.clone(),
        action_type: ActionType::RollbackFiles,
        status: ActionStatus::Started,
        target,
        plan: Some(plan_value),
        outcome: None,
    }))];
    for c in &report.conflicts {
        drafts.push(Draft::new(Body::Conflict(c.clone())));
    }
    let paths: Vec<&RelPath> = report
        .files
        .iter()
        .filter(|f| f.result.writes())
        .map(|f| &f.path)
        .collect();
    write_pending(ws, &action, &paths)?;
    let conflicts = report.conflicts.clone();
    execute_and_end(
        ws,
        &action,
        &mut report.files,
        Start::Fresh {
            plan: drafts,
            conflicts: &conflicts,
        },
        settle,
    )
}

/// How [`execute_and_end`] starts.
enum Start<'a> {
    /// A new action: its plan (and conflicts) are appended once the first
    /// files are prepared, beside their syncs.
    Fresh {
        plan: Vec<Draft>,
        conflicts: &'a [ConflictRecord],
    },
    /// Finishing an interrupted action whose plan is in the ledger.
    Resumed,
}

/// Writes each planned file, then appends its `file_patch` records and the
/// action's end, and clears the pending marker.
fn execute_and_end(
    ws: &Workspace,
    action: &str,
    files: &mut [PlannedFile],
    start: Start<'_>,
    settle: Option<ConflictRecord>,
) -> Result<(), WorkspaceError> {
    let resumed = matches!(start, Start::Resumed);
    let mut start = Some(start);
    let mut written: Vec<(RelPath, FileState)> = Vec::new();
    let mut drafts = Vec::new();
    // The first chunk's temp files and patch artifacts (named by no record
    // yet) are synced beside the plan's own fdatasync, later chunks' before
    // their first rename, the directories before the end is appended (the
    // ledger syncs the content first). Data before pointers, RELIABILITY
    // B4, in three waits for a small rollback (plan, directories, end).
    // In chunks, so the open directory handles of prepared files stay few.
    let idx: Vec<usize> = (0..files.len())
        .filter(|&i| files[i].result.writes())
        .collect();
    for chunk in idx.chunks(256) {
        let prepared = prepare_chunk(ws, action, files, chunk, resumed)?;
        match start.take() {
            Some(fresh @ Start::Fresh { .. }) => append_plan(ws, fresh)?,
            _ => ws.sync_all()?,
        }
        for (&i, (p, patch, after)) in chunk.iter().zip(prepared) {
            let f = &mut files[i];
            let outcome = match p {
                Ok(Some(p)) => writeback::commit(p, &f.from, &f.to, ws.durable()),
                Ok(None) => Ok(Written::AlreadyThere),
                Err(e) => Err(e),
            };
            match outcome {
                Ok(Written::Done) | Ok(Written::AlreadyThere) => {
                    drafts.extend(patch);
                    written.push((f.path.clone(), after));
                    if f.result == FileResult::Deleted
                        && let Some(since) =
                            f.dirs_since.as_deref().and_then(crate::ids::parse_rfc3339)
                    {
                        f.dirs_removed = writeback::remove_new_empty_dirs(ws, &f.path, since);
                    }
                }
                Ok(Written::Raced(now)) => {
                    f.result = FileResult::Raced;
                    f.note = Some(format!(
                        "changed while the rollback ran (now {}); left as it is",
                        now.hash
                            .map(|h| h.short())
                            .unwrap_or_else(|| "absent".into())
                    ));
                }
                Err(e) => {
                    f.result = FileResult::Failed;
                    f.note = Some(crate::error_line(&e));
                }
            }
            crate::failpoint::hit("rollback.after_file").map_err(|e| {
                WorkspaceError::Io(FsError::new("roll back", f.path.to_string(), e))
            })?;
        }
    }
    if let Some(fresh) = start.take() {
        // Nothing to write (only conflicts): the plan still comes first.
        append_plan(ws, fresh)?;
    }
    let failed = files
        .iter()
        .any(|f| matches!(f.result, FileResult::Raced | FileResult::Failed));
    let outcome: Vec<Value> = files
        .iter()
        .map(|f| {
            let mut o = json!({"path": f.path, "result": f.result});
            if let Some(n) = &f.note {
                o["note"] = json!(n);
            }
            if !f.dirs_removed.is_empty() {
                o["dirs_removed"] = json!(f.dirs_removed);
            }
            o
        })
        .collect();
    let settle = settle.filter(|_| !failed);
    if let Some(c) = &settle {
        drafts.push(Draft::new(Body::Conflict(c.clone())));
    }
    drafts.push(Draft::new(Body::Action(ActionRecord {
        action: action.to_string(),
        action_type: ActionType::RollbackFiles,
        status: if failed {
            ActionStatus::Failed
        } else {
            ActionStatus::Succeeded
        },
        target: Value::Null,
        plan: None,
        outcome: Some(json!({"files": outcome, "resumed": resumed})),
    })));
    crate::failpoint::hit("rollback.before_end").map_err(|e| {
        WorkspaceError::Io(FsError::new("roll back", ".agent-runtime/ledger.jsonl", e))
    })?;
    ws.ledger().lock()?.append(&drafts)?;
    if let Some(c) = &settle {
        if c.resolution == Resolution::Pending {
            crate::action::write_conflict_file(ws, c)?;
        } else {
            crate::action::remove_conflict_file(ws, &c.conflict);
        }
    }
    clear_pending(ws.runtime_dir(), action);
    crate::hook::note_written(ws, &written, action)?;
    Ok(())
}

/// One prepared write-back: the temp file (or why not), the patch it will
/// be, and the state it leaves.
type PreparedFile = (
    Result<Option<writeback::Prepared>, WorkspaceError>,
    Option<Draft>,
    FileState,
);

/// Prepares the files `chunk` indexes: each one's temp file and its patch
/// artifact (written now, synced with the temp files; dropped if the file
/// races). Large chunks are split over two threads (hashing and copying
/// from the store is CPU work); both hand their syncs to the workspace's
/// durable set.
fn prepare_chunk(
    ws: &Workspace,
    action: &str,
    files: &[PlannedFile],
    chunk: &[usize],
    resumed: bool,
) -> Result<Vec<PreparedFile>, WorkspaceError> {
    let one = |i: usize| -> Result<PreparedFile, WorkspaceError> {
        let f = &files[i];
        if resumed {
            writeback::sweep_temps_near(ws, &f.path);
        }
        let p = writeback::prepare(ws, &f.path, &f.to);
        let (before, after) = (to_file_state(&f.from), to_file_state(&f.to));
        // No diff artifact: a rollback's write is fully described by its
        // before and after blobs (`ckpt show` renders the diff from them).
        let patch = match &p {
            Ok(_) => call::patch_record(
                ws,
                action,
                None,
                &f.path,
                (&before, &after),
                PatchSource::Rollback,
                None,
            )?
            .map(|(d, _)| d),
            Err(_) => None,
        };
        Ok((p, patch, after))
    };
    if chunk.len() < crate::par::PARALLEL_FROM || crate::par::cpus() < 2 {
        return chunk.iter().map(|&i| one(i)).collect();
    }
    let (first, second) = chunk.split_at(chunk.len() / 2);
    let (b, a) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            second
                .iter()
                .map(|&i| one(i))
                .collect::<Result<Vec<_>, _>>()
        });
        let a = first.iter().map(|&i| one(i)).collect::<Result<Vec<_>, _>>();
        let b = h.join().unwrap_or_else(|_| {
            Err(WorkspaceError::Io(FsError::new(
                "prepare",
                ".agent-runtime/tmp",
                std::io::Error::other("a worker thread panicked"),
            )))
        });
        (b, a)
    });
    let mut v = a?;
    v.extend(b?);
    Ok(v)
}

/// Appends a fresh action's plan (the temp files and patch artifacts
/// written so far, which it does not name, synced beside it), then writes
/// its conflict files.
fn append_plan(ws: &Workspace, start: Start<'_>) -> Result<(), WorkspaceError> {
    let Start::Fresh { plan, conflicts } = start else {
        return Ok(());
    };
    crate::failpoint::hit("rollback.before_plan").map_err(|e| {
        WorkspaceError::Io(FsError::new("roll back", ".agent-runtime/ledger.jsonl", e))
    })?;
    ws.ledger().lock()?.append(&plan)?;
    for c in conflicts {
        crate::action::write_conflict_file(ws, c)?;
    }
    crate::failpoint::hit("rollback.after_plan").map_err(|e| {
        WorkspaceError::Io(FsError::new("roll back", ".agent-runtime/ledger.jsonl", e))
    })
}

fn to_file_state(s: &PathState) -> FileState {
    match (s.hash, s.mode.as_deref()) {
        (None, _) => FileState::Absent,
        (Some(hash), Some(SYMLINK_MODE)) => FileState::Symlink { hash },
        (Some(hash), m) => FileState::File {
            hash,
            mode: s.perm.unwrap_or(crate::record::perm_of_mode(m, None)) & 0o777,
        },
    }
}

// ---------------------------------------------------------------- crash handling

/// What `state/pending_action` holds: the action a crash may have cut short,
/// and the paths it was about to write (temp files may sit beside them
/// before its plan is in the ledger).
#[derive(Serialize, Deserialize)]
struct PendingMarker {
    action: String,
    #[serde(default)]
    paths: Vec<RelPath>,
}

fn write_pending(ws: &Workspace, action: &str, paths: &[&RelPath]) -> Result<(), WorkspaceError> {
    // A hint for the next command, not a record: written atomically but not
    // synced (after a power loss `ckpt recover` still finds the action in the
    // ledger).
    let dir = ws.state_dir()?;
    let body = json!({"action": action, "paths": paths}).to_string();
    fs_util::write_atomic(
        dir.as_fd(),
        "pending_action".as_ref(),
        body.as_bytes(),
        0o600,
        false,
        Keep::Cache,
    )
    .map_err(|e| FsError::new("write", ".agent-runtime/state/pending_action", e).into())
}

fn read_pending_marker(rt: &OwnedFd) -> Option<PendingMarker> {
    let dir = fs_util::open_dir(rt.as_fd(), "state").ok()?;
    let mut f = fs_util::open_regular_at(dir.as_fd(), "pending_action".as_ref()).ok()?;
    let mut s = String::new();
    f.read_to_string(&mut s).ok()?;
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    // Older versions wrote the bare action id.
    serde_json::from_str(s).ok().or_else(|| {
        Some(PendingMarker {
            action: s.to_string(),
            paths: Vec::new(),
        })
    })
}

fn read_pending(rt: &OwnedFd) -> Option<String> {
    read_pending_marker(rt).map(|m| m.action)
}

fn clear_pending(rt: &OwnedFd, action: &str) {
    if read_pending(rt).as_deref() == Some(action)
        && let Ok(dir) = fs_util::open_dir(rt.as_fd(), "state")
    {
        let _ = rustix::fs::unlinkat(&dir, "pending_action", rustix::fs::AtFlags::empty());
    }
}

/// What [`finish_interrupted`] did.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The action.
    pub action: String,
    /// Its files and what became of them.
    pub files: Vec<PlannedFile>,
}

/// Finishes a rollback that a crash interrupted between its plan and its end
/// (cheap when there is none: one failed `open`). Every planned file still
/// holding its planned before state is written; one holding the planned after
/// state counts as done; anything else is left and reported as raced.
pub fn finish_interrupted(ws: &Workspace) -> Result<Option<Finished>, WorkspaceError> {
    if read_pending(ws.runtime_dir()).is_none() {
        return Ok(None);
    }
    let _lock = crate::action::ActionLock::take(ws)?;
    finish_interrupted_locked(ws)
}

pub(crate) fn finish_interrupted_locked(
    ws: &Workspace,
) -> Result<Option<Finished>, WorkspaceError> {
    let Some(marker) = read_pending_marker(ws.runtime_dir()) else {
        return Ok(None);
    };
    let action = marker.action;
    let read = read_whole(ws, None)?;
    let done = finish_action_locked(ws, &read.records, &action)?;
    if done.is_none() {
        // Never started (crash before the plan's append: its temp files may
        // be there) or already ended.
        for p in &marker.paths {
            writeback::sweep_temps_near(ws, p);
        }
        clear_pending(ws.runtime_dir(), &action);
    }
    Ok(done)
}

/// Finishes the rollback `action` from its recorded plan if it started and
/// never ended (the caller holds the [`ActionLock`](crate::action::ActionLock)).
pub(crate) fn finish_action_locked(
    ws: &Workspace,
    records: &[Record],
    action: &str,
) -> Result<Option<Finished>, WorkspaceError> {
    let Some((mut files, settle)) = unfinished_plan(records, action) else {
        return Ok(None);
    };
    execute_and_end(ws, action, &mut files, Start::Resumed, settle)?;
    Ok(Some(Finished {
        action: action.to_string(),
        files,
    }))
}

/// The plan of `action` if it started and never ended: its files, and the
/// conflict settlement a resolve appends with its end.
pub fn unfinished_plan(
    records: &[Record],
    action: &str,
) -> Option<(Vec<PlannedFile>, Option<ConflictRecord>)> {
    let mut plan = None;
    for r in records {
        if let Body::Action(a) = &r.body
            && a.action == action
            && a.action_type == ActionType::RollbackFiles
        {
            match a.status {
                ActionStatus::Started => plan = a.plan.clone(),
                _ => return None,
            }
        }
    }
    let plan = plan?;
    let files = serde_json::from_value(plan.get("files")?.clone()).ok()?;
    let settle = plan
        .get("settle")
        .and_then(|c| serde_json::from_value(c.clone()).ok());
    Some((files, settle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_glob_is_an_invalid_argument() {
        assert!(matches!(
            PathFilter::new(&["src/[".to_string()]),
            Err(WorkspaceError::Invalid(_))
        ));
        assert!(PathFilter::new(&["src/**".to_string(), "docs/".to_string()]).is_ok());
    }
}
