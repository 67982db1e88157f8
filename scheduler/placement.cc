#include "scheduler/placement.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "scheduler/query.h"

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

// SplitMix64: the per-request random source. Deterministic in (seed, task index, instance position).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool Shareable(const Gpu& g) { return !g.held && (g.mode == GpuMode::kIdle || g.mode == GpuMode::kMps); }

// GpuFit is the outcome of GpuFitFilter on one instance: the chosen GPUs, or the reason and detail.
struct GpuFit {
  bool ok = true;
  const char* reason = nullptr;
  std::string detail;
  std::vector<size_t> gpus;
  MiB chosen_remaining_after = 0;  // shared: remaining memory of the chosen GPU after placement
};

// Chooses the GPU(s) for `demand` on `inst`. `prefer_emptiest` flips best fit to worst fit (spread).
// `with_detail` builds the human detail on failure (skipped on the hot path).
GpuFit FitGpus(const TaskDemand& demand, const ContainerInstance& inst, bool compute_aware, bool prefer_emptiest,
               bool with_detail) {
  GpuFit fit;
  if (demand.gpu_kind == GpuKind::kNone) return fit;
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
      fit.gpus.push_back(best);
      fit.chosen_remaining_after = best_remaining - demand.gpu_memory;
      return fit;
    }
    fit.ok = false;
    if (inst.gpus.empty()) {
      fit.reason = reason::kGpu;
      if (with_detail)
        fit.detail = "instance has no GPUs; task needs " + FormatMiB(demand.gpu_memory) + " of GPU memory on one GPU";
      return fit;
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
      fit.reason = reason::kGpuCompute;
      if (with_detail)
        fit.detail = "compute-aware placement is on: the GPUs with " + FormatMiB(demand.gpu_memory) +
                     " free have at most " + std::to_string(max_compute_free) + "% compute undeclared; task needs " +
                     std::to_string(demand.gpu_compute) + "%";
      return fit;
    }
    fit.reason = shareable > 0 ? reason::kGpuMemory : reason::kGpu;
    if (with_detail) {
      if (shareable > 0)
        fit.detail = "largest free block on any GPU is " + FormatMiB(largest) + "; task needs " +
                     FormatMiB(demand.gpu_memory) + " on one GPU";
      else
        fit.detail = "no GPU can be shared: task needs " + FormatMiB(demand.gpu_memory) + " on one GPU";
      if (dedicated > 0 || held > 0) {
        fit.detail += " (";
        if (dedicated > 0) fit.detail += std::to_string(dedicated) + " GPU(s) DEDICATED";
        if (dedicated > 0 && held > 0) fit.detail += ", ";
        if (held > 0) fit.detail += std::to_string(held) + " GPU(s) held after a fault";
        fit.detail += ")";
      }
    }
    return fit;
  }
  // Dedicated: whole IDLE GPUs, lowest index first.
  for (size_t i = 0; i < inst.gpus.size() && static_cast<int>(fit.gpus.size()) < demand.gpu_count; ++i)
    if (!inst.gpus[i].held && inst.gpus[i].mode == GpuMode::kIdle) fit.gpus.push_back(i);
  if (static_cast<int>(fit.gpus.size()) == demand.gpu_count) return fit;
  fit.ok = false;
  fit.reason = reason::kGpu;
  if (with_detail) {
    int idle = 0, mps = 0, dedicated = 0, held = 0;
    for (const Gpu& g : inst.gpus) {
      if (g.held) ++held;
      else if (g.mode == GpuMode::kIdle) ++idle;
      else if (g.mode == GpuMode::kMps) ++mps;
      else ++dedicated;
    }
    fit.detail = "task needs " + std::to_string(demand.gpu_count) + " IDLE GPU(s); instance has " +
                 std::to_string(idle) + " IDLE, " + std::to_string(mps) + " in NVIDIA_MPS mode, " +
                 std::to_string(dedicated) + " DEDICATED";
    if (held > 0) fit.detail += ", " + std::to_string(held) + " held after a fault";
  }
  fit.gpus.clear();
  return fit;
}

MiB TotalRemainingGpuMemory(const ContainerInstance& inst) {
  MiB sum = 0;
  for (const Gpu& g : inst.gpus)
    if (Shareable(g)) sum += g.remaining_memory_mib;
  return sum;
}

}  // namespace

