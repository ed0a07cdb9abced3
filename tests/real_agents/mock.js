// Scripted mock model APIs for the real-agent harness: plain node:http, no
// dependencies. One server speaks one wire format:
//
//   anthropic  POST /v1/messages (stream: true -> SSE; tool_use blocks)
//   responses  POST /v1/responses (OpenAI Responses API, SSE; function_call /
//              custom_tool_call items) -- what Codex's `wire_api = "responses"` talks
//   gemini     POST /v1beta/models/<m>:streamGenerateContent?alt=sse (SSE) and
//              :generateContent / :countTokens (JSON)
//
// A script is {turns: [[call, ...], ...], final: "text"}; each call is
// {name, input} (input an object; for a Responses "custom" tool such as
// apply_patch, {name, custom: true, input: "<freeform text>"}). Which turn a
// request is at is computed from the request itself: the number of tool
// results it carries (so a client that retries, resumes or forks gets the
// same answer for the same history). A turn's calls are sent in one model
// message (parallel calls when there are several). After the last turn the
// model answers `final` as text and stops.
//
// Requests that are not the main conversation (no tools offered: titles,
// summaries, classifiers, next-speaker checks) get a short text answer; every
// request is logged (method, url, a digest of the body) through `log`.
'use strict';

const http = require('node:http');

function countResults(format, body) {
  let n = 0;
  if (format === 'anthropic') {
    for (const m of body.messages || []) {
      if (Array.isArray(m.content)) {
        for (const b of m.content) if (b && b.type === 'tool_result') n++;
      }
    }
  } else if (format === 'responses') {
    for (const it of body.input || []) {
      if (it && typeof it.type === 'string' && it.type.endsWith('_call_output')) n++;
    }
  } else if (format === 'gemini') {
    for (const c of body.contents || []) {
      for (const p of c.parts || []) if (p && p.functionResponse) n++;
    }
  }
  return n;
}

// The turn whose calls come after `results` tool results, or -1 after the
// last turn, or -2 when `results` falls inside a turn (a partial answer).
function turnFor(script, results) {
  let seen = 0;
  for (let k = 0; k < script.turns.length; k++) {
    if (seen === results) return k;
    seen += script.turns[k].length;
    if (seen > results) return -2;
  }
  return seen === results ? -1 : -2;
}

// The user's own words in the request (prompts, not tool results), for
// checks on what history a resumed or forked session carried.
function userTexts(format, body) {
  const out = [];
  const add = (t) => { if (typeof t === 'string' && t.includes('ckpt-e2e')) out.push(t.slice(0, 200)); };
  if (format === 'anthropic') {
    for (const m of body.messages || []) {
      if (m.role !== 'user') continue;
      if (typeof m.content === 'string') add(m.content);
      else for (const b of m.content || []) if (b.type === 'text') add(b.text);
    }
  } else if (format === 'responses') {
    for (const it of body.input || []) {
      if (it.role === 'user') for (const c of it.content || []) add(c.text);
    }
  } else {
    for (const c of body.contents || []) if (c.role === 'user') for (const p of c.parts || []) add(p.text);
  }
  return out;
}

function offersTools(format, body) {
  if (format === 'anthropic') return Array.isArray(body.tools) && body.tools.length > 0;
  if (format === 'responses') return Array.isArray(body.tools) && body.tools.length > 0;
  if (format === 'gemini') {
    return Array.isArray(body.tools) && body.tools.some((t) => (t.functionDeclarations || []).length > 0);
  }
  return false;
}

function sseWrite(res, event, data) {
  if (event) res.write(`event: ${event}\n`);
  res.write(`data: ${JSON.stringify(data)}\n\n`);
}

let idCounter = 0;
function nextId(prefix) {
  idCounter++;
  return `${prefix}${Date.now().toString(36)}${idCounter.toString().padStart(4, '0')}`;
}

