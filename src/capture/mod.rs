//! Hook payloads: one raw stdin payload from any supported agent becomes one [`HookEvent`].
//!
//! This module owns the *reading* of what `ckpt hook pre|post|post-failure|prompt|session-start`
//! gets on stdin: the size cap, UTF-8 and JSON checks, which agent sent it, whether its event
//! matches the subcommand, and the normalised fields (session, call, tool, declared targets, what
//! the file should look like afterwards). It is pure: it touches no file, no ledger and no
//! environment. Paths stay exactly as the agent sent them (absolute or relative, possibly with a
//! NUL or `..`); the `paths` module resolves and checks them later.
//!
//! # Formats and how they are detected
//!
//! With `--format` the caller names the format and no detection happens. Without it,
//! [`detect`] looks at the top-level keys, in this order:
//!
//! 1. `hook_event_name` is `BeforeTool`, `AfterTool` or `BeforeAgent`, or it is `SessionStart`
//!    and a `timestamp` is present: [`Format::Gemini`].
//! 2. `hook_event_name` is one of Cursor's lower-camel-case events (`afterFileEdit`,
//!    `beforeShellExecution`, `afterShellExecution`, …), or `workspace_roots` or
//!    `conversation_id` is present: [`Format::Cursor`].
//! 3. `turn_id` is present, or `model` is present and the event is `PreToolUse`, `PostToolUse` or
//!    `PostToolUseFailure`: [`Format::Codex`]. (Codex's older PreToolUse schema has `model` but no
//!    `turn_id`; in the shapes HOOKS.md records, Claude Code sends `model` only on
//!    `SessionStart`.)
//! 4. There is no `hook_event_name` and no `tool_name`, and one of `call`, `tool` or `status` is
//!    present: [`Format::Generic`].
//! 5. Anything else: [`Format::Claude`] (Claude Code's own payloads may lack `hook_event_name`).
//!
//! # Events and subcommands
//!
//! Each agent event belongs to one subcommand ([`Phase`]). An event sent to another subcommand
//! is [`HookInputError::WrongEvent`] (for example `PostToolUse` fed to `ckpt hook pre`); an event
//! ckpt does not handle (`Stop`, `Notification`, …) is [`HookInputError::UnknownEvent`]. "After"
//! events that report their own outcome (Gemini `AfterTool`, Cursor's `after*` events, generic
//! after-payloads) are accepted by both `post` and `post-failure`, and [`HookEvent::outcome`]
//! comes from the payload. A Claude or Codex payload without `hook_event_name` is taken to be
//! the subcommand's event.
//!
//! # Tolerance
//!
//! Unknown fields are ignored at every level: these payloads grow with every agent release. A
//! field ckpt reads must have the documented type (`null` counts as absent); a file tool's path
//! is required. Everything else that is wrong (not UTF-8, not JSON, too deep, not an object,
//! no `tool_name`, `tool_input` not an object, …) is a [`HookInputError`]; parsing never panics.
//!
//! # Limitations
//!
//! [`Expected`] predicts what a tool leaves behind from its input alone. It follows each agent's
//! documented rules (exact match counts, Codex's fuzzy line matching), not every version's
//! corner cases; a prediction of `None` means "cannot tell", never "unchanged".

use std::fmt;
use std::io::{Read, Write};
use std::str::FromStr;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

mod apply_patch;
mod claude;
mod codex;
mod cursor;
mod expected;
mod gemini;
mod generic;
#[cfg(test)]
mod tests;

pub use apply_patch::PatchChunk;
pub use expected::{apply_expected, reverse_expected};

/// The most bytes a hook reads from stdin (16 MiB); a larger payload is refused unread.
pub const MAX_STDIN: usize = 16 * 1024 * 1024;

/// The agent whose hook payload this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Claude Code (`PreToolUse`, `PostToolUse`, `PostToolUseFailure`, …); the default.
    Claude,
    /// OpenAI Codex CLI (Claude-like events plus `model` / `turn_id`, and `apply_patch`).
    Codex,
    /// Gemini CLI (`BeforeTool`, `AfterTool`, …; no call ids).
    Gemini,
    /// Cursor (`afterFileEdit`, shell pairs, …; no call ids).
    Cursor,
    /// ckpt's own format for any tool runner (`session`, `call`, `tool`, `status`, …).
    Generic,
}

