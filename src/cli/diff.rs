//! `ckpt diff [--since CKPT | --call C]`: exactly what the matching rollback
//! would take out of the tree now, one net diff per file (from the state the
//! rollback would leave to the file as it is), computed by that rollback's
//! dry run. Files where the rollback would conflict are named on stderr:
//! their agent part cannot be told from the other edits in them.

use ckpt::config::Config;
use ckpt::patch::{Binary, Side};
use ckpt::rollback::{self, FileResult, Selector};

use super::error::{CommandError, ERROR, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("scope").args(["since", "call"])))]
pub struct Args {
    /// Only what `ckpt rollback --to CKPT` would take out
    #[arg(long, value_name = "CKPT")]
    since: Option<String>,
    /// Only what `ckpt rollback --call C` would take out
    #[arg(long, value_name = "C")]
    call: Option<String>,
    /// Print binary files' changes as whole patches (`GIT binary patch`,
    /// which `git apply` takes), and files above `diff_max_bytes` in full,
    /// not git's one-line summary
    #[arg(long)]
    binary: bool,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let ws = ctx.open()?;
    let selector = match (&args.since, &args.call) {
        (Some(c), _) => Selector::To(c.clone()),
        (_, Some(c)) => Selector::Call(c.clone()),
        _ => Selector::Everything,
    };
    // Everything in effect is planned from the reduced view, as `status`
    // plans it.
    let use_view = selector == Selector::Everything && !ws.whole_reads();
    let source = ckpt::ledger_view::Source::read(&ws, use_view, false)?;
    let (records, read) = (source.records(), source.read_info());
    super::ui::warn_partial(&ws, read);
    let cfg =
        Config::load(ws.runtime_dir()).map_err(|e| CommandError::new(ERROR, e.to_string()))?;
    let report = rollback::dry_plan(&ws, &cfg, records, selector)?;
    let mut out = Vec::new();
    let mut files = Vec::new();
    let mut held = Vec::new();
    for f in &report.files {
        if !f.result.writes() {
            if matches!(f.result, FileResult::Conflict | FileResult::Failed) {
                held.push(f);
            }
            continue;
        }
        let now = match f.from.hash {
            Some(_) => Some(
                ckpt::writeback::observe(&ws, &f.path, u64::MAX)?
                    .bytes
                    .unwrap_or_default(),
            ),
            None => None,
        };
        let then = match f.to.hash {
            Some(_) => match report.planned_bytes(&ws, f) {
                Some(b) => Some(b),
                None => {
                    held.push(f);
                    continue;
                }
            },
            None => None,
        };
        let (binary, max) = match args.binary {
            true => (Binary::Literal, u64::MAX),
            false => (Binary::Summary, cfg.diff_max_bytes),
        };
        let d = ckpt::patch::diff(
            f.path.as_bytes(),
            Side {
                bytes: then.as_deref(),
                mode: f.to.mode.as_deref(),
                git_id: None,
            },
            Side {
                bytes: now.as_deref(),
                mode: f.from.mode.as_deref(),
                git_id: None,
            },
            binary,
            max,
        );
        out.extend_from_slice(&d);
        files.push(serde_json::json!({"path": f.path, "rollback": f.result.as_str()}));
    }
    if ui.json {
        let held: Vec<_> = held
            .iter()
            .map(|f| serde_json::json!({"path": f.path, "rollback": f.result.as_str(), "note": f.note}))
            .collect();
        ui.json(&serde_json::json!({
            "files": files,
            "held": held,
            "diff": String::from_utf8_lossy(&out),
        }))?;
    } else {
        ui.diff(&out)?;
    }
    ui.flush()?;
    for f in &held {
        super::ui::note(&format!(
            "note: {}: not shown, a rollback would not take it out now ({}); see `ckpt status`",
            f.path.display(),
            f.note.as_deref().unwrap_or(f.result.as_str())
        ));
    }
    Ok(OK)
}
