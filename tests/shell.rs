//! Shell capture (`ckpt exec` and hooks for tools that name no file): every kind
//! of change is recorded as such, ignored paths are not, git-clean files are not
//! copied at first use, and every text patch reapplies with `git apply`.

use std::os::unix::fs::{PermissionsExt, symlink};

use crate::common::{TestEnv, git, git_at};

fn has_git() -> bool {
    std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_ok()
}

/// A git repository with a few files to capture; `None` (the test is
/// skipped, and says so) when git is not installed.
fn repo() -> Option<TestEnv> {
    if !has_git() {
        eprintln!("SKIPPED: git is not installed");
        return None;
    }
    let env = TestEnv::new();
    env.write(".gitignore", b"build/\n*.log\n");
    env.write("src/a.txt", b"one\ntwo\nthree\n");
    env.write("src/b.txt", b"bee\n");
    env.write("c.txt", b"sea\r\nwith crlf\r\n");
    env.write("tool.sh", b"#!/bin/sh\necho hi\n");
    symlink("c.txt", env.ws.join("link")).unwrap();
    git(&env, &["init", "-q"]);
    git(&env, &["add", "-A"]);
    git(&env, &["commit", "-qm", "init"]);
    Some(env)
}

/// [`repo`] with `n` more committed files (`many/f<i>.txt`) and one the
/// user has not committed (`dirty.txt`).
fn repo_with_work(n: usize) -> Option<TestEnv> {
    let env = repo()?;
    for i in 0..n {
        env.write(&format!("many/f{i}.txt"), format!("file {i}\n").as_bytes());
    }
    git(&env, &["add", "-A"]);
    git(&env, &["commit", "-qm", "more"]);
    env.write("dirty.txt", b"the user's uncommitted work\n");
    Some(env)
}

fn records(env: &TestEnv) -> Vec<serde_json::Value> {
    env.ckpt(&["log", "--json"]).json()["records"]
        .as_array()
        .unwrap()
        .clone()
}

