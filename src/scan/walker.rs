//! The workspace walk behind shell capture.
//!
//! Directory-fd based: `getdents` on an open directory, `fstatat(dirfd, name,
//! AT_SYMLINK_NOFOLLOW)` per regular file and symlink, `openat(dirfd, name,
//! O_DIRECTORY | O_NOFOLLOW)` to descend; no path is resolved from the root
//! again. Directories are told apart by the type `getdents` reports (a
//! `fstatat` only when the file system reports none), so they cost no stat.
//!
//! What is skipped is exactly what the `ignore` crate's `WalkBuilder` skipped
//! with the configuration ckpt used before (`hidden(false)`,
//! `require_git(false)`, `follow_links(false)`, `parents(false)`, everything
//! else default):
//! - `.ignore`, `.gitignore` and (in a directory holding an entry named `.git`)
//!   `.git/info/exclude` rules of every directory from the root down, also
//!   outside git repositories and across nested repositories; matchers are
//!   built with the crate's own [`GitignoreBuilder`] from the files it would
//!   read, and only for directories whose listing names one of them;
//! - precedence as `ignore::dir::Ignore::matched_ignore`: the first category
//!   with a say decides, in the order `.ignore`, `.gitignore`,
//!   `.git/info/exclude`, the global excludes file; within a category the
//!   deepest directory with a matching rule decides; within a file the last
//!   matching line (a `!` line whitelists; a `dir/` line only matches
//!   directories);
//! - the global excludes file (`core.excludesFile`, else
//!   `$XDG_CONFIG_HOME/git/ignore`) matched against full paths with the
//!   process's current directory as its root, as the crate does;
//! - `config.toml` `ignore` patterns, relative to the root;
//! - never an entry named `.git` (any case), nor the top-level
//!   `.agent-runtime`; an ignored directory is not entered, so nothing below it
//!   can be un-ignored.
//!
//! With the previous walk at hand ([`Known`]), a directory whose stat data
//! (inode, mtime, ctime) and rule files are unchanged since that walk, and was
//! not modified in the tick that walk started or later, is not listed: its
//! entries cannot have changed (creating, removing or renaming an entry moves
//! the directory's mtime), so the walk `fstatat`s the files it had and descends
//! into the subdirectories it had, and no name is matched against the rules
//! again. Git's untracked cache rests on the same fact. A directory whose rule
//! files changed is listed with everything below it; a change of the
//! configuration's patterns or of the global excludes file makes the walk list
//! everything.
//!
//! Symlinks are recorded as symlinks, never followed. A directory that cannot
//! be opened or listed, and an entry that vanishes or changes type mid-walk, is
//! skipped (the next walk sees it).
//!
//! Work is a shared LIFO stack of directories (depth first, like the crate):
//! the calling thread walks alone until it has seen [`SPAWN_AFTER`] entries
//! (unless the known walk had that many),
//! then one helper joins when at least two directories are queued (2 threads
//! measured best for large trees on a 2-core machine; small trees gain nothing
//! from a helper at the hook level). Idle workers wait on a condition
//! variable, never sleep.

use std::ffi::{CStr, OsStr};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{FileType, Mode, OFlags};

use super::{Entries, Entry, FxHasher};
use crate::git::UserDirs;
use crate::par::cpus;
use crate::sys::Backend;

/// A directory as a walk saw it: what tells whether its listing can have
/// changed since.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DirStat {
    /// Inode.
    pub ino: u64,
    /// mtime in ns (moves when an entry is created, removed or renamed).
    pub mtime_ns: i64,
    /// ctime in ns.
    pub ctime_ns: i64,
    /// The rule files its listing named (`HAS_IGNORE`, …), and
    /// `UNLISTED` when it could not be listed whole.
    pub flags: u8,
    /// Fingerprint of the stat data of the rule files it adds.
    pub rules: u64,
}

/// The listing named `.ignore`.
pub const HAS_IGNORE: u8 = 1;
/// The listing named `.gitignore`.
pub const HAS_GITIGNORE: u8 = 2;
/// The listing named `.git` (its `info/exclude` applies).
pub const HAS_GIT: u8 = 4;
/// Could not be opened or listed whole: never trusted.
pub const UNLISTED: u8 = 8;
const RULE_FILES: u8 = HAS_IGNORE | HAS_GITIGNORE | HAS_GIT;

