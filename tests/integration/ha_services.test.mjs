// Services through a leader takeover (tests/integration/ha_harness.mjs): three real `gpupack server` replicas on a
// private PostgreSQL and two real `gpupack agent`s (process runtime, one simulated 10,000 MiB GPU each), every
// agent given every replica. A service of three replicas is steady on web:1, then deployed twice, and each time
// the leader is killed with SIGKILL in the middle of the deployment:
//   1. to web:2 while two standalone "ballast" tasks leave room for one or two new replicas only: the deployment
//      stops half done, web:1 and web:2 replicas running side by side and a replica waiting for GPU memory. The
//      leader dies there; once a standby leads, the ballast is stopped and the deployment goes on.
//   2. to web:3, every new replica at once (maximumPercent 200), the leader killed as soon as it acknowledged
//      UpdateService: the new tasks placed, their assignments on their way to the agents or not yet.
// Each time the leader is first frozen (SIGSTOP) and the database read, to show the deployment half done in what
// the next leader loads. A standby takes the lease and goes on from there; afterwards:
//   - the service is steady on the new revision with exactly desiredCount tasks listed, all RUNNING;
//   - no task was started twice: every revision made exactly desiredCount tasks (none replaced, none more), each
//     task was started once by one agent, and each replica process wrote its process id once: desiredCount
//     processes of the new revision alive, none of the older ones;
//   - the service's state survived: the deployment started before the kill is the one that completed (its id and
//     createdAt), every event of before the kill is still listed, and both deployments' completions are there.
// Then the killed replica comes back on its address as a standby, and the service stays as it is.
//
// Run: GPUPACK_BIN=build/gpupack node --test tests/integration/ha_services.test.mjs   (ctest: integration_ha_services)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { ok, removeTempDir, taskDir, tempDir } from './harness.mjs';
import {
  callAny, freePort, NO_POSTGRES, postgresBinDir, startAgent, startPostgres, startReplica, waitFor, waitLeader,
} from './ha_harness.mjs';

const skip = postgresBinDir() ? false : NO_POSTGRES;
const TTL_MS = 2000;
const CLUSTER = 'inference';
const SERVICE = 'web';
const DESIRED = 3;
const GPU_MIB = 10000;
let pg;
let db;
let dir;
const replicas = [];
const agents = [];

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

before(async () => {
  if (skip) return;
  dir = tempDir('gpupack-ha-services-');
  pg = await startPostgres();
  db = pg.createDatabase('services');
  for (let i = 0; i < 3; ++i) replicas.push(await replica(await freePort()));
});

after(async () => {
  for (const a of agents) await a.stop();
  for (const r of replicas) await r.stop();
  // The agents leave their tasks running when they stop (as ECS's agent does): end those this test started.
  if (dir && fs.existsSync(path.join(dir, 'pids')))
    for (const family of fs.readdirSync(path.join(dir, 'pids')))
      for (const pid of alive(family)) process.kill(pid, 'SIGKILL');
  pg?.close();
  if (dir) removeTempDir(dir);
});

function replica(port) {
  return startReplica({ db, port, ttlMs: TTL_MS, logLevel: process.env.HA_LOG ?? 'warn' });
}

// taskDef: a task definition of `family` whose one container takes `memory` MiB of a shared GPU and writes its
// process id to <dir>/pids/<pids>/<pid> once, when it starts, and then sleeps.
function taskDef(family, pids, memory) {
  taskDir(dir, 'pids', pids);  // the task (an unprivileged user) writes there
  return {
    family,
    containerDefinitions: [{
      name: 'model', image: 'busybox', cpu: 64, memory: 64, essential: true,
      entryPoint: ['/bin/sh', '-c'],
      command: [`echo $$ > ${path.join(dir, 'pids', pids)}/$$; exec sleep 600`],
      resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { memory } } }],
    }],
  };
}

