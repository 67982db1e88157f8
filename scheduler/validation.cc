// Validation of client input against ECS's rules.
//
// The checks run in a fixed order (task-level fields, then each container in order, then rules across
// containers, then placement constraints) so that the first refusal a client sees is stable and the tests can
// name it. Messages follow ECS's wording where ECS has one ("Invalid 'memory' setting for container 'web'.")
// and then say what to change.
#include "scheduler/validation.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>

#include "scheduler/cluster_state.h"
#include "scheduler/query.h"
#include "scheduler/strategies.h"

namespace gpupack {
namespace {

constexpr size_t kMaxNameLength = 255;
constexpr size_t kMaxContainers = 10;
constexpr size_t kMaxImageLength = 255;              // ECS: "Up to 255 letters ..."
constexpr int64_t kMinContainerMemoryMib = 6;        // Docker's floor for a hard memory limit
constexpr int64_t kMinMemoryReservationMib = 1;
constexpr int64_t kMaxMemoryMib = int64_t{1} << 40;  // 1 EiB: far above any host, keeps sums in range
constexpr MiB kMaxMpsMemoryMib = MiB{1} << 30;       // 1 PiB: far above any GPU, keeps sums in range
constexpr int kMaxGpusPerContainer = 1024;           // far above any host; keeps the task's sum in an int
constexpr size_t kMaxPlacementConstraints = 10;
constexpr size_t kMaxPlacementStrategies = 5;
constexpr size_t kMaxQuotedLength = 64;

constexpr std::string_view kGpuType = "GPU";
constexpr std::string_view kInferenceAcceleratorType = "InferenceAccelerator";
constexpr std::string_view kNameRule =
    "up to 255 letters (uppercase and lowercase), numbers, underscores and hyphens are allowed";

// Quoted returns 'text' for a message, cut to a readable length and with control characters shown as '?', so
// that a hostile or accidental megabyte of input never ends up in an error message or a log line.
std::string Quoted(std::string_view text) {
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < kMaxQuotedLength; ++i) {
    unsigned char ch = static_cast<unsigned char>(text[i]);
    out += (ch < 0x20 || ch == 0x7f) ? '?' : static_cast<char>(ch);
  }
  if (text.size() > kMaxQuotedLength) out += "...";
  out += "'";
  return out;
}

// JoinWords: "a", "a or b", "a, b or c" (with `last` = " or ").
std::string JoinWords(const std::vector<std::string>& words, std::string_view last) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? last : std::string_view(", ");
    out += words[i];
  }
  return out;
}

// ValidateStrategy checks one placementStrategy against the strategy registry (scheduler/strategies.h). The
// refusals name what the registry has: the types ("valid types are binpack, spread and random"), and the
// fields of the request's type ("binpack requires 'field' cpu, memory, gpuMemory or fragmentation"; a type whose
// kinds take no field: "random takes no 'field'"). Planner-only kinds (fgd) are not RunTask's.
Status ValidateStrategy(const PlacementStrategy& ps) {
  if (FindStrategyKind(ps)) return Status::Ok();
  const std::vector<std::string_view> types = StrategyTypes();
  if (std::find(types.begin(), types.end(), ps.type) == types.end()) {
    return Status::InvalidParameter("Invalid placement strategy type " + Quoted(ps.type) + "; valid types are " +
                                    JoinWords(std::vector<std::string>(types.begin(), types.end()), " and ") + ".");
  }
  const std::vector<std::string> fields = StrategyFieldNames(ps.type);
  if (fields.empty()) {
    return Status::InvalidParameter("Invalid placement strategy: " + ps.type + " takes no 'field', got " +
                                    Quoted(ps.field) + ".");
  }
  return Status::InvalidParameter("Invalid placement strategy: " + ps.type + " requires 'field' " +
                                  JoinWords(fields, " or ") + ", got " + Quoted(ps.field) + ".");
}

std::string ContainerSetting(std::string_view field, const std::string& container) {
  return "Invalid '" + std::string(field) + "' setting for container " + Quoted(container) + ". ";
}

