// The ECS front end's request readers, shared by the parsers of api/ecs/parse.cc and parse_services.cc: the
// field reader in ECS's words and the checks ECS applies to every request (texts, tags, references, pages).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/ecs/ecs_dialect.h"
#include "base/json_fields.h"
#include "base/status.h"
#include "engine/core/requests.h"

namespace gpupack::api {

using Json = nlohmann::json;

// kMaxDescribe: the most references a Describe call takes (100).
inline constexpr size_t kMaxDescribe = 100;

bool HasControlCharacter(const std::string& s);
// CheckText: an optional free-text field of at most `max` characters without control characters.
Status CheckText(const std::optional<std::string>& v, const std::string& key, size_t max);
// CheckTags: at most 50 tags per resource, keys 1-128 and values 0-256 characters; no control characters
// unless `control_ok` (task definitions, whose tags were stored with them before this rule).
Status CheckTags(const std::vector<KeyValuePair>& tags, bool control_ok = false);

// Fields: the reader of one request body (or a member object of it), in ECS's words (ecs_dialect.h). Each parser
// reads its members in the order it checks them and returns the first problem, the reader's or its own.
struct Fields : JsonFields {
  explicit Fields(const Json& in) : JsonFields(in.is_object() ? in : Empty(), JsonPath(), EcsDialect()) {}

  // Empty: what a member object that is not an object reads as (its members are all absent).
  static const Json& Empty() {
    static const Json empty = Json::object();
    return empty;
  }
  // Int32: an optional integer within int32 (ECS's Integer). Text: an optional string.
  void Int32(const char* key, std::optional<int64_t>& out) { Int64(key, out, kInt32Min, kInt32Max); }
  std::optional<int64_t> Int32(const char* key) {
    std::optional<int64_t> out;
    Int32(key, out);
    return out;
  }
  std::optional<std::string> Text(const char* key) {
    std::optional<std::string> out;
    String(key, out);
    return out;
  }
  // StringList: an optional list of at most 1,000 strings.
  std::vector<std::string> StringList(const char* key) {
    std::vector<std::string> out;
    Strings(key, out, 1000);
    return out;
  }
};

// RequireString: `key` is a string that is not empty ("KEY is required" when absent, null or "").
Status RequireString(Fields& f, const char* key, std::string& out);
// RequireRefs: `key` is required and names 1 to 100 resources (a Describe call).
Status RequireRefs(Fields& f, const char* key, const std::string& what, std::vector<std::string>& out);
// OptionalRef: `key`, when present, is a string (a cluster, an instance).
Status OptionalRef(Fields& f, const char* key, std::string& out);
// ParsePage: maxResults 1..100 (default 100) and a nextToken this server issued ("gp1.<hex offset>").
Result<PageRequest> ParsePage(Fields& f);

}  // namespace gpupack::api
