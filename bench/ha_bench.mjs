#!/usr/bin/env node
// ha_bench: several gpupack servers on one private PostgreSQL (tests/integration/ha_harness.mjs), measured.
//
//   takeover  three replicas; --instances container instances (8 GPUs each) registered and --tasks tasks placed
//             (RunTask count 10 from --workers concurrent clients; every --running-every-th call's tasks reported
//             RUNNING, the rest PENDING) before the first kill. A real `gpupack agent` (fake GPUs, the process
//             runtime) given every replica serves a cluster of its own, and --load-clients clients keep sending
//             RunTask with a clientToken, retried on the next replica until answered 200, through all rounds.
//             Then --rounds times (fewer when --max-minutes runs out first), each once every standby says it is
//             ready to lead (/readyz readyToLead: one fault at a time): SIGKILL of the leader, and the clock
//             runs until a survivor's log says it took the lease, until it serves as the leader (its state
//             loaded), until its /readyz says it is the ready leader, until a RunTask sent to the survivors in
//             turn (as a retrying client does) is answered 200, and until the agent is connected again. p50/p99
//             of each. The killed replica is restarted (a standby) and the agent gets one more task each round.
//             Safety, checked after the rounds through the API and in PostgreSQL: every acknowledged task exists
//             exactly once (one task per acknowledged clientToken, the ARN the acknowledgement gave; nothing
//             else but the preloaded tasks); every GPU's used memory equals the RUNNING and PENDING tasks on it;
//             the database's task rows are exactly the tasks the leader lists (nothing landed that was neither
//             acknowledged nor preloaded, as a deposed leader's commit would); the agent started no task twice
//             (its log says "task ARN RUNNING" once per start) and every task run on it is RUNNING. The count of
//             violations is printed, and the exit status is 1 when there is any.
//   herd      three replicas; --agents simulated agents (bench/agent_swarm in serve mode with --follow, at most
//             --per-swarm agents a process, --agent-offset keeping their instances apart: 8 GPUs each) registered
//             through the leader and holding its channel, each given the three replicas as the real agent is
//             given --server. --load-clients clients keep sending RunTask (one shared-GPU task, cluster "swarm")
//             with a clientToken to the replicas in turn, retried on the next one as long as the answer is a 5xx or
//             no answer, and waiting --pause-ms between calls. Then --rounds times: SIGKILL of the leader, and the
//             clock runs until a survivor took the lease, is the ready leader, answers the first RunTask 200 (as
//             in takeover), and until every agent was welcomed by the new leader (a welcome of the new epoch: the
//             agents reconnect as the real agent does, bench/swarm_follow.h, and each prints its loss, hello and
//             welcome times). Per round: p50/p99/max of the agents' return (kill -> welcome, and their own loss
//             -> welcome), the time the last one returned, and the RunTask latency of the calls sent in the 10 s
//             before the kill against those sent while the herd came back (from the first RunTask 200 to the
//             last agent's welcome); every RunTask answered with a 4xx or with a failure (AGENT, MISSING, ...)
//             is counted and must be none. The killed replica is restarted as a standby each round. Safety after
//             the rounds as takeover checks it (every acknowledged clientToken one task, GPU accounting, the
//             database's rows). --log-dir DIR keeps every replica's log there.
//   runtask   RunTask (count 1) from --clients concurrent HTTP clients for --seconds, against one server on
//             PostgreSQL (fsync on: durable) and one on SQLite (WAL, synchronous=FULL), same cluster shape:
//             calls/s, p50/p99 latency, and the PostgreSQL/SQLite ratio of calls/s.
//
// Usage: node bench/ha_bench.mjs [--rounds 20] [--instances 1000] [--tasks 0] [--workers 16] [--running-every 10]
//                                [--load-clients 2] [--max-minutes 0] [--ttl-ms 2000] [--clients 32]
//                                [--seconds 10] [--only takeover|runtask|herd] [--agents 500] [--per-swarm 2500]
//                                [--pause-ms 100] [--follow-threads 64] [--io-threads 2] [--log-dir DIR]
// The binary: $GPUPACK_BIN, else build/gpupack; the swarm: $GPUPACK_SWARM_BIN, else build/bench/agent_swarm. Loopback only. PostgreSQL runs with fsync on here (durable),
// unlike the tests.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { call, gpupackBin, ok, PLAY_AGENT, pool, registerInstance, removeTempDir, sharedTaskDefinition, startServer, tempDir } from '../tests/integration/harness.mjs';
import { spawnSwarm } from './swarm_process.mjs';
import { callAny, freePort, postgresBinDir, NO_POSTGRES, readyz, startPostgres, startReplica, waitLeader } from '../tests/integration/ha_harness.mjs';

