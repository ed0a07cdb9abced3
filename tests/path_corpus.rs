//! T17: the path corpus of RELIABILITY.md §P and §S as payload/ledger paths and
//! as writes through the workspace-confined writer: every one refused with a
//! specific error, nothing created or modified outside the workspace. Plus a
//! symlink-swap race (T16, short form).

use std::os::unix::fs::symlink;
use std::path::Path;

use crate::common::TestEnv;

fn outside_untouched(outside: &Path) {
    let entries: Vec<_> = std::fs::read_dir(outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        entries,
        vec![std::ffi::OsString::from("keep.txt")],
        "nothing created outside"
    );
    assert_eq!(
        std::fs::read(outside.join("keep.txt")).unwrap(),
        b"outside\n",
        "nothing modified outside"
    );
}

fn setup() -> (TestEnv, std::path::PathBuf) {
    let env = TestEnv::init();
    let outside = env.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("keep.txt"), b"outside\n").unwrap();
    (env, outside)
}

#[test]
fn payload_paths_are_refused_with_specific_codes() {
    let (env, outside) = setup();
    let ws = env.open();
    let root = env.ws.to_str().unwrap().to_string();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"../../etc/passwd".to_vec(), "E_PATH_OUTSIDE"),
        (b"/home/u/.bashrc".to_vec(), "E_PATH_OUTSIDE"),
        (
            format!("{}/keep.txt", outside.display()).into_bytes(),
            "E_PATH_OUTSIDE",
        ),
        (
            format!("{root}/../outside/keep.txt").into_bytes(),
            "E_PATH_OUTSIDE",
        ),
        (format!("{root}x/a").into_bytes(), "E_PATH_OUTSIDE"),
        (b"/proc/self/root/etc/passwd".to_vec(), "E_PATH_OUTSIDE"),
        (b"/proc/self/fd/3".to_vec(), "E_PATH_OUTSIDE"),
        (b"a/b/".to_vec(), "E_PATH_INVALID"),
        (b"".to_vec(), "E_PATH_INVALID"),
        (b".".to_vec(), "E_PATH_INVALID"),
        (root.clone().into_bytes(), "E_PATH_INVALID"),
        (format!("{root}/").into_bytes(), "E_PATH_INVALID"),
        (b"a\0b".to_vec(), "E_PATH_INVALID"),
        (vec![b'x'; 256], "E_PATH_TOO_LONG"),
        ("d/".repeat(2100).into_bytes(), "E_PATH_INVALID"),
        (
            format!("{}f", "dddddddd/".repeat(500)).into_bytes(),
            "E_PATH_TOO_LONG",
        ),
        (b".agent-runtime/ledger.jsonl".to_vec(), "E_PATH_PROTECTED"),
        (
            format!("{root}/.agent-runtime/config.toml").into_bytes(),
            "E_PATH_PROTECTED",
        ),
        (b".git/hooks/pre-commit".to_vec(), "E_PATH_PROTECTED"),
        (b"vendor/lib/.git/config".to_vec(), "E_PATH_PROTECTED"),
        (b".GIT/config".to_vec(), "E_PATH_PROTECTED"),
    ];
    for (p, code) in &cases {
        let e = ws.rel_path(p, None).expect_err(&String::from_utf8_lossy(p));
        assert_eq!(e.code(), *code, "{:?}: {e}", String::from_utf8_lossy(p));
    }
    // Accepted: absolute inside, normalised lexically; backslashes are bytes.
    for (p, want) in [
        (format!("{root}/src/./x.rs"), "src/x.rs"),
        ("a//b/../b/c".to_string(), "a/b/c"),
        ("C:\\..\\x".to_string(), "C:\\..\\x"),
    ] {
        assert_eq!(
            ws.rel_path(p.as_bytes(), None).unwrap().as_bytes(),
            want.as_bytes()
        );
    }
    // The canonical form of the root is accepted too (tools send realpaths).
    let canon = std::fs::canonicalize(&env.ws).unwrap();
    assert!(
        ws.rel_path(format!("{}/k.rs", canon.display()).as_bytes(), None)
            .is_ok()
    );
    outside_untouched(&outside);
}

#[test]
fn ledger_paths_that_are_not_normal_make_the_record_invalid() {
    for bad in [
        r#""../x""#,
        r#""/etc/passwd""#,
        r#""a/./b""#,
        r#""a//b""#,
        r#"".agent-runtime/x""#,
        r#""""#,
    ] {
        let r: Result<ckpt::RelPath, _> = serde_json::from_str(bad);
        assert!(r.is_err(), "{bad} must not deserialise into a RelPath");
    }
}

/// The workspace opened with `openat2`, then with the portable
/// per-component walk only.
fn both_ways(env: &TestEnv) -> [ckpt::Workspace; 2] {
    [false, true].map(|portable| {
        let opts = ckpt::OpenOptions {
            portable,
            ..Default::default()
        };
        ckpt::Workspace::open(&env.ws, opts).unwrap()
    })
}

#[test]
fn writes_never_go_through_symlinks_and_create_nothing_outside() {
    let (env, outside) = setup();
    for ws in both_ways(&env) {
        writes_never_go_through_symlinks(&env, &ws, &outside);
    }
}

