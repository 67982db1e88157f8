// ResetHoldings: an instance as it is before any task holds anything on it: remaining resources equal to the
// registered ones, no task counted, every GPU idle with all its memory free. ClusterState::RebuildReservations
// starts from it at a load, and a hot standby when it stores an instance's new record (engine/core/follow.h).
// Pure; defined in cluster_state.cc.
#pragma once

#include "scheduler/model.h"

namespace gpupack {

void ResetHoldings(ContainerInstance& instance);

}  // namespace gpupack
