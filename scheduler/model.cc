#include "scheduler/model.h"

#include <cstddef>
#include <iterator>

namespace gpupack {
namespace {

// k*Names: ECS's spelling of each status, indexed by the enum's value (the enums in model.h list them in this
// order).
constexpr const char* kTaskStatusNames[] = {"PENDING", "RUNNING", "STOPPED", "PROVISIONING"};
constexpr const char* kCapacityProviderStatusNames[] = {"ACTIVE", "INACTIVE"};
constexpr const char* kInstanceStatusNames[] = {"ACTIVE", "DRAINING", "INACTIVE", "REGISTERING"};
constexpr const char* kLifecycleStatusNames[] = {"ACTIVE", "INACTIVE"};
constexpr const char* kServiceStatusNames[] = {"ACTIVE", "DRAINING", "INACTIVE"};
constexpr const char* kRolloutStateNames[] = {"IN_PROGRESS", "COMPLETED", "FAILED"};
static_assert(std::size(kServiceStatusNames) == static_cast<size_t>(ServiceStatus::kInactive) + 1);
static_assert(std::size(kRolloutStateNames) == static_cast<size_t>(RolloutState::kFailed) + 1);
static_assert(std::size(kTaskStatusNames) == static_cast<size_t>(TaskStatus::kProvisioning) + 1);
static_assert(std::size(kCapacityProviderStatusNames) == static_cast<size_t>(CapacityProviderStatus::kInactive) + 1);
static_assert(std::size(kInstanceStatusNames) == static_cast<size_t>(InstanceStatus::kRegistering) + 1);
static_assert(std::size(kLifecycleStatusNames) == static_cast<size_t>(LifecycleStatus::kInactive) + 1);

// ParseName: the enum value whose name is `text`, or nullopt.
template <typename E, size_t N>
std::optional<E> ParseName(const char* const (&names)[N], std::string_view text) {
  for (size_t i = 0; i < N; ++i)
    if (text == names[i]) return static_cast<E>(i);
  return std::nullopt;
}

}  // namespace

const char* Name(TaskStatus status) { return kTaskStatusNames[static_cast<size_t>(status)]; }
const char* Name(InstanceStatus status) { return kInstanceStatusNames[static_cast<size_t>(status)]; }
const char* Name(LifecycleStatus status) { return kLifecycleStatusNames[static_cast<size_t>(status)]; }

const char* Name(CapacityProviderStatus status) { return kCapacityProviderStatusNames[static_cast<size_t>(status)]; }
std::optional<CapacityProviderStatus> ParseCapacityProviderStatus(std::string_view text) {
  return ParseName<CapacityProviderStatus>(kCapacityProviderStatusNames, text);
}

std::optional<TaskStatus> ParseTaskStatus(std::string_view text) {
  return ParseName<TaskStatus>(kTaskStatusNames, text);
}
std::optional<InstanceStatus> ParseInstanceStatus(std::string_view text) {
  return ParseName<InstanceStatus>(kInstanceStatusNames, text);
}
std::optional<LifecycleStatus> ParseLifecycleStatus(std::string_view text) {
  return ParseName<LifecycleStatus>(kLifecycleStatusNames, text);
}

const char* Name(ServiceStatus status) { return kServiceStatusNames[static_cast<size_t>(status)]; }
const char* Name(RolloutState state) { return kRolloutStateNames[static_cast<size_t>(state)]; }
std::optional<ServiceStatus> ParseServiceStatus(std::string_view text) {
  return ParseName<ServiceStatus>(kServiceStatusNames, text);
}
std::optional<RolloutState> ParseRolloutState(std::string_view text) {
  return ParseName<RolloutState>(kRolloutStateNames, text);
}

const char* GpuModeName(GpuMode mode) {
  switch (mode) {
    case GpuMode::kIdle: return "IDLE";
    case GpuMode::kMps: return "NVIDIA_MPS";
    case GpuMode::kDedicated: return "DEDICATED";
  }
  return "IDLE";
}

}  // namespace gpupack
