// `gpupack aws-model`'s model reader (cli/ecs_model.h) on hostile input: a model whose API version would lead
// the install out of ~/.aws/models, one whose shapes have the wrong types, and one that nests without end are
// refused with a message saying what is wrong, never a crash; a real-looking model is patched once, idempotently,
// and goes to <dir>/ecs/<version>/service-2.json. The fuzz target "ecs_model" (tests/fuzz/targets.h) runs the same
// reader over its corpus in fuzz_regressions_test.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli/ecs_model.h"

namespace gpupack::cli {
namespace {

// Model: a minimal ECS model whose metadata.apiVersion is `version` and whose "shapes" is `shapes` (JSON text).
std::string Model(const std::string& version, const std::string& shapes = "{}") {
  return R"({"metadata":{"apiVersion":)" + version + R"(,"endpointPrefix":"ecs"},"shapes":)" + shapes + "}";
}

TEST(EcsModelTest, RefusesEveryMalformedModelSayingWhy) {
  struct Case {
    const char* what;
    std::string text;
    std::string message;  // the part after "<source> is not an ECS service model that can be patched: "
  };
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const std::vector<Case> cases = {
      {"not JSON", "{", "it is not JSON"},
      {"an array", "[]", "it is not a JSON object"},
      {"no metadata", R"({"shapes":{}})", "it has no \"metadata\" object"},
      {"metadata an array", R"({"metadata":["ecs"],"shapes":{}})", "it has no \"metadata\" object"},
      {"another service", R"({"metadata":{"apiVersion":"2014-03-28","endpointPrefix":"logs"},"shapes":{}})",
       "its metadata.endpointPrefix is not \"ecs\""},
      {"prefix a number", R"({"metadata":{"apiVersion":"2014-11-13","endpointPrefix":1},"shapes":{}})",
       "its metadata.endpointPrefix is not \"ecs\""},
      {"version a path up", Model(R"("../../../x")"), "its metadata.apiVersion '../../../x' is not a date YYYY-MM-DD"},
      {"version absolute", Model(R"("/etc/cron.d")"), "its metadata.apiVersion '/etc/cron.d' is not a date"},
      {"version a date and more", Model(R"("2014-11-13/../../x")"), "is not a date YYYY-MM-DD"},
      {"version short", Model(R"("2014-1-13")"), "is not a date YYYY-MM-DD"},
      {"version empty", Model(R"("")"), "is not a date YYYY-MM-DD"},
      {"version with a newline", Model(R"("2014-11-1\n")"), "its metadata.apiVersion '2014-11-1?' is not a date"},
      {"version a number", Model("20141113"), "its metadata.apiVersion is not a string"},
      {"no version", R"({"metadata":{"endpointPrefix":"ecs"},"shapes":{}})", "its metadata.apiVersion is not a string"},
      {"shapes an array", Model(R"("2014-11-13")", "[]"), "it has no \"shapes\" object"},
      {"no shapes", R"({"metadata":{"apiVersion":"2014-11-13","endpointPrefix":"ecs"}})", "it has no \"shapes\" object"},
      {"a patched shape an array", Model(R"("2014-11-13")", R"({"Container":[1]})"),
       "shapes.Container is not an object"},
      {"members a string", Model(R"("2014-11-13")", R"({"PlatformDevice":{"members":"x"}})"),
       "shapes.PlatformDevice.members is not an object"},
      {"required a string", Model(R"("2014-11-13")", R"({"ResourceRequirement":{"required":"value"}})"),
       "shapes.ResourceRequirement.required is not an array"},
      {"nested past the bound", Model(R"("2014-11-13")", R"({"X":)" + std::string(64, '[') + std::string(64, ']') + "}"),
       "it nests deeper than 64 levels"},
      {"nested 200000 deep", Model(R"("2014-11-13")", R"({"X":)" + deep + "}"), "it nests deeper than 64 levels"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto model = ReadEcsModel(c.text, "model.json");
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), ErrorCode::kInvalidParameter);
    const std::string& m = model.status().message();
    EXPECT_EQ(m.rfind("model.json is not an ECS service model that can be patched: ", 0), 0u) << m;
    EXPECT_NE(m.find(c.message), std::string::npos) << m;
  }
}

TEST(EcsModelTest, APlainApiVersionIsADate) {
  for (const char* good : {"2014-11-13", "2014-03-28", "0000-00-00"}) EXPECT_TRUE(IsPlainApiVersion(good)) << good;
  for (const char* bad : {"", "2014-11-1", "2014-11-133", "2014/11/13", "..", "../../../x", "2014-11-1a", " 2014-11-1"})
    EXPECT_FALSE(IsPlainApiVersion(bad)) << bad;
}

TEST(EcsModelTest, AModelIsPatchedOnceAndInstalledUnderTheModelsDirectory) {
  const std::string text = Model(R"("2014-11-13")", R"({
      "ResourceRequirement": {"type": "structure", "required": ["value", "type"], "members": {"value": {"shape": "S"}}},
      "Container": {"type": "structure", "members": {"name": {"shape": "S"}}},
      "PlatformDevice": {"type": "structure", "members": {}},
      "S": {"type": "string"}})");
  auto model = ReadEcsModel(text, "model.json");
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(AddGpuSharingShapes(*model),
            (std::vector<std::string>{"ResourceRequirement.sharingStrategy", "Container.gpuSharingStrategy",
                                      "ContainerInstance.gpuDevices", "PlatformDevice.gpuInfo",
                                      "ResourceRequirement.value optional"}));
  EXPECT_EQ((*model)["shapes"]["ResourceRequirement"]["required"], ModelJson::array({"type"}));
  EXPECT_TRUE(AddGpuSharingShapes(*model).empty());  // idempotent
  EXPECT_EQ(ModelPath("/home/u/.aws/models", *model), "/home/u/.aws/models/ecs/2014-11-13/service-2.json");
  auto again = ReadEcsModel(model->dump(1), "patched");  // what is installed reads back
  EXPECT_TRUE(again.ok()) << again.status().message();
}

}  // namespace
}  // namespace gpupack::cli
