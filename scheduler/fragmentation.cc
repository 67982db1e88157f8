// The fragment measure, its best move, the learned target workload and the per-instance cache
// (scheduler/fragmentation.h).
#include "scheduler/fragmentation.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "scheduler/cluster_state.h"

namespace gpupack {
namespace {

std::atomic<uint64_t> next_workload_id{1};

// GpuView: what the measure reads of one GPU.
struct GpuView {
  MiB remaining = 0;
  MiB total = 1;
  bool shareable = false;  // not held, IDLE or NVIDIA_MPS
  bool idle = false;       // shareable and IDLE (a dedicated task may take it)
  double Share() const { return shareable && total > 0 ? static_cast<double>(remaining) / static_cast<double>(total) : 0; }
};

// NodeView: an instance as the measure sees it; BestMove edits a copy to measure a placement.
struct NodeView {
  int64_t cpu = 0;
  MiB memory = 0;
  std::vector<GpuView> gpus;
};

NodeView ViewOf(const ContainerInstance& inst) {
  NodeView v;
  v.cpu = inst.remaining.cpu;
  v.memory = inst.remaining.memory;
  v.gpus.reserve(inst.gpus.size());
  for (const Gpu& g : inst.gpus) {
    GpuView gv;
    gv.remaining = g.remaining_memory_mib;
    gv.total = g.total_memory_mib;
    gv.shareable = !g.held && (g.mode == GpuMode::kIdle || g.mode == GpuMode::kMps);
    gv.idle = gv.shareable && g.mode == GpuMode::kIdle;
    v.gpus.push_back(gv);
  }
  return v;
}

// Access: per class, whether its memberOf expressions admit the instance (they do not change with a placement).
std::vector<char> AccessOf(const ContainerInstance& inst, const InstanceLoad& load, const TargetWorkload& w) {
  std::vector<char> out(w.classes.size(), 1);
  for (size_t c = 0; c < w.classes.size(); ++c)
    for (const auto& e : w.classes[c].member_of)
      if (e && !query::Evaluate(*e, inst, load)) {
        out[c] = 0;
        break;
      }
  return out;
}

// FragmentOfView: sum over classes of weight x (all free share when the class does not fit, else the free share
// of the GPUs too small for it).
double FragmentOfView(const NodeView& v, const TargetWorkload& w, const std::vector<char>& access,
                      FragmentMeasure measure) {
  double free_total = 0;
  for (const GpuView& g : v.gpus) free_total += g.Share();
  if (free_total <= 0) return 0;
  double sum = 0;
  for (size_t c = 0; c < w.classes.size(); ++c) {
    const WorkloadShape& s = w.classes[c].shape;
    if (s.gpu_kind == GpuKind::kNone) {
      if (measure == FragmentMeasure::kFgd) sum += s.weight * free_total;
      continue;
    }
    if (!access[c] || v.cpu < s.cpu || (measure == FragmentMeasure::kGpupack && v.memory < s.memory)) {
      sum += s.weight * free_total;
      continue;
    }
    int room = 0;
    double small = 0;
    for (const GpuView& g : v.gpus) {
      if (!g.shareable) continue;
      const bool fits = s.gpu_kind == GpuKind::kShared ? g.remaining >= s.gpu_memory : g.idle;
      if (fits) ++room;
      else small += g.Share();
    }
    const int need = s.gpu_kind == GpuKind::kShared ? 1 : s.gpu_count;
    sum += s.weight * (room >= need ? small : free_total);
  }
  return sum;
}

// Quantize: a difference of two sums of weighted shares carries rounding noise of ~1e-16 that depends on the
// magnitudes summed; rounding to 1e-9 GPU makes instances that truly tie compare equal (ties then go to the
// instance registered first) instead of being ordered by that noise.
double Quantize(double delta) { return std::round(delta * 1e9) / 1e9; }

// Score: what the move compares. kGpupack: the fragment growth itself. kFgd: the paper's simulator's node score,
// floor(100 * sigmoid(decrease in GPUs)) (0..100), negated so that lower is better; instances (and GPUs) of one
// score tie, and ties go to the first.
double Score(double delta, FragmentMeasure measure) {
  if (measure == FragmentMeasure::kGpupack) return Quantize(delta);
  return -std::floor(100.0 / (1.0 + std::exp(delta)));
}

}  // namespace

WorkloadShape WorkloadShapeOf(const TaskDemand& demand, const std::vector<PlacementConstraint>& constraints) {
  WorkloadShape s;
  s.cpu = demand.cpu;
  s.memory = demand.memory;
  s.gpu_kind = demand.gpu_kind;
  s.gpu_memory = demand.gpu_kind == GpuKind::kShared ? demand.gpu_memory : 0;
  s.gpu_count = demand.gpu_kind == GpuKind::kDedicated ? demand.gpu_count : 0;
  for (const auto& c : constraints)
    if (c.type == "memberOf") s.member_of.push_back(c.expression);
  s.weight = 1;
  return s;
}

std::shared_ptr<const TargetWorkload> BuildTargetWorkload(const std::vector<WorkloadShape>& shapes,
                                                          double coverage) {
  // Merge equal shapes, keeping the order of first appearance for ties.
  std::map<decltype(WorkloadShape{}.Key()), size_t> index;
  std::vector<WorkloadShape> merged;
  double total = 0;
  for (const WorkloadShape& s : shapes) {
    if (s.weight <= 0) continue;
    total += s.weight;
    auto [it, added] = index.emplace(s.Key(), merged.size());
    if (added) merged.push_back(s);
    else merged[it->second].weight += s.weight;
  }
  auto w = std::make_shared<TargetWorkload>();
  w->id = next_workload_id.fetch_add(1);
  if (total <= 0) return w;
  std::stable_sort(merged.begin(), merged.end(),
                   [](const WorkloadShape& a, const WorkloadShape& b) { return a.weight > b.weight; });
  double covered = 0;
  for (WorkloadShape& s : merged) {
    if (covered >= coverage * total - 1e-9) break;
    covered += s.weight;
    TargetWorkload::Class c;
    for (const auto& text : s.member_of) {
      auto e = query::Parse(text);
      if (e.ok()) c.member_of.push_back(std::move(e).value());
    }
    c.shape = std::move(s);
    w->classes.push_back(std::move(c));
  }
  for (auto& c : w->classes) c.shape.weight /= covered;
  return w;
}

double Fragment(const ContainerInstance& inst, const InstanceLoad& load, const TargetWorkload& workload,
                FragmentMeasure measure) {
  return FragmentOfView(ViewOf(inst), workload, AccessOf(inst, load, workload), measure);
}

FragmentMove BestMove(const ContainerInstance& inst, const InstanceLoad& load, const TaskDemand& demand,
                      bool compute_aware, const TargetWorkload& workload, FragmentMeasure measure) {
  FragmentMove out;
  if (inst.remaining.cpu < demand.cpu || inst.remaining.memory < demand.memory) return out;
  // An empty workload: the demand itself is the one class.
  TargetWorkload self;
  const TargetWorkload* w = &workload;
  if (workload.empty()) {
    self.classes.push_back({WorkloadShapeOf(demand, {}), {}});
    w = &self;
  }
  const std::vector<char> access = AccessOf(inst, load, *w);
  NodeView v = ViewOf(inst);
  const double before = FragmentOfView(v, *w, access, measure);
  NodeView after = v;
  after.cpu -= demand.cpu;
  after.memory -= demand.memory;
  if (demand.gpu_kind == GpuKind::kNone) {
    out.fits = true;
    out.delta = Score(FragmentOfView(after, *w, access, measure) - before, measure);
    return out;
  }
  if (demand.gpu_kind == GpuKind::kDedicated) {
    int taken = 0;
    for (size_t i = 0; i < inst.gpus.size() && taken < demand.gpu_count; ++i)
      if (v.gpus[i].idle) {
        after.gpus[i] = GpuView{0, v.gpus[i].total, false, false};
        ++taken;
      }
    if (taken < demand.gpu_count) return out;
    out.fits = true;
    out.delta = Score(FragmentOfView(after, *w, access, measure) - before, measure);
    return out;
  }
  // Shared: try every GPU with room; GPUs alike (same remaining, total and mode) measure alike, so only the first
  // of each is measured.
  for (size_t i = 0; i < inst.gpus.size(); ++i) {
    const GpuView& g = v.gpus[i];
    if (!g.shareable || g.remaining < demand.gpu_memory) continue;
    if (compute_aware && inst.gpus[i].compute_used_percent + demand.gpu_compute > 100) continue;
    bool seen = false;
    for (size_t j = 0; j < i && !seen; ++j) {
      const GpuView& h = v.gpus[j];
      seen = h.shareable && h.remaining == g.remaining && h.total == g.total && h.idle == g.idle &&
             !(compute_aware && inst.gpus[j].compute_used_percent != inst.gpus[i].compute_used_percent);
    }
    if (seen) continue;
    const GpuView saved = after.gpus[i];
    after.gpus[i].remaining -= demand.gpu_memory;
    after.gpus[i].idle = false;
    const double delta = Quantize(FragmentOfView(after, *w, access, measure) - before);
    after.gpus[i] = saved;
    if (!out.fits || delta < out.delta) {
      out.fits = true;
      out.delta = delta;
      out.shared_gpu = static_cast<int>(i);
    }
  }
  if (out.fits) out.delta = Score(out.delta, measure);
  return out;
}

// ---- DemandWindow ---------------------------------------------------------------------------------------------

void DemandWindow::Record(WorkloadShape shape) {
  shape.weight = 1;
  window_.push_back(std::move(shape));
  if (window_.size() > capacity_) window_.pop_front();
  // While the window is young every record counts: rebuild as often as the window has records to spare.
  if (++since_rebuild_ >= std::min(rebuild_every_, (window_.size() + 1) / 2) || !learned_) Rebuild();
}

void DemandWindow::Rebuild() {
  since_rebuild_ = 0;
  std::map<decltype(WorkloadShape{}.Key()), double> shares;
  for (const WorkloadShape& s : window_) shares[s.Key()] += 1.0 / static_cast<double>(window_.size());
  if (learned_) {
    double moved = 0;
    for (const auto& [k, v] : shares) {
      auto it = learned_shares_.find(k);
      moved += std::abs(v - (it == learned_shares_.end() ? 0 : it->second));
    }
    for (const auto& [k, v] : learned_shares_)
      if (!shares.count(k)) moved += v;
    if (moved <= 0.05) return;
  }
  learned_shares_ = std::move(shares);
  learned_ = BuildTargetWorkload(std::vector<WorkloadShape>(window_.begin(), window_.end()), 0.95);
}

// ---- FragmentCache --------------------------------------------------------------------------------------------

FragmentCache::Table& FragmentCache::TableFor(const TaskDemand& d, bool compute_aware, const TargetWorkload& w,
                                              FragmentMeasure measure) {
  Key key{static_cast<int>(measure), d.cpu, d.memory, static_cast<int>(d.gpu_kind), d.gpu_memory, d.gpu_count,
          compute_aware ? d.gpu_compute : 0, compute_aware, w.id};
  auto it = tables_.find(key);
  if (it == tables_.end()) {
    if (tables_.size() >= kMaxDemands) {
      auto oldest = tables_.begin();
      for (auto t = tables_.begin(); t != tables_.end(); ++t)
        if (t->second.last_used < oldest->second.last_used) oldest = t;
      tables_.erase(oldest);
    }
    it = tables_.emplace(key, Table{}).first;
  }
  it->second.last_used = ++clock_;
  return it->second;
}

void FragmentCache::Refresh(Table& t, const std::vector<InstanceEntry>& entries, size_t pos, const TaskDemand& demand,
                            bool compute_aware, const TargetWorkload& workload, FragmentMeasure measure) {
  Slot& s = t.slots[pos];
  const InstanceEntry& e = entries[pos];
  if (s.stamp == e.load->stamp && s.stamp != 0) return;
  s.move = BestMove(*e.instance, *e.load, demand, compute_aware, workload, measure);
  s.stamp = e.load->stamp;
}

void FragmentCache::Moves(const std::vector<InstanceEntry>& entries, const TaskDemand& demand, bool compute_aware,
                          const TargetWorkload& workload, FragmentMeasure measure, std::vector<FragmentMove>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  Table& t = TableFor(demand, compute_aware, workload, measure);
  if (t.slots.size() < entries.size()) t.slots.resize(entries.size());
  out.resize(entries.size());
  for (size_t pos = 0; pos < entries.size(); ++pos) {
    Refresh(t, entries, pos, demand, compute_aware, workload, measure);
    out[pos] = t.slots[pos].move;
  }
}

FragmentMove FragmentCache::Move(const std::vector<InstanceEntry>& entries, size_t pos, const TaskDemand& demand,
                                 bool compute_aware, const TargetWorkload& workload, FragmentMeasure measure) {
  std::lock_guard<std::mutex> lock(mu_);
  Table& t = TableFor(demand, compute_aware, workload, measure);
  if (t.slots.size() < entries.size()) t.slots.resize(entries.size());
  Refresh(t, entries, pos, demand, compute_aware, workload, measure);
  return t.slots[pos].move;
}

}  // namespace gpupack
