#!/usr/bin/env node
// The real-agent end-to-end harness (issue 20). Started by run.sh, which
// builds ckpt and installs the pinned clients; see README.md here.
//
//   node harness.js [--keep] [--only SCENARIO,...] [--no-capture] [--overhead N] AGENT...
//
// Each scenario: a fresh git workspace made from a real crate, `ckpt init
// --hooks AGENT` (committed, as a team would), the agent's trust setup, a
// harness checkpoint, then the real client driven by its scripted mock model
// inside `unshare -n -p -f --mount-proc` (loopback only; every process it
// leaves dies with the namespace), then checks on the ledger and the tree.
// Every check prints PASS or FAIL with one line; exit 1 if any FAIL.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const os = require('node:os');
const crypto = require('node:crypto');
const { spawnSync } = require('node:child_process');
const { trustEntries } = require('./codex-trust.js');

const HERE = __dirname;
const REPO = path.resolve(HERE, '..', '..');
const CACHE = process.env.CKPT_REAL_AGENTS_CACHE || path.join(os.homedir(), '.cache', 'ckpt-real-agents');
const CKPT_BUILT = process.env.CKPT_BIN || path.join(REPO, 'target/x86_64-unknown-linux-gnu/release/ckpt');
const VERSIONS = { claude: '2.1.332', codex: '0.171.0', gemini: '0.61.0' };
const PACKAGES = { claude: 'claude-code', codex: 'codex', gemini: 'gemini-cli' };
const CLIENT_TIMEOUT_MS = Number(process.env.CKPT_REAL_AGENTS_TIMEOUT_MS || 120000);

// ---------------------------------------------------------------- arguments
const argv = process.argv.slice(2);
const opt = { keep: false, only: null, capture: true, overhead: 0, agents: [], writeFixtures: false, fixturesFrom: null };
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === '--keep') opt.keep = true;
  else if (a === '--no-capture') opt.capture = false;
  else if (a === '--write-fixtures') opt.writeFixtures = true;
  else if (a === '--fixtures-from') opt.fixturesFrom = argv[++i];
  else if (a === '--only') opt.only = argv[++i].split(',');
  else if (a === '--overhead') opt.overhead = Number(argv[++i]);
  else if (a === 'all') opt.agents.push('claude', 'codex', 'gemini');
  else if (VERSIONS[a]) opt.agents.push(a);
  else { console.error(`unknown argument ${a}`); process.exit(2); }
}
if (opt.agents.length === 0) opt.agents = ['claude', 'codex', 'gemini'];

// ---------------------------------------------------------------- run dir
const RUN = fs.mkdtempSync(path.join(CACHE, 'runs', 'run-'));
const BIN = path.join(RUN, 'bin');
fs.mkdirSync(BIN);
// A copy of the binary: the build directory may be rebuilt while we run.
fs.copyFileSync(CKPT_BUILT, path.join(BIN, 'ckpt'));
fs.chmodSync(path.join(BIN, 'ckpt'), 0o755);
const CKPT = path.join(BIN, 'ckpt');
const CRATE = (() => {
  const reg = path.join(os.homedir(), '.cargo/registry/src');
  for (const idx of fs.readdirSync(reg)) {
    const d = fs.readdirSync(path.join(reg, idx)).filter((n) => /^itoa-1\.\d+\.\d+$/.test(n)).sort();
    if (d.length) return path.join(reg, idx, d[d.length - 1]);
  }
  throw new Error('no itoa crate under ~/.cargo/registry/src');
})();

const results = [];
function report(agent, scenario, name, pass, reason) {
  const r = { agent, scenario, name, pass: Boolean(pass), reason: reason || '' };
  results.push(r);
  console.log(`${r.pass ? 'PASS' : 'FAIL'} ${agent} ${scenario}: ${name}${r.reason ? ' -- ' + r.reason : ''}`);
  return r.pass;
}

// ---------------------------------------------------------------- helpers
function sh(cmd, args, o = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: o.timeout || 60000, killSignal: 'SIGKILL', ...o });
  return { code: r.status, stdout: r.stdout || '', stderr: r.stderr || '', error: r.error };
}
function git(ws, ...args) {
  return sh('git', ['-C', ws, ...args], {
    env: { ...process.env, GIT_AUTHOR_NAME: 'e2e', GIT_AUTHOR_EMAIL: 'e2e@example.invalid', GIT_COMMITTER_NAME: 'e2e', GIT_COMMITTER_EMAIL: 'e2e@example.invalid', GIT_AUTHOR_DATE: '2026-01-01T00:00:00Z', GIT_COMMITTER_DATE: '2026-01-01T00:00:00Z' },
  });
}
function ckpt(ws, args, o = {}) {
  return sh(CKPT, args, { cwd: o.cwd || ws, env: { ...process.env, CKPT_WORKSPACE: undefined, PATH: `${BIN}:${process.env.PATH}` } });
}
function ckptJson(ws, args, o) {
  const r = ckpt(ws, [...args, '--json'], o);
  try { r.json = JSON.parse(r.stdout); } catch { r.json = null; }
  return r;
}
function firstLine(s) { return (s || '').trim().split('\n').filter(Boolean).slice(-1)[0] || ''; }
function tail(s, n = 300) { s = (s || '').trim().replace(/\s+/g, ' '); return s.length > n ? '…' + s.slice(-n) : s; }

// A map path -> sha256:mode of every file (not .git/, not .agent-runtime/).
function treeState(ws) {
  const out = {};
  const walk = (rel) => {
    for (const e of fs.readdirSync(path.join(ws, rel), { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (r === '.git' || r === '.agent-runtime') continue;
      const full = path.join(ws, r);
      if (e.isDirectory()) { walk(r); out[r + '/'] = 'dir'; continue; }
      const st = fs.lstatSync(full);
      const data = e.isSymbolicLink() ? fs.readlinkSync(full) : fs.readFileSync(full);
      out[r] = crypto.createHash('sha256').update(data).digest('hex').slice(0, 16) + ':' + (st.mode & 0o7777).toString(8);
    }
  };
  walk('');
  return out;
}
function treeDiff(a, b) {
  const d = [];
  for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
    if (a[k] !== b[k]) d.push(`${k}${a[k] === undefined ? ' (added)' : b[k] === undefined ? ' (missing)' : ' (differs)'}`);
  }
  return d.sort();
}
function ledger(ws) {
  const r = ckptJson(ws, ['log']);
  return (r.json && r.json.records) || [];
}
function calls(records) {
  const m = new Map();
  for (const r of records) {
    if (r.kind !== 'tool_call') continue;
    const c = m.get(r.call) || { call: r.call, tool: r.tool, statuses: [], session: r.session };
    c.statuses.push(r.status);
    m.set(r.call, c);
  }
  return [...m.values()];
}
function patches(records) { return records.filter((r) => r.kind === 'file_patch'); }
function describeLedger(records) {
  const cs = calls(records).map((c) => `${c.tool}:${c.statuses.join('>')}`);
  const ps = patches(records).map((p) => `${p.op} ${p.path}`);
  return `calls [${cs.join(', ')}] patches [${ps.join(', ')}]`;
}

// ---------------------------------------------------------------- clients
// Each client: how to run it headless against the mock, and how the
// scenarios' generic operations become its own tool calls.
const CLIENTS = {
  claude: {
    format: 'anthropic',
    bin: () => path.join(CACHE, `claude-code-${VERSIONS.claude}`, 'node_modules/.bin/claude'),
    // Where `ckpt init --hooks claude` puts the hooks (settings.local.json
    // since session 14; an older ckpt wrote settings.json): the first that exists.
    settingsFiles: ['.claude/settings.local.json', '.claude/settings.json'],
    env: (d) => ({
      ANTHROPIC_BASE_URL: 'http://127.0.0.1:{port}',
      ANTHROPIC_API_KEY: 'test',
      IS_SANDBOX: '1', // lets bypassPermissions run as root
      CLAUDE_CONFIG_DIR: d.clientHome,
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      DISABLE_AUTOUPDATER: '1',
      DISABLE_TELEMETRY: '1',
      DISABLE_ERROR_REPORTING: '1',
    }),
    args: (prompt, extra = []) => ['-p', prompt, '--output-format', 'json', '--permission-mode', 'bypassPermissions', ...extra],
    setup: () => ({}),
    tool: (op, d) => {
      const abs = (p) => path.join(d.ws, p);
      if (op.op === 'edit') return { name: 'Edit', input: { file_path: abs(op.path), old_string: op.old, new_string: op.new, replace_all: false } };
      if (op.op === 'write') return { name: 'Write', input: { file_path: abs(op.path), content: op.content } };
      if (op.op === 'shell') return { name: 'Bash', input: { command: op.cmd, description: 'scripted command' } };
      if (op.op === 'read') return { name: 'Read', input: { file_path: abs(op.path) } };
      throw new Error(op.op);
    },
    sessionOf: (res) => { try { return JSON.parse(res.stdout).session_id; } catch { return null; } },
    extraCaptureEvents: ['Stop', 'SessionEnd', 'SubagentStop', 'Notification'],
  },
  codex: {
    format: 'responses',
    bin: () => path.join(CACHE, `codex-${VERSIONS.codex}`, 'node_modules/.bin/codex'),
    settingsFiles: ['.codex/hooks.json'],
    env: (d) => ({ CODEX_HOME: d.clientHome, MOCK_API_KEY: 'test' }),
    args: (prompt) => ['exec', '--dangerously-bypass-approvals-and-sandbox', '--json', prompt],
    // config.toml: the mock provider, and (unless the scenario says not) the
    // trust Codex needs before it runs project hooks.
    setup: (d, sc) => {
      let toml = [
        'model = "gpt-5.5"', // a model Codex has metadata for: it then offers apply_patch
        'model_provider = "mock"',
        'check_for_update_on_startup = false',
        '[analytics]', 'enabled = false',
        '[model_providers.mock]', 'name = "mock"', 'base_url = "http://127.0.0.1:{port}/v1"',
        'wire_api = "responses"', 'env_key = "MOCK_API_KEY"', 'request_max_retries = 0', 'stream_max_retries = 0', '',
      ].join('\n');
      if (sc.trust !== 'none' && fs.existsSync(path.join(d.ws, '.codex/hooks.json'))) {
        const t = trustEntries(d.ws);
        toml += sc.trust === 'project-only' ? t.split('\n\n')[0] + '\n' : t;
      }
      d.trustToml = toml.slice(toml.indexOf('[projects'));
      return { [path.join(d.clientHome, 'config.toml')]: toml };
    },
    tool: (op, d) => {
      const rel = (p) => path.relative(d.cwd, path.join(d.ws, p));
      if (op.op === 'edit') {
        return { name: 'apply_patch', custom: true, input: `*** Begin Patch\n*** Update File: ${rel(op.path)}\n@@\n-${op.old}\n+${op.new}\n*** End Patch\n` };
      }
      if (op.op === 'write') {
        const lines = op.content.replace(/\n$/, '').split('\n').map((l) => '+' + l).join('\n');
        return { name: 'apply_patch', custom: true, input: `*** Begin Patch\n*** Add File: ${rel(op.path)}\n${lines}\n*** End Patch\n` };
      }
      if (op.op === 'shell') return { name: 'exec_command', input: { cmd: op.cmd } };
      if (op.op === 'read') return { name: 'exec_command', input: { cmd: `cat ${rel(op.path)}` } };
      throw new Error(op.op);
    },
    sessionOf: (res) => { const m = /"thread_id":"([^"]+)"/.exec(res.stdout || ''); return m && m[1]; },
    extraCaptureEvents: ['SessionStart', 'UserPromptSubmit', 'Stop'],
  },
  gemini: {
    format: 'gemini',
    bin: () => path.join(CACHE, `gemini-cli-${VERSIONS.gemini}`, 'node_modules/.bin/gemini'),
    settingsFiles: ['.gemini/settings.json'],
    env: (d, sc) => ({
      GOOGLE_GEMINI_BASE_URL: 'http://127.0.0.1:{port}',
      GEMINI_API_KEY: 'test',
      GEMINI_CLI_HOME: d.clientHome,
      GEMINI_CLI_TRUST_WORKSPACE: sc.trust === 'none' ? null : 'true',
    }),
    args: (prompt) => ['-p', prompt, '--approval-mode', 'yolo', '-o', 'json', '-m', 'gemini-2.5-flash'],
    setup: (d) => ({
      [path.join(d.clientHome, '.gemini', 'settings.json')]: JSON.stringify({
        security: { auth: { selectedType: 'gemini-api-key' } },
        privacy: { usageStatisticsEnabled: false },
        telemetry: { enabled: false },
        general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
      }, null, 2),
    }),
    tool: (op, d) => {
      const abs = (p) => path.join(d.ws, p);
      if (op.op === 'edit') return { name: 'replace', input: { file_path: abs(op.path), instruction: 'scripted edit', old_string: op.old, new_string: op.new } };
      if (op.op === 'write') return { name: 'write_file', input: { file_path: abs(op.path), content: op.content } };
      if (op.op === 'shell') return { name: 'run_shell_command', input: { command: op.cmd, description: 'scripted command' } };
      if (op.op === 'read') return { name: 'read_file', input: { file_path: abs(op.path) } };
      throw new Error(op.op);
    },
    sessionOf: (res) => { try { return JSON.parse(res.stdout).session_id; } catch { return null; } },
    extraCaptureEvents: ['BeforeAgent', 'AfterAgent', 'SessionEnd'],
  },
};