const { values: opt } = parseArgs({
  options: {
    rounds: { type: 'string', default: '20' },
    instances: { type: 'string', default: '1000' },
    tasks: { type: 'string', default: '0' },
    workers: { type: 'string', default: '16' },
    'running-every': { type: 'string', default: '10' },
    'load-clients': { type: 'string', default: '2' },
    'max-minutes': { type: 'string', default: '0' },
    'ttl-ms': { type: 'string', default: '2000' },
    clients: { type: 'string', default: '32' },
    seconds: { type: 'string', default: '10' },
    only: { type: 'string', default: '' },
    agents: { type: 'string', default: '500' },
    'per-swarm': { type: 'string', default: '2500' },
    'pause-ms': { type: 'string', default: '100' },
    'follow-threads': { type: 'string', default: '64' },
    'io-threads': { type: 'string', default: '2' },
    'log-dir': { type: 'string', default: '' },
  },
});
if (!postgresBinDir()) {
  console.error(NO_POSTGRES);
  process.exit(2);
}
const roundsWanted = Number(opt.rounds);
const instances = Number(opt.instances);
const tasks = Number(opt.tasks);
const workers = Number(opt.workers);
const runningEvery = Number(opt['running-every']);
const loadClients = Number(opt['load-clients']);
const deadline = Number(opt['max-minutes']) > 0 ? Date.now() + Number(opt['max-minutes']) * 60000 : 0;
const ttlMs = Number(opt['ttl-ms']);
const clients = Number(opt.clients);
const seconds = Number(opt.seconds);
const herdAgents = Number(opt.agents);
const perSwarm = Number(opt['per-swarm']);
const pauseMs = Number(opt['pause-ms']);

const pctl = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
};
const fmt = (xs) => !xs.length ? 'none' : `p50 ${pctl(xs, 50)} ms  p99 ${pctl(xs, 99)} ms  max ${xs.reduce((a, b) => Math.max(a, b))} ms  (n=${xs.length})`;

async function setUpCluster(endpoint, cluster, count) {
  await ok(endpoint, 'CreateCluster', { clusterName: cluster });
  await ok(endpoint, 'RegisterTaskDefinition', sharedTaskDefinition('infer', 512));
  await pool(count, workers, (i) =>
    registerInstance(endpoint, cluster, Array.from({ length: 8 }, (_, g) => [`GPU-${i}-${g}`, 81920]), { cpu: 1 << 20, memory: 1 << 24 }));
}

// placeTasks: RunTask count 10 (startedBy "pre") from the worker pool until `count` tasks exist; every
// --running-every-th call's tasks are reported RUNNING (SubmitTaskStateChange, as an agent would), the rest stay
// PENDING. Capacity is far above what is asked: a placement failure stops the run.
async function placeTasks(endpoint, cluster, count) {
  const calls = Math.ceil(count / 10);
  let running = 0;
  await pool(calls, workers, async (c) => {
    const n = Math.min(10, count - c * 10);
    const r = await ok(endpoint, 'RunTask', { cluster, taskDefinition: 'infer', count: n, startedBy: 'pre' });
    if (r.tasks.length !== n) throw new Error(`RunTask placed ${r.tasks.length} of ${n}: ${JSON.stringify(r.failures).slice(0, 300)}`);
    if (runningEvery && c % runningEvery === 0)
      for (const t of r.tasks) {
        await ok(endpoint, 'SubmitTaskStateChange', { cluster, task: t.taskArn, status: 'RUNNING' });
        ++running;
      }
  });
  return running;
}

async function listAll(replicas, op, body, key) {
  const out = [];
  let nextToken;
  for (let page = 0; page < 100000; ++page) {
    const r = await callAny(replicas, op, { ...body, nextToken, maxResults: 100 }, { timeoutMs: 120000 });
    if (r.status !== 200) throw new Error(`${op}: ${r.status} ${r.text}`);
    out.push(...r.json[key]);
    nextToken = r.json.nextToken;
    if (!nextToken) return out;
  }
  throw new Error(`${op}: more than 100,000 pages`);
}

// describeAll: every task of `cluster` (desired RUNNING and STOPPED), described, 100 per call, 8 calls at a time.
async function describeAll(replicas, cluster) {
  const arns = [...new Set([
    ...(await listAll(replicas, 'ListTasks', { cluster, desiredStatus: 'RUNNING' }, 'taskArns')),
    ...(await listAll(replicas, 'ListTasks', { cluster, desiredStatus: 'STOPPED' }, 'taskArns')),
  ])];
  const tasks = [];
  await pool(Math.ceil(arns.length / 100), 8, async (i) => {
    const r = await callAny(replicas, 'DescribeTasks', { cluster, tasks: arns.slice(i * 100, i * 100 + 100) }, { timeoutMs: 120000 });
    if (r.status !== 200) throw new Error(`DescribeTasks: ${r.status} ${r.text}`);
    tasks.push(...r.json.tasks);
  });
  return tasks;
}

