// SDK conformance: drives the real gpupack server with the real AWS SDK for JavaScript v3
// (@aws-sdk/client-ecs >= 3.1158.0, the first version that models GPU sharing) the way a CI job, a service or
// an agent would, and checks that what the SDK deserializes is what ECS users expect (docs/api.md, docs/placement.md).
//
// Run: GPUPACK_BIN=build/gpupack node --test tests/sdk/   (ctest runs it as sdk_conformance)
//
// What this SDK version does with our GPU fields (each is asserted below, so a new SDK that changes it fails
// loudly):
// - RegisterContainerInstance: the SDK's PlatformDevice shape is {id, type} only, so it DROPS
//   platformDevices[].gpuInfo.memoryInMiB when serializing. A plain SDK call therefore cannot tell the server
//   how much memory a GPU has; the server refuses it (InvalidParameterException) instead of guessing. Our agent
//   speaks raw JSON; here a build-step middleware puts gpuInfo back, as a custom agent written on the SDK would.
// - DescribeContainerInstances gpuDevices[] {gpuId, sharingMode, totalMemoryInMiB, remainingMemoryInMiB,
//   containerCount}: deserialized completely.
// - tasks[].containers[].gpuIds and gpuSharingStrategy.nvidiaMps {memory, maxComputePercent}: deserialized.
// - failures[] {arn, reason, detail}: ECS's Failure shape has `detail`, so our placement explanation survives.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';

import {
  ClientException,
  ClusterNotFoundException,
  CreateClusterCommand,
  DescribeContainerInstancesCommand,
  DescribeTaskDefinitionCommand,
  DescribeTasksCommand,
  ECSClient,
  ECSServiceException,
  InvalidParameterException,
  ListTasksCommand,
  RegisterContainerInstanceCommand,
  RegisterTaskDefinitionCommand,
  RunTaskCommand,
  StopTaskCommand,
  SubmitTaskStateChangeCommand,
  paginateListTasks,
  waitUntilTasksRunning,
  waitUntilTasksStopped,
} from '@aws-sdk/client-ecs';

import { PLAY_AGENT, call, removeTempDir, startServer, tempDir } from '../integration/harness.mjs';

const GPU_MIB = 22587;
const CPU = 16384;
const MEMORY = 65536;
const FAST_WAITER = { maxWaitTime: 10, minDelay: 0.1, maxDelay: 0.5 };

let dir;
let server;
let ecs;

// bodyText: the serialized request body at the build step (a string, or bytes on some Node versions).
function bodyText(body) {
  return typeof body === 'string' ? body : new TextDecoder().decode(body);
}

// sharedDef: one container asking `memory` MiB of a shared GPU (and maxComputePercent when given).
function sharedDef(family, memory, maxComputePercent) {
  const nvidiaMps = { memory };
  if (maxComputePercent !== undefined) nvidiaMps.maxComputePercent = maxComputePercent;
  return {
    family,
    containerDefinitions: [
      {
        name: 'main',
        image: 'busybox',
        cpu: 128,
        memory: 256,
        essential: true,
        resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps } }],
      },
    ],
  };
}

function dedicatedDef(family, gpus = 1) {
  return {
    family,
    containerDefinitions: [
      {
        name: 'main',
        image: 'busybox',
        cpu: 128,
        memory: 256,
        essential: true,
        resourceRequirements: [{ type: 'GPU', value: String(gpus) }],
      },
    ],
  };
}

// registerWithGpus registers an instance through the SDK; the middleware restores the gpuInfo the SDK drops.
async function registerWithGpus(cluster, gpus) {
  const cmd = new RegisterContainerInstanceCommand({
    cluster,
    totalResources: [
      { name: 'CPU', type: 'INTEGER', integerValue: CPU },
      { name: 'MEMORY', type: 'INTEGER', integerValue: MEMORY },
    ],
    platformDevices: gpus.map((id) => ({ id, type: 'GPU' })),
    versionInfo: { agentVersion: 'sdk-test' },
    attributes: [{ name: 'ecs.capability.gpu-sharing-mps' }],
  });
  cmd.middlewareStack.add(
    (next) => async (args) => {
      const body = JSON.parse(bodyText(args.request.body));
      for (const d of body.platformDevices) d.gpuInfo = { memoryInMiB: GPU_MIB };
      args.request.body = JSON.stringify(body);
      return next(args);
    },
    { step: 'build', priority: 'high', name: 'gpupackGpuInfo' },
  );
  const out = await ecs.send(cmd);
  return out.containerInstance.containerInstanceArn;
}

