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
    // With a session, the checkpoint records where the session tree is.
    let session_leaf = match &args.session {
        Some(s) => {
            ckpt::session::validate_session(s)?;
            ckpt::session::leaf(&ws.read_ledger()?.records, s)
        }
        None => None,
    };
    let rec = ws.checkpoint(CheckpointOptions {
        label: args.label.clone(),
        session: args.session.clone(),
        session_leaf,
        ..Default::default()
    })?;
    if ui.json {
        let mut doc = serde_json::json!({"checkpoint": rec.checkpoint, "upto_seq": rec.upto_seq});
        if args.session.is_some() {
            doc["session_leaf"] = serde_json::json!(rec.session_leaf);
        }
        ui.json(&doc)?;
    } else {
        ui.line(&rec.checkpoint)?;
    }
    Ok(OK)
}
