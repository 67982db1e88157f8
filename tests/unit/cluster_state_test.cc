// ClusterState's index of STOPPED tasks (StoppedTasks), which the retention purge reads instead of walking every
// task: each STOPPED task with a stopped_at is in it once, under that time, whatever the order of the puts (a
// load, a follower applying batches), reservations, status changes, in-place changes and erasures that led there.
#include "scheduler/cluster_state.h"

#include <iterator>
#include <random>
#include <set>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace gpupack {
namespace {

using Filed = std::set<std::pair<EpochMs, std::string>>;

// Walked: what StoppedTasks must hold, from a walk of every task (what the purge walked before the index).
Filed Walked(const ClusterState& s) {
  Filed out;
  s.ForEachTask([&](const Task& t) {
    if (t.last_status == TaskStatus::kStopped && t.stopped_at != 0) out.emplace(t.stopped_at, t.arn);
  });
  return out;
}

class StoppedIndexTest : public ::testing::Test {
 protected:
  StoppedIndexTest() {
    ContainerInstance inst;
    inst.arn = "instance-1";
    inst.cluster = "c";
    inst.registered = inst.remaining = {1 << 20, 1 << 20};
    s_.PutInstance(inst);
  }
  // Placed: a task as placement leaves it on the instance (PENDING, holding 256 CPU units and 512 MiB).
  static Task Placed(const std::string& arn) {
    Task t;
    t.arn = arn;
    t.cluster = "c";
    t.container_instance_arn = "instance-1";
    t.reserved = {256, 512};
    return t;
  }
  // Stop: what FinishStop does through the transaction: stopped_at first, then STOPPED.
  void Stop(const std::string& arn, EpochMs at) {
    s_.FindTask(arn)->stopped_at = at;
    s_.RefileStopped(arn);
    s_.SetTaskLastStatus(arn, TaskStatus::kStopped);
  }
  ClusterState s_;
};

TEST_F(StoppedIndexTest, AStoppedTaskIsFiledOnceUnderItsStoppedAtWhateverTheOrderOfPutsAndReports) {
  ASSERT_TRUE(s_.ReserveTask(Placed("a")).ok());
  s_.SetTaskLastStatus("a", TaskStatus::kRunning);
  ASSERT_TRUE(s_.ReserveTask(Placed("b")).ok());
  EXPECT_TRUE(s_.StoppedTasks().empty()) << "a task that did not stop is in no entry";

  s_.FindTask("a")->stopped_at = 100;  // set before STOPPED, as FinishStop does: not filed yet
  s_.RefileStopped("a");
  EXPECT_TRUE(s_.StoppedTasks().empty());
  s_.SetTaskLastStatus("a", TaskStatus::kStopped);
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{100, "a"}}));
  s_.SetTaskLastStatus("a", TaskStatus::kStopped);  // a repeated report
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{100, "a"}}));

  // The same record put again (a reload, a follower applying a batch twice), then a later one of the task.
  const Task stopped = *s_.FindTask("a");
  s_.PutTask(stopped);
  s_.PutTask(stopped);
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{100, "a"}}));
  Task later = stopped;
  later.stopped_at = 200;
  s_.PutTask(later);
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{200, "a"}}));

  // Changed in place and refiled (Transaction::UpdateTask): the entry moves, it is not copied.
  s_.FindTask("a")->stopped_at = 50;
  s_.RefileStopped("a");
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{50, "a"}}));

  // A put record that is no longer STOPPED leaves the index; one put STOPPED without holding joins it.
  Task back = later;
  back.last_status = TaskStatus::kRunning;
  s_.PutTask(back);
  EXPECT_TRUE(s_.StoppedTasks().empty());
  Task loaded = Placed("c");
  loaded.last_status = TaskStatus::kStopped;
  loaded.stopped_at = 300;
  loaded.resources_released = true;
  s_.PutTask(loaded);
  Stop("b", 150);
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{150, "b"}, {300, "c"}}));

  ASSERT_TRUE(s_.EraseStoppedTask("b").ok());
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{300, "c"}}));
  // An ARN taken from the index itself (as a purge walking it might pass one) erases cleanly.
  ASSERT_TRUE(s_.EraseStoppedTask(s_.StoppedTasks().begin()->second).ok());
  EXPECT_TRUE(s_.StoppedTasks().empty());
  EXPECT_EQ(s_.TaskCount(), 1u);  // "a", put back RUNNING
}

