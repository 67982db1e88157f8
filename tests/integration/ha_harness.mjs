// ha_harness: several real `gpupack server` processes on one private PostgreSQL, for the HA tests
// (tests/integration/ha_*.test.mjs) and benchmarks (bench/ha_*.mjs).
//
// startPostgres(): initdb in a temporary directory and `pg_ctl start` on a free loopback port, its unix socket in
// that directory, trust authentication; never the machine's own PostgreSQL service. Binaries: $GPUPACK_PG_BIN or
// the newest /usr/lib/postgresql/N/bin; postgresBinDir() is null when there are none (the tests then skip and
// say why). As root, initdb and postgres run as `nobody` (PostgreSQL refuses root).
// startReplica(): `gpupack server --db postgres://... --listen 127.0.0.1:PORT --advertise http://127.0.0.1:PORT`.
// startAgent(): `gpupack agent` given every replica, its log in a file; waitFor(): a bounded poll that fails with
// that log.
// TcpProxy: a loopback TCP proxy a test can cut (a partition: bytes stop flowing both ways, sockets stay open)
// and heal.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import { call, launch, removeTempDir, spawnTracked, tempDir } from './harness.mjs';

export function postgresBinDir() {
  if (process.env.GPUPACK_PG_BIN) return process.env.GPUPACK_PG_BIN;
  let best = null;
  let bestVersion = -1;
  let entries = [];
  try {
    entries = fs.readdirSync('/usr/lib/postgresql');
  } catch {
    return null;
  }
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    const bin = path.join('/usr/lib/postgresql', e, 'bin');
    if (fs.existsSync(path.join(bin, 'initdb')) && Number(e) > bestVersion) {
      bestVersion = Number(e);
      best = bin;
    }
  }
  return best;
}

export const NO_POSTGRES =
  'PostgreSQL server binaries are not installed (no /usr/lib/postgresql/N/bin, no $GPUPACK_PG_BIN): ' +
  'apt-get install postgresql (scripts/install-deps.sh does)';

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;

