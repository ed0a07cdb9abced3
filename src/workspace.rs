//! The workspace: finding it, creating and opening `.agent-runtime/`, and the
//! entry points the CLI calls (checkpoints, reading the ledger, verify).
//!
//! `.agent-runtime/` is opened once per process with `O_DIRECTORY | O_NOFOLLOW`
//! and checked (a directory, owned by us, mode 0700); everything under it is then
//! reached relative to that handle, so swapping it for a symlink later cannot
//! redirect ckpt's writes (RELIABILITY.md S16).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::FileType;

use crate::blob_store::BlobStore;
use crate::checkpoint::{self, CheckpointError, CheckpointFile};
use crate::durable::{Durable, Fsync, Keep};
use crate::fs_util::{self, Confined, FsError};
use crate::git::UserDirs;
use crate::ids::Clock;
use crate::ledger::{Ledger, LedgerError, LedgerRead};
use crate::paths::{PathError, RUNTIME_DIR, RelPath};
use crate::record::{Body, CheckpointRecord, Draft, Record};

pub use crate::config::DEFAULT_CONFIG;
/// The `.gitignore` that keeps runtime data out of the user's `git status`.
pub const RUNTIME_GITIGNORE: &str = "*\n";

/// What went wrong at the workspace level.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// `.agent-runtime/` does not exist.
    #[error("no ckpt data in `{0}` (no .agent-runtime/ directory); run `ckpt init` there first")]
    NotInitialized(PathBuf),
    /// The workspace directory cannot be opened.
    #[error("cannot open the workspace `{path}`: {source}")]
    Root {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// `.agent-runtime` is a symlink, not ours, or not a directory.
    #[error("E_RUNTIME_UNSAFE: `{0}` {1}; refusing to use it")]
    RuntimeUnsafe(PathBuf, String),
    /// An I/O failure.
    #[error(transparent)]
    Io(#[from] FsError),
    /// A ledger failure.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A blob failure.
    #[error(transparent)]
    Blob(#[from] crate::blob_store::BlobError),
    /// A checkpoint failure.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A refused path.
    #[error(transparent)]
    Path(#[from] PathError),
    /// An id that names nothing in the ledger.
    #[error(
        "`{0}` is not a checkpoint, call, patch, action or conflict id in this workspace; run `ckpt log` to see them"
    )]
    UnknownId(String),
    /// The ledger is damaged: commands that act on history stop until
    /// `ckpt repair` (the message says where and what to run).
    #[error("{0}")]
    Damaged(String),
    /// An argument is malformed: a glob, a session id, a payload too big.
    #[error("{0}")]
    Invalid(String),
    /// A selector is well formed but names nothing here: a session with no
    /// records, a subagent with no calls, a `--path` no selected change
    /// touched.
    #[error("{0}")]
    NoMatch(String),
    /// The request does not fit what the ledger says now: a conflict
    /// already settled, a call not in doubt or still running, a file that
    /// still holds conflict markers, a compensation with no command.
    #[error("{0}")]
    NotApplicable(String),
    /// The tree is past a configured limit (`max_snapshot_files`).
    #[error("{0}")]
    TooLarge(String),
    /// An external command was started and its end could not be observed:
    /// its effect is unknown (a compensation left uncertain).
    #[error("{0}")]
    Uncertain(String),
    /// A file changed while ckpt acted on it; nothing was written over it
    /// (try again when it is still).
    #[error("{0}")]
    Changing(String),
    /// What the request needs was removed by `ckpt gc` (older than what it
    /// kept).
    #[error("{0}")]
    Collected(String),
    /// `config.toml` cannot be read or parsed.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A Claude Code transcript cannot be read or forked.
    #[error(transparent)]
    Transcript(#[from] crate::claude_transcript::TranscriptError),
}

/// Options for opening a workspace.
#[derive(Debug, Default)]
pub struct OpenOptions {
    /// The clock and id source (fixed in tests).
    pub clock: Clock,
    /// Whether anything is synced (tests turn it off: [`Fsync::Off`]).
    pub fsync: Fsync,
    /// Where the user's git configuration is (global excludes, attributes);
    /// the binary passes [`UserDirs::from_env`].
    pub user_dirs: UserDirs,
    /// Only the portable way where a Linux-only call has one (today: every
    /// confined open walks one component at a time with `O_NOFOLLOW`
    /// instead of using `openat2`). Tests run confinement both ways; the
    /// binary sets it from `CKPT_TEST_PORTABLE=1`.
    pub portable: bool,
    /// The process exits as soon as its command is done (the `ckpt` binary
    /// says so; a long-lived library user never does): large tables are
    /// then left for the exit to reclaim instead of being freed one
    /// allocation at a time (~12 ms for a walk and a snapshot of 100,000
    /// files).
    pub short_lived: bool,
    /// Called once, before the workspace builds large tables (a snapshot
    /// of 1 MiB or more, about 13,000 files; a first walk, whose size is
    /// not known): the binary advises its heap for transparent huge pages
    /// then. On a small tree a hook touches less memory than a huge page's
    /// first touch costs, and a rollback builds no such tables: the
    /// allocator alone cannot tell them apart from any 1 MiB block (a
    /// ledger read).
    pub on_big_tables: Option<fn()>,
    /// Told how far long operations have got (reading a big ledger,
    /// `verify`'s content checks, `gc`); the binary draws it on a terminal.
    pub progress: Option<crate::progress::Sink>,
    /// Plans read the whole ledger, never its reduced view
    /// (`index/view.bin`, see [`crate::ledger_view`]); the binary sets it
    /// from `CKPT_TEST_NO_VIEW`, for tests to compare the two.
    pub whole_reads: bool,
}

/// What `ckpt init` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitStats {
    /// True when `.agent-runtime/` was created now.
    pub created: bool,
    /// True when `config.toml` was written now.
    pub wrote_config: bool,
}

/// An open workspace.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    canonical_root: Option<PathBuf>,
    confined: Confined,
    rt: Arc<OwnedFd>,
    clock: Arc<Clock>,
    ledger: Ledger,
    blobs: BlobStore,
    /// What was written and is not durable yet.
    durable: Arc<Durable>,
    /// Where the user's git configuration is.
    user_dirs: UserDirs,
    /// The git repositories it lies in, opened on first use.
    repos: Arc<crate::git::Repos>,
    /// [`OpenOptions::short_lived`].
    short_lived: bool,
    /// [`OpenOptions::on_big_tables`]; `None` once large tables were
    /// announced (whether a function was given or not).
    on_big_tables: std::sync::Mutex<Option<BigTablesHook>>,
    /// [`OpenOptions::progress`].
    progress: Option<crate::progress::Sink>,
    /// [`OpenOptions::whole_reads`].
    whole_reads: bool,
}

