//! `config.toml`: the failure policy, ignores, size limits and the tool catalog.
//!
//! A missing file, or a missing key, means the default (the text `ckpt init`
//! writes, which is [`DEFAULT_CONFIG`]). A file that does not
//! parse is an error that names the line: ckpt never guesses a policy.

use std::os::fd::AsFd;

use serde::Deserialize;

use crate::fs_util;
use crate::record::{Compensation, Idempotency, ReplayPolicy, Risk};

/// The default `config.toml` that `ckpt init` writes.
pub const DEFAULT_CONFIG: &str = include_str!("../.agent-runtime/config.toml");

/// What a pre hook does when it cannot save the before state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnRecordFailure {
    /// Block the tool call (exit 2).
    #[default]
    Block,
    /// Print one line and let the call through.
    Warn,
}

/// One entry of the tool catalog.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRule {
    /// Tool-name glob: `*` and `?` wildcards, `|` between alternatives.
    pub tool: String,
    /// Risk.
    pub risk: Option<Risk>,
    /// Idempotency.
    pub idempotency: Option<Idempotency>,
    /// Replay policy.
    pub replay_policy: Option<ReplayPolicy>,
    /// Side effects.
    #[serde(default)]
    pub side_effects: Option<Vec<String>>,
    /// A compensation template for calls of this tool.
    #[serde(default)]
    pub compensation: Option<Compensation>,
}

#[derive(Debug, Deserialize)]
struct RawConfig {
    on_record_failure: Option<OnRecordFailure>,
    ignore: Option<Vec<String>>,
    max_blob_bytes: Option<u64>,
    first_use_max_bytes: Option<u64>,
    merge_max_bytes: Option<u64>,
    diff_max_bytes: Option<u64>,
    max_snapshot_files: Option<u64>,
    keep_days: Option<u64>,
    keep_checkpoints: Option<u64>,
    max_runtime_bytes: Option<u64>,
    tools: Option<Vec<ToolRule>>,
}

/// The effective configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// What a pre hook does when recording fails.
    pub on_record_failure: OnRecordFailure,
    /// Extra ignore patterns (`.gitignore` syntax).
    pub ignore: Vec<String>,
    /// Files above this size are not stored.
    pub max_blob_bytes: u64,
    /// At first use (the first walk of a workspace, or one whose snapshot
    /// cache was lost), files above this size that git does not hold are not
    /// copied: they are listed as unprotected by `ckpt status`, and a shell
    /// call's change to one is recorded as not undoable.
    pub first_use_max_bytes: u64,
    /// Text merges are skipped above this size.
    pub merge_max_bytes: u64,
    /// A file with a side above this size gets git's one-line summary in its
    /// patch artifact, as binary files do, not a diff (its bytes are in the
    /// blob store either way).
    pub diff_max_bytes: u64,
    /// A shell call's workspace walk stops above this many entries.
    pub max_snapshot_files: u64,
    /// `ckpt gc` keeps every checkpoint and call younger than this many
    /// days, and the user's versions that rollbacks and resolves stored.
    pub keep_days: u64,
    /// ...and at least this many of the newest checkpoints, however old.
    pub keep_checkpoints: u64,
    /// Past this size, `.agent-runtime/` is collected (per the two keeps
    /// above) by a `ckpt gc --auto` a prompt hook starts in the background;
    /// 0: never automatically.
    pub max_runtime_bytes: u64,
    /// The tool catalog, first match wins.
    pub tools: Vec<ToolRule>,
}

/// How the catalog classifies one tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolClass {
    /// Risk.
    pub risk: Risk,
    /// Idempotency.
    pub idempotency: Idempotency,
    /// Replay policy.
    pub replay_policy: ReplayPolicy,
    /// Side effects.
    pub side_effects: Vec<String>,
    /// Compensation template, if the catalog has one.
    pub compensation: Option<Compensation>,
}

/// A `config.toml` that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("`.agent-runtime/config.toml` is not valid: {0}; fix it or delete it to use the defaults")]
pub struct ConfigError(pub String);

impl Default for Config {
    fn default() -> Self {
        Config::parse(DEFAULT_CONFIG).expect("the built-in default config parses (tested)")
    }
}

