//! Commands on long histories (issue 24): `status`, `log -n 20`, `rollback
//! --last 1`, `recover` and `verify` on ledgers of 10,000, 100,000 and
//! 1,000,000 records, each a whole process of the release binary; then
//! `gc --keep 10` once on a copy of each, and `status` after it.
//!
//! ```text
//! cargo bench --bench ledger                      # 10k, 100k, 1M records
//! CKPT_BENCH_QUICK=1 cargo bench --bench ledger   # 10k and 100k only
//! CKPT_BENCH_BIN=/path/to/other/ckpt cargo bench --bench ledger
//! CKPT_BENCH_BASELINE=/path/to/old/ckpt cargo bench --bench ledger
//! ```
//!
//! With `CKPT_BENCH_BASELINE`, `status` and `rollback --last 1` also run
//! with that binary in the same run (the code before the reduced view,
//! 9f15a09, for BENCHMARKS.md). `status` is also timed after one more turn
//! each time (a checkpoint and 10 Edit calls): the view then grows.
//!
//! A history is what weeks of agent sessions leave: turns of a checkpoint
//! and 10 Edit calls, each call three records (`started`, `file_patch`,
//! `succeeded`) over 500 files, with a real blob and patch artifact per
//! edit. It is recorded through the library without fsync (building the
//! input only; a history of 1M records takes a few minutes) and reused by
//! later runs (`target/bench-workspaces/ledger-N/`). Goals: each command
//! within 2× its 10k figure at 1M records, `status` ≤ 50 ms at 1M.

#[path = "common/hookrun.rs"]
mod hookrun;
#[path = "common/report.rs"]
mod report;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ckpt::{CallOptions, CallStatus, CheckpointOptions, OpenOptions, Workspace};

const FILES: usize = 500;
const CALLS_PER_TURN: usize = 10;

/// Records one turn's checkpoint costs, and each Edit call three.
fn records_of(calls: usize) -> usize {
    calls * 3 + calls / CALLS_PER_TURN
}

/// Builds (or reuses) a workspace whose ledger holds about `records`.
fn history(records: usize) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/bench-workspaces")
        .join(format!("ledger-{records}"));
    let done = root.join(".bench-complete");
    if done.exists() {
        return root;
    }
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let t = Instant::now();
    for i in 0..FILES {
        let dir = root.join(format!("src/m{}", i % 20));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}.rs")), body(i, 0)).unwrap();
    }
    let opts = OpenOptions {
        fsync: ckpt::durable::Fsync::Off,
        ..Default::default()
    };
    let (ws, _) = Workspace::init(&root, opts).unwrap();
    let mut calls = 0usize;
    let mut version = vec![0u64; FILES];
    while records_of(calls) < records {
        if calls.is_multiple_of(CALLS_PER_TURN) {
            ws.checkpoint(CheckpointOptions {
                label: Some(format!("turn {}", calls / CALLS_PER_TURN)),
                session: Some("bench".into()),
                ..Default::default()
            })
            .unwrap();
        }
        let i = (calls * 7919) % FILES;
        version[i] += 1;
        edit(&ws, i, &body(i, version[i]));
        calls += 1;
        if calls.is_multiple_of(20_000) {
            eprintln!(
                "ledger-{records}: {} records in {:?}",
                records_of(calls),
                t.elapsed()
            );
        }
    }
    drop(ws);
    std::fs::write(&done, b"").unwrap();
    eprintln!("ledger-{records}: built in {:?}", t.elapsed());
    root
}

/// A source file of ~40 lines; version `v` changes one line of it.
fn body(i: usize, v: u64) -> Vec<u8> {
    let mut s = String::new();
    for l in 0..40 {
        if l == (v as usize * 3) % 40 {
            s.push_str(&format!("    let x{l} = {v}; // edited\n"));
        } else {
            s.push_str(&format!("    let x{l} = {i} + {l};\n"));
        }
    }
    s.into_bytes()
}

/// One more turn of the history: a checkpoint and 10 Edit calls (the
/// files' versions continue from a count kept beside the history).
fn one_more_turn(ws: &Path, r: usize) {
    let opts = OpenOptions {
        fsync: ckpt::durable::Fsync::Off,
        ..Default::default()
    };
    let w = Workspace::open(ws, opts).unwrap();
    w.checkpoint(CheckpointOptions {
        label: Some(format!("extra turn {r}")),
        session: Some("bench".into()),
        ..Default::default()
    })
    .unwrap();
    for c in 0..CALLS_PER_TURN {
        let i = (r * CALLS_PER_TURN + c) * 13 % FILES;
        let mut next = std::fs::read(ws.join(format!("src/m{}/f{i}.rs", i % 20))).unwrap();
        next.extend_from_slice(format!("// extra {r}.{c}\n").as_bytes());
        edit(&w, i, &next);
    }
}

/// One Edit call writing `bytes` to file `i`.
fn edit(ws: &Workspace, i: usize, bytes: &[u8]) {
    let rel = ws
        .rel_path(format!("src/m{}/f{i}.rs", i % 20).as_bytes(), None)
        .unwrap();
    let mut call = ws
        .begin_call(CallOptions {
            tool: "Edit".into(),
            session: Some("bench".into()),
            paths: vec![rel.clone()],
            ..Default::default()
        })
        .unwrap();
    call.write_file(&rel, bytes).unwrap();
    call.finish(CallStatus::Succeeded, None).unwrap();
}

/// One whole `ckpt` process in `ws`; its wall time. Panics if it fails.
fn run(ws: &Path, args: &[&str]) -> Duration {
    run_with(Path::new(&hookrun::ckpt_bin()), ws, args)
}

