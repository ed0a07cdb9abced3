//! The content-addressed blob store, `.agent-runtime/artifacts/blobs/<2 hex>/<62 hex>`.
//!
//! A blob's name is the sha256 of its bytes, so writing one twice is harmless
//! and a reader can always check what it got. Writes stream through a temp file
//! in `tmp/` (bounded memory for any size), `fdatasync`, then publish with
//! `renameat2(RENAME_NOREPLACE)` and `fsync` the fan-out directory (B2): a blob is
//! durable before any ledger record names it. Reads re-hash every byte; a blob
//! that does not match its name, or is not a regular file, is an error and is
//! never used. Blobs are only ever addressed by hash, never by a path from a ledger.
//!
//! Contents of [`CHUNKED_FROM`] bytes or more are stored as chunks: cut
//! where the bytes say (content-defined chunking, FastCDC), each chunk a
//! blob of its own, and a manifest `artifacts/chunks/<2 hex>/<62 hex>`
//! named by the whole content's hash listing them. Two versions of a big
//! file that differ in a few places share every other chunk: a 200 MB file
//! with 4 bytes appended costs one more chunk, not 200 MB. The manifest is
//! published after its chunks; readers re-hash each chunk and the whole.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};

use rustix::fs::{AtFlags, FileType};

use crate::durable::{Durable, Keep};
use crate::failpoint;
use crate::fs_util::{self, FsError};
use crate::hash::{ContentHash, Hasher};

/// Files at most this big are read whole before storing (and skipped when the
/// store already has them); larger ones stream through a temp file.
const SMALL_FILE: u64 = 4 * 1024 * 1024;

/// Contents at least this big are stored as chunks (see the module doc).
pub const CHUNKED_FROM: u64 = 16 * 1024 * 1024;

/// The chunk sizes: at least, on average, at most (FastCDC's parameters).
const CHUNK_MIN: usize = 256 * 1024;
const CHUNK_AVG: usize = 1024 * 1024;
const CHUNK_MAX: usize = 4 * 1024 * 1024;

/// A manifest's first line.
const MANIFEST_MAGIC: &str = "ckpt-chunks 1";

/// A chunked content: its size and chunks (hash, length) in order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Manifest {
    size: u64,
    chunks: Vec<(ContentHash, u64)>,
}

impl Manifest {
    fn to_text(&self) -> String {
        let mut s = format!("{MANIFEST_MAGIC}\n{}\n", self.size);
        for (h, n) in &self.chunks {
            s.push_str(&format!("{} {n}\n", h.hex()));
        }
        s
    }

    /// `None` for anything but a whole, consistent manifest.
    fn parse(text: &[u8]) -> Option<Manifest> {
        let text = std::str::from_utf8(text).ok()?;
        let mut lines = text.strip_suffix('\n')?.split('\n');
        if lines.next()? != MANIFEST_MAGIC {
            return None;
        }
        let size: u64 = lines.next()?.parse().ok()?;
        let mut chunks = Vec::new();
        let mut total = 0u64;
        for l in lines {
            let (hex, n) = l.split_once(' ')?;
            let n: u64 = n.parse().ok()?;
            // Chunks are whole blobs no bigger than FastCDC's maximum.
            if n == 0 || n > CHUNK_MAX as u64 {
                return None;
            }
            total = total.checked_add(n)?;
            chunks.push((ContentHash::from_hex(hex)?, n));
        }
        (total == size).then_some(Manifest { size, chunks })
    }
}

/// A manifest found in the store: what it lists, its open file and its
/// fan-out directory (for freshening and syncing it).
struct FoundManifest {
    m: Manifest,
    file: File,
    dir: OwnedFd,
}

/// The name of `h`'s manifest under `artifacts/`.
fn manifest_path(h: &ContentHash) -> String {
    let (fan, rest) = rel_name(h);
    format!("chunks/{fan}/{rest}")
}

/// What went wrong with a blob.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// No blob with that hash.
    #[error("blob_missing: no stored content for {0}")]
    Missing(ContentHash),
    /// The content was left in git's object database (ckpt did not copy a
    /// file committed at HEAD), and git no longer has it.
    #[error(
        "blob_missing: the content for {0} was left in git's object database as blob {1}, which git no longer has (pruned after a history rewrite?)"
    )]
    GitMissing(ContentHash, String),
    /// The stored bytes do not hash to the blob's name.
    #[error(
        "blob_hash_mismatch: the stored content for {0} is damaged (its bytes hash to something else)"
    )]
    HashMismatch(ContentHash),
    /// The blob is a symlink, FIFO or other non-regular file.
    #[error("blob_not_regular: the stored content for {0} is not a regular file")]
    NotRegular(ContentHash),
    /// An I/O failure.
    #[error(transparent)]
    Io(#[from] FsError),
}

impl BlobError {
    /// The content the error is about (a chunk's, for a content stored as
    /// chunks whose chunk failed).
    pub fn hash(&self) -> Option<&ContentHash> {
        match self {
            BlobError::Missing(h)
            | BlobError::GitMissing(h, _)
            | BlobError::HashMismatch(h)
            | BlobError::NotRegular(h) => Some(h),
            BlobError::Io(_) => None,
        }
    }

    /// Returns the stable problem code (`blob_missing`, …).
    pub fn code(&self) -> &'static str {
        match self {
            BlobError::Missing(_) | BlobError::GitMissing(..) => "blob_missing",
            BlobError::HashMismatch(_) => "blob_hash_mismatch",
            BlobError::NotRegular(_) => "blob_not_regular",
            BlobError::Io(_) => "blob_io",
        }
    }
}

fn rel_name(h: &ContentHash) -> (String, String) {
    let hex = h.hex();
    (hex[..2].to_string(), hex[2..].to_string())
}

/// The blob store of one workspace.
#[derive(Debug, Clone)]
pub struct BlobStore {
    rt: Arc<OwnedFd>,
    blobs: Arc<OnceLock<OwnedFd>>,
    tmp: Arc<OnceLock<OwnedFd>>,
    /// The fan-out directories opened so far, by their first byte: a call
    /// that stores hundreds of blobs opens each at most once.
    fans: Arc<[OnceLock<OwnedFd>; 256]>,
    /// Where new and found blobs wait for their sync (the next record).
    durable: Arc<Durable>,
    /// Contents git's object database holds for ckpt ([`GitBacked`]).
    git: Arc<GitBacked>,
    /// Contents this process just stored or read, kept while
    /// [`keep_recent`](Self::keep_recent) is on ([`Recent`]).
    recent: Arc<Mutex<Option<Recent>>>,
}

