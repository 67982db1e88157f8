// SigV4 with the real AWS SDK for JavaScript v3 (@aws-sdk/client-ecs, its own signer): a server started with
// --credentials serves a client that signs with the right key, and refuses the wrong secret, an unknown key,
// another region, a skewed clock and an agent-only key with the ECS error names and HTTP statuses the SDK
// expects (docs/api.md "Authentication"). `gpupack up --credentials` is checked end to end too: its agent
// must sign its registration and its channel upgrade for the instance to come up connected.
//
// Run: GPUPACK_BIN=build/gpupack node --test tests/sdk/sigv4_sdk.test.mjs   (ctest runs it as sdk_sigv4)
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import {
  AccessDeniedException,
  CreateClusterCommand,
  DescribeContainerInstancesCommand,
  ECSClient,
  ECSServiceException,
  ListClustersCommand,
  ListContainerInstancesCommand,
} from '@aws-sdk/client-ecs';

import { call, gpupackBin, removeTempDir, startServer, tempDir } from '../integration/harness.mjs';

const ADMIN = { accessKeyId: 'AKIDSDKADMIN00000001', secretAccessKey: 'sdk/admin+Secret0123456789' };
const AGENT = { accessKeyId: 'AKIDSDKAGENT00000002', secretAccessKey: 'sdk-agent-secret-0123456789' };

// writeCredentials writes the AWS shared-credentials file the server is started with (mode 0600).
function writeCredentials(dir) {
  const file = path.join(dir, 'credentials');
  fs.writeFileSync(
    file,
    [
      '# keys allowed into this gpupack server',
      '[default]',
      `aws_access_key_id = ${ADMIN.accessKeyId}`,
      `aws_secret_access_key = ${ADMIN.secretAccessKey}`,
      '',
      '[node]',
      `aws_access_key_id = ${AGENT.accessKeyId}`,
      `aws_secret_access_key = ${AGENT.secretAccessKey}`,
      'gpupack_role = agent',
      '',
    ].join('\n'),
    { mode: 0o600 },
  );
  return file;
}

function client(endpoint, credentials, extra = {}) {
  return new ECSClient({ endpoint, region: 'us-east-1', credentials, maxAttempts: 1, ...extra });
}

// refusal sends `command` and asserts the SDK throws `name` with `status` and a message matching `pattern`.
async function refusal(ecs, command, name, status, pattern) {
  await assert.rejects(ecs.send(command), (err) => {
    assert.ok(err instanceof ECSServiceException, `not an ECSServiceException: ${err}`);
    assert.equal(err.name, name, err.message);
    assert.equal(err.$metadata.httpStatusCode, status);
    assert.equal(err.$fault, 'client');
    assert.match(err.message, pattern);
    return true;
  });
}

let dir;
let server;
let credentialsFile;
const clients = [];

before(async () => {
  dir = tempDir('gpupack-sigv4-');
  credentialsFile = writeCredentials(dir);
  server = await startServer({ db: path.join(dir, 'sigv4.db'), extraArgs: ['--credentials', credentialsFile] });
});

after(async () => {
  for (const c of clients) c.destroy();
  await server?.stop();
  if (dir) removeTempDir(dir);
});

function track(c) {
  clients.push(c);
  return c;
}

