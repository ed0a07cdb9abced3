//! Which recorded changes are in effect: the bookkeeping that makes
//! rollbacks compose (DESIGN §6, DECISIONS "Rollback semantics").
//!
//! Every agent `file_patch` (an Edit/Write tool's, a shell call's, the
//! library's) is **in effect** from its record on. A ckpt action that takes
//! patches out of a file (a rollback, `ckpt undo`, a resolve) lists them in
//! its plan, per file (`plan.files[].patches`), and patches it put back in
//! (`redone`); when the action's write of that file is recorded (its
//! `source: "rollback"` patch), or the action ends with the file already as
//! planned (`unchanged`: a flags-only entry `<action>@<path>` stands for the
//! write), those patches flip. A ckpt patch (or flags-only entry) is itself
//! in effect until a later action takes it out, which flips back what it had
//! flipped: undoing a rollback puts the agent's patches back in effect.
//! A `--to C` action (target `{"to": C}`) sets every change of the files it
//! covers, ckpt's own included, to its state at C: rollbacks made after C
//! are taken back with it.
//!
//! So for any history of calls, user edits, rollbacks and undos, the set of
//! agent patches in effect at any ledger position is known, and a rollback
//! is defined as moving the files from the set in effect now to a target set,
//! never by asking whether a file looks like someone else changed it. Files
//! settled by `resolve --keep-user` keep their patches in effect (the file
//! stays as the user has it; a later rollback covering it raises the
//! conflict again).
//!
//! Pure: reads records, never the disk.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::Value;

use crate::paths::RelPath;
use crate::record::{ActionStatus, ActionType, Body, FilePatch, PatchSource, Record};

/// Whether a patch is the agent's (not ckpt's own, not `ckpt watch`'s record
/// of a user edit).
pub fn is_agent(p: &FilePatch) -> bool {
    !matches!(p.source, PatchSource::Rollback | PatchSource::Watch)
}

/// Whether `p` continues the net step `net`: its before is the step's
/// after, and the same calls could have made both (the planner makes one
/// step of consecutive patches of a path, `rollback.rs`'s `runs`; the
/// reduced view folds them alike).
pub(crate) fn chains_onto(net: &FilePatch, p: &FilePatch) -> bool {
    let chained = net.after_hash == p.before_hash
        && (net.after_hash.is_none() || net.after_mode == p.before_mode);
    chained && net.candidates == p.candidates
}

/// `net` followed by `p`, as one step (see [`chains_onto`]).
pub(crate) fn extend_net(net: &mut FilePatch, p: &FilePatch) {
    net.after_hash = p.after_hash;
    net.after_mode = p.after_mode.clone();
    net.after_perm = p.after_perm;
    net.binary |= p.binary;
    net.patch_ref = p.patch_ref.clone();
    net.patch = p.patch.clone();
}

/// What one action planned for one path: the patches it takes out and
/// those it puts back in.
#[derive(Default, Clone)]
struct PathPlan {
    out: Vec<String>,
    back: Vec<String>,
    /// The content the plan leaves (its `to` hash; `None`: absent).
    to: Option<String>,
}

/// How an action flips what it covers.
#[derive(Clone)]
enum Mode {
    /// Take out and put back what its plan lists.
    Listed(HashMap<RelPath, PathPlan>),
    /// `--to`: every change of the file as at this ledger position.
    Reset(HashMap<RelPath, PathPlan>, u64),
}

/// The in-effect state after replaying a prefix of the ledger.
pub struct Effects<'r> {
    /// Every file patch replayed, by id: its record and body.
    patches: HashMap<&'r str, (&'r Record, &'r FilePatch)>,
    /// The ids (agent, ckpt and flags-only entries) in effect.
    live: HashSet<String>,
    /// What each ckpt patch or flags-only entry flipped: (id, in effect
    /// afterwards).
    flips: HashMap<String, Vec<(String, bool)>>,
    /// Flags-only entries: (action, path, id, seq of the action's end).
    pseudo: Vec<(String, RelPath, String, u64, Option<String>)>,
    /// Every id that changed a path (either side of a rename), oldest first.
    by_path: HashMap<RelPath, Vec<String>>,
}

