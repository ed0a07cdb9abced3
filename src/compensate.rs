//! `compensate` (DESIGN §6): run the counter-action registered for a call with
//! external side effects, at most once.
//!
//! **Where the command comes from.** The call's `started` record (the first
//! `tool_call` record of the call carrying a `compensation`): the hook payload's,
//! the library's, or the `config.toml` template the hook copied in. Nothing is
//! run before the whole ledger passes the chain check, so a hand-edited
//! compensation is refused, never run (RELIABILITY T26). The argv is executed
//! directly (`execve`), never through a shell of ckpt's making: `; rm -rf x` is
//! one literal argument.
//!
//! **At most once** (T27). Under the action lock: the `action` `started`
//! record (type `compensate`, target `{"call"}`, plan `{argv, idempotency_key,
//! output_ref}`) is durable before the command starts, and the end record
//! (`succeeded` on exit 0, else `failed`, outcome `{exit_code, signal?,
//! output_ref}`) follows. So for each call the ledger says:
//! - an action that ended `succeeded`: compensated; never run again;
//! - a `started` with no end: **uncertain** — ckpt cannot know whether the
//!   command ran (a crash before the exec and one after it leave the same
//!   ledger), so it is re-run only with `force`, with the same idempotency key;
//! - only `failed` ends: the command ran and reported failure (or could not be
//!   started); running it again is a retry, with the same key.
//!
//! The command runs in the workspace root with stdin closed, inheriting the
//! environment plus `CKPT_IDEMPOTENCY_KEY` and `CKPT_CALL`; its stdout and
//! stderr go, interleaved, to `artifacts/outputs/<action>.out` (0600, capped
//! at [`OUTPUT_CAP`] bytes, the rest counted and dropped), with secrets
//! redacted (`crate::redact`: it is tool output, not a content store).

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::action::ActionLock;
use crate::fs_util::{self, FsError};
use crate::record::{ActionStatus, ActionType, Body, Record, ToolCall};
use crate::workspace::{Workspace, WorkspaceError};

/// The most output bytes kept per compensation run; the rest is counted only.
pub const OUTPUT_CAP: u64 = 1 << 20;
/// Bytes read past the cap before redacting, so a secret cut by the cap is
/// still recognised and replaced whole.
const OUTPUT_LOOKAHEAD: u64 = 64 * 1024;

/// How to compensate.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompensateOptions {
    /// Decide and say what would run; run and record nothing.
    pub dry_run: bool,
    /// Run even when an earlier compensation of the call is uncertain
    /// (started, never recorded as finished).
    pub force: bool,
}

/// What became of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompensateStatus {
    /// The command ran and exited 0.
    Succeeded,
    /// The command ran and failed (non-zero exit, signal) or could not be started.
    Failed,
    /// Dry run: nothing ran, nothing was recorded.
    DryRun,
    /// Refused: an earlier compensation of the call succeeded.
    AlreadyCompensated,
    /// Refused: an earlier compensation started and was never recorded as
    /// finished; only `force` runs it again.
    Uncertain,
    /// Refused: the call had side effects and no registered compensation.
    NoCompensation,
    /// Refused: the call had no side effects and no compensation.
    NothingToCompensate,
}

impl CompensateStatus {
    /// The word the JSON output uses.
    pub fn as_str(self) -> &'static str {
        match self {
            CompensateStatus::Succeeded => "succeeded",
            CompensateStatus::Failed => "failed",
            CompensateStatus::DryRun => "dry_run",
            CompensateStatus::AlreadyCompensated => "already_compensated",
            CompensateStatus::Uncertain => "uncertain",
            CompensateStatus::NoCompensation => "no_compensation",
            CompensateStatus::NothingToCompensate => "nothing_to_compensate",
        }
    }

    /// Whether ckpt refused to run anything.
    pub fn refused(self) -> bool {
        matches!(
            self,
            CompensateStatus::AlreadyCompensated
                | CompensateStatus::Uncertain
                | CompensateStatus::NoCompensation
                | CompensateStatus::NothingToCompensate
        )
    }
}