/// Contents ckpt did not copy because the workspace's git repository holds
/// them as a blob committed at HEAD (the before side of a file a shell call
/// changed, clean against git before it): the issue's "from the git object
/// database for files clean against the index". Which hash is which git blob
/// is written in the ledger (`before_git` / `after_git` of a `file_patch`);
/// a reader that does not find a hash in the store looks there, reads the
/// blob with git2 (never writing to git) and checks its sha256 like any
/// stored blob.
#[derive(Debug, Default)]
struct GitBacked {
    /// The workspace's repositories; `None`: no fallback.
    repos: Option<Arc<crate::git::Repos>>,
    /// Noted by this process (before its records are written).
    noted: Mutex<HashMap<ContentHash, [u8; 20]>>,
    /// Read from the ledger on the first miss.
    recorded: OnceLock<HashMap<ContentHash, [u8; 20]>>,
}

/// While alive, the store keeps what it stores ([`BlobStore::keep_recent`]).
#[must_use = "the contents are kept only while the guard lives"]
pub struct KeepRecent<'a>(&'a BlobStore);

impl Drop for KeepRecent<'_> {
    fn drop(&mut self) {
        self.0.forget_recent();
    }
}

/// The bytes of contents stored (or read from git) by this process, up to a
/// budget, so that reading them back soon after costs neither a read nor a
/// second sha256 (a shell post diffs the contents it just stored).
struct Recent {
    map: HashMap<ContentHash, Arc<Vec<u8>>>,
    left: usize,
}

impl std::fmt::Debug for Recent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recent")
            .field("kept", &self.map.len())
            .field("left", &self.left)
            .finish()
    }
}

impl BlobStore {
    /// Opens the store under the runtime directory `rt`; what it stores is
    /// content for `durable` (durable before a record names it).
    pub fn new(rt: Arc<OwnedFd>, durable: Arc<Durable>) -> BlobStore {
        BlobStore {
            rt,
            blobs: Arc::default(),
            tmp: Arc::default(),
            fans: Arc::new(std::array::from_fn(|_| OnceLock::new())),
            durable,
            git: Arc::default(),
            recent: Arc::default(),
        }
    }

    /// Lets readers fall back on the git repository the workspace lies in
    /// for contents the ledger says git holds ([`GitBacked`]).
    pub fn with_git(mut self, repos: Arc<crate::git::Repos>) -> BlobStore {
        self.git = Arc::new(GitBacked {
            repos: Some(repos),
            ..GitBacked::default()
        });
        self
    }

    /// Notes that `h` is git's blob `oid` (its bytes `data`, read and checked
    /// by the caller) and was not copied: readers of this process find it,
    /// and the record that names `h` says so ([`git_noted`](Self::git_noted)).
    pub fn note_git(&self, h: ContentHash, oid: [u8; 20], data: Vec<u8>) {
        self.git
            .noted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(h, oid);
        self.remember(h, data);
    }

    /// The git blob this process noted for `h` ([`note_git`](Self::note_git)).
    pub fn git_noted(&self, h: &ContentHash) -> Option<[u8; 20]> {
        self.git
            .noted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(h)
            .copied()
    }

    /// The git blob that holds `h`, as noted by this process or recorded in
    /// the ledger (read once, on the first call).
    fn git_oid(&self, h: &ContentHash) -> Option<[u8; 20]> {
        self.git.repos.as_ref()?;
        if let Some(oid) = self.git_noted(h) {
            return Some(oid);
        }
        self.git
            .recorded
            .get_or_init(|| git_backed_in_ledger(self.rt.as_fd()))
            .get(h)
            .copied()
    }

    /// `h`'s bytes from git, checked against `h`; `Missing` when no record
    /// says git holds them.
    fn read_from_git(&self, h: &ContentHash) -> Result<Vec<u8>, BlobError> {
        let (Some(oid), Some(repos)) = (self.git_oid(h), self.git.repos.as_ref()) else {
            return Err(BlobError::Missing(*h));
        };
        let Some(bytes) = repos.read_blob(&oid) else {
            return Err(BlobError::GitMissing(*h, crate::hash::hex(&oid)));
        };
        if ContentHash::of(&bytes) != *h {
            return Err(BlobError::HashMismatch(*h));
        }
        Ok(bytes)
    }

