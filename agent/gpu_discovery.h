// GPU discovery: the GPUs of this host (NVML loaded at run time, or fakes for hosts without GPUs), and the
// per-process GPU memory the watchdog reads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "scheduler/model.h"
#include "base/status.h"

namespace gpupack::agent {

struct GpuDevice {
  int index = 0;          // NVML index
  std::string uuid;       // "GPU-8c5b..." as NVML reports it; ECS's gpuId
  std::string name;       // "NVIDIA H200"
  MiB total_mib = 0;      // total memory
  MiB reserved_mib = 0;   // reserved by the driver/firmware (nvmlDeviceGetMemoryInfo_v2 `reserved`)
  MiB usable_mib = 0;     // total - reserved: what the agent registers as gpuInfo.memoryInMiB
  int sm_count = 0;       // multiprocessors, 0 when unknown
  // minor: the device node's minor number, /dev/nvidia<minor> (nvmlDeviceGetMinorNumber; fake GPUs: the index);
  // -1 when NVML cannot tell. The docker runtime's `devices` injection passes that node to the container.
  int minor = -1;
};

// Memory one process uses on one GPU (NVML's running compute processes; under MPS the MPS clients).
struct GpuProcess {
  uint32_t pid = 0;
  std::string gpu_uuid;
  MiB used_mib = 0;
};

// A fatal GPU error NVML reported (an Xid "critical error" event), e.g. Xid 31 when a kernel touched an illegal
// address. Under MPS such an error reaches every client on that GPU.
struct GpuCriticalError {
  std::string gpu_uuid;
  uint64_t xid = 0;
};

// IsFatalXid: the Xids the agent treats as a fault of the whole GPU (every MPS client on it fails, the MPS
// server refuses new clients until they have all exited): 13 graphics engine exception, 31 MMU fault (illegal
// address), 43 GPU stopped processing, 48 double-bit ECC, 63/64 ECC page retirement or row remap events, 74 NVLink
// error, 79 fallen off the bus, 92 high single-bit ECC rate, 94/95 contained/uncontained ECC error, 119/120 GSP
// errors. Others (e.g. 45, the clean-up after a process was killed) are logged and ignored.
bool IsFatalXid(uint64_t xid);

// GpuDiscovery is the narrow interface over NVML. Implementations are thread-compatible.
class GpuDiscovery {
 public:
  virtual ~GpuDiscovery() = default;
  virtual std::string Describe() const = 0;  // "nvml (driver 550.54)" / "fake:2x22587"
  virtual Result<std::vector<GpuDevice>> Discover() = 0;
  // Processes using each GPU with their memory, for the watchdog (docs/agent-channel.md "Limits that hold").
  virtual Result<std::vector<GpuProcess>> Processes() = 0;
  // CriticalErrors returns the critical-error events seen since the last call, without waiting. The first call
  // subscribes (NVML event set); a platform that cannot deliver events answers empty, once logged.
  virtual std::vector<GpuCriticalError> CriticalErrors() { return {}; }
};

// MakeGpuDiscovery parses the agent's --gpus flag: "nvml" (dlopen libnvidia-ml.so.1; an error that says so
// when it is missing or has no GPUs) or "fake:SPEC" where SPEC is "<count>x<MiB>[,<count>x<MiB>...]", e.g.
// "2x22587" or "1x81559,1x22587". Fake UUIDs are deterministic: "GPU-fakeHHHH-HHHH-HHHH-0000-00000000000N"
// where the H digits come from a hash of a host seed so two fake agents on one machine differ (`seed` is e.g.
// the agent's name; an empty seed gives "GPU-fake0000-0000-0000-0000-00000000000N").
// agent/fake_gpus.h has the details (FakeGpuUuid, the processes file named by $GPUPACK_FAKE_GPU_DIR).
// A bad flag or SPEC is an InvalidParameter error that names the problem.
Result<std::unique_ptr<GpuDiscovery>> MakeGpuDiscovery(const std::string& flag, const std::string& seed);

// NvmlAvailable probes dlopen(NvmlLibraryPath()) + nvmlInit without keeping it.
bool NvmlAvailable();

// kNvmlLibraryEnv names an environment variable that overrides the library NVML is loaded from (a path for
// dlopen); unset or empty means "libnvidia-ml.so.1" found by the dynamic loader. Tests point it at a fake.
inline constexpr char kNvmlLibraryEnv[] = "GPUPACK_NVML_LIBRARY";
inline constexpr char kNvmlDefaultLibrary[] = "libnvidia-ml.so.1";
std::string NvmlLibraryPath();

// MakeNvmlDiscovery loads NVML from `library` (a dlopen name or path), initializes it and keeps it initialized
// for the object's life (nvmlShutdown and dlclose in the destructor). An error when the library is missing,
// lacks a function gpupack needs, fails nvmlInit, or reports 0 GPUs. MakeGpuDiscovery("nvml") calls it with
// NvmlLibraryPath().
//   Discover: usable_mib = floor((total - reserved) bytes / MiB) from nvmlDeviceGetMemoryInfo_v2 (v1, with
//             reserved 0, when the driver lacks _v2); sm_count from nvmlDeviceGetAttributes_v2, else 0; minor
//             from nvmlDeviceGetMinorNumber, else -1.
//   Processes: per GPU, the union of nvmlDeviceGetComputeRunningProcesses_v3 and
//             nvmlDeviceGetMPSComputeRunningProcesses_v3 (_v2 when _v3 is missing), one entry per (pid, GPU)
//             with the larger memory; memory NVML cannot report counts as 0. Sorted by GPU index, then pid.
//   CriticalErrors: nvmlEventSetCreate + nvmlDeviceRegisterEvents(nvmlEventTypeXidCriticalError) on every GPU at
//             the first call, then nvmlEventSetWait_v2 with a 0 ms timeout until it times out.
Result<std::unique_ptr<GpuDiscovery>> MakeNvmlDiscovery(const std::string& library);

}  // namespace gpupack::agent
