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

/// Why the settings could not be merged.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The existing file is not a JSON object.
    #[error(
        "`{0}` is not a JSON object ckpt can merge into ({1}); fix it or move it away, then run `ckpt init --hooks` again"
    )]
    NotMergeable(String, String),
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
        ],
        // The prompt and session-start hooks make the per-turn checkpoints
        // `ckpt undo` steps through.
        Agent::Codex => vec![
            ("PreToolUse", Some("*"), "pre"),
            ("PostToolUse", Some("*"), "post"),
            ("UserPromptSubmit", None, "prompt"),
            ("SessionStart", None, "session-start"),
        ],
        Agent::Gemini => vec![
            ("BeforeTool", Some("*"), "pre"),
            ("AfterTool", Some("*"), "post"),
            ("BeforeAgent", None, "prompt"),
            ("SessionStart", None, "session-start"),
        ],
        Agent::Cursor => vec![
            ("afterFileEdit", None, "post"),
            ("beforeShellExecution", None, "pre"),
            ("afterShellExecution", None, "post"),
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

fn mentions_ckpt_hook(v: &Value, sub: &str) -> bool {
    match v {
        Value::String(s) => s.contains("ckpt") && s.contains(&format!("hook {sub}")),
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
        let command = format!("{ckpt_cmd} hook {sub}{}", format_flag(agent));
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
                let h = json!({ "type": "command", "command": command, "timeout": 30 });
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

/// Takes ckpt's hooks out of the agent's settings file ([`unmerge`]), and
/// out of the file older versions wrote them to; each old file is kept in
/// the blob store first. `added` in the result is the number removed.
pub fn uninstall(ws: &Workspace, agent: Agent) -> Result<InstallStats, SettingsError> {
    let mut removed = 0;
    for file in std::iter::once(file_for(agent)).chain(legacy_file(agent)) {
        removed += edit(ws, file, |doc| Ok(unmerge(agent, doc)))?;
    }
    Ok(InstallStats {
        file: file_for(agent).to_string(),
        added: removed,
        moved_from: None,
    })
}

/// Applies `change` to the settings document in `file` (an empty one when
/// there is none) and writes it back when `change` says it changed
/// something (the old file stored first). Returns what `change` returned.
fn edit(
    ws: &Workspace,
    file: &str,
    change: impl FnOnce(&mut Map<String, Value>) -> Result<usize, String>,
) -> Result<usize, SettingsError> {
    let rel = RelPath::from_ledger(file.as_bytes()).map_err(WorkspaceError::from)?;
    let io = |e: std::io::Error| {
        SettingsError::Workspace(crate::fs_util::FsError::new("update", file, e).into())
    };
    let existed = ws.files().entry(&rel).map_err(io)? != EntryKind::Absent;
    let (mut doc, mode) = read_settings(ws, &rel, file)?.unwrap_or((Map::new(), 0o644));
    let n = change(&mut doc).map_err(|e| SettingsError::NotMergeable(file.into(), e))?;
    if n > 0 && (existed || !doc.is_empty()) {
        let mut bytes = serde_json::to_vec_pretty(&Value::Object(doc)).map_err(|e| io(e.into()))?;
        bytes.push(b'\n');
        if let Ok(old) = ws.files().read(&rel) {
            ws.blobs().put_bytes(&old).map_err(WorkspaceError::from)?;
        }
        ws.files().write_file(&rel, &bytes, mode).map_err(io)?;
    }
    Ok(n)
}

/// A settings document and its file's mode.
type Settings = (Map<String, Value>, u32);

/// The settings document at `rel` and its mode (`None`: no such file).
fn read_settings(
    ws: &Workspace,
    rel: &RelPath,
    file: &str,
) -> Result<Option<Settings>, SettingsError> {
    let io = |e: std::io::Error| {
        SettingsError::Workspace(crate::fs_util::FsError::new("update", file, e).into())
    };
    match ws.files().entry(rel).map_err(io)? {
        EntryKind::Absent => Ok(None),
        EntryKind::File { mode, .. } => {
            let bytes = ws.files().read(rel).map_err(io)?;
            let text = String::from_utf8_lossy(&bytes);
            let v: Value = if text.trim().is_empty() {
                Value::Object(Map::new())
            } else {
                serde_json::from_str(&text)
                    .map_err(|e| SettingsError::NotMergeable(file.into(), e.to_string()))?
            };
            match v {
                Value::Object(m) => Ok(Some((m, mode))),
                _ => Err(SettingsError::NotMergeable(
                    file.into(),
                    "not an object".into(),
                )),
            }
        }
        _ => Err(SettingsError::NotMergeable(
            file.into(),
            "not a regular file".into(),
        )),
    }
}

/// Installs ckpt's hooks into the agent's settings file in the workspace.
/// `ckpt_cmd` is how the agent should invoke ckpt (a path or `ckpt`). Hooks
/// an older ckpt put in [`legacy_file`] are moved (taken out there), so no
/// event runs ckpt twice.
pub fn install(
    ws: &Workspace,
    agent: Agent,
    ckpt_cmd: &str,
) -> Result<InstallStats, SettingsError> {
    let file = file_for(agent);
    let added = edit(ws, file, |doc| merge(agent, doc, ckpt_cmd))?;
    let mut moved = 0;
    if let Some(old) = legacy_file(agent) {
        moved = edit(ws, old, |doc| Ok(unmerge(agent, doc)))?;
    }
    Ok(InstallStats {
        file: file.to_string(),
        added,
        moved_from: (moved > 0).then(|| legacy_file(agent).unwrap_or_default().to_string()),
    })
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
        assert_eq!(merge(Agent::Claude, &mut doc, "ckpt").unwrap(), 5);
        let pre = doc["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(pre.len(), 2);
        assert_eq!(pre[0]["hooks"][0]["command"], "./lint.sh");
        assert_eq!(pre[1]["hooks"][0]["command"], "ckpt hook pre");
        let keys: Vec<&String> = doc.keys().collect();
        assert_eq!(keys, ["model", "hooks", "z"], "key order is kept");
        let before = doc.clone();
        assert_eq!(merge(Agent::Claude, &mut doc, "ckpt").unwrap(), 0);
        assert_eq!(doc, before);
    }

    #[test]
    fn unmerging_takes_out_only_ckpts_entries() {
        let orig: Map<String, Value> = serde_json::from_str(
            r#"{"model":"x","hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"./lint.sh"}]}]},"z":1}"#,
        )
        .unwrap();
        for agent in [Agent::Claude, Agent::Codex, Agent::Gemini, Agent::Cursor] {
            let mut doc = orig.clone();
            let added = merge(agent, &mut doc, "/opt/ckpt").unwrap();
            assert_eq!(unmerge(agent, &mut doc), added, "{agent:?}");
            if agent == Agent::Cursor {
                doc.remove("version");
            }
            assert_eq!(doc, orig, "{agent:?}: what was there is left as it was");
            assert_eq!(unmerge(agent, &mut doc), 0);
        }
        let mut doc = Map::new();
        merge(Agent::Claude, &mut doc, "ckpt").unwrap();
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
            merge(agent, &mut doc, "ckpt").unwrap();
            assert_eq!(doc["hooks"][event][0]["hooks"][0]["command"], cmd);
        }
        let mut doc = Map::new();
        merge(Agent::Cursor, &mut doc, "ckpt").unwrap();
        assert_eq!(doc["version"], 1);
        assert_eq!(
            doc["hooks"]["afterFileEdit"][0]["command"],
            "ckpt hook post --format cursor"
        );
        let mut bad: Map<String, Value> = serde_json::from_str(r#"{"hooks":[]}"#).unwrap();
        assert!(merge(Agent::Claude, &mut bad, "ckpt").is_err());
    }
}
