//! File-system primitives: durable atomic writes, directory fsync, and the
//! workspace-confined reader/writer.
//!
//! Every path here is opened relative to a directory handle. Inside the
//! workspace, resolution uses `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)` (falling back, where the kernel lacks `openat2`, to a
//! walk that opens each component with `O_NOFOLLOW`), so a directory swapped for a
//! symlink mid-operation cannot redirect a write outside (RELIABILITY.md B4, S12–S13).
//! "Canonicalise, check the prefix, open by path" is never used.
//!
//! # Limitations
//! POSIX has no compare-and-swap on file contents: a user's editor can still
//! write between our last check and our `rename`. Callers keep that window to one
//! `fstat` and one `rename` (see `rollback`).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, ResolveFlags};
use rustix::io::Errno;

use crate::failpoint;
use crate::paths::RelPath;

/// An I/O failure with the path and the operation it concerns.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} `{path}`: {source}")]
pub struct FsError {
    /// What was being done (`open`, `write`, `fsync`, …).
    pub op: &'static str,
    /// The path concerned, for display.
    pub path: String,
    /// The underlying error.
    #[source]
    pub source: io::Error,
}

impl FsError {
    /// Wraps an I/O error with its operation and path.
    pub fn new(op: &'static str, path: impl Into<String>, source: io::Error) -> FsError {
        FsError {
            op,
            path: path.into(),
            source,
        }
    }

    /// True when resolution was refused because a component is a symlink or
    /// leaves the directory (`E_UNSAFE_PATH`).
    pub fn is_unsafe_path(&self) -> bool {
        matches!(self.source.raw_os_error(), Some(e) if e == Errno::LOOP.raw_os_error() || e == Errno::XDEV.raw_os_error())
            || self.source.kind() == io::ErrorKind::Other
                && self.source.to_string().starts_with("E_UNSAFE_PATH")
    }
}

fn unsafe_path(what: &str) -> io::Error {
    io::Error::other(format!("E_UNSAFE_PATH: {what}"))
}

/// Returns a name for a temp file that no other process or thread will pick.
pub fn temp_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    // getpid is a system call (glibc no longer caches it); a process never
    // changes its pid (ckpt forks only to exec).
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    format!(
        "{prefix}{}-{}-{n}-{:x}",
        PID.get_or_init(std::process::id),
        t % 1_000_000_000_000,
        random_u64()
    )
}

/// Returns 64 bits of per-process randomness (std's randomly keyed SipHash).
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher as _};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// `fsync`s a directory so that new or renamed entries in it survive a crash.
/// While a [`SyncSet`] is collecting, the sync is queued for its flush instead.
pub fn fsync_dir(dir: BorrowedFd<'_>) -> io::Result<()> {
    // A rename or create is only durable once the directory holding the entry is
    // synced; ext4's auto_da_alloc is not something to rely on (RELIABILITY B6).
    if crate::durability_off() {
        return Ok(());
    }
    if queue(dir, SyncKind::Dir)? {
        return Ok(());
    }
    rustix::fs::fsync(dir)?;
    Ok(())
}

