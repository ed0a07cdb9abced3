//! The session tree and `restore-session` (DESIGN §3, §5, §6), driven through
//! the real binary: append / show / branches, restore to a checkpoint or an
//! entry (nothing deleted, both branches listed), `--with-files` as one
//! recorded action, crashes at each write step, T15 (the old ledger is a byte
//! prefix of the new one after every op), and the Claude Code transcript fork
//! on the fixtures in testdata/claude.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::{Run, TestEnv};

const S: &str = "sess-1";

fn ledger(env: &TestEnv) -> Vec<u8> {
    std::fs::read(env.ledger_path()).unwrap_or_default()
}

/// Runs `ckpt ARGS --json` and checks T15: the ledger before is a byte prefix
/// of the ledger after.
fn op(env: &TestEnv, args: &[&str]) -> Run {
    op_env(env, args, &[])
}

fn op_env(env: &TestEnv, args: &[&str], vars: &[(&str, &str)]) -> Run {
    let before = ledger(env);
    let mut a = args.to_vec();
    a.push("--json");
    let r = env.ckpt_env(&a, vars);
    let after = ledger(env);
    assert!(
        after.starts_with(&before),
        "T15: `ckpt {}` rewrote ledger bytes",
        args.join(" ")
    );
    r
}

fn ok(env: &TestEnv, args: &[&str]) -> Value {
    let r = op(env, args);
    assert_eq!(r.code, 0, "ckpt {args:?} failed: {}", r.stderr);
    r.json()
}

fn append(env: &TestEnv, ty: &str, payload: Value) -> String {
    let p = payload.to_string();
    let v = ok(
        env,
        &[
            "session",
            "append",
            "--session",
            S,
            "--type",
            ty,
            "--payload",
            &p,
        ],
    );
    v["entry"].as_str().unwrap().to_string()
}

fn msg(env: &TestEnv, text: &str) -> String {
    append(env, "message", json!({"role": "user", "text": text}))
}

fn show(env: &TestEnv) -> Value {
    ok(env, &["session", "show", "--session", S])
}

