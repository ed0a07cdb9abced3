//! `ckpt exec [--session S] [--call C] [--tool T] -- CMD…`: a pre hook, the
//! command, a post hook; exits with the command's status.

use ckpt::Workspace;
use ckpt::capture::{self, Format, Phase};
use ckpt::config::{Config, OnRecordFailure};

use super::error::{CommandError, ERROR};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The session the call belongs to
    #[arg(long, value_name = "S", env = "CKPT_SESSION", default_value = "exec")]
    session: String,
    /// The call id (default: a new one)
    #[arg(long, value_name = "C")]
    call: Option<String>,
    /// The tool name recorded for the call
    #[arg(long, value_name = "T", default_value = "exec")]
    tool: String,
    /// The command and its arguments (run directly, not through a shell)
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

pub fn run(_ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let ws = match Workspace::open(&ctx.workspace, ctx.open_options()) {
        Ok(ws) => ws,
        Err(ckpt::WorkspaceError::NotInitialized(_)) => {
            Workspace::init(&ctx.workspace, ctx.open_options())?.0
        }
        Err(e) => return Err(e.into()),
    };
    let cfg =
        Config::load(ws.runtime_dir()).map_err(|e| CommandError::new(ERROR, e.to_string()))?;
    let call = args
        .call
        .clone()
        .unwrap_or_else(|| ws.clock().new_id("call_"));
    let pre = serde_json::json!({
        "session": args.session,
        "call": call,
        "tool": args.tool,
        "input": {"argv": args.command},
    });
    let mut ev = capture::parse(
        pre.to_string().as_bytes(),
        Phase::Pre,
        Some(Format::Generic),
    )
    .map_err(|e| CommandError::new(ERROR, e.to_string()))?;
    // The call is this process's: if it is killed, the next ckpt command
    // records what the command changed as this call's.
    ev.owner = ckpt::sys::procs::this_process();
    let pre = ckpt::hook::run(&ws, &cfg, &ev);
    for w in pre.iter().flat_map(|s| &s.warnings) {
        super::ui::note(&format!("ckpt warning: {w}"));
    }
    if let Err(e) = pre {
        let msg = super::error::one_line(&e);
        if cfg.on_record_failure == OnRecordFailure::Block {
            return Err(CommandError::new(
                ERROR,
                format!(
                    "not running the command: ckpt could not record the state before it ({msg}); set on_record_failure = \"warn\" to run it anyway"
                ),
            ));
        }
        super::ui::note(&format!(
            "ckpt warning: the command's changes will not be recorded: {msg}"
        ));
    }
    let mut command = std::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .current_dir(std::env::current_dir().unwrap_or_else(|_| ws.root().to_path_buf()));
    let status = run_forwarding(&mut command);
    let (code, failure) = match &status {
        Ok(s) => match s.code() {
            Some(c) => (c, (c != 0).then(|| format!("exit status {c}"))),
            None => {
                use std::os::unix::process::ExitStatusExt;
                let sig = s.signal().unwrap_or(0);
                (128 + sig, Some(format!("killed by signal {sig}")))
            }
        },
        Err(e) => (127, Some(format!("cannot run `{}`: {e}", args.command[0]))),
    };
    let post = serde_json::json!({
        "session": args.session,
        "call": call,
        "status": if failure.is_some() { "failed" } else { "succeeded" },
        "error": failure,
        "result": {"exit_code": code},
    });
    let phase = if failure.is_some() {
        Phase::PostFailure
    } else {
        Phase::Post
    };
    let ev = capture::parse(post.to_string().as_bytes(), phase, Some(Format::Generic))
        .map_err(|e| CommandError::new(ERROR, e.to_string()))?;
    match ckpt::hook::run(&ws, &cfg, &ev) {
        Ok(stats) => {
            for w in &stats.warnings {
                super::ui::note(&format!("ckpt warning: {w}"));
            }
        }
        Err(e) => super::ui::note(&format!(
            "ckpt warning: the command ran but its changes could not be recorded: {}",
            super::error::one_line(&e)
        )),
    }
    if let Err(e) = &status {
        super::ui::note(&format!("error: cannot run `{}`: {e}", args.command[0]));
    }
    Ok(code)
}

/// Runs the command and waits for it, forwarding the signals meant to stop
/// it: ckpt itself does not die of SIGINT, SIGTERM, SIGHUP or SIGQUIT while
/// the command runs, so the command's changes are recorded when it ends. A
/// signal the terminal sent (Ctrl-C, a hang-up) reached the command's
/// process group already and is not sent twice; one another process sent to
/// ckpt (`kill`, a supervisor) is passed on.
///
/// The handlers are in place before the command starts: a signal sent once
/// the command has done anything (a supervisor reacting to its output) finds
/// them, and is neither lost in the registration nor fatal to ckpt before the
/// command's end is recorded. One that arrives before the command exists is
/// passed on as soon as it does.
fn run_forwarding(
    command: &mut std::process::Command,
) -> std::io::Result<std::process::ExitStatus> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    use signal_hook::iterator::SignalsInfo;
    use signal_hook::iterator::exfiltrator::WithOrigin;
    use signal_hook::low_level::siginfo::Cause;
    let mut signals = match SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT]) {
        Ok(s) => s,
        // Without handlers, a plain wait: the default actions stay.
        Err(_) => return command.spawn()?.wait(),
    };
    let handle = signals.handle();
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            handle.close();
            return Err(e);
        }
    };
    let pid = rustix::process::Pid::from_raw(child.id() as i32);
    let forwarder = std::thread::spawn(move || {
        for info in signals.forever() {
            let from_terminal = match info.cause {
                Cause::Kernel => true,
                // Where the platform does not say: Ctrl-C and Ctrl-\ come from
                // the terminal; a SIGTERM or SIGHUP to ckpt alone is passed on.
                Cause::Unknown => matches!(info.signal, SIGINT | SIGQUIT),
                _ => false,
            };
            if !from_terminal
                && let (Some(pid), Some(sig)) =
                    (pid, rustix::process::Signal::from_named_raw(info.signal))
            {
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
    });
    let status = child.wait();
    handle.close();
    let _ = forwarder.join();
    status
}