type FxBuild = std::hash::BuildHasherDefault<FxHasher>;

/// The previous walk, as the next one uses it.
pub(crate) struct Known<'p> {
    /// When the previous walk started, as the file system dates changes
    /// ([`fs_now`](super::fs_now)); directories changed at or after it are
    /// listed again.
    taken_ns: i64,
    /// [`global_sig`] of the previous walk.
    global: u64,
    dirs: std::collections::HashMap<&'p [u8], KnownDir<'p>, FxBuild>,
    /// The previous walk's files and symlinks.
    entries: &'p Entries,
}

struct KnownDir<'p> {
    stat: DirStat,
    /// Its files and symlinks: a run of indexes into the known walk's
    /// entries (a walk keeps each directory's together)...
    files: std::ops::Range<u32>,
    /// ... and any further runs (none from ckpt's own walks).
    more: Vec<std::ops::Range<u32>>,
    /// Keys of its subdirectories.
    subdirs: Vec<&'p [u8]>,
}

impl KnownDir<'_> {
    /// Indexes of its files and symlinks in the known walk.
    fn file_indexes(&self) -> impl Iterator<Item = u32> + '_ {
        self.files
            .clone()
            .chain(self.more.iter().flat_map(|r| r.clone()))
    }

    fn file_count(&self) -> usize {
        self.files.len() + self.more.iter().map(|r| r.len()).sum::<usize>()
    }
}

/// The key of the directory holding `key` (empty at the root).
pub(super) fn parent_of(key: &[u8]) -> &[u8] {
    // (A short key; and no `memchr`, whose first call costs a hook ~75 µs
    // of CPU-feature detection on a VM.)
    key.iter()
        .rposition(|&b| b == b'/')
        .map_or(&key[..0], |i| &key[..i])
}

impl<'p> Known<'p> {
    /// The previous walk's directories and entries (in walk order: an
    /// entry's index is what [`Walked::old`] names), started at `taken_ns`.
    pub(crate) fn new(
        taken_ns: i64,
        global: u64,
        dirs: impl Iterator<Item = (&'p [u8], DirStat)>,
        entries: &'p Entries,
    ) -> Known<'p> {
        let mut map: std::collections::HashMap<&'p [u8], KnownDir<'p>, FxBuild> =
            Default::default();
        for (k, stat) in dirs {
            map.insert(
                k,
                KnownDir {
                    stat,
                    files: 0..0,
                    more: Vec::new(),
                    subdirs: Vec::new(),
                },
            );
        }
        let subdirs: Vec<&'p [u8]> = map.keys().copied().filter(|k| !k.is_empty()).collect();
        for k in subdirs {
            if let Some(p) = map.get_mut(parent_of(k)) {
                p.subdirs.push(k);
            }
        }
        // Entries come grouped by directory: one lookup per run. An entry
        // whose directory has no record is never reached this way (its
        // directory is listed, and it is taken as new).
        let n = entries.len();
        let mut i = 0;
        while i < n {
            let parent = parent_of(entries.key(i));
            let mut j = i + 1;
            while j < n && parent_of(entries.key(j)) == parent {
                j += 1;
            }
            if let Some(p) = map.get_mut(parent) {
                let run = i as u32..j as u32;
                if p.files.is_empty() {
                    p.files = run;
                } else {
                    p.more.push(run);
                }
            }
            i = j;
        }
        Known {
            taken_ns,
            global,
            dirs: map,
            entries,
        }
    }

    /// Whether the listing of `k`, whose stat data is `now`, is still what
    /// it was.
    fn trusted(&self, k: &KnownDir<'_>, now: &DirStat) -> bool {
        let quiet = self.taken_ns;
        k.stat.flags & UNLISTED == 0
            && k.stat.ino == now.ino
            && k.stat.mtime_ns == now.mtime_ns
            && k.stat.ctime_ns == now.ctime_ns
            && now.mtime_ns < quiet
            && now.ctime_ns < quiet
    }
}