fn ids(view: &Value) -> Vec<String> {
    view["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["entry"].as_str().unwrap().to_string())
        .collect()
}

fn texts(view: &Value) -> Vec<String> {
    view["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "message")
        .map(|e| e["payload"]["text"].as_str().unwrap().to_string())
        .collect()
}

fn leaves(env: &TestEnv) -> Vec<Value> {
    ok(env, &["session", "branches", "--session", S])["leaves"]
        .as_array()
        .unwrap()
        .clone()
}

fn checkpoint(env: &TestEnv) -> String {
    let v = ok(env, &["checkpoint", "--session", S, "-m", "turn"]);
    v["checkpoint"].as_str().unwrap().to_string()
}

fn records(env: &TestEnv) -> Vec<Value> {
    String::from_utf8(ledger(env))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn verify_ok(env: &TestEnv) {
    let r = env.ckpt(&["verify"]);
    assert_eq!(r.code, 0, "verify failed: {}{}", r.stdout, r.stderr);
}

#[test]
fn append_show_and_branches() {
    let env = TestEnv::init();
    let e1 = msg(&env, "hello");
    let a1 = append(&env, "app_state", json!({"mode": "plan"}));
    let e2 = msg(&env, "make the port configurable");
    let c1 = append(&env, "compaction", json!({"summary": "asked for a port"}));
    let e3 = msg(&env, "ok");

    let v = show(&env);
    assert_eq!(v["session"], S);
    assert_eq!(v["leaf"], json!(e3));
    assert_eq!(ids(&v), [&e1, &a1, &e2, &c1, &e3].map(|s| s.clone()));
    let entries = v["entries"].as_array().unwrap();
    assert_eq!(entries[0]["parent"], Value::Null);
    for w in entries.windows(2) {
        assert_eq!(
            w[1]["parent"], w[0]["entry"],
            "each entry hangs under the previous one"
        );
        let keys: Vec<&String> = w[1].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["entry", "parent", "type", "payload"]);
    }
    assert_eq!(v["app_state"], json!({"mode": "plan"}));
    assert_eq!(v["compaction"], json!({"summary": "asked for a port"}));

    // An explicit parent starts a second branch; both leaves are listed.
    let p = json!({"role": "user", "text": "fork"}).to_string();
    let f = ok(
        &env,
        &[
            "session",
            "append",
            "--session",
            S,
            "--type",
            "message",
            "--payload",
            &p,
            "--parent",
            &e1,
        ],
    );
    let f = f["entry"].as_str().unwrap().to_string();
    let l = leaves(&env);
    assert_eq!(l.len(), 2);
    assert_eq!(l[0]["entry"], json!(e3));
    assert_eq!(l[0]["current"], false);
    assert_eq!(l[0]["depth"], 4);
    assert_eq!(l[1]["entry"], json!(f));
    assert_eq!(l[1]["current"], true);
    assert_eq!(l[1]["depth"], 1);
    assert_eq!(ids(&show(&env)), [&e1, &f].map(|s| s.clone()));
    assert_eq!(show(&env)["app_state"], Value::Null);

    // Human output reads.
    let h = env.ckpt(&["session", "show", "--session", S, "--leaf", &e3]);
    assert_eq!(h.code, 0, "{}", h.stderr);
    assert!(
        h.stdout.contains("user: make the port configurable"),
        "{}",
        h.stdout
    );
    assert!(h.stdout.contains("(not current)"), "{}", h.stdout);
    assert!(
        h.stdout.contains("app state in force: {\"mode\":\"plan\"}"),
        "{}",
        h.stdout
    );

    // Refusals change nothing.
    let before = ledger(&env);
    let r = op(
        &env,
        &[
            "session",
            "append",
            "--session",
            S,
            "--type",
            "message",
            "--payload",
            "{}",
            "--parent",
            "e_nope",
        ],
    );
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("is not an entry of session"),
        "{}",
        r.stderr
    );
    let r = op(
        &env,
        &[
            "session",
            "append",
            "--session",
            "a\u{7}b",
            "--type",
            "message",
            "--payload",
            "{}",
        ],
    );
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("control characters"), "{}", r.stderr);
    let long = "s".repeat(300);
    let r = op(
        &env,
        &[
            "session",
            "append",
            "--session",
            &long,
            "--type",
            "message",
            "--payload",
            "{}",
        ],
    );
    assert_eq!(r.code, 1);
    let r = op(
        &env,
        &[
            "session",
            "append",
            "--session",
            S,
            "--type",
            "message",
            "--payload",
            "{nope",
        ],
    );
    assert_eq!(r.code, 2, "bad JSON is a usage error");
    let r = op(
        &env,
        &[
            "session",
            "append",
            "--session",
            S,
            "--type",
            "branch",
            "--payload",
            "{}",
        ],
    );
    assert_eq!(r.code, 2, "branch entries are not appended by hand");
    assert_eq!(ledger(&env), before);

    // An unknown session is empty, not an error.
    let v = ok(&env, &["session", "show", "--session", "other"]);
    assert_eq!(v["leaf"], Value::Null);
    assert_eq!(v["entries"], json!([]));
    verify_ok(&env);
}

