//! Recovery scenarios (DESIGN.md §8): one TOML file tells a story of agent
//! calls, user edits, crashes and ckpt commands, and says what must hold;
//! [`run::run`] plays it in a scratch workspace with the ckpt binary it is
//! given, through the real hook path.
//!
//! - [`parse`] reads a file into a [`Scenario`] (every error names the file,
//!   the line and the key);
//! - [`payload`] writes each agent's hook payloads for a tool step;
//! - [`run`] plays one scenario, or one crash of it (`--crash-each-write`);
//! - [`record`] writes a workspace's recorded story as a scenario;
//! - [`junit`] renders results as JUnit XML.

pub mod junit;
pub mod parse;
pub mod payload;
pub mod record;
pub mod run;

use std::path::{Path, PathBuf};

pub use parse::{ScenarioError, load};

/// The payload format of tool steps: the hook formats ckpt reads.
pub use crate::capture::Format as Agent;

/// One scenario file, read and checked.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The file it was read from.
    pub file: PathBuf,
    /// `name`, or the file's stem.
    pub name: String,
    /// The default payload format of tool steps.
    pub agent: Agent,
    /// `git init` and commit the starting files first.
    pub git: bool,
    /// The default session of tool steps.
    pub session: String,
    /// The workspace before the story, by relative path.
    pub files: Vec<(String, FileSpec)>,
    /// Merged into `.agent-runtime/config.toml` after `ckpt init`.
    pub config: toml::Table,
    /// The story.
    pub steps: Vec<Step>,
    /// The end state.
    pub expect: EndExpect,
}

/// A starting file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSpec {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Its permission bits (`mode = "755"`), when given.
    pub mode: Option<u32>,
}

/// One step of the story.
#[derive(Debug, Clone)]
pub struct Step {
    /// The line of its `[[step]]` header (for messages).
    pub line: usize,
    /// What it does.
    pub kind: StepKind,
}

/// What a step does.
#[derive(Debug, Clone)]
pub enum StepKind {
    /// `checkpoint = "name"`: `ckpt checkpoint`; later steps say `@name`.
    Checkpoint {
        /// The name `@name` refers to.
        name: String,
        /// `session`: the checkpoint records that session's place.
        session: Option<String>,
    },
    /// `tool = "…"`: an agent tool call through the hooks.
    Tool(Box<ToolStep>),
    /// `user = "path"`: an edit by the user, outside any call.
    User {
        /// The path, relative to the workspace.
        path: String,
        /// The edit.
        change: UserChange,
    },
    /// `run = "ckpt …"`: a ckpt command line.
    Run {
        /// Its arguments after `ckpt`, `@name` not yet replaced.
        args: Vec<String>,
        /// `crash = "<failpoint>"`: ckpt is killed there (it must get there).
        crash: Option<String>,
        /// `save = { name = "json.path" }`: a value of its `--json` output
        /// that later steps name `@name` (an action or conflict id).
        save: Vec<(String, String)>,
        /// What must hold.
        expect: RunExpect,
    },
    /// `tamper = ".agent-runtime/…"`: damage to ckpt's own files (a torn
    /// ledger tail, a garbled blob), with the edits of a user step.
    Tamper {
        /// The path, relative to the workspace, under `.agent-runtime/`.
        path: String,
        /// The damage.
        change: UserChange,
    },
    /// `prompt = "…"`: the user submits a prompt (`ckpt hook prompt`).
    Prompt {
        /// The prompt.
        text: String,
        /// Session and format.
        who: Who,
    },
    /// `session_start = "startup"`: a session begins (`ckpt hook session-start`).
    SessionStart {
        /// Why it started (`startup`, `resume`, …).
        source: String,
        /// Session and format.
        who: Who,
    },
    /// `turn_end = true`: the agent ends its turn (`ckpt hook turn-end`).
    TurnEnd {
        /// Session and format.
        who: Who,
    },
}

