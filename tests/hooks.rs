//! `ckpt hook` driven with the fixtures in testdata/hooks: every file-tool case of
//! every format records started → one patch per changed file (hashes right, the
//! diff reapplies with `git apply` to the exact after bytes) → succeeded;
//! invalid payloads exit 1 and record nothing; refused targets exit 2.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use ckpt::ContentHash;
use ckpt::capture::{self, Expected, Phase, TargetRole};

use crate::common::{Run, TestEnv};

fn fixture(env: &TestEnv, rel: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/hooks")
        .join(rel);
    let raw = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let ws = env.ws.to_str().unwrap().as_bytes();
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i..].starts_with(b"$WS") {
            out.extend_from_slice(ws);
            i += 3;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    out
}

pub fn hook(env: &TestEnv, phase: &str, payload: &[u8], extra_env: &[(&str, &str)]) -> Run {
    crate::common::run_with_stdin(env, &["hook", phase], payload, extra_env)
}

/// Runs a hook that must succeed.
pub fn hook_ok(env: &TestEnv, phase: &str, payload: &[u8]) {
    let r = hook(env, phase, payload, &[]);
    assert_eq!(r.code, 0, "ckpt hook {phase} failed: {}", r.stderr);
}

fn records(env: &TestEnv) -> Vec<serde_json::Value> {
    if !env.ledger_path().exists() {
        return Vec::new();
    }
    env.ckpt(&["log", "--json"]).json()["records"]
        .as_array()
        .unwrap()
        .clone()
}

fn sha(b: &[u8]) -> String {
    ContentHash::of(b).to_string()
}

/// The bytes a target must hold before the call so the tool input applies.
fn setup_before(
    exp: Option<&Expected>,
    original: Option<&capture::OriginalFile>,
    role: TargetRole,
) -> Option<String> {
    if let Some(o) = original {
        return match o {
            capture::OriginalFile::Absent => None,
            capture::OriginalFile::Text(t) => Some(t.clone()),
        };
    }
    match (role, exp) {
        (TargetRole::MoveTo, _) => None,
        (_, Some(Expected::Content(_))) => None,
        (_, Some(Expected::Edits(edits))) => {
            let mut s = String::new();
            for e in edits {
                s.push_str(&e.old);
                s.push('\n');
            }
            Some(s)
        }
        (_, Some(Expected::Patch(chunks))) => {
            let mut s = String::new();
            for c in chunks {
                for l in &c.old {
                    s.push_str(l);
                    s.push('\n');
                }
            }
            Some(s)
        }
        (TargetRole::Delete, None) => Some("to be deleted\n".into()),
        _ => Some("before the tool\n".into()),
    }
}

/// Runs pre → (the tool's change) → post for one case and checks the ledger.
fn file_tool_case(dir: &str, case: &str) {
    let env = TestEnv::new();
    let pre = fixture(&env, &format!("{dir}/{case}.pre.json"));
    let post = fixture(&env, &format!("{dir}/{case}.post.json"));
    let pre_ev = capture::parse(&pre, Phase::Pre, None).unwrap();
    let post_ev = capture::parse(&post, Phase::Post, None).unwrap();
    assert_eq!(pre_ev.capture, capture::Capture::Declared, "{dir}/{case}");
    let ws = ckpt::Workspace::init(&env.ws, Default::default())
        .unwrap()
        .0;
    let base = pre_ev
        .cwd
        .as_deref()
        .and_then(|c| ws.rel_path(c.as_bytes(), None).ok());
    let mut plan = Vec::new();
    for t in &pre_ev.targets {
        let rel = ws.rel_path(t.path.as_bytes(), base.as_ref()).unwrap();
        let before = setup_before(t.expected.as_ref(), post_ev.original_file.as_ref(), t.role);
        if let Some(b) = &before {
            env.write(rel.to_str().unwrap(), b.as_bytes());
        }
        plan.push((rel, t.role, t.expected.clone(), before));
    }
    drop(ws);
    let r = hook(&env, "pre", &pre, &[]);
    assert_eq!(r.code, 0, "{dir}/{case} pre: {}", r.stderr);
    assert!(
        r.stdout.is_empty() && r.stderr.is_empty(),
        "hooks are silent on success: {}{}",
        r.stdout,
        r.stderr
    );
    // The tool's change.
    let moved_from = plan
        .iter()
        .find(|p| p.1 == TargetRole::MoveFrom)
        .and_then(|p| p.3.clone());
    let mut expect: Vec<(String, Option<String>, Option<String>)> = Vec::new();
    for (rel, role, exp, before) in &plan {
        let path = env.ws.join(rel.to_str().unwrap());
        let after: Option<String> = match role {
            TargetRole::Delete | TargetRole::MoveFrom => None,
            TargetRole::MoveTo => {
                let src = moved_from.clone().unwrap_or_default();
                Some(
                    exp.as_ref()
                        .and_then(|e| capture::apply_expected(&src, e))
                        .unwrap_or(src),
                )
            }
            TargetRole::Write => Some(match exp {
                Some(e) => capture::apply_expected(before.as_deref().unwrap_or(""), e)
                    .unwrap_or_else(|| {
                        panic!("{dir}/{case}: the input does not apply to the setup")
                    }),
                None => "written by the tool\n".into(),
            }),
        };
        match &after {
            Some(a) => {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, a).unwrap();
            }
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
        expect.push((rel.to_str().unwrap().to_string(), before.clone(), after));
    }
    let r = hook(&env, "post", &post, &[]);
    assert_eq!(r.code, 0, "{dir}/{case} post: {}", r.stderr);

    let recs = records(&env);
    let started = &recs[0];
    assert_eq!(started["kind"], "tool_call");
    assert_eq!(started["status"], "started", "{dir}/{case}");
    assert_eq!(
        started["call"],
        recs.last().unwrap()["call"],
        "pre and post pair"
    );
    assert_eq!(recs.last().unwrap()["status"], "succeeded", "{dir}/{case}");
    let patches: Vec<&serde_json::Value> =
        recs.iter().filter(|r| r["kind"] == "file_patch").collect();
    let changed: Vec<_> = expect.iter().filter(|(_, b, a)| b != a).collect();
    assert_eq!(
        patches.len(),
        changed.len(),
        "{dir}/{case}: one patch per changed file: {recs:#?}"
    );
    for (path, before, after) in changed {
        let p = patches
            .iter()
            .find(|p| p["path"] == path.as_str())
            .unwrap_or_else(|| panic!("{dir}/{case}: no patch for {path}"));
        let bh = before.as_ref().map(|b| sha(b.as_bytes()));
        let ah = after.as_ref().map(|a| sha(a.as_bytes()));
        assert_eq!(
            p["before_hash"].as_str().map(str::to_string),
            bh,
            "{dir}/{case} {path} before"
        );
        assert_eq!(
            p["after_hash"].as_str().map(str::to_string),
            ah,
            "{dir}/{case} {path} after"
        );
        assert_eq!(p["source"], "edit_tool");
        git_apply_reproduces(
            &env,
            p,
            before.as_deref(),
            after.as_deref(),
            &format!("{dir}/{case}"),
        );
    }
    assert_eq!(env.ckpt(&["verify"]).code, 0, "{dir}/{case}");
}

