//! `index/view.bin` (and `index/view-members.bin`): the ledger reduced to
//! what `status`, `diff` and `rollback --last/--call` plan from (issue 24),
//! so that a long history is not read and parsed whole.
//!
//! The plan of taking every agent change out ([`rollback::dry_plan`] with
//! `Selector::Everything`) depends on the records in a way that lets most
//! of them be folded together:
//! - Every agent patch of a path is in effect until an action names it, and
//!   the planner takes consecutive ones out as one net step (each before
//!   the previous after: `rollback.rs`'s `runs`). The view keeps each such
//!   run as its net patch (built by the same `effect::chains_onto` and
//!   `extend_net`), its newest seq and a summary of its calls (how many,
//!   the oldest, the newest four: what `status`'s lines name); and in the
//!   members file, per patch, its seq, where its line lies and its call.
//!   Runs are split at `ckpt gc`'s horizon, as the planner splits them.
//! - A path is **sealed** when a rename, a ckpt patch, doubt between calls
//!   or an action names it: its later patches are kept whole. An action
//!   also reads back, and keeps whole, the folded patches it names and
//!   every later one of the path (a `--to`: all of them); those before
//!   stay folded, the plan stepping over them as before.
//! - Kept whole as lines: those patches, actions, conflicts, repairs,
//!   kinds this version does not know, the checkpoints a `--to` names and
//!   the records of calls in doubt (`status` lists them).
//! - Dropped: other checkpoints, session entries, user edits and the
//!   records of calls that ended plainly. The places of the newest 4096 of
//!   those calls and 256 checkpoints are kept, for a rollback to read back.
//!
//! The reduced records, planned, give the whole read's plan; the report's
//! patch lists name a run by its last patch ([`Reduced::calls_of`] and
//! [`Reduced::calls_tail`] expand them). A rollback of calls
//! ([`for_rollback`]) reads back every path they changed whole, plus
//! their calls' records and the newest checkpoints, and plans over that.
//! The rollback model (tests/rollback_model.rs) compares `status` (both
//! forms) and every `--call`/`--last` dry run both ways over random
//! histories of calls, rollbacks, undos, resolves and user edits;
//! tests/gc.rs across random collections; tests/view.rs damaged views,
//! renames and doubt between calls.
//!
//! The view names the last record it folded by seq, hash and end offset.
//! It is extended with the records appended since (read as
//! [`Ledger::read_after`](crate::ledger::Ledger::read_after) reads them:
//! the record still there, the rest chained to it and to `ledger.head`),
//! and built again from a whole read when missing, damaged (either file's
//! checksum, or a members file that is not the one the main file names),
//! stale (gc cut or repaired the ledger, a `--to` names a checkpoint it
//! dropped) or when a line it names is not where it says (each line read
//! back is checked on its own: hash and seq). It is a cache: written
//! atomically, never synced, members first. Damage before its anchor is
//! not seen by the commands that use it (as with `recover`'s cut);
//! `ckpt verify`, and every other action, check the whole chain.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::effect::{chains_onto, extend_net, is_agent};
use crate::ledger::{LedgerError, LedgerRead, Tail};
use crate::paths::RelPath;
use crate::record::{ActionType, Body, CallStatus, FilePatch, PatchOp, Record};
use crate::workspace::{Workspace, WorkspaceError};

const FILE: &str = "view.bin";
const MAGIC: &[u8; 8] = b"CKPTVEW2";
/// The folded patches (places and calls), read only by what needs them.
const MEMBERS_FILE: &str = "view-members.bin";
const MEMBERS_MAGIC: &[u8; 8] = b"CKPTVWM1";
const VERSION: u32 = 2;
/// How many of a run's newest calls its summary names (`status` shows
/// four, or three and how many came before).
const SUMMARY_CALLS: usize = 4;
/// How many of the newest plainly ended calls the view keeps the records'
/// places of (a rollback of one reads them: `--last N`, `--call C`).
const RECENT_CALLS: usize = 4096;
/// How many of the newest checkpoints it keeps the places of (what git
/// did since the one before a rolled-back change).
const RECENT_CHECKPOINTS: usize = 256;
/// One member on disk: seq, end, len, call offset, call length.
const MEMBER_BYTES: usize = 8 + 8 + 4 + 8 + 4;

/// One agent patch folded into a run.
#[derive(Debug, Clone, Copy)]
struct Member {
    seq: u64,
    /// Where its line ends (after the `\n`) and its length (without it).
    end: u64,
    len: u32,
    /// Its call's id in `View::calls`.
    call_off: u64,
    call_len: u32,
}

/// Consecutive patches of a simple path the planner takes out as one step.
#[derive(Debug, Clone)]
struct Run {
    net: FilePatch,
    /// How many patches it folds.
    count: u32,
    /// The seq of the newest.
    seq: u64,
    /// Oldest first (empty until the members file is read).
    members: Vec<Member>,
    /// Its calls in brief, as stored (`None` once members changed).
    summary: Option<Summary>,
}

