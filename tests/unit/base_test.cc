// base/: the JSON field reader in two callers' words (ECS's codec and the CloudWatch Logs handler, as they word
// their errors today), the atomic file write, WaitFd and percent-encoding.
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "base/atomic_file.h"
#include "base/fd_wait.h"
#include "base/json_fields.h"
#include "base/percent.h"

namespace gpupack {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// EcsWords: api/ecs/codec.cc's words: "<path>: expected a string, got a list", ClientException; null is absent and
// 3.0 is the integer 3.
class EcsWords : public JsonDialect {
 public:
  Status Invalid(const std::string& path, const std::string& what) const override {
    return Status::Client(path + ": " + what);
  }
  Status Error(const JsonError& e) const override {
    const std::string path = e.path.str();
    const Json& got = *e.got;
    switch (e.want) {
      case JsonWant::kAny: return Invalid(path, "is required");
      case JsonWant::kObject: return Invalid(path, std::string("expected an object, got ") + JsonTypeName(got));
      case JsonWant::kString: return Invalid(path, std::string("expected a string, got ") + JsonTypeName(got));
      case JsonWant::kBoolean: return Invalid(path, std::string("expected a boolean, got ") + JsonTypeName(got));
      case JsonWant::kArray:
      case JsonWant::kStringArray:
        if (got.is_array()) return Invalid(path, "at most " + std::to_string(e.max_size) + " entries are allowed");
        return Invalid(path, std::string("expected a list, got ") + JsonTypeName(got));
      case JsonWant::kInteger: {
        const bool whole = got.is_number_integer() ||
                           (got.is_number_float() && std::isfinite(got.get<double>()) &&
                            got.get<double>() == std::floor(got.get<double>()));
        if (whole) return Invalid(path, "integer out of range");
        return Invalid(path, std::string("expected an integer, got ") + JsonTypeName(got));
      }
    }
    return Invalid(path, "is not valid");
  }
  bool NullIsAbsent() const override { return true; }
  bool IntegralFloats() const override { return true; }
};

// LogsWords: api/logs/logs_handler.cc's words: "limit must be an integer from 1 to 10000", "1 validation error
// detected: logGroupName is required", InvalidParameter; null is absent.
class LogsWords : public JsonDialect {
 public:
  Status Invalid(const std::string& path, const std::string& what) const override {
    return Status::InvalidParameter(path + " " + what);
  }
  Status Error(const JsonError& e) const override {
    const std::string path = e.path.str();
    switch (e.want) {
      case JsonWant::kAny:
        return Status::InvalidParameter(std::string("1 validation error detected: ") + e.path.key() + " is required");
      case JsonWant::kObject: return Status::InvalidParameter("the request body must be a JSON object");
      case JsonWant::kString:  // an element of a list of strings names the list
        return e.array ? Invalid(e.array->str(), "must be a list of strings") : Invalid(path, "must be a string");
      case JsonWant::kBoolean: return Invalid(path, "must be true or false");
      case JsonWant::kInteger:
        return Invalid(path, "must be an integer from " + std::to_string(e.lo) + " to " + std::to_string(e.hi));
      case JsonWant::kArray:
      case JsonWant::kStringArray: return Invalid(e.array ? e.array->str() : path, "must be a list of strings");
    }
    return Invalid(path, "is not valid");
  }
  bool NullIsAbsent() const override { return true; }
};

// ChannelWords: protocol/fields.cc's words ("hello.id must be an integer"); null is a value of the wrong type.
class ChannelWords : public JsonDialect {
 public:
  Status Invalid(const std::string& path, const std::string& what) const override {
    return Status::InvalidParameter(path + " " + what);
  }
  Status Error(const JsonError& e) const override {
    const std::string path = e.path.str();
    if (e.got == nullptr) return Invalid(path, "is required");
    switch (e.want) {
      case JsonWant::kString: return Invalid(path, "must be a string");
      case JsonWant::kArray:
        return Invalid(path, e.got->is_array() ? "must hold at most " + std::to_string(e.max_size) + " entries"
                                               : "must be an array");
      default: return Invalid(path, "is not valid");
    }
  }
};

struct Case {
  const char* body;
  std::function<void(JsonFields&)> read;
  const char* message;  // "" when the read succeeds
};

void RunTable(const JsonDialect& words, const JsonPath& root, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const Json body = Json::parse(c.body);
    JsonFields f(body, root, words);
    c.read(f);
    EXPECT_EQ(f.status().message(), c.message) << c.body;
  }
}

