//! A deterministic test environment: a temp workspace, the real `ckpt` binary
//! run with a cleared environment, a fixed clock and id seed, and helpers.

#![allow(dead_code)]

pub mod simfs;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    pub ws: PathBuf,
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ckpt")
}

impl TestEnv {
    pub fn new() -> TestEnv {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        TestEnv { dir, home, ws }
    }

    /// A new environment with `ckpt init` already run.
    pub fn init() -> TestEnv {
        let env = TestEnv::new();
        let r = env.ckpt(&["init"]);
        assert_eq!(r.code, 0, "init failed: {}", r.stderr);
        env
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(args)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("CKPT_WORKSPACE", &self.ws)
            .env("NO_COLOR", "1")
            // Hooks run by the tests belong to no agent process (the test
            // process lives on): calls cut short stay in doubt, as after a
            // crash. Tests of a gone agent set it to a process they kill.
            .env("CKPT_AGENT_PID", "0")
            .current_dir(&self.ws)
            .stdin(Stdio::null());
        c
    }

    pub fn ckpt(&self, args: &[&str]) -> Run {
        self.ckpt_env(args, &[])
    }

    pub fn ckpt_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut c = self.command(args);
        for (k, v) in env {
            c.env(k, v);
        }
        run(c.output().expect("spawn ckpt"))
    }

    pub fn rt(&self) -> PathBuf {
        self.ws.join(".agent-runtime")
    }

    pub fn ledger_path(&self) -> PathBuf {
        self.rt().join("ledger.jsonl")
    }

    pub fn open(&self) -> ckpt::Workspace {
        ckpt::Workspace::open(&self.ws, ckpt::OpenOptions::default()).expect("open workspace")
    }

    pub fn write(&self, rel: &str, data: &[u8]) {
        let p = self.ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    }
}

/// Makes a FIFO at `p` (POSIX `mkfifo(1)`: rustix's `mknodat` is not on
/// every platform).
pub fn mkfifo(p: &Path) {
    let ok = Command::new("mkfifo")
        .arg(p)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "mkfifo {}", p.display());
}

/// `git apply`s `diff` in a scratch directory holding `before` at `path`
/// (its parents made); returns what `path` holds after (`None`: absent).
pub fn git_apply(
    env: &TestEnv,
    diff: &[u8],
    path: &str,
    before: Option<&[u8]>,
    what: &str,
) -> Option<Vec<u8>> {
    let scratch = tempfile::tempdir().unwrap();
    if let Some(b) = before {
        let p = scratch.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b).unwrap();
    }
    let diff_file = env.dir.path().join("p.diff");
    std::fs::write(&diff_file, diff).unwrap();
    let out = Command::new("git")
        .args(["apply", "--whitespace=nowarn", diff_file.to_str().unwrap()])
        .current_dir(scratch.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", &env.home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{what}: git apply failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(diff)
    );
    std::fs::read(scratch.path().join(path)).ok()
}

