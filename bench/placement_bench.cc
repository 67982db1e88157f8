// placement_bench: the cost of one placement decision (Placer::PlaceOne) on a large, half-full cluster.
//
// Setup (built once, before any benchmark runs, deterministic in kSeed): one cluster of 10,000 container
// instances x 8 GPUs of 81,559 MiB (H100-like; 196,608 CPU units and 2,000,000 MiB of memory each), filled with
// tasks reserved through ClusterState::ReserveTask (each Task built by BuildTask, as RunTask builds it)
// until about half of all GPU memory is declared. The mix, by task count: shared 4,096 / 8,192 / 16,384 /
// 20,480 MiB at 35 / 30 / 20 / 10 %, and 5 % dedicated 1-GPU tasks (a dedicated GPU counts as fully declared).
// Each fill task goes to a random instance and a random GPU that fits, so free memory is scattered the way a
// long-running cluster scatters it.
//
// Cases: random (no strategy), binpack(gpuMemory), binpack(memory), binpack(cpu), binpack(memory) then
// spread(attribute:ecs.availability-zone), spread(instanceId), memberOf + binpack(gpuMemory), fits nowhere,
// binpack(fragmentation) (its target workload learned from the fill: every fill task is recorded as a RunTask
// demand).
// BM_Decide/<case>: one decision for a shared 4,096 MiB task (or one that fits nowhere); the Placer is compiled
// once and reused, the state is never mutated. BM_DecideRate/<case>: the same without per-call clocks (the
// throughput figure). BM_DecideApply/<case>: decision + the applier's in-memory work
// (build the Task, ReserveTask, then stop it and purge it), so the state stays half full.
//
// Besides Google Benchmark's mean time, every call is timed on its own (steady_clock, and the thread's CPU
// clock) and the counters give p50/p99/p99.9/max: wall-clock latencies include time the thread was descheduled
// on a shared machine; the cpu_* ones do not. decisions/s is iterations over the benchmark's CPU time.
// Figures and how to read them: docs/benchmarks.md. Never a test: nothing here fails on a slow machine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "scheduler/cluster_state.h"
#include "scheduler/fragmentation.h"
#include "scheduler/model.h"
#include "scheduler/placement.h"
#include "scheduler/task_builder.h"

