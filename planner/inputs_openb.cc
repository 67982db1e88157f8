// inputs_openb.cc owns the planner's openb CSV reader: the node list (sn,cpu_milli,memory_mib,gpu,model) as a
// fleet and the pod list (name,cpu_milli,memory_mib,num_gpu,gpu_milli,...) as a workload, mapped as
// docs/planning.md documents. Entry point ParseCsv (planner/inputs_parts.h); planner/inputs.cc dispatches to it.
#include <charconv>
#include <map>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "planner/inputs_parts.h"
#include "scheduler/cluster_state.h"
#include "scheduler/validation.h"

namespace gpupack::plan::inputs_internal {

namespace {

// ---- CSV (openb) --------------------------------------------------------------------------------------------

// SplitCsv splits one line on commas, honouring double-quoted fields ("a,b" and "" escapes).
std::vector<std::string> SplitCsv(std::string_view line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back().push_back('"');
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back().push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back().push_back(c);
    }
  }
  return out;
}

// CsvTable: header plus rows with their line numbers.
struct CsvRow {
  int line = 0;
  std::vector<std::string> fields;
};

class CsvReader {
 public:
  CsvReader(std::string file, std::vector<std::string> header) : file_(std::move(file)), header_(std::move(header)) {
    for (size_t i = 0; i < header_.size(); ++i) index_[Trim(header_[i])] = static_cast<int>(i);
  }
  bool Has(const std::string& column) const { return index_.count(column) > 0; }
  std::string Get(const CsvRow& row, const std::string& column) const {
    auto it = index_.find(column);
    return it == index_.end() ? std::string() : Trim(row.fields[it->second]);
  }
  // An integer column in [lo, hi]; an empty optional column gives `fallback` when given.
  Status Int(const CsvRow& row, const std::string& column, int64_t lo, int64_t hi, int64_t& out,
             std::optional<int64_t> empty_value = std::nullopt) const {
    std::string s = Get(row, column);
    if (s.empty() && empty_value) {
      out = *empty_value;
      return Status::Ok();
    }
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi)
      return InputError(file_, row.line, column,
                        "expected an integer " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + Quote(s));
    out = v;
    return Status::Ok();
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::vector<std::string> header_;
  std::unordered_map<std::string, int> index_;
};

