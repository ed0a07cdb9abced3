//! `ckpt recover`: after a crash, classify every call, finish ckpt's own
//! unfinished actions, and write `.agent-runtime/RECOVERY.md`.

use super::error::{CommandError, NEEDS_PERSON, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(ui: &mut Ui, ctx: &Ctx, _args: &Args) -> Result<i32, CommandError> {
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
