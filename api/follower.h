// Follower: a hot standby's copy of the leader's state (docs/ha.md, "Hot standbys" and "Reads from standbys").
//
// It builds a following api::Server over the database (the state loaded once, as a leader would load it; no
// port, no writes) and then, on a thread of its own, applies the change feed's rows (storage/change_feed.h) in
// commit order, woken by the leader's NOTIFY and polling every `poll` besides. A row it cannot apply in place,
// a pruned feed or a restored database make it load afresh. The server answers the standby's reads
// (TryServe/WaitAndServe) and, when the replica wins the lease, becomes the leader (TakeOver): only the rows
// still unapplied are applied then, the world is not loaded again.
//
// Freshness: `fresh_as_of` is the start of the last round that applied every commit the database had then; a
// read is answered here only when that is at most `max_read_staleness` ago, or when the state holds the commit
// sequence the client names. A follower further behind than `max_lag` is not ready to lead.
//
// Thread-safe: every public method may be called from any thread; the destructor stops the thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "api/server.h"
#include "storage/change_feed.h"
#include "storage/postgres_store.h"

namespace gpupack::api {

// kCommitSeqHeader: the commit sequence an answer reflects (a leader's: its last commit; a standby's: the last
// it applied), and the one a client sends back to read its own writes through a standby.
inline constexpr const char* kCommitSeqHeader = "x-gpupack-commit-seq";
// kServedByHeader: "standby" on an answer a standby gave from its own state.
inline constexpr const char* kServedByHeader = "x-gpupack-served-by";

struct FollowerOptions {
  ServerOptions server;  // the leader's options; host and port serve only once promoted
  std::chrono::milliseconds poll{200};                 // read the feed at least this often without a NOTIFY
  std::chrono::milliseconds max_read_staleness{1000};  // answer reads without a sequence only this fresh
  std::chrono::milliseconds max_lag{3000};             // beyond: not ready to lead
  std::string pause_file;  // tests: while this file exists, no row is applied (a standby falling behind)
};

class Follower {
 public:
  Follower(FollowerOptions options, PostgresStore& data);
  ~Follower();
  Follower(const Follower&) = delete;
  Follower& operator=(const Follower&) = delete;

  struct Progress {
    bool loaded = false;
    uint64_t applied = 0;   // the last commit sequence in the state
    uint64_t latest = 0;    // the last one the database had at the last look
    int64_t behind_ms = -1; // now - fresh_as_of; -1 before the first load
    bool paused = false;
    uint64_t loads = 0;     // full loads so far
    bool ready_to_lead = false;
  };
  Progress progress() const;

  // IsLocalRead: an ECS Describe*/List* call, which a fresh standby answers itself.
  static bool IsLocalRead(const HttpRequest& req);
  // TryServe answers `req` from this state now when it is fresh enough for it (`want`: the sequence the client
  // sent, 0 for none); false leaves req and respond untouched.
  bool TryServe(HttpRequest& req, Responder& respond, uint64_t want);
  // WaitAndServe waits up to `wait` for the state to hold `want`, then answers; false when it did not.
  bool WaitAndServe(HttpRequest& req, Responder& respond, uint64_t want, std::chrono::milliseconds wait);

  // TakeOver stops following, applies every commit left in the feed (the caller holds the lease, so no other
  // commit can come) and hands the server over, to be promoted. Null when no state is loaded or the rest cannot
  // be applied (the caller then loads the world); `applied` counts the rows applied here.
  std::shared_ptr<Server> TakeOver(uint64_t* applied);

 private:
  void Run();
  bool Load();
  void Serve(const std::shared_ptr<Server>& server, HttpRequest& req, Responder& respond);
  void Stop();

  const FollowerOptions options_;
  PostgresStore& data_;

  mutable std::mutex mu_;
  std::condition_variable cv_;                 // signalled when applied_ moves or stopping_ is set
  std::shared_ptr<Server> server_;             // guarded by mu_
  uint64_t applied_ = 0;                       // guarded by mu_
  uint64_t latest_ = 0;                        // guarded by mu_
  std::chrono::steady_clock::time_point fresh_as_of_;  // guarded by mu_
  bool paused_ = false;                        // guarded by mu_
  uint64_t loads_ = 0;                         // guarded by mu_
  bool stopping_ = false;                      // guarded by mu_
  ChangeListener listener_;  // the follower thread's (Stop interrupts its wait)
  std::thread thread_;
};

}  // namespace gpupack::api
