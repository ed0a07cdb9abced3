//! `ckpt gc` (issue 24): what no kept checkpoint needs goes; every kept
//! checkpoint stays restorable byte for byte (checked against the same
//! rollback in an uncollected copy), open conflicts, calls in doubt and
//! unfinished actions keep what they need, a crash at any write point leaves
//! a workspace that verifies, and `verify`/`show`/`rollback` tell collected
//! history from lost history.
//!
//! Ledgers are dated two hours ahead of the real clock (`CKPT_TIMESTAMP`),
//! and gc runs later still: every blob the test stored is then past gc's
//! one-hour grace, as it would be days after a real session.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::{
    Rng, Run, TestEnv, blob_file, chunks_of, copy_workspace, noise, run_with_stdin, seed,
    status_view_agrees, tree,
};

const DAY: u64 = 86_400;

/// A history's clock: day 0 is two hours from now; with a count of the
/// commands run, so that each gets ids of its own (ids seeded by the day
/// alone repeat within a day: two calls of one id read as one call started
/// twice, in doubt).
struct Clock(u64, std::cell::Cell<u64>);

impl Clock {
    fn new() -> Clock {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        Clock(now + 2 * 3600, std::cell::Cell::new(0))
    }
    fn id_seed(&self, day: u64) -> String {
        self.1.set(self.1.get() + 1);
        // Odd: the fixed clock seeds its generator with `seed | 1`.
        ((day * 100_000 + self.1.get()) * 2 + 1).to_string()
    }
    fn at(&self, day: u64) -> String {
        (self.0 + day * DAY).to_string()
    }
}

fn at(env: &TestEnv, clock: &Clock, day: u64, args: &[&str]) -> Run {
    let t = clock.at(day);
    env.ckpt_env(
        args,
        &[
            ("CKPT_TIMESTAMP", &t),
            ("CKPT_ID_SEED", &clock.id_seed(day)),
        ],
    )
}

fn exec(env: &TestEnv, clock: &Clock, day: u64, script: &str) {
    let r = at(env, clock, day, &["exec", "--", "sh", "-c", script]);
    assert_eq!(r.code, 0, "{script}: {}", r.stderr);
}

