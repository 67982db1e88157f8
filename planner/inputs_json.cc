// inputs_json.cc owns the planner's JSON reader: a fleet ({"instanceTypes": [...]}) or a workload ({"tasks":
// [...], "services": [...]}) as docs/planning.md documents them, read with base's JsonFields in the planner's
// words (planner/inputs_dialect.h: every error names the file, the line and the field). A task's or a service's
// definition is read by the server's own codec (api::ParseRegisterTaskDefinition) and validated as the server
// validates it; this file reads only the planner's fields around it (a service's: serviceName and its desired
// counts, expanded into its replicas' schedule). Entry point ParseJson (planner/inputs_parts.h); planner/inputs.cc
// dispatches to it.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "api/ecs/codec.h"
#include "base/json_fields.h"
#include "planner/inputs_dialect.h"
#include "planner/inputs_parts.h"
#include "scheduler/cluster_state.h"
#include "scheduler/validation.h"

namespace gpupack::plan::inputs_internal {

using Json = nlohmann::json;

namespace {

// ---- JSON fleet ---------------------------------------------------------------------------------------------

// ReadInstanceType reads instance type `j` at `p` onto `fleet`; `names` are the names read so far.
Status ReadInstanceType(const Json& j, const JsonPath& p, const InputsDialect& words, std::set<std::string>& names,
                        Fleet& fleet) {
  JsonFields t(j, p, words);
  if (!t.ok()) return t.status();
  const std::string path = p.str();
  InstanceType it;
  it.origin = words.file() + ":" + std::to_string(words.LineOf(path));
  t.String("name", it.name, true);
  if (t.ok() && it.name.empty()) t.Fail(t.Path("name"), "must not be empty");
  if (t.ok() && !names.insert(it.name).second)
    t.Fail(t.Path("name"), "instance type '" + it.name + "' is listed twice");
  int64_t count = 1, gpus = 0, gpu_memory = 0, memory = 0;
  t.Int64("count", count, false, 0, 1'000'000);
  t.Int64("cpu", it.cpu, true, 0, int64_t{1} << 40);
  t.Int64("memory", memory, true, 0, int64_t{1} << 40);
  t.Int64("gpus", gpus, false, 0, 64);
  t.Int64("gpuMemory", gpu_memory, false, 1, int64_t{1} << 30);
  if (t.ok() && gpus > 0 && gpu_memory == 0)
    t.Fail(path, "missing field 'gpuMemory' (MiB per GPU) for an instance type with GPUs");
  t.String("gpuModel", it.gpu_model);
  if (const Json* a = t.Get("attributes")) {
    JsonFields attrs(*a, JsonPath(t.path(), "attributes"), words);
    for (auto v = a->begin(); attrs.ok() && v != a->end(); ++v) {
      if (v->is_null()) SetAttribute(it.attributes, v.key(), std::nullopt);
      else if (v->is_string()) SetAttribute(it.attributes, v.key(), v->get<std::string>());
      else attrs.Fail(attrs.Path(v.key()), "expected a string or null, got " + Shown(*v));
    }
    t.Take(attrs.status());
  }
  if (!t.ok()) return t.status();
  it.count = static_cast<int>(count);
  it.memory = memory;
  it.gpus = static_cast<int>(gpus);
  it.gpu_memory = gpu_memory;
  if (!it.gpu_model.empty()) SetAttribute(it.attributes, kGpuModelAttribute, it.gpu_model);
  SetAttribute(it.attributes, "ecs.instance-type", it.name);
  for (int n = 0; n < it.count; ++n) fleet.registration_order.push_back(static_cast<int>(fleet.types.size()));
  fleet.types.push_back(std::move(it));
  return Status::Ok();
}

// ---- JSON workload ------------------------------------------------------------------------------------------

// The planner's own fields of a workload's task entry, and of a service entry; everything else is the task
// definition, read by the server's codec.
const std::set<std::string> kTaskFields = {"gpuModels", "group", "weight", "count", "schedule"};
const std::set<std::string> kServiceFields = {"gpuModels", "serviceName", "desiredCount", "desired",
                                              "schedulingStrategy"};

// What a service entry refuses, and why: a task's planner fields, and CreateService's fields the planner does not
// model (the codec would keep them as unknown task definition fields, and they would do nothing).
constexpr std::pair<const char*, const char*> kNotForServices[] = {
    {"group", "its tasks' group is service:<serviceName>, as the server's"},
    {"weight", "fgd samples tasks, not services"},
    {"count", "its replicas follow desiredCount or desired"},
    {"schedule", "its replicas follow desiredCount or desired"},
    {"taskDefinition", "the entry is the task definition itself: put its fields beside serviceName"},
    {"placementStrategy", "every service is placed with the --strategy under study"},
    {"deploymentConfiguration", "deployments are not replayed"},
};

// CodecFail keeps a refusal of api::ParseRegisterTaskDefinition ("PATH: what", PATH relative to the task
// definition) as the planner's error at that field of task `t`; a message without a path stays on the task.
void CodecFail(JsonFields& t, const std::string& message) {
  size_t colon = message.find(": ");
  bool has_path = colon != std::string::npos && colon > 0;
  for (size_t i = 0; has_path && i < colon; ++i) {
    char c = message[i];
    has_path = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' || c == ']';
  }
  if (!has_path) return t.Fail(t.path().str(), message);
  t.Fail(t.Path(message.substr(0, colon)), message.substr(colon + 2));
}

// ReadOccurrence reads arrival and departure `j` at `p` of a task's schedule onto `out`.
Status ReadOccurrence(const Json& j, const JsonPath& p, const InputsDialect& words, std::vector<Occurrence>& out) {
  JsonFields o(j, p, words);
  Occurrence occ;
  o.Int64("arrival", occ.arrival, true, 0, int64_t{1} << 50);
  if (const Json* d = o.Get("departure"); d != nullptr && !d->is_null()) {  // null: it never leaves
    const JsonPath at(o.path(), "departure");
    int64_t departure = 0;
    if (o.Int64Value(*d, at, departure, 0, int64_t{1} << 50) && departure < occ.arrival)
      o.Fail(at.str(), "departs before it arrives");
    occ.departure = departure;
  }
  if (o.ok()) out.push_back(occ);
  return o.status();
}

// ReadDefinition reads the task definition of entry `t` (every member but the planner's `fields`) and its
// gpuModels onto `spec`.
void ReadDefinition(JsonFields& t, const std::set<std::string>& fields, TaskSpec& spec) {
  // The task definition is what RegisterTaskDefinition would be sent: read by the server's codec and
  // validated as the server validates it, so the planner refuses what the server refuses, with its message.
  const Json& j = t.object();
  Json body = Json::object();
  for (auto f = j.begin(); f != j.end(); ++f)
    if (!fields.count(f.key())) body[f.key()] = f.value();
  auto parsed = api::ParseRegisterTaskDefinition(body);
  if (!parsed.ok()) CodecFail(t, parsed.status().message());
  else if (Status st = ValidateTaskDefinition(*parsed); !st.ok()) t.Fail(t.path().str(), st.message());
  if (!t.ok()) return;
  const TaskDefinition& td = *parsed;
  int gpu_containers = 0;
  for (const auto& c : td.containers)
    for (const auto& r : c.resource_requirements)
      if (r.type == "GPU") ++gpu_containers;
  spec.gpu_containers = std::max(1, gpu_containers);
  spec.name = td.family;
  spec.demand = DemandOf(td);
  spec.constraints = td.placement_constraints;
  t.Array("gpuModels", false, [&](const Json& m, const JsonPath& at) {
    if (!m.is_string() || m.get_ref<const std::string&>().empty()) t.Report({at, JsonWant::kString, &m});
    else spec.gpu_models.push_back(m.get<std::string>());
    return Status::Ok();
  });
  if (t.ok() && !spec.gpu_models.empty()) spec.constraints.push_back({"memberOf", GpuModelExpression(spec.gpu_models)});
}

// ReadTask reads task entry `j` at `p` of a workload onto `w`.
Status ReadTask(const Json& j, const JsonPath& p, const InputsDialect& words, Workload& w) {
  JsonFields t(j, p, words);
  if (!t.ok()) return t.status();
  TaskSpec spec;
  spec.origin = words.file() + ":" + std::to_string(words.LineOf(p.str()));
  ReadDefinition(t, kTaskFields, spec);
  t.String("group", spec.group);
  if (const Json* wt = t.Get("weight")) {
    if (!wt->is_number() || !(wt->get<double>() >= 0) || !std::isfinite(wt->get<double>()))
      t.Fail(t.Path("weight"), "expected a number >= 0, got " + Shown(*wt));
    else spec.weight = wt->get<double>();
  }
  int64_t count = 1;
  t.Int64("count", count, false, 0, 1'000'000);
  spec.count = static_cast<int>(count);
  t.Array("schedule", false, [&](const Json& o, const JsonPath& at) {
    return ReadOccurrence(o, at, words, spec.schedule);
  });
  if (!t.ok()) return t.status();
  w.tasks.push_back(std::move(spec));
  return Status::Ok();
}

// ReadStep reads step `j` at `p` of a service's desired counts onto `out` (times increasing).
Status ReadStep(const Json& j, const JsonPath& p, const InputsDialect& words, std::vector<DesiredStep>& out) {
  JsonFields o(j, p, words);
  int64_t at = 0, count = 0;
  o.Int64("at", at, true, 0, int64_t{1} << 50);
  o.Int64("count", count, true, 0, kMaxDesiredCount);
  if (o.ok() && !out.empty() && at <= out.back().at)
    o.Fail(o.Path("at"), "expected a time after the step before (" + std::to_string(out.back().at) + "), got " +
                             std::to_string(at));
  if (o.ok()) out.push_back({at, static_cast<int>(count)});
  return o.status();
}

// ReadService reads service entry `j` at `p` of a workload onto `w`: its task definition, read as a task's, and
// its desired counts, expanded into its replicas' schedule. `names` are the service names read so far.
Status ReadService(const Json& j, const JsonPath& p, const InputsDialect& words, std::set<std::string>& names,
                   Workload& w) {
  JsonFields s(j, p, words);
  if (!s.ok()) return s.status();
  const std::string path = p.str();
  TaskSpec spec;
  spec.origin = words.file() + ":" + std::to_string(words.LineOf(path));
  s.String("serviceName", spec.service, true);
  if (s.ok() && !IsValidName(spec.service))
    s.Fail(s.Path("serviceName"), "expected 1-255 letters, numbers, hyphens and underscores (ECS's rule), got " +
                                      Quote(spec.service));
  if (s.ok() && !names.insert(spec.service).second)
    s.Fail(s.Path("serviceName"), "service '" + spec.service + "' is listed twice");
  for (const auto& [key, why] : kNotForServices)
    if (s.ok() && s.Get(key) != nullptr) s.Fail(s.Path(key), std::string("a service takes no '") + key + "' (" + why + ")");
  if (const Json* v = s.Get("schedulingStrategy"); v != nullptr && *v != "REPLICA")
    s.Fail(s.Path("schedulingStrategy"), "expected \"REPLICA\" (the planner replays REPLICA services), got " + Shown(*v));
  if (!s.ok()) return s.status();
  ReadDefinition(s, kServiceFields, spec);
  const bool constant = s.Get("desiredCount") != nullptr, steps = s.Get("desired") != nullptr;
  if (constant && steps) s.Fail(path, "give 'desiredCount' or 'desired', not both");
  if (!constant && !steps) s.Fail(path, "missing required field 'desiredCount' (or 'desired', counts over time)");
  int64_t count = 0;
  s.Int64("desiredCount", count, false, 0, kMaxDesiredCount);
  if (constant) spec.desired.push_back({0, static_cast<int>(count)});
  s.Array("desired", false, [&](const Json& d, const JsonPath& at) { return ReadStep(d, at, words, spec.desired); });
  if (!s.ok()) return s.status();
  spec.name = spec.service;
  spec.group = "service:" + spec.service;
  for (auto& replica : ReplicaSchedules(spec.desired))
    spec.schedule.insert(spec.schedule.end(), replica.begin(), replica.end());
  w.tasks.push_back(std::move(spec));
  return Status::Ok();
}

// ReadList reads the non-empty array member `key` of `root` with `each`.
template <typename Each>
void ReadList(JsonFields& root, const char* key, Each each) {
  const Json* v = root.Get(key, true);
  if (v != nullptr && (!v->is_array() || v->empty())) root.Report({JsonPath(root.path(), key), JsonWant::kArray, v});
  root.Array(key, true, each);
}

}  // namespace

