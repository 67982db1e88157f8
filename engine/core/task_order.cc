#include "engine/core/task_order.h"

#include <algorithm>
#include <iterator>

namespace gpupack::api {

void TaskOrder::Append(std::vector<std::shared_ptr<const Chunk>>& chunks, Chunk keys) {
  if (keys.size() <= 2 * kChunk) {
    if (!keys.empty()) chunks.push_back(std::make_shared<const Chunk>(std::move(keys)));
    return;
  }
  for (size_t begin = 0; begin < keys.size(); begin += kChunk) {
    const size_t end = std::min(keys.size(), begin + kChunk);
    chunks.push_back(std::make_shared<const Chunk>(std::make_move_iterator(keys.begin() + begin),
                                                   std::make_move_iterator(keys.begin() + end)));
  }
}

TaskOrder TaskOrder::Of(std::vector<TaskKey> keys) {
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  TaskOrder order;
  order.size_ = keys.size();
  Append(order.chunks_, std::move(keys));
  return order;
}

TaskOrder TaskOrder::With(std::vector<TaskKey> insert, std::vector<TaskKey> erase) const {
  if (chunks_.empty()) return Of(std::move(insert));
  // Sorted and unique: set_union keeps a key as often as either side holds it, so a key given twice would stay
  // twice.
  for (auto* keys : {&insert, &erase}) {
    std::sort(keys->begin(), keys->end());
    keys->erase(std::unique(keys->begin(), keys->end()), keys->end());
  }
  TaskOrder out;
  out.chunks_.reserve(chunks_.size() + 1);
  size_t ins = 0, era = 0;  // the first insert and erase key not yet given to a chunk
  for (size_t c = 0; c < chunks_.size(); ++c) {
    // A chunk takes the keys up to its last one; the last chunk takes every key left.
    const bool last = c + 1 == chunks_.size();
    const TaskKey& back = chunks_[c]->back();
    size_t ins_end = ins, era_end = era;
    while (ins_end < insert.size() && (last || insert[ins_end] <= back)) ++ins_end;
    while (era_end < erase.size() && (last || erase[era_end] <= back)) ++era_end;
    if (ins_end == ins && era_end == era) {
      out.chunks_.push_back(chunks_[c]);
      out.size_ += chunks_[c]->size();
      continue;
    }
    Chunk kept;
    kept.reserve(chunks_[c]->size());
    std::set_difference(chunks_[c]->begin(), chunks_[c]->end(), erase.begin() + era, erase.begin() + era_end,
                        std::back_inserter(kept));
    Chunk merged;
    merged.reserve(kept.size() + (ins_end - ins));
    std::set_union(std::make_move_iterator(kept.begin()), std::make_move_iterator(kept.end()),
                   std::make_move_iterator(insert.begin() + ins), std::make_move_iterator(insert.begin() + ins_end),
                   std::back_inserter(merged));
    ins = ins_end;
    era = era_end;
    out.size_ += merged.size();
    Append(out.chunks_, std::move(merged));
  }
  return out;
}

}  // namespace gpupack::api
