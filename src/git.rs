//! The only module that names git2: finding the workspace's git top level and
//! reading HEAD, the branch and whether the tree is dirty. ckpt never writes to
//! the user's index, HEAD, refs or object database.

use std::path::{Path, PathBuf};

use crate::record::GitState;

/// Initialises libgit2 once. git2 0.21's `merge_file` does not do it itself
/// (DEPENDENCIES.md gotcha 1); any git2 call that initialises will do.
pub fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = git2::Config::new();
    });
}

/// Reads HEAD, branch and dirtiness of the repository the workspace at
/// `root` lies in (its top level, or a folder of it). Returns `None` outside
/// a git work tree.
pub fn state(root: &Path) -> Option<GitState> {
    let (repo, _) = open_containing(root)?;
    let (head, branch) = match repo.head() {
        Ok(h) => (
            h.target().map(|o| o.to_string()),
            if h.is_branch() {
                h.shorthand().ok().map(str::to_string)
            } else {
                None
            },
        ),
        Err(_) => {
            // Unborn branch: HEAD names a branch that has no commit yet.
            let branch = repo.find_reference("HEAD").ok().and_then(|r| {
                r.symbolic_target()
                    .ok()
                    .flatten()
                    .map(|s| s.trim_start_matches("refs/heads/").to_string())
            });
            (None, branch)
        }
    };
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(false)
        .include_ignored(false)
        .exclude_submodules(true);
    // git2's status does not rewrite .git/index (unlike plain `git status`).
    let dirty = repo
        .statuses(Some(&mut opts))
        .map(|s| !s.is_empty())
        .unwrap_or(false);
    Some(GitState {
        head,
        branch,
        dirty,
    })
}

/// One git index entry's stat data and blob id, for deciding whether a file is
/// clean against the index without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexStat {
    /// The blob id (sha1) in the index.
    pub oid: [u8; 20],
    /// mtime seconds.
    pub mtime_s: i64,
    /// mtime nanoseconds (0 when git did not store them).
    pub mtime_ns: u32,
    /// Size, truncated to 32 bits as git stores it.
    pub size32: u32,
    /// Inode, truncated to 32 bits as git stores it.
    pub ino32: u32,
    /// git mode (`0o100644`, `0o100755`, `0o120000`).
    pub mode: u32,
    /// The mtime of the index file the entry is from: an entry whose file
    /// was modified at or after it is "racy" and not trusted.
    pub index_mtime_ns: i64,
}

/// Words that, in an attributes file, can make a file's bytes differ from
/// its blob's: clean/smudge filters (Git LFS, git-crypt), end-of-line
/// conversion (`text`, `eol`, the old `crlf`), `$Id$` expansion and
/// re-encoding. A line naming none of them (`*.png binary`, `-diff`,
/// `linguist-*`) converts nothing.
const CONVERTING_ATTRIBUTES: [&str; 5] = ["filter", "text", "eol", "crlf", "ident"];

/// Where the user's git configuration lives, as git finds it from the
/// environment (`HOME`, `XDG_CONFIG_HOME`, `GIT_CONFIG_GLOBAL`,
/// `GIT_CONFIG_SYSTEM`). The library never reads the environment itself: the
/// binary calls [`UserDirs::from_env`] and passes the value in
/// ([`crate::OpenOptions`]); the default knows none of them, so no global
/// excludes or user attributes file applies. (libgit2 and the `ignore` crate
/// still look up what they look up, as git does.)
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserDirs {
    /// The home directory.
    pub home: Option<PathBuf>,
    /// `XDG_CONFIG_HOME`, when set and not empty.
    pub xdg_config_home: Option<PathBuf>,
    /// `GIT_CONFIG_GLOBAL`, when set and not empty.
    pub git_config_global: Option<PathBuf>,
    /// `GIT_CONFIG_SYSTEM`, when set and not empty.
    pub git_config_system: Option<PathBuf>,
}

impl UserDirs {
    /// Reads them from this process's environment.
    pub fn from_env() -> UserDirs {
        let var = |v: &str| {
            std::env::var_os(v)
                .filter(|x| !x.is_empty())
                .map(PathBuf::from)
        };
        #[allow(deprecated)] // As the `ignore` crate finds it.
        let home = std::env::home_dir();
        UserDirs {
            home,
            xdg_config_home: var("XDG_CONFIG_HOME"),
            git_config_global: var("GIT_CONFIG_GLOBAL"),
            git_config_system: var("GIT_CONFIG_SYSTEM"),
        }
    }

