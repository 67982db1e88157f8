// Storage tests: WriteBatch semantics, the Store contract (SqliteStore, MemoryStore and PostgresStore on a
// private PostgreSQL, tests/unit/private_postgres.h; skipped when its binaries are absent), SqliteStore on real
// files in a temporary directory (round trip of every field, schema versions, corruption, pragmas, open
// errors), GroupCommitter (concurrency, deterministic merging, failure isolation) and a SIGKILL test.
//
// A second, raw SQLite connection plays the part of "someone else touching the file" (a trigger that fails a
// write, a corrupted doc, a newer schema); nothing reaches into storage's internals.
#include <signal.h>
#include <sqlite3.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "storage/group_committer.h"
#include "storage/memory_store.h"
#include "storage/migrate.h"
#include "storage/postgres_store.h"
#include "storage/sqlite_store.h"
#include "storage/store.h"
#include "tests/unit/private_postgres.h"
#include "tests/unit/temp_dir.h"

namespace gpupack {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// ---- Fixture builders: every field set to something other than its default --------------------------------

MpsSharing Mps(MiB memory, std::optional<int> compute) { return MpsSharing{memory, compute}; }

Cluster FullCluster(const std::string& name) {
  Cluster c;
  c.name = name;
  c.arn = "arn:aws:ecs:us-east-1:000000000000:cluster/" + name;
  c.status = LifecycleStatus::kInactive;
  c.settings.compute_aware_placement = true;
  c.settings.manual_instance_acceptance = true;
  c.tags = {{"team", "ml"}, {"cost-center", "42"}};
  c.created_at = 1'700'000'000'123;
  c.capacity_providers = {"team-a", "team-b"};
  c.default_strategy = {{"team-a", 3, 1}, {"team-b", 1, 0}};
  return c;
}

TaskDefinition FullTaskDefinition(const std::string& family, int revision) {
  TaskDefinition td;
  td.family = family;
  td.revision = revision;
  td.arn = "arn:aws:ecs:us-east-1:000000000000:task-definition/" + family + ":" + std::to_string(revision);
  td.status = LifecycleStatus::kInactive;
  ContainerDefinition shared;
  shared.name = "infer";
  shared.image = "registry/infer:1.2";
  shared.command = {"python", "serve.py", "--port=8080"};
  shared.entry_point = {"/bin/sh", "-c"};
  shared.environment = {{"MODEL", "llama"}, {"EMPTY", ""}};
  shared.cpu = 512;
  shared.memory = 4096;
  shared.memory_reservation = 2048;
  shared.essential = false;
  ResourceRequirement gpu;
  gpu.type = "GPU";
  gpu.mps = Mps(4096, 50);
  gpu.has_sharing_strategy = true;
  ResourceRequirement accel;
  accel.type = "InferenceAccelerator";
  accel.value = "device-1";
  shared.resource_requirements = {gpu, accel};
  shared.extra_json = R"({"portMappings":[{"containerPort":8080}],"logConfiguration":{"logDriver":"json-file"}})";
  ContainerDefinition side;
  side.name = "sidecar";
  side.image = "busybox";
  side.resource_requirements = {ResourceRequirement{"GPU", std::nullopt, Mps(1024, std::nullopt), true}};
  td.containers = {shared, side};
  td.cpu = "1 vCPU";
  td.memory = "8 GB";
  td.network_mode = "host";
  td.requires_compatibilities = {"EC2"};
  td.placement_constraints = {{"memberOf", "attribute:ecs.instance-type =~ g5.*"}};
  td.tags = {{"owner", "ci"}};
  td.registered_at = 1'700'000'000'000;
  td.deregistered_at = 1'700'000'999'000;
  td.extra_json = R"({"taskRoleArn":"arn:aws:iam::000000000000:role/r","volumes":[]})";
  return td;
}

ContainerInstance FullInstance(const std::string& arn) {
  ContainerInstance i;
  i.arn = arn;
  i.id = arn.substr(arn.rfind('/') + 1);
  i.cluster = "gpu";
  i.ec2_instance_id = "i-0123456789abcdef0";
  i.instance_type = "g5.12xlarge";
  i.status = InstanceStatus::kDraining;
  i.status_reason = "operator drain";
  i.agent_connected = false;
  i.impaired = true;
  i.agent_version = "gpupack-agent/0.1.0";
  i.registered = {49152, 196608};
  i.remaining = {40960, 180224};
  i.gpus = {Gpu{"GPU-aaaa", 22587, 18491, GpuMode::kMps, 2, 75, true},
            Gpu{"GPU-bbbb", 22587, 0, GpuMode::kDedicated, 1, 0, false},
            Gpu{"GPU-cccc", 22587, 22587, GpuMode::kIdle, 0, 0, false}};
  i.attributes = {{"ecs.capability.gpu-sharing-mps", std::nullopt}, {"ecs.instance-type", "g5.12xlarge"}};
  i.running_tasks_count = 3;
  i.pending_tasks_count = 1;
  i.registered_at = 1'700'000'000'500;
  i.registered_by = "AKIDAGENT0000000002";
  i.version = 17;
  return i;
}

Task FullTask(const std::string& arn) {
  Task t;
  t.arn = arn;
  t.id = arn.substr(arn.rfind('/') + 1);
  t.cluster = "gpu";
  t.task_definition_arn = "arn:aws:ecs:us-east-1:000000000000:task-definition/infer:3";
  t.container_instance_arn = "arn:aws:ecs:us-east-1:000000000000:container-instance/gpu/abc";
  t.group = "family:infer";
  t.started_by = "ci-job-7";
  t.launch_type = "EXTERNAL";
  t.last_status = TaskStatus::kStopped;
  t.desired_status = TaskStatus::kStopped;
  t.stop_code = stop_codes::kEssentialContainerExited;
  t.stopped_reason = "Essential container in task exited";
  t.created_at = 1'700'000'000'001;
  t.started_at = 1'700'000'000'002;
  t.stopping_at = 1'700'000'000'003;
  t.stopped_at = 1'700'000'000'004;
  t.capacity_provider_name = "team-a";
  t.wait_seq = 12;
  t.priority = -3;
  t.placement_constraints = {{"memberOf", "attribute:zone == a"}};
  t.placement_strategy = {{"binpack", "gpuMemory"}};
  Container c;
  c.name = "infer";
  c.container_arn = arn + "/container/infer";
  c.image = "registry/infer:1.2";
  c.last_status = TaskStatus::kStopped;
  c.exit_code = 0;  // present and zero: must not come back as absent
  c.reason = "exited";
  c.essential = false;
  c.gpu_ids = {"GPU-aaaa"};
  c.mps = Mps(4096, 50);
  Container d = c;
  d.name = "sidecar";
  d.exit_code = -9;
  d.mps = Mps(1024, std::nullopt);
  t.containers = {c, d};
  ContainerOverride o;
  o.name = "infer";
  o.command = std::vector<std::string>{};  // present but empty: differs from absent
  o.environment = {{"BATCH", "8"}};
  o.cpu = 256;
  o.memory = 1024;
  o.memory_reservation = 512;
  o.resource_requirements = {ResourceRequirement{"GPU", "1", std::nullopt, false}};
  t.overrides.container_overrides = {o};
  t.overrides.cpu = "2048";
  t.overrides.memory = "4096";
  t.tags = {{"k", "v"}};
  t.reserved = {1024, 8192};
  t.gpu_reservations = {GpuReservation{"GPU-aaaa", 5120, 100, 2, false},
                        GpuReservation{"GPU-bbbb", 0, 0, 1, true}};
  t.resources_released = true;
  t.client_token = "token-1";
  t.version = 9;
  return t;
}

ClientTokenRecord FullToken(const std::string& cluster, const std::string& token) {
  return ClientTokenRecord{cluster, token, "sha256:abcdef", {"arn:t/1", "arn:t/2"}, 1'700'000'000'777};
}

// A small task for bulk tests.
Task SmallTask(const std::string& arn, int64_t version = 1) {
  Task t;
  t.arn = arn;
  t.id = arn;
  t.cluster = "c";
  t.version = version;
  return t;
}

// ---- Field-count tripwire -----------------------------------------------------------------------------------
// Counts an aggregate's fields: T{f, f, ...} compiles with at most as many initializers as T has fields. When a
// model struct gains a field, its count here fails: serialize it in storage/serialize.cc (both directions),
// set it in the Full* builder above, then update the count.

template <typename T>
inline constexpr bool kIsOptional = false;
template <typename T>
inline constexpr bool kIsOptional<std::optional<T>> = true;

struct AnyField {
  template <typename T>
    requires(!kIsOptional<T>)
  operator T() const;  // never defined: only used in unevaluated requires-expressions
};

template <typename T, typename... Fields>
constexpr size_t FieldCount() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; }) {
    return FieldCount<T, Fields..., AnyField>();
  } else {
    return sizeof...(Fields);
  }
}

