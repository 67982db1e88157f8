// Validation of client input against ECS's rules. Pure functions; every refusal names the
// field and the rule in its message, with the ECS error code the API answers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/model.h"
#include "base/status.h"

namespace gpupack {

// RegisterTaskDefinition: family, containers, cpu/memory, GPU requirements (dedicated vs nvidiaMps, all GPU
// containers of a definition use the same option, FARGATE/EXTERNAL refuse sharing), reserved MPS variables,
// placement constraints. ClientException on every rule of docs/placement.md.
Status ValidateTaskDefinition(const TaskDefinition& td);

// RunTask/StartTask overrides against the definition: a sharingStrategy is refused (ClientException); reserved
// MPS variables are accepted (the agent's values win); unknown container names are refused.
Status ValidateOverrides(const TaskDefinition& td, const TaskOverride& overrides);

// RunTask placement: at most 10 constraints (distinctInstance | memberOf with a valid expression) and 5
// strategies, each a kind of the strategy registry (scheduler/strategies.h: binpack cpu|memory|gpuMemory, spread
// instanceId|host|attribute:NAME, random with no field). InvalidParameterException on a bad one.
Status ValidatePlacement(const std::vector<PlacementConstraint>& constraints,
                         const std::vector<PlacementStrategy>& strategies);

// Names: cluster names and families [a-zA-Z0-9_-]{1,255}; container names [a-zA-Z0-9_-]{1,255}.
bool IsValidName(const std::string& name);

// kMinMpsMemoryMib: the least `nvidiaMps.memory` a task definition may declare, in MiB. MPS counts the CUDA
// context inside the limit, and a context alone costs 136 MiB (A10G) to 514 MiB (H200); below 256 MiB no CUDA
// program has room to work, and a smaller figure is almost always GiB written by mistake (docs/api.md).
inline constexpr int64_t kMinMpsMemoryMib = 256;

// The two environment variables the agent owns for shared GPU containers.
inline constexpr const char* kMpsMemLimitVar = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
inline constexpr const char* kMpsThreadPercentVar = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";

// IsReservedMpsVariable answers whether `name` is one of the two variables above (exact, case-sensitive match).
bool IsReservedMpsVariable(std::string_view name);

}  // namespace gpupack
