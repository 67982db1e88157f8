// The day-two runbook (docs/operations.md "Day two") run as written, with the real binary and a real agent (process
// runtime, fake GPUs) whose tasks keep running throughout:
//   - SQLite -> PostgreSQL (on a private PostgreSQL, ha_harness.mjs; skipped without PostgreSQL's binaries): stop
//     the server, `gpupack backup`, `gpupack migrate --from sqlite:DB --to URI`, start the server on the URI at the
//     same address: the agent reconnects, its tasks are the same tasks, still RUNNING (never restarted), the
//     service and its deployment are there; a second migrate is refused.
//   - backup of PostgreSQL while it serves (`gpupack backup --db URI --to FILE`), and restore: `gpupack migrate
//     --from FILE --to URI --force` over a database that changed since, then the server serves the backup's state.
//   - rotating keys (SQLite): the section's sh blocks, taken from docs/operations.md and run by bash against this
//     test's copies of /etc/gpupack/credentials and /etc/gpupack/agent-credentials, with `sudo`, `systemctl
//     restart` and `ssh` played by the test (see runDocBlock). An admin key is added (both work after the restart)
//     and its predecessor removed (refused, UnrecognizedClientException); an agent's secret changes on both sides
//     (the same container instance, its task still RUNNING, a new task placed there); a leaked key is removed.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import {
  gpupackBin, launch, ok, removeTempDir, sharedTaskDefinition, signedCall, signedOk, tempDir,
} from './harness.mjs';
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
      // Done: the tasks go (the process runtime's tasks would outlive the agent). ListTasks lists the tasks whose
      // desired status is RUNNING, so it is empty once StopTask is recorded, before the agent has stopped them:
      // wait for each one's lastStatus instead.
      const every = (await ok(endpoint, 'ListTasks', { cluster: CLUSTER })).taskArns;
      await ok(endpoint, 'UpdateService', { cluster: CLUSTER, service: 'web', desiredCount: 0 });
      for (const t of every) await ok(endpoint, 'StopTask', { cluster: CLUSTER, task: t });
      await wait('every task STOPPED', async () =>
        (await ok(endpoint, 'DescribeTasks', { cluster: CLUSTER, tasks: every })).tasks.every((t) => t.lastStatus === 'STOPPED'));
    } finally {
      await agent.stop();
      await server?.stop();
    }
  });
});

// ---- rotating keys ------------------------------------------------------------------------------------------------

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const ETC_CREDENTIALS = '/etc/gpupack/credentials';
const ETC_AGENT_CREDENTIALS = '/etc/gpupack/agent-credentials';
const HOST = 'gpu-host-7';  // the doc's host: the agent's --name, and whom its `ssh` goes to

