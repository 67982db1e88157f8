// GatedStore: a MemoryStore that holds every Commit while its gate is closed: the window between a write's
// decision in memory and its commit, which a crash can cut and which reads must not see. Header-only test
// support. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "storage/memory_store.h"

namespace gpupack::testing_support {

class GatedStore : public MemoryStore {
 public:
  Status Commit(const WriteBatch& batch) override {
    std::unique_lock lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
    --waiting_;
    lock.unlock();
    return MemoryStore::Commit(batch);
  }
  void Close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void Open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // WaitForCommit blocks until a commit waits at the gate; false after 10 s without one.
  bool WaitForCommit() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [this] { return waiting_ > 0; });
  }
  MemoryStore& inner() { return *this; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int waiting_ = 0;
};

}  // namespace gpupack::testing_support
