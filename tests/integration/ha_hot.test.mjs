// Hot standbys and reads from standbys (docs/ha.md), three gpupack servers on one private PostgreSQL
// (ha_harness.mjs), all asked directly:
// 1. after a burst of writes through the leader, each standby answers ListTasks, DescribeTasks and
//    DescribeContainerInstances from its own state (x-gpupack-served-by: standby) exactly as the leader does;
// 2. a client that sends back the leader's x-gpupack-commit-seq reads its own RunTask through a standby at once;
// 3. a standby started on a database that already holds the state loads it and then follows;
// 4. a standby whose following is paused (the --ha-follow-pause-file test hook) says in /readyz how far behind
//    it is and that it is not ready to lead; the leader is killed with SIGKILL: the caught-up standby leads,
//    having applied only the last changes (its /readyz: takeover.loadedState false), nothing is lost, the paused
//    one never takes the lease, and once resumed it catches up with the new leader.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { call, listAll, ok, PLAY_AGENT, registerInstance, removeTempDir, sharedTaskDefinition, tempDir } from './harness.mjs';
import { freePort, NO_POSTGRES, postgresBinDir, readyz, startPostgres, startReplica, waitFor, waitLeader } from './ha_harness.mjs';

const skip = postgresBinDir() ? false : NO_POSTGRES;
const TTL_MS = 2000;
const CLUSTER = 'hot';
const SEQ = 'x-gpupack-commit-seq';
let pg;
let db;
let dir;
let pauseFile;
const replicas = [];  // [A (leads first), B (pausable), C]
const noLog = () => '';

before(async () => {
  if (skip) return;
  dir = tempDir('gpupack-hot-');
  pauseFile = path.join(dir, 'pause-b');
  pg = await startPostgres();
  db = pg.createDatabase('hot');
  replicas.push(await startReplica({ db, port: await freePort(), ttlMs: TTL_MS, extraArgs: PLAY_AGENT }));
  await waitLeader(replicas);
  replicas.push(await startReplica({ db, port: await freePort(), ttlMs: TTL_MS,
    extraArgs: [...PLAY_AGENT, '--ha-follow-pause-file', pauseFile] }));
  replicas.push(await startReplica({ db, port: await freePort(), ttlMs: TTL_MS, extraArgs: PLAY_AGENT }));
});

after(async () => {
  for (const r of replicas) await r.stop();
  pg?.close();
  if (dir) removeTempDir(dir);
});

// caughtUp waits until the standby's state holds the leader's last commit.
async function caughtUp(standby, leader) {
  const seq = (await readyz(leader.endpoint)).json.commitSeq;
  await waitFor(`${standby.endpoint} applying commit ${seq}`,
    async () => (await readyz(standby.endpoint)).json.follow?.appliedSeq >= seq, 10000, noLog);
  return seq;
}

// stateOf: what ListTasks, DescribeTasks and DescribeContainerInstances answer at `endpoint`, and whether every
// answer came from a standby's own state.
async function stateOf(endpoint) {
  let servedBy = new Set();
  const ask = async (op, body) => {
    const r = await call(endpoint, op, body);
    assert.equal(r.status, 200, `${op} at ${endpoint}: ${r.text}`);
    servedBy.add(r.headers.get('x-gpupack-served-by') ?? 'leader');
    return r.json;
  };
  const arns = [];
  for (const desiredStatus of ['RUNNING', 'STOPPED']) {
    let nextToken;
    do {
      const page = await ask('ListTasks', { cluster: CLUSTER, desiredStatus, maxResults: 100, nextToken });
      arns.push(...page.taskArns);
      nextToken = page.nextToken;
    } while (nextToken);
  }
  const tasks = [];
  for (let i = 0; i < arns.length; i += 100) {
    tasks.push(...(await ask('DescribeTasks', { cluster: CLUSTER, tasks: arns.slice(i, i + 100) })).tasks);
  }
  const instanceArns = (await ask('ListContainerInstances', { cluster: CLUSTER })).containerInstanceArns;
  const instances = (await ask('DescribeContainerInstances', { cluster: CLUSTER, containerInstances: instanceArns }))
    .containerInstances;
  tasks.sort((a, b) => a.taskArn.localeCompare(b.taskArn));
  return { arns, tasks, instances, servedBy: [...servedBy] };
}

async function burst(leader, n) {
  const arns = [];
  await Promise.all(Array.from({ length: n }, async (_, i) => {
    const r = await ok(leader.endpoint, 'RunTask', { cluster: CLUSTER, taskDefinition: 'hot', startedBy: `b${i}` });
    assert.equal(r.failures.length, 0, JSON.stringify(r.failures));
    arns.push(r.tasks[0].taskArn);
  }));
  for (const arn of arns.slice(0, Math.floor(n / 4))) await ok(leader.endpoint, 'StopTask', { cluster: CLUSTER, task: arn });
  for (const arn of arns.slice(Math.floor(n / 4), Math.floor(n / 2))) {
    await ok(leader.endpoint, 'SubmitTaskStateChange', { cluster: CLUSTER, task: arn, status: 'RUNNING' });
  }
  return arns;
}