TEST(SerializeTripwireTest, EveryModelFieldIsAccountedFor) {
  EXPECT_EQ(FieldCount<MpsSharing>(), 2u);
  EXPECT_EQ(FieldCount<ResourceRequirement>(), 4u);
  EXPECT_EQ(FieldCount<KeyValuePair>(), 2u);
  EXPECT_EQ(FieldCount<ContainerDefinition>(), 11u);
  EXPECT_EQ(FieldCount<PlacementConstraint>(), 2u);
  EXPECT_EQ(FieldCount<TaskDefinition>(), 14u);
  EXPECT_EQ(FieldCount<ClusterSettings>(), 2u);
  EXPECT_EQ(FieldCount<Cluster>(), 8u);
  EXPECT_EQ(FieldCount<Gpu>(), 7u);
  EXPECT_EQ(FieldCount<Resources>(), 2u);
  EXPECT_EQ(FieldCount<Attribute>(), 2u);
  EXPECT_EQ(FieldCount<ContainerInstance>(), 19u);
  EXPECT_EQ(FieldCount<ContainerOverride>(), 7u);
  EXPECT_EQ(FieldCount<TaskOverride>(), 3u);
  EXPECT_EQ(FieldCount<Container>(), 9u);
  EXPECT_EQ(FieldCount<GpuReservation>(), 5u);
  EXPECT_EQ(FieldCount<Task>(), 29u);
  EXPECT_EQ(FieldCount<ClientTokenRecord>(), 6u);  // write_seq is not stored (the server's, per run)
  EXPECT_EQ(FieldCount<CapacityProviderStrategyItem>(), 3u);
  EXPECT_EQ(FieldCount<CapacityProvider>(), 7u);
}

// ---- Helpers --------------------------------------------------------------------------------------------

using testing_support::TempDir;

// RawDb is a second, plain SQLite connection to a store's file.
class RawDb {
 public:
  explicit RawDb(const std::string& path) { EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK); }
  ~RawDb() { sqlite3_close(db_); }
  void Exec(const std::string& sql) {
    char* err = nullptr;
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
    EXPECT_EQ(rc, SQLITE_OK) << sql << ": " << (err != nullptr ? err : "");
    sqlite3_free(err);
  }
  std::string Text(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(db_);
    std::string out;
    if (sqlite3_step(s) == SQLITE_ROW) {
      const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
      out = p != nullptr ? p : "";
    }
    sqlite3_finalize(s);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

std::unique_ptr<SqliteStore> OpenOrDie(const std::string& path) {
  auto store = SqliteStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status().message();
  if (!store.ok()) std::abort();
  return std::move(store).value();
}

Snapshot LoadOrDie(Store& store) {
  auto snap = store.Load();
  EXPECT_TRUE(snap.ok()) << snap.status().message();
  if (!snap.ok()) return {};
  return std::move(snap).value();
}

std::vector<std::string> TaskArns(const Snapshot& s) {
  std::vector<std::string> out;
  for (const auto& t : s.tasks) out.push_back(t.arn);
  return out;
}

std::vector<std::string> InstanceArns(const Snapshot& s) {
  std::vector<std::string> out;
  for (const auto& i : s.instances) out.push_back(i.arn);
  return out;
}

// ---- WriteBatch -----------------------------------------------------------------------------------------------

TEST(WriteBatchTest, LaterPutOfAKeyWinsAndKeepsTheFirstPosition) {
  WriteBatch b;
  b.PutTask(SmallTask("z", 1));
  b.PutTask(SmallTask("a", 1));
  b.PutTask(SmallTask("z", 2));  // replaces z in place
  ASSERT_EQ(b.tasks().size(), 2u);
  EXPECT_EQ(b.tasks()[0].arn, "z");
  EXPECT_EQ(b.tasks()[0].version, 2);
  EXPECT_EQ(b.tasks()[1].arn, "a");
  EXPECT_EQ(b.size(), 2u);
}

TEST(WriteBatchTest, PutsAndDeletesOfOneKeyCancelInOrder) {
  WriteBatch b;
  EXPECT_TRUE(b.empty());
  b.PutTask(SmallTask("t1"));
  b.DeleteTask("t1");  // delete after put: only the delete remains
  EXPECT_TRUE(b.tasks().empty());
  EXPECT_EQ(b.deleted_tasks(), std::set<std::string>{"t1"});
  b.PutClientToken(FullToken("c", "tok"));
  b.DeleteClientToken("c", "tok");
  b.PutClientToken(FullToken("c", "tok"));  // put after delete: only the put remains
  EXPECT_EQ(b.client_tokens().size(), 1u);
  EXPECT_TRUE(b.deleted_client_tokens().empty());
  b.PutInstance(FullInstance("arn:ci/x"));
  b.DeleteInstance("arn:ci/x");
  EXPECT_TRUE(b.instances().empty());
  EXPECT_EQ(b.deleted_instances().size(), 1u);
  // 1 deleted task + 1 token put + 1 deleted instance
  EXPECT_EQ(b.size(), 3u);
  EXPECT_FALSE(b.empty());
}

TEST(WriteBatchTest, AppendAppliesTheOtherBatchAfterThisOne) {
  WriteBatch first;
  first.PutCluster(FullCluster("a"));
  first.PutTask(SmallTask("t1", 1));
  first.PutTask(SmallTask("t2", 1));
  first.DeleteTask("t3");
  first.PutTaskDefinition(FullTaskDefinition("infer", 1));

  WriteBatch second;
  second.PutTask(SmallTask("t1", 2));  // later put wins
  second.DeleteTask("t2");             // cancels first's put
  second.PutTask(SmallTask("t3", 5));  // cancels first's delete
  second.PutTask(SmallTask("t0", 1));  // new key goes last
  second.PutTaskDefinition(FullTaskDefinition("infer", 2));

  first.Append(std::move(second));
  EXPECT_TRUE(second.empty());  // NOLINT(bugprone-use-after-move): Append leaves it empty, by contract
  ASSERT_EQ(first.tasks().size(), 3u);
  EXPECT_EQ(first.tasks()[0].arn, "t1");
  EXPECT_EQ(first.tasks()[0].version, 2);
  EXPECT_EQ(first.tasks()[1].arn, "t3");
  EXPECT_EQ(first.tasks()[2].arn, "t0");
  EXPECT_EQ(first.deleted_tasks(), std::set<std::string>{"t2"});
  EXPECT_EQ(first.task_definitions().size(), 2u);  // (infer, 1) and (infer, 2) are different keys
  EXPECT_EQ(first.clusters().size(), 1u);

  WriteBatch empty;
  empty.Append(std::move(first));
  EXPECT_EQ(empty.tasks().size(), 3u);
}

// ---- The Store contract, for both implementations -----------------------------------------------------------

// SharedPostgres: one private PostgreSQL for every test of this binary (started on first use, stopped at
// exit); each test gets a database of its own. Null when it cannot run (*why says why).
testing::PrivatePostgres* SharedPostgres(std::string* why) {
  static std::string error;
  static std::unique_ptr<testing::PrivatePostgres> pg = [] {
    auto p = std::make_unique<testing::PrivatePostgres>(testing::PrivatePostgres::Options{.shared = true});
    if (!p->Start(&error)) p.reset();
    return p;
  }();
  *why = error;
  return pg.get();
}

class StoreContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      store_ = OpenOrDie(dir_.File("contract.db"));
    } else if (GetParam() == "postgres") {
      std::string why;
      testing::PrivatePostgres* pg = SharedPostgres(&why);
      if (pg == nullptr && !testing::PrivatePostgres().Available()) GTEST_SKIP() << why;
      ASSERT_NE(pg, nullptr) << why;
      const std::string uri = pg->CreateDatabase();
      ASSERT_FALSE(uri.empty());
      auto store = PostgresStore::Open(uri);
      ASSERT_TRUE(store.ok()) << store.status().message();
      store_ = std::move(store).value();
    } else {
      store_ = std::make_unique<MemoryStore>();
    }
  }
  TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreContractTest, EmptyStoreLoadsEmpty) {
  Snapshot s = LoadOrDie(*store_);
  EXPECT_TRUE(s.clusters.empty() && s.task_definitions.empty() && s.instances.empty() && s.tasks.empty() &&
              s.client_tokens.empty());
  EXPECT_TRUE(store_->Commit(WriteBatch()).ok());
}

// TwoOfEachKind: two full records of each kind but services, every kind put out of its key order.
WriteBatch TwoOfEachKind() {
  WriteBatch b;
  b.PutCluster(FullCluster("b"));
  b.PutCluster(FullCluster("a"));
  b.PutTaskDefinition(FullTaskDefinition("infer", 10));
  b.PutTaskDefinition(FullTaskDefinition("infer", 9));
  b.PutInstance(FullInstance("arn:ci/gpu/zz"));
  b.PutInstance(FullInstance("arn:ci/gpu/aa"));
  b.PutTask(FullTask("arn:task/gpu/t2"));
  b.PutTask(FullTask("arn:task/gpu/t1"));
  b.PutClientToken(FullToken("gpu", "z"));
  b.PutClientToken(FullToken("gpu", "a"));
  return b;
}

TEST_P(StoreContractTest, RoundTripsEveryFieldInMemoryOrder) {
  ASSERT_TRUE(store_->Commit(TwoOfEachKind()).ok());

  Snapshot s = LoadOrDie(*store_);
  // Sorted by key: clusters, task definitions (family, then revision 9 < 10 numerically), tokens.
  EXPECT_EQ(s.clusters, (std::vector<Cluster>{FullCluster("a"), FullCluster("b")}));
  EXPECT_EQ(s.task_definitions,
            (std::vector<TaskDefinition>{FullTaskDefinition("infer", 9), FullTaskDefinition("infer", 10)}));
  EXPECT_EQ(s.client_tokens, (std::vector<ClientTokenRecord>{FullToken("gpu", "a"), FullToken("gpu", "z")}));
  // First-stored order: instances and tasks as they were put, not sorted.
  EXPECT_EQ(s.instances,
            (std::vector<ContainerInstance>{FullInstance("arn:ci/gpu/zz"), FullInstance("arn:ci/gpu/aa")}));
  EXPECT_EQ(s.tasks, (std::vector<Task>{FullTask("arn:task/gpu/t2"), FullTask("arn:task/gpu/t1")}));
}