// docBlocks: the ```sh blocks of the docs/operations.md section that starts with `heading`, up to the next heading
// (a line of one to three #s outside a code block: a shell comment inside one is not a heading).
function docBlocks(heading) {
  const lines = fs.readFileSync(path.join(repoRoot, 'docs', 'operations.md'), 'utf8').split('\n');
  const start = lines.indexOf(heading);
  assert.notEqual(start, -1, `docs/operations.md has no section "${heading}"`);
  const blocks = [];
  let block = null;
  for (const line of lines.slice(start + 1)) {
    if (block === null && /^#{1,3} /.test(line)) break;
    if (block === null && line === '```sh') block = [];
    else if (block !== null && line === '```') {
      blocks.push(`${block.join('\n')}\n`);
      block = null;
    } else if (block !== null) block.push(line);
  }
  return blocks;
}

// substitute: `block` with every [from, to] of `pairs` replaced; each `from` must be there, so a block that drifted
// from what the test plays fails here and names what is missing.
function substitute(block, pairs) {
  let out = block;
  for (const [from, to] of pairs) {
    assert.ok(out.includes(from), `the doc's block no longer holds ${JSON.stringify(from)}:\n${block}`);
    out = out.replaceAll(from, to);
  }
  return out;
}

// SHIMS: what bash runs before a block. `sudo` runs its command (the test is the files' owner); `systemctl` prints
// "@@systemctl HOST ARGS" (HOST: `server`, or the host an `ssh` went to) and waits on stdin for the test to do it
// and answer `done`; `ssh HOST CMD...` runs CMD in a shell, as sshd would on HOST, with HOST noted for systemctl.
const SHIMS = [
  'set -e -o pipefail',
  'sudo() { "$@"; }',
  'systemctl() { printf \'@@systemctl %s %s\\n\' "${DOC_HOST:-server}" "$*"; local answer; read -r answer; [ "$answer" = done ]; }',
  'ssh() { local host=$1; shift; DOC_HOST=$host bash -e -o pipefail -c "$*"; }',
  'export -f sudo systemctl',
].join('\n');

// runDocBlock runs `script` (a doc block after substitute) in bash with SHIMS; each `systemctl` it reaches is handed
// to `onSystemctl(host, args)` (awaited; a throw fails the block and rejects with that error). Resolves
// {stdout, stderr, calls} once bash exits 0, else rejects with its output.
function runDocBlock(script, onSystemctl, { timeoutMs = 120000 } = {}) {
  return new Promise((resolve, reject) => {
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('AWS_')));
    const child = spawn('bash', ['-c', `${SHIMS}\n${script}`], { stdio: ['pipe', 'pipe', 'pipe'], env });
    let stdout = '';
    let stderr = '';
    let pending = '';
    let failure;
    const calls = [];
    let chain = Promise.resolve();
    child.stdin.on('error', () => {});  // bash gone before an answer: its exit says why
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d) => (stderr += d));
    child.stdout.on('data', (d) => {
      pending += d;
      for (let nl = pending.indexOf('\n'); nl !== -1; nl = pending.indexOf('\n')) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        const m = /^@@systemctl (\S+) (.*)$/.exec(line);
        if (!m) {
          stdout += `${line}\n`;
          continue;
        }
        calls.push(`${m[1]}: systemctl ${m[2]}`);
        chain = chain.then(async () => {
          if (!failure) {
            try {
              await onSystemctl(m[1], m[2]);
            } catch (e) {
              failure = e;
            }
          }
          child.stdin.write(failure ? 'fail\n' : 'done\n');
        });
      }
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      chain.then(() => {
        if (failure) reject(failure);
        else if (code !== 0) reject(new Error(`the doc's block exited with ${code ?? signal}:\n${script}\nstdout:\n${stdout}\nstderr:\n${stderr}`));
        else resolve({ stdout, stderr, calls });
      });
    });
  });
}

// profiles: a credentials file's profiles, {name: {key: value}} (comments and blank lines left out).
function profiles(file) {
  const out = {};
  let current;
  for (const raw of fs.readFileSync(file, 'utf8').split('\n')) {
    const line = raw.trim();
    const header = /^\[([^\]]+)\]$/.exec(line);
    if (header) current = out[header[1]] = {};
    const kv = /^([A-Za-z_]+)\s*=\s*(.*)$/.exec(line);
    if (kv && current) current[kv[1]] = kv[2];
  }
  return out;
}
const keyOf = (profile) => ({ accessKeyId: profile.aws_access_key_id, secretAccessKey: profile.aws_secret_access_key });
const without = (all, name) => Object.fromEntries(Object.entries(all).filter(([k]) => k !== name));
const randomSecret = () => crypto.randomBytes(30).toString('base64');

// refusedAs: an answer refused as ECS refuses it: 400, x-amzn-ErrorType, a JSON body of __type and message only.
function refusedAs(r, type, message) {
  assert.equal(r.status, 400, r.text);
  assert.equal(r.headers.get('x-amzn-errortype'), type, r.text);
  assert.deepEqual(Object.keys(r.json ?? {}).sort(), ['__type', 'message'], r.text);
  assert.equal(r.json.__type, type);
  assert.match(r.json.message, message);
}

