//! How far a long operation has got (reading a big ledger, checking every
//! stored content, a collection), for whoever shows it: the library never
//! prints; the binary draws one line on a terminal
//! ([`OpenOptions::progress`](crate::OpenOptions::progress)).

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Bytes (of a file being read or hashed).
    Bytes,
    /// Things (records, files).
    Items,
}

/// One report: `done` of `total` of `what` (a short phrase: "reading the
/// ledger"). The last report of an operation has `done == total`.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// The operation.
    pub what: &'a str,
    /// How far it got.
    pub done: u64,
    /// Where it ends.
    pub total: u64,
    /// What `done` and `total` count.
    pub unit: Unit,
}

/// Receives the reports: called often (per batch), so it decides itself
/// when to show anything.
pub type Sink = fn(Step<'_>);

/// Reports `done` of `total` to `sink`, if there is one.
pub(crate) fn report(sink: Option<Sink>, what: &str, done: u64, total: u64, unit: Unit) {
    if let Some(sink) = sink {
        sink(Step {
            what,
            done,
            total,
            unit,
        });
    }
}
