//! Which process a call belongs to, and whether it is still alive: so a call
//! whose agent is gone (killed, crashed) can be closed from what is on disk,
//! while a call whose agent still works is left alone (`ckpt recover` is safe
//! to run beside a working agent).
//!
//! A process is named by its pid, its start time (so a reused pid is not
//! taken for the same process) and the PID namespace the pid is valid in
//! (a `ckpt` run from another namespace, e.g. the host of a container,
//! cannot tell: "unknown", never "gone"). Linux reads `/proc`; elsewhere
//! nothing is known (`None`), and calls are closed only by their agent's
//! end-of-turn events.

use serde::{Deserialize, Serialize};

/// A process: pid and start time (clock ticks after boot, `/proc/<pid>/stat`
/// field 22).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcId {
    /// The pid.
    pub pid: u32,
    /// When it started.
    pub start: u64,
    /// The PID namespace the pid belongs to (the inode of
    /// `/proc/self/ns/pid` where it was found).
    #[serde(default)]
    pub ns: Option<u64>,
}

/// This process's PID namespace.
fn pid_namespace() -> Option<u64> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let s = link.to_str()?;
    s.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// Programs a hook runs under that are not the agent itself: shells that
/// agents start hooks with, and wrappers.
const NOT_THE_AGENT: &[&str] = &[
    "sh", "bash", "dash", "zsh", "fish", "ash", "ksh", "busybox", "env", "timeout", "nice",
    "nohup", "ckpt", "npx", "npm",
];

/// What `/proc/<pid>/stat` says: (command name, state, parent pid, start
/// time).
fn stat(pid: u32) -> Option<(String, char, u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state), so field n is rest[n - 3].
    let state = rest.first()?.chars().next()?;
    let ppid = rest.get(1)?.parse().ok()?;
    let start = rest.get(19)?.parse().ok()?;
    Some((comm, state, ppid, start))
}

/// The identity of process `pid`, if it runs now.
pub fn id_of(pid: u32) -> Option<ProcId> {
    let (_, state, _, start) = stat(pid)?;
    (state != 'Z' && state != 'X').then_some(ProcId {
        pid,
        start,
        ns: pid_namespace(),
    })
}

/// The agent a hook process runs for: the nearest ancestor of this process
/// that is not a shell or wrapper (see [`NOT_THE_AGENT`]), at most 8 levels
/// up. `None` when it cannot be told.
pub fn agent_of_this_hook() -> Option<ProcId> {
    let mut pid = std::process::id();
    for _ in 0..8 {
        let (_, _, ppid, _) = stat(pid)?;
        if ppid <= 1 {
            return None;
        }
        let (comm, state, _, start) = stat(ppid)?;
        if !NOT_THE_AGENT.contains(&comm.as_str()) {
            return (state != 'Z').then_some(ProcId {
                pid: ppid,
                start,
                ns: pid_namespace(),
            });
        }
        pid = ppid;
    }
    None
}

/// This process.
pub fn this_process() -> Option<ProcId> {
    id_of(std::process::id())
}

/// Whether `p` still runs: `Some(false)` when it is gone (or its pid now
/// names another process), `None` when this process cannot tell.
pub fn alive(p: &ProcId) -> Option<bool> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let here = pid_namespace();
    if p.ns.is_some() && p.ns == here {
        return Some(id_of(p.pid).is_some_and(|now| now.start == p.start));
    }
    // Recorded in another PID namespace (a container's, say): only from the
    // root namespace, which sees every process, can its absence be told.
    if p.ns.is_none() || !in_root_namespace() {
        return None;
    }
    Some(in_other_namespace(p))
}

/// The inode of the initial PID namespace (Linux's `PROC_PID_INIT_INO`,
/// fixed since 3.8).
const INIT_PID_NS: u64 = 0xEFFF_FFFC;

/// Whether this process is in the root PID namespace: its namespace is the
/// initial one, and its `NSpid` names one pid only. (`NSpid` alone counts
/// levels from the namespace that mounted `/proc`: one field in any
/// container with its own `/proc`, which sees only its own processes.)
fn in_root_namespace() -> bool {
    pid_namespace() == Some(INIT_PID_NS) && nspid("self").is_some_and(|v| v.len() == 1)
}

/// The pids of process `who` (`self` or a pid), outermost namespace first.
fn nspid(who: &str) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{who}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line["NSpid:".len()..]
        .split_whitespace()
        .map(|f| f.parse().ok())
        .collect()
}

/// From the root namespace: whether a process of `p`'s namespace with `p`'s
/// pid there and `p`'s start time runs (a bounded look through `/proc`).
fn in_other_namespace(p: &ProcId) -> bool {
    let Some(want) = p.ns.map(|n| format!("pid:[{n}]")) else {
        return false;
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    for e in dir.flatten().take(1 << 20) {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let ns = std::fs::read_link(format!("/proc/{pid}/ns/pid"));
        if ns.ok().and_then(|l| l.to_str().map(|s| s == want)) != Some(true) {
            continue;
        }
        let inner = nspid(pid).and_then(|v| v.last().copied());
        if inner == Some(p.pid) {
            let start = pid
                .parse()
                .ok()
                .and_then(stat)
                .map(|(_, st, _, start)| (st, start));
            return start.is_some_and(|(st, start)| st != 'Z' && start == p.start);
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_dead_child_is_not() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let me = this_process().expect("this process");
        assert_eq!(alive(&me), Some(true));
        let other = ProcId {
            start: me.start + 1,
            ..me
        };
        assert_eq!(
            alive(&other),
            Some(false),
            "a reused pid is another process"
        );
        let elsewhere = ProcId {
            ns: me.ns.map(|n| n + 1),
            pid: 999_999,
            ..me
        };
        // Another namespace's pid: gone when the root namespace sees no
        // such process, else unknown.
        let want = if in_root_namespace() {
            Some(false)
        } else {
            None
        };
        assert_eq!(alive(&elsewhere), want);
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        child.wait().expect("wait");
        assert!(id_of(pid).is_none(), "a reaped child is gone");
    }
}
