// The agent's parts on their own: TaskExecutor (work serialized per key, keys side by side, bounded threads) and
// TaskStore (records persisted atomically, read back after a restart, in the layout agents have always written).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "agent/gpu_health.h"
#include "agent/task_executor.h"
#include "agent/task_store.h"
#include "tests/unit/temp_dir.h"

namespace gpupack::agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using protocol::Json;
using protocol::TaskStatus;
using testing_support::TempDir;

// Gate is a latch a test opens once.
class Gate {
 public:
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool Wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(TaskExecutorTest, OneKeysWorkRunsInOrderAndNeverTwoAtOnce) {
  TaskExecutor executor(8);
  std::mutex mu;
  std::vector<int> order;
  std::atomic<int> inside{0}, most_inside{0};
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(executor.Post("task-a", [&, i] {
      const int now = ++inside;
      most_inside = std::max(most_inside.load(), now);
      std::this_thread::sleep_for(1ms);
      {
        std::lock_guard lock(mu);
        order.push_back(i);
      }
      --inside;
    }));
  }
  ASSERT_TRUE(executor.Drain(10s));
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(most_inside.load(), 1);
}

TEST(TaskExecutorTest, ABlockedKeyHoldsUpNoOtherKey) {
  TaskExecutor executor(4);
  Gate release, other_ran;
  executor.Post("slow", [&] { release.Wait(10s); });
  executor.Post("slow", [&] {});  // queued behind the blocked one
  executor.Post("fast", [&] { other_ran.Open(); });
  EXPECT_TRUE(other_ran.Wait(5s)) << "work of another key waited for the blocked key";
  release.Open();
  EXPECT_TRUE(executor.Drain(10s));
}

TEST(TaskExecutorTest, ThreadsAreBoundedAndWorkBeyondThemWaitsItsTurn) {
  TaskExecutor executor(2);
  Gate release;
  std::atomic<int> started{0}, done{0};
  for (int i = 0; i < 6; ++i)
    executor.Post("key-" + std::to_string(i), [&] {
      ++started;
      release.Wait(10s);
      ++done;
    });
  for (int i = 0; i < 250 && started.load() < 2; ++i) std::this_thread::sleep_for(20ms);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(started.load(), 2);  // two workers, both blocked: the other keys wait
  EXPECT_LE(executor.threads(), 2u);
  release.Open();
  EXPECT_TRUE(executor.Drain(10s));
  EXPECT_EQ(done.load(), 6);
}

TEST(TaskExecutorTest, ShutdownWaitsForRunningWorkDropsQueuedAndRefusesMore) {
  TaskExecutor executor(1);
  Gate running, release;
  std::atomic<bool> first_done{false}, queued_ran{false};
  executor.Post("a", [&] {
    running.Open();
    release.Wait(10s);
    first_done = true;
  });
  executor.Post("a", [&] { queued_ran = true; });
  ASSERT_TRUE(running.Wait(5s));
  std::thread releaser([&] {
    std::this_thread::sleep_for(50ms);
    release.Open();
  });
  executor.Shutdown();
  releaser.join();
  EXPECT_TRUE(first_done.load());
  EXPECT_FALSE(queued_ran.load());
  EXPECT_FALSE(executor.Post("a", [] {}));
}

