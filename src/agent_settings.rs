//! `ckpt init --hooks AGENT`: merges ckpt's hooks into an agent's settings file,
//! keeping everything already there (key order included) and adding nothing
//! twice, so running it again changes nothing.
//!
//! | agent | file | events |
//! | --- | --- | --- |
//! | claude | `.claude/settings.local.json` | PreToolUse, PostToolUse, PostToolUseFailure, UserPromptSubmit, SessionStart |
//! | codex | `.codex/hooks.json` | PreToolUse, PostToolUse, UserPromptSubmit, SessionStart |
//! | gemini | `.gemini/settings.json` | BeforeTool, AfterTool, BeforeAgent, SessionStart |
//! | cursor | `.cursor/hooks.json` | afterFileEdit, beforeShellExecution, afterShellExecution |
//!
//! With `--user` (Claude Code and Gemini CLI) the hooks go in the user's
//! settings file instead (`~/.claude/settings.json`, `~/.gemini/settings.json`),
//! run as `ckpt hook … --only-initialized`: they fire in every directory,
//! and record only in workspaces where `ckpt init` ran, from any
//! subdirectory of them.

use serde_json::{Map, Value, json};

use crate::fs_util::EntryKind;
use crate::paths::RelPath;
use crate::workspace::{Workspace, WorkspaceError};

/// The agents `init --hooks` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// Claude Code.
    Claude,
    /// OpenAI Codex CLI.
    Codex,
    /// Gemini CLI.
    Gemini,
    /// Cursor.
    Cursor,
}

impl std::str::FromStr for Agent {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "claude" => Agent::Claude,
            "codex" => Agent::Codex,
            "gemini" => Agent::Gemini,
            "cursor" => Agent::Cursor,
            _ => {
                return Err(format!(
                    "unknown agent `{s}`; use claude, codex, gemini or cursor"
                ));
            }
        })
    }
}

/// What `install` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallStats {
    /// The settings file (workspace-relative).
    pub file: String,
    /// Hook entries added (0 when everything was already there).
    pub added: usize,
    /// The file ckpt's hooks were moved out of, if any.
    pub moved_from: Option<String>,
}

/// Which settings file of an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The workspace's own (`.claude/settings.local.json`, …).
    Project,
    /// The user's, read in every directory (`~/.claude/settings.json`, …).
    User,
}

/// The directories agents keep their user settings in, as the caller read
/// them from the environment (the library reads none).
#[derive(Debug, Clone, Default)]
pub struct UserDirs {
    /// `HOME`.
    pub home: Option<std::path::PathBuf>,
    /// `CLAUDE_CONFIG_DIR` (Claude Code's `~/.claude`).
    pub claude_config: Option<std::path::PathBuf>,
    /// `GEMINI_CLI_HOME` (Gemini CLI's stand-in for the home directory).
    pub gemini_home: Option<std::path::PathBuf>,
    /// `CODEX_HOME` (Codex's `~/.codex`).
    pub codex_home: Option<std::path::PathBuf>,
}

impl UserDirs {
    /// The agent's user-level settings file holding hooks.
    pub fn settings_file(&self, agent: Agent) -> Option<std::path::PathBuf> {
        let home = self.home.as_deref();
        Some(match agent {
            Agent::Claude => match &self.claude_config {
                Some(d) => d.join("settings.json"),
                None => home?.join(".claude/settings.json"),
            },
            Agent::Gemini => self
                .gemini_home
                .as_deref()
                .or(home)?
                .join(".gemini/settings.json"),
            Agent::Codex => self.codex_dir()?.join("hooks.json"),
            Agent::Cursor => home?.join(".cursor/hooks.json"),
        })
    }

    /// `$CODEX_HOME`, or `~/.codex`.
    pub fn codex_dir(&self) -> Option<std::path::PathBuf> {
        match &self.codex_home {
            Some(d) => Some(d.clone()),
            None => Some(self.home.as_deref()?.join(".codex")),
        }
    }
}

/// Whether `init --hooks AGENT --user` is offered: the agents whose
/// user-level hooks ckpt has seen fire with the real client.
pub fn user_scope_supported(agent: Agent) -> bool {
    matches!(agent, Agent::Claude | Agent::Gemini)
}

