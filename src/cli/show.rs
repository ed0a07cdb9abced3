use ckpt::record::Body;

use super::error::{CommandError, OK};
use super::render::{describe, short_time};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A checkpoint, call, patch, action or conflict id
    id: String,
    /// Print binary and large files' changes as whole patches (`GIT binary
    /// patch`, as `git diff --binary`), rendered from the stored contents,
    /// not git's one-line summary
    #[arg(long)]
    binary: bool,
}

fn matches(rec: &ckpt::Record, id: &str) -> bool {
    match &rec.body {
        Body::ToolCall(c) => c.call == id,
        Body::FilePatch(p) => p.patch == id || p.call == id,
        Body::Checkpoint(c) => c.checkpoint == id,
        Body::Action(a) => a.action == id,
        Body::Conflict(c) => c.conflict == id || c.action == id,
        Body::SessionEntry(e) => e.entry == id,
        _ => false,
    }
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let ws = ctx.open()?;
    let id = args.id.as_str();
    let mut found: Vec<(Vec<u8>, ckpt::Record)> = Vec::new();
    let mut horizon = 0;
    let mut first = 0;
    let read = ws.ledger().scan(|raw, rec| {
        if first == 0 {
            first = rec.seq;
        }
        if matches!(&rec.body, Body::Action(a) if a.action_type == ckpt::record::ActionType::Gc) {
            horizon = horizon.max(ckpt::gc::horizon(std::slice::from_ref(&rec)));
        }
        if matches(&rec, id) {
            found.push((raw.to_vec(), rec));
        }
        Ok(())
    })?;
    ws.ledger().note_damage(&read);
    let partial = super::ui::warn_partial(&ws, &read);
    if found.is_empty() && partial {
        return Err(CommandError::new(
            super::error::ERROR,
            format!(
                "`{id}` is not in the readable part of the ledger (it may be past the damage); run `ckpt verify`, then `ckpt repair`"
            ),
        ));
    }
    if found.is_empty() {
        return Err(ckpt::gc::unknown_id(first, id).into());
    }
    let kind = match &found[0].1.body {
        Body::Checkpoint(_) => "checkpoint",
        Body::ToolCall(_) => "call",
        Body::FilePatch(p) if p.patch == id => "patch",
        Body::FilePatch(_) => "call",
        Body::Action(_) => "action",
        Body::Conflict(_) => "conflict",
        Body::SessionEntry(_) => "session_entry",
        _ => "record",
    };
    let mut diffs: Vec<(String, Vec<u8>)> = Vec::new();
    for (_, r) in &found {
        if let Body::FilePatch(p) = &r.body {
            let binary = if args.binary {
                ckpt::patch::Binary::Literal
            } else {
                ckpt::patch::Binary::Summary
            };
            let d = ckpt::call::patch_diff(&ws, p, binary).unwrap_or_else(|e| {
                if r.seq <= horizon {
                    format!("(diff collected by `ckpt gc`: it kept the history after seq {horizon} only)\n")
                } else {
                    format!("(patch artifact unavailable: {e})\n")
                }
                .into_bytes()
            });
            diffs.push((p.patch.clone(), d));
        }
    }
    let checkpoint_file = match &found[0].1.body {
        Body::Checkpoint(c) => Some(ws.checkpoint_file(&c.checkpoint)),
        _ => None,
    };
    if ui.json {
        let out = ui.out();
        write!(
            out,
            "{{\"id\": {}, \"kind\": \"{kind}\", \"records\": [",
            serde_json::to_string(id).unwrap_or_default()
        )?;
        for (i, (raw, _)) in found.iter().enumerate() {
            out.write_all(if i == 0 { b"\n  " } else { b",\n  " })?;
            out.write_all(raw)?;
        }
        out.write_all(b"\n], \"diffs\": {")?;
        for (i, (pid, d)) in diffs.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            write!(
                out,
                "\n  {}: {}",
                serde_json::to_string(pid).unwrap_or_default(),
                serde_json::to_string(&String::from_utf8_lossy(d)).unwrap_or_default()
            )?;
        }
        out.write_all(b"}")?;
        if let Some(Ok(f)) = &checkpoint_file {
            write!(
                out,
                ", \"checkpoint_file\": {}",
                serde_json::to_string(f).unwrap_or_default()
            )?;
        }
        out.write_all(b"}\n")?;
        return Ok(OK);
    }
    ui.line(&format!("{kind} {id}"))?;
    for (_, r) in &found {
        let (k, text) = describe(r);
        ui.line(&format!(
            "  seq {:>5}  {}  {k:<10} {text}",
            r.seq,
            short_time(&r.ts)
        ))?;
    }
    match &checkpoint_file {
        Some(Ok(f)) => {
            if let Some(g) = &f.git {
                ui.line(&format!(
                    "  git: head {} branch {} {}",
                    g.head.as_deref().unwrap_or("(none)"),
                    g.branch.as_deref().unwrap_or("(detached)"),
                    if g.dirty { "dirty" } else { "clean" }
                ))?;
            }
            ui.line(&format!(
                "  anchors seq {} {}",
                f.upto_seq,
                f.upto_hash.as_deref().unwrap_or("")
            ))?;
        }
        Some(Err(e)) => ui.line(&format!("  warning: {e}"))?,
        None => {}
    }
    for (_, d) in &diffs {
        ui.line("")?;
        ui.diff(d)?;
    }
    if kind == "conflict"
        && let Some(c) =
            ckpt::conflict::list(&found.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>())
                .into_iter()
                .find(|c| c.conflict == id)
    {
        show_conflict(ui, &ws, &c)?;
    }
    Ok(OK)
}

