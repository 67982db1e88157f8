// TaskOrder: the tasks of one cluster in ListTasks order (createdAt, then ARN), for the read view.
//
// A TaskOrder never changes once built. It is a sequence of sorted chunks of keys held as shared_ptr<const>;
// With() builds the next order from this one, copying only the chunks a change touches and sharing the rest,
// so a commit that adds one task to a cluster of 100,000 copies one chunk of a few hundred keys and the list
// of chunk pointers. Tasks arrive in createdAt order, so a commit almost always touches only the last chunk.
//
// Thread-safe to read from any number of threads (it is immutable).
#pragma once

#include <compare>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "scheduler/model.h"

namespace gpupack::api {

// TaskKey: where a task sits in ListTasks order. Both fields are fixed for the task's lifetime.
struct TaskKey {
  EpochMs created_at = 0;
  std::string arn;
  auto operator<=>(const TaskKey&) const = default;
};

class TaskOrder {
 public:
  // kChunk: the size a chunk is cut to; a chunk grows to twice that before it is split again.
  static constexpr size_t kChunk = 256;

  TaskOrder() = default;
  // Of: the order of `keys` (any order, no duplicates).
  static TaskOrder Of(std::vector<TaskKey> keys);

  size_t size() const { return size_; }
  // With: this order without `erase` and with `insert` (keys of `erase` that are absent are ignored; a key of
  // `insert` already present, or given twice, is held once).
  TaskOrder With(std::vector<TaskKey> insert, std::vector<TaskKey> erase) const;

  // ForEachFrom calls `f(const TaskKey&)` for the keys from position `begin` on, in order, until f returns false.
  template <typename F>
  void ForEachFrom(size_t begin, F&& f) const {
    for (const auto& chunk : chunks_) {
      if (begin >= chunk->size()) {
        begin -= chunk->size();
        continue;
      }
      for (size_t i = begin; i < chunk->size(); ++i)
        if (!f((*chunk)[i])) return;
      begin = 0;
    }
  }

 private:
  using Chunk = std::vector<TaskKey>;
  // Append: adds `keys` (sorted) as chunks of kChunk at the end of `chunks`.
  static void Append(std::vector<std::shared_ptr<const Chunk>>& chunks, Chunk keys);

  std::vector<std::shared_ptr<const Chunk>> chunks_;  // each sorted and non-empty; chunk i's keys < chunk i+1's
  size_t size_ = 0;
};

}  // namespace gpupack::api
