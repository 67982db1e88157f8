// TaskOrder: the read view's per-cluster ListTasks order, changed by copy on write.
#include "engine/core/task_order.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace gpupack::api {
namespace {

std::vector<std::string> ArnsOf(const TaskOrder& order, size_t begin = 0) {
  std::vector<std::string> out;
  order.ForEachFrom(begin, [&](const TaskKey& k) {
    out.push_back(k.arn);
    return true;
  });
  return out;
}

TaskKey Key(EpochMs at, int n) { return {at, "task/" + std::to_string(n)}; }

TEST(TaskOrderTest, KeepsCreatedAtThenArnOrderAndDropsDuplicates) {
  TaskOrder order = TaskOrder::Of({Key(30, 1), Key(10, 3), Key(10, 2), Key(20, 4), Key(10, 2)});
  EXPECT_EQ(order.size(), 4u);
  EXPECT_EQ(ArnsOf(order), (std::vector<std::string>{"task/2", "task/3", "task/4", "task/1"}));
  EXPECT_EQ(ArnsOf(order, 2), (std::vector<std::string>{"task/4", "task/1"}));
  EXPECT_TRUE(ArnsOf(order, 9).empty());
}

TEST(TaskOrderTest, WithLeavesTheOriginalUnchanged) {
  const TaskOrder before = TaskOrder::Of({Key(1, 1), Key(2, 2), Key(3, 3)});
  const TaskOrder after = before.With({Key(4, 4), Key(0, 0)}, {Key(2, 2), Key(9, 9)});
  EXPECT_EQ(ArnsOf(before), (std::vector<std::string>{"task/1", "task/2", "task/3"}));
  EXPECT_EQ(ArnsOf(after), (std::vector<std::string>{"task/0", "task/1", "task/3", "task/4"}));
  EXPECT_EQ(after.size(), 4u);
}

// Two changes of one task in one commit group gave With the same key twice; it held the task twice.
TEST(TaskOrderTest, WithHoldsAKeyGivenTwiceOnce) {
  const TaskOrder before = TaskOrder::Of({Key(1, 1), Key(3, 3)});
  const TaskOrder after = before.With({Key(2, 2), Key(2, 2), Key(3, 3), Key(4, 4), Key(4, 4)}, {Key(1, 1), Key(1, 1)});
  EXPECT_EQ(ArnsOf(after), (std::vector<std::string>{"task/2", "task/3", "task/4"}));
  EXPECT_EQ(after.size(), 3u);
}

TEST(TaskOrderTest, StopsWhenTheCallbackSaysSo) {
  const TaskOrder order = TaskOrder::Of({Key(1, 1), Key(2, 2), Key(3, 3)});
  int calls = 0;
  order.ForEachFrom(0, [&](const TaskKey&) { return ++calls < 2; });
  EXPECT_EQ(calls, 2);
}

// Many rounds of random inserts and erases across chunk boundaries agree with a std::set, and every older
// order still reads as it did when it was made.
TEST(TaskOrderTest, AgreesWithASetThroughManyCopyOnWriteRounds) {
  std::mt19937 rng(7);
  std::set<TaskKey> model;
  TaskOrder order;
  std::vector<std::pair<TaskOrder, std::vector<std::string>>> history;
  int next = 0;
  for (int round = 0; round < 200; ++round) {
    std::vector<TaskKey> insert, erase;
    const int inserts = static_cast<int>(rng() % 40);
    for (int i = 0; i < inserts; ++i) {
      // Mostly newest-last, as tasks arrive; some land in the middle.
      const EpochMs at = rng() % 5 == 0 ? static_cast<EpochMs>(rng() % (next + 1)) : next;
      insert.push_back(Key(at, next++));
    }
    const int erases = static_cast<int>(rng() % 20);
    for (int i = 0; i < erases && !model.empty(); ++i) {
      auto it = model.begin();
      std::advance(it, rng() % model.size());
      erase.push_back(*it);
    }
    for (const auto& k : erase) model.erase(k);
    for (const auto& k : insert) model.insert(k);
    order = order.With(insert, erase);
    ASSERT_EQ(order.size(), model.size()) << "round " << round;
    std::vector<std::string> expected;
    for (const auto& k : model) expected.push_back(k.arn);
    ASSERT_EQ(ArnsOf(order), expected) << "round " << round;
    if (round % 20 == 0) history.emplace_back(order, expected);
  }
  EXPECT_GT(order.size(), 2 * TaskOrder::kChunk);  // the rounds crossed several chunks
  for (const auto& [old, arns] : history) EXPECT_EQ(ArnsOf(old), arns);
}

}  // namespace
}  // namespace gpupack::api
