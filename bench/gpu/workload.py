#!/usr/bin/env python3
"""gpupack's GPU measurement workload, run as a gpupack task (process or docker runtime) or by hand.

Prints exactly one JSON line of results on stdout (flushed), plus, for the modes that hold the GPU, earlier
"progress" lines that also are JSON (each with "event"). Every line carries "mode", "t" (Unix time), "pid" and
"uid" (the user the task ran as: the agent's --task-user, or a uid of its --task-uids).

Modes:
  mem      allocate --step-mib chunks until the allocation fails; report what was allocatable, what CUDA said
           was free right after it started, and the MPS variables the process saw.
  compute  FP16 --size^3 matrix products for --seconds after an optional --start-at barrier (Unix time), so
           tasks placed together measure the same window; report SMs seen, TFLOPS and products run.
  crash    start CUDA, run products until --delay seconds have passed, then launch a kernel that stores to an
           illegal address (a fatal GPU exception, as a buggy workload would cause), report the error, exit 3.
  bypass   lift the MPS limits from inside (--how delete: remove the MPS variables; --how raise: set a huge
           memory limit and no compute limit) BEFORE CUDA starts, as an untrusted container could, then
           allocate --hold-mib (or as much as possible) and run products until killed or --seconds pass.
  hold     allocate --hold-mib and run products for --seconds (a neighbour that watches for failures).

Exit codes: 0 success, 3 crash mode's intended fault, 4 a CUDA error in a mode that did not expect one.
"""
import argparse
import ctypes
import json
import os
import sys
import time

MPS_VARS = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
            "CUDA_VISIBLE_DEVICES")
MIB = 1 << 20


def emit(mode, **fields):
    fields = {"mode": mode, "t": round(time.time(), 3), "pid": os.getpid(), "uid": os.getuid(), **fields}
    line = json.dumps(fields, sort_keys=True) + "\n"
    sys.stdout.write(line)
    sys.stdout.flush()
    # In a container (bench/gpu/run.py --runtime docker) the engine's logs go with the container, so the lines
    # are also appended to <GPUPACK_BENCH_LOG_DIR>/<GPUPACK_BENCH_TAG>.log, a directory bound in from the host.
    log_dir, tag = os.environ.get("GPUPACK_BENCH_LOG_DIR"), os.environ.get("GPUPACK_BENCH_TAG")
    if log_dir and tag:
        with open(os.path.join(log_dir, tag + ".log"), "a") as f:
            f.write(line)


def mps_env():
    return {k: os.environ[k] for k in MPS_VARS if k in os.environ}


def driver_context_free_mib():
    """Free/total MiB right after a bare CUDA context exists (driver API, before PyTorch loads anything): the
    memory CUDA itself takes per process. Uses the primary context, which PyTorch then shares."""
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    if (cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), 0) or
            cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) or cuda.cuCtxSetCurrent(ctx) or
            cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))):
        return None
    return free.value // MIB


def import_torch():
    import torch  # noqa: E402  (imported late so bypass mode can edit the environment first)
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch


