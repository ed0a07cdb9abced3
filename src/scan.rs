//! Shell capture: what a call that names no file (Bash, MCP, unknown tools,
//! `ckpt exec`) changed, found by comparing the workspace before and after it.
//!
//! A snapshot is every regular file and symlink of the workspace with its stat
//! data (mtime, ctime, size, inode, mode) and, when known, its content identity:
//! a sha256 whose blob is in ckpt's store, or the git blob id of a file that is
//! clean against the git index (read back from git's object database, never
//! written to it; so first use copies nothing that is clean against git). The
//! walk honours `.gitignore` (also outside git repositories), `config.toml`
//! ignores, and never enters `.git/` or `.agent-runtime/`.
//!
//! The pre hook walks the tree and compares with the last snapshot: only entries
//! whose stat data changed are read (and stored, so their content is available
//! as a "before"). The post hook walks again and compares with the call's pre
//! snapshot: created, deleted, modified, renamed files, mode changes and
//! symlinks become patches of that call.
//!
//! Each walk knows the snapshot it is compared with: directories whose stat
//! data did not move are not listed again (see `scan/walker.rs`), and the walk
//! pairs every entry with the index of the same path in that snapshot, so no
//! map of all paths is built. A snapshot keeps entries in walk order, grouped
//! by directory, and every directory with its stat data.
//!
//! Racy entries (changed in the same clock tick as the walk's start, or
//! later) are re-read next time even when their stat data matches, as git
//! does for its index. The walk's start is dated by the file system itself
//! ([`fs_now`]), so the rule holds whatever its timestamp granularity
//! (a 4 ms kernel tick here; whole seconds on some file systems).
//!
//! When a walk finds nothing changed (and nothing racy), no snapshot is
//! written: the pre hook gives the current one a second name as the call's,
//! and the post hook keeps it. A changed path whose before or after content
//! cannot be stored is reported in [`Scanned::unknown`], never recorded as
//! absent.
//!
//! # Limitations
//! A change made by another process during a call's window is attributed to the
//! call (no watcher tells them apart). Files above `max_blob_bytes` are not
//! stored.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};

use crate::call::FileState;
use crate::config::Config;
use crate::fs_util::{self, FsError};
use crate::hash::ContentHash;
use crate::paths::RelPath;
use crate::workspace::{Workspace, WorkspaceError};

mod walker;

pub use walker::DirStat;

/// How much earlier than the wall clock a walk is dated when the file
/// system's own clock cannot be read (and how snapshots written before
/// ckpt read that clock were dated): entries changed this close to it are not
/// trusted by stat alone.
pub const RACY_NS: i64 = 50_000_000;

/// More moved entries than this and a walk reads git's index to find those
/// clean against it (and not copy them); fewer are read and stored.
const GIT_INDEX_FROM: usize = 256;

/// The snapshot format. A snapshot in any other (an older ckpt's) is a cache
/// in an unknown format: rebuilt by a walk, as a damaged one is.
const MAGIC: &[u8; 8] = b"CKPTSNP5";

/// A fast non-cryptographic hasher for path keys (FxHash, as rustc uses): the
/// walk's maps of known directories and names hold many paths, and SipHash
/// showed up in profiles. Keys come from our own walk, not from an attacker.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let v = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Stat data and content identity of one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// True for a symlink, false for a regular file.
    pub symlink: bool,
    /// Permission bits.
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// mtime in ns.
    pub mtime_ns: i64,
    /// ctime in ns.
    pub ctime_ns: i64,
    /// Inode.
    pub ino: u64,
    /// sha256 of the content, stored in the blob store.
    pub hash: Option<ContentHash>,
    /// git blob id when the file was clean against the git index.
    pub git_oid: Option<[u8; 20]>,
}

impl Entry {
    fn same_stat(&self, o: &Entry) -> bool {
        self.symlink == o.symlink
            && self.mode == o.mode
            && self.size == o.size
            && self.mtime_ns == o.mtime_ns
            && self.ctime_ns == o.ctime_ns
            && self.ino == o.ino
    }
}

/// Paths (walk keys: relative, `/`-separated bytes) with their entries, the
/// keys in one buffer: a snapshot of 100,000 files is a few allocations, not
/// 100,000 (each hook loads one and walks into another; allocating, filling
/// and freeing a key apiece showed up in its profile).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entries {
    keys: Vec<u8>,
    /// Where each key ends in `keys` (it starts where the one before ends).
    ends: Vec<u32>,
    ents: Vec<Entry>,
}

impl Entries {
    /// Room for `n` entries whose keys take `key_bytes`.
    pub fn with_capacity(n: usize, key_bytes: usize) -> Entries {
        Entries {
            keys: Vec::with_capacity(key_bytes),
            ends: Vec::with_capacity(n),
            ents: Vec::with_capacity(n),
        }
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.ents.len()
    }

    /// Bytes its keys take.
    pub fn key_bytes(&self) -> usize {
        self.keys.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.ents.is_empty()
    }

    /// Adds an entry.
    pub fn push(&mut self, key: &[u8], e: Entry) {
        self.keys.extend_from_slice(key);
        self.end_key(e);
    }

    /// Adds an entry whose key is `dir/name`.
    fn push_joined(&mut self, dir: &[u8], name: &[u8], e: Entry) {
        self.keys.extend_from_slice(dir);
        self.keys.push(b'/');
        self.keys.extend_from_slice(name);
        self.end_key(e);
    }

    /// Ends the key just added to `keys`, for entry `e`.
    fn end_key(&mut self, e: Entry) {
        self.ends.push(self.keys.len() as u32);
        self.ents.push(e);
    }

    /// Where the key of entry `i` lies in `keys`.
    fn span(&self, i: usize) -> std::ops::Range<usize> {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        start..self.ends[i] as usize
    }