// The agent's settings file `ckpt init --hooks` wrote in workspace `ws`.
function settingsFile(agent, ws) {
  const fs_ = CLIENTS[agent].settingsFiles;
  return path.join(ws, fs_.find((f) => fs.existsSync(path.join(ws, f))) || fs_[0]);
}

// ---------------------------------------------------------------- workspace
// A git repository made from the crate (one commit), nothing of ckpt in it.
function makeRepo(ws) {
  fs.cpSync(CRATE, ws, { recursive: true });
  for (const junk of ['.cargo-ok', '.cargo_vcs_info.json']) fs.rmSync(path.join(ws, junk), { force: true });
  git(ws, 'init', '-q', '-b', 'main');
  git(ws, 'add', '-A');
  git(ws, 'commit', '-qm', 'crate');
}
// o.init === false: no `ckpt init` at all (a repository ckpt was never set up in).
function makeWorkspace(agent, name, settingsEdit, o = {}) {
  const dir = path.join(RUN, agent, name);
  const ws = path.join(dir, 'ws');
  fs.mkdirSync(dir, { recursive: true });
  makeRepo(ws);
  if (o.init !== false) {
    const init = ckpt(ws, ['init', '--hooks', agent]);
    if (init.code !== 0) throw new Error(`ckpt init --hooks ${agent}: ${init.stderr}`);
    if (settingsEdit) settingsEdit(ws);
    git(ws, 'add', '-A');
    git(ws, 'commit', '-qm', `${agent} hooks`);
  }
  const clientHome = path.join(dir, 'client-home');
  fs.mkdirSync(path.join(dir, 'home'), { recursive: true });
  fs.mkdirSync(clientHome, { recursive: true });
  return { dir, ws, clientHome, home: path.join(dir, 'home'), runs: 0 };
}

// The environment a client runs with (null: unset; `{port}` is filled in by
// drive.js). Also what `ckpt doctor` and `ckpt init --user` get here, so they
// look at the settings and trust the client has.
function clientEnv(agent, d, sc) {
  return {
    PATH: `${BIN}:/usr/local/bin:/usr/bin:/bin`,
    HOME: d.home,
    LANG: 'C.UTF-8',
    TERM: 'dumb',
    NO_COLOR: '1',
    ...CLIENTS[agent].env(d, sc),
  };
}
// ckpt run with a client's environment (and nothing else of the harness's).
function ckptAs(agent, d, sc, args, o = {}) {
  const env = {};
  for (const [k, v] of Object.entries({ ...clientEnv(agent, d, sc), ...(o.env || {}) })) if (v !== null && v !== undefined) env[k] = v;
  const r = sh(CKPT, args, { cwd: o.cwd || d.ws, env });
  try { r.json = JSON.parse(r.stdout); } catch { r.json = null; }
  return r;
}

// One client run. ops: list of turns (each a list of generic ops).
function runClient(agent, d, sc, o) {
  const C = CLIENTS[agent];
  d.cwd = o.cwd || d.ws;
  const script = { turns: o.turns.map((t) => t.map((op) => C.tool(op, d))), final: 'Done.' };
  const n = ++d.runs;
  const cfgPath = path.join(d.dir, `drive-${n}.json`);
  const resPath = path.join(d.dir, `result-${n}.json`);
  const files = { ...C.setup(d, sc), ...(o.files || {}) };
  // Setup files the harness wrote itself before (and `ckpt init --hooks
  // AGENT --user` merged its hooks into): not overwritten at client start.
  for (const f of d.preWritten || []) delete files[f];
  const env = { ...clientEnv(agent, d, sc), ...(o.env || {}) };
  const cfg = {
    format: C.format,
    script,
    bin: C.bin(),
    args: [...(o.args || C.args(o.prompt)), ...(o.debugFile ? ['--debug-file', o.debugFile] : [])],
    cwd: d.cwd,
    env,
    files,
    timeoutMs: CLIENT_TIMEOUT_MS,
    log: path.join(d.dir, `mock-${n}.jsonl`),
    result: resPath,
    userEdits: o.userEdits,
    kill: o.kill,
    settleMs: o.settleMs,
    drainMs: o.drainMs || 2000,
  };
  fs.writeFileSync(cfgPath, JSON.stringify(cfg, null, 2));
  const t0 = Date.now();
  const r = sh('unshare', ['-n', '-p', '-f', '--mount-proc', 'sh', '-c', `ip link set lo up && exec node ${path.join(HERE, 'drive.js')} ${cfgPath}`], {
    timeout: CLIENT_TIMEOUT_MS + 30000,
    env: { PATH: process.env.PATH, HOME: d.home },
  });
  let res;
  try { res = JSON.parse(fs.readFileSync(resPath, 'utf8')); } catch {
    res = { error: `drive.js gave no result (exit ${r.code}): ${tail(r.stderr)}` };
  }
  res.wall = Date.now() - t0;
  res.script = script;
  return res;
}

function clientOk(agent, scName, res, turns, expectKill) {
  if (res.error) return report(agent, scName, 'client ran the script', false, res.error);
  if (res.timedOut) return report(agent, scName, 'client ran the script', false, `timed out; served turns [${res.turnsServed}]; stderr ${tail(res.stderr)}`);
  const served = new Set(res.turnsServed).size;
  if (expectKill) {
    return report(agent, scName, 'client ran the script until killed', res.killed && served >= turns,
      `killed=${res.killed} signal=${res.signal} turns served ${served}/${turns}`);
  }
  const ok = res.code === 0 && served === turns;
  return report(agent, scName, 'client ran the script', ok,
    ok ? `${turns} turn(s), exit 0, ${res.ms} ms` : `exit ${res.code}; turns served ${served}/${turns}; stdout ${tail(res.stdout, 200)}; stderr ${tail(res.stderr)}`);
}

// ---------------------------------------------------------------- scenario data
const LIB_OLD = '//! See also [`zmij`] for printing floating point primitives.';
const LIB_NEW = '//! See also [`zmij`] for printing floating point numbers (agent).';
const README_OLD = 'This crate provides a fast conversion of integer primitives to decimal strings.';
const README_NEW = 'This crate provides a very fast conversion of integer primitives to decimal strings.';
const CARGO_SHELL = "sed -i 's/^version = \"1.0.19\"/version = \"1.0.20\"/' Cargo.toml && printf 'generated\\n' > gen.txt";

function expectPatches(agent, sc, records, want) {
  const ps = patches(records);
  const missing = want.filter(([op, p]) => !ps.some((x) => x.path === p && x.op === op));
  return report(agent, sc, `patches recorded (${want.map(([op, p]) => `${op} ${p}`).join(', ')})`, missing.length === 0,
    missing.length ? `missing ${missing.map(([op, p]) => `${op} ${p}`).join(', ')}; ledger has ${describeLedger(records)}` : '');
}
function expectCalls(agent, sc, records, n) {
  const cs = calls(records);
  const done = cs.filter((c) => c.statuses.includes('started') && c.statuses.some((s) => s === 'succeeded' || s === 'failed'));
  return report(agent, sc, `${n} tool calls recorded start to end`, cs.length === n && done.length === n,
    cs.length === 0 ? `the ledger has no tool_call at all (${records.length} records)` : describeLedger(records));
}
function rollbackTo(agent, sc, d, ck, baseline, label = 'rollback --to the harness checkpoint restores the crate byte for byte') {
  const rb = ckptJson(d.ws, ['rollback', '--to', ck]);
  const diff = treeDiff(baseline, treeState(d.ws));
  const porcelain = git(d.ws, 'status', '--porcelain').stdout.trim();
  return report(agent, sc, label, rb.code === 0 && diff.length === 0 && porcelain === '',
    `exit ${rb.code}${rb.code ? ' ' + firstLine(rb.stderr) : ''}; ${diff.length ? 'tree differs: ' + diff.join(', ') : 'tree identical'}; git status ${porcelain ? JSON.stringify(porcelain.replace(/\n/g, '; ')) : 'clean'}`);
}
function verify(agent, sc, d, when) {
  const v = ckpt(d.ws, ['verify']);
  return report(agent, sc, `ckpt verify ${when}`, v.code === 0, v.code === 0 ? firstLine(v.stdout) : `exit ${v.code}: ${tail(v.stdout + v.stderr, 200)}`);
}
function harnessCheckpoint(d) {
  const c = ckptJson(d.ws, ['checkpoint', '-m', 'e2e harness start']);
  if (!c.json) throw new Error(`ckpt checkpoint: ${c.stderr}`);
  return c.json.checkpoint;
}

