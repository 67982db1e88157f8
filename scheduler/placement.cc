#include "scheduler/placement.h"

#include <algorithm>
#include <bit>
#include <optional>
#include <string>

#include "scheduler/placement_parts.h"
#include "scheduler/query.h"
#include "scheduler/strategies.h"

namespace gpupack {

std::string FormatMiB(MiB mib) {
  std::string digits = std::to_string(mib < 0 ? -mib : mib);
  std::string out;
  int n = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (n > 0 && n % 3 == 0) out.push_back(',');
    out.push_back(*it);
    ++n;
  }
  if (mib < 0) out.push_back('-');
  std::reverse(out.begin(), out.end());
  return out + " MiB";
}

namespace {

// FitGpus chooses the GPU(s) for `demand` on `inst`: nullptr and `fit` when they fit, else the failure reason
// (and, when `detail` is given, the human detail). `prefer_emptiest` flips best fit to worst fit (spread).
// Dedicated tasks take the lowest-indexed IDLE GPUs (ChosenGpus lists them).
const char* FitGpus(const TaskDemand& demand, const ContainerInstance& inst, bool compute_aware, bool prefer_emptiest,
                    GpuFit& fit, std::string* detail) {
  if (demand.gpu_kind == GpuKind::kNone) return nullptr;
  if (demand.gpu_kind == GpuKind::kShared) {
    size_t best = SIZE_MAX;
    MiB best_remaining = 0;
    bool memory_fit_somewhere = false;
    for (size_t i = 0; i < inst.gpus.size(); ++i) {
      const Gpu& g = inst.gpus[i];
      if (!Shareable(g) || g.remaining_memory_mib < demand.gpu_memory) continue;
      memory_fit_somewhere = true;
      if (compute_aware && g.compute_used_percent + demand.gpu_compute > 100) continue;
      bool better = best == SIZE_MAX || (prefer_emptiest ? g.remaining_memory_mib > best_remaining
                                                         : g.remaining_memory_mib < best_remaining);
      if (better) {
        best = i;
        best_remaining = g.remaining_memory_mib;
      }
    }
    if (best != SIZE_MAX) {
      fit.shared_gpu = best;
      fit.chosen_remaining_after = best_remaining - demand.gpu_memory;
      return nullptr;
    }
    if (inst.gpus.empty()) {
      if (detail)
        *detail = "instance has no GPUs; task needs " + FormatMiB(demand.gpu_memory) + " of GPU memory on one GPU";
      return reason::kGpu;
    }
    int shareable = 0, dedicated = 0, held = 0;
    MiB largest = 0;
    int max_compute_free = 0;
    for (const Gpu& g : inst.gpus) {
      if (g.held) { ++held; continue; }
      if (g.mode == GpuMode::kDedicated) { ++dedicated; continue; }
      ++shareable;
      largest = std::max(largest, g.remaining_memory_mib);
      if (g.remaining_memory_mib >= demand.gpu_memory)
        max_compute_free = std::max(max_compute_free, 100 - g.compute_used_percent);
    }
    if (memory_fit_somewhere) {
      if (detail)
        *detail = "compute-aware placement is on: the GPUs with " + FormatMiB(demand.gpu_memory) +
                  " free have at most " + std::to_string(max_compute_free) + "% compute undeclared; task needs " +
                  std::to_string(demand.gpu_compute) + "%";
      return reason::kGpuCompute;
    }
    if (detail) {
      const Gpu* biggest = &inst.gpus.front();  // the instance's largest GPU in all: can the task ever fit?
      for (const Gpu& g : inst.gpus)
        if (g.total_memory_mib > biggest->total_memory_mib) biggest = &g;
      if (biggest->total_memory_mib < demand.gpu_memory)
        *detail = "task needs " + FormatMiB(demand.gpu_memory) + " on one GPU and the largest GPU of this instance, " +
                  biggest->id + ", has " + FormatMiB(biggest->total_memory_mib) + " in all: it can never fit here";
      else if (shareable > 0)
        *detail = "largest free block on any GPU is " + FormatMiB(largest) + "; task needs " +
                  FormatMiB(demand.gpu_memory) + " on one GPU";
      else
        *detail = "no GPU can be shared: task needs " + FormatMiB(demand.gpu_memory) + " on one GPU";
      if (dedicated > 0 || held > 0) {
        *detail += " (";
        if (dedicated > 0) *detail += std::to_string(dedicated) + " GPU(s) DEDICATED";
        if (dedicated > 0 && held > 0) *detail += ", ";
        if (held > 0) *detail += std::to_string(held) + " GPU(s) held after a fault";
        *detail += ")";
      }
    }
    return shareable > 0 ? reason::kGpuMemory : reason::kGpu;
  }
  // Dedicated: whole IDLE GPUs, lowest index first.
  int taken = 0;
  MiB taken_memory = 0;
  for (size_t i = 0; i < inst.gpus.size() && taken < demand.gpu_count; ++i)
    if (!inst.gpus[i].held && inst.gpus[i].mode == GpuMode::kIdle) {
      ++taken;
      taken_memory += inst.gpus[i].remaining_memory_mib;
    }
  if (taken == demand.gpu_count) {
    fit.taken_memory = taken_memory;
    return nullptr;
  }
  if (detail) {
    int idle = 0, mps = 0, dedicated = 0, held = 0;
    for (const Gpu& g : inst.gpus) {
      if (g.held) ++held;
      else if (g.mode == GpuMode::kIdle) ++idle;
      else if (g.mode == GpuMode::kMps) ++mps;
      else ++dedicated;
    }
    *detail = "task needs " + std::to_string(demand.gpu_count) + " IDLE GPU(s); instance has " +
              std::to_string(idle) + " IDLE, " + std::to_string(mps) + " in NVIDIA_MPS mode, " +
              std::to_string(dedicated) + " DEDICATED";
    if (held > 0) *detail += ", " + std::to_string(held) + " held after a fault";
  }
  return reason::kGpu;
}

}  // namespace

