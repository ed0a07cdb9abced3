//! The commands of the core as a user runs them: init, checkpoint, log, show,
//! verify, demo; exit codes, one-line errors and file modes (T25).

use crate::common::{TestEnv, walk_modes};

#[test]
fn init_creates_a_private_runtime_and_is_idempotent() {
    let env = TestEnv::new();
    let r = env.ckpt(&["init"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("initialised"), "{}", r.stdout);
    let rt = env.rt();
    assert_eq!(
        std::fs::read_to_string(rt.join(".gitignore")).unwrap(),
        "*\n"
    );
    let config = std::fs::read_to_string(rt.join("config.toml")).unwrap();
    assert_eq!(
        config,
        include_str!("../.agent-runtime/config.toml"),
        "init writes the repository's default config"
    );
    let before = walk_modes(&rt);
    let r2 = env.ckpt(&["init"]);
    assert_eq!(r2.code, 0);
    assert!(r2.stdout.contains("already initialised"), "{}", r2.stdout);
    assert_eq!(walk_modes(&rt), before, "a second init changes nothing");
}

#[test]
fn commands_before_init_fail_with_one_line_that_says_what_to_do() {
    let env = TestEnv::new();
    for cmd in [&["log"][..], &["checkpoint"], &["verify"], &["show", "x"]] {
        let r = env.ckpt(cmd);
        assert_eq!(r.code, 1, "{cmd:?}");
        assert_eq!(r.stderr.lines().count(), 1, "one line: {}", r.stderr);
        assert!(r.stderr.contains("ckpt init"), "{}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    }
    assert!(!env.rt().exists(), "nothing was created");
}

#[test]
fn usage_errors_exit_2() {
    let env = TestEnv::init();
    assert_eq!(env.ckpt(&["no-such-command"]).code, 2);
    assert_eq!(env.ckpt(&["checkpoint", "--bogus"]).code, 2);
    assert_eq!(env.ckpt(&["show"]).code, 2);
}

#[test]
fn checkpoint_prints_its_id_and_json_has_the_contract_shape() {
    let env = TestEnv::init();
    let r = env.ckpt(&["checkpoint", "-m", "first"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.stdout.trim();
    assert!(
        id.starts_with("ckpt_") && !id.contains(' '),
        "human mode prints the id alone: {id:?}"
    );
    assert!(env.rt().join(format!("checkpoints/{id}.json")).is_file());

    let j = env
        .ckpt(&["checkpoint", "--json", "-m", "second", "--session", "s1"])
        .json();
    assert!(j["checkpoint"].as_str().unwrap().starts_with("ckpt_"));
    assert_eq!(
        j["upto_seq"], 1,
        "the second checkpoint covers the first record"
    );
}

#[test]
fn log_json_lists_records_oldest_first_with_the_common_fields() {
    let env = TestEnv::init();
    for i in 0..3 {
        assert_eq!(env.ckpt(&["checkpoint", "-m", &format!("c{i}")]).code, 0);
    }
    let j = env.ckpt(&["log", "--json"]).json();
    let recs = j["records"].as_array().unwrap();
    assert_eq!(recs.len(), 3);
    let mut prev = serde_json::Value::Null;
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r["v"], 1);
        assert_eq!(r["seq"], i as u64 + 1);
        assert_eq!(r["kind"], "checkpoint");
        assert!(r["ts"].as_str().unwrap().ends_with('Z'));
        assert_eq!(r["prev"], prev, "prev is the previous record's hash");
        assert!(r["hash"].as_str().unwrap().starts_with("sha256:"));
        assert_eq!(r["label"], format!("c{i}"));
        prev = r["hash"].clone();
    }
    let human = env.ckpt(&["log"]);
    assert_eq!(human.stdout.lines().count(), 3, "{}", human.stdout);
    assert!(human.stdout.contains("\"c1\""));
    let last = env.ckpt(&["log", "-n", "1", "--json"]).json();
    assert_eq!(last["records"].as_array().unwrap().len(), 1);
    assert_eq!(last["records"][0]["seq"], 3);
}

#[test]
fn show_finds_checkpoints_calls_and_patches_and_refuses_unknown_ids() {
    let env = TestEnv::init();
    // Record a call through the library, then look at it with the binary.
    let ws = env.open();
    let p = ws.rel_path(b"src/a.txt", None).unwrap();
    let mut call = ws
        .begin_call(ckpt::CallOptions {
            tool: "Write".into(),
            call: Some("toolu_1".into()),
            ..Default::default()
        })
        .unwrap();
    call.write_file(&p, b"one\ntwo\n").unwrap();
    let stats = call.finish(ckpt::CallStatus::Succeeded, None).unwrap();
    let patch = &stats.patches[0].patch;

    let r = env.ckpt(&["show", "toolu_1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("call toolu_1"), "{}", r.stdout);
    assert!(
        r.stdout.contains("+++ b/src/a.txt") && r.stdout.contains("+two"),
        "{}",
        r.stdout
    );

    let j = env.ckpt(&["show", patch, "--json"]).json();
    assert_eq!(j["kind"], "patch");
    assert_eq!(j["records"][0]["op"], "create");
    assert!(
        j["diffs"][patch]
            .as_str()
            .unwrap()
            .contains("new file mode 100644")
    );

    let cp = env
        .ckpt(&["checkpoint", "-m", "x"])
        .stdout
        .trim()
        .to_string();
    let r = env.ckpt(&["show", &cp]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("anchors seq 3"), "{}", r.stdout);

    let bad = env.ckpt(&["show", "call_nope"]);
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("ckpt log"), "{}", bad.stderr);
    let badj = env.ckpt(&["show", "call_nope", "--json"]);
    assert_eq!(
        badj.json()["exit_code"],
        1,
        "--json errors are a JSON document too"
    );
}

#[test]
fn verify_reports_ok_with_counts() {
    let env = TestEnv::init();
    env.ckpt(&["checkpoint"]);
    let r = env.ckpt(&["verify"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("ok: 1 records"), "{}", r.stdout);
    let j = env.ckpt(&["verify", "--json"]).json();
    assert_eq!(j["ok"], true);
    assert_eq!(j["records"], 1);
    assert_eq!(j["problems"], serde_json::json!([]));
}

#[test]
fn modes_are_private_whatever_the_umask() {
    // 277 and 177 take bits away from 0600 itself: ckpt must set them back
    // (it skips its `fchmod` only when the umask it read removes none).
    for umask in ["000", "077", "022", "277", "177"] {
        let env = TestEnv::new();
        std::fs::write(env.ws.join("a.txt"), "one\n").unwrap();
        let hook = |event: &str| {
            format!(
                "printf '%s' '{{\"session_id\":\"s\",\"hook_event_name\":\"{event}\",\"tool_name\":\"Bash\",\"tool_input\":{{\"command\":\"x\"}},\"tool_use_id\":\"t1\"}}' | \"$0\" hook {}",
                if event == "PreToolUse" { "pre" } else { "post" }
            )
        };
        // A shell call that changes a file and creates one: blobs, a patch,
        // snapshots and state files are all created under this umask.
        let script = format!(
            "umask {umask} && \"$0\" init && \"$0\" checkpoint -m a >/dev/null && \"$0\" checkpoint -m b >/dev/null && {} && echo two >> a.txt && echo new > b.txt && {}",
            hook("PreToolUse"),
            hook("PostToolUse")
        );
        let mut c = env.command(&[]);
        c.env_remove("NO_COLOR");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .arg(crate::common::bin())
            .env("CKPT_WORKSPACE", &env.ws)
            .current_dir(&env.ws)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let patches = std::fs::read_dir(env.rt().join("artifacts/patches"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(patches, 2, "umask {umask}: the shell call's two patches");
        let rt_mode = std::fs::metadata(env.rt())
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
            .unwrap();
        assert_eq!(rt_mode, 0o700, "umask {umask}: .agent-runtime");
        for (path, mode, is_dir) in walk_modes(&env.rt()) {
            let want = if is_dir { 0o700 } else { 0o600 };
            assert_eq!(mode, want, "umask {umask}: {} has {mode:o}", path.display());
        }
    }
}

#[test]
fn runtime_dir_from_a_checkout_is_made_private() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::init();
    std::fs::set_permissions(env.rt(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(env.ckpt(&["checkpoint"]).code, 0);
    assert_eq!(
        std::fs::metadata(env.rt()).unwrap().permissions().mode() & 0o777,
        0o700
    );
}

#[test]
fn workspace_is_the_git_top_level_from_a_subdirectory() {
    let env = TestEnv::new();
    git2::Repository::init(&env.ws).unwrap();
    std::fs::create_dir_all(env.ws.join("a/b")).unwrap();
    let mut c = env.command(&["init", "--json"]);
    c.env_remove("CKPT_WORKSPACE")
        .current_dir(env.ws.join("a/b"));
    let r = crate::common::run(c.output().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(env.rt().is_dir(), "runtime created at the top level");
    assert!(!env.ws.join("a/b/.agent-runtime").exists());
    // And a checkpoint records the git state (unborn branch: no head yet).
    let mut c = env.command(&["checkpoint"]);
    c.env_remove("CKPT_WORKSPACE").current_dir(env.ws.join("a"));
    assert_eq!(crate::common::run(c.output().unwrap()).code, 0);
    let j = env.ckpt(&["log", "--json"]).json();
    let git = &j["records"][0]["git"];
    assert_eq!(git["head"], serde_json::Value::Null);
    assert!(git["branch"].is_string(), "{git}");
}

#[test]
fn outside_git_the_nearest_initialised_ancestor_is_used() {
    let env = TestEnv::init();
    std::fs::create_dir_all(env.ws.join("deep/er")).unwrap();
    let mut c = env.command(&["checkpoint", "--json"]);
    c.env_remove("CKPT_WORKSPACE")
        .current_dir(env.ws.join("deep/er"));
    let r = crate::common::run(c.output().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!env.ws.join("deep/er/.agent-runtime").exists());
}

#[test]
fn demo_runs_to_the_end() {
    let env = TestEnv::new();
    let dir = env.dir.path().join("demo");
    let r = env.ckpt(&["demo", "--dir", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("verify  → ok"), "{}", r.stdout);
    assert!(
        r.stdout.contains("FAILED (exit 4)"),
        "the tamper step is detected: {}",
        r.stdout
    );
    assert!(
        !dir.exists(),
        "the scratch workspace is removed without --keep"
    );
}

#[test]
fn init_hooks_merges_into_claude_settings_and_twice_changes_nothing() {
    let env = TestEnv::new();
    env.write(
        ".claude/settings.local.json",
        br#"{"permissions":{"allow":["Bash(ls)"]},"hooks":{"PostToolUse":[{"matcher":"Write","hooks":[{"type":"command","command":"./fmt.sh"}]}]}}"#,
    );
    let r = env.ckpt(&["init", "--hooks", "claude"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let first = std::fs::read(env.ws.join(".claude/settings.local.json")).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(
        v["permissions"]["allow"][0], "Bash(ls)",
        "what was there is kept"
    );
    let post = v["hooks"]["PostToolUse"].as_array().unwrap();
    assert_eq!(post[0]["hooks"][0]["command"], "./fmt.sh");
    assert!(
        post[1]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .ends_with("hook post")
    );
    for ev in [
        "PreToolUse",
        "PostToolUseFailure",
        "UserPromptSubmit",
        "SessionStart",
    ] {
        assert_eq!(v["hooks"][ev].as_array().unwrap().len(), 1, "{ev}");
    }
    let r = env.ckpt(&["init", "--hooks", "claude"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("nothing changed"), "{}", r.stdout);
    assert_eq!(
        std::fs::read(env.ws.join(".claude/settings.local.json")).unwrap(),
        first,
        "byte for byte"
    );
    for agent in ["codex", "gemini", "cursor"] {
        let r = env.ckpt(&["init", "--hooks", agent]);
        assert_eq!(r.code, 0, "{agent}");
        // Gemini CLI reads project hooks only where it starts: said at once.
        assert_eq!(
            r.stderr
                .contains("a session started in a subdirectory records nothing"),
            agent == "gemini",
            "{agent}: {}",
            r.stderr
        );
    }
    assert!(
        env.ws.join(".gemini/settings.json").is_file()
            && env.ws.join(".cursor/hooks.json").is_file()
    );
    assert_eq!(env.ckpt(&["init", "--hooks", "vim"]).code, 2);
    env.write(".codex/hooks.json", b"[1, 2]");
    let r = env.ckpt(&["init", "--hooks", "codex"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        std::fs::read(env.ws.join(".codex/hooks.json")).unwrap(),
        b"[1, 2]",
        "a file ckpt cannot merge is left alone"
    );
}

#[test]
fn status_and_diff_show_the_agents_changes_only() {
    let env = TestEnv::init();
    env.write("keep.txt", b"user file\n");
    let r = env.ckpt(&[
        "exec",
        "--call",
        "c1",
        "--",
        "sh",
        "-c",
        "printf 'agent\\n' > a.txt",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cp = env.ckpt(&["checkpoint"]).stdout.trim().to_string();
    env.ckpt(&[
        "exec",
        "--call",
        "c2",
        "--",
        "sh",
        "-c",
        "printf 'second\\n' > b.txt",
    ]);
    env.write("a.txt", b"agent\nand the user\n");
    let s = env.ckpt(&["status", "--json"]).json();
    let files: Vec<&str> = s["agent_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["a.txt", "b.txt"]);
    assert_eq!(s["user_edited"][0]["path"], "a.txt");
    assert_eq!(s["conflicts"], 0);
    assert_eq!(s["uncertain"], 0);
    // The diff is what a rollback would take out now: a.txt, created by the
    // agent and edited by the user since, would conflict, so it is named on
    // stderr instead.
    let d = env.ckpt(&["diff"]);
    assert!(
        !d.stdout.contains("+agent") && d.stdout.contains("+second") && !d.stdout.contains("user"),
        "{}",
        d.stdout
    );
    assert!(d.stderr.contains("a.txt: not shown"), "{}", d.stderr);
    let d = env.ckpt(&["diff", "--since", &cp]);
    assert!(
        !d.stdout.contains("+agent") && d.stdout.contains("+second"),
        "{}",
        d.stdout
    );
    env.write("a.txt", b"agent\n");
    let d = env.ckpt(&["diff", "--call", "c1"]);
    assert!(d.stdout.contains("+agent") && !d.stdout.contains("+second"));
    assert_eq!(env.ckpt(&["diff", "--call", "nope"]).code, 1);
}

#[test]
fn init_hooks_registers_the_prompt_and_session_hooks_undo_needs() {
    for (agent, file, events) in [
        (
            "codex",
            ".codex/hooks.json",
            &[
                "PreToolUse",
                "PostToolUse",
                "UserPromptSubmit",
                "SessionStart",
            ][..],
        ),
        (
            "gemini",
            ".gemini/settings.json",
            &["BeforeTool", "AfterTool", "BeforeAgent", "SessionStart"][..],
        ),
    ] {
        let env = TestEnv::new();
        let r = env.ckpt(&["init", "--hooks", agent]);
        assert_eq!(r.code, 0, "{agent}: {}", r.stderr);
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(env.ws.join(file)).unwrap()).unwrap();
        for ev in events {
            assert_eq!(
                v["hooks"][ev].as_array().map(|a| a.len()),
                Some(1),
                "{agent} {ev}: {v:#}"
            );
        }
    }
}

#[test]
fn init_hooks_remove_takes_out_only_ckpts_hooks() {
    let env = TestEnv::new();
    let orig = br#"{"permissions":{"allow":["Bash(ls)"]},"hooks":{"PostToolUse":[{"matcher":"Write","hooks":[{"type":"command","command":"./fmt.sh"}]}]}}"#;
    env.write(".claude/settings.local.json", orig);
    assert_eq!(env.ckpt(&["init", "--hooks", "claude"]).code, 0);
    let r = env.ckpt(&["init", "--hooks", "claude", "--remove"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("removed 7 ckpt hook(s)"), "{}", r.stdout);
    let now: serde_json::Value =
        serde_json::from_slice(&std::fs::read(env.ws.join(".claude/settings.local.json")).unwrap())
            .unwrap();
    let want: serde_json::Value = serde_json::from_slice(orig).unwrap();
    assert_eq!(now, want);
    let r = env.ckpt(&["init", "--hooks", "claude", "--remove"]);
    assert!(r.stdout.contains("nothing changed"), "{}", r.stdout);
    assert_eq!(
        env.ckpt(&["init", "--remove"]).code,
        2,
        "--remove needs --hooks"
    );
}

#[test]
fn claude_hooks_go_where_a_session_started_in_a_subdirectory_reads_them() {
    // Claude Code 2.1 reads .claude/settings.json only in the directory a
    // session starts in, .claude/settings.local.json also at the project
    // root (tests/real_agents, scenario 3): hooks an older ckpt put in
    // settings.json move, so no event runs ckpt twice.
    let env = TestEnv::new();
    let old = br#"{"model":"m","hooks":{"PreToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"/old/ckpt hook pre","timeout":30}]},{"matcher":"Bash","hooks":[{"type":"command","command":"./lint.sh"}]}]}}"#;
    env.write(".claude/settings.json", old);
    let r = env.ckpt(&["init", "--hooks", "claude"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("moved ckpt's hooks out of .claude/settings.json"),
        "{}",
        r.stdout
    );
    let shared: serde_json::Value =
        serde_json::from_slice(&std::fs::read(env.ws.join(".claude/settings.json")).unwrap())
            .unwrap();
    assert_eq!(
        shared,
        serde_json::json!({"model":"m","hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"./lint.sh"}]}]}})
    );
    let local: serde_json::Value =
        serde_json::from_slice(&std::fs::read(env.ws.join(".claude/settings.local.json")).unwrap())
            .unwrap();
    assert_eq!(local["hooks"]["PreToolUse"].as_array().unwrap().len(), 1);
    // A session started in a subdirectory is recorded at the git root.
    std::fs::create_dir_all(env.ws.join("src")).unwrap();
    env.write("src/a.txt", b"a\n");
    let payload = |event: &str| {
        serde_json::json!({"session_id": "s", "transcript_path": "/dev/null",
            "cwd": env.ws.join("src"), "hook_event_name": event, "tool_name": "Write",
            "tool_use_id": "t1", "tool_input": {"file_path": env.ws.join("src/a.txt"), "content": "b\n"},
            "tool_response": {"type": "update"}})
        .to_string()
    };
    let mut c = env.command(&["hook", "pre"]);
    c.current_dir(env.ws.join("src"))
        .env_remove("CKPT_WORKSPACE");
    let r = crate::common::run_with_stdin_cmd(c, payload("PreToolUse").as_bytes());
    assert_eq!(r.code, 0, "{}", r.stderr);
    env.write("src/a.txt", b"b\n");
    let mut c = env.command(&["hook", "post"]);
    c.current_dir(env.ws.join("src"))
        .env_remove("CKPT_WORKSPACE");
    let r = crate::common::run_with_stdin_cmd(c, payload("PostToolUse").as_bytes());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let log = env.ckpt(&["log", "--json"]).json();
    assert!(
        log["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "file_patch" && r["path"] == "src/a.txt"),
        "{log:#}"
    );
}

#[test]
fn codex_hooks_are_trusted_only_with_consent_and_the_gap_is_said() {
    let env = TestEnv::new();
    let codex_home = env.home.join("codex-home");
    let config = codex_home.join("config.toml");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(&config, "model = \"m\"\n").unwrap();
    let home = codex_home.to_str().unwrap();
    let r = env.ckpt_env(&["init", "--hooks", "codex"], &[("CODEX_HOME", home)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("Codex will not run these hooks") && r.stderr.contains("--trust"),
        "the untrusted state is said: {}",
        r.stderr
    );
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "model = \"m\"\n",
        "nothing written without --trust"
    );
    let r = env.ckpt_env(
        &["init", "--hooks", "codex", "--trust"],
        &[("CODEX_HOME", home)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("wrote 8 trust entries"), "{}", r.stdout);
    let text = std::fs::read_to_string(&config).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(doc["model"].as_str(), Some("m"), "the rest is kept");
    let root = std::fs::canonicalize(&env.ws)
        .unwrap()
        .display()
        .to_string();
    assert_eq!(
        doc["projects"][&root]["trust_level"].as_str(),
        Some("trusted")
    );
    let state = doc["hooks"]["state"].as_table().unwrap();
    let key = format!("{root}/.codex/hooks.json:pre_tool_use:0:0");
    assert!(
        state[&key]["trusted_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{text}"
    );
    // Trusted now: said, and nothing more written (with ckpt on PATH, as
    // installed: the hooks run a bare `ckpt` when init runs from target/).
    let bin = env.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(crate::common::bin(), bin.join("ckpt")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let r = env.ckpt_env(
        &["init", "--hooks", "codex"],
        &[("CODEX_HOME", home), ("PATH", &path)],
    );
    assert!(
        r.stdout.contains("Codex trusts this project"),
        "{}",
        r.stdout
    );
    assert!(!r.stderr.contains("warning"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), text);
    assert_eq!(env.ckpt(&["init", "--hooks", "claude", "--trust"]).code, 2);
}

#[test]
fn status_names_a_files_newest_calls_and_counts_the_earlier_ones() {
    let env = TestEnv::init();
    for i in 0..6 {
        let r = env.ckpt(&[
            "exec",
            "--call",
            &format!("c{i}"),
            "--",
            "sh",
            "-c",
            &format!("echo {i} >> a.txt; echo {i} > b{}.txt", i / 4),
        ]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let s = env.ckpt(&["status"]).stdout;
    assert!(
        s.contains("  A  a.txt  by 3 earlier calls, then c3, c4, c5\n"),
        "{s}"
    );
    // Four or fewer are all named.
    assert!(s.contains("  A  b0.txt  by c0, c1, c2, c3\n"), "{s}");
    let j = env.ckpt(&["status", "--json"]).json();
    let a = j["agent_files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "a.txt")
        .unwrap();
    assert_eq!(
        a["calls"],
        serde_json::json!(["c0", "c1", "c2", "c3", "c4", "c5"])
    );
}
