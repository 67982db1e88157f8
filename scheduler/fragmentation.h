// Fragmentation: how much of a container instance's free GPU capacity a target workload could not use, and how
// a placement changes it: the "expected fragment" of Weng et al., "Beware of Fragmentation: Scheduling
// GPU-Sharing Workloads with Fragmentation Gradient Descent" (USENIX ATC 2023), in GPUs (a GPU's free share is its
// remaining memory over its total memory). For each class t of the target workload, with probability p_t:
//   - a class that needs no GPU counts all the instance's free GPU share (the paper's simulator does so);
//   - a class that does not fit the instance (a GPU model its memberOf refuses, too little CPU, not enough GPUs
//     with room for it) counts all the free share;
//   - a class that fits counts the free share of the GPUs too small for it (a shared class: free memory below
//     its need; a dedicated class: GPUs partly used);
//   fragment(instance) = sum_t p_t * that. Host memory is not looked at (the filters check it).
// A placement's change is delta = fragment(after) - fragment(before) (the largest decrease wins), the shared
// task's GPU the one of the least delta. Two scores rank instances by it (FragmentMeasure, Score in the .cc):
//   kFgd       the paper's simulator: floor(100 * sigmoid(-delta)), ties to the instance registered first; with
//              the workload's typical shapes as target (gpupack plan --strategy fgd);
//   kGpupack   binpack(fragmentation): the same rank, ties broken first by the same rank of the change of the
//              CPU-aware fragment (below), then by the IDLE GPUs the instance keeps (fewer first), with the target
//              learned from the cluster's recent demands or given by an operator. When the learned target is one of
//              many multi-GPU tasks (TargetWorkload::multi_gpu), its classes of 8 or more GPUs are damped, the rank
//              is that of the fragment change plus half the CPU-aware change, its ties go to the fragment change
//              itself in steps of 0.001 GPU, and the last whole 8-GPU instances are kept for 8-GPU tasks
//              (LearnTarget, WalkFragment).
// The CPU-aware fragment also counts, for a class that fits, the free share its tasks could not use for lack of
// host CPU: the instance's free CPU holds n = floor(free CPU / class CPU) tasks of it, which use at most n times
// the class's GPU share (a shared class: its need over the GPU's total; a dedicated class: its GPU count), so
// the class counts free share - min(free share on GPUs with room, n * share) instead of the share of the GPUs
// too small for it. It tells apart placements that strand the same GPUs but leave different CPU for them.
// docs/planning.md says why kGpupack packs better. ClusterState keeps a target workload per cluster (the
// operator's, or one learned from a bounded window of recent RunTask demands: DemandWindow) and a FragmentCache
// of each instance's best move per demand, recomputed only for the instances a placement changed.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "scheduler/model.h"
#include "scheduler/query.h"

namespace gpupack {

struct InstanceEntry;  // scheduler/cluster_state.h
struct InstanceLoad;

// WorkloadShape: one class of tasks of a target workload and its share of arrivals.
struct WorkloadShape {
  int64_t cpu = 0;
  MiB memory = 0;
  GpuKind gpu_kind = GpuKind::kNone;
  MiB gpu_memory = 0;  // shared: on one GPU, in the cluster's GPU memory units
  int gpu_count = 0;   // dedicated
  std::vector<std::string> member_of;  // the class's memberOf expressions (which instances it may use)
  double weight = 0;                   // share of arrivals (the shapes of a TargetWorkload sum to 1)

