// cli: the gpupack command line as a user meets it: usage errors, server flags, the first lines it prints.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { PLAY_AGENT, gpuDevice, gpupackBin, ok, removeTempDir, sharedTaskDefinition, startServer, tempDir } from './harness.mjs';

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
