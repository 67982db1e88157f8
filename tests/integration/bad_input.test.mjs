// bad_input: the bad-input catalogue (bad_input_cases.json) against the real `gpupack server` binary, while a
// healthy client keeps calling it and the connection-level abuse of the catalogue's "abuse" section runs.
//
// Every case must be answered as it states: a 4xx in ECS's error shape ({"__type", "message"} body,
// x-amzn-ErrorType equal to __type, x-amzn-RequestId), or the 200 of a documented leniency (docs/api.md). The
// abuse (idle sockets, slow-drip headers and bodies, lying Content-Lengths, clients that never read) must be
// closed by the server in bounded time. Afterwards the server is healthy, the state the cases aimed at is
// unchanged (nothing half-written), /metrics is well-formed, and a restart loads the same state.
//
// Case format (one JSON object per case):
//   category, name            what it is
//   op                        the operation: X-Amz-Target is AmazonEC2ContainerServiceV20141113.<op>
//   target                    the X-Amz-Target header exactly (null: none), instead of op
//   method, path, headers     default POST, /, Content-Type application/x-amz-json-1.1; a header set to null
//                             is not sent
//   body                      a JSON value, serialized; {"$repeat": X, "times": N} is a list of N copies of X
//                             (with ${i} the index) and {"$string": S, "times": N, "prefix", "suffix"} a string
//   raw                       the body as parts instead: a string (UTF-8), {"hex": "..."} or
//                             {"repeat": S, "times": N}; integers beyond 2^53 must be sent raw (a JavaScript
//                             number cannot hold them)
//   kind: "socket", send      parts written as they are on a fresh connection (the whole HTTP request)
//   expect                    status (or statuses, in order, for "socket"), type (the __type), message (a
//                             regular expression, case-insensitive), json ({"a.0.b": value, "list.length": n}
//                             on a 200), maxBytes (the longest answer body), orClose (the server may instead
//                             close without answering: a body it stopped reading)
// Strings may name fixture values: ${instanceArn}, ${instanceId}, ${taskArn}, ${taskId}.
//
// Figures: the healthy client's p50/p99 (quiet, then under abuse) and the abuse counts are printed, and written
// as JSON to $GPUPACK_BAD_INPUT_REPORT when set. GPUPACK_BAD_INPUT_FULL=1 runs the "full" abuse counts
// (thousands of sockets, the connection limit, keep-alive idle timeout: about 70 s) instead of the "ci" ones.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';

import { PLAY_AGENT, TARGET_PREFIX, ok, registerInstance, removeTempDir, sharedTaskDefinition, startServer, tempDir } from './harness.mjs';

const catalogue = JSON.parse(fs.readFileSync(new URL('./bad_input_cases.json', import.meta.url), 'utf8'));
const FULL = process.env.GPUPACK_BAD_INPUT_FULL === '1';
const MODE = FULL ? 'full' : 'ci';
const abuseSpec = catalogue.abuse;

// ---- building requests from the data ----------------------------------------------------------------------

function subst(s, vars) {
  return s.replace(/\$\{(\w+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m));
}

function expand(v, vars) {
  if (Array.isArray(v)) return v.map((x) => expand(x, vars));
  if (v && typeof v === 'object') {
    if ('$repeat' in v) return Array.from({ length: v.times }, (_, i) => expand(v.$repeat, { ...vars, i }));
    if ('$string' in v) return (v.prefix ?? '') + v.$string.repeat(v.times) + (v.suffix ?? '');
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, expand(x, vars)]));
  }
  return typeof v === 'string' ? subst(v, vars) : v;
}

function parts(list, vars) {
  return Buffer.concat(
    list.map((p) => {
      if (typeof p === 'string') return Buffer.from(subst(p, vars), 'utf8');
      if ('hex' in p) return Buffer.from(p.hex, 'hex');
      return Buffer.from(p.repeat.repeat(p.times), 'utf8');
    }),
  );
}