TEST(BaseJsonFields, EcsCodecWords) {
  const EcsWords words;
  std::optional<std::string> s;
  std::optional<int64_t> n;
  std::optional<bool> b;
  std::vector<std::string> list;
  auto str = [&](JsonFields& f) { f.String("name", s); };
  auto num = [&](JsonFields& f) { f.Int64("count", n, JsonFields::kInt32Min, JsonFields::kInt32Max); };
  auto boolean = [&](JsonFields& f) { f.Bool("essential", b); };
  auto strings = [&](JsonFields& f) { f.Strings("command", list, 3); };
  RunTable(words, JsonPath(), {
      {R"({"name": "x"})", str, ""},
      {R"({"name": null})", str, ""},
      {R"({"name": 3})", str, "name: expected a string, got a number"},
      {R"({"name": [1]})", str, "name: expected a string, got a list"},
      {R"({"count": 3.0})", num, ""},
      {R"({"count": 3.5})", num, "count: expected an integer, got a number with a fraction"},
      {R"({"count": 4294967296})", num, "count: integer out of range"},
      {R"({"count": 1e300})", num, "count: integer out of range"},
      {R"({"count": 18446744073709551615})", num, "count: integer out of range"},
      {R"({"count": "1"})", num, "count: expected an integer, got a string"},
      {R"({"essential": 1})", boolean, "essential: expected a boolean, got a number"},
      {R"({"command": "ls"})", strings, "command: expected a list, got a string"},
      {R"({"command": ["a", 1]})", strings, "command[1]: expected a string, got a number"},
      {R"({"command": ["a", "b", "c", "d"]})", strings, "command: at most 3 entries are allowed"},
  });
  // A nested object's path: "containerDefinitions[0].name".
  const Json body = Json::parse(R"({"containerDefinitions": [{"name": 1}]})");
  JsonFields f(body, JsonPath(), words);
  f.Array("containerDefinitions", false, [&](const Json& e, const JsonPath& p) {
    JsonFields c(e, p, words);
    c.String("name", s);
    return c.status();
  });
  EXPECT_EQ(f.status().code(), ErrorCode::kClient);
  EXPECT_EQ(f.status().message(), "containerDefinitions[0].name: expected a string, got a number");
}

TEST(BaseJsonFields, LogsHandlerWords) {
  const LogsWords words;
  std::optional<std::string> s;
  std::optional<int64_t> n;
  bool b = true;
  std::vector<std::string> list;
  RunTable(words, JsonPath(), {
      {R"({})", [&](JsonFields& f) { f.String("logGroupName", s); }, ""},
      {R"({})", [&](JsonFields& f) { std::string r; f.String("logStreamName", r, true); },
       "1 validation error detected: logStreamName is required"},
      {R"({"logStreamName": null})", [&](JsonFields& f) { std::string r; f.String("logStreamName", r, true); },
       "1 validation error detected: logStreamName is required"},
      {R"([1])", [&](JsonFields& f) { f.String("logGroupName", s); }, "the request body must be a JSON object"},
      {R"({"nextToken": 5})", [&](JsonFields& f) { f.String("nextToken", s); }, "nextToken must be a string"},
      {R"({"limit": 0})", [&](JsonFields& f) { f.Int64("limit", n, 1, 10000); },
       "limit must be an integer from 1 to 10000"},
      {R"({"limit": "5"})", [&](JsonFields& f) { f.Int64("limit", n, 1, 10000); },
       "limit must be an integer from 1 to 10000"},
      {R"({"startFromHead": "yes"})", [&](JsonFields& f) { f.Bool("startFromHead", b); },
       "startFromHead must be true or false"},
      {R"({"logStreamNames": ["a", 2]})", [&](JsonFields& f) { f.Strings("logStreamNames", list); },
       "logStreamNames must be a list of strings"},
      {R"({"logStreamNames": "a"})", [&](JsonFields& f) { f.Strings("logStreamNames", list); },
       "logStreamNames must be a list of strings"},
  });
  EXPECT_TRUE(b);  // a bad member leaves the field as it was
}

