//! The hook payloads of a scenario's steps, in each agent's shape (the
//! fixtures in `testdata/hooks/` and the real clients' captures show them),
//! and the `ckpt hook` command line each agent's settings run.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::{Agent, ToolStep, Who};

/// Which event of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Before the tool runs.
    Pre,
    /// After it succeeded.
    Post,
    /// After it failed.
    Failure,
}

/// What the runner knows when it builds a post payload.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The target file's text before the call (`None`: it did not exist, or
    /// the tool has no single target file).
    pub original: Option<Option<String>>,
    /// A shell command's output.
    pub output: String,
    /// The error text of a failed call.
    pub error: Option<String>,
}

/// The `ckpt hook` arguments the agent's settings run for `phase`
/// (`pre`, `post`, `post-failure`, `prompt`, `session-start`, `turn-end`).
pub fn hook_args(agent: Agent, phase: &str) -> Vec<String> {
    let mut args = vec!["hook".to_string(), phase.to_string()];
    let format = match agent {
        Agent::Claude => None,
        Agent::Codex => Some("codex"),
        Agent::Gemini => Some("gemini"),
        Agent::Cursor => Some("cursor"),
        Agent::Generic => Some("generic"),
    };
    if let Some(f) = format {
        args.push("--format".into());
        args.push(f.into());
    }
    args
}

/// Whether a tool runs a command line (its effect is `sh -c`).
pub fn is_shell(tool: &str) -> bool {
    matches!(
        tool,
        "Bash" | "shell" | "run_shell_command" | "exec_command" | "local_shell" | "container.exec"
    )
}

/// The tool input as the agent sends it: `$WS` replaced by the workspace,
/// and for agents that send absolute file paths, relative ones made absolute.
pub fn agent_input(step: &ToolStep, ws: &Path) -> Value {
    let ws_text = ws.to_string_lossy();
    let mut input = substitute(&step.input, &ws_text);
    if step.who.agent != Agent::Generic
        && let Value::Object(m) = &mut input
    {
        for key in ["file_path", "notebook_path", "absolute_path"] {
            if let Some(Value::String(p)) = m.get_mut(key)
                && !p.starts_with('/')
            {
                *p = ws.join(&*p).to_string_lossy().into_owned();
            }
        }
    }
    input
}