// requestBytes turns an ECS case into one HTTP/1.1 request (Connection: close).
function requestBytes(c, vars) {
  const body = c.raw ? parts(c.raw, vars) : c.body !== undefined && c.body !== null ? Buffer.from(JSON.stringify(expand(c.body, vars)), 'utf8') : null;
  const headers = { host: '127.0.0.1', 'content-type': 'application/x-amz-json-1.1' };
  const target = 'target' in c ? (c.target === null ? null : expand(c.target, vars)) : c.op ? TARGET_PREFIX + c.op : null;
  if (target !== null) headers['x-amz-target'] = target;
  for (const [k, v] of Object.entries(c.headers ?? {})) headers[k.toLowerCase()] = v;
  if (body) headers['content-length'] = String(body.length);
  headers.connection = 'close';
  let head = `${c.method ?? 'POST'} ${c.path ?? '/'} HTTP/1.1\r\n`;
  for (const [k, v] of Object.entries(headers)) if (v !== null) head += `${k}: ${v}\r\n`;
  return Buffer.concat([Buffer.from(head + '\r\n', 'latin1'), body ?? Buffer.alloc(0)]);
}

// exchange writes `bytes` on a fresh connection and resolves with everything read until the server closes
// (closed: true) or timeoutMs passes (closed: false). A reset after a partial write counts as closed.
function exchange(port, bytes, timeoutMs = 20000) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    const chunks = [];
    let done = false;
    const finish = (closed, error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ data: Buffer.concat(chunks), closed, error });
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    sock.on('data', (d) => chunks.push(d));
    sock.on('error', (e) => finish(true, e.code));
    sock.on('close', () => finish(true));
    sock.write(bytes, () => {});
  });
}

// parseResponses splits what the server wrote into responses (it always frames with Content-Length).
function parseResponses(buf) {
  const out = [];
  let at = 0;
  while (at < buf.length) {
    const end = buf.indexOf('\r\n\r\n', at, 'latin1');
    if (end < 0) break;
    const lines = buf.subarray(at, end).toString('latin1').split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0]);
    if (!m) break;
    const headers = {};
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':');
      if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
    }
    const len = Number(headers['content-length'] ?? 0);
    const text = buf.subarray(end + 4, end + 4 + len).toString('utf8');
    let json;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    out.push({ status: Number(m[1]), headers, text, json });
    at = end + 4 + len;
  }
  return out;
}

function jsonPath(obj, p) {
  let v = obj;
  for (const k of p.split('.')) v = v === undefined || v === null ? undefined : k === 'length' ? v.length : v[k];
  return v;
}

// checkEcsError asserts ECS's error shape; `type`/`message` (optional) are the expected __type and a pattern.
function checkEcsError(r, { type, message } = {}, label = '') {
  assert.ok(r.json && typeof r.json === 'object' && !Array.isArray(r.json), `${label}: body is a JSON object: ${r.text.slice(0, 300)}`);
  assert.equal(typeof r.json.__type, 'string', `${label}: body has __type`);
  assert.equal(typeof r.json.message, 'string', `${label}: body has message`);
  assert.ok(r.json.message.length > 0, `${label}: message is not empty`);
  assert.equal(r.headers['x-amzn-errortype'], r.json.__type, `${label}: x-amzn-ErrorType names the __type`);
  assert.ok(r.headers['x-amzn-requestid'], `${label}: x-amzn-RequestId`);
  if (type) assert.equal(r.json.__type, type, `${label}: ${r.json.message}`);
  if (message) assert.match(r.json.message, new RegExp(message, 'i'), `${label}: message`);
}

let busyRetries = 0; // cases sent again after a 503 at max_connections (full runs only)

