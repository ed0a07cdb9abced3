use std::collections::BTreeMap;

use ckpt::record::{Body, CallStatus, PatchSource, Resolution};

use super::error::{CommandError, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(ui: &mut Ui, ctx: &Ctx, _args: &Args) -> Result<i32, CommandError> {
    let ws = ctx.open()?;
    let read = ws.read_ledger()?;
    // path → (last agent after-hash, call)
    let mut agent: BTreeMap<ckpt::RelPath, (Option<ckpt::ContentHash>, String)> = BTreeMap::new();
    let mut calls: BTreeMap<String, (String, CallStatus)> = BTreeMap::new();
    let mut conflicts: BTreeMap<String, Resolution> = BTreeMap::new();
    for r in &read.records {
        match &r.body {
            Body::FilePatch(p) if p.source != PatchSource::Rollback => {
                if let Some(f) = &p.from_path {
                    agent.insert(f.clone(), (None, p.call.clone()));
                }
                agent.insert(p.path.clone(), (p.after_hash, p.call.clone()));
            }
            Body::ToolCall(c) => {
                calls.insert(c.call.clone(), (c.tool.clone(), c.status));
            }
            Body::Conflict(c) => {
                conflicts.insert(c.conflict.clone(), c.resolution);
            }
            _ => {}
        }
    }
    let mut agent_files = Vec::new();
    let mut user_edited = Vec::new();
    for (path, (after, call)) in &agent {
        // Read-only: status never writes into the store.
        let now = ckpt::writeback::observe(&ws, path, 0)
            .map(|o| o.state.hash)
            .unwrap_or(None);
        let changed = now != *after;
        agent_files.push(serde_json::json!({"path": path, "call": call, "changed_since": changed}));
        if changed {
            user_edited
                .push(serde_json::json!({"path": path, "agent_hash": after, "current_hash": now}));
        }
    }
    let open_conflicts = conflicts
        .values()
        .filter(|r| **r == Resolution::Pending)
        .count();
    let in_doubt: Vec<(&String, &String)> = calls
        .iter()
        .filter(|(_, (_, s))| {
            matches!(
                s,
                CallStatus::Started | CallStatus::Planned | CallStatus::Approved
            )
        })
        .map(|(c, (t, _))| (c, t))
        .collect();
    if ui.json {
        ui.json(&serde_json::json!({
            "agent_files": agent_files,
            "user_edited": user_edited,
            "conflicts": open_conflicts,
            "uncertain": in_doubt.len(),
            "uncertain_calls": in_doubt.iter().map(|(c, t)| serde_json::json!({"call": c, "tool": t})).collect::<Vec<_>>(),
        }))?;
        return Ok(OK);
    }
    if agent_files.is_empty() {
        ui.line("the agent has changed no files")?;
    } else {
        ui.line(&format!("files the agent changed ({}):", agent_files.len()))?;
        for f in &agent_files {
            let mark = if f["changed_since"] == true {
                "  (changed since by someone else)"
            } else {
                ""
            };
            ui.line(&format!(
                "  {}  by {}{mark}",
                f["path"].as_str().unwrap_or(""),
                f["call"].as_str().unwrap_or("")
            ))?;
        }
    }
    if !user_edited.is_empty() {
        ui.line(&format!(
            "{} of them changed since the agent wrote them; a rollback keeps those edits",
            user_edited.len()
        ))?;
    }
    ui.line(&format!("open conflicts: {open_conflicts}"))?;
    if in_doubt.is_empty() {
        ui.line("calls in doubt: 0")?;
    } else {
        ui.line(&format!(
            "calls in doubt (started, not ended): {}",
            in_doubt.len()
        ))?;
        for (c, t) in in_doubt.iter().take(20) {
            ui.line(&format!("  {c} {t}"))?;
        }
    }
    Ok(OK)
}
