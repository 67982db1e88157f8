// The one-dimensional reference for the GPU-memory dimension: every GPU is a bin of `capacity` units, every
// single-GPU task an item (a whole GPU is an item of `capacity`), all at once and none leaving. Lower bounds
// that no placement can beat, beside what the textbook heuristics need:
//   L1  = ceil(sum of sizes / capacity)
//   L2  = Martello and Toth (1990): for each a in [0, capacity/2],
//           J1 = {w > C - a}, J2 = {C/2 < w <= C - a}, J3 = {a <= w <= C/2},
//           L(a) = |J1| + |J2| + max(0, ceil((sum J3 - (|J2| C - sum J2)) / C)),  L2 = max over a of L(a)
//   ffd = first-fit decreasing, bestFit / firstFit = best fit / first fit in arrival order.
// These are reference numbers, not a placement engine: the strategies' own GPU counts come from the fgd,
// replay and size protocols, which ask the scheduler's Placer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/simulation.h"

namespace gpupack::plan {

int64_t LowerBoundL1(const std::vector<int64_t>& sizes, int64_t capacity);
int64_t LowerBoundL2(const std::vector<int64_t>& sizes, int64_t capacity);
int64_t FirstFitDecreasing(const std::vector<int64_t>& sizes, int64_t capacity);
int64_t BestFit(const std::vector<int64_t>& sizes, int64_t capacity);   // in the given order
int64_t FirstFit(const std::vector<int64_t>& sizes, int64_t capacity);  // in the given order

// BinFigures: the bounds and heuristics over one list of items.
struct BinFigures {
  int items = 0;
  int64_t l1 = 0, l2 = 0, ffd = 0, best_fit = 0, first_fit = 0;
};

struct BoundsReport {
  std::string units;      // "milli" or "mib"
  int64_t capacity = 0;   // units per GPU
  int items = 0;          // single-GPU arrivals
  int whole = 0;          // of which a whole GPU
  int fractional = 0;     // of which a share
  int skipped = 0;        // arrivals asking for no GPU or for more than one
  int64_t l1 = 0, l2 = 0, ffd = 0, best_fit = 0, first_fit = 0;  // over the single-GPU items (openb's reference)
  // Every GPU task: the single-GPU items plus each multi-GPU task as k whole GPUs (it needs k whole GPUs whichever
  // instance holds them, so the lower bounds stay lower bounds of the whole workload).
  int multi_gpu_tasks = 0;  // arrivals of several dedicated GPUs
  BinFigures all;
};

// RunBounds takes the single-GPU tasks of the scenario (every copy; in arrival-time order when the workload
// has times, else in workload order), and then every GPU task, a multi-GPU task as that many whole items
// arriving together (BoundsReport::all). The capacity is 1000 in milli units; in MiB units the fleet's GPUs must
// all be the same size. Allowed GPU models and other constraints are ignored: one dimension only.
Result<BoundsReport> RunBounds(const Scenario& scenario);

}  // namespace gpupack::plan