/// The result of [`compensate`].
#[derive(Debug, Clone)]
pub struct CompensateReport {
    /// The call.
    pub call: String,
    /// Its tool.
    pub tool: String,
    /// Its recorded side effects.
    pub side_effects: Vec<String>,
    /// What happened.
    pub status: CompensateStatus,
    /// For a refusal or a failure: one line saying why and what to do.
    pub message: Option<String>,
    /// The `compensate` action recorded (none on a dry run or a refusal).
    pub action: Option<String>,
    /// The command (run, or that would run).
    pub argv: Vec<String>,
    /// The key passed as `CKPT_IDEMPOTENCY_KEY`.
    pub idempotency_key: Option<String>,
    /// The command's exit code (`None` when it did not exit normally or did not run).
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// `artifacts/outputs/<action>.out`, relative to `.agent-runtime/`.
    pub output_ref: Option<String>,
    /// Whether output beyond [`OUTPUT_CAP`] was dropped.
    pub output_truncated: bool,
    /// The earlier failed compensation this run retries.
    pub retry_of: Option<String>,
    /// The uncertain compensations `force` ran over (their command may have run).
    pub forced_over: Vec<String>,
    /// For `already_compensated` and `uncertain`: the earlier action concerned.
    pub previous: Option<String>,
}

/// One earlier `compensate` action of the call.
struct Earlier {
    action: String,
    started_ts: String,
    end: Option<(ActionStatus, String)>,
}

/// Compensates `call` (see the module doc). Refusals about the call's state
/// come back as a report with a refusal status; a damaged or cut-back ledger
/// and an unknown id are errors.
pub fn compensate(
    ws: &Workspace,
    call: &str,
    opts: &CompensateOptions,
) -> Result<CompensateReport, WorkspaceError> {
    let _lock = if opts.dry_run {
        None
    } else {
        Some(ActionLock::take(ws)?)
    };
    let records = checked_records(ws)?;
    let mut report = decide(&records, call, opts)?;
    if report.status.refused() || opts.dry_run {
        return Ok(report);
    }
    run(ws, &mut report)?;
    Ok(report)
}

/// Reads the ledger and refuses a damaged one, or one cut back behind the
/// `ledger.head` anchor or the newest checkpoint's anchor.
fn checked_records(ws: &Workspace) -> Result<Vec<Record>, WorkspaceError> {
    let rt = ws.runtime_dir();
    // The head anchor is written after each append, so read before the ledger
    // it may never name more than the ledger holds.
    let head = crate::ledger::head_state(rt.as_fd());
    let read = ws.read_ledger()?;
    ws.refuse_damaged(&read, head, "ckpt runs no compensation", None)?;
    Ok(read.records)
}

/// The default key when the compensation names none: stable per call, so a
/// retry or a forced re-run passes the same one.
fn default_key(call: &str) -> String {
    format!("ckpt-compensate-{call}")
}

fn argv_text(argv: &[String]) -> String {
    serde_json::to_string(argv).unwrap_or_default()
}