/// Why the settings could not be merged.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The existing file is not a JSON object.
    #[error(
        "`{0}` is not a JSON object ckpt can merge into ({1}); fix it or move it away, then run `ckpt init --hooks` again"
    )]
    NotMergeable(String, String),
    /// The user's home is unknown.
    #[error("cannot tell where your home directory is: set HOME")]
    NoUserDir,
    /// `--user` for an agent it is not offered for.
    #[error(
        "--user is for claude and gemini; {0:?}'s hooks go in the project's file (drop --user)"
    )]
    NoUserScope(Agent),
    /// Reading or writing failed.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
}

/// Where `init --hooks` puts the agent's hooks. Claude Code reads
/// `.claude/settings.json` only from the directory a session starts in, but
/// `.claude/settings.local.json` from the project root too (seen with
/// 2.1.332's `--debug-file`), so its hooks go in the local file: found from
/// every subdirectory, and not committed (it names this machine's binary).
fn file_for(agent: Agent) -> &'static str {
    match agent {
        Agent::Claude => ".claude/settings.local.json",
        Agent::Codex => ".codex/hooks.json",
        Agent::Gemini => ".gemini/settings.json",
        Agent::Cursor => ".cursor/hooks.json",
    }
}

/// Where an older ckpt put the agent's hooks.
fn legacy_file(agent: Agent) -> Option<&'static str> {
    match agent {
        Agent::Claude => Some(".claude/settings.json"),
        _ => None,
    }
}

/// (event, matcher, ckpt subcommand) triples for an agent.
fn wanted(agent: Agent) -> Vec<(&'static str, Option<&'static str>, &'static str)> {
    match agent {
        Agent::Claude => vec![
            ("PreToolUse", Some("*"), "pre"),
            ("PostToolUse", Some("*"), "post"),
            ("PostToolUseFailure", Some("*"), "post-failure"),
            ("UserPromptSubmit", None, "prompt"),
            ("SessionStart", None, "session-start"),
            ("Stop", None, "turn-end"),
            ("SessionEnd", None, "turn-end"),
        ],
        // The prompt and session-start hooks make the per-turn checkpoints
        // `ckpt undo` steps through; the turn's end closes calls that never
        // got an after-event (a rejected patch, a refused call).
        Agent::Codex => vec![
            ("PreToolUse", Some("*"), "pre"),
            ("PostToolUse", Some("*"), "post"),
            ("UserPromptSubmit", None, "prompt"),
            ("SessionStart", None, "session-start"),
            ("Stop", None, "turn-end"),
            // An interrupted turn fires no Stop (Codex 0.171), only these.
            ("Interrupt", None, "turn-end"),
            ("SessionEnd", None, "turn-end"),
        ],
        Agent::Gemini => vec![
            ("BeforeTool", Some("*"), "pre"),
            ("AfterTool", Some("*"), "post"),
            ("BeforeAgent", None, "prompt"),
            ("SessionStart", None, "session-start"),
            ("AfterAgent", None, "turn-end"),
            ("SessionEnd", None, "turn-end"),
        ],
        Agent::Cursor => vec![
            ("afterFileEdit", None, "post"),
            ("beforeShellExecution", None, "pre"),
            ("afterShellExecution", None, "post"),
            ("stop", None, "turn-end"),
        ],
    }
}

fn format_flag(agent: Agent) -> &'static str {
    match agent {
        Agent::Claude => "",
        Agent::Codex => " --format codex",
        Agent::Gemini => " --format gemini",
        Agent::Cursor => " --format cursor",
    }
}

/// Whether `v` holds a command that runs `ckpt … hook SUB` (any phase when
/// `sub` is empty); `hook pre` is not `hook prompt`.
pub fn mentions_ckpt_hook(v: &Value, sub: &str) -> bool {
    let runs = |s: &str| {
        let words: Vec<&str> = s.split_whitespace().collect();
        s.contains("ckpt")
            && words
                .windows(2)
                .any(|w| w[0] == "hook" && (sub.is_empty() || w[1] == sub))
    };
    match v {
        Value::String(s) => runs(s),
        Value::Array(a) => a.iter().any(|x| mentions_ckpt_hook(x, sub)),
        Value::Object(o) => o.values().any(|x| mentions_ckpt_hook(x, sub)),
        _ => false,
    }
}

