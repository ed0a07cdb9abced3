//! T9: the last record cut at every byte offset (and NUL-filled) is tolerated by
//! readers and repaired by the next writer, with a byte-equal backup.

use ckpt::record::{Body, CallStatus, ToolCall};
use ckpt::{Draft, OpenOptions, Workspace};

use crate::common::TestEnv;

pub fn call_record(i: usize) -> Draft {
    Draft::in_session(
        Some(format!("s{}", i % 3)),
        Body::ToolCall(ToolCall {
            call: format!("call_{i:04}"),
            step: 1,
            tool: "Bash".into(),
            status: CallStatus::Started,
            input_hash: None,
            risk: None,
            idempotency: None,
            replay_policy: None,
            side_effects: vec!["fs".into()],
            paths: vec![],
            result_ref: None,
            compensation: None,
            error: None,
            agent: Some("test".into()),
            turn: None,
            subagent: None,
            before: vec![],
            unrecorded: vec![],
            outcome_unknown: false,
        }),
    )
}

/// A workspace whose ledger holds `n` tool_call records (no blobs referenced).
pub fn ledger_with(n: usize) -> TestEnv {
    let env = TestEnv::init();
    let ws = env.open();
    let drafts: Vec<Draft> = (1..=n).map(call_record).collect();
    ws.ledger().lock().unwrap().append(&drafts).unwrap();
    env
}

/// [`ledger_with`], with the last record's acknowledgement lost: its
/// `ledger.head` is as it was before (as when a crash hits while that record
/// is written, before its `fdatasync` returns). Returns the head's bytes.
fn ledger_with_unacked_last(n: usize) -> (TestEnv, Vec<u8>) {
    let env = ledger_with(n - 1);
    let head = env.rt().join("ledger.head");
    let before = std::fs::read(&head).unwrap();
    env.open().ledger().append(call_record(n)).unwrap();
    std::fs::write(&head, &before).unwrap();
    (env, before)
}

fn line_starts(bytes: &[u8]) -> Vec<usize> {
    let mut v = vec![0];
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'\n' && i + 1 < bytes.len() {
            v.push(i + 1);
        }
    }
    v
}

fn backups(env: &TestEnv) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(env.rt())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("ledger.jsonl.broken-")
        })
        .collect();
    v.sort();
    v
}

fn check_damaged_tail(
    env: &TestEnv,
    head: &[u8],
    full: &[u8],
    good_len: usize,
    damaged: &[u8],
    what: &str,
) {
    std::fs::write(env.ledger_path(), damaged).unwrap();
    std::fs::write(env.rt().join("ledger.head"), head).unwrap();
    for b in backups(env) {
        std::fs::remove_file(b).unwrap();
    }
    let ws = Workspace::open(&env.ws, OpenOptions::default()).unwrap();
    let read = ws.read_ledger().unwrap();
    assert_eq!(
        read.records.len(),
        49,
        "{what}: the reader returns records 1…49"
    );
    assert!(
        read.corruption.is_none(),
        "{what}: a torn tail is not corruption"
    );
    assert_eq!(read.torn.is_some(), damaged.len() > good_len, "{what}");

    // The next writer backs up, truncates, records the repair, then appends.
    let appended = ws.ledger().append(call_record(999)).unwrap();
    let after = std::fs::read(env.ledger_path()).unwrap();
    assert_eq!(
        &after[..good_len],
        &full[..good_len],
        "{what}: records 1…49 untouched"
    );
    let read = ws.read_ledger().unwrap();
    assert!(
        read.corruption.is_none() && read.torn.is_none(),
        "{what}: clean after repair"
    );
    let b = backups(env);
    if damaged.len() > good_len {
        assert_eq!(b.len(), 1, "{what}: one backup");
        assert_eq!(
            std::fs::read(&b[0]).unwrap(),
            damaged,
            "{what}: backup is byte-equal"
        );
        assert_eq!(read.records.len(), 51, "{what}: 49 + repair + new");
        assert_eq!(read.records[49].body.kind(), "repair");
        assert_eq!(
            read.records[49].prev.as_deref(),
            Some(read.records[48].hash.as_str()),
            "{what}: chains to 49"
        );
        assert_eq!(appended.seq, 51);
    } else {
        assert!(b.is_empty(), "{what}: nothing to repair, no backup");
        assert_eq!(read.records.len(), 50);
        assert_eq!(
            read.records[49].prev.as_deref(),
            Some(read.records[48].hash.as_str())
        );
    }
    assert!(
        ws.verify().unwrap().ok,
        "{what}: verify passes after repair"
    );
}

