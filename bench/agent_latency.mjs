// agent_latency.mjs: the client half of bench/agent_latency.sh (run that, not this). A benchmark, never a test.
//
// Against a running `gpupack server` with one `gpupack agent` (process runtime, fake GPUs) registered in
// CLUSTER, it registers a shared task definition whose container is `/bin/sh -c "exec sleep 30"`, then for
// ITERATIONS rounds, one at a time: RunTask (count 1), DescribeTasks every POLL_MS until lastStatus is RUNNING,
// StopTask, DescribeTasks until STOPPED. The agent is idle at every RunTask, and capacity never runs out.
//
// Per round it records, all as milliseconds after the RunTask request was handed to node:http:
//   placed     the task's createdAt (server clock, 1 ms resolution): the request parsed and the task placed
//   answered   the RunTask answer received; the server answers once the placement is durable, and pushes the
//              assignment to the agent just before answering (ControlPlane::Run)
//   agent      the agent's log line "task ... RUNNING" (agent clock, 1 ms): assignment received, task
//              persisted, MPS probe, fork/exec of the container, state sent
//   applied    the task's startedAt (server clock, 1 ms): the RUNNING report applied in memory
//   visible    the first DescribeTasks answer showing RUNNING: the latency figure. It is late by up to one poll
//              period plus one DescribeTasks round trip; the poll cycle is printed as the resolution.
// The server, the agent and this script share one host and its wall clock; this script's own intervals (answered,
// visible) come from the monotonic clock.
//
// Usage: node agent_latency.mjs ENDPOINT CLUSTER ITERATIONS POLL_MS AGENT_LOG
import { readFileSync } from "node:fs";
import http from "node:http";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";

const [endpoint, cluster, iterationsText, pollText, agentLog] = process.argv.slice(2);
const iterations = Number(iterationsText);
const pollMs = Number(pollText);
if (!endpoint || !cluster || !(iterations >= 1 && iterations <= 10000) || !(pollMs >= 1 && pollMs <= 100) || !agentLog) {
  console.error("usage: node agent_latency.mjs ENDPOINT CLUSTER ITERATIONS(1..10000) POLL_MS(1..100) AGENT_LOG");
  process.exit(2);
}

const target = "AmazonEC2ContainerServiceV20141113";
// node:http with one keep-alive socket rather than fetch: undici's fetch costs a few ms of CPU per call, which on
// a 2-core machine is taken from the server and the agent being measured.
const url = new URL(endpoint);
const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 1 });
function call(operation, body) {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: url.hostname, port: url.port, path: "/", method: "POST", agent: keepAlive,
      headers: { "X-Amz-Target": `${target}.${operation}`, "Content-Type": "application/x-amz-json-1.1",
                 "Content-Length": Buffer.byteLength(payload) },
    }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        if (res.statusCode !== 200) return reject(new Error(`${operation}: HTTP ${res.statusCode}: ${text.slice(0, 300)}`));
        try { resolve(JSON.parse(text)); } catch (e) { reject(e); }
      });
    });
    req.setTimeout(10000, () => req.destroy(new Error(`${operation}: no answer within 10 s`)));
    req.on("error", reject);
    req.end(payload);
  });
}

// The server's and the agent's stamps are wall-clock (epoch ms); this script times with performance.now(), which
// is monotonic and may drift from the wall clock by milliseconds over a run (NTP slewing). So each round takes
// the wall clock afresh at its RunTask (Date.now(): whole ms) and converts the stamps against that.

// ---- the agent: wait until its instance is connected -------------------------------------------------------
let instanceArn = "";
for (let i = 0; i < 300 && !instanceArn; ++i) {  // bounded: 300 x 100 ms
  try {
    const list = await call("ListContainerInstances", { cluster });
    if (list.containerInstanceArns.length > 0) {
      const d = await call("DescribeContainerInstances", { cluster, containerInstances: list.containerInstanceArns });
      const inst = d.containerInstances.find((c) => c.agentConnected);
      if (inst) instanceArn = inst.containerInstanceArn;
    }
  } catch (e) {
    // the cluster does not exist until the agent created it
  }
  if (!instanceArn) await sleep(100);
}
if (!instanceArn) {
  console.error("agent_latency: no connected agent in cluster " + cluster + " after 30 s");
  process.exit(1);
}

const family = "bench-latency";
await call("RegisterTaskDefinition", {
  family,
  containerDefinitions: [{
    name: "main",
    image: "bench/sleep:latest",
    essential: true,
    cpu: 256,
    memory: 128,
    entryPoint: ["/bin/sh", "-c"],
    command: ["exec sleep 30"],
    resourceRequirements: [{ type: "GPU", sharingStrategy: { nvidiaMps: { memory: 2048 } } }],
  }],
});

