//! What `ckpt gc` may have removed, as a rule on the ledger (see
//! [`crate::gc`]): the horizon a recorded gc used, and what must stay
//! whatever it is. Read by `gc` itself, by `verify` (collected by design or
//! lost), by `rollback` (refused by name) and by `show` and `status`. Pure
//! functions of the records, but for [`collected_patch`]'s look in the store.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::Value;

use crate::hash::ContentHash;
use crate::paths::RelPath;
use crate::record::{Body, PatchSource, Record, Resolution};
use crate::workspace::Workspace;

/// What must stay: contents, patch ids and call/action ids (outputs).
#[derive(Debug, Default)]
pub(crate) struct Needed {
    pub hashes: HashSet<ContentHash>,
    pub patches: HashSet<String>,
    pub ids: HashSet<String>,
}

/// The newest horizon any recorded gc used (0: none ran).
pub fn horizon(records: &[Record]) -> u64 {
    records
        .iter()
        .filter_map(|r| match &r.body {
            Body::Action(a) if a.action_type == crate::record::ActionType::Gc => a
                .plan
                .as_ref()
                .and_then(|p| p.get("horizon_seq"))
                .and_then(Value::as_u64),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// Every `sha256:` content hash in a JSON value (an action's plan).
fn hashes_in(v: &Value, out: &mut HashSet<ContentHash>) {
    match v {
        Value::String(s) if s.starts_with("sha256:") => {
            if let Ok(h) = s.parse() {
                out.insert(h);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| hashes_in(x, out)),
        Value::Object(m) => m.values().for_each(|x| hashes_in(x, out)),
        _ => {}
    }
}

fn record_needs(r: &Record, n: &mut Needed) {
    match &r.body {
        Body::FilePatch(p) => {
            n.hashes.extend(p.before_hash);
            n.hashes.extend(p.after_hash);
            n.patches.insert(p.patch.clone());
            n.ids.insert(p.call.clone());
        }
        Body::UserEdit(u) => {
            n.hashes.extend(u.before_hash);
            n.hashes.extend(u.after_hash);
        }
        Body::Conflict(c) => {
            n.hashes.extend(c.base_ref);
            n.hashes.extend(c.agent_ref);
            n.hashes.extend(c.current_ref);
            n.patches
                .extend(c.agent_patch_ref.as_deref().and_then(patch_id));
            n.patches.extend(c.patches.iter().cloned());
        }
        Body::Action(a) => {
            a.plan.iter().for_each(|p| hashes_in(p, &mut n.hashes));
            a.outcome.iter().for_each(|p| hashes_in(p, &mut n.hashes));
            n.ids.insert(a.action.clone());
        }
        Body::ToolCall(c) => {
            n.ids.insert(c.call.clone());
        }
        _ => {}
    }
}

fn patch_id(r: &str) -> Option<String> {
    r.strip_prefix("artifacts/patches/")?
        .strip_suffix(".diff")
        .map(str::to_string)
}

/// What the ledger's records need kept, with `horizon` and the cutoff of
/// the user's stored versions (ms since the epoch): see the module doc.
/// (Snapshots and the grace period are added by the caller.)
pub(crate) fn needed(records: &[Record], horizon: u64, backup_cutoff_ms: u64) -> Needed {
    let mut n = Needed::default();
    let open_calls = crate::open::calls_in_doubt(records);
    let open_actions: HashSet<String> = crate::open::unfinished_actions(records)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let pending: HashSet<String> = crate::open::conflicts(records)
        .into_iter()
        .filter(|c| c.resolution == Resolution::Pending)
        .map(|c| c.conflict)
        .collect();
    // The last content the ledger knows of each path.
    let mut last: HashMap<&RelPath, Option<ContentHash>> = HashMap::new();
    for r in records {
        let young = || crate::ids::parse_rfc3339(&r.ts).is_some_and(|t| t >= backup_cutoff_ms);
        match &r.body {
            Body::FilePatch(p) => {
                if let Some(f) = &p.from_path {
                    last.insert(f, None);
                }
                last.insert(&p.path, p.after_hash);
            }
            Body::UserEdit(u) => {
                last.insert(&u.path, u.after_hash);
            }
            _ => {}
        }
        if r.seq > horizon {
            record_needs(r, &mut n);
            continue;
        }
        let open = match &r.body {
            Body::FilePatch(p) => open_calls.contains(&p.call) || open_actions.contains(&p.call),
            Body::ToolCall(c) => open_calls.contains(&c.call),
            Body::Action(a) => open_actions.contains(&a.action),
            Body::Conflict(c) => pending.contains(&c.conflict),
            _ => false,
        };
        if open {
            record_needs(r, &mut n);
            continue;
        }
        // The user's versions that rollbacks and resolves stored.
        match &r.body {
            Body::FilePatch(p) if p.source == PatchSource::Rollback && young() => {
                n.hashes.extend(p.before_hash);
            }
            Body::Conflict(c) if young() => n.hashes.extend(c.current_ref),
            _ => {}
        }
    }
    n.hashes.extend(last.into_values().flatten());
    n
}

/// The patches of `picked` whose contents were collected (at or before a
/// recorded horizon, a side missing from the store): a rollback cannot
/// undo them. Returns the first such patch's call and the horizon.
pub(crate) fn collected_patch<'p>(
    ws: &Workspace,
    records: &[Record],
    seq_of: &dyn Fn(&str) -> u64,
    picked: impl IntoIterator<Item = &'p crate::record::FilePatch>,
) -> Option<(&'p crate::record::FilePatch, u64)> {
    let h = horizon(records);
    if h == 0 {
        return None;
    }
    picked
        .into_iter()
        .find(|p| {
            seq_of(&p.patch) <= h
                && [p.before_hash, p.after_hash]
                    .iter()
                    .flatten()
                    .any(|x| !ws.blobs().contains(x))
        })
        .map(|p| (p, h))
}

/// The error for an id the ledger does not hold, its first record being
/// `first_seq`: when `ckpt gc` took the oldest records out, the id may have
/// been among them.
pub fn unknown_id(first_seq: u64, id: &str) -> crate::WorkspaceError {
    match first_seq {
        s if s > 1 => crate::WorkspaceError::Collected(format!(
            "`{id}` is not in the ledger: it is no id of this workspace, or `ckpt gc` took it out with the history up to seq {} (what is older than the checkpoints gc keeps can no longer be rolled back to or shown); run `ckpt log` to see what is kept",
            s - 1
        )),
        _ => crate::WorkspaceError::UnknownId(id.to_string()),
    }
}

/// Checkpoint ids a rollback can no longer reach (older than a recorded
/// horizon), for messages.
pub(crate) fn collected_checkpoints(records: &[Record]) -> BTreeSet<String> {
    let h = horizon(records);
    records
        .iter()
        .filter_map(|r| match &r.body {
            Body::Checkpoint(c) if c.upto_seq < h => Some(c.checkpoint.clone()),
            _ => None,
        })
        .collect()
}