// ---- the compiled request -------------------------------------------------------------------------------

// ScoreContext: what the scorers aggregate over the cluster for one placement (per call, so a Placer stays
// const and shareable).
struct ScoreContext {
  const std::string* group = nullptr;
  std::vector<std::unordered_map<std::string, int64_t>> per_scorer;  // e.g. tasks of the group per attribute value
};

// Scorer: one placement strategy as a bounded number per eligible instance; lower is better.
class Scorer {
 public:
  virtual ~Scorer() = default;
  // Called once per placement before scoring, to aggregate over the whole cluster where needed.
  virtual void Prepare(const ClusterState&, const std::vector<ContainerInstance*>&, ScoreContext&, size_t) const {}
  virtual double Score(const ContainerInstance& inst, const InstanceLoad& load, const TaskDemand& demand,
                       const GpuFit& fit, uint64_t random_key, const ScoreContext& ctx, size_t self) const = 0;
};

namespace {

// binpack(cpu|memory): the resource left on the instance after placement. Least left wins.
class BinpackHostScorer : public Scorer {
 public:
  explicit BinpackHostScorer(bool cpu) : cpu_(cpu) {}
  double Score(const ContainerInstance& inst, const InstanceLoad&, const TaskDemand& d, const GpuFit&, uint64_t,
               const ScoreContext&, size_t) const override {
    return cpu_ ? static_cast<double>(inst.remaining.cpu - d.cpu)
                : static_cast<double>(inst.remaining.memory - d.memory);
  }

 private:
  bool cpu_;
};

// binpack(gpuMemory): for a shared task, the memory left on the chosen GPU after placement (best fit over the
// whole cluster, at GPU granularity); for other tasks, the shareable GPU memory left on the instance after it.
class BinpackGpuMemoryScorer : public Scorer {
 public:
  double Score(const ContainerInstance& inst, const InstanceLoad&, const TaskDemand& d, const GpuFit& fit, uint64_t,
               const ScoreContext&, size_t) const override {
    if (d.gpu_kind == GpuKind::kShared) return static_cast<double>(fit.chosen_remaining_after);
    MiB total = TotalRemainingGpuMemory(inst);
    for (size_t i : fit.gpus) total -= inst.gpus[i].remaining_memory_mib;
    return static_cast<double>(total);
  }
};

// spread(instanceId|host): tasks of the group already on the instance. Fewest wins.
class SpreadInstanceScorer : public Scorer {
 public:
  double Score(const ContainerInstance&, const InstanceLoad& load, const TaskDemand&, const GpuFit&, uint64_t,
               const ScoreContext& ctx, size_t) const override {
    auto it = load.group_counts.find(*ctx.group);
    return it == load.group_counts.end() ? 0.0 : static_cast<double>(it->second);
  }
};

// spread(attribute:NAME): tasks of the group on all instances sharing this instance's value of NAME. Fewest
// wins; instances without the attribute count as one more value ("").
class SpreadAttributeScorer : public Scorer {
 public:
  explicit SpreadAttributeScorer(std::string attribute) : attribute_(std::move(attribute)) {}
  void Prepare(const ClusterState& state, const std::vector<ContainerInstance*>& instances, ScoreContext& ctx,
               size_t self) const override {
    auto& counts = ctx.per_scorer[self];
    for (const ContainerInstance* inst : instances) {
      if (inst->status == "INACTIVE") continue;
      const auto& load = state.LoadOf(*inst);
      auto it = load.group_counts.find(*ctx.group);
      counts[ValueOf(*inst)] += it == load.group_counts.end() ? 0 : it->second;
    }
  }
  double Score(const ContainerInstance& inst, const InstanceLoad&, const TaskDemand&, const GpuFit&, uint64_t,
               const ScoreContext& ctx, size_t self) const override {
    const auto& counts = ctx.per_scorer[self];
    auto it = counts.find(ValueOf(inst));
    return it == counts.end() ? 0.0 : static_cast<double>(it->second);
  }

