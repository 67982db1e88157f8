// harness: starts the real gpupack server binary on loopback with a temporary SQLite database and talks to it
// over plain HTTP (the ECS JSON 1.1 protocol), for the black-box tests here and the SDK tests in ../sdk.
//
// The binary comes from $GPUPACK_BIN (ctest sets it), else build/gpupack from the repository root. The server
// listens on 127.0.0.1:0 and the endpoint is read from its banner line "ECS API   http://127.0.0.1:NNNN".
import { spawn } from 'node:child_process';
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

// startServer runs `gpupack server` on a free loopback port against `db` (logging at `logLevel`), resolving once
// the banner names the endpoint. The result has endpoint, child, stop() (SIGTERM, waits for exit) and kill9() (SIGKILL, waits).
export async function startServer({ db, extraArgs = [], startTimeoutMs = 20000, logLevel = 'warn' } = {}) {
  const bin = gpupackBin();
  const args = ['server', '--listen', '127.0.0.1:0', '--db', db, '--log-level', logLevel, ...extraArgs];
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  let stdout = '';
  let stderr = '';
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      live.delete(child);
      resolve({ code, signal });
    });
  });
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => {
    stderr += d;
  });
  child.stdout.setEncoding('utf8');
  const endpoint = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`gpupack printed no endpoint within ${startTimeoutMs} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    }, startTimeoutMs);
    child.stdout.on('data', (d) => {
      stdout += d;
      const m = /ECS API\s+(http:\/\/[^\s]+)/.exec(stdout);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`gpupack exited (code ${code}, signal ${signal}) before serving\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    });
  });
  const server = {
    endpoint,
    child,
    exited,
    get stderr() {
      return stderr;
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10000);
      const r = await exited;
      clearTimeout(timer);
      return r;
    },
    async kill9() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      return exited;
    },
  };
  return server;
}

// startUp runs `gpupack up` (the server and its local agents with simulated GPUs) on a free loopback port with
// its data under `dir`, resolving once the whole banner is out. The result has endpoint, banner() (stdout and
// stderr so far) and stop() (SIGTERM, waits for exit).
export async function startUp(dir, extraArgs = [], { logLevel = 'warn' } = {}) {
  const child = spawn(gpupackBin(), ['up', '--listen', '127.0.0.1:0', '--dir', dir, '--log-level', logLevel, ...extraArgs], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  let out = '';
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      live.delete(child);
      resolve({ code, signal });
    });
  });
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => (out += d));
  child.stdout.setEncoding('utf8');
  const endpoint = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`gpupack up printed no endpoint within 20 s:\n${out}`));
    }, 20000);
    child.stdout.on('data', (d) => {
      out += d;
      const m = /ECS API\s+(http:\/\/[^\s]+)/.exec(out);
      if (m && out.includes('Ctrl-C')) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`gpupack up exited (code ${code}, signal ${signal}) before serving:\n${out}`));
    });
  });
  return {
    endpoint,
    child,
    banner: () => out,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 30000);
      const r = await exited;
      clearTimeout(timer);
      return r;
    },
  };
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

// sharedTaskDefinition is a one-container task definition that asks for `memory` MiB of a shared GPU.
export function sharedTaskDefinition(family, memory, maxComputePercent) {
  const nvidiaMps = { memory };
  if (maxComputePercent !== undefined) nvidiaMps.maxComputePercent = maxComputePercent;
  return {
    family,
    containerDefinitions: [
      {
        name: 'main',
        image: 'busybox',
        cpu: 64,
        memory: 128,
        essential: true,
        resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps } }],
      },
    ],
  };
}

// dedicatedTaskDefinition asks for `count` whole GPUs.
export function dedicatedTaskDefinition(family, count = 1) {
  return {
    family,
    containerDefinitions: [
      {
        name: 'main',
        image: 'busybox',
        cpu: 64,
        memory: 128,
        essential: true,
        resourceRequirements: [{ type: 'GPU', value: String(count) }],
      },
    ],
  };
}

// gpuDevices answers DescribeContainerInstances' gpuDevices of one instance, keyed by gpuId.
export async function gpuDevices(endpoint, cluster, instanceArn) {
  const r = await ok(endpoint, 'DescribeContainerInstances', { cluster, containerInstances: [instanceArn] });
  const out = {};
  for (const g of r.containerInstances[0].gpuDevices) out[g.gpuId] = g;
  return out;
}