/// What a walk found.
#[derive(Debug, Default)]
pub(crate) struct Walked {
    /// Every regular file and symlink not ignored, with its stat data.
    pub entries: Entries,
    /// For each entry, the index of the same path in the known walk.
    pub old: Vec<Option<u32>>,
    /// Every directory entered (and those that could not be).
    pub dirs: Vec<(Vec<u8>, DirStat)>,
    /// Directories listed (the others were known and unchanged).
    pub listed: usize,
    /// [`global_sig`] of this walk.
    pub global: u64,
}

/// Entries the calling thread handles alone before a helper may join. Measured
/// on the 2-core bench machine: in-process, a helper from the start walks W1
/// (1,000 files, ~1,400 entries listed) in 2.7–2.9 ms instead of 4.6–4.9 ms
/// when the other core is free, and gains nothing when it is busy; but whole
/// `ckpt hook` pre+post pairs on W1 were no faster with a helper (25.6–27.8 ms
/// either way) and cost 1–1.5 ms more CPU. On W2 (20,000 files) two threads
/// walk in 48–50 ms instead of 92–94 ms with a free core (about the same
/// when both are busy). So small trees stay on one thread.
/// When the known walk already had that many entries, the helper may join
/// at once: no-change shell pre+post on W2 (20,000 files), medians of 15
/// alternating pairs: 117.7 ms with the helper after 4,000 entries, 99.7 ms
/// from the start; W1 (below the bar) 15.5 ms either way.
pub(crate) const SPAWN_AFTER: usize = 4_000;

/// Most threads used (the calling one included).
const MAX_THREADS: usize = 2;

/// How a walk runs (tests force the threaded path).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opts {
    /// Most threads, the calling one included.
    pub threads: usize,
    /// Entries seen before helpers may start.
    pub spawn_after: usize,
    /// How directories are listed.
    pub backend: Backend,
}

impl Opts {
    fn default_for_machine(backend: Backend) -> Opts {
        Opts {
            threads: MAX_THREADS,
            spawn_after: SPAWN_AFTER,
            backend,
        }
    }
}

/// Walks `root` with the production settings, using the previous walk when
/// there is one.
pub(crate) fn walk(
    root: &Path,
    ignore: &[String],
    known: Option<&Known<'_>>,
    user: &UserDirs,
    backend: Backend,
) -> io::Result<Walked> {
    walk_known(
        root,
        ignore,
        Opts::default_for_machine(backend),
        known,
        user,
    )
}

/// Walks `root` listing every directory: every regular file and symlink not
/// ignored, with its stat data.
#[cfg(test)]
pub(crate) fn walk_with(
    root: &Path,
    ignore: &[String],
    opts: Opts,
) -> io::Result<Vec<(Vec<u8>, Entry)>> {
    walk_known(root, ignore, opts, None, &UserDirs::from_env()).map(|w| w.entries.to_pairs())
}