namespace gpupack {
namespace {

constexpr int kInstances = 10'000;
constexpr int kGpusPerInstance = 8;
constexpr MiB kGpuMemory = 81'559;
constexpr int64_t kInstanceCpu = 196'608;
constexpr MiB kInstanceMemory = 2'000'000;
constexpr uint64_t kSeed = 0x67707570'61636b32ULL;  // "gpupack2"
constexpr double kTargetFill = 0.5;                  // share of GPU memory declared
const std::string kCluster = "bench";
const std::string kArnPrefix = "arn:aws:ecs:us-east-1:000000000000:";
const char* const kZones[] = {"us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"};

// One kind of task of the fill (and of the measured requests).
struct Kind {
  const char* family;
  GpuKind gpu_kind;
  MiB gpu_memory;  // shared only
  int64_t cpu;
  MiB memory;
  int weight;  // percent of fill tasks
};
const Kind kMix[] = {
    {"infer-4g", GpuKind::kShared, 4'096, 1'024, 8'192, 35},
    {"infer-8g", GpuKind::kShared, 8'192, 2'048, 16'384, 30},
    {"finetune-16g", GpuKind::kShared, 16'384, 4'096, 32'768, 20},
    {"finetune-20g", GpuKind::kShared, 20'480, 4'096, 65'536, 10},
    {"train-1gpu", GpuKind::kDedicated, 0, 8'192, 131'072, 5},
};

TaskDemand DemandFor(const Kind& k) {
  TaskDemand d;
  d.cpu = k.cpu;
  d.memory = k.memory;
  d.gpu_kind = k.gpu_kind;
  if (k.gpu_kind == GpuKind::kShared) {
    d.gpu_memory = k.gpu_memory;
    d.gpu_compute = 100;  // maxComputePercent absent
  } else {
    d.gpu_count = 1;
  }
  return d;
}

std::string Hex(std::mt19937_64& rng, int digits) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  while (static_cast<int>(out.size()) < digits) {
    uint64_t v = rng();
    for (int i = 0; i < 16 && static_cast<int>(out.size()) < digits; ++i) out.push_back(kHex[(v >> (i * 4)) & 15]);
  }
  return out;
}

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The half-full cluster, shared by every benchmark.
struct Fixture {
  ClusterState state;
  std::mt19937_64 ids{kSeed ^ 0x1d5};  // task ids of the measured apply loop
  int64_t fill_tasks = 0;
  int64_t fill_by_kind[std::size(kMix)] = {};
  MiB gpu_memory_total = 0;
  MiB gpu_memory_declared = 0;
  double build_seconds = 0;
  std::vector<TaskDefinition> definitions;  // DefinitionFor(kMix[k]), per kind
};

// DefinitionFor: the task definition of a kind: one essential GPU container named "main" (shared: nvidiaMps with
// the kind's memory and no compute limit; dedicated: value "1").
TaskDefinition DefinitionFor(const Kind& kind) {
  TaskDefinition td;
  td.family = kind.family;
  td.revision = 1;
  td.arn = kArnPrefix + "task-definition/" + kind.family + ":1";
  ContainerDefinition c;
  c.name = "main";
  c.image = std::string("registry.example.com/") + kind.family + ":latest";
  c.essential = true;
  ResourceRequirement gpu;
  gpu.type = "GPU";
  if (kind.gpu_kind == GpuKind::kShared) {
    gpu.mps = MpsSharing{kind.gpu_memory, std::nullopt};
    gpu.has_sharing_strategy = true;
  } else {
    gpu.value = "1";
  }
  c.resource_requirements.push_back(std::move(gpu));
  td.containers.push_back(std::move(c));
  return td;
}

// MakeTask builds a placed task of definition `td` with BuildTask (scheduler/task_builder.h), as RunTask does.
Task MakeTask(std::mt19937_64& rng, const TaskDefinition& td, const TaskDemand& demand, const ContainerInstance& inst,
              const std::vector<size_t>& gpu_indices) {
  NewTaskFields fields;
  fields.id = Hex(rng, 32);
  fields.arn = kArnPrefix + "task/" + kCluster + "/" + fields.id;
  fields.cluster = kCluster;
  fields.group = "family:" + td.family;
  fields.created_at = 1'700'000'000'000;
  fields.container_arn = [id = fields.id](const std::string& name) {
    return kArnPrefix + "container/" + kCluster + "/" + id + "/" + name;
  };
  return BuildTask(std::move(fields), td, demand, inst, gpu_indices);
}

Fixture* BuildFixture() {
  const auto start = std::chrono::steady_clock::now();
  auto* f = new Fixture;
  for (const Kind& kind : kMix) f->definitions.push_back(DefinitionFor(kind));
  std::mt19937_64 rng(kSeed);
  Cluster cluster;
  cluster.name = kCluster;
  cluster.arn = kArnPrefix + "cluster/" + kCluster;
  f->state.PutCluster(cluster);

  for (int i = 0; i < kInstances; ++i) {
    ContainerInstance inst;
    inst.id = Hex(rng, 32);
    inst.arn = kArnPrefix + "container-instance/" + kCluster + "/" + inst.id;
    inst.cluster = kCluster;
    inst.ec2_instance_id = "i-" + inst.id.substr(0, 17);
    inst.instance_type = "p5.48xlarge";
    inst.agent_version = "gpupack-agent 0.1.0";
    inst.registered = inst.remaining = {kInstanceCpu, kInstanceMemory};
    for (int g = 0; g < kGpusPerInstance; ++g) {
      Gpu gpu;
      gpu.id = "GPU-" + Hex(rng, 8) + "-" + Hex(rng, 4) + "-" + Hex(rng, 4) + "-" + Hex(rng, 4) + "-" + Hex(rng, 12);
      gpu.total_memory_mib = gpu.remaining_memory_mib = kGpuMemory;
      inst.gpus.push_back(std::move(gpu));
      f->gpu_memory_total += kGpuMemory;
    }
    inst.attributes = {{"ecs.availability-zone", std::string(kZones[rng() % 4])},
                       {"ecs.instance-type", inst.instance_type},
                       {"ecs.os-type", std::string("linux")}};
    inst.registered_at = 1'700'000'000'000 + i;
    f->state.PutInstance(std::move(inst));
  }

  const auto& instances = f->state.InstancesOf(kCluster);
  std::discrete_distribution<int> pick_kind({35, 30, 20, 10, 5});
  std::vector<size_t> fits;
  while (f->gpu_memory_declared < static_cast<MiB>(kTargetFill * static_cast<double>(f->gpu_memory_total))) {
    const int k = pick_kind(rng);
    const Kind& kind = kMix[k];
    const TaskDemand demand = DemandFor(kind);
    bool placed = false;
    for (int attempt = 0; attempt < 64 && !placed; ++attempt) {
      const ContainerInstance& inst = *instances[rng() % instances.size()];
      if (inst.remaining.cpu < demand.cpu || inst.remaining.memory < demand.memory) continue;
      fits.clear();
      for (size_t g = 0; g < inst.gpus.size(); ++g) {
        const Gpu& gpu = inst.gpus[g];
        if (demand.gpu_kind == GpuKind::kShared ? gpu.mode != GpuMode::kDedicated && gpu.remaining_memory_mib >= demand.gpu_memory
                                                : gpu.mode == GpuMode::kIdle)
          fits.push_back(g);
      }
      if (fits.empty()) continue;
      std::vector<size_t> chosen = {fits[rng() % fits.size()]};
      Task t = MakeTask(rng, f->definitions[k], demand, inst, chosen);
      if (Status s = f->state.ReserveTask(std::move(t)); !s.ok()) {
        std::fprintf(stderr, "placement_bench: fill failed: %s\n", s.message().c_str());
        std::abort();
      }
      // Each fill task was a RunTask demand: binpack(fragmentation) learns its target workload from them.
      f->state.RecordDemand(kCluster, WorkloadShapeOf(demand, {}));
      f->gpu_memory_declared += demand.gpu_kind == GpuKind::kShared ? demand.gpu_memory : kGpuMemory;
      ++f->fill_tasks;
      ++f->fill_by_kind[k];
      placed = true;
    }
  }
  f->build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return f;
}

Fixture& Shared() {
  static Fixture* f = BuildFixture();  // never freed: the process ends right after the benchmarks
  return *f;
}

// ---- the measured requests ------------------------------------------------------------------------------------

enum class Case {
  kRandom, kBinpackGpuMemory, kBinpackMemory, kBinpackCpu, kBinpackMemorySpread, kSpreadInstance, kMemberOf,
  kFitsNowhere, kBinpackFragmentation
};

PlacementRequest RequestFor(Case c) {
  PlacementRequest req;
  req.cluster = kCluster;
  req.demand = DemandFor(kMix[0]);  // shared 4,096 MiB, 1,024 CPU units, 8,192 MiB
  req.group = "family:infer-4g";
  req.seed = kSeed;
  switch (c) {
    case Case::kRandom:
      break;  // no strategy: random
    case Case::kBinpackGpuMemory:
      req.strategies = {{"binpack", "gpuMemory"}};
      break;
    case Case::kBinpackMemory:
      req.strategies = {{"binpack", "memory"}};
      break;
    case Case::kBinpackCpu:
      req.strategies = {{"binpack", "cpu"}};
      break;
    case Case::kBinpackMemorySpread:  // a later strategy: the tie group of the least remaining memory is scored
      req.strategies = {{"binpack", "memory"}, {"spread", "attribute:ecs.availability-zone"}};
      break;
    case Case::kSpreadInstance:
      req.strategies = {{"spread", "instanceId"}};
      break;
    case Case::kMemberOf:
      req.constraints = {{"memberOf", "attribute:ecs.availability-zone in [us-east-1a, us-east-1b]"}};
      req.strategies = {{"binpack", "gpuMemory"}};
      break;
    case Case::kFitsNowhere:
      req.demand.gpu_memory = 90'000;  // more than any GPU has: RESOURCE:GPU_MEMORY on all 10,000 instances
      break;
    case Case::kBinpackFragmentation:  // target workload learned from the fill's demands (the fixture)
      req.strategies = {{"binpack", "fragmentation"}};
      break;
  }
  return req;
}

std::unique_ptr<Placer> MakePlacer(Case c) {
  auto placer = Placer::Create(RequestFor(c));
  if (!placer.ok()) {
    std::fprintf(stderr, "placement_bench: %s\n", placer.status().message().c_str());
    std::abort();
  }
  return std::move(placer).value();
}

double Percentile(std::vector<int64_t>& ns, double p) {
  if (ns.empty()) return 0;
  std::sort(ns.begin(), ns.end());
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(ns.size())));
  return static_cast<double>(ns[std::clamp<size_t>(rank, 1, ns.size()) - 1]) / 1000.0;  // µs
}

void ReportLatency(benchmark::State& st, const std::string& prefix, std::vector<int64_t>& wall,
                   std::vector<int64_t>& cpu) {
  st.counters[prefix + "p50_us"] = Percentile(wall, 0.50);
  st.counters[prefix + "p99_us"] = Percentile(wall, 0.99);
  st.counters[prefix + "p999_us"] = Percentile(wall, 0.999);
  st.counters[prefix + "max_us"] = Percentile(wall, 1.0);
  st.counters[prefix + "cpu_p50_us"] = Percentile(cpu, 0.50);
  st.counters[prefix + "cpu_p99_us"] = Percentile(cpu, 0.99);
}

// BM_Decide: one decision per iteration, state untouched.
void BM_Decide(benchmark::State& st, Case c) {
  Fixture& f = Shared();
  std::unique_ptr<Placer> placer = MakePlacer(c);
  std::vector<int64_t> wall, cpu;
  wall.reserve(1 << 16);
  cpu.reserve(1 << 16);
  int task_index = 0;
  int64_t placed = 0, failures = 0;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t c0 = ThreadCpuNs();
    {
      Placement p = placer->PlaceOne(f.state, task_index++);
      benchmark::DoNotOptimize(p);
      placed += p.placed();
      failures += static_cast<int64_t>(p.failures.size());
    }  // the failure list is freed inside the timed call: a caller pays for it too
    const int64_t c1 = ThreadCpuNs();
    const auto t1 = std::chrono::steady_clock::now();
    wall.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    cpu.push_back(c1 - c0);
  }
  st.counters["decisions/s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  st.counters["placed"] = static_cast<double>(placed) / static_cast<double>(st.iterations());
  st.counters["failures/call"] = static_cast<double>(failures) / static_cast<double>(st.iterations());
  ReportLatency(st, "", wall, cpu);
}

// BM_DecideRate: the same decisions with no per-call clocks (two clock reads per call cost about a microsecond
// here, which matters next to a few-microsecond decision): the throughput figure.
void BM_DecideRate(benchmark::State& st, Case c) {
  Fixture& f = Shared();
  std::unique_ptr<Placer> placer = MakePlacer(c);
  int task_index = 0;
  for (auto _ : st) {
    Placement p = placer->PlaceOne(f.state, task_index++);
    benchmark::DoNotOptimize(p);
  }
  st.counters["decisions/s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
}

// BM_DecideApply: decision + what the server's applier does in memory for a placed task and, later, for its
// stop: build the Task, ReserveTask, SetTaskLastStatus(STOPPED) (releases), EraseStoppedTask. The state ends
// each iteration as it began.
void BM_DecideApply(benchmark::State& st, Case c) {
  Fixture& f = Shared();
  std::unique_ptr<Placer> placer = MakePlacer(c);
  const TaskDemand& demand = placer->request().demand;
  std::vector<int64_t> wall, cpu, apply_wall, apply_cpu;
  for (auto* v : {&wall, &cpu, &apply_wall, &apply_cpu}) v->reserve(1 << 16);
  int task_index = 0;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t c0 = ThreadCpuNs();
    Placement p = placer->PlaceOne(f.state, task_index++);
    const auto t1 = std::chrono::steady_clock::now();
    const int64_t c1 = ThreadCpuNs();
    if (!p.placed()) {
      st.SkipWithError("the half-full cluster had no room for a 4,096 MiB task");
      break;
    }
    Task t = MakeTask(f.ids, f.definitions[0], demand, *p.instance, p.gpu_indices);
    const std::string arn = t.arn;
    Status reserved = f.state.ReserveTask(std::move(t));
    f.state.SetTaskLastStatus(arn, TaskStatus::kStopped);
    Status purged = f.state.EraseStoppedTask(arn);
    const int64_t c2 = ThreadCpuNs();
    const auto t2 = std::chrono::steady_clock::now();
    if (!reserved.ok() || !purged.ok()) {
      st.SkipWithError((reserved.ok() ? purged : reserved).message().c_str());
      break;
    }
    wall.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t2 - t0).count());
    cpu.push_back(c2 - c0);
    apply_wall.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t2 - t1).count());
    apply_cpu.push_back(c2 - c1);
  }
  st.counters["placements/s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  ReportLatency(st, "", wall, cpu);
  ReportLatency(st, "apply_", apply_wall, apply_cpu);
}

