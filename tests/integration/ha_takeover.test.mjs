// A takeover clients cannot see: three gpupack servers on one private PostgreSQL (ha_harness.mjs), one real agent
// given every replica, and clients sending RunTask with clientTokens through all replicas while the leader is
// killed with SIGKILL three times. The new leader loads the instance as its agent last left it (connected) and
// keeps it so for a grace of a few heartbeats while the agent finds it: no RunTask is refused as AGENT (the
// agent is healthy, it only had not reconnected yet), tasks placed meanwhile wait PENDING and run once the agent
// is back, and every clientToken is acknowledged exactly once.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { listAll, ok, removeTempDir, sharedTaskDefinition, tempDir } from './harness.mjs';
import {
  callAny, freePort, NO_POSTGRES, postgresBinDir, startAgent, startPostgres, startReplica, waitFor, waitLeader,
} from './ha_harness.mjs';

const skip = postgresBinDir() ? false : NO_POSTGRES;
const TTL_MS = 2000;
const CLUSTER = 'grace';
let pg;
let db;
const replicas = [];

before(async () => {
  if (skip) return;
  pg = await startPostgres();
  db = pg.createDatabase('takeover');
  for (let i = 0; i < 3; ++i) replicas.push(await startReplica({ db, port: await freePort(), ttlMs: TTL_MS }));
});

after(async () => {
  for (const r of replicas) await r.stop();
  pg?.close();
});

test('RunTask through a leader takeover: no AGENT refusal, every token once, every task runs', { skip, timeout: 180000 }, async () => {
  const dir = tempDir('gpupack-ha-grace-');
  const { leader } = await waitLeader(replicas, { all: true });
  await ok(leader.endpoint, 'CreateCluster', { clusterName: CLUSTER });
  const def = sharedTaskDefinition('brief', 256);
  def.containerDefinitions[0].entryPoint = ['/bin/sh', '-c'];
  def.containerDefinitions[0].command = ['exec sleep 1'];
  await ok(leader.endpoint, 'RegisterTaskDefinition', def);
  const agent = startAgent({ servers: replicas.map((r) => r.endpoint), cluster: CLUSTER, dir, name: 'grace-node', gpus: 'fake:2x22587' });
  const hellos = () => agent.log().split('\n').filter((l) => /channel open/.test(l)).length;
  try {
    await waitFor('the agent connected', async () => {
      const arns = (await ok(leader.endpoint, 'ListContainerInstances', { cluster: CLUSTER })).containerInstanceArns;
      return arns.length === 1 && hellos() >= 1;
    }, 30000, agent.log);

    const acked = new Map(); // clientToken -> task ARN
    const refusals = [];
    let running = true;
    async function worker(w) {
      for (let n = 0; running && n < 10000; ++n) {
        const token = `w${w}-${n}`;
        const r = await callAny(replicas, 'RunTask', { cluster: CLUSTER, taskDefinition: 'brief', clientToken: token, startedBy: token },
          { start: (w + n) % replicas.length, timeoutMs: 30000 });
        if (r.status !== 200 || r.json.tasks.length !== 1) {
          refusals.push(`${token}: ${r.status} ${r.text}`);
        } else {
          acked.set(token, r.json.tasks[0].taskArn);
        }
        await new Promise((res) => setTimeout(res, 50));
      }
    }
    const workers = Array.from({ length: 3 }, (_, w) => worker(w));
    for (let round = 0; round < 3; ++round) {
      await new Promise((r) => setTimeout(r, 1000));
      const { leader: old } = await waitLeader(replicas);
      const before = hellos();
      await old.kill9();
      await waitLeader(replicas, { not: old, timeoutMs: 4 * TTL_MS + 10000 });
      replicas[replicas.indexOf(old)] = await startReplica({ db, port: old.port, ttlMs: TTL_MS });
      await waitFor(`round ${round}: the agent back with the new leader`, () => hellos() > before, 30000, agent.log);
    }
    await new Promise((r) => setTimeout(r, 1000));
    running = false;
    await Promise.all(workers);
    assert.deepEqual(refusals, [], 'RunTask refused during the takeovers');
    assert.ok(acked.size > 30, `only ${acked.size} RunTasks were acknowledged`);

    const { leader: last } = await waitLeader(replicas, { all: true });
    const arns = new Set([
      ...(await listAll(last.endpoint, 'ListTasks', { cluster: CLUSTER, desiredStatus: 'RUNNING' }, 'taskArns')),
      ...(await listAll(last.endpoint, 'ListTasks', { cluster: CLUSTER, desiredStatus: 'STOPPED' }, 'taskArns')),
    ]);
    assert.equal(arns.size, acked.size, 'one task per acknowledged clientToken');
    for (const arn of acked.values()) assert.ok(arns.has(arn), `the acknowledged ${arn} exists`);
    // Every task ran to its end: none was stopped as lost with its agent.
    await waitFor('every acknowledged task ran and exited 0', async () => {
      const list = [...acked.values()];
      for (let i = 0; i < list.length; i += 100) {
        const r = await ok(last.endpoint, 'DescribeTasks', { cluster: CLUSTER, tasks: list.slice(i, i + 100) });
        for (const t of r.tasks) if (t.lastStatus !== 'STOPPED' || t.containers[0].exitCode !== 0) return false;
      }
      return true;
    }, 60000, agent.log);
  } finally {
    await agent.stop();
    removeTempDir(dir);
  }
});