async function runCase(port, c, vars) {
  const label = `[${c.category}] ${c.name}`;
  const e = c.expect;
  if (c.kind === 'socket') {
    let data;
    let closed;
    let rs;
    for (let attempt = 0; ; ++attempt) {
      ({ data, closed } = await exchange(port, parts(c.send, vars)));
      rs = parseResponses(data);
      if (!(rs.length === 1 && rs[0].status === 503 && e.statuses[0] !== 503) || attempt >= 300) break;
      busyRetries += 1;
      await new Promise((r) => setTimeout(r, 100));
    }
    if (rs.length === 0 && e.orClose) {
      assert.ok(closed, `${label}: neither an answer nor a close`);
      return 'closed';
    }
    assert.deepEqual(rs.map((r) => r.status), e.statuses, `${label}: statuses; got ${data.toString('latin1').slice(0, 300)}`);
    const last = rs[rs.length - 1];
    if (last.status >= 400 && !/^HEAD /.test(c.send[0])) checkEcsError(last, e, label);
    assert.ok(closed, `${label}: the server closes after a refusal`);
    return last.status;
  }
  // While the abuse holds every connection the server allows, a new one is refused with 503 (Retry-After: 1);
  // the case is then sent again, as a client would.
  let data;
  let closed;
  let rs;
  for (let attempt = 0; ; ++attempt) {
    ({ data, closed } = await exchange(port, requestBytes(c, vars)));
    rs = parseResponses(data);
    const busy = rs.length === 1 && rs[0].status === 503 && /too many open connections/.test(rs[0].text);
    if (!busy || attempt >= 300) break;
    busyRetries += 1;
    await new Promise((r) => setTimeout(r, 100));
  }
  if (rs.length === 0 && e.orClose) {
    assert.ok(closed, `${label}: neither an answer nor a close`);
    return 'closed';
  }
  assert.equal(rs.length, 1, `${label}: one response; got ${data.toString('latin1').slice(0, 300)}`);
  const r = rs[0];
  assert.equal(r.status, e.status, `${label}: status; body ${r.text.slice(0, 300)}`);
  if (e.maxBytes) assert.ok(r.text.length <= e.maxBytes, `${label}: an answer of ${r.text.length} bytes`);
  if (r.status >= 400) {
    assert.ok(r.status < 500, `${label}: never a 5xx`);
    checkEcsError(r, e, label);
  } else {
    assert.ok(r.json && typeof r.json === 'object', `${label}: a JSON answer`);
    for (const [p, want] of Object.entries(e.json ?? {})) assert.deepEqual(jsonPath(r.json, p), want, `${label}: ${p}`);
  }
  return r.status;
}

// ---- state that the cases must leave alone -----------------------------------------------------------------

async function snapshot(endpoint, fx) {
  const s = {};
  s.clusters = await ok(endpoint, 'ListClusters', {});
  s.bad = await ok(endpoint, 'DescribeClusters', { clusters: ['bad'] });
  s.running = await ok(endpoint, 'ListTasks', { cluster: 'bad' });
  s.stopped = await ok(endpoint, 'ListTasks', { cluster: 'bad', desiredStatus: 'STOPPED' });
  s.task = await ok(endpoint, 'DescribeTasks', { cluster: 'bad', tasks: [fx.taskArn] });
  s.families = await ok(endpoint, 'ListTaskDefinitionFamilies', { status: 'ALL' });
  s.active = await ok(endpoint, 'ListTaskDefinitions', {});
  s.inactive = await ok(endpoint, 'ListTaskDefinitions', { status: 'INACTIVE' });
  s.instances = await ok(endpoint, 'ListContainerInstances', { cluster: 'bad' });
  s.instance = await ok(endpoint, 'DescribeContainerInstances', { cluster: 'bad', containerInstances: [fx.instanceArn] });
  s.attributes = await ok(endpoint, 'ListAttributes', { cluster: 'bad', targetType: 'container-instance' });
  return s;
}

// ---- the healthy client, in a worker thread so the abuse's event loop does not add to its latency ----------

const healthyClientSource = `
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
const { port, calls, pauseMs, target } = workerData;
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
let stop = false;
parentPort.on('message', (m) => { if (m === 'stop') stop = true; });
function call(op, body) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const t0 = process.hrtime.bigint();
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/', agent, timeout: 30000,
      headers: { 'content-type': 'application/x-amz-json-1.1', 'x-amz-target': target + op, 'content-length': Buffer.byteLength(data) } },
      (res) => { const c = []; res.on('data', (d) => c.push(d)); res.on('end', () => {
        resolve({ status: res.statusCode, json: JSON.parse(Buffer.concat(c).toString()), ms: Number(process.hrtime.bigint() - t0) / 1e6 }); }); });
    req.on('timeout', () => req.destroy(new Error(op + ' took over 30 s')));
    req.on('error', reject);
    req.end(data);
  });
}
(async () => {
  const lat = { DescribeClusters: [], RunTask: [], StopTask: [] };
  const errors = [];
  for (let i = 0; i < calls && !stop; i += 3) {
    const d = await call('DescribeClusters', { clusters: ['healthy'] });
    lat.DescribeClusters.push(d.ms);
    if (d.status !== 200) errors.push('DescribeClusters ' + d.status);
    const r = await call('RunTask', { cluster: 'healthy', taskDefinition: 'tiny' });
    lat.RunTask.push(r.ms);
    if (r.status !== 200 || r.json.tasks.length !== 1) { errors.push('RunTask ' + r.status + ' ' + JSON.stringify(r.json).slice(0, 200)); continue; }
    const s = await call('StopTask', { cluster: 'healthy', task: r.json.tasks[0].taskArn });
    lat.StopTask.push(s.ms);
    if (s.status !== 200) errors.push('StopTask ' + s.status);
    if (pauseMs) await new Promise((res) => setTimeout(res, pauseMs));
  }
  agent.destroy();
  parentPort.postMessage({ lat, errors });
})().catch((e) => parentPort.postMessage({ lat: {}, errors: [String(e)] }));
`;

