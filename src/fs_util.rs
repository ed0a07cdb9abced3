//! File-system primitives: atomic writes (whose syncs go to a
//! [`Durable`]), and the workspace-confined reader/writer.
//!
//! Every path here is opened relative to a directory handle. Inside the
//! workspace, resolution goes through [`sys::Beneath`] (never following a
//! symlink on the way), so a directory swapped for a symlink mid-operation
//! cannot redirect a write outside (RELIABILITY.md B4, S12–S13).
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
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::durable::{Durable, Keep};
use crate::failpoint;
use crate::paths::RelPath;
pub use crate::sys::Refusal;
use crate::sys::{self, Beneath, mode as perm_mode, unsafe_path};

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
    /// Wraps an I/O error with its operation and path. Paths are relative
    /// to the directory the operation started from (the workspace root, or
    /// `.agent-runtime/`); an empty one is that directory itself and is
    /// shown as `.`, so no message names an empty path.
    pub fn new(op: &'static str, path: impl Into<String>, source: io::Error) -> FsError {
        let mut path = path.into();
        if path.is_empty() {
            path.push('.');
        }
        FsError { op, path, source }
    }

    /// True when resolution was refused because a component is a symlink or
    /// leaves the directory (`E_UNSAFE_PATH`).
    pub fn is_unsafe_path(&self) -> bool {
        matches!(self.source.raw_os_error(), Some(e) if e == Errno::LOOP.raw_os_error() || e == Errno::XDEV.raw_os_error())
            || matches!(Refusal::of(&self.source), Some(Refusal::UnsafePath(_)))
    }
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

