//! T10: every single-byte flip, and deleted, duplicated, reordered or replayed
//! records anywhere, are detected by `verify` (exit 4); nothing is auto-deleted.

use crate::common::{Rng, TestEnv, seed};
use crate::ledger_torn::{call_record, ledger_with};

fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|&b| b == b'\n')
        .map(|l| l.to_vec())
        .collect()
}

fn verify_fails(env: &TestEnv, ledger: &[u8]) -> bool {
    std::fs::write(env.ledger_path(), ledger).unwrap();
    !env.open().verify().unwrap().ok
}

#[test]
fn every_single_byte_flip_is_detected() {
    let env = ledger_with(50);
    let full = std::fs::read(env.ledger_path()).unwrap();
    assert!(!verify_fails(&env, &full), "the intact ledger verifies");
    let ws = env.open();
    let mut missed = Vec::new();
    let mut d = full.clone();
    for i in 0..full.len() {
        // A different flip pattern per position, so every bit position is exercised.
        let mask = 1u8 << (i % 8);
        d[i] ^= mask;
        std::fs::write(env.ledger_path(), &d).unwrap();
        if ws.verify().unwrap().ok {
            missed.push(i);
        }
        d[i] ^= mask;
    }
    assert!(
        missed.is_empty(),
        "{} of {} flips went undetected: {:?}",
        missed.len(),
        full.len(),
        &missed[..missed.len().min(10)]
    );
    // Nothing was auto-deleted by all those reads.
    std::fs::write(env.ledger_path(), &full).unwrap();
}

#[test]
fn random_multi_byte_edits_are_detected() {
    let env = ledger_with(50);
    let full = std::fs::read(env.ledger_path()).unwrap();
    let mut rng = Rng(seed(0x5eed_0010) | 1);
    for n in 0..2000 {
        let mut d = full.clone();
        let edits = 1 + rng.below(8);
        for _ in 0..edits {
            let i = rng.below(d.len() as u64) as usize;
            let b = rng.below(256) as u8;
            d[i] = if d[i] == b { b.wrapping_add(1) } else { b };
        }
        assert!(verify_fails(&env, &d), "edit set {n} undetected");
    }
}

#[test]
fn deleted_duplicated_reordered_and_replayed_records_are_detected() {
    let env = ledger_with(50);
    let full = std::fs::read(env.ledger_path()).unwrap();
    let ls = lines(&full);
    for k in 0..ls.len() {
        let mut del = ls.clone();
        del.remove(k);
        assert!(
            verify_fails(&env, &del.concat()),
            "deleting record {} undetected",
            k + 1
        );

        let mut dup = ls.clone();
        dup.insert(k, ls[k].clone());
        assert!(
            verify_fails(&env, &dup.concat()),
            "duplicating record {} undetected",
            k + 1
        );

        let mut replay = ls.clone();
        replay.push(ls[k].clone());
        assert!(
            verify_fails(&env, &replay.concat()),
            "replaying record {} at the end undetected",
            k + 1
        );

        if k + 1 < ls.len() {
            let mut swap = ls.clone();
            swap.swap(k, k + 1);
            assert!(
                verify_fails(&env, &swap.concat()),
                "swapping records {} and {} undetected",
                k + 1,
                k + 2
            );
        }
    }
    // Cut back to an earlier valid prefix: the head anchor catches it.
    for keep in [0usize, 1, 25, 49] {
        assert!(
            verify_fails(&env, &ls[..keep].concat()),
            "truncation to {keep} records undetected"
        );
    }
}

