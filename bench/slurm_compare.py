#!/usr/bin/env python3
"""slurm_compare.py: a backlog of short GPU-sharing jobs, gpupack's capacity-provider queue against Slurm's backfill
scheduler, on the same machine, with the same fleet and the same jobs. A benchmark, never a test: it prints figures
and their setup.

The jobs: --jobs single-GPU pods drawn (seeded, with replacement) from an openb pod list (the Alibaba GPU-sharing
trace: the list bundled in planner/data/openb/ unless --trace or GPUPACK_OPENB_PODS names another). A pod's GPU
share (gpu_milli, thousandths of one GPU) becomes GPU memory in MiB of one --gpu-mib GPU; its lifetime
(deletion_time - creation_time, seconds) divided by --scale and clamped to --min-s..--max-s becomes the seconds the
job sleeps. Each job also asks for one CPU (Slurm) or one CPU unit (gpupack) of hosts that offer far more: GPU
memory on one GPU is the only resource in short supply.

The fleet: --nodes hosts of --gpus-per-node GPUs of --gpu-mib MiB each (default 8 x 8 x 32,768 MiB = 64 GPUs), all
fake and on this machine.

Slurm (Debian's slurm-wlm; installed with apt-get when missing, as root or through sudo): a private munged (its own
key and socket), slurmctld and one slurmd per node (NodeHostname=localhost, a port each; Debian's build runs several
slurmd on one host), all on 127.0.0.1 ports chosen free, with state, spool and logs in the run's directory.
GPU memory is the 22.05 `shard` GRES, one shard per MiB (Count = GPUs x --gpu-mib per node, File= one fake device
file per GPU), so a job asking --gres=shard:M gets M MiB of one GPU, as gpupack's MPS tasks do;
select/cons_tres, sched/backfill with the parameters of --slurm-sched-params. Each job is `sbatch --wrap "sleep S"`
with -t the seconds rounded up to minutes (Slurm's time limits are whole minutes), submitted while the partition is
DOWN; the clock starts when one `scontrol update` sets it UP, so all jobs are queued at once in submission order.
Start and end times come from jobcomp/filetxt (whole seconds: Slurm records no finer).

gpupack: `gpupack server` (SQLite in the run's directory, --max-provisioning-tasks raised to hold the backlog) and
--nodes `gpupack agent` processes (--gpus fake:NxMiB, --runtime process, --capacity-provider), one capacity
provider for the cluster. One task definition per GPU-memory size (`/bin/sleep`, an MPS share of that size); each job
is a RunTask with a capacityProviderStrategy and the seconds as a command override, --clients calls at a time in
job order. Tasks that cannot be placed wait in PROVISIONING. The clock starts before the first call; start and end
times are DescribeTasks' startedAt and stoppedAt (milliseconds).

Reported for each: makespan (clock start to the last job's end), the mean share of the fleet's GPU memory held by
running jobs over the makespan (the integral of memory x (end - start) over all jobs, divided by makespan x fleet
memory), the wait from submission to start (p50, p95, max; gpupack from each task's createdAt, Slurm from the clock
start), jobs that did not end well, and the bound no scheduler can beat: the jobs' memory-seconds over the fleet's
memory (perfect packing, zero overhead), that bound over the makespan (the share of the fleet's memory busy with
the jobs' own sleep, "own sleep"), and how long each job held its memory beyond its own sleep (launch and teardown,
"held+/job"). Figures go to stdout and to RESULTS.json in the run's directory, each job's times to JOBS.csv.

Everything started is stopped at the end (each daemon by its pid, then any process carrying this run's marker in its
environment), and the directory removed unless --keep. All traffic stays on 127.0.0.1. The Slurm daemons bind
their ports on every address (Slurm 22.05 has no bind-address setting); only munge-authenticated calls are served.

Usage: bench/slurm_compare.py [--gpupack BIN] [--trace CSV] [--jobs N] [--seed N] [--scale K] [--min-s S]
       [--max-s S] [--nodes N] [--gpus-per-node N] [--gpu-mib MiB] [--only slurm|gpupack] [--clients N]
       [--slurm-sched-params P] [--gpupack-server-flag FLAG]... [--timeout S] [--dir DIR] [--keep]
Figures and how to read them: docs/benchmarks.md, "A backlog against Slurm's backfill".
"""