describe('rotating keys', () => {
  let dir;
  before(() => {
    dir = tempDir('gpupack-rotate-');
  });
  after(() => removeTempDir(dir));

  test('admin, agent and leaked keys rotated with the commands of docs/operations.md "Rotating keys"', { timeout: 120000 }, async () => {
    const [add, remove, agentRotation, ...more] = docBlocks('### Rotating keys');
    assert.equal(more.length, 0, 'the section has three sh blocks: add a key, remove a profile, an agent\'s secret');
    assert.match(add, /tee -a \/etc\/gpupack\/credentials/);
    assert.match(remove, /sed -i '\/\^\\\[ci-2026-06\\\]\$\//);
    assert.match(agentRotation, /agent-credentials/);

    // The server's file as an operator keeps it: the CI key to retire, a reader key (to leak later), the host's
    // agent key from `gpupack keys issue-agent`, and a neighbour whose key id starts with the host's.
    const serverCreds = path.join(dir, 'credentials');
    const agentCreds = path.join(dir, 'agent-credentials');
    fs.writeFileSync(serverCreds, `# people and CI
[ci-2026-06]
aws_access_key_id = AKIDCI202606OLD
aws_secret_access_key = ${randomSecret()}

[dashboards]
aws_access_key_id = AKIDDASHBOARDS01
aws_secret_access_key = ${randomSecret()}
gpupack_role = reader
`, { mode: 0o600 });
    fs.chmodSync(serverCreds, 0o600);
    const issued = await run(['keys', 'issue-agent', '--host', HOST, '--credentials', serverCreds, '--out', agentCreds]);
    assert.equal(issued.code, 0, issued.stderr);
    const hostKey = keyOf(profiles(agentCreds).default);
    assert.deepEqual(keyOf(profiles(serverCreds)[`agent-${HOST}`]), hostKey);
    fs.appendFileSync(serverCreds, `\n[agent-${HOST}0]\naws_access_key_id = ${hostKey.accessKeyId}0\n` +
      `aws_secret_access_key = ${randomSecret()}\ngpupack_role = agent\ngpupack_host = ${HOST}0\n`);
    const initial = profiles(serverCreds);
    const oldAdmin = keyOf(initial['ci-2026-06']);
    const reader = keyOf(initial.dashboards);

    const port = await freePort();
    const endpoint = `http://127.0.0.1:${port}`;
    const db = path.join(dir, 'gpupack.db');
    const serve = () => launch(['server', '--listen', `127.0.0.1:${port}`, '--db', db, '--credentials', serverCreds,
      '--log-level', 'warn'], { what: 'gpupack server' });
    const agentOptions = { servers: [endpoint], cluster: CLUSTER, dir, name: HOST, gpus: 'fake:2x22587',
      extraArgs: ['--credentials', agentCreds] };
    let server = await serve();
    let agent = startAgent(agentOptions);
    let admin = oldAdmin;
    const wait = (what, f, ms = 30000) => waitFor(what, f, ms, () => agent.log());
    const restartServer = async () => {
      await server.stop();
      server = null;
      server = await serve();
    };
    let agentStart = 0;  // where the running agent's part of the (appended) log starts
    const restartAgent = async () => {
      await agent.stop();
      agentStart = agent.log().length;
      agent = startAgent(agentOptions);
    };
    const serverOnly = async (host, args) => {
      assert.equal(`${host}: ${args}`, 'server: restart gpupack-server');
      await restartServer();
    };
    const instance = async () => {
      const arns = (await signedOk(endpoint, 'ListContainerInstances', { cluster: CLUSTER }, admin)).containerInstanceArns;
      if (arns.length !== 1) return null;
      return (await signedOk(endpoint, 'DescribeContainerInstances', { cluster: CLUSTER, containerInstances: arns }, admin))
        .containerInstances[0];
    };
    // connectedSince: the instance once the server reads it connected on a channel the agent opened after `mark`
    // (a length of its log): after a server's restart its agent reads connected for a grace before its hello.
    const connectedSince = (mark, what) => wait(what, async () => {
      if (!agent.log().slice(mark).includes('agent: channel open')) return false;
      const ci = await instance();
      return ci?.agentConnected ? ci : false;
    });
    const task = async (arn) => (await signedOk(endpoint, 'DescribeTasks', { cluster: CLUSTER, tasks: [arn] }, admin)).tasks[0];
    const runTask = async () => {
      const ran = await signedOk(endpoint, 'RunTask', { cluster: CLUSTER, taskDefinition: 'infer' }, admin);
      assert.equal(ran.tasks.length, 1, JSON.stringify(ran));
      const arn = ran.tasks[0].taskArn;
      return wait(`task ${arn} RUNNING`, async () => {
        const t = await task(arn);
        return t.lastStatus === 'RUNNING' ? t : false;
      });
    };
    const started = [];
    // stopTasks: StopTask for every task the test started, then a bounded wait until the agent reports each STOPPED.
    const stopTasks = async () => {
      for (const arn of started) await signedOk(endpoint, 'StopTask', { cluster: CLUSTER, task: arn }, admin);
      await wait('the tasks STOPPED', async () => {
        for (const arn of started) if ((await task(arn)).lastStatus !== 'STOPPED') return false;
        return true;
      });
      started.length = 0;
    };
    try {
      const first = await connectedSince(0, 'the agent registered and connected with its key');
      const instanceArn = first.containerInstanceArn;
      const td = sharedTaskDefinition('infer', 2048);
      td.containerDefinitions[0].entryPoint = ['/bin/sh', '-c'];
      td.containerDefinitions[0].command = ['exec sleep 600'];
      await signedOk(endpoint, 'RegisterTaskDefinition', td, admin);
      const before = await runTask();
      started.push(before.taskArn);
      assert.equal(before.containerInstanceArn, instanceArn);

      // (a) People and CI: a new profile, a restart, and both keys work.
      let mark = agent.log().length;
      const added = await runDocBlock(substitute(add, [[ETC_CREDENTIALS, serverCreds]]), serverOnly);
      assert.deepEqual(added.calls, ['server: systemctl restart gpupack-server']);
      const withNew = profiles(serverCreds);
      const ci = withNew['ci-2026-12'];
      assert.ok(ci, `no profile [ci-2026-12] was added:\n${fs.readFileSync(serverCreds, 'utf8')}`);
      assert.match(ci.aws_access_key_id, /^AKID[0-9A-F]{16}$/);
      assert.match(ci.aws_secret_access_key, /^[A-Za-z0-9+/]{40}$/);
      assert.deepEqual(without(withNew, 'ci-2026-12'), initial, 'the other profiles are kept as they were');
      assert.equal(fs.statSync(serverCreds).mode & 0o777, 0o600);
      const newAdmin = keyOf(ci);
      for (const key of [oldAdmin, newAdmin]) {
        const clusters = await signedOk(endpoint, 'ListClusters', {}, key);
        assert.ok(clusters.clusterArns.some((a) => a.endsWith(`:cluster/${CLUSTER}`)), JSON.stringify(clusters));
        assert.equal((await signedOk(endpoint, 'DescribeTasks', { cluster: CLUSTER, tasks: [before.taskArn] }, key))
          .tasks[0].lastStatus, 'RUNNING');
      }
      admin = newAdmin;  // the clients move
      await connectedSince(mark, 'the agent back after the first restart');

      // ... then the old profile goes, a restart, and the old key is refused as ECS refuses an unknown key.
      mark = agent.log().length;
      const removed = await runDocBlock(substitute(remove, [[ETC_CREDENTIALS, serverCreds]]), serverOnly);
      assert.deepEqual(removed.calls, ['server: systemctl restart gpupack-server']);
      assert.deepEqual(profiles(serverCreds), without(withNew, 'ci-2026-06'), 'exactly the old profile was deleted');
      assert.equal(fs.statSync(serverCreds).mode & 0o777, 0o600);
      refusedAs(await signedCall(endpoint, 'ListClusters', {}, oldAdmin), 'UnrecognizedClientException',
        /^The security token included in the request is invalid\.$/);
      assert.ok((await signedOk(endpoint, 'ListClusters', {}, newAdmin)).clusterArns.length >= 1);
      assert.ok((await signedOk(endpoint, 'ListClusters', {}, reader)).clusterArns.length >= 1, 'the profile after it still works');
      await connectedSince(mark, 'the agent back after the second restart');

      // (b) The agent's key: the same access key id, a new secret on both sides, the server restarted and then
      // the host's agent. Between the two, the agent (still signing with the old secret) is refused.
      mark = agent.log().length;
      const beforeAgent = profiles(serverCreds);
      const refusals = () => agent.log().split("refused this agent's credentials for the channel").length - 1;
      const rotated = await runDocBlock(substitute(agentRotation, [[ETC_CREDENTIALS, serverCreds],
        [ETC_AGENT_CREDENTIALS, agentCreds], ['AKIDHOST7', hostKey.accessKeyId]]), async (host, args) => {
        if (host === 'server' && args === 'restart gpupack-server') {
          const seen = refusals();
          await restartServer();
          await wait('the agent, still on the old secret, refused by the restarted server', () => refusals() > seen);
          return;
        }
        assert.equal(`${host}: ${args}`, `${HOST}: restart gpupack-agent`);
        await restartAgent();
      });
      assert.deepEqual(rotated.calls, ['server: systemctl restart gpupack-server', `${HOST}: systemctl restart gpupack-agent`]);
      const afterAgent = profiles(serverCreds);
      const newHostKey = keyOf(afterAgent[`agent-${HOST}`]);
      assert.equal(newHostKey.accessKeyId, hostKey.accessKeyId, 'the host keeps its access key id');
      assert.notEqual(newHostKey.secretAccessKey, hostKey.secretAccessKey, 'the server has a new secret for it');
      assert.match(newHostKey.secretAccessKey, /^[A-Za-z0-9+/]{40}$/);
      assert.deepEqual(keyOf(profiles(agentCreds).default), newHostKey, 'the host has the same new secret');
      assert.deepEqual(without(afterAgent, `agent-${HOST}`), without(beforeAgent, `agent-${HOST}`),
        `only the host's secret changed (not [agent-${HOST}0], whose key id starts with the host's)`);
      for (const f of [serverCreds, agentCreds]) assert.equal(fs.statSync(f).mode & 0o777, 0o600, f);
      const back = await connectedSince(agentStart, 'the agent back with its new secret');
      assert.ok(agentStart >= mark);
      assert.equal(back.containerInstanceArn, instanceArn, 'the host is the same container instance');
      assert.ok(agent.log().slice(agentStart).includes(`registered ${instanceArn} `), agent.log().slice(agentStart));
      const kept = await task(before.taskArn);
      assert.equal(kept.lastStatus, 'RUNNING');
      assert.equal(kept.startedAt, before.startedAt, 'the task was not restarted');
      const placed = await runTask();
      started.push(placed.taskArn);
      assert.equal(placed.containerInstanceArn, instanceArn);
      // The old secret is refused (the key id is known: a signature error); the new one authenticates (an agent
      // key may not list clusters: refused for its role, not for its signature).
      refusedAs(await signedCall(endpoint, 'ListClusters', {}, hostKey), 'InvalidSignatureException', /signature/i);
      refusedAs(await signedCall(endpoint, 'ListClusters', {}, newHostKey), 'AccessDeniedException', /gpupack_role agent/);

      // (c) A leaked key: its profile removed with the same command, the server restarted: refused from then on.
      mark = agent.log().length;
      const leaked = await runDocBlock(substitute(remove, [['ci-2026-06', 'dashboards'], [ETC_CREDENTIALS, serverCreds]]), serverOnly);
      assert.deepEqual(leaked.calls, ['server: systemctl restart gpupack-server']);
      assert.deepEqual(profiles(serverCreds), without(afterAgent, 'dashboards'));
      refusedAs(await signedCall(endpoint, 'ListClusters', {}, reader), 'UnrecognizedClientException',
        /^The security token included in the request is invalid\.$/);
      await connectedSince(mark, 'the agent back after the leaked key was removed');
      for (const arn of started) assert.equal((await task(arn)).lastStatus, 'RUNNING');

      await stopTasks();
    } finally {
      // Also after a failure: the process runtime's tasks would outlive the agent (a failure's own error stays the
      // test's; a server that is down by then leaves nothing to ask).
      if (started.length > 0 && server) await stopTasks().catch(() => {});
      await agent.stop();
      await server?.stop();
    }
  });
});
