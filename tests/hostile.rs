//! Issue 21's sweep: every hostile hook input we have — the invalid fixtures,
//! every captured and written payload pointed at the workspace and at a
//! canary directory beside it, the fuzz corpus, and crafted cases (`cwd`
//! outside, `..`, a symlink out, a FIFO transcript, control characters) —
//! fed to the real binary in every hook phase, with and without
//! `CKPT_WORKSPACE`. Expected of each: an answer within 10 s, a documented
//! exit code (0, 1 or 2), no panic; and of all of them: the canary and the
//! directory around the workspace unchanged, no `.agent-runtime/` anywhere
//! but the workspace, and a ledger that still verifies.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{Run, TestEnv};

fn inputs(ws: &Path, canary: &Path) -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = Vec::new();
    let mut stack = vec![root.join("testdata/hooks")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                files.push(p);
            }
        }
    }
    files.sort();
    for p in &files {
        let raw = std::fs::read(p).unwrap();
        let name = p.strip_prefix(root).unwrap().display().to_string();
        for (tag, at) in [("ws", ws), ("canary", canary)] {
            let text = String::from_utf8_lossy(&raw)
                .replace("$WS", &at.display().to_string())
                .replace("$HOME", &at.display().to_string());
            out.push((format!("{name}@{tag}"), text.into_bytes()));
        }
    }
    let corpus = root.join("fuzz/corpus/hook_stdin");
    let mut seeds: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    seeds.sort();
    for p in seeds {
        out.push((
            p.file_name().unwrap().to_string_lossy().into_owned(),
            std::fs::read(&p).unwrap(),
        ));
    }
    let c = canary.display().to_string();
    let w = ws.display().to_string();
    let crafted = [
        (
            "cwd-root",
            r#"{"session_id":"s","tool_use_id":"h1","cwd":"/","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"true"}}"#.to_string(),
        ),
        (
            "cwd-canary-write",
            format!(
                r#"{{"session_id":"s","tool_use_id":"h2","cwd":"{c}","hook_event_name":"PreToolUse","tool_name":"Write","tool_input":{{"file_path":"{c}/x.txt","content":"x"}}}}"#
            ),
        ),
        (
            "cwd-canary-shell",
            format!(
                r#"{{"session_id":"s","tool_use_id":"h3","cwd":"{c}","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{{"command":"true"}}}}"#
            ),
        ),
        (
            "dotdot",
            format!(
                r#"{{"session_id":"s","tool_use_id":"h4","cwd":"{w}","hook_event_name":"PreToolUse","tool_name":"Write","tool_input":{{"file_path":"../canary/y.txt","content":"y"}}}}"#
            ),
        ),
        (
            "through-symlink",
            format!(
                r#"{{"session_id":"s","tool_use_id":"h5","cwd":"{w}","hook_event_name":"PreToolUse","tool_name":"Write","tool_input":{{"file_path":"{w}/out/z.txt","content":"z"}}}}"#
            ),
        ),
        (
            "runtime-target",
            format!(
                r#"{{"session_id":"s","tool_use_id":"h6","cwd":"{w}","hook_event_name":"PreToolUse","tool_name":"Write","tool_input":{{"file_path":"{w}/.agent-runtime/ledger.jsonl","content":"z"}}}}"#
            ),
        ),
        (
            "fifo-transcript",
            format!(
                r#"{{"session_id":"s","transcript_path":"{w}/fifo","cwd":"{w}","hook_event_name":"UserPromptSubmit","prompt":"p"}}"#
            ),
        ),
        (
            "newline-id",
            format!(
                r#"{{"session_id":"s","tool_use_id":"a\nb","cwd":"{w}","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{{"command":"true"}}}}"#
            ),
        ),
        (
            "nul-path",
            format!(
                r#"{{"session_id":"s","tool_use_id":"h7","cwd":"{w}","hook_event_name":"PreToolUse","tool_name":"Write","tool_input":{{"file_path":"{w}/a\u0000b","content":"z"}}}}"#
            ),
        ),
        (
            "huge-id",
            format!(
                r#"{{"session_id":"{}","tool_use_id":"h8","cwd":"{w}","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{{"command":"true"}}}}"#,
                "s".repeat(100_000)
            ),
        ),
    ];
    for (n, t) in crafted {
        out.push((format!("crafted:{n}"), t.into_bytes()));
    }
    out
}

/// Runs `ckpt hook PHASE` on `payload`, killed after 10 s (`None`).
fn run(env: &TestEnv, phase: &str, payload: &[u8], with_ws: bool) -> (Option<Run>, Duration) {
    let mut c = env.command(&["hook", phase]);
    if !with_ws {
        c.env_remove("CKPT_WORKSPACE");
    }
    c.env("CKPT_HOOK_STDIN_TIMEOUT_MS", "2000");
    let t = Instant::now();
    let r = crate::common::run_with_stdin_bounded(c, payload, Duration::from_secs(10));
    (r, t.elapsed())
}

#[test]
fn hostile_hook_inputs_never_reach_outside_hang_or_panic() {
    let env = TestEnv::new();
    crate::common::git(&env, &["init", "-q"]);
    assert_eq!(env.ckpt(&["init"]).code, 0);
    let canary = env.dir.path().join("canary");
    std::fs::create_dir_all(canary.join("sub")).unwrap();
    std::fs::write(canary.join("keep.txt"), b"canary\n").unwrap();
    std::fs::write(canary.join("sub/deep.txt"), b"deep\n").unwrap();
    std::os::unix::fs::symlink(&canary, env.ws.join("out")).unwrap();
    let _ = std::process::Command::new("mkfifo")
        .arg(env.ws.join("fifo"))
        .status();
    let around = |env: &TestEnv| crate::common::tree(env.dir.path(), &["ws"]);
    let before = around(&env);
    let cases = inputs(&env.ws, &canary);
    assert!(cases.len() > 300, "{} inputs", cases.len());
    let mut answered = 0;
    let mut failures = Vec::new();
    for (name, payload) in &cases {
        for phase in ["pre", "post", "prompt", "turn-end"] {
            for with_ws in [true, false] {
                let (r, took) = run(&env, phase, payload, with_ws);
                answered += 1;
                let stderr = r.as_ref().map(|r| r.stderr.clone()).unwrap_or_default();
                let bad = match &r {
                    None => Some("no answer within 10 s".to_string()),
                    Some(r) if ![0, 1, 2].contains(&r.code) => Some(format!("exit {}", r.code)),
                    _ if stderr.contains("panicked") => Some("a panic".into()),
                    _ => None,
                };
                if let Some(why) = bad {
                    failures.push(format!(
                        "{name} ({phase}, workspace {}): {why} after {took:?}: {}",
                        if with_ws { "given" } else { "from cwd" },
                        stderr.lines().next().unwrap_or("")
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {answered}:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        around(&env),
        before,
        "something outside the workspace changed"
    );
    for d in [env.dir.path(), canary.as_path(), Path::new("/")] {
        assert!(
            !d.join(".agent-runtime").exists() || d == env.ws,
            "`.agent-runtime/` made in {}",
            d.display()
        );
    }
    let v = env.ckpt(&["verify"]);
    assert_eq!(v.code, 0, "{}", v.stdout);
    eprintln!("{answered} hostile hook runs answered, 0 outside writes");
}