bool IsNameChar(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
         ch == '-';
}

// ParsePositiveInt parses a string of decimal digits (no sign, no spaces) into 1..max.
std::optional<int> ParsePositiveInt(std::string_view text, int max) {
  if (text.empty()) return std::nullopt;
  for (char ch : text)
    if (ch < '0' || ch > '9') return std::nullopt;
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || value < 1 || value > max) return std::nullopt;
  return value;
}

bool IsGpuSharing(const ResourceRequirement& rr) { return rr.has_sharing_strategy || rr.mps.has_value(); }

enum class GpuOption { kNone, kShared, kDedicated };

// ValidateResourceRequirement checks one entry of a container definition's resourceRequirements.
Status ValidateResourceRequirement(const std::string& container, const ResourceRequirement& rr) {
  const std::string prefix = ContainerSetting("resourceRequirements", container);
  const bool sharing = IsGpuSharing(rr);
  if (rr.type != kGpuType && rr.type != kInferenceAcceleratorType) {
    return Status::Client(prefix + "Resource requirement type " + Quoted(rr.type) +
                          " is not supported; valid types are GPU and InferenceAccelerator.");
  }
  if (rr.type == kInferenceAcceleratorType) {
    if (sharing) {
      return Status::Client(prefix +
                            "'sharingStrategy' is allowed only on a resource requirement of type GPU, not "
                            "InferenceAccelerator.");
    }
    if (!rr.value || rr.value->empty()) {
      return Status::Client(prefix +
                            "An InferenceAccelerator requirement needs 'value' (the accelerator's deviceName).");
    }
    return Status::Ok();
  }
  // type GPU: exactly one of value and sharingStrategy.
  if (rr.value && sharing) {
    return Status::Client(prefix +
                          "A GPU requirement has either 'value' (dedicated GPUs) or 'sharingStrategy' (a shared "
                          "GPU), not both.");
  }
  if (!rr.value && !sharing) {
    return Status::Client(prefix +
                          "A GPU requirement needs either 'value' (the number of dedicated GPUs) or "
                          "'sharingStrategy' with 'nvidiaMps' (a shared GPU).");
  }
  if (sharing) {
    if (!rr.mps) {
      return Status::Client(prefix +
                            "'sharingStrategy' must contain 'nvidiaMps' with 'memory' (MiB of GPU memory) and, "
                            "optionally, 'maxComputePercent'.");
    }
    if (rr.mps->memory_mib < 1) {
      return Status::Client(prefix + "'sharingStrategy.nvidiaMps.memory' is required and must be an integer >= " +
                            std::to_string(kMinMpsMemoryMib) + " (MiB of GPU memory), got " +
                            std::to_string(rr.mps->memory_mib) + ".");
    }
    if (rr.mps->memory_mib < kMinMpsMemoryMib) {
      // A GiB figure written by mistake ("16" meant 16 GiB) would pass as 16 MiB and the task would then die of
      // out-of-memory on the GPU: the CUDA context alone does not fit (docs/api.md, Task definitions).
      return Status::Client(prefix + "'sharingStrategy.nvidiaMps.memory' is in MiB and must be at least " +
                            std::to_string(kMinMpsMemoryMib) + " MiB, enough for a CUDA context; got " +
                            std::to_string(rr.mps->memory_mib) + " MiB. For " + std::to_string(rr.mps->memory_mib) +
                            " GiB write " + std::to_string(rr.mps->memory_mib * 1024) + ".");
    }
    if (rr.mps->memory_mib > kMaxMpsMemoryMib) {
      return Status::Client(prefix + "'sharingStrategy.nvidiaMps.memory' must be at most " +
                            std::to_string(kMaxMpsMemoryMib) + " MiB, got " + std::to_string(rr.mps->memory_mib) +
                            ".");
    }
    if (rr.mps->max_compute_percent &&
        (*rr.mps->max_compute_percent < 1 || *rr.mps->max_compute_percent > 100)) {
      return Status::Client(prefix +
                            "'sharingStrategy.nvidiaMps.maxComputePercent' must be an integer from 1 to 100 "
                            "(omit it for 100), got " +
                            std::to_string(*rr.mps->max_compute_percent) + ".");
    }
    return Status::Ok();
  }
  if (!ParsePositiveInt(*rr.value, kMaxGpusPerContainer)) {
    return Status::Client(prefix + "The 'value' of a GPU requirement is the number of dedicated GPUs, a whole "
                                   "number from 1 to " +
                          std::to_string(kMaxGpusPerContainer) + ", got " + Quoted(*rr.value) +
                          ". To share a GPU, use 'sharingStrategy' with 'nvidiaMps' instead.");
  }
  return Status::Ok();
}

