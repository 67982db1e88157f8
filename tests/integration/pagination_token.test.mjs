// Pagination (ListTasks maxResults/nextToken walks every task exactly once) and RunTask idempotency with
// clientToken (docs/api.md), black box over HTTP.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';

import {
  call,
  gpuDevices,
  ok,
  registerInstance,
  removeTempDir,
  sharedTaskDefinition,
  PLAY_AGENT,
  startServer,
  tempDir,
} from './harness.mjs';

let dir;
let server;
let instanceArn;

before(async () => {
  dir = tempDir('gpupack-page-');
  server = await startServer({ db: path.join(dir, 'page.db'), extraArgs: PLAY_AGENT });
  await ok(server.endpoint, 'CreateCluster', { clusterName: 'page' });
  instanceArn = await registerInstance(server.endpoint, 'page', [
    ['GPU-p-0', 22587],
    ['GPU-p-1', 22587],
  ]);
  await ok(server.endpoint, 'RegisterTaskDefinition', sharedTaskDefinition('small', 256, 10));
  await ok(server.endpoint, 'RegisterTaskDefinition', sharedTaskDefinition('other', 512));
});

after(async () => {
  await server?.stop();
  if (dir) removeTempDir(dir);
});

// walk pages through ListTasks with `maxResults`, returning the pages.
async function walk(body, maxResults) {
  const pages = [];
  let nextToken;
  for (let guard = 0; guard < 1000; ++guard) {
    const r = await ok(server.endpoint, 'ListTasks', { cluster: 'page', ...body, maxResults, nextToken });
    pages.push(r.taskArns);
    nextToken = r.nextToken;
    if (!nextToken) return pages;
  }
  throw new Error('ListTasks never stopped handing out nextToken');
}

describe('ListTasks pagination', () => {
  const all = [];

  before(async () => {
    // 23 tasks in runs of different counts, so creation times and ARNs interleave.
    for (const count of [10, 1, 5, 3, 4]) {
      const r = await ok(server.endpoint, 'RunTask', { cluster: 'page', taskDefinition: 'small', count });
      assert.equal(r.tasks.length, count);
      all.push(...r.tasks.map((t) => t.taskArn));
    }
  });

  test('maxResults 2 with nextToken walks all 23 tasks exactly once: 11 pages of 2 and one of 1', async () => {
    const pages = await walk({}, 2);
    assert.equal(pages.length, 12);
    for (const p of pages.slice(0, -1)) assert.equal(p.length, 2);
    assert.equal(pages.at(-1).length, 1);
    const seen = pages.flat();
    assert.equal(new Set(seen).size, seen.length, 'no task twice');
    assert.deepEqual(seen.slice().sort(), all.slice().sort(), 'every task once');
  });

  test('every page size from 1 to 24 gives the same order as one page of 100', async () => {
    const [one] = await walk({}, 100);
    assert.equal(one.length, 23);
    for (let size = 1; size <= 24; ++size) assert.deepEqual((await walk({}, size)).flat(), one, `maxResults ${size}`);
  });

  test('no maxResults answers up to 100 and no nextToken', async () => {
    const r = await ok(server.endpoint, 'ListTasks', { cluster: 'page' });
    assert.equal(r.taskArns.length, 23);
    assert.equal(r.nextToken, undefined);
  });

  test('filters paginate too: desiredStatus STOPPED after stopping 5', async () => {
    for (const task of all.slice(0, 5)) await ok(server.endpoint, 'StopTask', { cluster: 'page', task });
    const stopped = (await walk({ desiredStatus: 'STOPPED' }, 2)).flat();
    assert.deepEqual(stopped.slice().sort(), all.slice(0, 5).sort());
    const running = (await walk({}, 3)).flat();
    assert.deepEqual(running.slice().sort(), all.slice(5).sort());
  });

  test('maxResults outside 1..100 and a forged nextToken are InvalidParameterException', async () => {
    for (const body of [{ maxResults: 0 }, { maxResults: 101 }, { maxResults: -1 }, { nextToken: 'not-a-token' }]) {
      const r = await call(server.endpoint, 'ListTasks', { cluster: 'page', ...body });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.__type, 'InvalidParameterException');
    }
  });
});