TEST_F(StoppedIndexTest, AWaitingTaskStoppedOrPlacedIsFiledByItsRecord) {
  Task waiting;
  waiting.arn = "w";
  waiting.cluster = "c";
  waiting.capacity_provider_name = "pool";
  waiting.wait_seq = s_.NextWaitSeq();
  ASSERT_TRUE(s_.AddWaitingTask(waiting).ok());
  Task placed = Placed("w");
  placed.capacity_provider_name = "pool";
  ASSERT_TRUE(s_.PlaceWaitingTask(placed).ok());
  EXPECT_TRUE(s_.StoppedTasks().empty());

  waiting.arn = "w2";
  waiting.wait_seq = s_.NextWaitSeq();
  ASSERT_TRUE(s_.AddWaitingTask(waiting).ok());
  Stop("w2", 70);  // StopTask of a task still waiting: it leaves its line and stops
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{70, "w2"}}));
  EXPECT_EQ(s_.WaitingTotal(), 0u);
}

// Random sequences of everything that stores or changes a task, on a few ARNs: after every step the index holds
// exactly what a walk of the tasks finds, each task once.
TEST_F(StoppedIndexTest, RandomSequencesKeepTheIndexEqualToAWalkOfTheTasks) {
  std::mt19937_64 rng(42);
  const std::string arns[] = {"t0", "t1", "t2", "t3", "t4", "t5"};
  for (int step = 0; step < 20'000; ++step) {
    const std::string& arn = arns[rng() % std::size(arns)];
    const Task* task = s_.FindTask(arn);
    const EpochMs at = static_cast<EpochMs>(1 + rng() % 5);  // few times: records often share one
    switch (rng() % 7) {
      case 0:  // RunTask: placed
        if (!task) {
          EXPECT_TRUE(s_.ReserveTask(Placed(arn)).ok());
        }
        break;
      case 1: {  // acknowledged PROVISIONING, or placed from its line
        if (!task) {
          Task w;
          w.arn = arn;
          w.cluster = "c";
          w.capacity_provider_name = "pool";
          w.wait_seq = s_.NextWaitSeq();
          EXPECT_TRUE(s_.AddWaitingTask(w).ok());
        } else if (task->last_status == TaskStatus::kProvisioning) {
          EXPECT_TRUE(s_.PlaceWaitingTask(Placed(arn)).ok());
        }
        break;
      }
      case 2:  // an agent's report: RUNNING or STOPPED (stopped_at first), repeated ones included
        if (task && rng() % 2) s_.SetTaskLastStatus(arn, TaskStatus::kRunning);
        else if (task) Stop(arn, at);
        break;
      case 3:  // a record put whole (a load or a follower), after the old one let go of what it held
        if (task) {
          Task next = *task;
          s_.ReleaseTask(arn);
          next.resources_released = true;
          next.last_status = rng() % 3 ? TaskStatus::kStopped : TaskStatus::kPending;
          next.stopped_at = rng() % 4 ? at : 0;
          s_.PutTask(next);
        }
        break;
      case 4:  // stopped_at changed in place (Transaction::UpdateTask)
        if (task) {
          s_.FindTask(arn)->stopped_at = at;
          s_.RefileStopped(arn);
        }
        break;
      case 5:  // the purge, or the erase of a task never reserved
        if (task) (void)s_.EraseStoppedTask(arn);
        break;
      case 6:  // a status move the server does not make (STOPPED back to PENDING): the index still follows
        if (task && task->last_status != TaskStatus::kProvisioning) s_.SetTaskLastStatus(arn, TaskStatus::kPending);
        break;
    }
    ASSERT_EQ(s_.StoppedTasks(), Walked(s_)) << "step " << step;
  }
}

}  // namespace
}  // namespace gpupack
