use super::error::{CommandError, OK};
use super::render::{describe, short_time};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only records of this session
    #[arg(long, value_name = "S")]
    session: Option<String>,
    /// Only the last N records
    #[arg(short = 'n', long, value_name = "N")]
    limit: Option<usize>,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let ws = ctx.open()?;
    // `-n N` alone reads the last N records from the end of the ledger
    // (checked and chained; anything unclean there reads it all instead,
    // which says what is wrong).
    let last = match (args.limit, &args.session) {
        (Some(n), None) => ws.ledger().read_last(n)?,
        _ => None,
    };
    // The ledger's first record: after seq 1 when `ckpt gc` cut it.
    let mut first_seq = None;
    let (rows, read) = match last {
        Some(rows) => (rows, None),
        None => {
            let mut rows: Vec<(Vec<u8>, ckpt::Record)> = Vec::new();
            let read = ws.ledger().scan(|raw, rec| {
                first_seq.get_or_insert(rec.seq);
                if args.session.is_none() || rec.session == args.session {
                    rows.push((if ui.json { raw.to_vec() } else { Vec::new() }, rec));
                }
                Ok(())
            })?;
            if let Some(n) = args.limit {
                let skip = rows.len().saturating_sub(n);
                rows.drain(..skip);
            }
            (rows, Some(read))
        }
    };
    if ui.json {
        // Records are embedded exactly as stored: each line is a JSON object.
        let out = ui.out();
        out.write_all(b"{\"records\": [")?;
        for (i, (raw, _)) in rows.iter().enumerate() {
            out.write_all(if i == 0 { b"\n  " } else { b",\n  " })?;
            out.write_all(raw)?;
        }
        out.write_all(b"\n]}\n")?;
    } else {
        if rows.is_empty() {
            ui.line("the ledger is empty: nothing recorded yet")?;
        }
        if let Some(first) = first_seq.filter(|&s| s > 1)
            && args.limit.is_none_or(|n| n >= rows.len())
            && rows
                .first()
                .is_some_and(|(_, r)| r.seq == first || args.session.is_some())
        {
            ui.line(&format!(
                "(the records up to seq {} were taken out of the ledger by `ckpt gc`)",
                first - 1
            ))?;
        }
        for (_, r) in &rows {
            let (kind, text) = describe(r);
            let kind = format!("{kind:<10}");
            let session = r
                .session
                .as_deref()
                .map(|s| format!("  [{s}]"))
                .unwrap_or_default();
            let line = format!(
                "{:>5}  {}  {}  {text}{session}",
                r.seq,
                short_time(&r.ts),
                ui.paint("1", &kind)
            );
            ui.line(&line)?;
        }
    }
    if let Some(read) = read {
        ws.ledger().note_damage(&read);
        if !super::ui::warn_partial(&ws, &read) && read.torn.is_some() {
            super::ui::note(
                "note: the ledger ends with a torn record (a crash mid-write); the next ckpt write repairs it",
            );
        }
    }
    Ok(OK)
}
