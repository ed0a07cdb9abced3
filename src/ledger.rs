//! The append-only ledger, `.agent-runtime/ledger.jsonl`: the single source of truth.
//!
//! # Format
//!
//! One JSON object a line, UTF-8, `\n`-terminated, at most [`MAX_LINE`] bytes.
//! Fields in order: `v`, `seq`, `ts`, `kind`, `session` (omitted when none), the
//! kind's own fields (see [`crate::record`]), `prev`, and last `hash`:
//!
//! ```text
//! {"v":1,"seq":2,"ts":"2026-11-29T08:00:00.002Z","kind":"checkpoint",…,"prev":"sha256:…","hash":"sha256:…"}
//! ```
//!
//! `hash` is `sha256:` + the hex sha256 of the line's own bytes with the trailing
//! `,"hash":"sha256:<64 hex>"` removed (so the line up to and including `prev`,
//! closed by `}`). It is computed and checked on the bytes as written, so no JSON
//! canonicalisation is involved, and because `prev` is inside the hashed bytes the
//! hashes form a chain: editing, deleting or reordering any record breaks it.
//!
//! # Writing (RELIABILITY.md B1)
//!
//! Writers take an exclusive `flock` on `ledger.lock` (a separate file, so repair
//! can truncate the ledger under the same lock), read the tail to learn the last
//! `seq` and `hash`, repair a torn tail (B5), build every line in memory, write
//! them with one `write(2)` on an `O_APPEND` descriptor, and `fdatasync` before the
//! lock is released and success is reported. A failed `fdatasync` is final: it is
//! not retried, the append fails and `needs-verify` is created.
//!
//! # Reading (B5)
//!
//! A reader accepts exactly one kind of damage silently: a torn *last* record
//! (bytes after the last `\n`, NULs, or one final line failing its hash). Anything
//! invalid followed by a valid line is corruption at that `seq`: the reader stops
//! before it and reports it; nothing is ever deleted automatically.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::fs::{FileType, Mode, OFlags};
use serde::Deserialize;

use crate::durable::{Durable, Keep};
use crate::failpoint;
use crate::fs_util::{self, FsError};
use crate::hash::{Hasher, hex};
use crate::ids::Clock;
use crate::record::{Body, Draft, Record, Repair, SCHEMA_VERSION};

/// The ledger file's name inside `.agent-runtime/`.
pub const LEDGER_FILE: &str = "ledger.jsonl";
/// The lock file's name inside `.agent-runtime/`.
pub const LOCK_FILE: &str = "ledger.lock";
/// Longest accepted record line, including its `\n`. Large payloads go to blobs.
pub const MAX_LINE: usize = 1024 * 1024;
/// Created when an `fdatasync` of the ledger failed; `ckpt verify` reports it.
pub const NEEDS_VERIFY_FILE: &str = "needs-verify";
/// The last acknowledged `{seq, hash}`, rewritten in place after every append.
/// It is not synced (the ledger is, first), so after a crash it can only lag
/// behind the ledger, never run ahead of it: a head *ahead* of the ledger's last
/// record means records were cut off the end (`ledger_truncated`), which the
/// chain alone cannot see.
pub const HEAD_FILE: &str = "ledger.head";
/// Left by a command that found the ledger damaged (a record garbled or cut
/// off, `ledger.head` gone): while it exists no record is appended, so a
/// hook facing a damaged history stops instead of writing records no reader
/// reaches. It holds the one-line reason. `ckpt repair` removes it.
pub const DAMAGED_FILE: &str = "ledger.damaged";

/// Where the live ledger starts when `ckpt gc` has cut its oldest records
/// away: every cut made, oldest first (see [`Cut`]). Written (synced) before
/// the shortened ledger replaces the whole one; absent until the first cut.
pub const BASE_FILE: &str = "ledger.base";

/// One cut `ckpt gc` made: the records up to `seq` left the ledger, and the
/// first one kept names `hash` as its `prev`. A ledger whose first record
/// is seq 1 is whole; one that starts after a recorded cut is a shortened
/// one; any other start is damage.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct Cut {
    /// The last record cut away.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
    /// The gc action that cut it.
    pub action: String,
}

#[derive(Debug, Default, serde::Serialize, Deserialize)]
struct BaseFile {
    v: u32,
    cuts: Vec<Cut>,
}

/// The cuts `ledger.base` records (none when there is no such file); an
/// error names what is wrong with an unreadable one.
pub fn read_cuts(rt: BorrowedFd<'_>) -> Result<Vec<Cut>, String> {
    let (mut f, size) = match fs_util::open_regular_at_sized(rt, BASE_FILE.as_ref()) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("`{BASE_FILE}` cannot be read ({e})")),
    };
    if size > 16 << 20 {
        return Err(format!("`{BASE_FILE}` is {size} bytes, not a list of cuts"));
    }
    let bytes = fs_util::read_to_end_sized(&mut f, size)
        .map_err(|e| format!("`{BASE_FILE}` cannot be read ({e})"))?;
    match serde_json::from_slice::<BaseFile>(&bytes) {
        Ok(b) if b.v == 1 => Ok(b.cuts),
        Ok(b) => Err(format!(
            "`{BASE_FILE}` has version {}, which this ckpt does not know",
            b.v
        )),
        Err(e) => Err(format!("`{BASE_FILE}` is damaged ({e})")),
    }
}

/// Writes `ledger.base` as `cuts` plus `cut` (unless it is there), synced.
pub(crate) fn add_cut(
    rt: BorrowedFd<'_>,
    d: &Durable,
    mut cuts: Vec<Cut>,
    cut: &Cut,
) -> Result<(), LedgerError> {
    if cuts.contains(cut) {
        return Ok(());
    }
    cuts.push(cut.clone());
    write_cuts(rt, d, cuts)
}

/// Writes `ledger.base` as `cuts`, synced.
pub(crate) fn write_cuts(
    rt: BorrowedFd<'_>,
    d: &Durable,
    cuts: Vec<Cut>,
) -> Result<(), LedgerError> {
    let mut text = serde_json::to_vec(&BaseFile { v: 1, cuts })
        .map_err(|e| io_err_named(BASE_FILE, "write", io::Error::other(e)))?;
    text.push(b'\n');
    fs_util::write_atomic(
        rt,
        BASE_FILE.as_ref(),
        &text,
        0o600,
        false,
        Keep::Replacing(d),
    )
    .and_then(|()| d.all())
    .map_err(|e| io_err_named(BASE_FILE, "write", e))
}

/// Whether `r` is the plan of the gc action that made `cut`: the record
/// that accounts for a cut (it follows the cut, so it is in the ledger the
/// cut left, unless a later cut took it).
pub fn plans_cut(r: &Record, cut: &Cut) -> bool {
    let Body::Action(a) = &r.body else {
        return false;
    };
    a.action == cut.action
        && cut_of_plan(a.plan.as_ref()).is_some_and(|(s, h)| s == cut.seq && h == cut.hash)
}

/// What is wrong when the ledger starts after `cut` and no gc record in
/// it planned that cut.
pub fn unplanned_cut(cut: &Cut) -> String {
    format!(
        "the ledger starts at seq {} after a cut `ledger.base` gives to gc action {}, but no gc record in the ledger planned that cut: the records before seq {} were removed by something other than `ckpt gc`",
        cut.seq + 1,
        cut.action,
        cut.seq + 1
    )
}

/// The `ledger_cut` (seq, hash) a gc plan names.
pub(crate) fn cut_of_plan(plan: Option<&serde_json::Value>) -> Option<(u64, String)> {
    let at = plan?.get("ledger_cut")?;
    Some((
        at.get("seq")?.as_u64()?,
        at.get("hash")?.as_str()?.to_string(),
    ))
}

/// The cuts gc records in `bytes` planned.
fn planned_cuts(bytes: &[u8]) -> (Option<u64>, Vec<Cut>) {
    let mut first = None;
    let mut cuts = Vec::new();
    for l in bytes.split(|&b| b == b'\n') {
        let Ok(c) = check_line(l) else { continue };
        first.get_or_insert(c.seq());
        let Ok(r) = to_record(l, &c) else { continue };
        if let Body::Action(a) = r.body
            && let Some((seq, hash)) = cut_of_plan(a.plan.as_ref())
        {
            cuts.push(Cut {
                seq,
                hash,
                action: a.action,
            });
        }
    }
    (first, cuts)
}

/// Where `ckpt repair` rebuilds the ledger `bytes` from: the newest cut
/// before its first whole record that a gc record in `bytes` planned
/// (returned as well when `ledger.base` lacks it, to be recorded again);
/// the very start when there is none (each missing seq then gets a
/// stand-in). A cut `ledger.base` alone names is not taken on its word:
/// records removed by hand behind a cut written by hand read as lost.
/// The third value: the base's cuts after the start that no record
/// planned, to be taken out of it.
pub fn rebuild_start(rt: BorrowedFd<'_>, bytes: &[u8]) -> (Tail, Option<Cut>, Vec<Cut>) {
    let (first, planned) = planned_cuts(bytes);
    let Some(first) = first else {
        return (Tail::default(), None, Vec::new());
    };
    let base = read_cuts(rt).unwrap_or_default();
    let newest = planned
        .iter()
        .filter(|c| c.seq < first)
        .max_by_key(|c| c.seq)
        .cloned();
    let start = newest.as_ref().map_or(0, |c| c.seq);
    let unplanned = base
        .iter()
        .filter(|c| c.seq > start && !planned.contains(c))
        .cloned()
        .collect();
    match newest {
        Some(c) => {
            let restore = !base.contains(&c);
            (
                Tail {
                    seq: c.seq,
                    hash: Some(c.hash.clone()),
                    end: 0,
                },
                restore.then_some(c),
                unplanned,
            )
        }
        None => (Tail::default(), None, unplanned),
    }
}