fn decide(
    records: &[Record],
    call: &str,
    opts: &CompensateOptions,
) -> Result<CompensateReport, WorkspaceError> {
    let steps: Vec<&ToolCall> = records
        .iter()
        .filter_map(|r| match &r.body {
            Body::ToolCall(t) if t.call == call => Some(t),
            _ => None,
        })
        .collect();
    let Some(first) = steps.first() else {
        return Err(WorkspaceError::UnknownId(call.to_string()));
    };
    let compensation = steps.iter().find_map(|t| t.compensation.clone());
    let mut report = CompensateReport {
        call: call.to_string(),
        tool: first.tool.clone(),
        side_effects: first.side_effects.clone(),
        status: CompensateStatus::DryRun,
        message: None,
        action: None,
        argv: Vec::new(),
        idempotency_key: None,
        exit_code: None,
        signal: None,
        output_ref: None,
        output_truncated: false,
        retry_of: None,
        forced_over: Vec::new(),
        previous: None,
    };
    let refuse = |mut r: CompensateReport, status, msg: String| {
        r.status = status;
        r.message = Some(msg);
        Ok(r)
    };
    let Some(comp) = compensation else {
        if report.side_effects.is_empty() {
            let msg = format!(
                "nothing to compensate: call {call} ({}) recorded no side effects and no compensation",
                report.tool
            );
            return refuse(report, CompensateStatus::NothingToCompensate, msg);
        }
        let hint = if report.side_effects.iter().any(|s| s == "fs") {
            format!("; its file changes can be taken back with `ckpt rollback --call {call}`")
        } else {
            "; undo it by hand".to_string()
        };
        let msg = format!(
            "call {call} ran {} with side effects [{}] and has no registered compensation: it can't be undone automatically{hint}",
            report.tool,
            report.side_effects.join(", ")
        );
        return refuse(report, CompensateStatus::NoCompensation, msg);
    };
    report.argv = comp.argv.clone();
    report.idempotency_key = Some(
        comp.idempotency_key
            .clone()
            .unwrap_or_else(|| default_key(call)),
    );
    if comp.argv.first().is_none_or(|a| a.is_empty()) {
        return Err(WorkspaceError::NotApplicable(format!(
            "the compensation recorded for call {call} names no command (argv {}); nothing was run",
            argv_text(&comp.argv)
        )));
    }

    // Earlier compensate actions of this call, oldest first.
    let mut earlier: Vec<Earlier> = Vec::new();
    for r in records {
        let Body::Action(a) = &r.body else { continue };
        if a.action_type != ActionType::Compensate {
            continue;
        }
        match a.status {
            ActionStatus::Started => {
                if a.target.get("call").and_then(Value::as_str) == Some(call) {
                    earlier.push(Earlier {
                        action: a.action.clone(),
                        started_ts: r.ts.clone(),
                        end: None,
                    });
                }
            }
            end => {
                if let Some(e) = earlier
                    .iter_mut()
                    .find(|e| e.action == a.action && e.end.is_none())
                {
                    e.end = Some((end, r.ts.clone()));
                }
            }
        }
    }
    if let Some(done) = earlier
        .iter()
        .find(|e| matches!(e.end, Some((ActionStatus::Succeeded, _))))
    {
        let at = done.end.as_ref().map(|(_, ts)| ts.as_str()).unwrap_or("");
        report.previous = Some(done.action.clone());
        let msg = format!(
            "call {call} was already compensated by {} at {at}; a compensation is never run twice (see `ckpt show {}`)",
            done.action, done.action
        );
        return refuse(report, CompensateStatus::AlreadyCompensated, msg);
    }
    let uncertain: Vec<&Earlier> = earlier.iter().filter(|e| e.end.is_none()).collect();
    if let Some(last) = uncertain.last() {
        if !opts.force {
            report.previous = Some(last.action.clone());
            let msg = format!(
                "the compensation of call {call} is uncertain: {} started at {} and was never recorded as finished, so ckpt cannot know whether {} ran; check its effect, then run `ckpt compensate {call} --force` to run it again with the same idempotency key",
                last.action,
                last.started_ts,
                argv_text(&report.argv)
            );
            return refuse(report, CompensateStatus::Uncertain, msg);
        }
        report.forced_over = uncertain.iter().map(|e| e.action.clone()).collect();
    }
    report.retry_of = earlier
        .iter()
        .rev()
        .find(|e| matches!(e.end, Some((ActionStatus::Failed, _))))
        .map(|e| e.action.clone());
    Ok(report)
}

/// The program to start: a relative path with a `/` is taken from the
/// workspace root (the command's working directory), a bare name from `PATH`.
fn program(ws: &Workspace, argv0: &str) -> PathBuf {
    let p = PathBuf::from(argv0);
    if p.is_relative() && argv0.contains('/') {
        ws.root().join(p)
    } else {
        p
    }
}

/// Creates `artifacts/outputs/<action>.out` (0600; directories 0700).
fn create_output(
    ws: &Workspace,
    action: &str,
) -> Result<(std::os::fd::OwnedFd, std::fs::File, String), FsError> {
    let rt = ws.runtime_dir();
    let (art, _) = fs_util::open_or_create_private_dir(rt.as_fd(), "artifacts", ws.durable())
        .map_err(|e| FsError::new("open", ".agent-runtime/artifacts", e))?;
    let (dir, _) = fs_util::open_or_create_private_dir(art.as_fd(), "outputs", ws.durable())
        .map_err(|e| FsError::new("open", ".agent-runtime/artifacts/outputs", e))?;
    let name = format!("{action}.out");
    let f = fs_util::create_excl(dir.as_fd(), name.as_ref(), 0o600).map_err(|e| {
        FsError::new(
            "create",
            format!(".agent-runtime/artifacts/outputs/{name}"),
            e,
        )
    })?;
    Ok((dir, f, format!("artifacts/outputs/{name}")))
}

