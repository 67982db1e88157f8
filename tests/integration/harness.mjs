// harness: starts the real gpupack server binary on loopback with a temporary SQLite database and talks to it
// over plain HTTP (the ECS JSON 1.1 protocol), for the black-box tests here and the SDK tests in ../sdk.
//
// The binary comes from $GPUPACK_BIN (ctest sets it), else build/gpupack from the repository root. The server
// listens on 127.0.0.1:0 and the endpoint is read from its banner line "ECS API   http://127.0.0.1:NNNN".
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const TARGET_PREFIX = 'AmazonEC2ContainerServiceV20141113.';
export const REGION = 'us-east-1';
export const ACCOUNT = '000000000000';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export function gpupackBin() {
  const bin = process.env.GPUPACK_BIN || path.join(repoRoot, 'build', 'gpupack');
  if (!fs.existsSync(bin)) throw new Error(`gpupack binary not found at ${bin}: build it, or set GPUPACK_BIN`);
  return bin;
}

// tempDir makes a fresh directory under the OS temp dir; removeTempDir deletes it.
export function tempDir(prefix = 'gpupack-test-') {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}
// taskDir: a directory `parts` under `dir` (made by tempDir) that a task can write: the process runtime runs
// tasks as an unprivileged user (`nobody` under a root agent, docs/security.md), so the directory is mode 1777
// (as /tmp) and the directories above it up to the OS temp dir are made searchable by others.
export function taskDir(dir, ...parts) {
  const leaf = path.join(dir, ...parts);
  fs.mkdirSync(leaf, { recursive: true });
  fs.chmodSync(leaf, 0o1777);
  for (let up = path.dirname(leaf); up.startsWith(os.tmpdir()) && up !== os.tmpdir(); up = path.dirname(up))
    fs.chmodSync(up, fs.statSync(up).mode & 0o7777 | 0o011);
  return leaf;
}
export function removeTempDir(dir) {
  fs.rmSync(dir, { recursive: true, force: true });
}

const live = new Set();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

// PLAY_AGENT: server arguments for tests that play the agent themselves (RegisterContainerInstance over plain
// HTTP, SubmitTaskStateChange for the task's progress): without them the server places no task on an instance
// whose agent is not connected (AGENT), as ECS does. Tests of the agent start a real `gpupack agent` instead.
export const PLAY_AGENT = ['--place-on-disconnected'];

// spawnTracked spawns the gpupack binary with `args` (spawn's `options`); the child is killed with SIGKILL if it is
// still running when the test process exits.
export function spawnTracked(args, options) {
  const child = spawn(gpupackBin(), args, options);
  live.add(child);
  child.on('exit', () => live.delete(child));
  return child;
}

// bannerEndpoint: the endpoint named by a banner line "ECS API   http://127.0.0.1:NNNN" in `stdout`, or null.
export function bannerEndpoint(stdout) {
  return /ECS API\s+(http:\/\/[^\s]+)/.exec(stdout)?.[1] ?? null;
}

// launch runs the gpupack binary with `args` (spawnTracked; stdout and stderr collected), resolving once
// `ready(stdout)` answers the endpoint (until then it answers null); `what` names the process in errors. A process
// that prints no endpoint within startTimeoutMs is killed; one that exits first rejects. The result: endpoint,
// child, exited (a promise of {code, signal}), stdout, stderr, output (both as they came), stop() (SIGTERM,
// SIGKILL after stopTimeoutMs, waits for the exit) and kill9() (SIGKILL, waits).
export async function launch(args, {
  ready = bannerEndpoint, what = 'gpupack', startTimeoutMs = 20000, stopTimeoutMs = 10000,
} = {}) {
  const child = spawnTracked(args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  let output = '';
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }));
  });
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => {
    stderr += d;
    output += d;
  });
  child.stdout.setEncoding('utf8');
  const endpoint = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${what} printed no endpoint within ${startTimeoutMs} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    }, startTimeoutMs);
    let found = null;
    child.stdout.on('data', (d) => {
      stdout += d;
      output += d;
      if (found) return;  // not scanned again: a server's log grows to megabytes (10,000 agents' channels)
      found = ready(stdout);
      if (found) {
        clearTimeout(timer);
        resolve(found);
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (code ${code}, signal ${signal}) before serving\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    });
  });
  return {
    endpoint,
    child,
    exited,
    get stdout() {
      return stdout;
    },
    get stderr() {
      return stderr;
    },
    get output() {
      return output;
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), stopTimeoutMs);
      const r = await exited;
      clearTimeout(timer);
      return r;
    },
    async kill9() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      return exited;
    },
  };
}