fn substitute(v: &Value, ws: &str) -> Value {
    match v {
        Value::String(s) => Value::String(s.replace("$WS", ws)),
        Value::Array(a) => Value::Array(a.iter().map(|i| substitute(i, ws)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), substitute(v, ws)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The hook phase and payload of one event of a tool call; `None` when the
/// agent sends no such event (Cursor's file edits have no "before").
pub fn tool_payload(
    step: &ToolStep,
    ws: &Path,
    event: Event,
    outcome: &Outcome,
) -> Option<(&'static str, Value)> {
    let input = agent_input(step, ws);
    let cwd = ws.to_string_lossy().into_owned();
    let tool = step.tool.as_str();
    let phase = match event {
        Event::Pre => "pre",
        Event::Post => "post",
        Event::Failure => "post-failure",
    };
    let mut doc = match step.who.agent {
        Agent::Claude | Agent::Codex => {
            let name = match (event, step.who.agent) {
                (Event::Pre, _) => "PreToolUse",
                (Event::Post, _) => "PostToolUse",
                (Event::Failure, Agent::Claude) => "PostToolUseFailure",
                // Codex has no failure event: a failed call's post says so.
                (Event::Failure, _) => "PostToolUse",
            };
            let mut d = json!({
                "session_id": step.who.session,
                "cwd": cwd,
                "permission_mode": "default",
                "hook_event_name": name,
                "tool_name": tool,
                "tool_input": input,
                "tool_use_id": step.call,
            });
            if step.who.agent == Agent::Codex {
                d["transcript_path"] = Value::Null;
                d["model"] = json!("scenario-model");
                d["turn_id"] = json!(format!("turn-{}", step.call));
            }
            match (event, step.who.agent) {
                (Event::Pre, _) => {}
                (Event::Failure, Agent::Claude) => {
                    d["error"] = json!(outcome.error.clone().unwrap_or_else(|| "failed".into()));
                    d["is_interrupt"] = json!(false);
                }
                (_, Agent::Codex) => {
                    d["tool_response"] = json!(match &outcome.error {
                        Some(e) => format!("{}{e}", outcome.output),
                        None => outcome.output.clone(),
                    });
                }
                _ => d["tool_response"] = claude_response(tool, &d["tool_input"], outcome),
            }
            d
        }
        Agent::Gemini => {
            let mut d = json!({
                "session_id": step.who.session,
                "cwd": cwd,
                "hook_event_name": if event == Event::Pre { "BeforeTool" } else { "AfterTool" },
                "timestamp": "2026-01-01T00:00:00.000Z",
                "tool_name": tool,
                "tool_input": input,
            });
            if event != Event::Pre {
                let mut r = json!({
                    "llmContent": outcome.output,
                    "returnDisplay": outcome.output,
                });
                if let Some(e) = &outcome.error {
                    r["error"] = json!({"message": e, "type": "scenario_error"});
                }
                d["tool_response"] = r;
            }
            d
        }
        Agent::Cursor => {
            let mut d = json!({
                "conversation_id": step.who.session,
                "generation_id": format!("gen-{}", step.call),
                "workspace_roots": [cwd],
                "transcript_path": Value::Null,
            });
            if is_shell(tool) || tool == "shell" {
                let command = input.get("command").cloned().unwrap_or(json!(""));
                d["hook_event_name"] = json!(if event == Event::Pre {
                    "beforeShellExecution"
                } else {
                    "afterShellExecution"
                });
                d["command"] = command;
                d["cwd"] = json!(cwd);
                if event != Event::Pre {
                    d["output"] = json!(outcome.output);
                    d["duration"] = json!(1);
                }
            } else if matches!(tool, "edit" | "Edit" | "Write") {
                if event == Event::Pre {
                    return None;
                }
                d["hook_event_name"] = json!("afterFileEdit");
                d["file_path"] = input.get("file_path").cloned().unwrap_or(Value::Null);
                d["edits"] = cursor_edits(&input);
            } else {
                d["hook_event_name"] = json!(match event {
                    Event::Pre => "preToolUse",
                    Event::Post => "postToolUse",
                    Event::Failure => "postToolUseFailure",
                });
                d["tool_name"] = json!(tool);
                d["tool_input"] = input;
                d["tool_use_id"] = json!(step.call);
            }
            d
        }
        Agent::Generic => {
            let mut d = json!({ "session": step.who.session, "call": step.call });
            if event == Event::Pre {
                d["tool"] = json!(tool);
                let target = input
                    .get("file_path")
                    .or_else(|| input.get("path"))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                if let Some(p) = target
                    && !step.extra.contains_key("paths")
                {
                    d["paths"] = json!([p]);
                }
                d["input"] = input;
            } else {
                d["status"] = json!(if event == Event::Failure {
                    "failed"
                } else {
                    "succeeded"
                });
                if let Some(e) = &outcome.error {
                    d["error"] = json!(e);
                }
            }
            d
        }
    };
    if let Value::Object(m) = &mut doc {
        merge(m, &step.extra, step.who.agent, event);
    }
    Some((phase, doc))
}

/// Generic `extra` keys that describe the call go with the "before" only.
fn merge(m: &mut Map<String, Value>, extra: &Map<String, Value>, agent: Agent, event: Event) {
    const BEFORE_ONLY: &[&str] = &["paths", "idempotency", "side_effects", "compensation"];
    for (k, v) in extra {
        if agent == Agent::Generic && event != Event::Pre && BEFORE_ONLY.contains(&k.as_str()) {
            continue;
        }
        m.insert(k.clone(), v.clone());
    }
}

fn claude_response(tool: &str, input: &Value, outcome: &Outcome) -> Value {
    let path = input.get("file_path").cloned().unwrap_or(Value::Null);
    let original = |r: &mut Value| {
        if let Some(o) = &outcome.original {
            r["originalFile"] = match o {
                Some(text) => json!(text),
                None => Value::Null,
            };
        }
    };
    match tool {
        "Write" => {
            let mut r = json!({
                "type": if matches!(outcome.original, Some(Some(_))) { "update" } else { "create" },
                "filePath": path,
                "content": input.get("content").cloned().unwrap_or(json!("")),
                "structuredPatch": [],
            });
            original(&mut r);
            r
        }
        "Edit" => {
            let mut r = json!({
                "filePath": path,
                "oldString": input.get("old_string").cloned().unwrap_or(json!("")),
                "newString": input.get("new_string").cloned().unwrap_or(json!("")),
                "structuredPatch": [],
                "userModified": false,
                "replaceAll": input.get("replace_all").cloned().unwrap_or(json!(false)),
            });
            original(&mut r);
            r
        }
        "MultiEdit" => json!({
            "filePath": path,
            "edits": input.get("edits").cloned().unwrap_or(json!([])),
            "structuredPatch": [],
        }),
        t if is_shell(t) => json!({
            "stdout": outcome.output,
            "stderr": "",
            "interrupted": false,
            "isImage": false,
        }),
        _ => json!({ "result": outcome.output }),
    }
}

fn cursor_edits(input: &Value) -> Value {
    if let Some(e) = input.get("edits") {
        return e.clone();
    }
    json!([{
        "old_string": input.get("old_string").cloned().unwrap_or(json!("")),
        "new_string": input.get("new_string")
            .or_else(|| input.get("content"))
            .cloned()
            .unwrap_or(json!("")),
    }])
}

/// The payload of a prompt, session-start or turn-end hook.
pub fn session_payload(who: &Who, ws: &Path, phase: &str, text: &str) -> Value {
    let cwd = ws.to_string_lossy().into_owned();
    match who.agent {
        Agent::Claude | Agent::Codex => {
            let (event, key) = match phase {
                "prompt" => ("UserPromptSubmit", "prompt"),
                "session-start" => ("SessionStart", "source"),
                _ => ("Stop", "stop_hook_active"),
            };
            let mut d = json!({
                "session_id": who.session,
                "cwd": cwd,
                "hook_event_name": event,
            });
            d[key] = if phase == "turn-end" {
                json!(false)
            } else {
                json!(text)
            };
            if who.agent == Agent::Codex {
                d["model"] = json!("scenario-model");
                d["turn_id"] = json!("turn-scenario");
                d["transcript_path"] = Value::Null;
            }
            d
        }
        Agent::Gemini => {
            let (event, key) = match phase {
                "prompt" => ("BeforeAgent", "prompt"),
                "session-start" => ("SessionStart", "source"),
                _ => ("AfterAgent", "prompt_response"),
            };
            let mut d = json!({
                "session_id": who.session,
                "cwd": cwd,
                "hook_event_name": event,
                "timestamp": "2026-01-01T00:00:00.000Z",
            });
            d[key] = json!(text);
            d
        }
        Agent::Cursor => {
            let event = match phase {
                "prompt" => "beforeSubmitPrompt",
                "session-start" => "sessionStart",
                _ => "stop",
            };
            let mut d = json!({
                "conversation_id": who.session,
                "generation_id": "gen-scenario",
                "workspace_roots": [cwd],
                "hook_event_name": event,
            });
            if phase == "prompt" {
                d["prompt"] = json!(text);
            }
            d
        }
        Agent::Generic => {
            let mut d = json!({ "session": who.session });
            if phase == "prompt" {
                d["prompt"] = json!(text);
            }
            d
        }
    }
}
