//! The raw walker against the walk it replaced (the `ignore` crate's parallel
//! walker, configured as ckpt configured it), kept here as the oracle: the same
//! paths and the same stat data, on hand-built trees and on generated ones.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::*;

/// The walk before the raw walker (`scan::walk` up to this change).
fn oracle(root: &Path, ignore: &[String]) -> io::Result<Vec<(Vec<u8>, Entry)>> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(4);
    oracle_on(root, ignore, threads)
}

/// The oracle on `threads` threads (the crate's idle workers sleep in 1 ms
/// steps, which dominates small walks; one thread never waits).
fn oracle_on(root: &Path, ignore: &[String], threads: usize) -> io::Result<Vec<(Vec<u8>, Entry)>> {
    let mut ib = ignore::gitignore::GitignoreBuilder::new(root);
    for p in ignore {
        ib.add_line(None, p)
            .map_err(|e| io::Error::other(format!("bad ignore pattern `{p}`: {e}")))?;
    }
    let extra = ib.build().map_err(|e| io::Error::other(e.to_string()))?;
    let root_buf = root.to_path_buf();
    let out = Mutex::new(Vec::new());
    let mut wb = ignore::WalkBuilder::new(root);
    wb.hidden(false)
        .require_git(false)
        .follow_links(false)
        .parents(false)
        .threads(threads)
        .filter_entry(move |e| {
            let name = e.file_name().as_bytes();
            if name.eq_ignore_ascii_case(b".git") {
                return false;
            }
            if e.depth() == 1 && name == crate::paths::RUNTIME_DIR.as_bytes() {
                return false;
            }
            let is_dir = e.file_type().is_some_and(|t| t.is_dir());
            !extra.matched(e.path(), is_dir).is_ignore()
        });
    wb.build_parallel().run(|| {
        let out = &out;
        let root = root_buf.clone();
        Box::new(move |res| {
            use ignore::WalkState;
            let Ok(e) = res else {
                return WalkState::Continue;
            };
            let Some(ft) = e.file_type() else {
                return WalkState::Continue;
            };
            if !(ft.is_file() || ft.is_symlink()) {
                return WalkState::Continue;
            }
            let Ok(rel) = e.path().strip_prefix(&root) else {
                return WalkState::Continue;
            };
            let Ok(md) = e.metadata() else {
                return WalkState::Continue;
            };
            out.lock().unwrap_or_else(|p| p.into_inner()).push((
                rel.as_os_str().as_bytes().to_vec(),
                Entry {
                    symlink: ft.is_symlink(),
                    mode: md.mode() & 0o777,
                    size: md.size(),
                    mtime_ns: md.mtime() * 1_000_000_000 + md.mtime_nsec(),
                    ctime_ns: md.ctime() * 1_000_000_000 + md.ctime_nsec(),
                    ino: md.ino(),
                    hash: None,
                    git_oid: None,
                },
            ));
            WalkState::Continue
        })
    });
    Ok(out.into_inner().unwrap_or_else(|p| p.into_inner()))
}