async function gpusOf(cluster, instanceArn) {
  const out = await ecs.send(new DescribeContainerInstancesCommand({ cluster, containerInstances: [instanceArn] }));
  assert.equal(out.failures.length, 0);
  return out.containerInstances[0].gpuDevices;
}

async function register(def) {
  const out = await ecs.send(new RegisterTaskDefinitionCommand(def));
  return out.taskDefinition.taskDefinitionArn;
}

async function run(cluster, taskDefinition, extra = {}) {
  return ecs.send(new RunTaskCommand({ cluster, taskDefinition, ...extra }));
}

// stopAndSettle stops tasks and, like an agent, reports STOPPED for those that had started.
async function stopAndSettle(cluster, arns) {
  for (const task of arns) {
    const out = await ecs.send(new StopTaskCommand({ cluster, task, reason: 'test cleanup' }));
    if (out.task.lastStatus !== 'STOPPED')
      await ecs.send(new SubmitTaskStateChangeCommand({ cluster, task, status: 'STOPPED', reason: 'stopped' }));
  }
}

// expectError asserts that `promise` rejects with an SDK exception of class `type`.
async function expectError(promise, type, messagePattern) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof type, `expected ${type.name}, got ${err.name}: ${err.message}`);
    assert.ok(err instanceof ECSServiceException);
    assert.equal(err.name, type.name);
    assert.equal(err.$metadata.httpStatusCode, 400);
    assert.ok(err.message.length > 0, 'the error carries a message');
    if (messagePattern) assert.match(err.message, messagePattern);
    return true;
  });
}

before(async () => {
  dir = tempDir('gpupack-sdk-');
  server = await startServer({ db: path.join(dir, 'sdk.db'), extraArgs: PLAY_AGENT });
  ecs = new ECSClient({
    endpoint: server.endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'x', secretAccessKey: 'y' },
    maxAttempts: 1,
  });
});

after(async () => {
  ecs?.destroy();
  await server?.stop();
  if (dir) removeTempDir(dir);
});

describe('container instances with GPUs', () => {
  test('CreateCluster answers an ACTIVE cluster with the ECS ARN', async () => {
    const out = await ecs.send(new CreateClusterCommand({ clusterName: 'sdk-mps' }));
    assert.equal(out.cluster.clusterName, 'sdk-mps');
    assert.equal(out.cluster.status, 'ACTIVE');
    assert.equal(out.cluster.clusterArn, 'arn:aws:ecs:us-east-1:000000000000:cluster/sdk-mps');
    assert.match(out.$metadata.requestId, /^[0-9a-f-]{36}$/, 'x-amzn-RequestId reaches $metadata.requestId');
  });

  test('the SDK drops platformDevices[].gpuInfo, and the server refuses a GPU without memory', async () => {
    let sent;
    const cmd = new RegisterContainerInstanceCommand({
      cluster: 'sdk-mps',
      totalResources: [
        { name: 'CPU', type: 'INTEGER', integerValue: CPU },
        { name: 'MEMORY', type: 'INTEGER', integerValue: MEMORY },
      ],
      // gpuInfo is not in the SDK's PlatformDevice model ({id, type}); it is passed here on purpose.
      platformDevices: [{ id: 'GPU-dropped', type: 'GPU', gpuInfo: { memoryInMiB: GPU_MIB } }],
    });
    cmd.middlewareStack.add(
      (next) => async (args) => {
        sent = JSON.parse(bodyText(args.request.body));
        return next(args);
      },
      { step: 'build', name: 'capture' },
    );
    await expectError(ecs.send(cmd), InvalidParameterException, /gpuInfo\.memoryInMiB/);
    assert.deepEqual(sent.platformDevices, [{ id: 'GPU-dropped', type: 'GPU' }], 'SDK serialized without gpuInfo');
  });

  test('RegisterContainerInstance with gpuInfo shows every GPU IDLE and full', async () => {
    const arn = await registerWithGpus('sdk-mps', ['GPU-sdk-0']);
    assert.match(arn, /^arn:aws:ecs:us-east-1:000000000000:container-instance\/sdk-mps\/[0-9a-f]+$/);
    assert.deepEqual(await gpusOf('sdk-mps', arn), [
      {
        gpuId: 'GPU-sdk-0',
        sharingMode: 'IDLE',
        totalMemoryInMiB: GPU_MIB,
        remainingMemoryInMiB: GPU_MIB,
        containerCount: 0,
      },
    ]);
  });
});

