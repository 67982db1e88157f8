// The environment of a container as the agent starts it (docs/agent-channel.md): the task definition's, then the RunTask
// overrides', then the MPS variables, which win over anything the task tried to set. Pure functions.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/model.h"

namespace gpupack::agent {

enum class RuntimeKind { kProcess, kDocker };

// The GPU assignment of one container.
struct GpuAssignment {
  std::vector<std::string> gpu_uuids;  // shared: one; dedicated: one or more
  std::optional<MpsSharing> mps;       // set for a shared container
};

// MpsMemoryLimit renders CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's value: "0=<MiB>M" (device ordinal 0 is the one
// visible GPU).
std::string MpsMemoryLimit(MiB mib);

// ContainerEnvironment merges the variables (later wins, order of first appearance kept) and injects:
//   shared:    CUDA_MPS_PIPE_DIRECTORY=<pipe_dir>, CUDA_VISIBLE_DEVICES (process) or NVIDIA_VISIBLE_DEVICES
//              (docker) = the GPU UUID, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MiB>M, and
//              CUDA_MPS_ACTIVE_THREAD_PERCENTAGE only when maxComputePercent was declared (a value the task
//              set itself is removed otherwise); a shared assignment uses gpu_uuids[0];
//   dedicated: CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES = the UUIDs, comma-separated, and the reserved MPS
//              variables removed (it never talks to our MPS daemon, whose pipe is not the default one);
//   no GPU:    NVIDIA_VISIBLE_DEVICES=void (docker) / CUDA_VISIBLE_DEVICES= (process, empty: no GPU), and the
//              reserved MPS variables removed. An assignment without UUIDs is treated as no GPU, even with `mps`.
// The reserved MPS variables are CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY,
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE. An injected variable the task also set
// keeps the task's position; a new one is appended.
std::vector<KeyValuePair> ContainerEnvironment(const std::vector<KeyValuePair>& definition_env,
                                               const std::vector<KeyValuePair>& override_env,
                                               const GpuAssignment& gpus, const std::string& mps_pipe_dir,
                                               RuntimeKind runtime);

// The agent's own variables a `process` container inherits when its task does not set them: a host program
// needs a PATH and a HOME, and CUDA programs need the LD_LIBRARY_PATH the host set up for the driver. Docker
// containers get their image's environment instead, so this applies to the process runtime only.
inline constexpr const char* kInheritedHostVariables[] = {"PATH", "HOME", "LANG", "LC_ALL", "TZ",
                                                          "LD_LIBRARY_PATH"};
// WithHostDefaults appends each kInheritedHostVariables entry that `env` lacks and `lookup` (getenv in the
// agent) knows. The MPS variables are never inherited: ContainerEnvironment alone decides them.
std::vector<KeyValuePair> WithHostDefaults(std::vector<KeyValuePair> env,
                                           const std::function<const char*(const char*)>& lookup);

}  // namespace gpupack::agent
