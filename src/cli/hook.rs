//! `ckpt hook pre|post|post-failure|prompt|session-start|turn-end`: one payload on stdin.
//!
//! Exit codes follow the agents' hook contracts: 0 and silence on success; 2
//! (blocking, stderr goes to the agent) when a pre hook could not save the before
//! state and the policy is `block`, or when the agent targets ckpt's own data;
//! 1 (non-blocking) for a payload that is not a tool call or a post hook that
//! failed.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use ckpt::Workspace;
use ckpt::capture::{self, Format, HookInputError, Phase};
use ckpt::config::{Config, OnRecordFailure};

use super::error::{CommandError, ERROR, OK, USAGE};
use super::{Ctx, Ui};

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum PhaseArg {
    Pre,
    Post,
    PostFailure,
    Prompt,
    SessionStart,
    TurnEnd,
}

impl PhaseArg {
    /// The phase a command-line word names (as clap spells them).
    pub fn from_name(s: &str) -> Option<PhaseArg> {
        use PhaseArg::*;
        [Pre, Post, PostFailure, Prompt, SessionStart, TurnEnd]
            .into_iter()
            .find(|p| p.name() == s)
    }

    fn name(self) -> &'static str {
        match self {
            PhaseArg::Pre => "pre",
            PhaseArg::Post => "post",
            PhaseArg::PostFailure => "post-failure",
            PhaseArg::Prompt => "prompt",
            PhaseArg::SessionStart => "session-start",
            PhaseArg::TurnEnd => "turn-end",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Which hook event this is
    #[arg(value_enum)]
    phase: PhaseArg,
    /// The payload's agent format (default: detected)
    #[arg(long, value_name = "claude|codex|gemini|cursor|generic")]
    format: Option<String>,
    /// Record only in a workspace where `ckpt init` ran (for hooks in a
    /// user-level settings file, which run in every directory)
    #[arg(long)]
    only_initialized: bool,
}

impl Args {
    /// The arguments as the fast path in `cli::main` parsed them.
    pub fn new(phase: PhaseArg, format: Option<String>, only_initialized: bool) -> Args {
        Args {
            phase,
            format,
            only_initialized,
        }
    }
}

/// Reads stdin up to the cap, giving up after `timeout` (a stalled writer must
/// not hang the agent).
fn read_stdin(timeout: Duration) -> Result<Vec<u8>, HookInputError> {
    let mut head = Vec::new();
    if let Some(done) = read_stdin_ready(&mut head) {
        return done;
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let cap = capture::MAX_STDIN - head.len();
        let r = capture::read_capped(&mut stdin as &mut dyn Read, cap).map(|rest| {
            head.extend_from_slice(&rest);
            head
        });
        let _ = tx.send(r);
    });
    match rx.recv_timeout(timeout) {
        Ok(Err(HookInputError::TooLarge { .. })) => Err(HookInputError::TooLarge {
            cap: capture::MAX_STDIN,
        }),
        Ok(r) => r,
        Err(_) => Err(HookInputError::Read(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("stdin was not closed within {} ms", timeout.as_millis()),
        ))),
    }
}

