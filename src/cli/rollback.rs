//! `ckpt rollback SELECTOR [--path GLOB] [--dry-run]`.

use clap::ArgGroup;
use serde_json::json;

use ckpt::config::Config;
use ckpt::rollback::{self, FileResult, RollbackOptions, RollbackReport, Selector};

use super::error::{CONFLICTS, CommandError, ERROR, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
#[command(group(ArgGroup::new("selector").required(true).args(["to", "call", "session", "subagent", "last", "action"])))]
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
    /// Undo every change one subagent made (Claude Code's `agent_id`, shown by `ckpt log`)
    #[arg(long, value_name = "AGENT_ID")]
    subagent: Option<String>,
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

/// `ckpt undo` / `ckpt redo`.
#[derive(clap::Args, Debug)]
pub struct StepArgs {
    /// Print the plan; write nothing
    #[arg(long)]
    dry_run: bool,
}

pub fn run_undo(ui: &mut Ui, ctx: &Ctx, args: &StepArgs) -> Result<i32, CommandError> {
    execute(ui, ctx, Selector::Undo, &[], args.dry_run)
}

pub fn run_redo(ui: &mut Ui, ctx: &Ctx, args: &StepArgs) -> Result<i32, CommandError> {
    execute(ui, ctx, Selector::Redo, &[], args.dry_run)
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let selector = if let Some(c) = &args.to {
        Selector::To(c.clone())
    } else if let Some(c) = &args.call {
        Selector::Call(c.clone())
    } else if let Some(s) = &args.session {
        Selector::Session(s.clone())
    } else if let Some(a) = &args.subagent {
        Selector::Subagent(a.clone())
    } else if let Some(n) = args.last {
        Selector::Last(n as usize)
    } else if let Some(a) = &args.action {
        Selector::Action(a.clone())
    } else {
        return Err(CommandError::usage(
            "say what to roll back: --to CKPT, --call C, --session S, --subagent A, --last N or --action A",
        ));
    };
    execute(ui, ctx, selector, &args.paths, args.dry_run)
}

fn execute(
    ui: &mut Ui,
    ctx: &Ctx,
    selector: Selector,
    paths: &[String],
    dry_run: bool,
) -> Result<i32, CommandError> {
    // A dry run writes nothing, not even to finish an interrupted rollback.
    let ws = if dry_run {
        ctx.open_read_only()?
    } else {
        ctx.open()?
    };
    let cfg =
        Config::load(ws.runtime_dir()).map_err(|e| CommandError::new(ERROR, e.to_string()))?;
    let step = matches!(selector, Selector::Undo | Selector::Redo);
    let report = rollback::rollback(
        &ws,
        &cfg,
        &RollbackOptions {
            selector: selector.clone(),
            paths: paths.to_vec(),
            dry_run,
        },
    )?;
    for w in ckpt::hook::closed_warnings(&report.closed) {
        super::ui::note(&format!("ckpt: {w}"));
    }
    if step && report.files.is_empty() {
        let what = if selector == Selector::Undo {
            "undo"
        } else {
            "redo"
        };
        if ui.json {
            ui.json(
                &json!({"action": null, "dry_run": dry_run, "patches": 0, "files": [],
                            "conflicts": [], "unrecorded": [], what: null}),
            )?;
        } else if selector == Selector::Undo {
            ui.line("nothing to undo: no agent change is in effect")?;
        } else {
            ui.line("nothing to redo: no `ckpt undo` is in effect")?;
        }
        return Ok(OK);
    }
    render(ui, &report)?;
    Ok(if report.incomplete() && dry_run {
        super::ui::note(
            "error: the rollback could not write some files now (result `failed`, the reason beside each); fix that before running it",
        );
        ERROR
    } else if report.incomplete() {
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
            ("not_copied_at_first_use", n) => format!(
                "{}not copied when ckpt first saw it (first_use_max_bytes)",
                n.map(|n| format!("{n} bytes, ")).unwrap_or_default()
            ),
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

/// The git commands that would put HEAD and the index where the rollback
/// put the files (run from the workspace root).
fn git_commands(m: &ckpt::git::Moved) -> Vec<String> {
    let mut v = Vec::new();
    if let Some((Some(was), _)) = &m.head {
        v.push(format!("git reset --soft {was}"));
    }
    if !m.staged.is_empty() {
        let paths: Vec<String> = m.staged.iter().map(|p| shell_word(&p.display())).collect();
        v.push(format!("git restore --staged -- {}", paths.join(" ")));
    }
    v
}

fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./+,:@".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

pub fn render(ui: &mut Ui, report: &RollbackReport) -> Result<(), CommandError> {
    if ui.json {
        let files: Vec<_> = report
            .files
            .iter()
            .map(|f| {
                let mut o =
                    json!({"path": f.path, "result": f.result.as_str(), "patches": f.patches});
                if !f.redone.is_empty() {
                    o["redone"] = json!(f.redone);
                }
                if !f.dirs_removed.is_empty() {
                    o["dirs_removed"] = json!(f.dirs_removed);
                }
                if let Some(c) = &f.conflict
                    && !report.dry_run
                {
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
                // A dry run raises no conflict: it has no id to show.
                let id = (!report.dry_run).then_some(&c.conflict);
                json!({"conflict": id, "path": c.path, "expected_hash": c.expected_hash,
                       "actual_hash": c.actual_hash, "reason": c.reason})
            })
            .collect();
        let unrecorded: Vec<_> = report
            .unrecorded
            .iter()
            .map(|(call, u)| json!({"call": call, "path": u.path, "reason": u.reason, "size": u.size}))
            .collect();
        let mut doc = json!({
            "action": if report.dry_run { None } else { Some(&report.action) },
            "dry_run": report.dry_run,
            "patches": report.patches,
            "files": files,
            "conflicts": conflicts,
            "unrecorded": unrecorded,
        });
        if let Some(to) = &report.undo_to {
            doc["undo"] = json!({"checkpoint": to});
        }
        if let Some((ck, m)) = &report.git {
            doc["git"] = json!({
                "checkpoint": ck,
                "head_was": m.head.as_ref().map(|h| &h.0),
                "head_now": m.head.as_ref().map(|h| &h.1),
                "staged": m.staged,
                "commands": git_commands(m),
            });
        }
        if let Some(a) = &report.redo_of {
            doc["redo"] = json!({"action": a});
        }
        if !report.lost.is_empty() {
            doc["lost_records"] = json!(report.lost);
        }
        ui.json(&doc)?;
        return Ok(());
    }
    if !report.lost.is_empty() {
        super::ui::note(&format!(
            "note: {} record(s) of this history were lost to damage (seq {}; `ckpt repair` stood records in for them): changes only they recorded are not rolled back; their bytes are in .agent-runtime/damaged/",
            report.lost.len(),
            report
                .lost
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if report.files.is_empty() && report.named > 0 {
        ui.line("nothing to roll back: every change of the selection is taken out already")?;
        render_unrecorded(ui, report)?;
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
    match (&report.undo_to, &report.redo_of) {
        (Some(Some(c)), _) => ui.line(&format!("undo: back to checkpoint {c}"))?,
        (Some(None), _) => ui.line("undo: back to before the first recorded change")?,
        (_, Some(a)) => ui.line(&format!("redo: takes back undo {a}"))?,
        _ => {}
    }
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
        if !f.dirs_removed.is_empty() {
            let dirs: Vec<_> = f.dirs_removed.iter().map(|d| d.display()).collect();
            note = format!(
                "{note} (with the directories made for it: {})",
                dirs.join(", ")
            )
            .trim_start()
            .to_string();
        }
        if let Some(c) = &f.conflict
            && !report.dry_run
        {
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
    if let Some((ck, m)) = &report.git {
        let short = |h: &Option<String>| {
            h.as_deref()
                .map(|h| h[..h.len().min(12)].to_string())
                .unwrap_or_else(|| "no commit".into())
        };
        if let Some((was, now)) = &m.head {
            ui.line(&format!(
                "{}: HEAD moved since checkpoint {ck} (was {}, now {}); ckpt never writes .git/",
                ui.paint("33", "git"),
                short(was),
                short(now)
            ))?;
        }
        if !m.staged.is_empty() {
            let paths: Vec<_> = m.staged.iter().map(|p| p.display()).collect();
            ui.line(&format!(
                "{}: the index still stages other versions of {}",
                ui.paint("33", "git"),
                paths.join(", ")
            ))?;
        }
        for c in git_commands(m) {
            ui.line(&format!("  to finish the job in git: {c}"))?;
        }
    }
    if !report.conflicts.is_empty() && report.dry_run {
        let n = report.conflicts.len();
        ui.line(&format!(
            "{n} file{} would conflict and be left exactly as you have {}",
            if n == 1 { "" } else { "s" },
            if n == 1 { "it" } else { "them" }
        ))?;
    } else if !report.conflicts.is_empty() {
        let n = report.conflicts.len();
        ui.line(&format!(
            "{n} conflict{}: left exactly as you have {}; settle with `ckpt resolve CONFLICT --keep-user | --apply-agent | --manual`",
            if n == 1 { "" } else { "s" },
            if n == 1 { "it" } else { "them" }
        ))?;
    }
    if !report.incomplete() && !report.dry_run && changed > 0 && report.undo_to.is_some() {
        ui.line("take this undo back with: ckpt redo")?;
    } else if !report.incomplete() && !report.dry_run && changed > 0 {
        ui.line(&format!(
            "undo this rollback with: ckpt rollback --action {}",
            report.action
        ))?;
    }
    Ok(())
}
