//! `ckpt gc`: removes the stored contents and artifacts that no kept
//! checkpoint needs.
//!
//! **What is kept.** The checkpoints kept are the `keep` newest and, with an
//! age, every one younger than it (without flags: `keep_checkpoints` and
//! `keep_days` of `config.toml`). The *horizon* is the position of the oldest
//! kept checkpoint, or of the last record older than the age if that comes
//! first: rolling back to a kept checkpoint undoes only records after it, so
//! every content a record after the horizon names stays, with its patch
//! artifact. Before the horizon, what stays is what something open or
//! current needs: a pending conflict's three contents and patch, every record
//! of a call in doubt or of an unfinished action, the user's versions that a
//! rollback or resolve stored (for `keep_days` whatever the flags), the last
//! content the ledger knows for every path (a later `user_edit` names it as
//! its before), and every content a snapshot of the tree names (a shell
//! call's before). A content stored or found again within the last hour
//! ([`GRACE_MS`]) is never removed: a hook may be about to name it (a found
//! copy has its mtime refreshed, as git freshens objects for `git prune`).
//!
//! **What goes.** Blobs no root names, patch artifacts and compensation
//! outputs of ids no root names; checkpoint files and ledger records stay
//! (checkpoint files anchor the ledger; records are the history). A run that
//! removes anything is an action (`type: "gc"`): its plan (the horizon and
//! the cutoff of user versions) is recorded before the first file goes, its
//! outcome after the last, so `verify` tells content collected by design (a
//! blob only records at or before a recorded horizon name) from content lost,
//! a crash in between is finished by `ckpt recover` (the plan again: removal
//! is idempotent), and a rollback that would need collected content says so.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};

use serde::Serialize;
use serde_json::{Value, json};

use crate::config::Config;
use crate::fs_util::{self, FsError};
use crate::hash::ContentHash;
use crate::ledger::Tail;
use crate::record::{ActionStatus, ActionType, Body, Record};
use crate::retention::{Needed, needed};
pub use crate::retention::{horizon, unknown_id};
use crate::workspace::{Workspace, WorkspaceError};

/// Contents stored or found this recently are never removed (ms).
pub const GRACE_MS: u64 = 60 * 60 * 1000;
const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// What to keep.
#[derive(Debug, Clone, Default)]
pub struct GcOptions {
    /// Keep the N newest checkpoints (default: `keep_checkpoints`).
    pub keep: Option<u64>,
    /// Keep every checkpoint and call younger than this (ms; default:
    /// `keep_days`).
    pub older_than_ms: Option<u64>,
    /// Plan and report; remove nothing.
    pub dry_run: bool,
}

/// Files and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counted {
    /// How many files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl Counted {
    fn add(&mut self, bytes: u64) {
        self.files += 1;
        self.bytes += bytes;
    }
}

/// What `gc` did (or, dry, would do).
#[derive(Debug, Clone, Serialize)]
pub struct GcReport {
    /// The action recorded; `None` on a dry run or when nothing went.
    pub action: Option<String>,
    /// Nothing was removed.
    pub dry_run: bool,
    /// Records at or before this seq may have lost their contents.
    pub horizon_seq: u64,
    /// Checkpoints a rollback can still go back to, oldest first.
    pub kept_checkpoints: Vec<String>,
    /// Checkpoints older than the horizon: no longer restorable.
    pub collected_checkpoints: Vec<String>,
    /// Blobs removed.
    pub blobs: Counted,
    /// Patch artifacts removed.
    pub patches: Counted,
    /// Compensation outputs removed.
    pub outputs: Counted,
    /// Blobs kept.
    pub kept_blobs: Counted,
    /// Records taken out of the ledger (the oldest, up to `ledger_cut_seq`).
    pub ledger_records: u64,
    /// Their bytes.
    pub ledger_bytes: u64,
    /// The last record taken out of the ledger, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger_cut_seq: Option<u64>,
    /// Checkpoint files removed with the records they anchor.
    pub checkpoint_files: u64,
    /// When something held the ledger's cut before the horizon: the seq
    /// the ledger keeps its records from, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger_held: Option<LedgerHeld>,
}

/// What keeps the ledger's older records in it (see [`GcReport`]).
#[derive(Debug, Clone, Serialize)]
pub struct LedgerHeld {
    /// The first record that stays because of it.
    pub from_seq: u64,
    /// Why, for the user.
    pub by: String,
}

impl GcReport {
    /// Bytes removed in all.
    pub fn bytes(&self) -> u64 {
        self.blobs.bytes + self.patches.bytes + self.outputs.bytes + self.ledger_bytes
    }
}

/// Where the ledger is cut: the last record to go, its hash and the byte
/// offset just after it.
#[derive(Debug, Clone)]
struct LedgerCut {
    seq: u64,
    hash: String,
    end: u64,
    records: u64,
}

