// Capacity providers, black box: a real `gpupack server` (--max-provisioning-tasks 3) and two real `gpupack agent`s
// (process runtime, one simulated 10,000 MiB GPU each), one joined to capacity provider team-a and the other to
// team-b, driven with the real AWS SDK for JavaScript: each provider's tasks run only on its own instance; a full
// provider acknowledges tasks in PROVISIONING and runs them in order as tasks stop; the waiting limit is refused
// with LimitExceededException; a server kill -9 with tasks waiting loses none and starts none twice; a smaller task
// backfills past a head that does not fit, and once the head holds its reservation (the server restarted with
// --backfill-reservation-after 0) a smaller one waits behind it and the head is not starved; a priority task passes
// lower ones; a team's GPU-memory quota holds (a third agent, provider "shared" with a quota tag); a service runs
// through a provider, and UpdateService of its strategy is refused by name.
//
// Every task writes its process id to a file named after its task definition family, so the test counts the
// processes that ever ran and that run now.
//
// Run: GPUPACK_BIN=build/gpupack node --test tests/sdk/capacity_providers_sdk.test.mjs   (ctest: sdk_capacity_providers)
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import {
  ClientException,
  CreateCapacityProviderCommand,
  CreateServiceCommand,
  DeleteServiceCommand,
  DeleteCapacityProviderCommand,
  CreateClusterCommand,
  DescribeCapacityProvidersCommand,
  DescribeClustersCommand,
  DescribeContainerInstancesCommand,
  DescribeTasksCommand,
  ECSClient,
  InvalidParameterException,
  LimitExceededException,
  ListContainerInstancesCommand,
  ListTasksCommand,
  PutClusterCapacityProvidersCommand,
  RegisterTaskDefinitionCommand,
  RunTaskCommand,
  StopTaskCommand,
  UnsupportedFeatureException,
  UpdateCapacityProviderCommand,
  UpdateServiceCommand,
} from '@aws-sdk/client-ecs';

import { gpupackBin, launch, removeTempDir, tempDir } from '../integration/harness.mjs';

const GPU_MIB = 10000;
const TASK_MIB = 6000;  // one task per GPU: a provider of one instance runs one task at a time

let dir;
let port;
let server;
let ecs;
const agents = [];

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, probe, timeoutMs = 60000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

function client() {
  return new ECSClient({ endpoint: server.endpoint, region: 'us-east-1',
    credentials: { accessKeyId: 'gpupack', secretAccessKey: 'gpupack' }, maxAttempts: 1 });
}

async function startServer(extra = []) {
  server = await launch(['server', '--listen', `127.0.0.1:${port ?? 0}`, '--db', path.join(dir, 'gpupack.db'),
    '--max-provisioning-tasks', '3', '--log-level', 'warn', ...extra], { what: 'gpupack server' });
  port ??= new URL(server.endpoint).port;
  ecs = client();
}

function startAgent(name, provider) {
  const child = spawn(gpupackBin(), ['agent', '--server', server.endpoint, '--gpus', `fake:1x${GPU_MIB}`,
    '--capacity-provider', provider, '--task-user', 'root', '--state-dir', path.join(dir, name), '--mps-pipe-dir', path.join(dir, `${name}-mps`),
    '--name', name, '--cpu', '4096', '--memory', '8192', '--stop-grace-ms', '500', '--log-level', 'warn'],
  { stdio: ['ignore', 'ignore', 'ignore'] });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  agents.push({ async stop() {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 15000);
    await exited;
    clearTimeout(timer);
  } });
}

// instances: the container instances whose agent is connected, by capacity provider name.
async function instances() {
  const list = await ecs.send(new ListContainerInstancesCommand({}));
  if (list.containerInstanceArns.length === 0) return {};
  const d = await ecs.send(new DescribeContainerInstancesCommand({ containerInstances: list.containerInstanceArns }));
  const out = {};
  for (const i of d.containerInstances) if (i.agentConnected) out[i.capacityProviderName] = i.containerInstanceArn;
  return out;
}

// jobDef: one container that takes `mib` of a shared GPU and writes its process id under <dir>/pids/<family>.
function jobDef(family, mib = TASK_MIB) {
  const pids = path.join(dir, 'pids', family);
  fs.mkdirSync(pids, { recursive: true });
  return { family, containerDefinitions: [{ name: 'job', image: 'busybox', cpu: 64, memory: 64, essential: true,
    entryPoint: ['/bin/sh', '-c'], command: [`echo $$ > ${pids}/$$; exec sleep 600`],
    resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { memory: mib } } }] }] };
}

