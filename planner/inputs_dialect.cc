// inputs_dialect.cc: the planner's words for base's JSON field reader, and JsonLines (inputs_dialect.h).
#include "planner/inputs_dialect.h"

#include <vector>

#include "planner/inputs_parts.h"

namespace gpupack::plan::inputs_internal {

using Json = nlohmann::json;

namespace {

// Frame: an object or array JsonLines::Scan is inside.
struct Frame {
  bool object = false;
  bool expecting_key = true;
  int index = 0;
  int key_line = 1;
  std::string key;
  std::string path;
};

// ArrayWords: what the planner calls an array member it reads, and whether a message shows the value found.
struct ArrayWords {
  const char* key;
  const char* what;
  bool shows_value;
};
constexpr ArrayWords kArrays[] = {
    {"instanceTypes", "a non-empty array of instance types", false},
    {"tasks", "a non-empty array of task definitions", false},
    {"services", "a non-empty array of services", false},
    {"gpuModels", "an array of strings", true},
    {"schedule", "an array of {\"arrival\": s, \"departure\": s}", true},
    {"desired", "an array of {\"at\": s, \"count\": n}", true},
};

// RequiredNote: what a required member holds, after its name in "missing required field 'cpu' (...)".
const char* RequiredNote(std::string_view key) {
  if (key == "cpu") return " (CPU units, 1024 per vCPU)";
  if (key == "memory") return " (MiB)";
  if (key == "arrival" || key == "at") return " (seconds)";
  if (key == "count") return " (replicas)";  // required only in a service's desired steps
  return "";
}

bool Is(const char* key, std::string_view name) { return key != nullptr && name == key; }

}  // namespace

// ---- JsonLines ----------------------------------------------------------------------------------------------

int JsonLines::LineOf(std::string path) const {
  while (true) {
    auto it = lines_.find(path);
    if (it != lines_.end()) return it->second;
    if (path.empty()) return 1;
    size_t cut = path.find_last_of(".[");
    path = cut == std::string::npos ? "" : path.substr(0, cut);
  }
}

void JsonLines::Scan(std::string_view t) {
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

// ---- InputsDialect ------------------------------------------------------------------------------------------

std::string Shown(const Json& v) {
  // Shortened in place: GCC 12 at -O2 warns falsely (-Wstringop-overread) on substr(...) + "...".
  std::string s = v.dump();
  if (s.size() > 60) s.replace(57, std::string::npos, "...");
  return s;
}

Status InputsDialect::Invalid(const std::string& path, const std::string& what) const {
  return InputError(file_, lines_.LineOf(path), path, what);
}

Status InputsDialect::Error(const JsonError& e) const {
  const JsonPath* parent = e.path.parent();
  if (e.got == nullptr) {  // a missing member, named at its object
    const char* key = e.path.key() != nullptr ? e.path.key() : "";
    return Invalid(parent != nullptr ? parent->str() : "",
                   std::string("missing required field '") + key + "'" + RequiredNote(key));
  }
  const std::string path = e.path.str();
  const std::string got = ", got " + Shown(*e.got);
  const bool element = parent != nullptr && e.path.key() == nullptr;
  switch (e.want) {
    case JsonWant::kAny: break;
    case JsonWant::kObject:
      if (parent == nullptr)
        return Invalid(path, "expected a JSON object with \"instanceTypes\", \"tasks\" or \"services\"");
      if (element && Is(parent->key(), "tasks")) return Invalid(path, "expected an object (a task definition)" + got);
      if (element && Is(parent->key(), "services"))
        return Invalid(path, "expected an object (a task definition with serviceName)" + got);
      if (Is(e.path.key(), "attributes")) return Invalid(path, "expected an object of NAME: value" + got);
      return Invalid(path, "expected an object" + got);
    case JsonWant::kArray:
    case JsonWant::kStringArray:
      for (const ArrayWords& a : kArrays) {
        if (Is(e.path.key(), a.key))
          return Invalid(path, std::string("expected ") + a.what + (a.shows_value ? got : ""));
      }
      return Invalid(path, "expected an array" + got);
    case JsonWant::kString:  // an element of a list of names: an empty one is no name either
      return Invalid(path, (element ? "expected a non-empty string" : "expected a string") + got);
    case JsonWant::kInteger:
      return Invalid(path, "expected an integer " + std::to_string(e.lo) + ".." + std::to_string(e.hi) + got);
    case JsonWant::kBoolean: return Invalid(path, "expected true or false" + got);
  }
  return Invalid(path, "is not valid");
}

}  // namespace gpupack::plan::inputs_internal
