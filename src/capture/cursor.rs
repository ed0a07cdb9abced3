//! Cursor payloads (HOOKS.md §5.10; Cursor's event list).
//!
//! - `beforeShellExecution` → pre and `afterShellExecution` → post: tool `shell`, input
//!   `{"command"}`, response `output`.
//! - `beforeMCPExecution` → pre and `afterMCPExecution` → post: `tool_name`, `tool_input` (may
//!   be a JSON string; kept as is), response `result_json`.
//! - `afterFileEdit` → post: `tool_name` (else `edit`), the file and edits at the top level or in
//!   `tool_input`; the input is `tool_input`, else the synthesised `{"file_path", "edits"}`.
//! - `preToolUse`, `postToolUse`, `postToolUseFailure` → pre, post, post-failure: `tool_name`,
//!   `tool_input`, `tool_use_id`; always scanned (their tool inputs are not documented).
//! - `beforeSubmitPrompt` → prompt; `sessionStart` → session-start.
//!
//! `conversation_id` is the session and `generation_id` the turn. Only the newer tool events
//! carry a `tool_use_id`; otherwise [`HookEvent::call`] is `None`. There is no pre for file edits:
//! `afterFileEdit` declares its file, and its `edits` (objects `{old_string, new_string}`) give an
//! [`Expected`] that [`super::reverse_expected`] can undo. `edits` in any other form (the
//! third-party description shows strings) give no expectation, not an error.

use serde_json::{Map, Value};

use super::{
    Capture, Expected, Fields, Format, HookEvent, HookInputError, Outcome, Phase, Target,
    TargetRole, check_event, edit, take, unknown_event,
};

/// What a Cursor event is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Shell,
    Mcp,
    FileEdit,
    Tool,
    Prompt,
    SessionStart,
    TurnEnd,
}

fn event_kind(event: &str) -> Option<(Kind, Phase)> {
    Some(match event {
        "beforeShellExecution" => (Kind::Shell, Phase::Pre),
        "afterShellExecution" => (Kind::Shell, Phase::Post),
        "beforeMCPExecution" => (Kind::Mcp, Phase::Pre),
        "afterMCPExecution" => (Kind::Mcp, Phase::Post),
        "afterFileEdit" => (Kind::FileEdit, Phase::Post),
        "preToolUse" => (Kind::Tool, Phase::Pre),
        "postToolUse" => (Kind::Tool, Phase::Post),
        "postToolUseFailure" => (Kind::Tool, Phase::PostFailure),
        "beforeSubmitPrompt" => (Kind::Prompt, Phase::Prompt),
        "sessionStart" => (Kind::SessionStart, Phase::SessionStart),
        "stop" | "sessionEnd" => (Kind::TurnEnd, Phase::TurnEnd),
        _ => return None,
    })
}

/// Cursor events ckpt does not handle, named here only so that detection recognises them.
const OTHER_EVENTS: &[&str] = &[
    "beforeReadFile",
    "afterAgentResponse",
    "afterAgentThought",
    "beforeTabFileRead",
    "afterTabFileEdit",
];

/// Returns true if a payload carrying `event` (empty if absent) is Cursor's.
pub(super) fn is_cursor(map: &Map<String, Value>, event: &str) -> bool {
    event_kind(event).is_some()
        || OTHER_EVENTS.contains(&event)
        || map.contains_key("workspace_roots")
        || map.contains_key("conversation_id")
}

/// Parses a Cursor payload.
pub(super) fn parse(
    mut map: Map<String, Value>,
    phase: Phase,
) -> Result<HookEvent, HookInputError> {
    let mut ev = HookEvent::empty(Format::Cursor, phase);
    let f = Fields::top(&map);
    let event = f.req_str("hook_event_name")?;
    let (kind, belongs) = event_kind(event).ok_or_else(|| unknown_event(event, Format::Cursor))?;
    check_event(event, belongs, phase, kind != Kind::Tool)?;
    ev.session = f.string("conversation_id")?;
    ev.turn = f.string("generation_id")?;
    ev.call = f.string("tool_use_id")?;
    ev.workspace_roots = f.strings("workspace_roots")?;
    ev.transcript_path = f.string("transcript_path")?;
    ev.cwd = f.string("cwd")?;
    match kind {
        Kind::Prompt => {
            ev.prompt = f.string("prompt")?;
            return Ok(ev);
        }
        Kind::SessionStart => {
            ev.source = f.string("source")?;
            return Ok(ev);
        }
        Kind::TurnEnd => {
            ev.source = Some(event.to_string());
            return Ok(ev);
        }
        Kind::Shell => {
            let command = f.req_str("command")?;
            ev.tool = Some("shell".to_string());
            ev.capture = Capture::Scan;
            let mut input = Map::new();
            input.insert("command".to_string(), Value::String(command.to_string()));
            ev.set_input(Value::Object(input));
            ev.response = take(&mut map, "output");
        }
        Kind::Mcp | Kind::Tool => {
            ev.tool = Some(f.req_str("tool_name")?.to_string());
            ev.capture = Capture::Scan;
            if kind == Kind::Tool {
                ev.error = match f.string("error")? {
                    Some(e) => Some(e),
                    None => f.string("error_message")?,
                };
            }
            if let Some(input) = take(&mut map, "tool_input") {
                ev.set_input(input);
            }
            ev.response = match take(&mut map, "result_json") {
                Some(r) => Some(r),
                None => take(&mut map, "tool_output"),
            };
        }
        Kind::FileEdit => file_edit(&mut ev, &mut map)?,
    }
    if phase != Phase::Pre {
        let failed = phase == Phase::PostFailure && kind == Kind::Tool;
        ev.outcome = Some(if failed {
            Outcome::Failed
        } else {
            Outcome::Succeeded
        });
    }
    Ok(ev)
}

/// `afterFileEdit`: the file and edits at the top level, or inside `tool_input`.
fn file_edit(ev: &mut HookEvent, map: &mut Map<String, Value>) -> Result<(), HookInputError> {
    let f = Fields::top(map);
    let tool = f.string("tool_name")?.unwrap_or_else(|| "edit".to_string());
    let nested = if f.has("file_path") {
        None
    } else {
        f.object("tool_input")?
    };
    let args = match nested {
        Some(args) => Fields::nested(args, "tool_input"),
        None => Fields::top(map),
    };
    let path = args.req_str("file_path")?.to_string();
    let expected = args.get("edits").and_then(edits);
    let input = match nested {
        Some(_) => take(map, "tool_input").unwrap_or(Value::Null),
        None => {
            // No `tool_input`: the top-level file and edits stand in for it.
            let mut synth = Map::new();
            synth.insert("file_path".to_string(), Value::String(path.clone()));
            if let Some(edits) = map.get("edits") {
                synth.insert("edits".to_string(), edits.clone());
            }
            Value::Object(synth)
        }
    };
    ev.tool = Some(tool);
    ev.set_input(input);
    ev.response = take(map, "result_json");
    ev.capture = Capture::Declared;
    ev.targets = vec![Target {
        path,
        role: TargetRole::Write,
        expected,
    }];
    Ok(())
}

/// Reads `edits` as `{old_string, new_string}` objects; anything else gives no expectation.
fn edits(value: &Value) -> Option<Expected> {
    let items = value.as_array()?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let m = item.as_object()?;
        out.push(edit(&Fields::nested(m, "edits")).ok()??);
    }
    (!out.is_empty()).then_some(Expected::Edits(out))
}
