// `gpupack plan`: flags, input loading and output for the capacity planner. Wiring only; the work is in
// planner/ (docs/planning.md).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "planner/bounds.h"
#include "planner/inputs.h"
#include "planner/protocols.h"
#include "planner/report.h"
#include "cli/commands.h"
#include "scheduler/strategies.h"

namespace gpupack::cli {

namespace {

// ParseSeconds: "90", "90s", "5m" or "1h" in seconds; nullopt when malformed or negative.
std::optional<double> ParseSeconds(const std::string& text) {
  if (text.empty()) return std::nullopt;
  double unit = 1;
  std::string number = text;
  switch (text.back()) {
    case 's': number.pop_back(); break;
    case 'm': unit = 60, number.pop_back(); break;
    case 'h': unit = 3600, number.pop_back(); break;
    default: break;
  }
  if (number.empty() || number.find_first_not_of("0123456789.") != std::string::npos) return std::nullopt;
  try {
    size_t used = 0;
    const double v = std::stod(number, &used);
    if (used != number.size() || v < 0) return std::nullopt;
    return v * unit;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

void AddPlanFlags(CLI::App& app, PlanFlags& f) {
  app.description(
      "Replay a workload against a fleet in-process, with the placement code the server runs, and report how "
      "much GPU capacity each placement strategy allocates, strands or refuses. Inputs are JSON (a fleet: "
      "{\"instanceTypes\": [...]}; a workload: {\"tasks\": [...]}) or the openb CSVs of the Alibaba GPU trace "
      "(node list = fleet, pod list = workload), told apart by their content. See docs/planning.md.");
  app.add_option("inputs", f.inputs, "fleet and workload files, in any order (told apart by content)");
  app.add_option("--fleet", f.fleet, "the fleet: JSON instance types, or an openb node list");
  app.add_option("--workload", f.workload, "the workload: JSON task definitions, or an openb pod list");
  app.add_option("--protocol", f.protocol,
                 "fgd (allocation as sampled demand arrives), replay (arrivals and departures in time), size "
                 "(smallest count of each instance type), bounds (one-dimensional lower bounds)")
      ->capture_default_str();
  app.add_option("--strategy", f.strategies,
                 "a RunTask placementStrategy, repeatable: " + StrategySyntaxList() +
                     ", or a chain A,B (default: all of them for fgd and replay, binpack:gpuMemory for size)")
      ->allow_extra_args(false);
  app.add_option("--gpu-units", f.gpu_units,
                 "auto, mib (GPU memory in MiB) or milli (every GPU holds 1000 units: the FGD paper's setting); "
                 "auto is milli when the fleet's GPU memory is unknown (openb), else mib")
      ->capture_default_str();
  app.add_option("--seeds", f.seeds, "fgd seeds, A..B or A,B,C; replay and size use the first")->capture_default_str();
  app.add_option("--demand", f.demand, "fgd: arrived GPU demand to stop at, percent of GPU capacity")
      ->capture_default_str();
  app.add_option("--format", f.format, "table, json or csv")->capture_default_str();
  app.add_option("--svg", f.svg, "fgd: also draw allocated share against arrived demand to this SVG file");
  app.add_option("--jobs", f.jobs, "threads (default: one per hardware thread)");
  app.add_flag("--at-once", f.at_once, "replay and size: ignore times; every task arrives at once, none leaves");
  app.add_option("--buckets", f.buckets, "replay: time buckets in the timeline")->capture_default_str();
  app.add_flag("--wait", f.wait,
               "replay: also replay with tasks that do not fit waiting in line (as through a capacity provider) and "
               "report wait-time percentiles per task shape");
  app.add_option("--target-wait-p95", f.target_wait_p95,
                 "size: the smallest count whose p95 wait (tasks that do not fit wait in line) is at most this, "
                 "in seconds (60, 60s, 5m)");
  app.add_option("--instance-type", f.instance_types, "size: only this instance type (repeatable)")
      ->allow_extra_args(false);
  app.add_flag("--quiet", f.quiet, "no progress line on stderr");
}

namespace {

int Error(const Status& st) {
  std::fprintf(stderr, "gpupack plan: %s\n", st.message().c_str());
  return st.code() == ErrorCode::kInvalidParameter || st.code() == ErrorCode::kClient ? 2 : 1;
}

int Usage(const std::string& m) {
  std::fprintf(stderr, "gpupack plan: %s (see gpupack plan --help)\n", m.c_str());
  return 2;
}

// Progress prints "gpupack plan: fgd 23/60 runs, 3.4 s" on stderr once a run has taken a second, at most ten
// times a second on a terminal (one line every five seconds otherwise), and a last line when it is done.
class Progress {
 public:
  Progress(std::string what, bool quiet)
      : what_(std::move(what)), quiet_(quiet), tty_(isatty(fileno(stderr)) != 0),
        start_(std::chrono::steady_clock::now()) {}
  ~Progress() { Finish(); }
  void Update(int done, int total) {
    if (quiet_) return;
    double s = Elapsed();
    if (s < 1.0 || s - last_ < (tty_ ? 0.1 : 5.0)) return;
    last_ = s;
    shown_ = true;
    std::fprintf(stderr, "%sgpupack plan: %s %d/%d runs, %.1f s%s", tty_ ? "\r" : "", what_.c_str(), done, total, s,
                 tty_ ? "" : "\n");
    std::fflush(stderr);
  }
  void Finish() {
    if (!shown_ || finished_) return;
    finished_ = true;
    std::fprintf(stderr, "%sgpupack plan: %s done in %.1f s\n", tty_ ? "\r\033[K" : "", what_.c_str(), Elapsed());
  }
  plan::ProgressFn Fn() {
    return [this](int done, int total) { Update(done, total); };
  }

 private:
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  std::string what_;
  bool quiet_, tty_;
  std::chrono::steady_clock::time_point start_;
  double last_ = 0;
  bool shown_ = false, finished_ = false;
};

}  // namespace

int RunPlan(const PlanFlags& f) {
  // ---- options
  auto format = plan::ParseFormat(f.format);
  if (!format.ok()) return Usage(format.status().message());
  auto units = plan::ParseGpuUnits(f.gpu_units);
  if (!units.ok()) return Usage(units.status().message());
  auto seeds = plan::ParseSeeds(f.seeds);
  if (!seeds.ok()) return Usage(seeds.status().message());
  const std::string& protocol = f.protocol;
  if (protocol != "fgd" && protocol != "replay" && protocol != "size" && protocol != "bounds")
    return Usage("--protocol must be fgd, replay, size or bounds, not '" + protocol + "'");
  if (!f.svg.empty() && protocol != "fgd") return Usage("--svg draws the fgd curves; use it with --protocol fgd");
  if (!f.instance_types.empty() && protocol != "size") return Usage("--instance-type is for --protocol size");
  if (f.buckets < 1 || f.buckets > 10000) return Usage("--buckets must be 1..10000");
  if (f.wait && protocol != "replay") return Usage("--wait is for --protocol replay");
  std::optional<double> target_wait;
  if (!f.target_wait_p95.empty()) {
    if (protocol != "size") return Usage("--target-wait-p95 is for --protocol size");
    target_wait = ParseSeconds(f.target_wait_p95);
    if (!target_wait) return Usage("--target-wait-p95 must be seconds (60, 60s, 5m or 1h), not '" + f.target_wait_p95 + "'");
  }
  if (f.jobs < 0) return Usage("--jobs must be >= 0");
  std::vector<plan::PlanStrategy> strategies;
  for (const auto& s : f.strategies) {
    auto ps = plan::ParseStrategy(s);
    if (!ps.ok()) return Usage(ps.status().message());
    strategies.push_back(std::move(ps).value());
  }
  if (strategies.empty())
    strategies = protocol == "size" ? std::vector<plan::PlanStrategy>{std::move(plan::ParseStrategy("binpack:gpuMemory")).value()}
                                    : plan::AllStrategies();
  const int jobs = f.jobs > 0 ? f.jobs : std::max(1u, std::thread::hardware_concurrency());

  // ---- inputs
  std::optional<plan::Fleet> fleet;
  std::optional<plan::Workload> workload;
  auto take = [&](const std::string& path, const char* role) -> Status {
    auto in = plan::LoadInput(path);
    if (!in.ok()) return in.status();
    if (auto* fl = std::get_if<plan::Fleet>(&*in)) {
      if (std::string(role) == "workload")
        return Status::InvalidParameter(path + ":1: this is a fleet, not a workload; pass it as --fleet");
      if (fleet) return Status::InvalidParameter(path + ":1: a second fleet (" + fleet->source + " is one); give one");
      fleet = std::move(*fl);
    } else {
      if (std::string(role) == "fleet")
        return Status::InvalidParameter(path + ":1: this is a workload, not a fleet; pass it as --workload");
      if (workload)
        return Status::InvalidParameter(path + ":1: a second workload (" + workload->source + " is one); give one");
      workload = std::get<plan::Workload>(std::move(*in));
    }
    return Status::Ok();
  };
  if (!f.fleet.empty())
    if (Status st = take(f.fleet, "fleet"); !st.ok()) return Error(st);
  if (!f.workload.empty())
    if (Status st = take(f.workload, "workload"); !st.ok()) return Error(st);
  for (const auto& path : f.inputs)
    if (Status st = take(path, "any"); !st.ok()) return Error(st);
  if (!workload) return Usage("no workload: pass a JSON workload or an openb pod list (--workload FILE)");
  if (!fleet && protocol != "bounds")
    return Usage("no fleet: pass a JSON fleet or an openb node list (--fleet FILE)");

  auto scenario = plan::BuildScenario(fleet ? &*fleet : nullptr, *workload, *units);
  if (!scenario.ok()) return Error(scenario.status());
  plan::PlanContext ctx;
  if (fleet) {
    ctx.fleet_source = fleet->source;
    ctx.instances = fleet->InstanceCount();
    ctx.gpus = fleet->GpuCount();
    ctx.instance_types = static_cast<int>(fleet->types.size());
  }
  ctx.workload_source = workload->source;
  // The paper's figures hold for its fleet (1,213 nodes, 6,212 GPUs) and one of its seventeen pod lists.
  if (fleet && fleet->InstanceCount() == 1213 && fleet->GpuCount() == 6212) ctx.published = plan::PublishedFor(*workload);
  ctx.services = workload->ServiceCount();
  ctx.tasks = static_cast<int>(workload->tasks.size()) - ctx.services;
  ctx.units = plan::GpuUnitsName(scenario->units);

  // ---- run
  std::string out;
  Progress progress(protocol, f.quiet);
  if (protocol == "fgd") {
    plan::FgdOptions o;
    o.demand_pct = f.demand;
    o.seeds = *seeds;
    o.jobs = jobs;
    o.progress = progress.Fn();
    auto r = plan::RunFgd(*scenario, strategies, o);
    progress.Finish();
    if (!r.ok()) return Error(r.status());
    out = plan::Render(ctx, *r, *format);
    if (!f.svg.empty()) {
      std::ofstream svg(f.svg, std::ios::binary | std::ios::trunc);
      svg << plan::FgdSvg(ctx, *r);
      if (!svg.good()) return Error(Status::Server("cannot write " + f.svg));
    }
  } else if (protocol == "replay") {
    plan::ReplayOptions o;
    o.at_once = f.at_once;
    o.buckets = f.buckets;
    o.wait = f.wait;
    o.seed = seeds->front();
    o.jobs = jobs;
    o.progress = progress.Fn();
    auto r = plan::RunReplay(*scenario, strategies, o);
    progress.Finish();
    if (!r.ok()) return Error(r.status());
    out = plan::Render(ctx, *r, *format);
  } else if (protocol == "size") {
    plan::SizeOptions o;
    o.at_once = f.at_once;
    o.seed = seeds->front();
    o.jobs = jobs;
    o.instance_types = f.instance_types;
    o.target_wait_p95_s = target_wait;
    o.progress = progress.Fn();
    auto r = plan::RunSize(*scenario, strategies, o);
    progress.Finish();
    if (!r.ok()) return Error(r.status());
    out = plan::Render(ctx, *r, *format);
  } else {
    auto r = plan::RunBounds(*scenario);
    if (!r.ok()) return Error(r.status());
    out = plan::Render(ctx, *r, *format);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace gpupack::cli
