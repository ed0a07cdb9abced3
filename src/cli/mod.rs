//! Command-line definitions and dispatch. One file per command; each parses its
//! arguments, makes one library call and renders the result.

mod checkpoint;
mod compensate;
mod conflicts;
mod demo;
mod diff;
mod doctor;
pub mod error;
mod exec;
mod gc;
mod hook;
mod init;
mod log;
mod recover;
mod render;
mod repair;
mod resolve;
mod restore_session;
mod rollback;
mod scenario;
mod session;
mod show;
mod status;
pub mod ui;
mod verify;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use ckpt::{Clock, OpenOptions, Workspace};
use error::CommandError;
use ui::Ui;

/// Record every change a coding agent makes and take back exactly the agent's work
#[derive(Parser, Debug)]
#[command(name = "ckpt", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    globals: Globals,

    #[command(subcommand)]
    command: Command,
}

/// The options every command takes.
#[derive(clap::Args, Debug)]
struct Globals {
    /// The workspace to use (default: the git top level, else the current directory)
    #[arg(long, global = true, env = "CKPT_WORKSPACE", value_name = "DIR")]
    workspace: Option<PathBuf>,

    /// Print one JSON document on stdout instead of human output
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create .agent-runtime/ in the workspace
    Init(init::Args),
    /// Make a checkpoint; prints its id
    Checkpoint(checkpoint::Args),
    /// Show the timeline: checkpoints, calls, patches, actions, user edits
    Log(log::Args),
    /// Show one checkpoint, call, patch, action or conflict (conflicts: the three-way view)
    Show(show::Args),
    /// Files the agent changed, files changed since, open conflicts, calls in doubt
    Status(status::Args),
    /// The agent's changes only, as a unified diff
    Diff(diff::Args),
    /// Undo the agent's changes, keeping everyone else's (three-way)
    Rollback(rollback::Args),
    /// Step back one turn: undo the agent's changes since the newest checkpoint that has any in effect
    Undo(rollback::StepArgs),
    /// Re-apply what the newest `ckpt undo` took back
    Redo(rollback::StepArgs),
    /// List the conflicts rollbacks raised
    Conflicts(conflicts::Args),
    /// Settle a conflict: keep your file, apply the agent's undo, or merge by hand
    Resolve(resolve::Args),
    /// The session tree: append entries, show a branch, list the leaves
    Session(session::Args),
    /// Move a session back to a checkpoint or entry (a `branch` entry; nothing deleted)
    RestoreSession(restore_session::Args),
    /// Run a call's registered compensation (undo an external side effect), at most once
    Compensate(compensate::Args),
    /// After a crash: classify every call, finish unfinished actions, write RECOVERY.md
    Recover(recover::Args),
    /// Check the ledger chain, every referenced blob and artifact, every checkpoint
    Verify(verify::Args),
    /// Remove stored contents, artifacts and ledger records no kept checkpoint needs (retention in config.toml)
    Gc(gc::Args),
    /// For each agent: are ckpt's hooks where it reads them, will it run them, when did they fire
    Doctor(doctor::Args),
    /// After damage: keep every intact record and blob, move damaged bytes aside, leave a ledger that verifies
    Repair(repair::Args),
    /// Play a whole story in a scratch workspace and narrate it
    Demo(demo::Args),
    /// Recovery scenarios for CI: play stories of agent calls, user edits and crashes, check what must hold
    Scenario(scenario::Args),
    /// Record one agent hook event read from stdin (for agent settings, not by hand)
    Hook(hook::Args),
    /// Run a command between a pre and a post hook; exits with its status
    Exec(exec::Args),
}

/// Process-level settings taken from the environment (the library never reads it).
struct Env {
    clock: Option<(u64, u64)>,
    fsync: ckpt::durable::Fsync,
    portable: bool,
    no_color: bool,
    whole_reads: bool,
}