std::vector<size_t> ChosenGpus(const TaskDemand& demand, const ContainerInstance& inst, const GpuFit& fit) {
  std::vector<size_t> out;
  if (demand.gpu_kind == GpuKind::kShared) {
    out.push_back(fit.shared_gpu);
  } else if (demand.gpu_kind == GpuKind::kDedicated) {
    for (size_t i = 0; i < inst.gpus.size() && static_cast<int>(out.size()) < demand.gpu_count; ++i)
      if (!inst.gpus[i].held && inst.gpus[i].mode == GpuMode::kIdle) out.push_back(i);
  }
  return out;
}

// ---- the compiled request (Placer::Compiled: placement_parts.h) -------------------------------------------

Placer::Placer(PlacementRequest request) : request_(std::move(request)), compiled_(std::make_unique<Compiled>()) {}
Placer::~Placer() = default;

Result<std::unique_ptr<Placer>> Placer::Create(PlacementRequest request) {
  std::unique_ptr<Placer> p(new Placer(std::move(request)));
  Compiled& c = *p->compiled_;
  for (const auto& pc : p->request_.constraints) {
    if (pc.type == "distinctInstance") {
      c.distinct_instance = true;
    } else if (pc.type == "memberOf") {
      auto expr = query::Parse(pc.expression);
      if (!expr.ok()) return expr.status();
      c.member_of.emplace_back(pc.expression, std::move(expr).value());
    } else {
      return Status::InvalidParameter("unknown placement constraint type '" + pc.type + "'");
    }
  }
  std::vector<PlacementStrategy> strategies = p->request_.strategies;
  if (strategies.empty()) strategies.push_back({"random", ""});
  for (const auto& s : strategies) {
    const StrategyKind* kind = ResolveStrategyKind(s);
    if (!kind)
      return Status::InvalidParameter("unknown placement strategy '" + s.type + "' with field '" + s.field + "'");
    if (!c.first) c.first = kind;
    c.scorers.push_back(kind->make_scorer(s.field));
    c.needs_random_key = c.needs_random_key || kind->random_key;
  }
  for (const auto& scorer : c.scorers) c.floors.push_back(scorer->Floor(p->request_.demand));
  c.prefer_emptiest = c.first->gpu_choice == GpuChoice::kEmptiest;
  return p;
}

