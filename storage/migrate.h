// Moving the whole state from one store to another: `gpupack migrate` (SQLite -> PostgreSQL, or back, or a
// restore of a backup) and `gpupack backup` of a PostgreSQL database into a SQLite file (docs/operations.md,
// "Day two").
//
// MigrateState reads the source as one consistent snapshot (Store::Load) and writes it to the target as one
// batch (Store::Commit: all of it or nothing), through the stores' own load and save code, so every table moves
// (clusters, task definitions, instances, tasks, client tokens, services) with its records byte for byte and
// its instances and tasks in their first-stored order. Before writing it checks what a server checks at start:
// every record decodes and the records agree with each other (CheckInvariants). After writing it reads the
// target back and compares it with the source, record by record.
//
// Pure functions over Store; thread-compatible.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "base/status.h"
#include "storage/store.h"

namespace gpupack {

// StateCounts: how many records of each kind a snapshot holds.
struct StateCounts {
  size_t clusters = 0, task_definitions = 0, instances = 0, tasks = 0, client_tokens = 0, services = 0;
  bool empty() const {
    return clusters + task_definitions + instances + tasks + client_tokens + services == 0;
  }
  // Describe: "2 clusters, 3 task definitions, 1 instance, 4 tasks, 0 client tokens, 1 service".
  std::string Describe() const;
  bool operator==(const StateCounts&) const = default;
};
StateCounts CountsOf(const Snapshot& snapshot);

// OpenStore opens `db` as the server's --db does: a postgres:// or postgresql:// URI is a PostgresStore, anything
// else a SqliteStore file (created when missing; a file a running server holds is refused, naming its pid).
Result<std::unique_ptr<Store>> OpenStore(const std::string& db);

struct MigrateOptions {
  // replace: a target that holds records is emptied and replaced (in the same transaction as the write);
  // otherwise such a target is refused (Status::Conflict) and left untouched.
  bool replace = false;
};

// MigrateState copies everything `from` holds into `to` (see above) and returns what it copied. Refused, with
// nothing written: a source that does not load or whose records contradict each other; a target that holds
// records (unless options.replace); a PostgreSQL target whose leader lease is held by a running server. A
// failed write leaves the target as it was; a read-back that differs from the source is a Status::Server.
Result<StateCounts> MigrateState(Store& from, Store& to, const MigrateOptions& options);

}  // namespace gpupack
