// The planner's protocols, each a function of (scenario, strategies, options) -> report:
//   fgd     the FGD paper's protocol: every task once in a random order, then tasks sampled with replacement (by
//           weight) until arrived GPU demand reaches demand_pct of capacity, no departures, instances registered
//           in a random order per seed; the allocated share of GPU capacity as demand arrives. A
//           workload with services is refused (it has desired counts over time, which sampling has not).
//   replay  arrivals and departures in time order; peak GPUs in use and refusals by reason over time (and by
//           service: a refused replica is one the server would keep waiting for capacity).
//   size    per instance type, the smallest count of it alone that places the workload with no refusal: for
//           services, that keeps every service at its desired count at all times.
// (bounds, the one-dimensional reference, is in planner/bounds.h.)
//
// Runs (a strategy x a seed, or a probe of the size search) are independent Simulations spread over `jobs`
// threads; reports do not depend on the number of threads. `progress` is called from those threads, one call
// at a time, after each run.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "planner/simulation.h"
#include "planner/waiting.h"

namespace gpupack::plan {

// ProgressFn(done, total): runs finished so far.
using ProgressFn = std::function<void(int done, int total)>;

// Seeds 42..51, the paper's.
std::vector<uint64_t> DefaultSeeds();
// Parses "42..51", "7" or "1,2,5".
Result<std::vector<uint64_t>> ParseSeeds(std::string_view text);

// SampleArrivals draws the fgd arrival sequence for one seed, as the FGD paper's simulator builds it: every task
// of the workload (weight > 0) once, in a random order, then copies drawn with replacement and in proportion to
// weight, until arrived GPU demand reaches demand_pct percent of the scenario's GPUs (a workload that holds more
// than that stops part way through its first pass). The same sequence is used for every strategy. Empty when the
// workload asks for no GPU.
std::vector<int> SampleArrivals(const Scenario& scenario, uint64_t seed, int demand_pct);

// The most arrivals one fgd run may sample (the openb default list needs about 11,000).
inline constexpr int kMaxFgdArrivals = 10'000'000;

struct FgdOptions {
  int demand_pct = 130;
  std::vector<uint64_t> seeds = DefaultSeeds();
  int jobs = 1;
  ProgressFn progress;
};

struct FgdRun {
  uint64_t seed = 0;
  std::vector<double> allocated_pct;  // index k: allocated share of GPU capacity once arrived demand reached k%
  int arrivals = 0;
  int placed = 0;
  int refused = 0;
  double refused_gpu_demand = 0;  // the GPU demand of the refused tasks, in GPUs (TaskInstance::gpu_demand)
};

struct FgdStrategyResult {
  std::string name;
  std::vector<double> allocated_pct;  // mean over seeds, index = arrived demand in percent (0..demand_pct)
  std::vector<FgdRun> runs;           // one per seed, in seed order
  // 100 - allocated_pct at 100% and at demand_pct (the paper's "unallocated share of GPU capacity").
  std::map<int, double> unallocated_pct_at;
};

struct FgdReport {
  int demand_pct = 130;
  std::vector<uint64_t> seeds;
  std::vector<FgdStrategyResult> strategies;
};

Result<FgdReport> RunFgd(const Scenario& scenario, const std::vector<PlanStrategy>& strategies,
                         const FgdOptions& options);

struct ReplayOptions {
  bool at_once = false;  // ignore times: every copy arrives in workload order, nothing departs
  bool wait = false;     // also replay with waiting (planner/waiting.h): wait-time percentiles per task shape
  int buckets = 12;      // timeline buckets over the replayed span
  uint64_t seed = 42;
  int jobs = 1;
  ProgressFn progress;
};

struct ReplayBucket {
  int64_t start = 0;  // seconds (or arrival index when placed at once)
  int64_t end = 0;
  int arrivals = 0;
  int peak_gpus_in_use = 0;
  double peak_allocated_pct = 0;
  std::map<std::string, int> refusals;  // by reason
};

struct ReplayStrategyResult {
  std::string name;
  int arrivals = 0;
  int placed = 0;
  int refused = 0;
  int peak_gpus_in_use = 0;
  int64_t peak_at = 0;
  double peak_allocated_pct = 0;
  std::map<std::string, int> refusals;  // by reason
  std::map<std::string, int> refused_replicas;  // by service name; every service of the workload, 0 included
  std::vector<ReplayBucket> timeline;
  std::optional<WaitResult> waits;  // with ReplayOptions::wait
};

struct ReplayReport {
  bool timed = false;  // arrivals and departures in time; false: at once
  std::vector<ReplayStrategyResult> strategies;
};

Result<ReplayReport> RunReplay(const Scenario& scenario, const std::vector<PlanStrategy>& strategies,
                               const ReplayOptions& options);

struct SizeOptions {
  bool at_once = false;
  uint64_t seed = 42;
  int jobs = 1;
  std::vector<std::string> instance_types;  // only these (by name); empty: every type of the fleet
  // With a value: refused tasks wait (planner/waiting.h), and the count is the smallest whose p95 wait over every
  // arrival is at most this many seconds with none left waiting, instead of the smallest with no refusal.
  std::optional<double> target_wait_p95_s;
  ProgressFn progress;
};

struct SizeTypeResult {
  std::string instance_type;
  int gpus_per_instance = 0;
  int count = 0;               // smallest count that places every task that can fit this type at all
  int unplaceable_tasks = 0;   // arrivals (copies at once) that fit no empty instance of this type (left out)
  std::vector<std::string> unplaceable_examples;  // up to 3 task names
  std::optional<double> wait_p95_s;  // with SizeOptions::target_wait_p95_s: the p95 wait at `count`
};

struct SizeStrategyResult {
  std::string name;
  std::vector<SizeTypeResult> types;
};

struct SizeReport {
  bool timed = false;
  std::vector<SizeStrategyResult> strategies;
};

Result<SizeReport> RunSize(const Scenario& scenario, const std::vector<PlanStrategy>& strategies,
                           const SizeOptions& options);

}  // namespace gpupack::plan
