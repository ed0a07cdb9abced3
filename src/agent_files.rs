//! The registry of files the agent last wrote (`state/agent_files.bin`): for
//! each, what the agent left there (hash, mode, kind) and the stat figures
//! seen right after, so every hook can tell with one `stat` per file whether
//! the user changed it since (issue 3: "before each call").
//!
//! A cache of the ledger: a torn or damaged file is rebuilt from the ledger's
//! `file_patch` and `user_edit` records. Every hook reads it, and the agent may
//! have written thousands of files, so it is never decoded whole: [`Registry`]
//! keeps the file's bytes and the offset of each entry, reads an entry's fields
//! in place, and on save copies untouched entries byte for byte between the
//! ones that changed. A hook's cost per entry is one `stat` and a few
//! comparisons, with no allocation.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};

use crate::binfile::{take, u32_le, u64_le};
use crate::call::FileState;
use crate::fs_util::{self, FsError};
use crate::hash::ContentHash;
use crate::paths::RelPath;
use crate::record::Body;
use crate::workspace::{Workspace, WorkspaceError};

const REGISTRY: &str = "agent_files.bin";
/// The registry as ckpt wrote it before session 7 (JSON): no longer read;
/// found, it is rebuilt from the ledger.
const OLD_REGISTRY: &str = "agent_files.json";
const MAGIC: &[u8; 8] = b"CKPTREG1";
/// Registries this long are stat-checked on two threads.
const PARALLEL_STATS_FROM: usize = 256;

/// One file the agent last wrote, as it left it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct AgentFile {
    pub hash: Option<ContentHash>,
    pub mode: Option<u32>,
    pub symlink: bool,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub call: String,
}

/// The stat figures a registry entry is compared by.
type StatKey = (u64, i64, i64, u64);

impl AgentFile {
    /// What the registry keeps for `rel` now holding `state`, last written by `call`.
    pub fn observed(ws: &Workspace, rel: &RelPath, state: &FileState, call: &str) -> AgentFile {
        let (size, mtime_ns, ctime_ns, ino) = stat_of(ws, rel.as_bytes()).unwrap_or_default();
        let (hash, mode, symlink) = match state {
            FileState::File { hash, mode } => (Some(*hash), Some(*mode), false),
            FileState::Symlink { hash } => (Some(*hash), None, true),
            FileState::Absent | FileState::NotAFile => (None, None, false),
        };
        AgentFile {
            hash,
            mode,
            symlink,
            size,
            mtime_ns,
            ctime_ns,
            ino,
            call: call.to_string(),
        }
    }

    fn stat_key(&self) -> StatKey {
        (self.size, self.mtime_ns, self.ctime_ns, self.ino)
    }

    fn encode_into(&self, path: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(&(path.len() as u32).to_le_bytes());
        out.extend_from_slice(path);
        out.push(
            u8::from(self.symlink)
                | (u8::from(self.hash.is_some()) << 1)
                | (u8::from(self.mode.is_some()) << 2),
        );
        if let Some(h) = &self.hash {
            out.extend_from_slice(h.as_bytes());
        }
        out.extend_from_slice(&self.mode.unwrap_or(0).to_le_bytes());
        for n in [
            self.size,
            self.mtime_ns as u64,
            self.ctime_ns as u64,
            self.ino,
        ] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&(self.call.len() as u32).to_le_bytes());
        out.extend_from_slice(self.call.as_bytes());
    }
}

/// The stat figures of `path` (workspace-relative bytes), by one `fstatat`
/// from the root without following a final symlink. Only ever compared with
/// figures recorded for the same path: a path that leads elsewhere through a
/// symlinked directory cannot match them (an inode and its nanosecond times
/// belong to one file), and contents are always read through the confined
/// resolution.
fn stat_of(ws: &Workspace, path: &[u8]) -> Option<StatKey> {
    let st = crate::sys::lstat_at(
        ws.files().root(),
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path),
    )
    .ok()?;
    Some((st.size, st.mtime_ns(), st.ctime_ns(), st.ino))
}

