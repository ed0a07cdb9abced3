//! Deferred release of the files a rollback replaces or removes.
//!
//! Freeing a file's blocks is not free: on ext4 mounted with `discard` and no
//! journal (this project's machines), every freed extent is discarded
//! synchronously, ~0.25 ms per file, and renaming a new file over an old one
//! frees the old one inside the `rename` (110 files: ~30 ms, derived from
//! the per-file figure). So before a write-back replaces a regular file, it gives the old
//! inode a second name in `.agent-runtime/tmp/trash/` (one `link`, ~20 µs);
//! a file it removes is renamed there instead of unlinked. The rename then
//! frees nothing, and the trash is emptied after the action's end is
//! recorded: by a detached `ckpt reap-trash` when the CLI registered one
//! ([`Trash::enable_reaper`]), else inline.
//!
//! A small trash is left for a later action instead: starting the reaper
//! costs ~0.3 ms (the spawn waits for the child's `exec`), most of a
//! one-file rollback's margin. Each entry's name carries the size of what it
//! holds (`ts<size>-…`), so one `getdents` of the trash tells whether the
//! whole of it, older entries included, stays within [`KEEP_ENTRIES`] files
//! and [`KEEP_BYTES`] bytes; the first action that finds more empties all of
//! it. So at most 1 MiB of bytes already in the blob store waits there.
//!
//! Trash entries are never read: the bytes they hold were stored in the blob
//! store before the action wrote anything. Emptying the trash at any moment,
//! even while another action is filling it, only moves the freeing back into
//! that action's `rename`. A crash leaves entries behind; the next emptying
//! takes them.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use rustix::fs::AtFlags;

use crate::fs_util;

/// At most this many entries are left in the trash after an action.
pub const KEEP_ENTRIES: usize = 64;
/// At most this many bytes (by the sizes in the entries' names) are left in
/// the trash after an action.
pub const KEEP_BYTES: u64 = 1 << 20;

/// The trash of one open workspace.
#[derive(Debug)]
pub struct Trash {
    rt: Arc<OwnedFd>,
    dir: OnceLock<Option<OwnedFd>>,
    added: AtomicUsize,
    detach: AtomicBool,
}

impl Trash {
    pub(crate) fn new(rt: Arc<OwnedFd>) -> Trash {
        Trash {
            rt,
            dir: OnceLock::new(),
            added: AtomicUsize::new(0),
            detach: AtomicBool::new(false),
        }
    }

    /// Makes [`settle`](Self::settle) run this executable's `reap-trash`
    /// (detached) instead of unlinking inline: only the CLI, whose
    /// executable is `ckpt`, turns it on.
    pub fn enable_reaper(&self) {
        self.detach.store(true, Ordering::Relaxed);
    }

