#!/usr/bin/env node
// ha_reads: Describe/List throughput of three gpupack replicas on one private PostgreSQL
// (tests/integration/ha_harness.mjs): the leader alone answering every read, then the leader and its two hot
// standbys sharing them (each standby answers from its own state, docs/ha.md "Reads from standbys"). A benchmark,
// never a test: it prints its setup and figures.
//
// Setup: --instances container instances (8 GPUs of 81,559 MiB each) and --tasks tasks (RunTask count 10) placed
// through the leader; the standbys caught up. Then, per phase, --clients concurrent clients for --seconds, each
// sending in turn DescribeTasks (10 random tasks), ListTasks (a page of 100) and DescribeContainerInstances (10
// random instances): to the leader only ("leader alone"), then round-robin over the three replicas ("leader + 2
// standbys"). Printed per phase: calls/s, p50/p99 latency, and who answered (x-gpupack-served-by).
//
// Usage: node bench/ha_reads.mjs [--instances 200] [--tasks 5000] [--clients 32] [--seconds 10] [--rounds 2]
// The binary: $GPUPACK_BIN, else build/gpupack. Loopback only.
import os from 'node:os';
import { parseArgs } from 'node:util';

import { call, ok, PLAY_AGENT, registerInstance, sharedTaskDefinition } from '../tests/integration/harness.mjs';
import { freePort, postgresBinDir, NO_POSTGRES, readyz, startPostgres, startReplica, waitLeader } from '../tests/integration/ha_harness.mjs';

const { values: opt } = parseArgs({
  options: {
    instances: { type: 'string', default: '200' },
    tasks: { type: 'string', default: '5000' },
    clients: { type: 'string', default: '32' },
    seconds: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '2' },
  },
});
const INSTANCES = Number(opt.instances);
const TASKS = Number(opt.tasks);
const CLIENTS = Number(opt.clients);
const SECONDS = Number(opt.seconds);
const ROUNDS = Number(opt.rounds);
const CLUSTER = 'reads';

if (!postgresBinDir()) {
  console.error(NO_POSTGRES);
  process.exit(2);
}

function pct(sorted, p) {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : 0;
}

async function phase(name, endpoints, taskArns, instanceArns) {
  const latencies = [];
  const servedBy = new Map();
  let errors = 0;
  const end = Date.now() + SECONDS * 1000;
  const pick = (list, n) => Array.from({ length: n }, () => list[Math.floor(Math.random() * list.length)]);
  await Promise.all(Array.from({ length: CLIENTS }, async (_, c) => {
    for (let i = c; Date.now() < end; ++i) {
      const endpoint = endpoints[i % endpoints.length];
      const kind = i % 3;
      const [op, body] = kind === 0 ? ['DescribeTasks', { cluster: CLUSTER, tasks: pick(taskArns, 10) }]
        : kind === 1 ? ['ListTasks', { cluster: CLUSTER, maxResults: 100 }]
          : ['DescribeContainerInstances', { cluster: CLUSTER, containerInstances: pick(instanceArns, 10) }];
      const start = process.hrtime.bigint();
      try {
        const r = await call(endpoint, op, body, { timeoutMs: 10000 });
        if (r.status !== 200) ++errors;
        const by = r.headers.get('x-gpupack-served-by') ?? 'leader';
        servedBy.set(by, (servedBy.get(by) ?? 0) + 1);
      } catch {
        ++errors;
      }
      latencies.push(Number(process.hrtime.bigint() - start) / 1e6);
    }
  }));
  latencies.sort((a, b) => a - b);
  const rate = latencies.length / SECONDS;
  console.log(`${name.padEnd(20)} ${rate.toFixed(0).padStart(8)} calls/s  p50 ${pct(latencies, 50).toFixed(1)} ms  ` +
    `p99 ${pct(latencies, 99).toFixed(1)} ms  errors ${errors}  answered by ${JSON.stringify(Object.fromEntries(servedBy))}  ` +
    `load ${os.loadavg()[0].toFixed(1)}`);
  return rate;
}

const pg = await startPostgres({ durable: true });
const replicas = [];
try {
  const db = pg.createDatabase('reads');
  replicas.push(await startReplica({ db, port: await freePort(), ttlMs: 5000, extraArgs: PLAY_AGENT }));
  const { leader } = await waitLeader(replicas);
  for (let i = 0; i < 2; ++i) replicas.push(await startReplica({ db, port: await freePort(), ttlMs: 5000, extraArgs: PLAY_AGENT }));
  await ok(leader.endpoint, 'CreateCluster', { clusterName: CLUSTER });
  const instanceArns = [];
  for (let i = 0; i < INSTANCES; ++i) {
    instanceArns.push(await registerInstance(leader.endpoint, CLUSTER,
      Array.from({ length: 8 }, (_, g) => [`GPU-${i}-${g}`, 81559])));
  }
  await ok(leader.endpoint, 'RegisterTaskDefinition', sharedTaskDefinition('reads', 512));
  const taskArns = [];
  const workers = 8;
  await Promise.all(Array.from({ length: workers }, async (_, w) => {
    for (let i = w; i < TASKS / 10; i += workers) {
      const r = await ok(leader.endpoint, 'RunTask', { cluster: CLUSTER, taskDefinition: 'reads', count: 10 });
      taskArns.push(...r.tasks.map((t) => t.taskArn));
    }
  }));
  const seq = (await readyz(leader.endpoint)).json.commitSeq;
  for (const r of replicas.slice(1)) {
    while (!((await readyz(r.endpoint)).json.follow?.appliedSeq >= seq)) await new Promise((res) => setTimeout(res, 100));
  }
  console.log(`ha_reads: ${os.cpus().length} CPUs, ${INSTANCES} instances x 8 GPUs, ${taskArns.length} tasks, ` +
    `${CLIENTS} clients, ${SECONDS} s per phase, ${ROUNDS} rounds; DescribeTasks (10) / ListTasks (100) / ` +
    'DescribeContainerInstances (10) in turn');
  const endpoints = replicas.map((r) => r.endpoint);
  const alone = [];
  const spread = [];
  for (let round = 1; round <= ROUNDS; ++round) {
    alone.push(await phase(`round ${round} leader alone`, [leader.endpoint], taskArns, instanceArns));
    spread.push(await phase(`round ${round} leader+2`, endpoints, taskArns, instanceArns));
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(`median calls/s: leader alone ${median(alone).toFixed(0)}, leader + 2 standbys ${median(spread).toFixed(0)} ` +
    `(x${(median(spread) / median(alone)).toFixed(2)})`);
} finally {
  for (const r of replicas) await r.stop();
  pg.close();
}