// Capacity providers come back by name; a PROVISIONING task (no instance, nothing held) as it was stored.
TEST_P(StoreContractTest, RoundTripsCapacityProvidersAndWaitingTasks) {
  auto provider = [](const std::string& name, CapacityProviderStatus status) {
    CapacityProvider p;
    p.name = name;
    p.arn = "arn:aws:ecs:us-east-1:000000000000:capacity-provider/" + name;
    p.status = status;
    p.update_status = status == CapacityProviderStatus::kInactive ? "DELETE_COMPLETE" : "";
    p.tags = {{"team", name}};
    p.created_at = 1'700'000'000'500;
    p.version = 4;
    return p;
  };
  Task waiting = FullTask("arn:task/gpu/w1");
  waiting.last_status = TaskStatus::kProvisioning;
  waiting.desired_status = TaskStatus::kRunning;
  waiting.container_instance_arn.clear();
  waiting.gpu_reservations.clear();
  waiting.resources_released = true;
  WriteBatch b;
  b.PutCapacityProvider(provider("zeta", CapacityProviderStatus::kActive));
  b.PutCapacityProvider(provider("alpha", CapacityProviderStatus::kInactive));
  b.PutTask(waiting);
  ASSERT_TRUE(store_->Commit(b).ok());
  Snapshot s = LoadOrDie(*store_);
  EXPECT_EQ(s.capacity_providers, (std::vector<CapacityProvider>{provider("alpha", CapacityProviderStatus::kInactive),
                                                                 provider("zeta", CapacityProviderStatus::kActive)}));
  EXPECT_EQ(s.tasks, (std::vector<Task>{waiting}));
}

TEST_P(StoreContractTest, UpsertOverwritesAndKeepsFirstStoredPosition) {
  WriteBatch b1;
  b1.PutInstance(FullInstance("arn:ci/c/3"));
  b1.PutInstance(FullInstance("arn:ci/c/1"));
  b1.PutInstance(FullInstance("arn:ci/c/2"));
  b1.PutCluster(FullCluster("gpu"));
  ASSERT_TRUE(store_->Commit(b1).ok());

  WriteBatch b2;
  ContainerInstance updated = FullInstance("arn:ci/c/3");
  updated.version = 18;
  updated.gpus[0].remaining_memory_mib = 1;
  b2.PutInstance(updated);
  Cluster renamed = FullCluster("gpu");
  renamed.status = LifecycleStatus::kActive;
  b2.PutCluster(renamed);
  ASSERT_TRUE(store_->Commit(b2).ok());

  Snapshot s = LoadOrDie(*store_);
  EXPECT_EQ(InstanceArns(s), (std::vector<std::string>{"arn:ci/c/3", "arn:ci/c/1", "arn:ci/c/2"}));
  EXPECT_EQ(s.instances[0], updated);
  ASSERT_EQ(s.clusters.size(), 1u);
  EXPECT_EQ(s.clusters[0], renamed);
}

TEST_P(StoreContractTest, DeletesRemoveTasksTokensAndInstances) {
  WriteBatch b1;
  for (const char* arn : {"t1", "t2", "t3"}) b1.PutTask(SmallTask(arn));
  b1.PutClientToken(FullToken("c", "keep"));
  b1.PutClientToken(FullToken("c", "drop"));
  b1.PutInstance(FullInstance("arn:ci/c/keep"));
  b1.PutInstance(FullInstance("arn:ci/c/drop"));
  ASSERT_TRUE(store_->Commit(b1).ok());

  WriteBatch b2;
  b2.DeleteTask("t2");
  b2.DeleteTask("never-existed");  // deleting a missing key is not an error
  b2.DeleteClientToken("c", "drop");
  b2.DeleteInstance("arn:ci/c/drop");
  ASSERT_TRUE(store_->Commit(b2).ok());

  Snapshot s = LoadOrDie(*store_);
  EXPECT_EQ(TaskArns(s), (std::vector<std::string>{"t1", "t3"}));
  ASSERT_EQ(s.client_tokens.size(), 1u);
  EXPECT_EQ(s.client_tokens[0].token, "keep");
  EXPECT_EQ(InstanceArns(s), std::vector<std::string>{"arn:ci/c/keep"});
}

TEST_P(StoreContractTest, LoadStreamingHandsOverLoadsTasksInOrderAndTheRestAsLoadDoes) {
  WriteBatch b;
  b.PutCluster(FullCluster("b"));
  b.PutCluster(FullCluster("a"));
  b.PutTaskDefinition(FullTaskDefinition("infer", 2));
  b.PutInstance(FullInstance("arn:ci/gpu/zz"));
  b.PutInstance(FullInstance("arn:ci/gpu/aa"));
  b.PutTask(FullTask("arn:task/gpu/t2"));
  b.PutTask(SmallTask("arn:task/gpu/t9"));
  b.PutTask(FullTask("arn:task/gpu/t1"));
  b.PutClientToken(FullToken("gpu", "z"));
  b.PutClientToken(FullToken("gpu", "a"));
  ASSERT_TRUE(store_->Commit(b).ok());

  const Snapshot whole = LoadOrDie(*store_);
  std::vector<Task> streamed;
  auto snap = store_->LoadStreaming([&](Task&& t) {
    streamed.push_back(std::move(t));
    return Status::Ok();
  });
  ASSERT_TRUE(snap.ok()) << snap.status().message();
  EXPECT_TRUE(snap->tasks.empty());
  EXPECT_EQ(streamed, whole.tasks);
  ASSERT_EQ(streamed.size(), 3u);
  EXPECT_EQ(snap->clusters, whole.clusters);
  EXPECT_EQ(snap->task_definitions, whole.task_definitions);
  EXPECT_EQ(snap->instances, whole.instances);
  EXPECT_EQ(snap->client_tokens, whole.client_tokens);

  // A sink's error stops the load, comes back as is, and leaves the store usable.
  int calls = 0;
  auto stopped = store_->LoadStreaming([&](Task&&) {
    ++calls;
    return Status::Client("enough");
  });
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.status().code(), ErrorCode::kClient);
  EXPECT_EQ(stopped.status().message(), "enough");
  EXPECT_EQ(calls, 1);
  WriteBatch after;
  after.PutCluster(FullCluster("after"));
  EXPECT_TRUE(store_->Commit(after).ok());
  EXPECT_EQ(LoadOrDie(*store_).clusters.size(), 3u);
}

TEST_P(StoreContractTest, ABatchThatReplacesEverythingLeavesOnlyItsOwnRecords) {
  WriteBatch before;
  before.PutCluster(FullCluster("old"));
  before.PutTaskDefinition(FullTaskDefinition("old", 1));
  before.PutInstance(FullInstance("arn:ci/gpu/old"));
  before.PutTask(SmallTask("arn:t/old"));
  before.PutClientToken(FullToken("old", "t"));
  Service service;
  service.arn = "arn:svc/old";
  service.name = "old";
  service.cluster = "old";
  before.PutService(service);
  ASSERT_TRUE(store_->Commit(before).ok());

  WriteBatch replace;
  replace.ReplaceEverything();
  replace.PutTask(SmallTask("arn:t/new"));
  EXPECT_FALSE(replace.empty());
  ASSERT_TRUE(store_->Commit(replace).ok());
  Snapshot s = LoadOrDie(*store_);
  EXPECT_EQ(CountsOf(s), (StateCounts{.tasks = 1})) << CountsOf(s).Describe();
  EXPECT_EQ(TaskArns(s), std::vector<std::string>{"arn:t/new"});
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContractTest, ::testing::Values("sqlite", "memory", "postgres"),
                         [](const auto& info) { return info.param; });

// ---- Migration between stores (`gpupack migrate`, storage/migrate.h) ------------------------------------------

// MigrateTest: SQLite files in a temp dir and databases on the run's PostgreSQL.
class MigrateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    pg_ = SharedPostgres(&why);
    if (pg_ == nullptr && !testing::PrivatePostgres().Available()) GTEST_SKIP() << why;
    ASSERT_NE(pg_, nullptr) << why;
  }
  std::unique_ptr<PostgresStore> NewPostgres() {
    auto store = PostgresStore::Open(pg_->CreateDatabase());
    EXPECT_TRUE(store.ok()) << store.status().message();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  // Everything: two records of every kind, services included, each kind put out of its key order.
  static WriteBatch Everything() {
    WriteBatch b = TwoOfEachKind();
    b.PutCluster(FullCluster("gpu"));  // the cluster the instances and tasks belong to
    for (const char* name : {"web", "api"}) {
      Service v;
      v.arn = std::string("arn:aws:ecs:us-east-1:000000000000:service/gpu/") + name;
      v.name = name;
      v.cluster = "gpu";
      v.task_definition_arn = "arn:aws:ecs:us-east-1:000000000000:task-definition/infer:10";
      v.desired_count = 3;
      v.events = {ServiceEvent{"e1", 1'700'000'000'000, "(service web) has reached a steady state."}};
      v.version = 4;
      b.PutService(v);
    }
    return b;
  }

  testing::PrivatePostgres* pg_ = nullptr;
  TempDir dir_;
};

