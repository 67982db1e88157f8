// Inputs of the capacity planner: a fleet (instance types and how many of each) and a workload (tasks), read
// from our JSON formats or from the openb CSVs of the Alibaba GPU trace, told apart by their content (a JSON
// document's top-level key, a CSV's header). The formats and the openb mapping are documented in
// docs/planning.md.
//
// Every refusal is InvalidParameter with a message that names the file, the line and the field:
//   "pods.csv:12: field 'gpu_milli': expected an integer 0..1000, got '1200'"
//   "fleet.json:7: field 'instanceTypes[1].gpus': expected an integer 0..64, got \"8\""
// Pure functions over text plus two loaders that read a file; no globals.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "scheduler/model.h"
#include "base/status.h"

namespace gpupack::plan {

// The attribute that carries an instance's GPU model ("gpu-model"), set from the fleet's gpuModel or openb's
// `model`, and matched by the memberOf constraint a task's allowed GPU models become.
inline constexpr const char* kGpuModelAttribute = "gpu-model";

// InstanceType: `count` identical container instances.
struct InstanceType {
  std::string name;
  int count = 0;
  int64_t cpu = 0;       // CPU units (1024 per vCPU)
  MiB memory = 0;        // host memory
  int gpus = 0;
  MiB gpu_memory = 0;    // per GPU; 0 = not known (an openb node list has no GPU memory column)
  std::string gpu_model;
  std::vector<Attribute> attributes;  // sorted by name, unique; gpu-model and ecs.instance-type included
  std::string origin;                 // "file:line" of its first row, for messages
};

// Fleet: instance types plus the order in which their instances register (ties in placement go to the
// instance registered first, so the order is part of the input). JSON fleets register type by type; an openb
// node list registers in row order.
struct Fleet {
  std::string source;
  std::vector<InstanceType> types;
  std::vector<int> registration_order;  // one type index per instance

  int InstanceCount() const { return static_cast<int>(registration_order.size()); }
  int GpuCount() const;
};

// Occurrence: one run of a task in time (seconds from the start of the workload).
struct Occurrence {
  int64_t arrival = 0;
  std::optional<int64_t> departure;  // none: it never leaves
};

// DesiredStep: a service's desired count from `at` (seconds from the start of the workload) until the next step.
struct DesiredStep {
  int64_t at = 0;
  int count = 0;
};

// The most replicas a service may desire, ECS's bound on desiredCount.
inline constexpr int kMaxDesiredCount = 5000;

// TaskSpec: one task definition of the workload and how often and when it runs. A service of the workload is
// one TaskSpec too: its task definition, with `service` set and `schedule` its replicas' (ReplicaSchedules).
struct TaskSpec {
  std::string name;     // family, the openb pod name, or a service's serviceName
  TaskDemand demand;    // DemandOf its definition; a shared GPU need declared as a fraction has gpu_memory 0
  int gpu_milli = 0;    // shared GPU need as thousandths of one GPU (openb), when not declared in MiB
  int gpu_containers = 1;
  std::vector<std::string> gpu_models;           // allowed GPU models; empty = any
  std::vector<PlacementConstraint> constraints;  // the definition's memberOf plus the one gpu_models make
  std::string group;                             // empty: the planner's default group
  double weight = 1;                             // relative sampling weight (fgd)
  int count = 1;                                 // copies that arrive at once when there is no schedule
  std::vector<Occurrence> schedule;              // arrivals and departures (replay)
  std::string origin;                            // "file:line"
  std::string service;                           // a service's name; empty for a task
  std::vector<DesiredStep> desired;              // a service's desired counts over time (desiredCount: one step at 0)

  bool IsService() const { return !service.empty(); }
  // Arrivals of this task when the workload is placed at once: a service's peak desired count, else one per
  // occurrence, else `count`.
  int Copies() const;
  // The arrival time of copy `c` (0 <= c < Copies()) in a workload with times: a service's replica c + 1 when
  // it first arrives, a task's occurrence c.
  int64_t CopyArrival(int c) const;
};

// Workload: the tasks and services of one file; services follow the tasks (tasks in file order, then services
// in file order), so a service's index in `tasks` is after every task's.
struct Workload {
  std::string source;
  std::vector<TaskSpec> tasks;

  // Every task has a schedule or is a service (so the workload can be replayed in time).
  bool HasTimes() const;
  int ServiceCount() const;
};

// ReplicaSchedules expands a service's desired counts (steps in increasing time) into its replicas' presence:
// element k - 1 is replica k's occurrences in time order. Replica k is present while the desired count is at
// least k: it arrives when the count first reaches k and departs when it drops below k, and may arrive again
// later, so a scale-in removes the newest replicas (the highest k) first, as the server's service scheduler does.
// Before the first step the count is 0; a replica present after the last step never departs.
std::vector<std::vector<Occurrence>> ReplicaSchedules(const std::vector<DesiredStep>& desired);

// An input file is one or the other, told apart by its content.
using Input = std::variant<Fleet, Workload>;

// ParseInput reads JSON ({"instanceTypes": [...]}, or {"tasks": [...], "services": [...]} with either list or
// both) or an openb CSV (node list or pod list, by header). `name` heads every error message.
Result<Input> ParseInput(std::string_view text, const std::string& name);
// LoadInput reads a file and parses it (a file that cannot be read is InvalidParameter too).
Result<Input> LoadInput(const std::string& path);

// ---- The openb mapping (docs/planning.md), pure ----

// CPU units for openb's thousandths of a core: cpu_milli * 1024 / 1000, rounded to the nearest unit (nodes and
// pods alike, so a pod that asks for a whole node's CPU fits it).
int64_t OpenbCpuUnits(int64_t cpu_milli);
// The memberOf expression for a list of allowed GPU models: "attribute:gpu-model == V100M16" or
// "attribute:gpu-model in [V100M16, V100M32]"; empty for an empty list.
std::string GpuModelExpression(const std::vector<std::string>& models);

// The directory of the openb CSVs bundled with the source tree (planner/data/openb), or $GPUPACK_OPENB_DIR when set.
// For tests and benchmarks.
std::string BundledOpenbDir();

}  // namespace gpupack::plan
