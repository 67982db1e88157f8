// The index walks (StrategyKind::index_walk, declared in scheduler/placement_parts.h): the fast paths of
// Placer::PlaceOne for one-strategy requests that an index of the cluster state answers (the GPUs by remaining
// memory, the instances by remaining CPU or memory, by group count, or a random sample) without scoring every
// instance, and TieGroupPick, the decision inside one tie group of such a walk.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "scheduler/placement_parts.h"
#include "scheduler/strategies.h"

namespace gpupack {
namespace {

// TieGroupPick: the decision among the instances of one tie group on the first strategy (same remaining CPU or
// memory for binpack, same group count for spread), offered in registration order after passing every filter,
// for the index walks of PlaceOne. With one strategy the first offer is the decision. With more, the first offer
// is held and the later strategies are prepared (which may walk the whole cluster, e.g. spread(attribute)) only
// when a second one arrives; candidates are then scored as the scan would, ties keeping the earlier instance,
// and the walk may stop once the later strategies reach their floors.
class TieGroupPick {
 public:
  TieGroupPick(const Placer::Compiled& c, const ClusterState& state, const std::vector<InstanceEntry>& entries,
               const PlacementRequest& request, uint64_t task_seed)
      : c_(c), state_(state), entries_(entries), request_(request), task_seed_(task_seed),
        scores_(c.scorers.size()) {}

  // Offer takes one candidate of the tie group; true when no later candidate can change the decision.
  bool Offer(const ContainerInstance& inst, uint32_t pos, const GpuFit& fit) {
    if (c_.scorers.size() == 1) {  // the walk's order already breaks ties by registration order
      best_ = &inst;
      best_fit_ = fit;
      return true;
    }
    if (!first_) {
      first_ = Candidate{&inst, pos, fit};
      return false;
    }
    if (!ctx_) {
      ctx_ = PrepareScorers(c_, state_, entries_, request_);
      floors_.resize(c_.scorers.size());
      for (size_t i = 0; i < c_.scorers.size(); ++i) floors_[i] = std::max(c_.floors[i], ctx_->per_scorer[i].floor);
      if (Consider(*first_)) return true;
    }
    return Consider(Candidate{&inst, pos, fit});
  }

  // Started: some candidate of the group was offered.
  bool started() const { return best_ != nullptr || first_.has_value(); }

  // Decision: the chosen instance and its GPU fit; null when nothing was offered.
  std::pair<const ContainerInstance*, GpuFit> Decision() const {
    if (best_) return {best_, best_fit_};
    if (first_) return {first_->inst, first_->fit};  // the tie group had one candidate
    return {nullptr, GpuFit{}};
  }

 private:
  struct Candidate {
    const ContainerInstance* inst;
    uint32_t pos;
    GpuFit fit;
  };

  // Consider scores a candidate against the best so far; true when no later one can beat it.
  bool Consider(const Candidate& k) {
    const uint64_t key = c_.needs_random_key ? Mix(task_seed_ ^ HashString(k.inst->arn)) : 0;
    bool at_floor = true;
    for (size_t i = 0; i < c_.scorers.size(); ++i) {
      scores_[i] = c_.scorers[i]->Score(*k.inst, *entries_[k.pos].load, request_.demand, k.fit, key, *ctx_, i,
                                        k.pos);
      at_floor = at_floor && (i == 0 || scores_[i] <= floors_[i]);  // the first score is the same in the group
    }
    if (best_ && !(scores_ < best_scores_)) return false;  // ties keep the earlier-registered instance
    best_ = k.inst;
    best_scores_ = scores_;
    best_fit_ = k.fit;
    return at_floor;
  }

