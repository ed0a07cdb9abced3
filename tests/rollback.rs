//! `ckpt rollback`, `conflicts`, `resolve` and `show CONFLICT`, driven as a user
//! would: the agent's calls go through real Claude Code hook payloads (Write,
//! Edit, and Bash calls whose changes the workspace scan captures), the user
//! edits files by hand, and every check is on exact bytes, modes, symlink
//! targets, JSON fields and exit codes (DESIGN §5, §6; RELIABILITY B4, F41–F48,
//! T30). The crash tests abort the real binary at every rollback failpoint; F48 injects
//! I/O errors there.

use std::collections::BTreeMap;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::{Entry, Run, TestEnv, tree};
use crate::hooks::hook;

/// Process-crash tests do not need real syncs (RELIABILITY, engineering rules).
pub(crate) const FAST: (&str, &str) = ("CKPT_TEST_FSYNC", "0");

// ------------------------------------------------------------------ helpers

pub(crate) fn ck(env: &TestEnv, args: &[&str]) -> Run {
    env.ckpt_env(args, &[FAST])
}

/// Runs `ckpt ARGS --json`; returns the exit code and the document.
pub(crate) fn ckj(env: &TestEnv, args: &[&str]) -> (i32, Value) {
    let mut a = args.to_vec();
    a.push("--json");
    let r = ck(env, &a);
    let v = if r.stdout.trim().is_empty() {
        Value::Null
    } else {
        r.json()
    };
    (r.code, v)
}

fn sha(b: &[u8]) -> String {
    ckpt::ContentHash::of(b).to_string()
}

fn checkpoint(env: &TestEnv) -> String {
    let (code, v) = ckj(env, &["checkpoint", "-m", "test"]);
    assert_eq!(code, 0, "{v}");
    v["checkpoint"].as_str().unwrap().to_string()
}

fn payload(
    env: &TestEnv,
    session: &str,
    id: &str,
    event: &str,
    tool: &str,
    input: &Value,
) -> Vec<u8> {
    let mut p = json!({
        "session_id": session, "transcript_path": "/dev/null", "cwd": env.ws,
        "hook_event_name": event, "tool_name": tool, "tool_input": input, "tool_use_id": id,
    });
    if event == "PostToolUse" {
        p["tool_response"] = json!({"success": true});
    }
    p.to_string().into_bytes()
}

/// One agent call: pre hook, the tool's change, post hook.
fn call(env: &TestEnv, session: &str, id: &str, tool: &str, input: Value, change: impl FnOnce()) {
    let r = hook(
        env,
        "pre",
        &payload(env, session, id, "PreToolUse", tool, &input),
        &[FAST],
    );
    assert_eq!(r.code, 0, "pre {id}: {}", r.stderr);
    change();
    let r = hook(
        env,
        "post",
        &payload(env, session, id, "PostToolUse", tool, &input),
        &[FAST],
    );
    assert_eq!(r.code, 0, "post {id}: {}", r.stderr);
}

/// The agent's Write tool.
fn write_call(env: &TestEnv, session: &str, id: &str, rel: &str, content: &str) {
    let input = json!({"file_path": env.ws.join(rel), "content": content});
    call(env, session, id, "Write", input, || {
        env.write(rel, content.as_bytes())
    });
}

/// The agent's Edit tool (one replacement, which must apply).
fn edit_call(env: &TestEnv, session: &str, id: &str, rel: &str, old: &str, new: &str) {
    let input = json!({"file_path": env.ws.join(rel), "old_string": old, "new_string": new, "replace_all": false});
    call(env, session, id, "Edit", input, || {
        let now = String::from_utf8(read(env, rel)).unwrap();
        assert_eq!(
            now.matches(old).count(),
            1,
            "{rel}: `{old}` must occur once in {now:?}"
        );
        std::fs::write(env.ws.join(rel), now.replacen(old, new, 1)).unwrap();
    });
}

/// The agent's Bash tool running `cmd` with `sh -c` in the workspace.
fn bash_call(env: &TestEnv, session: &str, id: &str, cmd: &str) {
    call(env, session, id, "Bash", json!({"command": cmd}), || {
        sh(env, cmd)
    });
}

/// A Bash call whose effect is `change` (for bytes a shell line cannot spell easily).
fn bash_with(env: &TestEnv, session: &str, id: &str, change: impl FnOnce()) {
    call(
        env,
        session,
        id,
        "Bash",
        json!({"command": "./generate"}),
        change,
    );
}

/// The user (or the agent's shell) running a command in the workspace.
fn sh(env: &TestEnv, cmd: &str) {
    let st = std::process::Command::new("sh")
        .args(["-c", cmd])
        .current_dir(&env.ws)
        .status()
        .unwrap();
    assert!(st.success(), "sh -c {cmd}");
}

