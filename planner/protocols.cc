#include "planner/protocols.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <mutex>
#include <thread>

namespace gpupack::plan {

std::vector<uint64_t> DefaultSeeds() {
  std::vector<uint64_t> s;
  for (uint64_t i = 42; i <= 51; ++i) s.push_back(i);
  return s;
}

Result<std::vector<uint64_t>> ParseSeeds(std::string_view text) {
  auto number = [](std::string_view s, uint64_t& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && ec == std::errc() && p == s.data() + s.size();
  };
  auto bad = [&] {
    return Status::InvalidParameter("--seeds '" + std::string(text) + "': expected A..B (e.g. 42..51), one seed, or A,B,C");
  };
  std::vector<uint64_t> out;
  if (size_t dots = text.find(".."); dots != std::string_view::npos) {
    uint64_t a = 0, b = 0;
    if (!number(text.substr(0, dots), a) || !number(text.substr(dots + 2), b) || b < a) return bad();
    if (b - a >= 10000) return Status::InvalidParameter("--seeds: at most 10,000 seeds");
    for (uint64_t s = a; s <= b; ++s) out.push_back(s);
    return out;
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    uint64_t v = 0;
    if (!number(text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start), v))
      return bad();
    out.push_back(v);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

namespace {

// ParallelFor runs fn(0..n-1) on up to `jobs` threads; the first error wins. Progress is reported under a lock.
Status ParallelFor(int n, int jobs, const std::function<Status(int)>& fn, const ProgressFn& progress) {
  std::atomic<int> next{0};
  std::mutex mu;
  int done = 0;
  Status first_error;
  auto worker = [&] {
    while (true) {
      int i = next.fetch_add(1);
      if (i >= n) return;
      Status st = fn(i);
      std::lock_guard<std::mutex> lock(mu);
      if (!st.ok() && first_error.ok()) first_error = st;
      ++done;
      if (progress) progress(done, n);
    }
  };
  int threads = std::max(1, std::min(jobs, n));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  return first_error;
}

Status NeedGpus(const Scenario& sc) {
  if (!sc.fleet || sc.fleet->InstanceCount() == 0)
    return Status::InvalidParameter("this protocol needs a fleet (--fleet FILE) with at least one instance");
  return Status::Ok();
}

// Event: one arrival or departure of the replay, in the order they are applied.
struct Event {
  int64_t time = 0;
  int kind = 1;          // 0 departure, 1 arrival, 2 departure of a zero-length occurrence
  int task = 0;
  int occurrence = 0;    // flat index over every arrival of the run
};

std::vector<Event> BuildEvents(const Scenario& sc, bool timed) {
  std::vector<Event> events;
  int occ = 0;
  const auto& tasks = sc.workload->tasks;
  for (int i = 0; i < static_cast<int>(tasks.size()); ++i) {
    if (timed) {
      for (const Occurrence& o : tasks[i].schedule) {
        events.push_back({o.arrival, 1, i, occ});
        if (o.departure) events.push_back({*o.departure, *o.departure == o.arrival ? 2 : 0, i, occ});
        ++occ;
      }
    } else {
      for (int c = 0; c < tasks[i].Copies(); ++c) {
        events.push_back({occ, 1, i, occ});
        ++occ;
      }
    }
  }
  if (timed)
    std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
      return a.time != b.time ? a.time < b.time : a.kind < b.kind;
    });
  return events;
}

}  // namespace