impl<'r> Effects<'r> {
    /// Replays `records` up to and including `upto` (every record when
    /// `None`).
    pub fn replay(records: &'r [Record], upto: Option<u64>) -> Effects<'r> {
        let mut e = Effects {
            patches: HashMap::new(),
            live: HashSet::new(),
            flips: HashMap::new(),
            pseudo: Vec::new(),
            by_path: HashMap::new(),
        };
        // The positions `--to` actions reset to, and the set in effect at each.
        let ck: HashMap<&str, u64> = records
            .iter()
            .filter_map(|r| match &r.body {
                Body::Checkpoint(c) => Some((c.checkpoint.as_str(), c.upto_seq)),
                _ => None,
            })
            .collect();
        let mut resets: BTreeSet<u64> = BTreeSet::new();
        for r in records {
            if let Body::Action(a) = &r.body
                && let Some(c) = a.target.get("to").and_then(Value::as_str)
                && let Some(&s) = ck.get(c)
            {
                resets.insert(s);
            }
        }
        let mut snapshots: HashMap<u64, HashSet<String>> = HashMap::new();
        let mut modes: HashMap<&'r str, Mode> = HashMap::new();
        for r in records {
            if upto.is_some_and(|u| r.seq > u) {
                break;
            }
            while let Some(&s) = resets.first() {
                if s >= r.seq {
                    break;
                }
                resets.pop_first();
                snapshots.insert(s, e.live.clone());
            }
            match &r.body {
                Body::FilePatch(p) => {
                    e.patches.insert(&p.patch, (r, p));
                    e.note_path(&p.path, &p.patch);
                    if let Some(f) = &p.from_path {
                        e.note_path(f, &p.patch);
                    }
                    if is_agent(p) {
                        e.live.insert(p.patch.clone());
                    } else if p.source == PatchSource::Rollback {
                        let flips = match modes.get(p.call.as_str()) {
                            Some(m) => e.effective(e.flips_for(m, &p.path, &snapshots)),
                            None => Vec::new(),
                        };
                        e.apply(&flips);
                        e.live.insert(p.patch.clone());
                        e.flips.insert(p.patch.clone(), flips);
                    }
                }
                Body::Action(a) if a.action_type == ActionType::RollbackFiles => match a.status {
                    ActionStatus::Started => {
                        if let Some(plan) = &a.plan {
                            let paths = plan_paths(plan);
                            let reset = a
                                .target
                                .get("to")
                                .and_then(Value::as_str)
                                .and_then(|c| ck.get(c));
                            modes.insert(
                                &a.action,
                                match reset {
                                    Some(&s) => Mode::Reset(paths, s),
                                    None => Mode::Listed(paths),
                                },
                            );
                        }
                    }
                    _ => {
                        // Files already as planned flip without a write.
                        let Some(files) = a
                            .outcome
                            .as_ref()
                            .and_then(|o| o.get("files"))
                            .and_then(Value::as_array)
                        else {
                            continue;
                        };
                        let Some(mode) = modes.get(a.action.as_str()).cloned() else {
                            continue;
                        };
                        for f in files {
                            if f.get("result").and_then(Value::as_str) != Some("unchanged") {
                                continue;
                            }
                            let Some(path) = path_of(f) else {
                                continue;
                            };
                            let flips = e.effective(e.flips_for(&mode, &path, &snapshots));
                            if flips.is_empty() {
                                continue;
                            }
                            e.apply(&flips);
                            let id = format!("{}@{}", a.action, path.display());
                            e.note_path(&path, &id);
                            e.live.insert(id.clone());
                            e.flips.insert(id.clone(), flips);
                            let found = match &mode {
                                Mode::Listed(m) | Mode::Reset(m, _) => {
                                    m.get(&path).and_then(|pp| pp.to.clone())
                                }
                            };
                            e.pseudo.push((a.action.clone(), path, id, r.seq, found));
                        }
                    }
                },
                _ => {}
            }
        }
        e
    }

    fn note_path(&mut self, path: &RelPath, id: &str) {
        self.by_path
            .entry(path.clone())
            .or_default()
            .push(id.to_string());
    }

    /// The flips an action's write of `path` makes.
    fn flips_for(
        &self,
        mode: &Mode,
        path: &RelPath,
        snapshots: &HashMap<u64, HashSet<String>>,
    ) -> Vec<(String, bool)> {
        match mode {
            Mode::Listed(plans) => self.flips_of(&plans.get(path).cloned().unwrap_or_default()),
            Mode::Reset(plans, at) => {
                let Some(then) = snapshots.get(at) else {
                    return self.flips_of(&plans.get(path).cloned().unwrap_or_default());
                };
                let mut v = Vec::new();
                let mut seen = HashSet::new();
                for id in self.by_path.get(path).into_iter().flatten() {
                    if !seen.insert(id) {
                        continue;
                    }
                    let want = then.contains(id);
                    if self.live.contains(id) != want {
                        v.push((id.clone(), want));
                    }
                }
                v
            }
        }
    }

    fn flips_of(&self, plan: &PathPlan) -> Vec<(String, bool)> {
        let mut v = Vec::new();
        for id in &plan.out {
            v.push((id.clone(), false));
            // Taking a ckpt patch out undoes what it did.
            if let Some(f) = self.flips.get(id) {
                v.extend(f.iter().map(|(i, s)| (i.clone(), !s)));
            }
        }
        for id in &plan.back {
            v.push((id.clone(), true));
            if let Some(f) = self.flips.get(id) {
                v.extend(f.iter().cloned());
            }
        }
        v
    }

    /// The flips of `flips` that change something, in order (a flip to
    /// the state an id is already in is dropped), so that undoing them
    /// restores exactly what was.
    fn effective(&self, flips: Vec<(String, bool)>) -> Vec<(String, bool)> {
        let mut now: HashMap<String, bool> = HashMap::new();
        let mut out = Vec::new();
        for (id, on) in flips {
            let cur = *now
                .entry(id.clone())
                .or_insert_with(|| self.live.contains(&id));
            if cur != on {
                now.insert(id.clone(), on);
                out.push((id, on));
            }
        }
        out
    }

    fn apply(&mut self, flips: &[(String, bool)]) {
        for (id, on) in flips {
            if *on {
                self.live.insert(id.clone());
            } else {
                self.live.remove(id);
            }
        }
    }

    /// Whether patch (or flags-only entry) `id` is in effect.
    pub fn live(&self, id: &str) -> bool {
        self.live.contains(id)
    }

    /// The ids a ckpt patch or flags-only entry flipped when it was made.
    pub fn flipped_by(&self, id: &str) -> impl Iterator<Item = &str> {
        self.flips
            .get(id)
            .into_iter()
            .flatten()
            .map(|(i, _)| i.as_str())
    }

    /// Every id in effect (agent and ckpt patches, flags-only entries).
    pub fn live_ids(&self) -> HashSet<String> {
        self.live.clone()
    }

    /// The agent patches in effect, oldest first, with their records.
    pub fn live_agent(&self) -> Vec<(&'r Record, &'r FilePatch)> {
        let mut v: Vec<_> = self
            .live
            .iter()
            .filter_map(|id| self.patches.get(id.as_str()))
            .filter(|(_, p)| is_agent(p))
            .copied()
            .collect();
        v.sort_by_key(|(r, _)| r.seq);
        v
    }

    /// The flags-only entries of `action` still in effect: (path, id, the
    /// content hash the action found the file at).
    pub fn live_pseudo_of(&self, action: &str) -> Vec<(RelPath, String, Option<String>)> {
        self.pseudo
            .iter()
            .filter(|(a, _, id, _, _)| a == action && self.live.contains(id))
            .map(|(_, p, id, _, h)| (p.clone(), id.clone(), h.clone()))
            .collect()
    }

    /// The paths of ckpt's own changes (patches, flags-only entries) still
    /// in effect that were recorded after `seq`: what a `--to` that position
    /// takes back even where no agent change moves.
    pub fn ckpt_paths_after(&self, seq: u64) -> BTreeSet<RelPath> {
        let mut out = BTreeSet::new();
        for (r, p) in self.patches.values() {
            if p.source == PatchSource::Rollback && r.seq > seq && self.live.contains(&p.patch) {
                out.insert(p.path.clone());
            }
        }
        for (_, path, id, s, _) in &self.pseudo {
            if *s > seq && self.live.contains(id) {
                out.insert(path.clone());
            }
        }
        out
    }
}

fn path_of(f: &Value) -> Option<RelPath> {
    serde_json::from_value(f.get("path")?.clone()).ok()
}

fn plan_paths(plan: &Value) -> HashMap<RelPath, PathPlan> {
    let mut m = HashMap::new();
    let Some(files) = plan.get("files").and_then(Value::as_array) else {
        return m;
    };
    let ids = |f: &Value, k: &str| -> Vec<String> {
        f.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    for f in files {
        let Some(path) = path_of(f) else {
            continue;
        };
        m.insert(
            path,
            PathPlan {
                out: ids(f, "patches"),
                back: ids(f, "redone"),
                to: f
                    .get("to")
                    .and_then(|t| t.get("hash"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
            },
        );
    }
    m
}