/// One entry of the file as read: where it lies in `Registry::buf`.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    end: u32,
    /// Length of the path, which starts 4 bytes after `start`.
    path_len: u32,
    /// Where the four stat figures start.
    stat_at: u32,
}

/// The registry: the file's entries in place plus the changes made since it
/// was read. Entries are in byte order of their paths, which is what a
/// lookup's binary search and the merge on save rely on.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    buf: Vec<u8>,
    spans: Vec<Span>,
    /// New or rewritten entries (`Some`) and removed ones (`None`).
    changes: BTreeMap<RelPath, Option<AgentFile>>,
    /// Entries of the file were dropped from `spans` (unreadable ones).
    dropped: bool,
}

impl Registry {
    /// A registry holding exactly `map` (rebuilt, migrated, or for tests).
    fn from_map(map: BTreeMap<RelPath, AgentFile>) -> Registry {
        Registry {
            changes: map.into_iter().map(|(k, v)| (k, Some(v))).collect(),
            ..Registry::default()
        }
    }

    /// Reads the file's bytes; `None` when the file is torn, damaged, or its
    /// entries are out of order.
    fn decode(buf: Vec<u8>) -> Option<Registry> {
        let body = crate::binfile::unseal(&buf, MAGIC, 8)?;
        let base = buf.len() - 32 - body.len();
        let mut r = body;
        let n = u64_le(&mut r)?;
        let mut spans = Vec::with_capacity(n.min(1 << 20) as usize);
        let at = |r: &[u8]| (base + body.len() - r.len()) as u32;
        let mut prev: Option<&[u8]> = None;
        for _ in 0..n {
            let start = at(r);
            let path_len = u32_le(&mut r)?;
            let path = take(&mut r, path_len as usize)?;
            if prev.is_some_and(|p| p >= path) {
                return None;
            }
            prev = Some(path);
            let flags = take(&mut r, 1)?[0];
            if flags & 2 != 0 {
                take(&mut r, 32)?;
            }
            take(&mut r, 4)?;
            let stat_at = at(r);
            take(&mut r, 32)?;
            let call_len = u32_le(&mut r)?;
            take(&mut r, call_len as usize)?;
            spans.push(Span {
                start,
                end: at(r),
                path_len,
                stat_at,
            });
        }
        if !r.is_empty() {
            return None;
        }
        Some(Registry {
            buf,
            spans,
            ..Registry::default()
        })
    }

    fn path(&self, s: &Span) -> &[u8] {
        let p = s.start as usize + 4;
        &self.buf[p..p + s.path_len as usize]
    }

    fn stat_key(&self, s: &Span) -> StatKey {
        let mut r = &self.buf[s.stat_at as usize..s.end as usize];
        let mut n = || u64_le(&mut r).unwrap_or_default();
        (n(), n() as i64, n() as i64, n())
    }

    /// The whole entry (its span was checked to hold every field on decode;
    /// `None` when its call id is not UTF-8).
    fn entry(&self, s: &Span) -> Option<AgentFile> {
        let mut r = &self.buf[s.start as usize + 4 + s.path_len as usize..s.end as usize];
        let flags = take(&mut r, 1)?[0];
        let hash = if flags & 2 != 0 {
            Some(ContentHash::from_bytes(take(&mut r, 32)?.try_into().ok()?))
        } else {
            None
        };
        let mode = u32_le(&mut r)?;
        Some(AgentFile {
            hash,
            mode: (flags & 4 != 0).then_some(mode),
            symlink: flags & 1 != 0,
            size: u64_le(&mut r)?,
            mtime_ns: u64_le(&mut r)? as i64,
            ctime_ns: u64_le(&mut r)? as i64,
            ino: u64_le(&mut r)?,
            call: {
                let len = u32_le(&mut r)? as usize;
                String::from_utf8(take(&mut r, len)?.to_vec()).ok()?
            },
        })
    }

