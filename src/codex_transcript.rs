//! The one place Codex says how a shell call ended. Codex 0.171 sends a
//! shell call's `PostToolUse` with `tool_response` = the command's output
//! only, for a command that failed as for one that succeeded; the exit code
//! is in its rollout transcript (`transcript_path`), as an `event_msg` line
//! `{"type": "item_completed", "item": {"type": "CommandExecution", "id":
//! <tool_use_id>, "status": "completed"|"failed", "exit_code": N}}` that
//! Codex queues before it runs the hook (17 of 17 hooks measured saw it).
//!
//! The path comes from the payload, so it is treated as hostile: opened
//! read-only without following a final symlink and without blocking (a FIFO
//! never hangs a hook), read only if it is a regular file, and only its last
//! [`TAIL`] bytes.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// How much of the transcript's end is read.
const TAIL: u64 = 1 << 20;

/// How a Codex shell call ended, from its transcript: its exit code, when
/// the transcript says. Looks a few times over ~50 ms, since the line is
/// written by another task of Codex.
pub fn shell_exit_code(transcript: &Path, call: &str) -> Option<i64> {
    for attempt in 0..5 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(10 * attempt));
        }
        if let Some(code) = find(transcript, call) {
            return Some(code);
        }
    }
    None
}

fn find(transcript: &Path, call: &str) -> Option<i64> {
    let mut f = crate::fs_util::open_payload_file(transcript).ok()?;
    let meta = f.metadata().ok()?;
    let start = meta.len().saturating_sub(TAIL);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut buf = Vec::new();
    f.take(TAIL).read_to_end(&mut buf).ok()?;
    let needle = call.as_bytes();
    for line in buf.split(|b| *b == b'\n').rev() {
        if !contains(line, needle) || !contains(line, b"item_completed") {
            continue;
        }
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        let p = &v["payload"];
        let item = &p["item"];
        if p["type"] == "item_completed"
            && item["type"] == "CommandExecution"
            && item["id"].as_str() == Some(call)
        {
            return item["exit_code"].as_i64();
        }
    }
    None
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && memchr::memmem::find(hay, needle).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_of_the_call_is_found_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("rollout.jsonl");
        let line = |id: &str, code: i64| {
            format!(
                r#"{{"type":"event_msg","payload":{{"type":"item_completed","item":{{"type":"CommandExecution","id":"{id}","status":"failed","exit_code":{code}}}}}}}"#
            )
        };
        let text = format!(
            "{}\n{}\n{{\"type\":\"response_item\",\"payload\":{{\"call_id\":\"c2\"}}}}\n",
            line("c1", 2),
            line("c3", 0)
        );
        std::fs::write(&t, text).unwrap();
        assert_eq!(find(&t, "c1"), Some(2));
        assert_eq!(find(&t, "c3"), Some(0));
        assert_eq!(find(&t, "c2"), None, "not an item_completed line");
        assert_eq!(find(&dir.path().join("missing"), "c1"), None);
        assert_eq!(find(dir.path(), "c1"), None, "a directory is not read");
    }
}
