//! Rollback benchmarks (issue: `ckpt rollback`), side by side with shadow-git
//! restores on the same generated workspaces (PERFORMANCE.md W1/W2, W3 with
//! `CKPT_BENCH_W3=1`).
//!
//! ```text
//! cargo bench --bench rollback               # W1 and W2
//! CKPT_BENCH_W3=1 cargo bench --bench rollback
//! CKPT_BENCH_QUICK=1 cargo bench --bench rollback
//! CKPT_BENCH_DIR=/elsewhere cargo bench --bench rollback   # workspaces kept there
//! CKPT_BENCH_BIN=/path/to/other/ckpt cargo bench --bench rollback  # compare builds
//! ```
//!
//! Every ckpt figure is one whole process of the release binary
//! (`ckpt rollback --call C` or `--to CKPT`), durable (fsync on, no
//! `CKPT_TEST_FSYNC`), as a user runs it. Untimed setup before each timed
//! run: a fresh `.agent-runtime/` (`ckpt init`), the agent's change recorded
//! (through the real hooks with Claude Code payloads, or through the library
//! for the 1,000-patch case), then `sync`, so that no setup write is still
//! being flushed when the timer starts. Each iteration does the same work on
//! a ledger that holds just that change. Shadow git (what Cline, Roo Code and
//! Gemini CLI run) restores the same change on the same tree, after the
//! checkpoint those tools take after every tool call.
//!
//! The 1-file rollback runs on every tree first, before any case that frees
//! files (see `main`).

#[path = "common/hookrun.rs"]
mod hookrun;
#[path = "common/report.rs"]
mod report;
#[path = "common/workload.rs"]
mod workload;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ckpt::{CallOptions, CallStatus, CheckpointOptions, OpenOptions, Workspace};
use workload::{Generated, Stats};

fn hook(ws: &Path, phase: &str, payload: &str) {
    hookrun::hook(ckpt(), ws, phase, payload);
}

fn bash(ws: &Path, event: &str, id: &str) -> String {
    hookrun::bash(ws, event, id, "./refactor.sh")
}

fn edit(ws: &Path, event: &str, id: &str, file: &Path) -> String {
    hookrun::edit(ws, event, id, file)
}

fn ckpt() -> &'static str {
    hookrun::ckpt_bin()
}

fn ckpt_cmd(ws: &Path) -> Command {
    let mut c = Command::new(ckpt());
    c.env("CKPT_WORKSPACE", ws)
        .env_remove("CKPT_TEST_FSYNC")
        .env_remove("CKPT_FAILPOINTS")
        .env_remove("CKPT_TIMESTAMP");
    c
}

