use ckpt::CheckpointOptions;

use super::error::{CommandError, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A label for the checkpoint
    #[arg(short = 'm', long = "message", value_name = "LABEL")]
    label: Option<String>,
    /// The session the checkpoint belongs to
    #[arg(long, value_name = "S")]
    session: Option<String>,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let ws = ctx.open()?;
    ws.sweep_tmp();
    let rec = ws.checkpoint(CheckpointOptions {
        label: args.label.clone(),
        session: args.session.clone(),
        ..Default::default()
    })?;
    if ui.json {
        ui.json(&serde_json::json!({"checkpoint": rec.checkpoint, "upto_seq": rec.upto_seq}))?;
    } else {
        ui.line(&rec.checkpoint)?;
    }
    Ok(OK)
}
