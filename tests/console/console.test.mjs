// console: the web console at /console/ in Debian's headless Chromium (puppeteer-core, no browser of its own),
// against `gpupack up` with simulated GPUs and its local agents (real channel, process runtime).
//
// Open server: the clusters page's numbers equal DescribeContainerInstances', each GPU's strip holds its
// tasks, the page follows a change without a reload, a stopped task shows its stop code, reason and log lines,
// and a refused RunTask's reasons appear in "why not placed" with ExplainPlacement's verdict per instance and GPU,
// and a task's GPU memory in use is what the simulated GPUs list for its process; a service's replicas,
// deployments, events and tasks (with their GPUs) equal DescribeServices', and its page follows a scale-up.
// With --credentials: without a session the page asks for a login and every data call is refused (401), a wrong
// secret is refused, a reader key's session reads but may not write, an admin's may, and logout ends it.
//
// Screenshots of each page go to $GPUPACK_SCREENSHOT_DIR (ctest: <build>/tests/console-screenshots); copies live
// in docs/console/. Skipped, with a message, only when /usr/bin/chromium is missing.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { call, ok, removeTempDir, startUp, taskDir, tempDir } from '../integration/harness.mjs';

const CHROMIUM = process.env.GPUPACK_CHROMIUM || '/usr/bin/chromium';
const haveChromium = fs.existsSync(CHROMIUM);
if (!haveChromium) console.log(`# SKIP: ${CHROMIUM} is missing (apt-get install chromium): the console test needs it`);
const SHOTS = process.env.GPUPACK_SCREENSHOT_DIR || path.join(tempDir('gpupack-console-shots-'));
const GPU_MIB = 16000;

// puppeteer-core is loaded only when chromium is there, so a machine without it skips cleanly.
async function launch() {
  const { default: puppeteer } = await import('puppeteer-core');
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  });
}