describe('shared GPU placement (NVIDIA MPS)', () => {
  const cluster = 'sdk-mps';
  let instanceArn;
  const defs = {};
  const placed = [];

  before(async () => {
    const list = await ecs.send(new ListTasksCommand({ cluster }));
    assert.deepEqual(list.taskArns, []);
    const out = await call(server.endpoint, 'ListContainerInstances', { cluster });
    instanceArn = out.json.containerInstanceArns[0];
    defs.mps50 = await register(sharedDef('mps-4096-50', 4096, 50));
    defs.mps25 = await register(sharedDef('mps-4096-25', 4096, 25));
    defs.mps75 = await register(sharedDef('mps-4096-75', 4096, 75));
    defs.mpsAll = await register(sharedDef('mps-4096', 4096));
    defs.big = await register(sharedDef('mps-20480', 20480, 100));
    defs.dedicated = await register(dedicatedDef('dedicated-1'));
  });

  test('RegisterTaskDefinition round-trips sharingStrategy, maxComputePercent omitted when not declared', async () => {
    const out = await ecs.send(new DescribeTaskDefinitionCommand({ taskDefinition: 'mps-4096-50' }));
    assert.equal(out.taskDefinition.taskDefinitionArn, defs.mps50);
    assert.equal(out.taskDefinition.revision, 1);
    assert.ok(out.taskDefinition.registeredAt instanceof Date, 'registeredAt is epoch seconds the SDK parses');
    assert.deepEqual(out.taskDefinition.containerDefinitions[0].resourceRequirements, [
      { type: 'GPU', sharingStrategy: { nvidiaMps: { memory: 4096, maxComputePercent: 50 } } },
    ]);
    const plain = await ecs.send(new DescribeTaskDefinitionCommand({ taskDefinition: defs.mpsAll }));
    assert.deepEqual(plain.taskDefinition.containerDefinitions[0].resourceRequirements, [
      { type: 'GPU', sharingStrategy: { nvidiaMps: { memory: 4096 } } },
    ]);
    const ded = await ecs.send(new DescribeTaskDefinitionCommand({ taskDefinition: 'dedicated-1:1' }));
    assert.deepEqual(ded.taskDefinition.containerDefinitions[0].resourceRequirements, [{ type: 'GPU', value: '1' }]);
  });

  test('two 4096 MiB tasks share one GPU: 22587 - 2*4096 = 14395 MiB left, 2 containers, NVIDIA_MPS', async () => {
    const out = await run(cluster, 'mps-4096-50', { count: 2, startedBy: 'sdk-test' });
    assert.deepEqual(out.failures, []);
    assert.equal(out.tasks.length, 2);
    for (const t of out.tasks) {
      assert.equal(t.lastStatus, 'PENDING');
      assert.equal(t.desiredStatus, 'RUNNING');
      assert.equal(t.containerInstanceArn, instanceArn);
      assert.equal(t.taskDefinitionArn, defs.mps50);
      assert.ok(t.createdAt instanceof Date);
      placed.push(t.taskArn);
    }
    const [a, b] = out.tasks.map((t) => t.containers[0]);
    assert.deepEqual(a.gpuIds, ['GPU-sdk-0']);
    assert.deepEqual(b.gpuIds, a.gpuIds, 'both tasks run on the same GPU');
    assert.deepEqual(a.gpuSharingStrategy, { nvidiaMps: { memory: 4096, maxComputePercent: 50 } });
    assert.deepEqual(b.gpuSharingStrategy, a.gpuSharingStrategy);

    assert.deepEqual(await gpusOf(cluster, instanceArn), [
      {
        gpuId: 'GPU-sdk-0',
        sharingMode: 'NVIDIA_MPS',
        totalMemoryInMiB: GPU_MIB,
        remainingMemoryInMiB: 14395,
        containerCount: 2,
      },
    ]);
  });

  test('DescribeTasks: the SDK keeps gpuIds and gpuSharingStrategy exactly as the server sent them', async () => {
    const sdk = await ecs.send(new DescribeTasksCommand({ cluster, tasks: placed }));
    const raw = await call(server.endpoint, 'DescribeTasks', { cluster, tasks: placed });
    assert.equal(raw.status, 200);
    assert.equal(sdk.tasks.length, 2);
    for (let i = 0; i < 2; ++i) {
      const s = sdk.tasks[i].containers[0];
      const r = raw.json.tasks[i].containers[0];
      assert.deepEqual(s.gpuIds, r.gpuIds);
      assert.deepEqual(s.gpuSharingStrategy, r.gpuSharingStrategy);
      assert.deepEqual(r.gpuSharingStrategy, { nvidiaMps: { memory: 4096, maxComputePercent: 50 } });
    }
    const rawInstances = await call(server.endpoint, 'DescribeContainerInstances', {
      cluster,
      containerInstances: [instanceArn],
    });
    assert.deepEqual(await gpusOf(cluster, instanceArn), rawInstances.json.containerInstances[0].gpuDevices);
  });

  test('a dedicated task never lands on an NVIDIA_MPS GPU: RESOURCE:GPU', async () => {
    const out = await run(cluster, defs.dedicated);
    assert.deepEqual(out.tasks, []);
    assert.equal(out.failures.length, 1);
    assert.equal(out.failures[0].arn, instanceArn);
    assert.equal(out.failures[0].reason, 'RESOURCE:GPU');
  });

  test('each task carries its own maxComputePercent (25, 75, omitted) on the same GPU', async () => {
    for (const [def, mps] of [
      [defs.mps25, { memory: 4096, maxComputePercent: 25 }],
      [defs.mps75, { memory: 4096, maxComputePercent: 75 }],
      [defs.mpsAll, { memory: 4096 }],
    ]) {
      const out = await run(cluster, def);
      assert.deepEqual(out.failures, []);
      assert.deepEqual(out.tasks[0].containers[0].gpuIds, ['GPU-sdk-0']);
      assert.deepEqual(out.tasks[0].containers[0].gpuSharingStrategy, { nvidiaMps: mps });
      placed.push(out.tasks[0].taskArn);
    }
    // 22587 - 5*4096 = 2107 MiB left; compute is not considered, so 50+50+25+75+100 > 100 is fine.
    const [gpu] = await gpusOf(cluster, instanceArn);
    assert.equal(gpu.remainingMemoryInMiB, 2107);
    assert.equal(gpu.containerCount, 5);
  });

  test('a task that fits nowhere: tasks [] and failures [{arn: instance, reason RESOURCE:GPU_MEMORY, detail}]', async () => {
    for (const def of [defs.mps50, defs.big]) {
      const out = await run(cluster, def);
      assert.deepEqual(out.tasks, []);
      assert.equal(out.failures.length, 1);
      assert.equal(out.failures[0].arn, instanceArn);
      assert.equal(out.failures[0].reason, 'RESOURCE:GPU_MEMORY');
      assert.equal(typeof out.failures[0].detail, 'string', 'the SDK keeps failures[].detail');
      assert.ok(out.failures[0].detail.length > 0);
    }
    const [gpu] = await gpusOf(cluster, instanceArn);
    assert.equal(gpu.remainingMemoryInMiB, 2107, 'a failed RunTask holds nothing');
  });

  test('after StopTask frees the GPU a 20480 MiB task fits, and then a 4096 MiB one does not', async () => {
    await stopAndSettle(cluster, placed.splice(0));
    let [gpu] = await gpusOf(cluster, instanceArn);
    assert.deepEqual(gpu, {
      gpuId: 'GPU-sdk-0',
      sharingMode: 'IDLE',
      totalMemoryInMiB: GPU_MIB,
      remainingMemoryInMiB: GPU_MIB,
      containerCount: 0,
    });
    const big = await run(cluster, defs.big);
    assert.deepEqual(big.failures, []);
    assert.deepEqual(big.tasks[0].containers[0].gpuIds, ['GPU-sdk-0']);
    placed.push(big.tasks[0].taskArn);
    [gpu] = await gpusOf(cluster, instanceArn);
    assert.equal(gpu.remainingMemoryInMiB, GPU_MIB - 20480); // 2107
    const small = await run(cluster, defs.mps50);
    assert.deepEqual(small.tasks, []);
    assert.deepEqual(
      small.failures.map((f) => ({ arn: f.arn, reason: f.reason })),
      [{ arn: instanceArn, reason: 'RESOURCE:GPU_MEMORY' }],
    );
    await stopAndSettle(cluster, placed.splice(0));
  });
});