impl Config {
    /// Parses config text; missing keys take the defaults.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| ConfigError(e.to_string().replace('\n', " ")))?;
        let defaults: Option<RawConfig> = if text == DEFAULT_CONFIG {
            None
        } else {
            toml::from_str(DEFAULT_CONFIG).ok()
        };
        let d = defaults.unwrap_or(RawConfig {
            on_record_failure: None,
            ignore: None,
            max_blob_bytes: None,
            first_use_max_bytes: None,
            merge_max_bytes: None,
            diff_max_bytes: None,
            max_snapshot_files: None,
            keep_days: None,
            keep_checkpoints: None,
            max_runtime_bytes: None,
            tools: None,
        });
        Ok(Config {
            on_record_failure: raw
                .on_record_failure
                .or(d.on_record_failure)
                .unwrap_or_default(),
            ignore: raw.ignore.or(d.ignore).unwrap_or_default(),
            max_blob_bytes: raw.max_blob_bytes.or(d.max_blob_bytes).unwrap_or(1 << 30),
            first_use_max_bytes: raw
                .first_use_max_bytes
                .or(d.first_use_max_bytes)
                .unwrap_or(16 << 20),
            merge_max_bytes: raw
                .merge_max_bytes
                .or(d.merge_max_bytes)
                .unwrap_or(16 << 20),
            diff_max_bytes: raw
                .diff_max_bytes
                .or(d.diff_max_bytes)
                .unwrap_or(crate::patch::DEFAULT_DIFF_MAX_BYTES),
            max_snapshot_files: raw
                .max_snapshot_files
                .or(d.max_snapshot_files)
                .unwrap_or(500_000),
            keep_days: raw.keep_days.or(d.keep_days).unwrap_or(30),
            keep_checkpoints: raw.keep_checkpoints.or(d.keep_checkpoints).unwrap_or(10),
            max_runtime_bytes: raw
                .max_runtime_bytes
                .or(d.max_runtime_bytes)
                .unwrap_or(2 << 30),
            tools: raw.tools.or(d.tools).unwrap_or_default(),
        })
    }

    /// Reads `config.toml` from the runtime directory (defaults if absent).
    pub fn load(rt: &std::os::fd::OwnedFd) -> Result<Config, ConfigError> {
        match fs_util::open_regular_at(rt.as_fd(), "config.toml".as_ref()) {
            Ok(mut f) => {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut f, &mut s)
                    .map_err(|e| ConfigError(format!("cannot read it ({e})")))?;
                Config::parse(&s)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(e) => Err(ConfigError(format!("cannot open it ({e})"))),
        }
    }

    /// Classifies a tool by the first catalog entry whose glob matches its name.
    /// With no match: high risk, non-idempotent, ask, `["fs"]`.
    pub fn classify(&self, tool: &str) -> ToolClass {
        let rule = self.tools.iter().find(|r| glob_any(&r.tool, tool));
        ToolClass {
            risk: rule.and_then(|r| r.risk).unwrap_or(Risk::High),
            idempotency: rule
                .and_then(|r| r.idempotency)
                .unwrap_or(Idempotency::NonIdempotent),
            replay_policy: rule
                .and_then(|r| r.replay_policy)
                .unwrap_or(ReplayPolicy::Ask),
            side_effects: rule
                .and_then(|r| r.side_effects.clone())
                .unwrap_or_else(|| vec!["fs".to_string()]),
            compensation: rule.and_then(|r| r.compensation.clone()),
        }
    }
}

/// Matches `name` against `a|b|c` alternatives of `*`/`?` globs.
pub fn glob_any(patterns: &str, name: &str) -> bool {
    patterns
        .split('|')
        .any(|p| glob(p.trim().as_bytes(), name.as_bytes()))
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    // Iterative wildcard match with backtracking on the last `*`.
    let (mut pi, mut si) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_config_parses_and_classifies_as_documented() {
        let c = Config::default();
        assert_eq!(c.on_record_failure, OnRecordFailure::Block);
        let read = c.classify("Read");
        assert_eq!(
            (read.idempotency, read.replay_policy),
            (Idempotency::Idempotent, ReplayPolicy::Auto)
        );
        let edit = c.classify("Edit");
        assert_eq!(
            (edit.idempotency, edit.replay_policy),
            (Idempotency::Conditional, ReplayPolicy::Auto)
        );
        let bash = c.classify("Bash");
        assert_eq!(
            (bash.idempotency, bash.replay_policy),
            (Idempotency::NonIdempotent, ReplayPolicy::Ask)
        );
        let mcp = c.classify("mcp__github__create_issue");
        assert_eq!(mcp.side_effects, vec!["network".to_string()]);
        assert_eq!(
            c.classify("SomethingNew").idempotency,
            Idempotency::NonIdempotent
        );
    }

    #[test]
    fn entries_override_and_missing_keys_default() {
        let c = Config::parse(
            "on_record_failure = \"warn\"\n[[tools]]\ntool = \"mcp__deploy__*\"\nrisk = \"high\"\nidempotency = \"non_idempotent\"\nreplay_policy = \"never\"\nside_effects = [\"network\"]\ncompensation = { argv = [\"./undo.sh\"], idempotency_key = \"k\" }\n",
        )
        .unwrap();
        assert_eq!(c.on_record_failure, OnRecordFailure::Warn);
        assert_eq!(c.max_blob_bytes, 1 << 30);
        let d = c.classify("mcp__deploy__prod");
        assert_eq!(d.replay_policy, ReplayPolicy::Never);
        assert_eq!(d.compensation.unwrap().argv, vec!["./undo.sh".to_string()]);
        assert!(Config::parse("on_record_failure = \"maybe\"").is_err());
        assert!(Config::parse("[[tools]]\ntool = \"x\"\nbogus = 1").is_err());
    }

    #[test]
    fn globs() {
        assert!(glob_any("Edit|Write", "Write"));
        assert!(glob_any("mcp__*", "mcp__a__b"));
        assert!(glob_any("*", ""));
        assert!(glob_any("a?c", "abc"));
        assert!(!glob_any("a?c", "ac"));
        assert!(glob_any("*x*y", "axbxy"));
        assert!(!glob_any("Edit", "MultiEdit"));
    }
}