/// The common case without a watchdog thread: the agent wrote the payload and
/// closed the pipe before the hook got here, so non-blocking reads reach the end
/// of it. Returns `None` (with what was read so far in `head`) when the writer
/// is still going or stdin is not a pipe: the caller then reads the rest with a
/// timeout.
fn read_stdin_ready(head: &mut Vec<u8>) -> Option<Result<Vec<u8>, HookInputError>> {
    use rustix::fs::{FileType, OFlags};
    let stdin = std::io::stdin();
    let fd = stdin.as_fd();
    let st = ckpt::sys::fstat(fd).ok()?;
    match st.file_type() {
        // Claude Code and Gemini CLI hand hooks a Unix socket, others a pipe.
        FileType::Fifo | FileType::Socket => {}
        // A regular file never blocks: read it here, capped, with no thread.
        FileType::RegularFile => {
            let mut stdin = stdin.lock();
            return Some(capture::read_capped(
                &mut stdin as &mut dyn Read,
                capture::MAX_STDIN,
            ));
        }
        _ => return None,
    }
    let flags = rustix::fs::fcntl_getfl(fd).ok()?;
    if flags.contains(OFlags::NONBLOCK) {
        return None;
    }
    rustix::fs::fcntl_setfl(fd, flags | OFlags::NONBLOCK).ok()?;
    let mut chunk = vec![0u8; 64 * 1024];
    let outcome = loop {
        match rustix::io::read(fd, &mut chunk) {
            Ok(0) => break Some(Ok(())),
            Ok(n) => {
                head.extend_from_slice(&chunk[..n]);
                if head.len() > capture::MAX_STDIN {
                    break Some(Err(HookInputError::TooLarge {
                        cap: capture::MAX_STDIN,
                    }));
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => break None,
            Err(e) => break Some(Err(HookInputError::Read(e.into()))),
        }
    };
    // Put the pipe back as it was: it may be shared with the agent.
    if rustix::fs::fcntl_setfl(fd, flags).is_err() && outcome.is_none() {
        return Some(Err(HookInputError::Read(std::io::Error::other(
            "cannot make stdin blocking again",
        ))));
    }
    outcome.map(|r| r.map(|()| std::mem::take(head)))
}

/// The agent process this hook runs for: `CKPT_AGENT_PID` (for wrappers
/// that run hooks on an agent's behalf), Claude Code's `CLAUDE_PID` for a
/// Claude Code payload (Claude Code exports it to its Bash commands too, so
/// a Codex started from one carries it), else the nearest ancestor that is
/// not a shell.
fn agent_process(format: Format) -> Option<ckpt::procs::ProcId> {
    let pid_of = |var: &str| std::env::var(var).ok().and_then(|v| v.parse::<u32>().ok());
    if let Some(pid) = pid_of("CKPT_AGENT_PID") {
        return ckpt::procs::id_of(pid);
    }
    if format == Format::Claude
        && let Some(pid) = pid_of("CLAUDE_PID")
    {
        return ckpt::procs::id_of(pid);
    }
    ckpt::procs::agent_of_this_hook()
}

/// Why a hook records nothing.
enum Skip {
    /// `--only-initialized`, and ckpt is not set up here: as asked.
    Silently,
    /// Nowhere ckpt may set itself up; the reason, said on stderr.
    Saying(String),
}

/// The workspace a hook records into: `--workspace` / `CKPT_WORKSPACE`, else
/// the one the payload's `cwd` is in, else the one the hook runs in. A hook
/// sets ckpt up only at a git top level (never in `/` or the home directory)
/// or where it is told to, never in an arbitrary directory: a user-level
/// hook runs in every directory an agent visits.
fn hook_root(ctx: &Ctx, cwd: Option<&str>, only_initialized: bool) -> Result<PathBuf, Skip> {
    use ckpt::workspace::{FoundBy, find, is_initialized};
    if ctx.explicit_workspace {
        if only_initialized && !is_initialized(&ctx.workspace) {
            return Err(Skip::Silently);
        }
        return Ok(ctx.workspace.clone());
    }
    let payload_cwd = cwd.map(Path::new).filter(|c| c.is_absolute() && c.is_dir());
    let found = payload_cwd
        .and_then(find)
        .or_else(|| std::env::current_dir().ok().and_then(|c| find(&c)));
    let where_ = || {
        payload_cwd
            .map(Path::to_path_buf)
            .or_else(|| std::env::current_dir().ok())
            .map_or_else(
                || "this directory".to_string(),
                |d| format!("`{}`", d.display()),
            )
    };
    match found {
        Some((root, FoundBy::Runtime)) => Ok(root),
        Some(_) | None if only_initialized => Err(Skip::Silently),
        None => Err(Skip::Saying(format!(
            "{} is in no git work tree and `ckpt init` was not run in it or above it; run `ckpt init` in the project to record its calls",
            where_()
        ))),
        Some((root, FoundBy::Git)) => {
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let is_home = home.is_some_and(|h| same_dir(&h, &root));
            if is_home || root.parent().is_none() {
                return Err(Skip::Saying(format!(
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

pub fn run(_ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let phase = match args.phase {
        PhaseArg::Pre => Phase::Pre,
        PhaseArg::Post => Phase::Post,
        PhaseArg::PostFailure => Phase::PostFailure,
        PhaseArg::Prompt => Phase::Prompt,
        PhaseArg::SessionStart => Phase::SessionStart,
        PhaseArg::TurnEnd => Phase::TurnEnd,
    };
    let format = match &args.format {
        Some(f) => Some(
            f.parse::<Format>()
                .map_err(|e| CommandError::new(USAGE, e.to_string()))?,
        ),
        None => None,
    };
    let timeout = Duration::from_millis(ctx.hook_stdin_timeout_ms);
    let log_refusal = |code: &str, fields: serde_json::Value| {
        // Only into a workspace that already exists: a refused payload creates nothing.
        if let Ok(ws) = Workspace::open(&ctx.workspace, ctx.open_options()) {
            ckpt::trace::error(ws.runtime_dir().as_fd(), ws.clock(), code, fields);
        }
    };
    let bytes = match read_stdin(timeout) {
        Ok(b) => b,
        Err(e) => {
            log_refusal(e.code(), serde_json::json!({"phase": args.phase.name()}));
            return Err(CommandError::new(ERROR, format!("ckpt hook: {e}")));
        }
    };
    let mut ev = match capture::parse(&bytes, phase, format) {
        Ok(ev) => ev,
        Err(e) => {
            log_refusal(
                e.code(),
                serde_json::json!({"phase": args.phase.name(), "size": bytes.len(),
                    "sha256": ckpt::ContentHash::of(&bytes).to_string()}),
            );
            return Err(CommandError::new(ERROR, format!("ckpt hook: {e}")));
        }
    };

    let root = match hook_root(ctx, ev.cwd.as_deref(), args.only_initialized) {
        Ok(root) => root,
        Err(Skip::Silently) => return Ok(OK),
        Err(Skip::Saying(why)) => {
            super::ui::note(&format!("ckpt: this tool call is not recorded: {why}"));
            return Ok(OK);
        }
    };
    if phase == Phase::Pre {
        ev.owner = agent_process(ev.format);
    }
    let blocking = phase == Phase::Pre;
    let fail = |what: String, policy: OnRecordFailure| -> Result<i32, CommandError> {
        if blocking && policy == OnRecordFailure::Block {
            Err(CommandError::new(
                2,
                format!(
                    "ckpt could not record the state before this tool call, so it is blocked (it could not be undone): {what}; fix the cause, or set on_record_failure = \"warn\" in .agent-runtime/config.toml"
                ),
            ))
        } else if blocking {
            super::ui::note(&format!(
                "ckpt warning: this tool call is not recorded and cannot be undone: {what}"
            ));
            Ok(OK)
        } else {
            Err(CommandError::new(ERROR, format!("ckpt hook: {what}")))
        }
    };
    // The first hook in a workspace sets ckpt up there.
    let ws = match Workspace::open(&root, ctx.open_options()) {
        Ok(ws) => ws,
        Err(ckpt::WorkspaceError::NotInitialized(_)) => {
            match Workspace::init(&root, ctx.open_options()) {
                Ok((ws, _)) => ws,
                Err(e) => return fail(super::error::one_line(&e), OnRecordFailure::Block),
            }
        }
        Err(e) => return fail(super::error::one_line(&e), OnRecordFailure::Block),
    };
    let cfg = match Config::load(ws.runtime_dir()) {
        Ok(c) => c,
        Err(e) => return fail(e.to_string(), OnRecordFailure::Block),
    };
    let result = ckpt::hook::run(&ws, &cfg, &ev);
    if let Err(e) = &result {
        let code = match e {
            ckpt::hook::HookError::Path { source, .. } => source.code(),
            ckpt::hook::HookError::Record(_) => "record_failed",
        };
        ckpt::trace::error(
            ws.runtime_dir().as_fd(),
            ws.clock(),
            code,
            serde_json::json!({"phase": args.phase.name(), "call": ev.call, "tool": ev.tool}),
        );
    }
    match result {
        Ok(stats) => {
            for w in &stats.warnings {
                super::ui::note(&format!("ckpt warning: {w}"));
            }
            Ok(OK)
        }
        Err(e) if e.is_runtime_target() => Err(CommandError::new(
            2,
            format!(
                "ckpt refuses this tool call: {e}; `.agent-runtime/` holds the record of the agent's work and only ckpt writes there"
            ),
        )),
        Err(e) => fail(super::error::one_line(&e), cfg.on_record_failure),
    }
}
