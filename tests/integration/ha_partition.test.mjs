// The leader cut off from its database, and the database restarted (tests/integration/ha_harness.mjs).
//
// Partition: replica A reaches PostgreSQL only through a TCP proxy, B directly. A leads; the proxy is cut (bytes
// stop both ways). A must stop acknowledging writes within the lease's TTL (in fact at once: its commits cannot
// reach the database) while it still answers reads from memory; B takes over; when the proxy heals, A learns
// it lost the lease and becomes a standby that forwards to B, and nothing A was asked to write after the cut
// is in the database.
// Database restart: writes fail with a ServerException while PostgreSQL is down (bounded by the store's
// deadline, never a hang), reads keep answering, and the replicas serve writes again by themselves once it is
// back, with nothing acknowledged before lost.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { awsClientEnv, call, DEBIAN_AWS, gpupackBin, ok, removeTempDir, tempDir } from './harness.mjs';
import { callAny, freePort, NO_POSTGRES, postgresBinDir, readyz, startPostgres, startReplica, TcpProxy, waitLeader } from './ha_harness.mjs';

const skip = postgresBinDir() ? false : NO_POSTGRES;
const TTL_MS = 2000;
let pg;
const started = [];

before(async () => {
  if (!skip) pg = await startPostgres();
});

after(async () => {
  for (const r of started) await r.stop();
  pg?.close();
});

async function replica(db, port) {
  const r = await startReplica({ db, port: port ?? (await freePort()), ttlMs: TTL_MS, logLevel: process.env.HA_LOG ?? 'warn' });
  started.push(r);
  return r;
}

async function clusterNames(endpoint) {
  const r = await ok(endpoint, 'ListClusters', {});
  return r.clusterArns.map((a) => a.slice(a.lastIndexOf('/') + 1));
}

