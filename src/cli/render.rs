//! Human one-line descriptions of ledger records, shared by `log` and `show`.

use ckpt::Record;
use ckpt::record::{Body, PatchOp};

/// Returns the short kind label and a one-line description of a record.
pub fn describe(r: &Record) -> (&'static str, String) {
    match &r.body {
        Body::ToolCall(c) => {
            let mut s = format!(
                "{} {} {}",
                c.call,
                c.tool,
                format!("{:?}", c.status).to_lowercase()
            );
            if !c.paths.is_empty() {
                let shown: Vec<String> = c.paths.iter().take(3).map(|p| p.to_string()).collect();
                s.push_str(&format!(
                    " [{}{}]",
                    shown.join(", "),
                    if c.paths.len() > 3 { ", …" } else { "" }
                ));
            }
            if let Some(sa) = &c.subagent {
                s.push_str(&format!(
                    " (subagent {}{})",
                    sa.id,
                    sa.kind
                        .as_deref()
                        .map(|k| format!(", {k}"))
                        .unwrap_or_default()
                ));
            }
            if let Some(e) = &c.error {
                s.push_str(&format!(": {}", first_line(e)));
            }
            if !c.unrecorded.is_empty() {
                let shown: Vec<String> = c
                    .unrecorded
                    .iter()
                    .take(3)
                    .map(|u| match u.size {
                        Some(n) => format!("{} ({}, {n} bytes)", u.path, u.reason),
                        None => format!("{} ({})", u.path, u.reason),
                    })
                    .collect();
                s.push_str(&format!(
                    "; not recorded, cannot be undone: {}{}",
                    shown.join(", "),
                    if c.unrecorded.len() > 3 { ", …" } else { "" }
                ));
            }
            ("call", s)
        }
        Body::FilePatch(p) => {
            let op = match p.op {
                PatchOp::Create => "create",
                PatchOp::Modify => "modify",
                PatchOp::Delete => "delete",
                PatchOp::Rename => "rename",
                PatchOp::Mode => "mode",
            };
            let mut s = format!("{} {op} {}", p.patch, p.path);
            if let Some(f) = &p.from_path {
                s.push_str(&format!(" (from {f})"));
            }
            s.push_str(&format!(" by {}", p.call));
            if p.binary {
                s.push_str(" (binary)");
            }
            ("patch", s)
        }
        Body::Checkpoint(c) => {
            let mut s = c.checkpoint.clone();
            if let Some(l) = &c.label {
                s.push_str(&format!(" \"{}\"", first_line(l)));
            }
            s.push_str(&format!(" (covers seq ≤ {})", c.upto_seq));
            if let Some(g) = &c.git
                && let Some(h) = &g.head
            {
                s.push_str(&format!(
                    " git {}{}",
                    &h[..h.len().min(10)],
                    if g.dirty { " dirty" } else { "" }
                ));
            }
            ("checkpoint", s)
        }
        Body::SessionEntry(e) => (
            "session",
            format!(
                "{} {:?} parent {}",
                e.entry,
                e.entry_type,
                e.parent.as_deref().unwrap_or("-")
            )
            .to_lowercase(),
        ),
        Body::UserEdit(u) => ("user_edit", format!("{}", u.path)),
        Body::Action(a) => {
            let ty = match a.action_type {
                ckpt::record::ActionType::RollbackFiles => "rollback",
                ckpt::record::ActionType::RestoreSession => "restore-session",
                ckpt::record::ActionType::Compensate => "compensate",
                ckpt::record::ActionType::Gc => "gc",
            };
            let mut s = format!(
                "{} {ty} {}",
                a.action,
                format!("{:?}", a.status).to_lowercase()
            );
            if let Some(t) = a.target.as_object().filter(|t| !t.is_empty()) {
                let what: Vec<String> = t
                    .iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| {
                        format!(
                            "{k} {}",
                            v.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| v.to_string())
                        )
                    })
                    .collect();
                s.push_str(&format!(" ({})", what.join(", ")));
            }
            let files = a
                .plan
                .as_ref()
                .or(a.outcome.as_ref())
                .and_then(|p| p.get("files"))
                .and_then(|f| f.as_array())
                .map(|f| f.len());
            if let Some(n) = files {
                s.push_str(&format!(", {n} file{}", if n == 1 { "" } else { "s" }));
            }
            ("action", s)
        }
        Body::Conflict(c) => (
            "conflict",
            format!(
                "{} {} {}{}",
                c.conflict,
                c.path,
                ckpt::conflict::resolution_str(c.resolution),
                c.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ),
        ),
        Body::Repair(rp) if rp.lost.len() == 1 && rp.rechained_from.is_none() => (
            "repair",
            format!(
                "stands in for seq {}, lost to damage (the old bytes: {})",
                rp.lost[0], rp.backup
            ),
        ),
        Body::Repair(rp)
            if rp.rechained_from.is_some() || rp.why.is_some() || !rp.blobs.is_empty() =>
        {
            (
                "repair",
                format!(
                    "ckpt repair: {} record(s) lost{}, {} bytes set aside{}{}{}{}",
                    rp.lost.len(),
                    if rp.lost.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " (seq {})",
                            rp.lost
                                .iter()
                                .map(u64::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    },
                    rp.dropped_bytes,
                    rp.rechained_from
                        .map(|s| format!(", re-chained from seq {s}"))
                        .unwrap_or_default(),
                    if rp.checkpoints.is_empty() {
                        String::new()
                    } else {
                        format!(", {} checkpoint(s) re-anchored", rp.checkpoints.len())
                    },
                    if rp.blobs.is_empty() {
                        String::new()
                    } else {
                        format!(", {} damaged blob(s) moved aside", rp.blobs.len())
                    },
                    if rp.backup.is_empty() {
                        String::new()
                    } else {
                        format!(" (old ledger: {})", rp.backup)
                    }
                ),
            )
        }
        Body::Repair(rp) => (
            "repair",
            format!(
                "cut {} torn bytes off the ledger (backup {})",
                rp.dropped_bytes, rp.backup
            ),
        ),
        Body::Unknown { kind } => ("unknown", format!("record of kind `{kind}` (skipped)")),
    }
}

pub fn first_line(s: &str) -> String {
    let l = s.lines().next().unwrap_or("");
    if l.chars().count() > 80 {
        // Never half a redaction marker.
        format!("{}…", ckpt::redact::cut_chars(l, 79).0)
    } else {
        l.to_string()
    }
}

/// `2026-11-29T08:23:12.123Z` → `2026-11-29 08:23:12`.
pub fn short_time(ts: &str) -> String {
    ts.get(..19)
        .map(|s| s.replace('T', " "))
        .unwrap_or_else(|| ts.to_string())
}
