//! Writing a user file back (RELIABILITY B4): the one place where ckpt replaces
//! a file in the workspace on the user's behalf (rollback, resolve).
//!
//! For each file: [`prepare`] writes the new content under a temp name in the
//! file's own directory (opened beneath the workspace root, never through a
//! symlink) and hands its data to the workspace's durable set as unnamed
//! content (the caller makes it durable, with the plan's append or
//! [`Durable::all`](crate::durable::Durable::all), before any rename); then [`commit`] checks the file against the state the
//! decision was made on (its content hash and mode — a compare-and-swap by
//! hand, as POSIX has none), re-`stat`s it and renames the temp file over the
//! name (or unlinks it, or renames with `RENAME_NOREPLACE` when the path must
//! still be free), and hands the directory to the durable set (synced
//! before the next record). If the file moved at any of those steps, nothing is
//! overwritten and the caller hears [`Written::Raced`]. The window left is one
//! `fstatat` + `rename`: an editor writing inside it can still be overwritten,
//! and that is documented in ARCHITECTURE.md.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType};
use serde::{Deserialize, Serialize};

use crate::durable::Durable;
use crate::fs_util::{self, FsError};
use crate::hash::{ContentHash, Hasher};
use crate::paths::RelPath;
use crate::record::{SYMLINK_MODE, file_mode_string};
use crate::workspace::{Workspace, WorkspaceError};

/// A state of one path, as a plan names it: its content hash (`None`: absent),
/// its git-style mode, and for regular files the exact permission bits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathState {
    /// Content hash; `None` when the path is absent.
    pub hash: Option<ContentHash>,
    /// `100644`, `100755`, `120000`; `None` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Permission bits of a regular file (`0o640` …), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perm: Option<u32>,
}

impl PathState {
    /// Nothing at the path.
    pub fn absent() -> PathState {
        PathState {
            hash: None,
            mode: None,
            perm: None,
        }
    }

    /// Whether this is a symlink.
    pub fn is_symlink(&self) -> bool {
        self.mode.as_deref() == Some(SYMLINK_MODE)
    }

    /// Whether `other` has the same kind, content and git mode.
    pub fn same(&self, other: &PathState) -> bool {
        self.hash == other.hash && self.mode == other.mode
    }
}

/// What is at a path now, observed without following symlinks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The state (`hash: None, mode: Some("dir"|"special")` for what is not a file).
    pub state: PathState,
    /// The file's bytes, when it is a regular file or symlink no larger than
    /// the `keep_up_to` asked for.
    pub bytes: Option<Vec<u8>>,
    stat: Option<StatKey>,
}

impl Observed {
    /// What could not be read: treated as something other than a file, so
    /// nothing is ever written over it.
    pub(crate) fn other_kind() -> Observed {
        Observed {
            state: PathState {
                hash: None,
                mode: Some("unreadable".to_string()),
                perm: None,
            },
            bytes: None,
            stat: None,
        }
    }

    /// Whether the path holds something that is neither a file nor a symlink.
    pub fn is_other(&self) -> bool {
        self.state.hash.is_none() && self.state.mode.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn key_of(st: &crate::sys::Stat) -> StatKey {
    StatKey {
        dev: st.dev,
        ino: st.ino,
        size: st.size,
        mtime: st.mtime,
        ctime: st.ctime,
    }
}

fn io_err(op: &'static str, rel: &RelPath, e: impl Into<io::Error>) -> WorkspaceError {
    WorkspaceError::Io(FsError::new(op, rel.display().to_string(), e.into()))
}

/// Observes `name` in `dir`: kind, content hash, mode; keeps the bytes of
/// files up to `keep_up_to` bytes.
fn observe_at(dir: BorrowedFd<'_>, name: &OsStr, keep_up_to: u64) -> io::Result<Observed> {
    let st = match crate::sys::lstat_at(dir, name) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::NOTDIR) => {
            return Ok(Observed {
                state: PathState::absent(),
                bytes: None,
                stat: None,
            });
        }
        Err(e) => return Err(e.into()),
    };
    match st.file_type() {
        FileType::RegularFile => {
            let f = fs_util::open_regular_at(dir, name)?;
            let fst = crate::sys::fstat(&f)?;
            let (hash, bytes) = hash_file(f, fst.size, keep_up_to)?;
            let perm = fst.perm();
            Ok(Observed {
                state: PathState {
                    hash: Some(hash),
                    mode: Some(file_mode_string(perm)),
                    perm: Some(perm),
                },
                bytes,
                stat: Some(key_of(&fst)),
            })
        }
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(dir, name, Vec::new())?.into_bytes();
            Ok(Observed {
                state: PathState {
                    hash: Some(ContentHash::of(&target)),
                    mode: Some(SYMLINK_MODE.to_string()),
                    perm: None,
                },
                bytes: Some(target),
                stat: Some(key_of(&st)),
            })
        }
        t => Ok(Observed {
            state: PathState {
                hash: None,
                mode: Some(
                    if t == FileType::Directory {
                        "dir"
                    } else {
                        "special"
                    }
                    .to_string(),
                ),
                perm: None,
            },
            bytes: None,
            stat: Some(key_of(&st)),
        }),
    }
}