/// The last record the live ledger can lose: at or before the horizon,
/// before every record naming a user version still kept (stored by a
/// rollback or a conflict after `backup_cutoff`), splitting no call,
/// action, conflict or session (restoring a session walks its entries from
/// the first), and before every record of anything open (a call in doubt,
/// an unfinished action, a pending conflict). `None` when nothing can go.
/// With it, what held the cut before the horizon, if anything did: the
/// seq the ledger keeps from and why, for the user.
fn cut_point(
    records: &[Record],
    horizon: u64,
    backup_cutoff: u64,
) -> (Option<u64>, Option<(u64, String)>) {
    let Some(first) = records.first().map(|r| r.seq) else {
        return (None, None);
    };
    let mut c = horizon;
    let mut held = None;
    // (The user versions kept for `keep_days` are named by these records.)
    if let Some(young) = records.iter().find(|r| {
        let backup = match &r.body {
            Body::FilePatch(p) => p.source == crate::record::PatchSource::Rollback,
            Body::Conflict(_) => true,
            _ => false,
        };
        backup && crate::ids::parse_rfc3339(&r.ts).is_none_or(|t| t >= backup_cutoff)
    }) && young.seq <= c
    {
        c = young.seq.saturating_sub(1);
        held = Some((
            young.seq,
            "a version of yours a rollback or conflict stored there is kept for `keep_days`"
                .to_string(),
        ));
    }
    if c < first {
        return (None, held);
    }
    const CALL: u8 = 0;
    const CONFLICT: u8 = 1;
    const SESSION: u8 = 2;
    let open: Vec<(u8, String)> = crate::open::calls_in_doubt(records)
        .into_iter()
        .map(|c| (CALL, c))
        .chain(
            crate::open::unfinished_actions(records)
                .into_iter()
                .map(|(a, _)| (CALL, a)),
        )
        .chain(
            crate::open::conflicts(records)
                .into_iter()
                .filter(|k| k.resolution == crate::record::Resolution::Pending)
                .map(|k| (CONFLICT, k.conflict)),
        )
        .collect();
    fn at<'a>(spans: &mut HashMap<(u8, &'a str), (u64, u64)>, key: (u8, &'a str), seq: u64) {
        let e = spans.entry(key).or_insert((seq, seq));
        e.1 = seq;
    }
    let mut spans: HashMap<(u8, &str), (u64, u64)> = HashMap::new();
    for r in records {
        match &r.body {
            Body::ToolCall(t) => at(&mut spans, (CALL, &t.call), r.seq),
            Body::FilePatch(p) => at(&mut spans, (CALL, &p.call), r.seq),
            Body::Action(a) => {
                at(&mut spans, (CALL, &a.action), r.seq);
                // A compensation belongs with the call it compensates.
                if let Some(call) = a.target.get("call").and_then(Value::as_str) {
                    at(&mut spans, (CALL, call), r.seq);
                }
            }
            Body::Conflict(k) => {
                at(&mut spans, (CONFLICT, &k.conflict), r.seq);
                at(&mut spans, (CALL, &k.action), r.seq);
            }
            Body::SessionEntry(_) => {
                if let Some(s) = &r.session {
                    at(&mut spans, (SESSION, s), r.seq);
                }
            }
            _ => {}
        }
    }
    for (kind, id) in &open {
        if let Some(s) = spans.get_mut(&(*kind, id.as_str())) {
            s.1 = u64::MAX;
        }
    }
    // Cutting after seq x splits a span (s, e) when s <= x < e: the bad
    // positions, merged, and the last good one at or before `c`.
    let mut bad: Vec<(u64, u64, (u8, &str))> = spans
        .iter()
        .filter(|(_, (s, e))| *s <= c && e > s)
        .map(|(k, &(s, e))| (s, e - 1, *k))
        .collect();
    bad.sort_unstable();
    // Each merged range with the span that reaches furthest in it.
    let mut merged: Vec<(u64, u64, (u8, &str))> = Vec::new();
    for (s, e, k) in bad {
        match merged.last_mut() {
            Some(last) if s <= last.1.saturating_add(1) => {
                if e > last.1 {
                    last.1 = e;
                    last.2 = k;
                }
            }
            _ => merged.push((s, e, k)),
        }
    }
    if let Some(&(s, e, (kind, id))) = merged.last()
        && s <= c
        && c <= e
    {
        c = s - 1;
        // (An open span ends at u64::MAX, its last bad position one before.)
        let open = e == u64::MAX - 1;
        let why = match (kind, open) {
            (CONFLICT, true) => format!("conflict {id} is open (`ckpt resolve`)"),
            (CONFLICT, false) => {
                format!("conflict {id} began before the horizon and was settled after it")
            }
            (SESSION, _) => format!("session {id} has entries on both sides of the horizon"),
            (_, true) => format!("{id} is in doubt or unfinished (`ckpt recover`)"),
            (_, false) => format!("{id} began before the horizon and ended after it"),
        };
        held = Some((s, why));
    }
    ((c >= first).then_some(c), held)
}