/// A run's calls in brief, for `status`'s lines: newest first, a call
/// repeated by consecutive patches counted once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Summary {
    /// How many.
    distinct: u64,
    /// The oldest.
    oldest: String,
    /// The newest few.
    newest: Vec<String>,
}

/// Where a record is: its seq, the end of its line (after the `\n`) and
/// the line's length (without it).
type Span = (u64, u64, u32);

/// A run as the main file holds it: net patch, count, newest seq, summary.
type StoredRun = (FilePatch, u32, u64, Summary);

/// What the view keeps besides the runs, as written in the file's header.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Header {
    v: u32,
    seq: u64,
    hash: Option<String>,
    end: u64,
    horizon: u64,
    /// Lines kept whole, by seq.
    kept: BTreeMap<u64, String>,
    /// Calls in doubt: their kept records.
    open: BTreeMap<String, Vec<Span>>,
    /// The newest plainly ended calls, oldest first: their records.
    recent_calls: Vec<(String, Vec<Span>)>,
    /// The newest checkpoints, oldest first; whether older ones were
    /// dropped.
    recent_checkpoints: Vec<Span>,
    checkpoints_dropped: bool,
    /// Checkpoints kept whole (a `--to` names them).
    checkpoints: BTreeSet<String>,
    complex: BTreeSet<RelPath>,
    /// Per simple path, its runs: net patch, member count, summary.
    paths: Vec<(RelPath, Vec<StoredRun>)>,
    /// The members file's checksum (its last 32 bytes, hex).
    members_check: String,
}

/// The reduced ledger (see the module doc).
#[derive(Debug, Default)]
pub struct View {
    anchor: Tail,
    horizon: u64,
    kept: BTreeMap<u64, Vec<u8>>,
    open: HashMap<String, Vec<Span>>,
    recent_calls: std::collections::VecDeque<(String, Vec<Span>)>,
    recent_checkpoints: std::collections::VecDeque<Span>,
    checkpoints_dropped: bool,
    checkpoints: BTreeSet<String>,
    complex: BTreeSet<RelPath>,
    paths: BTreeMap<RelPath, Vec<Run>>,
    calls: Vec<u8>,
    /// Whether the runs' members are read (or the view was built here).
    members_loaded: bool,
    /// The stored members file's checksum.
    members_check: String,
}

/// Why a fold cannot go on from where the view stands: build it again.
struct Rebuild;

/// Net patch id → (path, run index).
type RunIds = HashMap<String, (RelPath, usize)>;

/// What `status` and `diff` plan from.
pub struct Reduced {
    /// The reduced records, oldest first (kept and net patches).
    pub records: Vec<Record>,
    /// What the read found (no `records`): the tail, any damage.
    pub read: LedgerRead,
    view: View,
    runs: RunIds,
    /// Kept patch id → call.
    call_of: HashMap<String, String>,
}

impl Reduced {
    /// The calls of the patches a report lists (`PlannedFile::patches`), in
    /// that order: a run's net patch stands for all of its patches, newest
    /// first. Needs the members ([`Source::read`] with `all_calls`).
    pub fn calls_of<'a>(&'a self, ids: &'a [String]) -> Vec<&'a str> {
        let mut out = Vec::new();
        for id in ids {
            if let Some(run) = self.run(id) {
                out.extend(run.members.iter().rev().map(|m| self.view.call(m)));
            } else if let Some(c) = self.call_of.get(id) {
                out.push(c);
            }
        }
        out
    }

    fn run(&self, id: &str) -> Option<&Run> {
        let (path, i) = self.runs.get(id)?;
        self.view.paths.get(path)?.get(*i)
    }

    /// [`calls_of`](Self::calls_of) oldest first, a call repeated by
    /// consecutive patches named once: how many, and the newest `k` of
    /// them (oldest first), from the runs' summaries.
    pub fn calls_tail(&self, ids: &[String], k: usize) -> (usize, Vec<String>) {
        let k = k.min(SUMMARY_CALLS);
        let mut total = 0usize;
        let mut newest: Vec<String> = Vec::new();
        // The boundary: the last call of the sequence so far (newest first).
        let mut last: Option<String> = None;
        let mut full = false;
        for id in ids {
            let seg = match self.run(id) {
                Some(run) => run_summary(&self.view, run),
                None => match self.call_of.get(id) {
                    Some(c) => Summary {
                        distinct: 1,
                        oldest: c.clone(),
                        newest: vec![c.clone()],
                    },
                    None => continue,
                },
            };
            let joins = last.as_deref() == seg.newest.first().map(String::as_str);
            total += seg.distinct as usize - usize::from(joins);
            for (i, c) in seg.newest.iter().enumerate() {
                if full || (i == 0 && joins) {
                    continue;
                }
                newest.push(c.clone());
                full = newest.len() >= k;
            }
            // A segment with more calls than its summary names fills `k`.
            full |= seg.distinct as usize > seg.newest.len();
            last = Some(seg.oldest);
        }
        newest.truncate(k);
        newest.reverse();
        (total, newest)
    }
}

