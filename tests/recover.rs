//! `ckpt recover`: the decision table of RELIABILITY T14, row by row, through
//! real hook payloads and the real binary; crash points inside a call; torn
//! tails; idempotence; the note.

use serde_json::{Value, json};

use crate::common::TestEnv;
use crate::hooks::{hook, hook_ok};

fn payload(event: &str, id: &str, tool: &str, input: Value, extra: Value) -> Vec<u8> {
    let mut v = json!({"hook_event_name": event, "session_id": "s1", "tool_use_id": id,
        "tool_name": tool, "tool_input": input});
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    v.to_string().into_bytes()
}

fn edit(env: &TestEnv, file: &str, old: &str, new: &str) -> Value {
    json!({"file_path": env.ws.join(file).to_str().unwrap(), "old_string": old, "new_string": new})
}

fn pre(env: &TestEnv, id: &str, tool: &str, input: Value) {
    hook_ok(
        env,
        "pre",
        &payload("PreToolUse", id, tool, input, json!({})),
    );
}

fn post(env: &TestEnv, id: &str, tool: &str, input: Value) {
    hook_ok(
        env,
        "post",
        &payload("PostToolUse", id, tool, input, json!({"tool_response": {}})),
    );
}

fn post_failure(env: &TestEnv, id: &str, tool: &str, input: Value) {
    hook_ok(
        env,
        "post-failure",
        &payload(
            "PostToolUseFailure",
            id,
            tool,
            input,
            json!({"error": "boom: it broke"}),
        ),
    );
}

fn recover(env: &TestEnv) -> (i32, Value) {
    let r = env.ckpt(&["--json", "recover"]);
    assert!(
        r.code == 0 || r.code == 5,
        "recover exit {}: {}",
        r.code,
        r.stderr
    );
    (r.code, r.json())
}

fn call<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["call"] == id)
        .unwrap_or_else(|| panic!("call {id} not in {v}"))
}

fn statuses(env: &TestEnv, id: &str) -> Vec<String> {
    env.ckpt(&["log", "--json"]).json()["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "tool_call" && r["call"] == id)
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect()
}

fn verify_ok(env: &TestEnv) {
    let r = env.ckpt(&["verify"]);
    assert_eq!(r.code, 0, "verify: {}{}", r.stdout, r.stderr);
}

/// Row 1: no `started` record (the pre hook died before its append): the call
/// is unknown to ckpt, nothing is done, nothing needs a person.
#[test]
fn t14_no_started_record_is_unknown_and_nothing_is_done() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\nbeta\n");
    let r = hook(
        &env,
        "pre",
        &payload(
            "PreToolUse",
            "t1",
            "Edit",
            edit(&env, "a.txt", "beta", "BETA"),
            json!({}),
        ),
        &[("CKPT_FAILPOINTS", "hook.pre.after_snapshot=abort")],
    );
    assert_ne!(r.code, 0);
    let (code, v) = recover(&env);
    assert_eq!(code, 0, "{v}");
    assert!(
        v["calls"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["call"] != "t1")
    );
    assert_eq!(
        std::fs::read(env.ws.join("a.txt")).unwrap(),
        b"alpha\nbeta\n"
    );
    verify_ok(&env);
}

/// Row 2: started + succeeded → completed, replay `no`.
#[test]
fn t14_completed_call_is_completed_and_not_replayed() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\nbeta\n");
    let input = edit(&env, "a.txt", "beta", "BETA");
    pre(&env, "t1", "Edit", input.clone());
    env.write("a.txt", b"alpha\nBETA\n");
    post(&env, "t1", "Edit", input);
    let (code, v) = recover(&env);
    assert_eq!(code, 0);
    assert_eq!(call(&v, "t1")["status"], "completed");
    assert_eq!(call(&v, "t1")["replay"], "no");
    let note = std::fs::read_to_string(env.rt().join("RECOVERY.md")).unwrap();
    assert!(
        note.contains("Edit(t1) on a.txt: completed. Do not repeat it."),
        "{note}"
    );
}

