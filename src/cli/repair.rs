//! `ckpt repair [--dry-run]`: the way out of a damaged history.

use super::error::{CommandError, OK, VERIFY_FAILED};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Say what would be done, change nothing
    #[arg(long)]
    dry_run: bool,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let ws = ctx.open_read_only()?;
    let r = ws.repair(args.dry_run)?;
    if ui.json {
        ui.json(&serde_json::to_value(&r).map_err(|e| CommandError::new(1, e.to_string()))?)?;
    } else if !r.needed {
        ui.line("nothing to repair: the ledger, its anchors and the blobs it names are whole")?;
    } else {
        let verb = if args.dry_run { "would" } else { "did" };
        if let Some(why) = &r.marked {
            ui.line(&format!("the damage found: {why}"))?;
        }
        ui.line(&format!(
            "{}: {} records kept{}",
            if args.dry_run { "dry run" } else { "repaired" },
            r.kept,
            match r.rechained_from {
                Some(s) => format!(" (from seq {s} on rewritten to chain on, content unchanged)"),
                None => String::new(),
            }
        ))?;
        if !r.lost.is_empty() {
            ui.line(&format!(
                "  lost: {} record(s), seq {}; a `repair` record stands in for each",
                r.lost.len(),
                compact(&r.lost)
            ))?;
        }
        if let Some(seq) = r.base_restored {
            ui.line(&format!(
                "  ledger.base: the cut `ckpt gc` made up to seq {seq} {} from the gc's record",
                if args.dry_run {
                    "would be recorded again"
                } else {
                    "recorded again"
                }
            ))?;
        }
        for seq in &r.base_dropped {
            ui.line(&format!(
                "  ledger.base: a cut after seq {seq} that no `ckpt gc` planned {} (the records it hid count as lost)",
                if args.dry_run { "would be taken out" } else { "taken out" }
            ))?;
        }
        if let Some(b) = &r.backup {
            ui.line(&format!(
                "  the old ledger, whole ({} bytes in no kept record), {verb} go to .agent-runtime/{b}",
                r.set_aside_bytes
            ))?;
        }
        for c in &r.checkpoints {
            ui.line(&format!("  checkpoint {c}: {verb} re-anchor to the rewritten record (old file kept in damaged/checkpoints/)"))?;
        }
        for b in &r.blobs {
            // A chunk manifest goes beside the blobs, in its own directory.
            let (what, sub) = if b.starts_with("artifacts/chunks/") {
                ("chunk list", "chunks")
            } else {
                ("blob", "blobs")
            };
            ui.line(&format!("  damaged {what} {b}: {verb} move to .agent-runtime/damaged/{sub}/ (anything needing it is refused, not guessed)"))?;
        }
        for p in &r.remaining {
            ui.line(&format!("  still wrong: {p}"))?;
        }
        if args.dry_run {
            ui.line("run `ckpt repair` to do it")?;
        } else if r.remaining.is_empty() {
            ui.line("`ckpt verify` passes; rollback and recover work again for everything whose records are intact")?;
        }
    }
    Ok(if r.remaining.is_empty() {
        OK
    } else {
        VERIFY_FAILED
    })
}

/// `1-3, 7` for [1, 2, 3, 7].
fn compact(seqs: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < seqs.len() {
        let mut j = i;
        while j + 1 < seqs.len() && seqs[j + 1] == seqs[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            seqs[i].to_string()
        } else {
            format!("{}-{}", seqs[i], seqs[j])
        });
        i = j + 1;
    }
    out.join(", ")
}
