//! `ckpt scenario run PATH… [--junit FILE] [--keep] [-j N] [--crash-each-write]`:
//! recovery scenarios for CI (DESIGN.md §8).

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use ckpt::scenario::{self, Scenario, junit, run};
use serde_json::json;

use super::error::{CommandError, ERROR, OK, VERIFY_FAILED};
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Play scenario files (or directories of *.toml files), each in a scratch workspace
    Run(RunArgs),
    /// Write this workspace's recorded story as a scenario that replays it
    Record(RecordArgs),
    /// The agent stand-in a scenario's hooks run under (started by `scenario run`)
    #[command(hide = true)]
    Agent,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Scenario files, or directories searched for *.toml
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Write a JUnit XML report here
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Keep the scratch workspace of each failing scenario and print its path
    #[arg(long)]
    keep: bool,
    /// Run N scenarios at once
    #[arg(short = 'j', long = "jobs", value_name = "N", default_value_t = 1)]
    jobs: usize,
    /// Also replay each scenario with ckpt killed at each write point it passes, checking recovery after each
    #[arg(long)]
    crash_each_write: bool,
    /// Make scratch workspaces under DIR (default: the system's temp directory)
    #[arg(long, value_name = "DIR")]
    scratch: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct RecordArgs {
    /// Only the story after this checkpoint (default: the whole ledger)
    #[arg(long, value_name = "CKPT")]
    since: Option<String>,
    /// Write the scenario here (default: stdout)
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// The scenario's name (default: the output file's stem, else "recorded")
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    match &args.command {
        Sub::Agent => {
            let stdin = std::io::stdin();
            scenario::run::serve_agent(stdin.lock(), std::io::stdout())
                .map_err(|e| CommandError::new(ERROR, format!("scenario agent: {e}")))?;
            Ok(OK)
        }
        Sub::Run(a) => run_all(ui, a),
        Sub::Record(a) => record(ui, ctx, a),
    }
}

fn record(ui: &mut Ui, ctx: &Ctx, a: &RecordArgs) -> Result<i32, CommandError> {
    let ws = ctx.open_read_only()?;
    let name = a.name.clone().unwrap_or_else(|| {
        a.output
            .as_ref()
            .and_then(|o| o.file_stem())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "recorded".into())
    });
    let r = scenario::record::record(&ws, a.since.as_deref(), &name)?;
    for s in &r.skipped {
        super::ui::note(&format!("note: {s}"));
    }
    match &a.output {
        Some(path) => {
            std::fs::write(path, &r.text).map_err(|e| {
                CommandError::new(ERROR, format!("cannot write `{}`: {e}", path.display()))
            })?;
            if ui.json {
                ui.json(&json!({"file": path.display().to_string(), "steps": r.steps, "not_replayed": r.skipped}))?;
            } else {
                ui.line(&format!(
                    "wrote {}: {} steps; replay it with `ckpt scenario run {}`",
                    path.display(),
                    r.steps,
                    path.display()
                ))?;
            }
        }
        None if ui.json => {
            ui.json(&json!({"scenario": r.text, "steps": r.steps, "not_replayed": r.skipped}))?;
        }
        None => ui.out().write_all(r.text.as_bytes())?,
    }
    Ok(OK)
}

struct Result1 {
    sc: Scenario,
    failure: Option<String>,
    failure_detail: Option<run::Failure>,
    seconds: f64,
    kept: Option<PathBuf>,
    crash: Option<run::CrashReport>,
}

