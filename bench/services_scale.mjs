#!/usr/bin/env node
// services_scale: ECS services at scale on one `gpupack server`: --services services of --replicas replicas each on
// --instances simulated agents. A benchmark, never a test: it prints figures and their setup. Figures:
// docs/benchmarks.md, section 10.
//
// It starts the real binary on a fresh SQLite file in a temporary directory, on loopback (--log-level warn,
// --max-agent-channels above --instances), then agent_swarm processes in serve mode attached to it (at most
// 2,500 agents each, the swarm's file descriptors: 4 per agent; --agent-offset keeps their instances apart), and
// waits until every agent is registered, connected and welcomed. Then, through the ECS API only:
//   idle      --idle-s with the agents connected and no service: heartbeats only (the reference for what follows)
//   create    registers one shared task definition (1 container, 256 CPU units, 1,024 MiB, nvidiaMps 2,048 MiB)
//             and calls CreateService --services times (desiredCount --replicas, --strategy) from --concurrency
//             connections; the agents answer each assign with a RUNNING report. DescribeServices (10 names a
//             call, 4 calls in flight) polls until every service is steady: runningCount == desiredCount,
//             pendingCount 0, one deployment, COMPLETED. The time is taken from the first CreateService sent to
//             the last "has reached a steady state" event (its createdAt, the server's clock on this machine), and
//             to the poll that saw it
//   steady    --idle-s with every service steady and nothing else happening
//   churn     --churn-s while the agents crash --churn-pct % of their RUNNING replicas a minute (SIGUSR2 to the
//             swarms: a STOPPED report with exit code 1 that nobody asked for; the services replace them, and a
//             service whose tasks keep failing backs off, docs/api.md "Services"); one DescribeServices round
//             at the end (after the CPU figure) counts the replicas running, and with --sample-s S one every S
//             seconds during the window too (their CPU then counts in the figure)
//   recover   crashing off; polls until every service is steady again (bounded by --timeout-s)
// The server's CPU over each phase is the sum of its threads' run time from /proc/PID/task/*/schedstat (ns); its
// VmRSS and VmHWM come from /proc/PID/status; the swarms' counters (heartbeats acked, assigns, crashes: SIGUSR1,
// bench/swarm_serve.h) are read at each phase's edges. The swarms and this driver share the machine with the
// server, and their CPU is printed too. --services 0 is a control run: the same phases without a service, which
// shows how much two idle windows differ by themselves. Every loop is bounded; every request goes to 127.0.0.1.
//
// With --attach URL --server-pid PID --play-agent it only creates the services on that server (cluster
// --cluster, an ACTIVE family --family) and plays their agent: it reports every PENDING task of the cluster
// RUNNING with SubmitTaskStateChange until every service is steady, then exits (bench/runtask_load.sh
// --services uses it; that server must run with --place-on-disconnected).
//
// Usage: node bench/services_scale.mjs [--gpupack PATH] [--swarm PATH] [--instances N] [--services N]
//            [--replicas N] [--strategy none|random|spread|binpack] [--concurrency N] [--idle-s S]
//            [--churn-pct P] [--churn-s S] [--sample-s S] [--timeout-s S] [--dir DIR] [--keep]
//        node bench/services_scale.mjs --attach URL --server-pid PID --play-agent --cluster NAME --family NAME
//            [--services N] [--replicas N] [--strategy ...] [--concurrency N] [--timeout-s S]
// Defaults: build-bench/gpupack and build-bench/bench/agent_swarm (else the same under build/), 10000 instances,
// 1000 services x 4 replicas, no strategy (gpupack's default for a shared task: binpack(gpuMemory)), 16
// connections, 30 s idle, 10 % a minute for 120 s, no sample during the churn, 300 s to reach a steady state.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { call, launch, ok, pool, removeTempDir } from '../tests/integration/harness.mjs';
import { spawnSwarm } from './swarm_process.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const built = (rel) => [path.join(root, 'build-bench', rel), path.join(root, 'build', rel)].find((p) => fs.existsSync(p))
  ?? path.join(root, 'build-bench', rel);