// startServer runs `gpupack server` on a free loopback port against `db` (logging at `logLevel`), resolving once
// the banner names the endpoint. The result is launch's: endpoint, child, stop() (SIGTERM, waits for exit),
// kill9() (SIGKILL, waits), ...
export async function startServer({ db, extraArgs = [], startTimeoutMs = 20000, logLevel = 'warn' } = {}) {
  const args = ['server', '--listen', '127.0.0.1:0', '--db', db, '--log-level', logLevel, ...extraArgs];
  return launch(args, { startTimeoutMs });
}

// startUp runs `gpupack up` (the server and its local agents with simulated GPUs) on a free loopback port with
// its data under `dir`, resolving once the whole banner is out. The result has endpoint, banner() (stdout and
// stderr so far) and stop() (SIGTERM, waits for exit).
export async function startUp(dir, extraArgs = [], { logLevel = 'warn' } = {}) {
  const args = ['up', '--listen', '127.0.0.1:0', '--dir', dir, '--log-level', logLevel, ...extraArgs];
  const up = await launch(args, {
    what: 'gpupack up',
    ready: (stdout) => (stdout.includes('Ctrl-C') ? bannerEndpoint(stdout) : null),
    stopTimeoutMs: 30000,
  });
  return { endpoint: up.endpoint, child: up.child, banner: () => up.output, stop: () => up.stop() };
}

// DEBIAN_AWS, DEBIAN_PYTHON: the AWS CLI and the Python with boto3 that Debian ships (packages awscli and
// python3-boto3), as users get them; a machine may have others first on its PATH.
export const DEBIAN_AWS = '/usr/bin/aws';
export const DEBIAN_PYTHON = '/usr/bin/python3';

// awsClientEnv: the environment for Debian's AWS CLI and boto3 in a test: HOME under `dir`, /usr/bin first on
// PATH (through a directory that holds only `aws`), no inherited AWS_* variable.
export function awsClientEnv(dir) {
  const bin = path.join(dir, 'bin');
  const home = path.join(dir, 'home');
  fs.mkdirSync(bin, { recursive: true });
  fs.mkdirSync(home, { recursive: true });
  if (!fs.existsSync(path.join(bin, 'aws'))) fs.symlinkSync(DEBIAN_AWS, path.join(bin, 'aws'));
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('AWS_')));
  env.HOME = home;
  env.PATH = `${bin}:/usr/bin:/bin`;
  env.AWS_PAGER = '';  // no pager around answers
  return env;
}

// awsEcs runs `aws ecs ARGS --endpoint-url ENDPOINT --output json` with `env` (awsClientEnv plus keys and region),
// waiting at most a minute: {status, stdout, stderr, json}, json undefined when stdout is not JSON.
export function awsEcs(endpoint, env, ...args) {
  const r = spawnSync('aws', ['ecs', ...args, '--endpoint-url', endpoint, '--output', 'json'], {
    env,
    encoding: 'utf8',
    timeout: 60000,
  });
  let json;
  try {
    json = JSON.parse(r.stdout);
  } catch {
    json = undefined;
  }
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, json };
}

// call sends one ECS operation. `body` is an object (serialized as JSON) or, with raw: true, a string or Buffer
// sent as is. Resolves {status, headers, text, json} where json is the parsed body or undefined; rejects when
// no answer comes within timeoutMs.
export async function call(endpoint, operation, body = {}, { raw = false, target, headers = {}, timeoutMs = 30000 } = {}) {
  const res = await fetch(endpoint + '/', {
    method: 'POST',
    headers: {
      'Content-Type': 'application/x-amz-json-1.1',
      'X-Amz-Target': target ?? TARGET_PREFIX + operation,
      ...headers,
    },
    body: raw ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs), // a server that hangs fails the test instead of stalling it
  });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

// signedCall sends one ECS operation as call() does, signed with AWS Signature Version 4 (service ecs) by the key
// `key` ({accessKeyId, secretAccessKey}) for `region`, as the AWS SDKs sign it: Content-Type, Host (the endpoint's
// HOST:PORT, which fetch sends), X-Amz-Date and X-Amz-Target are signed, with the hex SHA-256 of the body. For a
// server started with --credentials (docs/security.md).
export async function signedCall(endpoint, operation, body = {}, key, { region = REGION, timeoutMs = 30000 } = {}) {
  const text = JSON.stringify(body);
  const url = new URL(endpoint);
  const amzDate = new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');  // 20260101T000000Z
  const date = amzDate.slice(0, 8);
  const headers = {
    'content-type': 'application/x-amz-json-1.1',
    host: url.host,
    'x-amz-date': amzDate,
    'x-amz-target': TARGET_PREFIX + operation,
  };
  const names = Object.keys(headers).sort();
  const sha256 = (s) => crypto.createHash('sha256').update(s).digest('hex');
  const hmac = (k, s) => crypto.createHmac('sha256', k).update(s).digest();
  const canonical = ['POST', '/', '', ...names.map((n) => `${n}:${headers[n]}`), '', names.join(';'), sha256(text)].join('\n');
  const scope = `${date}/${region}/ecs/aws4_request`;
  const toSign = ['AWS4-HMAC-SHA256', amzDate, scope, sha256(canonical)].join('\n');
  let signingKey = hmac(`AWS4${key.secretAccessKey}`, date);
  for (const part of [region, 'ecs', 'aws4_request']) signingKey = hmac(signingKey, part);
  const signature = crypto.createHmac('sha256', signingKey).update(toSign).digest('hex');
  return call(endpoint, operation, text, {
    raw: true,
    timeoutMs,
    headers: {
      'X-Amz-Date': amzDate,
      Authorization: `AWS4-HMAC-SHA256 Credential=${key.accessKeyId}/${scope}, SignedHeaders=${names.join(';')}, Signature=${signature}`,
    },
  });
}

