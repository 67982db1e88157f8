// Following: a standby's working state kept equal to the leader's by applying each committed WriteBatch of the
// change feed (storage/change_feed.h, docs/ha.md "Hot standbys"), with the reservations moved exactly as the
// leader's transactions moved them, so a standby that takes over places on the same free memory.
//
// ApplyCommitted applies one batch to `state` and adds what it touched to `touched`; DeltaOf then gives the read
// view's delta for everything touched (one view per round of batches). Versions and every stored field come
// from the batch as the leader stored them; the derived ones (remaining resources, GPU modes, task counts) are
// recomputed here as ClusterState computes them at a load. A batch a follower cannot apply in place (one that
// replaces everything, deletes an instance, or contradicts the state) is a Status: the follower then loads the
// state afresh.
//
// Not thread-safe: the applier's writer thread alone calls these, on its own state.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "engine/core/read_view.h"
#include "scheduler/cluster_state.h"
#include "storage/store.h"

namespace gpupack::api {

// FollowedChanges: the keys a round of batches touched.
struct FollowedChanges {
  std::set<std::string> clusters;
  std::set<std::pair<std::string, int>> task_definitions;
  // Instances stored or holding a reservation that moved, in the order first touched: a new instance joins its
  // cluster's list (ListContainerInstances) in the order the leader registered it.
  std::vector<std::string> instances;
  std::set<std::string> instance_set;
  void TouchInstance(const std::string& arn) {
    if (instance_set.insert(arn).second) instances.push_back(arn);
  }
  std::set<std::string> tasks;      // put or erased
  std::set<std::string> services;
  std::set<std::string> capacity_providers;
  size_t batches = 0;
};

Status ApplyCommitted(ClusterState& state, const WriteBatch& batch, FollowedChanges& touched);
ViewDelta DeltaOf(const ClusterState& state, const FollowedChanges& touched);

}  // namespace gpupack::api
