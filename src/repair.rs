//! `ckpt repair`: the way out of a damaged history (issue 21). Keeps every
//! record that is whole, stands a `repair` record in for each one lost, moves
//! damaged bytes aside (never deletes them), and leaves a ledger that
//! verifies, so rollback and recover work again for everything whose
//! evidence is intact.
//!
//! In order, each step safe to cut short (a second run finds the same
//! answer, [`crate::ledger::rebuild`] being deterministic):
//! 1. the whole old ledger is copied to `damaged/ledger-<hash>.jsonl`;
//! 2. checkpoints anchored to a rewritten record get that record's new hash
//!    (their old files copied to `damaged/checkpoints/` first);
//! 3. the rebuilt ledger replaces the old one (temporary file, rename);
//! 4. damaged blobs go to `damaged/blobs/` (a damaged chunk list of a big
//!    content to `damaged/chunks/`);
//! 5. the mark that stopped writers goes, and a `repair` record says what
//!    was done.

use std::os::fd::AsFd;

use serde::Serialize;

use crate::checkpoint;
use crate::durable::Keep;
use crate::fs_util;
use crate::ledger::{self, Head, HeadState};
use crate::record::{Body, Draft, Repair};
use crate::workspace::{Workspace, WorkspaceError};

/// The directory in `.agent-runtime/` damaged bytes are moved to.
pub const DAMAGED_DIR: &str = "damaged";

/// What a repair found and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RepairReport {
    /// Whether anything needed repairing.
    pub needed: bool,
    /// Whether it was done (false for `--dry-run`, or nothing needed).
    pub done: bool,
    /// Records kept.
    pub kept: u64,
    /// Seqs whose records were lost (a `repair` record stands in for each).
    pub lost: Vec<u64>,
    /// Bytes of the old ledger in no kept record.
    pub set_aside_bytes: u64,
    /// The first seq rewritten to chain on.
    pub rechained_from: Option<u64>,
    /// Checkpoints re-anchored.
    pub checkpoints: Vec<String>,
    /// Blobs moved aside (damaged).
    pub blobs: Vec<String>,
    /// Where the old ledger is kept (`.agent-runtime/…`).
    pub backup: Option<String>,
    /// Why the ledger was marked damaged, if it was.
    pub marked: Option<String>,
    /// What still needs a person after the repair (from `verify`).
    pub remaining: Vec<String>,
    /// The seq up to which `ckpt gc` had cut the ledger, when `ledger.base`
    /// had lost that cut and it was recorded again from the gc's record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_restored: Option<u64>,
    /// Cuts `ledger.base` named that no gc record planned (written by
    /// hand), taken out of it: the records they hid read as lost.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub base_dropped: Vec<u64>,
}

fn io(op: &'static str, what: &str, e: std::io::Error) -> WorkspaceError {
    fs_util::FsError::new(op, format!(".agent-runtime/{what}"), e).into()
}