// `ckpt doctor --json [--agent AGENT]` run with the client's environment
// (its CODEX_HOME / GEMINI_CLI_HOME / CLAUDE_CONFIG_DIR, its Gemini trust);
// the problems it lists for the agent printed either way.
function doctor(agent, sc, d, sco, withAgent) {
  const r = ckptAs(agent, d, sco, ['doctor', '--json', ...(withAgent ? ['--agent', agent] : [])]);
  const rep = r.json && (r.json.agents || []).find((a) => a.agent === agent);
  const probs = (rep && rep.problems) || [];
  console.log(`INFO ${agent} ${sc}: ckpt doctor${withAgent ? ' --agent ' + agent : ''} exit ${r.code}; ${agent}: ${rep ? `files ${JSON.stringify((rep.files || []).map((f) => `${f.scope}:${f.file}`))}, calls ${rep.calls}, problems ${JSON.stringify(probs.map((p) => `${p.level} ${p.code}: ${p.what}`))}` : `no report; stdout ${tail(r.stdout, 200)}; stderr ${tail(r.stderr, 200)}`}`);
  return { r, rep, probs };
}
function problemList(probs) { return probs.length ? probs.map((p) => `${p.level} ${p.code}`).join(', ') : 'no problems'; }

// User-level hooks: the settings file the client reads for its user settings
// (Claude Code: $CLAUDE_CONFIG_DIR/settings.json, the harness's client home;
// Gemini CLI: $GEMINI_CLI_HOME/.gemini/settings.json).
function userSettingsFile(agent, d) {
  return agent === 'claude' ? path.join(d.clientHome, 'settings.json') : path.join(d.clientHome, '.gemini', 'settings.json');
}
// The client setup's own files first (Gemini's auth settings are in the same
// file), then `ckpt init --hooks AGENT --user` with the client's environment,
// run in `initWs` (default the workspace), merges ckpt's hooks into them; the
// client start then leaves those files as they are (d.preWritten). The
// project's ckpt hooks, which init --user takes out, must be gone after.
function installUserHooks(agent, sc, d, sco, initWs) {
  d.preWritten = [];
  for (const [f, text] of Object.entries(CLIENTS[agent].setup(d, sco))) {
    if (text.includes('{port}')) continue; // filled in at client start: drive.js writes it
    fs.mkdirSync(path.dirname(f), { recursive: true });
    fs.writeFileSync(f, text);
    d.preWritten.push(f);
  }
  const where = initWs || d.ws;
  const r = ckptAs(agent, d, sco, ['init', '--hooks', agent, '--user', '--json'], { cwd: where });
  const h = r.json && r.json.hooks;
  const want = userSettingsFile(agent, d);
  report(agent, sc, `ckpt init --hooks ${agent} --user writes the user settings file the client reads`, r.code === 0 && h && path.resolve(where, h.file) === want && h.added > 0,
    r.code === 0 ? `hooks ${JSON.stringify(h)}${h && path.resolve(where, h.file) !== want ? `; the client reads ${want}` : ''}${r.json && r.json.problems && r.json.problems.length ? `; problems ${problemList(r.json.problems)}` : ''}` : `exit ${r.code}: ${tail(r.stderr, 200)}`);
  if (r.stderr.trim()) console.log(`INFO ${agent} ${sc}: init --user said on stderr: ${tail(r.stderr, 300)}`);
  userFileCheck(agent, sc, d, 'after init --user');
  if (initWs) return r;
  // The project's own settings file: no ckpt hook left in it.
  const proj = CLIENTS[agent].settingsFiles.map((f) => path.join(d.ws, f)).filter((f) => fs.existsSync(f));
  const left = proj.filter((f) => fs.readFileSync(f, 'utf8').includes(`${CKPT} hook `));
  report(agent, sc, 'init --user took ckpt\'s hooks out of the project settings file', left.length === 0,
    `moved_from ${JSON.stringify(h && h.moved_from)}; project files ${proj.map((f) => path.relative(d.ws, f)).join(', ') || 'none'}${left.length ? `; ckpt hooks still in ${left.map((f) => path.relative(d.ws, f))} (removed by the harness)` : ''}`);
  for (const f of left) fs.rmSync(f); // so only the user-level hooks record
  git(d.ws, 'add', '-A');
  git(d.ws, 'commit', '-qm', `${agent} hooks moved to the user settings`);
  return r;
}
// The user settings file: ckpt's hook commands all `--only-initialized`, and
// what the harness's client setup wrote there still in it (merged, not replaced).
function userFileCheck(agent, sc, d, when) {
  const f = userSettingsFile(agent, d);
  let doc = null;
  try { doc = JSON.parse(fs.readFileSync(f, 'utf8')); } catch (e) { return report(agent, sc, `user settings file ${when}`, false, `${f}: ${e.message}`); }
  const cmds = [];
  for (const groups of Object.values(doc.hooks || {})) for (const g of groups || []) for (const h of g.hooks || []) if (h.command) cmds.push(h.command);
  const ours = cmds.filter((c) => / hook \S+/.test(c) && c.includes(CKPT));
  const bad = ours.filter((c) => !c.includes('--only-initialized'));
  const kept = agent !== 'gemini' || (doc.security && doc.security.auth && doc.security.auth.selectedType === 'gemini-api-key');
  return report(agent, sc, `the user settings file ${when} holds ckpt's --only-initialized hooks${agent === 'gemini' ? ' and the harness\'s auth settings' : ''}`,
    ours.length > 0 && bad.length === 0 && kept,
    `${path.relative(d.dir, f)}: ${ours.length} ckpt hook(s) in ${Object.keys(doc.hooks || {}).join(', ') || 'no events'}${ours.length ? `, e.g. ${JSON.stringify(ours[0].split(CKPT).join('CKPT'))}` : ''}${bad.length ? `; without --only-initialized: ${JSON.stringify(bad)}` : ''}${kept ? '' : `; security.auth lost: top-level keys ${Object.keys(doc)}`}`);
}

// ---------------------------------------------------------------- scenarios
const SCENARIOS = {};

SCENARIOS['1-basic'] = (agent) => {
  const sc = '1-basic';
  const d = makeWorkspace(agent, sc);
  const baseline = treeState(d.ws);
  const ck = harnessCheckpoint(d);
  const res = runClient(agent, d, {}, {
    prompt: 'ckpt-e2e prompt one: edit, write, shell',
    turns: [
      [{ op: 'edit', path: 'src/lib.rs', old: LIB_OLD, new: LIB_NEW }],
      [{ op: 'write', path: 'NOTES.md', content: 'agent notes\nline two\n' }],
      [{ op: 'shell', cmd: CARGO_SHELL }],
    ],
  });
  if (!clientOk(agent, sc, res, 3)) return null;
  const now = treeState(d.ws);
  const changed = treeDiff(baseline, now);
  report(agent, sc, 'the tools changed the tree (src/lib.rs, NOTES.md, Cargo.toml, gen.txt)', changed.length === 4, changed.join(', '));
  const records = ledger(d.ws);
  expectCalls(agent, sc, records, 3);
  expectPatches(agent, sc, records, [['modify', 'src/lib.rs'], ['create', 'NOTES.md'], ['modify', 'Cargo.toml'], ['create', 'gen.txt']]);
  const src = Object.fromEntries(patches(records).map((p) => [p.path, p.source]));
  report(agent, sc, 'edit tools recorded as edit_tool, the shell call as shell', src['src/lib.rs'] === 'edit_tool' && src['NOTES.md'] === 'edit_tool' && src['Cargo.toml'] === 'shell',
    `sources ${JSON.stringify(src)}`);
  const st = ckptJson(d.ws, ['status']);
  const agentFiles = ((st.json && st.json.agent_files) || []).map((f) => f.path).sort();
  report(agent, sc, 'status --json lists the 4 files, nothing in doubt', agentFiles.length === 4 && st.json.uncertain === 0,
    `agent_files [${agentFiles}] uncertain ${st.json && st.json.uncertain}`);
  const prompts = records.filter((r) => r.kind === 'checkpoint' && r.label && r.label.includes('ckpt-e2e prompt one'));
  report(agent, sc, 'a checkpoint for the prompt (per-prompt undo)', prompts.length === 1,
    prompts.length ? prompts[0].checkpoint : `checkpoints: ${JSON.stringify(records.filter((r) => r.kind === 'checkpoint').map((r) => r.label))}`);
  verify(agent, sc, d, 'after the session');
  {
    // With the client's environment (Gemini trusted as the client was through
    // GEMINI_CLI_TRUST_WORKSPACE, Codex's CODEX_HOME with its trust entries).
    const doc = doctor(agent, sc, d, {}, true);
    const errors = doc.probs.filter((p) => p.level === 'error');
    report(agent, sc, `ckpt doctor --agent ${agent} with the client's env: no error, calls counted`, doc.rep && errors.length === 0 && doc.rep.calls > 0,
      doc.rep ? `exit ${doc.r.code}; calls ${doc.rep.calls}; ${problemList(doc.probs)}` : `exit ${doc.r.code}: ${tail(doc.r.stderr, 200)}`);
  }
  rollbackTo(agent, sc, d, ck, baseline);
  verify(agent, sc, d, 'after the rollback');
  return { d, res, records };
};