// ValidateContainerResources checks a container's GPU requirements and reports which GPU option it uses.
Status ValidateContainerResources(const ContainerDefinition& c, GpuOption& option) {
  option = GpuOption::kNone;
  std::set<std::string> seen_types;
  for (const auto& rr : c.resource_requirements) {
    if (Status s = ValidateResourceRequirement(c.name, rr); !s.ok()) return s;
    if (!seen_types.insert(rr.type).second) {
      return Status::Client(ContainerSetting("resourceRequirements", c.name) + "At most one requirement of type " +
                            Quoted(rr.type) + " is allowed per container.");
    }
    if (rr.type == kGpuType) option = IsGpuSharing(rr) ? GpuOption::kShared : GpuOption::kDedicated;
  }
  return Status::Ok();
}

Status ValidateEnvironment(const ContainerDefinition& c) {
  for (const auto& kv : c.environment) {
    if (IsReservedMpsVariable(kv.name)) {
      const bool memory = kv.name == kMpsMemLimitVar;
      return Status::Client(
          ContainerSetting("environment", c.name) + kv.name +
          " is reserved: the gpupack agent sets it for containers that share a GPU, from the GPU requirement's "
          "'sharingStrategy.nvidiaMps." +
          (memory ? "memory'" : "maxComputePercent'") + ". Remove it from the container definition and set " +
          (memory ? "'nvidiaMps.memory'" : "'nvidiaMps.maxComputePercent'") + " instead.");
    }
  }
  return Status::Ok();
}

Status ValidateContainer(const ContainerDefinition& c, size_t index, bool task_has_memory, GpuOption& option) {
  if (c.name.empty()) {
    return Status::Client("Invalid container definition at index " + std::to_string(index) +
                          ": 'name' is required.");
  }
  if (!IsValidName(c.name)) {
    return Status::Client("Invalid 'name' setting for container " + Quoted(c.name) + ". Container names: " +
                          std::string(kNameRule) + ".");
  }
  if (c.image.empty()) {
    return Status::Client(ContainerSetting("image", c.name) + "'image' is required.");
  }
  if (c.image.size() > kMaxImageLength) {
    return Status::Client(ContainerSetting("image", c.name) + "The image name is " +
                          std::to_string(c.image.size()) + " characters long; at most " +
                          std::to_string(kMaxImageLength) + " are allowed.");
  }
  for (char ch : c.image) {
    unsigned char u = static_cast<unsigned char>(ch);
    if (u <= 0x20 || u == 0x7f) {
      return Status::Client(ContainerSetting("image", c.name) +
                            "The image name must not contain spaces or control characters.");
    }
  }
  if (c.cpu < 0) {
    return Status::Client(ContainerSetting("cpu", c.name) + "'cpu' is a number of CPU units and must be 0 or "
                                                            "greater, got " +
                          std::to_string(c.cpu) + ".");
  }
  if (c.memory && (*c.memory < kMinContainerMemoryMib || *c.memory > kMaxMemoryMib)) {
    return Status::Client(ContainerSetting("memory", c.name) + "The memory limit must be at least " +
                          std::to_string(kMinContainerMemoryMib) + " MiB" +
                          (*c.memory > kMaxMemoryMib ? " and at most " + std::to_string(kMaxMemoryMib) + " MiB" : "") +
                          ", got " + std::to_string(*c.memory) + ".");
  }
  if (c.memory_reservation &&
      (*c.memory_reservation < kMinMemoryReservationMib || *c.memory_reservation > kMaxMemoryMib)) {
    return Status::Client(ContainerSetting("memoryReservation", c.name) + "The memory reservation must be at least " +
                          std::to_string(kMinMemoryReservationMib) + " MiB" +
                          (*c.memory_reservation > kMaxMemoryMib
                               ? " and at most " + std::to_string(kMaxMemoryMib) + " MiB"
                               : "") +
                          ", got " + std::to_string(*c.memory_reservation) + ".");
  }
  if (c.memory && c.memory_reservation && *c.memory_reservation > *c.memory) {
    return Status::Client(ContainerSetting("memoryReservation", c.name) + "'memoryReservation' (" +
                          std::to_string(*c.memory_reservation) +
                          " MiB) must be less than or equal to 'memory' (" + std::to_string(*c.memory) +
                          " MiB).");
  }
  if (!task_has_memory && !c.memory && !c.memory_reservation) {
    return Status::Client("Invalid setting for container " + Quoted(c.name) +
                          ". At least one of 'memory' or 'memoryReservation' must be specified.");
  }
  if (Status s = ValidateEnvironment(c); !s.ok()) return s;
  return ValidateContainerResources(c, option);
}

