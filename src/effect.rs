//! Which recorded changes are in effect: the bookkeeping that makes
//! rollbacks compose (DESIGN §6, DECISIONS "Rollback composes").
//!
//! Every agent `file_patch` (an Edit/Write tool's, a shell call's, the
//! library's) is **in effect** from its record on. A ckpt action that takes
//! patches out of a file (a rollback, `ckpt undo`, a resolve) lists them in
//! its plan, per file (`plan.files[].patches`), and patches it put back in
//! (`redone`); when the action's write of that file is recorded (its
//! `source: "rollback"` patch), or the action ends with the file already as
//! planned (`unchanged`), those patches flip. A ckpt patch is itself in
//! effect until a later action takes it out, which flips back what it had
//! flipped: undoing a rollback puts the agent's patches back in effect.
//!
//! So for any history of calls, user edits, rollbacks and undos, the set of
//! agent patches in effect at any ledger position is known, and a rollback
//! is defined as moving the files from the set in effect now to a target set
//! (`--to C`: the set in effect at C), never by asking whether a file looks
//! like someone else changed it. Files settled by `resolve --keep-user` keep
//! their patches in effect (the file stays as the user has it; a later
//! rollback covering it raises the conflict again).
//!
//! Pure: reads records, never the disk.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::paths::RelPath;
use crate::record::{ActionStatus, ActionType, Body, FilePatch, PatchSource, Record};

/// Whether a patch is the agent's (not ckpt's own, not `ckpt watch`'s record
/// of a user edit).
pub fn is_agent(p: &FilePatch) -> bool {
    !matches!(p.source, PatchSource::Rollback | PatchSource::Watch)
}

/// What one action planned for one path: the patches it takes out and
/// those it puts back in.
#[derive(Default, Clone)]
struct PathPlan {
    out: Vec<String>,
    back: Vec<String>,
}

/// The in-effect state after replaying a prefix of the ledger.
pub struct Effects<'r> {
    /// Every file patch replayed, by id: its record and body.
    patches: HashMap<&'r str, (&'r Record, &'r FilePatch)>,
    /// The patch ids (agent and ckpt) in effect.
    live: HashSet<&'r str>,
    /// What each ckpt patch flipped: (patch id, in effect afterwards).
    flips: HashMap<&'r str, Vec<(String, bool)>>,
}

impl<'r> Effects<'r> {
    /// Replays `records` up to and including `upto` (every record when
    /// `None`).
    pub fn replay(records: &'r [Record], upto: Option<u64>) -> Effects<'r> {
        let mut e = Effects {
            patches: HashMap::new(),
            live: HashSet::new(),
            flips: HashMap::new(),
        };
        // action → path → plan, from each action's `started` record.
        let mut plans: HashMap<&'r str, HashMap<RelPath, PathPlan>> = HashMap::new();
        for r in records {
            if upto.is_some_and(|u| r.seq > u) {
                break;
            }
            match &r.body {
                Body::FilePatch(p) => {
                    e.patches.insert(&p.patch, (r, p));
                    if is_agent(p) {
                        e.live.insert(&p.patch);
                    } else if p.source == PatchSource::Rollback {
                        let plan = plans
                            .get(p.call.as_str())
                            .and_then(|m| m.get(&p.path))
                            .cloned()
                            .unwrap_or_default();
                        let flips = e.flips_of(&plan);
                        e.apply(&flips);
                        e.live.insert(&p.patch);
                        e.flips.insert(&p.patch, flips);
                    }
                }
                Body::Action(a) if a.action_type == ActionType::RollbackFiles => match a.status {
                    ActionStatus::Started => {
                        if let Some(plan) = &a.plan {
                            plans.insert(&a.action, plan_paths(plan));
                        }
                    }
                    _ => {
                        // Files already as planned: their patches flip
                        // without a write.
                        let Some(files) = a
                            .outcome
                            .as_ref()
                            .and_then(|o| o.get("files"))
                            .and_then(Value::as_array)
                        else {
                            continue;
                        };
                        for f in files {
                            if f.get("result").and_then(Value::as_str) != Some("unchanged") {
                                continue;
                            }
                            let Some(path) = path_of(f) else {
                                continue;
                            };
                            if let Some(plan) =
                                plans.get(a.action.as_str()).and_then(|m| m.get(&path))
                            {
                                let flips = e.flips_of(&plan.clone());
                                e.apply(&flips);
                            }
                        }
                    }
                },
                _ => {}
            }
        }
        e
    }

    fn flips_of(&self, plan: &PathPlan) -> Vec<(String, bool)> {
        let mut v = Vec::new();
        for id in &plan.out {
            v.push((id.clone(), false));
            // Taking a ckpt patch out undoes what it did.
            if let Some(f) = self.flips.get(id.as_str()) {
                v.extend(f.iter().map(|(i, s)| (i.clone(), !s)));
            }
        }
        for id in &plan.back {
            v.push((id.clone(), true));
            if let Some(f) = self.flips.get(id.as_str()) {
                v.extend(f.iter().cloned());
            }
        }
        v
    }

    fn apply(&mut self, flips: &[(String, bool)]) {
        for (id, on) in flips {
            let Some(&(_, p)) = self.patches.get(id.as_str()) else {
                continue;
            };
            if *on {
                self.live.insert(&p.patch);
            } else {
                self.live.remove(p.patch.as_str());
            }
        }
    }

    /// Whether patch `id` is in effect.
    pub fn live(&self, id: &str) -> bool {
        self.live.contains(id)
    }

    /// The agent patches in effect, oldest first, with their records.
    pub fn live_agent(&self) -> Vec<(&'r Record, &'r FilePatch)> {
        let mut v: Vec<_> = self
            .live
            .iter()
            .filter_map(|id| self.patches.get(id))
            .filter(|(_, p)| is_agent(p))
            .copied()
            .collect();
        v.sort_by_key(|(r, _)| r.seq);
        v
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
            },
        );
    }
    m
}
