// The day-two runbook (docs/operations.md "Day two") run as written, with the real binary, a real agent (process
// runtime, fake GPUs) whose tasks keep running throughout, and a private PostgreSQL (ha_harness.mjs; skipped
// without PostgreSQL's binaries):
//   - SQLite -> PostgreSQL: stop the server, `gpupack backup`, `gpupack migrate --from sqlite:DB --to URI`, start
//     the server on the URI at the same address: the agent reconnects, its tasks are the same tasks, still
//     RUNNING (never restarted), the service and its deployment are there; a second migrate is refused.
//   - backup of PostgreSQL while it serves (`gpupack backup --db URI --to FILE`), and restore: `gpupack migrate
//     --from FILE --to URI --force` over a database that changed since, then the server serves the backup's state.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { gpupackBin, launch, ok, removeTempDir, sharedTaskDefinition, tempDir } from './harness.mjs';
import { freePort, NO_POSTGRES, postgresBinDir, startAgent, startPostgres, waitFor } from './ha_harness.mjs';

const skip = postgresBinDir() ? false : NO_POSTGRES;
const CLUSTER = 'prod';

// run: the gpupack binary with `args`; resolves {code, stdout, stderr}.
function run(args, { timeoutMs = 30000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(gpupackBin(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('day two', { skip }, () => {
  let dir;
  let pg;
  before(async () => {
    dir = tempDir('gpupack-day-two-');
    pg = await startPostgres();
  });
  after(() => {
    pg?.close();
    removeTempDir(dir);
  });

  test('SQLite to PostgreSQL with gpupack migrate while an agent keeps its tasks running; backup and restore', async () => {
    const sqlite = path.join(dir, 'gpupack.db');
    const backup = path.join(dir, 'before-migration.db');
    const uri = pg.createDatabase('gpupack');
    const port = await freePort();
    const endpoint = `http://127.0.0.1:${port}`;
    // One address for both servers: the agent is told it once (--server), as a host's unit would be.
    const serve = (db) => launch(['server', '--listen', `127.0.0.1:${port}`, '--db', db, '--log-level', 'warn'], {});
    let server = await serve(sqlite);
    const agent = startAgent({ servers: [endpoint], cluster: CLUSTER, dir, name: 'gpu-host-1', gpus: 'fake:2x22587' });
    const wait = (what, f, ms = 30000) => waitFor(what, f, ms, agent.log);
    try {
      await ok(endpoint, 'CreateCluster', { clusterName: CLUSTER });
      const instances = async () => (await ok(endpoint, 'ListContainerInstances', { cluster: CLUSTER })).containerInstanceArns;
      const connected = async () => {
        const arns = await instances();
        if (arns.length !== 1) return false;
        const d = await ok(endpoint, 'DescribeContainerInstances', { cluster: CLUSTER, containerInstances: arns });
        return d.containerInstances[0].agentConnected;
      };
      await wait('the agent connected to the SQLite server', connected);
      const td = sharedTaskDefinition('infer', 2048);
      td.containerDefinitions[0].entryPoint = ['/bin/sh', '-c'];
      td.containerDefinitions[0].command = ['exec sleep 600'];
      await ok(endpoint, 'RegisterTaskDefinition', td);
      const ran = await ok(endpoint, 'RunTask', { cluster: CLUSTER, taskDefinition: 'infer', count: 2 });
      assert.equal(ran.tasks.length, 2, JSON.stringify(ran));
      await ok(endpoint, 'CreateService', { cluster: CLUSTER, serviceName: 'web', taskDefinition: 'infer', desiredCount: 1 });
      const arns = ran.tasks.map((t) => t.taskArn);
      const describe = async () => (await ok(endpoint, 'DescribeTasks', { cluster: CLUSTER, tasks: arns })).tasks;
      await wait('both tasks RUNNING', async () => (await describe()).every((t) => t.lastStatus === 'RUNNING'));
      const startedAt = (await describe()).map((t) => t.startedAt);

      // The runbook: stop the server (the agent and its tasks go on), back up, migrate, start on PostgreSQL.
      await server.stop();
      server = null;
      const b = await run(['backup', '--db', sqlite, '--to', backup]);
      assert.equal(b.code, 0, b.stderr);
      const m = await run(['migrate', '--from', `sqlite:${sqlite}`, '--to', uri]);
      assert.equal(m.code, 0, m.stderr);
      assert.match(m.stdout, /^migrated .*gpupack\.db to postgresql:\/\/.*: \d+ clusters?, 1 task definition, 1 container instance, [34] tasks, \d+ client tokens?, 1 service\n$/);
      const again = await run(['migrate', '--from', sqlite, '--to', uri]);
      assert.equal(again.code, 1);
      assert.match(again.stderr, /already holds .*--force/);

      server = await serve(uri);
      await wait('the agent reconnected to the PostgreSQL server', connected);
      const after = await describe();
      assert.deepEqual(after.map((t) => t.lastStatus), ['RUNNING', 'RUNNING']);
      assert.deepEqual(after.map((t) => t.startedAt), startedAt, 'a task was restarted across the migration');
      const svc = (await ok(endpoint, 'DescribeServices', { cluster: CLUSTER, services: ['web'] })).services[0];
      assert.equal(svc.desiredCount, 1);
      assert.equal(svc.deployments.length, 1);

      // Backup of PostgreSQL while it serves: a SQLite file a server can load.
      const pgCopy = path.join(dir, 'pg-copy.db');
      const pb = await run(['backup', '--db', uri, '--to', pgCopy]);
      assert.equal(pb.code, 0, pb.stderr);
      assert.match(pb.stdout, /^backed up postgresql:\/\/.* to .*pg-copy\.db \(\d+ clusters?, .*1 service; the copy loads\)\n$/);

      // Something changes after the backup; restoring it brings the state of the backup back.
      await ok(endpoint, 'RegisterTaskDefinition', sharedTaskDefinition('later', 1024));
      await server.stop();
      server = null;
      const refused = await run(['migrate', '--from', pgCopy, '--to', uri]);
      assert.equal(refused.code, 1);
      const r = await run(['migrate', '--from', pgCopy, '--to', uri, '--force']);
      assert.equal(r.code, 0, r.stderr);
      server = await serve(uri);
      await wait('the agent reconnected after the restore', connected);
      const families = (await ok(endpoint, 'ListTaskDefinitionFamilies', {})).families;
      assert.deepEqual(families, ['infer']);
      assert.deepEqual((await describe()).map((t) => t.lastStatus), ['RUNNING', 'RUNNING']);
      // Done: the tasks go (the process runtime's tasks would outlive the agent).
      await ok(endpoint, 'UpdateService', { cluster: CLUSTER, service: 'web', desiredCount: 0 });
      for (const t of (await ok(endpoint, 'ListTasks', { cluster: CLUSTER })).taskArns)
        await ok(endpoint, 'StopTask', { cluster: CLUSTER, task: t });
      await wait('every task STOPPED', async () => (await ok(endpoint, 'ListTasks', { cluster: CLUSTER })).taskArns.length === 0);
    } finally {
      await agent.stop();
      await server?.stop();
    }
  });
});