import argparse
import csv
import http.client
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slurm_compare_slurm as slurm_side  # noqa: E402  (the Slurm half, beside this file)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ECS_TARGET = "AmazonEC2ContainerServiceV20141113"
PROVIDER = "bench-gpus"
CLUSTER = "bench"


def fail(msg, code=1):
    print(f"slurm_compare: {msg}", file=sys.stderr)
    sys.exit(code)


# ---- the workload ------------------------------------------------------------------------------------------------

def load_jobs(args):
    """Returns [(index, mib, seconds)] for --jobs pods drawn from the trace's single-GPU pods."""
    pods = []
    with open(args.trace, newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            try:
                if int(row["num_gpu"]) != 1:
                    continue
                milli = int(row["gpu_milli"])
                life = int(row["deletion_time"]) - int(row["creation_time"])
            except (KeyError, ValueError) as e:
                fail(f"{args.trace}:{line}: not an openb pod list row ({e})", 2)
            if 0 < milli <= 1000 and life >= 0:
                pods.append((milli, life))
    if not pods:
        fail(f"{args.trace}: no single-GPU pods (num_gpu 1, gpu_milli 1..1000)", 2)
    rng = random.Random(args.seed)
    jobs = []
    for i in range(args.jobs):
        milli, life = rng.choice(pods)
        mib = max(1, milli * args.gpu_mib // 1000)
        secs = min(args.max_s, max(args.min_s, round(life / args.scale)))
        jobs.append((i, mib, secs))
    return jobs


# ---- processes ---------------------------------------------------------------------------------------------------

class Processes:
    """Everything this run starts: tracked by pid, stopped in reverse order; a marker in each one's environment
    finds what they started in turn (task monitors, slurmstepd, the jobs)."""

    def __init__(self, marker):
        self.marker = marker
        self.procs = []  # (name, Popen)

    def env(self, extra=None):
        env = dict(os.environ, TZ="UTC", GPUPACK_BENCH_RUN=self.marker)
        env.update(extra or {})
        return env

    def start(self, name, argv, log_path, extra_env=None):
        log = open(log_path, "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env(extra_env),
                             start_new_session=True)
        log.close()
        self.procs.append((name, p))
        return p

    def adopt_pid(self, name, pid):
        self.procs.append((name, pid))

    def marked_pids(self):
        want = f"GPUPACK_BENCH_RUN={self.marker}".encode()
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == os.getpid():
                continue
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if want in f.read().split(b"\0"):
                        pids.append(int(d))
            except OSError:
                pass
        return pids

    def stop_all(self, grace_s=15):
        for name, p in reversed(self.procs):
            pid = p if isinstance(p, int) else p.pid
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.time() + grace_s
            while time.time() < deadline and alive(p):
                time.sleep(0.1)
            if alive(p):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not isinstance(p, int):
                p.wait()
        self.procs = []
        for _ in range(3):
            pids = self.marked_pids()
            if not pids:
                return 0
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.3)
        return len(self.marked_pids())


def alive(p):
    if isinstance(p, int):
        try:
            os.kill(p, 0)
        except ProcessLookupError:
            return False
        try:  # a zombie of ours counts as gone
            with open(f"/proc/{p}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    return p.poll() is None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- gpupack -----------------------------------------------------------------------------------------------------

class Ecs:
    """One keep-alive connection to the ECS API; call() returns the parsed answer or raises with ECS's error."""

    def __init__(self, host, port):
        self.conn = http.client.HTTPConnection(host, port, timeout=60)

    def call(self, op, body):
        data = json.dumps(body).encode()
        self.conn.request("POST", "/", data, {"X-Amz-Target": f"{ECS_TARGET}.{op}",
                                              "Content-Type": "application/x-amz-json-1.1"})
        r = self.conn.getresponse()
        text = r.read()
        if r.status != 200:
            raise RuntimeError(f"{op}: HTTP {r.status}: {text[:300].decode(errors='replace')}")
        return json.loads(text)


def run_gpupack(args, jobs, work, procs):
    gdir = os.path.join(work, "gpupack")
    os.makedirs(gdir)
    port = free_port()
    server = [args.gpupack, "server", "--listen", f"127.0.0.1:{port}", "--db", os.path.join(gdir, "gpupack.db"),
              "--max-provisioning-tasks", str(max(500, len(jobs))), "--provisioning-timeout", "86400",
              "--log-level", "warn"] + args.gpupack_server_flag
    sp = procs.start("gpupack server", server, os.path.join(gdir, "server.log"))
    url = f"http://127.0.0.1:{port}"
    ecs = None
    for _ in range(200):
        if sp.poll() is not None:
            fail(f"gpupack server exited; see {gdir}/server.log:\n" + tail(os.path.join(gdir, "server.log")))
        try:
            ecs = Ecs("127.0.0.1", port)
            ecs.call("ListClusters", {})
            break
        except (OSError, RuntimeError):
            ecs = None
            time.sleep(0.1)
    if ecs is None:
        fail("gpupack server did not answer within 20 s")
    ecs.call("CreateCluster", {"clusterName": CLUSTER})
    ecs.call("CreateCapacityProvider", {"name": PROVIDER})
    ecs.call("PutClusterCapacityProviders", {"cluster": CLUSTER, "capacityProviders": [PROVIDER],
                                             "defaultCapacityProviderStrategy": []})
    for n in range(args.nodes):
        adir = os.path.join(gdir, f"agent-{n}")
        os.makedirs(adir)
        procs.start(f"gpupack agent {n}", [
            args.gpupack, "agent", "--server", url, "--cluster", CLUSTER,
            "--gpus", f"fake:{args.gpus_per_node}x{args.gpu_mib}", "--runtime", "process",
            "--capacity-provider", PROVIDER, "--name", f"bench-{n}", "--state-dir", os.path.join(adir, "state"),
            "--mps-pipe-dir", os.path.join(adir, "mps"), "--cpu", "1048576", "--memory", "1048576",
            "--log-level", "warn"], os.path.join(adir, "agent.log"))
    deadline = time.time() + 60
    while True:
        arns = ecs.call("ListContainerInstances", {"cluster": CLUSTER, "maxResults": 100}).get(
            "containerInstanceArns", [])
        if arns:
            ci = ecs.call("DescribeContainerInstances", {"cluster": CLUSTER, "containerInstances": arns})
            if sum(1 for c in ci["containerInstances"] if c.get("agentConnected")) == args.nodes:
                break
        if time.time() > deadline:
            fail(f"not every gpupack agent connected within 60 s; see {gdir}/agent-*/agent.log")
        time.sleep(0.2)

    for mib in sorted({m for _, m, _ in jobs}):
        ecs.call("RegisterTaskDefinition", {"family": f"bench-{mib}", "containerDefinitions": [{
            "name": "main", "image": "bench/sleep", "entryPoint": ["/bin/sleep"], "command": ["1"], "cpu": 1,
            "memory": 6, "essential": True,
            "environment": [{"name": "GPUPACK_BENCH_RUN", "value": procs.marker}],
            "resourceRequirements": [{"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": mib}}}]}]})

    arn_of = [None] * len(jobs)
    errors = []
    next_job = [0]
    lock = threading.Lock()

    def client():
        c = Ecs("127.0.0.1", port)
        while True:
            with lock:
                i = next_job[0]
                next_job[0] += 1
            if i >= len(jobs):
                return
            _, mib, secs = jobs[i]
            try:
                out = c.call("RunTask", {
                    "cluster": CLUSTER, "taskDefinition": f"bench-{mib}", "count": 1,
                    "capacityProviderStrategy": [{"capacityProvider": PROVIDER, "weight": 1}],
                    "overrides": {"containerOverrides": [{"name": "main", "command": [str(secs)]}]}})
                if out.get("tasks"):
                    arn_of[i] = out["tasks"][0]["taskArn"]
                else:
                    errors.append(f"job {i}: {out.get('failures')}")
            except Exception as e:  # noqa: BLE001 (a benchmark counts every refusal)
                errors.append(f"job {i}: {e}")
                c = Ecs("127.0.0.1", port)

    meter = Meter().start()
    t0 = time.time()
    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t_submitted = time.time()
    print(f"gpupack: {len(jobs) - len(errors)} RunTask calls answered in {t_submitted - t0:.1f} s"
          f"{f', {len(errors)} refused (first: {errors[0]})' if errors else ''}", flush=True)
    while True:  # waiting (PROVISIONING), PENDING and RUNNING tasks are all desired RUNNING
        left = ecs.call("ListTasks", {"cluster": CLUSTER, "desiredStatus": "RUNNING", "maxResults": 1})
        if not left.get("taskArns"):
            break
        if time.time() - t0 > args.timeout:
            fail(f"gpupack: jobs still running after --timeout {args.timeout} s")
        time.sleep(0.5)
    t_done = time.time()
    busy, load = meter.stop()

    index = {a: i for i, a in enumerate(arn_of) if a}
    records = [None] * len(jobs)
    arns = list(index)
    for k in range(0, len(arns), 100):
        out = ecs.call("DescribeTasks", {"cluster": CLUSTER, "tasks": arns[k:k + 100]})
        for t in out.get("tasks", []):
            i = index[t["taskArn"]]
            ok = t.get("stopCode") == "EssentialContainerExited" and t["containers"][0].get("exitCode") == 0
            if "startedAt" in t and "stoppedAt" in t:
                records[i] = (t["createdAt"], t["startedAt"], t["stoppedAt"], ok)
    return {"t0": t0, "submit_s": t_submitted - t0, "observed_end": t_done, "records": records,
            "refused": len(errors), "machine_busy": busy,
            "load_avg": load}