/// Where a read of the whole file `file` starts: after the recorded cut
/// its first record links to, else at the very start (a first record that
/// is not seq 1 then reads as damage at seq 1).
fn start_of(rt: BorrowedFd<'_>, file: &File) -> (Tail, Option<Cut>) {
    let mut buf = vec![0u8; 4096];
    let mut filled = 0;
    let first = loop {
        let n = match std::os::unix::fs::FileExt::read_at(file, &mut buf[filled..], filled as u64) {
            Ok(n) => n,
            Err(_) => return (Tail::default(), None),
        };
        filled += n;
        if let Some(i) = memchr::memchr(b'\n', &buf[..filled]) {
            break i;
        }
        if n == 0 || filled > MAX_LINE {
            return (Tail::default(), None);
        }
        if filled == buf.len() {
            buf.resize(buf.len() * 4, 0);
        }
    };
    let Ok(c) = check_line(&buf[..first]) else {
        return (Tail::default(), None);
    };
    if c.seq() <= 1 {
        return (Tail::default(), None);
    }
    match from_cut(rt, c.seq(), c.prev()) {
        Some(cut) => (
            Tail {
                seq: cut.seq,
                hash: Some(cut.hash.clone()),
                end: 0,
            },
            Some(cut),
        ),
        None => (Tail::default(), None),
    }
}

/// The position a first record `seq` with `prev` continues from, when a
/// recorded cut accounts for the records before it.
fn from_cut(rt: BorrowedFd<'_>, seq: u64, prev: Option<&str>) -> Option<Cut> {
    read_cuts(rt)
        .ok()?
        .into_iter()
        .find(|c| c.seq + 1 == seq && Some(c.hash.as_str()) == prev)
}

const HASH_SUFFIX_PREFIX: &[u8] = b",\"hash\":\"sha256:";
const HASH_SUFFIX_LEN: usize = HASH_SUFFIX_PREFIX.len() + 64 + 2;

/// What went wrong with the ledger.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// An I/O failure.
    #[error(transparent)]
    Io(#[from] FsError),
    /// Another process held the lock for too long.
    #[error("the ledger is busy: another ckpt process held `.agent-runtime/ledger.lock` for {0:?}")]
    Busy(Duration),
    /// The ledger is damaged before its last record.
    #[error("E_LEDGER_CORRUPT: the ledger is damaged at seq {seq} (line {line}): {problem}")]
    Corrupt {
        /// The seq the damaged line should have had.
        seq: u64,
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        problem: String,
    },
    /// A record would exceed the line cap.
    #[error("a {kind} record of {len} bytes exceeds the ledger's 1 MiB line limit")]
    TooLarge {
        /// The record kind.
        kind: String,
        /// Its serialised length.
        len: usize,
    },
    /// `fdatasync` failed; the append is not acknowledged.
    #[error(
        "cannot make the ledger durable (fdatasync failed: {0}); the last record may not survive a crash; run `ckpt verify`"
    )]
    SyncFailed(io::Error),
    /// The ledger file is not a plain private file.
    #[error("E_RUNTIME_UNSAFE: `.agent-runtime/ledger.jsonl` {0}; refusing to use it")]
    Unsafe(String),
    /// The ledger is known to be damaged: nothing is appended to it.
    #[error(
        "E_LEDGER_DAMAGED: the ledger is damaged ({0}); ckpt adds nothing to a damaged history: run `ckpt verify` to see the damage, then `ckpt repair`, which keeps everything intact"
    )]
    Damaged(String),
}

fn io_err(op: &'static str, e: impl Into<io::Error>) -> LedgerError {
    io_err_named(LEDGER_FILE, op, e)
}

fn io_err_named(name: &str, op: &'static str, e: impl Into<io::Error>) -> LedgerError {
    LedgerError::Io(FsError::new(op, format!(".agent-runtime/{name}"), e.into()))
}

/// The header every line carries, borrowed from the line.
#[derive(Deserialize)]
struct Header<'a> {
    v: u32,
    seq: u64,
    #[serde(borrow)]
    ts: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    session: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    prev: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    hash: std::borrow::Cow<'a, str>,
}

/// One line checked on its own (size, hash, header); not yet against the chain.
pub struct LineCheck<'a> {
    seq: u64,
    ts: Cow<'a, str>,
    kind: Cow<'a, str>,
    session: Option<Cow<'a, str>>,
    prev: Option<Cow<'a, str>>,
    hash: Cow<'a, str>,
}

impl LineCheck<'_> {
    /// The line's `ts`.
    pub fn ts(&self) -> &str {
        &self.ts
    }
    /// The line's `seq`.
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// The line's `hash`.
    pub fn hash(&self) -> &str {
        &self.hash
    }
    /// The line's `prev`.
    pub fn prev(&self) -> Option<&str> {
        self.prev.as_deref()
    }
    /// The line's `kind`.
    pub fn kind(&self) -> &str {
        &self.kind
    }
}

/// Reads the header of a line in the exact layout ckpt writes
/// (`{"v":1,"seq":N,"ts":"…","kind":"…"[,"session":"…"],…,"prev":…,"hash":"…"}`)
/// without a JSON parser. Returns `None` for any other layout, which then goes
/// through serde (same result, slower).
fn fast_header(line: &[u8]) -> Option<LineCheck<'_>> {
    let rest = line.strip_prefix(b"{\"v\":1,\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 || (rest[0] == b'0') {
        return None;
    }
    let seq: u64 = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let rest = rest[digits..].strip_prefix(b",\"ts\":\"")?;
    let (ts, rest) = plain_string(rest)?;
    let rest = rest.strip_prefix(b",\"kind\":\"")?;
    let (kind, rest) = plain_string(rest)?;
    let session = match rest.strip_prefix(b",\"session\":\"") {
        Some(r) => Some(plain_string(r)?.0),
        None => None,
    };
    // Suffix: ,"prev":null|"sha256:<64>" then ,"hash":"sha256:<64>"}
    let n = line.len();
    let hash = std::str::from_utf8(&line[n - 2 - 71..n - 2]).ok()?;
    let before_hash = &line[..n - HASH_SUFFIX_LEN];
    let prev = if let Some(p) = before_hash.strip_suffix(b",\"prev\":null") {
        let _ = p;
        None
    } else {
        let q = before_hash.strip_suffix(b"\"")?;
        let start = q.len().checked_sub(71)?;
        if &q[start.checked_sub(9)?..start] != b",\"prev\":\"" {
            return None;
        }
        let p = std::str::from_utf8(&q[start..]).ok()?;
        // Its hex digits need no check here: the chain compares it with the
        // previous record's hash byte for byte.
        if !p.starts_with("sha256:") {
            return None;
        }
        Some(Cow::Borrowed(p))
    };
    Some(LineCheck {
        seq,
        ts: Cow::Borrowed(ts),
        kind: Cow::Borrowed(kind),
        session: session.map(Cow::Borrowed),
        prev,
        hash: Cow::Borrowed(hash),
    })
}

/// A JSON string body with no escapes, up to its closing quote.
fn plain_string(b: &[u8]) -> Option<(&str, &[u8])> {
    // (No `memchr`: see `scan_tail`.)
    let end = b.iter().position(|&c| c == b'"' || c == b'\\')?;
    if b[end] != b'"' {
        return None;
    }
    let s = std::str::from_utf8(&b[..end]).ok()?;
    if s.bytes().any(|c| c < 0x20) {
        return None;
    }
    Some((s, &b[end + 1..]))
}

/// Checks one line (without its `\n`) on its own: size, hash, version, header.
/// The full JSON of the line is checked when its record is parsed. Never panics,
/// whatever the bytes.
pub fn check_line(line: &[u8]) -> Result<LineCheck<'_>, String> {
    if line.len() >= MAX_LINE {
        return Err("line longer than the 1 MiB limit".into());
    }
    if line.len() < HASH_SUFFIX_LEN + 2 {
        return Err("line too short to be a record".into());
    }
    if line.contains(&0) {
        return Err("NUL bytes in the line (a torn or zero-filled write)".into());
    }
    let cut = line.len() - HASH_SUFFIX_LEN;
    if &line[cut..cut + HASH_SUFFIX_PREFIX.len()] != HASH_SUFFIX_PREFIX || !line.ends_with(b"\"}") {
        return Err("line does not end with its \"hash\" field".into());
    }
    let mut h = Hasher::new();
    h.update(&line[..cut]);
    h.update(b"}");
    let digest = h.finish();
    let claimed = &line[cut + HASH_SUFFIX_PREFIX.len()..line.len() - 2];
    if !hex_eq(digest.as_bytes(), claimed) {
        return Err("hash does not match the record's content".into());
    }
    if let Some(c) = fast_header(line) {
        if c.seq == 0 {
            return Err("seq 0 is not a valid position".into());
        }
        return Ok(c);
    }
    let header: Header<'_> =
        serde_json::from_slice(line).map_err(|e| format!("not a valid record: {e}"))?;
    if header.v != SCHEMA_VERSION {
        return Err(format!("unknown schema version v={}", header.v));
    }
    if header.seq == 0 {
        return Err("seq 0 is not a valid position".into());
    }
    Ok(LineCheck {
        seq: header.seq,
        ts: header.ts,
        kind: header.kind,
        session: header.session,
        prev: header.prev,
        hash: header.hash,
    })
}

fn hex_eq(digest: &[u8; 32], hex_text: &[u8]) -> bool {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    hex_text.len() == 64
        && digest.iter().enumerate().all(|(i, b)| {
            hex_text[2 * i] == DIGITS[(b >> 4) as usize]
                && hex_text[2 * i + 1] == DIGITS[(b & 15) as usize]
        })
}

/// Serialises a record line (with its `\n`), returning the line and its hash.
fn build_line(
    seq: u64,
    ts: &str,
    prev: Option<&str>,
    draft: &Draft,
) -> Result<(Vec<u8>, String), LedgerError> {
    let mut buf = Vec::with_capacity(384);
    // Secrets in free-text fields are replaced before serialising (T24), so
    // the hash below covers the redacted bytes and the JSON stays valid.
    let redacted = crate::redact::record_body(&draft.body);
    let fields = redacted
        .as_ref()
        .unwrap_or(&draft.body)
        .fields_json()
        .map_err(|e| io_err("serialise", e))?;
    buf.extend_from_slice(b"{\"v\":");
    buf.extend_from_slice(SCHEMA_VERSION.to_string().as_bytes());
    buf.extend_from_slice(b",\"seq\":");
    buf.extend_from_slice(seq.to_string().as_bytes());
    buf.extend_from_slice(b",\"ts\":");
    serde_json::to_writer(&mut buf, ts).map_err(|e| io_err("serialise", e))?;
    buf.extend_from_slice(b",\"kind\":");
    serde_json::to_writer(&mut buf, draft.body.kind()).map_err(|e| io_err("serialise", e))?;
    if let Some(s) = &draft.session {
        buf.extend_from_slice(b",\"session\":");
        serde_json::to_writer(&mut buf, s).map_err(|e| io_err("serialise", e))?;
    }
    // `fields` is a JSON object: splice its members in.
    if fields.len() > 2 {
        buf.push(b',');
        buf.extend_from_slice(&fields[1..fields.len() - 1]);
    }
    buf.extend_from_slice(b",\"prev\":");
    match prev {
        Some(p) => serde_json::to_writer(&mut buf, p).map_err(|e| io_err("serialise", e))?,
        None => buf.extend_from_slice(b"null"),
    }
    buf.push(b'}');
    let digest = {
        let mut h = Hasher::new();
        h.update(&buf);
        h.finish()
    };
    buf.pop();
    let hash = format!("sha256:{}", hex(digest.as_bytes()));
    buf.extend_from_slice(b",\"hash\":\"");
    buf.extend_from_slice(hash.as_bytes());
    buf.extend_from_slice(b"\"}\n");
    if buf.len() > MAX_LINE {
        return Err(LedgerError::TooLarge {
            kind: draft.body.kind().to_string(),
            len: buf.len(),
        });
    }
    Ok((buf, hash))
}

