use ckpt::record::{Body, PatchSource};

use super::error::{CommandError, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only the agent's changes after this checkpoint
    #[arg(long, value_name = "CKPT")]
    since: Option<String>,
    /// Only this call's changes
    #[arg(long, value_name = "C")]
    call: Option<String>,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let ws = ctx.open()?;
    let read = ws.read_ledger()?;
    let since = match &args.since {
        Some(id) => Some(
            read.records
                .iter()
                .find_map(|r| match &r.body {
                    Body::Checkpoint(c) if c.checkpoint == *id => Some(c.upto_seq),
                    _ => None,
                })
                .ok_or_else(|| CommandError::from(ckpt::WorkspaceError::UnknownId(id.clone())))?,
        ),
        None => None,
    };
    if let Some(c) = &args.call
        && !read
            .records
            .iter()
            .any(|r| matches!(&r.body, Body::ToolCall(t) if t.call == *c))
    {
        return Err(ckpt::WorkspaceError::UnknownId(c.clone()).into());
    }
    let mut out = Vec::new();
    let mut patches = Vec::new();
    for r in &read.records {
        let Body::FilePatch(p) = &r.body else {
            continue;
        };
        if p.source == PatchSource::Rollback
            || since.is_some_and(|s| r.seq <= s)
            || args.call.as_ref().is_some_and(|c| *c != p.call)
        {
            continue;
        }
        let d = ckpt::call::read_patch_artifact(&ws, &p.patch)?;
        out.extend_from_slice(&d);
        patches.push(
            serde_json::json!({"patch": p.patch, "call": p.call, "path": p.path, "op": p.op}),
        );
    }
    if ui.json {
        ui.json(&serde_json::json!({"patches": patches, "diff": String::from_utf8_lossy(&out)}))?;
    } else {
        ui.diff(&out)?;
    }
    Ok(OK)
}