TEST_F(MigrateTest, SqliteToPostgresAndBackMovesEveryRecordOfEveryKindInOrder) {
  auto lite = OpenOrDie(dir_.File("gpupack.db"));
  ASSERT_TRUE(lite->Commit(Everything()).ok());
  const Snapshot want = LoadOrDie(*lite);
  auto pg = NewPostgres();
  ASSERT_TRUE(pg);

  auto copied = MigrateState(*lite, *pg, {});
  ASSERT_TRUE(copied.ok()) << copied.status().message();
  EXPECT_EQ(*copied, (StateCounts{3, 2, 2, 2, 2, 2})) << copied->Describe();
  const Snapshot there = LoadOrDie(*pg);
  EXPECT_EQ(there.clusters, want.clusters);
  EXPECT_EQ(there.task_definitions, want.task_definitions);
  EXPECT_EQ(there.instances, want.instances);  // first-stored order: zz before aa
  EXPECT_EQ(there.tasks, want.tasks);
  EXPECT_EQ(there.client_tokens, want.client_tokens);
  EXPECT_EQ(there.services, want.services);

  // And back into a new SQLite file: the same records again (the way back, and a restore of a backup).
  auto back = OpenOrDie(dir_.File("back.db"));
  ASSERT_TRUE(MigrateState(*pg, *back, {}).ok());
  const Snapshot again = LoadOrDie(*back);
  EXPECT_EQ(again.instances, want.instances);
  EXPECT_EQ(again.tasks, want.tasks);
  EXPECT_EQ(again.services, want.services);
  EXPECT_EQ(CountsOf(again), CountsOf(want));
}

TEST_F(MigrateTest, ATargetWithRecordsIsRefusedUntouchedUnlessReplacing) {
  auto lite = OpenOrDie(dir_.File("gpupack.db"));
  ASSERT_TRUE(lite->Commit(Everything()).ok());
  auto pg = NewPostgres();
  ASSERT_TRUE(pg);
  WriteBatch other;
  other.PutCluster(FullCluster("elsewhere"));
  other.PutTask(SmallTask("arn:t/elsewhere"));
  ASSERT_TRUE(pg->Commit(other).ok());

  auto refused = MigrateState(*lite, *pg, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kConflict);
  EXPECT_THAT(refused.status().message(), HasSubstr("already holds 1 cluster"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--force"));
  EXPECT_EQ(TaskArns(LoadOrDie(*pg)), std::vector<std::string>{"arn:t/elsewhere"});  // untouched

  auto replaced = MigrateState(*lite, *pg, MigrateOptions{.replace = true});
  ASSERT_TRUE(replaced.ok()) << replaced.status().message();
  const Snapshot s = LoadOrDie(*pg);
  EXPECT_EQ(CountsOf(s), (StateCounts{3, 2, 2, 2, 2, 2}));
  EXPECT_EQ(TaskArns(s), (std::vector<std::string>{"arn:task/gpu/t2", "arn:task/gpu/t1"}));
}

TEST_F(MigrateTest, APostgresTargetLedByARunningServerIsRefused) {
  auto lite = OpenOrDie(dir_.File("gpupack.db"));
  ASSERT_TRUE(lite->Commit(Everything()).ok());
  auto pg = NewPostgres();
  ASSERT_TRUE(pg);
  ASSERT_TRUE(pg->Query("UPDATE gpupack_leader_lease SET holder = 'a', advertise = 'http://10.0.0.1:8080', "
                        "epoch = 1, expires_at = clock_timestamp() + interval '1 hour'")
                  .ok());
  auto refused = MigrateState(*lite, *pg, MigrateOptions{.replace = true});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("http://10.0.0.1:8080"));
  EXPECT_TRUE(CountsOf(LoadOrDie(*pg)).empty());
}

TEST(MigrateStateTest, ASourceWhoseRecordsContradictEachOtherIsRefused) {
  MemoryStore from, to;
  WriteBatch b;
  ContainerInstance i = FullInstance("arn:ci/gpu/one");
  i.gpus.push_back(i.gpus.front());  // the same GPU twice
  b.PutInstance(i);
  ASSERT_TRUE(from.Commit(b).ok());
  auto refused = MigrateState(from, to, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("contradict"));
  EXPECT_EQ(to.commit_count(), 0u);
}

// ---- SqliteStore ------------------------------------------------------------------------------------------

class SqliteStoreTest : public ::testing::Test {
 protected:
  std::string Path() const { return dir_.File("gpupack.db"); }
  TempDir dir_;
};

TEST_F(SqliteStoreTest, EveryFieldOfEveryKindSurvivesReopen) {
  WriteBatch b;
  b.PutCluster(FullCluster("gpu"));
  b.PutTaskDefinition(FullTaskDefinition("infer", 3));
  b.PutInstance(FullInstance("arn:aws:ecs:us-east-1:000000000000:container-instance/gpu/abc"));
  b.PutTask(FullTask("arn:aws:ecs:us-east-1:000000000000:task/gpu/0123"));
  b.PutClientToken(FullToken("gpu", "token-1"));
  {
    auto store = OpenOrDie(Path());
    Status s = store->Commit(b);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  auto store = OpenOrDie(Path());
  Snapshot s = LoadOrDie(*store);
  EXPECT_EQ(s.clusters, b.clusters());
  EXPECT_EQ(s.task_definitions, b.task_definitions());
  EXPECT_EQ(s.instances, b.instances());
  EXPECT_EQ(s.tasks, b.tasks());
  EXPECT_EQ(s.client_tokens, b.client_tokens());
}

TEST_F(SqliteStoreTest, DefaultsAbsentOptionalsAndAwkwardValuesRoundTrip) {
  // Defaults (absent optionals, empty strings) must not come back as present zeros, and odd strings and
  // extreme integers must come back byte for byte.
  Task plain;
  plain.arn = "plain";
  Task odd = FullTask("odd");
  odd.stopped_reason = std::string("quote\" backslash\\ newline\n tab\t nul\0 end", 40);
  odd.group = "ユニコード 🚀 é";
  odd.created_at = std::numeric_limits<int64_t>::max();
  odd.started_at = std::numeric_limits<int64_t>::min();
  odd.version = -1;
  odd.containers[0].exit_code = std::numeric_limits<int>::min();
  TaskDefinition td = FullTaskDefinition("f", std::numeric_limits<int>::max());
  td.extra_json = "not even json {";  // opaque: stored as a string, never parsed
  TaskDefinition bare;
  bare.family = "bare";
  bare.revision = 1;
  WriteBatch b;
  b.PutTask(plain);
  b.PutTask(odd);
  b.PutTaskDefinition(td);
  b.PutTaskDefinition(bare);
  ContainerInstance bare_instance;
  bare_instance.arn = "bare-instance";
  b.PutInstance(bare_instance);
  Cluster bare_cluster;
  bare_cluster.name = "bare-cluster";
  b.PutCluster(bare_cluster);
  ClientTokenRecord empty_token;
  empty_token.cluster = "c";
  b.PutClientToken(empty_token);
  {
    auto store = OpenOrDie(Path());
    ASSERT_TRUE(store->Commit(b).ok());
  }
  auto store = OpenOrDie(Path());
  Snapshot s = LoadOrDie(*store);
  EXPECT_EQ(s.tasks, b.tasks());
  EXPECT_EQ(s.task_definitions, (std::vector<TaskDefinition>{bare, td}));
  EXPECT_EQ(s.instances, b.instances());
  EXPECT_EQ(s.clusters, b.clusters());
  EXPECT_EQ(s.client_tokens, b.client_tokens());
}

TEST_F(SqliteStoreTest, FailedBatchAppliesNothingAndNamesTheFailure) {
  auto store = OpenOrDie(Path());
  WriteBatch before;
  before.PutTask(SmallTask("existing", 1));
  before.PutCluster(FullCluster("gpu"));
  ASSERT_TRUE(store->Commit(before).ok());

  // Someone else's trigger refuses one row in the middle of the next batch.
  RawDb raw(Path());
  raw.Exec(
      "CREATE TRIGGER poison BEFORE INSERT ON tasks WHEN NEW.arn = 'poison' "
      "BEGIN SELECT RAISE(ABORT, 'poisoned row refused'); END");

  WriteBatch b;
  Cluster changed = FullCluster("gpu");
  changed.status = LifecycleStatus::kActive;
  b.PutCluster(changed);                // written before the failure
  b.PutTask(SmallTask("existing", 2));  // written before the failure
  b.PutTask(SmallTask("poison"));       // fails
  b.PutTask(SmallTask("after"));        // never reached
  b.DeleteTask("existing-other");
  Status s = store->Commit(b);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kServer);
  EXPECT_THAT(s.message(), HasSubstr("tasks 'poison'"));
  EXPECT_THAT(s.message(), HasSubstr("poisoned row refused"));
  EXPECT_THAT(s.message(), HasSubstr("nothing of the batch was applied"));

  Snapshot snap = LoadOrDie(*store);
  EXPECT_EQ(TaskArns(snap), std::vector<std::string>{"existing"});
  EXPECT_EQ(snap.tasks[0].version, 1);
  ASSERT_EQ(snap.clusters.size(), 1u);
  EXPECT_EQ(snap.clusters[0], FullCluster("gpu"));

  // The store is usable afterwards: its cached statements were reset.
  WriteBatch next;
  next.PutTask(SmallTask("existing", 3));
  ASSERT_TRUE(store->Commit(next).ok());
  EXPECT_EQ(LoadOrDie(*store).tasks[0].version, 3);
}

TEST_F(SqliteStoreTest, SchemaVersionIsRecorded) {
  auto store = OpenOrDie(Path());
  auto settings = store->ReadSettings();
  ASSERT_TRUE(settings.ok());
  EXPECT_EQ(settings->schema_version, SqliteStore::LatestSchemaVersion());
  EXPECT_GE(SqliteStore::LatestSchemaVersion(), 1);
  RawDb raw(Path());
  EXPECT_EQ(raw.Text("SELECT MAX(version) FROM schema_version"),
            std::to_string(SqliteStore::LatestSchemaVersion()));
  EXPECT_EQ(raw.Text("SELECT COUNT(*) FROM schema_version"), std::to_string(SqliteStore::LatestSchemaVersion()));
  EXPECT_NE(raw.Text("SELECT applied_at FROM schema_version WHERE version = 1"), "0");

  // Reopening an up-to-date file migrates nothing.
  store.reset();
  store = OpenOrDie(Path());
  EXPECT_EQ(raw.Text("SELECT COUNT(*) FROM schema_version"), std::to_string(SqliteStore::LatestSchemaVersion()));
}

// One database, one server: while a store holds the file, a second Open (here in the same process; the
// integration test `two servers on one --db` does it with two processes) is refused with a message naming the
// holder, and changes nothing; the first keeps committing, and once it is closed the file opens again.
TEST_F(SqliteStoreTest, ASecondStoreOnTheSameFileIsRefusedWhileTheFirstServes) {
  auto first = OpenOrDie(Path());
  WriteBatch one;
  one.PutCluster(FullCluster("one"));
  ASSERT_TRUE(first->Commit(one).ok());

  auto second = SqliteStore::Open(Path());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), ErrorCode::kConflict);
  EXPECT_THAT(second.status().message(), HasSubstr("cannot open database '" + Path() + "'"));
  EXPECT_THAT(second.status().message(),
              HasSubstr("in use by another gpupack server (pid " + std::to_string(::getpid()) + ")"));
  EXPECT_THAT(second.status().message(), HasSubstr(SqliteStore::LockPath(Path())));

  WriteBatch two;
  two.PutCluster(FullCluster("two"));
  EXPECT_TRUE(first->Commit(two).ok());
  EXPECT_EQ(LoadOrDie(*first).clusters.size(), 2u);

  first.reset();
  auto third = SqliteStore::Open(Path());
  ASSERT_TRUE(third.ok()) << third.status().message();
  EXPECT_EQ(LoadOrDie(**third).clusters.size(), 2u);
}

