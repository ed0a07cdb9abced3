//! `ckpt status`: what of the agent's work is in the working tree now.
//!
//! The agent's files are the plan of taking every agent change still in
//! effect out of the tree (a dry run, nothing written): a file listed is one
//! that rollback would change now, with a git-style letter for what the
//! agent did to it (`M` changed, `A` added, `D` deleted, `R` renamed), and
//! whether someone else's edits are in it too (kept by a rollback, or in
//! the way of one: a conflict). Files an undo already restored are not
//! listed, and are not "changed by someone else".

use std::collections::{BTreeMap, BTreeSet};

use ckpt::config::Config;
use ckpt::record::{Body, CallStatus, Resolution};
use ckpt::rollback::{self, FileResult, PlannedFile, RollbackReport, Selector};

use super::error::{CommandError, ERROR, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {}

/// How many of a file's calls a line names (the newest).
const SHOWN_CALLS: usize = 3;

/// The letter for what the agent did to `f`'s path, as the rollback would
/// take it back (for a conflict, from the conflict's base and agent sides).
fn letter(f: &PlannedFile, report: &RollbackReport) -> &'static str {
    let conflict = report.conflicts.iter().find(|c| c.path == f.path);
    match (f.result, conflict) {
        (FileResult::Deleted, _) if f.renamed_to.is_some() => "R",
        (FileResult::Deleted, _) => "A",
        (FileResult::Recreated, _) => "D",
        (FileResult::Conflict, Some(c)) if c.base_ref.is_none() => "A",
        (FileResult::Conflict, Some(c)) if c.agent_ref.is_none() => "D",
        _ => "M",
    }
}

