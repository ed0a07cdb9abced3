//! `ckpt scenario record`: a workspace's recorded story as a scenario that
//! replays it, so an incident becomes a regression test.
//!
//! - The starting files: every path the story touched, as it was before the
//!   story's first record of it (from the blobs, or git for committed files);
//!   a path first created by the story is not there.
//! - Each call becomes a tool step with its call id and session. A call that
//!   changed files is replayed as a shell command writing its recorded after
//!   contents (deleting, renaming, setting modes), so the replay goes through
//!   the real hook path whatever tool made the change; a call that changed
//!   nothing keeps its tool name (an MCP call, a deploy). A failed call stays failed.
//! - User edits become user steps, checkpoints checkpoint steps, rollbacks
//!   `run` steps with the same selector (`--to @name`, `--call`, `--last`,
//!   `--session`, `--subagent`, `--action @name`, `undo`, `redo`).
//! - The end state: each touched path as it is now, and the number of open
//!   conflicts. Edits made after the last record (nothing saw them yet)
//!   become a last user step, so the replay ends where the workspace is.
//!
//! What it cannot replay is said in a comment where it happened (a resolve,
//! a session restore, a compensation, session entries).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use base64::Engine;

use crate::record::{ActionType, Body, CallStatus, PatchOp, Record};
use crate::workspace::{Workspace, WorkspaceError};
use crate::{ContentHash, RelPath};

/// What `record` wrote.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The scenario's TOML text.
    pub text: String,
    /// Steps written.
    pub steps: usize,
    /// Things of the story it could not replay, one line each.
    pub skipped: Vec<String>,
}

/// A path's content: bytes and permission bits, or absent.
type Content = Option<(Vec<u8>, Option<u32>)>;

/// Writes the story recorded after checkpoint `since` (the whole ledger
/// without one) as a scenario named `name`.
pub fn record(ws: &Workspace, since: Option<&str>, name: &str) -> Result<Recorded, WorkspaceError> {
    let read = ws.read_ledger()?;
    if let Some(c) = &read.corruption {
        return Err(WorkspaceError::Damaged(format!(
            "the ledger is damaged at seq {} ({}); run `ckpt repair` first, then record",
            c.seq, c.problem
        )));
    }
    let records = &read.records;
    let start = match since {
        None => 0,
        Some(id) => records
            .iter()
            .find_map(|r| match &r.body {
                Body::Checkpoint(c) if c.checkpoint == id => Some(r.seq),
                _ => None,
            })
            .ok_or_else(|| WorkspaceError::UnknownId(id.to_string()))?,
    };
    let story: Vec<&Record> = records.iter().filter(|r| r.seq > start).collect();
    let mut w = Writer {
        ws,
        start: BTreeMap::new(),
        last: BTreeMap::new(),
        steps: String::new(),
        count: 0,
        skipped: Vec::new(),
        names: HashMap::new(),
        approximate: Vec::new(),
    };
    if let Some(id) = since {
        // The story starts at that checkpoint: rollbacks to it, or to older
        // ones (not in the story), go to the replay's start.
        w.names.insert(id.to_string(), "start".into());
        w.step(
            "checkpoint = \"start\"\n",
            Some(&format!("{id}, where the recorded story starts")),
        );
    }
    w.play(&story)?;
    // What is on disk now, against what the story last left.
    let mut end = String::new();
    let paths: Vec<RelPath> = w.start.keys().cloned().collect();
    for p in &paths {
        let now = current(ws, p);
        let last = w.last.get(p).cloned().unwrap_or_else(|| w.start[p].clone());
        if now != last {
            w.user_step(p, &now, "changed after the last record");
        }
        end.push_str(&expect_line(p, &now));
    }
    let conflicts = crate::conflict::list(records)
        .into_iter()
        .filter(|c| c.resolution == crate::record::Resolution::Pending)
        .count();
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# Recorded by `ckpt scenario record`{} from {} records.",
        since.map(|s| format!(" --since {s}")).unwrap_or_default(),
        story.len()
    );
    let _ = writeln!(text, "name = {}", toml_str(name));
    let _ = writeln!(text, "agent = \"claude\"\n");
    text.push_str("[files]\n");
    for (p, c) in &w.start {
        if let Some((bytes, mode)) = c {
            let _ = writeln!(
                text,
                "{} = {}",
                toml_str(&p.display()),
                file_value(bytes, *mode)
            );
        }
    }
    text.push('\n');
    text.push_str(&w.steps);
    text.push_str("[expect]\n");
    text.push_str(&end);
    let _ = writeln!(text, "conflicts = {conflicts}");
    Ok(Recorded {
        text,
        steps: w.count,
        skipped: w.skipped,
    })
}