fn sorted(mut v: Vec<(Vec<u8>, Entry)>) -> Vec<(Vec<u8>, Entry)> {
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

const ONE_THREAD: Opts = Opts {
    threads: 1,
    spawn_after: usize::MAX,
    backend: Backend::Native,
};
const TWO_THREADS_AT_ONCE: Opts = Opts {
    threads: 2,
    spawn_after: 0,
    backend: Backend::Native,
};
/// The portable listing (`readdir`), which platforms without `getdents64`
/// run.
const PORTABLE: Opts = Opts {
    threads: 2,
    spawn_after: 0,
    backend: Backend::Portable,
};

/// Differences between two sorted walks, for failure messages.
fn diff(want: &[(Vec<u8>, Entry)], got: &[(Vec<u8>, Entry)]) -> String {
    let show = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
    let w: std::collections::BTreeMap<_, _> = want.iter().map(|(k, e)| (k, e)).collect();
    let g: std::collections::BTreeMap<_, _> = got.iter().map(|(k, e)| (k, e)).collect();
    let mut s = String::new();
    for (k, e) in &w {
        match g.get(k) {
            None => s += &format!("  missing: {}\n", show(k)),
            Some(x) if x != e => s += &format!("  differs: {}: {e:?} vs {x:?}\n", show(k)),
            _ => {}
        }
    }
    for k in g.keys().filter(|k| !w.contains_key(*k)) {
        s += &format!("  extra: {}\n", show(k));
    }
    s
}

/// Asserts the walkers agree with the oracle on `root` (one thread, two,
/// and the portable listing); returns the walk.
fn check(root: &Path, ignore: &[String], what: &str) -> Vec<(Vec<u8>, Entry)> {
    check_with(root, ignore, what, oracle(root, ignore).unwrap())
}

fn check_with(
    root: &Path,
    ignore: &[String],
    what: &str,
    want: Vec<(Vec<u8>, Entry)>,
) -> Vec<(Vec<u8>, Entry)> {
    let want = sorted(want);
    for opts in [ONE_THREAD, TWO_THREADS_AT_ONCE, PORTABLE] {
        let got = sorted(walk_with(root, ignore, opts).unwrap());
        assert!(
            got == want,
            "{what} ({opts:?}): raw walker differs from the ignore crate:\n{}",
            diff(&want, &got)
        );
    }
    want
}

fn keys(v: &[(Vec<u8>, Entry)]) -> Vec<&[u8]> {
    v.iter().map(|(k, _)| k.as_slice()).collect()
}

fn at(root: &Path, rel: &[u8]) -> PathBuf {
    root.join(OsStr::from_bytes(rel))
}

fn file(root: &Path, rel: &[u8], body: &str) {
    let p = at(root, rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

fn dir(root: &Path, rel: &[u8]) {
    std::fs::create_dir_all(at(root, rel)).unwrap();
}

fn link(root: &Path, rel: &[u8], target: &str) {
    let p = at(root, rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, p).unwrap();
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_hand_built_tree_walks_as_the_ignore_crate_walked_it() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let f = |rel: &str| file(r, rel.as_bytes(), rel);
    // Root rules: globs, an anchored pattern, dir-only patterns, negations, a
    // negation that cannot reach into an ignored directory.
    file(
        r,
        b".gitignore",
        "*.log\n!keep.log\n/anchored.txt\nbuild/\nonly_dirs/\ndocs/*.md\n!docs/important.md\n\
         ignored_dir/\n!ignored_dir/keep.txt\n**/gen/**\na/**/deep.txt\n# comment\n\n\\#hash\n\
         link_dir/\n*.bin\n",
    );
    // `.ignore` outranks `.gitignore` at any depth.
    file(r, b".ignore", "dotignored\n!sub/forced.tmp\n");
    for p in [
        "keep.log",
        "x.log",
        "anchored.txt",
        "sub/anchored.txt",
        "build/out.o",
        "sub/build/out.o",
        "docs/a.md",
        "docs/important.md",
        "docs/inner/b.md",
        "ignored_dir/keep.txt",
        "ignored_dir/other.txt",
        "a/only_dirs",
        "b/only_dirs/x.txt",
        "gen/x.txt",
        "sub/gen/y.txt",
        "a/deep.txt",
        "a/b/c/deep.txt",
        "#hash",
        "dotignored",
        "sub/dotignored",
        "plain.txt",
    ] {
        f(p);
    }
    // A deeper `.gitignore` overrides a shallower one; its anchored pattern is
    // anchored to its own directory.
    file(
        r,
        b"sub/.gitignore",
        "!*.log\nlocal_only\n/anchored_sub\n*.tmp\n",
    );
    for p in [
        "sub/a.log",
        "sub/local_only",
        "sub/x/local_only",
        "sub/anchored_sub",
        "sub/x/anchored_sub",
        "anchored_sub",
        "sub/forced.tmp",
        "sub/other.tmp",
        "sub/deeper/x.tmp",
        "sub/deeper/y.txt",
        "sub/deeper/z.txt",
    ] {
        f(p);
    }
    file(r, b"sub/deeper/.ignore", "!x.tmp\ny.txt\n");
    // git metadata: never entered, any case, at any level; `info/exclude` of
    // every directory holding a `.git`.
    file(r, b".git/info/exclude", "excluded_by_info\n");
    file(r, b".git/HEAD", "ref: refs/heads/main\n");
    f("excluded_by_info");
    f("sub/excluded_by_info");
    file(
        r,
        b"nested/.git/info/exclude",
        "nested_excluded\n!excluded_by_info\n",
    );
    f("nested/nested_excluded");
    f("nested/excluded_by_info");
    f("nested_excluded");
    f("caps/.GIT/config");
    f("caps/.Git");
    f("caps/kept.txt");
    // A linked worktree: `.git` is a file naming a gitdir whose commondir has
    // the exclude file; a submodule-style `.git` file without commondir adds
    // nothing.
    let common = r.join("wt-common");
    file(r, b"wt-common/info/exclude", "wt_excluded\n");
    file(r, b"wt-common/worktrees/w/commondir", "../..\n");
    file(
        r,
        b"wt/.git",
        &format!("gitdir: {}\n", common.join("worktrees/w").display()),
    );
    f("wt/wt_excluded");
    f("wt/wt_kept");
    file(r, b"sm/.git", "gitdir: ../.git/modules/sm\n");
    f("sm/x.txt");
    // The runtime directory only at the top.
    f(".agent-runtime/ledger.jsonl");
    f("sub/.agent-runtime/kept");
    // Symlinks: recorded, never followed, dir-only patterns do not match them.
    link(r, b"to_file", "plain.txt");
    link(r, b"to_dir", "sub");
    link(r, b"dangling", "nowhere");
    link(r, b"link_dir", "sub");
    link(r, b"sub/to_git", "../.git");
    // A `.gitignore` that is a symlink is read through it.
    file(r, b"linked_rules/real_rules", "hidden_by_link\n");
    link(r, b"linked_rules/.gitignore", "real_rules");
    f("linked_rules/hidden_by_link");
    // Non-UTF-8 names, also matched by patterns.
    file(r, b"caf\xe9.txt", "latin-1");
    file(r, b"\xfe.bin", "bin");
    file(r, b"d\xff/inner.txt", "x");
    file(r, b"d\xff/.gitignore", "*.skip\n");
    file(r, b"d\xff/\xfa.skip", "x");
    // Config patterns.
    f("secret/key");
    f("x.bak");
    f("keep.bak");
    f("top_only.txt");
    f("sub/top_only.txt");
    // Modes, empty files, a FIFO (not recorded).
    file(r, b"empty", "");
    std::fs::set_permissions(
        r.join("plain.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(r.join("fifo"))
            .status()
            .is_ok_and(|s| s.success())
    );
    let cfg_ignore = strings(&["secret/", "*.bak", "!keep.bak", "/top_only.txt"]);
    let got = check(r, &cfg_ignore, "hand-built tree");
    let ks = keys(&got);
    let has = |k: &[u8]| ks.contains(&k);
    // Spot checks that the tree exercises what it claims to.
    for k in [
        &b"keep.log"[..],
        b"sub/anchored.txt",
        b"a/only_dirs",
        b"docs/important.md",
        b"docs/inner/b.md",
        b"sub/a.log",
        b"sub/x/anchored_sub",
        b"anchored_sub",
        b"sub/forced.tmp",
        b"sub/deeper/x.tmp",
        b"sub/deeper/z.txt",
        b"nested/excluded_by_info",
        b"caps/kept.txt",
        b"wt/wt_kept",
        b"sm/x.txt",
        b"sub/.agent-runtime/kept",
        b"to_dir",
        b"link_dir",
        b"dangling",
        b"sub/to_git",
        b"linked_rules/.gitignore",
        b"caf\xe9.txt",
        b"d\xff/inner.txt",
        b"keep.bak",
        b"sub/top_only.txt",
        b"empty",
    ] {
        assert!(has(k), "{} should be walked", String::from_utf8_lossy(k));
    }
    for k in [
        &b"x.log"[..],
        b"anchored.txt",
        b"build/out.o",
        b"sub/build/out.o",
        b"docs/a.md",
        b"ignored_dir/keep.txt",
        b"b/only_dirs/x.txt",
        b"gen/x.txt",
        b"a/b/c/deep.txt",
        b"dotignored",
        b"sub/local_only",
        b"sub/anchored_sub",
        b"sub/other.tmp",
        b"sub/deeper/y.txt",
        b"excluded_by_info",
        b"sub/excluded_by_info",
        b"nested/nested_excluded",
        b"caps/.Git",
        b"wt/wt_excluded",
        b"linked_rules/hidden_by_link",
        b"\xfe.bin",
        b"d\xff/\xfa.skip",
        b"secret/key",
        b"x.bak",
        b"top_only.txt",
        b"#hash",
        b"fifo",
    ] {
        assert!(!has(k), "{} should be skipped", String::from_utf8_lossy(k));
    }
    assert!(!ks.iter().any(|k| k.starts_with(b".git/")));
    assert!(!ks.iter().any(|k| k.starts_with(b".agent-runtime/")));
    assert!(!ks.iter().any(|k| k.starts_with(b"to_dir/")));
    let plain = &got.iter().find(|(k, _)| k == b"plain.txt").unwrap().1;
    assert_eq!(plain.mode, 0o755);
    assert!(got.iter().find(|(k, _)| k == b"to_dir").unwrap().1.symlink);

    // A bad config pattern is an error for both.
    let bad = strings(&["a/**/[z"]);
    assert!(oracle(r, &bad).is_ok() == walk_with(r, &bad, ONE_THREAD).is_ok());
}

#[test]
fn unreadable_directories_are_skipped_as_before() {
    if rustix::process::geteuid().is_root() {
        // Root reads every directory; nothing to test.
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    file(r, b"open/a", "a");
    file(r, b"closed/b", "b");
    file(r, b"listonly/c", "c");
    file(r, b"searchonly/d", "d");
    let mode = |p: &str, m| std::fs::set_permissions(r.join(p), PermissionsExt::from_mode(m));
    mode("closed", 0o000).unwrap();
    mode("listonly", 0o400).unwrap();
    mode("searchonly", 0o100).unwrap();
    let got = check(r, &[], "unreadable directories");
    for p in ["closed", "listonly", "searchonly"] {
        mode(p, 0o700).unwrap();
    }
    assert_eq!(keys(&got), vec![&b"open/a"[..]]);
}

#[test]
fn a_root_that_cannot_be_opened_is_an_error() {
    let t = tempfile::tempdir().unwrap();
    assert!(walk_with(&t.path().join("missing"), &[], ONE_THREAD).is_err());
    file(t.path(), b"f", "");
    assert!(walk_with(&t.path().join("f"), &[], ONE_THREAD).is_err());
}

#[test]
fn entries_that_vanish_or_appear_mid_walk_are_skipped_or_seen_never_errors() {
    let t = in_memory_tempdir();
    let r = t.path().to_path_buf();
    let mut stable = Vec::new();
    for i in 0..40 {
        let k = format!("s{}/f{i}", i % 5);
        file(&r, k.as_bytes(), "x");
        stable.push(k.into_bytes());
    }
    dir(&r, b"churn");
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
    let stop = AtomicBool::new(false);
    let rounds = AtomicU32::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0u32;
            while !stop.load(Relaxed) {
                // Files and whole directories come and go; one name flips
                // between a file, a directory and a symlink.
                let d = r.join(format!("churn/d{}", i % 7));
                let _ = std::fs::create_dir_all(d.join("sub"));
                let _ = std::fs::write(d.join("sub/f"), "y");
                let _ = std::fs::write(r.join(format!("churn/f{}", i % 11)), "z");
                let flip = r.join("churn/flip");
                let _ = std::fs::remove_dir_all(&flip).or_else(|_| std::fs::remove_file(&flip));
                let _ = match i % 3 {
                    0 => std::fs::write(&flip, "f"),
                    1 => std::fs::create_dir(&flip),
                    _ => std::os::unix::fs::symlink("nowhere", &flip),
                };
                if i.is_multiple_of(2) {
                    let _ = std::fs::remove_dir_all(&d);
                    let _ = std::fs::remove_file(r.join(format!("churn/f{}", (i + 5) % 11)));
                }
                i = i.wrapping_add(1);
                rounds.store(i, Relaxed);
            }
        });
        // Walk while the tree changes: at least 50 walks and 300 rounds of
        // changes (at most 10 s).
        let start = std::time::Instant::now();
        let mut walks = 0;
        while (walks < 50 || rounds.load(Relaxed) < 300) && start.elapsed().as_secs() < 10 {
            let opts = [ONE_THREAD, TWO_THREADS_AT_ONCE, PORTABLE][walks % 3];
            walks += 1;
            let got = walk_with(&r, &[], opts).expect("a churning tree still walks");
            let ks = keys(&got);
            for k in &stable {
                assert!(ks.contains(&k.as_slice()), "stable entry missing");
            }
            assert!(
                ks.iter()
                    .all(|k| k.starts_with(b"s") || k.starts_with(b"churn/"))
            );
        }
        stop.store(true, Relaxed);
    });
}

/// The global excludes file is found through the environment and matched
/// relative to the current directory, so this runs in a child process:
/// `global_excludes_child` with `GIT_CONFIG_GLOBAL` set, once from the walked
/// root (anchored patterns apply) and once from elsewhere.
#[test]
fn the_global_excludes_file_is_honoured_as_before() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ws");
    for p in [
        "x.glob",
        "keep.glob",
        "anchored_glob",
        "sub/anchored_glob",
        "gdir/f",
        "sub/y.glob",
        "plain",
    ] {
        file(&root, p.as_bytes(), p);
    }
    // Local rules outrank the global file.
    file(&root, b"sub/.gitignore", "!y.glob\n");
    let excludes = t.path().join("global-excludes");
    std::fs::write(&excludes, "*.glob\n!keep.glob\n/anchored_glob\ngdir/\n").unwrap();
    let gitconfig = t.path().join("gitconfig");
    std::fs::write(
        &gitconfig,
        format!("[core]\n\texcludesFile = {}\n", excludes.display()),
    )
    .unwrap();
    // The same rules as git's default global file, named by no configuration.
    let (home, empty) = (t.path().join("home"), t.path().join("empty-config"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(&empty, "[user]\n\tname = x\n").unwrap();
    file(
        &t.path().join("xdg/git"),
        b"ignore",
        &std::fs::read_to_string(&excludes).unwrap(),
    );
    let runs = [
        (root.clone(), true, &gitconfig),
        (t.path().to_path_buf(), false, &gitconfig),
        (root.clone(), true, &empty),
    ];
    for (cwd, anchored, config) in runs {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        if config == &empty {
            child
                .env("HOME", &home)
                .env("XDG_CONFIG_HOME", t.path().join("xdg"));
        }
        let out = child
            .args([
                "--exact",
                "scan::walker::tests::global_excludes_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .current_dir(&cwd)
            .env("GIT_CONFIG_GLOBAL", config)
            .env("CKPT_TEST_WALK_ROOT", &root)
            .env("CKPT_TEST_WALK_ANCHORED", if anchored { "1" } else { "0" })
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "child walk from {}: {text}",
            cwd.display()
        );
    }
}

#[test]
#[ignore = "run by the_global_excludes_file_is_honoured_as_before"]
fn global_excludes_child() {
    let Some(root) = std::env::var_os("CKPT_TEST_WALK_ROOT") else {
        return;
    };
    let anchored = std::env::var_os("CKPT_TEST_WALK_ANCHORED").is_some_and(|v| v == "1");
    // Found without the crate's regex when no configuration mentions it.
    assert_eq!(
        global_excludes_path(&UserDirs::from_env()),
        ignore::gitignore::gitconfig_excludes_path()
    );
    let got = check(Path::new(&root), &[], "global excludes");
    let ks = keys(&got);
    assert!(
        !ks.contains(&&b"x.glob"[..]),
        "the global file was not read"
    );
    assert!(!ks.contains(&&b"gdir/f"[..]));
    assert!(ks.contains(&&b"keep.glob"[..]));
    assert!(ks.contains(&&b"sub/y.glob"[..]));
    assert!(ks.contains(&&b"sub/anchored_glob"[..]));
    assert_eq!(ks.contains(&&b"anchored_glob"[..]), !anchored);
}

/// splitmix64: a small seeded generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, pct: usize) -> bool {
        self.below(100) < pct
    }
    fn pick<'a, T: ?Sized>(&mut self, xs: &[&'a T]) -> &'a T {
        xs[self.below(xs.len())]
    }
}