    /// `$XDG_CONFIG_HOME`, else `~/.config`.
    pub fn xdg(&self) -> Option<PathBuf> {
        self.xdg_config_home
            .clone()
            .or_else(|| self.home.as_ref().map(|h| h.join(".config")))
    }
}

/// Whether git may store some file of this work tree as other bytes than
/// the file holds (so that a stat-clean index entry's blob is not the file's
/// content): `core.autocrlf` set to `true` or `input`, or an attributes file
/// that names a converting attribute ([`CONVERTING_ATTRIBUTES`], or
/// `working-tree-encoding`). `worktree_attribute_files` are the work tree's
/// `.gitattributes` files, relative to `root`; the repository's
/// `info/attributes`, the user's (`core.attributesFile`, or the XDG default)
/// and the system's `/etc/gitattributes` are read too. Errs on the side of
/// "may": a file that cannot be read counts as converting.
pub fn may_convert<'a>(
    repo: &git2::Repository,
    root: &Path,
    worktree_attribute_files: impl IntoIterator<Item = &'a [u8]>,
    user: &UserDirs,
) -> bool {
    if repo_converts(repo) {
        return true;
    }
    use std::os::unix::ffi::OsStrExt;
    for rel in worktree_attribute_files {
        // Like git (2.32 on), a `.gitattributes` in the work tree is never
        // read through a symlink.
        if file_converts(&root.join(std::ffi::OsStr::from_bytes(rel)), false) {
            return true;
        }
    }
    let user = repo
        .config()
        .ok()
        .and_then(|c| c.get_path("core.attributesFile").ok())
        .or_else(|| user.xdg().map(|d| d.join("git/attributes")));
    std::iter::once(std::path::PathBuf::from("/etc/gitattributes"))
        .chain(user)
        .any(|p| file_converts(&p, true))
}

/// What one repository adds to [`may_convert`]: its `core.autocrlf` and its
/// `info/attributes` (a submodule has its own of both).
fn repo_converts(repo: &git2::Repository) -> bool {
    let autocrlf = repo
        .config()
        .ok()
        .and_then(|c| c.get_string("core.autocrlf").ok())
        .map(|v| v.to_ascii_lowercase());
    autocrlf.is_some_and(|v| matches!(v.as_str(), "true" | "yes" | "on" | "1" | "input"))
        || file_converts(&repo.path().join("info/attributes"), true)
}

/// Whether the attributes file at `path` sets a converting attribute; one
/// that cannot be read safely counts as converting.
fn file_converts(path: &Path, follow: bool) -> bool {
    match read_attributes_file(path, follow) {
        Ok(Some(text)) => attributes_convert(&text),
        Ok(None) => false,
        Err(_) => true,
    }
}

/// Larger attributes files are not read: they count as converting.
const ATTRIBUTES_MAX: u64 = 1 << 20;

/// An attributes file's text: `Ok(None)` when there is none (absent, or a
/// symlink where `follow` is false, as git ignores one in the work tree);
/// `Err` when it cannot be read whole, is not a regular file (a FIFO or a
/// device is never waited on or read) or is above [`ATTRIBUTES_MAX`].
fn read_attributes_file(path: &Path, follow: bool) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // O_NOFOLLOW on a symlink.
        Err(e) if !follow && e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    if !meta.is_file() || meta.len() > ATTRIBUTES_MAX {
        return Err(std::io::Error::other("not a small regular file"));
    }
    let mut text = Vec::with_capacity(meta.len() as usize);
    f.take(ATTRIBUTES_MAX + 1).read_to_end(&mut text)?;
    if text.len() as u64 > ATTRIBUTES_MAX {
        return Err(std::io::Error::other("grew past the limit"));
    }
    Ok(Some(text))
}

/// Whether the text of an attributes file sets a converting attribute (a
/// macro that does, `[attr]lfs filter=lfs`, counts too).
fn attributes_convert(text: &[u8]) -> bool {
    text.split(|&b| b == b'\n').any(|line| {
        let line = String::from_utf8_lossy(line).to_ascii_lowercase();
        let line = line.trim_start();
        !line.starts_with('#')
            && (line.contains("working-tree-encoding")
                // Set (`text`, `eol=crlf`, `filter=lfs`), not unset (`-text`)
                // or unspecified (`!eol`).
                || line.split_whitespace().skip(1).any(|attr| {
                    let name = attr.split('=').next().unwrap_or(attr);
                    CONVERTING_ATTRIBUTES.contains(&name)
                }))
    })
}