impl Workspace {
    /// Repairs the ledger and what hangs on it; with `dry_run`, only says
    /// what it would do.
    pub fn repair(&self, dry_run: bool) -> Result<RepairReport, WorkspaceError> {
        let rt = self.runtime_dir();
        let mut lock = self.ledger().lock_for_repair()?;
        let bytes = {
            let mut f = fs_util::open_regular_at(rt.as_fd(), ledger::LEDGER_FILE.as_ref())
                .map_err(|e| io("open", ledger::LEDGER_FILE, e))?;
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut b)
                .map_err(|e| io("read", ledger::LEDGER_FILE, e))?;
            b
        };
        let head_state = ledger::head_state(rt.as_fd());
        let head: Option<Head> = match &head_state {
            HeadState::At(h) => Some(h.clone()),
            _ => None,
        };
        let digest = crate::ContentHash::of(&bytes).hex();
        let backup = format!("{DAMAGED_DIR}/ledger-{}.jsonl", &digest[..16]);
        // A ledger `ckpt gc` shortened is rebuilt from its cut.
        let (start, lost_base, unplanned) = ledger::rebuild_start(rt.as_fd(), &bytes);
        let rebuilt = ledger::rebuild(&bytes, &start, head.as_ref(), &backup)?;
        let mut report = RepairReport {
            kept: rebuilt.kept,
            lost: rebuilt.lost.clone(),
            set_aside_bytes: rebuilt.set_aside,
            rechained_from: rebuilt.rechained_from,
            marked: ledger::damaged_mark(rt.as_fd()),
            ..RepairReport::default()
        };
        // Checkpoints whose anchor is not the record the new ledger has at
        // their seq (rewritten, or an anchor that disagreed already).
        let mut reanchor = Vec::new();
        for id in checkpoint::list_files(rt).unwrap_or_default() {
            let Ok(f) = checkpoint::read(rt, &id) else {
                continue;
            };
            if f.upto_seq == 0 {
                continue;
            }
            if let Some(h) = rebuilt.hashes.get(&f.upto_seq)
                && f.upto_hash.as_deref() != Some(h.as_str())
            {
                reanchor.push((f, h.clone()));
            }
        }
        report.checkpoints = reanchor.iter().map(|(f, _)| f.checkpoint.clone()).collect();
        let head_missing = head_state == HeadState::Absent && rebuilt.tail.seq > 0;
        report.base_restored = lost_base.as_ref().map(|c| c.seq);
        report.base_dropped = unplanned.iter().map(|c| c.seq).collect();
        report.needed = rebuilt.changed
            || !reanchor.is_empty()
            || head_missing
            || report.marked.is_some()
            || lost_base.is_some()
            || !unplanned.is_empty();
        if rebuilt.changed {
            report.backup = Some(backup.clone());
        }
        if dry_run {
            drop(lock);
            report.blobs = self.damaged_blobs(false)?;
            report.needed |= !report.blobs.is_empty();
            return Ok(report);
        }
        if !report.needed {
            // The ledger is whole: only damaged blobs may be left to move.
            lock.set_tail(rebuilt.tail.clone());
            report.blobs = self.damaged_blobs(true)?;
            report.needed = !report.blobs.is_empty();
            if report.needed {
                lock.append(&[summary(&report, &backup)])?;
                drop(lock);
                report.done = true;
                report.remaining = self.remaining()?;
            }
            return Ok(report);
        }
        let d = self.durable();
        let damaged = fs_util::open_or_create_private_dir(rt.as_fd(), DAMAGED_DIR, d)
            .map_err(|e| io("create", DAMAGED_DIR, e))?
            .0;
        // 1. The old ledger, whole.
        if rebuilt.changed {
            let name = backup.trim_start_matches("damaged/");
            match fs_util::write_atomic(
                damaged.as_fd(),
                name.as_ref(),
                &bytes,
                0o600,
                true,
                Keep::Named(d),
            ) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("write", &backup, e)),
            }
        }
        // 2. Checkpoints re-anchored, their old files kept.
        if !reanchor.is_empty() {
            let old = fs_util::open_or_create_private_dir(damaged.as_fd(), "checkpoints", d)
                .map_err(|e| io("create", "damaged/checkpoints", e))?
                .0;
            for (f, hash) in &reanchor {
                let name = checkpoint::file_name(&f.checkpoint);
                let kept = serde_json::to_vec_pretty(f).unwrap_or_default();
                match fs_util::write_atomic(
                    old.as_fd(),
                    name.as_ref(),
                    &kept,
                    0o600,
                    true,
                    Keep::Named(d),
                ) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io("write", &format!("damaged/checkpoints/{name}"), e)),
                }
                let mut new = f.clone();
                new.upto_hash = Some(hash.clone());
                // The old file's copy is durable before it is replaced.
                self.sync_all()?;
                checkpoint::rewrite(rt, d, &new).map_err(|e| {
                    WorkspaceError::Damaged(format!("cannot re-anchor {}: {e}", f.checkpoint))
                })?;
            }
        }
        // The old ledger's copy is durable before the ledger is replaced.
        self.sync_all()?;
        crate::failpoint::hit("repair.before_replace")
            .map_err(|e| io("repair", ledger::LEDGER_FILE, e))?;
        // The cut gc made, recorded again, and cuts no gc planned taken
        // out (the old `ledger.base` kept in damaged/).
        if lost_base.is_some() || !unplanned.is_empty() {
            let read = ledger::read_cuts(rt.as_fd());
            if (read.is_err() || !unplanned.is_empty())
                && let Ok((mut f, size)) =
                    fs_util::open_regular_at_sized(rt.as_fd(), ledger::BASE_FILE.as_ref())
                && let Ok(old) = fs_util::read_to_end_sized(&mut f, size)
            {
                let name = format!("ledger.base-{}", &crate::ContentHash::of(&old).hex()[..16]);
                let _ = fs_util::write_atomic(
                    damaged.as_fd(),
                    name.as_ref(),
                    &old,
                    0o600,
                    true,
                    Keep::Named(d),
                );
            }
            let mut cuts = read.unwrap_or_default();
            cuts.retain(|c| !unplanned.contains(c));
            cuts.extend(lost_base.clone());
            ledger::write_cuts(rt.as_fd(), d, cuts)?;
        }
        // 3. The rebuilt ledger (or, unchanged, a head anchor again).
        if rebuilt.changed || head_missing {
            lock.replace_all(&rebuilt.bytes, rebuilt.tail.clone())?;
        } else {
            lock.set_tail(rebuilt.tail.clone());
        }
        // 4. Blobs the kept records name that are damaged.
        ledger::clear_damaged(rt.as_fd()).map_err(|e| io("remove", ledger::DAMAGED_FILE, e))?;
        report.blobs = self.damaged_blobs(true)?;
        // 5. Writers may go on; the repair is recorded (through this lock:
        // a check that finds more to do marks the ledger again meanwhile).
        lock.append(&[summary(&report, &backup)])?;
        drop(lock);
        ledger::clear_damaged(rt.as_fd()).map_err(|e| io("remove", ledger::DAMAGED_FILE, e))?;
        report.done = true;
        report.remaining = self.remaining()?;
        Ok(report)
    }

    /// What `verify` still finds wrong.
    fn remaining(&self) -> Result<Vec<String>, WorkspaceError> {
        Ok(self
            .verify()?
            .problems
            .into_iter()
            .map(|p| p.problem)
            .collect())
    }

    /// The blobs `verify` finds damaged, moved to `damaged/blobs/` when
    /// `move_them` (their names, `artifacts/blobs/…`).
    fn damaged_blobs(&self, move_them: bool) -> Result<Vec<String>, WorkspaceError> {
        let rt = self.runtime_dir();
        let mut out = Vec::new();
        for p in self.verify()?.problems {
            let Some(path) = p.path.filter(|p| {
                p.starts_with("artifacts/blobs/") || p.starts_with("artifacts/chunks/")
            }) else {
                continue;
            };
            // A chunk manifest goes to `damaged/chunks/`, a blob to `damaged/blobs/`.
            let (sub, prefix) = if path.starts_with("artifacts/chunks/") {
                ("chunks", "artifacts/chunks/")
            } else {
                ("blobs", "artifacts/blobs/")
            };
            let exists = fs_util::entry_at(rt.as_fd(), path.as_ref())
                .is_ok_and(|e| e != fs_util::EntryKind::Absent);
            if !exists {
                continue;
            }
            if move_them {
                let d = self.durable();
                let dir = fs_util::open_or_create_private_dir(rt.as_fd(), DAMAGED_DIR, d)
                    .map_err(|e| io("create", DAMAGED_DIR, e))?
                    .0;
                let aside = format!("damaged/{sub}");
                let blobs = fs_util::open_or_create_private_dir(dir.as_fd(), sub, d)
                    .map_err(|e| io("create", &aside, e))?
                    .0;
                let name = path.trim_start_matches(prefix).replace('/', "");
                rustix::fs::renameat(rt.as_fd(), path.as_str(), blobs.as_fd(), name.as_str())
                    .map_err(|e| io("move aside", &path, e.into()))?;
                d.dir_now(&blobs)
                    .and_then(|()| d.dir_now(rt.as_fd()))
                    .map_err(|e| io("sync", &aside, e))?;
            }
            out.push(path);
        }
        Ok(out)
    }
}

fn summary(report: &RepairReport, backup: &str) -> Draft {
    Draft::new(Body::Repair(Repair {
        dropped_bytes: report.set_aside_bytes,
        backup: if report.backup.is_some() {
            backup.to_string()
        } else {
            String::new()
        },
        lost: report.lost.clone(),
        rechained_from: report.rechained_from,
        checkpoints: report.checkpoints.clone(),
        blobs: report.blobs.clone(),
        why: report.marked.clone(),
    }))
}
