// cli: the gpupack command line as a user meets it: usage errors, server flags, the first lines it prints.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { PLAY_AGENT, call, gpuDevice, gpupackBin, ok, registerInstance, removeTempDir, sharedTaskDefinition, startServer, startUp, tempDir } from './harness.mjs';

// run runs the binary to its end (bounded) and resolves {code, signal, stdout, stderr}.
function run(args, { timeoutMs = 20000 } = {}) {
  return new Promise((resolve) => {
    const child = spawn(gpupackBin(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

let dir;
before(() => {
  dir = tempDir('gpupack-cli-');
});
after(() => removeTempDir(dir));

describe('--default-strategy', () => {
  test('a strategy the registry does not know is a usage error that says why', async () => {
    const r = await run(['server', '--listen', '127.0.0.1:0', '--db', path.join(dir, 'bogus.db'), '--default-strategy', 'pack:gpuMemory']);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /--default-strategy: Invalid placement strategy type 'pack'; valid types are binpack, spread and random/);
    const f = await run(['server', '--listen', '127.0.0.1:0', '--db', path.join(dir, 'field.db'), '--default-strategy', 'binpack:disk']);
    assert.equal(f.code, 2, f.stderr);
    assert.match(f.stderr, /binpack requires 'field'/);
  });

  test('spread:instanceId spreads shared tasks that name no strategy', async () => {
    const server = await startServer({
      db: path.join(dir, 'spread.db'),
      extraArgs: [...PLAY_AGENT, '--default-strategy', 'spread:instanceId'],
    });
    try {
      const e = server.endpoint;
      await ok(e, 'CreateCluster', {});
      for (const i of [0, 1]) {
        await ok(e, 'RegisterContainerInstance', {
          totalResources: [
            { name: 'CPU', type: 'INTEGER', integerValue: 8192 },
            { name: 'MEMORY', type: 'INTEGER', integerValue: 32768 },
          ],
          platformDevices: [gpuDevice(`GPU-cli-${i}`)],
        });
      }
      await ok(e, 'RegisterTaskDefinition', sharedTaskDefinition('small', 1000));
      const r = await ok(e, 'RunTask', { taskDefinition: 'small', count: 4 });
      const per = new Map();
      for (const t of r.tasks) per.set(t.containerInstanceArn, (per.get(t.containerInstanceArn) ?? 0) + 1);
      assert.deepEqual([...per.values()], [2, 2]);
    } finally {
      await server.stop();
    }
  });
});

// upgradeChannel sends the agent channel's upgrade request for `instanceArn` on a raw socket and resolves
// {status, head, socket} once the answer's head is read; the socket stays open (an upgraded one holds its slot).
function upgradeChannel(endpoint, instanceArn) {
  const { hostname, port } = new URL(endpoint);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname);
    let head = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer to the upgrade within 10 s: ${head}`));
    }, 10000);
    socket.on('connect', () => socket.write(
      `GET /agent/v1/channel?containerInstance=${encodeURIComponent(instanceArn)} HTTP/1.1\r\n` +
      `Host: ${hostname}:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n'));
    socket.on('data', (d) => {
      head += d.toString('latin1');
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      clearTimeout(timer);
      // A refusal's body (its length is in the head) follows the head.
      const length = Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? 0);
      if (head.length - end - 4 < length) return;
      resolve({ status: Number(head.split(' ')[1]), head, socket });
    });
    socket.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

describe('agent channel bounds', () => {
  test('a bound of 0, negative, absurd or not a number is a usage error naming the flag and its range', async () => {
    const db = path.join(dir, 'bounds-bad.db');
    for (const [flag, value, range] of [
      ['--max-agent-channels', '0', '1..100000'], ['--max-agent-channels', '-5', '1..100000'],
      ['--max-agent-channels', '100001', '1..100000'], ['--agent-send-queue-mib', '0', '1..1024'],
      ['--agent-send-queue-mib', '-1', '1..1024'], ['--agent-send-queue-mib', '1048576', '1..1024'],
      ['--agent-hello-mib', '0', '1..1024'], ['--agent-hello-mib', '4096', '1..1024']]) {
      const r = await run(['server', '--listen', '127.0.0.1:0', '--db', db, flag, value]);
      assert.equal(r.code, 2, `${flag} ${value}: ${r.stderr}`);
      assert.equal(r.stdout, '', `${flag} ${value} printed a banner`);
      assert.match(r.stderr, new RegExp(`${flag} must be ${range} \\(.*\\), got ${value}`), `${flag} ${value}`);
    }
    const r = await run(['server', '--listen', '127.0.0.1:0', '--db', db, '--agent-hello-mib', 'lots']);
    assert.notEqual(r.code, 0, r.stderr);
    assert.match(r.stderr, /--agent-hello-mib/);
    assert.ok(!fs.existsSync(db), 'a refused start left a database behind');
  });

  // banner starts a server, reads its banner up to the agents line and stops it.
  async function banner(db, flags) {
    const child = spawn(gpupackBin(), ['server', '--listen', '127.0.0.1:0', '--db', db, ...flags], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    const exited = new Promise((resolve) => child.on('exit', resolve));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20000);
    await new Promise((resolve) => {
      child.stdout.setEncoding('utf8').on('data', (d) => {
        stdout += d;
        if (/agents .*\n/.test(stdout)) resolve();
      });
      exited.then(resolve);
    });
    child.kill('SIGTERM');
    await exited;
    clearTimeout(timer);
    return stdout;
  }

  test('the bounds are in the banner, defaults unchanged; --max-agent-channels 1 refuses a second channel with 503', async () => {
    assert.match(await banner(path.join(dir, 'bounds-default.db'), []),
      /agents {4}at most 1024 channel connections, 16 MiB send queue each, hello up to 64 MiB\n/);
    const flags = ['--max-agent-channels', '1', '--agent-send-queue-mib', '2', '--agent-hello-mib', '8'];
    assert.match(await banner(path.join(dir, 'bounds-banner.db'), flags),
      /agents {4}at most 1 channel connections, 2 MiB send queue each, hello up to 8 MiB\n/);
    const server = await startServer({ db: path.join(dir, 'bounds.db'), extraArgs: flags });
    const sockets = [];
    try {
      const e = server.endpoint;
      await ok(e, 'CreateCluster', {});
      const arn = await registerInstance(e, 'default', [['GPU-bounds-0', 22587]]);
      const first = await upgradeChannel(e, arn);
      sockets.push(first.socket);
      assert.equal(first.status, 101, first.head);
      // With the default (1,024) this one would be upgraded too.
      const second = await upgradeChannel(e, arn);
      sockets.push(second.socket);
      assert.equal(second.status, 503, second.head);
      assert.match(second.head, /too many agent channel connections \(limit 1\)/);
      const metrics = await (await fetch(e + '/metrics')).text();
      assert.match(metrics, /^gpupack_http_websocket_refusals_total 1$/m);
    } finally {
      for (const s of sockets) s.destroy();
      await server.stop();
    }
  });
});

describe('first contact', () => {
  test('an unknown command is named, with the commands there are', async () => {
    const r = await run(['bogus']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^gpupack: unknown command 'bogus' \(the commands are server, agent, up, plan[a-z, -]*; see gpupack --help\)\n$/);
  });

  test('a busy port is one error line and leaves no database behind', async () => {
    const first = await startServer({ db: path.join(dir, 'first.db') });
    try {
      const port = new URL(first.endpoint).port;
      const db = path.join(dir, 'second.db');
      const r = await run(['server', '--listen', `127.0.0.1:${port}`, '--db', db]);
      assert.equal(r.code, 1, r.stderr);
      const lines = r.stderr.trimEnd().split('\n');
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0], new RegExp(`^gpupack: cannot listen on 127\\.0\\.0\\.1:${port}: bind: Address already in use`));
      assert.equal((lines[0].match(/cannot listen/g) ?? []).length, 1, lines[0]);
      for (const suffix of ['', '-wal', '-shm', '-journal', '.lock']) assert.ok(!fs.existsSync(db + suffix), `${db}${suffix} was left behind`);
    } finally {
      await first.stop();
    }
  });

  test('two servers on one --db: the second refuses to start, names the first, and the first keeps serving', async () => {
    const db = path.join(dir, 'shared.db');
    const first = await startServer({ db, extraArgs: PLAY_AGENT });
    try {
      await ok(first.endpoint, 'CreateCluster', {});
      const r = await run(['server', '--listen', '127.0.0.1:0', '--db', db]);
      assert.equal(r.code, 1, r.stderr);
      assert.equal(r.stdout, '', 'the second server printed a banner');
      assert.match(r.stderr, new RegExp(`in use by another gpupack server \\(pid ${first.child.pid}\\)`));
      assert.match(r.stderr, /one database serves one server/);
      assert.ok(fs.existsSync(db), 'the refused server removed the database');
      // The first one still writes and reads.
      await ok(first.endpoint, 'RegisterTaskDefinition', sharedTaskDefinition('after', 1000));
      const d = await ok(first.endpoint, 'DescribeClusters', {});
      assert.equal(d.clusters[0].status, 'ACTIVE');
    } finally {
      await first.stop();
    }
    // Once the first has stopped, the database is free again.
    const again = await startServer({ db });
    await again.stop();
  });

  test('gpupack backup copies the database while the server serves RunTask, and the copy loads', async () => {
    const db = path.join(dir, 'live.db');
    const copy = path.join(dir, 'live-copy.db');
    const server = await startServer({ db, extraArgs: PLAY_AGENT });
    let writing = true;
    const placed = [];
    let writer;
    try {
      const e = server.endpoint;
      await ok(e, 'CreateCluster', {});
      await registerInstance(e, 'default', [['GPU-backup-0', 131072]]);  // 400 tasks of 256 MiB fit
      await ok(e, 'RegisterTaskDefinition', sharedTaskDefinition('tiny', 256));
      writer = (async () => {
        for (let i = 0; writing && i < 400; ++i) {
          const r = await ok(e, 'RunTask', { taskDefinition: 'tiny' });
          for (const t of r.tasks) placed.push(t.taskArn);
        }
      })();
      for (let i = 0; i < 500 && placed.length < 5; ++i) await new Promise((r) => setTimeout(r, 10));
      const before = placed.length;
      assert.ok(before >= 5, 'the server placed nothing');
      const r = await run(['backup', '--db', db, '--to', copy]);
      writing = false;
      await writer;
      assert.equal(r.code, 0, r.stderr);
      const m = /^backed up .* \((\d+) tasks; the copy opens and loads\)\n$/.exec(r.stdout);
      assert.ok(m, r.stdout);
      assert.ok(Number(m[1]) >= before && Number(m[1]) <= placed.length, `${m[1]} tasks copied, ${before} placed before, ${placed.length} after`);
      const again = await run(['backup', '--db', db, '--to', copy]);
      assert.equal(again.code, 1);
      assert.match(again.stderr, /exists; choose a new file/);
    } finally {
      writing = false;
      await writer;
      await server.stop();
    }
    // A server on the copy describes every task acknowledged before the backup began.
    const restored = await startServer({ db: copy });
    try {
      const d = await ok(restored.endpoint, 'DescribeTasks', { tasks: placed.slice(0, Math.min(5, placed.length)) });
      assert.equal(d.tasks.length, Math.min(5, placed.length));
    } finally {
      await restored.stop();
    }
  });

  test('requests are logged at debug, not info; gpupack up starts without an error-looking line', async () => {
    const server = await startServer({ db: path.join(dir, 'quiet.db'), logLevel: 'info' });
    try {
      await ok(server.endpoint, 'CreateCluster', {});
      for (let i = 0; i < 3; ++i) await ok(server.endpoint, 'DescribeClusters', {});
    } finally {
      await server.stop();
    }
    assert.doesNotMatch(server.stderr, /op=/, server.stderr);
    const up = await startUp(path.join(dir, 'up'), [], { logLevel: 'info' });
    await up.stop();
    assert.doesNotMatch(up.banner(), /status=4|Exception/, up.banner());
  });

  test('DescribeClusters include STATISTICS answers ECS statistics', async () => {
    const server = await startServer({ db: path.join(dir, 'stats.db'), extraArgs: PLAY_AGENT });
    try {
      const e = server.endpoint;
      await ok(e, 'CreateCluster', {});
      await ok(e, 'RegisterContainerInstance', {
        totalResources: [
          { name: 'CPU', type: 'INTEGER', integerValue: 8192 },
          { name: 'MEMORY', type: 'INTEGER', integerValue: 32768 },
        ],
        platformDevices: [gpuDevice('GPU-stats-0')],
      });
      await ok(e, 'RegisterTaskDefinition', sharedTaskDefinition('stat', 1000));
      await ok(e, 'RunTask', { taskDefinition: 'stat', count: 2 });
      const r = await ok(e, 'DescribeClusters', { clusters: ['default'], include: ['STATISTICS'] });
      assert.equal(r.clusters.length, 1);
      const stats = Object.fromEntries(r.clusters[0].statistics.map((s) => [s.name, s.value]));
      assert.equal(stats.pendingEC2TasksCount, '2');
      assert.equal(stats.runningEC2TasksCount, '0');
      assert.equal(stats.activeEC2ServiceCount, '0');
      const plain = await ok(e, 'DescribeClusters', { clusters: ['default'] });
      assert.deepEqual(plain.clusters[0].statistics, []);
      const bad = await call(e, 'DescribeClusters', { include: ['STATS'] });
      assert.equal(bad.status, 400);
      assert.equal(bad.json.__type, 'InvalidParameterException');
    } finally {
      await server.stop();
    }
  });
});

describe('--server-name', () => {
  test('--server-name takes HOST[:PORT] only', async () => {
    const r = await run(['server', '--listen', '127.0.0.1:0', '--db', path.join(dir, 'names.db'), '--server-name', 'http://gp1:8080']);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /--server-name 'http:\/\/gp1:8080' is not HOST\[:PORT\]/);
  });
});

