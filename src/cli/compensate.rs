//! `ckpt compensate CALL [--dry-run] [--force]`.

use serde_json::json;

use ckpt::compensate::{self, CompensateOptions, CompensateReport, CompensateStatus};

use super::error::{CommandError, ERROR, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The call whose external side effect to undo (its registered compensation runs)
    #[arg(value_name = "CALL")]
    call: String,
    /// Say what would run; run and record nothing
    #[arg(long)]
    dry_run: bool,
    /// Run even though an earlier compensation of this call is uncertain
    /// (started, never recorded as finished: it may have run)
    #[arg(long)]
    force: bool,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    // A dry run writes nothing, not even the finish of an interrupted rollback.
    let ws = if args.dry_run {
        ctx.open_read_only()?
    } else {
        ctx.open()?
    };
    let report = compensate::compensate(
        &ws,
        &args.call,
        &CompensateOptions {
            dry_run: args.dry_run,
            force: args.force,
        },
    )?;
    render(ui, &report)?;
    Ok(match report.status {
        CompensateStatus::Succeeded | CompensateStatus::DryRun => OK,
        _ => ERROR,
    })
}

fn argv_text(argv: &[String]) -> String {
    serde_json::to_string(argv).unwrap_or_default()
}

fn render(ui: &mut Ui, r: &CompensateReport) -> Result<(), CommandError> {
    if ui.json {
        let mut doc = json!({"call": r.call, "status": r.status.as_str()});
        if r.exit_code.is_some() || matches!(r.status, CompensateStatus::Failed) {
            doc["exit_code"] = json!(r.exit_code);
        }
        if let Some(s) = r.signal {
            doc["signal"] = json!(s);
        }
        if let Some(a) = &r.action {
            doc["action"] = json!(a);
        }
        if let Some(o) = &r.output_ref {
            doc["output_ref"] = json!(o);
        }
        doc["tool"] = json!(r.tool);
        if !r.argv.is_empty() {
            doc["argv"] = json!(r.argv);
            doc["idempotency_key"] = json!(r.idempotency_key);
        }
        if let Some(p) = &r.retry_of {
            doc["retry_of"] = json!(p);
        }
        if !r.forced_over.is_empty() {
            doc["forced_over"] = json!(r.forced_over);
        }
        if let Some(p) = &r.previous {
            doc["previous"] = json!(p);
        }
        if let Some(m) = &r.message {
            doc["message"] = json!(m);
        }
        ui.json(&doc)?;
    }
    let key = r.idempotency_key.as_deref().unwrap_or("");
    let again = if let Some(p) = &r.retry_of {
        format!(" (a retry of {p}, which failed)")
    } else if !r.forced_over.is_empty() {
        format!(" (forced over uncertain {})", r.forced_over.join(", "))
    } else {
        String::new()
    };
    match r.status {
        CompensateStatus::DryRun => {
            if !ui.json {
                ui.line(&format!(
                    "dry run: would run {} for call {} ({}) with CKPT_IDEMPOTENCY_KEY={key}{again}; nothing run or recorded",
                    argv_text(&r.argv),
                    r.call,
                    r.tool
                ))?;
            }
        }
        CompensateStatus::Succeeded => {
            if !ui.json {
                ui.line(&format!(
                    "compensated call {} ({}): {} exited 0 with CKPT_IDEMPOTENCY_KEY={key}{again}; action {}, output in .agent-runtime/{}",
                    r.call,
                    r.tool,
                    argv_text(&r.argv),
                    r.action.as_deref().unwrap_or(""),
                    r.output_ref.as_deref().unwrap_or("")
                ))?;
            }
        }
        _ => {
            if let Some(m) = &r.message {
                super::ui::note(&format!("error: {m}"));
            }
        }
    }
    Ok(())
}