// pids: [ever started, running now] for a family.
function pids(family) {
  const all = fs.readdirSync(path.join(dir, 'pids', family)).map(Number);
  const alive = all.filter((pid) => { try { process.kill(pid, 0); return true; } catch { return false; } });
  return [all.length, alive.length];
}

async function run(family, provider, tags = []) {
  const r = await ecs.send(new RunTaskCommand({ taskDefinition: family, tags,
    capacityProviderStrategy: [{ capacityProvider: provider, weight: 1 }] }));
  assert.equal(r.tasks.length, 1, JSON.stringify(r.failures));
  assert.equal(r.tasks[0].capacityProviderName, provider);
  return r.tasks[0];
}

async function task(arn) {
  const d = await ecs.send(new DescribeTasksCommand({ tasks: [arn] }));
  assert.equal(d.tasks.length, 1, JSON.stringify(d.failures));
  return d.tasks[0];
}

const statusOf = async (arn) => (await task(arn)).lastStatus;

describe('capacity providers with the AWS SDK for JavaScript', () => {
  let byProvider;

  before(async () => {
    dir = tempDir('gpupack-capacity-');
    await startServer();
    await ecs.send(new CreateClusterCommand({ clusterName: 'default' }));
    await ecs.send(new CreateCapacityProviderCommand({ name: 'team-a' }));
    await ecs.send(new CreateCapacityProviderCommand({ name: 'team-b' }));
    await ecs.send(new PutClusterCapacityProvidersCommand({ cluster: 'default',
      capacityProviders: ['team-a', 'team-b'], defaultCapacityProviderStrategy: [] }));
    startAgent('node-a', 'team-a');
    startAgent('node-b', 'team-b');
    byProvider = await waitFor('both agents', async () => {
      const i = await instances();
      return i['team-a'] && i['team-b'] ? i : null;
    });
    for (const f of ['alpha', 'beta', 'queued', 'big', 'high', 'low']) await ecs.send(new RegisterTaskDefinitionCommand(jobDef(f)));
    await ecs.send(new RegisterTaskDefinitionCommand(jobDef('small', 3000)));
  });

  after(async () => {
    for (const a of agents) await a.stop();
    await server?.stop();
    // The agents leave their tasks running when they stop (as ECS's agent does): end those this test started.
    if (dir && fs.existsSync(path.join(dir, 'pids')))
      for (const family of fs.readdirSync(path.join(dir, 'pids')))
        for (const pid of fs.readdirSync(path.join(dir, 'pids', family)).map(Number))
          try { process.kill(pid, 'SIGKILL'); } catch { /* gone already */ }
    if (dir) removeTempDir(dir);
  });

  test('the providers and the cluster answer in ECS shapes', async () => {
    const d = await ecs.send(new DescribeCapacityProvidersCommand({ capacityProviders: ['team-a', 'team-b'] }));
    assert.deepEqual(d.capacityProviders.map((p) => [p.name, p.status]), [['team-a', 'ACTIVE'], ['team-b', 'ACTIVE']]);
    const c = await ecs.send(new DescribeClustersCommand({ clusters: ['default'] }));
    assert.deepEqual(c.clusters[0].capacityProviders, ['team-a', 'team-b']);
    await assert.rejects(ecs.send(new RunTaskCommand({ taskDefinition: 'alpha', launchType: 'EC2',
      capacityProviderStrategy: [{ capacityProvider: 'team-a', weight: 1 }] })), (e) => e instanceof InvalidParameterException);
  });

  test('UpdateCapacityProvider and DeleteCapacityProvider: in use is refused, a free one turns INACTIVE', async () => {
    await ecs.send(new CreateCapacityProviderCommand({ name: 'spare' }));
    const u = await ecs.send(new UpdateCapacityProviderCommand({ name: 'spare' }));
    assert.equal(u.capacityProvider.updateStatus, 'UPDATE_COMPLETE');
    await assert.rejects(ecs.send(new DeleteCapacityProviderCommand({ capacityProvider: 'team-a' })),
      (e) => e instanceof ClientException);
    const del = await ecs.send(new DeleteCapacityProviderCommand({ capacityProvider: 'spare' }));
    assert.equal(del.capacityProvider.status, 'INACTIVE');
    assert.equal(del.capacityProvider.updateStatus, 'DELETE_COMPLETE');
    const d = await ecs.send(new DescribeCapacityProvidersCommand({ capacityProviders: ['spare', 'team-a'] }));
    assert.deepEqual(d.capacityProviders.map((p) => [p.name, p.status]), [['spare', 'INACTIVE'], ['team-a', 'ACTIVE']]);
  });

  test('two providers on different instances: each one\'s tasks run only on its own instance', async () => {
    const a = await run('alpha', 'team-a');
    const b = await run('beta', 'team-b');
    assert.equal(a.containerInstanceArn, byProvider['team-a']);
    assert.equal(b.containerInstanceArn, byProvider['team-b']);
    await waitFor('both RUNNING', async () => (await statusOf(a.taskArn)) === 'RUNNING' && (await statusOf(b.taskArn)) === 'RUNNING');
    await ecs.send(new StopTaskCommand({ task: b.taskArn }));
    await waitFor('beta stopped', async () => (await statusOf(b.taskArn)) === 'STOPPED');
  });

  const waiting = [];
  let holder;

  test('a full provider acknowledges tasks PROVISIONING and runs them in order as tasks stop', async () => {
    const running = (await ecs.send(new ListTasksCommand({ family: 'alpha' }))).taskArns;
    assert.equal(running.length, 1);
    holder = running[0];
    for (let i = 0; i < 3; ++i) {
      const t = await run('queued', 'team-a');
      assert.equal(t.lastStatus, 'PROVISIONING');
      assert.equal(t.containerInstanceArn, undefined);
      waiting.push(t.taskArn);
    }
    // team-b has room: its instance stays free of team-a's tasks.
    await sleep(300);
    for (const arn of waiting) assert.equal(await statusOf(arn), 'PROVISIONING');
    // The first in line starts when the holder stops; the others keep waiting, in order.
    await ecs.send(new StopTaskCommand({ task: holder }));
    await waitFor('the first waiting task RUNNING', async () => (await statusOf(waiting[0])) === 'RUNNING');
    const first = await task(waiting[0]);
    assert.equal(first.containerInstanceArn, byProvider['team-a']);
    assert.equal(await statusOf(waiting[1]), 'PROVISIONING');
    assert.equal(await statusOf(waiting[2]), 'PROVISIONING');
    holder = waiting.shift();
  });

  test('the waiting limit is refused with LimitExceededException', async () => {
    waiting.push((await run('queued', 'team-a')).taskArn);  // 3 waiting: the server's --max-provisioning-tasks
    await assert.rejects(ecs.send(new RunTaskCommand({ taskDefinition: 'queued',
      capacityProviderStrategy: [{ capacityProvider: 'team-b', weight: 1 }] })),
    (e) => e instanceof LimitExceededException && /PROVISIONING/.test(e.message));
  });

  test('a server kill -9 with tasks waiting loses none and starts none twice', async () => {
    const { signal } = await server.kill9();
    assert.equal(signal, 'SIGKILL');
    await startServer();  // the same database and port: the agents reconnect by themselves
    await waitFor('both agents back', async () => Object.keys(await instances()).length === 2);
    for (const arn of waiting) assert.equal(await statusOf(arn), 'PROVISIONING');
    assert.equal(await statusOf(holder), 'RUNNING');
    // Drain the line: each stop lets exactly the next one run, in order.
    while (waiting.length > 0) {
      await ecs.send(new StopTaskCommand({ task: holder }));
      await waitFor('the next in line RUNNING', async () => (await statusOf(waiting[0])) === 'RUNNING');
      for (const arn of waiting.slice(1)) assert.equal(await statusOf(arn), 'PROVISIONING');
      holder = waiting.shift();
    }
    await waitFor('one queued process running', async () => pids('queued')[1] === 1);
    // Four queued tasks were started (three in line before the restart, one after): four processes ever, one now.
    assert.deepEqual(pids('queued'), [4, 1], 'a queued task was started twice or not at all');
    await ecs.send(new StopTaskCommand({ task: holder }));
  });
  const running = (arn) => waitFor(`${arn} RUNNING`, async () => (await statusOf(arn)) === 'RUNNING');
  const stop = async (arn) => {
    await ecs.send(new StopTaskCommand({ task: arn }));
    await waitFor(`${arn} STOPPED`, async () => (await statusOf(arn)) === 'STOPPED');
  };
  let big1, head, small;

  test('a smaller task backfills past a head that does not fit', async () => {
    await waitFor('the last holder STOPPED', async () => (await statusOf(holder)) === 'STOPPED');
    big1 = (await run('big', 'team-a')).taskArn;  // 6,000 of 10,000 MiB
    head = await run('big', 'team-a');             // another 6,000 does not fit: the head of the line
    assert.equal(head.lastStatus, 'PROVISIONING');
    head = head.taskArn;
    const s = await run('small', 'team-a');        // 3,000 fits the 4,000 left: it starts past the head
    assert.equal(s.lastStatus, 'PENDING');
    assert.equal(s.containerInstanceArn, byProvider['team-a']);
    small = s.taskArn;
    await running(small);
    assert.equal(await statusOf(head), 'PROVISIONING');
  });

  test('once the head holds its reservation a smaller task waits behind it, and the head is not starved', async () => {
    await server.stop();
    await startServer(['--backfill-reservation-after', '0']);  // the head has waited long enough at once
    await waitFor('both agents back', async () => Object.keys(await instances()).length === 2);
    const behind = await run('small', 'team-a');  // 1,000 MiB free: waits
    assert.equal(behind.lastStatus, 'PROVISIONING');
    await stop(small);  // 4,000 free: room for `behind`, but team-a's instance is held for the head
    await sleep(300);
    assert.equal(await statusOf(behind.taskArn), 'PROVISIONING');
    assert.equal(await statusOf(head), 'PROVISIONING');
    await stop(big1);  // 10,000 free: the head first, then the small task beside it
    await running(head);
    await running(behind.taskArn);
    assert.equal((await task(head)).containerInstanceArn, byProvider['team-a']);
    await stop(head);
    await stop(behind.taskArn);
  });

  test('a priority task passes lower ones', async () => {
    const holderB = (await run('big', 'team-b')).taskArn;
    await running(holderB);
    const low1 = (await run('low', 'team-b')).taskArn, low2 = (await run('low', 'team-b')).taskArn;
    const high = await run('high', 'team-b', [{ key: 'gpupack:priority', value: '10' }]);
    assert.equal(high.lastStatus, 'PROVISIONING');
    await stop(holderB);
    await running(high.taskArn);
    assert.equal(await statusOf(low1), 'PROVISIONING');
    assert.equal(await statusOf(low2), 'PROVISIONING');
    await stop(high.taskArn);
    await running(low1);
    assert.equal(await statusOf(low2), 'PROVISIONING');
    await stop(low1);
    await running(low2);
    await stop(low2);
  });

  test('a team\'s GPU-memory quota holds its tasks and not another team\'s', async () => {
    await ecs.send(new CreateCapacityProviderCommand({ name: 'shared',
      tags: [{ key: 'gpupack:quota-gpu-memory:ml', value: '6000' }] }));
    await ecs.send(new PutClusterCapacityProvidersCommand({ cluster: 'default',
      capacityProviders: ['team-a', 'team-b', 'shared'], defaultCapacityProviderStrategy: [] }));
    startAgent('node-s', 'shared');
    await waitFor('the shared agent', async () => (await instances()).shared);
    const ml = [{ key: 'gpupack:team', value: 'ml' }];
    const ml1 = (await run('small', 'shared', ml)).taskArn, ml2 = (await run('small', 'shared', ml)).taskArn;
    const ml3 = await run('small', 'shared', ml);  // 9,000 would pass ml's 6,000 though the GPU has room
    assert.equal(ml3.lastStatus, 'PROVISIONING');
    const web = await run('small', 'shared', [{ key: 'gpupack:team', value: 'web' }]);
    assert.equal(web.lastStatus, 'PENDING');
    await running(ml1);
    await running(ml2);
    await running(web.taskArn);
    await stop(web.taskArn);  // web's memory is not ml's: ml3 still waits
    await sleep(300);
    assert.equal(await statusOf(ml3.taskArn), 'PROVISIONING');
    await stop(ml1);
    await running(ml3.taskArn);
    for (const arn of [ml2, ml3.taskArn]) await stop(arn);
    await assert.rejects(ecs.send(new CreateCapacityProviderCommand({ name: 'bad',
      tags: [{ key: 'gpupack:quota-gpu-memory', value: 'lots' }] })), (e) => e instanceof InvalidParameterException);
  });

  test('a service runs through a capacity provider; UpdateService of its strategy is refused by name', async () => {
    const created = await ecs.send(new CreateServiceCommand({ serviceName: 'svc-b', taskDefinition: 'beta',
      desiredCount: 1, capacityProviderStrategy: [{ capacityProvider: 'team-b', weight: 1 }] }));
    assert.deepEqual(created.service.capacityProviderStrategy.map((i) => i.capacityProvider), ['team-b']);
    const t = await waitFor('the replica', async () => {
      const l = await ecs.send(new ListTasksCommand({ serviceName: 'svc-b' }));
      return l.taskArns[0];
    });
    const replica = await task(t);
    assert.equal(replica.capacityProviderName, 'team-b');
    assert.equal(replica.containerInstanceArn, byProvider['team-b']);
    await assert.rejects(ecs.send(new UpdateServiceCommand({ service: 'svc-b',
      capacityProviderStrategy: [{ capacityProvider: 'team-a', weight: 1 }] })),
    (e) => e instanceof UnsupportedFeatureException && /capacityProviderStrategy/.test(e.message));
    await ecs.send(new DeleteServiceCommand({ service: 'svc-b', force: true }));
    await waitFor('the replica stopped', async () => (await statusOf(t)) === 'STOPPED');
  });
});
