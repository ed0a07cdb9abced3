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
                let (tmp, _) = fs_util::open_or_create_private_dir(self.rt.as_fd(), "tmp").ok()?;
                let (d, _) = fs_util::open_or_create_private_dir(tmp.as_fd(), "trash").ok()?;
                Some(d)
            })
            .as_ref()
            .map(|d| d.as_fd())
    }

    /// Gives the regular file `name` in `dir` a second name in the trash, so
    /// replacing it frees nothing. False when it could not (another file
    /// system, link limit): the replacement then frees it inline.
    pub fn keep(&self, dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> bool {
        let Some(t) = self.dir() else {
            return false;
        };
        let entry = fs_util::temp_name("t-");
        let ok = rustix::fs::linkat(dir, name, t, entry.as_str(), AtFlags::empty()).is_ok();
        if ok {
            self.added.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Removes `name` from `dir` by moving it into the trash; falls back to
    /// unlinking it.
    pub fn remove(&self, dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> rustix::io::Result<()> {
        if let Some(t) = self.dir() {
            let entry = fs_util::temp_name("t-");
            if rustix::fs::renameat(dir, name, t, entry.as_str()).is_ok() {
                self.added.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        rustix::fs::unlinkat(dir, name, AtFlags::empty())
    }

    /// Empties the trash once an action is recorded as ended: in the
    /// background through the reaper when the CLI enabled it (even for one
    /// file: its unlink alone was measured at 0.25–4.6 ms here), else now.
    pub fn settle(&self) {
        if self.added.swap(0, Ordering::Relaxed) == 0 {
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

    /// Unlinks every trash entry now; returns how many.
    pub fn empty(&self) -> usize {
        match self.dir() {
            Some(d) => empty_dir(d),
            None => 0,
        }
    }
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
    // The runtime directory by a path the child can open: ours, through /proc.
    let rt_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(rt));
    let Ok(real) = std::fs::read_link(&rt_path) else {
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
