// CheckInvariants: what a loaded state must satisfy before a server may serve it.
//
// A store decodes each record on its own (storage/serialize.h); records that decode but contradict each other
// (a task holding resources on an instance that is gone, a reservation larger than its GPU, a GPU listed twice,
// CPU or memory reserved beyond what an instance registered) can only come from a damaged file, a hand edit or
// two servers writing one database. Serving such a state would place on resources that do not exist, so the
// server refuses to start instead, naming the records.
#pragma once

#include "scheduler/cluster_state.h"
#include "base/status.h"

namespace gpupack {

// CheckInvariants checks `state` after ClusterState::RebuildReservations: ok, or a Status::Server naming up to
// ten broken records (table and key, as the store names them) and how many there are in all.
Status CheckInvariants(const ClusterState& state);

}  // namespace gpupack