// What a damaged WAL loses. The files are copied while the store is open after 20 commits (one task each), which
// is what a crash leaves: the commits are in the WAL, not yet in the database file. SQLite checksums the WAL's
// frames in a chain and, when it opens the file, replays them up to the first frame that does not verify,
// dropping that commit and every later one without an error. So Open reads the WAL first: when commits were
// written whole after a damaged frame, it refuses, naming the frame and the offset where a cut keeps what SQLite
// would replay; after that cut the store loads exactly the commits before the damage. A WAL cut short (here in
// half, mid-frame) looks like a crash in the middle of a commit and cannot be told apart: it opens, and what is
// left is again a prefix of the commits (never a later commit without an earlier one).
TEST_F(SqliteStoreTest, ADamagedWalIsRefusedAndACutOneKeepsAPrefixOfTheCommits) {
  constexpr int kCommits = 20;
  const std::string crash = dir_.File("crash.db");
  {
    auto store = OpenOrDie(Path());
    for (int i = 0; i < kCommits; ++i) {
      WriteBatch b;
      b.PutTask(SmallTask("task-" + std::to_string(i)));
      ASSERT_TRUE(store->Commit(b).ok());
    }
    fs::copy_file(Path(), crash);
    fs::copy_file(Path() + "-wal", crash + "-wal");
  }
  const auto wal_size = static_cast<int64_t>(fs::file_size(crash + "-wal"));
  std::string header(32, '\0');
  std::ifstream(crash + "-wal", std::ios::binary).read(header.data(), 32);
  const auto byte = [&](int i) { return static_cast<int64_t>(static_cast<unsigned char>(header[static_cast<size_t>(i)])); };
  const int64_t page_size = byte(8) << 24 | byte(9) << 16 | byte(10) << 8 | byte(11);
  const int64_t frame = 24 + page_size;
  const int64_t frames = (wal_size - 32) / frame;
  ASSERT_GE(frames, kCommits) << "every commit is at least one frame";

  // Loaded: how many tasks survived, which must be task-0 .. task-(n-1).
  auto survivors = [&](const std::string& db) {
    auto store = SqliteStore::Open(db);
    EXPECT_TRUE(store.ok()) << store.status().message();
    if (!store.ok()) return -1;
    auto snap = (*store)->Load();
    EXPECT_TRUE(snap.ok()) << snap.status().message();
    if (!snap.ok()) return -1;
    std::set<std::string> arns;
    for (const auto& t : snap->tasks) arns.insert(t.arn);
    const int n = static_cast<int>(arns.size());
    for (int i = 0; i < n; ++i) EXPECT_EQ(arns.count("task-" + std::to_string(i)), 1u) << "not a prefix";
    return n;
  };
  auto fresh_copy = [&](const std::string& name) {
    const std::string db = dir_.File(name);
    fs::copy_file(crash, db);
    fs::copy_file(crash + "-wal", db + "-wal");
    return db;
  };
  EXPECT_EQ(survivors(fresh_copy("intact.db")), kCommits);

  // One flipped byte in the page of the middle frame: refused, the WAL left as it was.
  const std::string flipped = fresh_copy("flipped.db");
  const int64_t bad = frames / 2;
  {
    std::fstream f(flipped + "-wal", std::ios::binary | std::ios::in | std::ios::out);
    const int64_t at = 32 + bad * frame + 24 + 100;
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);
    f.seekp(at);
    f.write(&c, 1);
  }
  auto refused = SqliteStore::Open(flipped);
  ASSERT_FALSE(refused.ok()) << "a damaged WAL was opened";
  EXPECT_EQ(refused.status().code(), ErrorCode::kServer);
  const std::string cut_at = std::to_string(32 + bad * frame);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("write-ahead log '" + flipped + "-wal' is damaged: frame " + std::to_string(bad) + " of " +
                        std::to_string(frames) + " does not verify"));
  EXPECT_THAT(refused.status().message(), HasSubstr("truncate -s " + cut_at));
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(flipped + "-wal")), wal_size);
  // Cut where the message says: what is left is what SQLite would have replayed.
  fs::resize_file(flipped + "-wal", std::stoull(cut_at));
  const int after_flip = survivors(flipped);
  EXPECT_GE(after_flip, 1);
  EXPECT_LT(after_flip, kCommits);

  // The WAL cut in half (mid-frame).
  const std::string cut = fresh_copy("cut.db");
  fs::resize_file(cut + "-wal", static_cast<uintmax_t>(wal_size / 2));
  const int after_cut = survivors(cut);
  EXPECT_GE(after_cut, 1);
  EXPECT_LT(after_cut, kCommits);
  std::printf("WAL of %lld frames of %lld bytes for %d commits: a flipped byte in frame %lld refused; cut there, "
              "%d commits were left; the WAL cut at %lld of %lld bytes left %d\n",
              static_cast<long long>(frames), static_cast<long long>(frame), kCommits, static_cast<long long>(bad),
              after_flip, static_cast<long long>(wal_size / 2), static_cast<long long>(wal_size), after_cut);
}

// SqliteStore::Backup (`gpupack backup`) while a writer keeps committing through the open store: the copy is
// the state of one commit (each commit's task and token together, a prefix of the commits), holds at least
// what was committed before it started, opens and loads; an existing target or a missing source is refused and
// leaves nothing behind.
TEST_F(SqliteStoreTest, BackupCopiesOneCommitsStateWhileCommitsGoOn) {
  auto store = OpenOrDie(Path());
  auto commit = [&](int i) {
    WriteBatch b;
    Task t = SmallTask("task-" + std::to_string(i));
    t.resources_released = true;  // holds nothing: no instance needed for the copy's invariant check
    b.PutTask(t);
    b.PutClientToken(FullToken("c", "tok-" + std::to_string(i)));
    return store->Commit(b).ok();
  };
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(commit(i));
  std::atomic<bool> stop{false};
  std::atomic<int> committed{50};
  std::thread writer([&] {
    for (int i = 50; !stop.load() && i < 20000; ++i)
      if (commit(i)) committed.store(i + 1);
  });
  const int before = committed.load();
  size_t tasks = 0;
  const std::string copy = dir_.File("copy.db");
  const Status backed_up = SqliteStore::Backup(Path(), copy, &tasks);
  const int after = committed.load();
  stop.store(true);
  writer.join();
  ASSERT_TRUE(backed_up.ok()) << backed_up.message();
  EXPECT_GE(tasks, static_cast<size_t>(before));
  EXPECT_LE(tasks, static_cast<size_t>(after) + 1);
  EXPECT_FALSE(fs::exists(SqliteStore::LockPath(copy)));
  {
    auto copied = OpenOrDie(copy);
    Snapshot snap = LoadOrDie(*copied);
    ASSERT_EQ(snap.tasks.size(), tasks);
    ASSERT_EQ(snap.client_tokens.size(), tasks);
    std::set<std::string> arns;
    for (const auto& t : snap.tasks) arns.insert(t.arn);
    for (size_t i = 0; i < tasks; ++i) EXPECT_EQ(arns.count("task-" + std::to_string(i)), 1u) << i;
  }
  std::printf("backup while committing: %zu tasks copied (%d committed before it started, %d when it ended)\n",
              tasks, before, after);

  const Status exists = SqliteStore::Backup(Path(), copy);
  EXPECT_FALSE(exists.ok());
  EXPECT_THAT(exists.message(), HasSubstr("exists"));
  const Status missing = SqliteStore::Backup(dir_.File("missing.db"), dir_.File("never.db"));
  EXPECT_FALSE(missing.ok());
  EXPECT_FALSE(fs::exists(dir_.File("missing.db")));
  EXPECT_FALSE(fs::exists(dir_.File("never.db")));
}