SCENARIOS['2-user-edits'] = (agent) => {
  const sc = '2-user-edits';
  const d = makeWorkspace(agent, sc);
  const baseline = treeState(d.ws);
  const libBase = fs.readFileSync(path.join(d.ws, 'src/lib.rs'), 'utf8');
  const ck = harnessCheckpoint(d);
  const USER_LIB_OLD = '//! # Performance';
  const USER_LIB_NEW = '//! # Performance (edited by the user)';
  const res = runClient(agent, d, {}, {
    prompt: 'ckpt-e2e prompt two: edits with the user in between',
    turns: [
      [{ op: 'edit', path: 'src/lib.rs', old: LIB_OLD, new: LIB_NEW }],
      [{ op: 'edit', path: 'README.md', old: README_OLD, new: README_NEW }],
      [{ op: 'shell', cmd: CARGO_SHELL }],
    ],
    userEdits: {
      2: [
        { path: path.join(d.ws, 'src/lib.rs'), op: 'replace', from: USER_LIB_OLD, to: USER_LIB_NEW },
        { path: path.join(d.ws, 'README.md'), op: 'replace', from: 'a very fast conversion', to: 'a very, very fast conversion' },
      ],
    },
  });
  if (!clientOk(agent, sc, res, 3)) return null;
  const records = ledger(d.ws);
  expectCalls(agent, sc, records, 3);
  const ue = records.filter((r) => r.kind === 'user_edit').map((r) => r.path);
  report(agent, sc, 'the user\'s edits to the agent\'s files recorded as user_edit (src/lib.rs, README.md)',
    ue.includes('src/lib.rs') && ue.includes('README.md'), `user_edit records: [${ue}]`);
  const readmeUser = fs.readFileSync(path.join(d.ws, 'README.md'));
  const rb = ckptJson(d.ws, ['rollback', '--to', ck]);
  const conflicts = ((rb.json && rb.json.conflicts) || []).map((c) => c.path || c);
  report(agent, sc, 'rollback exits 3 with a conflict on README.md (the overlapping edit)', rb.code === 3 && JSON.stringify(conflicts).includes('README.md'),
    `exit ${rb.code}; conflicts ${JSON.stringify(conflicts)}; ${firstLine(rb.stderr)}`);
  report(agent, sc, 'README.md (conflicted) left exactly as the user had it', Buffer.compare(readmeUser, fs.readFileSync(path.join(d.ws, 'README.md'))) === 0, '');
  const libWant = libBase.replace(USER_LIB_OLD, USER_LIB_NEW);
  const libNow = fs.readFileSync(path.join(d.ws, 'src/lib.rs'), 'utf8');
  report(agent, sc, 'src/lib.rs: the agent\'s edit undone, the user\'s non-overlapping edit kept', libNow === libWant,
    libNow === libWant ? '' : libNow === libBase ? 'the user\'s edit was lost' : libNow.includes(LIB_NEW) ? 'the agent\'s edit is still there' : 'differs');
  const rest = treeDiff(baseline, treeState(d.ws)).filter((p) => !p.startsWith('README.md') && !p.startsWith('src/lib.rs'));
  report(agent, sc, 'every other file back byte for byte (Cargo.toml, gen.txt gone)', rest.length === 0, rest.join(', '));
  const open = ckptJson(d.ws, ['conflicts', '--open']);
  report(agent, sc, 'ckpt conflicts --open lists README.md', JSON.stringify(open.json || {}).includes('README.md'), tail(open.stdout, 160));
  verify(agent, sc, d, 'after the conflicting rollback');
  return { d, res, records };
};

// o.user: ckpt's hooks in the user settings file (`ckpt init --hooks AGENT
// --user`), none in the project.
function subdir(agent, sc, settingsEdit, o = {}) {
  const d = makeWorkspace(agent, sc, settingsEdit);
  if (o.user) installUserHooks(agent, sc, d, {});
  const baseline = treeState(d.ws);
  const ck = harnessCheckpoint(d);
  const res = runClient(agent, d, {}, {
    prompt: 'ckpt-e2e prompt three: session started in src/',
    cwd: path.join(d.ws, 'src'),
    debugFile: agent === 'claude' ? path.join(d.dir, 'claude-debug.log') : null,
    turns: [
      [{ op: 'edit', path: 'src/lib.rs', old: LIB_OLD, new: LIB_NEW }],
      [{ op: 'write', path: 'src/sub_notes.md', content: 'written from src/\n' }],
      [{ op: 'shell', cmd: "printf 'from the subdirectory\\n' > from_subdir.txt" }],
    ],
  });
  if (!clientOk(agent, sc, res, 3)) return null;
  const changed = treeDiff(baseline, treeState(d.ws));
  report(agent, sc, 'the tools changed the tree (src/lib.rs, src/sub_notes.md, src/from_subdir.txt)', changed.length === 3, changed.join(', '));
  const records = ledger(d.ws);
  expectCalls(agent, sc, records, 3);
  expectPatches(agent, sc, records, [['modify', 'src/lib.rs'], ['create', 'src/sub_notes.md'], ['create', 'src/from_subdir.txt']]);
  const st = ckptJson(d.ws, ['status'], { cwd: path.join(d.ws, 'src') });
  report(agent, sc, 'ckpt status run in src/ sees the workspace\'s files', st.json && st.json.agent_files && st.json.agent_files.length === 3,
    st.json ? `agent_files ${st.json.agent_files.length}` : firstLine(st.stderr));
  if (o.user) {
    userFileCheck(agent, sc, d, 'after the run');
    doctor(agent, sc, d, {}, true);
  }
  rollbackTo(agent, sc, d, ck, baseline);
  if (agent === 'claude' && fs.existsSync(path.join(d.dir, 'claude-debug.log'))) {
    // Which settings files Claude Code looked for (its --debug-file says so).
    const log = fs.readFileSync(path.join(d.dir, 'claude-debug.log'), 'utf8');
    const looked = [...log.matchAll(/missing file encountered for settings\.json at path: (\S+)/g)].map((m) => m[1]);
    const watched = (/Watching for changes in setting files (.*)/.exec(log) || [])[1] || '';
    const rel = (p) => p.split(d.ws).join('<ws>').split(d.clientHome).join('<CLAUDE_CONFIG_DIR>');
    console.log(`INFO ${agent} ${sc}: settings files Claude Code looked for and did not find: ${[...new Set(looked)].map(rel).join(', ')}; watched: ${rel(watched)}`);
  }
  return { d, res, records };
}
SCENARIOS['3-subdir'] = (agent) => subdir(agent, '3-subdir');
// Claude only: the same with the hooks in the git root's settings.local.json
// (where `ckpt init --hooks claude` puts them since session 14; an older
// ckpt wrote settings.json, which is moved if it is there).
SCENARIOS['3b-subdir-settings-local'] = (agent) => agent !== 'claude' ? null : subdir(agent, '3b-subdir-settings-local', (ws) => {
  const shared = path.join(ws, '.claude/settings.json');
  if (fs.existsSync(shared)) fs.renameSync(shared, path.join(ws, '.claude/settings.local.json'));
});

// Claude and Gemini: the hooks in the user settings file only (`ckpt init
// --hooks AGENT --user`, which takes them out of the project), the session
// started in src/. Gemini CLI 0.61 reads a project's .gemini/settings.json
// only where it starts (3-subdir); its user settings everywhere.
SCENARIOS['3c-subdir-user'] = (agent) => agent === 'codex' ? null : subdir(agent, '3c-subdir-user', null, { user: true });

// Gemini: user-level hooks installed (init --user run in another workspace),
// the client run in a git repository where `ckpt init` never ran: the hooks
// fire, set nothing up there, and the client's calls run as without ckpt.
SCENARIOS['3d-user-uninitialized'] = (agent) => {
  const sc = '3d-user-uninitialized';
  if (agent !== 'gemini') return null;
  const d = makeWorkspace(agent, sc, null, { init: false });
  const initialized = path.join(d.dir, 'initialized');
  makeRepo(initialized);
  installUserHooks(agent, sc, d, {}, initialized);
  // Each user-level hook wrapped by capture-hook.sh (ckpt's command still
  // runs after it): to see that they fired in the repository, not only that
  // nothing was made there.
  const capDir = path.join(d.dir, 'fired');
  fs.mkdirSync(capDir, { recursive: true });
  {
    const f = userSettingsFile(agent, d);
    const doc = JSON.parse(fs.readFileSync(f, 'utf8'));
    for (const [ev, groups] of Object.entries(doc.hooks || {})) {
      for (const g of groups) for (const h of g.hooks || []) if ((h.command || '').includes(CKPT)) h.command = `sh ${path.join(HERE, 'capture-hook.sh')} ${capDir} ${ev} ${h.command}`;
    }
    fs.writeFileSync(f, JSON.stringify(doc, null, 2) + '\n');
  }
  const before = calls(ledger(initialized)).length;
  const baseline = treeState(d.ws);
  const res = runClient(agent, d, {}, {
    prompt: 'ckpt-e2e prompt three d: user-level hooks, a repository without ckpt',
    turns: [
      [{ op: 'edit', path: 'src/lib.rs', old: LIB_OLD, new: LIB_NEW }],
      [{ op: 'write', path: 'NOTES.md', content: 'agent notes\n' }],
      [{ op: 'shell', cmd: "printf 'no ckpt here\\n' > plain.txt" }],
    ],
  });
  clientOk(agent, sc, res, 3);
  const changed = treeDiff(baseline, treeState(d.ws));
  report(agent, sc, 'the calls ran (src/lib.rs, NOTES.md, plain.txt changed)', changed.length === 3, changed.join(', ') || 'tree unchanged');
  const fired = fs.readdirSync(capDir).filter((n) => n.endsWith('.json')).sort().map((n) => n.replace(/^\d+-\d+-/, '').replace(/\.json$/, ''));
  const cwds = [...new Set(fs.readdirSync(capDir).filter((n) => n.endsWith('.meta')).map((n) => (/^cwd=(.*)$/m.exec(fs.readFileSync(path.join(capDir, n), 'utf8')) || [])[1]))];
  report(agent, sc, 'the user-level hooks fired in that repository (BeforeTool and AfterTool for each call)',
    fired.filter((e) => e === 'BeforeTool').length === 3 && fired.filter((e) => e === 'AfterTool').length === 3,
    `fired: ${fired.join(', ') || 'none'}; hook cwd ${cwds.map((c) => c && c.split(d.ws).join('<repo>')).join(', ')}`);
  const made = ['.agent-runtime', 'src/.agent-runtime'].filter((p) => fs.existsSync(path.join(d.ws, p)));
  report(agent, sc, 'no .agent-runtime/ created in the repository ckpt init never ran in', made.length === 0, made.length ? `created: ${made.join(', ')}` : 'none');
  const after = calls(ledger(initialized)).length;
  report(agent, sc, 'nothing recorded in the workspace where init --user ran', after === before, `calls there: ${before} before, ${after} after`);
  const said = (res.stderr || '').split('\n').filter((l) => /hook/i.test(l));
  if (said.length) console.log(`INFO ${agent} ${sc}: client stderr lines mentioning hooks: ${tail(said.join(' | '), 400)}`);
  userFileCheck(agent, sc, d, 'after the run');
  return { d, res };
};