impl Drop for Workspace {
    /// What is still waiting is synced (a command that wrote no record after
    /// its last content); commands call [`Workspace::sync_all`] to hear of
    /// an error, this is the backstop.
    fn drop(&mut self) {
        let _ = self.durable.all();
    }
}

/// How [`find`] found a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundBy {
    /// The top level of the git work tree `cwd` is in, not set up yet.
    Git,
    /// A directory that holds `.agent-runtime/`: the git top level, one
    /// nearer to `cwd`, or the superproject of the repository `cwd` is in.
    Runtime,
}

/// Finds the workspace for a command started in `cwd`: the git top level
/// when inside a git work tree, unless a directory that holds
/// `.agent-runtime/` is nearer (`ckpt init` run in a subdirectory), or that
/// top level has none and a git top level above it does (a submodule or a
/// repository kept inside an initialised one). `None` when `cwd` is in no
/// git work tree and below no `.agent-runtime/`.
pub fn find(cwd: &Path) -> Option<(PathBuf, FoundBy)> {
    // A plain walk up (`.git` is a directory, or a file for worktrees and
    // submodules): hooks run this on every tool call, and opening the
    // repository with libgit2 (config files, init) cost milliseconds.
    let is_git = |d: &Path| std::fs::symlink_metadata(d.join(".git")).is_ok();
    let is_init = |d: &Path| d.join(RUNTIME_DIR).is_dir();
    let mut git_top: Option<&Path> = None;
    for dir in cwd.ancestors() {
        let init = is_init(dir);
        match git_top {
            None if init => return Some((dir.to_path_buf(), FoundBy::Runtime)),
            None if is_git(dir) => git_top = Some(dir),
            None => {}
            // Above the repository: only an initialised superproject counts.
            Some(_) if init && is_git(dir) => {
                return Some((dir.to_path_buf(), FoundBy::Runtime));
            }
            Some(_) => {}
        }
    }
    git_top.map(|d| (d.to_path_buf(), FoundBy::Git))
}