const { values: opt } = parseArgs({
  options: {
    gpupack: { type: 'string', default: built('gpupack') },
    swarm: { type: 'string', default: built('bench/agent_swarm') },
    instances: { type: 'string', default: '10000' },
    services: { type: 'string', default: '1000' },
    replicas: { type: 'string', default: '4' },
    strategy: { type: 'string', default: 'none' },
    concurrency: { type: 'string', default: '16' },
    'idle-s': { type: 'string', default: '30' },
    'churn-pct': { type: 'string', default: '10' },
    'churn-s': { type: 'string', default: '120' },
    'sample-s': { type: 'string', default: '0' },
    'timeout-s': { type: 'string', default: '300' },
    attach: { type: 'string' },
    'server-pid': { type: 'string' },
    'play-agent': { type: 'boolean', default: false },
    cluster: { type: 'string', default: 'swarm' },
    family: { type: 'string' },
    dir: { type: 'string', default: process.env.TMPDIR || '/tmp' },
    keep: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (opt.help) {
  const text = fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n');
  const end = text.findIndex((l, i) => i > 0 && !l.startsWith('//'));
  console.log(text.slice(1, end).map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
  process.exit(0);
}
function fail(message) {
  console.error(`services_scale: ${message}`);
  process.exit(2);
}
function intOpt(name, lo, hi) {
  const v = Number(opt[name]);
  if (!Number.isInteger(v) || v < lo || v > hi) fail(`--${name} must be an integer in ${lo}..${hi}`);
  return v;
}
const INSTANCES = intOpt('instances', 1, 60000);
const SERVICES = intOpt('services', 0, 5000);  // 0: a control run, the same phases without a service
const REPLICAS = intOpt('replicas', 0, 5000);
const CONCURRENCY = intOpt('concurrency', 1, 256);
const IDLE_S = intOpt('idle-s', 1, 600);
const CHURN_PCT = Number(opt['churn-pct']);
if (!(CHURN_PCT >= 0 && CHURN_PCT <= 100)) fail('--churn-pct must be 0..100 (% of the replicas a minute)');
const CHURN_S = intOpt('churn-s', 0, 1800);
const SAMPLE_S = intOpt('sample-s', 0, 600);
const TIMEOUT_S = intOpt('timeout-s', 1, 3600);
const STRATEGIES = {
  none: undefined,
  random: [{ type: 'random' }],
  spread: [{ type: 'spread', field: 'instanceId' }],
  binpack: [{ type: 'binpack', field: 'gpuMemory' }],
};
if (!(opt.strategy in STRATEGIES)) fail(`--strategy must be one of ${Object.keys(STRATEGIES).join(', ')}`);
const PER_SWARM = 2500;
const DESCRIBE_IN_FLIGHT = 4;
const commandLine = ['node', path.relative(process.cwd(), fileURLToPath(import.meta.url)), ...process.argv.slice(2)].join(' ');
const names = Array.from({ length: SERVICES }, (_, i) => `svc-${String(i).padStart(4, '0')}`);
const progress = (what) => console.error(`services_scale: ${new Date().toISOString()} ${what}`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const now = () => performance.now();

// ---- measuring --------------------------------------------------------------------------------------------------
// threadSeconds: each thread's run time (schedstat, ns) in s, by thread id; empty once the process is gone.
function threadSeconds(pid) {
  const out = new Map();
  let tasks = [];
  try {
    tasks = fs.readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tasks) {
    try {
      out.set(Number(tid), Number(fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]) / 1e9);
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return out;
}
// cpuSeconds: the process's threads' run time, in s; 0 once it is gone.
const cpuSeconds = (pid) => [...threadSeconds(pid).values()].reduce((a, b) => a + b, 0);
function memory(pid) {
  const out = {};
  for (const line of fs.readFileSync(`/proc/${pid}/status`, 'utf8').split('\n')) {
    const m = /^(VmRSS|VmHWM|Threads):\s+(\d+)/.exec(line);
    if (m) out[m[1]] = Number(m[2]);
  }
  return { rssMiB: out.VmRSS / 1024, hwmMiB: out.VmHWM / 1024, threads: out.Threads };
}
const loadavg = () => fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const selfCpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};
function quantiles(values) {
  const v = [...values].sort((a, b) => a - b);
  const at = (p) => (v.length ? v[Math.min(v.length - 1, Math.ceil(p * v.length) - 1)] : 0);
  return { n: v.length, p50: at(0.5), p90: at(0.9), p99: at(0.99), max: v.length ? v[v.length - 1] : 0 };
}

// swarmCounters: the swarms' counters since their start, summed: heartbeats sent and acked, assigns and stops
// received, tasks crashed. Each swarm answers SIGUSR1 with a "counters N: ..." line (bench/swarm_serve.h).
const COUNTERS_LINE = /^counters \d+: heartbeats (\d+) acked (\d+) assigns (\d+) stops (\d+) crashes (\d+)$/gm;
async function swarmCounters(swarms) {
  const sum = { heartbeats: 0, acked: 0, assigns: 0, stops: 0, crashes: 0 };
  if (!swarms.length) return sum;
  const seen = swarms.map((s) => s.countersSeen ?? 0);
  for (const s of swarms) s.child.kill('SIGUSR1');
  const deadline = now() + 10000;
  for (;;) {
    const lines = swarms.map((s) => [...s.output.matchAll(COUNTERS_LINE)]);
    if (lines.every((l, i) => l.length > seen[i])) {
      swarms.forEach((s, i) => (s.countersSeen = lines[i].length));
      for (const l of lines) Object.keys(sum).forEach((k, i) => (sum[k] += Number(l.at(-1)[i + 1])));
      return sum;
    }
    if (now() > deadline) throw new Error('a swarm printed no counters within 10 s of SIGUSR1');
    await sleep(10);
  }
}

// Phase: the server's (and the swarms' and this driver's) CPU over a stretch of wall time, and what the swarms'
// counters did meanwhile (read just outside the CPU figure).
class Phase {
  static async begin(name, serverPid, swarms) {
    const p = new Phase();
    Object.assign(p, { name, serverPid, swarms });
    p.counters0 = await swarmCounters(swarms);
    p.t0 = now();
    p.threads0 = threadSeconds(serverPid);
    p.server0 = [...p.threads0.values()].reduce((a, b) => a + b, 0);
    p.swarm0 = swarms.reduce((s, w) => s + cpuSeconds(w.child.pid), 0);
    p.self0 = selfCpu();
    p.load0 = loadavg();
    return p;
  }
  async end(extra = {}) {
    this.wallS = (now() - this.t0) / 1000;
    const threads1 = threadSeconds(this.serverPid);
    this.serverS = [...threads1.values()].reduce((a, b) => a + b, 0) - this.server0;
    // Each server thread's share, by thread id (creation order), in s.
    this.threads = [...threads1].sort((a, b) => a[0] - b[0]).map(([tid, s]) => s - (this.threads0.get(tid) ?? 0));
    this.swarmS = this.swarms.reduce((s, w) => s + cpuSeconds(w.child.pid), 0) - this.swarm0;
    this.selfS = selfCpu() - this.self0;
    this.load1 = loadavg();
    this.mem = memory(this.serverPid);
    const c1 = await swarmCounters(this.swarms);
    this.counts = Object.fromEntries(Object.entries(c1).map(([k, v]) => [k, v - this.counters0[k]]));
    Object.assign(this, extra);
    return this;
  }
}

// ---- the services -----------------------------------------------------------------------------------------------
const steady = (s) =>
  s.status === 'ACTIVE' && s.desiredCount === REPLICAS && s.runningCount === REPLICAS && s.pendingCount === 0 &&
  s.deployments?.length === 1 && s.deployments[0].rolloutState === 'COMPLETED';

async function createServices(endpoint, cluster, family) {
  const latencies = [];
  const strategy = STRATEGIES[opt.strategy];
  await pool(SERVICES, CONCURRENCY, async (i) => {
    const body = { cluster, serviceName: names[i], taskDefinition: family, desiredCount: REPLICAS };
    if (strategy) body.placementStrategy = strategy;
    const t = now();
    const r = await call(endpoint, 'CreateService', body, { timeoutMs: 60000 });
    latencies.push(now() - t);
    if (r.status !== 200) throw new Error(`CreateService ${names[i]} answered ${r.status}: ${r.text}`);
  });
  return quantiles(latencies);
}

// describeAll: every service (DescribeServices, 10 names a call, DESCRIBE_IN_FLIGHT calls at once).
async function describeAll(endpoint, cluster) {
  const out = [];
  await pool(Math.ceil(SERVICES / 10), DESCRIBE_IN_FLIGHT, async (k) => {
    const r = await ok(endpoint, 'DescribeServices', { cluster, services: names.slice(10 * k, 10 * k + 10) });
    if (r.failures?.length) throw new Error(`DescribeServices failures: ${JSON.stringify(r.failures[0])}`);
    out.push(...r.services);
  });
  return out;
}

// steadyEventAt: createdAt (epoch ms) of the service's latest "has reached a steady state" event, or 0.
function steadyEventAt(s) {
  const e = (s.events ?? []).find((ev) => ev.message.includes('has reached a steady state'));
  return e ? Math.round(new Date(typeof e.createdAt === 'number' ? e.createdAt * 1000 : e.createdAt).getTime()) : 0;
}

// waitSteady polls until every service is steady (bounded by --timeout-s); `each` runs before every round (the
// played agent). Answers the last round's services, the rounds, and when the poll saw them all steady.
async function waitSteady(endpoint, cluster, each = async () => {}) {
  const deadline = now() + TIMEOUT_S * 1000;
  let rounds = 0;
  let last = [];
  const roundMs = [];
  while (now() < deadline) {
    await each();
    const t = now();
    last = await describeAll(endpoint, cluster);
    roundMs.push(now() - t);
    ++rounds;
    if (last.length === SERVICES && last.every(steady)) return { services: last, rounds, seenAt: now(), roundMs };
    await sleep(100);
  }
  const notSteady = last.filter((s) => !steady(s));
  throw new Error(`${notSteady.length} of ${SERVICES} services not steady after ${TIMEOUT_S} s; first: ` +
    JSON.stringify(notSteady[0] && { ...notSteady[0], events: notSteady[0].events?.slice(0, 3) }));
}

// instancesHolding: how many instances the cluster's live tasks run on (ListTasks, DescribeTasks 100 a call).
async function instancesHolding(endpoint, cluster) {
  const arns = [];
  let nextToken;
  for (let page = 0; page < 10000; ++page) {
    const r = await ok(endpoint, 'ListTasks', { cluster, desiredStatus: 'RUNNING', maxResults: 100, nextToken });
    arns.push(...r.taskArns);
    nextToken = r.nextToken;
    if (!nextToken) break;
  }
  const instances = new Set();
  await pool(Math.ceil(arns.length / 100), DESCRIBE_IN_FLIGHT, async (k) => {
    const r = await ok(endpoint, 'DescribeTasks', { cluster, tasks: arns.slice(100 * k, 100 * k + 100) });
    for (const t of r.tasks) instances.add(t.containerInstanceArn);
  });
  return { tasks: arns.length, instances: instances.size };
}

function replicaCounts(services) {
  let running = 0;
  let pending = 0;
  let notSteady = 0;
  for (const s of services) {
    running += s.runningCount;
    pending += s.pendingCount;
    notSteady += steady(s) ? 0 : 1;
  }
  return { running, pending, notSteady };
}

// ---- --attach --play-agent: services on someone else's server, their tasks reported RUNNING by hand ------------
async function playAgent() {
  if (!opt['server-pid'] || !opt.family) fail('--attach needs --server-pid and --family');
  const endpoint = opt.attach;
  const cluster = opt.cluster;
  const pid = Number(opt['server-pid']);
  const phase = await Phase.begin('create', pid, []);
  const wall0 = Date.now();
  const create = await createServices(endpoint, cluster, opt.family);
  let reported = 0;
  // The played agent: every PENDING task of the cluster is reported RUNNING (only the services' tasks exist yet).
  const report = async () => {
    const arns = [];
    let nextToken;
    for (let page = 0; page < 10000; ++page) {
      const r = await ok(endpoint, 'ListTasks', { cluster, desiredStatus: 'RUNNING', maxResults: 100, nextToken });
      arns.push(...r.taskArns);
      nextToken = r.nextToken;
      if (!nextToken) break;
    }
    const pending = [];
    await pool(Math.ceil(arns.length / 100), DESCRIBE_IN_FLIGHT, async (k) => {
      const r = await ok(endpoint, 'DescribeTasks', { cluster, tasks: arns.slice(100 * k, 100 * k + 100) });
      for (const t of r.tasks) if (t.lastStatus === 'PENDING') pending.push(t.taskArn);
    });
    await pool(pending.length, CONCURRENCY, async (i) => {
      await ok(endpoint, 'SubmitTaskStateChange', { cluster, task: pending[i], status: 'RUNNING' });
    });
    reported += pending.length;
  };
  const seen = await waitSteady(endpoint, cluster, report);
  await phase.end();
  const counts = replicaCounts(seen.services);
  console.log(`services         ${SERVICES} x ${REPLICAS} replicas of ${opt.family} on cluster ${cluster} ` +
    `(strategy ${opt.strategy}), created from ${CONCURRENCY} connections (CreateService p50 ` +
    `${create.p50.toFixed(1)} ms, p99 ${create.p99.toFixed(1)} ms); ${reported} tasks reported RUNNING by ` +
    `SubmitTaskStateChange; all steady after ${((seen.seenAt - phase.t0) / 1000).toFixed(1)} s ` +
    `(${counts.running} replicas running), server CPU ${phase.serverS.toFixed(2)} s, started ` +
    new Date(wall0).toISOString());
}

// ---- the full benchmark -----------------------------------------------------------------------------------------
// startSwarm runs one agent_swarm in serve mode attached to the server and resolves once it printed "ready".
function startSwarm(endpoint, serverPid, agents, offset, work, index) {
  const args = ['--server', endpoint, '--server-pid', String(serverPid), '--agents', String(agents),
    '--agent-offset', String(offset), '--baseline-s', '0', '--serve-s', '3600',
    '--crash-per-min', String(CHURN_PCT), '--dir', work];
  return spawnSwarm(opt.swarm, args, { name: `swarm ${index}`, readyTimeoutMs: 300000 });
}

async function benchmark() {
  for (const [what, p] of [['gpupack', opt.gpupack], ['agent_swarm', opt.swarm]])
    if (!fs.existsSync(p)) fail(`no ${what} binary at ${p} (build it, or pass --${what === 'gpupack' ? 'gpupack' : 'swarm'})`);
  const work = fs.mkdtempSync(path.join(opt.dir, 'gpupack-services-scale-'));
  process.env.GPUPACK_BIN = opt.gpupack; // harness.launch reads it
  const serverArgs = ['server', '--listen', '127.0.0.1:0', '--db', path.join(work, 'gpupack.db'), '--log-level', 'warn',
    '--max-agent-channels', String(INSTANCES + 100)];
  const server = await launch(serverArgs, { what: 'gpupack server' });
  const swarms = [];
  const started = new Date();
  const loadStart = loadavg();
  try {
    const endpoint = server.endpoint;
    const pid = server.child.pid;
    const mem0 = memory(pid);
    // ---- agents
    const t0 = now();
    for (let offset = 0, i = 0; offset < INSTANCES; offset += PER_SWARM, ++i)
      swarms.push(startSwarm(endpoint, pid, Math.min(PER_SWARM, INSTANCES - offset), offset, work, i));
    await Promise.all(swarms.map((s) => s.ready));
    const connectS = (now() - t0) / 1000;
    progress(`${INSTANCES} agents connected in ${connectS.toFixed(1)} s; idle for ${IDLE_S} s`);
    const memAgents = memory(pid);
    await sleep(5000); // the last welcomes' commits and the first heartbeats settle
    const idle = await Phase.begin('idle, agents only', pid, swarms);
    await sleep(IDLE_S * 1000);
    await idle.end();

    // ---- create
    const family = 'svc-shared-2g';
    await ok(endpoint, 'RegisterTaskDefinition', {
      family,
      containerDefinitions: [{
        name: 'main', image: 'bench/infer:latest', essential: true, cpu: 256, memory: 1024,
        entryPoint: ['/bin/sh', '-c'], command: ['exec sleep 3600'],
        resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { memory: 2048 } } }],
      }],
    });
    progress(`creating ${SERVICES} services`);
    const create = await Phase.begin('create -> all steady', pid, swarms);
    const wall0 = Date.now();
    const createLatency = await createServices(endpoint, opt.cluster, family);
    const createdS = (now() - create.t0) / 1000;
    const seen = await waitSteady(endpoint, opt.cluster);
    await create.end();
    const lastSteadyAt = Math.max(0, ...seen.services.map(steadyEventAt));
    const steadyS = lastSteadyAt ? (lastSteadyAt - wall0) / 1000 : NaN;
    const seenS = (seen.seenAt - create.t0) / 1000;
    const memSteady = memory(pid);
    const holding = await instancesHolding(endpoint, opt.cluster);

    // ---- steady, idle
    progress(`all steady after ${seenS.toFixed(1)} s; idle for ${IDLE_S} s`);
    const still = await Phase.begin('steady, idle', pid, swarms);
    await sleep(IDLE_S * 1000);
    await still.end();
    const afterIdle = replicaCounts(await describeAll(endpoint, opt.cluster));

    // ---- churn
    let churn;
    let recover;
    const samples = [];
    if (CHURN_S > 0 && CHURN_PCT > 0) {
      progress(`crashing ${CHURN_PCT} % of the replicas a minute for ${CHURN_S} s`);
      for (const s of swarms) s.child.kill('SIGUSR2');
      churn = await Phase.begin('churn', pid, swarms);
      const churnEnd = now() + CHURN_S * 1000;
      let sampleS = 0;
      while (now() < churnEnd) {
        await sleep(Math.min(SAMPLE_S ? SAMPLE_S * 1000 : Infinity, churnEnd - now()));
        if (now() >= churnEnd - 100) break;
        const t = now();
        const c = replicaCounts(await describeAll(endpoint, opt.cluster));
        sampleS += (now() - t) / 1000;
        samples.push({ atS: (t - churn.t0) / 1000, ...c });
      }
      await churn.end({ sampleS });
      // Still crashing: what the services run at the end of the window (outside the CPU figure).
      samples.push({ atS: (now() - churn.t0) / 1000, ...replicaCounts(await describeAll(endpoint, opt.cluster)) });
      for (const s of swarms) s.child.kill('SIGUSR2');
      progress(`churn done, ${samples.at(-1).running} replicas running; waiting for every service to be steady`);
      recover = await Phase.begin('recover', pid, swarms);
      const back = await waitSteady(endpoint, opt.cluster);
      await recover.end({ seenS: (back.seenAt - recover.t0) / 1000, rounds: back.rounds });
    }

    // ---- the swarms' own reports
    for (const s of swarms) s.child.kill('SIGTERM');
    await Promise.all(swarms.map((s) => s.exited));
    const errors = swarms.map((s) => /(\d+) error messages(.*)$/m.exec(s.output)).filter((m) => m && m[1] !== '0');
    const memEnd = memory(pid);

    // ---- report
    const cores = (p) => p.serverS / p.wallS;
    const phases = [idle, create, still, churn, recover].filter(Boolean);
    console.log(`gpupack services at scale (${started.toISOString()})`);
    console.log(`command          ${commandLine}`);
    console.log(`machine          ${os.cpus().length} CPUs, ${os.cpus()[0]?.model}, ${os.type()} ${os.release()}; ` +
      `load average ${loadStart} at the start`);
    console.log(`server           ${opt.gpupack} ${serverArgs.join(' ')} (pid ${pid})`);
    console.log(`agents           ${INSTANCES} simulated (agent_swarm --serve-s, ${swarms.length} processes of at most ` +
      `${PER_SWARM}; 8 GPUs x 81,559 MiB, 65,536 CPU, 262,144 MiB each), heartbeat every 5 s, registered, ` +
      `connected and welcomed in ${connectS.toFixed(1)} s`);
    console.log(`services         ${SERVICES} x ${REPLICAS} replicas of ${family} (256 CPU, 1,024 MiB, nvidiaMps 2,048 ` +
      `MiB), strategy ${opt.strategy === 'none' ? 'none given (binpack(gpuMemory), the default for shared tasks)' : JSON.stringify(STRATEGIES[opt.strategy])}; ` +
      `CreateService from ${CONCURRENCY} connections, DescribeServices 10 a call, ${DESCRIBE_IN_FLIGHT} in flight`);
    console.log('');
    console.log(`create           ${SERVICES} CreateService answered in ${createdS.toFixed(2)} s (p50 ${createLatency.p50.toFixed(1)} ms, ` +
      `p99 ${createLatency.p99.toFixed(1)} ms, max ${createLatency.max.toFixed(1)} ms); the agents got ` +
      `${create.counts.assigns} assigns`);
    console.log(`all steady       ${steadyS.toFixed(2)} s from the first CreateService to the last "reached a steady state" ` +
      `event; the poll saw them all steady at ${seenS.toFixed(2)} s (${seen.rounds} rounds of ${Math.ceil(SERVICES / 10)} ` +
      `DescribeServices, p50 ${quantiles(seen.roundMs).p50.toFixed(0)} ms a round)`);
    console.log(`placed on        ${holding.instances} instances (${holding.tasks} tasks, once all were steady)`);
    console.log(`after idle       ${afterIdle.running} replicas running, ${afterIdle.pending} pending, ${afterIdle.notSteady} services not steady`);
    if (churn) {
      const c = churn.counts;
      console.log(`churn            ${c.crashes} replicas crashed by the agents in ${churn.wallS.toFixed(1)} s ` +
        `(${(c.crashes / churn.wallS * 60).toFixed(1)} a minute, ${(100 * c.crashes / churn.wallS * 60 / Math.max(1, SERVICES * REPLICAS)).toFixed(1)} % ` +
        `of ${SERVICES * REPLICAS}); the agents got ${c.assigns} assigns meanwhile (replacements) and ${c.stops} stops`);
      for (const s of samples)
        console.log(`  at ${s.atS.toFixed(0).padStart(4)} s        ${s.running} replicas running, ${s.pending} pending, ${s.notSteady} services not steady`);
      console.log(`recover          every service steady again ${recover.seenS.toFixed(1)} s after crashing stopped ` +
        `(${recover.rounds} polls; ${recover.counts.assigns} assigns meanwhile)`);
    }
    console.log(`server memory    VmRSS ${mem0.rssMiB.toFixed(1)} MiB empty, ${memAgents.rssMiB.toFixed(1)} MiB with the agents, ` +
      `${memSteady.rssMiB.toFixed(1)} MiB with the services steady, ${memEnd.rssMiB.toFixed(1)} MiB at the end; VmHWM ` +
      `${memEnd.hwmMiB.toFixed(1)} MiB; ${memEnd.threads} threads`);
    console.log(`swarm errors     ${errors.length ? errors.map((m) => m[0]).join('; ') : 'none'}`);
    console.log('');
    console.log(`  ${'phase'.padEnd(22)} ${'wall s'.padStart(6)} ${'server s'.padStart(9)} ${'cores'.padStart(7)} ` +
      `${'hb/s'.padStart(6)} ${'µs/hb'.padStart(6)} ${'swarms s'.padStart(8)} ${'driver'.padStart(6)}   load average before -> after`);
    for (const p of phases) {
      const note = p === churn && samples.length > 1
        ? `  (incl. ${samples.length - 1} DescribeServices rounds, ${churn.sampleS.toFixed(1)} s of them)` : '';
      console.log(`  ${p.name.padEnd(22)} ${p.wallS.toFixed(1).padStart(6)} ${p.serverS.toFixed(3).padStart(9)} ` +
        `${cores(p).toFixed(4).padStart(7)} ${(p.counts.acked / p.wallS).toFixed(0).padStart(6)} ` +
        `${(p.counts.acked ? 1e6 * p.serverS / p.counts.acked : 0).toFixed(0).padStart(6)} ` +
        `${p.swarmS.toFixed(2).padStart(8)} ${p.selfS.toFixed(2).padStart(6)}   ${p.load0} -> ${p.load1}${note}`);
    }
    console.log('  server s: the server threads\' run time (/proc/PID/task/*/schedstat); cores = server s / wall s; hb/s:');
    console.log('  heartbeats the swarms got acked a second; µs/hb: server s per heartbeat acked (everything included);');
    console.log('  swarms s, driver: their own CPU seconds');
    console.log('');
    const labels = phases[0].threads.length === 6 ? ' (this build: main, group committer, writer, channel watchdog, io, io)' : '';
    console.log(`  server CPU by thread, s (threads by id, in the order the server started them${labels}):`);
    for (const p of phases) console.log(`  ${p.name.padEnd(22)} ${p.threads.map((t) => t.toFixed(3).padStart(7)).join(' ')}`);
  } finally {
    for (const s of swarms) if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
    await server.stop();
    if (opt.keep) console.error(`kept ${work}`);
    else removeTempDir(work);
  }
}

if (opt.attach) {
  if (!opt['play-agent']) fail('--attach needs --play-agent (the only thing it does on an attached server)');
  await playAgent();
} else {
  await benchmark();
}
