//! `ckpt doctor [--agent A] [--json]`: will the agents run ckpt's hooks?
//! One line per agent, one per problem with its fix; exit 4 when a problem
//! means calls go unrecorded.

use ckpt::agent_settings::{Agent, UserDirs};
use ckpt::doctor::{self, AgentReport, Level};

use super::error::{CommandError, OK, VERIFY_FAILED};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Check only this agent
    #[arg(long, value_name = "claude|codex|gemini|cursor")]
    agent: Option<String>,
}

/// The environment the checks read, from this process's.
pub fn env() -> doctor::Env {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    doctor::Env {
        dirs: user_dirs(),
        path: var("PATH"),
        this_exe: std::env::current_exe().ok(),
        gemini_trust_env: var("GEMINI_CLI_TRUST_WORKSPACE").map(|v| v.to_string_lossy().into()),
        gemini_trusted_folders: var("GEMINI_CLI_TRUSTED_FOLDERS_PATH").map(Into::into),
    }
}

/// Where the agents keep their user settings, from the environment.
pub fn user_dirs() -> UserDirs {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    UserDirs {
        home: var("HOME"),
        claude_config: var("CLAUDE_CONFIG_DIR"),
        gemini_home: var("GEMINI_CLI_HOME"),
        codex_home: var("CODEX_HOME"),
    }
}

/// One agent's summary line.
pub fn summary(r: &AgentReport) -> String {
    if r.files.is_empty() {
        return format!(
            "{}: no ckpt hooks (`ckpt init --hooks {}` adds them)",
            r.agent, r.agent
        );
    }
    let files: Vec<String> = r
        .files
        .iter()
        .map(|f| format!("{} ({} events)", f.file, f.events.len()))
        .collect();
    let last = match &r.last_call_at {
        Some(t) => format!("{} calls recorded, the last at {t}", r.calls),
        None => "no call recorded from it yet".into(),
    };
    format!("{}: hooks in {}; {last}", r.agent, files.join(" and "))
}

/// A problem as one line.
pub fn problem_line(p: &doctor::Problem) -> String {
    let level = match p.level {
        Level::Error => "error",
        Level::Warning => "warning",
    };
    format!("  {level}: {}; fix: {}", p.what, p.fix)
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let agents: Vec<Agent> = match &args.agent {
        Some(a) => vec![a.parse().map_err(CommandError::usage)?],
        None => doctor::AGENTS.to_vec(),
    };
    let ws = ctx.open_read_only()?;
    let reports = doctor::check(&ws, &env(), &agents);
    let errors = reports
        .iter()
        .flat_map(|r| &r.problems)
        .filter(|p| p.level == Level::Error)
        .count();
    let warnings = reports.iter().map(|r| r.problems.len()).sum::<usize>() - errors;
    if ui.json {
        ui.json(&serde_json::json!({
            "workspace": ws.root(),
            "ok": errors == 0,
            "errors": errors,
            "warnings": warnings,
            "agents": reports,
        }))?;
    } else {
        for r in &reports {
            ui.line(&summary(r))?;
            for p in &r.problems {
                ui.line(&problem_line(p))?;
            }
        }
        let installed = reports.iter().filter(|r| !r.files.is_empty()).count();
        ui.line(&match (errors, warnings, installed) {
            (_, _, 0) => "no agent has ckpt's hooks: run `ckpt init --hooks AGENT`".to_string(),
            (0, 0, _) => "ok: every agent with ckpt's hooks will run them".to_string(),
            (0, w, _) => format!("ok, with {w} warning(s)"),
            (e, w, _) => {
                format!("FAILED: {e} problem(s) that leave calls unrecorded, {w} warning(s)")
            }
        })?;
    }
    Ok(if errors == 0 { OK } else { VERIFY_FAILED })
}
