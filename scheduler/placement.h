// Placement: a pure function of (cluster state, request) -> decision for one task.
//
// The pipeline is filter -> score -> select (docs/placement.md):
//   filters, in order, each pass/fail with a stable reason: StatusFilter (ACTIVE, not impaired), AgentFilter
//   (agent connected), CpuFilter, MemoryFilter, GpuFitFilter (shared: one GPU in IDLE/NVIDIA_MPS mode with
//   enough remaining memory, and compute when the cluster opts in; dedicated: enough IDLE GPUs), then the
//   binding constraints (memberOf, distinctInstance);
//   scorers: one per placement strategy, applied lexicographically (the first strategy decides, the next breaks
//   its ties, ...); remaining ties go to the instance registered first;
//   GPU choice inside the chosen instance: the first strategy's (best fit, the least remaining memory that fits;
//   or, for spread, the emptiest GPU).
// What each strategy contributes (its field values, scorer, index walk, GPU choice) is its entry in the strategy
// registry, scheduler/strategies.h.
// Nothing here mutates state: the caller (PlacementApplier on the server, the planner's loop) reserves the
// result with ClusterState::ReserveTask and asks again for the next task of the same request.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "scheduler/cluster_state.h"
#include "scheduler/model.h"
#include "base/status.h"

namespace gpupack {

// Stable failure reasons (failures[].reason).
namespace reason {
inline constexpr const char* kMissing = "MISSING";
inline constexpr const char* kAgent = "AGENT";
inline constexpr const char* kStatus = "STATUS";
inline constexpr const char* kCpu = "RESOURCE:CPU";
inline constexpr const char* kMemory = "RESOURCE:MEMORY";
inline constexpr const char* kGpu = "RESOURCE:GPU";
inline constexpr const char* kGpuMemory = "RESOURCE:GPU_MEMORY";
inline constexpr const char* kGpuCompute = "RESOURCE:GPU_COMPUTE";
inline constexpr const char* kAttribute = "ATTRIBUTE";
}  // namespace reason

struct PlacementRequest {
  std::string cluster;
  TaskDemand demand;
  std::string group;  // task group; RunTask's default is "family:<family>"
  std::vector<PlacementConstraint> constraints;  // the request's and the task definition's
  std::vector<PlacementStrategy> strategies;     // empty = random (ECS has no default for standalone tasks)
  uint64_t seed = 0;                             // randomness is a function of (seed, task index)
  bool compute_aware = false;                    // the cluster's compute-aware setting
  // place_on_disconnected: the AgentFilter lets instances whose agent is not connected pass (the server's
  // --place-on-disconnected, for benchmarks and simulations whose client plays the agent); an impaired
  // instance is still refused.
  bool place_on_disconnected = false;
  std::vector<std::string> only_instances;       // StartTask: the named instances (ARNs); empty = all
  // capacity_provider: a task launched through a capacity provider: only the provider's instances are candidates
  // (ClusterState::ProviderEntries; any other fails ATTRIBUTE). "" = any instance.
  std::string capacity_provider;
  // held_instance: an instance held for the head of a provider's line (engine/operations/capacity_queue.cc's
  // reservation): it takes no task of this request (ATTRIBUTE). "" = none.
  std::string held_instance;
};

struct PlacementFailure {
  std::string arn;
  std::string reason;
  std::string detail;
  bool operator==(const PlacementFailure&) const = default;
};

// The decision for one task.
struct Placement {
  const ContainerInstance* instance = nullptr;  // null when nothing fits
  std::vector<size_t> gpu_indices;              // shared: one GPU; dedicated: demand.gpu_count GPUs
  std::vector<PlacementFailure> failures;       // when not placed: one per rejected instance
  bool placed() const { return instance != nullptr; }
};

// Explanation of the dry run, per instance and per GPU.
struct GpuVerdict {
  std::string gpu_id;
  bool fits = false;
  std::string detail;  // why it fits (remaining after placement) or why not
};
struct InstanceVerdict {
  std::string arn;
  bool eligible = false;  // passes every filter
  bool chosen = false;
  std::string reason;     // first failing filter (empty when eligible)
  std::string detail;
  std::vector<GpuVerdict> gpus;
  std::vector<double> scores;  // one per strategy (lower is better), eligible instances only
};

// Placer compiles a request once (parses memberOf expressions, resolves strategies) and places task after
// task against a state the caller updates in between. Thread-compatible: const methods may run concurrently on
// a state that nobody writes.
class Placer {
 public:
  static Result<std::unique_ptr<Placer>> Create(PlacementRequest request);
  ~Placer();

  // Places the task_index-th task of the request.
  Placement PlaceOne(const ClusterState& state, int task_index = 0) const;

  // Dry run: every instance of the cluster with its verdict and every GPU's, for the task_index-th task.
  std::vector<InstanceVerdict> Explain(const ClusterState& state, int task_index = 0) const;

  const PlacementRequest& request() const { return request_; }

 struct Compiled;  // parsed constraints and scorers; defined in placement.cc

 private:
  explicit Placer(PlacementRequest request);
  PlacementRequest request_;
  std::unique_ptr<Compiled> compiled_;
};

// Builds the GpuReservation list for a placed task: its containers' share of the chosen GPUs.
std::vector<GpuReservation> ReservationsFor(const TaskDemand& demand, const ContainerInstance& instance,
                                            const std::vector<size_t>& gpu_indices, int gpu_containers);

// Formats MiB with thousands separators ("22,587 MiB"), for details a person reads.
std::string FormatMiB(MiB mib);

}  // namespace gpupack
