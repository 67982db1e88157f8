// The leadership epoch end to end (tests/integration/ha_harness.mjs): real `gpupack server` replicas on a private
// PostgreSQL and a real `gpupack agent` (a fake GPU, the process runtime) given every replica.
//
// 1. A leads (epoch e1) and reaches the database through a TCP proxy; the agent runs T1 for it. A is paused
//    (SIGSTOP): B takes the lease (e2 > e1); the agent, hearing nothing from A, leaves it and connects to B,
//    which runs T2 on it.
// 2. B is killed and the proxy cut, then A resumes (SIGCONT): cut off, A still believes it leads under e1. It is
//    told to stop T1 and to run a task: it acknowledges neither, and the database holds exactly what it held
//    before A resumed (its commits are fenced). The agent, on its way through the list, reaches A and sends its
//    hello: A cannot commit the hello, so no welcome of e1 ever comes from it.
//    Before that, a third address plays a late message of A's term (what a deposed leader's welcome and stop
//    look like on the wire, epoch e1: stop T1 and T2): the agent logs and drops both.
// 3. B comes back (it takes its own lease at once: e3) and the proxy heals: A learns it lost the lease and
//    turns standby; the agent ends on B. T1 and T2 ran all along: each started once, never stopped.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { call, ok, removeTempDir, sharedTaskDefinition, tempDir } from './harness.mjs';
import {
  freePort, NO_POSTGRES, postgresBinDir, startAgent, startPostgres, startReplica, TcpProxy, waitFor, waitLeader,
} from './ha_harness.mjs';

const skip = postgresBinDir() ? false : NO_POSTGRES;
const TTL_MS = 2000;
const CLUSTER = 'epochs';
let pg;
const started = [];

before(async () => {
  if (!skip) pg = await startPostgres();
});

after(async () => {
  for (const r of started) {
    r.child.kill('SIGCONT');
    await r.stop();
  }
  pg?.close();
});

async function replica(db, port) {
  const r = await startReplica({ db, port: port ?? (await freePort()), ttlMs: TTL_MS, logLevel: process.env.HA_LOG ?? 'warn' });
  started.push(r);
  return r;
}