/// Merges ckpt's hooks into `existing` (the settings document); returns how many
/// entries were added. Pure, for tests.
pub fn merge(
    agent: Agent,
    existing: &mut Map<String, Value>,
    ckpt_cmd: &str,
    scope: Scope,
) -> Result<usize, String> {
    if agent == Agent::Cursor && !existing.contains_key("version") {
        existing.insert("version".into(), json!(1));
    }
    let hooks = existing
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(hooks) = hooks else {
        return Err("`hooks` is not an object".into());
    };
    let mut added = 0;
    for (event, matcher, sub) in wanted(agent) {
        let list = hooks
            .entry(event)
            .or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(list) = list else {
            return Err(format!("`hooks.{event}` is not a list"));
        };
        if list.iter().any(|e| mentions_ckpt_hook(e, sub)) {
            continue;
        }
        let only = match scope {
            Scope::Project => "",
            Scope::User => " --only-initialized",
        };
        let command = format!("{ckpt_cmd} hook {sub}{only}{}", format_flag(agent));
        let entry = match agent {
            Agent::Cursor => json!({ "command": command }),
            Agent::Gemini => {
                let h = json!({ "type": "command", "command": command, "timeout": 30000 });
                match matcher {
                    Some(m) => json!({ "matcher": m, "hooks": [h] }),
                    None => json!({ "hooks": [h] }),
                }
            }
            _ => {
                // Codex clamps these two events' timeout to 3 s, and a trust
                // hash made with another value is stale: skipped in silence.
                let timeout = match (agent, event) {
                    (Agent::Codex, "Interrupt" | "SessionEnd") => 3,
                    _ => 30,
                };
                let h = json!({ "type": "command", "command": command, "timeout": timeout });
                match matcher {
                    Some(m) => json!({ "matcher": m, "hooks": [h] }),
                    None => json!({ "hooks": [h] }),
                }
            }
        };
        list.push(entry);
        added += 1;
    }
    Ok(added)
}

/// ckpt's hooks found in the settings document `doc`: the events of the
/// agent that have one, and each distinct command they run, in order.
pub fn ckpt_hooks_in(agent: Agent, doc: &Map<String, Value>) -> (Vec<&'static str>, Vec<String>) {
    let mut events = Vec::new();
    let mut commands: Vec<String> = Vec::new();
    let Some(Value::Object(hooks)) = doc.get("hooks") else {
        return (events, commands);
    };
    for (event, _, sub) in wanted(agent) {
        let Some(Value::Array(list)) = hooks.get(event) else {
            continue;
        };
        let mut found = false;
        for e in list.iter().filter(|e| mentions_ckpt_hook(e, sub)) {
            found = true;
            let mut cmds = Vec::new();
            collect_commands(e, &mut cmds);
            for c in cmds
                .into_iter()
                .filter(|c| mentions_ckpt_hook(&json!(c), sub))
            {
                if !commands.contains(&c) {
                    commands.push(c);
                }
            }
        }
        if found && !events.contains(&event) {
            events.push(event);
        }
    }
    (events, commands)
}

fn collect_commands(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(c)) = o.get("command") {
                out.push(c.clone());
            }
            o.values().for_each(|x| collect_commands(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_commands(x, out)),
        _ => {}
    }
}

/// The events `init --hooks AGENT` registers.
pub fn events(agent: Agent) -> Vec<&'static str> {
    let mut out = Vec::new();
    for (e, _, _) in wanted(agent) {
        if !out.contains(&e) {
            out.push(e);
        }
    }
    out
}

/// Takes ckpt's hook entries out of `existing` (entries of the agent's events
/// whose command runs `ckpt … hook …`), leaving every other entry, and the
/// event lists and `hooks` object only if something else is left in them.
/// Returns how many entries were removed. Pure, for tests.
pub fn unmerge(agent: Agent, existing: &mut Map<String, Value>) -> usize {
    let Some(Value::Object(hooks)) = existing.get_mut("hooks") else {
        return 0;
    };
    let mut removed = 0;
    for (event, _, sub) in wanted(agent) {
        let Some(Value::Array(list)) = hooks.get_mut(event) else {
            continue;
        };
        let before = list.len();
        list.retain(|e| !mentions_ckpt_hook(e, sub));
        removed += before - list.len();
        if list.is_empty() && before > 0 {
            hooks.remove(event);
        }
    }
    if removed > 0 && hooks.is_empty() {
        existing.remove("hooks");
    }
    removed
}