def tail(path, n=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


class Meter:
    """The whole machine over one scheduler's run: the share of CPU time busy (/proc/stat) and the mean 1-minute
    load average, sampled every second on a thread of its own. start() then stop() -> (busy share, mean load)."""

    def start(self):
        self.ticks0 = self._ticks()
        self.loads = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.done.set()
        self.thread.join()
        b, a = self._ticks()
        busy = (b - self.ticks0[0]) / max(1, a - self.ticks0[1])
        return busy, sum(self.loads) / max(1, len(self.loads))

    def _sample(self):
        while not self.done.wait(1.0):
            with open("/proc/loadavg") as f:
                self.loads.append(float(f.read().split()[0]))

    @staticmethod
    def _ticks():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (sum(v[:3]) + sum(v[5:8]), sum(v[:8]))  # (user nice system irq softirq steal, all)


# ---- figures -----------------------------------------------------------------------------------------------------

def pctl(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(p / 100 * len(v)) - 1))]


def figures(name, jobs, run, fleet_mib):
    """run["records"][i] = (submitted, started, ended, ok) in epoch seconds, or None for a job that never ran."""
    t0 = run["t0"]
    ran = [(jobs[i], r) for i, r in enumerate(run["records"]) if r]
    if not ran:
        return {"scheduler": name, "jobs": len(jobs), "ran": 0}
    end = max(r[2] for _, r in ran)
    makespan = end - t0
    held = sum(j[1] * (r[2] - r[1]) for j, r in ran)
    waits = [r[1] - r[0] for _, r in ran]
    extra = [(r[2] - r[1]) - j[2] for j, r in ran]  # held beyond the job's own sleep: launch and teardown
    return {"scheduler": name, "jobs": len(jobs), "ran": len(ran),
            "not_ok": sum(1 for _, r in ran if not r[3]) + len(jobs) - len(ran),
            "makespan_s": makespan, "mean_gpu_memory_in_use": held / (makespan * fleet_mib),
            "wait_p50_s": pctl(waits, 50), "wait_p95_s": pctl(waits, 95), "wait_max_s": max(waits),
            "wait_mean_s": sum(waits) / len(waits), "extra_hold_mean_s": sum(extra) / len(extra),
            "submit_s": run["submit_s"],
            "machine_busy": run["machine_busy"], "load_avg": run["load_avg"], "refused": run.get("refused", 0)}


