// aws_model: `gpupack aws-model` with Debian's AWS CLI (/usr/bin/aws) and boto3 (/usr/bin/python3) against
// `gpupack up`. Without the model they refuse sharingStrategy; with it (installed under the test's own HOME)
// they register a sharing task definition, run tasks, and read gpuDevices, gpuIds and gpuSharingStrategy.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { DEBIAN_PYTHON, awsClientEnv, awsEcs, gpupackBin, removeTempDir, startUp, tempDir } from './harness.mjs';

let dir;
let up;
let env;

before(async () => {
  dir = tempDir('gpupack-awsmodel-');
  up = await startUp(path.join(dir, 'up'));
  env = { ...awsClientEnv(dir), AWS_ACCESS_KEY_ID: 'gpupack', AWS_SECRET_ACCESS_KEY: 'gpupack', AWS_DEFAULT_REGION: 'us-east-1' };
});

after(async () => {
  await up?.stop();
  removeTempDir(dir);
});

const CONTAINERS = JSON.stringify([
  {
    name: 'main',
    image: 'busybox',
    command: ['sleep', '600'],
    memory: 64,
    resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { memory: 2048, maxComputePercent: 50 } } }],
  },
]);

// aws runs Debian's AWS CLI against gpupack and returns {status, stdout, stderr, json}.
function aws(...args) {
  return awsEcs(up.endpoint, env, ...args);
}

test("Debian's AWS CLI refuses sharingStrategy without the model", () => {
  const r = aws('register-task-definition', '--family', 'before', '--container-definitions', CONTAINERS);
  assert.notEqual(r.status, 0, r.stdout);
  assert.match(r.stderr, /sharingStrategy/);
});

test('gpupack aws-model installs the model under ~/.aws/models', () => {
  const r = spawnSync(gpupackBin(), ['aws-model', '--python', DEBIAN_PYTHON], { env, encoding: 'utf8', timeout: 60000 });
  assert.equal(r.status, 0, r.stderr);
  const file = path.join(env.HOME, '.aws', 'models', 'ecs', '2014-11-13', 'service-2.json');
  assert.ok(fs.existsSync(file), r.stdout);
  assert.match(r.stdout, /ResourceRequirement\.sharingStrategy/);
  const model = JSON.parse(fs.readFileSync(file, 'utf8'));
  assert.ok(model.shapes.ContainerInstance.members.gpuDevices);
  assert.ok(!(model.shapes.ResourceRequirement.required ?? []).includes('value'));
  // Again, and from the installed model itself: the same file (the shapes are added once).
  const first = fs.readFileSync(file, 'utf8');
  const again = spawnSync(gpupackBin(), ['aws-model', '--python', DEBIAN_PYTHON], { env, encoding: 'utf8', timeout: 60000 });
  assert.equal(again.status, 0, again.stderr);
  assert.equal(fs.readFileSync(file, 'utf8'), first);
  const copy = path.join(dir, 'installed.json');
  fs.copyFileSync(file, copy);
  const patched = spawnSync(gpupackBin(), ['aws-model', '--from', copy], { env, encoding: 'utf8', timeout: 60000 });
  assert.equal(patched.status, 0, patched.stderr);
  assert.match(patched.stdout, /added nothing \(already there\)/);
  assert.equal(fs.readFileSync(file, 'utf8'), first);
});

test('with the model, the AWS CLI registers a sharing definition, runs tasks and reads the GPU fields', () => {
  const reg = aws('register-task-definition', '--family', 'cli-share', '--container-definitions', CONTAINERS);
  assert.equal(reg.status, 0, reg.stderr);
  assert.deepEqual(reg.json.taskDefinition.containerDefinitions[0].resourceRequirements[0].sharingStrategy, {
    nvidiaMps: { memory: 2048, maxComputePercent: 50 },
  });
  const run = aws('run-task', '--cluster', 'default', '--task-definition', 'cli-share', '--count', '2');
  assert.equal(run.status, 0, run.stderr);
  assert.equal(run.json.tasks.length, 2, run.stdout);
  const [a, b] = run.json.tasks.map((t) => t.containers[0]);
  assert.equal(a.gpuIds.length, 1);
  assert.deepEqual(a.gpuIds, b.gpuIds, 'two 2 GiB tasks share one GPU (binpack by default)');
  assert.deepEqual(a.gpuSharingStrategy, { nvidiaMps: { memory: 2048, maxComputePercent: 50 } });
  const arns = aws('list-container-instances', '--cluster', 'default');
  assert.equal(arns.status, 0, arns.stderr);
  const ci = aws('describe-container-instances', '--cluster', 'default', '--container-instances', ...arns.json.containerInstanceArns);
  assert.equal(ci.status, 0, ci.stderr);
  const gpu = ci.json.containerInstances[0].gpuDevices.find((g) => g.gpuId === a.gpuIds[0]);
  assert.ok(gpu, ci.stdout);
  assert.equal(gpu.sharingMode, 'NVIDIA_MPS');
  assert.ok(gpu.containerCount >= 2);
  for (const t of run.json.tasks) assert.equal(aws('stop-task', '--cluster', 'default', '--task', t.taskArn).status, 0);
});

test('with the model, boto3 registers a sharing definition, runs a task and reads the GPU fields', () => {
  const py = `
import json, os, boto3
ecs = boto3.client('ecs', endpoint_url=os.environ['GPUPACK_ENDPOINT'])
ecs.register_task_definition(family='py-share', containerDefinitions=json.loads(os.environ['CONTAINERS']))
task = ecs.run_task(cluster='default', taskDefinition='py-share')['tasks'][0]
arns = ecs.list_container_instances(cluster='default')['containerInstanceArns']
devices = ecs.describe_container_instances(cluster='default', containerInstances=arns)['containerInstances'][0]['gpuDevices']
ecs.stop_task(cluster='default', task=task['taskArn'])
print(json.dumps({'container': task['containers'][0], 'gpuDevices': devices}, default=str))
`;
  const r = spawnSync(DEBIAN_PYTHON, ['-c', py], {
    env: { ...env, GPUPACK_ENDPOINT: up.endpoint, CONTAINERS },
    encoding: 'utf8',
    timeout: 60000,
  });
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout);
  assert.equal(out.container.gpuIds.length, 1);
  assert.deepEqual(out.container.gpuSharingStrategy, { nvidiaMps: { memory: 2048, maxComputePercent: 50 } });
  assert.ok(out.gpuDevices.some((g) => g.gpuId === out.container.gpuIds[0] && g.sharingMode === 'NVIDIA_MPS'));
});
