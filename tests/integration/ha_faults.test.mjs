// Faults around the replicas (tests/integration/ha_harness.mjs): real `gpupack server` replicas on a private
// PostgreSQL, and for the restore a real `gpupack agent` (a fake GPU, the process runtime).
//
// 1. A leader that hangs (SIGSTOP) while clients send calls through a standby is replaced within twice the lease:
//    the standby's takeover cuts the calls it was forwarding instead of waiting for their answers.
// 2. A RunTask sent to a standby with `Expect: 100-continue` is answered with its outcome (not a 503 after the
//    forwarding deadline while the task was created).
// 3. 1,000 requests of almost 1 MiB sent to a standby whose leader hangs, 100 at a time: the standby holds a
//    bounded amount for forwarding (the rest is answered 503 at once), so its memory stays bounded; and it serves
//    the console's page itself meanwhile.
// 4. A second server started with the leader's --advertise URL refuses to start, and the leader keeps leading.
// 5. A database restored from a dump taken two takeovers earlier leads at an epoch above every one the agent saw:
//    the agent rejoins by itself and runs a new task; the task it ran all along never ran twice.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, test } from 'node:test';

import {
  call, gpupackBin, ok, PLAY_AGENT, pool, registerInstance, removeTempDir, sharedTaskDefinition, tempDir,
} from './harness.mjs';
import {
  freePort, NO_POSTGRES, postgresBinDir, readyz, startAgent, startPostgres, startReplica, waitFor, waitLeader,
} from './ha_harness.mjs';

const skip = postgresBinDir() ? false : NO_POSTGRES;
let pg;
const started = [];

before(async () => {
  if (!skip) pg = await startPostgres();
});

after(async () => {
  for (const r of started) {
    r.child.kill('SIGCONT');
    await r.stop();
  }
  pg?.close();
});

async function replica(db, { port, ttlMs = 2000, extraArgs = [] } = {}) {
  const r = await startReplica({ db, port: port ?? (await freePort()), ttlMs, extraArgs, logLevel: process.env.HA_LOG ?? 'warn' });
  started.push(r);
  return r;
}

// pair: a leader A and a standby B on a new database.
async function pair(name, opts = {}) {
  const db = pg.createDatabase(name);
  const a = await replica(db, opts);
  await waitLeader([a]);
  const b = await replica(db, opts);
  await waitLeader([a, b], { all: true });
  return { db, a, b };
}

// rawPost: one POST of `body` to `endpoint` with extra headers, on a connection of its own; resolves
// {status, text} (status 0 when the connection failed). With `expectContinue` the body is sent only after the
// server's 100 Continue, as curl and the AWS SDKs do for large bodies.
function rawPost(endpoint, headers, body, { expectContinue = false, timeoutMs = 60000 } = {}) {
  return new Promise((resolve) => {
    const url = new URL(endpoint);
    const req = http.request({
      host: url.hostname, port: url.port, method: 'POST', path: '/', agent: false, timeout: timeoutMs,
      headers: { 'content-type': 'application/x-amz-json-1.1', 'content-length': Buffer.byteLength(body), ...headers,
        ...(expectContinue ? { expect: '100-continue' } : {}) },
    });
    let settled = false;
    const done = (v) => {
      if (!settled) resolve(v);
      settled = true;
    };
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => done({ status: res.statusCode, text }));
      res.on('error', () => done({ status: 0, text }));
    });
    req.on('error', (e) => done({ status: 0, text: String(e) }));
    req.on('timeout', () => req.destroy(new Error('timed out')));
    if (expectContinue) req.on('continue', () => req.end(body));
    else req.end(body);
  });
}

// rssMiB: a process's resident memory now, from /proc.
function rssMiB(pid) {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0; // the process is gone
  }
}

