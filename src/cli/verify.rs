use super::error::{CommandError, OK, VERIFY_FAILED};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(ui: &mut Ui, ctx: &Ctx, _args: &Args) -> Result<i32, CommandError> {
    let ws = ctx.open_read_only()?;
    let report = ws.verify()?;
    if ui.json {
        ui.json(&serde_json::to_value(&report).map_err(|e| CommandError::new(1, e.to_string()))?)?;
    } else {
        for p in &report.problems {
            ui.line(&format!("{}: {}", where_(p), p.problem))?;
        }
        for w in &report.warnings {
            ui.line(&format!("warning: {}: {}", where_(w), w.problem))?;
        }
        let mut summary = format!(
            "{} records, {} blobs, {} patches, {} checkpoints checked",
            report.records,
            report.blobs_checked,
            report.patches_checked,
            report.checkpoints_checked
        );
        if report.collected > 0 {
            summary.push_str(&format!(
                "; {} contents and diffs of older history were collected by `ckpt gc` (by design)",
                report.collected
            ));
        }
        if let Some(seq) = report.ledger_starts_at.filter(|_| report.ok) {
            summary.push_str(&format!(
                "; the records before seq {seq} were taken out of the ledger by `ckpt gc` (by design)"
            ));
        }
        if report.ok {
            ui.line(&format!("ok: {summary}"))?;
        } else {
            ui.line(&format!(
                "FAILED: {} problem(s); {summary}",
                report.problems.len()
            ))?;
        }
    }
    Ok(if report.ok { OK } else { VERIFY_FAILED })
}

fn where_(p: &ckpt::Problem) -> String {
    match (&p.seq, &p.path) {
        (Some(s), Some(path)) => format!("seq {s} ({path})"),
        (Some(s), None) => format!("seq {s}"),
        (None, Some(path)) => path.clone(),
        (None, None) => "ledger".into(),
    }
}
