//! Durability: the one place that knows sync ordering.
//!
//! The rule every writer of `.agent-runtime/` keeps: **content is durable
//! before a ledger record names it.** Writers do not sync; they hand what
//! they wrote (a file, a directory that gained or lost an entry) to the
//! workspace's [`Durable`], and the ledger's append makes it durable before
//! it writes the records ([`Durable::before_records`], called by
//! [`LedgerLock`](crate::ledger::LedgerLock) under every append), then syncs
//! its own file together with the content the records do not name
//! ([`Durable::with_records`]). Nothing else in the crate calls `fsync`,
//! `fdatasync` or `syncfs` (clippy's `disallowed-methods` holds the line).
//!
//! Two kinds of content:
//! - [`Durable::content`] / [`Durable::content_dir`]: what the next record
//!   may name (blobs, patch artifacts, checkpoints, the directories holding
//!   them). Synced before the next record is written.
//! - [`Durable::unnamed`] / [`Durable::unnamed_dir`]: what no record names yet
//!   but must not be left dirty (temp files a rollback renames after its plan
//!   is appended, the walk's snapshot cache): synced beside the next record's
//!   own sync, concurrently, so it costs no wait of its own. Done when the
//!   append returns.
//!
//! A cache that is rebuilt when it does not parse is given to neither: it is
//! written atomically and never synced.
//!
//! How: a handful of handles are synced concurrently (concurrent
//! `fdatasync`s share journal commits: one wait, not one per file); from
//! [`SYNCFS_FROM`] handles on, one `syncfs` per file system replaces them
//! (hundreds of `fdatasync`s would each end in a device cache flush; the
//! price of `syncfs` is that it also writes back other processes' dirty data,
//! so small sets keep their own syncs). Where `syncfs` does not exist
//! (outside Linux), every handle is synced.
//!
//! Per platform: on Linux a data sync is `fdatasync`, on Apple platforms
//! `F_FULLFSYNC` (std's `File::sync_data`: a plain `fsync` there does not
//! flush the drive's cache), elsewhere `fdatasync` or `fsync`.
//!
//! [`Fsync::Off`] (tests only, like git's `GIT_TEST_FSYNC=0`) makes every
//! sync a no-op: a killed process does not lose the page cache, so
//! process-crash tests stay meaningful; power-loss semantics do not.

#![allow(clippy::disallowed_methods)]

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::failpoint;
use crate::sys::HAS_SYNCFS;

/// Whether syncs happen at all: an open option of the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fsync {
    /// Every sync is done (always, outside tests).
    #[default]
    On,
    /// No sync is done (tests: `CKPT_TEST_FSYNC=0`).
    Off,
}

/// From this many handles waiting on one [`Durable`], one `syncfs` per file
/// system replaces their syncs.
pub const SYNCFS_FROM: usize = 32;

/// At most this many threads run a set's syncs.
const SYNC_THREADS: usize = 8;

/// One handle waiting for its sync.
#[derive(Debug)]
struct Handle {
    /// A handle of its own (a duplicate: the writer may close its own).
    file: File,
    /// A directory's device and inode: each is synced once, however many of
    /// its entries changed.
    dir: Option<(u64, u64)>,
}

#[derive(Debug, Default)]
struct Waiting {
    /// Synced before the next record.
    content: Vec<Handle>,
    /// Synced beside the next record's own sync.
    unnamed: Vec<Handle>,
    /// Once past [`SYNCFS_FROM`] handles (where `syncfs` exists): one handle
    /// per file system instead, synced whole before the next record (what
    /// was unnamed with it).
    file_systems: Vec<(u64, File)>,
}

impl Waiting {
    fn len(&self) -> usize {
        self.content.len() + self.unnamed.len()
    }
}

/// The content of a workspace written but not yet durable (see the module
/// documentation). Shared by the workspace's stores and its ledger; one per
/// open workspace, never global.
#[derive(Debug, Default)]
pub struct Durable {
    fsync: Fsync,
    waiting: Mutex<Waiting>,
    /// Syncs done, for tests.
    done: AtomicUsize,
}