/// A run's summary: the stored one, or made from its members.
fn run_summary(view: &View, run: &Run) -> Summary {
    if let Some(s) = &run.summary {
        return s.clone();
    }
    let mut s = Summary::default();
    let mut prev: Option<&str> = None;
    for m in run.members.iter().rev() {
        let c = view.call(m);
        if prev != Some(c) {
            s.distinct += 1;
            // One more than a line shows: the first may repeat the call
            // before the run.
            if s.newest.len() <= SUMMARY_CALLS {
                s.newest.push(c.to_string());
            }
        }
        prev = Some(c);
    }
    s.oldest = prev.unwrap_or_default().to_string();
    s
}

impl View {
    fn call(&self, m: &Member) -> &str {
        let s = m.call_off as usize;
        self.calls
            .get(s..s + m.call_len as usize)
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or("")
    }

    fn push_call(&mut self, call: &str) -> (u64, u32) {
        let off = self.calls.len() as u64;
        self.calls.extend_from_slice(call.as_bytes());
        (off, call.len() as u32)
    }

    /// Folds one record in (see the module doc). `seen` holds the
    /// checkpoints this pass read, for a `--to` that names one.
    fn fold(
        &mut self,
        ws: &Workspace,
        line: &[u8],
        r: &Record,
        end: u64,
        seen: &mut HashMap<String, (u64, Vec<u8>)>,
    ) -> Result<(), Rebuild> {
        self.load_members(ws)?;
        match &r.body {
            Body::FilePatch(p) => {
                let simple = is_agent(p)
                    && p.op != PatchOp::Rename
                    && p.from_path.is_none()
                    && p.candidates.is_empty()
                    && !self.complex.contains(&p.path);
                if simple {
                    let (call_off, call_len) = self.push_call(&p.call);
                    let m = Member {
                        seq: r.seq,
                        end,
                        len: line.len() as u32,
                        call_off,
                        call_len,
                    };
                    let runs = self.paths.entry(p.path.clone()).or_default();
                    push_patch(runs, m, p, self.horizon);
                } else {
                    self.seal(&p.path);
                    if let Some(f) = &p.from_path {
                        self.seal(f);
                    }
                    self.kept.insert(r.seq, line.to_vec());
                }
            }
            Body::ToolCall(c) => {
                let doubt = c.outcome_unknown
                    || matches!(
                        c.status,
                        CallStatus::Started | CallStatus::Planned | CallStatus::Approved
                    );
                let span = (r.seq, end, line.len() as u32);
                if doubt {
                    self.kept.insert(r.seq, line.to_vec());
                    self.open.entry(c.call.clone()).or_default().push(span);
                } else {
                    let mut spans = self.open.remove(&c.call).unwrap_or_default();
                    for s in &spans {
                        self.kept.remove(&s.0);
                    }
                    spans.push(span);
                    self.recent_calls.push_back((c.call.clone(), spans));
                    if self.recent_calls.len() > RECENT_CALLS {
                        self.recent_calls.pop_front();
                    }
                }
            }
            Body::Checkpoint(c) => {
                seen.insert(c.checkpoint.clone(), (r.seq, line.to_vec()));
                self.recent_checkpoints
                    .push_back((r.seq, end, line.len() as u32));
                if self.recent_checkpoints.len() > RECENT_CHECKPOINTS {
                    self.recent_checkpoints.pop_front();
                    self.checkpoints_dropped = true;
                }
            }
            Body::Action(a) => {
                // The paths it covers, and per path the patches it names
                // (takes out, puts back): those, and every later patch of
                // the path, are read back and kept whole. A `--to` resets
                // every patch of its paths: they are all kept whole.
                let reset = a.target.get("to").is_some();
                let mut named: BTreeMap<RelPath, BTreeSet<String>> = BTreeMap::new();
                for v in [&a.plan, &a.outcome] {
                    let files = v
                        .as_ref()
                        .and_then(|v| v.get("files"))
                        .and_then(Value::as_array);
                    for f in files.into_iter().flatten() {
                        let Some(path) = f
                            .get("path")
                            .and_then(|p| serde_json::from_value::<RelPath>(p.clone()).ok())
                        else {
                            continue;
                        };
                        let ids = named.entry(path).or_default();
                        for k in ["patches", "redone"] {
                            let list = f.get(k).and_then(Value::as_array);
                            ids.extend(
                                list.into_iter()
                                    .flatten()
                                    .filter_map(Value::as_str)
                                    .map(str::to_string),
                            );
                        }
                    }
                }
                for (path, ids) in &named {
                    self.unfold(ws, path, (!reset).then_some(ids))?;
                }
                if let Some(ck) = a.target.get("to").and_then(Value::as_str)
                    && !self.checkpoints.contains(ck)
                {
                    // The checkpoint is read by the plan's replay: kept, or
                    // the view cannot answer.
                    let (seq, l) = seen.get(ck).ok_or(Rebuild)?;
                    self.kept.insert(*seq, l.clone());
                    self.checkpoints.insert(ck.to_string());
                }
                if a.action_type == ActionType::Gc
                    && let Some(h) = a
                        .plan
                        .as_ref()
                        .and_then(|p| p.get("horizon_seq"))
                        .and_then(Value::as_u64)
                    && h > self.horizon
                {
                    self.split_at(ws, h)?;
                }
                self.kept.insert(r.seq, line.to_vec());
            }
            Body::Conflict(_) | Body::Repair(_) | Body::Unknown { .. } => {
                self.kept.insert(r.seq, line.to_vec());
            }
            Body::SessionEntry(_) | Body::UserEdit(_) => {}
        }
        self.anchor = Tail {
            seq: r.seq,
            hash: Some(r.hash.clone()),
            end,
        };
        Ok(())
    }

