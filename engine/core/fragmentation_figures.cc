#include "engine/core/fragmentation_figures.h"

#include <algorithm>

namespace gpupack::api {

namespace {

// Recent: the GPU shapes of one cluster's recent tasks.
struct Recent {
  std::optional<MiB> smallest_shared;
  bool dedicated = false;
  int tasks = 0;
};

// NoteShape adds task `t`'s GPU shape to `r`: a shared task's memory on its GPU, or that it is dedicated.
void NoteShape(const Task& t, Recent& r) {
  MiB shared = 0;
  bool dedicated = false;
  for (const Container& c : t.containers) {
    if (c.mps) shared += c.mps->memory_mib;
    else if (!c.gpu_ids.empty()) dedicated = true;
  }
  if (shared == 0 && !dedicated) return;
  ++r.tasks;
  if (shared > 0) r.smallest_shared = std::min(r.smallest_shared.value_or(shared), shared);
  r.dedicated = r.dedicated || dedicated;
}

// Stranded: whether no recent shape fits a free piece of `piece` MiB (`idle`: the piece is a whole IDLE GPU).
bool Stranded(MiB piece, bool idle, const Recent& r) {
  if (r.tasks == 0 || piece <= 0) return false;
  if (idle && r.dedicated) return false;
  return !r.smallest_shared || piece < *r.smallest_shared;
}

void AddPiece(FreeMemory& m, MiB piece, bool stranded) {
  ++m.gpus;
  m.free += piece;
  m.largest_block = std::max(m.largest_block, piece);
  if (stranded) m.stranded += piece;
}

}  // namespace

FragmentationFigures ComputeFragmentation(const ReadView& view, EpochMs now) {
  std::map<std::string, Recent> recent;
  view.ForEachTask([&](const Task& t) {
    if (t.created_at >= now - kRecentWindowMs) NoteShape(t, recent[t.cluster]);
  });
  FragmentationFigures out;
  for (const Cluster* c : view.Clusters()) {
    ClusterFragmentation& f = out[c->name];
    const Recent& r = recent[c->name];
    f.smallest_recent_demand = r.smallest_shared;
    f.recent_dedicated = r.dedicated;
    f.recent_tasks = r.tasks;
    for (const InstanceRecord* rec : view.InstancesOf(c->name)) {
      const ContainerInstance& inst = rec->instance;
      if (inst.status != InstanceStatus::kActive || inst.impaired) continue;
      FreeMemory& by_type = f.by_instance_type[inst.instance_type];
      for (const Gpu& g : inst.gpus) {
        if (g.held || g.mode == GpuMode::kDedicated) continue;
        const bool idle = g.mode == GpuMode::kIdle;
        const MiB piece = std::max<MiB>(0, g.remaining_memory_mib);
        const bool stranded = Stranded(piece, idle, r);
        AddPiece(f.total, piece, stranded);
        AddPiece(by_type, piece, stranded);
      }
    }
  }
  return out;
}

std::shared_ptr<const FragmentationFigures> FragmentationCache::Get(const std::shared_ptr<const ReadView>& view,
                                                                    EpochMs now) {
  std::lock_guard lock(mu_);
  if (!figures_ || view_ != view.get() || sequence_ != view->sequence() || now - at_ >= kMaxAgeMs || now < at_) {
    figures_ = std::make_shared<const FragmentationFigures>(ComputeFragmentation(*view, now));
    view_ = view.get();
    sequence_ = view->sequence();
    at_ = now;
  }
  return figures_;
}

}  // namespace gpupack::api
