//! `ckpt doctor`: for each agent, are ckpt's hooks installed where the agent
//! reads them, will the agent run them (trust), does the command they run
//! exist, and when did they last record a call. Every problem comes with the
//! fix. Read-only: it writes nothing anywhere.
//!
//! What each agent really reads was found with the real clients (issue 20):
//! Claude Code 2.1.332 reads `.claude/settings.json` only in the directory a
//! session starts in, `.claude/settings.local.json` from the project root
//! too; Gemini CLI 0.61 reads `.gemini/settings.json` only where it starts,
//! and drops project settings in a folder it does not trust (trust is on by
//! default); Codex 0.171 runs project hooks only with trust entries in
//! `$CODEX_HOME/config.toml`, skipping them in silence otherwise.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::agent_settings::{self as s, Agent, Location, Scope, UserDirs};
use crate::workspace::Workspace;

/// What the checks need from the environment, read by the caller.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// Where the agents keep their user settings.
    pub dirs: UserDirs,
    /// `PATH`, to resolve a hook command without a `/`.
    pub path: Option<std::ffi::OsString>,
    /// The running ckpt binary.
    pub this_exe: Option<PathBuf>,
    /// `GEMINI_CLI_TRUST_WORKSPACE` as this process sees it.
    pub gemini_trust_env: Option<String>,
    /// `GEMINI_CLI_TRUSTED_FOLDERS_PATH`.
    pub gemini_trusted_folders: Option<PathBuf>,
}

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// The agent will not run the hooks (or they fail): nothing is recorded.
    Error,
    /// Recorded in some setups and not others, or recorded twice.
    Warning,
}

/// One problem and its fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// How bad.
    pub level: Level,
    /// A stable name for scripts (`codex_untrusted`, `gemini_subdirectory`, …).
    pub code: &'static str,
    /// What is wrong.
    pub what: String,
    /// What to do.
    pub fix: String,
}

/// ckpt's hooks in one settings file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookFile {
    /// The file (workspace-relative, or absolute for a user's file).
    pub file: String,
    /// `project` or `user`.
    pub scope: &'static str,
    /// The agent's events that run ckpt.
    pub events: Vec<&'static str>,
    /// The events `ckpt init --hooks` registers that this file lacks.
    pub missing: Vec<&'static str>,
    /// The commands the hooks run.
    pub commands: Vec<String>,
}

/// The report for one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentReport {
    /// `claude`, `codex`, `gemini` or `cursor`.
    pub agent: &'static str,
    /// Every file holding ckpt's hooks for this agent.
    pub files: Vec<HookFile>,
    /// What the hook commands resolve to (`None`: not found).
    pub resolves_to: Vec<Resolved>,
    /// The newest call recorded from this agent's hooks: its `ts`.
    pub last_call_at: Option<String>,
    /// How many calls this agent's hooks recorded.
    pub calls: u64,
    /// The problems found, each with its fix.
    pub problems: Vec<Problem>,
}

/// A hook command's program, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolved {
    /// The program as written in the settings file.
    pub program: String,
    /// The executable it runs, if found.
    pub path: Option<PathBuf>,
    /// Whether that is the ckpt running this check.
    pub is_this_binary: bool,
}

fn agent_name(a: Agent) -> &'static str {
    match a {
        Agent::Claude => "claude",
        Agent::Codex => "codex",
        Agent::Gemini => "gemini",
        Agent::Cursor => "cursor",
    }
}

/// Every agent, in the order `doctor` reports them.
pub const AGENTS: [Agent; 4] = [Agent::Claude, Agent::Codex, Agent::Gemini, Agent::Cursor];

/// Checks the given agents for workspace `ws`, with the calls each one's
/// hooks recorded (a read of the whole ledger).
pub fn check(ws: &Workspace, env: &Env, agents: &[Agent]) -> Vec<AgentReport> {
    run_checks(ws, env, agents, last_calls(ws))
}

/// [`check`] without reading the ledger (`calls` 0, `last_call_at` none):
/// the settings files only, for commands that warn on the way.
pub fn check_setup(ws: &Workspace, env: &Env, agents: &[Agent]) -> Vec<AgentReport> {
    run_checks(ws, env, agents, Vec::new())
}

