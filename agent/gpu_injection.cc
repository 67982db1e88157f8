// GpuInjection (agent/gpu_injection.h): each mode is a small function that either fills the plan or says why it
// does not work on this host; ChooseGpuInjection tries them in order.
#include "agent/gpu_injection.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "agent/docker_client.h"

namespace gpupack::agent {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kCdiGpuKind[] = "nvidia.com/gpu";
constexpr char kCdiMinimumApi[] = "1.44";
// kSystemDriverLibDir: where driver libraries found in a system library directory are bound inside the container
// (binding the whole system directory would hide the image's own libraries).
constexpr char kSystemDriverLibDir[] = "/usr/local/gpupack-driver/lib";

std::optional<std::pair<int, int>> ParseVersion(const std::string& text) {
  int major = 0, minor = 0;
  if (std::sscanf(text.c_str(), "%d.%d", &major, &minor) != 2) return std::nullopt;
  return std::make_pair(major, minor);
}

std::string Join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

bool IsFile(const fs::path& path) {
  std::error_code ec;
  return fs::exists(path, ec);  // a symlink to the versioned library counts
}

bool IsCharDevice(const fs::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

// GpuNode: the device node of GPU `target` under the device dir (the minor from NVML, else the index).
std::string GpuNode(const GpuTarget& target) {
  return "nvidia" + std::to_string(target.minor >= 0 ? target.minor : target.index);
}

// ---- nvidia ------------------------------------------------------------------------------------------------------

bool TryNvidia(const EngineGpuSupport& engine, GpuInjection& plan, std::string& why) {
  if (std::find(engine.runtimes.begin(), engine.runtimes.end(), "nvidia") == engine.runtimes.end()) {
    why = "nvidia: the engine has no nvidia runtime (runtimes: " +
          (engine.runtimes.empty() ? std::string("none") : Join(engine.runtimes, ", ")) + ")";
    return false;
  }
  plan.summary = "nvidia: the engine's nvidia runtime, HostConfig.Runtime=nvidia and NVIDIA_VISIBLE_DEVICES=<uuid>";
  return true;
}

// ---- cdi ---------------------------------------------------------------------------------------------------------

// CdiSpec: the kind and device names of one spec file.
struct CdiSpec {
  std::string kind;
  std::vector<std::string> names;
};

std::string Unquote(std::string value) {
  while (!value.empty() && (value.back() == ' ' || value.back() == '\r' || value.back() == '\t')) value.pop_back();
  if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front()) {
    value = value.substr(1, value.size() - 2);
  }
  return value;
}

// ReadCdiSpec reads a spec file: JSON (parsed), or YAML as `nvidia-ctk cdi generate` writes it, read line by line
// for the top-level `kind:` and the `- name:` of each device (the only `name` keys in a CDI spec).
std::optional<CdiSpec> ReadCdiSpec(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  CdiSpec spec;
  if (path.extension() == ".json") {
    Json json = Json::parse(text, nullptr, false);
    if (!json.is_object()) return std::nullopt;
    spec.kind = json.value("kind", "");
    if (json.contains("devices") && json["devices"].is_array()) {
      for (const Json& device : json["devices"])
        if (device.is_object() && device.contains("name") && device["name"].is_string())
          spec.names.push_back(device["name"].get<std::string>());
    }
    return spec;
  }
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("kind:", 0) == 0) {
      const size_t value = line.find_first_not_of(' ', 5);
      spec.kind = value == std::string::npos ? std::string() : Unquote(line.substr(value));
      continue;
    }
    const size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    std::string rest = line.substr(first);
    if (rest.rfind("- ", 0) == 0) rest = rest.substr(rest.find_first_not_of(' ', 1));
    if (rest.rfind("name:", 0) == 0) {
      const size_t value = rest.find_first_not_of(' ', 5);
      if (value != std::string::npos) spec.names.push_back(Unquote(rest.substr(value)));
    }
  }
  return spec;
}