    /// Keeps the bytes of contents this process stores or reads from git
    /// from now on, up to `budget` bytes in all, for
    /// [`get`](Self::get) to return without reading and hashing them again,
    /// until the returned guard is dropped (on every path, errors included).
    pub fn keep_recent(&self, budget: usize) -> KeepRecent<'_> {
        *self.recent.lock().unwrap_or_else(|e| e.into_inner()) = Some(Recent {
            map: HashMap::new(),
            left: budget,
        });
        KeepRecent(self)
    }

    /// Drops what [`keep_recent`](Self::keep_recent) kept and stops keeping.
    fn forget_recent(&self) {
        *self.recent.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Whether [`keep_recent`](Self::keep_recent) is on.
    fn keeping(&self) -> bool {
        self.recent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    fn remember(&self, h: ContentHash, data: Vec<u8>) {
        let mut slot = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = slot.as_mut()
            && data.len() <= r.left
            && !r.map.contains_key(&h)
        {
            r.left -= data.len();
            r.map.insert(h, Arc::new(data));
        }
    }

    fn recalled(&self, h: &ContentHash) -> Option<Arc<Vec<u8>>> {
        let slot = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref()?.map.get(h).cloned()
    }

    /// [`get`](Self::get) without a copy of what this process keeps in
    /// memory ([`keep_recent`](Self::keep_recent)).
    pub fn get_shared(&self, h: &ContentHash) -> Result<Arc<Vec<u8>>, BlobError> {
        match self.recalled(h) {
            Some(b) => Ok(b),
            None => self.get(h).map(Arc::new),
        }
    }

    fn err(op: &'static str, what: &str, e: impl Into<io::Error>) -> BlobError {
        BlobError::Io(FsError::new(op, format!(".agent-runtime/{what}"), e.into()))
    }

    fn blobs_dir(&self) -> Result<&OwnedFd, BlobError> {
        if let Some(fd) = self.blobs.get() {
            return Ok(fd);
        }
        let (art, _) =
            fs_util::open_or_create_private_dir(self.rt.as_fd(), "artifacts", &self.durable)
                .map_err(|e| Self::err("open", "artifacts", e))?;
        let (b, _) = fs_util::open_or_create_private_dir(art.as_fd(), "blobs", &self.durable)
            .map_err(|e| Self::err("open", "artifacts/blobs", e))?;
        Ok(self.blobs.get_or_init(|| b))
    }

    /// The fan-out directory `fan` (two hex digits), created if missing.
    fn fan_dir(&self, fan: &str) -> Result<&OwnedFd, BlobError> {
        let slot = u8::from_str_radix(fan, 16)
            .map(|i| &self.fans[usize::from(i)])
            .map_err(|_| {
                Self::err(
                    "open",
                    "artifacts/blobs",
                    io::Error::other("bad fan-out name"),
                )
            })?;
        if let Some(fd) = slot.get() {
            return Ok(fd);
        }
        let blobs = self.blobs_dir()?;
        // Usually there already: one open, no `mkdirat` failing with EEXIST.
        let fd = match fs_util::open_dir(blobs.as_fd(), fan) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs_util::open_or_create_private_dir(blobs.as_fd(), fan, &self.durable)
                    .map_err(|e| Self::err("create", "artifacts/blobs", e))?
                    .0
            }
            Err(e) => return Err(Self::err("open", "artifacts/blobs", e)),
        };
        Ok(slot.get_or_init(|| fd))
    }

    fn tmp_dir(&self) -> Result<&OwnedFd, BlobError> {
        if let Some(fd) = self.tmp.get() {
            return Ok(fd);
        }
        let (t, _) = fs_util::open_or_create_private_dir(self.rt.as_fd(), "tmp", &self.durable)
            .map_err(|e| Self::err("open", "tmp", e))?;
        Ok(self.tmp.get_or_init(|| t))
    }

    /// True when a blob with this hash is stored (its bytes are not re-hashed
    /// here), or git holds it for ckpt ([`GitBacked`]; the object is there).
    /// For content a record names (durable before the record); before
    /// relying on a copy nothing may name yet, use [`keeps`](Self::keeps).
    pub fn contains(&self, h: &ContentHash) -> bool {
        self.stored_size(h).is_some() || self.in_git(h)
    }

    /// True when git's object database holds `h` for ckpt ([`GitBacked`]).
    fn in_git(&self, h: &ContentHash) -> bool {
        self.git_oid(h)
            .zip(self.git.repos.as_ref())
            .is_some_and(|(oid, repos)| repos.has_blob(&oid))
    }

    /// True when `h` (whose bytes are `data`, when known) is held soundly,
    /// to be relied on as the only copy of bytes about to be overwritten (a
    /// user's file before a rollback): stored with those bytes (or bytes
    /// that hash to its name), that copy then waiting in the durable set
    /// (another process may have stored it without its sync done; a power
    /// loss may have left zeros under its name, which is not a copy), or in
    /// git's objects for ckpt.
    pub fn keeps(&self, h: &ContentHash, data: Option<&[u8]>) -> Result<bool, BlobError> {
        Ok(self.found_sound(h, data)? || self.in_git(h))
    }

    fn stored_size(&self, h: &ContentHash) -> Option<u64> {
        self.stored(h).map(|(size, _)| size)
    }

    /// Size and permission bits of a stored blob.
    fn stored(&self, h: &ContentHash) -> Option<(u64, u32)> {
        let (fan, rest) = rel_name(h);
        let blobs = self.blobs_dir().ok()?;
        // One `fstatat` of `xx/yyy…` (no open of the fan-out directory): this
        // runs for every file a call or a rollback touches.
        match crate::sys::lstat_at(blobs, format!("{fan}/{rest}").as_str()) {
            Ok(st) if st.file_type() == FileType::RegularFile => Some((st.size, st.mode & 0o777)),
            _ => self.manifest(h).ok().flatten().map(|f| (f.m.size, 0o600)),
        }
    }

    /// Where `h` is kept under `.agent-runtime/` (for messages and
    /// `repair`): its blob, or its manifest when it is stored as chunks.
    pub fn path_of(&self, h: &ContentHash) -> String {
        let (fan, rest) = rel_name(h);
        let whole = format!("artifacts/blobs/{fan}/{rest}");
        let blob_there = self
            .blobs_dir()
            .ok()
            .is_some_and(|b| crate::sys::lstat_at(b, format!("{fan}/{rest}").as_str()).is_ok());
        if !blob_there && matches!(self.manifest(h), Ok(Some(_)) | Err(_)) {
            return format!("artifacts/{}", manifest_path(h));
        }
        whole
    }

    /// `h`'s manifest, its open file and its fan-out directory, if `h` is
    /// stored as chunks. A manifest that does not parse is damaged:
    /// [`BlobError::HashMismatch`].
    fn manifest(&self, h: &ContentHash) -> Result<Option<FoundManifest>, BlobError> {
        let (fan, rest) = rel_name(h);
        let what = "artifacts/chunks";
        let dir = match fs_util::open_dir(self.rt.as_fd(), format!("{what}/{fan}")) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::err("open", what, e)),
        };
        let (mut file, size) = match fs_util::open_regular_at_sized(dir.as_fd(), OsStr::new(&rest))
        {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if fs_util::Refusal::of(&e).is_some() => return Err(BlobError::NotRegular(*h)),
            Err(e) => return Err(Self::err("open", what, e)),
        };
        // A manifest lists at most one line per 256 KiB of content.
        if size > 1 << 26 {
            return Err(BlobError::HashMismatch(*h));
        }
        let text =
            fs_util::read_to_end_sized(&mut file, size).map_err(|e| Self::err("read", what, e))?;
        match Manifest::parse(&text) {
            Some(m) => Ok(Some(FoundManifest { m, file, dir })),
            None => Err(BlobError::HashMismatch(*h)),
        }
    }

    /// The hashes of the chunks `h` is stored as (none when it is not).
    pub fn chunks_of(&self, h: &ContentHash) -> Result<Vec<ContentHash>, BlobError> {
        Ok(self
            .manifest(h)?
            .map(|f| f.m.chunks.into_iter().map(|(c, _)| c).collect())
            .unwrap_or_default())
    }

    /// [`found_sound`](Self::found_sound) for a content stored as chunks:
    /// every chunk sound (its bytes the matching part of `data`, or, without
    /// `data`, the whole hashing to `h`), each chunk and then the manifest
    /// freshened and joined to the durable set like a found blob.
    fn found_sound_chunked(&self, h: &ContentHash, data: Option<&[u8]>) -> Result<bool, BlobError> {
        let found = match self.manifest(h) {
            Ok(Some(x)) => x,
            Ok(None) | Err(BlobError::HashMismatch(_) | BlobError::NotRegular(_)) => {
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let sound = match data {
            Some(d) if d.len() as u64 != found.m.size => false,
            Some(d) => {
                let mut at = 0usize;
                let mut all = true;
                for (c, n) in &found.m.chunks {
                    let part = &d[at..at + *n as usize];
                    at += *n as usize;
                    if self.found_sound_blob(c, Some(part))? != Some(true) {
                        all = false;
                        break;
                    }
                }
                all
            }
            // One pass: each chunk re-hashed and kept, the whole checked.
            None => match self.copy_manifest(h, &found.m, &mut io::sink(), true) {
                Ok(_) => true,
                Err(BlobError::Io(e)) => return Err(BlobError::Io(e)),
                Err(_) => false,
            },
        };
        if sound {
            self.freshen_and_keep(&found.file, found.dir.as_fd())?;
        }
        Ok(sound)
    }

    /// Streams the content `m` lists (named `h`) into `w`: each chunk
    /// re-hashed (chunks are whole blobs: never chunked themselves, never
    /// read from git), then the whole. With `keep`, each chunk read is
    /// freshened and joined to the durable set (it is about to be named
    /// again). On `Err` the caller must discard what it received.
    fn copy_manifest(
        &self,
        h: &ContentHash,
        m: &Manifest,
        w: &mut dyn Write,
        keep: bool,
    ) -> Result<u64, BlobError> {
        let mut hasher = Hasher::new();
        let mut tee = Tee {
            hasher: &mut hasher,
            w,
        };
        let mut total = 0;
        for (c, n) in &m.chunks {
            let (mut f, size) = self.open_sized(c)?;
            if Self::copy_blob(c, &mut f, size, &mut tee)? != *n {
                return Err(BlobError::HashMismatch(*c));
            }
            if keep {
                let (fan, _) = rel_name(c);
                self.freshen_and_keep(&f, self.fan_dir(&fan)?.as_fd())?;
            }
            total += n;
        }
        if hasher.finish() != *h {
            return Err(BlobError::HashMismatch(*h));
        }
        Ok(total)
    }

    /// Stores what `reader` yields as chunks and a manifest (see the module
    /// doc); returns the whole content's hash and size. The chunks are
    /// stored (hashed, written) on a helper thread while this one reads,
    /// cuts and hashes the whole (a shell call creating a 200 MB file:
    /// 1.03 s against 0.82 s stored whole, medians of 4 alternating runs;
    /// each chunk is a blob of its own, with its fsync).
    fn put_chunked(&self, reader: &mut dyn Read) -> Result<(ContentHash, u64), BlobError> {
        let mut hasher = Hasher::new();
        let mut total = 0u64;
        // At most four chunks (16 MiB) wait between the threads.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
        let chunks = std::thread::scope(|s| {
            let store = s.spawn(move || -> Result<Vec<(ContentHash, u64)>, BlobError> {
                let mut chunks = Vec::new();
                for data in rx {
                    chunks.push((self.put_slice(&data)?, data.len() as u64));
                }
                Ok(chunks)
            });
            let mut read: Result<(), BlobError> = Ok(());
            for chunk in fastcdc::v2020::StreamCDC::new(reader, CHUNK_MIN, CHUNK_AVG, CHUNK_MAX) {
                let chunk = match chunk {
                    Ok(c) => c,
                    Err(e) => {
                        read = Err(Self::err("read", "source file", cdc_error(e)));
                        break;
                    }
                };
                hasher.update(&chunk.data);
                total += chunk.data.len() as u64;
                // The helper stopped at an error: it says which.
                if tx.send(chunk.data).is_err() {
                    break;
                }
            }
            drop(tx);
            let stored = match store.join() {
                Ok(r) => r,
                Err(p) => std::panic::resume_unwind(p),
            };
            read.and(stored)
        })?;
        let h = hasher.finish();
        let m = Manifest {
            size: total,
            chunks,
        };
        self.publish_manifest(&h, &m)?;
        Ok((h, total))
    }

    /// Gives `m` its name, after its chunks (each published or found sound
    /// above): an equal manifest already there is kept (freshened), any
    /// other replaced (ours lists chunks just checked).
    fn publish_manifest(&self, h: &ContentHash, m: &Manifest) -> Result<(), BlobError> {
        let what = "artifacts/chunks";
        let (art, _) =
            fs_util::open_or_create_private_dir(self.rt.as_fd(), "artifacts", &self.durable)
                .map_err(|e| Self::err("open", "artifacts", e))?;
        let (chunks, _) = fs_util::open_or_create_private_dir(art.as_fd(), "chunks", &self.durable)
            .map_err(|e| Self::err("open", what, e))?;
        let (fan, rest) = rel_name(h);
        let (dir, _) = fs_util::open_or_create_private_dir(chunks.as_fd(), &fan, &self.durable)
            .map_err(|e| Self::err("create", what, e))?;
        let text = m.to_text();
        let write = |no_replace| {
            fs_util::write_atomic(
                dir.as_fd(),
                OsStr::new(&rest),
                text.as_bytes(),
                0o600,
                no_replace,
                Keep::Named(&self.durable),
            )
        };
        match write(true) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match self.manifest(h) {
                Ok(Some(there)) if there.m == *m => {
                    self.freshen_and_keep(&there.file, there.dir.as_fd())
                }
                _ => write(false).map_err(|e| Self::err("repair", what, e)),
            },
            Err(e) => Err(Self::err("publish", what, e)),
        }
    }

    /// A stored copy (`f`, in `dir`) found and about to be named again:
    /// freshened (as git freshens an object it finds, for `git prune`:
    /// `ckpt gc` never removes one touched within its grace period; a
    /// failure only costs that protection against a gc running this very
    /// moment) and joined to the durable set (another process may have
    /// stored it moments ago, its sync not done yet).
    fn freshen_and_keep(&self, f: &File, dir: BorrowedFd<'_>) -> Result<(), BlobError> {
        let now = rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        };
        let omit = rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        };
        let _ = rustix::fs::futimens(
            f,
            &rustix::fs::Timestamps {
                last_access: omit,
                last_modification: now,
            },
        );
        self.durable
            .content(f)
            .and_then(|()| self.durable.content_dir(dir))
            .map_err(|e| Self::err("sync", "artifacts", e))
    }

    /// A copy of `h` already stored is used only once its bytes are `data`
    /// (or, without `data`, hash to its name): a power loss between a
    /// blob's name and its data reaching the disk leaves zeros or a torn
    /// prefix under the right name and size (no record names such a blob:
    /// records follow the sync). A sound copy joins this store's durable set
    /// like a new one: another process may have stored it moments ago, its
    /// sync not done yet (syncing clean data is cheap). `Ok(false)`: absent
    /// or unsound, store it anew.
    fn found_sound(&self, h: &ContentHash, data: Option<&[u8]>) -> Result<bool, BlobError> {
        match self.found_sound_blob(h, data)? {
            Some(sound) => Ok(sound),
            // Only contents this big are ever chunked (no lookup per chunk
            // or per small blob).
            None if data.is_some_and(|d| (d.len() as u64) < CHUNKED_FROM) => Ok(false),
            None => self.found_sound_chunked(h, data),
        }
    }

    /// [`found_sound`](Self::found_sound) of a whole blob only; `None` when
    /// there is none under `h`'s name.
    fn found_sound_blob(
        &self,
        h: &ContentHash,
        data: Option<&[u8]>,
    ) -> Result<Option<bool>, BlobError> {
        let (mut f, size) = match self.open_sized(h) {
            Ok(x) => x,
            Err(BlobError::Missing(_)) => return Ok(None),
            Err(BlobError::NotRegular(_)) => return Ok(Some(false)),
            Err(e) => return Err(e),
        };
        let sound = match data {
            Some(d) => {
                size == d.len() as u64
                    && fs_util::read_to_end_sized(&mut f, size)
                        .map_err(|e| Self::err("read", "artifacts/blobs", e))?
                        == d
            }
            None => hash_all(&mut f).map_err(|e| Self::err("read", "artifacts/blobs", e))? == *h,
        };
        if !sound {
            return Ok(Some(false));
        }
        let (fan, _) = rel_name(h);
        self.freshen_and_keep(&f, self.fan_dir(&fan)?.as_fd())?;
        Ok(Some(true))
    }

    /// Creates a temp file in `tmp/` for a new blob.
    fn create_tmp(&self, name: &str) -> Result<File, BlobError> {
        fs_util::create_excl(self.tmp_dir()?.as_fd(), OsStr::new(name), 0o600)
            .map_err(|e| Self::err("create", "tmp", e))
    }

    /// Stores `data`; returns its hash. Does nothing if it is already stored.
    pub fn put_bytes(&self, data: &[u8]) -> Result<ContentHash, BlobError> {
        let h = self.put_slice(data)?;
        if self.keeping() {
            self.remember(h, data.to_vec());
        }
        Ok(h)
    }

    /// [`put_bytes`](Self::put_bytes) of bytes the store may keep.
    pub fn put_vec(&self, data: Vec<u8>) -> Result<ContentHash, BlobError> {
        let h = self.put_slice(&data)?;
        self.remember(h, data);
        Ok(h)
    }

    fn put_slice(&self, data: &[u8]) -> Result<ContentHash, BlobError> {
        let h = ContentHash::of(data);
        if self.found_sound(&h, Some(data))? {
            return Ok(h);
        }
        if data.len() as u64 >= CHUNKED_FROM {
            let mut chunks = Vec::new();
            for c in fastcdc::v2020::FastCDC::new(data, CHUNK_MIN, CHUNK_AVG, CHUNK_MAX) {
                let part = &data[c.offset..c.offset + c.length];
                chunks.push((self.put_slice(part)?, part.len() as u64));
            }
            let m = Manifest {
                size: data.len() as u64,
                chunks,
            };
            self.publish_manifest(&h, &m)?;
            return Ok(h);
        }
        let tmp = self.tmp_dir()?;
        let name = fs_util::temp_name("blob-");
        let mut f = self.create_tmp(&name)?;
        if let Err(e) = f.write_all(data) {
            let _ = rustix::fs::unlinkat(tmp, name.as_str(), AtFlags::empty());
            return Err(Self::err("write", "tmp", e));
        }
        self.publish(&f, &name, &h)?;
        Ok(h)
    }

    /// Stores everything `reader` yields, in bounded memory; returns hash and size.
    pub fn put_reader(&self, reader: &mut dyn Read) -> Result<(ContentHash, u64), BlobError> {
        let tmp = self.tmp_dir()?;
        let name = fs_util::temp_name("blob-");
        let mut f = self.create_tmp(&name)?;
        let mut hasher = Hasher::new();
        let mut buf = vec![0u8; 1024 * 1024];
        let mut total = 0u64;
        let res: io::Result<()> = (|| {
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                hasher.update(&buf[..n]);
                f.write_all(&buf[..n])?;
                total += n as u64;
            }
            failpoint::hit("blob.after_tmp_write")
        })();
        if let Err(e) = res {
            let _ = rustix::fs::unlinkat(tmp, name.as_str(), AtFlags::empty());
            return Err(Self::err("store", "tmp", e));
        }
        let h = hasher.finish();
        // Publishing checks an existing copy and replaces it if it is damaged.
        self.publish(&f, &name, &h)?;
        Ok((h, total))
    }

    /// Stores the contents of an open regular file.
    pub fn put_file(&self, file: &mut File) -> Result<(ContentHash, u64), BlobError> {
        let size = file.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
        self.put_file_sized(file, size)
    }

    /// [`put_file`](Self::put_file) for a file whose size was just seen.
    pub fn put_file_sized(
        &self,
        file: &mut File,
        size: u64,
    ) -> Result<(ContentHash, u64), BlobError> {
        if size <= SMALL_FILE {
            let data = fs_util::read_to_end_sized(file, size)
                .map_err(|e| Self::err("read", "source file", e))?;
            let n = data.len() as u64;
            return Ok((self.put_vec(data)?, n));
        }
        if size >= CHUNKED_FROM && size != u64::MAX {
            return self.put_chunked(file);
        }
        self.put_reader(file)
    }

    /// Gives the temp file `tmp_name` (open as `f`, its bytes `h`) its name,
    /// unless a sound copy is there already; a damaged one is replaced. The
    /// data and the new name are then content of the durable set: published
    /// before its sync, which the next record waits for.
    fn publish(&self, f: &File, tmp_name: &str, h: &ContentHash) -> Result<(), BlobError> {
        let tmp = self.tmp_dir()?;
        let (fan, rest) = rel_name(h);
        let drop_tmp = || {
            let _ = rustix::fs::unlinkat(tmp, tmp_name, AtFlags::empty());
        };
        failpoint::hit("blob.before_publish").map_err(|e| Self::err("publish", "blob", e))?;
        let fanfd = self.fan_dir(&fan)?;
        match crate::sys::rename_noreplace(tmp.as_fd(), tmp_name, fanfd.as_fd(), &rest) {
            Ok(true) => {}
            Ok(false) => {
                // Someone stored the same bytes first. Keep theirs if it is sound;
                // if it is damaged, our copy replaces it.
                if self.found_sound(h, None)? {
                    drop_tmp();
                    return Ok(());
                }
                if let Err(e) = rustix::fs::renameat(tmp, tmp_name, fanfd, rest.as_str()) {
                    drop_tmp();
                    return Err(Self::err("repair", "blob", e));
                }
            }
            Err(e) => {
                drop_tmp();
                return Err(Self::err("publish", "blob", e));
            }
        }
        self.durable
            .content(f)
            .and_then(|()| self.durable.content_dir(fanfd))
            .map_err(|e| Self::err("sync", "artifacts/blobs", e))?;
        failpoint::hit("blob.after_publish").map_err(|e| Self::err("publish", "blob", e))?;
        Ok(())
    }

    /// [`open`](Self::open), also returning the blob's size.
    fn open_sized(&self, h: &ContentHash) -> Result<(File, u64), BlobError> {
        let (fan, rest) = rel_name(h);
        let blobs = self.blobs_dir()?;
        // One open of `xx/yyy…` (the file itself never through a symlink, its
        // bytes re-hashed by every reader) instead of two.
        let path = format!("{fan}/{rest}");
        match fs_util::open_regular_at_sized(blobs.as_fd(), OsStr::new(&path)) {
            Ok(f) => Ok(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(BlobError::Missing(*h)),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) => {
                Err(BlobError::NotRegular(*h))
            }
            Err(e)
                if matches!(
                    fs_util::Refusal::of(&e),
                    Some(fs_util::Refusal::NotRegular(_))
                ) =>
            {
                Err(BlobError::NotRegular(*h))
            }
            Err(e) => Err(Self::err("open", "artifacts/blobs", e)),
        }
    }

    /// Returns a blob's bytes after checking they hash to its name.
    pub fn get(&self, h: &ContentHash) -> Result<Vec<u8>, BlobError> {
        if let Some(b) = self.recalled(h) {
            return Ok(b.as_ref().clone());
        }
        let (mut f, size) = match self.open_sized(h) {
            Err(BlobError::Missing(_)) => {
                let Some(found) = self.manifest(h)? else {
                    return self.read_from_git(h);
                };
                let mut v = Vec::with_capacity(found.m.size as usize);
                self.copy_manifest(h, &found.m, &mut v, false)?;
                return Ok(v);
            }
            r => r?,
        };
        let v = fs_util::read_to_end_sized(&mut f, size)
            .map_err(|e| Self::err("read", "artifacts/blobs", e))?;
        if ContentHash::of(&v) != *h {
            return Err(BlobError::HashMismatch(*h));
        }
        Ok(v)
    }

    /// Streams a blob into `w`, checking the hash at the end. On `Err` the caller
    /// must discard what it received.
    pub fn copy_to(&self, h: &ContentHash, w: &mut dyn Write) -> Result<u64, BlobError> {
        let (mut f, size) = match self.open_sized(h) {
            Err(BlobError::Missing(_)) => {
                if let Some(found) = self.manifest(h)? {
                    return self.copy_manifest(h, &found.m, w, false);
                }
                let bytes = self.read_from_git(h)?;
                w.write_all(&bytes)
                    .map_err(|e| Self::err("copy", "blob", e))?;
                return Ok(bytes.len() as u64);
            }
            r => r?,
        };
        Self::copy_blob(h, &mut f, size, w)
    }

    /// Streams the blob file `f` (`size` bytes, named `h`) into `w`,
    /// checking the hash at the end.
    fn copy_blob(
        h: &ContentHash,
        f: &mut File,
        size: u64,
        w: &mut dyn Write,
    ) -> Result<u64, BlobError> {
        let mut hasher = Hasher::new();
        // Sized to the blob (most are small): zeroing a 1 MiB buffer per copy
        // was a tenth of a 110-file rollback's CPU time.
        let mut buf = vec![0u8; (size as usize).clamp(4096, 1 << 20) + 1];
        let mut total = 0u64;
        loop {
            let n = match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Self::err("read", "artifacts/blobs", e)),
            };
            hasher.update(&buf[..n]);
            w.write_all(&buf[..n])
                .map_err(|e| Self::err("copy", "blob", e))?;
            total += n as u64;
        }
        if hasher.finish() != *h {
            return Err(BlobError::HashMismatch(*h));
        }
        Ok(total)
    }

    /// Checks that a blob exists, is a regular file and hashes to its name.
    pub fn check(&self, h: &ContentHash) -> Result<(), BlobError> {
        self.copy_to(h, &mut io::sink()).map(|_| ())
    }
}

