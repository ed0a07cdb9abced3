//! A power-loss simulator driven by a system-call trace (RELIABILITY.md T2's
//! `SimFs`, without a `Vfs` layer in `src/`): the real binary runs under
//! `strace`, the trace is replayed into a model of what is durable and what is
//! only in the page cache, and crash states are drawn from that model.
//!
//! # The model
//!
//! * Start: the workspace as it was before the traced call, all of it durable.
//! * Each inode (file, directory, symlink) has durable content and a list of
//!   pending operations in trace order: for files `write` (at its offset; an
//!   `O_APPEND` write at the end), `truncate` (`ftruncate`, `O_TRUNC`) and
//!   `chmod`; for directories entry operations: add (create, `mkdir`,
//!   `link`/`linkat` of an `O_TMPFILE` through `/proc/self/fd`, `symlink`),
//!   remove (`unlink`, `rmdir`), rename (within the directory).
//!   A rename across directories is one atomic operation listed in both.
//! * `fsync(fd)` makes every operation on that inode issued before the call
//!   started durable (for a directory: its entry operations); `fdatasync` the
//!   same but a file's `chmod`s stay pending; `syncfs`/`sync` make everything
//!   durable. An operation still running when the sync started (another
//!   thread's) is not covered. Renames are persistence points but make
//!   nothing durable.
//! * A crash state (one seed): every pending file operation independently
//!   kept (40 %), dropped (30 %), torn (15 %: only a prefix of the write
//!   reaching a 512-byte boundary of the file; none inside one sector means
//!   dropped) or NUL-extended (15 %: the file grows to the write's end, the
//!   new bytes are zeros, bytes it overwrote keep their old value);
//!   `truncate`/`chmod` kept or dropped (50 %). A directory's pending entry
//!   operations survive as a prefix of random length (ext4 commits a
//!   directory's metadata in order; a lost `fsync(dir)` can lose any tail of
//!   them), so a rename leaves either the old or the new name, never neither,
//!   and a cross-directory rename follows the decision of its target
//!   directory on both sides. An inode no surviving entry names is gone.
//! * Not modelled: timestamps, `fallocate`/`copy_file_range` (reported as
//!   unmodelled if they touch the workspace), other processes, a failing
//!   `fsync` (T5's business), reordering across an `fsync` of the same
//!   inode (ops before a completed sync are durable, so cannot be reordered).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

pub type Ino = usize;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink(Vec<u8>),
}

#[derive(Clone, Debug)]
enum FileOp {
    Write { off: u64, data: Vec<u8> },
    Truncate(u64),
    Chmod(u32),
}

#[derive(Clone, Debug)]
enum DirOp {
    Add(Vec<u8>, Ino),
    Remove(Vec<u8>),
    Rename(Vec<u8>, Vec<u8>),
}

#[derive(Clone, Debug)]
struct Pend<T> {
    line: usize,
    /// Cross-directory renames: both halves share a group.
    group: Option<usize>,
    /// Where the other half lives (target dir for the source half).
    dst_side: bool,
    op: T,
}

#[derive(Clone, Debug)]
pub struct Inode {
    pub kind: Kind,
    durable: Vec<u8>,
    durable_mode: u32,
    pub live: Vec<u8>,
    pub live_mode: u32,
    file_ops: Vec<Pend<FileOp>>,
    durable_entries: BTreeMap<Vec<u8>, Ino>,
    pub live_entries: BTreeMap<Vec<u8>, Ino>,
    dir_ops: Vec<Pend<DirOp>>,
}

impl Inode {
    fn new(kind: Kind, data: Vec<u8>, mode: u32, durable: bool) -> Inode {
        Inode {
            kind,
            durable: if durable { data.clone() } else { Vec::new() },
            durable_mode: mode,
            live: data,
            live_mode: mode,
            file_ops: Vec::new(),
            durable_entries: BTreeMap::new(),
            live_entries: BTreeMap::new(),
            dir_ops: Vec::new(),
        }
    }
}

/// One completed system call of the trace.
#[derive(Clone, Debug)]
pub struct Call {
    pub pid: u32,
    /// Line where it started (`<unfinished ...>`) and where it returned.
    pub entry: usize,
    pub line: usize,
    pub name: String,
    pub args: Vec<String>,
    pub ret: String,
}

impl Call {
    pub fn ret_val(&self) -> i64 {
        let t = self.ret.split([' ', '<']).next().unwrap_or("");
        parse_int(t).unwrap_or(-1)
    }
    /// A one-line description with decoded paths, for reports.
    pub fn describe(&self) -> String {
        let args: Vec<String> = self.args.iter().map(|a| show_arg(a)).collect();
        format!("{}({}) = {}", self.name, args.join(", "), self.ret_val())
    }
}

fn show_arg(a: &str) -> String {
    if a.starts_with('"') {
        let s = decode_str(a);
        let t = String::from_utf8_lossy(&s[..s.len().min(60)]).into_owned();
        if s.len() > 60 {
            format!("{t:?}…({} bytes)", s.len())
        } else {
            format!("{t:?}")
        }
    } else if let Some((fd, Some(p))) = fd_arg(a) {
        format!("{fd}<{}>", String::from_utf8_lossy(&p))
    } else {
        a.chars().take(60).collect()
    }
}

