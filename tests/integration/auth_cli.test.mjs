// Authentication flags of the real binary: the loopback rule without --credentials, and a credentials file
// that is unsafe or malformed stops `gpupack server`, `gpupack agent` and `gpupack up` before they serve or
// register, with exit status 2 and a one-line message naming the file (and line) and what to do.
// None of these cases binds a port: every refusal comes before the listener opens.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { gpupackBin, removeTempDir, startServer, tempDir } from './harness.mjs';

// run starts gpupack with `args` and resolves {code, stdout, stderr} when it exits (killed after 20 s).
function run(args, env = {}) {
  return new Promise((resolve) => {
    const child = spawn(gpupackBin(), args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20000);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

let dir;
const GOOD = '[default]\naws_access_key_id = AKIDCLI0001\naws_secret_access_key = cli-secret\n';

function file(name, text, mode = 0o600) {
  const p = path.join(dir, name);
  fs.writeFileSync(p, text);
  fs.chmodSync(p, mode); // explicit: the umask does not decide
  return p;
}

before(() => {
  dir = tempDir('gpupack-authcli-');
});
after(() => {
  if (dir) removeTempDir(dir);
});

describe('gpupack server', () => {
  test('refuses a non-loopback address without credentials, and says what to do', async () => {
    const r = await run(['server', '--listen', '0.0.0.0:0', '--db', path.join(dir, 'a.db')]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^gpupack: refusing to listen on 0\.0\.0\.0 without authentication: .*Pass --credentials FILE.*--insecure-no-auth/);
    assert.equal(fs.existsSync(path.join(dir, 'a.db')), false, 'nothing may be created before the refusal');
  });

  test('refuses [::] too', async () => {
    const r = await run(['server', '--listen', '[::]:0', '--db', path.join(dir, 'b.db')]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /refusing to listen on :: without authentication/);
  });

  test('refuses a credentials file readable by group or others', async () => {
    const loose = file('loose', GOOD, 0o640);
    const r = await run(['server', '--credentials', loose, '--db', path.join(dir, 'c.db')]);
    assert.equal(r.code, 2);
    assert.equal(r.stderr.trim(),
                 `gpupack: credentials file ${loose} is readable or writable by group or others (mode 0640); run: chmod 600 ${loose}`);
  });

  test('refuses a malformed credentials file with its line', async () => {
    const bad = file('bad', '[default]\naws_access_key_id = AKIDCLI0001\nthis is not a key\n');
    const r = await run(['server', '--credentials', bad, '--db', path.join(dir, 'd.db')]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, new RegExp(`credentials file ${bad} line 3: expected 'key = value'`));
    // The offending line is never echoed: it could hold a secret.
    assert.doesNotMatch(r.stderr, /this is not a key/);
  });

  test('refuses a gpupack_host that no agent could register, or on a key that is not an agent key', async () => {
    const spaced = file('host-spaced', GOOD + 'gpupack_role = agent\ngpupack_host = two words\n');
    const r = await run(['server', '--credentials', spaced, '--db', path.join(dir, 'h1.db')]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, new RegExp(`credentials file ${spaced} line 5: gpupack_host must be the host's agent --name: 1 to 64 `));
    const admin = file('host-admin', GOOD + 'gpupack_host = node-a\n');
    const a = await run(['server', '--credentials', admin, '--db', path.join(dir, 'h2.db')]);
    assert.equal(a.code, 2);
    assert.match(a.stderr, /line 4: gpupack_host binds an agent key to its host, but profile \[default\] has gpupack_role admin/);
    assert.equal(fs.existsSync(path.join(dir, 'h2.db')), false, 'nothing may be created before the refusal');
  });

  test('refuses a missing credentials file and --credentials with --insecure-no-auth', async () => {
    const missing = await run(['server', '--credentials', path.join(dir, 'nope'), '--db', path.join(dir, 'e.db')]);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /cannot open credentials file .*nope: No such file or directory/);
    const both = await run(['server', '--credentials', file('ok1', GOOD), '--insecure-no-auth', '--db', path.join(dir, 'f.db')]);
    assert.equal(both.code, 2);
    assert.match(both.stderr, /--credentials and --insecure-no-auth contradict each other/);
  });

  test('starts with a safe, well-formed credentials file (loopback)', async () => {
    const server = await startServer({ db: path.join(dir, 'g.db'), extraArgs: ['--credentials', file('ok2', GOOD)] });
    const r = await fetch(server.endpoint + '/', { method: 'POST', signal: AbortSignal.timeout(10000) });
    assert.equal(r.status, 403); // unsigned
    await server.stop();
  });
});

describe('gpupack agent and gpupack up', () => {
  test('the agent refuses an unsafe credentials file before registering', async () => {
    const loose = file('agent-loose', GOOD, 0o644);
    const r = await run(['agent', '--server', 'http://127.0.0.1:9', '--gpus', 'fake:1x1024', '--credentials', loose,
                         '--state-dir', path.join(dir, 'agent1')]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /mode 0644\); run: chmod 600/);
  });

  test('the agent reads AWS_SHARED_CREDENTIALS_FILE and AWS_PROFILE like the AWS CLI', async () => {
    const r = await run(['agent', '--server', 'http://127.0.0.1:9', '--gpus', 'fake:1x1024',
                         '--state-dir', path.join(dir, 'agent2')],
                        { AWS_SHARED_CREDENTIALS_FILE: file('agent-env', GOOD), AWS_PROFILE: 'gpu-node' });
    assert.equal(r.code, 2);
    assert.match(r.stderr, /has no profile \[gpu-node\] \(it has \[default\]\): choose one with --profile NAME or AWS_PROFILE/);
  });

  test('up refuses an unsafe credentials file before starting anything', async () => {
    const loose = file('up-loose', GOOD, 0o604);
    const r = await run(['up', '--listen', '127.0.0.1:0', '--credentials', loose, '--dir', path.join(dir, 'up')]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /mode 0604\); run: chmod 600/);
  });
});