fn hash_file(
    mut f: File,
    size: u64,
    keep_up_to: u64,
) -> io::Result<(ContentHash, Option<Vec<u8>>)> {
    use std::io::Read;
    if size <= keep_up_to {
        let mut v = Vec::with_capacity(size as usize);
        f.read_to_end(&mut v)?;
        return Ok((ContentHash::of(&v), Some(v)));
    }
    let mut h = Hasher::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok((h.finish(), None))
}

/// Observes `rel` in the workspace (read-only: nothing is stored).
pub fn observe(ws: &Workspace, rel: &RelPath, keep_up_to: u64) -> Result<Observed, WorkspaceError> {
    let (parent, name) = rel.split_parent();
    let dir = match ws.files().open_dir_beneath(parent.unwrap_or(b"")) {
        Ok(d) => d,
        Err(e)
            if e.kind() == io::ErrorKind::NotFound
                || e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) =>
        {
            return Ok(Observed {
                state: PathState::absent(),
                bytes: None,
                stat: None,
            });
        }
        Err(e) => return Err(io_err("inspect", rel, e)),
    };
    observe_at(dir.as_fd(), OsStr::from_bytes(name), keep_up_to).map_err(|e| io_err("read", rel, e))
}

/// Puts what `obs` saw at `rel` into the blob store (from the bytes it kept,
/// else by reading the file again) unless it is there already. Returns the
/// hash stored, which differs from `obs`'s when the file changed since.
pub fn store_observed(
    ws: &Workspace,
    rel: &RelPath,
    obs: &Observed,
) -> Result<Option<ContentHash>, WorkspaceError> {
    let Some(h) = obs.state.hash else {
        return Ok(None);
    };
    // The only copy of bytes about to be overwritten: found sound (and synced
    // with what is stored), else stored, before the overwrite.
    if ws.blobs().keeps(&h, obs.bytes.as_deref())? {
        return Ok(Some(h));
    }
    Ok(Some(match &obs.bytes {
        Some(b) => ws.blobs().put_bytes(b)?,
        None => crate::call::snapshot(ws, rel)?.hash().unwrap_or(h),
    }))
}

/// How a write-back ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// The path now holds the target.
    Done,
    /// The path already held the target; nothing was written.
    AlreadyThere,
    /// The path held neither the expected state nor the target (someone
    /// changed it): nothing was written. Carries what was there.
    Raced(PathState),
}

/// A write-back whose new content sits, written (and synced unless a batch
/// defers it), under a temp name in the target's directory.
pub struct Prepared {
    rel: RelPath,
    dir: OwnedFd,
    tmp: Option<String>,
}

impl Drop for Prepared {
    /// A temp file never renamed into place goes with it: when the commit
    /// did not write, and when an error elsewhere stopped the action before
    /// its commit (a crash leaves it to the next command's sweep).
    fn drop(&mut self) {
        if let Some(t) = &self.tmp {
            let _ = rustix::fs::unlinkat(&self.dir, t.as_str(), AtFlags::empty());
        }
    }
}

/// Step 1 of a write-back: opens (creating, never through a symlink) the
/// directory of `rel` and writes `target`'s content there under a temp name,
/// from the blob store, re-hashed on the way. `None` when `target` is absent
/// and so is the directory (nothing to do).
pub fn prepare(
    ws: &Workspace,
    rel: &RelPath,
    target: &PathState,
) -> Result<Option<Prepared>, WorkspaceError> {
    let (parent, _) = rel.split_parent();
    let dir: OwnedFd = if target.hash.is_some() {
        ws.files()
            .create_parents(rel)
            .map_err(|e| io_err("create the parent directories of", rel, e))?
    } else {
        match ws.files().open_dir_beneath(parent.unwrap_or(b"")) {
            Ok(d) => d,
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(io_err("open the directory of", rel, e)),
        }
    };
    let tmp = target.hash.map(|_| fs_util::temp_name(".ckpt-tmp-"));
    let p = Prepared {
        rel: rel.clone(),
        dir,
        tmp,
    };
    if let Some(t) = &p.tmp
        && let Err(e) = write_temp(ws, p.dir.as_fd(), t, target)
    {
        return Err(match e {
            Prep::Io(e) => io_err("write a temp file for", rel, e),
            Prep::Blob(b) => WorkspaceError::Blob(b),
        });
    }
    Ok(Some(p))
}

