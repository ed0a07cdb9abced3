//! What a hook does with one payload, decided in one call: which workspace
//! it records into, whether it sets ckpt up there, what it records, and
//! whether the agent's tool call goes ahead ([`Verdict::Allow`]), is
//! blocked ([`Verdict::Block`]), or goes ahead unrecorded with a word to
//! the user. The `ckpt hook` command reads stdin, passes the environment's
//! answers in a [`Request`] (the library reads none), and renders the
//! verdict as the agents' hook contracts want it (exit 0, 2 or 1).

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use crate::Workspace;
use crate::capture::{self, Format, Phase};
use crate::config::{Config, OnRecordFailure};
use crate::workspace::OpenOptions;

/// One hook invocation, with what the environment says.
pub struct Request<'a> {
    /// The payload as read.
    pub payload: &'a [u8],
    /// The hook event.
    pub phase: Phase,
    /// The payload's format, when the command line names it (else detected).
    pub format: Option<Format>,
    /// `--workspace` / `CKPT_WORKSPACE`: record there and nowhere else.
    pub workspace: Option<&'a Path>,
    /// The directory the hook process runs in (where the payload's `cwd`
    /// does not lead to a workspace).
    pub cwd: Option<&'a Path>,
    /// The user's home directory, where a hook never sets ckpt up.
    pub home: Option<&'a Path>,
    /// `--only-initialized`: record only where `ckpt init` ran.
    pub only_initialized: bool,
    /// The agent process the hook runs for, when the environment names it
    /// (`CKPT_AGENT_PID`; Claude Code's `CLAUDE_PID` for a Claude payload);
    /// else the nearest ancestor that is not a shell.
    pub agent_pid: Option<u32>,
    /// Claude Code's `CLAUDE_PID`, used for a Claude Code payload.
    pub claude_pid: Option<u32>,
    /// How workspaces are opened (called for each one opened).
    pub open: &'a dyn Fn() -> OpenOptions,
}

/// What the hook command does with the tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The call goes ahead; each warning is said to the user.
    Allow {
        /// Warnings (a change ckpt could not store, a payload it doubted).
        warnings: Vec<String>,
        /// A prompt hook found a `ckpt gc --auto` due in this workspace
        /// ([`crate::gc::auto_due`]): the caller starts it in the
        /// background, never waiting for it.
        gc_due: Option<PathBuf>,
    },
    /// The call goes ahead and nothing is recorded, as asked
    /// (`--only-initialized` outside a workspace): say nothing.
    Quiet,
    /// The call goes ahead unrecorded; the reason is said to the user.
    Unrecorded(String),
    /// The tool call is blocked (a pre hook; exit 2): the message goes to
    /// the agent.
    Block(String),
    /// The hook failed on a payload that blocks nothing (a post, a payload
    /// that is not a tool call): exit 1 with the message.
    Failed(String),
}