// RunFilters (placement_parts.h): status, agent, CPU, memory, GPU fit, then the constraints, in that order; the
// first that fails names the reason.
bool RunFilters(const PlacementRequest& req, const std::vector<std::pair<std::string, query::ExpressionPtr>>& member_of,
                bool distinct, bool prefer_emptiest, const ContainerInstance& inst, const InstanceLoad& load,
                bool with_detail, FilterOutcome& out) {
  out.reason = nullptr;
  auto fail = [&](const char* reason, auto&& make_detail) {
    out.reason = reason;
    if (with_detail) out.detail = make_detail();
    return false;
  };
  const TaskDemand& d = req.demand;
  // CapacityProviderFilter: a provider's task goes only to the provider's instances, and never to one held for
  // the head of the provider's line.
  if (!req.capacity_provider.empty()) {
    const std::string* provider = CapacityProviderOf(inst);
    if (!provider || *provider != req.capacity_provider)
      return fail(reason::kAttribute, [&] {
        return "the instance does not belong to capacity provider " + req.capacity_provider;
      });
  }
  if (!req.held_instance.empty() && inst.arn == req.held_instance)
    return fail(reason::kAttribute, [&] {
      return "the instance is held for the task at the head of capacity provider " + req.capacity_provider +
             "'s line";
    });
  // StatusFilter
  if (!IsActive(inst))
    return fail(reason::kStatus, [&] {
      return std::string("container instance is ") + Name(inst.status) + "; it takes no new tasks";
    });
  // AgentFilter
  if (!inst.agent_connected && !req.place_on_disconnected)
    return fail(reason::kAgent, [] {
      return "the instance's agent is not connected: no gpupack agent holds a channel to the server for it, so no "
             "task placed there would start";
    });
  if (inst.impaired)
    return fail(reason::kAgent, [] { return "the instance is impaired: its MPS control daemon is not responding"; });
  // CpuFilter, MemoryFilter
  if (inst.remaining.cpu < d.cpu)
    return fail(reason::kCpu, [&] {
      return "instance has " + std::to_string(inst.remaining.cpu) + " CPU units free; task needs " +
             std::to_string(d.cpu);
    });
  if (inst.remaining.memory < d.memory)
    return fail(reason::kMemory, [&] {
      return "instance has " + FormatMiB(inst.remaining.memory) + " of memory free; task needs " + FormatMiB(d.memory);
    });
  // GpuFitFilter
  if (const char* r =
          FitGpus(d, inst, req.compute_aware, prefer_emptiest, out.fit, with_detail ? &out.detail : nullptr)) {
    out.reason = r;
    return false;
  }
  // Constraints
  for (const auto& constraint : member_of)  // not a structured binding: clang 14 cannot capture one
    if (!query::Evaluate(*constraint.second, inst, load))
      return fail(reason::kAttribute,
                  [&] { return "MemberOf placement constraint unsatisfied: " + constraint.first; });
  if (distinct) {
    auto it = load.group_counts.find(req.group);
    if (it != load.group_counts.end() && it->second > 0)
      return fail(reason::kAttribute, [&] {
        return "DistinctInstance placement constraint unsatisfied: a task of group '" + req.group +
               "' is already on this instance";
      });
  }
  return true;
}

ScoreContext PrepareScorers(const Placer::Compiled& c, const ClusterState& state,
                            const std::vector<InstanceEntry>& entries, const PlacementRequest& request) {
  ScoreContext ctx;
  ctx.group_id = state.GroupId(request.group);
  ctx.state = &state;
  ctx.entries = &entries;
  ctx.cluster = &request.cluster;
  ctx.compute_aware = request.compute_aware;
  ctx.per_scorer.resize(c.scorers.size());
  for (size_t i = 0; i < c.scorers.size(); ++i) c.scorers[i]->Prepare(entries, ctx, i);
  return ctx;
}

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

// ---- the index walks (StrategyKind::index_walk) ----------------------------------------------------------

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