/// The repository a workspace at `root` lies in (its top level, or a
/// directory above it: a workspace may be one folder of a bigger repository),
/// with `root`'s path inside that repository's work tree (`""` or
/// `"pkg/"`): its index paths start with it.
fn open_containing(root: &Path) -> Option<(git2::Repository, Vec<u8>)> {
    use std::os::unix::ffi::OsStrExt;
    let repo = git2::Repository::open_ext(
        root,
        git2::RepositoryOpenFlags::empty(),
        std::iter::empty::<&std::ffi::OsStr>(),
    )
    .ok()?;
    let top = repo.workdir()?.canonicalize().ok()?;
    let here = root.canonicalize().ok()?;
    let mut inner = here
        .strip_prefix(&top)
        .ok()?
        .as_os_str()
        .as_bytes()
        .to_vec();
    if !inner.is_empty() {
        inner.push(b'/');
    }
    Some((repo, inner))
}

/// How deep submodules inside submodules are followed.
const SUBMODULE_DEPTH: usize = 3;
/// At most this many submodules are read.
const SUBMODULES_MAX: usize = 256;

/// Reads the index of the repository a workspace at `root` lies in, and of
/// the submodules checked out inside the workspace: workspace path → stat
/// data, blob id and its index file's mtime; and whether git may convert
/// files' bytes on their way into any of those indexes ([`may_convert`];
/// then a stat-clean entry's blob must be checked against the file before it
/// stands in for it). A submodule's files are clean against its own index,
/// and their blobs are in its own object database ([`read_blob`] looks
/// there). Returns `None` outside a repository.
pub fn index_stats<'a>(
    root: &Path,
    worktree_attribute_files: impl IntoIterator<Item = &'a [u8]>,
    user: &UserDirs,
) -> Option<(std::collections::HashMap<Vec<u8>, IndexStat>, bool)> {
    Some(IndexRead::start(root)?.finish(root, worktree_attribute_files, user))
}

/// The indexes [`index_stats`] reads, read before the work tree's
/// `.gitattributes` files are known: a first walk reads them beside it.
pub struct IndexRead {
    repo: git2::Repository,
    map: std::collections::HashMap<Vec<u8>, IndexStat>,
    /// A submodule's configuration converts bytes.
    submodule_converts: bool,
}

impl IndexRead {
    /// Reads the indexes (the repository's and its submodules'); `None`
    /// outside a repository.
    pub fn start(root: &Path) -> Option<IndexRead> {
        let (repo, inner) = open_containing(root)?;
        let mut map = std::collections::HashMap::new();
        let mut gitlinks = Vec::new();
        read_index(&repo, &inner, b"", &mut map, &mut gitlinks)?;
        let mut submodule_converts = false;
        let mut read = 0;
        let mut level = 0;
        while !gitlinks.is_empty() && level < SUBMODULE_DEPTH {
            level += 1;
            for key in std::mem::take(&mut gitlinks) {
                if read == SUBMODULES_MAX {
                    break;
                }
                let Some(sub) = open_submodule(root, &key) else {
                    continue;
                };
                read += 1;
                // The work tree's, the user's and the system's attributes are
                // read by `finish`; the submodule adds its own config and info file.
                submodule_converts = submodule_converts || repo_converts(&sub);
                let mut prefix = key;
                prefix.push(b'/');
                let _ = read_index(&sub, b"", &prefix, &mut map, &mut gitlinks);
            }
        }
        Some(IndexRead {
            repo,
            map,
            submodule_converts,
        })
    }

    /// The stat map, and whether git may convert bytes given the work tree's
    /// `.gitattributes` files.
    pub fn finish<'a>(
        self,
        root: &Path,
        worktree_attribute_files: impl IntoIterator<Item = &'a [u8]>,
        user: &UserDirs,
    ) -> (std::collections::HashMap<Vec<u8>, IndexStat>, bool) {
        let converts = self.submodule_converts
            || may_convert(&self.repo, root, worktree_attribute_files, user);
        (self.map, converts)
    }
}