fn run_all(ui: &mut Ui, a: &RunArgs) -> Result<i32, CommandError> {
    let files = scenario::discover(&a.paths).map_err(CommandError::usage)?;
    let mut scenarios = Vec::new();
    for f in &files {
        scenarios.push(scenario::load(f).map_err(|e| CommandError::usage(e.to_string()))?);
    }
    if a.jobs == 0 {
        return Err(CommandError::usage("-j must be at least 1"));
    }
    let bin = std::env::current_exe().map_err(|e| {
        CommandError::new(ERROR, format!("cannot find the ckpt binary that runs: {e}"))
    })?;
    let scratch = a.scratch.clone().unwrap_or_else(std::env::temp_dir);
    let mut opts = run::Options::new(bin, scratch);
    opts.keep = a.keep;
    // The caller's ckpt settings stay out of the scenarios' processes
    // (`CKPT_TEST_FSYNC=0` is kept: it only makes them faster).
    opts.clear_env = std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| {
            k.to_str()
                .is_some_and(|k| k.starts_with("CKPT_") && k != "CKPT_TEST_FSYNC")
        })
        .collect();
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result1>>> =
        Mutex::new((0..scenarios.len()).map(|_| None).collect());
    let printer = Mutex::new(&mut *ui);
    let json = printer.lock().map(|u| u.json).unwrap_or(false);
    std::thread::scope(|s| {
        for _ in 0..a.jobs.min(scenarios.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(sc) = scenarios.get(i) else { break };
                    let r = one(sc, &opts, a.crash_each_write);
                    if !json && let Ok(mut u) = printer.lock() {
                        let _ = u.line(&line_of(&r));
                    }
                    if let Ok(mut all) = results.lock() {
                        all[i] = Some(r);
                    }
                }
            });
        }
    });
    let results: Vec<Result1> = results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .flatten()
        .collect();
    let failed = results.iter().filter(|r| r.failure.is_some()).count();
    let points: usize = results
        .iter()
        .filter_map(|r| r.crash.as_ref())
        .map(|c| c.points)
        .sum();
    let violations: usize = results
        .iter()
        .filter_map(|r| r.crash.as_ref())
        .map(|c| c.violations.len())
        .sum();
    if let Some(path) = &a.junit {
        let cases: Vec<junit::Case> = results
            .iter()
            .map(|r| junit::Case {
                name: r.sc.name.clone(),
                file: r.sc.file.display().to_string(),
                seconds: r.seconds,
                failure: r.failure.clone(),
            })
            .collect();
        std::fs::write(path, junit::render("ckpt scenarios", &cases)).map_err(|e| {
            CommandError::new(
                ERROR,
                format!("cannot write the JUnit report `{}`: {e}", path.display()),
            )
        })?;
    }
    let ui = printer
        .into_inner()
        .map_err(|_| CommandError::new(ERROR, "a scenario thread panicked"))?;
    let seconds = started.elapsed().as_secs_f64();
    if ui.json {
        let docs: Vec<_> = results.iter().map(doc_of).collect();
        let mut doc = json!({
            "scenarios": docs,
            "passed": results.len() - failed,
            "failed": failed,
            "seconds": round(seconds),
        });
        if a.crash_each_write {
            doc["crash_points"] = json!(points);
            doc["violations"] = json!(violations);
        }
        ui.json(&doc)?;
    } else {
        let mut summary = format!(
            "{} scenarios: {} passed, {failed} failed ({seconds:.1} s)",
            results.len(),
            results.len() - failed
        );
        if a.crash_each_write {
            summary.push_str(&format!(
                "; {points} crash points tried, {violations} violations"
            ));
        }
        ui.line(&summary)?;
    }
    Ok(if failed > 0 { VERIFY_FAILED } else { OK })
}

fn one(sc: &Scenario, opts: &run::Options, crash: bool) -> Result1 {
    let t = Instant::now();
    let played = run::play(sc, opts, None);
    let mut failure = played.failure.as_ref().map(|f| f.to_string());
    let crash = (crash && failure.is_none()).then(|| run::crash_each_write(sc, opts, &played));
    if let Some(c) = &crash
        && let Some(first) = c.violations.first()
    {
        failure = Some(format!(
            "{} of {} crash points broke a promise; first: {first}",
            c.violations.len(),
            c.points
        ));
    }
    Result1 {
        sc: sc.clone(),
        failure,
        failure_detail: played.failure,
        seconds: t.elapsed().as_secs_f64(),
        kept: played.kept,
        crash,
    }
}

fn line_of(r: &Result1) -> String {
    let crash = r
        .crash
        .as_ref()
        .map(|c| {
            format!(
                "; {} crash points, {} violations",
                c.points,
                c.violations.len()
            )
        })
        .unwrap_or_default();
    let mut s = match &r.failure {
        None => format!("pass  {}  ({:.2} s{crash})", r.sc.name, r.seconds),
        Some(f) => format!("FAIL  {} ({}): {f}", r.sc.name, r.sc.file.display()),
    };
    if let Some(k) = &r.kept {
        s.push_str(&format!("\n      kept: {}", k.display()));
    }
    s
}

fn doc_of(r: &Result1) -> serde_json::Value {
    let mut d = json!({
        "name": r.sc.name,
        "file": r.sc.file.display().to_string(),
        "passed": r.failure.is_none(),
        "seconds": round(r.seconds),
    });
    if let Some(m) = &r.failure {
        d["message"] = json!(m);
    }
    if let Some(f) = &r.failure_detail {
        d["failure"] = json!({
            "step": f.step, "line": f.line, "what": f.what,
            "expected": f.expected, "actual": f.actual,
        });
    }
    if let Some(k) = &r.kept {
        d["kept"] = json!(k.display().to_string());
    }
    if let Some(c) = &r.crash {
        d["crash_points"] = json!(c.points);
        d["violations"] = json!(c.violations);
    }
    d
}

fn round(s: f64) -> f64 {
    (s * 1000.0).round() / 1000.0
}