/// Names drawn from a small set, so patterns hit often.
const NAMES: &[&[u8]] = &[
    b"a",
    b"b",
    b"c",
    b"a.log",
    b"b.rs",
    b"c.txt",
    b"gen",
    b"build",
    b".hidden",
    b".agent-runtime",
    b"caf\xe9",
    b"x\xff.rs",
    b"A",
    b"[ab]",
    b"#c",
    b"!b",
];

/// Pattern lines: plain names, globs, anchored, dir-only, negated, `**`.
fn pattern(rng: &mut Rng) -> String {
    let base = rng.pick(&[
        "a",
        "b",
        "c",
        "*.log",
        "*.rs",
        "*.txt",
        "gen",
        "build",
        ".hidden",
        "a/b",
        "a/*",
        "*/c",
        "**/b",
        "a/**/c",
        "b/**",
        "**",
        "*",
        "[ab]",
        "\\[ab]",
        "\\#c",
        "\\!b",
        "c.*",
        "?",
        "a?",
        "**/gen/**",
        "x*",
        "caf*",
        "A",
        "b.rs",
        ".agent-runtime",
    ]);
    let mut s = String::new();
    if rng.chance(25) {
        s.push('!');
    }
    if rng.chance(20) && !base.starts_with("**") {
        s.push('/');
    }
    s.push_str(base);
    if rng.chance(20) && !base.ends_with("**") {
        s.push('/');
    }
    if rng.chance(5) {
        s.push_str("   ");
    }
    s
}

