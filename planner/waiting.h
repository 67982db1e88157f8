// Replay with waiting (gpupack plan --protocol replay --wait, and size --target-wait-p95): what the capacity-
// provider queue would do with a trace. A task that does not fit when it arrives is not refused: it waits in one
// line, in arrival order, and starts when departures free room for it, then stays its trace duration (departure
// minus arrival). The line is served as the server serves a provider's line (docs/api.md, "The order of the
// line"): the head first while it fits, then backfill behind it (the first kBackfillWindow waiting tasks, each
// shape once). The planner does not model the head's reservation, so a head's wait is a lower bound where small
// tasks keep arriving (docs/planning.md).
#pragma once

#include <string>
#include <vector>

#include "planner/simulation.h"

namespace gpupack::plan {

// WaitFigures: the waits of the tasks of one shape (or of all), in seconds from arrival to start.
struct WaitFigures {
  std::string shape;       // what the tasks ask for ("shared 4,096 MiB", "2 GPUs", ...; "all")
  int tasks = 0;           // arrivals
  int waited = 0;          // arrivals that did not start at once
  int never_started = 0;   // still waiting when everything that could leave had left
  double p50 = 0, p95 = 0, p99 = 0, max = 0;  // over every arrival that started (those at once count 0)
};

struct WaitResult {
  WaitFigures all;
  std::vector<WaitFigures> by_shape;  // most arrivals first
  int64_t last_end = 0;               // when the last task that started ended (its trace duration after start)
};

// ReplayWithWaits runs the timed workload of `scenario` on the fleet `options` gives (type_counts or the fleet
// as given), tasks with `skip[task]` set left out (null: none). InvalidParameter when the workload has no times.
Result<WaitResult> ReplayWithWaits(const Scenario& scenario, const PlanStrategy& strategy,
                                   const Simulation::Options& options, const std::vector<char>* skip = nullptr);

// ShapeLabel: a shape's demand in words, in the scenario's units.
std::string ShapeLabel(const Shape& shape, GpuUnits units);

}  // namespace gpupack::plan