/// [`fsync_dir`], never queued: for the ledger's own directory entries.
pub fn fsync_dir_now(dir: BorrowedFd<'_>) -> io::Result<()> {
    if crate::durability_off() {
        return Ok(());
    }
    rustix::fs::fsync(dir)?;
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SyncKind {
    Data,
    /// `fdatasync`, then set the permission bits (see [`sync_data_then_mode`]).
    DataThenMode(u32),
    Dir,
}

/// One queued sync: its own handle on the file or directory, what to do, and
/// (for directories) the inode, so a directory is synced once.
struct Queued {
    fd: OwnedFd,
    kind: SyncKind,
    dir_id: Option<(u64, u64)>,
}

impl Queued {
    /// An `fdatasync` of `fd` (a handle of its own).
    fn data(fd: BorrowedFd<'_>) -> io::Result<Queued> {
        Ok(Queued {
            fd: rustix::io::fcntl_dupfd_cloexec(fd, 0)?,
            kind: SyncKind::Data,
            dir_id: None,
        })
    }
}

thread_local! {
    /// Syncs queued while a [`SyncSet`] is collecting on this thread (`None`:
    /// not collecting). Per thread, so one thread's set never holds back
    /// another thread's sync, nor is flushed by it.
    static QUEUED: std::cell::RefCell<Option<Vec<Queued>>> = const { std::cell::RefCell::new(None) };
}

/// More queued syncs than this are run at once (bounded open handles).
const MAX_QUEUED: usize = 256;

/// At most this many threads run queued syncs.
const SYNC_THREADS: usize = 8;

/// Queues a sync of `fd` when a [`SyncSet`] is collecting; returns whether it did.
fn queue(fd: BorrowedFd<'_>, kind: SyncKind) -> io::Result<bool> {
    QUEUED.with_borrow_mut(|q| {
        let Some(list) = q.as_mut() else {
            return Ok(false);
        };
        let dir_id = if kind == SyncKind::Dir {
            // One fsync per directory, however many entries changed in it.
            let st = rustix::fs::fstat(fd)?;
            let id = (st.st_dev, st.st_ino);
            if list.iter().any(|q| q.dir_id == Some(id)) {
                return Ok(true);
            }
            Some(id)
        } else {
            None
        };
        if list.len() >= MAX_QUEUED {
            run_syncs(&std::mem::take(list))?;
        }
        list.push(Queued {
            fd: rustix::io::fcntl_dupfd_cloexec(fd, 0)?,
            kind,
            dir_id,
        });
        Ok(true)
    })
}

/// True while a [`SyncSet`] is collecting this thread's syncs (they are not
/// done yet when the calls return).
pub fn collecting() -> bool {
    QUEUED.with_borrow(Option::is_some)
}

/// Makes every sync this thread queued so far durable now (see [`SyncSet`]); a
/// no-op when nothing is queued. The ledger calls it before every append, so a
/// record is never written before the content it names is durable.
pub fn flush_queued() -> io::Result<()> {
    let list = QUEUED.with_borrow_mut(|q| q.as_mut().map(std::mem::take).unwrap_or_default());
    run_syncs(&list)
}

/// From this many queued syncs on, one `syncfs` per file system replaces
/// them: each `fdatasync` ends in a device cache flush of its own (ext4
/// without a journal, or any file system once the data is written), and
/// hundreds of them cost hundreds of flushes; `syncfs` writes everything back
/// and flushes once. Its price is that it also writes back other processes'
/// dirty data on the same file system, so small sets (every hook) keep their
/// own syncs.
const SYNCFS_FROM: usize = 32;

/// [`run_syncs`] for a large set: one `syncfs` per device the queued handles
/// live on (a workspace may hold mount points), then the permission bits of
/// [`SyncKind::DataThenMode`] entries.
fn syncfs_each_device(list: &[Queued]) -> io::Result<()> {
    let mut done: Vec<u64> = Vec::new();
    for q in list {
        let dev = rustix::fs::fstat(&q.fd)?.st_dev;
        if !done.contains(&dev) {
            rustix::fs::syncfs(&q.fd)?;
            done.push(dev);
        }
    }
    set_modes(list)
}

/// Syncs taken out of this thread's queue by [`take_queued`], to be run
/// beside a ledger append that does not name what they cover
/// ([`crate::ledger::LedgerLock::append_beside`]).
#[derive(Default)]
pub struct Pending(Vec<Queued>);

impl Pending {
    /// True when nothing was queued.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds `other`'s syncs to these.
    pub fn extend(&mut self, mut other: Pending) {
        self.0.append(&mut other.0);
    }

    /// Runs the syncs now (concurrently); dropped unrun, they are run then too.
    pub fn run(mut self) -> io::Result<()> {
        run_syncs(&std::mem::take(&mut self.0))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let _ = run_syncs(&std::mem::take(&mut self.0));
    }
}

type Background = Vec<(Before, Running<io::Result<()>>)>;

thread_local! {
    /// Syncs this thread started on threads of their own
    /// ([`in_background`]), and whether the next record may be
    /// written before they are done. Per thread, like [`QUEUED`]: the thread
    /// that started them waits for them.
    static BACKGROUND: std::cell::RefCell<Background> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether syncs run in the background must be done before the next ledger
/// record is written, or only before it is reported durable.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Before {
    /// Before the record is written: what they cover may hold content a
    /// record names (a new directory of the store, say).
    Records,
    /// Only before the append returns: nothing a record names depends on
    /// them (a cache file, say).
    Return,
}

/// Runs `work` on a thread of its own and returns at once; this thread's
/// next ledger append waits for it (before it writes, or before it returns,
/// as `before` says) and reports its error, and so do [`wait_background`]
/// and the `ckpt` binary's exit. For work whose result nothing needs until
/// then (syncs, a cache file), overlapping what this thread does meanwhile.
/// Run here when no thread can be started.
pub fn in_background(
    before: Before,
    work: impl FnOnce() -> io::Result<()> + Send + 'static,
) -> io::Result<()> {
    match spawn_or_run(work) {
        Ok(h) => {
            BACKGROUND.with_borrow_mut(|b| b.push((before, h)));
            Ok(())
        }
        Err(done) => done,
    }
}

/// Work started on a thread of its own by [`spawn_or_run`].
#[derive(Debug)]
pub struct Running<T>(Option<std::thread::JoinHandle<Option<T>>>);

impl<T> Running<T> {
    /// Waits for the work: what it returned, `None` if it panicked.
    pub fn join(self) -> Option<T> {
        self.0?.join().ok().flatten()
    }
}

/// Runs `work` on a new thread (`Ok`: its handle), or here when no thread
/// can be started (`Err`: what it returned).
pub fn spawn_or_run<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<Running<T>, T> {
    // Shared, so that a thread that could not be started leaves it here.
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(work)));
    let theirs = slot.clone();
    let take = |s: &std::sync::Mutex<Option<_>>| {
        s.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    };
    let spawned = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || take(&theirs).map(|w| w()));
    match spawned {
        Ok(h) => Ok(Running(Some(h))),
        Err(_) => match take(&slot) {
            Some(w) => Err(w()),
            // (Unreachable: only the thread takes it otherwise; joins as
            // lost work.)
            None => Ok(Running(None)),
        },
    }
}

/// `fdatasync`s `f` on a thread of its own ([`in_background`]),
/// unless tests switched syncs off (`CKPT_TEST_FSYNC=0`); also inside a batch.
pub fn sync_data_in_background(f: &File, before: Before) -> io::Result<()> {
    if crate::test_no_fsync() {
        return Ok(());
    }
    let sync = Pending(vec![Queued::data(f.as_fd())?]);
    in_background(before, move || sync.run())
}

/// True while work this thread started in the background must be done
/// before its next record is written (`Before::Records`).
pub fn background_before_records() -> bool {
    BACKGROUND.with_borrow(|b| b.iter().any(|(w, _)| *w == Before::Records))
}