describe('RunTask clientToken', () => {
  test('same token and same request return the same tasks and place nothing new', async () => {
    const req = { cluster: 'page', taskDefinition: 'other', count: 3, clientToken: 'token-same-1', startedBy: 'ci' };
    const first = await ok(server.endpoint, 'RunTask', req);
    assert.equal(first.tasks.length, 3);
    const gpusAfterFirst = await gpuDevices(server.endpoint, 'page', instanceArn);
    const listed = (await walk({ startedBy: 'ci' }, 100)).flat();

    for (let i = 0; i < 3; ++i) {
      const again = await ok(server.endpoint, 'RunTask', req);
      assert.deepEqual(again.tasks.map((t) => t.taskArn), first.tasks.map((t) => t.taskArn));
      assert.deepEqual(again.failures, []);
    }
    assert.deepEqual(await gpuDevices(server.endpoint, 'page', instanceArn), gpusAfterFirst, 'no memory held twice');
    assert.deepEqual((await walk({ startedBy: 'ci' }, 100)).flat(), listed, 'no new task');
  });

  test('same token with a different request is a ConflictException', async () => {
    const req = { cluster: 'page', taskDefinition: 'other', count: 1, clientToken: 'token-conflict-1' };
    await ok(server.endpoint, 'RunTask', req);
    for (const changed of [
      { ...req, count: 2 },
      { ...req, taskDefinition: 'small' },
      { ...req, startedBy: 'someone-else' },
      { ...req, overrides: { containerOverrides: [{ name: 'main', command: ['true'] }] } },
    ]) {
      const r = await call(server.endpoint, 'RunTask', changed);
      assert.equal(r.status, 400, JSON.stringify(changed));
      assert.equal(r.json.__type, 'ConflictException');
      assert.equal(typeof r.json.message, 'string');
    }
  });

  test('a different token with the same request places new tasks', async () => {
    const base = { cluster: 'page', taskDefinition: 'other', count: 1 };
    const a = await ok(server.endpoint, 'RunTask', { ...base, clientToken: 'token-a' });
    const b = await ok(server.endpoint, 'RunTask', { ...base, clientToken: 'token-b' });
    assert.notEqual(a.tasks[0].taskArn, b.tasks[0].taskArn);
  });

  test('a token is scoped to its cluster', async () => {
    await ok(server.endpoint, 'CreateCluster', { clusterName: 'page2' });
    await registerInstance(server.endpoint, 'page2', [['GPU-p2-0', 22587]]);
    const a = await ok(server.endpoint, 'RunTask', { cluster: 'page', taskDefinition: 'other', clientToken: 'shared-tok' });
    const b = await ok(server.endpoint, 'RunTask', { cluster: 'page2', taskDefinition: 'other', clientToken: 'shared-tok' });
    assert.equal(a.tasks.length, 1);
    assert.equal(b.tasks.length, 1);
    assert.notEqual(a.tasks[0].taskArn, b.tasks[0].taskArn);
  });

  test('a clientToken over 64 characters is InvalidParameterException', async () => {
    const r = await call(server.endpoint, 'RunTask', {
      cluster: 'page',
      taskDefinition: 'other',
      clientToken: 't'.repeat(65),
    });
    assert.equal(r.status, 400);
    assert.equal(r.json.__type, 'InvalidParameterException');
  });
});

describe('concurrent RunTasks', () => {
  test('50 clients at once never overcommit a GPU: 22587 MiB holds exactly five 4096 MiB tasks', async () => {
    await ok(server.endpoint, 'CreateCluster', { clusterName: 'race' });
    const arn = await registerInstance(server.endpoint, 'race', [['GPU-race-0', 22587]]);
    await ok(server.endpoint, 'RegisterTaskDefinition', sharedTaskDefinition('race4096', 4096, 20));
    const answers = await Promise.all(
      Array.from({ length: 50 }, () => ok(server.endpoint, 'RunTask', { cluster: 'race', taskDefinition: 'race4096' })),
    );
    const placed = answers.flatMap((a) => a.tasks);
    const failures = answers.flatMap((a) => a.failures);
    assert.equal(placed.length, 5, '5 * 4096 = 20480 <= 22587 < 6 * 4096');
    assert.equal(failures.length, 45);
    for (const f of failures) assert.equal(f.reason, 'RESOURCE:GPU_MEMORY');
    const gpu = (await gpuDevices(server.endpoint, 'race', arn))['GPU-race-0'];
    assert.equal(gpu.remainingMemoryInMiB, 22587 - 5 * 4096);
    assert.equal(gpu.containerCount, 5);
  });
});
