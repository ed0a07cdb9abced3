//! What every action (rollback, resolve, restore-session, settle,
//! compensate) shares: the lock that keeps two of them from interleaving, and
//! the `conflicts/<id>.json` files they leave for the user. Its own module so
//! that `rollback` and `conflict` (which runs rollback plans) both depend on
//! it and not on each other.

use std::os::fd::AsFd;

use serde_json::{Value, json};

use crate::durable::Keep;
use crate::fs_util::{self, FsError};
use crate::hash::ContentHash;
use crate::record::{ActionRecord, ActionStatus, ActionType, Body, ConflictRecord, Draft};
use crate::workspace::{Workspace, WorkspaceError};

/// Holds `state/action.lock` while an action plans and runs, so two rollbacks
/// (or a rollback and a resolve) never interleave.
pub(crate) struct ActionLock {
    _file: std::fs::File,
}

impl ActionLock {
    pub(crate) fn take(ws: &Workspace) -> Result<ActionLock, WorkspaceError> {
        let dir = ws.state_dir()?;
        let f = fs_util::lock_exclusive(
            dir.as_fd(),
            "action.lock",
            ".agent-runtime/state/action.lock",
        )?;
        Ok(ActionLock { _file: f })
    }
}

/// Writes `conflicts/<id>.json`: the record plus where its three contents are.
pub(crate) fn write_conflict_file(
    ws: &Workspace,
    c: &ConflictRecord,
) -> Result<(), WorkspaceError> {
    let (dir, _) =
        fs_util::open_or_create_private_dir(ws.runtime_dir().as_fd(), "conflicts", ws.durable())
            .map_err(|e| FsError::new("open", ".agent-runtime/conflicts", e))?;
    // A big content stored as chunks is named by its manifest (`ckpt
    // resolve` and `ckpt conflicts` read it whole).
    let blob = |h: &Option<ContentHash>| h.map(|h| ws.blobs().path_of(&h));
    let doc = json!({
        "conflict": c,
        "blobs": {"base": blob(&c.base_ref), "agent": blob(&c.agent_ref), "current": blob(&c.current_ref)},
    });
    let bytes = serde_json::to_vec_pretty(&doc)
        .map_err(|e| FsError::new("write", &c.conflict, e.into()))?;
    let name = format!("{}.json", c.conflict);
    fs_util::write_atomic(
        dir.as_fd(),
        name.as_ref(),
        &bytes,
        0o600,
        false,
        Keep::Named(ws.durable()),
    )
    .map_err(|e| FsError::new("write", format!(".agent-runtime/conflicts/{name}"), e).into())
}

/// Removes `conflicts/<id>.json` once its conflict is settled (best effort:
/// the ledger, not the file, says whether a conflict is open).
pub(crate) fn remove_conflict_file(ws: &Workspace, id: &str) {
    if let Ok(dir) = fs_util::open_dir(ws.runtime_dir().as_fd(), "conflicts") {
        let _ = rustix::fs::unlinkat(
            &dir,
            format!("{id}.json").as_str(),
            rustix::fs::AtFlags::empty(),
        );
        let _ = ws.durable().content_dir(&dir);
    }
}

/// Appends one step of action `action` (its `started` plan, or its end).
pub(crate) fn append(
    ws: &Workspace,
    action_type: ActionType,
    action: &str,
    status: ActionStatus,
    target: Value,
    plan: Option<Value>,
    outcome: Option<Value>,
) -> Result<(), WorkspaceError> {
    ws.ledger()
        .lock()?
        .append(&[Draft::new(Body::Action(ActionRecord {
            action: action.to_string(),
            action_type,
            status,
            target,
            plan,
            outcome,
        }))])?;
    Ok(())
}
