// HostCheck: the GPU host checklist behind `gpupack agent --check` (docs/operations.md "GPU host
// prerequisites"). It looks, it never changes the host: no daemon is started, no directory created, no GPU
// setting touched. Each item says ok or FAIL, what it saw, and on FAIL what to do.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "agent/agent.h"

namespace gpupack::agent {

// HostCheckOptions: the agent's options the checklist reads (gpus, runtime, docker_socket, docker_gpu, driver_root,
// mps_pipe_dir, whose log directory is <dir>/log, mps_control_program, state_dir), with the agent's defaults, and
// the checklist's own.
struct HostCheckOptions {
  AgentOptions agent;
  std::string device_dir = "/dev";          // where the NVIDIA device nodes are (tests: a temp dir)
  std::chrono::milliseconds timeout{3000};  // bounds each MPS control command and engine request
};

// HostCheckItem is one line of the checklist.
struct HostCheckItem {
  std::string name;  // "NVML", "MPS control", ...
  bool ok = false;
  std::string detail;  // what was seen: "2 GPUs: NVIDIA H200 (143,771 MiB usable), ..." or why it failed
  std::string fix;     // on FAIL: what to do; empty when ok
};

// RunHostCheck checks, in order:
//   NVML            --gpus nvml: libnvidia-ml.so.1 loads (or $GPUPACK_NVML_LIBRARY) and lists at least one GPU;
//                   --gpus fake:SPEC: the SPEC parses ("fake GPUs", no NVML needed).
//   device nodes    nvml: /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia<minor> of every GPU (NVML's minor number,
//                   else its index) exist (the agent's unit may neither load kernel modules nor create device
//                   nodes); fake: "fake GPUs".
//   MPS control     nvml: the control program is on PATH (or the given path) and runs: it answers that no daemon
//                   listens on the pipe directory yet, or a daemon there answers; fake: "fake GPUs" (simulated).
//   MPS pipe dir    the pipe directory is not /tmp/nvidia-mps, fits the daemon's sockets (80 characters), and it
//                   (or, when missing, the nearest existing parent) is a directory this process may write.
//   MPS log dir     the same for <pipe dir>/log.
//   state dir       the same for --state-dir.
//   docker engine   --runtime docker only: the engine answers on the socket and serves the API version gpupack
//                   speaks.
//   GPU injection   --runtime docker only: the mode the agent would use with --docker-gpu (agent/gpu_injection.h):
//                   the engine's nvidia runtime, CDI specs for every GPU, or the device nodes and driver libraries;
//                   FAIL when none works (the agent would register no GPUs). With fake GPUs it is not needed and says
//                   which runtimes the engine has.
std::vector<HostCheckItem> RunHostCheck(const HostCheckOptions& options);

// FormatHostCheck renders the checklist for a terminal: one "ok"/"FAIL" line per item, an indented "fix:" line
// under each FAIL, and a last line counting the failures.
std::string FormatHostCheck(const std::vector<HostCheckItem>& items);

// HostCheckPassed: every item is ok.
bool HostCheckPassed(const std::vector<HostCheckItem>& items);

}  // namespace gpupack::agent
