// Three gpupack servers on one private PostgreSQL (tests/integration/ha_harness.mjs): any replica answers (a
// standby forwards to the leader), and the leader is killed with SIGKILL under RunTask load, five times, while
// clients that get no answer (or a 5xx) retry the same RunTask, clientToken included, on another replica.
// A real agent given every replica (--server URL,URL,URL,URL: a dead address, then a standby) registers, connects
// to the leader, and to the
// next leader after the leader is killed; its task keeps running and a new one starts.
// After each round: every acknowledged task exists exactly once (one task per clientToken, the ARN every
// acknowledgement gave), and every GPU's used memory equals what the RUNNING and PENDING tasks on it declare.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { listAll, ok, PLAY_AGENT, registerInstance, removeTempDir, sharedTaskDefinition, tempDir } from './harness.mjs';
import {
  callAny, freePort, NO_POSTGRES, postgresBinDir, readyz, startAgent, startPostgres, startReplica, waitFor, waitLeader,
} from './ha_harness.mjs';

const skip = postgresBinDir() ? false : NO_POSTGRES;
const TTL_MS = 2000;
const CLUSTER = 'ha';
let pg;
let db;
const replicas = [];

before(async () => {
  if (skip) return;
  pg = await startPostgres();
  db = pg.createDatabase('failover');
  for (let i = 0; i < 3; ++i) replicas.push(await startReplica({ db, port: await freePort(), ttlMs: TTL_MS, extraArgs: PLAY_AGENT }));
});

after(async () => {
  for (const r of replicas) await r.stop();
  pg?.close();
});

// check reads the whole cluster through the leader and asserts the safety properties: the acknowledgements
// made before the read; with `accounting` (no load running) also the GPU accounting.
async function check(where, endpoint, ackedNow, { accounting = false } = {}) {
  const acked = new Map(ackedNow);
  const arns = new Set([
    ...(await listAll(endpoint, 'ListTasks', { cluster: CLUSTER, desiredStatus: 'RUNNING' }, 'taskArns')),
    ...(await listAll(endpoint, 'ListTasks', { cluster: CLUSTER, desiredStatus: 'STOPPED' }, 'taskArns')),
  ]);
  const tasks = [];
  const list = [...arns];
  for (let i = 0; i < list.length; i += 100) {
    const r = await ok(endpoint, 'DescribeTasks', { cluster: CLUSTER, tasks: list.slice(i, i + 100) });
    tasks.push(...r.tasks);
  }
  const byToken = new Map();
  for (const t of tasks) byToken.set(t.startedBy, [...(byToken.get(t.startedBy) ?? []), t.taskArn]);
  for (const [token, arn] of acked) {
    assert.deepEqual(byToken.get(token), [arn], `${where}: token ${token} was acknowledged with ${arn}, the cluster holds ${byToken.get(token)}`);
  }
  for (const [token, held] of byToken) assert.equal(held.length, 1, `${where}: token ${token} made ${held.length} tasks`);
  if (!accounting) return tasks.length;
  // GPU accounting: total - remaining per GPU equals the declared memory of its RUNNING and PENDING tasks.
  const declared = new Map();
  for (const t of tasks) {
    if (t.lastStatus !== 'RUNNING' && t.lastStatus !== 'PENDING') continue;
    for (const c of t.containers)
      for (const id of c.gpuIds ?? []) declared.set(id, (declared.get(id) ?? 0) + (c.gpuSharingStrategy?.nvidiaMps?.memory ?? 0));
  }
  const ciArns = await listAll(endpoint, 'ListContainerInstances', { cluster: CLUSTER }, 'containerInstanceArns');
  const r = await ok(endpoint, 'DescribeContainerInstances', { cluster: CLUSTER, containerInstances: ciArns });
  let gpus = 0;
  for (const ci of r.containerInstances)
    for (const g of ci.gpuDevices ?? []) {
      ++gpus;
      assert.equal(g.totalMemoryInMiB - g.remainingMemoryInMiB, declared.get(g.gpuId) ?? 0, `${where}: GPU ${g.gpuId} accounting`);
    }
  assert.equal(gpus, 32);
  return tasks.length;
}