pub fn parse_int(s: &str) -> Option<i64> {
    let s = s.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let v = if let Some(h) = s.strip_prefix("0x") {
        i64::from_str_radix(h, 16).ok()?
    } else if s.len() > 1 && s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit()) {
        i64::from_str_radix(&s[1..], 8).ok()?
    } else {
        s.parse().ok()?
    };
    Some(if neg { -v } else { v })
}

/// Decodes a `-xx` string (`"\x41\x42"`); anything else is taken as is.
pub fn decode_str(a: &str) -> Vec<u8> {
    let b = a.as_bytes();
    let mut out = Vec::new();
    let mut i = usize::from(b.first() == Some(&b'"'));
    while i < b.len() {
        match b[i] {
            b'"' => break,
            b'\\' if b.get(i + 1) == Some(&b'x') && i + 3 < b.len() => {
                let h = std::str::from_utf8(&b[i + 2..i + 4]).unwrap_or("00");
                out.push(u8::from_str_radix(h, 16).unwrap_or(0));
                i += 4;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// `12<\x2f…>` (optionally followed by `(deleted)`): the fd and its path.
pub fn fd_arg(a: &str) -> Option<(i64, Option<Vec<u8>>)> {
    let a = a.trim();
    let end = a
        .find(|c: char| c != '-' && !c.is_ascii_digit())
        .unwrap_or(a.len());
    let fd: i64 = a[..end].parse().ok()?;
    let rest = &a[end..];
    let path = rest
        .strip_prefix('<')
        .and_then(|r| r.find('>').map(|e| decode_str(&r[..e])));
    Some((fd, path))
}

/// Splits `a, b, {c, d}, [e]` at its top-level commas.
fn split_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut quoted = false;
    let mut cur = String::new();
    let mut prev = ' ';
    for c in s.chars() {
        if quoted {
            if c == '"' && prev != '\\' {
                quoted = false;
            }
            cur.push(c);
        } else {
            match c {
                '"' => {
                    quoted = true;
                    cur.push(c);
                }
                '(' | '{' | '[' => {
                    depth += 1;
                    cur.push(c);
                }
                ')' | '}' | ']' => {
                    depth -= 1;
                    cur.push(c);
                }
                ',' if depth == 0 => out.push(std::mem::take(&mut cur).trim().to_string()),
                _ => cur.push(c),
            }
        }
        prev = c;
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

fn parse_call(pid: u32, entry: usize, line: usize, s: &str) -> Option<Call> {
    let open = s.find('(')?;
    let name = s[..open].to_string();
    let eq = s.rfind(" = ")?;
    let inner = s[open + 1..eq].trim_end();
    let inner = inner.strip_suffix(')')?;
    Some(Call {
        pid,
        entry,
        line,
        name,
        args: split_args(inner),
        ret: s[eq + 3..].trim().to_string(),
    })
}

/// Parses `strace -f -qq -yy -X raw -xx` output into completed calls, in
/// the order they returned (an `<unfinished ...>` call is joined with its
/// `<... resumed>` line and keeps the line it started on).
pub fn parse_trace(text: &str) -> Vec<Call> {
    let mut open: HashMap<u32, (usize, String)> = HashMap::new();
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let raw = raw.trim_end();
        let Some((pid, rest)) = raw.split_once(' ') else {
            continue;
        };
        let Ok(pid) = pid.trim().parse::<u32>() else {
            continue;
        };
        let rest = rest.trim_start();
        if rest.starts_with("+++") || rest.starts_with("---") {
            continue;
        }
        let (entry, full) = if let Some(r) = rest.strip_prefix("<... ") {
            let Some(pos) = r.find(" resumed>") else {
                continue;
            };
            let Some((e, head)) = open.remove(&pid) else {
                continue;
            };
            (e, format!("{head}{}", &r[pos + " resumed>".len()..]))
        } else if let Some(head) = rest.strip_suffix("<unfinished ...>") {
            open.insert(pid, (i, head.trim_end().to_string()));
            continue;
        } else {
            (i, rest.to_string())
        };
        if let Some(c) = parse_call(pid, entry, i, &full) {
            out.push(c);
        }
    }
    out
}

/// An open file description.
#[derive(Clone, Debug)]
struct Desc {
    ino: Option<Ino>,
    off: u64,
    append: bool,
}

/// A frozen model state: what a crash at this moment is drawn from.
#[derive(Clone, Debug)]
pub struct State {
    pub inodes: Vec<Inode>,
    pub root: Ino,
}

/// One node of a crash state, by workspace-relative path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    File { data: Vec<u8>, mode: u32, ino: Ino },
    Dir { mode: u32 },
    Symlink(Vec<u8>),
}

pub type Tree = BTreeMap<Vec<u8>, Node>;

/// An inode after a crash: its bytes, mode and entries.
type Crashed = (Vec<u8>, u32, BTreeMap<Vec<u8>, Ino>);

/// The replayed trace.
pub struct Model {
    root_path: Vec<Vec<u8>>,
    pub inodes: Vec<Inode>,
    pub root: Ino,
    fds: HashMap<i64, usize>,
    descs: Vec<Desc>,
    next_group: usize,
    /// False: a deliberately broken model where no sync makes anything
    /// durable (the self-check: the checks must then find lost data).
    pub honour_syncs: bool,
    /// What the model could not follow (a test fails on any).
    pub unmodelled: Vec<String>,
    main_pids: HashSet<u32>,
    other_pids: HashSet<u32>,
    /// Ledger bytes acknowledged so far: the content of the inode named
    /// `.agent-runtime/ledger.jsonl` when its last `fsync`/`fdatasync`
    /// returned (or at the start).
    pub ledger_acked: Vec<u8>,
}

fn comps(p: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for c in p.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                out.pop();
            }
            c => out.push(c.to_vec()),
        }
    }
    out
}