describe('gpupack aws-model on a hostile model', () => {
  // model: a minimal ECS model with `metadata.apiVersion` = version and `shapes` as given (JSON text).
  const model = (version, shapes = '{}') => `{"metadata":{"apiVersion":${JSON.stringify(version)},"endpointPrefix":"ecs"},"shapes":${shapes}}`;

  test('a path for an apiVersion, shapes of the wrong type and deep nesting are refused, and nothing is written outside --models-dir', async () => {
    const base = path.join(dir, 'aws-model');
    const models = path.join(base, 'models');
    fs.mkdirSync(models, { recursive: true });
    const from = path.join(base, 'from.json');
    const cases = [
      { text: model('../../escaped'), message: /metadata\.apiVersion '\.\.\/\.\.\/escaped' is not a date YYYY-MM-DD/ },
      { text: model(path.join(base, 'absolute')), message: /is not a date YYYY-MM-DD/ },
      { text: model('2014-11-13', '[]'), message: /it has no "shapes" object/ },
      { text: model('2014-11-13', `{"X":${'['.repeat(100000)}${']'.repeat(100000)}}`), message: /nests deeper than 64 levels/ },
    ];
    for (const c of cases) {
      fs.writeFileSync(from, c.text);
      const r = await run(['aws-model', '--from', from, '--models-dir', models]);
      assert.equal(r.signal, null, r.stderr);
      assert.equal(r.code, 1, r.stderr);
      assert.match(r.stderr, /^gpupack: aws-model: .*from\.json is not an ECS service model that can be patched: /);
      assert.match(r.stderr, c.message);
    }
    assert.deepEqual(fs.readdirSync(models), []);
    assert.deepEqual(fs.readdirSync(base).sort(), ['from.json', 'models']);

    // A plain model installs under the models directory; a symlink at the target is replaced, its target untouched.
    const victim = path.join(base, 'victim');
    fs.writeFileSync(victim, 'precious');
    fs.mkdirSync(path.join(models, 'ecs', '2014-11-13'), { recursive: true });
    const target = path.join(models, 'ecs', '2014-11-13', 'service-2.json');
    fs.symlinkSync(victim, target);
    fs.writeFileSync(from, model('2014-11-13'));
    const good = await run(['aws-model', '--from', from, '--models-dir', models]);
    assert.equal(good.code, 0, good.stderr);
    assert.equal(fs.lstatSync(target).isSymbolicLink(), false);
    assert.ok(JSON.parse(fs.readFileSync(target, 'utf8')).shapes.SharingStrategy);
    assert.equal(fs.readFileSync(victim, 'utf8'), 'precious');
  });
});
