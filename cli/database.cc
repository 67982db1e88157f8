// `gpupack backup` and `gpupack migrate`: the server's database copied, online (backup) or whole from one
// database to another (migrate). Wiring only: the work is SqliteStore::Backup and storage/migrate.h.
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "storage/migrate.h"
#include "storage/postgres_store.h"
#include "storage/sqlite_store.h"

namespace gpupack::cli {
namespace {

std::string Shown(const std::string& db) { return PostgresStore::IsUri(db) ? PostgresStore::Redacted(db) : db; }

int Fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "gpupack: %s\n", message.c_str());
  return code;
}

// RemoveSqliteFiles: a SQLite database this command created, with its WAL, shared memory and lock files.
void RemoveSqliteFiles(const std::string& path) {
  std::error_code ignored;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(path + suffix, ignored);
  std::filesystem::remove(SqliteStore::LockPath(path), ignored);
}

// Copy: MigrateState from `from` to `to`; a SQLite target this call creates is removed again on failure, and
// its lock file on success (the copy is a plain file until a server opens it).
Result<StateCounts> Copy(const std::string& from, const std::string& to, bool force) {
  const bool new_file = !PostgresStore::IsUri(to) && !std::filesystem::exists(to);
  auto source = OpenStore(from);
  if (!source.ok()) return Status::Server("cannot open the source " + Shown(from) + ": " + source.status().message());
  auto target = OpenStore(to);
  if (!target.ok()) {
    if (new_file && target.status().code() != ErrorCode::kConflict) RemoveSqliteFiles(to);
    return Status::Server("cannot open the target " + Shown(to) + ": " + target.status().message());
  }
  auto copied = MigrateState(**source, **target, MigrateOptions{.replace = force});
  target->reset();
  if (new_file) {
    if (copied.ok()) {
      std::error_code ignored;
      std::filesystem::remove(SqliteStore::LockPath(to), ignored);
    } else {
      RemoveSqliteFiles(to);
    }
  }
  return copied;
}

}  // namespace

void AddBackupFlags(CLI::App& app, BackupFlags& f) {
  app.add_option("--db", f.db, "the server's database: a SQLite file, or a postgres:// URI")->capture_default_str();
  app.add_option("--to", f.to, "the new SQLite file to write the copy to (must not exist)")->required();
}

int RunBackup(const BackupFlags& f) {
  if (PostgresStore::IsUri(f.db)) {
    // One read transaction of the PostgreSQL database, written into a new SQLite file that any server (or
    // `gpupack migrate --from FILE --to postgres://...`) can load.
    if (std::filesystem::exists(f.to)) return Fail(f.to + " already exists: a backup never overwrites a file");
    auto copied = Copy(f.db, f.to, false);
    if (!copied.ok()) return Fail("backup of " + Shown(f.db) + " failed: " + copied.status().message());
    std::printf("backed up %s to %s (%s; the copy loads)\n", Shown(f.db).c_str(), f.to.c_str(),
                copied->Describe().c_str());
    return 0;
  }
  size_t tasks = 0;
  if (Status s = SqliteStore::Backup(f.db, f.to, &tasks); !s.ok()) return Fail(s.message());
  std::printf("backed up %s to %s (%zu tasks; the copy opens and loads)\n", f.db.c_str(), f.to.c_str(), tasks);
  return 0;
}

void AddMigrateFlags(CLI::App& app, MigrateFlags& f) {
  app.add_option("--from", f.from, "the database to copy: a SQLite file (sqlite:PATH or PATH) or a postgres:// URI")
      ->required();
  app.add_option("--to", f.to, "the database to write: a SQLite file (created when missing) or a postgres:// URI")
      ->required();
  app.add_flag("--force", f.force, "replace everything the target holds (without it a target with records is refused)");
  app.footer(
      "Stop every server on both databases first. The source is read as one snapshot and written to the target in "
      "one transaction, then read back and compared; a failure leaves the target as it was. "
      "See docs/operations.md, \"Day two\".\n");
}

int RunMigrate(const MigrateFlags& flags) {
  auto strip = [](std::string db) { return db.rfind("sqlite:", 0) == 0 ? db.substr(7) : db; };
  const std::string from = strip(flags.from), to = strip(flags.to);
  if (from.empty() || to.empty()) return Fail("--from and --to each name a database (see gpupack migrate --help)", 2);
  if (from == to) return Fail("--from and --to name the same database", 2);
  if (!PostgresStore::IsUri(from) && !std::filesystem::exists(from))
    return Fail("the source " + from + " does not exist");
  auto copied = Copy(from, to, flags.force);
  if (!copied.ok()) return Fail("migrate: " + copied.status().message());
  std::printf("migrated %s to %s: %s\n", Shown(from).c_str(), Shown(to).c_str(), copied->Describe().c_str());
  return 0;
}

}  // namespace gpupack::cli