// safety checks the cluster through the replicas and returns the violations found (strings):
// - every acknowledged task exists exactly once: each acknowledged clientToken (also the task's startedBy) names
//   exactly one task, the ARN its acknowledgement gave; no token made two; the cluster holds the preloaded tasks
//   plus the acknowledged ones and nothing else;
// - GPU accounting: every GPU's used memory (total - remaining) equals the declared MPS memory of the RUNNING and
//   PENDING tasks placed on it;
// - the database holds what the API says: its task rows (read with psql, straight from PostgreSQL) are exactly
//   the tasks listed, so no write landed that no leader serves (a deposed leader's commit would be one).
async function safety(pg, db, replicas, cluster, acked, preloaded) {
  const violations = [];
  const tasks = await describeAll(replicas, cluster);
  const byToken = new Map();
  for (const t of tasks) if (t.startedBy !== 'pre') byToken.set(t.startedBy, [...(byToken.get(t.startedBy) ?? []), t.taskArn]);
  for (const [token, arn] of acked) {
    const held = byToken.get(token) ?? [];
    if (held.length !== 1 || held[0] !== arn) violations.push(`token ${token} acknowledged as ${arn}; the cluster holds [${held}]`);
  }
  for (const [token, held] of byToken) {
    if (held.length !== 1) violations.push(`token ${token} made ${held.length} tasks`);
    if (!acked.has(token)) violations.push(`token ${token}: a task nobody acknowledged`);
  }
  const pre = tasks.length - [...byToken.values()].reduce((n, h) => n + h.length, 0);
  if (pre !== preloaded) violations.push(`${pre} preloaded tasks, ${preloaded} placed`);
  const declared = new Map();
  for (const t of tasks) {
    if (t.lastStatus !== 'RUNNING' && t.lastStatus !== 'PENDING') continue;
    for (const c of t.containers)
      for (const id of c.gpuIds ?? []) declared.set(id, (declared.get(id) ?? 0) + (c.gpuSharingStrategy?.nvidiaMps?.memory ?? 0));
  }
  const ciArns = await listAll(replicas, 'ListContainerInstances', { cluster }, 'containerInstanceArns');
  let gpus = 0;
  await pool(Math.ceil(ciArns.length / 100), 8, async (i) => {
    const r = await callAny(replicas, 'DescribeContainerInstances', { cluster, containerInstances: ciArns.slice(i * 100, i * 100 + 100) }, { timeoutMs: 120000 });
    if (r.status !== 200) throw new Error(`DescribeContainerInstances: ${r.status} ${r.text}`);
    for (const ci of r.json.containerInstances)
      for (const g of ci.gpuDevices ?? []) {
        ++gpus;
        const used = g.totalMemoryInMiB - g.remainingMemoryInMiB;
        if (used !== (declared.get(g.gpuId) ?? 0)) violations.push(`GPU ${g.gpuId}: ${used} MiB used, tasks declare ${declared.get(g.gpuId) ?? 0}`);
      }
  });
  const dbName = db.slice(db.lastIndexOf('/') + 1);
  const rows = Number(pg.psql(`SELECT count(*) FROM tasks WHERE arn LIKE '%:task/${cluster}/%'`, dbName).trim());
  if (rows !== tasks.length) violations.push(`the database holds ${rows} task rows of ${cluster}, the API lists ${tasks.length}`);
  return { violations, tasks: tasks.length, gpus, rows };
}

// startAgent: one real `gpupack agent` (fake GPUs, the process runtime) given every replica, in its own cluster;
// it logs "agent: task ARN RUNNING" once per start, which the check counts.
async function startAgent(replicas, dir, cluster) {
  await ok(replicas[0].endpoint, 'CreateCluster', { clusterName: cluster }).catch(() => {});
  const def = sharedTaskDefinition('sleepy', 1024);
  def.containerDefinitions[0].entryPoint = ['/bin/sh', '-c'];
  def.containerDefinitions[0].command = ['exec sleep 3600'];
  const reg = await callAny(replicas, 'RegisterTaskDefinition', def);
  if (reg.status !== 200) throw new Error(`RegisterTaskDefinition: ${reg.text}`);
  const logPath = path.join(dir, 'agent.log');
  const log = fs.openSync(logPath, 'a');
  const child = spawn(gpupackBin(), ['agent', '--server', replicas.map((r) => r.endpoint).join(','), '--cluster', cluster,
    '--gpus', 'fake:2x81920', '--runtime', 'process', '--state-dir', path.join(dir, 'agent'), '--mps-pipe-dir', path.join(dir, 'mps'),
    '--name', 'ha-bench-node', '--cpu', '65536', '--memory', '262144', '--stop-grace-ms', '200', '--log-level', 'info'],
  { stdio: ['ignore', log, log] });
  fs.closeSync(log);
  const exited = new Promise((resolve) => child.on('exit', resolve));
  return {
    log: () => fs.readFileSync(logPath, 'utf8'),
    hellos: () => fs.readFileSync(logPath, 'utf8').split('\n').filter((l) => /channel open/.test(l)).length,
    async stop() {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15000);
      await exited;
      clearTimeout(timer);
    },
  };
}