/// A settings file: one in the workspace (its relative path) or the user's
/// (an absolute path, outside the workspace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// Workspace-relative.
    Project(&'static str),
    /// The user's settings file.
    User(std::path::PathBuf),
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Project(p) => f.write_str(p),
            Location::User(p) => write!(f, "{}", p.display()),
        }
    }
}

/// The project-level files an agent's hooks may be in: where `init` puts
/// them, then where an older ckpt did.
pub fn project_files(agent: Agent) -> Vec<&'static str> {
    std::iter::once(file_for(agent))
        .chain(legacy_file(agent))
        .collect()
}

/// Takes ckpt's hooks out of the agent's settings file at `scope` ([`unmerge`];
/// for the project, out of the file older versions wrote them to as well);
/// each old file is kept in the blob store first. `added` in the result is
/// the number removed.
pub fn uninstall(
    ws: &Workspace,
    agent: Agent,
    scope: Scope,
    dirs: &UserDirs,
) -> Result<InstallStats, SettingsError> {
    let files = match scope {
        Scope::Project => project_files(agent)
            .into_iter()
            .map(Location::Project)
            .collect(),
        Scope::User => vec![user_location(agent, dirs)?],
    };
    let mut removed = 0;
    for file in &files {
        removed += edit(ws, file, |doc| Ok(unmerge(agent, doc)))?;
    }
    Ok(InstallStats {
        file: files[0].to_string(),
        added: removed,
        moved_from: None,
    })
}

fn user_location(agent: Agent, dirs: &UserDirs) -> Result<Location, SettingsError> {
    dirs.settings_file(agent)
        .map(Location::User)
        .ok_or(SettingsError::NoUserDir)
}

/// Applies `change` to the settings document in `file` (an empty one when
/// there is none) and writes it back when `change` says it changed
/// something (the old file stored first). Returns what `change` returned.
fn edit(
    ws: &Workspace,
    file: &Location,
    change: impl FnOnce(&mut Map<String, Value>) -> Result<usize, String>,
) -> Result<usize, SettingsError> {
    let name = file.to_string();
    let io = |e: std::io::Error| {
        SettingsError::Workspace(crate::fs_util::FsError::new("update", &name, e).into())
    };
    let old = read_bytes(ws, file)?;
    let (mut doc, mode) = match &old {
        Some((bytes, mode)) => (parse_settings(bytes, &name)?, *mode),
        None => (Map::new(), 0o644),
    };
    let n = change(&mut doc).map_err(|e| SettingsError::NotMergeable(name.clone(), e))?;
    if n > 0 && (old.is_some() || !doc.is_empty()) {
        let mut bytes = serde_json::to_vec_pretty(&Value::Object(doc)).map_err(|e| io(e.into()))?;
        bytes.push(b'\n');
        if let Some((old, _)) = &old {
            ws.blobs().put_bytes(old).map_err(WorkspaceError::from)?;
        }
        match file {
            Location::Project(rel) => {
                let rel = RelPath::from_ledger(rel.as_bytes()).map_err(WorkspaceError::from)?;
                ws.files().write_file(&rel, &bytes, mode).map_err(io)?;
            }
            Location::User(path) => write_user_file(ws, path, &bytes, mode).map_err(io)?,
        }
        // No record follows to sync the new name: done here, its error reported.
        ws.sync_all()?;
    }
    Ok(n)
}

/// Writes a user-level settings file whole: a temporary file beside it,
/// synced (with the old version's stored copy), renamed over it (a crash
/// leaves the old file or the new one).
fn write_user_file(
    ws: &Workspace,
    path: &std::path::Path,
    bytes: &[u8],
    mode: u32,
) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(std::path::Path::new("/"));
    std::fs::create_dir_all(dir)?;
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".ckpt-tmp");
    let tmp = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)?;
    f.write_all(bytes)?;
    let keep = crate::durable::Keep::Replacing(ws.durable());
    keep.file(&f)?;
    drop(f);
    keep.before_rename()?;
    std::fs::rename(&tmp, path)?;
    keep.dir(std::fs::File::open(dir)?)
}

/// A settings document and its file's mode.
type Settings = (Map<String, Value>, u32);