struct Writer<'a> {
    ws: &'a Workspace,
    /// Each touched path before the story.
    start: BTreeMap<RelPath, Content>,
    /// Each path as the story last left it (known from records).
    last: BTreeMap<RelPath, Content>,
    steps: String,
    count: usize,
    skipped: Vec<String>,
    /// Checkpoint and action ids → the names later steps use.
    names: HashMap<String, String>,
    /// Rollbacks to a checkpoint before the story, replayed as rollbacks to
    /// its start: what they wrote is not known to the replay.
    approximate: Vec<String>,
}

impl Writer<'_> {
    fn content(
        &self,
        h: Option<ContentHash>,
        mode: Option<&str>,
    ) -> Result<Content, WorkspaceError> {
        let Some(h) = h else { return Ok(None) };
        let bytes = self.ws.blobs().get(&h)?;
        Ok(Some((bytes, mode.and_then(perm))))
    }

    /// Notes a path's state before its first record.
    fn saw(&mut self, p: &RelPath, before: Content) {
        self.start.entry(p.clone()).or_insert(before);
    }

    fn play(&mut self, story: &[&Record]) -> Result<(), WorkspaceError> {
        // Calls, in the order their last record comes.
        let mut last_of: HashMap<&str, u64> = HashMap::new();
        for r in story {
            if let Body::ToolCall(c) = &r.body {
                last_of.insert(&c.call, r.seq);
            }
        }
        let mut patches: HashMap<&str, Vec<&Record>> = HashMap::new();
        for r in story {
            if let Body::FilePatch(p) = &r.body {
                patches.entry(p.call.as_str()).or_default().push(r);
            }
        }
        for r in story {
            match &r.body {
                Body::ToolCall(c) if last_of.get(c.call.as_str()) == Some(&r.seq) => {
                    let mine = patches.remove(c.call.as_str()).unwrap_or_default();
                    self.call(c, r.session.as_deref(), &mine)?;
                }
                Body::FilePatch(p)
                    if p.source == crate::record::PatchSource::Rollback
                        && self.approximate.contains(&p.call) => {}
                Body::FilePatch(p) if p.source == crate::record::PatchSource::Rollback => {
                    // What an action wrote: its `run` step replays it.
                    let before = self.content(p.before_hash, p.before_mode.as_deref())?;
                    self.saw(&p.path, before);
                    let after = self.content(p.after_hash, p.after_mode.as_deref())?;
                    self.last.insert(p.path.clone(), after);
                }
                Body::FilePatch(p) if !last_of.contains_key(p.call.as_str()) => {
                    // A patch of a call whose records are all before `--since`.
                    self.skipped.push(format!(
                        "seq {}: a patch of call {} whose call began before the start",
                        r.seq, p.call
                    ));
                }
                Body::UserEdit(u) => {
                    let before = self.content(u.before_hash, u.before_mode.as_deref())?;
                    self.saw(&u.path, before);
                    let after = self.content(u.after_hash, u.after_mode.as_deref())?;
                    self.user_step(&u.path, &after, "seen by a hook");
                }
                Body::Checkpoint(c) => {
                    let name = format!("cp{}", self.names.len() + 1);
                    self.names.insert(c.checkpoint.clone(), name.clone());
                    self.step(
                        &format!("checkpoint = {}\n", toml_str(&name)),
                        c.label.as_deref(),
                    );
                }
                Body::Action(a) if a.status == crate::record::ActionStatus::Started => {
                    self.action(r, a)?;
                }
                Body::SessionEntry(_) => {
                    self.skipped
                        .push(format!("seq {}: a session entry (not replayed)", r.seq));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn step(&mut self, body: &str, comment: Option<&str>) {
        self.count += 1;
        self.steps.push_str("[[step]]\n");
        if let Some(c) = comment {
            for l in c.lines() {
                let _ = writeln!(self.steps, "# {l}");
            }
        }
        self.steps.push_str(body);
        self.steps.push('\n');
    }

    fn user_step(&mut self, p: &RelPath, after: &Content, why: &str) {
        let path = toml_str(&p.display());
        let body = match after {
            None => format!("user = {path}\ndelete = true\n"),
            Some((bytes, _)) => match std::str::from_utf8(bytes) {
                Ok(t) if !t.contains('\0') => format!("user = {path}\ncontent = {}\n", toml_str(t)),
                _ => format!(
                    "user = {path}\nbase64 = \"{}\"\n",
                    base64::engine::general_purpose::STANDARD.encode(bytes)
                ),
            },
        };
        self.last.insert(p.clone(), after.clone());
        self.step(&body, Some(&format!("the user's edit ({why})")));
    }

    fn call(
        &mut self,
        c: &crate::record::ToolCall,
        session: Option<&str>,
        patches: &[&Record],
    ) -> Result<(), WorkspaceError> {
        let mut script = Vec::new();
        for r in patches {
            let Body::FilePatch(p) = &r.body else {
                continue;
            };
            let before = self.content(p.before_hash, p.before_mode.as_deref())?;
            let from = p.from_path.clone();
            if let Some(f) = &from {
                self.saw(f, before.clone());
                self.saw(&p.path, None);
                self.last.insert(f.clone(), None);
            } else {
                self.saw(&p.path, before);
            }
            let after = self.content(p.after_hash, p.after_mode.as_deref())?;
            let target = shell_quote(&p.path.display());
            match (&p.op, &after) {
                (_, None) => script.push(format!("rm -f {target}")),
                (op, Some((bytes, mode))) => {
                    if let (PatchOp::Rename, Some(f)) = (op, &from) {
                        script.push(format!("rm -f {}", shell_quote(&f.display())));
                    }
                    if let Some(dir) = p.path.display().rsplit_once('/').map(|(d, _)| d) {
                        script.push(format!("mkdir -p {}", shell_quote(dir)));
                    }
                    script.push(format!("printf '{}' > {target}", printf_escape(bytes)));
                    if let Some(m) = mode.filter(|m| *m != 0o644) {
                        script.push(format!("chmod {m:o} {target}"));
                    }
                }
            }
            self.last.insert(p.path.clone(), after);
        }
        let failed = c.status == CallStatus::Failed;
        let mut body = String::new();
        if script.is_empty() {
            let _ = writeln!(body, "tool = {}", toml_str(&c.tool));
        } else {
            body.push_str("tool = \"Bash\"\n");
        }
        let _ = writeln!(body, "call = {}", toml_str(&c.call));
        if let Some(s) = session {
            let _ = writeln!(body, "session = {}", toml_str(s));
        }
        if !script.is_empty() {
            let mut command = script.join(" && ");
            if failed {
                command.push_str("; exit 1");
            }
            let _ = writeln!(body, "input = {{ command = {} }}", toml_str(&command));
        }
        if failed {
            body.push_str("result = \"failed\"\n");
        }
        let comment = format!(
            "{} call {}{}",
            c.tool,
            c.call,
            if script.is_empty() {
                ""
            } else {
                ", replayed as the files it left"
            }
        );
        self.step(&body, Some(&comment));
        Ok(())
    }

    fn action(
        &mut self,
        r: &Record,
        a: &crate::record::ActionRecord,
    ) -> Result<(), WorkspaceError> {
        if a.action_type != ActionType::RollbackFiles {
            self.skipped.push(format!(
                "seq {}: a {:?} action (not replayed)",
                r.seq, a.action_type
            ));
            self.steps.push_str(&format!(
                "# not replayed: seq {} {:?} {}\n\n",
                r.seq, a.action_type, a.action
            ));
            return Ok(());
        }
        let t = &a.target;
        let name = |names: &HashMap<String, String>, id: &str| {
            names
                .get(id)
                .map(|n| format!("@{n}"))
                .unwrap_or_else(|| id.to_string())
        };
        let mut approximate = false;
        let args = if let Some(to) = t["to"].as_str() {
            if !self.names.contains_key(to) && self.names.values().any(|n| n == "start") {
                approximate = true;
                self.approximate.push(a.action.clone());
                self.steps.push_str(&format!(
                    "# was --to {to}, a checkpoint before the recorded story: replayed as a rollback to its start\n"
                ));
                "rollback --to @start".to_string()
            } else {
                format!("rollback --to {}", name(&self.names, to))
            }
        } else if let Some(c) = t["call"].as_str() {
            format!("rollback --call {}", shell_quote(c))
        } else if let Some(s) = t["session"].as_str() {
            format!("rollback --session {}", shell_quote(s))
        } else if let Some(s) = t["subagent"].as_str() {
            format!("rollback --subagent {}", shell_quote(s))
        } else if let Some(n) = t["last"].as_u64() {
            format!("rollback --last {n}")
        } else if let Some(x) = t["action"].as_str() {
            format!("rollback --action {}", name(&self.names, x))
        } else if t.get("undo").is_some() {
            "undo".to_string()
        } else if t.get("redo").is_some() {
            "redo".to_string()
        } else {
            self.skipped.push(format!(
                "seq {}: a rollback with target {t} (not replayed)",
                r.seq
            ));
            return Ok(());
        };
        // What it wrote, for the end state.
        if let Some(files) = a
            .plan
            .as_ref()
            .filter(|_| !approximate)
            .and_then(|p| p["files"].as_array())
        {
            for f in files {
                let (Some(path), Some(result)) = (f["path"].as_str(), f["result"].as_str()) else {
                    continue;
                };
                let Ok(p) = RelPath::from_ledger(path.as_bytes()) else {
                    continue;
                };
                let from: Option<ContentHash> =
                    f["from"]["hash"].as_str().and_then(|h| h.parse().ok());
                let before = self.content(from, f["from"]["mode"].as_str())?;
                self.saw(&p, before);
                if matches!(result, "restored" | "merged" | "deleted" | "recreated") {
                    let to: Option<ContentHash> =
                        f["to"]["hash"].as_str().and_then(|h| h.parse().ok());
                    let after = self.content(to, f["to"]["mode"].as_str())?;
                    self.last.insert(p, after);
                }
            }
        }
        let saved = format!("a{}", self.names.len() + 1);
        self.names.insert(a.action.clone(), saved.clone());
        let body = format!(
            "run = {}\nsave = {{ {saved} = \"action\" }}\n",
            toml_str(&format!("ckpt {args}"))
        );
        self.step(&body, Some(&format!("ckpt's action {}", a.action)));
        Ok(())
    }
}

fn current(ws: &Workspace, p: &RelPath) -> Content {
    use std::os::unix::fs::PermissionsExt;
    let full = ws.root().join(p.as_path());
    let meta = std::fs::symlink_metadata(&full).ok()?;
    if !meta.is_file() {
        return None;
    }
    let bytes = std::fs::read(&full).ok()?;
    Some((bytes, Some(meta.permissions().mode() & 0o777)))
}

fn expect_line(p: &RelPath, c: &Content) -> String {
    let key = format!("files.{}", toml_str(&p.display()));
    match c {
        None => format!("{key} = {{ absent = true }}\n"),
        Some((bytes, mode)) => {
            let mode = mode
                .filter(|m| *m & 0o111 != 0)
                .map(|m| format!(", mode = \"{m:o}\""))
                .unwrap_or_default();
            match std::str::from_utf8(bytes) {
                Ok(t) if t.len() <= 4096 && !t.contains('\0') => {
                    format!("{key} = {{ content = {}{mode} }}\n", toml_str(t))
                }
                _ => format!(
                    "{key} = {{ sha256 = \"{}\"{mode} }}\n",
                    ContentHash::of(bytes).hex()
                ),
            }
        }
    }
}

fn file_value(bytes: &[u8], mode: Option<u32>) -> String {
    let mode = mode
        .filter(|m| *m & 0o111 != 0)
        .map(|m| format!(", mode = \"{m:o}\""))
        .unwrap_or_default();
    match std::str::from_utf8(bytes) {
        Ok(t) if !t.contains('\0') && mode.is_empty() => toml_str(t),
        Ok(t) if !t.contains('\0') => format!("{{ content = {}{mode} }}", toml_str(t)),
        _ => format!(
            "{{ base64 = \"{}\"{mode} }}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        ),
    }
}

/// The permission bits of a git-style mode (`100755` → 0o755).
fn perm(mode: &str) -> Option<u32> {
    u32::from_str_radix(mode, 8).ok().map(|m| m & 0o777)
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `printf` format text that prints exactly `bytes`: printable ASCII as is
/// (`%`, `\` and `'` escaped), everything else as octal escapes.
fn printf_escape(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &b in bytes {
        match b {
            b'%' => out.push_str("%%"),
            b'\\' => out.push_str("\\\\"),
            b'\'' => out.push_str("'\\''"),
            b' '..=b'~' => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{b:03o}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printf_text_survives_the_shell() {
        let bytes = b"a'b%c\\d\n\x00\xff";
        let script = format!("printf '{}'", printf_escape(bytes));
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        assert_eq!(out.stdout, bytes);
    }
}