async function agentConnected(replicas, cluster) {
  const l = await callAny(replicas, 'ListContainerInstances', { cluster }, { timeoutMs: 5000 });
  if (l.status !== 200 || l.json.containerInstanceArns.length !== 1) return false;
  const d = await callAny(replicas, 'DescribeContainerInstances', { cluster, containerInstances: l.json.containerInstanceArns }, { timeoutMs: 5000 });
  return d.status === 200 && d.json.containerInstances[0]?.agentConnected === true;
}

async function waitUntil(what, f, ms) {
  for (const deadline = Date.now() + ms; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) if (await f()) return Date.now();
  throw new Error(`${what} not within ${ms} ms`);
}

// watchLog records when (Date.now(), as the line arrives) a replica's log says it took the lease and when it
// serves as the leader (its state loaded): the takeover's parts.
function watchLog(replica, marks) {
  let buf = '';
  const onData = (d) => {
    buf += d;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (/this server holds the lease/.test(line)) marks.lease ??= Date.now();
      if (/serving as the leader/.test(line)) marks.serving ??= Date.now();
      if (/this server lost the lease/.test(line)) marks.lost = [...(marks.lost ?? []), Date.now()];
    }
  };
  replica.child.stderr.on('data', onData);
  replica.child.stdout.on('data', onData);
  return () => {
    replica.child.stderr.off('data', onData);
    replica.child.stdout.off('data', onData);
  };
}