const O_ACCMODE: i64 = 3;
const O_CREAT: i64 = 0o100;
const O_TRUNC: i64 = 0o1000;
const O_APPEND: i64 = 0o2000;
const O_TMPFILE: i64 = 0o20000000;
const CLONE_THREAD: i64 = 0x10000;

impl Model {
    /// The model of `root` as it is on disk now, all of it durable.
    pub fn from_dir(root: &Path) -> Model {
        use std::os::unix::ffi::OsStrExt;
        let mut m = Model {
            root_path: comps(root.as_os_str().as_bytes()),
            inodes: Vec::new(),
            root: 0,
            fds: HashMap::new(),
            descs: Vec::new(),
            next_group: 0,
            honour_syncs: true,
            unmodelled: Vec::new(),
            main_pids: HashSet::new(),
            other_pids: HashSet::new(),
            ledger_acked: Vec::new(),
        };
        m.root = m.load(root);
        if let Some(l) = m.lookup(&[b".agent-runtime".to_vec(), b"ledger.jsonl".to_vec()]) {
            m.ledger_acked = m.inodes[l].live.clone();
        }
        m
    }

    fn load(&mut self, p: &Path) -> Ino {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::PermissionsExt;
        let md = std::fs::symlink_metadata(p).unwrap();
        let mode = md.permissions().mode() & 0o7777;
        if md.file_type().is_symlink() {
            let t = std::fs::read_link(p).unwrap();
            self.push(Inode::new(
                Kind::Symlink(t.as_os_str().as_bytes().to_vec()),
                Vec::new(),
                mode,
                true,
            ))
        } else if md.is_dir() {
            let ino = self.push(Inode::new(Kind::Dir, Vec::new(), mode, true));
            let mut names: Vec<_> = std::fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            for n in names {
                let child = self.load(&p.join(&n));
                let n = n.as_bytes().to_vec();
                self.inodes[ino].live_entries.insert(n.clone(), child);
                self.inodes[ino].durable_entries.insert(n, child);
            }
            ino
        } else {
            self.push(Inode::new(
                Kind::File,
                std::fs::read(p).unwrap(),
                mode,
                true,
            ))
        }
    }

    fn push(&mut self, i: Inode) -> Ino {
        self.inodes.push(i);
        self.inodes.len() - 1
    }

    pub fn state(&self) -> State {
        State {
            inodes: self.inodes.clone(),
            root: self.root,
        }
    }

    /// Workspace-relative components of an absolute path (`None`: outside).
    fn rel(&self, abs: &[u8]) -> Option<Vec<Vec<u8>>> {
        let c = comps(abs);
        if c.len() < self.root_path.len() || c[..self.root_path.len()] != self.root_path[..] {
            return None;
        }
        Some(c[self.root_path.len()..].to_vec())
    }

    fn lookup(&self, rel: &[Vec<u8>]) -> Option<Ino> {
        let mut cur = self.root;
        for c in rel {
            cur = *self.inodes[cur].live_entries.get(c)?;
        }
        Some(cur)
    }

    /// The parent directory and the last name of `rel` (`None`: the root or
    /// a missing parent).
    fn parent(&self, rel: &[Vec<u8>]) -> Option<(Ino, Vec<u8>)> {
        let (last, dir) = rel.split_last()?;
        let d = self.lookup(dir)?;
        (self.inodes[d].kind == Kind::Dir).then(|| (d, last.clone()))
    }

    /// The live path of `ino` (first name found), for the ledger check.
    fn live_rel_of(&self, ino: Ino) -> Option<Vec<Vec<u8>>> {
        fn walk(m: &Model, d: Ino, want: Ino, path: &mut Vec<Vec<u8>>) -> bool {
            for (n, &c) in &m.inodes[d].live_entries {
                path.push(n.clone());
                if c == want {
                    return true;
                }
                if m.inodes[c].kind == Kind::Dir && walk(m, c, want, path) {
                    return true;
                }
                path.pop();
            }
            false
        }
        let mut p = Vec::new();
        walk(self, self.root, ino, &mut p).then_some(p)
    }

    fn at_path(&self, dirfd: &str, name: &str) -> Option<Vec<u8>> {
        let n = decode_str(name);
        if n.first() == Some(&b'/') {
            return Some(n);
        }
        let (_, dir) = fd_arg(dirfd)?;
        let mut d = dir?;
        d.push(b'/');
        d.extend_from_slice(&n);
        Some(d)
    }

    fn fd_ino(&self, a: &str) -> Option<Ino> {
        let (fd, path) = fd_arg(a)?;
        if let Some(&d) = self.fds.get(&fd) {
            return self.descs[d].ino;
        }
        // Not opened in the trace: by its path.
        let r = self.rel(&path?)?;
        self.lookup(&r)
    }

    fn note(&mut self, c: &Call, why: &str) {
        self.unmodelled
            .push(format!("line {}: {why}: {}", c.line + 1, c.describe()));
    }

    fn push_file_op(&mut self, ino: Ino, line: usize, op: FileOp) {
        let i = &mut self.inodes[ino];
        apply_file_op(&mut i.live, &mut i.live_mode, &op);
        i.file_ops.push(Pend {
            line,
            group: None,
            dst_side: false,
            op,
        });
    }