#[test]
fn restore_to_a_checkpoint_keeps_the_abandoned_branch() {
    let env = TestEnv::init();
    let e1 = msg(&env, "one");
    let a1 = append(&env, "app_state", json!({"v": 1}));
    let c0 = append(&env, "compaction", json!({"summary": "early"}));
    let e2 = msg(&env, "two");
    let ck = checkpoint(&env);
    let cp = records(&env).last().unwrap().clone();
    assert_eq!(
        cp["session_leaf"],
        json!(e2),
        "checkpoint --session records the leaf"
    );
    msg(&env, "three (abandoned)");
    append(&env, "app_state", json!({"v": 2}));
    append(&env, "compaction", json!({"summary": "late"}));
    let old_leaf = msg(&env, "four (abandoned)");

    let r = ok(&env, &["restore-session", "--session", S, "--to", &ck]);
    assert_eq!(r["session"], S);
    assert_eq!(r["from"], json!(old_leaf));
    assert_eq!(r["to"], json!(e2));
    let b = r["branch_entry"].as_str().unwrap().to_string();
    assert!(r.get("rollback").is_none());

    let e5 = msg(&env, "five");
    let v = show(&env);
    assert_eq!(ids(&v), [&e1, &a1, &c0, &e2, &b, &e5].map(|s| s.clone()));
    assert_eq!(
        texts(&v),
        ["one", "two", "five"],
        "the abandoned messages are not on the branch"
    );
    assert_eq!(v["app_state"], json!({"v": 1}));
    assert_eq!(v["compaction"], json!({"summary": "early"}));
    let branch = &v["entries"][4];
    assert_eq!(branch["type"], "branch");
    assert_eq!(branch["parent"], json!(e2));
    assert_eq!(branch["payload"]["from"], json!(old_leaf));
    assert_eq!(branch["payload"]["checkpoint"], json!(ck));

    // Both leaves are listed; the old branch is still readable in full.
    let l = leaves(&env);
    let names: Vec<&str> = l.iter().map(|x| x["entry"].as_str().unwrap()).collect();
    assert_eq!(names, [old_leaf.as_str(), e5.as_str()]);
    assert_eq!(l[1]["current"], true);
    let old = ok(
        &env,
        &["session", "show", "--session", S, "--leaf", &old_leaf],
    );
    assert_eq!(old["current"], false);
    assert_eq!(
        texts(&old),
        ["one", "two", "three (abandoned)", "four (abandoned)"]
    );
    assert_eq!(old["app_state"], json!({"v": 2}));
    assert_eq!(old["compaction"], json!({"summary": "late"}));

    // One restore_session action, started then succeeded, naming the move.
    let acts: Vec<Value> = records(&env)
        .into_iter()
        .filter(|x| x["kind"] == "action" && x["type"] == "restore_session")
        .collect();
    assert_eq!(acts.len(), 2);
    assert_eq!(acts[0]["status"], "started");
    assert_eq!(acts[0]["target"], json!({"session": S, "to": ck}));
    assert_eq!(acts[0]["plan"]["from_leaf"], json!(old_leaf));
    assert_eq!(acts[0]["plan"]["to_entry"], json!(e2));
    assert_eq!(acts[1]["status"], "succeeded");
    assert_eq!(acts[1]["outcome"]["branch_entry"], json!(b));

    // Restoring to an entry id works too (no checkpoint needed without files).
    let r = ok(&env, &["restore-session", "--session", S, "--to", &e1]);
    assert_eq!(r["to"], json!(e1));
    assert_eq!(texts(&show(&env)), ["one"]);
    assert_eq!(show(&env)["app_state"], Value::Null);
    assert_eq!(leaves(&env).len(), 3);
    verify_ok(&env);
}

#[test]
fn restore_refuses_clearly_and_changes_nothing() {
    let env = TestEnv::init();
    let e1 = msg(&env, "one");
    let no_session = ok(&env, &["checkpoint"])["checkpoint"]
        .as_str()
        .unwrap()
        .to_string();
    let other = ok(&env, &["checkpoint", "--session", "other"])["checkpoint"]
        .as_str()
        .unwrap()
        .to_string();
    let before = ledger(&env);
    let cases: [(&[&str], &str); 6] = [
        (&["--to", &no_session], "was made without a session"),
        (&["--to", &other], "belongs to session `other`"),
        (&["--to", "e_nope"], "is neither a checkpoint nor an entry"),
        (&["--to", "ckpt_nope"], "ckpt_nope"),
        (&["--to", &e1, "--with-files"], "no checkpoint of session"),
        (&["--to", &e1, "--claude"], "no checkpoint of session"),
    ];
    for (extra, want) in cases {
        let mut a = vec!["restore-session", "--session", S];
        a.extend_from_slice(extra);
        let r = op(&env, &a);
        assert_eq!(r.code, 1, "{a:?}: {}", r.stderr);
        assert!(r.stderr.contains(want), "{a:?}: {}", r.stderr);
    }
    // A checkpoint taken before the session had entries has no leaf.
    let env2 = TestEnv::init();
    let ck = ok(&env2, &["checkpoint", "--session", S])["checkpoint"]
        .as_str()
        .unwrap()
        .to_string();
    msg(&env2, "later");
    let r = op(&env2, &["restore-session", "--session", S, "--to", &ck]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("records no position"), "{}", r.stderr);
    assert_eq!(ledger(&env), before);
}

fn agent_write(env: &TestEnv, files: &[(&str, Option<&[u8]>)]) {
    let ws = env.open();
    let paths: Vec<ckpt::RelPath> = files
        .iter()
        .map(|(p, _)| ws.rel_path(p.as_bytes(), None).unwrap())
        .collect();
    let mut call = ws
        .begin_call(ckpt::CallOptions {
            session: Some(S.into()),
            tool: "Write".into(),
            paths: paths.clone(),
            ..Default::default()
        })
        .unwrap();
    for ((_, data), p) in files.iter().zip(&paths) {
        match data {
            Some(d) => call.write_file(p, d).unwrap(),
            None => call.delete_file(p).unwrap(),
        }
    }
    call.finish(ckpt::CallStatus::Succeeded, None).unwrap();
}

