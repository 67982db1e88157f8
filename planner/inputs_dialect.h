// inputs_dialect.h: internal to the planner's JSON reader (planner/inputs_json.cc): how the planner words what
// base's JSON field reader (base/json_fields.h) finds in a fleet or workload file, and the line each error names.
// Every refusal is InputError's "FILE:LINE: field 'PATH': what" (InvalidParameter): "field 'instanceTypes[1].gpus':
// expected an integer 0..64, got \"8\"", or "field 'instanceTypes[0]': missing required field 'cpu' (CPU units,
// 1024 per vCPU)" at the object that lacks the member. Null is a value (of the wrong type) and 3.0 is not an
// integer. JsonLines gives the lines; it also names the field a syntax error sits in.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/json_fields.h"
#include "base/status.h"

namespace gpupack::plan::inputs_internal {

// JsonLines maps each value of a JSON text to the line it starts on (for an object member: the line of its
// key), by path as messages print it: "tasks[2].containerDefinitions[0].cpu". nlohmann::json keeps no
// positions, so this is a small scanner over the same text. It tolerates truncated text, so it also names the
// field a syntax error sits in.
class JsonLines {
 public:
  explicit JsonLines(std::string_view text) { Scan(text); }

  // LineOf: the line of `path`, or of its nearest recorded ancestor; 1 when nothing matches.
  int LineOf(std::string path) const;
  // last_path: the path of the last value or key scanned (where a truncated text stops).
  const std::string& last_path() const { return last_path_; }

 private:
  void Scan(std::string_view t);

  std::map<std::string, int> lines_;
  std::string last_path_;
};

// Shown: `v` as JSON text for a message, cut to 60 characters (57 and "...").
std::string Shown(const nlohmann::json& v);

// InputsDialect: the planner's words for one JSON file: it knows the file's name and the line of every path.
// Built by ParseJson over the file's text, immutable, on the stack of that one call.
class InputsDialect : public JsonDialect {
 public:
  InputsDialect(std::string file, std::string_view text) : file_(std::move(file)), lines_(text) {}

  const std::string& file() const { return file_; }
  int LineOf(const std::string& path) const { return lines_.LineOf(path); }

  // Invalid: "FILE:LINE: field 'PATH': what", the line of `path` (no field part when `path` is empty).
  Status Invalid(const std::string& path, const std::string& what) const override;
  // Error: a missing member at its object ("missing required field 'KEY'"), else "expected W, got VALUE" at the
  // value, W in the planner's words for that member.
  Status Error(const JsonError& e) const override;

 private:
  std::string file_;
  JsonLines lines_;
};

}  // namespace gpupack::plan::inputs_internal
