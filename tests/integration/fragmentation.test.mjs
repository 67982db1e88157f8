// fragmentation: the fragmentation figures (docs/operations.md "Fragmentation") as /metrics and the console's
// overview serve them, against what DescribeContainerInstances says of every GPU.
//
// Two instance types: two 10,000 MiB GPUs of type small, one 20,000 MiB GPU of type large (registered by hand:
// the server runs with --place-on-disconnected, the client plays the agents). A 7,000 MiB task is kept on type
// small (memberOf), leaving a 3,000 MiB piece on its GPU; a 4,000 MiB task goes anywhere. The smallest task of
// the hour is then 4,000 MiB, so that 3,000 MiB piece, and any other piece under 4,000 MiB, is stranded; every
// figure is recomputed here from the API's own remainingMemoryInMiB per GPU.
//
// Black box: only the gpupack binary ($GPUPACK_BIN) over HTTP on loopback.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { PLAY_AGENT, ok, removeTempDir, sharedTaskDefinition, startServer, tempDir } from './harness.mjs';

const MIB = 1048576;
let dir;
let server;

before(async () => {
  dir = tempDir('gpupack-fragmentation-');
  server = await startServer({ db: path.join(dir, 'state.db'), extraArgs: PLAY_AGENT });
});

after(async () => {
  await server?.stop();
  removeTempDir(dir);
});

async function register(type, gpus) {
  const r = await ok(server.endpoint, 'RegisterContainerInstance', {
    cluster: 'default',
    instanceIdentityDocument: JSON.stringify({ instanceId: `i-${type}`, instanceType: type }),
    totalResources: [
      { name: 'CPU', type: 'INTEGER', integerValue: 65536 },
      { name: 'MEMORY', type: 'INTEGER', integerValue: 1048576 },
    ],
    platformDevices: gpus.map(([id, mib]) => ({ id, type: 'GPU', gpuInfo: { memoryInMiB: mib } })),
  });
  return r.containerInstance.containerInstanceArn;
}

// metric: the value of `name` with exactly `labels` in a scrape, or undefined.
function metric(text, name, labels) {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`).join(',');
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${want}} `));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

test('largest free block, free and stranded GPU memory per cluster and instance type', async () => {
  const e = server.endpoint;
  await ok(e, 'CreateCluster', {});
  const before = await (await fetch(`${e}/metrics`)).text();
  // No GPU task in the hour: nothing is judged stranded, and there is no smallest demand.
  await register('small', [['GPU-s-0', 10000], ['GPU-s-1', 10000]]);
  await register('large', [['GPU-l-0', 20000]]);
  const idle = await (await fetch(`${e}/metrics`)).text();
  assert.equal(metric(idle, 'gpupack_cluster_gpu_largest_free_block_bytes', { cluster: 'default' }), 20000 * MIB);
  assert.equal(metric(idle, 'gpupack_cluster_gpu_memory_free_bytes', { cluster: 'default' }), 40000 * MIB);
  assert.equal(metric(idle, 'gpupack_cluster_gpu_memory_stranded_bytes', { cluster: 'default' }), 0);
  assert.equal(metric(idle, 'gpupack_cluster_recent_smallest_gpu_demand_bytes', { cluster: 'default' }), undefined);
  assert.match(before, /^# HELP gpupack_cluster_gpu_memory_stranded_bytes .*too small for every task shape/m);

  await ok(e, 'RegisterTaskDefinition', {
    ...sharedTaskDefinition('big', 7000),
    placementConstraints: [{ type: 'memberOf', expression: 'attribute:ecs.instance-type == small' }],
  });
  await ok(e, 'RegisterTaskDefinition', sharedTaskDefinition('mid', 4000));
  assert.equal((await ok(e, 'RunTask', { taskDefinition: 'big' })).tasks.length, 1);
  assert.equal((await ok(e, 'RunTask', { taskDefinition: 'mid' })).tasks.length, 1);

  // What the figures must be, from the API's own view of every GPU.
  const arns = (await ok(e, 'ListContainerInstances', {})).containerInstanceArns;
  const described = (await ok(e, 'DescribeContainerInstances', { containerInstances: arns })).containerInstances;
  const expected = { default: { largest: 0, free: 0, stranded: 0 } };
  for (const inst of described) {
    const type = inst.attributes.find((a) => a.name === 'ecs.instance-type').value;
    expected[type] ??= { largest: 0, free: 0, stranded: 0 };
    for (const g of inst.gpuDevices) {
      const piece = g.remainingMemoryInMiB;
      for (const f of [expected.default, expected[type]]) {
        f.largest = Math.max(f.largest, piece);
        f.free += piece;
        if (piece < 4000) f.stranded += piece;
      }
    }
  }
  assert.ok(expected.small.stranded >= 3000, `the 7,000 MiB task left a 3,000 MiB piece: ${JSON.stringify(expected)}`);

  const text = await (await fetch(`${e}/metrics`)).text();
  const cluster = { cluster: 'default' };
  assert.equal(metric(text, 'gpupack_cluster_gpu_largest_free_block_bytes', cluster), expected.default.largest * MIB);
  assert.equal(metric(text, 'gpupack_cluster_gpu_memory_free_bytes', cluster), expected.default.free * MIB);
  assert.equal(metric(text, 'gpupack_cluster_gpu_memory_stranded_bytes', cluster), expected.default.stranded * MIB);
  assert.equal(metric(text, 'gpupack_cluster_recent_smallest_gpu_demand_bytes', cluster), 4000 * MIB);
  for (const type of ['small', 'large']) {
    const labels = { cluster: 'default', instance_type: type };
    assert.equal(metric(text, 'gpupack_instance_type_gpu_largest_free_block_bytes', labels), expected[type].largest * MIB, type);
    assert.equal(metric(text, 'gpupack_instance_type_gpu_memory_stranded_bytes', labels), expected[type].stranded * MIB, type);
  }

  // The console's overview (its fragmentation panel's data) says the same, in MiB.
  const overview = await (await fetch(`${e}/console/api/overview`)).json();
  const f = overview.clusters.find((c) => c.name === 'default').fragmentation;
  assert.equal(f.largestFreeBlockMib, expected.default.largest);
  assert.equal(f.freeMib, expected.default.free);
  assert.equal(f.strandedMib, expected.default.stranded);
  assert.equal(f.smallestRecentDemandMib, 4000);
  assert.deepEqual(f.byInstanceType.map((t) => [t.instanceType, t.strandedMib]).sort(),
    [['large', expected.large.stranded], ['small', expected.small.stranded]]);
});
