//! `ckpt resolve CONFLICT --keep-user | --apply-agent | --manual | --done`.

use clap::ArgGroup;
use serde_json::json;

use ckpt::config::Config;
use ckpt::conflict::{self, How};

use super::error::{CommandError, ERROR, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
#[command(group(ArgGroup::new("how").required(true).args(["keep_user", "apply_agent", "manual", "done"])))]
pub struct Args {
    /// The conflict id (`cf_…`; `ckpt conflicts` lists them)
    id: String,
    /// Keep your file as it is; the agent's change stays in it
    #[arg(long)]
    keep_user: bool,
    /// Take the agent's change out anyway (your file is stored first; your
    /// edits outside the overlapping lines are kept)
    #[arg(long)]
    apply_agent: bool,
    /// Write the three-way merge with conflict markers into the file, for you
    /// to finish; then run `ckpt resolve CONFLICT --done`
    #[arg(long)]
    manual: bool,
    /// You finished merging by hand
    #[arg(long)]
    done: bool,
    /// With --done: settle even though conflict markers remain
    #[arg(long, requires = "done")]
    force: bool,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let how = if args.keep_user {
        How::KeepUser
    } else if args.apply_agent {
        How::ApplyAgent
    } else if args.manual {
        How::Manual
    } else {
        How::Done { force: args.force }
    };
    let ws = ctx.open()?;
    let cfg =
        Config::load(ws.runtime_dir()).map_err(|e| CommandError::new(ERROR, e.to_string()))?;
    let r = conflict::resolve(&ws, &cfg, &args.id, how)?;
    let c = &r.conflict;
    if ui.json {
        ui.json(&json!({
            "conflict": c.conflict,
            "path": c.path,
            "resolution": conflict::resolution_str(c.resolution),
            "action": r.action,
            "result": r.file.as_ref().map(|f| f.result.as_str()),
        }))?;
        return Ok(OK);
    }
    let msg = match how {
        How::KeepUser => format!("{}: kept your `{}` as it is", c.conflict, c.path),
        How::ApplyAgent => format!(
            "{}: took the agent's change out of `{}` ({}); your previous file is stored — undo with `ckpt rollback --action {}`",
            c.conflict,
            c.path,
            r.file
                .as_ref()
                .map(|f| f.result.as_str())
                .unwrap_or("unchanged"),
            r.action.as_deref().unwrap_or("?")
        ),
        How::Manual => format!(
            "{}: wrote the merge with conflict markers into `{}`; edit it, then run `ckpt resolve {} --done`",
            c.conflict, c.path, c.conflict
        ),
        How::Done { .. } => format!("{}: settled with your merge of `{}`", c.conflict, c.path),
    };
    ui.line(&msg)?;
    Ok(OK)
}