TEST(TaskExecutorTest, IdleWorkersExit) {
  TaskExecutor executor(4, 50ms);
  executor.Post("a", [] {});
  ASSERT_TRUE(executor.Drain(5s));
  for (int i = 0; i < 250 && executor.threads() > 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(executor.threads(), 0u);
  Gate ran;
  executor.Post("b", [&] { ran.Open(); });  // a new worker is started (and the exited one joined)
  EXPECT_TRUE(ran.Wait(5s));
}

class TaskStoreTest : public ::testing::Test {
 protected:
  static TaskRecord Sample() {
    protocol::Assignment a;
    a.task_arn = "arn:aws:ecs:us-east-1:000000000000:task/default/0123abcd";
    a.cluster = "default";
    protocol::AssignedContainer main;
    main.name = "main";
    main.gpu_ids = {"GPU-0"};
    main.mps = protocol::MpsLimits{4096, std::nullopt};
    main.entry_point = {"/bin/sh", "-c"};
    main.command = {"exec sleep 60"};
    protocol::AssignedContainer side;
    side.name = "side";
    side.essential = false;
    a.containers = {main, side};
    TaskRecord r = TaskRecord::ForAssignment(a);
    r.report.status = TaskStatus::kStopped;
    r.report.stop_code = protocol::StopCode::kEssentialContainerExited;
    r.report.reason = "Essential container in task exited";
    r.report.containers[0] = {"main", TaskStatus::kStopped, 3, "done"};
    r.runtime_ids[0] = "0123abcd-main";
    return r;
  }

  TempDir temp_{"gpupack-store"};  // removed with everything in it after each test
  fs::path dir_ = fs::path(temp_.path()) / "store";  // the store's directory, missing until a test makes it
};

TEST_F(TaskStoreTest, RecordsSurviveAReopenAndEraseRemovesTheFile) {
  auto store = TaskStore::Open(dir_.string());
  ASSERT_TRUE(store.ok()) << store.status().message();
  const TaskRecord r = Sample();
  ASSERT_TRUE((*store)->Put(r).ok());
  EXPECT_TRUE(fs::exists(dir_ / "0123abcd.json"));
  auto again = TaskStore::Open(dir_.string());
  ASSERT_TRUE(again.ok());
  auto back = (*again)->Get(r.arn());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->assignment, r.assignment);
  EXPECT_EQ(back->report, r.report);
  EXPECT_EQ(back->runtime_ids, r.runtime_ids);
  (*again)->Erase(r.arn());
  EXPECT_FALSE(fs::exists(dir_ / "0123abcd.json"));
  EXPECT_EQ((*again)->size(), 0u);
}

TEST_F(TaskStoreTest, TheRecordIsInTheLayoutAgentsHaveAlwaysWritten) {
  auto store = TaskStore::Open(dir_.string());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Put(Sample()).ok());
  Json j = Json::parse(std::ifstream(dir_ / "0123abcd.json"));
  EXPECT_EQ(j["status"], "STOPPED");
  EXPECT_EQ(j["stopCode"], "EssentialContainerExited");
  EXPECT_EQ(j["assignment"]["containers"][0]["mps"]["memory"], 4096);
  ASSERT_EQ(j["containers"].size(), 2u);
  EXPECT_EQ(j["containers"][0]["name"], "main");
  EXPECT_EQ(j["containers"][0]["runtimeId"], "0123abcd-main");
  EXPECT_EQ(j["containers"][0]["exitCode"], 3);
  EXPECT_EQ(j["containers"][0]["gpuIds"], Json::array({"GPU-0"}));
  EXPECT_EQ(j["containers"][1]["runtimeId"], "");
  EXPECT_EQ(j["containers"][1]["essential"], false);
  EXPECT_EQ(j["containers"][1]["status"], "PENDING");
}