    fn find(&self, path: &[u8]) -> Option<&Span> {
        self.spans
            .binary_search_by(|s| self.path(s).cmp(path))
            .ok()
            .map(|i| &self.spans[i])
    }

    /// What the registry holds for `rel`.
    pub fn get(&self, rel: &RelPath) -> Option<AgentFile> {
        match self.changes.get(rel) {
            Some(c) => c.clone(),
            None => self.find(rel.as_bytes()).and_then(|s| self.entry(s)),
        }
    }

    pub fn insert(&mut self, rel: RelPath, af: AgentFile) {
        self.changes.insert(rel, Some(af));
    }

    pub fn remove(&mut self, rel: &RelPath) {
        if self.find(rel.as_bytes()).is_some() {
            self.changes.insert(rel.clone(), None);
        } else {
            self.changes.remove(rel);
        }
    }

    /// Every content the registry names: each path's last one, which the
    /// next `user_edit` of that path names as its before (`ckpt gc` keeps
    /// them; a superseded entry only keeps one more).
    pub(crate) fn hashes(&self) -> impl Iterator<Item = ContentHash> + '_ {
        self.spans
            .iter()
            .filter_map(|s| self.entry(s)?.hash)
            .chain(self.changes.values().flatten().filter_map(|a| a.hash))
    }

    /// True when something changed since the file was read.
    pub fn is_changed(&self) -> bool {
        !self.changes.is_empty() || self.dropped
    }

    /// Every entry whose file's stat figures differ from the recorded ones
    /// now (or that is gone while it was recorded present), with its path
    /// checked. An entry whose path is not a valid workspace path (the file
    /// was altered by hand) is dropped.
    pub fn changed_on_disk(&mut self, ws: &Workspace) -> Vec<(RelPath, AgentFile)> {
        let differs = |path: &[u8], key: StatKey, present: bool| match stat_of(ws, path) {
            Some(now) => now != key,
            None => present,
        };
        let mut out = Vec::new();
        let mut bad = Vec::new();
        // One `fstatat` per entry (500 entries add 1.8–3.0 ms to a pre on
        // the bench trees): on two threads past a few hundred entries.
        let moved = |s: &Span| {
            let path = self.path(s);
            // Entries recorded absent have no hash (flags bit 1).
            let present = self.buf[s.start as usize + 4 + s.path_len as usize] & 2 != 0;
            !self.changes.contains_key(path) && differs(path, self.stat_key(s), present)
        };
        let moved: Vec<bool> = if self.spans.len() >= PARALLEL_STATS_FROM {
            crate::par::map(&self.spans, moved)
        } else {
            self.spans.iter().map(moved).collect()
        };
        for (i, s) in self.spans.iter().enumerate() {
            if !moved[i] {
                continue;
            }
            let path = self.path(s);
            match (RelPath::from_ledger(path), self.entry(s)) {
                (Ok(rel), Some(af)) => out.push((rel, af)),
                _ => bad.push(i),
            }
        }
        for (rel, c) in &self.changes {
            if let Some(af) = c
                && differs(rel.as_bytes(), af.stat_key(), af.hash.is_some())
            {
                out.push((rel.clone(), af.clone()));
            }
        }
        for i in bad.into_iter().rev() {
            self.spans.remove(i);
            self.dropped = true;
        }
        out
    }

    /// The file's bytes: magic, count, the entries in path order (untouched
    /// ones copied as read), then the sha256 of all that.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.buf.len() + self.changes.len() * 160 + 48);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&0u64.to_le_bytes());
        let mut n = 0u64;
        let mut changes = self.changes.iter().peekable();
        let mut put_changes_before = |path: Option<&[u8]>, out: &mut Vec<u8>, n: &mut u64| {
            while let Some((rel, c)) =
                changes.next_if(|(rel, _)| path.is_none_or(|p| rel.as_bytes() <= p))
            {
                if let Some(af) = c {
                    af.encode_into(rel.as_bytes(), out);
                    *n += 1;
                }
                if path == Some(rel.as_bytes()) {
                    return true;
                }
            }
            false
        };
        for s in &self.spans {
            let path = self.path(s);
            if put_changes_before(Some(path), &mut out, &mut n) {
                continue;
            }
            out.extend_from_slice(&self.buf[s.start as usize..s.end as usize]);
            n += 1;
        }
        put_changes_before(None, &mut out, &mut n);
        out[8..16].copy_from_slice(&n.to_le_bytes());
        crate::binfile::seal(&mut out);
        out
    }

    /// Every readable entry, in path order.
    #[cfg(test)]
    fn all(&self) -> BTreeMap<RelPath, AgentFile> {
        let mut m: BTreeMap<RelPath, AgentFile> = self
            .spans
            .iter()
            .filter_map(|s| Some((RelPath::from_ledger(self.path(s)).ok()?, self.entry(s)?)))
            .collect();
        for (rel, c) in &self.changes {
            match c {
                Some(af) => m.insert(rel.clone(), af.clone()),
                None => m.remove(rel),
            };
        }
        m
    }
}

