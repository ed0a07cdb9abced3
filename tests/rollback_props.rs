//! Rollback properties on random inputs (RELIABILITY T13), through the library.
//!
//! Every case builds a workspace, records agent calls with the library's call
//! API, sometimes edits files as the user, and checks:
//! - with no user edits, `rollback --to` the first checkpoint restores every
//!   file byte for byte (absent stays absent, empty stays empty, CRLF and a
//!   missing final newline kept);
//! - the rollback's undo (`--action`) returns the agent's state exactly;
//! - rolling back twice is a no-op;
//! - user-only changes survive and agent-only changes are removed;
//! - overlapping edits leave the user's bytes untouched and raise a conflict.
//!
//! `CKPT_PROP_CASES` sets the number of cases (default 96); `CKPT_SEED` replays.

use std::collections::BTreeMap;
use std::path::Path;

use ckpt::config::Config;
use ckpt::rollback::{FileResult, RollbackOptions, Selector, rollback};
use ckpt::{CallOptions, CallStatus, CheckpointOptions, OpenOptions, Workspace};

use crate::common::{Rng, seed};

const FILES: [&str; 5] = ["f0.txt", "f1.txt", "d/f2.txt", "d/e/f3.txt", "f4.txt"];

fn cases() -> u64 {
    std::env::var("CKPT_PROP_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(96)
}

fn random_text(r: &mut Rng) -> Vec<u8> {
    let n = r.below(8);
    let mut out = Vec::new();
    for i in 0..n {
        out.extend_from_slice(["a", "b", "c", "x", "yy", ""][r.below(6) as usize].as_bytes());
        let last = i + 1 == n;
        match r.below(10) {
            0..=5 => out.push(b'\n'),
            6..=7 => out.extend_from_slice(b"\r\n"),
            _ if last => {}
            _ => out.push(b'\n'),
        }
    }
    out
}

/// A file's state: `None` is absent.
type Files = BTreeMap<&'static str, Option<Vec<u8>>>;

fn read_all(root: &Path) -> Files {
    FILES
        .iter()
        .map(|f| {
            let p = root.join(f);
            (*f, std::fs::read(&p).ok())
        })
        .collect()
}

fn write_disk(root: &Path, f: &str, v: &Option<Vec<u8>>) {
    let p = root.join(f);
    match v {
        Some(b) => {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, b).unwrap();
        }
        None => {
            let _ = std::fs::remove_file(&p);
        }
    }
}

fn new_ws() -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    let opts = OpenOptions {
        fsync: ckpt::durable::Fsync::Off,
        ..Default::default()
    };
    let (ws, _) = Workspace::init(dir.path(), opts).unwrap();
    (dir, ws)
}

/// One agent call writing or deleting `changes` through the library.
fn agent_call(ws: &Workspace, session: &str, changes: &[(&str, Option<Vec<u8>>)]) -> String {
    let paths = changes
        .iter()
        .map(|(f, _)| ws.rel_path(f.as_bytes(), None).unwrap())
        .collect::<Vec<_>>();
    let mut call = ws
        .begin_call(CallOptions {
            session: Some(session.into()),
            tool: "Write".into(),
            paths: paths.clone(),
            ..Default::default()
        })
        .unwrap();
    for ((_, v), rel) in changes.iter().zip(&paths) {
        match v {
            Some(b) => call.write_file(rel, b).unwrap(),
            None => {
                if ws.root().join(rel.to_string()).exists() {
                    call.delete_file(rel).unwrap()
                }
            }
        }
    }
    call.finish(CallStatus::Succeeded, None).unwrap().call
}

fn run(ws: &Workspace, selector: Selector) -> ckpt::rollback::RollbackReport {
    rollback(
        ws,
        &Config::default(),
        &RollbackOptions {
            selector,
            paths: Vec::new(),
            dry_run: false,
        },
    )
    .unwrap()
}