TEST(BaseJsonFields, ChannelWordsNamedRootAndFirstErrorKept) {
  const ChannelWords words;
  const Json body = Json::parse(R"({"a": null, "b": 1, "tasks": [1, 2, 3]})");
  JsonFields f(body, JsonPath("hello"), words);
  std::string a, b;
  f.String("a", a);  // null is a value here, not an absence
  f.String("b", b);
  EXPECT_EQ(f.status().message(), "hello.a must be a string");
  EXPECT_EQ(f.Path("b"), "hello.b");

  JsonFields g(body, JsonPath("hello"), words);
  const Json* tasks = g.Get("tasks", true);
  ASSERT_NE(tasks, nullptr);
  EXPECT_FALSE(g.ArrayValue(*tasks, JsonPath(g.path(), "tasks"), 2));
  EXPECT_EQ(g.status().message(), "hello.tasks must hold at most 2 entries");
  g.Fail("hello.x", "is wrong");  // the first error stays
  EXPECT_EQ(g.status().message(), "hello.tasks must hold at most 2 entries");

  JsonFields h(body, JsonPath("hello"), words);
  h.Array("tasks", true, [](const Json&, const std::string& p) { return Status::InvalidParameter(p + " bad"); });
  EXPECT_EQ(h.status().message(), "hello.tasks[0] bad");
  h.Get("missing", true);
  EXPECT_EQ(h.status().message(), "hello.tasks[0] bad");
  JsonFields m(body, JsonPath("hello"), words);
  m.Get("missing", true);
  EXPECT_EQ(m.status().message(), "hello.missing is required");
}

// ---- WriteFileAtomically -------------------------------------------------------------------------------------

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// TempDir: a fresh directory under the test's temporary directory, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "gpupack-base-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  size_t Entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(path), {})); }
};

TEST(BaseAtomicFile, ReplacesContentAndLeavesNoTemporary) {
  TempDir dir;
  const fs::path target = dir.path / "state.json";
  ASSERT_TRUE(WriteFileAtomically(target.string(), "old", 0644).ok());
  ASSERT_TRUE(WriteFileAtomically(target.string(), "new content", 0644).ok());
  EXPECT_EQ(ReadAll(target), "new content");
  EXPECT_EQ(dir.Entries(), 1u);
  struct stat st {};
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0022, 0u);  // never more than the mode asked for
  EXPECT_EQ(st.st_mode & 0600, 0600u);
}

TEST(BaseAtomicFile, ModeIsTheOneGivenLessTheUmask) {
  TempDir dir;
  const mode_t old = umask(0022);
  ASSERT_TRUE(WriteFileAtomically((dir.path / "a").string(), "x", 0600).ok());
  ASSERT_TRUE(WriteFileAtomically((dir.path / "b").string(), "x", 0666).ok());
  umask(old);
  struct stat a {}, b {};
  ASSERT_EQ(stat((dir.path / "a").c_str(), &a), 0);
  ASSERT_EQ(stat((dir.path / "b").c_str(), &b), 0);
  EXPECT_EQ(a.st_mode & 0777, 0600u);
  EXPECT_EQ(b.st_mode & 0777, 0644u);
}

TEST(BaseAtomicFile, TargetThatIsADirectoryIsLeftAndNoTemporaryStays) {
  TempDir dir;
  const fs::path target = dir.path / "sub";
  fs::create_directory(target);
  fs::path inside = target / "keep";
  std::ofstream(inside) << "kept";
  const Status s = WriteFileAtomically(target.string(), "x", 0644);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot rename"), std::string::npos) << s.message();
  EXPECT_TRUE(fs::is_directory(target));
  EXPECT_EQ(ReadAll(inside), "kept");
  EXPECT_EQ(dir.Entries(), 1u);  // the temporary was removed
}

TEST(BaseAtomicFile, UnwritableDirectoryLeavesTheOldFile) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes anywhere";
  TempDir dir;
  const fs::path target = dir.path / "state.json";
  ASSERT_TRUE(WriteFileAtomically(target.string(), "old", 0644).ok());
  fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec);
  const Status s = WriteFileAtomically(target.string(), "new", 0644);
  fs::permissions(dir.path, fs::perms::owner_all);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Permission denied"), std::string::npos) << s.message();  // errno's text
  EXPECT_EQ(ReadAll(target), "old");
  EXPECT_EQ(dir.Entries(), 1u);
}

TEST(BaseAtomicFile, CallersTemporaryStaleOneIsReplaced) {
  TempDir dir;
  const fs::path target = dir.path / "rec.json";
  const fs::path temp = dir.path / ".rec.tmp";
  std::ofstream(temp) << "a crashed write's leftovers";
  const std::string text = "{\"state\":\"running\"}\n";
  EXPECT_EQ(WriteFileAtomicallyAt(target.c_str(), temp.c_str(), text.data(), text.size(), 0644), 0);
  EXPECT_EQ(ReadAll(target), text);
  EXPECT_FALSE(fs::exists(temp));
  // A directory as the target: the errno, the temporary removed.
  fs::create_directory(dir.path / "d");
  EXPECT_EQ(WriteFileAtomicallyAt((dir.path / "d").c_str(), temp.c_str(), "x", 1, 0644), EISDIR);
  EXPECT_FALSE(fs::exists(temp));
}

