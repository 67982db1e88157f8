#!/usr/bin/env node
// crash_safety: SIGKILL the real `gpupack server` (and then the real `gpupack agent`) at random moments under a
// flood of RunTask/StopTask, restart it on the same state, and check from the API that nothing acknowledged was
// lost and every GPU's reservations add up. Issue 6; the figures and the command are in docs/reliability.md.
//
// Server rounds (one SQLite file for all of them, cluster `crash`): four container instances registered through
// RegisterContainerInstance (platformDevices with gpuInfo, no agent channel, so the tool itself plays their
// agents with SubmitTaskStateChange), shared task definitions of 512..6,144 MiB, one with two GPU containers,
// one dedicated. Each round --workers concurrent connections loop over: RunTask (count 1..3), RunTask with a new
// clientToken, RunTask repeating an earlier clientToken with the identical request, StopTask (followed by the
// STOPPED report the agent would send), and RUNNING/STOPPED state reports. After a seeded random delay the
// server gets SIGKILL; it is restarted on the same file and checked:
//   - every task a RunTask acknowledged (200 with the task) is described (DescribeTasks, never MISSING);
//   - every acknowledged StopTask left desiredStatus STOPPED, every acknowledged STOPPED report lastStatus
//     STOPPED, every acknowledged RUNNING report a task that is no longer PENDING;
//   - a clientToken's tasks (found by startedBy = token over every task ListTasks names) are exactly the ARNs
//     every acknowledged answer for that token gave, and at most `count` of them: no token produced two sets;
//   - per GPU (DescribeContainerInstances gpuDevices): 0 <= remaining <= total and total - remaining equals the
//     nvidiaMps.memory of the non-STOPPED tasks' containers on it (so no STOPPED task holds memory), the
//     container count matches, a dedicated GPU has remaining 0 and one holder; per instance remainingResources
//     CPU/MEMORY equal registered minus the non-STOPPED tasks' cpu/memory, and running/pendingTasksCount match.
//
// Agent rounds (their own server and cluster `agentcrash`, the server stays up): one real `gpupack agent
// --gpus fake:2x22587 --runtime process` whose tasks run `/bin/sh -c 'echo MARK PID >> starts; exec sleep 600'`
// (MARK is a per-RunTask containerOverrides variable). --agent-workers connections RunTask and StopTask while
// the agent gets SIGKILL at a seeded random moment, often in the middle of starting a task; it is restarted on
// the same --state-dir and, once the server shows no PENDING task and no task stopping, checked: the API checks
// above, plus from the `starts` file and /proc: no MARK started twice; a RUNNING task's process is alive; a
// STOPPED task's process is not (else a workload runs with no reservation); no acknowledged task is PENDING.
//
// Usage: node bench/crash_safety.mjs [--server-rounds N] [--agent-rounds N] [--seed S] [--workers N]
//                                    [--agent-workers N] [--keep] [--verbose]
// The binary: $GPUPACK_BIN, else build/gpupack. Loopback only; every loop is bounded by rounds or time.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { PLAY_AGENT, call, gpupackBin, gpuDevice, ok, removeTempDir, sharedTaskDefinition, dedicatedTaskDefinition, startServer, tempDir } from '../tests/integration/harness.mjs';