/// Walks `root`; directories `known` has seen unchanged are not listed.
pub(crate) fn walk_known(
    root: &Path,
    ignore: &[String],
    opts: Opts,
    known: Option<&Known<'_>>,
    user: &UserDirs,
) -> io::Result<Walked> {
    // Matchers are given absolute roots; the paths matched against them are
    // relative (no leading `/`), so the crate's byte-wise root stripping never
    // cuts into a name.
    let abs_root = std::path::absolute(root)?;
    let mut ib = GitignoreBuilder::new(&abs_root);
    for p in ignore {
        ib.add_line(None, p)
            .map_err(|e| io::Error::other(format!("bad ignore pattern `{p}`: {e}")))?;
    }
    let extra = ib.build().map_err(|e| io::Error::other(e.to_string()))?;
    // As `WalkBuilder` does: the global excludes file, rooted at the current
    // directory (ignored when that is unknown).
    let excludes = global_excludes_path(user);
    let global = match (std::env::current_dir(), &excludes) {
        // As `GitignoreBuilder::build_global`, from the same path.
        (Ok(cwd), Some(path)) if path.is_file() => {
            let mut b = GitignoreBuilder::new(cwd);
            let _ = b.add(path);
            b.build().unwrap_or_else(|_| Gitignore::empty())
        }
        _ => Gitignore::empty(),
    };
    let global_sig = global_sig(ignore, &global, excludes.as_deref());
    let root_fd = rustix::fs::openat(
        rustix::fs::CWD,
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let shared = Shared {
        root,
        abs_root,
        extra,
        global,
        known,
        // Other patterns or another global excludes file: everything is
        // listed (and still paired with what was known).
        trust: known.is_some_and(|k| k.global == global_sig),
        backend: opts.backend,
        queue: Mutex::new(Queue {
            stack: vec![Work {
                fd: Dirfd::Open(root_fd),
                key: Vec::new(),
                rules: None,
                force: false,
            }],
            busy: 0,
            waiting: 0,
        }),
        cv: Condvar::new(),
    };
    let threads = opts.threads.max(1);
    let mut out = Local::default();
    std::thread::scope(|s| {
        // Room for what the known walk had, so the tables are not regrown
        // (and copied) as they fill: each thread may take most of the walk,
        // and room never used is never touched.
        let room = known.map_or((0, 0), |k| (k.entries.len(), k.entries.key_bytes()));
        let mut local = Local::with_room(room);
        let mut helpers = Vec::new();
        let mut may_spawn = threads > 1;
        while let Some(w) = shared.next() {
            shared.visit(w, &mut local);
            if may_spawn
                && (local.seen >= opts.spawn_after || room.0 >= opts.spawn_after)
                && shared.lock().stack.len() > 1
            {
                if helpers.len() + 1 >= cpus() {
                    may_spawn = false;
                    continue;
                }
                let sh = &shared;
                let helper = std::thread::Builder::new().spawn_scoped(s, move || {
                    let mut l = Local::with_room(room);
                    while let Some(w) = sh.next() {
                        sh.visit(w, &mut l);
                    }
                    l
                });
                match helper {
                    Ok(h) => helpers.push(h),
                    // No thread to be had: this one does the work.
                    Err(_) => may_spawn = false,
                }
                may_spawn &= helpers.len() + 1 < threads;
            }
        }
        out = local;
        for h in helpers {
            // A helper that panicked lost its entries: re-raise rather than
            // return a partial walk (which would read as deletions).
            match h.join() {
                Ok(mut l) => {
                    out.out.append(&mut l.out);
                    out.old.append(&mut l.old);
                    out.dirs.append(&mut l.dirs);
                    out.listed += l.listed;
                }
                Err(p) => std::panic::resume_unwind(p),
            }
        }
    });
    Ok(Walked {
        entries: out.out,
        old: out.old,
        dirs: out.dirs,
        listed: out.listed,
        global: global_sig,
    })
}

/// The global excludes file, as `ignore::gitignore::gitconfig_excludes_path`
/// finds it; without compiling its regex (a third of a millisecond, every
/// hook) when no git configuration file mentions `excludesfile`: then the
/// answer is the default path.
fn global_excludes_path(user: &UserDirs) -> Option<PathBuf> {
    let xdg = user.xdg();
    let configs = [
        user.git_config_global.clone(),
        user.home.as_ref().map(|h| h.join(".gitconfig")),
        xdg.as_ref().map(|x| x.join("git/config")),
        Some(
            user.git_config_system
                .clone()
                .unwrap_or_else(|| PathBuf::from("/etc/gitconfig")),
        ),
    ];
    let mentions = |p: &PathBuf| {
        std::fs::read(p).is_ok_and(|b| {
            b.windows(12)
                .any(|w| w.eq_ignore_ascii_case(b"excludesfile"))
        })
    };
    if configs.iter().flatten().any(mentions) {
        return ignore::gitignore::gitconfig_excludes_path();
    }
    xdg.map(|x| x.join("git/ignore"))
}

/// Fingerprint of what applies to the whole walk: the configuration's
/// patterns and the global excludes file (its path, its stat data, the
/// current directory its matcher is rooted at).
fn global_sig(ignore: &[String], global: &Gitignore, excludes: Option<&Path>) -> u64 {
    use std::hash::Hasher;
    let mut h = FxHasher::default();
    for p in ignore {
        h.write(p.as_bytes());
        h.write_u8(0);
    }
    h.write_u64(global.num_ignores());
    h.write_u64(global.num_whitelists());
    if !global.is_empty() {
        h.write(global.path().as_os_str().as_bytes());
    }
    if let Some(f) = excludes {
        h.write(f.as_os_str().as_bytes());
        h.write_u64(stat_sig(f));
    }
    h.finish()
}

/// Fingerprint of a file's stat data (following symlinks); 0 when absent.
fn stat_sig(p: &Path) -> u64 {
    use std::hash::Hasher;
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(p) else {
        return 0;
    };
    let mut h = FxHasher::default();
    for v in [
        m.ino(),
        m.size(),
        m.mtime() as u64,
        m.mtime_nsec() as u64,
        m.ctime() as u64,
        m.ctime_nsec() as u64,
        m.mode().into(),
    ] {
        h.write_u64(v);
    }
    h.finish() | 1
}

/// The rules one directory adds (only directories with rule files get one).
struct Rules {
    /// From `.ignore`.
    dot_ignore: Option<Gitignore>,
    /// From `.gitignore`.
    gitignore: Option<Gitignore>,
    /// From `.git/info/exclude`.
    exclude: Option<Gitignore>,
    /// Bytes of an entry key before the part relative to this directory.
    prefix: usize,
    /// The nearest ancestor with rules.
    parent: Option<Arc<Rules>>,
}

type Pick = fn(&Rules) -> Option<&Gitignore>;

/// Categories in the `ignore` crate's order of precedence.
const CATEGORIES: [Pick; 3] = [
    |r| r.dot_ignore.as_ref(),
    |r| r.gitignore.as_ref(),
    |r| r.exclude.as_ref(),
];

/// A directory still to be read.
struct Work {
    fd: Dirfd,
    /// Its path relative to the root (empty for the root).
    key: Vec<u8>,
    /// Rules in force for its entries (before its own).
    rules: Option<Arc<Rules>>,
    /// Rules above it changed since the known walk: list it whatever its stat.
    force: bool,
}

enum Dirfd {
    /// The root, already open.
    Open(OwnedFd),
    /// To be opened relative to the parent's fd; the name is the tail of the
    /// key from this offset.
    At(Arc<OwnedFd>, usize),
}

struct Queue {
    stack: Vec<Work>,
    /// Workers visiting a directory (they may push more work).
    busy: usize,
    /// Workers waiting for work.
    waiting: usize,
}

struct Shared<'a> {
    root: &'a Path,
    abs_root: PathBuf,
    extra: Gitignore,
    global: Gitignore,
    known: Option<&'a Known<'a>>,
    /// Unchanged directories of `known` may be taken as they were.
    trust: bool,
    /// How directories are listed.
    backend: Backend,
    queue: Mutex<Queue>,
    cv: Condvar,
}

