// inputs_json.cc owns the planner's JSON reader: a fleet ({"instanceTypes": [...]}) or a workload
// ({"tasks": [...]}) as docs/planning.md documents them, with JsonLines giving every error its line. A task's
// definition is read by the server's own codec (api::ParseRegisterTaskDefinition) and validated as the server
// validates it; this file reads only the planner's fields around it. Entry point ParseJson
// (planner/inputs_parts.h); planner/inputs.cc dispatches to it.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "api/ecs/codec.h"
#include "planner/inputs_parts.h"
#include "scheduler/cluster_state.h"
#include "scheduler/validation.h"

namespace gpupack::plan::inputs_internal {

using Json = nlohmann::json;

namespace {

// ---- JSON with line numbers ---------------------------------------------------------------------------------

// JsonLines maps each value of a JSON text to the line it starts on (for an object member: the line of its
// key), by path as messages print it: "tasks[2].containerDefinitions[0].cpu". nlohmann::json keeps no
// positions, so this is a small scanner over the same text. It tolerates truncated text, so it also names the
// field a syntax error sits in.
class JsonLines {
 public:
  explicit JsonLines(std::string_view text) { Scan(text); }

  // Line of `path`, or of its nearest recorded ancestor; 1 when nothing matches.
  int LineOf(std::string path) const {
    while (true) {
      auto it = lines_.find(path);
      if (it != lines_.end()) return it->second;
      if (path.empty()) return 1;
      size_t cut = path.find_last_of(".[");
      path = cut == std::string::npos ? "" : path.substr(0, cut);
    }
  }
  const std::string& last_path() const { return last_path_; }

 private:
  struct Frame {
    bool object = false;
    bool expecting_key = true;
    int index = 0;
    int key_line = 1;
    std::string key;
    std::string path;
  };

  void Scan(std::string_view t) {
    std::vector<Frame> stack;
    int line = 1;
    auto value_start = [&](int at_line) {
      std::string path;
      int rec_line = at_line;
      if (!stack.empty()) {
        const Frame& f = stack.back();
        if (f.object) {
          path = f.path.empty() ? f.key : f.path + "." + f.key;
          rec_line = f.key_line;
        } else {
          path = f.path + "[" + std::to_string(f.index) + "]";
        }
      }
      lines_.emplace(path, rec_line);
      last_path_ = path;
      return path;
    };
    size_t i = 0;
    while (i < t.size()) {
      char c = t[i];
      if (c == '\n') {
        ++line;
        ++i;
      } else if (c == '"') {
        int start_line = line;
        std::string s;
        ++i;
        while (i < t.size() && t[i] != '"') {
          if (t[i] == '\\' && i + 1 < t.size()) {
            s.push_back(t[i + 1]);
            i += 2;
            continue;
          }
          if (t[i] == '\n') ++line;
          s.push_back(t[i++]);
        }
        ++i;
        if (!stack.empty() && stack.back().object && stack.back().expecting_key) {
          stack.back().key = std::move(s);
          stack.back().key_line = start_line;
          stack.back().expecting_key = false;
          std::string p = stack.back().path.empty() ? stack.back().key : stack.back().path + "." + stack.back().key;
          last_path_ = p;
        } else {
          value_start(start_line);
        }
      } else if (c == '{' || c == '[') {
        std::string path = value_start(line);
        Frame f;
        f.object = c == '{';
        f.path = std::move(path);
        stack.push_back(std::move(f));
        ++i;
      } else if (c == '}' || c == ']') {
        if (!stack.empty()) stack.pop_back();
        ++i;
      } else if (c == ',') {
        if (!stack.empty()) {
          if (stack.back().object) stack.back().expecting_key = true;
          else ++stack.back().index;
        }
        ++i;
      } else if (c == ':' || c == ' ' || c == '\t' || c == '\r') {
        ++i;
      } else {  // a number, true, false or null
        value_start(line);
        while (i < t.size() && t[i] != ',' && t[i] != '}' && t[i] != ']' && t[i] != '\n') ++i;
      }
    }
  }

