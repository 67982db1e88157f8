#include "engine/core/refusals.h"

namespace gpupack::api {

void RefusalLog::Add(PlacementRefusal refusal) {
  if (refusal.task_definition.size() > kMaxTaskDefinition) refusal.task_definition.resize(kMaxTaskDefinition);
  if (refusal.failures.size() > kMaxFailures) refusal.failures.resize(kMaxFailures);
  const int64_t minute = refusal.at / 60000;
  Minute& m = by_cluster_[refusal.cluster][static_cast<size_t>(((minute % 60) + 60) % 60)];
  if (m.minute != minute) m = Minute{minute, 0};
  m.tasks += refusal.tasks;
  recent_.push_front(std::move(refusal));
  if (recent_.size() > kRecent) recent_.pop_back();
  ++generation_;
}

uint64_t RefusalLog::LastHour(const std::string& cluster, EpochMs now) const {
  auto it = by_cluster_.find(cluster);
  if (it == by_cluster_.end()) return 0;
  const int64_t minute = now / 60000;
  uint64_t n = 0;
  for (const Minute& m : it->second)
    if (m.minute > minute - 60 && m.minute <= minute) n += m.tasks;
  return n;
}

}  // namespace gpupack::api