/// Waits for the syncs this thread started in the background
/// ([`in_background`]);
/// with `Before::Records`, only for those that must precede a record. The
/// first error is returned, after every one has finished.
pub fn wait_background(only: Option<Before>) -> io::Result<()> {
    let taken: Background = BACKGROUND.with_borrow_mut(|list| {
        let (take, keep) = std::mem::take(list)
            .into_iter()
            .partition(|(b, _)| only.is_none_or(|o| o == *b));
        *list = keep;
        take
    });
    // Every thread is joined, whatever the first one returned.
    let mut result = Ok(());
    for (_, h) in taken {
        result = first_error(result, h.join());
    }
    result
}

/// `acc`, or else the outcome of a joined sync thread (`None`: it panicked).
fn first_error(acc: io::Result<()>, joined: Option<io::Result<()>>) -> io::Result<()> {
    let r = joined.unwrap_or_else(|| Err(io::Error::other("a sync thread panicked")));
    acc.and(r)
}

/// Takes every sync this thread queued so far, without running it: for
/// content that the next ledger record does not name (temp files, patch
/// artifacts named only by a later record), whose sync can overlap the
/// record's own `fdatasync` instead of preceding it.
pub fn take_queued() -> Pending {
    Pending(QUEUED.with_borrow_mut(|q| q.as_mut().map(std::mem::take).unwrap_or_default()))
}

/// Runs the syncs at once: concurrent `fdatasync`/`fsync` calls share journal
/// commits (ext4's jbd2, xfs's log force), so a hook that stored a blob and a
/// patch waits for about one commit instead of four in a row. The first error
/// is returned (after every sync has been tried).
fn run_syncs(list: &[Queued]) -> io::Result<()> {
    if list.len() >= SYNCFS_FROM {
        return syncfs_each_device(list);
    }
    let one = |q: &Queued| -> io::Result<()> {
        match q.kind {
            SyncKind::Data | SyncKind::DataThenMode(_) => rustix::fs::fdatasync(&q.fd)?,
            SyncKind::Dir => rustix::fs::fsync(&q.fd)?,
        }
        Ok(())
    };
    if list.len() <= 1 {
        list.iter().try_for_each(one)?;
        return set_modes(list);
    }
    let next = AtomicU64::new(0);
    let work = || -> io::Result<()> {
        let mut result = Ok(());
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed) as usize;
            let Some(q) = list.get(i) else {
                return result;
            };
            let r = one(q);
            if result.is_ok() {
                result = r;
            }
        }
    };
    std::thread::scope(|s| {
        let helpers: Vec<_> = (1..list.len().min(SYNC_THREADS))
            .filter_map(|_| {
                std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn_scoped(s, work)
                    .ok()
            })
            .collect();
        // This thread works too (alone, if no helper could be started).
        let mut result = work();
        for h in helpers {
            result = first_error(result, h.join().ok());
        }
        result
    })?;
    set_modes(list)
}

/// Gives each [`SyncKind::DataThenMode`] entry its final permission bits,
/// once every sync of the set is done: a blob's bits say "durable, name
/// it freely" to other processes, and that includes its directory entry,
/// whose fan-out directory's `fsync` is in the same set (it may finish after
/// the blob's own `fdatasync`). Best effort: a blob left in flight is only
/// synced again by whoever finds it.
fn set_modes(list: &[Queued]) -> io::Result<()> {
    failpoint::hit("syncs.before_modes")?;
    for q in list {
        if let SyncKind::DataThenMode(mode) = q.kind {
            let _ = rustix::fs::fchmod(&q.fd, Mode::from_raw_mode(mode));
        }
    }
    Ok(())
}

/// Collects the syncs of blobs, patches and other content written while it is
/// alive and runs them together, concurrently, at [`flush`](SyncSet::flush) (or
/// before the next ledger append, whichever comes first): the per-call form of
/// "data before pointers" (one short wait instead of a fsync per file, without
/// the whole-file-system `syncfs` of a batch). Content is renamed into place
/// before its sync; nothing names it until the flush is done. Dropped without
/// `flush`, it still syncs what was queued. Not nestable: an inner one is inert.
pub struct SyncSet {
    active: bool,
}

impl SyncSet {
    /// Starts collecting this thread's syncs (unless a set already is).
    pub fn start() -> SyncSet {
        let active = QUEUED.with_borrow_mut(|q| {
            if q.is_some() {
                return false;
            }
            *q = Some(Vec::new());
            true
        });
        SyncSet { active }
    }

    /// Syncs everything queued and stops collecting.
    pub fn flush(mut self) -> io::Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> io::Result<()> {
        if !std::mem::take(&mut self.active) {
            return Ok(());
        }
        let list = QUEUED.with_borrow_mut(Option::take).unwrap_or_default();
        run_syncs(&list)
    }
}