    /// The folded patches of `runs`, read back from the ledger.
    fn read_members(
        ws: &Workspace,
        runs: &[Run],
    ) -> Result<Vec<(Member, Vec<u8>, Record)>, Rebuild> {
        let members: Vec<Member> = runs
            .iter()
            .flat_map(|r| r.members.iter().copied())
            .collect();
        let spans: Vec<(u64, u64, u32)> = members.iter().map(|m| (m.seq, m.end, m.len)).collect();
        let lines = ws
            .ledger()
            .read_lines_at(&spans)
            .ok()
            .flatten()
            .ok_or(Rebuild)?;
        Ok(members
            .into_iter()
            .zip(lines)
            .map(|(m, (l, r))| (m, l, r))
            .collect())
    }

    /// `path` from now on keeps its patches whole (a rename, a ckpt
    /// patch, doubt between calls or an action names it); what was folded
    /// before stays folded: the plan steps over it as before.
    fn seal(&mut self, path: &RelPath) {
        self.complex.insert(path.clone());
    }

    /// `path`'s folded patches from the first one `named` names on (all
    /// of them when `None`) are read back and kept whole; those before it
    /// are folded again; the path is sealed.
    fn unfold(
        &mut self,
        ws: &Workspace,
        path: &RelPath,
        named: Option<&BTreeSet<String>>,
    ) -> Result<(), Rebuild> {
        self.seal(path);
        let Some(runs) = self.paths.remove(path) else {
            return Ok(());
        };
        let members = Self::read_members(ws, &runs)?;
        let is_named = |r: &Record| match (&r.body, named) {
            (_, None) => true,
            (Body::FilePatch(p), Some(ids)) => ids.contains(&p.patch),
            _ => false,
        };
        let Some(from) = members.iter().position(|(_, _, r)| is_named(r)) else {
            self.paths.insert(path.clone(), runs);
            return Ok(());
        };
        let mut before = Vec::new();
        for (i, (m, line, r)) in members.into_iter().enumerate() {
            if i >= from {
                self.kept.insert(r.seq, line);
                continue;
            }
            let Body::FilePatch(p) = &r.body else {
                return Err(Rebuild);
            };
            push_patch(&mut before, m, p, self.horizon);
        }
        if !before.is_empty() {
            self.paths.insert(path.clone(), before);
        }
        Ok(())
    }

    /// A new gc horizon: runs across it are split there.
    fn split_at(&mut self, ws: &Workspace, h: u64) -> Result<(), Rebuild> {
        self.horizon = h;
        let across: Vec<RelPath> = self
            .paths
            .iter()
            .filter(|(_, runs)| {
                runs.iter().any(|r| {
                    r.members.first().is_some_and(|m| m.seq <= h)
                        && r.members.last().is_some_and(|m| m.seq > h)
                })
            })
            .map(|(p, _)| p.clone())
            .collect();
        for path in across {
            let Some(old) = self.paths.remove(&path) else {
                continue;
            };
            let mut runs = Vec::new();
            for (m, _, r) in Self::read_members(ws, &old)? {
                let Body::FilePatch(p) = &r.body else {
                    return Err(Rebuild);
                };
                push_patch(&mut runs, m, p, h);
            }
            self.paths.insert(path, runs);
        }
        Ok(())
    }

