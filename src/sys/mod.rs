//! The platform layer: the only code that names a system call, flag or
//! structure field whose existence or shape differs between the Unixes ckpt
//! builds on.
//!
//! Everything outside this module uses std and the POSIX subset of rustix
//! (`openat`, `mkdirat`, `renameat`, `unlinkat`, `readdir`), which exist
//! with the same meaning on every Unix. What does not is here, each with a
//! portable form compiled on every Unix and a Linux form where Linux has a
//! faster or safer call:
//!
//! | here                     | Linux                                         | elsewhere                          |
//! |--------------------------|-----------------------------------------------|------------------------------------|
//! | [`Stat`]                 | `stat`'s fields as they are                   | widened (`st_dev` is `i32` and `st_mode` `u16` on macOS) |
//! | [`Beneath`]              | one `openat2(RESOLVE_BENEATH \| NO_SYMLINKS)` | one `openat(O_NOFOLLOW)` per component |
//! | [`rename_noreplace`]     | `renameat2(RENAME_NOREPLACE)`                 | `link` + `unlink`                  |
//! | [`syncfs`]               | `syncfs`                                      | absent ([`HAS_SYNCFS`] is false)   |
//! | [`list_dir`]             | `getdents64` into the caller's buffer         | `readdir`                          |
//! | [`birth_ms`]             | `statx(STATX_BTIME)`                          | `st_birthtime` on Apple and BSDs   |
//! | [`path_of_dir`]          | `/proc/self/fd`                               | `F_GETPATH` on Apple               |
//! | [`procs`]                | `/proc/<pid>/stat`, `/proc/self/ns/pid`       | unknown (`None`): calls closed by turn ends only |
//!
//! Capabilities that a kernel may lack at run time (`openat2` under an old
//! kernel or a seccomp filter) are found by use and kept in a value (a
//! [`Beneath`] per open workspace), never in a static. The portable forms
//! are exercised on Linux too: [`Beneath::portable`] chooses them, and the
//! tests and the integration suite run both ways (README).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{AtFlags, FileType, Mode};

mod beneath;
pub mod procs;

pub use beneath::{Beneath, Refusal, unsafe_path};

/// Which form of a call to use where a platform has two: its own
/// (`Native`: on Linux `openat2`, `getdents64`) or the portable POSIX one
/// every Unix has. Elsewhere both are the portable one. Linux runs
/// `Portable` in tests, so that the form other platforms run is tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// The platform's own calls where it has them.
    #[default]
    Native,
    /// Only the portable POSIX calls.
    Portable,
}

/// A file's status, in the same widths on every platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stat {
    /// The device (file system) it lives on.
    pub dev: u64,
    /// Its inode number.
    pub ino: u64,
    /// Type and permission bits (`st_mode`).
    pub mode: u32,
    /// Its number of hard links.
    pub nlink: u64,
    /// Its owner.
    pub uid: u32,
    /// Its size in bytes.
    pub size: u64,
    /// Last modification, seconds and nanoseconds.
    pub mtime: (i64, i64),
    /// Last status change, seconds and nanoseconds.
    pub ctime: (i64, i64),
}

impl Stat {
    // `stat`'s field types differ between platforms and architectures: each
    // cast is a no-op on some and a widening on others.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    fn from_raw(st: &rustix::fs::Stat) -> Stat {
        Stat {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            mode: st.st_mode as u32,
            nlink: st.st_nlink as u64,
            uid: st.st_uid as u32,
            size: st.st_size as u64,
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
        }
    }

    /// What kind of file it is.
    pub fn file_type(&self) -> FileType {
        FileType::from_raw_mode(raw_mode(self.mode))
    }

    /// Whether it is a regular file.
    pub fn is_file(&self) -> bool {
        self.file_type() == FileType::RegularFile
    }

    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        self.file_type() == FileType::Directory
    }

    /// Its permission bits with setuid, setgid and sticky (`0o7777`).
    pub fn perm(&self) -> u32 {
        self.mode & 0o7777
    }

    /// Last modification in nanoseconds since the epoch.
    pub fn mtime_ns(&self) -> i64 {
        self.mtime.0 * 1_000_000_000 + self.mtime.1
    }

    /// Last status change in nanoseconds since the epoch.
    pub fn ctime_ns(&self) -> i64 {
        self.ctime.0 * 1_000_000_000 + self.ctime.1
    }
}

// `mode_t` is `u16` on Apple platforms and `u32` elsewhere; every bit ckpt
// sets (type and `0o7777`) fits in either.
#[allow(clippy::unnecessary_cast)]
fn raw_mode(bits: u32) -> rustix::fs::RawMode {
    bits as rustix::fs::RawMode
}