/// Removes the directories on the way to `rel` (deepest first, never the
/// workspace root) that are empty and were born at or after `since_ms`
/// (Unix ms; their birth time, less the coarse clock's lag): the
/// directories the agent made for a file a rollback just removed. Stops at
/// the first one that is not empty, older, or whose birth time this file
/// system does not keep. Returns those removed.
pub fn remove_new_empty_dirs(ws: &Workspace, rel: &RelPath, since_ms: u64) -> Vec<RelPath> {
    use rustix::fs::AtFlags;
    // The file system's clock is the kernel's coarse one, up to a tick (4 ms
    // at HZ=250, measured here) behind the system clock that dates the call.
    // A directory made in a call's first tick at HZ=100 stays (safe side).
    const SLACK_MS: u64 = 5;
    let mut removed = Vec::new();
    let mut cur = rel.split_parent().0;
    while let Some(dir) = cur {
        let (up, name) = match dir.iter().rposition(|&b| b == b'/') {
            Some(i) => (Some(&dir[..i]), &dir[i + 1..]),
            None => (None, dir),
        };
        let Ok(parent) = ws.files().open_dir_beneath(up.unwrap_or(b"")) else {
            break;
        };
        let Ok(name) = std::ffi::CString::new(name) else {
            break;
        };
        let Some((is_dir, born_ms)) = crate::sys::birth_ms(parent.as_fd(), name.as_c_str()) else {
            break;
        };
        if !is_dir || born_ms + SLACK_MS < since_ms {
            break;
        }
        if rustix::fs::unlinkat(&parent, name.as_c_str(), AtFlags::REMOVEDIR).is_err() {
            break;
        }
        if let Ok(r) = RelPath::from_ledger(dir) {
            removed.push(r);
        }
        cur = up;
    }
    removed
}

