// The console's read of the capacity providers' lines (/console/api/waiting, docs/console.md): each line's
// waiting tasks in order, and why each waits, from a published read view.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/read_view.h"
#include "engine/core/requests.h"
#include "scheduler/arn.h"

namespace gpupack::api {

// WaitingLines: the lines of `cluster` (every cluster when empty), each {cluster, provider, length, tasks: the
// first `shown` in order, each {arn, id, taskDefinition, priority, team, waitingSince, gpuMemory, position, why}}.
// `why` is the queue's rule (docs/api.md, "The order of the line") read back: over a quota, the head with no room
// (the most free on one GPU of the provider) and the instance held for it, or behind the head. Costs one pass
// over the view's tasks.
nlohmann::json WaitingLines(const ReadView& view, const ArnContext& arn, const std::string& cluster, size_t shown,
                            EpochMs now, const PlacementPolicy& policy);

}  // namespace gpupack::api