// ---- Anthropic Messages API ----
function anthropicReply(res, body, calls, text) {
  const model = body.model || 'claude-mock';
  const msgId = nextId('msg_mock');
  const usage = { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
  const blocks = [];
  if (text) blocks.push({ type: 'text', text });
  for (const c of calls || []) blocks.push({ type: 'tool_use', id: c.id || nextId('toolu_mock'), name: c.name, input: c.input });
  const stop = calls && calls.length ? 'tool_use' : 'end_turn';
  if (!body.stream) {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: msgId, type: 'message', role: 'assistant', model, content: blocks, stop_reason: stop, stop_sequence: null, usage }));
    return blocks;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  sseWrite(res, 'message_start', { type: 'message_start', message: { id: msgId, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage } });
  blocks.forEach((b, index) => {
    if (b.type === 'text') {
      sseWrite(res, 'content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
      sseWrite(res, 'content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text: b.text } });
    } else {
      sseWrite(res, 'content_block_start', { type: 'content_block_start', index, content_block: { type: 'tool_use', id: b.id, name: b.name, input: {} } });
      sseWrite(res, 'content_block_delta', { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(b.input) } });
    }
    sseWrite(res, 'content_block_stop', { type: 'content_block_stop', index });
  });
  sseWrite(res, 'message_delta', { type: 'message_delta', delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: 5 } });
  sseWrite(res, 'message_stop', { type: 'message_stop' });
  res.end();
  return blocks;
}

// ---- OpenAI Responses API ----
function responsesReply(res, body, calls, text) {
  const respId = nextId('resp_mock');
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  sseWrite(res, 'response.created', { type: 'response.created', response: { id: respId } });
  const items = [];
  if (text) {
    items.push({ type: 'message', role: 'assistant', id: nextId('msg_mock'), content: [{ type: 'output_text', text }] });
  }
  for (const c of calls || []) {
    const callId = c.id || nextId('call_mock');
    if (c.custom) {
      items.push({ type: 'custom_tool_call', id: nextId('ctc_mock'), status: 'completed', call_id: callId, name: c.name, input: c.input });
    } else {
      items.push({ type: 'function_call', id: nextId('fc_mock'), status: 'completed', call_id: callId, name: c.name, arguments: JSON.stringify(c.input) });
    }
  }
  items.forEach((item, output_index) => {
    sseWrite(res, 'response.output_item.added', { type: 'response.output_item.added', output_index, item });
    sseWrite(res, 'response.output_item.done', { type: 'response.output_item.done', output_index, item });
  });
  sseWrite(res, 'response.completed', {
    type: 'response.completed',
    response: {
      id: respId,
      usage: { input_tokens: 10, input_tokens_details: null, output_tokens: 5, output_tokens_details: null, total_tokens: 15 },
    },
  });
  res.end();
  return items;
}

// ---- Gemini generateContent ----
function geminiCandidate(calls, text) {
  const parts = [];
  if (text) parts.push({ text });
  for (const c of calls || []) parts.push({ functionCall: { name: c.name, args: c.input } });
  return {
    candidates: [{ content: { role: 'model', parts }, finishReason: 'STOP', index: 0 }],
    usageMetadata: { promptTokenCount: 10, candidatesTokenCount: 5, totalTokenCount: 15 },
    modelVersion: 'gemini-mock',
  };
}

function geminiReply(res, url, calls, text) {
  const reply = geminiCandidate(calls, text);
  if (url.includes(':streamGenerateContent')) {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    sseWrite(res, null, reply);
    res.end();
  } else {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(reply));
  }
  return reply.candidates[0].content.parts;
}

// The text a side request (no tools) gets. Gemini's JSON classifiers get JSON.
function sideText(format, body) {
  if (format === 'gemini') {
    const s = JSON.stringify(body.generationConfig || {});
    if (s.includes('next_speaker')) return JSON.stringify({ reasoning: 'mock', next_speaker: 'user' });
    if (s.includes('responseSchema') || s.includes('responseJsonSchema') || s.includes('application/json')) {
      return JSON.stringify({ reasoning: 'mock', model_choice: 'flash', complexity_reasoning: 'mock', complexity_score: 1 });
    }
  }
  return 'ok';
}

