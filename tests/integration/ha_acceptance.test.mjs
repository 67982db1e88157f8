// Manual acceptance of hosts through a leader takeover: three gpupack servers on one private PostgreSQL
// (ha_harness.mjs), a cluster set to gpupack.instanceAcceptance manual and one real agent given every replica. Its
// new instance waits REGISTERING (connected, RunTask refused as STATUS); the leader is killed with SIGKILL. The new
// leader keeps what the old one decided: the setting is still manual, the instance is still the one REGISTERING
// instance (not accepted when its agent reconnects to the new leader, not lost, not registered twice) and RunTask
// is still refused the same way. Accepted through the new leader (UpdateContainerInstancesState ACTIVE), the
// instance takes the next RunTask and the task reaches RUNNING on the agent that found the new leader.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { ok, removeTempDir, sharedTaskDefinition, tempDir } from './harness.mjs';
import {
  callAny, freePort, NO_POSTGRES, postgresBinDir, startAgent, startPostgres, startReplica, waitFor, waitLeader,
} from './ha_harness.mjs';

const skip = postgresBinDir() ? false : NO_POSTGRES;
const TTL_MS = 2000;
const CLUSTER = 'accept';
let pg;
let db;
let dir;
let agent;
const replicas = [];

before(async () => {
  if (skip) return;
  pg = await startPostgres();
  db = pg.createDatabase('acceptance');
  for (let i = 0; i < 3; ++i) replicas.push(await startReplica({ db, port: await freePort(), ttlMs: TTL_MS }));
});

after(async () => {
  await agent?.stop();
  for (const r of replicas) await r.stop();
  pg?.close();
  if (dir) removeTempDir(dir);
});

// The instance ARNs the cluster lists: with no status (every status but INACTIVE) and with each one.
async function listed(endpoint) {
  const list = async (status) =>
    (await ok(endpoint, 'ListContainerInstances', { cluster: CLUSTER, ...(status ? { status } : {}) })).containerInstanceArns;
  return { all: await list(), REGISTERING: await list('REGISTERING'), ACTIVE: await list('ACTIVE'), DRAINING: await list('DRAINING') };
}

async function describe(endpoint, arn) {
  const r = await ok(endpoint, 'DescribeContainerInstances', { cluster: CLUSTER, containerInstances: [arn] });
  assert.deepEqual(r.failures, [], JSON.stringify(r));
  return r.containerInstances[0];
}

// RunTask refused for the one REGISTERING instance, as the single server refuses it (aws_cli.test.mjs).
async function assertHeld(endpoint, arn, when) {
  const held = await ok(endpoint, 'RunTask', { cluster: CLUSTER, taskDefinition: 'held' });
  assert.deepEqual(held.tasks, [], `${when}: ${JSON.stringify(held)}`);
  assert.equal(held.failures.length, 1, `${when}: ${JSON.stringify(held)}`);
  assert.equal(held.failures[0].arn, arn, `${when}: ${JSON.stringify(held)}`);
  assert.equal(held.failures[0].reason, 'STATUS', `${when}: ${JSON.stringify(held)}`);
  assert.match(held.failures[0].detail, /container instance is REGISTERING/, `${when}: ${JSON.stringify(held)}`);
}

async function acceptanceSetting(endpoint) {
  const r = await ok(endpoint, 'DescribeClusters', { clusters: [CLUSTER], include: ['SETTINGS'] });
  return r.clusters[0].settings.find((s) => s.name === 'gpupack.instanceAcceptance')?.value;
}

