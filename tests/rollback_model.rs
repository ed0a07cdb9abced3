//! Model-based test of rollback over random histories, driving the real `ckpt`
//! binary the way an agent and a user would.
//!
//! A history is a git repository with a few "slot" files and a few whole files.
//! A slot file is a fixed sequence of slots, each preceded by two unique
//! separator lines (`s3-a`, `s3-b`; the file ends with `end-a`, `end-b`), so a
//! three-way merge never sees two slots' changes as adjacent. A slot is one
//! line or absent (that is how insertions and deletions happen); every write
//! uses a value no other write uses. Each slot file's slots are split into
//! agent slots and user slots: the agent only ever changes agent slots, the
//! user only user slots, so no conflict with the user is legitimate. A whole
//! file is one agent "slot" whose value is the file's one line, or absent (the
//! agent creates and deletes it).
//!
//! Steps, at random: agent calls (Claude Code Edit and Write hooks, Bash hooks
//! and `ckpt exec` shell calls changing several files, creating and deleting
//! whole files, in two sessions), user edits of user slots, checkpoints,
//! `rollback --to/--call/--session/--last/--action`, `undo`, `redo`,
//! `resolve`, and rarely a deliberate overlap (the user edits an agent slot),
//! after which that file is "tainted".
//!
//! The model keeps, per file, every change as an entity: the agent's (one per
//! call and file, with the `(slot, old, new)` it made) and ckpt's own (one per
//! rollback and file: what that rollback changed, and which entities it took
//! out or put back). Each entity is in effect or not. Checkpoints snapshot the
//! values and the in-effect flags. From that alone:
//! - `--to C` (untainted files): no conflict; every agent slot (and whole file)
//!   holds its value at C; in-effect flags are those at C, entities made after C
//!   (rollbacks included) are out.
//! - `--call`, `--session`, `--last N`, `undo` take out the selected in-effect
//!   agent changes. Per slot they touch, undone three-way newest first (a run
//!   of consecutive selected changes as one step), the slot returns to the
//!   `old` value of the earliest selected change. A conflict is allowed only
//!   where an unselected in-effect agent change of the same slot comes after a
//!   selected one, and required where a step cannot apply (the slot holds
//!   neither side: a clean result would overwrite a later call's work). The
//!   file list and each file's `patches` must match the selection. `--last N`
//!   counts the newest N calls with changes in effect, and `undo` takes out
//!   what came after the newest checkpoint that still has in-effect agent
//!   changes after it, so both act as an undo stack.
//! - `--action R` and `redo` (the newest `undo` whose changes are in effect)
//!   reverse what R did to each file, three-way: a file R changed (from y to
//!   z) goes back to y where it holds z or y, else it must conflict; a later
//!   in-effect agent change of a slot R changed allows a conflict. The flags R
//!   changed are flipped back. Right after R, `--action R` returns the
//!   workspace byte for byte (directories included).
//! - every command keeps every user slot; a conflicted file is left byte for
//!   byte; a file not listed is not touched; exit codes are 0 (no conflict) or
//!   3 (conflicts raised); `ckpt verify` passes every few steps and at the end.
//! - every agent call records exactly one `file_patch` per file it changed,
//!   owned by the call, with the right before and after hashes.
//!
//! Tainted files skip the exact content checks (conflicts there may or may not
//! be raised), but a conflict must still leave them byte for byte, user slots
//! are kept, and results must be documented values. Conflicts are resolved
//! with `--keep-user` (nothing changes, the changes stay in effect) or
//! `--apply-agent` (the conflicting changes go out; the file is tainted from
//! then on, since ckpt's merge through a later call's change decides its
//! content).
//!
//! Running: `cargo test --test rollback_model` runs `CKPT_MODEL_CASES` histories
//! (default 200, of 15 to 30 steps: about 30 s of wall time on a quiet 2-core
//! machine with the debug build, 60 s when other builds share it), on two
//! threads (`CKPT_MODEL_THREADS`).
//! A long run: `CKPT_MODEL_CASES=5000 cargo test --test rollback_model`.
//! A failure prints the history's seed, its steps and a shell script that
//! replays it (`CKPT=path/to/ckpt sh replay.sh`); `CKPT_SEED=S cargo test
//! --test rollback_model` replays that one history (with `CKPT_MODEL_CASES`,
//! that many from it: another range). `CKPT_MODEL_STEPS` sets the
//! most steps per history, `CKPT_MODEL_KEEP_GOING=1` runs every case and lists
//! every failing seed.
//!
//! One reading is open: after `--to C`, is a rollback R made after C still in
//! effect? This model says no (R is taken back, so `--action R` and a `redo`
//! of it find nothing to do); `CKPT_MODEL_TO_KEEPS_ROLLBACKS=1` models the
//! other reading (only agent changes move; R's own patches stay in effect, and
//! `--action R` flips back what R flipped).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use serde_json::{Value, json};

use crate::common::{Entry, Rng, Run, TestEnv, git, run_with_stdin, seed, tree};

/// Rollback tests do not need real syncs.
const FAST: (&str, &str) = ("CKPT_TEST_FSYNC", "0");
const SESSIONS: [&str; 2] = ["s1", "s2"];
const SLOT_PATHS: [&str; 4] = ["a.txt", "src/b.txt", "src/deep/c.txt", "doc/d.md"];
/// Whole files: the first exists (committed) at the start, the second not.
const WHOLE_PATHS: [&str; 2] = ["n1.txt", "gen/n0.txt"];
const RESULTS: [&str; 8] = [
    "restored",
    "merged",
    "deleted",
    "recreated",
    "unchanged",
    "conflict",
    "raced",
    "failed",
];
const DEFAULT_CASES: u64 = 200;
const DEFAULT_STEPS: u64 = 30;
const DEFAULT_SEED: u64 = 0x00c0_ffee_5eed;
const VERIFY_EVERY: usize = 5;
const STATUS_EVERY: usize = 3;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[test]
fn random_histories_match_the_model() {
    let base = seed(DEFAULT_SEED);
    let one = std::env::var("CKPT_SEED").is_ok();
    // `CKPT_SEED` alone replays one history; with `CKPT_MODEL_CASES`, a
    // run of that many from there.
    let cases = env_u64("CKPT_MODEL_CASES").unwrap_or(if one { 1 } else { DEFAULT_CASES });
    let keep_going = env_flag("CKPT_MODEL_KEEP_GOING");
    // History i has seed base + i, so `CKPT_SEED=base` replays the first.
    let seeds: Vec<u64> = (0..cases).map(|i| base.wrapping_add(i)).collect();
    // Histories panic inside `catch_unwind`: say where, quietly. A backtrace
    // would load the test binary's debug info, and every later `fork` of this
    // (then much larger) process would cost more than the history itself.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANICKED_AT.with(|w| *w.borrow_mut() = at);
    }));
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let failures: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
    let started = Instant::now();
    let threads = if one {
        1
    } else {
        env_u64("CKPT_MODEL_THREADS").unwrap_or(2).max(1)
    };
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&sd) = seeds.get(i as usize) else {
                        return;
                    };
                    if let Err(report) = run_history(sd) {
                        eprintln!("FAILED: {}", report.lines().next().unwrap_or_default());
                        failures.lock().unwrap().push((sd, report));
                        if !keep_going {
                            stop.store(true, Ordering::SeqCst);
                        }
                    }
                }
            });
        }
    });
    std::panic::set_hook(default_hook);
    let failures = failures.into_inner().unwrap();
    let stats: Vec<String> = STATS
        .lock()
        .unwrap()
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    eprintln!(
        "{} histories in {:.1} s, {} failed; exercised: {}",
        next.load(Ordering::SeqCst).min(cases),
        started.elapsed().as_secs_f64(),
        failures.len(),
        stats.join(", ")
    );
    if let Some((sd, report)) = failures.first() {
        let all: Vec<String> = failures.iter().map(|(s, _)| s.to_string()).collect();
        panic!(
            "history failed: seed {sd} (replay with CKPT_SEED={sd}); failing seeds: {}\n{report}",
            all.join(" ")
        );
    }
}