/// Applies a recorded patch with `git apply` to the before bytes and checks the
/// result is byte-identical to the after bytes.
pub fn git_apply_reproduces(
    env: &TestEnv,
    patch: &serde_json::Value,
    before: Option<&str>,
    after: Option<&str>,
    what: &str,
) {
    if std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED git apply check: git is not installed");
        return;
    }
    let path = patch["path"].as_str().unwrap();
    let mut diff = std::fs::read(env.rt().join(patch["patch_ref"].as_str().unwrap())).unwrap();
    if patch["binary"] == true {
        // A binary file's artifact is git's summary (the bytes are in the
        // blob store); `ckpt show --binary` renders the patch git applies.
        let text = String::from_utf8_lossy(&diff);
        assert!(text.contains("\nBinary files "), "{what}: {text}");
        let id = patch["patch"].as_str().unwrap();
        let r = env.ckpt(&["show", id, "--binary", "--json"]);
        diff = r.json()["diffs"][id].as_str().unwrap().as_bytes().to_vec();
        assert!(String::from_utf8_lossy(&diff).contains("GIT binary patch"));
    }
    let got = crate::common::git_apply(env, &diff, path, before.map(str::as_bytes), what);
    assert_eq!(
        got.as_deref(),
        after.map(str::as_bytes),
        "{what}: git apply gives the after bytes"
    );
}

#[test]
fn claude_file_tools_record_patches_that_reapply() {
    for case in [
        "write_create",
        "write_update",
        "edit",
        "multiedit",
        "notebook_edit",
        "crlf",
        "binary_content",
        "relative_path",
        "relative_subdir",
        "extra_fields",
    ] {
        file_tool_case("claude", case);
    }
}

#[test]
fn other_agents_file_tools_record_patches_that_reapply() {
    for (dir, case) in [
        ("gemini", "write_file"),
        ("gemini", "replace"),
        ("generic", "write"),
        ("codex", "apply_patch"),
        ("codex", "apply_patch_move"),
    ] {
        file_tool_case(dir, case);
    }
}

#[test]
fn non_file_tools_record_their_lifecycle() {
    for (dir, case, post_kind, status) in [
        ("claude", "bash", "post", "succeeded"),
        ("claude", "read", "post", "succeeded"),
        ("claude", "mcp_github", "post", "succeeded"),
        ("claude", "bash_fail", "failure", "failed"),
        ("gemini", "run_shell_command", "post", "succeeded"),
        ("gemini", "shell_fail", "post", "failed"),
        ("generic", "deploy", "post", "succeeded"),
        ("generic", "build_fail", "post", "failed"),
        ("cursor", "shell", "post", "succeeded"),
    ] {
        let env = TestEnv::new();
        let phase = if post_kind == "failure" {
            "post-failure"
        } else {
            "post"
        };
        assert_eq!(
            hook(
                &env,
                "pre",
                &fixture(&env, &format!("{dir}/{case}.pre.json")),
                &[]
            )
            .code,
            0,
            "{dir}/{case}"
        );
        let r = hook(
            &env,
            phase,
            &fixture(&env, &format!("{dir}/{case}.{post_kind}.json")),
            &[],
        );
        assert_eq!(r.code, 0, "{dir}/{case}: {}", r.stderr);
        let recs = records(&env);
        if case == "read" {
            // A read-only call: one record, at its end (issue 20).
            assert_eq!(recs.len(), 1, "{dir}/{case}: {recs:#?}");
            assert_eq!(
                (
                    &recs[0]["status"],
                    &recs[0]["step"],
                    &recs[0]["idempotency"]
                ),
                (
                    &serde_json::json!(status),
                    &serde_json::json!(1),
                    &serde_json::json!("idempotent")
                ),
                "{dir}/{case}"
            );
            assert!(r.stderr.is_empty(), "{dir}/{case}: {}", r.stderr);
            continue;
        }
        assert_eq!(recs.len(), 2, "{dir}/{case}: {recs:#?}");
        assert_eq!(recs[0]["status"], "started");
        assert_eq!(recs[1]["status"], status, "{dir}/{case}");
        assert_eq!(
            recs[0]["call"], recs[1]["call"],
            "{dir}/{case}: pre and post pair"
        );
        if status == "failed" {
            assert!(
                recs[1]["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{dir}/{case}: the error is kept"
            );
        }
    }
}

#[test]
fn the_catalog_classifies_calls_and_compensations_are_kept() {
    let env = TestEnv::new();
    hook(&env, "pre", &fixture(&env, "claude/bash.pre.json"), &[]);
    hook(&env, "pre", &fixture(&env, "claude/read.pre.json"), &[]);
    hook(&env, "post", &fixture(&env, "claude/read.post.json"), &[]);
    hook(
        &env,
        "pre",
        &fixture(&env, "claude/mcp_github.pre.json"),
        &[],
    );
    hook(&env, "pre", &fixture(&env, "generic/deploy.pre.json"), &[]);
    let recs = records(&env);
    assert_eq!(
        (
            recs[0]["idempotency"].as_str(),
            recs[0]["replay_policy"].as_str()
        ),
        (Some("non_idempotent"), Some("ask"))
    );
    assert_eq!(
        (
            recs[1]["idempotency"].as_str(),
            recs[1]["replay_policy"].as_str()
        ),
        (Some("idempotent"), Some("auto"))
    );
    assert_eq!(recs[2]["side_effects"], serde_json::json!(["network"]));
    assert_eq!(
        recs[3]["compensation"]["argv"][0],
        "./scripts/undo-deploy.sh"
    );
    assert_eq!(recs[3]["compensation"]["idempotency_key"], "deploy-42");
}

#[test]
fn invalid_payloads_exit_1_and_record_nothing() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hooks/invalid");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        for phase in ["pre", "post"] {
            let env = TestEnv::init();
            let t = std::time::Instant::now();
            let r = hook(&env, phase, &fixture(&env, &format!("invalid/{name}")), &[]);
            assert_eq!(r.code, 1, "{name} ({phase}): {}", r.stderr);
            assert!(
                t.elapsed() < std::time::Duration::from_secs(2),
                "{name}: within a second or so"
            );
            assert_eq!(
                r.stderr.lines().count(),
                1,
                "{name}: one line: {}",
                r.stderr
            );
            assert!(records(&env).is_empty(), "{name}: nothing recorded");
            let errors = std::fs::read_to_string(env.rt().join("errors.jsonl")).unwrap_or_default();
            let last: serde_json::Value =
                serde_json::from_str(errors.lines().last().expect("the refusal is logged"))
                    .unwrap();
            assert!(
                last["code"].as_str().unwrap().starts_with("hook_input_"),
                "{name}: {last}"
            );
            assert!(
                last["sha256"].as_str().unwrap().starts_with("sha256:"),
                "{name}: logged by hash, not content"
            );
            n += 1;
        }
    }
    assert!(n >= 20);
}

