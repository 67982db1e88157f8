// Reports of the planner: a table for people, JSON and CSV for programs, and an SVG of the fgd curves.
// The JSON keys are documented in docs/planning.md; output depends only on the report (no clock, no paths
// beyond the input names), so two runs with the same inputs print the same bytes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "planner/bounds.h"
#include "planner/protocols.h"
#include "planner/published.h"

namespace gpupack::plan {

// PlanContext: what was planned, for the heading of every report.
struct PlanContext {
  std::string fleet_source;  // empty: no fleet
  int instances = 0;
  int gpus = 0;
  int instance_types = 0;
  std::string workload_source;
  int tasks = 0;      // the workload's task entries (services not counted)
  std::string units;  // "milli" | "mib"
  int services = 0;   // the workload's services
  // The FGD paper's figures when the workload is one of its seventeen openb lists and the fleet its 1,213
  // nodes (planner/published.h): the fgd report then shows each strategy beside the paper's figure.
  std::optional<PublishedList> published = std::nullopt;
};

enum class Format { kTable, kJson, kCsv };
Result<Format> ParseFormat(std::string_view text);  // "table" | "json" | "csv"

std::string Render(const PlanContext& ctx, const FgdReport& report, Format format);
std::string Render(const PlanContext& ctx, const ReplayReport& report, Format format);
std::string Render(const PlanContext& ctx, const SizeReport& report, Format format);
std::string Render(const PlanContext& ctx, const BoundsReport& report, Format format);

// FgdSvg draws allocated share of GPU capacity against arrived demand, one polyline per strategy, with axes,
// ticks, grid, the y = x line (everything that arrived is allocated) and a legend.
std::string FgdSvg(const PlanContext& ctx, const FgdReport& report);

}  // namespace gpupack::plan