/// Parses a full record from a line already checked by [`check_line`].
fn to_record(line: &[u8], h: &LineCheck<'_>) -> Result<Record, String> {
    // One serde pass over the whole line: the body struct validates the JSON and
    // ignores the header fields (already read by `check_line`).
    let body = Body::parse(&h.kind, line).map_err(|e| format!("bad {} record: {e}", h.kind))?;
    Ok(Record {
        seq: h.seq,
        ts: h.ts.to_string(),
        session: h.session.as_ref().map(|s| s.to_string()),
        prev: h.prev.as_ref().map(|s| s.to_string()),
        hash: h.hash.to_string(),
        body,
    })
}

/// A line (without `\n`) checked on its own and parsed.
pub(crate) fn record_of_line(line: &[u8]) -> Result<Record, String> {
    let c = check_line(line)?;
    to_record(line, &c)
}

/// The position after the last valid record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tail {
    /// The last record's seq (0 when empty).
    pub seq: u64,
    /// The last record's hash (`None` when empty).
    pub hash: Option<String>,
    /// Byte offset just after the last valid record's `\n`.
    pub end: u64,
}

/// A torn last record: bytes after the last valid one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Where the torn bytes start.
    pub offset: u64,
    /// How many bytes follow the last valid record.
    pub bytes: u64,
}

/// Damage before the tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// The seq the damaged line should have had.
    pub seq: u64,
    /// 1-based line number.
    pub line: u64,
    /// Byte offset of the damaged line.
    pub offset: u64,
    /// What is wrong.
    pub problem: String,
}

/// Everything a full read found.
#[derive(Debug, Default)]
pub struct LedgerRead {
    /// The valid records, oldest first (up to the first damage).
    pub records: Vec<Record>,
    /// The valid prefix's end.
    pub tail: Tail,
    /// A torn last record, if any.
    pub torn: Option<TornTail>,
    /// Damage before the tail, if any.
    pub corruption: Option<Corruption>,
    /// The cut `ckpt gc` recorded that a whole read started after (the
    /// ledger's first record links to it); `None` for a whole ledger and
    /// for reads from a position.
    pub cut: Option<Cut>,
}

/// A record with its line as stored (without the `\n`).
pub type RawRecord = (Vec<u8>, Record);

/// What one appended record got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// Its seq.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
}

/// The ledger of one workspace.
#[derive(Debug, Clone)]
pub struct Ledger {
    rt: Arc<OwnedFd>,
    clock: Arc<Clock>,
    /// The content the records will name, made durable before them.
    durable: Arc<Durable>,
    lock_timeout: Duration,
    progress: Option<crate::progress::Sink>,
}

/// Creates an empty `ledger.jsonl` in `rt` (mode 0600) unless one exists;
/// its directory entry is the caller's to sync (workspace init syncs it with
/// the rest of `.agent-runtime/`). True when it was created.
pub(crate) fn create_empty(rt: BorrowedFd<'_>) -> io::Result<bool> {
    match rustix::fs::openat(
        rt,
        LEDGER_FILE,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        crate::sys::mode(0o600),
    ) {
        Ok(fd) => {
            rustix::fs::fchmod(&fd, crate::sys::mode(0o600))?;
            // The head anchor exists from the start (its name is synced with
            // the ledger's by init): a ledger with records and no head is
            // one whose head was deleted.
            write_head(rt, &Tail::default());
            Ok(true)
        }
        Err(rustix::io::Errno::EXIST) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// What `ledger.head` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadState {
    /// No such file.
    Absent,
    /// There, but not readable as a head (empty after a crash, say).
    Unreadable,
    /// The last acknowledged record.
    At(Head),
}

/// Reads `ledger.head`, telling a missing file from an unreadable one.
pub fn head_state(rt: BorrowedFd<'_>) -> HeadState {
    let mut f = match fs_util::open_regular_at(rt, HEAD_FILE.as_ref()) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return HeadState::Absent,
        Err(_) => return HeadState::Unreadable,
    };
    let mut buf = Vec::new();
    match Read::by_ref(&mut f).take(4096).read_to_end(&mut buf) {
        Ok(_) => {
            serde_json::from_slice(buf.trim_ascii()).map_or(HeadState::Unreadable, HeadState::At)
        }
        Err(_) => HeadState::Unreadable,
    }
}

impl HeadState {
    /// The head, when there is a readable one.
    pub fn head(self) -> Option<Head> {
        match self {
            HeadState::At(h) => Some(h),
            _ => None,
        }
    }
}

/// Why the ledger, whose valid prefix ends at `tail`, has lost records its
/// head anchor says were written (`None`: nothing says so).
pub fn lost_records(rt: BorrowedFd<'_>, tail: &Tail) -> Option<String> {
    match head_state(rt) {
        HeadState::Absent if tail.seq > 0 => Some(
            "`ledger.head`, the anchor of the last record written, is missing, so a cut-off end could not be seen".into(),
        ),
        HeadState::At(h) if h.seq > tail.seq => Some(format!(
            "seq {} was written but the ledger now ends at seq {}: records were cut off",
            h.seq, tail.seq
        )),
        HeadState::At(h) if h.seq == tail.seq && h.seq > 0 && h.hash != tail.hash => Some(format!(
            "the record at seq {} is not the one that was written (its hash differs from ledger.head)",
            h.seq
        )),
        _ => None,
    }
}

/// The reason [`DAMAGED_FILE`] holds, if it exists.
pub fn damaged_mark(rt: BorrowedFd<'_>) -> Option<String> {
    let mut f = match fs_util::open_regular_at(rt, DAMAGED_FILE.as_ref()) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(_) => return Some("`.agent-runtime/ledger.damaged` is there".into()),
    };
    let mut buf = Vec::new();
    let _ = Read::by_ref(&mut f).take(4096).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).trim().to_string();
    Some(if text.is_empty() {
        "`.agent-runtime/ledger.damaged` is there".into()
    } else {
        text
    })
}

/// Leaves [`DAMAGED_FILE`] with `why` (atomically, unsynced: it only stops
/// writers sooner; every full read finds the damage again).
pub fn mark_damaged(rt: BorrowedFd<'_>, why: &str) {
    if damaged_mark(rt).is_some() {
        return;
    }
    let line = format!("{}\n", why.replace('\n', " "));
    let _ = fs_util::write_atomic(
        rt,
        DAMAGED_FILE.as_ref(),
        line.as_bytes(),
        0o600,
        true,
        Keep::Cache,
    );
}

