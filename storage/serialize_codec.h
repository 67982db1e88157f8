// The storage documents' codec, shared by serialize.cc (clusters, task definitions, instances, tasks, clientToken
// records) and serialize_services.cc (services): each stored type has an Enc (model -> JSON) and a Read (a stored
// object's members -> model), overloads that call each other through the declarations below. Internal to
// storage/: the rest of the server uses ToDoc/FromDoc (storage/serialize.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/json_fields.h"
#include "scheduler/model.h"

namespace gpupack::storage_internal {

using json = nlohmann::json;

// StoreDialect: the stores' words for a document that does not match the model (serialize.cc).
const JsonDialect& StoreDialect();

// ---- forward declarations: the overload sets call each other (vectors of structs, structs of structs).

json Enc(const std::string& v);
json Enc(int64_t v);
json Enc(int v);
json Enc(bool v);
json Enc(GpuMode v);
json Enc(TaskStatus v);
json Enc(InstanceStatus v);
json Enc(LifecycleStatus v);
json Enc(const MpsSharing& v);
json Enc(const ResourceRequirement& v);
json Enc(const KeyValuePair& v);
json Enc(const ContainerDefinition& v);
json Enc(const PlacementConstraint& v);
json Enc(const TaskDefinition& v);
json Enc(const ClusterSettings& v);
json Enc(const Cluster& v);
json Enc(const Gpu& v);
json Enc(const Resources& v);
json Enc(const Attribute& v);
json Enc(const ContainerInstance& v);
json Enc(const ContainerOverride& v);
json Enc(const TaskOverride& v);
json Enc(const Container& v);
json Enc(const GpuReservation& v);
json Enc(const Task& v);
json Enc(const ClientTokenRecord& v);
json Enc(ServiceStatus v);
json Enc(RolloutState v);
json Enc(const PlacementStrategy& v);
json Enc(const DeploymentConfiguration& v);
json Enc(const ServiceDeployment& v);
json Enc(const ServiceEvent& v);
json Enc(const Service& v);
json Enc(CapacityProviderStatus v);
json Enc(const CapacityProviderStrategyItem& v);
json Enc(const CapacityProvider& v);
template <typename T>
json Enc(const std::vector<T>& v);

// Dec reads the value `j` at `at` into `out`, keeping a problem in `f`; Read reads a stored object's members.
void Dec(JsonFields& f, const json& j, const JsonPath& at, std::string& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, int64_t& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, int& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, bool& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, GpuMode& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, TaskStatus& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, InstanceStatus& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, LifecycleStatus& out);
void Read(JsonFields& o, MpsSharing& out);
void Read(JsonFields& o, ResourceRequirement& out);
void Read(JsonFields& o, KeyValuePair& out);
void Read(JsonFields& o, ContainerDefinition& out);
void Read(JsonFields& o, PlacementConstraint& out);
void Read(JsonFields& o, TaskDefinition& out);
void Read(JsonFields& o, ClusterSettings& out);
void Read(JsonFields& o, Cluster& out);
void Read(JsonFields& o, Gpu& out);
void Read(JsonFields& o, Resources& out);
void Read(JsonFields& o, Attribute& out);
void Read(JsonFields& o, ContainerInstance& out);
void Read(JsonFields& o, ContainerOverride& out);
void Read(JsonFields& o, TaskOverride& out);
void Read(JsonFields& o, Container& out);
void Read(JsonFields& o, GpuReservation& out);
void Read(JsonFields& o, Task& out);
void Read(JsonFields& o, ClientTokenRecord& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, ServiceStatus& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, RolloutState& out);
void Read(JsonFields& o, PlacementStrategy& out);
void Read(JsonFields& o, DeploymentConfiguration& out);
void Read(JsonFields& o, ServiceDeployment& out);
void Read(JsonFields& o, ServiceEvent& out);
void Read(JsonFields& o, Service& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, CapacityProviderStatus& out);
void Read(JsonFields& o, CapacityProviderStrategyItem& out);
void Read(JsonFields& o, CapacityProvider& out);
template <typename T>
void Dec(JsonFields& f, const json& j, const JsonPath& at, std::vector<T>& out);
template <typename T>
void Dec(JsonFields& f, const json& j, const JsonPath& at, std::optional<T>& out);
template <typename T>
  requires requires(JsonFields& o, T& v) { Read(o, v); }
void Dec(JsonFields& f, const json& j, const JsonPath& at, T& out);


// Obj builds one JSON object; an absent optional writes no key.
class ObjWriter {
 public:
  template <typename T>
  ObjWriter& Put(const char* key, const T& v) {
    j_[key] = Enc(v);
    return *this;
  }
  template <typename T>
  ObjWriter& Put(const char* key, const std::optional<T>& v) {
    if (v) j_[key] = Enc(*v);
    return *this;
  }
  json Done() { return std::move(j_); }

 private:
  json j_ = json::object();
};

template <typename T>
json Enc(const std::vector<T>& v) {
  json a = json::array();
  for (const auto& e : v) a.push_back(Enc(e));
  return a;
}

// Members reads the members of one stored object with Dec, chained: a missing (or null) member leaves its field
// at its default.
struct Members {
  JsonFields& o;
  template <typename T>
  Members& Get(const char* key, T& out) {
    if (const json* v = o.Get(key)) Dec(o, *v, JsonPath(o.path(), key), out);
    return *this;
  }
};

// DecStatus reads a status stored as its ECS name; any other string is an error naming the field and the string.
template <typename E>
void DecStatus(JsonFields& f, const json& j, const JsonPath& at, std::optional<E> (*parse)(std::string_view),
               const char* what, E& out) {
  std::string s;
  if (!f.StringValue(j, at, s)) return;
  const std::optional<E> v = parse(s);
  if (!v) return f.Fail(at.str(), std::string("unknown ") + what + " '" + s + "'");
  out = *v;
}


template <typename T>
void Dec(JsonFields& f, const json& j, const JsonPath& at, std::vector<T>& out) {
  if (!f.ArrayValue(j, at)) return;
  out.clear();
  out.reserve(j.size());
  for (size_t i = 0; i < j.size() && f.ok(); ++i) {
    T e{};
    Dec(f, j[i], JsonPath(at, i), e);
    out.push_back(std::move(e));
  }
}

template <typename T>
void Dec(JsonFields& f, const json& j, const JsonPath& at, std::optional<T>& out) {
  T v{};
  Dec(f, j, at, v);
  if (f.ok()) out = std::move(v);
}

// A stored object: its members into `out`, the first problem into `f`.
template <typename T>
  requires requires(JsonFields& o, T& v) { Read(o, v); }
void Dec(JsonFields& f, const json& j, const JsonPath& at, T& out) {
  JsonFields o(j, at, StoreDialect());
  Read(o, out);
  f.Take(o.status());
}

template <typename T>
std::string Dump(const T& v) {
  // replace: a string that is not valid UTF-8 must not make a whole group commit fail.
  return Enc(v).dump(-1, ' ', false, json::error_handler_t::replace);
}

template <typename T>
Status Parse(std::string_view doc, T* out) {
  json j;
  try {
    j = json::parse(doc.begin(), doc.end());
  } catch (const json::exception& e) {
    return Status::Server(std::string("doc is not valid JSON: ") + e.what());
  }
  T v{};
  JsonFields root(j, JsonPath(), StoreDialect());
  Read(root, v);
  if (!root.ok()) return root.status();
  *out = std::move(v);
  return Status::Ok();
}

}  // namespace gpupack::storage_internal