/// [`run`] with the binary `bin`.
fn run_with(bin: &Path, ws: &Path, args: &[&str]) -> Duration {
    let t = Instant::now();
    let out = Command::new(bin)
        .args(args)
        .current_dir(ws)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let d = t.elapsed();
    assert!(
        out.status.success(),
        "ckpt {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn fmt(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1e3)
    } else {
        format!("{ms:.1} ms")
    }
}

fn main() {
    let quick = std::env::var("CKPT_BENCH_QUICK").is_ok();
    let sizes: &[usize] = if quick {
        &[10_000, 100_000]
    } else {
        &[10_000, 100_000, 1_000_000]
    };
    let commands: [(&str, &[&str]); 5] = [
        ("`status`", &["status"]),
        ("`log -n 20`", &["log", "-n", "20"]),
        ("`rollback --last 1`", &["rollback", "--last", "1"]),
        ("`recover`", &["recover"]),
        ("`verify`", &["verify"]),
    ];
    let runs = 5;
    // `CKPT_BENCH_BASELINE`: the binary of the code to compare with
    // (before the reduced view: 9f15a09), for the rows it changed.
    let baseline = std::env::var_os("CKPT_BENCH_BASELINE").map(PathBuf::from);
    let before: Vec<(&str, &[&str])> = match &baseline {
        Some(_) => vec![
            ("`status` on the baseline", &["status"]),
            (
                "`rollback --last 1` on the baseline",
                &["rollback", "--last", "1"],
            ),
        ],
        None => Vec::new(),
    };
    // The command rows, then gc's two: one `gc --keep 10` on a copy of
    // the history, and `status` on that copy afterwards; the baseline's
    // rows; `status` after one more turn.
    let mut cells: Vec<Vec<Duration>> = vec![Vec::new(); commands.len() + 2 + before.len() + 1];
    for &n in sizes {
        let ws = history(n);
        let size = std::fs::metadata(ws.join(".agent-runtime/ledger.jsonl"))
            .map(|m| m.len())
            .unwrap_or(0);
        eprintln!("ledger-{n}: {:.0} MB of ledger", size as f64 / 1e6);
        for (k, (name, args)) in commands.iter().enumerate() {
            // One warm-up (page cache), then `runs` timed.
            run(&ws, args);
            let times: Vec<Duration> = (0..runs).map(|_| run(&ws, args)).collect();
            let m = median(times);
            eprintln!("ledger-{n}: {name} {}", fmt(m));
            cells[k].push(m);
        }
        // The same on the code before the reduced view, one run apart.
        if let Some(base) = &baseline {
            for (k, (name, args)) in before.iter().enumerate() {
                run_with(base, &ws, args);
                let times: Vec<Duration> = (0..runs).map(|_| run_with(base, &ws, args)).collect();
                let m = median(times);
                eprintln!("ledger-{n}: {name} {}", fmt(m));
                cells[commands.len() + 2 + k].push(m);
            }
        }
        // `status` after one more turn each time: the view grows.
        let times: Vec<Duration> = (0..runs)
            .map(|r| {
                one_more_turn(&ws, r);
                run(&ws, &["status"])
            })
            .collect();
        let m = median(times);
        eprintln!("ledger-{n}: `status` after one more turn {}", fmt(m));
        cells[commands.len() + 2 + before.len()].push(m);
        let copy = ws.with_file_name(format!("ledger-{n}-gc"));
        let _ = std::fs::remove_dir_all(&copy);
        let st = Command::new("cp")
            .args(["-a", "--reflink=auto"])
            .arg(&ws)
            .arg(&copy)
            .status()
            .unwrap();
        assert!(st.success(), "cp -a {ws:?} {copy:?}");
        let g = run(&copy, &["gc", "--keep", "10"]);
        eprintln!("ledger-{n}: `gc --keep 10` {}", fmt(g));
        run(&copy, &["status"]);
        let after = median((0..runs).map(|_| run(&copy, &["status"])).collect());
        eprintln!("ledger-{n}: `status` after gc {}", fmt(after));
        cells[commands.len()].push(g);
        cells[commands.len() + 1].push(after);
        let _ = std::fs::remove_dir_all(&copy);
    }
    let mut header = vec!["command".to_string()];
    header.extend(sizes.iter().map(|n| format!("{} records", n)));
    header.push(format!("{} ÷ 10k", sizes.last().unwrap()));
    let names = commands
        .iter()
        .map(|(name, _)| *name)
        .chain([
            "`gc --keep 10` (one run, on a copy)",
            "`status` after that gc",
        ])
        .chain(before.iter().map(|(name, _)| *name))
        .chain(["`status` after one more turn (10 Edit calls)"]);
    let rows: Vec<Vec<String>> = names
        .zip(&cells)
        .map(|(name, c)| {
            let mut row = vec![name.to_string()];
            row.extend(c.iter().map(|d| fmt(*d)));
            row.push(format!(
                "{:.1}×",
                c.last().unwrap().as_secs_f64() / c[0].as_secs_f64()
            ));
            row
        })
        .collect();
    let body = format!(
        "{}\nMedians of {runs} whole processes after one warm-up; `rollback --last 1` undoes one more call each run. gc runs once on a copy of the history (`cp -a`), keeping the 10 newest checkpoints: it removes the older contents, diffs and checkpoint files and cuts the ledger; `status` is then timed on the copy.",
        report::markdown(&header, &rows)
    );
    report::publish("ledger", "cargo bench --bench ledger", &body);
}