function healthyClient(port, calls, pauseMs) {
  const worker = new Worker(healthyClientSource, { eval: true, workerData: { port, calls, pauseMs, target: TARGET_PREFIX } });
  const result = new Promise((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  return { stop: () => worker.postMessage('stop'), result: result.finally(() => worker.terminate()) };
}

function percentiles(samples) {
  const all = Object.values(samples).flat().sort((a, b) => a - b);
  const q = (p) => (all.length ? all[Math.min(all.length - 1, Math.floor(p * all.length))] : NaN);
  return { calls: all.length, p50: +q(0.5).toFixed(2), p99: +q(0.99).toFixed(2), max: +(all[all.length - 1] ?? NaN).toFixed(2) };
}

// ---- connection-level abuse --------------------------------------------------------------------------------

// abuseSocket opens one connection, runs `feed` on it, and resolves when the server closes it (or after
// limitMs): {closedMs, answered, status}.
function abuseSocket(port, limitMs, feed) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const sock = net.connect(port, '127.0.0.1');
    const chunks = [];
    let timer;
    let drip;
    let done = false;
    const finish = (closed) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      clearInterval(drip);
      sock.destroy();
      const text = Buffer.concat(chunks).toString('latin1');
      const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
      resolve({ closedMs: closed ? Date.now() - t0 : null, answered: !!m, status: m ? Number(m[1]) : null, text });
    };
    timer = setTimeout(() => finish(false), limitMs);
    sock.on('data', (d) => {
      if (chunks.length < 4) chunks.push(d);
    });
    sock.on('error', () => finish(true));
    sock.on('close', () => finish(true));
    sock.on('connect', () => {
      drip = feed(sock);
    });
  });
}

function dripper(sock, head, intervalMs, byte = 'a') {
  if (head) sock.write(head);
  return setInterval(() => sock.write(byte, () => {}), intervalMs);
}

async function runAbuse(port) {
  const closeWithin = abuseSpec.closeWithinMs;
  const n = (k) => abuseSpec[k][MODE];
  const groups = {};
  const launch = (name, count, limitMs, feed) => {
    groups[name] = Promise.all(Array.from({ length: count }, () => abuseSocket(port, limitMs, feed)));
  };
  launch('idleSockets', n('idleSockets'), closeWithin, () => undefined);
  launch('slowHeaderDrips', n('slowHeaderDrips'), closeWithin, (s) =>
    dripper(s, 'POST / HTTP/1.1\r\nHost: x\r\nX-Drip: ', abuseSpec.slowHeaderDrips.intervalMs),
  );
  launch('slowBodyDrips', n('slowBodyDrips'), closeWithin, (s) =>
    dripper(
      s,
      `POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: ${TARGET_PREFIX}CreateCluster\r\nContent-Length: 1000000\r\n\r\n{"clusterName":"`,
      abuseSpec.slowBodyDrips.intervalMs,
    ),
  );
  launch('lyingContentLength', n('lyingContentLength'), closeWithin, (s) => {
    s.write(`POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: ${TARGET_PREFIX}ListClusters\r\nContent-Length: 100\r\n\r\n{}`);
  });
  // A client that pipelines requests and never reads: once the socket buffers are full the server's write
  // deadline (10 s) must disconnect it. It sends more than the kernel buffers hold, so its own writes stay
  // pending and fail (reset) when the server closes, which a paused socket notices without reading.
  const nr = abuseSpec.nonReadingClients;
  const describe100 = JSON.stringify({ clusters: Array(100).fill('bad') }); // about 60 KB per answer
  const pipelined = Buffer.from(
    (
      `POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: ${TARGET_PREFIX}DescribeClusters\r\n` +
      `Content-Length: ${describe100.length}\r\n\r\n${describe100}`
    ).repeat(nr.pipelinedRequests),
  );
  launch('nonReadingClients', n('nonReadingClients'), closeWithin + abuseSpec.readTimeoutMs, (s) => {
    s.pause();
    s.write(pipelined, () => {});
  });
  if (n('keepAliveIdle') > 0) {
    launch('keepAliveIdle', n('keepAliveIdle'), abuseSpec.keepAliveIdle.idleTimeoutMs + 10000, (s) => {
      s.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    });
  }
  if (n('overConnectionLimit') > 0) {
    // After the others are connected: enough idle sockets to pass max_connections. The surplus gets 503 at
    // once, or waits in the listen backlog until a slot frees and is then idle-closed like the rest: within
    // two read deadlines.
    await new Promise((r) => setTimeout(r, 1000));
    launch('overConnectionLimit', n('overConnectionLimit'), 2 * closeWithin, () => undefined);
  }
  const out = {};
  for (const [name, p] of Object.entries(groups)) {
    const rs = await p;
    const closed = rs.filter((r) => r.closedMs !== null);
    out[name] = {
      sockets: rs.length,
      closedByServer: closed.length,
      maxCloseMs: closed.length ? Math.max(...closed.map((r) => r.closedMs)) : null,
      answered: rs.filter((r) => r.answered).length,
      statuses: [...new Set(rs.map((r) => r.status).filter((s) => s !== null))].sort(),
      busy503: rs.filter((r) => r.status === 503).length,
      sample503: rs.find((r) => r.status === 503)?.text.split('\r\n\r\n')[1],
    };
  }
  return out;
}