fn run_checks(
    ws: &Workspace,
    env: &Env,
    agents: &[Agent],
    fired: Vec<(String, String, u64)>,
) -> Vec<AgentReport> {
    agents
        .iter()
        .map(|&a| {
            let (last, calls) = fired
                .iter()
                .find(|(n, _, _)| n == agent_name(a))
                .map(|(_, t, c)| (Some(t.clone()), *c))
                .unwrap_or((None, 0));
            check_agent(ws, env, a, last, calls)
        })
        .collect()
}

fn check_agent(
    ws: &Workspace,
    env: &Env,
    agent: Agent,
    last_call_at: Option<String>,
    calls: u64,
) -> AgentReport {
    let name = agent_name(agent);
    let mut problems = Vec::new();
    let mut files = Vec::new();
    let mut places: Vec<(Location, Scope)> = s::project_files(agent)
        .into_iter()
        .map(|f| (Location::Project(f), Scope::Project))
        .collect();
    if let Some(u) = env.dirs.settings_file(agent) {
        places.push((Location::User(u), Scope::User));
    }
    for (loc, scope) in places {
        let doc = match s::read_settings(ws, &loc) {
            Ok(Some((doc, _))) => doc,
            Ok(None) => continue,
            Err(e) => {
                problems.push(Problem {
                    level: Level::Error,
                    code: "settings_unreadable",
                    what: format!("{name}: cannot read `{loc}`: {e}"),
                    fix: format!("fix or move `{loc}`, then run `ckpt init --hooks {name}`"),
                });
                continue;
            }
        };
        let (events, commands) = s::ckpt_hooks_in(agent, &doc);
        if events.is_empty() {
            continue;
        }
        let missing: Vec<&'static str> = s::events(agent)
            .into_iter()
            .filter(|e| !events.contains(e))
            .collect();
        files.push(HookFile {
            file: loc.to_string(),
            scope: match scope {
                Scope::Project => "project",
                Scope::User => "user",
            },
            events,
            missing,
            commands,
        });
    }
    let user_flag = |f: &HookFile| if f.scope == "user" { " --user" } else { "" };
    for f in &files {
        if !f.missing.is_empty() {
            problems.push(Problem {
                level: Level::Warning,
                code: "hooks_incomplete",
                what: format!(
                    "{name}: `{}` has no ckpt hook for {} (calls or turns it marks go unrecorded)",
                    f.file,
                    f.missing.join(", ")
                ),
                fix: format!("run `ckpt init --hooks {name}{}`", user_flag(f)),
            });
        }
        let user_hooks = f.scope == "user";
        let only = f.commands.iter().all(|c| c.contains("--only-initialized"));
        if user_hooks && !only {
            problems.push(Problem {
                level: Level::Warning,
                code: "user_hooks_everywhere",
                what: format!(
                    "{name}: the hooks in `{}` run in every directory and set ckpt up in any git repository a session touches",
                    f.file
                ),
                fix: format!(
                    "run `ckpt init --hooks {name} --user` (its hooks record only where `ckpt init` ran)"
                ),
            });
        }
    }
    if files.iter().filter(|f| f.scope == "project").count() > 0
        && files.iter().any(|f| f.scope == "user")
    {
        problems.push(Problem {
            level: Level::Warning,
            code: "hooks_twice",
            what: format!(
                "{name}: ckpt's hooks are in both the project's and your user settings: every event runs ckpt twice"
            ),
            fix: format!(
                "run `ckpt init --hooks {name} --remove` (keeps the user-level ones) or `ckpt init --hooks {name} --remove --user`"
            ),
        });
    }
    let project = files.iter().find(|f| f.scope == "project").cloned();
    match (agent, &project) {
        (Agent::Claude, Some(f)) if f.file == ".claude/settings.json" => problems.push(Problem {
            level: Level::Warning,
            code: "claude_subdirectory",
            what: "claude: Claude Code reads `.claude/settings.json` only when a session starts in the project root: a session started in a subdirectory records nothing".into(),
            fix: "run `ckpt init --hooks claude` (moves the hooks to `.claude/settings.local.json`, read from every subdirectory)".into(),
        }),
        (Agent::Gemini, Some(f)) => {
            problems.push(Problem {
                level: Level::Warning,
                code: "gemini_subdirectory",
                what: format!(
                    "gemini: Gemini CLI reads `{}` only when started in `{}` itself: a session started in a subdirectory records nothing",
                    f.file,
                    ws.root().display()
                ),
                fix: "run `ckpt init --hooks gemini --user` (user-level hooks that record in every workspace where `ckpt init` ran)".into(),
            });
            if let Some(p) = gemini_untrusted(ws, env) {
                problems.push(p);
            }
        }
        (Agent::Codex, Some(_)) => {
            if let Some(p) = codex_untrusted(ws, env) {
                problems.push(p);
            }
        }
        _ => {}
    }
    let mut resolves_to = Vec::new();
    for f in &files {
        for c in &f.commands {
            let program = program_of(c);
            if resolves_to.iter().any(|r: &Resolved| r.program == program) {
                continue;
            }
            let path = resolve(&program, env.path.as_deref(), ws.root());
            let is_this_binary = match (&path, &env.this_exe) {
                (Some(p), Some(me)) => same_file(p, me),
                _ => false,
            };
            match &path {
                None => problems.push(Problem {
                    level: Level::Error,
                    code: "command_not_found",
                    what: format!(
                        "{name}: the hooks in `{}` run `{program}`, which {}: every hook fails and nothing is recorded",
                        f.file,
                        if program.contains('/') {
                            "does not exist or is not executable"
                        } else {
                            "is not on PATH"
                        }
                    ),
                    fix: format!(
                        "put ckpt on PATH, or run `ckpt init --hooks {name}{}` with the installed binary",
                        user_flag(f)
                    ),
                }),
                Some(p) if !is_this_binary && env.this_exe.is_some() => problems.push(Problem {
                    level: Level::Warning,
                    code: "other_binary",
                    what: format!(
                        "{name}: the hooks run `{}`, not this ckpt (`{}`)",
                        p.display(),
                        env.this_exe.as_deref().unwrap_or(Path::new("?")).display()
                    ),
                    fix: format!(
                        "if that is not the ckpt you mean, run `ckpt init --hooks {name}{}` with the one you do",
                        user_flag(f)
                    ),
                }),
                Some(_) => {}
            }
            resolves_to.push(Resolved {
                program,
                path,
                is_this_binary,
            });
        }
    }
    AgentReport {
        agent: name,
        files,
        resolves_to,
        last_call_at,
        calls,
        problems,
    }
}