  std::map<std::string, int> lines_;
  std::string last_path_;
};

// JsonDoc: a parsed document plus what error messages need.
struct JsonDoc {
  std::string file;
  JsonLines lines;
  Status Error(const std::string& path, const std::string& what) const {
    return InputError(file, lines.LineOf(path), path, what);
  }
};

std::string Member(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }
std::string Element(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

std::string Shown(const Json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Integer field: absent -> fallback; present -> an integer in [lo, hi].
Status GetInt(const JsonDoc& doc, const Json& obj, const std::string& path, const char* key, int64_t lo, int64_t hi,
              int64_t& out) {
  auto it = obj.find(key);
  if (it == obj.end()) return Status::Ok();
  std::string p = Member(path, key);
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi)
    return doc.Error(p, "expected an integer " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " +
                            Shown(*it));
  out = it->get<int64_t>();
  return Status::Ok();
}

Status GetString(const JsonDoc& doc, const Json& obj, const std::string& path, const char* key, std::string& out,
                 bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) return doc.Error(path, std::string("missing required field '") + key + "'");
    return Status::Ok();
  }
  if (!it->is_string()) return doc.Error(Member(path, key), "expected a string, got " + Shown(*it));
  out = it->get<std::string>();
  return Status::Ok();
}

Status GetStringList(const JsonDoc& doc, const Json& obj, const std::string& path, const char* key,
                     std::vector<std::string>& out) {
  auto it = obj.find(key);
  if (it == obj.end()) return Status::Ok();
  std::string p = Member(path, key);
  if (!it->is_array()) return doc.Error(p, "expected an array of strings, got " + Shown(*it));
  for (size_t i = 0; i < it->size(); ++i) {
    if (!(*it)[i].is_string() || (*it)[i].get<std::string>().empty())
      return doc.Error(Element(p, i), "expected a non-empty string, got " + Shown((*it)[i]));
    out.push_back((*it)[i].get<std::string>());
  }
  return Status::Ok();
}

// ---- JSON fleet ---------------------------------------------------------------------------------------------

Result<Fleet> ParseJsonFleet(const JsonDoc& doc, const Json& root) {
  Fleet fleet;
  fleet.source = doc.file;
  const Json& types = root["instanceTypes"];
  if (!types.is_array() || types.empty())
    return doc.Error("instanceTypes", "expected a non-empty array of instance types");
  std::set<std::string> names;
  for (size_t i = 0; i < types.size(); ++i) {
    std::string path = Element("instanceTypes", i);
    const Json& t = types[i];
    if (!t.is_object()) return doc.Error(path, "expected an object, got " + Shown(t));
    InstanceType it;
    it.origin = doc.file + ":" + std::to_string(doc.lines.LineOf(path));
    GP_PLAN_TRY(GetString(doc, t, path, "name", it.name, true));
    if (it.name.empty()) return doc.Error(Member(path, "name"), "must not be empty");
    if (!names.insert(it.name).second)
      return doc.Error(Member(path, "name"), "instance type '" + it.name + "' is listed twice");
    int64_t count = 1, gpus = 0, v = 0;
    GP_PLAN_TRY(GetInt(doc, t, path, "count", 0, 1'000'000, count));
    it.count = static_cast<int>(count);
    if (!t.contains("cpu")) return doc.Error(path, "missing required field 'cpu' (CPU units, 1024 per vCPU)");
    GP_PLAN_TRY(GetInt(doc, t, path, "cpu", 0, int64_t{1} << 40, v));
    it.cpu = v;
    if (!t.contains("memory")) return doc.Error(path, "missing required field 'memory' (MiB)");
    GP_PLAN_TRY(GetInt(doc, t, path, "memory", 0, int64_t{1} << 40, v));
    it.memory = v;
    GP_PLAN_TRY(GetInt(doc, t, path, "gpus", 0, 64, gpus));
    it.gpus = static_cast<int>(gpus);
    int64_t gpu_memory = 0;
    GP_PLAN_TRY(GetInt(doc, t, path, "gpuMemory", 1, int64_t{1} << 30, gpu_memory));
    it.gpu_memory = gpu_memory;
    if (it.gpus > 0 && it.gpu_memory == 0)
      return doc.Error(path, "missing field 'gpuMemory' (MiB per GPU) for an instance type with GPUs");
    GP_PLAN_TRY(GetString(doc, t, path, "gpuModel", it.gpu_model, false));
    if (auto a = t.find("attributes"); a != t.end()) {
      std::string ap = Member(path, "attributes");
      if (!a->is_object()) return doc.Error(ap, "expected an object of NAME: value, got " + Shown(*a));
      for (const auto& [name, value] : a->items()) {
        if (value.is_null()) SetAttribute(it.attributes, name, std::nullopt);
        else if (value.is_string()) SetAttribute(it.attributes, name, value.get<std::string>());
        else return doc.Error(Member(ap, name), "expected a string or null, got " + Shown(value));
      }
    }
    if (!it.gpu_model.empty()) SetAttribute(it.attributes, kGpuModelAttribute, it.gpu_model);
    SetAttribute(it.attributes, "ecs.instance-type", it.name);
    for (int n = 0; n < it.count; ++n) fleet.registration_order.push_back(static_cast<int>(fleet.types.size()));
    fleet.types.push_back(std::move(it));
  }
  return fleet;
}

// ---- JSON workload ------------------------------------------------------------------------------------------

// The planner's own fields of a workload's task entry; everything else is the task definition, read by the
// server's codec.
const std::set<std::string> kPlannerFields = {"gpuModels", "group", "weight", "count", "schedule"};

// CodecError turns a refusal of api::ParseRegisterTaskDefinition ("PATH: what", PATH relative to the task
// definition) into the planner's error at that field of task `path`; a message without a path stays on the task.
Status CodecError(const JsonDoc& doc, const std::string& path, const std::string& message) {
  size_t colon = message.find(": ");
  bool has_path = colon != std::string::npos && colon > 0;
  for (size_t i = 0; has_path && i < colon; ++i) {
    char c = message[i];
    has_path = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' || c == ']';
  }
  if (!has_path) return doc.Error(path, message);
  return doc.Error(Member(path, message.substr(0, colon)), message.substr(colon + 2));
}