    fn push_dir_op(&mut self, dir: Ino, line: usize, op: DirOp, group: Option<usize>, dst: bool) {
        let i = &mut self.inodes[dir];
        apply_dir_op(&mut i.live_entries, &op);
        i.dir_ops.push(Pend {
            line,
            group,
            dst_side: dst,
            op,
        });
    }

    /// Is `c` a persistence point (fsync family or rename) touching the
    /// workspace?
    pub fn is_point(&self, c: &Call) -> bool {
        if c.ret_val() < 0 || self.other_pids.contains(&c.pid) {
            return false;
        }
        match c.name.as_str() {
            "fsync" | "fdatasync" | "syncfs" => {
                c.args.first().and_then(|a| self.fd_ino(a)).is_some()
            }
            "sync" => true,
            "rename" => self.arg_rel(&c.args[0]).is_some(),
            "renameat" | "renameat2" => self
                .at_path(&c.args[0], &c.args[1])
                .and_then(|p| self.rel(&p))
                .is_some(),
            _ => false,
        }
    }

    fn arg_rel(&self, a: &str) -> Option<Vec<Vec<u8>>> {
        let p = decode_str(a);
        let abs = if p.first() == Some(&b'/') {
            p
        } else {
            let mut r = b"/".to_vec();
            r.extend(self.root_path.join(&b'/'));
            r.push(b'/');
            r.extend(p);
            r
        };
        self.rel(&abs)
    }

    fn make_durable_file(&mut self, ino: Ino, before: usize, with_mode: bool) {
        let i = &mut self.inodes[ino];
        let mut keep = Vec::new();
        for p in std::mem::take(&mut i.file_ops) {
            let is_mode = matches!(p.op, FileOp::Chmod(_));
            if p.line < before && (with_mode || !is_mode) {
                apply_file_op(&mut i.durable, &mut i.durable_mode, &p.op);
            } else {
                keep.push(p);
            }
        }
        i.file_ops = keep;
    }

    fn make_durable_dir(&mut self, ino: Ino, before: usize) {
        let mut groups = Vec::new();
        {
            let i = &mut self.inodes[ino];
            let mut keep = Vec::new();
            for p in std::mem::take(&mut i.dir_ops) {
                if p.line < before {
                    apply_dir_op(&mut i.durable_entries, &p.op);
                    if let Some(g) = p.group {
                        groups.push(g);
                    }
                } else {
                    keep.push(p);
                }
            }
            i.dir_ops = keep;
        }
        // The other half of a cross-directory rename is in the same
        // journal transaction.
        for g in groups {
            for d in 0..self.inodes.len() {
                let i = &mut self.inodes[d];
                if let Some(pos) = i.dir_ops.iter().position(|p| p.group == Some(g)) {
                    let p = i.dir_ops.remove(pos);
                    apply_dir_op(&mut i.durable_entries, &p.op);
                }
            }
        }
        // A directory's own mode travels with its fsync.
        let i = &mut self.inodes[ino];
        let mut keep = Vec::new();
        for p in std::mem::take(&mut i.file_ops) {
            if p.line < before {
                apply_file_op(&mut i.durable, &mut i.durable_mode, &p.op);
            } else {
                keep.push(p);
            }
        }
        i.file_ops = keep;
    }

    fn sync_ino(&mut self, ino: Ino, before: usize, data_only: bool) {
        if self.inodes[ino].kind == Kind::Dir {
            self.make_durable_dir(ino, before);
        } else {
            self.make_durable_file(ino, before, !data_only);
        }
    }

    fn new_desc(&mut self, fd: i64, ino: Option<Ino>, append: bool) {
        self.descs.push(Desc {
            ino,
            off: 0,
            append,
        });
        self.fds.insert(fd, self.descs.len() - 1);
    }

    fn create_at(&mut self, c: &Call, rel: &[Vec<u8>], kind: Kind, mode: u32) -> Option<Ino> {
        let Some((dir, name)) = self.parent(rel) else {
            self.note(c, "creates in a directory the model does not have");
            return None;
        };
        // Its mode is the inode's own, created with the entry.
        let ino = self.push(Inode::new(kind, Vec::new(), mode & !0o022, false));
        self.push_dir_op(dir, c.line, DirOp::Add(name, ino), None, false);
        Some(ino)
    }

    fn ledger_ino(&self) -> Option<Ino> {
        self.lookup(&[b".agent-runtime".to_vec(), b"ledger.jsonl".to_vec()])
    }