/// Codex's trust entries for this project that `$CODEX_HOME/config.toml`
/// lacks.
fn codex_untrusted(ws: &Workspace, env: &Env) -> Option<Problem> {
    let wanted = s::codex_trust_for(ws).ok()?;
    let config = env.dirs.codex_dir()?.join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap_or_default();
    let missing = s::codex_trust_missing(&text, &wanted);
    if missing.is_empty() {
        return None;
    }
    let project = missing.iter().any(|m| m.key == "trust_level");
    Some(Problem {
        level: Level::Error,
        code: "codex_untrusted",
        what: format!(
            "codex: Codex skips these hooks in silence: {} of {} trust entries are missing or stale in `{}`{}",
            missing.len(),
            wanted.len(),
            config.display(),
            if project {
                " (the project itself is not trusted)"
            } else {
                ""
            }
        ),
        fix: "run `ckpt init --hooks codex --trust` (writes them, saying what), or `ckpt init --hooks codex` to print them".into(),
    })
}

/// Whether Gemini CLI trusts the workspace (it drops project settings,
/// hooks included, in a folder it does not: headless runs exit 55).
fn gemini_untrusted(ws: &Workspace, env: &Env) -> Option<Problem> {
    match env.gemini_trust_env.as_deref() {
        Some("true") => return None,
        Some("false") => {
            return Some(Problem {
                level: Level::Error,
                code: "gemini_untrusted",
                what: "gemini: GEMINI_CLI_TRUST_WORKSPACE=false: Gemini CLI ignores the project's hooks".into(),
                fix: "unset GEMINI_CLI_TRUST_WORKSPACE, or use `ckpt init --hooks gemini --user`".into(),
            });
        }
        _ => {}
    }
    let home = env
        .dirs
        .gemini_home
        .as_deref()
        .or(env.dirs.home.as_deref())?;
    let user: serde_json::Value = std::fs::read_to_string(home.join(".gemini/settings.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    if user["security"]["folderTrust"]["enabled"] == serde_json::json!(false) {
        return None;
    }
    let file = env
        .gemini_trusted_folders
        .clone()
        .unwrap_or_else(|| home.join(".gemini/trustedFolders.json"));
    let rules: serde_json::Map<String, serde_json::Value> = std::fs::read_to_string(&file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let root = std::fs::canonicalize(ws.root()).unwrap_or_else(|_| ws.root().to_path_buf());
    // The longest rule whose folder holds the root decides (Gemini CLI 0.61).
    let mut best: Option<(usize, &str)> = None;
    for (rule, level) in &rules {
        let Some(level) = level.as_str() else {
            continue;
        };
        let folder = if level == "TRUST_PARENT" {
            Path::new(rule)
                .parent()
                .unwrap_or(Path::new("/"))
                .to_path_buf()
        } else {
            PathBuf::from(rule)
        };
        let folder = std::fs::canonicalize(&folder).unwrap_or(folder);
        if root.starts_with(&folder) && best.is_none_or(|(n, _)| rule.len() > n) {
            best = Some((rule.len(), level));
        }
    }
    match best {
        Some((_, "TRUST_FOLDER" | "TRUST_PARENT")) => None,
        found => Some(Problem {
            level: Level::Error,
            code: "gemini_untrusted",
            what: format!(
                "gemini: Gemini CLI {} `{}`: it ignores the project's hooks there (a headless run exits 55)",
                if found.is_some() {
                    "is told not to trust"
                } else {
                    "does not trust"
                },
                root.display()
            ),
            fix: format!(
                "trust the folder when Gemini CLI asks, or add \"{}\": \"TRUST_FOLDER\" to `{}`",
                root.display(),
                file.display()
            ),
        }),
    }
}

/// The program a hook command runs: its first word, unquoted.
fn program_of(command: &str) -> String {
    let c = command.trim_start();
    if let Some(rest) = c.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = rest.chars();
        while let Some(ch) = chars.next() {
            match ch {
                '\\' => out.extend(chars.next()),
                '"' => break,
                _ => out.push(ch),
            }
        }
        return out;
    }
    c.split_whitespace().next().unwrap_or_default().to_string()
}

/// Where `program` is: itself if it has a `/` (relative to the workspace
/// root, where agents run project hooks), else the first executable of that
/// name on `path`.
fn resolve(program: &str, path: Option<&std::ffi::OsStr>, root: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.is_empty() {
        return None;
    }
    if program.contains('/') {
        let p = root.join(program);
        return runnable(&p).then_some(p);
    }
    std::env::split_paths(path?)
        .map(|d| d.join(program))
        .find(|p| runnable(p))
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// For each agent format with recorded calls: its name, the newest call's
/// `ts` and how many calls (their first record, `started` or a lone end).
fn last_calls(ws: &Workspace) -> Vec<(String, String, u64)> {
    let mut out: Vec<(String, String, u64)> = Vec::new();
    let _ = ws.ledger().scan_headers(|raw, check| {
        if check.kind() != "tool_call" {
            return Ok(());
        }
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(raw) else {
            return Ok(());
        };
        let (Some(agent), Some(status)) = (v["agent"].as_str(), v["status"].as_str()) else {
            return Ok(());
        };
        match out.iter_mut().find(|(n, _, _)| n == agent) {
            Some(e) => {
                e.1 = check.ts().to_string();
                e.2 += u64::from(status == "started");
            }
            None => out.push((
                agent.to_string(),
                check.ts().to_string(),
                u64::from(status == "started"),
            )),
        }
        Ok(())
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_commands_program_is_its_first_word_unquoted() {
        assert_eq!(program_of("ckpt hook pre"), "ckpt");
        assert_eq!(
            program_of("/opt/c/ckpt hook pre --format codex"),
            "/opt/c/ckpt"
        );
        assert_eq!(program_of("\"/a b/ckpt\" hook pre"), "/a b/ckpt");
        assert_eq!(program_of("\"/a \\\"q\\\"/ckpt\" hook"), "/a \"q\"/ckpt");
        assert_eq!(program_of(""), "");
    }
}
