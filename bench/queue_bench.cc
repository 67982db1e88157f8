// queue_bench: the capacity-provider queue's cost. 100,000 tasks wait in PROVISIONING for a full provider; each
// iteration stops one running task of the provider (SubmitTaskStateChange STOPPED, as an agent's report lands)
// and times that write until it is answered: the stop, the queue's pass that places the next task(s) in the freed
// room, the backfill behind the head, the commit and the published view. Through the ECS router and the applier,
// as the server runs them.
//
// Setup (docs/benchmarks.md, "Capacity-provider queue"): provider "pool" of 64 instances x 8 GPUs of 20,000 MiB,
// full; the waiting tasks are a mix of 2,500, 5,000 and 10,000 MiB (random, seeded) so that the head often does
// not fit what one stop frees and backfill walks the line. Arg 0: instances of another provider in the same
// cluster (the fleet a memberOf scan would have walked; the per-provider index walks only the 64). Arg 1: the
// store, 0 = in memory (the queue's own cost), 1 = SQLite, durable (synchronous=FULL) in $TMPDIR.
// The clock moves 1 s per stop, so heads pass --backfill-reservation-after (5 min) during the run and backfill
// runs with and without a held instance. Counters: p50/p99/max wall time per stop (µs) and tasks placed per stop.
//
// The purge of clientToken records (docs/benchmarks.md section 14, "the purge of clientTokens"): the writer
// purges once a minute of its clock, in the write that finds the minute passed. BM_PurgeExpiredTokens times the
// writer's part (PurgeExpired in a transaction, then Finish: the batch it commits) on a state of N live records
// and M expired ones; BM_WriteThatPurgesTokens times that write through the control plane until it is answered
// (the purge, the commit of its deletions to the in-memory store, the published view).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <time.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include "api/ecs/router.h"
#include "engine/control_plane.h"
#include "engine/core/transaction.h"
#include "engine/operations/operations.h"
#include "storage/group_committer.h"
#include "storage/memory_store.h"
#include "storage/sqlite_store.h"

namespace gpupack::api {
namespace {

constexpr int kPoolInstances = 64;
constexpr int kGpusPerInstance = 8;
constexpr int kWaiting = 100'000;

// StepMs: how far the clock moves per stop: $QUEUE_BENCH_STEP_MS, default 1000 (1 s). The server purges expired
// STOPPED tasks at most once a minute of its clock, so at 1 s per stop one stop in 60 also runs the purge.
EpochMs StepMs() {
  const char* v = std::getenv("QUEUE_BENCH_STEP_MS");
  return v ? std::atoll(v) : 1000;
}

// RetentionMs: how long a STOPPED task is kept: $QUEUE_BENCH_RETENTION_MS, default the server's hour. 2,000 stops
// at 1 s last 33 minutes of the clock, so with the hour no task expires and the purge forgets nothing; a shorter
// retention makes each purge after it forget the tasks stopped a retention before (60 a minute at 1 s a stop).
EpochMs RetentionMs() {
  const char* v = std::getenv("QUEUE_BENCH_RETENTION_MS");
  return v ? std::atoll(v) : ControlPlaneOptions{}.stopped_task_retention_ms;
}

int64_t ProcessCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

class QueueFixture {
 public:
  QueueFixture(int other_instances, bool durable) {
    if (durable) {
      dir_ = std::filesystem::temp_directory_path() / ("gpupack-queue-bench-" + std::to_string(::getpid()));
      std::filesystem::create_directories(dir_);
      auto store = SqliteStore::Open((dir_ / "state.db").string());
      if (!store.ok()) throw std::runtime_error(store.status().message());
      store_ = std::move(store).value();
    } else {
      store_ = std::make_unique<MemoryStore>();
    }
    committer_ = std::make_unique<GroupCommitter>(*store_);
    ControlPlaneOptions o;
    o.seed = 11;
    o.placement.place_on_disconnected = true;  // the benchmark plays the agents
    o.placement.max_provisioning_per_cluster = kWaiting + 1000;
    o.placement.provisioning_timeout_ms = 7 * 24 * 3'600'000;  // no waiting task expires during the run
    o.stopped_task_retention_ms = RetentionMs();
    o.clock = [this] { return now_; };
    cp_ = std::make_unique<ControlPlane>(o, *store_, *committer_);
    if (Status s = cp_->Load(); !s.ok()) throw std::runtime_error(s.message());

    Ok("CreateCluster", Json::object());
    for (const char* p : {"pool", "other"}) Ok("CreateCapacityProvider", {{"name", p}});
    Ok("PutClusterCapacityProviders", {{"cluster", "default"},
                                       {"capacityProviders", Json::array({"pool", "other"})},
                                       {"defaultCapacityProviderStrategy", Json::array()}});
    for (int i = 0; i < other_instances; ++i) Register("other");
    for (int i = 0; i < kPoolInstances; ++i) pool_.push_back(Register("pool"));
    for (int mib : {2500, 5000, 10000}) {
      Json mps = {{"memory", mib}};
      Ok("RegisterTaskDefinition",
         {{"family", "job" + std::to_string(mib)},
          {"containerDefinitions",
           Json::array({{{"name", "c"}, {"image", "busybox"}, {"memory", 64},
                         {"resourceRequirements",
                          Json::array({{{"type", "GPU"}, {"sharingStrategy", {{"nvidiaMps", mps}}}}})}}})}});
    }
    // Fill the pool with 5,000 MiB tasks (4 per GPU), then the line: RunTasks of 10 tasks, 500 in flight at a
    // time (group commit makes the durable setup take seconds, not an fsync per call).
    std::vector<int> requests(kPoolInstances * kGpusPerInstance * 4 / 10 + 1, 5000);
    Pipelined(requests);
    std::mt19937_64 rng(5);
    const int sizes[] = {2500, 5000, 10000};
    requests.clear();
    for (int i = 0; i < kWaiting / 10; ++i) requests.push_back(sizes[rng() % 3]);
    Pipelined(requests);
  }