#[test]
fn corruption_in_the_middle_stops_readers_and_writers_never_delete_it() {
    let env = ledger_with(20);
    let full = std::fs::read(env.ledger_path()).unwrap();
    let mut ls = lines(&full);
    ls[9][30] ^= 0x01; // seq 10
    let damaged = ls.concat();
    std::fs::write(env.ledger_path(), &damaged).unwrap();
    let ws = env.open();
    let read = ws.read_ledger().unwrap();
    assert_eq!(read.records.len(), 9, "readers stop before the damage");
    assert_eq!(read.corruption.as_ref().unwrap().seq, 10);

    let r = env.ckpt(&["verify", "--json"]);
    assert_eq!(r.code, 4);
    let j = r.json();
    assert_eq!(j["ok"], false);
    assert_eq!(
        j["problems"][0]["seq"], 10,
        "the error names the first bad seq"
    );

    // A writer adds nothing to a damaged history (issue 21 item 3: records
    // after the damage reach no reader), and removes nothing.
    let e = ws.ledger().append(call_record(77)).unwrap_err();
    assert!(matches!(e, ckpt::ledger::LedgerError::Damaged(_)), "{e}");
    assert!(e.to_string().contains("ckpt repair"), "{e}");
    let after = std::fs::read(env.ledger_path()).unwrap();
    assert_eq!(after, damaged, "damaged bytes are kept, nothing added");
    assert_eq!(env.ckpt(&["verify"]).code, 4);
    // A hook follows on_record_failure: block by default, with the way out.
    let pre = serde_json::json!({"session_id": "s", "tool_use_id": "c", "cwd": env.ws,
        "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "true"}});
    let r = crate::hooks::hook(&env, "pre", pre.to_string().as_bytes(), &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("ckpt repair"), "{}", r.stderr);
    assert_eq!(std::fs::read(env.ledger_path()).unwrap(), damaged);
    // `checkpoint` prints no id `show` would reject: it refuses.
    let c = env.ckpt(&["checkpoint"]);
    assert_eq!(c.code, 1, "{}", c.stdout);
    // Reading commands say the history they show is partial.
    for cmd in [&["status"][..], &["conflicts"], &["log"], &["diff"]] {
        let r = env.ckpt(cmd);
        assert!(
            r.stderr.contains("partial history"),
            "{cmd:?}: {}",
            r.stderr
        );
    }
    // Put back by hand: verify finds it whole and writers go on.
    std::fs::write(env.ledger_path(), &full).unwrap();
    let v = env.ckpt(&["verify"]);
    assert_eq!(v.code, 0, "{}", v.stdout);
    ws.ledger().append(call_record(78)).unwrap();
}

#[test]
fn a_flip_detected_through_the_binary_exits_4() {
    let env = ledger_with(10);
    let full = std::fs::read(env.ledger_path()).unwrap();
    let mut rng = Rng(seed(42) | 1);
    for _ in 0..20 {
        let mut d = full.clone();
        let i = rng.below(d.len() as u64) as usize;
        d[i] ^= 0x04;
        std::fs::write(env.ledger_path(), &d).unwrap();
        let r = env.ckpt(&["verify"]);
        assert_eq!(r.code, 4, "flip at {i}: {}", r.stdout);
        assert!(r.stdout.contains("FAILED"));
    }
}

/// Issue 21 item 2: before, the next append moved `ledger.head` on and a cut
/// (or a deleted head) was never seen again: `verify` said ok and rollback
/// acted on the shortened history.
#[test]
fn records_cut_off_stay_detected_after_later_writes() {
    for cut in ["truncate", "empty", "delete_head"] {
        let env = ledger_with(20);
        let full = std::fs::read(env.ledger_path()).unwrap();
        let ls = lines(&full);
        match cut {
            "truncate" => std::fs::write(env.ledger_path(), ls[..12].concat()).unwrap(),
            "empty" => std::fs::write(env.ledger_path(), b"").unwrap(),
            _ => std::fs::remove_file(env.rt().join("ledger.head")).unwrap(),
        }
        // A writer comes along: it refuses, naming the way out.
        let c = env.ckpt(&["checkpoint"]);
        assert_eq!(c.code, 1, "{cut}: {}", c.stdout);
        assert!(c.stderr.contains("ckpt repair"), "{cut}: {}", c.stderr);
        let pre = serde_json::json!({"session_id": "s", "tool_use_id": "c", "cwd": env.ws,
            "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "true"}});
        let r = crate::hooks::hook(&env, "pre", pre.to_string().as_bytes(), &[]);
        assert_eq!(r.code, 2, "{cut}: {}", r.stderr);
        // The loss is still seen.
        for _ in 0..2 {
            let v = env.ckpt(&["verify"]);
            assert_eq!(v.code, 4, "{cut}: {}", v.stdout);
        }
        let r = env.ckpt(&["rollback", "--last", "1"]);
        assert_ne!(r.code, 0, "{cut}: rollback acted on a shortened history");
        let st = env.ckpt(&["status"]);
        assert!(
            st.stderr.contains("partial history"),
            "{cut}: {}",
            st.stderr
        );
    }
}

/// Issue 21 item 5: a middle record changed and every later hash
/// recomputed (`ledger.head` too) passes the chain check; only a checkpoint's
/// anchor tells. Before, `verify` said so and `rollback --to` wrote files.
#[test]
fn every_action_refuses_a_re_forged_chain() {
    let env = TestEnv::new();
    crate::common::git(&env, &["init", "-q"]);
    assert_eq!(env.ckpt(&["init"]).code, 0);
    let ck = |env: &TestEnv| env.ckpt(&["checkpoint"]).stdout.trim().to_string();
    let c0 = ck(&env);
    for i in 0..3 {
        let f = env.ws.join(format!("f{i}.txt"));
        let p = |ev: &str| {
            serde_json::json!({"session_id": "s", "tool_use_id": format!("w{i}"), "cwd": env.ws,
                "hook_event_name": ev, "tool_name": "Write",
                "tool_input": {"file_path": f, "content": "x\n"}, "tool_response": {}})
            .to_string()
        };
        assert_eq!(
            crate::hooks::hook(&env, "pre", p("PreToolUse").as_bytes(), &[]).code,
            0
        );
        std::fs::write(&f, "x\n").unwrap();
        assert_eq!(
            crate::hooks::hook(&env, "post", p("PostToolUse").as_bytes(), &[]).code,
            0
        );
    }
    let c1 = ck(&env);
    let full = std::fs::read(env.ledger_path()).unwrap();
    // The forger drops record 3 and re-chains everything after it.
    let mut ls = lines(&full);
    ls.remove(2);
    let forged = ckpt::ledger::rebuild(&ls.concat(), &Default::default(), None, "x").unwrap();
    std::fs::write(env.ledger_path(), &forged.bytes).unwrap();
    let mut head = serde_json::to_vec(&serde_json::json!({
        "seq": forged.tail.seq, "hash": forged.tail.hash}))
    .unwrap();
    head.resize(127, b' ');
    head.push(b'\n');
    std::fs::write(env.rt().join("ledger.head"), &head).unwrap();
    let before = crate::common::tree(&env.ws, &[".git", ".agent-runtime"]);
    // The newest checkpoint is found through a cache (`index/newest-checkpoint`)
    // instead of a listing of `checkpoints/`: whatever state the cache is in,
    // the newest checkpoint's anchor is checked.
    let pointer = env.rt().join("index/newest-checkpoint");
    assert_eq!(
        std::fs::read_to_string(&pointer).unwrap(),
        format!("{c1}\n")
    );
    for state in [
        "as written",
        "missing",
        "garbage",
        "names a deleted checkpoint",
    ] {
        match state {
            "as written" => {}
            "missing" => std::fs::remove_file(&pointer).unwrap(),
            "garbage" => std::fs::write(&pointer, b"\0\0ckpt_zz\n").unwrap(),
            _ => std::fs::write(&pointer, b"ckpt_00000000000000000000\n").unwrap(),
        }
        for args in [
            &["rollback", "--to", c0.as_str()][..],
            &["rollback", "--last", "1"],
            &["recover"],
        ] {
            // (Each refusal marks the ledger damaged: cleared, so that the
            // next one is the anchor's.)
            let _ = std::fs::remove_file(env.rt().join("needs-verify"));
            let r = env.ckpt(args);
            assert!(
                r.code != 0 && r.stderr.contains("anchors"),
                "cache {state}: {args:?} acted on a re-forged chain: {} {}",
                r.code,
                r.stderr
            );
        }
    }
    assert_eq!(
        crate::common::tree(&env.ws, &[".git", ".agent-runtime"]),
        before
    );
    assert_eq!(env.ckpt(&["verify"]).code, 4);
}
