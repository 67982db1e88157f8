// Services, black box: a real `gpupack server` and two real `gpupack agent`s (process runtime, one simulated
// 10,000 MiB GPU each) driven with the real AWS SDK for JavaScript (and one flow with Debian's AWS CLI), as an
// inference team would: create -> steady state; a replica's process killed -> replaced; an instance drained ->
// its replicas running elsewhere, never below minimumHealthyPercent; a deployment to a new task definition ->
// completed within its percents at every poll; a fleet too small -> the missing replica waits with an event that
// names GPU memory and is placed when a standalone task stops; desiredCount 0 and DeleteService; a server
// kill -9 in the middle of a deployment -> afterwards exactly desiredCount replicas run, none started twice.
//
// Every replica writes its process id to a file, so the test can kill one and count the processes that run.
//
// Run: GPUPACK_BIN=build/gpupack node --test tests/sdk/services_sdk.test.mjs   (ctest runs it as sdk_services)
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import {
  CreateServiceCommand,
  DeleteServiceCommand,
  DescribeServicesCommand,
  ECSClient,
  InvalidParameterException,
  ListServicesCommand,
  ListTasksCommand,
  RunTaskCommand,
  StopTaskCommand,
  UpdateContainerInstancesStateCommand,
  UpdateServiceCommand,
  waitUntilServicesInactive,
  waitUntilServicesStable,
} from '@aws-sdk/client-ecs';

import { DEBIAN_AWS, awsClientEnv, call, gpupackBin, launch, ok, removeTempDir, taskDir, tempDir } from '../integration/harness.mjs';

const GPU_MIB = 10000;
const WAITER = { maxWaitTime: 60, minDelay: 0.2, maxDelay: 0.5 };

let dir;
let port;
let server;
const agents = [];
let ecs;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// waitFor polls `probe` (bounded) until it returns a truthy value.
async function waitFor(what, probe, timeoutMs = 60000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

async function startServer() {
  const args = ['server', '--listen', `127.0.0.1:${port ?? 0}`, '--db', path.join(dir, 'gpupack.db'), '--log-level', 'warn'];
  server = await launch(args, { what: 'gpupack server' });
  port ??= new URL(server.endpoint).port;
}

async function startAgent(name) {
  const child = spawn(gpupackBin(), ['agent', '--server', server.endpoint, '--gpus', `fake:1x${GPU_MIB}`,
    '--state-dir', path.join(dir, name), '--mps-pipe-dir', path.join(dir, `${name}-mps`), '--name', name,
    '--cpu', '4096', '--memory', '8192', '--stop-grace-ms', '500', '--log-level', 'warn'],
  { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  agents.push({
    name,
    child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15000);
      await exited;
      clearTimeout(timer);
    },
    stderr: () => stderr,
  });
}

// connected: the container instances whose agent holds its channel, by ARN.
async function connected() {
  const r = await call(server.endpoint, 'ListContainerInstances', {});
  // Before the first agent registered, the default cluster does not exist yet: nobody is connected.
  if (r.status === 400 && /ClusterNotFoundException/.test(r.text)) return [];
  if (r.status !== 200) throw new Error(`ListContainerInstances answered ${r.status}: ${r.text}`);
  const list = r.json;
  if (list.containerInstanceArns.length === 0) return [];
  const d = await ok(server.endpoint, 'DescribeContainerInstances', { containerInstances: list.containerInstanceArns });
  return d.containerInstances.filter((i) => i.agentConnected).map((i) => i.containerInstanceArn);
}

// replicaDef: a task definition whose one container takes `memory` MiB of a shared GPU and writes its process id
// to <dir>/pids/<family>/<pid> before it sleeps.
function replicaDef(family, memory) {
  const pids = path.join(dir, 'pids', family);
  taskDir(dir, 'pids', family);  // the task (an unprivileged user) writes there
  return {
    family,
    containerDefinitions: [{
      name: 'model',
      image: 'busybox',
      cpu: 64,
      memory: 64,
      essential: true,
      entryPoint: ['/bin/sh', '-c'],
      command: [`echo $$ > ${pids}/$$; exec sleep 600`],
      resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { memory } } }],
    }],
  };
}

// alive: the process ids under <dir>/pids/<family> that still run.
function alive(family) {
  const pids = path.join(dir, 'pids', family);
  return fs.readdirSync(pids).map(Number).filter((pid) => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  });
}