test('a leader that hangs while calls go through a standby is replaced within twice the lease', { skip, timeout: 90000 }, async () => {
  const TTL = 3000;
  const { a, b } = await pair('hung', { ttlMs: TTL });
  await ok(a.endpoint, 'CreateCluster', { clusterName: 'hung' });
  a.child.kill('SIGSTOP');
  const stoppedAt = Date.now();
  let traffic = true;
  const answers = [];
  const worker = async () => {
    while (traffic) answers.push((await call(b.endpoint, 'DescribeClusters', { clusters: ['hung'] }, { timeoutMs: 60000 }).catch(() => ({ status: 0 }))).status);
  };
  const workers = Array.from({ length: 32 }, worker);
  try {
    const { leader } = await waitLeader([b], { timeoutMs: 8 * TTL });
    const took = Date.now() - stoppedAt;
    assert.equal(leader, b);
    assert.ok(took <= 2 * TTL, `the standby led ${took} ms after the leader hung (lease ${TTL} ms)`);
  } finally {
    traffic = false;
    await Promise.all(workers);
    a.child.kill('SIGCONT');
  }
  // The calls made meanwhile were answered: by the new leader, or with a retryable 503 (or refused a connection
  // while the standby's port changed hands), never left hanging and never a client error.
  assert.ok(answers.length > 0);
  for (const s of answers) assert.ok(s === 200 || s === 503 || s === 0, `a call through the standby answered ${s}`);
  assert.ok(answers.includes(200));
});

test('a RunTask with Expect: 100-continue sent to a standby is answered with its outcome', { skip, timeout: 60000 }, async () => {
  const { a, b } = await pair('expect', { extraArgs: PLAY_AGENT });
  await ok(a.endpoint, 'CreateCluster', { clusterName: 'expect' });
  await registerInstance(a.endpoint, 'expect', [['GPU-0', 22587]]);
  await ok(a.endpoint, 'RegisterTaskDefinition', sharedTaskDefinition('small', 1024));
  const body = JSON.stringify({ cluster: 'expect', taskDefinition: 'small', clientToken: 'expect-1' });
  const r = await rawPost(b.endpoint, { 'x-amz-target': 'AmazonEC2ContainerServiceV20141113.RunTask' }, body, { expectContinue: true });
  assert.equal(r.status, 200, r.text);
  const arn = JSON.parse(r.text).tasks[0].taskArn;
  const listed = (await ok(a.endpoint, 'ListTasks', { cluster: 'expect' })).taskArns;
  assert.deepEqual(listed, [arn], 'the task the answer names is the one task created');
});

