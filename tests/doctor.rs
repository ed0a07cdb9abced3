//! `ckpt doctor` and `ckpt init --hooks AGENT --user`: whether each agent
//! will run ckpt's hooks, said with the fix, and user-level hooks that
//! record only where `ckpt init` ran.

use std::path::{Path, PathBuf};

use crate::common::{Run, TestEnv};

/// A directory holding `ckpt` (a link to the binary under test), so the
/// hooks' bare `ckpt` resolves as it does for an installed ckpt.
fn path_with_ckpt(env: &TestEnv) -> String {
    let bin = env.dir.path().join("bin");
    if !bin.exists() {
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(crate::common::bin(), bin.join("ckpt")).unwrap();
    }
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn ckpt(env: &TestEnv, args: &[&str], extra: &[(&str, &str)]) -> Run {
    let path = path_with_ckpt(env);
    let mut all: Vec<(&str, &str)> = vec![("PATH", path.as_str())];
    all.extend_from_slice(extra);
    env.ckpt_env(args, &all)
}

fn doctor(env: &TestEnv, extra: &[(&str, &str)]) -> (i32, serde_json::Value) {
    let r = ckpt(env, &["doctor", "--json"], extra);
    (r.code, r.json())
}

fn codes(report: &serde_json::Value, agent: &str) -> Vec<String> {
    report["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == agent)
        .unwrap()["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["code"].as_str().unwrap().to_string())
        .collect()
}

fn agent<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == name)
        .unwrap()
}

#[test]
fn doctor_says_when_no_agent_has_hooks() {
    let env = TestEnv::init();
    let r = ckpt(&env, &["doctor"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("no agent has ckpt's hooks"),
        "{}",
        r.stdout
    );
}

#[test]
fn doctor_finds_codex_untrusted_until_init_trusts_it() {
    let env = TestEnv::init();
    let codex_home = env.home.join("codex");
    let ch = codex_home.to_str().unwrap();
    let r = ckpt(&env, &["init", "--hooks", "codex"], &[("CODEX_HOME", ch)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (code, rep) = doctor(&env, &[("CODEX_HOME", ch)]);
    assert_eq!(code, 4, "{rep}");
    assert_eq!(codes(&rep, "codex"), ["codex_untrusted"], "{rep}");
    let text = ckpt(&env, &["doctor"], &[("CODEX_HOME", ch)]);
    assert!(
        text.stdout.contains("ckpt init --hooks codex --trust"),
        "the fix is on the line: {}",
        text.stdout
    );
    let r = ckpt(
        &env,
        &["init", "--hooks", "codex", "--trust"],
        &[("CODEX_HOME", ch)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (code, rep) = doctor(&env, &[("CODEX_HOME", ch)]);
    assert_eq!(code, 0, "{rep}");
    assert!(codes(&rep, "codex").is_empty(), "{rep}");
    let st = ckpt(&env, &["status"], &[("CODEX_HOME", ch)]);
    assert!(!st.stderr.contains("Codex"), "{}", st.stderr);
    let codex = agent(&rep, "codex");
    assert_eq!(codex["files"][0]["file"], ".codex/hooks.json");
    assert_eq!(codex["resolves_to"][0]["is_this_binary"], true, "{rep}");
}

#[test]
fn doctor_names_a_hook_command_that_does_not_exist() {
    let env = TestEnv::init();
    env.write(
        ".claude/settings.local.json",
        br#"{"hooks":{"PreToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"/nowhere/ckpt hook pre"}]}]}}"#,
    );
    let (code, rep) = doctor(&env, &[]);
    assert_eq!(code, 4, "{rep}");
    let c = codes(&rep, "claude");
    assert!(c.contains(&"command_not_found".to_string()), "{rep}");
    assert!(c.contains(&"hooks_incomplete".to_string()), "{rep}");
    // The same hooks written by init: the command resolves.
    let r = ckpt(&env, &["init", "--hooks", "claude"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (_, rep) = doctor(&env, &[]);
    let c = codes(&rep, "claude");
    assert!(!c.contains(&"hooks_incomplete".to_string()), "{rep}");
}

#[test]
fn doctor_checks_gemini_folder_trust_and_subdirectories() {
    let env = TestEnv::init();
    let r = ckpt(&env, &["init", "--hooks", "gemini"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("subdirectory") && r.stderr.contains("does not trust"),
        "init ends with the doctor's findings: {}",
        r.stderr
    );
    let (code, rep) = doctor(&env, &[]);
    assert_eq!(code, 4, "{rep}");
    assert_eq!(
        codes(&rep, "gemini"),
        ["gemini_subdirectory", "gemini_untrusted"],
        "{rep}"
    );
    let (_, rep) = doctor(&env, &[("GEMINI_CLI_TRUST_WORKSPACE", "true")]);
    assert_eq!(codes(&rep, "gemini"), ["gemini_subdirectory"], "{rep}");
    let ws = std::fs::canonicalize(&env.ws).unwrap();
    std::fs::create_dir_all(env.home.join(".gemini")).unwrap();
    let folders = env.home.join(".gemini/trustedFolders.json");
    std::fs::write(
        &folders,
        serde_json::to_vec(&serde_json::json!({ ws.to_str().unwrap(): "TRUST_FOLDER" })).unwrap(),
    )
    .unwrap();
    let (code, rep) = doctor(&env, &[]);
    assert_eq!(
        (code, codes(&rep, "gemini")),
        (0, vec!["gemini_subdirectory".to_string()])
    );
    // A nearer rule that distrusts wins, as in Gemini CLI.
    std::fs::write(
        &folders,
        serde_json::to_vec(&serde_json::json!({
            ws.parent().unwrap().to_str().unwrap(): "TRUST_FOLDER",
            ws.to_str().unwrap(): "DO_NOT_TRUST",
        }))
        .unwrap(),
    )
    .unwrap();
    let (code, _) = doctor(&env, &[]);
    assert_eq!(code, 4);
}

fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

#[test]
fn user_level_hooks_go_to_the_users_file_and_come_out_again() {
    let env = TestEnv::init();
    let user = env.home.join(".gemini/settings.json");
    std::fs::create_dir_all(user.parent().unwrap()).unwrap();
    let before = b"{\n  \"theme\": \"dark\"\n}\n";
    std::fs::write(&user, before).unwrap();
    // A project install first: --user takes ckpt out of the project file.
    assert_eq!(ckpt(&env, &["init", "--hooks", "gemini"], &[]).code, 0);
    let r = ckpt(&env, &["init", "--hooks", "gemini", "--user"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = read_json(&user);
    assert_eq!(doc["theme"], "dark");
    let cmd = doc["hooks"]["BeforeTool"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap();
    assert!(
        cmd.ends_with("hook pre --only-initialized --format gemini"),
        "{cmd}"
    );
    let project = read_json(&env.ws.join(".gemini/settings.json"));
    assert!(project.get("hooks").is_none(), "{project}");
    let (_, rep) = doctor(&env, &[("GEMINI_CLI_TRUST_WORKSPACE", "true")]);
    let g = agent(&rep, "gemini");
    assert_eq!(g["files"].as_array().unwrap().len(), 1, "{rep}");
    assert_eq!(g["files"][0]["scope"], "user");
    assert!(codes(&rep, "gemini").is_empty(), "{rep}");
    // Again: nothing added twice.
    let r = ckpt(&env, &["init", "--hooks", "gemini", "--user"], &[]);
    assert!(r.stdout.contains("already has"), "{}", r.stdout);
    // Out again: the file as it was.
    let r = ckpt(
        &env,
        &["init", "--hooks", "gemini", "--user", "--remove"],
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(read_json(&user), serde_json::json!({"theme": "dark"}));
    // Not for every agent.
    let r = ckpt(&env, &["init", "--hooks", "codex", "--user"], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn hooks_in_both_files_and_the_last_call_are_reported() {
    let env = TestEnv::init();
    let claude_dir: PathBuf = env.home.join("claude-config");
    let cd = claude_dir.to_str().unwrap();
    assert_eq!(ckpt(&env, &["init", "--hooks", "claude"], &[]).code, 0);
    let r = ckpt(
        &env,
        &["init", "--hooks", "claude", "--user"],
        &[("CLAUDE_CONFIG_DIR", cd)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(claude_dir.join("settings.json").exists());
    // Put back in the project file by hand: both now run.
    assert_eq!(ckpt(&env, &["init", "--hooks", "claude"], &[]).code, 0);
    let (_, rep) = doctor(&env, &[("CLAUDE_CONFIG_DIR", cd)]);
    assert!(
        codes(&rep, "claude").contains(&"hooks_twice".to_string()),
        "{rep}"
    );
    assert_eq!(agent(&rep, "claude")["calls"], 0);
    let payload = serde_json::json!({
        "session_id": "s", "tool_use_id": "c1", "cwd": env.ws,
        "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_input": {"command": "true"},
    });
    let r =
        crate::common::run_with_stdin(&env, &["hook", "pre"], payload.to_string().as_bytes(), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (_, rep) = doctor(&env, &[("CLAUDE_CONFIG_DIR", cd)]);
    let c = agent(&rep, "claude");
    assert_eq!(c["calls"], 1, "{rep}");
    assert!(c["last_call_at"].is_string(), "{rep}");
    assert!(agent(&rep, "gemini")["last_call_at"].is_null());
}