describe('dedicated and shared GPUs on one instance', () => {
  const cluster = 'sdk-mixed';
  let instanceArn;

  before(async () => {
    await ecs.send(new CreateClusterCommand({ clusterName: cluster }));
    instanceArn = await registerWithGpus(cluster, ['GPU-mixed-0', 'GPU-mixed-1']);
  });

  test('a dedicated task lands on the second, IDLE GPU; a second one finds no IDLE GPU', async () => {
    const shared = await run(cluster, 'mps-4096-50');
    assert.deepEqual(shared.failures, []);
    const sharedGpu = shared.tasks[0].containers[0].gpuIds[0];
    const otherGpu = sharedGpu === 'GPU-mixed-0' ? 'GPU-mixed-1' : 'GPU-mixed-0';

    const ded = await run(cluster, 'dedicated-1');
    assert.deepEqual(ded.failures, []);
    assert.equal(ded.tasks[0].containerInstanceArn, instanceArn);
    assert.deepEqual(ded.tasks[0].containers[0].gpuIds, [otherGpu]);
    assert.equal(ded.tasks[0].containers[0].gpuSharingStrategy, undefined);

    const byId = Object.fromEntries((await gpusOf(cluster, instanceArn)).map((g) => [g.gpuId, g]));
    assert.equal(byId[sharedGpu].sharingMode, 'NVIDIA_MPS');
    assert.equal(byId[sharedGpu].remainingMemoryInMiB, GPU_MIB - 4096);
    assert.equal(byId[otherGpu].sharingMode, 'DEDICATED');
    assert.equal(byId[otherGpu].containerCount, 1);

    const again = await run(cluster, 'dedicated-1');
    assert.deepEqual(again.tasks, []);
    assert.deepEqual(
      again.failures.map((f) => ({ arn: f.arn, reason: f.reason })),
      [{ arn: instanceArn, reason: 'RESOURCE:GPU' }],
    );
    // A shared task still goes to the MPS GPU, never the dedicated one.
    const shared2 = await run(cluster, 'mps-4096-25');
    assert.deepEqual(shared2.tasks[0].containers[0].gpuIds, [sharedGpu]);
  });
});