test('a leader cut off from the database stops acknowledging, a standby takes over, nothing of the old leader lands', { skip, timeout: 120000 }, async () => {
  pg.createDatabase('partition');
  const proxy = new TcpProxy(pg.port);
  const proxyPort = await proxy.listen();
  try {
    const a = await replica(`postgresql://postgres@127.0.0.1:${proxyPort}/partition`);
    await waitLeader([a]);
    const b = await replica(pg.uri('partition'));
    const { leader } = await waitLeader([a, b], { all: true });
    assert.equal(leader, a);
    await ok(a.endpoint, 'CreateCluster', { clusterName: 'before' });

    proxy.cut();
    const cutAt = Date.now();
    // Writes to A after the cut: none may be acknowledged; each is answered (a ServerException), none hangs.
    const late = [];
    const writes = [];
    for (let i = 0; i < 8; ++i) {
      const name = `cut-${i}`;
      writes.push(call(a.endpoint, 'CreateCluster', { clusterName: name }, { timeoutMs: 20000 }).then((r) => late.push({ name, r, at: Date.now() })));
      await new Promise((r) => setTimeout(r, 150));
    }
    // Reads keep answering from memory meanwhile.
    assert.ok((await clusterNames(a.endpoint)).includes('before'));
    const { leader: next } = await waitLeader([a, b], { not: a, timeoutMs: 4 * TTL_MS + 10000 });
    assert.equal(next, b);
    const takeoverMs = Date.now() - cutAt;
    await Promise.all(writes);
    for (const { name, r } of late) {
      assert.notEqual(r.status, 200, `${name} was acknowledged by the cut-off leader`);
      assert.equal(r.json?.__type, 'ServerException', `${name}: ${r.text}`);
    }
    const lastAnswer = Math.max(...late.map((w) => w.at)) - cutAt;
    await ok(b.endpoint, 'CreateCluster', { clusterName: 'after' });

    proxy.heal();
    // A learns it lost the lease and forwards to B from then on.
    const deadline = Date.now() + 15000;
    let ready;
    while (Date.now() < deadline) {
      ready = await readyz(a.endpoint);
      if (ready.status === 200 && ready.json.role === 'standby') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(ready.json.role, 'standby', JSON.stringify(ready));
    assert.equal(ready.json.leader, b.endpoint);
    await ok(a.endpoint, 'CreateCluster', { clusterName: 'via-a' });
    const names = await clusterNames(b.endpoint);
    assert.deepEqual(names.sort(), ['after', 'before', 'via-a']);
    console.log(`# takeover ${takeoverMs} ms after the cut; the cut-off leader's writes all answered by ${lastAnswer} ms`);
  } finally {
    proxy.close();
  }
});

test('a database restart: writes fail while it is down, reads answer, and the replicas resume by themselves', { skip, timeout: 120000 }, async () => {
  const db = pg.createDatabase('restart');
  const a = await replica(db);
  const b = await replica(db);
  const { leader } = await waitLeader([a, b], { all: true });
  await ok(leader.endpoint, 'CreateCluster', { clusterName: 'kept' });

  pg.stop();
  const down = await call(leader.endpoint, 'CreateCluster', { clusterName: 'while-down' }, { timeoutMs: 20000 });
  assert.equal(down.status, 500, down.text);
  assert.equal(down.json.__type, 'ServerException');
  assert.ok((await clusterNames(leader.endpoint)).includes('kept'), 'reads answer from memory while the database is down');
  let ready;
  for (const deadline = Date.now() + 5000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
    ready = await readyz(leader.endpoint);
    if (ready.status === 503) break;
  }
  assert.equal(ready.status, 503, `readyz while the database is down: ${JSON.stringify(ready)}`);

  await pg.start();
  const back = await callAny([a, b], 'CreateCluster', { clusterName: 'after-restart' }, { timeoutMs: 30000 });
  assert.equal(back.status, 200, back.text);
  await waitLeader([a, b], { all: true });
  const names = await clusterNames(a.endpoint);
  assert.ok(names.includes('kept') && names.includes('after-restart'), `${names.join(',')}\n${a.stdout}\n${b.stdout}`);
  assert.ok(!names.includes('while-down'));
  // Durable, not only in a server's memory: the database itself holds what was acknowledged.
  const held = pg.psql('SELECT name FROM clusters ORDER BY name', 'restart').trim().split('\n');
  assert.deepEqual(held, ['after-restart', 'kept']);
});

test('a leader stopped cleanly releases its lease: a standby takes over without waiting out the TTL', { skip, timeout: 60000 }, async () => {
  const db = pg.createDatabase('release');
  // A TTL far longer than the wait below: only a released lease can change hands in time.
  const a = await startReplica({ db, port: await freePort(), ttlMs: 120000 });
  started.push(a);
  await waitLeader([a]);
  const b = await startReplica({ db, port: await freePort(), ttlMs: 120000 });
  started.push(b);
  const { epoch: first } = await waitLeader([a, b], { all: true });
  await ok(a.endpoint, 'CreateCluster', { clusterName: 'before-stop' });
  assert.equal((await a.stop()).code, 0);
  const { leader, epoch } = await waitLeader([b], { timeoutMs: 20000 });
  assert.equal(leader, b);
  assert.ok(epoch > first, `the new epoch ${epoch} is above ${first}`);
  assert.ok((await clusterNames(b.endpoint)).includes('before-stop'));
});

test('with --credentials, a SigV4-signed call sent to a standby verifies at the leader', { skip: skip || (!fs.existsSync(DEBIAN_AWS) && 'Debian\'s AWS CLI (/usr/bin/aws) is not installed'), timeout: 60000 }, async () => {
  const dir = tempDir('gpupack-ha-sigv4-');
  try {
    const creds = path.join(dir, 'credentials');
    fs.writeFileSync(creds, '[default]\naws_access_key_id = AKIDHA0001\naws_secret_access_key = ha-secret\n');
    fs.chmodSync(creds, 0o600);
    const db = pg.createDatabase('sigv4');
    // Each replica counts the other among its names (--server-name): a call signed for the standby B reaches the
    // leader A with B's Host.
    const [aPort, bPort] = [await freePort(), await freePort()];
    const args = (other) => ['--credentials', creds, '--server-name', `127.0.0.1:${other}`];
    const a = await startReplica({ db, port: aPort, ttlMs: TTL_MS, extraArgs: args(bPort) });
    started.push(a);
    await waitLeader([a]);
    const b = await startReplica({ db, port: bPort, ttlMs: TTL_MS, extraArgs: args(aPort) });
    started.push(b);
    await waitLeader([a, b], { all: true });
    const env = { ...awsClientEnv(dir), AWS_ACCESS_KEY_ID: 'AKIDHA0001', AWS_SECRET_ACCESS_KEY: 'ha-secret', AWS_DEFAULT_REGION: 'us-east-1' };
    const aws = (...argv) => spawnSync('aws', [...argv, '--endpoint-url', b.endpoint, '--output', 'json'], { env, encoding: 'utf8', timeout: 30000 });
    const created = aws('ecs', 'create-cluster', '--cluster-name', 'signed');
    assert.equal(created.status, 0, created.stderr);
    assert.equal(JSON.parse(created.stdout).cluster.clusterName, 'signed');
    // A wrong secret is refused by the leader, and the standby returns that refusal unchanged.
    const wrong = spawnSync('aws', ['ecs', 'list-clusters', '--endpoint-url', b.endpoint], { env: { ...env, AWS_SECRET_ACCESS_KEY: 'nope' }, encoding: 'utf8', timeout: 30000 });
    assert.notEqual(wrong.status, 0);
    assert.match(wrong.stderr, /SignatureDoesNotMatch|InvalidSignature/);
  } finally {
    removeTempDir(dir);
  }
});

test('gpupack server --db postgres://: usage errors, and an unreachable database named without its password', () => {
  const run = (args) => spawnSync(gpupackBin(), ['server', ...args], { encoding: 'utf8', timeout: 30000 });
  const noAdvertise = run(['--listen', '127.0.0.1:0', '--db', 'postgresql://u:secret@127.0.0.1:1/db']);
  assert.equal(noAdvertise.status, 2, noAdvertise.stderr);
  assert.match(noAdvertise.stderr, /pass --advertise http:\/\/HOST:PORT/);
  const badTtl = run(['--listen', '127.0.0.1:8080', '--db', 'postgresql://u@127.0.0.1:1/db', '--lease-ttl-ms', '10']);
  assert.equal(badTtl.status, 2, badTtl.stderr);
  assert.match(badTtl.stderr, /--lease-ttl-ms must be 1000\.\.600000/);
  const unreachable = run(['--listen', '127.0.0.1:0', '--advertise', 'http://127.0.0.1:9', '--db', 'postgresql://u:secret@127.0.0.1:1/db']);
  assert.equal(unreachable.status, 1, unreachable.stderr);
  assert.match(unreachable.stderr, /cannot open database 'postgresql:\/\/u:\*\*\*@127\.0\.0\.1:1\/db'/);
  assert.doesNotMatch(unreachable.stderr + unreachable.stdout, /secret/);
});