fn rules_file(rng: &mut Rng) -> String {
    let mut s = String::new();
    for _ in 0..1 + rng.below(4) {
        s.push_str(&pattern(rng));
        s.push('\n');
    }
    if rng.chance(10) {
        s.push_str("# comment\n\n");
    }
    s
}

/// Fills `rel` (an existing directory under `root`) with random entries,
/// `depth` more levels. Few syscalls: file system metadata operations are what
/// this test spends its time on.
fn gen_dir(rng: &mut Rng, root: &Path, rel: &[u8], depth: usize, count: &mut usize) {
    let base = at(root, rel);
    if rng.chance(35) {
        std::fs::write(base.join(".gitignore"), rules_file(rng)).unwrap();
    }
    if rng.chance(15) {
        std::fs::write(base.join(".ignore"), rules_file(rng)).unwrap();
    }
    if rng.chance(10) {
        std::fs::create_dir_all(base.join(".git/info")).unwrap();
        std::fs::write(base.join(".git/info/exclude"), rules_file(rng)).unwrap();
    }
    let mut used = std::collections::HashSet::new();
    for _ in 0..2 + rng.below(6) {
        if *count > 50 {
            return;
        }
        let name = rng.pick(NAMES);
        if !used.insert(name) {
            continue;
        }
        *count += 1;
        let p = base.join(OsStr::from_bytes(name));
        match rng.below(10) {
            0..=4 => std::fs::write(p, "f").unwrap(),
            5..=7 if depth > 0 => {
                std::fs::create_dir(&p).unwrap();
                let mut k = rel.to_vec();
                if !k.is_empty() {
                    k.push(b'/');
                }
                k.extend_from_slice(name);
                gen_dir(rng, root, &k, depth - 1, count);
            }
            8 => {
                let target = rng.pick(&["a", "..", "b/c", "nowhere", ".git"]);
                std::os::unix::fs::symlink(target, p).unwrap();
            }
            _ => std::fs::write(p, "").unwrap(),
        }
    }
}