#[test]
fn last_record_cut_at_every_byte_offset_is_repaired() {
    let (env, head) = ledger_with_unacked_last(50);
    let full = std::fs::read(env.ledger_path()).unwrap();
    let starts = line_starts(&full);
    let last = *starts.last().unwrap();
    // Every cut from "record 50 entirely missing" to "only its newline missing".
    for cut in last..full.len() {
        check_damaged_tail(
            &env,
            &head,
            &full,
            last,
            &full[..cut],
            &format!("cut at {cut}"),
        );
    }
}

#[test]
fn nul_filled_tails_are_torn_not_corrupt() {
    let (env, head) = ledger_with_unacked_last(50);
    let full = std::fs::read(env.ledger_path()).unwrap();
    let last = *line_starts(&full).last().unwrap();
    let len50 = full.len() - last;
    for keep in [0, 1, len50 / 2, len50 - 1] {
        // Record 50's tail replaced by NULs (size kept), as after a power loss.
        let mut d = full.clone();
        for b in &mut d[last + keep..] {
            *b = 0;
        }
        check_damaged_tail(&env, &head, &full, last, &d, &format!("NUL from {keep}"));
        // Record 50 intact but followed by a NUL extension: 50 stays.
        let mut ext = full.clone();
        ext.extend(std::iter::repeat_n(0u8, 512 + keep));
        std::fs::write(env.ledger_path(), &ext).unwrap();
        std::fs::write(env.rt().join("ledger.head"), &head).unwrap();
        let ws = env.open();
        let read = ws.read_ledger().unwrap();
        assert_eq!(read.records.len(), 50);
        assert!(read.torn.is_some());
        ws.ledger().append(call_record(1000)).unwrap();
        let after = std::fs::read(env.ledger_path()).unwrap();
        assert_eq!(&after[..full.len()], &full[..], "record 50 is kept");
    }
}

#[test]
fn a_torn_first_write_leaves_an_empty_ledger() {
    let env = TestEnv::init();
    std::fs::write(env.ledger_path(), b"{\"v\":1,\"seq\":1,\"ts\":\"20").unwrap();
    let ws = env.open();
    assert_eq!(ws.read_ledger().unwrap().records.len(), 0);
    let a = ws.ledger().append(call_record(1)).unwrap();
    assert_eq!(a.seq, 2, "seq 1 is the repair record");
    let read = ws.read_ledger().unwrap();
    assert_eq!(read.records[0].body.kind(), "repair");
    assert_eq!(read.records[0].prev, None);
}

#[test]
fn cli_readers_tolerate_a_torn_tail_and_say_so() {
    let (env, _) = ledger_with_unacked_last(5);
    let mut full = std::fs::read(env.ledger_path()).unwrap();
    full.truncate(full.len() - 10);
    std::fs::write(env.ledger_path(), &full).unwrap();
    let r = env.ckpt(&["log"]);
    assert_eq!(r.code, 0);
    assert_eq!(r.stdout.lines().count(), 4);
    assert!(r.stderr.contains("torn"), "{}", r.stderr);
    let v = env.ckpt(&["verify"]);
    assert_eq!(v.code, 4, "verify reports the torn tail: {}", v.stdout);
    assert_eq!(
        env.ckpt(&["checkpoint"]).code,
        0,
        "the next write repairs it"
    );
    assert_eq!(env.ckpt(&["verify"]).code, 0);
}

