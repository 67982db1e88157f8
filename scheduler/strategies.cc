// The strategy registry (strategies.h) and the scorers of its entries. Each scorer's comment gives its formula;
// every score is "lower is better" and the Placer compares them lexicographically over the request's strategies.
#include "scheduler/strategies.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>

#include "scheduler/fragmentation.h"
#include "scheduler/placement_parts.h"

namespace gpupack {
namespace {

// The shareable GPU memory left on an instance (binpack(gpuMemory) for tasks other than shared ones).
MiB TotalRemainingGpuMemory(const ContainerInstance& inst) {
  MiB sum = 0;
  for (const Gpu& g : inst.gpus)
    if (Shareable(g)) sum += g.remaining_memory_mib;
  return sum;
}

// binpack(cpu|memory): the resource left on the instance after placement. Least left wins.
//   score = remaining.cpu - demand.cpu  (cpu),  remaining.memory - demand.memory  (memory); floor 0.
class BinpackHostScorer : public Scorer {
 public:
  explicit BinpackHostScorer(bool cpu) : cpu_(cpu) {}
  double Score(const ContainerInstance& inst, const InstanceLoad&, const TaskDemand& d, const GpuFit&, uint64_t,
               const ScoreContext&, size_t, size_t) const override {
    return cpu_ ? static_cast<double>(inst.remaining.cpu - d.cpu)
                : static_cast<double>(inst.remaining.memory - d.memory);
  }
  // The CPU and memory filters passed: nothing negative is left.
  double Floor(const TaskDemand&) const override { return 0; }

 private:
  bool cpu_;
};

// binpack(gpuMemory): for a shared task, the memory left on the chosen GPU after placement (best fit over the
// whole cluster, at GPU granularity); for other tasks, the shareable GPU memory left on the instance after it.
//   shared:    score = remaining memory of the chosen (best-fit) GPU - demand.gpu_memory; floor 0
//   otherwise: score = sum of remaining memory over shareable GPUs - remaining memory of the GPUs taken
class BinpackGpuMemoryScorer : public Scorer {
 public:
  double Score(const ContainerInstance& inst, const InstanceLoad&, const TaskDemand& d, const GpuFit& fit, uint64_t,
               const ScoreContext&, size_t, size_t) const override {
    if (d.gpu_kind == GpuKind::kShared) return static_cast<double>(fit.chosen_remaining_after);
    return static_cast<double>(TotalRemainingGpuMemory(inst) - fit.taken_memory);
  }
  // A shared task's GPU had at least its need free.
  double Floor(const TaskDemand& d) const override {
    return d.gpu_kind == GpuKind::kShared ? 0 : -std::numeric_limits<double>::infinity();
  }
  bool ScoresBeforeFit() const override { return false; }
};

// spread(instanceId|host): tasks of the group already on the instance. Fewest wins.
//   score = non-STOPPED tasks of the request's group on the instance; floor 0.
class SpreadInstanceScorer : public Scorer {
 public:
  double Score(const ContainerInstance&, const InstanceLoad& load, const TaskDemand&, const GpuFit&, uint64_t,
               const ScoreContext& ctx, size_t, size_t) const override {
    return static_cast<double>(load.CountOfGroupId(ctx.group_id));
  }
  double Floor(const TaskDemand&) const override { return 0; }
};

// spread(attribute:NAME): tasks of the group on all instances sharing this instance's value of NAME. Fewest
// wins; instances without the attribute count as one more value ("").
//   score = sum over non-INACTIVE instances i with value(i) == value(this) of the group's tasks on i;
//   floor = the least such sum over the values present.
class SpreadAttributeScorer : public Scorer {
 public:
  explicit SpreadAttributeScorer(std::string attribute) : attribute_(std::move(attribute)) {}
  // Gives every non-INACTIVE instance the id of its value (values are compared, not hashed, while there are
  // few of them) and sums the group's tasks per value.
  void Prepare(const std::vector<InstanceEntry>& entries, ScoreContext& ctx, size_t self) const override {
    auto& data = ctx.per_scorer[self];
    data.value_of.assign(entries.size(), 0);
    std::vector<std::string_view> values;
    std::unordered_map<std::string_view, uint32_t> many;  // used once there are more than kFew values
    constexpr size_t kFew = 16;
    uint32_t last = UINT32_MAX;
    for (size_t pos = 0; pos < entries.size(); ++pos) {
      const ContainerInstance& inst = *entries[pos].instance;
      if (IsInactive(inst)) continue;
      const Attribute* a = inst.FindAttribute(attribute_);
      const std::string_view v = a && a->value ? std::string_view(*a->value) : std::string_view();
      uint32_t id = UINT32_MAX;
      if (last != UINT32_MAX && values[last] == v) {
        id = last;
      } else if (many.empty()) {
        for (uint32_t k = 0; k < values.size() && id == UINT32_MAX; ++k)
          if (values[k] == v) id = k;
        if (id == UINT32_MAX && values.size() < kFew) {
          id = static_cast<uint32_t>(values.size());
          values.push_back(v);
        } else if (id == UINT32_MAX) {
          for (uint32_t k = 0; k < values.size(); ++k) many.emplace(values[k], k);
        }
      }
      if (id == UINT32_MAX) {
        auto [it, added] = many.emplace(v, static_cast<uint32_t>(values.size()));
        if (added) values.push_back(v);
        id = it->second;
      }
      last = id;
      data.value_of[pos] = id;
      if (data.totals.size() < values.size()) data.totals.resize(values.size(), 0);
      data.totals[id] += entries[pos].load->CountOfGroupId(ctx.group_id);
    }
    if (!data.totals.empty()) data.floor = static_cast<double>(*std::min_element(data.totals.begin(), data.totals.end()));
  }
  double Score(const ContainerInstance&, const InstanceLoad&, const TaskDemand&, const GpuFit&, uint64_t,
               const ScoreContext& ctx, size_t self, size_t pos) const override {
    const auto& data = ctx.per_scorer[self];
    return static_cast<double>(data.totals[data.value_of[pos]]);
  }
  double Floor(const TaskDemand&) const override { return 0; }