/// Row 3: started + failed, file = base → failed, not applied, nothing done.
#[test]
fn t14_failed_call_with_file_at_base_is_failed() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\nbeta\n");
    let input = edit(&env, "a.txt", "beta", "BETA");
    pre(&env, "t1", "Edit", input.clone());
    post_failure(&env, "t1", "Edit", input);
    let (code, v) = recover(&env);
    assert_eq!(code, 0, "{v}");
    let c = call(&v, "t1");
    assert_eq!(c["status"], "failed");
    assert!(c.get("evidence").is_none(), "{c}");
    assert_eq!(
        c["replay"], "auto",
        "an Edit is conditional/auto: safe to retry"
    );
}

/// Row 4, as issue 21 item 7 has it: started + failed, file ≠ what the call
/// left. The end record looked at the file (what changed during the call is
/// its patches), so the change came after the call ended: the call is
/// failed, nothing is in doubt, no conflict, and a second run says the
/// same (before, every run reopened it, raised a conflict and exited 5 while
/// `status` said 0 in doubt). The file is not touched.
#[test]
fn t14_failed_call_with_file_changed_since_is_failed_not_reopened() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\nbeta\n");
    let input = edit(&env, "a.txt", "beta", "BETA");
    pre(&env, "t1", "Edit", input.clone());
    post_failure(&env, "t1", "Edit", input);
    env.write("a.txt", b"something else\n");
    for _ in 0..2 {
        let (code, v) = recover(&env);
        assert_eq!(code, 0, "{v}");
        let c = call(&v, "t1");
        assert_eq!(c["status"], "failed");
        assert_eq!(c["evidence"], "changed_since_end");
        assert!(c["files"][0]["conflict"].is_null(), "{c}");
    }
    assert_eq!(
        std::fs::read(env.ws.join("a.txt")).unwrap(),
        b"something else\n"
    );
    let cf = env.ckpt(&["--json", "conflicts"]).json();
    assert!(cf["conflicts"].as_array().unwrap().is_empty(), "{cf}");
    assert_eq!(env.ckpt(&["--json", "status"]).json()["uncertain"], 0);
}

