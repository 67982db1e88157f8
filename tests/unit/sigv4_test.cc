// SigV4 tests: AWS's published Signature Version 4 test suite (inputs, canonical requests, string-to-sign digests
// and signatures written here as a table), the building blocks, the Authorization parser on garbage, the
// verifier's refusals (one row per tampering), the clock-skew window's edges, and the credentials file.
#include "protocol/sigv4.h"
#include "protocol/sigv4_verifier.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "api/http/errors.h"
#include "api/http/http_server.h"
#include "tests/unit/temp_dir.h"

namespace gpupack::api {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using std::chrono::system_clock;
using testing_support::TempDir;

// ---- AWS's SigV4 test suite -----------------------------------------------------------------------------------
// Every case: credentials AKIDEXAMPLE / wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, region us-east-1, service
// "service", request time 20150830T123600Z, host example.amazonaws.com. A target holds the path as the suite's
// request line has it (so "/example space/" is the raw path, whose canonical form is encoded once).

constexpr char kSuiteDate[] = "20150830T123600Z";
constexpr char kSuiteScope[] = "20150830/us-east-1/service/aws4_request";
constexpr char kEmptySha[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr char kUnreserved[] = "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const Credential kSuiteCredential{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "example"};

system_clock::time_point SuiteTime() {
  return system_clock::time_point{std::chrono::sys_days{2015y / std::chrono::August / 30} + 12h + 36min};
}

std::string Lines(std::initializer_list<std::string> lines) {
  std::string out;
  for (const std::string& l : lines) {
    if (!out.empty()) out += '\n';
    out += l;
  }
  return out;
}

struct SuiteCase {
  std::string name;
  std::string method;
  std::string target;  // path[?query]
  HeaderList headers;  // the signed request's headers, as the suite lists them
  std::string body;
  std::string signed_headers;  // SignedHeaders=
  std::string canonical;       // the expected canonical request
  std::string sts_digest;      // last line of the expected string to sign ("" = the suite gives none we use)
  std::string signature;
  HeaderList added_after_signing = {};  // headers added to the request after it was signed
  ErrorCode verdict = ErrorCode::kOk;   // what our verifier says about the signed request
};

const HeaderList kVanillaHeaders = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kSuiteDate}};
const std::string kVanillaHeaderLines = "host:example.amazonaws.com\nx-amz-date:20150830T123600Z\n";
const char kVanillaSig[] = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31";
const char kVanillaSts[] = "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63";
const char kPostVanillaSig[] = "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b";
const char kPostVanillaSts[] = "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87";
const char kSessionToken[] =
    "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YU"
    "uwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8"
    "YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2"
    "ICCR/oLxBA==";

// A GET of `target` with only Host and X-Amz-Date whose canonical URI and query are `uri` and `query`.
SuiteCase PlainGet(std::string name, std::string target, std::string uri, std::string query, std::string sts,
                   std::string sig) {
  return {std::move(name),
          "GET",
          std::move(target),
          kVanillaHeaders,
          "",
          "host;x-amz-date",
          "GET\n" + uri + "\n" + query + "\n" + kVanillaHeaderLines + "\nhost;x-amz-date\n" + kEmptySha,
          std::move(sts),
          std::move(sig)};
}