/// A temporary directory on tmpfs when there is one: creating and removing
/// thousands of small trees on a busy disk file system took seconds (walking
/// them takes a fraction of that); the walk does not depend on the file system.
fn in_memory_tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(t) = tempfile::tempdir_in(shm)
    {
        return t;
    }
    tempfile::tempdir().unwrap()
}

#[test]
fn generated_trees_walk_as_the_ignore_crate_walked_them() {
    // More cases by hand: CKPT_WALK_CASES=20000.
    let cases = std::env::var("CKPT_WALK_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200u64);
    let (mut total, mut created) = (0, 0);
    for case in 0..cases {
        let mut rng = Rng(0xc4_7e57 + case);
        let t = in_memory_tempdir();
        let r = t.path();
        let mut count = 0;
        gen_dir(&mut rng, r, b"", 3, &mut count);
        created += count;
        let cfg_ignore: Vec<String> = (0..rng.below(3)).map(|_| pattern(&mut rng)).collect();
        let want = oracle_on(r, &cfg_ignore, 1).unwrap();
        let what = format!("case {case}, config {cfg_ignore:?}");
        total += check_with(r, &cfg_ignore, &what, want).len();
    }
    // The generator must produce trees with something left in them.
    assert!(
        total > created / 4,
        "only {total} of {created} entries walked in {cases} cases"
    );
}

/// The stat-walk floor of PERFORMANCE.md §2.1 (`benches/common/workload.rs`
/// `stat_walk`): `read_dir` plus an `fstatat` of every entry, one thread,
/// honouring only the root `.gitignore` read naively (`dir/`, `*suffix`,
/// names); also skips the top-level `.agent-runtime` like the walk.
fn floor_walk(root: &Path) -> usize {
    let text = std::fs::read_to_string(root.join(".gitignore")).unwrap_or_default();
    let (mut dirs, mut suffixes, mut names) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let line = line.trim_start_matches('/');
        if let Some(d) = line.strip_suffix('/') {
            dirs.push(d.as_bytes().to_vec());
        } else if let Some(x) = line.strip_prefix('*') {
            suffixes.push(x.as_bytes().to_vec());
        } else {
            names.push(line.as_bytes().to_vec());
        }
    }
    let mut n = 0;
    let mut stack = vec![(root.to_path_buf(), true)];
    while let Some((d, top)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.as_bytes();
            let Ok(md) = e.metadata() else { continue };
            let is_dir = md.is_dir();
            if name == b".git"
                || (top && name == b".agent-runtime")
                || (is_dir && dirs.iter().any(|x| x == name))
                || names.iter().any(|x| x == name)
                || suffixes.iter().any(|x| name.ends_with(x))
            {
                continue;
            }
            if is_dir {
                stack.push((e.path(), false));
            } else {
                n += 1;
            }
        }
    }
    n
}

