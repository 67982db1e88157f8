// logs_index: what one Logs call costs the server on a cluster of many tasks of a large task definition, the case
// of docs/security.md's threat table (DescribeLogStreams for a group that does not exist read every task and
// parsed its definition's JSON). A real `gpupack server` (GPUPACK_BIN) whose test plays the agent
// (--place-on-disconnected), one instance, a definition of 10 containers with 100 docker labels of 100 characters
// each (kept as the definition's extra JSON, like logConfiguration), TASKS tasks of it; then CALLS sequential
// DescribeLogStreams for a group that does not exist and for the definition's awslogs group, on loopback.
//
// Run: GPUPACK_BIN=build/gpupack node bench/logs_index.mjs [--tasks 300] [--calls 50]
import path from 'node:path';

import { ok, call, PLAY_AGENT, registerInstance, removeTempDir, startServer, tempDir } from '../tests/integration/harness.mjs';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const TASKS = arg('--tasks', 300);
const CALLS = arg('--calls', 50);

const dir = tempDir('gpupack-logs-index-');
const server = await startServer({ db: path.join(dir, 'state.db'), extraArgs: PLAY_AGENT });
try {
  await ok(server.endpoint, 'CreateCluster', { clusterName: 'big' });
  await registerInstance(server.endpoint, 'big', [], { cpu: 1 << 30, memory: 1 << 30 });
  const labels = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`label${i}`, 'x'.repeat(100)]));
  const containers = Array.from({ length: 10 }, (_, i) => ({
    name: `c${i}`, image: 'busybox', cpu: 1, memory: 16, essential: i === 0, dockerLabels: labels,
    logConfiguration: { logDriver: 'awslogs', options: { 'awslogs-group': '/big/app', 'awslogs-stream-prefix': 'p' } },
  }));
  await ok(server.endpoint, 'RegisterTaskDefinition', { family: 'big', containerDefinitions: containers });
  for (let placed = 0; placed < TASKS; placed += 10) {
    const r = await ok(server.endpoint, 'RunTask', { cluster: 'big', taskDefinition: 'big', count: Math.min(10, TASKS - placed) });
    if (r.failures.length) throw new Error(JSON.stringify(r.failures));
  }
  const target = 'Logs_20140328.DescribeLogStreams';
  for (const group of ['/nope', '/big/app']) {
    const ms = [];
    for (let i = 0; i < CALLS; ++i) {
      const t = process.hrtime.bigint();
      const r = await call(server.endpoint, 'DescribeLogStreams', { logGroupName: group, limit: 50 }, { target });
      ms.push(Number(process.hrtime.bigint() - t) / 1e6);
      if (r.status !== (group === '/nope' ? 400 : 200)) throw new Error(`${group}: ${r.status} ${JSON.stringify(r.json)}`);
    }
    ms.sort((a, b) => a - b);
    const q = (p) => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))].toFixed(2);
    console.log(`DescribeLogStreams ${group}: ${TASKS} tasks x 10 containers, ${CALLS} calls: p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, max ${ms[ms.length - 1].toFixed(2)} ms`);
  }
} finally {
  await server.stop();
  removeTempDir(dir);
}