// A symlink planted at the temporary's name (what `gpupack aws-model` once wrote through to any file the link
// named) is never followed: the temporary is created with O_EXCL | O_NOFOLLOW, so the write fails and the link's
// target keeps its content. The temporary's name is "<path>.tmp.<pid>.<n>" with a counter: links are planted
// for the next 4096 values of n.
TEST(BaseAtomicFile, ASymlinkAtTheTemporaryIsNotFollowed) {
  TempDir dir;
  const fs::path victim = dir.path / "victim";
  std::ofstream(victim) << "precious";
  const fs::path target = dir.path / "service-2.json";
  for (int n = 0; n < 4096; ++n)
    fs::create_symlink(victim, target.string() + ".tmp." + std::to_string(getpid()) + "." + std::to_string(n));
  const Status s = WriteFileAtomically(target.string(), "attacker's choice", 0644);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot create"), std::string::npos) << s.message();
  EXPECT_EQ(ReadAll(victim), "precious");
  EXPECT_FALSE(fs::exists(target));
  // The caller-named temporary: a stale symlink there is removed, not written through.
  const fs::path temp = dir.path / ".rec.tmp";
  fs::create_symlink(victim, temp);
  EXPECT_EQ(WriteFileAtomicallyAt(target.c_str(), temp.c_str(), "x", 1, 0644), 0);
  EXPECT_EQ(ReadAll(victim), "precious");
  EXPECT_EQ(ReadAll(target), "x");
  // A symlink at the target itself is replaced by the new file, its target untouched.
  const fs::path linked = dir.path / "linked.json";
  fs::create_symlink(victim, linked);
  ASSERT_TRUE(WriteFileAtomically(linked.string(), "new", 0644).ok());
  EXPECT_FALSE(fs::is_symlink(linked));
  EXPECT_EQ(ReadAll(linked), "new");
  EXPECT_EQ(ReadAll(victim), "precious");
}

// ---- WaitFd --------------------------------------------------------------------------------------------------

TEST(BaseFdWait, ReadyAndTimeout) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(WaitFd(fds[0], POLLIN, start + std::chrono::milliseconds(50)));  // nothing to read: times out
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  EXPECT_FALSE(WaitFd(fds[0], POLLIN, start));  // a deadline already passed
  EXPECT_TRUE(WaitFd(fds[1], POLLOUT, std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  EXPECT_TRUE(WaitFd(fds[0], POLLIN, std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  close(fds[0]);
  close(fds[1]);
}

// ---- percent-encoding ----------------------------------------------------------------------------------------

TEST(BasePercent, EncodeTable) {
  struct Row {
    std::string in, out, out_keep_slash;
  };
  const std::vector<Row> rows = {
      {"", "", ""},
      {"AZaz09-_.~", "AZaz09-_.~", "AZaz09-_.~"},
      {"a/b", "a%2Fb", "a/b"},
      {"a b", "a%20b", "a%20b"},
      {"~user", "~user", "~user"},
      {"a+b=c&d%", "a%2Bb%3Dc%26d%25", "a%2Bb%3Dc%26d%25"},
      {"arn:aws:ecs:us-east-1:1:container-instance/c/ab", "arn%3Aaws%3Aecs%3Aus-east-1%3A1%3Acontainer-instance%2Fc%2Fab",
       "arn%3Aaws%3Aecs%3Aus-east-1%3A1%3Acontainer-instance/c/ab"},
      {"\xE1\x88\xB4", "%E1%88%B4", "%E1%88%B4"},  // UTF-8 bytes, upper-case hex
      {std::string("\0\x7f\xff", 3), "%00%7F%FF", "%00%7F%FF"},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(PercentEncode(r.in), r.out) << r.in;
    EXPECT_EQ(PercentEncode(r.in, /*keep_slash=*/true), r.out_keep_slash) << r.in;
    EXPECT_EQ(PercentDecode(r.out), r.in);
    EXPECT_EQ(PercentDecode(r.out_keep_slash), r.in);
  }
}

TEST(BasePercent, Decode) {
  EXPECT_EQ(PercentDecode("%e1%88%b4"), "\xE1\x88\xB4");  // lower-case hex too
  EXPECT_EQ(PercentDecode("100%"), "100%");               // a '%' without two hex digits stays
  EXPECT_EQ(PercentDecode("%4g%"), "%4g%");
  EXPECT_EQ(PercentDecode("a+b"), "a+b");
  EXPECT_EQ(PercentDecode("a+b", /*plus_is_space=*/true), "a b");
  EXPECT_EQ(PercentDecode("%2B", true), "+");
}

}  // namespace
}  // namespace gpupack
