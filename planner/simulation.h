// The planner's simulation driver: a fleet and a workload made concrete for one choice of GPU units (a
// Scenario), and one Simulation that places and removes tasks on a ClusterState with the scheduler's own
// Placer, reserving each decision with ClusterState::ReserveTask exactly as the server's RunTask does.
//
// There is no placement logic here: every decision is Placer::PlaceOne's. The one thing the driver adds is a
// cache of refusals (Options::remember_failures) for runs without departures, where a cluster only fills up:
// once a request was refused everywhere, a request of the same kind, constraints and group that needs at least
// as much of every resource would be refused too, so it is answered from the cache (docs/planning.md).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/inputs.h"
#include "scheduler/cluster_state.h"
#include "scheduler/fragmentation.h"
#include "scheduler/placement.h"

namespace gpupack::plan {

// GpuUnits: how GPU memory is counted. kMib: each GPU holds its memory in MiB (fleet JSON gpuMemory);
// kMilli: each GPU holds 1000 units, the FGD paper's setting; kAuto: kMilli when some instance type's GPU
// memory is unknown (an openb node list), else kMib.
enum class GpuUnits { kAuto, kMib, kMilli };
Result<GpuUnits> ParseGpuUnits(std::string_view text);  // "auto" | "mib" | "milli"
const char* GpuUnitsName(GpuUnits units);

// PlanStrategy: one --strategy, a RunTask placementStrategy list named as written: "binpack:gpuMemory",
// "spread:attribute:gpu-model", "random", or a chain "spread:attribute:gpu-model,binpack:gpuMemory".
struct PlanStrategy {
  std::string name;
  std::vector<PlacementStrategy> chain;
};
Result<PlanStrategy> ParseStrategy(std::string_view text);
// Every strategy the server has, one per listed kind of the strategy registry (scheduler/strategies.h), in its
// list order: binpack:gpuMemory, binpack:cpu, binpack:memory, spread:instanceId, spread:attribute:gpu-model
// (the attribute kGpuModelAttribute every planner instance has), random.
std::vector<PlanStrategy> AllStrategies();

inline constexpr const char* kPlanCluster = "plan";
// The task group of tasks whose definition names none (as if one caller started them all with group "plan").
inline constexpr const char* kDefaultGroup = "plan";

// Shape: one distinct placement request of a scenario. Tasks of one shape share a Placer.
struct Shape {
  TaskDemand demand;  // concrete: a shared task's gpu_memory is in the scenario's units
  std::vector<PlacementConstraint> constraints;
  std::string group;
  int gpu_containers = 1;
  int feasibility_class = 0;  // shapes that differ only in amounts (same kind, constraints, group)
};

// PlannedTask: one workload task made concrete.
struct PlannedTask {
  int shape = 0;
  double gpu_demand = 0;  // in GPUs: dedicated count, or the shared fraction of the smallest GPU it may use
};

// Scenario: a fleet and a workload for one choice of units. Holds pointers to both: they must outlive it.
struct Scenario {
  const Fleet* fleet = nullptr;  // may be null (bounds without a fleet: milli units)
  const Workload* workload = nullptr;
  GpuUnits units = GpuUnits::kMilli;  // resolved: never kAuto
  std::vector<MiB> type_gpu_size;      // units per GPU, per instance type
  std::vector<Shape> shapes;
  std::vector<PlannedTask> tasks;      // parallel to workload->tasks
  int gpu_count = 0;                   // GPUs of the fleet as given
  // fgd's target workload: the workload's typical shapes (the most frequent by weight, covering 95% of it), keyed
  // as the paper keys them (CPU, GPU count, GPU share, GPU models; no host memory). binpack:fragmentation learns
  // its own from the arrivals (ClusterState::RecordDemand), as the server does from RunTask.
  std::shared_ptr<const TargetWorkload> fgd_workload;
};

// BuildScenario resolves the units and every task's concrete demand. A shared need declared as a fraction
// (openb gpu_milli) becomes milli units, or in MiB that fraction of the smallest GPU the task may use; one
// declared in MiB becomes milli units of that smallest GPU. Fails (InvalidParameter, naming the input) when
// MiB units are asked of a fleet whose GPU memory is unknown.
Result<Scenario> BuildScenario(const Fleet* fleet, const Workload& workload, GpuUnits units);

// PlanRng: the planner's random stream (SplitMix64), a pure function of its seed: fgd's arrivals and node order.
class PlanRng {
 public:
  explicit PlanRng(uint64_t seed) : x_(seed) {}
  uint64_t Next() {
    uint64_t z = (x_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  // Below: uniform in [0, n), n > 0 (the modulo bias is below 2^-40 for any fleet or workload size).
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t x_;
};

// Simulation: one ClusterState with the scenario's fleet registered, placing tasks one at a time.
// Not thread-safe; independent Simulations may run on different threads.
class Simulation {
 public:
  struct Options {
    uint64_t seed = 0;               // the request seed (random strategy)
    bool remember_failures = false;  // the refusal cache above; forgotten at every departure
    std::vector<int> type_counts;    // instances per type, registered type by type; empty: the fleet as given
    // When set (fgd), the fleet's instances are registered in a random order drawn from this seed instead of the
    // fleet's order, so the ties every strategy leaves to "the instance registered first" fall on a fresh random
    // instance per seed, as in the FGD paper's simulator (docs/planning.md, "The protocol"). Ignored with
    // type_counts.
    std::optional<uint64_t> node_order_seed;
  };
  struct Outcome {
    bool placed = false;
    int64_t task_id = -1;    // for Depart()
    std::string reason;      // when refused: the reason most instances gave (failures[].reason)
  };

  static Result<std::unique_ptr<Simulation>> Create(const Scenario& scenario, const PlanStrategy& strategy,
                                                    Options options);
  ~Simulation();

  // Arrive asks the Placer for scenario task `task` as the `index`-th placement of the run (the index feeds
  // the random strategy, as RunTask's task index does) and reserves the decision.
  Outcome Arrive(int task, int index);
  // Depart stops a placed task and returns its reservations.
  void Depart(int64_t task_id);

  double allocated_gpus() const { return allocated_gpus_; }  // sum over GPUs of the share held
  int gpus_in_use() const { return gpus_in_use_; }           // GPUs holding at least one task
  int gpu_count() const { return gpu_count_; }
  int instance_count() const { return instance_count_; }
  const ClusterState& state() const { return state_; }

 private:
  struct Placed {
    ContainerInstance* instance = nullptr;
    std::vector<size_t> gpus;
    double share = 0;
    std::string arn;
  };
  struct FailedDemand {
    TaskDemand demand;
    std::string reason;
  };
  Simulation(const Scenario& scenario, Options options);

  const Scenario& scenario_;
  Options options_;
  ClusterState state_;
  std::vector<std::unique_ptr<Placer>> placers_;           // one per shape
  bool record_demands_ = false;                            // binpack:fragmentation learns its target workload
  std::vector<std::vector<FailedDemand>> failed_;          // per feasibility class
  std::vector<Placed> placed_;                             // by task id
  double allocated_gpus_ = 0;
  int gpus_in_use_ = 0;
  int gpu_count_ = 0;
  int instance_count_ = 0;
};

}  // namespace gpupack::plan