    /// The main file, and the members file when the members are read.
    fn encode(&self) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
        let members = self.members_loaded.then(|| {
            let n: usize = self.paths.values().flatten().map(|r| r.members.len()).sum();
            let mut out = Vec::with_capacity(16 + self.calls.len() + n * MEMBER_BYTES + 32);
            out.extend_from_slice(MEMBERS_MAGIC);
            out.extend_from_slice(&(self.calls.len() as u64).to_le_bytes());
            out.extend_from_slice(&self.calls);
            for m in self.paths.values().flatten().flat_map(|r| &r.members) {
                out.extend_from_slice(&m.seq.to_le_bytes());
                out.extend_from_slice(&m.end.to_le_bytes());
                out.extend_from_slice(&m.len.to_le_bytes());
                out.extend_from_slice(&m.call_off.to_le_bytes());
                out.extend_from_slice(&m.call_len.to_le_bytes());
            }
            crate::binfile::seal(&mut out);
            out
        });
        let members_check = match &members {
            Some(b) => crate::hash::hex(&b[b.len() - 32..]),
            None => self.members_check.clone(),
        };
        let header = Header {
            v: VERSION,
            seq: self.anchor.seq,
            hash: self.anchor.hash.clone(),
            end: self.anchor.end,
            horizon: self.horizon,
            kept: self
                .kept
                .iter()
                .map(|(s, l)| Some((*s, String::from_utf8(l.clone()).ok()?)))
                .collect::<Option<_>>()?,
            open: self
                .open
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            recent_calls: self.recent_calls.iter().cloned().collect(),
            recent_checkpoints: self.recent_checkpoints.iter().copied().collect(),
            checkpoints_dropped: self.checkpoints_dropped,
            checkpoints: self.checkpoints.clone(),
            complex: self.complex.clone(),
            paths: self
                .paths
                .iter()
                .map(|(p, runs)| {
                    (
                        p.clone(),
                        runs.iter()
                            .map(|r| (r.net.clone(), r.count, r.seq, run_summary(self, r)))
                            .collect(),
                    )
                })
                .collect(),
            members_check,
        };
        let mut out = MAGIC.to_vec();
        serde_json::to_writer(&mut out, &header).ok()?;
        crate::binfile::seal(&mut out);
        Some((out, members))
    }

    fn decode(bytes: &[u8]) -> Option<View> {
        let body = crate::binfile::unseal(bytes, MAGIC, 2)?;
        let head: Header = serde_json::from_slice(body).ok()?;
        if head.v != VERSION {
            return None;
        }
        let mut paths = BTreeMap::new();
        for (path, runs) in head.paths {
            let runs: Vec<Run> = runs
                .into_iter()
                .map(|(net, count, seq, summary)| Run {
                    net,
                    count,
                    seq,
                    members: Vec::new(),
                    summary: Some(summary),
                })
                .collect();
            if runs.iter().any(|r| r.count == 0) {
                return None;
            }
            paths.insert(path, runs);
        }
        Some(View {
            anchor: Tail {
                seq: head.seq,
                hash: head.hash,
                end: head.end,
            },
            horizon: head.horizon,
            kept: head
                .kept
                .into_iter()
                .map(|(s, l)| (s, l.into_bytes()))
                .collect(),
            open: head.open.into_iter().collect(),
            recent_calls: head.recent_calls.into(),
            recent_checkpoints: head.recent_checkpoints.into(),
            checkpoints_dropped: head.checkpoints_dropped,
            checkpoints: head.checkpoints,
            complex: head.complex,
            paths,
            calls: Vec::new(),
            members_loaded: false,
            members_check: head.members_check,
        })
    }

    /// Reads the runs' members from the members file: it must be the one
    /// the main file names, sound, and hold as many members as the runs.
    fn load_members(&mut self, ws: &Workspace) -> Result<(), Rebuild> {
        if self.members_loaded {
            return Ok(());
        }
        let bytes = ws.read_index_file(MEMBERS_FILE, u64::MAX).ok_or(Rebuild)?;
        if bytes.len() < 32 || crate::hash::hex(&bytes[bytes.len() - 32..]) != self.members_check {
            return Err(Rebuild);
        }
        let paths = &mut self.paths;
        let calls = crate::binfile::unseal_with(&bytes, MEMBERS_MAGIC, 8, |body| {
            let calls_len =
                usize::try_from(u64::from_le_bytes(body.get(..8)?.try_into().ok()?)).ok()?;
            let calls = body.get(8..8usize.checked_add(calls_len)?)?;
            let mut members = body.get(8 + calls_len..)?.chunks_exact(MEMBER_BYTES);
            if !members.remainder().is_empty() {
                return None;
            }
            let u64_at =
                |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
            let u32_at =
                |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
            let mut all = Vec::new();
            for run in paths.values().flatten() {
                let mut ms = Vec::with_capacity(run.count as usize);
                for _ in 0..run.count {
                    let b = members.next()?;
                    let m = Member {
                        seq: u64_at(b, 0),
                        end: u64_at(b, 8),
                        len: u32_at(b, 16),
                        call_off: u64_at(b, 20),
                        call_len: u32_at(b, 28),
                    };
                    if m.call_off.checked_add(m.call_len as u64)? > calls_len as u64 {
                        return None;
                    }
                    ms.push(m);
                }
                all.push(ms);
            }
            if members.next().is_some() {
                return None;
            }
            Some((calls.to_vec(), all))
        })
        .ok_or(Rebuild)?;
        let (calls, all) = calls;
        for (run, ms) in paths.values_mut().flatten().zip(all) {
            run.members = ms;
        }
        self.calls = calls;
        self.members_loaded = true;
        Ok(())
    }

    fn load(ws: &Workspace) -> Option<View> {
        Self::decode(&ws.read_index_file(FILE, u64::MAX)?)
    }

    /// Writes the members file (when read) before the main file that names
    /// it.
    fn save(&self, ws: &Workspace) {
        if let Some((main, members)) = self.encode() {
            if let Some(m) = members {
                ws.write_index_file(MEMBERS_FILE, &m);
            }
            ws.write_index_file(FILE, &main);
        }
    }

    /// Folds the ledger in from the anchor on (`whole`: from the start, the
    /// view being empty). `None`: the read from the anchor was refused, or
    /// the fold cannot go on from here.
    fn extend(
        &mut self,
        ws: &Workspace,
        whole: bool,
    ) -> Result<Option<(LedgerRead, u64)>, WorkspaceError> {
        let mut seen = HashMap::new();
        let mut stuck = false;
        let mut grew = 0u64;
        let from = (!whole).then(|| self.anchor.clone());
        let read = ws.ledger().scan_from(from.as_ref(), |line, r, end| {
            if !stuck {
                grew += 1;
                stuck = self.fold(ws, line, &r, end, &mut seen).is_err();
            }
            Ok::<(), LedgerError>(())
        })?;
        Ok(match read {
            Some(read) if !stuck => Some((read, grew)),
            _ => None,
        })
    }

    /// The reduced records, oldest first.
    fn records(&self) -> Option<(Vec<Record>, RunIds)> {
        let mut out = Vec::with_capacity(self.kept.len() + self.paths.len());
        for line in self.kept.values() {
            out.push(crate::ledger::record_of_line(line).ok()?);
        }
        let mut runs = HashMap::new();
        for (path, rs) in &self.paths {
            for (i, run) in rs.iter().enumerate() {
                runs.insert(run.net.patch.clone(), (path.clone(), i));
                out.push(Record {
                    seq: run.seq,
                    ts: String::new(),
                    session: None,
                    prev: None,
                    hash: String::new(),
                    body: Body::FilePatch(run.net.clone()),
                });
            }
        }
        out.sort_by_key(|r| r.seq);
        Some((out, runs))
    }
}

