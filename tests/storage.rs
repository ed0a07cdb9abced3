//! Storage proportional to what changed (issue 24): binary and large files'
//! patch artifacts hold git's one-line summary, not base85 copies of the
//! bytes the blob store already holds; `--binary` renders the whole patch
//! from the blobs, and `verify` accepts both forms (older workspaces hold
//! literal binary patches) but nothing else.

use std::path::Path;

use crate::common::{TestEnv, blob_file, chunks_of, git_apply, noise};

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

/// `ckpt checkpoint --json`'s id.
fn checkpoint(env: &TestEnv) -> String {
    let r = env.ckpt(&["checkpoint", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.json()["checkpoint"].as_str().unwrap().to_string()
}

/// The agent copies `bytes` in as `big.bin` (from outside the workspace),
/// then writes four bytes over its middle; returns the second version.
fn big_file_then_four_bytes_changed(env: &TestEnv, bytes: &[u8]) -> Vec<u8> {
    let src = env.dir.path().join("source.bin");
    std::fs::write(&src, bytes).unwrap();
    exec(env, &format!("cp '{}' big.bin", src.display()));
    let mid = bytes.len() / 2;
    exec(
        env,
        &format!("printf abcd | dd of=big.bin bs=1 seek={mid} conv=notrunc 2>/dev/null"),
    );
    let mut v2 = bytes.to_vec();
    v2[mid..mid + 4].copy_from_slice(b"abcd");
    assert_eq!(std::fs::read(env.ws.join("big.bin")).unwrap(), v2);
    v2
}

/// The 200 MB scenario's shape at 20 MiB: a big file is stored as chunks
/// (content-defined, so an edit in the middle adds about one chunk), both
/// versions together take little more than one, and rollbacks restore each
/// byte for byte.
#[test]
fn a_big_files_versions_share_chunks_and_each_is_restored_byte_for_byte() {
    let env = TestEnv::init();
    let v1 = noise(20 << 20, 1);
    let c0 = checkpoint(&env);
    let src = env.dir.path().join("source.bin");
    std::fs::write(&src, &v1).unwrap();
    exec(&env, &format!("cp '{}' big.bin", src.display()));
    let c1 = checkpoint(&env);
    let mid = v1.len() / 2;
    exec(
        &env,
        &format!("printf abcd | dd of=big.bin bs=1 seek={mid} conv=notrunc 2>/dev/null"),
    );
    let mut v2 = v1.clone();
    v2[mid..mid + 4].copy_from_slice(b"abcd");
    let k1 = chunks_of(&env, &v1).expect("the first version is stored as chunks");
    let k2 = chunks_of(&env, &v2).expect("the second version is stored as chunks");
    let new: u64 = k2.iter().filter(|c| !k1.contains(c)).map(|c| c.1).sum();
    assert!(
        (1..=8 << 20).contains(&new),
        "the change added {new} bytes of chunks"
    );
    // Goal: .agent-runtime/ at most 1.1 × the bytes that changed (here
    // the whole first version and four bytes).
    let total = du(&env.rt());
    assert!(
        total <= v1.len() as u64 * 11 / 10,
        ".agent-runtime/ holds {total} bytes for {} changed",
        v1.len()
    );
    for (h, _) in k1.iter().chain(&k2) {
        assert!(blob_file(&env, h).is_file(), "chunk {h}");
    }
    assert_eq!(env.ckpt(&["verify"]).code, 0);
    let c2 = checkpoint(&env);
    let r = env.ckpt(&["rollback", "--to", &c1]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(std::fs::read(env.ws.join("big.bin")).unwrap() == v1);
    let r = env.ckpt(&["rollback", "--to", &c0]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!env.ws.join("big.bin").exists());
    // And forward again: the newest version comes back from its chunks.
    let r = env.ckpt(&["rollback", "--to", &c2]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(std::fs::read(env.ws.join("big.bin")).unwrap() == v2);
    assert_eq!(env.ckpt(&["verify"]).code, 0);
}

/// Damage to a chunk is named by verify (the chunk's own path), refused by
/// the rollback that needs it, and moved aside by repair; a manifest turned
/// to garbage is named too, stops gc (which cannot tell what it keeps), and
/// goes to `damaged/chunks/`.
#[test]
fn a_damaged_chunk_or_manifest_is_named_refused_and_moved_aside() {
    let env = TestEnv::init();
    let v1 = noise(17 << 20, 2);
    let c0 = checkpoint(&env);
    let v2 = big_file_then_four_bytes_changed(&env, &v1);
    let k1 = chunks_of(&env, &v1).unwrap();
    let k2 = chunks_of(&env, &v2).unwrap();
    let (victim, _) = k1.iter().find(|c| !k2.contains(c)).unwrap().clone();
    let at = blob_file(&env, &victim);
    let mut bytes = std::fs::read(&at).unwrap();
    bytes[7] ^= 0x20;
    std::fs::write(&at, &bytes).unwrap();
    let chunk_path = format!("artifacts/blobs/{}/{}", &victim[..2], &victim[2..]);

    let v = env.ckpt(&["verify", "--json"]);
    assert_eq!(v.code, 4, "{}", v.stdout);
    let problems = v.json()["problems"].clone();
    assert!(
        problems
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["path"] == chunk_path.as_str()),
        "{problems:#}"
    );
    // Undoing the second call needs the first version: refused, the file
    // left as it is.
    let r = env.ckpt(&["rollback", "--last", "1"]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(std::fs::read(env.ws.join("big.bin")).unwrap() == v2);
    let r = env.ckpt(&["repair", "--json"]);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(
        env.rt().join("damaged/blobs").join(&victim).is_file(),
        "{}",
        r.stdout
    );
    assert!(!at.exists());
    // What does not need the chunk still works: back to before both calls.
    let r = env.ckpt(&["rollback", "--to", &c0]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!env.ws.join("big.bin").exists());

    // The second version's manifest turned to garbage.
    let hex = ckpt::ContentHash::of(&v2).hex();
    let manifest = format!("artifacts/chunks/{}/{}", &hex[..2], &hex[2..]);
    std::fs::write(env.rt().join(&manifest), b"not a manifest\n").unwrap();
    let v = env.ckpt(&["verify", "--json"]);
    assert_eq!(v.code, 4, "{}", v.stdout);
    assert!(
        v.json()["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["path"] == manifest.as_str()),
        "{}",
        v.stdout
    );
    let g = env.ckpt(&["gc"]);
    assert_ne!(g.code, 0);
    assert!(
        g.stderr.contains("ckpt collects nothing") && g.stderr.contains("ckpt repair"),
        "{}",
        g.stderr
    );
    let r = env.ckpt(&["repair"]);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(
        r.stdout.contains("damaged chunk list") && r.stdout.contains("damaged/chunks/"),
        "{}",
        r.stdout
    );
    assert!(env.rt().join("damaged/chunks").join(&hex).is_file());
    assert!(!env.rt().join(&manifest).exists());
}

/// A crash at any write point while a big file is stored as chunks (chunks
/// published, manifest not yet; manifest published, record not yet) leaves
/// a workspace that verifies; the same copy run again records the file,
/// and a rollback then restores what was there before byte for byte.
#[test]
fn a_crash_while_a_big_file_is_stored_as_chunks_leaves_a_workspace_that_verifies() {
    let v = noise(17 << 20, 6);
    let before = noise(17 << 20, 7);
    let mut k = 1u64;
    for crashed in 0..60 {
        let env = TestEnv::init();
        let src = env.dir.path().join("source.bin");
        std::fs::write(&src, &v).unwrap();
        env.write("big.bin", &before);
        let copy = format!("cp '{}' big.bin", src.display());
        // First use stores `before` (at most first_use_max_bytes: raised).
        let cfg = env.rt().join("config.toml");
        let text = std::fs::read_to_string(&cfg).unwrap();
        std::fs::write(
            &cfg,
            text.replace(
                "\nfirst_use_max_bytes = 16777216\n",
                "\nfirst_use_max_bytes = 33554432\n",
            ),
        )
        .unwrap();
        let r = env.ckpt_env(
            &["exec", "--", "sh", "-c", &copy],
            &[("CKPT_FAILPOINTS", &format!("*={k}*abort"))],
        );
        if r.code == 0 {
            assert!(crashed >= 4, "only {crashed} write points crashed");
            return;
        }
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
        let v1 = env.ckpt(&["verify"]);
        assert_eq!(v1.code, 0, "after a crash at {k}: {}", v1.stdout);
        // The copy again (the crashed call stays in doubt, its effect on
        // disk or not): recorded, and undone back to `before`.
        std::fs::write(env.ws.join("big.bin"), &before).unwrap();
        exec(&env, &copy);
        assert!(chunks_of(&env, &v).is_some(), "after a crash at {k}");
        let r = env.ckpt(&["rollback", "--last", "1"]);
        assert_eq!(r.code, 0, "after a crash at {k}: {}", r.stderr);
        assert!(
            std::fs::read(env.ws.join("big.bin")).unwrap() == before,
            "after a crash at {k}"
        );
        assert_eq!(env.ckpt(&["verify"]).code, 0, "after a crash at {k}");
        // Every write point early on, then a sample of the chunk publishes.
        k += if k < 6 { 1 } else { 11 };
    }
    panic!("the copy never finished without a crash");
}
