#include "scheduler/host_settings.h"

#include <iterator>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace gpupack {

namespace {

using Json = nlohmann::json;

// The container definition fields ECS's agent maps onto the host (HostConfig) or the container's identity, and
// the task's. None is honoured by gpupack's runtimes: the process runtime starts a command on the agent's host
// as its configured unprivileged user, and the docker runtime creates the container with the environment, the
// MPS pipe directory, IpcMode host, the agent's network and the memory and CPU limits alone.
constexpr std::string_view kContainerFields[] = {
    "user",        "privileged",  "readonlyRootFilesystem", "linuxParameters", "mountPoints",
    "volumesFrom", "ulimits",     "dockerSecurityOptions",  "systemControls",  "extraHosts",
    "dnsServers",  "dnsSearchDomains", "hostname",          "links",           "portMappings",
    "disableNetworking",
};
constexpr std::string_view kTaskFields[] = {"volumes", "pidMode", "ipcMode"};

// Asks: whether a field's value asks for anything (false, null, "", [] and {} do not).
bool Asks(const Json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  if (v.is_array() || v.is_object()) return !v.empty();
  return true;
}

std::string Why(std::string_view field) {
  if (field == "user")
    return "gpupack runs every task as the agent's --task-user (an unprivileged user by default), not as a user "
           "the task names";
  if (field == "networkMode")
    return "gpupack runs containers on the agent's network (the host's for the process runtime, the agent's "
           "docker network for the docker runtime), never on an interface of their own";
  return "gpupack's runtimes would start the task without it";
}

Status Refuse(const std::string& path, std::string_view field) {
  return Status::Client("Invalid '" + std::string(field) + "' setting for task definition: " + path +
                        " is not supported; " + Why(field) + ". Remove it (docs/security.md, \"Host settings of "
                        "task definitions\").");
}

Status Check(const std::string& extra_json, std::string_view at, const std::string_view* fields, size_t n) {
  if (extra_json.empty()) return Status::Ok();
  const Json extra = Json::parse(extra_json, nullptr, false);
  if (!extra.is_object()) return Status::Ok();
  for (size_t i = 0; i < n; ++i) {
    auto it = extra.find(std::string(fields[i]));
    if (it != extra.end() && Asks(*it))
      return Refuse(at.empty() ? std::string(fields[i]) : std::string(at) + "." + std::string(fields[i]), fields[i]);
  }
  return Status::Ok();
}

}  // namespace

Status RefuseHostSettings(const TaskDefinition& td) {
  GP_TRY(Check(td.extra_json, "", kTaskFields, std::size(kTaskFields)));
  // awsvpc gives each task a network interface of its own, which no gpupack runtime makes.
  if (td.network_mode == "awsvpc") return Refuse("networkMode", "networkMode");
  for (size_t i = 0; i < td.containers.size(); ++i)
    GP_TRY(Check(td.containers[i].extra_json, "containerDefinitions[" + std::to_string(i) + "]", kContainerFields,
                 std::size(kContainerFields)));
  return Status::Ok();
}

}  // namespace gpupack