Status ParseSchedule(const JsonDoc& doc, const Json& t, const std::string& path, std::vector<Occurrence>& out) {
  auto it = t.find("schedule");
  if (it == t.end()) return Status::Ok();
  std::string p = Member(path, "schedule");
  if (!it->is_array()) return doc.Error(p, "expected an array of {\"arrival\": s, \"departure\": s}, got " + Shown(*it));
  for (size_t i = 0; i < it->size(); ++i) {
    std::string op = Element(p, i);
    const Json& o = (*it)[i];
    if (!o.is_object()) return doc.Error(op, "expected an object, got " + Shown(o));
    Occurrence occ;
    if (!o.contains("arrival")) return doc.Error(op, "missing required field 'arrival' (seconds)");
    GP_PLAN_TRY(GetInt(doc, o, op, "arrival", 0, int64_t{1} << 50, occ.arrival));
    if (auto d = o.find("departure"); d != o.end() && !d->is_null()) {
      int64_t dep = 0;
      GP_PLAN_TRY(GetInt(doc, o, op, "departure", 0, int64_t{1} << 50, dep));
      if (dep < occ.arrival) return doc.Error(Member(op, "departure"), "departs before it arrives");
      occ.departure = dep;
    }
    out.push_back(occ);
  }
  return Status::Ok();
}

Result<Workload> ParseJsonWorkload(const JsonDoc& doc, const Json& root) {
  Workload w;
  w.source = doc.file;
  const Json& tasks = root["tasks"];
  if (!tasks.is_array() || tasks.empty()) return doc.Error("tasks", "expected a non-empty array of task definitions");
  for (size_t i = 0; i < tasks.size(); ++i) {
    std::string path = Element("tasks", i);
    const Json& t = tasks[i];
    if (!t.is_object()) return doc.Error(path, "expected an object (a task definition), got " + Shown(t));
    TaskSpec spec;
    spec.origin = doc.file + ":" + std::to_string(doc.lines.LineOf(path));
    // The task definition is what RegisterTaskDefinition would be sent: read by the server's codec and
    // validated as the server validates it, so the planner refuses what the server refuses, with its message.
    Json body = Json::object();
    for (auto f = t.begin(); f != t.end(); ++f)
      if (!kPlannerFields.count(f.key())) body[f.key()] = f.value();
    auto parsed = api::ParseRegisterTaskDefinition(body);
    if (!parsed.ok()) return CodecError(doc, path, parsed.status().message());
    const TaskDefinition& td = *parsed;
    if (Status st = ValidateTaskDefinition(td); !st.ok()) return doc.Error(path, st.message());
    int gpu_containers = 0;
    for (const auto& c : td.containers)
      for (const auto& r : c.resource_requirements)
        if (r.type == "GPU") ++gpu_containers;
    spec.gpu_containers = std::max(1, gpu_containers);
    spec.name = td.family;
    spec.demand = DemandOf(td);
    spec.constraints = td.placement_constraints;
    GP_PLAN_TRY(GetStringList(doc, t, path, "gpuModels", spec.gpu_models));
    if (!spec.gpu_models.empty()) spec.constraints.push_back({"memberOf", GpuModelExpression(spec.gpu_models)});
    GP_PLAN_TRY(GetString(doc, t, path, "group", spec.group, false));
    if (auto wt = t.find("weight"); wt != t.end()) {
      if (!wt->is_number() || !(wt->get<double>() >= 0) || !std::isfinite(wt->get<double>()))
        return doc.Error(Member(path, "weight"), "expected a number >= 0, got " + Shown(*wt));
      spec.weight = wt->get<double>();
    }
    int64_t count = 1;
    GP_PLAN_TRY(GetInt(doc, t, path, "count", 0, 1'000'000, count));
    spec.count = static_cast<int>(count);
    GP_PLAN_TRY(ParseSchedule(doc, t, path, spec.schedule));
    w.tasks.push_back(std::move(spec));
  }
  return w;
}

}  // namespace

Result<Input> ParseJson(std::string_view text, const std::string& name) {
  JsonDoc doc{name, JsonLines(text)};
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
  }
  if (!root.is_object()) return doc.Error("", "expected a JSON object with \"instanceTypes\" or \"tasks\"");
  if (root.contains("instanceTypes") && root.contains("tasks"))
    return doc.Error("", "a file is either a fleet (\"instanceTypes\") or a workload (\"tasks\"), not both");
  if (root.contains("instanceTypes")) {
    auto f = ParseJsonFleet(doc, root);
    if (!f.ok()) return f.status();
    return Input(std::move(f).value());
  }
  if (root.contains("tasks")) {
    auto w = ParseJsonWorkload(doc, root);
    if (!w.ok()) return w.status();
    return Input(std::move(w).value());
  }
  return doc.Error("", "expected a fleet ({\"instanceTypes\": [...]}) or a workload ({\"tasks\": [...]})");
}

}  // namespace gpupack::plan::inputs_internal
