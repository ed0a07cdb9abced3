//! Opening a path beneath a directory handle without ever following a
//! symlink, so that a directory swapped for a symlink mid-operation cannot
//! redirect an open outside (RELIABILITY.md B4, S12–S13).
//!
//! Linux: one `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)` for the whole path. Everywhere, and on Linux when
//! `openat2` is missing (before 5.6, or refused by a seccomp filter) or
//! chosen off: one `openat(O_NOFOLLOW)` per component, each directory opened
//! with `O_DIRECTORY` from the handle of the one before.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::Backend;

/// Why ckpt refused to open a path: the error inside the `io::Error` it
/// returns, told apart by variant ([`Refusal::of`]), never by message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A component is a symlink or not a directory, or the path is not
    /// normalised.
    #[error("E_UNSAFE_PATH: {0}")]
    UnsafePath(String),
    /// A regular file was asked for and the path holds a symlink or
    /// something else.
    #[error("E_NOT_REGULAR: {0}")]
    NotRegular(String),
}

impl Refusal {
    /// The refusal as the `io::Error` the open returns.
    pub fn into_io(self) -> io::Error {
        io::Error::other(self)
    }

    /// The refusal `e` carries, if it is one.
    pub fn of(e: &io::Error) -> Option<&Refusal> {
        e.get_ref()?.downcast_ref()
    }
}

/// The error of a path refused because it goes through a symlink or is not
/// normalised ([`Refusal::UnsafePath`]).
pub fn unsafe_path(what: &str) -> io::Error {
    Refusal::UnsafePath(what.to_string()).into_io()
}

/// A directory handle that paths are opened beneath, and what this kernel
/// offers for it (found by use: the first `ENOSYS` or `EPERM` from
/// `openat2` turns it off for this value, not for the process).
#[derive(Debug)]
pub struct Beneath {
    root: OwnedFd,
    backend: Backend,
    openat2: AtomicBool,
}

impl Beneath {
    /// Opens the directory `root`.
    pub fn open(root: &Path) -> io::Result<Beneath> {
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Beneath {
            root: fd,
            backend: Backend::Native,
            openat2: AtomicBool::new(cfg!(any(target_os = "linux", target_os = "android"))),
        })
    }

    /// Uses only the portable per-component walk, as on a platform without
    /// `openat2` (tests run every confined operation both ways).
    pub fn portable(mut self) -> Beneath {
        self.openat2.store(false, Ordering::Relaxed);
        self.backend = Backend::Portable;
        self
    }

    /// The backend chosen for everything done beneath this root (the walk
    /// lists directories with it too).
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Whether opens may still use `openat2`.
    pub fn uses_openat2(&self) -> bool {
        self.openat2.load(Ordering::Relaxed)
    }

    /// The root directory handle.
    pub fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// Opens `rel` (relative, `/`-separated, normalised) beneath the root
    /// with `flags` (`O_NOFOLLOW` and `O_CLOEXEC` are added), refusing any
    /// symlink on the way (`E_UNSAFE_PATH`); a symlink as the last
    /// component fails as `O_NOFOLLOW` makes it (`ELOOP`, or `ENOTDIR` with
    /// `O_DIRECTORY`).
    pub fn open_path(&self, rel: &[u8], flags: OFlags) -> io::Result<OwnedFd> {
        let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        if let Some(r) = self.with_openat2(rel, flags) {
            return match r {
                Err(Errno::LOOP) | Err(Errno::XDEV) => Err(unsafe_path(&format!(
                    "`{}` goes through a symlink",
                    String::from_utf8_lossy(rel)
                ))),
                r => Ok(r?),
            };
        }
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

    /// One `openat2` of the whole of `rel`, where the kernel has it: `None`
    /// when it does not (the caller then takes the careful path, which also
    /// names what went wrong). `flags` are used as given.
    pub fn open_whole(&self, rel: &[u8], flags: OFlags) -> Option<io::Result<OwnedFd>> {
        self.with_openat2(rel, flags).map(|r| r.map_err(Into::into))
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn with_openat2(&self, rel: &[u8], flags: OFlags) -> Option<Result<OwnedFd, Errno>> {
        use rustix::fs::ResolveFlags;
        if !self.uses_openat2() {
            return None;
        }
        match rustix::fs::openat2(
            &self.root,
            OsStr::from_bytes(rel),
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) {
            Err(Errno::NOSYS) | Err(Errno::PERM) => {
                self.openat2.store(false, Ordering::Relaxed);
                None
            }
            r => Some(r),
        }
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn with_openat2(&self, _: &[u8], _: OFlags) -> Option<Result<OwnedFd, Errno>> {
        None
    }
}