pub fn run(o: Output) -> Run {
    Run {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Lists every file under `dir` with its mode bits, sorted.
pub fn walk_modes(dir: &Path) -> Vec<(PathBuf, u32, bool)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            out.push((e.path(), md.permissions().mode() & 0o7777, md.is_dir()));
            if md.is_dir() {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// A seed for randomized tests: `CKPT_SEED` or a fixed default, printed.
pub fn seed(default: u64) -> u64 {
    let s = std::env::var("CKPT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    eprintln!("seed: {s} (replay with CKPT_SEED={s})");
    s
}

/// xorshift64* — deterministic, dependency-free randomness for tests.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Runs `ckpt ARGS` in `env` with `stdin` piped in and `extra` set in its
/// environment (hook payloads).
pub fn run_with_stdin(env: &TestEnv, args: &[&str], stdin: &[u8], extra: &[(&str, &str)]) -> Run {
    let mut c = env.command(args);
    for (k, v) in extra {
        c.env(k, v);
    }
    run_with_stdin_cmd(c, stdin)
}

/// Runs the prepared command `c` with `stdin` piped in.
pub fn run_with_stdin_cmd(mut c: Command, stdin: &[u8]) -> Run {
    use std::io::Write;
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin);
    drop(input);
    run(child.wait_with_output().unwrap())
}

/// [`run_with_stdin_cmd`], killed after `limit`: `None` when it was (a hang
/// fails a test instead of stalling the suite).
pub fn run_with_stdin_bounded(
    mut c: Command,
    stdin: &[u8],
    limit: std::time::Duration,
) -> Option<Run> {
    use std::io::{Read, Write};
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    let _ = writer.join();
    let (stdout, stderr) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    status.map(|s| Run {
        code: s.code().unwrap_or(-1),
        stdout,
        stderr,
    })
}

/// Runs `git ARGS` in the workspace, with a fixed identity and no system or
/// user configuration; it must succeed. Returns its stdout.
pub fn git(env: &TestEnv, args: &[&str]) -> String {
    git_at(&env.ws, &env.home, args)
}

/// [`git`] in another directory.
pub fn git_at(dir: &Path, home: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@e")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@e")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One entry of a directory tree, as exactly as a test can see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    File(u32, Vec<u8>),
    Link(std::path::PathBuf),
    Dir(u32),
}

/// Every entry under `root` but the top-level names in `skip`.
pub fn tree(
    root: &std::path::Path,
    skip: &[&str],
) -> std::collections::BTreeMap<std::path::PathBuf, Entry> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            if skip.iter().any(|s| rel == std::path::Path::new(s)) {
                continue;
            }
            let md = std::fs::symlink_metadata(&p).unwrap();
            let m = md.permissions().mode() & 0o7777;
            let entry = if md.file_type().is_symlink() {
                Entry::Link(std::fs::read_link(&p).unwrap())
            } else if md.is_dir() {
                stack.push(p.clone());
                Entry::Dir(m)
            } else {
                Entry::File(m, std::fs::read(&p).unwrap())
            };
            out.insert(rel, entry);
        }
    }
    out
}

/// `n` bytes of deterministic noise from `seed` (no two seeds alike).
pub fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        v.extend_from_slice(&rng.next().to_le_bytes());
    }
    v.truncate(n);
    v
}

/// The chunks (hash, length) that the manifest of `bytes` lists, if the
/// content is stored as chunks in `env`.
pub fn chunks_of(env: &TestEnv, bytes: &[u8]) -> Option<Vec<(String, u64)>> {
    let hex = ckpt::ContentHash::of(bytes).hex();
    let text = std::fs::read_to_string(env.rt().join(format!(
        "artifacts/chunks/{}/{}",
        &hex[..2],
        &hex[2..]
    )))
    .ok()?;
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("ckpt-chunks 1"), "{text}");
    assert_eq!(lines.next(), Some(bytes.len().to_string().as_str()));
    Some(
        lines
            .map(|l| {
                let (h, n) = l.split_once(' ').unwrap();
                (h.to_string(), n.parse().unwrap())
            })
            .collect(),
    )
}

/// Where the blob (or chunk) named `hex` is kept in `env`.
pub fn blob_file(env: &TestEnv, hex: &str) -> PathBuf {
    env.rt()
        .join(format!("artifacts/blobs/{}/{}", &hex[..2], &hex[2..]))
}

/// A copy of `env`'s workspace (`.agent-runtime/` included) in a new
/// environment.
pub fn copy_workspace(env: &TestEnv) -> TestEnv {
    let other = TestEnv::new();
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", env.ws.display()))
        .arg(&other.ws)
        .status()
        .unwrap();
    assert!(st.success());
    other
}

/// `ckpt status` (`--json`, and its lines, which name a file's newest calls
/// from the view's summaries) and `ckpt diff` planned from the reduced view
/// (`index/view.bin`) say byte for byte what the whole read says
/// (`CKPT_TEST_NO_VIEW`). Returns the whole read's `status --json`.
pub fn status_view_agrees(env: &TestEnv, when: &str) -> serde_json::Value {
    let mut doc = serde_json::Value::Null;
    for args in [&["status", "--json"][..], &["status"], &["diff"]] {
        let whole = env.ckpt_env(args, &[("CKPT_TEST_NO_VIEW", "1")]);
        let view = env.ckpt(args);
        assert_eq!(
            whole.code, 0,
            "{when}: {args:?} (whole read): {}",
            whole.stderr
        );
        assert_eq!(
            (view.code, &view.stdout),
            (whole.code, &whole.stdout),
            "{when}: {args:?} from the view (left) differs from the whole read's: {}",
            view.stderr
        );
        if doc.is_null() {
            doc = whole.json();
        }
    }
    doc
}