/// The bytes and mode of the settings file at `file` (`None`: no such file).
fn read_bytes(ws: &Workspace, file: &Location) -> Result<Option<(Vec<u8>, u32)>, SettingsError> {
    let name = file.to_string();
    let io = |e: std::io::Error| {
        SettingsError::Workspace(crate::fs_util::FsError::new("read", &name, e).into())
    };
    let not_file = || SettingsError::NotMergeable(name.clone(), "not a regular file".into());
    match file {
        Location::Project(rel) => {
            let rel = RelPath::from_ledger(rel.as_bytes()).map_err(WorkspaceError::from)?;
            match ws.files().entry(&rel).map_err(io)? {
                EntryKind::Absent => Ok(None),
                EntryKind::File { mode, .. } => {
                    Ok(Some((ws.files().read(&rel).map_err(io)?, mode)))
                }
                _ => Err(not_file()),
            }
        }
        Location::User(path) => {
            use std::os::unix::fs::PermissionsExt;
            match std::fs::metadata(path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io(e)),
                Ok(m) if !m.is_file() => Err(not_file()),
                Ok(m) => Ok(Some((
                    std::fs::read(path).map_err(io)?,
                    m.permissions().mode() & 0o7777,
                ))),
            }
        }
    }
}

fn parse_settings(bytes: &[u8], name: &str) -> Result<Map<String, Value>, SettingsError> {
    let text = String::from_utf8_lossy(bytes);
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(SettingsError::NotMergeable(
            name.into(),
            "not an object".into(),
        )),
        Err(e) => Err(SettingsError::NotMergeable(name.into(), e.to_string())),
    }
}

/// The settings document at `file` (`None`: no such file).
pub fn read_settings(ws: &Workspace, file: &Location) -> Result<Option<Settings>, SettingsError> {
    match read_bytes(ws, file)? {
        None => Ok(None),
        Some((bytes, mode)) => Ok(Some((parse_settings(&bytes, &file.to_string())?, mode))),
    }
}

/// Installs ckpt's hooks into the agent's settings file at `scope`.
/// `ckpt_cmd` is how the agent should invoke ckpt (a path or `ckpt`). The
/// hooks are taken out of every other file of this workspace they may be
/// in (an older ckpt's place; the project's files, for user-level hooks),
/// so no event runs ckpt twice.
pub fn install(
    ws: &Workspace,
    agent: Agent,
    ckpt_cmd: &str,
    scope: Scope,
    dirs: &UserDirs,
) -> Result<InstallStats, SettingsError> {
    let (file, others) = match scope {
        Scope::Project => (
            Location::Project(file_for(agent)),
            legacy_file(agent).into_iter().collect::<Vec<_>>(),
        ),
        Scope::User => {
            if !user_scope_supported(agent) {
                return Err(SettingsError::NoUserScope(agent));
            }
            (user_location(agent, dirs)?, project_files(agent))
        }
    };
    let added = edit(ws, &file, |doc| merge(agent, doc, ckpt_cmd, scope))?;
    let mut moved_from = Vec::new();
    for old in others {
        if edit(ws, &Location::Project(old), |doc| Ok(unmerge(agent, doc)))? > 0 {
            moved_from.push(old);
        }
    }
    Ok(InstallStats {
        file: file.to_string(),
        added,
        moved_from: (!moved_from.is_empty()).then(|| moved_from.join(", ")),
    })
}

/// One entry Codex needs in `$CODEX_HOME/config.toml` before it runs a
/// project's hooks (Codex 0.171, `codex-rs/hooks/src/engine/discovery.rs`
/// and `config_rules.rs`; confirmed by the real-agent suite: without them
/// `codex exec` runs no project hook and says nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodexTrust {
    /// The TOML table, e.g. `projects."/abs"` or `hooks.state."…"`.
    pub table: String,
    /// Its key.
    pub key: &'static str,
    /// The value it must have (a TOML string's contents).
    pub value: String,
}

fn codex_event_label(event: &str) -> Option<&'static str> {
    Some(match event {
        "PreToolUse" => "pre_tool_use",
        "PostToolUse" => "post_tool_use",
        "PermissionRequest" => "permission_request",
        "SessionStart" => "session_start",
        "UserPromptSubmit" => "user_prompt_submit",
        "Stop" => "stop",
        "Interrupt" => "interrupt",
        "SessionEnd" => "session_end",
        _ => return None,
    })
}