#[test]
fn oversized_and_stalled_stdin_exit_1_quickly() {
    let env = TestEnv::init();
    let big = vec![b' '; 17 * 1024 * 1024];
    let t = std::time::Instant::now();
    let r = hook(&env, "pre", &big, &[]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("larger than"), "{}", r.stderr);
    assert!(t.elapsed() < std::time::Duration::from_secs(5));

    // A writer that never closes stdin.
    let mut c = env.command(&["hook", "pre"]);
    c.env("CKPT_HOOK_STDIN_TIMEOUT_MS", "300");
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"{\"session_id\":").unwrap();
    let t = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    assert_eq!(out.status.code(), Some(1));
    assert!(t.elapsed() < std::time::Duration::from_secs(3));
    assert!(records(&env).is_empty());

    // Stdin redirected from a regular file (read without a watchdog thread):
    // capped the same way, and a payload in a file is recorded as from a pipe.
    let file_stdin = |bytes: &[u8]| {
        let p = env.dir.path().join("stdin.json");
        std::fs::write(&p, bytes).unwrap();
        let mut c = env.command(&["hook", "pre"]);
        c.stdin(std::fs::File::open(&p).unwrap());
        c.output().unwrap()
    };
    let out = file_stdin(&big);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("larger than"));
    assert!(records(&env).is_empty());
    let out = file_stdin(&fixture(&env, "claude/write_create.pre.json"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(records(&env).len(), 1);
}

#[test]
fn refused_targets_block_in_block_mode_and_warn_in_warn_mode() {
    for case in ["outside_abs", "outside_dotdot", "git_hook", "nul_path"] {
        let env = TestEnv::init();
        let r = hook(
            &env,
            "pre",
            &fixture(&env, &format!("claude/{case}.pre.json")),
            &[],
        );
        assert_eq!(r.code, 2, "{case}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{case}");
        assert!(r.stderr.contains("E_PATH_"), "{case}: {}", r.stderr);
        assert!(records(&env).is_empty(), "{case}");
        let errors = std::fs::read_to_string(env.rt().join("errors.jsonl")).unwrap();
        assert!(errors.contains("\"code\":\"E_PATH_"), "{case}: {errors}");
        std::fs::write(
            env.rt().join("config.toml"),
            "on_record_failure = \"warn\"\n",
        )
        .unwrap();
        let r = hook(
            &env,
            "pre",
            &fixture(&env, &format!("claude/{case}.pre.json")),
            &[],
        );
        assert_eq!(r.code, 0, "{case} in warn mode: {}", r.stderr);
        assert!(r.stderr.contains("warning"), "{case}: {}", r.stderr);
    }
    // The agent writing ckpt's own data is refused whatever the mode.
    let env = TestEnv::init();
    std::fs::write(
        env.rt().join("config.toml"),
        "on_record_failure = \"warn\"\n",
    )
    .unwrap();
    let r = hook(
        &env,
        "pre",
        &fixture(&env, "claude/runtime_ledger.pre.json"),
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains(".agent-runtime"));
}

/// The agent's Write call creating `src/new.rs`, through both hooks; returns
/// what it wrote.
fn agent_writes_new_rs(env: &TestEnv) -> String {
    let content = agent_writes_new_rs_before_post(env);
    hook_ok(env, "post", &fixture(env, "claude/write_create.post.json"));
    content
}

/// The Write fixture's content (`phase`'s payload holds it).
fn write_create_content(env: &TestEnv, phase: Phase) -> String {
    let name = match phase {
        Phase::Pre => "claude/write_create.pre.json",
        _ => "claude/write_create.post.json",
    };
    let ev = capture::parse(&fixture(env, name), phase, None).unwrap();
    let Some(Expected::Content(content)) = ev.targets[0].expected.clone() else {
        panic!()
    };
    content
}

/// [`agent_writes_new_rs`] up to the post hook (the file is written).
fn agent_writes_new_rs_before_post(env: &TestEnv) -> String {
    let content = write_create_content(env, Phase::Pre);
    hook_ok(env, "pre", &fixture(env, "claude/write_create.pre.json"));
    env.write("src/new.rs", content.as_bytes());
    content
}

/// The user edits the agent's `src/new.rs`, then the agent makes another
/// call: exactly one `user_edit` from `content` to the user's bytes is
/// recorded. Returns the user's bytes.
fn user_edits_new_rs_then_agent_calls(env: &TestEnv, content: &str) -> String {
    let mine = format!("{content}// mine\n");
    env.write("src/new.rs", mine.as_bytes());
    hook_ok(env, "pre", &fixture(env, "claude/bash.pre.json"));
    let recs = records(env);
    let ue: Vec<_> = recs.iter().filter(|r| r["kind"] == "user_edit").collect();
    assert_eq!(ue.len(), 1, "{recs:#?}");
    assert_eq!(ue[0]["path"], "src/new.rs");
    assert_eq!(ue[0]["before_hash"], sha(content.as_bytes()));
    assert_eq!(ue[0]["after_hash"], sha(mine.as_bytes()));
    mine
}

#[test]
fn user_edits_to_agent_files_are_recorded_before_the_next_call() {
    let env = TestEnv::new();
    let content = agent_writes_new_rs(&env);
    let mine = user_edits_new_rs_then_agent_calls(&env, &content);
    // Both contents are kept in the store.
    let ws = env.open();
    for h in [sha(content.as_bytes()), sha(mine.as_bytes())] {
        assert!(ws.blobs().get(&h.parse().unwrap()).is_ok());
    }
    // Not reported twice.
    hook_ok(
        &env,
        "prompt",
        &fixture(&env, "claude/user_prompt.prompt.json"),
    );
    assert_eq!(
        records(&env)
            .iter()
            .filter(|r| r["kind"] == "user_edit")
            .count(),
        1
    );
}

#[test]
fn a_file_rewritten_with_the_same_bytes_is_read_once_not_at_every_call() {
    // Its stat figures move, its content does not: no user edit, and the
    // registry keeps the new figures so later calls trust them again.
    let env = TestEnv::new();
    let content = agent_writes_new_rs(&env);
    let reg = env.rt().join("state/agent_files.bin");
    let before = std::fs::read(&reg).unwrap();
    // Past the kernel's timestamp tick, so the rewrite gets new times.
    std::thread::sleep(std::time::Duration::from_millis(25));
    env.write("src/new.rs", content.as_bytes());
    hook_ok(&env, "pre", &fixture(&env, "claude/bash.pre.json"));
    let refreshed = std::fs::read(&reg).unwrap();
    assert_ne!(refreshed, before, "the new stat figures are kept");
    hook_ok(
        &env,
        "prompt",
        &fixture(&env, "claude/user_prompt.prompt.json"),
    );
    assert_eq!(
        std::fs::read(&reg).unwrap(),
        refreshed,
        "nothing to refresh"
    );
    assert!(
        !records(&env).iter().any(|r| r["kind"] == "user_edit"),
        "the same bytes are no user edit"
    );
}

#[test]
fn a_torn_agent_file_registry_is_rebuilt_from_the_ledger() {
    // The registry is rewritten in place, unsynced: a crash can leave it
    // half written. A user edit made since must still be recorded.
    let env = TestEnv::new();
    let content = agent_writes_new_rs(&env);
    let reg = env.rt().join("state/agent_files.bin");
    let whole = std::fs::read(&reg).unwrap();
    assert!(whole.len() > 48, "the registry holds the agent's file");
    std::fs::write(&reg, &whole[..whole.len() / 2]).unwrap();
    user_edits_new_rs_then_agent_calls(&env, &content);
    // And the registry is whole again: rewritten, and read by the next call
    // (a second user edit is recorded against the first one's bytes).
    let again = std::fs::read(&reg).unwrap();
    assert!(again.starts_with(b"CKPTREG1") && again.len() > whole.len() / 2);
    let mine = std::fs::read(env.ws.join("src/new.rs")).unwrap();
    env.write("src/new.rs", b"mine again\n");
    hook_ok(&env, "pre", &fixture(&env, "claude/bash.pre.json"));
    let ue: Vec<_> = records(&env)
        .into_iter()
        .filter(|r| r["kind"] == "user_edit")
        .collect();
    assert_eq!(ue.len(), 2, "{ue:#?}");
    assert_eq!(ue[1]["before_hash"], sha(&mine));
}

#[test]
fn a_json_registry_from_an_older_ckpt_is_rebuilt_from_the_ledger_and_replaced() {
    let env = TestEnv::new();
    let content = agent_writes_new_rs(&env);
    let state = env.rt().join("state");
    std::fs::remove_file(state.join("agent_files.bin")).unwrap();
    // What ckpt wrote before session 7, for the agent's file.
    let old = serde_json::json!([[
        "src/new.rs",
        {"hash": sha(content.as_bytes()), "mode": 420, "symlink": false, "size": 0,
         "mtime_ns": 0, "ctime_ns": 0, "ino": 0, "call": "toolu_01"}
    ]]);
    std::fs::write(state.join("agent_files.json"), old.to_string()).unwrap();
    // Rebuilt from the ledger: the user's edit of the agent's file is recorded.
    user_edits_new_rs_then_agent_calls(&env, &content);
    assert!(
        !state.join("agent_files.json").exists(),
        "the old file is gone"
    );
    assert!(
        std::fs::read(state.join("agent_files.bin"))
            .unwrap()
            .starts_with(b"CKPTREG1")
    );
}

#[test]
fn prompts_and_session_starts_make_labelled_checkpoints() {
    let env = TestEnv::new();
    hook_ok(
        &env,
        "session-start",
        &fixture(&env, "claude/startup.session-start.json"),
    );
    hook_ok(
        &env,
        "prompt",
        &fixture(&env, "claude/user_prompt.prompt.json"),
    );
    let recs = records(&env);
    assert_eq!(recs.len(), 2);
    assert!(
        recs[0]["label"]
            .as_str()
            .unwrap()
            .starts_with("session start")
    );
    let prompt = capture::parse(
        &fixture(&env, "claude/user_prompt.prompt.json"),
        Phase::Prompt,
        None,
    )
    .unwrap()
    .prompt
    .unwrap();
    assert_eq!(
        recs[1]["label"].as_str().unwrap(),
        prompt
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap()
    );
    assert_eq!(recs[1]["session"], "sess-claude-1");
}

#[test]
fn a_post_without_a_pre_is_recorded_with_a_warning() {
    let env = TestEnv::init();
    let post = fixture(&env, "claude/write_create.post.json");
    let content = write_create_content(&env, Phase::Post);
    env.write("src/new.rs", content.as_bytes());
    let r = hook(&env, "post", &post, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("no pre hook"), "{}", r.stderr);
    // With no pre, `originalFile: null` ("there was no file") is the
    // payload's word alone: ckpt does not claim to know the before state
    // (issue 21 item 9), and says the change is not recorded.
    assert!(
        r.stderr.contains("what it held before is unknown"),
        "{}",
        r.stderr
    );
    let recs = records(&env);
    assert!(!recs.iter().any(|r| r["kind"] == "file_patch"), "{recs:#?}");
    let end = recs.iter().rfind(|r| r["kind"] == "tool_call").unwrap();
    assert_eq!(end["unrecorded"][0]["reason"], "before_unknown", "{end}");
}

#[test]
fn a_post_without_a_pre_never_gets_a_users_file_deleted() {
    // The user's file was there; a post with no pre says `originalFile:
    // null`. Before, it was recorded as a create and a rollback deleted it.
    let env = TestEnv::init();
    env.write("src/new.rs", b"the user's own file\n");
    let post = fixture(&env, "claude/write_create.post.json");
    env.write(
        "src/new.rs",
        write_create_content(&env, Phase::Post).as_bytes(),
    );
    assert_eq!(hook(&env, "post", &post, &[]).code, 0);
    let r = env.ckpt(&["rollback", "--last", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        env.ws.join("src/new.rs").exists(),
        "the file is not deleted"
    );
}

#[test]
fn cursor_after_file_edit_reconstructs_the_before_by_reversing_the_edits() {
    let env = TestEnv::init();
    let after = "export function greet(name: string): string {\n  return `Hello, ${name}!`;\n}\n\nexport const VERSION = \"1.1.0\";\n";
    let before = "export function greet(name: string): string {\n  return \"Hello, \" + name;\n}\n\nexport const VERSION = \"1.0.0\";\n";
    env.write("src/app.ts", after.as_bytes());
    let r = hook(
        &env,
        "post",
        &fixture(&env, "cursor/afterfileedit.post.json"),
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let recs = records(&env);
    let p = recs
        .iter()
        .find(|r| r["kind"] == "file_patch")
        .expect("a patch");
    assert_eq!(p["op"], "modify");
    assert_eq!(
        p["before_hash"],
        sha(before.as_bytes()),
        "before = the edits reversed"
    );
    assert_eq!(p["after_hash"], sha(after.as_bytes()));
    assert_eq!(p["session"], "conv-cursor-1");
    git_apply_reproduces(&env, p, Some(before), Some(after), "cursor afterFileEdit");

    let env = TestEnv::init();
    env.write("src/foo.rs", b"fn foo() -> u8 {\n    2\n}\n");
    let r = hook(
        &env,
        "post",
        &fixture(&env, "cursor/afterfileedit_toolinput.post.json"),
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let p = records(&env)
        .into_iter()
        .find(|r| r["kind"] == "file_patch")
        .expect("a patch");
    assert_eq!(p["before_hash"], sha(b"fn foo() -> u8 {\n    1\n}\n"));

    // Outside the workspace: an after event cannot block, so exit 1, nothing recorded.
    let env = TestEnv::init();
    let r = hook(
        &env,
        "post",
        &fixture(&env, "cursor/afterfileedit_outside.post.json"),
        &[],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("E_PATH_OUTSIDE"), "{}", r.stderr);
    assert!(records(&env).is_empty());
}

#[test]
fn codex_bash_pairs_and_a_fifo_target_never_hangs_a_hook() {
    let env = TestEnv::new();
    hook_ok(&env, "pre", &fixture(&env, "codex/bash.pre.json"));
    hook_ok(&env, "post", &fixture(&env, "codex/bash.post.json"));
    let recs = records(&env);
    assert_eq!(recs.first().unwrap()["agent"], "codex");
    assert_eq!(recs.last().unwrap()["status"], "succeeded");
    assert_eq!(recs.first().unwrap()["call"], recs.last().unwrap()["call"]);

    let env = TestEnv::init();
    let fifo = env.ws.join("pipe");
    crate::common::mkfifo(&fifo);
    let payload = format!(
        r#"{{"session_id":"s","cwd":"{ws}","hook_event_name":"PreToolUse","tool_name":"Write","tool_input":{{"file_path":"{ws}/pipe","content":"x"}},"tool_use_id":"t-fifo"}}"#,
        ws = env.ws.display()
    );
    let t = std::time::Instant::now();
    let r = hook(&env, "pre", payload.as_bytes(), &[]);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(2),
        "no hang on a FIFO"
    );
    // Not a file ckpt can record: the call is blocked (on_record_failure =
    // block), never recorded with the FIFO as "absent" (issue 21 item 11: a
    // rollback would then delete what the call left there).
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("FIFO"), "{}", r.stderr);
    let post = payload.replace("PreToolUse", "PostToolUse");
    let t = std::time::Instant::now();
    let _ = hook(&env, "post", post.as_bytes(), &[]);
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
    assert!(
        records(&env).iter().all(|r| r["kind"] != "file_patch"),
        "a FIFO is never read or recorded as content"
    );
}

#[test]
fn a_user_edit_made_during_an_edit_call_is_told_apart_by_original_file() {
    let env = TestEnv::new();
    let pre = fixture(&env, "claude/edit.pre.json");
    let post = fixture(&env, "claude/edit.post.json");
    let post_ev = capture::parse(&post, Phase::Post, None).unwrap();
    let Some(capture::OriginalFile::Text(original)) = post_ev.original_file.clone() else {
        panic!()
    };
    let exp = post_ev.targets[0].expected.clone().unwrap();
    // Before the call the file lacks the user's line; the user adds it while
    // the agent works, and the tool's read (originalFile) includes it.
    let before_pre = original.replacen("/// Adds two numbers.\n", "", 1);
    assert_ne!(before_pre, original);
    env.write("src/lib.rs", before_pre.as_bytes());
    hook_ok(&env, "pre", &pre);
    let after = capture::apply_expected(&original, &exp).unwrap();
    env.write("src/lib.rs", after.as_bytes());
    let r = hook(&env, "post", &post, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let recs = records(&env);
    let ue = recs
        .iter()
        .find(|r| r["kind"] == "user_edit")
        .expect("the user's edit is recorded");
    assert_eq!(ue["before_hash"], sha(before_pre.as_bytes()));
    assert_eq!(ue["after_hash"], sha(original.as_bytes()));
    let p = recs.iter().find(|r| r["kind"] == "file_patch").unwrap();
    assert_eq!(
        p["before_hash"],
        sha(original.as_bytes()),
        "the agent's patch starts from what the tool read"
    );
    assert_eq!(p["after_hash"], sha(after.as_bytes()));
    git_apply_reproduces(&env, p, Some(&original), Some(&after), "agent part only");

    // An originalFile that the tool input does not turn into the bytes on disk
    // is not trusted: ckpt's own snapshot is the before, with a warning.
    let env = TestEnv::new();
    let pre = fixture(&env, "claude/edit.pre.json");
    let post = fixture(&env, "claude/edit.post.json");
    env.write("src/lib.rs", before_pre.as_bytes());
    let r = hook(&env, "pre", &pre, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    env.write("src/lib.rs", b"something else entirely\n");
    let r = hook(&env, "post", &post, &[]);
    assert_eq!(r.code, 0);
    assert!(r.stderr.contains("originalFile"), "{}", r.stderr);
    let p = records(&env)
        .into_iter()
        .find(|r| r["kind"] == "file_patch")
        .unwrap();
    assert_eq!(p["before_hash"], sha(before_pre.as_bytes()));
}

#[test]
fn four_sessions_hooking_at_once_lose_nothing() {
    const SESSIONS: usize = 4;
    const CALLS: usize = 15;
    let env = TestEnv::init();
    for s in 0..SESSIONS {
        for c in 0..CALLS {
            env.write(
                &format!("s{s}/f{c}.txt"),
                format!("session {s} file {c}\n").as_bytes(),
            );
        }
    }
    let ws = env.ws.clone();
    let threads: Vec<_> = (0..SESSIONS)
        .map(|s| {
            let ws = ws.clone();
            let home = env.home.clone();
            std::thread::spawn(move || {
                for c in 0..CALLS {
                    let payload = |event: &str| {
                        serde_json::json!({
                            "session_id": format!("sess{s}"), "cwd": ws, "hook_event_name": event,
                            "tool_name": "Write", "tool_use_id": format!("t{s}-{c}"),
                            "tool_input": {"file_path": ws.join(format!("s{s}/f{c}.txt")), "content": format!("new {s} {c}\n")},
                        })
                        .to_string()
                    };
                    for (phase, event) in [("pre", "PreToolUse"), ("post", "PostToolUse")] {
                        if phase == "post" {
                            std::fs::write(ws.join(format!("s{s}/f{c}.txt")), format!("new {s} {c}\n")).unwrap();
                        }
                        let mut child = std::process::Command::new(crate::common::bin())
                            .args(["hook", phase])
                            .env_clear()
                            .env("HOME", &home)
                            .env("CKPT_WORKSPACE", &ws)
                            .stdin(Stdio::piped())
                            .stdout(Stdio::null())
                            .stderr(Stdio::piped())
                            .spawn()
                            .unwrap();
                        child.stdin.take().unwrap().write_all(payload(event).as_bytes()).unwrap();
                        let out = child.wait_with_output().unwrap();
                        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let recs = records(&env);
    let patches: Vec<_> = recs.iter().filter(|r| r["kind"] == "file_patch").collect();
    assert_eq!(patches.len(), SESSIONS * CALLS, "one patch per call");
    for p in &patches {
        let call = p["call"].as_str().unwrap();
        let (s, c) = call[1..].split_once('-').unwrap();
        assert_eq!(
            p["path"],
            format!("s{s}/f{c}.txt"),
            "each patch belongs to its own call"
        );
        assert_eq!(p["session"], format!("sess{s}"));
        assert_eq!(p["after_hash"], sha(format!("new {s} {c}\n").as_bytes()));
    }
    assert!(
        recs.iter().all(|r| r["kind"] != "user_edit"),
        "no call's write is mistaken for the user's"
    );
    assert_eq!(
        recs.iter().filter(|r| r["status"] == "succeeded").count(),
        SESSIONS * CALLS
    );
    assert_eq!(env.ckpt(&["verify"]).code, 0);
}

#[test]
fn a_file_another_open_call_is_writing_is_not_reported_as_a_user_edit() {
    let env = TestEnv::init();
    env.write("shared.txt", b"v0\n");
    let call = |id: &str, content: &str, event: &str| {
        serde_json::json!({"session_id": "A", "cwd": env.ws, "hook_event_name": event, "tool_name": "Write",
            "tool_use_id": id, "tool_input": {"file_path": env.ws.join("shared.txt"), "content": content}})
        .to_string()
    };
    // Session A writes shared.txt once (the registry now knows it as A's).
    hook_ok(&env, "pre", call("a1", "v1\n", "PreToolUse").as_bytes());
    env.write("shared.txt", b"v1\n");
    hook_ok(&env, "post", call("a1", "v1\n", "PostToolUse").as_bytes());
    // A starts a second write; while its tool is writing, session B's hook runs.
    hook_ok(&env, "pre", call("a2", "v2\n", "PreToolUse").as_bytes());
    env.write("shared.txt", b"v2\n");
    let b = serde_json::json!({"session_id": "B", "cwd": env.ws, "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_use_id": "b1", "tool_input": {"command": "true"}}).to_string();
    hook_ok(&env, "pre", b.as_bytes());
    hook_ok(&env, "post", call("a2", "v2\n", "PostToolUse").as_bytes());
    let recs = records(&env);
    assert!(recs.iter().all(|r| r["kind"] != "user_edit"), "{recs:#?}");
    assert_eq!(recs.iter().filter(|r| r["kind"] == "file_patch").count(), 2);
}

/// `ckpt hook` is parsed without clap in its common shapes; every shape must
/// mean what clap makes of it.
#[test]
fn hook_arguments_parse_as_clap_would() {
    let env = TestEnv::init();
    let pre = fixture(&env, "generic/minimal.pre.json");
    for args in [
        vec!["pre", "--format", "generic"],
        vec!["pre", "--format=generic"],
        vec!["--json", "pre", "--format", "generic"],
        vec!["pre", "--format", "generic", "--workspace", "."],
    ] {
        let mut a = vec!["hook"];
        a.extend(&args);
        let r = crate::common::run_with_stdin(&env, &a, &pre, &[]);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    }
    // Malformed shapes are clap's usage errors (exit 2), never a recorded call.
    for args in [
        vec!["pre", "--format"],
        vec!["bogus"],
        vec!["pre", "extra"],
        vec!["pre", "--format", "generic", "extra"],
    ] {
        let mut a = vec!["hook"];
        a.extend(&args);
        let r = crate::common::run_with_stdin(&env, &a, &pre, &[]);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
    }
    // A format name that is not one is the hook's own refusal (exit 2 too).
    let r = crate::common::run_with_stdin(&env, &["hook", "pre", "--format=vim"], &pre, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("vim"), "{}", r.stderr);
    assert!(
        crate::common::run_with_stdin(&env, &["hook", "--help"], b"", &[])
            .stdout
            .contains("post-failure")
    );
}

/// Permission bits of the blob holding `bytes` (`None` while it is not there).
fn blob_mode(env: &TestEnv, bytes: &[u8]) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let hex = ContentHash::of(bytes).hex();
    let p = env
        .rt()
        .join("artifacts/blobs")
        .join(&hex[..2])
        .join(&hex[2..]);
    std::fs::symlink_metadata(p)
        .ok()
        .map(|m| m.permissions().mode() & 0o777)
}

/// A shell call's post syncs what it stored before the record naming it:
/// one sync per handle for a few files (a file-system wide `syncfs` for every
/// call wrote back a parallel build's output too, 0.1-0.8 s per shell call in
/// real sessions), one `syncfs` from 32 on. A sync that fails leaves no
/// record naming the content.
#[test]
fn a_shell_calls_content_is_synced_before_its_record_per_handle_or_by_syncfs() {
    let ends = |env: &TestEnv| {
        records(env)
            .iter()
            .filter(|r| r["kind"] == "file_patch")
            .count()
    };
    // A shell call that writes `files` files, its post run with `failpoint`.
    let shell_call = |files: usize, failpoint: &str| {
        let env = TestEnv::new();
        hook_ok(&env, "pre", &fixture(&env, "claude/bash.pre.json"));
        for i in 0..files {
            env.write(&format!("many/{i}.txt"), format!("file {i}\n").as_bytes());
        }
        let post = fixture(&env, "claude/bash.post.json");
        let r = hook(&env, "post", &post, &[("CKPT_FAILPOINTS", failpoint)]);
        (env, r)
    };
    // A few files: per handle (a failure injected in `syncfs` is never hit).
    let (env, r) = shell_call(1, "syncs.before_syncfs=error");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(ends(&env), 1);
    // The same sync failing: no record names the content.
    let (env, r) = shell_call(1, "syncs.before_content=error");
    assert_ne!(r.code, 0, "the injected failure is reported: {}", r.stderr);
    assert_eq!(ends(&env), 0, "a record named content whose sync failed");
    // Many files: one `syncfs`, and its failure blocks the records too.
    let (env, r) = shell_call(40, "syncs.before_syncfs=error");
    assert_ne!(r.code, 0, "the injected failure is reported: {}", r.stderr);
    assert_eq!(ends(&env), 0, "a record named content whose syncfs failed");
}

/// The same for an Edit/Write hook: its blob and fan-out directory are
/// synced before the record that names them, and a failed sync leaves no
/// such record; the next post, finding the blob stored, records it (that
/// a found blob joins the finder's sync set is `blob_store`'s unit test).
#[test]
fn an_edit_hooks_blob_is_synced_before_the_record_that_names_it() {
    let env = TestEnv::new();
    let content = agent_writes_new_rs_before_post(&env);
    let r = hook(
        &env,
        "post",
        &fixture(&env, "claude/write_create.post.json"),
        &[("CKPT_FAILPOINTS", "syncs.before_content=error")],
    );
    assert_ne!(r.code, 0, "the injected failure is reported: {}", r.stderr);
    let patches = |env: &TestEnv| {
        records(env)
            .iter()
            .filter(|r| r["kind"] == "file_patch")
            .count()
    };
    assert_eq!(patches(&env), 0);
    // Stored, but named by nothing yet; the next post names it, once synced.
    assert!(blob_mode(&env, content.as_bytes()).is_some());
    let r = hook(
        &env,
        "post",
        &fixture(&env, "claude/write_create.post.json"),
        &[("CKPT_FAILPOINTS", "syncs.before_syncfs=error")],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(patches(&env), 1);
    assert_eq!(env.ckpt(&["verify"]).code, 0);
}

/// The first hook in a workspace sets ckpt up there with its syncs left on a
/// thread while it walks: once it exits, `.agent-runtime/` holds what `ckpt
/// init` makes, no temp file, and the call's record.
#[test]
fn the_first_hook_sets_the_workspace_up_as_init_does() {
    let tree = |env: &TestEnv| -> Vec<(String, Vec<u8>)> {
        let mut out: Vec<(String, Vec<u8>)> = crate::common::walk_modes(&env.rt())
            .into_iter()
            .filter(|(p, _, dir)| {
                // The files a first call adds beyond init's.
                let name = p.file_name().unwrap().to_string_lossy();
                *dir || [".gitignore", "config.toml"].contains(&name.as_ref())
                    || name.starts_with(".ckpt-tmp-")
            })
            .map(|(p, mode, dir)| {
                let rel = p.strip_prefix(env.rt()).unwrap().display().to_string();
                let body = if dir {
                    Vec::new()
                } else {
                    std::fs::read(&p).unwrap()
                };
                (format!("{rel} {mode:o}"), body)
            })
            .collect();
        out.sort();
        out
    };
    let inited = TestEnv::init();
    let env = TestEnv::new();
    let payload = serde_json::json!({
        "session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_use_id": "first", "cwd": env.ws, "tool_input": {"command": "true"},
    })
    .to_string();
    hook_ok(&env, "pre", payload.as_bytes());
    assert_eq!(tree(&env), tree(&inited));
    let recs = records(&env);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["status"], "started");
    assert_eq!(env.ckpt(&["verify"]).code, 0);
}

#[test]
fn a_subagents_call_and_its_turn_are_recorded() {
    let env = TestEnv::init();
    env.write("a.txt", b"a\n");
    // A Write of `file` by call `call`, from the subagent when `sub`.
    let write = |event: &str, call: &str, file: &str, content: &str, sub: bool| {
        let mut v = serde_json::json!({
            "session_id": "s1", "transcript_path": "/dev/null", "cwd": env.ws,
            "hook_event_name": event, "tool_name": "Write", "tool_use_id": call,
            "tool_input": {"file_path": env.ws.join(file), "content": content},
        });
        if sub {
            v["prompt_id"] = "turn-7".into();
            v["effort"] = serde_json::json!({"level": "medium"});
            v["agent_id"] = "sub-1".into();
            v["agent_type"] = "Explore".into();
        }
        if event == "PostToolUse" {
            v["tool_response"] = serde_json::json!({"type": "update"});
        }
        v.to_string().into_bytes()
    };
    let p = |event: &str| write(event, "t1", "a.txt", "b\n", true);
    hook_ok(&env, "pre", &p("PreToolUse"));
    env.write("a.txt", b"b\n");
    hook_ok(&env, "post", &p("PostToolUse"));
    let log = env.ckpt(&["log", "--json"]).json();
    let started = log["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "tool_call" && r["status"] == "started")
        .unwrap()
        .clone();
    assert_eq!(started["turn"], "turn-7", "{started:#}");
    assert_eq!(started["subagent"]["id"], "sub-1", "{started:#}");
    assert_eq!(started["subagent"]["type"], "Explore", "{started:#}");
    let text = env.ckpt(&["log"]);
    assert!(
        text.stdout.contains("(subagent sub-1, Explore)"),
        "{}",
        text.stdout
    );
    // The main agent writes another file; the subagent's work alone is
    // taken back.
    let main = |event: &str| write(event, "t2", "m.txt", "main\n", false);
    hook_ok(&env, "pre", &main("PreToolUse"));
    env.write("m.txt", b"main\n");
    hook_ok(&env, "post", &main("PostToolUse"));
    let r = env.ckpt(&["rollback", "--subagent", "sub-1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(std::fs::read(env.ws.join("a.txt")).unwrap(), b"a\n");
    assert_eq!(std::fs::read(env.ws.join("m.txt")).unwrap(), b"main\n");
    let r = env.ckpt(&["rollback", "--subagent", "nobody"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
}

/// Codex 0.171 sends a failing shell call's post with no exit code
/// (`tool_response` is the output only); the exit code is in its
/// transcript. Before: the call was recorded `succeeded`.
#[test]
fn a_failing_codex_shell_call_is_recorded_failed_from_its_transcript() {
    let env = TestEnv::init();
    let transcript = env.home.join("rollout.jsonl");
    let line = |id: &str, code: i64| {
        format!(
            r#"{{"type":"event_msg","payload":{{"type":"item_completed","item":{{"type":"CommandExecution","id":"{id}","status":"{}","exit_code":{code}}}}}}}"#,
            if code == 0 { "completed" } else { "failed" }
        )
    };
    std::fs::write(
        &transcript,
        format!("{}\n{}\n", line("ok1", 0), line("bad1", 2)),
    )
    .unwrap();
    for (id, want) in [("ok1", "succeeded"), ("bad1", "failed")] {
        let payload = |event: &str| {
            serde_json::json!({"session_id": "s", "turn_id": "t", "transcript_path": transcript,
                "cwd": env.ws, "hook_event_name": event, "model": "gpt-5.5",
                "permission_mode": "bypassPermissions", "tool_name": "Bash",
                "tool_input": {"command": "printf 'partial\\n' > failing.txt; exit 2"},
                "tool_response": "", "tool_use_id": id})
            .to_string()
        };
        let r = hook(
            &env,
            "pre",
            payload("PreToolUse").as_bytes(),
            &[("CKPT_AGENT_PID", "0")],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        let r = crate::common::run_with_stdin(
            &env,
            &["hook", "post", "--format", "codex"],
            payload("PostToolUse").as_bytes(),
            &[],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        let end = records(&env)
            .into_iter()
            .rfind(|r| r["kind"] == "tool_call" && r["call"] == id)
            .unwrap();
        assert_eq!(end["status"], want, "{end}");
        if want == "failed" {
            assert_eq!(end["error"], "exit status 2", "{end}");
        }
    }
}

// ------------------------------------------------- where a hook records

/// `ckpt hook PHASE [FLAGS]` run in `dir` with no `--workspace` /
/// `CKPT_WORKSPACE`, as an agent runs a user-level hook.
fn hook_in(env: &TestEnv, dir: &Path, args: &[&str], payload: &[u8]) -> Run {
    let mut c = env.command(args);
    c.env_remove("CKPT_WORKSPACE").current_dir(dir);
    crate::common::run_with_stdin_cmd(c, payload)
}

fn write_payload(cwd: &Path, call: &str, file: &Path) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "session_id": "s1", "tool_use_id": call, "cwd": cwd,
        "hook_event_name": "PreToolUse", "tool_name": "Write",
        "tool_input": {"file_path": file, "content": "new\n"},
    }))
    .unwrap()
}

fn shell_payload(cwd: &Path, call: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "session_id": "s1", "tool_use_id": call, "cwd": cwd,
        "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_input": {"command": "true"},
    }))
    .unwrap()
}

#[test]
fn a_hook_never_sets_ckpt_up_outside_a_git_work_tree() {
    let env = TestEnv::new();
    let plain = env.dir.path().join("plain/deeper");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::write(plain.join("big.txt"), b"user data\n").unwrap();
    for (phase, payload) in [
        ("pre", shell_payload(&plain, "c1")),
        ("pre", write_payload(&plain, "c2", &plain.join("x.txt"))),
    ] {
        let r = hook_in(&env, &plain, &["hook", phase], &payload);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(
            r.stderr.contains("not recorded") && r.stderr.contains("ckpt init"),
            "said where the user sees it: {}",
            r.stderr
        );
    }
    for d in [&plain, plain.parent().unwrap(), env.dir.path()] {
        assert!(!d.join(".agent-runtime").exists(), "{}", d.display());
    }
    // The payload's cwd outside, the hook itself in an initialised git
    // workspace: nothing is set up where the payload points.
    crate::common::git(&env, &["init", "-q"]);
    assert_eq!(env.ckpt(&["init"]).code, 0);
    let r = hook_in(
        &env,
        &env.ws,
        &["hook", "pre"],
        &shell_payload(&plain, "c3"),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!plain.join(".agent-runtime").exists());
    assert!(!plain.parent().unwrap().join(".agent-runtime").exists());
}

#[test]
fn a_hook_does_not_set_ckpt_up_in_the_home_directory() {
    let env = TestEnv::new();
    // A home directory that is a git work tree (dotfiles).
    crate::common::git_at(&env.home, &env.home, &["init", "-q"]);
    let sub = env.home.join(".config");
    std::fs::create_dir_all(&sub).unwrap();
    let r = hook_in(&env, &sub, &["hook", "pre"], &shell_payload(&sub, "c1"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("home directory"), "{}", r.stderr);
    assert!(!env.home.join(".agent-runtime").exists());
    // Run there by hand, it is the user's choice.
    let mut c = env.command(&["init"]);
    c.env_remove("CKPT_WORKSPACE").current_dir(&env.home);
    assert_eq!(crate::common::run(c.output().unwrap()).code, 0);
    let r = hook_in(&env, &sub, &["hook", "pre"], &shell_payload(&sub, "c2"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    assert!(env.home.join(".agent-runtime/ledger.jsonl").exists());
}

#[test]
fn only_initialized_hooks_record_where_ckpt_init_ran_from_any_subdirectory() {
    let env = TestEnv::new();
    crate::common::git(&env, &["init", "-q"]);
    let sub = env.ws.join("src/deep");
    std::fs::create_dir_all(&sub).unwrap();
    let flags = ["hook", "pre", "--only-initialized"];
    // Not set up: nothing made, nothing said (the user asked for this).
    let r = hook_in(
        &env,
        &sub,
        &flags,
        &write_payload(&sub, "c1", &sub.join("a.txt")),
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert!(!env.rt().exists(), "an only-initialized hook set ckpt up");
    // Without the flag a git top level is set up, as project hooks do.
    let r = hook_in(
        &env,
        &sub,
        &["hook", "pre"],
        &write_payload(&sub, "c2", &sub.join("a.txt")),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(env.ledger_path().exists());
    // Set up: a session started in a subdirectory records.
    let r = hook_in(
        &env,
        &sub,
        &flags,
        &write_payload(&sub, "c3", &sub.join("b.txt")),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let calls: Vec<String> = records(&env)
        .iter()
        .filter(|r| r["kind"] == "tool_call")
        .map(|r| r["call"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(calls.contains(&"c3".to_string()), "{calls:?}");
    assert!(!calls.contains(&"c1".to_string()), "{calls:?}");
}

#[test]
fn a_repository_inside_an_initialised_one_records_into_the_outer_workspace() {
    let env = TestEnv::new();
    crate::common::git(&env, &["init", "-q"]);
    assert_eq!(env.ckpt(&["init"]).code, 0);
    let inner = env.ws.join("vendor/lib");
    std::fs::create_dir_all(&inner).unwrap();
    crate::common::git_at(&inner, &env.home, &["init", "-q"]);
    let r = hook_in(
        &env,
        &inner,
        &["hook", "pre", "--only-initialized"],
        &write_payload(&inner, "c1", &inner.join("x.txt")),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!inner.join(".agent-runtime").exists());
    let paths: Vec<String> = records(&env)
        .iter()
        .filter_map(|r| r["call"].as_str().map(|c| c.to_string()))
        .collect();
    assert!(paths.contains(&"c1".to_string()), "{paths:?}");
}

#[test]
fn a_read_only_call_is_one_record_and_still_catches_user_edits_first() {
    let env = TestEnv::new();
    let content = agent_writes_new_rs(&env);
    let before = records(&env).len();
    env.write("src/new.rs", format!("{content}// mine\n").as_bytes());
    hook_ok(&env, "pre", &fixture(&env, "claude/read.pre.json"));
    let recs = records(&env);
    assert_eq!(recs.len(), before + 1, "the user edit, no started record");
    assert_eq!(recs[before]["kind"], "user_edit");
    assert!(
        !env.rt().join("state/calls").exists()
            || std::fs::read_dir(env.rt().join("state/calls"))
                .unwrap()
                .next()
                .is_none(),
        "no open-call state for a read"
    );
    hook_ok(&env, "post", &fixture(&env, "claude/read.post.json"));
    let recs = records(&env);
    assert_eq!(recs.len(), before + 2);
    assert_eq!(recs[before + 1]["status"], "succeeded");
    // Nothing for recover to ask about.
    let r = env.ckpt(&["recover", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = r.json();
    let calls = v["calls"].as_array().cloned().unwrap_or_default();
    let read_call = recs[before + 1]["call"].clone();
    assert!(calls.iter().any(|c| c["call"] == read_call), "{v}");
    assert!(
        calls
            .iter()
            .filter(|c| c["call"] == read_call)
            .all(|c| c["evidence"].is_null()),
        "{v}"
    );
}

/// Issue 21 item 8: a `transcript_path` naming a FIFO hung `hook prompt`
/// and `hook session-start` forever (opening it waits for a writer).
#[test]
fn a_fifo_as_transcript_never_hangs_a_hook() {
    let env = TestEnv::init();
    let fifo = env.dir.path().join("t.jsonl");
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: mkfifo is not available");
        return;
    }
    for (phase, event) in [
        ("prompt", "UserPromptSubmit"),
        ("session-start", "SessionStart"),
    ] {
        let p = serde_json::json!({"session_id": "s", "transcript_path": fifo, "cwd": env.ws,
            "hook_event_name": event, "prompt": "hi", "source": "startup"});
        // Killed after 10 s: a hang fails the test instead of stalling it.
        let r = crate::common::run_with_stdin_bounded(
            env.command(&["hook", phase]),
            p.to_string().as_bytes(),
            std::time::Duration::from_secs(10),
        )
        .unwrap_or_else(|| panic!("{phase} hung on a FIFO transcript"));
        assert_eq!(r.code, 0, "{phase}: {}", r.stderr);
    }
    // And restore-session --claude to such a checkpoint refuses at once.
    let ck = records(&env)
        .into_iter()
        .rfind(|r| r["kind"] == "checkpoint")
        .unwrap()["checkpoint"]
        .as_str()
        .unwrap()
        .to_string();
    let t = std::time::Instant::now();
    let r = env.ckpt(&["restore-session", "--session", "s", "--to", &ck, "--claude"]);
    assert_ne!(r.code, 0);
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
}

/// Issue 21 item 11: under RLIMIT_FSIZE ckpt died of SIGXFSZ with no error
/// line; now the write fails with EFBIG and the hook says so.
#[test]
fn a_file_size_limit_is_an_error_line_not_a_signal() {
    let env = TestEnv::init();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7919 % 251) as u8).collect();
    env.write("big.bin", &big);
    let payload = br#"{"session":"s","call":"c1","tool":"Bash"}"#;
    let mut c = std::process::Command::new("sh");
    c.args([
        "-c",
        "ulimit -f 50; exec \"$0\" hook pre",
        crate::common::bin(),
    ])
    .env_clear()
    .env("HOME", &env.home)
    .env("PATH", std::env::var_os("PATH").unwrap_or_default())
    .env("CKPT_WORKSPACE", &env.ws)
    .env("CKPT_AGENT_PID", "0")
    .current_dir(&env.ws);
    let r = crate::common::run_with_stdin_cmd(c, payload);
    assert_eq!(r.code, 2, "blocked, not killed by a signal: {}", r.stderr);
    assert!(r.stderr.contains("File too large"), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}

/// Issue 21 item 11: a call id holding a newline split an error line in two.
#[test]
fn ids_with_control_characters_are_refused_in_one_line() {
    let env = TestEnv::init();
    let p = serde_json::json!({"session_id": "s", "tool_use_id": "c1\nforged line", "cwd": env.ws,
        "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "true"}});
    let r = hook(&env, "pre", p.to_string().as_bytes(), &[]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("control character"), "{}", r.stderr);
    assert!(records(&env).is_empty());
}