/// The session and payload format of a hook step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    /// The session id.
    pub session: String,
    /// The payload format.
    pub agent: Agent,
}

/// An agent tool call.
#[derive(Debug, Clone)]
pub struct ToolStep {
    /// The tool name as the agent names it (`Edit`, `apply_patch`, `run_shell_command`, …).
    pub tool: String,
    /// The call id (`c<step number>` by default).
    pub call: String,
    /// The tool input (relative file paths are made absolute for agents that send absolute ones).
    pub input: serde_json::Value,
    /// `result = "failed"` sends post-failure (or a failed status) instead of post.
    pub failed: bool,
    /// Where the call is cut short, if it is.
    pub crash: Option<Crash>,
    /// Session and format.
    pub who: Who,
    /// Top-level fields merged into both payloads (generic `idempotency`, `compensation`, …).
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// What must hold of the pre hook (`expect = { exit = 2 }`: the call is refused).
    pub expect: RunExpect,
}

/// Where a tool call is cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Crash {
    /// The agent dies after the pre hook, before the tool runs.
    BeforeEffect,
    /// The agent dies after the tool ran, before the post hook.
    AfterEffect,
    /// ckpt itself is killed at this named failpoint (in whichever hook of
    /// the call passes it); the agent goes on, as agents do when a hook dies.
    Failpoint(String),
}

/// A user's edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserChange {
    /// `replace = ["old", "new"]`: the first occurrence.
    Replace(String, String),
    /// `content = "…"` or `base64 = "…"`: the whole file.
    Content(Vec<u8>),
    /// `append = "…"`.
    Append(Vec<u8>),
    /// `delete = true`.
    Delete,
    /// `mode = "755"` alone: a permission change.
    Mode(u32),
}

/// What must hold of one ckpt process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunExpect {
    /// Its exit code.
    pub exit: Option<i32>,
    /// A subset of its `--json` document (the runner adds `--json`).
    pub json: Option<serde_json::Value>,
    /// Text its stdout must hold.
    pub stdout_contains: Vec<String>,
    /// Text its stderr must hold.
    pub stderr_contains: Vec<String>,
}

/// The end state.
#[derive(Debug, Clone, PartialEq)]
pub struct EndExpect {
    /// What each named file must be.
    pub files: Vec<(String, FileExpect)>,
    /// How many conflicts are open.
    pub conflicts: Option<u64>,
    /// `ckpt verify` passes (default true).
    pub verify: bool,
}

impl Default for EndExpect {
    fn default() -> Self {
        EndExpect {
            files: Vec::new(),
            conflicts: None,
            verify: true,
        }
    }
}

/// What one file must be at the end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileExpect {
    /// Exactly these bytes (`content` or `base64`).
    pub content: Option<Vec<u8>>,
    /// Bytes with this sha256 (hex, with or without `sha256:`).
    pub sha256: Option<String>,
    /// Text the file must hold.
    pub contains: Option<String>,
    /// The path must not exist.
    pub absent: bool,
    /// Its permission bits.
    pub mode: Option<u32>,
}

/// The scenario files under each path: a file as given, a directory's
/// `*.toml` files (recursively), sorted. An error names a path that does not exist.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p)
            .map_err(|e| format!("cannot read scenario path `{}`: {e}", p.display()))?;
        if meta.is_dir() {
            let mut found = Vec::new();
            collect(p, &mut found, 0).map_err(|e| format!("cannot list `{}`: {e}", p.display()))?;
            found.sort();
            if found.is_empty() {
                return Err(format!("no *.toml scenario files under `{}`", p.display()));
            }
            out.extend(found);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) -> std::io::Result<()> {
    if depth > 16 {
        return Ok(());
    }
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let path = e.path();
        let ty = e.file_type()?;
        if ty.is_dir() {
            collect(&path, out, depth + 1)?;
        } else if ty.is_file() && path.extension().is_some_and(|x| x == "toml") {
            out.push(path);
        }
    }
    Ok(())
}