/// A writer that hashes what it passes on.
struct Tee<'a> {
    hasher: &'a mut Hasher,
    w: &'a mut dyn Write,
}

impl Write for Tee<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let n = self.w.write(b)?;
        self.hasher.update(&b[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

/// FastCDC's read error as an I/O error.
fn cdc_error(e: fastcdc::v2020::Error) -> io::Error {
    match e {
        fastcdc::v2020::Error::IoError(e) => e,
        other => io::Error::other(format!("{other:?}")),
    }
}

/// The sha256 of everything `f` yields.
fn hash_all(f: &mut File) -> io::Result<ContentHash> {
    let mut hasher = Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Ok(hasher.finish()),
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Which contents the ledger says git holds: the `before_git` / `after_git`
/// of its `file_patch` records (only lines that carry one are parsed). An
/// unreadable ledger gives none (the reader then reports the blob missing).
fn git_backed_in_ledger(rt: BorrowedFd<'_>) -> HashMap<ContentHash, [u8; 20]> {
    #[derive(serde::Deserialize)]
    struct Sides {
        #[serde(default)]
        before_hash: Option<ContentHash>,
        #[serde(default)]
        after_hash: Option<ContentHash>,
        #[serde(default)]
        before_git: Option<String>,
        #[serde(default)]
        after_git: Option<String>,
    }
    let mut map = HashMap::new();
    let Ok(bytes) = fs_util::open_regular_at_sized(rt, OsStr::new("ledger.jsonl"))
        .and_then(|(mut f, size)| fs_util::read_to_end_sized(&mut f, size))
    else {
        return map;
    };
    let finder = memchr::memmem::Finder::new(b"_git\":\"");
    for line in bytes.split(|&b| b == b'\n') {
        if finder.find(line).is_none() {
            continue;
        }
        let Ok(s) = serde_json::from_slice::<Sides>(line) else {
            continue;
        };
        for (h, oid) in [(s.before_hash, s.before_git), (s.after_hash, s.after_git)] {
            if let (Some(h), Some(oid)) = (h, oid.as_deref().and_then(crate::hash::oid_from_hex)) {
                map.insert(h, oid);
            }
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_in(dir: &std::path::Path) -> (BlobStore, Arc<Durable>) {
        let rt = Arc::new(fs_util::open_dir(rustix::fs::CWD, dir).unwrap());
        let d = Arc::new(Durable::new(crate::durable::Fsync::On));
        (BlobStore::new(rt, d.clone()), d)
    }

    fn path_of(dir: &std::path::Path, h: &ContentHash) -> std::path::PathBuf {
        let (fan, rest) = rel_name(h);
        dir.join("artifacts/blobs").join(fan).join(rest)
    }

    /// A new blob, and one found already stored (another process may not
    /// have synced it yet), both wait in the durable set for the next record.
    #[test]
    fn new_and_found_blobs_wait_for_the_next_record() {
        let dir = tempfile::tempdir().unwrap();
        let (store, d) = store_in(dir.path());
        let h = store.put_bytes(b"new\n").unwrap();
        // Published, readable, its sync waiting.
        assert_eq!(store.get(&h).unwrap(), b"new\n");
        assert!(!d.is_clean());
        d.before_records().unwrap();
        assert!(d.is_clean());
        assert_eq!(store.put_bytes(b"new\n").unwrap(), h);
        assert!(!d.is_clean(), "a found blob is synced by its finder too");
        d.before_records().unwrap();
        let (s, _) = store.put_reader(&mut &b"streamed\n"[..]).unwrap();
        assert!(!d.is_clean());
        d.before_records().unwrap();
        assert_eq!(store.put_reader(&mut &b"streamed\n"[..]).unwrap().0, s);
        assert!(!d.is_clean());
        // Nothing left in tmp/.
        assert_eq!(
            std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
            0
        );
    }

    /// Zeros of the right size under a blob's name (a power loss between
    /// the name and the data) are never trusted: the next store of those
    /// bytes replaces them, by either path.
    #[test]
    fn a_blob_of_zeros_under_its_name_is_replaced_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _d) = store_in(dir.path());
        for (i, small) in [true, false].into_iter().enumerate() {
            let data = format!("content {i}\n").into_bytes();
            let h = store.put_bytes(&data).unwrap();
            std::fs::write(path_of(dir.path(), &h), vec![0u8; data.len()]).unwrap();
            assert_eq!(store.get(&h).unwrap_err().code(), "blob_hash_mismatch");
            let again = if small {
                store.put_bytes(&data).unwrap()
            } else {
                store.put_reader(&mut &data[..]).unwrap().0
            };
            assert_eq!(again, h);
            assert_eq!(store.get(&h).unwrap(), data);
        }
    }
}

#[cfg(test)]
mod chunk_tests {
    use super::*;

    /// `n` bytes of deterministic noise (xorshift), different per `seed`.
    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.truncate(n);
        v
    }

    fn store_in(dir: &std::path::Path) -> BlobStore {
        let rt = Arc::new(fs_util::open_dir(rustix::fs::CWD, dir).unwrap());
        BlobStore::new(rt, Arc::new(Durable::new(crate::durable::Fsync::Off)))
    }

    /// The bytes of the files under `dir`, recursively.
    fn du(dir: &std::path::Path) -> u64 {
        std::fs::read_dir(dir).map_or(0, |rd| {
            rd.map(|e| {
                let e = e.unwrap();
                let md = e.metadata().unwrap();
                if md.is_dir() { du(&e.path()) } else { md.len() }
            })
            .sum()
        })
    }

    #[test]
    fn a_manifest_parses_back_and_nothing_else_does() {
        let a = ContentHash::of(b"a");
        let b = ContentHash::of(b"b");
        let m = Manifest {
            size: 300_000 + 5,
            chunks: vec![(a, 300_000), (b, 5)],
        };
        assert_eq!(Manifest::parse(m.to_text().as_bytes()), Some(m.clone()));
        let text = m.to_text();
        let bad = [
            String::new(),
            "garbage".to_string(),
            text.trim_end().to_string(), // torn: no final newline
            text.replace("ckpt-chunks 1", "ckpt-chunks 2"), // unknown format
            text.replace("300005", "300006"), // sizes disagree
            text.replace(" 5\n", " 0\n").replace("300005", "300000"), // empty chunk
            text.replace(&a.hex()[..10], "zzzzzzzzzz"), // not a hash
            format!(
                "{MANIFEST_MAGIC}\n{}\n{} {}\n",
                CHUNK_MAX + 1,
                a.hex(),
                CHUNK_MAX + 1
            ),
        ];
        for t in bad {
            assert_eq!(Manifest::parse(t.as_bytes()), None, "{t:?}");
        }
    }

    /// A big content is stored as chunks (no whole blob), a version with
    /// four bytes changed in the middle adds about one chunk, and both read
    /// back byte for byte by every reader.
    #[test]
    fn big_contents_are_chunked_and_versions_share_their_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_in(dir.path());
        let v1 = noise(20 << 20, 7);
        let mut v2 = v1.clone();
        v2[10 << 20..(10 << 20) + 4].copy_from_slice(b"abcd");
        let src = dir.path().join("v1");
        std::fs::write(&src, &v1).unwrap();
        let (h1, n) = store.put_file(&mut File::open(&src).unwrap()).unwrap();
        assert_eq!((h1, n), (ContentHash::of(&v1), v1.len() as u64));
        let h2 = store.put_bytes(&v2).unwrap();
        assert_eq!(h2, ContentHash::of(&v2));
        let blobs = du(&dir.path().join("artifacts/blobs"));
        assert!(
            blobs < v1.len() as u64 + (CHUNK_MAX as u64),
            "two versions take {blobs} bytes"
        );
        for (h, v) in [(h1, &v1), (h2, &v2)] {
            assert!(store.path_of(&h).starts_with("artifacts/chunks/"));
            assert!(store.chunks_of(&h).unwrap().len() > 4);
            assert_eq!(&store.get(&h).unwrap(), v);
            let mut out = Vec::new();
            assert_eq!(store.copy_to(&h, &mut out).unwrap(), v.len() as u64);
            assert_eq!(&out, v);
            store.check(&h).unwrap();
            assert!(store.contains(&h));
        }
        // Storing either again adds nothing.
        store.put_bytes(&v1).unwrap();
        store.put_file(&mut File::open(&src).unwrap()).unwrap();
        assert_eq!(du(&dir.path().join("artifacts/blobs")), blobs);
        // No whole blob of either: every stored file is a chunk.
        for h in [h1, h2] {
            let (fan, rest) = rel_name(&h);
            assert!(
                !dir.path()
                    .join("artifacts/blobs")
                    .join(fan)
                    .join(rest)
                    .exists()
            );
        }
        assert_eq!(
            std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
            0
        );
    }

    /// A damaged chunk fails every reader with the chunk's own hash (so
    /// verify names the chunk), and storing the content again replaces it;
    /// a manifest that is garbage fails as the content's damage, without a
    /// panic, and is replaced the same way.
    #[test]
    fn a_damaged_chunk_or_manifest_is_refused_then_replaced_by_the_next_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_in(dir.path());
        let v = noise(17 << 20, 11);
        let h = store.put_bytes(&v).unwrap();
        // Relied on as the only copy (a rollback's backup of a big file
        // whose bytes it did not keep): sound while every chunk is.
        assert!(store.keeps(&h, None).unwrap());
        let chunks = store.chunks_of(&h).unwrap();
        let victim = chunks[chunks.len() / 2];
        let (fan, rest) = rel_name(&victim);
        let at = dir.path().join("artifacts/blobs").join(fan).join(rest);
        let mut bytes = std::fs::read(&at).unwrap();
        bytes[100] ^= 1;
        std::fs::write(&at, &bytes).unwrap();
        for e in [store.get(&h).unwrap_err(), store.check(&h).unwrap_err()] {
            assert_eq!(e.code(), "blob_hash_mismatch");
            assert_eq!(e.hash(), Some(&victim));
        }
        assert!(store.path_of(&victim).starts_with("artifacts/blobs/"));
        assert!(
            !store.keeps(&h, None).unwrap(),
            "a damaged chunk is no copy"
        );
        assert_eq!(store.put_bytes(&v).unwrap(), h);
        assert!(store.keeps(&h, None).unwrap());
        assert_eq!(store.get(&h).unwrap(), v);

        let manifest = dir.path().join("artifacts").join(manifest_path(&h));
        for garbage in [&b"garbage"[..], b"", &vec![b'x'; 1 << 20]] {
            std::fs::write(&manifest, garbage).unwrap();
            let e = store.get(&h).unwrap_err();
            assert_eq!((e.code(), e.hash()), ("blob_hash_mismatch", Some(&h)));
            assert!(store.check(&h).is_err());
            assert!(store.chunks_of(&h).is_err());
            assert_eq!(
                store.path_of(&h),
                format!("artifacts/{}", manifest_path(&h))
            );
            assert_eq!(store.put_bytes(&v).unwrap(), h);
            assert_eq!(store.get(&h).unwrap(), v);
        }
        // A manifest whose chunks are sound but of other bytes: the whole
        // hash catches it.
        let other = store.put_bytes(&noise(17 << 20, 12)).unwrap();
        std::fs::copy(
            dir.path().join("artifacts").join(manifest_path(&other)),
            &manifest,
        )
        .unwrap();
        assert_eq!(store.get(&h).unwrap_err().hash(), Some(&h));
        assert!(store.check(&h).is_err());
    }
}

