//! ckpt records every change a coding agent makes to a workspace and takes back
//! exactly the agent's work, never the user's.
//!
//! # A short tour
//!
//! - [`workspace`] finds the workspace and opens `.agent-runtime/`; it is the
//!   entry point: [`Workspace::init`], [`Workspace::open`].
//! - [`ledger`] is the append-only, hash-chained JSONL ledger; [`record`] holds
//!   the record kinds it stores.
//! - [`blob_store`] keeps file contents by sha256; [`patch`] writes the unified
//!   diffs; [`checkpoint`] the checkpoint files.
//! - [`call`] records a call made through the library (begin, write files, finish).
//! - [`verify`] checks the chain, the blobs, the artifacts and the checkpoints.
//! - [`durable`] is the one place that syncs: content is durable before a
//!   record names it.
//! - [`paths`] and [`fs_util`] keep every path inside the workspace.
//!
//! The library never prints, never reads environment variables and never picks
//! an exit code: it returns values and errors; the `ckpt` binary renders them.
//!
//! ```
//! use ckpt::{CallOptions, CallStatus, CheckpointOptions, OpenOptions, Workspace};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let (ws, _) = Workspace::init(dir.path(), OpenOptions::default())?;
//! let path = ws.rel_path(b"notes.txt", None)?;
//!
//! let mut call = ws.begin_call(CallOptions { tool: "Write".into(), ..Default::default() })?;
//! call.write_file(&path, b"hello\n")?;
//! let stats = call.finish(CallStatus::Succeeded, None)?;
//! assert_eq!(stats.patches.len(), 1);
//!
//! let cp = ws.checkpoint(CheckpointOptions { label: Some("after hello".into()), ..Default::default() })?;
//! assert_eq!(cp.upto_seq, 3); // started, file_patch, succeeded
//! assert!(ws.verify()?.ok);
//! # Ok(())
//! # }
//! ```

#![deny(clippy::print_stdout, clippy::print_stderr)]
#![forbid(unsafe_code)]

mod action;
mod agent_files;
pub mod agent_settings;
mod binfile;
pub mod blob_store;
pub mod call;
pub mod capture;
pub mod checkpoint;
pub mod claude_transcript;
pub mod codex_transcript;
pub mod compensate;
pub mod config;
pub mod conflict;
pub mod doctor;
pub mod durable;
pub mod effect;
pub mod failpoint;
pub mod fs_util;
#[doc(hidden)]
pub mod fuzz_checks;
pub mod gc;
pub mod git;
pub mod hash;
pub mod hook;
pub mod hook_policy;
pub mod ids;
pub mod ledger;
pub mod ledger_view;
pub mod merge;
pub mod open;
mod par;
pub mod patch;
pub mod paths;
pub mod progress;
pub mod record;
pub mod recover;
mod recover_index;
pub mod redact;
pub mod repair;
mod retention;
pub mod rollback;
pub mod scan;
pub mod scenario;
pub mod session;
pub mod sys;
pub mod trace;
pub mod verify;
pub mod workspace;
pub mod writeback;

pub use call::{CallHandle, CallOptions, CallStats, FileState};
pub use hash::ContentHash;
pub use ids::Clock;
pub use ledger::{Ledger, LedgerError, LedgerRead};
pub use paths::{PathError, RelPath};
pub use record::{Body, CallStatus, Draft, Record};
pub use verify::{Problem, VerifyReport};
pub use workspace::{CheckpointOptions, InitStats, OpenOptions, Workspace, WorkspaceError};

/// Flattens an error and its sources into one line (what every message of
/// ckpt is: what happened and what to do, on one line).
pub fn error_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = c.source();
    }
    s.replace('\n', " ")
}

/// Receives each phase mark: milliseconds since the sink was set, the phase.
pub type TimingSink = fn(f64, &str);

static TIMING_SINK: std::sync::OnceLock<(std::time::Instant, TimingSink)> =
    std::sync::OnceLock::new();

/// Has every later [`timing`] mark passed to `sink` with the milliseconds
/// since this call (the binary prints them when `CKPT_TIMINGS` is set). Once
/// per process; the library itself neither reads the environment for this
/// nor prints.
pub fn set_timing_sink(sink: TimingSink) {
    let _ = TIMING_SINK.set((std::time::Instant::now(), sink));
}

/// Marks a phase of this process (snapshot loaded, walked, synced, …):
/// where a slow hook spends its time, without a profiler. Costs one atomic
/// load when no sink is set.
#[doc(hidden)]
pub fn timing(phase: &str) {
    if let Some((t0, sink)) = TIMING_SINK.get() {
        sink(t0.elapsed().as_secs_f64() * 1e3, phase);
    }
}
