#!/usr/bin/env node
// Prints the `$CODEX_HOME/config.toml` entries Codex needs before it runs a
// project's `.codex/hooks.json` (Codex 0.171, behaviour read from
// codex-rs/hooks/src/engine/discovery.rs and config_rules.rs, confirmed by
// the harness: without them `codex exec` runs no project hook and says
// nothing):
//
//   [projects."<abs project>"]            trust_level = "trusted"
//   [hooks.state."<abs>/.codex/hooks.json:<event>:<group>:<handler>"]
//   trusted_hash = "sha256:<hex>"
//
// The hash is sha256 over the handler's identity as compact JSON with every
// object's keys sorted: {"event_name": "<snake_case event>", "hooks":
// [{"async": false, "command": "<cmd>", "timeout": <sec, default 600>,
// "type": "command"}], "matcher": "<matcher>"} (matcher left out for the
// events that take none; statusMessage only when set). Codex clamps the
// timeout of Interrupt and SessionEnd to 3 s and hashes the value as written,
// so `ckpt init --hooks codex` writes 3 there: a handler that says anything
// else gets a hash Codex never matches (the handler is skipped in silence).
//
//   node codex-trust.js PROJECT_DIR   -> TOML on stdout
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');

const EVENT_LABELS = {
  PreToolUse: 'pre_tool_use',
  PostToolUse: 'post_tool_use',
  PermissionRequest: 'permission_request',
  SessionStart: 'session_start',
  UserPromptSubmit: 'user_prompt_submit',
  Stop: 'stop',
  Interrupt: 'interrupt',
  SessionEnd: 'session_end',
};
// Events whose matcher Codex ignores (it hashes them with no matcher).
const NO_MATCHER = new Set(['UserPromptSubmit', 'Stop', 'Interrupt', 'SessionEnd']);

function sortedJson(v) {
  if (Array.isArray(v)) return `[${v.map(sortedJson).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${sortedJson(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

function trustEntries(projectDir) {
  const abs = fs.realpathSync(projectDir);
  const file = path.join(abs, '.codex', 'hooks.json');
  const doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  const out = [`[projects.${JSON.stringify(abs)}]`, 'trust_level = "trusted"', ''];
  for (const [event, groups] of Object.entries(doc.hooks || {})) {
    const label = EVENT_LABELS[event];
    if (!label) continue;
    groups.forEach((group, gi) => {
      (group.hooks || []).forEach((h, hi) => {
        if (h.type !== 'command') return;
        const handler = {
          type: 'command',
          command: h.command,
          timeout: Math.max(1, h.timeout ?? h.timeoutSec ?? 600),
          async: Boolean(h.async),
        };
        if (h.statusMessage) handler.statusMessage = h.statusMessage;
        const identity = { event_name: label, hooks: [handler] };
        const matcher = NO_MATCHER.has(event) ? undefined : group.matcher;
        if (matcher !== undefined && matcher !== null) identity.matcher = matcher;
        const hash = 'sha256:' + crypto.createHash('sha256').update(sortedJson(identity)).digest('hex');
        out.push(`[hooks.state.${JSON.stringify(`${file}:${label}:${gi}:${hi}`)}]`, `trusted_hash = "${hash}"`, '');
      });
    });
  }
  return out.join('\n');
}

if (require.main === module) process.stdout.write(trustEntries(process.argv[2] || '.'));
module.exports = { trustEntries };