impl Format {
    /// Returns the name used on the command line and in the ledger (`claude`, `codex`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Claude => "claude",
            Format::Codex => "codex",
            Format::Gemini => "gemini",
            Format::Cursor => "cursor",
            Format::Generic => "generic",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Format, UnknownName> {
        match s {
            "claude" => Ok(Format::Claude),
            "codex" => Ok(Format::Codex),
            "gemini" => Ok(Format::Gemini),
            "cursor" => Ok(Format::Cursor),
            "generic" => Ok(Format::Generic),
            _ => Err(UnknownName {
                what: "hook format",
                name: short(s),
                expected: "claude, codex, gemini, cursor or generic",
            }),
        }
    }
}

/// The `ckpt hook` subcommand that received the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// `ckpt hook pre`: before a tool runs.
    Pre,
    /// `ckpt hook post`: after a tool ran.
    Post,
    /// `ckpt hook post-failure`: after a tool failed.
    PostFailure,
    /// `ckpt hook prompt`: the user submitted a prompt.
    Prompt,
    /// `ckpt hook session-start`: a session began.
    SessionStart,
    /// `ckpt hook turn-end`: the agent ended its turn or the session (Claude
    /// Code and Codex `Stop`, `SessionEnd`; Gemini CLI `AfterAgent`,
    /// `SessionEnd`; Cursor `stop`): calls still open then are closed from
    /// what is on disk.
    TurnEnd,
}

impl Phase {
    /// Returns the subcommand's name (`pre`, `post`, `post-failure`, `prompt`, `session-start`,
    /// `turn-end`).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pre => "pre",
            Phase::Post => "post",
            Phase::PostFailure => "post-failure",
            Phase::Prompt => "prompt",
            Phase::SessionStart => "session-start",
            Phase::TurnEnd => "turn-end",
        }
    }

    /// Returns true for the three phases that belong to a tool call.
    pub fn is_tool(self) -> bool {
        matches!(self, Phase::Pre | Phase::Post | Phase::PostFailure)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Phase {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Phase, UnknownName> {
        match s {
            "pre" => Ok(Phase::Pre),
            "post" => Ok(Phase::Post),
            "post-failure" => Ok(Phase::PostFailure),
            "prompt" => Ok(Phase::Prompt),
            "session-start" => Ok(Phase::SessionStart),
            "turn-end" => Ok(Phase::TurnEnd),
            _ => Err(UnknownName {
                what: "hook phase",
                name: short(s),
                expected: "pre, post, post-failure, prompt, session-start or turn-end",
            }),
        }
    }
}

/// A name that is not a known [`Format`] or [`Phase`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{name}`; use one of {expected}")]
pub struct UnknownName {
    what: &'static str,
    name: String,
    expected: &'static str,
}

/// How the changes of a tool call are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// The call names its files: capture exactly [`HookEvent::targets`].
    Declared,
    /// The call names no file (shell, MCP, unknown tools): compare the workspace before and after.
    Scan,
    /// Nothing to capture: the tool only reads (`Read`, `Grep`, `read_file`, …), or the event is
    /// a prompt or a session start.
    Skip,
}

/// What a call does to one of its declared paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetRole {
    /// The file may be created or changed (`Write`, `Edit`, `Add File`, generic `paths`, …).
    Write,
    /// The file is removed (`*** Delete File:`).
    Delete,
    /// The file is renamed away from this path (`*** Update File:` with `*** Move to:`).
    MoveFrom,
    /// The file is renamed to this path; its before-content is the [`TargetRole::MoveFrom`] file's.
    MoveTo,
}

/// One path a call declares, as the agent wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The raw path (absolute, or relative to [`HookEvent::cwd`] or the workspace root).
    pub path: String,
    /// What the call does to it.
    pub role: TargetRole,
    /// What the file should hold after the call, when the input says so.
    pub expected: Option<Expected>,
}

/// What a file should hold after a call, derived from the tool input alone.
///
/// [`apply_expected`] turns it into text given the before-content; crash recovery compares that
/// with the disk to tell whether an unfinished call was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// The whole new content (`Write`, Gemini `write_file`, Codex `*** Add File:`).
    Content(String),
    /// String replacements applied one after another (`Edit`, `MultiEdit`, Gemini `replace`,
    /// Cursor `afterFileEdit` edits).
    Edits(Vec<Replacement>),
    /// Codex `apply_patch` update chunks, applied with Codex's line matching.
    Patch(Vec<PatchChunk>),
}

