// swarm_process: one bench/agent_swarm process in serve mode, as the node benchmarks start it (ha_bench's herd,
// services_scale, server_memory --with-agents). spawnSwarm(bin, args, {name, readyTimeoutMs, onLine}) returns
// {child, args, output, exited, ready}: `output` collects stdout and stderr (a stdout line for which onLine(line)
// answers true is handed to it instead), `exited` resolves with the exit code, and `ready` resolves once the
// swarm printed "ready:" (every agent registered, connected and welcomed), or rejects when it exits first or
// does not get there within readyTimeoutMs. The process is killed (SIGKILL) if this node process exits first.
import { spawn } from 'node:child_process';

export function spawnSwarm(bin, args, { name = 'swarm', readyTimeoutMs = 600000, onLine = null } = {}) {
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  process.on('exit', () => child.kill('SIGKILL'));  // never left behind, whatever ends the run
  const swarm = { child, args, output: '', exited: new Promise((resolve) => child.on('exit', resolve)) };
  let partial = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stdout.on('data', (d) => {
    if (!onLine) {
      swarm.output += d;
      return;
    }
    partial += d;
    for (let nl; (nl = partial.indexOf('\n')) >= 0;) {
      const line = partial.slice(0, nl);
      partial = partial.slice(nl + 1);
      if (!onLine(line)) swarm.output += line + '\n';
    }
  });
  child.stderr.on('data', (d) => (swarm.output += d));
  swarm.ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} not ready within ${readyTimeoutMs / 1000} s:\n${swarm.output}`)),
      readyTimeoutMs);
    child.stdout.on('data', () => {
      if (swarm.output.includes('ready:')) {
        clearTimeout(timer);
        resolve();
      }
    });
    swarm.exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${code}) before it was ready:\n${swarm.output}`));
    });
  });
  return swarm;
}
