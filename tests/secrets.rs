//! T24 secrets redaction: 30 canary secrets planted on every route where ckpt
//! keeps or prints free text (prompts, failed calls' errors of every agent
//! format, `ckpt exec`, session entries, a compensation's output fed from the
//! environment, error messages that quote payloads, `errors.jsonl`); then
//! every file under `.agent-runtime/` except the content stores (blobs and
//! patch artifacts) and everything ckpt printed is searched: no canary, and
//! each one's `«redacted:<rule>:<sha8>»` where its text was recorded.
//! More canaries go where ckpt records nothing but a hash (Bash commands,
//! tool responses, `ckpt exec`'s environment and arguments): found nowhere.
//! A file's content is exempt by design: exact in its blob and patch.

use std::path::{Path, PathBuf};

use crate::common::{Rng, Run, TestEnv, walk_modes};

/// Where a canary's redacted form must show up.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Seen {
    /// `ledger.jsonl`.
    Ledger,
    /// `ledger.jsonl` and the checkpoint files (labels).
    Label,
    /// `artifacts/outputs/*.out`.
    Output,
    /// `errors.jsonl`.
    Errors,
    /// The stderr of the command that planted it.
    Stderr,
}

struct Canary {
    rule: &'static str,
    /// The secret as the rule hashes it (a bearer's token, an assignment's value).
    secret: String,
    seen: Seen,
    /// What the command that planted it printed on stderr.
    stderr: String,
}

impl Canary {
    fn marker(&self) -> String {
        format!(
            "«redacted:{}:{}»",
            self.rule,
            &ckpt::ContentHash::of(self.secret.as_bytes()).hex()[..8]
        )
    }
}

/// Every form in which a secret could be found in a file or an output: as
/// is, JSON-escaped, and (multi-line keys) each long line alone.
fn needles(secret: &str) -> Vec<String> {
    let mut v = vec![secret.to_string()];
    let esc = serde_json::to_string(secret).unwrap();
    v.push(esc[1..esc.len() - 1].to_string());
    for l in secret.lines() {
        if l.len() >= 16 && !l.starts_with("-----") {
            v.push(l.to_string());
        }
    }
    v
}

/// Deterministic random tokens.
struct Gen(Rng);

