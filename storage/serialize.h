// Internal to storage/: the JSON documents in which stores keep each entity.
//
// Every field of every model struct is written, with snake_case names and values as they are in memory
// (times in epoch ms, enums as their ECS names, `extra_json` as a string), so ToDoc followed by FromDoc gives
// back an equal struct. An absent std::optional is an absent key. Fields missing from a document (written by an
// older binary) keep the struct's default; a field of the wrong type, or an enum name this binary does not
// know (a status, a GPU mode), is an error, never a crash.
// Strings that are not valid UTF-8 are written with U+FFFD in place of the bad bytes.
#pragma once

#include <string>
#include <string_view>

#include "scheduler/cluster_state.h"
#include "scheduler/model.h"
#include "base/status.h"

namespace gpupack::storage_internal {

std::string ToDoc(const Cluster& v);
std::string ToDoc(const TaskDefinition& v);
std::string ToDoc(const ContainerInstance& v);
std::string ToDoc(const Task& v);
std::string ToDoc(const ClientTokenRecord& v);
std::string ToDoc(const Service& v);
std::string ToDoc(const CapacityProvider& v);

// FromDoc parses `doc` into `*out`; on failure a Status::Server whose message says what is wrong (the caller
// adds which record it was).
Status FromDoc(std::string_view doc, Cluster* out);
Status FromDoc(std::string_view doc, TaskDefinition* out);
Status FromDoc(std::string_view doc, ContainerInstance* out);
Status FromDoc(std::string_view doc, Task* out);
Status FromDoc(std::string_view doc, ClientTokenRecord* out);
Status FromDoc(std::string_view doc, Service* out);
Status FromDoc(std::string_view doc, CapacityProvider* out);

}  // namespace gpupack::storage_internal