/// [`find`], else `cwd` itself (where `ckpt init` would set ckpt up).
pub fn discover(cwd: &Path) -> PathBuf {
    find(cwd).map_or_else(|| cwd.to_path_buf(), |(root, _)| root)
}

/// Whether ckpt is set up in `root` (it holds `.agent-runtime/`).
pub fn is_initialized(root: &Path) -> bool {
    root.join(RUNTIME_DIR).is_dir()
}

fn open_runtime(root: &Path, confined: &Confined) -> Result<OwnedFd, WorkspaceError> {
    let rt_path = root.join(RUNTIME_DIR);
    let fd = match fs_util::open_dir(confined.root(), RUNTIME_DIR) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(WorkspaceError::NotInitialized(root.to_path_buf()));
        }
        Err(e)
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
                || e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) =>
        {
            return Err(WorkspaceError::RuntimeUnsafe(
                rt_path,
                "is a symlink or not a directory".into(),
            ));
        }
        Err(e) => return Err(FsError::new("open", rt_path.display().to_string(), e).into()),
    };
    let st = crate::sys::fstat(&fd)
        .map_err(|e| FsError::new("stat", rt_path.display().to_string(), e.into()))?;
    if st.file_type() != FileType::Directory {
        return Err(WorkspaceError::RuntimeUnsafe(
            rt_path,
            "is not a directory".into(),
        ));
    }
    if st.uid != rustix::process::geteuid().as_raw() {
        return Err(WorkspaceError::RuntimeUnsafe(
            rt_path,
            "belongs to another user".into(),
        ));
    }
    if st.mode & 0o777 != 0o700 {
        // Ours, but readable by others (e.g. fresh from a git checkout): make it private.
        rustix::fs::fchmod(&fd, crate::sys::mode(0o700))
            .map_err(|e| FsError::new("chmod", rt_path.display().to_string(), e.into()))?;
    }
    Ok(fd)
}