impl Gen {
    fn chars(&mut self, set: &[u8], n: usize) -> String {
        (0..n)
            .map(|_| set[self.0.below(set.len() as u64) as usize] as char)
            .collect()
    }
    fn alnum(&mut self, n: usize) -> String {
        self.chars(
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            n,
        )
    }
    fn upper(&mut self, n: usize) -> String {
        self.chars(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", n)
    }
    fn b64(&mut self, n: usize) -> String {
        self.chars(
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
            n,
        )
    }
    fn aws(&mut self) -> String {
        format!("AKIA{}", self.upper(16))
    }
    fn ghp(&mut self, p: &str) -> String {
        format!("{p}_{}", self.alnum(36))
    }
    fn fine(&mut self) -> String {
        format!("github_pat_{}_{}", self.alnum(22), self.alnum(59))
    }
    fn glpat(&mut self) -> String {
        format!("glpat-{}", self.alnum(20))
    }
    fn ant(&mut self) -> String {
        format!("sk-ant-api03-{}AA", self.alnum(93))
    }
    fn proj(&mut self) -> String {
        format!("sk-proj-{}", self.alnum(48))
    }
    fn openai(&mut self) -> String {
        format!("sk-{}T3BlbkFJ{}", self.alnum(20), self.alnum(20))
    }
    fn slack(&mut self, k: char) -> String {
        format!(
            "xox{k}-{}-{}-{}",
            self.chars(b"0123456789", 12),
            self.chars(b"0123456789", 12),
            self.alnum(24)
        )
    }
    fn jwt(&mut self) -> String {
        format!(
            "eyJhbGciOiJIUzI1NiJ9.eyJ{}.{}",
            self.alnum(40),
            self.alnum(43)
        )
    }
    fn pem(&mut self, kind: &str) -> String {
        let body: Vec<String> = (0..6).map(|_| self.b64(64)).collect();
        format!(
            "-----BEGIN {kind}PRIVATE KEY-----\n{}\n-----END {kind}PRIVATE KEY-----",
            body.join("\n")
        )
    }
    fn value(&mut self) -> String {
        format!("v{}", self.alnum(23))
    }
}

fn hook(env: &TestEnv, args: &[&str], payload: &serde_json::Value, extra: &[(&str, &str)]) -> Run {
    let mut all = vec!["hook"];
    all.extend_from_slice(args);
    crate::common::run_with_stdin(env, &all, payload.to_string().as_bytes(), extra)
}

/// Every file under `.agent-runtime/` but the content stores.
fn runtime_texts(rt: &Path) -> Vec<(PathBuf, String)> {
    walk_modes(rt)
        .into_iter()
        .filter(|(p, _, dir)| {
            !dir && !p.starts_with(rt.join("artifacts/blobs"))
                && !p.starts_with(rt.join("artifacts/patches"))
        })
        .map(|(p, _, _)| {
            let t = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
            (p, t)
        })
        .collect()
}

fn read_all_under(dir: &Path) -> String {
    let mut s = String::new();
    if dir.exists() {
        for (p, _, d) in walk_modes(dir) {
            if !d {
                s.push_str(&String::from_utf8_lossy(&std::fs::read(p).unwrap()));
            }
        }
    }
    s
}

#[test]
fn thirty_canaries_never_reach_the_ledger_the_logs_or_the_terminal() {
    let t0 = std::time::Instant::now();
    let env = TestEnv::init();
    let ws = env.ws.to_str().unwrap().to_string();
    let mut g = Gen(Rng(0x5ec2_e724));
    let mut canaries: Vec<Canary> = Vec::new();
    let mut outputs: Vec<(String, Run)> = Vec::new();
    let mut ok = |what: &str, r: Run, codes: &[i32]| -> String {
        assert!(
            codes.contains(&r.code),
            "{what}: exit {} (want {codes:?})\nstdout: {}\nstderr: {}",
            r.code,
            r.stdout,
            r.stderr
        );
        let err = r.stderr.clone();
        outputs.push((what.to_string(), r));
        err
    };
    let mut add = |rule, secret: String, seen, stderr: &str| {
        canaries.push(Canary {
            rule,
            secret,
            seen,
            stderr: stderr.to_string(),
        })
    };

    // ---- Prompts and session starts: checkpoint labels (ledger + file). ----
    let s1 = g.ghp("ghp");
    let e = ok(
        "claude prompt",
        hook(
            &env,
            &["prompt"],
            &serde_json::json!({
        "session_id": "s-claude", "cwd": ws, "hook_event_name": "UserPromptSubmit",
        "prompt": format!("deploy with {s1} please\nand then stop")}),
            &[],
        ),
        &[0],
    );
    add("github-pat", s1, Seen::Label, &e);
    let s2 = g.aws();
    let e = ok(
        "claude prompt 2",
        hook(
            &env,
            &["prompt"],
            &serde_json::json!({
        "session_id": "s-claude", "cwd": ws, "hook_event_name": "UserPromptSubmit",
        "prompt": format!("the bucket key is {s2}")}),
            &[],
        ),
        &[0],
    );
    add("aws-access-key-id", s2, Seen::Label, &e);
    let s3 = g.pem("RSA ");
    let e = ok(
        "claude prompt pem",
        hook(
            &env,
            &["prompt"],
            &serde_json::json!({
        "session_id": "s-claude", "cwd": ws, "hook_event_name": "UserPromptSubmit",
        "prompt": format!("\n{s3}\nuse this key for the server")}),
            &[],
        ),
        &[0],
    );
    add("private-key", s3, Seen::Label, &e);
    let s4 = g.glpat();
    let e = ok(
        "gemini prompt",
        hook(
            &env,
            &["prompt"],
            &serde_json::json!({
        "session_id": "s-gemini", "cwd": ws, "hook_event_name": "BeforeAgent",
        "timestamp": "2026-03-14T09:29:00.000Z", "prompt": format!("clone with {s4}")}),
            &[],
        ),
        &[0],
    );
    add("gitlab-pat", s4, Seen::Label, &e);
    let s5 = g.ant();
    let e = ok(
        "cursor prompt",
        hook(
            &env,
            &["prompt"],
            &serde_json::json!({
        "conversation_id": "s-cursor", "workspace_roots": [ws], "hook_event_name": "beforeSubmitPrompt",
        "prompt": format!("my anthropic key: {s5}")}),
            &[],
        ),
        &[0],
    );
    add("anthropic-api-key", s5, Seen::Label, &e);
    let s6 = g.proj();
    let e = ok(
        "generic prompt",
        hook(
            &env,
            &["prompt", "--format", "generic"],
            &serde_json::json!({
        "session": "s-generic", "prompt": format!("OPENAI_API_KEY={s6}")}),
            &[],
        ),
        &[0],
    );
    add("openai-api-key", s6, Seen::Label, &e);
    let s7 = g.slack('b');
    let e = ok(
        "checkpoint -m",
        env.ckpt(&["checkpoint", "-m", &format!("rotate {s7} today")]),
        &[0],
    );
    add("slack-token", s7, Seen::Label, &e);
    let s8 = g.jwt();
    let e = ok(
        "session start",
        hook(
            &env,
            &["session-start"],
            &serde_json::json!({
        "session_id": "s-claude", "cwd": ws, "hook_event_name": "SessionStart",
        "source": format!("resume {s8}")}),
            &[],
        ),
        &[0],
    );
    add("jwt", s8, Seen::Label, &e);

    // ---- Failed calls: the `error` text of every agent format. ----
    let x_cmd = g.aws(); // in the Bash command only: never recorded
    let s9 = g.alnum(40);
    let bash_input = serde_json::json!({"command": format!("AWS_ACCESS_KEY_ID={x_cmd} curl -f https://api.example/deploy")});
    ok(
        "claude bash pre",
        hook(
            &env,
            &["pre"],
            &serde_json::json!({
        "session_id": "s-claude", "cwd": ws, "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_use_id": "toolu_bash1", "tool_input": bash_input}),
            &[],
        ),
        &[0],
    );
    let e = ok(
        "claude bash failure",
        hook(
            &env,
            &["post-failure"],
            &serde_json::json!({
        "session_id": "s-claude", "cwd": ws, "hook_event_name": "PostToolUseFailure", "tool_name": "Bash",
        "tool_use_id": "toolu_bash1", "tool_input": bash_input,
        "error": format!("Exit code 22\n> GET /deploy\n> Authorization: Bearer {s9}\ncurl: (22) 401")}),
            &[],
        ),
        &[0],
    );
    add("bearer-token", s9, Seen::Ledger, &e);
    let (s10, s11) = (g.value(), g.value());
    let e = ok(
        "claude env dump failure",
        hook(
            &env,
            &["post-failure"],
            &serde_json::json!({
        "session_id": "s-claude", "cwd": ws, "hook_event_name": "PostToolUseFailure", "tool_name": "Bash",
        "tool_use_id": "toolu_bash2", "tool_input": {"command": "cat .env && false"},
        "error": format!("Exit code 1\nPORT=8080\nDB_PASSWORD={s10}\nexport STRIPE_SECRET_KEY=\"{s11}\"\n")}),
            &[],
        ),
        &[0],
    );
    add("env-assignment", s10, Seen::Ledger, &e);
    add("env-assignment", s11, Seen::Ledger, &e);
    let s12 = g.jwt();
    let e = ok(
        "claude mcp failure",
        hook(
            &env,
            &["post-failure"],
            &serde_json::json!({
        "session_id": "s-claude", "cwd": ws, "hook_event_name": "PostToolUseFailure",
        "tool_name": "mcp__api__call", "tool_use_id": "toolu_mcp1", "tool_input": {"q": "x"},
        "error": format!("401 Unauthorized: token {s12} expired")}),
            &[],
        ),
        &[0],
    );
    add("jwt", s12, Seen::Ledger, &e);
    let s13 = g.openai();
    let e = ok(
        "codex failure",
        hook(
            &env,
            &["post-failure"],
            &serde_json::json!({
        "session_id": "s-codex", "turn_id": "turn-1", "model": "gpt-5", "cwd": ws,
        "hook_event_name": "PostToolUseFailure", "tool_name": "shell", "tool_use_id": "call_codex1",
        "tool_input": {"command": ["bash", "-lc", "make deploy"]},
        "error": format!("Error: invalid key {s13}")}),
            &[],
        ),
        &[0],
    );
    add("openai-api-key", s13, Seen::Ledger, &e);
    let s14 = g.fine();
    let e = ok(
        "gemini failure",
        hook(
            &env,
            &["post-failure"],
            &serde_json::json!({
        "session_id": "s-gemini", "cwd": ws, "hook_event_name": "AfterTool",
        "timestamp": "2026-03-14T09:29:04.500Z", "tool_name": "run_shell_command",
        "tool_input": {"command": "gh release create v1"},
        "tool_response": {"error": {"message": format!("HTTP 401 for {s14}"), "type": "shell_execute_error"}}}),
            &[],
        ),
        &[0],
    );
    add("github-fine-grained-pat", s14, Seen::Ledger, &e);
    let s15 = g.slack('p');
    let e = ok(
        "cursor failure",
        hook(
            &env,
            &["post-failure"],
            &serde_json::json!({
        "conversation_id": "s-cursor", "workspace_roots": [ws], "hook_event_name": "postToolUseFailure",
        "tool_name": "slack_post", "tool_use_id": "cur-1", "tool_input": {"channel": "ops"},
        "error": format!("invalid_auth ({s15})")}),
            &[],
        ),
        &[0],
    );
    add("slack-token", s15, Seen::Ledger, &e);
    let s16 = format!("ASIA{}", g.upper(16));
    let e = ok(
        "generic failure",
        hook(
            &env,
            &["post", "--format", "generic"],
            &serde_json::json!({
        "session": "s-generic", "call": "g-1", "status": "failed",
        "error": format!("AccessDenied for {s16}")}),
            &[],
        ),
        &[0],
    );
    add("aws-access-key-id", s16, Seen::Ledger, &e);
    let s17 = g.pem("EC ");
    let e = ok(
        "generic failure result.error",
        hook(
            &env,
            &["post", "--format", "generic"],
            &serde_json::json!({
        "session": "s-generic", "call": "g-2", "status": "failed",
        "result": {"error": format!("bad key:\n{s17}\n")}}),
            &[],
        ),
        &[0],
    );
    add("private-key", s17, Seen::Ledger, &e);
    let s18 = g.ghp("ghs");
    let e = ok(
        "exec of a missing program",
        env.ckpt(&["exec", "--", &format!("/nonexistent/{s18}/run")]),
        &[127],
    );
    assert!(
        !e.contains(&s18) && e.contains("«redacted:github-pat:"),
        "exec's own error is redacted: {e}"
    );
    add("github-pat", s18, Seen::Ledger, &e);

    // ---- Session entries. ----
    let s19 = g.ant();
    let e = ok(
        "session message",
        env.ckpt(&[
            "session",
            "append",
            "--session",
            "s-app",
            "--type",
            "message",
            "--payload",
            &serde_json::json!({"role": "user", "text": format!("here is {s19}")}).to_string(),
        ]),
        &[0],
    );
    add("anthropic-api-key", s19, Seen::Ledger, &e);
    let s20 = g.value();
    let e = ok(
        "session app_state",
        env.ckpt(&[
            "session",
            "append",
            "--session",
            "s-app",
            "--type",
            "app_state",
            "--payload",
            &serde_json::json!({"env": ["X=1", format!("API_KEY={s20}")], "n": 3}).to_string(),
        ]),
        &[0],
    );
    add("env-assignment", s20, Seen::Ledger, &e);
    let s21 = g.alnum(32);
    let e = ok(
        "session compaction",
        env.ckpt(&[
            "session",
            "append",
            "--session",
            "s-app",
            "--type",
            "compaction",
            "--payload",
            &serde_json::json!({"summary": "called the API",
            "notes": {"deep": [format!("-H 'Authorization: Bearer {s21}'")]}})
            .to_string(),
        ]),
        &[0],
    );
    add("bearer-token", s21, Seen::Ledger, &e);
    let s22 = g.pem("OPENSSH ");
    let e = ok("session message pem", env.ckpt(&["session", "append", "--session", "s-app", "--type", "message",
        "--payload", &serde_json::json!({"role": "assistant", "content": [{"type": "text", "text": format!("generated:\n{s22}")}]}).to_string()]), &[0]);
    add("private-key", s22, Seen::Ledger, &e);

    // ---- A compensation that prints secrets from its environment. ----
    let (s23, s24) = (g.ghp("ghp"), g.value());
    ok(
        "compensable pre",
        hook(
            &env,
            &["pre", "--format", "generic"],
            &serde_json::json!({
        "session": "s-generic", "call": "g-deploy", "tool": "deploy", "side_effects": ["network"],
        "compensation": {"argv": ["sh", "-c", "printf 'token %s\\n%s\\n' \"$DEPLOY_TOKEN\" \"$DB_LINE\""]}}),
            &[],
        ),
        &[0],
    );
    ok(
        "compensable post",
        hook(
            &env,
            &["post", "--format", "generic"],
            &serde_json::json!({
        "session": "s-generic", "call": "g-deploy", "status": "succeeded"}),
            &[],
        ),
        &[0],
    );
    let db_line = format!("DATABASE_PASSWORD={s24}");
    let e = ok(
        "compensate",
        env.ckpt_env(
            &["compensate", "g-deploy"],
            &[("DEPLOY_TOKEN", &s23), ("DB_LINE", &db_line)],
        ),
        &[0],
    );
    add("github-pat", s23, Seen::Output, &e);
    add("env-assignment", s24, Seen::Output, &e);

    // ---- Errors that quote the payload or the command line. ----
    let s25 = g.glpat();
    let s27 = g.ant();
    let e = ok(
        "refused outside write",
        hook(
            &env,
            &["pre"],
            &serde_json::json!({
        "session_id": "s-claude", "cwd": ws, "hook_event_name": "PreToolUse", "tool_name": "Write",
        "tool_use_id": s27, "tool_input": {"file_path": format!("/outside-ws/{s25}/x.txt"), "content": "x"}}),
            &[],
        ),
        &[1, 2],
    );
    add("gitlab-pat", s25, Seen::Stderr, &e);
    add("anthropic-api-key", s27, Seen::Errors, &e);
    let s26 = format!(
        "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJ{}.{}",
        g.alnum(60),
        g.alnum(86)
    );
    let e = ok(
        "unknown event",
        hook(
            &env,
            &["pre"],
            &serde_json::json!({
        "session_id": "s-claude", "cwd": ws, "hook_event_name": s26, "tool_name": "Bash",
        "tool_input": {}}),
            &[],
        ),
        &[1],
    );
    add("jwt", s26, Seen::Stderr, &e);
    let s28 = g.ghp("ghr");
    let e = ok("clap error", env.ckpt(&["verify", &s28]), &[2]);
    add("github-pat", s28, Seen::Stderr, &e);
    let s29 = g.aws();
    let e = ok("unknown id", env.ckpt(&["show", &s29]), &[1]);
    add("aws-access-key-id", s29, Seen::Stderr, &e);
    let s30 = g.value();
    let e = ok(
        "gemini failure json error",
        hook(
            &env,
            &["post-failure"],
            &serde_json::json!({
        "session_id": "s-gemini", "cwd": ws, "hook_event_name": "AfterTool",
        "timestamp": "2026-03-14T09:30:00.000Z", "tool_name": "run_shell_command",
        "tool_input": {"command": "./release.sh"},
        "tool_response": {"error": {"code": "E_AUTH", "detail": format!("export GITHUB_TOKEN={s30}")}}}),
            &[],
        ),
        &[0],
    );
    add("env-assignment", s30, Seen::Ledger, &e);

    // ---- Routes where ckpt keeps only a hash: found nowhere. ----
    let mut extras = vec![x_cmd];
    let x_out = g.ghp("ghp");
    ok(
        "claude bash success",
        hook(
            &env,
            &["post"],
            &serde_json::json!({
        "session_id": "s-claude", "cwd": ws, "hook_event_name": "PostToolUse", "tool_name": "Bash",
        "tool_use_id": "toolu_bash3", "tool_input": {"command": "env | grep TOKEN"},
        "tool_response": {"stdout": format!("GH_TOKEN={x_out}"), "stderr": "", "interrupted": false}}),
            &[],
        ),
        &[0],
    );
    extras.push(x_out);
    let (x_env, x_arg) = (g.ghp("gho"), g.glpat());
    ok(
        "exec with a secret env and argument",
        env.ckpt_env(
            &["exec", "--", "sh", "-c", "exit 0", &x_arg],
            &[("GITHUB_TOKEN", &x_env)],
        ),
        &[0],
    );
    extras.push(x_env);
    extras.push(x_arg);
    let (x_in, x_res) = (g.value(), g.jwt());
    ok(
        "generic pre input",
        hook(
            &env,
            &["pre", "--format", "generic"],
            &serde_json::json!({
        "session": "s-generic", "call": "g-3", "tool": "http", "input": {"headers": {"x-api-key": x_in}}}),
            &[],
        ),
        &[0],
    );
    ok(
        "generic post result",
        hook(
            &env,
            &["post", "--format", "generic"],
            &serde_json::json!({
        "session": "s-generic", "call": "g-3", "status": "succeeded", "result": {"body": x_res}}),
            &[],
        ),
        &[0],
    );
    extras.push(x_in);
    extras.push(x_res);

    // ---- A file's content: kept exact in its blob and patch (exempt). ----
    let f_val = g.value();
    let content = format!("AWS_SECRET_ACCESS_KEY={f_val}\n");
    let write_input = serde_json::json!({"file_path": format!("{ws}/.env"), "content": content});
    ok(
        "write .env pre",
        hook(
            &env,
            &["pre"],
            &serde_json::json!({
        "session_id": "s-claude", "cwd": ws, "hook_event_name": "PreToolUse", "tool_name": "Write",
        "tool_use_id": "toolu_write1", "tool_input": write_input}),
            &[],
        ),
        &[0],
    );
    env.write(".env", content.as_bytes());
    ok(
        "write .env post",
        hook(
            &env,
            &["post"],
            &serde_json::json!({
        "session_id": "s-claude", "cwd": ws, "hook_event_name": "PostToolUse", "tool_name": "Write",
        "tool_use_id": "toolu_write1", "tool_input": write_input,
        "tool_response": {"type": "create", "filePath": format!("{ws}/.env"), "content": content}}),
            &[],
        ),
        &[0],
    );

    // ---- Read everything back through the CLI. ----
    for args in [
        &["log"][..],
        &["log", "--json"],
        &["status"],
        &["status", "--json"],
        &["session", "show", "--session", "s-app"],
        &["session", "show", "--session", "s-app", "--json"],
        &["show", "toolu_bash1"],
        &["show", "toolu_bash2"],
        &["show", "toolu_mcp1"],
        &["show", "call_codex1"],
        &["show", "g-1"],
        &["show", "g-2"],
        &["show", "g-deploy", "--json"],
        &["compensate", "g-deploy", "--dry-run"],
        &["conflicts"],
    ] {
        let r = env.ckpt(args);
        ok(&args.join(" "), r, &[0, 1]);
    }
    let recover = env.ckpt(&["recover"]);
    ok("recover", recover, &[0, 5]);
    ok("recover --json", env.ckpt(&["recover", "--json"]), &[0, 5]);
    let verify = env.ckpt(&["verify"]);
    assert_eq!(verify.code, 0, "the chain holds: {}", verify.stderr);
    ok("verify", verify, &[0]);
    let diff = env.ckpt(&["diff"]);
    ok("diff", diff, &[0]);

    // ---- 30 planted where text is kept or shown. ----
    assert_eq!(canaries.len(), 30);
    let mut secrets: Vec<&str> = canaries.iter().map(|c| c.secret.as_str()).collect();
    secrets.extend(extras.iter().map(String::as_str));
    secrets.sort();
    secrets.dedup();
    assert_eq!(secrets.len(), 30 + extras.len(), "every canary is distinct");

    let rt = env.rt();
    let files = runtime_texts(&rt);
    let diff_out = &outputs.iter().find(|(w, _)| w == "diff").unwrap().1.stdout;
    let mut hits = Vec::new();
    for s in &secrets {
        for n in needles(s) {
            for (p, t) in &files {
                if t.contains(&n) {
                    hits.push(format!("{} in {}", &s[..12], p.display()));
                }
            }
            for (what, r) in &outputs {
                if r.stdout.contains(&n) || r.stderr.contains(&n) {
                    hits.push(format!("{} in the output of `{what}`", &s[..12]));
                }
            }
        }
    }
    // The file's content: in no record, log or note, only in the content stores.
    for (p, t) in &files {
        if t.contains(&f_val) {
            hits.push(format!("the .env content in {}", p.display()));
        }
    }
    assert!(hits.is_empty(), "canaries leaked:\n{}", hits.join("\n"));

    // ---- 30/30 accounted for: each marker where its text was recorded. ----
    let text = |name: &str| {
        files
            .iter()
            .filter(|(p, _)| p.starts_with(rt.join(name)))
            .map(|(_, t)| t.as_str())
            .collect::<String>()
    };
    let ledger = text("ledger.jsonl");
    let checkpoints = text("checkpoints");
    let errors = text("errors.jsonl");
    let outs = read_all_under(&rt.join("artifacts/outputs"));
    let mut missing = Vec::new();
    for c in &canaries {
        let m = c.marker();
        let found = match c.seen {
            Seen::Ledger => ledger.contains(&m),
            Seen::Label => ledger.contains(&m) && checkpoints.contains(&m),
            Seen::Output => outs.contains(&m),
            Seen::Errors => errors.contains(&m),
            Seen::Stderr => c.stderr.contains(&m),
        };
        if !found {
            missing.push(format!("{} ({:?}): {m}", c.rule, c.seen));
        }
    }
    assert!(
        missing.is_empty(),
        "markers not found:\n{}",
        missing.join("\n")
    );
    let rules: std::collections::BTreeSet<&str> = canaries.iter().map(|c| c.rule).collect();
    assert_eq!(rules.len(), 11, "every rule is exercised: {rules:?}");
    // A recorded failure's redacted error reaches RECOVERY.md too.
    let note = std::fs::read_to_string(rt.join("RECOVERY.md")).unwrap();
    assert!(note.contains("«redacted:"), "{note}");

    // ---- The content stores keep exact bytes, private, ignored by git. ----
    let blobs = read_all_under(&rt.join("artifacts/blobs"));
    assert!(
        blobs.contains(&content),
        "the blob holds the file's exact bytes"
    );
    let patches = read_all_under(&rt.join("artifacts/patches"));
    assert!(
        patches.contains(&format!("+{}", content.trim_end())),
        "the patch holds the exact line"
    );
    assert!(
        diff_out.contains(&f_val),
        "`ckpt diff` shows file contents as they are"
    );
    use std::os::unix::fs::PermissionsExt;
    let rt_mode = std::fs::metadata(&rt).unwrap().permissions().mode() & 0o777;
    assert_eq!(rt_mode, 0o700);
    let mut blob_files = 0;
    for (p, mode, dir) in walk_modes(&rt) {
        let want = if dir { 0o700 } else { 0o600 };
        assert_eq!(mode, want, "{} is {mode:o}", p.display());
        if !dir && p.starts_with(rt.join("artifacts/blobs")) {
            blob_files += 1;
        }
    }
    assert!(blob_files >= 1);
    let gi = std::fs::read_to_string(rt.join(".gitignore")).unwrap();
    assert!(
        gi.lines().any(|l| l.trim() == "*"),
        "`.gitignore` covers everything: {gi}"
    );
    let elapsed = t0.elapsed();
    eprintln!(
        "T24: 30/30 canaries redacted, {} more never recorded, in {elapsed:?}",
        extras.len()
    );
}

/// A compensation's argv is executed from the ledger, so it is kept there
/// exactly (DECISIONS.md); only its display is redacted, and what it prints
/// is redacted in its output file.
#[test]
fn a_compensation_argv_runs_exactly_and_is_shown_redacted() {
    let env = TestEnv::init();
    let tok = format!("ghp_{}", Gen(Rng(77)).alnum(36));
    let argv = serde_json::json!([
        "sh",
        "-c",
        "printf '%s' \"$1\" > got.txt; echo \"sent $1\"",
        "sh",
        tok
    ]);
    let r = hook(
        &env,
        &["pre", "--format", "generic"],
        &serde_json::json!({
        "session": "s", "call": "c-1", "tool": "notify", "side_effects": ["network"],
        "compensation": {"argv": argv}}),
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let ledger = std::fs::read_to_string(env.ledger_path()).unwrap();
    assert!(
        ledger.contains(&tok),
        "the argv is kept exactly where it is executed from"
    );
    let marker = format!(
        "«redacted:github-pat:{}»",
        &ckpt::ContentHash::of(tok.as_bytes()).hex()[..8]
    );
    for args in [
        &["compensate", "c-1", "--dry-run"][..],
        &["compensate", "c-1", "--dry-run", "--json"],
    ] {
        let r = env.ckpt(args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(
            !r.stdout.contains(&tok) && r.stdout.contains(&marker),
            "{}",
            r.stdout
        );
    }
    let r = env.ckpt(&["compensate", "c-1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        !r.stdout.contains(&tok) && !r.stderr.contains(&tok),
        "{}",
        r.stdout
    );
    assert_eq!(
        std::fs::read_to_string(env.ws.join("got.txt")).unwrap(),
        tok,
        "ran with the exact argv"
    );
    let out = read_all_under(&env.rt().join("artifacts/outputs"));
    assert_eq!(out, format!("sent {marker}\n"));
}
