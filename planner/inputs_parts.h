// inputs_parts.h: internal to the planner's input readers (planner/inputs.cc, planner/inputs_json.cc with its
// dialect planner/inputs_dialect.cc, planner/inputs_openb.cc); nothing outside those files includes it. inputs.cc
// owns the helpers both readers share and defines them; inputs_json.cc owns the JSON fleet/workload reader
// (ParseJson), inputs_openb.cc the openb CSV reader (ParseCsv). Pure functions over text; no globals.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/inputs.h"
#include "scheduler/model.h"
#include "base/status.h"

namespace gpupack::plan::inputs_internal {

// SetAttribute adds or replaces an attribute, keeping the list sorted by name.
void SetAttribute(std::vector<Attribute>& attrs, const std::string& name, std::optional<std::string> value);

// InputError: the InvalidParameter every refusal is, "file:line: field 'f': what" (no field part when empty).
Status InputError(const std::string& file, int line, const std::string& field, const std::string& what);

// Quote: `s` in single quotes, cut to 60 characters with "..." after.
std::string Quote(std::string_view s);

// Trim: `s` without leading and trailing spaces, tabs and carriage returns.
std::string Trim(std::string_view s);

// ParseJson reads a JSON fleet ("instanceTypes") or workload ("tasks"); defined in inputs_json.cc.
Result<Input> ParseJson(std::string_view text, const std::string& name);

// ParseCsv reads an openb node list or pod list, told apart by the header; defined in inputs_openb.cc.
Result<Input> ParseCsv(std::string_view text, const std::string& name);

}  // namespace gpupack::plan::inputs_internal

// GP_PLAN_TRY returns a failed Status from the enclosing function; for the readers' field-by-field checks.
#define GP_PLAN_TRY(expr)          \
  do {                             \
    Status _st = (expr);           \
    if (!_st.ok()) return _st;     \
  } while (0)