    /// The key of entry `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        &self.keys[self.span(i)]
    }

    /// Entry `i`.
    pub fn entry(&self, i: usize) -> &Entry {
        &self.ents[i]
    }

    /// Entry `i`, to change.
    pub fn entry_mut(&mut self, i: usize) -> &mut Entry {
        &mut self.ents[i]
    }

    /// Key and entry `i`, the entry to change.
    fn key_entry_mut(&mut self, i: usize) -> (&[u8], &mut Entry) {
        let span = self.span(i);
        (&self.keys[span], &mut self.ents[i])
    }

    /// Key and entry `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<(&[u8], &Entry)> {
        (i < self.len()).then(|| (self.key(i), &self.ents[i]))
    }

    /// Keys and entries in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &Entry)> {
        (0..self.len()).map(|i| (self.key(i), &self.ents[i]))
    }

    /// Keys in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        (0..self.len()).map(|i| self.key(i))
    }

    /// Entries (without keys) in order, to change.
    pub fn entries_mut(&mut self) -> std::slice::IterMut<'_, Entry> {
        self.ents.iter_mut()
    }

    /// Moves `other`'s entries to the end of these.
    pub fn append(&mut self, other: &mut Entries) {
        let base = self.keys.len() as u32;
        self.keys.append(&mut other.keys);
        self.ends.extend(other.ends.drain(..).map(|e| e + base));
        self.ents.append(&mut other.ents);
    }

    /// Keys and entries, each on its own (for tests' comparisons).
    #[cfg(test)]
    pub(crate) fn to_pairs(&self) -> Vec<(Vec<u8>, Entry)> {
        self.iter().map(|(k, e)| (k.to_vec(), e.clone())).collect()
    }

    /// These entries without those at the (ascending) indexes in `drop`.
    fn without(self, drop: &[usize]) -> Entries {
        if drop.is_empty() {
            return self;
        }
        let mut out = Entries::with_capacity(self.len(), self.keys.len());
        let mut drop = drop.iter().peekable();
        for (i, (k, e)) in self.iter().enumerate() {
            if drop.next_if_eq(&&i).is_none() {
                out.push(k, e.clone());
            }
        }
        out
    }
}

impl<'a> FromIterator<(&'a [u8], Entry)> for Entries {
    fn from_iter<I: IntoIterator<Item = (&'a [u8], Entry)>>(it: I) -> Entries {
        let mut out = Entries::default();
        for (k, e) in it {
            out.push(k, e);
        }
        out
    }
}

/// The workspace at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// When the walk started, as the file system dates changes (ns since the
    /// epoch, see [`fs_now`]): an entry whose ctime or mtime is not before it
    /// is racy.
    pub taken_ns: i64,
    /// Every file and symlink, grouped by directory as the walk found them.
    pub entries: Entries,
    /// Every directory the walk entered (or could not), with its stat data:
    /// the next walk lists only those that changed.
    pub dirs: Vec<(Vec<u8>, DirStat)>,
    /// The walk's fingerprint of the configuration's patterns and the global
    /// excludes file.
    pub global: u64,
}

/// One path a call changed.
#[derive(Debug, Clone)]
pub struct Change {
    /// The path (after a rename: the new path).
    pub path: RelPath,
    /// For a rename, the old path.
    pub from: Option<RelPath>,
    /// Before.
    pub before: FileState,
    /// After.
    pub after: FileState,
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// The time the file system gives a change made now: the ctime it sets on a
/// marker file (`index/clock`) touched here. File systems date changes with
/// a coarse clock (the kernel tick) truncated to their granularity, so a
/// file changed again later in the tick of an earlier change keeps its stat
/// data; a walk dated this way before it starts trusts only entries changed
/// in an earlier tick (later changes get a later date, never an equal one).
/// Falls back to the wall clock less [`RACY_NS`] when the marker cannot be
/// touched.
fn fs_now(index: &OwnedFd) -> i64 {
    use rustix::fs::{OFlags, Timespec, Timestamps, UTIME_NOW};
    let touched = (|| {
        // Never through a symlink; a FIFO planted there fails to open at once.
        let fd = rustix::fs::openat(
            index,
            "clock",
            OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            crate::sys::mode(0o600),
        )
        .ok()?;
        let st = crate::sys::fstat(&fd).ok()?;
        if st.file_type() != rustix::fs::FileType::RegularFile {
            return None;
        }
        if st.mode & 0o777 != 0o600 {
            rustix::fs::fchmod(&fd, crate::sys::mode(0o600)).ok()?;
        }
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        };
        rustix::fs::futimens(
            &fd,
            &Timestamps {
                last_access: now,
                last_modification: now,
            },
        )
        .ok()?;
        let st = crate::sys::fstat(&fd).ok()?;
        Some(st.ctime_ns())
    })();
    touched.unwrap_or_else(|| now_ns() - RACY_NS)
}

/// The file system's clock now, in milliseconds (see [`fs_now`]): what a
/// directory made from here on has for its birth time at the earliest.
/// `None` when the marker cannot be touched.
pub(crate) fn fs_now_ms(ws: &Workspace) -> Option<u64> {
    let index = index_dir(ws).ok()?;
    let ns = fs_now(&index);
    // `fs_now` falls back to the wall clock less the racy margin: earlier,
    // which is the safe side here too.
    u64::try_from(ns / 1_000_000).ok()
}

fn index_dir(ws: &Workspace) -> Result<OwnedFd, WorkspaceError> {
    let (fd, _) =
        fs_util::open_or_create_private_dir(ws.runtime_dir().as_fd(), "index", ws.durable())
            .map_err(|e| FsError::new("open", ".agent-runtime/index", e))?;
    Ok(fd)
}

/// Serialises a snapshot (a compact binary format; it is a cache, rebuilt by a
/// walk when missing or damaged).
///
/// Each run of entries of one directory is stored as that directory's index
/// and the entries' names (keys repeat their directory's path: 40 % of the
/// bytes on the 100,000-file tree, written, checksummed and flushed whenever
/// the snapshot changes).
pub fn encode(s: &Snapshot) -> Vec<u8> {
    // In walk order: the next walk groups entries by directory in one pass.
    let mut out = Vec::with_capacity(64 + s.entries.len() * 80 + s.dirs.len() * 80);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&s.taken_ns.to_le_bytes());
    out.extend_from_slice(&s.global.to_le_bytes());
    out.extend_from_slice(&(s.dirs.len() as u64).to_le_bytes());
    for (k, d) in &s.dirs {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(&d.ino.to_le_bytes());
        out.extend_from_slice(&d.mtime_ns.to_le_bytes());
        out.extend_from_slice(&d.ctime_ns.to_le_bytes());
        out.push(d.flags);
        out.extend_from_slice(&d.rules.to_le_bytes());
    }
    out.extend_from_slice(&(s.entries.len() as u64).to_le_bytes());
    let dir_index: HashMap<&[u8], u32, std::hash::BuildHasherDefault<FxHasher>> = s
        .dirs
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (k.as_slice(), i as u32))
        .collect();
    let n = s.entries.len();
    let mut i = 0;
    while i < n {
        // A run: the entries from `i` with the same parent directory, stored
        // as that directory's index and their names (`u32::MAX` and a whole
        // key for an entry whose directory is not in the table).
        let parent = walker::parent_of(s.entries.key(i));
        let dir = dir_index.get(parent).copied();
        let mut j = i + 1;
        if dir.is_some() {
            while j < n && walker::parent_of(s.entries.key(j)) == parent {
                j += 1;
            }
        }
        out.extend_from_slice(&dir.unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&((j - i) as u32).to_le_bytes());
        // Names start after the parent's path and its `/` (none at the root).
        let cut = match dir {
            Some(_) if !parent.is_empty() => parent.len() + 1,
            _ => 0,
        };
        for x in i..j {
            let (k, e) = (s.entries.key(x), s.entries.entry(x));
            let name = &k[cut..];
            out.extend_from_slice(&(name.len() as u32).to_le_bytes());
            out.extend_from_slice(name);
            let flags = u8::from(e.symlink)
                | (u8::from(e.hash.is_some()) << 1)
                | (u8::from(e.git_oid.is_some()) << 2);
            out.push(flags);
            out.extend_from_slice(&e.mode.to_le_bytes());
            out.extend_from_slice(&e.size.to_le_bytes());
            out.extend_from_slice(&e.mtime_ns.to_le_bytes());
            out.extend_from_slice(&e.ctime_ns.to_le_bytes());
            out.extend_from_slice(&e.ino.to_le_bytes());
            if let Some(h) = &e.hash {
                out.extend_from_slice(h.as_bytes());
            }
            if let Some(o) = &e.git_oid {
                out.extend_from_slice(o);
            }
        }
        i = j;
    }
    crate::timing("scan: snapshot serialised");
    crate::binfile::seal(&mut out);
    out
}