/// A session with a checkpoint, then agent edits and more messages.
fn story(env: &TestEnv) -> (String, String, String) {
    msg(env, "one");
    agent_write(env, &[("a.txt", Some(b"v1\n"))]);
    let target = msg(env, "two");
    let ck = checkpoint(env);
    agent_write(env, &[("a.txt", Some(b"v2\n")), ("b.txt", Some(b"new\n"))]);
    let old = msg(env, "three");
    (ck, target, old)
}

#[test]
fn restore_with_files_is_one_recorded_action() {
    let env = TestEnv::init();
    let (ck, target, _) = story(&env);
    let r = ok(
        &env,
        &[
            "restore-session",
            "--session",
            S,
            "--to",
            &ck,
            "--with-files",
        ],
    );
    assert_eq!(std::fs::read(env.ws.join("a.txt")).unwrap(), b"v1\n");
    assert!(!env.ws.join("b.txt").exists());
    let rb = &r["rollback"];
    let rb_action = rb["action"].as_str().unwrap().to_string();
    let mut results: Vec<(String, String)> = rb["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().into(),
                f["result"].as_str().unwrap().into(),
            )
        })
        .collect();
    results.sort();
    assert_eq!(
        results,
        [
            ("a.txt".to_string(), "restored".to_string()),
            ("b.txt".into(), "deleted".into())
        ]
    );
    let recs = records(&env);
    let restore: Vec<&Value> = recs
        .iter()
        .filter(|x| x["kind"] == "action" && x["type"] == "restore_session")
        .collect();
    assert_eq!(restore.len(), 2);
    assert_eq!(restore[0]["plan"]["with_files"], true);
    assert_eq!(restore[1]["status"], "succeeded");
    assert_eq!(restore[1]["outcome"]["rollback_action"], json!(rb_action));
    let rollback_end = recs
        .iter()
        .find(|x| {
            x["kind"] == "action" && x["action"] == json!(rb_action) && x["status"] != "started"
        })
        .expect("the rollback ended");
    assert_eq!(rollback_end["status"], "succeeded");
    let branch = recs
        .iter()
        .find(|x| x["kind"] == "session_entry" && x["type"] == "branch")
        .unwrap();
    assert_eq!(branch["parent"], json!(target));
    assert_eq!(branch["payload"]["rollback_action"], json!(rb_action));
    assert_eq!(show(&env)["leaf"], branch["entry"]);
    verify_ok(&env);

    // A restore to an entry with --with-files uses the checkpoint that recorded it.
    agent_write(&env, &[("a.txt", Some(b"v3\n"))]);
    let r = ok(
        &env,
        &[
            "restore-session",
            "--session",
            S,
            "--to",
            &target,
            "--with-files",
        ],
    );
    assert_eq!(r["checkpoint"], json!(ck));
    assert_eq!(std::fs::read(env.ws.join("a.txt")).unwrap(), b"v1\n");
}

