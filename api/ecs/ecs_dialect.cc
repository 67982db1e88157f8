#include "api/ecs/ecs_dialect.h"

#include <cmath>
#include <string>

namespace gpupack::api {

namespace {

class EcsWords : public JsonDialect {
 public:
  Status Invalid(const std::string& path, const std::string& what) const override {
    return Status::Client(path + ": " + what);
  }

  Status Error(const JsonError& e) const override {
    const std::string path = e.path.str();
    if (e.got == nullptr) return Status::InvalidParameter(path + " is required");
    const nlohmann::json& got = *e.got;
    switch (e.want) {
      case JsonWant::kAny: return Status::InvalidParameter(path + " is required");
      case JsonWant::kObject: return Expected(path, "an object", got);
      case JsonWant::kString: return Expected(path, "a string", got);
      case JsonWant::kBoolean: return Expected(path, "a boolean", got);
      case JsonWant::kArray:
      case JsonWant::kStringArray:
        if (got.is_array()) return Invalid(path, "at most " + std::to_string(e.max_size) + " entries are allowed");
        return Expected(path, "a list", got);
      case JsonWant::kInteger: {
        // A whole number outside the bounds (2^40, 1e300) is out of range; any other number has a fraction.
        const bool whole = got.is_number_integer() ||
                           (got.is_number_float() && std::isfinite(got.get<double>()) &&
                            got.get<double>() == std::floor(got.get<double>()));
        if (whole) return Invalid(path, "integer out of range");
        return Expected(path, "an integer", got);
      }
    }
    return Invalid(path, "is not valid");
  }

  bool NullIsAbsent() const override { return true; }
  bool IntegralFloats() const override { return true; }

 private:
  Status Expected(const std::string& path, const char* want, const nlohmann::json& got) const {
    return Invalid(path, std::string("expected ") + want + ", got " + JsonTypeName(got));
  }
};

}  // namespace

const JsonDialect& EcsDialect() {
  static const EcsWords words;
  return words;
}

}  // namespace gpupack::api
