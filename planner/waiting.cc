#include "planner/waiting.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <queue>
#include <set>

namespace gpupack::plan {

namespace {

constexpr size_t kBackfillWindow = 256;  // as the server's queue (engine/operations/capacity_queue.cc)

struct Arrival {
  int64_t time = 0;
  int task = 0;
  std::optional<int64_t> duration;  // none: it never leaves
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

std::string ShapeLabel(const Shape& shape, GpuUnits units) {
  const TaskDemand& d = shape.demand;
  if (d.gpu_kind == GpuKind::kShared)
    return "shared " + std::to_string(d.gpu_memory) + (units == GpuUnits::kMib ? " MiB" : " milli-GPU");
  if (d.gpu_kind == GpuKind::kDedicated) return std::to_string(d.gpu_count) + (d.gpu_count == 1 ? " GPU" : " GPUs");
  return "no GPU";
}

Result<WaitResult> ReplayWithWaits(const Scenario& sc, const PlanStrategy& strategy,
                                   const Simulation::Options& options, const std::vector<char>* skip) {
  if (!sc.workload->HasTimes())
    return Status::InvalidParameter("waiting needs a workload with arrival and departure times (a trace); this one "
                                    "has none");
  std::vector<Arrival> arrivals;
  const auto& tasks = sc.workload->tasks;
  for (int i = 0; i < static_cast<int>(tasks.size()); ++i) {
    if (skip && (*skip)[i]) continue;
    for (const Occurrence& o : tasks[i].schedule)  // a service's: its replicas' (ReplicaSchedules)
      arrivals.push_back({o.arrival, i, o.departure ? std::optional<int64_t>(*o.departure - o.arrival) : std::nullopt});
  }
  std::stable_sort(arrivals.begin(), arrivals.end(), [](const Arrival& a, const Arrival& b) { return a.time < b.time; });
  auto sim = Simulation::Create(sc, strategy, options);
  if (!sim.ok()) return sim.status();

  // ends: (end time, task id in the simulation) of the running tasks that leave.
  std::priority_queue<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>, std::greater<>> ends;
  std::deque<size_t> line;  // arrivals waiting, in arrival order
  std::vector<double> wait(arrivals.size(), -1);
  int index = 0;
  WaitResult result;
  auto start = [&](size_t a, int64_t now) {
    const auto out = (*sim)->Arrive(arrivals[a].task, index++);
    if (!out.placed) return false;
    wait[a] = static_cast<double>(now - arrivals[a].time);
    if (arrivals[a].duration) {
      ends.push({now + *arrivals[a].duration, out.task_id});
      result.last_end = std::max(result.last_end, now + *arrivals[a].duration);
    }
    return true;
  };
  // Serve: the head while it starts, then backfill behind it, each shape once.
  auto serve = [&](int64_t now) {
    while (!line.empty() && start(line.front(), now)) line.pop_front();
    if (line.empty()) return;
    std::set<int> failed = {sc.tasks[arrivals[line.front()].task].shape};
    for (size_t k = 1; k < line.size() && k <= kBackfillWindow;) {
      const int shape = sc.tasks[arrivals[line[k]].task].shape;
      if (!failed.count(shape) && start(line[k], now)) {
        line.erase(line.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      failed.insert(shape);
      ++k;
    }
  };
  size_t next = 0;
  while (next < arrivals.size() || !ends.empty()) {
    const bool departure = !ends.empty() && (next == arrivals.size() || ends.top().first <= arrivals[next].time);
    if (departure) {
      const int64_t now = ends.top().first;
      while (!ends.empty() && ends.top().first == now) {
        (*sim)->Depart(ends.top().second);
        ends.pop();
      }
      serve(now);
      continue;
    }
    const size_t a = next++;
    if (line.empty()) {
      if (!start(a, arrivals[a].time)) line.push_back(a);
    } else {
      // Behind a waiting head: backfill at once unless an earlier task of its shape waits (it would not fit).
      const int shape = sc.tasks[arrivals[a].task].shape;
      bool same_waits = false;
      for (size_t k = 0; k < line.size() && k <= kBackfillWindow && !same_waits; ++k)
        same_waits = sc.tasks[arrivals[line[k]].task].shape == shape;
      if (same_waits || !start(a, arrivals[a].time)) line.push_back(a);
    }
  }

  std::map<int, WaitFigures> by_shape;
  std::map<int, std::vector<double>> samples;
  std::vector<double> all;
  for (size_t a = 0; a < arrivals.size(); ++a) {
    const int shape = sc.tasks[arrivals[a].task].shape;
    WaitFigures& f = by_shape[shape];
    ++f.tasks;
    ++result.all.tasks;
    if (wait[a] < 0) {
      ++f.never_started;
      ++result.all.never_started;
      continue;
    }
    if (wait[a] > 0) {
      ++f.waited;
      ++result.all.waited;
    }
    samples[shape].push_back(wait[a]);
    all.push_back(wait[a]);
  }
  auto fill = [](WaitFigures& f, std::vector<double>& v) {
    f.p50 = Percentile(v, 0.50);
    f.p95 = Percentile(v, 0.95);
    f.p99 = Percentile(v, 0.99);
    f.max = v.empty() ? 0 : v.back();
  };
  result.all.shape = "all";
  fill(result.all, all);
  for (auto& [shape, f] : by_shape) {
    f.shape = ShapeLabel(sc.shapes[shape], sc.units);
    fill(f, samples[shape]);
    result.by_shape.push_back(f);
  }
  std::stable_sort(result.by_shape.begin(), result.by_shape.end(),
                   [](const WaitFigures& a, const WaitFigures& b) { return a.tasks > b.tasks; });
  return result;
}

}  // namespace gpupack::plan