TEST_F(SqliteStoreTest, NewerSchemaIsRefused) {
  OpenOrDie(Path()).reset();
  {
    RawDb raw(Path());
    raw.Exec("INSERT INTO schema_version (version, applied_at) VALUES (" +
             std::to_string(SqliteStore::LatestSchemaVersion() + 1) + ", 0)");
  }
  auto store = SqliteStore::Open(Path());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), ErrorCode::kServer);
  EXPECT_THAT(store.status().message(), HasSubstr("newer than this gpupack binary understands"));
  EXPECT_THAT(store.status().message(), HasSubstr(Path()));
}

TEST_F(SqliteStoreTest, CorruptDocIsReportedWithTableAndKey) {
  {
    auto store = OpenOrDie(Path());
    WriteBatch b;
    b.PutTask(FullTask("arn:task/gpu/broken"));
    b.PutInstance(FullInstance("arn:ci/gpu/typed"));
    b.PutClientToken(FullToken("gpu", "swapped"));
    ASSERT_TRUE(store->Commit(b).ok());
  }
  struct Case {
    const char* corrupt_sql;
    const char* want_table_and_key;
    const char* want_detail;
  };
  const Case cases[] = {
      // Truncated JSON.
      {"UPDATE tasks SET doc = '{\"arn\": \"arn:task/gpu/bro' WHERE arn = 'arn:task/gpu/broken'",
       "table tasks, key 'arn:task/gpu/broken'", "not valid JSON"},
      // Valid JSON, wrong type deep inside: the field path is named.
      {"UPDATE container_instances SET doc = json_set(doc, '$.gpus[1].total_memory_mib', 'lots') "
       "WHERE arn = 'arn:ci/gpu/typed'",
       "table container_instances, key 'arn:ci/gpu/typed'", "gpus[1].total_memory_mib"},
      // A doc that belongs to another key.
      {"UPDATE client_tokens SET doc = json_set(doc, '$.token', 'other') WHERE token = 'swapped'",
       "table client_tokens, key ('gpu', 'swapped')", "holds key ('gpu', 'other')"},
      // Not an object at all.
      {"UPDATE tasks SET doc = '[1, 2]' WHERE arn = 'arn:task/gpu/broken'", "table tasks", "expected object"},
      // A status this binary does not know, at the top and deep inside: the field and the string are named.
      {"UPDATE tasks SET doc = json_set(doc, '$.last_status', 'LOST') WHERE arn = 'arn:task/gpu/broken'",
       "table tasks, key 'arn:task/gpu/broken'", "field 'last_status': unknown task status 'LOST'"},
      {"UPDATE tasks SET doc = json_set(doc, '$.containers[1].last_status', 'DELETED') "
       "WHERE arn = 'arn:task/gpu/broken'",
       "table tasks, key 'arn:task/gpu/broken'", "field 'containers[1].last_status': unknown task status 'DELETED'"},
      {"UPDATE container_instances SET doc = json_set(doc, '$.status', 'DEREGISTERING') WHERE arn = 'arn:ci/gpu/typed'",
       "table container_instances, key 'arn:ci/gpu/typed'",
       "field 'status': unknown container instance status 'DEREGISTERING'"},
      {"UPDATE tasks SET doc = json_set(doc, '$.desired_status', 7) WHERE arn = 'arn:task/gpu/broken'",
       "table tasks, key 'arn:task/gpu/broken'", "field 'desired_status': expected string, got integer"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.corrupt_sql);
    // Restore a good file, then corrupt one record.
    fs::remove(Path());
    {
      auto store = OpenOrDie(Path());
      WriteBatch b;
      b.PutTask(FullTask("arn:task/gpu/broken"));
      b.PutInstance(FullInstance("arn:ci/gpu/typed"));
      b.PutClientToken(FullToken("gpu", "swapped"));
      ASSERT_TRUE(store->Commit(b).ok());
    }
    {
      RawDb raw(Path());
      raw.Exec(c.corrupt_sql);
    }
    auto store = OpenOrDie(Path());
    auto snap = store->Load();
    ASSERT_FALSE(snap.ok());
    EXPECT_EQ(snap.status().code(), ErrorCode::kServer);
    EXPECT_THAT(snap.status().message(), HasSubstr(c.want_table_and_key));
    EXPECT_THAT(snap.status().message(), HasSubstr(c.want_detail));
    // A failed Load leaves no transaction open: writes still work.
    WriteBatch b;
    b.PutCluster(FullCluster("after"));
    EXPECT_TRUE(store->Commit(b).ok());
  }
}

TEST_F(SqliteStoreTest, StatusesAreStoredAsTheirEcsNames) {
  {
    auto store = OpenOrDie(Path());
    WriteBatch b;
    b.PutCluster(FullCluster("gpu"));
    b.PutTaskDefinition(FullTaskDefinition("infer", 3));
    b.PutInstance(FullInstance("arn:ci/gpu/abc"));
    b.PutTask(FullTask("arn:task/gpu/stopped"));
    b.PutTask(SmallTask("arn:task/gpu/fresh"));  // the defaults: PENDING, desired RUNNING
    ASSERT_TRUE(store->Commit(b).ok());
  }
  RawDb raw(Path());
  EXPECT_EQ(raw.Text("SELECT json_extract(doc, '$.status') FROM clusters"), "INACTIVE");
  EXPECT_EQ(raw.Text("SELECT json_extract(doc, '$.status') FROM task_definitions"), "INACTIVE");
  EXPECT_EQ(raw.Text("SELECT json_extract(doc, '$.status') FROM container_instances"), "DRAINING");
  const std::string stopped = "FROM tasks WHERE arn = 'arn:task/gpu/stopped'";
  EXPECT_EQ(raw.Text("SELECT json_extract(doc, '$.last_status') " + stopped), "STOPPED");
  EXPECT_EQ(raw.Text("SELECT json_extract(doc, '$.desired_status') " + stopped), "STOPPED");
  EXPECT_EQ(raw.Text("SELECT json_extract(doc, '$.containers[0].last_status') " + stopped), "STOPPED");
  const std::string fresh = "FROM tasks WHERE arn = 'arn:task/gpu/fresh'";
  EXPECT_EQ(raw.Text("SELECT json_extract(doc, '$.last_status') " + fresh), "PENDING");
  EXPECT_EQ(raw.Text("SELECT json_extract(doc, '$.desired_status') " + fresh), "RUNNING");
}

TEST_F(SqliteStoreTest, DocsWithStatusStringsAsEarlierBinariesWroteThemLoad) {
  OpenOrDie(Path()).reset();
  {
    RawDb raw(Path());
    raw.Exec(R"sql(INSERT INTO clusters (name, doc) VALUES ('old', '{"name":"old","status":"ACTIVE"}'))sql");
    raw.Exec(R"sql(INSERT INTO task_definitions (family, revision, doc)
                   VALUES ('old', 2, '{"family":"old","revision":2,"status":"INACTIVE"}'))sql");
    raw.Exec(R"sql(INSERT INTO container_instances (arn, doc)
                   VALUES ('arn:ci/old', '{"arn":"arn:ci/old","status":"DRAINING"}'))sql");
    raw.Exec(R"sql(INSERT INTO tasks (arn, doc) VALUES ('arn:task/old',
                   '{"arn":"arn:task/old","last_status":"RUNNING","desired_status":"STOPPED",
                     "containers":[{"name":"main","last_status":"RUNNING"},
                                   {"name":"side","last_status":"STOPPED"}]}'))sql");
    raw.Exec(R"sql(INSERT INTO tasks (arn, doc) VALUES ('arn:task/bare', '{"arn":"arn:task/bare"}'))sql");
  }
  auto store = OpenOrDie(Path());
  Snapshot s = LoadOrDie(*store);
  ASSERT_EQ(s.clusters.size(), 1u);
  EXPECT_EQ(s.clusters[0].status, LifecycleStatus::kActive);
  ASSERT_EQ(s.task_definitions.size(), 1u);
  EXPECT_EQ(s.task_definitions[0].status, LifecycleStatus::kInactive);
  ASSERT_EQ(s.instances.size(), 1u);
  EXPECT_EQ(s.instances[0].status, InstanceStatus::kDraining);
  ASSERT_EQ(TaskArns(s), (std::vector<std::string>{"arn:task/old", "arn:task/bare"}));
  EXPECT_EQ(s.tasks[0].last_status, TaskStatus::kRunning);
  EXPECT_EQ(s.tasks[0].desired_status, TaskStatus::kStopped);
  ASSERT_EQ(s.tasks[0].containers.size(), 2u);
  EXPECT_EQ(s.tasks[0].containers[0].last_status, TaskStatus::kRunning);
  EXPECT_EQ(s.tasks[0].containers[1].last_status, TaskStatus::kStopped);
  // Absent statuses keep the model's defaults.
  EXPECT_EQ(s.tasks[1].last_status, TaskStatus::kPending);
  EXPECT_EQ(s.tasks[1].desired_status, TaskStatus::kRunning);
}