    /// Replays one call.
    pub fn apply(&mut self, c: &Call) {
        if self.main_pids.is_empty() {
            self.main_pids.insert(c.pid);
        }
        if self.other_pids.contains(&c.pid) {
            // Another process (a child): only noted if it touches the workspace.
            if c.args.iter().any(|a| {
                fd_arg(a)
                    .and_then(|(_, p)| p)
                    .or_else(|| a.starts_with('"').then(|| decode_str(a)))
                    .is_some_and(|p| self.rel(&p).is_some())
            }) && !matches!(c.name.as_str(), "read" | "close" | "execve" | "lseek")
            {
                self.note(c, "a child process touches the workspace");
            }
            return;
        }
        let r = c.ret_val();
        if c.name == "clone" || c.name == "clone3" || c.name == "fork" || c.name == "vfork" {
            let flags = c
                .args
                .iter()
                .find_map(|a| {
                    a.split(['|', ' ', '{', '}', ','])
                        .find_map(|t| t.strip_prefix("flags=").and_then(parse_int))
                })
                .unwrap_or(0);
            if r > 0 {
                if flags & CLONE_THREAD != 0 {
                    self.main_pids.insert(r as u32);
                } else {
                    self.other_pids.insert(r as u32);
                }
            }
            return;
        }
        if r < 0 {
            return;
        }
        let a = &c.args;
        match c.name.as_str() {
            "open" | "openat" | "openat2" | "creat" => {
                let (path, flags, mode) = match c.name.as_str() {
                    "open" => (
                        self.abs_of(&a[0]),
                        parse_int(&a[1]).unwrap_or(0),
                        a.get(2).and_then(|m| parse_int(m)).unwrap_or(0),
                    ),
                    "creat" => (
                        self.abs_of(&a[0]),
                        O_CREAT | O_TRUNC | 1,
                        parse_int(&a[1]).unwrap_or(0),
                    ),
                    "openat" => (
                        self.at_path(&a[0], &a[1]),
                        parse_int(&a[2]).unwrap_or(0),
                        a.get(3).and_then(|m| parse_int(m)).unwrap_or(0),
                    ),
                    _ => {
                        let field = |k: &str| {
                            a[2].trim_matches(|c| c == '{' || c == '}')
                                .split(", ")
                                .find_map(|kv| kv.strip_prefix(k).and_then(parse_int))
                        };
                        (
                            self.at_path(&a[0], &a[1]),
                            field("flags=").unwrap_or(0),
                            field("mode=").unwrap_or(0),
                        )
                    }
                };
                let rel = path.as_deref().and_then(|p| self.rel(p));
                let Some(rel) = rel else {
                    self.new_desc(r, None, false);
                    return;
                };
                let mode = (mode & 0o7777) as u32;
                let ino = if flags & O_TMPFILE == O_TMPFILE {
                    Some(self.push(Inode::new(Kind::File, Vec::new(), mode & !0o022, false)))
                } else if let Some(ino) = self.lookup(&rel) {
                    if flags & O_TRUNC != 0 && flags & O_ACCMODE != 0 {
                        self.push_file_op(ino, c.line, FileOp::Truncate(0));
                    }
                    Some(ino)
                } else if flags & O_CREAT != 0 {
                    self.create_at(c, &rel, Kind::File, mode)
                } else {
                    self.note(c, "opens a file the model does not have");
                    None
                };
                self.new_desc(r, ino, flags & O_APPEND != 0);
            }
            "close" => {
                if let Some((fd, _)) = fd_arg(&a[0]) {
                    self.fds.remove(&fd);
                }
            }
            "dup" | "dup2" | "dup3" | "fcntl" => {
                if c.name == "fcntl" {
                    let cmd = a.get(1).and_then(|x| parse_int(x)).unwrap_or(-1);
                    if cmd != 0 && cmd != 0x406 {
                        return;
                    }
                }
                if let Some((fd, path)) = fd_arg(&a[0]) {
                    let d = match self.fds.get(&fd) {
                        Some(&d) => d,
                        None => {
                            let ino = path
                                .and_then(|p| self.rel(&p))
                                .and_then(|r| self.lookup(&r));
                            self.new_desc(fd, ino, false);
                            self.fds[&fd]
                        }
                    };
                    self.fds.insert(r, d);
                }
            }
            "write" | "writev" | "pwrite64" | "pwritev" | "pwritev2" => {
                let Some((fd, _)) = fd_arg(&a[0]) else { return };
                let Some(ino) = self.fd_ino(&a[0]) else {
                    return;
                };
                let mut data = if c.name == "write" || c.name == "pwrite64" {
                    decode_str(&a[1])
                } else {
                    let mut v = Vec::new();
                    for part in a[1].split("iov_base=").skip(1) {
                        v.extend(decode_str(part));
                    }
                    v
                };
                data.truncate(r as usize);
                let positional = c.name.starts_with('p');
                let d = match self.fds.get(&fd) {
                    Some(&d) => d,
                    None => {
                        self.new_desc(fd, Some(ino), false);
                        self.fds[&fd]
                    }
                };
                let off = if positional {
                    parse_int(&a[3]).unwrap_or(0) as u64
                } else if self.descs[d].append {
                    self.inodes[ino].live.len() as u64
                } else {
                    self.descs[d].off
                };
                if !positional {
                    self.descs[d].off = off + data.len() as u64;
                }
                self.push_file_op(ino, c.line, FileOp::Write { off, data });
            }
            "read" | "readv" => {
                if let Some((fd, _)) = fd_arg(&a[0])
                    && let Some(&d) = self.fds.get(&fd)
                {
                    self.descs[d].off += r as u64;
                }
            }
            "lseek" => {
                if let Some((fd, _)) = fd_arg(&a[0])
                    && let Some(&d) = self.fds.get(&fd)
                {
                    self.descs[d].off = r as u64;
                }
            }
            "ftruncate" => {
                if let Some(ino) = self.fd_ino(&a[0]) {
                    let len = parse_int(&a[1]).unwrap_or(0) as u64;
                    self.push_file_op(ino, c.line, FileOp::Truncate(len));
                }
            }
            "truncate" => {
                if let Some(ino) = self.arg_rel(&a[0]).and_then(|r| self.lookup(&r)) {
                    let len = parse_int(&a[1]).unwrap_or(0) as u64;
                    self.push_file_op(ino, c.line, FileOp::Truncate(len));
                }
            }
            "fchmod" => {
                if let Some(ino) = self.fd_ino(&a[0]) {
                    let m = parse_int(&a[1]).unwrap_or(0) as u32 & 0o7777;
                    self.push_file_op(ino, c.line, FileOp::Chmod(m));
                }
            }
            "fchmodat" | "chmod" => {
                let (rel, m) = if c.name == "chmod" {
                    (self.arg_rel(&a[0]), &a[1])
                } else {
                    (self.at_path(&a[0], &a[1]).and_then(|p| self.rel(&p)), &a[2])
                };
                if let Some(ino) = rel.and_then(|r| self.lookup(&r)) {
                    let m = parse_int(m).unwrap_or(0) as u32 & 0o7777;
                    self.push_file_op(ino, c.line, FileOp::Chmod(m));
                }
            }
            "mkdir" | "mkdirat" => {
                let (rel, m) = if c.name == "mkdir" {
                    (self.arg_rel(&a[0]), &a[1])
                } else {
                    (self.at_path(&a[0], &a[1]).and_then(|p| self.rel(&p)), &a[2])
                };
                if let Some(rel) = rel {
                    let m = parse_int(m).unwrap_or(0o777) as u32;
                    self.create_at(c, &rel, Kind::Dir, m);
                }
            }
            "symlink" | "symlinkat" => {
                let target = decode_str(&a[0]);
                let rel = if c.name == "symlink" {
                    self.arg_rel(&a[1])
                } else {
                    self.at_path(&a[1], &a[2]).and_then(|p| self.rel(&p))
                };
                if let Some(rel) = rel {
                    self.create_at(c, &rel, Kind::Symlink(target), 0o777);
                }
            }
            "unlink" | "unlinkat" | "rmdir" => {
                let rel = if c.name == "unlinkat" {
                    self.at_path(&a[0], &a[1]).and_then(|p| self.rel(&p))
                } else {
                    self.arg_rel(&a[0])
                };
                if let Some(rel) = rel {
                    match self.parent(&rel) {
                        Some((dir, name)) => {
                            self.push_dir_op(dir, c.line, DirOp::Remove(name), None, false)
                        }
                        None => self.note(c, "removes from a directory the model does not have"),
                    }
                }
            }
            "link" | "linkat" => {
                let (src, dst) = if c.name == "link" {
                    (self.abs_of(&a[0]), self.abs_of(&a[1]))
                } else {
                    (self.at_path(&a[0], &a[1]), self.at_path(&a[2], &a[3]))
                };
                let Some(dst) = dst.and_then(|p| self.rel(&p)) else {
                    return;
                };
                let src = src.unwrap_or_default();
                // `/proc/self/fd/N` (an O_TMPFILE being named), or a path.
                let ino = if let Some(n) = src
                    .strip_prefix(b"/proc/self/fd/")
                    .and_then(|n| std::str::from_utf8(n).ok()?.parse::<i64>().ok())
                {
                    self.fds.get(&n).and_then(|&d| self.descs[d].ino)
                } else if decode_str(&a[1]).is_empty() {
                    self.fd_ino(&a[0])
                } else {
                    self.rel(&src).and_then(|r| self.lookup(&r))
                };
                match (ino, self.parent(&dst)) {
                    (Some(ino), Some((dir, name))) => {
                        self.push_dir_op(dir, c.line, DirOp::Add(name, ino), None, false)
                    }
                    _ => self.note(c, "links something the model does not have"),
                }
            }
            "rename" | "renameat" | "renameat2" => {
                let (src, dst) = if c.name == "rename" {
                    (self.arg_rel(&a[0]), self.arg_rel(&a[1]))
                } else {
                    (
                        self.at_path(&a[0], &a[1]).and_then(|p| self.rel(&p)),
                        self.at_path(&a[2], &a[3]).and_then(|p| self.rel(&p)),
                    )
                };
                if c.name == "renameat2" && parse_int(&a[4]).unwrap_or(0) & 2 != 0 {
                    self.note(c, "RENAME_EXCHANGE is not modelled");
                    return;
                }
                let (Some(src), Some(dst)) = (src, dst) else {
                    if let Some(p) = self
                        .at_path(&a[0], &a[1])
                        .or_else(|| Some(decode_str(&a[0])))
                        && self.rel(&p).is_some()
                    {
                        self.note(c, "renames across the workspace's edge");
                    }
                    return;
                };
                let (Some((sd, sn)), Some((dd, dn))) = (self.parent(&src), self.parent(&dst))
                else {
                    self.note(c, "renames in a directory the model does not have");
                    return;
                };
                if sd == dd {
                    self.push_dir_op(sd, c.line, DirOp::Rename(sn, dn), None, false);
                } else {
                    let Some(ino) = self.lookup(&src) else { return };
                    let g = self.next_group;
                    self.next_group += 1;
                    self.push_dir_op(sd, c.line, DirOp::Remove(sn), Some(g), false);
                    self.push_dir_op(dd, c.line, DirOp::Add(dn, ino), Some(g), true);
                }
            }
            "fsync" | "fdatasync" => {
                let ledger = self.ledger_ino();
                if let Some(ino) = self.fd_ino(&a[0]) {
                    if self.honour_syncs {
                        self.sync_ino(ino, c.entry, c.name == "fdatasync");
                    }
                    if Some(ino) == ledger {
                        self.ledger_acked = self.inodes[ino].live.clone();
                    }
                }
            }
            "syncfs" | "sync" => {
                if self.honour_syncs {
                    for ino in 0..self.inodes.len() {
                        self.sync_ino(ino, c.entry, false);
                    }
                }
                if let Some(l) = self.ledger_ino() {
                    self.ledger_acked = self.inodes[l].live.clone();
                }
            }
            "fallocate" | "copy_file_range" | "sendfile" | "mknod" | "mknodat"
                if a.iter().any(|x| {
                    fd_arg(x)
                        .and_then(|(_, p)| p)
                        .is_some_and(|p| self.rel(&p).is_some())
                }) =>
            {
                self.note(c, "not modelled");
            }
            _ => {}
        }
    }

