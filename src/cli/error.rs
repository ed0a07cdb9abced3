//! Exit codes (DESIGN.md §5) and the one-line errors the CLI prints.

use std::fmt;

/// `0` done.
pub const OK: i32 = 0;
/// `1` error (nothing changed, or what changed is recorded and recoverable).
pub const ERROR: i32 = 1;
/// `2` usage error.
pub const USAGE: i32 = 2;
/// `3` done, but conflicts are open.
#[allow(dead_code)]
pub const CONFLICTS: i32 = 3;
/// `4` `verify` or `scenario run` found a failure.
pub const VERIFY_FAILED: i32 = 4;
/// `5` `recover` found calls that need a person.
pub const NEEDS_PERSON: i32 = 5;

/// A command's failure: one line for the user and the exit code.
#[derive(Debug)]
pub struct CommandError {
    pub code: i32,
    pub message: String,
}

impl CommandError {
    pub fn new(code: i32, message: impl Into<String>) -> CommandError {
        CommandError {
            code,
            message: message.into(),
        }
    }
    pub fn usage(message: impl Into<String>) -> CommandError {
        CommandError::new(USAGE, message)
    }
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Flattens an error and its sources into one line.
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    ckpt::error_line(e)
}

impl From<ckpt::WorkspaceError> for CommandError {
    fn from(e: ckpt::WorkspaceError) -> Self {
        CommandError::new(ERROR, one_line(&e))
    }
}

impl From<ckpt::LedgerError> for CommandError {
    fn from(e: ckpt::LedgerError) -> Self {
        CommandError::new(ERROR, one_line(&e))
    }
}

impl From<ckpt::PathError> for CommandError {
    fn from(e: ckpt::PathError) -> Self {
        CommandError::new(ERROR, e.to_string())
    }
}

impl From<std::io::Error> for CommandError {
    fn from(e: std::io::Error) -> Self {
        CommandError::new(ERROR, format!("cannot write output: {e}"))
    }
}