/// Permission bits as the `Mode` of an `openat`, `mkdirat` or `fchmod`.
pub fn mode(bits: u32) -> Mode {
    Mode::from_raw_mode(raw_mode(bits & 0o7777))
}

/// The status of an open file.
pub fn fstat(fd: impl AsFd) -> rustix::io::Result<Stat> {
    Ok(Stat::from_raw(&rustix::fs::fstat(fd)?))
}

/// The status of `dir/name`, not following a final symlink.
pub fn lstat_at<P: rustix::path::Arg>(dir: impl AsFd, name: P) -> rustix::io::Result<Stat> {
    Ok(Stat::from_raw(&rustix::fs::statat(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
    )?))
}

/// Sets the process's umask to `bits`, returning the one it replaces (the
/// only way to read it).
pub fn swap_umask(bits: u32) -> u32 {
    rustix::process::umask(mode(bits)).bits() as u32 & 0o777
}

/// Renames `from_dir/from` to `to_dir/to` unless `to` is taken: `Ok(false)`
/// then, `from` left in place. `renameat2(RENAME_NOREPLACE)` where the
/// kernel and file system have it, else `link` + `unlink` (just as
/// exclusive: `link` never replaces a name; `from` must be a file).
pub fn rename_noreplace<P: rustix::path::Arg + Copy, Q: rustix::path::Arg + Copy>(
    from_dir: BorrowedFd<'_>,
    from: P,
    to_dir: BorrowedFd<'_>,
    to: Q,
) -> io::Result<bool> {
    rename_noreplace_with(Backend::Native, from_dir, from, to_dir, to)
}

/// [`rename_noreplace`] with the given backend (`Portable`: always `link` +
/// `unlink`).
pub fn rename_noreplace_with<P: rustix::path::Arg + Copy, Q: rustix::path::Arg + Copy>(
    backend: Backend,
    from_dir: BorrowedFd<'_>,
    from: P,
    to_dir: BorrowedFd<'_>,
    to: Q,
) -> io::Result<bool> {
    use rustix::io::Errno;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if backend == Backend::Native {
        match rustix::fs::renameat_with(
            from_dir,
            from,
            to_dir,
            to,
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            Ok(()) => return Ok(true),
            Err(Errno::EXIST) => return Ok(false),
            Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let _ = backend;
    match rustix::fs::linkat(from_dir, from, to_dir, to, AtFlags::empty()) {
        Ok(()) => {
            let _ = rustix::fs::unlinkat(from_dir, from, AtFlags::empty());
            Ok(true)
        }
        Err(Errno::EXIST) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether [`syncfs`] exists here (Linux only).
pub const HAS_SYNCFS: bool = cfg!(any(target_os = "linux", target_os = "android"));

/// Writes back every dirty page and inode of `fd`'s file system and waits
/// (Linux `syncfs`). Only [`crate::durable`] calls it (clippy holds the
/// line); where [`HAS_SYNCFS`] is false it is never called and fails.
#[allow(clippy::disallowed_methods)]
pub fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    return Ok(rustix::fs::syncfs(fd)?);
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = fd;
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

/// Reads every entry of the directory `fd` (`.` and `..` included), calling
/// `each` with its name and its type as the listing tells it
/// (`FileType::Unknown` when the file system does not say). `buf` is the
/// caller's reusable buffer for the raw listing (Linux reads `getdents64`
/// into it; `readdir` is used elsewhere and by [`Backend::Portable`]). An
/// error part way through is returned after the entries read before it.
pub fn list_dir(
    fd: BorrowedFd<'_>,
    buf: &mut Vec<u8>,
    backend: Backend,
    mut each: impl FnMut(&CStr, FileType),
) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if backend == Backend::Native {
        let mut dir = rustix::fs::RawDir::new(fd, buf.spare_capacity_mut());
        while let Some(e) = dir.next() {
            let e = e?;
            each(e.file_name(), e.file_type());
        }
        return Ok(());
    }
    let _ = (buf, backend);
    for e in rustix::fs::Dir::read_from(fd)? {
        let e = e?;
        each(e.file_name(), e.file_type());
    }
    Ok(())
}

/// When the directory entry `dir/name` (not followed) was created, in ms
/// since the epoch, with whether it is a directory; `None` where the file
/// system or platform keeps no birth time.
pub fn birth_ms(dir: BorrowedFd<'_>, name: &CStr) -> Option<(bool, u64)> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::fs::StatxFlags;
        let st = rustix::fs::statx(
            dir,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::TYPE | StatxFlags::BTIME,
        )
        .ok()?;
        if !StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::BTIME) {
            return None;
        }
        let is_dir = u32::from(st.stx_mode) & 0o170000 == 0o040000;
        let ms = (st.stx_btime.tv_sec.max(0) as u64) * 1000
            + u64::from(st.stx_btime.tv_nsec) / 1_000_000;
        Some((is_dir, ms))
    }
    #[cfg(any(
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd"
    ))]
    {
        let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
        #[allow(clippy::unnecessary_cast)]
        let ms = (st.st_birthtime.max(0) as u64) * 1000 + (st.st_birthtime_nsec as u64) / 1_000_000;
        Some((is_dir, ms))
    }
    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd"
    )))]
    {
        let _ = (dir, name);
        None
    }
}