 private:
  std::string ValueOf(const ContainerInstance& inst) const {
    const Attribute* a = inst.FindAttribute(attribute_);
    return a && a->value ? *a->value : std::string();
  }
  std::string attribute_;
};

// random: a uniform key from (seed, task index, instance ARN).
class RandomScorer : public Scorer {
 public:
  double Score(const ContainerInstance&, const InstanceLoad&, const TaskDemand&, const GpuFit&, uint64_t random_key,
               const ScoreContext&, size_t) const override {
    return static_cast<double>(random_key >> 11);
  }
};

uint64_t HashString(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

struct Placer::Compiled {
  std::vector<std::pair<std::string, query::ExpressionPtr>> member_of;
  bool distinct_instance = false;
  std::vector<std::unique_ptr<Scorer>> scorers;
  bool spread_first = false;
  bool needs_random_key = false;
  bool random_only = false;  // the only strategy is random: PlaceOne may sample instead of scanning
  bool gpu_binpack_first = false;  // the first strategy is binpack(gpuMemory): PlaceOne may use the GPU index
};

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
    if (s.type == "binpack" && (s.field == "cpu" || s.field == "CPU")) {
      c.scorers.push_back(std::make_unique<BinpackHostScorer>(true));
    } else if (s.type == "binpack" && (s.field == "memory" || s.field == "MEMORY")) {
      c.scorers.push_back(std::make_unique<BinpackHostScorer>(false));
    } else if (s.type == "binpack" && s.field == "gpuMemory") {
      c.scorers.push_back(std::make_unique<BinpackGpuMemoryScorer>());
    } else if (s.type == "spread" && (s.field == "instanceId" || s.field == "host")) {
      c.scorers.push_back(std::make_unique<SpreadInstanceScorer>());
    } else if (s.type == "spread" && s.field.rfind("attribute:", 0) == 0 && s.field.size() > 10) {
      c.scorers.push_back(std::make_unique<SpreadAttributeScorer>(s.field.substr(10)));
    } else if (s.type == "random") {
      c.scorers.push_back(std::make_unique<RandomScorer>());
      c.needs_random_key = true;
    } else {
      return Status::InvalidParameter("unknown placement strategy '" + s.type + "' with field '" + s.field + "'");
    }
  }
  c.spread_first = strategies.front().type == "spread";
  c.random_only = strategies.size() == 1 && strategies.front().type == "random";
  c.gpu_binpack_first = strategies.front().type == "binpack" && strategies.front().field == "gpuMemory";
  return p;
}

namespace {

// Verdict of the filters on one instance.
struct FilterOutcome {
  bool ok = true;
  const char* reason = nullptr;
  std::string detail;
  GpuFit fit;
};

bool InOnlyList(const PlacementRequest& req, const ContainerInstance& inst) {
  if (req.only_instances.empty()) return true;
  return std::find(req.only_instances.begin(), req.only_instances.end(), inst.arn) != req.only_instances.end();
}

}  // namespace

// RunFilters applies the filter pipeline to one instance. With with_detail=false it skips building strings.
static FilterOutcome RunFilters(const PlacementRequest& req, const std::vector<std::pair<std::string,
                                query::ExpressionPtr>>& member_of, bool distinct, bool spread_first,
                                const ContainerInstance& inst, const InstanceLoad& load, bool with_detail) {
  FilterOutcome out;
  auto fail = [&](const char* reason, std::string detail) {
    out.ok = false;
    out.reason = reason;
    if (with_detail) out.detail = std::move(detail);
    return out;
  };
  const TaskDemand& d = req.demand;
  // StatusFilter
  if (inst.status != "ACTIVE")
    return fail(reason::kStatus, "container instance is " + inst.status + "; it takes no new tasks");
  // AgentFilter
  if (!inst.agent_connected) return fail(reason::kAgent, "the instance's agent is not connected");
  if (inst.impaired)
    return fail(reason::kAgent, "the instance is impaired: its MPS control daemon is not responding");
  // CpuFilter, MemoryFilter
  if (inst.remaining.cpu < d.cpu)
    return fail(reason::kCpu, "instance has " + std::to_string(inst.remaining.cpu) + " CPU units free; task needs " +
                                  std::to_string(d.cpu));
  if (inst.remaining.memory < d.memory)
    return fail(reason::kMemory, "instance has " + FormatMiB(inst.remaining.memory) + " of memory free; task needs " +
                                     FormatMiB(d.memory));
  // GpuFitFilter
  out.fit = FitGpus(d, inst, req.compute_aware, spread_first, with_detail);
  if (!out.fit.ok) return fail(out.fit.reason, out.fit.detail);
  // Constraints
  for (const auto& [text, expr] : member_of)
    if (!query::Evaluate(*expr, inst, load))
      return fail(reason::kAttribute, "MemberOf placement constraint unsatisfied: " + text);
  if (distinct) {
    auto it = load.group_counts.find(req.group);
    if (it != load.group_counts.end() && it->second > 0)
      return fail(reason::kAttribute, "DistinctInstance placement constraint unsatisfied: a task of group '" +
                                          req.group + "' is already on this instance");
  }
  return out;
}

