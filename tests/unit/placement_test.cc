// Placement as a pure function: tables of (state, request) -> decision, with the arithmetic in comments.
#include "scheduler/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

namespace gpupack {
namespace {

// Instance builds a container instance: Instance("a").Gpus(2, 22587).Cpu(4096).
class Instance {
 public:
  explicit Instance(std::string id) {
    ci_.id = id;
    ci_.arn = "arn:i/" + id;
    ci_.cluster = "c";
    ci_.registered = ci_.remaining = {8192, 32768};
  }
  Instance& Gpus(int n, MiB mib) {
    for (int i = 0; i < n; ++i) {
      Gpu g;
      g.id = "GPU-" + ci_.id + "-" + std::to_string(ci_.gpus.size());
      g.total_memory_mib = g.remaining_memory_mib = mib;
      ci_.gpus.push_back(g);
    }
    return *this;
  }
  Instance& Cpu(int64_t cpu) { ci_.registered.cpu = ci_.remaining.cpu = cpu; return *this; }
  Instance& Memory(MiB m) { ci_.registered.memory = ci_.remaining.memory = m; return *this; }
  Instance& Attr(std::string n, std::string v) { ci_.attributes.push_back({std::move(n), std::move(v)}); return *this; }
  Instance& Status(std::string s) { ci_.status = std::move(s); return *this; }
  Instance& Disconnected() { ci_.agent_connected = false; return *this; }
  Instance& Impaired() { ci_.impaired = true; return *this; }
  operator ContainerInstance() const { return ci_; }  // NOLINT

