// SigV4: AWS Signature Version 4 (DESIGN.md §8). The server verifies every API call with SigV4Verifier, the
// agent signs its calls with SignRequest, and both read keys with LoadCredentialsFile. Pure functions and a
// value-type verifier: no clock (callers pass `now`), no I/O except LoadCredentialsFile, no globals.
//
// The canonical request is built exactly as AWS defines it for services other than S3:
//   method \n canonical URI \n canonical query string \n canonical headers \n signed headers \n payload hash
// where the canonical URI is the path as sent on the wire, normalized (empty and "." segments dropped, ".."
// pops) and URI-encoded again (so "%20" on the wire becomes "%2520": the "double encoding" AWS's SDKs use),
// and the query string is decoded and re-encoded with AWS's strict encoding, sorted by key, then value.
// The building blocks are public so tests can compare each intermediate string with AWS's test suite.
//
// This file is its own CMake target, gpupack::sigv4 (OpenSSL and gpupack::scheduler's Status only), so the node
// agent can sign without linking the server (gpupack::api). It therefore knows nothing of HttpServer: the
// verifier reads a SigV4Request view, which an api::HttpRequest converts to through the template overloads.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "scheduler/status.h"

namespace gpupack::api {

// KeyRole says what a key may do once its signature is valid (gpupack_role in the credentials file):
//   admin: every ECS operation and the agent channel (the default);
//   agent: only what a node agent needs (RegisterContainerInstance, DeregisterContainerInstance, CreateCluster,
//          SubmitTaskStateChange, SubmitContainerStateChange and the agent channel); anything else is
//          AccessDeniedException. A key copied from a GPU host then cannot run or stop tasks.
enum class KeyRole { kAdmin, kAgent };
const char* KeyRoleName(KeyRole role);

// Credential is one access key pair from the credentials file; `profile` is its [section] name (for logs).
struct Credential {
  std::string access_key_id;
  std::string secret_access_key;
  std::string profile;
  KeyRole role = KeyRole::kAdmin;
};

// SigningIdentity is what a client signs with: one key and the region (and service) its signatures are scoped
// to, which must be the server's (`gpupack server --region`).
struct SigningIdentity {
  Credential credential;
  std::string region = "us-east-1";
  std::string service = "ecs";
};

// LoadCredentialsFile reads the AWS shared-credentials format:
//   [profile]                       ; or # comments on their own line
//   aws_access_key_id = AKID...
//   aws_secret_access_key = ...
//   gpupack_role = agent            ; optional: admin (default) or agent, see KeyRole
// Other keys (region, aws_session_token, ...) are ignored. Refused with a message naming the file (and line):
// a missing or unreadable file, a file readable or writable by group or others (st_mode & 077: run
// `chmod 600`), not a regular file, larger than 1 MiB, no profile at all, a profile without either key, a
// key given twice, a line that is neither a section, a comment nor key = value, and the same access key id
// in two profiles.
Result<std::vector<Credential>> LoadCredentialsFile(const std::string& path);

// SelectProfile picks the key a client signs with: the profile named `profile` when not empty, else [default],
// else the only profile of the file; anything else is refused with a message listing the profiles.
Result<Credential> SelectProfile(const std::vector<Credential>& credentials, const std::string& profile,
                                 std::string_view origin);

// ParseCredentials is LoadCredentialsFile without the file: `origin` names the source in messages.
Result<std::vector<Credential>> ParseCredentials(std::string_view text, std::string_view origin);

using HeaderList = std::vector<std::pair<std::string, std::string>>;  // in wire order; names in any case

inline constexpr std::string_view kSigV4Algorithm = "AWS4-HMAC-SHA256";
inline constexpr std::string_view kSigV4Terminator = "aws4_request";

// HexSha256 is the lower-case hex SHA-256 of `data` (64 characters).
std::string HexSha256(std::string_view data);

// FormatAmzDate formats `t` (rounded down to the second) as ISO 8601 basic: "20150830T123600Z".
std::string FormatAmzDate(std::chrono::system_clock::time_point t);

// ParseAmzDate parses exactly "YYYYMMDDTHHMMSSZ" with a valid calendar date; nullopt otherwise.
std::optional<std::chrono::sys_seconds> ParseAmzDate(std::string_view s);

// ParseHttpDate parses an RFC 9110 IMF-fixdate, "Sun, 30 Aug 2015 12:36:00 GMT"; nullopt otherwise.
std::optional<std::chrono::sys_seconds> ParseHttpDate(std::string_view s);

// UriEncode percent-encodes every byte except A-Z a-z 0-9 - _ . ~ (upper-case hex), and '/' too unless
// `keep_slash`.
std::string UriEncode(std::string_view s, bool keep_slash);

// CanonicalUri normalizes the wire path and encodes it again (see above): "//a/./b/../c%20d/" → "/a/c%2520d/".
std::string CanonicalUri(std::string_view path);

// CanonicalQueryString turns a raw wire query ("b=2&a=%41&c") into "a=A&b=2&c=": each name and value is
// percent-decoded (a malformed escape stays literal; '+' is a literal plus, not a space), re-encoded with
// UriEncode, and the pairs are sorted by encoded name, then encoded value. Empty pieces ("a&&b") are dropped.
std::string CanonicalQueryString(std::string_view raw_query);

// CanonicalHeaderValue trims leading and trailing whitespace and collapses each run of it to one space.
std::string CanonicalHeaderValue(std::string_view value);

// CanonicalRequest builds the canonical request. `signed_headers` must be lower case, sorted and unique (as
// they appear in SignedHeaders=); each one's line is the canonical values of every header of that name
// (compared case-insensitively) in wire order, joined with ','. `payload_hash` is the hex SHA-256 of the body.
std::string CanonicalRequest(std::string_view method, std::string_view path, std::string_view query,
                             const HeaderList& headers, const std::vector<std::string>& signed_headers,
                             std::string_view payload_hash);

// CredentialScope is "20150830/us-east-1/ecs/aws4_request" (`date` is YYYYMMDD).
std::string CredentialScope(std::string_view date, std::string_view region, std::string_view service);

// StringToSign is "AWS4-HMAC-SHA256\n<amz_date>\n<scope>\n<hex SHA-256 of canonical_request>".
std::string StringToSign(std::string_view amz_date, std::string_view scope, std::string_view canonical_request);

// SigningKey is the HMAC-SHA256 chain "AWS4"+secret → date → region → service → "aws4_request" (32 raw bytes).
std::string SigningKey(std::string_view secret, std::string_view date, std::string_view region,
                       std::string_view service);

// SignatureHex is the hex HMAC-SHA256 of `string_to_sign` under `signing_key`.
std::string SignatureHex(std::string_view signing_key, std::string_view string_to_sign);

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

// AuthorizationHeader signs exactly the headers given (they must already hold Host and X-Amz-Date = amz_date;
// names are lower-cased, sorted and de-duplicated into SignedHeaders) and returns the Authorization value.
std::string AuthorizationHeader(const Credential& credential, std::string_view region, std::string_view service,
                                std::string_view method, std::string_view path, std::string_view query,
                                const HeaderList& headers, std::string_view body, std::string_view amz_date);

// SignRequest signs a request the caller is about to send and returns the headers to add to it:
// "Authorization", "X-Amz-Date" (from `now`) and "X-Amz-Content-Sha256" (hex SHA-256 of `body`). `path` and
// `query` are exactly as they will go on the wire (already percent-encoded; no '?'). `headers` must include
// "host"; all of them are signed except authorization, connection, expect, user-agent, x-amzn-trace-id and
// transfer-encoding (which proxies and clients may change), and any x-amz-date / x-amz-content-sha256 given
// (replaced by ours).
std::map<std::string, std::string> SignRequest(const Credential& credential, std::string_view region,
                                               std::string_view service, std::string_view method, std::string_view path,
                                               std::string_view query, const HeaderList& headers, std::string_view body,
                                               std::chrono::system_clock::time_point now);

// SigV4Result is the verdict on one request: ok with the access key id (and its profile and role) that signed
// it, or the refusal.
struct SigV4Result {
  Status status;
  std::string access_key_id;  // set when ok
  std::string profile;        // set when ok
  KeyRole role = KeyRole::kAdmin;  // set when ok
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

  const std::string& region() const { return region_; }
  const std::string& service() const { return service_; }
  std::chrono::seconds skew() const { return skew_; }

 private:
  std::map<std::string, Credential, std::less<>> by_access_key_;
  std::string region_;
  std::string service_;
  std::chrono::seconds skew_;
};

}  // namespace gpupack::api
