// SigV4: AWS Signature Version 4. The server verifies every API call with SigV4Verifier (sigv4_verifier.h), the
// agent signs its calls with SignRequest (here), and both read keys with LoadCredentialsFile. Pure functions and
// a value-type verifier: no clock (callers pass `now`), no I/O except LoadCredentialsFile, no globals.
//
// The canonical request is built exactly as AWS defines it for services other than S3:
//   method \n canonical URI \n canonical query string \n canonical headers \n signed headers \n payload hash
// where the canonical URI is the path as sent on the wire, normalized (empty and "." segments dropped, ".."
// pops) and URI-encoded again (so "%20" on the wire becomes "%2520": the "double encoding" AWS's SDKs use),
// and the query string is decoded and re-encoded with AWS's strict encoding, sorted by key, then value.
// The building blocks are public so tests can compare each intermediate string with AWS's test suite.
//
// These files are their own CMake target, gpupack::sigv4 (OpenSSL and gpupack::scheduler's Status only), in
// protocol/ beside the channel's messages, so the node agent can sign without linking the server (gpupack::api).
// They therefore know nothing of HttpServer: the verifier reads a SigV4Request view, which an api::HttpRequest
// converts to through the template overloads. The server's code names everything here gpupack::api::..., where
// it used to live: the aliases at the end of each header.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/percent.h"
#include "base/status.h"

namespace gpupack::protocol {

// KeyRole says what a key may do once its signature is valid (gpupack_role in the credentials file):
//   admin: every ECS operation and the agent channel (the default);
//   agent: only what a node agent needs (RegisterContainerInstance, DeregisterContainerInstance, CreateCluster,
//          SubmitTaskStateChange, SubmitContainerStateChange and the agent channel); anything else is
//          AccessDeniedException. A key copied from a GPU host then cannot run or stop tasks.
//   reader: only operations that read (Describe*, List*, ExplainPlacement and other services' Get*/Filter*
//           reads): for people who watch the web console or the API without changing anything.
// In the web console (docs/console.md) only an admin key's session may write: agent and reader keys read.
enum class KeyRole { kAdmin, kAgent, kReader };
const char* KeyRoleName(KeyRole role);

// Credential is one access key pair from the credentials file; `profile` is its [section] name (for logs).
struct Credential {
  std::string access_key_id;
  std::string secret_access_key;
  std::string profile;
  KeyRole role = KeyRole::kAdmin;
  // host: for an agent key, the one host it may register (gpupack_host: that host's agent's --name); empty: the
  // first host that registers with it. Braced so that keys written in code may leave it out.
  std::string host{};
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
//   gpupack_role = agent            ; optional: admin (default), agent or reader, see KeyRole
//   gpupack_host = gpu-node-17      ; optional, agent keys only: the one host the key may register, see host
// Other keys (region, aws_session_token, ...) are ignored. Refused with a message naming the file (and line):
// a missing or unreadable file, a file readable or writable by group or others (st_mode & 077: run
// `chmod 600`), not a regular file, larger than 1 MiB, no profile at all, a profile without either key, a
// key given twice, a line that is neither a section, a comment nor key = value, the same access key id in two
// profiles, a gpupack_host that is not 1 to 64 of the characters an agent's --name may hold, and a gpupack_host
// in a profile whose role is not agent.
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

// UriEncode is SigV4's name for PercentEncode (base/percent.h): every byte except A-Z a-z 0-9 - _ . ~ as %XX
// (upper-case hex), and '/' too unless `keep_slash`.
inline std::string UriEncode(std::string_view s, bool keep_slash) { return PercentEncode(s, keep_slash); }

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

}  // namespace gpupack::protocol

namespace gpupack::api {
using protocol::AuthorizationHeader;
using protocol::CanonicalHeaderValue;
using protocol::CanonicalQueryString;
using protocol::CanonicalRequest;
using protocol::CanonicalUri;
using protocol::Credential;
using protocol::CredentialScope;
using protocol::FormatAmzDate;
using protocol::HeaderList;
using protocol::HexSha256;
using protocol::KeyRole;
using protocol::KeyRoleName;
using protocol::kSigV4Algorithm;
using protocol::kSigV4Terminator;
using protocol::LoadCredentialsFile;
using protocol::ParseAmzDate;
using protocol::ParseCredentials;
using protocol::ParseHttpDate;
using protocol::SelectProfile;
using protocol::SignatureHex;
using protocol::SigningIdentity;
using protocol::SigningKey;
using protocol::SignRequest;
using protocol::StringToSign;
using protocol::UriEncode;
}  // namespace gpupack::api
