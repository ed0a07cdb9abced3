//! What the ledger says is still open: conflicts not settled, calls in
//! doubt, actions with no end. Pure functions of the records, below every
//! module that acts on them (`recover`, `conflict`, `gc`, `verify`).

use std::collections::{HashMap, HashSet};

use crate::record::{ActionStatus, ActionType, Body, CallStatus, ConflictRecord, Record};

/// Every conflict in its latest state, in the order they were raised.
pub fn conflicts(records: &[Record]) -> Vec<ConflictRecord> {
    let mut out: Vec<ConflictRecord> = Vec::new();
    for r in records {
        if let Body::Conflict(c) = &r.body {
            match out.iter_mut().find(|x| x.conflict == c.conflict) {
                Some(x) => *x = c.clone(),
                None => out.push(c.clone()),
            }
        }
    }
    out
}

/// Actions with a `started` record and no end, oldest first.
pub fn unfinished_actions(records: &[Record]) -> Vec<(String, ActionType)> {
    let mut open: Vec<(String, ActionType)> = Vec::new();
    for r in records {
        if let Body::Action(a) = &r.body {
            match a.status {
                ActionStatus::Started => open.push((a.action.clone(), a.action_type)),
                _ => open.retain(|(id, _)| *id != a.action),
            }
        }
    }
    open
}

/// The calls in doubt by their last `tool_call` record: started (or only
/// planned) and never ended, or ended by ckpt with the outcome unknown.
pub fn calls_in_doubt(records: &[Record]) -> HashSet<String> {
    let mut last: HashMap<&str, (CallStatus, bool)> = HashMap::new();
    for r in records {
        if let Body::ToolCall(c) = &r.body {
            last.insert(&c.call, (c.status, c.outcome_unknown));
        }
    }
    last.into_iter()
        .filter(|(_, (status, unknown))| match status {
            CallStatus::Succeeded => false,
            CallStatus::Failed => *unknown,
            _ => true,
        })
        .map(|(id, _)| id.to_string())
        .collect()
}