/// Parses a snapshot; `None` when damaged (the caller rebuilds it).
pub fn decode(b: &[u8]) -> Option<Snapshot> {
    if b.get(..8)? != MAGIC {
        return None;
    }
    // Parsed while the checksum is checked on the other core (8.4 MB on the
    // 100,000-file tree).
    crate::binfile::unseal_with(b, MAGIC, 16, decode_body)
}

/// [`decode`]'s parse of a body, which may be damaged (only its checksum,
/// checked meanwhile, says so): no count in it is trusted.
fn decode_body(mut r: &[u8]) -> Option<Snapshot> {
    use crate::binfile::{take, u32_le, u64_le as u64_};
    let taken_ns = u64_(&mut r)? as i64;
    let global = u64_(&mut r)?;
    let n_dirs = u64_(&mut r)? as usize;
    // A directory takes at least 37 bytes, an entry 41.
    let mut dirs = Vec::with_capacity(n_dirs.min(r.len() / 37));
    for _ in 0..n_dirs {
        let len = u32_le(&mut r)? as usize;
        let key = take(&mut r, len)?.to_vec();
        let ino = u64_(&mut r)?;
        let mtime_ns = u64_(&mut r)? as i64;
        let ctime_ns = u64_(&mut r)? as i64;
        let flags = take(&mut r, 1)?[0];
        let rules = u64_(&mut r)?;
        dirs.push((
            key,
            DirStat {
                ino,
                mtime_ns,
                ctime_ns,
                flags,
                rules,
            },
        ));
    }
    let n = u64_(&mut r)? as usize;
    // Whole keys run longer than the names stored: room for both.
    let mut entries = Entries::with_capacity(n.min(r.len() / 41), r.len());
    let mut run_left = 0usize;
    let mut prefix: &[u8] = &[];
    let mut with_slash = false;
    for _ in 0..n {
        if run_left == 0 {
            let d = u32_le(&mut r)?;
            run_left = u32_le(&mut r)? as usize;
            if run_left == 0 {
                return None;
            }
            (prefix, with_slash) = if d == u32::MAX {
                (&[][..], false)
            } else {
                let k = dirs.get(d as usize)?.0.as_slice();
                (k, !k.is_empty())
            };
        }
        run_left = run_left.saturating_sub(1);
        let len = u32_le(&mut r)? as usize;
        let name = take(&mut r, len)?;
        let flags = take(&mut r, 1)?[0];
        let mode = u32_le(&mut r)?;
        let size = u64_(&mut r)?;
        let mtime_ns = u64_(&mut r)? as i64;
        let ctime_ns = u64_(&mut r)? as i64;
        let ino = u64_(&mut r)?;
        let hash = if flags & 2 != 0 {
            Some(ContentHash::from_bytes(take(&mut r, 32)?.try_into().ok()?))
        } else {
            None
        };
        let git_oid = if flags & 4 != 0 {
            Some(take(&mut r, 20)?.try_into().ok()?)
        } else {
            None
        };
        let e = Entry {
            symlink: flags & 1 != 0,
            mode,
            size,
            mtime_ns,
            ctime_ns,
            ino,
            hash,
            git_oid,
        };
        if with_slash {
            entries.push_joined(prefix, name, e);
        } else {
            entries.push(name, e);
        }
    }
    Some(Snapshot {
        taken_ns,
        entries,
        dirs,
        global,
    })
}

fn load(ws: &Workspace, dir: &OwnedFd, name: &str) -> Option<Snapshot> {
    load_file(ws, dir, name).map(|(s, _)| s)
}

/// [`load`], with the inode the snapshot was read from; a big snapshot is
/// announced to `ws` first ([`Workspace::big_tables_ahead`]).
fn load_file(ws: &Workspace, dir: &OwnedFd, name: &str) -> Option<(Snapshot, u64)> {
    let mut f = fs_util::open_regular_at(dir.as_fd(), name.as_ref()).ok()?;
    let st = crate::sys::fstat(&f).ok()?;
    let ino = st.ino;
    ws.big_tables_ahead(st.size);
    let mut v = Vec::new();
    f.read_to_end(&mut v).ok()?;
    Some((decode(&v)?, ino))
}

/// Writes `s` as `dir/name` (a temp file renamed over it); returns the file,
/// for the caller to hand to the durable set as unnamed content: a cache, so
/// not needed for recovery, but synced beside the hook's record: left dirty,
/// ext4 (data=ordered) would flush it inside the next hook's ledger
/// fdatasync, making an Edit hook after a shell hook pay for megabytes of
/// snapshot.
fn save(dir: &OwnedFd, name: &str, s: &Snapshot) -> Result<File, WorkspaceError> {
    let err = |e: io::Error| FsError::new("write", format!(".agent-runtime/index/{name}"), e);
    let bytes = encode(s);
    crate::timing("scan: snapshot encoded");
    let tmp = fs_util::temp_name(".ckpt-tmp-");
    let mut f = fs_util::create_excl(dir.as_fd(), tmp.as_ref(), 0o600).map_err(err)?;
    let written = std::io::Write::write_all(&mut f, &bytes);
    if let Err(e) = written.and_then(|()| Ok(rustix::fs::renameat(dir, tmp.as_str(), dir, name)?)) {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), rustix::fs::AtFlags::empty());
        return Err(err(e).into());
    }
    Ok(f)
}

/// Hands a saved snapshot to the durable set ([`save`]).
fn keep_clean(ws: &Workspace, f: &File) -> Result<(), WorkspaceError> {
    ws.durable()
        .unnamed(f)
        .map_err(|e| FsError::new("sync", ".agent-runtime/index", e).into())
}