impl Drop for SyncSet {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Makes everything written so far durable with one `syncfs` of the file
/// system holding `dir`: the batch form of "data before pointers", used when a
/// call changed many files (one flush instead of two fsyncs per file).
pub fn sync_all_under(dir: BorrowedFd<'_>) -> io::Result<()> {
    if crate::durability_off() || DEFERRED.swap(0, Ordering::Relaxed) == 0 {
        return Ok(());
    }
    rustix::fs::syncfs(dir)?;
    Ok(())
}

static DEFERRED: AtomicU64 = AtomicU64::new(0);

/// Notes that content a record will name was written without a sync (inside a
/// batch); [`sync_all_under`] flushes only when there is such content.
pub fn note_deferred() {
    DEFERRED.fetch_add(1, Ordering::Relaxed);
}

/// True inside a batch (durability deferred) that already wrote content
/// without a sync: its end runs one `syncfs` ([`sync_all_under`]), which
/// flushes anything else written on that file system before it.
pub fn batch_will_sync() -> bool {
    crate::durability_off() && DEFERRED.load(Ordering::Relaxed) > 0
}

/// Starts counting deferred writes from zero (the start of a batch).
pub fn reset_deferred() {
    DEFERRED.store(0, Ordering::Relaxed);
}

/// Starts writing back `f`'s dirty pages now, without waiting: inside a
/// batch whose end runs one `syncfs` ([`sync_all_under`]), so that the disk
/// works while the batch goes on computing, and the `syncfs` finds less to
/// write. (`POSIX_FADV_DONTNEED` starts writeback of dirty pages and drops
/// only clean ones.) Best effort: nothing depends on it.
pub fn start_writeback(f: &File) {
    if crate::durability_off() && !crate::test_no_fsync() {
        let _ = rustix::fs::fadvise(f, 0, None, rustix::fs::Advice::DontNeed);
    }
}

/// Starts writing `len` bytes of `f` from `offset` to disk now, without
/// waiting (`POSIX_FADV_DONTNEED` starts writeback of dirty pages and drops
/// only clean ones, so bytes just written stay cached): a later
/// `fdatasync` finds them on their way and waits less (0.88 -> 0.50 ms
/// median for a 300-byte append with 1.5 ms of work between, on this
/// project's VM). Best effort; nothing depends on it.
pub fn start_writeback_range(f: &File, offset: u64, len: u64) {
    if !crate::test_no_fsync()
        && let Some(len) = std::num::NonZeroU64::new(len)
    {
        let _ = rustix::fs::fadvise(f, offset, Some(len), rustix::fs::Advice::DontNeed);
    }
}

/// `fdatasync`s a file, unless tests switched durability off (`CKPT_TEST_FSYNC=0`).
/// While a [`SyncSet`] is collecting, the sync is queued for its flush instead.
pub fn sync_data(f: &File) -> io::Result<()> {
    if crate::durability_off() {
        return Ok(());
    }
    if queue(f.as_fd(), SyncKind::Data)? {
        return Ok(());
    }
    f.sync_data()
}

/// [`sync_data`] for a file that is published before its sync is done (a blob
/// stored inside a [`SyncSet`], created with other permission bits to say so):
/// when the sync is queued, the file gets `mode` once it is done. Returns true
/// when it was queued; otherwise the sync (if durability is on) is done.
pub fn sync_data_then_mode(f: &File, mode: u32) -> io::Result<bool> {
    if crate::durability_off() {
        return Ok(false);
    }
    if queue(f.as_fd(), SyncKind::DataThenMode(mode))? {
        return Ok(true);
    }
    f.sync_data()?;
    Ok(false)
}

/// [`sync_data`], never queued: the ledger's own `fdatasync`.
pub fn sync_data_now(f: &File) -> io::Result<()> {
    if crate::durability_off() {
        return Ok(());
    }
    f.sync_data()
}

/// Opens (creating, mode 0600) the lock file `dir/name` and takes an exclusive
/// `flock` on it, waiting for other holders; the lock lasts as long as the file.
pub fn lock_exclusive(dir: BorrowedFd<'_>, name: &str, shown: &str) -> Result<File, FsError> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| FsError::new("open", shown, e.into()))?;
    // Best effort: a lock works whatever its mode (a file we do not own,
    // which only root could chmod, is still lockable).
    let _ = fix_private_mode(fd.as_fd());
    let f = File::from(fd);
    f.lock().map_err(|e| FsError::new("lock", shown, e))?;
    Ok(f)
}

/// Opens a directory entry of `dir` as a directory, refusing symlinks.
pub fn open_dir(dir: BorrowedFd<'_>, name: impl AsRef<Path>) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name.as_ref(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens (creating with mode 0700 if missing) a private directory inside `dir`.
/// Returns the handle and whether it was created.
pub fn open_or_create_private_dir(dir: BorrowedFd<'_>, name: &str) -> io::Result<(OwnedFd, bool)> {
    let created = match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700)) {
        Ok(()) => true,
        Err(Errno::EXIST) => false,
        Err(e) => return Err(e.into()),
    };
    let fd = open_dir(dir, name)?;
    if created {
        // The umask may have removed bits we want or left ones we do not: set it exactly.
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))?;
        fsync_dir(dir)?;
    }
    Ok((fd, created))
}