std::string JoinQuoted(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ", ";
    out += Quoted(names[i]);
  }
  return out;
}

bool IsKnownCompatibility(const std::string& c) {
  return c == "EC2" || c == "FARGATE" || c == "EXTERNAL" || c == "MANAGED_INSTANCES";
}

bool IsKnownNetworkMode(const std::string& m) {
  return m == "bridge" || m == "host" || m == "awsvpc" || m == "none";
}

// ValidateTaskSize checks task-level cpu/memory and, when given, that the containers fit inside them.
Status ValidateTaskSize(const TaskDefinition& td) {
  std::optional<int64_t> task_cpu;
  std::optional<int64_t> task_memory;
  if (td.cpu) {
    task_cpu = ParseTaskCpu(*td.cpu);
    if (!task_cpu || *task_cpu <= 0) {
      return Status::Client("Invalid 'cpu' setting for task. " + Quoted(*td.cpu) +
                            " is not a positive number of CPU units (e.g. \"1024\") or vCPUs (e.g. \"1 vCPU\").");
    }
  }
  if (td.memory) {
    task_memory = ParseTaskMemory(*td.memory);
    if (!task_memory || *task_memory <= 0) {
      return Status::Client("Invalid 'memory' setting for task. " + Quoted(*td.memory) +
                            " is not a positive amount of memory in MiB (e.g. \"2048\") or GB (e.g. \"2 GB\").");
    }
  }
  return Status::Ok();
}

// ValidateContainersFitTask: with task-level cpu/memory, the containers' reservations must fit inside them (ECS:
// "the total amount reserved for all containers within a task must be lower than the task value"; equal is
// accepted). Runs after every container was validated, so values are bounded and sums cannot overflow.
Status ValidateContainersFitTask(const TaskDefinition& td) {
  if (td.cpu) {
    const int64_t task_cpu = *ParseTaskCpu(*td.cpu);
    int64_t sum = 0;
    for (const auto& c : td.containers) {
      if (__builtin_add_overflow(sum, c.cpu, &sum)) sum = INT64_MAX;
    }
    if (sum > task_cpu) {
      return Status::Client("Invalid 'cpu' setting for task. The containers reserve " + std::to_string(sum) +
                            " CPU units in total, more than the task's " + std::to_string(task_cpu) + ".");
    }
  }
  if (td.memory) {
    const int64_t task_memory = *ParseTaskMemory(*td.memory);
    int64_t sum = 0;
    for (const auto& c : td.containers) {
      if (c.memory && *c.memory > task_memory) {
        return Status::Client(ContainerSetting("memory", c.name) + "The container's memory limit (" +
                              std::to_string(*c.memory) + " MiB) exceeds the task's memory (" +
                              std::to_string(task_memory) + " MiB).");
      }
      sum += c.memory_reservation ? *c.memory_reservation : c.memory.value_or(0);
    }
    if (sum > task_memory) {
      return Status::Client("Invalid 'memory' setting for task. The containers reserve " + std::to_string(sum) +
                            " MiB in total, more than the task's " + std::to_string(task_memory) + " MiB.");
    }
  }
  return Status::Ok();
}

