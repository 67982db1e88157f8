#!/usr/bin/env python3
"""bench/gpu/run.py: gpupack on a real NVIDIA GPU, end to end through its own API.

Starts `gpupack server` (loopback, a fresh SQLite file) and `gpupack agent --gpus nvml --runtime process` (the agent
starts and supervises its own MPS control daemon in a private pipe directory), runs bench/gpu/workload.py as
gpupack tasks through RunTask, and records what each task measured, what the API said about it, and when.

With --runtime docker every task is a container of a Docker engine (--docker-socket, or $GPUPACK_DOCKER_SOCKET;
bench/gpu/engine.sh starts one): the image is busybox imported here, the host's Python, PyTorch and CUDA come in as
read-only binds (the agent's --docker-gpu-bind), and the agent hands each container its GPU as --docker-gpu says
(default auto). The workload's lines go to a host directory bound into every container.
Results go to <out>/results.json (rewritten after every scenario, so a cut-short run keeps what it measured);
bench/gpu/report.py turns them into docs/gpu-validation.md. bench/gpu/run.sh is the entry point.

Never changes a GPU setting (compute mode, MIG, clocks), never resets the GPU; every MPS daemon it (or its agent)
started is told to quit at the end, and the end checks that none is left.
"""
import argparse
import calendar
import json
import os
import shutil
import signal
import http.client
import io
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "workload.py")
TARGET = "AmazonEC2ContainerServiceV20141113."


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over the Docker engine's unix socket."""

    def __init__(self, path, timeout=120):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def engine_request(sock, method, path, body=None, content_type="application/json"):
    c = UnixHTTPConnection(sock)
    headers = {"Content-Type": content_type} if body is not None else {}
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    return r.status, r.read()


def agent_hold_times(log_path, since):
    """When the agent logged holding and releasing a GPU after `since` (Unix time): the hold can be shorter than
    any API poll, so the agent's own log is the record. Log lines start with "[YYYY-mm-dd HH:MM:SS.mmm]" in UTC
    (the GPU machine's clock is UTC)."""
    held = released = None
    try:
        lines = open(log_path, errors="replace").read().splitlines()
    except OSError:
        return None, None
    for line in lines:
        if not line.startswith("[") or len(line) < 25:
            continue
        try:
            t = calendar.timegm(time.strptime(line[1:20], "%Y-%m-%d %H:%M:%S")) + float("0" + line[20:24])
        except ValueError:
            continue
        if t < since:
            continue
        if held is None and "hit a fatal error; stopping its tasks and holding it" in line:
            held = t
        elif held is not None and released is None and "is healthy again; releasing it" in line:
            released = t
    return held, released