impl Workspace {
    /// Creates `.agent-runtime/` (mode 0700) with its `.gitignore` and default
    /// `config.toml` if missing, then opens the workspace. Running it twice
    /// changes nothing. Everything it created is durable when it returns.
    pub fn init(root: &Path, opts: OpenOptions) -> Result<(Workspace, InitStats), WorkspaceError> {
        let durable = Arc::new(Durable::new(opts.fsync));
        let confined =
            Confined::open(root, durable.clone()).map_err(|source| WorkspaceError::Root {
                path: root.to_path_buf(),
                source,
            })?;
        let (_, created) =
            fs_util::open_or_create_private_dir(confined.root(), RUNTIME_DIR, &durable).map_err(
                |e| FsError::new("create", root.join(RUNTIME_DIR).display().to_string(), e),
            )?;
        drop(confined);
        let ws = Workspace::open_with(root, opts, durable)?;
        let rt = ws.rt.as_fd();
        let d = ws.durable();
        let mut wrote_config = false;
        for (name, content) in [
            (".gitignore", RUNTIME_GITIGNORE),
            ("config.toml", DEFAULT_CONFIG),
        ] {
            if fs_util::entry_at(rt, name.as_ref()).map_err(|e| ws.rt_err("stat", name, e))?
                != fs_util::EntryKind::Absent
            {
                continue;
            }
            match fs_util::write_atomic(
                rt,
                name.as_ref(),
                content.as_bytes(),
                0o600,
                true,
                Keep::Named(d),
            ) {
                Ok(()) => wrote_config |= name == "config.toml",
                // Written meanwhile by another process: theirs stays.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(ws.rt_err("write", name, e)),
            }
        }
        for dir in ["tmp", "checkpoints", "artifacts", "conflicts"] {
            fs_util::open_or_create_private_dir(rt, dir, d)
                .map_err(|e| ws.rt_err("create", dir, e))?;
        }
        // What the first hook would otherwise create on its own: the ledger
        // (empty) and the directories of open calls' state and of the walk's
        // snapshots.
        if crate::ledger::create_empty(rt)
            .map_err(|e| ws.rt_err("create", crate::ledger::LEDGER_FILE, e))?
        {
            d.content_dir(rt)
                .map_err(|e| ws.rt_err("sync", ".agent-runtime", e))?;
        }
        for dir in ["state", "index"] {
            let (fd, _) = fs_util::open_or_create_private_dir(rt, dir, d)
                .map_err(|e| ws.rt_err("create", dir, e))?;
            fs_util::open_or_create_private_dir(fd.as_fd(), "calls", d)
                .map_err(|e| ws.rt_err("create", &format!("{dir}/calls"), e))?;
        }
        let art =
            fs_util::open_dir(rt, "artifacts").map_err(|e| ws.rt_err("open", "artifacts", e))?;
        for dir in ["blobs", "patches", "outputs"] {
            fs_util::open_or_create_private_dir(art.as_fd(), dir, d)
                .map_err(|e| ws.rt_err("create", dir, e))?;
        }
        // One wait for all of it (~1 ms per step on this project's disks).
        d.all()
            .map_err(|e| ws.rt_err("sync", "the new directories", e))?;
        Ok((
            ws,
            InitStats {
                created,
                wrote_config,
            },
        ))
    }

    /// Opens an existing workspace (fails with a hint when `ckpt init` is needed).
    pub fn open(root: &Path, opts: OpenOptions) -> Result<Workspace, WorkspaceError> {
        let durable = Arc::new(Durable::new(opts.fsync));
        Self::open_with(root, opts, durable)
    }

    fn open_with(
        root: &Path,
        opts: OpenOptions,
        durable: Arc<Durable>,
    ) -> Result<Workspace, WorkspaceError> {
        let OpenOptions {
            clock,
            user_dirs,
            portable,
            short_lived,
            on_big_tables,
            progress,
            whole_reads,
            ..
        } = opts;
        let mut confined =
            Confined::open(root, durable.clone()).map_err(|source| WorkspaceError::Root {
                path: root.to_path_buf(),
                source,
            })?;
        if portable {
            confined = confined.portable();
        }
        let rt = Arc::new(open_runtime(root, &confined)?);
        let clock = Arc::new(clock);
        let canonical_root = std::fs::canonicalize(root).ok().filter(|c| c != root);
        let repos = Arc::new(crate::git::Repos::new(root));
        Ok(Workspace {
            root: root.to_path_buf(),
            canonical_root,
            confined,
            ledger: Ledger::new(rt.clone(), clock.clone(), durable.clone()).with_progress(progress),
            blobs: BlobStore::new(rt.clone(), durable.clone()).with_git(repos.clone()),
            rt,
            clock,
            durable,
            user_dirs,
            repos,
            short_lived,
            on_big_tables: std::sync::Mutex::new(Some(on_big_tables)),
            progress,
            whole_reads,
        })
    }

    fn rt_err(&self, op: &'static str, name: &str, e: io::Error) -> WorkspaceError {
        FsError::new(
            op,
            format!("{}/{RUNTIME_DIR}/{name}", self.root.display()),
            e,
        )
        .into()
    }

    /// The workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the user's git configuration is (given at open).
    pub fn user_dirs(&self) -> &UserDirs {
        &self.user_dirs
    }