/// The three-way view of a conflict: the agent's change, the user's changes
/// since, and the undo merged with diff3 markers.
fn show_conflict(
    ui: &mut Ui,
    ws: &ckpt::Workspace,
    c: &ckpt::record::ConflictRecord,
) -> Result<(), CommandError> {
    use ckpt::patch::{Side, unified_diff};
    let tw = ckpt::conflict::three_way(ws, c);
    let path = c.path.as_bytes();
    ui.line("")?;
    ui.line(&format!(
        "conflict on `{}`: {} (resolution: {})",
        c.path,
        ckpt::rollback::conflict_reason_text(c.reason.as_deref().unwrap_or("")),
        ckpt::conflict::resolution_str(c.resolution)
    ))?;
    let side = |b: &Option<Vec<u8>>, m: &Option<String>| -> (Option<Vec<u8>>, Option<String>) {
        (b.clone(), m.clone())
    };
    let (base, bm) = side(&tw.base, &c.base_mode);
    let (agent, am) = side(&tw.agent, &c.agent_mode);
    let (cur, cm) = side(&tw.current, &c.current_mode);
    ui.line("")?;
    ui.line("── the agent's change (before → agent) ──")?;
    ui.diff(&unified_diff(
        path,
        Side {
            bytes: base.as_deref(),
            mode: bm.as_deref(),
            git_id: None,
        },
        Side {
            bytes: agent.as_deref(),
            mode: am.as_deref(),
            git_id: None,
        },
    ))?;
    ui.line("── changes since the agent (agent → yours) ──")?;
    ui.diff(&unified_diff(
        path,
        Side {
            bytes: agent.as_deref(),
            mode: am.as_deref(),
            git_id: None,
        },
        Side {
            bytes: cur.as_deref(),
            mode: cm.as_deref(),
            git_id: None,
        },
    ))?;
    match (&base, &agent, &cur) {
        (Some(b), Some(a), Some(now)) => match ckpt::conflict::three_way_merge(b, a, now) {
            Ok(ckpt::merge::MergeOutcome::Conflict {
                merged_with_markers,
                hunks,
            }) => {
                ui.line(&format!(
                    "── the undo merged into your file ({hunks} conflicting hunk{}) ──",
                    if hunks == 1 { "" } else { "s" }
                ))?;
                ui.out().write_all(&merged_with_markers)?;
                if !merged_with_markers.ends_with(b"\n") {
                    ui.line("")?;
                }
            }
            Ok(ckpt::merge::MergeOutcome::Clean(_)) => {
                ui.line("── the undo now merges cleanly into your file: `ckpt resolve … --apply-agent` keeps all your edits ──")?;
            }
            Ok(ckpt::merge::MergeOutcome::Binary) => ui.line("── binary: no line merge ──")?,
            Err(e) => ui.line(&format!("── no merge view: {e} ──"))?,
        },
        _ => ui.line("── no merge view: one side is absent ──")?,
    }
    if c.resolution == ckpt::record::Resolution::Pending {
        ui.line(&format!(
            "settle it: ckpt resolve {} --keep-user | --apply-agent | --manual",
            c.conflict
        ))?;
    }
    Ok(())
}