/// Per-thread buffers and results.
struct Local {
    /// `getdents` buffer.
    buf: Vec<u8>,
    /// NUL-terminated names of the directory being visited.
    names: Vec<u8>,
    /// (start, end incl. NUL, type) into `names`.
    ents: Vec<(usize, usize, FileType)>,
    /// Subdirectories found, pushed in one go.
    children: Vec<Work>,
    /// Entries seen.
    seen: usize,
    out: Entries,
    /// Parallel to `out`: the index of the same path in the known walk.
    old: Vec<Option<u32>>,
    dirs: Vec<(Vec<u8>, DirStat)>,
    listed: usize,
}

impl Local {
    /// A thread's buffers, with room for `n` entries whose keys take
    /// `key_bytes`.
    fn with_room((n, key_bytes): (usize, usize)) -> Local {
        Local {
            out: Entries::with_capacity(n, key_bytes),
            old: Vec::with_capacity(n),
            ..Local::default()
        }
    }
}

impl Default for Local {
    fn default() -> Local {
        Local {
            buf: Vec::with_capacity(32 * 1024),
            names: Vec::with_capacity(4096),
            ents: Vec::with_capacity(128),
            children: Vec::new(),
            seen: 0,
            out: Entries::default(),
            old: Vec::new(),
            dirs: Vec::new(),
            listed: 0,
        }
    }
}