class Run:
    def __init__(self, args):
        self.args = args
        self.work = os.path.abspath(args.work)
        self.url = f"http://127.0.0.1:{args.port}/"
        self.pipe = os.path.join(self.work, "mps")
        self.state = os.path.join(self.work, "agent")
        self.out = os.path.abspath(args.out)
        self.results = {"started": time.time(), "scenarios": {}, "setup": {}}
        self.server = None
        self.agent = None
        self.registered = set()
        self.docker = args.runtime == "docker"
        self.task_logs = os.path.join(self.work, "task-logs")  # docker: <tag>.log of each task, bound in
        self.tags = {}  # docker: task ARN -> the tag its workload writes its lines under
        self.image = "gpupack-bench/workload:1"
        # The process runtime runs tasks as an unprivileged user (the agent's --task-user, nobody for a root agent,
        # or a uid of --task-uids), which may not reach this checkout: the workload goes to the work folder.
        self.workload = WORKLOAD if self.docker else os.path.join(self.work, "workload.py")

    # ---- plumbing

    def log(self, msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def save(self):
        os.makedirs(self.out, exist_ok=True)
        with open(os.path.join(self.out, "results.json"), "w") as f:
            json.dump(self.results, f, indent=1, sort_keys=True)

    def ecs(self, op, body, check=True):
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), method="POST", headers={
            "X-Amz-Target": TARGET + op, "Content-Type": "application/x-amz-json-1.1"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            answer = json.loads(e.read() or b"{}")
            if check:
                raise RuntimeError(f"{op}: HTTP {e.code}: {answer}")
            return {"_error": answer, "_status": e.code}

    def start_server(self):
        db = os.path.join(self.work, "state.db")
        self.server = subprocess.Popen(
            [self.args.gpupack, "server", "--listen", f"127.0.0.1:{self.args.port}", "--db", db],
            stdout=open(os.path.join(self.work, "server.log"), "a"), stderr=subprocess.STDOUT)
        for _ in range(100):
            try:
                self.ecs("ListClusters", {})
                return
            except Exception:
                time.sleep(0.1)
        raise RuntimeError("the server did not answer within 10 s; see server.log")

    def start_agent(self, watchdog_ms):
        cmd = [self.args.gpupack, "agent", "--server", self.url.rstrip("/"), "--cluster", "gpu", "--gpus", "nvml",
               "--runtime", self.args.runtime, "--mps-pipe-dir", self.pipe, "--state-dir", self.state,
               "--name", "gpu-node", "--stop-grace-ms", "2000", "--watchdog-ms", str(watchdog_ms),
               "--mps-probe-ms", "1000", "--log-level", "info"]
        cmd += self.args.agent_arg
        if self.docker:
            cmd += ["--docker-socket", self.args.docker_socket, "--docker-gpu", self.args.docker_gpu]
            if self.args.driver_root:
                cmd += ["--driver-root", self.args.driver_root]
            for bind in self.docker_binds():
                cmd += ["--docker-gpu-bind", bind]
        self.agent = subprocess.Popen(cmd, stdout=open(os.path.join(self.work, "agent.log"), "a"),
                                      stderr=subprocess.STDOUT)
        for _ in range(200):
            ci = self.instance(check=False)
            if ci and ci.get("agentConnected") and ci.get("status") == "ACTIVE":
                return ci
            if self.agent.poll() is not None:
                raise RuntimeError("the agent exited; see agent.log")
            time.sleep(0.1)
        raise RuntimeError("the agent did not connect within 20 s; see agent.log")

    def stop_agent(self):
        if self.agent and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.agent.kill()
        self.agent = None

    def instance(self, check=True):
        arns = self.ecs("ListContainerInstances", {"cluster": "gpu"}, check=check).get("containerInstanceArns", [])
        if not arns:
            return None
        return self.ecs("DescribeContainerInstances", {"cluster": "gpu", "containerInstances": arns},
                        check=check)["containerInstances"][0]

    def register(self, family, mps_memory=None, compute=None, dedicated=False, command=None):
        if family in self.registered:
            return
        gpu = {"type": "GPU"}
        if dedicated:
            gpu["value"] = "1"
        else:
            mps = {"memory": mps_memory}
            if compute:
                mps["maxComputePercent"] = compute
            gpu["sharingStrategy"] = {"nvidiaMps": mps}
        c = {"name": "main", "image": "gpupack/workload", "cpu": 512, "memory": 4096, "essential": True,
             "entryPoint": [sys.executable, self.workload], "command": command or ["mem"], "resourceRequirements": [gpu]}
        if self.docker:
            # The container's memory limit is real here: room for PyTorch and the CUDA libraries it maps.
            c.update(image=self.image, memory=16384,
                     environment=[{"name": "GPUPACK_BENCH_LOG_DIR", "value": self.task_logs}])
        self.ecs("RegisterTaskDefinition", {"family": family, "containerDefinitions": [c]})
        self.registered.add(family)

    def run_task(self, family, command, check=True):
        override = {"name": "main", "command": command}
        tag = None
        if self.docker:
            tag = f"task-{len(self.tags) + 1}-{int(time.time() * 1000)}"
            override["environment"] = [{"name": "GPUPACK_BENCH_TAG", "value": tag}]
        body = {"cluster": "gpu", "taskDefinition": family, "overrides": {"containerOverrides": [override]}}
        r = self.ecs("RunTask", body)
        if tag and r.get("tasks"):
            self.tags[r["tasks"][0]["taskArn"]] = tag
        if r.get("failures") or not r.get("tasks"):
            if check:
                raise RuntimeError(f"RunTask {family}: {r.get('failures')}")
            return None, r.get("failures")
        return r["tasks"][0]["taskArn"], None

    def describe(self, arns):
        return self.ecs("DescribeTasks", {"cluster": "gpu", "tasks": arns})["tasks"]

    def wait(self, arns, status, timeout):
        deadline = time.time() + timeout
        while True:
            tasks = self.describe(arns)
            if all(t["lastStatus"] == status for t in tasks) or time.time() > deadline:
                return tasks
            time.sleep(0.2)

    def output(self, arn):
        """The JSON lines the task's workload printed (the process runtime's log of container `main`; docker: the
        file the workload wrote in the bound log directory)."""
        # The process runtime's log store: <state>/logs/<task id>/<container>/ holds the stream as files named
        # by their start offset (20 digits + ".log"), so name order is stream order; each record is
        # "<timestamp ms> <line>".
        folder = os.path.join(self.state, "logs", arn.rsplit("/", 1)[1], "main")
        try:
            paths = [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".log")]
        except OSError:
            paths = []
        if self.docker:
            paths = [os.path.join(self.task_logs, self.tags.get(arn, "none") + ".log")]
        lines = []
        for path in paths:
            try:
                with open(path) as f:
                    for line in f:
                        line = line.strip()
                        if not self.docker:  # the log store's record: "<timestamp ms> <line>"
                            line = line.partition(" ")[2]
                        if line.startswith("{"):
                            try:
                                lines.append(json.loads(line))
                            except ValueError:
                                pass
            except OSError:
                pass
        return lines

    def summary(self, arn):
        t = self.describe([arn])[0]
        c = t["containers"][0]
        out = self.output(arn)
        return {"taskArn": arn, "lastStatus": t["lastStatus"], "stopCode": t.get("stopCode"),
                "stoppedReason": t.get("stoppedReason"), "exitCode": c.get("exitCode"), "reason": c.get("reason"),
                "startedAt": t.get("startedAt"), "stoppedAt": t.get("stoppedAt"),
                "result": out[-1] if out else None, "lines": out}

    def run_and_collect(self, family, command, timeout):
        arn, _ = self.run_task(family, command)
        self.wait([arn], "STOPPED", timeout)
        return self.summary(arn)

    # ---- scenarios

    def memory(self):
        self.log("memory limits")
        cases = [(4096, 256), (4096, 32), (32768, 256)]
        arns = []
        for mem, step in cases:
            self.register(f"mem-{mem}", mps_memory=mem)
            arns.append((mem, step, self.run_task(f"mem-{mem}", ["mem", "--step-mib", str(step)])[0]))
        self.wait([a for _, _, a in arns], "STOPPED", 120)
        self.results["scenarios"]["memory"] = [
            {"declaredMiB": mem, "stepMiB": step, **self.summary(arn)} for mem, step, arn in arns]
        self.save()

    def used(self):
        """Each task's GPU memory in use, as the console shows it beside what the task declared: two MPS tasks
        hold known amounts; the console's figure (agent watchdog -> heartbeat -> server) is read until it
        appears, beside NVML's per-process list (nvidia-smi) and what the workload says it allocated."""
        self.log("GPU memory in use, as the console shows it")
        cases = [(8192, 3072), (16384, 10240)]
        arns = []
        for declared, hold in cases:
            fam = f"used-{declared}"
            self.register(fam, mps_memory=declared)
            arns.append((declared, hold, self.run_task(
                fam, ["hold", "--hold-mib", str(hold), "--seconds", "120", "--size", "1024"])[0]))
        self.wait([a for _, _, a in arns], "RUNNING", 60)
        rows, deadline, seen = {}, time.time() + 60, {}
        while time.time() < deadline and len(rows) < len(arns):
            time.sleep(1)
            with urllib.request.urlopen(self.url + "console/api/tasks?cluster=gpu&status=RUNNING", timeout=10) as r:
                answer = json.loads(r.read())
            allocated = {a: next((l.get("allocatedMiB") for l in self.output(a) if l.get("event") == "allocated"),
                                 None) for _, _, a in arns}
            for t in answer.get("tasks", []):
                if t["arn"] in allocated:
                    seen[t["arn"]] = {"console": t, "outputLines": len(self.output(t["arn"]))}
                if t["arn"] in allocated and allocated[t["arn"]] and "gpuMemoryUsedBytes" in t:
                    rows[t["arn"]] = {"consoleUsedBytes": t["gpuMemoryUsedBytes"],
                                      "consoleDeclaredMib": t["gpuMemoryDeclaredMib"],
                                      "readAgoMs": t.get("gpuMemoryReadAgoMs"),
                                      "workloadAllocatedMiB": allocated[t["arn"]]}
        self.results["scenarios"]["usedLastSeen"] = seen  # the last console entry of each task while RUNNING
        smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                              "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
        smi_mib = {}  # pid -> MiB in use, NVML's per-process list as nvidia-smi prints it
        for line in smi.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 3 and parts[0].isdigit() and parts[2].endswith(" MiB"):
                smi_mib[int(parts[0])] = int(parts[2][:-4])
        out = []
        for declared, hold, arn in arns:
            pid = next((l.get("pid") for l in self.output(arn) if l.get("pid")), None)
            out.append({"declaredMiB": declared, "holdMiB": hold, "taskArn": arn, "workloadPid": pid,
                        "nvidiaSmiMiB": smi_mib.get(pid), **rows.get(arn, {"console": None})})
        self.results["scenarios"]["used"] = {"tasks": out, "nvidiaSmiComputeApps": smi.splitlines()}
        for _, _, arn in arns:
            self.ecs("StopTask", {"cluster": "gpu", "task": arn, "reason": "used measured"})
        self.wait([a for _, _, a in arns], "STOPPED", 60)
        self.save()

    def compute(self):
        self.log("compute limits, one task at a time")
        rows = []
        self.register("dedicated", dedicated=True)
        rows.append({"case": "dedicated GPU (no MPS)", "percent": None,
                     **self.run_and_collect("dedicated", ["compute", "--seconds", str(self.args.seconds)], 120)})
        self.save()
        for pct in (None, 75, 50, 25):
            fam = f"mps-{pct or 'unset'}"
            self.register(fam, mps_memory=16384, compute=pct)
            rows.append({"case": f"MPS, maxComputePercent {pct or 'unset'}", "percent": pct,
                         **self.run_and_collect(fam, ["compute", "--seconds", str(self.args.seconds)], 120)})
            self.results["scenarios"]["compute"] = rows
            self.save()

    def neighbours(self):
        self.log("neighbours placed together")
        groups = [("2 x 50%", 2, 50), ("4 x 25%", 4, 25), ("2 x 75%", 2, 75), ("2 x unlimited", 2, None)]
        out = []
        for name, n, pct in groups:
            fam = f"mps-{pct or 'unset'}"
            self.register(fam, mps_memory=16384, compute=pct)
            start_at = time.time() + self.args.barrier
            arns = [self.run_task(fam, ["compute", "--seconds", str(self.args.seconds), "--start-at",
                                        f"{start_at:.3f}", "--label", f"{name}#{i}"])[0] for i in range(n)]
            self.wait(arns, "RUNNING", 60)
            ci = self.instance()
            tasks = self.wait(arns, "STOPPED", self.args.barrier + self.args.seconds + 90)
            out.append({"group": name, "count": n, "percent": pct,
                        "gpuDevicesWhileRunning": ci.get("gpuDevices"),
                        "runningTasksCountWhileRunning": ci.get("runningTasksCount"),
                        "tasks": [self.summary(t["taskArn"]) for t in tasks]})
            self.results["scenarios"]["neighbours"] = out
            self.save()

    def bypass_without_watchdog(self):
        """As on ECS: nothing checks; the bypassing task escapes its limits and starves a neighbour."""
        self.log("bypass with the watchdog off")
        self.register("mem-4096", mps_memory=4096)
        res = {}
        for how in ("delete", "raise"):
            arn = self.run_task("mem-4096", ["bypass", "--how", how, "--hold-mib", "0", "--seconds",
                                             str(self.args.seconds), "--linger", "120", "--label", f"bypass-{how}"])[0]
            # Once it holds what it could take, probe what a well-behaved neighbour still gets.
            deadline = time.time() + 90
            while time.time() < deadline and not any(l.get("event") == "allocated" for l in self.output(arn)):
                time.sleep(0.3)
            probe = self.run_and_collect("mem-4096", ["mem", "--step-mib", "256", "--label", "neighbour"], 90)
            while time.time() < deadline and not any("tflops" in l or l.get("ok") is False
                                                      for l in self.output(arn)):
                time.sleep(0.3)
            self.ecs("StopTask", {"cluster": "gpu", "task": arn, "reason": "bypass measured"})
            self.wait([arn], "STOPPED", 30)
            res[how] = {"bypass": self.summary(arn), "neighbour": probe}
            self.results["scenarios"]["bypassWithoutWatchdog"] = res
            self.save()

    def bypass_with_watchdog(self):
        self.log("bypass with the watchdog on")
        self.register("mem-4096", mps_memory=4096)
        res = {}
        for how in ("delete", "raise"):
            neighbour = self.run_task("mem-4096", ["hold", "--hold-mib", "2048", "--size", "4096",
                                                   "--seconds", "20", "--label", "neighbour"])[0]
            self.wait([neighbour], "RUNNING", 30)
            arn = self.run_task("mem-4096", ["bypass", "--how", how, "--hold-mib", "16384", "--size", "4096",
                                             "--seconds", "30", "--linger", "60", "--label", f"bypass-{how}"])[0]
            self.wait([arn], "STOPPED", 120)
            bypass = self.summary(arn)
            n = self.describe([neighbour])[0]
            neighbour_during = n["lastStatus"]
            self.wait([neighbour], "STOPPED", 90)
            res[how] = {"bypass": bypass, "neighbourStatusWhenBypassStopped": neighbour_during,
                        "neighbour": self.summary(neighbour)}
            self.results["scenarios"]["bypassWithWatchdog"] = res
            self.save()

    def fault(self):
        self.log("fatal GPU error under MPS")
        self.register("mem-4096", mps_memory=4096)
        neighbours = [self.run_task("mem-4096", ["hold", "--hold-mib", "1024", "--size", "4096", "--seconds", "60",
                                                 "--label", f"neighbour#{i}"])[0] for i in range(2)]
        self.wait(neighbours, "RUNNING", 30)
        time.sleep(8)  # the neighbours are computing
        crash = self.run_task("mem-4096", ["crash", "--delay", "6", "--label", "crash"])[0]
        # Watch the GPU: held after the fault, a RunTask refused meanwhile, then released.
        held_at = released_at = None
        held_view = None
        refused = []
        t0 = time.time()
        while time.time() - t0 < 90:
            ci = self.instance()
            held = any(g.get("heldAfterFault") for g in ci.get("gpuDevices", []))
            if held and held_at is None:
                held_at, held_view = time.time(), ci
                arn, failures = self.run_task("mem-4096", ["mem", "--label", "while-held"], check=False)
                refused.append(failures if failures else {"placed": arn})
            if held_at is not None and not held:
                released_at = time.time()
                break
            time.sleep(0.05)
        self.wait([crash] + neighbours, "STOPPED", 60)
        arn, failures = self.run_task("mem-4096", ["mem", "--step-mib", "1024", "--label", "after"], check=False)
        after = None
        if arn:
            self.wait([arn], "STOPPED", 90)
            after = self.summary(arn)
        crash_sum = self.summary(crash)
        crash_line = next((l for l in crash_sum["lines"] if l.get("event") == "launch"), {})
        agent_held, agent_released = agent_hold_times(os.path.join(self.work, "agent.log"), t0 - 1)
        self.results["scenarios"]["fault"] = {
            "crash": crash_sum, "neighbours": [self.summary(a) for a in neighbours],
            "faultAt": crash_line.get("t"), "heldSeenAt": held_at, "releasedSeenAt": released_at,
            "agentHeldAt": agent_held, "agentReleasedAt": agent_released,
            "instanceWhileHeld": held_view, "runTaskWhileHeld": refused, "afterFailures": failures, "after": after}
        self.save()

    def first_line(self, arn, event, timeout):
        """The Unix time of the task's first workload line with `event` (None if none came within timeout s)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for line in self.output(arn):
                if line.get("event") == event:
                    return line.get("t")
            time.sleep(0.05)
        return None

    def service_fault(self):
        """A service of shared-GPU replicas; a fatal fault on their GPU; the time until the service runs
        desiredCount replicas again, against one replica's own start time measured alone."""
        self.log("service replicas after a fatal GPU error")
        replicas = 3
        hold = ["hold", "--hold-mib", "512", "--size", "2048", "--seconds", "3600", "--label", "replica"]
        self.register("replica", mps_memory=2048, command=hold)
        self.register("mem-4096", mps_memory=4096)
        # One replica alone: RunTask -> RUNNING, and -> its CUDA work started ("allocated").
        alone = []
        for _ in range(3):
            t0 = time.time()
            arn = self.run_task("replica", hold)[0]
            running_at = None
            while running_at is None and time.time() - t0 < 60:
                if self.describe([arn])[0]["lastStatus"] == "RUNNING":
                    running_at = time.time()
                time.sleep(0.02)
            ready_at = self.first_line(arn, "allocated", 60)
            alone.append({"running": running_at - t0 if running_at else None,
                          "ready": ready_at - t0 if ready_at else None})
            self.ecs("StopTask", {"cluster": "gpu", "task": arn})
            self.wait([arn], "STOPPED", 60)
        self.ecs("CreateService", {"cluster": "gpu", "serviceName": "infer", "taskDefinition": "replica",
                                   "desiredCount": replicas})

        def svc():
            return self.ecs("DescribeServices", {"cluster": "gpu", "services": ["infer"]})["services"][0]

        t0 = time.time()
        while time.time() - t0 < 120:
            s = svc()
            if s["runningCount"] == replicas and len(s["deployments"]) == 1:
                break
            time.sleep(0.1)
        steady_after = time.time() - t0
        before = set(self.ecs("ListTasks", {"cluster": "gpu", "serviceName": "infer"})["taskArns"])
        for arn in before:
            self.first_line(arn, "allocated", 60)
        time.sleep(3)  # the replicas are computing
        crash = self.run_task("mem-4096", ["crash", "--delay", "3", "--label", "crash"])[0]
        down_at = back_at = None
        low = replicas
        t0 = time.time()
        while time.time() - t0 < 120:
            s = svc()
            now = time.time()
            low = min(low, s["runningCount"])
            if down_at is None and s["runningCount"] < replicas:
                down_at = now
            if down_at is not None and s["runningCount"] == replicas:
                arns = set(self.ecs("ListTasks", {"cluster": "gpu", "serviceName": "infer"})["taskArns"])
                if not (arns & before):
                    back_at = now
                    break
            time.sleep(0.05)
        after = sorted(self.ecs("ListTasks", {"cluster": "gpu", "serviceName": "infer"})["taskArns"])
        ready = [self.first_line(a, "allocated", 60) for a in after]
        crash_sum = self.summary(crash)
        fault_at = next((l.get("t") for l in crash_sum["lines"] if l.get("event") == "launch"), None)
        old = self.describe(sorted(before))
        events = svc()["events"][:12]
        self.ecs("UpdateService", {"cluster": "gpu", "service": "infer", "desiredCount": 0})
        self.ecs("DeleteService", {"cluster": "gpu", "service": "infer", "force": True})
        self.wait(after, "STOPPED", 60)
        self.results["scenarios"]["serviceFault"] = {
            "replicas": replicas, "alone": alone, "steadyAfterCreate": steady_after, "faultAt": fault_at,
            "downSeenAt": down_at, "backSeenAt": back_at, "lowestRunning": low,
            "replacementsReadyAt": ready, "crash": crash_sum,
            "oldStops": [{"stopCode": t.get("stopCode"), "stoppedReason": t.get("stoppedReason")} for t in old],
            "events": [e["message"] for e in events]}
        self.save()

    def mps_killed(self):
        self.log("MPS control daemon killed")
        self.register("mem-4096", mps_memory=4096)
        pids = self.pids_of("nvidia-cuda-mps-control")
        servers = self.pids_of("nvidia-cuda-mps-server")
        for p in pids:
            os.kill(p, signal.SIGKILL)
        killed_at = time.time()
        refused, _ = self.run_task("mem-4096", ["mem", "--step-mib", "1024", "--label", "while-down"], check=False)
        refused_summary = None
        if refused:
            self.wait([refused], "STOPPED", 30)
            refused_summary = self.summary(refused)
        impaired = None
        while time.time() - killed_at < 30:
            ci = self.instance()
            if ci.get("healthStatus", {}).get("overallStatus") == "IMPAIRED":
                impaired = ci
                break
            time.sleep(0.3)
        impaired_after = round(time.time() - killed_at, 1) if impaired else None
        placement_while_impaired = self.ecs("RunTask", {"cluster": "gpu", "taskDefinition": "mem-4096"})
        # The operator (systemd's gpupack-mps.service in deploy/) starts the daemon again; here we do.
        for p in self.pids_of("nvidia-cuda-mps-server"):
            os.kill(p, signal.SIGKILL)  # the orphaned server of the killed daemon: ours, no clients left
        env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=self.pipe, CUDA_MPS_LOG_DIRECTORY=self.pipe + "/log")
        subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, check=True)
        restarted_at = time.time()
        healthy = None
        while time.time() - restarted_at < 30:
            ci = self.instance()
            if ci.get("healthStatus", {}).get("overallStatus") == "OK":
                healthy = ci
                break
            time.sleep(0.3)
        after = None
        if healthy:
            arn, _ = self.run_task("mem-4096", ["mem", "--step-mib", "1024", "--label", "after"], check=False)
            if arn:
                self.wait([arn], "STOPPED", 90)
                after = self.summary(arn)
        self.results["scenarios"]["mpsKilled"] = {
            "killedControlPids": pids, "serverPidsBefore": servers, "refusedTask": refused_summary,
            "impairedAfterSeconds": impaired_after, "healthWhileImpaired": (impaired or {}).get("healthStatus"),
            "runTaskWhileImpaired": placement_while_impaired,
            "healthyAfterRestartSeconds": round(time.time() - restarted_at, 1) if healthy else None,
            "after": after}
        self.save()

    # ---- docker

    def docker_binds(self):
        """What every GPU container gets from the host, read-only: the system's directories (Python, PyTorch, CUDA,
        the dynamic loader), this Python's prefix and the workload; and the task log directory, writable."""
        binds = []
        for d in ["/usr", "/lib", "/lib64", "/opt", "/etc", sys.prefix, HERE]:
            d = os.path.abspath(d)  # /lib stays /lib where it links to /usr/lib: the loader is looked up there
            if os.path.isdir(d) and not any(d == b or d.startswith(b + "/") for b in binds):
                binds.append(d)
        return [f"{d}:{d}:ro" for d in binds] + [f"{self.task_logs}:{self.task_logs}:rw"]

    def import_image(self):
        """A busybox image with mount points for the binds, imported into the engine (no registry needed)."""
        busybox = self.args.busybox
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for d in ["bin", "tmp", "usr", "lib", "lib64", "opt", "etc", "proc", "sys", "dev", "run", "root"]:
                info = tarfile.TarInfo(d)
                info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
                t.addfile(info)
            t.add(busybox, arcname="bin/busybox")
            for applet in ["sh", "ls", "cat", "env", "sleep"]:
                info = tarfile.TarInfo("bin/" + applet)
                info.type, info.linkname = tarfile.SYMTYPE, "busybox"
                t.addfile(info)
        repo, tag = self.image.rsplit(":", 1)
        status, body = engine_request(self.args.docker_socket, "POST", f"/images/create?fromSrc=-&repo={repo}&tag={tag}",
                                      buf.getvalue(), "application/x-tar")
        if status != 200:
            raise RuntimeError(f"image import: HTTP {status}: {body[:300]}")
        status, body = engine_request(self.args.docker_socket, "GET", "/version")
        self.results["setup"]["dockerEngine"] = json.loads(body).get("Version") if status == 200 else None
        self.results["setup"]["dockerBinds"] = self.docker_binds()

    def injection_line(self):
        """What the agent logged about how containers get their GPU."""
        try:
            for line in open(os.path.join(self.work, "agent.log"), errors="replace"):
                if "docker GPU injection" in line:
                    return line.strip()
        except OSError:
            pass
        return None

    # ---- the whole run

    @staticmethod
    def pids_of(program):
        """Live processes (not zombies) whose argv[0] is `program`, by /proc (pgrep -x sees only 15 characters,
        the same for nvidia-cuda-mps-control and nvidia-cuda-mps-server)."""
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                argv0 = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode(errors="replace")
                state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if os.path.basename(argv0) == program and state != "Z":
                out.append(int(pid))
        return out

    def mps_processes(self):
        return "; ".join(f"{p} {name}" for name in ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
                         for p in self.pids_of(name))

    def setup_facts(self):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,compute_mode,mig.mode.current,memory.total,"
                            "clocks.max.sm", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
        self.results["setup"] = {"nvidiaSmi": q, "gpupack": self.args.gpupack, "python": sys.version.split()[0],
                                 "host": os.uname().nodename, "kernel": os.uname().release,
                                 "runtime": self.args.runtime}
        try:
            import torch
            self.results["setup"]["torch"] = torch.__version__
        except Exception:
            pass

    def main(self):
        os.makedirs(self.work, exist_ok=True)
        os.chmod(self.work, 0o755)
        if not self.docker:
            shutil.copyfile(WORKLOAD, self.workload)
            os.chmod(self.workload, 0o644)
        self.setup_facts()
        self.save()
        self.start_server()
        if self.docker:
            os.makedirs(self.task_logs, exist_ok=True)
            os.chmod(self.task_logs, 0o777)
            self.import_image()
        self.results["setup"]["computeModeBefore"] = self.results["setup"]["nvidiaSmi"]
        only = set(self.args.only.split(",")) if self.args.only else None
        want = lambda name: only is None or name in only
        try:
            if want("bypass0"):
                self.start_agent(watchdog_ms=0)
                self.bypass_without_watchdog()
                self.stop_agent()
            ci = self.start_agent(watchdog_ms=1000)
            self.results["setup"]["instance"] = ci
            self.results["setup"]["gpuInjection"] = self.injection_line()
            self.save()
            for name, fn in (("used", self.used), ("memory", self.memory), ("compute", self.compute), ("neighbours", self.neighbours),
                             ("bypass", self.bypass_with_watchdog), ("fault", self.fault),
                             ("service", self.service_fault), ("mps", self.mps_killed)):
                if want(name):
                    fn()
        finally:
            self.stop_agent()
            if self.server and self.server.poll() is None:
                self.server.send_signal(signal.SIGTERM)
                self.server.wait(timeout=30)
            left = self.mps_processes()
            if left:
                env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=self.pipe)
                subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env=env, timeout=10)
                time.sleep(1)
                left = self.mps_processes()
            self.results["mpsProcessesLeft"] = left
            after = subprocess.run(["nvidia-smi", "--query-gpu=compute_mode,mig.mode.current",
                                    "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
            self.results["setup"]["computeModeAfter"] = after
            self.results["finished"] = time.time()
            self.save()
            self.log(f"done; MPS processes left: {left or 'none'}")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--gpupack", default="build/gpupack")
    p.add_argument("--work", default="/tmp/gpupack-gpu")
    p.add_argument("--out", default="bench/gpu/out")
    p.add_argument("--port", type=int, default=18080)
    p.add_argument("--seconds", type=float, default=6.0, help="measuring window of each compute task")
    p.add_argument("--barrier", type=float, default=20.0, help="seconds from RunTask to a group's common start")
    p.add_argument("--only", default="", help="comma list: bypass0,used,memory,compute,neighbours,bypass,fault,service,mps")
    p.add_argument("--runtime", choices=["process", "docker"], default="process")
    p.add_argument("--agent-arg", action="append", default=[],
                   help="one more argument for `gpupack agent`, e.g. --agent-arg=--task-uids=61000-61099 (repeatable)")
    p.add_argument("--docker-socket", default=os.environ.get("GPUPACK_DOCKER_SOCKET", "/var/run/docker.sock"))
    p.add_argument("--docker-gpu", default="auto", help="the agent's --docker-gpu: auto, nvidia, cdi or devices")
    p.add_argument("--driver-root", default="", help="the agent's --driver-root (devices mode)")
    p.add_argument("--busybox", default=os.environ.get("GPUPACK_BUSYBOX", "/bin/busybox"),
                   help="a static busybox for the docker image")
    # A SIGTERM (a `timeout` around the run) ends it through main's finally: agent, server and MPS daemons quit.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    Run(p.parse_args()).main()


if __name__ == "__main__":
    main()
