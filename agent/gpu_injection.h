// GpuInjection: how the docker runtime hands a container its GPU, chosen once per host (`--docker-gpu`).
//
//   nvidia   the engine's GET /info lists an `nvidia` runtime: create with HostConfig.Runtime=nvidia and
//            NVIDIA_VISIBLE_DEVICES=<uuid> (what ECS does); the NVIDIA Container Runtime adds the device nodes and
//            the driver's libraries.
//   cdi      the engine supports CDI (API 1.44 or newer, /info lists CDISpecDirs) and a spec in one of those
//            directories names an nvidia.com/gpu device for the GPU (by UUID or by index): a DeviceRequest with
//            driver `cdi` and that device's fully qualified name.
//   devices  neither: the device nodes /dev/nvidia<minor> (minor from NVML), /dev/nvidiactl, /dev/nvidia-uvm (and
//            /dev/nvidia-uvm-tools when present) as Devices, the driver's user-space libraries bound read-only from
//            a driver root (given, or found: the directory holding libcuda.so.1 and libnvidia-ml.so.1 under a known
//            root such as /usr/local/nvidia, or as `ldconfig -p` shows) and LD_LIBRARY_PATH pointing at them.
//   auto     (the default) the first of nvidia, cdi, devices that works on this host.
//
// A host where no mode works gets GpuInjectionMode::kNone with the reason of every mode tried; the agent then
// registers no GPUs (fake GPUs excepted, for tests) and the runtime refuses a GPU container with that reason. A GPU
// the chosen mode cannot reach (no CDI device for it, no device node) is refused the same way, per container.
//
// Everything here is a pure function of what it is given (the /info answer, the GPUs, the host's files), so the
// plan is computed once and then only read: a GpuInjection is immutable and safe to share between threads.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "agent/gpu_discovery.h"
#include "agent/runtime.h"
#include "base/status.h"

namespace gpupack::agent {

// kEnvironmentOnly: the GPUs are simulated (--gpus fake:SPEC): a container gets the GPU environment the agent sets
// (NVIDIA_VISIBLE_DEVICES, the MPS variables) and no device, so the container flow can be tried without a GPU.
enum class GpuInjectionMode { kNone, kNvidia, kCdi, kDevices, kEnvironmentOnly };
// "none" | "nvidia" | "cdi" | "devices" | "environment-only"
std::string GpuInjectionModeName(GpuInjectionMode mode);

// GpuInjectionOptions: the agent's flags and where to look (tests point the paths at temp dirs).
struct GpuInjectionOptions {
  std::string mode = "auto";  // --docker-gpu: auto | nvidia | cdi | devices
  std::string driver_root;    // --driver-root: devices mode's driver root; empty = find it
  std::string device_dir = "/dev";
  // Roots tried in order when --driver-root is not given; each is searched for a lib64, lib or lib/x86_64-linux-gnu
  // directory (or the root itself) holding libcuda.so.1 and libnvidia-ml.so.1.
  std::vector<std::string> driver_root_candidates = {"/usr/local/nvidia", "/run/nvidia/driver",
                                                     "/usr/lib/nvidia"};
  // The `ldconfig -p` listing (text), read when no candidate root has the libraries; empty = run /sbin/ldconfig -p.
  std::string ldconfig_listing;
  bool run_ldconfig = true;  // false: only the candidates and the given listing (tests)
  // Binds every GPU container also gets, in docker's HOST:CONTAINER[:ro|rw] form (--docker-gpu-bind), e.g. a
  // host's CUDA toolkit or Python for validation runs.
  std::vector<std::string> extra_binds;
};

// EngineGpuSupport: what the engine's GET /info (and its API version) say about GPU support.
struct EngineGpuSupport {
  std::vector<std::string> runtimes;       // keys of /info Runtimes
  std::string default_runtime;             // /info DefaultRuntime
  std::vector<std::string> cdi_spec_dirs;  // /info CDISpecDirs (empty: CDI is off or unknown to the engine)
  std::string api_version;                 // the engine's newest API version ("1.44")
};
// ParseEngineGpuSupport reads GET /info's JSON body; `api_version` is the engine's ApiVersion from /version.
EngineGpuSupport ParseEngineGpuSupport(const nlohmann::json& info, const std::string& api_version);

// GpuTarget: one GPU as the chosen mode reaches it.
struct GpuTarget {
  int index = 0;
  int minor = -1;        // devices: /dev/nvidia<minor> (-1: NVML could not tell; the index is used)
  std::string cdi_name;  // cdi: "nvidia.com/gpu=<name>", empty when no spec names this GPU
};

// GpuInjection: the plan for this host.
struct GpuInjection {
  GpuInjectionMode mode = GpuInjectionMode::kNone;
  std::string summary;  // one line for the log and `--check`: what was chosen and why, or why nothing works
  std::map<std::string, GpuTarget> gpus;  // by UUID
  // devices mode:
  std::string device_dir = "/dev";
  std::vector<std::string> library_binds;  // "HOST:CONTAINER:ro" of the driver's libraries
  std::string library_path;                // LD_LIBRARY_PATH inside the container
  // cdi mode: the API version the create call needs (DeviceRequests with driver cdi came with 1.44).
  std::string api_version;
  std::vector<std::string> extra_binds;  // GpuInjectionOptions::extra_binds
};

// ChooseGpuInjection picks the mode for this host. An error only for a bad --docker-gpu value; a mode that was
// asked for (or auto) and does not work gives kNone with the reason in `summary`.
Result<GpuInjection> ChooseGpuInjection(const GpuInjectionOptions& options, const EngineGpuSupport& engine,
                                        const std::vector<GpuDevice>& gpus);

// EnvironmentOnlyInjection: the plan for simulated GPUs (kEnvironmentOnly) over `gpus`, with a summary that says
// what a container gets and what it does not.
GpuInjection EnvironmentOnlyInjection(const std::vector<GpuDevice>& gpus);

// DetectGpuInjection asks the engine on `socket_path` (GET /version, GET /info) and calls ChooseGpuInjection. An
// engine that does not answer is an error.
Result<GpuInjection> DetectGpuInjection(const std::string& socket_path, const GpuInjectionOptions& options,
                                        const std::vector<GpuDevice>& gpus,
                                        std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));

// VisibleGpus reads the GPUs a container was given from its environment's NVIDIA_VISIBLE_DEVICES (set by the agent
// for every container: UUIDs, comma-separated; "void", "none" or empty for none).
std::vector<std::string> VisibleGpus(const std::vector<KeyValuePair>& environment);

// InjectGpus adds what `uuids` need to a POST /containers/create body (HostConfig.Runtime; DeviceRequests;
// Devices, Binds and LD_LIBRARY_PATH in Env). An error, naming the mode and what is missing, when the plan is
// kNone or cannot reach one of the GPUs: such a container must not start.
Status InjectGpus(const GpuInjection& plan, const std::vector<std::string>& uuids, nlohmann::json& body);

// MakeDockerRuntime with a GPU injection plan (the plain MakeDockerRuntime of agent/runtime.h has none: it refuses
// every GPU container).
Result<std::unique_ptr<Runtime>> MakeDockerRuntime(DockerRuntimeOptions options, GpuInjection injection);

}  // namespace gpupack::agent