impl Shared<'_> {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next directory, or `None` when the walk is over.
    fn next(&self) -> Option<Work> {
        let mut q = self.lock();
        loop {
            if let Some(w) = q.stack.pop() {
                q.busy += 1;
                return Some(w);
            }
            if q.busy == 0 {
                if q.waiting > 0 {
                    self.cv.notify_all();
                }
                return None;
            }
            q.waiting += 1;
            q = self.cv.wait(q).unwrap_or_else(|p| p.into_inner());
            q.waiting -= 1;
        }
    }

    /// Ends a visit: queues the subdirectories found.
    fn done(&self, children: &mut Vec<Work>) {
        let mut q = self.lock();
        q.busy -= 1;
        q.stack.append(children);
        if q.waiting > 0 && (!q.stack.is_empty() || q.busy == 0) {
            self.cv.notify_all();
        }
    }

    fn visit(&self, w: Work, l: &mut Local) {
        /// Should a visit panic, the others must not wait for it forever.
        struct Unwinding<'s, 'a>(&'s Shared<'a>);
        impl Drop for Unwinding<'_, '_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0.lock().busy -= 1;
                    self.0.cv.notify_all();
                }
            }
        }
        let guard = Unwinding(self);
        self.list_and_match(w, l);
        std::mem::forget(guard);
        self.done(&mut l.children);
    }

    fn list_and_match(&self, w: Work, l: &mut Local) {
        let Work {
            fd,
            key,
            rules,
            force,
        } = w;
        let fd = match fd {
            Dirfd::Open(fd) => fd,
            Dirfd::At(parent, name_at) => match rustix::fs::openat(
                &*parent,
                &key[name_at..],
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                // Unreadable, gone, or no longer a directory: skipped (and
                // tried again by the next walk).
                Err(_) => {
                    let flags = UNLISTED;
                    l.dirs.push((
                        key,
                        DirStat {
                            flags,
                            ..Default::default()
                        },
                    ));
                    return;
                }
            },
        };
        // Its stat data before its listing: a change made after this moves it.
        let mut now = match crate::sys::fstat(&fd) {
            Ok(st) => dir_stat(&st),
            Err(_) => DirStat {
                flags: UNLISTED,
                ..Default::default()
            },
        };
        let mut force_below = force;
        let kd = self.known.and_then(|k| k.dirs.get(key.as_slice()));
        if !force
            && self.trust
            && let Some(known) = self.known
            && let Some(k) = kd.filter(|k| known.trusted(k, &now))
        {
            let flags = k.stat.flags & RULE_FILES;
            let (own, sig) = self.dir_rules(&key, flags, rules.clone());
            if sig == k.stat.rules {
                now.flags = flags;
                now.rules = sig;
                self.known_entries(known, fd, key, k, own, now, l);
                return;
            }
            // Its rule files changed: everything below is matched again.
            force_below = true;
        }
        l.listed += 1;
        l.names.clear();
        l.ents.clear();
        let mut flags = 0;
        let (names, ents) = (&mut l.names, &mut l.ents);
        let listed = crate::sys::list_dir(fd.as_fd(), &mut l.buf, self.backend, |name, ty| {
            match name.to_bytes() {
                b"." | b".." => return,
                b".ignore" => flags |= HAS_IGNORE,
                b".gitignore" => flags |= HAS_GITIGNORE,
                b".git" => flags |= HAS_GIT,
                _ => {}
            }
            let start = names.len();
            names.extend_from_slice(name.to_bytes_with_nul());
            ents.push((start, names.len(), ty));
        });
        // A listing that fails part way keeps what was read.
        if listed.is_err() {
            now.flags |= UNLISTED;
        }
        let (rules, sig) = self.dir_rules(&key, flags, rules);
        if kd.is_some_and(|k| (k.stat.flags & RULE_FILES, k.stat.rules) != (flags, sig)) {
            force_below = true;
        }
        now.flags |= flags;
        now.rules = sig;
        l.dirs.push((key.clone(), now));
        let top = key.is_empty();
        let base = if top { 0 } else { key.len() + 1 };
        // What the known walk had here, by name (a map for large directories).
        let known_name = |i: u32| -> &[u8] {
            self.known
                .map_or(&[][..], |k| &k.entries.key(i as usize)[base..])
        };
        let by_name: Option<std::collections::HashMap<&[u8], u32, FxBuild>> = kd
            .filter(|k| k.file_count() > 16)
            .map(|k| k.file_indexes().map(|i| (known_name(i), i)).collect());
        let was = |name: &[u8]| -> Option<u32> {
            match &by_name {
                Some(m) => m.get(name).copied(),
                None => kd?.file_indexes().find(|&i| known_name(i) == name),
            }
        };
        let mut path = key;
        if !top {
            path.push(b'/');
        }
        let fd = Arc::new(fd);
        l.seen += l.ents.len();
        for &(start, end, d_type) in &l.ents {
            let Ok(cname) = CStr::from_bytes_with_nul(&l.names[start..end]) else {
                continue;
            };
            let name = cname.to_bytes();
            if name.eq_ignore_ascii_case(b".git")
                || (top && name == crate::paths::RUNTIME_DIR.as_bytes())
            {
                continue;
            }
            let mut stat = None;
            let ty = if d_type == FileType::Unknown {
                match crate::sys::lstat_at(&*fd, cname) {
                    Ok(st) => {
                        let ty = st.file_type();
                        stat = Some(st);
                        ty
                    }
                    Err(_) => continue,
                }
            } else {
                d_type
            };
            let is_dir = ty == FileType::Directory;
            if !(is_dir || ty == FileType::RegularFile || ty == FileType::Symlink) {
                continue;
            }
            path.truncate(base);
            path.extend_from_slice(name);
            if self.ignored(rules.as_ref(), &path, is_dir) {
                continue;
            }
            if is_dir {
                l.children.push(Work {
                    fd: Dirfd::At(fd.clone(), base),
                    key: path.clone(),
                    rules: rules.clone(),
                    force: force_below,
                });
                continue;
            }
            let st = match stat {
                Some(st) => st,
                None => match crate::sys::lstat_at(&*fd, cname) {
                    Ok(st) => st,
                    Err(_) => continue,
                },
            };
            let symlink = match st.file_type() {
                FileType::RegularFile => false,
                FileType::Symlink => true,
                // Replaced by a directory or something else since the listing.
                _ => continue,
            };
            l.out.push(&path, entry_of(&st, symlink));
            l.old.push(was(name));
        }
    }

    /// A directory whose listing is what the known walk saw: its files are
    /// `fstatat`ed by name and its subdirectories queued, nothing is listed
    /// or matched.
    #[allow(clippy::too_many_arguments)]
    fn known_entries(
        &self,
        known: &Known<'_>,
        fd: OwnedFd,
        key: Vec<u8>,
        k: &KnownDir<'_>,
        rules: Option<Arc<Rules>>,
        now: DirStat,
        l: &mut Local,
    ) {
        let base = if key.is_empty() { 0 } else { key.len() + 1 };
        l.dirs.push((key, now));
        l.seen += k.file_count() + k.subdirs.len();
        let fd = Arc::new(fd);
        for i in k.file_indexes() {
            let f = known.entries.key(i as usize);
            let Ok(st) = crate::sys::lstat_at(&*fd, &f[base..]) else {
                continue;
            };
            let symlink = match st.file_type() {
                FileType::RegularFile => false,
                FileType::Symlink => true,
                _ => continue,
            };
            l.out.push(f, entry_of(&st, symlink));
            l.old.push(Some(i));
        }
        for d in &k.subdirs {
            l.children.push(Work {
                fd: Dirfd::At(fd.clone(), base),
                key: d.to_vec(),
                rules: rules.clone(),
                force: false,
            });
        }
    }

    /// Whether the entry at `key` (relative to the root) is skipped.
    fn ignored(&self, rules: Option<&Arc<Rules>>, key: &[u8], is_dir: bool) -> bool {
        let rel = |from: usize| Path::new(OsStr::from_bytes(&key[from..]));
        let decided = 'decided: {
            for pick in CATEGORIES {
                let mut node = rules;
                while let Some(r) = node {
                    if let Some(g) = pick(r) {
                        let m = g.matched(rel(r.prefix), is_dir);
                        if !m.is_none() {
                            break 'decided m.is_ignore();
                        }
                    }
                    node = r.parent.as_ref();
                }
            }
            if !self.global.is_empty() {
                let m = self.global.matched(self.root.join(rel(0)), is_dir);
                if !m.is_none() {
                    break 'decided m.is_ignore();
                }
            }
            false
        };
        decided || self.extra.matched(rel(0), is_dir).is_ignore()
    }

    /// The rules of the directory at `key`, whose listing named the rule
    /// files in `flags` (`parent` when its files add no rule), and the
    /// fingerprint of those files' stat data (0 when it names none).
    fn dir_rules(
        &self,
        key: &[u8],
        flags: u8,
        parent: Option<Arc<Rules>>,
    ) -> (Option<Arc<Rules>>, u64) {
        if flags & RULE_FILES == 0 {
            return (parent, 0);
        }
        let (has_ignore, has_gitignore, has_git) = (
            flags & HAS_IGNORE != 0,
            flags & HAS_GITIGNORE != 0,
            flags & HAS_GIT != 0,
        );
        let sig = std::cell::Cell::new(0u64);
        let rel = OsStr::from_bytes(key);
        // Rule files are read by path, as the crate reads them (following
        // symlinks); only directories that list one pay for it.
        let dir = self.root.join(rel);
        let matcher_root = self.abs_root.join(rel);
        let load = |file: PathBuf| {
            sig.set(sig.get().rotate_left(7) ^ stat_sig(&file));
            let mut b = GitignoreBuilder::new(&matcher_root);
            // Bad lines and unreadable files are skipped, as the crate does.
            let _ = b.add(file);
            b.build().ok().filter(|g| !g.is_empty())
        };
        let dot_ignore = has_ignore.then(|| load(dir.join(".ignore"))).flatten();
        let gitignore = has_gitignore
            .then(|| load(dir.join(".gitignore")))
            .flatten();
        let exclude = has_git
            .then(|| git_commondir(&dir).map(|g| load(g.join("info/exclude"))))
            .flatten()
            .flatten();
        let sig = sig.get() | 1;
        if dot_ignore.is_none() && gitignore.is_none() && exclude.is_none() {
            return (parent, sig);
        }
        let rules = Arc::new(Rules {
            dot_ignore,
            gitignore,
            exclude,
            prefix: if key.is_empty() { 0 } else { key.len() + 1 },
            parent,
        });
        (Some(rules), sig)
    }
}