/**
 * startMock({format, script, log, onTurn}) -> Promise<{port, server, stats}>
 * `script` may be replaced later through `mock.setScript`. `onTurn(k, req)`
 * is awaited before turn k is answered (the harness makes user edits there).
 */
function startMock(opts) {
  const { format } = opts;
  let script = opts.script;
  const log = opts.log || (() => {});
  const stats = { requests: 0, turnsServed: [], lastTurnServedAt: {} };
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      stats.requests++;
      const raw = Buffer.concat(chunks).toString('utf8');
      let body = {};
      try { body = raw ? JSON.parse(raw) : {}; } catch { body = {}; }
      const url = req.url || '';
      const entry = { t: Date.now(), method: req.method, url, bytes: raw.length };
      if (opts.dumpDir) {
        require('node:fs').writeFileSync(`${opts.dumpDir}/req-${String(stats.requests).padStart(3, '0')}.json`, raw);
      }
      try {
        const isMain =
          (format === 'anthropic' && req.method === 'POST' && /^\/v1\/messages(\?|$)/.test(url)) ||
          (format === 'responses' && req.method === 'POST' && /\/responses(\?|$)/.test(url)) ||
          (format === 'gemini' && req.method === 'POST' && /:(stream)?[gG]enerateContent/.test(url));
        if (format === 'anthropic' && /\/v1\/messages\/count_tokens/.test(url)) {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ input_tokens: 10 }));
          entry.kind = 'count_tokens';
          log(entry);
          return;
        }
        if (format === 'gemini' && /:countTokens/.test(url)) {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ totalTokens: 10 }));
          entry.kind = 'count_tokens';
          log(entry);
          return;
        }
        if (!isMain) {
          entry.kind = 'unknown';
          log(entry);
          res.writeHead(404, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { message: 'mock: no such endpoint', type: 'not_found' } }));
          return;
        }
        const reply = (calls, text) => {
          if (format === 'anthropic') return anthropicReply(res, body, calls, text);
          if (format === 'responses') return responsesReply(res, body, calls, text);
          return geminiReply(res, url, calls, text);
        };
        if (!offersTools(format, body)) {
          entry.kind = 'side';
          log(entry);
          reply([], sideText(format, body));
          return;
        }
        const results = countResults(format, body);
        const k = turnFor(script, results);
        entry.kind = 'main';
        entry.results = results;
        entry.turn = k;
        entry.userText = userTexts(format, body);
        if (format === 'responses' || format === 'anthropic') {
          entry.tools = (body.tools || []).map((t) => t.name || (t.function && t.function.name) || t.type);
        } else {
          entry.tools = (body.tools || []).flatMap((t) => (t.functionDeclarations || []).map((d) => d.name));
        }
        if (k >= 0) {
          if (opts.onTurn) await opts.onTurn(k, body);
          const sent = reply(script.turns[k], null);
          stats.turnsServed.push(k);
          stats.lastTurnServedAt[k] = Date.now();
          entry.sent = sent;
        } else if (k === -1) {
          reply([], script.final || 'Done.');
          entry.final = true;
        } else {
          reply([], 'mock: the tool results do not line up with the script');
          entry.misaligned = true;
        }
        log(entry);
      } catch (e) {
        entry.error = String(e && e.stack || e);
        log(entry);
        try { res.writeHead(500); res.end(); } catch { /* already answered */ }
      }
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port || 0, '127.0.0.1', () => {
      resolve({
        port: server.address().port,
        server,
        stats,
        setScript(s) { script = s; },
        close() { return new Promise((r) => server.close(() => r())); },
      });
    });
  });
}

module.exports = { startMock, countResults, turnFor };
