//! `trace.jsonl`: observability events (timings, decisions, repairs). Best effort
//! and never needed for recovery: a failure to write a trace event is ignored.

use std::io::Write;
use std::os::fd::BorrowedFd;

use rustix::fs::OFlags;

use crate::ids::Clock;

/// The trace file's name inside `.agent-runtime/`.
pub const TRACE_FILE: &str = "trace.jsonl";
const MAX_TRACE_BYTES: u64 = 16 * 1024 * 1024;

/// The refusal log's name inside `.agent-runtime/` (RELIABILITY.md (d)).
pub const ERRORS_FILE: &str = "errors.jsonl";

/// Appends one refusal to `errors.jsonl` (`{"ts", "code", …fields}`), size-capped
/// like the trace. Callers pass codes, sizes and hashes, never payload text;
/// strings are redacted anyway (ids come from payloads). Never fails.
pub fn error(rt: BorrowedFd<'_>, clock: &Clock, code: &str, fields: serde_json::Value) {
    append(rt, ERRORS_FILE, clock, "code", code, fields);
}

/// Appends one event line (`{"ts", "event", …fields}`); never fails.
pub fn event(rt: BorrowedFd<'_>, clock: &Clock, event: &str, fields: serde_json::Value) {
    append(rt, TRACE_FILE, clock, "event", event, fields);
}

fn append(
    rt: BorrowedFd<'_>,
    file: &str,
    clock: &Clock,
    key: &str,
    value: &str,
    mut fields: serde_json::Value,
) {
    // Callers pass codes, sizes, hashes and ids; an id can still come from a
    // payload, so every string is redacted (T24).
    crate::redact::redact_json(&mut fields);
    let mut obj = serde_json::Map::new();
    obj.insert("ts".into(), clock.now_rfc3339().into());
    obj.insert(key.into(), value.into());
    if let serde_json::Value::Object(m) = fields {
        obj.extend(m);
    }
    let Ok(mut line) = serde_json::to_vec(&obj) else {
        return;
    };
    line.push(b'\n');
    let Ok(fd) = rustix::fs::openat(
        rt,
        file,
        OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        crate::sys::mode(0o600),
    ) else {
        return;
    };
    let _ = crate::fs_util::fix_private_mode(std::os::fd::AsFd::as_fd(&fd));
    if crate::sys::fstat(&fd)
        .map(|st| st.size > MAX_TRACE_BYTES)
        .unwrap_or(true)
    {
        return;
    }
    let mut f = std::fs::File::from(fd);
    let _ = f.write_all(&line);
}