std::vector<int> SampleArrivals(const Scenario& sc, uint64_t seed, int demand_pct) {
  std::vector<int> out;
  std::vector<double> cumulative;
  std::vector<int> listed;  // every task that may arrive (weight > 0), once
  double total = 0, gpu_weight = 0;
  for (size_t i = 0; i < sc.tasks.size(); ++i) {
    double w = sc.workload->tasks[i].weight;
    total += w;
    gpu_weight += sc.tasks[i].gpu_demand > 0 ? w : 0;
    cumulative.push_back(total);
    if (w > 0) listed.push_back(static_cast<int>(i));
  }
  if (total <= 0 || gpu_weight <= 0 || sc.gpu_count <= 0) return out;
  const double target = demand_pct / 100.0 * sc.gpu_count;
  PlanRng rng(seed);
  // First the workload itself, every task once in a random order (Fisher-Yates), as the paper's simulator
  // replays its pod list; then copies drawn with replacement by weight until the demand is reached.
  for (size_t k = listed.size(); k > 1; --k) std::swap(listed[k - 1], listed[rng.Below(k)]);
  double arrived = 0;
  for (int i : listed) {
    if (arrived >= target - 1e-9) break;
    out.push_back(i);
    arrived += sc.tasks[i].gpu_demand;
  }
  while (arrived < target - 1e-9) {
    double u = rng.Uniform() * total;
    size_t i = std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin();
    i = std::min(i, cumulative.size() - 1);
    while (sc.workload->tasks[i].weight <= 0) ++i;  // u landed on a zero-weight boundary
    out.push_back(static_cast<int>(i));
    arrived += sc.tasks[i].gpu_demand;
  }
  return out;
}

Result<FgdReport> RunFgd(const Scenario& sc, const std::vector<PlanStrategy>& strategies, const FgdOptions& opt) {
  std::string services;
  for (const TaskSpec& t : sc.workload->tasks)
    if (t.IsService()) services += (services.empty() ? "" : ", ") + t.service;
  if (!services.empty())
    return Status::InvalidParameter("the workload has services (" + services +
                                    "), which fgd does not replay: it samples tasks by weight, with no time and no "
                                    "desired count; use --protocol size or replay");
  if (Status st = NeedGpus(sc); !st.ok()) return st;
  if (sc.gpu_count == 0) return Status::InvalidParameter("the fleet has no GPUs; fgd measures GPU allocation");
  if (opt.demand_pct < 1 || opt.demand_pct > 1000) return Status::InvalidParameter("--demand must be 1..1000 (percent)");
  if (opt.seeds.empty()) return Status::InvalidParameter("--seeds names no seed");
  FgdReport report;
  report.demand_pct = opt.demand_pct;
  report.seeds = opt.seeds;
  // The expected sequence length is target / (mean GPU demand of an arrival); refuse absurd ones up front.
  double total_weight = 0, weighted_demand = 0;
  for (size_t i = 0; i < sc.tasks.size(); ++i) {
    total_weight += sc.workload->tasks[i].weight;
    weighted_demand += sc.workload->tasks[i].weight * sc.tasks[i].gpu_demand;
  }
  if (weighted_demand > 0) {
    const double expected = opt.demand_pct / 100.0 * sc.gpu_count * total_weight / weighted_demand;
    if (expected > kMaxFgdArrivals)
      return Status::InvalidParameter("fgd would sample about " + std::to_string(static_cast<int64_t>(expected)) +
                                      " tasks per run (more than " + std::to_string(kMaxFgdArrivals) +
                                      "): the workload's GPU needs are tiny next to the fleet; lower --demand or "
                                      "use a smaller fleet");
  }
  std::vector<std::vector<int>> sequences;
  for (uint64_t seed : opt.seeds) {
    sequences.push_back(SampleArrivals(sc, seed, opt.demand_pct));
    if (sequences.back().empty())
      return Status::InvalidParameter("the workload asks for no GPU (every task with weight > 0 has no GPU need)");
  }
  const int n_seeds = static_cast<int>(opt.seeds.size());
  const int points = opt.demand_pct + 1;
  std::vector<FgdRun> runs(strategies.size() * opt.seeds.size());
  Status st = ParallelFor(
      static_cast<int>(runs.size()), opt.jobs,
      [&](int r) -> Status {
        const PlanStrategy& strategy = strategies[r / n_seeds];
        const int s = r % n_seeds;
        Simulation::Options so;
        so.seed = opt.seeds[s];
        so.remember_failures = true;  // no departures in this protocol
        so.node_order_seed = opt.seeds[s];
        auto sim = Simulation::Create(sc, strategy, so);
        if (!sim.ok()) return sim.status();
        FgdRun& run = runs[r];
        run.seed = opt.seeds[s];
        run.allocated_pct.assign(points, 0.0);
        const double gpus = (*sim)->gpu_count();
        double arrived = 0;
        int next_k = 1;
        const auto& seq = sequences[s];
        for (size_t i = 0; i < seq.size(); ++i) {
          auto out = (*sim)->Arrive(seq[i], static_cast<int>(i));
          ++run.arrivals;
          (out.placed ? run.placed : run.refused) += 1;
          if (!out.placed) run.refused_gpu_demand += sc.tasks[seq[i]].gpu_demand;
          arrived += sc.tasks[seq[i]].gpu_demand;
          const double pct = 100.0 * arrived / gpus;
          while (next_k < points && pct >= next_k - 1e-9)
            run.allocated_pct[next_k++] = 100.0 * (*sim)->allocated_gpus() / gpus;
        }
        for (; next_k < points; ++next_k) run.allocated_pct[next_k] = 100.0 * (*sim)->allocated_gpus() / gpus;
        return Status::Ok();
      },
      opt.progress);
  if (!st.ok()) return st;
  for (size_t k = 0; k < strategies.size(); ++k) {
    FgdStrategyResult res;
    res.name = strategies[k].name;
    res.allocated_pct.assign(points, 0.0);
    for (int s = 0; s < n_seeds; ++s) {
      const FgdRun& run = runs[k * n_seeds + s];
      for (int p = 0; p < points; ++p) res.allocated_pct[p] += run.allocated_pct[p] / n_seeds;
      res.runs.push_back(run);
    }
    if (opt.demand_pct >= 100) res.unallocated_pct_at[100] = 100.0 - res.allocated_pct[100];
    res.unallocated_pct_at[opt.demand_pct] = 100.0 - res.allocated_pct[opt.demand_pct];
    report.strategies.push_back(std::move(res));
  }
  return report;
}