#[cfg(test)]
mod recent_tests {
    use super::*;

    /// While the store keeps recent contents, reading one back does not
    /// touch the file (here removed); once it stops, the file is read.
    #[test]
    fn contents_kept_in_memory_are_read_back_without_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let rt = Arc::new(fs_util::open_dir(rustix::fs::CWD, dir.path()).unwrap());
        let store = BlobStore::new(rt, Arc::default());
        let src = dir.path().join("src.txt");
        std::fs::write(&src, b"kept in memory\n").unwrap();
        let kept = store.keep_recent(1 << 20);
        let mut f = File::open(&src).unwrap();
        let (h, _) = store.put_file_sized(&mut f, 15).unwrap();
        let small = store.put_bytes(b"a symlink target").unwrap();
        let (fan, rest) = rel_name(&h);
        std::fs::remove_file(dir.path().join("artifacts/blobs").join(fan).join(rest)).unwrap();
        assert_eq!(
            store.get_shared(&h).unwrap().as_slice(),
            b"kept in memory\n"
        );
        assert_eq!(store.get(&h).unwrap(), b"kept in memory\n");
        assert_eq!(store.get(&small).unwrap(), b"a symlink target");
        drop(kept);
        assert_eq!(store.get(&h).unwrap_err().code(), "blob_missing");
        // Beyond the budget nothing is kept.
        let _kept = store.keep_recent(4);
        let big = store.put_bytes(b"more than four bytes").unwrap();
        let (fan, rest) = rel_name(&big);
        std::fs::remove_file(dir.path().join("artifacts/blobs").join(fan).join(rest)).unwrap();
        assert!(store.get(&big).is_err());
    }
}