/// The cut this run makes, if any: at `point` ([`cut_point`]), when what goes is a
/// fifth of the ledger or more (each cut copies the rest of the ledger)
/// and is more than earlier gc runs' own records (else each gc would take
/// out the one before it, and a second gc would never find nothing to do).
fn ledger_cut(records: &[Record], ends: &[u64], point: Option<u64>) -> Option<LedgerCut> {
    let seq = point?;
    let i = usize::try_from(seq - records.first()?.seq).ok()?;
    let (r, end) = (records.get(i)?, *ends.get(i)?);
    let total = *ends.last()?;
    let only_gc = records[..=i]
        .iter()
        .all(|r| matches!(&r.body, Body::Action(a) if a.action_type == ActionType::Gc));
    (end >= total / 5 && !only_gc).then(|| LedgerCut {
        seq,
        hash: r.hash.clone(),
        end,
        records: i as u64 + 1,
    })
}

/// Takes the records up to `cut` out of the ledger (see
/// [`crate::ledger::LedgerLock::compact`]); `at`, where that record ends
/// and the last record read, is found by a read when not known. The
/// records kept are copied before the writer lock is taken, so hooks wait
/// only for what was appended since. Returns the bytes taken out (0 when
/// the ledger already starts after it).
fn cut_ledger(
    ws: &Workspace,
    cut: &crate::ledger::Cut,
    at: Option<(u64, Tail)>,
) -> Result<u64, WorkspaceError> {
    let (end, upto) = match at {
        Some(a) => a,
        None => {
            let (read, ends) = ws.ledger().read_with_ends()?;
            match read.records.iter().position(|r| r.seq == cut.seq) {
                Some(i) => (ends[i], read.tail),
                None => return Ok(0),
            }
        }
    };
    let pre = ws.ledger().precopy(end, &upto)?;
    crate::failpoint::hit("gc.after_precopy").map_err(|e| FsError::new("gc", "ledger.jsonl", e))?;
    let mut lock = ws.ledger().lock()?;
    crate::failpoint::hit("gc.before_cut").map_err(|e| FsError::new("gc", "ledger.jsonl", e))?;
    Ok(lock.compact(cut, end, pre)?)
}

/// Removes the files of the checkpoints whose record a cut up to
/// `cut_seq` took (`upto_seq` below it: the record follows its file's
/// position): nothing can roll back to them, and what they anchor is gone.
fn drop_checkpoint_files(ws: &Workspace, cut_seq: u64) -> Result<u64, WorkspaceError> {
    let rt = ws.runtime_dir();
    let ids = crate::checkpoint::list_files(rt)
        .map_err(|e| FsError::new("list", ".agent-runtime/checkpoints", e))?;
    let Some(dir) = open_sub(rt, crate::checkpoint::CHECKPOINTS_DIR)
        .map_err(|e| FsError::new("open", ".agent-runtime/checkpoints", e))?
    else {
        return Ok(0);
    };
    let mut n = 0;
    for id in ids {
        if crate::checkpoint::read(rt, &id).is_ok_and(|f| f.upto_seq < cut_seq) {
            let name = crate::checkpoint::file_name(&id);
            match rustix::fs::unlinkat(&dir, name.as_str(), rustix::fs::AtFlags::empty()) {
                Ok(()) => n += 1,
                Err(rustix::io::Errno::NOENT) => {}
                Err(e) => {
                    return Err(FsError::new(
                        "remove",
                        format!(".agent-runtime/checkpoints/{name}"),
                        e.into(),
                    )
                    .into());
                }
            }
        }
    }
    Ok(n)
}

/// Parses `30d`, `12h`, `90m`, `45s`, `2w` into milliseconds.
pub fn parse_duration(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let ms = match unit {
        "s" => 1000,
        "m" | "min" => 60 * 1000,
        "h" => 60 * 60 * 1000,
        "d" => DAY_MS,
        "w" => 7 * DAY_MS,
        _ => return None,
    };
    n.checked_mul(ms)
}

/// `30d`, `12h`, `90m`, `45s`: the largest unit that divides `ms`.
pub fn format_duration(ms: u64) -> String {
    for (unit, len) in [
        ("w", 7 * DAY_MS),
        ("d", DAY_MS),
        ("h", 3_600_000),
        ("m", 60_000),
    ] {
        if ms >= len && ms.is_multiple_of(len) {
            return format!("{}{unit}", ms / len);
        }
    }
    format!("{}s", ms / 1000)
}

