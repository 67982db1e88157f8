// The front ends' JSON dialects (api/ecs/ecs_dialect.h, api/logs/logs_dialect.h): base's reader in the words each
// front end answered before it used base's reader (the ECS codec's own getters; the Logs handler's wrapping of
// them), byte for byte.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "api/ecs/codec.h"
#include "api/ecs/ecs_dialect.h"
#include "api/ecs/parse.h"
#include "api/logs/logs_dialect.h"
#include "base/json_fields.h"

namespace gpupack::api {
namespace {

struct Case {
  const char* body;
  std::function<void(JsonFields&)> read;
  const char* message;  // "" when the read succeeds
};

void RunTable(const JsonDialect& words, const std::vector<Case>& cases, ErrorCode code) {
  for (const Case& c : cases) {
    const Json body = Json::parse(c.body);
    JsonFields f(body, JsonPath(), words);
    c.read(f);
    EXPECT_EQ(f.status().message(), c.message) << c.body;
    if (!f.ok()) {
      EXPECT_EQ(f.status().code(), code) << c.body;
    }
  }
}

TEST(LogsDialect, WordsAsTheHandlerAnswered) {
  std::optional<std::string> s;
  std::optional<int64_t> n;
  std::optional<bool> b;
  std::vector<std::string> list;
  auto limit = [&](JsonFields& f) { f.Int64("limit", n, 1, 10000); };
  RunTable(LogsDialect(), {
      {R"({"nextToken": null})", [&](JsonFields& f) { f.String("nextToken", s); }, ""},
      {R"({"nextToken": 5})", [&](JsonFields& f) { f.String("nextToken", s); }, "nextToken: expected a string, got a number"},
      {R"([1])", [&](JsonFields& f) { f.String("nextToken", s); }, "the request body must be a JSON object"},
      {R"({})", [&](JsonFields& f) { std::string r; f.String("logStreamName", r, true); },
       "1 validation error detected: logStreamName is required"},
      {R"({"limit": 0})", limit, "limit must be an integer from 1 to 10000"},
      {R"({"limit": 10001})", limit, "limit must be an integer from 1 to 10000"},
      {R"({"limit": 5.0})", limit, "limit: expected an integer, got a number with a fraction"},
      {R"({"limit": "5"})", limit, "limit: expected an integer, got a string"},
      {R"({"limit": 18446744073709551615})", limit, "limit: integer out of range"},
      {R"({"startFromHead": "yes"})", [&](JsonFields& f) { f.Bool("startFromHead", b); },
       "startFromHead: expected a boolean, got a string"},
      {R"({"logStreamNames": "a"})", [&](JsonFields& f) { f.Strings("logStreamNames", list, 1000); },
       "logStreamNames: expected a list, got a string"},
      {R"({"logStreamNames": ["a", 2]})", [&](JsonFields& f) { f.Strings("logStreamNames", list, 1000); },
       "logStreamNames[1]: expected a string, got a number"},
  }, ErrorCode::kInvalidParameter);
}

TEST(EcsDialect, WordsOfTheCodecAndTheParsers) {
  std::optional<int64_t> n;
  auto count = [&](JsonFields& f) { f.Int64("count", n, JsonFields::kInt32Min, JsonFields::kInt32Max); };
  RunTable(EcsDialect(), {
      {R"({"count": 3.0})", count, ""},
      {R"({"count": 3.5})", count, "count: expected an integer, got a number with a fraction"},
      {R"({"count": 2147483648})", count, "count: integer out of range"},
      {R"({"count": 1e300})", count, "count: integer out of range"},
      {R"({"count": true})", count, "count: expected an integer, got a boolean"},
  }, ErrorCode::kClient);

  auto message = [](const Status& s) { return s.message(); };
  auto td = [](const char* body) { return ParseRegisterTaskDefinition(Json::parse(body)).status(); };
  EXPECT_EQ(message(td(R"({"containerDefinitions": [{"cpu": "1"}]})")),
            "containerDefinitions[0].cpu: expected an integer, got a string");
  EXPECT_EQ(message(td(R"({"containerDefinitions": [1]})")), "containerDefinitions[0]: expected an object, got a number");
  EXPECT_EQ(message(td(R"({"containerDefinitions": [{"resourceRequirements": [{"sharingStrategy": {"nvidiaMps": {}}}]}]})")),
            "containerDefinitions[0].resourceRequirements[0].sharingStrategy.nvidiaMps: memory is required (MiB of GPU "
            "memory for the container)");
  EXPECT_EQ(message(td(R"({"cpu": 1.5})")), "cpu: expected a string, got a number with a fraction");
  EXPECT_EQ(message(td(R"({"requiresCompatibilities": ["a","b","c","d","e","f","g","h","i","j","k"]})")),
            "requiresCompatibilities: at most 10 entries are allowed");
  ASSERT_TRUE(ParseRegisterTaskDefinition(Json::parse(R"({"cpu": 18446744073709551615})")).ok());
  EXPECT_EQ(*ParseRegisterTaskDefinition(Json::parse(R"({"cpu": 18446744073709551615})"))->cpu, "18446744073709551615");

  const Status o = ParseTaskOverride(Json::parse(R"({"containerOverrides": [{"command": "ls"}]})"), "overrides").status();
  EXPECT_EQ(o.message(), "overrides.containerOverrides[0].command: expected a list, got a string");
  EXPECT_EQ(ParseAttributes(Json::parse(R"([{"value": "x"}])"), "attributes").status().message(),
            "attributes[0]: name is required");
  EXPECT_EQ(ParseAttributes(Json::parse(R"({})"), "attributes").status().message(),
            "attributes: expected a list, got an object");

  // The parsers: a missing or empty required string is InvalidParameter; the reader's type errors come first.
  const Status missing = ParseRunTask(Json::parse(R"({"cluster": "c"})")).status();
  EXPECT_EQ(missing.code(), ErrorCode::kInvalidParameter);
  EXPECT_EQ(missing.message(), "taskDefinition is required");
  EXPECT_EQ(ParseRunTask(Json::parse(R"({"taskDefinition": ""})")).status().message(), "taskDefinition is required");
  EXPECT_EQ(ParseRunTask(Json::parse(R"({"cluster": 1})")).status().message(), "cluster: expected a string, got a number");
  EXPECT_EQ(ParseRunTask(Json::parse(R"({"taskDefinition": "t", "count": 11})")).status().message(),
            "count must be between 1 and 10");
  EXPECT_EQ(ParseDescribeTasks(Json::parse(R"({"tasks": null})")).status().message(), "tasks must name at least one task");
  EXPECT_EQ(ParseDescribeTasks(Json::parse(R"({})")).status().message(), "tasks is required");
  EXPECT_EQ(ParseListClusters(Json::parse(R"({"maxResults": 0})")).status().message(),
            "maxResults must be between 1 and 100");
  // Members of nested values that are not objects read as absent.
  EXPECT_EQ(ParseRegisterContainerInstance(Json::parse(R"({"totalResources": [5]})")).status().message(),
            "totalResources[].name is required");
  EXPECT_EQ(ParseRegisterContainerInstance(
                Json::parse(R"({"totalResources": [{"name": 5}]})")).status().message(),
            "name: expected a string, got a number");
}

}  // namespace
}  // namespace gpupack::api