impl Durable {
    /// A set with nothing waiting.
    pub fn new(fsync: Fsync) -> Durable {
        Durable {
            fsync,
            ..Durable::default()
        }
    }

    fn off(&self) -> bool {
        self.fsync == Fsync::Off
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `f`'s data is content the next record may name: durable before it.
    pub fn content(&self, f: impl AsFd) -> io::Result<()> {
        self.add(f.as_fd(), false, true)
    }

    /// `dir` gained or lost an entry the next record may name (a new blob's
    /// name, a new directory): durable before it.
    pub fn content_dir(&self, dir: impl AsFd) -> io::Result<()> {
        self.add(dir.as_fd(), true, true)
    }

    /// `f`'s data is named by no record yet (a temp file to be renamed once
    /// the next record is durable, a cache worth keeping clean): synced
    /// beside the next record, durable when its append returns.
    pub fn unnamed(&self, f: impl AsFd) -> io::Result<()> {
        self.add(f.as_fd(), false, false)
    }

    /// [`unnamed`](Self::unnamed) for a directory's entries.
    pub fn unnamed_dir(&self, dir: impl AsFd) -> io::Result<()> {
        self.add(dir.as_fd(), true, false)
    }

    fn add(&self, fd: BorrowedFd<'_>, is_dir: bool, named: bool) -> io::Result<()> {
        // Kept even when syncs are off: the order (and the failpoints on
        // the way) stays the same; only the system calls are skipped.
        let mut w = self.lock();
        let dir = if is_dir {
            let st = crate::sys::fstat(fd)?;
            Some((st.dev, st.ino))
        } else {
            None
        };
        if !w.file_systems.is_empty() {
            return add_file_system(&mut w, fd);
        }
        if dir.is_some() && w.content.iter().chain(&w.unnamed).any(|h| h.dir == dir) {
            // Synced once; as content if either asks for it.
            if named && let Some(i) = w.unnamed.iter().position(|h| h.dir == dir) {
                let h = w.unnamed.swap_remove(i);
                w.content.push(h);
            }
            return Ok(());
        }
        let h = Handle {
            file: File::from(rustix::io::fcntl_dupfd_cloexec(fd, 0)?),
            dir,
        };
        if named {
            w.content.push(h);
        } else {
            w.unnamed.push(h);
        }
        if w.len() >= SYNCFS_FROM && HAS_SYNCFS {
            let mut all = std::mem::take(&mut w.content);
            all.append(&mut w.unnamed);
            for h in all {
                add_file_system(&mut w, h.file.as_fd())?;
            }
        }
        Ok(())
    }

    /// Makes the content handed in so far durable now (the ledger calls it
    /// before it writes records; a writer calls it before an action that
    /// must follow the content, such as renaming over a user's file). What
    /// was unnamed waits for the next record, unless whole file systems are
    /// synced, which covers it too.
    pub fn before_records(&self) -> io::Result<()> {
        // Held while syncing: a writer on another thread that finds nothing
        // waiting must not go on before these syncs are done.
        let mut w = self.lock();
        if !w.file_systems.is_empty() {
            failpoint::hit("syncs.before_syncfs")?;
            let fs = std::mem::take(&mut w.file_systems);
            if self.off() {
                return Ok(());
            }
            self.count(fs.len());
            return syncfs_each(&fs);
        }
        if w.content.is_empty() {
            return Ok(());
        }
        failpoint::hit("syncs.before_content")?;
        let list = std::mem::take(&mut w.content);
        if self.off() {
            return Ok(());
        }
        self.count(list.len());
        sync_together(&list)
    }

    /// Makes everything handed in so far durable now, unnamed included.
    pub fn all(&self) -> io::Result<()> {
        self.before_records()?;
        let list = std::mem::take(&mut self.lock().unnamed);
        if self.off() {
            return Ok(());
        }
        self.count(list.len());
        sync_together(&list)
    }

    /// The records' own sync: `ledger`'s data, with whatever was unnamed
    /// synced concurrently (one wait); content handed in meanwhile too.
    /// Returns the ledger's own result first, then the others'.
    pub(crate) fn with_records(&self, ledger: &File) -> (io::Result<()>, io::Result<()>) {
        let (list, fs) = {
            let mut w = self.lock();
            let mut l = std::mem::take(&mut w.unnamed);
            l.append(&mut w.content);
            (l, std::mem::take(&mut w.file_systems))
        };
        if self.off() {
            return (Ok(()), Ok(()));
        }
        self.count(list.len() + fs.len() + 1);
        if list.is_empty() && fs.is_empty() {
            return (ledger.sync_data(), Ok(()));
        }
        std::thread::scope(|s| {
            let others = s.spawn(|| syncfs_each(&fs).and(sync_together(&list)));
            let own = ledger.sync_data();
            let others = others
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a sync thread panicked")));
            (own, others)
        })
    }

    /// Syncs `f`'s data now (the ledger's own files, a backup that must be
    /// durable before the next step).
    pub fn file_now(&self, f: &File) -> io::Result<()> {
        if self.off() {
            return Ok(());
        }
        self.count(1);
        f.sync_data()
    }

    /// Syncs `dir`'s entries now.
    pub fn dir_now(&self, dir: impl AsFd) -> io::Result<()> {
        if self.off() {
            return Ok(());
        }
        self.count(1);
        sync_dir(dir.as_fd())
    }

    /// True when nothing waits for a sync.
    pub fn is_clean(&self) -> bool {
        let w = self.lock();
        w.len() == 0 && w.file_systems.is_empty()
    }

    /// Syncs (or `syncfs` calls) done so far through this set.
    pub fn syncs_done(&self) -> usize {
        self.done.load(Ordering::Relaxed)
    }

    fn count(&self, n: usize) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }
}