Result<ReplayReport> RunReplay(const Scenario& sc, const std::vector<PlanStrategy>& strategies,
                               const ReplayOptions& opt) {
  if (Status st = NeedGpus(sc); !st.ok()) return st;
  if (opt.wait && (opt.at_once || !sc.workload->HasTimes()))
    return Status::InvalidParameter("--wait needs a workload with arrival and departure times, without --at-once");
  ReplayReport report;
  report.timed = !opt.at_once && sc.workload->HasTimes();
  const std::vector<Event> events = BuildEvents(sc, report.timed);
  if (events.empty()) return Status::InvalidParameter("the workload has no task to replay");
  const int64_t t0 = events.front().time, t1 = events.back().time;
  // No more buckets than distinct seconds (or arrival indexes) in the span.
  const int buckets = static_cast<int>(std::clamp<int64_t>(t1 - t0 + 1, 1, std::max(1, opt.buckets)));
  const int64_t width = std::max<int64_t>(1, (t1 - t0 + buckets) / buckets);
  report.strategies.resize(strategies.size());
  Status st = ParallelFor(
      static_cast<int>(strategies.size()), opt.jobs,
      [&](int k) -> Status {
        Simulation::Options so;
        so.seed = opt.seed;
        so.remember_failures = false;  // reasons are reported, so every refusal is asked of the Placer
        auto sim = Simulation::Create(sc, strategies[k], so);
        if (!sim.ok()) return sim.status();
        ReplayStrategyResult& res = report.strategies[k];
        res.name = strategies[k].name;
        for (const TaskSpec& t : sc.workload->tasks)
          if (t.IsService()) res.refused_replicas[t.service] = 0;
        for (int b = 0; b < buckets; ++b) {
          ReplayBucket bucket;
          bucket.start = t0 + b * width;
          bucket.end = bucket.start + width;
          res.timeline.push_back(bucket);
        }
        std::vector<int64_t> task_of(events.size(), -1);
        const double gpus = std::max(1, (*sim)->gpu_count());
        int arrival_index = 0;
        int bucket = 0, in_use = 0;
        double alloc = 0;
        // A bucket starts with the state the one before it ended with; its peaks grow with every event in it.
        auto enter = [&](int b) {
          while (bucket < b) {
            ReplayBucket& next = res.timeline[++bucket];
            next.peak_gpus_in_use = std::max(next.peak_gpus_in_use, in_use);
            next.peak_allocated_pct = std::max(next.peak_allocated_pct, alloc);
          }
        };
        for (const Event& e : events) {
          const int b = static_cast<int>(std::min<int64_t>(buckets - 1, (e.time - t0) / width));
          enter(b);
          ReplayBucket& cur = res.timeline[b];
          if (e.kind == 1) {
            auto out = (*sim)->Arrive(e.task, arrival_index++);
            ++res.arrivals;
            ++cur.arrivals;
            if (out.placed) {
              ++res.placed;
              task_of[e.occurrence] = out.task_id;
            } else {
              ++res.refused;
              ++res.refusals[out.reason];
              ++cur.refusals[out.reason];
              if (const TaskSpec& t = sc.workload->tasks[e.task]; t.IsService()) ++res.refused_replicas[t.service];
            }
          } else if (task_of[e.occurrence] >= 0) {
            (*sim)->Depart(task_of[e.occurrence]);
          }
          in_use = (*sim)->gpus_in_use();
          alloc = 100.0 * (*sim)->allocated_gpus() / gpus;
          cur.peak_gpus_in_use = std::max(cur.peak_gpus_in_use, in_use);
          cur.peak_allocated_pct = std::max(cur.peak_allocated_pct, alloc);
          if (in_use > res.peak_gpus_in_use) {
            res.peak_gpus_in_use = in_use;
            res.peak_at = e.time;
          }
          res.peak_allocated_pct = std::max(res.peak_allocated_pct, alloc);
        }
        enter(buckets - 1);
        if (opt.wait) {
          auto waits = ReplayWithWaits(sc, strategies[k], so);
          if (!waits.ok()) return waits.status();
          res.waits = std::move(waits).value();
        }
        return Status::Ok();
      },
      opt.progress);
  if (!st.ok()) return st;
  return report;
}