fn read_env() -> Result<Env, CommandError> {
    if let Ok(spec) = std::env::var("CKPT_FAILPOINTS") {
        ckpt::failpoint::configure(&spec).map_err(|bad| {
            CommandError::usage(format!(
                "CKPT_FAILPOINTS has an entry ckpt does not understand: {bad}"
            ))
        })?;
    }
    // Tests only, like git's GIT_TEST_FSYNC=0.
    let fsync = if std::env::var("CKPT_TEST_FSYNC").is_ok_and(|v| v == "0") {
        ckpt::durable::Fsync::Off
    } else {
        ckpt::durable::Fsync::On
    };
    let clock = match std::env::var("CKPT_TIMESTAMP") {
        Ok(t) => {
            let secs: u64 = t.parse().map_err(|_| {
                CommandError::usage("CKPT_TIMESTAMP must be Unix seconds (e.g. 1796000000)")
            })?;
            let seed = std::env::var("CKPT_ID_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(1);
            Some((secs * 1000, seed))
        }
        Err(_) => None,
    };
    Ok(Env {
        clock,
        fsync,
        // Tests: the portable path where a Linux-only call has one.
        portable: std::env::var("CKPT_TEST_PORTABLE").is_ok_and(|v| v == "1"),
        no_color: std::env::var_os("NO_COLOR").is_some(),
        // Tests: plans read the whole ledger, not its reduced view.
        whole_reads: std::env::var_os("CKPT_TEST_NO_VIEW").is_some(),
    })
}

pub struct Ctx {
    pub workspace: PathBuf,
    /// True when `--workspace` or `CKPT_WORKSPACE` chose it.
    pub explicit_workspace: bool,
    /// How long `ckpt hook` waits for stdin to close (`CKPT_HOOK_STDIN_TIMEOUT_MS`).
    pub hook_stdin_timeout_ms: u64,
    clock: Option<(u64, u64)>,
    fsync: ckpt::durable::Fsync,
    portable: bool,
    whole_reads: bool,
}

impl Ctx {
    pub fn clock(&self) -> Clock {
        match self.clock {
            Some((ms, seed)) => Clock::fixed(ms, seed),
            None => Clock::system(),
        }
    }

    /// How to open a workspace: the clock, and whether to sync.
    pub fn open_options(&self) -> OpenOptions {
        OpenOptions {
            clock: self.clock(),
            fsync: self.fsync,
            user_dirs: ckpt::git::UserDirs::from_env(),
            portable: self.portable,
            // The binary exits when its command is done.
            short_lived: true,
            on_big_tables: crate::alloc::big_tables_hook(),
            progress: Some(ui::progress),
            whole_reads: self.whole_reads,
        }
    }

    /// Opens the workspace and first finishes a rollback a crash interrupted
    /// (DESIGN §6: the next ckpt command finishes or reports it).
    pub fn open(&self) -> Result<Workspace, CommandError> {
        let ws = self.open_read_only()?;
        if let Some(f) = ckpt::rollback::finish_interrupted(&ws)? {
            let left = f
                .files
                .iter()
                .filter(|x| {
                    !x.result.writes()
                        && x.result != ckpt::rollback::FileResult::Unchanged
                        && x.result != ckpt::rollback::FileResult::Conflict
                })
                .count();
            ui::note(&format!(
                "note: finished rollback {} that was interrupted ({} files{}); see `ckpt show {}`",
                f.action,
                f.files.len(),
                if left > 0 {
                    format!(", {left} left as they were")
                } else {
                    String::new()
                },
                f.action
            ));
        }
        Ok(ws)
    }

    /// Opens the workspace without touching anything.
    pub fn open_read_only(&self) -> Result<Workspace, CommandError> {
        Ok(Workspace::open(&self.workspace, self.open_options())?)
    }
}

/// `ckpt hook PHASE [--format F]`, the command agents run around every tool
/// call, parsed without clap: building clap's parser for every subcommand
/// took 0.3–0.5 ms of a hook's 3 ms. Anything else (other options, help,
/// a bad phase) goes through clap as usual.
fn parse_hook_fast(args: impl IntoIterator<Item = std::ffi::OsString>) -> Option<Cli> {
    let mut args = args.into_iter().skip(1);
    if args.next()? != "hook" {
        return None;
    }
    let phase = hook::PhaseArg::from_name(args.next()?.to_str()?)?;
    let mut format = None;
    let mut only_initialized = false;
    // At most one of each; anything else is clap's to parse (and refuse).
    while let Some(a) = args.next() {
        let a = a.to_str()?;
        if a == "--only-initialized" && !only_initialized {
            only_initialized = true;
        } else if format.is_some() {
            return None;
        } else if a == "--format" {
            format = Some(args.next()?.to_str()?.to_string());
        } else {
            format = Some(a.strip_prefix("--format=")?.to_string());
        }
    }
    if format
        .as_deref()
        .is_some_and(|f| f.is_empty() || f.starts_with('-'))
    {
        return None;
    }
    Some(Cli {
        globals: Globals {
            // As clap reads it: an empty variable is no value.
            workspace: std::env::var_os("CKPT_WORKSPACE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            json: false,
        },
        command: Command::Hook(hook::Args::new(phase, format, only_initialized)),
    })
}

pub fn main() -> i32 {
    let parsed = match parse_hook_fast(std::env::args_os()) {
        Some(c) => Ok(c),
        None => Cli::try_parse_from(std::env::args_os()),
    };
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                error::USAGE
            } else {
                error::OK
            };
            // clap quotes the offending argument; print it redacted if it
            // holds a secret (losing clap's colours only then).
            let plain = e.to_string();
            match ckpt::redact::redact_str(&plain) {
                std::borrow::Cow::Borrowed(_) => {
                    let _ = e.print();
                }
                std::borrow::Cow::Owned(r) => {
                    use std::io::Write;
                    let _ = if e.use_stderr() {
                        std::io::stderr().write_all(r.as_bytes())
                    } else {
                        std::io::stdout().write_all(r.as_bytes())
                    };
                }
            }
            return code;
        }
    };
    let env = match read_env() {
        Ok(e) => e,
        Err(e) => {
            ui::note(&format!("error: {e}"));
            return e.code;
        }
    };
    let mut ui = Ui::new(cli.globals.json, env.no_color);
    let workspace = match &cli.globals.workspace {
        Some(w) => w.clone(),
        None => match std::env::current_dir() {
            Ok(cwd) => ckpt::workspace::discover(&cwd),
            Err(e) => {
                ui::note(&format!(
                    "error: cannot read the current directory: {e}; pass --workspace DIR"
                ));
                return error::ERROR;
            }
        },
    };
    let workspace = if workspace.is_absolute() {
        workspace
    } else {
        std::env::current_dir()
            .map(|c| c.join(&workspace))
            .unwrap_or(workspace)
    };
    let hook_stdin_timeout_ms = std::env::var("CKPT_HOOK_STDIN_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let ctx = Ctx {
        workspace,
        explicit_workspace: cli.globals.workspace.is_some(),
        hook_stdin_timeout_ms,
        clock: env.clock,
        fsync: env.fsync,
        portable: env.portable,
        whole_reads: env.whole_reads,
    };
    let result = match &cli.command {
        Command::Init(a) => init::run(&mut ui, &ctx, a),
        Command::Checkpoint(a) => checkpoint::run(&mut ui, &ctx, a),
        Command::Log(a) => log::run(&mut ui, &ctx, a),
        Command::Show(a) => show::run(&mut ui, &ctx, a),
        Command::Status(a) => status::run(&mut ui, &ctx, a),
        Command::Diff(a) => diff::run(&mut ui, &ctx, a),
        Command::Rollback(a) => rollback::run(&mut ui, &ctx, a),
        Command::Undo(a) => rollback::run_undo(&mut ui, &ctx, a),
        Command::Redo(a) => rollback::run_redo(&mut ui, &ctx, a),
        Command::Conflicts(a) => conflicts::run(&mut ui, &ctx, a),
        Command::Resolve(a) => resolve::run(&mut ui, &ctx, a),
        Command::Session(a) => session::run(&mut ui, &ctx, a),
        Command::RestoreSession(a) => restore_session::run(&mut ui, &ctx, a),
        Command::Compensate(a) => compensate::run(&mut ui, &ctx, a),
        Command::Recover(a) => recover::run(&mut ui, &ctx, a),
        Command::Verify(a) => verify::run(&mut ui, &ctx, a),
        Command::Gc(a) => gc::run(&mut ui, &ctx, a),
        Command::Doctor(a) => doctor::run(&mut ui, &ctx, a),
        Command::Repair(a) => repair::run(&mut ui, &ctx, a),
        Command::Demo(a) => demo::run(&mut ui, &ctx, a),
        Command::Scenario(a) => scenario::run(&mut ui, &ctx, a),
        Command::Hook(a) => hook::run(&mut ui, &ctx, a),
        Command::Exec(a) => exec::run(&mut ui, &ctx, a),
    };
    let flushed = ui.flush();
    match result {
        Ok(code) => {
            if let Err(e) = flushed {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return code;
                }
                ui::note(&format!("error: cannot write output: {e}"));
                return error::ERROR;
            }
            code
        }
        Err(e) => {
            if e.message.contains("Broken pipe") {
                return e.code;
            }
            if cli.globals.json {
                let doc = serde_json::json!({"error": e.message, "exit_code": e.code});
                let _ = ui.json(&doc);
                let _ = ui.flush();
            }
            ui::note(&format!("error: {}", e.message));
            e.code
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<std::ffi::OsString> {
        std::iter::once("ckpt")
            .chain(line.split(' ').filter(|s| !s.is_empty()))
            .map(Into::into)
            .collect()
    }

    #[test]
    fn the_hook_parser_gives_claps_command_or_steps_aside() {
        let taken = [
            "hook pre",
            "hook post --format codex",
            "hook post --format=gemini",
            "hook turn-end --only-initialized",
            "hook pre --only-initialized --format gemini",
            "hook pre --format=cursor --only-initialized",
        ];
        for line in taken {
            let fast = parse_hook_fast(argv(line)).unwrap_or_else(|| panic!("`{line}` not taken"));
            let full = Cli::try_parse_from(argv(line)).unwrap();
            assert_eq!(format!("{fast:?}"), format!("{full:?}"), "`{line}`");
        }
        for line in [
            "hook pre --format a --format b",
            "hook pre --only-initialized --only-initialized",
            "hook pre --json",
            "hook pre --format",
            "hook pre --format --only-initialized",
            "hook sideways",
            "status",
        ] {
            assert!(parse_hook_fast(argv(line)).is_none(), "`{line}` taken");
        }
    }
}
