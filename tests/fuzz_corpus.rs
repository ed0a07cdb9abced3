//! RELIABILITY T19–T21, default tier: every input in the committed fuzz
//! corpus (`fuzz/corpus/<target>/`: seeds, plus what fuzzing found worth
//! keeping, crash inputs included) replayed through the same checks the
//! fuzz targets run (`ckpt::fuzz_checks`), each within a second.

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    names.sort();
    for p in names {
        let data = std::fs::read(&p).unwrap();
        let t = std::time::Instant::now();
        check(&data);
        assert!(
            t.elapsed() < std::time::Duration::from_secs(1),
            "{}: {:?}",
            p.display(),
            t.elapsed()
        );
        n += 1;
    }
    assert!(n >= 5, "{target}: only {n} corpus inputs");
}

#[test]
fn the_hook_stdin_corpus_replays() {
    replay("hook_stdin", ckpt::fuzz_checks::hook_stdin);
}

#[test]
fn the_ledger_corpus_replays() {
    replay("ledger_read", ckpt::fuzz_checks::ledger_read);
}

#[test]
fn the_merge_corpus_replays() {
    replay("merge", ckpt::fuzz_checks::merge);
}