/// The horizon and the checkpoints kept and collected.
fn choose(
    records: &[Record],
    keep: u64,
    older_than_ms: Option<u64>,
    now_ms: u64,
) -> (u64, Vec<String>, Vec<String>) {
    let tail = records.last().map_or(0, |r| r.seq);
    let cks: Vec<(&str, u64, u64)> = records
        .iter()
        .filter_map(|r| match &r.body {
            Body::Checkpoint(c) => Some((
                c.checkpoint.as_str(),
                c.upto_seq,
                crate::ids::parse_rfc3339(&r.ts).unwrap_or(0),
            )),
            _ => None,
        })
        .collect();
    let cutoff = older_than_ms.map(|d| now_ms.saturating_sub(d));
    let newest_from = cks.len().saturating_sub(keep as usize);
    let kept_by_rule = |i: usize, ts: u64| i >= newest_from || cutoff.is_some_and(|c| ts >= c);
    let mut horizon = cks
        .iter()
        .enumerate()
        .filter(|(i, c)| kept_by_rule(*i, c.2))
        .map(|(_, c)| c.1)
        .min()
        .unwrap_or(tail);
    if let Some(c) = cutoff
        && let Some(first_young) = records
            .iter()
            .find(|r| crate::ids::parse_rfc3339(&r.ts).is_some_and(|t| t >= c))
    {
        horizon = horizon.min(first_young.seq - 1);
    }
    let (kept, collected): (Vec<&(&str, u64, u64)>, Vec<_>) =
        cks.iter().partition(|c| c.1 >= horizon);
    (
        horizon,
        kept.iter().map(|c| c.0.to_string()).collect(),
        collected.iter().map(|c| c.0.to_string()).collect(),
    )
}

/// One file to remove: its directory (relative to `artifacts/`), name, size.
#[derive(Debug, Clone)]
struct Doomed {
    dir: String,
    name: String,
    size: u64,
}

/// The files of `dir` (names, sizes, mtimes in ms); missing: none.
fn files_of(dir: &OwnedFd) -> Result<Vec<(String, u64, u64)>, std::io::Error> {
    let mut out = Vec::new();
    let mut it = rustix::fs::Dir::read_from(dir)?;
    for ent in it.by_ref() {
        let ent = ent?;
        let name = ent.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if let Ok(st) = crate::sys::lstat_at(dir, name.as_str())
            && st.is_file()
        {
            let mtime_ms = (st.mtime_ns().max(0) as u64) / 1_000_000;
            out.push((name, st.size, mtime_ms));
        }
    }
    Ok(out)
}

/// The fan-out directories (two hex digits) of `dir`, sorted.
fn hex_fans(dir: &OwnedFd) -> Result<Vec<String>, std::io::Error> {
    let mut fans: Vec<String> = Vec::new();
    let mut it = rustix::fs::Dir::read_from(dir)?;
    for ent in it.by_ref() {
        let name = ent?.file_name().to_string_lossy().into_owned();
        if name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            fans.push(name);
        }
    }
    fans.sort();
    Ok(fans)
}