/// Decides and does what one hook invocation asks.
pub fn decide(req: &Request<'_>) -> Verdict {
    let mut ev = match capture::parse(req.payload, req.phase, req.format) {
        Ok(ev) => ev,
        Err(e) => {
            log_refusal(
                req,
                e.code(),
                serde_json::json!({"phase": req.phase.as_str(), "size": req.payload.len(),
                    "sha256": crate::ContentHash::of(req.payload).to_string()}),
            );
            return Verdict::Failed(format!("ckpt hook: {e}"));
        }
    };
    let root = match hook_root(req, ev.cwd.as_deref()) {
        Ok(root) => root,
        Err(None) => return Verdict::Quiet,
        Err(Some(why)) => return Verdict::Unrecorded(why),
    };
    if req.phase == Phase::Pre {
        ev.owner = agent_process(req, ev.format);
    }
    let blocking = req.phase == Phase::Pre;
    let fail = |what: String, policy: OnRecordFailure| {
        if blocking && policy == OnRecordFailure::Block {
            Verdict::Block(format!(
                "ckpt could not record the state before this tool call, so it is blocked (it could not be undone): {what}; fix the cause, or set on_record_failure = \"warn\" in .agent-runtime/config.toml"
            ))
        } else if blocking {
            Verdict::Allow {
                warnings: vec![format!(
                    "this tool call is not recorded and cannot be undone: {what}"
                )],
                gc_due: None,
            }
        } else {
            Verdict::Failed(format!("ckpt hook: {what}"))
        }
    };
    // The first hook in a workspace sets ckpt up there.
    let ws = match Workspace::open(&root, (req.open)()) {
        Ok(ws) => ws,
        Err(crate::WorkspaceError::NotInitialized(_)) => {
            match Workspace::init(&root, (req.open)()) {
                Ok((ws, _)) => ws,
                Err(e) => return fail(crate::error_line(&e), OnRecordFailure::Block),
            }
        }
        Err(e) => return fail(crate::error_line(&e), OnRecordFailure::Block),
    };
    let cfg = match Config::load(ws.runtime_dir()) {
        Ok(c) => c,
        Err(e) => return fail(e.to_string(), OnRecordFailure::Block),
    };
    let result = crate::hook::run(&ws, &cfg, &ev);
    if let Err(e) = &result {
        let code = match e {
            crate::hook::HookError::Path { source, .. } => source.code(),
            crate::hook::HookError::Record(_) => "record_failed",
        };
        crate::trace::error(
            ws.runtime_dir().as_fd(),
            ws.clock(),
            code,
            serde_json::json!({"phase": req.phase.as_str(), "call": ev.call, "tool": ev.tool}),
        );
    }
    match result {
        Ok(stats) => Verdict::Allow {
            warnings: stats.warnings,
            gc_due: (req.phase == Phase::Prompt && crate::gc::auto_due(&ws, &cfg))
                .then(|| ws.root().to_path_buf()),
        },
        Err(e) if e.is_runtime_target() => Verdict::Block(format!(
            "ckpt refuses this tool call: {e}; `.agent-runtime/` holds the record of the agent's work and only ckpt writes there"
        )),
        Err(e) => fail(crate::error_line(&e), cfg.on_record_failure),
    }
}

/// Logs a refused payload into the workspace the request names or runs
/// in, if one exists there (a refused payload creates nothing).
pub fn log_refusal(req: &Request<'_>, code: &str, fields: serde_json::Value) {
    let Some(dir) = req.workspace.or(req.cwd) else {
        return;
    };
    if let Ok(ws) = Workspace::open(dir, (req.open)()) {
        crate::trace::error(ws.runtime_dir().as_fd(), ws.clock(), code, fields);
    }
}

/// The agent process this hook runs for: the one the environment names
/// (`CKPT_AGENT_PID`, for wrappers that run hooks on an agent's behalf;
/// Claude Code's `CLAUDE_PID` for a Claude Code payload: Claude Code
/// exports it to its Bash commands too, so a Codex started from one carries
/// it), else the nearest ancestor that is not a shell.
fn agent_process(req: &Request<'_>, format: Format) -> Option<crate::sys::procs::ProcId> {
    if let Some(pid) = req.agent_pid {
        return crate::sys::procs::id_of(pid);
    }
    if format == Format::Claude
        && let Some(pid) = req.claude_pid
    {
        return crate::sys::procs::id_of(pid);
    }
    crate::sys::procs::agent_of_this_hook()
}

