// The strategy registry: every placement strategy kind the scheduler has, one entry each (StrategyRegistry).
//
// An entry says everything the rest of the code needs to know about a kind:
//   - which RunTask `field` values name it (fields, field_prefix; aliases only for Placer::Create), from which
//     ValidatePlacement composes its messages;
//   - its scorer (make_scorer; the formula is in the scorer's comment in strategies.cc);
//   - its optional index walk (index_walk): a fast path that decides as the full scan would when the kind
//     comes first in the request;
//   - the GPU a task gets inside the chosen instance when the kind comes first (gpu_choice);
//   - where lists shown to people put it (list_rank: `gpupack plan --help`, the planner's default list).
// ValidatePlacement, Placer::Create, the planner's strategy parsing and list, and `gpupack plan --help` read the
// registry, so adding a strategy is one entry in strategies.cc plus its scorer (and its walk, if it has one).
//
// The registry is built once, on first use, and never changes: safe to read from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/model.h"

namespace gpupack {

class Scorer;          // scheduler/placement_parts.h
struct IndexWalkArgs;  // scheduler/placement_parts.h
struct Placement;      // scheduler/placement.h

// GpuChoice: which GPU a shared task gets inside the chosen instance, decided by the request's first strategy.
enum class GpuChoice {
  kBestFit,   // the GPU with the least remaining memory that fits: partly used GPUs fill up first
  kEmptiest,  // the GPU with the most remaining memory: tasks spread over the GPUs too
  kFragment,  // the GPU of the largest fragment decrease (scheduler/fragmentation.h); its walk chooses it
};

// IndexWalk: a fast path for a kind that comes first in the request (placement_parts.h lists them). It fills
// `result` and returns true when it decided (as the full scan would, or for random by sampling with the scan's
// distribution: StrategyKind::walk_is_exact); false leaves the decision to the scan.
using IndexWalk = bool (*)(const IndexWalkArgs& args, Placement& result);

struct StrategyKind {
  // How tests and docs name the kind: "binpack:cpu", "spread:instanceId/host", "spread:attribute:*".
  std::string_view name = {};
  // placementStrategy.type: "binpack", "spread", "random".
  std::string_view type = {};
  // The exact `field` values RunTask accepts for this kind, in the order ValidatePlacement's message lists them.
  std::vector<std::string_view> fields = {};
  // Or: `field` is this prefix followed by a non-empty name ("attribute:" for attribute:NAME). A kind with
  // neither fields nor a prefix takes no field (random).
  std::string_view field_prefix = {};
  // Other spellings Placer::Create compiles to this kind but RunTask's validation refuses ("CPU"): requests
  // built in code, never by a client.
  std::vector<std::string_view> aliases = {};
  // The scorer for one accepted (or alias) `field` value.
  std::unique_ptr<Scorer> (*make_scorer)(std::string_view field) = nullptr;
  // The fast path when the kind comes first; null = the scan decides.
  IndexWalk index_walk = nullptr;
  // Whether index_walk chooses the instance the scan would (true), or only draws as the scan does: random alone
  // samples a uniformly random eligible instance, the scan's distribution but not the scan's least key.
  bool walk_is_exact = true;
  // The GPU inside the chosen instance when the kind comes first.
  GpuChoice gpu_choice = GpuChoice::kBestFit;
  // The scorer reads the per-instance random draw (Placer computes it only when some scorer does).
  bool random_key = false;
  // Position in lists shown to people and in the planner's default list (1 = first); 0 = not listed.
  int list_rank = 0;
  // A baseline for the planner only (fgd): Placer::Create compiles it, RunTask's validation does not know it.
  bool planner_only = false;

  // TakesField: whether `field` must name something (false: it must be empty).
  bool TakesField() const { return !fields.empty() || !field_prefix.empty(); }
  // Accepts: whether `field` names this kind as RunTask's validation accepts it.
  bool Accepts(std::string_view field) const;
  // Compiles: Accepts, or one of the aliases.
  bool Compiles(std::string_view field) const;
  // FieldNames: the accepted fields as a message lists them: "cpu"; "instanceId", "host"; "attribute:NAME".
  std::vector<std::string> FieldNames() const;
  // Syntax: how a list shows the kind: type and first field, "binpack:cpu", "spread:attribute:NAME", "random".
  std::string Syntax() const;
};

// StrategyRegistry: every kind, in the order of ValidatePlacement's messages (binpack cpu, memory, gpuMemory;
// spread instanceId/host, attribute; random).
const std::vector<StrategyKind>& StrategyRegistry();

// FindStrategyKind: the kind RunTask accepts for `s` (Accepts; never a planner_only kind); null when none does.
const StrategyKind* FindStrategyKind(const PlacementStrategy& s);
// ResolveStrategyKind: the kind Placer::Create compiles `s` to (Compiles); null when none does.
const StrategyKind* ResolveStrategyKind(const PlacementStrategy& s);

// FindPlannerStrategyKind: FindStrategyKind, or a planner_only kind that accepts `s` (gpupack plan --strategy).
const StrategyKind* FindPlannerStrategyKind(const PlacementStrategy& s);

// StrategyTypes: the distinct types RunTask accepts, in registry order ("binpack", "spread", "random").
std::vector<std::string_view> StrategyTypes();
// StrategyFieldNames: the FieldNames of every kind of `type` RunTask accepts, in registry order; empty when none
// takes a field.
std::vector<std::string> StrategyFieldNames(std::string_view type);

// ListedStrategies: the kinds with a list_rank, by rank.
std::vector<const StrategyKind*> ListedStrategies();
// StrategySyntaxList: their Syntax joined with ", ": "binpack:gpuMemory, binpack:cpu, ..., random".
std::string StrategySyntaxList();

}  // namespace gpupack
