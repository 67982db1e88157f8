// inputs.cc owns the planner's entry points (ParseInput, LoadInput: tell JSON from CSV by content), the small
// model helpers of planner/inputs.h, and the helpers both readers share (planner/inputs_parts.h). The JSON reader is
// planner/inputs_json.cc, the openb CSV reader planner/inputs_openb.cc.
#include "planner/inputs.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "planner/inputs_parts.h"

namespace gpupack::plan {

int Fleet::GpuCount() const {
  int n = 0;
  for (int t : registration_order) n += types[t].gpus;
  return n;
}

int TaskSpec::Copies() const {
  if (IsService()) {
    int peak = 0;
    for (const DesiredStep& s : desired) peak = std::max(peak, s.count);
    return peak;
  }
  return schedule.empty() ? count : static_cast<int>(schedule.size());
}

int64_t TaskSpec::CopyArrival(int c) const {
  if (!IsService()) return schedule[c].arrival;
  for (const DesiredStep& s : desired)
    if (s.count > c) return s.at;
  return 0;  // not a copy (c >= Copies())
}

bool Workload::HasTimes() const {
  if (tasks.empty()) return false;
  for (const auto& t : tasks)
    if (t.schedule.empty() && !t.IsService()) return false;
  return true;
}

int Workload::ServiceCount() const {
  return static_cast<int>(std::count_if(tasks.begin(), tasks.end(), [](const TaskSpec& t) { return t.IsService(); }));
}

std::vector<std::vector<Occurrence>> ReplicaSchedules(const std::vector<DesiredStep>& desired) {
  std::vector<std::vector<Occurrence>> replicas;
  int present = 0;
  for (const DesiredStep& s : desired) {
    for (int k = present; k < s.count; ++k) {  // scale-out: replicas present+1..count arrive
      if (static_cast<int>(replicas.size()) <= k) replicas.emplace_back();
      replicas[k].push_back({s.at, std::nullopt});
    }
    for (int k = s.count; k < present; ++k) replicas[k].back().departure = s.at;  // scale-in: the newest leave
    present = s.count;
  }
  return replicas;
}

int64_t OpenbCpuUnits(int64_t cpu_milli) { return (cpu_milli * 1024 + 500) / 1000; }

std::string GpuModelExpression(const std::vector<std::string>& models) {
  if (models.empty()) return "";
  std::string attr = std::string("attribute:") + kGpuModelAttribute;
  if (models.size() == 1) return attr + " == " + models[0];
  std::string out = attr + " in [";
  for (size_t i = 0; i < models.size(); ++i) out += (i ? ", " : "") + models[i];
  return out + "]";
}

std::string BundledOpenbDir() {
  if (const char* env = std::getenv("GPUPACK_OPENB_DIR"); env && *env) return env;
#ifdef GPUPACK_BUNDLED_OPENB_DIR
  return GPUPACK_BUNDLED_OPENB_DIR;
#else
  return "planner/data/openb";
#endif
}
namespace inputs_internal {

// SetAttribute adds or replaces an attribute, keeping the list sorted by name.
void SetAttribute(std::vector<Attribute>& attrs, const std::string& name, std::optional<std::string> value) {
  auto it = std::lower_bound(attrs.begin(), attrs.end(), name,
                             [](const Attribute& a, const std::string& n) { return a.name < n; });
  if (it != attrs.end() && it->name == name) {
    it->value = std::move(value);
    return;
  }
  attrs.insert(it, Attribute{name, std::move(value)});
}

Status InputError(const std::string& file, int line, const std::string& field, const std::string& what) {
  std::string m = file + ":" + std::to_string(line) + ": ";
  if (!field.empty()) m += "field '" + field + "': ";
  return Status::InvalidParameter(m + what);
}

std::string Quote(std::string_view s) {
  std::string out = "'";
  out.append(s.substr(0, 60));
  if (s.size() > 60) out += "...";
  return out + "'";
}

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace inputs_internal

Result<Input> ParseInput(std::string_view text, const std::string& name) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 BOM
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '{') return inputs_internal::ParseJson(text, name);
  return inputs_internal::ParseCsv(text, name);
}

Result<Input> LoadInput(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidParameter(path + ": cannot read the file (does it exist?)");
  std::ostringstream buf;
  buf << in.rdbuf();
  return ParseInput(buf.str(), path);
}

}  // namespace gpupack::plan
