//! Storage proportional to what changed (issue 24): binary and large files'
//! patch artifacts hold git's one-line summary, not base85 copies of the
//! bytes the blob store already holds; `--binary` renders the whole patch
//! from the blobs, and `verify` accepts both forms (older workspaces hold
//! literal binary patches) but nothing else.

use std::path::Path;

use crate::common::{TestEnv, git_apply};

/// The ledger's records, in order.
fn records(env: &TestEnv) -> Vec<serde_json::Value> {
    std::fs::read_to_string(env.ledger_path())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .collect()
}

/// The `file_patch` records of the ledger, in order.
fn patches(env: &TestEnv) -> Vec<serde_json::Value> {
    let mut all = records(env);
    all.retain(|r| r["kind"] == "file_patch");
    all
}

fn artifact(env: &TestEnv, p: &serde_json::Value) -> Vec<u8> {
    std::fs::read(env.rt().join(p["patch_ref"].as_str().unwrap())).unwrap()
}

fn exec(env: &TestEnv, script: &str) {
    let r = env.ckpt(&["exec", "--", "sh", "-c", script]);
    assert_eq!(r.code, 0, "{script}: {}", r.stderr);
}

/// The bytes under `dir`, recursively.
fn du(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            if md.is_dir() { du(&e.path()) } else { md.len() }
        })
        .sum()
}