fn writes_never_go_through_symlinks(env: &TestEnv, ws: &ckpt::Workspace, outside: &Path) {
    let _ = std::fs::remove_dir_all(env.ws.join("real"));
    for l in ["sub", "rel", "link.txt"] {
        let _ = std::fs::remove_file(env.ws.join(l));
    }
    symlink(outside, env.ws.join("sub")).unwrap();
    symlink("../outside", env.ws.join("rel")).unwrap();
    symlink(outside.join("keep.txt"), env.ws.join("link.txt")).unwrap();
    std::fs::create_dir(env.ws.join("real")).unwrap();
    symlink(outside, env.ws.join("real/inner")).unwrap();
    let files = ws.files();
    for p in [
        "sub/x",
        "sub/new/deeper/x",
        "rel/keep.txt",
        "real/inner/x",
        "real/inner/a/b/c",
    ] {
        let rel = ws.rel_path(p.as_bytes(), None).unwrap();
        let e = files.write_file(&rel, b"escape", 0o644).unwrap_err();
        assert!(e.to_string().contains("E_UNSAFE_PATH"), "{p}: {e}");
        assert!(files.read(&rel).is_err(), "{p}: reads refuse too");
    }
    // A final-component symlink is replaced (atomically), never followed.
    let link = ws.rel_path(b"link.txt", None).unwrap();
    assert!(
        files
            .read(&link)
            .unwrap_err()
            .to_string()
            .contains("E_NOT_REGULAR")
    );
    files.write_file(&link, b"replaced\n", 0o644).unwrap();
    assert!(
        !std::fs::symlink_metadata(env.ws.join("link.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    outside_untouched(outside);

    // The library's recorded write refuses the same paths.
    let mut call = ws
        .begin_call(ckpt::CallOptions {
            tool: "Write".into(),
            ..Default::default()
        })
        .unwrap();
    let e = call.write_file(&ws.rel_path(b"sub/evil", None).unwrap(), b"x");
    assert!(e.is_err());
    let _ = call.finish(ckpt::CallStatus::Failed, Some("refused".into()));
    outside_untouched(outside);
}

#[test]
fn fifos_and_devices_are_refused_without_hanging() {
    let (env, _outside) = setup();
    let ws = env.open();
    let fifo = env.ws.join("pipe");
    crate::common::mkfifo(&fifo);
    let rel = ws.rel_path(b"pipe", None).unwrap();
    let t = std::time::Instant::now();
    let e = ws.files().open_read(&rel).unwrap_err();
    assert!(e.to_string().contains("E_NOT_REGULAR"), "{e}");
    assert_eq!(
        ckpt::call::snapshot(&ws, &rel).unwrap(),
        ckpt::FileState::NotAFile
    );
    assert!(t.elapsed() < std::time::Duration::from_secs(1));
}

#[test]
fn a_runtime_dir_replaced_by_a_symlink_is_refused() {
    let (env, outside) = setup();
    std::fs::rename(env.rt(), env.dir.path().join("moved-rt")).unwrap();
    symlink(&outside, env.rt()).unwrap();
    let r = env.ckpt(&["checkpoint"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("E_RUNTIME_UNSAFE"), "{}", r.stderr);
    outside_untouched(&outside);
}

#[test]
fn a_ledger_that_is_a_symlink_or_hard_link_is_refused() {
    let (env, outside) = setup();
    let ws = env.open();
    // (init made an empty ledger.)
    std::fs::remove_file(env.ledger_path()).unwrap();
    symlink(outside.join("keep.txt"), env.ledger_path()).unwrap();
    let e = ws
        .ledger()
        .append(crate::ledger_torn::call_record(1))
        .unwrap_err();
    assert!(e.to_string().contains("E_RUNTIME_UNSAFE"), "{e}");
    std::fs::remove_file(env.ledger_path()).unwrap();
    std::fs::hard_link(outside.join("keep.txt"), env.ledger_path()).unwrap();
    let e = ws
        .ledger()
        .append(crate::ledger_torn::call_record(1))
        .unwrap_err();
    assert!(e.to_string().contains("hard links"), "{e}");
    outside_untouched(&outside);
}

#[test]
fn symlink_swap_race_never_writes_outside() {
    let (env, outside) = setup();
    std::fs::create_dir(env.ws.join("sub")).unwrap();
    symlink(&outside, env.ws.join("swap")).unwrap();
    for ws in both_ways(&env) {
        swap_race(&env, &ws, &outside);
    }
}

fn swap_race(env: &TestEnv, ws: &ckpt::Workspace, outside: &Path) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = {
        let stop = stop.clone();
        let a = env.ws.join("sub");
        let b = env.ws.join("swap");
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    &a,
                    rustix::fs::CWD,
                    &b,
                    rustix::fs::RenameFlags::EXCHANGE,
                );
                n += 1;
            }
            n
        })
    };
    let mut refused = 0;
    for i in 0..3000 {
        let rel = ws.rel_path(format!("sub/f{i}").as_bytes(), None).unwrap();
        if ws.files().write_file(&rel, b"x", 0o644).is_err() {
            refused += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = attacker.join().unwrap();
    eprintln!("{swaps} swaps, {refused} of 3000 writes refused");
    outside_untouched(outside);
}