    fn abs_of(&self, a: &str) -> Option<Vec<u8>> {
        let p = decode_str(a);
        if p.first() == Some(&b'/') {
            return Some(p);
        }
        let mut r = Vec::new();
        for c in &self.root_path {
            r.push(b'/');
            r.extend_from_slice(c);
        }
        r.push(b'/');
        r.extend(p);
        Some(r)
    }

    /// The tree as it is now (every operation applied), for comparison with
    /// the real directory after the run.
    pub fn live_tree(&self) -> Tree {
        let mut out = Tree::new();
        live_walk(&self.inodes, self.root, &mut Vec::new(), &mut out);
        out
    }

    /// The workspace-relative path of `ino` now, if it has one.
    pub fn path_of(&self, ino: Ino) -> Option<Vec<u8>> {
        self.live_rel_of(ino).map(|c| c.join(&b'/'))
    }
}

fn live_walk(inodes: &[Inode], d: Ino, path: &mut Vec<u8>, out: &mut Tree) {
    for (n, &c) in &inodes[d].live_entries {
        let len = path.len();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(n);
        let i = &inodes[c];
        match &i.kind {
            Kind::File => {
                out.insert(
                    path.clone(),
                    Node::File {
                        data: i.live.clone(),
                        mode: i.live_mode,
                        ino: c,
                    },
                );
            }
            Kind::Symlink(t) => {
                out.insert(path.clone(), Node::Symlink(t.clone()));
            }
            Kind::Dir => {
                out.insert(path.clone(), Node::Dir { mode: i.live_mode });
                live_walk(inodes, c, path, out);
            }
        }
        path.truncate(len);
    }
}

