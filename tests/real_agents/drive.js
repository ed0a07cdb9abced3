#!/usr/bin/env node
// One client run against its scripted mock, inside the caller's network
// namespace (run.sh starts this under `unshare -n -p -f --mount-proc`, so
// only loopback exists and every process left behind dies with the namespace).
//
//   node drive.js CONFIG.json
//
// CONFIG: {format, script, bin, args[], cwd, env{}, timeoutMs, log, result,
//          baseUrlEnv: {NAME: "http://127.0.0.1:{port}..."} (the port filled in),
//          files: {path: "text with {port}"} (written before the client starts),
//          userEdits: {"<turn>": [{path, op: "write"|"replace"|"append", content, from, to}]},
//          kill: {atTurn, delayMs,   kill -9 the client delayMs after turn atTurn is answered,
//                 signal, graceMs,   or send `signal` (e.g. "SIGINT") to the agent process alone
//                                    (the last of the client's chain, not its tools), and kill -9
//                                    what is left of the client after graceMs,
//                 before: [{bin, args, cwd}],  commands run just before (outputs in the result),
//                 after: [{bin, args, cwd}],   and after the client ended and settleMs passed,
//                 stateDir},         a directory of ckpt's open-call state files, read just before
//          drainMs}                  how long to let the client's orphans finish after a kill
// RESULT: {code, signal, killed, timedOut, ms, stdout, stderr, turnsServed, requests,
//          kills: [{victims, signal, target, openCalls, before}], escalated, after}
'use strict';

const fs = require('node:fs');
const { spawn } = require('node:child_process');
const { startMock } = require('./mock.js');

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const logLines = [];
const log = (e) => {
  logLines.push(e);
  if (cfg.log) fs.appendFileSync(cfg.log, JSON.stringify(e) + '\n');
};

function applyEdit(ed) {
  if (ed.op === 'write') fs.writeFileSync(ed.path, ed.content);
  else if (ed.op === 'append') fs.appendFileSync(ed.path, ed.content);
  else if (ed.op === 'replace') {
    const s = fs.readFileSync(ed.path, 'utf8');
    if (!s.includes(ed.from)) throw new Error(`user edit: ${ed.path} lacks ${JSON.stringify(ed.from)}`);
    fs.writeFileSync(ed.path, s.replace(ed.from, ed.to));
  }
  log({ t: Date.now(), kind: 'user_edit', path: ed.path, op: ed.op });
}

// The client's own processes: the one we started and every descendant
// reached through processes that are not a shell or a command it runs (npm
// wrappers spawn the native binary; Gemini relaunches itself). A crash kills
// these and leaves the tools' processes running, as a real crash would.
const TOOL_COMMS = new Set(['sh', 'bash', 'dash', 'zsh', 'sleep', 'printf', 'ckpt', 'timeout', 'env']);
function procTable() {
  const out = new Map();
  for (const n of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(n)) continue;
    try {
      const st = fs.readFileSync(`/proc/${n}/stat`, 'utf8');
      const close = st.lastIndexOf(')');
      const comm = st.slice(st.indexOf('(') + 1, close);
      const rest = st.slice(close + 2).split(' ');
      // field 4 is the parent, field 22 the start time (rest[0] is field 3)
      out.set(Number(n), { comm, ppid: Number(rest[1]), start: Number(rest[19]) });
    } catch { /* gone */ }
  }
  return out;
}
function clientProcesses(root) {
  const table = procTable();
  const mine = [root];
  for (let i = 0; i < mine.length; i++) {
    for (const [pid, p] of table) {
      if (p.ppid === mine[i] && !TOOL_COMMS.has(p.comm)) mine.push(pid);
    }
  }
  return mine.map((pid) => ({ pid, comm: (table.get(pid) || {}).comm, start: (table.get(pid) || {}).start }));
}

// ckpt's state files of the calls still open (`.agent-runtime/state/calls/`),
// with what runs now under the agent process each one names: to check the
// pre hook's guess of the agent process against the client's real processes.
function openCallStates(dir) {
  if (!dir) return [];
  const table = procTable();
  let names = [];
  try { names = fs.readdirSync(dir).filter((n) => n.endsWith('.json')); } catch { return []; }
  const out = [];
  for (const n of names) {
    let j;
    try { j = JSON.parse(fs.readFileSync(require('node:path').join(dir, n), 'utf8')); } catch { continue; }
    const p = j.proc || null;
    const now = p ? table.get(p.pid) : null;
    out.push({
      call: j.call, tool: j.tool, session: j.session, agent: j.agent, proc: p,
      procNow: now ? { comm: now.comm, ppid: now.ppid, sameStart: now.start === p.start } : null,
    });
  }
  return out;
}

