// Task logs the ECS way: a real `gpupack server` and `gpupack agent` (process runtime, fake GPUs) run a task
// whose containers print lines, and the real CloudWatch Logs SDK (@aws-sdk/client-cloudwatch-logs) reads them
// from the server's port (docs/api.md "Logs"): GetLogEvents and FilterLogEvents while the task runs, after it
// stopped and after the agent restarted; paging with CloudWatch's tokens over more lines than one page; the
// awslogs names; DescribeLogStreams; ResourceNotFoundException and ServiceUnavailableException; with --credentials,
// signatures for the service `logs` from an admin key (an agent key is refused). With GPUPACK_DOCKER_SOCKET set
// (an engine with gpupack-test/busybox:latest, scripts/docker-engine.sh) the docker runtime's copy of the
// engine's log is read too, while the container runs and after it was removed.
//
// Run: GPUPACK_BIN=build/gpupack node --test tests/sdk/logs_sdk.test.mjs   (ctest runs it as sdk_logs)
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import {
  CloudWatchLogsClient,
  DescribeLogGroupsCommand,
  DescribeLogStreamsCommand,
  InvalidParameterException,
  FilterLogEventsCommand,
  GetLogEventsCommand,
  ResourceNotFoundException,
  ServiceUnavailableException,
  paginateDescribeLogGroups,
} from '@aws-sdk/client-cloudwatch-logs';

import { gpupackBin, ok, removeTempDir, startServer, tempDir } from '../integration/harness.mjs';

const CLUSTER = 'logs';
const LINES = 1200;  // more than one page of each call below
const GROUP = '/test/app';