/// Adds the entries of `repo`'s index whose path starts with `strip` to
/// `map`, keyed by `add` + the rest of the path; submodules (gitlinks) go to
/// `gitlinks` under the same key.
fn read_index(
    repo: &git2::Repository,
    strip: &[u8],
    add: &[u8],
    map: &mut std::collections::HashMap<Vec<u8>, IndexStat>,
    gitlinks: &mut Vec<Vec<u8>>,
) -> Option<()> {
    let index = repo.index().ok()?;
    let index_mtime_ns = std::fs::metadata(repo.path().join("index"))
        .ok()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    map.reserve(index.len());
    for e in index.iter() {
        // Skip entries in a merge conflict (stage != 0).
        if (e.flags >> 12) & 3 != 0 {
            continue;
        }
        let Some(rest) = e.path.strip_prefix(strip) else {
            continue;
        };
        let key = if add.is_empty() {
            rest.to_vec()
        } else {
            [add, rest].concat()
        };
        if e.mode == 0o160000 {
            gitlinks.push(key);
            continue;
        }
        let mut oid = [0u8; 20];
        oid.copy_from_slice(e.id.as_bytes());
        map.insert(
            key,
            IndexStat {
                oid,
                mtime_s: e.mtime.seconds() as i64,
                mtime_ns: e.mtime.nanoseconds(),
                size32: e.file_size,
                ino32: e.ino,
                mode: e.mode,
                index_mtime_ns,
            },
        );
    }
    Some(())
}

/// The submodule checked out at `key` below `base`, if one is: the path
/// (from an index or `.gitmodules`) is checked like any path from outside, so
/// nothing beyond `base` is opened, and the repository must have its own work
/// tree right there.
fn open_submodule(base: &Path, key: &[u8]) -> Option<git2::Repository> {
    use std::os::unix::ffi::OsStrExt;
    crate::paths::RelPath::from_ledger(key).ok()?;
    let dir = base.join(std::ffi::OsStr::from_bytes(key));
    let sub = git2::Repository::open(&dir).ok()?;
    let here = dir.canonicalize().ok()?;
    (sub.workdir()?.canonicalize().ok()? == here).then_some(sub)
}

/// The submodules checked out in `repo`'s work tree, and theirs, up to
/// [`SUBMODULE_DEPTH`] levels and [`SUBMODULES_MAX`] in all.
fn submodule_repos(repo: &git2::Repository, out: &mut Vec<git2::Repository>, depth: usize) {
    use std::os::unix::ffi::OsStrExt;
    let (Some(top), Ok(subs)) = (repo.workdir(), repo.submodules()) else {
        return;
    };
    for sm in subs {
        if out.len() >= SUBMODULES_MAX {
            return;
        }
        if let Some(sub) = open_submodule(top, sm.path().as_os_str().as_bytes()) {
            if depth > 1 {
                submodule_repos(&sub, out, depth - 1);
            }
            out.push(sub);
        }
    }
}

/// The git repositories of one workspace, opened on first use and kept
/// while it is open: the repository the workspace lies in first, its
/// submodules the first time a blob is not found there. Opening one costs a
/// few hundred microseconds; a shell post may read hundreds of blobs. A
/// pool, not one handle: threads reading blobs at once each take their own
/// (a libgit2 repository is not shared between threads).
pub struct Repos {
    root: std::path::PathBuf,
    pool: std::sync::Mutex<Vec<RepoCache>>,
}

impl std::fmt::Debug for Repos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repos").field("root", &self.root).finish()
    }
}

struct RepoCache {
    repos: Vec<git2::Repository>,
    /// The workspace's path inside the first repository (`""` or `dir/`).
    inner: Vec<u8>,
    /// The tree of the first repository's HEAD commit and when HEAD was
    /// resolved: again once that is [`HEAD_FRESH`] old (a shell post asks
    /// for a hundred files in a few milliseconds; resolving HEAD reads two
    /// files each time).
    head_tree: Option<(std::time::Instant, git2::Oid)>,
    submodules_opened: bool,
}

/// How long a resolved HEAD is trusted by [`Repos::read_committed_blob`].
const HEAD_FRESH: std::time::Duration = std::time::Duration::from_millis(500);

impl Repos {
    /// The repositories of the workspace at `root` (nothing is opened yet).
    pub fn new(root: &Path) -> Repos {
        Repos {
            root: root.to_path_buf(),
            pool: std::sync::Mutex::default(),
        }
    }

