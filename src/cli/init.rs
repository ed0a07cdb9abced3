use ckpt::{OpenOptions, Workspace};

use super::error::{CommandError, OK};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Also merge ckpt's hooks into this agent's settings file
    #[arg(long, value_name = "claude|codex|gemini|cursor")]
    hooks: Option<String>,
    /// With --hooks: take ckpt's hooks out of that agent's settings file again
    #[arg(long, requires = "hooks")]
    remove: bool,
}

/// How agents should run ckpt: this binary's absolute path when it is
/// installed, plain `ckpt` when running from a build directory.
fn ckpt_command() -> String {
    match std::env::current_exe() {
        Ok(p) if !p.components().any(|c| c.as_os_str() == "target") => {
            let s = p.display().to_string();
            if s.contains(' ') || s.contains('"') {
                format!("\"{}\"", s.replace('"', "\\\""))
            } else {
                s
            }
        }
        _ => "ckpt".to_string(),
    }
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let agent = match &args.hooks {
        Some(a) => Some(
            a.parse::<ckpt::agent_settings::Agent>()
                .map_err(CommandError::usage)?,
        ),
        None => None,
    };
    if let (Some(agent), true) = (agent, args.remove) {
        let ws = ctx.open_read_only()?;
        let h = ckpt::agent_settings::uninstall(&ws, agent)
            .map_err(|e| CommandError::new(super::error::ERROR, super::error::one_line(&e)))?;
        if ui.json {
            ui.json(&serde_json::json!({"hooks": {"file": h.file, "removed": h.added}}))?;
        } else if h.added > 0 {
            ui.line(&format!(
                "removed {} ckpt hook(s) from {}; the rest of it is as it was",
                h.added, h.file
            ))?;
        } else {
            ui.line(&format!("{} has no ckpt hooks; nothing changed", h.file))?;
        }
        return Ok(OK);
    }
    let (ws, stats) = Workspace::init(&ctx.workspace, OpenOptions { clock: ctx.clock() })?;
    let hooks = match agent {
        Some(agent) => Some(
            ckpt::agent_settings::install(&ws, agent, &ckpt_command())
                .map_err(|e| CommandError::new(super::error::ERROR, super::error::one_line(&e)))?,
        ),
        None => None,
    };
    if ui.json {
        ui.json(&serde_json::json!({
            "workspace": ws.root().display().to_string(),
            "created": stats.created,
            "wrote_config": stats.wrote_config,
            "hooks": hooks.as_ref().map(|h| serde_json::json!({"file": h.file, "added": h.added, "moved_from": h.moved_from})),
        }))?;
        return Ok(OK);
    }
    if let Some(h) = &hooks {
        if let Some(old) = &h.moved_from {
            ui.line(&format!(
                "moved ckpt's hooks out of {old} (not read when a session starts in a subdirectory)"
            ))?;
        }
        if h.added > 0 {
            ui.line(&format!("added {} ckpt hook(s) to {}", h.added, h.file))?;
        } else {
            ui.line(&format!(
                "{} already has ckpt's hooks; nothing changed",
                h.file
            ))?;
        }
    }
    if hooks.is_some() && !stats.created {
        return Ok(OK);
    } else if stats.created {
        ui.line(&format!(
            "initialised ckpt in `{}` (data in .agent-runtime/)",
            ws.root().display()
        ))?;
    } else {
        ui.line(&format!(
            "ckpt is already initialised in `{}`; nothing changed",
            ws.root().display()
        ))?;
    }
    Ok(OK)
}