/// Takes [`DAMAGED_FILE`] away (`ckpt repair`, once the ledger is whole).
pub(crate) fn clear_damaged(rt: BorrowedFd<'_>) -> io::Result<()> {
    match rustix::fs::unlinkat(rt, DAMAGED_FILE, rustix::fs::AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

impl Ledger {
    /// Opens the ledger living in the runtime directory `rt`; every append
    /// makes what `durable` holds durable before it writes its records.
    pub fn new(rt: Arc<OwnedFd>, clock: Arc<Clock>, durable: Arc<Durable>) -> Ledger {
        Ledger {
            rt,
            clock,
            durable,
            lock_timeout: Duration::from_secs(5),
            progress: None,
        }
    }

    /// Has reads of the whole ledger tell `sink` how far they got.
    pub fn with_progress(mut self, sink: Option<crate::progress::Sink>) -> Ledger {
        self.progress = sink;
        self
    }

    /// Sets how long [`Ledger::lock`] waits for another writer.
    pub fn set_lock_timeout(&mut self, t: Duration) {
        self.lock_timeout = t;
    }

    /// Copies the records from byte `end` (where a cut record ends) up to
    /// `upto` (a record a read returned) to gc's temporary file and syncs
    /// it, without the writer lock: the long part of a cut, done while
    /// hooks go on appending. `None` when the ledger no longer holds
    /// `upto` there ([`LedgerLock::compact`] then copies everything).
    pub fn precopy(&self, end: u64, upto: &Tail) -> Result<Option<Precopy>, LedgerError> {
        let Some(file) = self.open_for_read()? else {
            return Ok(None);
        };
        if upto.end < end || !ends_at(&file, upto)? {
            return Ok(None);
        }
        let st = crate::sys::fstat(&file).map_err(|e| io_err("stat", e))?;
        let rt = self.rt.as_fd();
        let copy = (|| -> io::Result<File> {
            let mut out = new_compact_tmp(rt)?;
            copy_range(&file, &mut out, end, upto.end, self.progress)?;
            self.durable.file_now(&out)?;
            Ok(out)
        })();
        match copy {
            Ok(out) => Ok(Some(Precopy {
                file: out,
                of: (st.dev, st.ino),
                end,
                upto: upto.clone(),
            })),
            Err(e) => {
                let _ = rustix::fs::unlinkat(rt, COMPACT_TMP, rustix::fs::AtFlags::empty());
                Err(io_err("copy the records gc keeps from", e))
            }
        }
    }

    /// Takes the writer lock, validates the tail and repairs a torn last record.
    /// Refuses ([`LedgerError::Damaged`]) a ledger known or found damaged.
    pub fn lock(&self) -> Result<LedgerLock<'_>, LedgerError> {
        self.lock_with(true)
    }

    /// The writer lock for `ckpt repair`: taken whatever state the ledger
    /// is in (no damage check, no tail repair); its tail is unknown.
    pub fn lock_for_repair(&self) -> Result<LedgerLock<'_>, LedgerError> {
        self.lock_with(false)
    }

    fn lock_with(&self, check: bool) -> Result<LedgerLock<'_>, LedgerError> {
        // Content this process wrote for the records to come is made durable
        // before them (and outside the lock, so other writers do not wait on it).
        self.durable
            .before_records()
            .map_err(|e| io_err("sync the content named by", e))?;
        let lock_fd = rustix::fs::openat(
            &*self.rt,
            LOCK_FILE,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            crate::sys::mode(0o600),
        )
        .map_err(|e| io_err("open the lock file", e))?;
        // Best effort, as for every lock file: the lock works whatever its mode.
        let _ = fs_util::fix_private_mode(lock_fd.as_fd());
        let lock = File::from(lock_fd);
        let start = Instant::now();
        let mut backoff = Duration::from_millis(1);
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    if start.elapsed() >= self.lock_timeout {
                        return Err(LedgerError::Busy(self.lock_timeout));
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(50));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io_err("lock", e)),
            }
        }
        failpoint::hit("ledger.after_lock").map_err(|e| io_err("lock", e))?;
        crate::timing("ledger: locked");
        let existed = fs_util::entry_at(self.rt.as_fd(), LEDGER_FILE.as_ref())
            .map_err(|e| io_err("stat", e))?
            != fs_util::EntryKind::Absent;
        let fd = rustix::fs::openat(
            &*self.rt,
            LEDGER_FILE,
            OFlags::RDWR | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            crate::sys::mode(0o600),
        )
        .map_err(|e| {
            if e == rustix::io::Errno::LOOP {
                LedgerError::Unsafe("is a symlink".into())
            } else {
                io_err("open", e)
            }
        })?;
        let st = crate::sys::fstat(&fd).map_err(|e| io_err("stat", e))?;
        if st.file_type() != FileType::RegularFile {
            return Err(LedgerError::Unsafe("is not a regular file".into()));
        }
        if st.nlink != 1 {
            return Err(LedgerError::Unsafe(format!("has {} hard links", st.nlink)));
        }
        if st.uid != rustix::process::geteuid().as_raw() {
            return Err(LedgerError::Unsafe("belongs to another user".into()));
        }
        let mut file = File::from(fd);
        if !existed {
            rustix::fs::fchmod(&file, crate::sys::mode(0o600)).map_err(|e| io_err("chmod", e))?;
            self.durable
                .dir_now(self.rt.as_fd())
                .map_err(|e| io_err("sync the directory of", e))?;
        }
        if !check {
            return Ok(LedgerLock {
                ledger: self,
                _lock: lock,
                file,
                tail: Tail::default(),
            });
        }
        if let Some(why) = damaged_mark(self.rt.as_fd()) {
            return Err(LedgerError::Damaged(why));
        }
        let (tail, torn) = match scan_tail(&mut file, st.size) {
            Err(LedgerError::Corrupt { problem, .. }) => {
                mark_damaged(self.rt.as_fd(), &problem);
                return Err(LedgerError::Damaged(problem));
            }
            r => r?,
        };
        if let Some(why) = lost_records(self.rt.as_fd(), &tail) {
            mark_damaged(self.rt.as_fd(), &why);
            return Err(LedgerError::Damaged(why));
        }
        let mut guard = LedgerLock {
            ledger: self,
            _lock: lock,
            file,
            tail,
        };
        if let Some(torn) = torn {
            guard.repair(torn)?;
        }
        Ok(guard)
    }

    /// Appends one record (lock, write, fdatasync, unlock).
    pub fn append(&self, draft: Draft) -> Result<Appended, LedgerError> {
        let mut g = self.lock()?;
        let mut v = g.append(&[draft])?;
        Ok(v.remove(0))
    }

    /// Reads every valid record, stopping at corruption; never fails on a torn tail.
    pub fn read(&self) -> Result<LedgerRead, LedgerError> {
        let mut records = Vec::new();
        let mut read = self.scan(|_, rec| {
            records.push(rec);
            Ok(())
        })?;
        read.records = records;
        Ok(read)
    }

    /// The last `n` records (raw line and record), read from the end of the
    /// file without reading the rest: each line's hash is checked, the
    /// lines are chained to each other (and the first to the one before
    /// it, or to nothing at the start), and the last to `ledger.head`. `None`
    /// when that window is not clean (a damaged, torn or cut-off end, or a
    /// ledger marked damaged): the caller reads the whole ledger, which
    /// says what is wrong. Damage further back is not seen here: `ckpt
    /// verify` checks the whole chain.
    pub fn read_last(&self, n: usize) -> Result<Option<Vec<RawRecord>>, LedgerError> {
        if damaged_mark(self.rt.as_fd()).is_some() {
            return Ok(None);
        }
        let Some(mut file) = self.open_for_read()? else {
            return Ok(Some(Vec::new()));
        };
        let size = crate::sys::fstat(&file)
            .map_err(|e| io_err("stat", e))?
            .size;
        if size == 0 || n == 0 {
            return Ok(Some(Vec::new()));
        }
        // Windows from the end, doubled until they hold n + 1 whole lines
        // (the one before the first shows its link) or reach the start.
        let mut window = 64 * 1024u64;
        let (start, buf) = loop {
            let start = size.saturating_sub(window);
            let mut buf = vec![0u8; (size - start) as usize];
            file.seek(SeekFrom::Start(start))
                .map_err(|e| io_err("seek", e))?;
            file.read_exact(&mut buf).map_err(|e| io_err("read", e))?;
            let lines = buf.iter().filter(|&&b| b == b'\n').count();
            if start == 0 || lines > n + 1 {
                break (start, buf);
            }
            window *= 4;
        };
        if buf.last() != Some(&b'\n') {
            return Ok(None);
        }
        // Whole lines only: a window that starts inside a line drops it.
        let body = if start == 0 {
            &buf[..buf.len() - 1]
        } else {
            let first = buf.iter().position(|&b| b == b'\n').unwrap_or(0);
            &buf[first + 1..buf.len() - 1]
        };
        let lines: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
        let from = lines.len().saturating_sub(n + 1);
        let mut prev: Option<(u64, String)> = None;
        let mut out = Vec::with_capacity(n);
        for (i, line) in lines[from..].iter().enumerate() {
            let (check, record) = match parse_one(line, true, true) {
                Parsed::Valid(check, Some(record)) => (check, record),
                _ => return Ok(None),
            };
            let linked = match &prev {
                Some((seq, hash)) => check.seq() == seq + 1 && check.prev() == Some(hash.as_str()),
                // The very first record of the ledger links to nothing, or
                // to the record a recorded cut took away.
                None if start == 0 && from == 0 => {
                    (check.seq() == 1 && check.prev().is_none())
                        || from_cut(self.rt.as_fd(), check.seq(), check.prev()).is_some()
                }
                // The first line of the window shows only the link checked next.
                None => true,
            };
            if !linked {
                return Ok(None);
            }
            prev = Some((check.seq(), check.hash().to_string()));
            if i + from >= lines.len().saturating_sub(n) {
                out.push((line.to_vec(), *record));
            }
        }
        let tail = Tail {
            seq: prev.as_ref().map_or(0, |p| p.0),
            hash: prev.map(|p| p.1),
            end: size,
        };
        if lost_records(self.rt.as_fd(), &tail).is_some() {
            return Ok(None);
        }
        Ok(Some(out))
    }

    /// The records after `from` (a position an earlier read returned: its
    /// seq, hash and end), read without the rest of the file: the line
    /// ending at `from.end` must be that record, every later line must
    /// chain to it, and the new end must agree with `ledger.head`; with
    /// the end offset of each record read. `None`
    /// when any of that fails, or the ledger is marked damaged: the caller
    /// reads everything (a cache's anchor is stale after `ckpt repair`
    /// rewrote the ledger). Damage before `from` is not seen here: `ckpt
    /// verify` checks the whole chain.
    pub fn read_after(&self, from: &Tail) -> Result<Option<(LedgerRead, Vec<u64>)>, LedgerError> {
        let mut records = Vec::new();
        let mut ends = Vec::new();
        let read = self.scan_from(Some(from), |_, r, end| {
            records.push(r);
            ends.push(end);
            Ok(())
        })?;
        Ok(read.map(|mut read| {
            read.records = records;
            (read, ends)
        }))
    }

    /// Every valid record with its raw line (without `\n`) and end offset:
    /// after `from` (checked as [`read_after`](Self::read_after) checks it;
    /// `None` when that refuses), or the whole ledger from its newest cut
    /// when `from` is `None`. The returned read has no `records`.
    pub(crate) fn scan_from(
        &self,
        from: Option<&Tail>,
        mut visit: impl FnMut(&[u8], Record, u64) -> Result<(), LedgerError>,
    ) -> Result<Option<LedgerRead>, LedgerError> {
        let Some(file) = self.open_for_read()? else {
            return Ok(match from {
                None => Some(LedgerRead::default()),
                Some(_) => None,
            });
        };
        let (start, cut) = match from {
            None => start_of(self.rt.as_fd(), &file),
            Some(f) => {
                if damaged_mark(self.rt.as_fd()).is_some() {
                    return Ok(None);
                }
                let size = crate::sys::fstat(&file)
                    .map_err(|e| io_err("stat", e))?
                    .size;
                if f.end > size || (f.seq == 0) != (f.end == 0) {
                    return Ok(None);
                }
                if f.end > 0 && !ends_at(&file, f)? {
                    return Ok(None);
                }
                (f.clone(), None)
            }
        };
        let mut end = start.end;
        let mut read = read_lines_after(file, &start, true, self.progress, &mut |raw, _, rec| {
            end += raw.len() as u64 + 1;
            match rec {
                Some(r) => visit(raw, r, end),
                None => Ok(()),
            }
        })?;
        read.cut = cut;
        if from.is_some()
            && (read.corruption.is_some()
                || read.torn.is_some()
                || lost_records(self.rt.as_fd(), &read.tail).is_some())
        {
            return Ok(None);
        }
        Ok(Some(read))
    }

    /// The records whose lines end at the given offsets with the given
    /// lengths (without `\n`), each checked on its own (hash, seq): `None`
    /// when any is not there as named.
    pub(crate) fn read_lines_at(
        &self,
        spans: &[(u64, u64, u32)],
    ) -> Result<Option<Vec<RawRecord>>, LedgerError> {
        let Some(file) = self.open_for_read()? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(spans.len());
        for &(seq, end, len) in spans {
            let len = len as u64;
            if end < len + 1 {
                return Ok(None);
            }
            let mut buf = vec![0u8; len as usize + 1];
            if std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, end - len - 1).is_err() {
                return Ok(None);
            }
            if buf.pop() != Some(b'\n') {
                return Ok(None);
            }
            match record_of_line(&buf) {
                Ok(r) if r.seq == seq => out.push((buf, r)),
                _ => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// [`read`](Self::read), with the end offset (just after its `\n`) of
    /// each record: positions a later [`read_after`](Self::read_after) can
    /// start from.
    pub fn read_with_ends(&self) -> Result<(LedgerRead, Vec<u64>), LedgerError> {
        let Some(file) = self.open_for_read()? else {
            return Ok((LedgerRead::default(), Vec::new()));
        };
        let (from, cut) = start_of(self.rt.as_fd(), &file);
        let (mut read, ends) = Self::read_ends_of(file, &from, self.progress)?;
        read.cut = cut;
        Ok((read, ends))
    }

    fn read_ends_of(
        file: File,
        from: &Tail,
        progress: Option<crate::progress::Sink>,
    ) -> Result<(LedgerRead, Vec<u64>), LedgerError> {
        let mut records = Vec::new();
        let mut ends = Vec::new();
        let mut end = from.end;
        // Valid records are contiguous: each ends a line after the last.
        let mut read = read_lines_after(file, from, true, progress, &mut |raw, _, rec| {
            end += raw.len() as u64 + 1;
            if let Some(r) = rec {
                records.push(r);
                ends.push(end);
            }
            Ok(())
        })?;
        read.records = records;
        Ok((read, ends))
    }

    /// Leaves the damage `read` found (a garbled record, a cut-off end) for
    /// writers to see ([`DAMAGED_FILE`]); returns its one-line reason.
    pub fn note_damage(&self, read: &LedgerRead) -> Option<String> {
        let why = match &read.corruption {
            Some(c) => Some(format!(
                "seq {} (line {}) is damaged: {}",
                c.seq, c.line, c.problem
            )),
            None => lost_records(self.rt.as_fd(), &read.tail),
        }?;
        mark_damaged(self.rt.as_fd(), &why);
        Some(why)
    }

    /// Reads every valid record, calling `visit` with each raw line (without `\n`)
    /// and its parsed record. The returned `LedgerRead` has no `records`.
    pub fn scan(
        &self,
        mut visit: impl FnMut(&[u8], Record) -> Result<(), LedgerError>,
    ) -> Result<LedgerRead, LedgerError> {
        let Some(file) = self.open_for_read()? else {
            return Ok(LedgerRead::default());
        };
        let (from, cut) = start_of(self.rt.as_fd(), &file);
        let mut read =
            read_lines_after(
                file,
                &from,
                true,
                self.progress,
                &mut |raw, _, rec| match rec {
                    Some(r) => visit(raw, r),
                    None => Ok(()),
                },
            )?;
        read.cut = cut;
        Ok(read)
    }

    /// Checks the whole chain (every line's hash, `seq` and `prev`) and calls
    /// `visit` with each raw line and its header, without building records;
    /// bodies can be parsed on demand with `Body::parse`. The line's JSON is
    /// not fully validated here (its hash is).
    pub fn scan_headers(
        &self,
        mut visit: impl FnMut(&[u8], &LineCheck<'_>) -> Result<(), LedgerError>,
    ) -> Result<LedgerRead, LedgerError> {
        let Some(file) = self.open_for_read()? else {
            return Ok(LedgerRead::default());
        };
        let (from, cut) = start_of(self.rt.as_fd(), &file);
        let mut read =
            read_lines_after(file, &from, false, self.progress, &mut |raw, check, _| {
                visit(raw, check)
            })?;
        read.cut = cut;
        Ok(read)
    }

    fn open_for_read(&self) -> Result<Option<File>, LedgerError> {
        let fd = match rustix::fs::openat(
            &*self.rt,
            LEDGER_FILE,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(rustix::io::Errno::LOOP) => {
                return Err(LedgerError::Unsafe("is a symlink".into()));
            }
            Err(e) => return Err(io_err("open", e)),
        };
        let st = crate::sys::fstat(&fd).map_err(|e| io_err("stat", e))?;
        if st.file_type() != FileType::RegularFile {
            return Err(LedgerError::Unsafe("is not a regular file".into()));
        }
        Ok(Some(File::from(fd)))
    }

    /// Returns the ledger's runtime directory handle.
    pub fn runtime_dir(&self) -> &Arc<OwnedFd> {
        &self.rt
    }
}

type RecordVisitor<'a> =
    dyn FnMut(&[u8], &LineCheck<'_>, Option<Record>) -> Result<(), LedgerError> + 'a;

/// One line, checked and parsed on its own (no chain yet).
enum Parsed<'a> {
    /// Hash and header fine (and the body, when asked for).
    Valid(LineCheck<'a>, Option<Box<Record>>),
    /// Hash and header fine, but the body is not a valid record of its kind.
    BadBody(LineCheck<'a>, String),
    /// Not a record (torn, damaged, over-long, no newline).
    Invalid(String),
}

fn parse_one(line: &[u8], terminated: bool, with_body: bool) -> Parsed<'_> {
    if !terminated {
        return Parsed::Invalid("no final newline".into());
    }
    match check_line(line) {
        Err(p) => Parsed::Invalid(p),
        Ok(c) if !with_body => Parsed::Valid(c, None),
        Ok(c) => match to_record(line, &c) {
            Ok(record) => Parsed::Valid(c, Some(Box::new(record))),
            Err(problem) => Parsed::BadBody(c, problem),
        },
    }
}

/// A batch of lines of one buffer: (start, end, terminated) spans.
type Spans = Vec<(usize, usize, bool)>;

/// Checks and parses a batch of lines, on several threads when it is big: the
/// hash and the JSON of each line are independent of the others.
fn parse_batch<'a>(
    buf: &'a [u8],
    spans: &[(usize, usize, bool)],
    with_body: bool,
) -> Vec<Parsed<'a>> {
    // Small batches do not ask for the CPU count: that reads cgroup files.
    let threads = if spans.len() < 4096 {
        1
    } else {
        crate::par::cpus().min(4)
    };
    if threads < 2 {
        return spans
            .iter()
            .map(|&(s, e, t)| parse_one(&buf[s..e], t, with_body))
            .collect();
    }
    let per = spans.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = spans
            .chunks(per)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|&(s, e, t)| parse_one(&buf[s..e], t, with_body))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(spans.len());
        for h in handles {
            match h.join() {
                Ok(v) => out.extend(v),
                Err(p) => std::panic::resume_unwind(p),
            }
        }
        out
    })
}