bool TryCdi(const EngineGpuSupport& engine, const std::vector<GpuDevice>& gpus, GpuInjection& plan,
            std::string& why) {
  const auto api = ParseVersion(engine.api_version);
  if (!api || *api < *ParseVersion(kCdiMinimumApi)) {
    why = "cdi: the engine serves API " + (engine.api_version.empty() ? std::string("?") : engine.api_version) +
          ", CDI device requests need " + kCdiMinimumApi;
    return false;
  }
  if (engine.cdi_spec_dirs.empty()) {
    why = "cdi: the engine lists no CDI spec directories (CDI is off)";
    return false;
  }
  // Every nvidia.com/gpu device name the specs hold.
  std::vector<std::string> names;
  for (const std::string& dir : engine.cdi_spec_dirs) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path path = it->path();
      if (path.extension() != ".json" && path.extension() != ".yaml" && path.extension() != ".yml") continue;
      auto spec = ReadCdiSpec(path);
      if (spec && spec->kind == kCdiGpuKind) names.insert(names.end(), spec->names.begin(), spec->names.end());
    }
  }
  const std::string dirs = Join(engine.cdi_spec_dirs, ", ");
  if (names.empty()) {
    why = std::string("cdi: no ") + kCdiGpuKind + " spec in " + dirs +
          " (generate one: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml)";
    return false;
  }
  std::vector<std::string> missing;
  for (const GpuDevice& gpu : gpus) {
    auto has = [&names](const std::string& name) {
      return std::find(names.begin(), names.end(), name) != names.end();
    };
    GpuTarget& target = plan.gpus[gpu.uuid];
    if (has(gpu.uuid)) {
      target.cdi_name = std::string(kCdiGpuKind) + "=" + gpu.uuid;
    } else if (has(std::to_string(gpu.index))) {
      target.cdi_name = std::string(kCdiGpuKind) + "=" + std::to_string(gpu.index);
    } else {
      missing.push_back(gpu.uuid);
    }
  }
  if (!missing.empty()) {
    why = std::string("cdi: the ") + kCdiGpuKind + " specs in " + dirs + " name no device for " +
          Join(missing, ", ");
    for (auto& [uuid, target] : plan.gpus) target.cdi_name.clear();
    return false;
  }
  plan.api_version = kCdiMinimumApi;
  plan.summary = std::string("cdi: ") + kCdiGpuKind + " devices from the specs in " + dirs;
  return true;
}

// ---- devices -----------------------------------------------------------------------------------------------------

// DriverLibDir: the directory under `root` holding libcuda.so.1 and libnvidia-ml.so.1, or empty.
std::string DriverLibDir(const fs::path& root) {
  for (const char* sub : {"lib64", "lib", "lib/x86_64-linux-gnu", "usr/lib64", "usr/lib/x86_64-linux-gnu", ""}) {
    const fs::path dir = *sub ? root / sub : root;
    if (IsFile(dir / "libcuda.so.1") && IsFile(dir / "libnvidia-ml.so.1")) return dir.lexically_normal().string();
  }
  return {};
}

std::string RunLdconfig() {
  std::string out;
  FILE* pipe = ::popen("/sbin/ldconfig -p 2>/dev/null", "r");
  if (pipe == nullptr) return out;
  char chunk[4096];
  size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof chunk, pipe)) > 0 && out.size() < (8u << 20)) out.append(chunk, n);
  ::pclose(pipe);
  return out;
}

// LdconfigDir: the directory `ldconfig -p` shows for `library` (e.g. libcuda.so.1), or empty.
std::string LdconfigDir(const std::string& listing, const std::string& library) {
  std::istringstream lines(listing);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line.compare(first, library.size() + 1, library + " ") != 0) continue;
    const size_t arrow = line.find("=> ");
    if (arrow == std::string::npos) continue;
    return fs::path(line.substr(arrow + 3)).parent_path().string();
  }
  return {};
}

bool IsSystemLibDir(const std::string& dir) {
  for (const char* prefix : {"/lib", "/usr/lib"})
    if (dir == prefix || dir.rfind(std::string(prefix) + "/", 0) == 0 || dir.rfind(std::string(prefix) + "64", 0) == 0)
      return true;
  return false;
}