#[test]
fn without_user_edits_rollback_restores_every_byte_and_its_undo_returns_the_agent_state() {
    let mut r = Rng(seed(0x5eed_7013));
    for case in 0..cases() {
        let (dir, ws) = new_ws();
        let root = dir.path();
        for f in FILES {
            let v = (r.below(5) != 0).then(|| random_text(&mut r));
            write_disk(root, f, &v);
        }
        let initial = read_all(root);
        let ck = ws
            .checkpoint(CheckpointOptions::default())
            .unwrap()
            .checkpoint;
        for _ in 0..1 + r.below(4) {
            let mut changes = Vec::new();
            for _ in 0..1 + r.below(2) {
                let f = FILES[r.below(FILES.len() as u64) as usize];
                if changes.iter().any(|(g, _)| *g == f) {
                    continue;
                }
                let v = if r.below(5) == 0 {
                    None
                } else {
                    Some(random_text(&mut r))
                };
                changes.push((f, v));
            }
            agent_call(&ws, "s", &changes);
        }
        let agent_state = read_all(root);
        let rep = run(&ws, Selector::To(ck.clone()));
        assert!(
            rep.conflicts.is_empty(),
            "case {case}: conflicts without user edits: {:?}",
            rep.files
        );
        assert_eq!(
            read_all(root),
            initial,
            "case {case}: rollback did not restore"
        );
        // Twice is a no-op.
        let again = run(&ws, Selector::To(ck.clone()));
        assert!(
            again
                .files
                .iter()
                .all(|f| f.result == FileResult::Unchanged),
            "case {case}: second rollback changed {:?}",
            again.files
        );
        assert_eq!(read_all(root), initial, "case {case}: second rollback");
        // The second `--to` took the first rollback back (rollbacks made
        // after the checkpoint are): undoing both, newest first, is the
        // agent's state, byte for byte.
        let flags = run(&ws, Selector::Action(again.action.clone()));
        assert_eq!(read_all(root), initial, "case {case}: undo of a no-op");
        assert!(
            flags
                .files
                .iter()
                .all(|f| f.result == FileResult::Unchanged)
        );
        run(&ws, Selector::Action(rep.action.clone()));
        assert_eq!(read_all(root), agent_state, "case {case}: redo");
        assert!(ws.verify().unwrap().ok, "case {case}: verify");
    }
}

/// Lines unique to their position, so a diff aligns them one way only.
fn numbered(n: usize, tag: &str, crlf_every: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let end = if crlf_every > 0 && i % crlf_every == 0 {
                "\r\n"
            } else {
                "\n"
            };
            format!("{tag}{i}{end}").into_bytes()
        })
        .collect()
}

fn join(lines: &[Vec<u8>], final_newline: bool) -> Vec<u8> {
    let mut v = lines.concat();
    if !final_newline && v.ends_with(b"\n") {
        v.pop();
        if v.ends_with(b"\r") {
            v.pop();
        }
    }
    v
}

#[test]
fn user_only_changes_survive_and_agent_only_changes_are_removed() {
    let mut r = Rng(seed(0x5eed_7014));
    for case in 0..cases() {
        let (dir, ws) = new_ws();
        let root = dir.path();
        let n = 9 + r.below(8) as usize;
        let crlf = r.below(3) as usize;
        let eol = r.below(2) == 0;
        let base = numbered(n, "line", crlf);
        write_disk(root, "f0.txt", &Some(join(&base, eol)));
        // The agent rewrites some of the first three lines (maybe changing
        // their count); the user then rewrites some of the last three.
        let mut agent = base.clone();
        let a_start = r.below(2) as usize;
        let a_len = 1 + r.below(2) as usize;
        let new_lines = numbered(r.below(3) as usize, "agent", 0);
        agent.splice(a_start..a_start + a_len, new_lines.clone());
        agent_call(&ws, "s", &[("f0.txt", Some(join(&agent, eol)))]);
        let u_len = 1 + r.below(2) as usize;
        let user_new = numbered(1 + r.below(2) as usize, "user", 0);
        let mut user = agent.clone();
        let ul = user.len();
        user.splice(ul - u_len..ul, user_new.clone());
        // The user's last line keeps the file's final-newline shape.
        write_disk(root, "f0.txt", &Some(join(&user, eol)));
        let mut expected = base.clone();
        let bl = expected.len();
        expected.splice(bl - u_len..bl, user_new);
        let expected = join(&expected, eol);

        let rep = run(&ws, Selector::Call(first_call(&ws)));
        assert_eq!(rep.files.len(), 1);
        assert_eq!(
            rep.files[0].result,
            FileResult::Merged,
            "case {case}: {:?}",
            rep.files
        );
        assert_eq!(
            String::from_utf8_lossy(&std::fs::read(root.join("f0.txt")).unwrap()),
            String::from_utf8_lossy(&expected),
            "case {case}: merge result"
        );
    }
}