/// Reads a path's content and stores it; returns the content hash.
fn store(ws: &Workspace, rel: &RelPath, e: &Entry) -> Result<Option<ContentHash>, WorkspaceError> {
    let err = |e: io::Error| WorkspaceError::Io(FsError::new("read", rel.display().to_string(), e));
    if e.symlink {
        match ws.files().entry(rel).map_err(err)? {
            fs_util::EntryKind::Symlink(t) => Ok(Some(ws.blobs().put_bytes(&t)?)),
            _ => Ok(None),
        }
    } else {
        match ws.files().open_read_sized(rel) {
            Ok((mut f, size)) => Ok(Some(ws.blobs().put_file_sized(&mut f, size)?.0)),
            // Gone or replaced since the walk: the next scan sees it again.
            Err(_) => Ok(None),
        }
    }
}

struct GitIndex {
    map: HashMap<Vec<u8>, crate::git::IndexStat>,
    /// Git may store some files as other bytes than they hold
    /// ([`crate::git::may_convert`]).
    converts: bool,
}

fn git_clean_oid(gi: &GitIndex, key: &[u8], e: &Entry) -> Option<[u8; 20]> {
    let s = gi.map.get(key)?;
    let git_mode = if e.symlink {
        0o120000
    } else if e.mode & 0o111 != 0 {
        0o100755
    } else {
        0o100644
    };
    let ok = s.mode == git_mode
        && s.size32 == e.size as u32
        && s.ino32 == e.ino as u32
        && s.mtime_s == e.mtime_ns.div_euclid(1_000_000_000)
        && (s.mtime_ns == 0 || i64::from(s.mtime_ns) == e.mtime_ns.rem_euclid(1_000_000_000))
        // Racily clean entries (written in the same tick as the index) are not trusted.
        && e.mtime_ns < s.index_mtime_ns;
    ok.then_some(s.oid)
}

/// A walk compared with the snapshot it started from.
struct Fresh {
    taken_ns: i64,
    /// What the walk found, with content identities filled in.
    walked: Entries,
    /// For each entry of `walked`, the index of the same path in the old
    /// snapshot.
    old: Vec<Option<u32>>,
    dirs: Vec<(Vec<u8>, DirStat)>,
    global: u64,
    /// Indexes into `walked` of entries left out (a name that is no path).
    dropped: Vec<usize>,
    /// Every entry of the old snapshot is there, with the same stat data and
    /// content identity, and none was racy: the old snapshot (with its older
    /// `taken_ns`) still describes the workspace and need not be rewritten.
    unchanged: bool,
}

impl Fresh {
    /// The walk as a snapshot (built only when it is saved, which a call that
    /// changed nothing never does).
    fn into_snapshot(self) -> Snapshot {
        Snapshot {
            taken_ns: self.taken_ns,
            entries: self.walked.without(&self.dropped),
            dirs: self.dirs,
            global: self.global,
        }
    }
}

/// What a walk yields: the walk, and git's index (read on a thread of its
/// own beside a walk with nothing known: `Some(None)` outside a repository).
type WalkAndIndex = (
    io::Result<walker::Walked>,
    Option<Option<crate::git::IndexRead>>,
);

/// Walks `root`; with nothing `known`, reads git's index beside it.
fn walk_reading_index(
    root: &std::path::Path,
    ignore: &[String],
    known: Option<&walker::Known<'_>>,
    user: &crate::git::UserDirs,
    backend: crate::sys::Backend,
) -> WalkAndIndex {
    std::thread::scope(|s| {
        let reader = known.is_none().then(|| {
            std::thread::Builder::new()
                .spawn_scoped(s, || crate::git::IndexRead::start(root))
                .ok()
        });
        let walked = walker::walk(root, ignore, known, user, backend);
        let read = reader.flatten().map(|h| h.join().ok().flatten());
        (walked, read)
    })
}