TEST_F(TaskStoreTest, AnEarlierAgentsRecordIsRead) {
  fs::create_directories(dir_);
  // As the agent before the protocol library wrote it: the assignment exactly as received, no stop code yet.
  std::ofstream(dir_ / "feed.json") << R"({"taskArn":"arn:t/feed","assignment":{"taskArn":"arn:t/feed",
      "cluster":"default","taskDefinitionArn":"arn:td/x:1","desiredStatus":"RUNNING","containers":[{"name":"main",
      "image":"x","essential":true,"gpuIds":["GPU-1"],"entryPoint":["/bin/sh"],"command":[],"environment":[],"cpu":0}]},
      "status":"RUNNING","stopCode":"","reason":"","containers":[{"name":"main","runtimeId":"feed-main",
      "status":"RUNNING","reason":"","essential":true,"gpuIds":["GPU-1"]}]})";
  std::ofstream(dir_ / "junk.json") << "not json";
  auto store = TaskStore::Open(dir_.string());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->size(), 1u);  // the unreadable one is skipped
  auto r = (*store)->Get("arn:t/feed");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->report.status, TaskStatus::kRunning);
  EXPECT_FALSE(r->report.stop_code.has_value());
  EXPECT_EQ(r->runtime_ids, std::vector<std::string>{"feed-main"});
  EXPECT_EQ(r->assignment.containers[0].gpu_ids, std::vector<std::string>{"GPU-1"});
}

TEST_F(TaskStoreTest, FileNamesAreTheTaskIdKeptToASafeAlphabet) {
  EXPECT_EQ(TaskStore::FileName("arn:aws:ecs:r:1:task/default/abc-123"), "abc-123.json");
  EXPECT_EQ(TaskStore::FileName("arn:t/.."), "_...json");
  EXPECT_EQ(TaskStore::FileName("arn:t/a b"), "a_b.json");
  EXPECT_EQ(TaskStore::FileName("arn:t/"), "_.json");
}

// HeartbeatGpuMemory: the watchdog's reading as a heartbeat carries it, aged at the send and held to the
// protocol's bounds, so the server never refuses what an agent sends; no reading (or one too old) is none.
TEST(HeartbeatGpuMemory, CarriesTheReadingAgedAndWithinTheProtocolsBounds) {
  const auto now = std::chrono::steady_clock::now();
  EXPECT_EQ(HeartbeatGpuMemory(std::nullopt, now), std::nullopt);
  EXPECT_EQ(HeartbeatGpuMemory(TaskMemoryReading{now - 25h, {{"arn:t/1", {{"GPU-a", 1}}}}}, now), std::nullopt);

  TaskMemoryReading reading{now - 1500ms, {}};
  reading.tasks["arn:t/1"] = {{"GPU-a", 5 * 1048576}, {"GPU-b", 0}, {std::string(300, 'g'), 9}};
  reading.tasks[std::string(300, 't')] = {{"GPU-a", 1}};
  auto sent = HeartbeatGpuMemory(reading, now);
  ASSERT_TRUE(sent.has_value());
  EXPECT_EQ(sent->age_ms, 1500);
  ASSERT_EQ(sent->tasks.size(), 1u);  // the over-long ARN and GPU id are left out
  EXPECT_EQ(sent->tasks[0], (protocol::TaskGpuMemory{"arn:t/1", {{"GPU-a", 5 * 1048576}, {"GPU-b", 0}}}));

  TaskMemoryReading many{now, {}};
  for (int i = 0; i < 1100; ++i)
    for (int g = 0; g < 40; ++g) many.tasks["arn:t/" + std::to_string(i)]["GPU-" + std::to_string(g)] = g;
  auto capped = HeartbeatGpuMemory(many, now);
  ASSERT_TRUE(capped.has_value());
  EXPECT_LE(capped->tasks.size(), protocol::kMaxGpuMemoryTasks);
  EXPECT_EQ(capped->tasks[0].gpus.size(), protocol::kMaxGpuMemoryGpus);
  protocol::Heartbeat hb{1, false, {}};
  hb.gpu_memory = capped;
  const std::string text = protocol::Serialize(protocol::AgentMessage(hb));
  EXPECT_LT(text.size(), size_t{1} << 20);  // within the channel's message limit
  auto parsed = protocol::ParseAgentMessage(text);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(std::get<protocol::Heartbeat>(*parsed).gpu_memory_refused, "");
  EXPECT_EQ(std::get<protocol::Heartbeat>(*parsed).gpu_memory, capped);
}

}  // namespace
}  // namespace gpupack::agent