/// Writes `data` to `dir/name` atomically and durably: temp file in the same
/// directory, `fdatasync`, `rename` over the name, `fsync` of the directory.
/// The file gets exactly `mode` (permission bits only), whatever the umask.
pub fn write_atomic(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    data: &[u8],
    mode: u32,
    no_replace: bool,
) -> io::Result<()> {
    let tmp = temp_name(".ckpt-tmp-");
    let f = create_excl(dir, OsStr::new(&tmp), mode)?;
    let res = (|| {
        let mut f = f;
        f.write_all(data)?;
        failpoint::hit("atomic.after_tmp_write")?;
        sync_data(&f)?;
        drop(f);
        failpoint::hit("atomic.before_rename")?;
        if no_replace {
            if !rename_to_new(dir, &tmp, name)? {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
        } else {
            rustix::fs::renameat(dir, tmp.as_str(), dir, name)?;
        }
        failpoint::hit("atomic.after_rename")?;
        fsync_dir(dir)
    })();
    if res.is_err() {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
    }
    res
}

/// Renames the temp file `tmp` to `name` unless that name is taken; then
/// the temp file is removed and `false` returned.
fn rename_to_new(dir: BorrowedFd<'_>, tmp: &str, name: &OsStr) -> io::Result<bool> {
    match rustix::fs::renameat_with(dir, tmp, dir, name, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(true),
        Err(Errno::EXIST) => {
            let _ = rustix::fs::unlinkat(dir, tmp, AtFlags::empty());
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// [`write_atomic`] (`no_replace`) for several new files at once, in two
/// halves: here every file is written under a temp name beside its own,
/// nothing synced or named yet; [`NewFiles::publish`] (on another thread,
/// if need be) syncs their data together (one wait), then names each
/// unless its name is taken. The directory's `fsync` (the new names) is the
/// caller's: [`fsync_dir`] after that, typically in a [`SyncSet`].
pub fn write_new_temps(
    dir: BorrowedFd<'_>,
    files: &[(&str, &[u8])],
    mode: u32,
) -> io::Result<NewFiles> {
    let mut out = NewFiles {
        dir: rustix::io::fcntl_dupfd_cloexec(dir, 0)?,
        files: Vec::new(),
        // Decided here: `publish` may run on another thread, after this one
        // has started a batch that switches per-file syncs off.
        sync: !crate::durability_off(),
    };
    for (name, data) in files {
        let tmp = temp_name(".ckpt-tmp-");
        let mut f = create_excl(dir, OsStr::new(&tmp), mode)?;
        out.files
            .push((tmp, (*name).to_string(), OwnedFd::from(f.try_clone()?)));
        f.write_all(data)?;
        failpoint::hit("atomic.after_tmp_write")?;
    }
    Ok(out)
}

/// Files written under temp names by [`write_new_temps`]; dropped without
/// [`publish`](NewFiles::publish), the temp files are removed.
#[derive(Debug)]
pub struct NewFiles {
    dir: OwnedFd,
    /// Temp name, final name, the open file.
    files: Vec<(String, String, OwnedFd)>,
    /// Whether `publish` syncs their data.
    sync: bool,
}

impl NewFiles {
    /// Syncs every file's data (together, one wait), then renames each to
    /// its name unless that is taken; per file, whether it was. On an error
    /// no temp file is left.
    pub fn publish(mut self) -> io::Result<Vec<bool>> {
        let files = std::mem::take(&mut self.files);
        let res = (|| {
            let syncs: Vec<Queued> = files
                .iter()
                .map(|(_, _, fd)| Queued::data(fd.as_fd()))
                .collect::<io::Result<_>>()?;
            // The data of all of them, concurrently, before any is named (run
            // here, never left to a set that may be collecting around us).
            if self.sync {
                run_syncs(&syncs)?;
            }
            failpoint::hit("atomic.before_rename")?;
            let mut wrote = Vec::new();
            for (tmp, name, _) in &files {
                wrote.push(rename_to_new(self.dir.as_fd(), tmp, OsStr::new(name))?);
            }
            failpoint::hit("atomic.after_rename")?;
            Ok(wrote)
        })();
        if res.is_err() {
            self.files = files;
        }
        res
    }
}

impl Drop for NewFiles {
    fn drop(&mut self) {
        for (tmp, _, _) in &self.files {
            let _ = rustix::fs::unlinkat(&self.dir, tmp.as_str(), AtFlags::empty());
        }
    }
}

/// Writes the new file `dir/name` durably, creating it at its final name
/// (`O_EXCL`: an existing name is `AlreadyExists`), for names nobody else
/// uses and nothing refers to until this returns: a patch artifact is named
/// by a fresh id and by no record before its sync. A crash can then leave a
/// partial file under a name no record holds, never one a record names. A
/// temp file and a rename would cost a second directory operation per file
/// (for 100 patch artifacts on two threads here: ~3.7 ms against ~6.8 ms,
/// the artifacts directory holding 5,000 entries). On an error the file is
/// removed.
pub fn write_new(dir: BorrowedFd<'_>, name: &OsStr, data: &[u8], mode: u32) -> io::Result<()> {
    let f = create_excl(dir, name, mode)?;
    let res = (|| {
        let mut f = f;
        f.write_all(data)?;
        start_writeback(&f);
        failpoint::hit("new.after_write")?;
        sync_data(&f)?;
        drop(f);
        fsync_dir(dir)?;
        failpoint::hit("new.after_sync")
    })();
    if res.is_err() {
        let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
    }
    res
}

/// Rewrites `dir/name` in place (created 0600 if missing; written from
/// offset 0, then cut to length), unsynced: for caches of the ledger that
/// their reader rebuilds when they fail to parse. A crash mid-write leaves
/// bytes that do not parse, never another file's. Much cheaper than a
/// rename over the old file, which frees the old inode (~0.3 ms median and
/// ~4 ms p90 on this project's ext4 disks).
pub fn overwrite_in_place(dir: BorrowedFd<'_>, name: &str, data: &[u8]) -> io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(io::Error::other(format!("{name} is not a regular file")));
    }
    if st.st_mode & 0o777 != 0o600 {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
    }
    let f = File::from(fd);
    std::os::unix::fs::FileExt::write_all_at(&f, data, 0)?;
    if st.st_size as u64 > data.len() as u64 {
        f.set_len(data.len() as u64)?;
    }
    Ok(())
}

/// Creates a new file (`O_EXCL`, never through a symlink) with exactly `mode`.
pub fn create_excl(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<File> {
    let mode = mode & 0o777;
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )?;
    // The umask can only remove bits: when it is known and removes none of
    // `mode`'s, the file already has exactly `mode` (one system call less per
    // file; hundreds when a shell call changed hundreds of files).
    if umask_may_clear(mode) {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    }
    Ok(File::from(fd))
}

/// Opens an unnamed regular file in `dir` (`O_TMPFILE`), to be given its
/// name by [`link_anonymous`] once written: nothing is left behind if the
/// process dies first, and no temp name is created in (and renamed out of)
/// a directory that every writer shares. `None` where the file system or
/// kernel cannot (the caller then uses a named temp file).
pub fn create_anonymous(dir: BorrowedFd<'_>, mode: u32) -> io::Result<Option<File>> {
    let mode = mode & 0o777;
    let fd = match rustix::fs::openat(
        dir,
        ".",
        OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    ) {
        Ok(fd) => fd,
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL | Errno::NOSYS) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if umask_may_clear(mode) {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    }
    Ok(Some(File::from(fd)))
}

/// Gives a file from [`create_anonymous`] the name `dir/name` (never
/// replacing one: `EEXIST` if taken). `Ok(false)` when it cannot be named
/// this way (no `/proc`): the caller writes the bytes again through a temp
/// file.
pub fn link_anonymous(f: &File, dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let proc = format!("/proc/self/fd/{}", f.as_raw_fd());
    match rustix::fs::linkat(
        rustix::fs::CWD,
        proc.as_str(),
        dir,
        name,
        AtFlags::SYMLINK_FOLLOW,
    ) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT | Errno::ACCESS | Errno::PERM | Errno::XDEV) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether the umask is unknown or removes some of `mode`'s bits.
fn umask_may_clear(mode: u32) -> bool {
    let umask = UMASK.load(Ordering::Relaxed);
    umask > 0o777 || umask & mode != 0
}

/// The process's umask, once [`learn_umask`] has read it (above `0o777`:
/// unknown, so [`create_excl`] always sets the mode).
static UMASK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);

/// Gives a runtime file opened with `O_CREAT` (mode 0600) exactly 0600 when
/// the umask may have taken bits away (unknown, or one that removes owner
/// read or write, such as 0277): without it the next open for writing fails.
/// Nothing to do, and no system call, under the usual umasks.
pub fn fix_private_mode(fd: BorrowedFd<'_>) -> io::Result<()> {
    if umask_may_clear(0o600) {
        rustix::fs::fchmod(fd, Mode::from_raw_mode(0o600))?;
    }
    Ok(())
}

/// Reads the process's umask so that [`create_excl`] can skip `fchmod` when
/// it would change nothing. Reading the umask means setting it, so this must
/// run while the process has one thread (the binary's `main` calls it first).
pub fn learn_umask() {
    let old = rustix::process::umask(Mode::from_raw_mode(0o077));
    rustix::process::umask(old);
    UMASK.store(old.bits() & 0o777, Ordering::Relaxed);
}

/// Reads `f` to its end into a buffer sized for `size` bytes (its size as
/// just seen: one `read` for the bytes and one to see the end, without the
/// `statx` and `lseek` std's `File::read_to_end` spends on a size hint). A
/// file that grew or shrank since is still read whole.
pub fn read_to_end_sized(f: &mut File, size: u64) -> io::Result<Vec<u8>> {
    let mut v = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(64));
    Read::take(f, u64::MAX).read_to_end(&mut v)?;
    Ok(v)
}

/// What a workspace path holds right now (not following symlinks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// Nothing there.
    Absent,
    /// A regular file with its permission bits.
    File {
        /// Permission bits (`0o644`, `0o755`, …).
        mode: u32,
        /// Size in bytes.
        size: u64,
    },
    /// A symbolic link and its target bytes.
    Symlink(Vec<u8>),
    /// A directory.
    Dir,
    /// A FIFO, socket or device: never read, never written.
    Special,
}

