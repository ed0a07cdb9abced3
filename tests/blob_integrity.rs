//! T11: a referenced blob that is swapped, truncated, bit-flipped, or replaced by
//! a symlink or a FIFO is never used: reads fail with a specific error, quickly,
//! and `verify` names it.

use std::time::{Duration, Instant};

use ckpt::ContentHash;
use ckpt::blob_store::BlobError;

use crate::common::TestEnv;

fn blob_path(env: &TestEnv, h: &ContentHash) -> std::path::PathBuf {
    let hex = h.hex();
    env.rt()
        .join("artifacts/blobs")
        .join(&hex[..2])
        .join(&hex[2..])
}

#[test]
fn put_then_get_round_trips_and_dedups() {
    let env = TestEnv::init();
    let ws = env.open();
    for data in [
        &b""[..],
        b"x",
        b"hello\r\nworld",
        &vec![7u8; 5 * 1024 * 1024],
    ] {
        let h = ws.blobs().put_bytes(data).unwrap();
        assert_eq!(h, ContentHash::of(data));
        assert_eq!(ws.blobs().get(&h).unwrap(), data);
        assert_eq!(
            ws.blobs().put_bytes(data).unwrap(),
            h,
            "storing twice is harmless"
        );
    }
    // Streaming put of a file larger than the small-file threshold.
    let big: Vec<u8> = (0..9_000_000u32).map(|i| (i % 251) as u8).collect();
    env.write("big.bin", &big);
    let mut f = std::fs::File::open(env.ws.join("big.bin")).unwrap();
    let (h, n) = ws.blobs().put_file(&mut f).unwrap();
    assert_eq!(n, big.len() as u64);
    assert_eq!(h, ContentHash::of(&big));
    let mut out = Vec::new();
    ws.blobs().copy_to(&h, &mut out).unwrap();
    assert!(out == big);
}

#[test]
fn tampered_blobs_are_refused_and_reported() {
    type Tamper = fn(&std::path::Path, &std::path::Path);
    let cases: Vec<(&str, Tamper, &str)> = vec![
        (
            "swapped",
            |p, other| std::fs::copy(other, p).map(|_| ()).unwrap(),
            "blob_hash_mismatch",
        ),
        (
            "truncated",
            |p, _| {
                let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
                f.set_len(3).unwrap();
            },
            "blob_hash_mismatch",
        ),
        (
            "bit-flipped",
            |p, _| {
                let mut b = std::fs::read(p).unwrap();
                b[5] ^= 1;
                std::fs::write(p, b).unwrap();
            },
            "blob_hash_mismatch",
        ),
        (
            "a symlink",
            |p, _| {
                std::fs::remove_file(p).unwrap();
                std::os::unix::fs::symlink("/etc/passwd", p).unwrap();
            },
            "blob_not_regular",
        ),
        (
            "a FIFO",
            |p, _| {
                std::fs::remove_file(p).unwrap();
                crate::common::mkfifo(p);
            },
            "blob_not_regular",
        ),
        (
            "missing",
            |p, _| std::fs::remove_file(p).unwrap(),
            "blob_missing",
        ),
    ];
    for (what, tamper, code) in cases {
        let env = TestEnv::init();
        let ws = env.open();
        let p = ws.rel_path(b"f.txt", None).unwrap();
        let q = ws.rel_path(b"g.txt", None).unwrap();
        let mut call = ws
            .begin_call(ckpt::CallOptions {
                tool: "Write".into(),
                ..Default::default()
            })
            .unwrap();
        call.write_file(&p, b"the agent's content of f\n").unwrap();
        call.write_file(&q, b"another file\n").unwrap();
        let stats = call.finish(ckpt::CallStatus::Succeeded, None).unwrap();
        let h = stats
            .patches
            .iter()
            .find(|x| x.path == p)
            .unwrap()
            .after_hash
            .unwrap();
        let other = stats
            .patches
            .iter()
            .find(|x| x.path == q)
            .unwrap()
            .after_hash
            .unwrap();
        assert!(ws.verify().unwrap().ok);

        tamper(&blob_path(&env, &h), &blob_path(&env, &other));
        let t = Instant::now();
        let err = ws.blobs().get(&h).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(1), "{what}: no hang");
        assert_eq!(err.code(), code, "{what}: {err}");
        if let BlobError::HashMismatch(x) | BlobError::NotRegular(x) | BlobError::Missing(x) = err {
            assert_eq!(x, h);
        }
        assert!(
            ws.blobs().get(&other).is_ok(),
            "{what}: other blobs still usable"
        );

        let r = env.ckpt(&["verify", "--json"]);
        assert_eq!(r.code, 4, "{what}");
        let j = r.json();
        let problems = j["problems"].as_array().unwrap();
        assert_eq!(problems.len(), 1, "{what}: {problems:?}");
        assert!(
            problems[0]["problem"].as_str().unwrap().starts_with(code),
            "{what}: {problems:?}"
        );
        assert!(
            problems[0]["path"]
                .as_str()
                .unwrap()
                .ends_with(&h.hex()[2..])
        );
    }
}

#[test]
fn a_damaged_existing_blob_is_replaced_by_a_verified_copy() {
    let env = TestEnv::init();
    let ws = env.open();
    let data = b"content that will be damaged then stored again";
    let h = ws.blobs().put_bytes(data).unwrap();
    let p = blob_path(&env, &h);
    let mut b = std::fs::read(&p).unwrap();
    b[0] ^= 1;
    std::fs::write(&p, b).unwrap();
    assert!(ws.blobs().get(&h).is_err());
    ws.blobs().put_reader(&mut &data[..]).unwrap();
    assert_eq!(ws.blobs().get(&h).unwrap(), data);
}

/// Issue 21 item 6: a patch artifact replaced by other bytes passed
/// `verify`, though the README says every artifact is checked.
#[test]
fn a_patch_artifact_replaced_by_junk_fails_verify() {
    let env = crate::common::TestEnv::init();
    let f = env.ws.join("a.txt");
    std::fs::write(&f, "one\n").unwrap();
    let p = |ev: &str| {
        serde_json::json!({"session_id": "s", "tool_use_id": "e1", "cwd": env.ws,
            "hook_event_name": ev, "tool_name": "Edit",
            "tool_input": {"file_path": f, "old_string": "one", "new_string": "two"},
            "tool_response": {}})
        .to_string()
    };
    assert_eq!(
        crate::hooks::hook(&env, "pre", p("PreToolUse").as_bytes(), &[]).code,
        0
    );
    std::fs::write(&f, "two\n").unwrap();
    assert_eq!(
        crate::hooks::hook(&env, "post", p("PostToolUse").as_bytes(), &[]).code,
        0
    );
    assert_eq!(env.ckpt(&["verify"]).code, 0);
    let dir = env.rt().join("artifacts/patches");
    let diff = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut perms = std::fs::metadata(&diff).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
    std::fs::set_permissions(&diff, perms).unwrap();
    std::fs::write(
        &diff,
        b"--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+rm -rf /\n",
    )
    .unwrap();
    let v = env.ckpt(&["verify"]);
    assert_eq!(v.code, 4, "{}", v.stdout);
    assert!(
        v.stdout.contains("patch artifact does not hold"),
        "{}",
        v.stdout
    );
}