/// Whether the record `at` names (its seq and hash) is the line that ends
/// just before byte `at.end` of `file` (a record is at most MAX_LINE long).
fn ends_at(file: &File, at: &Tail) -> Result<bool, LedgerError> {
    let back = at.end.min(MAX_LINE as u64 + 1);
    let mut buf = vec![0u8; back as usize];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut buf, at.end - back)
        .map_err(|e| io_err("read", e))?;
    let Some(body) = buf.strip_suffix(b"\n") else {
        return Ok(false);
    };
    let line = match memchr::memrchr(b'\n', body) {
        Some(i) => &body[i + 1..],
        None if back == at.end => body,
        None => return Ok(false),
    };
    Ok(check_line(line).is_ok_and(|c| c.seq() == at.seq && Some(c.hash()) == at.hash.as_deref()))
}

/// Validates records one after another and classifies damage (B5), from
/// just after the record `from` names (its seq, hash
/// and end): the first line read must link to it. Line numbers in a
/// [`Corruption`] then count from there.
fn read_lines_after(
    mut file: File,
    from: &Tail,
    with_body: bool,
    progress: Option<crate::progress::Sink>,
    visit: &mut RecordVisitor<'_>,
) -> Result<LedgerRead, LedgerError> {
    let size = crate::sys::fstat(&file).map_or(0, |st| st.size);
    let mut out = LedgerRead::default();
    let mut first_bad: Option<Corruption> = None;
    let mut line_no = 0u64;
    let mut expect_seq = from.seq + 1;
    // The previous record's hash, in a reused buffer (empty: none yet).
    let mut prev_hash: Vec<u8> = Vec::with_capacity(71);
    prev_hash.extend_from_slice(from.hash.as_deref().unwrap_or_default().as_bytes());
    let mut last_end = from.end;
    if from.end > 0 {
        file.seek(SeekFrom::Start(from.end))
            .map_err(|e| io_err("seek", e))?;
    }
    let mut stop = false;

    let mut on_batch = |base: u64, buf: &[u8], spans: &Spans| -> Result<(), LedgerError> {
        if stop {
            return Ok(());
        }
        crate::progress::report(
            progress,
            "reading the ledger",
            (base + buf.len() as u64).min(size),
            size,
            crate::progress::Unit::Bytes,
        );
        let parsed = parse_batch(buf, spans, with_body);
        for (&(s, e, _), p) in spans.iter().zip(parsed) {
            if stop {
                break;
            }
            line_no += 1;
            let offset = base + s as u64;
            let check = match &p {
                Parsed::Invalid(problem) => {
                    if first_bad.is_none() {
                        first_bad = Some(Corruption {
                            seq: expect_seq,
                            line: line_no,
                            offset,
                            problem: problem.clone(),
                        });
                    }
                    continue;
                }
                Parsed::Valid(c, _) | Parsed::BadBody(c, _) => c,
            };
            if first_bad.is_some() {
                // A valid line after a bad one: the bad one was not a torn tail.
                stop = true;
                break;
            }
            let seq = check.seq();
            let prev_ok = match check.prev() {
                None => prev_hash.is_empty(),
                Some(p) => p.as_bytes() == prev_hash.as_slice(),
            };
            let problem = if seq != expect_seq && expect_seq == 1 && line_no == 1 {
                Some(format!(
                    "the ledger starts at seq {seq}: the records before it are missing, and no cut `ckpt gc` recorded in `{BASE_FILE}` accounts for them"
                ))
            } else if seq != expect_seq {
                Some(format!(
                    "seq {seq} where seq {expect_seq} was expected (a record is missing, duplicated or out of order)"
                ))
            } else if !prev_ok {
                Some(
                    "`prev` does not match the previous record's hash (the chain is broken)".into(),
                )
            } else {
                None
            };
            if let Some(problem) = problem {
                first_bad = Some(Corruption {
                    seq: expect_seq,
                    line: line_no,
                    offset,
                    problem,
                });
                stop = true;
                break;
            }
            match p {
                Parsed::Valid(check, record) => {
                    expect_seq += 1;
                    prev_hash.clear();
                    prev_hash.extend_from_slice(check.hash().as_bytes());
                    last_end = base + e as u64 + 1;
                    visit(&buf[s..e], &check, record.map(|r| *r))?;
                }
                Parsed::BadBody(_, problem) => {
                    first_bad = Some(Corruption {
                        seq: expect_seq,
                        line: line_no,
                        offset,
                        problem,
                    });
                    stop = true;
                    break;
                }
                Parsed::Invalid(_) => unreachable!("handled above"),
            }
        }
        Ok(())
    };
    split_lines(&mut file, from.end, &mut on_batch)?;
    crate::progress::report(
        progress,
        "reading the ledger",
        size,
        size,
        crate::progress::Unit::Bytes,
    );
    if expect_seq > from.seq + 1 {
        out.tail = Tail {
            seq: expect_seq - 1,
            hash: Some(String::from_utf8_lossy(&prev_hash).into_owned()),
            end: last_end,
        };
    } else {
        out.tail = from.clone();
    }
    let file_len = file.seek(SeekFrom::End(0)).map_err(|e| io_err("seek", e))?;
    match first_bad {
        Some(c) if stop => out.corruption = Some(c),
        Some(c) => {
            out.torn = Some(TornTail {
                offset: c.offset,
                bytes: file_len - c.offset,
            });
        }
        None => {}
    }
    Ok(out)
}