/// Adds patch `p` (member `m`) to a simple path's runs.
fn push_patch(runs: &mut Vec<Run>, m: Member, p: &FilePatch, horizon: u64) {
    if let Some(last) = runs.last_mut() {
        let across = last.members.last().is_some_and(|l| l.seq <= horizon) && m.seq > horizon;
        if !across && chains_onto(&last.net, p) {
            extend_net(&mut last.net, p);
            last.members.push(m);
            last.count += 1;
            last.seq = m.seq;
            last.summary = None;
            return;
        }
    }
    runs.push(Run {
        net: p.clone(),
        count: 1,
        seq: m.seq,
        members: vec![m],
        summary: None,
    });
}

/// The reduced ledger of `ws` (see the module doc): from `index/view.bin`
/// extended with what was appended since, or built again from the whole
/// ledger. The view is saved when it grew and the ledger read clean.
/// With `all_calls`, the folded patches' places and calls are read too
/// ([`Reduced::calls_of`]; else only [`Reduced::calls_tail`] answers).
/// `None` when no view can be had (a `--to` names a checkpoint before the
/// ledger's cut, say): the caller reads the whole ledger.
fn read(ws: &Workspace, all_calls: bool) -> Result<Option<Reduced>, WorkspaceError> {
    let mut view = View::load(ws).unwrap_or_default();
    crate::timing("view: loaded");
    let mut got = None;
    if view.anchor.end > 0 {
        got = view.extend(ws, false)?;
        // Every call named (`calls_of`) needs the members file.
        if got.is_some() && all_calls && view.load_members(ws).is_err() {
            got = None;
        }
    }
    let (read, grew) = match got {
        Some(g) => g,
        None => {
            view = View {
                members_loaded: true,
                ..View::default()
            };
            match view.extend(ws, true)? {
                Some(b) => b,
                None => return Ok(None),
            }
        }
    };
    crate::timing("view: extended");
    // Damage seen here stops every writer until `ckpt repair`.
    ws.ledger().note_damage(&read);
    let Some((records, runs)) = view.records() else {
        return Ok(None);
    };
    crate::timing("view: records");
    // A ledger that starts after a cut gc did not plan (records removed
    // by hand) is no base for a view a rollback would trust.
    if let Some(cut) = &read.cut
        && !records.iter().any(|r| crate::ledger::plans_cut(r, cut))
    {
        return Ok(None);
    }
    if grew > 0 && read.corruption.is_none() && read.torn.is_none() {
        view.save(ws);
        crate::timing("view: saved");
    }
    let call_of = records
        .iter()
        .filter_map(|r| match &r.body {
            Body::FilePatch(p) if !runs.contains_key(&p.patch) => {
                Some((p.patch.clone(), p.call.clone()))
            }
            _ => None,
        })
        .collect();
    Ok(Some(Reduced {
        records,
        read,
        view,
        runs,
        call_of,
    }))
}