fn apply_file_op(data: &mut Vec<u8>, mode: &mut u32, op: &FileOp) {
    match op {
        FileOp::Write { off, data: d } => {
            let off = *off as usize;
            if data.len() < off + d.len() {
                data.resize(off + d.len(), 0);
            }
            data[off..off + d.len()].copy_from_slice(d);
        }
        FileOp::Truncate(n) => data.resize(*n as usize, 0),
        FileOp::Chmod(m) => *mode = *m,
    }
}

fn apply_dir_op(e: &mut BTreeMap<Vec<u8>, Ino>, op: &DirOp) {
    match op {
        DirOp::Add(n, i) => {
            e.insert(n.clone(), *i);
        }
        DirOp::Remove(n) => {
            e.remove(n);
        }
        DirOp::Rename(a, b) => {
            if let Some(i) = e.remove(a) {
                e.insert(b.clone(), i);
            }
        }
    }
}

/// xorshift64*, seeded through splitmix64 (any seed is fine).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }
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

/// What a crash did to the pending operations (for reports).
#[derive(Default, Debug, Clone)]
pub struct Damage {
    pub kept: usize,
    pub dropped: usize,
    pub torn: usize,
    pub nul: usize,
    pub dir_ops_lost: usize,
    pub lines: Vec<String>,
}

impl Damage {
    /// Whether anything pending was lost or damaged.
    pub fn lost_any(&self) -> bool {
        self.dropped + self.torn + self.nul + self.dir_ops_lost > 0
    }
}

impl State {
    /// The pending operations (files, directories) of this state.
    pub fn pending(&self) -> (usize, usize) {
        let f = self.inodes.iter().map(|i| i.file_ops.len()).sum();
        let d = self.inodes.iter().map(|i| i.dir_ops.len()).sum();
        (f, d)
    }

