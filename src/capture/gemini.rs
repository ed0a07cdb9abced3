//! Gemini CLI payloads (HOOKS.md §5.9).
//!
//! Events: `BeforeTool` → pre, `AfterTool` → post (also accepted by post-failure), `BeforeAgent`
//! → prompt, `SessionStart` → session-start. There is no call id: pre and post pair by
//! (`session_id`, `tool_name`, [`HookEvent::input_hash`]) in order. A non-null
//! `tool_response.error` means the call failed. File tools: `write_file` and `replace`, with the
//! path in `file_path` (or `absolute_path`, or `path`).

use serde_json::{Map, Value};

use super::{
    Capture, Expected, Fields, Format, HookEvent, HookInputError, Occurrences, Outcome, Phase,
    Replacement, Target, TargetRole, check_event, kind, shape, take, unknown_event,
};

/// Tools that only read the workspace (or write only outside it, in
/// Gemini's own memory and plan state): no capture at all. Names of 0.61
/// (`grep_search`) and of older versions.
const READ_ONLY: &[&str] = &[
    "read_file",
    "read_many_files",
    "list_directory",
    "glob",
    "search_file_content",
    "grep",
    "grep_search",
    "google_web_search",
    "web_fetch",
    "write_todos",
    "save_memory",
    "ask_user",
    "activate_skill",
    "get_internal_docs",
    "enter_plan_mode",
    "exit_plan_mode",
];

fn event_phase(event: &str) -> Option<Phase> {
    match event {
        "BeforeTool" => Some(Phase::Pre),
        "AfterTool" => Some(Phase::Post),
        "BeforeAgent" => Some(Phase::Prompt),
        "SessionStart" => Some(Phase::SessionStart),
        "AfterAgent" | "SessionEnd" => Some(Phase::TurnEnd),
        _ => None,
    }
}

/// Returns true if a payload carrying `event` is Gemini's (module docs of `capture`).
pub(super) fn is_gemini(map: &Map<String, Value>, event: &str) -> bool {
    match event {
        "BeforeTool" | "AfterTool" | "BeforeAgent" => true,
        "SessionStart" => map.get("timestamp").is_some_and(|v| !v.is_null()),
        _ => false,
    }
}

/// Parses a Gemini CLI payload.
pub(super) fn parse(
    mut map: Map<String, Value>,
    phase: Phase,
) -> Result<HookEvent, HookInputError> {
    let mut ev = HookEvent::empty(Format::Gemini, phase);
    let f = Fields::top(&map);
    let event = f.str("hook_event_name")?;
    if let Some(event) = event {
        let belongs = event_phase(event).ok_or_else(|| unknown_event(event, Format::Gemini))?;
        check_event(event, belongs, phase, true)?;
    }
    ev.session = f.string("session_id")?;
    ev.transcript_path = f.string("transcript_path")?;
    ev.cwd = f.string("cwd")?;
    match phase {
        Phase::Prompt => {
            ev.prompt = f.string("prompt")?;
            return Ok(ev);
        }
        Phase::SessionStart => {
            ev.source = match f.string("source")? {
                Some(s) => Some(s),
                None => f.string("trigger")?,
            };
            return Ok(ev);
        }
        Phase::TurnEnd => {
            // Which end it is: a session's end may leave a shell call's
            // command running (hook::turn_end).
            ev.source = event.map(str::to_string);
            return Ok(ev);
        }
        Phase::Pre | Phase::Post | Phase::PostFailure => {}
    }

    let tool = f.req_str("tool_name")?.to_string();
    let input = take(&mut map, "tool_input").ok_or_else(|| shape("missing `tool_input`"))?;
    let Value::Object(args) = &input else {
        return Err(shape(format!(
            "`tool_input` must be an object, not {}",
            kind(&input)
        )));
    };
    (ev.capture, ev.targets) = tool_capture(&tool, &Fields::nested(args, "tool_input"))?;
    ev.set_input(input);

    if phase != Phase::Pre {
        let response = take(&mut map, "tool_response");
        ev.error = response
            .as_ref()
            .and_then(error_text)
            .or_else(|| response.as_ref().and_then(shell_failure));
        let failed = ev.error.is_some();
        ev.outcome = Some(if failed {
            Outcome::Failed
        } else {
            Outcome::Succeeded
        });
        ev.response = response;
    }
    ev.tool = Some(tool);
    Ok(ev)
}

/// The text of `tool_response.error`: a string, an object's `message`, or the JSON itself.
fn error_text(response: &Value) -> Option<String> {
    match response.get("error")? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => match other.get("message") {
            Some(Value::String(s)) => Some(s.clone()),
            _ => Some(other.to_string()),
        },
    }
}

/// A shell command's failure as Gemini reports it: no `error`, but
/// `llmContent` says `Exit Code: N` (N not 0) or names a signal.
fn shell_failure(response: &Value) -> Option<String> {
    let text = match response.get("llmContent")? {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str).or(p.as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    for line in text.lines() {
        if let Some(code) = line.strip_prefix("Exit Code: ") {
            let code = code.trim();
            if code != "0" && code != "(none)" {
                return Some(format!("the command exited with code {code}"));
            }
        }
        if let Some(sig) = line.strip_prefix("Signal: ") {
            let sig = sig.trim();
            if sig != "(none)" && !sig.is_empty() {
                return Some(format!("the command was killed by signal {sig}"));
            }
        }
    }
    None
}

fn tool_capture(tool: &str, f: &Fields<'_>) -> Result<(Capture, Vec<Target>), HookInputError> {
    if READ_ONLY.contains(&tool) {
        return Ok((Capture::Skip, Vec::new()));
    }
    let expected = match tool {
        "write_file" => f.string("content")?.map(Expected::Content),
        "replace" => replace(f)?,
        _ => return Ok((Capture::Scan, Vec::new())),
    };
    let path = ["file_path", "absolute_path", "path"]
        .into_iter()
        .map(|key| f.str(key))
        .find_map(Result::transpose)
        .transpose()?
        .ok_or_else(|| f.missing("file_path"))?;
    let target = Target {
        path: path.to_string(),
        role: TargetRole::Write,
        expected,
    };
    Ok((Capture::Declared, vec![target]))
}

/// `replace`: `old_string`, `new_string`, `expected_replacements` (default
/// 1), or (0.61) `allow_multiple`: every occurrence, at least one.
fn replace(f: &Fields<'_>) -> Result<Option<Expected>, HookInputError> {
    let all = f.bool("allow_multiple")?.unwrap_or(false);
    let count = match f.u64("expected_replacements")? {
        None => 1,
        Some(n) => u32::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
            shape(format!(
                "`{}` must be at least 1",
                f.path("expected_replacements")
            ))
        })?,
    };
    let (Some(old), Some(new)) = (f.str("old_string")?, f.str("new_string")?) else {
        return Ok(None);
    };
    Ok(Some(Expected::Edits(vec![Replacement {
        old: old.to_string(),
        new: new.to_string(),
        count: if all {
            Occurrences::All
        } else {
            Occurrences::Exactly(count)
        },
    }])))
}
