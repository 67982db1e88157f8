#include "cli/ecs_model.h"

#include <utility>

namespace gpupack::cli {

namespace {

using Json = ModelJson;

const char* kAdded = "Added by gpupack aws-model: a field gpupack serves (docs/api.md).";

// kPatchedShapes: the shapes AddGpuSharingShapes adds members to; each must be an object with an object of
// members when the model has it.
constexpr const char* kPatchedShapes[] = {"ResourceRequirement", "Container", "ContainerInstance", "PlatformDevice"};

// AddMember adds `member` (of shape `shape`) to structure `owner` unless it has one; true when added.
bool AddMember(Json& shapes, const std::string& owner, const std::string& member, const std::string& shape) {
  Json& members = shapes[owner]["members"];
  if (members.contains(member)) return false;
  members[member] = {{"shape", shape}, {"documentation", kAdded}};
  return true;
}

// AddShape adds a shape unless the model has one of that name.
void AddShape(Json& shapes, const std::string& name, Json shape) {
  if (!shapes.contains(name)) shapes[name] = std::move(shape);
}

}  // namespace

bool IsPlainApiVersion(std::string_view v) {
  if (v.size() != 10 || v[4] != '-' || v[7] != '-') return false;
  for (size_t i = 0; i < v.size(); ++i)
    if (i != 4 && i != 7 && (v[i] < '0' || v[i] > '9')) return false;
  return true;
}

Result<ModelJson> ReadEcsModel(std::string_view text, const std::string& source) {
  auto bad = [&source](const std::string& what) {
    return Status::InvalidParameter(source + " is not an ECS service model that can be patched: " + what);
  };
  // The parser is iterative; what nests too deep is cut off as it is read (not built), so neither this check nor
  // the dump and destruction after it ever recurse deeply.
  bool too_deep = false;
  const Json::parser_callback_t depth_check = [&too_deep](int depth, Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxModelDepth) {
      too_deep = true;
      return false;
    }
    return true;
  };
  Json model = Json::parse(text.begin(), text.end(), depth_check, /*allow_exceptions=*/false);
  if (too_deep) return bad("it nests deeper than " + std::to_string(kMaxModelDepth) + " levels");
  if (model.is_discarded()) return bad("it is not JSON");
  if (!model.is_object()) return bad("it is not a JSON object");
  const auto metadata = model.find("metadata");
  if (metadata == model.end() || !metadata->is_object()) return bad("it has no \"metadata\" object");
  const auto prefix = metadata->find("endpointPrefix");
  if (prefix == metadata->end() || !prefix->is_string() || *prefix != "ecs")
    return bad("its metadata.endpointPrefix is not \"ecs\"");
  const auto version = metadata->find("apiVersion");
  if (version == metadata->end() || !version->is_string())
    return bad("its metadata.apiVersion is not a string");
  if (!IsPlainApiVersion(version->get_ref<const std::string&>())) {
    std::string shown = version->get<std::string>().substr(0, 64);
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return bad("its metadata.apiVersion '" + shown + "' is not a date YYYY-MM-DD");
  }
  const auto shapes = model.find("shapes");
  if (shapes == model.end() || !shapes->is_object()) return bad("it has no \"shapes\" object");
  for (const char* name : kPatchedShapes) {
    const auto shape = shapes->find(name);
    if (shape == shapes->end()) continue;
    if (!shape->is_object()) return bad("shapes." + std::string(name) + " is not an object");
    if (const auto members = shape->find("members"); members != shape->end() && !members->is_object())
      return bad("shapes." + std::string(name) + ".members is not an object");
    if (const auto required = shape->find("required"); required != shape->end() && !required->is_array())
      return bad("shapes." + std::string(name) + ".required is not an array");
  }
  return model;
}

std::vector<std::string> AddGpuSharingShapes(ModelJson& model) {
  Json& shapes = model["shapes"];
  AddShape(shapes, "gpupackInteger", {{"type", "integer"}, {"box", true}});
  AddShape(shapes, "gpupackBoolean", {{"type", "boolean"}, {"box", true}});
  AddShape(shapes, "gpupackString", {{"type", "string"}});
  AddShape(shapes, "NvidiaMpsAllocation",
           {{"type", "structure"},
            {"required", {"memory"}},
            {"members",
             {{"memory", {{"shape", "gpupackInteger"}, {"documentation", "GPU memory in MiB, on one GPU."}}},
              {"maxComputePercent",
               {{"shape", "gpupackInteger"}, {"documentation", "Compute ceiling, 1..100 (omitted: 100)."}}}}},
            {"documentation", kAdded}});
  AddShape(shapes, "SharingStrategy",
           {{"type", "structure"},
            {"members", {{"nvidiaMps", {{"shape", "NvidiaMpsAllocation"}}}}},
            {"documentation", kAdded}});
  AddShape(shapes, "GpuSharingMode", {{"type", "string"}, {"enum", {"IDLE", "NVIDIA_MPS", "DEDICATED"}}});
  AddShape(shapes, "GpuDevice",
           {{"type", "structure"},
            {"members",
             {{"gpuId", {{"shape", "gpupackString"}}},
              {"sharingMode", {{"shape", "GpuSharingMode"}}},
              {"totalMemoryInMiB", {{"shape", "gpupackInteger"}}},
              {"remainingMemoryInMiB", {{"shape", "gpupackInteger"}}},
              {"containerCount", {{"shape", "gpupackInteger"}}},
              {"heldAfterFault", {{"shape", "gpupackBoolean"}}}}},
            {"documentation", kAdded}});
  AddShape(shapes, "GpuDevices", {{"type", "list"}, {"member", {{"shape", "GpuDevice"}}}});
  AddShape(shapes, "GpuInfo",
           {{"type", "structure"},
            {"members", {{"memoryInMiB", {{"shape", "gpupackInteger"}}}}},
            {"documentation", kAdded}});

  std::vector<std::string> added;
  auto add = [&](const std::string& owner, const std::string& member, const std::string& shape) {
    if (AddMember(shapes, owner, member, shape)) added.push_back(owner + "." + member);
  };
  add("ResourceRequirement", "sharingStrategy", "SharingStrategy");
  add("Container", "gpuSharingStrategy", "SharingStrategy");
  add("ContainerInstance", "gpuDevices", "GpuDevices");
  add("PlatformDevice", "gpuInfo", "GpuInfo");
  // A shared GPU requirement has no value: the model must not require one.
  Json& rr = shapes["ResourceRequirement"];
  if (rr.contains("required")) {
    Json required = Json::array();
    for (const auto& r : rr["required"])
      if (r != "value") required.push_back(r);
    if (required.size() != rr["required"].size()) added.push_back("ResourceRequirement.value optional");
    rr["required"] = std::move(required);
  }
  return added;
}

std::filesystem::path ModelPath(const std::filesystem::path& models_dir, const ModelJson& model) {
  return models_dir / "ecs" / model["metadata"]["apiVersion"].get<std::string>() / "service-2.json";
}

}  // namespace gpupack::cli
