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

/// Returns the work tree top level of the git repository containing `dir`, if any.
pub fn toplevel(dir: &Path) -> Option<PathBuf> {
    let repo = git2::Repository::discover(dir).ok()?;
    repo.workdir().map(|p| {
        let s = p.to_path_buf();
        // git2 reports the work dir with a trailing slash; normalise it away.
        s.components().collect()
    })
}

/// Reads HEAD, branch and dirtiness of the repository whose work tree is `root`.
/// Returns `None` when `root` is not the top of a git work tree.
pub fn state(root: &Path) -> Option<GitState> {
    let repo = git2::Repository::open(root).ok()?;
    repo.workdir()?;
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
