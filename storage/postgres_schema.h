// The PostgreSQL store's schema (storage/postgres_store.h): its migrations, as SQL scripts. Kept apart from the
// store's connection, load and commit code so that the schema's history reads as one file.
#pragma once

#include <span>
#include <string_view>

namespace gpupack::storage_internal {

// PgMigrations()[i] brings the schema from version i to version i + 1; each runs in one transaction together
// with the gpupack_schema_version row that records it. Append only: never edit a script that has shipped.
std::span<const std::string_view> PgMigrations();

}  // namespace gpupack::storage_internal