/// The workspace a hook records into: the request's workspace, else the
/// one the payload's `cwd` is in, else the one the hook runs in. A hook
/// sets ckpt up only at a git top level (never in `/` or the home
/// directory) or where it is told to, never in an arbitrary directory: a
/// user-level hook runs in every directory an agent visits. `Err(None)`:
/// record nothing and say nothing (`--only-initialized`); `Err(Some(why))`:
/// record nothing and say why.
fn hook_root(req: &Request<'_>, cwd: Option<&str>) -> Result<PathBuf, Option<String>> {
    use crate::workspace::{FoundBy, find, is_initialized};
    if let Some(ws) = req.workspace {
        if req.only_initialized && !is_initialized(ws) {
            return Err(None);
        }
        return Ok(ws.to_path_buf());
    }
    let payload_cwd = cwd.map(Path::new).filter(|c| c.is_absolute() && c.is_dir());
    let found = payload_cwd
        .and_then(find)
        .or_else(|| req.cwd.and_then(find));
    let where_ = || {
        payload_cwd.or(req.cwd).map_or_else(
            || "this directory".to_string(),
            |d| format!("`{}`", d.display()),
        )
    };
    match found {
        Some((root, FoundBy::Runtime)) => Ok(root),
        Some(_) | None if req.only_initialized => Err(None),
        None => Err(Some(format!(
            "{} is in no git work tree and `ckpt init` was not run in it or above it; run `ckpt init` in the project to record its calls",
            where_()
        ))),
        Some((root, FoundBy::Git)) => {
            let is_home = req.home.is_some_and(|h| same_dir(h, &root));
            if is_home || root.parent().is_none() {
                return Err(Some(format!(
                    "ckpt does not set itself up in {} from a hook; run `ckpt init` there if you mean it to",
                    if is_home {
                        "your home directory"
                    } else {
                        "`/`"
                    }
                )));
            }
            Ok(root)
        }
    }
}

/// Whether `a` and `b` name the same directory.
fn same_dir(a: &Path, b: &Path) -> bool {
    a == b
        || match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pre(cwd: &Path, file: &str) -> Vec<u8> {
        serde_json::json!({
            "session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Write",
            "tool_use_id": "t1", "cwd": cwd,
            "tool_input": {"file_path": cwd.join(file), "content": "x"},
        })
        .to_string()
        .into_bytes()
    }

    fn request<'a>(payload: &'a [u8], open: &'a dyn Fn() -> OpenOptions) -> Request<'a> {
        Request {
            payload,
            phase: Phase::Pre,
            format: None,
            workspace: None,
            cwd: None,
            home: None,
            only_initialized: false,
            agent_pid: None,
            claude_pid: None,
            open,
        }
    }

    #[test]
    fn the_verdicts_a_hook_command_renders() {
        let open = || OpenOptions {
            fsync: crate::durable::Fsync::Off,
            ..Default::default()
        };
        let t = tempfile::tempdir().unwrap();
        let (home, repo, plain) = (
            t.path().join("home"),
            t.path().join("repo"),
            t.path().join("plain"),
        );
        for d in [&home, &repo, &plain] {
            std::fs::create_dir_all(d.join(".git")).unwrap();
        }
        std::fs::remove_dir(plain.join(".git")).unwrap();
        // Nowhere ckpt may set itself up: said, not recorded, not blocked.
        let p = pre(&plain, "f");
        let v = decide(&request(&p, &open));
        assert!(
            matches!(&v, Verdict::Unrecorded(w) if w.contains("no git work tree")),
            "{v:?}"
        );
        let p = pre(&home, "f");
        let v = decide(&Request {
            home: Some(&home),
            ..request(&p, &open)
        });
        assert!(
            matches!(&v, Verdict::Unrecorded(w) if w.contains("home directory")),
            "{v:?}"
        );
        // --only-initialized outside a workspace: nothing at all.
        let p = pre(&repo, "f");
        let v = decide(&Request {
            only_initialized: true,
            ..request(&p, &open)
        });
        assert_eq!(v, Verdict::Quiet);
        assert!(!repo.join(".agent-runtime").exists());
        // At a git top level the first hook sets ckpt up and records.
        let v = decide(&request(&p, &open));
        assert_eq!(
            v,
            Verdict::Allow {
                warnings: vec![],
                gc_due: None
            }
        );
        assert!(repo.join(".agent-runtime/ledger.jsonl").is_file());
        // A write into ckpt's own data is blocked.
        let p = pre(&repo, ".agent-runtime/ledger.jsonl");
        let v = decide(&request(&p, &open));
        assert!(
            matches!(&v, Verdict::Block(m) if m.contains("refuses this tool call")),
            "{v:?}"
        );
        // Not a payload: a failure that blocks nothing.
        let v = decide(&request(b"{", &open));
        assert!(
            matches!(&v, Verdict::Failed(m) if m.starts_with("ckpt hook:")),
            "{v:?}"
        );
    }
}
