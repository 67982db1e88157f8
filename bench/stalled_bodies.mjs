// stalled_bodies.mjs: the latency of a healthy client's calls while many connections stall their request bodies
// (issue 29, class 8). A benchmark, never a test: it prints figures and setup.
//
// It starts `gpupack server` (GPUPACK_BIN, else build/gpupack) on 127.0.0.1 with a fresh SQLite database in a
// temporary directory and any extra server flags given after `--`, creates a cluster, then:
//   1. a flood process (this script with --flood) opens --connections connections from 127.0.0.2 (another
//      client address on loopback), each sending a POST's headers with `Content-Length: 1000000` and then one body
//      byte every --drip-ms; a connection the server closes (503 at its cap, or the read deadline) is opened again;
//   2. meanwhile this process calls ListClusters from 127.0.0.1, one call at a time on fresh connections, for
//      --seconds, and times each call from the request to the whole answer (performance.now()).
// It prints the healthy calls' count, errors, p50/p99/max, and the server's connection counters from /metrics.
//
// Usage: node bench/stalled_bodies.mjs [--connections N] [--seconds S] [--drip-ms MS] [-- SERVER FLAGS...]
// Defaults: 3000 connections, 20 s, 500 ms. Before issue 29's cap: `-- --max-connections-per-address 100000`
// plays the server without it.
import { spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";

const args = process.argv.slice(2);
const dash = args.indexOf("--");
const own = dash < 0 ? args : args.slice(0, dash);
const serverFlags = dash < 0 ? [] : args.slice(dash + 1);
const option = (name, fallback) => {
  const i = own.indexOf(name);
  return i < 0 ? fallback : Number(own[i + 1]);
};
const connections = option("--connections", 3000);
const seconds = option("--seconds", 20);
const dripMs = option("--drip-ms", 500);

if (own.includes("--flood")) {
  // The flood: PORT from argv; runs until killed.
  const port = option("--port", 0);
  const open = () => {
    const s = net.connect({ host: "127.0.0.1", port, localAddress: "127.0.0.2" });
    let timer = null;
    s.on("connect", () => {
      s.write("POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-amz-json-1.1\r\n" +
              "X-Amz-Target: AmazonEC2ContainerServiceV20141113.ListClusters\r\nContent-Length: 1000000\r\n\r\n{");
      timer = setInterval(() => s.write(" "), dripMs);
    });
    s.on("data", () => {});
    s.on("error", () => {});
    s.on("close", () => {
      clearInterval(timer);
      setTimeout(open, 10);
    });
  };
  for (let i = 0; i < connections; ++i) open();
  setInterval(() => {}, 1 << 30);
} else {
  await main();
}

function call(port, operation, body) {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: "127.0.0.1", port, path: "/", method: "POST", agent: false, localAddress: "127.0.0.1",
      headers: { "X-Amz-Target": `AmazonEC2ContainerServiceV20141113.${operation}`,
                 "Content-Type": "application/x-amz-json-1.1", "Content-Length": Buffer.byteLength(payload) },
    }, (res) => {
      let text = "";
      res.on("data", (c) => { text += c; });
      res.on("end", () => resolve({ status: res.statusCode, text }));
    });
    req.on("error", reject);
    req.setTimeout(60000, () => req.destroy(new Error("no answer in 60 s")));
    req.end(payload);
  });
}

function metric(text, name) {
  const line = text.split("\n").find((l) => l.startsWith(name + " "));
  return line ? Number(line.split(" ")[1]) : NaN;
}

async function main() {
  const bin = process.env.GPUPACK_BIN || path.resolve("build/gpupack");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "stalled-bodies-"));
  const server = spawn(bin, ["server", "--listen", "127.0.0.1:0", "--db", path.join(dir, "gpupack.db"),
                             "--log-level", "error", ...serverFlags], { stdio: ["ignore", "pipe", "inherit"] });
  let banner = "";
  const port = await new Promise((resolve, reject) => {
    server.stdout.on("data", (c) => {
      banner += c;
      const m = banner.match(/127\.0\.0\.1:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    server.on("exit", (code) => reject(new Error(`server exited ${code}`)));
  });
  server.stdout.resume();
  await call(port, "CreateCluster", {});
  const flood = spawn(process.execPath, [new URL(import.meta.url).pathname, "--flood", "--port", String(port),
                                         "--connections", String(connections), "--drip-ms", String(dripMs)],
                      { stdio: "inherit" });
  await sleep(3000);  // let the flood take what it can
  const times = [];
  let errors = 0;
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const t0 = performance.now();
    try {
      const r = await call(port, "ListClusters", {});
      if (r.status !== 200) ++errors;
    } catch {
      ++errors;
    }
    times.push(performance.now() - t0);
  }
  const metrics = await new Promise((resolve) => {
    http.get({ host: "127.0.0.1", port, path: "/metrics", agent: false }, (res) => {
      let text = "";
      res.on("data", (c) => { text += c; });
      res.on("end", () => resolve(text));
    }).on("error", () => resolve(""));
  });
  flood.kill("SIGKILL");
  server.kill("SIGTERM");
  times.sort((a, b) => a - b);
  const q = (p) => times[Math.min(times.length - 1, Math.floor(p * times.length))].toFixed(2);
  console.log(`setup     gpupack server ${serverFlags.join(" ") || "(defaults)"}; ${connections} connections from ` +
              `127.0.0.2 send headers then one body byte every ${dripMs} ms (reopened when closed); node ${process.version}, ` +
              `${os.cpus().length} cpus`);
  console.log(`healthy   ${times.length} ListClusters calls from 127.0.0.1 in ${seconds} s, one at a time, each on a ` +
              `new connection: errors ${errors}, p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, max ${q(1)} ms`);
  console.log(`server    gpupack_http_connections_open ${metric(metrics, "gpupack_http_connections_open")}, ` +
              `gpupack_http_connection_refusals_total ${metric(metrics, "gpupack_http_connection_refusals_total")}`);
  fs.rmSync(dir, { recursive: true, force: true });
  process.exit(0);
}