  // Key: the shape without its weight, to count equal shapes.
  std::tuple<int64_t, MiB, int, MiB, int, std::vector<std::string>> Key() const {
    return {cpu, memory, static_cast<int>(gpu_kind), gpu_memory, gpu_count, member_of};
  }
};

// WorkloadShapeOf: the shape of a demand and its constraints (memberOf only; weight 1).
WorkloadShape WorkloadShapeOf(const TaskDemand& demand, const std::vector<PlacementConstraint>& constraints);

// TargetWorkload: the classes a fragment is measured against. Immutable once built; `id` is unique per build
// (the FragmentCache's key), so a changed workload never reuses cached moves.
struct TargetWorkload {
  struct Class {
    WorkloadShape shape;
    std::vector<query::ExpressionPtr> member_of;  // parsed shape.member_of; unparsable ones are left out
  };
  std::vector<Class> classes;
  uint64_t id = 0;
  bool multi_gpu = false;  // kGpupack's multi-GPU rule applies (set by LearnTarget only)
  double reserve_share = 0;  // with multi_gpu: the share of the learned demands that ask for kDampFromGpus+ GPUs
  bool empty() const { return classes.empty(); }
};

// BuildTargetWorkload: the most frequent shapes, by descending count (ties: the order of `shapes`), until they
// cover `coverage` of all (the paper: 0.95), renormalized to sum 1. Shapes with equal Key are merged first.
std::shared_ptr<const TargetWorkload> BuildTargetWorkload(const std::vector<WorkloadShape>& shapes,
                                                          double coverage = 0.95);

enum class FragmentMeasure { kFgd, kGpupack };

// Fragment: fragment(instance) in GPUs for a workload (see the top of this file).
double Fragment(const ContainerInstance& inst, const InstanceLoad& load, const TargetWorkload& workload);

// NodeStats: an instance's state summarized per class of a workload, from which a move's fragment change is
// O(classes): its free CPU, free GPU share and IDLE GPUs, and per class whether its memberOf admits the instance,
// the GPUs with room for one task of it (shared: free memory >= its need; dedicated: IDLE) and the free share of
// the other shareable GPUs; and the fragment they add up to.
struct NodeStats {
  int64_t cpu = 0;
  MiB gpu_size = 1;  // the total memory of the instance's first GPU (a shared class's GPU share is its need over it)
  double free_total = 0;
  int idle = 0;
  std::vector<uint8_t> access;
  std::vector<int> room;
  std::vector<double> small;
  double fragment = 0;      // fragment(instance) itself
  double cpu_fragment = 0;  // the CPU-aware fragment (the top of this file), for kGpupack's tie-break
};
NodeStats StatsOf(const ContainerInstance& inst, const InstanceLoad& load, const TargetWorkload& workload);

// Move: the best placement of a demand on one instance by the fragment measure.
struct FragmentMove {
  bool fits = false;    // the instance's free CPU, memory and GPUs hold the demand
  double delta = 0;     // the move's score (lower is better): kFgd -floor(100 * sigmoid(-d)), kGpupack
                        // -1e9 * floor(100 * sigmoid(-d)) - 1e6 * floor(100 * sigmoid(-c)) + IDLE GPUs left,
                        // d = fragment(after) - fragment(before), c the same for the CPU-aware fragment; with a
                        // multi_gpu target -1e12 * floor(100 * sigmoid(-(d + c / 2))) + 1000 * round(1000 * d)
  int shared_gpu = -1;  // shared: the GPU of the largest decrease (ties: the lowest index)
};
// BestMove: for a shared demand every GPU with room (and, compute-aware, compute) is tried; a dedicated demand
// takes the first gpu_count IDLE GPUs, as the placement does. An empty workload is measured against the demand
// itself (one class, weight 1).
FragmentMove BestMove(const ContainerInstance& inst, const InstanceLoad& load, const TaskDemand& demand,
                      bool compute_aware, const TargetWorkload& workload, FragmentMeasure measure);

// LearnTarget: the target binpack(fragmentation) learns from a window of demands: BuildTargetWorkload(shapes, 0.95);
// when its classes of 2 or more dedicated GPUs hold more than kMultiGpuShare of its classes with a GPU (by weight),
// it is marked multi_gpu and each class of k >= kDampFromGpus GPUs then weighs its share divided by
// k^kDampExponent (the weights renormalized to sum 1). By count such a class is rare, but it counts all the free
// share of every instance without k IDLE GPUs; at full weight it outweighs the shared and 1-GPU classes, whose
// leftovers are most of what stays unallocated. reserve_share is then the share of all the window's demands (not
// only the 95%) that ask for kDampFromGpus or more GPUs: WalkFragment keeps that share of the instances of
// kDampFromGpus GPUs whole for them. Measured on the openb lists (docs/planning.md, "The multi-GPU lists"); below
// the share the rule is unchanged.
inline constexpr double kMultiGpuShare = 0.03;
inline constexpr int kDampFromGpus = 8;
inline constexpr double kDampExponent = 1.25;
// kCpuRankWeight: with a multi_gpu target, the CPU-aware change enters the rank at this weight beside the plain one.
inline constexpr double kCpuRankWeight = 0.5;
std::shared_ptr<const TargetWorkload> LearnTarget(const std::vector<WorkloadShape>& shapes);

// DemandWindow: the last `capacity` demands a cluster's RunTask calls asked for, and the target workload learned
// from them (their most frequent shapes covering 95%; LearnTarget once it holds 1,024 demands): rebuilt every
// `rebuild_every` records (every n/2-th while the window holds n < rebuild_every), and replaced only when the
// shares moved (sum of absolute differences over shapes above 0.1), so a steady workload keeps its cache. Owned by
// ClusterState (one writer).
class DemandWindow {
 public:
  explicit DemandWindow(size_t capacity = 2048, size_t rebuild_every = 64)
      : capacity_(capacity), rebuild_every_(rebuild_every) {}
  void Record(WorkloadShape shape);
  // The learned workload; null until the first rebuild.
  const std::shared_ptr<const TargetWorkload>& Learned() const { return learned_; }
  size_t size() const { return window_.size(); }