/// Walks the workspace and fills in content identities: unchanged entries keep
/// theirs from `old`, git-clean files get their git blob id, everything else is
/// read and stored.
/// `index` is `.agent-runtime/index`, where the walk's clock marker lives.
fn fresh(
    ws: &Workspace,
    cfg: &Config,
    index: &OwnedFd,
    old: Option<&Snapshot>,
) -> Result<Fresh, WorkspaceError> {
    let taken_ns = fs_now(index);
    if old.is_none() {
        // A first walk: its size is not known yet.
        ws.big_tables_ahead(u64::MAX);
    }
    let known = old.map(|o| {
        walker::Known::new(
            o.taken_ns,
            o.global,
            o.dirs.iter().map(|(k, d)| (k.as_slice(), *d)),
            &o.entries,
        )
    });
    crate::timing("scan: known paths mapped");
    // With nothing known, every file is looked up in git's index: it is read
    // on a thread of its own while the tree is walked.
    let (walk_and_read_index, mut index_read) = walk_reading_index(
        ws.root(),
        &cfg.ignore,
        known.as_ref(),
        ws.user_dirs(),
        ws.files().backend(),
    );
    let walker::Walked {
        entries: mut walked,
        old: old_idx,
        dirs,
        listed,
        global,
    } = walk_and_read_index
        .map_err(|e| FsError::new("walk", ws.root().display().to_string(), e))?;
    crate::timing("scan: walked");
    // Before anything is read or stored: a tree past the limit (the whole
    // file system, a home directory) is not walked into the store.
    if walked.len() as u64 > cfg.max_snapshot_files {
        return Err(WorkspaceError::TooLarge(format!(
            "`{}` holds {} entries, more than max_snapshot_files = {}: a shell call's changes are found by comparing the whole tree, so ckpt does not record this one; raise max_snapshot_files in .agent-runtime/config.toml, or ignore the big directories (.gitignore, or `ignore` there)",
            ws.root().display(),
            walked.len(),
            cfg.max_snapshot_files
        )));
    }
    ws.dispose(known);
    // Every directory was known, unchanged and not racy (none listed).
    let dirs_same = old.is_some_and(|o| {
        listed == 0
            && dirs.len() == o.dirs.len()
            && dirs.iter().all(|(_, d)| d.flags & walker::UNLISTED == 0)
    });
    let mut kept = 0usize;
    let mut dropped = Vec::new();
    // Entries whose stat data moved (or is racy): looked up in git's index,
    // else read and stored.
    let mut pending: Vec<usize> = Vec::new();
    // At first use, big files git does not hold are not copied
    // (`first_use_max_bytes`): `ckpt status` lists them as unprotected.
    let store_max = match old {
        None => cfg.max_blob_bytes.min(cfg.first_use_max_bytes),
        Some(_) => cfg.max_blob_bytes,
    };
    // Same stat data, but changed too close to the snapshot for stat data to
    // prove the content: checked against the identity it had.
    let mut racy: Vec<usize> = Vec::new();
    for (i, e) in walked.entries_mut().enumerate() {
        if let (Some(s), Some(j)) = (old, old_idx[i]) {
            let o = s.entries.entry(j as usize);
            if o.same_stat(e) {
                // Entries without an identity (too big to store, unreadable)
                // stay without one until their stat data moves.
                e.hash = o.hash;
                e.git_oid = o.git_oid;
                if e.mtime_ns.max(e.ctime_ns) < s.taken_ns {
                    kept += 1;
                    continue;
                }
                if (e.hash.is_some() || e.git_oid.is_some()) && e.size <= cfg.max_blob_bytes {
                    racy.push(i);
                    continue;
                }
                e.hash = None;
                e.git_oid = None;
            }
        }
        pending.push(i);
    }
    let same = crate::par::map(&racy, |&i| same_content(ws, walked.key(i), walked.entry(i)));
    for (&i, same) in racy.iter().zip(same) {
        if !same {
            let e = walked.entry_mut(i);
            e.hash = None;
            e.git_oid = None;
            pending.push(i);
        }
    }
    pending.sort_unstable();
    // Git's index is read (14 MB on the 100,000-file tree) when it can save
    // copies: at first use, when many entries moved (a checkout), or for a
    // file too big to store. A few changed files are stored instead.
    let git = (old.is_none()
        || pending.len() > GIT_INDEX_FROM
        || pending
            .iter()
            .any(|&i| walked.entry(i).size > cfg.max_blob_bytes))
    .then(|| {
        let attribute_files = walked.keys().filter(|k| is_attributes_file(k));
        match index_read.take() {
            // Read beside the walk (`None`: not in a repository).
            Some(read) => read.map(|r| r.finish(ws.root(), attribute_files, ws.user_dirs())),
            None => crate::git::index_stats(ws.root(), attribute_files, ws.user_dirs()),
        }
        .map(|(map, converts)| GitIndex { map, converts })
    })
    .flatten();
    // Entries whose content must be read and stored: done after the loop,
    // on two threads when there are many (a shell call that wrote files).
    let mut to_store: Vec<(usize, RelPath)> = Vec::new();
    let mut store_later =
        |i: usize, key: &[u8], dropped: &mut Vec<usize>| match RelPath::from_ledger(key) {
            Ok(rel) => to_store.push((i, rel)),
            Err(_) => dropped.push(i),
        };
    let mut to_check = Vec::new();
    for i in pending {
        let (key, e) = walked.key_entry_mut(i);
        if let Some(gi) = &git
            && let Some(oid) = git_clean_oid(gi, key, e)
        {
            if !gi.converts {
                e.git_oid = Some(oid);
            } else if e.size <= cfg.max_blob_bytes {
                e.git_oid = Some(oid);
                to_check.push(i);
            }
            // (Too big to read here: no identity, like any file too big to store.)
        } else if e.size <= store_max {
            store_later(i, key, &mut dropped);
        }
    }
    // Where git converts bytes on their way into its objects (a filter such
    // as Git LFS or git-crypt, end-of-line conversion), a stat-clean entry's
    // blob may not be the file's bytes: it stands in for the file only when
    // the file hashes to it; otherwise the file is stored like any other.
    let checked = crate::par::map(&to_check, |&i| {
        same_content(ws, walked.key(i), walked.entry(i))
    });
    for (&i, same) in to_check.iter().zip(checked) {
        if !same {
            walked.entry_mut(i).git_oid = None;
            store_later(i, walked.key(i), &mut dropped);
        }
    }
    let stored = crate::par::map(&to_store, |(i, rel)| store(ws, rel, walked.entry(*i)));
    for ((i, _), hash) in to_store.iter().zip(stored) {
        walked.entry_mut(*i).hash = hash?;
    }
    dropped.sort_unstable();
    let unchanged =
        dirs_same && old.is_some_and(|o| kept == o.entries.len() && kept == walked.len());
    Ok(Fresh {
        taken_ns,
        walked,
        old: old_idx,
        dirs,
        global,
        dropped,
        unchanged,
    })
}

/// Whether the file or symlink at `key` exists (a path that cannot be looked
/// at for lack of permission counts as existing: no deletion is claimed).
fn still_there(ws: &Workspace, key: &[u8]) -> bool {
    let Ok(rel) = RelPath::from_ledger(key) else {
        return false;
    };
    match ws.files().entry(&rel) {
        Ok(fs_util::EntryKind::File { .. } | fs_util::EntryKind::Symlink(_)) => true,
        Ok(_) => false,
        Err(e) => e.kind() == io::ErrorKind::PermissionDenied,
    }
}

/// Whether a racy entry still holds the content its identity names (read
/// whole: only entries up to `max_blob_bytes` are checked).
fn same_content(ws: &Workspace, key: &[u8], e: &Entry) -> bool {
    let Ok(rel) = RelPath::from_ledger(key) else {
        return false;
    };
    let bytes = if e.symlink {
        match ws.files().entry(&rel) {
            Ok(fs_util::EntryKind::Symlink(t)) => t,
            _ => return false,
        }
    } else {
        match ws.files().read(&rel) {
            Ok(v) => v,
            Err(_) => return false,
        }
    };
    match (e.hash, e.git_oid) {
        (Some(h), _) => ContentHash::of(&bytes) == h,
        // Collision-detecting: git's object then stands in for these bytes.
        (None, Some(oid)) => crate::git::blob_id_checked(&bytes) == crate::hash::hex(&oid),
        (None, None) => false,
    }
}

/// The state of a present entry, as a stored blob; `None` when its content
/// is unknown (too big to store, unreadable, or a git object that cannot be
/// read): such a file is never mistaken for an absent one.
/// A git-clean entry's content committed at HEAD is left in git (noted for
/// the record that names it); any other is copied into the store.
fn state_of(ws: &Workspace, rel: &RelPath, e: &Entry) -> Result<Option<FileState>, WorkspaceError> {
    let hash = match (e.hash, e.git_oid) {
        (Some(h), _) => h,
        (None, Some(oid)) => {
            if let Some(bytes) = ws.repos().read_committed_blob(rel.as_bytes(), &oid) {
                let h = ContentHash::of(&bytes);
                ws.blobs().note_git(h, oid, bytes);
                h
            } else {
                match ws.repos().read_blob(&oid) {
                    Some(bytes) => ws.blobs().put_vec(bytes)?,
                    None => return Ok(None),
                }
            }
        }
        _ => return Ok(None),
    };
    Ok(Some(if e.symlink {
        FileState::Symlink { hash }
    } else {
        FileState::File { hash, mode: e.mode }
    }))
}

/// Whether a walk key names a `.gitattributes` file.
fn is_attributes_file(key: &[u8]) -> bool {
    key.rsplit(|&b| b == b'/').next() == Some(b".gitattributes")
}