    /// Says that tables of about `bytes` are about to be built: from 1 MiB
    /// on, once, a phase mark and [`OpenOptions::on_big_tables`] if given.
    pub(crate) fn big_tables_ahead(&self, bytes: u64) {
        const BIG_TABLES_FROM: u64 = 1 << 20;
        if bytes >= BIG_TABLES_FROM {
            let first = self
                .on_big_tables
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(prepare) = first {
                crate::timing("large tables ahead");
                if let Some(prepare) = prepare {
                    prepare();
                }
            }
        }
    }

    /// Tells [`OpenOptions::progress`] that `done` of `total` items of
    /// `what` are done: every 256th item and the last (`done == total`, to
    /// be called once the loop is over).
    pub(crate) fn progress_items(&self, what: &str, done: usize, total: usize) {
        if done.is_multiple_of(256) || done >= total {
            crate::progress::report(
                self.progress,
                what,
                done as u64,
                total as u64,
                crate::progress::Unit::Items,
            );
        }
    }

    /// Drops `v`, or in a [`short_lived`](OpenOptions::short_lived) process
    /// leaves it to the exit.
    pub(crate) fn dispose<T>(&self, v: T) {
        if self.short_lived {
            std::mem::forget(v);
        } else {
            drop(v);
        }
    }

    /// The git repositories the workspace lies in (read only, opened on
    /// first use and kept while it is open).
    pub fn repos(&self) -> &crate::git::Repos {
        &self.repos
    }

    /// Where the syncs of what this workspace writes wait until the next
    /// ledger record ([`crate::durable`]).
    pub fn durable(&self) -> &Durable {
        &self.durable
    }

