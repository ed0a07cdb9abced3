//! `ckpt compensate`: a call's registered compensation runs at most once, with
//! its idempotency key, directly (no shell of ckpt's making); crashes at each
//! write step never make it run twice without `--force` (RELIABILITY T27); a
//! hand-edited compensation is refused by the chain check (T26); unknown ids,
//! calls without a compensation and dry runs run nothing.
//!
//! The compensations here are the test's own script (`/bin/sh undo.sh COUNTER`),
//! which appends `$CKPT_IDEMPOTENCY_KEY` to a counter file outside the
//! workspace, so every run is counted.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::{Run, TestEnv};
use crate::hooks::hook_ok;

const UNDO_SH: &str = r#"counter="$1"
printf '%s\n' "$CKPT_IDEMPOTENCY_KEY" >> "$counter"
echo "refund reversed for $CKPT_CALL (key $CKPT_IDEMPOTENCY_KEY)"
echo "to stderr" >&2
if [ -n "$2" ] && [ "$(wc -l < "$counter")" -lt "$2" ]; then exit 3; fi
exit 0
"#;

struct Fixture {
    env: TestEnv,
    script: PathBuf,
    counter: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let env = TestEnv::init();
        let script = env.dir.path().join("undo.sh");
        std::fs::write(&script, UNDO_SH).unwrap();
        let counter = env.dir.path().join("counter.txt");
        Fixture {
            env,
            script,
            counter,
        }
    }

    /// The argv of the counting script; `fail_until`: exit 3 until it has
    /// run that many times.
    fn argv(&self, fail_until: Option<u32>) -> Vec<String> {
        let mut v = vec![
            "/bin/sh".to_string(),
            self.script.to_str().unwrap().to_string(),
            self.counter.to_str().unwrap().to_string(),
        ];
        if let Some(n) = fail_until {
            v.push(n.to_string());
        }
        v
    }

    /// Records a generic `refund` call (pre + succeeded post).
    fn call(&self, call: &str, compensation: Option<Value>, side_effects: &[&str]) {
        self.call_tool(call, "refund", compensation, side_effects)
    }

    /// Records a generic call of `tool` (side effects empty: the catalog's).
    fn call_tool(
        &self,
        call: &str,
        tool: &str,
        compensation: Option<Value>,
        side_effects: &[&str],
    ) {
        let mut pre = json!({
            "session": "s1",
            "call": call,
            "tool": tool,
            "input": {"charge": "ch_1"},
            "side_effects": side_effects,
        });
        if let Some(c) = compensation {
            pre["compensation"] = c;
        }
        hook_ok(&self.env, "pre", pre.to_string().as_bytes());
        let post = json!({"session": "s1", "call": call, "status": "succeeded"});
        hook_ok(&self.env, "post", post.to_string().as_bytes());
    }

    fn counting_call(&self, call: &str, key: &str) {
        self.call(
            call,
            Some(json!({"argv": self.argv(None), "idempotency_key": key})),
            &["network"],
        );
    }

    /// The keys the script saw, one per run.
    fn runs(&self) -> Vec<String> {
        match std::fs::read_to_string(&self.counter) {
            Ok(s) => s.lines().map(str::to_string).collect(),
            Err(_) => Vec::new(),
        }
    }

    fn compensate(&self, args: &[&str]) -> Run {
        self.compensate_env(args, &[])
    }

    fn compensate_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut a = vec!["compensate"];
        a.extend_from_slice(args);
        self.env.ckpt_env(&a, env)
    }

    fn ledger(&self) -> Vec<u8> {
        std::fs::read(self.env.ledger_path()).unwrap()
    }

    /// The `compensate` action records, oldest first.
    fn actions(&self) -> Vec<Value> {
        self.env.ckpt(&["log", "--json"]).json()["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["kind"] == "action" && r["type"] == "compensate")
            .cloned()
            .collect()
    }
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn runs_once_with_the_key_and_is_never_run_twice() {
    let f = Fixture::new();
    f.counting_call("call-refund-1", "refund-key-1");
    let r = f.compensate(&["call-refund-1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("compensated call call-refund-1"),
        "{}",
        r.stdout
    );
    assert_eq!(f.runs(), vec!["refund-key-1"]);

    // Recorded: started (with the plan) durably before, then the end.
    let acts = f.actions();
    assert_eq!(acts.len(), 2, "{acts:#?}");
    assert_eq!(acts[0]["status"], "started");
    assert_eq!(acts[0]["target"], json!({"call": "call-refund-1"}));
    assert_eq!(acts[0]["plan"]["argv"], json!(f.argv(None)));
    assert_eq!(acts[0]["plan"]["idempotency_key"], "refund-key-1");
    assert_eq!(acts[1]["status"], "succeeded");
    assert_eq!(acts[1]["action"], acts[0]["action"]);
    assert_eq!(acts[1]["outcome"]["exit_code"], 0);
    let out_ref = acts[1]["outcome"]["output_ref"].as_str().unwrap();
    let out_path = f.env.rt().join(out_ref);
    let out = std::fs::read_to_string(&out_path).unwrap();
    assert!(
        out.contains("refund reversed for call-refund-1 (key refund-key-1)")
            && out.contains("to stderr"),
        "{out}"
    );
    assert_eq!(mode(&out_path), 0o600);
    assert_eq!(mode(out_path.parent().unwrap()), 0o700);

    // Never again: refused, with the action that did it; the script did not run.
    let before = f.ledger();
    let again = f.compensate(&["call-refund-1", "--json"]);
    assert_eq!(again.code, 1);
    let doc = again.json();
    assert_eq!(doc["status"], "already_compensated");
    assert_eq!(doc["previous"], acts[0]["action"]);
    assert!(
        again.stderr.contains("already compensated by act_"),
        "{}",
        again.stderr
    );
    assert!(again.stderr.contains("never run twice"), "{}", again.stderr);
    assert_eq!(again.stderr.lines().count(), 1, "{}", again.stderr);
    // --force does not override a finished compensation.
    assert_eq!(f.compensate(&["call-refund-1", "--force"]).code, 1);
    assert_eq!(f.runs().len(), 1);
    assert_eq!(f.ledger(), before, "a refusal records nothing");
    assert_eq!(f.env.ckpt(&["verify"]).code, 0);
}

#[test]
fn a_config_template_compensates_a_claude_mcp_call() {
    let f = Fixture::new();
    let argv = toml_array(&f.argv(None));
    std::fs::write(
        f.env.rt().join("config.toml"),
        format!(
            "[[tools]]\ntool = \"mcp__stripe__refund\"\nrisk = \"high\"\nidempotency = \"non_idempotent\"\nreplay_policy = \"never\"\nside_effects = [\"network\"]\ncompensation = {{ argv = {argv} }}\n\n[[tools]]\ntool = \"*\"\nside_effects = [\"fs\"]\n"
        ),
    )
    .unwrap();
    let ws = f.env.ws.to_str().unwrap();
    let payload = |event: &str| {
        let mut p = json!({
            "session_id": "sess-1",
            "transcript_path": "/tmp/t.jsonl",
            "cwd": ws,
            "hook_event_name": event,
            "tool_name": "mcp__stripe__refund",
            "tool_input": {"charge": "ch_42", "amount": 500},
            "tool_use_id": "toolu_refund_1",
        });
        if event == "PostToolUse" {
            p["tool_response"] = json!({"refund": "re_1"});
        }
        p.to_string()
    };
    hook_ok(&f.env, "pre", payload("PreToolUse").as_bytes());
    hook_ok(&f.env, "post", payload("PostToolUse").as_bytes());
    let r = f.compensate(&["toolu_refund_1", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json();
    assert_eq!(doc["call"], "toolu_refund_1");
    assert_eq!(doc["status"], "succeeded");
    assert_eq!(doc["exit_code"], 0);
    assert!(doc["action"].as_str().unwrap().starts_with("act_"));
    assert!(
        doc["output_ref"]
            .as_str()
            .unwrap()
            .starts_with("artifacts/outputs/act_")
    );
    // The template names no key: one stable per call is made up.
    assert_eq!(f.runs(), vec!["ckpt-compensate-toolu_refund_1"]);
}

fn toml_array(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(", "))
}

#[test]
fn t27_crash_after_exec_is_uncertain_and_only_force_runs_it_again_with_the_same_key() {
    let f = Fixture::new();
    f.counting_call("call-1", "key-1");
    let r = f.compensate_env(
        &["call-1"],
        &[("CKPT_FAILPOINTS", "compensate.after_exec=abort")],
    );
    assert_ne!(r.code, 0, "the failpoint aborts");
    assert_eq!(f.runs(), vec!["key-1"], "it ran once before the crash");

    let r = f.compensate(&["call-1", "--json"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.json()["status"], "uncertain");
    assert!(
        r.stderr.contains("uncertain") && r.stderr.contains("--force"),
        "{}",
        r.stderr
    );
    assert_eq!(f.runs().len(), 1, "not re-run without --force");

    let r = f.compensate(&["call-1", "--force", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json();
    assert_eq!(doc["status"], "succeeded");
    assert_eq!(doc["forced_over"].as_array().unwrap().len(), 1);
    assert_eq!(f.runs(), vec!["key-1", "key-1"], "same key both times");
    let acts = f.actions();
    let forced = acts
        .iter()
        .find(|a| a["status"] == "started" && a["plan"]["forced"] == true)
        .expect("the forced run says so in its plan");
    assert_eq!(forced["plan"]["idempotency_key"], "key-1");

    // Now it finished: never again, not even with --force.
    assert_eq!(f.compensate(&["call-1", "--force"]).code, 1);
    assert_eq!(f.runs().len(), 2);
}

#[test]
fn t27_crash_before_exec_never_ran_but_ckpt_cannot_know_so_it_is_uncertain() {
    let f = Fixture::new();
    f.counting_call("call-1", "key-1");
    let r = f.compensate_env(
        &["call-1"],
        &[("CKPT_FAILPOINTS", "compensate.before_exec=abort")],
    );
    assert_ne!(r.code, 0);
    assert!(f.runs().is_empty(), "the crash came before the exec");
    // The ledger looks exactly as after a crash right after the exec: the
    // started record without an end. ckpt cannot tell the two apart, so it
    // refuses to guess.
    let r = f.compensate(&["call-1"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("uncertain"), "{}", r.stderr);
    assert!(f.runs().is_empty());
    let r = f.compensate(&["call-1", "--force"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(f.runs(), vec!["key-1"]);
}

/// T27 over every write step: after a crash there, the script has run at most
/// once; a plain compensate runs it only when nothing was recorded yet; and
/// after a finished run nothing runs it again.
#[test]
fn t27_a_crash_at_each_write_step_never_runs_a_compensation_twice() {
    // (failpoint, runs before the crash, what a plain compensate then says)
    let cases: &[(&str, usize, &str)] = &[
        ("compensate.before_started=abort", 0, "succeeded"),
        ("ledger.after_lock=1*abort", 0, "succeeded"),
        ("ledger.before_fdatasync=1*abort", 0, "uncertain"),
        ("ledger.after_fdatasync=1*abort", 0, "uncertain"),
        ("compensate.before_exec=abort", 0, "uncertain"),
        ("compensate.after_exec=abort", 1, "uncertain"),
        ("ledger.after_lock=2*abort", 1, "uncertain"),
        ("ledger.before_fdatasync=2*abort", 1, "already_compensated"),
        ("ledger.after_fdatasync=2*abort", 1, "already_compensated"),
    ];
    for (fp, ran, then) in cases {
        let f = Fixture::new();
        f.counting_call("call-1", "key-1");
        let r = f.compensate_env(&["call-1"], &[("CKPT_FAILPOINTS", fp)]);
        assert_ne!(r.code, 0, "{fp}: the failpoint aborts ({})", r.stderr);
        assert_eq!(f.runs().len(), *ran, "{fp}: runs before the crash");
        assert_eq!(f.env.ckpt(&["verify"]).code, 0, "{fp}: the ledger verifies");

        let r = f.compensate(&["call-1", "--json"]);
        assert_eq!(r.json()["status"], *then, "{fp}: {}", r.stderr);
        let after_plain = f.runs().len();
        match *then {
            "succeeded" => assert_eq!(after_plain, 1, "{fp}"),
            _ => assert_eq!(after_plain, *ran, "{fp}: a plain compensate ran nothing"),
        }
        if *then == "uncertain" {
            let r = f.compensate(&["call-1", "--force"]);
            assert_eq!(r.code, 0, "{fp}: {}", r.stderr);
            assert_eq!(f.runs().len(), ran + 1, "{fp}: --force runs it once more");
        }
        // Finished now: whatever happened, nothing runs it again.
        let n = f.runs().len();
        assert_eq!(f.compensate(&["call-1"]).code, 1, "{fp}");
        assert_eq!(f.compensate(&["call-1", "--force"]).code, 1, "{fp}");
        assert_eq!(f.runs().len(), n, "{fp}");
        assert!(f.runs().iter().all(|k| k == "key-1"), "{fp}: one key");
    }
}

#[test]
fn a_failed_compensation_may_be_retried_with_the_same_key() {
    let f = Fixture::new();
    f.call(
        "call-1",
        Some(json!({"argv": f.argv(Some(2)), "idempotency_key": "k"})),
        &["network"],
    );
    let r = f.compensate(&["call-1", "--json"]);
    assert_eq!(r.code, 1);
    let doc = r.json();
    assert_eq!(doc["status"], "failed");
    assert_eq!(doc["exit_code"], 3);
    let first = doc["action"].as_str().unwrap().to_string();
    assert!(r.stderr.contains("exited with 3"), "{}", r.stderr);

    let r = f.compensate(&["call-1", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json();
    assert_eq!(doc["status"], "succeeded");
    assert_eq!(doc["retry_of"], first.as_str());
    assert_eq!(f.runs(), vec!["k", "k"]);
    assert_eq!(f.compensate(&["call-1"]).code, 1);
    assert_eq!(f.runs().len(), 2);
}

#[test]
fn a_program_that_cannot_start_is_recorded_as_failed() {
    let f = Fixture::new();
    f.call(
        "call-1",
        Some(json!({"argv": ["/nonexistent/undo-refund", "x"]})),
        &["network"],
    );
    let r = f.compensate(&["call-1", "--json"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.json()["status"], "failed");
    assert!(r.stderr.contains("cannot start"), "{}", r.stderr);
    let acts = f.actions();
    assert_eq!(acts.len(), 2);
    assert_eq!(acts[1]["status"], "failed");
    assert!(
        acts[1]["outcome"]["error"]
            .as_str()
            .unwrap()
            .contains("cannot start")
    );
}

/// T26: the compensation's argv edited in the ledger by hand (to a shell
/// command) breaks the chain: refused before anything runs.
#[test]
fn t26_a_hand_edited_compensation_is_refused_by_the_chain_check() {
    let f = Fixture::new();
    f.counting_call("call-1", "key-1");
    let ledger = String::from_utf8(f.ledger()).unwrap();
    let original = serde_json::to_string(&f.argv(None)).unwrap();
    assert!(
        ledger.contains(&original),
        "argv is in the ledger as written"
    );
    let evil = ledger.replace(&original, r#"["/bin/sh","-c","touch PWNED"]"#);
    std::fs::write(f.env.ledger_path(), &evil).unwrap();

    let r = f.compensate(&["call-1"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("damaged at seq"), "{}", r.stderr);
    assert!(r.stderr.contains("ckpt verify"), "{}", r.stderr);
    assert!(
        !f.env.ws.join("PWNED").exists(),
        "the edited command never ran"
    );
    assert!(f.runs().is_empty());
    assert_eq!(f.ledger(), evil.as_bytes(), "nothing appended");
}

/// T26 with the chain recomputed after the edit: the `ledger.head` anchor
/// still names the old last hash. (An attacker who also rewrites
/// `ledger.head` is not caught: tamper-evident, not tamper-proof.)
#[test]
fn t26_an_edit_with_a_recomputed_chain_is_caught_by_the_head_anchor() {
    let f = Fixture::new();
    f.counting_call("call-1", "key-1");
    let ledger = String::from_utf8(f.ledger()).unwrap();
    let original = serde_json::to_string(&f.argv(None)).unwrap();
    let evil = rechain(&ledger.replace(&original, r#"["/bin/sh","-c","touch PWNED"]"#));
    std::fs::write(f.env.ledger_path(), &evil).unwrap();
    // The chain itself is consistent again.
    assert!(f.env.open().read_ledger().unwrap().corruption.is_none());

    let r = f.compensate(&["call-1"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("ledger.head"), "{}", r.stderr);
    assert!(!f.env.ws.join("PWNED").exists());
}

/// Recomputes every `prev` and `hash` (the recipe of ARCHITECTURE.md).
fn rechain(ledger: &str) -> String {
    let mut out = String::new();
    let mut prev: Option<String> = None;
    for line in ledger.lines() {
        let cut = line.rfind(",\"prev\":").unwrap();
        let body = format!(
            "{},\"prev\":{}}}",
            &line[..cut],
            prev.as_ref()
                .map(|p| format!("{p:?}"))
                .unwrap_or_else(|| "null".into())
        );
        let hash = ckpt::ContentHash::of(body.as_bytes()).to_string();
        out.push_str(&body[..body.len() - 1]);
        out.push_str(&format!(",\"hash\":\"{hash}\"}}\n"));
        prev = Some(hash);
    }
    out
}

#[test]
fn a_ledger_cut_back_behind_its_head_is_refused() {
    let f = Fixture::new();
    f.counting_call("call-1", "key-1");
    let ledger = f.ledger();
    // Drop the last record (the post): a clean, valid, shorter prefix.
    let body = &ledger[..ledger.len() - 1];
    let cut = body.iter().rposition(|&b| b == b'\n').unwrap() + 1;
    std::fs::write(f.env.ledger_path(), &ledger[..cut]).unwrap();
    let r = f.compensate(&["call-1"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("ledger_truncated"), "{}", r.stderr);
    assert!(f.runs().is_empty());
}

#[test]
fn shell_metacharacters_are_one_literal_argument() {
    let f = Fixture::new();
    f.env.write("victim/keep.txt", b"precious\n");
    f.call(
        "call-1",
        Some(
            json!({"argv": ["/bin/echo", "x; rm -rf victim", "$(touch PWNED)", "`touch PWNED2`"]}),
        ),
        &["network"],
    );
    let r = f.compensate(&["call-1", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json();
    let out =
        std::fs::read_to_string(f.env.rt().join(doc["output_ref"].as_str().unwrap())).unwrap();
    assert_eq!(out, "x; rm -rf victim $(touch PWNED) `touch PWNED2`\n");
    assert_eq!(
        std::fs::read(f.env.ws.join("victim/keep.txt")).unwrap(),
        b"precious\n"
    );
    assert!(!f.env.ws.join("PWNED").exists());
    assert!(!f.env.ws.join("PWNED2").exists());
}

#[test]
fn unknown_ids_are_refused() {
    let f = Fixture::new();
    f.counting_call("call-1", "key-1");
    let before = f.ledger();
    for id in ["call-nope", "act_0000000000000", "; rm -rf /", ""] {
        let r = f.compensate(&[id]);
        assert_eq!(r.code, 1, "{id:?}: {}", r.stderr);
        assert!(r.stderr.contains("is not a"), "{id:?}: {}", r.stderr);
    }
    assert_eq!(f.ledger(), before);
    assert!(f.runs().is_empty());
}

#[test]
fn side_effects_without_a_compensation_get_a_one_line_refusal() {
    let f = Fixture::new();
    f.call("call-net", None, &["network"]);
    let before = f.ledger();
    let r = f.compensate(&["call-net"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("refund"), "names the tool: {}", r.stderr);
    assert!(
        r.stderr.contains("[network]"),
        "names its side effects: {}",
        r.stderr
    );
    assert!(
        r.stderr.contains("can't be undone automatically"),
        "{}",
        r.stderr
    );
    assert_eq!(
        f.compensate(&["call-net", "--json"]).json()["status"],
        "no_compensation"
    );
    assert_eq!(f.ledger(), before);

    // A Claude MCP call classified by the default catalog.
    let ws = f.env.ws.to_str().unwrap();
    let pre = json!({"session_id": "s", "cwd": ws, "hook_event_name": "PreToolUse",
        "tool_name": "mcp__github__create_issue", "tool_input": {"title": "t"},
        "tool_use_id": "toolu_gh_1"});
    hook_ok(&f.env, "pre", pre.to_string().as_bytes());
    let r = f.compensate(&["toolu_gh_1"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("mcp__github__create_issue"),
        "{}",
        r.stderr
    );

    // No side effects at all (the catalog's `Read`): nothing to compensate.
    f.call_tool("call-pure", "Read", None, &[]);
    let r = f.compensate(&["call-pure", "--json"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.json()["status"], "nothing_to_compensate");
}

#[test]
fn a_dry_run_runs_nothing_and_appends_nothing() {
    let f = Fixture::new();
    f.counting_call("call-1", "key-1");
    let before = f.ledger();
    let r = f.compensate(&["call-1", "--dry-run"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("dry run"), "{}", r.stdout);
    assert!(
        r.stdout.contains("CKPT_IDEMPOTENCY_KEY=key-1"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(f.script.to_str().unwrap()),
        "{}",
        r.stdout
    );
    let doc = f.compensate(&["call-1", "--dry-run", "--json"]).json();
    assert_eq!(doc["status"], "dry_run");
    assert_eq!(doc["argv"], json!(f.argv(None)));
    assert!(f.runs().is_empty());
    assert_eq!(f.ledger(), before, "ledger bytes identical");
    let outputs = f.env.rt().join("artifacts/outputs");
    assert!(
        !outputs.exists() || std::fs::read_dir(&outputs).unwrap().next().is_none(),
        "no output file"
    );
}