/// Takes the snapshot a shell call starts from, saves it for the call's post
/// hook under `key`, and makes it the workspace's current one (one write, then
/// a hard link: the file is never changed after it is written).
/// Also returns, after a first walk, the files it left without a copy
/// ([`unprotected`]'s list then), for the hook to say so.
pub fn pre(
    ws: &Workspace,
    cfg: &Config,
    key: &str,
) -> Result<(Snapshot, Vec<crate::record::Unrecorded>), WorkspaceError> {
    let dir = index_dir(ws)?;
    crate::timing("scan: pre");
    let old = load_file(ws, &dir, "snapshot.bin");
    crate::timing("scan: snapshot loaded");
    let first = old.is_none();
    let fresh = fresh(ws, cfg, &dir, old.as_ref().map(|(s, _)| s))?;
    crate::timing("scan: compared");
    let (calls, _) = fs_util::open_or_create_private_dir(dir.as_fd(), "calls", ws.durable())
        .map_err(|e| FsError::new("open", ".agent-runtime/index/calls", e))?;
    let name = format!("{key}.bin");
    // (Only a snapshot that still describes the workspace is of use below.)
    let old = if fresh.unchanged {
        old
    } else {
        ws.dispose(old);
        None
    };
    if let Some((old, ino)) = old {
        // Nothing moved since the current snapshot: it is the call's too (a
        // second name; nothing is written or synced). A leftover file of the
        // same name (a crash) gives way. The name must reach the very file
        // that was read: another call may have replaced `snapshot.bin` since.
        let none = rustix::fs::AtFlags::empty();
        let _ = rustix::fs::unlinkat(&calls, name.as_str(), none);
        if rustix::fs::linkat(&dir, "snapshot.bin", &calls, name.as_str(), none).is_ok() {
            let same = crate::sys::lstat_at(&calls, name.as_str()).is_ok_and(|st| st.ino == ino);
            if same {
                ws.dispose(fresh);
                return Ok((old, Vec::new()));
            }
            let _ = rustix::fs::unlinkat(&calls, name.as_str(), none);
        }
        ws.dispose(old);
    }
    let snap = fresh.into_snapshot();
    keep_clean(ws, &save(&calls, &name, &snap)?)?;
    crate::timing("scan: call's snapshot saved");
    let tmp = fs_util::temp_name(".ckpt-tmp-");
    let linked = rustix::fs::linkat(
        &calls,
        name.as_str(),
        &dir,
        tmp.as_str(),
        rustix::fs::AtFlags::empty(),
    )
    .and_then(|()| rustix::fs::renameat(&dir, tmp.as_str(), &dir, "snapshot.bin"));
    if linked.is_err() {
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), rustix::fs::AtFlags::empty());
        keep_clean(ws, &save(&dir, "snapshot.bin", &snap)?)?;
    }
    let skipped = match first {
        true => without_copy(cfg, &snap),
        false => Vec::new(),
    };
    Ok((snap, skipped))
}

/// Why ckpt holds no copy of a file of `size` bytes the walk found:
/// `too_large` (above `max_blob_bytes`), `not_copied_at_first_use` (above
/// `first_use_max_bytes` when ckpt first saw it), or `unreadable` (or a
/// damaged git object).
fn unprotected_reason(cfg: &Config, size: u64) -> &'static str {
    if size > cfg.max_blob_bytes {
        "too_large"
    } else if size > cfg.max_blob_bytes.min(cfg.first_use_max_bytes) {
        "not_copied_at_first_use"
    } else {
        "unreadable"
    }
}

/// The files of the last walk that ckpt holds no copy of (neither stored
/// nor in git's objects), with why: a shell call that changes one cannot be
/// undone. Empty before the first shell call (nothing walked yet: files an
/// edit tool names are stored when it names them).
pub fn unprotected(ws: &Workspace, cfg: &Config) -> Vec<crate::record::Unrecorded> {
    match index_dir(ws)
        .ok()
        .and_then(|dir| load(ws, &dir, "snapshot.bin"))
    {
        Some(s) => without_copy(cfg, &s),
        None => Vec::new(),
    }
}

/// The entries of `s` that ckpt holds no copy of, with why.
fn without_copy(cfg: &Config, s: &Snapshot) -> Vec<crate::record::Unrecorded> {
    s.entries
        .iter()
        .filter(|(_, e)| e.hash.is_none() && e.git_oid.is_none())
        .filter_map(|(k, e)| {
            Some(crate::record::Unrecorded {
                path: RelPath::from_ledger(k).ok()?,
                reason: unprotected_reason(cfg, e.size).into(),
                size: Some(e.size),
            })
        })
        .collect()
}

/// Every snapshot kept: the current one and each open call's pre snapshot
/// (for `gc`, which keeps the contents they name). Unreadable ones are left
/// out: no hook can use them either.
pub(crate) fn all_snapshots(ws: &Workspace) -> Vec<Snapshot> {
    let mut out = Vec::new();
    let Ok(dir) = index_dir(ws) else { return out };
    out.extend(load(ws, &dir, "snapshot.bin"));
    if let Ok(calls) = fs_util::open_dir(dir.as_fd(), "calls")
        && let Ok(mut it) = rustix::fs::Dir::read_from(&calls)
    {
        let names: Vec<String> = it
            .by_ref()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".bin"))
            .collect();
        for n in names {
            out.extend(load(ws, &calls, &n));
        }
    }
    out
}

/// Loads a call's pre snapshot. It stays until [`forget_call`] (after the
/// records of the call's end are appended): a post killed before them
/// leaves it for the close that records the call from the disk.
pub fn load_for_call(ws: &Workspace, key: &str) -> Option<Snapshot> {
    let dir = index_dir(ws).ok()?;
    let calls = fs_util::open_dir(dir.as_fd(), "calls").ok()?;
    let s = load(ws, &calls, &format!("{key}.bin"));
    crate::timing("scan: call's snapshot loaded");
    s
}

/// Removes a call's pre snapshot once its end is recorded.
pub fn forget_call(ws: &Workspace, key: &str) {
    if let Ok(dir) = index_dir(ws)
        && let Ok(calls) = fs_util::open_dir(dir.as_fd(), "calls")
    {
        let _ = rustix::fs::unlinkat(
            &calls,
            format!("{key}.bin").as_str(),
            rustix::fs::AtFlags::empty(),
        );
    }
}

/// What a call changed, as [`post`] found it.
#[derive(Debug, Default)]
pub struct Scanned {
    /// The changes, renames paired by content, in path order.
    pub changes: Vec<Change>,
    /// Paths that changed but whose before or after content is unknown (too
    /// big to store, unreadable, or an unreadable git object): no patch
    /// records them, since ckpt could not undo them; the call's end record
    /// names them.
    pub unknown: Vec<crate::record::Unrecorded>,
}