fn failpoint(name: &str, call: &str) -> Result<(), WorkspaceError> {
    crate::failpoint::hit(name).map_err(|e| WorkspaceError::Io(FsError::new("compensate", call, e)))
}

/// Records `started`, runs the command, records the end.
fn run(ws: &Workspace, report: &mut CompensateReport) -> Result<(), WorkspaceError> {
    let call = report.call.clone();
    let key = report.idempotency_key.clone().unwrap_or_default();
    // The output file is made first so the plan can name it; a fresh id if a
    // file of that name is left over (a fixed test clock repeats ids).
    let mut tries = 0;
    let (action, out_dir, mut out, output_ref) = loop {
        let action = ws.clock().new_id("act_");
        match create_output(ws, &action) {
            Ok((d, f, r)) => break (action, d, f, r),
            Err(e) if e.source.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 => {
                tries += 1;
            }
            Err(e) => return Err(e.into()),
        }
    };
    let target = json!({"call": call});
    let mut plan = json!({
        "argv": report.argv,
        "idempotency_key": key,
        "output_ref": output_ref,
    });
    if let Some(r) = &report.retry_of {
        plan["retry_of"] = json!(r);
    }
    if !report.forced_over.is_empty() {
        plan["forced"] = json!(true);
        plan["forced_over"] = json!(report.forced_over);
    }
    failpoint("compensate.before_started", &call)?;
    crate::action::append(
        ws,
        ActionType::Compensate,
        &action,
        ActionStatus::Started,
        target.clone(),
        Some(plan),
        None,
    )?;
    report.action = Some(action.clone());
    report.output_ref = Some(output_ref.clone());
    failpoint("compensate.before_exec", &call)?;

    let (mut outcome, status) = match spawn_and_capture(ws, report, &key, &mut out) {
        Ran::Exited {
            status: exit,
            kept,
            total,
        } => {
            report.exit_code = exit.code();
            report.signal = exit.signal();
            report.output_truncated = total > kept;
            let mut o = json!({
                "exit_code": report.exit_code,
                "output_ref": output_ref,
                "output_bytes": total,
            });
            if let Some(s) = report.signal {
                o["signal"] = json!(s);
            }
            if report.output_truncated {
                o["output_truncated"] = json!(true);
            }
            let ok = exit.success();
            if !ok {
                let how = match (report.exit_code, report.signal) {
                    (Some(c), _) => format!("exited with {c}"),
                    (None, Some(s)) => format!("was killed by signal {s}"),
                    _ => "failed".to_string(),
                };
                report.message = Some(format!(
                    "the compensation of call {call} {how} (action {action}; output in .agent-runtime/{output_ref}); run `ckpt compensate {call}` again to retry with the same idempotency key"
                ));
            }
            let st = if ok {
                ActionStatus::Succeeded
            } else {
                ActionStatus::Failed
            };
            (o, st)
        }
        Ran::NotStarted(e) => {
            let text = format!("cannot start `{}`: {e}", report.argv[0]);
            let _ = writeln!(out, "ckpt: {}", crate::redact::redact_str(&text));
            report.message = Some(format!(
                "the compensation of call {call} did not run: {text} (action {action}, recorded as failed); fix the command, then run `ckpt compensate {call}` again"
            ));
            (
                json!({"exit_code": null, "output_ref": output_ref, "error": text}),
                ActionStatus::Failed,
            )
        }
        Ran::Lost(e) => {
            // Started, but its end could not be observed: leave it uncertain.
            return Err(WorkspaceError::Uncertain(format!(
                "lost track of the compensation of call {call} after starting it ({e}); it stays uncertain (action {action}): check its effect, then `ckpt compensate {call} --force` if it must run again"
            )));
        }
    };
    // Data before pointers: the output is durable before the record naming it.
    ws.durable()
        .content(&out)
        .map_err(|e| FsError::new("sync", format!(".agent-runtime/{output_ref}"), e))?;
    drop(out);
    ws.durable()
        .content_dir(&out_dir)
        .map_err(|e| FsError::new("sync", ".agent-runtime/artifacts/outputs", e))?;
    failpoint("compensate.after_exec", &call)?;
    if let Some(r) = &report.retry_of {
        outcome["retry_of"] = json!(r);
    }
    crate::action::append(
        ws,
        ActionType::Compensate,
        &action,
        status,
        target,
        None,
        Some(outcome),
    )?;
    report.status = if status == ActionStatus::Succeeded {
        CompensateStatus::Succeeded
    } else {
        CompensateStatus::Failed
    };
    Ok(())
}