static OPENAT2_MISSING: AtomicBool = AtomicBool::new(false);

/// The workspace root as a directory handle; all reads and writes of user files
/// go through it.
#[derive(Debug)]
pub struct Confined {
    root: OwnedFd,
}

impl Confined {
    /// Opens the workspace root directory.
    pub fn open(root: &Path) -> io::Result<Confined> {
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Confined { root: fd })
    }

    /// Returns the root directory handle.
    pub fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// Opens `rel_dir` (a workspace-relative directory) beneath the root, refusing
    /// any symlink or magic link on the way.
    pub fn open_dir_beneath(&self, rel_dir: &[u8]) -> io::Result<OwnedFd> {
        if rel_dir.is_empty() {
            return Ok(rustix::io::dup(&self.root)?);
        }
        self.resolve(rel_dir, OFlags::RDONLY | OFlags::DIRECTORY)
    }

    fn resolve(&self, rel: &[u8], flags: OFlags) -> io::Result<OwnedFd> {
        let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        if !OPENAT2_MISSING.load(Ordering::Relaxed) {
            match rustix::fs::openat2(
                &self.root,
                OsStr::from_bytes(rel),
                flags,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            ) {
                Ok(fd) => return Ok(fd),
                Err(Errno::NOSYS) | Err(Errno::PERM) => {
                    OPENAT2_MISSING.store(true, Ordering::Relaxed);
                }
                Err(Errno::LOOP) | Err(Errno::XDEV) => {
                    return Err(unsafe_path(&format!(
                        "`{}` goes through a symlink",
                        String::from_utf8_lossy(rel)
                    )));
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Fallback: open one component at a time, each with O_NOFOLLOW, so no
        // symlink (swapped in or not) is ever followed.
        let mut cur = rustix::io::dup(&self.root)?;
        let parts: Vec<&[u8]> = rel.split(|&b| b == b'/').collect();
        for (i, c) in parts.iter().enumerate() {
            if c.is_empty() || *c == b"." || *c == b".." {
                return Err(unsafe_path("unnormalised path"));
            }
            let last = i + 1 == parts.len();
            let f = if last {
                flags
            } else {
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
            };
            cur = match rustix::fs::openat(&cur, OsStr::from_bytes(c), f, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::LOOP) | Err(Errno::NOTDIR) if !last => {
                    return Err(unsafe_path(&format!(
                        "`{}` goes through a symlink or a non-directory",
                        String::from_utf8_lossy(rel)
                    )));
                }
                Err(e) => return Err(e.into()),
            };
        }
        Ok(cur)
    }

    fn parent_of(&self, rel: &RelPath) -> io::Result<(OwnedFd, Vec<u8>)> {
        let (parent, name) = rel.split_parent();
        let fd = self.open_dir_beneath(parent.unwrap_or(b""))?;
        Ok((fd, name.to_vec()))
    }

    /// Returns what `rel` holds now, without following a final symlink. A parent
    /// that is missing means `Absent`; a parent that is a symlink is an error.
    pub fn entry(&self, rel: &RelPath) -> io::Result<EntryKind> {
        let (dir, name) = match self.parent_of(rel) {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(EntryKind::Absent),
            Err(e) if e.raw_os_error() == Some(Errno::NOTDIR.raw_os_error()) => {
                return Ok(EntryKind::Absent);
            }
            Err(e) => return Err(e),
        };
        entry_at(dir.as_fd(), OsStr::from_bytes(&name))
    }

    /// Opens a regular file for reading without following symlinks and without
    /// blocking on a FIFO; anything that is not a regular file is refused.
    pub fn open_read(&self, rel: &RelPath) -> io::Result<File> {
        self.open_read_sized(rel).map(|(f, _)| f)
    }

    /// [`open_read`](Self::open_read), also returning the file's size.
    pub fn open_read_sized(&self, rel: &RelPath) -> io::Result<(File, u64)> {
        // Usually one confined `openat2` of the whole path and an `fstat`
        // (instead of opening the parent, the file, and closing the parent).
        // Any failure takes the step-by-step path, which names the problem
        // (a symlink, a FIFO, a missing file) as it always has.
        if !OPENAT2_MISSING.load(Ordering::Relaxed)
            && let Ok(fd) = rustix::fs::openat2(
                &self.root,
                OsStr::from_bytes(rel.as_bytes()),
                OFlags::RDONLY
                    | OFlags::NOFOLLOW
                    | OFlags::NONBLOCK
                    | OFlags::CLOEXEC
                    | OFlags::NOCTTY,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            )
            && let Ok(st) = rustix::fs::fstat(&fd)
            && FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
        {
            return Ok((File::from(fd), st.st_size as u64));
        }
        let (dir, name) = self.parent_of(rel)?;
        open_regular_at_sized(dir.as_fd(), OsStr::from_bytes(&name))
    }

    /// Reads a whole regular file.
    pub fn read(&self, rel: &RelPath) -> io::Result<Vec<u8>> {
        let (mut f, size) = self.open_read_sized(rel)?;
        read_to_end_sized(&mut f, size)
    }

    /// Creates the missing parent directories of `rel` (never through a symlink),
    /// syncing each directory that gained an entry.
    pub fn create_parents(&self, rel: &RelPath) -> io::Result<OwnedFd> {
        let (parent, _) = rel.split_parent();
        let Some(parent) = parent else {
            return Ok(rustix::io::dup(&self.root)?);
        };
        // Usually the directory is there: one confined open instead of a
        // mkdirat + openat per component.
        // Any failure takes the careful path below, which creates what is
        // missing and names what is unsafe.
        if let Ok(fd) = self.open_dir_beneath(parent) {
            return Ok(fd);
        }
        let mut cur = rustix::io::dup(&self.root)?;
        for c in parent.split(|&b| b == b'/') {
            let name = OsStr::from_bytes(c);
            match rustix::fs::mkdirat(&cur, name, Mode::from_raw_mode(0o777)) {
                Ok(()) => fsync_dir(cur.as_fd())?,
                Err(Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            cur = match open_dir(cur.as_fd(), name) {
                Ok(fd) => fd,
                Err(e)
                    if e.raw_os_error() == Some(Errno::LOOP.raw_os_error())
                        || e.raw_os_error() == Some(Errno::NOTDIR.raw_os_error()) =>
                {
                    return Err(unsafe_path(&format!(
                        "a parent of `{rel}` is a symlink or not a directory"
                    )));
                }
                Err(e) => return Err(e),
            };
        }
        Ok(cur)
    }

    /// Replaces (or creates) the file `rel` with `data` and permission bits `mode`
    /// (setuid/setgid/sticky are never set), atomically and durably.
    pub fn write_file(&self, rel: &RelPath, data: &[u8], mode: u32) -> io::Result<()> {
        let dir = self.create_parents(rel)?;
        let (_, name) = rel.split_parent();
        write_atomic(
            dir.as_fd(),
            OsStr::from_bytes(name),
            data,
            mode & 0o777,
            false,
        )
    }

    /// Replaces (or creates) `rel` with a symlink to `target`, atomically.
    pub fn write_symlink(&self, rel: &RelPath, target: &[u8]) -> io::Result<()> {
        let dir = self.create_parents(rel)?;
        let (_, name) = rel.split_parent();
        let tmp = temp_name(".ckpt-tmp-");
        rustix::fs::symlinkat(OsStr::from_bytes(target), &dir, tmp.as_str())?;
        if let Err(e) = rustix::fs::renameat(&dir, tmp.as_str(), &dir, OsStr::from_bytes(name)) {
            let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
            return Err(e.into());
        }
        fsync_dir(dir.as_fd())
    }

    /// Removes the file or symlink `rel` (never a directory) and syncs its parent.
    pub fn remove(&self, rel: &RelPath) -> io::Result<()> {
        let (dir, name) = self.parent_of(rel)?;
        rustix::fs::unlinkat(&dir, OsStr::from_bytes(&name), AtFlags::empty())?;
        fsync_dir(dir.as_fd())
    }
}

/// Returns what `dir/name` holds, without following a symlink.
pub fn entry_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<EntryKind> {
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) | Err(Errno::NOTDIR) => return Ok(EntryKind::Absent),
        Err(e) => return Err(e.into()),
    };
    Ok(match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => EntryKind::File {
            mode: st.st_mode & 0o7777,
            size: st.st_size as u64,
        },
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(dir, name, Vec::new())?;
            EntryKind::Symlink(target.into_bytes())
        }
        FileType::Directory => EntryKind::Dir,
        _ => EntryKind::Special,
    })
}

