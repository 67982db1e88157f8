// SigV4 verification: the Authorization header's parser and SigV4Verifier, the server's side of AWS Signature
// Version 4 (the signing side and the shared building blocks: sigv4.h). Part of the gpupack::sigv4 target.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/sigv4.h"
#include "base/status.h"

namespace gpupack::protocol {

// SigV4Authorization is a parsed Authorization header value.
struct SigV4Authorization {
  std::string access_key_id;
  std::string date;  // YYYYMMDD of the credential scope
  std::string region;
  std::string service;
  std::string terminator;                   // "aws4_request" when well formed
  std::vector<std::string> signed_headers;  // lower case, sorted, unique
  std::string signature;                    // 64 lower-case hex digits when well formed (checked by the verifier)
};

// ParseAuthorization parses
//   AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/ecs/aws4_request, SignedHeaders=host;x-amz-date,
//   Signature=<hex>
// (components in any order, each once, optional spaces around commas). Never throws or reads out of bounds on
// any input; sizes are bounded (4 KiB header, 64 signed headers). A malformed value → kIncompleteSignature
// with a message saying what is wrong.
Result<SigV4Authorization> ParseAuthorization(std::string_view header);

// SigV4Result is the verdict on one request: ok with the access key id (and its profile and role) that signed
// it, or the refusal.
struct SigV4Result {
  Status status;
  std::string access_key_id;  // set when ok
  std::string profile;        // set when ok
  KeyRole role = KeyRole::kAdmin;  // set when ok
  std::string host{};              // set when ok: the key's gpupack_host (Credential::host), often empty
};

// SigV4Request is what the verifier reads of a request: the method and target as on the request line, the
// headers in wire order (names in any case) and the body. A view: it must not outlive what it points to.
struct SigV4Request {
  std::string_view method;
  std::string_view target;
  const HeaderList& headers;
  std::string_view body;
};

// SigV4Verifier checks a request's Authorization header against the configured keys:
//   - no Authorization header → kMissingAuthenticationToken;
//   - malformed Authorization, unsupported algorithm, no or malformed X-Amz-Date (or Date), Host or the date
//     header not in SignedHeaders, an unsigned X-Amz-Target, duplicated auth headers → kIncompleteSignature;
//   - scope date ≠ request date, scope region ≠ ours, service ≠ ours, terminator ≠ aws4_request, request time
//     outside now ± skew, X-Amz-Content-Sha256 not the body's SHA-256 (UNSIGNED-PAYLOAD included), a signed
//     header the request lacks, and a wrong signature → kInvalidSignature (AWS's wording);
//   - unknown access key id, or a session token (X-Amz-Security-Token: gpupack issues none) →
//     kUnrecognizedClient.
// The payload hash is always computed from the body, and signatures are compared in constant time.
//
// Thread-safety: immutable after construction; Verify may be called from any number of threads at once.
class SigV4Verifier {
 public:
  // With two credentials of the same access key id the first wins (LoadCredentialsFile refuses such files).
  SigV4Verifier(std::vector<Credential> credentials, std::string region, std::string service = "ecs",
                std::chrono::seconds skew = std::chrono::minutes(5));

  SigV4Result Authenticate(const SigV4Request& req, std::chrono::system_clock::time_point now) const;
  Status Verify(const SigV4Request& req, std::chrono::system_clock::time_point now) const {
    return Authenticate(req, now).status;
  }
  // Any request type with the members method, target, headers and body (api::HttpRequest).
  template <typename Request>
  SigV4Result Authenticate(const Request& req, std::chrono::system_clock::time_point now) const {
    return Authenticate(SigV4Request{req.method, req.target, req.headers, req.body}, now);
  }
  template <typename Request>
  Status Verify(const Request& req, std::chrono::system_clock::time_point now) const {
    return Authenticate(req, now).status;
  }

  // FindKey: the credential of `access_key_id`, or null (for the web console's login, api/auth/request_auth.h).
  const Credential* FindKey(std::string_view access_key_id) const;

  const std::string& region() const { return region_; }
  const std::string& service() const { return service_; }
  std::chrono::seconds skew() const { return skew_; }

 private:
  std::map<std::string, Credential, std::less<>> by_access_key_;
  std::string region_;
  std::string service_;
  std::chrono::seconds skew_;
};

}  // namespace gpupack::protocol

namespace gpupack::api {
using protocol::ParseAuthorization;
using protocol::SigV4Authorization;
using protocol::SigV4Request;
using protocol::SigV4Result;
using protocol::SigV4Verifier;
}  // namespace gpupack::api
