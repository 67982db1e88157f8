#include "planner/bounds.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>

namespace gpupack::plan {

int64_t LowerBoundL1(const std::vector<int64_t>& sizes, int64_t capacity) {
  int64_t sum = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  return (sum + capacity - 1) / capacity;
}

int64_t LowerBoundL2(const std::vector<int64_t>& sizes, int64_t capacity) {
  const int64_t c = capacity;
  std::vector<int64_t> w = sizes;
  std::sort(w.begin(), w.end());
  // Candidate values of a: 0 and every size <= C/2 (L(a) only changes there).
  std::set<int64_t> alphas = {0};
  for (int64_t x : w)
    if (2 * x <= c) alphas.insert(x);
  int64_t best = LowerBoundL1(sizes, capacity);
  for (int64_t a : alphas) {
    int64_t j1 = 0, j2 = 0, sum2 = 0, sum3 = 0;
    for (int64_t x : w) {
      if (x > c - a) ++j1;
      else if (2 * x > c) { ++j2; sum2 += x; }
      else if (x >= a) sum3 += x;
    }
    int64_t free_in_j2 = j2 * c - sum2;
    int64_t extra = sum3 > free_in_j2 ? (sum3 - free_in_j2 + c - 1) / c : 0;
    best = std::max(best, j1 + j2 + extra);
  }
  return best;
}

int64_t FirstFit(const std::vector<int64_t>& sizes, int64_t capacity) {
  // Segment tree over bins holding each bin's free space: the leftmost bin with room is found in O(log n).
  size_t n = 1;
  while (n < sizes.size() + 1) n <<= 1;
  std::vector<int64_t> tree(2 * n, 0);
  int64_t bins = 0;
  auto set = [&](size_t i, int64_t v) {
    i += n;
    tree[i] = v;
    for (i >>= 1; i; i >>= 1) tree[i] = std::max(tree[2 * i], tree[2 * i + 1]);
  };
  for (int64_t x : sizes) {
    if (tree[1] >= x && bins > 0) {
      size_t i = 1;
      while (i < n) i = tree[2 * i] >= x ? 2 * i : 2 * i + 1;
      set(i - n, tree[i] - x);
    } else {
      set(static_cast<size_t>(bins), capacity - x);
      ++bins;
    }
  }
  return bins;
}

int64_t FirstFitDecreasing(const std::vector<int64_t>& sizes, int64_t capacity) {
  std::vector<int64_t> w = sizes;
  std::sort(w.begin(), w.end(), std::greater<>());
  return FirstFit(w, capacity);
}

int64_t BestFit(const std::vector<int64_t>& sizes, int64_t capacity) {
  std::multiset<int64_t> free;  // free space of each open bin
  int64_t bins = 0;
  for (int64_t x : sizes) {
    auto it = free.lower_bound(x);  // the fullest bin that still has room
    if (it == free.end()) {
      ++bins;
      free.insert(capacity - x);
    } else {
      int64_t left = *it - x;
      free.erase(it);
      free.insert(left);
    }
  }
  return bins;
}

Result<BoundsReport> RunBounds(const Scenario& sc) {
  BoundsReport r;
  r.units = GpuUnitsName(sc.units);
  if (sc.units == GpuUnits::kMilli) {
    r.capacity = 1000;
  } else {
    for (size_t t = 0; t < sc.type_gpu_size.size(); ++t) {
      if (sc.fleet->types[t].gpus == 0 || sc.fleet->types[t].count == 0) continue;
      if (r.capacity != 0 && r.capacity != sc.type_gpu_size[t])
        return Status::InvalidParameter("bounds in MiB needs GPUs of one size, and the fleet has " +
                                        std::to_string(r.capacity) + " and " + std::to_string(sc.type_gpu_size[t]) +
                                        " MiB; use --gpu-units milli");
      r.capacity = sc.type_gpu_size[t];
    }
    if (r.capacity == 0) return Status::InvalidParameter("bounds in MiB needs a fleet with GPUs, or --gpu-units milli");
  }
  // Arrivals in time order (stable: ties keep workload order), as the replay would see them.
  struct Item {
    int64_t time;
    int64_t size;
  };
  std::vector<Item> items, all;  // single-GPU items; every GPU task's
  const auto& tasks = sc.workload->tasks;
  const bool timed = sc.workload->HasTimes();
  for (size_t i = 0; i < tasks.size(); ++i) {
    const TaskDemand& d = sc.shapes[sc.tasks[i].shape].demand;
    bool single = d.gpu_kind == GpuKind::kShared || (d.gpu_kind == GpuKind::kDedicated && d.gpu_count == 1);
    for (int c = 0; c < tasks[i].Copies(); ++c) {
      const int64_t at = timed ? tasks[i].CopyArrival(c) : 0;
      if (!single) {
        ++r.skipped;
        if (d.gpu_kind == GpuKind::kDedicated) {  // several whole GPUs: as many whole items, together
          ++r.multi_gpu_tasks;
          for (int k = 0; k < d.gpu_count; ++k) all.push_back({at, r.capacity});
        }
        continue;
      }
      int64_t size = d.gpu_kind == GpuKind::kDedicated ? r.capacity : std::min<int64_t>(d.gpu_memory, r.capacity);
      (size == r.capacity ? r.whole : r.fractional) += 1;
      items.push_back({at, size});
      all.push_back({at, size});
    }
  }
  if (all.empty()) return Status::InvalidParameter("the workload has no GPU task to bound");
  auto figures = [&r](std::vector<Item>& list) {
    std::stable_sort(list.begin(), list.end(), [](const Item& a, const Item& b) { return a.time < b.time; });
    std::vector<int64_t> sizes;
    for (const auto& it : list) sizes.push_back(it.size);
    BinFigures f;
    f.items = static_cast<int>(sizes.size());
    if (sizes.empty()) return f;
    f.l1 = LowerBoundL1(sizes, r.capacity);
    f.l2 = LowerBoundL2(sizes, r.capacity);
    f.ffd = FirstFitDecreasing(sizes, r.capacity);
    f.best_fit = BestFit(sizes, r.capacity);
    f.first_fit = FirstFit(sizes, r.capacity);
    return f;
  };
  const BinFigures single = figures(items);
  r.items = single.items;
  r.l1 = single.l1;
  r.l2 = single.l2;
  r.ffd = single.ffd;
  r.best_fit = single.best_fit;
  r.first_fit = single.first_fit;
  r.all = figures(all);
  return r;
}

}  // namespace gpupack::plan