TEST_F(SqliteStoreTest, LoadStreamingReportsACorruptRecordAsLoadDoes) {
  for (const char* corrupt_sql :
       {"UPDATE tasks SET doc = '{\"arn\": \"arn:task/gpu/bro' WHERE arn = 'arn:task/gpu/broken'",
        "UPDATE tasks SET doc = json_set(doc, '$.arn', 'arn:task/gpu/other') WHERE arn = 'arn:task/gpu/broken'",
        "UPDATE container_instances SET doc = '[1, 2]' WHERE arn = 'arn:ci/gpu/typed'"}) {
    SCOPED_TRACE(corrupt_sql);
    // Restore a good file, then corrupt one record.
    fs::remove(Path());
    {
      auto store = OpenOrDie(Path());
      WriteBatch b;
      b.PutTask(FullTask("arn:task/gpu/fine"));
      b.PutTask(FullTask("arn:task/gpu/broken"));
      b.PutInstance(FullInstance("arn:ci/gpu/typed"));
      ASSERT_TRUE(store->Commit(b).ok());
    }
    {
      RawDb raw(Path());
      raw.Exec(corrupt_sql);
    }
    auto store = OpenOrDie(Path());
    auto whole = store->Load();
    ASSERT_FALSE(whole.ok());
    auto streamed = store->LoadStreaming([](Task&&) { return Status::Ok(); });
    ASSERT_FALSE(streamed.ok());
    EXPECT_EQ(streamed.status().code(), whole.status().code());
    EXPECT_EQ(streamed.status().message(), whole.status().message());
    EXPECT_THAT(streamed.status().message(), HasSubstr("corrupt record in table"));
    WriteBatch b;
    b.PutCluster(FullCluster("after"));
    EXPECT_TRUE(store->Commit(b).ok());
  }
}

TEST_F(SqliteStoreTest, RunsInWalModeWithSynchronousFull) {
  auto store = OpenOrDie(Path());
  auto settings = store->ReadSettings();
  ASSERT_TRUE(settings.ok()) << settings.status().message();
  EXPECT_EQ(settings->journal_mode, "wal");
  EXPECT_EQ(settings->synchronous, 2);  // FULL
  EXPECT_GT(settings->busy_timeout_ms, 0);
  // WAL is a property of the file: a separate connection sees it too.
  RawDb raw(Path());
  EXPECT_EQ(raw.Text("PRAGMA journal_mode"), "wal");
}

TEST_F(SqliteStoreTest, InMemoryDatabaseWorks) {
  auto store = OpenOrDie(":memory:");
  WriteBatch b;
  b.PutTask(FullTask("t"));
  ASSERT_TRUE(store->Commit(b).ok());
  EXPECT_EQ(LoadOrDie(*store).tasks, b.tasks());
}

TEST_F(SqliteStoreTest, OpenErrorsSayWhatIsWrong) {
  struct Case {
    std::string path;
    const char* want;
  };
  // A text file, a directory, and a SQLite file that belongs to some other program.
  const std::string text = dir_.File("notes.txt");
  std::ofstream(text) << "this is not a database, just some notes that someone passed as --db\n";
  const std::string other = dir_.File("other.sqlite");
  {
    RawDb raw(other);
    raw.Exec("CREATE TABLE contacts (name TEXT)");
  }
  fs::create_directory(dir_.File("subdir"));
  const Case cases[] = {
      {dir_.File("missing/dir/gpupack.db"), "does not exist"},
      {text, "not a SQLite database"},
      {dir_.File("subdir"), "is a directory"},
      {other, "database of something else"},
      {"", "path is empty"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    auto store = SqliteStore::Open(c.path);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), ErrorCode::kServer);
    EXPECT_THAT(store.status().message(), HasSubstr("cannot open database '" + c.path + "'"));
    EXPECT_THAT(store.status().message(), HasSubstr(c.want));
  }
  EXPECT_FALSE(fs::exists(dir_.File("missing")));  // nothing was created on the way
}

// ---- MemoryStore ----------------------------------------------------------------------------------------------

TEST(MemoryStoreTest, FailCommitsRefusesAndAppliesNothing) {
  MemoryStore store;
  WriteBatch b;
  b.PutTask(SmallTask("t"));
  store.FailCommits(Status::Server("disk on fire"));
  Status s = store.Commit(b);
  EXPECT_EQ(s.code(), ErrorCode::kServer);
  EXPECT_EQ(s.message(), "disk on fire");
  EXPECT_TRUE(LoadOrDie(store).tasks.empty());
  store.FailCommits(Status::Ok());
  EXPECT_TRUE(store.Commit(b).ok());
  EXPECT_EQ(store.commit_count(), 1u);
}

// ---- GroupCommitter -------------------------------------------------------------------------------------------

// GatedStore forwards to another store; while the gate is closed, a Commit announces itself and waits for
// Open(). That holds the committer busy deterministically, so submissions pile up behind it.
class GatedStore : public Store {
 public:
  explicit GatedStore(Store& inner) : inner_(inner) {}
  Result<Snapshot> Load() override { return inner_.Load(); }
  Status Commit(const WriteBatch& batch) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    lock.unlock();
    return inner_.Commit(batch);
  }
  void WaitUntilEntered(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_ >= n; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  Store& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0;    // guarded by mu_
  bool open_ = false;  // guarded by mu_
};

TEST(GroupCommitterTest, ConcurrentSubmittersAreAllAnsweredOnceAndDurable) {
  TempDir dir;
  const std::string path = dir.File("gc.db");
  constexpr int kThreads = 8;
  constexpr int kPerThread = 40;
  std::vector<std::atomic<int>> calls(kThreads * kPerThread);
  std::atomic<int> failures{0};
  {
    auto store = OpenOrDie(path);
    GroupCommitter committer(*store);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          const int n = t * kPerThread + i;
          WriteBatch b;
          b.PutTask(SmallTask("task-" + std::to_string(n)));
          b.PutInstance(FullInstance("arn:ci/shared"));  // every batch touches the same key too
          committer.Submit(std::move(b), [&, n](Status s) {
            calls[static_cast<size_t>(n)].fetch_add(1);
            if (!s.ok()) failures.fetch_add(1);
          });
        }
      });
    }
    for (auto& th : threads) th.join();
    committer.Flush();
    for (size_t n = 0; n < calls.size(); ++n) EXPECT_EQ(calls[n].load(), 1) << "batch " << n;
    EXPECT_EQ(failures.load(), 0);
    const auto stats = committer.stats();
    EXPECT_EQ(stats.batches, static_cast<uint64_t>(kThreads * kPerThread));
    EXPECT_LE(stats.commits, stats.batches);
    EXPECT_GE(stats.commits, 1u);
    EXPECT_EQ(stats.failed_batches, 0u);
  }
  auto store = OpenOrDie(path);
  Snapshot s = LoadOrDie(*store);
  const std::vector<std::string> arn_list = TaskArns(s);
  std::set<std::string> arns(arn_list.begin(), arn_list.end());
  EXPECT_EQ(arns.size(), static_cast<size_t>(kThreads * kPerThread));
  for (int n = 0; n < kThreads * kPerThread; ++n) EXPECT_EQ(arns.count("task-" + std::to_string(n)), 1u);
}

TEST(GroupCommitterTest, BatchesQueuedBehindABusyCommitShareOneCommit) {
  TempDir dir;
  auto store = OpenOrDie(dir.File("gc.db"));
  GatedStore gated(*store);
  GroupCommitter committer(gated);
  std::mutex order_mu;
  std::vector<int> order;  // guarded by order_mu
  auto record = [&](int n) {
    return [&, n](Status s) {
      EXPECT_TRUE(s.ok()) << s.message();
      std::lock_guard<std::mutex> lock(order_mu);
      order.push_back(n);
    };
  };

  WriteBatch first;
  first.PutTask(SmallTask("first"));
  committer.Submit(std::move(first), record(0));
  gated.WaitUntilEntered(1);  // the committer is now inside Commit with batch 0 alone

  // Batches 1..20, while the committer is busy. Among them: the same task put twice (the later wins) and a
  // client token deleted and then put again (the put wins).
  constexpr int kQueued = 20;
  for (int n = 1; n <= kQueued; ++n) {
    WriteBatch b;
    if (n == 5) {
      b.PutTask(SmallTask("twice", 1));
    } else if (n == 6) {
      b.PutTask(SmallTask("twice", 2));
    } else if (n == 7) {
      b.DeleteClientToken("c", "tok");
    } else if (n == 8) {
      b.PutClientToken(FullToken("c", "tok"));
    } else {
      b.PutTask(SmallTask("queued-" + std::to_string(n)));
    }
    committer.Submit(std::move(b), record(n));
  }
  gated.Open();
  committer.Flush();

  // 1 commit for batch 0 alone + 1 commit for the 20 that queued behind it.
  EXPECT_EQ(committer.commits(), 2u);
  EXPECT_EQ(committer.batches(), static_cast<uint64_t>(kQueued + 1));
  std::vector<int> want(kQueued + 1);
  for (int n = 0; n <= kQueued; ++n) want[static_cast<size_t>(n)] = n;
  EXPECT_EQ(order, want);  // callbacks in submission order

  Snapshot s = LoadOrDie(*store);
  const Task* twice = nullptr;
  for (const auto& t : s.tasks)
    if (t.arn == "twice") twice = &t;
  ASSERT_NE(twice, nullptr);
  EXPECT_EQ(twice->version, 2);
  ASSERT_EQ(s.client_tokens.size(), 1u);
  EXPECT_EQ(s.client_tokens[0], FullToken("c", "tok"));
  EXPECT_EQ(s.tasks.size(), static_cast<size_t>(1 + kQueued - 4 + 1));  // first + 16 queued + twice
}

