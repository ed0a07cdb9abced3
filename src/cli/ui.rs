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

/// Draws a long operation's progress on stderr when it is a terminal: one
/// line, redrawn at most five times a second, shown only once the
/// operation has taken a second (a quick command draws nothing), and
/// cleared when it ends. (The library tells how far it got,
/// `OpenOptions::progress`; the binary decides what to show.)
pub fn progress(step: ckpt::progress::Step<'_>) {
    use std::io::{IsTerminal, Write};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    /// The operation being drawn: its name, when it started, when it was
    /// last drawn, and whether anything is on the line.
    struct Drawn {
        what: String,
        started: Instant,
        last: Option<Instant>,
    }
    static DRAWN: Mutex<Option<Drawn>> = Mutex::new(None);
    static TERMINAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*TERMINAL.get_or_init(|| std::io::stderr().is_terminal()) {
        return;
    }
    let mut drawn = DRAWN.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    if drawn.as_ref().is_none_or(|d| d.what != step.what) {
        *drawn = Some(Drawn {
            what: step.what.to_string(),
            started: now,
            last: None,
        });
    }
    let Some(d) = drawn.as_mut() else {
        return;
    };
    let mut err = std::io::stderr().lock();
    if step.done >= step.total {
        if d.last.is_some() {
            let _ = write!(err, "\r\x1b[K");
        }
        *drawn = None;
        return;
    }
    if now.duration_since(d.started) < Duration::from_secs(1)
        || d.last
            .is_some_and(|l| now.duration_since(l) < Duration::from_millis(200))
    {
        return;
    }
    d.last = Some(now);
    let pct = step.done as f64 * 100.0 / step.total.max(1) as f64;
    let counts = match step.unit {
        ckpt::progress::Unit::Bytes => format!(
            "{} of {}",
            super::gc::size(step.done),
            super::gc::size(step.total)
        ),
        ckpt::progress::Unit::Items => format!("{} of {}", step.done, step.total),
    };
    let _ = write!(err, "\r\x1b[K{}: {pct:.0}% ({counts})", step.what);
    let _ = err.flush();
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
