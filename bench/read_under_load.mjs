// read_under_load.mjs: the reading client of bench/read_under_load.sh (run that, not this). A benchmark, never a
// test.
//
// For SECONDS it runs three read loops against a running `gpupack server`, each on its own keep-alive connection
// (node:http): DescribeTasks (BATCH task ARNs, from the latest ListTasks page), DescribeContainerInstances (BATCH
// instance ARNs, a window that moves over the cluster's instances) and ListTasks (desiredStatus RUNNING,
// maxResults 100, the first page). Each loop sends its next call INTERVAL_MS after the previous one was sent, or
// at once when the answer came later than that (one call in flight per loop: closed loop with a pace). Every
// call is timed from the request handed to node:http to the whole answer read, with performance.now().
//
// It prints one line of JSON per operation: {"op","calls","errors","p50_ms","p90_ms","p99_ms","max_ms",
// "mean_ms","per_s"}; the shell script formats them.
//
// Usage: node read_under_load.mjs ENDPOINT CLUSTER SECONDS INTERVAL_MS BATCH
import http from "node:http";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";

const [endpoint, cluster, secondsText, intervalText, batchText] = process.argv.slice(2);
const seconds = Number(secondsText);
const intervalMs = Number(intervalText);
const batch = Number(batchText);
if (!endpoint || !cluster || !(seconds >= 1 && seconds <= 600) || !(intervalMs >= 0 && intervalMs <= 10000) ||
    !(batch >= 1 && batch <= 100)) {
  console.error("usage: node read_under_load.mjs ENDPOINT CLUSTER SECONDS(1..600) INTERVAL_MS(0..10000) BATCH(1..100)");
  process.exit(2);
}

const target = "AmazonEC2ContainerServiceV20141113";
const url = new URL(endpoint);

// Caller: one keep-alive socket per loop, so a slow answer to one operation never delays another's request.
function caller() {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  return (operation, body) => {
    const payload = JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const req = http.request({
        host: url.hostname, port: url.port, path: "/", method: "POST", agent,
        headers: { "X-Amz-Target": `${target}.${operation}`, "Content-Type": "application/x-amz-json-1.1",
                   "Content-Length": Buffer.byteLength(payload) },
      }, (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          if (res.statusCode !== 200) return reject(new Error(`${operation}: HTTP ${res.statusCode}: ${text.slice(0, 200)}`));
          try { resolve(JSON.parse(text)); } catch (e) { reject(e); }
        });
      });
      req.setTimeout(10000, () => req.destroy(new Error(`${operation}: no answer within 10 s`)));
      req.on("error", reject);
      req.end(payload);
    });
  };
}

const setup = caller();
const instances = [];
for (let token = null, pages = 0; pages < 1000; ++pages) {  // bounded: 100,000 instances
  const page = await setup("ListContainerInstances", { cluster, maxResults: 100, ...(token ? { nextToken: token } : {}) });
  instances.push(...page.containerInstanceArns);
  token = page.nextToken;
  if (!token) break;
}
let taskArns = (await setup("ListTasks", { cluster, desiredStatus: "RUNNING", maxResults: 100 })).taskArns.slice(0, batch);

const deadline = performance.now() + seconds * 1000;
let instanceOffset = 0;
const loops = {
  DescribeTasks: () => ({ cluster, tasks: taskArns.length ? taskArns : ["arn:aws:ecs:us-east-1:000000000000:task/none/none"] }),
  DescribeContainerInstances: () => {
    const window = [];
    for (let i = 0; i < Math.min(batch, instances.length); ++i) window.push(instances[(instanceOffset + i) % instances.length]);
    instanceOffset = (instanceOffset + batch) % Math.max(1, instances.length);
    return { cluster, containerInstances: window };
  },
  ListTasks: () => ({ cluster, desiredStatus: "RUNNING", maxResults: 100 }),
};

async function run(op) {
  const call = caller();
  const latencies = [];
  let errors = 0;
  let lastError = "";
  while (performance.now() < deadline) {
    const sent = performance.now();
    try {
      const answer = await call(op, loops[op]());
      if (op === "ListTasks" && answer.taskArns.length) taskArns = answer.taskArns.slice(0, batch);
    } catch (e) {
      ++errors;
      lastError = String(e.message || e);
    }
    const took = performance.now() - sent;
    latencies.push(took);
    if (took < intervalMs) await sleep(intervalMs - took);
  }
  latencies.sort((a, b) => a - b);
  const at = (p) => latencies.length ? latencies[Math.min(latencies.length - 1, Math.max(0, Math.ceil(p / 100 * latencies.length) - 1))] : 0;
  const mean = latencies.reduce((a, b) => a + b, 0) / Math.max(1, latencies.length);
  const r = (x) => Math.round(x * 1000) / 1000;
  return { op, calls: latencies.length, errors, last_error: lastError, p50_ms: r(at(50)), p90_ms: r(at(90)),
           p99_ms: r(at(99)), max_ms: r(at(100)), mean_ms: r(mean), per_s: r(latencies.length / seconds) };
}

const results = await Promise.all(Object.keys(loops).map(run));
for (const r of results) console.log(JSON.stringify(r));
process.exit(0);