/// The registry of files the agent last wrote. Missing: empty (nothing
/// written yet). Present but unreadable (a crash cut its in-place rewrite
/// short): rebuilt from the ledger, each path's last `file_patch` or
/// `user_edit`, with no stat figures, so the next hook compares contents.
/// A JSON registry written by an older ckpt is rebuilt the same way and
/// replaced.
pub(crate) fn load(ws: &Workspace, dir: &OwnedFd) -> Registry {
    if let Ok(mut f) = fs_util::open_regular_at(dir.as_fd(), REGISTRY.as_ref()) {
        let mut v = Vec::new();
        if f.read_to_end(&mut v).is_ok()
            && let Some(reg) = Registry::decode(v)
        {
            return reg;
        }
        return Registry::from_map(rebuild(ws));
    }
    if fs_util::open_regular_at(dir.as_fd(), OLD_REGISTRY.as_ref()).is_err() {
        return Registry::default();
    }
    // An older ckpt's registry: a cache in a format no longer read, so it is
    // rebuilt from the ledger and replaced (every caller holds the state lock).
    let reg = Registry::from_map(rebuild(ws));
    if save(dir, &reg).is_ok() {
        let _ = rustix::fs::unlinkat(dir, OLD_REGISTRY, rustix::fs::AtFlags::empty());
    }
    reg
}

/// Writes the registry back when something changed. A cache of the ledger
/// (see [`load`]): rewritten in place, unsynced.
pub(crate) fn save(dir: &OwnedFd, reg: &Registry) -> Result<(), WorkspaceError> {
    if !reg.is_changed() {
        return Ok(());
    }
    fs_util::overwrite_in_place(dir.as_fd(), REGISTRY, &reg.encode())
        .map_err(|e| FsError::new("write", format!(".agent-runtime/state/{REGISTRY}"), e).into())
}