pub fn run(ui: &mut Ui, ctx: &Ctx, _args: &Args) -> Result<i32, CommandError> {
    let ws = ctx.open()?;
    // A long history is planned from its reduced view (`index/view.bin`);
    // `CKPT_TEST_NO_VIEW` reads it whole, for tests to compare.
    let source = ckpt::ledger_view::Source::read(&ws, !ws.whole_reads(), ui.json)?;
    let (records, read) = (source.records(), source.read_info());
    super::ui::warn_partial(&ws, read);
    let cfg =
        Config::load(ws.runtime_dir()).map_err(|e| CommandError::new(ERROR, e.to_string()))?;
    let report = rollback::dry_plan(&ws, &cfg, records, Selector::Everything)?;
    ckpt::timing("status: planned");
    let mut calls: BTreeMap<String, (String, CallStatus)> = BTreeMap::new();
    let mut conflicts: BTreeMap<String, Resolution> = BTreeMap::new();
    for r in records {
        match &r.body {
            Body::ToolCall(c) => {
                // An end ckpt wrote without knowing the outcome leaves the
                // call in doubt, as `recover` reports it.
                let status = if c.outcome_unknown {
                    CallStatus::Started
                } else {
                    c.status
                };
                calls.insert(c.call.clone(), (c.tool.clone(), status));
            }
            Body::Conflict(c) => {
                conflicts.insert(c.conflict.clone(), c.resolution);
            }
            _ => {}
        }
    }
    // The other half of an undone rename is shown on the `R` line.
    let rename_sources: BTreeSet<&ckpt::RelPath> = report
        .files
        .iter()
        .filter_map(|f| f.renamed_to.as_ref())
        .collect();
    // Each file the agent changed, with its calls oldest first. (Made
    // into JSON only for `--json`: a file a long session edited names
    // hundreds of calls.)
    // With the number of calls: `--json` lists them all, a line names the
    // newest few.
    let mut rows: Vec<(&PlannedFile, Vec<String>, usize)> = Vec::new();
    for f in &report.files {
        if f.result == FileResult::Unchanged
            || (f.result == FileResult::Recreated && rename_sources.contains(&f.path))
        {
            continue;
        }
        if ui.json {
            let mut by: Vec<&str> = source.calls_of(&f.patches);
            by.reverse();
            by.dedup();
            let n = by.len();
            rows.push((f, by.into_iter().map(str::to_string).collect(), n));
        } else {
            let (n, newest) = source.calls_tail(&f.patches, SHOWN_CALLS + 1);
            rows.push((f, newest, n));
        }
    }
    let theirs = |f: &PlannedFile| matches!(f.result, FileResult::Merged | FileResult::Conflict);
    let user_edited: Vec<serde_json::Value> = rows
        .iter()
        .filter(|(f, _, _)| theirs(f))
        .map(|(f, _, _)| {
            serde_json::json!({
                "path": f.path, "current_hash": f.from.hash, "conflict": f.result == FileResult::Conflict,
            })
        })
        .collect();
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
    // Whether each call's agent still works on it, or is gone (then the
    // next recover or rollback records what it changed).
    ckpt::timing("status: listed");
    let running = ckpt::hook::running_calls(&ws);
    let gone: BTreeSet<String> = ckpt::hook::closable_calls(&ws, ckpt::hook::Close::AgentGone)
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    let agent_state = |c: &str| {
        if running.contains(c) {
            Some("running")
        } else if gone.contains(c) {
            Some("gone")
        } else {
            None
        }
    };
    // Hooks an agent will not run record nothing, and nothing else says so.
    let hook_problems: Vec<ckpt::doctor::Problem> =
        ckpt::doctor::check_setup(&ws, &super::doctor::env(), &ckpt::doctor::AGENTS)
            .into_iter()
            .flat_map(|r| r.problems)
            .filter(|p| p.level == ckpt::doctor::Level::Error)
            .collect();
    for p in &hook_problems {
        super::ui::note(&format!("warning: {}; fix: {}", p.what, p.fix));
    }
    // What ckpt holds no copy of: a shell call that changes it cannot be undone.
    ckpt::timing("status: hooks checked");
    let unprotected = ckpt::scan::unprotected(&ws, &cfg);
    ckpt::timing("status: unprotected");
    // History `ckpt gc` collected: its changes are neither shown nor undoable.
    let collected_upto = ckpt::gc::horizon(records);
    // Past the budget even after the last collection: said, with what to do.
    let over_budget = ckpt::gc::over_budget(&ws);
    if let Some(o) = &over_budget {
        super::ui::note(&format!(
            "warning: .agent-runtime/ held {} after `ckpt gc`, over max_runtime_bytes ({}): what the retention keeps is bigger; lower keep_days or keep_checkpoints in .agent-runtime/config.toml, or raise the budget, then run `ckpt gc`",
            super::gc::size(o.runtime_bytes),
            super::gc::size(o.max_runtime_bytes)
        ));
    }
    if ui.json {
        ui.json(&serde_json::json!({
            "over_budget": over_budget,
            "collected_upto_seq": (collected_upto > 0).then_some(collected_upto),
            "hook_problems": hook_problems,
            "unprotected": unprotected,
            "agent_files": rows.iter().map(|(f, by, _)| {
                let mut o = serde_json::json!({
                    "path": f.path,
                    "status": letter(f, &report),
                    "calls": by,
                    "user_edited": theirs(f),
                    "rollback": f.result.as_str(),
                });
                if let Some(to) = &f.renamed_to {
                    o["renamed_from"] = serde_json::json!(to);
                }
                if let Some(n) = &f.note {
                    o["note"] = serde_json::json!(n);
                }
                o
            }).collect::<Vec<_>>(),
            "user_edited": user_edited,
            "conflicts": open_conflicts,
            "uncertain": in_doubt.len(),
            "uncertain_calls": in_doubt.iter().map(|(c, t)| serde_json::json!({"call": c, "tool": t, "agent": agent_state(c)})).collect::<Vec<_>>(),
        }))?;
        return Ok(OK);
    }
    if rows.is_empty() {
        ui.line("no agent change is in the working tree")?;
    } else {
        ui.line(&format!(
            "the agent's changes in the working tree ({} file{}):",
            rows.len(),
            if rows.len() == 1 { "" } else { "s" }
        ))?;
        for (f, calls, n) in &rows {
            let path = match &f.renamed_to {
                Some(from) => format!("{} -> {}", from.display(), f.path.display()),
                None => f.path.display().to_string(),
            };
            let mark = match f.result {
                FileResult::Merged => "  (with your edits, which a rollback keeps)",
                FileResult::Conflict => {
                    "  (your edits overlap the agent's: a rollback would conflict)"
                }
                FileResult::Failed => "  (a rollback could not take this back now)",
                _ => "",
            };
            // Oldest first; a file a long session edited hundreds of times
            // names the newest few (`--json` lists every call).
            let by = if *n > SHOWN_CALLS + 1 {
                let skip = calls.len().saturating_sub(SHOWN_CALLS);
                format!(
                    "{} earlier calls, then {}",
                    n - SHOWN_CALLS,
                    calls[skip..].join(", ")
                )
            } else {
                calls.join(", ")
            };
            ui.line(&format!("  {}  {path}  by {by}{mark}", letter(f, &report)))?;
        }
    }
    if collected_upto > 0 {
        ui.line(&format!(
            "(history up to seq {collected_upto} was collected by `ckpt gc`: changes made before it are not shown and cannot be undone)"
        ))?;
    }
    if !unprotected.is_empty() {
        ui.line(&format!(
            "not protected ({} file{}: ckpt holds no copy, so a shell call that changes one cannot be undone):",
            unprotected.len(),
            if unprotected.len() == 1 { "" } else { "s" }
        ))?;
        for u in unprotected.iter().take(20) {
            let why = match u.reason.as_str() {
                "too_large" => "above max_blob_bytes",
                "not_copied_at_first_use" => {
                    "not copied at first use: above first_use_max_bytes; to protect it, raise that in .agent-runtime/config.toml and delete .agent-runtime/index/snapshot.bin (a cache): the next shell call copies it"
                }
                _ => "unreadable",
            };
            ui.line(&format!(
                "  {}  ({} bytes, {why})",
                u.path.display(),
                u.size.unwrap_or(0)
            ))?;
        }
        if unprotected.len() > 20 {
            ui.line(&format!(
                "  … and {} more (--json lists all)",
                unprotected.len() - 20
            ))?;
        }
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
            let why = match agent_state(c) {
                Some("running") => "  (its agent is still running it)",
                Some(_) => {
                    "  (cut short: its agent is gone; `ckpt recover` records what it changed)"
                }
                None => "",
            };
            ui.line(&format!("  {c} {t}{why}"))?;
        }
    }
    Ok(OK)
}