thread_local! {
    /// Where the last panic on this thread came from.
    static PANICKED_AT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// How often each kind of step and result came up, over every history.
static STATS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

fn count(what: impl Into<String>) {
    *STATS.lock().unwrap().entry(what.into()).or_default() += 1;
}

/// Runs one history; on failure, the message, the steps and a replay script.
fn run_history(sd: u64) -> Result<(), String> {
    let max_steps = env_u64("CKPT_MODEL_STEPS").unwrap_or(DEFAULT_STEPS).max(1);
    let mut slot: Option<H> = None;
    let r = catch_unwind(AssertUnwindSafe(|| {
        let h = slot.insert(H::new(sd));
        let n = max_steps / 2 + h.rng.below(max_steps / 2 + 1);
        for _ in 0..n.max(1) {
            h.step();
        }
        h.verify();
    }));
    match r {
        Ok(()) => Ok(()),
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(panic)".to_string());
            let at = PANICKED_AT.with(|w| w.borrow().clone());
            let msg = format!("{msg}\n(at {at})");
            let Some(h) = slot else {
                return Err(format!("seed {sd}: setting up the workspace: {msg}"));
            };
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rollback_model");
            let file = dir.join(format!("seed-{sd}.sh"));
            let saved = std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(&file, h.script.join("\n") + "\n"));
            let replay = match saved {
                Ok(()) => format!("CKPT=path/to/ckpt sh {}", file.display()),
                Err(e) => format!("(not saved: {e})"),
            };
            Err(format!(
                "seed {sd}, step {}: {msg}\n--- steps\n{}\n--- replay: {replay}",
                h.step,
                h.log.join("\n"),
            ))
        }
    }
}

// ------------------------------------------------------------------ files

/// A slot's value: one line, or absent.
type Val = Option<String>;

struct Spec {
    path: &'static str,
    /// A whole file: one agent slot, the file's one line (absent = no file).
    whole: bool,
    /// Per slot: the agent's (true) or the user's.
    agent: Vec<bool>,
}

impl Spec {
    fn render(&self, v: &[Val]) -> Option<String> {
        if self.whole {
            return v[0].as_ref().map(|s| format!("{s}\n"));
        }
        let mut out = String::new();
        for (i, x) in v.iter().enumerate() {
            out.push_str(&format!("s{i}-a\ns{i}-b\n"));
            if let Some(x) = x {
                out.push_str(x);
                out.push('\n');
            }
        }
        out.push_str("end-a\nend-b\n");
        Some(out)
    }

    fn parse(&self, b: Option<&[u8]>) -> Result<Vec<Val>, String> {
        let n = self.agent.len();
        let Some(b) = b else {
            return if self.whole {
                Ok(vec![None])
            } else {
                Err("missing".into())
            };
        };
        let s = std::str::from_utf8(b).map_err(|_| "not UTF-8".to_string())?;
        let Some(body) = s.strip_suffix('\n') else {
            return Err(format!("no final newline: {s:?}"));
        };
        let lines: Vec<&str> = body.split('\n').collect();
        if self.whole {
            return if lines.len() == 1 {
                Ok(vec![Some(lines[0].to_string())])
            } else {
                Err(format!("not one line: {s:?}"))
            };
        }
        let bad = || format!("not a slot file: {s:?}");
        let mut out = Vec::new();
        let mut i = 0;
        for k in 0..n {
            if lines.get(i).copied() != Some(format!("s{k}-a").as_str())
                || lines.get(i + 1).copied() != Some(format!("s{k}-b").as_str())
            {
                return Err(bad());
            }
            i += 2;
            let next = if k + 1 < n {
                format!("s{}-a", k + 1)
            } else {
                "end-a".to_string()
            };
            match lines.get(i) {
                Some(l) if *l != next => {
                    out.push(Some(l.to_string()));
                    i += 1;
                }
                _ => out.push(None),
            }
        }
        if lines.get(i).copied() != Some("end-a")
            || lines.get(i + 1).copied() != Some("end-b")
            || i + 2 != lines.len()
        {
            return Err(bad());
        }
        Ok(out)
    }

    fn agent_slots(&self) -> Vec<usize> {
        (0..self.agent.len()).filter(|&s| self.agent[s]).collect()
    }

    fn user_slots(&self) -> Vec<usize> {
        (0..self.agent.len()).filter(|&s| !self.agent[s]).collect()
    }
}

// ------------------------------------------------------------------ model

/// One change of one file: an agent call's, or ckpt's own (a rollback's).
#[derive(Clone, Debug)]
struct Ent {
    file: usize,
    t: u64,
    /// `(slot, old, new)` of every slot it changed.
    slots: Vec<(usize, Val, Val)>,
    live: bool,
    /// The agent's change (else ckpt's).
    agent: bool,
    /// The patch id (agent changes).
    patch: Option<String>,
    /// The agent changes of the file in effect when this one was made.
    base: Vec<usize>,
    /// ckpt's: the file's values it left.
    left: Option<Vec<Val>>,
}

struct Call {
    id: String,
    session: usize,
    ents: Vec<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Rollback,
    Undo,
    Redo,
    Resolve,
}

/// `(entity, in effect before, in effect after)`.
type Delta = Vec<(usize, bool, bool)>;

struct Act {
    id: String,
    kind: Kind,
    /// Per file it touched: its own entity there and the flags it changed.
    per_file: Vec<(usize, usize, Delta)>,
}

struct Ck {
    id: String,
    var: String,
    t: u64,
    vals: Vec<Vec<Val>>,
    live: Vec<bool>,
}

struct OpenConflict {
    id: String,
    var: String,
    file: usize,
    delta: Delta,
    bytes: Option<Vec<u8>>,
}

/// What a rollback should do to one file.
#[derive(Debug, Default)]
struct FilePlan {
    delta: Delta,
    /// Every slot's expected value if the file is not in conflict (None: tainted).
    expect: Option<Vec<Val>>,
    allowed: bool,
    required: bool,
    /// The agent patches a call-like selection takes out of this file.
    patches: Option<BTreeSet<String>>,
}

#[derive(Debug, Default)]
struct Plan {
    files: BTreeMap<usize, FilePlan>,
    /// The listed files must be exactly the planned ones.
    strict: bool,
    what: String,
}

/// The selectors.
enum Sel {
    To(usize),
    Call(usize),
    Session(usize),
    Last(usize),
    Action(usize),
    Undo,
    Redo,
}

/// One history: the workspace, the model, and what was done.
struct H {
    env: TestEnv,
    rng: Rng,
    specs: Vec<Spec>,
    /// Current values (the disk's, checked for untainted files).
    vals: Vec<Vec<Val>>,
    tainted: Vec<bool>,
    /// Files where a change was put back (`--action`, `redo`) under a later
    /// agent change still in effect: ckpt keeps each change at its place in
    /// history, so a later `--to` that has to take the later change out from
    /// under it may raise a conflict (DECISIONS, "Rollback semantics").
    reordered: Vec<bool>,
    ents: Vec<Ent>,
    calls: Vec<Call>,
    acts: Vec<Act>,
    cks: Vec<Ck>,
    conflicts: Vec<OpenConflict>,
    t: u64,
    step: usize,
    ledger_off: usize,
    log: Vec<String>,
    script: Vec<String>,
    ws_str: String,
    /// `CKPT_MODEL_TO_KEEPS_ROLLBACKS`: `--to C` leaves ckpt's own patches made
    /// after C in effect (see the doc comment).
    to_keeps_rollbacks: bool,
    conflict_vars: usize,
}

fn sha(b: &[u8]) -> String {
    ckpt::ContentHash::of(b).to_string()
}

fn show(v: &[Val]) -> String {
    let parts: Vec<String> = v
        .iter()
        .map(|x| x.clone().unwrap_or_else(|| "∅".into()))
        .collect();
    format!("[{}]", parts.join(" "))
}

