// FragmentationFigures: what a capacity planner watches about fragmented GPU memory, per cluster and per instance
// type, computed from a published read view (never the writer's state): the largest free block, the free GPU
// memory, and the free memory that is *stranded*, in pieces too small for every task shape seen lately.
//
// Definitions (docs/operations.md "Fragmentation"):
//   free piece       a GPU's remaining memory (total minus what its non-STOPPED tasks declared) on an instance
//                    that takes tasks (ACTIVE, not impaired) and a GPU that takes them (not held after a
//                    fault, not DEDICATED); an IDLE GPU is one piece of its whole memory.
//   largest block    the largest free piece: the largest shared task that could be placed now, GPU memory only.
//   shapes lately    the GPU shapes of the tasks created in the last kRecentWindowMs (one hour, the time the
//                    server keeps a STOPPED task, so every such task is still in the view): a shared task's memory
//                    on its one GPU (the sum of its containers' nvidiaMps.memory), and whether any task asked for
//                    dedicated GPUs.
//   stranded         a free piece no recent shape fits: smaller than the smallest recent shared demand, and not
//                    a whole IDLE GPU when dedicated tasks were seen. With no GPU task in the window nothing is
//                    stranded (there is no shape to judge by).
// CPU and host memory are not considered: a piece counted free may still sit on an instance without the CPU a
// task needs.
//
// Cost: one pass over the view's instances and one over its tasks, O(instances x GPUs + tasks); nothing is taken
// from the writer. Callers that serve several families of one scrape compute it once (FragmentationCache).
//
// Thread-safe: Compute is a pure function of the view; FragmentationCache guards its one slot with a mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "engine/core/read_view.h"
#include "scheduler/model.h"

namespace gpupack::api {

inline constexpr EpochMs kRecentWindowMs = 60 * 60 * 1000;

// FreeMemory: the free pieces of a set of GPUs, summed up.
struct FreeMemory {
  MiB largest_block = 0;
  MiB free = 0;
  MiB stranded = 0;
  int gpus = 0;  // GPUs that take tasks (their pieces are the ones counted)
};

// ClusterFragmentation: one cluster's figures, in total and per instance type ("" for instances without one).
struct ClusterFragmentation {
  FreeMemory total;
  std::map<std::string, FreeMemory> by_instance_type;
  std::optional<MiB> smallest_recent_demand;  // the smallest shared task of the window, none without one
  bool recent_dedicated = false;              // a task of the window asked for dedicated GPUs
  int recent_tasks = 0;                       // GPU tasks created in the window
};

using FragmentationFigures = std::map<std::string, ClusterFragmentation>;  // by cluster name, every cluster

// ComputeFragmentation: the figures of every cluster of `view` at `now` (ms since the epoch).
FragmentationFigures ComputeFragmentation(const ReadView& view, EpochMs now);

// FragmentationCache: the figures of the last view asked about, computed again only for a newer view or once
// kMaxAgeMs has passed (the window moves with the clock), so the families of one scrape share one computation.
class FragmentationCache {
 public:
  static constexpr EpochMs kMaxAgeMs = 5000;
  std::shared_ptr<const FragmentationFigures> Get(const std::shared_ptr<const ReadView>& view, EpochMs now);

 private:
  std::mutex mu_;
  std::shared_ptr<const FragmentationFigures> figures_;  // guarded by mu_
  uint64_t sequence_ = 0;                                // guarded by mu_
  const ReadView* view_ = nullptr;                       // guarded by mu_: identity only, never dereferenced
  EpochMs at_ = 0;                                       // guarded by mu_
};

}  // namespace gpupack::api
