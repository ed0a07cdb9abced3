//! `index/view.bin` (issue 24): `status` plans from the ledger reduced to
//! what its plan reads, extended with what was appended since. These tests
//! check that it never gives another answer than the whole read: when the
//! view is damaged, stale or from another ledger, on paths a rename, doubt
//! between calls or a rollback made complex, and across a gc horizon. The
//! model test (`tests/rollback_model.rs`) compares the two over random
//! histories of calls, rollbacks, undos and resolves, and `tests/gc.rs`
//! across random collections, a gc horizon the view is extended across
//! (the ledger held whole by a call in doubt) and a cut ledger.

use crate::common::{TestEnv, status_view_agrees};

fn exec(env: &TestEnv, script: &str) {
    let r = env.ckpt(&["exec", "--", "sh", "-c", script]);
    assert_eq!(r.code, 0, "{script}: {}", r.stderr);
}

fn view(env: &TestEnv) -> std::path::PathBuf {
    env.rt().join("index/view.bin")
}

fn edits(env: &TestEnv, n: usize) {
    for i in 0..n {
        exec(env, &format!("echo edit {i} >> f{}.txt", i % 3));
    }
}

#[test]
fn a_damaged_missing_or_foreign_view_is_built_again_and_status_stays_right() {
    let env = TestEnv::init();
    for f in 0..3 {
        env.write(&format!("f{f}.txt"), b"base\n");
    }
    edits(&env, 6);
    let first = status_view_agrees(&env, "first status");
    assert_eq!(first["agent_files"].as_array().unwrap().len(), 3, "{first}");
    assert!(view(&env).exists(), "status leaves the view behind");
    // Extended, not rebuilt: more calls, then status again.
    edits(&env, 4);
    status_view_agrees(&env, "after more calls");
    // A flipped byte anywhere, a cut-off file, an empty one, a missing one.
    let good = std::fs::read(view(&env)).unwrap();
    for (what, bytes) in [
        ("a flipped byte", {
            let mut b = good.clone();
            let i = b.len() / 2;
            b[i] ^= 0x20;
            b
        }),
        ("a cut-off file", good[..good.len() - 40].to_vec()),
        ("an empty file", Vec::new()),
    ] {
        std::fs::write(view(&env), &bytes).unwrap();
        status_view_agrees(&env, what);
        assert_eq!(
            std::fs::read(view(&env)).unwrap(),
            good,
            "{what}: the view is built again as it was"
        );
    }
    // The members file (the folded patches' places and calls): damaged or
    // gone, it is built again with the rest.
    let members = env.rt().join("index/view-members.bin");
    let good_members = std::fs::read(&members).unwrap();
    let mut b = good_members.clone();
    let i = b.len() / 3;
    b[i] ^= 1;
    std::fs::write(&members, &b).unwrap();
    status_view_agrees(&env, "a flipped byte in the members file");
    assert_eq!(std::fs::read(&members).unwrap(), good_members);
    std::fs::remove_file(&members).unwrap();
    edits(&env, 1);
    status_view_agrees(&env, "no members file, then a call");
    let good = std::fs::read(view(&env)).unwrap();
    std::fs::remove_file(view(&env)).unwrap();
    status_view_agrees(&env, "no view");
    assert_eq!(std::fs::read(view(&env)).unwrap(), good);
    // Another workspace's view (sound, anchored to its own ledger).
    let other = TestEnv::init();
    other.write("f0.txt", b"base\n");
    edits(&other, 9);
    status_view_agrees(&other, "the other workspace");
    std::fs::copy(view(&other), view(&env)).unwrap();
    status_view_agrees(&env, "another workspace's view");
    assert_eq!(std::fs::read(view(&env)).unwrap(), good);
    // Extended again from the view built last.
    edits(&env, 2);
    status_view_agrees(&env, "after two more calls");
    let v = env.ckpt(&["verify", "--json"]).json();
    assert_eq!(v["ok"], true, "{v}");
}

#[test]
fn renames_doubt_between_calls_and_rollbacks_plan_the_same_from_the_view() {
    let env = TestEnv::init();
    for f in ["a.txt", "b.txt", "who.txt", "keep.txt"] {
        env.write(f, format!("{f} base\n").as_bytes());
    }
    edits(&env, 3);
    status_view_agrees(&env, "plain edits");
    // A rename: both its paths are planned from their whole records.
    exec(&env, "echo a more >> a.txt");
    status_view_agrees(&env, "before the rename");
    exec(&env, "mv a.txt a2.txt");
    exec(&env, "echo after the rename >> a2.txt");
    status_view_agrees(&env, "after a rename");
    // A change either of two overlapping shell calls could have made.
    let pid = std::process::id().to_string();
    for p in [
        &br#"{"session":"A","call":"a1","tool":"Bash"}"#[..],
        br#"{"session":"B","call":"b1","tool":"Bash"}"#,
    ] {
        let r = crate::hooks::hook(&env, "pre", p, &[("CKPT_AGENT_PID", &pid)]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    env.write("who.txt", b"one of them\n");
    // While both are open, they are calls in doubt in the view too.
    status_view_agrees(&env, "two calls open");
    crate::hooks::hook_ok(
        &env,
        "post",
        br#"{"session":"A","call":"a1","status":"succeeded"}"#,
    );
    status_view_agrees(&env, "one of the two ended");
    crate::hooks::hook_ok(
        &env,
        "post",
        br#"{"session":"B","call":"b1","status":"succeeded"}"#,
    );
    let s = status_view_agrees(&env, "a change in doubt between calls");
    assert!(s.to_string().contains("who.txt"), "{s}");
    // The user edits an agent file; a rollback and its undo make paths
    // complex after they were folded.
    let mut b = std::fs::read(env.ws.join("f1.txt")).unwrap();
    b.extend_from_slice(b"the user's line\n");
    std::fs::write(env.ws.join("f1.txt"), b).unwrap();
    edits(&env, 3);
    status_view_agrees(&env, "a user edit between calls");
    let r = env.ckpt(&["rollback", "--last", "2", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    status_view_agrees(&env, "after rollback --last 2");
    let act = r.json()["action"].as_str().unwrap().to_string();
    let r = env.ckpt(&["rollback", "--action", &act]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    status_view_agrees(&env, "after the rollback was undone");
    edits(&env, 2);
    let r = env.ckpt(&["undo"]);
    assert!(r.code == 0 || r.code == 3, "{}", r.stderr);
    let s = status_view_agrees(&env, "after undo");
    assert!(!s["agent_files"].as_array().unwrap().is_empty(), "{s}");
}