// DriverLibraryNames: the driver's user-space libraries in a system directory (bound one by one).
std::vector<std::string> DriverLibraryNames(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    for (const char* prefix : {"libcuda.so", "libnvidia-", "libcudadebugger.so", "libnvcuvid.so"})
      if (name.rfind(prefix, 0) == 0 && name.find(".so") != std::string::npos) {
        out.push_back(name);
        break;
      }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool TryDevices(const GpuInjectionOptions& options, const std::vector<GpuDevice>& gpus, GpuInjection& plan,
                std::string& why) {
  const fs::path dev = options.device_dir;
  std::vector<std::string> missing;
  for (const char* node : {"nvidiactl", "nvidia-uvm"})
    if (!IsCharDevice(dev / node)) missing.push_back((dev / node).string());
  for (const GpuDevice& gpu : gpus) {
    GpuTarget& target = plan.gpus[gpu.uuid];
    if (!IsCharDevice(dev / GpuNode(target))) missing.push_back((dev / GpuNode(target)).string());
  }
  if (!missing.empty()) {
    why = "devices: no device node " + Join(missing, ", ");
    return false;
  }

  std::string lib_dir, root_seen;
  if (!options.driver_root.empty()) {
    lib_dir = DriverLibDir(options.driver_root);
    if (lib_dir.empty()) {
      why = "devices: --driver-root " + options.driver_root +
            " holds no libcuda.so.1 and libnvidia-ml.so.1 (looked in lib64, lib, lib/x86_64-linux-gnu, usr/lib64, "
            "usr/lib/x86_64-linux-gnu and the root)";
      return false;
    }
    root_seen = "--driver-root " + options.driver_root;
  } else {
    for (const std::string& root : options.driver_root_candidates) {
      lib_dir = DriverLibDir(root);
      if (!lib_dir.empty()) {
        root_seen = "driver root " + root;
        break;
      }
    }
    if (lib_dir.empty()) {
      const std::string listing = !options.ldconfig_listing.empty() ? options.ldconfig_listing
                                  : options.run_ldconfig           ? RunLdconfig()
                                                                   : std::string();
      const std::string cuda = LdconfigDir(listing, "libcuda.so.1");
      if (!cuda.empty() && cuda == LdconfigDir(listing, "libnvidia-ml.so.1")) {
        lib_dir = cuda;
        root_seen = "ldconfig's " + cuda;
      }
    }
    if (lib_dir.empty()) {
      why = "devices: no driver libraries (libcuda.so.1 and libnvidia-ml.so.1) under " +
            Join(options.driver_root_candidates, ", ") + " nor in ldconfig's cache; give --driver-root";
      return false;
    }
  }

  if (IsSystemLibDir(lib_dir)) {
    for (const std::string& name : DriverLibraryNames(lib_dir))
      plan.library_binds.push_back(lib_dir + "/" + name + ":" + kSystemDriverLibDir + "/" + name + ":ro");
    plan.library_path = kSystemDriverLibDir;
  } else {
    plan.library_binds.push_back(lib_dir + ":" + lib_dir + ":ro");
    plan.library_path = lib_dir;
  }
  plan.device_dir = options.device_dir;
  plan.summary = "devices: " + dev.string() + "/nvidia<minor>, nvidiactl, nvidia-uvm; libraries of " + root_seen +
                 " (" + lib_dir + ") read-only, LD_LIBRARY_PATH=" + plan.library_path;
  return true;
}

}  // namespace

std::string GpuInjectionModeName(GpuInjectionMode mode) {
  switch (mode) {
    case GpuInjectionMode::kNvidia: return "nvidia";
    case GpuInjectionMode::kCdi: return "cdi";
    case GpuInjectionMode::kDevices: return "devices";
    case GpuInjectionMode::kEnvironmentOnly: return "environment-only";
    case GpuInjectionMode::kNone: break;
  }
  return "none";
}

GpuInjection EnvironmentOnlyInjection(const std::vector<GpuDevice>& gpus) {
  GpuInjection plan;
  plan.mode = GpuInjectionMode::kEnvironmentOnly;
  for (const GpuDevice& gpu : gpus) plan.gpus[gpu.uuid] = GpuTarget{gpu.index, gpu.minor, ""};
  plan.summary =
      "environment-only: the GPUs are simulated (--gpus fake:...), so GPU containers start with the GPU environment "
      "(NVIDIA_VISIBLE_DEVICES, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, ...) and no GPU device; a CUDA program in them "
      "finds no GPU";
  return plan;
}