/// In-process timing of both walkers on the trees named in
/// `CKPT_WALK_BENCH` (colon-separated): `cargo test --release --lib
/// walk_timing -- --ignored --nocapture`. Read only.
#[test]
#[ignore = "timing, run by hand"]
#[allow(clippy::print_stderr)]
fn walk_timing() {
    use std::time::{Duration, Instant};
    let Some(roots) = std::env::var_os("CKPT_WALK_BENCH") else {
        return;
    };
    let runs: usize = std::env::var("CKPT_WALK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    // CKPT_WALK_ONLY=i runs variant i alone (for `perf stat`).
    let only: Option<usize> = std::env::var("CKPT_WALK_ONLY")
        .ok()
        .and_then(|v| v.parse().ok());
    for root in std::env::split_paths(&roots) {
        if only.is_none() {
            let n = sorted(oracle(&root, &[]).unwrap());
            assert!(
                n == sorted(
                    walk(&root, &[], None, &UserDirs::from_env(), Backend::Native)
                        .unwrap()
                        .entries
                        .to_pairs()
                ),
                "walks differ"
            );
        }
        type Run<'a> = Box<dyn Fn() -> usize + 'a>;
        let mut variants: Vec<(String, Run)> = vec![
            (
                "ignore crate".into(),
                Box::new(|| oracle(&root, &[]).unwrap().len()),
            ),
            (
                "raw, default".into(),
                Box::new(|| {
                    walk(&root, &[], None, &UserDirs::from_env(), Backend::Native)
                        .unwrap()
                        .entries
                        .len()
                }),
            ),
        ];
        variants.push(("floor (1 thread)".into(), Box::new(|| floor_walk(&root))));
        // CKPT_WALK_SPAWN=0,256,max: the helper thread after that many entries
        // (max: never).
        let spawn = std::env::var("CKPT_WALK_SPAWN").unwrap_or_else(|_| "max,0".into());
        for at in spawn.split(',') {
            let (name, opts) = match at.parse() {
                Ok(n) => (
                    format!("raw, 2 after {n}"),
                    Opts {
                        threads: 2,
                        spawn_after: n,
                        backend: Backend::Native,
                    },
                ),
                Err(_) => ("raw, 1 thread".to_string(), ONE_THREAD),
            };
            let root = &root;
            variants.push((
                name,
                Box::new(move || walk_with(root, &[], opts).unwrap().len()),
            ));
        }
        let mut times = vec![Vec::new(); variants.len()];
        let mut entries = 0;
        for _ in 0..runs {
            for (i, (_, f)) in variants.iter().enumerate() {
                if only.is_some_and(|o| o != i) {
                    continue;
                }
                let t = Instant::now();
                entries = std::hint::black_box(f());
                times[i].push(t.elapsed());
            }
        }
        eprintln!("{} ({entries} entries, {runs} runs):", root.display());
        for (i, (name, _)) in variants.iter().enumerate() {
            let v = &mut times[i];
            if v.is_empty() {
                continue;
            }
            let m = median(v);
            eprintln!(
                "  {name:18} median {:8.3} ms  (min {:.3}, max {:.3})",
                m.as_secs_f64() * 1e3,
                v[0].as_secs_f64() * 1e3,
                v[v.len() - 1].as_secs_f64() * 1e3
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Walks that use the previous one (`Known`): only changed directories listed.

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// A walk and when it started.
struct Base {
    taken_ns: i64,
    w: Walked,
}

fn base_walk(root: &Path, ignore: &[String], known: Option<&Known<'_>>, opts: Opts) -> Base {
    let taken_ns = now_ns();
    let w = walk_known(root, ignore, opts, known, &UserDirs::from_env()).unwrap();
    Base { taken_ns, w }
}

impl Base {
    /// What the next walk knows; `quiet_until` overrides when this walk
    /// started (a later time trusts every directory whose stat data is the
    /// same, as if the tree had been quiet since).
    fn known(&self, quiet_until: Option<i64>) -> Known<'_> {
        Known::new(
            quiet_until.unwrap_or(self.taken_ns),
            self.w.global,
            self.w.dirs.iter().map(|(k, d)| (k.as_slice(), *d)),
            &self.w.entries,
        )
    }
}

/// Walks `root` knowing `base`, on one thread and on two; asserts the result
/// is what a full listing (and the `ignore` crate) finds; returns the
/// one-thread walk.
fn check_known(
    root: &Path,
    ignore: &[String],
    base: &Base,
    quiet: Option<i64>,
    what: &str,
) -> Base {
    let want = sorted(oracle_on(root, ignore, 1).unwrap());
    let known = base.known(quiet);
    let mut first = None;
    for opts in [ONE_THREAD, TWO_THREADS_AT_ONCE, PORTABLE] {
        let b = base_walk(root, ignore, Some(&known), opts);
        let got = sorted(b.w.entries.to_pairs());
        assert!(
            got == want,
            "{what} ({opts:?}): the walk knowing the last one differs from a full listing:\n{}",
            diff(&want, &got)
        );
        // Every entry is paired with the same path of the known walk, if it
        // had it (the index `fresh` and `post` compare against).
        for (i, (k, _)) in b.w.entries.iter().enumerate() {
            let had = base.w.entries.iter().position(|(bk, _)| bk == k);
            assert_eq!(
                b.w.old[i].map(|j| j as usize),
                had,
                "{what} ({opts:?}): `{}` paired wrongly",
                String::from_utf8_lossy(k)
            );
        }
        assert_eq!(b.w.old.len(), b.w.entries.len());
        first.get_or_insert(b);
    }
    first.unwrap()
}

#[test]
fn a_known_walk_lists_only_what_changed_and_finds_every_change() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    file(r, b".gitignore", "build/\n*.log\n");
    file(r, b"src/a.rs", "a");
    file(r, b"src/deep/b.rs", "b");
    file(r, b"src/deep/er/c.rs", "c");
    file(r, b"docs/d.md", "d");
    file(r, b"build/out.o", "o");
    file(r, b"x.log", "l");
    link(r, b"src/l", "a.rs");
    let all_dirs = 5; // root, src, src/deep, src/deep/er, docs
    let pause = || std::thread::sleep(std::time::Duration::from_millis(60));
    pause();
    let first = base_walk(r, &[], None, ONE_THREAD);
    assert_eq!(first.w.listed, all_dirs, "a first walk lists everything");
    assert_eq!(first.w.dirs.len(), all_dirs);

    // Nothing changed: nothing is listed, the same entries come out.
    let b = check_known(r, &[], &first, None, "unchanged");
    assert_eq!(b.w.listed, 0, "an unchanged tree is not listed");

    // A file written in place: its directory is not listed, the new stat is seen.
    pause();
    std::fs::write(r.join("src/deep/er/c.rs"), "c, longer").unwrap();
    let b = check_known(r, &[], &b, None, "a file written in place");
    assert_eq!(b.w.listed, 0);
    let c =
        b.w.entries
            .iter()
            .find(|(k, _)| k == b"src/deep/er/c.rs")
            .unwrap();
    assert_eq!(c.1.size, 9);

    // A file created, one removed, a directory renamed: their parents are listed.
    pause();
    file(r, b"src/deep/new.rs", "n");
    std::fs::remove_file(r.join("docs/d.md")).unwrap();
    std::fs::rename(r.join("src/deep/er"), r.join("src/deep/moved")).unwrap();
    let b = check_known(r, &[], &b, None, "create, remove, rename");
    assert_eq!(b.w.listed, 3, "docs, src/deep and the renamed directory");

    // The root `.gitignore` edited in place (no directory moves): what it
    // stops ignoring appears, what it starts ignoring goes.
    pause();
    std::fs::write(r.join(".gitignore"), "*.log\n*.md\nsrc/deep/moved/\n").unwrap();
    let b = check_known(r, &[], &b, None, "root rules edited in place");
    assert!(b.w.entries.iter().any(|(k, _)| k == b"build/out.o"));
    assert!(
        !b.w.entries
            .iter()
            .any(|(k, _)| k.starts_with(b"src/deep/moved"))
    );

    // A new rule file deep down ignores a file that was walked.
    pause();
    file(r, b"src/deep/.ignore", "new.rs\n");
    let b = check_known(r, &[], &b, None, "a new .ignore");
    assert!(!b.w.entries.iter().any(|(k, _)| k == b"src/deep/new.rs"));

    // A rule file changed under an unchanged directory: it, and what is
    // below, is matched again.
    pause();
    std::fs::write(r.join("src/deep/.ignore"), "b.rs\n").unwrap();
    let b = check_known(r, &[], &b, None, "a rule file changed in place");
    assert!(b.w.entries.iter().any(|(k, _)| k == b"src/deep/new.rs"));
    assert!(!b.w.entries.iter().any(|(k, _)| k == b"src/deep/b.rs"));

    // Other configuration patterns: everything is listed.
    pause();
    let cfg = strings(&["*.rs"]);
    let known = b.known(None);
    let full = base_walk(r, &cfg, Some(&known), ONE_THREAD);
    assert_eq!(
        full.w.listed,
        full.w.dirs.len(),
        "new patterns list every directory"
    );
    assert!(sorted(full.w.entries.to_pairs()) == sorted(oracle_on(r, &cfg, 1).unwrap()));

    // A directory changed in the tick the known walk started (or later) is
    // listed again although its stat data is the same (a second change in
    // the same clock tick would not move it); once the known walk is dated
    // after its change, it is trusted.
    file(r, b"docs/late.md", "x");
    let just = base_walk(r, &[], None, ONE_THREAD);
    // Dated at the directory's own change, the tick it was made in.
    let changed = {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(r.join("docs")).unwrap();
        (m.mtime() * 1_000_000_000 + m.mtime_nsec()).max(m.ctime() * 1_000_000_000 + m.ctime_nsec())
    };
    let known = just.known(Some(changed));
    let again = base_walk(r, &[], Some(&known), ONE_THREAD);
    assert_eq!(again.w.listed, 1, "only docs/, changed just now, is listed");
    let known = just.known(Some(changed + 1));
    let again = base_walk(r, &[], Some(&known), ONE_THREAD);
    assert_eq!(again.w.listed, 0);
}

#[test]
fn generated_trees_changed_at_random_walk_as_a_full_listing() {
    let cases = std::env::var("CKPT_WALK_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60u64);
    let mut fast = 0;
    for case in 0..cases {
        let mut rng = Rng(0x6e0_c4a7 + case);
        let t = in_memory_tempdir();
        let r = t.path();
        let mut count = 0;
        gen_dir(&mut rng, r, b"", 3, &mut count);
        let cfg: Vec<String> = (0..rng.below(2)).map(|_| pattern(&mut rng)).collect();
        let mut b = base_walk(r, &cfg, None, ONE_THREAD);
        for step in 0..3 {
            // A later tick than anything the walk saw (timestamps are coarse).
            std::thread::sleep(std::time::Duration::from_millis(12));
            let quiet = now_ns();
            std::thread::sleep(std::time::Duration::from_millis(12));
            for _ in 0..1 + rng.below(3) {
                mutate(&mut rng, r);
            }
            let what = format!("case {case} step {step}, config {cfg:?}");
            b = check_known(r, &cfg, &b, Some(quiet), &what);
            fast += b.w.dirs.len() - b.w.listed;
        }
    }
    assert!(fast > 0, "no directory was ever taken as known");
}

/// Every directory under `root` (ignored ones too), relative, `.git` skipped.
fn all_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::new()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(rd) = std::fs::read_dir(root.join(&out[i])) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != ".git" {
                    out.push(out[i].join(e.file_name()));
                }
            }
        }
        i += 1;
    }
    out
}

