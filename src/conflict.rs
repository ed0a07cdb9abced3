//! Conflicts raised by rollbacks: listing them, the three-way view, and
//! settling them (`ckpt resolve`).
//!
//! A conflict's state is its last `conflict` record (same id). Settling one
//! appends a copy with the new `resolution`; writing the file for
//! `--apply-agent` or `--manual` is an action like a rollback (plan, write
//! through [`crate::writeback`], `file_patch` records with `source: "rollback"`),
//! so it can be undone with `ckpt rollback --action`. The user's file is stored
//! as a blob before anything replaces it.

use serde_json::json;

use crate::action::ActionLock;
use crate::config::Config;
use crate::hash::ContentHash;
use crate::merge::{self, Labels, MergeInput, MergeOutcome};
use crate::record::{Body, ConflictRecord, Draft, Record, Resolution};
use crate::rollback::{self, FileResult, PlannedFile, RollbackReport};
use crate::workspace::{Workspace, WorkspaceError};
use crate::writeback::{self, PathState};

/// Every conflict in its latest state, in the order they were raised.
pub fn list(records: &[Record]) -> Vec<ConflictRecord> {
    crate::open::conflicts(records)
}

/// How to settle a conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Keep the user's file as it is; the agent's change stays.
    KeepUser,
    /// Take the agent's change out anyway (the user's file is stored first):
    /// user edits outside the overlapping hunks are kept for text files.
    ApplyAgent,
    /// Write the three-way merge with conflict markers into the file.
    Manual,
    /// The user finished merging by hand (refused while markers remain,
    /// unless `force`).
    Done {
        /// Settle even with conflict markers in the file.
        force: bool,
    },
}

/// What `resolve` did.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The conflict's new state.
    pub conflict: ConflictRecord,
    /// The file written, when one was.
    pub file: Option<PlannedFile>,
    /// The action that wrote it.
    pub action: Option<String>,
}

fn not_applicable(s: String) -> WorkspaceError {
    WorkspaceError::NotApplicable(s)
}