  const Placer::Compiled& c_;
  const ClusterState& state_;
  const std::vector<InstanceEntry>& entries_;
  const PlacementRequest& request_;
  const uint64_t task_seed_;
  std::optional<ScoreContext> ctx_;
  std::vector<double> floors_, best_scores_, scores_;
  const ContainerInstance* best_ = nullptr;
  GpuFit best_fit_;
  std::optional<Candidate> first_;
};

}  // namespace

// SampleRandom: the fast path for random as the only strategy (the default). Rejection sampling over the
// instance list is uniform over the eligible instances, like the scan, and touches a handful of instances when
// most are eligible. After kRandomProbes misses (a nearly full cluster) the full scan decides.
bool SampleRandom(const IndexWalkArgs& args, Placement& result) {
  const PlacementRequest& req = args.request;
  const Placer::Compiled& c = args.compiled;
  const auto& entries = args.entries;
  if (c.scorers.size() != 1 || entries.empty()) return false;
  constexpr int kRandomProbes = 32;
  for (int k = 0; k < kRandomProbes; ++k) {
    const InstanceEntry& e = entries[Mix(args.task_seed + static_cast<uint64_t>(k)) % entries.size()];
    if (IsInactive(*e.instance) || !InOnlyList(req, *e.instance)) continue;
    FilterOutcome f;
    if (!RunFilters(req, c.member_of, c.distinct_instance, c.prefer_emptiest, *e.instance, *e.load, false, f))
      continue;
    result.instance = e.instance;
    result.gpu_indices = ChosenGpus(req.demand, *e.instance, f.fit);
    return true;
  }
  return false;
}

// WalkGpuIndex: the fast path for binpack(gpuMemory) first and a shared task: walk the cluster's GPUs in
// ascending remaining memory from the task's need. The first GPU whose instance passes every filter has the
// least memory left after placement, which is exactly the first score of the scan; its ties (same remaining
// memory) are then decided by the other strategies and registration order, as in the scan. When nothing fits,
// the scan builds one failure per instance.
bool WalkGpuIndex(const IndexWalkArgs& args, Placement& result) {
  const PlacementRequest& req = args.request;
  const Placer::Compiled& c = args.compiled;
  const ClusterState& state = args.state;
  const auto& entries = args.entries;
  const TaskDemand& demand = req.demand;
  if (demand.gpu_kind != GpuKind::kShared) return false;
  const auto& index = state.GpuIndex(req.cluster);
  std::vector<const ContainerInstance*> rejected;  // instances that failed a filter (small)
  std::optional<MiB> tie_remaining;
  struct Tie {
    uint32_t pos;
    GpuFit fit;
  };
  std::vector<Tie> ties;
  for (auto it = index.lower_bound(GpuSlot{demand.gpu_memory, 0, 0, nullptr}); it != index.end(); ++it) {
    if (tie_remaining && it->remaining != *tie_remaining) break;
    const ContainerInstance* inst = it->instance;
    const Gpu& g = inst->gpus[it->gpu];
    if (g.remaining_memory_mib != it->remaining || !Shareable(g)) continue;
    if (req.compute_aware && g.compute_used_percent + demand.gpu_compute > 100) continue;
    if (IsInactive(*inst) || !InOnlyList(req, *inst)) continue;
    if (std::find(rejected.begin(), rejected.end(), inst) != rejected.end()) continue;
    bool seen = false;
    for (const auto& t : ties) seen = seen || t.pos == it->seq;
    if (seen) continue;
    FilterOutcome f;
    if (!RunFilters(req, c.member_of, c.distinct_instance, c.prefer_emptiest, *inst, *entries[it->seq].load, false,
                    f)) {
      rejected.push_back(inst);
      continue;
    }
    tie_remaining = it->remaining;
    ties.push_back({it->seq, f.fit});
    if (c.scorers.size() == 1) break;  // index order already breaks ties by registration order
  }
  if (ties.empty()) return false;
  ScoreContext ctx = PrepareScorers(c, state, entries, req);
  size_t best = 0;
  std::vector<double> best_scores, scores(c.scorers.size());
  for (size_t k = 0; k < ties.size(); ++k) {
    const InstanceEntry& e = entries[ties[k].pos];
    uint64_t key = c.needs_random_key ? Mix(args.task_seed ^ HashString(e.instance->arn)) : 0;
    for (size_t i = 0; i < c.scorers.size(); ++i)
      scores[i] = c.scorers[i]->Score(*e.instance, *e.load, demand, ties[k].fit, key, ctx, i, ties[k].pos);
    if (k == 0 || scores < best_scores) {
      best = k;
      best_scores = scores;
    }
  }
  const ContainerInstance* chosen = entries[ties[best].pos].instance;
  result.instance = chosen;
  result.gpu_indices = ChosenGpus(demand, *chosen, ties[best].fit);
  return true;
}

// WalkHostIndex: the fast path for binpack(cpu|memory) first: walk the cluster's instances in ascending
// remaining CPU (memory) from the task's need; the ones below it would fail the CPU (memory) filter. The first
// instance that passes every filter has the least left after placement, which is exactly the first score of
// the scan. With one strategy it is the scan's choice (the index orders equal remaining by registration order);
// with more, the rest of its tie group (same remaining, ascending registration order) is filtered, and when two
// or more pass they are scored as the scan would, stopping early where the later strategies reach their
// floors. When nothing fits (or the index could not be trusted) the scan decides and builds the failures.
static bool WalkHostIndex(const IndexWalkArgs& args, HostResource resource, Placement& result) {
  const PlacementRequest& req = args.request;
  const auto& entries = args.entries;
  if (entries.empty()) return false;
  const bool cpu = resource == HostResource::kCpu;
  const auto& index = args.state.HostIndex(req.cluster, resource);
  // Every instance is indexed once; an index that disagrees with the instance list (or an entry whose key is
  // not the instance's value, checked below) leaves the decision to the scan.
  bool consistent = index.size() == entries.size();
  std::optional<int64_t> tie_remaining;
  const int64_t need = cpu ? req.demand.cpu : req.demand.memory;
  const Placer::Compiled& c = args.compiled;
  TieGroupPick pick(c, args.state, entries, req, args.task_seed);
  FilterOutcome f;
  for (auto it = index.lower_bound(HostSlot{need, 0, nullptr}); consistent && it != index.end(); ++it) {
    if (tie_remaining && it->remaining != *tie_remaining) break;
    const ContainerInstance& inst = *it->instance;
    if ((cpu ? inst.remaining.cpu : inst.remaining.memory) != it->remaining || it->seq >= entries.size() ||
        entries[it->seq].instance != &inst) {
      consistent = false;
      break;
    }
    if (IsInactive(inst) || !InOnlyList(req, inst)) continue;
    const InstanceLoad& load = *entries[it->seq].load;
    f.fit = GpuFit{};
    if (!RunFilters(req, c.member_of, c.distinct_instance, c.prefer_emptiest, inst, load, false, f)) continue;
    tie_remaining = it->remaining;
    if (pick.Offer(inst, it->seq, f.fit)) break;
  }
  auto [best, best_fit] = pick.Decision();
  if (!consistent || !best) return false;
  result.instance = best;
  result.gpu_indices = ChosenGpus(req.demand, *best, best_fit);
  return true;
}

bool WalkCpuIndex(const IndexWalkArgs& args, Placement& result) {
  return WalkHostIndex(args, HostResource::kCpu, result);
}
bool WalkMemoryIndex(const IndexWalkArgs& args, Placement& result) {
  return WalkHostIndex(args, HostResource::kMemory, result);
}

// WalkGroupIndex: the fast path for spread(instanceId|host) first: visit the instances by ascending count of the
// request's group, and in registration order within a count, which is the scan's order of preference on the
// first strategy. Count 0 first: the instance list in registration order, skipping the members of the group's
// index (ClusterState::GroupIndex); then the index itself, ordered by (count, registration order). The first
// instance that passes every filter has the least first score of the scan. With one strategy it is the scan's
// choice; with more, the rest of its tie group (same count) is filtered and scored as the scan would, stopping
// early where the later strategies reach their floors. With distinctInstance no instance of count 1 or more
// passes, so only count 0 is walked. When nothing fits (or the index could not be trusted) the scan decides and
// builds the failures.
bool WalkGroupIndex(const IndexWalkArgs& args, Placement& result) {
  const PlacementRequest& req = args.request;
  const Placer::Compiled& c = args.compiled;
  const ClusterState& state = args.state;
  const auto& entries = args.entries;
  if (entries.empty()) return false;
  const uint32_t group_id = state.GroupId(req.group);
  const GroupMembers& members = state.GroupIndex(req.cluster, group_id);
  const auto& index = members.by_count;
  // An index that disagrees with the instance list (or an entry whose count is not the instance's, checked
  // below) leaves the decision to the scan.
  bool consistent = index.size() <= entries.size();
  TieGroupPick pick(c, state, entries, req, args.task_seed);
  FilterOutcome f;
  // Filters one instance of the current count; true when the decision is made.
  auto visit = [&](uint32_t pos) {
    const ContainerInstance& inst = *entries[pos].instance;
    if (IsInactive(inst) || !InOnlyList(req, inst)) return false;
    f.fit = GpuFit{};
    if (!RunFilters(req, c.member_of, c.distinct_instance, c.prefer_emptiest, inst, *entries[pos].load, false, f))
      return false;
    return pick.Offer(inst, pos, f.fit);
  };
  if (consistent && index.size() < entries.size()) {  // some instance has count 0
    // The members' bitmap skips 64 instances of count 1 or more per word, without touching their loads.
    const uint32_t n = static_cast<uint32_t>(entries.size());
    for (uint32_t word = 0; word * 64 < n; ++word) {
      uint64_t zeros = word < members.present.size() ? ~members.present[word] : ~uint64_t{0};
      bool stop = false;
      while (zeros != 0 && !stop) {
        const uint32_t pos = word * 64 + static_cast<uint32_t>(std::countr_zero(zeros));
        zeros &= zeros - 1;
        if (pos >= n) break;
        if (entries[pos].load->CountOfGroupId(group_id) != 0) {  // the bitmap disagrees with the load
          consistent = false;
          stop = true;
        } else {
          stop = visit(pos);
        }
      }
      if (stop) break;
    }
  }
  if (consistent && !pick.started() && !c.distinct_instance) {
    std::optional<int> tie_count;
    for (const auto& [count, pos] : index) {
      if (pos >= entries.size() || entries[pos].load->CountOfGroupId(group_id) != count) {
        consistent = false;
        break;
      }
      if (tie_count && count != *tie_count) break;
      if (visit(pos)) break;
      if (pick.started()) tie_count = count;
    }
  }
  auto [best, best_fit] = pick.Decision();
  if (!consistent || !best) return false;
  result.instance = best;
  result.gpu_indices = ChosenGpus(req.demand, *best, best_fit);
  return true;
}

}  // namespace gpupack