type BatchVisitor<'a> = dyn FnMut(u64, &[u8], &Spans) -> Result<(), LedgerError> + 'a;

/// Splits a file into batches of lines with bounded memory: a line longer than
/// the cap is reported (cut to the cap, so it fails its check) without being
/// buffered whole.
fn split_lines(
    file: &mut File,
    start: u64,
    on_batch: &mut BatchVisitor<'_>,
) -> Result<(), LedgerError> {
    // Small ledgers get a small buffer (a hook reads a short ledger often); the
    // buffer is zeroed only when it grows, never per read.
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let chunk: usize = (size as usize + 1).clamp(64 * 1024, 8 * 1024 * 1024);
    let mut buf: Vec<u8> = vec![0u8; chunk];
    let mut filled = 0usize;
    let mut buf_offset = start; // file offset of buf[0]
    let mut skipping_long = false;
    let mut spans: Spans = Vec::new();
    loop {
        if buf.len() - filled < chunk / 2 {
            buf.resize(filled + chunk, 0);
        }
        let n = loop {
            match file.read(&mut buf[filled..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_err("read", e)),
            }
        };
        filled += n;
        let eof = n == 0;
        let data = &buf[..filled];
        spans.clear();
        let mut start = 0usize;
        for end in memchr::memchr_iter(b'\n', data) {
            if skipping_long {
                skipping_long = false;
            } else {
                spans.push((start, end, true));
            }
            start = end + 1;
        }
        if eof && start < filled && !skipping_long {
            spans.push((start, filled, false));
            start = filled;
        }
        if !eof && filled - start > MAX_LINE && !skipping_long {
            // Report the over-long line once, then drop bytes until its newline.
            spans.push((start, start + MAX_LINE, true));
            skipping_long = true;
        }
        if !spans.is_empty() {
            on_batch(buf_offset, data, &spans)?;
        }
        if eof {
            return Ok(());
        }
        if skipping_long {
            start = filled;
        }
        buf.copy_within(start..filled, 0);
        filled -= start;
        buf_offset += start as u64;
    }
}

/// Finds the last valid record near the end of the file and any torn bytes after it.
fn scan_tail(file: &mut File, len: u64) -> Result<(Tail, Option<TornTail>), LedgerError> {
    if len == 0 {
        return Ok((Tail::default(), None));
    }
    let mut window = 16 * 1024u64;
    loop {
        let start = len.saturating_sub(window);
        let mut buf = vec![0u8; (len - start) as usize];
        file.seek(SeekFrom::Start(start))
            .map_err(|e| io_err("seek", e))?;
        file.read_exact(&mut buf).map_err(|e| io_err("read", e))?;
        // The window's last two complete lines, newest first, bounded by its
        // last three newlines (its first line is partial unless start == 0).
        // Searched from the end, byte by byte: a few lines, and no `memchr`,
        // whose first call costs a hook ~75 µs of CPU-feature detection
        // (`cpuid` traps on a VM).
        let mut nls = [0usize; 3];
        let mut found = 0;
        let mut upto = buf.len();
        while found < 3
            && let Some(i) = buf[..upto].iter().rposition(|&b| b == b'\n')
        {
            nls[found] = i;
            found += 1;
            upto = i;
        }
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(2);
        for k in 0..found.min(2) {
            let begin = if k + 1 < found {
                Some(nls[k + 1] + 1)
            } else {
                (start == 0).then_some(0)
            };
            if let Some(b) = begin {
                spans.push((b, nls[k]));
            }
        }
        // At most one bad complete line may precede the fragment and still
        // count as a torn write (B5).
        for &(ls, le) in &spans {
            if let Ok(c) = check_line(&buf[ls..le]) {
                let end = start + le as u64 + 1;
                let tail = Tail {
                    seq: c.seq(),
                    hash: Some(c.hash().to_string()),
                    end,
                };
                let torn = (end < len).then_some(TornTail {
                    offset: end,
                    bytes: len - end,
                });
                return Ok((tail, torn));
            }
        }
        if spans.len() >= 2 {
            let (ls, _) = spans[1];
            return Err(LedgerError::Corrupt {
                seq: 0,
                line: 0,
                problem: format!(
                    "the last two records (from byte {}) are both damaged, which a torn write cannot cause; run `ckpt verify`",
                    start + ls as u64
                ),
            });
        }
        if start == 0 {
            // Nothing valid at all: the very first write was torn.
            return Ok((
                Tail::default(),
                Some(TornTail {
                    offset: 0,
                    bytes: len,
                }),
            ));
        }
        if window >= 2 * MAX_LINE as u64 + 2 {
            return Err(LedgerError::Corrupt {
                seq: 0,
                line: 0,
                problem: "no valid record in the last 2 MiB of the ledger; run `ckpt verify`"
                    .into(),
            });
        }
        window *= 4;
    }
}

/// The head anchor as last written: `(seq, hash)`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct Head {
    /// The last acknowledged seq.
    pub seq: u64,
    /// Its hash.
    pub hash: Option<String>,
}

fn write_head(rt: std::os::fd::BorrowedFd<'_>, tail: &Tail) {
    // Best effort and unsynced (see HEAD_FILE): a fixed-size record written in
    // place so a reader never sees a mix of two lengths.
    let Ok(mut body) = serde_json::to_vec(&Head {
        seq: tail.seq,
        hash: tail.hash.clone(),
    }) else {
        return;
    };
    body.resize(127, b' ');
    body.push(b'\n');
    if let Ok(fd) = rustix::fs::openat(
        rt,
        HEAD_FILE,
        OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        crate::sys::mode(0o600),
    ) {
        let _ = fs_util::fix_private_mode(fd.as_fd());
        let _ = rustix::io::pwrite(&fd, &body, 0);
    }
}

/// Reads the head anchor, if there is a readable one.
pub fn read_head(rt: std::os::fd::BorrowedFd<'_>) -> Option<Head> {
    head_state(rt).head()
}

/// Checks the outcome of the ledger's `fdatasync`. After a failure it never
/// retries nor reports success (fsyncgate), and leaves a flag for `verify`.
fn synced_or_flagged(ledger: &Ledger, synced: io::Result<()>) -> Result<(), LedgerError> {
    if let Err(e) = synced {
        let _ = fs_util::write_atomic(
            ledger.rt.as_fd(),
            NEEDS_VERIFY_FILE.as_ref(),
            b"an fdatasync of ledger.jsonl failed; run `ckpt verify`\n",
            0o600,
            false,
            Keep::Named(&ledger.durable),
        )
        .and_then(|()| ledger.durable.before_records());
        return Err(LedgerError::SyncFailed(e));
    }
    failpoint::hit("ledger.after_fdatasync").map_err(|e| io_err("append to", e))?;
    crate::timing("ledger: synced");
    Ok(())
}

/// Where gc builds the shortened ledger before renaming it over the whole.
const COMPACT_TMP: &str = "ledger.jsonl.compact-tmp";

/// A fresh, empty `ledger.jsonl.compact-tmp` (a crash's leftover removed).
fn new_compact_tmp(rt: std::os::fd::BorrowedFd<'_>) -> io::Result<File> {
    let _ = rustix::fs::unlinkat(rt, COMPACT_TMP, rustix::fs::AtFlags::empty());
    fs_util::create_excl(rt, COMPACT_TMP.as_ref(), 0o600)
}

/// Copies bytes `[from, to)` of `src` to the end of `out`, telling
/// `progress` how far it got.
fn copy_range(
    src: &File,
    out: &mut File,
    from: u64,
    to: u64,
    progress: Option<crate::progress::Sink>,
) -> io::Result<()> {
    let mut buf = vec![0u8; (to.saturating_sub(from)).min(8 << 20) as usize];
    let mut at = from;
    while at < to {
        let n = buf.len().min((to - at) as usize);
        std::os::unix::fs::FileExt::read_exact_at(src, &mut buf[..n], at)?;
        out.write_all(&buf[..n])?;
        at += n as u64;
        crate::progress::report(
            progress,
            "copying the records gc keeps",
            at - from,
            to - from,
            crate::progress::Unit::Bytes,
        );
    }
    Ok(())
}

/// The records after a cut, copied and synced before gc takes the writer
/// lock ([`Ledger::precopy`]), for [`LedgerLock::compact`].
pub struct Precopy {
    file: File,
    /// The ledger file copied from (device, inode).
    of: (u64, u64),
    /// Where the cut record ends: the copy starts there.
    end: u64,
    /// The last record copied.
    upto: Tail,
}

