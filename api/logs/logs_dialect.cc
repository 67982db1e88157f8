#include "api/logs/logs_dialect.h"

#include <string>

namespace gpupack::api {

namespace {

class LogsWords : public JsonDialect {
 public:
  Status Invalid(const std::string& path, const std::string& what) const override {
    return Status::InvalidParameter(path + ": " + what);
  }

  Status Error(const JsonError& e) const override {
    const std::string path = e.path.str();
    if (e.got == nullptr)
      return Status::InvalidParameter(std::string("1 validation error detected: ") + path + " is required");
    const nlohmann::json& got = *e.got;
    switch (e.want) {
      case JsonWant::kAny:
        return Status::InvalidParameter(std::string("1 validation error detected: ") + path + " is required");
      case JsonWant::kObject: return Status::InvalidParameter("the request body must be a JSON object");
      case JsonWant::kString: return Expected(path, "a string", got);
      case JsonWant::kBoolean: return Expected(path, "a boolean", got);
      case JsonWant::kArray:
      case JsonWant::kStringArray:
        if (got.is_array()) return Invalid(path, "at most " + std::to_string(e.max_size) + " entries are allowed");
        return Expected(path, "a list", got);
      case JsonWant::kInteger:
        // An integer beyond int64 is out of range; one within it but outside the member's bounds names them.
        if (got.is_number_unsigned() && got.get<uint64_t>() > static_cast<uint64_t>(JsonFields::kInt64Max))
          return Invalid(path, "integer out of range");
        if (got.is_number_integer())
          return Status::InvalidParameter(path + " must be an integer from " + std::to_string(e.lo) + " to " +
                                          std::to_string(e.hi));
        return Expected(path, "an integer", got);
    }
    return Invalid(path, "is not valid");
  }

  bool NullIsAbsent() const override { return true; }

 private:
  Status Expected(const std::string& path, const char* want, const nlohmann::json& got) const {
    return Invalid(path, std::string("expected ") + want + ", got " + JsonTypeName(got));
  }
};

}  // namespace

const JsonDialect& LogsDialect() {
  static const LogsWords words;
  return words;
}

}  // namespace gpupack::api
