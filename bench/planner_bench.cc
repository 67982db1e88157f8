// planner_bench: the capacity planner on the bundled openb trace (planner/data/openb, or $GPUPACK_OPENB_DIR).
//
//   BM_FgdProtocol/jobs:2       the whole fgd protocol as `gpupack plan` runs it by default: every strategy x
//                               seeds 42..51 on the default pod list, 130% demand, milli units, 2 threads.
//                               Target: < 10 s on 2 cores.
//   BM_FgdOneRun/<strategy>     one run (one strategy, seed 42), single thread: where the time goes.
//   BM_Bounds                   the bounds protocol (L1, L2, FFD, best fit, first fit).
//
// Counters: placements (PlaceOne calls that placed) per second, arrivals per run.
// Run: build-plan/bench/planner_bench --benchmark_filter=Fgd
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "planner/bounds.h"
#include "planner/inputs.h"
#include "planner/protocols.h"

namespace gpupack::plan {
namespace {

// Trace: the openb fleet and default workload, loaded once.
struct Trace {
  Fleet fleet;
  Workload workload;
  Scenario scenario;
};

const Trace* LoadTrace() {
  static std::unique_ptr<Trace> trace = [] {
    auto t = std::make_unique<Trace>();
    auto f = LoadInput(BundledOpenbDir() + "/openb_node_list_gpu_node.csv");
    auto w = LoadInput(BundledOpenbDir() + "/openb_pod_list_default.csv");
    if (!f.ok() || !w.ok()) {
      std::fprintf(stderr, "planner_bench: %s %s\n", f.status().message().c_str(), w.status().message().c_str());
      return std::unique_ptr<Trace>();
    }
    t->fleet = std::get<Fleet>(std::move(f).value());
    t->workload = std::get<Workload>(std::move(w).value());
    auto sc = BuildScenario(&t->fleet, t->workload, GpuUnits::kMilli);
    if (!sc.ok()) return std::unique_ptr<Trace>();
    t->scenario = std::move(sc).value();
    return t;
  }();
  return trace.get();
}

void Count(benchmark::State& state, const FgdReport& r) {
  int64_t placed = 0, arrivals = 0, runs = 0;
  for (const auto& s : r.strategies)
    for (const auto& run : s.runs) {
      placed += run.placed;
      arrivals += run.arrivals;
      ++runs;
    }
  state.counters["placements/s"] =
      benchmark::Counter(static_cast<double>(placed) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["arrivals/run"] = static_cast<double>(arrivals) / std::max<int64_t>(1, runs);
}

void BM_FgdProtocol(benchmark::State& state) {
  const Trace* t = LoadTrace();
  if (!t) return state.SkipWithError("openb trace not found");
  FgdOptions o;
  o.jobs = static_cast<int>(state.range(0));
  FgdReport last;
  for (auto _ : state) {
    auto r = RunFgd(t->scenario, AllStrategies(), o);
    if (!r.ok()) return state.SkipWithError(r.status().message().c_str());
    last = std::move(r).value();
  }
  Count(state, last);
}
BENCHMARK(BM_FgdProtocol)->ArgName("jobs")->Arg(2)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1);

void BM_FgdOneRun(benchmark::State& state) {
  const Trace* t = LoadTrace();
  if (!t) return state.SkipWithError("openb trace not found");
  const PlanStrategy strategy = AllStrategies()[state.range(0)];
  state.SetLabel(strategy.name);
  FgdOptions o;
  o.seeds = {42};
  FgdReport last;
  for (auto _ : state) {
    auto r = RunFgd(t->scenario, {strategy}, o);
    if (!r.ok()) return state.SkipWithError(r.status().message().c_str());
    last = std::move(r).value();
  }
  Count(state, last);
}
BENCHMARK(BM_FgdOneRun)->DenseRange(0, 5)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);

void BM_Bounds(benchmark::State& state) {
  const Trace* t = LoadTrace();
  if (!t) return state.SkipWithError("openb trace not found");
  for (auto _ : state) {
    auto b = RunBounds(t->scenario);
    benchmark::DoNotOptimize(b);
  }
}
BENCHMARK(BM_Bounds)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpupack::plan

BENCHMARK_MAIN();