/// Compares the workspace now with a call's pre snapshot; returns the changes
/// (renames paired by content) and makes the new state the current snapshot.
pub fn post(ws: &Workspace, cfg: &Config, pre: &Snapshot) -> Result<Scanned, WorkspaceError> {
    let dir = index_dir(ws)?;
    crate::timing("scan: post");
    let fresh = fresh(ws, cfg, &dir, Some(pre))?;
    crate::timing("scan: compared");
    if fresh.unchanged {
        // The call changed nothing: the current snapshot (the pre one, or a
        // newer one another call saved since) stays.
        ws.dispose(fresh);
        return Ok(Scanned::default());
    }
    let mut changes = Vec::new();
    // Each entry now, with the same path before (the walk paired them);
    // entries before that nothing now pairs with are gone. Only the paths
    // that differ are sorted (patches come out in path order).
    let mut pairs: Vec<(&[u8], Option<&Entry>, Option<&Entry>)> = Vec::new();
    let mut seen = vec![false; pre.entries.len()];
    let mut dropped = fresh.dropped.iter().peekable();
    for (i, (k, a)) in fresh.walked.iter().enumerate() {
        if dropped.next_if_eq(&&i).is_some() {
            continue;
        }
        match fresh.old[i].and_then(|j| Some((j as usize, pre.entries.get(j as usize)?.1))) {
            Some((j, b)) => {
                seen[j] = true;
                if !a.same_stat(b) || a.hash != b.hash || a.git_oid != b.git_oid {
                    pairs.push((k, Some(b), Some(a)));
                }
            }
            // Not in the snapshot the call started from: created by the call,
            // unless its inode has not changed since before that snapshot was
            // taken. Then it was there all along, unseen (ignored until a rule
            // file changed, or in a directory that could not be read): the
            // call did not create it, and undoing the call must not delete it.
            None if a.ctime_ns < pre.taken_ns => {}
            None => pairs.push((k, None, Some(a))),
        }
    }
    for ((k, b), seen) in pre.entries.iter().zip(&seen) {
        // Gone from the walk: deleted, unless it is still there, now unseen
        // (a rule file changed, or its directory can no longer be read).
        if !seen && !still_there(ws, k) {
            pairs.push((k, Some(b), None));
        }
    }
    pairs.sort_by(|x, y| x.0.cmp(y.0));
    // A path both before and now that the walk did not pair is one entry.
    pairs.dedup_by(|later, first| {
        let same = later.0 == first.0;
        if same {
            first.1 = first.1.or(later.1);
            first.2 = first.2.or(later.2);
        }
        same
    });
    let mut differ = Vec::new();
    for (key, b, a) in pairs {
        let Ok(rel) = RelPath::from_ledger(key) else {
            continue;
        };
        let same = match (b, a) {
            (Some(b), Some(a)) => {
                b.symlink == a.symlink
                    && b.mode == a.mode
                    && match (b.hash, a.hash, b.git_oid, a.git_oid) {
                        (Some(x), Some(y), _, _) => x == y,
                        (_, _, Some(x), Some(y)) => x == y,
                        // Compare by git blob id without storing the old
                        // content (only when the size allows equal bytes).
                        (None, Some(y), Some(oid), None) => {
                            b.size == a.size
                                && ws
                                    .blobs()
                                    .get(&y)
                                    .map(|bytes| {
                                        crate::git::blob_id_checked(&bytes)
                                            == crate::hash::hex(&oid)
                                    })
                                    .unwrap_or(false)
                        }
                        _ => false,
                    }
            }
            (None, None) => true,
            _ => false,
        };
        if !same {
            differ.push((rel, b.cloned(), a.cloned()));
        }
    }
    crate::timing("scan: paired");
    // The walk is the new current snapshot, synced beside the call's records.
    let now = fresh.into_snapshot();
    keep_clean(ws, &save(&dir, "snapshot.bin", &now)?)?;
    crate::timing("scan: snapshot saved");
    ws.dispose(now);
    // The before contents of git-clean files are read from git's objects
    // (and left there when committed at HEAD, else stored): on two threads
    // when many files changed.
    let states = crate::par::map(&differ, |(rel, b, a)| -> Result<_, WorkspaceError> {
        let before = match b {
            Some(b) => state_of(ws, rel, b)?,
            None => Some(FileState::Absent),
        };
        let after = match a {
            Some(a) => state_of(ws, rel, a)?,
            None => Some(FileState::Absent),
        };
        Ok((before, after))
    });
    let mut unknown = Vec::new();
    for ((rel, b, a), st) in differ.into_iter().zip(states) {
        let st = st?;
        let (Some(before), Some(after)) = st.clone() else {
            let size = b.iter().chain(a.iter()).map(|e| e.size).max();
            let reason = match (&st.0, &b) {
                // No before content: never copied (too big when ckpt first
                // saw it, or above max_blob_bytes), or unreadable.
                (None, Some(b)) => unprotected_reason(cfg, b.size),
                _ if size.is_some_and(|n| n > cfg.max_blob_bytes) => "too_large",
                _ => "unreadable",
            };
            unknown.push(crate::record::Unrecorded {
                path: rel,
                reason: reason.into(),
                size,
            });
            continue;
        };
        if before != after {
            changes.push(Change {
                path: rel,
                from: None,
                before,
                after,
            });
        }
    }
    crate::timing("scan: contents stored");
    pair_renames(&mut changes);
    Ok(Scanned { changes, unknown })
}

