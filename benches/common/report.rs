//! A bench's result table: printed, and written into BENCHMARKS.md between
//! the bench's markers, so that the file always shows the last full run.
//!
//! ```text
//! <!-- cargo bench --bench NAME: begin -->
//! ... replaced by each full run ...
//! <!-- cargo bench --bench NAME: end -->
//! ```
//!
//! A partial run (`CKPT_BENCH_QUICK`, `CKPT_BENCH_ONLY`) or one that times
//! another binary (`CKPT_BENCH_BIN`) only prints: it is not this build's
//! current figure. `CKPT_BENCH_NO_WRITE=1` prints only, too.

use std::path::Path;

/// A Markdown table: a header row, then one row per measurement.
pub fn markdown(header: &[String], rows: &[Vec<String>]) -> String {
    let mut s = format!(
        "| {} |\n|{}\n",
        header.join(" | "),
        "---|".repeat(header.len())
    );
    for r in rows {
        s.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    s
}

/// Publishes a table with one column per workspace (`names`: w1, w2 and,
/// when it ran, w3), rows of `(measurement, cells)`; missing cells are
/// left empty.
#[allow(dead_code)]
pub fn publish_by_workspace(bench: &str, names: &[&str], rows: Vec<(String, Vec<String>)>) {
    let mut header = vec!["measurement".to_string()];
    header.extend(names.iter().map(|n| n.to_string()));
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(name, mut cells)| {
            cells.resize(names.len(), String::new());
            std::iter::once(name).chain(cells).collect()
        })
        .collect();
    let w3 = if names.len() > 2 {
        "CKPT_BENCH_W3=1 "
    } else {
        ""
    };
    let command = format!("{w3}cargo bench --bench {bench}");
    publish(bench, &command, &markdown(&header, &rows));
}

/// Whether this run's table replaces the one in BENCHMARKS.md.
pub fn is_full_run() -> bool {
    [
        "CKPT_BENCH_QUICK",
        "CKPT_BENCH_ONLY",
        "CKPT_BENCH_BIN",
        "CKPT_BENCH_NO_WRITE",
    ]
    .iter()
    .all(|v| std::env::var_os(v).is_none())
}

/// Prints `body` (the table and any lines under it) and, on a full run,
/// writes it into BENCHMARKS.md between `bench`'s markers with a line
/// saying when, on what, and by which command it was measured.
pub fn publish(bench: &str, command: &str, body: &str) {
    println!("{body}");
    if !is_full_run() {
        eprintln!("{bench}: a partial run: BENCHMARKS.md left as it is");
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("BENCHMARKS.md");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{bench}: cannot read {}: {e}", path.display());
            return;
        }
    };
    let begin = format!("<!-- cargo bench --bench {bench}: begin -->\n");
    let end = format!("<!-- cargo bench --bench {bench}: end -->");
    let (Some(a), Some(b)) = (text.find(&begin), text.find(&end)) else {
        eprintln!(
            "{bench}: BENCHMARKS.md has no `{}` … `{end}` markers: not written",
            begin.trim_end()
        );
        return;
    };
    if b < a {
        eprintln!("{bench}: BENCHMARKS.md's markers are out of order: not written");
        return;
    }
    let stamp = format!(
        "_Measured {} at {} by `{command}`: {}._\n\n",
        today(),
        commit(),
        machine()
    );
    let new = format!(
        "{}{begin}{stamp}{}\n{}",
        &text[..a],
        body.trim_end(),
        &text[b..]
    );
    match std::fs::write(&path, new) {
        Ok(()) => eprintln!("{bench}: BENCHMARKS.md updated"),
        Err(e) => eprintln!("{bench}: cannot write {}: {e}", path.display()),
    }
}

/// Today's date (UTC), as `date` prints it.
fn today() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "(date unknown)".into(), |s| s.trim().to_string())
}

/// The commit measured (`+changes` when the tree differs from it).
fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "(commit unknown)".into();
    };
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    format!("commit {head}{}", if dirty { "+changes" } else { "" })
}

/// The CPU, its count and the kernel, as far as this system tells.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| format!(", Linux {}", k.trim()))
        .unwrap_or_default();
    format!("{cores} × {cpu}{kernel}")
}