SCENARIOS['4-parallel'] = (agent) => {
  const sc = '4-parallel';
  const d = makeWorkspace(agent, sc);
  const baseline = treeState(d.ws);
  const ck = harnessCheckpoint(d);
  const res = runClient(agent, d, {}, {
    prompt: 'ckpt-e2e prompt four: parallel calls',
    turns: [
      [{ op: 'edit', path: 'src/lib.rs', old: LIB_OLD, new: LIB_NEW }, { op: 'write', path: 'PAR.md', content: 'parallel write\n' }],
      [{ op: 'shell', cmd: "sleep 1; printf 'a\\n' > par_a.txt" }, { op: 'shell', cmd: "sleep 1; printf 'b\\n' > par_b.txt" }],
    ],
  });
  if (!clientOk(agent, sc, res, 2)) return null;
  const records = ledger(d.ws);
  expectCalls(agent, sc, records, 4);
  // Did the client run the two shell calls concurrently? (informational: the
  // second started before the first ended)
  const seq = records.filter((r) => r.kind === 'tool_call');
  const shellCalls = calls(records).slice(2).map((c) => c.call);
  let overlap = 'unknown';
  if (shellCalls.length === 2) {
    const idx = (call, st) => seq.findIndex((r) => r.call === call && r.status === st);
    const [a, b] = shellCalls;
    overlap = idx(b, 'started') < idx(a, 'succeeded') ? 'yes' : 'no';
  }
  console.log(`INFO ${agent} ${sc}: the two shell calls overlapped in the ledger: ${overlap}`);
  expectPatches(agent, sc, records, [['modify', 'src/lib.rs'], ['create', 'PAR.md'], ['create', 'par_a.txt'], ['create', 'par_b.txt']]);
  const ps = patches(records);
  const owner = (p) => { const x = ps.find((q) => q.path === p); return x ? x.call : null; };
  report(agent, sc, 'par_a.txt and par_b.txt attributed to different calls (or candidates named)',
    owner('par_a.txt') && owner('par_b.txt') && (owner('par_a.txt') !== owner('par_b.txt') || ps.some((p) => p.candidates)),
    `par_a by ${owner('par_a.txt')}, par_b by ${owner('par_b.txt')}${ps.some((p) => p.candidates) ? ' (candidates listed)' : ''}`);
  const st = ckptJson(d.ws, ['status']);
  report(agent, sc, 'nothing in doubt after the parallel calls', st.json && st.json.uncertain === 0, st.json ? `uncertain ${st.json.uncertain}` : firstLine(st.stderr));
  rollbackTo(agent, sc, d, ck, baseline);
  return { d, res, records };
};

