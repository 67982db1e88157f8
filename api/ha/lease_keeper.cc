#include "api/ha/lease_keeper.h"

#include <utility>

#include <spdlog/spdlog.h>

namespace gpupack::api {
namespace {

// kNextEpoch: every take (and bump) of the lease raises the epoch to at least the database clock's milliseconds
// since 1970, and by one when that is not higher. So epochs only grow, and a database restored from a backup
// (whose lease row holds an older, lower epoch) still leads at an epoch above any an agent remembers: agents
// refuse a lower epoch than the one they saw (docs/ha.md, "Epochs").
const std::string kNextEpoch =
    "epoch = GREATEST(epoch + 1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)";

}  // namespace

// ---- LeaseKeeper ------------------------------------------------------------------------------------------

LeaseKeeper::LeaseKeeper(PostgresStore& db, std::string holder, std::string advertise, std::chrono::milliseconds ttl)
    : db_(db),
      holder_(std::move(holder)),
      advertise_(std::move(advertise)),
      ttl_(std::to_string(ttl.count()) + " milliseconds") {}

// Read also watches the holder's lease session: while the database shows it (pg_stat_activity), the keeper
// remembers it with its own session's backend, so a later step sees the session end from the same session.
Result<LeaseKeeper::View> LeaseKeeper::Read() {
  auto rows = db_.Query(
      "SELECT advertise, epoch, expires_at > clock_timestamp(), holder, holder_pid, "
      "pid_holder = holder AND holder <> '' AND holder_pid <> 0, "
      "EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = l.holder_pid), pg_backend_pid() "
      "FROM gpupack_leader_lease l WHERE id = 1");
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return Status::Server("the lease row is missing from gpupack_leader_lease");
  const auto& r = (*rows)[0];
  View v;
  v.leader = r[0];
  v.epoch = std::stoll(r[1]);
  v.leader_alive = r[2] == "t";
  const bool recorded = v.leader_alive && r[3] != holder_ && r[5] == "t";
  if (recorded && r[6] == "t") {
    watched_ = Watched{r[3], r[1], r[4], r[7]};
  } else if (!(recorded && watched_ && watched_->holder == r[3] && watched_->epoch == r[1] && watched_->pid == r[4])) {
    watched_.reset();
  }
  // Else the session watched has ended since: kept, so the next step takes over (a step that came while the
  // ended backend was still exiting took nothing, and must not forget what it saw).
  return v;
}

Result<LeaseKeeper::View> LeaseKeeper::Step(int64_t held_epoch, bool bump, bool may_take) {
  if (held_epoch > 0) {
    // Renew (or raise the epoch of) the lease this replica holds, while it has not expired.
    auto rows = db_.Query(std::string("UPDATE gpupack_leader_lease SET ") + (bump ? kNextEpoch + ", " : "") +
                              "expires_at = clock_timestamp() + $3::interval, holder_pid = pg_backend_pid(), "
                              "pid_holder = $1 "
                              "WHERE id = 1 AND holder = $1 AND epoch = $2 AND expires_at > clock_timestamp() "
                              "RETURNING epoch",
                          {holder_, std::to_string(held_epoch), ttl_});
    if (!rows.ok()) return rows.status();
    if (!rows->empty()) {
      if (++held_steps_ % 10 == 0) {
        auto pruned = db_.Query(
            "DELETE FROM gpupack_changes WHERE at < clock_timestamp() - interval '60 seconds' "
            "AND seq < (SELECT change_seq FROM gpupack_leader_lease WHERE id = 1) - 1000");
        if (!pruned.ok()) spdlog::warn("leadership: cannot prune the change feed: {}", pruned.status().message());
      }
      return View{true, std::stoll((*rows)[0][0]), advertise_, true};
    }
  }
  if (!may_take) return Read();
  // Take the lease when it has expired; when the holder's lease session ended while this keeper watched it from
  // its same session (not a restart of the database, which ends every session, this one's too: the holder
  // crashed or lost its connection; the row still as watched); or, on this keeper's first step only, when it
  // names this replica's own URL (a restart of this server: the process that held it can no longer serve
  // there). Every take raises the epoch. `prev` says whether the lease taken had time left, for the log.
  const Watched w = watched_.value_or(Watched{"", "0", "0", "0"});
  auto rows = db_.Query(
      "WITH prev AS (SELECT expires_at > clock_timestamp() AS unexpired FROM gpupack_leader_lease WHERE id = 1) "
      "UPDATE gpupack_leader_lease l SET holder = $1, advertise = $2, " + kNextEpoch + ", "
      "expires_at = clock_timestamp() + $3::interval, holder_pid = pg_backend_pid(), pid_holder = $1 FROM prev "
      "WHERE l.id = 1 AND (l.expires_at <= clock_timestamp() "
      "OR ($4 AND l.advertise = $2 AND l.holder <> $1) "
      "OR ($5 AND l.holder = $6 AND l.epoch = $7::bigint AND l.holder_pid = $8::integer AND l.pid_holder = l.holder "
      "AND pg_backend_pid() = $9::integer AND NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $8::integer))) "
      "RETURNING l.epoch, prev.unexpired",
      {holder_, advertise_, ttl_, first_step_ ? "true" : "false", watched_ ? "true" : "false", w.holder, w.epoch,
       w.pid, w.own_pid});
  if (!rows.ok()) return rows.status();
  const bool first = first_step_;
  first_step_ = false;
  if (rows->empty()) return Read();
  if (watched_ && !first && (*rows)[0][1] == "t")
    spdlog::info("leadership: the leader's database session ended (backend {}): took the lease before its TTL",
                 w.pid);
  watched_.reset();
  return View{true, std::stoll((*rows)[0][0]), advertise_, true};
}

Status LeaseKeeper::Release(int64_t epoch) {
  auto rows = db_.Query(
      "UPDATE gpupack_leader_lease SET expires_at = '-infinity' WHERE id = 1 AND holder = $1 AND epoch = $2",
      {holder_, std::to_string(epoch)});
  return rows.ok() ? Status::Ok() : rows.status();
}

}  // namespace gpupack::api
