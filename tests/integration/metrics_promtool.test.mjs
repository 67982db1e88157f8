// /metrics as Prometheus reads it (docs/operations.md "Metrics"): the real server with a real agent on simulated
// GPUs (the agent's own /metrics behind --metrics-listen), a running task whose container "uses" GPU memory
// through the simulated GPUs' process list, and a RunTask that cannot be placed. Then:
//   - `promtool check metrics` finds nothing in either scrape;
//   - the GPU series carry UUID, gpu and Hostname (the labels of dcgm-exporter) and their bytes are the MiB
//     figures the API shows x 1048576; the per-task series (the server runs with --metrics-per-task) name the
//     task, its container and its GPU;
//   - gpupack_placement_failures_total counts the tasks not placed, not the instances that refused them;
//   - a service (of no replicas) has its gpupack_service_ series with DescribeServices' figures;
//   - `promtool check rules` and `promtool check config` accept deploy/prometheus/, and every gpupack family the
//     alert rules and the Grafana dashboard (deploy/grafana/gpupack.json) read is one the scrapes have.
// Skipped, saying so, when promtool is not on PATH (Debian: apt-get install prometheus). Without promtool too: a
// --metrics-listen the agent cannot listen on fails it before it registers.
//
// Black box: only the gpupack binary ($GPUPACK_BIN), promtool and HTTP on loopback.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { gpupackBin, ok, removeTempDir, startServer, taskDir, tempDir } from './harness.mjs';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const HAVE_PROMTOOL = spawnSync('promtool', ['--version'], { stdio: 'ignore' }).status === 0;
const SKIP = HAVE_PROMTOOL ? false : 'promtool is not on PATH (Debian: apt-get install prometheus)';
const MIB = 1048576;
const GPU_MIB = 22587;
const HOST = 'metrics-host';
const DECLARED_MIB = 4096;
const USED_MIB = 1000;

// promtool runs promtool with `input` on stdin and answers {status, output}.
function promtool(args, input) {
  const r = spawnSync('promtool', args, { input, encoding: 'utf8', cwd: repoRoot });
  return { status: r.status, output: (r.stdout || '') + (r.stderr || '') };
}

// samples parses a scrape into [{name, labels, value}].
function samples(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `a sample line: ${line}`);
    const labels = {};
    for (const l of (m[2] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:\\.|[^"\\])*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

// families: the family names a scrape declares (# TYPE lines).
function families(text) {
  return new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]));
}

async function scrape(url) {
  const r = await fetch(url, { signal: AbortSignal.timeout(10000) });
  assert.equal(r.status, 200, url);
  assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  return r.text();
}