let dir;
let server;
let agent;
let logs;
let taskArn;
let taskId;
let t0;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// waitFor polls `probe` (bounded) until it returns a truthy value.
async function waitFor(what, probe, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

// startAgent runs `gpupack agent` with its state under dir/agent and waits until its channel is up.
async function startAgent(extraArgs = [], name = 'logs-node') {
  const child = spawn(gpupackBin(), ['agent', '--server', server.endpoint, '--cluster', CLUSTER, '--gpus', 'fake:1x1024',
    '--state-dir', path.join(dir, 'agent'), '--mps-pipe-dir', path.join(dir, 'mps'), '--name', name,
    '--cpu', '4096', '--memory', '8192', '--stop-grace-ms', '500', '--log-level', 'warn', ...extraArgs],
  { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  await waitFor('the agent to connect', async () => {
    if (child.exitCode !== null) throw new Error(`the agent exited: ${stderr}`);
    const list = await ok(server.endpoint, 'ListContainerInstances', { cluster: CLUSTER }).catch(() => undefined);
    if (!list || list.containerInstanceArns.length === 0) return false;
    const d = await ok(server.endpoint, 'DescribeContainerInstances', { cluster: CLUSTER, containerInstances: list.containerInstanceArns });
    return d.containerInstances[0].agentConnected === true;
  });
  return {
    child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15000);
      await exited;
      clearTimeout(timer);
    },
  };
}

// agentDisconnected: whether the server saw the agent's channel close.
async function agentDisconnected() {
  const list = await ok(server.endpoint, 'ListContainerInstances', { cluster: CLUSTER });
  const d = await ok(server.endpoint, 'DescribeContainerInstances', { cluster: CLUSTER, containerInstances: list.containerInstanceArns });
  return d.containerInstances[0].agentConnected === false;
}

const appStream = () => `web/app/${taskId}`;
const sideStream = () => `side/${taskId}`;
const expected = Array.from({ length: LINES }, (_, i) => `line ${i}`).concat(['ready']);

// allForward pages GetLogEvents from the head with nextForwardToken until the token comes back unchanged.
async function allForward(limit) {
  const out = [];
  let token;
  for (let pages = 0; pages < 100; pages++) {
    const r = await logs.send(new GetLogEventsCommand({ logGroupName: GROUP, logStreamName: appStream(), startFromHead: true, limit, nextToken: token }));
    out.push(...r.events);
    if (r.nextForwardToken === token) return { events: out, pages };
    assert.match(r.nextForwardToken, /^f\//);
    assert.match(r.nextBackwardToken, /^b\//);
    token = r.nextForwardToken;
  }
  throw new Error('GetLogEvents never returned the same forward token');
}

// checkAllLines: every line the app printed, in order, each with a plausible timestamp.
async function checkAllLines() {
  const { events, pages } = await allForward(500);
  assert.deepEqual(events.map((e) => e.message), expected);
  assert.ok(pages >= 3, `${pages} pages`);
  for (const e of events) {
    assert.ok(e.timestamp >= t0 - 1000 && e.timestamp <= Date.now(), `timestamp ${e.timestamp}`);
    assert.equal(e.ingestionTime, e.timestamp);
  }
}

async function filterAll(params) {
  const out = [];
  let token;
  for (let pages = 0; pages < 100; pages++) {
    const r = await logs.send(new FilterLogEventsCommand({ logGroupName: GROUP, ...params, nextToken: token }));
    out.push(...r.events);
    if (!r.nextToken) return out;
    token = r.nextToken;
  }
  throw new Error('FilterLogEvents never ended');
}

async function checkFilter() {
  // "line 11" is in line 11, 110-119 and 1100-1199.
  const events = await filterAll({ filterPattern: '"line 11"', limit: 40 });
  const want = expected.filter((m) => m.includes('line 11'));
  assert.equal(want.length, 111);
  assert.deepEqual(events.map((e) => e.message), want);
  for (const e of events) assert.equal(e.logStreamName, appStream());
  // Two plain terms: both must occur.
  const both = await filterAll({ filterPattern: 'line 999', logStreamNames: [appStream()] });
  assert.deepEqual(both.map((e) => e.message), expected.filter((m) => m.includes('line') && m.includes('999')));
}

describe('CloudWatch Logs over the task output', { timeout: 240000 }, () => {
  before(async () => {
    dir = tempDir('gpupack-logs-sdk-');
    server = await startServer({ db: path.join(dir, 'state.db') });
    logs = new CloudWatchLogsClient({
      endpoint: server.endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'secret' },
      maxAttempts: 1,
    });
    agent = await startAgent();
    await ok(server.endpoint, 'RegisterTaskDefinition', {
      family: 'printer',
      containerDefinitions: [
        {
          name: 'app',
          image: 'busybox',
          cpu: 64,
          memory: 64,
          essential: true,
          entryPoint: ['/bin/sh', '-c'],
          command: [`i=0; while [ $i -lt ${LINES} ]; do echo "line $i"; i=$((i+1)); done; echo ready >&2; exec sleep 600`],
          logConfiguration: { logDriver: 'awslogs', options: { 'awslogs-group': GROUP, 'awslogs-stream-prefix': 'web', 'awslogs-region': 'us-east-1' } },
        },
        {
          name: 'side',
          image: 'busybox',
          cpu: 64,
          memory: 64,
          essential: false,
          entryPoint: ['/bin/sh', '-c'],
          command: ['echo side hello; exec sleep 600'],
        },
      ],
    });
    t0 = Date.now();
    const run = await ok(server.endpoint, 'RunTask', { cluster: CLUSTER, taskDefinition: 'printer' });
    assert.equal(run.failures.length, 0, JSON.stringify(run.failures));
    taskArn = run.tasks[0].taskArn;
    taskId = taskArn.split('/').pop();
  });

  after(async () => {
    await agent?.stop();
    await server?.stop();
    if (dir) removeTempDir(dir);
  });

  test('GetLogEvents reads the lines while the task runs, page by page, with timestamps', async () => {
    await waitFor('every line', async () => {
      const r = await logs.send(new GetLogEventsCommand({ logGroupName: GROUP, logStreamName: appStream(), limit: 1 }));
      return r.events.length === 1 && r.events[0].message === 'ready';
    });
    await checkAllLines();
    // From the tail (the default): the newest lines, oldest first; the backward token goes on to older ones.
    const tail = await logs.send(new GetLogEventsCommand({ logGroupName: GROUP, logStreamName: appStream(), limit: 3 }));
    assert.deepEqual(tail.events.map((e) => e.message), [`line ${LINES - 2}`, `line ${LINES - 1}`, 'ready']);
    const older = await logs.send(new GetLogEventsCommand({ logGroupName: GROUP, logStreamName: appStream(), limit: 2, nextToken: tail.nextBackwardToken }));
    assert.deepEqual(older.events.map((e) => e.message), [`line ${LINES - 4}`, `line ${LINES - 3}`]);
    // The forward token of the tail: nothing new yet, the same token again.
    const fresh = await logs.send(new GetLogEventsCommand({ logGroupName: GROUP, logStreamName: appStream(), nextToken: tail.nextForwardToken }));
    assert.equal(fresh.events.length, 0);
    assert.equal(fresh.nextForwardToken, tail.nextForwardToken);
    // A time window.
    const windowed = await logs.send(new GetLogEventsCommand({ logGroupName: GROUP, logStreamName: appStream(), startFromHead: true, startTime: 0, endTime: t0 - 60000 }));
    assert.equal(windowed.events.length, 0);
  });

  test('FilterLogEvents finds plain terms across pages while the task runs', async () => {
    await checkFilter();
  });

  test('a container without awslogs is in /gpupack/<cluster>; DescribeLogStreams lists the streams', async () => {
    await waitFor('the side line', async () => {
      const r = await logs.send(new GetLogEventsCommand({ logGroupName: `/gpupack/${CLUSTER}`, logStreamName: sideStream(), startFromHead: true }));
      return r.events.map((e) => e.message).join('|') === 'side hello';
    });
    const app = await logs.send(new DescribeLogStreamsCommand({ logGroupName: GROUP }));
    assert.deepEqual(app.logStreams.map((s) => s.logStreamName), [appStream()]);
    assert.ok(app.logStreams[0].creationTime >= t0 - 1000);
    assert.match(app.logStreams[0].arn, new RegExp(`^arn:aws:logs:us-east-1:\\d+:log-group:${GROUP}:log-stream:web/app/`));
    const side = await logs.send(new DescribeLogStreamsCommand({ logGroupIdentifier: `/gpupack/${CLUSTER}`, logStreamNamePrefix: 'side/' }));
    assert.deepEqual(side.logStreams.map((s) => s.logStreamName), [sideStream()]);
  });

  test('DescribeLogGroups lists the groups by name, page by page, by prefix or pattern', async () => {
    const names = [];
    for await (const page of paginateDescribeLogGroups({ client: logs, pageSize: 1 }, {})) {
      assert.ok(page.logGroups.length <= 1);
      names.push(...page.logGroups.map((g) => g.logGroupName));
    }
    assert.deepEqual(names, [...names].sort(), 'by name');
    assert.ok(names.includes(GROUP) && names.includes(`/gpupack/${CLUSTER}`), names.join(', '));
    assert.equal(new Set(names).size, names.length, 'no group twice across pages');
    const app = await logs.send(new DescribeLogGroupsCommand({ logGroupNamePrefix: '/test/' }));
    assert.deepEqual(app.logGroups.map((g) => g.logGroupName), [GROUP]);
    assert.equal(app.logGroups[0].logGroupArn, `arn:aws:logs:us-east-1:${app.logGroups[0].arn.split(':')[4]}:log-group:${GROUP}`);
    assert.ok(app.logGroups[0].creationTime >= t0 - 1000);
    const pattern = await logs.send(new DescribeLogGroupsCommand({ logGroupNamePattern: 'TEST/A' }));
    assert.deepEqual(pattern.logGroups.map((g) => g.logGroupName), [GROUP]);
    await assert.rejects(logs.send(new DescribeLogGroupsCommand({ logGroupNamePrefix: '/a', logGroupNamePattern: 'b' })),
      InvalidParameterException);
  });

  test('unknown groups and streams are ResourceNotFoundException; bad patterns InvalidParameterException', async () => {
    await assert.rejects(logs.send(new GetLogEventsCommand({ logGroupName: '/nope', logStreamName: appStream() })),
      (e) => e instanceof ResourceNotFoundException && /log group/.test(e.message));
    await assert.rejects(logs.send(new GetLogEventsCommand({ logGroupName: GROUP, logStreamName: 'web/app/nope' })),
      (e) => e instanceof ResourceNotFoundException && /log stream/.test(e.message));
    await assert.rejects(logs.send(new DescribeLogStreamsCommand({ logGroupName: '/nope' })), ResourceNotFoundException);
    await assert.rejects(logs.send(new FilterLogEventsCommand({ logGroupName: GROUP, filterPattern: '{ $.a = 1 }' })),
      (e) => e.name === 'InvalidParameterException' && /plain terms/.test(e.message));
    await assert.rejects(logs.send(new GetLogEventsCommand({ logGroupName: GROUP, logStreamName: appStream(), nextToken: 'garbage' })),
      (e) => e.name === 'InvalidParameterException');
  });

  test('an oversized filter pattern is InvalidParameterException: 1,024 bytes, 32 terms; at the bounds it is served', async () => {
    await assert.rejects(logs.send(new FilterLogEventsCommand({ logGroupName: GROUP, filterPattern: 'x'.repeat(1025) })),
      (e) => e.name === 'InvalidParameterException' && /Member must have length less than or equal to 1024/.test(e.message));
    const terms = (n) => Array.from({ length: n }, (_, i) => `t${i}`).join(' ');
    await assert.rejects(logs.send(new FilterLogEventsCommand({ logGroupName: GROUP, filterPattern: terms(200000).slice(0, 1024) })),
      (e) => e.name === 'InvalidParameterException' && /at most 32 terms/.test(e.message));
    // 32 terms that never all occur: nothing found, and the call ends (with a token while streams remain).
    const r = await logs.send(new FilterLogEventsCommand({ logGroupName: GROUP, filterPattern: terms(32) }));
    assert.deepEqual(r.events, []);
  });

  test('the lines are kept after the task stopped', async () => {
    await ok(server.endpoint, 'StopTask', { cluster: CLUSTER, task: taskArn, reason: 'test' });
    await waitFor('STOPPED', async () => {
      const d = await ok(server.endpoint, 'DescribeTasks', { cluster: CLUSTER, tasks: [taskArn] });
      return d.tasks[0].lastStatus === 'STOPPED';
    });
    await checkAllLines();
    await checkFilter();
  });

  test('ServiceUnavailableException while the agent is away; the lines again after it restarted', async () => {
    await agent.stop();
    await waitFor('the server to see the agent go', agentDisconnected);
    await assert.rejects(logs.send(new GetLogEventsCommand({ logGroupName: GROUP, logStreamName: appStream() })),
      (e) => e instanceof ServiceUnavailableException && /not available/.test(e.message));
    await assert.rejects(logs.send(new FilterLogEventsCommand({ logGroupName: GROUP })), ServiceUnavailableException);
    agent = await startAgent();
    await checkAllLines();
    await checkFilter();
  });
});

describe('CloudWatch Logs against gpupack server --credentials', { timeout: 60000 }, () => {
  const ADMIN = { accessKeyId: 'AKIDLOGSADMIN0000001', secretAccessKey: 'logs/admin+Secret0123456789' };
  const AGENT = { accessKeyId: 'AKIDLOGSAGENT0000002', secretAccessKey: 'logs-agent-secret-0123456789' };
  let authDir;
  let authServer;
  const client = (credentials) =>
    new CloudWatchLogsClient({ endpoint: authServer.endpoint, region: 'us-east-1', credentials, maxAttempts: 1 });

  before(async () => {
    authDir = tempDir('gpupack-logs-auth-');
    const file = path.join(authDir, 'credentials');
    fs.writeFileSync(file, ['[default]', `aws_access_key_id = ${ADMIN.accessKeyId}`,
      `aws_secret_access_key = ${ADMIN.secretAccessKey}`, '', '[node]', `aws_access_key_id = ${AGENT.accessKeyId}`,
      `aws_secret_access_key = ${AGENT.secretAccessKey}`, 'gpupack_role = agent', ''].join('\n'), { mode: 0o600 });
    authServer = await startServer({ db: path.join(authDir, 'state.db'), extraArgs: ['--credentials', file] });
  });
  after(async () => {
    await authServer?.stop();
    if (authDir) removeTempDir(authDir);
  });

  test('an admin key signed for logs gets through; an agent key, a wrong secret and no signature do not', async () => {
    // Through the signature check: the group is unknown.
    await assert.rejects(client(ADMIN).send(new DescribeLogStreamsCommand({ logGroupName: '/none' })), ResourceNotFoundException);
    await assert.rejects(client(AGENT).send(new DescribeLogStreamsCommand({ logGroupName: '/none' })),
      (e) => e.name === 'AccessDeniedException' && /DescribeLogStreams/.test(e.message));
    await assert.rejects(client({ ...ADMIN, secretAccessKey: 'wrong' }).send(new DescribeLogStreamsCommand({ logGroupName: '/none' })),
      (e) => e.name === 'InvalidSignatureException');
    const unsigned = await fetch(authServer.endpoint + '/', {
      method: 'POST',
      headers: { 'Content-Type': 'application/x-amz-json-1.1', 'X-Amz-Target': 'Logs_20140328.DescribeLogStreams' },
      body: '{"logGroupName":"/none"}',
    });
    assert.equal(unsigned.status, 403);
  });
});

describe('CloudWatch Logs over a docker container', { timeout: 120000, skip: !process.env.GPUPACK_DOCKER_SOCKET && 'GPUPACK_DOCKER_SOCKET is not set' }, () => {
  const DOCKER_LINES = 300;
  const want = Array.from({ length: DOCKER_LINES }, (_, i) => `out ${i}`).concat(['to stderr']);
  let arn;
  let stream;

  before(async () => {
    dir = tempDir('gpupack-logs-docker-');
    server = await startServer({ db: path.join(dir, 'state.db') });
    logs = new CloudWatchLogsClient({ endpoint: server.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'secret' }, maxAttempts: 1 });
    agent = await startAgent(['--runtime', 'docker', '--docker-socket', process.env.GPUPACK_DOCKER_SOCKET], `logs-docker-${process.pid}`);
    await ok(server.endpoint, 'RegisterTaskDefinition', {
      family: 'docker-printer',
      containerDefinitions: [{
        name: 'box', image: 'gpupack-test/busybox:latest', cpu: 64, memory: 64, essential: true,
        entryPoint: ['/bin/sh', '-c'],
        command: [`i=0; while [ $i -lt ${DOCKER_LINES} ]; do echo "out $i"; i=$((i+1)); done; echo to stderr >&2; exec sleep 600`],
      }],
    });
    const run = await ok(server.endpoint, 'RunTask', { cluster: CLUSTER, taskDefinition: 'docker-printer' });
    assert.equal(run.failures.length, 0, JSON.stringify(run.failures));
    arn = run.tasks[0].taskArn;
    stream = `box/${arn.split('/').pop()}`;
  });
  after(async () => {
    await agent?.stop();
    await server?.stop();
    if (dir) removeTempDir(dir);
  });

  async function readAll() {
    const out = [];
    let token;
    for (let pages = 0; pages < 50; pages++) {
      const r = await logs.send(new GetLogEventsCommand({ logGroupName: `/gpupack/${CLUSTER}`, logStreamName: stream, startFromHead: true, limit: 100, nextToken: token }));
      out.push(...r.events);
      if (r.nextForwardToken === token) break;
      token = r.nextForwardToken;
    }
    return out;
  }

  test('the engine\'s lines while the container runs and after it was stopped and removed', async () => {
    const events = await waitFor('every docker line', async () => {
      const e = await readAll();
      return e.length === want.length ? e : false;
    });
    // The engine copies stdout and stderr on their own: each stream's lines in order, the two interleaved as
    // the engine stamped them.
    const inOrder = (list) => list.filter((m) => m !== 'to stderr');
    assert.deepEqual(inOrder(events.map((e) => e.message)), inOrder(want));
    assert.equal(events.filter((e) => e.message === 'to stderr').length, 1);
    for (const e of events) assert.ok(e.timestamp > Date.now() - 600000 && e.timestamp <= Date.now());
    await waitFor('RUNNING', async () => {
      const d = await ok(server.endpoint, 'DescribeTasks', { cluster: CLUSTER, tasks: [arn] });
      return d.tasks[0].lastStatus === 'RUNNING';
    });
    await ok(server.endpoint, 'StopTask', { cluster: CLUSTER, task: arn });
    await waitFor('STOPPED', async () => {
      const d = await ok(server.endpoint, 'DescribeTasks', { cluster: CLUSTER, tasks: [arn] });
      return d.tasks[0].lastStatus === 'STOPPED';
    });
    // The agent removes the container once it stopped: what is read now is the agent's copy.
    await waitFor('the container removed', () => {
      const ps = spawnSync('docker', ['-H', `unix://${process.env.GPUPACK_DOCKER_SOCKET}`, 'ps', '-aq', '--filter', `name=${arn.split('/').pop()}`], { encoding: 'utf8' });
      return ps.status === 0 && ps.stdout.trim() === '';
    });
    assert.deepEqual((await readAll()).map((e) => e.message), events.map((e) => e.message));
    const filtered = await logs.send(new FilterLogEventsCommand({ logGroupName: `/gpupack/${CLUSTER}`, filterPattern: 'stderr' }));
    assert.deepEqual(filtered.events.map((e) => e.message), ['to stderr']);
  });
});