// started: the process ids the tasks of `pids` wrote (one per process start); alive: those still running their
// `sleep 600` (a process id reused by something else is not taken for one).
const started = (pids) => fs.readdirSync(path.join(dir, 'pids', pids)).map(Number);
function alive(pids) {
  return started(pids).filter((pid) => {
    try {
      return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8') === 'sleep\x00600\x00';
    } catch {
      return false;
    }
  });
}

// api calls any replica (a standby forwards to the leader), retrying while the replicas change leader.
async function api(op, body) {
  const r = await callAny(replicas, op, body, { timeoutMs: 20000 });
  assert.equal(r.status, 200, `${op}: ${r.text}`);
  return r.json;
}

async function service() {
  const d = await api('DescribeServices', { cluster: CLUSTER, services: [SERVICE] });
  assert.equal(d.services.length, 1, JSON.stringify(d.failures));
  return d.services[0];
}

// serviceTasks: every task the service ever made (desired RUNNING, and stopped ones, describable for an hour).
async function serviceTasks() {
  const arns = [];
  for (const desiredStatus of ['RUNNING', 'STOPPED'])
    arns.push(...(await api('ListTasks', { cluster: CLUSTER, serviceName: SERVICE, desiredStatus })).taskArns);
  if (arns.length === 0) return [];
  return (await api('DescribeTasks', { cluster: CLUSTER, tasks: arns })).tasks;
}

const runningArns = async () =>
  (await api('ListTasks', { cluster: CLUSTER, serviceName: SERVICE, desiredStatus: 'RUNNING' })).taskArns.sort();

const connected = async () => {
  const arns = (await api('ListContainerInstances', { cluster: CLUSTER })).containerInstanceArns;
  if (arns.length !== agents.length) return false;
  const d = await api('DescribeContainerInstances', { cluster: CLUSTER, containerInstances: arns });
  return d.containerInstances.every((i) => i.agentConnected);
};

const revisionOf = (t) => t.taskDefinitionArn.slice(t.taskDefinitionArn.lastIndexOf(':') + 1);
const logs = () => agents.map((a) => `--- ${a.name}\n${a.log()}`).join('\n') +
  replicas.map((r) => `\n--- replica ${r.endpoint}\n${r.output.slice(-4000)}`).join('');

const steady = (svc) => svc.runningCount === DESIRED && svc.pendingCount === 0 && svc.deployments.length === 1 &&
  svc.deployments[0].rolloutState === 'COMPLETED';