/// The writer lock, held until dropped. Appends made through it are durable
/// when `append` returns.
#[must_use = "dropping the lock releases it; append through it first"]
pub struct LedgerLock<'a> {
    ledger: &'a Ledger,
    _lock: File,
    file: File,
    tail: Tail,
}

impl<'a> LedgerLock<'a> {
    /// The last valid record's position.
    pub fn tail(&self) -> &Tail {
        &self.tail
    }

    /// Appends records in one `write` and one `fdatasync`: the content
    /// they name ([`Durable::content`]) is made durable first, what no
    /// record names ([`Durable::unnamed`]) beside the ledger's own sync.
    /// Returns once both are durable; an error of the latter is returned
    /// after the records are durable.
    pub fn append(&mut self, drafts: &[Draft]) -> Result<Vec<Appended>, LedgerError> {
        let (tail, out) = self.write_records(drafts)?;
        let (own, beside) = self.ledger.durable.with_records(&self.file);
        synced_or_flagged(self.ledger, own)?;
        self.tail = tail;
        write_head(self.ledger.rt.as_fd(), &self.tail);
        beside.map_err(|e| io_err("sync the files written beside", e))?;
        Ok(out)
    }

    /// Builds the records on the tail and writes them in one `write`, not
    /// yet synced; returns the tail they make.
    fn write_records(&mut self, drafts: &[Draft]) -> Result<(Tail, Vec<Appended>), LedgerError> {
        // Anything queued since the lock was taken is durable before the records.
        self.ledger
            .durable
            .before_records()
            .map_err(|e| io_err("sync the content named by", e))?;
        let mut buf = Vec::new();
        let mut out = Vec::with_capacity(drafts.len());
        let mut seq = self.tail.seq;
        let mut prev = self.tail.hash.clone();
        for d in drafts {
            seq += 1;
            let ts = self.ledger.clock.now_rfc3339();
            let (line, hash) = build_line(seq, &ts, prev.as_deref(), d)?;
            buf.extend_from_slice(&line);
            prev = Some(hash.clone());
            out.push(Appended { seq, hash });
        }
        // One write of pre-built bytes, under the lock (RELIABILITY rule 1).
        self.file
            .write_all(&buf)
            .map_err(|e| io_err("append to", e))?;
        failpoint::hit("ledger.before_fdatasync").map_err(|e| io_err("append to", e))?;
        crate::timing("ledger: written");
        let tail = Tail {
            seq,
            hash: prev,
            end: self.tail.end + buf.len() as u64,
        };
        Ok((tail, out))
    }

    /// `ckpt gc`: takes the records up to `cut.seq` out of the ledger. That
    /// record must end at byte `end` of the file (a position a read under
    /// this lock, or since only appends, returned). The cut is added to
    /// `ledger.base` and synced; then the records after it are copied to a
    /// new file, synced, renamed over the ledger, and the directory synced.
    /// With a [`Precopy`] of the same file (made before this lock, so that
    /// hooks do not wait on a long copy), only what was appended since it
    /// is copied. A crash leaves the whole ledger or the shortened one, and
    /// both read (a reader that opened the whole one before the rename
    /// reads it whole). Returns the bytes taken out: 0 when the ledger
    /// already starts after the cut (a second run).
    pub fn compact(
        &mut self,
        cut: &Cut,
        end: u64,
        pre: Option<Precopy>,
    ) -> Result<u64, LedgerError> {
        let rt = self.ledger.rt.as_fd();
        let d = &self.ledger.durable;
        let anchor = Tail {
            seq: cut.seq,
            hash: Some(cut.hash.clone()),
            end,
        };
        if start_of(rt, &self.file).0
            == (Tail {
                end: 0,
                ..anchor.clone()
            })
        {
            return Ok(0);
        }
        if end == 0 || end > self.tail.end || !ends_at(&self.file, &anchor)? {
            return Err(LedgerError::Corrupt {
                seq: cut.seq,
                line: 0,
                problem: format!(
                    "the ledger changed under gc: seq {} is no longer where it was read",
                    cut.seq
                ),
            });
        }
        // The copy made before the lock holds when it is of this very file
        // (a repair renames a new one in), from this cut, up to a record
        // still there: appends only add after it.
        let pre = match pre {
            Some(p) if p.end == end && p.upto.end <= self.tail.end => {
                let st = crate::sys::fstat(&self.file).map_err(|e| io_err("stat", e))?;
                ((st.dev, st.ino) == p.of && ends_at(&self.file, &p.upto)?).then_some(p)
            }
            _ => None,
        };
        let cuts = read_cuts(rt).map_err(LedgerError::Damaged)?;
        add_cut(rt, d, cuts, cut)?;
        failpoint::hit("ledger.compact.after_base").map_err(|e| io_err("compact", e))?;
        let copied = (|| -> io::Result<()> {
            let (mut out, from) = match pre {
                Some(p) => (p.file, p.upto.end),
                None => (new_compact_tmp(rt)?, end),
            };
            copy_range(&self.file, &mut out, from, self.tail.end, None)?;
            d.file_now(&out)?;
            failpoint::hit("ledger.compact.before_rename")?;
            rustix::fs::renameat(rt, COMPACT_TMP, rt, LEDGER_FILE)?;
            d.dir_now(rt)
        })();
        if let Err(e) = copied {
            let _ = rustix::fs::unlinkat(rt, COMPACT_TMP, rustix::fs::AtFlags::empty());
            return Err(io_err("compact", e));
        }
        self.reopen()?;
        self.tail.end -= end;
        Ok(end)
    }

    /// Opens the ledger again for appends, after a rename replaced it.
    fn reopen(&mut self) -> Result<(), LedgerError> {
        let fd = rustix::fs::openat(
            self.ledger.rt.as_fd(),
            LEDGER_FILE,
            OFlags::RDWR | OFlags::APPEND | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("open", e))?;
        self.file = File::from(fd);
        Ok(())
    }

    fn repair(&mut self, torn: TornTail) -> Result<(), LedgerError> {
        let rt = self.ledger.rt.as_fd();
        let ts = self.ledger.clock.now_ms();
        let backup = format!("{LEDGER_FILE}.broken-{ts}-{}", std::process::id());
        // Back up the whole file first (O_EXCL, fsync file and dir), then cut.
        let mut all = Vec::new();
        self.file
            .seek(SeekFrom::Start(0))
            .map_err(|e| io_err("read", e))?;
        self.file
            .read_to_end(&mut all)
            .map_err(|e| io_err("read", e))?;
        let mut b = fs_util::create_excl(rt, backup.as_ref(), 0o600)
            .map_err(|e| io_err("create a backup of", e))?;
        b.write_all(&all)
            .map_err(|e| io_err("write a backup of", e))?;
        let d = &self.ledger.durable;
        d.file_now(&b).map_err(|e| io_err("sync a backup of", e))?;
        d.dir_now(rt)
            .map_err(|e| io_err("sync the directory of", e))?;
        failpoint::hit("ledger.repair.before_truncate").map_err(|e| io_err("repair", e))?;
        self.file
            .set_len(torn.offset)
            .map_err(|e| io_err("truncate", e))?;
        d.file_now(&self.file).map_err(|e| io_err("sync", e))?;
        crate::trace::event(
            rt,
            &self.ledger.clock,
            "ledger_tail_repaired",
            serde_json::json!({"dropped_bytes": torn.bytes, "backup": backup, "offset": torn.offset}),
        );
        self.append(&[Draft::new(Body::Repair(Repair {
            dropped_bytes: torn.bytes,
            backup: backup.clone(),
            ..Repair::default()
        }))])?;
        Ok(())
    }

    /// `ckpt repair`, for a ledger it leaves as it is: its last record.
    pub fn set_tail(&mut self, tail: Tail) {
        self.tail = tail;
    }

    /// `ckpt repair`: replaces the whole ledger with `bytes` (a temporary
    /// file, synced, renamed over it, the directory synced), whose last
    /// record is `tail`, and moves the head anchor there.
    pub fn replace_all(&mut self, bytes: &[u8], tail: Tail) -> Result<(), LedgerError> {
        let rt = self.ledger.rt.as_fd();
        let tmp = format!("{LEDGER_FILE}.repair-tmp");
        let _ = rustix::fs::unlinkat(rt, tmp.as_str(), rustix::fs::AtFlags::empty());
        let mut f = fs_util::create_excl(rt, tmp.as_ref(), 0o600)
            .map_err(|e| io_err("create the repaired copy of", e))?;
        f.write_all(bytes)
            .map_err(|e| io_err("write the repaired copy of", e))?;
        let d = &self.ledger.durable;
        d.file_now(&f)
            .map_err(|e| io_err("sync the repaired copy of", e))?;
        drop(f);
        failpoint::hit("ledger.repair.before_rename").map_err(|e| io_err("repair", e))?;
        rustix::fs::renameat(rt, tmp.as_str(), rt, LEDGER_FILE)
            .map_err(|e| io_err("replace", e))?;
        d.dir_now(rt)
            .map_err(|e| io_err("sync the directory of", e))?;
        self.reopen()?;
        self.tail = tail;
        write_head(rt, &self.tail);
        Ok(())
    }
}

/// The ledger `ckpt repair` writes in place of a damaged one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// The new ledger's bytes.
    pub bytes: Vec<u8>,
    /// Its last record.
    pub tail: Tail,
    /// Whether it differs from the old one.
    pub changed: bool,
    /// Records kept (byte for byte, or rewritten to chain on).
    pub kept: u64,
    /// Seqs whose records are lost: a `repair` record stands in for each.
    pub lost: Vec<u64>,
    /// Bytes of the old ledger that are in no kept record (damaged lines,
    /// duplicates, a torn end): in the copy set aside.
    pub set_aside: u64,
    /// The first seq whose line was rewritten.
    pub rechained_from: Option<u64>,
    /// Every record's hash in the new ledger, by seq.
    pub hashes: std::collections::BTreeMap<u64, String>,
}

