//! Terminal output: stdout carries data (or one JSON document with `--json`),
//! stderr the rest. Colour only on a terminal and without `NO_COLOR`.
//!
//! The CLI's redaction layer (T24): [`Ui::line`], [`Ui::json`] and [`note`]
//! redact secrets, so an error or a record that echoes payload text never
//! prints a token. [`Ui::diff`] and [`Ui::out`] write bytes as given: file
//! contents (diffs, merge views) and ledger lines embedded exactly as stored
//! (already redacted when written).

use std::io::{self, IsTerminal, Write};

pub struct Ui {
    pub json: bool,
    pub color: bool,
    out: io::BufWriter<io::Stdout>,
}

impl Ui {
    pub fn new(json: bool, no_color_env: bool) -> Ui {
        let color = !json && !no_color_env && io::stdout().is_terminal();
        Ui {
            json,
            color,
            out: io::BufWriter::new(io::stdout()),
        }
    }

    pub fn out(&mut self) -> &mut dyn Write {
        &mut self.out
    }

    /// Prints one JSON document on stdout, secrets redacted.
    pub fn json(&mut self, v: &serde_json::Value) -> io::Result<()> {
        let mut copy;
        let v = if ckpt::redact::json_may_contain_secret(v) {
            copy = v.clone();
            ckpt::redact::redact_json(&mut copy);
            &copy
        } else {
            v
        };
        serde_json::to_writer_pretty(&mut self.out, v)?;
        self.out.write_all(b"\n")
    }

    /// Prints one line on stdout, secrets redacted.
    pub fn line(&mut self, s: &str) -> io::Result<()> {
        self.out.write_all(ckpt::redact::redact_str(s).as_bytes())?;
        self.out.write_all(b"\n")
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }

    /// Writes a unified diff, coloured on a terminal.
    pub fn diff(&mut self, diff: &[u8]) -> io::Result<()> {
        if !self.color {
            return self.out.write_all(diff);
        }
        for line in diff.split_inclusive(|&b| b == b'\n') {
            let code = if line.starts_with(b"+++")
                || line.starts_with(b"---")
                || line.starts_with(b"diff ")
            {
                "1"
            } else if line.starts_with(b"+") {
                "32"
            } else if line.starts_with(b"-") {
                "31"
            } else if line.starts_with(b"@@") {
                "36"
            } else {
                ""
            };
            if code.is_empty() {
                self.out.write_all(line)?;
            } else {
                let (body, nl) = match line.strip_suffix(b"\n") {
                    Some(b) => (b, "\n"),
                    None => (line, ""),
                };
                write!(self.out, "\x1b[{code}m")?;
                self.out.write_all(body)?;
                write!(self.out, "\x1b[0m{nl}")?;
            }
        }
        Ok(())
    }
}

/// Prints a status line on stderr (progress, notes); never data. Secrets
/// redacted: errors and warnings may quote payload text.
#[allow(clippy::print_stderr)]
pub fn note(s: &str) {
    eprintln!("{}", ckpt::redact::redact_str(s));
}

/// Says on stderr when `read` is not the whole history (a record damaged, or
/// records cut off the end): what the command shows is partial. Returns
/// whether it said so.
pub fn warn_partial(ws: &ckpt::Workspace, read: &ckpt::LedgerRead) -> bool {
    use std::os::fd::AsFd;
    let why = match &read.corruption {
        Some(c) => Some(format!(
            "the ledger is damaged at seq {} ({}): records from there on are not shown",
            c.seq, c.problem
        )),
        None => ckpt::ledger::lost_records(ws.runtime_dir().as_fd(), &read.tail),
    };
    match why {
        Some(w) => {
            note(&format!(
                "warning: this is a partial history: {w}; run `ckpt verify`, then `ckpt repair`"
            ));
            true
        }
        None => false,
    }
}
