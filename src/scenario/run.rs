//! Plays a scenario in a scratch directory: `ws/` (the workspace, a git
//! repository unless `git = false`), `home/` (HOME for every process, so no
//! user settings leak in) and `bin/scenario-agent`, a link to the ckpt binary
//! that stands for the agent.
//!
//! Each session's hooks and shell commands run as children of its own agent
//! process (`ckpt scenario agent`, started under the name `scenario-agent`
//! so ckpt's hooks take it for the agent): a `crash = "before-effect"` or
//! `"after-effect"` kills that process, as a crashing agent would be gone,
//! and the next step of that session starts a new one. ckpt commands of
//! `run` and `checkpoint` steps are run directly, as a person would.
//!
//! With a [`CrashAt`], the story stops where the chosen ckpt process dies at
//! its chosen write point (the failpoint `*`, see [`crate::failpoint`]), and
//! [`play`] checks what must hold after any crash: `ckpt recover` and `ckpt
//! verify` succeed, every version of a file that a step other than a user
//! edit replaced is on disk, in the blob store or in git, and the call cut
//! short is recorded as what the disk shows.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::payload::{self, Event};
use super::{
    Crash, EndExpect, FileExpect, RunExpect, Scenario, StepKind, ToolStep, UserChange, Who,
};
use crate::hash::ContentHash;

/// How to run scenarios.
#[derive(Debug, Clone)]
pub struct Options {
    /// The ckpt binary every step runs.
    pub bin: PathBuf,
    /// Where scratch directories go.
    pub scratch: PathBuf,
    /// Variables of the caller's environment its processes must not see
    /// (the caller's `CKPT_*` settings: the library reads no environment).
    pub clear_env: Vec<std::ffi::OsString>,
    /// Keep the scratch directory of a failing scenario.
    pub keep: bool,
    /// The longest any one process may take.
    pub timeout: Duration,
}

impl Options {
    /// Options with the defaults: not kept, 60 s a process.
    pub fn new(bin: PathBuf, scratch: PathBuf) -> Options {
        Options {
            bin,
            scratch,
            clear_env: Vec::new(),
            keep: false,
            timeout: Duration::from_secs(60),
        }
    }
}

/// Where to kill ckpt: the `point`th write point (1-based) passed by the
/// `invocation`th ckpt process of the story (0-based, in story order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashAt {
    /// Which ckpt process.
    pub invocation: usize,
    /// Which of its write points.
    pub point: usize,
}

/// The first expectation that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The step (1-based), or `None` for setup and the end state.
    pub step: Option<usize>,
    /// The line in the scenario file (0 when none applies).
    pub line: usize,
    /// What was checked (`exit`, `json.files[0].result`, `files."a".content`, …).
    pub what: String,
    /// What the scenario expected.
    pub expected: String,
    /// What happened.
    pub actual: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.step {
            Some(s) => write!(f, "step {s} (line {}): ", self.line)?,
            None if self.line > 0 => write!(f, "line {}: ", self.line)?,
            None => {}
        }
        write!(
            f,
            "{}: expected {}, actual {}",
            self.what, self.expected, self.actual
        )
    }
}

/// What one play of a scenario gave.
#[derive(Debug, Clone)]
pub struct Played {
    /// `None` when every expectation held.
    pub failure: Option<Failure>,
    /// How many ckpt processes the story ran (its crash candidates).
    pub invocations: usize,
    /// The invocations that already die at a scenario's own failpoint.
    pub own_crashes: Vec<usize>,
    /// With a [`CrashAt`]: `None` if that process passed fewer write points
    /// (nothing crashed), else what the crash broke (empty: nothing).
    pub crash: Option<Vec<String>>,
    /// Where the crashed ckpt process ran (`step 3: hook post`).
    pub crashed_in: Option<String>,
    /// The scratch directory, when kept.
    pub kept: Option<PathBuf>,
}

/// A finished process.
#[derive(Debug, Clone, Default)]
pub struct Ran {
    /// Its exit code, if it exited.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Its stdout, lossily decoded.
    pub stdout: String,
    /// Its stderr, lossily decoded.
    pub stderr: String,
    /// It was killed for taking too long.
    pub timed_out: bool,
}

impl Ran {
    fn describe(&self) -> String {
        if self.timed_out {
            "timed out".into()
        } else if let Some(s) = self.signal {
            format!("killed by signal {s}")
        } else {
            format!("exit {}", self.code.unwrap_or(-1))
        }
    }
}

const SIGABRT: i32 = 6;

/// Runs `cmd` with `stdin`, waiting at most `timeout` (then it is killed).
pub fn run_bounded(cmd: &mut Command, stdin: &[u8], timeout: Duration) -> std::io::Result<Ran> {
    use std::os::unix::process::ExitStatusExt;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let mut input = child.stdin.take();
    let data = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        if let Some(i) = input.as_mut() {
            let _ = i.write_all(&data);
        }
    });
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            let _ = child.kill();
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let _ = feeder.join();
    Ok(Ran {
        code: status.code(),
        signal: status.signal(),
        stdout: String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned(),
        stderr: String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned(),
        timed_out,
    })
}

