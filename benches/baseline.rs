//! Baseline benchmark: what agent tools do today (shadow git) and what the workspace's own git
//! and a plain stat walk cost, on the generated workspaces W1 and W2 of `shared/PERFORMANCE.md`
//! (W3 too with `CKPT_BENCH_W3=1`). ckpt's own benches print their figures beside these.
//!
//! ```text
//! cargo bench --bench baseline                      # W1, W2
//! CKPT_BENCH_W3=1 cargo bench --bench baseline      # W1, W2, W3 (W3 generation: ~100 s, once)
//! CKPT_BENCH_QUICK=1 cargo bench --bench baseline   # fewer repetitions, for a smoke run
//! ```
//!
//! Workspaces are generated once under `target/bench-workspaces/` (or `$CKPT_BENCH_DIR`) and
//! reused by later runs. Prints a Markdown table on stdout and progress on stderr. Without a
//! usable `git` it prints why and exits successfully.

#[path = "common/report.rs"]
mod report;
#[path = "common/workload.rs"]
mod workload;

use std::cell::RefCell;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use workload::{Generated, Spec, Stats};

/// Repetitions of each measurement.
#[derive(Clone, Copy, Debug)]
struct Reps {
    /// First checkpoints (each one a fresh shadow repo).
    first: usize,
    /// Cheap steady-state rows.
    steady: usize,
    /// Rows that edit 100 files per run.
    heavy: usize,
    /// Untimed warm-up runs before the steady and heavy rows.
    warmup: usize,
}

fn reps(spec: &Spec, quick: bool) -> Reps {
    if quick {
        return Reps {
            first: 1,
            steady: 5,
            heavy: 3,
            warmup: 1,
        };
    }
    match spec.tracked_files {
        0..=5_000 => Reps {
            first: 5,
            steady: 20,
            heavy: 10,
            warmup: 2,
        },
        5_001..=50_000 => Reps {
            first: 3,
            steady: 20,
            heavy: 10,
            warmup: 2,
        },
        _ => Reps {
            first: 2,
            steady: 10,
            heavy: 5,
            warmup: 1,
        },
    }
}

/// The rows of the table, in order.
const ROWS: &[&str] = &[
    "tracked files / MB / dirs; files incl. ignored",
    "workspace generation",
    "**(a) shadow git**",
    "first checkpoint (init + config + `add .` + `commit`)",
    "shadow repo size after first checkpoint (du; apparent)",
    "checkpoint, nothing changed",
    "checkpoint after 1-file edit",
    "checkpoint after 100-file edit",
    "restore 1 file (`checkout <cp> -- path`)",
    "restore all, 100 edited + 10 new (`clean -f -d -f` + `reset --hard <cp>`; Roo)",
    "**(b) workspace's own git**",
    "`git --no-optional-locks status --porcelain`, clean, warm index",
    "**(c) floor**",
    "stat walk, root `.gitignore` honoured (in-process, 1 thread, no process start)",
];

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn progress(spec: &Spec, what: &str, stats: &Stats) {
    eprintln!("  {}: {what}: {stats} (n={})", spec.name, stats.n);
}

