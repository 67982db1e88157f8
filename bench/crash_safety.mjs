#!/usr/bin/env node
// crash_safety: SIGKILL the real `gpupack server` (and then the real `gpupack agent`) at random moments under a
// flood of RunTask/StopTask, restart it on the same state, and check from the API that nothing acknowledged was
// lost and every GPU's reservations add up; then fill the database's disk under load and check the same of what
// was acknowledged and refused. The figures and the command are in docs/reliability.md.
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
//     CPU/MEMORY equal registered minus the non-STOPPED tasks' cpu/memory, and running/pendingTasksCount match;
//   - dirty reads: a reader polls ListTasks and DescribeTasks during the flood and notes every task and the
//     furthest state it read it in; after the restart each is there, in at least that state (reads show only
//     committed state, so a SIGKILL cannot take back what a reader saw).
//
// Agent rounds (their own server and cluster `agentcrash`, the server stays up): one real `gpupack agent
// --gpus fake:2x22587 --runtime process` whose tasks run `/bin/sh -c 'echo MARK PID >> starts; exec sleep 600'`
// (MARK is a per-RunTask containerOverrides variable). --agent-workers connections RunTask and StopTask while
// the agent gets SIGKILL at a seeded random moment, often in the middle of starting a task; it is restarted on
// the same --state-dir and, once the server shows no PENDING task and no task stopping, checked: the API checks
// above, plus from the `starts` file and /proc: no MARK started twice; a RUNNING task's process is alive; a
// STOPPED task's process is not (else a workload runs with no reservation); no acknowledged task is PENDING.
//
// Disk-full rounds (diskFullRounds below): the database on a small tmpfs (or, where mounting is not allowed, the
// server under `ulimit -f`), writes until commits fail, SIGKILL, a restart on the full disk and one with the space
// back: every acknowledged write is there, no refused one, nothing decided on top of a failed commit is durable,
// and reads showed only what is durable.
//
// Usage: node bench/crash_safety.mjs [--server-rounds N] [--agent-rounds N] [--disk-rounds N] [--disk-kib K]
//                                    [--disk-ulimit] [--seed S] [--workers N] [--agent-workers N] [--keep] [--verbose]
// The binary: $GPUPACK_BIN, else build/gpupack. Loopback only; every loop is bounded by rounds or time.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { PLAY_AGENT, call, gpupackBin, gpuDevice, listAll, ok, removeTempDir, sharedTaskDefinition, dedicatedTaskDefinition, startServer, taskDir, tempDir } from '../tests/integration/harness.mjs';