async function takeover(pg) {
  const db = pg.createDatabase('takeover');
  const replicas = [];
  const replica = (port) => startReplica({ db, port, ttlMs, extraArgs: PLAY_AGENT, logLevel: 'info', startTimeoutMs: 120000 });
  for (let i = 0; i < 3; ++i) replicas.push(await replica(await freePort()));
  const { leader } = await waitLeader(replicas, { all: true });
  let t0 = Date.now();
  await setUpCluster(leader.endpoint, 'ha', instances);
  const registerMs = Date.now() - t0;
  t0 = Date.now();
  const running = await placeTasks(leader.endpoint, 'ha', tasks);
  const placeMs = Date.now() - t0;
  console.log(`takeover: ${instances} instances registered in ${registerMs} ms, ${tasks} tasks placed in ${placeMs} ms ` +
    `(${running} reported RUNNING); lease TTL ${ttlMs} ms, renewed every ${Math.min(1000, Math.floor(ttlMs / 3))} ms; ` +
    `${loadClients} retrying RunTask clients during the rounds`);

  // One real agent in its own cluster follows the leader through every round; each round starts one task on it.
  const dir = tempDir('gpupack-ha-bench-agent-');
  const agent = await startAgent(replicas, dir, 'agents');
  const agentTasks = [];
  const runOnAgent = async (token) => {
    const r = await callAny(replicas, 'RunTask', { cluster: 'agents', taskDefinition: 'sleepy', clientToken: token, startedBy: token }, { timeoutMs: 60000 });
    if (r.status !== 200 || r.json.tasks.length !== 1) throw new Error(`RunTask on the agent: ${r.status} ${r.text}`);
    agentTasks.push(r.json.tasks[0].taskArn);
  };
  await waitUntil('the agent connected', () => agentConnected(replicas, 'agents'), 60000);
  await runOnAgent('agent-pre');

  // Retrying clients: RunTask with a clientToken (also its startedBy) sent to the replicas in turn until one
  // answers 200, as ECS clients retry; every acknowledgement is recorded and checked at the end.
  const acked = new Map();
  let loading = true;
  const clientLoop = async (w) => {
    for (let n = 0; loading && n < 1000000; ++n) {
      const token = `w${w}-${n}`;
      const r = await callAny(replicas, 'RunTask', { cluster: 'ha', taskDefinition: 'infer', clientToken: token, startedBy: token },
        { start: (w + n) % replicas.length, timeoutMs: 120000 });
      if (r.status !== 200 || r.json.tasks.length !== 1) throw new Error(`RunTask ${token}: ${r.status} ${r.text}`);
      acked.set(token, r.json.tasks[0].taskArn);
      await new Promise((res) => setTimeout(res, 100));
    }
  };
  const clientsDone = Promise.all(Array.from({ length: loadClients }, (_, w) => clientLoop(w)));

  const parts = { lease: [], loaded: [], ready: [], write: [], agent: [] };
  let rounds = 0;
  for (let round = 0; round < roundsWanted; ++round) {
    if (deadline && Date.now() > deadline) break;
    const { leader: old, epoch } = await waitLeader(replicas, { all: true, timeoutMs: 600000 });
    const others = replicas.filter((r) => r !== old);
    // One fault at a time: the replica killed last round is a standby again only once it has loaded the state
    // and caught up (its /readyz readyToLead); killing the leader before that would measure two faults at once,
    // the last survivor still loading.
    const waitStart = Date.now();
    await waitUntil(`round ${round}: every standby ready to lead`, async () =>
      (await Promise.all(others.map((r) => readyz(r.endpoint)))).every((a) => a.json?.readyToLead === true), 600000);
    const standbyWait = Date.now() - waitStart;
    const marks = {};
    const unwatch = others.map((r) => watchLog(r, marks));
    const hellos = agent.hellos();
    const killed = Date.now();
    await old.kill9();
    const token = `round-${round}`;
    const [ready, write] = await Promise.all([
      waitLeader(others, { timeoutMs: 600000 }).then((v) => ({ at: Date.now(), epoch: v.epoch })),
      callAny(others, 'RunTask', { cluster: 'ha', taskDefinition: 'infer', clientToken: token, startedBy: token }, { timeoutMs: 600000 }).then((r) => {
        if (r.status !== 200) throw new Error(`round ${round}: RunTask ${r.status} ${r.text}`);
        acked.set(token, r.json.tasks[0].taskArn);
        return Date.now();
      }),
    ]);
    if (ready.epoch <= epoch) throw new Error(`round ${round}: the new epoch ${ready.epoch} is not above ${epoch}`);
    // The agent's own log, not agentConnected: the new leader reads an agent connected before the takeover as
    // connected for a grace while it reconnects (docs/ha.md).
    const agentAt = await waitUntil(`round ${round}: the agent reconnected`, () => agent.hellos() > hellos, 120000);
    unwatch.forEach((f) => f());
    parts.lease.push((marks.lease ?? ready.at) - killed);
    parts.loaded.push((marks.serving ?? ready.at) - killed);
    parts.ready.push(ready.at - killed);
    parts.write.push(write - killed);
    parts.agent.push(agentAt - killed);
    console.log(`round ${round}: epoch ${epoch} -> ${ready.epoch}; lease taken ${parts.lease.at(-1)} ms, serving ${parts.loaded.at(-1)} ms, ` +
      `ready ${parts.ready.at(-1)} ms, first RunTask 200 ${write - killed} ms, agent connected ${agentAt - killed} ms after the kill ` +
      `(the standbys were ready to lead ${standbyWait} ms after the round began)`);
    await runOnAgent(`agent-round-${round}`);
    replicas[replicas.indexOf(old)] = await replica(old.port);
    ++rounds;
  }
  loading = false;
  await clientsDone;
  await waitLeader(replicas, { all: true, timeoutMs: 600000 });

  // Safety over the rounds.
  const s = await safety(pg, db, replicas, 'ha', acked, tasks);
  const starts = new Map();
  for (const m of agent.log().matchAll(/agent: task (\S+) RUNNING/g)) starts.set(m[1], (starts.get(m[1]) ?? 0) + 1);
  const twice = [...starts].filter(([, n]) => n > 1);
  const agentState = await describeAll(replicas, 'agents');
  const notRunning = agentTasks.filter((arn) => agentState.find((t) => t.taskArn === arn)?.lastStatus !== 'RUNNING');
  const neverStarted = agentTasks.filter((arn) => !starts.has(arn));
  const violations = [...s.violations, ...twice.map(([arn, n]) => `the agent started ${arn} ${n} times`),
    ...notRunning.map((arn) => `agent task ${arn} is not RUNNING`), ...neverStarted.map((arn) => `the agent never started ${arn}`)];
  await agent.stop();
  removeTempDir(dir);
  for (const r of replicas) await r.stop();

  console.log(`takeover  ${rounds} rounds (of ${roundsWanted} asked), ${instances} instances, ${tasks} tasks placed before the first kill`);
  console.log(`takeover  kill -> a survivor took the lease   ${fmt(parts.lease)}`);
  console.log(`takeover  kill -> serving (state loaded)      ${fmt(parts.loaded)}`);
  console.log(`takeover  kill -> /readyz leader              ${fmt(parts.ready)}`);
  console.log(`takeover  kill -> first RunTask 200           ${fmt(parts.write)}`);
  console.log(`takeover  kill -> the agent connected again   ${fmt(parts.agent)}`);
  console.log(`safety    ${acked.size} RunTasks acknowledged by retrying clients (${rounds} of them the rounds' first); ` +
    `${s.tasks} tasks in the cluster (${s.rows} task rows in PostgreSQL), ${s.gpus} GPUs accounted; ` +
    `the agent started ${starts.size} tasks (${agentTasks.length} run on it); ${violations.length} violations`);
  for (const v of violations.slice(0, 20)) console.log(`  violation: ${v}`);
  return violations.length;
}

