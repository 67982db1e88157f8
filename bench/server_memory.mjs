#!/usr/bin/env node
// server_memory: the `gpupack server`'s memory at the scale of the server-memory target ("server memory, 10,000 instances /
// 80,000 GPUs / 100,000 tasks: <= 300 MiB RSS"). A benchmark, never a test: it prints figures and their setup.
//
// It starts the real binary on a fresh SQLite file in a temporary directory, on loopback (--log-level warn), and
// through the ECS API only:
//   1. registers --instances container instances with 8 GPUs of 81,559 MiB each (RegisterContainerInstance with
//      platformDevices + gpuInfo, as the agent sends them; 196,608 CPU units, 2,000,000 MiB), no agent channel;
//   2. registers four shared task definitions (one container, 256 CPU units, 1,024 MiB, nvidiaMps memory 1,024,
//      2,048, 4,096 or 8,192 MiB of one GPU);
//   3. calls RunTask (count 10, the families in turn, no placementStrategy: the default random placement) from
//      --workers concurrent keep-alive connections until --tasks tasks exist, and reports every task of every
//      --running-every-th call RUNNING with SubmitTaskStateChange, as an agent would; the rest stay PENDING.
//      Capacity is far above what is asked, so a placement failure is a bug: the run stops and says so;
//   4. stops the server (SIGTERM) and starts it again on the same file, to measure the load path (--restarts
//      times, each a new process).
// With --with-agents every instance has its agent connected, as the target asks: the instances are registered
// by bench/agent_swarm processes (serve mode, at most 5,000 agents each, their channels on one io loop) attached
// to the server, each agent holding its channel with heartbeats at the welcome's interval; the RunTask calls then
// place the tasks on them (cluster "swarm", 8 GPUs of 81,559 MiB, 65,536 CPU units, 262,144 MiB each), each task
// is delivered over its agent's channel and the agent reports it RUNNING (--running-every does not apply: every
// task is RUNNING). The restart is not run then (the agents would have to follow it).
// At each milestone (empty, after the instances, every --milestone tasks, after the restart) it reads VmRSS,
// VmHWM, RssAnon and RssFile from /proc/<pid>/status, and the size of the database file and its WAL. Every loop
// is bounded by the counts above; every request goes to 127.0.0.1.
//
// Usage: node bench/server_memory.mjs [--gpupack PATH] [--instances N] [--tasks N] [--workers N]
//                                     [--running-every K] [--milestone N] [--restarts N] [--dir DIR] [--keep]
//                                     [--with-agents [--swarm PATH]]
// Defaults: build-bench/gpupack (the Release build), 10000 instances, 100000 tasks, 16 workers, every 2nd
// RunTask's tasks reported RUNNING (0: none), a milestone every 25000 tasks, 1 restart, the database under
// $TMPDIR or /tmp; the swarm: bench/agent_swarm beside the gpupack binary.
// Figures and how to read them: docs/benchmarks.md, section 5.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { spawnSwarm } from './swarm_process.mjs';
import { PLAY_AGENT, call, ok, pool, removeTempDir, sharedTaskDefinition, startServer } from '../tests/integration/harness.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { values: opt } = parseArgs({
  options: {
    gpupack: { type: 'string', default: path.join(root, 'build-bench', 'gpupack') },
    instances: { type: 'string', default: '10000' },
    tasks: { type: 'string', default: '100000' },
    workers: { type: 'string', default: '16' },
    'running-every': { type: 'string', default: '2' },
    milestone: { type: 'string', default: '25000' },
    restarts: { type: 'string', default: '1' },
    dir: { type: 'string', default: process.env.TMPDIR || '/tmp' },
    keep: { type: 'boolean', default: false },
    'with-agents': { type: 'boolean', default: false },
    swarm: { type: 'string', default: '' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (opt.help) {
  const text = fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n');
  const end = text.findIndex((l, i) => i > 0 && !l.startsWith('//'));
  console.log(text.slice(1, end).map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
  process.exit(0);
}
function intOpt(name, lo, hi) {
  const v = Number(opt[name]);
  if (!Number.isInteger(v) || v < lo || v > hi) {
    console.error(`server_memory: --${name} must be an integer in ${lo}..${hi}`);
    process.exit(2);
  }
  return v;
}
const INSTANCES = intOpt('instances', 1, 100000);
const TASKS = intOpt('tasks', 0, 1000000);
const WORKERS = intOpt('workers', 1, 256);
const RUNNING_EVERY = intOpt('running-every', 0, 1000000);
const MILESTONE = intOpt('milestone', 1, 1000000);
const RESTARTS = intOpt('restarts', 1, 20);
const GPUS_PER_INSTANCE = 8;
const GPU_MIB = 81559;
const INSTANCE_CPU = 196608;
const INSTANCE_MEM = 2000000;
const TASK_GPU_MIB = [1024, 2048, 4096, 8192];
const PER_CALL = 10;
const WITH_AGENTS = opt['with-agents'];
const PER_SWARM = 5000;
const cluster = WITH_AGENTS ? 'swarm' : 'memory';
const swarmPath = opt.swarm || path.join(path.dirname(opt.gpupack), 'bench', 'agent_swarm');
const commandLine = ['node', path.relative(process.cwd(), fileURLToPath(import.meta.url)), ...process.argv.slice(2)].join(' ');

if (!fs.existsSync(opt.gpupack)) {
  console.error(`server_memory: no gpupack binary at ${opt.gpupack} (build it, or pass --gpupack)`);
  process.exit(2);
}
if (WITH_AGENTS && !fs.existsSync(swarmPath)) {
  console.error(`server_memory: --with-agents needs agent_swarm at ${swarmPath} (build the target, or pass --swarm)`);
  process.exit(2);
}
process.env.GPUPACK_BIN = opt.gpupack; // harness.startServer reads it

const work = fs.mkdtempSync(path.join(opt.dir, 'gpupack-server-memory-'));
const db = path.join(work, 'gpupack.db');
let server;
const swarms = [];
async function stopSwarms() {
  for (const w of swarms) w.child.kill('SIGTERM');
  await Promise.all(swarms.map((w) => w.exited));
  swarms.length = 0;
}
async function cleanup() {
  await stopSwarms();
  if (server) await server.stop();
  if (opt.keep) console.error(`kept ${work}`);
  else removeTempDir(work);
}

// ---- measuring ------------------------------------------------------------------------------------------------
const MiB = 1024 * 1024;
function procStatus(pid) {
  const out = {};
  for (const line of fs.readFileSync(`/proc/${pid}/status`, 'utf8').split('\n')) {
    const m = /^(VmRSS|VmHWM|RssAnon|RssFile|Threads):\s+(\d+)/.exec(line);
    if (m) out[m[1]] = Number(m[2]); // kB, except Threads
  }
  return out;
}
function fileSize(p) {
  try {
    return fs.statSync(p).size;
  } catch {
    return 0;
  }
}
const milestones = [];
const phases = [];
function milestone(name, tasks) {
  const s = procStatus(server.child.pid);
  milestones.push({
    name,
    tasks,
    rss: s.VmRSS / 1024,
    hwm: s.VmHWM / 1024,
    anon: s.RssAnon / 1024,
    file: s.RssFile / 1024,
    threads: s.Threads,
    db: fileSize(db) / MiB,
    wal: fileSize(db + '-wal') / MiB,
  });
}
async function phase(name, fn) {
  const t0 = process.hrtime.bigint();
  const cpu0 = serverCpuSeconds();
  const r = await fn();
  phases.push({ name, seconds: Number(process.hrtime.bigint() - t0) / 1e9, cpu: serverCpuSeconds() - cpu0 });
  return r;
}
const HZ = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
function serverCpuSeconds() {
  const fields = fs.readFileSync(`/proc/${server.child.pid}/stat`, 'utf8').replace(/^.*\) /, '').split(' ');
  return (Number(fields[11]) + Number(fields[12])) / HZ; // utime + stime (fields 14 and 15 of stat)
}

const hex = (n, width) => n.toString(16).padStart(width, '0');
function instanceBody(i) {
  const platformDevices = [];
  for (let g = 0; g < GPUS_PER_INSTANCE; ++g)
    platformDevices.push({ id: `GPU-${hex(i, 8)}-0000-4000-8000-${hex(g, 12)}`, type: 'GPU', gpuInfo: { memoryInMiB: GPU_MIB } });
  return {
    cluster,
    totalResources: [
      { name: 'CPU', type: 'INTEGER', integerValue: INSTANCE_CPU },
      { name: 'MEMORY', type: 'INTEGER', integerValue: INSTANCE_MEM },
    ],
    platformDevices,
    versionInfo: { agentVersion: 'bench' },
  };
}

// startSwarm: one agent_swarm in serve mode attached to the server, registering `agents` instances from `offset`
// and holding their channels; resolves once it printed "ready:" (all registered, connected and welcomed).
function startSwarm(agents, offset) {
  const args = ['--server', server.endpoint, '--server-pid', String(server.child.pid), '--io-threads', '2', '--agents',
    String(agents), '--agent-offset', String(offset), '--baseline-s', '0', '--serve-s', '3600', '--dir', work];
  const w = spawnSwarm(swarmPath, args, { name: `agent_swarm (agents ${offset}..)` });
  swarms.push(w);
  return w.ready;
}

// ---- the run --------------------------------------------------------------------------------------------------
const startedAt = new Date();
const loadBefore = fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const counts = { runTaskCalls: 0, placed: 0, running: 0, reports: 0 };
const restartSeconds = [];
let described;
let connected;  // --with-agents: DescribeClusters with every agent connected, at the end
const describeCluster = async () => (await ok(server.endpoint, 'DescribeClusters', { clusters: [cluster] })).clusters[0];
try {
  server = await startServer({ db, extraArgs: WITH_AGENTS ? ['--max-agent-channels', String(INSTANCES + 100)] : PLAY_AGENT });
  milestone('empty', 0);

  if (WITH_AGENTS) {
    // One swarm at a time: each registers its instances and opens their channels before the next starts.
    await phase(`register ${INSTANCES} instances, connect their agents`, async () => {
      for (let offset = 0; offset < INSTANCES; offset += PER_SWARM) await startSwarm(Math.min(PER_SWARM, INSTANCES - offset), offset);
    });
  } else {
    await phase(`register ${INSTANCES} instances`, async () => {
      await ok(server.endpoint, 'CreateCluster', { clusterName: cluster });
      await pool(INSTANCES, WORKERS, (i) => ok(server.endpoint, 'RegisterContainerInstance', instanceBody(i)));
    });
  }
  const families = [];
  for (const mib of TASK_GPU_MIB) {
    const def = sharedTaskDefinition(`memory-shared-${mib}`, mib);
    def.containerDefinitions[0].cpu = 256;
    def.containerDefinitions[0].memory = 1024;
    def.containerDefinitions[0].image = 'bench/infer:latest';
    families.push((await ok(server.endpoint, 'RegisterTaskDefinition', def)).taskDefinition.taskDefinitionArn);
  }
  milestone(`${INSTANCES} instances${WITH_AGENTS ? ' (agents connected)' : ''}, ${families.length} task definitions`, 0);

  // RunTask calls are numbered; call c places min(10, TASKS - 10c) tasks, so the total is exact.
  const calls = Math.ceil(TASKS / PER_CALL);
  let nextMark = Math.min(MILESTONE, TASKS);
  const runOne = async (c) => {
    const count = Math.min(PER_CALL, TASKS - c * PER_CALL);
    const r = await call(server.endpoint, 'RunTask', { cluster, taskDefinition: families[c % families.length], count });
    ++counts.runTaskCalls;
    if (r.status !== 200) throw new Error(`RunTask answered ${r.status}: ${r.text}`);
    if (r.json.failures.length || r.json.tasks.length !== count)
      throw new Error(`RunTask placed ${r.json.tasks.length} of ${count}: ${JSON.stringify(r.json.failures).slice(0, 400)}`);
    counts.placed += count;
    if (!WITH_AGENTS && RUNNING_EVERY && c % RUNNING_EVERY === 0) {
      for (const t of r.json.tasks) {
        await ok(server.endpoint, 'SubmitTaskStateChange', { cluster, task: t.taskArn, status: 'RUNNING' });
        ++counts.reports;
        ++counts.running;
      }
    }
  };
  // Milestones between RunTask rounds: each round of MILESTONE tasks runs to completion, then the RSS is read.
  let done = 0;
  while (done < calls) {
    const end = Math.min(calls, Math.ceil(nextMark / PER_CALL));
    const first = done;
    await phase(`RunTask ${first * PER_CALL}..${Math.min(TASKS, end * PER_CALL)} tasks`, () => pool(end - first, WORKERS, (k) => runOne(first + k)));
    done = end;
    if (WITH_AGENTS) counts.running = (await describeCluster()).runningTasksCount;
    milestone(`${counts.placed} tasks (${counts.running} RUNNING)`, counts.placed);
    nextMark = Math.min(TASKS, nextMark + MILESTONE);
  }
  if (WITH_AGENTS) {
    // A last look after the agents' reports settled: the RUNNING count and the RSS with every channel still open.
    connected = await describeCluster();
    for (let i = 0; i < 100 && connected.runningTasksCount < counts.placed; ++i) {
      await new Promise((r) => setTimeout(r, 200));
      connected = await describeCluster();
    }
    counts.running = connected.runningTasksCount;
    milestone(`${counts.placed} tasks (${counts.running} RUNNING), reports settled`, counts.placed);
    await stopSwarms();
  }
  const t1 = process.hrtime.bigint();
  await server.stop();
  phases.push({ name: 'SIGTERM to exit', seconds: Number(process.hrtime.bigint() - t1) / 1e9 });
  server = undefined;
  // Restarts: each one a fresh process on the same file, so the load path's peak is seen RESTARTS times.
  for (let r = 1; r <= (WITH_AGENTS ? 0 : RESTARTS); ++r) {
    if (server) await server.stop();
    server = undefined;
    const t0 = process.hrtime.bigint();
    server = await startServer({ db, startTimeoutMs: 600000, extraArgs: PLAY_AGENT });
    restartSeconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
    const tag = RESTARTS > 1 ? ` #${r}` : '';
    milestone(`restarted${tag} on the same file (serving)`, counts.placed);
    described = (await ok(server.endpoint, 'DescribeClusters', { clusters: [cluster] })).clusters[0];
    milestone(`restarted${tag}, after DescribeClusters`, counts.placed);
  }
} catch (e) {
  console.error(`server_memory: ${e.message}`);
  if (server) console.error(server.stderr.slice(-2000));
  await cleanup();
  process.exit(1);
}
await cleanup();

// ---- report ---------------------------------------------------------------------------------------------------
const loadAfter = fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const cpuModel = (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.*)$/m) ?? [])[1] ?? 'unknown';
let code = 'unknown';
try {
  code = execFileSync('git', ['-C', root, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
  if (execFileSync('git', ['-C', root, 'status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' }).trim())
    code += ' + working-tree edits';
} catch {}
let fsType = '';
try {
  fsType = execFileSync('df', ['-T', opt.dir], { encoding: 'utf8' }).split('\n')[1].split(/\s+/)[1];
} catch {}
const f1 = (x) => x.toFixed(1);
const pad = (s, n) => String(s).padEnd(n);
const lpad = (s, n) => String(s).padStart(n);

const utc = (d) => d.toISOString().replace(/\.\d+Z$/, 'Z');
console.log(`gpupack server memory (started ${utc(startedAt)}, finished ${utc(new Date())})
command          ${commandLine}
code             ${code}, ${opt.gpupack}
machine          ${os.cpus().length} CPUs, ${cpuModel}, ${f1(os.totalmem() / 1024 ** 3)} GiB, ${os.type()} ${os.release()}
load average     before ${loadBefore}, after ${loadAfter} (1/5/15 min)
server           ${opt.gpupack} server --listen 127.0.0.1:0 --db ${db} --log-level warn
database on      ${fsType} (${opt.dir})
cluster          ${INSTANCES} instances x ${GPUS_PER_INSTANCE} GPUs of ${GPU_MIB} MiB = ${INSTANCES * GPUS_PER_INSTANCE} GPUs; ${WITH_AGENTS ? `65536 CPU units, 262144 MiB each, registered by ${Math.ceil(INSTANCES / PER_SWARM)} agent_swarm processes (${swarmPath}), every agent connected` : `${INSTANCE_CPU} CPU units, ${INSTANCE_MEM} MiB each`}
task definitions ${TASK_GPU_MIB.length} shared: 1 container, 256 CPU units, 1024 MiB, nvidiaMps memory ${TASK_GPU_MIB.join('/')} MiB
load             node ${process.version}, ${WORKERS} concurrent keep-alive connections; RunTask count ${PER_CALL}, default placement; ${WITH_AGENTS ? 'each task delivered to its agent, which reports it RUNNING' : RUNNING_EVERY ? `every ${RUNNING_EVERY === 1 ? '' : ordinal(RUNNING_EVERY) + ' '}call's tasks reported RUNNING` : 'no RUNNING reports'}
result           ${counts.placed} tasks placed by ${counts.runTaskCalls} RunTask calls, no placement failure; ${WITH_AGENTS ? `${counts.running} RUNNING (reported by the agents)` : `${counts.reports} SubmitTaskStateChange RUNNING`}
${WITH_AGENTS ? `connected        DescribeClusters at the end: ${connected.registeredContainerInstancesCount} instances, ${connected.runningTasksCount} RUNNING, ${connected.pendingTasksCount} PENDING; no restart (--with-agents)` : `after restart    DescribeClusters: ${described.registeredContainerInstancesCount} instances, ${described.runningTasksCount} RUNNING, ${described.pendingTasksCount} PENDING; serving ${restartSeconds.map(f1).join(', ')} s after exec`}
`);
function ordinal(n) {
  return n + (n % 10 === 2 && n % 100 !== 12 ? 'nd' : n % 10 === 3 && n % 100 !== 13 ? 'rd' : n % 10 === 1 && n % 100 !== 11 ? 'st' : 'th');
}

console.log(`${pad('milestone', 52)} ${lpad('VmRSS', 8)} ${lpad('VmHWM', 8)} ${lpad('RssAnon', 8)} ${lpad('RssFile', 8)} ${lpad('db', 8)} ${lpad('db-wal', 8)} ${lpad('threads', 8)}   (sizes in MiB)`);
for (const m of milestones)
  console.log(`${pad(m.name, 52)} ${lpad(f1(m.rss), 8)} ${lpad(f1(m.hwm), 8)} ${lpad(f1(m.anon), 8)} ${lpad(f1(m.file), 8)} ${lpad(f1(m.db), 8)} ${lpad(f1(m.wal), 8)} ${lpad(m.threads, 8)}`);
console.log('');
console.log(`${pad('phase', 52)} ${lpad('wall s', 8)} ${lpad('server CPU s', 13)}`);
for (const p of phases) console.log(`${pad(p.name, 52)} ${lpad(f1(p.seconds), 8)} ${lpad(p.cpu === undefined ? '' : f1(p.cpu), 13)}`);
restartSeconds.forEach((t, i) => console.log(`${pad(`restart${restartSeconds.length > 1 ? ` #${i + 1}` : ''}: exec to serving`, 52)} ${lpad(f1(t), 8)}`));
const last = milestones.filter((m) => m.tasks === counts.placed && !m.name.startsWith('restarted')).pop();
const worst = Math.max(...milestones.map((m) => m.hwm));
console.log(`\nTarget: <= 300 MiB RSS at ${INSTANCES} instances / ${INSTANCES * GPUS_PER_INSTANCE} GPUs / ${counts.placed} tasks: ` +
            `VmRSS ${f1(last.rss)} MiB, peak (VmHWM) ${f1(worst)} MiB -> ${worst <= 300 ? 'met' : last.rss <= 300 ? 'met for VmRSS, not for the peak' : 'NOT met'}`);