fn rebuild(ws: &Workspace) -> BTreeMap<RelPath, AgentFile> {
    let mut reg = BTreeMap::new();
    let Ok(read) = ws.read_ledger() else {
        return reg;
    };
    let entry =
        |hash: Option<ContentHash>, mode: &Option<String>, perm: Option<u32>, call: &str| {
            let symlink = mode.as_deref() == Some(crate::record::SYMLINK_MODE);
            AgentFile {
                hash,
                mode: (!symlink && hash.is_some())
                    .then(|| perm.unwrap_or(crate::record::perm_of_mode(mode.as_deref(), None))),
                symlink,
                size: 0,
                mtime_ns: 0,
                ctime_ns: 0,
                ino: 0,
                call: call.to_string(),
            }
        };
    for r in &read.records {
        match &r.body {
            Body::FilePatch(p) => {
                if let Some(from) = &p.from_path {
                    reg.remove(from);
                }
                reg.insert(
                    p.path.clone(),
                    entry(p.after_hash, &p.after_mode, p.after_perm, &p.call),
                );
            }
            Body::UserEdit(u) => {
                if let Some(af) = reg.get_mut(&u.path) {
                    let call = std::mem::take(&mut af.call);
                    *af = entry(u.after_hash, &u.after_mode, None, &call);
                }
            }
            _ => {}
        }
    }
    reg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(p: &[u8]) -> RelPath {
        RelPath::from_ledger(p).unwrap()
    }

    fn file(hash: Option<ContentHash>, mode: Option<u32>, symlink: bool, n: u64) -> AgentFile {
        AgentFile {
            hash,
            mode,
            symlink,
            size: 10_482 + n,
            mtime_ns: 1_796_000_000_123_456_789,
            ctime_ns: -1,
            ino: u64::MAX - n,
            call: format!("toolu_01ABC{n}"),
        }
    }

    fn sample() -> BTreeMap<RelPath, AgentFile> {
        let mut reg = BTreeMap::new();
        reg.insert(
            rel(b"src/a.rs"),
            file(Some(ContentHash::of(b"a")), Some(0o644), false, 1),
        );
        reg.insert(
            rel(b"link"),
            file(Some(ContentHash::of(b"target")), None, true, 2),
        );
        reg.insert(rel(b"gone.txt"), file(None, None, false, 3));
        reg.insert(
            rel("caf\u{e9} \n\t.txt".as_bytes()),
            file(None, Some(0o755), false, 5),
        );
        reg.insert(
            rel("d/\u{e9}t\u{e9}.bin".as_bytes()),
            file(Some(ContentHash::of(b"\0")), Some(0o755), false, 4),
        );
        reg
    }

    #[test]
    fn the_registry_file_round_trips_and_a_torn_or_altered_one_is_refused() {
        let reg = sample();
        let bytes = Registry::from_map(reg.clone()).encode();
        let back = Registry::decode(bytes.clone()).expect("decodes");
        assert_eq!(back.all(), reg);
        for (p, af) in &reg {
            assert_eq!(back.get(p).as_ref(), Some(af), "{p}");
        }
        assert_eq!(back.get(&rel(b"src")), None);
        // Unchanged, it encodes to the same bytes (entries copied as read).
        let mut again = back;
        again.changes.insert(rel(b"zz"), None);
        assert_eq!(again.encode(), bytes);
        assert!(
            Registry::decode(Registry::default().encode())
                .expect("empty decodes")
                .all()
                .is_empty()
        );
        for cut in [0, 7, 8, 15, 16, 40, bytes.len() - 33, bytes.len() - 1] {
            assert!(
                Registry::decode(bytes[..cut].to_vec()).is_none(),
                "cut at {cut}"
            );
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(Registry::decode(flipped).is_none(), "one bit flipped");
    }

    #[test]
    fn changes_merge_into_the_entries_as_read_in_path_order() {
        let mut reg = Registry::decode(Registry::from_map(sample()).encode()).unwrap();
        let mut want = sample();
        // Before the first, between two, replacing one, after the last, removing one.
        for (p, n) in [
            (&b"a"[..], 10),
            (b"h.txt", 11),
            (b"link", 12),
            (b"zz/top", 13),
        ] {
            let af = file(Some(ContentHash::of(p)), Some(0o600), false, n);
            reg.insert(rel(p), af.clone());
            want.insert(rel(p), af);
        }
        reg.remove(&rel(b"src/a.rs"));
        want.remove(&rel(b"src/a.rs"));
        // Removing what was never there, and inserting then removing, leave nothing.
        reg.remove(&rel(b"never"));
        reg.insert(rel(b"brief"), file(None, None, false, 14));
        reg.remove(&rel(b"brief"));
        assert_eq!(reg.get(&rel(b"src/a.rs")), None);
        assert_eq!(reg.get(&rel(b"link")), want.get(&rel(b"link")).cloned());
        let back = Registry::decode(reg.encode()).expect("decodes");
        assert_eq!(back.all(), want);
        assert_eq!(back.spans.len(), want.len());
    }

    #[test]
    fn entries_out_of_order_are_refused() {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&2u64.to_le_bytes());
        let af = file(None, None, false, 0);
        af.encode_into(b"b", &mut out);
        af.encode_into(b"a", &mut out);
        crate::binfile::seal(&mut out);
        assert!(Registry::decode(out).is_none());
    }

    #[test]
    fn a_forged_entry_naming_a_path_outside_or_inside_ckpts_data_is_dropped() {
        // The file is checksummed but not secret: anyone who can write
        // `.agent-runtime/` can forge one. Such paths are never read.
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        std::fs::create_dir_all(parent.path().join("out")).unwrap();
        std::fs::write(parent.path().join("out/secret"), b"s").unwrap();
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a.txt"), b"a").unwrap();
        let (ws, _) = Workspace::init(&root, Default::default()).unwrap();
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&3u64.to_le_bytes());
        let af = file(Some(ContentHash::of(b"x")), Some(0o644), false, 0);
        for p in [
            &b"../out/secret"[..],
            b".agent-runtime/ledger.jsonl",
            b"a.txt",
        ] {
            af.encode_into(p, &mut out);
        }
        crate::binfile::seal(&mut out);
        let mut reg = Registry::decode(out).expect("well formed");
        let changed = reg.changed_on_disk(&ws);
        let paths: Vec<_> = changed.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(paths, ["a.txt"]);
        assert!(reg.is_changed(), "the file is rewritten without them");
        let back = Registry::decode(reg.encode()).unwrap();
        assert_eq!(back.spans.len(), 1);
        assert_eq!(back.path(&back.spans[0]), b"a.txt");
    }

    /// Past `PARALLEL_STATS_FROM` entries the stats run on two threads: the
    /// same entries are found moved, in path order.
    #[test]
    fn a_long_registry_finds_exactly_the_files_that_moved() {
        let t = tempfile::tempdir().unwrap();
        let (ws, _) = Workspace::init(t.path(), Default::default()).unwrap();
        let n = PARALLEL_STATS_FROM + 44;
        let mut map = BTreeMap::new();
        for i in 0..n {
            let name = format!("d{}/f{i:04}.txt", i % 7);
            std::fs::create_dir_all(t.path().join(format!("d{}", i % 7))).unwrap();
            std::fs::write(t.path().join(&name), b"agent").unwrap();
            let rel = rel(name.as_bytes());
            let state = FileState::File {
                hash: ContentHash::of(b"agent"),
                mode: 0o644,
            };
            map.insert(rel.clone(), AgentFile::observed(&ws, &rel, &state, "c"));
        }
        let mut reg = Registry::decode(Registry::from_map(map).encode()).unwrap();
        assert!(reg.changed_on_disk(&ws).is_empty(), "nothing moved");
        let moved = ["d0/f0000.txt", "d3/f0150.txt", "d5/f0299.txt"];
        std::thread::sleep(std::time::Duration::from_millis(25));
        for m in moved {
            std::fs::write(t.path().join(m), b"user!").unwrap();
        }
        std::fs::remove_file(t.path().join("d2/f0100.txt")).unwrap();
        let found: Vec<String> = reg
            .changed_on_disk(&ws)
            .into_iter()
            .map(|(p, _)| p.to_string())
            .collect();
        assert_eq!(
            found,
            [
                "d0/f0000.txt",
                "d2/f0100.txt",
                "d3/f0150.txt",
                "d5/f0299.txt"
            ]
        );
    }
}