#[test]
fn restore_with_files_reports_conflicts_with_exit_3() {
    let env = TestEnv::init();
    let (ck, _, _) = story(&env);
    env.write("a.txt", b"the user's own line\n");
    let r = op(
        &env,
        &[
            "restore-session",
            "--session",
            S,
            "--to",
            &ck,
            "--with-files",
        ],
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    let v = r.json();
    assert_eq!(v["rollback"]["conflicts"].as_array().unwrap().len(), 1);
    assert_eq!(
        std::fs::read(env.ws.join("a.txt")).unwrap(),
        b"the user's own line\n"
    );
    assert!(v["branch_entry"].is_string(), "the session moved");
    verify_ok(&env);
}

#[test]
fn a_crash_at_each_step_leaves_the_session_whole() {
    for point in [
        "restore.after_started",
        "restore.after_rollback",
        "restore.before_branch",
    ] {
        for with_files in [false, true] {
            let env = TestEnv::init();
            let (ck, target, old) = story(&env);
            let mut args = vec!["restore-session", "--session", S, "--to", &ck];
            if with_files {
                args.push("--with-files");
            }
            let spec = format!("{point}=abort");
            let r = op_env(&env, &args, &[("CKPT_FAILPOINTS", &spec)]);
            assert_ne!(r.code, 0, "{point}: the failpoint did not fire");
            verify_ok(&env);
            // Never half: the session is at its old leaf (all three points are
            // before the branch entry's append).
            assert_eq!(
                show(&env)["leaf"],
                json!(old),
                "{point} with_files={with_files}"
            );
            assert_eq!(leaves(&env).len(), 1);

            // Running it again completes the move and closes the interrupted action.
            let r = op(&env, &args);
            assert_eq!(r.code, 0, "{point}: rerun failed: {}", r.stderr);
            assert_eq!(
                r.json()["interrupted_closed"][0]["branch_entry"],
                Value::Null
            );
            let v = show(&env);
            let b = &v["entries"].as_array().unwrap().last().unwrap().clone();
            assert_eq!(b["type"], "branch");
            assert_eq!(b["parent"], json!(target));
            assert_eq!(
                std::fs::read(env.ws.join("a.txt")).unwrap(),
                if with_files { &b"v1\n"[..] } else { b"v2\n" }
            );
            let recs = records(&env);
            let interrupted: Vec<&Value> = recs
                .iter()
                .filter(|x| x["kind"] == "action" && x["outcome"]["interrupted"] == true)
                .collect();
            assert_eq!(interrupted.len(), 1, "{point}");
            assert_eq!(interrupted[0]["status"], "failed");
            assert_eq!(interrupted[0]["outcome"]["session_at"], "old_leaf");
            // Every restore action has exactly one end.
            let starts = recs
                .iter()
                .filter(|x| x["type"] == "restore_session" && x["status"] == "started")
                .count();
            let ends = recs
                .iter()
                .filter(|x| x["type"] == "restore_session" && x["status"] != "started")
                .count();
            assert_eq!((starts, ends), (2, 2));
            verify_ok(&env);
        }
    }
}

#[test]
fn a_crash_inside_the_file_rollback_is_finished_and_the_session_stays() {
    let env = TestEnv::init();
    let (ck, _, old) = story(&env);
    let args = [
        "restore-session",
        "--session",
        S,
        "--to",
        &ck,
        "--with-files",
    ];
    let r = op_env(
        &env,
        &args,
        &[("CKPT_FAILPOINTS", "rollback.after_file=1*abort")],
    );
    assert_ne!(r.code, 0);
    verify_ok(&env);
    // The next command finishes the rollback; the session did not move.
    assert_eq!(show(&env)["leaf"], json!(old));
    assert_eq!(std::fs::read(env.ws.join("a.txt")).unwrap(), b"v1\n");
    assert!(!env.ws.join("b.txt").exists());
    let r = op(&env, &args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        show(&env)["entries"].as_array().unwrap().last().unwrap()["type"],
        "branch"
    );
    verify_ok(&env);
}

// ---------------------------------------------------------------- Claude Code

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/claude")
        .join(name)
}

fn uuids(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| v["uuid"].as_str().unwrap().to_string())
        .collect()
}