Placement Placer::PlaceOne(const ClusterState& state, int task_index) const {
  Placement result;
  const auto& entries = state.EntriesOf(request_.cluster);
  const Compiled& c = *compiled_;
  const TaskDemand& demand = request_.demand;
  const uint64_t task_seed = Mix(request_.seed ^ Mix(static_cast<uint64_t>(task_index) + 1));
  // A provider's task: its candidates are the provider's instances alone (the index walks below walk the whole
  // cluster, so they run only when the provider has every instance of it).
  const std::vector<uint32_t>* members =
      request_.capacity_provider.empty() ? nullptr
                                         : &state.ProviderEntries(request_.cluster, request_.capacity_provider);
  if (members && members->size() == entries.size()) members = nullptr;  // the provider is the whole cluster
  const size_t candidates = members ? members->size() : entries.size();
  auto position = [&](size_t k) -> size_t { return members ? (*members)[k] : k; };
  // The first strategy's fast path, if it has one (StrategyKind::index_walk): it decides as the scan below would,
  // or leaves the decision to it.
  if (!members && c.first->index_walk &&
      c.first->index_walk(IndexWalkArgs{request_, c, state, entries, task_seed}, result))
    return result;
  ScoreContext ctx = PrepareScorers(c, state, entries, request_);
  std::vector<double> floors(c.scorers.size());
  for (size_t i = 0; i < c.scorers.size(); ++i) floors[i] = std::max(c.floors[i], ctx.per_scorer[i].floor);
  const bool only_listed = !request_.only_instances.empty();
  // With a first strategy scored before the filters, an instance that cannot beat the best so far (a higher
  // first score; or an equal one when it is the only strategy, ties keeping the earlier instance) is skipped
  // unfiltered. It would not be chosen either way, so the decision is the scan's.
  const bool score_first = c.scorers.front()->ScoresBeforeFit();
  const bool single = c.scorers.size() == 1;
  std::vector<double> best_scores, scores(c.scorers.size());
  const ContainerInstance* best = nullptr;
  GpuFit best_fit;
  bool any_candidate = false;
  FilterOutcome f;
  for (size_t k = 0; k < candidates; ++k) {
    const size_t pos = position(k);
    const ContainerInstance& inst = *entries[pos].instance;
    if (IsInactive(inst) || (only_listed && !InOnlyList(request_, inst))) continue;
    any_candidate = true;
    if (score_first && best) {
      const double s0 = c.scorers.front()->Score(inst, *entries[pos].load, demand, GpuFit{}, 0, ctx, 0, pos);
      if (s0 > best_scores[0] || (single && s0 == best_scores[0])) continue;
    }
    f.fit = GpuFit{};
    if (!RunFilters(request_, c.member_of, c.distinct_instance, c.prefer_emptiest, inst, *entries[pos].load, false, f))
      continue;
    uint64_t key = c.needs_random_key ? Mix(task_seed ^ HashString(inst.arn)) : 0;
    bool at_floor = true;
    for (size_t i = 0; i < c.scorers.size(); ++i) {
      scores[i] = c.scorers[i]->Score(inst, *entries[pos].load, demand, f.fit, key, ctx, i, pos);
      at_floor = at_floor && scores[i] <= floors[i];
    }
    if (!best || scores < best_scores) {  // lexicographic; ties keep the earlier-registered instance
      best = &inst;
      best_scores = scores;
      best_fit = f.fit;
      if (at_floor) break;  // no later instance can score lower, and ties keep this one
    }
  }
  if (best) {
    result.instance = best;
    result.gpu_indices = ChosenGpus(demand, *best, best_fit);
    if (c.first->gpu_choice == GpuChoice::kFragment && demand.gpu_kind == GpuKind::kShared) {
      // The fragmentation strategies' GPU: the one of the least fragment growth (normally WalkFragment decides).
      if (const int g = FragmentGpu(request_, c, state, entries, *best); g >= 0)
        result.gpu_indices = {static_cast<size_t>(g)};
    }
    return result;
  }
  if (!any_candidate) {
    result.failures.push_back({"", reason::kMissing,
                               request_.capacity_provider.empty()
                                   ? "the cluster has no container instances to place on"
                                   : "capacity provider " + request_.capacity_provider +
                                         " has no container instances in the cluster to place on"});
    return result;
  }
  // Nothing fits: explain, one failure per rejected instance.
  for (size_t k = 0; k < candidates; ++k) {
    const InstanceEntry& e = entries[position(k)];
    if (IsInactive(*e.instance) || !InOnlyList(request_, *e.instance)) continue;
    FilterOutcome fail;
    RunFilters(request_, c.member_of, c.distinct_instance, c.prefer_emptiest, *e.instance, *e.load, true, fail);
    result.failures.push_back({e.instance->arn, fail.reason ? fail.reason : reason::kAttribute, fail.detail});
  }
  return result;
}