test('a REGISTERING host stays held through a leader takeover, then is accepted by the new leader', { skip, timeout: 180000 }, async () => {
  dir = tempDir('gpupack-ha-accept-');
  const { leader: old } = await waitLeader(replicas, { all: true });
  await ok(old.endpoint, 'CreateCluster', { clusterName: CLUSTER });
  const set = await ok(old.endpoint, 'UpdateClusterSettings', {
    cluster: CLUSTER, settings: [{ name: 'gpupack.instanceAcceptance', value: 'manual' }],
  });
  assert.deepEqual(set.cluster.settings.find((s) => s.name === 'gpupack.instanceAcceptance'),
    { name: 'gpupack.instanceAcceptance', value: 'manual' }, JSON.stringify(set));
  const def = sharedTaskDefinition('held', 2048);
  def.containerDefinitions[0].entryPoint = ['/bin/sh', '-c'];
  def.containerDefinitions[0].command = ['exec sleep 600'];
  await ok(old.endpoint, 'RegisterTaskDefinition', def);

  agent = startAgent({ servers: replicas.map((r) => r.endpoint), cluster: CLUSTER, dir, name: 'accept-node', gpus: 'fake:1x22587' });
  const hellos = () => agent.log().split('\n').filter((l) => /channel open/.test(l)).length;
  const arn = await waitFor('the instance REGISTERING with its agent connected', async () => {
    const l = await listed(old.endpoint);
    if (l.REGISTERING.length !== 1) return null;
    const ci = await describe(old.endpoint, l.REGISTERING[0]);
    return ci.status === 'REGISTERING' && ci.agentConnected ? ci.containerInstanceArn : null;
  }, 30000, agent.log);
  assert.deepEqual(await listed(old.endpoint), { all: [arn], REGISTERING: [arn], ACTIVE: [], DRAINING: [] });
  await assertHeld(old.endpoint, arn, 'before the takeover');

  const before = hellos();
  await old.kill9();
  const { leader } = await waitLeader(replicas, { not: old, timeoutMs: 4 * TTL_MS + 10000 });
  await waitFor('the agent back with the new leader', () => hellos() > before, 30000, agent.log);

  // The new leader: the same one instance, still REGISTERING, its agent connected; the setting still manual.
  assert.equal(await acceptanceSetting(leader.endpoint), 'manual');
  assert.deepEqual(await listed(leader.endpoint), { all: [arn], REGISTERING: [arn], ACTIVE: [], DRAINING: [] });
  await waitFor('the instance connected to the new leader', async () => (await describe(leader.endpoint, arn)).agentConnected,
    30000, agent.log);
  const waiting = await describe(leader.endpoint, arn);
  assert.equal(waiting.status, 'REGISTERING', JSON.stringify(waiting));
  assert.equal(waiting.ec2InstanceId, 'accept-node');
  await assertHeld(leader.endpoint, arn, 'after the takeover');

  // Accepted (through any live replica: a standby forwards it to the leader), it takes the task.
  const live = replicas.filter((r) => r !== old);
  const accepted = await callAny(live, 'UpdateContainerInstancesState', { cluster: CLUSTER, containerInstances: [arn], status: 'ACTIVE' },
    { start: live.indexOf(leader) + 1 });
  assert.equal(accepted.status, 200, accepted.text);
  assert.deepEqual(accepted.json.failures, [], accepted.text);
  assert.equal(accepted.json.containerInstances[0].status, 'ACTIVE', accepted.text);
  assert.deepEqual(await listed(leader.endpoint), { all: [arn], REGISTERING: [], ACTIVE: [arn], DRAINING: [] });
  assert.equal(await acceptanceSetting(leader.endpoint), 'manual');

  const placed = await ok(leader.endpoint, 'RunTask', { cluster: CLUSTER, taskDefinition: 'held' });
  assert.equal(placed.tasks.length, 1, JSON.stringify(placed));
  assert.equal(placed.tasks[0].containerInstanceArn, arn);
  const taskArn = placed.tasks[0].taskArn;
  const running = await waitFor('the task RUNNING on the accepted instance', async () => {
    const t = (await ok(leader.endpoint, 'DescribeTasks', { cluster: CLUSTER, tasks: [taskArn] })).tasks[0];
    return t.lastStatus === 'RUNNING' ? t : null;
  }, 30000, agent.log);
  assert.deepEqual(running.containers[0].gpuIds, waiting.gpuDevices.map((g) => g.gpuId));
  // Still one registration of the host, whatever the agent did while it found the new leader.
  assert.deepEqual(await listed(leader.endpoint), { all: [arn], REGISTERING: [], ACTIVE: [arn], DRAINING: [] });
  await ok(leader.endpoint, 'StopTask', { cluster: CLUSTER, task: taskArn });
});