// pollUntil: DescribeTasks every pollMs until lastStatus == want. Returns the answer's arrival time, the task,
// the number of polls and the cycle (send-to-send) before the final poll. Bounded by 20 s.
async function pollUntil(taskArn, want) {
  const deadline = performance.now() + 20000;
  let polls = 0, lastSend = 0, cycle = 0;
  for (;;) {
    const send = performance.now();
    if (lastSend) cycle = send - lastSend;
    lastSend = send;
    const d = await call("DescribeTasks", { cluster, tasks: [taskArn] });
    const now = performance.now();
    ++polls;
    const t = d.tasks[0];
    if (t && t.lastStatus === want) return { at: now, task: t, polls, cycle, rtt: now - send };
    if (t && t.lastStatus === "STOPPED") throw new Error(`${taskArn} STOPPED while waiting for ${want}: ${t.stoppedReason}`);
    if (now > deadline) throw new Error(`${taskArn} not ${want} after 20 s (lastStatus ${t && t.lastStatus})`);
    await sleep(pollMs);
  }
}

// ---- the rounds ---------------------------------------------------------------------------------------------
const rounds = [];
const stopLatency = [];
const runTaskOnly = [];
for (let i = 0; i < iterations; ++i) {
  const t0Epoch = Date.now();
  const t0 = performance.now();
  const run = await call("RunTask", { cluster, taskDefinition: family, count: 1 });
  const answered = performance.now();
  if (!run.tasks || run.tasks.length !== 1) throw new Error("RunTask placed nothing: " + JSON.stringify(run.failures));
  const arn = run.tasks[0].taskArn;
  const up = await pollUntil(arn, "RUNNING");
  rounds.push({
    arn,
    t0Epoch,
    placed: up.task.createdAt * 1000 - t0Epoch,
    answered: answered - t0,
    applied: up.task.startedAt * 1000 - t0Epoch,
    visible: up.at - t0,
    polls: up.polls,
    cycle: up.cycle,
    rtt: up.rtt,
  });
  runTaskOnly.push(answered - t0);
  const s0 = performance.now();
  await call("StopTask", { cluster, task: arn, reason: "benchmark round done" });
  const down = await pollUntil(arn, "STOPPED");
  stopLatency.push(down.at - s0);
}

// ---- the agent's log: "[2026-11-29 09:50:01.123] [info] agent: task <ARN> RUNNING" (the agent runs with TZ=UTC)
const agentRunning = new Map();
for (const line of readFileSync(agentLog, "utf8").split("\n")) {
  const m = /^\[(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d\.\d{3})\] \[[a-z]+\] agent: task (\S+) RUNNING$/.exec(line);
  if (m) agentRunning.set(m[3], Date.parse(`${m[1]}T${m[2]}Z`));
}
for (const r of rounds) {
  const at = agentRunning.get(r.arn);
  r.agent = at === undefined ? NaN : at - r.t0Epoch;
}

// ---- report -------------------------------------------------------------------------------------------------
function quantile(sorted, q) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}
function stats(values) {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  return { n: v.length, p50: quantile(v, 0.5), p90: quantile(v, 0.9), p99: quantile(v, 0.99), max: v[v.length - 1],
           min: v[0] };
}
const f = (x) => (Number.isFinite(x) ? x.toFixed(1).padStart(7) : "      -");
function row(name, values, note) {
  const s = stats(values);
  console.log(`${name.padEnd(34)}${f(s.min)}${f(s.p50)}${f(s.p90)}${f(s.p99)}${f(s.max)}   ${note}`);
}

console.log(`rounds           ${rounds.length} (RunTask -> RUNNING -> StopTask -> STOPPED, one at a time)`);
console.log(`agent log        ${agentRunning.size} RUNNING lines matched for ${rounds.length} tasks`);
console.log("");
console.log(`${"RunTask -> RUNNING (ms)".padEnd(34)}    min    p50    p90    p99    max`);
row("visible (first DescribeTasks)", rounds.map((r) => r.visible), "<- the figure");
console.log("");
console.log("where the time goes: milestones after the RunTask request (ms; server and agent stamps, and their offset");
console.log("from the client's clock, have 1 ms resolution, so a stage can come out as -1)");
row("placed (createdAt)", rounds.map((r) => r.placed), "request parsed, task placed");
row("answered (RunTask answer)", rounds.map((r) => r.answered), "placement durable; assignment pushed");
row("agent logged RUNNING", rounds.map((r) => r.agent), "persist, probe, fork/exec, state sent");
row("applied (startedAt)", rounds.map((r) => r.applied), "RUNNING report applied in memory");
row("visible", rounds.map((r) => r.visible), "");
console.log("stages (ms)");
row("  durable commit + answer", rounds.map((r) => r.answered - r.placed), "answered - placed");
row("  agent: receive to RUNNING", rounds.map((r) => r.agent - r.answered), "agent - answered");
row("  report to server", rounds.map((r) => r.applied - r.agent), "applied - agent");
row("  until a poll sees it", rounds.map((r) => r.visible - r.applied), "visible - applied");
console.log("resolution (ms)");
row("  poll cycle before the hit", rounds.map((r) => r.cycle), `send to send; asked for ${pollMs} ms sleeps`);
row("  DescribeTasks round trip", rounds.map((r) => r.rtt), "of the poll that saw RUNNING");
row("  polls per round", rounds.map((r) => r.polls), "");
console.log("other");
row("  RunTask alone (answer)", runTaskOnly, "same as 'answered'");
row("  StopTask -> STOPPED visible", stopLatency, "SIGTERM to sleep, report, poll");
const cpu = process.cpuUsage();
console.log(`client CPU       ${((cpu.user + cpu.system) / 1e6).toFixed(1)} s (this script, competing with the server and the agent)`);