Status ValidateTaskDefinitionConstraints(const std::vector<PlacementConstraint>& constraints) {
  if (constraints.size() > kMaxPlacementConstraints) {
    return Status::Client("Invalid 'placementConstraints' setting for task definition. At most " +
                          std::to_string(kMaxPlacementConstraints) + " placement constraints are allowed, got " +
                          std::to_string(constraints.size()) + ".");
  }
  for (const auto& pc : constraints) {
    if (pc.type == "distinctInstance") {
      return Status::Client(
          "Invalid 'placementConstraints' setting for task definition. A task definition accepts only memberOf "
          "constraints; give distinctInstance in RunTask's placementConstraints instead.");
    }
    if (pc.type != "memberOf") {
      return Status::Client("Invalid 'placementConstraints' setting for task definition. Constraint type " +
                            Quoted(pc.type) + " is not supported; a task definition accepts only memberOf.");
    }
    if (pc.expression.empty()) {
      return Status::Client(
          "Invalid 'placementConstraints' setting for task definition. A memberOf constraint requires an "
          "'expression' in the cluster query language.");
    }
    auto parsed = query::Parse(pc.expression);
    if (!parsed.ok()) {
      return Status::Client("Invalid 'placementConstraints' setting for task definition. " +
                            parsed.status().message());
    }
  }
  return Status::Ok();
}

}  // namespace

bool IsValidName(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (char ch : name)
    if (!IsNameChar(ch)) return false;
  return true;
}

bool IsReservedMpsVariable(std::string_view name) { return name == kMpsMemLimitVar || name == kMpsThreadPercentVar; }

Status ValidateTaskDefinition(const TaskDefinition& td) {
  if (td.family.empty()) return Status::Client("Invalid 'family' setting for task definition. 'family' is required.");
  if (!IsValidName(td.family)) {
    return Status::Client("Invalid 'family' setting for task definition. Family " + Quoted(td.family) + ": " +
                          std::string(kNameRule) + ".");
  }
  if (td.containers.empty()) {
    return Status::Client("Invalid 'containerDefinitions' setting for task definition. At least one container "
                          "definition is required.");
  }
  if (td.containers.size() > kMaxContainers) {
    return Status::Client("Invalid 'containerDefinitions' setting for task definition. At most " +
                          std::to_string(kMaxContainers) + " container definitions are allowed, got " +
                          std::to_string(td.containers.size()) + ".");
  }
  if (Status s = ValidateTaskSize(td); !s.ok()) return s;
  for (const auto& compat : td.requires_compatibilities) {
    if (!IsKnownCompatibility(compat)) {
      return Status::Client("Invalid 'requiresCompatibilities' setting for task definition. " + Quoted(compat) +
                            " is not one of EC2, FARGATE, EXTERNAL, MANAGED_INSTANCES.");
    }
  }
  if (!td.network_mode.empty() && !IsKnownNetworkMode(td.network_mode)) {
    return Status::Client("Invalid 'networkMode' setting for task definition. " + Quoted(td.network_mode) +
                          " is not one of bridge, host, awsvpc, none.");
  }

  std::set<std::string> names;
  std::vector<std::string> shared;
  std::vector<std::string> dedicated;
  bool any_essential = false;
  for (size_t i = 0; i < td.containers.size(); ++i) {
    const auto& c = td.containers[i];
    GpuOption option = GpuOption::kNone;
    if (Status s = ValidateContainer(c, i, td.memory.has_value(), option); !s.ok()) return s;
    if (!names.insert(c.name).second) {
      return Status::Client("Invalid 'name' setting for container " + Quoted(c.name) +
                            ". Container names must be unique within a task definition.");
    }
    any_essential = any_essential || c.essential;
    if (option == GpuOption::kShared) shared.push_back(c.name);
    if (option == GpuOption::kDedicated) dedicated.push_back(c.name);
  }
  if (!any_essential) {
    return Status::Client("Invalid 'essential' setting for task definition. At least one container must be "
                          "essential.");
  }
  if (Status s = ValidateContainersFitTask(td); !s.ok()) return s;

  if (!shared.empty() && !dedicated.empty()) {
    return Status::Client("Invalid GPU setting for task definition. All GPU containers of a task definition must "
                          "use the same option: shared ('sharingStrategy') on " +
                          JoinQuoted(shared) + ", dedicated ('value') on " + JoinQuoted(dedicated) +
                          ". Use either shared GPUs or dedicated GPUs for all of them.");
  }
  if (!shared.empty()) {
    for (const auto& compat : td.requires_compatibilities) {
      if (compat == "FARGATE" || compat == "EXTERNAL") {
        return Status::Client("Invalid 'requiresCompatibilities' setting for task definition. GPU sharing "
                              "('sharingStrategy' on " +
                              JoinQuoted(shared) + ") is not supported with " + compat +
                              "; use EC2 or MANAGED_INSTANCES.");
      }
    }
  }
  return ValidateTaskDefinitionConstraints(td.placement_constraints);
}

