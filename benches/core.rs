//! Core benchmarks (issue 2): each ckpt figure beside its floor, measured in the
//! same run on the same disk.
//!
//! ```text
//! cargo bench --bench core            # full sizes (1,000,000-record ledger, 256 MiB blob)
//! CKPT_BENCH_QUICK=1 cargo bench --bench core   # small sizes, for a smoke run
//! CKPT_BENCH_ONLY=read cargo bench --bench core  # one group: append, read, recover, blob
//! ```
//!
//! Prints a Markdown table; BENCHMARKS.md quotes it.

#[path = "common/report.rs"]
mod report;

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use ckpt::record::{Body, CallStatus, ToolCall};
use ckpt::{ContentHash, Draft, Workspace};

fn record(i: usize) -> Draft {
    Draft::in_session(
        Some("bench-session-1".into()),
        Body::ToolCall(ToolCall {
            call: format!("toolu_01bench{i:010}"),
            step: 1,
            tool: "Edit".into(),
            status: CallStatus::Started,
            input_hash: Some(ContentHash::of(&i.to_le_bytes())),
            risk: Some(ckpt::record::Risk::Medium),
            idempotency: Some(ckpt::record::Idempotency::Conditional),
            replay_policy: Some(ckpt::record::ReplayPolicy::Auto),
            side_effects: vec!["fs".into()],
            paths: vec![],
            result_ref: None,
            compensation: None,
            error: None,
            agent: Some("claude".into()),
            turn: None,
            subagent: None,
            before: vec![],
            unrecorded: vec![],
            outcome_unknown: false,
        }),
    )
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn scratch(name: &str) -> std::path::PathBuf {
    // Under target/ so the benchmark runs on the project's disk, not a tmpfs.
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/bench-scratch")
        .join(name);
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

#[allow(clippy::disallowed_methods)] // the floors: a bare fdatasync, as PERFORMANCE.md measures it
fn main() {
    let quick = std::env::var("CKPT_BENCH_QUICK").is_ok();
    let mut rows: Vec<(String, String, String, String)> = Vec::new();

    let only = std::env::var("CKPT_BENCH_ONLY").unwrap_or_default();
    let want = |name: &str| only.is_empty() || only.split(',').any(|x| x == name);
    if want("append") {
        // 1. Append + fdatasync latency vs a bare fdatasync'd append of the same bytes.
        let n = if quick { 200 } else { 2000 };
        let dir = scratch("append");
        let (ws, _) = Workspace::init(&dir, Default::default()).unwrap();
        ws.ledger().append(record(0)).unwrap();
        let mut lat = Vec::with_capacity(n);
        for i in 0..n {
            let t = Instant::now();
            ws.ledger().append(record(i + 1)).unwrap();
            lat.push(t.elapsed());
        }
        let line_len = std::fs::metadata(dir.join(".agent-runtime/ledger.jsonl"))
            .unwrap()
            .len()
            / (n as u64 + 1);
        let line = vec![b'x'; line_len as usize - 1];
        let floor_path = dir.join("floor.jsonl");
        let mut floor_keep = Vec::with_capacity(n);
        let mut f = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&floor_path)
            .unwrap();
        for _ in 0..n {
            let mut buf = line.clone();
            buf.push(b'\n');
            let t = Instant::now();
            f.write_all(&buf).unwrap();
            f.sync_data().unwrap();
            floor_keep.push(t.elapsed());
        }
        let mut floor_open = Vec::with_capacity(n);
        for _ in 0..n {
            let mut buf = line.clone();
            buf.push(b'\n');
            let t = Instant::now();
            let mut f = OpenOptions::new().append(true).open(&floor_path).unwrap();
            f.write_all(&buf).unwrap();
            f.sync_data().unwrap();
            drop(f);
            floor_open.push(t.elapsed());
        }
        let (p50, p99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));
        let (f50, f99) = (pct(&mut floor_open, 0.5), pct(&mut floor_open, 0.99));
        let (k50, k99) = (pct(&mut floor_keep, 0.5), pct(&mut floor_keep, 0.99));
        rows.push((
            format!(
                "ledger append + fdatasync ({line_len} B record, lock, tail check, head), p50 / p99"
            ),
            format!("{} / {}", ms(p50), ms(p99)),
            format!(
                "open + append + fdatasync + close: {} / {}; fd kept open: {} / {}",
                ms(f50),
                ms(f99),
                ms(k50),
                ms(k99)
            ),
            format!(
                "{:.2}× (p50 vs open+append floor)",
                p50.as_secs_f64() / f50.as_secs_f64()
            ),
        ));
    }
    if want("read") {
        // 2. Reading a 1,000,000-record ledger.
        let n = if quick { 50_000 } else { 1_000_000 };
        let dir = scratch("read");
        // Building the input only: no fsync.
        let opts = ckpt::OpenOptions {
            fsync: ckpt::durable::Fsync::Off,
            ..Default::default()
        };
        let (ws, _) = Workspace::init(&dir, opts).unwrap();
        {
            let mut lock = ws.ledger().lock().unwrap();
            let mut i = 0;
            while i < n {
                let batch: Vec<Draft> = (i..(i + 10_000).min(n)).map(record).collect();
                lock.append(&batch).unwrap();
                i += batch.len();
            }
        }
        let path = dir.join(".agent-runtime/ledger.jsonl");
        let size = std::fs::metadata(&path).unwrap().len();
        // Warm the page cache once, then measure the floor: read + split lines.
        let _ = std::fs::read(&path).unwrap();
        let t = Instant::now();
        let mut f = File::open(&path).unwrap();
        let mut buf = vec![0u8; 4 << 20];
        let mut lines = 0usize;
        loop {
            let k = f.read(&mut buf).unwrap();
            if k == 0 {
                break;
            }
            lines += memchr::memchr_iter(b'\n', &buf[..k]).count();
        }
        let floor_split = t.elapsed();
        assert_eq!(lines, n);
        // Floor 2: read + split + sha256 of every line (what the chain check must do at least).
        let t = Instant::now();
        let data = std::fs::read(&path).unwrap();
        let mut acc = 0u8;
        for l in data.split(|&b| b == b'\n') {
            acc ^= ContentHash::of(l).as_bytes()[0];
        }
        let floor_hash = t.elapsed();
        std::hint::black_box(acc);
        let mut best_read = Duration::MAX;
        let mut best_scan = Duration::MAX;
        let mut best_headers = Duration::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            let mut count = 0usize;
            let r = ws
                .ledger()
                .scan_headers(|_, _| {
                    count += 1;
                    Ok(())
                })
                .unwrap();
            best_headers = best_headers.min(t.elapsed());
            assert_eq!(count, n);
            assert!(r.corruption.is_none());
            let t = Instant::now();
            let read = ws.read_ledger().unwrap();
            best_read = best_read.min(t.elapsed());
            assert_eq!(read.records.len(), n);
            assert!(read.corruption.is_none());
            let t = Instant::now();
            let mut count = 0usize;
            ws.ledger()
                .scan(|_, _| {
                    count += 1;
                    Ok(())
                })
                .unwrap();
            best_scan = best_scan.min(t.elapsed());
            assert_eq!(count, n);
        }
        let rate = |d: Duration| n as f64 / d.as_secs_f64() / 1e6;
        rows.push((
            format!(
                "verify the chain of a {n}-record ledger ({} MB): every line's sha256, seq, prev",
                size / 1_000_000
            ),
            format!("{:.0} ms = {:.2} M records/s", best_headers.as_secs_f64() * 1e3, rate(best_headers)),
            format!(
                "read + split lines: {:.0} ms ({:.1} M/s); + sha256 per line, 1 thread: {:.0} ms ({:.2} M/s)",
                floor_split.as_secs_f64() * 1e3,
                rate(floor_split),
                floor_hash.as_secs_f64() * 1e3,
                rate(floor_hash)
            ),
            format!(
                "{:.2}× the 1-thread hash floor",
                best_headers.as_secs_f64() / floor_hash.as_secs_f64()
            ),
        ));
        rows.push((
            format!(
                "read + verify chain of a {n}-record ledger ({} MB), into records",
                size / 1_000_000
            ),
            format!(
                "{:.0} ms = {:.2} M records/s",
                best_read.as_secs_f64() * 1e3,
                rate(best_read)
            ),
            format!(
                "read + split lines: {:.0} ms ({:.1} M/s); + sha256 per line: {:.0} ms ({:.2} M/s)",
                floor_split.as_secs_f64() * 1e3,
                rate(floor_split),
                floor_hash.as_secs_f64() * 1e3,
                rate(floor_hash)
            ),
            format!(
                "{:.2}× the hash floor",
                best_read.as_secs_f64() / floor_hash.as_secs_f64()
            ),
        ));
        rows.push((
            "the same, streamed (scan, no Vec of records)".into(),
            format!(
                "{:.0} ms = {:.2} M records/s",
                best_scan.as_secs_f64() * 1e3,
                rate(best_scan)
            ),
            "(same floors)".into(),
            format!(
                "{:.2}× the hash floor",
                best_scan.as_secs_f64() / floor_hash.as_secs_f64()
            ),
        ));
    }
    if want("recover") {
        // `recover` over a 100,000-record ledger: 33,333 Edit calls (started
        // with a before hash, file_patch, succeeded) and one call cut short.
        let n_calls = if quick { 3_000 } else { 33_333 };
        let dir = scratch("recover");
        let (ws, _) = Workspace::init(&dir, Default::default()).unwrap();
        std::fs::write(dir.join("a.txt"), b"alpha\n").unwrap();
        let h = ContentHash::of(b"alpha\n");
        let mut batch = Vec::new();
        for i in 0..n_calls {
            let call = format!("toolu_01bench{i:010}");
            let path = ws
                .rel_path(format!("src/f{}.rs", i % 500).as_bytes(), None)
                .unwrap();
            let mut started = record(i);
            if let Body::ToolCall(c) = &mut started.body {
                c.call = call.clone();
                c.paths = vec![path.clone()];
                c.before = vec![ckpt::record::PathHash {
                    path: path.clone(),
                    hash: Some(h),
                    mode: Some("100644".into()),
                    expected: Some(h),
                    expected_absent: false,
                }];
            }
            let mut done = record(i);
            if let Body::ToolCall(c) = &mut done.body {
                c.call = call.clone();
                c.step = 2;
                c.status = CallStatus::Succeeded;
            }
            let patch = Draft::in_session(
                Some("bench-session-1".into()),
                Body::FilePatch(ckpt::record::FilePatch {
                    patch: format!("p_bench{i:010}"),
                    call,
                    path,
                    op: ckpt::record::PatchOp::Modify,
                    from_path: None,
                    before_hash: Some(h),
                    after_hash: Some(h),
                    before_mode: Some("100644".into()),
                    after_mode: Some("100644".into()),
                    before_perm: Some(0o644),
                    after_perm: Some(0o644),
                    binary: false,
                    patch_ref: None,
                    source: ckpt::record::PatchSource::EditTool,
                    candidates: vec![],
                    before_git: None,
                    after_git: None,
                }),
            );
            batch.extend([started, patch, done]);
            if batch.len() >= 3000 {
                ws.ledger().lock().unwrap().append(&batch).unwrap();
                batch.clear();
            }
        }
        let a = ws.rel_path(b"a.txt", None).unwrap();
        let mut cut = record(n_calls);
        if let Body::ToolCall(c) = &mut cut.body {
            c.paths = vec![a.clone()];
            c.before = vec![ckpt::record::PathHash {
                path: a,
                hash: Some(h),
                mode: Some("100644".into()),
                expected: Some(ContentHash::of(b"ALPHA\n")),
                expected_absent: false,
            }];
        }
        batch.push(cut);
        ws.ledger().lock().unwrap().append(&batch).unwrap();
        let records = n_calls * 3 + 1;
        let mut runs = Vec::new();
        let mut floor = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            let _ = ws.read_ledger().unwrap();
            floor.push(t.elapsed());
            let t = Instant::now();
            let r = ckpt::recover::recover(&ws).unwrap();
            runs.push(t.elapsed());
            assert!(r.total_calls >= n_calls);
        }
        let (r50, f50) = (pct(&mut runs, 0.5), pct(&mut floor, 0.5));
        rows.push((
            format!("recover on a {records}-record ledger (goal ≤ 1 s), median of 3"),
            format!(
                "{} = {:.2} M records/s",
                ms(r50),
                records as f64 / r50.as_secs_f64() / 1e6
            ),
            format!("typed read + chain check alone: {}", ms(f50)),
            format!("{:.2}×", r50.as_secs_f64() / f50.as_secs_f64()),
        ));
    }
    if want("blob") {
        // 3. Blob put throughput vs raw sha256 of the same bytes.
        let mb = if quick { 32 } else { 256 };
        let dir = scratch("blob");
        let (ws, _) = Workspace::init(&dir, Default::default()).unwrap();
        let big: Vec<u8> = (0..mb * 1024 * 1024)
            .map(|i: usize| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let src = dir.join("big.bin");
        std::fs::write(&src, &big).unwrap();
        drop(big);
        let t = Instant::now();
        let (h0, _) = ckpt::hash::hash_reader(File::open(&src).unwrap()).unwrap();
        let raw_hash = t.elapsed();
        let t = Instant::now();
        let (h1, _) = ws.blobs().put_file(&mut File::open(&src).unwrap()).unwrap();
        let put = t.elapsed();
        assert_eq!(h0, h1);
        let mbps = |d: Duration| mb as f64 / d.as_secs_f64();
        rows.push((
            format!("blob put of a {mb} MiB file (stream, sha256, fdatasync, publish)"),
            format!("{:.0} ms = {:.0} MiB/s", put.as_secs_f64() * 1e3, mbps(put)),
            format!(
                "sha256 of the same file: {:.0} ms = {:.0} MiB/s",
                raw_hash.as_secs_f64() * 1e3,
                mbps(raw_hash)
            ),
            format!("{:.2}×", put.as_secs_f64() / raw_hash.as_secs_f64()),
        ));
        let small = if quick { 500 } else { 5000 };
        let blobs: Vec<Vec<u8>> = (0..small)
            .map(|i| format!("{i:08} ").repeat(455).into_bytes())
            .collect();
        let t = Instant::now();
        for b in &blobs {
            std::hint::black_box(ContentHash::of(b));
        }
        let raw_small = t.elapsed();
        let t = Instant::now();
        for b in &blobs {
            ws.blobs().put_bytes(b).unwrap();
        }
        let put_small = t.elapsed();
        let t = Instant::now();
        for b in &blobs {
            ws.blobs().put_bytes(b).unwrap();
        }
        let put_dup = t.elapsed();
        let per = |d: Duration| d / small as u32;
        rows.push((
            format!("blob put, {small} × 4 KiB (new; each fdatasync'd + dir fsync)"),
            format!("{} each", ms(per(put_small))),
            format!("sha256 only: {} each", ms(per(raw_small))),
            format!("{:.0}×", put_small.as_secs_f64() / raw_small.as_secs_f64()),
        ));
        rows.push((
            format!("blob put, {small} × 4 KiB already stored (dedup)"),
            format!("{} each", ms(per(put_dup))),
            format!("sha256 only: {} each", ms(per(raw_small))),
            format!("{:.1}×", put_dup.as_secs_f64() / raw_small.as_secs_f64()),
        ));
    }
    let header = ["measurement", "ckpt", "floor, same run", "ratio"].map(String::from);
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(a, b, c, d)| vec![a, b, c, d])
        .collect();
    report::publish(
        "core",
        "cargo bench --bench core",
        &report::markdown(&header, &rows),
    );
    let _ =
        std::fs::remove_dir_all(Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-scratch"));
}
