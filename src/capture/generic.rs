//! ckpt's generic format (DESIGN.md §4), for tool runners that are not one of the agents.
//!
//! Before: `{"session", "call", "tool", "paths"?, "input"?, "idempotency"?, "side_effects"?,
//! "compensation"?: {"argv", "idempotency_key"?}}`. After: `{"session", "call", "status":
//! "succeeded"|"failed", "result"?, "error"?}`. A prompt carries `{"session", "prompt"}` and a
//! session start `{"session"}`. Paths are workspace-relative. A before-payload (with `tool`, no
//! `status`) sent to `post`, or an after-payload sent to `pre`, is a wrong event (`before` /
//! `after`).

use serde_json::{Map, Value};

use super::{
    Capture, Compensation, Fields, Format, HookEvent, HookInputError, Outcome, Phase, Target,
    TargetRole, check_event, shape, take,
};

/// Returns true if a payload without `hook_event_name` is generic (module docs of `capture`).
pub(super) fn is_generic(map: &Map<String, Value>) -> bool {
    !map.contains_key("tool_name")
        && ["call", "tool", "status"]
            .iter()
            .any(|k| map.contains_key(*k))
}

/// Parses a generic payload.
pub(super) fn parse(
    mut map: Map<String, Value>,
    phase: Phase,
) -> Result<HookEvent, HookInputError> {
    let mut ev = HookEvent::empty(Format::Generic, phase);
    let f = Fields::top(&map);
    ev.session = Some(f.req_str("session")?.to_string());
    match phase {
        Phase::Prompt => {
            ev.prompt = f.string("prompt")?;
            return Ok(ev);
        }
        Phase::SessionStart | Phase::TurnEnd => return Ok(ev),
        Phase::Pre | Phase::Post | Phase::PostFailure => {}
    }
    ev.call = Some(f.req_str("call")?.to_string());
    let before = f.has("tool") && !f.has("status");
    let after = f.has("status") && !f.has("tool");
    if phase == Phase::Pre {
        if after {
            check_event("after", Phase::Post, phase, true)?;
        }
        ev.tool = Some(f.req_str("tool")?.to_string());
        ev.targets = f
            .strings("paths")?
            .into_iter()
            .map(|path| Target {
                path,
                role: TargetRole::Write,
                expected: None,
            })
            .collect();
        ev.capture = if ev.targets.is_empty() {
            Capture::Scan
        } else {
            Capture::Declared
        };
        ev.idempotency = f.string("idempotency")?;
        ev.side_effects = f.strings("side_effects")?;
        ev.compensation = compensation(&f)?;
        if let Some(input) = take(&mut map, "input") {
            ev.set_input(input);
        }
        return Ok(ev);
    }

    if before {
        check_event("before", Phase::Pre, phase, false)?;
    }
    ev.tool = f.string("tool")?;
    ev.outcome = Some(match f.req_str("status")? {
        "succeeded" => Outcome::Succeeded,
        "failed" => Outcome::Failed,
        _ => return Err(shape("`status` must be `succeeded` or `failed`")),
    });
    ev.error = f.string("error")?;
    ev.capture = Capture::Scan;
    let result = take(&mut map, "result");
    if ev.error.is_none() && ev.outcome == Some(Outcome::Failed) {
        ev.error = result
            .as_ref()
            .and_then(|r| r.get("error"))
            .and_then(Value::as_str)
            .map(str::to_string);
    }
    ev.response = result;
    Ok(ev)
}

fn compensation(f: &Fields<'_>) -> Result<Option<Compensation>, HookInputError> {
    let Some(m) = f.object("compensation")? else {
        return Ok(None);
    };
    let c = Fields::nested(m, "compensation");
    let argv = c.strings("argv")?;
    if argv.is_empty() {
        return Err(shape("`compensation.argv` must name a command"));
    }
    Ok(Some(Compensation {
        argv,
        idempotency_key: c.string("idempotency_key")?,
    }))
}