fn reader(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

/// The agent stand-in (`ckpt scenario agent`): reads one JSON request a line
/// (`{"argv", "stdin", "env", "cwd", "timeout_ms"}`), runs it as its child,
/// answers one JSON line (`{"code", "signal", "stdout", "stderr",
/// "timed_out"}`); ends at end of input.
pub fn serve_agent(input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
    for line in input.lines() {
        let line = line?;
        let req: Value = serde_json::from_str(&line).map_err(std::io::Error::other)?;
        let argv: Vec<String> = req["argv"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let Some((prog, args)) = argv.split_first() else {
            return Err(std::io::Error::other("a request without argv"));
        };
        let mut cmd = Command::new(prog);
        cmd.args(args);
        if let Some(cwd) = req["cwd"].as_str() {
            cmd.current_dir(cwd);
        }
        if let Some(env) = req["env"].as_object() {
            for (k, v) in env {
                match v.as_str() {
                    Some(v) => cmd.env(k, v),
                    None => cmd.env_remove(k),
                };
            }
        }
        let timeout = Duration::from_millis(req["timeout_ms"].as_u64().unwrap_or(60_000));
        let stdin = req["stdin"].as_str().unwrap_or("").as_bytes().to_vec();
        let ran = run_bounded(&mut cmd, &stdin, timeout)?;
        let answer = json!({
            "code": ran.code, "signal": ran.signal, "stdout": ran.stdout,
            "stderr": ran.stderr, "timed_out": ran.timed_out,
        });
        writeln!(output, "{answer}")?;
        output.flush()?;
    }
    Ok(())
}

struct StandIn {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

/// Why a play stopped early.
enum Stop {
    Failed(Failure),
    /// The chosen process died at its write point.
    Crashed(String),
    /// The chosen process finished without reaching its write point.
    Passed,
}

/// What a step other than a user edit may not lose: a version of a file it replaced.
struct Kept {
    path: String,
    bytes: Vec<u8>,
}

struct Cut {
    call: Option<String>,
    files: HashMap<String, Vec<u8>>,
    seq: u64,
}

struct Play<'a> {
    sc: &'a Scenario,
    opts: &'a Options,
    root: PathBuf,
    ws: PathBuf,
    home: PathBuf,
    agent_bin: PathBuf,
    agents: HashMap<String, StandIn>,
    checkpoints: HashMap<String, String>,
    invocations: usize,
    own_crashes: Vec<usize>,
    crash_at: Option<CrashAt>,
    /// Versions replaced by agents and ckpt (crash mode only).
    kept: Vec<Kept>,
    /// The tool call a crash cut short, with the files and the ledger's
    /// last seq before its step.
    cut: Option<Cut>,
    /// A `tamper` step damaged ckpt's files and no `ckpt repair` has run
    /// since: commands refusing to act then are right.
    damaged: bool,
    step: Option<usize>,
    line: usize,
}

/// Plays `sc` once; with `crash_at`, stops at that crash and checks what must
/// hold after it.
pub fn play(sc: &Scenario, opts: &Options, crash_at: Option<CrashAt>) -> Played {
    let root = opts
        .scratch
        .join(format!("ckpt-scenario-{}", crate::fs_util::temp_name("")));
    let mut p = Play {
        sc,
        opts,
        ws: root.join("ws"),
        home: root.join("home"),
        agent_bin: root.join("bin").join("scenario-agent"),
        root,
        agents: HashMap::new(),
        checkpoints: HashMap::new(),
        invocations: 0,
        own_crashes: Vec::new(),
        crash_at,
        kept: Vec::new(),
        cut: None,
        damaged: false,
        step: None,
        line: 0,
    };
    let result = p.setup().and_then(|()| p.story());
    let mut played = Played {
        failure: None,
        invocations: p.invocations,
        own_crashes: std::mem::take(&mut p.own_crashes),
        crash: None,
        crashed_in: None,
        kept: None,
    };
    match result {
        Ok(()) => {
            p.stop_agents();
            if crash_at.is_none() {
                played.failure = p.end_state().err();
            }
        }
        Err(Stop::Failed(f)) => played.failure = Some(f),
        Err(Stop::Passed) => {}
        Err(Stop::Crashed(at)) => {
            p.stop_agents();
            played.crash = Some(p.after_crash());
            played.crashed_in = Some(at);
        }
    }
    p.stop_agents();
    let broke = played.failure.is_some() || played.crash.as_ref().is_some_and(|v| !v.is_empty());
    if opts.keep && broke {
        played.kept = Some(p.root.clone());
    } else {
        let _ = std::fs::remove_dir_all(&p.root);
    }
    played
}

impl Play<'_> {
    fn fail(
        &self,
        what: impl Into<String>,
        expected: impl Into<String>,
        actual: impl Into<String>,
    ) -> Stop {
        Stop::Failed(Failure {
            step: self.step,
            line: self.line,
            what: what.into(),
            expected: expected.into(),
            actual: actual.into(),
        })
    }

    fn io(&self, what: &str, e: impl std::fmt::Display) -> Stop {
        self.fail(what, "to succeed", format!("{e}"))
    }

    fn setup(&mut self) -> Result<(), Stop> {
        for d in [&self.ws, &self.home, &self.root.join("bin")] {
            std::fs::create_dir_all(d).map_err(|e| self.io("creating the scratch workspace", e))?;
        }
        std::os::unix::fs::symlink(&self.opts.bin, &self.agent_bin)
            .map_err(|e| self.io("linking the agent stand-in", e))?;
        for (path, spec) in &self.sc.files {
            let full = self.ws.join(path);
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent).map_err(|e| self.io("writing [files]", e))?;
            }
            std::fs::write(&full, &spec.bytes).map_err(|e| self.io("writing [files]", e))?;
            if let Some(m) = spec.mode {
                set_mode(&full, m).map_err(|e| self.io("writing [files]", e))?;
            }
        }
        if self.sc.git {
            self.git(&["init", "-q"])?;
            self.git(&["add", "-A"])?;
            self.git(&["commit", "-q", "--allow-empty", "-m", "scenario start"])?;
        }
        let ran = self.direct(&["init".into()], false)?;
        if ran.code != Some(0) {
            return Err(self.fail(
                "ckpt init",
                "exit 0",
                format!("{}: {}", ran.describe(), ran.stderr.trim()),
            ));
        }
        if !self.sc.config.is_empty() {
            self.merge_config()?;
        }
        Ok(())
    }

    fn git(&self, args: &[&str]) -> Result<(), Stop> {
        let mut cmd = Command::new("git");
        cmd.args([
            "-c",
            "user.name=ckpt scenario",
            "-c",
            "user.email=scenario@localhost",
        ])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(&self.ws);
        self.env(&mut cmd);
        let ran =
            run_bounded(&mut cmd, b"", self.opts.timeout).map_err(|e| self.io("running git", e))?;
        if ran.code != Some(0) {
            return Err(self.fail(
                format!("git {}", args.join(" ")),
                "exit 0",
                format!("{}: {}", ran.describe(), ran.stderr.trim()),
            ));
        }
        Ok(())
    }

    fn merge_config(&self) -> Result<(), Stop> {
        let path = self.ws.join(".agent-runtime/config.toml");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut table: toml::Table =
            toml::from_str(&text).map_err(|e| self.io("reading config.toml", e))?;
        for (k, v) in &self.sc.config {
            match (table.get_mut(k), v) {
                // The scenario's tool rules come first: the first match wins.
                (Some(toml::Value::Array(old)), toml::Value::Array(new)) if k == "tools" => {
                    let mut all = new.clone();
                    all.append(old);
                    *old = all;
                }
                _ => {
                    table.insert(k.clone(), v.clone());
                }
            }
        }
        let out = toml::to_string(&table).map_err(|e| self.io("writing config.toml", e))?;
        std::fs::write(&path, out).map_err(|e| self.io("writing config.toml", e))
    }

    /// The environment every process gets: HOME in the scratch directory,
    /// without the variables [`Options::clear_env`] names.
    fn env(&self, cmd: &mut Command) {
        for k in &self.opts.clear_env {
            cmd.env_remove(k);
        }
        cmd.env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("NO_COLOR", "1");
    }

    /// The failpoint spec for the next ckpt process, counting it.
    fn next_invocation(&mut self, own: Option<&str>) -> (usize, Option<String>) {
        let n = self.invocations;
        self.invocations += 1;
        let mut spec = own.map(|fp| format!("{fp}=abort"));
        if own.is_some() {
            self.own_crashes.push(n);
        }
        if let Some(c) = self.crash_at
            && c.invocation == n
        {
            let any = format!("*={}*abort", c.point);
            spec = Some(match spec {
                Some(s) => format!("{s};{any}"),
                None => any,
            });
        }
        (n, spec)
    }

    /// What a crash run learns from one finished ckpt process.
    fn crashed(&self, n: usize, ran: &Ran, where_: &str) -> Result<(), Stop> {
        if let Some(c) = self.crash_at
            && c.invocation == n
        {
            return if ran.signal == Some(SIGABRT) {
                Err(Stop::Crashed(where_.to_string()))
            } else {
                Err(Stop::Passed)
            };
        }
        Ok(())
    }

    /// A ckpt process run as a person would (not counted for crashes when `story` is false).
    fn direct(&mut self, args: &[String], story: bool) -> Result<Ran, Stop> {
        self.direct_crashing(args, story, None)
    }

    fn direct_crashing(
        &mut self,
        args: &[String],
        story: bool,
        own: Option<&str>,
    ) -> Result<Ran, Stop> {
        let (n, spec) = if story {
            self.next_invocation(own)
        } else {
            (usize::MAX, None)
        };
        let mut cmd = Command::new(&self.opts.bin);
        cmd.args(args).current_dir(&self.ws);
        self.env(&mut cmd);
        if let Some(s) = &spec {
            cmd.env("CKPT_FAILPOINTS", s);
        }
        let ran = run_bounded(&mut cmd, b"", self.opts.timeout)
            .map_err(|e| self.io(&format!("running ckpt {}", args.join(" ")), e))?;
        if story {
            self.crashed(n, &ran, &format!("ckpt {}", args.join(" ")))?;
        }
        if ran.timed_out {
            return Err(self.fail(format!("ckpt {}", args.join(" ")), "to finish", "timed out"));
        }
        Ok(ran)
    }

    fn agent(&mut self, session: &str) -> Result<&mut StandIn, Stop> {
        if !self.agents.contains_key(session) {
            let mut cmd = Command::new(&self.agent_bin);
            cmd.args(["scenario", "agent"])
                .current_dir(&self.ws)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            self.env(&mut cmd);
            let mut child = cmd
                .spawn()
                .map_err(|e| self.io("starting the agent stand-in", e))?;
            let to = child.stdin.take().expect("piped");
            let from = BufReader::new(child.stdout.take().expect("piped"));
            self.agents
                .insert(session.to_string(), StandIn { child, to, from });
        }
        Ok(self.agents.get_mut(session).expect("inserted"))
    }

    /// Runs `argv` as a child of `session`'s agent.
    fn via_agent(
        &mut self,
        session: &str,
        argv: Vec<String>,
        stdin: &str,
        env: Vec<(String, String)>,
        cwd: &Path,
    ) -> Result<Ran, Stop> {
        let mut e = serde_json::Map::new();
        for (k, v) in env {
            e.insert(k, json!(v));
        }
        let req = json!({
            "argv": argv, "stdin": stdin, "env": e, "cwd": cwd,
            "timeout_ms": self.opts.timeout.as_millis() as u64,
        });
        let agent = self.agent(session)?;
        let mut answer = String::new();
        let sent = writeln!(agent.to, "{req}").and_then(|()| agent.to.flush());
        let got = sent.and_then(|()| agent.from.read_line(&mut answer));
        match got {
            Ok(n) if n > 0 => {}
            other => {
                let e = other
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "it exited".into());
                return Err(self.io("talking to the agent stand-in", e));
            }
        }
        let a: Value =
            serde_json::from_str(&answer).map_err(|e| self.io("reading the agent stand-in", e))?;
        Ok(Ran {
            code: a["code"].as_i64().map(|c| c as i32),
            signal: a["signal"].as_i64().map(|c| c as i32),
            stdout: a["stdout"].as_str().unwrap_or("").to_string(),
            stderr: a["stderr"].as_str().unwrap_or("").to_string(),
            timed_out: a["timed_out"].as_bool().unwrap_or(false),
        })
    }

    /// A hook of `who`'s agent: `ckpt hook …` with `payload` on stdin.
    fn hook(
        &mut self,
        who: &Who,
        phase: &str,
        payload: &Value,
        own: Option<&str>,
    ) -> Result<Ran, Stop> {
        let (n, spec) = self.next_invocation(own);
        let mut argv = vec![self.opts.bin.to_string_lossy().into_owned()];
        argv.extend(payload::hook_args(who.agent, phase));
        let env = spec
            .map(|s| vec![("CKPT_FAILPOINTS".to_string(), s)])
            .unwrap_or_default();
        let ws = self.ws.clone();
        let ran = self.via_agent(&who.session, argv, &payload.to_string(), env, &ws)?;
        let step = self.step.unwrap_or(0);
        self.crashed(n, &ran, &format!("step {step}: hook {phase}"))?;
        if ran.timed_out {
            return Err(self.fail(format!("hook {phase}"), "to finish", "timed out"));
        }
        Ok(ran)
    }

    fn kill_agent(&mut self, session: &str) {
        if let Some(mut a) = self.agents.remove(session) {
            let _ = a.child.kill();
            let _ = a.child.wait();
        }
    }

    fn stop_agents(&mut self) {
        for (_, mut a) in self.agents.drain() {
            drop(a.to);
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match a.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = a.child.kill();
                        let _ = a.child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        }
    }

    fn story(&mut self) -> Result<(), Stop> {
        for (i, step) in self.sc.steps.iter().enumerate() {
            self.step = Some(i + 1);
            self.line = step.line;
            let before = self.crash_at.is_some().then(|| snapshot(&self.ws));
            let seq = if self.crash_at.is_some() {
                ledger(&self.ws)
                    .iter()
                    .filter_map(|r| r["seq"].as_u64())
                    .max()
                    .unwrap_or(0)
            } else {
                0
            };
            let user = matches!(step.kind, StepKind::User { .. } | StepKind::Tamper { .. });
            let r = self.one_step(&step.kind);
            if let (Err(Stop::Crashed(_)), StepKind::Tool(t), Some(files)) =
                (&r, &step.kind, &before)
            {
                // Gemini's calls have no id of the agent's: ckpt makes one.
                let call = (t.who.agent != super::Agent::Gemini
                    && !(t.who.agent == super::Agent::Cursor && payload::is_shell(&t.tool)))
                .then(|| t.call.clone());
                self.cut = Some(Cut {
                    call,
                    files: files.clone(),
                    seq,
                });
            }
            if let Some(before) = before
                && !user
            {
                // Whatever this step replaced must still be somewhere.
                let now = snapshot(&self.ws);
                for (path, bytes) in before {
                    if now.get(&path) != Some(&bytes) {
                        self.kept.push(Kept { path, bytes });
                    }
                }
            }
            r?;
        }
        self.step = None;
        self.line = 0;
        Ok(())
    }

    fn one_step(&mut self, kind: &StepKind) -> Result<(), Stop> {
        match kind {
            StepKind::Checkpoint { name, session } => {
                let mut args = vec![
                    "checkpoint".to_string(),
                    "--json".into(),
                    "-m".into(),
                    name.clone(),
                ];
                if let Some(s) = session {
                    args.extend(["--session".to_string(), s.clone()]);
                }
                let ran = self.direct(&args, true)?;
                let id = serde_json::from_str::<Value>(&ran.stdout)
                    .ok()
                    .and_then(|v| v["checkpoint"].as_str().map(str::to_string));
                match (ran.code, id) {
                    (Some(0), Some(id)) => {
                        self.checkpoints.insert(name.clone(), id);
                        Ok(())
                    }
                    _ => Err(self.fail(
                        "ckpt checkpoint",
                        "exit 0 and an id",
                        format!("{}: {}", ran.describe(), ran.stderr.trim()),
                    )),
                }
            }
            StepKind::Tool(t) => self.tool(t),
            StepKind::User { path, change } => self.user(path, change),
            StepKind::Run {
                args,
                crash,
                save,
                expect,
            } => {
                let mut args = args
                    .iter()
                    .map(|a| self.substitute(a))
                    .collect::<Result<Vec<_>, _>>()?;
                if (expect.json.is_some() || !save.is_empty())
                    && !args.iter().any(|a| a == "--json")
                {
                    args.push("--json".into());
                }
                let ran = self.direct_crashing(&args, true, crash.as_deref())?;
                match crash {
                    Some(fp) if ran.signal != Some(SIGABRT) => Err(self.fail(
                        format!("crash = {fp:?}"),
                        "ckpt killed at that failpoint",
                        format!("it never got there ({})", ran.describe()),
                    )),
                    Some(_) => Ok(()),
                    None => {
                        if args.first().is_some_and(|a| a == "repair") && ran.code == Some(0) {
                            self.damaged = false;
                        }
                        self.check_run(expect, &ran, "")?;
                        self.save(save, &ran)
                    }
                }
            }
            StepKind::Tamper { path, change } => {
                self.damaged = true;
                self.user(path, change)
            }
            StepKind::Prompt { text, who } => self.session_hook(who, "prompt", text),
            StepKind::SessionStart { source, who } => {
                self.session_hook(who, "session-start", source)
            }
            StepKind::TurnEnd { who } => self.session_hook(who, "turn-end", ""),
        }
    }

    fn session_hook(&mut self, who: &Who, phase: &str, text: &str) -> Result<(), Stop> {
        let doc = payload::session_payload(who, &self.ws, phase, text);
        let ran = self.hook(who, phase, &doc, None)?;
        if ran.code != Some(0) {
            return Err(self.fail(
                format!("hook {phase}"),
                "exit 0",
                format!("{}: {}", ran.describe(), ran.stderr.trim()),
            ));
        }
        Ok(())
    }

    /// Keeps values of a run's JSON output for `@name`.
    fn save(&mut self, save: &[(String, String)], ran: &Ran) -> Result<(), Stop> {
        if save.is_empty() {
            return Ok(());
        }
        let doc: Value = serde_json::from_str(&ran.stdout).map_err(|e| {
            self.fail(
                "save",
                "a JSON document on stdout",
                format!("{e}: {}", short(&ran.stdout)),
            )
        })?;
        for (name, path) in save {
            let v = lookup(&doc, path).and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            });
            match v {
                Some(v) => {
                    self.checkpoints.insert(name.clone(), v);
                }
                None => {
                    return Err(self.fail(
                        format!("save.{name}"),
                        format!("a string or number at `{path}`"),
                        short(&doc.to_string()),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `@name` → the checkpoint's id (or a saved value).
    fn substitute(&self, arg: &str) -> Result<String, Stop> {
        let mut out = String::new();
        let mut rest = arg;
        while let Some(at) = rest.find('@') {
            out.push_str(&rest[..at]);
            let tail = &rest[at + 1..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || "_.-".contains(c)))
                .unwrap_or(tail.len());
            let name = &tail[..end];
            match self.checkpoints.get(name) {
                Some(id) => out.push_str(id),
                None if at == 0 && !name.is_empty() => {
                    return Err(self.fail(
                        format!("@{name}"),
                        "a checkpoint step of that name before this step",
                        "none",
                    ));
                }
                None => {
                    out.push('@');
                    out.push_str(name);
                }
            }
            rest = &tail[end..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn check_run(&self, e: &RunExpect, ran: &Ran, prefix: &str) -> Result<(), Stop> {
        if let Some(x) = e.exit
            && ran.code != Some(x)
        {
            let tail = ran
                .stderr
                .lines()
                .chain(ran.stdout.lines())
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("no output");
            return Err(self.fail(
                format!("{prefix}exit"),
                x.to_string(),
                format!("{}: {}", ran.describe(), short(tail)),
            ));
        }
        if let Some(want) = &e.json {
            let got: Value = serde_json::from_str(&ran.stdout).map_err(|err| {
                self.fail(
                    format!("{prefix}json"),
                    "a JSON document on stdout",
                    format!("{err}: {}", short(&ran.stdout)),
                )
            })?;
            if let Err((at, exp, act)) = subset(want, &got, "json".into()) {
                return Err(self.fail(format!("{prefix}{at}"), exp, act));
            }
        }
        for s in &e.stdout_contains {
            if !ran.stdout.contains(s.as_str()) {
                return Err(self.fail(
                    format!("{prefix}stdout_contains"),
                    format!("{s:?}"),
                    short(&ran.stdout),
                ));
            }
        }
        for s in &e.stderr_contains {
            if !ran.stderr.contains(s.as_str()) {
                return Err(self.fail(
                    format!("{prefix}stderr_contains"),
                    format!("{s:?}"),
                    short(&ran.stderr),
                ));
            }
        }
        Ok(())
    }

    fn user(&mut self, path: &str, change: &UserChange) -> Result<(), Stop> {
        let full = self.ws.join(path);
        let what = format!("user edit of {path}");
        let old = std::fs::read(&full);
        if let (Some(parent), UserChange::Content(_) | UserChange::Append(_)) =
            (full.parent(), change)
        {
            std::fs::create_dir_all(parent).map_err(|e| self.io(&what, e))?;
        }
        match change {
            // `delete = true`: the file is gone afterwards (as `rm -f`).
            UserChange::Delete => match std::fs::remove_file(&full) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(self.io(&what, e)),
                _ => Ok(()),
            },
            UserChange::Mode(m) => set_mode(&full, *m).map_err(|e| self.io(&what, e)),
            UserChange::Content(b) => write_keeping_mode(&full, b).map_err(|e| self.io(&what, e)),
            UserChange::Append(b) => {
                let mut all = old.unwrap_or_default();
                all.extend_from_slice(b);
                write_keeping_mode(&full, &all).map_err(|e| self.io(&what, e))
            }
            UserChange::Replace(a, b) => {
                let text = old.map_err(|e| self.io(&what, e))?;
                let text = String::from_utf8_lossy(&text).into_owned();
                if !text.contains(a.as_str()) {
                    return Err(self.fail(
                        format!("{what}: replace"),
                        format!("{a:?} in the file"),
                        "not found",
                    ));
                }
                write_keeping_mode(&full, text.replacen(a.as_str(), b, 1).as_bytes())
                    .map_err(|e| self.io(&what, e))
            }
        }
    }

    fn tool(&mut self, t: &ToolStep) -> Result<(), Stop> {
        let own = match &t.crash {
            Some(Crash::Failpoint(fp)) => Some(fp.as_str()),
            _ => None,
        };
        let original = self.original(t);
        if let Some((phase, doc)) =
            payload::tool_payload(t, &self.ws, Event::Pre, &Default::default())
        {
            let ran = self.hook(&t.who, phase, &doc, own)?;
            let own_died = own.is_some() && ran.signal == Some(SIGABRT);
            if t.expect != RunExpect::default() {
                self.check_run(&t.expect, &ran, "hook pre ")?;
            } else if ran.code != Some(0) && !own_died {
                return Err(self.fail(
                    "hook pre",
                    "exit 0",
                    format!("{}: {}", ran.describe(), ran.stderr.trim()),
                ));
            }
            if ran.code == Some(2) {
                // Refused: the agent does not run the tool, and sends no post.
                return Ok(());
            }
        }
        if t.crash == Some(Crash::BeforeEffect) {
            self.kill_agent(&t.who.session);
            return Ok(());
        }
        let (output, error) = self.effect(t)?;
        if t.crash == Some(Crash::AfterEffect) {
            self.kill_agent(&t.who.session);
            return Ok(());
        }
        let failed = t.failed || error.is_some();
        let outcome = payload::Outcome {
            original,
            output,
            error: error.or_else(|| t.failed.then(|| "the tool failed".to_string())),
        };
        let event = if failed { Event::Failure } else { Event::Post };
        if let Some((phase, doc)) = payload::tool_payload(t, &self.ws, event, &outcome) {
            let ran = self.hook(&t.who, phase, &doc, own)?;
            let own_died = own.is_some() && ran.signal == Some(SIGABRT);
            if ran.code != Some(0) && !own_died {
                return Err(self.fail(
                    format!("hook {phase}"),
                    "exit 0",
                    format!("{}: {}", ran.describe(), ran.stderr.trim()),
                ));
            }
        }
        Ok(())
    }

    /// The target file's text before the call, for Claude's `originalFile`.
    fn original(&self, t: &ToolStep) -> Option<Option<String>> {
        if !matches!(t.tool.as_str(), "Write" | "Edit") {
            return None;
        }
        let input = payload::agent_input(t, &self.ws);
        let path = input.get("file_path")?.as_str()?;
        match std::fs::read(path) {
            Ok(b) => Some(Some(String::from_utf8(b).ok()?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(None),
            Err(_) => None,
        }
    }

    /// Does what the tool does. Returns its output and, for a tool that
    /// failed (a shell command's non-zero exit), the error text.
    fn effect(&mut self, t: &ToolStep) -> Result<(String, Option<String>), Stop> {
        let input = payload::agent_input(t, &self.ws);
        let s = |k: &str| input.get(k).and_then(Value::as_str).map(str::to_string);
        let path_of = |input: &Value| -> Option<PathBuf> {
            let p = input
                .get("file_path")
                .or_else(|| input.get("notebook_path"))
                .or_else(|| input.get("path"))
                .and_then(Value::as_str)?;
            Some(if p.starts_with('/') {
                PathBuf::from(p)
            } else {
                self.ws.join(p)
            })
        };
        let tool = t.tool.as_str();
        if payload::is_shell(tool) {
            let command = s("command").unwrap_or_default();
            let cwd = match s("directory") {
                Some(d) => self.ws.join(d),
                None => self.ws.clone(),
            };
            let ran = self.via_agent(
                &t.who.session,
                vec!["sh".into(), "-c".into(), command],
                "",
                Vec::new(),
                &cwd,
            )?;
            if ran.timed_out {
                return Err(self.fail("the shell command", "to finish", "timed out"));
            }
            let out = format!("{}{}", ran.stdout, ran.stderr);
            return Ok(match ran.code {
                Some(0) => (out, None),
                _ => (out, Some(format!("Command failed: {}", ran.describe()))),
            });
        }
        let cannot = |why: String| -> Result<(String, Option<String>), Stop> {
            if t.failed {
                Ok((String::new(), Some(why)))
            } else {
                Err(self.fail(format!("the {tool} call"), "to apply", why))
            }
        };
        match tool {
            "Write" | "write_file" | "create_file" => {
                let (Some(path), Some(content)) = (path_of(&input), s("content")) else {
                    return cannot("its input has no file_path and content".into());
                };
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| self.io("writing", e))?;
                }
                write_keeping_mode(&path, content.as_bytes()).map_err(|e| self.io("writing", e))?;
                Ok(("ok".into(), None))
            }
            "Edit" | "replace" | "edit" | "MultiEdit" => {
                let Some(path) = path_of(&input) else {
                    return cannot("its input has no file_path".into());
                };
                let edits: Vec<(String, String, bool)> =
                    match input.get("edits").and_then(Value::as_array) {
                        Some(list) => list
                            .iter()
                            .map(|e| {
                                (
                                    e["old_string"].as_str().unwrap_or("").to_string(),
                                    e["new_string"].as_str().unwrap_or("").to_string(),
                                    e["replace_all"].as_bool().unwrap_or(false),
                                )
                            })
                            .collect(),
                        None => vec![(
                            s("old_string").unwrap_or_default(),
                            s("new_string").unwrap_or_default(),
                            input["replace_all"].as_bool().unwrap_or(false)
                                || input["expected_replacements"]
                                    .as_u64()
                                    .is_some_and(|n| n > 1),
                        )],
                    };
                let mut text = match std::fs::read(&path) {
                    Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                    Err(e) => return cannot(format!("cannot read {}: {e}", path.display())),
                };
                for (old, new, all) in edits {
                    if old.is_empty() || !text.contains(old.as_str()) {
                        return cannot(format!("old_string {old:?} is not in {}", path.display()));
                    }
                    text = if all {
                        text.replace(old.as_str(), &new)
                    } else {
                        text.replacen(old.as_str(), &new, 1)
                    };
                }
                write_keeping_mode(&path, text.as_bytes()).map_err(|e| self.io("writing", e))?;
                Ok(("ok".into(), None))
            }
            "apply_patch" => {
                let Some((_, doc)) =
                    payload::tool_payload(t, &self.ws, Event::Pre, &Default::default())
                else {
                    return cannot("no payload".into());
                };
                let ev = crate::capture::parse(
                    doc.to_string().as_bytes(),
                    crate::capture::Phase::Pre,
                    Some(crate::capture::Format::Codex),
                )
                .map_err(|e| self.io("reading the patch", e))?;
                self.apply_targets(&ev.targets).or_else(cannot)
            }
            _ => Ok((String::new(), None)),
        }
    }

    /// Applies an `apply_patch` call's targets.
    fn apply_targets(
        &self,
        targets: &[crate::capture::Target],
    ) -> Result<(String, Option<String>), String> {
        use crate::capture::{Expected, TargetRole};
        let resolve = |p: &str| {
            if p.starts_with('/') {
                PathBuf::from(p)
            } else {
                self.ws.join(p)
            }
        };
        let mut moved: Option<String> = None;
        for t in targets {
            let path = resolve(&t.path);
            match t.role {
                TargetRole::Delete => {
                    std::fs::remove_file(&path).map_err(|e| format!("delete {}: {e}", t.path))?
                }
                TargetRole::MoveFrom => {
                    let text = std::fs::read_to_string(&path)
                        .map_err(|e| format!("read {}: {e}", t.path))?;
                    std::fs::remove_file(&path).map_err(|e| format!("move {}: {e}", t.path))?;
                    moved = Some(text);
                }
                TargetRole::Write | TargetRole::MoveTo => {
                    let before = match (t.role, moved.take()) {
                        (TargetRole::MoveTo, Some(text)) => text,
                        _ => std::fs::read_to_string(&path).unwrap_or_default(),
                    };
                    let after = match &t.expected {
                        Some(Expected::Content(c)) => c.clone(),
                        Some(e) => crate::capture::apply_expected(&before, e)
                            .ok_or_else(|| format!("the patch does not apply to {}", t.path))?,
                        None => before,
                    };
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
                    }
                    write_keeping_mode(&path, after.as_bytes()).map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(("Success.".into(), None))
    }

    fn end_state(&mut self) -> Result<(), Failure> {
        let unwrap = |r: Result<(), Stop>| match r {
            Err(Stop::Failed(f)) => Err(f),
            _ => Ok(()),
        };
        for (path, e) in &self.sc.expect.files {
            unwrap(self.check_file(path, e))?;
        }
        let EndExpect {
            conflicts, verify, ..
        } = self.sc.expect.clone();
        if let Some(n) = conflicts {
            let ran = self.direct(&["status".into(), "--json".into()], false);
            let ran = match ran {
                Ok(r) => r,
                Err(s) => return unwrap(Err(s)),
            };
            let got = serde_json::from_str::<Value>(&ran.stdout)
                .ok()
                .and_then(|v| v["conflicts"].as_u64());
            if got != Some(n) {
                return Err(Failure {
                    step: None,
                    line: 0,
                    what: "conflicts".into(),
                    expected: n.to_string(),
                    actual: got.map_or_else(
                        || format!("no answer from ckpt status ({})", ran.describe()),
                        |g| g.to_string(),
                    ),
                });
            }
        }
        if verify {
            let ran = match self.direct(&["verify".into()], false) {
                Ok(r) => r,
                Err(s) => return unwrap(Err(s)),
            };
            if ran.code != Some(0) {
                return Err(Failure {
                    step: None,
                    line: 0,
                    what: "verify".into(),
                    expected: "ckpt verify to pass".into(),
                    actual: format!(
                        "{}: {}",
                        ran.describe(),
                        short(&format!("{}{}", ran.stdout, ran.stderr))
                    ),
                });
            }
        }
        Ok(())
    }

    fn check_file(&self, path: &str, e: &FileExpect) -> Result<(), Stop> {
        let what = |k: &str| format!("files.{path:?}.{k}");
        let full = self.ws.join(path);
        let meta = std::fs::symlink_metadata(&full);
        if e.absent {
            return match meta {
                Err(_) => Ok(()),
                Ok(_) => Err(self.fail(what("absent"), "no file", "a file")),
            };
        }
        let bytes = match std::fs::read(&full) {
            Ok(b) => b,
            Err(err) => return Err(self.fail(what("exists"), "a file", format!("{err}"))),
        };
        if let Some(c) = &e.content
            && &bytes != c
        {
            return Err(self.fail(what("content"), show(c), show(&bytes)));
        }
        if let Some(h) = &e.sha256 {
            let got = ContentHash::of(&bytes).hex();
            if &got != h {
                return Err(self.fail(what("sha256"), h.clone(), got));
            }
        }
        if let Some(c) = &e.contains
            && !String::from_utf8_lossy(&bytes).contains(c.as_str())
        {
            return Err(self.fail(what("contains"), format!("{c:?}"), show(&bytes)));
        }
        if let Some(m) = e.mode {
            use std::os::unix::fs::PermissionsExt;
            let got = meta.map(|m| m.permissions().mode() & 0o7777).unwrap_or(0);
            if got != m {
                return Err(self.fail(what("mode"), format!("{m:o}"), format!("{got:o}")));
            }
        }
        Ok(())
    }

    /// What must hold after any crash; each broken promise as one line.
    fn after_crash(&mut self) -> Vec<String> {
        let mut broken = Vec::new();
        let mut run = |p: &mut Self, args: &[&str]| -> Option<Ran> {
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            match p.direct(&args, false) {
                Ok(r) => Some(r),
                Err(Stop::Failed(f)) => {
                    broken.push(format!("ckpt {}: {}", args.join(" "), f.actual));
                    None
                }
                Err(_) => None,
            }
        };
        let recover = run(self, &["recover", "--json"]);
        let verify = run(self, &["verify", "--json"]);
        if self.damaged {
            // The story damaged the history itself: refusing is the answer
            // until `ckpt repair`; what must still hold is that nothing is lost.
            broken.extend(self.lost_versions());
            return broken;
        }
        // Exit 5 is an answer: something a crash cut short needs a person.
        if let Some(r) = &recover
            && !(matches!(r.code, Some(0 | 5)) && serde_json::from_str::<Value>(&r.stdout).is_ok())
        {
            broken.push(format!(
                "ckpt recover: {} ({})",
                r.describe(),
                short(r.stderr.trim())
            ));
        }
        if let Some(r) = &verify
            && r.code != Some(0)
        {
            broken.push(format!(
                "ckpt verify: {} ({})",
                r.describe(),
                short(&format!("{}{}", r.stdout, r.stderr))
            ));
        }
        broken.extend(self.lost_versions());
        broken.extend(self.cut_short());
        broken
    }

    /// The call a crash cut short must be recorded as what the disk shows:
    /// once ckpt knew of it (its `started` record is in the ledger), every
    /// file its step changed has a patch of that call ending in the bytes on
    /// disk (or a conflict for a person, when ckpt cannot tell who changed
    /// it), and no patch of it claims bytes the disk does not hold.
    fn cut_short(&self) -> Vec<String> {
        let Some(cut) = &self.cut else {
            return Vec::new();
        };
        let records: Vec<Value> = ledger(&self.ws)
            .into_iter()
            .filter(|r| r["seq"].as_u64().is_some_and(|s| s > cut.seq))
            .collect();
        let of_call = |r: &Value| match &cut.call {
            Some(c) => r["call"].as_str() == Some(c.as_str()),
            None => true,
        };
        let started = records
            .iter()
            .any(|r| r["kind"] == "tool_call" && r["status"] == "started" && of_call(r));
        if !started {
            return Vec::new();
        }
        let name = cut.call.as_deref().unwrap_or("the call");
        let now = snapshot(&self.ws);
        let disk_hash = |p: &str| {
            now.get(p)
                .map(|b| format!("sha256:{}", ContentHash::of(b).hex()))
        };
        let patches: Vec<&Value> = records
            .iter()
            .filter(|r| r["kind"] == "file_patch" && of_call(r))
            .collect();
        let mut broken = Vec::new();
        let mut paths: Vec<&String> = cut.files.keys().chain(now.keys()).collect();
        paths.sort();
        paths.dedup();
        for p in paths {
            if cut.files.get(p) == now.get(p) {
                continue;
            }
            let want = disk_hash(p);
            // Changed, but not to what the input predicts (or nothing
            // predicted it): a conflict for a person is an answer too.
            let raised = records
                .iter()
                .any(|r| r["kind"] == "conflict" && r["path"].as_str() == Some(p.as_str()));
            if raised {
                continue;
            }
            // A rename's patch names the new path and, as `from_path`, the
            // old one, which it leaves absent.
            let got = patches.iter().rev().find_map(|r| {
                if r["path"].as_str() == Some(p.as_str()) {
                    Some(r["after_hash"].as_str().map(str::to_string))
                } else if r["from_path"].as_str() == Some(p.as_str()) {
                    Some(None)
                } else {
                    None
                }
            });
            if got != Some(want.clone()) {
                broken.push(format!(
                    "{name} changed {p} before the crash, but after recover the ledger {}",
                    match got {
                        None => "has no patch of it for that file".to_string(),
                        Some(h) => format!(
                            "says it left {} where the disk holds {}",
                            h.as_deref().unwrap_or("no file"),
                            want.as_deref().unwrap_or("no file")
                        ),
                    }
                ));
            }
        }
        for r in &patches {
            let Some(p) = r["path"].as_str() else {
                continue;
            };
            if cut.files.get(p) == now.get(p)
                && r["after_hash"].as_str().map(str::to_string) != disk_hash(p)
            {
                broken.push(format!(
                    "{name} did not change {p}, yet the ledger has a patch of it for that file ({})",
                    r["patch"].as_str().unwrap_or("?")
                ));
            }
        }
        broken
    }

    /// Versions a step replaced that are nowhere: not on disk at their path,
    /// not in the blob store, not in git.
    fn lost_versions(&self) -> Vec<String> {
        let mut lost = Vec::new();
        // Read through the store: a big content is kept as chunks.
        let store = crate::workspace::Workspace::open(&self.ws, Default::default()).ok();
        for k in &self.kept {
            let hash = ContentHash::of(&k.bytes);
            if std::fs::read(self.ws.join(&k.path)).is_ok_and(|b| b == k.bytes) {
                continue;
            }
            let hex = hash.hex();
            if store
                .as_ref()
                .is_some_and(|ws| ws.blobs().get(&hash).is_ok_and(|b| b == k.bytes))
            {
                continue;
            }
            if self.sc.git && self.in_git(&k.bytes) {
                continue;
            }
            lost.push(format!(
                "a version of {} ({} bytes, sha256:{}) that a step replaced is not on disk, in the blob store or in git",
                k.path,
                k.bytes.len(),
                &hex[..12]
            ));
        }
        lost
    }

    fn in_git(&self, bytes: &[u8]) -> bool {
        use sha1::Digest;
        let mut h = sha1::Sha1::new();
        h.update(format!("blob {}\0", bytes.len()).as_bytes());
        h.update(bytes);
        let id = crate::hash::hex(&h.finalize());
        let mut cmd = Command::new("git");
        cmd.args(["cat-file", "-e", &id]).current_dir(&self.ws);
        self.env(&mut cmd);
        run_bounded(&mut cmd, b"", self.opts.timeout).is_ok_and(|r| r.code == Some(0))
    }
}

/// What `--crash-each-write` found for one scenario.
#[derive(Debug, Clone, Default)]
pub struct CrashReport {
    /// Crash states tried (one run each).
    pub points: usize,
    /// Each broken promise: where ckpt was killed, and what broke.
    pub violations: Vec<String>,
}

/// The most write points one ckpt process may pass before the runner gives up on it.
pub const MAX_POINTS: usize = 400;

/// Replays `sc` once for each write point each of its ckpt processes passes
/// (`normal` is its uninterrupted play), killing that process there, and
/// checks what must hold after each crash. Processes a scenario already
/// kills at its own failpoint are skipped: they are crash points of the story.
pub fn crash_each_write(sc: &Scenario, opts: &Options, normal: &Played) -> CrashReport {
    let mut report = CrashReport::default();
    for invocation in 0..normal.invocations {
        if normal.own_crashes.contains(&invocation) {
            continue;
        }
        let mut point = 1;
        loop {
            let p = play(sc, opts, Some(CrashAt { invocation, point }));
            match (p.crash, p.failure) {
                (Some(broken), _) => {
                    report.points += 1;
                    let at = p.crashed_in.unwrap_or_default();
                    for b in broken {
                        let kept = p
                            .kept
                            .as_ref()
                            .map(|k| format!(" [kept at {}]", k.display()))
                            .unwrap_or_default();
                        report.violations.push(format!(
                            "killed at write point {point} of {at} (process {}): {b}{kept}",
                            invocation + 1
                        ));
                    }
                }
                (None, Some(f)) => {
                    report.violations.push(format!(
                        "the replay for process {} point {point} went another way: {f}",
                        invocation + 1
                    ));
                    break;
                }
                (None, None) => break,
            }
            point += 1;
            if point > MAX_POINTS {
                report.violations.push(format!(
                    "process {} passes more than {MAX_POINTS} write points; the rest were not tried",
                    invocation + 1
                ));
                break;
            }
        }
    }
    report
}

/// The value at `a.b[0].c` in `doc`.
fn lookup<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    let mut v = doc;
    for part in path.split('.') {
        let (key, idx) = match part.split_once('[') {
            Some((k, rest)) => (k, Some(rest.strip_suffix(']')?.parse::<usize>().ok()?)),
            None => (part, None),
        };
        if !key.is_empty() {
            v = v.get(key)?;
        }
        if let Some(i) = idx {
            v = v.get(i)?;
        }
    }
    Some(v)
}

/// The ledger's readable records (a torn or damaged line is skipped).
fn ledger(ws: &Path) -> Vec<Value> {
    std::fs::read(ws.join(".agent-runtime/ledger.jsonl"))
        .map(|b| {
            b.split(|&c| c == b'\n')
                .filter_map(|l| serde_json::from_slice(l).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Every regular file under `ws` but `.git/` and `.agent-runtime/`, by relative path.
fn snapshot(ws: &Path) -> HashMap<String, Vec<u8>> {
    let mut out = HashMap::new();
    let mut stack = vec![(ws.to_path_buf(), String::new(), 0usize)];
    while let Some((dir, rel, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if depth == 0 && (name == ".git" || name == ".agent-runtime") {
                continue;
            }
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            match e.file_type() {
                Ok(t) if t.is_dir() && depth < 32 => stack.push((e.path(), r, depth + 1)),
                Ok(t) if t.is_file() => {
                    if let Ok(b) = std::fs::read(e.path()) {
                        out.insert(r, b);
                    }
                }
                _ => {}
            }
        }
    }
    out
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Writes in place (the file keeps its mode and inode, as editors and agents do).
fn write_keeping_mode(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

fn short(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() > 300 {
        format!("{}…", s.chars().take(300).collect::<String>())
    } else {
        s.to_string()
    }
}

fn show(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => short(&format!("{s:?}")),
        Err(_) => format!(
            "{} bytes, sha256:{}",
            b.len(),
            &ContentHash::of(b).hex()[..12]
        ),
    }
}

/// Whether `want` is a subset of `got`: objects by key (extra keys ignored),
/// lists element by element and of the same length, anything else equal.
/// The first difference: (where, expected, actual).
pub fn subset(want: &Value, got: &Value, at: String) -> Result<(), (String, String, String)> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let here = format!("{at}.{k}");
                match g.get(k) {
                    Some(gv) => subset(wv, gv, here)?,
                    None => return Err((here, wv.to_string(), "no such key".into())),
                }
            }
            Ok(())
        }
        (Value::Array(w), Value::Array(g)) => {
            if w.len() != g.len() {
                return Err((
                    format!("{at} (length)"),
                    w.len().to_string(),
                    format!("{} ({})", g.len(), short(&got.to_string())),
                ));
            }
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                subset(wv, gv, format!("{at}[{i}]"))?;
            }
            Ok(())
        }
        (Value::Number(w), Value::Number(g)) if w.as_f64() == g.as_f64() => Ok(()),
        (w, g) if w == g => Ok(()),
        (w, g) => Err((at, w.to_string(), short(&g.to_string()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subset_ignores_extra_keys_and_names_the_first_difference() {
        let got = json!({"files": [{"path": "a", "result": "merged", "x": 1}], "ok": true});
        assert!(subset(&json!({"files": [{"path": "a"}]}), &got, "json".into()).is_ok());
        let e = subset(
            &json!({"files": [{"result": "restored"}]}),
            &got,
            "json".into(),
        )
        .unwrap_err();
        assert_eq!(
            e,
            (
                "json.files[0].result".into(),
                "\"restored\"".into(),
                "\"merged\"".into()
            )
        );
        let e = subset(&json!({"files": []}), &got, "json".into()).unwrap_err();
        assert_eq!(e.0, "json.files (length)");
        let e = subset(&json!({"nope": 1}), &got, "json".into()).unwrap_err();
        assert_eq!(e.0, "json.nope");
    }
}