fn read(env: &TestEnv, rel: &str) -> Vec<u8> {
    std::fs::read(env.ws.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn mode(env: &TestEnv, rel: &str) -> u32 {
    std::fs::symlink_metadata(env.ws.join(rel))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

fn chmod(env: &TestEnv, rel: &str, m: u32) {
    std::fs::set_permissions(env.ws.join(rel), std::fs::Permissions::from_mode(m)).unwrap();
}

fn present(env: &TestEnv, rel: &str) -> bool {
    std::fs::symlink_metadata(env.ws.join(rel)).is_ok()
}

/// The workspace as the user sees it (without `.agent-runtime/`).
fn ws_tree(env: &TestEnv) -> BTreeMap<PathBuf, Entry> {
    tree(&env.ws, &[".agent-runtime"])
}

fn records(env: &TestEnv) -> Vec<Value> {
    let (code, v) = ckj(env, &["log"]);
    assert_eq!(code, 0);
    v["records"].as_array().unwrap().clone()
}

/// Runs `ckpt rollback ARGS --json`.
fn rollback(env: &TestEnv, args: &[&str]) -> (i32, Value) {
    let mut a = vec!["rollback"];
    a.extend_from_slice(args);
    ckj(env, &a)
}

/// `path → field` over one list of a rollback report (`files`, `conflicts`);
/// entries without the field are left out.
fn by_path(v: &Value, list: &str, field: &str) -> BTreeMap<String, String> {
    v[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list} in {v}"))
        .iter()
        .filter_map(|f| {
            Some((
                f["path"].as_str()?.to_string(),
                f[field].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// `path → result` of a rollback report.
fn results(v: &Value) -> BTreeMap<String, String> {
    by_path(v, "files", "result")
}

fn expect_results(v: &Value, want: &[(&str, &str)]) {
    let want: BTreeMap<String, String> = want
        .iter()
        .map(|(p, r)| (p.to_string(), r.to_string()))
        .collect();
    assert_eq!(results(v), want, "{v:#}");
}

fn action_records(env: &TestEnv, act: &str) -> Vec<Value> {
    records(env)
        .into_iter()
        .filter(|r| r["kind"] == "action" && r["action"] == act)
        .collect()
}

/// The path of a blob in the store.
fn blob_path(env: &TestEnv, bytes: &[u8]) -> PathBuf {
    let hex = ckpt::ContentHash::of(bytes).hex();
    env.rt()
        .join("artifacts/blobs")
        .join(&hex[..2])
        .join(&hex[2..])
}

fn lines(n: usize) -> String {
    (1..=n).map(|i| format!("L{i}\n")).collect()
}

/// `lines(n)` with line `i` (1-based) replaced by `with`.
fn lines_with(n: usize, changes: &[(usize, &str)]) -> String {
    (1..=n)
        .map(|i| match changes.iter().find(|(j, _)| *j == i) {
            Some((_, s)) => format!("{s}\n"),
            None => format!("L{i}\n"),
        })
        .collect()
}

fn one_line(r: &Run) {
    let s = r.stderr.trim_end();
    assert!(!s.is_empty(), "an error says what went wrong");
    assert_eq!(s.lines().count(), 1, "one line: {s:?}");
}

// ------------------------------------------------------------------ 1. every kind of change

#[test]
fn every_kind_of_agent_change_is_undone_byte_for_byte() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\nbeta\ngamma\n");
    chmod(&env, "a.txt", 0o640);
    env.write("gone.txt", b"to be deleted\n");
    chmod(&env, "gone.txt", 0o644);
    env.write("old.txt", b"rename me\n");
    env.write("tool.sh", b"#!/bin/sh\necho hi\n");
    chmod(&env, "tool.sh", 0o644);
    env.write("target1.txt", b"one\n");
    env.write("target2.txt", b"two\n");
    symlink("target1.txt", env.ws.join("link")).unwrap();
    let before = ws_tree(&env);
    let ck1 = checkpoint(&env);

    edit_call(&env, "s1", "c1", "a.txt", "beta\n", "BETA\n");
    bash_call(&env, "s1", "c2", "chmod +x a.txt");
    write_call(&env, "s1", "c3", "new.txt", "created\n");
    bash_call(&env, "s1", "c4", "rm gone.txt");
    bash_call(&env, "s1", "c5", "mv old.txt moved.txt");
    bash_call(&env, "s1", "c6", "chmod +x tool.sh");
    bash_call(&env, "s1", "c7", "ln -sfn target2.txt link");
    let agent = ws_tree(&env);
    assert_eq!(read(&env, "a.txt"), b"alpha\nBETA\ngamma\n");
    assert_ne!(mode(&env, "a.txt") & 0o111, 0);
    assert_eq!(
        std::fs::read_link(env.ws.join("link")).unwrap(),
        Path::new("target2.txt")
    );

    let (code, v) = rollback(&env, &["--to", &ck1]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["dry_run"], false);
    assert_eq!(v["conflicts"], json!([]));
    expect_results(
        &v,
        &[
            ("a.txt", "restored"),
            ("gone.txt", "recreated"),
            ("link", "restored"),
            ("moved.txt", "deleted"),
            ("new.txt", "deleted"),
            ("old.txt", "recreated"),
            ("tool.sh", "restored"),
        ],
    );
    // The two rows of an undone rename say so.
    let notes = by_path(&v, "files", "note");
    assert_eq!(notes["moved.txt"], "renamed back to old.txt");
    assert_eq!(notes["old.txt"], "renamed back from moved.txt");
    // Everything — bytes, modes (0640 and 0600 included), the symlink as a
    // symlink with its old target, the files it pointed at — is as before.
    assert_eq!(ws_tree(&env), before);
    assert_eq!(mode(&env, "a.txt"), 0o640);
    assert_eq!(mode(&env, "gone.txt"), 0o644);
    assert!(
        std::fs::symlink_metadata(env.ws.join("link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_link(env.ws.join("link")).unwrap(),
        Path::new("target1.txt")
    );
    assert_eq!(
        read(&env, "target1.txt"),
        b"one\n",
        "never written through the link"
    );
    assert_eq!(
        read(&env, "target2.txt"),
        b"two\n",
        "never written through the link"
    );

    // The ledger: started (with the plan), one rollback patch per written path, the end.
    let act = v["action"].as_str().unwrap();
    let acts = action_records(&env, act);
    assert_eq!(acts.len(), 2, "{acts:#?}");
    assert_eq!(acts[0]["status"], "started");
    assert_eq!(acts[0]["type"], "rollback_files");
    assert_eq!(acts[0]["target"], json!({"to": ck1}));
    assert_eq!(acts[0]["plan"]["files"].as_array().unwrap().len(), 7);
    assert_eq!(acts[1]["status"], "succeeded");
    let rb: Vec<Value> = records(&env)
        .into_iter()
        .filter(|r| r["kind"] == "file_patch" && r["source"] == "rollback")
        .collect();
    assert_eq!(rb.len(), 7, "{rb:#?}");
    assert!(rb.iter().all(|p| p["call"] == act));
    assert_eq!(ck(&env, &["verify"]).code, 0);

    // And a redo puts the agent's work back exactly.
    let (code, v) = rollback(&env, &["--action", act]);
    assert_eq!(code, 0, "{v:#}");
    let redone = ws_tree(&env);
    assert_eq!(redone, agent, "exact bits included");
}

// ------------------------------------------------------------------ 2. user edits

/// The user's bytes a rollback replaces are stored first even when a file of
/// the right size already sits under their blob's name holding other bytes
/// (zeros, as a power loss between a blob's name and its data leaves): that
/// is no copy, and is replaced before the user's file is overwritten.
#[test]
fn a_damaged_copy_of_the_users_bytes_is_replaced_before_the_rollback_overwrites_them() {
    let env = TestEnv::init();
    env.write("f.txt", lines(10).as_bytes());
    edit_call(&env, "s1", "c1", "f.txt", "L2\n", "agent 2\n");
    let mine = lines_with(10, &[(2, "agent 2"), (9, "user 9")]);
    env.write("f.txt", mine.as_bytes());
    let blob = blob_path(&env, mine.as_bytes());
    std::fs::create_dir_all(blob.parent().unwrap()).unwrap();
    std::fs::write(&blob, vec![0u8; mine.len()]).unwrap();
    let (code, v) = rollback(&env, &["--call", "c1"]);
    assert_eq!(code, 0, "{v:#}");
    expect_results(&v, &[("f.txt", "merged")]);
    assert_eq!(std::fs::read(&blob).unwrap(), mine.as_bytes());
    assert_eq!(ck(&env, &["verify"]).code, 0);
}

#[test]
fn user_edits_outside_the_agents_hunk_are_kept() {
    let env = TestEnv::init();
    env.write("f.txt", lines(10).as_bytes());
    edit_call(&env, "s1", "c1", "f.txt", "L2\n", "agent 2\n");
    env.write(
        "f.txt",
        lines_with(10, &[(2, "agent 2"), (9, "user 9")]).as_bytes(),
    );
    let (code, v) = rollback(&env, &["--call", "c1"]);
    assert_eq!(code, 0, "{v:#}");
    expect_results(&v, &[("f.txt", "merged")]);
    assert_eq!(
        read(&env, "f.txt"),
        lines_with(10, &[(9, "user 9")]).as_bytes()
    );
    assert_eq!(mode(&env, "f.txt"), 0o644);
    // The user's bytes the merge replaced are in the store.
    let mine = lines_with(10, &[(2, "agent 2"), (9, "user 9")]);
    assert_eq!(
        std::fs::read(blob_path(&env, mine.as_bytes())).unwrap(),
        mine.as_bytes()
    );
}

/// A rollback of `c1` (L2 → "agent 2") over a user edit of that same line.
fn overlapping_conflict(env: &TestEnv) -> (Value, String) {
    env.write("f.txt", lines(10).as_bytes());
    edit_call(env, "s1", "c1", "f.txt", "L2\n", "agent 2\n");
    let mine = lines_with(10, &[(2, "user 2"), (9, "user 9")]);
    env.write("f.txt", mine.as_bytes());
    let (code, v) = rollback(env, &["--call", "c1"]);
    assert_eq!(code, 3, "conflicts open: {v:#}");
    assert_eq!(
        read(env, "f.txt"),
        mine.as_bytes(),
        "left exactly as the user has it"
    );
    (v, mine)
}

#[test]
fn an_overlapping_user_edit_is_a_recorded_pending_conflict() {
    let env = TestEnv::init();
    let (v, mine) = overlapping_conflict(&env);
    expect_results(&v, &[("f.txt", "conflict")]);
    let act = v["action"].as_str().unwrap();
    let cs = v["conflicts"].as_array().unwrap();
    assert_eq!(cs.len(), 1);
    let cf = cs[0]["conflict"].as_str().unwrap();
    assert!(cf.starts_with("cf_"), "{cf}");
    assert_eq!(cs[0]["path"], "f.txt");
    assert_eq!(
        cs[0]["expected_hash"],
        sha(lines_with(10, &[(2, "agent 2")]).as_bytes())
    );
    assert_eq!(cs[0]["actual_hash"], sha(mine.as_bytes()));
    assert_eq!(v["files"][0]["conflict"], cf);

    // In the ledger.
    let recs = records(&env);
    let c: Vec<&Value> = recs.iter().filter(|r| r["kind"] == "conflict").collect();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["conflict"], cf);
    assert_eq!(c[0]["action"], act);
    assert_eq!(c[0]["path"], "f.txt");
    assert_eq!(c[0]["resolution"], "pending");
    assert_eq!(c[0]["base_ref"], sha(lines(10).as_bytes()));
    assert_eq!(
        c[0]["agent_ref"],
        sha(lines_with(10, &[(2, "agent 2")]).as_bytes())
    );
    assert_eq!(c[0]["current_ref"], sha(mine.as_bytes()));
    for h in [
        c[0]["base_ref"].as_str(),
        c[0]["agent_ref"].as_str(),
        c[0]["current_ref"].as_str(),
    ] {
        let hex = h.unwrap().strip_prefix("sha256:").unwrap();
        assert!(
            env.rt()
                .join("artifacts/blobs")
                .join(&hex[..2])
                .join(&hex[2..])
                .is_file()
        );
    }
    // No rollback patch was written for the conflicted file.
    assert!(
        !recs
            .iter()
            .any(|r| r["kind"] == "file_patch" && r["source"] == "rollback")
    );
    // On disk.
    let doc: Value = serde_json::from_slice(
        &std::fs::read(env.rt().join(format!("conflicts/{cf}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(doc["conflict"]["conflict"], cf);
    assert_eq!(doc["conflict"]["resolution"], "pending");
    // Listed as pending.
    let (code, l) = ckj(&env, &["conflicts"]);
    assert_eq!(code, 3, "open conflicts: exit 3");
    assert_eq!(l["conflicts"].as_array().unwrap().len(), 1);
    assert_eq!(l["conflicts"][0]["conflict"], cf);
    assert_eq!(l["conflicts"][0]["path"], "f.txt");
    assert_eq!(l["conflicts"][0]["resolution"], "pending");
    assert_eq!(l["conflicts"][0]["action"], act);
    assert_eq!(ck(&env, &["verify"]).code, 0);
}

#[test]
fn show_conflict_prints_the_three_way_view_with_diff3_markers() {
    let env = TestEnv::init();
    let (v, _) = overlapping_conflict(&env);
    let cf = v["conflicts"][0]["conflict"].as_str().unwrap();
    let r = ck(&env, &["show", cf]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The undo merged into the user's file, diff3 style: yours, the agent's
    // version (the merge base), before the agent; the rest of the file as is.
    let merged = format!(
        "── the undo merged into your file (1 conflicting hunk) ──\nL1\n{}L3\nL4\nL5\nL6\nL7\nL8\nuser 9\nL10\n",
        "<<<<<<< yours (now)\nuser 2\n||||||| agent's version\nagent 2\n=======\nL2\n>>>>>>> before the agent\n"
    );
    assert!(r.stdout.contains(&merged), "{}", r.stdout);
    for m in ["<<<<<<<", "|||||||", "=======", ">>>>>>>"] {
        assert_eq!(
            r.stdout.matches(&format!("\n{m} ")).count()
                + r.stdout.matches(&format!("\n{m}\n")).count(),
            1,
            "{m}"
        );
    }
    // Both diffs: the agent's change, then the user's since.
    assert!(r.stdout.contains("\n-L2\n+agent 2\n"), "{}", r.stdout);
    assert!(r.stdout.contains("\n-agent 2\n+user 2\n"), "{}", r.stdout);
    assert!(r.stdout.contains("\n-L9\n+user 9\n"), "{}", r.stdout);
    assert!(r.stdout.contains("pending"), "{}", r.stdout);
}

// ------------------------------------------------------------------ 3. F41–F46 and friends

#[test]
fn f41_binary_restored_only_when_untouched() {
    let env = TestEnv::init();
    let b1: Vec<u8> = (0u8..=255).chain(0u8..=255).collect();
    let b2: Vec<u8> = b"\x00\x01PNG\r\n\x1a\n"
        .iter()
        .copied()
        .cycle()
        .take(600)
        .collect();
    env.write("b1.bin", &b1);
    env.write("b2.bin", &b2);
    let ck1 = checkpoint(&env);
    let mut a1 = b1.clone();
    a1[10] = 0xff;
    a1.extend_from_slice(b"\x00tail");
    let mut a2 = b2.clone();
    a2[3] = b'X';
    bash_with(&env, "s1", "c1", || {
        env.write("b1.bin", &a1);
        env.write("b2.bin", &a2);
    });
    let mut mine = a2.clone();
    mine[500] = b'U';
    env.write("b2.bin", &mine);
    let (code, v) = rollback(&env, &["--to", &ck1]);
    assert_eq!(code, 3, "{v:#}");
    expect_results(&v, &[("b1.bin", "restored"), ("b2.bin", "conflict")]);
    assert_eq!(v["conflicts"][0]["path"], "b2.bin");
    assert_eq!(v["conflicts"][0]["reason"], "binary_changed");
    assert_eq!(read(&env, "b1.bin"), b1);
    assert_eq!(
        read(&env, "b2.bin"),
        mine,
        "a changed binary is never merged"
    );
}

#[test]
fn f42_line_endings_and_missing_final_newline_are_kept_through_a_merge() {
    let env = TestEnv::init();
    let cases: [(&str, &str, &str, &str, &str); 3] = [
        // path, before, agent's change (old → new on line b), the user's last line, expected
        (
            "crlf.txt",
            "a\r\nb\r\nc\r\nd\r\ne\r\n",
            "b\r\n",
            "E\r\n",
            "a\r\nb\r\nc\r\nd\r\nE\r\n",
        ),
        (
            "mixed.txt",
            "a\nb\r\nc\nd\r\ne\n",
            "b\r\n",
            "E\r\n",
            "a\nb\r\nc\nd\r\nE\r\n",
        ),
        ("noeol.txt", "a\nb\nc\nd\ne", "b\n", "E", "a\nb\nc\nd\nE"),
    ];
    for (p, before, _, _, _) in &cases {
        env.write(p, before.as_bytes());
    }
    for (i, (p, _, old, _, _)) in cases.iter().enumerate() {
        let new = old.replace('b', "AGENT b");
        edit_call(&env, "s1", &format!("c{i}"), p, old, &new);
    }
    for (p, _, _, last, _) in &cases {
        let now = String::from_utf8(read(&env, p)).unwrap();
        let cut = now.rfind('e').unwrap();
        env.write(p, format!("{}{last}", &now[..cut]).as_bytes());
    }
    let (code, v) = rollback(&env, &["--session", "s1"]);
    assert_eq!(code, 0, "{v:#}");
    expect_results(
        &v,
        &[
            ("crlf.txt", "merged"),
            ("mixed.txt", "merged"),
            ("noeol.txt", "merged"),
        ],
    );
    for (p, _, _, _, want) in &cases {
        assert_eq!(
            String::from_utf8(read(&env, p)).unwrap(),
            *want,
            "{p}: bytes exact after the merge"
        );
    }
}

#[test]
fn f43_empty_and_absent_are_different_states() {
    let env = TestEnv::init();
    env.write("full.txt", b"content\n");
    env.write("was-empty.txt", b"");
    let ck1 = checkpoint(&env);
    write_call(&env, "s1", "c1", "made-empty.txt", "");
    write_call(&env, "s1", "c2", "full.txt", "");
    bash_call(&env, "s1", "c3", "rm was-empty.txt");
    let recs = records(&env);
    let patch = |p: &str| {
        recs.iter()
            .find(|r| r["kind"] == "file_patch" && r["path"] == p)
            .unwrap_or_else(|| panic!("no patch for {p}: {recs:#?}"))
            .clone()
    };
    let empty = sha(b"");
    assert_eq!(patch("made-empty.txt")["before_hash"], Value::Null);
    assert_eq!(patch("made-empty.txt")["after_hash"], empty);
    assert_eq!(patch("full.txt")["after_hash"], empty);
    assert_eq!(patch("was-empty.txt")["before_hash"], empty);
    assert_eq!(patch("was-empty.txt")["after_hash"], Value::Null);

    let (code, v) = rollback(&env, &["--to", &ck1]);
    assert_eq!(code, 0, "{v:#}");
    expect_results(
        &v,
        &[
            ("full.txt", "restored"),
            ("made-empty.txt", "deleted"),
            ("was-empty.txt", "recreated"),
        ],
    );
    assert!(
        !present(&env, "made-empty.txt"),
        "a created empty file is removed"
    );
    assert_eq!(read(&env, "full.txt"), b"content\n");
    assert_eq!(read(&env, "was-empty.txt"), b"", "recreated, empty");
    assert!(
        std::fs::symlink_metadata(env.ws.join("was-empty.txt"))
            .unwrap()
            .is_file()
    );
}

#[test]
fn f44_to_f46_what_the_user_did_since_decides() {
    let env = TestEnv::init();
    for f in ["f44.txt", "f45.txt", "f46.txt"] {
        env.write(f, lines(6).as_bytes());
    }
    let ck1 = checkpoint(&env);
    for (i, f) in ["f44.txt", "f45.txt", "f46.txt"].iter().enumerate() {
        edit_call(&env, "s1", &format!("c{i}"), f, "L3\n", "agent 3\n");
    }
    let agent = lines_with(6, &[(3, "agent 3")]);
    std::fs::remove_file(env.ws.join("f44.txt")).unwrap();
    std::fs::rename(env.ws.join("f45.txt"), env.ws.join("f45-moved.txt")).unwrap();
    chmod(&env, "f46.txt", 0o600);
    let before = ws_tree(&env);

    let (code, v) = rollback(&env, &["--to", &ck1]);
    assert_eq!(code, 3, "{v:#}");
    expect_results(
        &v,
        &[
            ("f44.txt", "conflict"),
            ("f45.txt", "conflict"),
            ("f46.txt", "restored"),
        ],
    );
    let reasons = by_path(&v, "conflicts", "reason");
    assert_eq!(reasons["f44.txt"], "deleted_by_user");
    assert_eq!(
        reasons["f45.txt"], "deleted_by_user",
        "a rename is a delete at the old path"
    );
    for c in v["conflicts"].as_array().unwrap() {
        assert_eq!(c["actual_hash"], Value::Null);
        assert_eq!(c["expected_hash"], sha(agent.as_bytes()));
    }
    // F44/F45: nothing resurrected, the moved file untouched.
    assert!(!present(&env, "f44.txt"));
    assert!(!present(&env, "f45.txt"));
    assert_eq!(read(&env, "f45-moved.txt"), agent.as_bytes());
    // F46: the content is undone, the user's mode kept.
    assert_eq!(read(&env, "f46.txt"), lines(6).as_bytes());
    assert_eq!(mode(&env, "f46.txt"), 0o600);
    let mut after = ws_tree(&env);
    after.remove(Path::new("f46.txt"));
    let mut before = before;
    before.remove(Path::new("f46.txt"));
    assert_eq!(after, before, "nothing else was written");
}

#[test]
fn created_edited_recreated_and_symlinked_paths_conflict_untouched() {
    let env = TestEnv::init();
    env.write("deleted.txt", b"the agent deletes this\n");
    env.write("linked.txt", b"one\ntwo\n");
    env.write("elsewhere.txt", b"not the agent's\n");
    let ck1 = checkpoint(&env);
    write_call(&env, "s1", "c1", "created.txt", "made by the agent\n");
    bash_call(&env, "s1", "c2", "rm deleted.txt");
    edit_call(&env, "s1", "c3", "linked.txt", "two\n", "TWO\n");
    // The user, since.
    env.write("created.txt", b"made by the agent\nand edited by me\n");
    env.write("deleted.txt", b"mine now\n");
    sh(&env, "rm linked.txt && ln -s elsewhere.txt linked.txt");
    let before = ws_tree(&env);

    let (code, v) = rollback(&env, &["--to", &ck1]);
    assert_eq!(code, 3, "{v:#}");
    expect_results(
        &v,
        &[
            ("created.txt", "conflict"),
            ("deleted.txt", "conflict"),
            ("linked.txt", "conflict"),
        ],
    );
    let reasons = by_path(&v, "conflicts", "reason");
    assert_eq!(reasons["created.txt"], "created_then_edited");
    assert_eq!(reasons["deleted.txt"], "recreated_by_user");
    assert_eq!(reasons["linked.txt"], "replaced_by_symlink");
    assert_eq!(
        ws_tree(&env),
        before,
        "every path left exactly as the user has it"
    );
    assert_eq!(
        std::fs::read_link(env.ws.join("linked.txt")).unwrap(),
        Path::new("elsewhere.txt")
    );
    assert_eq!(read(&env, "elsewhere.txt"), b"not the agent's\n");
    assert_eq!(ck(&env, &["conflicts", "--open"]).code, 3);
}

// ------------------------------------------------------------------ 4. selectors

#[test]
fn call_in_the_middle_of_history_keeps_later_calls() {
    let env = TestEnv::init();
    env.write("f.txt", lines(12).as_bytes());
    edit_call(&env, "s1", "c1", "f.txt", "L2\n", "one\n");
    edit_call(&env, "s1", "c2", "f.txt", "L6\n", "two\n");
    edit_call(&env, "s1", "c3", "f.txt", "L10\n", "three\n");
    let (code, v) = rollback(&env, &["--call", "c2"]);
    assert_eq!(code, 0, "{v:#}");
    expect_results(&v, &[("f.txt", "merged")]);
    assert_eq!(v["patches"], 1);
    assert_eq!(
        read(&env, "f.txt"),
        lines_with(12, &[(2, "one"), (10, "three")]).as_bytes()
    );
    // c1 after that: still merges over c3's change.
    let (code, v) = rollback(&env, &["--call", "c1"]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(
        read(&env, "f.txt"),
        lines_with(12, &[(10, "three")]).as_bytes()
    );
}

#[test]
fn last_n_undoes_the_last_n_calls_that_changed_files() {
    let env = TestEnv::init();
    for f in ["f1", "f2", "f3"] {
        env.write(f, format!("{f} before\n").as_bytes());
    }
    write_call(&env, "s1", "c1", "f1", "f1 agent\n");
    write_call(&env, "s1", "c2", "f2", "f2 agent\n");
    // A call that changes nothing does not count.
    bash_call(&env, "s1", "c-noop", "true");
    write_call(&env, "s1", "c3", "f3", "f3 agent\n");
    let (code, v) = rollback(&env, &["--last", "2"]);
    assert_eq!(code, 0, "{v:#}");
    expect_results(&v, &[("f2", "restored"), ("f3", "restored")]);
    assert_eq!(v["patches"], 2);
    assert_eq!(read(&env, "f1"), b"f1 agent\n");
    assert_eq!(read(&env, "f2"), b"f2 before\n");
    assert_eq!(read(&env, "f3"), b"f3 before\n");
    // `--last 0` is a usage error.
    assert_eq!(ck(&env, &["rollback", "--last", "0"]).code, 2);
}

#[test]
fn t30_session_rollback_keeps_the_other_sessions_edits() {
    let seed = crate::common::seed(30);
    let mut rng = crate::common::Rng(seed | 1);
    const N: usize = 16;
    for case in 0..4 {
        let env = TestEnv::init();
        env.write("shared.txt", lines(N).as_bytes());
        // Two disjoint, non-adjacent lines for A and one for B.
        let mut picked: Vec<usize> = Vec::new();
        while picked.len() < 3 {
            let l = 1 + rng.below(N as u64) as usize;
            if picked.iter().all(|p| p.abs_diff(l) >= 2) {
                picked.push(l);
            }
        }
        let (a1, a2, b) = (picked[0], picked[1], picked[2]);
        edit_call(
            &env,
            "A",
            "a1",
            "shared.txt",
            &format!("L{a1}\n"),
            "A one\n",
        );
        edit_call(&env, "B", "b1", "shared.txt", &format!("L{b}\n"), "B one\n");
        edit_call(
            &env,
            "A",
            "a2",
            "shared.txt",
            &format!("L{a2}\n"),
            "A two\n",
        );
        let (code, v) = rollback(&env, &["--session", "A"]);
        assert_eq!(code, 0, "case {case} {picked:?}: {v:#}");
        expect_results(&v, &[("shared.txt", "merged")]);
        assert_eq!(
            String::from_utf8(read(&env, "shared.txt")).unwrap(),
            lines_with(N, &[(b, "B one")]),
            "case {case}: A's lines {a1}, {a2} back, B's line {b} kept"
        );
    }
    // Overlapping regions: B rewrote A's line.
    let env = TestEnv::init();
    env.write("shared.txt", lines(N).as_bytes());
    edit_call(&env, "A", "a1", "shared.txt", "L5\n", "A five\n");
    edit_call(&env, "B", "b1", "shared.txt", "A five\n", "B five\n");
    let (code, v) = rollback(&env, &["--session", "A"]);
    assert_eq!(code, 3, "{v:#}");
    expect_results(&v, &[("shared.txt", "conflict")]);
    assert_eq!(
        v["conflicts"][0]["reason"], "later_call",
        "A's change cannot be taken out under B's"
    );
    assert_eq!(
        read(&env, "shared.txt"),
        lines_with(N, &[(5, "B five")]).as_bytes()
    );
}

#[test]
fn to_checkpoint_undoes_only_what_came_after_it() {
    let env = TestEnv::init();
    env.write("f.txt", b"v0\n");
    env.write("g.txt", b"g0\n");
    write_call(&env, "s1", "c1", "f.txt", "v1\n");
    let ck1 = checkpoint(&env);
    write_call(&env, "s1", "c2", "f.txt", "v2\n");
    write_call(&env, "s1", "c3", "g.txt", "g1\n");
    write_call(&env, "s1", "c4", "h.txt", "h1\n");
    let (code, v) = rollback(&env, &["--to", &ck1]);
    assert_eq!(code, 0, "{v:#}");
    expect_results(
        &v,
        &[
            ("f.txt", "restored"),
            ("g.txt", "restored"),
            ("h.txt", "deleted"),
        ],
    );
    assert_eq!(
        read(&env, "f.txt"),
        b"v1\n",
        "the change before the checkpoint stays"
    );
    assert_eq!(read(&env, "g.txt"), b"g0\n");
    assert!(!present(&env, "h.txt"));
}

#[test]
fn action_redo_and_rolling_back_twice() {
    let env = TestEnv::init();
    env.write("f.txt", lines(5).as_bytes());
    env.write("d.txt", b"deleted by the agent\n");
    write_call(&env, "s1", "c1", "f.txt", &lines_with(5, &[(1, "agent")]));
    write_call(&env, "s1", "c2", "n.txt", "new\n");
    bash_call(&env, "s1", "c3", "rm d.txt && chmod 755 f.txt");
    let agent = ws_tree(&env);
    let (code, v) = rollback(&env, &["--session", "s1"]);
    assert_eq!(code, 0, "{v:#}");
    expect_results(
        &v,
        &[
            ("d.txt", "recreated"),
            ("f.txt", "restored"),
            ("n.txt", "deleted"),
        ],
    );
    let rolled = ws_tree(&env);
    let act = v["action"].as_str().unwrap().to_string();

    // Twice: a no-op that says so (every change is out of effect already).
    let ledger_len = records(&env).len();
    let (code, v2) = rollback(&env, &["--session", "s1"]);
    assert_eq!(code, 0, "{v2:#}");
    expect_results(&v2, &[]);
    assert_eq!(v2["patches"], 0, "{v2:#}");
    let r = ck(&env, &["rollback", "--session", "s1"]);
    assert!(r.stdout.contains("taken out already"), "{}", r.stdout);
    assert_eq!(ws_tree(&env), rolled);
    let recs = records(&env);
    assert!(
        recs[ledger_len..].iter().all(|r| r["kind"] != "file_patch"),
        "nothing written, nothing recorded as written"
    );

    // Redo: the agent's state, byte for byte and mode for mode.
    let (code, v3) = rollback(&env, &["--action", &act]);
    assert_eq!(code, 0, "{v3:#}");
    expect_results(
        &v3,
        &[
            ("d.txt", "deleted"),
            ("f.txt", "restored"),
            ("n.txt", "recreated"),
        ],
    );
    assert_eq!(ws_tree(&env), agent);
    assert_eq!(mode(&env, "f.txt"), 0o755);
    // And the redo itself can be undone.
    let act3 = v3["action"].as_str().unwrap().to_string();
    let (code, _) = rollback(&env, &["--action", &act3]);
    assert_eq!(code, 0);
    assert_eq!(ws_tree(&env), rolled);
}

#[test]
fn path_globs_narrow_the_rollback() {
    let env = TestEnv::init();
    for f in ["src/a.rs", "src/b.rs", "src/deep/c.rs", "docs/d.md"] {
        env.write(f, b"before\n");
    }
    let ck1 = checkpoint(&env);
    bash_call(
        &env,
        "s1",
        "c1",
        "for f in src/a.rs src/b.rs src/deep/c.rs docs/d.md; do echo agent > $f; done",
    );
    let (code, v) = rollback(&env, &["--to", &ck1, "--path", "src/*.rs"]);
    assert_eq!(code, 0, "{v:#}");
    let got = results(&v);
    assert_eq!(got.get("src/a.rs").map(String::as_str), Some("restored"));
    assert_eq!(got.get("src/b.rs").map(String::as_str), Some("restored"));
    assert_eq!(
        got.get("src/deep/c.rs").map(String::as_str),
        Some("restored"),
        "`*` crosses `/`, as in a git pathspec"
    );
    assert!(!got.contains_key("docs/d.md"), "{v:#}");
    assert_eq!(read(&env, "src/a.rs"), b"before\n");
    assert_eq!(read(&env, "docs/d.md"), b"agent\n");
    // A directory selects everything under it.
    let (code, v) = rollback(&env, &["--to", &ck1, "--path", "docs"]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(
        results(&v).get("docs/d.md").map(String::as_str),
        Some("restored")
    );
    assert_eq!(read(&env, "docs/d.md"), b"before\n");
    // A bad glob is refused.
    let r = ck(&env, &["rollback", "--to", &ck1, "--path", "src/[a"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    one_line(&r);
}

#[test]
fn unknown_ids_and_a_missing_selector_are_refused() {
    let env = TestEnv::init();
    env.write("f.txt", b"before\n");
    write_call(&env, "s1", "c1", "f.txt", "agent\n");
    let ledger = std::fs::read(env.ledger_path()).unwrap();
    for args in [
        ["--call", "call_nope"],
        ["--to", "ckpt_nope"],
        ["--action", "act_nope"],
        ["--session", "sess_nope"],
    ] {
        let mut a = vec!["rollback"];
        a.extend_from_slice(&args);
        let r = ck(&env, &a);
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        one_line(&r);
        assert!(r.stderr.contains(args[1]), "names the id: {}", r.stderr);
        assert!(r.stdout.is_empty());
    }
    let r = ck(&env, &["rollback"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = ck(&env, &["rollback", "--call", "c1", "--last", "1"]);
    assert_eq!(r.code, 2, "one selector: {}", r.stderr);
    assert_eq!(
        std::fs::read(env.ledger_path()).unwrap(),
        ledger,
        "nothing recorded"
    );
    assert_eq!(read(&env, "f.txt"), b"agent\n");
}

// ------------------------------------------------------------------ 5. dry run

#[test]
fn dry_run_writes_nothing_anywhere() {
    let env = TestEnv::init();
    env.write("a.txt", lines(6).as_bytes());
    env.write("b.txt", lines(6).as_bytes());
    env.write("gone.txt", b"x\n");
    let ck1 = checkpoint(&env);
    edit_call(&env, "s1", "c1", "a.txt", "L2\n", "agent\n");
    edit_call(&env, "s1", "c2", "b.txt", "L2\n", "agent\n");
    write_call(&env, "s1", "c3", "new.txt", "new\n");
    bash_call(&env, "s1", "c4", "rm gone.txt");
    env.write("b.txt", lines_with(6, &[(2, "mine")]).as_bytes());
    // Let the pending user edit be recorded first, so the dry run has nothing
    // legitimate to write either.
    assert_eq!(ck(&env, &["status"]).code, 0);
    let before = tree(&env.ws, &[]);
    for json_mode in [true, false] {
        let mut args = vec!["rollback", "--to", &ck1, "--dry-run"];
        if json_mode {
            args.push("--json");
        }
        let r = ck(&env, &args);
        assert_eq!(
            r.code, 3,
            "a dry run reports the conflicts it would raise: {}",
            r.stderr
        );
        if json_mode {
            let v = r.json();
            assert_eq!(v["dry_run"], true);
            expect_results(
                &v,
                &[
                    ("a.txt", "restored"),
                    ("b.txt", "conflict"),
                    ("gone.txt", "recreated"),
                    ("new.txt", "deleted"),
                ],
            );
            assert_eq!(v["conflicts"].as_array().unwrap().len(), 1);
        } else {
            assert!(r.stdout.contains("dry run"), "{}", r.stdout);
        }
        let after = tree(&env.ws, &[]);
        let diff: Vec<_> = after
            .keys()
            .chain(before.keys())
            .filter(|k| after.get(*k) != before.get(*k))
            .collect();
        assert!(diff.is_empty(), "the dry run changed {diff:?}");
    }
    assert!(
        !env.rt().join("conflicts").exists()
            || std::fs::read_dir(env.rt().join("conflicts"))
                .unwrap()
                .count()
                == 0
    );
}

// ------------------------------------------------------------------ 6. resolve

#[test]
fn resolve_keep_user_leaves_the_file_and_closes_the_conflict() {
    let env = TestEnv::init();
    let (v, mine) = overlapping_conflict(&env);
    let cf = v["conflicts"][0]["conflict"].as_str().unwrap();
    let (code, r) = ckj(&env, &["resolve", cf, "--keep-user"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["resolution"], "keep_user");
    assert_eq!(r["conflict"], cf);
    assert_eq!(r["action"], Value::Null, "nothing written, no action");
    assert_eq!(read(&env, "f.txt"), mine.as_bytes());
    assert!(!env.rt().join(format!("conflicts/{cf}.json")).exists());
    let (code, l) = ckj(&env, &["conflicts"]);
    assert_eq!(code, 0, "none open");
    assert_eq!(l["conflicts"][0]["resolution"], "keep_user");
    let last = records(&env)
        .into_iter()
        .rfind(|r| r["kind"] == "conflict")
        .unwrap();
    assert_eq!(last["resolution"], "keep_user");
    // Twice: refused, nothing changes.
    let ledger = std::fs::read(env.ledger_path()).unwrap();
    for how in ["--keep-user", "--apply-agent", "--manual", "--done"] {
        let r = ck(&env, &["resolve", cf, how]);
        assert_eq!(r.code, 1, "{how}: {}", r.stderr);
        one_line(&r);
    }
    assert_eq!(std::fs::read(env.ledger_path()).unwrap(), ledger);
    // Unknown conflict.
    let r = ck(&env, &["resolve", "cf_nope", "--keep-user"]);
    assert_eq!(r.code, 1);
    one_line(&r);
    assert_eq!(ck(&env, &["verify"]).code, 0);
}

#[test]
fn resolve_apply_agent_takes_the_change_out_and_stores_the_users_bytes() {
    let env = TestEnv::init();
    let (v, mine) = overlapping_conflict(&env);
    let cf = v["conflicts"][0]["conflict"].as_str().unwrap();
    let (code, r) = ckj(&env, &["resolve", cf, "--apply-agent"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["resolution"], "apply_agent");
    assert_eq!(r["result"], "merged");
    let act = r["action"]
        .as_str()
        .expect("an action wrote the file")
        .to_string();
    // The agent's change is out; the user's non-overlapping edit stays.
    assert_eq!(
        read(&env, "f.txt"),
        lines_with(10, &[(9, "user 9")]).as_bytes()
    );
    assert_eq!(mode(&env, "f.txt"), 0o644);
    // The user's previous bytes are a blob.
    let b = blob_path(&env, mine.as_bytes());
    assert_eq!(
        std::fs::read(&b).unwrap(),
        mine.as_bytes(),
        "{}",
        b.display()
    );
    assert!(!env.rt().join(format!("conflicts/{cf}.json")).exists());
    let (code, _) = ckj(&env, &["conflicts"]);
    assert_eq!(code, 0);
    // The write is an action like a rollback …
    let acts = action_records(&env, &act);
    assert_eq!(acts.len(), 2);
    assert_eq!(acts[1]["status"], "succeeded");
    // … so it can be undone: the user's bytes come back.
    let (code, u) = rollback(&env, &["--action", &act]);
    assert_eq!(code, 0, "{u:#}");
    expect_results(&u, &[("f.txt", "restored")]);
    assert_eq!(read(&env, "f.txt"), mine.as_bytes());
    assert_eq!(ck(&env, &["verify"]).code, 0);
}

#[test]
fn resolve_manual_then_done() {
    let env = TestEnv::init();
    let (v, mine) = overlapping_conflict(&env);
    let cf = v["conflicts"][0]["conflict"].as_str().unwrap().to_string();
    let (code, r) = ckj(&env, &["resolve", &cf, "--manual"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["resolution"], "pending", "still open until --done");
    let with_markers = String::from_utf8(read(&env, "f.txt")).unwrap();
    let want = mine.replace(
        "user 2\n",
        "<<<<<<< yours (now)\nuser 2\n||||||| agent's version\nagent 2\n=======\nL2\n>>>>>>> before the agent\n",
    );
    assert_eq!(with_markers, want);
    assert!(blob_path(&env, mine.as_bytes()).is_file());
    let (code, l) = ckj(&env, &["conflicts"]);
    assert_eq!(code, 3);
    assert_eq!(l["conflicts"][0]["resolution"], "pending");
    assert_eq!(l["conflicts"][0]["markers_written"], true);
    assert!(env.rt().join(format!("conflicts/{cf}.json")).exists());

    // Refused while the markers are there.
    let r = ck(&env, &["resolve", &cf, "--done"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    one_line(&r);
    assert_eq!(read(&env, "f.txt"), with_markers.as_bytes());
    // The user finishes the merge.
    let merged = lines_with(10, &[(2, "user 2 and L2"), (9, "user 9")]);
    env.write("f.txt", merged.as_bytes());
    let (code, r) = ckj(&env, &["resolve", &cf, "--done"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["resolution"], "manual_merge");
    assert_eq!(
        read(&env, "f.txt"),
        merged.as_bytes(),
        "the user's merge is left alone"
    );
    assert!(!env.rt().join(format!("conflicts/{cf}.json")).exists());
    assert_eq!(
        ck(&env, &["resolve", &cf, "--done"]).code,
        1,
        "settled already"
    );

    // `--done --force` settles with markers still in the file.
    let env = TestEnv::init();
    let (v, _) = overlapping_conflict(&env);
    let cf = v["conflicts"][0]["conflict"].as_str().unwrap().to_string();
    assert_eq!(ck(&env, &["resolve", &cf, "--manual"]).code, 0);
    let with_markers = read(&env, "f.txt");
    assert_eq!(ck(&env, &["resolve", &cf, "--done"]).code, 1);
    let (code, r) = ckj(&env, &["resolve", &cf, "--done", "--force"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["resolution"], "manual_merge");
    assert_eq!(read(&env, "f.txt"), with_markers);
    assert_eq!(
        ck(&env, &["resolve", &cf, "--force"]).code,
        2,
        "--force needs --done"
    );
    assert_eq!(ck(&env, &["verify"]).code, 0);
}

// ------------------------------------------------------------------ 7. crashes

/// Five files: three restored, one merged over a user edit, one created file
/// deleted. Returns the checkpoint to roll back to.
fn crash_scenario(env: &TestEnv) -> String {
    for f in ["r1.txt", "r2.txt", "r3.txt"] {
        env.write(f, format!("{f} before\n").as_bytes());
    }
    env.write("m.txt", lines(10).as_bytes());
    let ck1 = checkpoint(env);
    write_call(env, "s1", "c1", "r1.txt", "r1 agent\n");
    write_call(env, "s1", "c2", "r2.txt", "r2 agent\n");
    bash_call(env, "s1", "c3", "echo r3 agent > r3.txt && chmod +x r3.txt");
    edit_call(env, "s1", "c4", "m.txt", "L2\n", "agent 2\n");
    write_call(env, "s1", "c5", "n.txt", "created\n");
    env.write(
        "m.txt",
        lines_with(10, &[(2, "agent 2"), (9, "user 9")]).as_bytes(),
    );
    ck1
}

fn temps_left(env: &TestEnv) -> Vec<PathBuf> {
    ws_tree(env)
        .into_keys()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".ckpt-tmp-")
        })
        .collect()
}

/// The ledger's records, read from the file (every `ckpt` command but
/// `verify` would first finish an interrupted rollback).
fn raw_records(env: &TestEnv) -> Vec<Value> {
    std::fs::read_to_string(env.ledger_path())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The one rollback action in the ledger, and its records.
fn the_rollback(env: &TestEnv) -> (String, Vec<Value>) {
    let recs = raw_records(env);
    let started: Vec<&Value> = recs
        .iter()
        .filter(|r| r["kind"] == "action" && r["status"] == "started")
        .collect();
    assert_eq!(started.len(), 1, "{started:#?}");
    let act = started[0]["action"].as_str().unwrap().to_string();
    let acts = recs
        .into_iter()
        .filter(|r| r["kind"] == "action" && r["action"] == act)
        .collect();
    (act, acts)
}

/// The workspace after [`crash_scenario`]'s rollback to its checkpoint, run
/// uninterrupted: what every interrupted one must end as.
fn uninterrupted_rollback() -> BTreeMap<PathBuf, Entry> {
    let env = TestEnv::init();
    let ck1 = crash_scenario(&env);
    let (code, v) = rollback(&env, &["--to", &ck1]);
    assert_eq!(code, 0, "{v:#}");
    expect_results(
        &v,
        &[
            ("m.txt", "merged"),
            ("n.txt", "deleted"),
            ("r1.txt", "restored"),
            ("r2.txt", "restored"),
            ("r3.txt", "restored"),
        ],
    );
    assert_eq!(
        read(&env, "m.txt"),
        lines_with(10, &[(9, "user 9")]).as_bytes()
    );
    assert_eq!(mode(&env, "r3.txt"), 0o644);
    ws_tree(&env)
}

#[test]
fn a_crash_at_any_rollback_step_is_finished_by_the_next_command() {
    let reference = uninterrupted_rollback();
    let mut points: Vec<String> = vec![
        "rollback.after_plan=abort".into(),
        "rollback.before_end=abort".into(),
    ];
    for k in 1..=5 {
        points.push(format!("rollback.after_file={k}*abort"));
        points.push(format!("rollback.before_rename={k}*abort"));
    }
    for fp in &points {
        let env = TestEnv::init();
        let ck1 = crash_scenario(&env);
        let r = env.ckpt_env(
            &["rollback", "--to", &ck1, "--json"],
            &[FAST, ("CKPT_FAILPOINTS", fp)],
        );
        assert_ne!(r.code, 0, "{fp}: the rollback must have crashed");
        assert!(r.stdout.is_empty(), "{fp}: nothing reported as done");
        let (act, acts) = the_rollback(&env);
        assert_eq!(acts.len(), 1, "{fp}: started, no end yet: {acts:#?}");
        // `verify` only looks.
        let crashed = ws_tree(&env);
        let ledger = std::fs::read(env.ledger_path()).unwrap();
        let r = ck(&env, &["verify"]);
        assert!(
            !r.stderr.contains("finished rollback"),
            "{fp}: {}",
            r.stderr
        );
        assert_eq!(
            ws_tree(&env),
            crashed,
            "{fp}: verify wrote to the workspace"
        );
        assert_eq!(std::fs::read(env.ledger_path()).unwrap(), ledger, "{fp}");

        let r = ck(&env, &["status"]);
        assert_eq!(r.code, 0, "{fp}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("finished rollback {act}")),
            "{fp}: {}",
            r.stderr
        );
        assert_eq!(
            ws_tree(&env),
            reference,
            "{fp}: ends as an uninterrupted rollback"
        );
        assert!(temps_left(&env).is_empty(), "{fp}: {:?}", temps_left(&env));
        let (act2, acts) = the_rollback(&env);
        assert_eq!(act2, act);
        assert_eq!(acts.len(), 2, "{fp}: one started, one end: {acts:#?}");
        assert_eq!(acts[1]["status"], "succeeded", "{fp}");
        assert_eq!(acts[1]["outcome"]["resumed"], true, "{fp}");
        let rb: Vec<Value> = records(&env)
            .into_iter()
            .filter(|r| r["kind"] == "file_patch" && r["call"] == act)
            .collect();
        assert_eq!(
            rb.len(),
            5,
            "{fp}: one rollback patch per written file: {rb:#?}"
        );
        let v = ck(&env, &["verify"]);
        assert_eq!(v.code, 0, "{fp}: {}{}", v.stdout, v.stderr);

        // The next command changes nothing.
        let ledger = std::fs::read(env.ledger_path()).unwrap();
        let r = ck(&env, &["status"]);
        assert_eq!(r.code, 0);
        assert!(
            !r.stderr.contains("finished rollback"),
            "{fp}: {}",
            r.stderr
        );
        assert_eq!(ws_tree(&env), reference, "{fp}");
        assert_eq!(std::fs::read(env.ledger_path()).unwrap(), ledger, "{fp}");
        // And the finished rollback can be undone like any other.
        let (code, v) = rollback(&env, &["--action", &act]);
        assert_eq!(code, 0, "{fp}: {v:#}");
        assert_eq!(
            read(&env, "m.txt"),
            lines_with(10, &[(2, "agent 2"), (9, "user 9")]).as_bytes(),
            "{fp}"
        );
        assert_eq!(read(&env, "n.txt"), b"created\n", "{fp}");
    }
}

/// RELIABILITY F47: a file above `max_blob_bytes` that a shell call changed
/// is never stored (no partial blob) and no patch records it; the call's end
/// record names it, and a rollback of the call undoes everything else and
/// says why it leaves that file as it is.
#[test]
fn f47_a_file_too_large_to_store_is_named_and_explained_never_half_recorded() {
    let env = TestEnv::init();
    let cfg = env.rt().join("config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("max_blob_bytes = 1073741824"));
    std::fs::write(
        &cfg,
        text.replace("max_blob_bytes = 1073741824", "max_blob_bytes = 4096"),
    )
    .unwrap();
    env.write("big.bin", &vec![b'a'; 10_000]);
    env.write("small.txt", b"small before\n");
    bash_call(
        &env,
        "s1",
        "c1",
        "printf b >> big.bin && echo small agent > small.txt",
    );
    let recs = records(&env);
    let end = recs
        .iter()
        .find(|r| r["kind"] == "tool_call" && r["call"] == "c1" && r["status"] == "succeeded")
        .unwrap();
    assert_eq!(
        end["unrecorded"],
        json!([{"path": "big.bin", "reason": "too_large", "size": 10_001}]),
        "{end:#}"
    );
    assert!(
        !recs
            .iter()
            .any(|r| r["kind"] == "file_patch" && r["path"] == "big.bin"),
        "no patch for the file"
    );
    let largest = tree(&env.rt().join("artifacts"), &[])
        .values()
        .filter_map(|e| match e {
            Entry::File(_, b) => Some(b.len()),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    assert!(largest <= 4096, "nothing above the limit stored: {largest}");

    let r = ck(&env, &["show", "c1"]);
    assert!(
        r.stdout
            .contains("not recorded, cannot be undone: big.bin (too_large, 10001 bytes)"),
        "{}",
        r.stdout
    );
    let r = ck(&env, &["rollback", "--call", "c1", "--dry-run"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("not undone")
            && r.stdout.contains("big.bin")
            && r.stdout.contains("too large"),
        "{}",
        r.stdout
    );
    let (code, v) = rollback(&env, &["--call", "c1"]);
    assert_eq!(code, 0, "{v:#}");
    expect_results(&v, &[("small.txt", "restored")]);
    assert_eq!(v["unrecorded"][0]["path"], "big.bin", "{v:#}");
    assert_eq!(v["unrecorded"][0]["call"], "c1", "{v:#}");
    assert_eq!(read(&env, "small.txt"), b"small before\n");
    assert_eq!(read(&env, "big.bin").len(), 10_001, "left as it is");
}

/// Each path of `now` holds its `agent` state or its rolled-back state
/// (`want`), whole; returns how many are rolled back and how many are not.
fn whole_files(
    what: &str,
    agent: &BTreeMap<PathBuf, Entry>,
    want: &BTreeMap<PathBuf, Entry>,
    now: &BTreeMap<PathBuf, Entry>,
) -> (usize, usize) {
    let paths: std::collections::BTreeSet<_> =
        agent.keys().chain(want.keys()).chain(now.keys()).collect();
    let (mut done, mut left) = (0, 0);
    for p in paths {
        let (n, a, w) = (now.get(p), agent.get(p), want.get(p));
        if n == w && n != a {
            done += 1;
        } else if n == a && n != w {
            left += 1;
        } else {
            assert!(
                n == a && n == w,
                "{what}: {} is neither: {n:?}",
                p.display()
            );
        }
    }
    (done, left)
}

/// RELIABILITY F48: an I/O error in the middle of a multi-file rollback
/// (disk full, a read-only file system, `EIO` from an fsync; injected).
/// Writing one file fails: that file is left whole as it was and reported
/// `failed`, the others are rolled back, the action ends `failed` with every
/// file's result, the command exits 1 and says how to finish, and running
/// the same rollback again finishes it. A failure outside one file's write
/// stops the command with one line and no result; the plan stays open and
/// the next command finishes it. Either way every file is old or new, never
/// partial, and the end state is the uninterrupted rollback's.
#[test]
fn f48_an_io_error_mid_rollback_leaves_every_file_whole_and_is_finished() {
    let reference = uninterrupted_rollback();

    // One file's write fails (before its rename).
    let env = TestEnv::init();
    let ck1 = crash_scenario(&env);
    let agent = ws_tree(&env);
    let fp = "rollback.before_rename=2*error";
    let r = env.ckpt_env(
        &["rollback", "--to", &ck1, "--json"],
        &[FAST, ("CKPT_FAILPOINTS", fp)],
    );
    assert_eq!(r.code, 1, "{fp}: {}{}", r.stdout, r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let failed: Vec<_> = results(&v)
        .into_iter()
        .filter(|(_, res)| res == "failed")
        .collect();
    assert_eq!(failed.len(), 1, "{v:#}");
    assert!(
        r.stderr.contains("again"),
        "{fp}: says how to finish: {}",
        r.stderr
    );
    let (done, left) = whole_files(fp, &agent, &reference, &ws_tree(&env));
    assert_eq!((done, left), (4, 1), "{fp}");
    assert!(temps_left(&env).is_empty(), "{fp}: {:?}", temps_left(&env));
    let (_, acts) = the_rollback(&env);
    assert_eq!(acts.len(), 2, "{fp}: {acts:#?}");
    assert_eq!(acts[1]["status"], "failed", "{fp}");
    assert_eq!(acts[1]["outcome"]["files"].as_array().unwrap().len(), 5);
    let (code, v) = rollback(&env, &["--to", &ck1]);
    assert_eq!(code, 0, "{fp}: the same rollback again: {v:#}");
    assert_eq!(ws_tree(&env), reference, "{fp}");
    assert_eq!(ck(&env, &["verify"]).code, 0, "{fp}");

    // The command fails between two files.
    let env = TestEnv::init();
    let ck1 = crash_scenario(&env);
    let agent = ws_tree(&env);
    let fp = "rollback.after_file=3*error";
    let r = env.ckpt_env(
        &["rollback", "--to", &ck1],
        &[FAST, ("CKPT_FAILPOINTS", fp)],
    );
    assert_eq!(r.code, 1, "{fp}: {}{}", r.stdout, r.stderr);
    assert!(r.stdout.is_empty(), "{fp}: no result printed: {}", r.stdout);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{fp}: {}", r.stderr);
    assert!(r.stderr.contains("injected"), "{fp}: {}", r.stderr);
    let (done, left) = whole_files(fp, &agent, &reference, &ws_tree(&env));
    assert!(
        done >= 1 && left >= 1,
        "{fp}: stopped midway ({done} done, {left} left)"
    );
    assert!(temps_left(&env).is_empty(), "{fp}: {:?}", temps_left(&env));
    let (act, acts) = the_rollback(&env);
    assert_eq!(acts.len(), 1, "{fp}: the plan, no end: {acts:#?}");
    let r = ck(&env, &["status"]);
    assert_eq!(r.code, 0, "{fp}: {}", r.stderr);
    assert!(
        r.stderr.contains(&format!("finished rollback {act}")),
        "{fp}: {}",
        r.stderr
    );
    assert_eq!(ws_tree(&env), reference, "{fp}");
    let (_, acts) = the_rollback(&env);
    assert_eq!(acts[1]["status"], "succeeded", "{fp}: {acts:#?}");
    assert_eq!(ck(&env, &["verify"]).code, 0, "{fp}");
}

/// Older versions kept what a rollback replaced in `tmp/trash/`, freed later
/// by a detached reaper. Now a rollback frees it inline and leaves no trash;
/// a trash an older version left is emptied and removed by the next sweep
/// of `tmp/` (`ckpt checkpoint`), whatever its entries' age.
#[test]
fn a_rollback_leaves_no_trash_and_an_older_versions_trash_is_swept() {
    let env = TestEnv::init();
    let ck1 = crash_scenario(&env);
    let r = env.ckpt_env(&["rollback", "--to", &ck1], &[FAST]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!env.rt().join("tmp/trash").exists());
    assert!(temps_left(&env).is_empty());
    std::fs::create_dir(env.rt().join("tmp/trash")).unwrap();
    std::fs::write(env.rt().join("tmp/trash/ts3-123-old"), b"old").unwrap();
    std::fs::write(env.rt().join("tmp/trash/t-123-older"), b"older").unwrap();
    checkpoint(&env);
    assert!(
        !env.rt().join("tmp/trash").exists(),
        "the old trash was swept"
    );
    let r = ck(&env, &["verify"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

#[test]
fn a_rollback_patch_has_no_artifact_and_show_renders_its_diff() {
    let env = TestEnv::init();
    let ck1 = crash_scenario(&env);
    let (code, v) = rollback(&env, &["--to", &ck1]);
    assert_eq!(code, 0, "{v:#}");
    let act = v["action"].as_str().unwrap().to_string();
    let p = records(&env)
        .into_iter()
        .find(|r| r["kind"] == "file_patch" && r["call"] == act && r["path"] == "m.txt")
        .expect("the rollback's patch of m.txt");
    assert!(p["patch_ref"].is_null(), "{p}");
    let r = ck(&env, &["show", p["patch"].as_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("diff --git a/m.txt b/m.txt"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("-agent 2"), "{}", r.stdout);
    assert!(r.stdout.contains("+L2"), "{}", r.stdout);
}

#[test]
fn reap_trash_only_works_on_a_runtime_directory() {
    let env = TestEnv::init();
    let other = env.dir.path().join("not-runtime");
    std::fs::create_dir_all(other.join("tmp/trash")).unwrap();
    std::fs::write(other.join("tmp/trash/keep"), b"x").unwrap();
    let r = ck(&env, &["reap-trash", other.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(other.join("tmp/trash/keep").exists());
}

#[test]
fn a_crash_before_the_plan_is_recorded_leaves_no_temp_files_and_no_action() {
    // The first files' temp copies are written before the plan is appended
    // (their syncs overlap its fdatasync): a crash in between must leave the
    // workspace as it was, once the next command has swept them.
    let env = TestEnv::init();
    let ck1 = crash_scenario(&env);
    let before = ws_tree(&env);
    let r = env.ckpt_env(
        &["rollback", "--to", &ck1, "--json"],
        &[FAST, ("CKPT_FAILPOINTS", "rollback.before_plan=abort")],
    );
    assert_ne!(r.code, 0, "the rollback must have crashed");
    assert!(!temps_left(&env).is_empty(), "temp files were prepared");
    let actions = || {
        raw_records(&env)
            .into_iter()
            .filter(|r| r["kind"] == "action")
            .count()
    };
    assert_eq!(actions(), 0, "no plan recorded");
    let r = ck(&env, &["status"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(temps_left(&env).is_empty(), "{:?}", temps_left(&env));
    assert!(ws_tree(&env) == before, "nothing written");
    assert_eq!(actions(), 0, "nothing to finish");
    // And the rollback runs as if nothing happened.
    let (code, v) = rollback(&env, &["--to", &ck1]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(
        read(&env, "m.txt"),
        lines_with(10, &[(9, "user 9")]).as_bytes()
    );
}

#[test]
fn a_file_the_user_changes_after_a_crash_is_left_as_the_user_has_it() {
    let env = TestEnv::init();
    let ck1 = crash_scenario(&env);
    // Files are written in path order: m.txt, n.txt, then r1, r2, r3.
    let r = env.ckpt_env(
        &["rollback", "--to", &ck1],
        &[FAST, ("CKPT_FAILPOINTS", "rollback.after_file=2*abort")],
    );
    assert_ne!(r.code, 0);
    assert!(!present(&env, "n.txt"), "the crash came after n.txt");
    assert_eq!(read(&env, "r3.txt"), b"r3 agent\n");
    env.write("r3.txt", b"the user's r3\n");
    let r = ck(&env, &["status"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("finished rollback"), "{}", r.stderr);
    assert!(r.stderr.contains("1 left as they were"), "{}", r.stderr);
    assert_eq!(
        read(&env, "r3.txt"),
        b"the user's r3\n",
        "the user's bytes untouched"
    );
    assert_eq!(read(&env, "r1.txt"), b"r1.txt before\n");
    assert_eq!(read(&env, "r2.txt"), b"r2.txt before\n");
    assert_eq!(
        read(&env, "m.txt"),
        lines_with(10, &[(9, "user 9")]).as_bytes()
    );
    assert!(temps_left(&env).is_empty());
    let (_, acts) = the_rollback(&env);
    assert_eq!(acts.len(), 2, "{acts:#?}");
    assert_eq!(acts[1]["status"], "failed", "a raced file fails the action");
    let outcome = acts[1]["outcome"]["files"].as_array().unwrap();
    let r3 = outcome.iter().find(|f| f["path"] == "r3.txt").unwrap();
    assert_eq!(r3["result"], "raced");
    assert_eq!(ck(&env, &["verify"]).code, 0);
    let before = ws_tree(&env);
    let ledger = std::fs::read(env.ledger_path()).unwrap();
    assert_eq!(ck(&env, &["status"]).code, 0);
    assert_eq!(ws_tree(&env), before);
    assert_eq!(std::fs::read(env.ledger_path()).unwrap(), ledger);
}

// ------------------------------------------------------------------ permission bits

/// Patches record exact permission bits (`before_perm`/`after_perm`), so a
/// deleted 0600 file comes back 0600, `chmod 700` on a 0644 file is undone to
/// 0644, and a redo gives 0751 back as 0751 (git's `100644`/`100755` alone
/// could not).
#[test]
fn exact_permission_bits_survive_delete_and_chmod() {
    let env = TestEnv::init();
    env.write("secret.env", b"TOKEN=x\n");
    chmod(&env, "secret.env", 0o600);
    env.write("plain.txt", b"plain\n");
    chmod(&env, "plain.txt", 0o644);
    let before = ws_tree(&env);
    bash_call(&env, "s1", "c1", "rm secret.env && chmod 700 plain.txt");
    let (code, v) = rollback(&env, &["--call", "c1"]);
    assert_eq!(code, 0, "{v:#}");
    expect_results(
        &v,
        &[("plain.txt", "restored"), ("secret.env", "recreated")],
    );
    assert_eq!(
        mode(&env, "secret.env"),
        0o600,
        "a private file comes back private"
    );
    assert_eq!(mode(&env, "plain.txt"), 0o644);
    assert_eq!(ws_tree(&env), before);

    // A redo gives the agent's exact bits back: 0640 + `chmod +x` (umask 022) = 0751.
    let env = TestEnv::init();
    env.write("a.txt", b"a\n");
    chmod(&env, "a.txt", 0o640);
    bash_call(&env, "s1", "c1", "chmod 751 a.txt");
    let (code, v) = rollback(&env, &["--call", "c1"]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(mode(&env, "a.txt"), 0o640);
    let (code, _) = rollback(&env, &["--action", v["action"].as_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(mode(&env, "a.txt"), 0o751);
}

#[test]
fn a_crash_inside_resolve_is_finished_with_the_conflict_settled() {
    // BUG fixed in src/conflict.rs + src/rollback.rs: the resolve's conflict
    // record was appended after the action's end, so a crash let the next
    // command write the file while the conflict stayed `pending`.
    for fp in [
        "rollback.after_plan=abort",
        "rollback.before_rename=abort",
        "rollback.after_file=abort",
        "rollback.before_end=abort",
    ] {
        let env = TestEnv::init();
        let (v, mine) = overlapping_conflict(&env);
        let cf = v["conflicts"][0]["conflict"].as_str().unwrap().to_string();
        let r = env.ckpt_env(
            &["resolve", &cf, "--apply-agent"],
            &[FAST, ("CKPT_FAILPOINTS", fp)],
        );
        assert_ne!(r.code, 0, "{fp}: crashed");
        let r = ck(&env, &["status"]);
        assert_eq!(r.code, 0, "{fp}: {}", r.stderr);
        assert!(r.stderr.contains("finished rollback"), "{fp}: {}", r.stderr);
        assert_eq!(
            read(&env, "f.txt"),
            lines_with(10, &[(9, "user 9")]).as_bytes(),
            "{fp}"
        );
        let (code, l) = ckj(&env, &["conflicts"]);
        assert_eq!(
            l["conflicts"][0]["resolution"], "apply_agent",
            "{fp}: {l:#}"
        );
        assert_eq!(code, 0, "{fp}: nothing open");
        assert!(
            !env.rt().join(format!("conflicts/{cf}.json")).exists(),
            "{fp}"
        );
        let settled = records(&env)
            .into_iter()
            .rfind(|r| r["kind"] == "conflict")
            .unwrap();
        let act = settled["resolved_by"]
            .as_str()
            .expect("resolved_by")
            .to_string();
        assert_eq!(action_records(&env, &act).len(), 2, "{fp}");
        assert_eq!(ck(&env, &["verify"]).code, 0, "{fp}");
        // Settled once: a second resolve is refused, and the user's bytes
        // are one undo away.
        assert_eq!(ck(&env, &["resolve", &cf, "--keep-user"]).code, 1, "{fp}");
        let (code, u) = rollback(&env, &["--action", &act]);
        assert_eq!(code, 0, "{fp}: {u:#}");
        assert_eq!(read(&env, "f.txt"), mine.as_bytes(), "{fp}");
    }
    // The same for --manual: the markers are written and the conflict says so.
    let env = TestEnv::init();
    let (v, _) = overlapping_conflict(&env);
    let cf = v["conflicts"][0]["conflict"].as_str().unwrap().to_string();
    let r = env.ckpt_env(
        &["resolve", &cf, "--manual"],
        &[FAST, ("CKPT_FAILPOINTS", "rollback.before_end=abort")],
    );
    assert_ne!(r.code, 0);
    let (code, l) = ckj(&env, &["conflicts"]);
    assert_eq!(code, 3);
    assert_eq!(l["conflicts"][0]["resolution"], "pending");
    assert_eq!(l["conflicts"][0]["markers_written"], true, "{l:#}");
    assert!(
        String::from_utf8(read(&env, "f.txt"))
            .unwrap()
            .contains("<<<<<<< yours (now)\n")
    );
    assert_eq!(ck(&env, &["resolve", &cf, "--done", "--force"]).code, 0);
}