/// One string replacement of an edit tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    /// The text to find (`old_string`).
    pub old: String,
    /// The text to put in its place (`new_string`).
    pub new: String,
    /// How many times `old` must occur.
    pub count: Occurrences,
}

/// How many times an edit's `old` text must occur for the edit to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occurrences {
    /// Exactly this many times, and every occurrence is replaced (`replace_all: false` is
    /// `Exactly(1)`; Gemini's `expected_replacements` gives the number).
    Exactly(u32),
    /// At least once, and every occurrence is replaced (`replace_all: true`).
    All,
}

/// Claude Code's `tool_response.originalFile` on a post event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginalFile {
    /// `null`: the file did not exist before the call.
    Absent,
    /// The full text before the call.
    Text(String),
}

/// How a finished call ended, as its after-event reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The tool reported success (or the event only fires on success).
    Succeeded,
    /// The tool reported an error; [`HookEvent::error`] has the text when there is one.
    Failed,
}

/// A counter-action a generic payload registers for an effect a patch cannot undo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compensation {
    /// The command to run, as argv (run directly, never through a shell); never empty.
    pub argv: Vec<String>,
    /// Passed to the command as `CKPT_IDEMPOTENCY_KEY`.
    pub idempotency_key: Option<String>,
}

/// One hook payload, normalised across agents.
#[derive(Debug, Clone, PartialEq)]
pub struct HookEvent {
    /// The agent format it was read as.
    pub format: Format,
    /// The subcommand that received it.
    pub phase: Phase,
    /// The agent's session (`session_id`, Cursor `conversation_id`, generic `session`).
    pub session: Option<String>,
    /// The call id pre and post pair by (`tool_use_id`, generic `call`); `None` for agents
    /// without one (Gemini, most Cursor events), where the caller pairs or synthesises.
    pub call: Option<String>,
    /// The agent turn (Codex `turn_id`, Cursor `generation_id`), when given.
    pub turn: Option<String>,
    /// The subagent making the call (Claude Code's `agent_id`, `agent_type`).
    pub subagent: Option<crate::record::Subagent>,
    /// The tool name; Cursor shell events are `shell`, Cursor file edits without a `tool_name`
    /// are `edit`; `None` for prompts, session starts and generic after-payloads.
    pub tool: Option<String>,
    /// The directory relative paths resolve against (`cwd`), when given.
    pub cwd: Option<String>,
    /// Cursor's `workspace_roots` (relative paths resolve against the first when there is no cwd).
    pub workspace_roots: Vec<String>,
    /// The agent's transcript file; never a target.
    pub transcript_path: Option<String>,
    /// How the call's changes are found.
    pub capture: Capture,
    /// The paths the call declares, in the order the input names them.
    pub targets: Vec<Target>,
    /// The tool input (`tool_input`, generic `input`; for Cursor events a synthesised object).
    pub input: Option<Value>,
    /// `sha256:<hex>` of the input's canonical JSON (compact, keys sorted), when there is an input.
    pub input_hash: Option<String>,
    /// Claude Code's `tool_response.originalFile` (post only), when present.
    pub original_file: Option<OriginalFile>,
    /// The tool's response (`tool_response`, Cursor `output` / `result_json`, generic `result`).
    pub response: Option<Value>,
    /// How the call ended; set on post and post-failure events only.
    pub outcome: Option<Outcome>,
    /// The error text of a failed call, when the payload has one.
    pub error: Option<String>,
    /// The user's prompt (prompt events).
    pub prompt: Option<String>,
    /// Why the session started (`startup`, `resume`, `clear`, …; session-start events).
    pub source: Option<String>,
    /// Generic `idempotency`, as given (`idempotent`, `conditional`, `non_idempotent`).
    pub idempotency: Option<String>,
    /// Generic `side_effects`, as given (`fs`, `network`, …).
    pub side_effects: Vec<String>,
    /// Generic `compensation`.
    pub compensation: Option<Compensation>,
    /// The agent process the call belongs to (set by the caller, not read
    /// from the payload): a call whose agent is gone can be closed from what
    /// is on disk (see [`crate::procs`]).
    pub owner: Option<crate::sys::procs::ProcId>,
    /// Set by ckpt (never read from a payload) on the after-event it makes
    /// for a call cut short whose effects reach outside the workspace: its
    /// end says their outcome is unknown.
    pub outcome_unknown: bool,
}