/// The entries that trust the project at `project` (its real path) and
/// each of ckpt's handlers in its `.codex/hooks.json` document `doc`: the
/// hash is sha256 of the handler's identity as compact JSON with sorted
/// keys, `{"event_name", "hooks": [{"async", "command", "timeout", "type"}],
/// "matcher"}` (no matcher for events that take none).
pub fn codex_trust_entries(project: &str, doc: &Map<String, Value>) -> Vec<CodexTrust> {
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut out = vec![CodexTrust {
        table: format!("projects.{}", quote(project)),
        key: "trust_level",
        value: "trusted".into(),
    }];
    let file = format!("{project}/.codex/hooks.json");
    let Some(Value::Object(hooks)) = doc.get("hooks") else {
        return out;
    };
    for (event, groups) in hooks {
        let (Some(label), Value::Array(groups)) = (codex_event_label(event), groups) else {
            continue;
        };
        for (gi, group) in groups.iter().enumerate() {
            let Some(Value::Array(handlers)) = group.get("hooks") else {
                continue;
            };
            for (hi, h) in handlers.iter().enumerate() {
                let Some(cmd) = h.get("command").and_then(Value::as_str) else {
                    continue;
                };
                if h.get("type").and_then(Value::as_str) != Some("command")
                    || !mentions_ckpt_hook(h, "")
                {
                    continue;
                }
                let timeout = h
                    .get("timeout")
                    .or_else(|| h.get("timeoutSec"))
                    .and_then(Value::as_u64)
                    .unwrap_or(600)
                    .max(1);
                // Keys in sorted order (the map keeps insertion order).
                let mut handler = Map::new();
                handler.insert(
                    "async".into(),
                    json!(h.get("async").and_then(Value::as_bool).unwrap_or(false)),
                );
                handler.insert("command".into(), json!(cmd));
                handler.insert("timeout".into(), json!(timeout));
                handler.insert("type".into(), json!("command"));
                let mut identity = Map::new();
                identity.insert("event_name".into(), json!(label));
                identity.insert("hooks".into(), json!([Value::Object(handler)]));
                if !matches!(
                    event.as_str(),
                    "UserPromptSubmit" | "Stop" | "Interrupt" | "SessionEnd"
                ) && let Some(m) = group.get("matcher").filter(|m| !m.is_null())
                {
                    identity.insert("matcher".into(), m.clone());
                }
                let text = Value::Object(identity).to_string();
                let hash = crate::hash::ContentHash::of(text.as_bytes()).to_string();
                out.push(CodexTrust {
                    table: format!(
                        "hooks.state.{}",
                        quote(&format!("{file}:{label}:{gi}:{hi}"))
                    ),
                    key: "trusted_hash",
                    value: hash,
                });
            }
        }
    }
    out
}

/// The entries of `wanted` that the Codex config text `config` lacks or
/// holds with another value.
pub fn codex_trust_missing(config: &str, wanted: &[CodexTrust]) -> Vec<CodexTrust> {
    let doc: toml::Table = toml::from_str(config).unwrap_or_default();
    wanted
        .iter()
        .filter(|t| {
            let mut table = Some(&doc);
            for part in toml_path(&t.table) {
                table = table
                    .and_then(|tb| tb.get(part.as_str()))
                    .and_then(|v| v.as_table());
            }
            let have = table.and_then(|tb| tb.get(t.key)).and_then(|v| v.as_str());
            have != Some(t.value.as_str())
        })
        .cloned()
        .collect()
}

/// `projects."/a b"` → `["projects", "/a b"]` (the tables this module writes).
fn toml_path(table: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = table;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('"') {
            // A quoted key, in JSON's (= TOML's basic string) escaping.
            let mut end = 0;
            let b = r.as_bytes();
            while end < b.len() && b[end] != b'"' {
                end += if b[end] == b'\\' { 2 } else { 1 };
            }
            let lit = &rest[..end + 2];
            out.push(serde_json::from_str(lit).unwrap_or_default());
            rest = rest[end + 2..].trim_start_matches('.');
        } else {
            let end = rest.find('.').unwrap_or(rest.len());
            out.push(rest[..end].to_string());
            rest = rest[end..].trim_start_matches('.');
        }
    }
    out
}