describe('an SDK client against gpupack server --credentials', () => {
  test('the right key and secret are served', async () => {
    const ecs = track(client(server.endpoint, ADMIN));
    const created = await ecs.send(new CreateClusterCommand({ clusterName: 'signed' }));
    assert.equal(created.cluster.status, 'ACTIVE');
    const listed = await ecs.send(new ListClustersCommand({}));
    assert.deepEqual(listed.clusterArns, ['arn:aws:ecs:us-east-1:000000000000:cluster/signed']);
  });

  test('a wrong secret gets InvalidSignatureException (400)', async () => {
    const ecs = track(client(server.endpoint, { ...ADMIN, secretAccessKey: 'not-the-secret' }));
    await refusal(ecs, new ListClustersCommand({}), 'InvalidSignatureException', 400,
                  /signature we calculated does not match the signature you provided/);
  });

  test('an unknown access key gets UnrecognizedClientException (400)', async () => {
    const ecs = track(client(server.endpoint, { accessKeyId: 'AKIDNOBODY', secretAccessKey: 'x' }));
    await refusal(ecs, new ListClustersCommand({}), 'UnrecognizedClientException', 400,
                  /security token included in the request is invalid/);
  });

  test('a session token is refused: this server issues none', async () => {
    const ecs = track(client(server.endpoint, { ...ADMIN, sessionToken: 'FwoGZXIvYXdzE' }));
    await refusal(ecs, new ListClustersCommand({}), 'UnrecognizedClientException', 400, /issues no session tokens/);
  });

  test('a signature scoped to another region is refused and names the server region', async () => {
    const ecs = track(new ECSClient({ endpoint: server.endpoint, region: 'eu-west-1', credentials: ADMIN, maxAttempts: 1 }));
    await refusal(ecs, new ListClustersCommand({}), 'InvalidSignatureException', 400,
                  /Credential should be scoped to a valid region, not 'eu-west-1'\. This server's region is 'us-east-1'/);
  });

  test('a clock 6 minutes behind is outside the 5-minute window', async () => {
    // systemClockOffset shifts the SDK's signing clock; with one attempt it does not correct itself.
    const ecs = track(client(server.endpoint, ADMIN, { systemClockOffset: -6 * 60 * 1000 }));
    await refusal(ecs, new ListClustersCommand({}), 'InvalidSignatureException', 400,
                  /^Signature expired: \d{8}T\d{6}Z is now earlier than \d{8}T\d{6}Z \(\d{8}T\d{6}Z - 5 min\.\)$/);
  });

  test('with a retry the SDK corrects its clock from our Date header, as it does against ECS', async () => {
    // The SDK treats InvalidSignatureException as a clock-skew error, takes the offset from the response's Date
    // header and signs the retry with it: the skewed client gets through on its second attempt.
    const ecs = track(client(server.endpoint, ADMIN, { systemClockOffset: -6 * 60 * 1000, maxAttempts: 2 }));
    const out = await ecs.send(new ListClustersCommand({}));
    assert.equal(out.$metadata.attempts, 2);
    assert.ok(Math.abs(ecs.config.systemClockOffset) < 60 * 1000, `offset now ${ecs.config.systemClockOffset} ms`);
  });

  test('an agent key may create a cluster but not list them', async () => {
    const ecs = track(client(server.endpoint, AGENT));
    await ecs.send(new CreateClusterCommand({ clusterName: 'from-agent' }));
    await assert.rejects(ecs.send(new ListClustersCommand({})), (err) => {
      assert.ok(err instanceof AccessDeniedException, `${err}`);
      assert.equal(err.$metadata.httpStatusCode, 400);
      assert.match(err.message, /gpupack_role agent\) is not authorized to perform: ecs:ListClusters/);
      return true;
    });
  });

  test('unsigned: 403 MissingAuthenticationTokenException; /healthz and /metrics stay open', async () => {
    const r = await call(server.endpoint, 'ListClusters', {});
    assert.equal(r.status, 403);
    assert.equal(r.json.__type, 'MissingAuthenticationTokenException');
    assert.equal(r.headers.get('x-amzn-errortype'), 'MissingAuthenticationTokenException');
    const health = await fetch(server.endpoint + '/healthz', { signal: AbortSignal.timeout(10000) });
    assert.equal(health.status, 200);
    const metrics = await (await fetch(server.endpoint + '/metrics', { signal: AbortSignal.timeout(10000) })).text();
    assert.match(metrics, /gpupack_auth_refusals_total\{type="InvalidSignatureException"\} [1-9]/);
    assert.match(metrics, /gpupack_auth_refusals_total\{type="UnrecognizedClientException"\} [1-9]/);
  });
});

// ---- gpupack up --credentials: the local agent signs -------------------------------------------------------

// startUp runs `gpupack up` on a free loopback port and resolves with its endpoint once the banner is out.
async function startUp(args) {
  const child = spawn(gpupackBin(), ['up', '--listen', '127.0.0.1:0', '--log-level', 'warn', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => {
    stderr += d;
  });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const banner = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`gpupack up printed no banner within 20 s\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    }, 20000);
    child.stdout.on('data', (d) => {
      stdout += d;
      if (/Ctrl-C stops everything/.test(stdout)) {
        clearTimeout(timer);
        resolve(stdout);
      }
    });
    exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`gpupack up exited with ${code}\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    });
  });
  return {
    banner,
    endpoint: /ECS API\s+(http:\/\/\S+)/.exec(banner)[1],
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10000);
      const r = await exited;
      clearTimeout(timer);
      return r;
    },
  };
}

describe('gpupack up --credentials', () => {
  test('its agent signs: the instance registers and its channel connects', async () => {
    const upDir = path.join(dir, 'up');
    const up = await startUp(['--credentials', credentialsFile, '--dir', upDir, '--agents', '1']);
    try {
      // The banner points clients at the file's admin profile, not at a dummy key.
      assert.match(up.banner, new RegExp(`AWS_SHARED_CREDENTIALS_FILE=\\S*credentials AWS_PROFILE=default`));
      const ecs = track(client(up.endpoint, ADMIN));
      let instance;
      for (let i = 0; i < 100 && !instance?.agentConnected; i++) {
        const list = await ecs.send(new ListContainerInstancesCommand({ cluster: 'default' }));
        if (list.containerInstanceArns.length === 1) {
          const d = await ecs.send(new DescribeContainerInstancesCommand({
            cluster: 'default', containerInstances: list.containerInstanceArns }));
          instance = d.containerInstances[0];
        }
        if (!instance?.agentConnected) await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(instance?.agentConnected, true, JSON.stringify(instance));
      // Unsigned callers still get nothing from it.
      const r = await call(up.endpoint, 'ListContainerInstances', { cluster: 'default' });
      assert.equal(r.status, 403);
    } finally {
      const { code } = await up.stop();
      assert.equal(code, 0);
    }
  });
});
