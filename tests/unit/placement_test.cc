// Placement as a pure function: tables of (state, request) -> decision, with the arithmetic in comments.
#include "scheduler/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string_view>

#include "scheduler/fragmentation.h"
#include "scheduler/strategies.h"
#include "scheduler/task_builder.h"
#include "scheduler/validation.h"

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
  Instance& Status(InstanceStatus s) { ci_.status = s; return *this; }
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

// Hold reserves `mib` on GPU `gpu` of `instance` as a running shared task would, and returns the task's ARN.
std::string Hold(ClusterState& s, const std::string& instance_arn, size_t gpu, MiB mib, int compute = 100,
                 const std::string& group = "g") {
  static int n = 0;
  Task t;
  t.arn = "task-" + std::to_string(++n);
  t.container_instance_arn = instance_arn;
  t.group = group;
  const ContainerInstance* inst = s.FindInstance(instance_arn);
  t.gpu_reservations = {{inst->gpus[gpu].id, mib, compute, 1, false}};
  EXPECT_TRUE(s.ReserveTask(t).ok());
  return t.arn;
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

// Every status's Name is ECS's spelling and parses back; any other spelling (case included) does not parse.
TEST(ModelStatus, NamesAreEcsSpellingsAndParseBack) {
  const std::pair<TaskStatus, std::string_view> tasks[] = {
      {TaskStatus::kPending, "PENDING"}, {TaskStatus::kRunning, "RUNNING"}, {TaskStatus::kStopped, "STOPPED"}};
  for (const auto& [status, name] : tasks) {
    EXPECT_EQ(Name(status), name);
    EXPECT_EQ(ParseTaskStatus(name), status) << name;
  }
  const std::pair<InstanceStatus, std::string_view> instances[] = {{InstanceStatus::kActive, "ACTIVE"},
                                                                   {InstanceStatus::kDraining, "DRAINING"},
                                                                   {InstanceStatus::kInactive, "INACTIVE"},
                                                                   {InstanceStatus::kRegistering, "REGISTERING"}};
  for (const auto& [status, name] : instances) {
    EXPECT_EQ(Name(status), name);
    EXPECT_EQ(ParseInstanceStatus(name), status) << name;
  }
  const std::pair<LifecycleStatus, std::string_view> lifecycles[] = {{LifecycleStatus::kActive, "ACTIVE"},
                                                                     {LifecycleStatus::kInactive, "INACTIVE"}};
  for (const auto& [status, name] : lifecycles) {
    EXPECT_EQ(Name(status), name);
    EXPECT_EQ(ParseLifecycleStatus(name), status) << name;
  }
  for (std::string_view other : {"", "running", "Running", "RUNNING ", "DELETED", "DEPROVISIONING", "ALL"}) {
    EXPECT_EQ(ParseTaskStatus(other), std::nullopt) << other;
    EXPECT_EQ(ParseInstanceStatus(other), std::nullopt) << other;
    EXPECT_EQ(ParseLifecycleStatus(other), std::nullopt) << other;
  }
  EXPECT_EQ(ParseInstanceStatus("DEREGISTERING"), std::nullopt);  // ECS's, never a status here
  EXPECT_EQ(ParseLifecycleStatus("DRAINING"), std::nullopt);
  // The model's defaults are what a new record is in.
  EXPECT_EQ(Task().last_status, TaskStatus::kPending);
  EXPECT_EQ(Task().desired_status, TaskStatus::kRunning);
  EXPECT_EQ(Container().last_status, TaskStatus::kPending);
  EXPECT_EQ(ContainerInstance().status, InstanceStatus::kActive);
  EXPECT_EQ(Cluster().status, LifecycleStatus::kActive);
  EXPECT_EQ(TaskDefinition().status, LifecycleStatus::kActive);
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
  s.PutInstance(Instance("drain").Gpus(1, 40000).Status(InstanceStatus::kDraining));
  s.PutInstance(Instance("gone").Gpus(1, 40000).Disconnected());
  Placement p = Place(s, Shared(4096));
  ASSERT_FALSE(p.placed());
  ASSERT_EQ(p.failures.size(), 6u);
  EXPECT_EQ(p.failures[0], (PlacementFailure{"arn:i/cpu", "RESOURCE:CPU", "instance has 128 CPU units free; task needs 256"}));
  EXPECT_EQ(p.failures[1].reason, "RESOURCE:MEMORY");
  // 3,000 MiB GPUs can never hold 4,096 MiB, however empty: the detail says so and names the largest GPU.
  const std::string small_gpu = s.FindInstance("arn:i/small")->gpus[0].id;
  EXPECT_EQ(p.failures[2], (PlacementFailure{"arn:i/small", "RESOURCE:GPU_MEMORY",
                                             "task needs 4,096 MiB on one GPU and the largest GPU of this instance, " +
                                                 small_gpu + ", has 3,000 MiB in all: it can never fit here"}));
  EXPECT_EQ(p.failures[3].reason, "RESOURCE:GPU");
  EXPECT_EQ(p.failures[4],
            (PlacementFailure{"arn:i/drain", "STATUS", "container instance is DRAINING; it takes no new tasks"}));
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

// A task handed out with SharedTask() (what a read view holds) never changes: the state copies it before its
// next change, keeps the version a pointer showed until DropSuperseded(), and a task nobody else holds is
// changed in place.
TEST(ClusterStateSharing, ASharedTaskIsCopiedBeforeItChangesAndAnUnsharedOneIsNot) {
  ClusterState s;
  s.PutInstance(Instance("a").Gpus(1, 20000));
  const std::string t1 = Hold(s, "arn:i/a", 0, 1000);

  const Task* before = s.FindTask(t1);
  EXPECT_EQ(s.FindTask(t1), before) << "unshared: changed in place";
  std::shared_ptr<const Task> seen = s.SharedTask(t1);
  EXPECT_EQ(seen.get(), before) << "shared, not copied";

  s.SetTaskLastStatus(t1, TaskStatus::kRunning);
  EXPECT_EQ(seen->last_status, TaskStatus::kPending) << "the shared version never changes";
  EXPECT_EQ(before->last_status, TaskStatus::kPending) << "an older pointer shows the task as it was";
  const Task* after = static_cast<const ClusterState&>(s).FindTask(t1);
  EXPECT_NE(after, before);
  EXPECT_EQ(after->last_status, TaskStatus::kRunning);
  EXPECT_EQ(s.FindInstance("arn:i/a")->running_tasks_count, 1);

  seen.reset();
  s.DropSuperseded();
  s.SetTaskLastStatus(t1, TaskStatus::kStopped);  // nobody else holds it now: no copy
  EXPECT_EQ(static_cast<const ClusterState&>(s).FindTask(t1), after);
  EXPECT_TRUE(after->resources_released);
  EXPECT_EQ(s.FindInstance("arn:i/a")->gpus[0].remaining_memory_mib, 20000);
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

// The scan's shortcuts (every registry kind's index walk: the GPU index for binpack(gpuMemory), the CPU and
// memory indexes for binpack(cpu) and binpack(memory), the group index for spread(instanceId), sampling for
// random alone; skipping instances whose first score cannot beat the best so far, stopping at a strategy's least
// possible score) must decide as a plain evaluation of every instance does. The strategy chains are built from
// the registry, so a new kind is covered without listing it here. Explain evaluates every instance with no
// shortcut: the chosen instance must be the first eligible one with the lexicographically least scores, and a
// refusal must list Explain's reasons and details. Resources come in coarse steps so that many instances tie on
// remaining CPU or memory, and the later strategies have ties to break.
TEST(Placement, ScanShortcutsDecideAsTheFullScan) {
  std::mt19937_64 rng(7);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  // The chains come from the strategy registry: every kind alone in each spelling it compiles (its index walk,
  // if it has one, decides alone), every ordered pair of kinds (the walk's tie groups broken by each other kind),
  // and every ordered triple of distinct kinds. A field prefix is completed with "zone", the attribute the
  // instances below carry.
  std::vector<std::vector<PlacementStrategy>> spellings;  // per kind
  for (const StrategyKind& kind : StrategyRegistry()) {
    std::vector<PlacementStrategy> s;
    for (std::string_view f : kind.fields) s.push_back({std::string(kind.type), std::string(f)});
    for (std::string_view f : kind.aliases) s.push_back({std::string(kind.type), std::string(f)});
    if (!kind.field_prefix.empty()) s.push_back({std::string(kind.type), std::string(kind.field_prefix) + "zone"});
    if (!kind.TakesField()) s.push_back({std::string(kind.type), ""});
    spellings.push_back(std::move(s));
  }
  std::vector<std::vector<PlacementStrategy>> chains;
  const size_t kinds = spellings.size();
  for (size_t k = 0; k < kinds; ++k)
    for (const PlacementStrategy& s : spellings[k]) chains.push_back({s});
  for (size_t k = 0; k < kinds; ++k)
    for (size_t l = 0; l < kinds; ++l) {
      if (l == k) continue;
      chains.push_back({spellings[k].front(), spellings[l].front()});
      for (size_t m = 0; m < kinds; ++m)
        if (m != k && m != l) chains.push_back({spellings[k].front(), spellings[l].front(), spellings[m].front()});
    }
  // Per kind: decisions where it came first and something was placed, so that each index walk had work.
  std::map<const StrategyKind*, int> placed_first;
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
      if (pick(10) == 0) b.Status(pick(2) ? InstanceStatus::kDraining : InstanceStatus::kInactive);
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
      else if (what == 2) s.SetTaskLastStatus(arn, TaskStatus::kStopped);
      else if (what == 3) s.SetTaskLastStatus(arn, TaskStatus::kRunning);
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
      if (pick(2)) again.status = pick(2) ? InstanceStatus::kActive : InstanceStatus::kDraining;
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
        std::string chain_text;
        for (const auto& ps : chain) chain_text += (chain_text.empty() ? "" : ",") + ps.type + ":" + ps.field;
        SCOPED_TRACE("round " + std::to_string(round) + ", strategies " + chain_text + ", group " + r.group +
                     ", gpu kind " + std::to_string(static_cast<int>(d.gpu_kind)) + ", cpu " + std::to_string(d.cpu) +
                     ", memory " + std::to_string(d.memory) + ", " + std::to_string(r.constraints.size()) +
                     " constraint(s), " + std::to_string(r.only_instances.size()) + " listed instance(s)");
        const StrategyKind* first = ResolveStrategyKind(chain.front());
        ASSERT_NE(first, nullptr);
        if (expected) {
          ++placed;
          ++placed_first[first];
          ASSERT_TRUE(p.placed());
          if (first->walk_is_exact) {
            EXPECT_EQ(p.instance->arn, expected->arn);
          } else {  // a sampling walk (random alone): any eligible instance, drawn as the scan would
            auto v = std::find_if(verdicts.begin(), verdicts.end(),
                                  [&](const InstanceVerdict& x) { return x.arn == p.instance->arn; });
            ASSERT_NE(v, verdicts.end());
            EXPECT_TRUE(v->eligible);
          }
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
  EXPECT_GT(placed, 20000);  // both outcomes were exercised (23,295 and 27,585 with this seed, 159 chains)
  EXPECT_GT(refused, 20000);
  // Every kind placed tasks as the first strategy (about 3,800 to 4,000 each with this seed).
  for (const StrategyKind& kind : StrategyRegistry()) EXPECT_GT(placed_first[&kind], 1000) << kind.name;
}


// ---- the strategy registry ------------------------------------------------------------------------------------

// Every kind resolves from each field it accepts (validation and Placer alike), from its aliases only for the
// Placer, and compiles into a Placer; a prefix alone names nothing.
TEST(StrategyRegistry, ResolvesEveryKindFromItsFields) {
  ASSERT_FALSE(StrategyRegistry().empty());
  for (const StrategyKind& kind : StrategyRegistry()) {
    SCOPED_TRACE(std::string(kind.name));
    std::vector<std::string> accepted(kind.fields.begin(), kind.fields.end());
    if (!kind.field_prefix.empty()) accepted.push_back(std::string(kind.field_prefix) + "zone");
    if (!kind.TakesField()) accepted.push_back("");
    for (const std::string& field : accepted) {
      const PlacementStrategy ps{std::string(kind.type), field};
      EXPECT_EQ(FindStrategyKind(ps), kind.planner_only ? nullptr : &kind) << field;
      EXPECT_EQ(FindPlannerStrategyKind(ps), &kind) << field;
      EXPECT_EQ(ResolveStrategyKind(ps), &kind) << field;
      PlacementRequest r;
      r.cluster = "c";
      r.strategies = {ps};
      EXPECT_TRUE(Placer::Create(r).ok()) << field;
    }
    for (std::string_view alias : kind.aliases) {
      const PlacementStrategy ps{std::string(kind.type), std::string(alias)};
      EXPECT_EQ(FindStrategyKind(ps), nullptr) << alias;
      EXPECT_EQ(ResolveStrategyKind(ps), &kind) << alias;
    }
    if (!kind.field_prefix.empty()) {
      EXPECT_EQ(ResolveStrategyKind({std::string(kind.type), std::string(kind.field_prefix)}), nullptr);
    }
    EXPECT_NE(kind.make_scorer, nullptr);
  }
  EXPECT_EQ(ResolveStrategyKind({"binpack", "disk"}), nullptr);
  EXPECT_EQ(ResolveStrategyKind({"random", "cpu"}), nullptr);
  PlacementRequest r;
  r.cluster = "c";
  r.strategies = {{"binpack", "disk"}};
  EXPECT_EQ(Placer::Create(r).status().message(), "unknown placement strategy 'binpack' with field 'disk'");
}

// The list people see (gpupack plan --help, the planner's default list) and the types, in their orders.
TEST(StrategyRegistry, Lists) {
  EXPECT_EQ(StrategySyntaxList(),
            "binpack:gpuMemory, binpack:cpu, binpack:memory, spread:instanceId, spread:attribute:NAME, random, "
            "binpack:fragmentation, fgd");
  EXPECT_EQ(StrategyTypes(), (std::vector<std::string_view>{"binpack", "spread", "random"}));
  EXPECT_EQ(StrategyFieldNames("binpack"), (std::vector<std::string>{"cpu", "memory", "gpuMemory", "fragmentation"}));
  EXPECT_TRUE(StrategyFieldNames("fgd").empty());  // the planner's baseline: RunTask does not know it
  EXPECT_EQ(StrategyFieldNames("spread"), (std::vector<std::string>{"instanceId", "host", "attribute:NAME"}));
  EXPECT_TRUE(StrategyFieldNames("random").empty());
  std::set<int> ranks;
  for (const StrategyKind* kind : ListedStrategies()) EXPECT_TRUE(ranks.insert(kind->list_rank).second) << kind->name;
}

// ---- BuildTask ----------------------------------------------------------------------------------------------

ContainerDefinition Def(std::string name, std::vector<ResourceRequirement> requirements = {}, bool essential = true) {
  ContainerDefinition c;
  c.name = name;
  c.image = "registry.example.com/" + name + ":1";
  c.memory = 512;
  c.cpu = 256;
  c.essential = essential;
  c.resource_requirements = std::move(requirements);
  return c;
}

ResourceRequirement SharedGpu(MiB mib, std::optional<int> compute = std::nullopt) {
  ResourceRequirement r;
  r.type = "GPU";
  r.mps = MpsSharing{mib, compute};
  r.has_sharing_strategy = true;
  return r;
}

ResourceRequirement DedicatedGpus(std::string value) {
  ResourceRequirement r;
  r.type = "GPU";
  r.value = std::move(value);
  return r;
}

ContainerOverride GpuOverride(std::string name, std::string value) {
  ContainerOverride o;
  o.name = std::move(name);
  o.resource_requirements = {DedicatedGpus(std::move(value))};
  return o;
}

struct BuildTaskCase {
  std::string name;
  std::vector<ContainerDefinition> containers;
  TaskOverride overrides;
  std::vector<size_t> gpu_indices;                  // the placement's, on an instance with GPU-a-0 .. GPU-a-3
  std::vector<std::vector<std::string>> gpu_ids;   // expected, per container in definition order
  std::vector<std::optional<MpsSharing>> mps;       // expected, per container
  int gpu_containers;                               // GPU containers with the overrides applied
  std::vector<GpuReservation> reservations;         // expected
};

std::ostream& operator<<(std::ostream& os, const BuildTaskCase& c) { return os << c.name; }

std::vector<BuildTaskCase> BuildTaskCases() {
  TaskOverride add_to_b;
  add_to_b.container_overrides = {GpuOverride("b", "2")};
  TaskOverride fewer_on_a;
  fewer_on_a.container_overrides = {GpuOverride("a", "1")};
  fewer_on_a.memory = "4096";
  return {
      // Shared: every GPU container gets the one chosen GPU and its own nvidiaMps settings; the reservation
      // holds the sum of their memory (4,096 + 2,048) and compute (30 + 100, absent = 100), 2 containers.
      {"SharedTaskOneGpuForAllGpuContainers",
       {Def("web", {SharedGpu(4096, 30)}), Def("sidecar", {}, false), Def("worker", {SharedGpu(2048)})},
       {},
       {2},
       {{"GPU-a-2"}, {}, {"GPU-a-2"}},
       {MpsSharing{4096, 30}, std::nullopt, MpsSharing{2048, std::nullopt}},
       2,
       {{"GPU-a-2", 6144, 130, 2, false}}},
      // Dedicated "2" then "1": the placement's GPUs in its order, two to the first container, one to the next.
      {"DedicatedTwoAndOneInOrder",
       {Def("a", {DedicatedGpus("2")}), Def("b", {DedicatedGpus("1")})},
       {},
       {3, 0, 1},
       {{"GPU-a-3", "GPU-a-0"}, {"GPU-a-1"}},
       {std::nullopt, std::nullopt},
       2,
       {{"GPU-a-3", 0, 0, 1, true}, {"GPU-a-0", 0, 0, 1, true}, {"GPU-a-1", 0, 0, 1, true}}},
      // An override gives container b two dedicated GPUs: a takes the first, b the next two.
      {"OverrideAddsGpusToAContainer",
       {Def("a", {DedicatedGpus("1")}), Def("b")},
       add_to_b,
       {0, 1, 2},
       {{"GPU-a-0"}, {"GPU-a-1", "GPU-a-2"}},
       {std::nullopt, std::nullopt},
       2,
       {{"GPU-a-0", 0, 0, 1, true}, {"GPU-a-1", 0, 0, 1, true}, {"GPU-a-2", 0, 0, 1, true}}},
      // An override replaces a's "2" by "1" (and the task memory): one GPU.
      {"OverrideReplacesACount",
       {Def("a", {DedicatedGpus("2")}), Def("b")},
       fewer_on_a,
       {1},
       {{"GPU-a-1"}, {}},
       {std::nullopt, std::nullopt},
       1,
       {{"GPU-a-1", 0, 0, 1, true}}},
      {"NoGpu", {Def("a"), Def("b", {}, false)}, {}, {}, {{}, {}}, {std::nullopt, std::nullopt}, 0, {}},
  };
}

class BuildTaskTest : public ::testing::TestWithParam<BuildTaskCase> {
 protected:
  static NewTaskFields Fields(const TaskOverride& overrides) {
    NewTaskFields f;
    f.id = "0123";
    f.arn = "arn:task/c/0123";
    f.cluster = "c";
    f.group = "family:fam";
    f.started_by = "me";
    f.client_token = "tok";
    f.created_at = 1'700'000'000'000;
    f.overrides = overrides;
    f.tags = {{"team", "ml"}};
    f.container_arn = [](const std::string& name) { return "arn:container/c/0123/" + name; };
    return f;
  }
  static TaskDefinition Definition(const BuildTaskCase& c) {
    TaskDefinition td;
    td.family = "fam";
    td.revision = 3;
    td.arn = "arn:task-definition/fam:3";
    td.containers = c.containers;
    return td;
  }
  const ContainerInstance instance_ = Instance("a").Gpus(4, 16000);
};

TEST_P(BuildTaskTest, BuildsWhatRunTaskReserves) {
  const BuildTaskCase& c = GetParam();
  const TaskDefinition td = Definition(c);
  const TaskDemand demand = DemandOf(td, c.overrides);
  const Task t = BuildTask(Fields(c.overrides), td, demand, instance_, c.gpu_indices);
  EXPECT_EQ(t.id, "0123");
  EXPECT_EQ(t.arn, "arn:task/c/0123");
  EXPECT_EQ(t.cluster, "c");
  EXPECT_EQ(t.task_definition_arn, td.arn);
  EXPECT_EQ(t.container_instance_arn, instance_.arn);
  EXPECT_EQ(t.group, "family:fam");
  EXPECT_EQ(t.started_by, "me");
  EXPECT_EQ(t.client_token, "tok");
  EXPECT_EQ(t.created_at, 1'700'000'000'000);
  EXPECT_EQ(t.overrides, c.overrides);
  EXPECT_EQ(t.tags, (std::vector<KeyValuePair>{{"team", "ml"}}));
  EXPECT_EQ(t.reserved, (Resources{demand.cpu, demand.memory}));
  EXPECT_EQ(t.gpu_reservations, c.reservations);
  EXPECT_EQ(t.last_status, TaskStatus::kPending);
  EXPECT_EQ(t.desired_status, TaskStatus::kRunning);
  ASSERT_EQ(t.containers.size(), td.containers.size());
  for (size_t i = 0; i < t.containers.size(); ++i) {
    const Container& k = t.containers[i];
    SCOPED_TRACE(td.containers[i].name);
    EXPECT_EQ(k.name, td.containers[i].name);
    EXPECT_EQ(k.container_arn, "arn:container/c/0123/" + td.containers[i].name);
    EXPECT_EQ(k.image, td.containers[i].image);
    EXPECT_EQ(k.essential, td.containers[i].essential);
    EXPECT_EQ(k.last_status, TaskStatus::kPending);
    EXPECT_EQ(k.gpu_ids, c.gpu_ids[i]);
    EXPECT_EQ(k.mps, c.mps[i]);
  }
}

// Without a container ARN function the containers have empty ARNs; the rest is the same.
TEST_P(BuildTaskTest, NoContainerArnFunction) {
  const BuildTaskCase& c = GetParam();
  const TaskDefinition td = Definition(c);
  const TaskDemand demand = DemandOf(td, c.overrides);
  NewTaskFields fields = Fields(c.overrides);
  fields.container_arn = nullptr;
  Task without = BuildTask(std::move(fields), td, demand, instance_, c.gpu_indices);
  Task with = BuildTask(Fields(c.overrides), td, demand, instance_, c.gpu_indices);
  for (Container& k : without.containers) EXPECT_EQ(k.container_arn, "");
  for (Container& k : with.containers) k.container_arn.clear();
  EXPECT_EQ(without, with);
}

// The form without a task definition (the planner's) is the full record less the containers and the task
// definition ARN, given the number of GPU containers.
TEST_P(BuildTaskTest, WithoutDefinitionIsThePlacementPart) {
  const BuildTaskCase& c = GetParam();
  const TaskDefinition td = Definition(c);
  const TaskDemand demand = DemandOf(td, c.overrides);
  Task full = BuildTask(Fields(c.overrides), td, demand, instance_, c.gpu_indices);
  full.containers.clear();
  full.task_definition_arn.clear();
  EXPECT_EQ(BuildTask(Fields(c.overrides), demand, c.gpu_containers, instance_, c.gpu_indices), full);
}

// ---- fragmentation (binpack:fragmentation, fgd) ----------------------------------------------------------------

// A workload of two classes: half the tasks want 500 of a 1000-unit GPU, half one whole GPU.
std::shared_ptr<const TargetWorkload> HalfAndWhole() {
  WorkloadShape half;
  half.cpu = 256;
  half.gpu_kind = GpuKind::kShared;
  half.gpu_memory = 500;
  half.weight = 1;
  WorkloadShape whole;
  whole.cpu = 256;
  whole.gpu_kind = GpuKind::kDedicated;
  whole.gpu_count = 1;
  whole.weight = 1;
  return BuildTargetWorkload({half, whole}, 1.0);
}

// The fragment by hand: GPUs [1000 free, 300 free]. The 500 class fits (GPU 0) and counts the 0.3 that is too
// small for it; the whole-GPU class fits (GPU 0 is IDLE) and counts the partly used GPU's 0.3: 0.5*0.3 + 0.5*0.3.
// A 300-unit task on GPU 1 leaves nothing stranded (-0.3); on GPU 0 it would leave no IDLE GPU, so the whole-GPU
// class counts all 1.0 free (+0.35).
TEST(Fragmentation, ByHand) {
  ClusterState s;
  s.PutInstance(Instance("a").Gpus(2, 1000));
  Hold(s, "arn:i/a", 1, 700);
  const auto w = HalfAndWhole();
  ASSERT_EQ(w->classes.size(), 2u);
  const ContainerInstance& a = *s.FindInstance("arn:i/a");
  EXPECT_NEAR(Fragment(a, s.LoadOf(a), *w), 0.3, 1e-9);
  const FragmentMove m = BestMove(a, s.LoadOf(a), Shared(300), false, *w, FragmentMeasure::kGpupack);
  EXPECT_TRUE(m.fits);
  EXPECT_EQ(m.shared_gpu, 1);
  // delta -0.3: floor(100 * sigmoid(0.3)) = 57; the CPU-aware fragment changes alike (8,192 CPU units hold 32
  // tasks of 256, so CPU strands nothing): 57 again; GPU 0 stays IDLE.
  EXPECT_EQ(m.delta, -57e9 - 57e6 + 1);
  // fgd scores as the paper's simulator, without the tie-break.
  EXPECT_EQ(BestMove(a, s.LoadOf(a), Shared(300), false, *w, FragmentMeasure::kFgd).delta, -57);
  EXPECT_FALSE(BestMove(a, s.LoadOf(a), Shared(400), false, *w, FragmentMeasure::kGpupack).shared_gpu == 1);
  TaskDemand too_much = Shared(300);
  too_much.cpu = 1 << 20;
  EXPECT_FALSE(BestMove(a, s.LoadOf(a), too_much, false, *w, FragmentMeasure::kGpupack).fits);
}

// The CPU-aware fragment by hand: one class of 1-GPU tasks of 256 CPU units. Instance a has 2 IDLE GPUs and 512
// units, room for 2 such tasks: nothing stranded. A CPU-only task of 256 leaves CPU for one: the class could use 1
// of the 2 free GPUs, so the CPU-aware fragment grows by 1 (floor(100 * sigmoid(-1)) = 26), while the plain
// fragment does not move (the class still fits: 50). On b (8,192 units) neither moves. fgd sees a tie and takes a
// (registered first); binpack(fragmentation) takes b, leaving a's CPU to its GPUs.
TEST(Fragmentation, CpuOnlyTaskLeavesTheCpuGpusNeed) {
  ClusterState s;
  s.PutCluster(Cluster{"c", "arn:c", {}, {}, {}, 0, {}, {}});
  s.PutInstance(Instance("a").Gpus(2, 1000).Cpu(512));
  s.PutInstance(Instance("b").Gpus(2, 1000));
  WorkloadShape whole = WorkloadShapeOf(Dedicated(1), {});
  auto w = BuildTargetWorkload({whole}, 1.0);
  s.SetTargetWorkload("c", w);
  TaskDemand cpu_only;
  cpu_only.cpu = 256;
  cpu_only.memory = 512;
  const ContainerInstance& a = *s.FindInstance("arn:i/a");
  EXPECT_EQ(BestMove(a, s.LoadOf(a), cpu_only, false, *w, FragmentMeasure::kFgd).delta, -50);
  // kGpupack for a CPU-only task: -1e9 * 26 + 100 * (free GPU share 2.00 -> 200) + 2 IDLE GPUs.
  EXPECT_EQ(BestMove(a, s.LoadOf(a), cpu_only, false, *w, FragmentMeasure::kGpupack).delta, -26e9 + 20000 + 2);
  Placement p = Place(s, cpu_only, {{"fgd", ""}});
  ASSERT_TRUE(p.placed());
  EXPECT_EQ(p.instance->id, "a");
  p = Place(s, cpu_only, {{"binpack", "fragmentation"}});
  ASSERT_TRUE(p.placed());
  EXPECT_EQ(p.instance->id, "b");
  // A 1-GPU task: both fragments grow alike on a and b (the class keeps one GPU either way), so the IDLE GPUs
  // decide nothing either; the earlier-registered a takes it.
  p = Place(s, Dedicated(1), {{"binpack", "fragmentation"}});
  ASSERT_TRUE(p.placed());
  EXPECT_EQ(p.instance->id, "a");
}

// LearnTarget, binpack(fragmentation)'s learned target: when the classes of 2 or more GPUs hold more than 3% of
// the GPU classes, the classes of 8 or more GPUs are damped by 8^1.25 = 13.454, the rank is that of the fragment
// change plus half the CPU-aware change, and the rule drops its IDLE tie-break for the fragment change in steps of
// 0.001 GPU; reserve_share is the share of 8-GPU demands.
TEST(Fragmentation, LearnTargetDampsEightGpuClasses) {
  const auto shape = [](int gpus, double weight) {
    WorkloadShape s = WorkloadShapeOf(gpus > 0 ? Dedicated(gpus) : Shared(500), {});
    s.weight = weight;
    return s;
  };
  // 1-GPU 17, 8-GPU 2, CPU-only 1 (total 20): the 95% cut keeps 17 + 2 = 19. Multi-GPU share 2/19 > 3%, so the
  // 8-GPU class weighs (2/19) / 13.454 = 0.0078237 before renormalizing: 0.8947368 + 0.0078237 = 0.9025605, so
  // 1-GPU 0.9913317 and 8-GPU 0.0086683.
  WorkloadShape cpu_only = shape(1, 1);
  cpu_only.gpu_kind = GpuKind::kNone;
  cpu_only.gpu_count = 0;
  const auto w = LearnTarget({shape(1, 17), shape(8, 2), cpu_only});
  ASSERT_EQ(w->classes.size(), 2u);
  EXPECT_TRUE(w->multi_gpu);
  EXPECT_NEAR(w->classes[0].shape.weight, 0.9913317, 1e-6);
  EXPECT_NEAR(w->classes[1].shape.weight, 0.0086683, 1e-6);
  EXPECT_NEAR(w->reserve_share, 2.0 / 20, 1e-12);  // of all the demands, the CPU-only one and the cut ones too
  // 1-GPU 50, shared 44, 2-GPU 3, CPU-only 3: the cut keeps 50 + 44 + 3 = 97; 3/97 = 3.1% > 3%, but a 2-GPU class
  // is not damped.
  WorkloadShape cpu_only3 = cpu_only;
  cpu_only3.weight = 3;
  const auto two = LearnTarget({shape(1, 50), shape(0, 44), shape(2, 3), cpu_only3});
  ASSERT_EQ(two->classes.size(), 3u);
  EXPECT_TRUE(two->multi_gpu);
  EXPECT_NEAR(two->classes[2].shape.weight, 3.0 / 97, 1e-9);
  EXPECT_EQ(two->reserve_share, 0);
  // No class of several GPUs: the target as BuildTargetWorkload makes it, and the rule as before.
  const auto single = LearnTarget({shape(1, 3), shape(0, 1)});
  EXPECT_FALSE(single->multi_gpu);
  EXPECT_NEAR(single->classes[0].shape.weight, 0.75, 1e-9);

  // The score with the multi-GPU target, on an instance of 2 IDLE GPUs (8,192 CPU units: CPU strands nothing, so
  // the CPU-aware fragment moves as the plain one). Before: the 8-GPU class cannot use it, 2.0 x 0.0086683 =
  // 0.0173366. A 300-unit shared task on GPU 0: the 1-GPU class still has GPU 1 and counts GPU 0's 0.7 (x
  // 0.9913317 = 0.6939322), the 8-GPU class 1.7 x 0.0086683 = 0.0147361: delta 0.6913317, the CPU-aware one the
  // same, so the rank is floor(100 * sigmoid(-1.5 x 0.6913317)) = 26 (the plain change alone: 33), and
  // round(1000 * delta) = 691. No IDLE term.
  ClusterState s;
  s.PutInstance(Instance("a").Gpus(2, 1000));
  const ContainerInstance& a = *s.FindInstance("arn:i/a");
  EXPECT_EQ(BestMove(a, s.LoadOf(a), Shared(300), false, *w, FragmentMeasure::kGpupack).delta, -26e12 + 691000);
  // A 1-GPU task: the 8-GPU class counts 1.0 x 0.0086683 after, delta -0.0086683: rank 50, round(-8.67) = -9;
  // the old rule would add the 1 IDLE GPU left.
  EXPECT_EQ(BestMove(a, s.LoadOf(a), Dedicated(1), false, *w, FragmentMeasure::kGpupack).delta, -50e12 - 9000);
}

// With a multi-GPU target binpack(fragmentation) keeps the last whole 8-GPU instances for 8-GPU tasks: while the
// whole ones are at most the learned share of 8-GPU demands times the instances of 8 GPUs, a task of fewer GPUs
// takes a whole one only when nothing else fits.
TEST(Fragmentation, KeepsLastWholeInstancesForEightGpuTasks) {
  ClusterState s;
  s.PutCluster(Cluster{"c", "arn:c", {}, {}, {}, 0, {}, {}});
  s.PutInstance(Instance("a").Gpus(8, 1000));  // whole, registered first
  s.PutInstance(Instance("b").Gpus(2, 1000));  // two IDLE GPUs
  for (int k = 0; k < 16; ++k) {               // 8-GPU instances with nothing free
    const std::string id = "full" + std::to_string(k);
    s.PutInstance(Instance(id).Gpus(8, 1000));
    for (size_t g = 0; g < 8; ++g) Hold(s, "arn:i/" + id, g, 1000);
  }
  // 1,024 1-GPU demands, then 2-GPU and 8-GPU ones alternating: a multi-GPU target, about 10% of it 8-GPU demands.
  for (int k = 0; k < 1024; ++k) s.RecordDemand("c", WorkloadShapeOf(Dedicated(1), {}));
  for (int k = 0; k < 128; ++k) {
    s.RecordDemand("c", WorkloadShapeOf(Dedicated(2), {}));
    s.RecordDemand("c", WorkloadShapeOf(Dedicated(8), {}));
  }
  const TargetWorkload* w = s.FragmentsOf("c")->Target();
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->multi_gpu);
  ASSERT_GT(w->reserve_share, 1.0 / 17);  // one whole instance of 17 of 8 GPUs: reserving
  ASSERT_LT(w->reserve_share, 0.2);
  // By the fragment a 1-GPU task would open a (the damped 8-GPU class loses 7 GPUs of a: about 7 x 0.008) rather
  // than b (the 2-GPU class, about 0.1 of the target, loses b); the reserve sends it to b.
  const ContainerInstance& a = *s.FindInstance("arn:i/a");
  const ContainerInstance& b = *s.FindInstance("arn:i/b");
  EXPECT_LT(BestMove(a, s.LoadOf(a), Dedicated(1), false, *w, FragmentMeasure::kGpupack).delta,
            BestMove(b, s.LoadOf(b), Dedicated(1), false, *w, FragmentMeasure::kGpupack).delta);
  Placement p = Place(s, Dedicated(1), {{"binpack", "fragmentation"}});
  ASSERT_TRUE(p.placed());
  EXPECT_EQ(p.instance->id, "b");
  // An 8-GPU task takes a; a task nothing else fits takes a too.
  p = Place(s, Dedicated(8), {{"binpack", "fragmentation"}});
  ASSERT_TRUE(p.placed());
  EXPECT_EQ(p.instance->id, "a");
  p = Place(s, Dedicated(4), {{"binpack", "fragmentation"}});
  ASSERT_TRUE(p.placed());
  EXPECT_EQ(p.instance->id, "a");
}

// binpack(fragmentation) chooses the instance and the GPU together: the shared task fills the partly used GPU of
// instance b rather than opening a GPU of a (registered first, all IDLE), and a whole-GPU task then goes where a
// GPU is still IDLE. With the operator's workload set, and with a learned one.
TEST(Fragmentation, ChoosesInstanceAndGpuTogether) {
  for (bool learned : {false, true}) {
    ClusterState s;
    s.PutCluster(Cluster{"c", "arn:c", {}, {}, {}, 0, {}, {}});
    s.PutInstance(Instance("a").Gpus(2, 1000));
    s.PutInstance(Instance("b").Gpus(2, 1000));
    Hold(s, "arn:i/b", 0, 700);
    if (learned) {
      for (int k = 0; k < 10; ++k) {
        WorkloadShape half = WorkloadShapeOf(Shared(500), {});
        s.RecordDemand("c", half);
        s.RecordDemand("c", WorkloadShapeOf(Dedicated(1), {}));
      }
      ASSERT_NE(s.FragmentsOf("c")->Target(), nullptr);
      EXPECT_EQ(s.FragmentsOf("c")->Target()->classes.size(), 2u);
    } else {
      s.SetTargetWorkload("c", HalfAndWhole());
    }
    Placement p = Place(s, Shared(300), {{"binpack", "fragmentation"}});
    ASSERT_TRUE(p.placed());
    EXPECT_EQ(p.instance->id, "b");
    EXPECT_EQ(p.gpu_indices, std::vector<size_t>{0});
    // Placing changes b's stamp: the cached move is recomputed, and the next task sees the new state.
    const uint64_t before = s.LoadOf("arn:i/b").stamp;
    Hold(s, "arn:i/b", 0, 300);
    EXPECT_NE(s.LoadOf("arn:i/b").stamp, before);
    p = Place(s, Shared(300), {{"binpack", "fragmentation"}});
    ASSERT_TRUE(p.placed());
    // Now b has one full and one IDLE GPU: opening a GPU of a or of b strands 0.5 * 0.7 either way (on b no IDLE
    // GPU is left; on a the opened GPU is partly used). The tie-break keeps whole GPUs whole: b (no IDLE GPU
    // left) before a (one left), so a keeps both GPUs for whole-GPU tasks... of which it can then take two.
    EXPECT_EQ(p.instance->id, "b");
    // Failures keep their reasons when nothing fits.
    p = Place(s, Shared(2000), {{"binpack", "fragmentation"}});
    EXPECT_FALSE(p.placed());
    ASSERT_EQ(p.failures.size(), 2u);
    EXPECT_EQ(p.failures[0].reason, reason::kGpuMemory);
    EXPECT_NE(p.failures[0].detail.find("it can never fit here"), std::string::npos) << p.failures[0].detail;
  }
}

// The operator's workload for every cluster (cluster ""): clusters put before and after take it, and it wins
// over the learned one; a bounded window forgets old demands.
TEST(Fragmentation, OperatorWorkloadForEveryClusterAndBoundedWindow) {
  ClusterState s;
  s.PutCluster(Cluster{"before", "arn:b", {}, {}, {}, 0, {}, {}});
  const auto w = HalfAndWhole();
  s.SetTargetWorkload("", w);
  s.PutCluster(Cluster{"after", "arn:a", {}, {}, {}, 0, {}, {}});
  s.RecordDemand("after", WorkloadShapeOf(Shared(100), {}));
  EXPECT_EQ(s.FragmentsOf("before")->Target(), w.get());
  EXPECT_EQ(s.FragmentsOf("after")->Target(), w.get());
  s.SetTargetWorkload("after", nullptr);  // back to learning
  ASSERT_NE(s.FragmentsOf("after")->Target(), nullptr);
  EXPECT_EQ(s.FragmentsOf("after")->Target()->classes.size(), 1u);
  DemandWindow window(4, 2);
  for (int k = 0; k < 10; ++k) window.Record(WorkloadShapeOf(Shared(100 + k), {}));
  EXPECT_EQ(window.size(), 4u);
  ASSERT_NE(window.Learned(), nullptr);
  for (const auto& c : window.Learned()->classes) EXPECT_GE(c.shape.gpu_memory, 106);
}

// After another strategy, binpack(fragmentation) breaks its ties; RunTask accepts it, not the planner's fgd.
TEST(Fragmentation, AfterAnotherStrategyAndValidation) {
  ClusterState s;
  s.PutCluster(Cluster{"c", "arn:c", {}, {}, {}, 0, {}, {}});
  s.PutInstance(Instance("a").Gpus(2, 1000).Attr("zone", "x"));
  s.PutInstance(Instance("b").Gpus(2, 1000).Attr("zone", "x"));
  Hold(s, "arn:i/b", 1, 500);
  s.SetTargetWorkload("c", HalfAndWhole());
  Placement p = Place(s, Shared(500), {{"spread", "attribute:zone"}, {"binpack", "fragmentation"}});
  ASSERT_TRUE(p.placed());
  EXPECT_EQ(p.instance->id, "b");
  EXPECT_TRUE(ValidatePlacement({}, {{"binpack", "fragmentation"}}).ok());
  EXPECT_TRUE(ValidatePlacement({}, {{"spread", "instanceId"}, {"binpack", "fragmentation"}}).ok());
  EXPECT_FALSE(ValidatePlacement({}, {{"fgd", ""}}).ok());
}

INSTANTIATE_TEST_SUITE_P(Table, BuildTaskTest, ::testing::ValuesIn(BuildTaskCases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace gpupack