describe('task lifecycle through the SDK', () => {
  const cluster = 'sdk-life';
  let taskArn;

  before(async () => {
    await ecs.send(new CreateClusterCommand({ clusterName: cluster }));
    await registerWithGpus(cluster, ['GPU-life-0']);
  });

  test('DescribeTasks with an unknown ARN answers failures MISSING', async () => {
    const unknown = 'arn:aws:ecs:us-east-1:000000000000:task/sdk-life/0123456789abcdef0123456789abcdef';
    const out = await ecs.send(new DescribeTasksCommand({ cluster, tasks: [unknown] }));
    assert.deepEqual(out.tasks, []);
    assert.deepEqual(out.failures, [{ arn: unknown, reason: 'MISSING' }]);
  });

  test('waitUntilTasksRunning succeeds once the agent reports RUNNING (SubmitTaskStateChange)', async () => {
    const out = await run(cluster, 'mps-4096-50', { startedBy: 'waiter' });
    taskArn = out.tasks[0].taskArn;
    const waiting = waitUntilTasksRunning({ client: ecs, ...FAST_WAITER }, { cluster, tasks: [taskArn] });
    await new Promise((r) => setTimeout(r, 300));
    const ack = await ecs.send(
      new SubmitTaskStateChangeCommand({
        cluster,
        task: taskArn,
        status: 'RUNNING',
        containers: [{ containerName: 'main', status: 'RUNNING' }],
      }),
    );
    assert.equal(ack.acknowledgment, 'ACK');
    const result = await waiting;
    assert.equal(result.state, 'SUCCESS');
    const d = await ecs.send(new DescribeTasksCommand({ cluster, tasks: [taskArn] }));
    assert.equal(d.tasks[0].lastStatus, 'RUNNING');
    assert.equal(d.tasks[0].containers[0].lastStatus, 'RUNNING');
    assert.ok(d.tasks[0].startedAt instanceof Date);
  });

  test('waitUntilTasksRunning fails fast on a MISSING task', async () => {
    const missing = 'arn:aws:ecs:us-east-1:000000000000:task/sdk-life/ffffffffffffffffffffffffffffffff';
    await assert.rejects(waitUntilTasksRunning({ client: ecs, ...FAST_WAITER }, { cluster, tasks: [missing] }), (e) => {
      assert.match(String(e.message), /FAILURE/);
      return true;
    });
  });

  test('ListTasks finds the running task by startedBy, family and desiredStatus', async () => {
    const byStarter = await ecs.send(new ListTasksCommand({ cluster, startedBy: 'waiter' }));
    assert.deepEqual(byStarter.taskArns, [taskArn]);
    const byFamily = await ecs.send(new ListTasksCommand({ cluster, family: 'mps-4096-50' }));
    assert.deepEqual(byFamily.taskArns, [taskArn]);
    const stopped = await ecs.send(new ListTasksCommand({ cluster, desiredStatus: 'STOPPED' }));
    assert.deepEqual(stopped.taskArns, []);
  });

  test('StopTask then the agent reports STOPPED: waitUntilTasksStopped succeeds and memory is released', async () => {
    const stop = await ecs.send(new StopTaskCommand({ cluster, task: taskArn, reason: 'done with it' }));
    assert.equal(stop.task.desiredStatus, 'STOPPED');
    assert.equal(stop.task.lastStatus, 'RUNNING', 'a running task stops when its agent says so');
    const waiting = waitUntilTasksStopped({ client: ecs, ...FAST_WAITER }, { cluster, tasks: [taskArn] });
    await new Promise((r) => setTimeout(r, 300));
    await ecs.send(
      new SubmitTaskStateChangeCommand({
        cluster,
        task: taskArn,
        status: 'STOPPED',
        containers: [{ containerName: 'main', status: 'STOPPED', exitCode: 143 }],
      }),
    );
    const result = await waiting;
    assert.equal(result.state, 'SUCCESS');
    const t = result.reason.tasks[0];
    assert.equal(t.lastStatus, 'STOPPED');
    assert.equal(t.stopCode, 'UserInitiated');
    assert.equal(t.stoppedReason, 'done with it');
    assert.equal(t.containers[0].exitCode, 143);
    assert.ok(t.stoppedAt instanceof Date);
    const stopped = await ecs.send(new ListTasksCommand({ cluster, desiredStatus: 'STOPPED' }));
    assert.deepEqual(stopped.taskArns, [taskArn]);
    const instances = await call(server.endpoint, 'ListContainerInstances', { cluster });
    const [gpu] = await gpusOf(cluster, instances.json.containerInstanceArns[0]);
    assert.equal(gpu.remainingMemoryInMiB, GPU_MIB);
    assert.equal(gpu.sharingMode, 'IDLE');
  });

  test('paginateListTasks walks every task once with pageSize 2', async () => {
    const out = await run(cluster, 'mps-4096-25', { count: 5 });
    const want = out.tasks.map((t) => t.taskArn).sort();
    const seen = [];
    let pages = 0;
    for await (const page of paginateListTasks({ client: ecs, pageSize: 2 }, { cluster })) {
      ++pages;
      assert.ok(page.taskArns.length <= 2);
      seen.push(...page.taskArns);
    }
    assert.equal(pages, 3);
    assert.deepEqual(seen.slice().sort(), want);
  });
});