/// A path by which another process can open the directory `fd` (its current
/// name), or `None` where the platform cannot tell.
pub fn path_of_dir(fd: BorrowedFd<'_>) -> Option<std::path::PathBuf> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        std::fs::read_link(link).ok()
    }
    #[cfg(any(target_os = "macos", target_os = "ios"))]
    {
        use std::os::unix::ffi::OsStrExt;
        let p = rustix::fs::getpath(fd).ok()?;
        Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(
            p.as_bytes(),
        )))
    }
    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios"
    )))]
    {
        let _ = fd;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_dir(p: &std::path::Path) -> std::os::fd::OwnedFd {
        let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY;
        rustix::fs::open(p, flags, Mode::empty()).unwrap()
    }

    #[test]
    fn a_stat_keeps_the_fields_ckpt_reads() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), b"12345").unwrap();
        let dir = open_dir(t.path());
        let st = lstat_at(&dir, "f").unwrap();
        let md = std::fs::symlink_metadata(t.path().join("f")).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert!(st.is_file() && !st.is_dir());
        assert_eq!(st.size, 5);
        assert_eq!((st.dev, st.ino, st.nlink), (md.dev(), md.ino(), md.nlink()));
        assert_eq!(st.mode, md.mode());
        assert_eq!(st.uid, md.uid());
        assert_eq!(st.mtime, (md.mtime(), md.mtime_nsec()));
        assert_eq!(st.ctime_ns(), md.ctime() * 1_000_000_000 + md.ctime_nsec());
        assert!(fstat(&dir).unwrap().is_dir());
    }

    #[test]
    fn rename_noreplace_never_replaces() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("b"), b"b").unwrap();
        let dir = open_dir(t.path());
        let d = dir.as_fd();
        for (i, backend) in [Backend::Native, Backend::Portable].into_iter().enumerate() {
            let (a, c) = (format!("a{i}"), format!("c{i}"));
            std::fs::write(t.path().join(&a), b"a").unwrap();
            let rename =
                |from: &str, to: &str| rename_noreplace_with(backend, d, from, d, to).unwrap();
            assert!(!rename(&a, "b"), "{backend:?}");
            assert_eq!(std::fs::read(t.path().join("b")).unwrap(), b"b");
            assert!(t.path().join(&a).exists());
            assert!(rename(&a, &c), "{backend:?}");
            assert!(!t.path().join(&a).exists());
            assert_eq!(std::fs::read(t.path().join(&c)).unwrap(), b"a");
        }
    }

    #[test]
    fn a_listing_names_every_entry_with_its_type() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), b"").unwrap();
        std::fs::create_dir(t.path().join("d")).unwrap();
        let dir = open_dir(t.path());
        let mut buf = Vec::with_capacity(4096);
        let mut both = [Backend::Native, Backend::Portable].map(|b| {
            let mut seen = Vec::new();
            list_dir(dir.as_fd(), &mut buf, b, |n, ty| {
                seen.push((n.to_bytes().to_vec(), ty))
            })
            .unwrap();
            seen.sort_by(|a, b| a.0.cmp(&b.0));
            seen
        });
        let seen = std::mem::take(&mut both[1]);
        assert_eq!(both[0], seen, "both backends list the same");
        let names: Vec<&[u8]> = seen.iter().map(|(n, _)| n.as_slice()).collect();
        assert_eq!(names, [&b"."[..], b"..", b"d", b"f"]);
        for (n, ty) in &seen[2..] {
            let want = if n == b"d" {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
            assert!(*ty == want || *ty == FileType::Unknown, "{n:?} {ty:?}");
        }
        if cfg!(any(target_os = "linux", target_os = "macos")) {
            assert_eq!(
                path_of_dir(dir.as_fd()).map(|p| p.canonicalize().unwrap()),
                Some(t.path().canonicalize().unwrap())
            );
        }
    }
}