/// `config` with every entry of `entries` set: a stale value is replaced
/// where the table is written as this module writes it, a missing table is
/// appended. `Err` names an entry it cannot place by hand-editing text.
pub fn codex_trust_apply(config: &str, entries: &[CodexTrust]) -> Result<String, String> {
    let mut text = config.to_string();
    for t in entries {
        let header = format!("[{}]", t.table);
        let line = format!(
            "{} = {}",
            t.key,
            serde_json::to_string(&t.value).unwrap_or_default()
        );
        if let Some(at) = text.find(&header) {
            let body_start = at + header.len();
            let body_end = text[body_start..]
                .find("\n[")
                .map(|i| body_start + i)
                .unwrap_or(text.len());
            let body = &text[body_start..body_end];
            match body
                .find(&format!("\n{} ", t.key))
                .or_else(|| body.find(&format!("\n{}=", t.key)))
            {
                Some(k) => {
                    let ks = body_start + k + 1;
                    let ke = text[ks..].find('\n').map(|i| ks + i).unwrap_or(text.len());
                    text.replace_range(ks..ke, &line);
                }
                None => text.insert_str(body_start, &format!("\n{line}")),
            }
        } else {
            if toml::from_str::<toml::Table>(&text).is_ok_and(|d| {
                let p = toml_path(&t.table);
                d.get(p[0].as_str()).is_some() && p.len() == 1
            }) {
                return Err(format!(
                    "[{}] is written in a form ckpt cannot edit",
                    t.table
                ));
            }
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("\n{header}\n{line}\n"));
        }
    }
    toml::from_str::<toml::Table>(&text)
        .map_err(|e| format!("the result would not parse ({e})"))?;
    if !codex_trust_missing(&text, entries).is_empty() {
        return Err("an entry is defined elsewhere in a form ckpt cannot edit".into());
    }
    Ok(text)
}