Result<Input> ParseJson(std::string_view text, const std::string& name) {
  const InputsDialect words(name, text);
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    size_t byte = e.byte > 0 ? e.byte - 1 : 0;
    byte = std::min(byte, text.size());
    int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(byte), '\n'));
    JsonLines prefix(text.substr(0, byte));
    std::string what = e.what();
    if (size_t cut = what.find("syntax error"); cut != std::string::npos) what = what.substr(cut);
    return InputError(name, line, prefix.last_path(), "invalid JSON: " + what);
  } catch (const Json::exception& e) {  // e.g. out_of_range: a number too large for a double
    std::string what = e.what();
    if (size_t cut = what.find("] "); cut != std::string::npos) what = what.substr(cut + 2);
    return InputError(name, 1, "", "invalid JSON: " + what);
  }
  JsonFields f(root, JsonPath(), words);  // not an object: "expected a JSON object with ..."
  if (!f.ok()) return f.status();
  const bool has_types = f.Get("instanceTypes") != nullptr, has_tasks = f.Get("tasks") != nullptr,
             has_services = f.Get("services") != nullptr;
  if (has_types && (has_tasks || has_services)) {
    f.Fail("", "a file is either a fleet (\"instanceTypes\") or a workload (\"tasks\", \"services\"), not both");
  } else if (has_types) {
    Fleet out;
    out.source = name;
    std::set<std::string> names;
    ReadList(f, "instanceTypes", [&](const Json& t, const JsonPath& p) {
      return ReadInstanceType(t, p, words, names, out);
    });
    if (f.ok()) return Input(std::move(out));
  } else if (has_tasks || has_services) {
    Workload out;  // tasks first, then services (Workload)
    out.source = name;
    if (has_tasks) ReadList(f, "tasks", [&](const Json& t, const JsonPath& p) { return ReadTask(t, p, words, out); });
    std::set<std::string> names;
    if (has_services)
      ReadList(f, "services", [&](const Json& s, const JsonPath& p) { return ReadService(s, p, words, names, out); });
    if (f.ok()) return Input(std::move(out));
  } else {
    f.Fail("", "expected a fleet ({\"instanceTypes\": [...]}) or a workload ({\"tasks\": [...]}, "
               "{\"services\": [...]} or both)");
  }
  return f.status();
}

}  // namespace gpupack::plan::inputs_internal