std::vector<SuiteCase> SuiteCases() {
  std::vector<SuiteCase> cases = {
      {"get-header-key-duplicate",
       "GET",
       "/",
       {{"Host", "example.amazonaws.com"},
        {"My-Header1", "value2"},
        {"My-Header1", "value2"},
        {"My-Header1", "value1"},
        {"X-Amz-Date", kSuiteDate}},
       "",
       "host;my-header1;x-amz-date",
       Lines({"GET", "/", "", "host:example.amazonaws.com", "my-header1:value2,value2,value1",
              "x-amz-date:20150830T123600Z", "", "host;my-header1;x-amz-date", kEmptySha}),
       "dc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c",
       "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"},
      // The suite folds this header over three lines; an HTTP/1.1 server hands it over joined with commas.
      {"get-header-value-multiline",
       "GET",
       "/",
       {{"Host", "example.amazonaws.com"}, {"My-Header1", "value1,value2,value3"}, {"X-Amz-Date", kSuiteDate}},
       "",
       "host;my-header1;x-amz-date",
       Lines({"GET", "/", "", "host:example.amazonaws.com", "my-header1:value1,value2,value3",
              "x-amz-date:20150830T123600Z", "", "host;my-header1;x-amz-date", kEmptySha}),
       "",
       "ba17b383a53190154eb5fa66a1b836cc297cc0a3d70a5d00705980573d8ff790"},
      {"get-header-value-order",
       "GET",
       "/",
       {{"Host", "example.amazonaws.com"},
        {"My-Header1", "value4"},
        {"My-Header1", "value1"},
        {"My-Header1", "value3"},
        {"My-Header1", "value2"},
        {"X-Amz-Date", kSuiteDate}},
       "",
       "host;my-header1;x-amz-date",
       Lines({"GET", "/", "", "host:example.amazonaws.com", "my-header1:value4,value1,value3,value2",
              "x-amz-date:20150830T123600Z", "", "host;my-header1;x-amz-date", kEmptySha}),
       "31ce73cd3f3d9f66977ad3dd957dc47af14df92fcd8509f59b349e9137c58b86",
       "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"},
      // Leading/trailing space trimmed; runs of spaces collapse, inside quotes too.
      {"get-header-value-trim",
       "GET",
       "/",
       {{"Host", "example.amazonaws.com"},
        {"My-Header1", " value1"},
        {"My-Header2", " \"a   b   c\""},
        {"X-Amz-Date", kSuiteDate}},
       "",
       "host;my-header1;my-header2;x-amz-date",
       Lines({"GET", "/", "", "host:example.amazonaws.com", "my-header1:value1", "my-header2:\"a b c\"",
              "x-amz-date:20150830T123600Z", "", "host;my-header1;my-header2;x-amz-date", kEmptySha}),
       "a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7",
       "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"},
      PlainGet("get-unreserved", std::string("/") + kUnreserved, std::string("/") + kUnreserved, "",
               "6a968768eefaa713e2a6b16b589a8ea192661f098f37349f4e2c0082757446f9",
               "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"),
      PlainGet("get-utf8", "/\xE1\x88\xB4", "/%E1%88%B4", "", "",
               "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"),
      PlainGet("get-vanilla", "/", "/", "", kVanillaSts, kVanillaSig),
      PlainGet("get-vanilla-empty-query-key", "/?Param1=value1", "/", "Param1=value1",
               "1e24db194ed7d0eec2de28d7369675a243488e08526e8c1c73571282f7c517ab",
               "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb"),
      PlainGet("get-vanilla-query", "/", "/", "", kVanillaSts, kVanillaSig),
      // Sorted by name, then value, byte-wise: "Value1" < "value2".
      PlainGet("get-vanilla-query-order-key", "/?Param1=value2&Param1=Value1", "/", "Param1=Value1&Param1=value2",
               "704b4cef673542d84cdff252633f065e8daeba5f168b77116f8b1bcaf3d38f89",
               "eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1"),
      PlainGet("get-vanilla-query-order-key-case", "/?Param2=value2&Param1=value1", "/", "Param1=value1&Param2=value2",
               "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
               "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
      PlainGet("get-vanilla-query-order-value", "/?Param1=value2&Param1=value1", "/", "Param1=value1&Param1=value2",
               "c968629d70850097a2d8781c9bf7edcb988b04cac14cca9be4acc3595f884606",
               "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694"),
      PlainGet("get-vanilla-query-unreserved", std::string("/?") + kUnreserved + "=" + kUnreserved, "/",
               std::string(kUnreserved) + "=" + kUnreserved,
               "c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177",
               "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"),
      PlainGet("get-vanilla-utf8-query", "/?\xE1\x88\xB4=bar", "/", "%E1%88%B4=bar",
               "eb30c5bed55734080471a834cc727ae56beb50e5f39d1bff6d0d38cb192a7073",
               "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"),
      // From aws-c-auth's copy of the suite: sorted by the encoded name ('%' < 'P', "Param" < "Param-3").
      PlainGet("get-vanilla-query-order-encoded", "/?Param-3=Value3&Param=Value2&%E1%88%B4=Value1", "/",
               "%E1%88%B4=Value1&Param=Value2&Param-3=Value3", "",
               "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac"),
      // normalize-path: "." and empty segments go, ".." pops, a trailing slash stays.
      PlainGet("get-relative", "/example/..", "/", "", kVanillaSts, kVanillaSig),
      PlainGet("get-relative-relative", "/example1/example2/../..", "/", "", kVanillaSts, kVanillaSig),
      PlainGet("get-slash", "//", "/", "", kVanillaSts, kVanillaSig),
      PlainGet("get-slash-dot-slash", "/./", "/", "", kVanillaSts, kVanillaSig),
      PlainGet("get-slash-pointless-dot", "/./example", "/example", "",
               "214d50c111a8edc4819da6a636336472c916b5240f51e9a51b5c3305180cf702",
               "ef75d96142cf21edca26f06005da7988e4f8dc83a165a80865db7089db637ec5"),
      PlainGet("get-slashes", "//example//", "/example/", "",
               "cb96b4ac96d501f7c5c15bc6d67b3035061cfced4af6585ad927f7e6c985c015",
               "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84"),
      PlainGet("get-space", "/example space/", "/example%20space/", "",
               "63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86",
               "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"),
      // Header names in any case are lower-cased.
      {"post-header-key-case",
       "POST",
       "/",
       {{"HOST", "example.amazonaws.com"}, {"x-AMZ-date", kSuiteDate}},
       "",
       "host;x-amz-date",
       "POST\n/\n\n" + kVanillaHeaderLines + "\nhost;x-amz-date\n" + kEmptySha,
       kPostVanillaSts,
       kPostVanillaSig},
      // Canonical headers are sorted whatever the wire order.
      {"post-header-key-sort",
       "POST",
       "/",
       {{"X-Amz-Date", kSuiteDate}, {"My-Header1", "value1"}, {"Host", "example.amazonaws.com"}},
       "",
       "host;my-header1;x-amz-date",
       Lines({"POST", "/", "", "host:example.amazonaws.com", "my-header1:value1", "x-amz-date:20150830T123600Z", "",
              "host;my-header1;x-amz-date", kEmptySha}),
       "9368318c2967cf6de74404b30c65a91e8f6253e0a8659d6d5319f1a812f87d65",
       "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"},
      {"post-header-value-case",
       "POST",
       "/",
       {{"Host", "example.amazonaws.com"}, {"My-Header1", "VALUE1"}, {"X-Amz-Date", kSuiteDate}},
       "",
       "host;my-header1;x-amz-date",
       Lines({"POST", "/", "", "host:example.amazonaws.com", "my-header1:VALUE1", "x-amz-date:20150830T123600Z", "",
              "host;my-header1;x-amz-date", kEmptySha}),
       "d51ced243e649e3de6ef63afbbdcbca03131a21a7103a1583706a64618606a93",
       "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"},
      {"post-vanilla", "POST", "/", kVanillaHeaders, "", "host;x-amz-date",
       "POST\n/\n\n" + kVanillaHeaderLines + "\nhost;x-amz-date\n" + kEmptySha, kPostVanillaSts, kPostVanillaSig},
      {"post-vanilla-empty-query-value", "POST", "/?Param1=value1", kVanillaHeaders, "", "host;x-amz-date",
       "POST\n/\nParam1=value1\n" + kVanillaHeaderLines + "\nhost;x-amz-date\n" + kEmptySha,
       "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd",
       "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
      {"post-vanilla-query", "POST", "/?Param1=value1", kVanillaHeaders, "", "host;x-amz-date",
       "POST\n/\nParam1=value1\n" + kVanillaHeaderLines + "\nhost;x-amz-date\n" + kEmptySha,
       "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd",
       "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
      // The parameters "@#$%^" = "" and "+" = "/,?><`\";:\|][{}", sent encoded; '%2B' sorts before '%40'.
      {"post-vanilla-query-nonunreserved", "POST",
       "/?%40%23%24%25%5E=&%2B=%2F%2C%3F%3E%3C%60%22%3B%3A%5C%7C%5D%5B%7B%7D", kVanillaHeaders, "", "host;x-amz-date",
       "POST\n/\n%2B=%2F%2C%3F%3E%3C%60%22%3B%3A%5C%7C%5D%5B%7B%7D&%40%23%24%25%5E=\n" + kVanillaHeaderLines +
           "\nhost;x-amz-date\n" + kEmptySha,
       "", "66c82657c86e26fb25238d0e69f011edc4c6df5ae71119d7cb98ed9b87393c1e"},
      // A parameter without '=' gets an empty value.
      {"post-vanilla-query-space", "POST", "/?p", kVanillaHeaders, "", "host;x-amz-date",
       "POST\n/\np=\n" + kVanillaHeaderLines + "\nhost;x-amz-date\n" + kEmptySha, "",
       "e71688addb58a26418614085fb730ba3faa623b461c17f48f2fbdb9361b94a9b"},
      // SHA-256("Param1=value1") = 9095672b...
      {"post-x-www-form-urlencoded",
       "POST",
       "/",
       {{"Content-Type", "application/x-www-form-urlencoded"},
        {"Host", "example.amazonaws.com"},
        {"X-Amz-Date", kSuiteDate}},
       "Param1=value1",
       "content-type;host;x-amz-date",
       Lines({"POST", "/", "", "content-type:application/x-www-form-urlencoded", "host:example.amazonaws.com",
              "x-amz-date:20150830T123600Z", "", "content-type;host;x-amz-date",
              "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"}),
       "",
       "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"},
      {"post-x-www-form-urlencoded-parameters",
       "POST",
       "/",
       {{"Content-Type", "application/x-www-form-urlencoded; charset=utf8"},
        {"Host", "example.amazonaws.com"},
        {"X-Amz-Date", kSuiteDate}},
       "Param1=value1",
       "content-type;host;x-amz-date",
       Lines({"POST", "/", "", "content-type:application/x-www-form-urlencoded; charset=utf8",
              "host:example.amazonaws.com", "x-amz-date:20150830T123600Z", "", "content-type;host;x-amz-date",
              "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"}),
       "",
       "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe"},
      // Session tokens: signed (before) or added after signing. The signatures are AWS's; our verifier refuses
      // both because gpupack issues no session tokens.
      {"post-sts-header-before",
       "POST",
       "/",
       {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kSuiteDate}, {"X-Amz-Security-Token", kSessionToken}},
       "",
       "host;x-amz-date;x-amz-security-token",
       Lines({"POST", "/", "", "host:example.amazonaws.com", "x-amz-date:20150830T123600Z",
              std::string("x-amz-security-token:") + kSessionToken, "", "host;x-amz-date;x-amz-security-token",
              kEmptySha}),
       "c237e1b440d4c63c32ca95b5b99481081cb7b13c7e40434868e71567c1a882f6",
       "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead",
       {},
       ErrorCode::kUnrecognizedClient},
      {"post-sts-header-after",
       "POST",
       "/",
       kVanillaHeaders,
       "",
       "host;x-amz-date",
       "POST\n/\n\n" + kVanillaHeaderLines + "\nhost;x-amz-date\n" + kEmptySha,
       kPostVanillaSts,
       kPostVanillaSig,
       {{"X-Amz-Security-Token", kSessionToken}},
       ErrorCode::kUnrecognizedClient},
  };
  return cases;
}

std::vector<std::string> SplitSigned(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(';', start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::pair<std::string, std::string> PathAndQuery(const std::string& target) {
  const size_t q = target.find('?');
  if (q == std::string::npos) return {target, ""};
  return {target.substr(0, q), target.substr(q + 1)};
}

std::string SuiteAuthorization(const SuiteCase& c) {
  return std::string("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") + kSuiteScope + ", SignedHeaders=" + c.signed_headers +
         ", Signature=" + c.signature;
}

// ToHttpRequest is the request as HttpServer hands it over: names lower-cased, in wire order.
HttpRequest ToHttpRequest(std::string method, std::string target, const HeaderList& headers, std::string body) {
  HttpRequest req;
  req.method = std::move(method);
  req.target = std::move(target);
  for (const auto& [name, value] : headers) {
    std::string lower = name;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    req.headers.emplace_back(std::move(lower), value);
  }
  req.body = std::move(body);
  req.remote_address = "127.0.0.1:40000";
  return req;
}

class SigV4SuiteTest : public testing::TestWithParam<SuiteCase> {};

TEST_P(SigV4SuiteTest, CanonicalRequestMatchesTheSuite) {
  const SuiteCase& c = GetParam();
  const auto [path, query] = PathAndQuery(c.target);
  EXPECT_EQ(CanonicalRequest(c.method, path, query, c.headers, SplitSigned(c.signed_headers), HexSha256(c.body)),
            c.canonical);
}

TEST_P(SigV4SuiteTest, StringToSignAndSignatureMatchTheSuite) {
  const SuiteCase& c = GetParam();
  const std::string sts = StringToSign(kSuiteDate, kSuiteScope, c.canonical);
  if (!c.sts_digest.empty()) {
    EXPECT_EQ(sts, Lines({"AWS4-HMAC-SHA256", kSuiteDate, kSuiteScope, c.sts_digest}));
  }
  const std::string key = SigningKey(kSuiteCredential.secret_access_key, "20150830", "us-east-1", "service");
  EXPECT_EQ(SignatureHex(key, sts), c.signature);
}

TEST_P(SigV4SuiteTest, SigningGivesTheSuitesAuthorization) {
  const SuiteCase& c = GetParam();
  const auto [path, query] = PathAndQuery(c.target);
  EXPECT_EQ(AuthorizationHeader(kSuiteCredential, "us-east-1", "service", c.method, path, query, c.headers, c.body,
                                kSuiteDate),
            SuiteAuthorization(c));
}

TEST_P(SigV4SuiteTest, VerifierAcceptsTheSuitesSignature) {
  const SuiteCase& c = GetParam();
  HeaderList headers = c.headers;
  headers.emplace_back("Authorization", SuiteAuthorization(c));
  headers.insert(headers.end(), c.added_after_signing.begin(), c.added_after_signing.end());
  const SigV4Verifier verifier({kSuiteCredential}, "us-east-1", "service");
  const SigV4Result r = verifier.Authenticate(ToHttpRequest(c.method, c.target, headers, c.body), SuiteTime());
  EXPECT_EQ(r.status.code(), c.verdict) << r.status.message();
  if (c.verdict == ErrorCode::kOk) {
    EXPECT_EQ(r.access_key_id, "AKIDEXAMPLE");
    EXPECT_EQ(r.profile, "example");
  }
}

INSTANTIATE_TEST_SUITE_P(AwsSigV4TestSuite, SigV4SuiteTest, testing::ValuesIn(SuiteCases()),
                         [](const testing::TestParamInfo<SuiteCase>& info) {
                           std::string name;
                           for (char ch : info.param.name)
                             name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return name;
                         });

// ---- Building blocks ------------------------------------------------------------------------------------------

TEST(SigV4BuildingBlocks, HexSha256) {
  EXPECT_EQ(HexSha256(""), kEmptySha);
  EXPECT_EQ(HexSha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // FIPS 180-2
}

TEST(SigV4BuildingBlocks, AmzDateRoundTrip) {
  EXPECT_EQ(FormatAmzDate(SuiteTime()), kSuiteDate);
  EXPECT_EQ(FormatAmzDate(SuiteTime() + 999ms), kSuiteDate);  // rounded down to the second
  ASSERT_TRUE(ParseAmzDate(kSuiteDate).has_value());
  EXPECT_EQ(system_clock::time_point{*ParseAmzDate(kSuiteDate)}, SuiteTime());
  EXPECT_TRUE(ParseAmzDate("20160229T000000Z").has_value());  // leap day
  for (const char* bad : {"20150229T000000Z", "20151301T000000Z", "20150830T243600Z", "20150830T126000Z",
                          "20150830T123660Z", "20150830 123600Z", "20150830T123600", "2015-08-30T12:36:00Z",
                          "20150830T123600z", "2015083OT123600Z", "", "19691231T235959Z", "+0150830T123600Z"}) {
    EXPECT_FALSE(ParseAmzDate(bad).has_value()) << bad;
  }
}

TEST(SigV4BuildingBlocks, HttpDate) {
  ASSERT_TRUE(ParseHttpDate("Sun, 30 Aug 2015 12:36:00 GMT").has_value());
  EXPECT_EQ(system_clock::time_point{*ParseHttpDate("Sun, 30 Aug 2015 12:36:00 GMT")}, SuiteTime());
  for (const char* bad :
       {"Sun, 30 Aug 2015 12:36:00 UTC", "Sunday, 30-Aug-15 12:36:00 GMT", "Sun, 31 Feb 2015 12:36:00 GMT",
        "Sun, 30 Agu 2015 12:36:00 GMT", "Xyz, 30 Aug 2015 12:36:00 GMT", "Sun, 30 Aug 2015 12:36 GMT", ""}) {
    EXPECT_FALSE(ParseHttpDate(bad).has_value()) << bad;
  }
}

TEST(SigV4BuildingBlocks, UriEncode) {
  EXPECT_EQ(UriEncode(kUnreserved, false), kUnreserved);
  EXPECT_EQ(UriEncode("a b/c+d=e%", false), "a%20b%2Fc%2Bd%3De%25");
  EXPECT_EQ(UriEncode("a b/c", true), "a%20b/c");
  EXPECT_EQ(UriEncode("\xE1\x88\xB4", false), "%E1%88%B4");  // upper-case hex
}

TEST(SigV4BuildingBlocks, CanonicalUriNormalizesAndEncodesTheWirePathAgain) {
  struct Row {
    const char* path;
    const char* want;
  };
  for (const Row& r : std::vector<Row>{
           {"", "/"},
           {"/", "/"},
           {"/example%20space/", "/example%2520space/"},  // already encoded on the wire: encoded twice
           {"/a%2Fb", "/a%252Fb"},
           {"/a/b/../../..", "/"},  // ".." above the root stays at the root
           {"/a/./b//c/", "/a/b/c/"},
           {"/a/b/..", "/a"},
           {"/~user/x.y_z-w", "/~user/x.y_z-w"},
           {"/a:b@c", "/a%3Ab%40c"},
       }) {
    EXPECT_EQ(CanonicalUri(r.path), r.want) << r.path;
  }
}

TEST(SigV4BuildingBlocks, CanonicalQueryString) {
  struct Row {
    const char* raw;
    const char* want;
  };
  for (const Row& r : std::vector<Row>{
           {"", ""},
           {"b=2&a=1", "a=1&b=2"},
           {"a=%41%62", "a=Ab"},  // decoded, then re-encoded strictly
           {"a=%4", "a=%254"},    // a malformed escape stays literal
           {"a=%zz", "a=%25zz"},
           {"a=b+c", "a=b%2Bc"},  // '+' is a plus, not a space
           {"a=b%20c", "a=b%20c"},
           {"&&a=1&&", "a=1"},  // empty pieces dropped
           {"flag", "flag="},
           {"a=1=2", "a=1%3D2"},
           {"a=/", "a=%2F"},
       }) {
    EXPECT_EQ(CanonicalQueryString(r.raw), r.want) << r.raw;
  }
}

TEST(SigV4BuildingBlocks, CanonicalHeaderValue) {
  EXPECT_EQ(CanonicalHeaderValue("  a \t  b  "), "a b");
  EXPECT_EQ(CanonicalHeaderValue("\"a   b\""), "\"a b\"");
  EXPECT_EQ(CanonicalHeaderValue(""), "");
  EXPECT_EQ(CanonicalHeaderValue(" \t "), "");
}

TEST(SigV4BuildingBlocks, CredentialScopeAndStringToSign) {
  EXPECT_EQ(CredentialScope("20150830", "us-east-1", "ecs"), "20150830/us-east-1/ecs/aws4_request");
  // The get-vanilla case: the digest is SHA-256 of its canonical request.
  const std::string creq = "GET\n/\n\n" + kVanillaHeaderLines + "\nhost;x-amz-date\n" + kEmptySha;
  EXPECT_EQ(HexSha256(creq), kVanillaSts);
}

// ---- The Authorization parser ---------------------------------------------------------------------------------

constexpr char kGoodAuthorization[] =
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
    "SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31";

TEST(SigV4Authorization, ParsesTheParts) {
  Result<SigV4Authorization> a = ParseAuthorization(kGoodAuthorization);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->access_key_id, "AKIDEXAMPLE");
  EXPECT_EQ(a->date, "20150830");
  EXPECT_EQ(a->region, "us-east-1");
  EXPECT_EQ(a->service, "service");
  EXPECT_EQ(a->terminator, "aws4_request");
  EXPECT_EQ(a->signed_headers, (std::vector<std::string>{"host", "x-amz-date"}));
  EXPECT_EQ(a->signature, kVanillaSig);
}

TEST(SigV4Authorization, AcceptsOtherSpacingAndOrder) {
  for (const std::string& h : {
           std::string("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request,"
                       "SignedHeaders=host;x-amz-date,Signature=") +
               kVanillaSig,
           std::string("  AWS4-HMAC-SHA256   Signature=") + kVanillaSig +
               " ,  SignedHeaders=host;x-amz-date ,Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request  ",
           std::string("AWS4-HMAC-SHA256\tCredential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                       "SignedHeaders=host;x-amz-date, Signature=") +
               kVanillaSig + ",",
       }) {
    Result<SigV4Authorization> a = ParseAuthorization(h);
    ASSERT_TRUE(a.ok()) << h << ": " << a.status().message();
    EXPECT_EQ(a->access_key_id, "AKIDEXAMPLE");
    EXPECT_EQ(a->signature, kVanillaSig);
  }
}

TEST(SigV4Authorization, RefusesGarbageAsIncompleteSignature) {
  const std::string sig = kVanillaSig;
  const std::string cred = "Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request";
  std::string many = "SignedHeaders=";
  for (int i = 0; i < 65; ++i) many += (i ? ";h" : "h") + std::to_string(100 + i);
  struct Row {
    std::string header;
    std::string message_part;
  };
  for (const Row& r : std::vector<Row>{
           {"", "empty"},
           {"AWS4-HMAC-SHA256", "requires 'Credential'"},
           {"AWS4-HMAC-SHA256 ", "requires 'Signature'"},
           {"AWS AKIDEXAMPLE:c2lnbmF0dXJl", "Unsupported AWS 'algorithm': 'AWS'"},
           {"AWS4-HMAC-SHA512 " + cred + ", SignedHeaders=host, Signature=" + sig, "Unsupported"},
           {"Bearer abc", "Unsupported"},
           {"AWS4-HMAC-SHA256 " + cred + ", Signature=" + sig, "requires 'SignedHeaders'"},
           {"AWS4-HMAC-SHA256 SignedHeaders=host, Signature=" + sig, "requires 'Credential'"},
           {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host", "requires 'Signature'"},
           {"AWS4-HMAC-SHA256 " + cred + ", " + cred + ", SignedHeaders=host, Signature=" + sig, "twice"},
           {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host, Signature=" + sig + ", Extra=1", "unknown component"},
           {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host, Signature", "not Name=Value"},
           {"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service, SignedHeaders=host, Signature=" + sig,
            "Credential must be"},
           {"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request/x, SignedHeaders=host, "
            "Signature=" +
                sig,
            "Credential must be"},
           {"AWS4-HMAC-SHA256 Credential=, SignedHeaders=host, Signature=" + sig, "Credential must be"},
           {"AWS4-HMAC-SHA256 Credential=/20150830/us-east-1/service/aws4_request, SignedHeaders=host, Signature=" +
                sig,
            "malformed access key id"},
           {"AWS4-HMAC-SHA256 Credential=AKID EXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host, "
            "Signature=" +
                sig,
            "malformed access key id"},
           {"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/2015083/us-east-1/service/aws4_request, SignedHeaders=host, "
            "Signature=" +
                sig,
            "YYYYMMDD"},
           {"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830//service/aws4_request, SignedHeaders=host, Signature=" +
                sig,
            "empty or overlong"},
           {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=Host;x-amz-date, Signature=" + sig, "lower-case"},
           {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host;;x-amz-date, Signature=" + sig, "lower-case"},
           {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=, Signature=" + sig, "lower-case"},
           {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=x-amz-date;host, Signature=" + sig, "sorted"},
           {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host;host, Signature=" + sig, "sorted"},
           {"AWS4-HMAC-SHA256 " + cred + ", " + many + ", Signature=" + sig, "more than 64"},
           {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host, Signature=" + sig.substr(1), "64 lower-case"},
           {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host, Signature=" + sig + "0", "64 lower-case"},
           {"AWS4-HMAC-SHA256 " + cred +
                ", SignedHeaders=host, Signature=5FA00FA31553B73EBF1942676E86291E8372FF2A2260956D9B8AAE1D763FBF31",
            "64 lower-case"},
           {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host, Signature=", "64 lower-case"},
           {std::string(kGoodAuthorization) + std::string(5000, ' '), "longer than 4096"},
           {std::string("AWS4-HMAC-SHA256 Credential=AKID\0X/20150830/us-east-1/service/aws4_request", 71) +
                ", SignedHeaders=host, Signature=" + sig,
            "malformed access key id"},
       }) {
    Result<SigV4Authorization> a = ParseAuthorization(r.header);
    ASSERT_FALSE(a.ok()) << r.header;
    EXPECT_EQ(a.status().code(), ErrorCode::kIncompleteSignature) << r.header;
    EXPECT_NE(a.status().message().find(r.message_part), std::string::npos)
        << r.header << " → " << a.status().message();
    EXPECT_LE(a.status().message().size(), 1024u);  // client text is echoed short
  }
}

// A deterministic stand-in for the fuzzer: mutate a valid header and a valid request many times; the parser
// and the verifier must answer every one (no crash, no exception) and only accept the unmodified request.
TEST(SigV4Authorization, SurvivesRandomMutations) {
  std::mt19937 rng(20150830);
  std::string alphabet = "AWS4-HMAC-SHA256 Credential=/,;=SignedHeaders Signature\t0123456789abcdef";
  alphabet.push_back('\0');
  alphabet.push_back('\xff');
  const SigV4Verifier verifier({kSuiteCredential}, "us-east-1", "service");
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string h = kGoodAuthorization;
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = h.empty() ? 0 : rng() % h.size();
      switch (rng() % 4) {
        case 0:
          if (!h.empty()) h.erase(pos, 1 + rng() % 8);
          break;
        case 1: h.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
        case 2:
          if (!h.empty()) h[pos] = alphabet[rng() % alphabet.size()];
          break;
        default: h.insert(pos, h.substr(rng() % (h.size() + 1), rng() % 40)); break;
      }
    }
    Result<SigV4Authorization> parsed = ParseAuthorization(h);
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), ErrorCode::kIncompleteSignature);
    }
    HeaderList headers = kVanillaHeaders;
    headers.emplace_back("Authorization", h);
    const Status s = verifier.Verify(ToHttpRequest("GET", "/", headers, ""), SuiteTime());
    if (s.ok()) ++accepted;
  }
  // Only mutations that leave the header's meaning intact (e.g. an extra space) may pass.
  RecordProperty("mutations_still_verified", accepted);
}

// ---- The verifier ---------------------------------------------------------------------------------------------

const Credential kAdmin{"AKIDADMIN00000000001", "admin/Secret+Key=0123456789abcdefABCDEF", "default"};
const Credential kAgent{"AKIDAGENT00000000002", "agent-secret-0123456789", "agent"};
constexpr char kTarget[] = "AmazonEC2ContainerServiceV20141113.ListClusters";
constexpr char kBody[] = "{\"maxResults\":10}";

system_clock::time_point Now() {
  return system_clock::time_point{std::chrono::sys_days{2024y / std::chrono::March / 1} + 9h + 30min};
}

// An ECS call as the AWS SDK sends it.
struct Call {
  std::string method = "POST";
  std::string path = "/";
  std::string query = "";
  HeaderList headers = {{"Host", "127.0.0.1:8080"},
                        {"Content-Type", "application/x-amz-json-1.1"},
                        {"X-Amz-Target", kTarget},
                        {"User-Agent", "aws-sdk-js/3"},
                        {"Content-Length", std::to_string(std::string(kBody).size())}};
  std::string body = kBody;
};

// Signed is `call` signed at `when` by `cred` for `region`/`service`, as HttpServer hands it to a handler.
HttpRequest Signed(const Call& call, const Credential& cred, system_clock::time_point when,
                   std::string_view region = "us-east-1", std::string_view service = "ecs") {
  HeaderList headers = call.headers;
  for (const auto& [name, value] :
       SignRequest(cred, region, service, call.method, call.path, call.query, call.headers, call.body, when)) {
    headers.emplace_back(name, value);
  }
  return ToHttpRequest(call.method, call.query.empty() ? call.path : call.path + "?" + call.query, headers, call.body);
}

SigV4Verifier Ecs() { return SigV4Verifier({kAdmin, kAgent}, "us-east-1"); }

void SetHeader(HttpRequest& req, const std::string& name, const std::string& value) {
  for (auto& [n, v] : req.headers) {
    if (n == name) {
      v = value;
      return;
    }
  }
  req.headers.emplace_back(name, value);
}

void RemoveHeader(HttpRequest& req, const std::string& name) {
  std::erase_if(req.headers, [&](const auto& h) { return h.first == name; });
}

TEST(SigV4Verifier, SignRequestRoundTrips) {
  const HttpRequest req = Signed(Call{}, kAgent, Now());
  ASSERT_NE(req.Header("authorization"), nullptr);
  EXPECT_EQ(*req.Header("x-amz-date"), "20240301T093000Z");
  EXPECT_EQ(*req.Header("x-amz-content-sha256"), HexSha256(kBody));
  // User-Agent is left unsigned (clients and proxies rewrite it); everything else the caller gave is signed.
  EXPECT_NE(req.Header("authorization")
                ->find("SignedHeaders=content-length;content-type;host;x-amz-content-sha256;"
                       "x-amz-date;x-amz-target,"),
            std::string::npos)
      << *req.Header("authorization");
  const SigV4Result r = Ecs().Authenticate(req, Now());
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.access_key_id, kAgent.access_key_id);
  EXPECT_EQ(r.profile, "agent");
  EXPECT_TRUE(Ecs().Verify(Signed(Call{}, kAdmin, Now()), Now()).ok());

  // A GET with a query and an encoded path round-trips too (path double-encoded, query re-encoded).
  Call get;
  get.method = "GET";
  get.path = "/a%20b/c";
  get.query = "z=1&a=%2F&m";
  get.headers = {{"Host", "localhost:8080"}};
  get.body = "";
  EXPECT_TRUE(Ecs().Verify(Signed(get, kAgent, Now()), Now()).ok());
}

TEST(SigV4Verifier, AcceptsTheDateHeaderInsteadOfXAmzDate) {
  const std::string amz_date = FormatAmzDate(Now());
  HeaderList headers = {{"host", "127.0.0.1:8080"}, {"date", "Fri, 01 Mar 2024 09:30:00 GMT"}};
  headers.emplace_back("authorization",
                       AuthorizationHeader(kAgent, "us-east-1", "ecs", "GET", "/", "", headers, "", amz_date));
  EXPECT_TRUE(Ecs().Verify(ToHttpRequest("GET", "/", headers, ""), Now()).ok());
}

struct Refusal {
  std::string name;
  std::function<void(HttpRequest&)> tamper;  // applied to a correctly signed ECS call
  ErrorCode code;
  std::string message_part;
};

TEST(SigV4Verifier, RefusesEachTampering) {
  const std::vector<Refusal> rows = {
      {"body changed", [](HttpRequest& r) { r.body = "{\"maxResults\":11}"; }, ErrorCode::kInvalidSignature,
       "'x-amz-content-sha256' header does not match"},
      {"body and its hash changed",
       [](HttpRequest& r) {
         r.body = "{\"maxResults\":11}";
         SetHeader(r, "x-amz-content-sha256", HexSha256(r.body));
       },
       ErrorCode::kInvalidSignature, "The request signature we calculated does not match"},
      {"hash header dropped, body changed",
       [](HttpRequest& r) {
         RemoveHeader(r, "x-amz-content-sha256");
         r.body += " ";
       },
       ErrorCode::kInvalidSignature, "does not carry"},
      {"operation changed",
       [](HttpRequest& r) { SetHeader(r, "x-amz-target", "AmazonEC2ContainerServiceV20141113.DeleteCluster"); },
       ErrorCode::kInvalidSignature, "The request signature we calculated does not match the signature you provided"},
      {"host changed", [](HttpRequest& r) { SetHeader(r, "host", "127.0.0.1:8081"); }, ErrorCode::kInvalidSignature,
       "does not match"},
      {"date moved one second", [](HttpRequest& r) { SetHeader(r, "x-amz-date", FormatAmzDate(Now() + 1s)); },
       ErrorCode::kInvalidSignature, "does not match"},
      {"method changed", [](HttpRequest& r) { r.method = "PUT"; }, ErrorCode::kInvalidSignature, "does not match"},
      {"path changed", [](HttpRequest& r) { r.target = "/x"; }, ErrorCode::kInvalidSignature, "does not match"},
      {"query added", [](HttpRequest& r) { r.target = "/?a=1"; }, ErrorCode::kInvalidSignature, "does not match"},
      {"a signed header dropped", [](HttpRequest& r) { RemoveHeader(r, "content-type"); }, ErrorCode::kInvalidSignature,
       "SignedHeaders names 'content-type'"},
      {"signature flipped",
       [](HttpRequest& r) {
         for (auto& [name, value] : r.headers) {
           if (name == "authorization") value.back() = value.back() == '0' ? '1' : '0';
         }
       },
       ErrorCode::kInvalidSignature, "does not match"},
      {"unsigned payload", [](HttpRequest& r) { SetHeader(r, "x-amz-content-sha256", "UNSIGNED-PAYLOAD"); },
       ErrorCode::kInvalidSignature, "'UNSIGNED-PAYLOAD' is not accepted"},
      {"no authorization", [](HttpRequest& r) { RemoveHeader(r, "authorization"); },
       ErrorCode::kMissingAuthenticationToken, "Missing Authentication Token"},
      {"two authorizations",
       [](HttpRequest& r) { r.headers.emplace_back("authorization", *r.Header("authorization")); },
       ErrorCode::kIncompleteSignature, "more than one Authorization"},
      {"garbled authorization", [](HttpRequest& r) { SetHeader(r, "authorization", "AWS4-HMAC-SHA256 garbage"); },
       ErrorCode::kIncompleteSignature, "not Name=Value"},
      {"no date", [](HttpRequest& r) { RemoveHeader(r, "x-amz-date"); }, ErrorCode::kIncompleteSignature,
       "requires existence of either a 'X-Amz-Date' or a 'Date' header"},
      {"malformed date", [](HttpRequest& r) { SetHeader(r, "x-amz-date", "2024-03-01T09:30:00Z"); },
       ErrorCode::kIncompleteSignature, "ISO-8601 'basic format'"},
      {"two dates", [](HttpRequest& r) { r.headers.emplace_back("x-amz-date", FormatAmzDate(Now())); },
       ErrorCode::kIncompleteSignature, "more than one X-Amz-Date"},
      {"session token", [](HttpRequest& r) { r.headers.emplace_back("x-amz-security-token", "FQoGZXIvYXdzE"); },
       ErrorCode::kUnrecognizedClient, "security token included in the request is invalid"},
  };
  for (const Refusal& row : rows) {
    HttpRequest req = Signed(Call{}, kAgent, Now());
    ASSERT_TRUE(Ecs().Verify(req, Now()).ok()) << row.name;
    row.tamper(req);
    const Status s = Ecs().Verify(req, Now());
    EXPECT_EQ(s.code(), row.code) << row.name << ": " << s.message();
    EXPECT_NE(s.message().find(row.message_part), std::string::npos) << row.name << ": " << s.message();
  }
}

TEST(SigV4Verifier, RefusesTheWrongKeyScopeOrSigner) {
  const Credential stranger{"AKIDSTRANGER", kAgent.secret_access_key, "x"};
  const Credential wrong_secret{kAgent.access_key_id, "not-the-secret", "agent"};
  struct Row {
    std::string name;
    HttpRequest req;
    ErrorCode code;
    std::string message_part;
  };
  Call unsigned_target;  // X-Amz-Target added after signing
  unsigned_target.headers.erase(unsigned_target.headers.begin() + 2);
  HttpRequest late_target = Signed(unsigned_target, kAgent, Now());
  late_target.headers.emplace_back("x-amz-target", kTarget);
  for (const Row& r : std::vector<Row>{
           {"unknown access key", Signed(Call{}, stranger, Now()), ErrorCode::kUnrecognizedClient,
            "The security token included in the request is invalid."},
           {"wrong secret", Signed(Call{}, wrong_secret, Now()), ErrorCode::kInvalidSignature,
            "The request signature we calculated does not match the signature you provided. Check your AWS Secret "
            "Access Key and signing method."},
           {"other region", Signed(Call{}, kAgent, Now(), "eu-west-1"), ErrorCode::kInvalidSignature,
            "Credential should be scoped to a valid region, not 'eu-west-1'"},
           {"other service", Signed(Call{}, kAgent, Now(), "us-east-1", "ec2"), ErrorCode::kInvalidSignature,
            "Credential should be scoped to correct service: 'ecs'"},
           {"x-amz-target not signed", late_target, ErrorCode::kIncompleteSignature,
            "'X-Amz-Target' must be a 'SignedHeader'"},
       }) {
    const Status s = Ecs().Verify(r.req, Now());
    EXPECT_EQ(s.code(), r.code) << r.name << ": " << s.message();
    EXPECT_NE(s.message().find(r.message_part), std::string::npos) << r.name << ": " << s.message();
  }
}

TEST(SigV4Verifier, WrongSignatureMessageShowsTheCanonicalRequest) {
  const Status s = Ecs().Verify(Signed(Call{}, Credential{kAgent.access_key_id, "x", ""}, Now()), Now());
  ASSERT_EQ(s.code(), ErrorCode::kInvalidSignature);
  EXPECT_NE(s.message().find("The Canonical String for this request should have been\n'POST\n/\n\n"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("The String-to-Sign should have been\n'AWS4-HMAC-SHA256\n20240301T093000Z\n"
                             "20240301/us-east-1/ecs/aws4_request\n"),
            std::string::npos);
  EXPECT_EQ(s.message().find(kAgent.secret_access_key), std::string::npos);
}

TEST(SigV4Verifier, RequiresHostAndDateSigned) {
  const std::string amz_date = FormatAmzDate(Now());
  // Sign only x-amz-date (no host), then add Host.
  HeaderList headers = {{"x-amz-date", amz_date}};
  std::string auth = AuthorizationHeader(kAgent, "us-east-1", "ecs", "GET", "/", "", headers, "", amz_date);
  headers.emplace_back("host", "127.0.0.1:8080");
  headers.emplace_back("authorization", auth);
  Status s = Ecs().Verify(ToHttpRequest("GET", "/", headers, ""), Now());
  EXPECT_EQ(s.code(), ErrorCode::kIncompleteSignature) << s.message();
  EXPECT_NE(s.message().find("'Host' must be a 'SignedHeader'"), std::string::npos) << s.message();

  headers = {{"host", "127.0.0.1:8080"}};
  auth = AuthorizationHeader(kAgent, "us-east-1", "ecs", "GET", "/", "", headers, "", amz_date);
  headers.emplace_back("x-amz-date", amz_date);
  headers.emplace_back("authorization", auth);
  s = Ecs().Verify(ToHttpRequest("GET", "/", headers, ""), Now());
  EXPECT_EQ(s.code(), ErrorCode::kIncompleteSignature) << s.message();
  EXPECT_NE(s.message().find("'X-Amz-Date' must be a 'SignedHeader'"), std::string::npos) << s.message();
}

TEST(SigV4Verifier, ScopeDateMustMatchTheRequestDate) {
  // Signed at 23:59:59 on Mar 1 but scoped to Mar 2 (a client whose date and time disagree).
  const std::string amz_date = "20240301T235959Z";
  HeaderList headers = {{"host", "h"}, {"x-amz-date", amz_date}};
  std::string auth = AuthorizationHeader(kAgent, "us-east-1", "ecs", "GET", "/", "", headers, "", amz_date);
  auth.replace(auth.find("/20240301/"), 10, "/20240302/");
  headers.emplace_back("authorization", auth);
  const auto when = system_clock::time_point{*ParseAmzDate(amz_date)};
  const Status s = Ecs().Verify(ToHttpRequest("GET", "/", headers, ""), when);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidSignature);
  EXPECT_EQ(s.message(),
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '20240302' != "
            "'20240301', from '20240301T235959Z'.");
}

TEST(SigV4Verifier, RefusesABadTerminator) {
  const std::string amz_date = FormatAmzDate(Now());
  HeaderList headers = {{"host", "h"}, {"x-amz-date", amz_date}};
  std::string auth = AuthorizationHeader(kAgent, "us-east-1", "ecs", "GET", "/", "", headers, "", amz_date);
  auth.replace(auth.find("aws4_request"), 12, "aws5_request");
  headers.emplace_back("authorization", auth);
  const Status s = Ecs().Verify(ToHttpRequest("GET", "/", headers, ""), Now());
  EXPECT_EQ(s.code(), ErrorCode::kInvalidSignature);
  EXPECT_NE(s.message().find("valid terminator: 'aws4_request', not 'aws5_request'"), std::string::npos);
}

// The window is now ± skew, to the second: signed at T (09:30:00) it is accepted from now = T - 5 min through
// now = T + 5 min (and the rest of that second), and refused one second outside either edge.
TEST(SigV4Verifier, SkewWindowEdges) {
  const HttpRequest req = Signed(Call{}, kAgent, Now());
  struct Row {
    system_clock::duration now_minus_signed;
    ErrorCode code;
    std::string message;  // exact, when refused
  };
  for (const Row& r : std::vector<Row>{
           {0s, ErrorCode::kOk, ""},
           {5min, ErrorCode::kOk, ""},
           {5min + 999ms, ErrorCode::kOk, ""},
           {5min + 1s, ErrorCode::kInvalidSignature,
            "Signature expired: 20240301T093000Z is now earlier than 20240301T093001Z (20240301T093501Z - 5 min.)"},
           {1h, ErrorCode::kInvalidSignature,
            "Signature expired: 20240301T093000Z is now earlier than 20240301T102500Z (20240301T103000Z - 5 min.)"},
           {-5min, ErrorCode::kOk, ""},
           {-5min - 1s, ErrorCode::kInvalidSignature,
            "Signature not yet current: 20240301T093000Z is still later than 20240301T092959Z (20240301T092459Z + 5 "
            "min.)"},
       }) {
    const Status s = Ecs().Verify(req, Now() + r.now_minus_signed);
    EXPECT_EQ(s.code(), r.code) << s.message();
    if (r.code != ErrorCode::kOk) {
      EXPECT_EQ(s.message(), r.message);
    }
  }
  // A custom window, in seconds.
  const SigV4Verifier tight({kAgent}, "us-east-1", "ecs", 90s);
  EXPECT_TRUE(tight.Verify(req, Now() + 90s).ok());
  const Status s = tight.Verify(req, Now() + 91s);
  EXPECT_EQ(s.message(),
            "Signature expired: 20240301T093000Z is now earlier than 20240301T093001Z (20240301T093131Z - 90 sec.)");
}

TEST(SigV4Verifier, ErrorsMapToEcsNamesAndStatuses) {
  struct Row {
    ErrorCode code;
    int http;
    std::string type;
  };
  for (const Row& r : std::vector<Row>{
           {ErrorCode::kUnrecognizedClient, 400, "UnrecognizedClientException"},
           {ErrorCode::kInvalidSignature, 400, "InvalidSignatureException"},
           {ErrorCode::kIncompleteSignature, 400, "IncompleteSignatureException"},
           {ErrorCode::kMissingAuthenticationToken, 403, "MissingAuthenticationTokenException"},
           {ErrorCode::kAccessDenied, 400, "AccessDeniedException"},
       }) {
    EXPECT_EQ(ToEcsError(r.code).http_status, r.http) << r.type;
    EXPECT_EQ(std::string(ToEcsError(r.code).type), r.type);
  }
  HttpRequest req = Signed(Call{}, kAgent, Now());
  RemoveHeader(req, "authorization");
  EXPECT_EQ(ErrorBody(Ecs().Verify(req, Now())),
            R"({"__type":"MissingAuthenticationTokenException","message":"Missing Authentication Token"})");
}

TEST(SigV4Verifier, FirstOfTwoEqualAccessKeysWins) {
  const SigV4Verifier v({kAgent, Credential{kAgent.access_key_id, "other", "dup"}}, "us-east-1");
  const SigV4Result r = v.Authenticate(Signed(Call{}, kAgent, Now()), Now());
  EXPECT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.profile, "agent");
}

// ---- Credentials file -----------------------------------------------------------------------------------------

class CredentialsFileTest : public testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    return path;
  }
  TempDir temp_{"gpupack-sigv4"};  // removed with everything in it after each test
  fs::path dir_ = temp_.path();
};

constexpr char kGoodFile[] =
    "# gpupack credentials\n"
    "[default]\n"
    "aws_access_key_id = AKIDADMIN00000000001\n"
    "aws_secret_access_key=admin/Secret+Key=0123456789abcdefABCDEF\n"
    "region = us-east-1\n"
    "\n"
    "; the agents\n"
    "[ agent ]\r\n"
    "  AWS_ACCESS_KEY_ID\t=\tAKIDAGENT00000000002  \r\n"
    "  aws_secret_access_key =    agent-secret-0123456789\r\n"
    "aws_session_token = ignored\n";

TEST_F(CredentialsFileTest, LoadsProfiles) {
  Result<std::vector<Credential>> c = LoadCredentialsFile(Write("credentials", kGoodFile));
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->size(), 2u);
  EXPECT_EQ((*c)[0].profile, "default");
  EXPECT_EQ((*c)[0].access_key_id, kAdmin.access_key_id);
  EXPECT_EQ((*c)[0].secret_access_key, kAdmin.secret_access_key);  // '=' inside the value is kept
  EXPECT_EQ((*c)[1].profile, "agent");
  EXPECT_EQ((*c)[1].access_key_id, kAgent.access_key_id);
  EXPECT_EQ((*c)[1].secret_access_key, kAgent.secret_access_key);
  // And they verify what they sign.
  const SigV4Verifier v(*c, "us-east-1");
  EXPECT_TRUE(v.Verify(Signed(Call{}, kAgent, Now()), Now()).ok());
  EXPECT_TRUE(LoadCredentialsFile(Write("owner-read-only", kGoodFile, 0400)).ok());
}

TEST_F(CredentialsFileTest, RefusesFilesOthersCanReadOrWrite) {
  for (const mode_t mode : {0644, 0640, 0604, 0620, 0602, 0660, 0666, 0601}) {
    const std::string path = Write("credentials", kGoodFile, mode);
    Result<std::vector<Credential>> c = LoadCredentialsFile(path);
    ASSERT_FALSE(c.ok()) << std::oct << mode;
    EXPECT_NE(c.status().message().find("readable or writable by group or others"), std::string::npos)
        << c.status().message();
    EXPECT_NE(c.status().message().find("chmod 600 " + path), std::string::npos) << c.status().message();
  }
}

TEST_F(CredentialsFileTest, RefusesMissingEmptyAndNonRegularFiles) {
  Result<std::vector<Credential>> c = LoadCredentialsFile((dir_ / "nope").string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("cannot open credentials file"), std::string::npos);
  EXPECT_NE(c.status().message().find("No such file"), std::string::npos) << c.status().message();

  c = LoadCredentialsFile(Write("empty", ""));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("is empty"), std::string::npos) << c.status().message();

  c = LoadCredentialsFile(Write("comments-only", "# nothing\n; here\n\n"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("no [profile]"), std::string::npos) << c.status().message();

  fs::create_directory(dir_ / "adir");
  ::chmod((dir_ / "adir").c_str(), 0700);
  c = LoadCredentialsFile((dir_ / "adir").string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not a regular file"), std::string::npos) << c.status().message();
}

TEST_F(CredentialsFileTest, RefusesMalformedContent) {
  struct Row {
    std::string name;
    std::string text;
    std::string message_part;
  };
  for (const Row& r : std::vector<Row>{
           {"no secret", "[a]\naws_access_key_id = AKID1\n", "profile [a] (line 1) has no aws_secret_access_key"},
           {"no key id", "[a]\naws_secret_access_key = s\n", "profile [a] (line 1) has no aws_access_key_id"},
           {"second profile incomplete", "[a]\naws_access_key_id = AKID1\naws_secret_access_key = s\n[b]\nregion = x\n",
            "profile [b] (line 4) has no aws_access_key_id"},
           {"duplicate access key ids",
            "[a]\naws_access_key_id = AKID1\naws_secret_access_key = s\n[b]\naws_access_key_id = AKID1\n"
            "aws_secret_access_key = t\n",
            "access key id 'AKID1' appears in profiles [a] and [b]"},
           {"duplicate profile", "[a]\naws_access_key_id = A\naws_secret_access_key = s\n[a]\n",
            "line 4: profile [a] appears twice"},
           {"key given twice", "[a]\naws_access_key_id = A\naws_access_key_id = B\n",
            "line 3: aws_access_key_id given twice"},
           {"key outside a profile", "aws_access_key_id = A\n", "line 1: a key outside any [profile]"},
           {"not key = value", "[a]\njust some words\n", "line 2: expected 'key = value'"},
           {"unclosed section", "[a\n", "line 1: a section must look like [profile-name]"},
           {"empty section", "[  ]\n", "line 1: empty profile name"},
           {"empty key id", "[a]\naws_access_key_id =\naws_secret_access_key = s\n",
            "line 2: aws_access_key_id must be"},
           {"key id with a slash", "[a]\naws_access_key_id = AK/ID\n", "line 2: aws_access_key_id must be"},
           {"secret with a space", "[a]\naws_access_key_id = A\naws_secret_access_key = two words\n",
            "line 3: aws_secret_access_key must be"},
       }) {
    Result<std::vector<Credential>> c = ParseCredentials(r.text, "test");
    ASSERT_FALSE(c.ok()) << r.name;
    EXPECT_EQ(c.status().code(), ErrorCode::kInvalidParameter) << r.name;
    EXPECT_NE(c.status().message().find(r.message_part), std::string::npos) << r.name << ": " << c.status().message();
  }
}

TEST_F(CredentialsFileTest, NeverEchoesASecret) {
  for (const std::string& text : {
           std::string("[a]\naws_access_key_id = A\naws_secret_access_key = SECRETVALUE x\n"),
           std::string("[a]\nSECRETVALUE\n"),
           std::string("SECRETVALUE = 1\n"),
       }) {
    Result<std::vector<Credential>> c = LoadCredentialsFile(Write("c", text));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().message().find("SECRETVALUE"), std::string::npos) << c.status().message();
  }
}

}  // namespace
}  // namespace gpupack::api