async function service(name) {
  const d = await ecs.send(new DescribeServicesCommand({ services: [name] }));
  assert.equal(d.services.length, 1, JSON.stringify(d.failures));
  return d.services[0];
}

// tasksOf: the service's tasks that have not stopped (desired RUNNING, and those being stopped).
async function tasksOf(name) {
  const arns = [];
  for (const desiredStatus of ['RUNNING', 'STOPPED']) {
    const l = await ecs.send(new ListTasksCommand({ serviceName: name, desiredStatus }));
    arns.push(...l.taskArns);
  }
  if (arns.length === 0) return [];
  const d = await ok(server.endpoint, 'DescribeTasks', { tasks: arns });
  return d.tasks.filter((t) => t.lastStatus !== 'STOPPED');
}

// watch polls the service until `done(svc)`, asserting `bounds(svc)` at every poll; returns the poll count.
async function watch(name, bounds, done, timeoutMs = 60000) {
  let polls = 0;
  await waitFor(`service ${name}`, async () => {
    const svc = await service(name);
    ++polls;
    bounds(svc);
    return done(svc);
  }, timeoutMs);
  return polls;
}

const steady = (desired) => (svc) => svc.runningCount === desired && svc.pendingCount === 0 &&
  svc.deployments.length === 1 && svc.deployments[0].rolloutState === 'COMPLETED';