// waitFor polls `f` (bounded: `tries` x 50 ms) until it answers something truthy, and returns that.
async function waitFor(what, f, tries = 200) {
  for (let i = 0; i < tries; ++i) {
    const v = await f();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

// startAgent runs `gpupack agent` on simulated GPUs whose process list is <dir>/fake-gpu-processes.json, with
// its metrics on a free loopback port, resolving {child, metricsUrl, stop()} once the banner names both.
async function startAgent(dir, endpoint) {
  const args = ['agent', '--server', endpoint, '--gpus', `fake:2x${GPU_MIB}`, '--name', HOST, '--state-dir',
    path.join(dir, 'agent'), '--mps-pipe-dir', path.join(dir, 'mps'), '--metrics-listen', '127.0.0.1:0',
    '--log-level', 'warn', '--stop-grace-ms', '2000'];
  const child = spawn(gpupackBin(), args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, GPUPACK_FAKE_GPU_DIR: dir } });
  let out = '';
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => (out += d));
  child.stdout.setEncoding('utf8');
  const metricsUrl = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the agent printed no metrics endpoint within 20 s:\n${out}`));
    }, 20000);
    child.stdout.on('data', (d) => {
      out += d;
      const m = /metrics (http:\/\/\S+\/metrics)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`the agent exited (code ${code}, signal ${signal}):\n${out}`));
    });
  });
  return {
    child,
    metricsUrl,
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

describe('/metrics through promtool', { skip: SKIP }, () => {
  let dir;
  let server;
  let agent;
  let instanceArn;
  let gpus;         // [{uuid, index}] as registered
  let taskArn;
  let taskGpu;      // the GPU UUID the task was given
  let serverText;
  let agentText;

  before(async () => {
    dir = tempDir('gpupack-metrics-');
    // --metrics-per-task: the dashboard's task tables read the per-task series, off by default.
    server = await startServer({ db: path.join(dir, 'state.db'), extraArgs: ['--metrics-per-task'] });
    agent = await startAgent(dir, server.endpoint);
    const list = await waitFor('the agent to register and connect', async () => {
      const r = await ok(server.endpoint, 'ListContainerInstances', { cluster: 'default' });
      if (r.containerInstanceArns.length !== 1) return null;
      const d = await ok(server.endpoint, 'DescribeContainerInstances', { cluster: 'default', containerInstances: r.containerInstanceArns });
      return d.containerInstances[0].agentConnected ? d.containerInstances[0] : null;
    });
    instanceArn = list.containerInstanceArn;
    gpus = list.gpuDevices.map((g, index) => ({ uuid: g.gpuId, index }));

    // A shared task whose process writes its pid, then sleeps; the simulated GPUs then list that pid as using
    // USED_MIB on the task's GPU, as NVML lists an MPS client.
    const pidFile = path.join(taskDir(dir, 'pids'), 'task.pid');  // the task (an unprivileged user) writes it
    await ok(server.endpoint, 'RegisterTaskDefinition', {
      family: 'sleeper',
      containerDefinitions: [{
        name: 'main', image: 'process', cpu: 64, memory: 64, essential: true,
        entryPoint: ['/bin/sh', '-c', `echo $$ > ${pidFile}; exec sleep 300`],
        resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { memory: DECLARED_MIB, maxComputePercent: 40 } } }],
      }],
    });
    const run = await ok(server.endpoint, 'RunTask', { cluster: 'default', taskDefinition: 'sleeper' });
    assert.equal(run.tasks.length, 1, JSON.stringify(run.failures));
    taskArn = run.tasks[0].taskArn;
    taskGpu = run.tasks[0].containers[0].gpuIds[0];
    await waitFor('the task to run', async () => {
      const d = await ok(server.endpoint, 'DescribeTasks', { cluster: 'default', tasks: [taskArn] });
      return d.tasks[0].lastStatus === 'RUNNING' && fs.existsSync(pidFile) && fs.readFileSync(pidFile, 'utf8').trim();
    });
    const pid = Number(fs.readFileSync(pidFile, 'utf8').trim());
    const tmp = path.join(dir, 'fake-gpu-processes.json.tmp');
    fs.writeFileSync(tmp, JSON.stringify([{ pid, gpuUuid: taskGpu, usedMiB: USED_MIB }]));
    fs.renameSync(tmp, path.join(dir, 'fake-gpu-processes.json'));

    // Three tasks that can never fit (more memory than a GPU has): three tasks not placed, one instance refusal.
    await ok(server.endpoint, 'RegisterTaskDefinition', {
      family: 'huge',
      containerDefinitions: [{
        name: 'main', image: 'process', cpu: 64, memory: 64, essential: true, entryPoint: ['/bin/true'],
        resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { memory: GPU_MIB + 1 } } }],
      }],
    });
    const refused = await ok(server.endpoint, 'RunTask', { cluster: 'default', taskDefinition: 'huge', count: 3 });
    assert.equal(refused.tasks.length, 0);
    // A service of no replicas: its series are in the scrape, and it places nothing that the figures above count.
    await ok(server.endpoint, 'CreateService', { cluster: 'default', serviceName: 'standby', taskDefinition: 'sleeper', desiredCount: 0 });

    serverText = await scrape(server.endpoint + '/metrics');
    agentText = await waitFor('the agent to read the task\'s GPU memory', async () => {
      const text = await scrape(agent.metricsUrl);
      return samples(text).some((s) => s.name === 'gpupack_agent_task_gpu_memory_used_bytes' && s.value > 0) ? text : null;
    });
  });

  after(async () => {
    if (server && taskArn) {
      await ok(server.endpoint, 'StopTask', { cluster: 'default', task: taskArn }).catch(() => {});
      await waitFor('the task to stop', async () => {
        const d = await ok(server.endpoint, 'DescribeTasks', { cluster: 'default', tasks: [taskArn] });
        return d.tasks[0].lastStatus === 'STOPPED';
      }).catch(() => {});
    }
    if (agent) await agent.stop();
    if (server) await server.stop();
    if (dir) removeTempDir(dir);
  });

  test('promtool check metrics finds nothing in the server\'s scrape', () => {
    const r = promtool(['check', 'metrics'], serverText);
    assert.equal(r.status, 0, r.output);
    assert.equal(r.output, '');
  });

  test('promtool check metrics finds nothing in the agent\'s scrape', () => {
    const r = promtool(['check', 'metrics'], agentText);
    assert.equal(r.status, 0, r.output);
    assert.equal(r.output, '');
  });

  test('no series has a label Prometheus owns (instance, job) or a MiB unit', () => {
    for (const text of [serverText, agentText]) {
      for (const s of samples(text)) {
        assert.ok(!('instance' in s.labels) && !('job' in s.labels), `${s.name} ${JSON.stringify(s.labels)}`);
        assert.ok(!/_mib\b/.test(s.name), s.name);
      }
    }
  });

  test('the server\'s GPU series carry UUID, gpu and Hostname, in bytes of the MiB the API shows', async () => {
    const id = instanceArn.split('/').pop();
    const d = await ok(server.endpoint, 'DescribeContainerInstances', { cluster: 'default', containerInstances: [instanceArn] });
    const api = Object.fromEntries(d.containerInstances[0].gpuDevices.map((g) => [g.gpuId, g]));
    const all = samples(serverText);
    for (const { uuid, index } of gpus) {
      const find = (name) => all.filter((s) => s.name === name && s.labels.UUID === uuid);
      for (const name of ['gpupack_gpu_memory_total_bytes', 'gpupack_gpu_memory_allocated_bytes', 'gpupack_gpu_held',
        'gpupack_gpu_compute_allocated_ratio', 'gpupack_gpu_containers']) {
        const [s, ...rest] = find(name);
        assert.ok(s && rest.length === 0, `one ${name} for ${uuid}`);
        assert.deepEqual(s.labels, { cluster: 'default', container_instance: id, Hostname: HOST, UUID: uuid, gpu: String(index) }, name);
      }
      const g = api[uuid];
      assert.equal(find('gpupack_gpu_memory_total_bytes')[0].value, g.totalMemoryInMiB * MIB);
      assert.equal(find('gpupack_gpu_memory_allocated_bytes')[0].value, (g.totalMemoryInMiB - g.remainingMemoryInMiB) * MIB);
      assert.equal(find('gpupack_gpu_memory_allocated_bytes')[0].value, uuid === taskGpu ? DECLARED_MIB * MIB : 0);
      assert.equal(find('gpupack_gpu_compute_allocated_ratio')[0].value, uuid === taskGpu ? 0.4 : 0);
    }
    const task = all.filter((s) => s.name === 'gpupack_task_gpu_memory_allocated_bytes');
    assert.equal(task.length, 1);
    assert.deepEqual(task[0].labels, {
      cluster: 'default', task_arn: taskArn, container: 'main', container_instance: id, Hostname: HOST, UUID: taskGpu,
      gpu: String(gpus.find((g) => g.uuid === taskGpu).index), mode: 'NVIDIA_MPS',
    });
    assert.equal(task[0].value, DECLARED_MIB * MIB);
    const running = all.find((s) => s.name === 'gpupack_tasks' && s.labels.status === 'RUNNING');
    assert.equal(running.value, 1);
  });

  test('a service has its replica series, labelled by cluster and service, with DescribeServices\' figures', async () => {
    const d = await ok(server.endpoint, 'DescribeServices', { cluster: 'default', services: ['standby'] });
    const svc = d.services[0];
    const all = samples(serverText);
    const expected = {
      gpupack_service_desired_tasks: svc.desiredCount,
      gpupack_service_running_tasks: svc.runningCount,
      gpupack_service_pending_tasks: svc.pendingCount,
      gpupack_service_deployments_in_progress: svc.deployments.filter((x) => x.rolloutState === 'IN_PROGRESS').length,
    };
    for (const [name, value] of Object.entries(expected)) {
      const series = all.filter((s) => s.name === name);
      assert.deepEqual(series.map((s) => [s.labels, s.value]), [[{ cluster: 'default', service: 'standby' }, value]], name);
    }
  });

  test('gpupack_placement_failures_total counts the tasks not placed, not the instances that refused them', () => {
    const all = samples(serverText);
    const sum = (name) => all.filter((s) => s.name === name && s.labels.cluster === 'default').reduce((a, s) => a + s.value, 0);
    assert.equal(sum('gpupack_placement_failures_total'), 3);
    assert.equal(sum('gpupack_placement_instance_refusals_total'), 1);
    assert.equal(all.find((s) => s.name === 'gpupack_placements_total').value, 1);
  });

  test('the agent reports the task\'s GPU memory in use per container and GPU, beside its limit', () => {
    const all = samples(agentText);
    const labels = { task_arn: taskArn, container: 'main', Hostname: HOST, UUID: taskGpu, gpu: String(gpus.find((g) => g.uuid === taskGpu).index) };
    const used = all.filter((s) => s.name === 'gpupack_agent_task_gpu_memory_used_bytes');
    assert.equal(used.length, 1);
    assert.deepEqual(used[0].labels, labels);
    assert.equal(used[0].value, USED_MIB * MIB);
    const limit = all.filter((s) => s.name === 'gpupack_agent_task_gpu_memory_limit_bytes');
    assert.deepEqual(limit.map((s) => [s.labels, s.value]), [[labels, DECLARED_MIB * MIB]]);
    for (const { uuid, index } of gpus) {
      const total = all.find((s) => s.name === 'gpupack_agent_gpu_memory_total_bytes' && s.labels.UUID === uuid);
      assert.deepEqual(total.labels, { Hostname: HOST, UUID: uuid, gpu: String(index) });
      assert.equal(total.value, GPU_MIB * MIB);
    }
    const serving = all.find((s) => s.name === 'gpupack_agent_mps_daemon_serving');
    assert.equal(serving.value, 1);
    const starts = all.find((s) => s.name === 'gpupack_agent_runtime_call_duration_seconds_count' && s.labels.operation === 'start');
    assert.equal(starts.value, 1);
    assert.equal(starts.labels.result, 'ok');
  });

  test('the agent\'s listener answers only GET /metrics', async () => {
    const base = agent.metricsUrl.replace(/\/metrics$/, '');
    const other = await fetch(base + '/other');
    assert.equal(other.status, 404);
    await other.text();
    const post = await fetch(agent.metricsUrl, { method: 'POST', body: 'x' });
    assert.equal(post.status, 405);
    await post.text();
  });

  // Last: it ends the task. The container "uses" more than it declared, two watchdog readings in a row.
  test('a stop by the watchdog is counted, and the task\'s series go with the task', async () => {
    const tmp = path.join(dir, 'fake-gpu-processes.json.tmp');
    const pid = Number(fs.readFileSync(path.join(dir, 'pids', 'task.pid'), 'utf8').trim());
    fs.writeFileSync(tmp, JSON.stringify([{ pid, gpuUuid: taskGpu, usedMiB: DECLARED_MIB + 500 }]));
    fs.renameSync(tmp, path.join(dir, 'fake-gpu-processes.json'));
    const stops = (text, cause) =>
      samples(text).find((s) => s.name === 'gpupack_agent_health_stops_total' && s.labels.cause === cause).value;
    assert.equal(stops(agentText, 'watchdog'), 0);
    const text = await waitFor('the watchdog to stop the task', async () => {
      const t = await scrape(agent.metricsUrl);
      return stops(t, 'watchdog') === 1 ? t : null;
    }, 600);
    assert.equal(stops(text, 'gpu_fault'), 0);
    await waitFor('the task to be STOPPED', async () => {
      const d = await ok(server.endpoint, 'DescribeTasks', { cluster: 'default', tasks: [taskArn] });
      return d.tasks[0].lastStatus === 'STOPPED';
    }, 600);
    const after = await scrape(server.endpoint + '/metrics');
    assert.ok(!after.includes(taskArn), 'no series names the stopped task');
    assert.equal(samples(after).find((s) => s.name === 'gpupack_tasks' && s.labels.status === 'STOPPED').value, 1);
  });

  test('promtool accepts the alert rules and the example configuration', () => {
    const rules = promtool(['check', 'rules', 'deploy/prometheus/gpupack-alerts.yml']);
    assert.equal(rules.status, 0, rules.output);
    const config = promtool(['check', 'config', 'deploy/prometheus/prometheus.yml']);
    assert.equal(config.status, 0, config.output);
  });

  test('every gpupack family the alert rules and the dashboard read is one the scrapes declare', () => {
    const known = new Set([...families(serverText), ...families(agentText)]);
    const dashboard = JSON.parse(fs.readFileSync(path.join(repoRoot, 'deploy/grafana/gpupack.json'), 'utf8'));
    const exprs = [];
    const walk = (p) => {
      for (const t of p.targets || []) exprs.push(t.expr);
      for (const c of p.panels || []) walk(c);
    };
    walk(dashboard);
    for (const v of dashboard.templating.list) if (v.definition) exprs.push(v.definition);
    const rules = fs.readFileSync(path.join(repoRoot, 'deploy/prometheus/gpupack-alerts.yml'), 'utf8');
    exprs.push(rules.split('\n').filter((l) => !l.trim().startsWith('#')).join('\n'));  // not the comments
    assert.ok(exprs.length > 10);
    for (const e of exprs) {
      for (const [name] of e.matchAll(/\bgpupack_[a-z_]+/g)) {
        const family = name.replace(/_(bucket|sum|count)$/, '');
        assert.ok(known.has(family) || known.has(name), `${name} is read but no scrape declares it`);
      }
    }
  });
});

describe('gpupack agent --metrics-listen', () => {
  test('an address it cannot listen on fails the agent before it registers, naming the flag', () => {
    const dir = tempDir('gpupack-metrics-flag-');
    try {
      for (const bad of ['no-port', '127.0.0.1:99999', '256.1.1.1:0']) {
        const r = spawnSync(gpupackBin(), ['agent', '--server', 'http://127.0.0.1:9', '--gpus', 'fake:1x1024',
          '--state-dir', path.join(dir, 'agent'), '--mps-pipe-dir', path.join(dir, 'mps'), '--metrics-listen', bad],
        { encoding: 'utf8', timeout: 20000 });
        assert.notEqual(r.status, 0, bad);
        assert.match(r.stderr, new RegExp(`--metrics-listen ${bad.replace(/\./g, '\\.')}: `), r.stderr);
      }
    } finally {
      removeTempDir(dir);
    }
  });
});
