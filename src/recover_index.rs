//! Where `ckpt recover` can start reading (issue 24): `index/recover.json`,
//! a cache of the ledger position before which no record can change its
//! report. A long history is then read from that position on, not whole.
//!
//! The report depends on: every call not plainly ended (in doubt,
//! pending), every call whose last record follows the last checkpoint,
//! the last checkpoint itself, pending conflicts and unfinished actions.
//! The cut is the first record of any of these, moved back until
//! no call has records on both sides of it; the calls wholly before it are
//! counted (`calls_before`, for the report's total). The cache names the
//! record just before the cut by seq, hash and end offset, and a read
//! starts there only when the ledger still holds that record there, the
//! records after it chain to it and agree with `ledger.head`
//! ([`crate::ledger::Ledger::read_after`]).
//!
//! Recover reads everything instead (and rewrites the cache) when the cache
//! is missing, unreadable or stale, when an action is unfinished (finishing
//! a rollback replays the whole history), or when a call read from the cut
//! on has no start (its start may lie before the cut: a `recover --settle`
//! of an old call). Damage before the cut is not seen by the short read;
//! `ckpt verify` checks the whole chain.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::ledger::{LedgerRead, Tail};
use crate::open::unfinished_actions;
use crate::record::{Body, CallStatus, Record, Resolution};
use crate::workspace::{Workspace, WorkspaceError};

const FILE: &str = "recover.json";

/// The cache's contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cached {
    v: u32,
    /// The record just before the cut (seq 0, no hash, end 0: the start).
    seq: u64,
    hash: Option<String>,
    end: u64,
    /// Calls whose records all lie before the cut.
    calls_before: u64,
    /// A hash of the fields above: a count changed on disk is not trusted.
    check: String,
}

impl Cached {
    fn new(from: &Tail, calls_before: u64) -> Cached {
        let mut c = Cached {
            v: 1,
            seq: from.seq,
            hash: from.hash.clone(),
            end: from.end,
            calls_before,
            check: String::new(),
        };
        c.check = c.digest();
        c
    }

    fn digest(&self) -> String {
        let text = format!(
            "{}/{}/{:?}/{}/{}",
            self.v, self.seq, self.hash, self.end, self.calls_before
        );
        crate::hash::ContentHash::of(text.as_bytes()).hex()
    }
}

/// A read of the ledger for `recover`: every record from a cut on, and
/// where the cut is.
pub(crate) struct Suffix {
    pub read: LedgerRead,
    /// The end offset of each record of `read`.
    pub ends: Vec<u64>,
    /// The record before the first of `read` (the start: default).
    pub from: Tail,
    /// Calls whose records all lie before `from`.
    pub calls_before: u64,
}

impl Suffix {
    /// The whole ledger.
    fn whole(ws: &Workspace) -> Result<Suffix, WorkspaceError> {
        let (read, ends) = ws.ledger().read_with_ends()?;
        // Damage seen here stops every writer until `ckpt repair`.
        ws.ledger().note_damage(&read);
        Ok(Suffix {
            read,
            ends,
            from: Tail::default(),
            calls_before: 0,
        })
    }

    /// The records `recover` needs: from the cached cut when that is
    /// usable, else everything.
    pub fn read(ws: &Workspace) -> Result<Suffix, WorkspaceError> {
        if let Some(s) = Self::from_cache(ws)? {
            return Ok(s);
        }
        Self::whole(ws)
    }

    /// The same cut read again (records were appended since): everything
    /// when it no longer holds.
    pub fn reread(&self, ws: &Workspace) -> Result<Suffix, WorkspaceError> {
        if self.from != Tail::default()
            && let Some(s) = Self::after(ws, &self.from, self.calls_before)?
        {
            return Ok(s);
        }
        Self::whole(ws)
    }

    fn from_cache(ws: &Workspace) -> Result<Option<Suffix>, WorkspaceError> {
        let Some(c) = load(ws) else {
            return Ok(None);
        };
        let from = Tail {
            seq: c.seq,
            hash: c.hash,
            end: c.end,
        };
        Self::after(ws, &from, c.calls_before)
    }

