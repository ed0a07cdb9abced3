//! `ckpt restore-session --session S --to CKPT|ENTRY [--with-files] [--claude]`.

use serde_json::json;

use ckpt::config::Config;
use ckpt::session::{self, RestoreOptions};

use super::error::{CONFLICTS, CommandError, ERROR, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The session to move
    #[arg(long, value_name = "S")]
    session: String,
    /// A checkpoint made with --session S, or an entry of the session
    #[arg(long, value_name = "CKPT|ENTRY")]
    to: String,
    /// Also roll the files back to the same checkpoint (one recorded action)
    #[arg(long)]
    with_files: bool,
    /// Also write a Claude Code transcript that ends at the checkpoint, under a new session id
    #[arg(long)]
    claude: bool,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let ws = ctx.open()?;
    let cfg =
        Config::load(ws.runtime_dir()).map_err(|e| CommandError::new(ERROR, e.to_string()))?;
    let report = session::restore_session(
        &ws,
        &cfg,
        &RestoreOptions {
            session: args.session.clone(),
            to: args.to.clone(),
            with_files: args.with_files,
            claude: args.claude,
        },
    )?;
    for c in &report.closed_interrupted {
        super::ui::note(&format!(
            "note: restore {} had been interrupted (session at its {}); recorded as ended",
            c.action,
            c.session_at().replace('_', " ")
        ));
    }
    if ui.json {
        let mut doc = json!({
            "action": report.action,
            "session": report.session,
            "from": report.from,
            "to": report.to,
            "checkpoint": report.checkpoint,
            "branch_entry": report.branch_entry,
        });
        if !report.closed_interrupted.is_empty() {
            doc["interrupted_closed"] = json!(report.closed_interrupted);
        }
        if let Some(r) = &report.rollback {
            let files: Vec<_> = r
                .files
                .iter()
                .map(|f| {
                    let mut o = json!({"path": f.path, "result": f.result.as_str()});
                    if let Some(c) = &f.conflict {
                        o["conflict"] = json!(c);
                    }
                    if let Some(n) = &f.note {
                        o["note"] = json!(n);
                    }
                    o
                })
                .collect();
            let conflicts: Vec<_> = r
                .conflicts
                .iter()
                .map(|c| {
                    json!({"conflict": c.conflict, "path": c.path, "expected_hash": c.expected_hash,
                           "actual_hash": c.actual_hash})
                })
                .collect();
            doc["rollback"] = json!({"action": r.action, "files": files, "conflicts": conflicts});
        }
        if let Some(c) = &report.claude {
            doc["claude_resume"] = json!(c.resume);
            doc["claude_session"] = json!(c.session_id);
            doc["claude_transcript"] = json!(c.transcript.display().to_string());
        }
        if report.claude_fresh {
            doc["claude_fresh"] = json!(true);
            doc["claude_resume"] = json!("claude");
        }
        ui.json(&doc)?;
    } else {
        match (&report.branch_entry, &report.to) {
            (Some(b), Some(to)) => ui.line(&format!(
                "restore {}: session {} moved from {} to {} (branch entry {b}); the branch left behind stays listed by `ckpt session branches --session {}`",
                report.action,
                report.session,
                report.from.as_deref().unwrap_or("(no entries)"),
                to,
                report.session
            ))?,
            _ => ui.line(&format!(
                "restore {}: checkpoint {} records no position in session {}; its session tree is unchanged",
                report.action,
                report.checkpoint.as_deref().unwrap_or("-"),
                report.session
            ))?,
        }
        if let Some(r) = &report.rollback {
            super::rollback::render(ui, r)?;
        }
        if let Some(c) = &report.claude {
            ui.line(&format!(
                "wrote {} ({} entries); open it with:",
                c.transcript.display(),
                c.entries
            ))?;
            ui.line(&format!("  {}", c.resume))?;
        }
        if report.claude_fresh {
            ui.line(&format!(
                "the conversation had not begun at {}: there is no transcript to fork; start a new session with `claude`",
                report.checkpoint.as_deref().unwrap_or("that checkpoint")
            ))?;
        }
    }
    Ok(if report.incomplete() {
        super::ui::note(
            "error: the session moved, but some files were not rolled back (result `failed` or `raced`); each is left whole as it was; once the cause is fixed, roll back the same selection again to finish them",
        );
        ERROR
    } else if report.conflicts() > 0 {
        CONFLICTS
    } else {
        OK
    })
}
