#include "agent/task_store.h"

#include <filesystem>
#include <fstream>
#include <cstdint>

#include <spdlog/spdlog.h>

#include "base/atomic_file.h"

namespace gpupack::agent {

namespace fs = std::filesystem;
using protocol::Json;
using protocol::TaskStatus;

TaskRecord TaskRecord::ForAssignment(protocol::Assignment assignment) {
  TaskRecord r;
  r.report.task_arn = assignment.task_arn;
  r.report.status = TaskStatus::kPending;
  for (const auto& c : assignment.containers) r.report.containers.push_back({c.name, TaskStatus::kPending, {}, ""});
  r.runtime_ids.assign(assignment.containers.size(), "");
  r.assignment = std::move(assignment);
  return r;
}

Json RecordToJson(const TaskRecord& r) {
  Json containers = Json::array();
  for (size_t i = 0; i < r.report.containers.size(); ++i) {
    const protocol::ContainerReport& c = r.report.containers[i];
    const protocol::AssignedContainer* a = i < r.assignment.containers.size() ? &r.assignment.containers[i] : nullptr;
    Json j = {{"name", c.name},
              {"runtimeId", i < r.runtime_ids.size() ? r.runtime_ids[i] : ""},
              {"status", protocol::Name(c.status)},
              {"reason", c.reason},
              {"essential", a ? a->essential : true},
              {"gpuIds", a ? a->gpu_ids : std::vector<std::string>{}}};
    if (c.exit_code) j["exitCode"] = *c.exit_code;
    containers.push_back(std::move(j));
  }
  return {{"taskArn", r.arn()},
          {"assignment", protocol::ToJson(r.assignment)},
          {"status", protocol::Name(r.report.status)},
          {"stopCode", r.report.stop_code ? protocol::Name(*r.report.stop_code) : ""},
          {"reason", r.report.reason},
          {"containers", std::move(containers)}};
}

namespace {

// Aligned makes report.containers and runtime_ids follow the assignment's containers, by name (a record that
// lacks an entry gets a PENDING container that never started).
void Aligned(TaskRecord& r) {
  std::vector<protocol::ContainerReport> containers;
  std::vector<std::string> ids;
  for (const auto& c : r.assignment.containers) {
    protocol::ContainerReport report{c.name, TaskStatus::kPending, {}, ""};
    std::string id;
    for (size_t i = 0; i < r.report.containers.size(); ++i) {
      if (r.report.containers[i].name != c.name) continue;
      report = r.report.containers[i];
      if (i < r.runtime_ids.size()) id = r.runtime_ids[i];
      break;
    }
    containers.push_back(std::move(report));
    ids.push_back(std::move(id));
  }
  r.report.containers = std::move(containers);
  r.runtime_ids = std::move(ids);
}

std::string StringField(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

Result<TaskRecord> RecordFromJson(const Json& j, const std::string& path) {
  if (!j.is_object() || !j.contains("taskArn") || !j["taskArn"].is_string())
    return Status::InvalidParameter(path + " is not a task record");
  TaskRecord r;
  auto assignment = protocol::AssignmentFromJson(j.contains("assignment") ? j["assignment"] : Json::object(),
                                                 path + ".assignment");
  if (!assignment.ok()) return assignment.status();
  r.assignment = std::move(*assignment);
  r.report.task_arn = j["taskArn"].get<std::string>();
  if (r.assignment.task_arn != r.report.task_arn) return Status::InvalidParameter(path + ": the ARNs disagree");
  r.report.status = protocol::ParseTaskStatus(StringField(j, "status")).value_or(TaskStatus::kPending);
  r.report.stop_code = protocol::ParseStopCode(StringField(j, "stopCode"));
  r.report.reason = StringField(j, "reason");
  if (j.contains("containers") && j["containers"].is_array()) {
    for (const auto& c : j["containers"]) {
      if (!c.is_object()) continue;
      protocol::ContainerReport report;
      report.name = StringField(c, "name");
      report.status = protocol::ParseTaskStatus(StringField(c, "status")).value_or(TaskStatus::kPending);
      report.reason = StringField(c, "reason");
      if (c.contains("exitCode") && c["exitCode"].is_number_integer()) {
        const int64_t code = c["exitCode"].get<int64_t>();
        if (code >= INT32_MIN && code <= INT32_MAX) report.exit_code = static_cast<int>(code);
      }
      r.report.containers.push_back(std::move(report));
      r.runtime_ids.push_back(StringField(c, "runtimeId"));
    }
  }
  Aligned(r);
  return r;
}

std::string TaskStore::FileName(const std::string& arn) {
  std::string id = arn.substr(arn.rfind('/') + 1).substr(0, 200);
  for (char& c : id) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok) c = '_';
  }
  if (id.empty() || id[0] == '.') id.insert(id.begin(), '_');
  return id + ".json";
}

Result<std::unique_ptr<TaskStore>> TaskStore::Open(std::string dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::InvalidParameter("cannot create " + dir + ": " + ec.message());
  std::unique_ptr<TaskStore> store(new TaskStore(dir));
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    auto record = RecordFromJson(Json::parse(in, nullptr, false), entry.path().string());
    if (!record.ok()) {
      spdlog::warn("agent: ignoring unreadable task record {}: {}", entry.path().string(), record.status().message());
      continue;
    }
    std::string arn = record->arn();
    store->records_[arn] = std::move(*record);
  }
  if (ec) return Status::Server("cannot read " + dir + ": " + ec.message());
  return store;
}

Status TaskStore::Put(const TaskRecord& record) {
  const fs::path path = fs::path(dir_) / FileName(record.arn());
  const std::string text = protocol::Dump(RecordToJson(record));
  std::lock_guard lock(mu_);
  records_[record.arn()] = record;
  return WriteFileAtomically(path.string(), text, 0666);  // 0666 less the umask, as an ofstream made it
}

void TaskStore::Erase(const std::string& arn) {
  std::lock_guard lock(mu_);
  records_.erase(arn);
  std::error_code ec;
  fs::remove(fs::path(dir_) / FileName(arn), ec);
}

std::optional<TaskRecord> TaskStore::Get(const std::string& arn) const {
  std::lock_guard lock(mu_);
  auto it = records_.find(arn);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

bool TaskStore::Contains(const std::string& arn) const {
  std::lock_guard lock(mu_);
  return records_.count(arn) > 0;
}

std::vector<TaskRecord> TaskStore::Snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<TaskRecord> out;
  out.reserve(records_.size());
  for (const auto& [arn, r] : records_) out.push_back(r);
  return out;
}

void TaskStore::Visit(const std::function<void(const TaskRecord&)>& fn) const {
  std::lock_guard lock(mu_);
  for (const auto& [arn, r] : records_) fn(r);
}

size_t TaskStore::size() const {
  std::lock_guard lock(mu_);
  return records_.size();
}

}  // namespace gpupack::agent