 private:
  ContainerInstance ci_;
};

TaskDemand Shared(MiB mib, int compute = 100) {
  TaskDemand d;
  d.cpu = 256;
  d.memory = 512;
  d.gpu_kind = GpuKind::kShared;
  d.gpu_memory = mib;
  d.gpu_compute = compute;
  return d;
}

TaskDemand Dedicated(int n) {
  TaskDemand d;
  d.cpu = 256;
  d.memory = 512;
  d.gpu_kind = GpuKind::kDedicated;
  d.gpu_count = n;
  return d;
}

// Hold reserves `mib` on GPU `gpu` of `instance` as a running shared task would.
void Hold(ClusterState& s, const std::string& instance_arn, size_t gpu, MiB mib, int compute = 100,
          const std::string& group = "g") {
  static int n = 0;
  Task t;
  t.arn = "task-" + std::to_string(++n);
  t.container_instance_arn = instance_arn;
  t.group = group;
  const ContainerInstance* inst = s.FindInstance(instance_arn);
  t.gpu_reservations = {{inst->gpus[gpu].id, mib, compute, 1, false}};
  ASSERT_TRUE(s.ReserveTask(t).ok());
}

Placement Place(const ClusterState& s, TaskDemand d, std::vector<PlacementStrategy> strategies = {},
                std::vector<PlacementConstraint> constraints = {}, bool compute_aware = false) {
  PlacementRequest r;
  r.cluster = "c";
  r.demand = d;
  r.group = "g";
  r.strategies = std::move(strategies);
  r.constraints = std::move(constraints);
  r.compute_aware = compute_aware;
  r.seed = 42;
  auto p = Placer::Create(r);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return (*p)->PlaceOne(s);
}

TEST(Placement, BestFitGpuInsideTheInstance) {
  ClusterState s;
  s.PutInstance(Instance("a").Gpus(3, 20000));
  Hold(s, "arn:i/a", 0, 10000);  // GPU 0: 10,000 free
  Hold(s, "arn:i/a", 1, 15000);  // GPU 1:  5,000 free
  // A 4,000 task fits all three; best fit is GPU 1 (5,000 - 4,000 = 1,000 left), not the idle GPU 2.
  Placement p = Place(s, Shared(4000));
  ASSERT_TRUE(p.placed());
  EXPECT_EQ(p.gpu_indices, std::vector<size_t>{1});
  // Spread first flips it: the emptiest GPU (GPU 2, 20,000 free).
  Placement q = Place(s, Shared(4000), {{"spread", "instanceId"}});
  EXPECT_EQ(q.gpu_indices, std::vector<size_t>{2});
}

TEST(Placement, FailureReasonsPerInstance) {
  ClusterState s;
  s.PutInstance(Instance("cpu").Gpus(1, 40000).Cpu(128));           // 128 < 256 CPU units
  s.PutInstance(Instance("mem").Gpus(1, 40000).Memory(256));         // 256 < 512 MiB
  s.PutInstance(Instance("small").Gpus(2, 3000));                    // 3,000 < 4,096 on each GPU
  s.PutInstance(Instance("nogpu"));                                  // no GPU at all
  s.PutInstance(Instance("drain").Gpus(1, 40000).Status("DRAINING"));
  s.PutInstance(Instance("gone").Gpus(1, 40000).Disconnected());
  Placement p = Place(s, Shared(4096));
  ASSERT_FALSE(p.placed());
  ASSERT_EQ(p.failures.size(), 6u);
  EXPECT_EQ(p.failures[0], (PlacementFailure{"arn:i/cpu", "RESOURCE:CPU", "instance has 128 CPU units free; task needs 256"}));
  EXPECT_EQ(p.failures[1].reason, "RESOURCE:MEMORY");
  EXPECT_EQ(p.failures[2], (PlacementFailure{"arn:i/small", "RESOURCE:GPU_MEMORY",
                                             "largest free block on any GPU is 3,000 MiB; task needs 4,096 MiB on one GPU"}));
  EXPECT_EQ(p.failures[3].reason, "RESOURCE:GPU");
  EXPECT_EQ(p.failures[4].reason, "STATUS");
  EXPECT_EQ(p.failures[5].reason, "AGENT");
}

TEST(Placement, EmptyClusterIsMissing) {
  ClusterState s;
  Placement p = Place(s, Shared(1));
  ASSERT_EQ(p.failures.size(), 1u);
  EXPECT_EQ(p.failures[0].reason, "MISSING");
}

TEST(Placement, DedicatedNeedsIdleGpusOfOneInstance) {
  ClusterState s;
  s.PutInstance(Instance("a").Gpus(2, 20000));
  s.PutInstance(Instance("b").Gpus(2, 20000));
  Hold(s, "arn:i/a", 0, 1000);  // a: GPU 0 in NVIDIA_MPS mode, GPU 1 idle
  Hold(s, "arn:i/b", 1, 1000);  // b: GPU 1 in NVIDIA_MPS mode, GPU 0 idle
  // Two idle GPUs exist in the cluster, but no instance has two: RESOURCE:GPU on both.
  Placement two = Place(s, Dedicated(2));
  ASSERT_FALSE(two.placed());
  EXPECT_EQ(two.failures[0].reason, "RESOURCE:GPU");
  EXPECT_EQ(two.failures[0].detail, "task needs 2 IDLE GPU(s); instance has 1 IDLE, 1 in NVIDIA_MPS mode, 0 DEDICATED");
  Placement one = Place(s, Dedicated(1), {{"binpack", "cpu"}});
  ASSERT_TRUE(one.placed());
  EXPECT_EQ(one.instance->id, "a");  // tie on cpu; the earlier-registered instance wins
  EXPECT_EQ(one.gpu_indices, std::vector<size_t>{1});
}

TEST(Placement, SharedTaskNeverLandsOnDedicatedGpu) {
  ClusterState s;
  s.PutInstance(Instance("a").Gpus(1, 20000));
  Task t;
  t.arn = "ded";
  t.container_instance_arn = "arn:i/a";
  t.gpu_reservations = {{"GPU-a-0", 0, 0, 1, true}};
  ASSERT_TRUE(s.ReserveTask(t).ok());
  Placement p = Place(s, Shared(1));
  ASSERT_FALSE(p.placed());
  EXPECT_EQ(p.failures[0].reason, "RESOURCE:GPU");
  EXPECT_EQ(p.failures[0].detail, "no GPU can be shared: task needs 1 MiB on one GPU (1 GPU(s) DEDICATED)");
  // Released exactly once: the GPU is IDLE again and a second release is a no-op.
  EXPECT_TRUE(s.ReleaseTask("ded"));
  EXPECT_FALSE(s.ReleaseTask("ded"));
  EXPECT_EQ(s.FindInstance("arn:i/a")->gpus[0].mode, GpuMode::kIdle);
  EXPECT_TRUE(Place(s, Shared(1)).placed());
}

TEST(Placement, BinpackGpuMemoryPicksTheFullestGpuInTheCluster) {
  ClusterState s;
  s.PutInstance(Instance("a").Gpus(1, 20000));
  s.PutInstance(Instance("b").Gpus(1, 20000));
  s.PutInstance(Instance("c").Gpus(1, 20000));
  Hold(s, "arn:i/a", 0, 5000);   // 15,000 free -> 11,000 after a 4,000 task
  Hold(s, "arn:i/b", 0, 14000);  //  6,000 free ->  2,000 after
  Hold(s, "arn:i/c", 0, 17000);  //  3,000 free -> does not fit
  Placement p = Place(s, Shared(4000), {{"binpack", "gpuMemory"}});
  ASSERT_TRUE(p.placed());
  EXPECT_EQ(p.instance->id, "b");
}

TEST(Placement, SpreadByAttributeBalancesGroups) {
  ClusterState s;
  s.PutInstance(Instance("a1").Gpus(1, 20000).Attr("zone", "a"));
  s.PutInstance(Instance("a2").Gpus(1, 20000).Attr("zone", "a"));
  s.PutInstance(Instance("b1").Gpus(1, 20000).Attr("zone", "b"));
  Hold(s, "arn:i/a1", 0, 1000);  // zone a holds one task of group g
  Placement p = Place(s, Shared(1000), {{"spread", "attribute:zone"}});
  ASSERT_TRUE(p.placed());
  EXPECT_EQ(p.instance->id, "b1");
}

TEST(Placement, ComputeAwareOnlyWhenAsked) {
  ClusterState s;
  s.PutInstance(Instance("a").Gpus(1, 20000));
  Hold(s, "arn:i/a", 0, 1000, 75);
  EXPECT_TRUE(Place(s, Shared(1000, 50)).placed());                  // 75 + 50 > 100, but compute is ignored
  Placement p = Place(s, Shared(1000, 50), {}, {}, /*compute_aware=*/true);
  ASSERT_FALSE(p.placed());
  EXPECT_EQ(p.failures[0].reason, "RESOURCE:GPU_COMPUTE");
  EXPECT_TRUE(Place(s, Shared(1000, 25), {}, {}, true).placed());  // 75 + 25 = 100 fits exactly
}

TEST(Placement, MemberOfAndDistinctInstance) {
  ClusterState s;
  s.PutInstance(Instance("a").Gpus(1, 20000).Attr("gpu-model", "A10G"));
  s.PutInstance(Instance("b").Gpus(1, 20000).Attr("gpu-model", "H100"));
  Placement p = Place(s, Shared(1000), {}, {{"memberOf", "attribute:gpu-model == H100"}});
  ASSERT_TRUE(p.placed());
  EXPECT_EQ(p.instance->id, "b");
  Hold(s, "arn:i/b", 0, 1000);  // group g now on b
  Placement q = Place(s, Shared(1000), {}, {{"memberOf", "attribute:gpu-model == H100"}, {"distinctInstance", ""}});
  ASSERT_FALSE(q.placed());
  EXPECT_EQ(q.failures[0].reason, "ATTRIBUTE");
  EXPECT_EQ(q.failures[0].detail, "MemberOf placement constraint unsatisfied: attribute:gpu-model == H100");
  EXPECT_EQ(q.failures[1].detail, "DistinctInstance placement constraint unsatisfied: a task of group 'g' is already on this instance");
}

TEST(Placement, RandomIsSeededAndCoversCandidates) {
  ClusterState s;
  for (int i = 0; i < 8; ++i) s.PutInstance(Instance("i" + std::to_string(i)).Gpus(1, 20000));
  PlacementRequest r;
  r.cluster = "c";
  r.demand = Shared(1000);
  r.seed = 1234;
  auto placer = Placer::Create(r);
  ASSERT_TRUE(placer.ok());
  std::set<std::string> seen;
  for (int task = 0; task < 64; ++task) {
    Placement a = (*placer)->PlaceOne(s, task);
    Placement b = (*placer)->PlaceOne(s, task);
    ASSERT_TRUE(a.placed());
    EXPECT_EQ(a.instance, b.instance);  // same (seed, task index) -> same decision
    seen.insert(a.instance->id);
  }
  EXPECT_GE(seen.size(), 6u);  // 64 draws over 8 candidates reach nearly all of them
}

TEST(Placement, RebuildEqualsIncrementalAccounting) {
  ClusterState s;
  s.PutInstance(Instance("a").Gpus(2, 20000));
  Hold(s, "arn:i/a", 0, 3000, 50);
  Hold(s, "arn:i/a", 0, 2000, 25);
  Hold(s, "arn:i/a", 1, 7000);
  ASSERT_TRUE(s.ReleaseTask(s.LoadOf("arn:i/a").task_arns[1]));
  ContainerInstance incremental = *s.FindInstance("arn:i/a");
  s.RebuildReservations();
  EXPECT_EQ(*s.FindInstance("arn:i/a"), incremental);
  EXPECT_EQ(incremental.gpus[0].remaining_memory_mib, 17000);  // 20,000 - 3,000
  EXPECT_EQ(incremental.gpus[0].compute_used_percent, 50);
  EXPECT_EQ(incremental.gpus[1].remaining_memory_mib, 13000);  // 20,000 - 7,000
}

TEST(Placement, ExplainSaysWhyPerGpu) {
  ClusterState s;
  s.PutInstance(Instance("a").Gpus(2, 8000));
  Hold(s, "arn:i/a", 0, 6000);
  PlacementRequest r;
  r.cluster = "c";
  r.demand = Shared(4000);
  auto placer = Placer::Create(r);
  ASSERT_TRUE(placer.ok());
  auto verdicts = (*placer)->Explain(s);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_TRUE(verdicts[0].chosen);
  EXPECT_EQ(verdicts[0].gpus[0].detail, "2,000 MiB free < 4,000 MiB needed");
  EXPECT_EQ(verdicts[0].gpus[1].detail, "4,000 MiB would remain (chosen)");
}

TEST(Placement, GpuOverrideReplacesTheDefinitionsGpuRequirement) {
  TaskDefinition td;
  ContainerDefinition c;
  c.name = "c";
  c.memory = 64;
  ResourceRequirement one;
  one.type = "GPU";
  one.value = "1";
  c.resource_requirements = {one};
  td.containers = {c};
  EXPECT_EQ(DemandOf(td).gpu_count, 1);
  TaskOverride o;
  ContainerOverride co;
  co.name = "c";
  ResourceRequirement three = one;
  three.value = "3";
  co.resource_requirements = {three};
  o.container_overrides = {co};
  TaskDemand d = DemandOf(td, o);
  EXPECT_EQ(d.gpu_kind, GpuKind::kDedicated);
  EXPECT_EQ(d.gpu_count, 3);
  // An override for another container changes nothing here.
  o.container_overrides[0].name = "other";
  EXPECT_EQ(DemandOf(td, o).gpu_count, 1);
  // EffectiveRequirements keeps requirements of other types.
  ResourceRequirement acc;
  acc.type = "InferenceAccelerator";
  acc.value = "dev";
  c.resource_requirements = {one, acc};
  auto eff = EffectiveRequirements(c, &co);
  ASSERT_EQ(eff.size(), 2u);
  EXPECT_EQ(eff[0].type, "InferenceAccelerator");
  EXPECT_EQ(eff[1].value, "3");
}

TEST(Placement, TaskLevelCpuAndMemoryWin) {
  TaskDefinition td;
  td.cpu = "1 vCPU";
  td.memory = "2 GB";
  ContainerDefinition c;
  c.name = "c";
  c.cpu = 100;
  c.memory = 300;
  td.containers = {c};
  TaskDemand d = DemandOf(td);
  EXPECT_EQ(d.cpu, 1024);
  EXPECT_EQ(d.memory, 2048);
  td.cpu.reset();
  td.memory.reset();
  d = DemandOf(td);
  EXPECT_EQ(d.cpu, 100);
  EXPECT_EQ(d.memory, 300);
}

// The cluster's best-fit indexes must hold exactly one entry per instance (per GPU) keyed by its current
// remaining resources: what PlaceOne's index walks trust.
void ExpectIndexesMatch(const ClusterState& s) {
  std::set<HostSlot> cpu, memory;
  std::set<GpuSlot> gpus;
  const auto& entries = s.EntriesOf("c");
  for (size_t pos = 0; pos < entries.size(); ++pos) {
    const ContainerInstance* inst = entries[pos].instance;
    const auto seq = static_cast<uint32_t>(pos);
    cpu.insert({inst->remaining.cpu, seq, inst});
    memory.insert({inst->remaining.memory, seq, inst});
    for (uint32_t g = 0; g < inst->gpus.size(); ++g) gpus.insert({inst->gpus[g].remaining_memory_mib, seq, g, inst});
  }
  auto same_host = [](const std::set<HostSlot>& a, const std::set<HostSlot>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const HostSlot& x, const HostSlot& y) {
      return x.remaining == y.remaining && x.seq == y.seq && x.instance == y.instance;
    });
  };
  EXPECT_TRUE(same_host(s.HostIndex("c", HostResource::kCpu), cpu));
  EXPECT_TRUE(same_host(s.HostIndex("c", HostResource::kMemory), memory));
  EXPECT_TRUE(std::equal(gpus.begin(), gpus.end(), s.GpuIndex("c").begin(), s.GpuIndex("c").end(),
                         [](const GpuSlot& x, const GpuSlot& y) {
                           return x.remaining == y.remaining && x.seq == y.seq && x.gpu == y.gpu &&
                                  x.instance == y.instance;
                         }));
  // The group index (spread(instanceId)): the instances with tasks of the group, by (count, registration order).
  for (const char* group : {"g", "h", "many"}) {
    const uint32_t id = s.GroupId(group);
    std::set<std::pair<int, uint32_t>> by_count;
    for (size_t pos = 0; pos < entries.size(); ++pos) {
      const int count = entries[pos].load->CountOfGroupId(id);
      if (count > 0) by_count.insert({count, static_cast<uint32_t>(pos)});
      EXPECT_EQ(s.GroupIndex("c", id).Has(static_cast<uint32_t>(pos)), count > 0) << group << " at " << pos;
    }
    EXPECT_EQ(s.GroupIndex("c", id).by_count, by_count) << group;
  }
}

