//! Feeding Claude Code hook payloads to the real `ckpt` binary, shared by the
//! hook and rollback benches. Include it with
//! `#[path = "common/hookrun.rs"] mod hookrun;`.

#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The `ckpt` binary the benches run: `CKPT_BENCH_BIN` when set (to compare
/// builds), else the one cargo built.
pub fn ckpt_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("CKPT_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_ckpt").to_string())
    })
}

/// Runs `ckpt hook PHASE` in workspace `ws` with `payload` on stdin and
/// returns the wall time of the whole process; panics if it fails.
pub fn hook(bin: &str, ws: &Path, phase: &str, payload: &str) -> Duration {
    let t = Instant::now();
    let mut child = Command::new(bin)
        .args(["hook", phase])
        .env("CKPT_WORKSPACE", ws)
        .env_remove("CKPT_TEST_FSYNC")
        .env_remove("CKPT_FAILPOINTS")
        .env_remove("CKPT_TIMESTAMP")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ckpt");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let d = t.elapsed();
    assert!(
        out.status.success(),
        "ckpt hook {phase} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

/// A `Bash` payload running `command`.
pub fn bash(ws: &Path, event: &str, id: &str, command: &str) -> String {
    serde_json::json!({
        "session_id": "bench", "cwd": ws, "hook_event_name": event, "tool_name": "Bash",
        "tool_input": {"command": command}, "tool_use_id": id,
    })
    .to_string()
}

/// An `Edit` payload on `file` (relative to `ws`).
pub fn edit(ws: &Path, event: &str, id: &str, file: &Path) -> String {
    serde_json::json!({
        "session_id": "bench", "cwd": ws, "hook_event_name": event, "tool_name": "Edit",
        "tool_input": {"file_path": ws.join(file), "old_string": "x", "new_string": "y"},
        "tool_use_id": id,
    })
    .to_string()
}