def device_facts(torch):
    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info(0)
    return {"device": props.name, "sms": props.multi_processor_count, "freeMiB": free // MIB,
            "totalMiB": total // MIB}


def allocate(torch, step_mib, limit_mib=None):
    """Allocates step_mib chunks until failure (or limit_mib); returns (chunks, MiB)."""
    chunks = []
    got = 0
    while limit_mib is None or got + step_mib <= limit_mib:
        try:
            chunks.append(torch.empty(step_mib * MIB, dtype=torch.uint8, device="cuda"))
        except RuntimeError:  # torch.cuda.OutOfMemoryError is a RuntimeError
            break
        got += step_mib
    return chunks, got


def products(torch, size, seconds, start_at=None, stop_on_error=True):
    """Runs FP16 size^3 products for `seconds`; returns (count, elapsed, TFLOPS)."""
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    if start_at:
        delay = start_at - time.time()
        if delay > 0:
            time.sleep(delay)
    count = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        for _ in range(10):
            torch.matmul(a, b)
        torch.cuda.synchronize()
        count += 10
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - t0
    return count, elapsed, 2.0 * size ** 3 * count / elapsed / 1e12


ILLEGAL_STORE_PTX = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry gpupack_illegal_store()
{
  .reg .u64 %a;
  .reg .u32 %v;
  mov.u64 %a, 8;
  mov.u32 %v, 1;
  st.global.u32 [%a], %v;
  ret;
}
"""


def illegal_store(torch):
    """Launches a kernel that stores to address 8 in the current (PyTorch's primary) context; returns the
    CUresult of the synchronize that follows (700 = CUDA_ERROR_ILLEGAL_ADDRESS)."""
    cuda = ctypes.CDLL("libcuda.so.1")
    torch.cuda.synchronize()
    ctx = ctypes.c_void_p()
    dev = ctypes.c_int()

    def check(result, what):
        if result != 0:
            raise RuntimeError(f"{what} failed: CUresult {result}")

    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    module = ctypes.c_void_p()
    check(cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(ILLEGAL_STORE_PTX)), "cuModuleLoadData")
    fn = ctypes.c_void_p()
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), module, b"gpupack_illegal_store"), "cuModuleGetFunction")
    r = cuda.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, None, None)
    if r != 0:
        return r
    return cuda.cuCtxSynchronize()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["mem", "compute", "crash", "bypass", "hold"])
    p.add_argument("--step-mib", type=int, default=256)
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--start-at", type=float, default=None, help="Unix time at which measuring starts")
    p.add_argument("--delay", type=float, default=5.0)
    p.add_argument("--how", choices=["delete", "raise"], default="delete")
    p.add_argument("--hold-mib", type=int, default=0, help="0: as much as can be allocated (bypass)")
    p.add_argument("--headroom-mib", type=int, default=1024, help="bypass: left free for its own products")
    p.add_argument("--linger", type=float, default=0.0, help="bypass/hold: seconds to keep the memory afterwards")
    p.add_argument("--label", default="")
    args = p.parse_args()
    mode = args.mode
    extra = {"label": args.label} if args.label else {}

    if mode == "bypass":
        seen = mps_env()
        if args.how == "delete":
            for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                      "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"):
                os.environ.pop(k, None)
        else:
            os.environ["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=1000000M"
            os.environ.pop("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", None)
        extra.update({"how": args.how, "envGiven": seen, "envUsed": mps_env()})

    ctx_free = driver_context_free_mib() if mode == "mem" else None
    torch = import_torch()
    try:
        torch.zeros(1, device="cuda")
        facts = device_facts(torch)
    except RuntimeError as e:
        emit(mode, ok=False, error=str(e).splitlines()[0], env=mps_env(), **extra)
        return 4
    facts["env"] = mps_env()
    facts.update(extra)

    if mode == "mem":
        chunks, got = allocate(torch, args.step_mib)
        emit(mode, ok=True, allocatableMiB=got, stepMiB=args.step_mib, contextFreeMiB=ctx_free, **facts)
        return 0

    if mode == "compute":
        try:
            n, elapsed, tflops = products(torch, args.size, args.seconds, args.start_at)
        except RuntimeError as e:
            emit(mode, ok=False, error=str(e).splitlines()[0], **facts)
            return 4
        emit(mode, ok=True, products=n, seconds=round(elapsed, 3), tflops=round(tflops, 2), size=args.size,
             **facts)
        return 0

    if mode == "crash":
        products(torch, 4096, args.delay)
        emit(mode, event="launch", **facts)  # the fatal store follows at once; the agent may stop us before we print
        r = illegal_store(torch)
        emit(mode, ok=False, cuResult=r, error="illegal address" if r == 700 else f"CUresult {r}", **facts)
        return 3

    if mode in ("bypass", "hold"):
        # The products' operands first, so that taking all the memory leaves them room.
        a = torch.randn(args.size, args.size, device="cuda", dtype=torch.float16)
        b = torch.randn(args.size, args.size, device="cuda", dtype=torch.float16)
        torch.matmul(a, b)
        torch.cuda.synchronize()
        declared = None  # what the agent gave (bypass: before the task lifted it)
        limit = (extra["envGiven"] if mode == "bypass" else facts["env"]).get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
        if limit and limit.startswith("0=") and limit.endswith("M"):
            declared = int(limit[2:-1])
        cap = args.hold_mib or None
        if cap is None:
            cap = max(0, torch.cuda.mem_get_info(0)[0] // MIB - args.headroom_mib)
        chunks, got, exceeded = [], 0, False
        for step in (1024, 64):  # big steps, then small ones to the cap
            while got + step <= cap:
                try:
                    chunks.append(torch.empty(step * MIB, dtype=torch.uint8, device="cuda"))
                except RuntimeError:
                    break
                got += step
                if declared and got > declared and not exceeded:
                    exceeded = True  # the moment the watchdog has to notice
                    emit(mode, event="exceeded", allocatedMiB=got, declaredMiB=declared, **facts)
        emit(mode, event="allocated", allocatedMiB=got, **facts)
        try:
            n, elapsed, tflops = products(torch, args.size, args.seconds, args.start_at)
        except RuntimeError as e:
            emit(mode, ok=False, error=str(e).splitlines()[0], allocatedMiB=got, **facts)
            return 4
        emit(mode, ok=True, allocatedMiB=got, products=n, seconds=round(elapsed, 3), tflops=round(tflops, 2),
             **facts)
        if args.linger > 0:
            time.sleep(args.linger)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