// LateLeader: an address that accepts one agent channel and sends on it what a deposed leader of `epoch` would:
// a welcome that stops `welcomeStop` and a stop push for `pushStop`; then it closes the channel and stops
// listening (the agent moves on to the next address).
class LateLeader {
  constructor() {
    this.server = http.createServer((req, res) => res.writeHead(503).end());
    this.server.on('upgrade', (req, socket) => this.accept(req, socket));
    this.served = 0;
  }
  async listen() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.endpoint = `http://127.0.0.1:${this.server.address().port}`;
  }
  arm(epoch, welcomeStop, pushStop) {
    this.messages = [
      { type: 'welcome', assign: [], stop: [{ taskArn: welcomeStop, reason: 'a deposed leader says so' }], heartbeatIntervalMs: 5000, epoch },
      { type: 'stop', id: 7, taskArn: pushStop, reason: 'a deposed leader says so', epoch },
    ];
  }
  accept(req, socket) {
    socket.on('error', () => {});
    if (!this.messages || this.served > 0) return socket.destroy();
    ++this.served;
    const key = crypto.createHash('sha1').update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${key}\r\n\r\n`);
    let answered = false;
    socket.on('data', () => {
      if (answered) return; // the hello (or its first part) came: answer as the deposed leader would
      answered = true;
      for (const m of this.messages) socket.write(frame(JSON.stringify(m)));
      setTimeout(() => {
        socket.destroy();
        this.server.close();
      }, 1000);
    });
  }
}

// frame: one unmasked WebSocket text frame (a server's).
function frame(text) {
  const body = Buffer.from(text);
  let head;
  if (body.length < 126) head = Buffer.from([0x81, body.length]);
  else {
    head = Buffer.alloc(4);
    head[0] = 0x81;
    head[1] = 126;
    head.writeUInt16BE(body.length, 2);
  }
  return Buffer.concat([head, body]);
}


test('after a takeover the deposed leader cannot make the agent start or stop anything, and its epoch is refused', { skip, timeout: 90000 }, async () => {
  pg.createDatabase('epoch');
  const proxy = new TcpProxy(pg.port);
  const proxyPort = await proxy.listen();
  const late = new LateLeader();
  await late.listen();
  const dir = tempDir('gpupack-ha-epoch-');
  let agent;
  const agentLog = () => agent?.log() ?? '';
  try {
    const a = await replica(`postgresql://postgres@127.0.0.1:${proxyPort}/epoch`);
    await waitLeader([a]);
    const bPort = await freePort();
    let b = await replica(pg.uri('epoch'), bPort);
    const { leader, epoch: e1 } = await waitLeader([a, b], { all: true });
    assert.equal(leader, a);
    await ok(a.endpoint, 'CreateCluster', { clusterName: CLUSTER });
    const def = sharedTaskDefinition('sleepy', 1024);
    def.containerDefinitions[0].entryPoint = ['/bin/sh', '-c'];
    def.containerDefinitions[0].command = ['exec sleep 600'];
    await ok(a.endpoint, 'RegisterTaskDefinition', def);

    agent = startAgent({ servers: [a.endpoint, b.endpoint, late.endpoint], cluster: CLUSTER, dir, name: 'epoch-node',
      gpus: 'fake:1x22587' });
    const connectedTo = (r) => async () => {
      const arns = (await ok(r.endpoint, 'ListContainerInstances', { cluster: CLUSTER })).containerInstanceArns;
      if (arns.length !== 1) return false;
      return (await ok(r.endpoint, 'DescribeContainerInstances', { cluster: CLUSTER, containerInstances: arns })).containerInstances[0].agentConnected;
    };
    const runningOn = (r, arn) => async () => (await ok(r.endpoint, 'DescribeTasks', { cluster: CLUSTER, tasks: [arn] })).tasks[0].lastStatus === 'RUNNING';
    await waitFor('the agent connected to A', connectedTo(a), 30000, agentLog);
    const t1 = (await ok(a.endpoint, 'RunTask', { cluster: CLUSTER, taskDefinition: 'sleepy' })).tasks[0].taskArn;
    await waitFor('T1 RUNNING', runningOn(a, t1), 30000, agentLog);

    // 1. A paused: B takes over, the agent leaves the silent A for B, and B runs T2.
    a.child.kill('SIGSTOP');
    const { epoch: e2 } = await waitLeader([b], { timeoutMs: 4 * TTL_MS + 10000 });
    assert.ok(e2 > e1, `B's epoch ${e2} is above A's ${e1}`);
    await waitFor('the agent left the silent A', () => /said nothing for \d+ ms; closing the channel/.test(agentLog()), 40000, agentLog);
    await waitFor('the agent connected to B', connectedTo(b), 40000, agentLog);
    const t2 = (await ok(b.endpoint, 'RunTask', { cluster: CLUSTER, taskDefinition: 'sleepy' })).tasks[0].taskArn;
    await waitFor('T2 RUNNING', runningOn(b, t2), 30000, agentLog);

    // 2. B killed, A cut off from the database and resumed: a deposed leader that believes it leads.
    const opened = () => agentLog().split('\n').filter((l) => /channel open/.test(l)).length;
    const opensBefore = opened();
    late.arm(e1, t2, t1);
    await b.kill9();
    const snapshot = () => pg.psql('SELECT arn, md5(doc) FROM tasks ORDER BY arn; SELECT arn, md5(doc) FROM container_instances ORDER BY arn; ' +
      'SELECT name FROM clusters ORDER BY name; SELECT count(*) FROM client_tokens', 'epoch');
    const before = snapshot();
    proxy.cut();
    a.child.kill('SIGCONT');
    const [stop, run] = await Promise.all([
      call(a.endpoint, 'StopTask', { cluster: CLUSTER, task: t1, reason: 'from the deposed leader' }, { timeoutMs: 20000 }),
      call(a.endpoint, 'RunTask', { cluster: CLUSTER, taskDefinition: 'sleepy', clientToken: 'deposed' }, { timeoutMs: 20000 }),
    ]);
    assert.notEqual(stop.status, 200, `the deposed leader acknowledged StopTask: ${stop.text}`);
    assert.notEqual(run.status, 200, `the deposed leader acknowledged RunTask: ${run.text}`);
    const dropped = await waitFor('the agent dropped the late welcome and stop of epoch ' + e1, () =>
      /ignoring the server's welcome of leadership epoch/.test(agentLog()) && /ignoring the server's stop of leadership epoch/.test(agentLog()), 30000, agentLog);
    assert.ok(dropped);
    assert.match(agentLog(), new RegExp(`ignoring the server's welcome of leadership epoch ${e1}: epoch ${e2} is current`));
    assert.equal(late.served, 1);
    // The agent goes on to A (the late address stops listening): A cannot commit the hello, so it answers an
    // error and no welcome.
    await waitFor('the agent reached the deposed A', () => opened() >= opensBefore + 2 &&
      /the server answered an error/.test(agentLog().split('ignoring the server\'s stop')[1] ?? ''), 30000, agentLog);
    assert.equal(snapshot(), before, 'the deposed leader committed something');

    // 3. B back (its own lease at once), the proxy healed: the agent ends on B; T1 and T2 never stopped.
    b = await replica(pg.uri('epoch'), bPort);
    proxy.heal();
    const { leader: last, epoch: e3 } = await waitLeader([a, b], { all: true, timeoutMs: 4 * TTL_MS + 20000 });
    assert.equal(last, b);
    assert.ok(e3 > e2);
    // agentConnected reads true as soon as B has loaded (the reconnect grace keeps the instance placeable while
    // its agent finds B), so wait for the agent itself: it persists B's epoch when B welcomes it.
    const rememberedEpoch = () => {
      try {
        return JSON.parse(fs.readFileSync(path.join(dir, 'agent', 'leader_epoch.json'), 'utf8')).epoch;
      } catch {
        return null;
      }
    };
    await waitFor('the agent connected to B again', async () => (await connectedTo(b)()) && rememberedEpoch() === e3,
      40000, agentLog);
    for (const arn of [t1, t2]) await waitFor(`${arn} RUNNING on B`, runningOn(b, arn), 20000, agentLog);
    const listed = (await ok(b.endpoint, 'ListTasks', { cluster: CLUSTER })).taskArns;
    assert.deepEqual([...listed].sort(), [t1, t2].sort());
    const text = agentLog();
    for (const arn of [t1, t2]) {
      assert.equal(text.split(`agent: task ${arn} RUNNING`).length - 1, 1, `${arn} started once`);
      assert.ok(!text.includes(`agent: task ${arn} STOPPED`), `${arn} was stopped:\n${text}`);
    }
    assert.equal(rememberedEpoch(), e3, 'the agent remembers the newest epoch in its state directory');
  } finally {
    await agent?.stop();
    agent?.reapTasks();
    proxy.close();
    late.server.close();
    removeTempDir(dir);
  }
});