/// Rebuilds a ledger from the bytes of a damaged one: every record that is
/// whole on its own (its hash matches its content) is kept, in seq order,
/// once; each seq with no such record, and each seq `head` says was written
/// past the last one, gets a `repair` record standing for it (`lost`, naming
/// `backup`, where the old bytes are kept); from the first change on every
/// record is written again with the `prev` of the new chain (content and
/// `ts` as they were). Deterministic: the same bytes give the same ledger.
/// A ledger shortened by `ckpt gc` is rebuilt from `start` (the recorded
/// cut it continues from; [`Tail::default`] for a whole one): records after
/// it only, the first chained to it.
pub fn rebuild(
    bytes: &[u8],
    start: &Tail,
    head: Option<&Head>,
    backup: &str,
) -> Result<Rebuilt, LedgerError> {
    let mut out = Rebuilt::default();
    let mut prev: Option<String> = start.hash.clone();
    let mut last_ts = String::from("1970-01-01T00:00:00.000Z");
    let mut next = start.seq + 1;
    let stand_in = |out: &mut Rebuilt,
                    seq: u64,
                    prev: &mut Option<String>,
                    ts: &str|
     -> Result<(), LedgerError> {
        let draft = Draft::new(Body::Repair(Repair {
            backup: backup.to_string(),
            lost: vec![seq],
            ..Repair::default()
        }));
        let (line, hash) = build_line(seq, ts, prev.as_deref(), &draft)?;
        out.bytes.extend_from_slice(&line);
        out.lost.push(seq);
        out.hashes.insert(seq, hash.clone());
        out.rechained_from.get_or_insert(seq);
        out.changed = true;
        *prev = Some(hash);
        Ok(())
    };
    for raw in bytes.split_inclusive(|&b| b == b'\n') {
        let Some(line) = raw.strip_suffix(b"\n") else {
            out.set_aside += raw.len() as u64;
            out.changed = true;
            continue;
        };
        let record = check_line(line)
            .ok()
            .and_then(|c| to_record(line, &c).ok().map(|r| (c, r)));
        let Some((check, record)) = record else {
            out.set_aside += raw.len() as u64;
            out.changed = true;
            continue;
        };
        let seq = check.seq();
        if seq < next {
            // A duplicate or a record out of its place: one is kept.
            out.set_aside += raw.len() as u64;
            out.changed = true;
            continue;
        }
        while next < seq {
            stand_in(&mut out, next, &mut prev, &last_ts)?;
            next += 1;
        }
        if out.rechained_from.is_none() && check.prev() == prev.as_deref() {
            out.bytes.extend_from_slice(raw);
            out.hashes.insert(seq, check.hash().to_string());
            prev = Some(check.hash().to_string());
        } else {
            let draft = Draft {
                session: record.session.clone(),
                body: record.body,
            };
            let (line, hash) = build_line(seq, &record.ts, prev.as_deref(), &draft)?;
            out.bytes.extend_from_slice(&line);
            out.hashes.insert(seq, hash.clone());
            out.rechained_from.get_or_insert(seq);
            out.changed = true;
            prev = Some(hash);
        }
        last_ts = record.ts;
        out.kept += 1;
        next += 1;
    }
    if let Some(h) = head {
        while next <= h.seq {
            stand_in(&mut out, next, &mut prev, &last_ts)?;
            next += 1;
        }
    }
    out.tail = Tail {
        seq: next - 1,
        hash: prev,
        end: out.bytes.len() as u64,
    };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::RelPath;
    use crate::record::{Body, UserEdit};

    fn draft(path: &str) -> Draft {
        Draft::new(Body::UserEdit(UserEdit {
            path: RelPath::from_ledger(path.as_bytes()).unwrap(),
            before_hash: None,
            after_hash: None,
            before_mode: None,
            after_mode: None,
        }))
    }

    /// A read after a position returns exactly the records a whole read
    /// has after it, and nothing (the caller reads everything) when the
    /// anchor is not the record at that position or the file changed under it.
    #[test]
    fn a_read_after_a_position_matches_the_whole_read_or_refuses() {
        let t = tempfile::tempdir().unwrap();
        let rt = Arc::new(fs_util::open_dir(rustix::fs::CWD, t.path()).unwrap());
        create_empty(rt.as_fd()).unwrap();
        let ledger = Ledger::new(rt.clone(), Arc::new(Clock::system()), Arc::default());
        let start = Tail::default();
        assert_eq!(
            ledger.read_after(&start).unwrap().unwrap().0.records.len(),
            0
        );
        let drafts: Vec<Draft> = (0..50).map(|i| draft(&format!("f{i}"))).collect();
        ledger.lock().unwrap().append(&drafts[..20]).unwrap();
        let at20 = ledger.read().unwrap().tail;
        ledger.lock().unwrap().append(&drafts[20..]).unwrap();
        let whole = ledger.read().unwrap();
        let (after, ends) = ledger.read_after(&at20).unwrap().unwrap();
        let (_, all_ends) = ledger.read_with_ends().unwrap();
        assert_eq!(ends, all_ends[20..]);
        assert_eq!(all_ends[19], at20.end);
        assert_eq!(after.tail, whole.tail);
        let seqs = |r: &LedgerRead| r.records.iter().map(|r| r.seq).collect::<Vec<_>>();
        assert_eq!(seqs(&after), (21..=50).collect::<Vec<_>>());
        assert_eq!(
            seqs(&ledger.read_after(&start).unwrap().unwrap().0),
            seqs(&whole)
        );
        let (at_end, _) = ledger.read_after(&whole.tail).unwrap().unwrap();
        assert!(at_end.records.is_empty());
        assert_eq!(at_end.tail, whole.tail);
        // Anchors that are not what the file holds.
        let bad = [
            Tail {
                hash: Some("sha256:00".into()),
                ..at20.clone()
            },
            Tail {
                seq: 19,
                ..at20.clone()
            },
            Tail {
                end: at20.end - 1,
                ..at20.clone()
            },
            Tail {
                end: at20.end + 1,
                ..at20.clone()
            },
            Tail {
                end: whole.tail.end + 100,
                ..at20.clone()
            },
            Tail {
                seq: 0,
                hash: None,
                end: at20.end,
            },
        ];
        for b in &bad {
            assert!(ledger.read_after(b).unwrap().is_none(), "{b:?}");
        }
        // A record rewritten after the anchor: the chain breaks there.
        let path = t.path().join(LEDGER_FILE);
        let bytes = std::fs::read(&path).unwrap();
        let mut changed = bytes.clone();
        let at = at20.end as usize + 40;
        changed[at] = if changed[at] == b'1' { b'2' } else { b'1' };
        std::fs::write(&path, &changed).unwrap();
        assert!(ledger.read_after(&at20).unwrap().is_none());
        // Records cut off the end (the head anchor says there were more).
        std::fs::write(
            &path,
            &bytes[..bytes.len()
                - 1
                - bytes[..bytes.len() - 1]
                    .iter()
                    .rev()
                    .position(|&b| b == b'\n')
                    .unwrap()],
        )
        .unwrap();
        assert!(ledger.read_after(&at20).unwrap().is_none());
    }

    static STEPS: std::sync::Mutex<Vec<(String, u64, u64)>> = std::sync::Mutex::new(Vec::new());

    fn record_step(s: crate::progress::Step<'_>) {
        STEPS
            .lock()
            .unwrap()
            .push((s.what.to_string(), s.done, s.total));
    }

    /// A whole read of the ledger tells the progress sink how many of the
    /// file's bytes it has read, never going back, and ends at the size.
    #[test]
    fn a_read_reports_its_progress_through_the_file() {
        let t = tempfile::tempdir().unwrap();
        let rt = Arc::new(fs_util::open_dir(rustix::fs::CWD, t.path()).unwrap());
        create_empty(rt.as_fd()).unwrap();
        let ledger = Ledger::new(rt.clone(), Arc::new(Clock::system()), Arc::default())
            .with_progress(Some(record_step));
        // Over 8 MiB: more than one batch of lines.
        let drafts: Vec<Draft> = (0..40_000).map(|i| draft(&format!("f{i}"))).collect();
        ledger.lock().unwrap().append(&drafts).unwrap();
        let size = std::fs::metadata(t.path().join(LEDGER_FILE)).unwrap().len();
        assert!(size > 8 << 20, "more than one batch: {size}");
        STEPS.lock().unwrap().clear();
        assert_eq!(ledger.read().unwrap().records.len(), 40_000);
        let steps = STEPS.lock().unwrap().clone();
        assert!(steps.len() >= 3, "{steps:?}");
        assert!(
            steps
                .iter()
                .all(|(w, _, t)| w == "reading the ledger" && *t == size)
        );
        assert!(steps.windows(2).all(|w| w[0].1 <= w[1].1), "{steps:?}");
        assert!(steps[0].1 < size);
        assert_eq!(steps.last().unwrap().1, size);
    }

    /// The tail is found behind a last record longer than the first window
    /// read (16 KiB), and behind a torn fragment after it.
    #[test]
    fn the_tail_is_found_behind_long_records_and_a_torn_fragment() {
        use crate::record::{CallStatus, ToolCall};
        let t = tempfile::tempdir().unwrap();
        let rt = Arc::new(fs_util::open_dir(rustix::fs::CWD, t.path()).unwrap());
        let ledger = Ledger::new(rt.clone(), Arc::new(Clock::system()), Arc::default());
        let long = |n: usize| {
            let error = Some("x".repeat(n));
            Draft::new(Body::ToolCall(ToolCall::end(
                "c".into(),
                "Bash".into(),
                CallStatus::Failed,
                error,
            )))
        };
        ledger.append(draft("a")).unwrap();
        ledger.append(long(40_000)).unwrap();
        assert_eq!(ledger.lock().unwrap().tail().seq, 2);
        ledger.append(long(100_000)).unwrap();
        ledger.append(long(20_000)).unwrap();
        assert_eq!(ledger.lock().unwrap().tail().seq, 4);
        // A torn write of another long record.
        let path = t.path().join(LEDGER_FILE);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(&[b'{'; 30_000]).unwrap();
        drop(f);
        // Cut, and a repair record says so.
        let g = ledger.lock().unwrap();
        assert_eq!(g.tail().seq, 5);
        let end = g.tail().end;
        drop(g);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), end);
        ledger.append(draft("b")).unwrap();
        let read = ledger.read().unwrap();
        assert_eq!(read.records.len(), 6);
        assert!(matches!(read.records[4].body, Body::Repair(_)));
        assert!(read.corruption.is_none() && read.torn.is_none());
    }
}
