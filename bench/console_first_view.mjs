// console_first_view.mjs: how long the web console takes to show its first view of a large cluster, in
// Debian's headless chromium. A benchmark, never a test.
//
// It starts `gpupack server` (loopback, port 0, a temporary database, --place-on-disconnected: no agents),
// registers INSTANCES container instances of GPUS GPUs each (80 GB), runs TASKS shared-GPU tasks on them, and
// then, ROUNDS times per page, opens a new tab on the page and times it from page.goto() to the page's data drawn
// (the selector below present), with performance.now() in node:
//   clusters   #/clusters                    the cluster's row
//   instances  #/instances?cluster=default   the first page of 50 instances with their GPU strips
//   tasks      #/tasks                       the newest 200 tasks
//   explain    #/explain?...                 ExplainPlacement of a task that fits nowhere: every instance, every GPU
// It prints the size and time (node's fetch, median of 5) of each console read, then one line per page (median,
// min and max ms), and the load average before and after (the machine may be shared).
//
// Usage: node bench/console_first_view.mjs [--instances 1000] [--gpus 8] [--tasks 4000] [--rounds 5]
//                                          [--screenshots DIR]   (the last round of each page, as DIR/<page>.png)
// Needs: the gpupack binary ($GPUPACK_BIN, else build/gpupack), /usr/bin/chromium and tests/console's
// node_modules (npm ci in tests/console).
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

import { PLAY_AGENT, call, ok, pool, removeTempDir, startServer, tempDir } from '../tests/integration/harness.mjs';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const puppeteer = createRequire(path.join(repo, 'tests/console/package.json'))('puppeteer-core');

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith('--') ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []),
);
const INSTANCES = Number(args.instances ?? 1000);
const GPUS = Number(args.gpus ?? 8);
const TASKS = Number(args.tasks ?? 4000);
const ROUNDS = Number(args.rounds ?? 5);
const SCREENSHOTS = args.screenshots;
const GPU_MIB = 81559;

console.log(`load average before: ${os.loadavg().map((x) => x.toFixed(2)).join(' ')} (${os.cpus().length} CPUs)`);
const dir = tempDir('gpupack-console-bench-');
const server = await startServer({ db: path.join(dir, 'bench.db'), extraArgs: PLAY_AGENT });
const e = server.endpoint;
try {
  await ok(e, 'CreateCluster', {});
  let t = performance.now();
  await pool(INSTANCES, 8, async (i) => {
    await ok(e, 'RegisterContainerInstance', {
      totalResources: [
        { name: 'CPU', type: 'INTEGER', integerValue: 196608 },
        { name: 'MEMORY', type: 'INTEGER', integerValue: 2097152 },
      ],
      platformDevices: Array.from({ length: GPUS }, (_, g) => ({
        id: `GPU-${String(i).padStart(8, '0')}-0000-4000-8000-${String(g).padStart(12, '0')}`,
        type: 'GPU',
        gpuInfo: { memoryInMiB: GPU_MIB },
      })),
      versionInfo: { agentVersion: 'bench' },
    });
  });
  console.log(`registered ${INSTANCES} instances x ${GPUS} GPUs in ${Math.round(performance.now() - t)} ms`);
  const container = (family, memory) => ({
    family,
    containerDefinitions: [{ name: 'main', image: 'busybox', cpu: 64, memory: 64, essential: true,
      resourceRequirements: [{ type: 'GPU', sharingStrategy: { nvidiaMps: { memory, maxComputePercent: 25 } } }] }],
  });
  await ok(e, 'RegisterTaskDefinition', container('bench', 10000));
  await ok(e, 'RegisterTaskDefinition', container('toobig', GPU_MIB + 1));
  t = performance.now();
  await pool(Math.ceil(TASKS / 10), 4, async (i) => {
    await ok(e, 'RunTask', { taskDefinition: 'bench', count: 10, startedBy: `bench-${i % 7}` });
  });
  console.log(`ran ${TASKS} tasks in ${Math.round(performance.now() - t)} ms`);
  await call(e, 'RunTask', { taskDefinition: 'toobig' });
  for (const read of ['overview', 'instances?cluster=default&limit=50', 'tasks', 'refusals']) {
    const ms = [];
    let bytes = 0;
    for (let r = 0; r < 5; ++r) {
      const start = performance.now();
      bytes = (await (await fetch(`${e}/console/api/${read}`)).text()).length;
      ms.push(performance.now() - start);
    }
    ms.sort((a, b) => a - b);
    console.log(`/console/api/${read}: ${bytes.toLocaleString('en-US')} bytes, median ${ms[2].toFixed(1)} ms`);
  }

  const browser = await puppeteer.launch({
    executablePath: process.env.GPUPACK_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  });
  const pages = [
    ['clusters', '#/clusters', 'tr[data-cluster="default"]'],
    ['instances', '#/instances?cluster=default', 'section.instance:nth-of-type(50)'],
    ['tasks', '#/tasks', 'tr[data-task]'],
    ['explain', '#/explain?cluster=default&taskDefinition=toobig', '#explanation'],
  ];
  for (const [name, hash, selector] of pages) {
    const ms = [];
    for (let r = 0; r < ROUNDS; ++r) {
      const context = await browser.createBrowserContext();
      const page = await context.newPage();
      await page.setViewport({ width: 1400, height: 900 });
      const start = performance.now();
      await page.goto(`${e}/console/${hash}`);
      await page.waitForSelector(selector, { timeout: 60000 });
      ms.push(performance.now() - start);
      if (SCREENSHOTS && r === ROUNDS - 1) {
        fs.mkdirSync(SCREENSHOTS, { recursive: true });
        await page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`) });
      }
      await context.close();
    }
    ms.sort((a, b) => a - b);
    console.log(`${name.padEnd(10)} first view: median ${Math.round(ms[Math.floor(ms.length / 2)])} ms, ` +
                `min ${Math.round(ms[0])} ms, max ${Math.round(ms[ms.length - 1])} ms (${ROUNDS} rounds)`);
  }
  await browser.close();
  console.log(`load average after: ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
} finally {
  await server.stop();
  removeTempDir(dir);
}