impl HookEvent {
    /// Returns an event with every optional field empty.
    pub fn empty(format: Format, phase: Phase) -> HookEvent {
        HookEvent {
            format,
            phase,
            session: None,
            call: None,
            turn: None,
            tool: None,
            cwd: None,
            workspace_roots: Vec::new(),
            transcript_path: None,
            capture: Capture::Skip,
            targets: Vec::new(),
            input: None,
            input_hash: None,
            original_file: None,
            subagent: None,
            response: None,
            outcome: None,
            error: None,
            prompt: None,
            source: None,
            idempotency: None,
            side_effects: Vec::new(),
            compensation: None,
            owner: None,
            outcome_unknown: false,
        }
    }

    /// Stores the input and its hash.
    fn set_input(&mut self, input: Value) {
        self.input_hash = Some(input_hash(&input));
        self.input = Some(input);
    }
}

/// Why a hook payload was refused; the CLI exits 1 and records nothing.
#[derive(Debug, thiserror::Error)]
pub enum HookInputError {
    /// Nothing (or only whitespace) arrived on stdin.
    #[error("hook input is empty; the agent must send one JSON object on stdin")]
    Empty,
    /// More than the cap arrived; the rest was never read.
    #[error(
        "hook input is larger than {cap} bytes; ckpt did not read it and records nothing for this call"
    )]
    TooLarge {
        /// The cap in bytes.
        cap: usize,
    },
    /// Reading stdin failed.
    #[error("cannot read the hook input from stdin; check how the agent runs `ckpt hook`")]
    Read(#[source] std::io::Error),
    /// The bytes are not UTF-8.
    #[error(
        "hook input is not UTF-8 (bad byte at offset {offset}); the agent must send UTF-8 JSON"
    )]
    NotUtf8 {
        /// Offset of the first invalid byte.
        offset: usize,
    },
    /// The text is not one JSON document (syntax, truncation, nesting deeper than 128).
    #[error("hook input is not JSON ({0}); the agent must send one JSON object on stdin")]
    NotJson(String),
    /// Valid JSON, but not a payload ckpt can read.
    #[error(
        "hook input is not a payload ckpt can read: {0}; check the agent and the hook's `--format`"
    )]
    WrongShape(String),
    /// The payload's event belongs to another subcommand.
    #[error(
        "hook event `{event}` was sent to `ckpt hook {phase}`; register it as `ckpt hook {expected}` in the agent's hook settings"
    )]
    WrongEvent {
        /// The event name as sent (shortened).
        event: String,
        /// The subcommand that received it.
        phase: Phase,
        /// The subcommand it belongs to.
        expected: Phase,
    },
    /// The payload's event is not one ckpt handles.
    #[error(
        "hook event `{event}` is not one ckpt handles for {format}; hook only tool, prompt, session-start and turn-end events to `ckpt hook`"
    )]
    UnknownEvent {
        /// The event name as sent (shortened).
        event: String,
        /// The format it was read as.
        format: Format,
    },
}

impl HookInputError {
    /// Returns the code logged for this error: `hook_input_too_large` or `hook_input_invalid`.
    pub fn code(&self) -> &'static str {
        match self {
            HookInputError::TooLarge { .. } => "hook_input_too_large",
            _ => "hook_input_invalid",
        }
    }
}

/// Reads at most `cap` bytes from `r`; more than `cap` is [`HookInputError::TooLarge`].
///
/// Reads through `take(cap + 1)`, so a huge or endless input is never read past the cap.
pub fn read_capped(r: &mut dyn Read, cap: usize) -> Result<Vec<u8>, HookInputError> {
    let mut buf = Vec::new();
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    r.take(limit)
        .read_to_end(&mut buf)
        .map_err(HookInputError::Read)?;
    if buf.len() > cap {
        return Err(HookInputError::TooLarge { cap });
    }
    Ok(buf)
}