fn first_call(ws: &Workspace) -> String {
    ws.read_ledger()
        .unwrap()
        .records
        .iter()
        .find_map(|r| match &r.body {
            ckpt::Body::ToolCall(c) => Some(c.call.clone()),
            _ => None,
        })
        .unwrap()
}

#[test]
fn overlapping_edits_leave_the_users_bytes_and_raise_a_conflict() {
    let mut r = Rng(seed(0x5eed_7015));
    for case in 0..cases() {
        let (dir, ws) = new_ws();
        let root = dir.path();
        let n = 3 + r.below(6) as usize;
        let base = numbered(n, "l", r.below(3) as usize);
        write_disk(root, "f0.txt", &Some(join(&base, true)));
        let k = r.below(n as u64) as usize;
        let mut agent = base.clone();
        agent[k] = b"agent\n".to_vec();
        agent_call(&ws, "s", &[("f0.txt", Some(join(&agent, true)))]);
        let mut user = agent.clone();
        user[k] = format!("user{case}\n").into_bytes();
        let user_bytes = join(&user, r.below(2) == 0);
        write_disk(root, "f0.txt", &Some(user_bytes.clone()));
        let rep = run(&ws, Selector::Call(first_call(&ws)));
        assert_eq!(rep.files[0].result, FileResult::Conflict, "case {case}");
        assert_eq!(rep.conflicts.len(), 1, "case {case}");
        assert_eq!(
            std::fs::read(root.join("f0.txt")).unwrap(),
            user_bytes,
            "case {case}: the user's file changed"
        );
        // The user's bytes are in the store (current_ref).
        let cur = rep.conflicts[0].current_ref.unwrap();
        assert_eq!(ws.blobs().get(&cur).unwrap(), user_bytes, "case {case}");
    }
}

/// T30: sessions A and B edit different regions of one file; rolling back A
/// keeps B's lines in every case; overlapping regions raise a conflict and
/// leave the file as it is.
#[test]
fn rolling_back_one_session_keeps_the_other_sessions_edits() {
    let mut r = Rng(seed(0x5eed_7030));
    for case in 0..cases() {
        let (dir, ws) = new_ws();
        let root = dir.path();
        let n = 10 + r.below(6) as usize;
        let base = numbered(n, "l", r.below(3) as usize);
        write_disk(root, "f0.txt", &Some(join(&base, true)));
        // A rewrites a line near the top, B one near the bottom; sometimes B
        // rewrites A's line instead (an overlap).
        let a = r.below(3) as usize;
        let overlap = r.below(4) == 0;
        let b = if overlap {
            a
        } else {
            n - 1 - r.below(3) as usize
        };
        let mut after_a = base.clone();
        after_a[a] = format!("A{case}\n").into_bytes();
        let a_first = r.below(2) == 0;
        let mut after_b = if a_first {
            after_a.clone()
        } else {
            base.clone()
        };
        after_b[b] = format!("B{case}\n").into_bytes();
        let (first, second) = if a_first {
            (("A", after_a.clone()), ("B", after_b.clone()))
        } else {
            let mut both = after_b.clone();
            both[a] = format!("A{case}\n").into_bytes();
            (("B", after_b.clone()), ("A", both))
        };
        agent_call(&ws, first.0, &[("f0.txt", Some(join(&first.1, true)))]);
        agent_call(&ws, second.0, &[("f0.txt", Some(join(&second.1, true)))]);
        let before = std::fs::read(root.join("f0.txt")).unwrap();
        let rep = run(&ws, Selector::Session("A".into()));
        let now = std::fs::read(root.join("f0.txt")).unwrap();
        let mut expected = base.clone();
        expected[b] = format!("B{case}\n").into_bytes();
        if overlap {
            // The session that wrote last owns the line now.
            if a_first {
                // B overwrote A's line: undoing A conflicts with B's edit.
                assert_eq!(rep.files[0].result, FileResult::Conflict, "case {case}");
                assert_eq!(now, before, "case {case}: file changed on conflict");
            } else {
                // A wrote last over B's line: undoing A brings B's line back.
                assert_eq!(now, join(&expected, true), "case {case}");
            }
        } else {
            assert_eq!(
                String::from_utf8_lossy(&now),
                String::from_utf8_lossy(&join(&expected, true)),
                "case {case}: B's edit lost or A's kept ({:?})",
                rep.files
            );
        }
    }
}

