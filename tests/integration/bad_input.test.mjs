// Bad input (DESIGN.md §8): every malformed, mistyped, oversized or hostile request gets a 4xx whose body is
// ECS's error shape {"__type", "message"}; none crashes, hangs or half-writes, and afterwards the server still
// answers a healthy DescribeClusters.
//
// Black box: only the gpupack binary ($GPUPACK_BIN) and HTTP on loopback.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import path from 'node:path';

import {
  TARGET_PREFIX,
  call,
  ok,
  registerInstance,
  removeTempDir,
  sharedTaskDefinition,
  startServer,
  tempDir,
} from './harness.mjs';

let dir;
let server;

// expectEcsError asserts a 4xx in ECS's error shape; `type` (optional) is the expected __type.
function expectEcsError(r, { status, type } = {}) {
  assert.ok(r.status >= 400 && r.status < 500, `expected a 4xx, got ${r.status}: ${r.text.slice(0, 300)}`);
  if (status) assert.equal(r.status, status);
  assert.ok(r.json && typeof r.json === 'object', `body is JSON: ${r.text.slice(0, 300)}`);
  assert.equal(typeof r.json.__type, 'string', 'body has __type');
  assert.equal(typeof r.json.message, 'string', 'body has message');
  assert.ok(r.json.message.length > 0);
  if (type) assert.equal(r.json.__type, type, r.json.message);
  assert.ok(r.headers.get('x-amzn-requestid'), 'every answer carries x-amzn-RequestId');
}

// rawExchange writes `bytes` on a fresh TCP connection and resolves with everything read until the server
// closes (or `timeoutMs` passes).
function rawExchange(endpoint, bytes, timeoutMs = 5000) {
  const { hostname, port } = new URL(endpoint);
  return new Promise((resolve, reject) => {
    const sock = net.connect(Number(port), hostname);
    const chunks = [];
    const timer = setTimeout(() => {
      sock.destroy();
      resolve(Buffer.concat(chunks).toString('latin1'));
    }, timeoutMs);
    sock.on('data', (d) => chunks.push(d));
    sock.on('error', (e) => {
      clearTimeout(timer);
      if (chunks.length) resolve(Buffer.concat(chunks).toString('latin1'));
      else reject(e);
    });
    sock.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString('latin1'));
    });
    sock.write(bytes);
  });
}

before(async () => {
  dir = tempDir('gpupack-bad-');
  server = await startServer({ db: path.join(dir, 'bad.db') });
  await ok(server.endpoint, 'CreateCluster', { clusterName: 'bad' });
  await registerInstance(server.endpoint, 'bad', [['GPU-bad-0', 22587]]);
  await ok(server.endpoint, 'RegisterTaskDefinition', sharedTaskDefinition('fine', 1024, 50));
});

after(async () => {
  await server?.stop();
  if (dir) removeTempDir(dir);
});