/// Which calls a rollback through the view takes out.
pub(crate) enum Pick<'a> {
    /// `--last N`: the newest N calls with a change in effect.
    Last(usize),
    /// `--call C`.
    Call(&'a str),
}

/// The records a rollback of `pick` plans from: the reduced view (as
/// [`read`] extends it, never built again here) with every path the
/// picked calls changed read back whole, their calls' own records, and the
/// newest checkpoints. A plan of those calls over these records is the
/// plan over the whole ledger: a path none of them changed is planned
/// only as far as it lies under theirs (not at all), and a folded run
/// of such a path stands for patches of calls older than every picked one
/// (`--last`). Also returns what the read from the view's anchor found,
/// for the caller's damage checks. `None`: the view cannot answer (no
/// view, a call not among the newest ended ones, no checkpoint old
/// enough): the caller reads the whole ledger.
pub(crate) fn for_rollback(
    ws: &Workspace,
    pick: Pick<'_>,
) -> Result<Option<(Vec<Record>, LedgerRead)>, WorkspaceError> {
    let Some(mut view) = View::load(ws) else {
        return Ok(None);
    };
    if view.anchor.end == 0 {
        return Ok(None);
    }
    let Some((read, grew)) = view.extend(ws, false)? else {
        return Ok(None);
    };
    crate::timing("view: extended");
    if grew > 0 {
        view.save(ws);
        crate::timing("view: saved");
    }
    if view.load_members(ws).is_err() {
        return Ok(None);
    }
    crate::timing("view: members read");
    let Some((mut records, runs)) = view.records() else {
        return Ok(None);
    };
    let calls: BTreeSet<String> = match pick {
        Pick::Call(c) => BTreeSet::from([c.to_string()]),
        Pick::Last(n) => view.newest_calls(&records, &runs, n),
    };
    let theirs =
        |p: &FilePatch| calls.contains(&p.call) || p.candidates.iter().any(|c| calls.contains(c));
    // The oldest change of theirs, and the folded paths they changed.
    let mut first = u64::MAX;
    let mut expand = BTreeSet::new();
    for (path, rs) in &view.paths {
        for m in rs.iter().flat_map(|r| &r.members) {
            if calls.contains(view.call(m)) {
                expand.insert(path.clone());
                first = first.min(m.seq);
            }
        }
    }
    for r in &records {
        if let Body::FilePatch(p) = &r.body
            && !runs.contains_key(&p.patch)
            && theirs(p)
        {
            first = first.min(r.seq);
        }
    }
    if first == u64::MAX {
        // Nothing of theirs in the view: the whole read says what.
        return Ok(None);
    }
    let mut spans: Vec<Span> = Vec::new();
    for path in &expand {
        let members = view.paths.get(path).into_iter().flatten();
        spans.extend(
            members
                .flat_map(|r| &r.members)
                .map(|m| (m.seq, m.end, m.len)),
        );
    }
    let mut ended = BTreeSet::new();
    for c in &calls {
        let found: Vec<Span> = view
            .recent_calls
            .iter()
            .filter(|(x, _)| x == c)
            .flat_map(|(_, s)| s.iter().copied())
            .collect();
        if found.is_empty() && !view.open.contains_key(c) {
            return Ok(None);
        }
        if !found.is_empty() {
            ended.insert(c.as_str());
        }
        spans.extend(found);
    }
    crate::timing("view: calls picked");
    let Some(lines) = ws.ledger().read_lines_at(&spans)? else {
        return Ok(None);
    };
    let mut read_back: Vec<Record> = lines.into_iter().map(|(_, r)| r).collect();
    // The newest checkpoint before their changes (what git did since):
    // read newest first until one covers less than the first of them.
    for span in view.recent_checkpoints.iter().rev() {
        let Some(mut ck) = ws.ledger().read_lines_at(&[*span])? else {
            return Ok(None);
        };
        let Some((_, r)) = ck.pop() else {
            return Ok(None);
        };
        let found = matches!(&r.body, Body::Checkpoint(k) if k.upto_seq < first);
        read_back.push(r);
        if found {
            break;
        }
    }
    crate::timing("view: read back");
    // Each ended call read from its start (the plan dates the directories
    // it made from it), and a checkpoint before its changes unless every
    // checkpoint is here.
    for c in &ended {
        let started = read_back
            .iter()
            .any(|r| matches!(&r.body, Body::ToolCall(t) if t.call == *c && t.step == 1));
        if !started {
            return Ok(None);
        }
    }
    let before = read_back
        .iter()
        .any(|r| matches!(&r.body, Body::Checkpoint(k) if k.upto_seq < first));
    if view.checkpoints_dropped && !before {
        return Ok(None);
    }
    records.retain(|r| match &r.body {
        Body::FilePatch(p) => runs
            .get(&p.patch)
            .is_none_or(|(path, _)| !expand.contains(path)),
        _ => true,
    });
    let have: std::collections::HashSet<u64> = records.iter().map(|r| r.seq).collect();
    records.extend(read_back.into_iter().filter(|r| !have.contains(&r.seq)));
    records.sort_by_key(|r| r.seq);
    records.dedup_by_key(|r| r.seq);
    Ok(Some((records, read)))
}