/// B4 step 5: a file that changes between the check and the rename is not
/// overwritten; it is reported `raced` and the action ends `failed`.
#[test]
fn a_file_changed_during_the_rollback_is_skipped_not_overwritten() {
    let env = crate::common::TestEnv::init();
    env.write("a.txt", b"one\ntwo\n");
    let ws = env.open();
    agent_call(&ws, "s", &[("a.txt", Some(b"one\nTWO\n".to_vec()))]);
    let call = first_call(&ws);
    drop(ws);
    let child = env
        .command(&["--json", "rollback", "--call", &call])
        .env("CKPT_FAILPOINTS", "rollback.before_rename=sleep(1500)")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The rollback's temp file appears once the plan is recorded and the new
    // content prepared: the user's write lands after that, before the rename.
    let start = std::time::Instant::now();
    while !std::fs::read_dir(&env.ws)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().starts_with(".ckpt-tmp-"))
    {
        assert!(
            start.elapsed().as_secs() < 20,
            "the rollback never got to its write"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    env.write("a.txt", b"the user's bytes\n");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "a raced rollback exits 1");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["files"][0]["result"], "raced", "{v}");
    assert_eq!(
        std::fs::read(env.ws.join("a.txt")).unwrap(),
        b"the user's bytes\n"
    );
    let log = env.ckpt(&["log", "--json"]).json();
    let ends: Vec<_> = log["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "action" && r["status"] != "started")
        .collect();
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["status"], "failed");
    let leftovers: Vec<_> = std::fs::read_dir(&env.ws)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".ckpt-tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "temp file left behind");
}

#[test]
fn a_rollback_of_many_files_is_exact_and_its_undo_too() {
    // Enough files that the write-back is prepared on two threads.
    let mut r = Rng(seed(0x5eed_0040));
    let (dir, ws) = new_ws();
    let root = dir.path();
    let names: Vec<String> = (0..48).map(|i| format!("d{}/f{i}.txt", i % 5)).collect();
    let read = |root: &Path| -> Vec<Option<Vec<u8>>> {
        names
            .iter()
            .map(|n| std::fs::read(root.join(n)).ok())
            .collect()
    };
    for n in &names[..40] {
        write_disk(root, n, &Some(random_text(&mut r)));
    }
    let initial = read(root);
    let ck = ws
        .checkpoint(CheckpointOptions::default())
        .unwrap()
        .checkpoint;
    // Modify 30, delete 5, create 8 (in one call), then edit some again.
    let mut changes: Vec<(&str, Option<Vec<u8>>)> = Vec::new();
    for n in &names[..30] {
        changes.push((n, Some(random_text(&mut r))));
    }
    for n in &names[30..35] {
        changes.push((n, None));
    }
    for n in &names[40..] {
        changes.push((n, Some(random_text(&mut r))));
    }
    agent_call(&ws, "s", &changes);
    let again: Vec<(&str, Option<Vec<u8>>)> = names[..10]
        .iter()
        .map(|n| (n.as_str(), Some(random_text(&mut r))))
        .collect();
    agent_call(&ws, "s", &again);
    let agent_state = read(root);
    let rep = run(&ws, Selector::To(ck));
    assert!(rep.conflicts.is_empty(), "{:?}", rep.files);
    // (A random text may equal the one it replaces: that file has nothing to undo.)
    assert!(rep.files.len() >= 40, "{} files", rep.files.len());
    assert!(read(root) == initial, "rollback did not restore every byte");
    run(&ws, Selector::Action(rep.action.clone()));
    assert!(
        read(root) == agent_state,
        "the undo is not the agent's state"
    );
    assert!(ws.verify().unwrap().ok);
}
