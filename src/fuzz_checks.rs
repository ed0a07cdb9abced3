//! The properties the fuzz targets in `fuzz/` check (RELIABILITY T19–T21),
//! here so that the default test suite replays the committed corpus through
//! exactly the same checks (`tests/fuzz_corpus.rs`). Each function panics
//! when a property does not hold; none reads or writes any file.

use crate::capture::{self, Format, Phase};
use crate::ledger;
use crate::merge::{self, Labels, MergeInput, MergeOutcome};

/// T20: any bytes on a hook's stdin, in every phase and format, are parsed
/// or refused, never a panic; what is accepted carries no id a one-line
/// message could be split by.
pub fn hook_stdin(data: &[u8]) {
    use Phase::*;
    for phase in [Pre, Post, PostFailure, Prompt, SessionStart, TurnEnd] {
        for format in [
            None,
            Some(Format::Claude),
            Some(Format::Codex),
            Some(Format::Gemini),
            Some(Format::Cursor),
            Some(Format::Generic),
        ] {
            if let Ok(ev) = capture::parse(data, phase, format) {
                for id in [&ev.call, &ev.session, &ev.turn].into_iter().flatten() {
                    assert!(
                        !id.chars().any(char::is_control),
                        "an id with a control character was accepted: {id:?}"
                    );
                }
            }
        }
    }
}

/// T19: any bytes as a ledger: each line is checked or refused without a
/// panic, and `ckpt repair`'s rebuild of them is a ledger whose every line
/// checks, with seqs 1…n in order, each `prev` the line before's hash, and
/// which a second rebuild leaves byte for byte as it is.
pub fn ledger_read(data: &[u8]) {
    for line in data.split(|&b| b == b'\n') {
        let _ = ledger::check_line(line);
    }
    let Ok(once) = ledger::rebuild(data, &ledger::Tail::default(), None, "damaged/fuzz.jsonl")
    else {
        return;
    };
    let mut prev: Option<String> = None;
    let mut seq = 0u64;
    for line in once.bytes.split_inclusive(|&b| b == b'\n') {
        let body = line
            .strip_suffix(b"\n")
            .expect("every rebuilt line ends with \\n");
        let c = ledger::check_line(body).expect("every rebuilt line checks");
        seq += 1;
        assert_eq!(c.seq(), seq, "rebuilt seqs run 1…n");
        assert_eq!(c.prev(), prev.as_deref(), "rebuilt lines chain");
        prev = Some(c.hash().to_string());
    }
    assert_eq!(once.tail.seq, seq);
    let twice = ledger::rebuild(
        &once.bytes,
        &ledger::Tail::default(),
        None,
        "damaged/fuzz.jsonl",
    )
    .expect("rebuilds");
    assert!(!twice.changed, "a rebuilt ledger needs no second rebuild");
    assert_eq!(twice.bytes, once.bytes);
}

/// T21: any three versions, split out of `data` at `\0\xff` marks, merge or
/// are refused without a panic, and the answers that must hold do: taking
/// out a patch from a file still as the patch left it gives the file before
/// it; a merge where one side did not change gives the other side.
pub fn merge(data: &[u8]) {
    let mut parts = data
        .split(|&b| b == 0xff)
        .map(|p| p.strip_suffix(b"\0").unwrap_or(p));
    let before = parts.next().unwrap_or_default();
    let after = parts.next().unwrap_or_default();
    let current = parts.next().unwrap_or_default();
    match merge::undo_patch(before, after, after) {
        Ok(MergeOutcome::Clean(b)) => assert_eq!(b, before, "undo of an untouched patch"),
        other => panic!("undo of an untouched patch: {other:?}"),
    }
    let _ = merge::undo_patch(before, after, current);
    let _ = merge::undo_patch_preferring_before(before, after, current);
    let _ = merge::changes_overlap(before, after, current);
    let unchanged_ours = MergeInput {
        ancestor: before,
        ours: before,
        theirs: current,
    };
    if let Ok(MergeOutcome::Clean(m)) = merge::merge3(&unchanged_ours, &Labels::UNDO) {
        assert_eq!(
            m, current,
            "a merge with one side unchanged gives the other"
        );
    }
}
