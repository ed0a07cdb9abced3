//! Codex CLI payloads (HOOKS.md §5.8): Claude Code's shape plus `model`, `turn_id` and the
//! `apply_patch` tool.
//!
//! Codex puts the raw patch text in `tool_input.command` (openai/codex PR #18391). For
//! robustness the patch is also taken from `tool_input.input` or `tool_input.patch`, from a
//! string `tool_input`, from an argv array `["apply_patch", "<patch>"]`, and from a shell command
//! that is exactly `apply_patch <<'EOF' … EOF` (Codex runs those as patches too). A patch that
//! does not parse declares nothing, so the call falls back to a workspace scan.

use serde_json::{Map, Value};

use super::apply_patch::{Hunk, parse_patch};
use super::{Capture, Expected, Target, TargetRole, is_tool_event};

/// Returns true if a payload carrying `event` looks like Codex's (module docs of `capture`).
pub(super) fn is_codex(map: &Map<String, Value>, event: &str) -> bool {
    let has = |k: &str| map.get(k).is_some_and(|v| !v.is_null());
    has("turn_id") || (has("model") && is_tool_event(event))
}

/// Returns the capture of an `apply_patch` call, or `None` if `tool`/`input` carry no patch.
pub(super) fn patch_capture(tool: &str, input: &Value) -> Option<(Capture, Vec<Target>)> {
    let text = patch_text(tool, input)?;
    let Ok(hunks) = parse_patch(text) else {
        return Some((Capture::Scan, Vec::new()));
    };
    let mut targets = Vec::new();
    for hunk in hunks {
        match hunk {
            Hunk::Add { path, contents } => targets.push(Target {
                path,
                role: TargetRole::Write,
                expected: Some(Expected::Content(contents)),
            }),
            Hunk::Delete { path } => targets.push(Target {
                path,
                role: TargetRole::Delete,
                expected: None,
            }),
            Hunk::Update {
                path,
                move_to: None,
                chunks,
            } => targets.push(Target {
                path,
                role: TargetRole::Write,
                expected: Some(Expected::Patch(chunks)),
            }),
            Hunk::Update {
                path,
                move_to: Some(to),
                chunks,
            } => {
                targets.push(Target {
                    path,
                    role: TargetRole::MoveFrom,
                    expected: None,
                });
                targets.push(Target {
                    path: to,
                    role: TargetRole::MoveTo,
                    expected: Some(Expected::Patch(chunks)),
                });
            }
        }
    }
    if targets.is_empty() {
        // `*** Begin Patch` / `*** End Patch` with nothing between changes nothing.
        return Some((Capture::Skip, targets));
    }
    Some((Capture::Declared, targets))
}

/// Finds the patch text of an `apply_patch` call (see the module docs).
fn patch_text<'a>(tool: &str, input: &'a Value) -> Option<&'a str> {
    let is_patch_tool = matches!(tool, "apply_patch" | "applypatch");
    match input {
        Value::String(s) if is_patch_tool || starts_patch(s) => Some(s),
        Value::Object(map) => {
            ["command", "input", "patch"]
                .iter()
                .find_map(|key| match map.get(*key)? {
                    Value::String(s) if is_patch_tool || starts_patch(s) => Some(s.as_str()),
                    Value::String(s) => heredoc(s),
                    Value::Array(argv) => match argv.as_slice() {
                        [Value::String(cmd), Value::String(body)]
                            if matches!(cmd.as_str(), "apply_patch" | "applypatch") =>
                        {
                            Some(body.as_str())
                        }
                        _ => None,
                    },
                    _ => None,
                })
        }
        _ => None,
    }
}

fn starts_patch(s: &str) -> bool {
    s.trim_start().starts_with("*** Begin Patch")
}

/// `apply_patch <<'EOF'\n…\nEOF` as one shell command: returns the `<<'EOF'…` part, which the
/// patch parser unwraps (Codex's lenient mode).
fn heredoc(s: &str) -> Option<&str> {
    let rest = s.trim_start();
    let rest = rest
        .strip_prefix("apply_patch")
        .or_else(|| rest.strip_prefix("applypatch"))?;
    let rest = rest.trim_start_matches([' ', '\t']);
    rest.starts_with("<<").then_some(rest)
}