impl H {
    fn new(sd: u64) -> H {
        let mut rng = Rng(splitmix(sd) | 1);
        let mut paths: Vec<&'static str> = SLOT_PATHS.to_vec();
        let k = 2 + rng.below(2) as usize;
        let mut specs = Vec::new();
        for _ in 0..k {
            let p = paths.remove(rng.below(paths.len() as u64) as usize);
            let n = 4 + rng.below(3) as usize;
            let mut agent: Vec<bool> = (0..n).map(|_| rng.below(2) == 0).collect();
            let a = rng.below(n as u64) as usize;
            let u = (a + 1 + rng.below(n as u64 - 1) as usize) % n;
            agent[a] = true;
            agent[u] = false;
            specs.push(Spec {
                path: p,
                whole: false,
                agent,
            });
        }
        for p in WHOLE_PATHS {
            specs.push(Spec {
                path: p,
                whole: true,
                agent: vec![true],
            });
        }
        let vals: Vec<Vec<Val>> = specs
            .iter()
            .map(|s| {
                if s.whole {
                    vec![(s.path == WHOLE_PATHS[0]).then(|| "W-base".to_string())]
                } else {
                    (0..s.agent.len())
                        .map(|i| (rng.below(5) != 0).then(|| format!("B-{i}")))
                        .collect()
                }
            })
            .collect();
        let env = TestEnv::new();
        let ws_str = env.ws.to_str().unwrap().to_string();
        let mut h = H {
            env,
            rng,
            tainted: vec![false; specs.len()],
            reordered: vec![false; specs.len()],
            specs,
            vals,
            ents: Vec::new(),
            calls: Vec::new(),
            acts: Vec::new(),
            cks: Vec::new(),
            conflicts: Vec::new(),
            t: 0,
            step: 0,
            ledger_off: 0,
            log: Vec::new(),
            script: Vec::new(),
            ws_str,
            to_keeps_rollbacks: env_flag("CKPT_MODEL_TO_KEEPS_ROLLBACKS"),
            conflict_vars: 0,
        };
        h.script
            .push(format!("#!/bin/sh\n# ckpt rollback model, seed {sd}"));
        h.script.push(
            "CKPT=${CKPT:-ckpt}; export CKPT_TEST_FSYNC=0\n\
             W=$(mktemp -d)/ws; mkdir -p \"$W\"; cd \"$W\" || exit 1; export CKPT_WORKSPACE=\"$W\"; echo \"workspace: $W\""
                .to_string(),
        );
        for f in 0..h.specs.len() {
            if let Some(c) = h.specs[f].render(&h.vals[f]) {
                h.env.write(h.specs[f].path, c.as_bytes());
                h.script.push(write_line(h.specs[f].path, &c));
            }
        }
        git(&h.env, &["init", "-q"]);
        git(&h.env, &["add", "-A"]);
        git(&h.env, &["commit", "-qm", "base"]);
        h.script.push(
            "git init -q && git add -A && git -c user.name=t -c user.email=t@e commit -qm base\n$CKPT init"
                .to_string(),
        );
        let r = h.ck(&["init"]);
        assert_eq!(r.code, 0, "init: {}", r.stderr);
        h.new_records();
        let layout: Vec<String> = h
            .specs
            .iter()
            .zip(&h.vals)
            .map(|(s, v)| {
                let who: String = s.agent.iter().map(|&a| if a { 'A' } else { 'U' }).collect();
                format!("{} {who} {}", s.path, show(v))
            })
            .collect();
        h.log.push(format!("files: {}", layout.join("; ")));
        h
    }

    fn ck(&self, args: &[&str]) -> Run {
        self.env.ckpt_env(args, &[FAST])
    }