// Seconds of CPU time per benchmark: a few thousand samples for the percentiles of the slow cases.
// GPUPACK_BENCH_MIN_TIME overrides it (e.g. 0.5 for a quick look, or under a profiler).
double MinTime() {
  const char* env = std::getenv("GPUPACK_BENCH_MIN_TIME");
  double v = env ? std::atof(env) : 0.0;
  return v > 0 ? v : 3.0;
}
const double kMinTime = MinTime();

BENCHMARK_CAPTURE(BM_Decide, binpack_fragmentation, Case::kBinpackFragmentation)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Decide, random, Case::kRandom)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Decide, binpack_gpuMemory, Case::kBinpackGpuMemory)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Decide, binpack_memory, Case::kBinpackMemory)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Decide, binpack_cpu, Case::kBinpackCpu)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Decide, binpack_memory_spread_zone, Case::kBinpackMemorySpread)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Decide, spread_instanceId, Case::kSpreadInstance)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Decide, memberOf_binpack_gpuMemory, Case::kMemberOf)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_Decide, fits_nowhere, Case::kFitsNowhere)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideRate, binpack_fragmentation, Case::kBinpackFragmentation)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideRate, random, Case::kRandom)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideRate, binpack_gpuMemory, Case::kBinpackGpuMemory)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideRate, binpack_memory, Case::kBinpackMemory)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideRate, binpack_cpu, Case::kBinpackCpu)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideRate, binpack_memory_spread_zone, Case::kBinpackMemorySpread)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideRate, spread_instanceId, Case::kSpreadInstance)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideRate, memberOf_binpack_gpuMemory, Case::kMemberOf)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideRate, fits_nowhere, Case::kFitsNowhere)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideApply, binpack_fragmentation, Case::kBinpackFragmentation)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideApply, random, Case::kRandom)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideApply, binpack_gpuMemory, Case::kBinpackGpuMemory)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideApply, binpack_memory, Case::kBinpackMemory)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);
BENCHMARK_CAPTURE(BM_DecideApply, spread_instanceId, Case::kSpreadInstance)->Unit(benchmark::kMicrosecond)->MinTime(kMinTime);

}  // namespace
}  // namespace gpupack

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Build the half-full cluster before any timing, and say what it is.
  gpupack::Fixture& f = gpupack::Shared();
  const double declared = static_cast<double>(f.gpu_memory_declared) / static_cast<double>(f.gpu_memory_total);
  std::string mix;
  for (size_t k = 0; k < std::size(gpupack::kMix); ++k)
    mix += std::string(k ? ", " : "") + gpupack::kMix[k].family + "=" + std::to_string(f.fill_by_kind[k]);
  benchmark::AddCustomContext("cluster", std::to_string(gpupack::kInstances) + " instances x " +
                                             std::to_string(gpupack::kGpusPerInstance) + " GPUs of 81,559 MiB");
  benchmark::AddCustomContext("fill_tasks", std::to_string(f.fill_tasks) + " (" + mix + ")");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * declared);
  benchmark::AddCustomContext("gpu_memory_declared", buf);
  std::snprintf(buf, sizeof buf, "%.1f s", f.build_seconds);
  benchmark::AddCustomContext("setup_time", buf);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