const { values: opt } = parseArgs({
  options: {
    'server-rounds': { type: 'string', default: '20' },
    'agent-rounds': { type: 'string', default: '20' },
    seed: { type: 'string', default: '1' },
    workers: { type: 'string', default: '32' },
    'agent-workers': { type: 'string', default: '4' },
    'disk-rounds': { type: 'string', default: '1' },
    'disk-kib': { type: 'string', default: '1024' },
    'disk-ulimit': { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
    verbose: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (opt.help) {
  console.log('usage: node bench/crash_safety.mjs [--server-rounds N] [--agent-rounds N] [--disk-rounds N] [--disk-kib K] [--disk-ulimit]\n' +
              '                                   [--seed S] [--workers N] [--agent-workers N] [--keep] [--verbose]\n' +
              'defaults: 20 server rounds, 20 agent rounds, 1 disk-full round on a 1024 KiB disk, seed 1, 32 workers,\n' +
              '4 agent workers. Server rounds SIGKILL the server under load; a reader polls ListTasks/DescribeTasks\n' +
              'meanwhile, and every task state it saw must be there after the restart (no dirty read). Agent rounds\n' +
              'SIGKILL the agent. Disk-full rounds put the database on a K KiB tmpfs (root; else `ulimit -f K` on the\n' +
              'server; --disk-ulimit: that even as root) and write until commits fail: every acknowledged write must\n' +
              'survive a restart, no refused one.');
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
const DISK_ROUNDS = intOpt('disk-rounds', 0, 100);
const DISK_KIB = intOpt('disk-kib', 256, 1 << 20);

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

// ---- dirty reads ----------------------------------------------------------------------------------------------

// reader polls ListTasks (desired RUNNING, every page) and DescribeTasks of what it lists while the writers run,
// and notes in `seen` each task and the furthest state it was read in. Reads answer from committed state only, so
// all of it must be there after any restart (checkSeen). Errors (the server killed under it) end nothing: the
// loop is bounded by `running` and a poll count.
async function reader(endpoint, cluster, seen, running, stats) {
  // running.onList(arns), when set, is called with each poll's listed ARNs once they are noted (the server rounds
  // kill the server from it the moment a task shows up whose RunTask has not been answered yet).
  for (let n = 0; running.on && n < 100000; ++n) {
    try {
      const arns = [];
      let nextToken;
      for (let page = 0; page < 100; ++page) {
        const r = await call(endpoint, 'ListTasks', { cluster, desiredStatus: 'RUNNING', nextToken, maxResults: 100 }, { timeoutMs: 15000 });
        if (r.status !== 200) break;
        arns.push(...r.json.taskArns);
        nextToken = r.json.nextToken;
        if (!nextToken) break;
      }
      for (const arn of arns) if (!seen.has(arn)) seen.set(arn, { desiredStopped: false, lastStatus: 'PENDING' });
      running.onList?.(arns);
      for (let i = 0; i < arns.length; i += 100) {
        const r = await call(endpoint, 'DescribeTasks', { cluster, tasks: arns.slice(i, i + 100) }, { timeoutMs: 15000 });
        if (r.status !== 200) break;
        for (const t of r.json.tasks) noteSeen(seen, t);
      }
      ++stats.polls;
    } catch {
      ++stats.cut;
      await sleep(5);
    }
  }
}

const STATUS_ORDER = { PROVISIONING: 0, PENDING: 1, ACTIVATING: 2, RUNNING: 3, DEACTIVATING: 4, STOPPING: 5, DEPROVISIONING: 6, STOPPED: 7 };
function noteSeen(seen, t) {
  const s = seen.get(t.taskArn) ?? { desiredStopped: false, lastStatus: 'PENDING' };
  s.desiredStopped ||= t.desiredStatus === 'STOPPED';
  if ((STATUS_ORDER[t.lastStatus] ?? 0) > (STATUS_ORDER[s.lastStatus] ?? 0)) s.lastStatus = t.lastStatus;
  seen.set(t.taskArn, s);
}

// checkSeen: every task a reader saw exists after the restart, in at least the state it was read in (a task read
// with desiredStatus STOPPED is so, one read RUNNING or STOPPED is not PENDING again). Returns the violations.
function checkSeen(where, snap, seen) {
  let bad = 0;
  for (const [arn, s] of seen) {
    const t = snap.tasks.get(arn);
    let what;
    if (!t) what = 'is MISSING after the restart';
    else if (s.desiredStopped && t.desiredStatus !== 'STOPPED') what = `was read with desiredStatus STOPPED, is ${t.desiredStatus} after the restart`;
    else if ((STATUS_ORDER[t.lastStatus] ?? 0) < (STATUS_ORDER[s.lastStatus] ?? 0)) what = `was read ${s.lastStatus}, is ${t.lastStatus} after the restart`;
    if (!what) continue;
    ++bad;
    violation(where, `dirty read: task ${arn} ${what}`);
    seen.delete(arn); // reported once
  }
  return bad;
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
  const seen = new Map(); // task ARN -> the furthest state a reader saw it in (dirty-read check)
  const known = new Set(); // tasks an answer or a check after a restart named: what a read may show unasked
  const readStats = { polls: 0, cut: 0, dirty: 0, readKills: 0 };
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
        known.add(a);
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
    const snap = await snapshot(server.endpoint, cluster, [...acked.keys(), ...seen.keys()]);
    readStats.dirty += checkSeen(where, snap, seen);
    for (const arn of snap.tasks.keys()) known.add(arn);
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
    // Every third round: SIGKILL the moment the reader lists a task no answer has named yet (its RunTask is
    // between placement and answer): a server whose reads show what is not yet written loses such a task to the
    // kill. Other odd rounds: SIGKILL after a random delay. Other even rounds: SIGKILL the moment the client has
    // read the k-th acknowledged RunTask, when other requests are most likely between placement and commit.
    let how;
    const victim = server;
    if (round % 3 === 0) {
      how = 'at a task the reader listed before its RunTask was answered';
      running.onList = (arns) => {
        if (running.killed || !arns.some((a) => !known.has(a))) return;
        running.killed = true;
        ++readStats.readKills;
        victim.child.kill('SIGKILL');
      };
      setTimeout(() => {
        if (!running.killed) how = 'after 5 s (the reader never listed an unanswered task)';
        victim.child.kill('SIGKILL');
      }, 5000); // bounded
    } else if (round % 2) {
      const delay = 150 + Math.floor(rand() * 1350);
      how = `after ${delay} ms`;
      setTimeout(() => victim.child.kill('SIGKILL'), delay);
    } else {
      const k = 20 + Math.floor(rand() * 300);
      let answers = 0;
      how = `at RunTask answer ${k}`;
      running.onRunTaskAnswer = () => {
        if (++answers === k) victim.child.kill('SIGKILL');
      };
      setTimeout(() => victim.child.kill('SIGKILL'), 5000); // bounded, should k never come
    }
    const flood = [];
    for (let w = 0; w < WORKERS; ++w) flood.push(worker(endpoint, w, running));
    flood.push(reader(endpoint, cluster, seen, running, readStats));
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
  return { survived, rounds: SERVER_ROUNDS, acked: acked.size, tokens: tokens.size, stops: stopAcked.size, gpusChecked, stats,
           seen: seen.size, readStats, seconds: (Date.now() - t0) / 1000 };
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
  const starts = path.join(taskDir(dir, 'tasks'), 'starts');  // the tasks (an unprivileged user) append to it
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

// ---- disk-full rounds -----------------------------------------------------------------------------------------

// smallDisk makes `dir` a disk of `kib` KiB for the server's database: a tmpfs mounted there when the tool runs as
// root and may mount, else (no mount) the server runs under `ulimit -f kib` (bash), so that a write past kib KiB
// in any one file fails with EFBIG as a full disk fails with ENOSPC. `bin` starts the server under that limit;
// grow() lifts it (the operator freeing space); release() unmounts.
const mounted = new Set();
process.on('exit', () => {
  for (const m of mounted) spawnSync('umount', ['-l', m]);
});
// Ctrl-C and SIGTERM end the tool through 'exit', so that its servers are killed and its tmpfs unmounted.
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(130));
function smallDisk(dir, kib, scratch) {
  fs.mkdirSync(dir, { recursive: true });
  let refused = opt['disk-ulimit'] ? '--disk-ulimit' : 'not root';
  if (process.getuid?.() === 0 && !opt['disk-ulimit']) {
    const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${kib}k,mode=0700`, 'tmpfs', dir], { encoding: 'utf8' });
    if (r.status === 0) {
      mounted.add(dir);
      return {
        how: `a ${kib} KiB tmpfs (mount -t tmpfs -o size=${kib}k)`,
        bin: gpupackBin(),
        freeKiB() {
          const f = fs.statfsSync(dir);
          return (f.bavail * f.bsize) / 1024;
        },
        grow() {
          const g = spawnSync('mount', ['-o', 'remount,size=262144k', dir], { encoding: 'utf8' });
          if (g.status !== 0) throw new Error(`cannot grow the tmpfs: ${g.stderr}`);
        },
        release() {
          spawnSync('umount', [dir]);
          mounted.delete(dir);
        },
      };
    }
    refused = (r.stderr || `mount exited ${r.status}`).trim();
  }
  const wrapper = path.join(scratch, `gpupack-fsize-${kib}k`);
  fs.writeFileSync(wrapper, `#!/bin/bash\n# a file write past ${kib} KiB fails (EFBIG) instead of killing the server\ntrap '' XFSZ\n` +
                            `ulimit -f ${kib}\nexec ${JSON.stringify(gpupackBin())} "$@"\n`, { mode: 0o755 });
  const disk = {
    how: `ulimit -f ${kib} (KiB per file) on the server; no tmpfs: ${refused}`,
    bin: wrapper,
    freeKiB() { // the largest file decides
      const sizes = fs.readdirSync(dir).map((f) => fs.statSync(path.join(dir, f)).size);
      return kib - Math.max(0, ...sizes) / 1024;
    },
    grow() {
      disk.bin = gpupackBin();
    },
    release() {},
  };
  return disk;
}

// startServerWith starts `gpupack server` through `bin` (harness.startServer takes the binary from GPUPACK_BIN).
async function startServerWith(bin, options) {
  const saved = process.env.GPUPACK_BIN;
  process.env.GPUPACK_BIN = bin;
  try {
    return await startServer(options);
  } finally {
    if (saved === undefined) delete process.env.GPUPACK_BIN;
    else process.env.GPUPACK_BIN = saved;
  }
}

// A disk-full round: one server on a small disk, cluster `diskfull` with a pool of 8 dedicated GPUs (attribute
// pool=whole, kept full of PENDING dedicated tasks) and a shared pool, and --workers connections writing: RunTask
// of shared tasks whose overrides carry 4 KiB (so the disk fills in a second or two), StopTask and RUNNING
// reports of them, and pairs of a StopTask of a dedicated task with a RunTask of a dedicated task sent at once
// (a write decided on top of a failed one: the RunTask may be placed on the GPU the stop frees; if the stop's
// commit fails, the RunTask must not become durable either), only pairs once less than NEAR_FULL_KIB is free.
// Every RunTask carries a startedBy mark of its own, so a refused one can be
// looked for after the restart. Once the first write is refused (5xx) the flood goes on for 300 ms, a reader
// polls meanwhile, then the server gets SIGKILL and is restarted twice: on the still-full disk, then with the
// space back. After each restart:
//   - every acknowledged RunTask's tasks are there, every acknowledged StopTask left desiredStatus STOPPED, every
//     acknowledged STOPPED report lastStatus STOPPED, every acknowledged RUNNING report a task not PENDING;
//   - nothing refused is there: no task carries the mark of a refused RunTask, a task whose StopTask was refused
//     (and none acknowledged) is desiredStatus RUNNING, a refused RUNNING report left its task PENDING;
//   - no write sent after a refusal was answered was acknowledged (a server that lost a commit decides nothing
//     more), and no RunTask racing a refused StopTask was acknowledged on that task's GPU;
//   - the accounting invariants (a dedicated GPU has one holder), the reader's dirty-read check, and the state
//     equals what reads showed just before the kill (reads show what is durable, nothing else).
async function diskFullRounds(dir) {
  const t0 = Date.now();
  const totals = { acked: 0, refused: 0, ackedTasks: 0, foundAfter: 0, refusedFound: 0, ackedAfterRefusal: 0, pairs: 0,
                   pairsStopRefused: 0, pairsRunAcked: 0, pairsRunElsewhere: 0, polls: 0, seen: 0, dirty: 0, gpusChecked: 0, firstRefusal: '', how: '',
                   restartFull: [], restartFailed: 0, survived: 0, fillMs: [] };
  for (let round = 1; round <= DISK_ROUNDS; ++round) {
    const where = `disk-full round ${round}`;
    const v0 = violations.length;
    const disk = smallDisk(path.join(dir, `disk-${round}`), DISK_KIB, dir);
    totals.how = disk.how;
    const db = path.join(dir, `disk-${round}`, 'state.db');
    try {
      await diskFullRound(where, disk, db, totals);
    } finally {
      disk.release();
    }
    if (violations.length === v0) ++totals.survived;
  }
  return { ...totals, rounds: DISK_ROUNDS, seconds: (Date.now() - t0) / 1000 };
}

async function diskFullRound(where, disk, db, totals) {
  const cluster = 'diskfull';
  let server = await startServerWith(disk.bin, { db, extraArgs: PLAY_AGENT });
  const e0 = server.endpoint;
  await ok(e0, 'CreateCluster', { clusterName: cluster });
  const pools = [['whole', [['GPU-df-w-0', 15360], ['GPU-df-w-1', 15360], ['GPU-df-w-2', 15360], ['GPU-df-w-3', 15360]]],
                 ['whole', [['GPU-df-w-4', 15360], ['GPU-df-w-5', 15360], ['GPU-df-w-6', 15360], ['GPU-df-w-7', 15360]]],
                 ['shared', [['GPU-df-s-0', 81559], ['GPU-df-s-1', 81559]]], ['shared', [['GPU-df-s-2', 40960]]]];
  const WHOLE = 8;
  for (const [i, [pool, gpus]] of pools.entries()) {
    await ok(e0, 'RegisterContainerInstance', {
      cluster, instanceIdentityDocument: JSON.stringify({ instanceId: `i-df-${i}` }),
      totalResources: [{ name: 'CPU', type: 'INTEGER', integerValue: 1 << 20 }, { name: 'MEMORY', type: 'INTEGER', integerValue: 1 << 24 }],
      platformDevices: gpus.map(([id, mib]) => gpuDevice(id, mib)), attributes: [{ name: 'pool', value: pool }],
    });
  }
  for (const size of [512, 1024]) await ok(e0, 'RegisterTaskDefinition', sharedTaskDefinition(`df${size}`, size));
  await ok(e0, 'RegisterTaskDefinition', dedicatedTaskDefinition('dfwhole', 1));
  const inPool = (pool) => [{ type: 'memberOf', expression: `attribute:pool == ${pool}` }];
  const pad = 'p'.repeat(4096);
  const bigPad = 'q'.repeat(7000);

  const writes = []; // {op, body, mark, sent, answered, status, json}
  const acked = new Map(); // task ARN -> the write that acknowledged it
  const sharedLive = [];
  const wholeLive = new Map(); // dedicated task ARN -> its GPU id
  let markSeq = 0;
  let firstRefusalAt; // when the first 5xx was answered
  const seen = new Map();
  const readStats = { polls: 0, cut: 0 };
  const pairs = [];
  const NEAR_FULL_KIB = 64;

  async function send(op, body, mark) {
    const w = { op, body, mark, sent: Date.now() };
    writes.push(w);
    try {
      const res = await call(server.endpoint, op, body, { timeoutMs: 15000 });
      w.status = res.status;
      w.json = res.json;
      w.text = res.text;
    } catch {
      w.status = 0; // no answer: not acknowledged, may or may not have landed (not expected: nothing is killed meanwhile)
    }
    w.answered = Date.now();
    if (w.status >= 500 && firstRefusalAt === undefined) {
      firstRefusalAt = w.answered;
      totals.firstRefusal = `${op} ${w.status}: ${(w.json?.message ?? w.text ?? '').slice(0, 200)}`;
    }
    if (w.status === 200 && op === 'RunTask') {
      for (const t of w.json.tasks) {
        acked.set(t.taskArn, w);
        if (body.taskDefinition === 'dfwhole') wholeLive.set(t.taskArn, t.containers[0]?.gpuIds?.[0]);
        else sharedLive.push(t.taskArn);
      }
    }
    return w;
  }
  const runShared = () => {
    const mark = `df-${SEED}-${markSeq++}`;
    return send('RunTask', { cluster, taskDefinition: rand() < 0.5 ? 'df512' : 'df1024', count: rand() < 0.7 ? 1 : 2, startedBy: mark,
                             placementConstraints: inPool('shared'),
                             overrides: { containerOverrides: [{ name: 'main', environment: [{ name: 'PAD', value: pad }] }] } }, mark);
  };
  // A dedicated task is large (7 KiB of overrides) or small: a StopTask rewrites its whole record, so the stop of a
  // large one can fail where a RunTask of a small one still fits in the space the failed commit gave back.
  const runWhole = (large) => {
    const mark = `df-${SEED}-${markSeq++}`;
    const body = { cluster, taskDefinition: 'dfwhole', startedBy: mark, placementConstraints: inPool('whole') };
    if (large) body.overrides = { containerOverrides: [{ name: 'main', environment: [{ name: 'PAD', value: bigPad }] }] };
    return send('RunTask', body, mark);
  };
  // The dedicated pool starts full: eight large PENDING tasks (never reported RUNNING, so a StopTask frees the GPU
  // at once).
  for (let i = 0; i < WHOLE; ++i) await runWhole(true);
  if (wholeLive.size !== WHOLE) violation(where, `setup: ${wholeLive.size} of ${WHOLE} dedicated tasks placed`);

  const running = { on: true };
  async function worker() {
    for (let n = 0; running.on && n < 100000; ++n) {
      if (firstRefusalAt !== undefined && Date.now() - firstRefusalAt > 300) running.on = false;
      // Near the end of the space, pairs alone: the commit that fails is then most likely a pair's.
      const r = disk.freeKiB() < NEAR_FULL_KIB ? 0 : rand();
      if (r < 0.2 && wholeLive.size) {
        // A StopTask of a dedicated task and, at once, a RunTask that the freed GPU can take.
        const [arn, gpu] = [...wholeLive][Math.floor(rand() * wholeLive.size)];
        wholeLive.delete(arn);
        const [stop, run] = await Promise.all([send('StopTask', { cluster, task: arn, reason: 'disk-full pair' }), runWhole(rand() < 0.5)]);
        pairs.push({ arn, gpu, stop, run });
      } else if (r < 0.65 || !sharedLive.length) {
        await runShared();
      } else if (r < 0.85) {
        const arn = sharedLive.splice(Math.floor(rand() * sharedLive.length), 1)[0];
        const stop = await send('StopTask', { cluster, task: arn, reason: 'disk-full flood' });
        if (stop.status === 200 && stop.json.task.lastStatus !== 'STOPPED')
          await send('SubmitTaskStateChange', { cluster, task: arn, status: 'STOPPED' });
      } else {
        await send('SubmitTaskStateChange', { cluster, task: pick(sharedLive), status: 'RUNNING' });
      }
    }
  }
  const loadStart = Date.now();
  const stopper = setTimeout(() => (running.on = false), 60000); // bounded, should the disk never fill
  const flood = Array.from({ length: WORKERS }, worker);
  flood.push(reader(server.endpoint, cluster, seen, running, readStats));
  await Promise.all(flood);
  clearTimeout(stopper);
  if (firstRefusalAt === undefined) {
    violation(where, `no commit failed within 60 s on ${disk.how} (${writes.length} writes): the disk never filled`);
    await server.stop();
    return;
  }
  totals.fillMs.push(firstRefusalAt - loadStart);
  const health = await fetch(server.endpoint + '/healthz');
  const healthText = await health.text();
  if (health.status !== 503) violation(where, `after a refused commit /healthz answered ${health.status} ${healthText}`);
  // What reads show now, while writes are refused: the committed state, which the restarts must find again.
  const ackedArns = [...acked.keys()];
  const before = await snapshot(server.endpoint, cluster, [...ackedArns, ...seen.keys()]);
  for (const t of before.tasks.values()) noteSeen(seen, t);
  server.child.kill('SIGKILL');
  await server.exited;

  // The verdicts on the writes.
  const stopAcked = new Set(writes.filter((w) => w.op === 'StopTask' && w.status === 200).map((w) => w.body.task));
  const reportAcked = (status) => new Set(writes.filter((w) => w.op === 'SubmitTaskStateChange' && w.status === 200 && w.body.status === status).map((w) => w.body.task));
  const stoppedAcked = reportAcked('STOPPED');
  const runningAcked = reportAcked('RUNNING');
  const ackedW = writes.filter((w) => w.status === 200);
  const refusedW = writes.filter((w) => w.status >= 500);
  totals.acked += ackedW.length;
  totals.refused += refusedW.length;
  totals.ackedTasks += acked.size;
  for (const w of writes) {
    if (w.status > 0 && w.status < 500 && w.status !== 200) violation(where, `${w.op} answered ${w.status}: ${(w.text ?? '').slice(0, 200)}`);
    if (w.status === 0) violation(where, `${w.op} got no answer within 15 s`);
  }
  for (const w of ackedW)
    if (w.sent > firstRefusalAt) {
      ++totals.ackedAfterRefusal;
      violation(where, `${w.op} sent ${w.sent - firstRefusalAt} ms after a commit was refused was acknowledged: it was decided on top of the lost write`);
    }
  for (const p of pairs) {
    ++totals.pairs;
    if (p.stop.status >= 500) {
      ++totals.pairsStopRefused;
      // The racing RunTask may be placed on a GPU an earlier, committed stop freed; on the refused stop's own GPU
      // it can only have been placed on top of that stop.
      const gpu = p.run.status === 200 ? p.run.json.tasks[0]?.containers[0]?.gpuIds?.[0] : undefined;
      if (gpu !== undefined && gpu === p.gpu) {
        ++totals.pairsRunAcked;
        violation(where, `StopTask ${p.arn} (${p.gpu}) was refused, the RunTask racing it was acknowledged on the same GPU`);
      } else if (gpu !== undefined) {
        ++totals.pairsRunElsewhere;
      }
    }
  }

  const check = async (endpoint, label) => {
    const at = `${where}, ${label}`;
    const snap = await snapshot(endpoint, cluster, [...ackedArns, ...seen.keys()]);
    let found = 0;
    for (const [arn, w] of acked) {
      if (snap.tasks.has(arn)) ++found;
      else violation(at, `task ${arn} of an acknowledged RunTask (${w.mark}) is MISSING`);
    }
    for (const arn of stopAcked)
      if (snap.tasks.get(arn) && snap.tasks.get(arn).desiredStatus !== 'STOPPED') violation(at, `StopTask ${arn} was acknowledged, desiredStatus is ${snap.tasks.get(arn).desiredStatus}`);
    for (const arn of stoppedAcked)
      if (snap.tasks.get(arn) && snap.tasks.get(arn).lastStatus !== 'STOPPED') violation(at, `STOPPED report for ${arn} was acknowledged, lastStatus is ${snap.tasks.get(arn).lastStatus}`);
    for (const arn of runningAcked)
      if (snap.tasks.get(arn)?.lastStatus === 'PENDING') violation(at, `RUNNING report for ${arn} was acknowledged, lastStatus is PENDING`);
    // Nothing refused is there.
    let refusedFound = 0;
    const byStartedBy = new Map();
    for (const t of snap.tasks.values()) byStartedBy.set(t.startedBy, [...(byStartedBy.get(t.startedBy) ?? []), t.taskArn]);
    for (const w of refusedW) {
      let what;
      if (w.op === 'RunTask' && byStartedBy.has(w.mark)) what = `its task(s) ${byStartedBy.get(w.mark).join(', ')} exist`;
      else if (w.op === 'StopTask' && !stopAcked.has(w.body.task) && snap.tasks.get(w.body.task)?.desiredStatus === 'STOPPED')
        what = `task ${w.body.task} is desiredStatus STOPPED`;
      else if (w.op === 'SubmitTaskStateChange' && w.body.status === 'RUNNING' && !runningAcked.has(w.body.task) &&
               snap.tasks.get(w.body.task)?.lastStatus === 'RUNNING')
        what = `task ${w.body.task} is RUNNING`;
      if (!what) continue;
      ++refusedFound;
      violation(at, `${w.op} ${w.mark ?? w.body.task} was refused (${w.status}), yet ${what}`);
    }
    // For every task listed, its lastStatus/desiredStatus and GPUs equal what reads showed before the kill.
    for (const [arn, t] of before.tasks) {
      const u = snap.tasks.get(arn);
      if (u && (u.desiredStatus !== t.desiredStatus || u.lastStatus !== t.lastStatus))
        violation(at, `task ${arn} read ${t.lastStatus}/${t.desiredStatus} before the kill, ${u.lastStatus}/${u.desiredStatus} after`);
    }
    if (snap.tasks.size !== before.tasks.size) violation(at, `${before.tasks.size} tasks read before the kill, ${snap.tasks.size} after`);
    totals.dirty += checkSeen(at, snap, seen);
    totals.gpusChecked += checkAccounting(at, snap);
    return { found, refusedFound };
  };

  // Restart 1: on the disk as full as the kill left it.
  let full;
  try {
    server = await startServerWith(disk.bin, { db, extraArgs: PLAY_AGENT });
  } catch (err) {
    const said = /gpupack: [^\n]*/.exec(String(err.message))?.[0] ?? String(err.message);
    totals.restartFull.push(`did not start: ${said.slice(0, 160)}`);
    server = undefined;
  }
  if (server) {
    full = await check(server.endpoint, 'restarted on the full disk');
    totals.restartFull.push('started and served reads');
    server.child.kill('SIGKILL');
    await server.exited;
  }
  // Restart 2: with the space back, as an operator would. Writes are accepted again.
  disk.grow();
  try {
    server = await startServerWith(disk.bin, { db, extraArgs: PLAY_AGENT });
  } catch (err) {
    // A server that finds the durable state inconsistent refuses to load it: a write decided on top of a lost one became durable.
    violation(where, `with the space back the server did not start: ${String(err.message).replace(/\s+/g, ' ').slice(0, 600)}`);
    totals.restartFailed += 1;
    return;
  }
  const grown = await check(server.endpoint, 'restarted with space');
  totals.foundAfter += grown.found;
  totals.refusedFound += Math.max(grown.refusedFound, full?.refusedFound ?? 0);
  const again = await call(server.endpoint, 'RunTask', { cluster, taskDefinition: 'df512', placementConstraints: inPool('shared') });
  if (again.status !== 200) violation(where, `with space back, a RunTask answered ${again.status}: ${again.text.slice(0, 200)}`);
  totals.polls += readStats.polls;
  totals.seen += seen.size;
  await server.stop();
  console.log(`${where}: ${disk.how}; first refusal after ${firstRefusalAt - loadStart} ms; ${ackedW.length} writes acknowledged ` +
              `(${acked.size} tasks), ${refusedW.length} refused; after the restarts ${grown.found}/${acked.size} acknowledged tasks found, ` +
              `${grown.refusedFound} refused writes found; ${pairs.length} stop+run pairs (${pairs.filter((p) => p.stop.status >= 500).length} stops refused)`);
}

// ---- main -----------------------------------------------------------------------------------------------------

const dir = tempDir('gpupack-crash-');
let s, a, d;
try {
  if (SERVER_ROUNDS) s = await serverRounds(dir);
  if (AGENT_ROUNDS) a = await agentRounds(dir);
  if (DISK_ROUNDS) d = await diskFullRounds(dir);
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
  console.log(`        dirty reads: a reader polled ListTasks + DescribeTasks ${s.readStats.polls} times during the rounds and saw ` +
              `${s.seen} tasks; ${s.readStats.dirty} of them missing or behind their read state after a restart; ` +
              `${s.readStats.readKills} SIGKILLs the moment it listed a task whose RunTask was not answered yet`);
}
if (a) {
  console.log(`agent:  ${a.survived}/${a.rounds} SIGKILL rounds without a violation in ${a.seconds.toFixed(1)} s; ` +
              `${a.acked} acknowledged tasks checked, ${a.stops} acknowledged StopTasks, ${a.gpusChecked} GPU checks, ` +
              `${a.stats.placementFailures} RunTasks placed nothing ${JSON.stringify(a.stats.failureReasons)}, ${a.stats.cut} calls cut, ` +
              `${a.stats.killedWhileStarting} tasks stopped as "agent restarted while starting"`);
}
if (d) {
  console.log(`disk:   ${d.survived}/${d.rounds} disk-full rounds without a violation in ${d.seconds.toFixed(1)} s; database on ${d.how}`);
  console.log(`        first refusal after ${d.fillMs.join(', ')} ms of load: ${d.firstRefusal}`);
  console.log(`        ${d.acked} writes acknowledged (${d.ackedTasks} tasks), ${d.refused} refused; after the restarts ` +
              `${d.foundAfter}/${d.ackedTasks} acknowledged tasks found, ${d.refusedFound} refused writes found, ` +
              `${d.ackedAfterRefusal} writes acknowledged after a refusal; ${d.pairs} StopTask+RunTask pairs on the dedicated pool, ` +
              `${d.pairsStopRefused} stops refused: ${d.pairsRunAcked} of their RunTasks acknowledged on the stopped task's GPU ` +
              `(${d.pairsRunElsewhere} on a GPU an earlier stop freed)`);
  const fullStarts = d.restartFull.filter((r) => r === 'started and served reads').length;
  const fullFailures = d.restartFull.filter((r) => r !== 'started and served reads');
  console.log(`        restarts on the full disk: ${fullStarts}/${d.restartFull.length} started and served reads` +
              `${fullFailures.length ? ` (${fullFailures.join('; ')})` : ''}; with the space back ${d.restartFailed} refused to start; dirty reads: ${d.polls} polls saw ${d.seen} tasks, ` +
              `${d.dirty} missing or behind after a restart; ${d.gpusChecked} GPU checks`);
}
console.log(`violations: ${violations.length}`);
if (opt.keep) console.log(`kept ${dir}`);
else removeTempDir(dir);
process.exit(violations.length ? 1 : 0);