TEST(GroupCommitterTest, AFailingBatchDoesNotFailItsNeighbours) {
  TempDir dir;
  const std::string path = dir.File("gc.db");
  auto store = OpenOrDie(path);
  RawDb raw(path);
  raw.Exec(
      "CREATE TRIGGER poison BEFORE INSERT ON tasks WHEN NEW.arn = 'poison' "
      "BEGIN SELECT RAISE(ABORT, 'poisoned row refused'); END");
  GatedStore gated(*store);
  GroupCommitter committer(gated);

  std::vector<Status> results(4);
  WriteBatch hold;
  hold.PutTask(SmallTask("hold"));
  committer.Submit(std::move(hold), [&](Status s) { results[0] = std::move(s); });
  gated.WaitUntilEntered(1);
  const char* arns[] = {"good-1", "poison", "good-2"};
  for (int i = 0; i < 3; ++i) {
    WriteBatch b;
    b.PutTask(SmallTask(arns[i]));
    committer.Submit(std::move(b), [&, i](Status s) { results[static_cast<size_t>(i + 1)] = std::move(s); });
  }
  gated.Open();
  committer.Flush();

  EXPECT_TRUE(results[0].ok());
  EXPECT_TRUE(results[1].ok());
  ASSERT_FALSE(results[2].ok());
  EXPECT_THAT(results[2].message(), HasSubstr("tasks 'poison'"));
  EXPECT_TRUE(results[3].ok());
  // hold alone, the merged group (failed), then the three batches one by one.
  EXPECT_EQ(committer.commits(), 5u);
  EXPECT_EQ(committer.stats().failed_batches, 1u);
  std::vector<std::string> want{"hold", "good-1", "good-2"};
  EXPECT_EQ(TaskArns(LoadOrDie(*store)), want);
}

// Stopping after a failure (the server's applier): the first failed batch ends committing; every later batch,
// an empty one too, fails without reaching the store, and says why.
TEST(GroupCommitterTest, AfterAFailureEveryLaterBatchFailsUncommitted) {
  MemoryStore store;
  GroupCommitter committer(store);
  committer.SetStopAfterFailure(true);
  store.FailCommits(Status::Server("disk full"), 1);  // the first commit alone fails
  std::vector<Status> results(3);
  WriteBatch first, second;
  first.PutTask(SmallTask("first"));
  second.PutTask(SmallTask("second"));
  committer.Submit(std::move(first), [&](Status s) { results[0] = std::move(s); });
  committer.Flush();
  committer.Submit(std::move(second), [&](Status s) { results[1] = std::move(s); });
  committer.Submit(WriteBatch{}, [&](Status s) { results[2] = std::move(s); });
  committer.Flush();
  EXPECT_EQ(results[0].message(), "disk full");
  for (size_t i = 1; i < 3; ++i) {
    ASSERT_FALSE(results[i].ok()) << i;
    EXPECT_THAT(results[i].message(), HasSubstr("an earlier commit failed (disk full)")) << i;
  }
  EXPECT_EQ(store.commit_count(), 0u);
  EXPECT_TRUE(LoadOrDie(store).tasks.empty());
  EXPECT_EQ(committer.stats().failed_batches, 3u);
}

TEST(GroupCommitterTest, EmptyBatchesFlushAndCallbacksThatSubmit) {
  MemoryStore store;
  GroupCommitter committer(store);
  committer.Flush();  // nothing submitted: returns at once

  std::atomic<int> done{0};
  committer.Submit(WriteBatch(), [&](Status s) {
    EXPECT_TRUE(s.ok());
    done.fetch_add(1);
  });
  committer.Submit(WriteBatch(), nullptr);  // no callback is fine
  committer.Flush();
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(store.commit_count(), 0u);  // empty batches never reach the store

  // A callback may submit a follow-up batch.
  std::atomic<bool> follow_up_done{false};
  WriteBatch b;
  b.PutTask(SmallTask("parent"));
  committer.Submit(std::move(b), [&](Status s) {
    EXPECT_TRUE(s.ok());
    WriteBatch child;
    child.PutTask(SmallTask("child"));
    committer.Submit(std::move(child), [&](Status s2) {
      EXPECT_TRUE(s2.ok());
      follow_up_done = true;
    });
  });
  committer.Flush();  // covers "parent"; the child was submitted during it
  committer.Flush();  // covers the child
  EXPECT_TRUE(follow_up_done.load());
  EXPECT_EQ(TaskArns(LoadOrDie(store)), (std::vector<std::string>{"parent", "child"}));
}

TEST(GroupCommitterTest, StoreFailureReachesEveryCallback) {
  MemoryStore store;
  store.FailCommits(Status::Server("disk full"));
  std::vector<Status> results;
  {
    GroupCommitter committer(store);
    for (int i = 0; i < 5; ++i) {
      WriteBatch b;
      b.PutTask(SmallTask("t" + std::to_string(i)));
      committer.Submit(std::move(b), [&](Status s) { results.push_back(std::move(s)); });
    }
  }  // the destructor drains: every callback has run once it returns
  ASSERT_EQ(results.size(), 5u);
  for (const auto& s : results) {
    EXPECT_EQ(s.code(), ErrorCode::kServer);
    EXPECT_EQ(s.message(), "disk full");
  }
}

TEST(GroupCommitterTest, DestructorCommitsEverythingSubmitted) {
  TempDir dir;
  const std::string path = dir.File("gc.db");
  std::atomic<int> done{0};
  {
    auto store = OpenOrDie(path);
    GroupCommitter committer(*store);
    for (int i = 0; i < 50; ++i) {
      WriteBatch b;
      b.PutTask(SmallTask("t" + std::to_string(i)));
      committer.Submit(std::move(b), [&](Status s) {
        EXPECT_TRUE(s.ok());
        done.fetch_add(1);
      });
    }
  }
  EXPECT_EQ(done.load(), 50);
  auto store = OpenOrDie(path);
  EXPECT_EQ(LoadOrDie(*store).tasks.size(), 50u);
}

// ---- Kill safety --------------------------------------------------------------------------------------------

bool ReadFull(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// A child process commits batches through a GroupCommitter and writes each acknowledged key to a pipe; the
// parent SIGKILLs it mid-stream. Every key the child was told is durable must be in the file afterwards.
TEST(KillSafetyTest, EveryAcknowledgedBatchSurvivesSigkill) {
  TempDir dir;
  const std::string path = dir.File("kill.db");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: never returns into the test framework.
    ::close(fds[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    auto opened = SqliteStore::Open(path);
    if (!opened.ok()) ::_exit(3);
    GroupCommitter committer(**opened);
    const int out = fds[1];
    for (uint64_t i = 0;; ++i) {
      WriteBatch b;
      b.PutTask(SmallTask("task-" + std::to_string(i)));
      b.PutClientToken(FullToken("c", "tok-" + std::to_string(i)));
      committer.Submit(std::move(b), [out, i](Status s) {
        if (!s.ok()) ::_exit(4);
        if (::write(out, &i, sizeof i) != static_cast<ssize_t>(sizeof i)) ::_exit(5);
      });
      if (i % 8 == 7) committer.Flush();  // up to 8 batches in flight, so commits group
    }
  }

  ::close(fds[1]);
  struct Reaper {  // kills the child on every path out of the test
    pid_t pid;
    bool reaped = false;
    ~Reaper() {
      if (!reaped) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } reaper{pid};

  std::set<uint64_t> acked;
  uint64_t key = 0;
  while (acked.size() < 200) {
    ASSERT_TRUE(ReadFull(fds[0], &key, sizeof key)) << "the child stopped before acknowledging 200 batches";
    acked.insert(key);
  }
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  reaper.reaped = true;
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) << "child status " << wstatus;
  while (ReadFull(fds[0], &key, sizeof key)) acked.insert(key);  // acks written just before the kill
  ::close(fds[0]);

  auto store = OpenOrDie(path);
  Snapshot s = LoadOrDie(*store);
  const std::vector<std::string> task_list = TaskArns(s);
  std::set<std::string> tasks(task_list.begin(), task_list.end());
  std::set<std::string> tokens;
  for (const auto& r : s.client_tokens) tokens.insert(r.token);
  for (uint64_t k : acked) {
    EXPECT_EQ(tasks.count("task-" + std::to_string(k)), 1u) << "acknowledged task " << k << " is missing";
    EXPECT_EQ(tokens.count("tok-" + std::to_string(k)), 1u) << "acknowledged token " << k << " is missing";
  }
  EXPECT_GE(tasks.size(), acked.size());
}

}  // namespace
}  // namespace gpupack