/// Settles conflict `id`; see [`How`].
pub fn resolve(
    ws: &Workspace,
    cfg: &Config,
    id: &str,
    how: How,
) -> Result<Resolved, WorkspaceError> {
    let _lock = ActionLock::take(ws)?;
    let read = ws.read_ledger()?;
    let c = list(&read.records)
        .into_iter()
        .find(|c| c.conflict == id)
        .ok_or_else(|| WorkspaceError::UnknownId(id.to_string()))?;
    if c.resolution != Resolution::Pending {
        return Err(not_applicable(format!(
            "conflict {id} is already settled ({}); nothing to do",
            resolution_str(c.resolution)
        )));
    }
    let obs = writeback::observe(ws, &c.path, cfg.merge_max_bytes)?;
    if obs.is_other() {
        return Err(not_applicable(format!(
            "`{}` is not a file now; move it away first, then resolve {id} again",
            c.path
        )));
    }
    // The user's bytes go into the store before anything else happens.
    let now = store_current(ws, &c, &obs)?;
    let mut next = c.clone();
    next.actual_hash = now.hash;
    next.current_ref = now.hash;
    next.current_mode = now.mode.clone();
    let (target, resolution) = match how {
        How::KeepUser => (None, Resolution::KeepUser),
        How::Done { force } => {
            if !force
                && let Some(b) = &obs.bytes
                && has_markers(b)
            {
                return Err(not_applicable(format!(
                    "`{}` still holds conflict markers; finish the merge, or pass --force to settle {id} as it is",
                    c.path
                )));
            }
            (None, Resolution::ManualMerge)
        }
        How::ApplyAgent => (
            Some(apply_agent_target(ws, &c, &obs)?),
            Resolution::ApplyAgent,
        ),
        How::Manual => (Some(markers_target(ws, &c, &obs)?), Resolution::Pending),
    };
    if let Some((to, bytes)) = target {
        let _ = ws.blobs().put_bytes(&bytes)?;
        let result = match (now.hash, to.hash) {
            (_, None) => FileResult::Deleted,
            (None, Some(_)) => FileResult::Recreated,
            _ if how == How::Manual => FileResult::Merged,
            _ if to.hash == c.base_ref => FileResult::Restored,
            _ => FileResult::Merged,
        };
        let act = ws.clock().new_id("act_");
        let mut report = RollbackReport {
            action: act.clone(),
            dry_run: false,
            files: vec![PlannedFile {
                path: c.path.clone(),
                result: if to.same(&now) {
                    FileResult::Unchanged
                } else {
                    result
                },
                from: now.clone(),
                to,
                patches: c.patches.clone(),
                redone: c.redone.clone(),
                renamed_to: None,
                dirs_since: None,
                dirs_removed: Vec::new(),
                conflict: Some(id.to_string()),
                note: None,
            }],
            conflicts: Vec::new(),
            patches: 0,
            unrecorded: Vec::new(),
            undo_to: None,
            redo_of: None,
            named: 0,
            git: None,
            closed: Vec::new(),
            lost: Vec::new(),
            merged: Default::default(),
        };
        // The conflict's new state goes into the same append as the action's
        // end (a crash in between is finished, conflict included, by the
        // next command).
        let mut settled = next.clone();
        settled.resolution = resolution;
        settled.resolved_by = Some(act.clone());
        settled.actual_hash = report.files[0].to.hash;
        rollback::run_plan_settling(
            ws,
            &mut report,
            json!({"resolve": id, "resolution": if how == How::Manual { "manual" } else { "apply_agent" }}),
            Some(settled.clone()),
        )?;
        let f = report.files.remove(0);
        if matches!(f.result, FileResult::Raced | FileResult::Failed) {
            return Err(WorkspaceError::Changing(format!(
                "could not write `{}`: {}; conflict {id} stays open",
                c.path,
                f.note.as_deref().unwrap_or("changed while resolving")
            )));
        }
        return Ok(Resolved {
            conflict: settled,
            file: Some(f),
            action: Some(act),
        });
    }
    next.resolution = resolution;
    ws.ledger()
        .lock()?
        .append(&[Draft::new(Body::Conflict(next.clone()))])?;
    crate::action::remove_conflict_file(ws, id);
    Ok(Resolved {
        conflict: next,
        file: None,
        action: None,
    })
}

fn store_current(
    ws: &Workspace,
    c: &ConflictRecord,
    obs: &writeback::Observed,
) -> Result<PathState, WorkspaceError> {
    if writeback::store_observed(ws, &c.path, obs)? != obs.state.hash {
        return Err(WorkspaceError::Changing(format!(
            "`{}` is changing right now; try again when it is still",
            c.path
        )));
    }
    Ok(obs.state.clone())
}

fn blob_or_empty(
    ws: &Workspace,
    h: &Option<ContentHash>,
) -> Result<Option<Vec<u8>>, WorkspaceError> {
    Ok(match h {
        Some(h) => Some(ws.blobs().get(h)?),
        None => None,
    })
}

/// The agent's undo over the user's file: a merge preferring the agent's
/// before side for text, else the before state itself.
fn apply_agent_target(
    ws: &Workspace,
    c: &ConflictRecord,
    obs: &writeback::Observed,
) -> Result<(PathState, Vec<u8>), WorkspaceError> {
    let Some(base_hash) = c.base_ref else {
        return Ok((PathState::absent(), Vec::new()));
    };
    let base = ws.blobs().get(&base_hash)?;
    let agent = blob_or_empty(ws, &c.agent_ref)?;
    let text_kinds = obs.state.mode.as_deref() != Some(crate::record::SYMLINK_MODE)
        && c.base_mode.as_deref() != Some(crate::record::SYMLINK_MODE)
        && c.agent_mode.as_deref() != Some(crate::record::SYMLINK_MODE);
    if let (Some(agent), Some(cur), true) =
        (&agent, &obs.bytes, text_kinds && c.agent_ref.is_some())
        && let Ok(Some(out)) = merge::undo_patch_preferring_before(&base, agent, cur)
    {
        let to = rollback::file_state(
            Some(ContentHash::of(&out)),
            c.base_mode.as_deref(),
            obs.state.perm,
        );
        return Ok((to, out));
    }
    let to = rollback::file_state(Some(base_hash), c.base_mode.as_deref(), obs.state.perm);
    Ok((to, base))
}