// signedOk: signedCall that throws with the server's answer unless it returned 200; resolves the parsed answer.
export async function signedOk(endpoint, operation, body, key) {
  const r = await signedCall(endpoint, operation, body, key);
  if (r.status !== 200) throw new Error(`${operation} signed by ${key.accessKeyId} answered ${r.status}: ${r.text}`);
  return r.json;
}

// ok calls an operation and throws with the server's answer unless it returned 200.
export async function ok(endpoint, operation, body = {}) {
  const r = await call(endpoint, operation, body);
  if (r.status !== 200) throw new Error(`${operation} answered ${r.status}: ${r.text}`);
  return r.json;
}

// gpuDevice builds a platformDevices entry as the agent sends it.
export function gpuDevice(id, memoryInMiB = 22587) {
  return { id, type: 'GPU', gpuInfo: { memoryInMiB } };
}

// registerInstance registers a container instance with `gpus` (a list of [id, MiB]) and returns its ARN.
export async function registerInstance(endpoint, cluster, gpus, { cpu = 65536, memory = 1048576 } = {}) {
  const r = await ok(endpoint, 'RegisterContainerInstance', {
    cluster,
    totalResources: [
      { name: 'CPU', type: 'INTEGER', integerValue: cpu },
      { name: 'MEMORY', type: 'INTEGER', integerValue: memory },
    ],
    platformDevices: gpus.map(([id, mib]) => gpuDevice(id, mib)),
    versionInfo: { agentVersion: 'test' },
  });
  return r.containerInstance.containerInstanceArn;
}

// oneContainerTaskDefinition: a task definition of one busybox container with `gpuRequirement` (one
// resourceRequirements entry).
function oneContainerTaskDefinition(family, gpuRequirement) {
  return {
    family,
    containerDefinitions: [
      {
        name: 'main',
        image: 'busybox',
        cpu: 64,
        memory: 128,
        essential: true,
        resourceRequirements: [gpuRequirement],
      },
    ],
  };
}

// sharedTaskDefinition is a one-container task definition that asks for `memory` MiB of a shared GPU.
export function sharedTaskDefinition(family, memory, maxComputePercent) {
  const nvidiaMps = { memory };
  if (maxComputePercent !== undefined) nvidiaMps.maxComputePercent = maxComputePercent;
  return oneContainerTaskDefinition(family, { type: 'GPU', sharingStrategy: { nvidiaMps } });
}

// dedicatedTaskDefinition asks for `count` whole GPUs.
export function dedicatedTaskDefinition(family, count = 1) {
  return oneContainerTaskDefinition(family, { type: 'GPU', value: String(count) });
}

// gpuDevices answers DescribeContainerInstances' gpuDevices of one instance, keyed by gpuId.
export async function gpuDevices(endpoint, cluster, instanceArn) {
  const r = await ok(endpoint, 'DescribeContainerInstances', { cluster, containerInstances: [instanceArn] });
  const out = {};
  for (const g of r.containerInstances[0].gpuDevices) out[g.gpuId] = g;
  return out;
}

// pool runs `count` jobs numbered 0..count-1 from `workers` concurrent loops; the first error stops them all.
export async function pool(count, workers, job) {
  let next = 0;
  let failed;
  const worker = async () => {
    while (!failed && next < count) {
      const i = next++;
      try {
        await job(i);
      } catch (e) {
        failed ??= e;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(workers, count) }, worker));
  if (failed) throw failed;
}

// listAll pages through a List operation (`op` with `body`, 100 per page) and returns every entry of `key`.
export async function listAll(endpoint, op, body, key) {
  const out = [];
  let nextToken;
  for (let page = 0; page < 10000; ++page) {
    const r = await ok(endpoint, op, { ...body, nextToken, maxResults: 100 });
    out.push(...r[key]);
    nextToken = r.nextToken;
    if (!nextToken) return out;
  }
  throw new Error(`${op}: more than 10,000 pages`);
}
