// readme: runs the README's "Try it" commands as written, so the test breaks when the README drifts.
//
// The section's first sh block starts the cluster (`scripts/up.sh`, which builds and then execs `gpupack up`);
// here the built binary runs `gpupack up` itself on a free loopback port with its data in a temporary directory.
// Every later sh block of the section runs, in order, in one bash, with the endpoint of the export line
// (http://127.0.0.1:8080) replaced by the real one. The curl flow must print its task RUNNING and then STOPPED,
// and the server must agree.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { ok, removeTempDir, startUp, tempDir } from './harness.mjs';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const README_ENDPOINT = 'http://127.0.0.1:8080';

// shBlocks: the ```sh blocks of the README section that starts with `heading`.
export function shBlocks(markdown, heading) {
  const start = markdown.indexOf(`\n${heading}\n`);
  assert.notEqual(start, -1, `README.md has no section "${heading}"`);
  const next = markdown.indexOf('\n## ', start + heading.length + 2);
  const section = markdown.slice(start, next === -1 ? undefined : next);
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]);
}

let dir;
let up;

before(async () => {
  dir = tempDir('gpupack-readme-');
  up = await startUp(path.join(dir, 'up'));
});

after(async () => {
  await up?.stop();
  removeTempDir(dir);
});

test('the README starts the cluster with scripts/up.sh, which runs gpupack up', () => {
  const blocks = shBlocks(fs.readFileSync(path.join(repoRoot, 'README.md'), 'utf8'), '## Try it');
  assert.ok(blocks.length >= 3, `expected the start, the export and the curl blocks, got ${blocks.length}`);
  assert.equal(blocks[0].trim(), 'scripts/up.sh');
  const upScript = fs.readFileSync(path.join(repoRoot, 'scripts', 'up.sh'), 'utf8');
  assert.match(upScript, /exec "\$build\/gpupack" up "\$@"/);
});

test("the README's commands end with a task RUNNING and then STOPPED", async () => {
  const blocks = shBlocks(fs.readFileSync(path.join(repoRoot, 'README.md'), 'utf8'), '## Try it').slice(1);
  const script = blocks.join('\n');
  assert.ok(script.includes(README_ENDPOINT), `the README's export line names ${README_ENDPOINT}`);
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('AWS_')));
  const run = spawnSync('bash', ['-c', script.replaceAll(README_ENDPOINT, up.endpoint)], {
    env,
    encoding: 'utf8',
    timeout: 60000,
  });
  const said = `status ${run.status} signal ${run.signal}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`;
  assert.equal(run.status, 0, said);
  const running = /^(arn:aws:ecs:\S+:task\/default\/\S+) RUNNING$/m.exec(run.stdout);
  assert.ok(running, `no "<task> RUNNING" line: ${said}`);
  const task = running[1];
  const stopped = run.stdout.indexOf(`${task} STOPPED`);
  assert.ok(stopped > running.index, `no "${task} STOPPED" line after RUNNING: ${said}`);
  const described = await ok(up.endpoint, 'DescribeTasks', { cluster: 'default', tasks: [task] });
  assert.equal(described.tasks[0].lastStatus, 'STOPPED');
  assert.equal(described.tasks[0].stopCode, 'UserInitiated');
});