    /// `ckpt ARGS --json`: the exit code and the document (Null when empty).
    fn ckj(&self, args: &[String]) -> (i32, Value, String) {
        let mut a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        a.push("--json");
        let r = self.ck(&a);
        let v = if r.stdout.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&r.stdout).unwrap_or_else(|e| {
                panic!(
                    "ckpt {args:?}: stdout is not JSON ({e}): {}\nstderr: {}",
                    r.stdout, r.stderr
                )
            })
        };
        (r.code, v, r.stderr)
    }

    fn tick(&mut self) -> u64 {
        self.t += 1;
        self.t
    }

    fn path(&self, f: usize) -> PathBuf {
        self.env.ws.join(self.specs[f].path)
    }

    fn disk(&self) -> Vec<Option<Vec<u8>>> {
        (0..self.specs.len())
            .map(|f| std::fs::read(self.path(f)).ok())
            .collect()
    }

    fn parse_disk(&self, disk: &[Option<Vec<u8>>]) -> Vec<Vec<Val>> {
        (0..self.specs.len())
            .map(|f| {
                self.specs[f]
                    .parse(disk[f].as_deref())
                    .unwrap_or_else(|e| panic!("{}: {e}", self.specs[f].path))
            })
            .collect()
    }

    /// The disk matches the model (untainted files); tainted files are read.
    fn check_disk(&mut self, when: &str) {
        let disk = self.disk();
        let now = self.parse_disk(&disk);
        for (f, v) in now.iter().enumerate() {
            if !self.tainted[f] {
                assert_eq!(
                    show(v),
                    show(&self.vals[f]),
                    "{when}: {} differs from the model (left: disk)",
                    self.specs[f].path
                );
            }
        }
        self.vals = now;
    }

    fn new_records(&mut self) -> Vec<Value> {
        let bytes = std::fs::read(self.env.ledger_path()).unwrap_or_default();
        let tail = &bytes[self.ledger_off.min(bytes.len())..];
        let Some(end) = tail.iter().rposition(|&b| b == b'\n') else {
            return Vec::new();
        };
        let out = tail[..end]
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("ledger line is JSON"))
            .collect();
        self.ledger_off += end + 1;
        out
    }

    fn fresh_slot_value(&mut self, f: usize, s: usize, cur: &Val, tag: char) -> Val {
        if cur.is_some() && self.rng.below(5) == 0 {
            None
        } else {
            Some(format!("{tag}-{}-{f}-{s}", self.step))
        }
    }

    /// New values for `f`: 1-2 agent slots changed, or a whole file's new state.
    fn agent_change(&mut self, f: usize, allow_delete: bool) -> Vec<Val> {
        let mut v = self.vals[f].clone();
        if self.specs[f].whole {
            if v[0].is_some() && allow_delete && self.rng.below(3) == 0 {
                v[0] = None;
            } else {
                v[0] = Some(format!("W-{}-{f}", self.step));
            }
            return v;
        }
        let mut slots = self.specs[f].agent_slots();
        let k = 1 + self.rng.below(slots.len().min(2) as u64) as usize;
        for _ in 0..k {
            let s = slots.remove(self.rng.below(slots.len() as u64) as usize);
            let cur = v[s].clone();
            v[s] = self.fresh_slot_value(f, s, &cur, 'A');
        }
        v
    }

    // -------------------------------------------------------------- steps

    fn step(&mut self) {
        self.step += 1;
        let roll = self.rng.below(100);
        match roll {
            0..=34 => self.agent_call(),
            35..=44 => self.user_edit(),
            45 => self.taint(),
            46..=54 => self.checkpoint(),
            55..=61 => match self.cks.len() {
                0 => self.checkpoint(),
                n => {
                    let c = self.rng.below(n as u64) as usize;
                    self.rollback(Sel::To(c));
                }
            },
            62..=68 => {
                if self.calls.is_empty() {
                    return self.agent_call();
                }
                let live: Vec<usize> = (0..self.calls.len())
                    .filter(|&c| self.call_live(c))
                    .collect();
                let c = if !live.is_empty() && self.rng.below(5) != 0 {
                    live[self.rng.below(live.len() as u64) as usize]
                } else {
                    self.rng.below(self.calls.len() as u64) as usize
                };
                self.rollback(Sel::Call(c));
            }
            69..=72 => {
                let used: Vec<usize> = (0..2)
                    .filter(|&s| self.calls.iter().any(|c| c.session == s))
                    .collect();
                if used.is_empty() {
                    return self.agent_call();
                }
                let s = used[self.rng.below(used.len() as u64) as usize];
                self.rollback(Sel::Session(s));
            }
            73..=78 => {
                if self.calls.is_empty() {
                    return self.agent_call();
                }
                let n = 1 + self.rng.below(3) as usize;
                self.rollback(Sel::Last(n));
            }
            79..=83 => {
                let targets: Vec<usize> = (0..self.acts.len())
                    .filter(|&a| self.acts[a].kind != Kind::Resolve)
                    .collect();
                if targets.is_empty() {
                    return self.agent_call();
                }
                let a = targets[self.rng.below(targets.len() as u64) as usize];
                self.rollback(Sel::Action(a));
            }
            84..=90 => self.rollback(Sel::Undo),
            91..=95 => self.rollback(Sel::Redo),
            _ => {
                if self.conflicts.is_empty() {
                    self.agent_call()
                } else {
                    self.resolve()
                }
            }
        }
        self.check_disk("after the step");
        if self.step.is_multiple_of(VERIFY_EVERY) {
            self.verify();
        }
        if self.step.is_multiple_of(STATUS_EVERY) {
            self.status_from_the_view_matches_the_whole_read();
        }
    }

    /// A `--call`/`--last` rollback planned from the reduced view (the
    /// calls' paths read back, once a `status` has left a view) plans what
    /// the whole read plans: the dry runs' documents are the same, ids
    /// included (one fixed clock for both).
    fn plan_from_the_view_matches_the_whole_read(&mut self, args: &[String]) {
        count("rollback plan: view against whole read");
        let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
        a.extend(["--dry-run", "--json"]);
        let clock = [("CKPT_TIMESTAMP", "1796000000"), ("CKPT_ID_SEED", "7")];
        let whole = self
            .env
            .ckpt_env(&a, &[FAST, clock[0], clock[1], ("CKPT_TEST_NO_VIEW", "1")]);
        let view = self.env.ckpt_env(&a, &[FAST, clock[0], clock[1]]);
        assert_eq!(
            (view.code, &view.stdout),
            (whole.code, &whole.stdout),
            "{args:?}: the plan from the view (left) differs from the whole read's: {}",
            view.stderr
        );
    }

    /// `status` planned from the reduced view (`index/view.bin`, extended
    /// since the last step that read it) says what the whole read says.
    fn status_from_the_view_matches_the_whole_read(&mut self) {
        count("status: view against whole read");
        let whole = self
            .env
            .ckpt_env(&["status", "--json"], &[FAST, ("CKPT_TEST_NO_VIEW", "1")]);
        let view = self.ck(&["status", "--json"]);
        assert_eq!(whole.code, 0, "status (whole read): {}", whole.stderr);
        assert_eq!(
            view.stdout, whole.stdout,
            "status from the view (left) differs from the whole read's: {}",
            view.stderr
        );
        // Its lines name calls from the view's summaries.
        let whole = self
            .env
            .ckpt_env(&["status"], &[FAST, ("CKPT_TEST_NO_VIEW", "1")]);
        let view = self.ck(&["status"]);
        assert_eq!(
            view.stdout, whole.stdout,
            "status's lines from the view (left) differ from the whole read's: {}",
            view.stderr
        );
    }

    fn verify(&mut self) {
        count("verify");
        self.script
            .push("$CKPT verify --json || echo \"== verify failed: rc=$?\"".into());
        let (code, v, err) = self.ckj(&["verify".into()]);
        assert!(
            code == 0 && v["ok"] == true,
            "verify failed (exit {code}): {v:#} {err}"
        );
    }

    fn call_live(&self, c: usize) -> bool {
        self.calls[c].ents.iter().any(|&e| self.ents[e].live)
    }

    fn payload(&self, session: &str, id: &str, event: &str, tool: &str, input: &Value) -> Vec<u8> {
        let mut p = json!({
            "session_id": session, "transcript_path": "/dev/null", "cwd": self.env.ws,
            "hook_event_name": event, "tool_name": tool, "tool_input": input, "tool_use_id": id,
        });
        if event == "PostToolUse" {
            p["tool_response"] = json!({"success": true});
        }
        p.to_string().into_bytes()
    }

    /// One hook call: pre, `change`, post; `script_change` replays the change.
    fn hook_call(
        &mut self,
        session: &str,
        id: &str,
        tool: &str,
        input: Value,
        change: impl FnOnce(&H),
        script_change: String,
    ) {
        self.hook_phase(session, id, tool, &input, "pre");
        change(self);
        self.script.push(script_change);
        self.hook_phase(session, id, tool, &input, "post");
    }

    fn hook_phase(&mut self, session: &str, id: &str, tool: &str, input: &Value, phase: &str) {
        let event = if phase == "pre" {
            "PreToolUse"
        } else {
            "PostToolUse"
        };
        let p = self.payload(session, id, event, tool, input);
        let text = String::from_utf8(p.clone())
            .unwrap()
            .replace(&self.ws_str, "@W@");
        self.script.push(format!(
            "printf %s '{text}' | sed \"s#@W@#$W#g\" | $CKPT hook {phase} || echo \"== hook {phase} failed: rc=$?\""
        ));
        let r = run_with_stdin(&self.env, &["hook", phase], &p, &[FAST]);
        assert_eq!(r.code, 0, "hook {phase} {id}: {}", r.stderr);
    }

    fn agent_call(&mut self) {
        let session = self.rng.below(2) as usize;
        let sname = SESSIONS[session];
        let id = format!("c{}", self.calls.len());
        let how = self.rng.below(4);
        count(["agent Edit", "agent Write", "agent exec", "agent Bash"][how as usize]);
        let nfiles = self.specs.len();
        let changes: Vec<(usize, Vec<Val>)>;
        match how {
            0 => {
                // Edit: one slot of a slot file, or a present whole file's line.
                let cands: Vec<usize> = (0..nfiles)
                    .filter(|&f| !self.specs[f].whole || self.vals[f][0].is_some())
                    .collect();
                let f = cands[self.rng.below(cands.len() as u64) as usize];
                let mut new = self.vals[f].clone();
                let (old_s, new_s) = if self.specs[f].whole {
                    let v = format!("W-{}-{f}", self.step);
                    let old = format!("{}\n", new[0].as_ref().unwrap());
                    new[0] = Some(v.clone());
                    (old, format!("{v}\n"))
                } else {
                    let slots = self.specs[f].agent_slots();
                    let s = slots[self.rng.below(slots.len() as u64) as usize];
                    let cur = new[s].clone();
                    let v = self.fresh_slot_value(f, s, &cur, 'A');
                    let line = |x: &Val| match x {
                        Some(x) => format!("s{s}-b\n{x}\n"),
                        None => format!("s{s}-b\n"),
                    };
                    let o = line(&cur);
                    new[s] = v.clone();
                    (o, line(&v))
                };
                let content = self.specs[f].render(&new).unwrap();
                let rel = self.specs[f].path;
                let input = json!({"file_path": self.path(f), "old_string": old_s,
                                   "new_string": new_s, "replace_all": false});
                let now = String::from_utf8(std::fs::read(self.path(f)).unwrap()).unwrap();
                assert_eq!(
                    now.matches(&old_s).count(),
                    1,
                    "{rel}: {old_s:?} in {now:?}"
                );
                assert_eq!(now.replacen(&old_s, &new_s, 1), content);
                self.log.push(format!(
                    "{}: agent {id} ({sname}) Edit {rel}: {}",
                    self.step,
                    show(&new)
                ));
                let c2 = content.clone();
                self.hook_call(
                    sname,
                    &id,
                    "Edit",
                    input,
                    move |h| h.env.write(rel, c2.as_bytes()),
                    write_line(rel, &content),
                );
                changes = vec![(f, new)];
            }
            1 => {
                let f = self.rng.below(nfiles as u64) as usize;
                let new = self.agent_change(f, false);
                let content = self.specs[f].render(&new).unwrap();
                let rel = self.specs[f].path;
                let input = json!({"file_path": self.path(f), "content": content});
                self.log.push(format!(
                    "{}: agent {id} ({sname}) Write {rel}: {}",
                    self.step,
                    show(&new)
                ));
                let c2 = content.clone();
                self.hook_call(
                    sname,
                    &id,
                    "Write",
                    input,
                    move |h| h.env.write(rel, c2.as_bytes()),
                    write_line(rel, &content),
                );
                changes = vec![(f, new)];
            }
            _ => {
                let mut files: Vec<usize> = (0..nfiles).collect();
                let k = 1 + self.rng.below(3) as usize;
                let mut ch = Vec::new();
                for _ in 0..k {
                    let f = files.remove(self.rng.below(files.len() as u64) as usize);
                    let new = self.agent_change(f, true);
                    ch.push((f, new));
                }
                ch.sort_by_key(|c| c.0);
                let script: Vec<String> = ch
                    .iter()
                    .map(|(f, new)| {
                        let rel = self.specs[*f].path;
                        match self.specs[*f].render(new) {
                            None => format!("rm {rel}"),
                            Some(c) => match Path::new(rel).parent() {
                                Some(d) if !d.as_os_str().is_empty() => {
                                    format!("mkdir -p {} && printf %s \"{c}\" > {rel}", d.display())
                                }
                                _ => format!("printf %s \"{c}\" > {rel}"),
                            },
                        }
                    })
                    .collect();
                let script = script.join("\n");
                let what: Vec<String> = ch
                    .iter()
                    .map(|(f, v)| format!("{} {}", self.specs[*f].path, show(v)))
                    .collect();
                if how == 2 {
                    self.log.push(format!(
                        "{}: agent {id} ({sname}) exec: {}",
                        self.step,
                        what.join("; ")
                    ));
                    self.script.push(format!(
                        "$CKPT exec --session {sname} --call {id} -- sh -c '{script}' || echo \"== exec failed: rc=$?\""
                    ));
                    let r = self.ck(&[
                        "exec",
                        "--session",
                        sname,
                        "--call",
                        &id,
                        "--",
                        "sh",
                        "-c",
                        &script,
                    ]);
                    assert_eq!(r.code, 0, "exec {id}: {}", r.stderr);
                } else {
                    self.log.push(format!(
                        "{}: agent {id} ({sname}) Bash: {}",
                        self.step,
                        what.join("; ")
                    ));
                    let sc = script.clone();
                    self.hook_call(
                        sname,
                        &id,
                        "Bash",
                        json!({"command": script}),
                        move |h| {
                            let st = std::process::Command::new("sh")
                                .args(["-c", &sc])
                                .current_dir(&h.env.ws)
                                .status()
                                .unwrap();
                            assert!(st.success(), "sh -c {sc}");
                        },
                        format!("sh -c '{script}'"),
                    );
                }
                changes = ch;
            }
        }
        self.commit_call(&id, session, changes);
    }

    /// Records a finished agent call in the model and checks its ledger records.
    fn commit_call(&mut self, id: &str, session: usize, changes: Vec<(usize, Vec<Val>)>) {
        let t = self.tick();
        let mut ents = Vec::new();
        let mut want: BTreeMap<&'static str, (usize, Option<String>, Option<String>)> =
            BTreeMap::new();
        for (f, new) in changes {
            let old = std::mem::replace(&mut self.vals[f], new.clone());
            let slots: Vec<(usize, Val, Val)> = (0..new.len())
                .filter(|&s| old[s] != new[s])
                .map(|s| (s, old[s].clone(), new[s].clone()))
                .collect();
            assert!(
                !slots.is_empty(),
                "the generator changes every file it names"
            );
            let e = self.ents.len();
            let base = self.live_agents_of(f);
            self.ents.push(Ent {
                file: f,
                t,
                slots,
                live: true,
                agent: true,
                patch: None,
                base,
                left: None,
            });
            ents.push(e);
            let before = self.specs[f].render(&old).map(|c| sha(c.as_bytes()));
            let after = self.specs[f].render(&new).map(|c| sha(c.as_bytes()));
            want.insert(self.specs[f].path, (e, before, after));
        }
        self.calls.push(Call {
            id: id.to_string(),
            session,
            ents,
        });
        let mut seen = BTreeSet::new();
        for r in self.new_records() {
            if r["kind"] != "file_patch" {
                continue;
            }
            let path = r["path"].as_str().unwrap_or_default().to_string();
            assert_eq!(r["call"], id, "a patch of {path} during call {id}: {r}");
            let Some((e, before, after)) = want.get(path.as_str()) else {
                panic!("call {id} recorded a patch of {path}, which it did not change: {r}");
            };
            assert!(seen.insert(path.clone()), "two patches of {path} in {id}");
            assert_eq!(r["before_hash"].as_str(), before.as_deref(), "{path}: {r}");
            assert_eq!(r["after_hash"].as_str(), after.as_deref(), "{path}: {r}");
            self.ents[*e].patch = Some(r["patch"].as_str().unwrap().to_string());
        }
        for p in want.keys() {
            assert!(seen.contains(*p), "call {id} recorded no patch of {p}");
        }
    }

    fn user_edit(&mut self) {
        count("user edit");
        let cands: Vec<usize> = (0..self.specs.len())
            .filter(|&f| !self.specs[f].whole)
            .collect();
        let k = 1 + self.rng.below(2) as usize;
        let mut fs = cands.clone();
        let mut what = Vec::new();
        for _ in 0..k.min(fs.len()) {
            let f = fs.remove(self.rng.below(fs.len() as u64) as usize);
            let mut slots = self.specs[f].user_slots();
            let n = 1 + self.rng.below(slots.len().min(2) as u64) as usize;
            for _ in 0..n {
                let s = slots.remove(self.rng.below(slots.len() as u64) as usize);
                let cur = self.vals[f][s].clone();
                self.vals[f][s] = self.fresh_slot_value(f, s, &cur, 'U');
            }
            let c = self.specs[f].render(&self.vals[f]).unwrap();
            self.env.write(self.specs[f].path, c.as_bytes());
            self.script.push(write_line(self.specs[f].path, &c));
            what.push(format!("{} {}", self.specs[f].path, show(&self.vals[f])));
        }
        self.log
            .push(format!("{}: user edits {}", self.step, what.join("; ")));
    }

    /// The user edits an agent slot: the file is tainted from now on.
    fn taint(&mut self) {
        count("taint");
        let cands: Vec<usize> = (0..self.specs.len())
            .filter(|&f| !self.specs[f].whole)
            .collect();
        let f = cands[self.rng.below(cands.len() as u64) as usize];
        let slots = self.specs[f].agent_slots();
        let s = slots[self.rng.below(slots.len() as u64) as usize];
        let cur = self.vals[f][s].clone();
        self.vals[f][s] = self.fresh_slot_value(f, s, &cur, 'T');
        self.tainted[f] = true;
        let c = self.specs[f].render(&self.vals[f]).unwrap();
        self.env.write(self.specs[f].path, c.as_bytes());
        self.script.push(write_line(self.specs[f].path, &c));
        self.log.push(format!(
            "{}: user edits AGENT slot {s} of {} (tainted): {}",
            self.step,
            self.specs[f].path,
            show(&self.vals[f])
        ));
    }

    fn checkpoint(&mut self) {
        count("checkpoint");
        let label = format!("k{}", self.step);
        let (code, v, err) = self.ckj(&["checkpoint".into(), "-m".into(), label.clone()]);
        assert_eq!(code, 0, "checkpoint: {v} {err}");
        let id = v["checkpoint"].as_str().expect("checkpoint id").to_string();
        let var = format!("C{}", self.cks.len());
        self.script.push(format!(
            "{var}=$($CKPT checkpoint -m {label} --json | jq -r .checkpoint)"
        ));
        self.log
            .push(format!("{}: checkpoint {var} = {id}", self.step));
        let t = self.tick();
        self.cks.push(Ck {
            id,
            var,
            t,
            vals: self.vals.clone(),
            live: self.ents.iter().map(|e| e.live).collect(),
        });
        self.new_records();
    }

    // -------------------------------------------------------------- plans

    /// Takes the selected in-effect agent changes out (`--call`, `--session`,
    /// `--last`, `undo`).
    fn plan_takeout(&self, sel: &BTreeSet<usize>, what: String) -> Plan {
        let mut by_file: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &e in sel {
            by_file.entry(self.ents[e].file).or_default().push(e);
        }
        let mut plan = Plan {
            strict: true,
            what,
            ..Plan::default()
        };
        for (f, es) in by_file {
            let mut exp = self.vals[f].clone();
            let (mut allowed, mut required, mut unsure) = (false, false, false);
            let slots: BTreeSet<usize> = es
                .iter()
                .flat_map(|&e| self.ents[e].slots.iter().map(|x| x.0))
                .collect();
            for s in slots {
                let touching: Vec<usize> = (0..self.ents.len())
                    .filter(|&i| {
                        let e = &self.ents[i];
                        e.agent && e.live && e.file == f && e.slots.iter().any(|x| x.0 == s)
                    })
                    .collect();
                let first = touching
                    .iter()
                    .filter(|i| sel.contains(i))
                    .map(|&i| self.ents[i].t)
                    .min()
                    .unwrap();
                let later = touching
                    .iter()
                    .any(|i| !sel.contains(i) && self.ents[*i].t > first);
                allowed |= later;
                // Undone three-way newest first, each run of consecutive
                // selected changes as one step (`old` of its first, `new` of
                // its last): a step applies where the slot holds either side,
                // else it is a conflict; a run that ends where it began is
                // nothing to take out. The slot ends at the earliest
                // selected change's `old`.
                let mut runs: Vec<(usize, usize, Val, Val)> = Vec::new();
                let mut open = false;
                for &i in &touching {
                    let (_, old, new) = self.ents[i].slots.iter().find(|y| y.0 == s).unwrap();
                    if !sel.contains(&i) {
                        open = false;
                    } else if open {
                        let run = runs.last_mut().unwrap();
                        (run.1, run.3) = (i, new.clone());
                    } else {
                        runs.push((i, i, old.clone(), new.clone()));
                        open = true;
                    }
                }
                // Each run rebased past the undone changes its first (its
                // `old`) and its last (its `new`) were made on.
                let runs: Vec<(Val, Val)> = runs
                    .into_iter()
                    .map(|(i, j, old, new)| {
                        match (self.rebased(i, &[], s, &old), self.rebased(j, &[], s, &new)) {
                            (Some((o, t1)), Some((n, t2))) => {
                                allowed |= t1 || t2;
                                (o, n)
                            }
                            _ => {
                                // No answer one by one; ckpt takes runs of
                                // undone changes as one and may find one.
                                allowed = true;
                                unsure = true;
                                (old, new)
                            }
                        }
                    })
                    .collect();
                let mut x = exp[s].clone();
                for (old, new) in runs.iter().rev() {
                    if old == new {
                        // A run that changed nothing net: nothing to take out.
                        continue;
                    }
                    if x == *new || x == *old {
                        x = old.clone();
                    } else {
                        required = true;
                        x = old.clone();
                    }
                }
                exp[s] = x;
            }
            let tainted = self.tainted[f];
            plan.files.insert(
                f,
                FilePlan {
                    delta: es.iter().map(|&e| (e, true, false)).collect(),
                    expect: (!tainted && !unsure).then_some(exp),
                    allowed: allowed || required || tainted,
                    required: required && !tainted && !unsure,
                    patches: Some(
                        es.iter()
                            .map(|&e| self.ents[e].patch.clone().unwrap())
                            .collect(),
                    ),
                },
            );
        }
        plan
    }

    fn live_agents_of(&self, f: usize) -> Vec<usize> {
        (0..self.ents.len())
            .filter(|&i| self.ents[i].agent && self.ents[i].live && self.ents[i].file == f)
            .collect()
    }

    /// Value `v` of slot `s` as ckpt rebases a change (entity `e`'s side):
    /// without the agent changes `e` was made on that are out of effect now
    /// (but for those `e` itself flipped, `own`), each taken out newest
    /// first: where `v` is its `new`, its `old`; where `v` is its `old`,
    /// `v`; else no answer (`None`: ckpt raises `built_on_undone`). Also
    /// whether it went past one (then a conflict is allowed). So taking a
    /// change out never brings back an undone change's value.
    fn rebased(&self, e: usize, own: &[usize], s: usize, v: &Val) -> Option<(Val, bool)> {
        let mut gone: Vec<usize> = self.ents[e]
            .base
            .iter()
            .copied()
            .filter(|d| !self.ents[*d].live && !own.contains(d))
            .collect();
        gone.sort_by_key(|&d| std::cmp::Reverse(self.ents[d].t));
        let (mut v, mut through) = (v.clone(), false);
        for d in gone {
            let Some((_, old, new)) = self.ents[d].slots.iter().find(|y| y.0 == s) else {
                continue;
            };
            if v == *new {
                v = old.clone();
                through = true;
            } else if v != *old {
                return None;
            }
        }
        Some((v, through))
    }

    fn plan_to(&self, c: usize) -> Plan {
        let ck = &self.cks[c];
        let mut plan = Plan {
            what: format!("--to {}", ck.var),
            ..Plan::default()
        };
        for f in 0..self.specs.len() {
            let mut delta = Vec::new();
            for (i, e) in self.ents.iter().enumerate() {
                if e.file != f || (self.to_keeps_rollbacks && !e.agent) {
                    continue;
                }
                let target = if e.t > ck.t { false } else { ck.live[i] };
                if target != e.live {
                    delta.push((i, e.live, target));
                }
            }
            let mut exp = self.vals[f].clone();
            for s in self.specs[f].agent_slots() {
                exp[s] = ck.vals[f][s].clone();
            }
            let tainted = self.tainted[f];
            plan.files.insert(
                f,
                FilePlan {
                    delta,
                    expect: (!tainted).then_some(exp),
                    allowed: tainted || self.reordered[f],
                    required: false,
                    patches: None,
                },
            );
        }
        plan
    }

    /// Reverses action `a` (`--action`, `redo`).
    fn plan_action(&self, a: usize) -> Plan {
        let act = &self.acts[a];
        let mut plan = Plan {
            what: format!("--action A{a}"),
            ..Plan::default()
        };
        for (f, r, delta) in &act.per_file {
            let (f, r) = (*f, *r);
            if !self.ents[r].live {
                continue;
            }
            let mut exp = self.vals[f].clone();
            let (mut allowed, mut required, mut unsure) = (false, false, false);
            let own: Vec<usize> = delta.iter().map(|d| d.0).collect();
            for (s, y, z) in &self.ents[r].slots {
                // R's change rebased past the agent's changes it was made
                // on that are out now (not those R itself flipped).
                let (y, z) = match (self.rebased(r, &own, *s, y), self.rebased(r, &own, *s, z)) {
                    (Some((y2, t1)), Some((z2, t2))) => {
                        allowed |= t1 || t2;
                        (y2, z2)
                    }
                    _ => {
                        allowed = true;
                        unsure = true;
                        (y.clone(), z.clone())
                    }
                };
                if y == z {
                    continue;
                }
                let x = &exp[*s];
                if *x == z || *x == y {
                    exp[*s] = y.clone();
                } else {
                    required = true;
                }
                if self.ents.iter().any(|e| {
                    e.agent
                        && e.live
                        && e.file == f
                        && e.t > self.ents[r].t
                        && e.slots.iter().any(|q| q.0 == *s)
                }) {
                    allowed = true;
                }
            }
            // A flags-only entry (R found the file already as planned)
            // flips back only while the file holds what R found.
            let stale = self.ents[r].slots.is_empty()
                && self.ents[r]
                    .left
                    .as_ref()
                    .is_some_and(|v| *v != self.vals[f]);
            let mut d = if stale {
                Vec::new()
            } else {
                vec![(r, true, false)]
            };
            for &(e, b, af) in delta {
                if !stale && self.ents[e].live == af && af != b {
                    d.push((e, af, b));
                }
            }
            let tainted = self.tainted[f];
            plan.files.insert(
                f,
                FilePlan {
                    delta: d,
                    expect: (!tainted && !unsure).then_some(exp),
                    allowed: allowed || required || tainted,
                    required: required && !tainted && !unsure,
                    patches: None,
                },
            );
        }
        plan
    }

    fn live_agent(&self) -> Vec<usize> {
        (0..self.ents.len())
            .filter(|&i| self.ents[i].agent && self.ents[i].live)
            .collect()
    }

    // -------------------------------------------------------------- rollbacks

    fn rollback(&mut self, sel: Sel) {
        let (args, plan, kind, redo_of): (Vec<String>, Plan, Kind, Option<usize>) = match sel {
            Sel::To(c) => (
                vec!["rollback".into(), "--to".into(), self.cks[c].id.clone()],
                self.plan_to(c),
                Kind::Rollback,
                None,
            ),
            Sel::Call(c) => {
                let s: BTreeSet<usize> = self.calls[c]
                    .ents
                    .iter()
                    .copied()
                    .filter(|&e| self.ents[e].live)
                    .collect();
                let what = format!("--call {}", self.calls[c].id);
                (
                    vec!["rollback".into(), "--call".into(), self.calls[c].id.clone()],
                    self.plan_takeout(&s, what),
                    Kind::Rollback,
                    None,
                )
            }
            Sel::Session(sn) => {
                let s: BTreeSet<usize> = self
                    .live_agent()
                    .into_iter()
                    .filter(|&e| {
                        self.calls
                            .iter()
                            .any(|c| c.session == sn && c.ents.contains(&e))
                    })
                    .collect();
                let what = format!("--session {}", SESSIONS[sn]);
                (
                    vec!["rollback".into(), "--session".into(), SESSIONS[sn].into()],
                    self.plan_takeout(&s, what),
                    Kind::Rollback,
                    None,
                )
            }
            Sel::Last(n) => {
                let calls: Vec<usize> = (0..self.calls.len())
                    .rev()
                    .filter(|&c| self.call_live(c))
                    .take(n)
                    .collect();
                let s: BTreeSet<usize> = calls
                    .iter()
                    .flat_map(|&c| self.calls[c].ents.iter().copied())
                    .filter(|&e| self.ents[e].live)
                    .collect();
                let ids: Vec<&str> = calls.iter().map(|&c| self.calls[c].id.as_str()).collect();
                let what = format!("--last {n} (= {})", ids.join(","));
                (
                    vec!["rollback".into(), "--last".into(), n.to_string()],
                    self.plan_takeout(&s, what),
                    Kind::Rollback,
                    None,
                )
            }
            Sel::Action(a) => (
                vec![
                    "rollback".into(),
                    "--action".into(),
                    self.acts[a].id.clone(),
                ],
                self.plan_action(a),
                Kind::Rollback,
                None,
            ),
            Sel::Undo => {
                let live = self.live_agent();
                let after = self
                    .cks
                    .iter()
                    .rev()
                    .find(|c| live.iter().any(|&e| self.ents[e].t > c.t));
                let s: BTreeSet<usize> = match after {
                    Some(c) => live
                        .iter()
                        .copied()
                        .filter(|&e| self.ents[e].t > c.t)
                        .collect(),
                    None => live.iter().copied().collect(),
                };
                let what = format!(
                    "undo (back to {})",
                    after.map_or("the start".to_string(), |c| c.var.clone())
                );
                (
                    vec!["undo".into()],
                    self.plan_takeout(&s, what),
                    Kind::Undo,
                    None,
                )
            }
            Sel::Redo => {
                let target = (0..self.acts.len()).rev().find(|&a| {
                    self.acts[a].kind == Kind::Undo
                        && self.acts[a]
                            .per_file
                            .iter()
                            .any(|(_, r, _)| self.ents[*r].live && !self.ents[*r].slots.is_empty())
                });
                let plan = match target {
                    Some(a) => {
                        let mut p = self.plan_action(a);
                        p.what = format!("redo (= --action A{a})");
                        p
                    }
                    None => Plan {
                        what: "redo (nothing)".into(),
                        ..Plan::default()
                    },
                };
                (vec!["redo".into()], plan, Kind::Redo, target)
            }
        };
        if matches!(sel, Sel::Call(_) | Sel::Last(_)) {
            self.plan_from_the_view_matches_the_whole_read(&args);
        }
        let before_tree = tree(&self.env.ws, &[".agent-runtime", ".git"]);
        let Some(a) = self.run_rollback(args, plan, kind, redo_of) else {
            return;
        };
        // Right after a rollback, its undo returns the tree byte for byte.
        if self.rng.below(10) < 3 {
            let plan = self.plan_action(a);
            let args = vec![
                "rollback".into(),
                "--action".into(),
                self.acts[a].id.clone(),
            ];
            self.log.push(format!(
                "{}: (right after) rollback --action A{a}",
                self.step
            ));
            self.run_rollback(args, plan, Kind::Rollback, None);
            let now = tree(&self.env.ws, &[".agent-runtime", ".git"]);
            count("--action right after");
            if now != before_tree {
                let diff: Vec<String> = now
                    .keys()
                    .chain(before_tree.keys())
                    .filter(|k| now.get(*k) != before_tree.get(*k))
                    .map(|k| {
                        format!(
                            "{}: before {:?}, now {:?}",
                            k.display(),
                            before_tree.get(k).map(entry_text),
                            now.get(k).map(entry_text)
                        )
                    })
                    .collect();
                panic!(
                    "--action A{a} right after A{a} did not return the tree: {}",
                    diff.join("; ")
                );
            }
        }
    }

    /// Runs one rollback-like command and checks it against `plan`; returns the
    /// model's action, if one was made.
    fn run_rollback(
        &mut self,
        args: Vec<String>,
        plan: Plan,
        kind: Kind,
        redo_of: Option<usize>,
    ) -> Option<usize> {
        let ai = self.acts.len();
        let var = format!("A{ai}");
        let script_args: Vec<String> = args
            .iter()
            .map(|a| {
                if let Some(c) = self.cks.iter().find(|c| c.id == *a) {
                    format!("\"${}\"", c.var)
                } else if let Some(i) = self.acts.iter().position(|x| x.id == *a) {
                    format!("\"$A{i}\"")
                } else {
                    a.clone()
                }
            })
            .collect();
        self.script.push(format!(
            "out=$($CKPT {} --json); rc=$?; echo \"== step {} ({}): rc=$rc\"; echo \"$out\"; {var}=$(printf %s \"$out\" | jq -r .action)",
            script_args.join(" "),
            self.step,
            plan.what
        ));
        let planned: Vec<String> = plan
            .files
            .iter()
            .filter(|(f, p)| {
                !p.delta.is_empty() || p.expect.as_ref().is_none_or(|e| *e != self.vals[**f])
            })
            .map(|(f, p)| {
                format!(
                    "{}{}{}",
                    self.specs[*f].path,
                    match &p.expect {
                        Some(e) => format!(" -> {}", show(e)),
                        None => " (tainted)".into(),
                    },
                    if p.required {
                        " CONFLICT"
                    } else if p.allowed {
                        " conflict-ok"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        self.log.push(format!(
            "{}: {}  [plan: {}]",
            self.step,
            plan.what,
            planned.join("; ")
        ));
        let before_disk = self.disk();
        let before_vals = self.vals.clone();
        let (code, doc, err) = self.ckj(&args);
        count(args[..2.min(args.len())].join(" "));
        let ctx = format!("{}: exit {code}\n{doc:#}\nstderr: {err}", plan.what);
        assert!(code == 0 || code == 3, "{ctx}");
        assert!(doc.is_object(), "{ctx}");
        assert_eq!(doc["dry_run"], false, "{ctx}");
        let files = doc["files"]
            .as_array()
            .unwrap_or_else(|| panic!("no files: {ctx}"));
        let conflicts = doc["conflicts"]
            .as_array()
            .unwrap_or_else(|| panic!("no conflicts: {ctx}"));
        assert_eq!(
            code == 3,
            !conflicts.is_empty(),
            "exit code vs conflicts: {ctx}"
        );
        match kind {
            Kind::Undo if !doc["action"].is_null() => {
                assert!(doc.get("undo").is_some(), "an undo says so: {ctx}")
            }
            Kind::Redo => {
                if let Some(t) = redo_of {
                    assert_eq!(
                        doc["redo"]["action"].as_str(),
                        Some(self.acts[t].id.as_str()),
                        "redo undoes the newest undo in effect (A{t}): {ctx}"
                    );
                }
            }
            _ => {}
        }
        let mut listed: BTreeMap<usize, (String, Value)> = BTreeMap::new();
        for fe in files {
            let path = fe["path"].as_str().unwrap_or_else(|| panic!("{ctx}"));
            let f = (0..self.specs.len())
                .find(|&f| self.specs[f].path == path)
                .unwrap_or_else(|| panic!("unknown path {path}: {ctx}"));
            let res = fe["result"].as_str().unwrap_or_default().to_string();
            assert!(RESULTS.contains(&res.as_str()), "result {res:?}: {ctx}");
            assert!(
                res != "raced" && res != "failed",
                "{path} {res} (nothing else writes): {ctx}"
            );
            count(format!("result {res}"));
            assert!(
                listed.insert(f, (res, fe.clone())).is_none(),
                "{path} twice: {ctx}"
            );
        }
        for c in conflicts {
            let p = c["path"].as_str().unwrap_or_default();
            assert!(
                c["conflict"].as_str().is_some_and(|s| !s.is_empty())
                    && c["reason"].as_str().is_some_and(|s| !s.is_empty()),
                "conflict fields: {ctx}"
            );
            assert!(
                listed
                    .values()
                    .any(|(r, fe)| r == "conflict" && fe["path"] == p),
                "conflict on {p} without a conflict result: {ctx}"
            );
        }
        if doc["action"].is_null() {
            assert!(files.is_empty(), "no action, no files: {ctx}");
            assert!(
                matches!(kind, Kind::Undo | Kind::Redo),
                "only undo/redo print a null action: {ctx}"
            );
        }
        if matches!(kind, Kind::Undo | Kind::Redo) && plan.files.is_empty() {
            assert!(doc["action"].is_null(), "nothing to {:?}: {ctx}", kind);
        }
        if plan.strict {
            let want: BTreeSet<usize> = plan.files.keys().copied().collect();
            let got: BTreeSet<usize> = listed.keys().copied().collect();
            assert_eq!(
                got.iter().map(|&f| self.specs[f].path).collect::<Vec<_>>(),
                want.iter().map(|&f| self.specs[f].path).collect::<Vec<_>>(),
                "files listed (left) vs the selection's (right): {ctx}"
            );
        }
        let after_disk = self.disk();
        let after_vals = self.parse_disk(&after_disk);
        let t = self.tick();
        let mut per_file = Vec::new();
        for f in 0..self.specs.len() {
            let path = self.specs[f].path;
            for s in self.specs[f].user_slots() {
                assert_eq!(
                    after_vals[f][s], before_vals[f][s],
                    "{path}: user slot {s} changed: {ctx}"
                );
            }
            let fp = plan.files.get(&f);
            let apply = match listed.get(&f) {
                Some((res, fe)) if res == "conflict" => {
                    let fp = fp.unwrap_or_else(|| {
                        panic!("{path}: conflict on a file with nothing to do: {ctx}")
                    });
                    assert!(fp.allowed, "{path}: no conflict is legitimate here: {ctx}");
                    assert_eq!(
                        after_disk[f], before_disk[f],
                        "{path}: a conflicted file is left byte for byte: {ctx}"
                    );
                    let id = fe["conflict"]
                        .as_str()
                        .unwrap_or_else(|| panic!("{path}: no conflict id: {ctx}"))
                        .to_string();
                    let cv = format!("CF{}", self.conflict_vars);
                    self.conflict_vars += 1;
                    self.script.push(format!(
                        "{cv}=$(printf %s \"$out\" | jq -r '.conflicts[] | select(.path==\"{path}\") | .conflict' | head -n 1)"
                    ));
                    self.log.push(format!("   conflict {cv} on {path}"));
                    self.conflicts.push(OpenConflict {
                        id,
                        var: cv,
                        file: f,
                        delta: fp.delta.clone(),
                        bytes: after_disk[f].clone(),
                    });
                    false
                }
                Some((res, fe)) => {
                    let fp = fp.unwrap_or_else(|| {
                        panic!("{path} listed ({res}) but there is nothing to do there: {ctx}")
                    });
                    assert!(
                        !fp.required,
                        "{path}: must conflict (a later call's change is in the way), got {res}: {ctx}"
                    );
                    if let Some(exp) = &fp.expect {
                        assert_eq!(
                            show(&after_vals[f]),
                            show(exp),
                            "{path} ({res}): disk (left) vs model: {ctx}"
                        );
                    }
                    if let Some(want) = &fp.patches {
                        let got: BTreeSet<String> = fe["patches"]
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .filter_map(|p| p.as_str().map(String::from))
                                    .collect()
                            })
                            .unwrap_or_default();
                        assert_eq!(
                            &got, want,
                            "{path}: patches (left) vs the selection's: {ctx}"
                        );
                    }
                    true
                }
                None => {
                    assert_eq!(
                        after_disk[f], before_disk[f],
                        "{path}: not listed, yet changed: {ctx}"
                    );
                    if let Some(fp) = fp
                        && let Some(exp) = &fp.expect
                    {
                        assert_eq!(
                            show(&after_vals[f]),
                            show(exp),
                            "{path}: not listed, but the model expects a change (left: disk): {ctx}"
                        );
                    }
                    fp.is_some_and(|p| !p.delta.is_empty())
                }
            };
            if apply {
                let fp = fp.unwrap();
                let base = self.live_agents_of(f);
                let mut applied = Vec::new();
                for &(e, b, a) in &fp.delta {
                    if self.ents[e].live == b {
                        self.ents[e].live = a;
                        applied.push((e, b, a));
                    }
                }
                for &(e, _, a) in &applied {
                    let t = self.ents[e].t;
                    if a && self.ents[e].agent
                        && self
                            .ents
                            .iter()
                            .any(|x| x.agent && x.live && x.file == f && x.t > t)
                    {
                        self.reordered[f] = true;
                    }
                }
                let slots: Vec<(usize, Val, Val)> = self.specs[f]
                    .agent_slots()
                    .into_iter()
                    .filter(|&s| before_vals[f][s] != after_vals[f][s])
                    .map(|s| (s, before_vals[f][s].clone(), after_vals[f][s].clone()))
                    .collect();
                let r = self.ents.len();
                self.ents.push(Ent {
                    file: f,
                    t,
                    slots,
                    live: true,
                    agent: false,
                    patch: None,
                    base,
                    left: Some(after_vals[f].clone()),
                });
                per_file.push((f, r, applied));
            }
        }
        self.vals = after_vals;
        self.new_records();
        let id = doc["action"].as_str()?.to_string();
        self.log.push(format!("   -> {var} = {id}, exit {code}"));
        self.acts.push(Act { id, kind, per_file });
        Some(ai)
    }

    fn resolve(&mut self) {
        let i = self.rng.below(self.conflicts.len() as u64) as usize;
        let f = self.conflicts[i].file;
        let path = self.specs[f].path;
        // Applying the agent's undo through a later call's change leaves the
        // file's content to ckpt's merge: the file is tainted from then on.
        let apply = self.rng.below(if self.tainted[f] { 2 } else { 4 }) == 0;
        let how = if apply {
            "--apply-agent"
        } else {
            "--keep-user"
        };
        let (id, var) = (self.conflicts[i].id.clone(), self.conflicts[i].var.clone());
        self.log
            .push(format!("{}: resolve {var} ({path}) {how}", self.step));
        self.script.push(format!(
            "out=$($CKPT resolve \"${var}\" {how} --json); rc=$?; echo \"== step {} resolve: rc=$rc\"; echo \"$out\"",
            self.step
        ));
        let before_disk = self.disk();
        let before_vals = self.vals.clone();
        let stale = before_disk[f] != self.conflicts[i].bytes;
        let (code, doc, err) = self.ckj(&["resolve".into(), id.clone(), how.into()]);
        let ctx = format!("resolve {var} {how}: exit {code}\n{doc:#}\nstderr: {err}");
        self.new_records();
        let after_disk = self.disk();
        let after_vals = self.parse_disk(&after_disk);
        for g in 0..self.specs.len() {
            if g != f || !apply || code != 0 {
                assert_eq!(
                    after_disk[g], before_disk[g],
                    "{}: {ctx}",
                    self.specs[g].path
                );
            }
            for s in self.specs[g].user_slots() {
                assert_eq!(after_vals[g][s], before_vals[g][s], "user slot {s}: {ctx}");
            }
        }
        count(format!("resolve {how}"));
        if code != 0 {
            count("resolve refused (stale)");
            assert!(
                stale,
                "resolve refused a conflict whose file has not changed: {ctx}"
            );
            self.conflicts.remove(i);
            return;
        }
        let c = self.conflicts.remove(i);
        if !apply {
            assert_eq!(doc["resolution"], "keep_user", "{ctx}");
            return;
        }
        assert_eq!(doc["resolution"], "apply_agent", "{ctx}");
        if !self.tainted[f] {
            self.tainted[f] = true;
            self.log.push(format!("   {path} is tainted from now on"));
        }
        let t = self.tick();
        let mut applied = Vec::new();
        for &(e, b, a) in &c.delta {
            if self.ents[e].live == b {
                self.ents[e].live = a;
                applied.push((e, b, a));
            }
        }
        let slots: Vec<(usize, Val, Val)> = self.specs[f]
            .agent_slots()
            .into_iter()
            .filter(|&s| before_vals[f][s] != after_vals[f][s])
            .map(|s| (s, before_vals[f][s].clone(), after_vals[f][s].clone()))
            .collect();
        let r = self.ents.len();
        self.ents.push(Ent {
            file: f,
            t,
            slots,
            live: true,
            agent: false,
            patch: None,
            base: Vec::new(),
            left: None,
        });
        self.vals = after_vals;
        if let Some(id) = doc["action"].as_str() {
            self.acts.push(Act {
                id: id.to_string(),
                kind: Kind::Resolve,
                per_file: vec![(f, r, applied)],
            });
        }
    }
}

fn entry_text(e: &Entry) -> String {
    match e {
        Entry::File(m, b) => format!("{m:o} {:?}", String::from_utf8_lossy(b)),
        Entry::Link(p) => format!("-> {}", p.display()),
        Entry::Dir(m) => format!("dir {m:o}"),
    }
}

/// A replay line writing `content` to `rel`.
fn write_line(rel: &str, content: &str) -> String {
    match Path::new(rel).parent() {
        Some(d) if !d.as_os_str().is_empty() => {
            format!(
                "mkdir -p {} && printf %s \"{content}\" > {rel}",
                d.display()
            )
        }
        _ => format!("printf %s \"{content}\" > {rel}"),
    }
}
