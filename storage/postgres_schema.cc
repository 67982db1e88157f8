#include "storage/postgres_schema.h"

#include <array>

namespace gpupack::storage_internal {
namespace {

// kPgMigrations[i] brings the schema from version i to version i + 1; each runs in one transaction together with
// the gpupack_schema_version row that records it. Append only: never edit a script that has shipped.
//
// Instances and tasks carry `seq` (bigserial) that upserts keep, so Load returns them in first-stored order.
// gpupack_leader_lease holds exactly one row (id 1): the leader's name, the URL it serves on, its epoch (raised
// by every takeover) and when its lease ends by the database's clock; epoch 0 is "nobody has led yet".
constexpr std::array<std::string_view, 5> kPgMigrations = {
    // 0 -> 1: the initial schema.
    R"sql(
CREATE TABLE clusters (
  name text PRIMARY KEY,
  doc  text NOT NULL
);
CREATE TABLE task_definitions (
  family   text NOT NULL,
  revision integer NOT NULL,
  doc      text NOT NULL,
  PRIMARY KEY (family, revision)
);
CREATE TABLE container_instances (
  seq bigserial PRIMARY KEY,
  arn text NOT NULL UNIQUE,
  doc text NOT NULL
);
CREATE TABLE tasks (
  seq bigserial PRIMARY KEY,
  arn text NOT NULL UNIQUE,
  doc text NOT NULL
);
CREATE TABLE client_tokens (
  cluster text NOT NULL,
  token   text NOT NULL,
  doc     text NOT NULL,
  PRIMARY KEY (cluster, token)
);
CREATE TABLE gpupack_leader_lease (
  id         smallint PRIMARY KEY CHECK (id = 1),
  holder     text NOT NULL,
  advertise  text NOT NULL,
  epoch      bigint NOT NULL,
  expires_at timestamptz NOT NULL
);
INSERT INTO gpupack_leader_lease (id, holder, advertise, epoch, expires_at) VALUES (1, '', '', 0, '-infinity');
)sql",
    // 1 -> 2: services.
    R"sql(
CREATE TABLE services (
  arn text PRIMARY KEY,
  doc text NOT NULL
);
)sql",
    // 2 -> 3: capacity providers (tasks waiting for capacity are rows of tasks).
    R"sql(
CREATE TABLE capacity_providers (
  name text PRIMARY KEY,
  doc  text NOT NULL
);
)sql",
    // 3 -> 4: the change feed standbys follow (storage/change_feed.h): the lease row counts commits (gapless: the
    // counter moves inside each commit's transaction, under the fence's row lock) and each commit's changes are
    // one row of gpupack_changes, pruned by the leader once old.
    R"sql(
ALTER TABLE gpupack_leader_lease ADD COLUMN change_seq bigint NOT NULL DEFAULT 0;
CREATE TABLE gpupack_changes (
  seq bigint PRIMARY KEY,
  at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  doc text NOT NULL
);
)sql",
    // 4 -> 5: the backend of the holder's lease connection (pg_backend_pid()), and the holder that wrote it, so a
    // standby that sees that session end takes over at once instead of after the TTL (api/leadership.h,
    // LeaseKeeper). A holder of an older version never writes them: pid_holder then names someone else.
    R"sql(
ALTER TABLE gpupack_leader_lease ADD COLUMN holder_pid integer NOT NULL DEFAULT 0;
ALTER TABLE gpupack_leader_lease ADD COLUMN pid_holder text NOT NULL DEFAULT '';
)sql",
};

}  // namespace

std::span<const std::string_view> PgMigrations() { return kPgMigrations; }

}  // namespace gpupack::storage_internal