// ---- the run -----------------------------------------------------------------------------------------------

let dir;
let server;
let port;
const fx = {};
let before_;
let abuse;
let healthy;
const results = {};
const report = { mode: MODE, cases: catalogue.cases.length, categories: {}, loadavg: null };

describe(`bad-input catalogue (${catalogue.cases.length} cases, abuse counts: ${MODE})`, () => {
  before(async () => {
    dir = tempDir('gpupack-bad-');
    server = await startServer({ db: path.join(dir, 'bad.db'), extraArgs: PLAY_AGENT });
    port = Number(new URL(server.endpoint).port);
    const e = server.endpoint;
    await ok(e, 'CreateCluster', { clusterName: 'bad' });
    fx.instanceArn = await registerInstance(e, 'bad', [['GPU-bad-0', 22587]]);
    fx.instanceId = fx.instanceArn.split('/').pop();
    await ok(e, 'PutAttributes', { cluster: 'bad', attributes: [{ name: 'keep', value: 'v', targetId: fx.instanceArn }] });
    await ok(e, 'RegisterTaskDefinition', sharedTaskDefinition('fine', 1024, 50));
    const two = (family) => ({
      family,
      containerDefinitions: [
        { name: 'main', image: 'busybox', cpu: 1, memory: 128 },
        { name: 'side', image: 'busybox', cpu: 1, memory: 128 },
      ],
    });
    await ok(e, 'RegisterTaskDefinition', two('cpu'));
    const run = await ok(e, 'RunTask', { cluster: 'bad', taskDefinition: 'cpu' });
    fx.taskArn = run.tasks[0].taskArn;
    fx.taskId = fx.taskArn.split('/').pop();
    // The healthy client's own cluster, so its tasks do not touch the state the cases must leave alone.
    await ok(e, 'CreateCluster', { clusterName: 'healthy' });
    await registerInstance(e, 'healthy', [], { cpu: 1048576, memory: 1048576 });
    await ok(e, 'RegisterTaskDefinition', { family: 'tiny', containerDefinitions: [{ name: 'main', image: 'busybox', cpu: 1, memory: 16 }] });
    before_ = await snapshot(e, fx);

    const h = abuseSpec.healthyClient;
    const quiet = healthyClient(port, h.baselineCalls[MODE], 0);
    const q = await quiet.result;
    assert.deepEqual(q.errors, [], 'the healthy client alone');
    results.quiet = percentiles(q.lat);

    healthy = healthyClient(port, h[MODE], h.pauseMs);
    abuse = runAbuse(port);
  });

  after(async () => {
    healthy?.stop();
    await server?.stop();
    if (dir) removeTempDir(dir);
  });

  for (const c of catalogue.cases) {
    test(`[${c.category}] ${c.name}`, async () => {
      const got = await runCase(port, c, fx);
      const cat = (report.categories[c.category] ??= { cases: 0, statuses: {} });
      cat.cases += 1;
      cat.statuses[got] = (cat.statuses[got] ?? 0) + 1;
    });
  }

  test('connection-level abuse is closed by the server in bounded time', async () => {
    const a = await abuse;
    report.abuse = a;
    const bound = abuseSpec.closeWithinMs;
    for (const [name, g] of Object.entries(a)) {
      assert.equal(g.closedByServer, g.sockets, `${name}: every socket closed by the server (${JSON.stringify(g)})`);
    }
    for (const name of ['idleSockets', 'slowHeaderDrips', 'slowBodyDrips', 'lyingContentLength']) {
      assert.ok(a[name].maxCloseMs <= bound, `${name}: closed within ${bound} ms (${a[name].maxCloseMs})`);
      assert.ok(a[name].statuses.every((s) => s === 503), `${name}: no answer but a busy refusal (${a[name].statuses})`);
    }
    const metrics = await (await fetch(server.endpoint + '/metrics')).text();
    const open = Number(/^gpupack_http_connections_open (\d+)/m.exec(metrics)[1]);
    report.connectionsOpenAfter = open;
    assert.ok(open <= 5, `the server holds ${open} connections after the abuse`);
    if (a.overConnectionLimit) {
      const g = a.overConnectionLimit;
      assert.ok(g.busy503 > 0, 'past max_connections the surplus is refused with 503');
      assert.equal(JSON.parse(g.sample503).__type, 'ServerException');
    }
  });

  test('a healthy client kept being served meanwhile', async () => {
    healthy.stop();
    const r = await healthy.result;
    assert.deepEqual(r.errors, [], 'every healthy call succeeded');
    results.abuse = percentiles(r.lat);
    report.healthy = results;
    report.busyRetries = busyRetries;
    report.loadavg = os.loadavg().map((x) => +x.toFixed(2));
    const line = (k) => `${results[k].calls} calls p50 ${results[k].p50} ms p99 ${results[k].p99} ms max ${results[k].max} ms`;
    console.log(`# healthy client (DescribeClusters, RunTask, StopTask), quiet: ${line('quiet')}`);
    console.log(`# healthy client under ${catalogue.cases.length} bad-input cases + abuse (${MODE}): ${line('abuse')}`);
    console.log(`# abuse: ${JSON.stringify(report.abuse, (k, v) => (k === 'sample503' ? undefined : v))}`);
    console.log(`# cases sent again after a 503 at the connection limit: ${busyRetries}`);
    console.log(`# load average ${report.loadavg.join(', ')}`);
    if (process.env.GPUPACK_BAD_INPUT_REPORT) fs.writeFileSync(process.env.GPUPACK_BAD_INPUT_REPORT, JSON.stringify(report, null, 2));
  });

  test('the server is healthy, /metrics well-formed, and nothing the cases aimed at changed', async () => {
    assert.equal(server.child.exitCode, null, 'the server is still running');
    const health = await fetch(server.endpoint + '/healthz');
    assert.equal(health.status, 200);
    await health.text();
    const metrics = await (await fetch(server.endpoint + '/metrics')).text();
    const sample = /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\\n])*"(,[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\\n])*")*\})? [-+0-9.eEIinfNa]+$/;
    for (const l of metrics.split('\n')) if (l && !l.startsWith('#')) assert.match(l, sample);
    // The agent channel's bounds are visible: refused upgrades, queued bytes, closes for a full send queue.
    for (const family of ['gpupack_http_websocket_refusals_total', 'gpupack_http_websocket_queued_bytes',
      'gpupack_http_websocket_overflow_closes_total'])
      assert.match(metrics, new RegExp(`^# TYPE ${family} (counter|gauge)\n${family} \\d+$`, 'm'), family);
    assert.deepEqual(await snapshot(server.endpoint, fx), before_);
  });

  test('a restart loads the same state (nothing acknowledged lived only in memory)', async () => {
    await server.stop();
    server = await startServer({ db: path.join(dir, 'bad.db'), extraArgs: PLAY_AGENT });
    assert.deepEqual(await snapshot(server.endpoint, fx), before_);
  });
});