/// Whether [`prepare`] and [`commit`] could write `rel` now: the nearest
/// existing directory on its way must let this process create and remove
/// names (a dry run asks, so that it says what the real run would do).
pub fn check_writable(ws: &Workspace, rel: &RelPath) -> Result<(), WorkspaceError> {
    let (mut parent, _) = rel.split_parent();
    loop {
        let here = parent.unwrap_or(b"");
        match ws.files().open_dir_beneath(here) {
            Ok(d) => {
                return rustix::fs::accessat(
                    &d,
                    ".",
                    rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
                    rustix::fs::AtFlags::empty(),
                )
                .map_err(|e| {
                    io_err(
                        "write into the directory of",
                        rel,
                        io::Error::from_raw_os_error(e.raw_os_error()),
                    )
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && !here.is_empty() => {
                parent = here.iter().rposition(|&b| b == b'/').map(|i| &here[..i]);
            }
            Err(e) => return Err(io_err("open the directory of", rel, e)),
        }
    }
}

/// Step 2: checks that the path still holds `expect` (or already holds
/// `target`), re-`stat`s it, and renames the prepared content over it (or
/// unlinks it); anything that moved is [`Written::Raced`] and nothing is
/// written. The temp file never outlives this call.
pub fn commit(
    mut p: Prepared,
    expect: &PathState,
    target: &PathState,
    durable: &Durable,
) -> Result<Written, WorkspaceError> {
    let result = commit_inner(&p, expect, target, durable);
    if matches!(result, Ok(Written::Done)) {
        // Renamed into place: nothing left for `drop` to remove.
        p.tmp = None;
    }
    result
}

fn commit_inner(
    p: &Prepared,
    expect: &PathState,
    target: &PathState,
    durable: &Durable,
) -> Result<Written, WorkspaceError> {
    let rel = &p.rel;
    let dir = &p.dir;
    let (_, name) = rel.split_parent();
    let name = OsStr::from_bytes(name);
    let now = observe_at(dir.as_fd(), name, 0).map_err(|e| io_err("read", rel, e))?;
    if now.state.same(target) && (target.perm.is_none() || now.state.perm == target.perm) {
        return Ok(Written::AlreadyThere);
    }
    if !now.state.same(expect) {
        return Ok(Written::Raced(now.state));
    }
    crate::failpoint::hit("rollback.before_rename").map_err(|e| io_err("replace", rel, e))?;
    // The last look: anything that moved since it was hashed is a race.
    let again = match crate::sys::lstat_at(dir, name) {
        Ok(st) => Some(key_of(&st)),
        Err(rustix::io::Errno::NOENT) => None,
        Err(e) => return Err(io_err("inspect", rel, e)),
    };
    if again != now.stat {
        let moved = observe_at(dir.as_fd(), name, 0).map_err(|e| io_err("read", rel, e))?;
        return Ok(Written::Raced(moved.state));
    }
    match &p.tmp {
        None => {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())
                .map_err(|e| io_err("remove", rel, e))?;
        }
        Some(tmp) if expect.hash.is_none() && !expect.is_other_kind() => {
            match crate::sys::rename_noreplace(dir.as_fd(), tmp.as_str(), dir.as_fd(), name) {
                Ok(true) => {}
                Ok(false) => {
                    let moved =
                        observe_at(dir.as_fd(), name, 0).map_err(|e| io_err("read", rel, e))?;
                    return Ok(Written::Raced(moved.state));
                }
                Err(e) => return Err(io_err("rename into place", rel, e)),
            }
        }
        Some(tmp) => {
            rustix::fs::renameat(dir, tmp.as_str(), dir, name)
                .map_err(|e| io_err("rename into place", rel, e))?;
        }
    }
    durable
        .content_dir(dir)
        .map_err(|e| io_err("sync the directory of", rel, e))?;
    Ok(Written::Done)
}

impl PathState {
    fn is_other_kind(&self) -> bool {
        self.hash.is_none() && self.mode.is_some()
    }
}

enum Prep {
    Io(io::Error),
    Blob(crate::blob_store::BlobError),
}

/// Writes the target under `tmp` in `dir` and syncs it (nothing for an absent target).
fn write_temp(
    ws: &Workspace,
    dir: BorrowedFd<'_>,
    tmp: &str,
    target: &PathState,
) -> Result<(), Prep> {
    let Some(hash) = &target.hash else {
        return Ok(());
    };
    if target.is_symlink() {
        let link = ws.blobs().get(hash).map_err(Prep::Blob)?;
        rustix::fs::symlinkat(OsStr::from_bytes(&link), dir, tmp)
            .map_err(|e| Prep::Io(e.into()))?;
        return Ok(());
    }
    let perm = target
        .perm
        .unwrap_or(crate::record::perm_of_mode(target.mode.as_deref(), None))
        & 0o777;
    let mut f = fs_util::create_excl(dir, OsStr::new(tmp), perm).map_err(Prep::Io)?;
    ws.blobs().copy_to(hash, &mut f).map_err(Prep::Blob)?;
    ws.durable().unnamed(&f).map_err(Prep::Io)?;
    Ok(())
}

/// Removes `.ckpt-tmp-*` entries a crashed write-back left in the directory of
/// `rel` (they are ckpt's own temp names, never user files). Returns how many.
pub fn sweep_temps_near(ws: &Workspace, rel: &RelPath) -> usize {
    let (parent, _) = rel.split_parent();
    let Ok(dir) = ws.files().open_dir_beneath(parent.unwrap_or(b"")) else {
        return 0;
    };
    let Ok(mut it) = rustix::fs::Dir::read_from(&dir) else {
        return 0;
    };
    let mut names = Vec::new();
    while let Some(Ok(e)) = it.next() {
        let n = e.file_name().to_bytes();
        if let Some(rest) = n.strip_prefix(b".ckpt-tmp-")
            && !writer_alive(rest)
        {
            names.push(n.to_vec());
        }
    }
    let mut removed = 0;
    for n in names {
        if rustix::fs::unlinkat(&dir, OsStr::from_bytes(&n), AtFlags::empty()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Whether the process that made a temp name (`<pid>-…`) still runs.
fn writer_alive(rest: &[u8]) -> bool {
    let pid = rest
        .split(|&b| b == b'-')
        .next()
        .and_then(|p| std::str::from_utf8(p).ok())
        .and_then(|p| p.parse::<i32>().ok())
        .and_then(rustix::process::Pid::from_raw);
    match pid {
        Some(pid) => !matches!(
            rustix::process::test_kill_process(pid),
            Err(rustix::io::Errno::SRCH)
        ),
        None => true,
    }
}