/// Row 5: started only, file = base → not applied: closed as failed
/// ("abandoned"), replay allowed; a second recover finds it failed.
#[test]
fn t14_started_only_with_file_at_base_is_abandoned() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\nbeta\n");
    pre(&env, "t1", "Edit", edit(&env, "a.txt", "beta", "BETA"));
    let (code, v) = recover(&env);
    assert_eq!(code, 0, "{v}");
    let c = call(&v, "t1");
    assert_eq!(c["status"], "uncertain");
    assert_eq!(c["evidence"], "not_applied");
    assert_eq!(c["replay"], "auto");
    assert_eq!(statuses(&env, "t1"), ["started", "failed"]);
    let (_, again) = recover(&env);
    assert_eq!(call(&again, "t1")["status"], "failed");
    assert_eq!(
        statuses(&env, "t1"),
        ["started", "failed"],
        "recover twice adds nothing"
    );
    // The file changes afterwards: recover's own close is not reopened.
    env.write("a.txt", b"changed later\n");
    let (code, again) = recover(&env);
    assert_eq!(code, 0, "{again}");
    assert_eq!(call(&again, "t1")["status"], "failed");
    assert!(
        env.ckpt(&["--json", "conflicts"]).json()["conflicts"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    verify_ok(&env);
}

/// Row 6: started only, file = predicted after (Edit, MultiEdit-like, Write
/// creating a file) → applied: after stored, a patch and `succeeded` recorded.
#[test]
fn t14_started_only_with_predicted_after_is_applied_and_recorded() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\nbeta\n");
    pre(&env, "t1", "Edit", edit(&env, "a.txt", "beta", "BETA"));
    env.write("a.txt", b"alpha\nBETA\n");
    let w = json!({"file_path": env.ws.join("new.txt").to_str().unwrap(), "content": "fresh\n"});
    pre(&env, "t2", "Write", w);
    env.write("new.txt", b"fresh\n");
    let (code, v) = recover(&env);
    assert_eq!(code, 0, "{v}");
    for id in ["t1", "t2"] {
        let c = call(&v, id);
        assert_eq!(c["evidence"], "applied", "{c}");
        assert_eq!(c["replay"], "no");
        assert_eq!(statuses(&env, id), ["started", "succeeded"]);
    }
    let log = env.ckpt(&["log", "--json"]).json();
    let patches: Vec<&Value> = log["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "file_patch")
        .collect();
    assert_eq!(patches.len(), 2, "one patch per applied file");
    // The recovered patch is as good as a hook's: rolling the call back works.
    let r = env.ckpt(&["rollback", "--call", "t1"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        std::fs::read(env.ws.join("a.txt")).unwrap(),
        b"alpha\nbeta\n"
    );
    let r = env.ckpt(&["rollback", "--call", "t2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!env.ws.join("new.txt").exists());
    verify_ok(&env);
}

/// A Codex `apply_patch` cut short after it ran: the file it deletes is
/// gone, as the patch says. Before, the deleted path counted as "no
/// prediction" (an absent after looked like an unknown one), so recover
/// called the whole call diverged and raised a conflict for a done delete.
#[test]
fn a_cut_short_patch_whose_delete_is_done_is_applied() {
    let env = TestEnv::init();
    env.write("old.txt", b"obsolete\n");
    env.write("lib.rs", b"mod a;\n");
    let patch = "*** Begin Patch\n*** Update File: lib.rs\n@@\n mod a;\n+mod b;\n*** Delete File: old.txt\n*** End Patch\n";
    let v = json!({"hook_event_name": "PreToolUse", "session_id": "s1", "tool_use_id": "p1",
        "tool_name": "apply_patch", "tool_input": {"command": patch}, "turn_id": "t",
        "cwd": env.ws.to_str().unwrap()});
    let r = crate::common::run_with_stdin(
        &env,
        &["hook", "pre", "--format", "codex"],
        v.to_string().as_bytes(),
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::remove_file(env.ws.join("old.txt")).unwrap();
    env.write("lib.rs", b"mod a;\nmod b;\n");
    let (code, v) = recover(&env);
    assert_eq!(code, 0, "{v}");
    let c = call(&v, "p1");
    assert_eq!(c["evidence"], "applied", "{c}");
    assert_eq!(statuses(&env, "p1"), ["started", "succeeded"]);
    let r = env.ckpt(&["rollback", "--call", "p1"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        std::fs::read(env.ws.join("old.txt")).unwrap(),
        b"obsolete\n"
    );
    assert_eq!(std::fs::read(env.ws.join("lib.rs")).unwrap(), b"mod a;\n");
    verify_ok(&env);
}

/// Row 7: started only, file neither base nor predicted (or missing) →
/// uncertain, conflict, never rolled back, exit 5.
#[test]
fn t14_started_only_with_other_content_or_missing_file_is_uncertain() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\nbeta\n");
    env.write("b.txt", b"one\n");
    pre(&env, "t1", "Edit", edit(&env, "a.txt", "beta", "BETA"));
    env.write("a.txt", b"half written");
    pre(&env, "t2", "Edit", edit(&env, "b.txt", "one", "ONE"));
    std::fs::remove_file(env.ws.join("b.txt")).unwrap();
    let (code, v) = recover(&env);
    assert_eq!(code, 5, "{v}");
    for id in ["t1", "t2"] {
        let c = call(&v, id);
        assert_eq!(c["status"], "uncertain");
        assert_eq!(c["evidence"], "diverged");
        assert_eq!(c["replay"], "never");
    }
    assert_eq!(
        std::fs::read(env.ws.join("a.txt")).unwrap(),
        b"half written"
    );
    assert!(
        !env.ws.join("b.txt").exists(),
        "never resurrected automatically"
    );
    let note = std::fs::read_to_string(env.rt().join("RECOVERY.md")).unwrap();
    assert!(note.contains("## Needs a person"), "{note}");
    assert!(note.contains("Edit(t1) on a.txt"), "{note}");
}

/// Row 8: an end without a start (post hook whose pre never ran): kept and
/// flagged, never a crash.
#[test]
fn t14_post_without_pre_is_flagged() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\n");
    let input = json!({"file_path": env.ws.join("a.txt").to_str().unwrap(), "content": "beta\n"});
    env.write("a.txt", b"beta\n");
    post(&env, "t9", "Write", input);
    let (_, v) = recover(&env);
    let c = call(&v, "t9");
    assert_eq!(c["evidence"], "no_started_record", "{c}");
    verify_ok(&env);
}

/// A shell call cut short: its effects are unknown; non-idempotent → a
/// person; the note says not to run it again.
#[test]
fn uncertain_shell_call_needs_a_person() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\n");
    pre(&env, "b1", "Bash", json!({"command": "make deploy"}));
    let (code, v) = recover(&env);
    assert_eq!(code, 5);
    let c = call(&v, "b1");
    assert_eq!(c["status"], "uncertain");
    assert_eq!(c["replay"], "ask");
    let note = std::fs::read_to_string(env.rt().join("RECOVERY.md")).unwrap();
    assert!(
        note.contains("Bash(b1) was running when the process stopped"),
        "{note}"
    );
    assert!(
        note.contains("Do not run it again without checking"),
        "{note}"
    );
}

/// A person settles a call in doubt: recovery stops asking (exit 0), the
/// end is the person's, and a call not in doubt cannot be settled.
#[test]
fn a_person_settles_a_call_in_doubt() {
    let env = TestEnv::init();
    pre(&env, "b1", "Bash", json!({"command": "make deploy"}));
    let (code, _) = recover(&env);
    assert_eq!(code, 5);
    let r = env.ckpt(&["recover", "--settle", "b1"]);
    assert_eq!(r.code, 2, "--settle needs --as: {}", r.stderr);
    let r = env.ckpt(&["--json", "recover", "--settle", "b1", "--as", "failed"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json()["status"], "failed");
    let (code, v) = recover(&env);
    assert_eq!(code, 0, "{v}");
    assert_eq!(call(&v, "b1")["status"], "failed");
    assert_eq!(statuses(&env, "b1"), ["started", "failed"]);
    let r = env.ckpt(&["recover", "--settle", "b1", "--as", "succeeded"]);
    assert_eq!(r.code, 1, "already settled: {}", r.stderr);
    assert!(r.stderr.contains("is not in doubt"), "{}", r.stderr);
    let r = env.ckpt(&["recover", "--settle", "nope", "--as", "failed"]);
    assert_eq!(r.code, 1);
    verify_ok(&env);
}

/// A crash between a post hook's snapshot and its append: the ledger has
/// `started` only, the file has the agent's bytes → recover says applied.
#[test]
fn crash_inside_the_post_hook_is_recovered_as_applied() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\nbeta\n");
    let input = edit(&env, "a.txt", "beta", "BETA");
    pre(&env, "t1", "Edit", input.clone());
    env.write("a.txt", b"alpha\nBETA\n");
    let r = hook(
        &env,
        "post",
        &payload(
            "PostToolUse",
            "t1",
            "Edit",
            input,
            json!({"tool_response": {}}),
        ),
        &[("CKPT_FAILPOINTS", "hook.post.before_append=abort")],
    );
    assert_ne!(r.code, 0);
    let (code, v) = recover(&env);
    assert_eq!(code, 0, "{v}");
    assert_eq!(call(&v, "t1")["evidence"], "applied");
    verify_ok(&env);
}

/// A torn last record is cut (backed up) and said in the note; recovery goes on.
#[test]
fn torn_tail_is_repaired_and_reported() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\nbeta\n");
    pre(&env, "t1", "Edit", edit(&env, "a.txt", "beta", "BETA"));
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(env.ledger_path())
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"v\":1,\"seq\":2,\"kind\":\"tool_ca").unwrap();
    drop(f);
    let (_, v) = recover(&env);
    assert!(v["torn_bytes"].as_u64().unwrap() > 0, "{v}");
    let note = std::fs::read_to_string(env.rt().join("RECOVERY.md")).unwrap();
    assert!(note.contains("half-written record"), "{note}");
    verify_ok(&env);
}

/// A rollback cut short at each of its steps is finished by `recover`.
#[test]
fn recover_finishes_an_interrupted_rollback() {
    for point in [
        "rollback.after_plan=abort",
        "rollback.after_file=1*abort",
        "rollback.before_rename=2*abort",
        "rollback.before_end=abort",
    ] {
        let env = TestEnv::init();
        env.write("a.txt", b"a\n");
        env.write("b.txt", b"b\n");
        for (id, f) in [("t1", "a.txt"), ("t2", "b.txt")] {
            let input =
                json!({"file_path": env.ws.join(f).to_str().unwrap(), "content": "agent\n"});
            pre(&env, id, "Write", input.clone());
            env.write(f, b"agent\n");
            post(&env, id, "Write", input);
        }
        let r = env.ckpt_env(&["rollback", "--last", "2"], &[("CKPT_FAILPOINTS", point)]);
        assert_ne!(
            r.code, 0,
            "{point}: the rollback should have been cut short"
        );
        let (code, v) = recover(&env);
        assert_eq!(code, 0, "{point}: {v}");
        assert_eq!(v["actions"][0]["status"], "finished_now", "{point}: {v}");
        assert_eq!(
            std::fs::read(env.ws.join("a.txt")).unwrap(),
            b"a\n",
            "{point}"
        );
        assert_eq!(
            std::fs::read(env.ws.join("b.txt")).unwrap(),
            b"b\n",
            "{point}"
        );
        verify_ok(&env);
        let (_, again) = recover(&env);
        assert!(
            again["actions"].as_array().unwrap().is_empty(),
            "{point}: {again}"
        );
    }
}

/// T1/T4 for capture: abort an Edit's pre or post hook at every write step it
/// passes, then `recover` + `verify`: the ledger verifies, the user's other
/// file is untouched, and the call is classified as the file says — absent
/// from the ledger (the pre died before its record), `applied` / completed
/// (the edit is on disk), or `not_applied` (it is not).
#[test]
fn a_crash_at_every_capture_write_step_is_classified_by_recover() {
    let points = [
        "ledger.after_lock",
        "ledger.before_fdatasync",
        "ledger.after_fdatasync",
        "blob.after_tmp_write",
        "blob.before_publish",
        "blob.after_publish",
        "atomic.after_tmp_write",
        "atomic.before_rename",
        "atomic.after_rename",
        "new.after_write",
        "new.after_sync",
        "hook.pre.after_snapshot",
        "hook.post.before_append",
    ];
    let mut crashed = Vec::new();
    for phase in ["pre", "post"] {
        for point in points {
            let env = TestEnv::init();
            env.write("a.txt", b"alpha\nbeta\n");
            env.write("mine.txt", b"the user's file\n");
            let input = edit(&env, "a.txt", "beta", "BETA");
            let fp = [("CKPT_FAILPOINTS", format!("{point}=abort"))];
            let fp: Vec<(&str, &str)> = fp.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let pre_payload = payload("PreToolUse", "t1", "Edit", input.clone(), json!({}));
            let r = if phase == "pre" {
                hook(&env, "pre", &pre_payload, &fp)
            } else {
                hook_ok(&env, "pre", &pre_payload);
                env.write("a.txt", b"alpha\nBETA\n");
                let post_payload = payload(
                    "PostToolUse",
                    "t1",
                    "Edit",
                    input,
                    json!({"tool_response": {}}),
                );
                hook(&env, "post", &post_payload, &fp)
            };
            if r.code != 0 {
                crashed.push(format!("{phase} {point}"));
            }
            let (code, v) = recover(&env);
            verify_ok(&env);
            let here = format!("{phase} {point}: {v}");
            assert_eq!(
                std::fs::read(env.ws.join("mine.txt")).unwrap(),
                b"the user's file\n",
                "{here}"
            );
            let c = v["calls"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["call"] == "t1");
            let on_disk = std::fs::read(env.ws.join("a.txt")).unwrap();
            match (phase, c) {
                // The pre died before its record: unknown to ckpt, nothing done.
                ("pre", None) => assert_eq!(on_disk, b"alpha\nbeta\n", "{here}"),
                ("pre", Some(c)) => {
                    assert_eq!(c["evidence"], "not_applied", "{here}");
                    assert_eq!(code, 0, "{here}");
                }
                (_, Some(c)) => {
                    assert_eq!(on_disk, b"alpha\nBETA\n", "{here}");
                    let done = c["status"] == "completed" || c["evidence"] == "applied";
                    assert!(done, "{here}");
                    assert_eq!(c["replay"], "no", "{here}");
                }
                (_, None) => panic!("the call vanished: {here}"),
            }
        }
    }
    // Every step on the path was really cut: a failpoint a hook never passes
    // would make this test prove nothing.
    eprintln!("crashed at: {crashed:?}");
    assert!(
        crashed.len() >= 17,
        "only {} crash points hit: {crashed:?}",
        crashed.len()
    );
}

/// A copy of `env`'s workspace without recover's cached cut
/// (`index/recover.json`): its recover reads the whole ledger.
fn copy_uncached(env: &TestEnv) -> TestEnv {
    let other = crate::common::copy_workspace(env);
    let _ = std::fs::remove_file(other.rt().join("index/recover.json"));
    other
}

/// issue 24: `recover` reads the ledger from a cached cut (the records
/// before it cannot change its report), and says exactly what a whole read
/// says, over random histories of checkpoints, completed, failed and
/// cut-short calls, settles of old calls, user edits and rollbacks.
#[test]
fn recover_from_its_cached_cut_says_what_a_whole_read_says() {
    let env = TestEnv::init();
    let mut rng = crate::common::Rng(crate::common::seed(2412) | 1);
    let fixed = [("CKPT_TIMESTAMP", "1893456000"), ("CKPT_ID_SEED", "7")];
    let mut in_doubt: Vec<String> = Vec::new();
    let mut compared = 0;
    let mut cut_moved = false;
    let mut short_reads = 0;
    let mut compare = |step: u64| {
        compared += 1;
        let whole = copy_uncached(&env);
        let a = env.ckpt_env(&["--json", "recover"], &fixed);
        let b = whole.ckpt_env(&["--json", "recover"], &fixed);
        assert_eq!(a.code, b.code, "step {step}: {}\n{}", a.stderr, b.stderr);
        assert_eq!(a.json(), b.json(), "step {step}");
        // The human report (with its count of calls) too, on a second run.
        let a = env.ckpt_env(&["recover"], &fixed);
        let b = whole.ckpt_env(&["recover"], &fixed);
        assert_eq!(a.stdout, b.stdout, "step {step}");
        let cached: Value =
            serde_json::from_slice(&std::fs::read(env.rt().join("index/recover.json")).unwrap())
                .unwrap();
        cut_moved |= cached["seq"].as_u64().unwrap() > 0;
        // The second run read from the cut the first one left (the trace
        // says where each read started).
        let trace = std::fs::read_to_string(env.rt().join("trace.jsonl")).unwrap();
        let last: Value = trace
            .lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["event"] == "recover_read")
            .unwrap();
        assert_eq!(last["after_seq"], cached["seq"], "step {step}: {last}");
        short_reads += u64::from(cached["seq"].as_u64().unwrap() > 0);
    };
    // A start every history shares: completed calls, then a checkpoint,
    // so the cut leaves the start whatever comes next.
    for i in 0..2 {
        let r = env.ckpt(&["exec", "--", "sh", "-c", &format!("echo {i} > f{i}.txt")]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    assert_eq!(env.ckpt(&["checkpoint"]).code, 0);
    compare(0);
    compare(0);
    for step in 0..60u64 {
        let f = format!("f{}.txt", rng.below(4));
        let id = format!("t{step}");
        match rng.below(9) {
            0 | 1 => {
                let r = env.ckpt(&["checkpoint"]);
                assert_eq!(r.code, 0, "{}", r.stderr);
            }
            2 | 3 => {
                let r = env.ckpt(&["exec", "--", "sh", "-c", &format!("echo {step} >> {f}")]);
                assert_eq!(r.code, 0, "{}", r.stderr);
            }
            4 => {
                env.write(&f, format!("base {step}\n").as_bytes());
                let input = edit(&env, &f, &format!("base {step}"), &format!("edit {step}"));
                pre(&env, &id, "Edit", input.clone());
                env.write(&f, format!("edit {step}\n").as_bytes());
                if rng.below(2) == 0 {
                    post(&env, &id, "Edit", input);
                } else {
                    post_failure(&env, &id, "Edit", input);
                }
            }
            5 => {
                pre(
                    &env,
                    &id,
                    "Bash",
                    json!({"command": format!("deploy {step}")}),
                );
                in_doubt.push(id);
            }
            6 if !in_doubt.is_empty() => {
                let old = in_doubt.remove(rng.below(in_doubt.len() as u64) as usize);
                let how = if rng.below(2) == 0 {
                    "failed"
                } else {
                    "succeeded"
                };
                let r = env.ckpt(&["recover", "--settle", &old, "--as", how]);
                assert_eq!(r.code, 0, "{}", r.stderr);
            }
            7 => env.write(&f, format!("user {step}\n").as_bytes()),
            _ => {
                let r = env.ckpt(&["rollback", "--last", "1"]);
                assert!(r.code == 0 || r.code == 1 || r.code == 3, "{}", r.stderr);
            }
        }
        if rng.below(3) != 0 {
            continue;
        }
        compare(step);
    }
    assert!(compared >= 10, "only {compared} comparisons");
    assert!(
        cut_moved,
        "the cut never left the start: nothing was tested"
    );
    verify_ok(&env);
}

/// A cached cut that does not match the ledger (stale, garbage, pointing
/// past the end or at another record) is never trusted: recover reads the
/// whole ledger and writes a good one.
#[test]
fn a_damaged_or_stale_recover_cache_is_rebuilt_and_never_trusted() {
    let env = TestEnv::init();
    pre(&env, "old", "Bash", json!({"command": "make deploy"}));
    for i in 0..5 {
        assert_eq!(env.ckpt(&["checkpoint"]).code, 0);
        let r = env.ckpt(&["exec", "--", "sh", "-c", &format!("echo {i} > a.txt")]);
        assert_eq!(r.code, 0);
    }
    let r = env.ckpt(&["recover", "--settle", "old", "--as", "failed"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (_, want) = recover(&env);
    let cache = env.rt().join("index/recover.json");
    let good: Value = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
    let mut bad = Vec::new();
    for (k, v) in [
        ("seq", json!(good["seq"].as_u64().unwrap() + 1)),
        ("end", json!(good["end"].as_u64().unwrap() + 1)),
        ("end", json!(10_000_000)),
        ("hash", json!("sha256:0000")),
        (
            "calls_before",
            json!(good["calls_before"].as_u64().unwrap() + 3),
        ),
    ] {
        let mut c = good.clone();
        c[k] = v;
        bad.push(c.to_string().into_bytes());
    }
    bad.push(b"garbage".to_vec());
    bad.push(Vec::new());
    for b in bad {
        std::fs::write(&cache, &b).unwrap();
        let (_, got) = recover(&env);
        assert_eq!(got, want, "{}", String::from_utf8_lossy(&b));
        let now: Value = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
        assert_eq!(now, good, "rebuilt after {}", String::from_utf8_lossy(&b));
    }
}

/// A call that failed in a turn a checkpoint closed is counted, not listed,
/// as a completed one is; so it no longer holds `recover`'s cut back at the
/// oldest failure (failed shell calls are common: every failing test run).
/// One whose outcome ckpt could not know stays listed, in doubt.
#[test]
fn a_failure_before_the_last_checkpoint_is_counted_not_listed_and_the_cut_passes_it() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\nbeta\n");
    let input = edit(&env, "a.txt", "beta", "BETA");
    pre(&env, "t1", "Edit", input.clone());
    post_failure(&env, "t1", "Edit", input);
    let (_, v) = recover(&env);
    assert_eq!(
        call(&v, "t1")["status"],
        "failed",
        "in the open turn: listed"
    );
    assert_eq!(env.ckpt(&["checkpoint"]).code, 0);
    let r = env.ckpt(&["exec", "--", "sh", "-c", "echo later > b.txt"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (code, v) = recover(&env);
    assert_eq!(code, 0, "{v}");
    let listed: Vec<&str> = v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["call"].as_str().unwrap())
        .collect();
    assert!(!listed.contains(&"t1"), "{v}");
    assert_eq!(listed.len(), 1, "the exec after the checkpoint: {v}");
    let human = env.ckpt(&["recover"]);
    assert!(
        human
            .stdout
            .starts_with("2 calls in the ledger; in doubt or recent: 1 completed, 0 failed"),
        "t1 is still counted: {}",
        human.stdout
    );
    let cached: Value =
        serde_json::from_slice(&std::fs::read(env.rt().join("index/recover.json")).unwrap())
            .unwrap();
    assert!(
        cached["seq"].as_u64().unwrap() >= 2,
        "the cut moved past the failed call: {cached}"
    );
    // The next recover reads from there and says the same.
    let (_, again) = recover(&env);
    assert_eq!(again, v);
}