impl View {
    /// The newest `n` calls with a change in effect, as `--last N` picks
    /// them over the whole ledger: by their newest change in effect. Every
    /// folded patch is in effect; a run offers at most its newest `n`
    /// calls, which is all a pick of `n` can take from it.
    fn newest_calls(&self, records: &[Record], runs: &RunIds, n: usize) -> BTreeSet<String> {
        let now = crate::effect::Effects::replay(records, None);
        let mut cand: Vec<(u64, &str)> = now
            .live_agent()
            .into_iter()
            .filter(|(_, p)| !runs.contains_key(&p.patch))
            .map(|(r, p)| (r.seq, p.call.as_str()))
            .collect();
        for run in self.paths.values().flatten() {
            let mut seen: Vec<&str> = Vec::new();
            for m in run.members.iter().rev() {
                let c = self.call(m);
                if !seen.contains(&c) {
                    if seen.len() == n {
                        break;
                    }
                    seen.push(c);
                }
                cand.push((m.seq, c));
            }
        }
        cand.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
        let mut order: Vec<&str> = Vec::new();
        for (_, c) in cand {
            if !order.contains(&c) {
                if order.len() == n {
                    break;
                }
                order.push(c);
            }
        }
        order.into_iter().map(str::to_string).collect()
    }
}

/// What a plan of everything in effect reads: the reduced view, or the
/// whole ledger when none can be had or the caller asks for it.
// One value per command: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Source {
    /// The reduced view.
    Reduced(Reduced),
    /// Every record, and each patch's call.
    Whole(LedgerRead, HashMap<String, String>),
}

impl Source {
    /// The view when `use_view` and one can be had, else the whole ledger.
    /// `all_calls`: [`calls_of`](Self::calls_of) will be asked.
    pub fn read(ws: &Workspace, use_view: bool, all_calls: bool) -> Result<Source, WorkspaceError> {
        if use_view && let Some(r) = read(ws, all_calls)? {
            return Ok(Source::Reduced(r));
        }
        let read = ws.read_ledger()?;
        let call_of = read
            .records
            .iter()
            .filter_map(|r| match &r.body {
                Body::FilePatch(p) => Some((p.patch.clone(), p.call.clone())),
                _ => None,
            })
            .collect();
        Ok(Source::Whole(read, call_of))
    }

    /// The records to plan from.
    pub fn records(&self) -> &[Record] {
        match self {
            Source::Reduced(r) => &r.records,
            Source::Whole(w, _) => &w.records,
        }
    }

    /// What the read found: the tail, any damage.
    pub fn read_info(&self) -> &LedgerRead {
        match self {
            Source::Reduced(r) => &r.read,
            Source::Whole(w, _) => w,
        }
    }

    /// [`Reduced::calls_tail`] of either.
    pub fn calls_tail(&self, ids: &[String], k: usize) -> (usize, Vec<String>) {
        match self {
            Source::Reduced(r) => r.calls_tail(ids, k),
            Source::Whole(..) => {
                let mut by = self.calls_of(ids);
                by.reverse();
                by.dedup();
                let older = by.len().saturating_sub(k);
                (
                    by.len(),
                    by[older..].iter().map(|c| c.to_string()).collect(),
                )
            }
        }
    }

    /// The calls of a report's patch list (`PlannedFile::patches`), in
    /// order (see [`Reduced::calls_of`]; the view's needs `all_calls`).
    pub fn calls_of<'a>(&'a self, ids: &'a [String]) -> Vec<&'a str> {
        match self {
            Source::Reduced(r) => r.calls_of(ids),
            Source::Whole(_, of) => ids
                .iter()
                .filter_map(|i| of.get(i).map(String::as_str))
                .collect(),
        }
    }
}