test('a standby whose leader hangs holds a bounded amount for 1,000 large requests, and serves the console page', { skip, timeout: 120000 }, async () => {
  // A long lease: the standby stays a standby while the leader hangs.
  const { a, b } = await pair('flood', { ttlMs: 60000 });
  const before = rssMiB(b.child.pid);
  a.child.kill('SIGSTOP');
  let sampling = true;
  try {
    // The console's page needs no leader: the standby answers it itself (before, it held a forwarder each).
    const page = await fetch(b.endpoint + '/console/app.js', { method: 'HEAD', signal: AbortSignal.timeout(5000) });
    assert.equal(page.status, 200);
    const index = await fetch(b.endpoint + '/console/', { signal: AbortSignal.timeout(5000) });
    assert.equal(index.status, 200);
    assert.match(await index.text(), /<html/i);

    const big = Buffer.from(JSON.stringify({ clusterName: 'x'.repeat(1000000 - 40) }));
    let peak = before;
    const sampler = (async () => {
      while (sampling) {
        peak = Math.max(peak, rssMiB(b.child.pid));
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    // 1,000 bodies from 100 clients at a time: what the standby cannot hold is refused at once (503, retryable);
    // what it holds waits for the hung leader until the forwarding deadline (503 too).
    const answers = [];
    await pool(1000, 100, async () => {
      answers.push(await rawPost(b.endpoint, { 'x-amz-target': 'AmazonEC2ContainerServiceV20141113.CreateCluster' }, big));
    });
    sampling = false;
    await sampler;
    const full = answers.filter((r) => r.status === 503 && /too many requests waiting for the leader/.test(r.text)).length;
    assert.ok(full >= 800, `${full} of 1,000 were refused for want of room: ${JSON.stringify(answers.slice(0, 3))}`);
    // Nothing reached the hung leader: every call was answered 503, or (on a slow machine, a body not read within
    // the server's read deadline) closed unanswered.
    for (const r of answers) assert.ok(r.status === 503 || r.status === 0, `${r.status}: ${r.text.slice(0, 200)}`);
    assert.ok(peak - before < 256, `the standby grew from ${before.toFixed(0)} MiB to ${peak.toFixed(0)} MiB`);
  } finally {
    sampling = false;
    a.child.kill('SIGCONT');
  }
});

test('a second server started with the leader\'s advertised URL refuses to start', { skip, timeout: 60000 }, async () => {
  const db = pg.createDatabase('twice');
  const a = await replica(db);
  const { epoch } = await waitLeader([a]);
  const other = await freePort();
  const second = spawnSync(gpupackBin(), ['server', '--listen', `127.0.0.1:${other}`, '--advertise', a.endpoint,
    '--db', db, '--lease-ttl-ms', '2000'], { encoding: 'utf8', timeout: 30000 });
  assert.notEqual(second.status, 0, second.stdout);
  assert.match(second.stderr, /another gpupack server already answers at the advertised URL/);
  const now = await readyz(a.endpoint);
  assert.equal(now.status, 200);
  assert.equal(now.json.role, 'leader');
  assert.equal(now.json.epoch, epoch, 'the leader was not deposed');
});

test('a database restored from an older dump leads at an epoch the agent accepts: the agent rejoins and runs tasks', { skip, timeout: 150000 }, async () => {
  const db = pg.createDatabase('restore');
  const dir = tempDir('gpupack-ha-restore-');
  const dump = path.join(pg.dir, 'restore.sql');
  let agent;
  const agentLog = () => agent?.log() ?? '';
  try {
    let a = await replica(db);
    await waitLeader([a]);
    let b = await replica(db);
    await waitLeader([a, b], { all: true });
    await ok(a.endpoint, 'CreateCluster', { clusterName: 'restore' });
    const def = sharedTaskDefinition('sleepy', 1024);
    def.containerDefinitions[0].entryPoint = ['/bin/sh', '-c'];
    def.containerDefinitions[0].command = ['exec sleep 600'];
    await ok(a.endpoint, 'RegisterTaskDefinition', def);
    agent = startAgent({ servers: [a.endpoint, b.endpoint], cluster: 'restore', dir, name: 'restore-node', gpus: 'fake:1x22587' });
    const runningOn = (r, arn) => async () => (await ok(r.endpoint, 'DescribeTasks', { cluster: 'restore', tasks: [arn] })).tasks[0].lastStatus === 'RUNNING';
    const t1 = (await waitFor('T1 placed', async () => {
      const r = await call(a.endpoint, 'RunTask', { cluster: 'restore', taskDefinition: 'sleepy', clientToken: 't1' });
      return r.status === 200 && r.json.tasks.length === 1 ? r.json.tasks[0].taskArn : false;
    }, 30000, agentLog));
    await waitFor('T1 RUNNING', runningOn(a, t1), 30000, agentLog);

    // The backup, taken now; then two takeovers raise the epoch the agent remembers twice.
    pg.dump('restore', dump);
    const ports = [a.port, b.port];
    for (let i = 0; i < 2; ++i) {
      const { leader } = await waitLeader([a, b]);
      const standby = leader === a ? b : a;
      await leader.kill9();
      await waitLeader([standby], { timeoutMs: 20000 });
      const back = await replica(db, { port: leader.port });
      if (leader === a) a = back; else b = back;
      await waitLeader([a, b], { all: true, timeoutMs: 20000 });
    }
    const remembered = () => JSON.parse(fs.readFileSync(path.join(dir, 'agent', 'leader_epoch.json'), 'utf8')).epoch;
    const { epoch: e3 } = await waitLeader([a, b]);
    await waitFor('the agent remembers the latest epoch', () => remembered() === e3, 30000, agentLog);

    // The restore: both servers stopped, the database replaced by the dump, the servers started again.
    await a.stop();
    await b.stop();
    pg.psql('DROP DATABASE restore');
    pg.psql('CREATE DATABASE restore');
    pg.restore('restore', dump);
    a = await replica(db, { port: ports[0] });
    b = await replica(db, { port: ports[1] });
    const { leader, epoch: e4 } = await waitLeader([a, b], { all: true, timeoutMs: 30000 });
    assert.ok(e4 > e3, `the restored database leads at epoch ${e4}, above the ${e3} the agent saw`);
    await waitFor('the agent accepted the new epoch', () => remembered() === e4, 40000, agentLog);
    await waitFor('T1 RUNNING after the restore', runningOn(leader, t1), 30000, agentLog);
    const t2 = (await ok(leader.endpoint, 'RunTask', { cluster: 'restore', taskDefinition: 'sleepy' })).tasks[0].taskArn;
    await waitFor('T2 RUNNING after the restore', runningOn(leader, t2), 30000, agentLog);
    assert.equal(agentLog().split(`agent: task ${t1} RUNNING`).length - 1, 1, 'T1 started once');
  } finally {
    await agent?.stop();
    removeTempDir(dir);
  }
});
