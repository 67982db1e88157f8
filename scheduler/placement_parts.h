// The pieces of the placement pipeline that a strategy entry of the registry (scheduler/strategies.h) plugs
// into: GpuFit (what the GPU filter found on an instance), ScoreContext and Scorer (one strategy as a number per
// instance), and the index walks (fast paths that may decide before the scan); and what the walks share with
// the scan: the compiled request (Placer::Compiled), the filters (RunFilters) and the random source (Mix).
// Internal to scheduler/: Placer (placement.cc) runs them; the walks are in placement_walks.cc but
// WalkFragment, which lives with the fragment measure (fragmentation.cc); strategies.cc defines the scorers and
// names the walks in its entries.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/cluster_state.h"
#include "scheduler/model.h"
#include "scheduler/placement.h"
#include "scheduler/query.h"
#include "scheduler/strategies.h"

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

// Placer::Compiled: a request compiled once by Placer::Create (placement.cc); immutable afterwards, so the walks
// and the scan read it concurrently.
struct Placer::Compiled {
  std::vector<std::pair<std::string, query::ExpressionPtr>> member_of;
  bool distinct_instance = false;
  std::vector<std::unique_ptr<Scorer>> scorers;  // one per strategy, from its registry entry
  std::vector<double> floors;  // Scorer::Floor for the request's demand, one per scorer
  const StrategyKind* first = nullptr;  // the first strategy's entry: its index walk and GPU choice
  bool prefer_emptiest = false;         // first->gpu_choice is kEmptiest
  bool needs_random_key = false;        // some strategy's entry reads the random draw
};

// Mix: SplitMix64, the per-request random source. Deterministic in (seed, task index, instance position).
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// HashString: FNV-1a of an instance's ARN, mixed into the random key.
inline uint64_t HashString(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// FilterOutcome: the verdict of the filters on one instance: reason is null when it passes.
struct FilterOutcome {
  const char* reason = nullptr;
  std::string detail;  // built only when asked for
  GpuFit fit;
  bool ok() const { return reason == nullptr; }
};

// InOnlyList: whether the request may place on `inst` (its only_instances list is empty or names it).
inline bool InOnlyList(const PlacementRequest& req, const ContainerInstance& inst) {
  if (req.only_instances.empty()) return true;
  return std::find(req.only_instances.begin(), req.only_instances.end(), inst.arn) != req.only_instances.end();
}

// RunFilters (placement.cc) applies the filter pipeline to one instance and says whether it passes. With
// with_detail=false no string is built (the placement scan); with true, `out.detail` says why it failed
// (failures[], Explain). Both take the same branches, so the reasons are the same.
bool RunFilters(const PlacementRequest& req, const std::vector<std::pair<std::string, query::ExpressionPtr>>& member_of,
                bool distinct, bool prefer_emptiest, const ContainerInstance& inst, const InstanceLoad& load,
                bool with_detail, FilterOutcome& out);

// PrepareScorers (placement.cc): the ScoreContext of one placement, every scorer prepared over `entries`.
ScoreContext PrepareScorers(const Placer::Compiled& c, const ClusterState& state,
                            const std::vector<InstanceEntry>& entries, const PlacementRequest& request);

// ChosenGpus (placement.cc): the GPU indices of a fit: the shared GPU, or the first demand.gpu_count IDLE GPUs,
// as the GPU filter counted them.
std::vector<size_t> ChosenGpus(const TaskDemand& demand, const ContainerInstance& inst, const GpuFit& fit);

// FragmentGpu (fragmentation.cc): for binpack(fragmentation) or fgd first and a shared task, the GPU of `chosen`
// whose use grows the fragment least (ties: the lowest index), as WalkFragment picks it; -1 when none fits. The
// scan asks it for the instance it chose when the walk left the decision to it.
int FragmentGpu(const PlacementRequest& req, const Placer::Compiled& c, const ClusterState& state,
                const std::vector<InstanceEntry>& entries, const ContainerInstance& chosen);

// IndexWalkArgs: what an index walk reads for one PlaceOne call. Everything is borrowed from the caller.
struct IndexWalkArgs {
  const PlacementRequest& request;
  const Placer::Compiled& compiled;
  const ClusterState& state;
  const std::vector<InstanceEntry>& entries;  // state.EntriesOf(request.cluster)
  uint64_t task_seed;                         // the random source of this task index
};

// The index walks (StrategyKind::index_walk), in placement_walks.cc but WalkFragment (fragmentation.cc). Each is the
// fast path of the strategy that comes first in the request: it either decides (fills `result`, returns true) or
// leaves the decision to the scan (returns false, `result` untouched). All but SampleRandom decide exactly as the
// full scan would.
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