fn open_sub(parent: &OwnedFd, name: &str) -> Result<Option<OwnedFd>, std::io::Error> {
    match fs_util::open_dir(parent.as_fd(), name) {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A file of `artifacts/<sub>/<fan>/` (blobs, chunk manifests): where it
/// is, the hash its path names (`None` for a stray name) and its mtime.
struct Fanned {
    doomed: Doomed,
    hash: Option<ContentHash>,
    mtime: u64,
}

/// The files of `artifacts/<sub>/`'s fan-out directories, in order.
fn fanned_files(art: &OwnedFd, sub: &str) -> Result<Vec<Fanned>, WorkspaceError> {
    let io = |what: &str, e: std::io::Error| {
        WorkspaceError::from(FsError::new("list", format!(".agent-runtime/{what}"), e))
    };
    let top = format!("artifacts/{sub}");
    let Some(dir) = open_sub(art, sub).map_err(|e| io(&top, e))? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for fan in hex_fans(&dir).map_err(|e| io(&top, e))? {
        let what = format!("{top}/{fan}");
        let Some(d) = open_sub(&dir, &fan).map_err(|e| io(&what, e))? else {
            continue;
        };
        for (name, size, mtime) in files_of(&d).map_err(|e| io(&what, e))? {
            out.push(Fanned {
                hash: ContentHash::from_hex(&format!("{fan}{name}")),
                mtime,
                doomed: Doomed {
                    dir: format!("{sub}/{fan}"),
                    name,
                    size,
                },
            });
        }
    }
    Ok(out)
}

/// The plan: what goes, under `needed` and the grace period.
struct Plan {
    doomed: Vec<Doomed>,
    blobs: Counted,
    patches: Counted,
    outputs: Counted,
    kept_blobs: Counted,
}

fn plan_files(ws: &Workspace, n: &Needed, now_ms: u64) -> Result<Plan, WorkspaceError> {
    let io =
        |what: &str, e: std::io::Error| FsError::new("list", format!(".agent-runtime/{what}"), e);
    let mut p = Plan {
        doomed: Vec::new(),
        blobs: Counted::default(),
        patches: Counted::default(),
        outputs: Counted::default(),
        kept_blobs: Counted::default(),
    };
    let Some(art) = open_sub(ws.runtime_dir(), "artifacts").map_err(|e| io("artifacts", e))? else {
        return Ok(p);
    };
    let old = |mtime: u64| mtime.saturating_add(GRACE_MS) <= now_ms;
    // Contents stored as chunks: a manifest goes like a blob; the chunks
    // of every one that stays stay with it (manifests are walked first).
    let mut chunks_kept: HashSet<ContentHash> = HashSet::new();
    for f in fanned_files(&art, "chunks")? {
        if let Some(h) = f.hash.filter(|h| n.hashes.contains(h) || !old(f.mtime)) {
            let listed = ws.blobs().chunks_of(&h).map_err(|e| {
                WorkspaceError::Invalid(format!(
                    "ckpt collects nothing: {e} (.agent-runtime/artifacts/{}/{}); run `ckpt verify`, then `ckpt repair`",
                    f.doomed.dir, f.doomed.name
                ))
            })?;
            chunks_kept.extend(listed);
            p.kept_blobs.add(f.doomed.size);
        } else {
            p.blobs.add(f.doomed.size);
            p.doomed.push(f.doomed);
        }
    }
    for f in fanned_files(&art, "blobs")? {
        if f.hash
            .is_some_and(|h| n.hashes.contains(&h) || chunks_kept.contains(&h))
            || !old(f.mtime)
        {
            p.kept_blobs.add(f.doomed.size);
        } else {
            p.blobs.add(f.doomed.size);
            p.doomed.push(f.doomed);
        }
    }
    for (sub, keep, count) in [
        ("patches", &n.patches, &mut p.patches),
        ("outputs", &n.ids, &mut p.outputs),
    ] {
        let what = format!("artifacts/{sub}");
        let Some(d) = open_sub(&art, sub).map_err(|e| io(&what, e))? else {
            continue;
        };
        for (name, size, mtime) in files_of(&d).map_err(|e| io(&what, e))? {
            let id = name.split('.').next().unwrap_or_default();
            if keep.contains(id) || !old(mtime) {
                continue;
            }
            count.add(size);
            p.doomed.push(Doomed {
                dir: sub.to_string(),
                name,
                size,
            });
        }
    }
    Ok(p)
}

/// Every content a snapshot of the tree names (the current one and each
/// open call's): a shell call's before. An unreadable snapshot names
/// nothing (no hook can use it either: it walks anew).
fn snapshot_hashes(ws: &Workspace, out: &mut HashSet<ContentHash>) {
    for s in crate::scan::all_snapshots(ws) {
        out.extend(s.entries.iter().filter_map(|(_, e)| e.hash));
    }
}

/// Every `sha256:<hex>` in the files of `state/` (what open calls' pre
/// hooks saw, the pending action's marker) and `conflicts/`.
fn state_hashes(ws: &Workspace, out: &mut HashSet<ContentHash>) -> Result<(), WorkspaceError> {
    let mut dirs: Vec<(String, OwnedFd)> = Vec::new();
    for name in ["state", "conflicts"] {
        if let Some(d) = open_sub(ws.runtime_dir(), name)
            .map_err(|e| FsError::new("list", format!(".agent-runtime/{name}"), e))?
        {
            dirs.push((name.to_string(), d));
        }
    }
    let finder = memchr::memmem::Finder::new(b"sha256:");
    while let Some((path, d)) = dirs.pop() {
        let mut it = rustix::fs::Dir::read_from(&d)
            .map_err(|e| FsError::new("list", format!(".agent-runtime/{path}"), e.into()))?;
        for ent in it.by_ref() {
            let Ok(ent) = ent else { continue };
            let name = ent.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." {
                continue;
            }
            match crate::sys::lstat_at(&d, name.as_str()) {
                Ok(st) if st.is_dir() => {
                    if let Ok(Some(sub)) = open_sub(&d, &name) {
                        dirs.push((format!("{path}/{name}"), sub));
                    }
                }
                Ok(st) if st.is_file() && st.size <= 64 << 20 => {
                    let Ok((mut f, size)) =
                        fs_util::open_regular_at_sized(d.as_fd(), name.as_ref())
                    else {
                        continue;
                    };
                    let Ok(bytes) = fs_util::read_to_end_sized(&mut f, size) else {
                        continue;
                    };
                    for at in finder.find_iter(&bytes) {
                        if let Some(hex) = bytes.get(at + 7..at + 7 + 64)
                            && let Some(h) = std::str::from_utf8(hex)
                                .ok()
                                .and_then(ContentHash::from_hex)
                        {
                            out.insert(h);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Plans (and, unless dry, carries out) a collection; see the module doc.
pub fn gc(ws: &Workspace, cfg: &Config, opts: &GcOptions) -> Result<GcReport, WorkspaceError> {
    let _lock = crate::action::ActionLock::take(ws)?;
    // What the tree's snapshots and open calls name is read before the
    // ledger: a record appended after the ledger is read names contents
    // that these hold, or that were stored or found since (fresh).
    let mut current = HashSet::new();
    current_hashes(ws, &mut current)?;
    drop(ws.ledger().lock()?);
    let head = crate::ledger::head_state(ws.runtime_dir().as_fd());
    let (read, mut ends) = read_ledger_with_ends(ws)?;
    ws.refuse_damaged(&read, head, "ckpt collects nothing", None)?;
    refuse_unknown(&read.records)?;
    // A rollback a crash cut short is finished first (it may need what
    // would otherwise look collectable), and so is an earlier gc.
    let mut records = read.records;
    if !opts.dry_run {
        let mut again = crate::rollback::finish_interrupted_locked(ws)?.is_some();
        for (id, ty) in crate::open::unfinished_actions(&records) {
            if ty == ActionType::Gc {
                finish(ws, &records, &id)?;
                again = true;
            }
        }
        if again {
            (records, ends) = {
                let (r, e) = read_ledger_with_ends(ws)?;
                (r.records, e)
            };
        }
    }
    let now = ws.clock().now_ms();
    // Flags replace the configured retention for this run, both at once:
    // `--keep 2` alone keeps two checkpoints whatever their age.
    let (keep, older) = match (opts.keep, opts.older_than_ms) {
        (None, None) => (
            cfg.keep_checkpoints,
            Some(cfg.keep_days.saturating_mul(DAY_MS)),
        ),
        (k, d) => (k.unwrap_or(0), d),
    };
    let (horizon, kept, collected) = choose(&records, keep, older, now);
    let backup_cutoff = now.saturating_sub(cfg.keep_days.saturating_mul(DAY_MS));
    let (point, held) = cut_point(&records, horizon, backup_cutoff);
    let mut report = GcReport {
        action: None,
        dry_run: opts.dry_run,
        horizon_seq: horizon,
        kept_checkpoints: kept,
        collected_checkpoints: collected,
        blobs: Counted::default(),
        patches: Counted::default(),
        outputs: Counted::default(),
        kept_blobs: Counted::default(),
        ledger_records: 0,
        ledger_bytes: 0,
        ledger_cut_seq: None,
        checkpoint_files: 0,
        ledger_held: held.map(|(from_seq, by)| LedgerHeld { from_seq, by }),
    };
    let plan = plan_with(ws, &records, horizon, backup_cutoff, now, current)?;
    report.blobs = plan.blobs;
    report.patches = plan.patches;
    report.outputs = plan.outputs;
    report.kept_blobs = plan.kept_blobs;
    let cut = ledger_cut(&records, &ends, point);
    if let Some(c) = &cut {
        report.ledger_records = c.records;
        report.ledger_bytes = c.end;
        report.ledger_cut_seq = Some(c.seq);
    }
    if opts.dry_run || (plan.doomed.is_empty() && cut.is_none()) {
        return Ok(report);
    }
    let action = ws.clock().new_id("act_");
    let target = json!({
        "keep": opts.keep,
        "older_than": opts.older_than_ms.map(format_duration),
    });
    let plan_json = json!({
        "horizon_seq": horizon,
        "backup_cutoff": crate::ids::rfc3339(backup_cutoff),
        "kept_checkpoints": report.kept_checkpoints,
        "collected_checkpoints": report.collected_checkpoints,
        "blobs": report.blobs,
        "patches": report.patches,
        "outputs": report.outputs,
        "ledger_cut": cut.as_ref().map(|c| json!({
            "seq": c.seq, "hash": c.hash, "records": c.records, "bytes": c.end,
        })),
    });
    crate::action::append(
        ws,
        ActionType::Gc,
        &action,
        ActionStatus::Started,
        target,
        Some(plan_json),
        None,
    )?;
    crate::failpoint::hit("gc.after_plan").map_err(|e| FsError::new("gc", "ledger.jsonl", e))?;
    let removed = remove(ws, &plan.doomed, now)?;
    let mut outcome = json!({"removed": removed.files, "bytes": removed.bytes});
    if let Some(c) = &cut {
        let at = crate::ledger::Cut {
            seq: c.seq,
            hash: c.hash.clone(),
            action: action.clone(),
        };
        let last = Tail {
            seq: records.last().map_or(0, |r| r.seq),
            hash: records.last().map(|r| r.hash.clone()),
            end: ends.last().copied().unwrap_or(0),
        };
        outcome["ledger_bytes"] = json!(cut_ledger(ws, &at, Some((c.end, last)))?);
        report.checkpoint_files = drop_checkpoint_files(ws, c.seq)?;
        outcome["checkpoint_files"] = json!(report.checkpoint_files);
    }
    crate::action::append(
        ws,
        ActionType::Gc,
        &action,
        ActionStatus::Succeeded,
        Value::Null,
        None,
        Some(outcome),
    )?;
    report.action = Some(action);
    Ok(report)
}

/// The whole ledger with each record's end offset (damage noted for
/// writers, as [`Workspace::read_ledger`] does).
fn read_ledger_with_ends(ws: &Workspace) -> Result<(crate::LedgerRead, Vec<u64>), WorkspaceError> {
    let (read, ends) = ws.ledger().read_with_ends()?;
    ws.ledger().note_damage(&read);
    Ok((read, ends))
}

/// What the tree's snapshots, `state/` and the registry of the agent's
/// files name: current contents, whatever the ledger says (see [`gc`]).
fn current_hashes(ws: &Workspace, out: &mut HashSet<ContentHash>) -> Result<(), WorkspaceError> {
    snapshot_hashes(ws, out);
    state_hashes(ws, out)?;
    let dir = ws.state_dir()?;
    out.extend(crate::agent_files::load(ws, &dir).hashes());
    Ok(())
}

fn refuse_unknown(records: &[Record]) -> Result<(), WorkspaceError> {
    if let Some(kind) = records.iter().find_map(|r| match &r.body {
        Body::Unknown { kind } => Some(kind),
        _ => None,
    }) {
        return Err(WorkspaceError::NotApplicable(format!(
            "the ledger holds `{kind}` records, which this ckpt does not know: it cannot tell what they need kept, so it collects nothing; run gc with the ckpt that wrote them"
        )));
    }
    Ok(())
}

fn plan_with(
    ws: &Workspace,
    records: &[Record],
    horizon: u64,
    backup_cutoff: u64,
    now: u64,
    current: HashSet<ContentHash>,
) -> Result<Plan, WorkspaceError> {
    let mut n = needed(records, horizon, backup_cutoff);
    n.hashes.extend(current);
    plan_files(ws, &n, now)
}

/// Removes `doomed`, each only if it is still past the grace period (a hook
/// may have found and freshened a copy since the plan: it stays).
fn remove(ws: &Workspace, doomed: &[Doomed], now: u64) -> Result<Counted, WorkspaceError> {
    let art = fs_util::open_dir(ws.runtime_dir().as_fd(), "artifacts")
        .map_err(|e| FsError::new("open", ".agent-runtime/artifacts", e))?;
    let mut dirs: HashMap<&str, OwnedFd> = HashMap::new();
    let mut done = Counted::default();
    const REMOVING: &str = "removing what gc collects";
    for (i, d) in doomed.iter().enumerate() {
        ws.progress_items(REMOVING, i, doomed.len());
        if !dirs.contains_key(d.dir.as_str()) {
            match fs_util::open_dir(art.as_fd(), &d.dir) {
                Ok(fd) => {
                    dirs.insert(&d.dir, fd);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(FsError::new(
                        "open",
                        format!(".agent-runtime/artifacts/{}", d.dir),
                        e,
                    )
                    .into());
                }
            }
        }
        let dir = &dirs[d.dir.as_str()];
        let fresh = crate::sys::lstat_at(dir, d.name.as_str()).is_ok_and(|st| {
            (st.mtime_ns().max(0) as u64 / 1_000_000).saturating_add(GRACE_MS) > now
        });
        if fresh {
            continue;
        }
        match rustix::fs::unlinkat(dir, d.name.as_str(), rustix::fs::AtFlags::empty()) {
            Ok(()) => done.add(d.size),
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => {
                return Err(FsError::new(
                    "remove",
                    format!(".agent-runtime/artifacts/{}/{}", d.dir, d.name),
                    e.into(),
                )
                .into());
            }
        }
        if i == 0 {
            crate::failpoint::hit("gc.after_first_removal")
                .map_err(|e| FsError::new("gc", "artifacts", e))?;
        }
    }
    ws.progress_items(REMOVING, doomed.len(), doomed.len());
    Ok(done)
}

/// Finishes a gc a crash cut short (called by `recover`, which holds the
/// action lock): its recorded plan is carried out again (removal is
/// idempotent, and records appended since only add to what is kept), then
/// its end is recorded. Returns how many files went now.
pub(crate) fn finish(
    ws: &Workspace,
    records: &[Record],
    action: &str,
) -> Result<Counted, WorkspaceError> {
    let plan = records.iter().rev().find_map(|r| match &r.body {
        Body::Action(a) if a.action == action && a.status == ActionStatus::Started => {
            a.plan.clone()
        }
        _ => None,
    });
    let horizon = plan
        .as_ref()
        .and_then(|p| p.get("horizon_seq"))
        .and_then(Value::as_u64);
    let cutoff = plan
        .as_ref()
        .and_then(|p| p.get("backup_cutoff"))
        .and_then(Value::as_str)
        .and_then(crate::ids::parse_rfc3339);
    let removed = match (horizon, cutoff) {
        (Some(h), Some(c)) => {
            // (The caller read `records` after this: a record appended
            // since names what is current or fresh, as in `gc`.)
            let mut current = HashSet::new();
            current_hashes(ws, &mut current)?;
            let now = ws.clock().now_ms();
            let p = plan_with(ws, records, h, c, now, current)?;
            remove(ws, &p.doomed, now)?
        }
        _ => Counted::default(),
    };
    // The ledger's cut, if it was planned (nothing when it was made).
    let cut = crate::ledger::cut_of_plan(plan.as_ref()).map(|(seq, hash)| crate::ledger::Cut {
        seq,
        hash,
        action: action.to_string(),
    });
    if let Some(c) = &cut {
        cut_ledger(ws, c, None)?;
        drop_checkpoint_files(ws, c.seq)?;
    }
    crate::action::append(
        ws,
        ActionType::Gc,
        action,
        ActionStatus::Succeeded,
        Value::Null,
        None,
        Some(json!({"removed": removed.files, "bytes": removed.bytes, "finished_by": "recover"})),
    )?;
    Ok(removed)
}

/// The sizes of the parts of `.agent-runtime/` (bytes): the whole, for
/// `--auto`'s budget. Counts regular files only.
pub fn runtime_bytes(ws: &Workspace) -> u64 {
    use rustix::fs::{Mode, OFlags};
    let mut total = 0u64;
    let mut dirs: Vec<OwnedFd> = Vec::new();
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if let Ok(d) = rustix::fs::openat(ws.runtime_dir(), ".", flags, Mode::empty()) {
        dirs.push(d);
    }
    while let Some(d) = dirs.pop() {
        let Ok(mut it) = rustix::fs::Dir::read_from(&d) else {
            continue;
        };
        for ent in it.by_ref().flatten() {
            let name = ent.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." {
                continue;
            }
            match crate::sys::lstat_at(&d, name.as_str()) {
                Ok(st) if st.is_dir() => {
                    if let Ok(sub) = fs_util::open_dir(d.as_fd(), &name) {
                        dirs.push(sub);
                    }
                }
                Ok(st) if st.is_file() => total += st.size,
                _ => {}
            }
        }
    }
    total
}

/// What `state/gc.over_budget` says: after a collection, `.agent-runtime/`
/// still held more than the budget.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct OverBudget {
    /// The bytes `.agent-runtime/` held after the collection.
    pub runtime_bytes: u64,
    /// `max_runtime_bytes` then.
    pub max_runtime_bytes: u64,
    /// When it was measured (ms since the epoch).
    pub at_ms: u64,
}

const OVER_BUDGET_FILE: &str = "gc.over_budget";

/// Notes what a collection left against the budget: `state/gc.over_budget`
/// when `.agent-runtime/` still holds more than `budget` bytes (so `ckpt
/// status` can say so at the cost of one read), none when it fits. A cache:
/// atomic, not synced.
pub fn note_budget(ws: &Workspace, runtime_bytes: u64, budget: u64) {
    let Ok(state) = ws.state_dir() else {
        return;
    };
    if budget == 0 || runtime_bytes <= budget {
        let _ = rustix::fs::unlinkat(&state, OVER_BUDGET_FILE, rustix::fs::AtFlags::empty());
        return;
    }
    let mark = OverBudget {
        runtime_bytes,
        max_runtime_bytes: budget,
        at_ms: ws.clock().now_ms(),
    };
    if let Ok(bytes) = serde_json::to_vec(&mark) {
        let _ = fs_util::write_atomic(
            state.as_fd(),
            OVER_BUDGET_FILE.as_ref(),
            &bytes,
            0o600,
            false,
            crate::durable::Keep::Cache,
        );
    }
}

/// The last collection's note that `.agent-runtime/` stayed over its
/// budget, if any.
pub fn over_budget(ws: &Workspace) -> Option<OverBudget> {
    let state = ws.state_dir().ok()?;
    let mut f = fs_util::open_regular_at(state.as_fd(), OVER_BUDGET_FILE.as_ref()).ok()?;
    let mut v = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut v).ok()?;
    serde_json::from_slice(&v).ok()
}

/// How often a prompt hook may start `ckpt gc --auto` (ms).
pub const AUTO_EVERY_MS: u64 = 60 * 60 * 1000;

/// True when a `ckpt gc --auto` is due (a prompt hook asks; `--auto`
/// itself checks the budget): the mark `state/gc.checked` is missing or
/// older than [`AUTO_EVERY_MS`]. Due, the mark is renewed first, so hooks
/// racing each other start one. One `stat` when not due.
pub fn auto_due(ws: &Workspace, cfg: &Config) -> bool {
    if cfg.max_runtime_bytes == 0 {
        return false;
    }
    let Ok(state) = ws.state_dir() else {
        return false;
    };
    let now = ws.clock().now_ms();
    let fresh = crate::sys::lstat_at(&state, "gc.checked").is_ok_and(|st| {
        (st.mtime_ns().max(0) as u64 / 1_000_000).saturating_add(AUTO_EVERY_MS) > now
    });
    if fresh {
        return false;
    }
    let tmp = fs_util::temp_name(".gc-checked-");
    let renewed = fs_util::create_excl(state.as_fd(), tmp.as_ref(), 0o600).and_then(|_| {
        rustix::fs::renameat(&state, tmp.as_str(), &state, "gc.checked").map_err(Into::into)
    });
    if renewed.is_err() {
        let _ = rustix::fs::unlinkat(&state, tmp.as_str(), rustix::fs::AtFlags::empty());
    }
    renewed.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_their_units_and_bad_ones_do_not() {
        assert_eq!(parse_duration("30d"), Some(30 * DAY_MS));
        assert_eq!(parse_duration("12h"), Some(12 * 3600 * 1000));
        assert_eq!(parse_duration("90m"), Some(90 * 60 * 1000));
        assert_eq!(parse_duration("2w"), Some(14 * DAY_MS));
        assert_eq!(parse_duration("45s"), Some(45_000));
        for d in ["30d", "2w", "12h", "90m", "45s"] {
            assert_eq!(format_duration(parse_duration(d).unwrap()), d);
        }
        for bad in ["", "d", "30", "3x", "-1d", "1.5d", "99999999999999999999d"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
