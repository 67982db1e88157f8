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
import { after, before, test } from 'node:test';

import { DEBIAN_AWS, DEBIAN_PYTHON, awsClientEnv as cleanEnv, ok, removeTempDir, startUp, tempDir } from './harness.mjs';

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