fn session_ids(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["sessionId"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

const U: [&str; 8] = [
    "u1-0000-4000-8000-000000000001",
    "a1-0000-4000-8000-000000000002",
    "u2-0000-4000-8000-000000000003",
    "a2-0000-4000-8000-000000000004",
    "u3-0000-4000-8000-000000000005",
    "a3-0000-4000-8000-000000000006",
    "u4-0000-4000-8000-000000000007",
    "a4-0000-4000-8000-000000000008",
];

#[test]
fn claude_fork_ends_at_the_entry_and_never_overwrites() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("orig.jsonl");
    std::fs::copy(fixture("transcript.jsonl"), &src).unwrap();
    let original = std::fs::read(&src).unwrap();
    let id = "22222222-2222-4222-8222-222222222222";
    let out = ckpt::claude_transcript::fork(&src, U[5], id, &Default::default()).unwrap();
    assert_eq!(out, d.path().join(format!("{id}.jsonl")));
    assert_eq!(
        uuids(&out),
        &U[..6],
        "the chain to a3, no sidechain, no other branch"
    );
    assert!(session_ids(&out).iter().all(|s| s == id));
    // Everything else is copied as it was.
    let first: Value = serde_json::from_str(
        std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first["message"]["content"], "Make the port configurable.");
    assert_eq!(first["cwd"], "/home/tester/proj");
    // The other branch from a2.
    let id2 = "33333333-3333-4333-8333-333333333333";
    let out2 = ckpt::claude_transcript::fork(&src, U[7], id2, &Default::default()).unwrap();
    assert_eq!(uuids(&out2), [U[0], U[1], U[2], U[3], U[6], U[7]]);
    // Never overwrite.
    let kept = std::fs::read(&out).unwrap();
    let e = ckpt::claude_transcript::fork(&src, U[1], id, &Default::default()).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    assert_eq!(std::fs::read(&out).unwrap(), kept);
    assert_eq!(
        std::fs::read(&src).unwrap(),
        original,
        "the original is untouched"
    );
    // Unknown uuid, unknown formats.
    let e = ckpt::claude_transcript::fork(
        &src,
        "nope",
        "44444444-4444-4444-8444-444444444444",
        &Default::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("has no entry `nope`"), "{e}");
    let e = ckpt::claude_transcript::prepare(&fixture("not-a-transcript.jsonl"), U[0]).unwrap_err();
    assert!(
        e.to_string()
            .contains("is not a Claude Code transcript ckpt understands"),
        "{e}"
    );
    let bad = d.path().join("bad.jsonl");
    std::fs::write(&bad, "hello\nworld\n").unwrap();
    let e = ckpt::claude_transcript::prepare(&bad, U[0]).unwrap_err();
    assert!(
        e.to_string()
            .contains("is not a Claude Code transcript ckpt understands"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_dir(d.path()).unwrap().count(),
        4,
        "no temp files left"
    );
}

/// Lines of the fixture up to and including `a2` and the sidechain line after it.
fn transcript_until_a2() -> (String, String) {
    let all = std::fs::read_to_string(fixture("transcript.jsonl")).unwrap();
    let lines: Vec<&str> = all.lines().collect();
    let cut = lines
        .iter()
        .position(|l| l.contains("\"uuid\":\"s1-"))
        .unwrap()
        + 1;
    (
        lines[..cut].iter().map(|l| format!("{l}\n")).collect(),
        lines[cut..].iter().map(|l| format!("{l}\n")).collect(),
    )
}

fn prompt_hook(env: &TestEnv, sid: &str, transcript: &Path) -> Run {
    let payload = json!({
        "session_id": sid,
        "transcript_path": transcript,
        "cwd": env.ws,
        "permission_mode": "default",
        "hook_event_name": "UserPromptSubmit",
        "prompt": "Now add a test for PORT=0."
    });
    crate::hooks::hook(env, "prompt", payload.to_string().as_bytes(), &[])
}

/// The newest checkpoint's id and its file.
fn last_checkpoint(env: &TestEnv) -> (String, Value) {
    let cp = records(env)
        .into_iter()
        .rfind(|x| x["kind"] == "checkpoint")
        .unwrap();
    let file =
        serde_json::from_slice(&std::fs::read(env.rt().join(cp["ref"].as_str().unwrap())).unwrap())
            .unwrap();
    (cp["checkpoint"].as_str().unwrap().to_string(), file)
}

#[test]
fn claude_restore_forks_the_transcript_at_the_checkpoint() {
    let env = TestEnv::init();
    let sid = "11111111-1111-4111-8111-111111111111";
    let dir = env.home.join(".claude/projects/-proj");
    std::fs::create_dir_all(&dir).unwrap();
    let t = dir.join(format!("{sid}.jsonl"));
    let (head, rest) = transcript_until_a2();
    std::fs::write(&t, &head).unwrap();
    let r = prompt_hook(&env, sid, &t);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (ck, file) = last_checkpoint(&env);
    assert_eq!(
        file["extra"]["transcript_last_uuid"], U[3],
        "the last main-chain entry (the sidechain is skipped)"
    );
    assert_eq!(file["extra"]["transcript_path"], json!(t));

    // The conversation goes on.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&t)
        .and_then(|mut f| std::io::Write::write_all(&mut f, rest.as_bytes()))
        .unwrap();
    let original = std::fs::read(&t).unwrap();

    let v = ok(
        &env,
        &["restore-session", "--session", sid, "--to", &ck, "--claude"],
    );
    let resume = v["claude_resume"].as_str().unwrap();
    let new_id = resume.strip_prefix("claude --resume ").unwrap();
    assert_ne!(new_id, sid);
    assert_eq!(new_id.len(), 36);
    assert_eq!(
        v["branch_entry"],
        Value::Null,
        "no ckpt session entries: the tree is unchanged"
    );
    let fork = dir.join(format!("{new_id}.jsonl"));
    assert_eq!(uuids(&fork), &U[..4]);
    assert!(session_ids(&fork).iter().all(|s| s == new_id));
    assert_eq!(std::fs::read(&t).unwrap(), original);
    let end = records(&env)
        .into_iter()
        .rfind(|x| x["type"] == "restore_session")
        .unwrap();
    assert_eq!(end["status"], "succeeded");
    assert_eq!(end["outcome"]["claude_session"], json!(new_id));

    // A second restore writes a second fork; nothing is overwritten.
    let kept = std::fs::read(&fork).unwrap();
    let v2 = ok(
        &env,
        &["restore-session", "--session", sid, "--to", &ck, "--claude"],
    );
    assert_ne!(v2["claude_resume"], v["claude_resume"]);
    assert_eq!(std::fs::read(&fork).unwrap(), kept);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 3);

    // Human output prints the command.
    let h = env.ckpt(&["restore-session", "--session", sid, "--to", &ck, "--claude"]);
    assert_eq!(h.code, 0, "{}", h.stderr);
    assert!(h.stdout.contains("  claude --resume "), "{}", h.stdout);

    // A transcript in a format ckpt does not know: a clear error, nothing recorded.
    std::fs::copy(fixture("not-a-transcript.jsonl"), &t).unwrap();
    let r = op(
        &env,
        &["restore-session", "--session", sid, "--to", &ck, "--claude"],
    );
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .contains("is not a Claude Code transcript ckpt understands"),
        "{}",
        r.stderr
    );
    verify_ok(&env);
}

