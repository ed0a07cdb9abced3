//! Named failpoints for crash tests.
//!
//! The binary reads `CKPT_FAILPOINTS` (`name=action;name=action`) once and hands
//! it to [`configure`]; the library never reads the environment itself. Actions:
//! `abort` (like a `kill -9`: no destructors, no flush), `exit(N)`, `panic`,
//! `sleep(MS)` and `error` (the step fails with an injected I/O error). An
//! action prefixed `N*` (`rollback.after_file=3*abort`) fires on the Nth pass
//! only, so a crash test can stop a loop after each of its steps. The name
//! `*` stands for every failpoint, its passes counted across all of them:
//! `*=3*abort` dies at the third write point the process passes, whichever it
//! is (`ckpt scenario run --crash-each-write` walks them this way). With no
//! configuration every failpoint is a single relaxed atomic load.

use std::collections::HashMap;
use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static ACTIVE: AtomicBool = AtomicBool::new(false);
static POINTS: OnceLock<HashMap<String, (u64, AtomicU64, Action)>> = OnceLock::new();

#[derive(Debug, Clone)]
enum Action {
    Abort,
    Exit(i32),
    Panic,
    Sleep(u64),
    Error,
}

/// Installs failpoints from a `name=action;…` spec. Returns an error naming the
/// first entry it does not understand. Can be called once per process.
pub fn configure(spec: &str) -> Result<(), String> {
    let mut map = HashMap::new();
    for item in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, action) = item.split_once('=').ok_or_else(|| format!("`{item}`"))?;
        let (nth, action) = match action.split_once('*') {
            Some((n, a)) => (
                n.parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("`{item}`"))?,
                a,
            ),
            None => (0, action),
        };
        let action = match action {
            "abort" => Action::Abort,
            "panic" => Action::Panic,
            "error" => Action::Error,
            a if a.starts_with("exit(") && a.ends_with(')') => {
                Action::Exit(a[5..a.len() - 1].parse().map_err(|_| format!("`{item}`"))?)
            }
            a if a.starts_with("sleep(") && a.ends_with(')') => {
                Action::Sleep(a[6..a.len() - 1].parse().map_err(|_| format!("`{item}`"))?)
            }
            _ => return Err(format!("`{item}`")),
        };
        map.insert(name.to_string(), (nth, AtomicU64::new(0), action));
    }
    let _ = POINTS.set(map);
    ACTIVE.store(true, Ordering::Release);
    Ok(())
}

/// Passes a named failpoint: does nothing unless a test configured it.
pub fn hit(name: &str) -> io::Result<()> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return Ok(());
    }
    let points = POINTS.get();
    if let Some(any) = points.and_then(|m| m.get("*")) {
        fire(name, any)?;
    }
    let Some(point) = points.and_then(|m| m.get(name)) else {
        return Ok(());
    };
    fire(name, point)
}

fn fire(name: &str, (nth, passes, action): &(u64, AtomicU64, Action)) -> io::Result<()> {
    if *nth > 0 && passes.fetch_add(1, Ordering::Relaxed) + 1 != *nth {
        return Ok(());
    }
    match action {
        Action::Abort => std::process::abort(),
        Action::Exit(code) => std::process::exit(*code),
        Action::Panic => panic!("failpoint {name}"),
        Action::Sleep(ms) => {
            std::thread::sleep(std::time::Duration::from_millis(*ms));
            Ok(())
        }
        Action::Error => Err(io::Error::other(format!("injected failure at {name}"))),
    }
}
