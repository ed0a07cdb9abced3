//! Calls that never get their after-event (issue 20, items 4 and 5): cut
//! short with their agent gone, rejected by the agent, or interrupted by a
//! signal. What they changed is recorded as theirs, so a rollback covers it;
//! a call whose agent still works is left alone.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::TestEnv;
use crate::hooks::hook;

fn claude(event: &str, call: &str, tool: &str, input: Value) -> Vec<u8> {
    json!({"session_id": "s1", "transcript_path": "/dev/null", "cwd": "/",
           "hook_event_name": event, "tool_name": tool, "tool_input": input,
           "tool_use_id": call})
    .to_string()
    .into_bytes()
}

fn stop(session: &str) -> Vec<u8> {
    json!({"session_id": session, "transcript_path": "/dev/null", "cwd": "/",
           "hook_event_name": "Stop", "stop_hook_active": false})
    .to_string()
    .into_bytes()
}

/// A stand-in for the agent process: alive until killed.
fn agent() -> Child {
    Command::new("sleep")
        .arg("60")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sleep")
}

fn ends(env: &TestEnv, call: &str) -> Vec<Value> {
    env.ckpt(&["--json", "log"]).json()["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "tool_call" && r["call"] == call && r["status"] != "started")
        .cloned()
        .collect()
}

fn patches_of(env: &TestEnv, call: &str) -> Vec<String> {
    env.ckpt(&["--json", "log"]).json()["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "file_patch" && r["call"] == call)
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect()
}

/// ckpt killed inside a shell call's post (at its first write point), then
/// the agent gone: the call's changes are still found from its pre
/// snapshot. Before, the post removed that snapshot as it loaded it, so the
/// close had nothing to compare with: the change stayed nobody's and
/// `rollback --call` left it.
#[test]
fn a_shell_post_killed_midway_leaves_its_snapshot_for_the_close() {
    let env = TestEnv::init();
    env.write("keep.txt", b"mine\n");
    let mut a = agent();
    let pid = a.id().to_string();
    let input = json!({"command": "make gen"});
    let r = hook(
        &env,
        "pre",
        &claude("PreToolUse", "c1", "Bash", input.clone()),
        &[("CKPT_AGENT_PID", &pid)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    env.write("gen.txt", b"generated\n");
    let r = hook(
        &env,
        "post",
        &claude("PostToolUse", "c1", "Bash", input),
        &[("CKPT_AGENT_PID", &pid), ("CKPT_FAILPOINTS", "*=1*abort")],
    );
    assert_ne!(r.code, 0, "the post was killed: {}", r.stderr);
    a.kill().unwrap();
    a.wait().unwrap();
    let r = env.ckpt(&["--json", "recover"]);
    assert!(r.code == 0 || r.code == 5, "{}{}", r.stdout, r.stderr);
    assert_eq!(patches_of(&env, "c1"), ["gen.txt"]);
    let r = env.ckpt(&["rollback", "--call", "c1"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(!env.ws.join("gen.txt").exists());
    assert_eq!(std::fs::read(env.ws.join("keep.txt")).unwrap(), b"mine\n");
}

/// Before: `recover` said "effects unknown" (exit 5) and `rollback --call`
/// found nothing, leaving the file the cut-short command wrote.
#[test]
fn a_shell_call_whose_agent_died_is_recorded_as_its_call_and_rolled_back() {
    let env = TestEnv::init();
    env.write("keep.txt", b"mine\n");
    let mut a = agent();
    let pid = a.id().to_string();
    let pre = claude("PreToolUse", "c1", "Bash", json!({"command": "make gen"}));
    let r = hook(&env, "pre", &pre, &[("CKPT_AGENT_PID", &pid)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The command writes, and no post ever comes.
    env.write("gen.txt", b"generated\n");
    // While the agent lives the call is its own: running, not in doubt.
    let r = env.ckpt(&["--json", "recover"]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let v = r.json();
    let c = v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["call"] == "c1")
        .cloned();
    assert_eq!(c.unwrap()["status"], "running", "{v:#}");
    assert!(ends(&env, "c1").is_empty(), "nothing closed while it runs");
    a.kill().unwrap();
    a.wait().unwrap();
    let st = env.ckpt(&["--json", "status"]).json();
    assert_eq!(st["uncertain_calls"][0]["agent"], "gone", "{st:#}");
    // A rollback first records what the call changed, then takes it out.
    let r = env.ckpt(&["--json", "rollback", "--call", "c1"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("call c1 (Bash) ended without an after-event"),
        "{}",
        r.stderr
    );
    assert!(
        !env.ws.join("gen.txt").exists(),
        "the command's file is rolled back"
    );
    assert_eq!(std::fs::read(env.ws.join("keep.txt")).unwrap(), b"mine\n");
    assert_eq!(patches_of(&env, "c1"), ["gen.txt"]);
    let e = ends(&env, "c1");
    assert_eq!(e.len(), 1);
    assert_eq!(e[0]["status"], "failed");
    assert!(
        e[0]["error"].as_str().unwrap().contains("interrupted"),
        "{e:?}"
    );
    let r = env.ckpt(&["recover"]);
    assert_eq!(r.code, 0, "nothing in doubt any more: {}", r.stdout);
}

/// Before: a call with no after-event stayed "in doubt" forever (Codex
/// fires no post for a rejected patch, Gemini none for a blocked tool), and
/// `recover` asked for a person (exit 5).
#[test]
fn the_end_of_the_turn_closes_calls_that_got_no_after_event() {
    let env = TestEnv::init();
    env.write("a.txt", b"alpha\n");
    env.write("b.txt", b"beta\n");
    let a = env.ws.join("a.txt").to_string_lossy().into_owned();
    // Rejected: an edit that never ran.
    let pre = claude(
        "PreToolUse",
        "e1",
        "Edit",
        json!({"file_path": a, "old_string": "alpha", "new_string": "ALPHA"}),
    );
    assert_eq!(hook(&env, "pre", &pre, &[]).code, 0);
    // A shell call that wrote and was then cut off.
    let pre = claude(
        "PreToolUse",
        "b1",
        "Bash",
        json!({"command": "touch out.txt"}),
    );
    assert_eq!(hook(&env, "pre", &pre, &[]).code, 0);
    env.write("out.txt", b"out\n");
    // Another session's open call is not this turn's.
    let b = env.ws.join("b.txt").to_string_lossy().into_owned();
    let other = json!({"session_id": "s2", "transcript_path": "/dev/null", "cwd": "/",
        "hook_event_name": "PreToolUse", "tool_name": "Write",
        "tool_input": {"file_path": b, "content": "B\n"}, "tool_use_id": "x1"});
    assert_eq!(hook(&env, "pre", other.to_string().as_bytes(), &[]).code, 0);
    let r = hook(&env, "turn-end", &stop("s1"), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("call e1 (Edit)"), "{}", r.stderr);
    let e = ends(&env, "e1");
    assert_eq!(e[0]["status"], "failed");
    assert!(
        e[0]["error"].as_str().unwrap().contains("never ran"),
        "{e:?}"
    );
    assert!(patches_of(&env, "e1").is_empty());
    assert_eq!(patches_of(&env, "b1"), ["out.txt"]);
    assert!(
        ends(&env, "x1").is_empty(),
        "session s2's call is left open"
    );
    // The shell call's change is the agent's: rolled back with the call.
    let r = env.ckpt(&["rollback", "--call", "b1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!env.ws.join("out.txt").exists());
    assert_eq!(std::fs::read(env.ws.join("a.txt")).unwrap(), b"alpha\n");
    // Every event name that ends a turn reaches `turn-end`.
    for (fmt, payload) in [
        (
            "claude",
            json!({"session_id": "s9", "hook_event_name": "SessionEnd", "reason": "exit"}),
        ),
        (
            "gemini",
            json!({"session_id": "s9", "hook_event_name": "AfterAgent", "prompt": "p", "prompt_response": "r"}),
        ),
        (
            "gemini",
            json!({"session_id": "s9", "hook_event_name": "SessionEnd", "reason": "exit"}),
        ),
        (
            "cursor",
            json!({"conversation_id": "s9", "hook_event_name": "stop", "status": "completed"}),
        ),
    ] {
        let r = crate::common::run_with_stdin(
            &env,
            &["hook", "turn-end", "--format", fmt],
            payload.to_string().as_bytes(),
            &[],
        );
        assert_eq!(r.code, 0, "{fmt} {payload}: {}", r.stderr);
    }
}

fn wait_for(path: &std::path::Path) {
    let t = Instant::now();
    while !path.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Before: a SIGTERM (or a SIGINT from `kill`) killed `ckpt exec` at once:
/// no post, and the command's change was later counted as the user's.
#[test]
fn ckpt_exec_passes_a_signal_on_and_records_what_the_command_did() {
    use rustix::process::{Pid, Signal, kill_process};
    for (sig, num, code) in [(Signal::TERM, 15, 143), (Signal::INT, 2, 130)] {
        let env = TestEnv::init();
        let mut child = env
            .command(&[
                "exec",
                "--call",
                "x1",
                "--",
                "sh",
                "-c",
                "echo partial > half.txt; touch started; exec sleep 30",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(&env.ws.join("started"));
        kill_process(Pid::from_raw(child.id() as i32).unwrap(), sig).unwrap();
        let t = Instant::now();
        let status = child.wait().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the command was stopped"
        );
        assert_eq!(status.code(), Some(code), "signal {num}");
        assert_eq!(
            std::fs::read(env.ws.join("half.txt")).unwrap(),
            b"partial\n"
        );
        let e = ends(&env, "x1");
        assert_eq!(e.len(), 1, "the post was recorded (signal {num})");
        assert_eq!(e[0]["status"], "failed");
        assert!(
            e[0]["error"]
                .as_str()
                .unwrap()
                .contains(&format!("signal {num}")),
            "{e:?}"
        );
        let mut p = patches_of(&env, "x1");
        p.sort();
        assert_eq!(p, ["half.txt", "started"]);
    }
}

/// Before: `ckpt exec` killed with SIGKILL left its call open forever and its
/// command's change unrecorded.
#[test]
fn ckpt_exec_killed_outright_is_closed_by_the_next_recover() {
    let env = TestEnv::init();
    let mut child = env
        .command(&[
            "exec",
            "--call",
            "k1",
            "--",
            "sh",
            "-c",
            "echo $$ > pid; echo made > made.txt; exec sleep 30",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&env.ws.join("made.txt"));
    child.kill().unwrap();
    child.wait().unwrap();
    let orphan: i32 = std::fs::read_to_string(env.ws.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(orphan).unwrap(),
        rustix::process::Signal::KILL,
    );
    let r = env.ckpt(&["--json", "recover"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let mut p = patches_of(&env, "k1");
    p.sort();
    assert_eq!(p, ["made.txt", "pid"]);
    let r = env.ckpt(&["rollback", "--call", "k1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!env.ws.join("made.txt").exists());
}

/// Claude Code exports `CLAUDE_PID` to its Bash commands, so a Codex started
/// from one carries it: it names the agent only for Claude Code's payloads.
/// Before: a Codex call was recorded as Claude's, and closed as "gone" when
/// that process ended though its own agent still ran.
#[test]
fn claude_pid_names_only_claude_codes_calls() {
    let env = TestEnv::init();
    let mut claude_proc = agent();
    let pid = claude_proc.id().to_string();
    let pre = json!({"session_id": "s", "turn_id": "t", "transcript_path": "/dev/null",
        "cwd": env.ws, "hook_event_name": "PreToolUse", "model": "gpt-5.5",
        "permission_mode": "bypassPermissions", "tool_name": "Bash",
        "tool_input": {"command": "true"}, "tool_use_id": "cx1"});
    let r = crate::common::run_with_stdin(
        &env,
        &["hook", "pre", "--format", "codex"],
        pre.to_string().as_bytes(),
        // No override: the process is found as a real hook's would be.
        &[("CKPT_AGENT_PID", ""), ("CLAUDE_PID", &pid)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    claude_proc.kill().unwrap();
    claude_proc.wait().unwrap();
    // The hook's own ancestor (this test) still runs: so does the call.
    let v = env.ckpt(&["--json", "recover"]).json();
    let c = v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["call"] == "cx1")
        .cloned();
    assert_eq!(c.unwrap()["status"], "running", "{v:#}");
    assert!(ends(&env, "cx1").is_empty());
}

/// An agent in its own PID namespace (a container): from the host its call
/// runs, from a sibling namespace with its own `/proc` nothing can be told
/// (never "gone": a recover there must not close a running call). Skipped
/// where `unshare` is not allowed.
#[test]
fn an_agent_in_another_pid_namespace_is_never_taken_for_gone() {
    let ok = Command::new("unshare")
        .args(["-p", "-f", "--mount-proc", "--kill-child", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: unshare -p is not allowed here");
        return;
    }
    let env = TestEnv::init();
    let bin = env!("CARGO_BIN_EXE_ckpt");
    let in_new_ns = |args: &[&str]| {
        let mut c = Command::new("unshare");
        c.args(["-p", "-f", "--mount-proc", "--kill-child", bin])
            .args(args)
            .env("CKPT_WORKSPACE", &env.ws)
            .env("HOME", &env.home)
            .current_dir(&env.ws)
            .stdin(Stdio::null());
        c
    };
    let mut agent = in_new_ns(&[
        "exec",
        "--call",
        "n1",
        "--",
        "sh",
        "-c",
        "touch started; exec sleep 30",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    wait_for(&env.ws.join("started"));
    let state = |v: &Value| v["uncertain_calls"][0]["agent"].clone();
    let host = env.ckpt(&["--json", "status"]).json();
    let sibling = in_new_ns(&["--json", "status"]).output().unwrap();
    agent.kill().unwrap();
    agent.wait().unwrap();
    let sibling: Value = serde_json::from_slice(&sibling.stdout).unwrap();
    assert_eq!(
        state(&sibling),
        Value::Null,
        "from a sibling namespace: {sibling:#}"
    );
    // The test process itself may be in a container: then the host view is
    // just as blind.
    let root = std::fs::read_link("/proc/self/ns/pid")
        .is_ok_and(|l| l.to_string_lossy() == "pid:[4026531836]");
    if root {
        assert_eq!(state(&host), "running", "from the root namespace: {host:#}");
    }
}

/// Closing a gone agent's call appends records: never to a ledger that
/// cannot be read whole. Before: the rollback closed the call (appending
/// after the damage) and only then refused.
#[test]
fn a_damaged_ledger_gets_no_closing_records() {
    let env = TestEnv::init();
    let mut a = agent();
    let pid = a.id().to_string();
    let pre = claude("PreToolUse", "c1", "Bash", json!({"command": "make gen"}));
    assert_eq!(hook(&env, "pre", &pre, &[("CKPT_AGENT_PID", &pid)]).code, 0);
    env.write("gen.txt", b"generated\n");
    a.kill().unwrap();
    a.wait().unwrap();
    // Two more records after the call's, then a flipped byte in the middle.
    assert_eq!(env.ckpt(&["checkpoint", "-m", "a"]).code, 0);
    assert_eq!(env.ckpt(&["checkpoint", "-m", "b"]).code, 0);
    let ledger = env.ledger_path();
    let mut bytes = std::fs::read(&ledger).unwrap();
    let second = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
    bytes[second + 30] ^= 0x01;
    let damaged = String::from_utf8(bytes).unwrap();
    std::fs::write(&ledger, &damaged).unwrap();
    let r = env.ckpt(&["rollback", "--call", "c1"]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("damaged"), "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(&ledger).unwrap(),
        damaged,
        "nothing appended"
    );
}

/// Before: Gemini CLI's `SessionEnd` on Ctrl-C closed a shell call whose
/// command still ran; what the command wrote afterwards was nobody's, and
/// `rollback --call` left it. A session's end now leaves such a call to be
/// closed once its agent process is gone, with everything it wrote.
#[test]
fn a_session_end_leaves_a_running_shell_call_for_when_its_agent_is_gone() {
    let env = TestEnv::init();
    let mut a = agent();
    let pid = a.id().to_string();
    let gemini = |event: &str, extra: Value| {
        let mut v = json!({"session_id": "g1", "transcript_path": "/dev/null",
            "cwd": env.ws, "hook_event_name": event, "timestamp": "2026-01-01T00:00:00Z"});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v.to_string().into_bytes()
    };
    let pre = gemini(
        "BeforeTool",
        json!({"tool_name": "run_shell_command", "tool_input": {"command": "sleep 5; make"}}),
    );
    let r = crate::common::run_with_stdin(
        &env,
        &["hook", "pre", "--format", "gemini"],
        &pre,
        &[("CKPT_AGENT_PID", &pid)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    env.write("early.txt", b"before the end\n");
    let end = gemini("SessionEnd", json!({"reason": "exit"}));
    let r = crate::common::run_with_stdin(
        &env,
        &["hook", "turn-end", "--format", "gemini"],
        &end,
        &[("CKPT_AGENT_PID", &pid)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let shell_ends = |env: &TestEnv| {
        env.ckpt(&["--json", "log"]).json()["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                r["kind"] == "tool_call"
                    && r["tool"] == "run_shell_command"
                    && r["status"] != "started"
            })
            .count()
    };
    assert_eq!(shell_ends(&env), 0, "left open at the session's end");
    // The command goes on writing after the session ended; then the agent exits.
    env.write("late.txt", b"after the end\n");
    a.kill().unwrap();
    a.wait().unwrap();
    let r = env.ckpt(&["--json", "recover"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(shell_ends(&env), 1);
    let patched: Vec<String> = env.ckpt(&["--json", "log"]).json()["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "file_patch")
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        patched,
        ["early.txt", "late.txt"],
        "both writes are the call's"
    );
    // A turn's end (AfterAgent) still closes a shell call at once.
    let pre = gemini(
        "BeforeTool",
        json!({"tool_name": "run_shell_command", "tool_input": {"command": "refused"}}),
    );
    let mut b = agent();
    let pid = b.id().to_string();
    let run = |args: &[&str], p: &[u8]| {
        crate::common::run_with_stdin(&env, args, p, &[("CKPT_AGENT_PID", &pid)])
    };
    assert_eq!(run(&["hook", "pre", "--format", "gemini"], &pre).code, 0);
    let after = gemini("AfterAgent", json!({"prompt": "p", "prompt_response": "r"}));
    assert_eq!(
        run(&["hook", "turn-end", "--format", "gemini"], &after).code,
        0
    );
    assert_eq!(shell_ends(&env), 2);
    b.kill().unwrap();
    b.wait().unwrap();
}
