// Status and Result<T>: errors as values at module borders.
//
// Every code maps to one ECS error name and HTTP status, in exactly one place (api/http/errors.cc); the code that
// fails only picks the code and writes a message a person can act on. It lives in base/, under every folder.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace gpupack {

enum class ErrorCode {
  kOk,
  kClient,               // ClientException (400)
  kInvalidParameter,     // InvalidParameterException (400)
  kClusterNotFound,      // ClusterNotFoundException (400)
  kServiceNotFound,      // ServiceNotFoundException (400)
  kServiceNotActive,     // ServiceNotActiveException (400)
  kConflict,             // ConflictException (400)
  kAccessDenied,         // AccessDeniedException (400)
  kLimitExceeded,        // LimitExceededException (400)
  kResourceInUse,        // ResourceInUseException (400)
  kUnsupportedFeature,   // UnsupportedFeatureException (400)
  kUnknownOperation,     // UnknownOperationException (400)
  kServer,               // ServerException (500)
  // InvalidParameterException (400) with "code": "InstanceDeregistered" beside it: RegisterContainerInstance of
  // an instance that was deregistered (the agent stops its tasks and registers no more):
  kInstanceDeregistered,
  // SigV4 authentication refusals (api/sigv4.h):
  kUnrecognizedClient,          // UnrecognizedClientException (400): unknown access key id
  kInvalidSignature,            // InvalidSignatureException (400): wrong signature, scope, date window
  kIncompleteSignature,         // IncompleteSignatureException (400): garbled Authorization or date
  kMissingAuthenticationToken,  // MissingAuthenticationTokenException (403): no Authorization at all
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status Client(std::string m) { return {ErrorCode::kClient, std::move(m)}; }
  static Status InvalidParameter(std::string m) { return {ErrorCode::kInvalidParameter, std::move(m)}; }
  static Status ClusterNotFound(std::string m) { return {ErrorCode::kClusterNotFound, std::move(m)}; }
  static Status ServiceNotFound(std::string m) { return {ErrorCode::kServiceNotFound, std::move(m)}; }
  static Status ServiceNotActive(std::string m) { return {ErrorCode::kServiceNotActive, std::move(m)}; }
  static Status Conflict(std::string m) { return {ErrorCode::kConflict, std::move(m)}; }
  static Status LimitExceeded(std::string m) { return {ErrorCode::kLimitExceeded, std::move(m)}; }
  static Status ResourceInUse(std::string m) { return {ErrorCode::kResourceInUse, std::move(m)}; }
  static Status Unsupported(std::string m) { return {ErrorCode::kUnsupportedFeature, std::move(m)}; }
  static Status Server(std::string m) { return {ErrorCode::kServer, std::move(m)}; }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// Result<T> holds a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

// GP_TRY returns a non-ok Status from the enclosing function; GP_ASSIGN declares `lhs` from a Result or
// returns its Status. For functions that return Status or Result<T>.
#define GP_TRY(expr)             \
  do {                           \
    ::gpupack::Status _s = (expr); \
    if (!_s.ok()) return _s;     \
  } while (0)

#define GP_ASSIGN(lhs, expr)                  \
  auto lhs##_r = (expr);                      \
  if (!lhs##_r.ok()) return lhs##_r.status(); \
  auto lhs = std::move(lhs##_r).value()

}  // namespace gpupack
