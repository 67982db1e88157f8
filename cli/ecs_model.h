// The ECS service model that `gpupack aws-model` installs (cli/aws_model.cc): reading one (botocore's, or a file
// the user names) without trusting it, adding gpupack's GPU-sharing shapes, and the path it goes to. A library
// apart from the command so that the unit tests and the fuzz target (tests/fuzz/targets.h, "ecs_model") reach it.
//
// The input is any bytes: a model that is not JSON, nests deeper than kMaxModelDepth, is not an ECS service model
// (metadata.endpointPrefix "ecs"), names an API version that is not a plain date (YYYY-MM-DD: it becomes a
// directory name, so "../x" or "/etc" must never get through), or whose shapes the patch touches have another
// type than a service model gives them is refused with a Status saying what is wrong; nothing throws or aborts.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace gpupack::cli {

using ModelJson = nlohmann::ordered_json;

// kMaxModelDepth: the deepest nesting of objects and arrays a model may have (botocore's ECS model: 5).
inline constexpr int kMaxModelDepth = 64;

// IsPlainApiVersion: `version` is YYYY-MM-DD (AWS's API versions, e.g. ECS's 2014-11-13, Logs' 2014-03-28).
bool IsPlainApiVersion(std::string_view version);

// ReadEcsModel parses `text` and checks it as above; `source` names it in messages ("the botocore of python3",
// a file name). kInvalidParameter when refused.
Result<ModelJson> ReadEcsModel(std::string_view text, const std::string& source);

// AddGpuSharingShapes adds to an ECS service model what gpupack serves beyond it: sharingStrategy on
// ResourceRequirement (whose value becomes optional), gpuSharingStrategy on Container, gpuDevices on
// ContainerInstance, gpuInfo on PlatformDevice. Idempotent. Returns the members added ("Shape.member"). The model
// must be one ReadEcsModel accepted.
std::vector<std::string> AddGpuSharingShapes(ModelJson& model);

// ModelPath: where the model goes under `models_dir`: <models_dir>/ecs/<apiVersion>/service-2.json (what `aws
// configure add-model` writes). The model must be one ReadEcsModel accepted.
std::filesystem::path ModelPath(const std::filesystem::path& models_dir, const ModelJson& model);

}  // namespace gpupack::cli
