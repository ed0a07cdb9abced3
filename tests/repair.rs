//! `ckpt repair` (issue 21 item 4): the way out of a damaged history. Every
//! record that is whole is kept, a `repair` record stands in for each lost
//! one, damaged bytes are moved aside (never deleted), and the ledger then
//! verifies and rollback works for everything whose evidence is intact.

use std::path::Path;

use serde_json::json;

use crate::common::TestEnv;

fn git_ws() -> TestEnv {
    let env = TestEnv::new();
    crate::common::git(&env, &["init", "-q"]);
    env.write("keep.txt", b"user\n");
    crate::common::git(&env, &["add", "-A"]);
    crate::common::git(&env, &["commit", "-qm", "base"]);
    assert_eq!(env.ckpt(&["init"]).code, 0);
    env
}

/// The agent writes `name` with `content` through a pre and a post hook.
fn agent_write(env: &TestEnv, call: &str, name: &str, content: &str) {
    let file = env.ws.join(name);
    let p = |event: &str| {
        json!({"session_id": "s", "tool_use_id": call, "cwd": env.ws,
               "hook_event_name": event, "tool_name": "Write",
               "tool_input": {"file_path": file, "content": content}, "tool_response": {}})
        .to_string()
    };
    let r = crate::hooks::hook(env, "pre", p("PreToolUse").as_bytes(), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::write(&file, content).unwrap();
    let r = crate::hooks::hook(env, "post", p("PostToolUse").as_bytes(), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

fn checkpoint(env: &TestEnv) -> String {
    let r = env.ckpt(&["checkpoint"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout.trim().to_string()
}

/// Replaces `what` by `with` in the first ledger line holding `kind` and `what`.
fn garble(env: &TestEnv, kind: &str, what: &str, with: &str) -> usize {
    let text = std::fs::read_to_string(env.ledger_path()).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let i = lines
        .iter()
        .position(|l| l.contains(kind) && l.contains(what))
        .unwrap();
    lines[i] = lines[i].replace(what, with);
    std::fs::write(env.ledger_path(), lines.join("\n") + "\n").unwrap();
    i + 1
}

fn damaged_files(env: &TestEnv) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, base, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let d = env.rt().join("damaged");
    let mut out = Vec::new();
    walk(&d, &d, &mut out);
    out.sort();
    out
}

#[test]
fn a_garbled_record_is_stood_in_for_and_everything_else_rolls_back() {
    let env = git_ws();
    let c0 = checkpoint(&env);
    agent_write(&env, "w1", "f1.txt", "one\n");
    agent_write(&env, "w2", "f2.txt", "two\n");
    agent_write(&env, "w3", "f3.txt", "three\n");
    let c1 = checkpoint(&env);
    agent_write(&env, "w4", "f4.txt", "four\n");
    garble(&env, "\"file_patch\"", "f2.txt", "f2.TXT");
    let damaged = std::fs::read(env.ledger_path()).unwrap();
    assert_eq!(env.ckpt(&["verify"]).code, 4);
    assert_ne!(
        env.ckpt(&["rollback", "--to", &c0]).code,
        0,
        "refused before repair"
    );

    // A dry run changes nothing.
    let d = env.ckpt(&["repair", "--dry-run", "--json"]);
    assert_eq!(d.code, 0, "{}", d.stderr);
    assert_eq!(d.json()["needed"], true);
    assert_eq!(d.json()["done"], false);
    assert_eq!(std::fs::read(env.ledger_path()).unwrap(), damaged);

    let r = env.ckpt(&["repair", "--json"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = r.json();
    assert_eq!(v["lost"], json!([6]), "{v}");
    assert_eq!(v["done"], true);
    assert!(!v["checkpoints"].as_array().unwrap().is_empty(), "{v}");
    // The old ledger, byte for byte, is kept aside.
    let backup = env.rt().join(v["backup"].as_str().unwrap());
    assert_eq!(std::fs::read(&backup).unwrap(), damaged);
    let v = env.ckpt(&["verify"]);
    assert_eq!(v.code, 0, "{}", v.stdout);
    // Writers go on.
    agent_write(&env, "w5", "f5.txt", "five\n");
    // Rollback to C1 takes out f4 and f5; to C0 everything still recorded.
    let r = env.ckpt(&["rollback", "--to", &c1]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!env.ws.join("f4.txt").exists() && !env.ws.join("f5.txt").exists());
    let r = env.ckpt(&["rollback", "--to", &c0]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!env.ws.join("f1.txt").exists() && !env.ws.join("f3.txt").exists());
    assert!(
        r.stderr.contains("lost to damage") && r.stderr.contains("seq 6"),
        "the rollback says what it could not know: {}",
        r.stderr
    );
    assert_eq!(std::fs::read(env.ws.join("keep.txt")).unwrap(), b"user\n");
    // Again: nothing to repair.
    let r = env.ckpt(&["repair"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("nothing to repair"), "{}", r.stdout);
    let log = env.ckpt(&["log"]);
    assert!(log.stdout.contains("stands in for seq 6"), "{}", log.stdout);
    assert!(
        log.stdout.contains("ckpt repair: 1 record(s) lost"),
        "{}",
        log.stdout
    );
}

#[test]
fn records_cut_off_the_end_are_stood_in_for_and_seqs_go_on() {
    let env = git_ws();
    for i in 1..=4 {
        agent_write(&env, &format!("w{i}"), &format!("f{i}.txt"), "x\n");
    }
    let full = std::fs::read_to_string(env.ledger_path()).unwrap();
    let n = full.lines().count();
    let keep: Vec<&str> = full.lines().take(n - 3).collect();
    std::fs::write(env.ledger_path(), keep.join("\n") + "\n").unwrap();
    assert_eq!(env.ckpt(&["checkpoint"]).code, 1, "refused before repair");
    let r = env.ckpt(&["repair", "--json"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let lost: Vec<u64> = r.json()["lost"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let n = n as u64;
    assert_eq!(lost, [n - 2, n - 1, n]);
    assert_eq!(env.ckpt(&["verify"]).code, 0);
    let c = env.ckpt(&["--json", "log"]);
    let recs = c.json()["records"].as_array().unwrap().clone();
    assert_eq!(
        recs.last().unwrap()["seq"],
        n + 1,
        "the summary follows the lost seqs"
    );
}

#[test]
fn a_deleted_head_and_a_damaged_blob_are_repaired() {
    let env = git_ws();
    agent_write(&env, "w1", "f1.txt", "one\n");
    std::fs::remove_file(env.rt().join("ledger.head")).unwrap();
    assert_eq!(env.ckpt(&["verify"]).code, 4);
    let r = env.ckpt(&["repair"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(env.rt().join("ledger.head").exists());
    assert_eq!(env.ckpt(&["verify"]).code, 0);
    // A blob whose bytes changed: moved aside, named, never deleted.
    let hex = ckpt::ContentHash::of(b"one\n").hex();
    let blob = env
        .rt()
        .join("artifacts/blobs")
        .join(&hex[..2])
        .join(&hex[2..]);
    let mut perms = std::fs::metadata(&blob).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
    std::fs::set_permissions(&blob, perms).unwrap();
    std::fs::write(&blob, b"not one\n").unwrap();
    assert_eq!(env.ckpt(&["verify"]).code, 4);
    let r = env.ckpt(&["repair", "--json"]);
    let v = r.json();
    assert_eq!(v["blobs"].as_array().unwrap().len(), 1, "{v}");
    assert!(!blob.exists());
    assert_eq!(
        std::fs::read(env.rt().join("damaged/blobs").join(&hex)).unwrap(),
        b"not one\n"
    );
    // What still needs that content is for verify to name (ckpt may find
    // it elsewhere, e.g. in git): repair's exit says the same as verify's.
    let after = env.ckpt(&["verify"]);
    assert_eq!(
        r.code, after.code,
        "{v}
{}",
        after.stdout
    );
    assert_eq!(
        v["remaining"].as_array().unwrap().is_empty(),
        after.code == 0,
        "{v}"
    );
    assert!(damaged_files(&env).iter().any(|f| f.starts_with("blobs/")));
    agent_write(&env, "w2", "f2.txt", "two\n");
}

#[test]
fn a_repair_cut_short_is_finished_by_the_next_one() {
    let env = git_ws();
    let c0 = checkpoint(&env);
    agent_write(&env, "w1", "f1.txt", "one\n");
    agent_write(&env, "w2", "f2.txt", "two\n");
    let _c1 = checkpoint(&env);
    garble(&env, "\"file_patch\"", "f1.txt", "f1.TXT");
    let r = env.ckpt_env(
        &["repair"],
        &[("CKPT_FAILPOINTS", "repair.before_replace=abort")],
    );
    assert_ne!(r.code, 0);
    assert_eq!(
        env.ckpt(&["verify"]).code,
        4,
        "still damaged: nothing half done"
    );
    let r = env.ckpt(&["repair"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = env.ckpt(&["verify"]);
    assert_eq!(v.code, 0, "{}", v.stdout);
    let r = env.ckpt(&["rollback", "--to", &c0]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!env.ws.join("f2.txt").exists());
    assert!(Path::new(&env.ws.join("keep.txt")).exists());
}