namespace {

// PlacesAll replays `events` (skipping tasks marked in `skip`) on `count` instances of type `type` alone and
// answers whether nothing was refused. It stops at the first refusal.
Result<bool> PlacesAll(const Scenario& sc, const PlanStrategy& strategy, uint64_t seed, int type, int count,
                       const std::vector<Event>& events, const std::vector<char>& skip) {
  Simulation::Options so;
  so.seed = seed;
  so.remember_failures = true;
  so.type_counts.assign(sc.fleet->types.size(), 0);
  so.type_counts[type] = count;
  auto sim = Simulation::Create(sc, strategy, so);
  if (!sim.ok()) return sim.status();
  std::vector<int64_t> task_of(events.size(), -1);
  int index = 0;
  for (const Event& e : events) {
    if (skip[e.task]) continue;
    if (e.kind == 1) {
      auto out = (*sim)->Arrive(e.task, index++);
      if (!out.placed) return false;
      task_of[e.occurrence] = out.task_id;
    } else {
      (*sim)->Depart(task_of[e.occurrence]);
    }
  }
  return true;
}

}  // namespace

Result<SizeReport> RunSize(const Scenario& sc, const std::vector<PlanStrategy>& strategies, const SizeOptions& opt) {
  if (!sc.fleet || sc.fleet->types.empty())
    return Status::InvalidParameter("size needs a fleet (--fleet FILE) listing the instance types to size");
  if (opt.target_wait_p95_s && (opt.at_once || !sc.workload->HasTimes()))
    return Status::InvalidParameter(
        "--target-wait-p95 needs a workload with arrival and departure times, without --at-once");
  SizeReport report;
  report.timed = !opt.at_once && sc.workload->HasTimes();
  const std::vector<Event> events = BuildEvents(sc, report.timed);
  std::vector<int> types;
  for (const auto& name : opt.instance_types) {
    auto it = std::find_if(sc.fleet->types.begin(), sc.fleet->types.end(),
                           [&](const InstanceType& t) { return t.name == name; });
    if (it == sc.fleet->types.end()) {
      std::string known;
      for (const auto& t : sc.fleet->types) known += (known.empty() ? "" : ", ") + t.name;
      return Status::InvalidParameter("--instance-type '" + name + "' is not in the fleet (" + known + ")");
    }
    types.push_back(static_cast<int>(it - sc.fleet->types.begin()));
  }
  if (types.empty())
    for (size_t t = 0; t < sc.fleet->types.size(); ++t) types.push_back(static_cast<int>(t));

  report.strategies.resize(strategies.size());
  for (size_t k = 0; k < strategies.size(); ++k) {
    report.strategies[k].name = strategies[k].name;
    report.strategies[k].types.resize(types.size());
  }
  const int n_types = static_cast<int>(types.size());
  Status st = ParallelFor(
      static_cast<int>(strategies.size()) * n_types, opt.jobs,
      [&](int r) -> Status {
        const PlanStrategy& strategy = strategies[r / n_types];
        const int type = types[r % n_types];
        SizeTypeResult& res = report.strategies[r / n_types].types[r % n_types];
        res.instance_type = sc.fleet->types[type].name;
        res.gpus_per_instance = sc.fleet->types[type].gpus;
        // Shapes that one empty instance of this type refuses are never placed on it: leave their tasks out, and
        // count their arrivals.
        std::vector<int> arrivals_of(sc.tasks.size(), 0);
        for (const Event& e : events) arrivals_of[e.task] += e.kind == 1 ? 1 : 0;
        std::vector<int8_t> shape_fits(sc.shapes.size(), -1);
        std::vector<char> skip(sc.tasks.size(), 0);
        for (size_t t = 0; t < sc.tasks.size(); ++t) {
          int shape = sc.tasks[t].shape;
          if (shape_fits[shape] < 0) {
            std::vector<Event> one = {{0, 1, static_cast<int>(t), 0}};
            std::vector<char> none(sc.tasks.size(), 0);
            auto fits = PlacesAll(sc, strategy, opt.seed, type, 1, one, none);
            if (!fits.ok()) return fits.status();
            shape_fits[shape] = *fits ? 1 : 0;
          }
          if (!shape_fits[shape]) {
            skip[t] = 1;
            res.unplaceable_tasks += arrivals_of[t];
            if (res.unplaceable_examples.size() < 3) res.unplaceable_examples.push_back(sc.workload->tasks[t].name);
          }
        }
        int arrivals = 0;
        for (const Event& e : events) arrivals += (e.kind == 1 && !skip[e.task]) ? 1 : 0;
        if (arrivals == 0) {
          res.count = 0;
          return Status::Ok();
        }
        // Doubling, then bisection. With one instance per arrival every task finds an empty instance, so
        // `arrivals` always suffices; the search assumes more instances never refuse more.
        // Enough: no refusal, or with a wait target, every task started and the p95 wait within it.
        auto enough = [&](int count) -> Result<bool> {
          if (!opt.target_wait_p95_s) return PlacesAll(sc, strategy, opt.seed, type, count, events, skip);
          Simulation::Options so;
          so.seed = opt.seed;
          so.type_counts.assign(sc.fleet->types.size(), 0);
          so.type_counts[type] = count;
          auto waits = ReplayWithWaits(sc, strategy, so, &skip);
          if (!waits.ok()) return waits.status();
          const bool ok = waits->all.never_started == 0 && waits->all.p95 <= *opt.target_wait_p95_s;
          if (ok) res.wait_p95_s = waits->all.p95;
          return ok;
        };
        int lo = 0, hi = 1;
        while (true) {
          auto ok = enough(hi);
          if (!ok.ok()) return ok.status();
          if (*ok) break;
          lo = hi;
          if (hi >= arrivals) return Status::Server("size: " + res.instance_type + " refused a task even with one instance per arrival");
          hi = std::min(hi * 2, arrivals);
        }
        while (hi - lo > 1) {
          int mid = lo + (hi - lo) / 2;
          auto ok = enough(mid);
          if (!ok.ok()) return ok.status();
          (*ok ? hi : lo) = mid;
        }
        res.count = hi;
        return Status::Ok();
      },
      opt.progress);
  if (!st.ok()) return st;
  return report;
}

}  // namespace gpupack::plan