/// `ckpt show PATCH --binary --json`'s diff of the patch.
fn literal(env: &TestEnv, patch: &str) -> String {
    let r = env.ckpt(&["show", patch, "--binary", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.json()["diffs"][patch].as_str().unwrap().to_string()
}

#[test]
fn a_big_binary_files_artifacts_are_summaries_and_binary_renders_the_whole_patch() {
    let env = TestEnv::init();
    // 3 MB of noise, then 4 bytes appended: two patches.
    exec(&env, "head -c 3000000 /dev/urandom > big.bin");
    let first = std::fs::read(env.ws.join("big.bin")).unwrap();
    exec(&env, "printf abcd >> big.bin");
    let ps = patches(&env);
    assert_eq!(ps.len(), 2, "{ps:#?}");
    for p in &ps {
        assert_eq!(p["binary"], true, "{p}");
        let a = String::from_utf8(artifact(&env, p)).unwrap();
        assert!(a.len() < 300, "a summary, not the bytes: {} bytes", a.len());
        assert!(
            a.contains("\nindex ") && !a.contains("GIT binary patch"),
            "{a}"
        );
    }
    assert!(
        String::from_utf8(artifact(&env, &ps[0]))
            .unwrap()
            .ends_with("Binary files /dev/null and b/big.bin differ\n")
    );
    assert!(
        String::from_utf8(artifact(&env, &ps[1]))
            .unwrap()
            .ends_with("Binary files a/big.bin and b/big.bin differ\n")
    );
    // Two blobs of ~3 MB; the artifacts add next to nothing (they were
    // 2.5× the blobs: base85 of each side).
    let patches_dir = du(&env.rt().join("artifacts/patches"));
    assert!(patches_dir < 1000, "patch artifacts: {patches_dir} bytes");
    assert_eq!(env.ckpt(&["verify"]).code, 0);

    // --binary: the whole patch, which git applies.
    let whole = literal(&env, ps[1]["patch"].as_str().unwrap());
    assert!(whole.contains("GIT binary patch"), "{}", &whole[..200]);
    let mut want = first.clone();
    want.extend_from_slice(b"abcd");
    assert_eq!(
        git_apply(&env, whole.as_bytes(), "big.bin", Some(&first), "--binary").as_deref(),
        Some(&want[..])
    );
    // `ckpt diff` (what a rollback of everything takes out, as a diff from
    // what it leaves to what is there): the summary; with --binary, a patch
    // git applies.
    let d = env.ckpt(&["diff"]);
    assert_eq!(d.code, 0, "{}", d.stderr);
    assert!(d.stdout.len() < 300, "{}", d.stdout);
    assert!(
        d.stdout
            .ends_with("Binary files /dev/null and b/big.bin differ\n"),
        "{}",
        d.stdout
    );
    let d = env.ckpt(&["diff", "--binary"]);
    assert!(d.stdout.contains("GIT binary patch"));
    assert_eq!(
        git_apply(&env, d.stdout.as_bytes(), "big.bin", None, "diff --binary").as_deref(),
        Some(&want[..])
    );
    // The rollback itself restores from the blobs.
    let r = env.ckpt(&["rollback", "--last", "1", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(std::fs::read(env.ws.join("big.bin")).unwrap(), first);
    assert_eq!(env.ckpt(&["verify"]).code, 0);
}

#[test]
fn a_text_file_above_diff_max_bytes_gets_a_summary_that_verifies_whatever_the_setting() {
    let env = TestEnv::init();
    let cfg = env.rt().join("config.toml");
    let default = std::fs::read_to_string(&cfg).unwrap();
    assert!(default.contains("\ndiff_max_bytes = 8388608\n"));
    std::fs::write(
        &cfg,
        default.replace("\ndiff_max_bytes = 8388608\n", "\ndiff_max_bytes = 1000\n"),
    )
    .unwrap();
    exec(&env, "seq 1 2000 > big.txt; seq 1 10 > small.txt");
    let ps = patches(&env);
    let by_path = |p: &str| ps.iter().find(|r| r["path"] == p).unwrap().clone();
    let (big, small) = (by_path("big.txt"), by_path("small.txt"));
    assert_eq!(big["binary"], false);
    let a = String::from_utf8(artifact(&env, &big)).unwrap();
    assert!(
        a.ends_with("Binary files /dev/null and b/big.txt differ\n"),
        "{a}"
    );
    let a = String::from_utf8(artifact(&env, &small)).unwrap();
    assert!(a.contains("+10\n"), "a text diff below the limit: {a}");
    // The setting changed since: both artifacts still verify.
    std::fs::write(&cfg, &default).unwrap();
    let v = env.ckpt(&["verify", "--json"]);
    assert_eq!(v.code, 0, "{}", v.stdout);
    // --binary prints the whole text diff.
    let whole = literal(&env, big["patch"].as_str().unwrap());
    assert!(whole.contains("+2000\n") && !whole.contains("Binary files"));
}

#[test]
fn verify_accepts_an_older_literal_binary_artifact_and_refuses_any_other_change() {
    let env = TestEnv::init();
    exec(&env, "printf 'a\\000b' > x.bin");
    let p = patches(&env).remove(0);
    let path = env.rt().join(p["patch_ref"].as_str().unwrap());
    let summary = std::fs::read(&path).unwrap();
    // What earlier versions wrote for a binary file: the literal patch.
    let whole = literal(&env, p["patch"].as_str().unwrap());
    std::fs::write(&path, whole.as_bytes()).unwrap();
    assert_eq!(env.ckpt(&["verify"]).code, 0);
    // A summary of other contents (another index line) is not this patch's.
    let forged = String::from_utf8(summary).unwrap().replace(
        "index 0000000000000000000000000000000000000000..",
        "index 0000000000000000000000000000000000000000..1",
    );
    std::fs::write(&path, forged).unwrap();
    let v = env.ckpt(&["verify", "--json"]);
    assert_ne!(v.code, 0, "{}", v.stdout);
    assert!(
        v.stdout.contains("patch artifact does not hold the diff"),
        "{}",
        v.stdout
    );
}

#[test]
fn big_untracked_files_are_not_copied_at_first_use_and_status_says_so() {
    let env = TestEnv::new();
    crate::common::git(&env, &["init", "-q"]);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8 + 1).collect();
    let committed: Vec<u8> = big.iter().rev().copied().collect();
    env.write("big.dat", &big);
    env.write("committed.dat", &committed);
    env.write("small.txt", b"small\n");
    crate::common::git(&env, &["add", "committed.dat"]);
    crate::common::git(&env, &["commit", "-qm", "c"]);
    assert_eq!(env.ckpt(&["init"]).code, 0);
    let cfg = env.rt().join("config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("\nfirst_use_max_bytes = 16777216\n"));
    std::fs::write(
        &cfg,
        text.replace(
            "\nfirst_use_max_bytes = 16777216\n",
            "\nfirst_use_max_bytes = 100000\n",
        ),
    )
    .unwrap();
    // First use: the small file is copied, the big untracked one is not,
    // the committed one needs no copy (git holds it); the hook says so.
    let r = env.ckpt(&["exec", "--", "true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("no copy is kept of `big.dat` (300000 bytes)")
            && !r.stderr.contains("committed.dat"),
        "{}",
        r.stderr
    );
    // Said once, at first use, not by every call.
    let r = env.ckpt(&["exec", "--", "true"]);
    assert!(!r.stderr.contains("no copy is kept"), "{}", r.stderr);
    let blobs = du(&env.rt().join("artifacts/blobs"));
    assert!(
        blobs < 100_000,
        "the 300 KB file was copied: {blobs} bytes of blobs"
    );
    let st = env.ckpt(&["status", "--json"]);
    assert_eq!(st.code, 0, "{}", st.stderr);
    let un = st.json()["unprotected"].clone();
    assert_eq!(
        un,
        serde_json::json!([{"path": "big.dat", "reason": "not_copied_at_first_use", "size": 300000}]),
        "{un:#}"
    );
    let human = env.ckpt(&["status"]);
    assert!(
        human.stdout.contains("not protected (1 file") && human.stdout.contains("big.dat"),
        "{}",
        human.stdout
    );
    // A shell call changes it: recorded as not undoable, said at once.
    let r = env.ckpt(&["exec", "--", "sh", "-c", "printf x >> big.dat"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("not copied at first use"), "{}", r.stderr);
    let end = records(&env)
        .into_iter()
        .rev()
        .find(|r| r["kind"] == "tool_call" && r["status"] == "succeeded")
        .unwrap();
    assert_eq!(
        end["unrecorded"],
        serde_json::json!([{"path": "big.dat", "reason": "not_copied_at_first_use", "size": 300001}]),
        "{end:#}"
    );
    let rb = env.ckpt(&["rollback", "--call", end["call"].as_str().unwrap()]);
    assert!(
        rb.stdout.contains("not undone") && rb.stdout.contains("first_use_max_bytes"),
        "{}{}",
        rb.stdout,
        rb.stderr
    );
    let mut now = big.clone();
    now.push(b'x');
    assert_eq!(
        std::fs::read(env.ws.join("big.dat")).unwrap(),
        now,
        "left as it is"
    );
    // What the call left is stored (it changed after first use): from here
    // on the file is protected.
    let st = env.ckpt(&["status", "--json"]);
    assert_eq!(
        st.json()["unprotected"],
        serde_json::json!([]),
        "{}",
        st.stdout
    );
}