describe('binpack fragmentation through the SDK', () => {
  const cluster = 'sdk-frag';
  let a;

  before(async () => {
    await ecs.send(new CreateClusterCommand({ clusterName: cluster }));
    a = await registerWithGpus(cluster, ['GPU-frag-a0', 'GPU-frag-a1']);
    await registerWithGpus(cluster, ['GPU-frag-b0', 'GPU-frag-b1']);
    await register(sharedDef('frag-6000', 6000));
  });

  test('placementStrategy binpack/fragmentation places, and fills the GPU it opened', async () => {
    const strategy = { placementStrategy: [{ type: 'binpack', field: 'fragmentation' }] };
    const first = await run(cluster, 'frag-6000', strategy);
    assert.deepEqual(first.failures, []);
    assert.equal(first.tasks[0].containerInstanceArn, a);
    assert.deepEqual(first.tasks[0].containers[0].gpuIds, ['GPU-frag-a0']);
    const second = await run(cluster, 'frag-6000', strategy);
    assert.deepEqual(second.failures, []);
    assert.deepEqual(second.tasks[0].containers[0].gpuIds, ['GPU-frag-a0']);
    const gpus = await gpusOf(cluster, a);
    assert.equal(gpus[0].remainingMemoryInMiB, GPU_MIB - 12000);
    assert.equal(gpus[1].sharingMode, 'IDLE');
    // After another strategy (which then chooses the GPU inside the instance, as every first strategy does).
    const third = await run(cluster, 'frag-6000', {
      placementStrategy: [{ type: 'spread', field: 'attribute:ecs.os-type' }, { type: 'binpack', field: 'fragmentation' }],
    });
    assert.deepEqual(third.failures, []);
    assert.equal(third.tasks.length, 1);
  });

  test("the planner's fgd is not a RunTask strategy", async () => {
    await expectError(run(cluster, 'frag-6000', { placementStrategy: [{ type: 'fgd' }] }), InvalidParameterException,
      /valid types are binpack, spread and random/);
  });
});