const { values: opt } = parseArgs({
  options: {
    'server-rounds': { type: 'string', default: '20' },
    'agent-rounds': { type: 'string', default: '20' },
    seed: { type: 'string', default: '1' },
    workers: { type: 'string', default: '32' },
    'agent-workers': { type: 'string', default: '4' },
    keep: { type: 'boolean', default: false },
    verbose: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (opt.help) {
  console.log('usage: node bench/crash_safety.mjs [--server-rounds N] [--agent-rounds N] [--seed S] [--workers N]\n' +
              '                                   [--agent-workers N] [--keep] [--verbose]\n' +
              'defaults: 20 server rounds, 20 agent rounds, seed 1, 32 workers, 4 agent workers');
  process.exit(0);
}
function intOpt(name, lo, hi) {
  const v = Number(opt[name]);
  if (!Number.isInteger(v) || v < lo || v > hi) {
    console.error(`crash_safety: --${name} must be an integer in ${lo}..${hi}`);
    process.exit(2);
  }
  return v;
}
const SERVER_ROUNDS = intOpt('server-rounds', 0, 1000);
const AGENT_ROUNDS = intOpt('agent-rounds', 0, 1000);
const SEED = intOpt('seed', 0, 2 ** 31 - 1);
const WORKERS = intOpt('workers', 1, 256);
const AGENT_WORKERS = intOpt('agent-workers', 1, 64);

// mulberry32: a small seeded generator, so a run's choices and kill delays replay from --seed.
function rng32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng32(SEED);
const pick = (list) => list[Math.floor(rand() * list.length)];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => opt.verbose && console.log(...a);

const violations = [];
function violation(where, what) {
  violations.push(`${where}: ${what}`);
  console.log(`VIOLATION ${where}: ${what}`);
}

// ---- reading the whole state through the API ---------------------------------------------------------------

async function listAll(endpoint, op, body, key) {
  const out = [];
  let nextToken;
  for (let page = 0; page < 10000; ++page) {
    const r = await ok(endpoint, op, { ...body, nextToken, maxResults: 100 });
    out.push(...r[key]);
    nextToken = r.nextToken;
    if (!nextToken) break;
  }
  return out;
}

async function describeTasks(endpoint, cluster, arns) {
  const tasks = new Map();
  const missing = [];
  for (let i = 0; i < arns.length; i += 100) {
    const r = await ok(endpoint, 'DescribeTasks', { cluster, tasks: arns.slice(i, i + 100) });
    for (const t of r.tasks) tasks.set(t.taskArn, t);
    for (const f of r.failures) missing.push(`${f.arn} (${f.reason})`);
  }
  return { tasks, missing };
}

// snapshot: every task ListTasks names (desired RUNNING and STOPPED) plus `extra` ARNs, described, and every
// container instance, described.
async function snapshot(endpoint, cluster, extra) {
  const listed = new Set([
    ...(await listAll(endpoint, 'ListTasks', { cluster, desiredStatus: 'RUNNING' }, 'taskArns')),
    ...(await listAll(endpoint, 'ListTasks', { cluster, desiredStatus: 'STOPPED' }, 'taskArns')),
  ]);
  const { tasks, missing } = await describeTasks(endpoint, cluster, [...new Set([...listed, ...extra])]);
  const ciArns = await listAll(endpoint, 'ListContainerInstances', { cluster }, 'containerInstanceArns');
  const instances = [];
  for (let i = 0; i < ciArns.length; i += 100) {
    const r = await ok(endpoint, 'DescribeContainerInstances', { cluster, containerInstances: ciArns.slice(i, i + 100) });
    instances.push(...r.containerInstances);
  }
  return { listed, tasks, missing, instances };
}

const resource = (list, name) => (list ?? []).find((r) => r.name === name)?.integerValue ?? 0;

// checkAccounting: the GPU, host-resource and counter invariants over a snapshot. Returns the GPUs checked.
function checkAccounting(where, snap) {
  const perGpu = new Map(); // gpuId -> {shared MiB, containers, dedicated holders}
  const perInstance = new Map(); // instance ARN -> {cpu, memory, running, pending}
  for (const t of snap.tasks.values()) {
    if (t.lastStatus === 'STOPPED') continue;
    const inst = perInstance.get(t.containerInstanceArn) ?? { cpu: 0, memory: 0, running: 0, pending: 0 };
    inst.cpu += Number(t.cpu ?? 0);
    inst.memory += Number(t.memory ?? 0);
    if (t.lastStatus === 'RUNNING') ++inst.running;
    else if (t.lastStatus === 'PENDING') ++inst.pending;
    perInstance.set(t.containerInstanceArn, inst);
    for (const c of t.containers) {
      for (const id of c.gpuIds ?? []) {
        const g = perGpu.get(id) ?? { shared: 0, containers: 0, dedicated: new Set() };
        if (c.gpuSharingStrategy?.nvidiaMps) {
          g.shared += c.gpuSharingStrategy.nvidiaMps.memory;
          ++g.containers;
        } else {
          g.dedicated.add(t.taskArn);
        }
        perGpu.set(id, g);
      }
    }
  }
  let gpus = 0;
  for (const ci of snap.instances) {
    const want = perInstance.get(ci.containerInstanceArn) ?? { cpu: 0, memory: 0, running: 0, pending: 0 };
    for (const name of ['CPU', 'MEMORY']) {
      const registered = resource(ci.registeredResources, name);
      const remaining = resource(ci.remainingResources, name);
      const used = name === 'CPU' ? want.cpu : want.memory;
      if (remaining !== registered - used)
        violation(where, `${ci.containerInstanceArn} remaining ${name} ${remaining}, but registered ${registered} - non-STOPPED tasks' ${used} = ${registered - used}`);
    }
    if (ci.runningTasksCount !== want.running || ci.pendingTasksCount !== want.pending)
      violation(where, `${ci.containerInstanceArn} says ${ci.runningTasksCount} running/${ci.pendingTasksCount} pending, its tasks ${want.running}/${want.pending}`);
    for (const g of ci.gpuDevices ?? []) {
      ++gpus;
      const w = perGpu.get(g.gpuId) ?? { shared: 0, containers: 0, dedicated: new Set() };
      const used = g.totalMemoryInMiB - g.remainingMemoryInMiB;
      if (g.remainingMemoryInMiB < 0 || g.remainingMemoryInMiB > g.totalMemoryInMiB)
        violation(where, `GPU ${g.gpuId}: remaining ${g.remainingMemoryInMiB} MiB outside [0, ${g.totalMemoryInMiB}] (declared memory exceeds the total)`);
      if (w.dedicated.size > 0) {
        if (w.dedicated.size !== 1 || w.shared > 0)
          violation(where, `GPU ${g.gpuId}: dedicated to ${w.dedicated.size} task(s) and shared by ${w.containers} container(s) at once`);
        if (g.remainingMemoryInMiB !== 0) violation(where, `GPU ${g.gpuId}: dedicated, but remaining ${g.remainingMemoryInMiB} MiB`);
      } else {
        if (used !== w.shared)
          violation(where, `GPU ${g.gpuId}: total - remaining = ${used} MiB, non-STOPPED tasks declare ${w.shared} MiB (leaked or lost reservation)`);
        if (g.containerCount !== w.containers)
          violation(where, `GPU ${g.gpuId}: containerCount ${g.containerCount}, non-STOPPED shared containers ${w.containers}`);
      }
    }
  }
  return gpus;
}

// ---- processes ------------------------------------------------------------------------------------------------

const children = new Set();
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
});

function startAgent({ endpoint, dir, cluster }) {
  const args = ['agent', '--server', endpoint, '--cluster', cluster, '--gpus', 'fake:2x22587', '--runtime', 'process',
                '--state-dir', path.join(dir, 'agent'), '--mps-pipe-dir', path.join(dir, 'mps'), '--name', 'crash-node',
                '--cpu', '65536', '--memory', '262144', '--stop-grace-ms', '200', '--log-level', 'warn'];
  const out = fs.openSync(path.join(dir, 'agent.log'), 'a');
  const child = spawn(gpupackBin(), args, { stdio: ['ignore', out, out] });
  fs.closeSync(out);
  children.add(child);
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => {
    children.delete(child);
    resolve({ code, signal });
  }));
  return { child, exited };
}