std::vector<InstanceVerdict> Placer::Explain(const ClusterState& state, int task_index) const {
  std::vector<InstanceVerdict> out;
  Placement chosen = PlaceOne(state, task_index);
  const Compiled& c = *compiled_;
  const auto& entries = state.EntriesOf(request_.cluster);
  ScoreContext ctx = PrepareScorers(c, state, entries, request_);
  const uint64_t task_seed = Mix(request_.seed ^ Mix(static_cast<uint64_t>(task_index) + 1));
  const TaskDemand& d = request_.demand;
  for (size_t pos = 0; pos < entries.size(); ++pos) {
    const ContainerInstance* inst = entries[pos].instance;
    if (IsInactive(*inst) || !InOnlyList(request_, *inst)) continue;
    const InstanceLoad& load = *entries[pos].load;
    FilterOutcome f;
    RunFilters(request_, c.member_of, c.distinct_instance, c.prefer_emptiest, *inst, load, true, f);
    InstanceVerdict v;
    v.arn = inst->arn;
    v.eligible = f.ok();
    v.chosen = chosen.instance == inst;
    if (!f.ok()) {
      v.reason = f.reason;
      v.detail = f.detail;
    } else {
      uint64_t key = c.needs_random_key ? Mix(task_seed ^ HashString(inst->arn)) : 0;
      for (size_t i = 0; i < c.scorers.size(); ++i)
        v.scores.push_back(c.scorers[i]->Score(*inst, load, d, f.fit, key, ctx, i, pos));
    }
    for (size_t i = 0; i < inst->gpus.size(); ++i) {
      const Gpu& g = inst->gpus[i];
      GpuVerdict gv;
      gv.gpu_id = g.id;
      bool chosen_gpu = v.chosen && std::find(chosen.gpu_indices.begin(), chosen.gpu_indices.end(), i) !=
                                        chosen.gpu_indices.end();
      if (d.gpu_kind == GpuKind::kNone) {
        gv.detail = "task needs no GPU";
      } else if (g.held) {
        gv.detail = "held after a fault";
      } else if (d.gpu_kind == GpuKind::kShared) {
        if (g.mode == GpuMode::kDedicated) {
          gv.detail = "DEDICATED to a task; shared tasks never land here";
        } else if (g.remaining_memory_mib < d.gpu_memory) {
          gv.detail = FormatMiB(g.remaining_memory_mib) + " free < " + FormatMiB(d.gpu_memory) + " needed";
        } else if (request_.compute_aware && g.compute_used_percent + d.gpu_compute > 100) {
          gv.detail = std::to_string(g.compute_used_percent) + "% compute declared + " +
                      std::to_string(d.gpu_compute) + "% > 100%";
        } else {
          gv.fits = true;
          gv.detail = FormatMiB(g.remaining_memory_mib - d.gpu_memory) + " would remain";
        }
      } else {
        if (g.mode != GpuMode::kIdle) {
          gv.detail = std::string("in ") + GpuModeName(g.mode) + " mode; dedicated tasks need an IDLE GPU";
        } else {
          gv.fits = true;
          gv.detail = "IDLE";
        }
      }
      if (chosen_gpu) gv.detail += " (chosen)";
      v.gpus.push_back(std::move(gv));
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<GpuReservation> ReservationsFor(const TaskDemand& demand, const ContainerInstance& instance,
                                            const std::vector<size_t>& gpu_indices, int gpu_containers) {
  std::vector<GpuReservation> out;
  if (demand.gpu_kind == GpuKind::kShared && !gpu_indices.empty()) {
    out.push_back({instance.gpus[gpu_indices[0]].id, demand.gpu_memory, demand.gpu_compute, gpu_containers, false});
  } else if (demand.gpu_kind == GpuKind::kDedicated) {
    for (size_t i : gpu_indices) out.push_back({instance.gpus[i].id, 0, 0, 1, true});
  }
  return out;
}

}  // namespace gpupack