/// Runs `sh -c SCRIPT` as one recorded call; it must succeed.
fn exec_sh(env: &TestEnv, script: &str) {
    let r = env.ckpt(&["exec", "--", "sh", "-c", script]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// `(path, op)` of every recorded file patch, in ledger order.
fn patch_ops(env: &TestEnv) -> Vec<(String, String)> {
    records(env)
        .iter()
        .filter(|r| r["kind"] == "file_patch")
        .map(|r| {
            (
                r["path"].as_str().unwrap().to_string(),
                r["op"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn blob_count(env: &TestEnv) -> usize {
    blobs_under(&env.rt())
}

/// The number of blobs in the runtime directory `rt`.
fn blobs_under(rt: &std::path::Path) -> usize {
    let dir = rt.join("artifacts/blobs");
    if !dir.exists() {
        return 0;
    }
    std::fs::read_dir(dir)
        .unwrap()
        .map(|d| std::fs::read_dir(d.unwrap().path()).unwrap().count())
        .sum()
}

#[test]
fn exec_records_every_kind_of_change_and_nothing_ignored() {
    let Some(env) = repo() else {
        return;
    };
    let script = "printf 'one\\nTWO\\nthree\\n' > src/a.txt; rm src/b.txt; mv c.txt d.txt; chmod +x src/a.txt; \
                  echo new > src/new.txt; mkdir -p build && echo obj > build/x.o; echo log > run.log; \
                  ln -sf d.txt link";
    let r = env.ckpt(&["exec", "--session", "s1", "--", "sh", "-c", script]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let recs = records(&env);
    let patches: Vec<_> = recs.iter().filter(|r| r["kind"] == "file_patch").collect();
    let by_path = |p: &str| patches.iter().find(|x| x["path"] == p).copied();
    assert_eq!(by_path("src/a.txt").unwrap()["op"], "modify");
    assert_eq!(by_path("src/a.txt").unwrap()["after_mode"], "100755");
    assert_eq!(by_path("src/b.txt").unwrap()["op"], "delete");
    let ren = by_path("d.txt").unwrap();
    assert_eq!(
        (ren["op"].as_str(), ren["from_path"].as_str()),
        (Some("rename"), Some("c.txt"))
    );
    assert_eq!(by_path("src/new.txt").unwrap()["op"], "create");
    let link = by_path("link").unwrap();
    assert_eq!(
        (link["before_mode"].as_str(), link["after_mode"].as_str()),
        (Some("120000"), Some("120000"))
    );
    assert!(
        by_path("build/x.o").is_none() && by_path("run.log").is_none(),
        "ignored paths are not captured"
    );
    assert_eq!(patches.len(), 5, "{patches:#?}");
    for p in &patches {
        assert_eq!(p["source"], "shell");
        assert_eq!(p["session"], "s1");
    }
    // The git-clean before content came from git's objects into ckpt's store.
    let before = by_path("src/a.txt").unwrap()["before_hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        before,
        ckpt::ContentHash::of(b"one\ntwo\nthree\n").to_string()
    );
    // Text patches reapply exactly.
    crate::hooks::git_apply_reproduces(
        &env,
        by_path("src/a.txt").unwrap(),
        Some("one\ntwo\nthree\n"),
        Some("one\nTWO\nthree\n"),
        "modify",
    );
    crate::hooks::git_apply_reproduces(
        &env,
        by_path("src/new.txt").unwrap(),
        None,
        Some("new\n"),
        "create",
    );
    crate::hooks::git_apply_reproduces(
        &env,
        by_path("src/b.txt").unwrap(),
        Some("bee\n"),
        None,
        "delete",
    );
    assert_eq!(env.ckpt(&["verify"]).code, 0);
}

#[test]
fn first_use_copies_nothing_that_is_clean_against_git() {
    let Some(env) = repo_with_work(50) else {
        return;
    };
    let r = env.ckpt(&["exec", "--", "true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        blob_count(&env),
        1,
        "only the untracked file is stored at first use"
    );
    assert!(
        records(&env).iter().all(|r| r["kind"] != "file_patch"),
        "a command that changes nothing records no patch"
    );
}

/// A file committed at HEAD that a shell call changes is not copied into the
/// store: its before bytes stay in git's object database, the record names
/// the blob (`before_git`), and rollback and `verify` read them from there.
/// A file only staged (its blob would be pruned once unstaged) is copied.
/// If git loses the object, `verify` says which and where it was.
#[test]
fn a_committed_files_before_bytes_stay_in_git_and_roll_back_from_there() {
    let Some(env) = repo() else {
        return;
    };
    env.write("staged.txt", b"staged, never committed\n");
    git(&env, &["add", "staged.txt"]);
    // Files written in the tick the index was are racily clean (and then
    // stored at first use); `git status` rewrites the index after a tick.
    std::thread::sleep(std::time::Duration::from_millis(20));
    git(&env, &["status", "--porcelain"]);
    let r = env.ckpt(&["exec", "--", "true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(blob_count(&env), 0, "nothing is copied at first use");
    exec_sh(
        &env,
        "printf 'agent\\n' > src/a.txt; printf 'agent too\\n' > staged.txt",
    );
    let committed = git(&env, &["rev-parse", "HEAD:src/a.txt"])
        .trim()
        .to_string();
    let staged = git(&env, &["rev-parse", ":staged.txt"]).trim().to_string();
    let recs = records(&env);
    let patch = |path: &str| {
        recs.iter()
            .find(|r| r["kind"] == "file_patch" && r["path"] == path)
            .unwrap_or_else(|| panic!("no patch for {path}: {recs:?}"))
            .clone()
    };
    let a = patch("src/a.txt");
    assert_eq!(a["before_git"], committed.as_str(), "{a}");
    let s = patch("staged.txt");
    assert!(
        s.get("before_git").is_none(),
        "a staged blob is copied: {s}"
    );
    let stored = |hash: &serde_json::Value| {
        let hex = hash.as_str().unwrap().trim_start_matches("sha256:");
        env.rt()
            .join("artifacts/blobs")
            .join(&hex[..2])
            .join(&hex[2..])
            .exists()
    };
    assert!(!stored(&a["before_hash"]), "committed bytes are not copied");
    assert!(stored(&s["before_hash"]), "staged bytes are copied");
    assert!(stored(&a["after_hash"]) && stored(&s["after_hash"]));
    assert_eq!(blob_count(&env), 3, "two after contents, one staged before");
    assert_ne!(staged, "");

    // `diff` renders the call from git's blob; verify reads it from there.
    let r = env.ckpt(&["diff", "--call", a["call"].as_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(&format!("index {committed}..")),
        "the patch names git's blob: {}",
        r.stdout
    );
    assert!(
        r.stdout.contains("-one") && r.stdout.contains("+agent"),
        "{}",
        r.stdout
    );
    let r = env.ckpt(&["verify"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);

    let r = env.ckpt(&["rollback", "--last", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read(env.ws.join("src/a.txt")).unwrap(),
        b"one\ntwo\nthree\n"
    );
    assert_eq!(
        std::fs::read(env.ws.join("staged.txt")).unwrap(),
        b"staged, never committed\n"
    );
    let r = env.ckpt(&["verify"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);

    // Git loses the object (a history rewrite and `git gc`; here its loose
    // file is removed): verify names the blob git no longer has.
    let loose = env
        .ws
        .join(".git/objects")
        .join(&committed[..2])
        .join(&committed[2..]);
    std::fs::remove_file(&loose).unwrap();
    let r = env.ckpt(&["verify", "--json"]);
    assert_eq!(r.code, 4, "{}", r.stdout);
    let problems = r.json()["problems"].as_array().unwrap().clone();
    assert!(
        problems.iter().any(|p| p["problem"]
            .as_str()
            .is_some_and(|m| m.starts_with("blob_missing") && m.contains(&committed))),
        "{problems:?}"
    );
}

/// Where git converts a file's bytes on their way into its objects (a clean
/// filter, as Git LFS and git-crypt have; `core.autocrlf = input` with a
/// CRLF file), the stat-clean index entry's blob is not the file's content:
/// undoing a shell call must restore the bytes the user had, not the blob's.
/// (Before, the filtered file came back as the blob's upper-case bytes and the
/// CRLF file with LF endings.)
#[test]
fn a_file_git_stores_converted_is_restored_as_it_was_not_as_its_blob() {
    for setup in ["filter", "autocrlf"] {
        let Some(env) = repo() else {
            return;
        };
        let (name, user): (&str, &[u8]) = match setup {
            "filter" => {
                git(&env, &["config", "filter.up.clean", "tr a-z A-Z"]);
                git(&env, &["config", "filter.up.smudge", "cat"]);
                env.write(".gitattributes", b"*.up filter=up\n*.png binary\n");
                ("x.up", b"the user's own bytes\n")
            }
            _ => {
                git(&env, &["config", "core.autocrlf", "input"]);
                ("w.txt", b"windows\r\nline endings\r\n")
            }
        };
        env.write(name, user);
        git(&env, &["add", "-A"]);
        git(&env, &["commit", "-qm", setup]);
        // Git calls the file clean, yet its blob holds other bytes.
        assert_eq!(git(&env, &["status", "--porcelain"]), "", "{setup}");
        let blob = git(&env, &["cat-file", "-p", &format!("HEAD:{name}")]);
        assert_ne!(blob.as_bytes(), user, "{setup}: the blob must differ");
        let cmd = format!("printf changed > {name}; printf more >> src/a.txt");
        let r = env.ckpt(&["exec", "--", "sh", "-c", &cmd]);
        assert_eq!(r.code, 0, "{setup}: {}", r.stderr);
        let r = env.ckpt(&["rollback", "--last", "1"]);
        assert_eq!(r.code, 0, "{setup}: {}", r.stderr);
        assert_eq!(
            std::fs::read(env.ws.join(name)).unwrap(),
            user,
            "{setup}: the user's bytes, not the blob's"
        );
        assert_eq!(
            std::fs::read(env.ws.join("src/a.txt")).unwrap(),
            b"one\ntwo\nthree\n",
            "{setup}"
        );
    }
}

/// A workspace that is one folder of a bigger repository, and a submodule
/// checked out inside a workspace: their files are clean against their own
/// repository's index, so first use copies none of them, and a shell call's
/// change to one is undone from that repository's objects. (Before, both were
/// copied whole at first use: the index was matched only when the workspace
/// was the repository's top level, and a submodule's files are not in the
/// superproject's index.)
#[test]
fn a_folder_of_a_repository_and_a_submodule_are_clean_against_their_own_index() {
    let Some(env) = repo() else {
        return;
    };
    let lib = env.dir.path().join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    for i in 0..5 {
        std::fs::write(lib.join(format!("l{i}.txt")), format!("lib {i}\n")).unwrap();
    }
    let in_lib = |args: &[&str]| {
        git_at(&lib, &env.home, args);
    };
    in_lib(&["init", "-q"]);
    in_lib(&["add", "-A"]);
    in_lib(&["commit", "-qm", "lib"]);
    let url = lib.to_str().unwrap();
    git(
        &env,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            url,
            "vendor/lib",
        ],
    );
    git(&env, &["commit", "-qm", "submodule"]);
    // The clone wrote the submodule's files and index in one clock tick:
    // racily clean, so not trusted by stat. A later `git status` rewrites
    // that index (git does when it finds racy entries), as it would be by
    // the time an agent runs there.
    std::thread::sleep(std::time::Duration::from_millis(20));
    git(&env, &["-C", "vendor/lib", "status", "--porcelain"]);

    // The whole repository as the workspace: the submodule's files too.
    let r = env.ckpt(&["exec", "--", "true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(blob_count(&env), 0, "nothing is copied at first use");
    let r = env.ckpt(&["exec", "--", "sh", "-c", "printf agent > vendor/lib/l2.txt"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("could not be stored"), "{}", r.stderr);
    let r = env.ckpt(&["rollback", "--last", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read(env.ws.join("vendor/lib/l2.txt")).unwrap(),
        b"lib 2\n"
    );

    // One folder of it as the workspace.
    let src = env.ws.join("src");
    let in_src = [("CKPT_WORKSPACE", src.to_str().unwrap())];
    let r = env.ckpt_env(&["exec", "--", "true"], &in_src);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        blobs_under(&src.join(".agent-runtime")),
        0,
        "nothing is copied at first use"
    );
    let cmd = format!("printf agent > {}/a.txt", src.display());
    let r = env.ckpt_env(&["exec", "--", "sh", "-c", &cmd], &in_src);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("could not be stored"), "{}", r.stderr);
    let r = env.ckpt_env(&["rollback", "--last", "1"], &in_src);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read(src.join("a.txt")).unwrap(),
        b"one\ntwo\nthree\n"
    );
}

/// A `.gitattributes` that is a symlink to a FIFO or to `/dev/zero` (hostile
/// input) neither hangs nor exhausts a hook: like git, ckpt never reads one
/// through a symlink, and reads attributes files only when they are small
/// regular files. (Fails on the first version of the conversion check: the
/// FIFO blocked forever, `/dev/zero` was read without end.)
#[test]
fn a_gitattributes_symlink_to_a_fifo_or_a_device_never_hangs_a_hook() {
    for target in ["fifo", "/dev/zero"] {
        let Some(env) = repo() else {
            return;
        };
        if target == "fifo" {
            let made = std::process::Command::new("mkfifo")
                .arg(env.ws.join("pipe"))
                .status()
                .unwrap();
            assert!(made.success());
            symlink("pipe", env.ws.join(".gitattributes")).unwrap();
        } else {
            symlink(target, env.ws.join(".gitattributes")).unwrap();
        }
        let mut child = env
            .command(&["exec", "--", "true"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("{target}: the hook did not finish in 20 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(status.success(), "{target}");
        // Nothing but the untracked symlink itself is stored: the tracked
        // files stay clean against git.
        assert!(blob_count(&env) <= 1, "{target}: {}", blob_count(&env));
    }
}

#[test]
fn outside_git_gitignore_and_config_ignores_are_honoured() {
    let env = TestEnv::init();
    env.write(".gitignore", b"target/\n");
    std::fs::write(
        env.rt().join("config.toml"),
        "ignore = [\"*.tmp\", \"cache/\"]\n",
    )
    .unwrap();
    let r = env.ckpt(&["exec", "--", "sh", "-c", "mkdir -p target cache; echo x > target/a; echo y > cache/b; echo z > c.tmp; echo kept > kept.txt"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let paths: Vec<String> = records(&env)
        .iter()
        .filter(|r| r["kind"] == "file_patch")
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths, vec!["kept.txt".to_string()]);
}

#[test]
fn exec_exits_with_the_command_status_and_records_a_failure() {
    let env = TestEnv::init();
    let r = env.ckpt(&[
        "exec",
        "--call",
        "c1",
        "--",
        "sh",
        "-c",
        "echo partial > out.txt; exit 7",
    ]);
    assert_eq!(r.code, 7);
    let recs = records(&env);
    assert_eq!(recs.last().unwrap()["status"], "failed");
    assert_eq!(recs.last().unwrap()["call"], "c1");
    assert!(
        recs.iter()
            .any(|r| r["kind"] == "file_patch" && r["path"] == "out.txt"),
        "a failed call's changes are still recorded"
    );
    let r = env.ckpt(&["exec", "--", "/no/such/program"]);
    assert_eq!(r.code, 127, "{}", r.stderr);
}

#[test]
fn a_mode_only_change_is_a_mode_patch() {
    let env = TestEnv::init();
    env.write("run.sh", b"#!/bin/sh\n");
    std::fs::set_permissions(
        env.ws.join("run.sh"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    env.ckpt(&["exec", "--", "true"]);
    assert_eq!(env.ckpt(&["exec", "--", "chmod", "755", "run.sh"]).code, 0);
    let p = records(&env)
        .into_iter()
        .find(|r| r["kind"] == "file_patch")
        .unwrap();
    assert_eq!(p["op"], "mode");
    assert_eq!(
        (p["before_mode"].as_str(), p["after_mode"].as_str()),
        (Some("100644"), Some("100755"))
    );
}

#[test]
fn an_edit_recorded_by_another_session_during_a_shell_call_is_not_claimed_twice() {
    let env = TestEnv::init();
    env.write("shared.txt", b"v1\n");
    // Session A starts a shell call.
    let pre_a = br#"{"session":"A","call":"a1","tool":"Bash"}"#;
    crate::hooks::hook_ok(&env, "pre", pre_a);
    // Session B edits shared.txt through an edit tool, fully recorded.
    let pre_b = br#"{"session":"B","call":"b1","tool":"Write","paths":["shared.txt"]}"#;
    crate::hooks::hook_ok(&env, "pre", pre_b);
    env.write("shared.txt", b"v2 by B\n");
    crate::hooks::hook_ok(
        &env,
        "post",
        br#"{"session":"B","call":"b1","status":"succeeded"}"#,
    );
    // A's command writes its own file; then A ends.
    env.write("a-out.txt", b"from A\n");
    crate::hooks::hook_ok(
        &env,
        "post",
        br#"{"session":"A","call":"a1","status":"succeeded"}"#,
    );
    let patches: Vec<(String, String)> = records(&env)
        .iter()
        .filter(|r| r["kind"] == "file_patch")
        .map(|r| {
            (
                r["call"].as_str().unwrap().to_string(),
                r["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        patches,
        vec![
            ("b1".into(), "shared.txt".into()),
            ("a1".into(), "a-out.txt".into())
        ]
    );
}

#[test]
fn non_utf8_names_are_recorded_losslessly_and_never_collide() {
    use std::os::unix::ffi::OsStrExt;
    let env = TestEnv::init();
    let a = env.ws.join(std::ffi::OsStr::from_bytes(b"name\xff"));
    let b = env.ws.join(std::ffi::OsStr::from_bytes(b"name\xfe"));
    let r = env.ckpt(&["exec", "--", "true"]);
    assert_eq!(r.code, 0);
    std::fs::write(&a, b"first\n").unwrap();
    std::fs::write(&b, b"second\n").unwrap();
    let r = env.ckpt(&["exec", "--", "true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Created before the second call: not that call's. Now change them in a call.
    let r = env.ckpt(&[
        "exec",
        "--",
        "sh",
        "-c",
        "for f in name*; do echo more >> \"$f\"; done",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let recs = records(&env);
    let paths: Vec<&serde_json::Value> = recs
        .iter()
        .filter(|r| r["kind"] == "file_patch")
        .map(|r| &r["path"])
        .collect();
    assert_eq!(paths.len(), 2, "{recs:#?}");
    let decoded: Vec<Vec<u8>> = paths
        .iter()
        .map(|p| ckpt::paths::b64_decode(p["b64"].as_str().unwrap()).unwrap())
        .collect();
    assert!(decoded.contains(&b"name\xff".to_vec()) && decoded.contains(&b"name\xfe".to_vec()));
    assert_eq!(env.ckpt(&["verify"]).code, 0);
}

#[test]
fn a_change_seen_by_two_overlapping_shell_calls_names_both_and_is_recorded_once() {
    let env = TestEnv::init();
    env.write("base.txt", b"base\n");
    // Both agents still running (this test process stands in for them).
    let pid = std::process::id().to_string();
    for p in [
        &br#"{"session":"A","call":"a1","tool":"Bash"}"#[..],
        br#"{"session":"B","call":"b1","tool":"Bash"}"#,
    ] {
        let r = crate::hooks::hook(&env, "pre", p, &[("CKPT_AGENT_PID", &pid)]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    // Either command could have written this file: ckpt cannot tell.
    env.write("who.txt", b"one of them\n");
    crate::hooks::hook_ok(
        &env,
        "post",
        br#"{"session":"A","call":"a1","status":"succeeded"}"#,
    );
    crate::hooks::hook_ok(
        &env,
        "post",
        br#"{"session":"B","call":"b1","status":"succeeded"}"#,
    );
    let patches: Vec<serde_json::Value> = records(&env)
        .into_iter()
        .filter(|r| r["kind"] == "file_patch")
        .collect();
    assert_eq!(patches.len(), 1, "recorded once: {patches:#?}");
    assert_eq!(patches[0]["path"], "who.txt");
    assert_eq!(
        patches[0]["candidates"],
        serde_json::json!(["a1", "b1"]),
        "every candidate call is named, none guessed"
    );
}

/// A shell call that changes nothing leaves the snapshot file as it was (no
/// rewrite, nothing synced); a change outside any call makes the next pre
/// rewrite it, and is not blamed on that call.
#[test]
fn a_call_that_changes_nothing_rewrites_no_snapshot() {
    use std::os::unix::fs::MetadataExt;
    let Some(env) = repo() else {
        return;
    };
    let snap = env.rt().join("index/snapshot.bin");
    // The inode and the bytes (a snapshot records when it was taken, so a
    // rewrite always changes them; an inode number alone can be reused).
    let ino = || {
        (
            std::fs::metadata(&snap).unwrap().ino(),
            std::fs::read(&snap).unwrap(),
        )
    };
    let exec = |script: &str| exec_sh(&env, script);
    // Past the racy window of the files `repo()` wrote.
    std::thread::sleep(std::time::Duration::from_millis(120));
    exec("true");
    std::thread::sleep(std::time::Duration::from_millis(120));
    exec("true");
    let first = ino();
    exec("true");
    exec("true");
    assert!(ino() == first, "no-change calls keep the snapshot file");
    assert_eq!(
        std::fs::read_dir(env.rt().join("index/calls"))
            .unwrap()
            .count(),
        0,
        "no per-call snapshot is left behind"
    );
    let patches = |env: &TestEnv| patch_ops(env).len();
    assert_eq!(patches(&env), 0);

    // The user edits between calls: the next pre takes a new snapshot, and
    // the call records nothing of the user's edit.
    env.write("src/a.txt", b"user's line\n");
    exec("true");
    assert!(
        ino().1 != first.1,
        "a change outside the call is a new snapshot"
    );
    assert_eq!(patches(&env), 0, "the user's edit is not the call's");
    exec("printf 'B\\n' > src/b.txt");
    let recs = records(&env);
    let p: Vec<_> = recs.iter().filter(|r| r["kind"] == "file_patch").collect();
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0]["path"], "src/b.txt");
    assert_eq!(
        p[0]["before_hash"],
        ckpt::ContentHash::of(b"bee\n").to_string()
    );
    assert_eq!(
        std::fs::read(env.ws.join("src/a.txt")).unwrap(),
        b"user's line\n"
    );
}

/// A call that changes many files (its contents stored, its before contents
/// read from git, its patches written on two threads): every change is
/// recorded once, in path order, with the right before and after.
#[test]
fn a_call_changing_many_files_records_each_exactly_once() {
    if !has_git() {
        eprintln!("SKIPPED: git is not installed");
        return;
    }
    let env = TestEnv::new();
    for i in 0..60 {
        env.write(
            &format!("src/f{i:02}.txt"),
            format!("file {i}\n").as_bytes(),
        );
    }
    git(&env, &["init", "-q"]);
    git(&env, &["add", "-A"]);
    git(&env, &["commit", "-qm", "init"]);
    // 40 modified, 5 deleted, 10 created.
    let script = "for i in $(seq -w 0 39); do echo changed >> src/f$i.txt; done; \
                  rm src/f4[0-4].txt; for i in $(seq 0 9); do echo new $i > src/new$i.txt; done";
    let r = env.ckpt(&["exec", "--", "sh", "-c", script]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let recs = records(&env);
    let patches: Vec<_> = recs.iter().filter(|r| r["kind"] == "file_patch").collect();
    assert_eq!(patches.len(), 55, "{patches:#?}");
    let paths: Vec<&str> = patches
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    let mut sorted = paths.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(paths, sorted, "once each, in path order");
    for p in &patches {
        let path = p["path"].as_str().unwrap();
        let (op, before, after) = (
            p["op"].as_str().unwrap(),
            &p["before_hash"],
            &p["after_hash"],
        );
        if let Some(i) = path.strip_prefix("src/new") {
            let i = i.trim_end_matches(".txt");
            assert_eq!(op, "create", "{path}");
            assert_eq!(
                after,
                &ckpt::ContentHash::of(format!("new {i}\n").as_bytes()).to_string()
            );
            continue;
        }
        let i: usize = path[5..7].parse().unwrap();
        let old = format!("file {i}\n");
        assert_eq!(
            before,
            &ckpt::ContentHash::of(old.as_bytes()).to_string(),
            "{path}"
        );
        if i < 40 {
            assert_eq!(op, "modify", "{path}");
            let new = format!("{old}changed\n");
            assert_eq!(after, &ckpt::ContentHash::of(new.as_bytes()).to_string());
            if i.is_multiple_of(13) {
                crate::hooks::git_apply_reproduces(&env, p, Some(&old), Some(&new), "modify");
            }
        } else {
            assert_eq!(op, "delete", "{path}");
        }
    }
    // And all of it goes back.
    let r = env.ckpt(&["rollback", "--last", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for i in 0..60 {
        assert_eq!(
            std::fs::read_to_string(env.ws.join(format!("src/f{i:02}.txt"))).unwrap(),
            format!("file {i}\n")
        );
    }
    assert!(!env.ws.join("src/new0.txt").exists());
    assert_eq!(env.ckpt(&["verify"]).code, 0);
}

/// A changed file whose before content cannot be had (its git object is
/// gone) is not recorded as created: nothing is recorded for it, a warning
/// says so, and a rollback leaves it alone. The other changes are recorded.
#[test]
fn a_change_whose_before_content_is_lost_is_not_recorded_as_a_create() {
    let Some(env) = repo() else {
        return;
    };
    // Past the racy window, so the first snapshot trusts git's index.
    std::thread::sleep(std::time::Duration::from_millis(120));
    let r = env.ckpt(&["exec", "--", "true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The loose object holding src/a.txt's committed bytes disappears.
    let oid = git(&env, &["rev-parse", "HEAD:src/a.txt"]);
    let oid = oid.trim();
    std::fs::remove_file(env.ws.join(".git/objects").join(&oid[..2]).join(&oid[2..])).unwrap();
    let r = env.ckpt(&[
        "exec",
        "--",
        "sh",
        "-c",
        "echo agent >> src/a.txt; echo agent >> src/b.txt",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("src/a.txt") && r.stderr.contains("not recorded"),
        "{}",
        r.stderr
    );
    let recs = records(&env);
    let paths: Vec<&str> = recs
        .iter()
        .filter(|r| r["kind"] == "file_patch")
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["src/b.txt"]);
    let r = env.ckpt(&["rollback", "--last", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(env.ws.join("src/a.txt")).unwrap(),
        "one\ntwo\nthree\nagent\n",
        "left alone"
    );
    assert_eq!(
        std::fs::read_to_string(env.ws.join("src/b.txt")).unwrap(),
        "bee\n"
    );
}

/// After a quiet spell the walk lists only directories whose stat data moved
/// (src/scan/walker.rs); changes inside directories that did not move (a file
/// rewritten in place, a rule file edited in place) must still be found.
#[test]
fn changes_under_directories_that_did_not_move_are_found() {
    let Some(env) = repo() else {
        return;
    };
    env.write("src/deep/er/c.txt", b"c\n");
    env.write("src/deep/d.txt", b"d\n");
    env.write("build/x.o", b"obj\n");
    let exec = |script: &str| exec_sh(&env, script);
    let quiet = || std::thread::sleep(std::time::Duration::from_millis(120));
    quiet();
    exec("true");
    quiet();
    // Same inodes, same directories: only file stat data and rule files move.
    // `build/x.o` was there before (ignored): un-ignoring it creates nothing.
    exec(
        "printf 'C\\n' > src/deep/er/c.txt; printf '*.log\\n' > .gitignore; printf 'one\\n' >> src/a.txt; printf 'n\\n' > build/new.o",
    );
    let mut got = patch_ops(&env);
    got.sort();
    let want = [
        (".gitignore", "modify"),
        ("build/new.o", "create"),
        ("src/a.txt", "modify"),
        ("src/deep/er/c.txt", "modify"),
    ];
    assert_eq!(
        got,
        want.map(|(p, o)| (p.to_string(), o.to_string())).to_vec()
    );
    // Quiet again: a rewrite in place two levels down is still seen.
    quiet();
    exec("true");
    quiet();
    exec("printf 'D\\n' > src/deep/d.txt");
    let recs = records(&env);
    let last = recs.iter().rfind(|r| r["kind"] == "file_patch").unwrap();
    assert_eq!(last["path"], "src/deep/d.txt");
    assert_eq!(
        last["after_hash"],
        ckpt::ContentHash::of(b"D\n").to_string()
    );
}

/// A checkout that puts many files back to what git has (a branch switch, a
/// `git checkout -- .`) outside any call copies none of them into the store:
/// the next walk reads git's index for them. (A handful of moved files are
/// stored instead: reading a large index costs more than storing them.)
#[test]
fn a_checkout_of_many_files_between_calls_copies_none_of_them() {
    let Some(env) = repo() else {
        return;
    };
    for i in 0..300 {
        env.write(
            &format!("many/f{i:03}.txt"),
            format!("file {i}\n").as_bytes(),
        );
    }
    git(&env, &["add", "-A"]);
    git(&env, &["commit", "-qm", "many"]);
    let exec = |script: &str| exec_sh(&env, script);
    exec("true");
    let before = blob_count(&env);
    // Outside any call: every file rewritten, then checked out again.
    for i in 0..300 {
        env.write(&format!("many/f{i:03}.txt"), b"scratch\n");
    }
    git(&env, &["checkout", "--", "many"]);
    // Past git's racy window for the rewritten index (same second).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    git(&env, &["status", "--porcelain"]);
    exec("true");
    assert_eq!(
        blob_count(&env),
        before,
        "files clean against git were copied into the store"
    );
    assert_eq!(patch_ops(&env), vec![], "nothing changed during the calls");
}

/// A call that changes the ignore rules changes which files the walk sees,
/// not which files exist: files it starts ignoring are not deletions, files
/// it stops ignoring are not creations, and undoing the call touches neither.
#[test]
fn files_hidden_or_shown_by_a_rule_change_are_not_the_calls_changes() {
    let Some(env) = repo() else {
        return;
    };
    env.write("src/deep/d.txt", b"d\n");
    env.write("build/x.o", b"obj\n");
    let exec = |script: &str| exec_sh(&env, script);
    std::thread::sleep(std::time::Duration::from_millis(120));
    exec("true");
    std::thread::sleep(std::time::Duration::from_millis(120));
    // Start ignoring src/deep/, stop ignoring build/.
    exec("printf 'src/deep/\\n*.log\\n' > .gitignore");
    assert_eq!(
        patch_ops(&env),
        vec![(".gitignore".to_string(), "modify".to_string())]
    );
    let r = env.ckpt(&["rollback", "--last", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read(env.ws.join(".gitignore")).unwrap(),
        b"build/\n*.log\n"
    );
    assert_eq!(
        std::fs::read(env.ws.join("src/deep/d.txt")).unwrap(),
        b"d\n"
    );
    assert_eq!(std::fs::read(env.ws.join("build/x.o")).unwrap(), b"obj\n");
    assert_eq!(env.ckpt(&["verify"]).code, 0);
}

/// `CKPT_TIMINGS=1` breaks a shell call down on stderr, in order, and changes
/// nothing else; unset, stderr stays free of it.
#[test]
fn timing_marks_show_a_shell_calls_phases_only_when_asked() {
    let env = TestEnv::new();
    std::fs::write(env.ws.join("a.txt"), "one\n").unwrap();
    let r = env.ckpt_env(
        &["exec", "--", "sh", "-c", "echo two > a.txt"],
        &[("CKPT_TIMINGS", "1")],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let phases: Vec<&str> = r
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("ckpt: timing "))
        .map(|l| l.trim_start().split_once(' ').map_or("", |(_, p)| p))
        .collect();
    let at = |p: &str| {
        phases
            .iter()
            .position(|x| *x == p)
            .unwrap_or_else(|| panic!("no `{p}` mark in {phases:?}"))
    };
    assert!(at("main") < at("scan: pre"));
    assert!(at("scan: pre") < at("scan: walked"));
    assert!(at("scan: post") < at("post: changes found"));
    assert!(at("post: changes found") < at("post: recorded"));
    assert_eq!(phases.last(), Some(&"exit"));
    // The call was recorded as usual.
    assert_eq!(
        patch_ops(&env),
        vec![("a.txt".to_string(), "modify".to_string())]
    );
    let quiet = env.ckpt(&["exec", "--", "sh", "-c", "echo three > a.txt"]);
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);
    assert!(!quiet.stderr.contains("ckpt: timing"), "{}", quiet.stderr);
}

/// A shell pre hook's payload for call `id`.
fn shell_pre(env: &TestEnv, id: &str) -> Vec<u8> {
    serde_json::json!({
        "session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_use_id": id, "cwd": env.ws, "tool_input": {"command": "true"},
    })
    .to_string()
    .into_bytes()
}

/// Runs a shell pre hook for call `id` with `extra` in its environment.
fn run_shell_pre(env: &TestEnv, id: &str, extra: &[(&str, &str)]) -> crate::common::Run {
    exec_sh(env, "true");
    crate::common::run_with_stdin(env, &["hook", "pre"], &shell_pre(env, id), extra)
}

/// A shell pre walks first (the command has not started) and then appends
/// its `started` record, which syncs the walk's snapshot beside it: one
/// append, durable before the hook returns.
#[test]
fn a_shell_pre_walks_then_appends_its_record_once() {
    let Some(env) = repo() else {
        return;
    };
    let r = run_shell_pre(&env, "w1", &[("CKPT_TIMINGS", "1")]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let at = |mark: &str| {
        r.stderr
            .lines()
            .position(|l| l.ends_with(mark))
            .unwrap_or_else(|| panic!("no `{mark}` in {}", r.stderr))
    };
    assert!(at("scan: walked") < at("ledger: written"), "{}", r.stderr);
    assert!(at("ledger: written") < at("ledger: synced"), "{}", r.stderr);
    assert!(at("ledger: synced") < at("pre: recorded"), "{}", r.stderr);
    let appends = r
        .stderr
        .lines()
        .filter(|l| l.ends_with("ledger: synced"))
        .count();
    assert_eq!(appends, 1, "{}", r.stderr);
    let recs = records(&env);
    let last = recs.last().unwrap();
    assert_eq!(
        (&last["call"], &last["status"]),
        (&"w1".into(), &"started".into())
    );
}

/// When the walk of a shell pre fails, its `started` record is appended
/// with a `failed` record that closes the call (never left in
/// doubt), the call is blocked with one line, and nothing is left open.
#[test]
fn a_shell_pre_whose_walk_fails_closes_its_call_and_blocks_it() {
    let Some(env) = repo() else {
        return;
    };
    let r = run_shell_pre(
        &env,
        "w2",
        &[("CKPT_FAILPOINTS", "hook.pre.after_snapshot=error")],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("blocked"), "{}", r.stderr);
    // The error names where it happened, never an empty path.
    assert!(!r.stderr.contains("``"), "{}", r.stderr);
    assert!(r.stderr.contains(".agent-runtime/index"), "{}", r.stderr);
    let recs = records(&env);
    let mine: Vec<_> = recs.iter().filter(|r| r["call"] == "w2").collect();
    assert_eq!(mine.len(), 2, "{mine:#?}");
    assert_eq!(mine[0]["status"], "started");
    assert_eq!(mine[1]["status"], "failed");
    assert_eq!(mine[1]["agent"], mine[0]["agent"]);
    assert_eq!(mine[1]["session"], mine[0]["session"]);
    assert!(
        mine[1]["error"]
            .as_str()
            .unwrap()
            .contains("could not take the workspace snapshot"),
        "{mine:#?}"
    );
    assert_eq!(
        std::fs::read_dir(env.rt().join("state/calls"))
            .unwrap()
            .count(),
        0,
        "no call is left open"
    );
    let rec = env.ckpt(&["--json", "recover"]);
    let v = rec.json();
    let call = v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["call"] == "w2")
        .unwrap_or_else(|| panic!("{v:#}"));
    assert_eq!(call["status"], "failed", "{v:#}");
    assert_eq!(env.ckpt(&["verify"]).code, 0);
}

/// A first shell hook sets up `.agent-runtime/` and walks the tree: the
/// call's changes are recorded exactly, the user's uncommitted file is
/// stored once, and nothing clean against git is copied.
#[test]
fn a_first_shell_hook_sets_up_and_records_exactly_the_calls_changes() {
    let Some(env) = repo_with_work(40) else {
        return;
    };
    assert!(!env.rt().exists());
    let post = |id: &str| {
        serde_json::json!({
            "session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "Bash",
            "tool_use_id": id, "cwd": env.ws, "tool_input": {"command": "true"},
        })
        .to_string()
    };
    let timed = [("CKPT_TIMINGS", "1")];
    let r =
        crate::common::run_with_stdin(&env, &["hook", "pre"], &shell_pre(&env, "first"), &timed);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // A first walk's size is unknown, so the allocator is told to expect much.
    assert!(r.stderr.contains("large tables ahead"), "{}", r.stderr);
    assert_eq!(blob_count(&env), 1, "only the untracked file is stored");
    env.write("many/f3.txt", b"changed by the call\n");
    env.write("made.txt", b"new\n");
    std::fs::remove_file(env.ws.join("src/b.txt")).unwrap();
    let r = crate::common::run_with_stdin(&env, &["hook", "post"], post("first").as_bytes(), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut ops = patch_ops(&env);
    ops.sort();
    assert_eq!(
        ops,
        [
            ("made.txt".to_string(), "create".to_string()),
            ("many/f3.txt".to_string(), "modify".to_string()),
            ("src/b.txt".to_string(), "delete".to_string()),
        ]
    );
    assert_eq!(env.ckpt(&["verify"]).code, 0);
    // A later hook on this small tree loads a small snapshot: nothing
    // large ahead.
    let r =
        crate::common::run_with_stdin(&env, &["hook", "pre"], &shell_pre(&env, "second"), &timed);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("scan: snapshot loaded"), "{}", r.stderr);
    assert!(r.stderr.contains("scan: walked"), "{}", r.stderr);
    assert!(!r.stderr.contains("large tables ahead"), "{}", r.stderr);
}

/// Issue 21 item 10: a shell call left in doubt (its post never came, its
/// agent gone or unknown) was named a candidate author of every later shell
/// change, in every session, so a rollback of any later call conflicted.
#[test]
fn a_shell_call_left_in_doubt_is_no_author_of_later_changes() {
    let env = TestEnv::init();
    // Left in doubt: its agent unknown, in session A; never a post.
    crate::hooks::hook_ok(
        &env,
        "pre",
        br#"{"session":"A","call":"lost","tool":"Bash"}"#,
    );
    // Later, another session's shell call writes a file.
    crate::hooks::hook_ok(&env, "pre", br#"{"session":"B","call":"b1","tool":"Bash"}"#);
    env.write("later.txt", b"b1 wrote this\n");
    crate::hooks::hook_ok(
        &env,
        "post",
        br#"{"session":"B","call":"b1","status":"succeeded"}"#,
    );
    let p = records(&env)
        .into_iter()
        .find(|r| r["kind"] == "file_patch")
        .unwrap();
    assert!(
        p.get("candidates")
            .is_none_or(|c| c.is_null() || c.as_array().is_some_and(|a| a.is_empty())),
        "{p}"
    );
    let r = env.ckpt(&["rollback", "--call", "b1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!env.ws.join("later.txt").exists());
}

/// Issue 21 item 1: a shell call's walk is bounded; past the limit the call
/// is not recorded, and the pre says how to opt in.
#[test]
fn a_tree_past_max_snapshot_files_is_not_walked_into_the_store() {
    let env = TestEnv::init();
    for i in 0..12 {
        env.write(&format!("d/f{i}.txt"), b"x\n");
    }
    let cfg = env.rt().join("config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace("max_snapshot_files = 500000", "max_snapshot_files = 5"),
    )
    .unwrap();
    let r = crate::hooks::hook(
        &env,
        "pre",
        br#"{"session":"s","call":"c1","tool":"Bash"}"#,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("max_snapshot_files"), "{}", r.stderr);
    let blobs = walk_count(&env.rt().join("artifacts/blobs"));
    assert_eq!(blobs, 0, "nothing of the tree was stored");
    // Raised: recorded.
    std::fs::write(&cfg, text).unwrap();
    crate::hooks::hook_ok(&env, "pre", br#"{"session":"s","call":"c2","tool":"Bash"}"#);
    assert!(
        walk_count(&env.rt().join("artifacts/blobs")) > 0,
        "the walk under the limit stores the tree's contents (so the check above means something)"
    );
}

fn walk_count(dir: &std::path::Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().is_dir() {
            n += walk_count(&e.path());
        } else {
            n += 1;
        }
    }
    n
}
