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