def write_jobs(path, name, jobs, run):
    """Appends one line per job to PATH (CSV): scheduler, job, MiB, seconds, submitted, started, ended, ok."""
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["scheduler", "job", "mib", "seconds", "submitted", "started", "ended", "ok"])
        for (i, mib, secs), r in zip(jobs, run["records"]):
            w.writerow([name, i, mib, secs] + ([f"{r[0]:.3f}", f"{r[1]:.3f}", f"{r[2]:.3f}", int(r[3])] if r
                                                  else ["", "", "", 0]))


def print_table(args, jobs, results, bound_s):
    fleet_gpus = args.nodes * args.gpus_per_node
    work_mib_s = sum(m * s for _, m, s in jobs)
    mean_mib = sum(m for _, m, _ in jobs) / len(jobs)
    secs = [s for _, _, s in jobs]
    print()
    print(f"setup: {len(jobs)} jobs from {os.path.basename(args.trace)} (seed {args.seed}; single-GPU pods; "
          f"GPU memory = gpu_milli x {args.gpu_mib} MiB / 1000, mean {mean_mib:,.0f} MiB; seconds = lifetime / "
          f"{args.scale} in {args.min_s}..{args.max_s}, mean {sum(secs) / len(secs):.1f} s, p50 {pctl(secs, 50)} s)")
    print(f"fleet: {args.nodes} hosts x {args.gpus_per_node} GPUs x {args.gpu_mib:,} MiB = {fleet_gpus} GPUs, "
          f"all on this machine ({os.cpu_count()} cores); backlog at the start = "
          f"{sum(m for _, m, _ in jobs) / (fleet_gpus * args.gpu_mib):.1f}x the fleet's GPU memory; "
          f"perfect-packing bound {bound_s:.0f} s ({work_mib_s / 1024 / 3600:,.1f} GiB-hours of GPU memory)")
    if args.only != "slurm":
        print(f"gpupack: {args.gpupack} ({build_type(args.gpupack)} build), {args.clients} RunTask clients")
    if args.only != "gpupack":
        print(f"slurm: SchedulerParameters={args.slurm_sched_params}")
    print()
    hdr = f"{'scheduler':<34} {'ran ok':>7} {'makespan':>9} {'vs bound':>8} {'GPU mem held':>12} {'own sleep':>9} " \
          f"{'wait p50':>9} {'wait p95':>9} {'wait max':>9} {'held+/job':>11} {'machine busy, load':>18}"
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        if not r.get("ran"):
            print(f"{r['scheduler']:<34} no job ran")
            continue
        print(f"{r['scheduler']:<34} {r['jobs'] - r['not_ok']:>7} "
              f"{r['makespan_s']:>8.1f}s {r['makespan_s'] / bound_s:>7.2f}x "
              f"{100 * r['mean_gpu_memory_in_use']:>11.1f}% {100 * bound_s / r['makespan_s']:>8.1f}% {r['wait_p50_s']:>8.1f}s {r['wait_p95_s']:>8.1f}s "
              f"{r['wait_max_s']:>8.1f}s {r['extra_hold_mean_s']:>10.2f}s {100 * r['machine_busy']:>6.0f}% "
              f"{r['load_avg']:>5.1f}")
    print()


