// aws_cli: the commands `gpupack up` prints, run as printed with Debian's AWS CLI (/usr/bin/aws, package awscli)
// and Debian's boto3 (/usr/bin/python3, package python3-boto3): both ignore AWS_ENDPOINT_URL_ECS and read the
// region from AWS_DEFAULT_REGION only, so without --endpoint-url they would call AWS itself and without
// AWS_DEFAULT_REGION they stop with "You must specify a region".
//
// Hermetic: HOME is a temporary directory (no ~/.aws of the machine's), no AWS_* variable is inherited, and
// `aws` on PATH is /usr/bin/aws whatever else the machine has first on its PATH.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  DEBIAN_AWS, DEBIAN_PYTHON, awsClientEnv as cleanEnv, awsEcs, gpupackBin, launch, ok, removeTempDir, startServer, startUp, tempDir,
} from './harness.mjs';

let dir;
let up;

before(async () => {
  for (const p of [DEBIAN_AWS, DEBIAN_PYTHON])
    assert.ok(fs.existsSync(p), `${p} is missing: apt-get install awscli python3-boto3 (scripts/install-deps.sh does)`);
  dir = tempDir('gpupack-awscli-');
  up = await startUp(path.join(dir, 'up'));
});

after(async () => {
  await up?.stop();
  removeTempDir(dir);
});

// printed: the banner's lines that a user copies: the exports and the aws commands.
function printed(banner) {
  const lines = banner.split('\n').map((l) => l.trim());
  return {
    exports: lines.filter((l) => l.startsWith('export ')),
    commands: lines.filter((l) => l.startsWith('aws ')),
  };
}

test('gpupack up prints --endpoint-url and AWS_DEFAULT_REGION', () => {
  const { exports, commands } = printed(up.banner());
  assert.ok(exports.some((l) => l.includes(`AWS_DEFAULT_REGION=us-east-1`)), up.banner());
  assert.ok(exports.some((l) => l.includes(`AWS_REGION=us-east-1`)), up.banner());
  assert.ok(commands.length >= 1, up.banner());
  for (const c of commands) assert.ok(c.includes(`--endpoint-url ${up.endpoint}`), c);
});

test("the banner's console URL answers with the console page", async () => {
  const url = /^\s*console\s+(http:\/\/\S+)/m.exec(up.banner())?.[1];
  assert.ok(url, up.banner());
  assert.equal(url, `${up.endpoint}/console/`);
  const res = await fetch(url, { signal: AbortSignal.timeout(30000) });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /text\/html/);
  assert.match(await res.text(), /<title>gpupack console<\/title>/);
});

test("the printed commands reach gpupack with Debian's AWS CLI", () => {
  const { exports, commands } = printed(up.banner());
  const env = cleanEnv(dir);
  const version = spawnSync('aws', ['--version'], { env, encoding: 'utf8' });
  assert.equal(version.status, 0, version.stderr);
  for (const command of commands) {
    const run = spawnSync('bash', ['-c', [...exports, command].join('\n')], { env, encoding: 'utf8', timeout: 60000 });
    assert.equal(run.status, 0, `${command}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`);
    const answer = JSON.parse(run.stdout);
    if (command.includes('describe-container-instances')) {
      assert.equal(answer.containerInstances.length, 1, run.stdout);
      assert.equal(answer.containerInstances[0].agentConnected, true);
      assert.equal(answer.containerInstances[0].status, 'ACTIVE');
    } else {
      assert.equal(answer.containerInstanceArns.length, 1, run.stdout);
    }
  }
});

test("Debian's boto3 reaches gpupack with the printed environment and endpoint_url", () => {
  const { exports } = printed(up.banner());
  const env = cleanEnv(dir);
  const py = [
    'import boto3, os',
    "ecs = boto3.client('ecs', endpoint_url=os.environ['AWS_ENDPOINT_URL_ECS'])",
    "print(ecs.list_clusters()['clusterArns'])",
  ].join('; ');
  const run = spawnSync('bash', ['-c', [...exports, `${DEBIAN_PYTHON} -c "${py}"`].join('\n')], {
    env,
    encoding: 'utf8',
    timeout: 60000,
  });
  assert.equal(run.status, 0, `stdout:\n${run.stdout}\nstderr:\n${run.stderr}`);
  assert.match(run.stdout, /cluster\/default/);
});