// The open calls' agent processes as the pre hooks recorded them
// (`.agent-runtime/state/calls/*.json` "proc", read by drive.js just before
// the kill or the signal, inside the client's PID namespace) against the
// client's own processes then: the call's agent is the client's last process
// (Claude Code's one, Codex's native binary under the npm launcher, Gemini's
// relaunched child).
function agentProcCheck(agent, sc, res, shellCall) {
  const k = (res.kills || [])[0];
  if (!k) return report(agent, sc, 'the shell call\'s pre recorded the client as its agent process', false, 'no kill entry in the drive result');
  const open = k.openCalls || [];
  console.log(`INFO ${agent} ${sc}: open calls just before the ${k.signal}: ${JSON.stringify(open.map((c) => ({ call: c.call, tool: c.tool, proc: c.proc, now: c.procNow })))}; the client's processes ${JSON.stringify(k.victims)}`);
  const st = open.find((c) => c.call === shellCall) || open[0];
  const victims = k.victims || [];
  const want = victims[victims.length - 1];
  const got = st && st.proc;
  const ok = got && want && got.pid === want.pid && got.start === want.start;
  const which = got ? victims.find((v) => v.pid === got.pid && v.start === got.start) : null;
  return report(agent, sc, `the shell call's pre recorded the agent process (the client's ${want ? `${want.comm}, pid ${want.pid}` : '?'})`, ok,
    !st ? `no open call state file (${open.length} open)` : !got ? `call ${st.call} has no "proc"` :
      `recorded pid ${got.pid} start ${got.start}: ${which ? `the client's ${which.comm}` : st.procNow ? `${st.procNow.comm} (ppid ${st.procNow.ppid}${st.procNow.sameStart ? '' : ', another start time'}), not a client process` : 'no such process'}`);
}
// What `ckpt status --json` and `ckpt recover --json` said of the shell call
// while the client still ran (drive.js ran them just before the kill).
function whileRunningChecks(agent, sc, res, shellCall) {
  const k = (res.kills || [])[0] || {};
  const [stB, recB] = k.before || [];
  let st = null;
  let rec = null;
  try { st = JSON.parse(stB.stdout); } catch { /* none */ }
  try { rec = JSON.parse(recB.stdout); } catch { /* none */ }
  const sEntry = st && (st.uncertain_calls || []).find((c) => c.call === shellCall);
  report(agent, sc, 'status while the client still ran: the shell call\'s agent is "running"', sEntry && sEntry.agent === 'running',
    st ? `uncertain ${st.uncertain} ${JSON.stringify(st.uncertain_calls).slice(0, 200)}` : `status exit ${stB && stB.code}: ${tail(stB && stB.stderr, 160)}`);
  const rEntry = rec && (rec.calls || []).find((c) => c.call === shellCall);
  report(agent, sc, 'recover while the client still ran: the shell call is "running", left open', rEntry && rEntry.status === 'running',
    rec ? `exit ${recB.code}; ${JSON.stringify(rEntry || rec.calls).slice(0, 200)}` : `recover exit ${recB && recB.code}: ${tail(recB && recB.stderr, 160)}`);
  const nsB = (k.before || [])[2];
  if (nsB) {
    // A recover or rollback run there would close the running call (and
    // lose what it does after); status only says what they would do.
    let ns = null;
    try { ns = JSON.parse(nsB.stdout); } catch { /* none */ }
    const e = ns && (ns.uncertain_calls || []).find((c) => c.call === shellCall);
    report(agent, sc, 'status from another PID namespace while the client still ran: the shell call\'s agent not taken for "gone"', e && e.agent !== 'gone',
      ns ? `agent ${JSON.stringify(e && e.agent)}; ${JSON.stringify(ns.uncertain_calls).slice(0, 200)}` : `exit ${nsB.code}: ${tail(nsB.stderr, 160)}`);
  }
}
// What `ckpt status --json` said of the shell call once the client was gone,
// run inside the client's PID namespace (the harness's own status after the
// run is outside it, where the recorded pids name other processes).
function afterKillCheck(agent, sc, res, shellCall, want) {
  const [a] = res.after || [];
  let st = null;
  try { st = JSON.parse(a.stdout); } catch { /* none */ }
  const e = st && (st.uncertain_calls || []).find((c) => c.call === shellCall);
  return report(agent, sc, `status after the kill (in the client's PID namespace): the shell call's agent is "${want}"`, e && e.agent === want,
    st ? `uncertain ${st.uncertain} ${JSON.stringify(st.uncertain_calls).slice(0, 200)}` : `status exit ${a && a.code}: ${tail(a && a.stderr, 160)}`);
}
// The ledger's records of one call: statuses and the last error.
function callEnd(records, call) {
  const rs = records.filter((r) => r.kind === 'tool_call' && r.call === call);
  const last = rs[rs.length - 1];
  return { statuses: rs.map((r) => r.status), error: last && last.error, ended: rs.some((r) => r.status === 'succeeded' || r.status === 'failed') };
}
// rollback --call of the interrupted shell call: the file its orphaned child
// wrote goes, the earlier call's file stays.
function rollbackCallCheck(agent, sc, d, call, file, keep, wrote) {
  const rb = ckptJson(d.ws, ['rollback', '--call', call]);
  const gone = !fs.existsSync(path.join(d.ws, file));
  const kept = fs.existsSync(path.join(d.ws, keep));
  return report(agent, sc, `rollback --call <the shell call> takes ${file} out, keeps ${keep}`, rb.code === 0 && gone && kept,
    `exit ${rb.code}${rb.code ? ' ' + firstLine(rb.stderr) : ''}; ${file} ${wrote ? (gone ? 'removed' : 'still there') : 'was never written'}; ${keep} ${kept ? 'kept' : 'gone'}${rb.stderr.includes('without an after-event') || rb.stderr.includes('cut short') ? '; rollback said: ' + tail(rb.stderr, 200) : ''}`);
}

SCENARIOS['5-crash'] = (agent) => {
  const sc = '5-crash';
  const d = makeWorkspace(agent, sc);
  const baseline = treeState(d.ws);
  const ck = harnessCheckpoint(d);
  const res = runClient(agent, d, {}, {
    prompt: 'ckpt-e2e prompt five: killed mid-call',
    turns: [
      [{ op: 'write', path: 'before_crash.md', content: 'written before the crash\n' }],
      [{ op: 'shell', cmd: "sleep 2; printf 'done\\n' > crash.txt" }],
    ],
    kill: {
      atTurn: 1,
      delayMs: 800,
      stateDir: path.join(d.ws, '.agent-runtime/state/calls'),
      before: [
        { bin: CKPT, args: ['status', '--json'], cwd: d.ws },
        { bin: CKPT, args: ['recover', '--json'], cwd: d.ws },
        // From another PID namespace (a container beside the agent's, the
        // host of a devcontainer): there the recorded pid is no process, or another.
        { bin: 'unshare', args: ['-p', '-f', '--mount-proc', CKPT, 'status', '--json'], cwd: d.ws },
      ],
      after: [{ bin: CKPT, args: ['status', '--json'], cwd: d.ws }],
    },
    settleMs: 3000,
  });
  if (!clientOk(agent, sc, res, 2, true)) return null;
  for (const k of res.kills || []) console.log(`INFO ${agent} ${sc}: kill -9 of the client's processes ${JSON.stringify(k.victims)}`);
  const crashed = fs.existsSync(path.join(d.ws, 'crash.txt'));
  console.log(`INFO ${agent} ${sc}: the interrupted command's child ${crashed ? 'finished and wrote crash.txt' : 'did not write crash.txt'} after the client was killed`);
  const records = ledger(d.ws);
  const cs = calls(records);
  const open = cs.filter((c) => c.statuses.length === 1 && c.statuses[0] === 'started');
  const shellCall = open[0] && open[0].call;
  agentProcCheck(agent, sc, res, shellCall);
  whileRunningChecks(agent, sc, res, shellCall);
  afterKillCheck(agent, sc, res, shellCall, 'gone');
  report(agent, sc, 'the interrupted shell call recorded as started, with no end', open.length === 1, describeLedger(records));
  const st = ckptJson(d.ws, ['status']);
  const stEntry = st.json && (st.json.uncertain_calls || []).find((c) => c.call === shellCall);
  report(agent, sc, 'status lists the interrupted call as in doubt, its agent "gone"', st.json && st.json.uncertain === 1 && stEntry && stEntry.agent === 'gone',
    st.json ? `uncertain ${st.json.uncertain} ${JSON.stringify(st.json.uncertain_calls).slice(0, 200)}` : firstLine(st.stderr));
  const rec = ckptJson(d.ws, ['recover']);
  const recCalls = (rec.json && rec.json.calls) || [];
  const mine = recCalls.find((c) => open[0] && c.call === open[0].call);
  console.log(`INFO ${agent} ${sc}: recover exit ${rec.code}; its verdict on the call: ${JSON.stringify(mine || recCalls).slice(0, 300)}`);
  report(agent, sc, 'recover classifies the interrupted call', rec.code !== null && rec.json && mine, `exit ${rec.code}; ${tail(rec.stdout, 200)}`);
  const after = ledger(d.ws);
  const crashPatch = patches(after).filter((p) => p.path === 'crash.txt');
  report(agent, sc, 'what the interrupted call did (crash.txt) is recorded as its patch', !crashed || crashPatch.some((p) => p.call === shellCall),
    crashed ? (crashPatch.length ? `patch ${crashPatch[0].patch} by ${crashPatch[0].call}${crashPatch[0].call === shellCall ? ' (the shell call)' : `, not the shell call ${shellCall}`}` : `crash.txt exists on disk but no file_patch names it; recover said ${JSON.stringify(mine && (mine.verdict || mine.status || mine)).slice(0, 160)}`) : 'crash.txt never written');
  const end = shellCall ? callEnd(after, shellCall) : null;
  report(agent, sc, 'recover closed the shell call (its agent is gone)', end && end.ended, end ? `${end.statuses.join('>')}: ${end.error || ''}` : 'no shell call');
  if (shellCall) rollbackCallCheck(agent, sc, d, shellCall, 'crash.txt', 'before_crash.md', crashed);
  rollbackTo(agent, sc, d, ck, baseline, 'rollback --to the harness checkpoint takes the interrupted call\'s file out too');
  verify(agent, sc, d, 'after recover and rollback');
  return { d, res, records };
};

// The client told to stop (SIGINT to its agent process, as `kill -INT` or a
// supervisor would) while a shell command runs: which turn-end hooks it
// fires (each wrapped by capture-hook.sh), whether they close the call, and
// that a rollback --call (which closes a call whose agent is gone first)
// takes out what the command's child wrote.
SCENARIOS['5b-interrupt'] = (agent) => {
  const sc = '5b-interrupt';
  const capDir = path.join(RUN, agent, `${sc}-turn-end`);
  fs.mkdirSync(capDir, { recursive: true });
  const d = makeWorkspace(agent, sc, (ws) => {
    const f = settingsFile(agent, ws);
    const doc = JSON.parse(fs.readFileSync(f, 'utf8'));
    for (const [ev, groups] of Object.entries(doc.hooks || {})) {
      for (const g of groups) {
        for (const h of g.hooks || []) {
          if (/ hook turn-end\b/.test(h.command || '')) h.command = `sh ${path.join(HERE, 'capture-hook.sh')} ${capDir} ${ev} ${h.command}`;
        }
      }
    }
    fs.writeFileSync(f, JSON.stringify(doc, null, 2) + '\n');
  });
  const baseline = treeState(d.ws);
  const ck = harnessCheckpoint(d);
  const res = runClient(agent, d, {}, {
    prompt: 'ckpt-e2e prompt five b: interrupted mid-call',
    turns: [
      [{ op: 'write', path: 'before_interrupt.md', content: 'written before the interrupt\n' }],
      [{ op: 'shell', cmd: "sleep 2; printf 'done\\n' > interrupted.txt" }],
    ],
    kill: { atTurn: 1, delayMs: 800, signal: 'SIGINT', graceMs: 8000, stateDir: path.join(d.ws, '.agent-runtime/state/calls') },
    settleMs: 3000,
  });
  if (!clientOk(agent, sc, res, 2, true)) return null;
  const k = (res.kills || [])[0] || {};
  const esc = (res.escalated || [])[0];
  console.log(`INFO ${agent} ${sc}: ${k.signal} to ${JSON.stringify(k.target)} (client ${JSON.stringify(k.victims)}); client exit ${res.code} signal ${res.signal} ${res.ms} ms after start${esc ? `; still running 8 s after the signal: kill -9 of ${JSON.stringify(esc.victims)}` : ''}`);
  const fired = fs.readdirSync(capDir).filter((n) => n.endsWith('.json')).sort().map((n) => n.replace(/^\d+-\d+-/, '').replace(/\.json$/, ''));
  const wrote = fs.existsSync(path.join(d.ws, 'interrupted.txt'));
  console.log(`INFO ${agent} ${sc}: turn-end hooks that fired: ${fired.join(', ') || 'none'}; the command's child ${wrote ? 'wrote' : 'did not write'} interrupted.txt`);
  const records = ledger(d.ws);
  const cs = calls(records);
  const shellCall = ((k.openCalls || [])[0] || {}).call || (cs[1] && cs[1].call);
  agentProcCheck(agent, sc, res, shellCall);
  const end = shellCall ? callEnd(records, shellCall) : null;
  console.log(`INFO ${agent} ${sc}: the shell call before any recover or rollback: ${end ? `${end.statuses.join('>')}${end.error ? ': ' + end.error : ''}` : 'not in the ledger'}; ${describeLedger(records)}`);
  // Each client fires one when it stops on SIGINT (Claude Code SessionEnd,
  // Codex Interrupt and SessionEnd, Gemini SessionEnd); none firing is what
  // a stale Codex trust hash looks like (Codex skips the handler in silence).
  const sessionEnded = fired.length > 0;
  report(agent, sc, `a turn-end hook fired after the ${k.signal}`, sessionEnded, fired.join(', ') || 'none fired');
  if (sessionEnded) {
    const ps = patches(records).filter((p) => p.call === shellCall).map((p) => p.path);
    // Closed at the client's end with what its child wrote, or (a shell
    // call at a session's end, since 3717b50) left open for the close that
    // comes once its agent is gone: its command may still be writing.
    const st = ckptJson(d.ws, ['status']);
    const leftOpen = end && !end.ended && st.json && (st.json.uncertain_calls || []).some((c) => c.call === shellCall && c.agent === 'gone');
    report(agent, sc, `the interrupted shell call closed when the client ended (${fired.join(', ')} -> turn-end) with what its child wrote, or left for the close once its agent is gone`,
      (end && end.ended && (!wrote || ps.includes('interrupted.txt'))) || leftOpen,
      end ? `${end.statuses.join('>')}${end.error ? ': ' + end.error : ''}; its patches [${ps}]${leftOpen ? '; left open, status says its agent is gone' : ''}${end.ended && wrote && !ps.includes('interrupted.txt') ? '; interrupted.txt written after the call was closed' : ''}` : 'no shell call');
    report(agent, sc, 'nothing in doubt after the turn-end hook but a call whose agent is gone (status says so)',
      st.json && (st.json.uncertain_calls || []).every((c) => c.agent === 'gone'),
      st.json ? `uncertain ${st.json.uncertain} ${JSON.stringify(st.json.uncertain_calls).slice(0, 200)}` : firstLine(st.stderr));
  }
  if (shellCall) {
    // No recover: the rollback closes a call whose agent is gone first.
    rollbackCallCheck(agent, sc, d, shellCall, 'interrupted.txt', 'before_interrupt.md', wrote);
    const after = ledger(d.ws);
    const e2 = callEnd(after, shellCall);
    report(agent, sc, 'the shell call is closed after the rollback (by its client, turn-end or the rollback)', e2.ended, `${e2.statuses.join('>')}${e2.error ? ': ' + e2.error : ''}`);
  }
  rollbackTo(agent, sc, d, ck, baseline, 'rollback --to the harness checkpoint restores the crate byte for byte');
  verify(agent, sc, d, 'after the interrupt and rollbacks');
  return { d, res, records };
};

// Codex and Gemini only: the client started from a Claude Code Bash tool
// (which exports CLAUDE_PID to its commands; here CLAUDE_PID names the
// namespace's first process, drive.js, alive all through the run as that
// Claude Code would be), killed mid-call. The call's agent is the client,
// not the Claude Code it inherited CLAUDE_PID from: once the client is gone
// the call must not be taken for "running".
SCENARIOS['5c-nested-claude-pid'] = (agent) => {
  const sc = '5c-nested-claude-pid';
  if (agent === 'claude') return null;
  const d = makeWorkspace(agent, sc);
  const res = runClient(agent, d, {}, {
    prompt: 'ckpt-e2e prompt five c: started under Claude Code, killed mid-call',
    env: { CLAUDE_PID: '1' },
    turns: [
      [{ op: 'write', path: 'before_crash.md', content: 'written before the crash\n' }],
      [{ op: 'shell', cmd: "sleep 2; printf 'done\\n' > crash.txt" }],
    ],
    kill: {
      atTurn: 1,
      delayMs: 800,
      stateDir: path.join(d.ws, '.agent-runtime/state/calls'),
      after: [{ bin: CKPT, args: ['status', '--json'], cwd: d.ws }],
    },
    settleMs: 3000,
  });
  if (!clientOk(agent, sc, res, 2, true)) return null;
  const k = (res.kills || [])[0] || {};
  const shellCall = ((k.openCalls || [])[0] || {}).call;
  agentProcCheck(agent, sc, res, shellCall);
  afterKillCheck(agent, sc, res, shellCall, 'gone');
  return { d, res };
};

// Codex only, no client run: the suite's trust entries (codex-trust.js) are
// the ones `ckpt init --hooks codex --trust` writes, for every hook init
// registers (a handler whose hash differs is skipped by Codex in silence).
SCENARIOS['0b-trust-entries'] = (agent) => {
  const sc = '0b-trust-entries';
  if (agent !== 'codex') return null;
  const dir = path.join(RUN, agent, sc);
  const ws = path.join(dir, 'ws');
  const home = path.join(dir, 'codex-home');
  fs.mkdirSync(ws, { recursive: true });
  fs.mkdirSync(home, { recursive: true });
  git(ws, 'init', '-q', '-b', 'main');
  const r = sh(CKPT, ['init', '--hooks', 'codex', '--trust'], { cwd: ws, env: { ...process.env, CODEX_HOME: home, CKPT_WORKSPACE: undefined } });
  const parse = (text) => {
    const m = {};
    for (const x of text.matchAll(/^\[(.+)\]\s*\n\s*(\w+)\s*=\s*"([^"]*)"/gm)) m[`${x[1]} ${x[2]}`] = x[3];
    return m;
  };
  let theirs = {};
  try { theirs = parse(fs.readFileSync(path.join(home, 'config.toml'), 'utf8')); } catch { /* none */ }
  const ours = parse(trustEntries(ws));
  const keys = [...new Set([...Object.keys(theirs), ...Object.keys(ours)])].sort();
  const diff = keys.filter((k) => theirs[k] !== ours[k]).map((k) => `${k.replace(/^hooks\.state\."[^"]*hooks\.json:/, '').replace(/"/g, '')}: init ${theirs[k] ? theirs[k].slice(0, 16) : 'none'}, suite ${ours[k] ? ours[k].slice(0, 16) : 'none'}`);
  const events = keys.filter((k) => k.startsWith('hooks.state.')).map((k) => (/:([a-z_]+):\d+:\d+"/.exec(k) || [])[1]);
  return report(agent, sc, 'codex-trust.js gives the entries `ckpt init --hooks codex --trust` writes', r.code === 0 && keys.length > 1 && diff.length === 0,
    r.code !== 0 ? `init exit ${r.code}: ${firstLine(r.stderr)}` : diff.length ? diff.join('; ') : `${keys.length} entries (${events.join(', ')})`);
};

// Codex and Gemini only: the trust the client needs, missing. Not silent is a PASS.
SCENARIOS['0-untrusted'] = (agent) => {
  const sc = '0-untrusted';
  if (agent === 'claude') return null;
  const d = makeWorkspace(agent, sc);
  const baseline = treeState(d.ws);
  harnessCheckpoint(d);
  const sco = { trust: agent === 'codex' ? 'project-only' : 'none' };
  const res = runClient(agent, d, sco, {
    prompt: 'ckpt-e2e prompt zero: hooks installed, client trust not set up',
    turns: [[{ op: 'shell', cmd: "printf 'x\\n' > untrusted.txt" }]],
  });
  const ran = treeDiff(baseline, treeState(d.ws)).length > 0;
  const records = ledger(d.ws);
  const recorded = calls(records).length > 0;
  const said = /hook/i.test(res.stderr || '') || /hook/i.test(res.stdout || '');
  // The client may say nothing (Codex skips untrusted hooks in silence):
  // then `ckpt status`, what a user runs after a session, must say it.
  const st = ckptAs(agent, d, sco, ['status']);
  const statusSays = /will not run|skips these hooks|does not trust|ignores the project's hooks/.test(st.stderr || '');
  const how = agent === 'codex' ? 'project trusted, no [hooks.state] trust entries' : 'no GEMINI_CLI_TRUST_WORKSPACE, no trustedFolders.json';
  report(agent, sc, `no call runs unrecorded without a word (${how}): from the client, or from ckpt status`, !ran || recorded || said || statusSays,
    `client exit ${res.code}; the call ${ran ? 'ran' : 'did not run'}; ledger ${recorded ? 'recorded it' : 'empty'}; client output ${said ? 'mentions hooks' : 'never mentions hooks'}; ckpt status ${statusSays ? 'warns: ' + tail(st.stderr, 200) : 'says nothing: ' + tail(st.stderr, 120)}${res.code ? '; stderr ' + tail(res.stderr, 160) : ''}`);
  // ckpt doctor with the client's environment (its CODEX_HOME, or its
  // GEMINI_CLI_HOME and no GEMINI_CLI_TRUST_WORKSPACE) names the problem.
  const code = agent === 'codex' ? 'codex_untrusted' : 'gemini_untrusted';
  const doc = doctor(agent, sc, d, sco, false);
  const found = doc.probs.find((p) => p.code === code);
  report(agent, sc, `ckpt doctor --json with the client's env exits 4 naming ${code}`, doc.r.code === 4 && found && found.level === 'error',
    doc.r.json ? `exit ${doc.r.code}; ${agent}: ${problemList(doc.probs)}` : `exit ${doc.r.code}: ${tail(doc.r.stderr, 200)}`);
  return { d, res, records };
};

SCENARIOS['6-resume'] = (agent) => {
  const sc = '6-resume';
  if (agent !== 'claude') return null;
  const d = makeWorkspace(agent, sc);
  const A = { op: 'write', path: 'A.md', content: 'from prompt one\n' };
  const B = { op: 'write', path: 'B.md', content: 'from prompt two\n' };
  const Cw = { op: 'write', path: 'C.md', content: 'from prompt three\n' };
  const r1 = runClient(agent, d, {}, { prompt: 'ckpt-e2e prompt one', turns: [[A]] });
  clientOk(agent, sc, r1, 1);
  const sid = CLIENTS.claude.sessionOf(r1);
  const r2 = runClient(agent, d, {}, { args: CLIENTS.claude.args('ckpt-e2e prompt two', ['--resume', sid]), turns: [[A], [B]] });
  clientOk(agent, sc, r2, 1); // turn 0 is in the resumed history; the mock serves turn 1
  const records = ledger(d.ws);
  const cks = records.filter((r) => r.kind === 'checkpoint' && r.session === sid);
  const c1 = cks.find((r) => r.label === 'ckpt-e2e prompt one');
  const c2 = cks.find((r) => r.label === 'ckpt-e2e prompt two');
  report(agent, sc, 'both prompts checkpointed in the session', c1 && c2, `checkpoints ${JSON.stringify(cks.map((r) => r.label))}`);
  if (!c1 || !c2) return { d };
  const first = ckptJson(d.ws, ['restore-session', '--session', sid, '--to', c1.checkpoint, '--claude']);
  report(agent, sc, 'restore-session --claude to the first prompt\'s checkpoint', first.code === 0, first.code === 0 ? first.json && first.json.claude_resume : `exit ${first.code}: ${firstLine(first.stderr)}`);
  const rs = ckptJson(d.ws, ['restore-session', '--session', sid, '--to', c2.checkpoint, '--with-files', '--claude']);
  const ok = rs.code === 0 && rs.json && rs.json.claude_session;
  report(agent, sc, 'restore-session --with-files --claude to the second prompt', ok, ok ? rs.json.claude_resume : `exit ${rs.code}: ${firstLine(rs.stderr)}`);
  report(agent, sc, 'files back at prompt two\'s start (A.md kept, B.md gone)', fs.existsSync(path.join(d.ws, 'A.md')) && !fs.existsSync(path.join(d.ws, 'B.md')), '');
  if (!ok) return { d };
  const r3 = runClient(agent, d, {}, { args: CLIENTS.claude.args('ckpt-e2e prompt three', ['--resume', rs.json.claude_session]), turns: [[A], [Cw]] });
  clientOk(agent, sc, r3, 1); // turn 0 is in the fork's history; the mock serves turn 1
  const firstMain = (r3.requests || []).find((q) => q.kind === 'main');
  const texts = (firstMain && firstMain.userText) || [];
  report(agent, sc, 'claude --resume of the fork sends prompt one\'s history and not prompt two\'s',
    texts.some((t) => t.includes('prompt one')) && !texts.some((t) => t.includes('prompt two')) && texts.some((t) => t.includes('prompt three')),
    `user texts in the first request: ${JSON.stringify(texts)}; tool results ${firstMain && firstMain.results}`);
  const rec3 = ledger(d.ws);
  const cCall = patches(rec3).find((p) => p.path === 'C.md');
  report(agent, sc, 'the resumed fork\'s call recorded', cCall, cCall ? `session ${cCall.session} (fork ${rs.json.claude_session})` : describeLedger(rec3));
  verify(agent, sc, d, 'after restore-session and resume');
  return { d };
};

// ---------------------------------------------------------------- capture
function captureSettings(agent, capDir) {
  const C = CLIENTS[agent];
  return (ws) => {
    const f = settingsFile(agent, ws);
    const doc = JSON.parse(fs.readFileSync(f, 'utf8'));
    const wrap = (ev, cmd) => `sh ${path.join(HERE, 'capture-hook.sh')} ${capDir} ${ev}${cmd ? ' ' + cmd : ''}`;
    for (const [ev, groups] of Object.entries(doc.hooks)) {
      for (const g of groups) for (const h of g.hooks || []) h.command = wrap(ev, h.command);
    }
    for (const ev of C.extraCaptureEvents) {
      if (doc.hooks[ev]) continue;
      const h = { type: 'command', command: wrap(ev, null), timeout: agent === 'gemini' ? 30000 : 30 };
      doc.hooks[ev] = [{ hooks: [h] }];
    }
    fs.writeFileSync(f, JSON.stringify(doc, null, 2) + '\n');
  };
}

// Writes the captured payloads of one run as fixtures: one file per event,
// paths anonymised. Files already there are overwritten, never deleted.
function writeFixtures({ agent, capDir, ws, clientHome, home, bin, out }) {
  fs.mkdirSync(out, { recursive: true });
  const wsReal = fs.realpathSync(ws);
  const slug = (p) => p.replace(/[^A-Za-z0-9]/g, '-');
  const subs = [
    [clientHome, agent === 'claude' ? '$HOME/.claude' : agent === 'codex' ? '$HOME/.codex' : '$HOME'],
    [wsReal, '$WS'],
    [ws, '$WS'],
    [slug(wsReal), '-WS-SLUG'],
    [home, '$HOME'],
    [bin, '/CKPT_BIN'],
    [capDir, '/CAPTURE_DIR'],
    [HERE, '/HARNESS'],
    [CACHE, '$CKPT_REAL_AGENTS_CACHE'],
  ];
  const anon = (s) => { for (const [a, b] of subs) s = s.split(a).join(b); return s; };
  const counts = {};
  const names = [];
  const processInfo = {};
  for (const f of fs.readdirSync(capDir).filter((n) => n.endsWith('.json')).sort()) {
    const raw = fs.readFileSync(path.join(capDir, f), 'utf8');
    let doc;
    try { doc = JSON.parse(raw); } catch { continue; }
    const ev = doc.hook_event_name || f.replace(/^\d+-\d+-/, '').replace(/\.json$/, '');
    let name = doc.tool_name ? `${ev}-${doc.tool_name}` : ev;
    if (JSON.stringify(doc.tool_input || {}).includes('exit 2')) name += '-fail';
    counts[name] = (counts[name] || 0) + 1;
    if (counts[name] > 1) name += `-${counts[name]}`;
    fs.writeFileSync(path.join(out, `${name}.json`), anon(JSON.stringify(doc, null, 2)) + '\n');
    names.push(name);
    const meta = path.join(capDir, f.replace(/\.json$/, '.meta'));
    if (fs.existsSync(meta) && !processInfo[ev]) {
      const lines = fs.readFileSync(meta, 'utf8').trim().split('\n');
      processInfo[ev] = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf('=')), anon(l.slice(l.indexOf('=') + 1))]));
    }
  }
  fs.writeFileSync(path.join(out, '_hook-process.txt'),
    `# The hook process's cwd and the ${agent} environment variables it got, per event\n# (captured by tests/real_agents/capture-hook.sh; keys, tokens and secrets filtered).\n` +
    Object.entries(processInfo).map(([ev, m]) => `${ev}: ${JSON.stringify(m)}`).join('\n') + '\n');
  return names;
}

