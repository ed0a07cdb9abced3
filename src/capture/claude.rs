//! Claude Code payloads (HOOKS.md §5.2–5.6), also used for Codex, whose payloads share the shape.
//!
//! Events: `PreToolUse` → pre, `PostToolUse` → post, `PostToolUseFailure` → post-failure,
//! `UserPromptSubmit` → prompt, `SessionStart` → session-start, `Stop` and `SessionEnd` →
//! turn-end. File tools: `Write`, `Edit`,
//! `MultiEdit` (`file_path`) and `NotebookEdit` (`notebook_path`).

use serde_json::{Map, Value};

use super::{
    Capture, Expected, Fields, Format, HookEvent, HookInputError, OriginalFile, Outcome, Phase,
    Target, TargetRole, check_event, codex, edit, kind, shape, take, unknown_event,
};

/// Tools that only read: no capture at all.
const READ_ONLY: &[&str] = &[
    "Read",
    "Glob",
    "Grep",
    "LS",
    "NotebookRead",
    "WebFetch",
    "WebSearch",
    "TodoWrite",
    "AskUserQuestion",
    "ExitPlanMode",
    "BashOutput",
    // Codex
    "update_plan",
    "view_image",
    "web_search",
];

/// Returns the subcommand a Claude Code / Codex event belongs to.
fn event_phase(event: &str) -> Option<Phase> {
    match event {
        "PreToolUse" => Some(Phase::Pre),
        "PostToolUse" => Some(Phase::Post),
        "PostToolUseFailure" => Some(Phase::PostFailure),
        "UserPromptSubmit" => Some(Phase::Prompt),
        "SessionStart" => Some(Phase::SessionStart),
        "Stop" | "SessionEnd" | "Interrupt" => Some(Phase::TurnEnd),
        _ => None,
    }
}

/// Parses a Claude Code (`format` = Claude) or Codex (`format` = Codex) payload.
pub(super) fn parse(
    mut map: Map<String, Value>,
    phase: Phase,
    format: Format,
) -> Result<HookEvent, HookInputError> {
    let mut ev = HookEvent::empty(format, phase);
    let f = Fields::top(&map);
    let event = f.str("hook_event_name")?;
    if let Some(event) = event {
        let belongs = event_phase(event).ok_or_else(|| unknown_event(event, format))?;
        check_event(event, belongs, phase, false)?;
    }
    ev.session = f.string("session_id")?;
    ev.transcript_path = f.string("transcript_path")?;
    ev.cwd = f.string("cwd")?;
    // Codex names the turn `turn_id`; Claude Code 2.1 `prompt_id`.
    ev.turn = match f.string("turn_id")? {
        Some(t) => Some(t),
        None => f.string("prompt_id")?,
    };
    if let Some(id) = f.string("agent_id")? {
        ev.subagent = Some(crate::record::Subagent {
            id,
            kind: f.string("agent_type")?,
        });
    }
    match phase {
        Phase::Prompt => {
            ev.prompt = f.string("prompt")?;
            return Ok(ev);
        }
        Phase::SessionStart => {
            ev.source = f.string("source")?;
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
    ev.call = f.string("tool_use_id")?;
    if phase == Phase::PostFailure {
        ev.error = f.string("error")?;
    }
    let input = take(&mut map, "tool_input").ok_or_else(|| shape("missing `tool_input`"))?;
    if format == Format::Claude && !input.is_object() {
        // A string holding JSON text is not parsed a second time.
        return Err(shape(format!(
            "`tool_input` must be an object, not {}",
            kind(&input)
        )));
    }
    let patch = match format {
        Format::Codex => codex::patch_capture(&tool, &input),
        _ => None,
    };
    let (capture, targets) = match patch {
        Some(found) => found,
        None => tool_capture(&tool, &input)?,
    };
    ev.capture = capture;
    ev.targets = targets;
    ev.set_input(input);

    if phase != Phase::Pre {
        ev.outcome = Some(if phase == Phase::PostFailure {
            Outcome::Failed
        } else {
            Outcome::Succeeded
        });
        let response = take(&mut map, "tool_response");
        ev.original_file = response.as_ref().and_then(original_file);
        ev.response = response;
    }
    ev.tool = Some(tool);
    Ok(ev)
}

/// Reads `originalFile` from a Claude Code `tool_response`; other types are ignored (the
/// response is informational).
fn original_file(response: &Value) -> Option<OriginalFile> {
    let r = response.as_object()?;
    // NotebookEdit (2.1) names it in snake_case.
    match r.get("originalFile").or_else(|| r.get("original_file"))? {
        Value::Null => Some(OriginalFile::Absent),
        Value::String(s) => Some(OriginalFile::Text(s.clone())),
        _ => None,
    }
}

/// Returns how a Claude Code tool's changes are captured and the paths it declares.
pub(super) fn tool_capture(
    tool: &str,
    input: &Value,
) -> Result<(Capture, Vec<Target>), HookInputError> {
    if READ_ONLY.contains(&tool) {
        return Ok((Capture::Skip, Vec::new()));
    }
    if !matches!(tool, "Write" | "Edit" | "MultiEdit" | "NotebookEdit") {
        return Ok((Capture::Scan, Vec::new()));
    }
    let Value::Object(map) = input else {
        return Err(shape(format!(
            "`tool_input` must be an object, not {}",
            kind(input)
        )));
    };
    let f = Fields::nested(map, "tool_input");
    let (path, expected) = match tool {
        "Write" => (
            f.req_str("file_path")?,
            f.string("content")?.map(Expected::Content),
        ),
        "Edit" => (
            f.req_str("file_path")?,
            edit(&f)?.map(|r| Expected::Edits(vec![r])),
        ),
        "MultiEdit" => (f.req_str("file_path")?, multi_edit(&f)?),
        _ => (f.req_str("notebook_path")?, None),
    };
    let target = Target {
        path: path.to_string(),
        role: TargetRole::Write,
        expected,
    };
    Ok((Capture::Declared, vec![target]))
}

/// Reads MultiEdit's `edits`; `None` if absent or if any edit lacks its strings.
fn multi_edit(f: &Fields<'_>) -> Result<Option<Expected>, HookInputError> {
    let Some(items) = f.array("edits")? else {
        return Ok(None);
    };
    let mut edits = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{}[{i}]", f.path("edits"));
        let Value::Object(m) = item else {
            return Err(shape(format!(
                "`{at}` must be an object, not {}",
                kind(item)
            )));
        };
        match edit(&Fields::nested(m, at))? {
            Some(r) => edits.push(r),
            None => return Ok(None),
        }
    }
    Ok(Some(Expected::Edits(edits)))
}
