// The heartbeat message and its gpuMemoryUsed reading (messages.h says the wire and the bounds): the reading is
// the one part of a message with bounds on its sizes and counts, and is refused alone.
#include <set>
#include <utility>

#include "protocol/field_limits.h"
#include "protocol/fields.h"
#include "protocol/messages.h"

namespace gpupack::protocol {

using internal::Fields;
using internal::Finish;

namespace {

// BoundedName reads a required string member of at most kMaxGpuMemoryNameBytes bytes.
void BoundedName(Fields& f, const char* key, std::string& out) {
  f.String(key, out, true);
  if (f.ok() && (out.empty() || out.size() > kMaxGpuMemoryNameBytes))
    f.Fail(f.Path(key), "must be 1 to " + std::to_string(kMaxGpuMemoryNameBytes) + " bytes");
}

// BoundedCount reads a required integer member from 0 to `max`.
void BoundedCount(Fields& f, const char* key, int64_t& out, int64_t max) {
  f.Int64(key, out, true);
  if (f.ok() && (out < 0 || out > max)) f.Fail(f.Path(key), "must be an integer from 0 to " + std::to_string(max));
}

// BoundedArray checks that a required member is an array of at most `max` elements before any is read.
bool BoundedArray(Fields& f, const char* key, size_t max) {
  const Json* v = f.Get(key, true);
  return v != nullptr && f.ArrayValue(*v, JsonPath(f.path(), key), max);  // "must hold at most N entries"
}

}  // namespace

Result<GpuMemoryReading> ParseGpuMemoryReading(const Json& j, const std::string& path) {
  GpuMemoryReading m;
  Fields f(j, path);
  BoundedCount(f, "ageMs", m.age_ms, kMaxGpuMemoryAgeMs);
  if (!BoundedArray(f, "tasks", kMaxGpuMemoryTasks)) return Finish(f, std::move(m));
  std::set<std::string> tasks_seen;
  f.Array("tasks", true, [&m, &tasks_seen](const Json& e, const std::string& p) -> Status {
    TaskGpuMemory t;
    Fields tf(e, p);
    BoundedName(tf, "taskArn", t.task_arn);
    if (tf.ok() && !tasks_seen.insert(t.task_arn).second) tf.Fail(tf.Path("taskArn"), "appears twice");
    if (!BoundedArray(tf, "gpus", kMaxGpuMemoryGpus)) return tf.status();
    std::set<std::string> gpus_seen;
    tf.Array("gpus", true, [&t, &gpus_seen](const Json& ge, const std::string& gp) -> Status {
      GpuBytes g;
      Fields gf(ge, gp);
      BoundedName(gf, "gpuId", g.gpu_id);
      if (gf.ok() && !gpus_seen.insert(g.gpu_id).second) gf.Fail(gf.Path("gpuId"), "appears twice");
      BoundedCount(gf, "bytes", g.bytes, kMaxGpuMemoryBytes);
      if (!gf.ok()) return gf.status();
      t.gpus.push_back(std::move(g));
      return Status::Ok();
    });
    if (!tf.ok()) return tf.status();
    m.tasks.push_back(std::move(t));
    return Status::Ok();
  });
  return Finish(f, std::move(m));
}

namespace internal {

void ReadHeartbeat(Fields& f, Heartbeat& m) {
  ReadId(f, m.id, true);
  f.Bool("impaired", m.impaired);
  f.Strings("heldGpus", m.held_gpus);
  if (f.ok() && m.held_gpus.size() > kMaxHeldGpus)
    f.Fail(f.Path("heldGpus"), "must hold at most " + std::to_string(kMaxHeldGpus) + " entries");
  for (const auto& gpu : m.held_gpus)
    if (f.ok()) f.Take(CheckField(gpu, kHeldGpuLimit, f.Path("heldGpus[]")));
  // gpuMemoryUsed stands apart: a bad one is dropped with a note, never the heartbeat's health with it.
  if (const Json* used = f.Get("gpuMemoryUsed", false)) {
    auto reading = ParseGpuMemoryReading(*used, f.Path("gpuMemoryUsed"));
    if (reading.ok()) m.gpu_memory = std::move(*reading);
    else m.gpu_memory_refused = reading.status().message();
  }
}

Json HeartbeatJson(const Heartbeat& m) {
  Json j = {{"type", "heartbeat"}, {"id", m.id}, {"impaired", m.impaired}, {"heldGpus", m.held_gpus}};
  if (m.gpu_memory) {
    Json tasks = Json::array();
    for (const auto& t : m.gpu_memory->tasks) {
      Json gpus = Json::array();
      for (const auto& g : t.gpus) gpus.push_back({{"gpuId", g.gpu_id}, {"bytes", g.bytes}});
      tasks.push_back({{"taskArn", t.task_arn}, {"gpus", std::move(gpus)}});
    }
    j["gpuMemoryUsed"] = {{"ageMs", m.gpu_memory->age_ms}, {"tasks", std::move(tasks)}};
  }
  return j;
}

}  // namespace internal
}  // namespace gpupack::protocol