    /// Makes everything written so far durable, including what no record
    /// names yet (a command calls it before it reports done).
    pub fn sync_all(&self) -> Result<(), WorkspaceError> {
        self.durable.all().map_err(|e| {
            FsError::new("sync", format!("{}/{RUNTIME_DIR}", self.root.display()), e).into()
        })
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The blob store.
    pub fn blobs(&self) -> &BlobStore {
        &self.blobs
    }

    /// The clock and id source.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The workspace-confined file reader and writer.
    pub fn files(&self) -> &Confined {
        &self.confined
    }

    /// The `.agent-runtime/` directory handle.
    pub fn runtime_dir(&self) -> &Arc<OwnedFd> {
        &self.rt
    }

    /// `.agent-runtime/state/` (the ledger's caches, the action lock, the
    /// pending-action marker), created private when missing.
    pub(crate) fn state_dir(&self) -> Result<OwnedFd, WorkspaceError> {
        let (fd, _) = fs_util::open_or_create_private_dir(self.rt.as_fd(), "state", self.durable())
            .map_err(|e| FsError::new("open", ".agent-runtime/state", e))?;
        Ok(fd)
    }

    /// Turns a path from a payload or the command line into a checked `RelPath`.
    pub fn rel_path(&self, input: &[u8], base: Option<&RelPath>) -> Result<RelPath, PathError> {
        let mut roots: Vec<&Path> = vec![&self.root];
        if let Some(c) = &self.canonical_root {
            roots.push(c);
        }
        RelPath::from_input(input, &roots, base)
    }

    /// Whether plans read the whole ledger ([`OpenOptions::whole_reads`]).
    pub fn whole_reads(&self) -> bool {
        self.whole_reads
    }

    /// A cache file of `index/`: `None` when missing, unreadable or over
    /// `max` bytes.
    pub(crate) fn read_index_file(&self, name: &str, max: u64) -> Option<Vec<u8>> {
        let dir = crate::fs_util::open_dir(self.runtime_dir().as_fd(), "index").ok()?;
        let (mut f, size) =
            crate::fs_util::open_regular_at_sized(dir.as_fd(), std::ffi::OsStr::new(name)).ok()?;
        if size > max {
            return None;
        }
        crate::fs_util::read_to_end_sized(&mut f, size).ok()
    }

    /// Writes a cache file of `index/` atomically, never synced: losing it
    /// costs only a longer read next time, so a failure is ignored.
    pub(crate) fn write_index_file(&self, name: &str, bytes: &[u8]) {
        let Ok((dir, _)) = crate::fs_util::open_or_create_private_dir(
            self.runtime_dir().as_fd(),
            "index",
            self.durable(),
        ) else {
            return;
        };
        let _ = crate::fs_util::write_atomic(
            dir.as_fd(),
            std::ffi::OsStr::new(name),
            bytes,
            0o600,
            false,
            crate::durable::Keep::Cache,
        );
    }

    /// Reads the whole ledger (tolerating a torn tail).
    pub fn read_ledger(&self) -> Result<LedgerRead, WorkspaceError> {
        let read = self.ledger.read()?;
        // Damage seen here stops every writer until `ckpt repair`.
        self.ledger.note_damage(&read);
        Ok(read)
    }

    /// Makes a checkpoint: writes `checkpoints/<id>.json` durably, then appends
    /// the `checkpoint` record, both under the ledger lock so `upto_seq` is exact.
    pub fn checkpoint(&self, opts: CheckpointOptions) -> Result<CheckpointRecord, WorkspaceError> {
        let CheckpointOptions {
            label,
            session,
            session_leaf,
            extra,
        } = opts;
        // A label is free text (often a prompt's first line): the file and the
        // record get the same redacted text (T24).
        let label = label.map(|l| crate::redact::redact_str(&l).into_owned());
        // git status can take a while on big trees: read it before taking the lock.
        let git = crate::git::state(&self.root);
        let id = self.clock.new_id("ckpt_");
        let mut lock = self.ledger.lock()?;
        let tail = lock.tail().clone();
        let file = CheckpointFile {
            v: 1,
            checkpoint: id.clone(),
            label: label.clone(),
            created: self.clock.now_rfc3339(),
            session: session.clone(),
            session_leaf: session_leaf.clone(),
            upto_seq: tail.seq,
            upto_hash: tail.hash.clone(),
            git: git.clone(),
            extra,
            checksum: None,
        };
        let file_ref = checkpoint::write(&self.rt, &self.durable, &file)?;
        crate::failpoint::hit("checkpoint.before_record")
            .map_err(|e| self.rt_err("record checkpoint", &file_ref, e))?;
        let rec = CheckpointRecord {
            checkpoint: id,
            label,
            upto_seq: tail.seq,
            upto_hash: tail.hash,
            session_leaf,
            git,
            file_ref,
        };
        lock.append(&[Draft::in_session(session, Body::Checkpoint(rec.clone()))])?;
        Ok(rec)
    }

    /// Lists checkpoints recorded in the ledger, oldest first.
    pub fn checkpoints(&self) -> Result<Vec<(Record, CheckpointRecord)>, WorkspaceError> {
        let read = self.ledger.read()?;
        Ok(read
            .records
            .into_iter()
            .filter_map(|r| match &r.body {
                Body::Checkpoint(c) => {
                    let c = c.clone();
                    Some((r, c))
                }
                _ => None,
            })
            .collect())
    }

    /// Reads and checks a checkpoint's file.
    pub fn checkpoint_file(&self, id: &str) -> Result<CheckpointFile, WorkspaceError> {
        Ok(checkpoint::read(&self.rt, id)?)
    }

    /// Removes temp files older than an hour that crashed writers left in
    /// `tmp/`, what older versions left in `tmp/trash/`, and ckpt's temp names (`.ckpt-tmp-*`) as old in the runtime's
    /// own directories (a write interrupted between its temp file and its
    /// rename). Returns how many were removed.
    pub fn sweep_tmp(&self) -> usize {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let rt = self.rt.as_fd();
        let mut n = 0;
        if let Ok(tmp) = fs_util::open_dir(rt, "tmp") {
            n += sweep_old(&tmp, now, |name| !name.starts_with(b"."));
        }
        let ours = |name: &[u8]| name.starts_with(b".ckpt-tmp-");
        n += sweep_old(&self.rt, now, ours);
        // `tmp/trash/`: files older versions of ckpt replaced during a
        // rollback, kept there to be freed later. Every byte of them is in
        // the blob store; all of it goes, whatever its age.
        if let Ok(trash) = fs_util::open_dir(rt, "tmp/trash") {
            n += sweep_old(&trash, i64::MAX, |_| true);
            drop(trash);
            let _ = rustix::fs::unlinkat(rt, "tmp/trash", rustix::fs::AtFlags::REMOVEDIR);
        }
        for d in [
            "state",
            "state/calls",
            "index",
            "index/calls",
            "checkpoints",
            "conflicts",
        ] {
            if let Ok(fd) = fs_util::open_dir(rt, d) {
                n += sweep_old(&fd, now, ours);
            }
        }
        n
    }
}

/// Removes the entries of `dir` that `pick` names and that were last
/// changed over an hour before `now` (seconds); returns how many.
fn sweep_old(dir: &OwnedFd, now: i64, pick: impl Fn(&[u8]) -> bool) -> usize {
    let Ok(mut it) = rustix::fs::Dir::read_from(dir) else {
        return 0;
    };
    let mut n = 0;
    while let Some(Ok(ent)) = it.next() {
        let name = ent.file_name().to_owned();
        if !pick(name.to_bytes()) {
            continue;
        }
        if let Ok(st) = crate::sys::lstat_at(dir, name.as_c_str())
            && st.file_type() != FileType::Directory
            && now - st.mtime.0 > 3600
            && rustix::fs::unlinkat(dir, name.as_c_str(), rustix::fs::AtFlags::empty()).is_ok()
        {
            n += 1;
        }
    }
    n
}

/// What [`OpenOptions::on_big_tables`] holds.
type BigTablesHook = Option<fn()>;

/// Options for [`Workspace::checkpoint`].
#[derive(Debug, Default, Clone)]
pub struct CheckpointOptions {
    /// A label (`-m`).
    pub label: Option<String>,
    /// The session the checkpoint is for.
    pub session: Option<String>,
    /// That session's leaf entry.
    pub session_leaf: Option<String>,
    /// Extra data to keep in the checkpoint file.
    pub extra: Option<serde_json::Value>,
}

#[cfg(test)]
mod sweep_tests {
    use super::*;