Status ValidateOverrides(const TaskDefinition& td, const TaskOverride& overrides) {
  if (overrides.cpu) {
    auto cpu = ParseTaskCpu(*overrides.cpu);
    if (!cpu || *cpu <= 0) {
      return Status::Client("Invalid 'cpu' override for task. " + Quoted(*overrides.cpu) +
                            " is not a positive number of CPU units (e.g. \"1024\") or vCPUs (e.g. \"1 vCPU\").");
    }
  }
  if (overrides.memory) {
    auto memory = ParseTaskMemory(*overrides.memory);
    if (!memory || *memory <= 0) {
      return Status::Client("Invalid 'memory' override for task. " + Quoted(*overrides.memory) +
                            " is not a positive amount of memory in MiB (e.g. \"2048\") or GB (e.g. \"2 GB\").");
    }
  }

  bool definition_shares_gpu = false;
  for (const auto& c : td.containers)
    for (const auto& rr : c.resource_requirements)
      if (rr.type == kGpuType && IsGpuSharing(rr)) definition_shares_gpu = true;

  std::set<std::string> seen;
  for (const auto& o : overrides.container_overrides) {
    const ContainerDefinition* def = nullptr;
    for (const auto& c : td.containers)
      if (c.name == o.name) def = &c;
    if (def == nullptr) {
      return Status::Client("Invalid container override: " + Quoted(o.name) +
                            " is not a container of task definition " + Quoted(td.family) + ".");
    }
    if (!seen.insert(o.name).second) {
      return Status::Client("Invalid container override: container " + Quoted(o.name) +
                            " is overridden more than once; give one override per container.");
    }
    const std::string prefix = "Invalid override for container " + Quoted(o.name) + ". ";
    if (o.cpu && *o.cpu < 0) {
      return Status::Client(prefix + "'cpu' must be 0 or greater (CPU units), got " + std::to_string(*o.cpu) + ".");
    }
    if (o.memory && (*o.memory < kMinContainerMemoryMib || *o.memory > kMaxMemoryMib)) {
      return Status::Client(prefix + "'memory' must be at least " + std::to_string(kMinContainerMemoryMib) +
                            " MiB, got " + std::to_string(*o.memory) + ".");
    }
    if (o.memory_reservation &&
        (*o.memory_reservation < kMinMemoryReservationMib || *o.memory_reservation > kMaxMemoryMib)) {
      return Status::Client(prefix + "'memoryReservation' must be at least " +
                            std::to_string(kMinMemoryReservationMib) + " MiB, got " +
                            std::to_string(*o.memory_reservation) + ".");
    }
    // The limits that will apply once the override is merged with the definition.
    auto memory = o.memory ? o.memory : def->memory;
    auto reservation = o.memory_reservation ? o.memory_reservation : def->memory_reservation;
    if (memory && reservation && *reservation > *memory) {
      return Status::Client(prefix + "'memoryReservation' (" + std::to_string(*reservation) +
                            " MiB) must be less than or equal to 'memory' (" + std::to_string(*memory) + " MiB).");
    }
    // Reserved MPS variables in the override's environment are accepted: the agent's values win (docs/placement.md).
    std::set<std::string> seen_types;
    for (const auto& rr : o.resource_requirements) {
      if (IsGpuSharing(rr)) {
        return Status::Client(prefix +
                              "sharingStrategy cannot be overridden: a container's GPU sharing is fixed by its task "
                              "definition; register a new revision to change 'nvidiaMps'.");
      }
      if (rr.type != kGpuType && rr.type != kInferenceAcceleratorType) {
        return Status::Client(prefix + "Resource requirement type " + Quoted(rr.type) +
                              " is not supported; valid types are GPU and InferenceAccelerator.");
      }
      if (!seen_types.insert(rr.type).second) {
        return Status::Client(prefix + "At most one resource requirement of type " + Quoted(rr.type) +
                              " is allowed per container.");
      }
      if (rr.type == kInferenceAcceleratorType) {
        if (!rr.value || rr.value->empty()) {
          return Status::Client(prefix + "An InferenceAccelerator requirement needs 'value' (the deviceName).");
        }
        continue;
      }
      if (!rr.value || !ParsePositiveInt(*rr.value, kMaxGpusPerContainer)) {
        return Status::Client(prefix + "A GPU requirement override needs 'value', the number of dedicated GPUs, "
                                       "a whole number from 1 to " +
                              std::to_string(kMaxGpusPerContainer) + ".");
      }
      if (definition_shares_gpu) {
        return Status::Client(prefix +
                              "The task definition shares GPUs ('sharingStrategy'); a dedicated GPU 'value' cannot "
                              "be added by an override, since all GPU containers of a task use the same option.");
      }
    }
  }
  return Status::Ok();
}