/// Content waiting in the durable set holds back the records it must
/// precede, what no record names is synced beside them, and a failed sync
/// is never reported as durable.
#[test]
fn a_failed_sync_of_waiting_content_is_reported_by_the_next_append() {
    // `fdatasync` of a pipe fails (EINVAL): a sync that cannot succeed.
    let unsyncable = || {
        let (r, _w) = std::io::pipe().unwrap();
        std::fs::File::from(std::os::fd::OwnedFd::from(r))
    };
    let env = TestEnv::init();
    let ws = env.open();

    // Content must precede the records: nothing is written.
    ws.durable().content(unsyncable()).unwrap();
    let e = ws.ledger().append(call_record(1)).unwrap_err();
    assert!(e.to_string().contains("sync"), "{e}");
    assert_eq!(ws.read_ledger().unwrap().records.len(), 0);

    // Unnamed content need only precede the return: the record is written
    // and synced, but the append does not report success.
    ws.durable().unnamed(unsyncable()).unwrap();
    let e = ws.ledger().append(call_record(2)).unwrap_err();
    assert!(e.to_string().contains("sync"), "{e}");
    assert_eq!(ws.read_ledger().unwrap().records.len(), 1);

    // Each failure is reported once; nothing is left waiting.
    assert!(ws.durable().is_clean());
    ws.ledger().append(call_record(3)).unwrap();
    assert_eq!(ws.read_ledger().unwrap().records.len(), 2);
}

/// `log -n N` reads the last N records from the end of the ledger: the same
/// records as the whole read's last N, on a ledger bigger than its first
/// window; a torn, damaged or cut-off end makes it read everything and say
/// what is wrong, as `log` does.
#[test]
fn log_n_reads_the_end_and_falls_back_on_an_unclean_one() {
    // The last record's acknowledgement lost (`ledger.head` at 2999), so
    // cutting into it is a torn tail, not records lost.
    let (env, _) = ledger_with_unacked_last(3000);
    let all = env.ckpt(&["log", "--json"]).json()["records"].clone();
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 3000);
    for n in ["1", "20", "2999", "3000", "5000"] {
        let last = env.ckpt(&["log", "-n", n, "--json"]);
        assert_eq!(last.code, 0, "{}", last.stderr);
        let last = last.json()["records"].as_array().unwrap().clone();
        let k = n.parse::<usize>().unwrap().min(3000);
        assert_eq!(last.as_slice(), &all[3000 - k..], "-n {n}");
    }
    let full = std::fs::read(env.ledger_path()).unwrap();
    // A torn tail: the whole read says so, and shows what is valid.
    let mut torn = full.clone();
    torn.truncate(torn.len() - 10);
    std::fs::write(env.ledger_path(), &torn).unwrap();
    let r = env.ckpt(&["log", "-n", "2"]);
    assert_eq!(r.code, 0);
    assert!(r.stderr.contains("torn"), "{}", r.stderr);
    assert_eq!(r.stdout.lines().count(), 2);
    assert!(r.stdout.contains(" 2999 "), "{}", r.stdout);
    // A changed byte in the last record: the damage is reported.
    let mut flipped = full.clone();
    let at = flipped.len() - 100;
    flipped[at] ^= 1;
    std::fs::write(env.ledger_path(), &flipped).unwrap();
    let r = env.ckpt(&["log", "-n", "2"]);
    assert!(
        r.stderr.contains("torn") || r.stderr.contains("partial history"),
        "{}",
        r.stderr
    );
    // Records cut off whole past `ledger.head`'s: said too.
    let starts: Vec<usize> = full
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
        .collect();
    std::fs::write(env.ledger_path(), &full[..starts[starts.len() - 3]]).unwrap();
    let r = env.ckpt(&["log", "-n", "2"]);
    assert!(r.stderr.contains("partial history"), "{}", r.stderr);
    // Damage further back is not read by `-n` (only `log`, `verify` and
    // the commands that read it all see it): this is the end read.
    // (The earlier damage is taken back and its mark with it.)
    let _ = std::fs::remove_file(env.rt().join(ckpt::ledger::DAMAGED_FILE));
    let mut middle = full.clone();
    middle[starts[10] + 30] ^= 1;
    std::fs::write(env.ledger_path(), &middle).unwrap();
    let r = env.ckpt(&["log", "-n", "2"]);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert_eq!(r.stdout.lines().count(), 2);
    let r = env.ckpt(&["log"]);
    assert!(r.stderr.contains("partial history"), "{}", r.stderr);
    // Found once, the damage is marked: `-n` reads it all and says so too.
    let r = env.ckpt(&["log", "-n", "2"]);
    assert!(r.stderr.contains("partial history"), "{}", r.stderr);
}