static ScoreContext PrepareScorers(const Placer::Compiled& c, const ClusterState& state,
                                   const std::vector<ContainerInstance*>& instances, const std::string& group) {
  ScoreContext ctx;
  ctx.group = &group;
  ctx.per_scorer.resize(c.scorers.size());
  for (size_t i = 0; i < c.scorers.size(); ++i) c.scorers[i]->Prepare(state, instances, ctx, i);
  return ctx;
}

Placement Placer::PlaceOne(const ClusterState& state, int task_index) const {
  Placement result;
  const auto& instances = state.InstancesOf(request_.cluster);
  const Compiled& c = *compiled_;
  const uint64_t task_seed = Mix(request_.seed ^ Mix(static_cast<uint64_t>(task_index) + 1));
  // Fast path for random placement (the default): rejection sampling over the instance list is uniform over
  // the eligible instances, like the scan below, and touches a handful of instances when most are eligible.
  // After kRandomProbes misses (a nearly full cluster) the full scan decides.
  if (c.random_only && !instances.empty()) {
    constexpr int kRandomProbes = 32;
    for (int k = 0; k < kRandomProbes; ++k) {
      const ContainerInstance* inst = instances[Mix(task_seed + static_cast<uint64_t>(k)) % instances.size()];
      if (inst->status == "INACTIVE" || !InOnlyList(request_, *inst)) continue;
      FilterOutcome f = RunFilters(request_, c.member_of, c.distinct_instance, c.spread_first, *inst,
                                   state.LoadOf(*inst), false);
      if (!f.ok) continue;
      result.instance = inst;
      result.gpu_indices = std::move(f.fit.gpus);
      return result;
    }
  }
  // Fast path for binpack(gpuMemory) first and a shared task: walk the cluster's GPUs in ascending remaining
  // memory from the task's need. The first GPU whose instance passes every filter has the least memory left
  // after placement, which is exactly the first score of the scan below; its ties (same remaining memory) are
  // then decided by the other strategies and registration order, as in the scan.
  if (c.gpu_binpack_first && request_.demand.gpu_kind == GpuKind::kShared) {
    const auto& index = state.GpuIndex(request_.cluster);
    std::vector<const ContainerInstance*> rejected;  // instances that failed a filter (small)
    std::optional<MiB> tie_remaining;
    std::vector<std::pair<const ContainerInstance*, GpuFit>> ties;
    for (auto it = index.lower_bound(GpuSlot{request_.demand.gpu_memory, 0, 0, nullptr}); it != index.end(); ++it) {
      if (tie_remaining && it->remaining != *tie_remaining) break;
      const ContainerInstance* inst = it->instance;
      const Gpu& g = inst->gpus[it->gpu];
      if (g.remaining_memory_mib != it->remaining || !Shareable(g)) continue;
      if (request_.compute_aware && g.compute_used_percent + request_.demand.gpu_compute > 100) continue;
      if (inst->status == "INACTIVE" || !InOnlyList(request_, *inst)) continue;
      if (std::find(rejected.begin(), rejected.end(), inst) != rejected.end()) continue;
      bool seen = false;
      for (const auto& t : ties) seen = seen || t.first == inst;
      if (seen) continue;
      FilterOutcome f = RunFilters(request_, c.member_of, c.distinct_instance, c.spread_first, *inst,
                                   state.LoadOf(*inst), false);
      if (!f.ok) {
        rejected.push_back(inst);
        continue;
      }
      tie_remaining = it->remaining;
      ties.emplace_back(inst, std::move(f.fit));
      if (c.scorers.size() == 1) break;  // index order already breaks ties by registration order
    }
    if (!ties.empty()) {
      ScoreContext ctx = PrepareScorers(c, state, instances, request_.group);
      const uint64_t seed = task_seed;
      size_t best = 0;
      std::vector<double> best_scores, scores(c.scorers.size());
      for (size_t k = 0; k < ties.size(); ++k) {
        const ContainerInstance* inst = ties[k].first;
        uint64_t key = c.needs_random_key ? Mix(seed ^ HashString(inst->arn)) : 0;
        for (size_t i = 0; i < c.scorers.size(); ++i)
          scores[i] = c.scorers[i]->Score(*inst, state.LoadOf(*inst), request_.demand, ties[k].second, key, ctx, i);
        if (k == 0 || scores < best_scores) {
          best = k;
          best_scores = scores;
        }
      }
      result.instance = ties[best].first;
      result.gpu_indices = std::move(ties[best].second.gpus);
      return result;
    }
    // Nothing fits: the scan below builds one failure per instance.
  }
  ScoreContext ctx = PrepareScorers(c, state, instances, request_.group);
  std::vector<double> best_scores, scores(c.scorers.size());
  const ContainerInstance* best = nullptr;
  GpuFit best_fit;
  bool any_candidate = false;
  for (const ContainerInstance* inst : instances) {
    if (inst->status == "INACTIVE" || !InOnlyList(request_, *inst)) continue;
    any_candidate = true;
    const InstanceLoad& load = state.LoadOf(*inst);
    FilterOutcome f = RunFilters(request_, c.member_of, c.distinct_instance, c.spread_first, *inst, load, false);
    if (!f.ok) continue;
    uint64_t key = c.needs_random_key ? Mix(task_seed ^ HashString(inst->arn)) : 0;
    for (size_t i = 0; i < c.scorers.size(); ++i) scores[i] = c.scorers[i]->Score(*inst, load, request_.demand, f.fit, key, ctx, i);
    if (!best || scores < best_scores) {  // lexicographic; ties keep the earlier-registered instance
      best = inst;
      best_scores = scores;
      best_fit = std::move(f.fit);
    }
  }
  if (best) {
    result.instance = best;
    result.gpu_indices = std::move(best_fit.gpus);
    return result;
  }
  if (!any_candidate) {
    result.failures.push_back({"", reason::kMissing, "the cluster has no container instances to place on"});
    return result;
  }
  // Nothing fits: explain, one failure per rejected instance.
  for (const ContainerInstance* inst : instances) {
    if (inst->status == "INACTIVE" || !InOnlyList(request_, *inst)) continue;
    FilterOutcome f = RunFilters(request_, c.member_of, c.distinct_instance, c.spread_first, *inst,
                                 state.LoadOf(*inst), true);
    result.failures.push_back({inst->arn, f.reason ? f.reason : reason::kAttribute, f.detail});
  }
  return result;
}