// The scan's shortcuts (the GPU index for binpack(gpuMemory), the CPU and memory indexes for binpack(cpu) and
// binpack(memory), the group index for spread(instanceId), skipping instances whose first score cannot beat the
// best so far, stopping at a strategy's least possible score) must decide as a plain evaluation of every
// instance does. Explain evaluates every
// instance with no shortcut: the chosen instance must be the first eligible one with the lexicographically least
// scores, and a refusal must list Explain's reasons and details. Resources come in coarse steps so that many
// instances tie on remaining CPU or memory, and the later strategies have ties to break.
TEST(Placement, ScanShortcutsDecideAsTheFullScan) {
  std::mt19937_64 rng(7);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const std::vector<std::vector<PlacementStrategy>> chains = {
      {{"binpack", "gpuMemory"}},
      {{"binpack", "cpu"}},
      {{"binpack", "memory"}},
      {{"spread", "instanceId"}},
      {{"spread", "attribute:zone"}},
      {{"spread", "attribute:zone"}, {"binpack", "gpuMemory"}},
      {{"binpack", "cpu"}, {"spread", "instanceId"}},
      {{"spread", "instanceId"}, {"binpack", "memory"}},
      {{"binpack", "gpuMemory"}, {"spread", "attribute:zone"}},
      {{"binpack", "gpuMemory"}, {"random", ""}},
      {{"spread", "attribute:zone"}, {"random", ""}},
      {{"binpack", "CPU"}},
      {{"binpack", "MEMORY"}},
      {{"binpack", "memory"}, {"spread", "instanceId"}},
      {{"binpack", "memory"}, {"random", ""}},
      {{"binpack", "memory"}, {"binpack", "cpu"}},
      {{"binpack", "memory"}, {"spread", "attribute:zone"}, {"binpack", "gpuMemory"}},
      {{"binpack", "cpu"}, {"binpack", "gpuMemory"}},
      {{"binpack", "cpu"}, {"spread", "attribute:zone"}},
      {{"binpack", "cpu"}, {"random", ""}},
      {{"binpack", "cpu"}, {"binpack", "memory"}, {"spread", "instanceId"}},
      // spread(instanceId|host) first: the group index walked by ascending count.
      {{"spread", "host"}},
      {{"spread", "instanceId"}, {"random", ""}},
      {{"spread", "instanceId"}, {"binpack", "gpuMemory"}},
      {{"spread", "instanceId"}, {"binpack", "cpu"}},
      {{"spread", "instanceId"}, {"binpack", "memory"}, {"random", ""}},
      {{"spread", "instanceId"}, {"spread", "attribute:zone"}, {"binpack", "cpu"}},
  };
  const std::vector<std::vector<PlacementConstraint>> constraint_sets = {
      {},
      {},
      {{"memberOf", "attribute:zone == a"}},
      {{"memberOf", "attribute:zone != b"}},
      {{"distinctInstance", ""}},
      {{"memberOf", "attribute:zone == c"}, {"distinctInstance", ""}},
  };
  int placed = 0, refused = 0;
  for (int round = 0; round < 40; ++round) {
    ClusterState s;
    const int n = 3 + pick(10);
    for (int i = 0; i < n; ++i) {
      Instance b("i" + std::to_string(i));
      b.Cpu(1024 * (1 + pick(4))).Memory(4096 * (1 + pick(4))).Gpus(pick(5), pick(2) ? 8000 : 16000);
      if (pick(4)) b.Attr("zone", std::string(1, static_cast<char>('a' + pick(3))));
      if (pick(10) == 0) b.Status(pick(2) ? "DRAINING" : "INACTIVE");
      if (pick(12) == 0) b.Disconnected();
      if (pick(12) == 0) b.Impaired();
      s.PutInstance(b);
    }
    ExpectIndexesMatch(s);
    // Load it through ReserveTask (and some releases) as the server does.
    std::vector<std::string> tasks;
    for (int k = 0; k < 3 * n; ++k) {
      const ContainerInstance& inst = *s.InstancesOf("c")[pick(n)];
      Task t;
      t.arn = "t" + std::to_string(k);
      t.container_instance_arn = inst.arn;
      t.group = pick(3) ? "g" : "h";
      t.reserved = {128 * pick(4), 512 * pick(4)};
      if (inst.remaining.cpu < t.reserved.cpu || inst.remaining.memory < t.reserved.memory) continue;
      std::vector<size_t> idle;
      for (size_t g = 0; g < inst.gpus.size(); ++g)
        if (inst.gpus[g].mode == GpuMode::kIdle) idle.push_back(g);
      if (!inst.gpus.empty() && pick(4) == 0 && !idle.empty()) {
        t.gpu_reservations = {{inst.gpus[idle[0]].id, 0, 0, 1, true}};
      } else if (!inst.gpus.empty()) {
        const size_t g = static_cast<size_t>(pick(static_cast<int>(inst.gpus.size())));
        const MiB mib = 1000 * (1 + pick(6));
        if (inst.gpus[g].mode == GpuMode::kDedicated || inst.gpus[g].remaining_memory_mib < mib) continue;
        t.gpu_reservations = {{inst.gpus[g].id, mib, 50, 1, false}};
      }
      ASSERT_TRUE(s.ReserveTask(t).ok());
      tasks.push_back(t.arn);
    }
    for (const auto& arn : tasks) {
      const int what = pick(10);
      if (what < 2) s.ReleaseTask(arn);
      else if (what == 2) s.SetTaskLastStatus(arn, "STOPPED");
      else if (what == 3) s.SetTaskLastStatus(arn, "RUNNING");
    }
    // A group with many tasks (no resources held), skewed towards the first instances; in some rounds one on
    // every instance, so that no instance has count 0 (spread(instanceId) starts at count 1).
    if (pick(2) == 0) {
      const int every = pick(3) == 0 ? 1 : 0;
      for (int i = 0; i < n * every; ++i) {
        Task t;
        t.arn = "all" + std::to_string(i);
        t.container_instance_arn = s.InstancesOf("c")[i]->arn;
        t.group = "many";
        ASSERT_TRUE(s.ReserveTask(t).ok());
      }
      for (int k = 0; k < 8 * n; ++k) {
        Task t;
        t.arn = "many" + std::to_string(k);
        t.container_instance_arn = s.InstancesOf("c")[pick(1 + pick(n))]->arn;
        t.group = "many";
        ASSERT_TRUE(s.ReserveTask(t).ok());
        if (pick(5) == 0) s.ReleaseTask(t.arn);
      }
    }
    ExpectIndexesMatch(s);
    // Re-register an instance (as the control plane does: totals replaced, reservations rebuilt), or change a
    // status or connection in place, or just rebuild.
    if (pick(3) == 0) {
      ContainerInstance again = *s.InstancesOf("c")[pick(n)];
      again.remaining = again.registered;
      if (pick(2)) again.status = pick(2) ? "ACTIVE" : "DRAINING";
      if (pick(2)) again.agent_connected = !again.agent_connected;
      s.PutInstance(again);
      s.RebuildReservations();
    } else if (pick(2) == 0) {
      s.RebuildReservations();
    }
    ExpectIndexesMatch(s);
    auto host = [&](int64_t cpu, MiB memory) { return TaskDemand{cpu, memory, GpuKind::kNone, 0, 0, 0}; };
    const std::vector<TaskDemand> demands = {
        Shared(1000 * (1 + pick(8))), Shared(500), Dedicated(1 + pick(2)), host(256 * (1 + pick(8)), 1024),
        host(128 * pick(32), 512 * pick(32)),  // often exactly an instance's remaining CPU or memory
        host(1024 * 5, 512),                   // more CPU than any instance has: fits nowhere
        host(256, 4096 * 5),                   // more memory than any instance has
        [&] { TaskDemand d = Shared(1000 * (1 + pick(8))); d.cpu = 128 * pick(32); d.memory = 512 * pick(32); return d; }(),
    };
    for (const auto& chain : chains) {
      for (const TaskDemand& d : demands) {
        PlacementRequest r;
        r.cluster = "c";
        r.demand = d;
        const int group = pick(6);
        r.group = group < 2 ? "g" : group < 4 ? "many" : group < 5 ? "h" : "none";  // "none": no task ever
        r.strategies = chain;
        r.constraints = constraint_sets[static_cast<size_t>(pick(static_cast<int>(constraint_sets.size())))];
        if (pick(4) == 0)
          for (int k = 0; k < 3; ++k) r.only_instances.push_back("arn:i/i" + std::to_string(pick(n)));
        r.seed = rng();
        auto placer = Placer::Create(r);
        ASSERT_TRUE(placer.ok());
        const int task_index = pick(100);
        const Placement p = (*placer)->PlaceOne(s, task_index);
        const std::vector<InstanceVerdict> verdicts = (*placer)->Explain(s, task_index);
        const InstanceVerdict* expected = nullptr;
        for (const auto& v : verdicts)
          if (v.eligible && (!expected || v.scores < expected->scores)) expected = &v;
        SCOPED_TRACE("round " + std::to_string(round) + ", strategy " + chain.front().type + ":" +
                     chain.front().field + (chain.size() > 1 ? ",..." : "") + ", group " + r.group + ", gpu kind " +
                     std::to_string(static_cast<int>(d.gpu_kind)) + ", cpu " + std::to_string(d.cpu) +
                     ", memory " + std::to_string(d.memory) + ", " + std::to_string(r.constraints.size()) +
                     " constraint(s), " + std::to_string(r.only_instances.size()) + " listed instance(s)");
        if (expected) {
          ++placed;
          ASSERT_TRUE(p.placed());
          EXPECT_EQ(p.instance->arn, expected->arn);
          EXPECT_EQ(p.gpu_indices.size(), d.gpu_kind == GpuKind::kShared     ? 1u
                                          : d.gpu_kind == GpuKind::kDedicated ? static_cast<size_t>(d.gpu_count)
                                                                              : 0u);
        } else {
          ++refused;
          ASSERT_FALSE(p.placed());
          if (verdicts.empty()) {  // every listed instance is INACTIVE (or the list names none of the cluster's)
            ASSERT_EQ(p.failures.size(), 1u);
            EXPECT_EQ(p.failures[0].reason, reason::kMissing);
            continue;
          }
          ASSERT_EQ(p.failures.size(), verdicts.size());
          for (size_t i = 0; i < verdicts.size(); ++i) {
            EXPECT_EQ(p.failures[i].arn, verdicts[i].arn);
            EXPECT_EQ(p.failures[i].reason, verdicts[i].reason);
            EXPECT_EQ(p.failures[i].detail, verdicts[i].detail);
          }
        }
      }
    }
  }
  EXPECT_GT(placed, 3500);  // both outcomes were exercised (4,016 and 4,624 with this seed)
  EXPECT_GT(refused, 3500);
}

}  // namespace
}  // namespace gpupack