 private:
  void Rebuild();
  size_t capacity_, rebuild_every_;
  std::deque<WorkloadShape> window_;
  size_t since_rebuild_ = 0;
  std::shared_ptr<const TargetWorkload> learned_;
  std::map<std::tuple<int64_t, MiB, int, MiB, int, std::vector<std::string>>, double> learned_shares_;
};

// FragmentCache: per (measure, demand, compute-aware, workload) the best move of every instance of a cluster, by
// registration position, with the instance's stamp (InstanceLoad::stamp) when it was computed: a placement
// changes one instance's stamp, so only that instance is recomputed on the next decision. At most kMaxDemands
// demands are kept (the least recently used is dropped). Not thread-safe, and no lock: it belongs to the one user
// of its ClusterState (the server's writer, under its lock, ExplainPlacement included; one planner seed, each with a
// ClusterState of its own), through ClusterFragments::MoveCache.
class FragmentCache {
 public:
  static constexpr size_t kMaxDemands = 128;
  // Visit: calls visit(pos, move) for every instance's move, in position order, recomputing stale ones first
  // (an instance whose stamp in `stamps`, ClusterState::StampsOf, moved; none when `last_stamp`,
  // ClusterState::LastStamp, is the one of the previous visit). `visit` may ask Move of the same cache (the table
  // it visits is the most recently used, so never the one Move's TableFor drops).
  template <typename Fn>
  void Visit(const std::vector<InstanceEntry>& entries, const std::vector<uint64_t>& stamps, uint64_t last_stamp,
             const TaskDemand& demand, bool compute_aware, const TargetWorkload& workload, FragmentMeasure measure,
             Fn&& visit) {
    Table& t = TableFor(demand, compute_aware, workload, measure);
    if (t.seen != last_stamp || t.slots.size() != entries.size() || stamps.size() != entries.size()) {
      if (t.slots.size() < entries.size()) t.slots.resize(entries.size());
      for (size_t pos = 0; pos < entries.size(); ++pos)
        if (pos >= stamps.size() || t.slots[pos].stamp != stamps[pos] || stamps[pos] == 0)
          Refresh(t, entries, pos, demand, compute_aware, workload, measure);
      t.seen = last_stamp;
    }
    for (size_t pos = 0; pos < entries.size(); ++pos) visit(pos, t.slots[pos].move);
  }
  // Move: one instance's move (cached).
  FragmentMove Move(const std::vector<InstanceEntry>& entries, size_t pos, const TaskDemand& demand,
                    bool compute_aware, const TargetWorkload& workload, FragmentMeasure measure);

 private:
  struct Slot {
    uint64_t stamp = 0;
    FragmentMove move;
  };
  struct Table {
    std::vector<Slot> slots;
    uint64_t last_used = 0;
    uint64_t seen = 0;  // ClusterState::LastStamp when every slot was last brought up to date
  };
  using Key = std::tuple<int, int64_t, MiB, int, MiB, int, int, bool, uint64_t>;
  Table& TableFor(const TaskDemand& demand, bool compute_aware, const TargetWorkload& workload,
                  FragmentMeasure measure);
  void Refresh(Table& t, const std::vector<InstanceEntry>& entries, size_t pos, const TaskDemand& demand,
               bool compute_aware, const TargetWorkload& workload, FragmentMeasure measure);
  struct StatsSlot {
    uint64_t stamp = 0;
    NodeStats stats;
  };
  std::vector<StatsSlot> stats_;   // per instance position, for workload stats_workload_
  uint64_t stats_workload_ = 0;
  std::map<Key, Table> tables_;
  uint64_t clock_ = 0;
};

// ClusterFragments: what ClusterState keeps per cluster for the fragmentation strategies: the operator's target
// workload (when given), the window of recent demands, and the cache of moves.
struct ClusterFragments {
  std::shared_ptr<const TargetWorkload> operator_workload;
  DemandWindow window;
  // Target: the operator's workload, else the learned one, else null (measure against the demand itself).
  const TargetWorkload* Target() const {
    if (operator_workload) return operator_workload.get();
    return window.Learned().get();
  }
  // MoveCache: the cache of moves. Placement reads a const ClusterState and fills this cache as it goes: the one
  // place a const ClusterState changes, and only in what it remembers, never in a placement's result. It is the
  // ClusterState's user's alone (one thread at a time, as ClusterState itself), so no lock.
  FragmentCache& MoveCache() const { return cache_; }

 private:
  mutable FragmentCache cache_;
};

}  // namespace gpupack