    /// Runs `f` on a set of the workspace's repositories, taken from the
    /// pool (or opened) and given back.
    fn with<T>(&self, f: impl FnOnce(&mut RepoCache) -> Option<T>) -> Option<T> {
        let taken = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut cache = taken.unwrap_or_else(|| {
            git2::opts::strict_hash_verification(false);
            let (repos, inner) = match open_containing(&self.root) {
                Some((r, inner)) => (vec![r], inner),
                None => (Vec::new(), Vec::new()),
            };
            RepoCache {
                repos,
                inner,
                head_tree: None,
                submodules_opened: false,
            }
        });
        let out = f(&mut cache);
        self.pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(cache);
        out
    }
    /// Reads a blob from the object database of the repository the workspace
    /// lies in, or of a submodule checked out in it (never writes to
    /// them).
    ///
    /// The bytes are checked against `oid` with the SHA-NI `sha1` crate rather
    /// than by libgit2's collision-detecting SHA1DC (~4× slower here; SHA1DC was
    /// ~10 % of the CPU of a shell post hook that read 100 blobs): this check
    /// guards against a damaged object, and the id came from the user's own
    /// index.
    pub fn read_blob(&self, oid: &[u8; 20]) -> Option<Vec<u8>> {
        let want = *oid;
        let oid = git2::Oid::from_bytes(oid).ok()?;
        let bytes = self.with(|cache| {
            let find = |repos: &[git2::Repository]| {
                repos
                    .iter()
                    .find_map(|r| r.find_blob(oid).ok().map(|b| b.content().to_vec()))
            };
            if let Some(b) = find(&cache.repos) {
                return Some(b);
            }
            if cache.submodules_opened || cache.repos.is_empty() {
                return None;
            }
            cache.submodules_opened = true;
            let mut subs = Vec::new();
            submodule_repos(&cache.repos[0], &mut subs, SUBMODULE_DEPTH);
            let found = find(&subs);
            cache.repos.extend(subs);
            found
        })?;
        (blob_id(&bytes) == crate::hash::hex(&want)).then_some(bytes)
    }

    /// Whether git holds blob `oid` for the workspace ([`Repos::read_blob`]'s
    /// repositories; the object is looked up, not read).
    pub fn has_blob(&self, oid: &[u8; 20]) -> bool {
        let Ok(id) = git2::Oid::from_bytes(oid) else {
            return false;
        };
        let here = self
            .with(|cache| {
                Some(
                    cache
                        .repos
                        .iter()
                        .any(|r| r.odb().is_ok_and(|o| o.exists(id))),
                )
            })
            .unwrap_or(false);
        here || self.read_blob(oid).is_some()
    }

    /// Reads blob `oid` when the HEAD commit of the repository the workspace
    /// lies in holds exactly that blob at `key` (a workspace path): then
    /// ckpt can leave it in git instead of copying it, since only a rewrite of
    /// history followed by `git gc` could take it away. `None` otherwise (only
    /// staged, a submodule's file, no commit yet): the caller stores a copy.
    pub fn read_committed_blob(&self, key: &[u8], oid: &[u8; 20]) -> Option<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let want = git2::Oid::from_bytes(oid).ok()?;
        let bytes = self.with(|cache| {
            let repo = cache.repos.first()?;
            let tree = match cache.head_tree {
                Some((at, tree)) if at.elapsed() < HEAD_FRESH => tree,
                _ => {
                    let at = std::time::Instant::now();
                    let head = repo.refname_to_id("HEAD").ok()?;
                    let tree = repo.find_commit(head).ok()?.tree_id();
                    cache.head_tree = Some((at, tree));
                    tree
                }
            };
            let tree = repo.find_tree(tree).ok()?;
            let mut path = cache.inner.clone();
            path.extend_from_slice(key);
            let entry = tree
                .get_path(Path::new(std::ffi::OsStr::from_bytes(&path)))
                .ok()?;
            if entry.id() != want || entry.kind() != Some(git2::ObjectType::Blob) {
                return None;
            }
            repo.find_blob(want).ok().map(|b| b.content().to_vec())
        })?;
        (blob_id(&bytes) == crate::hash::hex(oid)).then_some(bytes)
    }
}