    /// `.agent-runtime/tmp/trash/`, created on first use (`None` when it
    /// cannot be: then nothing is deferred).
    fn dir(&self) -> Option<BorrowedFd<'_>> {
        self.dir
            .get_or_init(|| {
                // No record names the trash or what it holds: nothing to sync.
                let unsynced = crate::durable::Durable::new(crate::durable::Fsync::Off);
                let (tmp, _) =
                    fs_util::open_or_create_private_dir(self.rt.as_fd(), "tmp", &unsynced).ok()?;
                let (d, _) =
                    fs_util::open_or_create_private_dir(tmp.as_fd(), "trash", &unsynced).ok()?;
                Some(d)
            })
            .as_ref()
            .map(|d| d.as_fd())
    }

    /// Gives the regular file `name` in `dir`, of `size` bytes, a second
    /// name in the trash, so replacing it frees nothing. False when it could
    /// not (another file system, link limit): the replacement then frees it
    /// inline.
    pub fn keep(&self, dir: BorrowedFd<'_>, name: &std::ffi::OsStr, size: u64) -> bool {
        let Some(t) = self.dir() else {
            return false;
        };
        let entry = entry_name(size);
        let ok = rustix::fs::linkat(dir, name, t, entry.as_str(), AtFlags::empty()).is_ok();
        if ok {
            self.added.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Removes the regular file `name` (of `size` bytes) from `dir` by
    /// moving it into the trash; falls back to unlinking it.
    pub fn remove(
        &self,
        dir: BorrowedFd<'_>,
        name: &std::ffi::OsStr,
        size: u64,
    ) -> rustix::io::Result<()> {
        if let Some(t) = self.dir() {
            let entry = entry_name(size);
            if rustix::fs::renameat(dir, name, t, entry.as_str()).is_ok() {
                self.added.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        rustix::fs::unlinkat(dir, name, AtFlags::empty())
    }

    /// Empties the trash once an action is recorded as ended, unless all of
    /// it is small enough to wait for a later action (see the module's
    /// note): in the background through the reaper when the CLI enabled it
    /// (even for one file: its unlink alone was measured at 0.25–4.6 ms
    /// here), else now.
    pub fn settle(&self) {
        if self.added.swap(0, Ordering::Relaxed) == 0 || self.small() {
            return;
        }
        if self.detach.load(Ordering::Relaxed)
            && let Ok(exe) = std::env::current_exe()
            && spawn_reaper(&exe, &self.rt)
        {
            return;
        }
        self.empty();
    }

    /// Whether the whole trash holds at most [`KEEP_ENTRIES`] entries of at
    /// most [`KEEP_BYTES`] bytes together. An entry whose name does not
    /// tell its size (made by an older ckpt) makes it not small.
    fn small(&self) -> bool {
        let Some(d) = self.dir() else {
            return false;
        };
        let Ok(it) = rustix::fs::Dir::read_from(d) else {
            return false;
        };
        let (mut entries, mut bytes) = (0usize, 0u64);
        for e in it {
            let Ok(e) = e else {
                return false;
            };
            let n = e.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            let Some(size) = size_in_name(n) else {
                return false;
            };
            entries += 1;
            bytes = bytes.saturating_add(size);
            if entries > KEEP_ENTRIES || bytes > KEEP_BYTES {
                return false;
            }
        }
        true
    }

    /// Unlinks every trash entry now; returns how many.
    pub fn empty(&self) -> usize {
        match self.dir() {
            Some(d) => empty_dir(d),
            None => 0,
        }
    }
}

/// A fresh trash entry's name, telling the size it holds: `ts<size>-…`.
fn entry_name(size: u64) -> String {
    fs_util::temp_name(&format!("ts{size}-"))
}

/// The size an entry's name tells (`None` when it tells none).
fn size_in_name(name: &[u8]) -> Option<u64> {
    let digits = name.strip_prefix(b"ts")?.split(|&b| b == b'-').next()?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Unlinks every non-directory entry of `dir`; returns how many.
pub fn empty_dir(dir: BorrowedFd<'_>) -> usize {
    let Ok(mut it) = rustix::fs::Dir::read_from(dir) else {
        return 0;
    };
    let mut names = Vec::new();
    while let Some(Ok(e)) = it.next() {
        let n = e.file_name();
        if n.to_bytes() != b"." && n.to_bytes() != b".." {
            names.push(n.to_owned());
        }
    }
    names
        .iter()
        .filter(|n| rustix::fs::unlinkat(dir, n.as_c_str(), AtFlags::empty()).is_ok())
        .count()
}

/// Starts `exe reap-trash` on this workspace, detached (own process group,
/// no stdio, not waited for). False when it could not be started.
fn spawn_reaper(exe: &std::path::Path, rt: &OwnedFd) -> bool {
    use std::os::unix::process::CommandExt;
    // The runtime directory by a path the child can open.
    let Some(real) = crate::sys::path_of_dir(rt.as_fd()) else {
        return false;
    };
    std::process::Command::new(exe)
        .arg("reap-trash")
        .arg(real)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_name_tells_its_size_and_older_names_tell_none() {
        let n = entry_name(10_482);
        assert!(n.starts_with("ts10482-"), "{n}");
        assert_eq!(size_in_name(n.as_bytes()), Some(10_482));
        assert_eq!(size_in_name(entry_name(0).as_bytes()), Some(0));
        assert_eq!(size_in_name(b"t-30622-754766055308-2-9cb3e39"), None);
        assert_eq!(size_in_name(b"ts-1-x"), None);
        assert_eq!(size_in_name(b"tsx-1"), None);
    }

    /// A trash in a fresh directory (created by the first look), and a way
    /// to put an entry in it.
    fn fresh() -> (tempfile::TempDir, Trash) {
        let d = tempfile::tempdir().unwrap();
        let t = Trash::new(Arc::new(std::fs::File::open(d.path()).unwrap().into()));
        assert!(t.small(), "an empty trash is small");
        (d, t)
    }

    fn put(d: &tempfile::TempDir, name: &str) {
        std::fs::write(d.path().join("tmp/trash").join(name), b"").unwrap();
    }

    #[test]
    fn only_a_trash_within_both_bounds_is_small() {
        let (d, t) = fresh();
        for _ in 0..KEEP_ENTRIES {
            put(&d, &entry_name(1));
        }
        assert!(t.small(), "{KEEP_ENTRIES} entries");
        put(&d, &entry_name(1));
        assert!(!t.small(), "one entry more");

        let (d, t) = fresh();
        put(&d, &entry_name(KEEP_BYTES));
        assert!(t.small(), "exactly the byte bound");
        put(&d, &entry_name(1));
        assert!(!t.small(), "one byte over");

        let (d, t) = fresh();
        put(&d, "t-1-old");
        assert!(!t.small(), "an entry of unknown size");
    }
}