/// How a file written by [`crate::fs_util`] is kept: the explicit choice
/// every writer makes.
#[derive(Debug, Clone, Copy)]
pub enum Keep<'a> {
    /// Content a record will name ([`Durable::content`]).
    Named(&'a Durable),
    /// Named by no record yet ([`Durable::unnamed`]).
    Unnamed(&'a Durable),
    /// A file that replaces or removes one whose bytes must survive (a
    /// user's file, stored first): everything waiting, the stored copy
    /// included, and the new file's own data are durable before the rename
    /// ([`Keep::before_rename`]); the new name before the next record.
    Replacing(&'a Durable),
    /// A cache rebuilt when it does not parse: never synced.
    Cache,
}

impl Keep<'_> {
    /// Hands `f`'s data in.
    pub fn file(&self, f: impl AsFd) -> io::Result<()> {
        match self {
            Keep::Named(d) => d.content(f),
            Keep::Unnamed(d) | Keep::Replacing(d) => d.unnamed(f),
            Keep::Cache => Ok(()),
        }
    }

    /// Called just before the rename that publishes a file.
    pub fn before_rename(&self) -> io::Result<()> {
        match self {
            Keep::Replacing(d) => d.all(),
            _ => Ok(()),
        }
    }

    /// Hands `dir`'s entries in.
    pub fn dir(&self, dir: impl AsFd) -> io::Result<()> {
        match self {
            Keep::Named(d) | Keep::Replacing(d) => d.content_dir(dir),
            Keep::Unnamed(d) => d.unnamed_dir(dir),
            Keep::Cache => Ok(()),
        }
    }
}

/// Notes `fd`'s file system, once, for a whole-file-system sync.
fn add_file_system(w: &mut Waiting, fd: BorrowedFd<'_>) -> io::Result<()> {
    let dev = crate::sys::fstat(fd)?.dev;
    if !w.file_systems.iter().any(|(d, _)| *d == dev) {
        w.file_systems
            .push((dev, File::from(rustix::io::fcntl_dupfd_cloexec(fd, 0)?)));
    }
    Ok(())
}

/// Never called with a file system where there is no `syncfs` (`HAS_SYNCFS`).
fn syncfs_each(fs: &[(u64, File)]) -> io::Result<()> {
    let mut r = Ok(());
    for (_, f) in fs {
        r = r.and(crate::sys::syncfs(f.as_fd()));
    }
    r
}

fn sync_dir(dir: BorrowedFd<'_>) -> io::Result<()> {
    // std's `sync_all` is `fsync`, and `F_FULLFSYNC` on Apple platforms.
    File::from(rustix::io::fcntl_dupfd_cloexec(dir, 0)?).sync_all()
}

fn sync_one(h: &Handle) -> io::Result<()> {
    if h.dir.is_some() {
        h.file.sync_all()
    } else {
        h.file.sync_data()
    }
}

/// Syncs `list` concurrently: concurrent `fdatasync`/`fsync` calls share
/// journal commits (ext4's jbd2, xfs's log force). The first error is
/// returned, after every sync has been tried.
fn sync_together(list: &[Handle]) -> io::Result<()> {
    if list.len() <= 1 {
        return list.iter().try_for_each(sync_one);
    }
    let next = AtomicUsize::new(0);
    let work = || -> io::Result<()> {
        let mut result = Ok(());
        while let Some(h) = list.get(next.fetch_add(1, Ordering::Relaxed)) {
            let r = sync_one(h);
            if result.is_ok() {
                result = r;
            }
        }
        result
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
            let r = h
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a sync thread panicked")));
            result = result.and(r);
        }
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpfile(dir: &std::path::Path, name: &str) -> File {
        std::fs::File::create(dir.join(name)).unwrap()
    }

    #[test]
    fn content_is_synced_before_records_and_unnamed_beside_them() {
        let t = tempfile::tempdir().unwrap();
        let d = Durable::new(Fsync::On);
        let dir = File::open(t.path()).unwrap();
        d.content(tmpfile(t.path(), "a")).unwrap();
        d.content_dir(&dir).unwrap();
        // A directory is synced once, however often it is handed in.
        d.content_dir(&dir).unwrap();
        d.unnamed(tmpfile(t.path(), "b")).unwrap();
        d.before_records().unwrap();
        assert_eq!(d.syncs_done(), 2);
        assert!(!d.is_clean(), "the unnamed file waits for the records");
        let ledger = tmpfile(t.path(), "ledger");
        let (own, others) = d.with_records(&ledger);
        own.unwrap();
        others.unwrap();
        assert_eq!(d.syncs_done(), 4);
        assert!(d.is_clean());
    }

    #[test]
    fn many_handles_become_one_sync_per_file_system() {
        let t = tempfile::tempdir().unwrap();
        let d = Durable::new(Fsync::On);
        for i in 0..SYNCFS_FROM + 10 {
            d.content(tmpfile(t.path(), &i.to_string())).unwrap();
        }
        d.before_records().unwrap();
        if HAS_SYNCFS {
            assert_eq!(d.syncs_done(), 1);
        } else {
            assert_eq!(d.syncs_done(), SYNCFS_FROM + 10);
        }
        assert!(d.is_clean());
    }

    #[test]
    fn a_failed_sync_is_reported_and_not_retried() {
        // A pipe cannot be synced (EINVAL).
        let (r, _w) = std::io::pipe().unwrap();
        let d = Durable::new(Fsync::On);
        d.content(&r).unwrap();
        assert!(d.before_records().is_err());
        d.before_records().unwrap();
        d.unnamed(&r).unwrap();
        let t = tempfile::tempdir().unwrap();
        let (own, others) = d.with_records(&tmpfile(t.path(), "l"));
        own.unwrap();
        assert!(others.is_err());
        assert!(d.is_clean());
    }

    #[test]
    fn off_syncs_nothing_but_keeps_the_order() {
        let t = tempfile::tempdir().unwrap();
        let d = Durable::new(Fsync::Off);
        d.content(tmpfile(t.path(), "a")).unwrap();
        assert!(!d.is_clean());
        d.all().unwrap();
        assert!(d.is_clean());
        assert_eq!(d.syncs_done(), 0);
    }
}
