use ckpt::Workspace;

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
    /// With --hooks claude|gemini: use your user-level settings file, read in
    /// every directory (its hooks record only where `ckpt init` ran)
    #[arg(long, requires = "hooks")]
    user: bool,
    /// With --hooks codex: also write the entries that make Codex trust this
    /// project and ckpt's hooks into $CODEX_HOME/config.toml (~/.codex)
    #[arg(long, requires = "hooks", conflicts_with = "remove")]
    trust: bool,
}

/// `$CODEX_HOME/config.toml`, or `~/.codex/config.toml`.
fn codex_config() -> Option<std::path::PathBuf> {
    Some(super::doctor::user_dirs().codex_dir()?.join("config.toml"))
}

/// After `--hooks codex`: Codex runs project hooks only once they are
/// trusted. With `--trust` the entries are written (and said so); without,
/// what is missing is printed with the way to add it.
fn codex_trust(
    ui: &mut Ui,
    ws: &ckpt::Workspace,
    write: bool,
) -> Result<serde_json::Value, CommandError> {
    use ckpt::agent_settings as s;
    let err = |e: String| CommandError::new(super::error::ERROR, e);
    let entries = s::codex_trust_for(ws).map_err(|e| err(super::error::one_line(&e)))?;
    let Some(path) = codex_config() else {
        return Err(err(
            "cannot tell where Codex keeps its config: set CODEX_HOME or HOME".into(),
        ));
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(err(format!("cannot read `{}`: {e}", path.display()))),
    };
    let missing = s::codex_trust_missing(&text, &entries);
    let toml_text = |m: &[s::CodexTrust]| {
        m.iter()
            .map(|t| {
                format!(
                    "[{}]\n{} = {}\n",
                    t.table,
                    t.key,
                    serde_json::to_string(&t.value).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    if missing.is_empty() {
        if !ui.json {
            ui.line(&format!(
                "Codex trusts this project and ckpt's hooks ({})",
                path.display()
            ))?;
        }
        return Ok(serde_json::json!({"config": path, "trusted": true, "written": 0}));
    }
    if !write {
        super::ui::note(&format!(
            "warning: Codex will not run these hooks, and says nothing, until it trusts them: run `ckpt init --hooks codex --trust` to add {} entries to {}, or add them yourself:\n{}",
            missing.len(),
            path.display(),
            toml_text(&missing)
        ));
        return Ok(serde_json::json!({"config": path, "trusted": false, "missing": missing.len()}));
    }
    let new = s::codex_trust_apply(&text, &missing).map_err(|e| {
        err(format!(
            "cannot add Codex's trust entries to `{}`: {e}; add them by hand:\n{}",
            path.display(),
            toml_text(&missing)
        ))
    })?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| err(format!("cannot create `{}`: {e}", dir.display())))?;
    }
    let tmp = path.with_extension("toml.ckpt-tmp");
    std::fs::write(&tmp, new.as_bytes())
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(|e| err(format!("cannot write `{}`: {e}", path.display())))?;
    if !ui.json {
        ui.line(&format!(
            "wrote {} trust entries for this project and ckpt's hooks to {}:",
            missing.len(),
            path.display()
        ))?;
        for l in toml_text(&missing).lines() {
            ui.line(&format!("  {l}"))?;
        }
    }
    Ok(serde_json::json!({"config": path, "trusted": true, "written": missing.len()}))
}

/// How agents should run ckpt: this binary's absolute path when it is
/// installed (an agent's hooks may run with another PATH than this shell's:
/// a bare `ckpt` could then not resolve, and nothing be recorded), plain
/// `ckpt` when running from a build directory.
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
    use ckpt::agent_settings::{self as settings, Agent, Scope};
    let agent = match &args.hooks {
        Some(a) => Some(a.parse::<Agent>().map_err(CommandError::usage)?),
        None => None,
    };
    if args.trust && agent != Some(Agent::Codex) {
        return Err(CommandError::usage(
            "--trust is for --hooks codex (the other agents need no trust entries)",
        ));
    }
    if args.user
        && let Some(a) = agent
        && !settings::user_scope_supported(a)
    {
        return Err(CommandError::usage(format!(
            "--user is for --hooks claude and --hooks gemini; {a:?} reads ckpt's hooks from the project (drop --user)"
        )));
    }
    let scope = if args.user {
        Scope::User
    } else {
        Scope::Project
    };
    let dirs = super::doctor::user_dirs();
    let failed = |e: settings::SettingsError| {
        CommandError::new(super::error::ERROR, super::error::one_line(&e))
    };
    if let (Some(agent), true) = (agent, args.remove) {
        let ws = ctx.open_read_only()?;
        let h = settings::uninstall(&ws, agent, scope, &dirs).map_err(failed)?;
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
    let (ws, stats) = Workspace::init(&ctx.workspace, ctx.open_options())?;
    let hooks = match agent {
        Some(agent) => {
            Some(settings::install(&ws, agent, &ckpt_command(), scope, &dirs).map_err(failed)?)
        }
        None => None,
    };
    if let (false, Some(h)) = (ui.json, &hooks) {
        if let Some(old) = &h.moved_from {
            ui.line(&match scope {
                Scope::User => format!(
                    "took ckpt's hooks out of {old} (the user-level ones now record this workspace)"
                ),
                Scope::Project => format!(
                    "moved ckpt's hooks out of {old} (not read when a session starts in a subdirectory)"
                ),
            })?;
        }
        if h.added > 0 {
            ui.line(&format!("added {} ckpt hook(s) to {}", h.added, h.file))?;
        } else {
            ui.line(&format!(
                "{} already has ckpt's hooks; nothing changed",
                h.file
            ))?;
        }
        if scope == Scope::User {
            ui.line(
                "they run in every directory and record only in workspaces where `ckpt init` ran, from any subdirectory",
            )?;
        }
    }
    let trust = match agent {
        Some(Agent::Codex) => Some(codex_trust(ui, &ws, args.trust)?),
        _ => None,
    };
    // The same checks as `ckpt doctor`, for this agent: what would still
    // leave its calls unrecorded (Codex's trust was just handled above).
    let problems: Vec<ckpt::doctor::Problem> = match agent {
        Some(a) => ckpt::doctor::check(&ws, &super::doctor::env(), &[a])
            .into_iter()
            .flat_map(|r| r.problems)
            .filter(|p| p.code != "codex_untrusted")
            .collect(),
        None => Vec::new(),
    };
    for p in &problems {
        super::ui::note(&format!("warning: {}; fix: {}", p.what, p.fix));
    }
    if ui.json {
        ui.json(&serde_json::json!({
            "codex_trust": trust,
            "workspace": ws.root().display().to_string(),
            "created": stats.created,
            "wrote_config": stats.wrote_config,
            "hooks": hooks.as_ref().map(|h| serde_json::json!({"file": h.file, "added": h.added, "moved_from": h.moved_from})),
            "problems": problems,
        }))?;
        return Ok(OK);
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