// The CloudWatch Logs side with Debian's AWS CLI: describe-log-groups (DescribeLogGroups, with a prefix and
// pages of one) and `aws logs tail <group>` print what a task wrote.
test("Debian's AWS CLI lists the log groups and tails a task's output (aws logs tail)", async () => {
  const { exports } = printed(up.banner());
  const env = cleanEnv(dir);
  await ok(up.endpoint, 'RegisterTaskDefinition', {
    family: 'tail-me',
    containerDefinitions: [{ name: 'main', image: 'host', memory: 64, entryPoint: ['/bin/sh', '-c'], command: ['echo hello from the tail test'] }],
  });
  const task = (await ok(up.endpoint, 'RunTask', { taskDefinition: 'tail-me' })).tasks[0];
  for (let i = 0; i < 600; ++i) {
    const t = (await ok(up.endpoint, 'DescribeTasks', { tasks: [task.taskArn] })).tasks[0];
    if (t.lastStatus === 'STOPPED') break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const aws = (args) => {
    const run = spawnSync('bash', ['-c', [...exports, `aws ${args} --endpoint-url ${up.endpoint}`].join('\n')], {
      env,
      encoding: 'utf8',
      timeout: 60000,
    });
    assert.equal(run.status, 0, `aws ${args}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`);
    return run.stdout;
  };
  const groups = JSON.parse(aws('logs describe-log-groups --log-group-name-prefix /gpupack/'));
  assert.deepEqual(groups.logGroups.map((g) => g.logGroupName), ['/gpupack/default']);
  assert.equal(groups.logGroups[0].arn, 'arn:aws:logs:us-east-1:000000000000:log-group:/gpupack/default:*');
  // Pages of one, followed by the CLI's own paginator: the same single group, once.
  const paged = JSON.parse(aws('logs describe-log-groups --page-size 1'));
  assert.deepEqual(paged.logGroups.map((g) => g.logGroupName), ['/gpupack/default']);
  const tail = aws('logs tail /gpupack/default --since 1h');
  assert.match(tail, new RegExp(`main/${task.taskArn.split('/').pop()} hello from the tail test`), tail);
});

// Manual acceptance of new hosts (docs/operations.md "Accept new hosts by hand") as an operator does it, with
// Debian's AWS CLI (after `gpupack aws-model`) signing with an admin key: the cluster set to
// gpupack.instanceAcceptance manual, a real `gpupack agent` (simulated GPU, process runtime, its own agent key)
// registers and waits in REGISTERING, where run-task places nothing; the agent's key cannot accept its own host;
// the admin's update-container-instances-state ACTIVE does, and run-task's task then reaches RUNNING there.
describe('manual acceptance with the AWS CLI and a real agent', () => {
  const ADMIN = { id: 'AKIDACCEPTADMIN00001', secret: 'accept-admin-secret' };
  const AGENT = { id: 'AKIDACCEPTAGENT00002', secret: 'accept-agent-secret' };
  let adir;
  let server;
  let agent;
  let adminEnv;
  let agentEnv;

  const aws = (env, ...args) => awsEcs(server.endpoint, env, ...args);
  const awsOk = (env, ...args) => {
    const r = aws(env, ...args);
    assert.equal(r.status, 0, `aws ecs ${args.join(' ')}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
    return r.json;
  };
  // waitFor polls `f` (an aws call each time, so every half second, at most `tries` times) until it answers
  // something truthy.
  const waitFor = async (what, f, tries = 60) => {
    for (let i = 0; i < tries; ++i) {
      const v = f();
      if (v) return v;
      await new Promise((r) => setTimeout(r, 500));
    }
    throw new Error(`timed out waiting for ${what}\nagent:\n${agent?.output}`);
  };
  const credentials = (name, text) => {
    const p = path.join(adir, name);
    fs.writeFileSync(p, text, { mode: 0o600 });
    fs.chmodSync(p, 0o600);
    return p;
  };

  before(async () => {
    adir = tempDir('gpupack-accept-');
    const serverKeys = credentials('server-credentials',
      `[admin]\naws_access_key_id = ${ADMIN.id}\naws_secret_access_key = ${ADMIN.secret}\n\n` +
      `[agent-node-m]\naws_access_key_id = ${AGENT.id}\naws_secret_access_key = ${AGENT.secret}\n` +
      'gpupack_role = agent\ngpupack_host = node-m\n');
    server = await startServer({ db: path.join(adir, 'state.db'), extraArgs: ['--credentials', serverKeys] });
    const base = { ...cleanEnv(adir), AWS_DEFAULT_REGION: 'us-east-1' };
    adminEnv = { ...base, AWS_ACCESS_KEY_ID: ADMIN.id, AWS_SECRET_ACCESS_KEY: ADMIN.secret };
    agentEnv = { ...base, AWS_ACCESS_KEY_ID: AGENT.id, AWS_SECRET_ACCESS_KEY: AGENT.secret };
    const model = spawnSync(gpupackBin(), ['aws-model', '--python', DEBIAN_PYTHON], { env: adminEnv, encoding: 'utf8', timeout: 60000 });
    assert.equal(model.status, 0, model.stderr);
  });

  after(async () => {
    await agent?.stop();
    await server?.stop();
    if (adir) removeTempDir(adir);
  });

  test('a new host waits in REGISTERING until the admin key accepts it, then takes the task', { timeout: 240000 }, async () => {
    awsOk(adminEnv, 'create-cluster', '--cluster-name', 'default');
    const set = awsOk(adminEnv, 'update-cluster-settings', '--cluster', 'default',
      '--settings', 'name=gpupack.instanceAcceptance,value=manual');
    assert.deepEqual(set.cluster.settings.find((s) => s.name === 'gpupack.instanceAcceptance'),
      { name: 'gpupack.instanceAcceptance', value: 'manual' }, JSON.stringify(set));

    const agentKey = credentials('agent-credentials',
      `[default]\naws_access_key_id = ${AGENT.id}\naws_secret_access_key = ${AGENT.secret}\n`);
    agent = await launch(['agent', '--server', server.endpoint, '--gpus', 'fake:1x22587', '--name', 'node-m',
      '--runtime', 'process', '--state-dir', path.join(adir, 'agent'), '--mps-pipe-dir', path.join(adir, 'mps'),
      '--credentials', agentKey, '--log-level', 'info', '--stop-grace-ms', '1000'],
    { what: 'gpupack agent', ready: (out) => (/registered arn:\S+/.exec(out)?.[0] ?? null) });

    const arn = await waitFor('the host in REGISTERING', () =>
      awsOk(adminEnv, 'list-container-instances', '--cluster', 'default', '--status', 'REGISTERING').containerInstanceArns[0]);
    assert.deepEqual(awsOk(adminEnv, 'list-container-instances', '--cluster', 'default', '--status', 'ACTIVE').containerInstanceArns, []);
    const waiting = await waitFor('its agent connected', () => {
      const ci = awsOk(adminEnv, 'describe-container-instances', '--cluster', 'default', '--container-instances', arn)
        .containerInstances[0];
      return ci.agentConnected ? ci : null;
    });
    assert.equal(waiting.status, 'REGISTERING');
    assert.equal(waiting.ec2InstanceId, 'node-m');  // what the operator checks before accepting it ...
    assert.deepEqual(waiting.gpuDevices.map((g) => g.totalMemoryInMiB), [22587]);  // ... and its GPUs (the model)

    awsOk(adminEnv, 'register-task-definition', '--family', 'accept', '--container-definitions', JSON.stringify([{
      name: 'main', image: 'host', command: ['sleep', '600'], memory: 64,
      resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { memory: 2048 } } }],
    }]));
    const held = awsOk(adminEnv, 'run-task', '--cluster', 'default', '--task-definition', 'accept');
    assert.deepEqual(held.tasks, [], JSON.stringify(held));
    assert.equal(held.failures[0].arn, arn, JSON.stringify(held));
    assert.equal(held.failures[0].reason, 'STATUS');
    assert.match(held.failures[0].detail, /container instance is REGISTERING/);

    // The host's own key cannot accept it: only an admin key may.
    const self = aws(agentEnv, 'update-container-instances-state', '--cluster', 'default', '--container-instances', arn,
      '--status', 'ACTIVE');
    assert.notEqual(self.status, 0, self.stdout);
    assert.match(self.stderr, /AccessDeniedException/);
    assert.equal(awsOk(adminEnv, 'describe-container-instances', '--cluster', 'default', '--container-instances', arn)
      .containerInstances[0].status, 'REGISTERING');

    const accepted = awsOk(adminEnv, 'update-container-instances-state', '--cluster', 'default',
      '--container-instances', arn, '--status', 'ACTIVE');
    assert.equal(accepted.containerInstances[0].status, 'ACTIVE', JSON.stringify(accepted));
    assert.deepEqual(accepted.failures, []);
    const placed = awsOk(adminEnv, 'run-task', '--cluster', 'default', '--task-definition', 'accept');
    assert.equal(placed.tasks.length, 1, JSON.stringify(placed));
    assert.equal(placed.tasks[0].containerInstanceArn, arn);
    const taskArn = placed.tasks[0].taskArn;
    const running = await waitFor('the task RUNNING', () => {
      const t = awsOk(adminEnv, 'describe-tasks', '--cluster', 'default', '--tasks', taskArn).tasks[0];
      return t.lastStatus === 'RUNNING' ? t : null;
    });
    assert.deepEqual(running.containers[0].gpuIds, waiting.gpuDevices.map((g) => g.gpuId));
    awsOk(adminEnv, 'stop-task', '--cluster', 'default', '--task', taskArn);
  });
});