function runPg(bin, args, opts = {}) {
  const cmd = asRoot ? 'runuser' : bin;
  const argv = asRoot ? ['-u', 'nobody', '--', bin, ...args] : args;
  return execFileSync(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', ...opts });
}

// startPostgres: a private server. Returns {port, dir, uri(db), psql(sql, db), createDatabase(name), dump(db, file),
// restore(db, file), stop(), start(), close()}.
export async function startPostgres({ durable = false } = {}) {
  const binDir = postgresBinDir();
  if (!binDir) throw new Error(NO_POSTGRES);
  const dir = tempDir('gpupack-pg-');
  if (asRoot) execFileSync('chown', ['nobody', dir]);
  runPg(path.join(binDir, 'initdb'), ['-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--no-sync', '-D', path.join(dir, 'data')]);
  const pg = {
    dir,
    port: 0,
    uri(db = 'postgres') {
      return `postgresql://postgres@127.0.0.1:${pg.port}/${db}`;
    },
    async start() {
      if (!pg.port) pg.port = await freePort();
      const opts = `-p ${pg.port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=200` +
        (durable ? '' : ' -c fsync=off -c full_page_writes=off');
      runPg(path.join(binDir, 'pg_ctl'), ['start', '-w', '-t', '60', '-D', path.join(dir, 'data'), '-l', path.join(dir, 'log'), '-o', opts]);
    },
    stop() {
      try {
        runPg(path.join(binDir, 'pg_ctl'), ['stop', '-w', '-m', 'fast', '-D', path.join(dir, 'data')]);
      } catch {
        // already stopped
      }
    },
    psql(sql, db = 'postgres') {
      return runPg(path.join(binDir, 'psql'), ['-X', '-q', '-t', '-A', '-v', 'ON_ERROR_STOP=1', '-h', '127.0.0.1', '-p', String(pg.port), '-U', 'postgres', '-d', db, '-c', sql]);
    },
    // dump: pg_dump of database `db` into `file` (plain SQL; somewhere the server's user may write, e.g. under
    // pg.dir); restore: that file replayed into the (empty) database `db` with psql.
    dump(db, file) {
      runPg(path.join(binDir, 'pg_dump'), ['-h', '127.0.0.1', '-p', String(pg.port), '-U', 'postgres', '-f', file, db]);
    },
    restore(db, file) {
      runPg(path.join(binDir, 'psql'), ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-h', '127.0.0.1', '-p', String(pg.port), '-U', 'postgres', '-d', db, '-f', file]);
    },
    createDatabase(name) {
      pg.psql(`CREATE DATABASE ${name}`);
      return pg.uri(name);
    },
    close() {
      pg.stop();
      removeTempDir(dir);
    },
  };
  await pg.start();
  return pg;
}

// startReplica runs one `gpupack server` on `port` against the PostgreSQL database `db`. Resolves once its banner
// is out (it may still be a standby or starting: see waitLeader). The result is harness.mjs's launch() with the
// port: endpoint, port, child, stdout, stderr, stop() (SIGTERM), kill9() (SIGKILL), both waiting for the exit.
export async function startReplica({ db, port, ttlMs = 2000, extraArgs = [], logLevel = 'warn', startTimeoutMs = 20000 }) {
  const endpoint = `http://127.0.0.1:${port}`;
  const args = ['server', '--listen', `127.0.0.1:${port}`, '--advertise', endpoint, '--db', db,
    '--lease-ttl-ms', String(ttlMs), '--log-level', logLevel, ...extraArgs];
  const replica = await launch(args, {
    what: `gpupack on ${port}`,
    ready: (stdout) => (/ECS API\s+http/.test(stdout) ? endpoint : null),
    startTimeoutMs,
  });
  replica.port = port;
  return replica;
}

// startAgent runs `gpupack agent` given the replicas' endpoints `servers` in order (the process runtime, fake
// GPUs `gpus`, its state and MPS pipes under `dir`, logging at info to dir/agent.log, killed at exit as every
// launched process is). The result: child, exited (a promise of the exit), log() (the log so far; '' before
// there is one), stop() (SIGTERM, SIGKILL after 10 s, waits for the exit) and reapTasks(). A stopped agent
// leaves its tasks running, as it does in production (the next agent adopts them): a test that ends with tasks
// running calls reapTasks() after stop(), which kills every task the process runtime's state files under `dir`
// name (each workload's process group, then its monitor), so no `sleep 600` outlives the test.
export function startAgent({ servers, cluster, dir, name, gpus, extraArgs = [] }) {
  const logPath = path.join(dir, 'agent.log');
  const log = fs.openSync(logPath, 'a');
  const child = spawnTracked(['agent', '--server', servers.join(','), '--cluster', cluster, '--gpus', gpus,
    '--runtime', 'process', '--state-dir', path.join(dir, 'agent'), '--mps-pipe-dir', path.join(dir, 'mps'),
    '--name', name, '--cpu', '65536', '--memory', '262144', '--stop-grace-ms', '200', '--log-level', 'info',
    ...extraArgs],
  { stdio: ['ignore', log, log] });
  fs.closeSync(log);
  const exited = new Promise((resolve) => child.on('exit', resolve));
  return {
    child,
    exited,
    log: () => (fs.existsSync(logPath) ? fs.readFileSync(logPath, 'utf8') : ''),
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10000);
      const r = await exited;
      clearTimeout(timer);
      return r;
    },
    reapTasks() {
      const runtime = path.join(dir, 'agent', 'runtime');
      const files = fs.existsSync(runtime) ? fs.readdirSync(runtime).filter((f) => f.endsWith('.json')) : [];
      for (const f of files) {
        let record;
        try {
          record = JSON.parse(fs.readFileSync(path.join(runtime, f), 'utf8'));
        } catch {
          continue;  // being rewritten, or not a record
        }
        if (record.state !== 'running') continue;
        for (const [pid, group] of [[record.pid, true], [record.monitor_pid, false]]) {
          if (!(pid > 1)) continue;
          try {
            process.kill(group ? -pid : pid, 'SIGKILL');
          } catch {
            // gone already
          }
        }
      }
    },
  };
}