// ---- herd: many simulated agents following the leader --------------------------------------------------------------

const swarmBin = () => {
  const bin = process.env.GPUPACK_SWARM_BIN
    || path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'build', 'bench', 'agent_swarm');
  if (!fs.existsSync(bin)) throw new Error(`agent_swarm not found at ${bin}: build it, or set GPUPACK_SWARM_BIN`);
  return bin;
};

// startSwarm: one agent_swarm in serve mode with --follow, given `servers` (the leader first: it registers the
// agents and takes their first channels). Its "returned AGENT LOST HELLO WELCOME EPOCH ATTEMPTS" lines go to
// `returns` as they come; ready resolves once it printed "ready:".
function startSwarm(servers, agents, offset, dir, index, returns) {
  const args = ['--server', servers.join(','), '--follow', '--follow-threads', opt['follow-threads'], '--io-threads', opt['io-threads'], '--agents', String(agents),
    '--agent-offset', String(offset), '--baseline-s', '0', '--serve-s', '3600', '--dir', dir];
  return spawnSwarm(swarmBin(), args, {
    name: `swarm ${index}`,
    onLine: (line) => {
      const m = /^returned (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)$/.exec(line);
      if (m) returns.push({ agent: Number(m[1]), lost: Number(m[2]), hello: Number(m[3]), welcome: Number(m[4]), epoch: Number(m[5]), attempts: Number(m[6]) });
      return Boolean(m);
    },
  });
}

const loadavg = () => fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