fn checkpoint(env: &TestEnv, clock: &Clock, day: u64, label: &str) -> String {
    let r = at(env, clock, day, &["checkpoint", "-m", label, "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.json()["checkpoint"].as_str().unwrap().to_string()
}

fn gc(env: &TestEnv, clock: &Clock, day: u64, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["gc", "--json"];
    a.extend_from_slice(args);
    let r = at(env, clock, day, &a);
    assert_eq!(r.code, 0, "gc {args:?}: {}", r.stderr);
    r.json()
}

fn verify_ok(env: &TestEnv) -> serde_json::Value {
    let r = env.ckpt(&["verify", "--json"]);
    assert_eq!(r.code, 0, "verify: {}\n{}", r.stdout, r.stderr);
    r.json()
}

fn ids(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// The files under `dir`, recursively, for "nothing was removed".
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn blob_path(env: &TestEnv, bytes: &[u8]) -> std::path::PathBuf {
    let hex = ckpt::ContentHash::of(bytes).hex();
    env.rt()
        .join(format!("artifacts/blobs/{}/{}", &hex[..2], &hex[2..]))
}

/// A random history: `turns` turns, each a checkpoint then one to three
/// shell calls that create, rewrite, append to, rename or delete a few
/// files, and now and then an edit of the user's between calls. Returns
/// the checkpoints, oldest first.
fn history(env: &TestEnv, clock: &Clock, rng: &mut Rng, turns: u64) -> Vec<String> {
    let mut cks = Vec::new();
    for t in 0..turns {
        let day = t * 4;
        cks.push(checkpoint(env, clock, day, &format!("turn {t}")));
        for c in 0..=rng.below(3) {
            let mut script = String::new();
            for _ in 0..=rng.below(3) {
                let f = format!("f{}.txt", rng.below(5));
                let g = format!("f{}.txt", rng.below(5));
                let n = rng.next() % 1000;
                script.push_str(&match rng.below(6) {
                    0 | 1 => format!("printf 'line a\\nline {n}\\nline c\\n' > {f}; "),
                    2 => format!("echo more {n} >> {f}; "),
                    3 => format!("[ -f {f} ] && mv {f} {g}; "),
                    4 => format!("rm -f {f}; "),
                    _ => format!(
                        "head -c {} /dev/urandom > bin{}.dat; ",
                        2000 + n,
                        rng.below(2)
                    ),
                });
            }
            script.push_str("true");
            exec(env, clock, day + c / 2, &script);
            if rng.below(4) == 0 {
                let f = env.ws.join(format!("f{}.txt", rng.below(5)));
                if f.exists() {
                    let mut b = std::fs::read(&f).unwrap();
                    b.extend_from_slice(b"the user's line\n");
                    std::fs::write(&f, b).unwrap();
                }
            }
        }
    }
    cks
}

/// Rolls both workspaces back to `ck` and checks they end the same: the
/// same exit, the same tree byte for byte.
fn same_rollback(a: &TestEnv, b: &TestEnv, clock: &Clock, day: u64, ck: &str) -> bool {
    let (a, b) = (copy_workspace(a), copy_workspace(b));
    let ra = at(&a, clock, day, &["rollback", "--to", ck, "--json"]);
    let rb = at(&b, clock, day, &["rollback", "--to", ck, "--json"]);
    if ra.code == 1
        && (ra.stderr.contains("collected by `ckpt gc`")
            || ra.stderr.contains("older than what `ckpt gc` kept")
            || ra.stderr.contains("`ckpt gc` took it out with the history"))
    {
        return false;
    }
    assert_eq!(ra.code, rb.code, "{ck}: {}\nvs {}", ra.stderr, rb.stderr);
    assert_eq!(
        tree(&a.ws, &[".agent-runtime"]),
        tree(&b.ws, &[".agent-runtime"]),
        "rollback --to {ck} after gc differs from the same rollback without it"
    );
    true
}

#[test]
fn every_kept_checkpoint_is_restorable_byte_for_byte_over_random_histories() {
    let s = seed(24);
    let mut removed = 0;
    let mut refused = 0;
    let mut cut = 0;
    for round in 0..4 {
        let mut rng = Rng(s.wrapping_add(round * 7919) | 1);
        let env = TestEnv::init();
        let clock = Clock::new();
        let turns = 4 + rng.below(3);
        let cks = history(&env, &clock, &mut rng, turns);
        status_view_agrees(&env, "before gc");
        let oracle = copy_workspace(&env);
        // (The first round keeps one: its gc has history to take out of the ledger.)
        let keep = if round == 0 { 1 } else { rng.below(turns) };
        let now = turns * 4 + 10;
        let mut args = vec!["--keep".to_string(), keep.to_string()];
        if rng.below(2) == 0 {
            args.extend(["--older-than".to_string(), format!("{}d", 4 + rng.below(8))]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let before = files_under(&env.rt().join("artifacts"));
        let dry = gc(&env, &clock, now, &[&args[..], &["--dry-run"]].concat());
        assert_eq!(
            files_under(&env.rt().join("artifacts")),
            before,
            "a dry run removes nothing"
        );
        let r = gc(&env, &clock, now, &args);
        status_view_agrees(&env, "after gc");
        assert_eq!(r["blobs"], dry["blobs"], "the dry run said what goes");
        assert_eq!(r["patches"], dry["patches"]);
        removed += r["blobs"]["files"].as_u64().unwrap() + r["patches"]["files"].as_u64().unwrap();
        assert_eq!(r["ledger_records"], dry["ledger_records"]);
        cut += r["ledger_records"].as_u64().unwrap();
        let kept = ids(&r["kept_checkpoints"]);
        let collected = ids(&r["collected_checkpoints"]);
        assert_eq!(kept.len() + collected.len(), cks.len());
        assert!(kept.len() as u64 >= keep.min(turns), "{r}");
        // The newest `keep` are among the kept.
        for ck in &cks[cks.len() - keep as usize..] {
            assert!(kept.contains(ck), "{ck} is one of the {keep} newest: {r}");
        }
        verify_ok(&env);
        for ck in &kept {
            assert!(
                same_rollback(&env, &oracle, &clock, now + 1, ck),
                "kept checkpoint {ck} was refused"
            );
        }
        for ck in &collected {
            if !same_rollback(&env, &oracle, &clock, now + 1, ck) {
                refused += 1;
            }
        }
        // A second gc with the same settings finds nothing more.
        let again = gc(&env, &clock, now, &args);
        assert_eq!(again["blobs"]["files"], 0, "{again}");
        assert!(again["action"].is_null(), "{r}\n{again}");
    }
    assert!(
        removed > 0,
        "the histories gave gc nothing to remove: the test proves nothing"
    );
    assert!(
        cut > 0,
        "no gc took records out of the ledger: the test proves nothing"
    );
    assert!(
        refused > 0,
        "no collected checkpoint was refused: the test proves nothing"
    );
}

/// Two checkpoints with calls after each; returns them and the first
/// call's file-patch record.
fn two_turns(env: &TestEnv, clock: &Clock) -> (String, String, serde_json::Value) {
    let c0 = checkpoint(env, clock, 0, "start");
    exec(env, clock, 0, "echo one > a.txt");
    exec(env, clock, 1, "echo two > a.txt");
    let c1 = checkpoint(env, clock, 10, "later");
    exec(env, clock, 10, "echo three > a.txt");
    let log = env.ckpt(&["log", "--json"]).json();
    let first_call = log["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "file_patch")
        .unwrap()
        .clone();
    (c0, c1, first_call)
}

/// gc --keep 1 over [`two_turns`]: c0 collected, c1 kept, and what only
/// c0 needed gone.
fn gc_keeping_the_newest(env: &TestEnv, clock: &Clock, c0: &str, c1: &str) -> serde_json::Value {
    let r = gc(env, clock, 20, &["--keep", "1"]);
    assert_eq!(ids(&r["kept_checkpoints"]), vec![c1.to_string()]);
    assert_eq!(ids(&r["collected_checkpoints"]), vec![c0.to_string()]);
    assert!(r["action"].as_str().unwrap().starts_with("act_"));
    // "one" was only ever the first call's after and the second's before.
    assert!(!blob_path(env, b"one\n").exists());
    assert!(
        blob_path(env, b"two\n").exists(),
        "the kept checkpoint's content"
    );
    r
}

/// The kept checkpoint still restores, and the ledger says what gc did.
fn the_kept_one_restores(env: &TestEnv, clock: &Clock, c1: &str) {
    let rb = at(env, clock, 21, &["rollback", "--to", c1]);
    assert_eq!(rb.code, 0, "{}", rb.stderr);
    assert_eq!(std::fs::read(env.ws.join("a.txt")).unwrap(), b"two\n");
    let log = env.ckpt(&["log"]);
    assert!(log.stdout.contains("gc started (keep 1)"), "{}", log.stdout);
    assert!(log.stdout.contains("gc succeeded"), "{}", log.stdout);
}

#[test]
fn history_gc_took_out_of_the_ledger_is_refused_by_name_and_verify_says_where_it_starts() {
    let env = TestEnv::init();
    let clock = Clock::new();
    let (c0, c1, first_call) = two_turns(&env, &clock);
    status_view_agrees(&env, "before gc");
    let r = gc_keeping_the_newest(&env, &clock, &c0, &c1);
    // The view anchored in the old ledger is built again from the cut one.
    status_view_agrees(&env, "after the cut");
    let cut = r["ledger_cut_seq"].as_u64().expect("gc cut the ledger");
    assert!(r["ledger_records"].as_u64().unwrap() >= 7, "{r}");
    assert!(r["ledger_held"].is_null(), "nothing held the cut: {r}");
    assert_eq!(r["checkpoint_files"], 1, "c0's file went with its record");
    let gone = format!("`ckpt gc` took it out with the history up to seq {cut}");
    let rb = at(&env, &clock, 21, &["rollback", "--to", &c0]);
    assert_eq!(rb.code, 1);
    assert!(
        rb.stderr.contains(&format!("`{c0}` is not in the ledger")),
        "{}",
        rb.stderr
    );
    assert!(rb.stderr.contains(&gone), "{}", rb.stderr);
    assert!(!rb.stderr.contains("panicked"));
    let call = first_call["call"].as_str().unwrap();
    let rb = at(&env, &clock, 21, &["rollback", "--call", call]);
    assert_eq!(rb.code, 1);
    assert!(rb.stderr.contains(&gone), "{}", rb.stderr);
    let show = env.ckpt(&["show", first_call["patch"].as_str().unwrap()]);
    assert_ne!(show.code, 0);
    assert!(show.stderr.contains(&gone), "{}", show.stderr);
    let v = verify_ok(&env);
    assert_eq!(v["ledger_starts_at"].as_u64(), Some(cut + 1), "{v}");
    // status, log and recover read the shortened ledger.
    for args in [&["status"][..], &["log", "-n", "5"], &["recover"]] {
        let r = env.ckpt(args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    }
    let log = env.ckpt(&["log"]);
    assert!(
        log.stdout.starts_with(&format!(
            "(the records up to seq {cut} were taken out of the ledger by `ckpt gc`)"
        )),
        "{}",
        log.stdout
    );
    the_kept_one_restores(&env, &clock, &c1);
    verify_ok(&env);
}

#[test]
fn a_call_in_doubt_holds_the_ledger_whole_and_collected_history_is_refused_by_name() {
    let env = TestEnv::init();
    let clock = Clock::new();
    // A call that started first and never ended: it may still write, so
    // the records from its start on stay in the ledger.
    let payload = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hooks/generic/write.pre.json"),
    )
    .unwrap();
    let r = run_with_stdin(
        &env,
        &["hook", "pre", "--format", "generic"],
        &payload,
        &[("CKPT_TIMESTAMP", &clock.at(0))],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (c0, c1, first_call) = two_turns(&env, &clock);
    status_view_agrees(&env, "before gc");
    let r = gc_keeping_the_newest(&env, &clock, &c0, &c1);
    // The view is extended across the gc record: a.txt's run of changes
    // is split at the horizon, as the plan splits it.
    status_view_agrees(&env, "after gc, the ledger whole");
    assert_eq!(r["ledger_records"], 0, "{r}");
    assert!(r["ledger_cut_seq"].is_null(), "{r}");
    // gc says what holds the ledger whole.
    assert_eq!(r["ledger_held"]["from_seq"], 1, "{r}");
    assert!(
        r["ledger_held"]["by"]
            .as_str()
            .unwrap()
            .contains("call-generic-write-1 is in doubt or unfinished (`ckpt recover`)"),
        "{r}"
    );
    let again = at(&env, &clock, 20, &["gc", "--keep", "1", "--dry-run"]);
    assert!(
        again.stdout.contains(
            "the ledger keeps its records from seq 1 on: call-generic-write-1 is in doubt"
        ),
        "{}",
        again.stdout
    );
    let rb = at(&env, &clock, 21, &["rollback", "--to", &c0]);
    assert_eq!(rb.code, 1);
    assert!(
        rb.stderr.contains(&format!(
            "checkpoint {c0} is older than what `ckpt gc` kept"
        )),
        "{}",
        rb.stderr
    );
    assert!(!rb.stderr.contains("panicked"));
    let call = first_call["call"].as_str().unwrap();
    let rb = at(&env, &clock, 21, &["rollback", "--call", call]);
    assert_eq!(rb.code, 1);
    assert!(
        rb.stderr.contains("collected by `ckpt gc`"),
        "{}",
        rb.stderr
    );
    let show = env.ckpt(&["show", first_call["patch"].as_str().unwrap()]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(
        show.stdout.contains("diff collected by `ckpt gc`"),
        "{}",
        show.stdout
    );
    let v = verify_ok(&env);
    assert!(v["collected"].as_u64().unwrap() >= 2, "{v}");
    assert!(v["ledger_starts_at"].is_null(), "a whole ledger: {v}");
    the_kept_one_restores(&env, &clock, &c1);
}

#[test]
fn a_blob_verify_needs_that_goes_missing_is_still_a_problem_after_gc() {
    let env = TestEnv::init();
    let clock = Clock::new();
    exec(&env, &clock, 0, "echo one > a.txt");
    let _ = checkpoint(&env, &clock, 5, "kept");
    exec(&env, &clock, 5, "echo two > a.txt");
    gc(&env, &clock, 20, &["--keep", "1"]);
    verify_ok(&env);
    // "two" is named after the horizon: losing it is damage, not design.
    std::fs::remove_file(blob_path(&env, b"two\n")).unwrap();
    let r = env.ckpt(&["verify", "--json"]);
    assert_eq!(r.code, 4, "{}", r.stdout);
    assert!(
        r.stdout.contains("missing") || r.stdout.contains("blob"),
        "{}",
        r.stdout
    );
}

#[test]
fn an_open_conflict_keeps_its_three_contents_and_resolves_after_gc() {
    let env = TestEnv::init();
    let clock = Clock::new();
    env.write("f.txt", b"a\nb\nc\n");
    let _ = checkpoint(&env, &clock, 0, "start");
    exec(&env, &clock, 0, "printf 'a\\nB by agent\\nc\\n' > f.txt");
    // The user rewrites the agent's line: undoing the call conflicts.
    env.write("f.txt", b"a\nB by user\nc\n");
    let log = env.ckpt(&["log", "--json"]).json();
    let call = log["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "file_patch")
        .unwrap()["call"]
        .as_str()
        .unwrap()
        .to_string();
    let r = at(&env, &clock, 1, &["rollback", "--call", &call, "--json"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let conflict = r.json()["conflicts"][0]["conflict"]
        .as_str()
        .unwrap()
        .to_string();
    // Much later work, and a gc that keeps no checkpoint at all.
    let _ = checkpoint(&env, &clock, 40, "later");
    exec(&env, &clock, 40, "echo other > g.txt");
    let g = gc(&env, &clock, 60, &["--keep", "0"]);
    assert!(
        g["blobs"]["files"].as_u64().unwrap() + g["patches"]["files"].as_u64().unwrap() > 0,
        "{g}"
    );
    for b in [
        &b"a\nb\nc\n"[..],
        b"a\nB by agent\nc\n",
        b"a\nB by user\nc\n",
    ] {
        assert!(
            blob_path(&env, b).exists(),
            "{:?}",
            String::from_utf8_lossy(b)
        );
    }
    verify_ok(&env);
    let show = env.ckpt(&["show", &conflict]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    let r = at(&env, &clock, 61, &["resolve", &conflict, "--apply-agent"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The agent's line undone, nothing else.
    assert_eq!(std::fs::read(env.ws.join("f.txt")).unwrap(), b"a\nb\nc\n");
}

#[test]
fn a_call_in_doubt_keeps_its_before_and_is_undone_when_its_post_comes_after_gc() {
    let env = TestEnv::init();
    let clock = Clock::new();
    env.write("src/generated.rs", b"the user's old file\n");
    let payload = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hooks/generic/write.pre.json"),
    )
    .unwrap();
    let t = clock.at(0);
    let r = run_with_stdin(
        &env,
        &["hook", "pre", "--format", "generic"],
        &payload,
        &[("CKPT_TIMESTAMP", &t)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The call runs a long time; history goes on and gc runs meanwhile.
    let _ = checkpoint(&env, &clock, 40, "later");
    exec(&env, &clock, 40, "echo other > g.txt");
    gc(&env, &clock, 60, &["--keep", "0"]);
    assert!(blob_path(&env, b"the user's old file\n").exists());
    env.write("src/generated.rs", b"// generated\n");
    let post = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hooks/generic/write.post.json"),
    )
    .unwrap();
    let t = clock.at(61);
    let r = run_with_stdin(
        &env,
        &["hook", "post", "--format", "generic"],
        &post,
        &[("CKPT_TIMESTAMP", &t)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    verify_ok(&env);
    let r = at(
        &env,
        &clock,
        62,
        &["rollback", "--call", "call-generic-write-1"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read(env.ws.join("src/generated.rs")).unwrap(),
        b"the user's old file\n"
    );
}

#[test]
fn a_rollback_cut_short_is_finished_before_gc_and_ends_as_recover_would() {
    let env = TestEnv::init();
    let clock = Clock::new();
    let c0 = checkpoint(&env, &clock, 0, "start");
    exec(&env, &clock, 0, "echo one > a.txt; echo x > b.txt");
    exec(&env, &clock, 1, "echo two > a.txt; rm b.txt");
    let r = env.ckpt_env(
        &["rollback", "--to", &c0],
        &[
            ("CKPT_TIMESTAMP", &clock.at(2)),
            ("CKPT_FAILPOINTS", "rollback.after_file=1*abort"),
        ],
    );
    assert_ne!(r.code, 0, "the failpoint stops it");
    let oracle = copy_workspace(&env);
    let rec = at(&oracle, &clock, 30, &["recover"]);
    assert!(rec.code == 0 || rec.code == 5, "{}", rec.stderr);
    gc(&env, &clock, 30, &["--keep", "0"]);
    verify_ok(&env);
    assert_eq!(
        tree(&env.ws, &[".agent-runtime"]),
        tree(&oracle.ws, &[".agent-runtime"])
    );
    assert!(!env.ws.join("a.txt").exists() && !env.ws.join("b.txt").exists());
}

#[test]
fn a_crash_at_each_write_point_of_gc_leaves_a_workspace_that_verifies_and_restores() {
    let env = TestEnv::init();
    let clock = Clock::new();
    let mut rng = Rng(seed(2424) | 1);
    let cks = history(&env, &clock, &mut rng, 5);
    let now = 5 * 4 + 10;
    let oracle = copy_workspace(&env);
    // What an uninterrupted gc leaves.
    let whole = copy_workspace(&env);
    let w = gc(&whole, &clock, now, &["--keep", "2"]);
    assert!(
        w["ledger_records"].as_u64().unwrap() > 0,
        "the gc cuts the ledger, so its write points are among those crashed at: {w}"
    );
    let artifacts = |e: &TestEnv| -> Vec<std::path::PathBuf> {
        let root = e.rt().join("artifacts");
        files_under(&root)
            .into_iter()
            .map(|p| p.strip_prefix(&root).unwrap().to_path_buf())
            .collect()
    };
    let expected = artifacts(&whole);
    let mut crashed = 0;
    for k in 1..=60u64 {
        let w = copy_workspace(&env);
        let fp = format!("*={k}*abort");
        let r = w.ckpt_env(
            &["gc", "--keep", "2"],
            &[("CKPT_TIMESTAMP", &clock.at(now)), ("CKPT_FAILPOINTS", &fp)],
        );
        if r.code == 0 {
            assert!(crashed > 0, "gc passed no write point");
            break;
        }
        crashed += 1;
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
        // Whatever the crash left verifies, and the kept checkpoints restore.
        verify_ok(&w);
        for ck in &cks[cks.len() - 2..] {
            assert!(
                same_rollback(&w, &oracle, &clock, now + 1, ck),
                "{ck} after a crash at {k}"
            );
        }
        // recover finishes a gc whose plan was recorded (or finds none);
        // the same gc run again then leaves what an uninterrupted one does.
        let rec = at(&w, &clock, now + 1, &["recover", "--json"]);
        assert!(rec.code == 0 || rec.code == 5, "{}", rec.stderr);
        gc(&w, &clock, now, &["--keep", "2"]);
        assert_eq!(artifacts(&w), expected, "after a crash at write point {k}");
        let v = verify_ok(&w);
        assert_eq!(
            v["ledger_starts_at"],
            verify_ok(&whole)["ledger_starts_at"],
            "the ledger is cut where an uninterrupted gc cuts it, after a crash at {k}"
        );
        assert!(k < 60, "gc never finished without a crash");
    }
    assert!(crashed >= 3, "only {crashed} write points");
}

#[test]
fn contents_within_the_grace_period_stay_and_a_found_copy_is_freshened() {
    let env = TestEnv::init();
    // An orphan blob (a crash between storing and recording), just written.
    let orphan = b"stored by a hook that died\n";
    let p = blob_path(&env, orphan);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, orphan).unwrap();
    // The real clock: it is within the hour.
    let r = env.ckpt(&["gc", "--keep", "0", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(p.exists(), "a content stored this last hour stays");
    let old = |p: &Path| {
        let st = std::process::Command::new("touch")
            .args(["-m", "-d", "3 hours ago"])
            .arg(p)
            .status()
            .unwrap();
        assert!(st.success());
    };
    old(&p);
    let r = env.ckpt(&["gc", "--keep", "0", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!p.exists(), "an old orphan goes: {}", r.stdout);
    // A copy a hook finds again is freshened, so a gc running meanwhile
    // cannot take it from under the record about to name it.
    let r = env.ckpt(&["exec", "--", "sh", "-c", "echo same > a.txt"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let b = blob_path(&env, b"same\n");
    old(&b);
    let before = std::fs::metadata(&b).unwrap().modified().unwrap();
    let r = env.ckpt(&["exec", "--", "sh", "-c", "echo same > c.txt"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let after = std::fs::metadata(&b).unwrap().modified().unwrap();
    assert!(
        after.duration_since(before).unwrap().as_secs() > 3600,
        "the found copy's mtime was not refreshed"
    );
}

#[test]
fn a_prompt_hook_starts_gc_in_the_background_past_the_budget_once_an_hour() {
    let env = TestEnv::init();
    let cfg = env.rt().join("config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace("max_runtime_bytes = 2147483648", "max_runtime_bytes = 1"),
    )
    .unwrap();
    let payload = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hooks/claude/user_prompt.prompt.json"),
    )
    .unwrap()
    .replace("$WS", env.ws.to_str().unwrap());
    // Over the budget even after collecting (all of it is recent): said in
    // errors.jsonl; under it, an event in trace.jsonl.
    let seen = || {
        ["trace.jsonl", "errors.jsonl"]
            .iter()
            .map(|f| std::fs::read_to_string(env.rt().join(f)).unwrap_or_default())
            .collect::<String>()
            .lines()
            .filter(|l| l.contains("gc_over_budget") || l.contains("\"gc_auto\""))
            .count()
    };
    let r = run_with_stdin(&env, &["hook", "prompt"], payload.as_bytes(), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stderr, "", "the hook says nothing of it");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while seen() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(seen(), 1, "the background gc did not report");
    // Within the hour: the next prompt starts none.
    let r = run_with_stdin(&env, &["hook", "prompt"], payload.as_bytes(), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(seen(), 1);
}

/// A collection that leaves `.agent-runtime/` over its budget is said by
/// `ckpt status` (a warning line, `over_budget` in JSON) until a
/// collection fits it again.
#[test]
fn status_says_when_gc_left_the_runtime_over_its_budget() {
    let env = TestEnv::init();
    let cfg = env.rt().join("config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let set = |budget: &str| {
        std::fs::write(
            &cfg,
            text.replace(
                "max_runtime_bytes = 2147483648",
                &format!("max_runtime_bytes = {budget}"),
            ),
        )
        .unwrap();
    };
    env.write("a.txt", b"one\n");
    let r = env.ckpt(&["exec", "--", "sh", "-c", "echo two > a.txt"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let status = || {
        let r = env.ckpt(&["status"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let j = env.ckpt(&["--json", "status"]);
        assert_eq!(j.code, 0, "{}", j.stderr);
        (r.stderr, j.json()["over_budget"].clone())
    };
    assert_eq!(status().1, serde_json::Value::Null);
    set("1");
    let r = env.ckpt(&["gc", "--auto"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (said, json) = status();
    assert!(
        said.contains("over max_runtime_bytes") && said.contains("keep_days"),
        "{said}"
    );
    assert_eq!(json["max_runtime_bytes"], 1);
    assert!(json["runtime_bytes"].as_u64().unwrap() > 1, "{json}");
    // Budget raised: the next collection fits it and status is quiet.
    set("2147483648");
    let r = env.ckpt(&["gc"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (said, json) = status();
    assert!(!said.contains("max_runtime_bytes"), "{said}");
    assert_eq!(json, serde_json::Value::Null);
}

#[test]
fn bad_arguments_are_usage_errors_in_one_line() {
    let env = TestEnv::init();
    for args in [
        &["gc", "--older-than", "soon"][..],
        &["gc", "--keep", "-1"],
        &["gc", "--auto", "--keep", "1"],
    ] {
        let r = env.ckpt(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"));
    }
    let r = env.ckpt(&["gc", "--older-than", "soon"]);
    assert!(r.stderr.contains("30d, 12h"), "{}", r.stderr);
    // An empty workspace: nothing to collect, said so.
    let r = env.ckpt(&["gc"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("nothing to collect"), "{}", r.stdout);
}

/// A big content stored as chunks goes with its manifest, its chunks with
/// it, except those a kept version shares; the kept version is restored
/// byte for byte from what stays.
#[test]
fn a_big_contents_chunks_go_with_it_and_those_a_kept_version_shares_stay() {
    let env = TestEnv::init();
    let clock = Clock::new();
    let v1 = noise(17 << 20, 5);
    let mid = v1.len() / 2;
    let mut v2 = v1.clone();
    v2[mid..mid + 4].copy_from_slice(b"abcd");
    let src = env.dir.path().join("v1.bin");
    std::fs::write(&src, &v1).unwrap();
    checkpoint(&env, &clock, 0, "start");
    exec(&env, &clock, 0, &format!("cp '{}' big.bin", src.display()));
    exec(
        &env,
        &clock,
        1,
        &format!("printf abcd | dd of=big.bin bs=1 seek={mid} conv=notrunc 2>/dev/null"),
    );
    let c1 = checkpoint(&env, &clock, 10, "later");
    exec(&env, &clock, 10, "rm big.bin; echo small > a.txt");
    let k1 = chunks_of(&env, &v1).unwrap();
    let k2 = chunks_of(&env, &v2).unwrap();
    let only_v1: Vec<_> = k1.iter().filter(|c| !k2.contains(c)).collect();
    assert!(!only_v1.is_empty() && only_v1.len() < k1.len());
    let only_v1_bytes: u64 = only_v1.iter().map(|c| c.1).sum();

    let files = files_under(&env.rt().join("artifacts"));
    let dry = gc(&env, &clock, 20, &["--keep", "1", "--dry-run"]);
    assert_eq!(
        files_under(&env.rt().join("artifacts")),
        files,
        "a dry run removes nothing"
    );
    // The first version's chunks and its manifest (a few hundred bytes).
    let would = dry["blobs"]["bytes"].as_u64().unwrap();
    assert!(
        (only_v1_bytes..only_v1_bytes + 4096).contains(&would),
        "{would} bytes of blobs would go, {only_v1_bytes} of them v1's own chunks"
    );
    let r = gc(&env, &clock, 20, &["--keep", "1"]);
    assert_eq!(r["blobs"]["bytes"], dry["blobs"]["bytes"]);
    assert!(
        chunks_of(&env, &v1).is_none(),
        "the first version's manifest went"
    );
    assert!(chunks_of(&env, &v2).is_some(), "the kept version's stays");
    for (h, _) in &k2 {
        assert!(blob_file(&env, h).is_file(), "a kept chunk {h} went");
    }
    for (h, _) in &only_v1 {
        assert!(!blob_file(&env, h).exists(), "chunk {h} of v1 only stayed");
    }
    verify_ok(&env);
    let rb = at(&env, &clock, 21, &["rollback", "--to", &c1]);
    assert_eq!(rb.code, 0, "{}", rb.stderr);
    assert!(std::fs::read(env.ws.join("big.bin")).unwrap() == v2);
    assert!(!env.ws.join("a.txt").exists());
    verify_ok(&env);
}

#[test]
fn a_lost_or_garbled_ledger_base_is_refused_then_repair_records_the_cut_again() {
    for damage in ["deleted", "garbled"] {
        let env = TestEnv::init();
        let clock = Clock::new();
        let (c0, c1, _) = two_turns(&env, &clock);
        let r = gc_keeping_the_newest(&env, &clock, &c0, &c1);
        let cut = r["ledger_cut_seq"].as_u64().expect("gc cut the ledger");
        let base = env.rt().join("ledger.base");
        let whole = std::fs::read(&base).unwrap();
        if damage == "deleted" {
            std::fs::remove_file(&base).unwrap();
        } else {
            std::fs::write(&base, b"{\"v\":1,\"cuts\":[{\"seq\":").unwrap();
        }
        // Nothing explains the records before the ledger's first: damage,
        // refused as such, never read as a whole history.
        let v = env.ckpt(&["verify", "--json"]);
        assert_eq!(v.code, 4, "{damage}: {}", v.stdout);
        assert!(
            v.stdout
                .contains(&format!("the ledger starts at seq {}", cut + 1)),
            "{damage}: {}",
            v.stdout
        );
        let rb = at(&env, &clock, 21, &["rollback", "--to", &c1]);
        assert_ne!(rb.code, 0, "{damage}: a rollback over a damaged ledger");
        assert!(rb.stderr.contains("ckpt repair"), "{damage}: {}", rb.stderr);
        assert!(!rb.stderr.contains("panicked"));
        // repair finds the cut in gc's own record and writes it again.
        let rep = env.ckpt(&["repair", "--json"]);
        assert_eq!(rep.code, 0, "{damage}: {}{}", rep.stdout, rep.stderr);
        assert_eq!(rep.json()["base_restored"].as_u64(), Some(cut), "{damage}");
        assert_eq!(std::fs::read(&base).unwrap(), whole, "{damage}");
        if damage == "garbled" {
            let kept = std::fs::read_dir(env.rt().join("damaged"))
                .unwrap()
                .filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().starts_with("ledger.base-"));
            assert!(kept, "the garbled base is kept in damaged/");
        }
        let v = verify_ok(&env);
        assert_eq!(v["ledger_starts_at"].as_u64(), Some(cut + 1));
        the_kept_one_restores(&env, &clock, &c1);
    }
}

/// gc copies the records it keeps before it takes the ledger's lock (a
/// long copy must not make hooks wait past their lock timeout); calls
/// recorded meanwhile are copied under the lock, so none is lost.
#[test]
fn calls_recorded_while_gc_copies_the_ledger_are_kept() {
    let env = TestEnv::init();
    let clock = Clock::new();
    let (c0, c1, _) = two_turns(&env, &clock);
    let mut gc = env.command(&["gc", "--keep", "1", "--json"]);
    gc.env("CKPT_TIMESTAMP", clock.at(20))
        .env("CKPT_ID_SEED", clock.id_seed(20))
        .env("CKPT_FAILPOINTS", "gc.after_precopy=sleep(1500)")
        .stdout(std::process::Stdio::piped());
    let child = gc.spawn().unwrap();
    // Until the copy is on disk, then two calls during gc's pause.
    let tmp = env.rt().join("ledger.jsonl.compact-tmp");
    let start = std::time::Instant::now();
    while !tmp.exists() && start.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(tmp.exists(), "gc made no copy before its lock");
    exec(&env, &clock, 20, "echo during > during.txt");
    exec(&env, &clock, 20, "echo four > a.txt");
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["ledger_cut_seq"].as_u64().is_some(), "{r}");
    assert_eq!(ids(&r["collected_checkpoints"]), vec![c0]);
    verify_ok(&env);
    let log = env.ckpt(&["log"]).stdout;
    assert!(log.contains("create during.txt"), "{log}");
    // Both calls undo: the ledger holds them whole.
    let rb = at(&env, &clock, 21, &["rollback", "--last", "2"]);
    assert_eq!(rb.code, 0, "{}", rb.stderr);
    assert!(!env.ws.join("during.txt").exists());
    assert_eq!(std::fs::read(env.ws.join("a.txt")).unwrap(), b"three\n");
    the_kept_one_restores(&env, &clock, &c1);
}

/// `ledger.base` is not taken on its word: records removed from the
/// ledger's start by hand, with a cut written to match, are found by
/// `verify` (no gc record in the ledger planned that cut).
#[test]
fn records_removed_by_hand_behind_a_forged_cut_fail_verify_and_repair_counts_them_lost() {
    let env = TestEnv::init();
    let clock = Clock::new();
    let (c0, c1, _) = two_turns(&env, &clock);
    let r = gc_keeping_the_newest(&env, &clock, &c0, &c1);
    let action = r["action"].as_str().unwrap().to_string();
    verify_ok(&env);
    // Two more records go, and the base is rewritten to account for them.
    let ledger = env.ledger_path();
    let text = std::fs::read_to_string(&ledger).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let first: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    let (seq, prev) = (
        first["seq"].as_u64().unwrap(),
        first["prev"].as_str().unwrap(),
    );
    std::fs::write(&ledger, format!("{}\n", lines[2..].join("\n"))).unwrap();
    let base =
        serde_json::json!({"v": 1, "cuts": [{"seq": seq - 1, "hash": prev, "action": action}]});
    std::fs::write(env.rt().join("ledger.base"), format!("{base}\n")).unwrap();
    let v = env.ckpt(&["verify"]);
    assert_eq!(v.code, 4, "{}", v.stdout);
    assert!(
        v.stdout.contains(&format!(
            "the ledger starts at seq {seq} after a cut `ledger.base` gives to gc action {action}, but no gc record in the ledger planned that cut"
        )),
        "{}",
        v.stdout
    );
    // Nor does any action: it is refused as damage.
    let rb = at(&env, &clock, 21, &["rollback", "--last", "1"]);
    assert_eq!(rb.code, 1, "{}", rb.stderr);
    assert!(
        rb.stderr
            .contains("no gc record in the ledger planned that cut")
            && rb.stderr.contains("ckpt repair"),
        "{}",
        rb.stderr
    );
    // repair does not take the cut on its word either: the records it hid
    // count as lost (a stand-in each), and the workspace works again.
    let rep = env.ckpt(&["repair", "--json"]);
    assert_eq!(rep.code, 0, "{}{}", rep.stdout, rep.stderr);
    let rep = rep.json();
    assert_eq!(rep["base_dropped"], serde_json::json!([seq - 1]), "{rep}");
    assert_eq!(rep["lost"], serde_json::json!([seq - 2, seq - 1]), "{rep}");
    verify_ok(&env);
    // c1's record was among those removed; the last call's patch was not.
    let rb = at(&env, &clock, 21, &["rollback", "--to", &c1]);
    assert_eq!(rb.code, 1, "{}", rb.stderr);
    let rb = at(&env, &clock, 21, &["rollback", "--last", "1"]);
    assert_eq!(rb.code, 0, "{}", rb.stderr);
    assert_eq!(std::fs::read(env.ws.join("a.txt")).unwrap(), b"two\n");
}