function capture(agent) {
  const sc = 'capture';
  const capDir = path.join(RUN, agent, 'captured');
  fs.mkdirSync(capDir, { recursive: true });
  const d = makeWorkspace(agent, sc, captureSettings(agent, capDir));
  const res = runClient(agent, d, {}, {
    prompt: 'ckpt-e2e capture: every tool once',
    turns: [
      [{ op: 'edit', path: 'src/lib.rs', old: LIB_OLD, new: LIB_NEW }],
      [{ op: 'write', path: 'NOTES.md', content: 'agent notes\n' }],
      [{ op: 'shell', cmd: CARGO_SHELL }],
      [{ op: 'shell', cmd: "printf 'partial\\n' > failing.txt; exit 2" }],
      [{ op: 'read', path: 'Cargo.toml' }],
    ],
  });
  if (!clientOk(agent, sc, res, 5)) return null;
  const rel = `${agent}/real-${VERSIONS[agent]}`;
  const out = opt.writeFixtures ? path.join(REPO, 'testdata/hooks', rel) : path.join(RUN, 'fixtures', rel);
  const names = writeFixtures({ agent, capDir, ws: d.ws, clientHome: d.clientHome, home: d.home, bin: BIN, out });
  report(agent, sc, `hook payloads captured into ${path.relative(REPO, out).startsWith('..') ? out : path.relative(REPO, out)}/`, names.length > 0, names.join(' '));
  // The capture run went through ckpt too: what did it make of the calls?
  const records = ledger(d.ws);
  const cs = calls(records);
  const failing = cs[3];
  report(agent, sc, 'the failing shell command (exit 2) recorded as failed', failing && failing.statuses.includes('failed'),
    failing ? `${failing.tool}: ${failing.statuses.join('>')}` : describeLedger(records));
  // A read-only call (Claude Read, Gemini read_file) is one record at its
  // end, no started record; Codex reads with a shell command (`cat`).
  const want = ['started>succeeded', 'started>succeeded', 'started>succeeded', 'started>failed', agent === 'codex' ? 'started>succeeded' : 'succeeded'];
  report(agent, sc, '5 calls recorded start to end (the read as one record where it is a read-only tool)',
    cs.length === 5 && cs.every((c, i) => c.statuses.join('>') === want[i]), describeLedger(records));
  return { d, res, names };
}

