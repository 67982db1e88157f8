// RefusalLog: the placements the engine refused, recorded once, where placement decides them (RunTask and
// StartTask in engine/operations/tasks.cc, through the transaction). The console's overview ("refused in the last
// hour") and its list of the latest refusals read it from the placement counters the applier publishes with
// each view; gpupack_placement_failures_total counts the same tasks (PlacementCounters::tasks_not_placed).
//
// Not thread-safe: the writer thread changes the working copy; a published copy is never changed again (the
// transaction copies the log before changing one the published counters share).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "engine/core/results.h"
#include "scheduler/model.h"

namespace gpupack::api {

// PlacementRefusal: one RunTask or StartTask that left tasks unplaced.
struct PlacementRefusal {
  EpochMs at = 0;
  std::string cluster;
  std::string task_definition;    // as the request named it, at most 512 characters
  TaskOverride overrides;         // the request's overrides
  uint64_t tasks = 0;             // tasks not placed
  std::vector<Failure> failures;  // the answer's failures, at most 10
};

class RefusalLog {
 public:
  static constexpr size_t kRecent = 20;       // refusals kept with their reasons
  static constexpr size_t kMaxFailures = 10;  // failures kept per refusal
  static constexpr size_t kMaxTaskDefinition = 512;

  // Add records a refusal: kept with the latest, and its tasks counted in the minute of `at` for its cluster.
  void Add(PlacementRefusal refusal);
  // LastHour: tasks refused in `cluster` in the hour before `now` (per-minute counts).
  uint64_t LastHour(const std::string& cluster, EpochMs now) const;
  const std::deque<PlacementRefusal>& recent() const { return recent_; }  // newest first
  uint64_t generation() const { return generation_; }                     // bumps with every Add

 private:
  struct Minute {
    int64_t minute = -1;
    uint64_t tasks = 0;
  };
  std::map<std::string, std::array<Minute, 60>> by_cluster_;
  std::deque<PlacementRefusal> recent_;
  uint64_t generation_ = 0;
};

}  // namespace gpupack::api
