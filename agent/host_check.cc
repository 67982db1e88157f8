// HostCheck (agent/host_check.h): each check is a small function that returns one HostCheckItem.
#include "agent/host_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agent/docker_client.h"
#include "agent/gpu_discovery.h"
#include "agent/gpu_injection.h"
#include "agent/mps_daemon.h"
#include "agent/runtime.h"

namespace gpupack::agent {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// kMaxPipeDirLength: the MPS daemon's unix sockets live in the pipe directory (sun_path holds 108 bytes); the
// supervisor refuses a longer directory (agent/mps_daemon.h).
constexpr size_t kMaxPipeDirLength = 80;

constexpr char kDriverFix[] =
    "install the NVIDIA driver (Debian: nvidia-driver from non-free, or the CUDA repository's cuda-drivers) so "
    "that libnvidia-ml.so.1 loads and `nvidia-smi` lists the GPUs; on a host without GPUs use --gpus fake:SPEC";

HostCheckItem Ok(std::string name, std::string detail) { return {std::move(name), true, std::move(detail), ""}; }

HostCheckItem Fail(std::string name, std::string detail, std::string fix) {
  return {std::move(name), false, std::move(detail), std::move(fix)};
}

bool FakeGpus(const HostCheckOptions& o) { return o.agent.gpus.rfind("fake:", 0) == 0; }

// WithThousands renders 143771 as "143,771" (MiB figures read better that way).
// (Built by appending: string::insert here trips GCC 12's -Wrestrict false positive at -O3.)
std::string WithThousands(int64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && digits[i - 1] != '-' && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// CheckGpus: NVML (or the fake SPEC) lists GPUs. `devices` receives them for the device-node check.
HostCheckItem CheckGpus(const HostCheckOptions& o, std::vector<GpuDevice>* devices) {
  const char* name = "NVML";
  auto discovery = MakeGpuDiscovery(o.agent.gpus, "host-check");
  if (!discovery.ok()) {
    if (FakeGpus(o))
      return Fail(name, discovery.status().message(), "give --gpus fake:<count>x<MiB>, e.g. fake:2x22587");
    return Fail(name, discovery.status().message(), kDriverFix);
  }
  auto found = (*discovery)->Discover();
  if (!found.ok()) return Fail(name, found.status().message(), kDriverFix);
  *devices = *found;
  std::ostringstream out;
  out << (FakeGpus(o) ? "fake GPUs (" + (*discovery)->Describe() + "), no NVML needed: "
                      : (*discovery)->Describe() + ": ")
      << found->size() << (found->size() == 1 ? " GPU" : " GPUs");
  std::map<std::string, int> models;  // "NVIDIA H200, 143,771 MiB usable" -> count
  for (const GpuDevice& d : *found) ++models[d.name + ", " + WithThousands(d.usable_mib) + " MiB usable"];
  for (const auto& [model, count] : models)
    out << (model == models.begin()->first ? " (" : "; ") << count << "x " << model;
  if (!models.empty()) out << ")";
  return Ok(name, out.str());
}

// CheckDeviceNodes: the device nodes CUDA opens. The agent's unit may not load modules or create nodes
// (ProtectKernelModules, no CAP_MKNOD), so they must exist before it starts.
HostCheckItem CheckDeviceNodes(const HostCheckOptions& o, const std::vector<GpuDevice>& devices) {
  const char* name = "device nodes";
  if (FakeGpus(o)) return Ok(name, "fake GPUs: no device nodes needed");
  std::vector<std::string> wanted = {"nvidiactl", "nvidia-uvm"};
  for (const GpuDevice& d : devices) wanted.push_back("nvidia" + std::to_string(d.minor >= 0 ? d.minor : d.index));
  std::vector<std::string> missing;
  for (const std::string& node : wanted) {
    struct stat st {};
    const std::string path = o.device_dir + "/" + node;
    if (stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) missing.push_back(path);
  }
  if (missing.empty())
    return Ok(name, std::to_string(wanted.size()) + " present (" + o.device_dir + "/nvidiactl, nvidia-uvm, nvidia<N>)");
  std::string list;
  for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
  return Fail(name, "missing: " + list,
              "load the nvidia and nvidia-uvm modules at boot and create their nodes (`nvidia-modprobe -u -c=0`, "
              "or enable nvidia-persistenced); the agent's unit cannot do it for CUDA programs");
}

// FindProgram resolves `program` like posix_spawnp: a name with a '/' as is, else the first executable on PATH.
std::string FindProgram(const std::string& program) {
  if (program.find('/') != std::string::npos) return access(program.c_str(), X_OK) == 0 ? program : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

// CheckMpsControl runs one harmless control command against the pipe directory. "No daemon" is ok (the agent
// starts one); a program that cannot run (missing, exit 126/127, killed, hung) is not.
HostCheckItem CheckMpsControl(const HostCheckOptions& o) {
  const char* name = "MPS control";
  if (FakeGpus(o)) return Ok(name, "fake GPUs: the MPS daemon is simulated");
  const std::string fix =
      "install the driver's MPS tools (Debian: nvidia-cuda-mps; the CUDA repository's driver packages ship "
      "nvidia-cuda-mps-control) and put nvidia-cuda-mps-control on the agent's PATH, or give --mps-control PATH";
  const std::string found = FindProgram(o.agent.mps_control_program);
  if (found.empty()) return Fail(name, o.agent.mps_control_program + " is not on PATH or not executable", fix);
  MpsOptions mps;
  mps.control_program = found;
  mps.pipe_dir = o.agent.mps_pipe_dir;
  mps.log_dir = o.agent.mps_pipe_dir + "/log";
  mps.probe_timeout = o.timeout;
  auto answer = MakeMpsControlDaemon(mps)->Send("get_default_active_thread_percentage");
  if (answer.ok()) return Ok(name, found + ": a daemon answers on " + o.agent.mps_pipe_dir + " (the agent adopts it)");
  const std::string& why = answer.status().message();
  if (answer.failure() == MpsFailure::kNoAnswer) {
    return Fail(name, found + ": " + why,
                "a daemon on " + o.agent.mps_pipe_dir + " is hung: stop it (`echo quit | " + o.agent.mps_control_program +
                    "` with CUDA_MPS_PIPE_DIRECTORY=" + o.agent.mps_pipe_dir + ", else kill it) before starting the agent");
  }
  // The program ran and found no daemon: ok. Any other failure (it did not run: missing, exit 126/127, killed;
  // or it failed otherwise) is not.
  if (answer.failure() == MpsFailure::kNoDaemon) {
    return Ok(name, found + " runs; no daemon on " + o.agent.mps_pipe_dir + " yet (the agent starts one)");
  }
  return Fail(name, found + ": " + why, fix);
}

// CheckWritableDir: `dir` is, or can be created as, a directory this process writes. A missing directory is
// judged by its nearest existing parent (the agent creates the rest).
HostCheckItem CheckWritableDir(const std::string& name, const std::string& dir, const std::string& flag) {
  const std::string fix = "run the check as the agent runs (root, as its systemd unit does), or give " + flag +
                          " a directory that user can write";
  if (dir.empty()) return Fail(name, "the directory is empty", fix);
  fs::path p = fs::path(dir);
  std::error_code ec;
  std::string missing;
  while (!p.empty() && !fs::exists(p, ec)) {
    missing = p.string();
    if (p == p.parent_path()) break;
    p = p.parent_path();
  }
  if (p.empty() || !fs::exists(p, ec)) return Fail(name, dir + ": no existing parent", fix);
  if (!fs::is_directory(p, ec)) return Fail(name, p.string() + " is not a directory", "give " + flag + " a directory");
  if (access(p.c_str(), W_OK | X_OK) != 0) return Fail(name, p.string() + " is not writable by this user", fix);
  if (missing.empty()) return Ok(name, dir + " is writable");
  return Ok(name, dir + " does not exist yet; " + p.string() + " is writable (the agent creates it)");
}

HostCheckItem CheckMpsPipeDir(const HostCheckOptions& o) {
  const char* name = "MPS pipe dir";
  std::string dir = o.agent.mps_pipe_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir == "/tmp/nvidia-mps") {
    return Fail(name, "the pipe directory is the default /tmp/nvidia-mps, which every CUDA program on the host joins",
                "give --mps-pipe-dir a directory of its own, e.g. /run/gpupack-mps");
  }
  if (dir.size() > kMaxPipeDirLength) {
    return Fail(name, dir + " is longer than " + std::to_string(kMaxPipeDirLength) + " characters",
                "give --mps-pipe-dir a shorter path: the daemon's unix sockets must fit in it");
  }
  return CheckWritableDir(name, dir, "--mps-pipe-dir");
}

// CheckDockerEngine: the same version negotiation the agent's docker runtime does at start.
HostCheckItem CheckDockerEngine(const HostCheckOptions& o) {
  const char* name = "docker engine";
  DockerRuntimeOptions d;
  d.socket_path = o.agent.docker_socket;
  d.agent_label = "host-check";
  d.request_timeout = o.timeout;
  auto runtime = MakeDockerRuntime(d);
  if (!runtime.ok()) {
    return Fail(name, runtime.status().message(),
                "start the Docker Engine (`systemctl enable --now docker`) or give --docker-socket its socket; "
                "the engine must serve API 1.41 or newer (Docker 20.10+)");
  }
  DockerClient client({o.agent.docker_socket, o.timeout, 1 << 20});
  auto version = client.Request("GET", "/version");
  std::string engine = "an engine";
  if (version.ok() && version->status == 200) {
    auto json = Json::parse(version->body, nullptr, false);
    if (json.is_object() && json.contains("Version") && json["Version"].is_string()) {
      engine = "Docker Engine " + json["Version"].get<std::string>();
    }
  }
  return Ok(name, engine + " answers on " + o.agent.docker_socket);
}

// CheckGpuInjection: the mode the agent's docker runtime would use (agent/gpu_injection.h), from GET /info, the
// GPUs NVML lists and the host's device nodes and driver libraries.
HostCheckItem CheckGpuInjection(const HostCheckOptions& o, const std::vector<GpuDevice>& devices) {
  const char* name = "GPU injection";
  const std::string fix =
      "give containers their GPU one of three ways: install the NVIDIA Container Toolkit (nvidia-container-toolkit; "
      "its nvidia runtime need not be the default), or generate CDI specs (`nvidia-ctk cdi generate "
      "--output=/etc/cdi/nvidia.yaml`, on Docker 25+ with CDI on), or make the device nodes exist and point "
      "--driver-root at the driver's libraries";
  GpuInjectionOptions gpu;
  gpu.mode = o.agent.docker_gpu;
  gpu.driver_root = o.agent.driver_root;
  gpu.device_dir = o.device_dir;
  DockerClient client({o.agent.docker_socket, o.timeout, 4 << 20});
  auto info = client.Request("GET", "/info");
  if (!info.ok()) return Fail(name, "GET /info: " + info.status().message(), fix);
  if (info->status != 200)
    return Fail(name, "GET /info answered " + std::to_string(info->status) + ": " + EngineMessage(*info), fix);
  auto json = Json::parse(info->body, nullptr, false);
  if (!json.is_object()) return Fail(name, "GET /info answered no JSON object", fix);
  std::string api;
  if (auto version = client.Request("GET", "/version"); version.ok() && version->status == 200) {
    auto v = Json::parse(version->body, nullptr, false);
    if (v.is_object() && v.contains("ApiVersion") && v["ApiVersion"].is_string()) api = v["ApiVersion"].get<std::string>();
  }
  const EngineGpuSupport engine = ParseEngineGpuSupport(json, api);
  std::string runtimes, cdi;
  for (const std::string& r : engine.runtimes) runtimes += (runtimes.empty() ? "" : ", ") + r;
  for (const std::string& d : engine.cdi_spec_dirs) cdi += (cdi.empty() ? "" : ", ") + d;
  const std::string seen = "runtimes: " + (runtimes.empty() ? std::string("(none)") : runtimes) +
                           (cdi.empty() ? "" : "; CDI spec dirs: " + cdi);
  auto plan = ChooseGpuInjection(gpu, engine, FakeGpus(o) ? std::vector<GpuDevice>() : devices);
  if (!plan.ok()) return Fail(name, plan.status().message(), "give --docker-gpu auto, nvidia, cdi or devices");
  if (FakeGpus(o)) {
    return Ok(name, "fake GPUs: not needed (" + seen + "; a GPU task is refused unless a mode works: " +
                        (plan->mode == GpuInjectionMode::kNone ? std::string("none does") : plan->summary) + ")");
  }
  if (plan->mode == GpuInjectionMode::kNone) {
    return Fail(name, plan->summary + " (" + seen + "); the agent registers no GPUs", fix);
  }
  return Ok(name, plan->summary + " (" + seen + ")");
}

}  // namespace

std::vector<HostCheckItem> RunHostCheck(const HostCheckOptions& options) {
  std::vector<HostCheckItem> items;
  std::vector<GpuDevice> devices;
  items.push_back(CheckGpus(options, &devices));
  items.push_back(CheckDeviceNodes(options, devices));
  items.push_back(CheckMpsControl(options));
  items.push_back(CheckMpsPipeDir(options));
  items.push_back(CheckWritableDir("MPS log dir", options.agent.mps_pipe_dir + "/log", "--mps-pipe-dir"));
  items.push_back(CheckWritableDir("state dir", options.agent.state_dir, "--state-dir"));
  if (options.agent.runtime == "docker") {
    items.push_back(CheckDockerEngine(options));
    if (items.back().ok) {
      items.push_back(CheckGpuInjection(options, devices));
    } else {
      items.push_back(Fail("GPU injection", "not checked: the engine does not answer", "fix the docker engine first"));
    }
  } else if (options.agent.runtime != "process") {
    items.push_back(Fail("runtime", "unknown runtime '" + options.agent.runtime + "'", "give --runtime process or docker"));
  }
  return items;
}

std::string FormatHostCheck(const std::vector<HostCheckItem>& items) {
  std::ostringstream out;
  size_t width = 0;
  for (const HostCheckItem& item : items) width = std::max(width, item.name.size());
  int failed = 0;
  for (const HostCheckItem& item : items) {
    out << (item.ok ? "  ok    " : "  FAIL  ") << item.name << std::string(width - item.name.size() + 2, ' ')
        << item.detail << "\n";
    if (!item.ok) {
      ++failed;
      out << "        " << std::string(width + 2, ' ') << "fix: " << item.fix << "\n";
    }
  }
  out << items.size() << " checks, " << failed << " failed\n";
  return out.str();
}

bool HostCheckPassed(const std::vector<HostCheckItem>& items) {
  for (const HostCheckItem& item : items)
    if (!item.ok) return false;
  return true;
}

}  // namespace gpupack::agent