test('three replicas: SIGKILL of the leader under RunTask load loses and duplicates nothing', { skip, timeout: 150000 }, async () => {
  const { leader } = await waitLeader(replicas, { all: true });
  // Set up through a standby: it forwards to the leader.
  const standby = replicas.find((r) => r !== leader);
  await ok(standby.endpoint, 'CreateCluster', { clusterName: CLUSTER });
  // Room for 10,240 tasks (320 per GPU; CPU and memory for more), far more than the load makes.
  await ok(standby.endpoint, 'RegisterTaskDefinition', sharedTaskDefinition('infer', 256));
  for (let i = 0; i < 4; ++i)
    await registerInstance(standby.endpoint, CLUSTER, Array.from({ length: 8 }, (_, g) => [`GPU-${i}-${g}`, 81920]),
      { cpu: 1 << 20, memory: 1 << 24 });
  const metrics = await (await fetch(standby.endpoint + '/metrics')).text();
  assert.match(metrics, /^gpupack_replica_leader 0$/m, 'a standby answers /metrics itself');
  const leaderMetrics = await (await fetch(leader.endpoint + '/metrics')).text();
  assert.match(leaderMetrics, /^gpupack_replica_leader 1$/m);
  assert.match(leaderMetrics, /^gpupack_requests_total|^gpupack_/m);
  const ready = await readyz(standby.endpoint);
  assert.equal(ready.status, 200);
  assert.equal(ready.json.role, 'standby');
  assert.equal(ready.json.leader, leader.endpoint);

  const acked = new Map(); // clientToken -> task ARN
  let running = true;
  let calls = 0;
  async function worker(w) {
    for (let n = 0; running && n < 100000; ++n) {
      const token = `w${w}-${n}`;
      const r = await callAny(replicas, 'RunTask', { cluster: CLUSTER, taskDefinition: 'infer', count: 1, clientToken: token, startedBy: token },
        { start: (w + n) % replicas.length, timeoutMs: 30000 });
      ++calls;
      assert.equal(r.status, 200, `RunTask ${token} never succeeded: ${r.text}`);
      assert.equal(r.json.tasks.length, 1, `RunTask ${token}: ${r.text}`);
      acked.set(token, r.json.tasks[0].taskArn);
    }
  }
  const workers = Array.from({ length: 6 }, (_, w) => worker(w));
  const takeovers = [];
  for (let round = 0; round < 5; ++round) {
    await new Promise((r) => setTimeout(r, 700));
    const { leader: old, epoch } = await waitLeader(replicas);
    const killedAt = Date.now();
    await old.kill9();
    const { leader: next, epoch: nextEpoch } = await waitLeader(replicas, { not: old, timeoutMs: 4 * TTL_MS + 10000 });
    takeovers.push(Date.now() - killedAt);
    assert.ok(nextEpoch > epoch, `the new leader's epoch ${nextEpoch} is above the old ${epoch}`);
    assert.notEqual(next, old);
    const i = replicas.indexOf(old);
    replicas[i] = await startReplica({ db, port: old.port, ttlMs: TTL_MS, extraArgs: PLAY_AGENT });
    await check(`round ${round}`, next.endpoint, acked);
  }
  running = false;
  await Promise.all(workers);
  const { leader: last } = await waitLeader(replicas, { all: true });
  const tasks = await check('final', last.endpoint, acked, { accounting: true });
  assert.ok(acked.size > 20, `only ${acked.size} RunTasks were acknowledged`);
  assert.equal(tasks, acked.size);
  console.log(`# ${acked.size} tasks acknowledged over ${calls} calls; takeovers (ms): ${takeovers.join(', ')}`);
});

test('an agent given every replica follows the leader', { skip, timeout: 120000 }, async () => {
  const dir = tempDir('gpupack-ha-agent-');
  const { leader } = await waitLeader(replicas, { all: true });
  const ordered = [...replicas.filter((r) => r !== leader), leader]; // a standby first
  const nobody = `http://127.0.0.1:${await freePort()}`; // and before them an address where nothing listens
  const cluster = 'agents';
  await ok(leader.endpoint, 'CreateCluster', { clusterName: cluster });
  const def = sharedTaskDefinition('sleepy', 1024);
  def.containerDefinitions[0].entryPoint = ['/bin/sh', '-c'];
  def.containerDefinitions[0].command = ['exec sleep 600'];
  await ok(leader.endpoint, 'RegisterTaskDefinition', def);
  const servers = [nobody, ...ordered.map((r) => r.endpoint)];
  const agent = startAgent({ servers, cluster, dir, name: 'ha-node', gpus: 'fake:2x22587' });
  const waitForAgent = (what, f, ms = 30000) => waitFor(what, f, ms, agent.log);
  const connected = async () => {
    const { leader: now } = await waitLeader(replicas, { timeoutMs: 5000 });
    const arns = (await ok(now.endpoint, 'ListContainerInstances', { cluster })).containerInstanceArns;
    if (arns.length !== 1) return false;
    const ci = (await ok(now.endpoint, 'DescribeContainerInstances', { cluster, containerInstances: arns })).containerInstances[0];
    return ci.agentConnected;
  };
  const running = (arn) => async () => {
    const { leader: now } = await waitLeader(replicas, { timeoutMs: 5000 });
    const t = (await ok(now.endpoint, 'DescribeTasks', { cluster, tasks: [arn] })).tasks[0];
    return t.lastStatus === 'RUNNING';
  };
  try {
    await waitForAgent('the agent connected to the leader', connected);
    const first = (await ok(ordered[0].endpoint, 'RunTask', { cluster, taskDefinition: 'sleepy' })).tasks[0].taskArn;
    await waitForAgent('the first task RUNNING', running(first));

    await leader.kill9();
    await waitLeader(replicas, { not: leader, timeoutMs: 4 * TTL_MS + 10000 });
    replicas[replicas.indexOf(leader)] = await startReplica({ db, port: leader.port, ttlMs: TTL_MS, extraArgs: PLAY_AGENT });
    await waitForAgent('the agent connected to the new leader', connected);
    await waitForAgent('the first task still RUNNING', running(first));
    // Through the standby, retried as SDK clients retry a 5xx: until the standby's next lease step it may still
    // forward to the killed leader's address, where the restarted replica answers "a standby too: retry".
    const again = await callAny([ordered[0]], 'RunTask', { cluster, taskDefinition: 'sleepy', clientToken: 'after-takeover' },
      { timeoutMs: 20000 });
    assert.equal(again.status, 200, again.text);
    const second = again.json.tasks[0].taskArn;
    await waitForAgent('a task run after the takeover RUNNING', running(second));
  } finally {
    await agent.stop();
    agent.reapTasks();
    removeTempDir(dir);
  }
});