// ---- server rounds --------------------------------------------------------------------------------------------

const SIZES = [512, 1024, 2048, 4096, 6144];

async function serverRounds(dir) {
  const db = path.join(dir, 'state.db');
  const cluster = 'crash';
  let server = await startServer({ db, extraArgs: PLAY_AGENT });
  await ok(server.endpoint, 'CreateCluster', { clusterName: cluster });
  const fleet = [
    [['GPU-crash-0-0', 22587], ['GPU-crash-0-1', 22587]],
    [['GPU-crash-1-0', 15360], ['GPU-crash-1-1', 15360], ['GPU-crash-1-2', 15360], ['GPU-crash-1-3', 15360]],
    [['GPU-crash-2-0', 81559]],
    [['GPU-crash-3-0', 40960], ['GPU-crash-3-1', 40960]],
  ];
  for (const [i, gpus] of fleet.entries()) {
    await ok(server.endpoint, 'RegisterContainerInstance', {
      cluster,
      instanceIdentityDocument: JSON.stringify({ instanceId: `i-crash-${i}` }),
      totalResources: [
        { name: 'CPU', type: 'INTEGER', integerValue: 16384 },
        { name: 'MEMORY', type: 'INTEGER', integerValue: 65536 },
      ],
      platformDevices: gpus.map(([id, mib]) => gpuDevice(id, mib)),
      versionInfo: { agentVersion: 'crash_safety' },
    });
  }
  const families = [];
  for (const size of SIZES) {
    await ok(server.endpoint, 'RegisterTaskDefinition', sharedTaskDefinition(`s${size}`, size, 25));
    families.push(`s${size}`);
  }
  const pair = sharedTaskDefinition('pair', 1024);
  pair.containerDefinitions.push({ ...pair.containerDefinitions[0], name: 'side' });
  await ok(server.endpoint, 'RegisterTaskDefinition', pair);
  families.push('pair');
  await ok(server.endpoint, 'RegisterTaskDefinition', dedicatedTaskDefinition('whole', 1));

  const acked = new Map(); // task ARN -> when and how it was acknowledged
  const live = []; // ARNs of acknowledged tasks not yet known stopped (the flood's StopTask targets)
  const recentlyStopped = []; // targets of recent StopTasks, for retries
  const stopAcked = new Set();
  const stoppedReportAcked = new Set();
  const runningReportAcked = new Set();
  const tokens = new Map(); // token -> {body, arns: sorted list or undefined}
  let tokenSeq = 0;
  const stats = { runTask: 0, runAcked: 0, tasksAcked: 0, placementFailures: 0, tokenReplays: 0, stopAcked: 0, reports: 0, cut: 0, errors4xx: 0 };
  let gpusChecked = 0;

  function noteTokenAnswer(where, token, arns) {
    const sorted = [...arns].sort();
    const rec = tokens.get(token);
    if (!sorted.length) return;
    if (rec.arns === undefined) rec.arns = sorted;
    else if (rec.arns.join() !== sorted.join()) {
      violation(where, `clientToken ${token} answered [${sorted.join(', ')}] after [${rec.arns.join(', ')}]`);
      rec.arns = sorted; // reported once
    }
  }

  let round = 0;
  async function worker(endpoint, w, running) {
    for (let n = 0; running.on && n < 100000; ++n) {
      const r = rand();
      let op, body, token;
      if (r < 0.40 || (r < 0.60 && live.length === 0)) {
        op = 'RunTask';
        body = { cluster, taskDefinition: rand() < 0.05 ? 'whole' : pick(families), count: rand() < 0.7 ? 1 : 1 + Math.floor(rand() * 3), startedBy: 'flood' };
      } else if (r < 0.52 || (r < 0.60 && tokens.size === 0)) {
        op = 'RunTask';
        token = `tok-${SEED}-${round}-${tokenSeq++}`;
        body = { cluster, taskDefinition: pick(families), count: 1 + Math.floor(rand() * 2), clientToken: token, startedBy: token };
        tokens.set(token, { body, arns: undefined });
      } else if (r < 0.60) {
        op = 'RunTask';
        token = pick([...tokens.keys()]);
        body = tokens.get(token).body;
        ++stats.tokenReplays;
      } else if (r < 0.85) {
        op = 'StopTask';
        if (rand() < 0.2 && recentlyStopped.length) {
          body = { cluster, task: pick(recentlyStopped), reason: `flood round ${round}` }; // a client's retry
        } else {
          const i = Math.floor(rand() * live.length);
          body = { cluster, task: live[i], reason: `flood round ${round}` };
          live.splice(i, 1);
          recentlyStopped.push(body.task);
          if (recentlyStopped.length > 64) recentlyStopped.shift();
        }
      } else {
        op = 'SubmitTaskStateChange';
        body = { cluster, task: pick(live), status: rand() < 0.7 ? 'RUNNING' : 'STOPPED' };
      }
      // A new clientToken is sometimes sent twice at once, as a client that retries before the first answer.
      const copies = token && body.clientToken === token && tokens.get(token).arns === undefined && rand() < 0.3 ? 2 : 1;
      const answers = await Promise.all(Array.from({ length: copies }, () =>
        call(endpoint, op, body, { timeoutMs: 15000 }).then((res) => {
          if (op === 'RunTask' && res.status === 200) running.onRunTaskAnswer?.();
          return res;
        }, () => undefined)));
      for (const res of answers) await handle(endpoint, op, body, token, res);
    }
  }

  async function handle(endpoint, op, body, token, res) {
    if (!res) {
      ++stats.cut; // cut off by the kill: not acknowledged, may or may not have landed
      return;
    }
    if (res.status >= 500) violation(`round ${round}`, `${op} answered ${res.status}: ${res.text.slice(0, 300)}`);
    if (res.status !== 200) {
      ++stats.errors4xx;
      return;
    }
    if (op === 'RunTask') {
      ++stats.runTask;
      ++stats.runAcked;
      const arns = res.json.tasks.map((t) => t.taskArn);
      if (!arns.length) ++stats.placementFailures;
      for (const a of arns) {
        if (!acked.has(a)) {
          acked.set(a, token ? `round ${round}, clientToken ${token}` : `round ${round}`);
          ++stats.tasksAcked;
          live.push(a);
        }
      }
      if (token) noteTokenAnswer(`round ${round}`, token, arns);
    } else if (op === 'StopTask') {
      ++stats.stopAcked;
      stopAcked.add(body.task);
      if (res.json.task.lastStatus !== 'STOPPED') {
        // The agent's report once the container is gone (these instances have no channel: we are their agent).
        try {
          const s = await call(endpoint, 'SubmitTaskStateChange', { cluster, task: body.task, status: 'STOPPED' }, { timeoutMs: 15000 });
          if (s.status === 200) stoppedReportAcked.add(body.task);
        } catch {
          ++stats.cut;
        }
      }
    } else {
      ++stats.reports;
      (body.status === 'STOPPED' ? stoppedReportAcked : runningReportAcked).add(body.task);
    }
  }

  async function check(round) {
    const where = `server round ${round}`;
    const snap = await snapshot(server.endpoint, cluster, [...acked.keys()]);
    for (const [arn, how] of acked)
      if (!snap.tasks.has(arn)) {
        violation(where, `acknowledged task ${arn} (${how}) is MISSING after the restart`);
        acked.delete(arn); // reported once
      }
    for (const arn of stopAcked)
      if (snap.tasks.get(arn) && snap.tasks.get(arn).desiredStatus !== 'STOPPED') violation(where, `StopTask ${arn} was acknowledged, desiredStatus is ${snap.tasks.get(arn).desiredStatus}`);
    for (const arn of stoppedReportAcked)
      if (snap.tasks.get(arn) && snap.tasks.get(arn).lastStatus !== 'STOPPED') violation(where, `STOPPED report for ${arn} was acknowledged, lastStatus is ${snap.tasks.get(arn).lastStatus}`);
    for (const arn of runningReportAcked)
      if (snap.tasks.get(arn) && snap.tasks.get(arn).lastStatus === 'PENDING') violation(where, `RUNNING report for ${arn} was acknowledged, lastStatus is PENDING`);
    // clientTokens: the tasks a token made are exactly those its acknowledged answers named.
    const byToken = new Map();
    for (const t of snap.tasks.values())
      if (t.startedBy?.startsWith('tok-')) byToken.set(t.startedBy, [...(byToken.get(t.startedBy) ?? []), t.taskArn]);
    for (const [token, arns] of byToken) {
      const rec = tokens.get(token);
      const sorted = arns.sort();
      if (!rec) continue; // from an earlier run on a kept file; not ours
      if (sorted.length > rec.body.count) violation(where, `clientToken ${token} (count ${rec.body.count}) produced ${sorted.length} tasks`);
      if (rec.arns === undefined) rec.arns = sorted; // landed though never acknowledged: a replay must now answer these
      else if (rec.arns.join() !== sorted.join()) {
        violation(where, `clientToken ${token} has tasks [${sorted.join(', ')}], acknowledged [${rec.arns.join(', ')}]`);
        rec.arns = sorted; // reported once
      }
    }
    gpusChecked += checkAccounting(where, snap);
    // The flood's targets from now on: what the server says is not stopped.
    live.length = 0;
    for (const t of snap.tasks.values()) if (t.desiredStatus !== 'STOPPED') live.push(t.taskArn);
    // Make room for the next round when the GPUs filled up: stop half of what runs, by the API.
    if (live.length > 60) {
      for (const arn of live.splice(0, live.length / 2)) {
        const s = await ok(server.endpoint, 'StopTask', { cluster, task: arn, reason: 'room' });
        stopAcked.add(arn);
        if (s.task.lastStatus !== 'STOPPED') await ok(server.endpoint, 'SubmitTaskStateChange', { cluster, task: arn, status: 'STOPPED' });
        stoppedReportAcked.add(arn);
      }
    }
    return snap.tasks.size;
  }

  const t0 = Date.now();
  let survived = 0;
  let lastDescribed = 0;
  for (round = 1; round <= SERVER_ROUNDS; ++round) {
    const running = { on: true };
    const endpoint = server.endpoint;
    const before = stats.tasksAcked;
    // Odd rounds: SIGKILL after a random delay. Even rounds: SIGKILL the moment the client has read the k-th
    // acknowledged RunTask, when other requests are most likely between placement and commit.
    let how;
    const victim = server;
    if (round % 2) {
      const delay = 150 + Math.floor(rand() * 1350);
      how = `after ${delay} ms`;
      setTimeout(() => victim.child.kill('SIGKILL'), delay);
    } else {
      const k = 20 + Math.floor(rand() * 300);
      let seen = 0;
      how = `at RunTask answer ${k}`;
      running.onRunTaskAnswer = () => {
        if (++seen === k) victim.child.kill('SIGKILL');
      };
      setTimeout(() => victim.child.kill('SIGKILL'), 5000); // bounded, should k never come
    }
    const flood = [];
    for (let w = 0; w < WORKERS; ++w) flood.push(worker(endpoint, w, running));
    await server.exited;
    running.on = false;
    await Promise.all(flood);
    server = await startServer({ db, extraArgs: PLAY_AGENT });
    const v0 = violations.length;
    lastDescribed = await check(round);
    if (violations.length === v0) ++survived;
    console.log(`server round ${round}: SIGKILL ${how}, ${stats.tasksAcked - before} tasks acknowledged this round, ` +
                `${acked.size} acknowledged in all checked, ${lastDescribed} tasks on the server, ${violations.length - v0} violations`);
  }
  await server.stop();
  return { survived, rounds: SERVER_ROUNDS, acked: acked.size, tokens: tokens.size, stops: stopAcked.size, gpusChecked, stats, seconds: (Date.now() - t0) / 1000 };
}