describe('malformed requests get a 4xx in ECS error shape', () => {
  test('malformed JSON', async () => {
    for (const body of ['{"cluster":', '{cluster: "bad"}', '{"a":1}}', 'not json', '\u0000', '{"a":1,}']) {
      expectEcsError(await call(server.endpoint, 'DescribeClusters', body, { raw: true }), { status: 400 });
    }
  });

  test('a body that is JSON but not an object', async () => {
    for (const body of ['[]', '"text"', '42', 'null', 'true']) {
      expectEcsError(await call(server.endpoint, 'ListClusters', body, { raw: true }), { status: 400 });
    }
  });

  test('a raw NUL byte or invalid UTF-8 inside a JSON string', async () => {
    const nul = Buffer.from('{"clusterName":"a\u0000b"}', 'utf8');
    expectEcsError(await call(server.endpoint, 'CreateCluster', nul, { raw: true }), { status: 400 });
    const badUtf8 = Buffer.concat([Buffer.from('{"clusterName":"a'), Buffer.from([0xff, 0xfe]), Buffer.from('b"}')]);
    expectEcsError(await call(server.endpoint, 'CreateCluster', badUtf8, { raw: true }), { status: 400 });
  });

  test('wrong types: count as a string, containerDefinitions as an object, and more', async () => {
    const cases = [
      ['RunTask', { cluster: 'bad', taskDefinition: 'fine', count: '2' }],
      ['RunTask', { cluster: 'bad', taskDefinition: 'fine', count: 1.5 }],
      ['RunTask', { cluster: 'bad', taskDefinition: 42 }],
      ['RunTask', { cluster: ['bad'], taskDefinition: 'fine' }],
      ['RunTask', { cluster: 'bad', taskDefinition: 'fine', overrides: [] }],
      ['RunTask', { cluster: 'bad', taskDefinition: 'fine', placementConstraints: {} }],
      ['RegisterTaskDefinition', { family: 'x', containerDefinitions: { name: 'main', image: 'busybox', memory: 128 } }],
      ['RegisterTaskDefinition', { family: 'x', containerDefinitions: ['main'] }],
      [
        'RegisterTaskDefinition',
        {
          family: 'x',
          containerDefinitions: [
            { name: 'main', image: 'busybox', memory: '128', resourceRequirements: [{ type: 'GPU', value: '1' }] },
          ],
        },
      ],
      [
        'RegisterTaskDefinition',
        {
          family: 'x',
          containerDefinitions: [
            {
              name: 'main',
              image: 'busybox',
              memory: 128,
              resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { memory: '4096' } } }],
            },
          ],
        },
      ],
      ['DescribeTasks', { cluster: 'bad', tasks: 'arn:aws:ecs:us-east-1:000000000000:task/bad/abc' }],
      ['DescribeClusters', { clusters: [1, 2] }],
      ['ListTasks', { cluster: 'bad', maxResults: 'ten' }],
      ['RegisterContainerInstance', { cluster: 'bad', totalResources: { CPU: 1 } }],
      [
        'RegisterContainerInstance',
        {
          cluster: 'bad',
          totalResources: [
            { name: 'CPU', type: 'INTEGER', integerValue: 1024 },
            { name: 'MEMORY', type: 'INTEGER', integerValue: 1024 },
          ],
          platformDevices: [{ id: 'GPU-x', type: 'GPU', gpuInfo: { memoryInMiB: 'lots' } }],
        },
      ],
      ['StopTask', { cluster: 'bad', task: { arn: 'x' } }],
    ];
    for (const [op, body] of cases) {
      const r = await call(server.endpoint, op, body);
      expectEcsError(r, { status: 400 });
      assert.match(r.json.__type, /^(ClientException|InvalidParameterException)$/, `${op} ${JSON.stringify(body)}`);
    }
  });

  test('unknown or missing X-Amz-Target is UnknownOperationException', async () => {
    for (const target of [
      TARGET_PREFIX + 'LaunchMissiles',
      TARGET_PREFIX,
      'AmazonEC2ContainerServiceV20141113',
      'DynamoDB_20120810.ListTables',
      'x'.repeat(5000),
    ]) {
      expectEcsError(await call(server.endpoint, 'ignored', {}, { target }), {
        status: 400,
        type: 'UnknownOperationException',
      });
    }
    const res = await fetch(server.endpoint + '/', {
      method: 'POST',
      headers: { 'Content-Type': 'application/x-amz-json-1.1' },
      body: '{}',
    });
    const text = await res.text();
    expectEcsError({ status: res.status, json: JSON.parse(text), text, headers: res.headers }, {
      status: 400,
      type: 'UnknownOperationException',
    });
  });

  test('a body over 1 MiB is 413 with an ECS error body', async () => {
    const big = JSON.stringify({ clusterName: 'x'.repeat((1 << 20) + 100) });
    const r = await call(server.endpoint, 'CreateCluster', big, { raw: true });
    expectEcsError(r, { status: 413 });
    // The same without a Content-Length: a chunked body that grows past the limit.
    const chunk = new TextEncoder().encode('x'.repeat(64 << 10));
    let sent = 0;
    const stream = new ReadableStream({
      pull(controller) {
        if (sent === 0) controller.enqueue(new TextEncoder().encode('{"clusterName":"'));
        if (sent++ < 24) controller.enqueue(chunk);
        else controller.close();
      },
    });
    try {
      const res = await fetch(server.endpoint + '/', {
        method: 'POST',
        headers: { 'Content-Type': 'application/x-amz-json-1.1', 'X-Amz-Target': 'AmazonEC2ContainerServiceV20141113.CreateCluster' },
        body: stream,
        duplex: 'half',
      });
      const text = await res.text();
      expectEcsError({ status: res.status, json: JSON.parse(text), text, headers: res.headers }, { status: 413 });
    } catch (e) {
      // The server may close before the client finished sending; that is a refusal too, not a hang.
      assert.match(String(e.cause?.code ?? e.message), /ECONNRESET|EPIPE|UND_ERR_SOCKET|other side closed|fetch failed/);
    }
  });

  test('missing required fields', async () => {
    const cases = [
      ['RunTask', { cluster: 'bad' }],
      ['StartTask', { cluster: 'bad', taskDefinition: 'fine' }],
      ['StopTask', { cluster: 'bad' }],
      ['DescribeTasks', { cluster: 'bad' }],
      ['DescribeContainerInstances', { cluster: 'bad' }],
      ['RegisterTaskDefinition', { containerDefinitions: [{ name: 'main', image: 'busybox', memory: 128 }] }],
      ['RegisterTaskDefinition', { family: 'nocontainers' }],
      ['RegisterTaskDefinition', { family: 'noimage', containerDefinitions: [{ name: 'main', memory: 128 }] }],
      ['DescribeTaskDefinition', {}],
      ['DeregisterTaskDefinition', {}],
      ['RegisterContainerInstance', { cluster: 'bad' }],
      ['SubmitTaskStateChange', { cluster: 'bad', status: 'RUNNING' }],
      ['DeleteCluster', {}],
      ['UpdateContainerInstancesState', { cluster: 'bad', containerInstances: ['x'] }],
      ['PutAttributes', { cluster: 'bad' }],
      ['ListAttributes', { cluster: 'bad' }],
      [
        'RegisterTaskDefinition',
        {
          family: 'nomem',
          containerDefinitions: [
            {
              name: 'main',
              image: 'busybox',
              memory: 128,
              resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { maxComputePercent: 50 } } }],
            },
          ],
        },
      ],
    ];
    for (const [op, body] of cases) {
      const r = await call(server.endpoint, op, body);
      expectEcsError(r, { status: 400 });
      assert.match(r.json.__type, /^(ClientException|InvalidParameterException)$/, `${op} ${JSON.stringify(body)}`);
    }
  });

  test('count 11 (and 0, and -1) is InvalidParameterException', async () => {
    for (const count of [11, 0, -1, 2147483648]) {
      const r = await call(server.endpoint, 'RunTask', { cluster: 'bad', taskDefinition: 'fine', count });
      expectEcsError(r, { status: 400 });
      if (count !== 2147483648) assert.equal(r.json.__type, 'InvalidParameterException');
    }
  });

  test('a 10,000-deep array and a 10,000-deep object', async () => {
    const deepArray = '{"clusters":' + '['.repeat(10000) + ']'.repeat(10000) + '}';
    expectEcsError(await call(server.endpoint, 'DescribeClusters', deepArray, { raw: true }), { status: 400 });
    const deepObject = '{"a":'.repeat(10000) + '1' + '}'.repeat(10000);
    expectEcsError(await call(server.endpoint, 'DescribeClusters', deepObject, { raw: true }), { status: 400 });
    const unclosed = '['.repeat(100000);
    expectEcsError(await call(server.endpoint, 'DescribeClusters', unclosed, { raw: true }), { status: 400 });
  });

  test('a NUL byte (escaped) in a name', async () => {
    const cases = [
      ['CreateCluster', { clusterName: 'a\u0000b' }],
      ['RegisterTaskDefinition', { ...sharedTaskDefinition('fam\u0000ily', 1024), family: 'fam\u0000ily' }],
      [
        'RegisterTaskDefinition',
        {
          family: 'nulcontainer',
          containerDefinitions: [{ name: 'ma\u0000in', image: 'busybox', memory: 128 }],
        },
      ],
      ['RunTask', { cluster: 'bad', taskDefinition: 'fi\u0000ne' }],
      ['RunTask', { cluster: 'b\u0000ad', taskDefinition: 'fine' }],
      ['DescribeTasks', { cluster: 'bad', tasks: ['arn:aws:ecs:us-east-1:000000000000:task/bad/ab\u0000cd'] }],
    ];
    for (const [op, body] of cases) {
      const r = await call(server.endpoint, op, body);
      // DescribeTasks answers unknown ARNs in failures (MISSING), which is a 200; everything else is a 4xx.
      if (op === 'DescribeTasks' && r.status === 200) {
        assert.equal(r.json.failures.length, 1);
        continue;
      }
      expectEcsError(r, { status: 400 });
    }
    const clusters = await ok(server.endpoint, 'ListClusters', {});
    assert.ok(!clusters.clusterArns.some((a) => a.includes('\u0000')), 'no name with a NUL was stored');
  });

  test('limits on lists and strings', async () => {
    const arns = Array.from({ length: 101 }, (_, i) => `t${i}`);
    expectEcsError(await call(server.endpoint, 'DescribeTasks', { cluster: 'bad', tasks: arns }), { status: 400 });
    expectEcsError(await call(server.endpoint, 'DescribeClusters', { clusters: Array(101).fill('bad') }), {
      status: 400,
    });
    expectEcsError(await call(server.endpoint, 'CreateCluster', { clusterName: 'c'.repeat(256) }), { status: 400 });
    expectEcsError(await call(server.endpoint, 'ListTasks', { cluster: 'bad', maxResults: 101 }), { status: 400 });
    expectEcsError(await call(server.endpoint, 'ListTasks', { cluster: 'bad', nextToken: 'forged' }), {
      status: 400,
    });
  });

  test('wrong method and wrong path', async () => {
    const get = await fetch(server.endpoint + '/', { method: 'GET' });
    const getText = await get.text();
    expectEcsError({ status: get.status, json: JSON.parse(getText), text: getText, headers: get.headers }, {
      status: 405,
    });
    const other = await fetch(server.endpoint + '/v1/tasks', {
      method: 'POST',
      headers: { 'X-Amz-Target': TARGET_PREFIX + 'ListClusters' },
      body: '{}',
    });
    const otherText = await other.text();
    expectEcsError({ status: other.status, json: JSON.parse(otherText), text: otherText, headers: other.headers }, {
      status: 404,
    });
  });

  test('garbage and truncated HTTP on a raw socket get a 4xx or a close, never a hang', async () => {
    const garbage = await rawExchange(server.endpoint, 'NOT HTTP AT ALL\r\n\r\n');
    assert.ok(garbage === '' || /^HTTP\/1\.1 4\d\d/.test(garbage), garbage.slice(0, 200));
    const lying = await rawExchange(
      server.endpoint,
      'POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: ' + TARGET_PREFIX + 'ListClusters\r\nContent-Length: 999999999\r\n\r\n{}',
    );
    assert.ok(lying === '' || /^HTTP\/1\.1 4\d\d/.test(lying), lying.slice(0, 200));
    const hugeHeader = await rawExchange(server.endpoint, 'POST / HTTP/1.1\r\nHost: x\r\nX-Big: ' + 'a'.repeat(200000) + '\r\n\r\n');
    assert.ok(hugeHeader === '' || /^HTTP\/1\.1 4\d\d/.test(hugeHeader), hugeHeader.slice(0, 200));
  });

  test('none of it stored anything, and the server still answers a healthy DescribeClusters', async () => {
    assert.equal(server.child.exitCode, null, 'the server is still running');
    const r = await call(server.endpoint, 'DescribeClusters', { clusters: ['bad'] });
    assert.equal(r.status, 200);
    assert.equal(r.json.clusters[0].clusterName, 'bad');
    assert.equal(r.json.clusters[0].status, 'ACTIVE');
    assert.deepEqual(r.json.failures, []);
    const tasks = await ok(server.endpoint, 'ListTasks', { cluster: 'bad' });
    assert.deepEqual(tasks.taskArns, []);
    const families = await ok(server.endpoint, 'ListTaskDefinitionFamilies', {});
    assert.deepEqual(families.families, ['fine']);
    const health = await fetch(server.endpoint + '/healthz');
    assert.equal(health.status, 200);
    await health.text();
  });
});