/// The git directory whose `info/exclude` applies to `dir`, as the `ignore`
/// crate finds it (`resolve_git_commondir`): `dir/.git` unless that is a file;
/// for a `gitdir:` file, the `commondir` it names (a linked worktree), else
/// none.
fn git_commondir(dir: &Path) -> Option<PathBuf> {
    use std::io::BufRead;
    let dot_git = dir.join(".git");
    if !std::fs::metadata(&dot_git).is_ok_and(|m| m.is_file()) {
        return Some(dot_git);
    }
    let first_line = |p: &Path| -> Option<String> {
        let f = std::fs::File::open(p).ok()?;
        io::BufReader::new(f).lines().next()?.ok()
    };
    let line = first_line(&dot_git)?;
    let real = PathBuf::from(line.strip_prefix("gitdir: ")?);
    let common = first_line(&real.join("commondir"))?;
    Some(if common.starts_with('.') {
        real.join(common)
    } else {
        PathBuf::from(common)
    })
}

// `Stat`'s field types differ between architectures.
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
fn dir_stat(st: &crate::sys::Stat) -> DirStat {
    DirStat {
        ino: st.ino,
        mtime_ns: st.mtime_ns(),
        ctime_ns: st.ctime_ns(),
        flags: 0,
        rules: 0,
    }
}

// `Stat`'s field types differ between architectures.
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
fn entry_of(st: &crate::sys::Stat, symlink: bool) -> Entry {
    Entry {
        symlink,
        mode: st.mode & 0o777,
        size: st.size,
        mtime_ns: st.mtime_ns(),
        ctime_ns: st.ctime_ns(),
        ino: st.ino,
        hash: None,
        git_oid: None,
    }
}

#[cfg(test)]
mod tests;