/// One random change somewhere in the tree.
fn mutate(rng: &mut Rng, root: &Path) {
    let dirs = all_dirs(root);
    let d = root.join(&dirs[rng.below(dirs.len())]);
    let entries: Vec<PathBuf> = std::fs::read_dir(&d)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    let name = OsStr::from_bytes(rng.pick(NAMES));
    match rng.below(8) {
        0 => {
            let _ = std::fs::write(d.join(name), "new");
        }
        1 if !entries.is_empty() => {
            let p = &entries[rng.below(entries.len())];
            if p.is_file() || p.is_symlink() {
                let _ = std::fs::remove_file(p);
            }
        }
        2 if !entries.is_empty() => {
            let p = &entries[rng.below(entries.len())];
            if p.is_file() && !p.is_symlink() {
                let _ = std::fs::write(p, "rewritten in place");
            }
        }
        3 => {
            let _ = std::fs::write(d.join(".gitignore"), rules_file(rng));
        }
        4 => {
            let _ = std::fs::write(d.join(".ignore"), rules_file(rng));
        }
        5 if !entries.is_empty() => {
            let p = &entries[rng.below(entries.len())];
            let _ = std::fs::rename(p, d.join(name));
        }
        6 => {
            let sub = d.join(name);
            if std::fs::create_dir(&sub).is_ok() {
                let _ = std::fs::write(sub.join("a"), "a");
                let _ = std::fs::write(sub.join("b.rs"), "b");
            }
        }
        _ => {
            let _ = std::fs::create_dir_all(d.join(".git/info"));
            let _ = std::fs::write(d.join(".git/info/exclude"), rules_file(rng));
        }
    }
}