describe('typed errors and validation through the SDK', () => {
  test('a GPU requirement with both value and sharingStrategy is a ClientException', async () => {
    const def = sharedDef('bad-both', 4096, 50);
    def.containerDefinitions[0].resourceRequirements[0].value = '1';
    await expectError(ecs.send(new RegisterTaskDefinitionCommand(def)), ClientException, /sharingStrategy/);
  });

  test('a GPU requirement with neither value nor sharingStrategy is a ClientException', async () => {
    const def = dedicatedDef('bad-neither');
    delete def.containerDefinitions[0].resourceRequirements[0].value;
    await expectError(ecs.send(new RegisterTaskDefinitionCommand(def)), ClientException);
  });

  test('maxComputePercent out of 1..100 and memory 0 are ClientExceptions', async () => {
    await expectError(ecs.send(new RegisterTaskDefinitionCommand(sharedDef('bad-pct', 4096, 101))), ClientException);
    await expectError(ecs.send(new RegisterTaskDefinitionCommand(sharedDef('bad-mem', 0))), ClientException);
  });

  test('a container definition that sets a reserved MPS variable is a ClientException', async () => {
    const def = sharedDef('bad-env', 4096);
    def.containerDefinitions[0].environment = [{ name: 'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT', value: '0=99999M' }];
    await expectError(ecs.send(new RegisterTaskDefinitionCommand(def)), ClientException, /CUDA_MPS_PINNED_DEVICE_MEM_LIMIT/);
  });

  test('RunTask with count 11 is an InvalidParameterException', async () => {
    await expectError(run('sdk-mps', 'mps-4096-50', { count: 11 }), InvalidParameterException, /count/);
  });

  test('RunTask on an unknown cluster is a ClusterNotFoundException', async () => {
    await expectError(run('no-such-cluster', 'mps-4096-50'), ClusterNotFoundException);
  });

  test('a sharingStrategy in RunTask overrides is refused', async () => {
    const overrides = {
      containerOverrides: [
        { name: 'main', resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { memory: 1024 } } }] },
      ],
    };
    await expectError(run('sdk-mps', 'mps-4096-50', { overrides }), ClientException, /sharingStrategy/);
  });

  test('reserved MPS variables in RunTask overrides are accepted; the declared memory still governs', async () => {
    const overrides = {
      containerOverrides: [
        {
          name: 'main',
          environment: [
            { name: 'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT', value: '0=99999M' },
            { name: 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE', value: '100' },
          ],
        },
      ],
    };
    const out = await run('sdk-mps', 'mps-4096-50', { overrides });
    assert.deepEqual(out.failures, []);
    assert.equal(out.tasks.length, 1);
    const t = out.tasks[0];
    assert.deepEqual(t.containers[0].gpuSharingStrategy, { nvidiaMps: { memory: 4096, maxComputePercent: 50 } });
    assert.deepEqual(
      t.overrides.containerOverrides[0].environment.map((e) => e.name),
      ['CUDA_MPS_PINNED_DEVICE_MEM_LIMIT', 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE'],
    );
    const [gpu] = await gpusOf('sdk-mps', t.containerInstanceArn);
    assert.equal(gpu.remainingMemoryInMiB, GPU_MIB - 4096, 'held memory is the declared 4096, not the override');
    await stopAndSettle('sdk-mps', [t.taskArn]);
  });
});