  ~QueueFixture() {
    cp_.reset();
    committer_.reset();
    store_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // StopOne stops a running task of a random pool instance (chosen outside the timing) and returns how long
  // the write took and how many tasks the pass placed.
  struct Stop {
    int64_t wall_ns = 0, cpu_ns = 0;  // cpu: the whole process's (writer, committer and this thread)
    int placed = 0;
  };
  Stop StopOne(std::mt19937_64& rng) {
    std::string task;
    size_t waiting_before = 0;
    for (int tries = 0; task.empty() && tries < 1000; ++tries) {
      const std::string& inst = pool_[rng() % pool_.size()];
      cp_->applier().Inspect([&](const ClusterState& st) {
        const auto& arns = st.LoadOf(inst).task_arns;
        if (!arns.empty()) task = arns[rng() % arns.size()];
        waiting_before = st.WaitingTotal();
      });
    }
    const int64_t c0 = ProcessCpuNs();
    const auto t0 = std::chrono::steady_clock::now();
    Ok("SubmitTaskStateChange", {{"task", task}, {"status", "STOPPED"}, {"reason", "done"}});
    const auto t1 = std::chrono::steady_clock::now();
    const int64_t c1 = ProcessCpuNs();
    size_t waiting_after = 0;
    cp_->applier().Inspect([&](const ClusterState& st) { waiting_after = st.WaitingTotal(); });
    now_ += StepMs();
    return {std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count(), c1 - c0,
            static_cast<int>(waiting_before - waiting_after)};
  }

  size_t Waiting() {
    size_t n = 0;
    cp_->applier().Inspect([&](const ClusterState& st) { n = st.WaitingTotal(); });
    return n;
  }

 private:
  Json Ok(const std::string& op, const Json& body) {
    std::promise<OperationResult> p;
    Execute(*cp_, op, body, [&](OperationResult r) { p.set_value(std::move(r)); });
    OperationResult r = p.get_future().get();
    if (!r.status.ok()) throw std::runtime_error(op + ": " + r.status.message());
    return r.body;
  }
  std::string Register(const std::string& provider) {
    Json devices = Json::array();
    for (int g = 0; g < kGpusPerInstance; ++g)
      devices.push_back({{"id", "GPU-" + std::to_string(++gpus_)}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", 20000}}}});
    Json resources = Json::array({{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", 1 << 20}},
                                  {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", 1 << 24}}});
    Json body = Ok("RegisterContainerInstance",
                   {{"totalResources", resources},
                    {"platformDevices", devices},
                    {"attributes", Json::array({{{"name", kCapacityProviderAttribute}, {"value", provider}}})}});
    return body["containerInstance"]["containerInstanceArn"];
  }
  // Pipelined: one RunTask of 10 tasks of each size in `mib`, 500 in flight at a time.
  void Pipelined(const std::vector<int>& mib) {
    for (size_t at = 0; at < mib.size(); at += 500) {
      const size_t n = std::min<size_t>(500, mib.size() - at);
      std::vector<std::promise<Status>> done(n);
      for (size_t k = 0; k < n; ++k)
        Execute(*cp_, "RunTask",
                {{"taskDefinition", "job" + std::to_string(mib[at + k])},
                 {"count", 10},
                 {"capacityProviderStrategy", Json::array({{{"capacityProvider", "pool"}, {"weight", 1}}})}},
                [&done, k](OperationResult r) { done[k].set_value(r.status); });
      for (auto& d : done)
        if (Status s = d.get_future().get(); !s.ok()) throw std::runtime_error("RunTask: " + s.message());
    }
  }

  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<GroupCommitter> committer_;
  std::unique_ptr<ControlPlane> cp_;
  std::vector<std::string> pool_;
  EpochMs now_ = 1'700'000'000'000;
  int gpus_ = 0;
};

double Percentile(std::vector<int64_t> ns, double p) {
  if (ns.empty()) return 0;
  std::sort(ns.begin(), ns.end());
  const size_t i = std::min(ns.size() - 1, static_cast<size_t>(p * static_cast<double>(ns.size() - 1) + 0.5));
  return static_cast<double>(ns[i]) / 1000.0;
}

void BM_TaskStopsNextPlaced(benchmark::State& st) {
  QueueFixture f(static_cast<int>(st.range(0)), st.range(1) != 0);
  std::mt19937_64 rng(3);
  std::vector<int64_t> wall, cpu;
  int64_t placed = 0;
  const size_t waiting_at_start = f.Waiting();
  for (auto _ : st) {
    const auto stop = f.StopOne(rng);
    wall.push_back(stop.wall_ns);
    cpu.push_back(stop.cpu_ns);
    placed += stop.placed;
  }
  st.counters["waiting_at_start"] = static_cast<double>(waiting_at_start);
  st.counters["p50_us"] = Percentile(wall, 0.50);
  st.counters["p99_us"] = Percentile(wall, 0.99);
  st.counters["max_us"] = Percentile(wall, 1.0);
  st.counters["cpu_p50_us"] = Percentile(cpu, 0.50);
  st.counters["cpu_p99_us"] = Percentile(cpu, 0.99);
  st.counters["placed/stop"] = static_cast<double>(placed) / static_cast<double>(st.iterations());
}
BENCHMARK(BM_TaskStopsNextPlaced)
    ->ArgsProduct({{0, 10'000}, {0, 1}})
    ->ArgNames({"other_instances", "durable"})
    ->Iterations(2000)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// ---- the purge of clientToken records

constexpr EpochMs kPurgeNow = 1'700'000'000'000;

// TokenRecord: the record RunTask leaves for clientToken number `i` (of `kind`: "live" or "expired") of cluster
// "default", made at `created_at`, naming one task. The tokens are hashed, so the expired ones lie scattered among
// the live ones in (cluster, token) order, as tokens of any age do.
ClientTokenRecord TokenRecord(const std::string& kind, int i, EpochMs created_at) {
  const uint64_t h = std::hash<std::string>{}(kind + std::to_string(i));
  char token[40];
  std::snprintf(token, sizeof token, "%016llx-%s-%d", static_cast<unsigned long long>(h), kind.c_str(), i);
  return {"default", token, "sha256:0123456789abcdef",
          {"arn:aws:ecs:us-east-1:000000000000:task/default/" + std::string(token)}, created_at};
}
// LiveAt: a live record's created_at, spread over the retention's last 23 hours before kPurgeNow.
EpochMs LiveAt(int i) { return kPurgeNow - (static_cast<EpochMs>(i) * 7919) % (kClientTokenRetentionMs - 3'600'000); }
// ExpiredAt: an expired record's created_at, from a minute to a day past the retention.
EpochMs ExpiredAt(int i) { return kPurgeNow - kClientTokenRetentionMs - 60'000 - (static_cast<EpochMs>(i) * 7919) % 86'400'000; }

void Percentiles(benchmark::State& st, const std::vector<int64_t>& ns) {
  st.counters["p50_us"] = Percentile(ns, 0.50);
  st.counters["p99_us"] = Percentile(ns, 0.99);
  st.counters["max_us"] = Percentile(ns, 1.0);
}

// BM_PurgeExpiredTokens: arg 0 live records, arg 1 expired ones, no task. Each iteration puts the expired ones
// back (not timed), then times PurgeExpired and Finish, as the writer runs them, and checks that exactly the
// expired ones went.
void BM_PurgeExpiredTokens(benchmark::State& st) {
  const int live = static_cast<int>(st.range(0)), expired = static_cast<int>(st.range(1));
  ClusterState state;
  for (int i = 0; i < live; ++i) state.PutClientToken(TokenRecord("live", i, LiveAt(i)));
  const ArnContext arn;
  std::mt19937_64 rng(7);
  PlacementCounters counters;
  std::vector<int64_t> ns;
  for (auto _ : st) {
    for (int i = 0; i < expired; ++i) state.PutClientToken(TokenRecord("expired", i, ExpiredAt(i)));
    const auto t0 = std::chrono::steady_clock::now();
    Transaction txn(state, arn, kPurgeNow, rng, counters);
    PurgeExpired(txn, ControlPlaneOptions{}.stopped_task_retention_ms);
    Transaction::Outcome out = txn.Finish();
    const auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    st.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    if (out.batch.deleted_client_tokens().size() != static_cast<size_t>(expired) ||
        state.ClientTokenCount() != static_cast<size_t>(live)) {
      st.SkipWithError("the purge did not forget exactly the expired records");
      break;
    }
  }
  Percentiles(st, ns);
}
BENCHMARK(BM_PurgeExpiredTokens)
    ->Args({100'000, 1'000})
    ->Args({100'000, 0})
    ->Args({10'000, 1'000})
    ->ArgNames({"live", "expired"})
    ->Iterations(200)
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

// BM_WriteThatPurgesTokens: arg 0 live records, arg 1 expired ones, in an in-memory store a fresh control plane
// loads for each iteration (not timed); times its first write (CreateCluster), the one that purges, until it is
// answered: the purge, the commit of its deletions (MemoryStore::Commit) and the published view.
void BM_WriteThatPurgesTokens(benchmark::State& st) {
  const int live = static_cast<int>(st.range(0)), expired = static_cast<int>(st.range(1));
  std::vector<int64_t> ns;
  int round = 0;
  for (auto _ : st) {
    MemoryStore store;
    {
      WriteBatch b;
      Cluster c;
      c.name = "default";
      c.arn = ArnContext{}.ClusterArn("default");
      b.PutCluster(c);
      for (int i = 0; i < live; ++i) b.PutClientToken(TokenRecord("live", i, LiveAt(i)));
      for (int i = 0; i < expired; ++i) b.PutClientToken(TokenRecord("expired", i, ExpiredAt(i)));
      if (Status s = store.Commit(b); !s.ok()) throw std::runtime_error(s.message());
    }
    GroupCommitter committer(store);
    ControlPlaneOptions o;
    o.clock = [] { return kPurgeNow; };
    auto cp = std::make_unique<ControlPlane>(o, store, committer);
    if (Status s = cp->Load(); !s.ok()) throw std::runtime_error(s.message());
    std::promise<OperationResult> p;
    const auto t0 = std::chrono::steady_clock::now();
    Execute(*cp, "CreateCluster", {{"clusterName", "c" + std::to_string(++round)}},
            [&](OperationResult r) { p.set_value(std::move(r)); });
    OperationResult r = p.get_future().get();
    const auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    st.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    size_t left = 0;
    cp->applier().Inspect([&](const ClusterState& s) { left = s.ClientTokenCount(); });
    if (!r.status.ok() || left != static_cast<size_t>(live) ||
        store.Load()->client_tokens.size() != static_cast<size_t>(live)) {
      st.SkipWithError("the write did not purge exactly the expired records");
      break;
    }
  }
  Percentiles(st, ns);
}
BENCHMARK(BM_WriteThatPurgesTokens)
    ->Args({100'000, 1'000})
    ->ArgNames({"live", "expired"})
    ->Iterations(10)
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

}  // namespace
}  // namespace gpupack::api

BENCHMARK_MAIN();
