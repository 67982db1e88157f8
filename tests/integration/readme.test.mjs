// readme: runs the README's "Try it" commands as written, so the test breaks when the README drifts.
//
// The section's first sh block starts the cluster (`scripts/up.sh`, which builds and then execs `gpupack up`);
// here the built binary runs `gpupack up` itself on a free loopback port with its data in a temporary directory.
// Every later sh block of the section runs, in order, in one bash, with the endpoint of the export line
// (http://127.0.0.1:8080) replaced by the real one. The curl flow must print its task RUNNING and then STOPPED,
// and the server must agree.
//
// The JavaScript example runs as the README tells a user to: in an empty directory, its install block (`npm i
// @aws-sdk/client-ecs`, then `node <file>.mjs`) with the js block saved under the name that block runs. The test
// has no network: `npm` on PATH is a stand-in that accepts exactly the README's install line and checks that
// the package it names is in the directory's node_modules, which links to tests/sdk/node_modules (the SDK pinned
// by tests/sdk/package-lock.json, `npm ci` there). Everything else (node, the ES module, the SDK reading
// AWS_ENDPOINT_URL_ECS) is real. The program must print the same GPU for its two tasks, as its comment says.
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

// codeBlocks: the ```LANG blocks of the README section that starts with `heading`.
function codeBlocks(markdown, heading, lang) {
  const start = markdown.indexOf(`\n${heading}\n`);
  const next = markdown.indexOf('\n## ', start + heading.length + 2);
  const section = markdown.slice(start, next === -1 ? undefined : next);
  return [...section.matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1]);
}

// isJsBlock: the sh block that installs the JavaScript SDK and runs the js block.
const isJsBlock = (b) => /^npm i /m.test(b);

// cleanEnv: this process's environment without any AWS_* variable (the README's export sets them).
const cleanEnv = () => Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('AWS_')));

test("the README's commands end with a task RUNNING and then STOPPED", async () => {
  const blocks = shBlocks(fs.readFileSync(path.join(repoRoot, 'README.md'), 'utf8'), '## Try it')
    .slice(1)
    .filter((b) => !isJsBlock(b));
  const script = blocks.join('\n');
  assert.ok(script.includes(README_ENDPOINT), `the README's export line names ${README_ENDPOINT}`);
  const run = spawnSync('bash', ['-c', script.replaceAll(README_ENDPOINT, up.endpoint)], {
    env: cleanEnv(),
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

test("the README's JavaScript example runs as written: npm i, an .mjs file, two tasks on one GPU", async () => {
  const readme = fs.readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
  const sh = shBlocks(readme, '## Try it');
  const exportBlock = sh.find((b) => b.startsWith('export AWS_ENDPOINT_URL_ECS='));
  const install = sh.find(isJsBlock);
  assert.ok(exportBlock && install, 'the README shows the export line and an `npm i` block');
  assert.match(install, /^npm i @aws-sdk\/client-ecs$/m, 'the install line names @aws-sdk/client-ecs');
  const file = /^node (\S+)$/m.exec(install)?.[1];
  assert.ok(file, `the install block runs the program with node: ${install}`);
  assert.match(file, /\.mjs$/, 'the program is an .mjs file (an ES module)');
  assert.ok(readme.includes(`save the program below as \`${file}\``), `the README names ${file} as the file to save`);
  const [program] = codeBlocks(readme, '## Try it', 'js');
  assert.ok(program, 'the README has a js block');

  const sdk = path.join(repoRoot, 'tests', 'sdk', 'node_modules');
  assert.ok(fs.existsSync(path.join(sdk, '@aws-sdk', 'client-ecs', 'package.json')),
    `${sdk} has no @aws-sdk/client-ecs: run \`npm ci\` in tests/sdk (scripts/test.sh does)`);
  const work = path.join(dir, 'js-example');
  const bin = path.join(dir, 'js-bin');
  fs.mkdirSync(work, { recursive: true });
  fs.mkdirSync(bin, { recursive: true });
  fs.symlinkSync(sdk, path.join(work, 'node_modules'));
  fs.writeFileSync(path.join(work, file), program);
  // The stand-in for npm: exactly the README's install line, and the package present where node resolves it.
  fs.writeFileSync(path.join(bin, 'npm'), [
    '#!/bin/sh',
    '[ "$*" = "i @aws-sdk/client-ecs" ] || { echo "npm stand-in: unexpected arguments: $*" >&2; exit 1; }',
    'test -f node_modules/@aws-sdk/client-ecs/package.json || { echo "npm stand-in: no SDK" >&2; exit 1; }',
    '',
  ].join('\n'), { mode: 0o755 });
  const env = cleanEnv();
  env.PATH = `${bin}:${path.dirname(process.execPath)}:${env.PATH ?? '/usr/bin:/bin'}`;
  env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
  const script = [exportBlock, install].join('\n').replaceAll(README_ENDPOINT, up.endpoint);
  const run = spawnSync('bash', ['-e', '-c', script], { cwd: work, env, encoding: 'utf8', timeout: 60000 });
  const said = `status ${run.status} signal ${run.signal}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`;
  assert.equal(run.status, 0, said);
  const gpus = run.stdout.match(/GPU-[0-9A-Za-z-]+/g) ?? [];
  assert.equal(gpus.length, 2, `two tasks, one GPU id each: ${said}`);
  assert.equal(gpus[0], gpus[1], `both tasks share one GPU: ${said}`);
  const listed = await ok(up.endpoint, 'ListTasks', { cluster: 'default', family: 'infer' });
  assert.equal(listed.taskArns.length, 2, 'the server holds the two tasks the program started');
  for (const task of listed.taskArns) await ok(up.endpoint, 'StopTask', { cluster: 'default', task });
});