/// Runs every measurement on one workspace and returns the column of cells (one per row).
fn run_spec(spec: &Spec, base: &Path, quick: bool) -> io::Result<Vec<String>> {
    let r = reps(spec, quick);
    let ws = base.join(format!("{}-seed{}", spec.name, spec.seed));
    let shadow = base.join(format!("{}-seed{}-shadow", spec.name, spec.seed));
    eprintln!("{}: generating or reusing {} ...", spec.name, ws.display());
    let g: Generated = workload::generate(spec, &ws)?;
    let generation = match g.generation_time {
        Some(d) => {
            let phases: Vec<String> = g
                .phases
                .iter()
                .map(|(p, t)| format!("{p} {}", workload::fmt_ms(*t)))
                .collect();
            format!(
                "{} ({}; HEAD `{}`)",
                workload::fmt_ms(d),
                phases.join(", "),
                &g.head[..7]
            )
        }
        None => format!("reused (HEAD `{}`)", &g.head[..7]),
    };
    eprintln!("  {}: {generation}", spec.name);
    let shape = format!(
        "{} / {:.0} / {}; {}",
        spec.tracked_files,
        g.tracked_bytes as f64 / 1e6,
        g.dirs.len() + 1,
        g.total_files()
    );

    // (a) shadow git
    let first = workload::measure(
        0,
        r.first,
        |_| remove_if_exists(&shadow),
        |_| workload::shadow_git_init(&ws, &shadow),
    )?;
    progress(spec, "first checkpoint", &first);
    let size = workload::dir_size(&shadow)?;
    let size = format!(
        "{}; {}",
        workload::fmt_bytes(size.allocated),
        workload::fmt_bytes(size.apparent)
    );
    let cp = workload::shadow_head(&ws, &shadow)?;

    let checkpoint = |_: usize| workload::shadow_git_checkpoint(&ws, &shadow);
    let nothing = workload::measure(r.warmup, r.steady, |_| Ok(()), checkpoint)?;
    progress(spec, "checkpoint, nothing changed", &nothing);
    let one = workload::measure(
        r.warmup,
        r.steady,
        |i| workload::edit_many(&ws, &g.pick_files(1, 1_000 + i as u64), i as u64),
        checkpoint,
    )?;
    progress(spec, "checkpoint after 1-file edit", &one);
    let hundred = workload::measure(
        r.warmup,
        r.heavy,
        |i| workload::edit_many(&ws, &g.pick_files(100, 2_000 + i as u64), i as u64),
        checkpoint,
    )?;
    progress(spec, "checkpoint after 100-file edit", &hundred);
    workload::restore(&ws)?;

    let picked = RefCell::new(Vec::new());
    let restore_one = workload::measure(
        r.warmup,
        r.steady,
        |i| {
            *picked.borrow_mut() = g.pick_files(1, 3_000 + i as u64);
            workload::edit_many(&ws, &picked.borrow(), i as u64)
        },
        |_| workload::shadow_restore_file(&ws, &shadow, &cp, &picked.borrow()[0]),
    )?;
    progress(spec, "restore 1 file", &restore_one);
    let roo = workload::measure(
        r.warmup,
        r.heavy,
        |i| {
            workload::edit_many(&ws, &g.pick_files(100, 4_000 + i as u64), i as u64)?;
            g.create_new(10, 4_000 + i as u64).map(drop)
        },
        |_| workload::shadow_restore_all_roo(&ws, &shadow, &cp),
    )?;
    progress(spec, "restore all (Roo)", &roo);
    workload::restore(&ws)?;
    remove_if_exists(&shadow)?;

    // (b) the workspace's own git
    let status = workload::measure(
        r.warmup,
        r.steady,
        |_| Ok(()),
        |_| workload::git_status(&ws),
    )?;
    progress(spec, "git status", &status);

    // (c) floor
    let count = workload::stat_walk(&ws)?;
    let walk = workload::measure(
        r.warmup,
        r.steady,
        |_| Ok(()),
        |_| workload::stat_walk_floor(&ws),
    )?;
    progress(spec, "stat walk", &walk);
    let walk_cell = format!("{walk} ({} entries)", count.files + count.dirs);

    Ok(vec![
        shape,
        generation,
        String::new(),
        first.to_string(),
        size,
        nothing.to_string(),
        one.to_string(),
        hundred.to_string(),
        restore_one.to_string(),
        roo.to_string(),
        String::new(),
        status.to_string(),
        String::new(),
        walk_cell,
    ])
}

fn remove_if_exists(path: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn main() {
    let git = match workload::git_version() {
        Ok(v) => v,
        Err(why) => {
            println!(
                "baseline bench skipped: `git` is needed to build workspaces and baselines: {why}"
            );
            return;
        }
    };
    let quick = env_flag("CKPT_BENCH_QUICK");
    let mut specs = vec![workload::W1, workload::W2];
    if env_flag("CKPT_BENCH_W3") {
        specs.push(workload::W3);
    }
    let base = std::env::var_os("CKPT_BENCH_DIR").map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("target")
                .join("bench-workspaces")
        },
        PathBuf::from,
    );
    if let Err(e) = std::fs::create_dir_all(&base) {
        eprintln!("baseline bench: cannot create {}: {e}", base.display());
        std::process::exit(1);
    }

    let start = Instant::now();
    let mut columns = Vec::new();
    for spec in &specs {
        match run_spec(spec, &base, quick) {
            Ok(column) => columns.push(column),
            Err(e) => {
                eprintln!("baseline bench: {}: {e}", spec.name);
                std::process::exit(1);
            }
        }
    }

    let mut header = vec!["measurement".to_string()];
    header.extend(specs.iter().map(|s| s.name.to_uppercase()));
    let table: Vec<Vec<String>> = ROWS
        .iter()
        .enumerate()
        .map(|(i, row)| {
            std::iter::once(row.to_string())
                .chain(columns.iter().map(|c| c[i].clone()))
                .collect()
        })
        .collect();
    let runs: Vec<String> = specs
        .iter()
        .map(|s| {
            let r = reps(s, quick);
            format!(
                "{}: first {} runs, others {} (100-file rows {}) after {} warm-up",
                s.name.to_uppercase(),
                r.first,
                r.steady,
                r.heavy,
                r.warmup
            )
        })
        .collect();
    let body = format!(
        "Whole processes except the floor, median (min–max); {git}.\n\n{}\nRuns per cell: {}. Total bench time {}.",
        report::markdown(&header, &table),
        runs.join("; "),
        workload::fmt_ms(start.elapsed())
    );
    let command = if specs.len() > 2 {
        "CKPT_BENCH_W3=1 cargo bench --bench baseline"
    } else {
        "cargo bench --bench baseline"
    };
    report::publish("baseline", command, &body);
}