def build_type(binary):
    """The CMAKE_BUILD_TYPE of the build folder holding BINARY, or "unknown"."""
    try:
        with open(os.path.join(os.path.dirname(binary), "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_BUILD_TYPE:"):
                    return line.split("=", 1)[1].strip() or "no CMAKE_BUILD_TYPE (unoptimised)"
    except OSError:
        pass
    return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpupack", default=os.path.join(ROOT, "build-bench", "gpupack"))
    ap.add_argument("--trace", default=os.environ.get("GPUPACK_OPENB_PODS", os.path.join(
                        ROOT, "planner", "data", "openb", "openb_pod_list_default.csv")),
                    help="an openb pod list CSV (default: $GPUPACK_OPENB_PODS, else the bundled default list)")
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scale", type=float, default=800, help="trace seconds per job second")
    ap.add_argument("--min-s", type=int, default=2)
    ap.add_argument("--max-s", type=int, default=20)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--gpu-mib", type=int, default=32768)
    ap.add_argument("--only", choices=["slurm", "gpupack"])
    ap.add_argument("--clients", type=int, default=4, help="gpupack: RunTask calls at a time")
    ap.add_argument("--slurm-sched-params", default=slurm_side.DEFAULT_SCHED_PARAMS)
    ap.add_argument("--gpupack-server-flag", action="append", default=[],
                    help="one more `gpupack server` argument (repeatable; e.g. --gpupack-server-flag=--log-level=info)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds either scheduler may take")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    if not os.path.isfile(args.trace):
        fail(f"--trace {args.trace}: no such file", 2)
    if not (1 <= args.jobs <= 100000 and 1 <= args.nodes <= 64 and 1 <= args.gpus_per_node <= 16
            and 1024 <= args.gpu_mib <= 1048576 and 1 <= args.min_s <= args.max_s <= 3600 and args.scale > 0
            and 1 <= args.clients <= 64):
        fail("out of range: --jobs 1..100000, --nodes 1..64, --gpus-per-node 1..16, --gpu-mib 1024..1048576, "
             "1 <= --min-s <= --max-s <= 3600, --scale > 0, --clients 1..64", 2)
    if args.only != "slurm":
        if not os.access(args.gpupack, os.X_OK):
            fail(f"no gpupack binary at {args.gpupack} (build it, or pass --gpupack)", 2)
        args.gpupack = os.path.abspath(args.gpupack)

    jobs = load_jobs(args)
    fleet_mib = args.nodes * args.gpus_per_node * args.gpu_mib
    bound_s = sum(m * s for _, m, s in jobs) / fleet_mib
    work = tempfile.mkdtemp(prefix="gpupack-slurm-compare.", dir=args.dir)
    os.chmod(work, 0o755)
    procs = Processes(f"slurmcmp-{os.path.basename(work)}-{os.getpid()}")
    results = []
    left = 0
    try:
        if args.only != "gpupack":
            run = slurm_side.run(args, jobs, work, procs, fail, Meter())
            left += procs.stop_all()
            results.append(figures("Slurm 22.05 sched/backfill", jobs, run, fleet_mib))
            write_jobs(os.path.join(work, "JOBS.csv"), "slurm", jobs, run)
        if args.only != "slurm":
            run = run_gpupack(args, jobs, work, procs)
            left += procs.stop_all()
            results.append(figures("gpupack capacity provider", jobs, run, fleet_mib))
            write_jobs(os.path.join(work, "JOBS.csv"), "gpupack", jobs, run)
    finally:
        left += procs.stop_all()
        if left:
            print(f"slurm_compare: {left} processes of this run were still alive after cleanup", file=sys.stderr)
    print_table(args, jobs, results, bound_s)
    out = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "argv": sys.argv[1:],
           "bound_s": bound_s, "results": results}
    with open(os.path.join(work, "RESULTS.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out))
    if args.keep:
        print(f"kept {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
