// Published figures: the FGD paper's results on the seventeen openb pod lists (Weng et al., "Beware of
// Fragmentation", USENIX ATC 2023; the authors' simulator output, 6,212 GPUs, 130% arrived demand, mean of
// seeds 42..51), so `gpupack plan --protocol fgd` can print the paper's figure beside each strategy.
//
// A list is recognised by its content, not its file name: WorkloadFingerprint hashes what placement reads of
// every task, in order (CPU, host memory, GPU kind and count, GPU share, GPU models), so a renamed copy is
// recognised and an edited one is not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "planner/inputs.h"

namespace gpupack::plan {

struct PublishedList {
  std::string_view name;  // the pod list's name in the trace: "default", "gpushare40", ...
  uint64_t fingerprint = 0;
  // Share of GPU capacity left unallocated at 130%, in percent, per policy of the paper.
  double random = 0, dot_prod = 0, gpu_clustering = 0, gpu_packing = 0, best_fit = 0, fgd = 0;
};

// The published demand (percent of GPU capacity) and seeds the figures hold for.
inline constexpr int kPublishedDemandPct = 130;

// WorkloadFingerprint: FNV-1a over the tasks' placement-relevant fields, in order.
uint64_t WorkloadFingerprint(const Workload& workload);

// PublishedFor: the paper's figures when the workload is one of the seventeen lists.
std::optional<PublishedList> PublishedFor(const Workload& workload);

// PublishedReference: the paper's policy a strategy is compared with and its figure: fgd with FGD, bestfit with
// BestFit, random with Random; any other strategy with FGD (the figure to beat). "FGD", "BestFit", "Random".
std::pair<std::string_view, double> PublishedReference(const PublishedList& list, std::string_view strategy);

}  // namespace gpupack::plan