    /// Draws one crash state.
    pub fn crash(&self, seed: u64) -> (Tree, Damage) {
        let mut rng = Rng::new(seed);
        let mut dmg = Damage::default();
        let mut inodes: Vec<Crashed> = Vec::new();
        // Directories first: the surviving prefix of each one's operations.
        let mut cut: Vec<usize> = vec![0; self.inodes.len()];
        let mut group_kept: HashMap<usize, bool> = HashMap::new();
        for (ino, i) in self.inodes.iter().enumerate() {
            let n = i.dir_ops.len();
            cut[ino] = if n == 0 {
                0
            } else {
                rng.below(n as u64 + 1) as usize
            };
            for (k, p) in i.dir_ops.iter().enumerate() {
                if let Some(g) = p.group
                    && p.dst_side
                {
                    group_kept.insert(g, k < cut[ino]);
                }
            }
        }
        for (ino, i) in self.inodes.iter().enumerate() {
            let mut data = i.durable.clone();
            let mut mode = i.durable_mode;
            for p in &i.file_ops {
                match &p.op {
                    FileOp::Write { off, data: d } => {
                        let what = rng.below(100);
                        if what < 40 {
                            dmg.kept += 1;
                            apply_file_op(&mut data, &mut mode, &p.op);
                        } else if what < 70 {
                            dmg.dropped += 1;
                            dmg.lines
                                .push(format!("ino {ino}: write @{off}+{} dropped", d.len()));
                        } else if what < 85 {
                            let end = off + d.len() as u64;
                            let first = (off / 512 + 1) * 512;
                            let bounds: Vec<u64> = (0..)
                                .map(|k| first + 512 * k)
                                .take_while(|b| *b < end)
                                .collect();
                            if bounds.is_empty() {
                                dmg.dropped += 1;
                                dmg.lines.push(format!(
                                    "ino {ino}: write @{off}+{} torn (within a sector: dropped)",
                                    d.len()
                                ));
                            } else {
                                let b = bounds[rng.below(bounds.len() as u64) as usize];
                                dmg.torn += 1;
                                dmg.lines.push(format!(
                                    "ino {ino}: write @{off}+{} torn at {b}",
                                    d.len()
                                ));
                                let part = FileOp::Write {
                                    off: *off,
                                    data: d[..(b - off) as usize].to_vec(),
                                };
                                apply_file_op(&mut data, &mut mode, &part);
                            }
                        } else {
                            dmg.nul += 1;
                            dmg.lines
                                .push(format!("ino {ino}: write @{off}+{} NUL-extended", d.len()));
                            let end = (*off as usize) + d.len();
                            if data.len() < end {
                                data.resize(end, 0);
                            }
                        }
                    }
                    op => {
                        if rng.below(2) == 0 {
                            dmg.kept += 1;
                            apply_file_op(&mut data, &mut mode, op);
                        } else {
                            dmg.dropped += 1;
                            dmg.lines.push(format!("ino {ino}: {op:?} dropped"));
                        }
                    }
                }
            }
            let mut entries = i.durable_entries.clone();
            for (k, p) in i.dir_ops.iter().enumerate() {
                let keep = match p.group {
                    Some(g) => group_kept.get(&g).copied().unwrap_or(false),
                    None => k < cut[ino],
                };
                if keep {
                    apply_dir_op(&mut entries, &p.op);
                } else {
                    dmg.dir_ops_lost += 1;
                    dmg.lines
                        .push(format!("dir ino {ino}: {:?} lost", show_dir_op(&p.op)));
                }
            }
            inodes.push((data, mode, entries));
        }
        let mut out = Tree::new();
        let mut seen = HashSet::new();
        crash_walk(
            self,
            &inodes,
            self.root,
            &mut Vec::new(),
            &mut out,
            &mut seen,
        );
        (out, dmg)
    }
}

fn show_dir_op(op: &DirOp) -> String {
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match op {
        DirOp::Add(n, i) => format!("add {} (ino {i})", s(n)),
        DirOp::Remove(n) => format!("remove {}", s(n)),
        DirOp::Rename(a, b) => format!("rename {} -> {}", s(a), s(b)),
    }
}

fn crash_walk(
    st: &State,
    inodes: &[Crashed],
    d: Ino,
    path: &mut Vec<u8>,
    out: &mut Tree,
    seen: &mut HashSet<Ino>,
) {
    if !seen.insert(d) {
        return;
    }
    for (n, &c) in &inodes[d].2 {
        let len = path.len();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(n);
        match &st.inodes[c].kind {
            Kind::File => {
                out.insert(
                    path.clone(),
                    Node::File {
                        data: inodes[c].0.clone(),
                        mode: inodes[c].1,
                        ino: c,
                    },
                );
            }
            Kind::Symlink(t) => {
                out.insert(path.clone(), Node::Symlink(t.clone()));
            }
            Kind::Dir => {
                out.insert(path.clone(), Node::Dir { mode: inodes[c].1 });
                crash_walk(st, inodes, c, path, out, seen);
            }
        }
        path.truncate(len);
    }
}

/// Writes `tree` under `root` (which exists and is empty).
pub fn materialise(tree: &Tree, root: &Path) {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let p = |rel: &[u8]| root.join(std::ffi::OsStr::from_bytes(rel));
    let mut dirs = Vec::new();
    for (rel, n) in tree {
        match n {
            Node::Dir { mode } => {
                std::fs::create_dir(p(rel)).unwrap();
                dirs.push((p(rel), *mode));
            }
            Node::File { data, mode, .. } => {
                std::fs::write(p(rel), data).unwrap();
                std::fs::set_permissions(p(rel), std::fs::Permissions::from_mode(*mode)).unwrap();
            }
            Node::Symlink(t) => {
                std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(t), p(rel)).unwrap()
            }
        }
    }
    for (d, m) in dirs.into_iter().rev() {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(m)).unwrap();
    }
}

/// The real tree under `root` in [`Tree`] form (inode numbers zero).
pub fn read_tree(root: &Path) -> Tree {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Tree::new();
    for (rel, e) in super::tree(root, &[]) {
        let k = rel.as_os_str().as_bytes().to_vec();
        let n = match e {
            super::Entry::File(m, d) => Node::File {
                data: d,
                mode: m,
                ino: 0,
            },
            super::Entry::Dir(m) => Node::Dir { mode: m },
            super::Entry::Link(t) => Node::Symlink(t.as_os_str().as_bytes().to_vec()),
        };
        out.insert(k, n);
    }
    out
}