 private:
  std::string attribute_;
};

// random: a uniform key from (seed, task index, instance ARN).
//   score = random_key >> 11 (53 bits: exact in a double), random_key = Mix(task seed ^ FNV-1a(ARN)).
class RandomScorer : public Scorer {
 public:
  double Score(const ContainerInstance&, const InstanceLoad&, const TaskDemand&, const GpuFit&, uint64_t random_key,
               const ScoreContext&, size_t, size_t) const override {
    return static_cast<double>(random_key >> 11);
  }
  bool ScoresBeforeFit() const override { return false; }
};

// binpack(fragmentation) and fgd: how much the instance's fragment over the cluster's target workload grows when
// the task is placed there, on the GPU of the least growth (scheduler/fragmentation.h); the largest decrease wins.
//   score = fragment(after) - fragment(before), in GPUs (FragmentMeasure kGpupack, or kFgd for fgd); +inf when the
//   instance's free resources do not hold the task (the filters reject it anyway).
// The target workload is the cluster's (ClusterState::FragmentsOf: the operator's, else learned from recent
// demands, else the task itself); moves come from the cluster's FragmentCache.
class FragmentScorer : public Scorer {
 public:
  explicit FragmentScorer(FragmentMeasure measure) : measure_(measure) {}
  double Score(const ContainerInstance& inst, const InstanceLoad& load, const TaskDemand& d, const GpuFit&, uint64_t,
               const ScoreContext& ctx, size_t, size_t pos) const override {
    static const TargetWorkload kNoWorkload;
    const ClusterFragments* f = ctx.state && ctx.cluster ? ctx.state->FragmentsOf(*ctx.cluster) : nullptr;
    const TargetWorkload& w = f && f->Target() ? *f->Target() : kNoWorkload;
    const FragmentMove m = f && ctx.entries && pos < ctx.entries->size()
                               ? f->MoveCache().Move(*ctx.entries, pos, d, ctx.compute_aware, w, measure_)
                               : BestMove(inst, load, d, ctx.compute_aware, w, measure_);
    return m.fits ? m.delta : std::numeric_limits<double>::infinity();
  }
  bool ScoresBeforeFit() const override { return false; }