/// A deleted path and a created one with the same content become one rename.
fn pair_renames(changes: &mut Vec<Change>) {
    let mut i = 0;
    while i < changes.len() {
        if changes[i].before == FileState::Absent && changes[i].after.hash().is_some() {
            let h = changes[i].after.clone();
            if let Some(j) = changes
                .iter()
                .position(|c| c.after == FileState::Absent && c.before == h)
            {
                let from = changes[j].path.clone();
                changes[i].from = Some(from);
                changes[i].before = h;
                changes.remove(j);
                if j < i {
                    i -= 1;
                }
            }
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(s: &'a Entries, key: &[u8]) -> &'a Entry {
        s.iter().find(|(k, _)| *k == key).unwrap().1
    }

    fn entry_mut<'a>(s: &'a mut Entries, key: &[u8]) -> &'a mut Entry {
        let i = s.keys().position(|k| k == key).unwrap();
        s.entry_mut(i)
    }

    /// An entry whose stat data is unchanged but too recent to prove its
    /// content (changed in the tick the snapshot's walk started, or later) is
    /// read and checked against the identity it had: kept when the same,
    /// stored anew when not. (Coarse timestamps make the second case real: two
    /// same-size writes in one clock tick leave the same stat data.)
    #[test]
    fn a_racy_entry_is_checked_against_the_identity_it_had() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f.txt"), b"what is there").unwrap();
        let (ws, _) = Workspace::init(t.path(), Default::default()).unwrap();
        let cfg = Config::default();
        let first = fresh(&ws, &cfg, &index_dir(&ws).unwrap(), None)
            .unwrap()
            .into_snapshot();
        let now = ContentHash::of(b"what is there");
        assert_eq!(entry(&first.entries, b"f.txt").hash, Some(now));

        // Racy, with its true identity: kept. The snapshot is dated at the
        // file's own mtime, the tick it was written in.
        let mut old = first.clone();
        old.taken_ns = entry(&first.entries, b"f.txt").mtime_ns;
        let f = fresh(&ws, &cfg, &index_dir(&ws).unwrap(), Some(&old)).unwrap();
        assert_eq!(entry(&f.walked, b"f.txt").hash, Some(now));

        // Racy, with an identity its bytes no longer have: read again.
        entry_mut(&mut old.entries, b"f.txt").hash = Some(ContentHash::of(b"what was there"));
        let f = fresh(&ws, &cfg, &index_dir(&ws).unwrap(), Some(&old)).unwrap();
        assert!(!f.unchanged);
        assert_eq!(entry(&f.walked, b"f.txt").hash, Some(now));

        // Racy, clean against git (its identity a git blob id): verified by
        // that id, and kept as it is, not copied into the store.
        let id = crate::git::blob_id(b"what is there");
        let mut oid = [0u8; 20];
        for (i, b) in oid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&id[2 * i..2 * i + 2], 16).unwrap();
        }
        let mut clean = old.clone();
        let e = entry_mut(&mut clean.entries, b"f.txt");
        e.hash = None;
        e.git_oid = Some(oid);
        let f = fresh(&ws, &cfg, &index_dir(&ws).unwrap(), Some(&clean)).unwrap();
        let e = entry(&f.walked, b"f.txt");
        assert_eq!((e.hash, e.git_oid), (None, Some(oid)));

        // Not racy once the walk is dated after its change, however soon
        // after: stat data is trusted as it always was.
        let f_txt = entry(&first.entries, b"f.txt");
        old.taken_ns = f_txt.mtime_ns.max(f_txt.ctime_ns) + 1;
        let f = fresh(&ws, &cfg, &index_dir(&ws).unwrap(), Some(&old)).unwrap();
        assert_eq!(
            entry(&f.walked, b"f.txt").hash,
            Some(ContentHash::of(b"what was there"))
        );
    }

    /// A post's new current snapshot is written on a thread of its own: it
    /// holds the call's changes once the save is waited for, or dropped.
    #[test]
    fn a_posts_snapshot_is_saved_whether_waited_for_or_dropped() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("a.txt"), b"a").unwrap();
        let (ws, _) = Workspace::init(t.path(), Default::default()).unwrap();
        let cfg = Config::default();
        let current = |ws: &Workspace| load(ws, &index_dir(ws).unwrap(), "snapshot.bin").unwrap();
        let before = pre(&ws, &cfg, "call1").unwrap().0;
        std::fs::write(t.path().join("b.txt"), b"b").unwrap();
        let scanned = post(&ws, &cfg, &before).unwrap();
        assert_eq!(scanned.changes.len(), 1);
        let now = current(&ws);
        assert!(now.entries.keys().any(|k| k == b"b.txt"));

        std::fs::write(t.path().join("c.txt"), b"c").unwrap();
        drop(post(&ws, &cfg, &now).unwrap());
        assert!(current(&ws).entries.keys().any(|k| k == b"c.txt"));
    }

    /// The walk is dated by the file system: not before a change made ahead
    /// of it, and not after a change made once it is taken.
    #[test]
    fn the_file_systems_clock_dates_the_walk_between_the_changes_around_it() {
        let t = tempfile::tempdir().unwrap();
        let (ws, _) = Workspace::init(t.path(), Default::default()).unwrap();
        let ctime = |name: &str| {
            crate::sys::fstat(std::fs::File::open(t.path().join(name)).unwrap())
                .unwrap()
                .ctime_ns()
        };
        for _ in 0..20 {
            std::fs::write(t.path().join("before"), b"b").unwrap();
            let m = fs_now(&index_dir(&ws).unwrap());
            std::fs::write(t.path().join("after"), b"a").unwrap();
            assert!(ctime("before") <= m && m <= ctime("after"));
            // Taken from the marker, not the wall clock's fallback.
            assert_eq!(ctime(".agent-runtime/index/clock"), m);
        }
    }

    /// A snapshot stores each entry as a name under its directory's index,
    /// and reads back the same keys: at the root, nested, an entry whose
    /// directory the snapshot does not list (whole key), runs interleaved.
    /// A run naming a directory that is not there makes the snapshot
    /// damaged, not wrong; an older format is not read.
    #[test]
    fn a_snapshot_stores_names_under_their_directory_and_reads_back_whole_keys() {
        let e = |ino: u64| Entry {
            symlink: false,
            mode: 0o644,
            size: ino * 3,
            mtime_ns: 1_000 + ino as i64,
            ctime_ns: 2_000 + ino as i64,
            ino,
            hash: ino
                .is_multiple_of(2)
                .then(|| ContentHash::of(&ino.to_le_bytes())),
            git_oid: ino.is_multiple_of(3).then_some([ino as u8; 20]),
        };
        let dirs: Vec<(Vec<u8>, DirStat)> = [&b""[..], b"a", b"a/b", b"c"]
            .iter()
            .map(|k| (k.to_vec(), DirStat::default()))
            .collect();
        let keys: [&[u8]; 8] = [
            b"top.txt",
            b"README",
            b"a/x.rs",
            b"a/b/deep.rs",
            b"a/b/deeper.rs",
            b"a/y.rs",
            b"lost/dir/z",
            b"c/w",
        ];
        let entries: Entries = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, e(i as u64 + 1)))
            .collect();
        let s = Snapshot {
            taken_ns: 42,
            entries,
            dirs,
            global: 7,
        };
        let grouped = encode(&s);
        let back = decode(&grouped).unwrap();
        assert_eq!(back.entries, s.entries);
        assert_eq!(back.dirs, s.dirs);
        assert_eq!((back.taken_ns, back.global), (42, 7));
        // An older ckpt's format is not read (the cache is rebuilt).
        let mut old = grouped.clone();
        old[..8].copy_from_slice(b"CKPTSNP4");
        assert!(decode(&old).is_none());
        // A run naming directory 99 of 4: damaged.
        let mut bad = s.clone();
        bad.dirs.truncate(1);
        let mut bytes = encode(&bad);
        let body_end = bytes.len() - 32;
        // The first run's directory index, right after the entry count.
        let runs_at = 8 + 8 + 8 + 8 + (4 + 8 + 8 + 8 + 1 + 8) + 8;
        bytes[runs_at..runs_at + 4].copy_from_slice(&99u32.to_le_bytes());
        bytes.truncate(body_end);
        crate::binfile::seal(&mut bytes);
        assert!(decode(&bytes).is_none());
    }
}
