//! `ckpt gc [--keep N] [--older-than DUR] [--dry-run] [--auto]`: remove what
//! no kept checkpoint needs.

use std::os::fd::AsFd;

use ckpt::config::Config;
use ckpt::gc::{Counted, GcOptions, GcReport};

use super::error::{CommandError, ERROR, OK, USAGE};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Keep the N newest checkpoints (default: keep_checkpoints in config.toml)
    #[arg(long, value_name = "N")]
    keep: Option<u64>,
    /// Keep every checkpoint and call younger than this: 30d, 12h, 2w (default: keep_days)
    #[arg(long, value_name = "DUR")]
    older_than: Option<String>,
    /// Say what would be removed and how many bytes; remove nothing
    #[arg(long)]
    dry_run: bool,
    /// Only when .agent-runtime/ is past max_runtime_bytes (what a prompt hook starts)
    #[arg(long, conflicts_with_all = ["keep", "older_than", "dry_run"])]
    auto: bool,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let older_than_ms = match &args.older_than {
        Some(d) => Some(ckpt::gc::parse_duration(d).ok_or_else(|| {
            CommandError::new(
                USAGE,
                format!("--older-than `{d}` is not a duration; write a number and a unit: 30d, 12h, 90m, 2w"),
            )
        })?),
        None => None,
    };
    let ws = ctx.open()?;
    let cfg =
        Config::load(ws.runtime_dir()).map_err(|e| CommandError::new(ERROR, e.to_string()))?;
    let budget = cfg.max_runtime_bytes;
    if args.auto {
        let before = ckpt::gc::runtime_bytes(&ws);
        if budget == 0 || before <= budget {
            if ui.json {
                ui.json(&serde_json::json!({"auto": true, "ran": false, "runtime_bytes": before, "max_runtime_bytes": budget}))?;
            }
            return Ok(OK);
        }
        let r = ckpt::gc::gc(&ws, &cfg, &GcOptions::default())?;
        let after = ckpt::gc::runtime_bytes(&ws);
        ckpt::gc::note_budget(&ws, after, budget);
        let fields = serde_json::json!({
            "action": r.action, "removed_bytes": r.bytes(), "runtime_bytes": after,
            "max_runtime_bytes": budget,
        });
        let rt = ws.runtime_dir();
        if after > budget {
            // Said where the user looks: the trace, and `ckpt status`.
            ckpt::trace::error(rt.as_fd(), ws.clock(), "gc_over_budget", fields.clone());
        } else {
            ckpt::trace::event(rt.as_fd(), ws.clock(), "gc_auto", fields.clone());
        }
        if ui.json {
            ui.json(&serde_json::json!({"auto": true, "ran": true, "report": r, "runtime_bytes": after}))?;
        } else {
            render(ui, &r)?;
            if after > budget {
                ui.line(&format!(
                    "still over max_runtime_bytes ({} > {}): what the retention keeps is bigger; lower keep_days or keep_checkpoints, or raise the budget",
                    size(after),
                    size(budget)
                ))?;
            }
        }
        return Ok(OK);
    }
    let opts = GcOptions {
        keep: args.keep,
        older_than_ms,
        dry_run: args.dry_run,
    };
    let r = ckpt::gc::gc(&ws, &cfg, &opts)?;
    // A collection that fits the budget again takes back what `status` says.
    if !args.dry_run && ckpt::gc::over_budget(&ws).is_some() {
        ckpt::gc::note_budget(&ws, ckpt::gc::runtime_bytes(&ws), budget);
    }
    if ui.json {
        ui.json(&serde_json::to_value(&r).map_err(|e| CommandError::new(ERROR, e.to_string()))?)?;
    } else {
        render(ui, &r)?;
    }
    Ok(OK)
}

fn render(ui: &mut Ui, r: &GcReport) -> Result<(), CommandError> {
    let what = |c: &Counted, one: &str, many: &str| {
        format!(
            "{} {} ({})",
            c.files,
            if c.files == 1 { one } else { many },
            size(c.bytes)
        )
    };
    let mut parts = vec![
        what(&r.blobs, "stored content", "stored contents"),
        what(&r.patches, "patch artifact", "patch artifacts"),
        what(&r.outputs, "compensation output", "compensation outputs"),
    ];
    if let Some(seq) = r.ledger_cut_seq {
        parts.push(format!(
            "the ledger's {} oldest record{} (seq {}–{seq}, {})",
            r.ledger_records,
            if r.ledger_records == 1 { "" } else { "s" },
            seq + 1 - r.ledger_records,
            size(r.ledger_bytes)
        ));
    }
    let total = r.blobs.files + r.patches.files + r.outputs.files + r.ledger_records;
    if total == 0 {
        ui.line(&format!(
            "nothing to collect: the {} kept stored contents ({}) are all needed",
            r.kept_blobs.files,
            size(r.kept_blobs.bytes)
        ))?;
    } else if r.dry_run {
        ui.line(&format!(
            "dry run: would remove {}; {} in all",
            parts.join(", "),
            size(r.bytes())
        ))?;
    } else {
        ui.line(&format!(
            "removed {}; {} freed (action {})",
            parts.join(", "),
            size(r.bytes()),
            r.action.as_deref().unwrap_or("-")
        ))?;
    }
    let kept = match r.kept_checkpoints.as_slice() {
        [] => "no checkpoint".to_string(),
        [one] => format!("1 checkpoint ({one})"),
        [first, .., last] => format!(
            "{} checkpoints ({first} … {last})",
            r.kept_checkpoints.len()
        ),
    };
    ui.line(&format!(
        "  {} restorable: {kept}, and every call after seq {}",
        if r.dry_run { "stays" } else { "still" },
        r.horizon_seq
    ))?;
    if !r.collected_checkpoints.is_empty() {
        ui.line(&format!(
            "  {} older checkpoint(s) {} no longer be rolled back to: {}",
            r.collected_checkpoints.len(),
            if r.dry_run { "would" } else { "can" },
            shorten(&r.collected_checkpoints)
        ))?;
    }
    if let Some(h) = &r.ledger_held {
        ui.line(&format!(
            "  the ledger keeps its records from seq {} on: {}",
            h.from_seq, h.by
        ))?;
    }
    ui.line(&format!(
        "  kept: {} stored contents ({}) that kept history, open conflicts, calls in doubt, unfinished actions, the tree's snapshots or your recent versions need",
        r.kept_blobs.files,
        size(r.kept_blobs.bytes)
    ))?;
    if r.dry_run && total > 0 {
        ui.line("run the same `ckpt gc` without --dry-run to do it")?;
    }
    Ok(())
}

fn shorten(ids: &[String]) -> String {
    if ids.len() <= 4 {
        ids.join(", ")
    } else {
        format!("{}, {} … {}", ids[0], ids[1], ids[ids.len() - 1])
    }
}

/// `12 B`, `3.4 KB`, `1.2 GB` (powers of 1000, as `du -h --si`).
pub fn size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < UNITS.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