    fn after(
        ws: &Workspace,
        from: &Tail,
        calls_before: u64,
    ) -> Result<Option<Suffix>, WorkspaceError> {
        let Some((read, ends)) = ws.ledger().read_after(from)? else {
            return Ok(None);
        };
        if !unfinished_actions(&read.records).is_empty() || !calls_start_here(&read.records) {
            return Ok(None);
        }
        Ok(Some(Suffix {
            read,
            ends,
            from: from.clone(),
            calls_before,
        }))
    }

    /// Writes the cut for the next `recover`, computed from these records
    /// (a cache: never synced, a failure costs only the next long read).
    pub fn save_next(&self, ws: &Workspace) {
        let c = next_cut(
            &self.read.records,
            &self.ends,
            &self.from,
            self.calls_before,
        );
        let Ok(text) = serde_json::to_vec(&c) else {
            return;
        };
        ws.write_index_file(FILE, &text);
    }
}

fn load(ws: &Workspace) -> Option<Cached> {
    let bytes = ws.read_index_file(FILE, 4096)?;
    serde_json::from_slice::<Cached>(&bytes)
        .ok()
        .filter(|c| c.v == 1 && c.check == c.digest())
}

/// Whether every call of `records` begins there: its first record here is
/// its start (planned, approved, started, or a read-only call's single
/// record). A call seen only by a later record may have started before.
fn calls_start_here(records: &[Record]) -> bool {
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for r in records {
        if let Body::ToolCall(c) = &r.body
            && seen.insert(&c.call)
            && !(c.step == 1
                || matches!(
                    c.status,
                    CallStatus::Planned | CallStatus::Approved | CallStatus::Started
                ))
        {
            return false;
        }
    }
    true
}

/// The cut for `records` (read after `from`, `calls_before` calls wholly
/// before it): see the module doc.
fn next_cut(records: &[Record], ends: &[u64], from: &Tail, calls_before: u64) -> Cached {
    // Per call: its first and last record (indexes), its last status.
    let mut calls: HashMap<&str, (usize, usize, CallStatus)> = HashMap::new();
    let mut conflicts: HashMap<&str, (usize, Resolution)> = HashMap::new();
    let mut actions: HashMap<&str, usize> = HashMap::new();
    let mut last_checkpoint = None;
    for (i, r) in records.iter().enumerate() {
        match &r.body {
            Body::ToolCall(c) => {
                let status = if c.outcome_unknown {
                    CallStatus::Started
                } else {
                    c.status
                };
                let e = calls.entry(&c.call).or_insert((i, i, status));
                e.1 = i;
                e.2 = status;
            }
            Body::Conflict(c) => {
                conflicts.entry(&c.conflict).or_insert((i, c.resolution)).1 = c.resolution;
            }
            Body::Action(a) => {
                actions.entry(&a.action).or_insert(i);
            }
            Body::Checkpoint(_) => last_checkpoint = Some(i),
            _ => {}
        }
    }
    let mut cut = last_checkpoint.unwrap_or(0);
    for &(first, last, status) in calls.values() {
        let ended = matches!(status, CallStatus::Succeeded | CallStatus::Failed);
        if !ended || last_checkpoint.is_none_or(|c| last > c) {
            cut = cut.min(first);
        }
    }
    for &(first, res) in conflicts.values() {
        if res == Resolution::Pending {
            cut = cut.min(first);
        }
    }
    for (id, _) in unfinished_actions(records) {
        if let Some(&i) = actions.get(id.as_str()) {
            cut = cut.min(i);
        }
    }
    // No call on both sides of the cut.
    loop {
        let before = cut;
        for &(first, last, _) in calls.values() {
            if first < cut && last >= cut {
                cut = first;
            }
        }
        if cut == before {
            break;
        }
    }
    let wholly_before = calls.values().filter(|(first, _, _)| *first < cut).count() as u64;
    let from = match cut.checked_sub(1) {
        Some(i) => Tail {
            seq: records[i].seq,
            hash: Some(records[i].hash.clone()),
            end: ends[i],
        },
        None => from.clone(),
    };
    Cached::new(&from, calls_before + wholly_before)
}