// killDuringDeployment registers web:<revision> (replicas of `memory` MiB) and updates the service to it with
// `deploymentConfiguration`; once `now(svc)` holds of the service as the leader shows it, it freezes the leader,
// reads the database and kills the leader with SIGKILL. Once a standby leads, `then()` runs; the rest checks what
// the file's comment lists.
async function killDuringDeployment({ revision, memory, deploymentConfiguration, now, then = async () => {} }) {
  const { leader } = await waitLeader(replicas, { all: true });
  await api('RegisterTaskDefinition', taskDef(SERVICE, revision, memory));
  const updated = (await api('UpdateService', {
    cluster: CLUSTER, service: SERVICE, taskDefinition: `${SERVICE}:${revision}`, deploymentConfiguration,
  })).service;
  const deployment = updated.deployments[0];
  const previous = updated.deployments[1].id;
  assert.equal(deployment.status, 'PRIMARY');
  assert.ok(deployment.taskDefinition.endsWith(`task-definition/${SERVICE}:${revision}`), deployment.taskDefinition);
  const halfway = await waitFor(`the deployment to ${SERVICE}:${revision} at the moment to kill`, async () => {
    const svc = (await ok(leader.endpoint, 'DescribeServices', { cluster: CLUSTER, services: [SERVICE] })).services[0];
    return now(svc) ? svc : null;
  }, 30000, logs);
  leader.child.kill('SIGSTOP');  // frozen: it commits nothing more, so the database holds what it dies with
  const stored = JSON.parse(pg.psql('SELECT doc FROM services', 'services'));
  const killedEpoch = Number(pg.psql('SELECT epoch FROM gpupack_leader_lease', 'services'));
  await leader.kill9();
  assert.deepEqual(stored.deployments.map((d) => d.id), [deployment.id, previous],
    `the database holds the deployment half done: ${JSON.stringify(stored.deployments)}`);
  assert.ok(stored.deployments[0].running_count < DESIRED, JSON.stringify(stored.deployments));

  // A standby takes over and goes on from the database.
  const { leader: next, epoch } = await waitLeader(replicas, { not: leader, timeoutMs: 4 * TTL_MS + 10000 });
  assert.ok(epoch > killedEpoch, `the new leader's epoch ${epoch} is above the killed one's ${killedEpoch}`);
  replicas.splice(replicas.indexOf(leader), 1);  // api() asks the survivors only
  await then();
  await waitFor('both agents connected to the new leader', connected, 30000, logs);
  await waitFor(`the service steady on ${SERVICE}:${revision}`, async () => steady(await service()), 40000, logs);

  // Exactly desiredCount tasks, all of the new revision. Every revision so far made desiredCount tasks (none
  // replaced, none more), and every task was started once, by one agent, into one process.
  const svc = await service();
  assert.equal(svc.desiredCount, DESIRED);
  assert.equal(svc.runningCount, DESIRED);
  const running = await runningArns();
  assert.equal(running.length, DESIRED);
  const all = await serviceTasks();
  const revisions = Array.from({ length: Number(revision) }, (_, i) => String(i + 1));
  for (const r of revisions) {
    const of = all.filter((t) => revisionOf(t) === r);
    assert.equal(of.length, DESIRED, `${SERVICE}:${r} has ${of.length} tasks: ${of.map((t) => t.taskArn)}`);
    for (const t of of) assert.equal(t.lastStatus, r === revision ? 'RUNNING' : 'STOPPED', t.taskArn);
  }
  assert.deepEqual(all.filter((t) => revisionOf(t) === revision).map((t) => t.taskArn).sort(), running);
  assert.equal(all.length, revisions.length * DESIRED, 'the service made a task of no other revision');
  const agentLogs = agents.map((a) => a.log()).join('\n');
  for (const t of all) {
    const starts = agentLogs.split(`agent: task ${t.taskArn} RUNNING`).length - 1;
    assert.equal(starts, 1, `${t.taskArn} was started ${starts} times by the agents`);
  }
  const older = () => revisions.filter((r) => r !== revision).flatMap(alive);
  await waitFor(`${DESIRED} processes of ${SERVICE}:${revision} and none of before`,
    () => alive(revision).length === DESIRED && older().length === 0, 10000, logs);
  await sleep(500);
  assert.equal(alive(revision).length, DESIRED, 'a replica was started twice');
  for (const r of revisions)
    assert.equal(started(r).length, DESIRED, `${SERVICE}:${r} processes ever started: ${started(r)}`);

  // The service's state survived the takeover.
  assert.equal(svc.deployments[0].id, deployment.id, 'the deployment started before the kill is the one that completed');
  assert.equal(svc.deployments[0].createdAt, deployment.createdAt);
  assert.ok(svc.taskDefinition.endsWith(`task-definition/${SERVICE}:${revision}`), svc.taskDefinition);
  const ids = new Set(svc.events.map((e) => e.id));
  for (const e of halfway.events) assert.ok(ids.has(e.id), `the event "${e.message}" of before the kill is gone`);
  const messages = svc.events.map((e) => e.message);
  for (const d of [previous, deployment.id])
    assert.ok(messages.includes(`(service ${SERVICE}) (deployment ${d}) deployment completed.`), JSON.stringify(messages));
  assert.equal(messages[0], `(service ${SERVICE}) has reached a steady state.`);

  // The killed replica returns on its address as a standby; the service stays as it is.
  replicas.push(await replica(leader.port));
  const { leader: still } = await waitLeader(replicas, { all: true, timeoutMs: 20000 });
  assert.equal(still, next);
  await sleep(1000);
  const later = await service();
  assert.ok(steady(later), JSON.stringify(later.deployments));
  assert.deepEqual(later.events.map((e) => e.id), svc.events.map((e) => e.id));
  assert.deepEqual(await runningArns(), running);
}

