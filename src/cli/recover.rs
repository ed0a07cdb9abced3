//! `ckpt recover`: after a crash, classify every call, finish ckpt's own
//! unfinished actions, and write `.agent-runtime/RECOVERY.md`.

use super::error::{CommandError, NEEDS_PERSON, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Record what happened to a call in doubt, once you have checked it (needs --as)
    #[arg(long, value_name = "CALL", requires = "as_")]
    settle: Option<String>,
    /// What the call in doubt did: succeeded (it happened) or failed (it did not)
    #[arg(long = "as", id = "as_", value_name = "OUTCOME", requires = "settle", value_parser = ["succeeded", "failed"])]
    as_: Option<String>,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    if let (Some(call), Some(how)) = (&args.settle, &args.as_) {
        let ws = ctx.open()?;
        let how = if how == "succeeded" {
            ckpt::recover::Settled::Succeeded
        } else {
            ckpt::recover::Settled::Failed
        };
        ckpt::recover::settle(&ws, call, how)?;
        let status = if how == ckpt::recover::Settled::Succeeded {
            "succeeded"
        } else {
            "failed"
        };
        if ui.json {
            ui.json(&serde_json::json!({"call": call, "status": status, "settled": true}))?;
        } else {
            ui.line(&format!(
                "call {call} settled as {status}; `ckpt recover` no longer asks about it"
            ))?;
        }
        return Ok(OK);
    }
    let ws = ctx.open_read_only()?;
    let r = ckpt::recover::recover(&ws)?;
    if ui.json {
        ui.json(&ckpt::recover::to_json(&r))?;
    } else {
        let count = |s: &str| r.calls.iter().filter(|c| c.status == s).count();
        ui.line(&format!(
            "{} calls in the ledger; in doubt or recent: {} completed, {} failed, {} pending, {} uncertain, {} running; {} ckpt actions were unfinished",
            r.total_calls,
            count("completed"),
            count("failed"),
            count("pending"),
            count("uncertain"),
            count("running"),
            r.actions.len()
        ))?;
        ui.line(&format!("wrote {}:\n", r.note))?;
        for l in r.note_text.lines() {
            ui.line(&format!("  {l}"))?;
        }
        if r.needs_person {
            ui.line("\nsomething needs a person (see \"Needs a person\" above); exit 5")?;
        }
    }
    Ok(if r.needs_person { NEEDS_PERSON } else { OK })
}