/// Codex's entries for this workspace's `.codex/hooks.json` (empty when
/// there is no such file).
pub fn codex_trust_for(ws: &Workspace) -> Result<Vec<CodexTrust>, SettingsError> {
    let Some((doc, _)) = read_settings(ws, &Location::Project(file_for(Agent::Codex)))? else {
        return Ok(Vec::new());
    };
    let root = std::fs::canonicalize(ws.root()).unwrap_or_else(|_| ws.root().to_path_buf());
    Ok(codex_trust_entries(&root.display().to_string(), &doc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_keeps_existing_hooks_and_is_idempotent() {
        let mut doc: Map<String, Value> = serde_json::from_str(
            r#"{"model":"x","hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"./lint.sh"}]}]},"z":1}"#,
        )
        .unwrap();
        assert_eq!(
            merge(Agent::Claude, &mut doc, "ckpt", Scope::Project).unwrap(),
            7
        );
        let pre = doc["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(pre.len(), 2);
        assert_eq!(pre[0]["hooks"][0]["command"], "./lint.sh");
        assert_eq!(pre[1]["hooks"][0]["command"], "ckpt hook pre");
        let keys: Vec<&String> = doc.keys().collect();
        assert_eq!(keys, ["model", "hooks", "z"], "key order is kept");
        let before = doc.clone();
        assert_eq!(
            merge(Agent::Claude, &mut doc, "ckpt", Scope::Project).unwrap(),
            0
        );
        assert_eq!(doc, before);
    }

    #[test]
    fn codex_trust_hash_is_the_handlers_sorted_identity() {
        let mut doc = Map::new();
        merge(Agent::Codex, &mut doc, "ckpt", Scope::Project).unwrap();
        let t = codex_trust_entries("/w", &doc);
        assert_eq!(t[0].table, "projects.\"/w\"");
        assert_eq!(t.len(), 8, "{t:?}");
        let pre = t
            .iter()
            .find(|e| e.table.contains(":pre_tool_use:0:0"))
            .unwrap();
        let identity = r#"{"event_name":"pre_tool_use","hooks":[{"async":false,"command":"ckpt hook pre --format codex","timeout":30,"type":"command"}],"matcher":"*"}"#;
        assert_eq!(
            pre.value,
            crate::hash::ContentHash::of(identity.as_bytes()).to_string()
        );
        let prompt = t
            .iter()
            .find(|e| e.table.contains(":user_prompt_submit:0:0"))
            .unwrap();
        let identity = r#"{"event_name":"user_prompt_submit","hooks":[{"async":false,"command":"ckpt hook prompt --format codex","timeout":30,"type":"command"}]}"#;
        assert_eq!(
            prompt.value,
            crate::hash::ContentHash::of(identity.as_bytes()).to_string()
        );
        // Applied to a config with other content and a stale hash.
        let stale = format!(
            "model = \"m\"\n\n[{}]\ntrusted_hash = \"sha256:00\"\n",
            pre.table
        );
        assert_eq!(codex_trust_missing(&stale, &t).len(), 8);
        let done = codex_trust_apply(&stale, &codex_trust_missing(&stale, &t)).unwrap();
        assert!(codex_trust_missing(&done, &t).is_empty(), "{done}");
        assert!(done.starts_with("model = \"m\"\n"), "{done}");
        assert_eq!(done.matches(&pre.table).count(), 1, "{done}");
        assert_eq!(codex_trust_apply(&done, &[]).unwrap(), done);
    }

    #[test]
    fn a_hook_is_named_by_its_whole_phase_word() {
        assert!(mentions_ckpt_hook(&json!("ckpt hook pre"), "pre"));
        assert!(mentions_ckpt_hook(
            &json!("/x/ckpt hook pre --only-initialized"),
            "pre"
        ));
        assert!(!mentions_ckpt_hook(&json!("ckpt hook prompt"), "pre"));
        assert!(!mentions_ckpt_hook(
            &json!("ckpt hook post-failure"),
            "post"
        ));
        assert!(mentions_ckpt_hook(&json!("ckpt hook turn-end"), ""));
        assert!(!mentions_ckpt_hook(&json!("./lint.sh hook pre"), "pre"));
    }

    #[test]
    fn user_level_hooks_record_only_where_ckpt_init_ran() {
        let mut doc = Map::new();
        merge(Agent::Gemini, &mut doc, "ckpt", Scope::User).unwrap();
        assert_eq!(
            doc["hooks"]["BeforeTool"][0]["hooks"][0]["command"],
            "ckpt hook pre --only-initialized --format gemini"
        );
        assert_eq!(unmerge(Agent::Gemini, &mut doc), 6);
    }

    #[test]
    fn unmerging_takes_out_only_ckpts_entries() {
        let orig: Map<String, Value> = serde_json::from_str(
            r#"{"model":"x","hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"./lint.sh"}]}]},"z":1}"#,
        )
        .unwrap();
        for agent in [Agent::Claude, Agent::Codex, Agent::Gemini, Agent::Cursor] {
            let mut doc = orig.clone();
            let added = merge(agent, &mut doc, "/opt/ckpt", Scope::Project).unwrap();
            assert_eq!(unmerge(agent, &mut doc), added, "{agent:?}");
            if agent == Agent::Cursor {
                doc.remove("version");
            }
            assert_eq!(doc, orig, "{agent:?}: what was there is left as it was");
            assert_eq!(unmerge(agent, &mut doc), 0);
        }
        let mut doc = Map::new();
        merge(Agent::Claude, &mut doc, "ckpt", Scope::Project).unwrap();
        unmerge(Agent::Claude, &mut doc);
        assert!(doc.is_empty(), "{doc:?}");
    }

    #[test]
    fn every_agent_gets_its_events_and_format() {
        for (agent, event, cmd) in [
            (Agent::Codex, "PostToolUse", "ckpt hook post --format codex"),
            (Agent::Gemini, "BeforeTool", "ckpt hook pre --format gemini"),
        ] {
            let mut doc = Map::new();
            merge(agent, &mut doc, "ckpt", Scope::Project).unwrap();
            assert_eq!(doc["hooks"][event][0]["hooks"][0]["command"], cmd);
        }
        let mut doc = Map::new();
        merge(Agent::Cursor, &mut doc, "ckpt", Scope::Project).unwrap();
        assert_eq!(doc["version"], 1);
        assert_eq!(
            doc["hooks"]["afterFileEdit"][0]["command"],
            "ckpt hook post --format cursor"
        );
        let mut bad: Map<String, Value> = serde_json::from_str(r#"{"hooks":[]}"#).unwrap();
        assert!(merge(Agent::Claude, &mut bad, "ckpt", Scope::Project).is_err());
    }
}