/// Returns git's blob id (sha1 of `blob <len>\0<bytes>`, 40 hex) for `data`,
/// without a repository. Binary patches need it in their `index` line.
pub fn blob_id(data: &[u8]) -> String {
    // git's blob id: SHA-1 of `blob <len>\0` and the bytes. The `sha1` crate
    // (SHA-NI where the CPU has it) instead of libgit2's collision-detecting
    // SHA1DC: 4x faster, and no libgit2 start-up in a hook. The ids only name
    // ckpt's own contents in patch headers; they equal git's for every input
    // that is not a crafted SHA-1 collision.
    use sha1::Digest;
    let mut h = sha1::Sha1::new();
    h.update(format!("blob {}\0", data.len()).as_bytes());
    h.update(data);
    crate::hash::hex(&h.finalize())
}

/// [`blob_id`] through libgit2's collision-detecting SHA-1 (SHA1DC): for
/// deciding that a file *is* a blob of the object database (whose bytes then
/// stand in for the file's), where a crafted collision must not pass.
pub fn blob_id_checked(data: &[u8]) -> String {
    init();
    git2::Oid::hash_object(git2::ObjectType::Blob, data)
        .map(|o| o.to_string())
        .unwrap_or_else(|_| "0".repeat(40))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_lines_that_can_convert_bytes_are_told_apart() {
        for converting in [
            "* text=auto",
            "*.sh eol=lf",
            "*.bat text eol=crlf",
            "*.psd filter=lfs diff=lfs merge=lfs -text",
            "secret/** filter=git-crypt diff=git-crypt",
            "*.c ident",
            "*.txt working-tree-encoding=UTF-16LE",
            "[attr]big filter=lfs",
            "*.vcproj crlf=input",
            "  *.md   TEXT",
        ] {
            assert!(attributes_convert(converting.as_bytes()), "{converting}");
        }
        for harmless in [
            "*.png binary",
            "*.jpg -text -diff",
            "*.lock !eol linguist-generated",
            "# * text=auto",
            "docs/** linguist-documentation",
            "text.md diff=markdown",
            "",
        ] {
            assert!(!attributes_convert(harmless.as_bytes()), "{harmless}");
        }
        assert!(attributes_convert(b"*.png binary\n* text=auto\n"));
    }

    #[test]
    fn a_repository_may_convert_through_its_info_attributes_or_autocrlf() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        std::fs::write(dir.path().join(".gitattributes"), "*.png binary\n").unwrap();
        let worktree = [b".gitattributes".as_slice()];
        // (The user's and the system's files are read too; on a machine where
        // they convert, only the "may" half of this test means anything.)
        let baseline = may_convert(&repo, dir.path(), worktree, &UserDirs::default());
        std::fs::write(dir.path().join(".gitattributes"), "*.png binary\n* text\n").unwrap();
        assert!(may_convert(
            &repo,
            dir.path(),
            worktree,
            &UserDirs::default()
        ));
        std::fs::write(dir.path().join(".gitattributes"), "*.png binary\n").unwrap();
        std::fs::create_dir_all(repo.path().join("info")).unwrap();
        std::fs::write(repo.path().join("info/attributes"), "*.bin filter=lfs\n").unwrap();
        assert!(may_convert(
            &repo,
            dir.path(),
            worktree,
            &UserDirs::default()
        ));
        std::fs::remove_file(repo.path().join("info/attributes")).unwrap();
        repo.config()
            .unwrap()
            .set_str("core.autocrlf", "input")
            .unwrap();
        assert!(may_convert(
            &repo,
            dir.path(),
            worktree,
            &UserDirs::default()
        ));
        repo.config()
            .unwrap()
            .set_str("core.autocrlf", "false")
            .unwrap();
        assert_eq!(
            may_convert(&repo, dir.path(), worktree, &UserDirs::default()),
            baseline
        );
    }

    /// A submodule `.gitmodules` places outside the repository (or a path
    /// that is no checked-out work tree) is never opened: its objects are not
    /// read, even though they would hash right. One inside it is.
    #[test]
    fn blobs_are_read_from_submodules_inside_the_repository_only() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let inside = ws.join("sub");
        let outside = dir.path().join("outside");
        let main = git2::Repository::init(&ws).unwrap();
        let sub = git2::Repository::init(&inside).unwrap();
        let far = git2::Repository::init(&outside).unwrap();
        let id = |o: git2::Oid| <[u8; 20]>::try_from(o.as_bytes()).unwrap();
        let in_sub = id(sub.blob(b"in the submodule\n").unwrap());
        let far_away = id(far.blob(b"outside the workspace\n").unwrap());
        std::fs::write(
            ws.join(".gitmodules"),
            "[submodule \"sub\"]\n\tpath = sub\n\turl = ./sub\n\
             [submodule \"far\"]\n\tpath = ../outside\n\turl = ../outside\n",
        )
        .unwrap();
        drop(main);
        assert_eq!(
            Repos::new(&ws).read_blob(&in_sub).as_deref(),
            Some(&b"in the submodule\n"[..])
        );
        assert_eq!(Repos::new(&ws).read_blob(&far_away), None);
        // (Directly, too: the path check is the helper's.)
        assert!(open_submodule(&ws, b"sub").is_some());
        assert!(open_submodule(&ws, b"../outside").is_none());
    }

    #[test]
    fn blob_ids_match_libgit2() {
        let mut data = Vec::new();
        for n in [0usize, 1, 55, 56, 63, 64, 65, 1000, 70_000] {
            data.resize(n, 0);
            for (i, b) in data.iter_mut().enumerate() {
                *b = (i * 31 % 251) as u8;
            }
            assert_eq!(blob_id(&data), blob_id_checked(&data), "{n} bytes");
        }
        // git hash-object of an empty file.
        assert_eq!(blob_id(b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
    }

    #[test]
    fn a_damaged_object_is_not_read_as_the_blob_it_claims_to_be() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let good = repo.blob(b"hello\n").unwrap();
        let other = repo.blob(b"world\n").unwrap();
        let id = |o: git2::Oid| <[u8; 20]>::try_from(o.as_bytes()).unwrap();
        assert_eq!(
            Repos::new(dir.path()).read_blob(&id(good)).as_deref(),
            Some(&b"hello\n"[..])
        );
        // The loose object of `good` now holds `other`'s (valid zlib, wrong bytes).
        let path = |o: git2::Oid| {
            let h = o.to_string();
            dir.path().join(".git/objects").join(&h[..2]).join(&h[2..])
        };
        let bytes = std::fs::read(path(other)).unwrap();
        let target = path(good);
        let mut perm = std::fs::metadata(&target).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perm.set_readonly(false);
        std::fs::set_permissions(&target, perm).unwrap();
        std::fs::write(&target, bytes).unwrap();
        // Freshly opened: no cached repository or object.
        let got = Repos::new(dir.path()).read_blob(&id(good));
        assert_eq!(got, None);
    }
}