// `gpupack keys issue-agent`: an agent key for one host, added to the server's credentials file with that host's
// name (gpupack_host); the server then lets the key register that host only, from its first use on
// (docs/security.md "Keys bound to a host").
describe('gpupack keys issue-agent', () => {
  let server;
  after(async () => {
    await server?.stop();
  });

  test('keys issue-agent adds a key bound to a host, and the server lets that key register that host only', { timeout: 60000 }, async () => {
    const creds = file('keys-server', GOOD);  // an admin key already there
    const r = await run(['keys', 'issue-agent', '--host', 'node-a', '--credentials', creds]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^# gpupack agent key for host node-a .*\n\[default\]\naws_access_key_id = AKGP[A-Z2-7]{16}\naws_secret_access_key = [A-Za-z0-9+/]{40}\n$/);
    assert.match(r.stderr, /Restart the server to use it/);
    const text = fs.readFileSync(creds, 'utf8');
    assert.ok(text.startsWith(GOOD), 'the keys already there are kept');
    assert.match(text, /\n# agent key for host node-a \(gpupack keys issue-agent\)\n\[agent-node-a\]\naws_access_key_id = AKGP\w+\naws_secret_access_key = \S+\ngpupack_role = agent\ngpupack_host = node-a\n$/);
    assert.equal(fs.statSync(creds).mode & 0o777, 0o600);

    const again = await run(['keys', 'issue-agent', '--host', 'node-a', '--credentials', creds]);
    assert.equal(again.code, 2);
    assert.match(again.stderr, /already has a profile \[agent-node-a\]/);
    const bad = await run(['keys', 'issue-agent', '--host', 'two words', '--credentials', creds]);
    assert.equal(bad.code, 2);
    assert.equal(fs.readFileSync(creds, 'utf8'), text, 'a refused issue changes nothing');

    const out = path.join(dir, 'node-b.credentials');
    const b = await run(['keys', 'issue-agent', '--host', 'node-b', '--credentials', creds, '--out', out]);
    assert.equal(b.code, 0, b.stderr);
    assert.equal(b.stdout, '');
    assert.equal(fs.statSync(out).mode & 0o777, 0o600);
    assert.match(fs.readFileSync(creds, 'utf8'), /\n\[agent-node-b\]\n.*\n.*\ngpupack_role = agent\ngpupack_host = node-b\n$/);
    const nodeA = path.join(dir, 'node-a.credentials');
    fs.writeFileSync(nodeA, r.stdout, { mode: 0o600 });

    server = await startServer({ db: path.join(dir, 'keys.db'), extraArgs: ['--credentials', creds] });
    const agentArgs = (name, key) => ['agent', '--server', server.endpoint, '--gpus', 'fake:1x1024', '--name', name,
      '--state-dir', path.join(dir, `keys-${name}`), '--mps-pipe-dir', path.join(dir, `keys-mps-${name}`),
      '--credentials', key, '--log-level', 'info'];
    // node-a's key on node-a: registered (then stopped; its instance stays).
    const child = spawn(gpupackBin(), agentArgs('node-a', nodeA), { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';  // the agent's log (stdout) and its errors together
    child.stdout.on('data', (d) => (stderr += d));
    child.stderr.on('data', (d) => (stderr += d));
    const exited = new Promise((resolve) => child.on('exit', resolve));
    for (let i = 0; i < 200 && !/registered arn:/.test(stderr) && child.exitCode === null; ++i)
      await new Promise((res) => setTimeout(res, 100));
    child.kill('SIGTERM');
    await exited;
    assert.match(stderr, /registered arn:aws:ecs:us-east-1:000000000000:container-instance\/default\//);
    // node-a's key copied to another host: refused, and the agent says why.
    const refused = await run(agentArgs('node-c', nodeA));
    assert.equal(refused.code, 1, refused.stderr);
    assert.match(refused.stdout + refused.stderr, /refused to register this host \(node-c\)/);  // its log
    assert.match(refused.stderr, /^gpupack: agent: .*for host 'node-c': this agent key is bound to host 'node-a'/m);
    // node-b's key, never used yet, on another host: refused too (the key is bound before its first use).
    const first = await run(agentArgs('node-d', out));
    assert.equal(first.code, 1, first.stderr);
    assert.match(first.stderr, /^gpupack: agent: .*for host 'node-d': this agent key is bound to host 'node-b'/m);
  });
});