#[test]
fn claude_checkpoint_without_a_readable_transcript_still_records() {
    let env = TestEnv::init();
    // A directory where the transcript should be: unreadable, not empty.
    let unreadable = env.home.join("a-dir.jsonl");
    std::fs::create_dir_all(&unreadable).unwrap();
    let r = prompt_hook(&env, "s-x", &unreadable);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (ck, file) = last_checkpoint(&env);
    assert!(file["extra"].get("transcript_last_uuid").is_none());
    assert!(file["extra"].get("transcript_empty").is_none());
    let r = op(
        &env,
        &[
            "restore-session",
            "--session",
            "s-x",
            "--to",
            &ck,
            "--claude",
        ],
    );
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("has no Claude Code transcript position"),
        "{}",
        r.stderr
    );
}

#[test]
fn claude_restore_to_the_first_prompt_is_a_fresh_start() {
    // The first prompt's hook runs before Claude Code writes anything: the
    // transcript is missing, or holds no entry yet.
    for (sid, content) in [
        ("s-missing", None),
        ("s-empty", Some(&b"{\"type\":\"summary\"}\n"[..])),
    ] {
        let env = TestEnv::init();
        let t = env.home.join(format!("{sid}.jsonl"));
        if let Some(c) = content {
            std::fs::write(&t, c).unwrap();
        }
        let r = prompt_hook(&env, sid, &t);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let (ck, file) = last_checkpoint(&env);
        assert_eq!(file["extra"]["transcript_empty"], true, "{sid}: {file}");
        let v = ok(
            &env,
            &["restore-session", "--session", sid, "--to", &ck, "--claude"],
        );
        assert_eq!(v["claude_fresh"], true, "{sid}: {v}");
        assert_eq!(v["claude_session"], Value::Null, "{sid}: no fork");
        let h = env.ckpt(&["restore-session", "--session", sid, "--to", &ck, "--claude"]);
        assert_eq!(h.code, 0, "{}", h.stderr);
        assert!(
            h.stdout.contains("start a new session with `claude`"),
            "{}",
            h.stdout
        );
        let ends: Vec<Value> = records(&env)
            .into_iter()
            .filter(|x| x["type"] == "restore_session" && x["status"] == "succeeded")
            .collect();
        assert_eq!(ends.len(), 2, "{sid}");
        assert_eq!(ends[0]["outcome"]["claude_fresh"], true);
        verify_ok(&env);
    }
}
