// LeaseKeeper (docs/ha.md, "Several servers: one leader, fenced"): the statements on the one row of
// gpupack_leader_lease (storage/postgres_schema.cc) by which replicas take, renew and release the leadership,
// and learn who holds it. api/leadership.h's Replica runs one on a connection of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "storage/postgres_store.h"

namespace gpupack::api {

// LeaseKeeper: the lease's statements on one connection of their own (not the commits' connection, so a long
// load or commit never delays a renewal). Not thread-safe: the lease thread alone uses it.
class LeaseKeeper {
 public:
  LeaseKeeper(PostgresStore& db, std::string holder, std::string advertise, std::chrono::milliseconds ttl);

  // What one step learned. `held`: this replica holds the lease under `epoch` for at least ttl from the step's
  // start. Else `leader` is the holder's advertise URL ("" when the lease has expired and nobody took it).
  struct View {
    bool held = false;
    int64_t epoch = 0;
    std::string leader;
    bool leader_alive = false;  // the holder's lease has not expired
  };

  // Step renews the lease held under `held_epoch` (with `bump`, raising its epoch by one), or, when it is not
  // held (any more), tries to take it unless `may_take` is false (a standby too far behind: it only reads who
  // leads). It takes an unexpired lease too when the holder's lease connection has ended since the last step
  // saw it (its backend gone from pg_stat_activity, seen from this keeper's same connection): a holder killed
  // with SIGKILL is replaced within a step rather than after the TTL; a hung holder (its connection open) still
  // waits out the TTL, and a restart of the database (every session ends, this one's too) takes nothing early.
  // A database error is returned as a Status. While held, every tenth step also prunes the change feed (rows
  // older than a minute beyond the last thousand: a standby further behind loads afresh).
  Result<View> Step(int64_t held_epoch, bool bump, bool may_take = true);

  // Release ends the lease held under `epoch` now (a clean shutdown, after the last commit), so that a standby
  // takes over at its next step instead of after the TTL. Nothing happens when the lease is no longer held.
  Status Release(int64_t epoch);

 private:
  Result<View> Read();
  // Watched: the holder's lease session as the last Read saw it alive (database text values), and this keeper's
  // own backend then.
  struct Watched {
    std::string holder, epoch, pid, own_pid;
  };
  std::optional<Watched> watched_;

  PostgresStore& db_;
  const std::string holder_;
  const std::string advertise_;
  const std::string ttl_;  // as an SQL interval, e.g. "5000 milliseconds"
  bool first_step_ = true;  // until a step reached the database: a restart may take its own URL's lease
  uint64_t held_steps_ = 0;  // renewals, for pruning the change feed every tenth
};

}  // namespace gpupack::api