    /// `sweep_tmp` removes ckpt's own temp names left for over an hour in the
    /// runtime's directories, and nothing else.
    #[test]
    fn old_temp_names_in_the_runtime_are_swept_and_nothing_else() {
        let t = tempfile::tempdir().unwrap();
        let (ws, _) = Workspace::init(t.path(), Default::default()).unwrap();
        let rt = t.path().join(RUNTIME_DIR);
        let age = |p: &Path, secs_ago: i64| {
            let f = std::fs::File::options().write(true).open(p).unwrap();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64;
            let then = rustix::fs::Timespec {
                tv_sec: now - secs_ago,
                tv_nsec: 0,
            };
            rustix::fs::futimens(
                &f,
                &rustix::fs::Timestamps {
                    last_access: then,
                    last_modification: then,
                },
            )
            .unwrap();
        };
        let old = [
            rt.join(".ckpt-tmp-1-2-3-config"),
            rt.join("state/calls/.ckpt-tmp-1-2-4-call"),
            rt.join("index/.ckpt-tmp-1-2-5-snapshot"),
            rt.join("tmp/blob-in-flight"),
        ];
        let kept = [
            rt.join(".ckpt-tmp-1-2-6-fresh"),
            rt.join("state/notes-of-the-user"),
            rt.join("ledger.jsonl"),
        ];
        for p in old.iter().chain(&kept) {
            std::fs::write(p, b"x").unwrap();
        }
        for p in old.iter().chain(&kept[1..]) {
            age(p, 7200);
        }
        assert_eq!(ws.sweep_tmp(), old.len());
        for p in &old {
            assert!(!p.exists(), "{} is still there", p.display());
        }
        for p in &kept {
            assert!(p.exists(), "{} was removed", p.display());
        }
    }
}