EngineGpuSupport ParseEngineGpuSupport(const Json& info, const std::string& api_version) {
  EngineGpuSupport out;
  out.api_version = api_version;
  if (!info.is_object()) return out;
  if (info.contains("DefaultRuntime") && info["DefaultRuntime"].is_string())
    out.default_runtime = info["DefaultRuntime"].get<std::string>();
  if (info.contains("Runtimes") && info["Runtimes"].is_object())
    for (const auto& item : info["Runtimes"].items()) out.runtimes.push_back(item.key());
  if (info.contains("CDISpecDirs") && info["CDISpecDirs"].is_array())
    for (const Json& dir : info["CDISpecDirs"])
      if (dir.is_string()) out.cdi_spec_dirs.push_back(dir.get<std::string>());
  return out;
}

Result<GpuInjection> ChooseGpuInjection(const GpuInjectionOptions& options, const EngineGpuSupport& engine,
                                        const std::vector<GpuDevice>& gpus) {
  const std::string& mode = options.mode;
  if (mode != "auto" && mode != "nvidia" && mode != "cdi" && mode != "devices") {
    return Status::InvalidParameter("--docker-gpu must be auto, nvidia, cdi or devices (got '" + mode + "')");
  }
  std::vector<std::string> reasons;
  auto fresh = [&options, &gpus] {
    GpuInjection plan;
    plan.device_dir = options.device_dir;
    plan.extra_binds = options.extra_binds;
    for (const GpuDevice& gpu : gpus) plan.gpus[gpu.uuid] = GpuTarget{gpu.index, gpu.minor, ""};
    return plan;
  };
  struct Attempt {
    const char* name;
    GpuInjectionMode mode;
  };
  for (const Attempt& attempt : {Attempt{"nvidia", GpuInjectionMode::kNvidia}, Attempt{"cdi", GpuInjectionMode::kCdi},
                                 Attempt{"devices", GpuInjectionMode::kDevices}}) {
    if (mode != "auto" && mode != attempt.name) continue;
    GpuInjection plan = fresh();
    std::string why;
    bool works = false;
    switch (attempt.mode) {
      case GpuInjectionMode::kNvidia: works = TryNvidia(engine, plan, why); break;
      case GpuInjectionMode::kCdi: works = TryCdi(engine, gpus, plan, why); break;
      case GpuInjectionMode::kDevices: works = TryDevices(options, gpus, plan, why); break;
      case GpuInjectionMode::kEnvironmentOnly:
      case GpuInjectionMode::kNone: break;
    }
    if (works) {
      plan.mode = attempt.mode;
      if (mode == "auto" && !reasons.empty()) plan.summary += " (not " + Join(reasons, "; not ") + ")";
      return plan;
    }
    reasons.push_back(why);
  }
  GpuInjection none = fresh();
  none.summary = "no GPU injection works on this host (--docker-gpu " + mode + "): " + Join(reasons, "; ");
  return none;
}

Result<GpuInjection> DetectGpuInjection(const std::string& socket_path, const GpuInjectionOptions& options,
                                        const std::vector<GpuDevice>& gpus, std::chrono::milliseconds timeout) {
  DockerClient client({socket_path, timeout, 4 << 20});
  auto version = client.Request("GET", "/version");
  if (!version.ok()) return version.status();
  if (version->status != 200) {
    return Status::Server("docker engine at " + socket_path + ": version: " + EngineMessage(*version));
  }
  const Json version_json = Json::parse(version->body, nullptr, false);
  const std::string api = version_json.is_object() ? version_json.value("ApiVersion", "") : "";
  auto info = client.Request("GET", "/info");
  if (!info.ok()) return info.status();
  if (info->status != 200) return Status::Server("docker engine at " + socket_path + ": info: " + EngineMessage(*info));
  return ChooseGpuInjection(options, ParseEngineGpuSupport(Json::parse(info->body, nullptr, false), api), gpus);
}

