#!/usr/bin/env node
// ha_bench: several gpupack servers on one private PostgreSQL (tests/integration/ha_harness.mjs), measured.
//
//   takeover  three replicas, --instances container instances registered; --rounds times the leader gets SIGKILL
//             and the clock runs until (a) a replica's /readyz says it is the ready leader and (b) a RunTask
//             sent to the replicas in turn (as a retrying client does) is answered 200. p50/p99/max of both.
//   runtask   RunTask (count 1) from --clients concurrent HTTP clients for --seconds, against one server on
//             PostgreSQL (fsync on: durable) and one on SQLite (WAL, synchronous=FULL), same cluster shape:
//             calls/s, p50/p99 latency, and the PostgreSQL/SQLite ratio of calls/s.
//
// Usage: node bench/ha_bench.mjs [--rounds 20] [--instances 1000] [--ttl-ms 2000] [--clients 32] [--seconds 10]
//                                [--only takeover|runtask]
// The binary: $GPUPACK_BIN, else build/gpupack. Loopback only. PostgreSQL runs with fsync on here (durable),
// unlike the tests.
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { call, ok, PLAY_AGENT, registerInstance, removeTempDir, sharedTaskDefinition, startServer, tempDir } from '../tests/integration/harness.mjs';
import { callAny, freePort, postgresBinDir, NO_POSTGRES, startPostgres, startReplica, waitLeader } from '../tests/integration/ha_harness.mjs';

const { values: opt } = parseArgs({
  options: {
    rounds: { type: 'string', default: '20' },
    instances: { type: 'string', default: '1000' },
    'ttl-ms': { type: 'string', default: '2000' },
    clients: { type: 'string', default: '32' },
    seconds: { type: 'string', default: '10' },
    only: { type: 'string', default: '' },
  },
});
if (!postgresBinDir()) {
  console.error(NO_POSTGRES);
  process.exit(2);
}
const rounds = Number(opt.rounds);
const instances = Number(opt.instances);
const ttlMs = Number(opt['ttl-ms']);
const clients = Number(opt.clients);
const seconds = Number(opt.seconds);

const pctl = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
};
const fmt = (xs) => `p50 ${pctl(xs, 50)} ms  p99 ${pctl(xs, 99)} ms  max ${Math.max(...xs)} ms  (n=${xs.length})`;

async function setUpCluster(endpoint, cluster, count) {
  await ok(endpoint, 'CreateCluster', { clusterName: cluster });
  await ok(endpoint, 'RegisterTaskDefinition', sharedTaskDefinition('infer', 512));
  let next = 0;
  await Promise.all(Array.from({ length: 16 }, async () => {
    for (let i = next++; i < count; i = next++)
      await registerInstance(endpoint, cluster, Array.from({ length: 8 }, (_, g) => [`GPU-${i}-${g}`, 81920]));
  }));
}

async function takeover(pg) {
  const db = pg.createDatabase('takeover');
  const replicas = [];
  for (let i = 0; i < 3; ++i) replicas.push(await startReplica({ db, port: await freePort(), ttlMs, extraArgs: PLAY_AGENT }));
  const { leader } = await waitLeader(replicas, { all: true });
  const t0 = Date.now();
  await setUpCluster(leader.endpoint, 'ha', instances);
  console.log(`takeover: ${instances} instances registered in ${Date.now() - t0} ms; lease TTL ${ttlMs} ms, renewed every ${Math.min(1000, Math.floor(ttlMs / 3))} ms`);
  const ready = [];
  const firstWrite = [];
  for (let round = 0; round < rounds; ++round) {
    const { leader: old } = await waitLeader(replicas, { all: true });
    const killed = Date.now();
    await old.kill9();
    const others = replicas.filter((r) => r !== old);
    const [readyAt, writeAt] = await Promise.all([
      waitLeader(others, { timeoutMs: 60000 }).then(() => Date.now()),
      callAny(others, 'RunTask', { cluster: 'ha', taskDefinition: 'infer', clientToken: `round-${round}` }, { timeoutMs: 60000 }).then((r) => {
        if (r.status !== 200) throw new Error(`round ${round}: RunTask ${r.status} ${r.text}`);
        return Date.now();
      }),
    ]);
    ready.push(readyAt - killed);
    firstWrite.push(writeAt - killed);
    replicas[replicas.indexOf(old)] = await startReplica({ db, port: old.port, ttlMs, extraArgs: PLAY_AGENT });
  }
  console.log(`takeover  kill -> /readyz leader     ${fmt(ready)}`);
  console.log(`takeover  kill -> first RunTask 200  ${fmt(firstWrite)}`);
  for (const r of replicas) await r.stop();
}

async function load(endpoint, cluster) {
  const latencies = [];
  let errors = 0;
  const end = Date.now() + seconds * 1000;
  await Promise.all(Array.from({ length: clients }, async () => {
    while (Date.now() < end) {
      const t = performance.now();
      const r = await call(endpoint, 'RunTask', { cluster, taskDefinition: 'infer', count: 1 });
      if (r.status === 200 && r.json.tasks.length === 1) latencies.push(performance.now() - t);
      else ++errors;
    }
  }));
  const ms = latencies.map((x) => Math.round(x * 10) / 10);
  return { rate: latencies.length / seconds, ms, errors };
}

async function runtask(pg) {
  const out = {};
  const shape = Math.max(64, Math.ceil((clients * seconds * 400) / 1200)); // room for every call: 1,280 tasks per instance
  {
    const db = pg.createDatabase('runtask');
    const r = await startReplica({ db, port: await freePort(), ttlMs: 5000, extraArgs: PLAY_AGENT });
    await waitLeader([r]);
    await setUpCluster(r.endpoint, 'load', shape);
    out.pg = await load(r.endpoint, 'load');
    await r.stop();
  }
  const dir = tempDir('gpupack-ha-bench-');
  try {
    const s = await startServer({ db: path.join(dir, 'state.db'), extraArgs: PLAY_AGENT });
    await setUpCluster(s.endpoint, 'load', shape);
    out.sqlite = await load(s.endpoint, 'load');
    await s.stop();
  } finally {
    removeTempDir(dir);
  }
  for (const [name, r] of Object.entries(out))
    console.log(`runtask  ${name.padEnd(6)} ${r.rate.toFixed(0).padStart(6)} calls/s  latency ${fmt(r.ms)}  errors ${r.errors}`);
  console.log(`runtask  PostgreSQL/SQLite calls/s ratio ${(out.pg.rate / out.sqlite.rate).toFixed(2)}`);
}

console.log(`ha_bench ${new Date().toISOString()}  ${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'})  clients ${clients}  seconds ${seconds}`);
const pg = await startPostgres({ durable: true });
try {
  if (opt.only !== 'runtask') await takeover(pg);
  if (opt.only !== 'takeover') await runtask(pg);
} finally {
  pg.close();
}
process.exit(0);
