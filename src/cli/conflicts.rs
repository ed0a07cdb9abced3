//! `ckpt conflicts`: the conflicts rollbacks raised, and how they were settled.

use serde_json::json;

use ckpt::conflict;
use ckpt::record::Resolution;

use super::error::{CONFLICTS, CommandError, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only the open ones
    #[arg(long)]
    open: bool,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let ws = ctx.open()?;
    let read = ws.read_ledger()?;
    super::ui::warn_partial(&ws, &read);
    let all = conflict::list(&read.records);
    let open = all
        .iter()
        .filter(|c| c.resolution == Resolution::Pending)
        .count();
    let shown: Vec<_> = all
        .iter()
        .filter(|c| !args.open || c.resolution == Resolution::Pending)
        .collect();
    if ui.json {
        let v: Vec<_> = shown
            .iter()
            .map(|c| {
                json!({"conflict": c.conflict, "path": c.path, "resolution": conflict::resolution_str(c.resolution),
                       "action": c.action, "reason": c.reason, "markers_written": c.resolution == Resolution::Pending && c.resolved_by.is_some()})
            })
            .collect();
        ui.json(&json!({"conflicts": v, "open": open}))?;
    } else if shown.is_empty() {
        ui.line(if all.is_empty() {
            "no conflicts"
        } else {
            "no open conflicts"
        })?;
    } else {
        for c in &shown {
            let state = match c.resolution {
                Resolution::Pending if c.resolved_by.is_some() => "markers written",
                r => conflict::resolution_str(r),
            };
            ui.line(&format!(
                "{}  {:<15}  {}  ({})",
                c.conflict,
                state,
                c.path,
                ckpt::rollback::conflict_reason_text(c.reason.as_deref().unwrap_or(""))
            ))?;
        }
        if open > 0 {
            ui.line("see one with `ckpt show CONFLICT`; settle it with `ckpt resolve CONFLICT --keep-user | --apply-agent | --manual`")?;
        }
    }
    Ok(if open > 0 { CONFLICTS } else { OK })
}
