#include "planner/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace gpupack::plan {

using Json = nlohmann::ordered_json;

Result<Format> ParseFormat(std::string_view text) {
  if (text == "table") return Format::kTable;
  if (text == "json") return Format::kJson;
  if (text == "csv") return Format::kCsv;
  return Status::InvalidParameter("--format must be table, json or csv, not '" + std::string(text) + "'");
}

namespace {

// Round to 4 decimals so JSON and CSV carry no float noise.
double R4(double v) { return std::round(v * 1e4) / 1e4; }

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string Pct(double v) { return Fixed(v, 2) + "%"; }

// Thousands separators: 8152 -> "8,152".
std::string Count(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return n < 0 ? "-" + out : out;
}

std::string Basename(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string SeedsText(const std::vector<uint64_t>& seeds) {
  if (seeds.empty()) return "";
  bool contiguous = true;
  for (size_t i = 1; i < seeds.size(); ++i) contiguous &= seeds[i] == seeds[i - 1] + 1;
  if (contiguous && seeds.size() > 2) return std::to_string(seeds.front()) + ".." + std::to_string(seeds.back());
  std::string out;
  for (size_t i = 0; i < seeds.size(); ++i) out += (i ? "," : "") + std::to_string(seeds[i]);
  return out;
}

// TextTable: columns right-aligned except the first.
class TextTable {
 public:
  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string Str() const {
    std::vector<size_t> width;
    for (const auto& r : rows_)
      for (size_t i = 0; i < r.size(); ++i) {
        if (width.size() <= i) width.push_back(0);
        width[i] = std::max(width[i], r[i].size());
      }
    std::string out;
    for (const auto& r : rows_) {
      std::string line;
      for (size_t i = 0; i < r.size(); ++i) {
        std::string pad(width[i] - r[i].size(), ' ');
        line += i == 0 ? r[i] + pad : "  " + pad + r[i];
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string Heading(const PlanContext& c) {
  std::string s = "workload " + Basename(c.workload_source) + " (";
  if (c.tasks > 0 || c.services == 0) s += Count(c.tasks) + " tasks" + (c.services > 0 ? ", " : "");
  if (c.services > 0) s += Count(c.services) + (c.services == 1 ? " service" : " services");
  s += ")";
  if (!c.fleet_source.empty())
    s += " on fleet " + Basename(c.fleet_source) + " (" + Count(c.instances) + " instances, " + Count(c.gpus) +
         " GPUs, " + Count(c.instance_types) + " instance types)";
  s += "; GPU units: " + c.units + (c.units == "milli" ? " (1000 per GPU)" : " (MiB)");
  return s + "\n";
}

Json ContextJson(const PlanContext& c, const char* protocol) {
  Json j;
  j["protocol"] = protocol;
  if (!c.fleet_source.empty())
    j["fleet"] = {{"source", c.fleet_source}, {"instances", c.instances}, {"gpus", c.gpus},
                  {"instanceTypes", c.instance_types}};
  j["workload"] = {{"source", c.workload_source}, {"tasks", c.tasks}};
  if (c.services > 0) j["workload"]["services"] = c.services;
  j["gpuUnits"] = c.units;
  return j;
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(ch);
    }
  }
  return out;
}

}  // namespace

// ---- fgd --------------------------------------------------------------------------------------------------

namespace {

// FgdBaseline: the unallocated share at the demand of the run's `fgd` strategy (the paper's baseline), when the
// run has one; the summary line, the JSON `summary` and the SVG legend then give each strategy's difference to it.
std::optional<double> FgdBaseline(const FgdReport& r) {
  for (const auto& s : r.strategies)
    if (s.name == "fgd") {
      auto it = s.unallocated_pct_at.find(r.demand_pct);
      if (it != s.unallocated_pct_at.end()) return it->second;
    }
  return std::nullopt;
}

// VsFgd: "-0.09 vs fgd" (points of GPU capacity; negative: less left unallocated than FGD).
std::string VsFgd(double v, double fgd) {
  const double d = std::round((v - fgd) * 100.0) / 100.0;
  return std::string(d >= 0 ? "+" : "") + Fixed(d == 0 ? 0.0 : d, 2) + " vs fgd";
}

// Published: the paper's figures for the run, when the list is one of its seventeen and the run follows its
// protocol's demand (the figures are at 130%).
const PublishedList* Published(const PlanContext& ctx, const FgdReport& r) {
  return ctx.published && r.demand_pct == kPublishedDemandPct ? &*ctx.published : nullptr;
}

}  // namespace

std::string Render(const PlanContext& ctx, const FgdReport& r, Format format) {
  if (format == Format::kJson) {
    Json j = ContextJson(ctx, "fgd");
    j["demandPct"] = r.demand_pct;
    j["seeds"] = r.seeds;
    j["strategies"] = Json::array();
    for (const auto& s : r.strategies) {
      Json js;
      js["name"] = s.name;
      js["points"] = Json::array();
      for (size_t k = 0; k < s.allocated_pct.size(); ++k)
        js["points"].push_back({{"arrivedDemandPct", static_cast<int>(k)}, {"allocatedPct", R4(s.allocated_pct[k])}});
      js["unallocatedPctAt"] = Json::object();
      for (const auto& [at, v] : s.unallocated_pct_at) js["unallocatedPctAt"][std::to_string(at)] = R4(v);
      js["runs"] = Json::array();
      for (const auto& run : s.runs) {
        Json jr = {{"seed", run.seed},         {"arrivals", run.arrivals},
                   {"placed", run.placed},     {"refused", run.refused},
                   {"refusedGpuDemand", R4(run.refused_gpu_demand)}};
        jr["unallocatedPctAt"] = Json::object();
        for (const auto& [at, v] : s.unallocated_pct_at) jr["unallocatedPctAt"][std::to_string(at)] = R4(100.0 - run.allocated_pct[at]);
        js["runs"].push_back(std::move(jr));
      }
      j["strategies"].push_back(std::move(js));
    }
    if (const auto fgd = FgdBaseline(r)) {
      // Only with an fgd strategy in the run, so reports without it keep their bytes.
      Json sum = {{"demandPct", r.demand_pct}, {"fgdUnallocatedPct", R4(*fgd)}};
      sum["unallocatedPct"] = Json::object();
      sum["differenceToFgd"] = Json::object();
      for (const auto& s : r.strategies) {
        const double v = s.unallocated_pct_at.at(r.demand_pct);
        sum["unallocatedPct"][s.name] = R4(v);
        sum["differenceToFgd"][s.name] = R4(v - *fgd);
      }
      j["summary"] = std::move(sum);
    }
    if (const PublishedList* pub = Published(ctx, r)) {
      // Only for one of the paper's lists, so other reports keep their bytes.
      Json jp = {{"list", std::string(pub->name)}, {"demandPct", kPublishedDemandPct}};
      jp["paper"] = {{"Random", pub->random},   {"DotProd", pub->dot_prod}, {"GpuClustering", pub->gpu_clustering},
                     {"GpuPacking", pub->gpu_packing}, {"BestFit", pub->best_fit}, {"FGD", pub->fgd}};
      jp["strategies"] = Json::object();
      for (const auto& s : r.strategies) {
        const auto [ref, figure] = PublishedReference(*pub, s.name);
        const double v = s.unallocated_pct_at.at(r.demand_pct);
        jp["strategies"][s.name] = {{"reference", std::string(ref)}, {"published", figure},
                                    {"difference", R4(v - figure)}};
      }
      j["published"] = std::move(jp);
    }
    return j.dump(2) + "\n";
  }
  if (format == Format::kCsv) {
    std::string out = "strategy,arrivedDemandPct,allocatedPct\n";
    for (const auto& s : r.strategies)
      for (size_t k = 0; k < s.allocated_pct.size(); ++k)
        out += CsvField(s.name) + "," + std::to_string(k) + "," + Fixed(s.allocated_pct[k], 4) + "\n";
    return out;
  }
  std::string out = "fgd: " + Heading(ctx);
  out += "every task once in a random order, then copies sampled with replacement, until arrived GPU demand "
         "reached " + std::to_string(r.demand_pct) +
         "% of capacity, no departures, instances in a random order per seed; mean of " + std::to_string(r.seeds.size()) + " seed(s) " + SeedsText(r.seeds) +
         "\n\n";
  std::vector<int> at;
  for (int p : {25, 50, 75, 100}) if (p < r.demand_pct) at.push_back(p);
  at.push_back(r.demand_pct);
  TextTable t;
  std::vector<std::string> head = {"strategy"};
  for (int p : at) head.push_back("alloc@" + std::to_string(p) + "%");
  for (const auto& [p, v] : r.strategies.empty() ? std::map<int, double>{} : r.strategies[0].unallocated_pct_at)
    head.push_back("unalloc@" + std::to_string(p) + "%");
  head.push_back("refused tasks/run");
  head.push_back("refused GPUs/run");
  t.Row(head);
  for (const auto& s : r.strategies) {
    std::vector<std::string> row = {s.name};
    for (int p : at) row.push_back(Pct(s.allocated_pct[p]));
    for (const auto& [p, v] : s.unallocated_pct_at) row.push_back(Pct(v));
    double refused = 0, refused_demand = 0;
    for (const auto& run : s.runs) {
      refused += run.refused;
      refused_demand += run.refused_gpu_demand;
    }
    const double runs = s.runs.empty() ? 1 : static_cast<double>(s.runs.size());
    row.push_back(Fixed(refused / runs, 1));
    row.push_back(Fixed(refused_demand / runs, 1));
    t.Row(row);
  }
  out += t.Str();
  out += "(refused GPUs: the GPU demand of the refused tasks, in GPUs: a dedicated task counts its GPUs, a shared "
         "one its share of a GPU; many small refusals weigh less than a few large ones)\n";
  if (const auto fgd = FgdBaseline(r)) {
    // One line for the run: each strategy's unallocated share at the demand and its difference to FGD.
    out += "\nunallocated at " + std::to_string(r.demand_pct) + "% (" + ctx.workload_source + "):";
    for (const auto& s : r.strategies) {
      const double v = s.unallocated_pct_at.at(r.demand_pct);
      out += " " + s.name + " " + Pct(v) + (s.name == "fgd" ? "" : " (" + VsFgd(v, *fgd) + ")") + ";";
    }
    out.back() = '\n';
  }
  if (const PublishedList* pub = Published(ctx, r)) {
    // Beside each strategy, the paper's figure it answers to (its own policy, else FGD) and the difference.
    out += "\npublished (Weng et al., ATC 2023; openb list '" + std::string(pub->name) +
           "', mean of seeds 42..51, unallocated at 130%):\n";
    TextTable p;
    p.Row({"strategy", "unalloc@130%", "paper", "published", "difference"});
    for (const auto& s : r.strategies) {
      const auto [ref, figure] = PublishedReference(*pub, s.name);
      const double v = s.unallocated_pct_at.at(r.demand_pct);
      const double d = std::round((v - figure) * 100.0) / 100.0;
      p.Row({s.name, Pct(v), std::string(ref), Pct(figure), (d >= 0 ? "+" : "") + Fixed(d == 0 ? 0.0 : d, 2)});
    }
    out += p.Str();
  }
  return out;
}

// ---- replay -----------------------------------------------------------------------------------------------

std::string Render(const PlanContext& ctx, const ReplayReport& r, Format format) {
  if (format == Format::kJson) {
    Json j = ContextJson(ctx, "replay");
    j["timed"] = r.timed;
    j["strategies"] = Json::array();
    for (const auto& s : r.strategies) {
      Json js = {{"name", s.name},
                 {"arrivals", s.arrivals},
                 {"placed", s.placed},
                 {"refused", s.refused},
                 {"peakGpusInUse", s.peak_gpus_in_use},
                 {"peakAt", s.peak_at},
                 {"peakAllocatedPct", R4(s.peak_allocated_pct)},
                 {"refusalsByReason", Json::object()}};
      for (const auto& [reason, n] : s.refusals) js["refusalsByReason"][reason] = n;
      if (!s.refused_replicas.empty()) js["refusedReplicasByService"] = s.refused_replicas;
      js["timeline"] = Json::array();
      for (const auto& b : s.timeline) {
        Json jb = {{"start", b.start},
                   {"end", b.end},
                   {"arrivals", b.arrivals},
                   {"peakGpusInUse", b.peak_gpus_in_use},
                   {"peakAllocatedPct", R4(b.peak_allocated_pct)},
                   {"refusals", Json::object()}};
        for (const auto& [reason, n] : b.refusals) jb["refusals"][reason] = n;
        js["timeline"].push_back(std::move(jb));
      }
      if (s.waits) {
        auto figures = [](const WaitFigures& f) {
          return Json{{"shape", f.shape}, {"tasks", f.tasks}, {"waited", f.waited}, {"neverStarted", f.never_started},
                      {"p50", R4(f.p50)}, {"p95", R4(f.p95)}, {"p99", R4(f.p99)}, {"max", R4(f.max)}};
        };
        js["waits"] = {{"all", figures(s.waits->all)}, {"byShape", Json::array()}, {"lastEnd", s.waits->last_end}};
        for (const auto& f : s.waits->by_shape) js["waits"]["byShape"].push_back(figures(f));
      }
      j["strategies"].push_back(std::move(js));
    }
    return j.dump(2) + "\n";
  }
  std::set<std::string> reasons;
  for (const auto& s : r.strategies)
    for (const auto& [reason, n] : s.refusals) reasons.insert(reason);
  if (format == Format::kCsv) {
    std::string out = "strategy,start,end,arrivals,peakGpusInUse,peakAllocatedPct";
    for (const auto& reason : reasons) out += "," + CsvField(reason);
    out += "\n";
    for (const auto& s : r.strategies)
      for (const auto& b : s.timeline) {
        out += CsvField(s.name) + "," + std::to_string(b.start) + "," + std::to_string(b.end) + "," +
               std::to_string(b.arrivals) + "," + std::to_string(b.peak_gpus_in_use) + "," +
               Fixed(b.peak_allocated_pct, 4);
        for (const auto& reason : reasons) {
          auto it = b.refusals.find(reason);
          out += "," + std::to_string(it == b.refusals.end() ? 0 : it->second);
        }
        out += "\n";
      }
    return out;
  }
  std::string out = "replay: " + Heading(ctx);
  out += r.timed ? "arrivals and departures in time order (seconds from the start of the workload)\n\n"
                 : "every task at once in workload order, nothing departs\n\n";
  TextTable t;
  std::vector<std::string> head = {"strategy", "arrivals", "placed", "refused", "peak GPUs in use", "peak at",
                                   "peak allocated"};
  for (const auto& reason : reasons) head.push_back(reason);
  t.Row(head);
  for (const auto& s : r.strategies) {
    std::vector<std::string> row = {s.name, Count(s.arrivals), Count(s.placed), Count(s.refused),
                                    Count(s.peak_gpus_in_use), Count(s.peak_at), Pct(s.peak_allocated_pct)};
    for (const auto& reason : reasons) {
      auto it = s.refusals.find(reason);
      row.push_back(Count(it == s.refusals.end() ? 0 : it->second));
    }
    t.Row(row);
  }
  out += t.Str();
  if (!r.strategies.empty() && !r.strategies.front().refused_replicas.empty()) {
    out += "\nrefused replicas by service (the server would keep each waiting for capacity):\n";
    TextTable by;
    std::vector<std::string> names = {"strategy"};
    for (const auto& [service, n] : r.strategies.front().refused_replicas) names.push_back(service);
    by.Row(names);
    for (const auto& s : r.strategies) {
      std::vector<std::string> row = {s.name};
      for (const auto& [service, n] : s.refused_replicas) row.push_back(Count(n));
      by.Row(row);
    }
    out += by.Str();
  }
  for (const auto& s : r.strategies) {
    if (!s.waits) continue;
    out += "\n" + s.name + " with waiting (refused tasks wait in line and start as departures free room; wait in "
           "seconds from arrival to start; the last task ends at " + Count(s.waits->last_end) + "):\n";
    TextTable w;
    w.Row({"shape", "tasks", "waited", "never started", "p50", "p95", "p99", "max"});
    auto row = [&w](const WaitFigures& f) {
      w.Row({f.shape, Count(f.tasks), Count(f.waited), Count(f.never_started), Fixed(f.p50, 1), Fixed(f.p95, 1),
             Fixed(f.p99, 1), Fixed(f.max, 1)});
    };
    row(s.waits->all);
    for (size_t i = 0; i < s.waits->by_shape.size() && i < 20; ++i) row(s.waits->by_shape[i]);
    out += w.Str();
  }
  for (const auto& s : r.strategies) {
    out += "\n" + s.name + " over time:\n";
    TextTable tl;
    tl.Row({"from", "to", "arrivals", "peak GPUs in use", "peak allocated", "refused (by reason)"});
    for (const auto& b : s.timeline) {
      std::string ref;
      for (const auto& [reason, n] : b.refusals) ref += (ref.empty() ? "" : ", ") + reason + " " + Count(n);
      tl.Row({Count(b.start), Count(b.end), Count(b.arrivals), Count(b.peak_gpus_in_use), Pct(b.peak_allocated_pct),
              ref.empty() ? "-" : ref});
    }
    out += tl.Str();
  }
  return out;
}

// ---- size -------------------------------------------------------------------------------------------------

std::string Render(const PlanContext& ctx, const SizeReport& r, Format format) {
  if (format == Format::kJson) {
    Json j = ContextJson(ctx, "size");
    j["timed"] = r.timed;
    j["strategies"] = Json::array();
    for (const auto& s : r.strategies) {
      Json js = {{"name", s.name}, {"instanceTypes", Json::array()}};
      for (const auto& t : s.types)
        js["instanceTypes"].push_back({{"name", t.instance_type},
                                       {"gpusPerInstance", t.gpus_per_instance},
                                       {"count", t.count},
                                       {"gpus", t.count * t.gpus_per_instance},
                                       {"unplaceableTasks", t.unplaceable_tasks},
                                       {"unplaceableExamples", t.unplaceable_examples},
                                       {"waitP95", t.wait_p95_s ? Json(R4(*t.wait_p95_s)) : Json()}});
      j["strategies"].push_back(std::move(js));
    }
    return j.dump(2) + "\n";
  }
  if (format == Format::kCsv) {
    std::string out = "strategy,instanceType,gpusPerInstance,count,gpus,unplaceableTasks\n";
    for (const auto& s : r.strategies)
      for (const auto& t : s.types)
        out += CsvField(s.name) + "," + CsvField(t.instance_type) + "," + std::to_string(t.gpus_per_instance) + "," +
               std::to_string(t.count) + "," + std::to_string(t.count * t.gpus_per_instance) + "," +
               std::to_string(t.unplaceable_tasks) + "\n";
    return out;
  }
  std::string out = "size: " + Heading(ctx);
  const bool waits = std::any_of(r.strategies.begin(), r.strategies.end(), [](const SizeStrategyResult& s) {
    return std::any_of(s.types.begin(), s.types.end(), [](const SizeTypeResult& t) { return t.wait_p95_s.has_value(); });
  });
  out += waits ? std::string("the smallest count of each instance type, alone, for which tasks that do not fit wait and "
                             "the p95 wait stays within the target, none left waiting (arrivals and departures in time "
                             "order)\n\n")
               : std::string("the smallest count of each instance type, alone, that places the workload with no "
                             "refusal (") + (r.timed ? "arrivals and departures in time order" : "every task at once") +
                     ")\n\n";
  TextTable t;
  std::vector<std::string> head = {"strategy", "instance type", "count", "GPUs"};
  if (waits) head.push_back("p95 wait (s)");
  head.push_back("tasks that never fit");
  t.Row(head);
  for (const auto& s : r.strategies)
    for (const auto& ty : s.types) {
      std::string never = Count(ty.unplaceable_tasks);
      if (!ty.unplaceable_examples.empty()) {
        never += " (";
        for (size_t i = 0; i < ty.unplaceable_examples.size(); ++i)
          never += (i ? ", " : "") + ty.unplaceable_examples[i];
        never += ty.unplaceable_tasks > static_cast<int>(ty.unplaceable_examples.size()) ? ", ...)" : ")";
      }
      std::vector<std::string> row = {s.name, ty.instance_type, Count(ty.count),
                                      Count(static_cast<int64_t>(ty.count) * ty.gpus_per_instance)};
      if (waits) row.push_back(ty.wait_p95_s ? Fixed(*ty.wait_p95_s, 1) : "-");
      row.push_back(never);
      t.Row(row);
    }
  out += t.Str();
  // Why spread and random need so many more GPUs than binpack: said wherever they appear (docs/planning.md).
  const bool scatters = std::any_of(r.strategies.begin(), r.strategies.end(), [](const SizeStrategyResult& s) {
    return s.name.rfind("spread", 0) == 0 || s.name.rfind("random", 0) == 0;
  });
  if (scatters)
    out += "\nspread and random need more GPUs by design: spread puts each task where the fewest are (or on the "
           "emptiest GPU) and random anywhere it fits, so every instance ends up holding a few tasks and the free "
           "memory is scattered in pieces too small for the next large task; the fleet that places everything is "
           "then far larger than binpack's, which fills one GPU before it opens another. Size for binpack and use "
           "spread only where spreading is the point (fault domains).\n";
  return out;
}

// ---- bounds -----------------------------------------------------------------------------------------------

std::string Render(const PlanContext& ctx, const BoundsReport& r, Format format) {
  if (format == Format::kJson) {
    Json j = ContextJson(ctx, "bounds");
    j["capacity"] = r.capacity;
    j["items"] = r.items;
    j["wholeItems"] = r.whole;
    j["fractionalItems"] = r.fractional;
    j["skippedItems"] = r.skipped;
    j["L1"] = r.l1;
    j["L2"] = r.l2;
    j["ffd"] = r.ffd;
    j["bestFit"] = r.best_fit;
    j["firstFit"] = r.first_fit;
    j["multiGpuTasks"] = r.multi_gpu_tasks;
    j["allGpuTasks"] = {{"items", r.all.items}, {"L1", r.all.l1},           {"L2", r.all.l2},
                        {"ffd", r.all.ffd},     {"bestFit", r.all.best_fit}, {"firstFit", r.all.first_fit}};
    return j.dump(2) + "\n";
  }
  if (format == Format::kCsv) {
    std::string out = "metric,value\n";
    for (const auto& [k, v] : std::vector<std::pair<const char*, int64_t>>{
             {"capacity", r.capacity}, {"items", r.items}, {"wholeItems", r.whole}, {"fractionalItems", r.fractional},
             {"skippedItems", r.skipped}, {"L1", r.l1}, {"L2", r.l2}, {"ffd", r.ffd}, {"bestFit", r.best_fit},
             {"firstFit", r.first_fit}, {"multiGpuTasks", r.multi_gpu_tasks}, {"allItems", r.all.items},
             {"allL1", r.all.l1}, {"allL2", r.all.l2}, {"allFfd", r.all.ffd}, {"allBestFit", r.all.best_fit},
             {"allFirstFit", r.all.first_fit}})
      out += std::string(k) + "," + std::to_string(v) + "\n";
    return out;
  }
  std::string out = "bounds: " + Heading(ctx);
  out += "tasks as items in bins of " + Count(r.capacity) + " units, all at once: " + Count(r.items) +
         " single-GPU items (" + Count(r.whole) + " whole GPUs, " + Count(r.fractional) + " shares); " +
         Count(r.multi_gpu_tasks) + " multi-GPU tasks, each k whole GPUs, in the second column only (" +
         Count(r.all.items) + " items); " + Count(r.skipped - r.multi_gpu_tasks) + " arrivals with no GPU left out\n\n";
  TextTable t;
  t.Row({"GPUs needed", "single-GPU tasks", "all GPU tasks"});
  t.Row({"L1 = ceil(sum / capacity)   (lower bound)", Count(r.l1), Count(r.all.l1)});
  t.Row({"L2 Martello-Toth            (lower bound)", Count(r.l2), Count(r.all.l2)});
  t.Row({"first-fit decreasing", Count(r.ffd), Count(r.all.ffd)});
  t.Row({"best fit, arrival order", Count(r.best_fit), Count(r.all.best_fit)});
  t.Row({"first fit, arrival order", Count(r.first_fit), Count(r.all.first_fit)});
  return out + t.Str();
}

// ---- SVG --------------------------------------------------------------------------------------------------

std::string FgdSvg(const PlanContext& ctx, const FgdReport& r) {
  // The legend goes below the plot (never over the curves): the picture grows by its height.
  const double legend_h = 22.0 * static_cast<double>(r.strategies.size() + 1) + 16;
  const double W = 820, plot_h = 520, H = plot_h + legend_h, left = 70, right = 20, top = 50, bottom = 60;
  const double pw = W - left - right, ph = plot_h - top - bottom;
  const double xmax = r.demand_pct, ymax = 100;
  auto X = [&](double v) { return left + pw * v / xmax; };
  auto Y = [&](double v) { return top + ph * (1 - v / ymax); };
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                  "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
    << " " << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
    << XmlEscape("GPU allocation as demand arrives: " + Basename(ctx.workload_source)) << "</text>\n";
  s << "<text x=\"" << W / 2 << "\" y=\"39\" text-anchor=\"middle\" fill=\"#555\">"
    << XmlEscape(Count(ctx.gpus) + " GPUs on " + Count(ctx.instances) + " instances, " + ctx.units +
                 " units, mean of " + std::to_string(r.seeds.size()) + " seed(s) " + SeedsText(r.seeds))
    << "</text>\n";
  // Grid and ticks.
  const int xstep = r.demand_pct > 200 ? 50 : 10;
  for (int v = 0; v <= r.demand_pct; v += xstep) {
    s << "<line x1=\"" << X(v) << "\" y1=\"" << Y(0) << "\" x2=\"" << X(v) << "\" y2=\"" << Y(ymax)
      << "\" stroke=\"#eee\"/>\n";
    s << "<line x1=\"" << X(v) << "\" y1=\"" << Y(0) << "\" x2=\"" << X(v) << "\" y2=\"" << Y(0) + 5
      << "\" stroke=\"black\"/>\n";
    s << "<text x=\"" << X(v) << "\" y=\"" << Y(0) + 19 << "\" text-anchor=\"middle\">" << v << "</text>\n";
  }
  for (int v = 0; v <= 100; v += 10) {
    s << "<line x1=\"" << X(0) << "\" y1=\"" << Y(v) << "\" x2=\"" << X(xmax) << "\" y2=\"" << Y(v)
      << "\" stroke=\"#eee\"/>\n";
    s << "<line x1=\"" << X(0) - 5 << "\" y1=\"" << Y(v) << "\" x2=\"" << X(0) << "\" y2=\"" << Y(v)
      << "\" stroke=\"black\"/>\n";
    s << "<text x=\"" << X(0) - 8 << "\" y=\"" << Y(v) + 4 << "\" text-anchor=\"end\">" << v << "</text>\n";
  }
  // Axes and labels.
  s << "<line x1=\"" << X(0) << "\" y1=\"" << Y(0) << "\" x2=\"" << X(xmax) << "\" y2=\"" << Y(0)
    << "\" stroke=\"black\"/>\n";
  s << "<line x1=\"" << X(0) << "\" y1=\"" << Y(0) << "\" x2=\"" << X(0) << "\" y2=\"" << Y(ymax)
    << "\" stroke=\"black\"/>\n";
  s << "<text x=\"" << left + pw / 2 << "\" y=\"" << plot_h - 18
    << "\" text-anchor=\"middle\">arrived GPU demand (% of GPU capacity)</text>\n";
  s << "<text transform=\"translate(20," << top + ph / 2
    << ") rotate(-90)\" text-anchor=\"middle\">allocated GPU capacity (%)</text>\n";
  // y = x: everything that arrived is allocated.
  double d = std::min<double>(xmax, ymax);
  s << "<line x1=\"" << X(0) << "\" y1=\"" << Y(0) << "\" x2=\"" << X(d) << "\" y2=\"" << Y(d)
    << "\" stroke=\"#999\" stroke-dasharray=\"4 4\"/>\n";
  // One polyline per strategy.
  for (size_t k = 0; k < r.strategies.size(); ++k) {
    const auto& st = r.strategies[k];
    s << "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" << kColors[k % 10] << "\" points=\"";
    for (size_t p = 0; p < st.allocated_pct.size(); ++p)
      s << (p ? " " : "") << Fixed(X(static_cast<double>(p)), 1) << "," << Fixed(Y(st.allocated_pct[p]), 1);
    s << "\"><title>" << XmlEscape(st.name) << "</title></polyline>\n";
  }
  // Legend, under the x axis's label, left-aligned with the plot; sized to its longest label at about 6.8 px per
  // character of the 12 px font.
  std::vector<std::string> labels;
  const std::optional<double> fgd = FgdBaseline(r);
  size_t longest = std::string("all arrived demand allocated").size();
  for (const auto& st : r.strategies) {
    std::string label = st.name;
    auto it = st.unallocated_pct_at.find(r.demand_pct);
    if (it != st.unallocated_pct_at.end()) {
      label += ": " + Pct(it->second) + " unallocated at " + std::to_string(r.demand_pct) + "%";
      if (fgd && st.name != "fgd") label += " (" + VsFgd(it->second, *fgd) + ")";
    }
    longest = std::max(longest, label.size());
    labels.push_back(std::move(label));
  }
  const double lw = 48 + 6.8 * static_cast<double>(longest);
  const double lh = 22.0 * static_cast<double>(labels.size() + 1) + 6;
  const double lx = left + 10, ly0 = plot_h + 6;
  s << "<rect x=\"" << lx - 10 << "\" y=\"" << ly0 - 6 << "\" width=\"" << lw << "\" height=\"" << lh
    << "\" fill=\"white\" stroke=\"#ccc\"/>\n";
  for (size_t k = 0; k < labels.size(); ++k) {
    double y = ly0 + 22 * k + 10;
    s << "<line x1=\"" << lx << "\" y1=\"" << y << "\" x2=\"" << lx + 26 << "\" y2=\"" << y << "\" stroke=\""
      << kColors[k % 10] << "\" stroke-width=\"2\"/>\n";
    s << "<text x=\"" << lx + 34 << "\" y=\"" << y + 4 << "\">" << XmlEscape(labels[k]) << "</text>\n";
  }
  double y = ly0 + 22 * labels.size() + 10;
  s << "<line x1=\"" << lx << "\" y1=\"" << y << "\" x2=\"" << lx + 26 << "\" y2=\"" << y
    << "\" stroke=\"#999\" stroke-dasharray=\"4 4\"/>\n";
  s << "<text x=\"" << lx + 34 << "\" y=\"" << y + 4 << "\">all arrived demand allocated</text>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace gpupack::plan