std::vector<std::string> VisibleGpus(const std::vector<KeyValuePair>& environment) {
  std::string value;
  for (const KeyValuePair& kv : environment)
    if (kv.name == "NVIDIA_VISIBLE_DEVICES") value = kv.value;  // the last one wins, as in the container
  std::vector<std::string> out;
  if (value.empty() || value == "void" || value == "none") return out;
  std::istringstream parts(value);
  std::string part;
  while (std::getline(parts, part, ','))
    if (!part.empty()) out.push_back(part);
  return out;
}

Status InjectGpus(const GpuInjection& plan, const std::vector<std::string>& uuids, Json& body) {
  if (uuids.empty()) return Status::Ok();
  const std::string mode = GpuInjectionModeName(plan.mode);
  if (plan.mode == GpuInjectionMode::kNone) {
    return Status::Unsupported("docker GPU injection: the container needs GPU " + Join(uuids, ", ") + " but " +
                               plan.summary);
  }
  Json& host = body["HostConfig"];
  auto add_binds = [&host](const std::vector<std::string>& binds) {
    if (binds.empty()) return;
    if (!host.contains("Binds") || !host["Binds"].is_array()) host["Binds"] = Json::array();
    for (const std::string& bind : binds) host["Binds"].push_back(bind);
  };
  std::vector<const GpuTarget*> targets;
  for (const std::string& uuid : uuids) {
    auto it = plan.gpus.find(uuid);
    if (it == plan.gpus.end()) {
      return Status::Unsupported("docker GPU injection " + mode + ": GPU " + uuid + " is not a GPU of this host");
    }
    targets.push_back(&it->second);
  }

  switch (plan.mode) {
    case GpuInjectionMode::kNvidia:
      // NVIDIA_VISIBLE_DEVICES is already in the environment (the agent sets it for every container).
      host["Runtime"] = "nvidia";
      break;
    case GpuInjectionMode::kCdi: {
      Json ids = Json::array();
      for (size_t i = 0; i < targets.size(); ++i) {
        if (targets[i]->cdi_name.empty()) {
          return Status::Unsupported("docker GPU injection cdi: no CDI device names GPU " + uuids[i]);
        }
        ids.push_back(targets[i]->cdi_name);
      }
      if (!host.contains("DeviceRequests") || !host["DeviceRequests"].is_array()) host["DeviceRequests"] = Json::array();
      host["DeviceRequests"].push_back({{"Driver", "cdi"}, {"DeviceIDs", ids}});
      break;
    }
    case GpuInjectionMode::kDevices: {
      const fs::path dev = plan.device_dir;
      std::vector<std::string> nodes;
      for (const GpuTarget* target : targets) nodes.push_back(GpuNode(*target));
      nodes.push_back("nvidiactl");
      nodes.push_back("nvidia-uvm");
      if (IsCharDevice(dev / "nvidia-uvm-tools")) nodes.push_back("nvidia-uvm-tools");
      Json devices = Json::array();
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (!IsCharDevice(dev / nodes[i])) {
          return Status::Unsupported("docker GPU injection devices: no device node " + (dev / nodes[i]).string() +
                                     (i < targets.size() ? " for GPU " + uuids[i] : std::string()));
        }
        devices.push_back({{"PathOnHost", (dev / nodes[i]).string()},
                           {"PathInContainer", "/dev/" + nodes[i]},
                           {"CgroupPermissions", "rwm"}});
      }
      host["Devices"] = devices;
      add_binds(plan.library_binds);
      // LD_LIBRARY_PATH: the driver's libraries first, then what the task set.
      Json& env = body["Env"];
      if (!env.is_array()) env = Json::array();
      bool found = false;
      for (Json& entry : env) {
        const std::string text = entry.get<std::string>();
        if (text.rfind("LD_LIBRARY_PATH=", 0) != 0) continue;
        const std::string theirs = text.substr(16);
        entry = "LD_LIBRARY_PATH=" + plan.library_path + (theirs.empty() ? "" : ":" + theirs);
        found = true;
      }
      if (!found) env.push_back("LD_LIBRARY_PATH=" + plan.library_path);
      break;
    }
    case GpuInjectionMode::kEnvironmentOnly:  // the environment is the container's already; nothing to add
    case GpuInjectionMode::kNone: break;
  }
  add_binds(plan.extra_binds);
  return Status::Ok();
}

}  // namespace gpupack::agent
