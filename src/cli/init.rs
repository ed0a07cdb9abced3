use ckpt::{OpenOptions, Workspace};

use super::error::{CommandError, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(ui: &mut Ui, ctx: &Ctx, _args: &Args) -> Result<i32, CommandError> {
    let (ws, stats) = Workspace::init(&ctx.workspace, OpenOptions { clock: ctx.clock() })?;
    if ui.json {
        ui.json(&serde_json::json!({
            "workspace": ws.root().display().to_string(),
            "created": stats.created,
            "wrote_config": stats.wrote_config,
        }))?;
    } else if stats.created {
        ui.line(&format!(
            "initialised ckpt in `{}` (data in .agent-runtime/)",
            ws.root().display()
        ))?;
    } else {
        ui.line(&format!(
            "ckpt is already initialised in `{}`; nothing changed",
            ws.root().display()
        ))?;
    }
    Ok(OK)
}
