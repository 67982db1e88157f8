// Tasks waiting for a capacity provider through a leader takeover (tests/integration/ha_harness.mjs): three real
// `gpupack server` replicas on a private PostgreSQL and one real `gpupack agent` (process runtime, one simulated
// 10,000 MiB GPU) joined to capacity provider team-a. One task of 6,000 MiB holds the GPU and three more wait in
// PROVISIONING. The leader is killed with SIGKILL; once a standby leads:
//   - the three tasks still wait, in their order, and the holder still runs;
//   - each stop lets exactly the next one run, in order, and every task was started once, by one agent, into one
//     process.
//
// Run: GPUPACK_BIN=build/gpupack node --test tests/integration/ha_capacity.test.mjs   (ctest: integration_ha_capacity)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { removeTempDir, tempDir } from './harness.mjs';
import {
  callAny, freePort, NO_POSTGRES, postgresBinDir, startAgent, startPostgres, startReplica, waitFor, waitLeader,
} from './ha_harness.mjs';

const skip = postgresBinDir() ? false : NO_POSTGRES;
const TTL_MS = 2000;
const CLUSTER = 'teams';
let pg;
let db;
let dir;
const replicas = [];
let agent;

before(async () => {
  if (skip) return;
  dir = tempDir('gpupack-ha-capacity-');
  pg = await startPostgres();
  db = pg.createDatabase('capacity');
  for (let i = 0; i < 3; ++i) replicas.push(await startReplica({ db, port: await freePort(), ttlMs: TTL_MS }));
});

after(async () => {
  await agent?.stop();
  for (const r of replicas) await r.stop();
  if (dir && fs.existsSync(path.join(dir, 'pids')))
    for (const pid of fs.readdirSync(path.join(dir, 'pids')).map(Number))
      try { process.kill(pid, 'SIGKILL'); } catch { /* gone already */ }
  pg?.close();
  if (dir) removeTempDir(dir);
});

async function api(op, body) {
  const r = await callAny(replicas, op, body, { timeoutMs: 20000 });
  assert.equal(r.status, 200, `${op}: ${r.text}`);
  return r.json;
}

const statusOf = async (arn) => (await api('DescribeTasks', { cluster: CLUSTER, tasks: [arn] })).tasks[0].lastStatus;
const logs = () => `--- agent\n${agent.log()}` + replicas.map((r) => `\n--- ${r.endpoint}\n${r.output.slice(-3000)}`).join('');

test('waiting tasks survive a leader takeover in order and none starts twice', { skip }, async () => {
  const { leader } = await waitLeader(replicas, { all: true });
  await api('CreateCluster', { clusterName: CLUSTER });
  await api('CreateCapacityProvider', { name: 'team-a' });
  await api('PutClusterCapacityProviders', { cluster: CLUSTER, capacityProviders: ['team-a'],
    defaultCapacityProviderStrategy: [{ capacityProvider: 'team-a', weight: 1 }] });
  agent = startAgent({ servers: replicas.map((r) => r.endpoint), cluster: CLUSTER, dir, name: 'node-a',
    gpus: 'fake:1x10000', extraArgs: ['--capacity-provider', 'team-a', '--task-user', 'root'] });
  await waitFor('the agent connected', async () => {
    const arns = (await api('ListContainerInstances', { cluster: CLUSTER })).containerInstanceArns;
    if (arns.length !== 1) return false;
    const i = (await api('DescribeContainerInstances', { cluster: CLUSTER, containerInstances: arns })).containerInstances[0];
    return i.agentConnected && i.capacityProviderName === 'team-a';
  }, 30000, logs);
  fs.mkdirSync(path.join(dir, 'pids'), { recursive: true });
  await api('RegisterTaskDefinition', { family: 'job', containerDefinitions: [{ name: 'job', image: 'busybox', cpu: 64,
    memory: 64, essential: true, entryPoint: ['/bin/sh', '-c'], command: [`echo $$ > ${path.join(dir, 'pids')}/$$; exec sleep 600`],
    resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { memory: 6000 } } }] }] });
  // The cluster's default strategy sends a RunTask that names neither a strategy nor a launchType to team-a.
  const run = async () => (await api('RunTask', { cluster: CLUSTER, taskDefinition: 'job' })).tasks[0];
  let holder = (await run()).taskArn;
  await waitFor('the first task RUNNING', async () => (await statusOf(holder)) === 'RUNNING', 30000, logs);
  const waiting = [];
  for (let i = 0; i < 3; ++i) {
    const t = await run();
    assert.equal(t.lastStatus, 'PROVISIONING');
    assert.equal(t.capacityProviderName, 'team-a');
    waiting.push(t.taskArn);
  }

  await leader.kill9();
  replicas.splice(replicas.indexOf(leader), 1);
  await waitLeader(replicas, { not: leader, timeoutMs: 4 * TTL_MS + 10000 });
  for (const arn of waiting) assert.equal(await statusOf(arn), 'PROVISIONING', arn);
  assert.equal(await statusOf(holder), 'RUNNING');

  while (waiting.length > 0) {
    await api('StopTask', { cluster: CLUSTER, task: holder });
    await waitFor('the next in line RUNNING', async () => (await statusOf(waiting[0])) === 'RUNNING', 30000, logs);
    for (const arn of waiting.slice(1)) assert.equal(await statusOf(arn), 'PROVISIONING', arn);
    holder = waiting.shift();
  }
  const agentLog = agent.log();
  const all = (await api('ListTasks', { cluster: CLUSTER, desiredStatus: 'STOPPED' })).taskArns.concat(holder);
  assert.equal(all.length, 4);
  for (const arn of all) {
    const starts = agentLog.split(`agent: task ${arn} RUNNING`).length - 1;
    assert.equal(starts, 1, `${arn} was started ${starts} times`);
  }
  assert.equal(fs.readdirSync(path.join(dir, 'pids')).length, 4, 'four processes ever started');
});