/// Parses one raw hook payload received by the `phase` subcommand.
///
/// `format` is the `--format` the user gave; `None` detects it (see the module docs).
pub fn parse(
    bytes: &[u8],
    phase: Phase,
    format: Option<Format>,
) -> Result<HookEvent, HookInputError> {
    if bytes.len() > MAX_STDIN {
        return Err(HookInputError::TooLarge { cap: MAX_STDIN });
    }
    if bytes
        .iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        return Err(HookInputError::Empty);
    }
    let text = std::str::from_utf8(bytes).map_err(|e| HookInputError::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // serde_json stops at 128 levels of nesting, so deep input is an error, not a stack overflow.
    let value: Value =
        serde_json::from_str(text).map_err(|e| HookInputError::NotJson(e.to_string()))?;
    let Value::Object(map) = value else {
        return Err(shape(format!(
            "expected a JSON object, not {}",
            kind(&value)
        )));
    };
    let format = match format {
        Some(f) => f,
        None => detect(&map)?,
    };
    let ev = match format {
        Format::Claude | Format::Codex => claude::parse(map, phase, format),
        Format::Gemini => gemini::parse(map, phase),
        Format::Cursor => cursor::parse(map, phase),
        Format::Generic => generic::parse(map, phase),
    }?;
    // Ids end up in records, file names and one-line messages: a newline in
    // one would split an error line in two (issue 21 item 11).
    for (what, id) in [
        ("the call id", &ev.call),
        ("the session id", &ev.session),
        ("the turn id", &ev.turn),
    ] {
        if let Some(id) = id
            && id.chars().any(char::is_control)
        {
            return Err(shape(format!(
                "{what} `{}` holds a control character",
                short(id)
            )));
        }
    }
    Ok(ev)
}

/// Returns the format of a payload's top-level object, by the rules in the module docs.
pub fn detect(map: &Map<String, Value>) -> Result<Format, HookInputError> {
    let event = Fields::top(map).str("hook_event_name")?;
    if let Some(event) = event {
        if gemini::is_gemini(map, event) {
            return Ok(Format::Gemini);
        }
        if cursor::is_cursor(map, event) {
            return Ok(Format::Cursor);
        }
        if codex::is_codex(map, event) {
            return Ok(Format::Codex);
        }
        return Ok(Format::Claude);
    }
    if cursor::is_cursor(map, "") {
        return Ok(Format::Cursor);
    }
    if generic::is_generic(map) {
        return Ok(Format::Generic);
    }
    Ok(Format::Claude)
}

/// Returns `sha256:<hex>` of the canonical JSON of `input` (compact, object keys sorted).
///
/// Sorting is done here rather than left to `serde_json`'s map type, so the hash does not change
/// if a dependency turns on `serde_json/preserve_order`.
pub fn input_hash(input: &Value) -> String {
    // serde_json writes many small pieces (runs between escapes); buffering them is several
    // times faster than feeding each one to the hasher.
    let mut out = std::io::BufWriter::with_capacity(16 * 1024, HashWriter(Sha256::new()));
    canonical_json(input, &mut out);
    // HashWriter never fails, so the flush writes everything that is buffered.
    let _ = out.flush();
    let (HashWriter(hasher), _) = out.into_parts();
    let digest = hasher.finalize();
    let mut s = String::with_capacity(7 + 64);
    s.push_str("sha256:");
    for b in digest.iter() {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Feeds written bytes straight into the hash, so a large input is never copied whole.
struct HashWriter(Sha256);

impl Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn canonical_json(v: &Value, out: &mut impl Write) {
    // Writes into the hasher cannot fail; an error would only leave bytes out of the hash.
    let _ = match v {
        Value::Array(items) => {
            let _ = out.write_all(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    let _ = out.write_all(b",");
                }
                canonical_json(item, out);
            }
            out.write_all(b"]")
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let _ = out.write_all(b"{");
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    let _ = out.write_all(b",");
                }
                let _ = serde_json::to_writer(&mut *out, key);
                let _ = out.write_all(b":");
                canonical_json(item, out);
            }
            out.write_all(b"}")
        }
        scalar => serde_json::to_writer(&mut *out, scalar).map_err(std::io::Error::other),
    };
}

/// Typed, read-only access to the fields of one JSON object, with error messages that name the
/// field's path (`tool_input.file_path`).
pub(crate) struct Fields<'a> {
    map: &'a Map<String, Value>,
    at: String,
}

impl<'a> Fields<'a> {
    /// Fields of the payload's top-level object.
    pub(crate) fn top(map: &'a Map<String, Value>) -> Fields<'a> {
        Fields {
            map,
            at: String::new(),
        }
    }

    /// Fields of a nested object found at `at`.
    pub(crate) fn nested(map: &'a Map<String, Value>, at: impl Into<String>) -> Fields<'a> {
        Fields { map, at: at.into() }
    }

    /// The value at `key`, with `null` counted as absent.
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Returns true if `key` is present (even as `null`).
    pub(crate) fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    pub(crate) fn path(&self, key: &str) -> String {
        if self.at.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.at)
        }
    }