/// How a run of the command went.
enum Ran {
    /// It ran and ended: its status, the output bytes kept and written.
    Exited {
        status: std::process::ExitStatus,
        kept: u64,
        total: u64,
    },
    /// It never started (not found, not executable, no pipe).
    NotStarted(std::io::Error),
    /// It started, but waiting for it failed.
    Lost(std::io::Error),
}

/// Starts the command (no shell), writes its interleaved stdout and stderr,
/// redacted, into `out` up to [`OUTPUT_CAP`] bytes, and waits for it.
fn spawn_and_capture(
    ws: &Workspace,
    report: &CompensateReport,
    key: &str,
    out: &mut std::fs::File,
) -> Ran {
    let pipe = std::io::pipe().and_then(|(r, w)| {
        let w2 = w.try_clone()?;
        Ok((r, w, w2))
    });
    let (mut reader, writer, writer2) = match pipe {
        Ok(p) => p,
        Err(e) => return Ran::NotStarted(e),
    };
    let mut cmd = Command::new(program(ws, &report.argv[0]));
    cmd.args(&report.argv[1..])
        .current_dir(ws.root())
        .env("CKPT_IDEMPOTENCY_KEY", key)
        .env("CKPT_CALL", &report.call)
        .env_remove("CKPT_FAILPOINTS")
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer2));
    let spawned = cmd.spawn();
    // The pipe's write ends now live only in the child (or nowhere): reading
    // to EOF ends when the child (and anything it left holding them) exits.
    drop(cmd);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Ran::NotStarted(e),
    };
    // The output is held (up to the cap and a little more, so a secret
    // straddling the cap is still recognised), redacted, then written once:
    // `artifacts/outputs/` is not a content store (T24).
    let hold = (OUTPUT_CAP + OUTPUT_LOOKAHEAD) as usize;
    let mut buf = vec![0u8; 64 * 1024];
    let mut held: Vec<u8> = Vec::new();
    let mut total = 0u64;
    let mut capture_err = None;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                capture_err.get_or_insert(e);
                break;
            }
        };
        total += n as u64;
        let take = n.min(hold.saturating_sub(held.len()));
        held.extend_from_slice(&buf[..take]);
    }
    let redacted = crate::redact::redact_bytes(&held);
    let keep = if held.len() as u64 > OUTPUT_CAP {
        crate::redact::cut_bytes(&redacted, OUTPUT_CAP as usize)
    } else {
        redacted.len()
    };
    let mut kept = 0u64;
    match out.write_all(&redacted[..keep]) {
        Ok(()) => kept = (held.len() as u64).min(OUTPUT_CAP),
        Err(e) => {
            capture_err.get_or_insert(e);
        }
    }
    drop(reader);
    let status = match child.wait() {
        Ok(s) => s,
        Err(e) => return Ran::Lost(e),
    };
    if total > kept && capture_err.is_none() {
        let _ = writeln!(
            out,
            "\n[ckpt: output cut at {kept} bytes; {} more bytes dropped]",
            total - kept
        );
    }
    if let Some(e) = capture_err {
        // The command ran: its status matters more than its output.
        let _ = writeln!(out, "\n[ckpt: output capture failed: {e}]");
    }
    Ran::Exited {
        status,
        kept,
        total,
    }
}