/// Opens (creating, mode 0600) the lock file `dir/name` and takes an exclusive
/// `flock` on it, waiting for other holders; the lock lasts as long as the file.
pub fn lock_exclusive(dir: BorrowedFd<'_>, name: &str, shown: &str) -> Result<File, FsError> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        perm_mode(0o600),
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
/// The new entry is content ([`Durable::content_dir`]): durable before the
/// next record.
pub fn open_or_create_private_dir(
    dir: BorrowedFd<'_>,
    name: &str,
    durable: &Durable,
) -> io::Result<(OwnedFd, bool)> {
    let created = match rustix::fs::mkdirat(dir, name, perm_mode(0o700)) {
        Ok(()) => true,
        Err(Errno::EXIST) => false,
        Err(e) => return Err(e.into()),
    };
    let fd = open_dir(dir, name)?;
    if created {
        // The umask may have removed bits we want or left ones we do not: set it exactly.
        rustix::fs::fchmod(&fd, perm_mode(0o700))?;
        durable.content_dir(dir)?;
    }
    Ok((fd, created))
}

/// Writes `data` to `dir/name` atomically: temp file in the same directory,
/// `rename` over the name; its data and the directory's new entry are then
/// handed to `keep` (a [`Keep::Named`] file is durable before the next
/// record). The file gets exactly `mode` (permission bits only), whatever
/// the umask.
pub fn write_atomic(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    data: &[u8],
    mode: u32,
    no_replace: bool,
    keep: Keep<'_>,
) -> io::Result<()> {
    let tmp = temp_name(".ckpt-tmp-");
    let f = create_excl(dir, OsStr::new(&tmp), mode)?;
    let res = (|| {
        let mut f = f;
        f.write_all(data)?;
        failpoint::hit("atomic.after_tmp_write")?;
        keep.file(&f)?;
        drop(f);
        keep.before_rename()?;
        failpoint::hit("atomic.before_rename")?;
        if no_replace {
            if !rename_to_new(dir, &tmp, name)? {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
        } else {
            rustix::fs::renameat(dir, tmp.as_str(), dir, name)?;
        }
        failpoint::hit("atomic.after_rename")?;
        keep.dir(dir)
    })();
    if res.is_err() {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
    }
    res
}

/// Renames the temp file `tmp` to `name` unless that name is taken; then
/// the temp file is removed and `false` returned.
fn rename_to_new(dir: BorrowedFd<'_>, tmp: &str, name: &OsStr) -> io::Result<bool> {
    let done = sys::rename_noreplace(dir, tmp, dir, name)?;
    if !done {
        let _ = rustix::fs::unlinkat(dir, tmp, AtFlags::empty());
    }
    Ok(done)
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
pub fn write_new(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    data: &[u8],
    mode: u32,
    durable: &Durable,
) -> io::Result<()> {
    let f = create_excl(dir, name, mode)?;
    let res = (|| {
        let mut f = f;
        f.write_all(data)?;
        failpoint::hit("new.after_write")?;
        durable.content(&f)?;
        drop(f);
        durable.content_dir(dir)?;
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
        perm_mode(0o600),
    )?;
    let st = sys::fstat(&fd)?;
    if !st.is_file() {
        return Err(io::Error::other(format!("{name} is not a regular file")));
    }
    if st.perm() & 0o777 != 0o600 {
        rustix::fs::fchmod(&fd, perm_mode(0o600))?;
    }
    let f = File::from(fd);
    std::os::unix::fs::FileExt::write_all_at(&f, data, 0)?;
    if st.size > data.len() as u64 {
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
        perm_mode(mode),
    )?;
    // The umask can only remove bits: when it is known and removes none of
    // `mode`'s, the file already has exactly `mode` (one system call less per
    // file; hundreds when a shell call changed hundreds of files).
    if umask_may_clear(mode) {
        rustix::fs::fchmod(&fd, perm_mode(mode))?;
    }
    Ok(File::from(fd))
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
        rustix::fs::fchmod(fd, perm_mode(0o600))?;
    }
    Ok(())
}

/// Reads the process's umask so that [`create_excl`] can skip `fchmod` when
/// it would change nothing. Reading the umask means setting it, so this must
/// run while the process has one thread (the binary's `main` calls it first).
pub fn learn_umask() {
    let old = sys::swap_umask(0o077);
    sys::swap_umask(old);
    UMASK.store(old, Ordering::Relaxed);
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

/// The workspace root as a directory handle; all reads and writes of user files
/// go through it.
#[derive(Debug)]
pub struct Confined {
    /// The root, and how paths are opened beneath it on this kernel.
    root: Beneath,
    /// Where the syncs of what it writes go.
    durable: Arc<Durable>,
}

impl Confined {
    /// Opens the workspace root directory; what is written through it is
    /// handed to `durable` as content.
    pub fn open(root: &Path, durable: Arc<Durable>) -> io::Result<Confined> {
        Ok(Confined {
            root: Beneath::open(root)?,
            durable,
        })
    }

    /// Opens every path with the portable per-component walk
    /// ([`Beneath::portable`]; tests run every confined operation both ways).
    #[doc(hidden)]
    pub fn portable(self) -> Confined {
        Confined {
            root: self.root.portable(),
            durable: self.durable,
        }
    }

    /// Which form of the platform's calls it uses ([`Confined::portable`]).
    pub fn backend(&self) -> sys::Backend {
        self.root.backend()
    }

    /// The set the syncs of what it writes go to.
    pub fn durable(&self) -> &Durable {
        &self.durable
    }

    /// Returns the root directory handle.
    pub fn root(&self) -> BorrowedFd<'_> {
        self.root.root()
    }

    /// Opens `rel_dir` (a workspace-relative directory) beneath the root, refusing
    /// any symlink or magic link on the way.
    pub fn open_dir_beneath(&self, rel_dir: &[u8]) -> io::Result<OwnedFd> {
        if rel_dir.is_empty() {
            return Ok(rustix::io::dup(self.root())?);
        }
        self.root
            .open_path(rel_dir, OFlags::RDONLY | OFlags::DIRECTORY)
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
        if let Some(Ok(fd)) = self.root.open_whole(
            rel.as_bytes(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        ) && let Ok(st) = sys::fstat(&fd)
            && st.is_file()
        {
            return Ok((File::from(fd), st.size));
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
            return Ok(rustix::io::dup(self.root())?);
        };
        // Usually the directory is there: one confined open instead of a
        // mkdirat + openat per component.
        // Any failure takes the careful path below, which creates what is
        // missing and names what is unsafe.
        if let Ok(fd) = self.open_dir_beneath(parent) {
            return Ok(fd);
        }
        let mut cur = rustix::io::dup(self.root())?;
        for c in parent.split(|&b| b == b'/') {
            let name = OsStr::from_bytes(c);
            match rustix::fs::mkdirat(&cur, name, perm_mode(0o777)) {
                Ok(()) => self.durable.content_dir(&cur)?,
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
    /// (setuid/setgid/sticky are never set), atomically; everything waiting
    /// in the durable set (the old version, stored first) and the new data
    /// are durable before the rename ([`Keep::Replacing`]).
    pub fn write_file(&self, rel: &RelPath, data: &[u8], mode: u32) -> io::Result<()> {
        let dir = self.create_parents(rel)?;
        let (_, name) = rel.split_parent();
        write_atomic(
            dir.as_fd(),
            OsStr::from_bytes(name),
            data,
            mode & 0o777,
            false,
            Keep::Replacing(&self.durable),
        )
    }

    /// Replaces (or creates) `rel` with a symlink to `target`, atomically.
    pub fn write_symlink(&self, rel: &RelPath, target: &[u8]) -> io::Result<()> {
        let dir = self.create_parents(rel)?;
        let (_, name) = rel.split_parent();
        let tmp = temp_name(".ckpt-tmp-");
        rustix::fs::symlinkat(OsStr::from_bytes(target), &dir, tmp.as_str())?;
        // What it replaces was stored first: durable before it goes.
        if let Err(e) = self.durable.all().and_then(|()| {
            Ok(rustix::fs::renameat(
                &dir,
                tmp.as_str(),
                &dir,
                OsStr::from_bytes(name),
            )?)
        }) {
            let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
            return Err(e);
        }
        self.durable.content_dir(&dir)
    }

    /// Removes the file or symlink `rel` (never a directory) and syncs its parent.
    pub fn remove(&self, rel: &RelPath) -> io::Result<()> {
        let (dir, name) = self.parent_of(rel)?;
        // What it removes was stored first: durable before it goes.
        self.durable.all()?;
        rustix::fs::unlinkat(&dir, OsStr::from_bytes(&name), AtFlags::empty())?;
        self.durable.content_dir(&dir)
    }
}

/// Returns what `dir/name` holds, without following a symlink.
pub fn entry_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<EntryKind> {
    let st = match sys::lstat_at(dir, name) {
        Ok(st) => st,
        Err(Errno::NOENT) | Err(Errno::NOTDIR) => return Ok(EntryKind::Absent),
        Err(e) => return Err(e.into()),
    };
    Ok(match st.file_type() {
        FileType::RegularFile => EntryKind::File {
            mode: st.perm(),
            size: st.size,
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
            Refusal::NotRegular(format!(
                "`{}` is a symlink",
                String::from_utf8_lossy(name.as_bytes())
            ))
            .into_io()
        } else {
            e.into()
        }
    })?;
    let st = sys::fstat(&fd)?;
    if !st.is_file() {
        return Err(Refusal::NotRegular(format!(
            "`{}` is not a regular file",
            String::from_utf8_lossy(name.as_bytes())
        ))
        .into_io());
    }
    Ok((File::from(fd), st.size))
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

    #[test]
    fn an_io_error_on_the_starting_directory_names_it_as_dot() {
        let e = FsError::new("list", "", io::Error::from(io::ErrorKind::PermissionDenied));
        assert_eq!(e.path, ".");
        assert!(e.to_string().starts_with("cannot list `.`: "), "{e}");
        let e = FsError::new("open", "a/b", io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(e.path, "a/b");
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
        for c in [
            Confined::open(r, Arc::default()).unwrap(),
            Confined::open(r, Arc::default()).unwrap().portable(),
        ] {
            refuses_symlinks_and_special_files(&c, fifo);
        }
    }

    fn refuses_symlinks_and_special_files(c: &Confined, fifo: bool) {
        let rel = |s: &str| RelPath::from_ledger(s.as_bytes()).unwrap();
        let (_, n) = c.open_read_sized(&rel("d/f")).unwrap();
        assert_eq!(n, 3);
        assert_eq!(c.read(&rel("d/f")).unwrap(), b"xyz");
        let err = c.open_read(&rel("d/link")).unwrap_err();
        assert!(
            matches!(Refusal::of(&err), Some(Refusal::NotRegular(_))),
            "{err}"
        );
        let e = err.to_string();
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

    /// Writes, creates and removes through a directory swapped for a
    /// symlink to outside the workspace are refused, with `openat2` and
    /// without it (the per-component `O_NOFOLLOW` walk).
    #[test]
    fn nothing_is_written_through_a_symlinked_directory_either_way() {
        let t = tempfile::tempdir().unwrap();
        let (ws, outside) = (t.path().join("ws"), t.path().join("outside"));
        std::fs::create_dir_all(ws.join("real")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("victim"), b"theirs").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
        let rel = |s: &str| RelPath::from_ledger(s.as_bytes()).unwrap();
        for c in [
            Confined::open(&ws, Arc::default()).unwrap(),
            Confined::open(&ws, Arc::default()).unwrap().portable(),
        ] {
            let e = c.write_file(&rel("link/new"), b"x", 0o644).unwrap_err();
            assert!(
                matches!(Refusal::of(&e), Some(Refusal::UnsafePath(_))),
                "{e}"
            );
            assert!(c.write_file(&rel("link/victim"), b"x", 0o644).is_err());
            assert!(c.write_file(&rel("link/deep/new"), b"x", 0o644).is_err());
            assert!(c.write_symlink(&rel("link/sl"), b"/etc/passwd").is_err());
            assert!(c.remove(&rel("link/victim")).is_err());
            c.write_file(&rel("real/ok"), b"fine", 0o644).unwrap();
        }
        let mut left: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["victim"]);
        assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"theirs");
        assert_eq!(std::fs::read(ws.join("real/ok")).unwrap(), b"fine");
    }
}