    fn wrong(&self, key: &str, expected: &str, got: &Value) -> HookInputError {
        shape(format!(
            "`{}` must be {expected}, not {}",
            self.path(key),
            kind(got)
        ))
    }

    pub(crate) fn missing(&self, key: &str) -> HookInputError {
        shape(format!("missing `{}`", self.path(key)))
    }

    pub(crate) fn str(&self, key: &str) -> Result<Option<&'a str>, HookInputError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(key, "a string", v)),
        }
    }

    pub(crate) fn string(&self, key: &str) -> Result<Option<String>, HookInputError> {
        Ok(self.str(key)?.map(str::to_string))
    }

    pub(crate) fn req_str(&self, key: &str) -> Result<&'a str, HookInputError> {
        self.str(key)?.ok_or_else(|| self.missing(key))
    }

    pub(crate) fn bool(&self, key: &str) -> Result<Option<bool>, HookInputError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(key, "true or false", v)),
        }
    }

    pub(crate) fn u64(&self, key: &str) -> Result<Option<u64>, HookInputError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a whole number", v)),
        }
    }

    pub(crate) fn array(&self, key: &str) -> Result<Option<&'a Vec<Value>>, HookInputError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(v) => Err(self.wrong(key, "an array", v)),
        }
    }

    pub(crate) fn object(
        &self,
        key: &str,
    ) -> Result<Option<&'a Map<String, Value>>, HookInputError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(v) => Err(self.wrong(key, "an object", v)),
        }
    }

    /// An array of strings; absent is empty.
    pub(crate) fn strings(&self, key: &str) -> Result<Vec<String>, HookInputError> {
        let Some(items) = self.array(key)? else {
            return Ok(Vec::new());
        };
        items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                v => Err(self.wrong(&format!("{key}[{i}]"), "a string", v)),
            })
            .collect()
    }
}

/// Returns true for the event names Claude Code and Codex use for tool calls.
pub(crate) fn is_tool_event(event: &str) -> bool {
    matches!(event, "PreToolUse" | "PostToolUse" | "PostToolUseFailure")
}

/// Reads one `{old_string, new_string, replace_all?}`; `None` if either string is absent.
pub(crate) fn edit(f: &Fields<'_>) -> Result<Option<Replacement>, HookInputError> {
    let old = f.str("old_string")?;
    let new = f.str("new_string")?;
    let all = f.bool("replace_all")?.unwrap_or(false);
    Ok(match (old, new) {
        (Some(old), Some(new)) => Some(Replacement {
            old: old.to_string(),
            new: new.to_string(),
            count: if all {
                Occurrences::All
            } else {
                Occurrences::Exactly(1)
            },
        }),
        _ => None,
    })
}

/// Builds a [`HookInputError::WrongShape`].
pub(crate) fn shape(msg: impl Into<String>) -> HookInputError {
    HookInputError::WrongShape(msg.into())
}

/// Checks that `event` (which belongs to `belongs`) may be received by `phase`.
///
/// `self_reporting` after-events (they carry their own outcome) are also accepted by
/// `post-failure`.
pub(crate) fn check_event(
    event: &str,
    belongs: Phase,
    phase: Phase,
    self_reporting: bool,
) -> Result<(), HookInputError> {
    let ok = belongs == phase
        || (self_reporting && belongs == Phase::Post && phase == Phase::PostFailure);
    if ok {
        Ok(())
    } else {
        Err(HookInputError::WrongEvent {
            event: short(event),
            phase,
            expected: belongs,
        })
    }
}

/// Builds a [`HookInputError::UnknownEvent`].
pub(crate) fn unknown_event(event: &str, format: Format) -> HookInputError {
    HookInputError::UnknownEvent {
        event: short(event),
        format,
    }
}

/// Names a JSON value's type for error messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Shortens agent-supplied text for a one-line message: secrets redacted (before the cut, so
/// no half token is left), control characters escaped, at most 64 characters (a redaction
/// marker is kept whole).
pub(crate) fn short(s: &str) -> String {
    let red = crate::redact::redact_str(s);
    let (head, cut) = crate::redact::cut_chars(&red, 64);
    let mut out = String::new();
    for c in head.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if cut {
        out.push('…');
    }
    out
}

/// Takes the value at `key` out of `map`, with `null` counted as absent.
pub(crate) fn take(map: &mut Map<String, Value>, key: &str) -> Option<Value> {
    map.remove(key).filter(|v| !v.is_null())
}
