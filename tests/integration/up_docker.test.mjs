// up_docker: the container flow on a machine without a GPU, as docs/operations.md shows it: `gpupack up --runtime
// docker` (simulated GPUs, the default fake:2x22587) against a real Docker engine. A shared-GPU task of the
// busybox image must go RUNNING and then STOPPED with exit code 0, its container must have seen the GPU
// environment the agent sets (its output, read back through GetLogEvents), and the agent must say once in its
// log that the GPUs reach containers as their environment only.
//
// Needs an engine with gpupack-test/busybox:latest (scripts/docker-engine.sh; .ci/run starts one and sets
// GPUPACK_DOCKER_SOCKET); skipped, saying so, without one.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { call, ok, removeTempDir, startUp, tempDir } from './harness.mjs';

const SOCKET = process.env.GPUPACK_DOCKER_SOCKET;
const skip = !SOCKET && 'GPUPACK_DOCKER_SOCKET is not set (scripts/docker-engine.sh starts an engine)';
const LOGS_TARGET = 'Logs_20140328.';

let dir;
let up;

before(async () => {
  if (skip) return;
  dir = tempDir('gpupack-up-docker-');
  up = await startUp(path.join(dir, 'up'), ['--runtime', 'docker', '--docker-socket', SOCKET], { logLevel: 'info' });
});

after(async () => {
  await up?.stop();
  if (dir) removeTempDir(dir);
});

// waitFor asks `probe` every 100 ms until it answers something truthy (at most `ms`, a bound for a hung run, not
// a timing assertion).
async function waitFor(what, probe, ms = 60000) {
  for (const deadline = Date.now() + ms; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
    const v = await probe();
    if (v) return v;
  }
  assert.fail(`${what} within ${ms} ms; gpupack up said:\n${up.banner()}`);
}

test('gpupack up --runtime docker with fake GPUs runs a busybox GPU task to STOPPED, exit 0', { skip }, async () => {
  assert.match(up.banner(), /docker runtime/, 'the banner names the runtime');
  const e = up.endpoint;
  await ok(e, 'RegisterTaskDefinition', {
    family: 'container-flow',
    containerDefinitions: [{
      name: 'main',
      image: 'gpupack-test/busybox:latest',
      entryPoint: ['/bin/busybox', 'sh', '-c'],
      command: ['echo "gpu=$NVIDIA_VISIBLE_DEVICES limit=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"; sleep 1'],
      memory: 64,
      resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { memory: 2048 } } }],
    }],
  });
  const ran = await ok(e, 'RunTask', { cluster: 'default', taskDefinition: 'container-flow' });
  assert.equal(ran.failures.length, 0, JSON.stringify(ran.failures));
  const task = ran.tasks[0];
  const gpu = task.containers[0].gpuIds[0];
  assert.ok(gpu, 'the task holds a GPU');
  const describe = async () => (await ok(e, 'DescribeTasks', { cluster: 'default', tasks: [task.taskArn] })).tasks[0];
  const seen = new Set();
  const stopped = await waitFor('the task STOPPED', async () => {
    const t = await describe();
    seen.add(t.lastStatus);
    return t.lastStatus === 'STOPPED' && t;
  });
  assert.ok(seen.has('RUNNING') || stopped.startedAt !== undefined, `the task ran: ${JSON.stringify(stopped)}`);
  assert.equal(stopped.stopCode, 'EssentialContainerExited', JSON.stringify(stopped));
  assert.equal(stopped.containers[0].exitCode, 0, JSON.stringify(stopped));
  // What the container saw: its GPU and its memory limit, as the agent set them.
  const logs = await call(e, '', {
    logGroupName: '/gpupack/default',
    logStreamName: `main/${task.taskArn.split('/').pop()}`,
    startFromHead: true,
  }, { target: `${LOGS_TARGET}GetLogEvents` });
  assert.equal(logs.status, 200, logs.text);
  assert.deepEqual(logs.json.events.map((ev) => ev.message), [`gpu=${gpu} limit=0=2048M`]);
  // Said once, at start: the simulated GPUs reach containers as their environment only.
  const said = up.banner().match(/docker GPU injection environment-only/g) ?? [];
  assert.equal(said.length, 1, up.banner());
});
