// ContainerEnvironment: merge the task's variables, then inject the GPU/MPS ones (docs/agent-channel.md). Pure functions.
#include "agent/environment.h"

#include <algorithm>
#include <string_view>

namespace gpupack::agent {
namespace {

constexpr std::string_view kPipeDir = "CUDA_MPS_PIPE_DIRECTORY";
constexpr std::string_view kLogDir = "CUDA_MPS_LOG_DIRECTORY";
constexpr std::string_view kMemLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
constexpr std::string_view kThreadPercentage = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
constexpr std::string_view kCudaVisible = "CUDA_VISIBLE_DEVICES";
constexpr std::string_view kNvidiaVisible = "NVIDIA_VISIBLE_DEVICES";

// Env is an ordered map: a name keeps the position of its first appearance, a later value replaces it.
class Env {
 public:
  void Set(std::string_view name, std::string value) {
    auto it = Find(name);
    if (it != vars_.end()) {
      it->value = std::move(value);
    } else {
      vars_.push_back({std::string(name), std::move(value)});
    }
  }
  void Erase(std::string_view name) {
    std::erase_if(vars_, [&](const KeyValuePair& kv) { return kv.name == name; });
  }
  std::vector<KeyValuePair> Take() && { return std::move(vars_); }

 private:
  std::vector<KeyValuePair>::iterator Find(std::string_view name) {
    return std::find_if(vars_.begin(), vars_.end(), [&](const KeyValuePair& kv) { return kv.name == name; });
  }
  std::vector<KeyValuePair> vars_;
};

std::string Join(const std::vector<std::string>& parts, char sep) {
  std::string out;
  for (const auto& p : parts) {
    if (!out.empty()) out += sep;
    out += p;
  }
  return out;
}

// The variables only the agent may set: a task that sets them itself could join (or escape) our MPS daemon.
void EraseReservedMps(Env& env) {
  for (auto name : {kPipeDir, kLogDir, kMemLimit, kThreadPercentage}) env.Erase(name);
}

}  // namespace

std::string MpsMemoryLimit(MiB mib) { return "0=" + std::to_string(mib) + "M"; }

std::vector<KeyValuePair> ContainerEnvironment(const std::vector<KeyValuePair>& definition_env,
                                               const std::vector<KeyValuePair>& override_env,
                                               const GpuAssignment& gpus, const std::string& mps_pipe_dir,
                                               RuntimeKind runtime) {
  Env env;
  for (const auto& kv : definition_env) env.Set(kv.name, kv.value);
  for (const auto& kv : override_env) env.Set(kv.name, kv.value);

  const std::string_view visible = runtime == RuntimeKind::kDocker ? kNvidiaVisible : kCudaVisible;
  if (gpus.gpu_uuids.empty()) {
    // No GPU (also a shared assignment without a GPU, which would be a bug upstream: safer to hide every GPU
    // than to run a container without its limits).
    EraseReservedMps(env);
    env.Set(visible, runtime == RuntimeKind::kDocker ? "void" : "");
  } else if (gpus.mps) {
    // Shared: exactly one GPU; the MPS variables win over anything the task set.
    env.Set(kPipeDir, mps_pipe_dir);
    env.Set(visible, gpus.gpu_uuids.front());
    env.Set(kMemLimit, MpsMemoryLimit(gpus.mps->memory_mib));
    if (gpus.mps->max_compute_percent) {
      env.Set(kThreadPercentage, std::to_string(*gpus.mps->max_compute_percent));
    } else {
      env.Erase(kThreadPercentage);
    }
  } else {
    // Dedicated: the whole GPUs, outside MPS.
    EraseReservedMps(env);
    env.Set(visible, Join(gpus.gpu_uuids, ','));
  }
  return std::move(env).Take();
}

std::vector<KeyValuePair> WithHostDefaults(std::vector<KeyValuePair> env,
                                           const std::function<const char*(const char*)>& lookup) {
  for (const char* name : kInheritedHostVariables) {
    bool set = std::any_of(env.begin(), env.end(), [&](const KeyValuePair& kv) { return kv.name == name; });
    if (set) continue;
    if (const char* value = lookup(name); value != nullptr) env.push_back({name, value});
  }
  return env;
}

}  // namespace gpupack::agent