function runCommands(cmds) {
  const { spawnSync } = require('node:child_process');
  return (cmds || []).map((c) => {
    const r = spawnSync(c.bin, c.args || [], { cwd: c.cwd, encoding: 'utf8', timeout: 15000, killSignal: 'SIGKILL' });
    return { args: c.args, code: r.status, stdout: r.stdout || '', stderr: (r.stderr || '').slice(0, 2000) };
  });
}
function alive(pid) {
  try { process.kill(pid, 0); } catch { return false; }
  try { return !/^\S+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8')); } catch { return false; }
}

function groupAlive(pgid) {
  try { process.kill(-pgid, 0); return true; } catch { return false; }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

(async () => {
  let child = null;
  let killTimer = null;
  let escalateTimer = null;
  const mock = await startMock({
    format: cfg.format,
    script: cfg.script,
    log,
    dumpDir: cfg.dumpDir,
    onTurn: async (k) => {
      for (const ed of (cfg.userEdits || {})[String(k)] || []) applyEdit(ed);
    },
  });
  const sub = (s) => s.replace(/\{port\}/g, String(mock.port));
  const env = { ...process.env };
  for (const [k, v] of Object.entries(cfg.env || {})) env[k] = v === null ? undefined : sub(String(v));
  for (const k of Object.keys(env)) if (env[k] === undefined) delete env[k];
  for (const [p, text] of Object.entries(cfg.files || {})) {
    fs.mkdirSync(require('node:path').dirname(p), { recursive: true });
    fs.writeFileSync(p, sub(text));
  }

  const started = Date.now();
  let stdout = '';
  let stderr = '';
  let killed = false;
  let timedOut = false;
  child = spawn(cfg.bin, (cfg.args || []).map(sub), {
    cwd: cfg.cwd,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true, // its own process group: the group is ours to stop
  });
  child.stdout.on('data', (d) => { stdout += d; });
  child.stderr.on('data', (d) => { stderr += d; });
  const pgid = child.pid;

  if (cfg.kill) {
    const poll = setInterval(() => {
      const at = mock.stats.lastTurnServedAt[cfg.kill.atTurn];
      if (at !== undefined) {
        clearInterval(poll);
        killTimer = setTimeout(() => {
          const openCalls = openCallStates(cfg.kill.stateDir);
          const before = runCommands(cfg.kill.before);
          killed = true;
          const victims = clientProcesses(child.pid);
          if (cfg.kill.signal) {
            // As a user's Ctrl-C or a supervisor's `kill` would: the client
            // gets the signal and may end the turn (and fire its hooks).
            // To the agent itself, the last of its chain: the npm launcher of
            // Codex passes signals on, but Gemini's first process ignores
            // SIGINT/SIGTERM/SIGHUP (its relaunched child handles them).
            const target = victims[victims.length - 1];
            log({ t: Date.now(), kind: 'kill', victims, signal: cfg.kill.signal, target, openCalls, before });
            try { process.kill(target.pid, cfg.kill.signal); } catch { /* gone */ }
            escalateTimer = setTimeout(() => {
              if (!alive(child.pid)) return;
              const left = clientProcesses(child.pid);
              log({ t: Date.now(), kind: 'escalate', victims: left });
              for (const v of left) {
                try { process.kill(v.pid, 'SIGKILL'); } catch { /* gone */ }
              }
            }, cfg.kill.graceMs || 8000);
            return;
          }
          log({ t: Date.now(), kind: 'kill', victims, signal: 'SIGKILL', openCalls, before });
          for (const v of victims) {
            try { process.kill(v.pid, 'SIGKILL'); } catch { /* gone */ }
          }
        }, cfg.kill.delayMs || 0);
      }
    }, 20);
  }
  const deadline = setTimeout(() => {
    timedOut = true;
    log({ t: Date.now(), kind: 'timeout' });
    try { process.kill(-pgid, 'SIGKILL'); } catch { /* gone */ }
  }, cfg.timeoutMs || 120000);

  const exit = await new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const ms = Date.now() - started;
  clearTimeout(deadline);
  if (killTimer) clearTimeout(killTimer);
  if (escalateTimer) clearTimeout(escalateTimer);
  // Orphans (a shell command the client started) may still run: give them
  // drainMs, then stop whatever is left of the group.
  if (killed && cfg.settleMs) await sleep(cfg.settleMs); // orphans outside the group too
  // Commands run once the client is gone, still inside its PID namespace (so
  // the pids ckpt recorded mean what they meant).
  const after = killed && cfg.kill ? runCommands(cfg.kill.after) : [];
  const drainUntil = Date.now() + (cfg.drainMs || 0);
  while (groupAlive(pgid) && Date.now() < drainUntil) await sleep(50);
  if (groupAlive(pgid)) {
    try { process.kill(-pgid, 'SIGKILL'); } catch { /* gone */ }
  }
  await mock.close();
  const result = {
    code: exit.code,
    signal: exit.signal,
    killed,
    timedOut,
    ms,
    stdout,
    stderr,
    turnsServed: mock.stats.turnsServed,
    requests: logLines.filter((e) => e.kind !== 'user_edit').map((e) => ({ kind: e.kind, url: e.url, turn: e.turn, results: e.results, userText: e.userText, t: e.t })),
    kills: logLines.filter((e) => e.kind === 'kill'),
    escalated: logLines.filter((e) => e.kind === 'escalate'),
    after,
    started,
  };
  fs.writeFileSync(cfg.result, JSON.stringify(result, null, 2));
  process.exit(0);
})().catch((e) => {
  try { fs.writeFileSync(cfg.result, JSON.stringify({ error: String(e && e.stack || e) })); } catch { /* nothing */ }
  process.exit(1);
});