/// What moved in git under a rollback: HEAD since the reference checkpoint,
/// and index entries of the paths the rollback wrote that stage neither
/// the file as it is now nor the reference commit's version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Moved {
    /// HEAD at the checkpoint and now, when they differ.
    pub head: Option<(Option<String>, Option<String>)>,
    /// Workspace paths whose index entry stages something else.
    pub staged: Vec<crate::paths::RelPath>,
}

/// Compares the repository the workspace at `root` lies in with `was` (a
/// checkpoint's git state) for the `written` paths. Read-only: ckpt never
/// writes `.git/`. `None` outside a git work tree.
pub fn moved_since(
    root: &Path,
    was: &GitState,
    written: &[crate::paths::RelPath],
    file_id: &dyn Fn(&crate::paths::RelPath) -> Option<String>,
) -> Option<Moved> {
    use std::os::unix::ffi::OsStrExt;
    let (repo, inner) = open_containing(root)?;
    let now = repo
        .head()
        .ok()
        .and_then(|h| h.target())
        .map(|o| o.to_string());
    let mut out = Moved::default();
    if now != was.head {
        out.head = Some((was.head.clone(), now));
    }
    let tree = was
        .head
        .as_deref()
        .and_then(|h| git2::Oid::from_str(h).ok())
        .and_then(|o| repo.find_commit(o).ok())
        .and_then(|c| c.tree().ok());
    let index = repo.index().ok()?;
    for rel in written {
        let mut key = inner.clone();
        key.extend_from_slice(rel.as_bytes());
        let staged = index.get_path(Path::new(std::ffi::OsStr::from_bytes(&key)), 0);
        let committed = tree
            .as_ref()
            .and_then(|t| {
                t.get_path(Path::new(std::ffi::OsStr::from_bytes(&key)))
                    .ok()
            })
            .map(|e| e.id());
        let staged_id = staged.as_ref().map(|e| e.id);
        if staged_id == committed {
            continue;
        }
        // Staging the file as it is now is the user's business.
        if staged_id.map(|o| o.to_string()) == file_id(rel) {
            continue;
        }
        out.staged.push(rel.clone());
    }
    Some(out)
}