test('a leader killed in the middle of a deployment: the new leader finishes it, no task started twice', {
  skip, timeout: 120000,
}, async () => {
  await waitLeader(replicas, { all: true });
  await api('CreateCluster', { clusterName: CLUSTER });
  for (const name of ['node-a', 'node-b']) {
    fs.mkdirSync(path.join(dir, name));
    const agent = startAgent({ servers: replicas.map((r) => r.endpoint), cluster: CLUSTER, dir: path.join(dir, name),
      name, gpus: `fake:1x${GPU_MIB}` });
    agent.name = name;
    agents.push(agent);
  }
  await waitFor('both agents connected', connected, 30000, logs);

  // Ballast: 6,000 MiB on each GPU (the second does not fit beside the first), 4,000 MiB left on each.
  await api('RegisterTaskDefinition', taskDef('ballast', 'ballast', 6000));
  const ballast = (await api('RunTask', { cluster: CLUSTER, taskDefinition: 'ballast', count: 2 })).tasks
    .map((t) => t.taskArn);
  assert.equal(ballast.length, 2);
  const where = (await api('DescribeTasks', { cluster: CLUSTER, tasks: ballast })).tasks.map((t) => t.containerInstanceArn);
  assert.notEqual(where[0], where[1]);

  await api('RegisterTaskDefinition', taskDef(SERVICE, '1', 1000));
  await api('CreateService',
    { cluster: CLUSTER, serviceName: SERVICE, taskDefinition: `${SERVICE}:1`, desiredCount: DESIRED });
  await waitFor(`the service steady on ${SERVICE}:1`, async () => steady(await service()), 30000, logs);
  await waitFor(`${DESIRED} processes of ${SERVICE}:1`, () => alive('1').length === DESIRED, 10000, logs);

  // 1. Replicas of 2,500 MiB. Beside the ballast and three of 1,000 MiB, one of the GPUs has room for one (it holds
  //    at most one web:1 replica); while three replicas must keep running (minimumHealthyPercent 100), the two
  //    GPUs never have room for a third: 20,000 - 12,000 - 2 x 2,500 - 1,000 = 2,000 MiB. The deployment stops
  //    with one or two new replicas running beside the old ones, and the last waiting for GPU memory.
  await killDuringDeployment({
    revision: '2', memory: 2500, deploymentConfiguration: { minimumHealthyPercent: 100, maximumPercent: 200 },
    now: (svc) => {
      const [primary, old] = svc.deployments;
      return svc.deployments.length === 2 && primary.runningCount >= 1 && old.runningCount >= 1 &&
        svc.events.some((e) => e.message.includes('has insufficient GPU memory available'));
    },
    then: async () => {
      for (const task of ballast) await api('StopTask', { cluster: CLUSTER, task, reason: 'room for the deployment' });
    },
  });
  await waitFor('the ballast stopped', () => alive('ballast').length === 0, 10000, logs);
  // 2. Every new replica at once, the leader killed as soon as it acknowledged the deployment.
  await killDuringDeployment({
    revision: '3', memory: 1000, deploymentConfiguration: { minimumHealthyPercent: 100, maximumPercent: 200 },
    now: () => true,
  });

  await api('DeleteService', { cluster: CLUSTER, service: SERVICE, force: true });
  await waitFor('every replica stopped', () => alive('3').length === 0, 20000, logs);
});