Status ValidatePlacement(const std::vector<PlacementConstraint>& constraints,
                         const std::vector<PlacementStrategy>& strategies) {
  if (constraints.size() > kMaxPlacementConstraints) {
    return Status::InvalidParameter("At most " + std::to_string(kMaxPlacementConstraints) +
                                    " placement constraints are allowed, got " +
                                    std::to_string(constraints.size()) + ".");
  }
  if (strategies.size() > kMaxPlacementStrategies) {
    return Status::InvalidParameter("At most " + std::to_string(kMaxPlacementStrategies) +
                                    " placement strategies are allowed, got " + std::to_string(strategies.size()) +
                                    ".");
  }
  for (const auto& pc : constraints) {
    if (pc.type == "distinctInstance") {
      if (!pc.expression.empty()) {
        return Status::InvalidParameter(
            "Invalid placement constraint: distinctInstance takes no 'expression'; use memberOf for an "
            "expression.");
      }
      continue;
    }
    if (pc.type != "memberOf") {
      return Status::InvalidParameter("Invalid placement constraint type " + Quoted(pc.type) +
                                      "; valid types are distinctInstance and memberOf.");
    }
    if (pc.expression.empty()) {
      return Status::InvalidParameter(
          "Invalid placement constraint: memberOf requires an 'expression' in the cluster query language.");
    }
    auto parsed = query::Parse(pc.expression);
    if (!parsed.ok()) {
      return Status::InvalidParameter("Invalid placement constraint: " + parsed.status().message());
    }
  }
  for (const auto& ps : strategies)
    if (Status st = ValidateStrategy(ps); !st.ok()) return st;
  return Status::Ok();
}

}  // namespace gpupack
