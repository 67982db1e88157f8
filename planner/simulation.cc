#include "planner/simulation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include "scheduler/strategies.h"
#include "scheduler/task_builder.h"
#include "scheduler/validation.h"

namespace gpupack::plan {

Result<GpuUnits> ParseGpuUnits(std::string_view text) {
  if (text == "auto") return GpuUnits::kAuto;
  if (text == "mib" || text == "MiB") return GpuUnits::kMib;
  if (text == "milli") return GpuUnits::kMilli;
  return Status::InvalidParameter("--gpu-units must be auto, mib or milli, not '" + std::string(text) + "'");
}

const char* GpuUnitsName(GpuUnits units) {
  switch (units) {
    case GpuUnits::kAuto: return "auto";
    case GpuUnits::kMib: return "mib";
    case GpuUnits::kMilli: return "milli";
  }
  return "?";
}

Result<PlanStrategy> ParseStrategy(std::string_view text) {
  PlanStrategy s;
  s.name = std::string(text);
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string_view part = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    PlacementStrategy ps;
    size_t colon = part.find(':');
    ps.type = std::string(part.substr(0, colon));
    if (colon != std::string_view::npos) ps.field = std::string(part.substr(colon + 1));
    if (ps.type.empty())
      return Status::InvalidParameter("--strategy '" + s.name + "': expected TYPE[:FIELD][,TYPE[:FIELD]...]");
    s.chain.push_back(std::move(ps));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  // A planner-only baseline (fgd) is not RunTask's: validate the rest of the chain as RunTask would.
  std::vector<PlacementStrategy> runtask_chain;
  for (const auto& ps : s.chain) {
    const StrategyKind* kind = FindPlannerStrategyKind(ps);
    if (!(kind && kind->planner_only)) runtask_chain.push_back(ps);
  }
  if (runtask_chain.empty() && !s.chain.empty()) return s;
  if (Status st = ValidatePlacement({}, runtask_chain); !st.ok())
    return Status::InvalidParameter("--strategy '" + s.name + "': " + st.message() + " (strategies: " +
                                    StrategySyntaxList() + ")");
  return s;
}

std::vector<PlanStrategy> AllStrategies() {
  std::vector<PlanStrategy> out;
  for (const StrategyKind* kind : ListedStrategies()) {
    // The kind's first field; a named field (attribute:NAME) names the attribute every planner instance has.
    std::string field = kind->fields.empty() ? std::string() : std::string(kind->fields.front());
    if (field.empty() && !kind->field_prefix.empty()) field = std::string(kind->field_prefix) + kGpuModelAttribute;
    out.push_back(std::move(ParseStrategy(std::string(kind->type) + (field.empty() ? "" : ":" + field))).value());
  }
  return out;
}

// ---- Scenario ---------------------------------------------------------------------------------------------

namespace {

bool Allowed(const TaskSpec& t, const InstanceType& type) {
  if (type.gpus == 0) return false;
  return t.gpu_models.empty() ||
         std::find(t.gpu_models.begin(), t.gpu_models.end(), type.gpu_model) != t.gpu_models.end();
}

// The GPU memory (MiB) a fraction or an amount of a task is measured against: the smallest GPU the task may
// use that holds `at_least` MiB, else the largest it may use; 0 when the fleet says nothing.
MiB ReferenceGpu(const Fleet* fleet, const TaskSpec& t, MiB at_least) {
  if (!fleet) return 0;
  MiB fitting = 0, largest = 0;
  for (const auto& type : fleet->types) {
    if (!Allowed(t, type) || type.gpu_memory <= 0 || type.count == 0) continue;
    largest = std::max(largest, type.gpu_memory);
    if (type.gpu_memory >= at_least && (fitting == 0 || type.gpu_memory < fitting)) fitting = type.gpu_memory;
  }
  return fitting ? fitting : largest;
}

std::string ShapeKey(const TaskDemand& d, const std::vector<PlacementConstraint>& constraints,
                     const std::string& group, int gpu_containers, bool with_amounts) {
  std::ostringstream k;
  k << static_cast<int>(d.gpu_kind) << '|' << group << '|' << gpu_containers;
  for (const auto& c : constraints) k << '|' << c.type << '=' << c.expression;
  if (with_amounts) k << "|#" << d.cpu << ',' << d.memory << ',' << d.gpu_memory << ',' << d.gpu_count << ','
                      << d.gpu_compute;
  return k.str();
}

}  // namespace

Result<Scenario> BuildScenario(const Fleet* fleet, const Workload& workload, GpuUnits units) {
  Scenario sc;
  sc.fleet = fleet;
  sc.workload = &workload;
  if (units == GpuUnits::kAuto) {
    units = GpuUnits::kMib;
    if (!fleet) units = GpuUnits::kMilli;
    else
      for (const auto& t : fleet->types)
        if (t.gpus > 0 && t.gpu_memory <= 0) units = GpuUnits::kMilli;
  }
  sc.units = units;
  if (fleet) {
    for (const auto& t : fleet->types) {
      if (units == GpuUnits::kMib && t.gpus > 0 && t.gpu_memory <= 0)
        return Status::InvalidParameter(t.origin + ": field 'model': the GPU memory of " +
                                        (t.gpu_model.empty() ? std::string("these GPUs") : "model '" + t.gpu_model + "'") +
                                        " is unknown (an openb node list has none); use --gpu-units milli, or a "
                                        "JSON fleet with gpuMemory");
      sc.type_gpu_size.push_back(units == GpuUnits::kMilli ? 1000 : t.gpu_memory);
    }
    sc.gpu_count = fleet->GpuCount();
  }
  std::map<std::string, int> shape_of, class_of;
  for (const TaskSpec& t : workload.tasks) {
    TaskDemand d = t.demand;
    PlannedTask pt;
    if (d.gpu_kind == GpuKind::kDedicated) {
      pt.gpu_demand = d.gpu_count;
    } else if (d.gpu_kind == GpuKind::kShared) {
      if (t.gpu_milli > 0) {  // declared as a fraction of a GPU
        pt.gpu_demand = t.gpu_milli / 1000.0;
        if (units == GpuUnits::kMilli) {
          d.gpu_memory = t.gpu_milli;
        } else {
          MiB ref = ReferenceGpu(fleet, t, 0);
          d.gpu_memory = std::max<MiB>(1, (t.gpu_milli * ref + 999) / 1000);
        }
      } else {  // declared in MiB
        MiB ref = ReferenceGpu(fleet, t, d.gpu_memory);
        if (ref <= 0 && units == GpuUnits::kMilli)
          return Status::InvalidParameter(t.origin + ": field 'nvidiaMps.memory': " +
                                          (t.IsService() ? "service '" : "task '") + t.name +
                                          "' declares GPU memory in MiB, but no GPU it may use has a known size to "
                                          "turn it into milli units; use --gpu-units mib with a JSON fleet");
        pt.gpu_demand = ref > 0 ? static_cast<double>(d.gpu_memory) / static_cast<double>(ref) : 0;
        if (units == GpuUnits::kMilli) d.gpu_memory = (d.gpu_memory * 1000 + ref - 1) / ref;
      }
    }
    std::string group = t.group.empty() ? kDefaultGroup : t.group;
    std::string key = ShapeKey(d, t.constraints, group, t.gpu_containers, true);
    auto [it, added] = shape_of.emplace(key, static_cast<int>(sc.shapes.size()));
    if (added) {
      Shape s;
      s.demand = d;
      s.constraints = t.constraints;
      s.group = group;
      s.gpu_containers = t.gpu_containers;
      auto [cit, cadded] =
          class_of.emplace(ShapeKey(d, t.constraints, group, t.gpu_containers, false), static_cast<int>(class_of.size()));
      s.feasibility_class = cit->second;
      sc.shapes.push_back(std::move(s));
    }
    pt.shape = it->second;
    sc.tasks.push_back(pt);
  }
  // fgd's target: the typical shapes as the paper keys them (CPU, GPU count, GPU share, GPU models). Shapes of
  // equal count are cut at 95% in the simulator's order: the larger CPU first, then the larger share of a GPU
  // (a whole GPU is 1000), more GPUs, and the GPU models ('|'-joined) that sort last. BuildTargetWorkload keeps
  // the order of first appearance among equal counts, so the shapes are handed to it in that order.
  struct Keyed {
    std::tuple<int64_t, int64_t, int, std::string> order;
    WorkloadShape shape;
  };
  std::vector<Keyed> keyed;
  for (size_t i = 0; i < sc.tasks.size(); ++i) {
    const Shape& shape = sc.shapes[sc.tasks[i].shape];
    WorkloadShape ws = WorkloadShapeOf(shape.demand, shape.constraints);
    ws.weight = workload.tasks[i].weight;
    ws.memory = 0;
    const TaskDemand& d = shape.demand;
    const int64_t milli = d.gpu_kind == GpuKind::kShared ? std::llround(sc.tasks[i].gpu_demand * 1000)
                          : d.gpu_kind == GpuKind::kDedicated ? 1000 : 0;
    const int count = d.gpu_kind == GpuKind::kShared ? 1 : d.gpu_kind == GpuKind::kDedicated ? d.gpu_count : 0;
    std::string models;
    for (const std::string& m : workload.tasks[i].gpu_models) models += (models.empty() ? "" : "|") + m;
    keyed.push_back({{d.cpu, milli, count, std::move(models)}, std::move(ws)});
  }
  std::stable_sort(keyed.begin(), keyed.end(), [](const Keyed& a, const Keyed& b) { return a.order > b.order; });
  std::vector<WorkloadShape> fgd_shapes;
  for (Keyed& k : keyed) fgd_shapes.push_back(std::move(k.shape));
  sc.fgd_workload = BuildTargetWorkload(fgd_shapes, 0.95);
  return sc;
}

// ---- Simulation -------------------------------------------------------------------------------------------

Simulation::Simulation(const Scenario& scenario, Options options)
    : scenario_(scenario), options_(std::move(options)) {}
Simulation::~Simulation() = default;

Result<std::unique_ptr<Simulation>> Simulation::Create(const Scenario& scenario, const PlanStrategy& strategy,
                                                       Options options) {
  std::unique_ptr<Simulation> sim(new Simulation(scenario, std::move(options)));
  ClusterState& state = sim->state_;
  Cluster cluster;
  cluster.name = kPlanCluster;
  cluster.arn = kPlanCluster;
  state.PutCluster(cluster);

  std::vector<int> order;
  if (scenario.fleet) {
    if (sim->options_.type_counts.empty()) {
      order = scenario.fleet->registration_order;
      if (sim->options_.node_order_seed) {
        // Fisher-Yates over the fleet's order with a stream of its own (not the arrivals' stream of the seed).
        PlanRng rng(*sim->options_.node_order_seed ^ 0x6e6f64652d6f7264ULL);
        for (size_t k = order.size(); k > 1; --k) std::swap(order[k - 1], order[rng.Below(k)]);
      }
    } else {
      for (size_t t = 0; t < sim->options_.type_counts.size(); ++t)
        for (int n = 0; n < sim->options_.type_counts[t]; ++n) order.push_back(static_cast<int>(t));
    }
  }
  // Short ARNs keep the per-instance hashing in PlaceOne cheap; the random strategy keys on them.
  for (size_t k = 0; k < order.size(); ++k) {
    const InstanceType& type = scenario.fleet->types[order[k]];
    ContainerInstance ci;
    ci.arn = "i" + std::to_string(k);
    ci.id = ci.arn;
    ci.cluster = kPlanCluster;
    ci.ec2_instance_id = ci.arn;
    ci.instance_type = type.name;
    ci.registered = {type.cpu, type.memory};
    ci.remaining = ci.registered;
    ci.attributes = type.attributes;
    ci.registered_at = static_cast<EpochMs>(k);
    MiB size = scenario.type_gpu_size[order[k]];
    for (int g = 0; g < type.gpus; ++g) {
      Gpu gpu;
      gpu.id = std::to_string(g).insert(0, 1, 'g');  // not "g" + ...: GCC 12 at -O3 warns (-Wrestrict, a false positive)
      gpu.total_memory_mib = size;
      gpu.remaining_memory_mib = size;
      ci.gpus.push_back(std::move(gpu));
    }
    sim->gpu_count_ += type.gpus;
    state.PutInstance(std::move(ci));
  }
  sim->instance_count_ = static_cast<int>(order.size());

  // The fragmentation strategies' target workload: fgd the workload's typical shapes, as the paper;
  // binpack:fragmentation learns it from the demands that arrive, as the server does from RunTask.
  for (const PlacementStrategy& ps : strategy.chain) {
    const StrategyKind* kind = FindPlannerStrategyKind(ps);
    if (!kind || kind->gpu_choice != GpuChoice::kFragment) continue;
    if (kind->planner_only) state.SetTargetWorkload(kPlanCluster, scenario.fgd_workload);
    else sim->record_demands_ = true;
    break;
  }
  int classes = 0;
  for (const Shape& s : scenario.shapes) {
    PlacementRequest req;
    req.cluster = kPlanCluster;
    req.demand = s.demand;
    req.group = s.group;
    req.constraints = s.constraints;
    req.strategies = strategy.chain;
    req.seed = sim->options_.seed;
    auto placer = Placer::Create(std::move(req));
    if (!placer.ok()) return placer.status();
    sim->placers_.push_back(std::move(placer).value());
    classes = std::max(classes, s.feasibility_class + 1);
  }
  sim->failed_.resize(classes);
  return sim;
}

namespace {

// Needs at least as much of everything the GPU kind counts (compute is not considered: the planner places
// without the compute-aware opt-in).
bool Dominates(const TaskDemand& d, const TaskDemand& refused) {
  return d.cpu >= refused.cpu && d.memory >= refused.memory && d.gpu_memory >= refused.gpu_memory &&
         d.gpu_count >= refused.gpu_count;
}

std::string MainReason(const std::vector<PlacementFailure>& failures) {
  std::map<std::string, int> counts;
  for (const auto& f : failures) ++counts[f.reason];
  std::string best;
  int n = -1;
  for (const auto& [reason, c] : counts)
    if (c > n) {
      best = reason;
      n = c;
    }
  return best;
}

}  // namespace

Simulation::Outcome Simulation::Arrive(int task, int index) {
  Outcome out;
  const PlannedTask& pt = scenario_.tasks[task];
  const Shape& shape = scenario_.shapes[pt.shape];
  // Every arrival is a RunTask demand, placed or refused (from the cache or not).
  if (record_demands_) state_.RecordDemand(kPlanCluster, WorkloadShapeOf(shape.demand, shape.constraints));
  if (options_.remember_failures) {
    for (const auto& f : failed_[shape.feasibility_class])
      if (Dominates(shape.demand, f.demand)) {
        out.reason = f.reason;
        return out;
      }
  }
  Placement p = placers_[pt.shape]->PlaceOne(state_, index);
  if (!p.placed()) {
    out.reason = MainReason(p.failures);
    if (options_.remember_failures) failed_[shape.feasibility_class].push_back({shape.demand, out.reason});
    return out;
  }
  const ContainerInstance& inst = *p.instance;
  Placed placed;
  placed.instance = state_.FindInstance(inst.arn);
  placed.gpus = p.gpu_indices;
  int idle_before = 0;
  for (size_t g : p.gpu_indices) idle_before += inst.gpus[g].mode == GpuMode::kIdle ? 1 : 0;
  if (shape.demand.gpu_kind == GpuKind::kShared && !p.gpu_indices.empty())
    placed.share = static_cast<double>(shape.demand.gpu_memory) /
                   static_cast<double>(inst.gpus[p.gpu_indices[0]].total_memory_mib);
  else if (shape.demand.gpu_kind == GpuKind::kDedicated)
    placed.share = static_cast<double>(p.gpu_indices.size());

  // The task record RunTask would reserve, without containers (BuildTask for a shape, scheduler/task_builder.h).
  out.task_id = static_cast<int64_t>(placed_.size());
  NewTaskFields fields;
  fields.id = "t" + std::to_string(out.task_id);
  fields.arn = fields.id;
  fields.cluster = kPlanCluster;
  fields.group = shape.group;
  Task t = BuildTask(std::move(fields), shape.demand, shape.gpu_containers, inst, p.gpu_indices);
  placed.arn = t.arn;
  if (Status st = state_.ReserveTask(std::move(t)); !st.ok()) {
    out.task_id = -1;
    out.reason = "INTERNAL: " + st.message();
    return out;
  }
  allocated_gpus_ += placed.share;
  gpus_in_use_ += idle_before;
  placed_.push_back(std::move(placed));
  out.placed = true;
  return out;
}

void Simulation::Depart(int64_t task_id) {
  if (task_id < 0 || task_id >= static_cast<int64_t>(placed_.size())) return;
  Placed& p = placed_[task_id];
  if (!state_.ReleaseTask(p.arn)) return;
  allocated_gpus_ -= p.share;
  for (size_t g : p.gpus) gpus_in_use_ -= p.instance->gpus[g].mode == GpuMode::kIdle ? 1 : 0;
  // Capacity came back: earlier refusals no longer say anything.
  for (auto& f : failed_) f.clear();
}

}  // namespace gpupack::plan
