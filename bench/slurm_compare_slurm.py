"""slurm_compare_slurm.py: the Slurm half of bench/slurm_compare.py (not run on its own).

run(args, jobs, work, procs, fail, meter) installs Debian's slurm-wlm when it is missing, starts a private munged,
slurmctld and one slurmd per fake node under WORK/slurm, queues every job while the partition is DOWN, starts the
clock as one `scontrol update` sets it UP, waits until the queue is empty, and returns the jobs' start and end times
from jobcomp/filetxt. The daemons run in the foreground under procs (bench/slurm_compare.py stops them).
"""

import math
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

# Backfill tuned for a queue of short jobs, as Slurm's high-throughput advice has it: a pass every second
# (default 30 s) that goes on where it stopped, looks at 1,000 jobs (default 500), plans in 5-second steps (default
# 60) over a 2-minute window (every job's limit is 1 minute), and a main scheduler that looks 1,000 jobs deep.
DEFAULT_SCHED_PARAMS = ("bf_interval=1,bf_continue,bf_max_job_test=1000,bf_resolution=5,bf_window=2,"
                        "default_queue_depth=1000")

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
TOOLS = ["slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "munged"]


def ensure_installed(fail):
    if all(shutil.which(t) for t in TOOLS):
        return
    prefix = []
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            fail("Slurm is not installed and this is not root (no sudo): install " + " ".join(PACKAGES), 2)
        prefix = ["sudo", "-n"]
    print("slurm_compare: installing " + " ".join(PACKAGES) + " (apt-get)", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + PACKAGES
    for cmd in (["apt-get", "update", "-qq"], install):
        if subprocess.run(prefix + cmd, env=env).returncode != 0:
            fail(f"`{' '.join(prefix + cmd)}` failed: install {' '.join(PACKAGES)} by hand", 2)
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        fail("still missing after apt-get: " + " ".join(missing), 2)


def free_ports(n):
    import socket
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def write_config(args, jobs, sdir):
    nodes = args.nodes
    gpus = args.gpus_per_node
    ports = free_ports(1 + nodes)
    for d in ("etc", "state", "spool", "log", "dev"):
        os.makedirs(os.path.join(sdir, d))
    for g in range(gpus):
        open(os.path.join(sdir, "dev", f"gpu{g}"), "w").close()
    names = f"n[0-{nodes - 1}]" if nodes > 1 else "n0"
    shards = gpus * args.gpu_mib
    lines = [
        "ClusterName=gpupackbench",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}",
        "AuthType=auth/munge",
        f"AuthInfo=socket={sdir}/munge/socket",
        "CredType=cred/munge",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={sdir}/state",
        f"SlurmdSpoolDir={sdir}/spool/%n",
        f"SlurmctldPidFile={sdir}/slurmctld.pid",
        f"SlurmdPidFile={sdir}/spool/slurmd-%n.pid",
        f"SlurmctldLogFile={sdir}/log/slurmctld.log",
        f"SlurmdLogFile={sdir}/log/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        f"SchedulerParameters={args.slurm_sched_params}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "PriorityType=priority/basic",
        "GresTypes=gpu,shard",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={sdir}/jobcomp.txt",
        f"MaxJobCount={max(10000, 2 * len(jobs))}",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        "KillWait=5",
    ]
    for n in range(nodes):
        lines.append(f"NodeName=n{n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports[1 + n]} CPUs=512 "
                     f"RealMemory=1048576 Gres=gpu:{gpus},shard:{shards} State=UNKNOWN")
    lines.append(f"PartitionName=bench Nodes={names} Default=YES MaxTime=INFINITE State=DOWN")
    with open(os.path.join(sdir, "etc", "slurm.conf"), "w") as f:
        f.write("\n".join(lines) + "\n")
    dev = f"{sdir}/dev/gpu[0-{gpus - 1}]" if gpus > 1 else f"{sdir}/dev/gpu0"
    with open(os.path.join(sdir, "etc", "gres.conf"), "w") as f:
        f.write(f"AutoDetect=off\nNodeName={names} Name=gpu File={dev}\n"
                f"NodeName={names} Name=shard Count={shards} File={dev}\n")


def run(args, jobs, work, procs, fail, meter):
    """meter: a bench/slurm_compare.py Meter, started with the clock."""
    ensure_installed(fail)
    sdir = os.path.join(work, "slurm")
    write_config(args, jobs, sdir)
    conf = os.path.join(sdir, "etc", "slurm.conf")
    env = {"SLURM_CONF": conf}
    mdir = os.path.join(sdir, "munge")
    os.makedirs(mdir, mode=0o700)
    key = os.path.join(mdir, "munge.key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o600)
    procs.start("munged", ["munged", "-F", "-f", f"--socket={mdir}/socket", f"--key-file={key}",
                           f"--pid-file={mdir}/munged.pid", f"--log-file={mdir}/munged.log",
                           f"--seed-file={mdir}/munged.seed"], os.path.join(mdir, "munged.out"))
    for _ in range(100):
        if os.path.exists(f"{mdir}/socket"):
            break
        time.sleep(0.1)
    else:
        fail(f"munged made no socket within 10 s; see {mdir}/munged.log")
    procs.start("slurmctld", ["slurmctld", "-D", "-i", "-f", conf], os.path.join(sdir, "log", "slurmctld.out"), env)
    for n in range(args.nodes):
        procs.start(f"slurmd n{n}", ["slurmd", "-D", "-N", f"n{n}", "-f", conf],
                    os.path.join(sdir, "log", f"slurmd-n{n}.out"), env)

    def slurm(*argv, check=True):
        r = subprocess.run(list(argv), capture_output=True, text=True, env=procs.env(env), cwd=sdir)
        if check and r.returncode != 0:
            fail(f"`{' '.join(argv)[:200]}` failed: {r.stderr.strip()[:500]}; logs in {sdir}/log")
        return r.stdout

    deadline = time.time() + 60
    while True:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True,
                             env=procs.env(env)).stdout.split()
        states = dict(zip(out[0::2], out[1::2]))
        if len(states) == args.nodes and all(s == "idle" for s in states.values()):
            break
        if time.time() > deadline:
            fail(f"Slurm nodes not idle within 60 s ({states}); see {sdir}/log")
        time.sleep(0.5)
    print(f"slurm: {subprocess.run(['slurmd', '-V'], capture_output=True, text=True).stdout.strip()}, "
          f"{args.nodes} slurmd up; queueing {len(jobs)} jobs (partition DOWN)", flush=True)

    # sbatch is one process per job (about 50 ms of CPU here), so several run at once; each job's --priority
    # (root is Slurm's administrator) keeps the queue in job order whatever order they land in.
    def submit(job):
        i, mib, secs = job
        out = slurm("sbatch", "--parsable", "-p", "bench", "-J", f"j{i}", "-o", "/dev/null", "-e", "/dev/null",
                    "-c", "1", "-t", str(max(1, math.ceil(secs / 60))), f"--gres=shard:{mib}",
                    f"--priority={1000000 - i}", "--wrap", f"exec sleep {secs}")
        return out.strip().split(";")[0], i

    t_q = time.time()
    with ThreadPoolExecutor(max_workers=4) as pool:
        job_of = dict(pool.map(submit, jobs))
    print(f"slurm: {len(jobs)} jobs queued in {time.time() - t_q:.0f} s (before the clock starts)", flush=True)

    meter.start()
    t0 = time.time()
    slurm("scontrol", "update", "PartitionName=bench", "State=UP")
    while True:
        left = slurm("squeue", "-h", "-p", "bench", "-o", "%i").split()
        if not left:
            break
        if time.time() - t0 > args.timeout:
            slurm("scancel", "-p", "bench", check=False)
            fail(f"slurm: {len(left)} jobs still queued or running after --timeout {args.timeout} s")
        time.sleep(0.5)
    t_done = time.time()
    busy, load = meter.stop()

    records = [None] * len(jobs)
    with open(os.path.join(sdir, "jobcomp.txt")) as f:
        for line in f:
            kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
            i = job_of.get(kv.get("JobId"))
            if i is None or kv.get("StartTime", "Unknown") == "Unknown":
                continue
            start, end = epoch(kv["StartTime"]), epoch(kv["EndTime"])
            ok = kv.get("JobState") == "COMPLETED" and kv.get("ExitCode") == "0:0"
            # Slurm's times are whole seconds, cut down: a job started in the clock's first second reads a
            # little before t0.
            records[i] = (t0, max(start, t0), max(end, t0), ok)
    return {"t0": t0, "submit_s": t0 - t_q, "observed_end": t_done, "records": records, "machine_busy": busy,
            "load_avg": load}


def epoch(text):
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