/// Runs `ckpt ARGS` (output discarded, as on a terminal nobody reads) and
/// returns its wall time from spawn to exit; panics unless it exits 0.
fn run_ckpt(ws: &Path, args: &[&str]) -> Duration {
    let mut cmd = ckpt_cmd(ws);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let out = cmd.output().expect("spawn ckpt");
    let d = t.elapsed();
    assert!(
        out.status.success(),
        "ckpt {} failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

/// A fresh `.agent-runtime/` (`ckpt init`), untimed. The old one is moved
/// aside, not deleted (see `workload::bury`): the benchmark's own cleanup
/// must not slow the file creations of the rollback it times.
fn fresh_runtime(ws: &Path) {
    let base = ws.parent().expect("a workspace has a parent");
    workload::bury(base, &ws.join(".agent-runtime")).unwrap();
    run_ckpt(ws, &["init"]);
}

/// Flushes every dirty page (untimed), so the timed process does not pay for
/// the setup's writes in its own `fsync`/`syncfs`.
fn sync() {
    let _ = Command::new("sync").status();
}

fn read_all(ws: &Path, files: &[PathBuf]) -> Vec<Vec<u8>> {
    files
        .iter()
        .map(|f| fs::read(ws.join(f)).unwrap())
        .collect()
}

/// Panics unless every file holds its original bytes and every `gone` path is absent.
fn check_restored(ws: &Path, files: &[PathBuf], orig: &[Vec<u8>], gone: &[PathBuf], what: &str) {
    for (f, o) in files.iter().zip(orig) {
        assert!(
            fs::read(ws.join(f)).unwrap() == *o,
            "{what}: {} was not restored",
            f.display()
        );
    }
    for f in gone {
        assert!(
            !ws.join(f).exists(),
            "{what}: new file {} is still there",
            f.display()
        );
    }
}

/// `runs` timed iterations after `warmup` untimed ones; `one(i)` does the
/// (untimed) setup and returns the timed part.
fn iterate(warmup: usize, runs: usize, mut one: impl FnMut(usize) -> Duration) -> Stats {
    let mut v = Vec::with_capacity(runs);
    for i in 0..warmup + runs {
        let d = one(i);
        if i >= warmup {
            v.push(d);
        }
    }
    Stats::from_samples(&mut v)
}

fn ratio(a: &Stats, b: &Stats) -> String {
    format!("{:.1}×", a.median.as_secs_f64() / b.median.as_secs_f64())
}

fn goal(s: &Stats, limit: Duration) -> String {
    if s.median <= limit { "met" } else { "not met" }.to_string()
}

struct Counts {
    one: usize,
    many: usize,
    thousand: usize,
}

/// Records `rounds` × one library `Edit` call per file (each call one
/// `write_file`), after a checkpoint; returns the checkpoint id. Untimed.
fn record_library_edits(ws_root: &Path, files: &[PathBuf], rounds: usize, seed: u64) -> String {
    // Untimed setup through the library: no fsync (every timed `ckpt`
    // process is durable).
    let opts = OpenOptions {
        fsync: ckpt::durable::Fsync::Off,
        ..Default::default()
    };
    let ws = Workspace::open(ws_root, opts).expect("open workspace");
    let cp = ws
        .checkpoint(CheckpointOptions {
            label: Some("bench: before 1,000 edits".into()),
            ..Default::default()
        })
        .expect("checkpoint");
    for round in 0..rounds {
        for (k, f) in files.iter().enumerate() {
            let rel = ws
                .rel_path(f.as_os_str().as_encoded_bytes(), None)
                .expect("rel path");
            let data = fs::read(ws_root.join(f)).unwrap();
            let new = workload::edit_bytes(
                &data,
                workload::sub_seed(seed, (round * files.len() + k) as u64),
            );
            let mut call = ws
                .begin_call(CallOptions {
                    tool: "Edit".into(),
                    session: Some("bench".into()),
                    paths: vec![rel.clone()],
                    ..Default::default()
                })
                .expect("begin call");
            call.write_file(&rel, &new).expect("write file");
            call.finish(CallStatus::Succeeded, None).expect("finish");
        }
    }
    cp.checkpoint
}

/// The files the 1-file cases edit, one per iteration (warm-up first).
fn one_file_picks(g: &Generated, n: &Counts) -> Vec<PathBuf> {
    g.pick_files(1 + n.one, 21)
}

/// One file: an Edit call through the hooks, undone with `--call`. Run on
/// every tree before anything else (see `main`).
fn bench_one_file(g: &Generated, n: &Counts) -> Stats {
    let ws = g.root.clone();
    let name = g.spec.name;
    let ones = one_file_picks(g, n);
    let orig_ones = read_all(&ws, &ones);
    let one = iterate(1, n.one, |i| {
        fresh_runtime(&ws);
        let id = format!("edit{i}");
        hook(&ws, "pre", &edit(&ws, "PreToolUse", &id, &ones[i]));
        workload::edit_file(&ws.join(&ones[i]), 300 + i as u64).unwrap();
        hook(&ws, "post", &edit(&ws, "PostToolUse", &id, &ones[i]));
        sync();
        let d = run_ckpt(&ws, &["rollback", "--call", &id]);
        check_restored(
            &ws,
            &ones[i..=i],
            &orig_ones[i..=i],
            &[],
            "ckpt 1-file rollback",
        );
        d
    });
    eprintln!("{name}: 1-file rollback {one}");
    one
}

/// Everything else on one tree: the 110-file and 1,000-patch rollbacks, then
/// shadow git's restores of the same changes (`one` is the 1-file figure).
fn bench_workspace(
    g: &Generated,
    base: &Path,
    n: &Counts,
    one: &Stats,
    push: &mut dyn FnMut(&str, String),
) {
    let ws = g.root.clone();
    let name = g.spec.name;
    let warm = 1;
    let ones = one_file_picks(g, n);
    let orig_ones = read_all(&ws, &ones);

    // ---- 100 edited + 10 new files: one Bash call (scan hooks), undone with `--call`.
    let hundred = g.pick_files(100, 31);
    let orig_hundred = read_all(&ws, &hundred);
    let mut new_files = Vec::new();
    let many = iterate(warm, n.many, |i| {
        fresh_runtime(&ws);
        let id = format!("bash{i}");
        hook(&ws, "pre", &bash(&ws, "PreToolUse", &id));
        workload::edit_many(&ws, &hundred, 4000 + i as u64).unwrap();
        new_files = g.create_new(10, 77).unwrap();
        hook(&ws, "post", &bash(&ws, "PostToolUse", &id));
        sync();
        let d = run_ckpt(&ws, &["rollback", "--call", &id]);
        check_restored(
            &ws,
            &hundred,
            &orig_hundred,
            &new_files,
            "ckpt 110-file rollback",
        );
        d
    });
    eprintln!("{name}: 110-file rollback {many}");
    if std::env::var("CKPT_BENCH_ONLY").is_ok_and(|v| v == "small") {
        // The two small cases alone, for quick comparisons (no shadow git).
        push(
            "ckpt: roll back one Edit call, 1 file (goal ≤ 5 ms)",
            one.to_string(),
        );
        push(
            "ckpt: roll back 100 edited + 10 new files (goal ≤ 60 ms)",
            many.to_string(),
        );
        return;
    }

    // ---- 1,000 patches over 500 files (each edited twice), undone with `--to`.
    let five = g.pick_files(500, 41);
    let orig_five = read_all(&ws, &five);
    let thousand = iterate(warm, n.thousand, |i| {
        fresh_runtime(&ws);
        let cp = record_library_edits(&ws, &five, 2, 9000 + i as u64);
        sync();
        let d = run_ckpt(&ws, &["rollback", "--to", &cp]);
        check_restored(&ws, &five, &orig_five, &[], "ckpt 1,000-patch rollback");
        d
    });
    eprintln!("{name}: 1,000-patch rollback {thousand}");
    workload::bury(base, &ws.join(".agent-runtime")).unwrap();

    // ---- shadow git on the same tree, after the same changes.
    let shadow = base.join(format!("{name}-rollback-shadow"));
    workload::bury(base, &shadow).unwrap();
    let t = Instant::now();
    workload::shadow_git_init(&ws, &shadow).unwrap();
    eprintln!("{name}: shadow first checkpoint {:?}", t.elapsed());
    let cp = workload::shadow_head(&ws, &shadow).unwrap();
    let sh_file = iterate(warm, n.one, |i| {
        workload::edit_file(&ws.join(&ones[i]), 600 + i as u64).unwrap();
        workload::shadow_git_checkpoint(&ws, &shadow).unwrap();
        sync();
        let d = workload::shadow_restore_file(&ws, &shadow, &cp, &ones[i]).unwrap();
        check_restored(&ws, &ones[i..=i], &orig_ones[i..=i], &[], "shadow checkout");
        d
    });
    let sh_cline1 = iterate(warm, n.one, |i| {
        workload::edit_file(&ws.join(&ones[i]), 700 + i as u64).unwrap();
        workload::shadow_git_checkpoint(&ws, &shadow).unwrap();
        sync();
        let d = workload::shadow_restore_all_cline(&ws, &shadow, &cp).unwrap();
        check_restored(&ws, &ones[i..=i], &orig_ones[i..=i], &[], "shadow reset");
        d
    });
    type Restore = fn(&Path, &Path, &str) -> std::io::Result<Duration>;
    let many_style = |seed: u64, restore: Restore, what: &str| {
        iterate(warm, n.many, |i| {
            workload::edit_many(&ws, &hundred, seed + i as u64).unwrap();
            let new = g.create_new(10, 77).unwrap();
            workload::shadow_git_checkpoint(&ws, &shadow).unwrap();
            sync();
            let d = restore(&ws, &shadow, &cp).unwrap();
            check_restored(&ws, &hundred, &orig_hundred, &new, what);
            d
        })
    };
    let sh_cline = many_style(5000, workload::shadow_restore_all_cline, "cline");
    let sh_roo = many_style(6000, workload::shadow_restore_all_roo, "roo");
    let sh_gemini = many_style(7000, workload::shadow_restore_all_gemini, "gemini");
    let sh_thousand = iterate(warm, n.thousand, |i| {
        for round in 0..2u64 {
            workload::edit_many(&ws, &five, 8000 + 10 * i as u64 + round).unwrap();
        }
        workload::shadow_git_checkpoint(&ws, &shadow).unwrap();
        sync();
        let d = workload::shadow_restore_all_roo(&ws, &shadow, &cp).unwrap();
        check_restored(&ws, &five, &orig_five, &[], "shadow 500");
        d
    });
    // The shadow repository is removed by `main` after every workspace is
    // measured: deleting it keeps the disk busy discarding for a while.
    eprintln!(
        "{name}: shadow checkout {sh_file}; reset 1 {sh_cline1}; cline {sh_cline}; roo {sh_roo}; gemini {sh_gemini}; roo 500 {sh_thousand}"
    );

    push(
        "ckpt: roll back one Edit call, 1 file (`--call C`; goal ≤ 5 ms)",
        one.to_string(),
    );
    push("  goal ≤ 5 ms", goal(one, Duration::from_millis(5)));
    push(
        "shadow git: `checkout <cp> -- path` (1 file)",
        sh_file.to_string(),
    );
    push("  ÷ ckpt", ratio(&sh_file, one));
    push(
        "shadow git: `reset --hard <cp>`, 1 file differs (Cline)",
        sh_cline1.to_string(),
    );
    push("  ÷ ckpt", ratio(&sh_cline1, one));
    push(
        "ckpt: roll back one Bash call, 100 edited + 10 new files (`--call C`; goal ≤ 60 ms)",
        many.to_string(),
    );
    push("  goal ≤ 60 ms", goal(&many, Duration::from_millis(60)));
    push(
        "shadow git: `reset --hard <cp>`, 100 edited + 10 new (Cline)",
        sh_cline.to_string(),
    );
    push("  ÷ ckpt", ratio(&sh_cline, &many));
    push(
        "shadow git: `clean -fd` + `reset --hard <cp>`, 100 edited + 10 new (Roo)",
        sh_roo.to_string(),
    );
    push("  ÷ ckpt", ratio(&sh_roo, &many));
    push(
        "shadow git: `restore --source <cp> .` + `clean -fd`, 100 edited + 10 new (Gemini)",
        sh_gemini.to_string(),
    );
    push("  ÷ ckpt", ratio(&sh_gemini, &many));
    push(
        "ckpt: roll back 1,000 patches over 500 files (`--to CKPT`; goal ≤ 0.5 s)",
        thousand.to_string(),
    );
    push(
        "  goal ≤ 0.5 s",
        goal(&thousand, Duration::from_millis(500)),
    );
    push(
        "shadow git: `clean -fd` + `reset --hard <cp>`, the same 500 files (Roo)",
        sh_thousand.to_string(),
    );
    push("  ÷ ckpt", ratio(&sh_thousand, &thousand));
    push(
        "iterations (1 file / 110 files / 1,000 patches), after 1 warm-up each",
        format!("{} / {} / {}", n.one, n.many, n.thousand),
    );
}

fn main() {
    if workload::git_version().is_err() {
        println!("SKIPPED: git is not installed; the workloads need it");
        return;
    }
    // Only this process's library writes (untimed setup of the 1,000-patch
    // case) skip fsync (`open_ws`); every timed `ckpt` process is durable,
    // and `sync` runs before each timed run.
    let quick = std::env::var("CKPT_BENCH_QUICK").is_ok();
    let mut specs = vec![workload::W1, workload::W2];
    if std::env::var("CKPT_BENCH_W3").is_ok() {
        specs.push(workload::W3);
    }
    let base = workload::bench_dir(env!("CARGO_MANIFEST_DIR"));
    fs::create_dir_all(&base).unwrap();
    // See `workload::bury`: freed inodes slow creation for about a minute.
    workload::wait_after_grave(&base);
    let n = if quick {
        Counts {
            one: 3,
            many: 2,
            thousand: 2,
        }
    } else {
        Counts {
            one: 15,
            many: 10,
            thousand: 10,
        }
    };
    let gens: Vec<Generated> = specs
        .iter()
        .map(|spec| {
            let t = Instant::now();
            let g = workload::generate(spec, &base.join(spec.name)).expect("generate workload");
            eprintln!("{}: ready in {:?}", spec.name, t.elapsed());
            g
        })
        .collect();
    // Pass 1: the 1-file rollback on every tree, before anything frees
    // files. The later cases free hundreds of files per iteration (the
    // reaper after a 110-file rollback, shadow git's `clean` and `reset`),
    // and a file created in the next minute near freed inodes costs up to
    // ~1 ms here (see `workload::bury`): session 7's first run measured W3's
    // 1-file rollback at 7.1 ms right after W2's shadow restores, and 3.7–4.1
    // ms on the same tree with nothing freed before. A 1-file rollback frees
    // nothing itself (its trash stays small).
    sync();
    std::thread::sleep(Duration::from_secs(1));
    let one_file: Vec<Stats> = gens.iter().map(|g| bench_one_file(g, &n)).collect();
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    for (col, g) in gens.iter().enumerate() {
        let spec = g.spec;
        let t = Instant::now();
        // Whatever ran before (another workspace's shadow repository, another
        // bench) must not be charged to this one: flush, then wait a second.
        sync();
        std::thread::sleep(Duration::from_secs(1));
        let mut push = |name: &str, v: String| {
            // Rows are matched by position within a column's sequence, so that
            // the repeated "  ÷ ckpt" rows stay apart.
            let idx = rows
                .iter()
                .position(|r| r.0 == name && r.1.len() <= col)
                .unwrap_or_else(|| {
                    rows.push((name.to_string(), Vec::new()));
                    rows.len() - 1
                });
            let r = &mut rows[idx];
            r.1.resize(col, String::new());
            r.1.push(v);
        };
        bench_workspace(g, &base, &n, &one_file[col], &mut push);
        // Leave the workspace as generated for the next run.
        workload::bury(&base, &g.root.join(".agent-runtime")).unwrap();
        workload::restore(&g.root).unwrap();
        eprintln!("{}: done in {:?}", spec.name, t.elapsed());
    }
    for spec in &specs {
        workload::bury(&base, &base.join(format!("{}-rollback-shadow", spec.name))).unwrap();
    }
    let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
    report::publish_by_workspace("rollback", &names, rows);
    // Measurements done: now the deletions may cost what they cost.
    let _ = workload::empty_grave(&base);
}
