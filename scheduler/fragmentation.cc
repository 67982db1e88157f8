// The fragment measure, its best move, the learned target workload and the per-instance cache
// (scheduler/fragmentation.h); and the placement's fast path over them, WalkFragment, with FragmentGpu
// (scheduler/placement_parts.h), for binpack(fragmentation) and fgd.
#include "scheduler/fragmentation.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "scheduler/cluster_state.h"
#include "scheduler/placement_parts.h"
#include "scheduler/strategies.h"

namespace gpupack {
namespace {

std::atomic<uint64_t> next_workload_id{1};

// kMultiGpuMinWindow: the demands a DemandWindow holds before its target may be multi_gpu (LearnTarget).
constexpr size_t kMultiGpuMinWindow = 1024;

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
double FragmentOfView(const NodeView& v, const TargetWorkload& w, const std::vector<char>& access) {
  double free_total = 0;
  for (const GpuView& g : v.gpus) free_total += g.Share();
  if (free_total <= 0) return 0;
  double sum = 0;
  for (size_t c = 0; c < w.classes.size(); ++c) {
    const WorkloadShape& s = w.classes[c].shape;
    if (s.gpu_kind == GpuKind::kNone) {
      sum += s.weight * free_total;
      continue;
    }
    if (!access[c] || v.cpu < s.cpu) {
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

// Rank: the paper's simulator's node score of a fragment change, floor(100 * sigmoid(-delta)) (0..100, higher is
// better; a change of a few hundredths of a GPU is a tie).
double Rank(double delta) { return std::floor(100.0 / (1.0 + std::exp(Quantize(delta)))); }

// Score: what the move compares (lower is better), from the changes of the fragment (delta) and of the CPU-aware
// fragment (cpu_delta; scheduler/fragmentation.h). kFgd ranks the fragment change as the paper's simulator does,
// negated (ties go to the instance registered first). kGpupack, for a task with a GPU, breaks that rank's ties by
// the rank of the CPU-aware change, then by the IDLE GPUs the instance keeps after the task, fewer first: among
// placements that strand alike, it leaves the CPU the GPUs left need, fills instances already opened and keeps
// whole GPUs (and whole instances) for the tasks that need them. With a multi_gpu target (LearnTarget) the rank
// is instead that of the fragment change plus kCpuRankWeight times the CPU-aware change (one key: the CPU the
// placements leave weighs in the rank, not only among its ties), then the fragment change itself in steps of
// 0.001 GPU (the rank's steps are about 0.04 GPU wide); the remaining ties go to the instance registered first.
// A CPU-only task changes no GPU, so its plain fragment change only says whether it takes CPU a class needs at
// all; kGpupack ranks it by the CPU-aware change
// (how much GPU share its CPU strands), then by the free GPU share of the instance (least first: CPU is taken
// where no GPU is left to feed), then by IDLE GPUs.
//   kFgd:                         -Rank(delta)
//   kGpupack, a task with a GPU:  -1e9 * Rank(delta) - 1e6 * Rank(cpu_delta) + IDLE GPUs after
//     multi_gpu target:           -1e12 * Rank(delta + kCpuRankWeight * cpu_delta) + 1000 * round(1000 * delta)
//     (integers below 2^53, so the sum is exact; |1000 * round(1000 * delta)| is at most 1e6 per GPU of the
//     instance, well inside the rank's step)
//   kGpupack, a CPU-only task:    -1e9 * Rank(cpu_delta) + 100 * round(100 * free GPU share) + IDLE GPUs
double Score(double delta, double cpu_delta, FragmentMeasure measure, int idle_after, bool multi_gpu) {
  if (measure == FragmentMeasure::kFgd) return -Rank(delta);
  if (multi_gpu)
    return -1e12 * Rank(delta + kCpuRankWeight * cpu_delta) + 1000.0 * std::round(1000.0 * delta);
  return -1e9 * Rank(delta) - 1e6 * Rank(cpu_delta) + idle_after;
}
double CpuOnlyScore(double delta, double cpu_delta, FragmentMeasure measure, const NodeStats& st) {
  if (measure == FragmentMeasure::kFgd) return -Rank(delta);
  return -1e9 * Rank(cpu_delta) + 100.0 * std::round(st.free_total * 100.0) + st.idle;
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

double Fragment(const ContainerInstance& inst, const InstanceLoad& load, const TargetWorkload& workload) {
  return FragmentOfView(ViewOf(inst), workload, AccessOf(inst, load, workload));
}

namespace {

// Fits: whether a GPU with `remaining` free (IDLE or not) has room for one task of class `s`.
bool Fits(const WorkloadShape& s, MiB remaining, bool idle) {
  return s.gpu_kind == GpuKind::kShared ? remaining >= s.gpu_memory : idle;
}

// Fragments: fragment(instance) and the CPU-aware fragment (scheduler/fragmentation.h).
struct Fragments {
  double plain = 0;
  double cpu = 0;
};

// FragmentAfter: both fragments of an instance after a change, from its stats: CPU and free share after, and per
// class the change of its room and small share (adjust(c) -> {room delta, small delta}). O(classes).
template <typename Adjust>
Fragments FragmentAfter(const NodeStats& st, const TargetWorkload& w, int64_t cpu, double free_total, Adjust adjust) {
  Fragments sum;
  if (free_total <= 1e-12) return sum;
  for (size_t c = 0; c < w.classes.size(); ++c) {
    const WorkloadShape& s = w.classes[c].shape;
    const auto [room, small] = adjust(c, s);
    const int need = s.gpu_kind == GpuKind::kShared ? 1 : s.gpu_count;
    if (s.gpu_kind == GpuKind::kNone || !st.access[c] || cpu < s.cpu || st.room[c] + room < need) {
      sum.plain += s.weight * free_total;
      sum.cpu += s.weight * free_total;
      continue;
    }
    const double stranded = st.small[c] + small;
    sum.plain += s.weight * stranded;
    // The tasks of the class the free CPU holds, and the GPU share they can use at most.
    const double share = s.gpu_kind == GpuKind::kShared
                             ? static_cast<double>(s.gpu_memory) / static_cast<double>(st.gpu_size)
                             : static_cast<double>(s.gpu_count);
    const double tasks = s.cpu > 0 ? std::floor(static_cast<double>(cpu) / static_cast<double>(s.cpu))
                                   : std::numeric_limits<double>::infinity();
    sum.cpu += s.weight * (free_total - std::min(free_total - stranded, tasks * share));
  }
  return sum;
}

// MoveFromStats: BestMove from the instance's stats; each candidate costs O(classes).
FragmentMove MoveFromStats(const ContainerInstance& inst, const NodeStats& st, const TaskDemand& demand,
                           bool compute_aware, const TargetWorkload& w, FragmentMeasure measure) {
  FragmentMove out;
  if (inst.remaining.cpu < demand.cpu || inst.remaining.memory < demand.memory) return out;
  auto none = [](size_t, const WorkloadShape&) { return std::pair<int, double>{0, 0.0}; };
  const int64_t cpu = st.cpu - demand.cpu;
  // Delta: both fragments' changes for a move that leaves `free_after` free share.
  auto change = [&](double free_after, auto adjust) {
    const Fragments after = FragmentAfter(st, w, cpu, free_after, adjust);
    return Fragments{Quantize(after.plain - st.fragment), Quantize(after.cpu - st.cpu_fragment)};
  };
  if (demand.gpu_kind == GpuKind::kNone) {
    const Fragments d = change(st.free_total, none);
    out.fits = true;
    out.delta = CpuOnlyScore(d.plain, d.cpu, measure, st);
    return out;
  }
  if (demand.gpu_kind == GpuKind::kDedicated) {
    // The first gpu_count IDLE GPUs, each whole (share 1 of its total) and no longer shareable after.
    std::vector<MiB> taken;
    for (const Gpu& g : inst.gpus) {
      if (static_cast<int>(taken.size()) == demand.gpu_count) break;
      if (!g.held && g.mode == GpuMode::kIdle) taken.push_back(g.remaining_memory_mib);
    }
    if (static_cast<int>(taken.size()) < demand.gpu_count) return out;
    double free_after = st.free_total;
    for (size_t k = 0; k < taken.size(); ++k) free_after -= 1.0;
    auto adjust = [&](size_t, const WorkloadShape& s) {
      std::pair<int, double> d{0, 0.0};
      for (MiB r : taken) {
        if (Fits(s, r, true)) d.first -= 1;
        else d.second -= 1.0;
      }
      return d;
    };
    const Fragments d = change(free_after, adjust);
    out.fits = true;
    out.delta = Score(d.plain, d.cpu, measure, st.idle - static_cast<int>(taken.size()), w.multi_gpu);
    return out;
  }
  Fragments best;
  int best_idle = 0;
  // Shared: try every GPU with room; GPUs alike (same remaining, total and mode) measure alike, so only the first
  // of each is measured.
  for (size_t i = 0; i < inst.gpus.size(); ++i) {
    const Gpu& g = inst.gpus[i];
    const bool shareable = !g.held && (g.mode == GpuMode::kIdle || g.mode == GpuMode::kMps);
    if (!shareable || g.remaining_memory_mib < demand.gpu_memory) continue;
    if (compute_aware && g.compute_used_percent + demand.gpu_compute > 100) continue;
    bool seen = false;
    for (size_t j = 0; j < i && !seen; ++j) {
      const Gpu& h = inst.gpus[j];
      seen = !h.held && h.mode == g.mode && h.remaining_memory_mib == g.remaining_memory_mib &&
             h.total_memory_mib == g.total_memory_mib &&
             !(compute_aware && h.compute_used_percent != g.compute_used_percent);
    }
    if (seen) continue;
    const bool idle = g.mode == GpuMode::kIdle;
    const MiB r = g.remaining_memory_mib, r2 = r - demand.gpu_memory;
    const double total = g.total_memory_mib > 0 ? static_cast<double>(g.total_memory_mib) : 1.0;
    const double share = static_cast<double>(r) / total, share2 = static_cast<double>(r2) / total;
    auto adjust = [&](size_t, const WorkloadShape& s) {
      const bool fb = Fits(s, r, idle), fa = Fits(s, r2, false);
      return std::pair<int, double>{(fa ? 1 : 0) - (fb ? 1 : 0), (fa ? 0.0 : share2) - (fb ? 0.0 : share)};
    };
    const Fragments d = change(st.free_total - share + share2, adjust);
    // The GPU of the largest decrease of the fragment (ties: the lowest index); the instance is then ranked by
    // Score.
    if (!out.fits || d.plain < best.plain) {
      out.fits = true;
      best = d;
      best_idle = st.idle - (idle ? 1 : 0);
      out.shared_gpu = static_cast<int>(i);
    }
  }
  if (out.fits) out.delta = Score(best.plain, best.cpu, measure, best_idle, w.multi_gpu);
  return out;
}

// SelfWorkload: the one-class workload of a demand (a cluster with no target workload yet).
const TargetWorkload& OrSelf(const TargetWorkload& workload, const TaskDemand& demand, TargetWorkload& self) {
  if (!workload.empty()) return workload;
  self.classes.push_back({WorkloadShapeOf(demand, {}), {}});
  return self;
}

}  // namespace

NodeStats StatsOf(const ContainerInstance& inst, const InstanceLoad& load, const TargetWorkload& w) {
  NodeStats st;
  st.cpu = inst.remaining.cpu;
  if (!inst.gpus.empty() && inst.gpus[0].total_memory_mib > 0) st.gpu_size = inst.gpus[0].total_memory_mib;
  const NodeView v = ViewOf(inst);
  for (const GpuView& g : v.gpus) {
    st.free_total += g.Share();
    st.idle += g.idle ? 1 : 0;
  }
  const std::vector<char> access = AccessOf(inst, load, w);
  st.access.assign(access.begin(), access.end());
  st.room.assign(w.classes.size(), 0);
  st.small.assign(w.classes.size(), 0.0);
  for (size_t c = 0; c < w.classes.size(); ++c) {
    const WorkloadShape& s = w.classes[c].shape;
    if (s.gpu_kind == GpuKind::kNone) continue;
    for (const GpuView& g : v.gpus) {
      if (!g.shareable) continue;
      if (Fits(s, g.remaining, g.idle)) ++st.room[c];
      else st.small[c] += g.Share();
    }
  }
  const Fragments f = FragmentAfter(st, w, st.cpu, st.free_total,
                                    [](size_t, const WorkloadShape&) { return std::pair<int, double>{0, 0.0}; });
  st.fragment = f.plain;
  st.cpu_fragment = f.cpu;
  return st;
}

FragmentMove BestMove(const ContainerInstance& inst, const InstanceLoad& load, const TaskDemand& demand,
                      bool compute_aware, const TargetWorkload& workload, FragmentMeasure measure) {
  TargetWorkload self;
  const TargetWorkload& w = OrSelf(workload, demand, self);
  return MoveFromStats(inst, StatsOf(inst, load, w), demand, compute_aware, w, measure);
}

std::shared_ptr<const TargetWorkload> LearnTarget(const std::vector<WorkloadShape>& shapes) {
  auto w = std::make_shared<TargetWorkload>(*BuildTargetWorkload(shapes, 0.95));
  double gpu = 0, multi = 0;
  for (const TargetWorkload::Class& c : w->classes) {
    if (c.shape.gpu_kind == GpuKind::kNone) continue;
    gpu += c.shape.weight;
    if (c.shape.gpu_kind == GpuKind::kDedicated && c.shape.gpu_count >= 2) multi += c.shape.weight;
  }
  w->multi_gpu = gpu > 0 && multi > kMultiGpuShare * gpu;
  if (!w->multi_gpu) return w;
  double whole = 0, all = 0;
  for (const WorkloadShape& s : shapes) {
    all += s.weight;
    if (s.gpu_kind == GpuKind::kDedicated && s.gpu_count >= kDampFromGpus) whole += s.weight;
  }
  w->reserve_share = all > 0 ? whole / all : 0;
  double total = 0;
  for (TargetWorkload::Class& c : w->classes) {
    WorkloadShape& s = c.shape;
    if (s.gpu_kind == GpuKind::kDedicated && s.gpu_count >= kDampFromGpus)
      s.weight /= std::pow(static_cast<double>(s.gpu_count), kDampExponent);
    total += s.weight;
  }
  for (TargetWorkload::Class& c : w->classes) c.shape.weight /= total;
  return w;
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
    if (moved <= 0.1) return;
  }
  learned_shares_ = std::move(shares);
  // LearnTarget's multi-GPU test only once the window holds kMultiGpuMinWindow demands: on a young window the
  // share of multi-GPU classes is noise (one 8-GPU task among the first 8 is 12%).
  std::vector<WorkloadShape> shapes(window_.begin(), window_.end());
  learned_ = window_.size() >= kMultiGpuMinWindow ? LearnTarget(shapes) : BuildTargetWorkload(shapes, 0.95);
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
  if (workload.empty()) {
    s.move = BestMove(*e.instance, *e.load, demand, compute_aware, workload, measure);
  } else {
    // The instance's stats serve every demand until the instance or the workload changes.
    if (stats_workload_ != workload.id) {
      stats_.clear();
      stats_workload_ = workload.id;
    }
    if (stats_.size() < entries.size()) stats_.resize(entries.size());
    StatsSlot& ss = stats_[pos];
    if (ss.stamp != e.load->stamp || ss.stamp == 0) {
      ss.stats = StatsOf(*e.instance, *e.load, workload);
      ss.stamp = e.load->stamp;
    }
    s.move = MoveFromStats(*e.instance, ss.stats, demand, compute_aware, workload, measure);
  }
  s.stamp = e.load->stamp;
}

FragmentMove FragmentCache::Move(const std::vector<InstanceEntry>& entries, size_t pos, const TaskDemand& demand,
                                 bool compute_aware, const TargetWorkload& workload, FragmentMeasure measure) {
  Table& t = TableFor(demand, compute_aware, workload, measure);
  if (t.slots.size() < entries.size()) t.slots.resize(entries.size());
  Refresh(t, entries, pos, demand, compute_aware, workload, measure);
  return t.slots[pos].move;
}

// ---- The placement's fast path ----------------------------------------------------------------------------

namespace {

// MeasureOf: the fragment measure of the request's first strategy (fgd, else binpack(fragmentation)).
FragmentMeasure MeasureOf(const Placer::Compiled& c) {
  return c.first->name == "fgd" ? FragmentMeasure::kFgd : FragmentMeasure::kGpupack;
}

// TargetOf: the target workload of a cluster's fragments (ClusterFragments::Target), or the empty one (measure
// against the demand itself) when the cluster keeps none.
const TargetWorkload& TargetOf(const ClusterFragments* frag) {
  static const TargetWorkload kNoWorkload;
  return frag && frag->Target() ? *frag->Target() : kNoWorkload;
}

// IsWhole: an instance of exactly kDampFromGpus GPUs, every one IDLE and untouched (what an 8-GPU task needs).
bool IsWhole(const ContainerInstance& inst) {
  if (inst.gpus.size() != static_cast<size_t>(kDampFromGpus)) return false;
  for (const Gpu& g : inst.gpus)
    if (g.held || g.mode != GpuMode::kIdle || g.remaining_memory_mib != g.total_memory_mib) return false;
  return true;
}

// Reserving: with a multi_gpu target, whether whole instances are kept for the tasks of kDampFromGpus+ GPUs: while
// the whole ones are at most reserve_share (the learned share of such demands) of the instances of kDampFromGpus
// GPUs, a task with fewer GPUs goes to a whole one only when no other instance takes it. O(instances) per
// decision, on a multi_gpu target only.
bool Reserving(const std::vector<InstanceEntry>& entries, const TaskDemand& demand, const TargetWorkload& w,
               FragmentMeasure measure) {
  if (!w.multi_gpu || measure != FragmentMeasure::kGpupack || demand.gpu_kind == GpuKind::kNone) return false;
  if (demand.gpu_kind == GpuKind::kDedicated && demand.gpu_count >= kDampFromGpus) return false;
  int whole = 0, sized = 0;
  for (const InstanceEntry& e : entries) {
    if (e.instance->gpus.size() != static_cast<size_t>(kDampFromGpus)) continue;
    ++sized;
    whole += IsWhole(*e.instance) ? 1 : 0;
  }
  return whole <= w.reserve_share * sized;
}

// kReserved: added to the move of a whole instance while Reserving. A multi_gpu move scores in [-1e14 - 8e6,
// 8e6] (the rank times -1e12, plus the fine change), so a reserved one always ranks after every other.
constexpr double kReserved = 1e15;

// LoadOfEntry: the load of an instance of `entries`.
const InstanceLoad& LoadOfEntry(const std::vector<InstanceEntry>& entries, const ContainerInstance* inst) {
  static const InstanceLoad kEmpty;
  for (const InstanceEntry& e : entries)
    if (e.instance == inst) return *e.load;
  return kEmpty;
}

}  // namespace

// WalkFragment: the fast path for binpack(fragmentation) or fgd first. The cluster's FragmentCache gives every
// instance's best move (recomputing only the instances whose stamp moved since); the walk visits the instances in
// registration order and runs the filters only on one whose fragment growth could win (less than the best so
// far, or equal when later strategies break the tie), so the decision is the scan's. A shared task gets the move's
// GPU. When nothing fits, the scan builds the failures. With a multi_gpu target the walk also keeps the last whole
// instances for the tasks of kDampFromGpus+ GPUs (Reserving): a whole instance's move counts kReserved more, so it
// wins only when nothing else fits (the scan, used when binpack(fragmentation) is not first or with memberOf
// constraints, does not reserve).
bool WalkFragment(const IndexWalkArgs& args, Placement& result) {
  const PlacementRequest& req = args.request;
  const Placer::Compiled& c = args.compiled;
  const auto& entries = args.entries;
  if (entries.empty()) return false;
  const FragmentMeasure measure = MeasureOf(c);
  const ClusterFragments* frag = args.state.FragmentsOf(req.cluster);
  const TargetWorkload& workload = TargetOf(frag);
  const bool single = c.scorers.size() == 1;
  const bool only_listed = !req.only_instances.empty();
  std::optional<ScoreContext> ctx;
  std::vector<double> best_scores, scores(c.scorers.size());
  size_t best = SIZE_MAX;
  FragmentMove best_move;
  GpuFit best_fit;
  FilterOutcome f;
  const bool reserving = Reserving(entries, req.demand, workload, measure);
  auto visit = [&](size_t pos, const FragmentMove& m) {
    if (!m.fits) return;
    const double delta = reserving && IsWhole(*entries[pos].instance) ? m.delta + kReserved : m.delta;
    if (best != SIZE_MAX && (delta > best_scores[0] || (single && delta == best_scores[0]))) return;
    const ContainerInstance& inst = *entries[pos].instance;
    if (IsInactive(inst) || (only_listed && !InOnlyList(req, inst))) return;
    f.fit = GpuFit{};
    if (!RunFilters(req, c.member_of, c.distinct_instance, c.prefer_emptiest, inst, *entries[pos].load, false, f))
      return;
    scores[0] = delta;
    if (!single) {
      if (!ctx) ctx = PrepareScorers(c, args.state, entries, req);
      const uint64_t key = c.needs_random_key ? Mix(args.task_seed ^ HashString(inst.arn)) : 0;
      for (size_t i = 1; i < c.scorers.size(); ++i)
        scores[i] = c.scorers[i]->Score(inst, *entries[pos].load, req.demand, f.fit, key, *ctx, i, pos);
    }
    if (best == SIZE_MAX || scores < best_scores) {  // ties keep the earlier-registered instance
      best = pos;
      best_scores = scores;
      best_move = m;
      best_fit = f.fit;
    }
  };
  if (frag) {
    frag->MoveCache().Visit(entries, args.state.StampsOf(req.cluster), args.state.LastStamp(), req.demand,
                            req.compute_aware, workload, measure, visit);
  } else {
    for (size_t pos = 0; pos < entries.size(); ++pos)
      visit(pos, BestMove(*entries[pos].instance, *entries[pos].load, req.demand, req.compute_aware, workload,
                          measure));
  }
  if (best == SIZE_MAX) return false;
  const ContainerInstance* chosen = entries[best].instance;
  result.instance = chosen;
  if (req.demand.gpu_kind == GpuKind::kShared && best_move.shared_gpu >= 0) {
    // The cached GPU, unless the instance changed in a way its stamp missed: then the move is measured afresh.
    const auto g = static_cast<size_t>(best_move.shared_gpu);
    const bool usable = g < chosen->gpus.size() && Shareable(chosen->gpus[g]) &&
                        chosen->gpus[g].remaining_memory_mib >= req.demand.gpu_memory &&
                        !(req.compute_aware && chosen->gpus[g].compute_used_percent + req.demand.gpu_compute > 100);
    const FragmentMove fresh = usable ? best_move
                                      : BestMove(*chosen, *entries[best].load, req.demand, req.compute_aware,
                                                 workload, measure);
    result.gpu_indices = fresh.shared_gpu >= 0 ? std::vector<size_t>{static_cast<size_t>(fresh.shared_gpu)}
                                               : ChosenGpus(req.demand, *chosen, best_fit);
  } else {
    result.gpu_indices = ChosenGpus(req.demand, *chosen, best_fit);
  }
  return true;
}

int FragmentGpu(const PlacementRequest& req, const Placer::Compiled& c, const ClusterState& state,
                const std::vector<InstanceEntry>& entries, const ContainerInstance& chosen) {
  const FragmentMove m = BestMove(chosen, LoadOfEntry(entries, &chosen), req.demand, req.compute_aware,
                                  TargetOf(state.FragmentsOf(req.cluster)), MeasureOf(c));
  return m.shared_gpu;
}

}  // namespace gpupack