constexpr const char* kNodeColumns[] = {"sn", "cpu_milli", "memory_mib", "gpu", "model"};
constexpr const char* kPodColumns[] = {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"};

template <size_t N>
bool HasAll(const CsvReader& r, const char* const (&cols)[N]) {
  for (const char* c : cols)
    if (!r.Has(c)) return false;
  return true;
}

Result<Fleet> ParseOpenbNodes(const CsvReader& r, const std::vector<CsvRow>& rows) {
  Fleet fleet;
  fleet.source = r.file();
  std::map<std::tuple<int64_t, int64_t, int64_t, std::string>, int> type_of;
  for (const auto& row : rows) {
    int64_t cpu_milli = 0, memory = 0, gpus = 0;
    GP_PLAN_TRY(r.Int(row, "cpu_milli", 0, int64_t{1} << 40, cpu_milli));
    GP_PLAN_TRY(r.Int(row, "memory_mib", 0, int64_t{1} << 40, memory));
    GP_PLAN_TRY(r.Int(row, "gpu", 0, 64, gpus));
    std::string model = r.Get(row, "model");
    if (gpus > 0 && model.empty()) return InputError(r.file(), row.line, "model", "empty for a node with GPUs");
    auto key = std::make_tuple(cpu_milli, memory, gpus, model);
    auto [it, added] = type_of.emplace(key, static_cast<int>(fleet.types.size()));
    if (added) {
      InstanceType t;
      // e.g. "G2x8-96c-384g": model x GPUs, cores, host memory in GiB.
      std::ostringstream name;
      name << (model.empty() ? "cpu" : model) << "x" << gpus << "-" << cpu_milli / 1000 << "c-" << memory / 1024
           << "g";
      t.name = name.str();
      t.cpu = OpenbCpuUnits(cpu_milli);
      t.memory = memory;
      t.gpus = static_cast<int>(gpus);
      t.gpu_model = model;
      t.origin = r.file() + ":" + std::to_string(row.line);
      if (!model.empty()) SetAttribute(t.attributes, kGpuModelAttribute, model);
      SetAttribute(t.attributes, "ecs.instance-type", t.name);
      fleet.types.push_back(std::move(t));
    }
    ++fleet.types[it->second].count;
    fleet.registration_order.push_back(it->second);
  }
  if (rows.empty()) return InputError(r.file(), 1, "", "the node list has no rows");
  return fleet;
}

Result<Workload> ParseOpenbPods(const CsvReader& r, const std::vector<CsvRow>& rows) {
  Workload w;
  w.source = r.file();
  const bool times = r.Has("creation_time");
  for (const auto& row : rows) {
    TaskSpec t;
    t.name = r.Get(row, "name");
    t.origin = r.file() + ":" + std::to_string(row.line);
    int64_t cpu_milli = 0, memory = 0, num_gpu = 0, gpu_milli = 0;
    GP_PLAN_TRY(r.Int(row, "cpu_milli", 0, int64_t{1} << 40, cpu_milli));
    GP_PLAN_TRY(r.Int(row, "memory_mib", 0, int64_t{1} << 40, memory));
    GP_PLAN_TRY(r.Int(row, "num_gpu", 0, 64, num_gpu));
    GP_PLAN_TRY(r.Int(row, "gpu_milli", 0, 1000, gpu_milli));
    t.demand.cpu = OpenbCpuUnits(cpu_milli);
    t.demand.memory = memory;
    if (num_gpu > 0) {
      if (gpu_milli == 0)
        return InputError(r.file(), row.line, "gpu_milli", "0 for a pod with num_gpu " + std::to_string(num_gpu) +
                                                               "; expected 1..1000 thousandths of a GPU");
      if (num_gpu > 1 || gpu_milli == 1000) {
        // Whole GPUs: a dedicated task of num_gpu GPUs ({"type": "GPU", "value": "<num_gpu>"}).
        t.demand.gpu_kind = GpuKind::kDedicated;
        t.demand.gpu_count = static_cast<int>(num_gpu);
      } else {
        // A fraction of one GPU: a shared task; its MiB are fixed once the GPU units are known.
        t.demand.gpu_kind = GpuKind::kShared;
        t.demand.gpu_compute = 100;
        t.gpu_milli = static_cast<int>(gpu_milli);
      }
    }
    if (r.Has("gpu_spec")) {
      std::string spec = r.Get(row, "gpu_spec");
      size_t start = 0;
      while (!spec.empty() && start <= spec.size()) {
        size_t bar = spec.find('|', start);
        std::string m = Trim(spec.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
        if (m.empty()) return InputError(r.file(), row.line, "gpu_spec", "empty model name in " + Quote(spec));
        t.gpu_models.push_back(m);
        if (bar == std::string::npos) break;
        start = bar + 1;
      }
      if (!t.gpu_models.empty()) t.constraints.push_back({"memberOf", GpuModelExpression(t.gpu_models)});
    }
    if (times) {
      Occurrence occ;
      GP_PLAN_TRY(r.Int(row, "creation_time", 0, int64_t{1} << 50, occ.arrival));
      if (r.Has("deletion_time") && !r.Get(row, "deletion_time").empty()) {
        int64_t dep = 0;
        GP_PLAN_TRY(r.Int(row, "deletion_time", 0, int64_t{1} << 50, dep));
        if (dep < occ.arrival)
          return InputError(r.file(), row.line, "deletion_time",
                            "before creation_time (" + std::to_string(occ.arrival) + ")");
        occ.departure = dep;
      }
      t.schedule.push_back(occ);
    }
    w.tasks.push_back(std::move(t));
  }
  if (rows.empty()) return InputError(r.file(), 1, "", "the pod list has no rows");
  return w;
}

}  // namespace

Result<Input> ParseCsv(std::string_view text, const std::string& name) {
  std::vector<std::string> header;
  std::vector<CsvRow> rows;
  int line = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view l = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line;
    if (Trim(l).empty()) continue;
    if (header.empty()) {
      header = SplitCsv(l);
      if (line != 1) return InputError(name, line, "", "the header must be the first line");
      continue;
    }
    CsvRow row{line, SplitCsv(l)};
    if (row.fields.size() != header.size())
      return InputError(name, line, "",
                        "expected " + std::to_string(header.size()) + " comma-separated fields as in the header, got " +
                            std::to_string(row.fields.size()));
    rows.push_back(std::move(row));
  }
  if (header.empty()) return InputError(name, 1, "", "the file is empty");
  CsvReader reader(name, header);
  if (HasAll(reader, kPodColumns)) {
    auto w = ParseOpenbPods(reader, rows);
    if (!w.ok()) return w.status();
    return Input(std::move(w).value());
  }
  if (HasAll(reader, kNodeColumns)) {
    auto f = ParseOpenbNodes(reader, rows);
    if (!f.ok()) return f.status();
    return Input(std::move(f).value());
  }
  std::string got;
  for (size_t i = 0; i < header.size(); ++i) got += (i ? "," : "") + Trim(header[i]);
  return InputError(name, 1, "",
                    "header " + Quote(got) +
                        " is neither an openb node list (sn,cpu_milli,memory_mib,gpu,model) nor an openb pod list "
                        "(name,cpu_milli,memory_mib,num_gpu,gpu_milli,...), and the file is not JSON");
}

}  // namespace gpupack::plan::inputs_internal