// waitFor polls f (every 100 ms, for at most `ms`) until it answers something truthy, which it resolves; an f that
// throws (a replica changing role) is asked again. It fails the test with `what` and log() (the agent's log).
export async function waitFor(what, f, ms, log) {
  for (const deadline = Date.now() + ms; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
    try {
      const v = await f();
      if (v) return v;
    } catch {
      // a replica changing role: ask again
    }
  }
  assert.fail(`${what} within ${ms} ms; agent log:\n${log()}`);
}

// readyz answers {status, json} of GET /readyz, or {status: 0} when nothing answers.
export async function readyz(endpoint) {
  try {
    const res = await fetch(endpoint + '/readyz', { signal: AbortSignal.timeout(2000) });
    const text = await res.text();
    return { status: res.status, json: JSON.parse(text) };
  } catch {
    return { status: 0 };
  }
}

// waitLeader polls the replicas' /readyz until one says it is the ready leader (and, with `all`, every other one
// is a ready standby naming it); resolves that replica. Bounded by timeoutMs.
export async function waitLeader(replicas, { timeoutMs = 20000, all = false, not } = {}) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const answers = await Promise.all(replicas.map((r) => readyz(r.endpoint)));
    const i = answers.findIndex((a) => a.status === 200 && a.json.role === 'leader');
    if (i >= 0 && replicas[i] !== not) {
      const leader = replicas[i];
      const others = answers.filter((_, j) => j !== i);
      if (!all || others.every((a) => a.status === 200 && a.json.role === 'standby' && a.json.leader === leader.endpoint))
        return { leader, epoch: answers[i].json.epoch };
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no ready leader within ${timeoutMs} ms`);
}

// callAny sends an operation to the replicas in turn, starting at `start`, until one answers something other
// than a connection failure or a 5xx (bounded by timeoutMs); the same body each time, so a RunTask with a
// clientToken is retried as ECS clients retry it. Resolves the last answer.
export async function callAny(replicas, op, body, { start = 0, timeoutMs = 30000 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last = { status: 0, text: 'no attempt' };
  for (let attempt = 0; Date.now() < deadline; ++attempt) {
    const r = replicas[(start + attempt) % replicas.length];
    try {
      last = await call(r.endpoint, op, body, { timeoutMs: 10000 });
      if (last.status < 500) return last;
    } catch (e) {
      last = { status: 0, text: String(e) };
    }
    await new Promise((res) => setTimeout(res, 50));
  }
  return last;
}

// TcpProxy: 127.0.0.1:port -> 127.0.0.1:target. cut(): every byte stops flowing (both ways, sockets stay open, as
// a network partition looks to both ends) and new connections hang; heal(): connections made from then on flow
// again (those of before the cut are closed).
export class TcpProxy {
  constructor(target) {
    this.target = target;
    this.cutNow = false;
    this.pairs = new Set();
    this.server = net.createServer((client) => this.accept(client));
  }
  async listen() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = this.server.address().port;
    return this.port;
  }
  accept(client) {
    client.on('error', () => {});
    if (this.cutNow) {
      this.pairs.add({ client, upstream: null });
      return;
    }
    const upstream = net.connect(this.target, '127.0.0.1');
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
    const pair = { client, upstream };
    this.pairs.add(pair);
    client.on('data', (d) => {
      if (!this.cutNow) upstream.write(d);
    });
    upstream.on('data', (d) => {
      if (!this.cutNow) client.write(d);
    });
    client.on('close', () => {
      upstream.destroy();
      this.pairs.delete(pair);
    });
    upstream.on('close', () => {
      client.destroy();
      this.pairs.delete(pair);
    });
  }
  cut() {
    this.cutNow = true;
  }
  heal() {
    for (const p of this.pairs) {
      p.client.destroy();
      p.upstream?.destroy();
    }
    this.pairs.clear();
    this.cutNow = false;
  }
  close() {
    this.heal();
    this.server.close();
  }
}