std::vector<InstanceVerdict> Placer::Explain(const ClusterState& state, int task_index) const {
  std::vector<InstanceVerdict> out;
  Placement chosen = PlaceOne(state, task_index);
  const Compiled& c = *compiled_;
  const auto& instances = state.InstancesOf(request_.cluster);
  ScoreContext ctx = PrepareScorers(c, state, instances, request_.group);
  const uint64_t task_seed = Mix(request_.seed ^ Mix(static_cast<uint64_t>(task_index) + 1));
  const TaskDemand& d = request_.demand;
  for (const ContainerInstance* inst : instances) {
    if (inst->status == "INACTIVE" || !InOnlyList(request_, *inst)) continue;
    const InstanceLoad& load = state.LoadOf(*inst);
    FilterOutcome f = RunFilters(request_, c.member_of, c.distinct_instance, c.spread_first, *inst, load, true);
    InstanceVerdict v;
    v.arn = inst->arn;
    v.eligible = f.ok;
    v.chosen = chosen.instance == inst;
    if (!f.ok) {
      v.reason = f.reason;
      v.detail = f.detail;
    } else {
      uint64_t key = c.needs_random_key ? Mix(task_seed ^ HashString(inst->arn)) : 0;
      for (size_t i = 0; i < c.scorers.size(); ++i)
        v.scores.push_back(c.scorers[i]->Score(*inst, load, d, f.fit, key, ctx, i));
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