/// Opens `dir/name` for reading if (and only if) it is a regular file: no
/// symlink followed, no blocking on a FIFO (`O_NONBLOCK`, then `fstat`).
pub fn open_regular_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<File> {
    open_regular_at_sized(dir, name).map(|(f, _)| f)
}

/// [`open_regular_at`], also returning the file's size as its check saw it.
pub fn open_regular_at_sized(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<(File, u64)> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| {
        if e == Errno::LOOP {
            io::Error::other(format!(
                "E_NOT_REGULAR: `{}` is a symlink",
                String::from_utf8_lossy(name.as_bytes())
            ))
        } else {
            e.into()
        }
    })?;
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(io::Error::other(format!(
            "E_NOT_REGULAR: `{}` is not a regular file",
            String::from_utf8_lossy(name.as_bytes())
        )));
    }
    Ok((File::from(fd), st.st_size as u64))
}

/// Opens `path` (from a payload: hostile) for reading only if it is a
/// regular file: without following a final symlink and without blocking
/// (opening a FIFO would wait for a writer, forever). Anything else is
/// `InvalidInput`.
pub fn open_payload_file(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// New files written together: each is named only once all are written
    /// and synced; a name already taken is left as it is (and reported), and
    /// no temp file remains.
    #[test]
    fn new_files_written_together_keep_a_name_already_taken() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("taken"), b"the user's").unwrap();
        let dir = open_dir(rustix::fs::CWD, t.path()).unwrap();
        let files = [("fresh", &b"new\n"[..]), ("taken", &b"ours\n"[..])];
        // Dropped unpublished: nothing is left.
        drop(write_new_temps(dir.as_fd(), &files, 0o600).unwrap());
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 1);
        let wrote = write_new_temps(dir.as_fd(), &files, 0o600)
            .unwrap()
            .publish()
            .unwrap();
        assert_eq!(wrote, [true, false]);
        assert_eq!(std::fs::read(t.path().join("fresh")).unwrap(), b"new\n");
        assert_eq!(
            std::fs::read(t.path().join("taken")).unwrap(),
            b"the user's"
        );
        let mut names: Vec<_> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["fresh", "taken"]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(t.path().join("fresh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_file_read_by_its_seen_size_is_read_whole_even_if_it_changed() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        // Seen at 4 bytes, 10 there now: all 10 come back.
        let mut f = File::open(&p).unwrap();
        assert_eq!(read_to_end_sized(&mut f, 4).unwrap(), b"0123456789");
        // Seen bigger than it is now: what is there.
        let mut f = File::open(&p).unwrap();
        assert_eq!(read_to_end_sized(&mut f, 1 << 20).unwrap(), b"0123456789");
        let mut f = File::open(&p).unwrap();
        assert_eq!(read_to_end_sized(&mut f, 0).unwrap(), b"0123456789");
    }

    /// The one-`openat2` fast path of `open_read` refuses what the
    /// step-by-step path refuses, with the same errors.
    #[test]
    fn open_read_refuses_symlinks_and_special_files_as_before() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir(r.join("d")).unwrap();
        std::fs::write(r.join("d/f"), b"xyz").unwrap();
        std::os::unix::fs::symlink("f", r.join("d/link")).unwrap();
        std::os::unix::fs::symlink("d", r.join("dlink")).unwrap();
        let fifo = std::process::Command::new("mkfifo")
            .arg(r.join("d/fifo"))
            .status()
            .is_ok_and(|s| s.success());
        let c = Confined::open(r).unwrap();
        let rel = |s: &str| RelPath::from_ledger(s.as_bytes()).unwrap();
        let (_, n) = c.open_read_sized(&rel("d/f")).unwrap();
        assert_eq!(n, 3);
        assert_eq!(c.read(&rel("d/f")).unwrap(), b"xyz");
        let e = c.open_read(&rel("d/link")).unwrap_err().to_string();
        assert!(e.contains("E_NOT_REGULAR") && e.contains("symlink"), "{e}");
        // A symlinked directory on the way: refused (the step-by-step path
        // opens it with O_NOFOLLOW | O_DIRECTORY: ENOTDIR).
        let e = c.open_read(&rel("dlink/f")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(Errno::NOTDIR.raw_os_error()), "{e}");
        if fifo {
            let e = c.open_read(&rel("d/fifo")).unwrap_err().to_string();
            assert!(e.contains("not a regular file"), "{e}");
        }
        assert_eq!(
            c.open_read(&rel("d/none")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
