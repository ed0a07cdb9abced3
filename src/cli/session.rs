//! `ckpt session append | show | branches`: the session tree (DESIGN §3, §5).

use clap::{Subcommand, ValueEnum};
use serde_json::{Value, json};

use ckpt::record::EntryType;
use ckpt::session::{self, SessionView};

use super::error::{CommandError, OK};
use super::render::short_time;
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: SessionCommand,
}

#[derive(Subcommand, Debug)]
enum SessionCommand {
    /// Append an entry under the session's current leaf (or --parent); prints its id
    Append(AppendArgs),
    /// Print a branch root first: messages, the app state in force, the last compaction
    Show(ShowArgs),
    /// List the leaves of the session tree (abandoned branches included)
    Branches(BranchesArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TypeArg {
    Message,
    #[value(name = "app_state", alias = "app-state")]
    AppState,
    Compaction,
}

#[derive(clap::Args, Debug)]
struct AppendArgs {
    /// The session
    #[arg(long, value_name = "S")]
    session: String,
    /// The entry's type
    #[arg(long = "type", value_enum, value_name = "TYPE")]
    entry_type: TypeArg,
    /// The entry's content, as JSON
    #[arg(long, value_name = "JSON")]
    payload: String,
    /// Hang the entry under this entry instead of the current leaf
    #[arg(long, value_name = "E")]
    parent: Option<String>,
}

#[derive(clap::Args, Debug)]
struct ShowArgs {
    /// The session
    #[arg(long, value_name = "S")]
    session: String,
    /// Show the branch ending at this entry (default: the current leaf)
    #[arg(long, value_name = "E")]
    leaf: Option<String>,
}

#[derive(clap::Args, Debug)]
struct BranchesArgs {
    /// The session
    #[arg(long, value_name = "S")]
    session: String,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    match &args.command {
        SessionCommand::Append(a) => append(ui, ctx, a),
        SessionCommand::Show(a) => show(ui, ctx, a),
        SessionCommand::Branches(a) => branches(ui, ctx, a),
    }
}

fn append(ui: &mut Ui, ctx: &Ctx, a: &AppendArgs) -> Result<i32, CommandError> {
    let payload: Value = serde_json::from_str(&a.payload).map_err(|e| {
        CommandError::usage(format!(
            "--payload is not valid JSON ({e}); quote it, e.g. --payload '{{\"role\":\"user\",\"text\":\"hi\"}}'"
        ))
    })?;
    let entry_type = match a.entry_type {
        TypeArg::Message => EntryType::Message,
        TypeArg::AppState => EntryType::AppState,
        TypeArg::Compaction => EntryType::Compaction,
    };
    let ws = ctx.open()?;
    let id = session::append(&ws, &a.session, entry_type, payload, a.parent.clone())?;
    if ui.json {
        ui.json(&json!({"entry": id, "session": a.session}))?;
    } else {
        ui.line(&id)?;
    }
    Ok(OK)
}

fn show(ui: &mut Ui, ctx: &Ctx, a: &ShowArgs) -> Result<i32, CommandError> {
    let ws = ctx.open()?;
    session::validate_session(&a.session)?;
    let read = ws.read_ledger()?;
    super::ui::warn_partial(&ws, &read);
    let view = match &a.leaf {
        Some(e) => session::show_from(&read.records, &a.session, e)?,
        None => session::show(&read.records, &a.session),
    };
    if ui.json {
        let entries: Vec<Value> = view
            .entries
            .iter()
            .map(|e| json!({"entry": e.entry, "parent": e.parent, "type": e.entry_type, "payload": e.payload}))
            .collect();
        ui.json(&json!({
            "session": view.session,
            "leaf": view.leaf,
            "current": view.current,
            "entries": entries,
            "app_state": view.app_state,
            "compaction": view.compaction,
        }))?;
    } else {
        render_view(ui, &view)?;
    }
    Ok(OK)
}

/// A payload on one line: a message's role and text when it has them, else
/// compact JSON; cut at 100 characters.
fn brief(v: &Value) -> String {
    let text = |o: &serde_json::Map<String, Value>| {
        ["text", "content", "summary"]
            .iter()
            .find_map(|k| o.get(*k).and_then(Value::as_str).map(str::to_string))
    };
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Object(o) => match (o.get("role").and_then(Value::as_str), text(o)) {
            (Some(r), Some(t)) => format!("{r}: {t}"),
            (None, Some(t)) => t,
            _ => v.to_string(),
        },
        _ => v.to_string(),
    };
    let s = s.replace(['\n', '\r', '\t'], " ");
    if s.chars().count() > 100 {
        // Never half a redaction marker.
        format!("{}…", ckpt::redact::cut_chars(&s, 99).0)
    } else {
        s
    }
}

fn render_view(ui: &mut Ui, view: &SessionView) -> Result<(), CommandError> {
    let Some(leaf) = &view.leaf else {
        ui.line(&format!(
            "session `{}` has no entries yet; add one with `ckpt session append --session {} --type message --payload JSON`",
            view.session, view.session
        ))?;
        return Ok(());
    };
    ui.line(&format!(
        "session {}  leaf {}{}  ({} entries on this branch)",
        view.session,
        leaf,
        if view.current {
            " (current)"
        } else {
            " (not current)"
        },
        view.entries.len()
    ))?;
    for e in &view.entries {
        let line = match e.entry_type {
            EntryType::Message => format!("  {}  {}", e.entry, brief(&e.payload)),
            EntryType::AppState => format!("  {}  [app state] {}", e.entry, brief(&e.payload)),
            EntryType::Compaction => format!("  {}  [compaction] {}", e.entry, brief(&e.payload)),
            EntryType::Branch => format!(
                "  {}  {}",
                e.entry,
                ui.paint(
                    "2",
                    &format!(
                        "[restored here from {}]",
                        e.payload.get("from").and_then(Value::as_str).unwrap_or("-")
                    )
                )
            ),
        };
        ui.line(&line)?;
    }
    ui.line(&format!(
        "app state in force: {}",
        view.app_state
            .as_ref()
            .map(|v| v.to_string())
            .unwrap_or_else(|| "none".into())
    ))?;
    if let Some(c) = &view.compaction {
        ui.line(&format!("last compaction: {}", brief(c)))?;
    }
    Ok(())
}

fn branches(ui: &mut Ui, ctx: &Ctx, a: &BranchesArgs) -> Result<i32, CommandError> {
    let ws = ctx.open()?;
    session::validate_session(&a.session)?;
    let read = ws.read_ledger()?;
    super::ui::warn_partial(&ws, &read);
    let leaves = session::branches(&read.records, &a.session);
    if ui.json {
        ui.json(&json!({"session": a.session, "leaves": leaves}))?;
        return Ok(OK);
    }
    if leaves.is_empty() {
        ui.line(&format!("session `{}` has no entries yet", a.session))?;
        return Ok(OK);
    }
    for l in &leaves {
        ui.line(&format!(
            "{} {}  depth {:<4} {}{}",
            if l.current { "*" } else { " " },
            l.entry,
            l.depth,
            short_time(&l.last_ts),
            if l.current { "  (current)" } else { "" }
        ))?;
    }
    ui.line(&format!(
        "show one with `ckpt session show --session {} --leaf ENTRY`",
        a.session
    ))?;
    Ok(OK)
}
