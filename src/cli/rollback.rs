//! `ckpt rollback SELECTOR [--path GLOB] [--dry-run]`.

use clap::ArgGroup;
use serde_json::json;

use ckpt::config::Config;
use ckpt::rollback::{self, FileResult, RollbackOptions, RollbackReport, Selector};

use super::error::{CONFLICTS, CommandError, ERROR, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
#[command(group(ArgGroup::new("selector").required(true).args(["to", "call", "session", "last", "action"])))]
pub struct Args {
    /// Undo every agent change made after this checkpoint
    #[arg(long, value_name = "CKPT")]
    to: Option<String>,
    /// Undo one call's changes (even in the middle of history)
    #[arg(long, value_name = "CALL")]
    call: Option<String>,
    /// Undo every change of one agent session
    #[arg(long, value_name = "SESSION")]
    session: Option<String>,
    /// Undo the last N calls that changed files
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    last: Option<u32>,
    /// Undo an earlier rollback or resolve (redo what it took back)
    #[arg(long, value_name = "ACTION")]
    action: Option<String>,
    /// Only paths matching this glob, or under this directory (repeatable)
    #[arg(long = "path", value_name = "GLOB")]
    paths: Vec<String>,
    /// Print the plan; write nothing
    #[arg(long)]
    dry_run: bool,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let selector = if let Some(c) = &args.to {
        Selector::To(c.clone())
    } else if let Some(c) = &args.call {
        Selector::Call(c.clone())
    } else if let Some(s) = &args.session {
        Selector::Session(s.clone())
    } else if let Some(n) = args.last {
        Selector::Last(n as usize)
    } else if let Some(a) = &args.action {
        Selector::Action(a.clone())
    } else {
        return Err(CommandError::usage(
            "say what to roll back: --to CKPT, --call C, --session S, --last N or --action A",
        ));
    };
    // A dry run writes nothing, not even to finish an interrupted rollback.
    let ws = if args.dry_run {
        ctx.open_read_only()?
    } else {
        ctx.open()?
    };
    let cfg =
        Config::load(ws.runtime_dir()).map_err(|e| CommandError::new(ERROR, e.to_string()))?;
    let report = rollback::rollback(
        &ws,
        &cfg,
        &RollbackOptions {
            selector,
            paths: args.paths.clone(),
            dry_run: args.dry_run,
        },
    )?;
    render(ui, &report)?;
    Ok(if report.incomplete() {
        // On stderr in both modes: with `--json` the document says which.
        super::ui::note(
            "error: some files were not rolled back (result `failed` or `raced`); each is left whole as it was, and the rollback is recorded; once the cause is fixed, run the same rollback again to finish them",
        );
        ERROR
    } else if !report.conflicts.is_empty() {
        CONFLICTS
    } else {
        OK
    })
}

/// One line per change the selected calls made that ckpt could not record
/// (RELIABILITY F47): the rollback leaves those files as they are.
fn render_unrecorded(ui: &mut Ui, report: &RollbackReport) -> Result<(), CommandError> {
    for (call, u) in &report.unrecorded {
        let why = match (u.reason.as_str(), u.size) {
            ("too_large", Some(n)) => format!("{n} bytes, too large to store (max_blob_bytes)"),
            ("too_large", None) => "too large to store (max_blob_bytes)".to_string(),
            _ => "its content could not be read".to_string(),
        };
        let line = format!(
            "  {}  {}  not recorded when call {call} changed it ({why}); left as it is",
            ui.paint("33", "not undone"),
            u.path.display(),
        );
        ui.line(&line)?;
    }
    Ok(())
}

pub fn render(ui: &mut Ui, report: &RollbackReport) -> Result<(), CommandError> {
    if ui.json {
        let files: Vec<_> = report
            .files
            .iter()
            .map(|f| {
                let mut o =
                    json!({"path": f.path, "result": f.result.as_str(), "patches": f.patches});
                if let Some(c) = &f.conflict {
                    o["conflict"] = json!(c);
                }
                if let Some(n) = &f.note {
                    o["note"] = json!(n);
                }
                o
            })
            .collect();
        let conflicts: Vec<_> = report
            .conflicts
            .iter()
            .map(|c| {
                json!({"conflict": c.conflict, "path": c.path, "expected_hash": c.expected_hash,
                       "actual_hash": c.actual_hash, "reason": c.reason})
            })
            .collect();
        let unrecorded: Vec<_> = report
            .unrecorded
            .iter()
            .map(|(call, u)| json!({"call": call, "path": u.path, "reason": u.reason, "size": u.size}))
            .collect();
        ui.json(&json!({
            "action": report.action,
            "dry_run": report.dry_run,
            "patches": report.patches,
            "files": files,
            "conflicts": conflicts,
            "unrecorded": unrecorded,
        }))?;
        return Ok(());
    }
    if report.files.is_empty() {
        ui.line("nothing to roll back: the selection holds no agent changes")?;
        render_unrecorded(ui, report)?;
        return Ok(());
    }
    let changed = report.files.iter().filter(|f| f.result.writes()).count();
    let head = if report.dry_run {
        format!(
            "dry run: would change {changed} of {} files ({} patches); nothing written",
            report.files.len(),
            report.patches
        )
    } else {
        format!(
            "rollback {}: changed {changed} of {} files ({} patches)",
            report.action,
            report.files.len(),
            report.patches
        )
    };
    ui.line(&head)?;
    let width = report
        .files
        .iter()
        .map(|f| f.path.display().chars().count())
        .max()
        .unwrap_or(0)
        .min(60);
    for f in &report.files {
        let word = f.result.as_str();
        let colour = match f.result {
            FileResult::Restored | FileResult::Deleted | FileResult::Recreated => "32",
            FileResult::Merged => "36",
            FileResult::Unchanged => "2",
            FileResult::Conflict => "33",
            FileResult::Raced | FileResult::Failed => "31",
        };
        let mut note = f.note.clone().unwrap_or_default();
        if let Some(c) = &f.conflict {
            note = format!("{note} → ckpt show {c}");
        }
        let line = format!(
            "  {}  {:<width$}  {}",
            ui.paint(colour, &format!("{word:<9}")),
            f.path.display(),
            note
        );
        ui.line(line.trim_end())?;
    }
    render_unrecorded(ui, report)?;
    if !report.conflicts.is_empty() {
        let n = report.conflicts.len();
        ui.line(&format!(
            "{n} conflict{}: left exactly as you have {}; settle with `ckpt resolve CONFLICT --keep-user | --apply-agent | --manual`",
            if n == 1 { "" } else { "s" },
            if n == 1 { "it" } else { "them" }
        ))?;
    }
    if !report.incomplete() && !report.dry_run && changed > 0 {
        ui.line(&format!(
            "undo this rollback with: ckpt rollback --action {}",
            report.action
        ))?;
    }
    Ok(())
}