describe('services with the AWS SDK for JavaScript', () => {
  before(async () => {
    dir = tempDir('gpupack-services-');
    await startServer();
    ecs = new ECSClient({
      endpoint: server.endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'gpupack', secretAccessKey: 'gpupack' },
      maxAttempts: 1,
    });
    await startAgent('node-a');
    await startAgent('node-b');
    await waitFor('both agents', async () => (await connected()).length === 2);
    await ok(server.endpoint, 'RegisterTaskDefinition', replicaDef('web', 3000));
  });

  after(async () => {
    for (const a of agents) await a.stop();
    await server?.stop();
    if (dir) removeTempDir(dir);
  });

  test('a created service reaches a steady state with desiredCount replicas running', async () => {
    const created = await ecs.send(new CreateServiceCommand({
      serviceName: 'web', taskDefinition: 'web', desiredCount: 2, launchType: 'EC2',
      tags: [{ key: 'team', value: 'inference' }],
    }));
    assert.equal(created.service.status, 'ACTIVE');
    assert.equal(created.service.schedulingStrategy, 'REPLICA');
    assert.equal(created.service.deploymentConfiguration.minimumHealthyPercent, 100);
    assert.equal(created.service.deploymentConfiguration.maximumPercent, 200);
    assert.match(created.service.deployments[0].id, /^ecs-svc\/\d{19}$/);
    await waitUntilServicesStable({ client: ecs, ...WAITER }, { services: ['web'] });
    const svc = await service('web');
    assert.equal(svc.runningCount, 2);
    assert.equal(svc.events[0].message, '(service web) has reached a steady state.');
    const tasks = await tasksOf('web');
    assert.equal(tasks.length, 2);
    for (const t of tasks) {
      assert.equal(t.group, 'service:web');
      assert.equal(t.startedBy, svc.deployments[0].id);
    }
    assert.equal(alive('web').length, 2);
    const listed = await ecs.send(new ListServicesCommand({}));
    assert.deepEqual(listed.serviceArns, [svc.serviceArn]);
    // A second CreateService of the name is ECS's InvalidParameterException.
    await assert.rejects(ecs.send(new CreateServiceCommand({ serviceName: 'web', taskDefinition: 'web', desiredCount: 1 })),
      (e) => e instanceof InvalidParameterException && e.message === 'Creation of service was not idempotent.');
  });

  test("a replica's process killed is replaced and the service is back at desiredCount", async () => {
    const [victim] = alive('web');
    const before = new Set((await tasksOf('web')).map((t) => t.taskArn));
    process.kill(victim, 'SIGKILL');
    await waitFor('the replacement', async () => {
      const tasks = await tasksOf('web');
      const svc = await service('web');
      return svc.runningCount === 2 && tasks.length === 2 && tasks.some((t) => !before.has(t.taskArn));
    });
    const svc = await service('web');
    assert.equal(svc.deployments[0].failedTasks, 1);
    assert.ok(svc.events.some((e) => /has started 1 tasks: \(task [0-9a-f]{32}\)\./.test(e.message)), JSON.stringify(svc.events));
    await waitFor('two processes', async () => alive('web').length === 2);
  });

  test('a drained instance has its replicas moved, never below minimumHealthyPercent', async () => {
    const tasks = await tasksOf('web');
    const from = tasks[0].containerInstanceArn;
    await ecs.send(new UpdateContainerInstancesStateCommand({ containerInstances: [from], status: 'DRAINING' }));
    const polls = await watch('web', (svc) => {
      assert.ok(svc.runningCount >= 2, `runningCount ${svc.runningCount} fell below minimumHealthyPercent`);
      assert.ok(svc.runningCount + svc.pendingCount <= 4, 'more than maximumPercent');
    }, async (svc) => {
      if (svc.runningCount !== 2 || svc.pendingCount !== 0) return false;
      const now = await tasksOf('web');
      return now.length === 2 && now.every((t) => t.containerInstanceArn !== from);
    });
    assert.ok(polls >= 1);
    const d = await ok(server.endpoint, 'DescribeContainerInstances', { containerInstances: [from] });
    await waitFor('the drained instance empty', async () => {
      const i = (await ok(server.endpoint, 'DescribeContainerInstances', { containerInstances: [from] })).containerInstances[0];
      return i.runningTasksCount === 0 && i.pendingTasksCount === 0;
    });
    assert.equal(d.containerInstances[0].status, 'DRAINING');
    await ecs.send(new UpdateContainerInstancesStateCommand({ containerInstances: [from], status: 'ACTIVE' }));
  });

  test('a deployment to a new task definition completes within its percents at every poll', async () => {
    await ok(server.endpoint, 'RegisterTaskDefinition', replicaDef('web', 3500));  // web:2
    const updated = await ecs.send(new UpdateServiceCommand({
      service: 'web', taskDefinition: 'web:2',
      deploymentConfiguration: { minimumHealthyPercent: 50, maximumPercent: 100 },
    }));
    assert.equal(updated.service.deployments[0].status, 'PRIMARY');
    assert.equal(updated.service.deployments[1].status, 'ACTIVE');
    await watch('web', (svc) => {
      assert.ok(svc.runningCount >= 1, `runningCount ${svc.runningCount} below 50% of 2`);
      assert.ok(svc.runningCount + svc.pendingCount <= 2, `${svc.runningCount + svc.pendingCount} tasks above 100% of 2`);
    }, steady(2));
    for (const t of await tasksOf('web')) assert.match(t.taskDefinitionArn, /task-definition\/web:2$/);
    const svc = await service('web');
    assert.ok(svc.events.some((e) => e.message.endsWith('deployment completed.')));
  });

  test('a fleet too small leaves a replica waiting with an event naming GPU memory, placed when a task stops', async () => {
    await ok(server.endpoint, 'RegisterTaskDefinition', replicaDef('big', 6000));
    const big = await ecs.send(new RunTaskCommand({ taskDefinition: 'big' }));
    assert.equal(big.tasks.length, 1, JSON.stringify(big.failures));
    // 2 x 10,000 MiB: the 6,000 MiB task and three 3,500 MiB replicas fit, a fourth does not.
    await ecs.send(new UpdateServiceCommand({ service: 'web', desiredCount: 4 }));
    await waitFor('three replicas and the event', async () => {
      const svc = await service('web');
      return svc.runningCount === 3 && svc.events.some((e) => e.message.includes('has insufficient GPU memory available.'));
    });
    const svc = await service('web');
    const event = svc.events.find((e) => e.message.includes('insufficient GPU memory')).message;
    assert.match(event, /^\(service web\) was unable to place a task because no container instance met all of its requirements\. The closest matching \(container-instance [0-9a-f]{32}\) has insufficient GPU memory available\.$/);
    await ecs.send(new StopTaskCommand({ task: big.tasks[0].taskArn }));
    await watch('web', () => {}, steady(4));
  });

  test('desiredCount 0, then DeleteService: every replica stops and the service turns INACTIVE', async () => {
    await assert.rejects(ecs.send(new DeleteServiceCommand({ service: 'web' })),
      (e) => e instanceof InvalidParameterException && /scaled above 0/.test(e.message));
    await ecs.send(new UpdateServiceCommand({ service: 'web', desiredCount: 0 }));
    await watch('web', () => {}, (svc) => svc.runningCount === 0 && svc.pendingCount === 0);
    await waitFor('no replica process', async () => alive('web').length === 0);
    const deleted = await ecs.send(new DeleteServiceCommand({ service: 'web' }));
    assert.equal(deleted.service.status, 'DRAINING');
    await waitUntilServicesInactive({ client: ecs, ...WAITER }, { services: ['web'] });
    assert.deepEqual((await ecs.send(new ListServicesCommand({}))).serviceArns, []);
  });

  test('a server kill -9 in the middle of a deployment: afterwards exactly desiredCount replicas, none twice', async () => {
    await ok(server.endpoint, 'RegisterTaskDefinition', replicaDef('api', 1000));
    await ecs.send(new CreateServiceCommand({ serviceName: 'api', taskDefinition: 'api', desiredCount: 3 }));
    await waitUntilServicesStable({ client: ecs, ...WAITER }, { services: ['api'] });
    await ok(server.endpoint, 'RegisterTaskDefinition', replicaDef('api', 1200));  // api:2
    await ecs.send(new UpdateServiceCommand({ service: 'api', taskDefinition: 'api:2' }));
    await waitFor('a replica of api:2 running', async () =>
      (await tasksOf('api')).some((t) => t.taskDefinitionArn.endsWith(':2') && t.lastStatus === 'RUNNING'));
    const { signal } = await server.kill9();
    assert.equal(signal, 'SIGKILL');
    await startServer();  // the same database, the same port: the agents reconnect by themselves
    ecs = new ECSClient({ endpoint: server.endpoint, region: 'us-east-1',
      credentials: { accessKeyId: 'gpupack', secretAccessKey: 'gpupack' }, maxAttempts: 1 });
    await waitFor('both agents back', async () => (await connected()).length === 2);
    await watch('api', () => {}, steady(3));
    const tasks = await tasksOf('api');
    assert.equal(tasks.length, 3);
    for (const t of tasks) assert.match(t.taskDefinitionArn, /task-definition\/api:2$/);
    await waitFor('exactly three replica processes', async () => alive('api').length === 3);
    await sleep(500);
    assert.equal(alive('api').length, 3, 'a replica was started twice');
    await ecs.send(new DeleteServiceCommand({ service: 'api', force: true }));
    await waitUntilServicesInactive({ client: ecs, ...WAITER }, { services: ['api'] });
  });

  test("Debian's AWS CLI creates, describes and deletes a service", () => {
    assert.ok(fs.existsSync(DEBIAN_AWS), `${DEBIAN_AWS} is missing: apt-get install awscli (scripts/install-deps.sh does)`);
    const env = {
      ...awsClientEnv(dir), AWS_ACCESS_KEY_ID: 'gpupack', AWS_SECRET_ACCESS_KEY: 'gpupack', AWS_DEFAULT_REGION: 'us-east-1',
    };
    const aws = (...args) => {
      const r = spawnSync('aws', ['ecs', ...args, '--endpoint-url', server.endpoint, '--output', 'json'],
        { env, encoding: 'utf8', timeout: 60000 });
      assert.equal(r.status, 0, `aws ecs ${args.join(' ')}\n${r.stdout}\n${r.stderr}`);
      return JSON.parse(r.stdout);
    };
    const created = aws('create-service', '--service-name', 'cli', '--task-definition', 'api', '--desired-count', '1',
      '--deployment-configuration', 'minimumHealthyPercent=0,maximumPercent=100');
    assert.equal(created.service.serviceName, 'cli');
    assert.equal(created.service.deploymentConfiguration.minimumHealthyPercent, 0);
    let running = 0;
    for (let i = 0; i < 300 && running !== 1; ++i) {
      running = aws('describe-services', '--services', 'cli').services[0].runningCount;
      if (running !== 1) spawnSync('sleep', ['0.2']);
    }
    assert.equal(running, 1);
    const listed = aws('list-tasks', '--service-name', 'cli');
    assert.equal(listed.taskArns.length, 1);
    assert.equal(aws('delete-service', '--service', 'cli', '--force').service.status, 'DRAINING');
  });
});