/// The three-way merge with markers, for the user to finish by hand.
fn markers_target(
    ws: &Workspace,
    c: &ConflictRecord,
    obs: &writeback::Observed,
) -> Result<(PathState, Vec<u8>), WorkspaceError> {
    let cannot = |why: &str| {
        not_applicable(format!(
            "cannot write conflict markers into `{}`: {why}; use --keep-user or --apply-agent",
            c.path
        ))
    };
    let (Some(base), Some(agent), Some(cur)) = (
        blob_or_empty(ws, &c.base_ref)?,
        blob_or_empty(ws, &c.agent_ref)?,
        obs.bytes.clone(),
    ) else {
        return Err(cannot("one side is absent or too large"));
    };
    let out = match three_way_merge(&base, &agent, &cur) {
        Ok(MergeOutcome::Conflict {
            merged_with_markers,
            ..
        }) => merged_with_markers,
        Ok(MergeOutcome::Clean(out)) => out,
        Ok(MergeOutcome::Binary) => return Err(cannot("it is binary")),
        Err(e) => return Err(cannot(&e.to_string())),
    };
    let to = rollback::file_state(
        Some(ContentHash::of(&out)),
        obs.state.mode.as_deref(),
        obs.state.perm,
    );
    Ok((to, out))
}

/// The merge shown by `ckpt show CONFLICT` and written by `--manual`: the
/// undo of the agent's change in the user's file, in diff3 style.
pub fn three_way_merge(
    base: &[u8],
    agent: &[u8],
    current: &[u8],
) -> Result<MergeOutcome, merge::MergeError> {
    merge::merge3(
        &MergeInput {
            ancestor: agent,
            ours: current,
            theirs: base,
        },
        &Labels {
            ours: "yours (now)",
            ancestor: "agent's version",
            theirs: "before the agent",
        },
    )
}

/// The three versions of a conflict (`None`: absent or not stored) and the
/// user's file as it is now.
#[derive(Debug, Clone)]
pub struct ThreeWay {
    /// Before the agent's change.
    pub base: Option<Vec<u8>>,
    /// What the agent left.
    pub agent: Option<Vec<u8>>,
    /// What was there when the conflict was raised.
    pub current: Option<Vec<u8>>,
}

/// Loads a conflict's three versions from the store.
pub fn three_way(ws: &Workspace, c: &ConflictRecord) -> ThreeWay {
    let get = |h: &Option<ContentHash>| h.and_then(|h| ws.blobs().get(&h).ok());
    ThreeWay {
        base: get(&c.base_ref),
        agent: get(&c.agent_ref),
        current: get(&c.current_ref),
    }
}

fn has_markers(b: &[u8]) -> bool {
    let mut open = false;
    for line in b.split(|&x| x == b'\n') {
        if line.starts_with(b"<<<<<<<") {
            open = true;
        } else if open && line.starts_with(b">>>>>>>") {
            return true;
        }
    }
    false
}

/// The word for a resolution.
pub fn resolution_str(r: Resolution) -> &'static str {
    match r {
        Resolution::Pending => "pending",
        Resolution::KeepUser => "keep_user",
        Resolution::ApplyAgent => "apply_agent",
        Resolution::ManualMerge => "manual_merge",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_found_only_as_a_pair_at_line_starts() {
        assert!(has_markers(
            b"a\n<<<<<<< yours\nx\n=======\ny\n>>>>>>> before\n"
        ));
        assert!(!has_markers(b"a\n<<<<<<< only an opener\n"));
        assert!(!has_markers(b"a <<<<<<< x\n>>>>>>> y\n"));
    }
}
