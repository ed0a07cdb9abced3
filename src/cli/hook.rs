//! `ckpt hook pre|post|post-failure|prompt|session-start|turn-end`: one payload on stdin.
//!
//! What to do is decided by the library ([`ckpt::hook_policy::decide`]);
//! this reads stdin and the environment and renders the verdict. Exit codes
//! follow the agents' hook contracts: 0 and silence on success; 2 (blocking,
//! stderr goes to the agent) when a pre hook could not save the before state
//! and the policy is `block`, or when the agent targets ckpt's own data; 1
//! (non-blocking) for a payload that is not a tool call or a post hook that
//! failed.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use ckpt::capture::{self, Format, HookInputError, Phase};
use ckpt::hook_policy::{self, Request, Verdict};

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
    let pid_of = |var: &str| std::env::var(var).ok().and_then(|v| v.parse::<u32>().ok());
    let cwd = std::env::current_dir().ok();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let open = || ctx.open_options();
    let mut req = Request {
        payload: &[],
        phase,
        format,
        workspace: ctx.explicit_workspace.then_some(ctx.workspace.as_path()),
        cwd: cwd.as_deref(),
        home: home.as_deref(),
        only_initialized: args.only_initialized,
        agent_pid: pid_of("CKPT_AGENT_PID"),
        claude_pid: pid_of("CLAUDE_PID"),
        open: &open,
    };
    let timeout = Duration::from_millis(ctx.hook_stdin_timeout_ms);
    let bytes = match read_stdin(timeout) {
        Ok(b) => b,
        Err(e) => {
            hook_policy::log_refusal(&req, e.code(), serde_json::json!({"phase": phase.as_str()}));
            return Err(CommandError::new(ERROR, format!("ckpt hook: {e}")));
        }
    };
    req.payload = &bytes;
    match hook_policy::decide(&req) {
        Verdict::Allow { warnings, gc_due } => {
            for w in &warnings {
                super::ui::note(&format!("ckpt warning: {w}"));
            }
            if let Some(root) = gc_due {
                start_auto_gc(&root);
            }
            Ok(OK)
        }
        Verdict::Quiet => Ok(OK),
        Verdict::Unrecorded(why) => {
            super::ui::note(&format!("ckpt: this tool call is not recorded: {why}"));
            Ok(OK)
        }
        Verdict::Block(msg) => Err(CommandError::new(2, msg)),
        Verdict::Failed(msg) => Err(CommandError::new(ERROR, msg)),
    }
}

/// Starts `ckpt gc --auto` on `root`, detached (its own process group, no
/// stdio, not waited for): it measures `.agent-runtime/` and collects only
/// past the budget; the hook pays for the spawn alone, once an hour at most.
/// What it does goes to `trace.jsonl`.
fn start_auto_gc(root: &std::path::Path) {
    use std::os::unix::process::CommandExt;
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let _ = std::process::Command::new(exe)
        .arg("--workspace")
        .arg(root)
        .args(["gc", "--auto"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn();
}