test('after a burst of writes each standby answers reads from its own state, equal to the leader\'s', { skip, timeout: 60000 }, async () => {
  const { leader } = await waitLeader(replicas, { all: true });
  assert.equal(leader, replicas[0]);
  await ok(leader.endpoint, 'CreateCluster', { clusterName: CLUSTER });
  for (let i = 0; i < 3; ++i) await registerInstance(leader.endpoint, CLUSTER, [[`GPU-${i}-0`, 24576], [`GPU-${i}-1`, 24576]]);
  await ok(leader.endpoint, 'RegisterTaskDefinition', sharedTaskDefinition('hot', 1024));
  await burst(leader, 40);
  const want = await stateOf(leader.endpoint);
  assert.equal(want.tasks.length, 40);
  for (const standby of replicas.slice(1)) {
    await caughtUp(standby, leader);
    const got = await stateOf(standby.endpoint);
    assert.deepEqual(got.servedBy, ['standby'], `${standby.endpoint} forwarded reads instead of answering them`);
    assert.deepEqual(got.arns, want.arns);
    assert.deepEqual(got.tasks, want.tasks);
    assert.deepEqual(got.instances, want.instances);
  }
});

test('a client reads its own RunTask through a standby by sending back the commit sequence', { skip, timeout: 30000 }, async () => {
  const leader = replicas[0];
  for (let i = 0; i < 10; ++i) {
    const run = await call(leader.endpoint, 'RunTask', { cluster: CLUSTER, taskDefinition: 'hot', startedBy: `ryw${i}` });
    assert.equal(run.status, 200, run.text);
    const seq = run.headers.get(SEQ);
    assert.match(seq ?? '', /^[1-9][0-9]*$/, 'the leader names its commit sequence');
    const arn = run.json.tasks[0].taskArn;
    const standby = replicas[1 + (i % 2)];
    const read = await call(standby.endpoint, 'DescribeTasks', { cluster: CLUSTER, tasks: [arn] }, { headers: { [SEQ]: seq } });
    assert.equal(read.status, 200, read.text);
    assert.equal(read.headers.get('x-gpupack-served-by'), 'standby');
    assert.ok(Number(read.headers.get(SEQ)) >= Number(seq));
    assert.deepEqual(read.json.failures, []);
    assert.equal(read.json.tasks[0].taskArn, arn);
  }
});

test('a standby started on a database that holds the state loads it, then follows', { skip, timeout: 60000 }, async () => {
  const leader = replicas[0];
  const late = await startReplica({ db, port: await freePort(), ttlMs: TTL_MS, extraArgs: PLAY_AGENT });
  try {
    await caughtUp(late, leader);
    const r = await readyz(late.endpoint);
    assert.equal(r.json.role, 'standby');
    assert.equal(r.json.follow.loads, 1);
    await burst(leader, 8);  // then it follows what comes after its load
    await caughtUp(late, leader);
    const want = await stateOf(leader.endpoint);
    const got = await stateOf(late.endpoint);
    assert.deepEqual(got.tasks, want.tasks);
    assert.deepEqual(got.instances, want.instances);
  } finally {
    await late.stop();
  }
});

test('a standby too far behind says so and is not elected; a caught-up one takes over without a reload', { skip, timeout: 90000 }, async () => {
  const [a, b, c] = replicas;
  await caughtUp(b, a);
  fs.writeFileSync(pauseFile, '');
  await burst(a, 8);
  const before = await stateOf(a.endpoint);
  const behind = await waitFor('B saying it is too far behind', async () => {
    const r = await readyz(b.endpoint);
    return r.json.follow?.paused && r.json.readyToLead === false && r.json.follow.behindMs > 3000 ? r.json : null;
  }, 15000, noLog);
  assert.ok(behind.follow.latestSeq > behind.follow.appliedSeq, JSON.stringify(behind));
  await caughtUp(c, a);

  await a.kill9();
  const { leader } = await waitLeader([b, c], { timeoutMs: 15000 });
  assert.equal(leader, c, 'the standby that was behind took the lease');
  const took = (await readyz(c.endpoint)).json.takeover;
  assert.equal(took.loadedState, false, `C loaded the world: ${JSON.stringify(took)}`);
  assert.ok(took.appliedChanges >= 0);
  // Nothing acknowledged before the kill is lost, and the new leader places.
  const after = await stateOf(c.endpoint);
  assert.deepEqual(after.tasks.map((t) => t.taskArn), before.tasks.map((t) => t.taskArn));
  const run = await ok(c.endpoint, 'RunTask', { cluster: CLUSTER, taskDefinition: 'hot', startedBy: 'after-kill' });
  assert.equal(run.failures.length, 0);
  // B, still paused, never led; resumed, it catches up with C.
  for (let i = 0; i < 10; ++i) {
    assert.equal((await readyz(b.endpoint)).json.role, 'standby');
    await new Promise((r) => setTimeout(r, 200));
  }
  fs.unlinkSync(pauseFile);
  await caughtUp(b, c);
  assert.equal((await readyz(b.endpoint)).json.readyToLead, true);
  const got = await stateOf(b.endpoint);
  assert.deepEqual(got.tasks, (await stateOf(c.endpoint)).tasks);
});