// ---------------------------------------------------------------- overhead
function median(xs) { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN; }
// The settings file ckpt wrote with every hook command replaced by `true`:
// the client still spawns one hook process per event (and, for Codex, the
// trust entries are computed from this file, so it runs them), but the hook
// does nothing. Separates the client's own cost of running hooks from ckpt's.
function noopSettings(agent) {
  return (ws) => {
    const f = settingsFile(agent, ws);
    const doc = JSON.parse(fs.readFileSync(f, 'utf8'));
    let n = 0;
    for (const groups of Object.values(doc.hooks || {})) {
      for (const g of groups) for (const h of g.hooks || []) { if (h.type === 'command' || h.command) { h.command = 'true'; n++; } }
    }
    if (n === 0) throw new Error(`no hook command in ${f}`);
    fs.writeFileSync(f, JSON.stringify(doc, null, 2) + '\n');
  };
}
const OVERHEAD_MODES = ['with', 'noop', 'without'];
function overhead(agent, n) {
  const sc = 'overhead';
  const turns = [
    [{ op: 'edit', path: 'src/lib.rs', old: LIB_OLD, new: LIB_NEW }],
    [{ op: 'write', path: 'NOTES.md', content: 'agent notes\n' }],
    [{ op: 'shell', cmd: CARGO_SHELL }],
    [{ op: 'read', path: 'Cargo.toml' }],
  ];
  // with: ckpt's hooks; noop: the same settings file, every command `true`;
  // without: the settings file removed.
  const times = { with: [], noop: [], without: [] };
  // Besides the client's wall time, the time from its first model request to
  // its last: the tool calls and their hooks, without start-up and shutdown
  // (much less noisy).
  const tools = { with: [], noop: [], without: [] };
  const edits = {
    with: null,
    noop: noopSettings(agent),
    without: (ws) => fs.rmSync(settingsFile(agent, ws)),
  };
  const ws = {};
  for (const mode of OVERHEAD_MODES) ws[mode] = makeWorkspace(agent, `${sc}-${mode}`, edits[mode]);
  // The modes interleaved run by run, so that a change in the machine's load
  // during the measurement falls on all three alike.
  const failures = [];
  for (let i = 0; i < n; i++) {
    for (const mode of OVERHEAD_MODES) {
      const d = ws[mode];
      git(d.ws, 'checkout', '-q', '--', '.');
      git(d.ws, 'clean', '-qfd', '-e', '.agent-runtime');
      const res = runClient(agent, d, {}, { prompt: `ckpt-e2e overhead run ${i}`, turns });
      const ts = (res.requests || []).filter((q) => q.kind === 'main').map((q) => q.t);
      if (res.code === 0) {
        times[mode].push(res.ms);
        if (ts.length === turns.length + 1) tools[mode].push(ts[ts.length - 1] - ts[0]);
        else failures.push(`${mode} run ${i}: ${ts.length} model requests, not ${turns.length + 1}`);
      } else failures.push(`${mode} run ${i}: exit ${res.code}${res.error ? ' ' + res.error : ''} ${tail(res.stderr, 200)}`);
    }
  }
  // noop must have run no ckpt at all (nothing recorded), with must have
  // recorded the 4 calls of every run.
  const recorded = {};
  for (const mode of ['with', 'noop']) recorded[mode] = calls(ledger(ws[mode].ws)).length;
  const mw = median(times.with);
  const mn = median(times.noop);
  const mo = median(times.without);
  const calls_ = turns.length;
  const tw = median(tools.with);
  const tn = median(tools.noop);
  const to = median(tools.without);
  const per = (a, b) => ((a - b) / calls_).toFixed(0);
  console.log(`INFO ${agent} overhead: client wall time, median of ${times.with.length} runs with ckpt's hooks ${mw} ms, of ${times.without.length} without ${mo} ms: ${per(mw, mo)} ms per call (${calls_} calls a run) ${JSON.stringify(times)}`);
  console.log(`INFO ${agent} overhead: first to last model request (the calls and their hooks), median with ${tw} ms, without ${to} ms: ${per(tw, to)} ms per call ${JSON.stringify(tools)}`);
  console.log(`INFO ${agent} overhead: noop hooks (ckpt's settings file, every command \`true\`), median of ${times.noop.length} runs: client wall time ${mn} ms, first to last model request ${tn} ms`);
  console.log(`INFO ${agent} overhead: first to last model request, median ckpt ${tw} / noop ${tn} / none ${to} ms; per call (${calls_} calls): ckpt - none ${per(tw, to)} ms, noop - none ${per(tn, to)} ms (the client running hooks), ckpt - noop ${per(tw, tn)} ms (ckpt itself); wall time per call: ckpt - none ${per(mw, mo)}, noop - none ${per(mn, mo)}, ckpt - noop ${per(mw, mn)} ms`);
  console.log(`INFO ${agent} overhead: calls recorded in the ledger: with ${recorded.with} (${calls_} x ${times.with.length} runs expected), noop ${recorded.noop} (0 expected)${failures.length ? `; runs left out: ${failures.join('; ')}` : ''}`);
  return {
    mw, mn, mo, perCall: (mw - mo) / calls_, times, tools, perCallTools: (tw - to) / calls_,
    tw, tn, to, calls: calls_, perCallNoopTools: (tn - to) / calls_, perCallCkptOverNoopTools: (tw - tn) / calls_, recorded, failures,
  };
}
function overheadTable(ov) {
  const rows = Object.entries(ov).filter(([, o]) => o && o.calls);
  if (!rows.length) return;
  const f = (x) => (Number.isFinite(x) ? x.toFixed(0) : 'n/a');
  console.log('\noverhead, first to last model request, medians (ms; per call = difference / calls a run):');
  console.log('client  runs  ckpt   noop   none   ckpt-none/call  noop-none/call  ckpt-noop/call');
  for (const [agent, o] of rows) {
    const r = `${o.tools.with.length}/${o.tools.noop.length}/${o.tools.without.length}`;
    console.log(`${agent.padEnd(7)} ${r.padEnd(5)} ${f(o.tw).padStart(5)}  ${f(o.tn).padStart(5)}  ${f(o.to).padStart(5)}  ${f(o.perCallTools).padStart(14)}  ${f(o.perCallNoopTools).padStart(14)}  ${f(o.perCallCkptOverNoopTools).padStart(14)}`);
  }
}

// ---------------------------------------------------------------- main
if (opt.fixturesFrom) {
  // Rewrite the fixtures from a kept run's captures (no client is run).
  for (const agent of opt.agents) {
    const from = path.resolve(opt.fixturesFrom);
    const capDir = path.join(from, agent, 'captured');
    if (!fs.existsSync(capDir)) continue;
    const d = path.join(from, agent, 'capture');
    const rel = `${agent}/real-${VERSIONS[agent]}`;
    const out = opt.writeFixtures ? path.join(REPO, 'testdata/hooks', rel) : path.join(RUN, 'fixtures', rel);
    const names = writeFixtures({ agent, capDir, ws: path.join(d, 'ws'), clientHome: path.join(d, 'client-home'), home: path.join(d, 'home'), bin: path.join(from, 'bin'), out });
    console.log(`${agent}: ${names.length} payloads from ${capDir} written to ${out}`);
  }
  if (!opt.keep) fs.rmSync(RUN, { recursive: true, force: true });
  process.exit(0);
}
const ORDER = ['0-untrusted', '0b-trust-entries', '1-basic', '2-user-edits', '3-subdir', '3b-subdir-settings-local', '3c-subdir-user', '3d-user-uninitialized', '4-parallel', '5-crash', '5b-interrupt', '5c-nested-claude-pid', '6-resume'];
const summary = { run: RUN, versions: {}, results, overhead: {} };
{
  const rev = sh('git', ['-C', REPO, 'describe', '--always', '--dirty']).stdout.trim();
  const dirty = sh('git', ['-C', REPO, 'status', '--porcelain', '--', 'src']).stdout.trim().split('\n').filter(Boolean).length;
  const repoAt = `${rev}${dirty ? ` (${dirty} changed file(s) under src/)` : ''}`;
  // With CKPT_BIN the binary was built elsewhere, maybe from another commit.
  summary.ckpt = `${firstLine(sh(CKPT, ['--version']).stdout)} ${process.env.CKPT_BIN ? `given as CKPT_BIN (the repo is at ${repoAt})` : `built from ${repoAt}`}`;
  console.log(`ckpt: ${summary.ckpt} (${CKPT_BUILT})`);
}
for (const agent of opt.agents) {
  const v = sh(CLIENTS[agent].bin(), ['--version']);
  summary.versions[agent] = firstLine(v.stdout);
  console.log(`== ${agent} ${firstLine(v.stdout)} (${CLIENTS[agent].bin()})`);
  for (const name of ORDER) {
    if (opt.only && !opt.only.some((o) => name.startsWith(o) || name === o)) continue;
    try {
      SCENARIOS[name](agent);
    } catch (e) {
      report(agent, name, 'scenario ran', false, String(e && e.stack || e).split('\n').slice(0, 3).join(' | '));
    }
  }
  if (opt.capture && (!opt.only || opt.only.includes('capture'))) {
    try { capture(agent); } catch (e) { report(agent, 'capture', 'capture ran', false, String(e && e.stack || e).split('\n')[0]); }
  }
  if (opt.overhead > 0) {
    try { summary.overhead[agent] = overhead(agent, opt.overhead); } catch (e) { console.log(`INFO ${agent} overhead failed: ${e}`); }
  }
}
if (opt.overhead > 0) overheadTable(summary.overhead);
const failed = results.filter((r) => !r.pass);
if (failed.length) {
  console.log('\nFAILED:');
  for (const r of failed) console.log(`  ${r.agent} ${r.scenario}: ${r.name}`);
}
fs.writeFileSync(path.join(RUN, 'summary.json'), JSON.stringify(summary, null, 2));
console.log(`\n${results.length - failed.length} PASS, ${failed.length} FAIL (${Object.entries(summary.versions).map(([a, v]) => `${a} ${v}`).join(', ')})`);
if (opt.keep) console.log(`kept ${RUN}`);
else fs.rmSync(RUN, { recursive: true, force: true });
process.exit(failed.length ? 1 : 0);