 private:
  FragmentMeasure measure_;
};

// bestfit (planner only): the FGD paper's BestFit baseline, a node score over CPU and GPU together, in the paper's
// simulator's integer steps (ties are common: they go to the instance registered first, which the planner's fgd
// protocol draws at random per seed):
//   left = 0.5 * (CPU left after the task) / 128 vCPUs + 0.5 * (GPU left after the task, in GPUs) / 8
//   score = -trunc(100 * (1 - left))   (lower is better: the instance left with the least wins)
// GPU left counts every shareable GPU's free share (remaining memory over total). Host memory is not scored
// (the filters check it). CPU is in ECS units (1,024 per vCPU).
class BestFitScorer : public Scorer {
 public:
  static constexpr double kMaxCpu = 128.0 * 1024;  // the simulator's MaxSpecCpu, 128 cores
  static constexpr double kMaxGpus = 8.0;           // its MaxSpecGpu, 8 GPUs
  double Score(const ContainerInstance& inst, const InstanceLoad&, const TaskDemand& d, const GpuFit& fit, uint64_t,
               const ScoreContext&, size_t, size_t) const override {
    double gpus = 0;
    for (const Gpu& g : inst.gpus)
      if (Shareable(g) && g.total_memory_mib > 0)
        gpus += static_cast<double>(g.remaining_memory_mib) / static_cast<double>(g.total_memory_mib);
    if (d.gpu_kind == GpuKind::kDedicated) {
      gpus -= d.gpu_count;
    } else if (d.gpu_kind == GpuKind::kShared && fit.shared_gpu < inst.gpus.size() &&
               inst.gpus[fit.shared_gpu].total_memory_mib > 0) {
      gpus -= static_cast<double>(d.gpu_memory) / static_cast<double>(inst.gpus[fit.shared_gpu].total_memory_mib);
    }
    const double cpu = static_cast<double>(inst.remaining.cpu - d.cpu);
    const double left = 0.5 * cpu / kMaxCpu + 0.5 * std::max(0.0, gpus) / kMaxGpus;
    return -std::trunc(100.0 * (1.0 - left) + 1e-9);
  }
  double Floor(const TaskDemand&) const override { return -100; }
  bool ScoresBeforeFit() const override { return false; }
};

// ---- the registry -------------------------------------------------------------------------------------------
//
// One entry per kind, in the order ValidatePlacement lists types and fields. To add a strategy: write its
// Scorer above, add an entry here (its type and fields, make_scorer, and index_walk if it has a fast path,
// gpu_choice, random_key, list_rank), and describe it in docs/placement.md. The placement test
// ScanShortcutsDecideAsTheFullScan then compares its walk with the scan.

template <typename T, typename... Args>
std::unique_ptr<Scorer> Make(Args... args) {
  return std::make_unique<T>(std::move(args)...);
}

std::vector<StrategyKind> BuildRegistry() {
  std::vector<StrategyKind> r;
  r.push_back({
      .name = "binpack:cpu",
      .type = "binpack",
      .fields = {"cpu"},
      .aliases = {"CPU"},
      .make_scorer = [](std::string_view) { return Make<BinpackHostScorer>(true); },
      .index_walk = WalkCpuIndex,
      .gpu_choice = GpuChoice::kBestFit,
      .list_rank = 2,
  });
  r.push_back({
      .name = "binpack:memory",
      .type = "binpack",
      .fields = {"memory"},
      .aliases = {"MEMORY"},
      .make_scorer = [](std::string_view) { return Make<BinpackHostScorer>(false); },
      .index_walk = WalkMemoryIndex,
      .gpu_choice = GpuChoice::kBestFit,
      .list_rank = 3,
  });
  r.push_back({
      .name = "binpack:gpuMemory",
      .type = "binpack",
      .fields = {"gpuMemory"},
      .make_scorer = [](std::string_view) { return Make<BinpackGpuMemoryScorer>(); },
      .index_walk = WalkGpuIndex,
      .gpu_choice = GpuChoice::kBestFit,
      .list_rank = 1,
  });
  r.push_back({
      .name = "spread:instanceId/host",
      .type = "spread",
      .fields = {"instanceId", "host"},
      .make_scorer = [](std::string_view) { return Make<SpreadInstanceScorer>(); },
      .index_walk = WalkGroupIndex,
      .gpu_choice = GpuChoice::kEmptiest,
      .list_rank = 4,
  });
  r.push_back({
      .name = "spread:attribute:*",
      .type = "spread",
      .field_prefix = "attribute:",
      .make_scorer =
          [](std::string_view field) {
            return Make<SpreadAttributeScorer>(std::string(field.substr(std::string_view("attribute:").size())));
          },
      .gpu_choice = GpuChoice::kEmptiest,
      .list_rank = 5,
  });
  r.push_back({
      .name = "random",
      .type = "random",
      .make_scorer = [](std::string_view) { return Make<RandomScorer>(); },
      .index_walk = SampleRandom,
      .walk_is_exact = false,
      .gpu_choice = GpuChoice::kBestFit,
      .random_key = true,
      .list_rank = 6,
  });
  r.push_back({
      .name = "binpack:fragmentation",
      .type = "binpack",
      .fields = {"fragmentation"},
      .make_scorer = [](std::string_view) { return Make<FragmentScorer>(FragmentMeasure::kGpupack); },
      .index_walk = WalkFragment,
      .gpu_choice = GpuChoice::kFragment,
      .list_rank = 7,
  });
  r.push_back({
      .name = "fgd",
      .type = "fgd",
      .make_scorer = [](std::string_view) { return Make<FragmentScorer>(FragmentMeasure::kFgd); },
      .index_walk = WalkFragment,
      .gpu_choice = GpuChoice::kFragment,
      .list_rank = 8,
      .planner_only = true,
  });
  r.push_back({
      .name = "bestfit",
      .type = "bestfit",
      .make_scorer = [](std::string_view) { return Make<BestFitScorer>(); },
      .gpu_choice = GpuChoice::kBestFit,
      .planner_only = true,
  });
  return r;
}

}  // namespace

bool StrategyKind::Accepts(std::string_view field) const {
  if (!TakesField()) return field.empty();
  for (std::string_view f : fields)
    if (field == f) return true;
  return !field_prefix.empty() && field.size() > field_prefix.size() && field.starts_with(field_prefix);
}

bool StrategyKind::Compiles(std::string_view field) const {
  if (Accepts(field)) return true;
  for (std::string_view a : aliases)
    if (field == a) return true;
  return false;
}

std::vector<std::string> StrategyKind::FieldNames() const {
  std::vector<std::string> out(fields.begin(), fields.end());
  if (!field_prefix.empty()) out.push_back(std::string(field_prefix) + "NAME");
  return out;
}

std::string StrategyKind::Syntax() const {
  std::vector<std::string> names = FieldNames();
  return names.empty() ? std::string(type) : std::string(type) + ":" + names.front();
}

const std::vector<StrategyKind>& StrategyRegistry() {
  static const std::vector<StrategyKind> registry = BuildRegistry();
  return registry;
}

const StrategyKind* FindStrategyKind(const PlacementStrategy& s) {
  for (const StrategyKind& k : StrategyRegistry())
    if (!k.planner_only && k.type == s.type && k.Accepts(s.field)) return &k;
  return nullptr;
}

const StrategyKind* FindPlannerStrategyKind(const PlacementStrategy& s) {
  for (const StrategyKind& k : StrategyRegistry())
    if (k.type == s.type && k.Accepts(s.field)) return &k;
  return nullptr;
}

const StrategyKind* ResolveStrategyKind(const PlacementStrategy& s) {
  for (const StrategyKind& k : StrategyRegistry())
    if (k.type == s.type && k.Compiles(s.field)) return &k;
  return nullptr;
}

std::vector<std::string_view> StrategyTypes() {
  std::vector<std::string_view> out;
  for (const StrategyKind& k : StrategyRegistry())
    if (!k.planner_only && std::find(out.begin(), out.end(), k.type) == out.end()) out.push_back(k.type);
  return out;
}

std::vector<std::string> StrategyFieldNames(std::string_view type) {
  std::vector<std::string> out;
  for (const StrategyKind& k : StrategyRegistry())
    if (!k.planner_only && k.type == type)
      for (std::string& name : k.FieldNames()) out.push_back(std::move(name));
  return out;
}

std::vector<const StrategyKind*> ListedStrategies() {
  std::vector<const StrategyKind*> out;
  for (const StrategyKind& k : StrategyRegistry())
    if (k.list_rank > 0) out.push_back(&k);
  std::stable_sort(out.begin(), out.end(),
                   [](const StrategyKind* a, const StrategyKind* b) { return a->list_rank < b->list_rank; });
  return out;
}

std::string StrategySyntaxList() {
  std::string out;
  for (const StrategyKind* k : ListedStrategies()) out += (out.empty() ? "" : ", ") + k->Syntax();
  return out;
}

}  // namespace gpupack