async function herd(pg) {
  const db = pg.createDatabase('herd');
  const replicas = [];
  const everyReplica = [];
  const replica = async (port) => {
    const r = await startReplica({ db, port, ttlMs, extraArgs: ['--max-agent-channels', String(herdAgents + 100)], logLevel: 'info', startTimeoutMs: 120000 });
    everyReplica.push(r);
    return r;
  };
  for (let i = 0; i < 3; ++i) replicas.push(await replica(await freePort()));
  const { leader } = await waitLeader(replicas, { all: true });
  const dir = tempDir('gpupack-ha-herd-');
  const returns = [];
  const swarms = [];
  const servers = [leader, ...replicas.filter((r) => r !== leader)].map((r) => r.endpoint);
  let t0 = Date.now();
  for (let offset = 0, i = 0; offset < herdAgents; offset += perSwarm, ++i)
    swarms.push(startSwarm(servers, Math.min(perSwarm, herdAgents - offset), offset, dir, i, returns));
  await Promise.all(swarms.map((s) => s.ready));
  const connectMs = Date.now() - t0;
  await waitLeader(replicas, { all: true, timeoutMs: 600000 });
  console.log(`herd: ${herdAgents} agents (${swarms.length} agent_swarm processes, --follow, ${opt['follow-threads']} attempt threads and ${opt['io-threads']} io threads each) ` +
    `registered, connected and welcomed in ${connectMs} ms; lease TTL ${ttlMs} ms; ${loadClients} RunTask clients, ` +
    `${pauseMs} ms between calls; load average ${loadavg()}`);

  // RunTask clients: a clientToken (also startedBy) each, sent to the replicas in turn until something other than
  // a 5xx or no answer comes (callAny); every call is kept with when it was sent, how long it took and how it
  // was answered. A 4xx, or a 200 without the task (a failure: AGENT, MISSING, RESOURCE...), is a bad answer.
  const acked = new Map();
  const calls = [];
  const bad = [];
  let loading = true;
  const clientLoop = async (w) => {
    for (let n = 0; loading && n < 1000000; ++n) {
      const token = `h${w}-${n}`;
      const sent = Date.now();
      const r = await callAny(replicas, 'RunTask', { cluster: 'swarm', taskDefinition: 'swarm-shared-2g', clientToken: token, startedBy: token },
        { start: (w + n) % replicas.length, timeoutMs: 120000 });
      const ms = Date.now() - sent;
      calls.push({ sent, ms, status: r.status });
      if (r.status === 200 && r.json.tasks.length === 1) acked.set(token, r.json.tasks[0].taskArn);
      else bad.push({ sent, token, status: r.status, text: (r.status === 200 ? JSON.stringify(r.json.failures) : r.text).slice(0, 300) });
      await new Promise((res) => setTimeout(res, pauseMs));
    }
  };
  const clientsDone = Promise.all(Array.from({ length: loadClients }, (_, w) => clientLoop(w)));
  await new Promise((res) => setTimeout(res, 12000));  // the "before" window fills

  const rows = [];
  let rounds = 0;
  const writeLogs = () => {
    if (!opt['log-dir']) return;
    fs.mkdirSync(opt['log-dir'], { recursive: true });
    everyReplica.forEach((r, i) => fs.writeFileSync(path.join(opt['log-dir'], `replica-${i}-port-${r.port}.log`), r.output));
    swarms.forEach((w, i) => fs.writeFileSync(path.join(opt['log-dir'], `swarm-${i}.out`), w.output));
  };
  process.on('exit', writeLogs);  // also when the run fails
  for (let round = 0; round < roundsWanted; ++round) {
    if (deadline && Date.now() > deadline) break;
    const { leader: old, epoch } = await waitLeader(replicas, { all: true, timeoutMs: 600000 });
    const others = replicas.filter((r) => r !== old);
    const marks = {};
    const unwatch = others.map((r) => watchLog(r, marks));
    const load0 = loadavg();
    const killed = Date.now();
    await old.kill9();
    const token = `round-${round}`;
    const [ready, write] = await Promise.all([
      waitLeader(others, { timeoutMs: 600000 }).then((v) => ({ at: Date.now(), epoch: v.epoch })),
      callAny(others, 'RunTask', { cluster: 'swarm', taskDefinition: 'swarm-shared-2g', clientToken: token, startedBy: token }, { timeoutMs: 600000 }).then((r) => {
        if (r.status === 200 && r.json.tasks.length === 1) acked.set(token, r.json.tasks[0].taskArn);
        else bad.push({ sent: killed, token, status: r.status, text: (r.status === 200 ? JSON.stringify(r.json.failures) : r.text).slice(0, 300) });
        return Date.now();
      }),
    ]);
    if (ready.epoch <= epoch) throw new Error(`round ${round}: the new epoch ${ready.epoch} is not above ${epoch}`);
    // Every agent welcomed by the leader: the new one's epoch, or a later one's when the new leader lost its lease
    // meanwhile (then the agents count from their welcome by the latest leader, and the round says so). Bounded.
    let back = new Map();
    let herdEpoch = ready.epoch;
    const epochs = new Set([ready.epoch]);
    const herdDeadline = Date.now() + 180000;
    for (let seen = 0; Date.now() < herdDeadline; await new Promise((r) => setTimeout(r, 50))) {
      for (; seen < returns.length; ++seen) {
        const r = returns[seen];
        if (r.welcome < killed || r.epoch < herdEpoch) continue;
        if (r.epoch > herdEpoch) {
          herdEpoch = r.epoch;
          epochs.add(r.epoch);
          back = new Map();
        }
        if (!back.has(r.agent)) back.set(r.agent, r);
      }
      if (back.size >= herdAgents) break;
    }
    unwatch.forEach((f) => f());
    const load1 = loadavg();
    const list = [...back.values()];
    const sinceKill = list.map((r) => r.welcome - killed);
    const sinceLoss = list.map((r) => r.welcome - r.lost);
    const helloSinceKill = list.map((r) => r.hello - killed);
    const helloToWelcome = list.map((r) => r.welcome - r.hello);
    const attempts = list.map((r) => r.attempts);
    const last = sinceKill.length ? Math.max(...sinceKill) : NaN;
    const before = calls.filter((c) => c.sent >= killed - 10000 && c.sent < killed).map((c) => c.ms);
    const during = calls.filter((c) => c.sent >= write && c.sent <= killed + last).map((c) => c.ms);
    const gap = calls.filter((c) => c.sent >= killed && c.sent < write).map((c) => c.ms);
    const badHere = bad.filter((b) => b.sent >= killed - 10000 && b.sent <= killed + (Number.isFinite(last) ? last : 180000));
    const row = {
      round, epoch, newEpoch: ready.epoch, lease: (marks.lease ?? ready.at) - killed, serving: (marks.serving ?? ready.at) - killed,
      ready: ready.at - killed, write: write - killed, back: back.size, last, sinceKill, sinceLoss, helloSinceKill, helloToWelcome,
      attempts, before, during, gap, bad: badHere.length, load0, load1, epochs: [...epochs], lost: (marks.lost ?? []).map((t) => t - killed),
    };
    rows.push(row);
    const q = (xs) => (xs.length ? `p50 ${pctl(xs, 50)} p99 ${pctl(xs, 99)} max ${Math.max(...xs)}` : 'none');
    console.log(`round ${round}: epoch ${epoch} -> ${ready.epoch}; load average ${load0} -> ${load1}; lease taken ${row.lease} ms, ` +
      `serving ${row.serving} ms, ready ${row.ready} ms, first RunTask 200 ${row.write} ms after the kill`);
    console.log(`round ${round}: ${back.size} of ${herdAgents} agents welcomed by the new leader; the last ${last} ms after the kill; ` +
      `kill -> welcome ${q(sinceKill)} ms; loss -> welcome ${q(sinceLoss)} ms; kill -> hello ${q(helloSinceKill)} ms; ` +
      `hello -> welcome ${q(helloToWelcome)} ms; attempts ${q(attempts)}`);
    // When the agents came back: welcomes in each 500 ms after the kill (where a herd's time goes).
    const perHalf = [];
    for (const t of sinceKill) perHalf[Math.floor(t / 500)] = (perHalf[Math.floor(t / 500)] ?? 0) + 1;
    console.log(`round ${round}: welcomes per 500 ms after the kill: ${Array.from(perHalf, (n) => n ?? 0).join(' ')}`);
    if (opt['log-dir']) {
      fs.mkdirSync(opt['log-dir'], { recursive: true });
      fs.writeFileSync(path.join(opt['log-dir'], `herd-round-${round}.json`), JSON.stringify({ killed, row, returns: list }));
    }
    console.log(`round ${round}: RunTask ms before (10 s) ${q(before)} (n=${before.length}); kill -> first 200 (sent in the gap) ` +
      `${q(gap)} (n=${gap.length}); during the herd ${q(during)} (n=${during.length}); bad answers ${badHere.length}`);
    if (epochs.size > 1 || row.lost.length)
      console.log(`round ${round}: the new leader did not keep the lease: epochs ${[...epochs].join(' -> ')}; ` +
        `"lost the lease" logged ${row.lost.join(', ') || 'by no watched replica'} ms after the kill; the agents are counted ` +
        `from their welcome by the leader of epoch ${herdEpoch}`);
    replicas[replicas.indexOf(old)] = await replica(old.port);
    if (back.size < herdAgents) {
      console.log(`round ${round}: ${herdAgents - back.size} agents not back within 180 s; stopping the rounds`);
      break;
    }
    ++rounds;
    await new Promise((res) => setTimeout(res, 12000));  // the next round's "before" window, the standby following
  }
  loading = false;
  await clientsDone;
  await waitLeader(replicas, { all: true, timeoutMs: 600000 });

  // Safety over the rounds, as takeover checks it (no preloaded task: every task is a clientToken's).
  const s = await safety(pg, db, replicas, 'swarm', acked, 0);
  for (const w of swarms) w.child.kill('SIGTERM');
  await Promise.all(swarms.map((w) => w.exited));
  const swarmErrors = swarms.map((w) => /(\d+) error messages(.*)$/m.exec(w.output)).filter((m) => m && m[1] !== '0');
  const follow = swarms.map((w) => /^follow .*$/m.exec(w.output)?.[0] ?? '(no follow line)');
  for (const r of replicas) await r.stop();
  removeTempDir(dir);

  const all = (k) => rows.flatMap((r) => r[k]);
  const per = (k) => rows.map((r) => r[k]);
  console.log(`herd      ${rounds} rounds (of ${roundsWanted} asked), ${herdAgents} agents, ${loadClients} RunTask clients`);
  console.log(`herd      kill -> first RunTask 200                  ${fmt(per('write'))}`);
  console.log(`herd      kill -> /readyz leader                     ${fmt(per('ready'))}`);
  console.log(`herd      kill -> the last agent welcomed (per round) ${fmt(per('last'))}`);
  console.log(`herd      kill -> each agent welcomed (all rounds)   ${fmt(all('sinceKill'))}`);
  console.log(`herd      per round p99 of kill -> welcome          ${fmt(rows.map((r) => pctl(r.sinceKill, 99)))}`);
  console.log(`herd      loss -> welcome (all rounds)               ${fmt(all('sinceLoss'))}`);
  console.log(`herd      hello -> welcome (all rounds)              ${fmt(all('helloToWelcome'))}`);
  console.log(`herd      RunTask before the kill (10 s windows)     ${fmt(all('before'))}`);
  console.log(`herd      RunTask during the herd                    ${fmt(all('during'))}`);
  console.log(`herd      bad RunTask answers (4xx or a failure)     ${bad.length}${bad.length ? `; first: ${JSON.stringify(bad[0])}` : ''}`);
  console.log(`herd      swarms: ${follow.join(' | ')}; ${swarmErrors.length ? swarmErrors.map((m) => m[0]).join('; ') : 'no error messages'}`);
  console.log(`safety    ${acked.size} RunTasks acknowledged (${calls.length} sent by the clients, ${rounds} rounds' first); ` +
    `${s.tasks} tasks in the cluster (${s.rows} task rows in PostgreSQL), ${s.gpus} GPUs accounted; ${s.violations.length} violations`);
  for (const v of s.violations.slice(0, 20)) console.log(`  violation: ${v}`);
  return s.violations.length + bad.length;
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
console.log(`uptime: ${fs.readFileSync('/proc/loadavg', 'utf8').trim()}`);
let violations = 0;
const pg = await startPostgres({ durable: true });
try {
  if (opt.only === 'herd') violations = await herd(pg);
  if (opt.only !== 'runtask' && opt.only !== 'herd') violations = await takeover(pg);
  if (opt.only !== 'takeover' && opt.only !== 'herd') await runtask(pg);
} finally {
  pg.close();
}
process.exit(violations ? 1 : 0);