function shot(page, name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  return page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

function taskDefinition(family, { memory, compute, command = ['sleep', '600'] }) {
  return {
    family,
    containerDefinitions: [
      {
        name: 'main',
        image: 'busybox',
        command,
        cpu: 64,
        memory: 64,
        essential: true,
        resourceRequirements: [
          { type: 'GPU', sharingStrategy: { nvidiaMps: { memory, maxComputePercent: compute } } },
        ],
      },
    ],
  };
}

// until polls `f` (async) every 100 ms until it returns a truthy value, at most `tries` times.
async function until(what, f, tries = 200) {
  let last;
  for (let i = 0; i < tries; ++i) {
    last = await f();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`gave up waiting for ${what} (last: ${JSON.stringify(last)})`);
}

async function describeInstances(endpoint, cluster = 'default', callFn = call) {
  const list = await callFn(endpoint, 'ListContainerInstances', { cluster });
  assert.equal(list.status, 200, list.text);
  if (!list.json.containerInstanceArns.length) return [];
  const r = await callFn(endpoint, 'DescribeContainerInstances', { cluster, containerInstances: list.json.containerInstanceArns });
  assert.equal(r.status, 200, r.text);
  return r.json.containerInstances;
}

async function tasksIn(endpoint, desiredStatus, callFn = call) {
  const list = await callFn(endpoint, 'ListTasks', { cluster: 'default', desiredStatus });
  if (!list.json.taskArns.length) return [];
  const r = await callFn(endpoint, 'DescribeTasks', { cluster: 'default', tasks: list.json.taskArns });
  return r.json.tasks;
}

describe('the console of an open server', { skip: !haveChromium && 'chromium is missing' }, () => {
  let dir;
  let up;
  let browser;
  let page;
  let refused;
  let stoppedArn;

  before(async () => {
    dir = tempDir('gpupack-console-');
    // The simulated GPUs list the processes of <dir>/gpus/fake-gpu-processes.json (what NVML lists per MPS client);
    // `gpupack up` and its agents inherit the variable.
    fs.mkdirSync(path.join(dir, 'gpus'));
    process.env.GPUPACK_FAKE_GPU_DIR = path.join(dir, 'gpus');
    up = await startUp(path.join(dir, 'up'), ['--agents', '2', '--gpus', `fake:2x${GPU_MIB}`]);
    delete process.env.GPUPACK_FAKE_GPU_DIR;
    const e = up.endpoint;
    await ok(e, 'RegisterTaskDefinition', taskDefinition('trainer', { memory: 4000, compute: 30 }));
    await ok(e, 'RegisterTaskDefinition', taskDefinition('giant', { memory: 20000, compute: 50 }));
    await ok(
      e,
      'RegisterTaskDefinition',
      taskDefinition('short', {
        memory: 1000,
        compute: 10,
        command: ['sh', '-c', 'echo console log line one; echo console log line two; exec sleep 600'],
      }),
    );
    const run = await ok(e, 'RunTask', { taskDefinition: 'trainer', count: 3, startedBy: 'console-test' });
    assert.equal(run.tasks.length, 3, JSON.stringify(run.failures));
    const short = await ok(e, 'RunTask', { taskDefinition: 'short' });
    stoppedArn = short.tasks[0].taskArn;
    refused = await ok(e, 'RunTask', { taskDefinition: 'giant' });
    assert.equal(refused.tasks.length, 0);
    assert.ok(refused.failures.length > 0);
    await until('4 tasks RUNNING', async () => (await tasksIn(e, 'RUNNING')).filter((t) => t.lastStatus === 'RUNNING').length === 4);
    await ok(e, 'StopTask', { task: stoppedArn, reason: 'stopped by the console test' });
    await until('the stopped task STOPPED', async () => (await tasksIn(e, 'STOPPED')).some((t) => t.lastStatus === 'STOPPED'));
    browser = await launch();
    page = await browser.newPage();
    await page.setViewport({ width: 1400, height: 900 });
  });

  after(async () => {
    await browser?.close();
    await up?.stop();
    if (dir) removeTempDir(dir);
  });

  test('GET / redirects to the console, whose clusters page shows the API\'s numbers', async () => {
    await page.goto(up.endpoint + '/', { waitUntil: 'load' });
    assert.equal(new URL(page.url()).pathname, '/console/');
    await page.evaluate(() => (window.__sameDocument = true));
    await page.waitForSelector('tr[data-cluster="default"]');
    const instances = await describeInstances(up.endpoint);
    const gpus = instances.flatMap((i) => i.gpuDevices);
    const total = gpus.reduce((n, g) => n + g.totalMemoryInMiB, 0);
    const allocated = gpus.reduce((n, g) => n + g.totalMemoryInMiB - g.remainingMemoryInMiB, 0);
    assert.equal(allocated, 3 * 4000);
    const running = (await tasksIn(up.endpoint, 'RUNNING')).filter((t) => t.lastStatus === 'RUNNING').length;
    const shown = await page.$eval('tr[data-cluster="default"]', (tr) => ({
      instances: Number(tr.querySelector('[data-field="instances"]').dataset.value),
      gpus: Number(tr.querySelector('[data-field="gpus"]').dataset.value),
      allocated: Number(tr.querySelector('[data-field="gpuMemory"]').dataset.allocated),
      total: Number(tr.querySelector('[data-field="gpuMemory"]').dataset.total),
      running: Number(tr.querySelector('[data-field="RUNNING"]').dataset.value),
      stopped: Number(tr.querySelector('[data-field="STOPPED"]').dataset.value),
      refused: Number(tr.querySelector('[data-field="refused"]').dataset.value),
    }));
    assert.deepEqual(shown, { instances: instances.length, gpus: gpus.length, allocated, total, running, stopped: 1, refused: 1 });
    // "Refused" counts what the metrics count: the tasks not placed of gpupack_placement_failures_total.
    const metrics = await (await fetch(`${up.endpoint}/metrics`)).text();
    const notPlaced = metrics
      .split('\n')
      .filter((l) => l.startsWith('gpupack_placement_failures_total{') && l.includes('cluster="default"'))
      .reduce((n, l) => n + Number(l.split(' ').pop()), 0);
    assert.equal(shown.refused, notPlaced);
    // The fragmentation panel shows the server's fragmentation gauges (docs/operations.md "Fragmentation").
    const gauge = (name) => Number(metrics.split('\n').find((l) => l.startsWith(`${name}{cluster="default"} `)).split(' ').pop()) / 1048576;
    const panel = await page.$eval('tr[data-fragmentation="default"][data-instance-type=""]', (tr) => ({
      largest: Number(tr.dataset.largest), free: Number(tr.dataset.free), stranded: Number(tr.dataset.stranded),
    }));
    assert.deepEqual(panel, {
      largest: gauge('gpupack_cluster_gpu_largest_free_block_bytes'),
      free: gauge('gpupack_cluster_gpu_memory_free_bytes'),
      stranded: gauge('gpupack_cluster_gpu_memory_stranded_bytes'),
    });
    assert.equal(panel.free, total - allocated);
    assert.equal(panel.largest, GPU_MIB, 'an IDLE GPU is the largest free block');
    assert.match(await page.$eval('#fragmentation', (e) => e.textContent), /smallest task of the last hour 1,000 MiB/);
    await shot(page, 'clusters');
  });

  test('the instances page draws each GPU as the API describes it, with a strip of its tasks', async () => {
    await page.goto(`${up.endpoint}/console/#/instances?cluster=default`, { waitUntil: 'load' });
    await page.waitForSelector('section.instance');
    const instances = await describeInstances(up.endpoint);
    const running = (await tasksIn(up.endpoint, 'RUNNING')).filter((t) => t.lastStatus === 'RUNNING');
    for (const inst of instances) {
      const id = inst.containerInstanceArn.split('/').pop();
      const drawn = await page.$eval(`section[data-instance="${id}"]`, (s) => ({
        agent: s.querySelector('[data-field="agent"]').textContent,
        health: s.querySelector('[data-field="health"]').textContent,
        gpus: [...s.querySelectorAll('.gpu')].map((g) => ({
          id: g.dataset.gpu,
          mode: g.dataset.mode,
          total: Number(g.dataset.total),
          remaining: Number(g.dataset.remaining),
          tasks: [...g.querySelectorAll('.seg')].map((x) => x.dataset.task),
          labels: [...g.querySelectorAll('.seg')].map((x) => x.textContent),
        })),
      }));
      assert.equal(drawn.agent, inst.agentConnected ? 'agent connected' : 'agent DISCONNECTED');
      assert.equal(drawn.health, `health ${inst.healthStatus.overallStatus}`);
      assert.deepEqual(
        drawn.gpus.map((g) => [g.id, g.mode, g.total, g.remaining, g.tasks.length]),
        inst.gpuDevices.map((g) => [g.gpuId, g.sharingMode, g.totalMemoryInMiB, g.remainingMemoryInMiB, g.containerCount]),
      );
      for (const g of drawn.gpus) {
        const holders = running.filter((t) => t.containers.some((c) => (c.gpuIds ?? []).includes(g.id)));
        assert.deepEqual([...g.tasks].sort(), holders.map((t) => t.taskArn.split('/').pop()).sort());
        for (const label of g.labels) assert.match(label, /^[0-9a-f]{8} · 4,000 MiB · 30%$/);
      }
    }
    await shot(page, 'instances');
  });

  test('the page follows a change without a reload', async () => {
    const before = await page.$$eval('.seg', (s) => s.length);
    const run = await ok(up.endpoint, 'RunTask', { taskDefinition: 'trainer', startedBy: 'console-test' });
    const id = run.tasks[0].taskArn.split('/').pop();
    await page.waitForSelector(`.seg[data-task="${id}"]`, { timeout: 10000 });
    assert.equal(await page.$$eval('.seg', (s) => s.length), before + 1);
    assert.equal(await page.evaluate(() => window.__sameDocument), true);
  });

  test('the tasks page filters, and a stopped task shows its stop code, reason and log', async () => {
    await page.goto(`${up.endpoint}/console/#/tasks?status=STOPPED`, { waitUntil: 'load' });
    const id = stoppedArn.split('/').pop();
    await page.waitForSelector(`tr[data-task="${id}"]`);
    assert.equal(await page.$$eval('tr[data-task]', (r) => r.length), 1);
    await page.goto(`${up.endpoint}/console/#/tasks?family=trainer&startedBy=console-test`, { waitUntil: 'load' });
    await page.waitForSelector('#task-count');
    await until('4 trainer tasks listed', async () => (await page.$$eval('tr[data-task]', (r) => r.length)) === 4);
    await shot(page, 'tasks');
    await page.goto(`${up.endpoint}/console/#/task/${encodeURIComponent(stoppedArn)}`, { waitUntil: 'load' });
    await page.waitForSelector('#task-stop-reason');
    const described = (await ok(up.endpoint, 'DescribeTasks', { tasks: [stoppedArn] })).tasks[0];
    assert.equal(await page.$eval('#task-stop-reason', (e) => e.textContent), 'stopped by the console test');
    assert.equal(await page.$eval('#task-stop-code', (e) => e.textContent), described.stopCode);
    assert.equal(await page.$eval('#task-last-status', (e) => e.textContent), 'STOPPED');
    // The process runtime ran the command on the host: the image is shown struck through, "not used".
    assert.equal(await page.$eval('s.image-unused', (e) => e.textContent), 'busybox');
    assert.match(described.containers[0].reason ?? '', /image 'busybox' not used: the process runtime ran the command on the host/);
    // Its log, read through the server's CloudWatch Logs API from the agent that ran it.
    await page.waitForSelector('#log pre.log', { timeout: 10000 });
    const log = await page.$eval('#log', (e) => e.textContent);
    assert.match(log, /console log line one[\s\S]*console log line two/);
    assert.ok(log.includes(`/gpupack/default main/${id}`), log);
    await shot(page, 'task');
  });

  test('a refused RunTask\'s reasons appear in "why not placed", with the verdict per instance and GPU', async () => {
    await page.goto(`${up.endpoint}/console/#/explain`, { waitUntil: 'load' });
    await page.waitForSelector('tr.refusal');
    const text = await page.$eval('#refusals', (e) => e.textContent);
    for (const f of refused.failures) assert.ok(text.includes(f.reason), `${f.reason} missing from: ${text}`);
    assert.ok(text.includes('giant'));
    await page.click('a.explain-again');
    await page.waitForSelector('#explanation');
    const api = await ok(up.endpoint, 'ExplainPlacement', { cluster: 'default', taskDefinition: 'giant' });
    assert.equal(await page.$eval('#explain-verdict', (e) => e.textContent), 'Fits nowhere: see each instance and GPU below.');
    for (const inst of api.instances) {
      const id = inst.containerInstanceArn.split('/').pop();
      const row = await page.$eval(`#explanation tr[data-instance="${id}"]`, (tr) => ({
        why: tr.querySelector('.why').textContent,
        gpus: [...tr.querySelectorAll('li[data-gpu]')].map((li) => [li.dataset.gpu, li.className, li.textContent]),
      }));
      if (!inst.eligible) assert.ok(row.why.includes(inst.reason), row.why);
      assert.equal(row.gpus.length, inst.gpus.length);
      for (const [n, g] of inst.gpus.entries()) {
        assert.equal(row.gpus[n][0], g.gpuId);
        assert.equal(row.gpus[n][1], g.fits ? 'fits' : 'nofit');
        assert.ok(row.gpus[n][2].includes(g.detail), `${row.gpus[n][2]} lacks ${g.detail}`);
      }
    }
    await shot(page, 'explain');
  });

  test("a task's GPU memory in use is what the simulated GPUs list for its process, drawn beside what it declared", async () => {
    // A task whose process writes its pid; the simulated GPUs then list that pid as using USED_MIB on the task's
    // GPU, as NVML lists an MPS client. Its agent's watchdog reads it and the next heartbeat carries it.
    const USED_MIB = 1234;
    const pidFile = path.join(taskDir(dir, 'pids'), 'sampler.pid');  // the task (an unprivileged user) writes it
    await ok(up.endpoint, 'RegisterTaskDefinition', taskDefinition('sampler', {
      memory: 4000, compute: 30, command: ['sh', '-c', `echo $$ > ${pidFile}.tmp; mv ${pidFile}.tmp ${pidFile}; exec sleep 600`],
    }));
    const run = await ok(up.endpoint, 'RunTask', { taskDefinition: 'sampler' });
    const arn = run.tasks[0].taskArn;
    const id = arn.split('/').pop();
    const gpu = run.tasks[0].containers[0].gpuIds[0];
    await until('the sampler RUNNING with its pid written', async () =>
      (await ok(up.endpoint, 'DescribeTasks', { tasks: [arn] })).tasks[0].lastStatus === 'RUNNING' && fs.existsSync(pidFile));
    const pid = Number(fs.readFileSync(pidFile, 'utf8').trim());
    const listed = path.join(dir, 'gpus', 'fake-gpu-processes.json');
    fs.writeFileSync(`${listed}.tmp`, JSON.stringify([{ pid, gpuUuid: gpu, usedMiB: USED_MIB }]));
    fs.renameSync(`${listed}.tmp`, listed);
    const bytes = USED_MIB * 1048576;

    // The GPU strip: a darker fill inside the task's declared block, as wide as used / declared.
    await page.goto(`${up.endpoint}/console/#/instances?cluster=default`, { waitUntil: 'load' });
    const seg = `.gpu[data-gpu="${gpu}"] .seg[data-task="${id}"]`;
    await page.waitForSelector(`${seg}[data-used-bytes="${bytes}"]`, { timeout: 20000 });
    const fill = await page.$eval(`${seg} .used`, (e) => Number(e.dataset.width));
    assert.equal(fill, Number(((100 * USED_MIB) / 4000).toFixed(2)));
    assert.match(await page.$eval(seg, (e) => e.title), /in use: 1,234 MiB \(read \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\)$/);
    await shot(page, 'instances');

    // The task's page: used beside declared, with the reading's age; per GPU too.
    await page.goto(`${up.endpoint}/console/#/task/${encodeURIComponent(arn)}`, { waitUntil: 'load' });
    await page.waitForSelector(`#task-gpu-used[data-used-bytes="${bytes}"]`, { timeout: 10000 });
    assert.match(await page.$eval('#task-gpu-used', (e) => e.textContent), /^used 1,234 MiB of 4,000 MiB declared \(read \d+ s ago\)$/);
    assert.equal(await page.$eval(`li[data-gpu="${gpu}"]`, (e) => Number(e.dataset.usedBytes)), bytes);
    await shot(page, 'task-gpu-memory');

    // A stopped task has no figure: "not reported", never 0.
    await page.goto(`${up.endpoint}/console/#/task/${encodeURIComponent(stoppedArn)}`, { waitUntil: 'load' });
    await page.waitForSelector('#task-gpu-used');
    assert.equal(await page.$eval('#task-gpu-used', (e) => e.textContent), 'not reported');
    assert.equal(await page.$eval('#task-gpu-used', (e) => e.dataset.usedBytes), 'none');
  });
  test('the services page and a service\'s page show its replicas, deployments, events and tasks with their GPUs', async () => {
    const e = up.endpoint;
    const created = await ok(e, 'CreateService', { serviceName: 'web', taskDefinition: 'trainer', desiredCount: 2 });
    const arn = created.service.serviceArn;
    const describe = async () => (await ok(e, 'DescribeServices', { services: ['web'] })).services[0];
    await until('the service steady with 2 running', async () => {
      const s = await describe();
      return s.runningCount === 2 && s.events.some((ev) => ev.message.includes('has reached a steady state'));
    });
    const svc = await describe();
    assert.equal(svc.deployments[0].rolloutState, 'COMPLETED');
    // A deleted service with no task is INACTIVE at once: listed nowhere, as ListServices lists nothing of it.
    await ok(e, 'CreateService', { serviceName: 'retired', taskDefinition: 'trainer', desiredCount: 0 });
    await ok(e, 'DeleteService', { service: 'retired' });
    assert.equal((await ok(e, 'DescribeServices', { services: ['retired'] })).services[0].status, 'INACTIVE');

    // The list: one row per service with DescribeServices' numbers, its task definition and PRIMARY rollout.
    await page.goto(`${e}/console/#/services`, { waitUntil: 'load' });
    await page.waitForSelector('tr[data-service="web"]');
    const row = await page.$eval('tr[data-service="web"]', (tr) => ({
      cluster: tr.dataset.cluster,
      desired: Number(tr.querySelector('[data-field="desired"]').dataset.value),
      running: Number(tr.querySelector('[data-field="running"]').dataset.value),
      pending: Number(tr.querySelector('[data-field="pending"]').dataset.value),
      taskDefinition: tr.querySelector('[data-field="taskDefinition"]').textContent,
      rollout: tr.querySelector('[data-field="rollout"]').textContent.trim(),
      text: tr.textContent,
    }));
    assert.deepEqual({ ...row, text: undefined }, {
      cluster: 'default', desired: 2, running: 2, pending: 0, taskDefinition: 'trainer:1', rollout: 'COMPLETED', text: undefined,
    });
    assert.match(row.text, /REPLICA/);
    assert.match(row.text, /ACTIVE/);
    assert.deepEqual(await page.$$eval('tr[data-service]', (rows) => rows.map((tr) => tr.dataset.service)), ['web']);
    assert.equal(await page.$eval('#nav a.active', (a) => a.dataset.page), 'services');
    await shot(page, 'services');

    // The service's page, reached from the list.
    await Promise.all([page.waitForSelector('#service-facts'), page.click('tr[data-service="web"] a')]);
    assert.equal(decodeURIComponent(new URL(page.url()).hash), `#/service/${arn}`);
    const facts = await page.$eval('#service-facts', (d) => [d.dataset.desired, d.dataset.running, d.dataset.pending].map(Number));
    assert.deepEqual(facts, [2, 2, 0]);
    assert.equal(await page.$eval('#service-replicas', (d) => d.textContent), '2 running · 0 pending · 2 desired');
    const deployments = await page.$$eval('tr[data-deployment]', (rows) =>
      rows.map((tr) => ({
        id: tr.dataset.deployment,
        status: tr.dataset.status,
        counts: ['desired', 'running', 'pending', 'failed'].map((f) => Number(tr.querySelector(`[data-field="${f}"]`).dataset.value)),
        rollout: tr.querySelector('[data-field="rollout"] .badge').textContent,
      })),
    );
    assert.deepEqual(deployments, [{ id: svc.deployments[0].id, status: 'PRIMARY', counts: [2, 2, 0, 0], rollout: 'COMPLETED' }]);
    // Events newest first, as DescribeServices lists them; the newest says it reached a steady state.
    const events = await page.$$eval('tr.event', (rows) => rows.map((tr) => tr.lastElementChild.textContent));
    assert.deepEqual(events, svc.events.slice(0, events.length).map((ev) => ev.message));
    assert.match(events[0], /^\(service web\) has reached a steady state\.$/);
    assert.ok(events.some((m) => m.includes('(service web) has started 2 tasks')), events.join('\n'));
    // Its tasks, each with the GPU it holds, as the tasks page shows them.
    const list = await ok(e, 'ListTasks', { serviceName: 'web' });
    const tasks = (await ok(e, 'DescribeTasks', { tasks: list.taskArns })).tasks;
    assert.equal(tasks.length, 2);
    const drawn = await page.$$eval('#service-tasks tr[data-task]', (rows) =>
      Object.fromEntries(rows.map((tr) => [tr.dataset.task, tr.children[5].textContent])));
    assert.deepEqual(Object.keys(drawn).sort(), tasks.map((t) => t.taskArn.split('/').pop()).sort());
    for (const t of tasks) {
      const gpu = t.containers[0].gpuIds[0].replace(/^GPU-/, '');
      const short = gpu.length > 14 ? `${gpu.slice(0, 8)}…${gpu.slice(-4)}` : gpu;
      assert.equal(drawn[t.taskArn.split('/').pop()], `${short} 4,000 MiB 30%`);
    }
    await shot(page, 'service');

    // Scaled up, the page follows without a reload: a third task, then 3 running.
    await ok(e, 'UpdateService', { service: 'web', desiredCount: 3 });
    await page.waitForSelector('#service-facts[data-desired="3"][data-running="3"]', { timeout: 20000 });
    await page.waitForFunction(() => document.querySelectorAll('#service-tasks tr[data-task]').length === 3);
  });
});

describe('the console with --credentials', { skip: !haveChromium && 'chromium is missing' }, () => {
  const ADMIN = ['AKIDCONSOLEADMIN0001', 'admin-secret/0123456789abcdefABCDEF'];
  const READER = ['AKIDCONSOLEREADER002', 'reader-secret-0123456789abcdef'];
  const AGENT = ['AKIDCONSOLEAGENT0003', 'agent-secret-0123456789abcdef'];
  let dir;
  let up;
  let browser;
  let page;
  let adminCookie;
  let taskArn;

  // session: logs in over HTTP, returning the cookie (name=value).
  async function session([id, secret]) {
    const res = await fetch(`${up.endpoint}/console/session`, {
      method: 'POST',
      headers: { 'X-Gpupack-Console': '1', 'Content-Type': 'application/json' },
      body: JSON.stringify({ accessKeyId: id, secretAccessKey: secret }),
    });
    assert.equal(res.status, 200, await res.clone().text());
    const set = res.headers.get('set-cookie');
    assert.match(set, /^gpupack_session=[0-9a-f]{64}; HttpOnly; SameSite=Strict; Path=\/$/);
    return set.split(';')[0];
  }
  // as: ECS calls with a session cookie (and the console's header unless `header` is false).
  const as = (cookie, header = true) => (endpoint, operation, body) =>
    call(endpoint, operation, body, { headers: { Cookie: cookie, ...(header ? { 'X-Gpupack-Console': '1' } : {}) } });

  before(async () => {
    dir = tempDir('gpupack-console-auth-');
    const file = path.join(dir, 'credentials');
    fs.writeFileSync(
      file,
      `[admin]\naws_access_key_id = ${ADMIN[0]}\naws_secret_access_key = ${ADMIN[1]}\n` +
        `[node]\naws_access_key_id = ${AGENT[0]}\naws_secret_access_key = ${AGENT[1]}\ngpupack_role = agent\n` +
        `[watcher]\naws_access_key_id = ${READER[0]}\naws_secret_access_key = ${READER[1]}\ngpupack_role = reader\n`,
      { mode: 0o600 },
    );
    up = await startUp(path.join(dir, 'up'), ['--agents', '1', '--gpus', `fake:2x${GPU_MIB}`, '--credentials', file]);
    adminCookie = await session(ADMIN);
    const admin = as(adminCookie);
    assert.equal((await admin(up.endpoint, 'RegisterTaskDefinition', taskDefinition('trainer', { memory: 4000, compute: 30 }))).status, 200);
    const run = await admin(up.endpoint, 'RunTask', { taskDefinition: 'trainer' });
    assert.equal(run.status, 200, run.text);
    taskArn = run.json.tasks[0].taskArn;
    browser = await launch();
    page = await browser.newPage();
    await page.setViewport({ width: 1400, height: 900 });
  });

  after(async () => {
    await browser?.close();
    await up?.stop();
    if (dir) removeTempDir(dir);
  });

  test('without a session the data calls are refused and the page asks for a login', async () => {
    for (const p of ['overview', 'instances?cluster=default', 'tasks', 'services', 'refusals']) {
      const res = await fetch(`${up.endpoint}/console/api/${p}`, { headers: { 'X-Gpupack-Console': '1' } });
      assert.equal(res.status, 401, p);
      assert.equal((await res.json()).__type, 'AccessDeniedException');
    }
    const unsigned = await call(up.endpoint, 'ListClusters', {}, { headers: { 'X-Gpupack-Console': '1' } });
    assert.equal(unsigned.status, 401);
    assert.equal(unsigned.json.__type, 'AccessDeniedException');
    const bogus = await as('gpupack_session=' + '0'.repeat(64))(up.endpoint, 'ListClusters', {});
    assert.equal(bogus.status, 401);
    // The cookie without the console's header (what a forged cross-site form sends) is no signature.
    const forged = await as(adminCookie, false)(up.endpoint, 'StopTask', { task: taskArn });
    assert.equal(forged.status, 403);
    assert.equal(forged.json.__type, 'MissingAuthenticationTokenException');

    // A login needs the console's header too (a cross-site form cannot log a browser in), and the page and
    // every answer forbid framing, sniffing, caching and foreign or inline scripts.
    const formPost = await fetch(`${up.endpoint}/console/session`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ accessKeyId: ADMIN[0], secretAccessKey: ADMIN[1] }),
    });
    assert.equal(formPost.status, 403);
    assert.equal(formPost.headers.get('set-cookie'), null);
    const shell = await fetch(`${up.endpoint}/console/`);
    assert.equal(shell.status, 200);
    assert.match(shell.headers.get('content-security-policy'), /default-src 'self'/);
    assert.equal(shell.headers.get('x-frame-options'), 'DENY');
    assert.equal(shell.headers.get('cache-control'), 'no-store');
    assert.doesNotMatch(await shell.text(), /AKID|trainer/);

    await page.goto(`${up.endpoint}/console/`, { waitUntil: 'load' });
    await page.waitForSelector('#login');
    assert.equal(await page.$('table.grid'), null);
    await shot(page, 'login');
    await page.type('#login-key', READER[0]);
    await page.type('#login-secret', 'not-the-secret');
    await page.click('#login button[type=submit]');
    await page.waitForFunction(() => document.querySelector('#login-error').textContent.length > 0);
    assert.match(await page.$eval('#login-error', (e) => e.textContent), /not right/);
  });

  test("a reader key's session reads every page but may not write", async () => {
    await page.goto(`${up.endpoint}/console/`, { waitUntil: 'load' });
    await page.waitForSelector('#login');
    await page.type('#login-key', READER[0]);
    await page.type('#login-secret', READER[1]);
    await page.click('#login button[type=submit]');
    await page.waitForSelector('tr[data-cluster="default"]');
    assert.equal(await page.$eval('#whoami', (e) => e.dataset.role), 'reader');
    assert.equal(await page.evaluate(() => document.cookie), ''); // HttpOnly: the page never sees it
    const instances = await describeInstances(up.endpoint, 'default', as(adminCookie));
    const total = instances.flatMap((i) => i.gpuDevices).reduce((n, g) => n + g.totalMemoryInMiB, 0);
    assert.equal(await page.$eval('tr[data-cluster="default"] [data-field="gpuMemory"]', (e) => Number(e.dataset.total)), total);
    await page.goto(`${up.endpoint}/console/#/task/${encodeURIComponent(taskArn)}`, { waitUntil: 'load' });
    await page.waitForSelector('#task-last-status');
    assert.equal(await page.$('#stop-task'), null);
    // The page's own session, from inside the page: reads pass, a write is AccessDenied (400, not a login).
    const tried = await page.evaluate(async (arn) => {
      const post = (op, body) =>
        fetch('/', {
          method: 'POST',
          headers: { 'X-Gpupack-Console': '1', 'Content-Type': 'application/x-amz-json-1.1', 'X-Amz-Target': `AmazonEC2ContainerServiceV20141113.${op}` },
          body: JSON.stringify(body),
        }).then(async (r) => [r.status, (await r.json()).__type ?? 'ok']);
      return { read: await post('DescribeTasks', { tasks: [arn] }), write: await post('StopTask', { task: arn }) };
    }, taskArn);
    assert.deepEqual(tried.read, [200, 'ok']);
    assert.equal(tried.write[0], 400);
    assert.match(tried.write[1], /AccessDeniedException/);
    await shot(page, 'reader');
  });

  test("an agent key opens no session; an admin's writes; logout ends a session", async () => {
    // A key copied off a GPU host must not read what an administrator reads (issue 29).
    const login = await fetch(`${up.endpoint}/console/session`, {
      method: 'POST',
      headers: { 'X-Gpupack-Console': '1', 'Content-Type': 'application/json' },
      body: JSON.stringify({ accessKeyId: AGENT[0], secretAccessKey: AGENT[1] }),
    });
    assert.notEqual(login.status, 200);
    assert.match(await login.text(), /AccessDeniedException[\s\S]*may not open a console session/);
    assert.equal(login.headers.get('set-cookie'), null);
    // The agent channel takes signatures only, never a session.
    const channel = await fetch(`${up.endpoint}/agent/v1/channel`, { headers: { Cookie: adminCookie, 'X-Gpupack-Console': '1' } });
    assert.notEqual(channel.status, 101);
    const admin = as(adminCookie);
    assert.equal((await admin(up.endpoint, 'StopTask', { task: taskArn, reason: 'admin session' })).status, 200);
    const out = await fetch(`${up.endpoint}/console/session`, { method: 'DELETE', headers: { Cookie: adminCookie, 'X-Gpupack-Console': '1' } });
    assert.equal(out.status, 200);
    assert.equal((await admin(up.endpoint, 'DescribeTasks', { tasks: [taskArn] })).status, 401);
  });
});