// ---- agent rounds ---------------------------------------------------------------------------------------------

function readStarts(file) {
  const starts = new Map(); // mark -> [pid, ...]
  if (!fs.existsSync(file)) return starts;
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const [mark, pid] = line.trim().split(/\s+/);
    if (!mark || !pid) continue;
    starts.set(mark, [...(starts.get(mark) ?? []), Number(pid)]);
  }
  return starts;
}

function alive(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) return false; // exited, not yet reaped
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('sleep');
  } catch {
    return false;
  }
}

async function agentRounds(dir) {
  const cluster = 'agentcrash';
  const server = await startServer({ db: path.join(dir, 'agent-state.db') });
  const endpoint = server.endpoint;
  const starts = path.join(dir, 'starts');
  await ok(endpoint, 'CreateCluster', { clusterName: cluster });
  for (const size of [1024, 2048]) {
    const def = sharedTaskDefinition(`sleepy${size}`, size);
    def.containerDefinitions[0].entryPoint = ['/bin/sh', '-c'];
    def.containerDefinitions[0].command = [`echo "$CRASH_MARK $$" >> ${starts}; exec sleep 600`];
    await ok(endpoint, 'RegisterTaskDefinition', def);
  }
  let agent = startAgent({ endpoint, dir, cluster });

  async function instance() {
    const arns = await listAll(endpoint, 'ListContainerInstances', { cluster }, 'containerInstanceArns');
    if (!arns.length) return undefined;
    return (await ok(endpoint, 'DescribeContainerInstances', { cluster, containerInstances: arns })).containerInstances[0];
  }
  async function waitConnected(where) {
    for (let i = 0; i < 300; ++i) {
      if ((await instance())?.agentConnected) return true;
      await sleep(50);
    }
    violation(where, 'the agent did not connect within 15 s');
    return false;
  }
  await waitConnected('agent start');

  const marks = new Map(); // mark -> task ARN (acknowledged)
  const stopAcked = new Set();
  let markSeq = 0;
  const stats = { runAcked: 0, placementFailures: 0, failureReasons: {}, stopAcked: 0, cut: 0, startedTwice: 0, killedWhileStarting: 0 };
  let gpusChecked = 0;
  let survived = 0;
  const t0 = Date.now();

  async function worker(round, running) {
    for (let n = 0; running.on && n < 100000; ++n) {
      const liveArns = [...marks.values()].filter((a) => !stopAcked.has(a));
      if (rand() < 0.85 || !liveArns.length) {
        const mark = `m${SEED}-${round}-${markSeq++}`;
        let res;
        try {
          res = await call(endpoint, 'RunTask', {
            cluster,
            taskDefinition: rand() < 0.5 ? 'sleepy1024' : 'sleepy2048',
            overrides: { containerOverrides: [{ name: 'main', environment: [{ name: 'CRASH_MARK', value: mark }] }] },
          }, { timeoutMs: 15000 });
        } catch {
          ++stats.cut;
          continue;
        }
        if (res.status >= 500) violation(`agent round ${round}`, `RunTask answered ${res.status}: ${res.text.slice(0, 300)}`);
        if (res.status !== 200) continue;
        if (!res.json.tasks.length) {
          ++stats.placementFailures; // AGENT while it is down, or RESOURCE:GPU_MEMORY
          const reason = res.json.failures[0]?.reason ?? 'none';
          stats.failureReasons[reason] = (stats.failureReasons[reason] ?? 0) + 1;
          await sleep(20);
          continue;
        }
        ++stats.runAcked;
        marks.set(mark, res.json.tasks[0].taskArn);
      } else {
        const arn = pick(liveArns);
        try {
          const res = await call(endpoint, 'StopTask', { cluster, task: arn, reason: `flood round ${round}` }, { timeoutMs: 15000 });
          if (res.status === 200) {
            stopAcked.add(arn);
            ++stats.stopAcked;
          }
        } catch {
          ++stats.cut;
        }
      }
    }
  }

  // settle waits until the restarted agent is connected and no task is PENDING or stopping (bounded: 30 s).
  async function settle(where) {
    await waitConnected(where);
    let snap;
    for (let i = 0; i < 150; ++i) {
      snap = await snapshot(endpoint, cluster, [...marks.values()]);
      const busy = [...snap.tasks.values()].filter((t) => t.lastStatus === 'PENDING' || (t.desiredStatus === 'STOPPED' && t.lastStatus !== 'STOPPED'));
      if (!busy.length) return snap;
      await sleep(200);
    }
    return snap;
  }

  async function check(round) {
    const where = `agent round ${round}`;
    const snap = await settle(where);
    for (const m of snap.missing) violation(where, `acknowledged task missing: ${m}`);
    // A task is RUNNING once its shell is exec'ed; the shell's line in `starts` may come a moment later.
    let started = readStarts(starts);
    for (let i = 0; i < 30; ++i) { // bounded: 3 s
      const late = [...marks].filter(([mark, arn]) => snap.tasks.get(arn)?.lastStatus === 'RUNNING' && !started.has(mark));
      if (!late.length) break;
      await sleep(100);
      started = readStarts(starts);
    }
    for (const [mark, arn] of marks) {
      const t = snap.tasks.get(arn);
      if (!t) {
        violation(where, `acknowledged task ${arn} not described`);
        continue;
      }
      const pids = started.get(mark) ?? [];
      if (pids.length > 1) {
        ++stats.startedTwice;
        violation(where, `task ${arn} (${mark}) started ${pids.length} times (pids ${pids.join(', ')})`);
      }
      const running = pids.filter(alive);
      if (t.lastStatus === 'PENDING') violation(where, `task ${arn} is still PENDING after the agent came back (forgotten)`);
      if (t.lastStatus === 'RUNNING' && running.length !== 1)
        violation(where, `task ${arn} is RUNNING on the server, ${running.length} of its processes run`);
      if (t.lastStatus === 'STOPPED' && running.length)
        violation(where, `task ${arn} is STOPPED (${t.stoppedReason}) but its process ${running.join(', ')} still runs with no reservation`);
      if (stopAcked.has(arn) && t.desiredStatus !== 'STOPPED') violation(where, `StopTask ${arn} was acknowledged, desiredStatus is ${t.desiredStatus}`);
    }
    stats.killedWhileStarting = [...snap.tasks.values()].filter((t) => t.stoppedReason?.includes('restarted while starting')).length;
    gpusChecked += checkAccounting(where, snap);
    return snap;
  }

  for (let round = 1; round <= AGENT_ROUNDS; ++round) {
    const running = { on: true };
    const flood = [];
    for (let w = 0; w < AGENT_WORKERS; ++w) flood.push(worker(round, running));
    const delay = 100 + Math.floor(rand() * 900);
    await sleep(delay);
    agent.child.kill('SIGKILL');
    await agent.exited;
    await sleep(Math.floor(rand() * 300)); // the flood goes on for a moment with the agent gone
    running.on = false;
    await Promise.all(flood);
    agent = startAgent({ endpoint, dir, cluster });
    const v0 = violations.length;
    const snap = await check(round);
    if (violations.length === v0) ++survived;
    const liveCount = [...snap.tasks.values()].filter((t) => t.lastStatus !== 'STOPPED').length;
    console.log(`agent round ${round}: SIGKILL after ${delay} ms; ${marks.size} acknowledged tasks checked, ${liveCount} running, ` +
                `${violations.length - v0} violations`);
    // Keep room on the two GPUs: stop the oldest half when they hold more than 20 tasks.
    if (liveCount > 20) {
      const live = [...snap.tasks.values()].filter((t) => t.desiredStatus !== 'STOPPED').map((t) => t.taskArn);
      for (const arn of live.slice(0, Math.floor(live.length / 2))) {
        await ok(endpoint, 'StopTask', { cluster, task: arn, reason: 'room' });
        stopAcked.add(arn);
      }
    }
  }

  // Clean up: stop every task through the API, then make sure no workload of ours outlives the run.
  const left = await listAll(endpoint, 'ListTasks', { cluster, desiredStatus: 'RUNNING' }, 'taskArns');
  for (const arn of left) await ok(endpoint, 'StopTask', { cluster, task: arn, reason: 'crash_safety done' });
  for (let i = 0; i < 200; ++i) { // bounded: 20 s for the agent to stop them and report
    const { tasks } = await describeTasks(endpoint, cluster, [...marks.values()]);
    if (![...tasks.values()].some((t) => t.lastStatus !== 'STOPPED')) break;
    await sleep(100);
  }
  // Every task is STOPPED and acknowledged: the agent keeps no record of any (bounded: 5 s for the last acks).
  const records = () => fs.readdirSync(path.join(dir, 'agent', 'tasks')).filter((f) => f.endsWith('.json'));
  for (let i = 0; i < 50 && records().length; ++i) await sleep(100);
  if (records().length) violation('agent cleanup', `the agent still keeps ${records().length} task record(s) after every task was STOPPED and acknowledged`);
  agent.child.kill('SIGTERM');
  const timer = setTimeout(() => agent.child.kill('SIGKILL'), 10000);
  await agent.exited;
  clearTimeout(timer);
  let strays = 0;
  for (const pids of readStarts(starts).values())
    for (const pid of pids)
      if (alive(pid)) {
        ++strays;
        process.kill(pid, 'SIGKILL');
      }
  if (strays) violation('agent cleanup', `${strays} workload process(es) still ran after every task was stopped`);
  await server.stop();
  return { survived, rounds: AGENT_ROUNDS, acked: marks.size, stops: stopAcked.size, gpusChecked, stats, seconds: (Date.now() - t0) / 1000 };
}

