//! `ckpt exec [--session S] [--call C] [--tool T] -- CMD…`: a pre hook, the
//! command, a post hook; exits with the command's status.

use ckpt::capture::{self, Format, Phase};
use ckpt::config::{Config, OnRecordFailure};
use ckpt::{OpenOptions, Workspace};

use super::error::{CommandError, ERROR};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The session the call belongs to
    #[arg(long, value_name = "S", env = "CKPT_SESSION", default_value = "exec")]
    session: String,
    /// The call id (default: a new one)
    #[arg(long, value_name = "C")]
    call: Option<String>,
    /// The tool name recorded for the call
    #[arg(long, value_name = "T", default_value = "exec")]
    tool: String,
    /// The command and its arguments (run directly, not through a shell)
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

pub fn run(_ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let ws = match Workspace::open(&ctx.workspace, OpenOptions { clock: ctx.clock() }) {
        Ok(ws) => ws,
        Err(ckpt::WorkspaceError::NotInitialized(_)) => {
            Workspace::init(&ctx.workspace, OpenOptions { clock: ctx.clock() })?.0
        }
        Err(e) => return Err(e.into()),
    };
    let cfg =
        Config::load(ws.runtime_dir()).map_err(|e| CommandError::new(ERROR, e.to_string()))?;
    let call = args
        .call
        .clone()
        .unwrap_or_else(|| ws.clock().new_id("call_"));
    let pre = serde_json::json!({
        "session": args.session,
        "call": call,
        "tool": args.tool,
        "input": {"argv": args.command},
    });
    let ev = capture::parse(
        pre.to_string().as_bytes(),
        Phase::Pre,
        Some(Format::Generic),
    )
    .map_err(|e| CommandError::new(ERROR, e.to_string()))?;
    if let Err(e) = ckpt::hook::run(&ws, &cfg, &ev) {
        let msg = super::error::one_line(&e);
        if cfg.on_record_failure == OnRecordFailure::Block {
            return Err(CommandError::new(
                ERROR,
                format!(
                    "not running the command: ckpt could not record the state before it ({msg}); set on_record_failure = \"warn\" to run it anyway"
                ),
            ));
        }
        super::ui::note(&format!(
            "ckpt warning: the command's changes will not be recorded: {msg}"
        ));
    }
    let status = std::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .current_dir(std::env::current_dir().unwrap_or_else(|_| ws.root().to_path_buf()))
        .status();
    let (code, failure) = match &status {
        Ok(s) => match s.code() {
            Some(c) => (c, (c != 0).then(|| format!("exit status {c}"))),
            None => {
                use std::os::unix::process::ExitStatusExt;
                let sig = s.signal().unwrap_or(0);
                (128 + sig, Some(format!("killed by signal {sig}")))
            }
        },
        Err(e) => (127, Some(format!("cannot run `{}`: {e}", args.command[0]))),
    };
    let post = serde_json::json!({
        "session": args.session,
        "call": call,
        "status": if failure.is_some() { "failed" } else { "succeeded" },
        "error": failure,
        "result": {"exit_code": code},
    });
    let phase = if failure.is_some() {
        Phase::PostFailure
    } else {
        Phase::Post
    };
    let ev = capture::parse(post.to_string().as_bytes(), phase, Some(Format::Generic))
        .map_err(|e| CommandError::new(ERROR, e.to_string()))?;
    match ckpt::hook::run(&ws, &cfg, &ev) {
        Ok(stats) => {
            for w in &stats.warnings {
                super::ui::note(&format!("ckpt warning: {w}"));
            }
        }
        Err(e) => super::ui::note(&format!(
            "ckpt warning: the command ran but its changes could not be recorded: {}",
            super::error::one_line(&e)
        )),
    }
    if let Err(e) = &status {
        super::ui::note(&format!("error: cannot run `{}`: {e}", args.command[0]));
    }
    Ok(code)
}
