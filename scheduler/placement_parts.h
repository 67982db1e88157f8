// The pieces of the placement pipeline that a strategy entry of the registry (scheduler/strategies.h) plugs
// into: GpuFit (what the GPU filter found on an instance), ScoreContext and Scorer (one strategy as a number per
// instance), and the index walks (fast paths that may decide before the scan). Internal to scheduler/: Placer
// (placement.cc) runs them, strategies.cc defines the scorers and names the walks in its entries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "scheduler/cluster_state.h"
#include "scheduler/model.h"
#include "scheduler/placement.h"

namespace gpupack {

// Shareable: a GPU that takes shared tasks (not held after a fault, IDLE or NVIDIA_MPS).
inline bool Shareable(const Gpu& g) {
  return !g.held && (g.mode == GpuMode::kIdle || g.mode == GpuMode::kMps);
}

// Status tests the scan asks of every instance.
inline bool IsActive(const ContainerInstance& inst) { return inst.status == InstanceStatus::kActive; }
inline bool IsInactive(const ContainerInstance& inst) { return inst.status == InstanceStatus::kInactive; }

// GpuFit is what GpuFitFilter found on an instance that passes it: enough to score the instance without
// allocating. ChosenGpus() (placement.cc) turns it into the GPU indices, for the instance finally chosen.
struct GpuFit {
  size_t shared_gpu = SIZE_MAX;    // shared: the chosen GPU
  MiB chosen_remaining_after = 0;  // shared: remaining memory of the chosen GPU after placement
  MiB taken_memory = 0;            // dedicated: remaining memory of the GPUs it takes (all of an IDLE GPU)
};

// ScoreContext: what the scorers aggregate over the cluster for one placement (per call, so a Placer stays
// const and shareable).
struct ScoreContext {
  uint32_t group_id = ClusterState::kNoGroupId;  // the request's task group (ClusterState::GroupId)
  const ClusterState* state = nullptr;            // the state placed on (binpack(fragmentation), fgd: its cache)
  const std::vector<InstanceEntry>* entries = nullptr;  // state->EntriesOf(the request's cluster)
  const std::string* cluster = nullptr;           // the request's cluster
  bool compute_aware = false;                     // the request's compute-aware setting
  struct PerScorer {
    // A least score over every non-INACTIVE instance (so over every eligible one), or -inf: like
    // Scorer::Floor, an instance that reaches it cannot be beaten by a later one.
    double floor = -std::numeric_limits<double>::infinity();
    std::vector<uint32_t> value_of;  // spread(attribute): per instance position, the id of its value
    std::vector<int64_t> totals;     // spread(attribute): per value id, tasks of the group on that value
  };
  std::vector<PerScorer> per_scorer;
};

// Scorer: one placement strategy as a bounded number per eligible instance; lower is better. `pos` is the
// instance's position in the cluster's registration order (ClusterState::EntriesOf); `self` is the scorer's
// position in the request's strategy list (its slot of ScoreContext::per_scorer). A Placer owns its scorers;
// they are immutable after construction, so const methods may run concurrently.
class Scorer {
 public:
  virtual ~Scorer() = default;
  // Called once per placement before scoring, to aggregate over the whole cluster where needed.
  virtual void Prepare(const std::vector<InstanceEntry>&, ScoreContext&, size_t) const {}
  virtual double Score(const ContainerInstance& inst, const InstanceLoad& load, const TaskDemand& demand,
                       const GpuFit& fit, uint64_t random_key, const ScoreContext& ctx, size_t self,
                       size_t pos) const = 0;
  // The least score an eligible instance can have for `demand` (-inf when unknown). An instance that reaches
  // it on every strategy cannot be beaten by a later one (ties go to the earlier instance), so the scan stops.
  virtual double Floor(const TaskDemand&) const { return -std::numeric_limits<double>::infinity(); }
  // Whether Score ignores the GpuFit and the random key, so that it may be computed before the filters run:
  // an instance that scores worse than the best so far on such a first strategy needs no filtering.
  virtual bool ScoresBeforeFit() const { return true; }
};

// IndexWalkArgs: what an index walk reads for one PlaceOne call. Everything is borrowed from the caller.
struct IndexWalkArgs {
  const PlacementRequest& request;
  const Placer::Compiled& compiled;
  const ClusterState& state;
  const std::vector<InstanceEntry>& entries;  // state.EntriesOf(request.cluster)
  uint64_t task_seed;                         // the random source of this task index
};

// The index walks of placement.cc (StrategyKind::index_walk). Each is the fast path of the strategy that comes
// first in the request: it either decides (fills `result`, returns true) or leaves the decision to the scan
// (returns false, `result` untouched). All but SampleRandom decide exactly as the full scan would.
//
// SampleRandom: random as the only strategy: rejection sampling over the instance list, up to 32 probes; uniform
// over the eligible instances like the scan, but not the instance of the scan's least random key.
bool SampleRandom(const IndexWalkArgs& args, Placement& result);
// WalkGpuIndex: binpack(gpuMemory) first and a shared task: the cluster's GPUs by ascending remaining memory.
bool WalkGpuIndex(const IndexWalkArgs& args, Placement& result);
// WalkCpuIndex, WalkMemoryIndex: binpack(cpu|memory) first: the instances by ascending remaining CPU (memory).
bool WalkCpuIndex(const IndexWalkArgs& args, Placement& result);
bool WalkMemoryIndex(const IndexWalkArgs& args, Placement& result);
// WalkFragment: binpack(fragmentation) or fgd first: every instance's cached move (FragmentCache), the least
// fragment increase first, filters run only on an instance that would be chosen; the GPU of a shared task is the
// move's. Decides as the scan would (with the move's GPU), or leaves it to the scan when nothing fits.
bool WalkFragment(const IndexWalkArgs& args, Placement& result);
// WalkGroupIndex: spread(instanceId|host) first: the instances by ascending count of the request's group.
bool WalkGroupIndex(const IndexWalkArgs& args, Placement& result);

}  // namespace gpupack