// ---- main -----------------------------------------------------------------------------------------------------

const dir = tempDir('gpupack-crash-');
let s, a;
try {
  if (SERVER_ROUNDS) s = await serverRounds(dir);
  if (AGENT_ROUNDS) a = await agentRounds(dir);
} catch (e) {
  violation('tool', e.stack ?? String(e));
}
console.log(`\ncrash_safety (seed ${SEED}, ${WORKERS} server workers, ${AGENT_WORKERS} agent workers, ${gpupackBin()})`);
if (s) {
  console.log(`server: ${s.survived}/${s.rounds} SIGKILL rounds without a violation in ${s.seconds.toFixed(1)} s; ` +
              `${s.acked} acknowledged tasks checked after every restart, ${s.tokens} clientTokens (${s.stats.tokenReplays} replays), ` +
              `${s.stops} acknowledged StopTasks, ${s.gpusChecked} GPU checks`);
  console.log(`        ${s.stats.runAcked} RunTask answered (${s.stats.placementFailures} placed nothing), ${s.stats.reports} state reports, ` +
              `${s.stats.errors4xx} 4xx answers, ${s.stats.cut} calls cut by a kill`);
}
if (a) {
  console.log(`agent:  ${a.survived}/${a.rounds} SIGKILL rounds without a violation in ${a.seconds.toFixed(1)} s; ` +
              `${a.acked} acknowledged tasks checked, ${a.stops} acknowledged StopTasks, ${a.gpusChecked} GPU checks, ` +
              `${a.stats.placementFailures} RunTasks placed nothing ${JSON.stringify(a.stats.failureReasons)}, ${a.stats.cut} calls cut, ` +
              `${a.stats.killedWhileStarting} tasks stopped as "agent restarted while starting"`);
}
console.log(`violations: ${violations.length}`);
if (opt.keep) console.log(`kept ${dir}`);
else removeTempDir(dir);
process.exit(violations.length ? 1 : 0);
