// The log store (agent/log_store.h): the writer's lines and rotation, the reader's pages forward and backward
// with their positions, filters, resuming a stream, the purge; and the agent's answer to a log request.
#include "agent/log_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/log_service.h"
#include "agent/runtime.h"
#include "tests/unit/fake_docker_engine.h"
#include "tests/unit/temp_dir.h"

namespace gpupack::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::SizeIs;
using testing_support::FakeDockerEngine;
using testing_support::TempDir;

class LogStoreTest : public ::testing::Test {
 protected:
  // Messages of a page.
  static std::vector<std::string> Messages(const LogPage& page) {
    std::vector<std::string> out;
    for (const LogEvent& e : page.events) out.push_back(e.message);
    return out;
  }
  LogPage Read(LogQuery q) {
    auto page = ReadLogPage(dir_, q);
    EXPECT_TRUE(page.ok()) << page.status().message();
    return page.ok() ? *page : LogPage{};
  }
  void Write(LogWriter& w, int from, int to, int64_t ts = 1000) {
    for (int i = from; i < to; ++i) {
      const std::string m = "line " + std::to_string(i);
      ASSERT_TRUE(w.Append(ts + i, m.data(), m.size()));
    }
  }

  TempDir temp_{"gpupack-log-store"};  // removed with everything in it after each test
  fs::path root_ = temp_.path();
  std::string dir_ = (root_ / "t" / "c").string();
};

TEST_F(LogStoreTest, LogDirectoryKeepsNamesToSafeCharacters) {
  EXPECT_EQ(LogDirectory("/r", "arn:aws:ecs:us-east-1:1:task/c/abc123", "web app"), "/r/abc123/web_app");
  EXPECT_EQ(LogDirectory("/r", "arn:aws:ecs:us-east-1:1:task/c/abc", ".."), "/r/abc/_.");
  EXPECT_EQ(TaskLogDirectory("/r", "arn:aws:ecs:us-east-1:1:task/c/abc"), "/r/abc");
}

TEST_F(LogStoreTest, AMissingStreamIsNotFoundAndAnEmptyOneIsEmpty) {
  EXPECT_FALSE(Read({}).found);
  LogWriter w;
  ASSERT_TRUE(w.Open(dir_, {}).ok());
  LogPage page = Read({});
  EXPECT_TRUE(page.found);
  EXPECT_THAT(page.events, SizeIs(0));
  EXPECT_TRUE(page.at_end);
}

TEST_F(LogStoreTest, EventsKeepTheirTimestampsAndPageForwardByPosition) {
  LogWriter w;
  ASSERT_TRUE(w.Open(dir_, {}).ok());
  Write(w, 0, 5);
  LogQuery q;
  q.limit = 2;
  LogPage first = Read(q);
  EXPECT_THAT(Messages(first), ElementsAre("line 0", "line 1"));
  EXPECT_EQ(first.events[1].timestamp_ms, 1001);
  EXPECT_FALSE(first.at_end);
  EXPECT_EQ(first.next_backward, 0u);
  q.position = first.next_forward;
  LogPage second = Read(q);
  EXPECT_THAT(Messages(second), ElementsAre("line 2", "line 3"));
  EXPECT_EQ(second.next_backward, first.next_forward);
  q.position = second.next_forward;
  LogPage third = Read(q);
  EXPECT_THAT(Messages(third), ElementsAre("line 4"));
  EXPECT_TRUE(third.at_end);
  // At the end, the same position again: nothing, and the position stays until more is written.
  q.position = third.next_forward;
  LogPage none = Read(q);
  EXPECT_THAT(none.events, SizeIs(0));
  EXPECT_EQ(none.next_forward, third.next_forward);
  Write(w, 5, 6);
  EXPECT_THAT(Messages(Read(q)), ElementsAre("line 5"));
}

TEST_F(LogStoreTest, BackwardPagesReturnTheNewestEventsOldestFirst) {
  LogWriter w;
  ASSERT_TRUE(w.Open(dir_, {}).ok());
  Write(w, 0, 5);
  LogQuery q;
  q.forward = false;
  q.limit = 2;
  LogPage last = Read(q);
  EXPECT_THAT(Messages(last), ElementsAre("line 3", "line 4"));
  EXPECT_EQ(last.next_forward, w.End());
  q.position = last.next_backward;
  EXPECT_THAT(Messages(Read(q)), ElementsAre("line 1", "line 2"));
  // Forward from the backward page's forward position: only what comes after it.
  LogQuery after;
  after.position = last.next_forward;
  EXPECT_THAT(Read(after).events, SizeIs(0));
}

TEST_F(LogStoreTest, RotationKeepsTheNewestFilesAndPositionsStayValid) {
  LogWriter w;
  ASSERT_TRUE(w.Open(dir_, LogLimits{4096, 3}).ok());
  Write(w, 0, 2000);  // about 30 KB: many more files than kept
  const auto files = ListLogFiles(dir_);
  ASSERT_THAT(files, SizeIs(3));
  for (const LogFile& f : files) EXPECT_LE(f.size, 4096u);
  EXPECT_EQ(files[1].start, files[0].start + files[0].size);
  // From the head (and from a position older than what is kept): the oldest line kept, then on in order.
  LogQuery q;
  q.position = 0;
  q.limit = 100000;
  LogPage all = Read(q);
  ASSERT_FALSE(all.events.empty());
  EXPECT_EQ(all.events.back().message, "line 1999");
  const int first = std::stoi(all.events.front().message.substr(5));
  EXPECT_GT(first, 1000);
  for (size_t i = 0; i < all.events.size(); ++i) EXPECT_EQ(all.events[i].message, "line " + std::to_string(first + i));
  EXPECT_EQ(all.next_forward, w.End());
  // Paging across a file boundary returns each line once.
  LogQuery page;
  page.limit = 7;
  std::vector<std::string> seen;
  for (int n = 0; n < 1000; ++n) {
    LogPage p = Read(page);
    for (auto& m : Messages(p)) seen.push_back(m);
    if (p.at_end && p.events.empty()) break;
    page.position = p.next_forward;
  }
  EXPECT_EQ(seen, Messages(all));
  // Backward across a boundary too.
  LogQuery back;
  back.forward = false;
  back.limit = 300;
  LogPage newest = Read(back);
  EXPECT_THAT(newest.events, SizeIs(300));
  EXPECT_EQ(newest.events.front().message, "line 1700");
}

TEST_F(LogStoreTest, FeedSplitsLinesAndWaitsForTheRest) {
  LogWriter w;
  ASSERT_TRUE(w.Open(dir_, {}).ok());
  const std::string chunk1 = "one\ntw";
  const std::string chunk2 = "o\r\nthree\n\nfour";
  w.Feed(chunk1.data(), chunk1.size(), 5);
  w.Feed(chunk2.data(), chunk2.size(), 6);
  EXPECT_THAT(Messages(Read({})), ElementsAre("one", "two", "three", ""));
  w.Flush(7);
  LogPage page = Read({});
  EXPECT_THAT(Messages(page), ElementsAre("one", "two", "three", "", "four"));
  EXPECT_EQ(page.events[0].timestamp_ms, 5);
  EXPECT_EQ(page.events[1].timestamp_ms, 6);  // stamped when its end arrived
  EXPECT_EQ(page.events[4].timestamp_ms, 7);
}

TEST_F(LogStoreTest, ALongLineBecomesEventsOfTheLargestSize) {
  LogWriter w;
  ASSERT_TRUE(w.Open(dir_, {}).ok());
  const std::string line = std::string(kMaxLineBytes * 2 + 10, 'x') + "\n";
  w.Feed(line.data(), line.size(), 1);
  LogQuery q;
  q.max_bytes = 1 << 20;
  LogPage page = Read(q);
  ASSERT_THAT(page.events, SizeIs(3));
  EXPECT_EQ(page.events[0].message.size(), kMaxLineBytes);
  EXPECT_EQ(page.events[2].message.size(), 10u);
}

TEST_F(LogStoreTest, FiltersTakeEveryTermAndTheTimeRange) {
  LogWriter w;
  ASSERT_TRUE(w.Open(dir_, {}).ok());
  for (const char* m : {"GET /a 200", "GET /b 500", "POST /a 500", "get /a 500"}) w.Append(100, m, strlen(m));
  w.Append(200, "GET /c 500", 10);
  LogQuery q;
  q.terms = {"GET", "500"};
  EXPECT_THAT(Messages(Read(q)), ElementsAre("GET /b 500", "GET /c 500"));
  q.end_ms = 200;
  EXPECT_THAT(Messages(Read(q)), ElementsAre("GET /b 500"));
  q.end_ms.reset();
  q.start_ms = 150;
  EXPECT_THAT(Messages(Read(q)), ElementsAre("GET /c 500"));
  // A forward scan stops after max_scan_bytes even without a match, and says where to go on.
  LogQuery none;
  none.terms = {"nothing"};
  none.max_scan_bytes = 1;
  LogPage p = Read(none);
  EXPECT_THAT(p.events, SizeIs(0));
  EXPECT_FALSE(p.at_end);
  EXPECT_GT(p.next_forward, 0u);
}

TEST_F(LogStoreTest, ReopeningResumesTheStreamAndEndsACutRecord) {
  {
    LogWriter w;
    ASSERT_TRUE(w.Open(dir_, {}).ok());
    Write(w, 0, 3);
  }
  {
    std::ofstream cut(ListLogFiles(dir_).back().path, std::ios::app);
    cut << "123 half";  // a writer that died in the middle of a record
  }
  LogWriter w;
  ASSERT_TRUE(w.Open(dir_, {}).ok());
  Write(w, 3, 4);
  EXPECT_THAT(Messages(Read({})), ElementsAre("line 0", "line 1", "line 2", "half", "line 3"));
  EXPECT_EQ(w.End(), ListLogFiles(dir_).back().size);
}

TEST_F(LogStoreTest, APositionInsideARecordReadsFromTheNextOne) {
  LogWriter w;
  ASSERT_TRUE(w.Open(dir_, {}).ok());
  Write(w, 0, 3);
  LogQuery q;
  q.position = 3;
  EXPECT_THAT(Messages(Read(q)), ElementsAre("line 1", "line 2"));
}

TEST_F(LogStoreTest, PurgeDeletesOnlyOldLogsOfTasksTheAgentNoLongerHas) {
  for (const char* task : {"old", "kept", "recent"}) {
    LogWriter w;
    ASSERT_TRUE(w.Open((root_ / task / "c").string(), {}).ok());
    Write(w, 0, 1);
  }
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(48);
  for (const char* task : {"old", "kept"})
    for (const auto& f : fs::recursive_directory_iterator(root_ / task)) fs::last_write_time(f.path(), old);
  fs::remove_all(root_ / "t");
  const size_t purged = PurgeLogs(root_.string(), std::chrono::hours(24),
                                  [](const std::string& id) { return id == "kept"; });
  EXPECT_EQ(purged, 1u);
  EXPECT_FALSE(fs::exists(root_ / "old"));
  EXPECT_TRUE(fs::exists(root_ / "kept"));
  EXPECT_TRUE(fs::exists(root_ / "recent"));
}

// The store holds at most the cap: the logs of tasks the agent no longer has go, the least recently written
// first, until it fits; a task the agent has keeps its logs even when they alone exceed the cap.
TEST_F(LogStoreTest, TheCapDeletesTheLeastRecentlyWrittenLogsOfStoppedTasksFirst) {
  fs::remove_all(root_ / "t");
  const std::string line(1000, 'x');  // a record of 1000 + 6 bytes ("1000 " + newline): 10 of them ~ 10 KB a task
  const auto now = fs::file_time_type::clock::now();
  int age = 10;  // hours: "s0" is the oldest, "running" the newest but kept
  for (const char* task : {"s0", "running", "s1", "s2", "s3"}) {
    LogWriter w;
    ASSERT_TRUE(w.Open((root_ / task / "c").string(), {}).ok());
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(w.Append(1000, line.data(), line.size()));
    w.Close();
    for (const auto& f : fs::recursive_directory_iterator(root_ / task))
      fs::last_write_time(f.path(), now - std::chrono::hours(age));
    age -= 2;
  }
  auto keep = [](const std::string& id) { return id == "running"; };
  const uint64_t each = ListLogFiles((root_ / "s0" / "c").string()).front().size;
  ASSERT_EQ(each, 10u * 1006u);

  LogCapResult r = CapLogs(root_.string(), 5 * each, keep);  // all fits: nothing goes
  EXPECT_EQ(r.removed_tasks, 0u);
  EXPECT_EQ(r.bytes, 5 * each);

  r = CapLogs(root_.string(), 3 * each, keep);  // two must go: s0, then s1 (running is older than s1 but kept)
  EXPECT_EQ(r.removed_tasks, 2u);
  EXPECT_EQ(r.removed_bytes, 2 * each);
  EXPECT_EQ(r.bytes, 3 * each);
  EXPECT_FALSE(fs::exists(root_ / "s0"));
  EXPECT_FALSE(fs::exists(root_ / "s1"));
  for (const char* task : {"running", "s2", "s3"}) EXPECT_TRUE(fs::exists(root_ / task)) << task;

  r = CapLogs(root_.string(), each / 2, keep);  // only the kept task's logs remain, over the cap
  EXPECT_EQ(r.removed_tasks, 2u);
  EXPECT_EQ(r.bytes, each);
  EXPECT_TRUE(fs::exists(root_ / "running"));
  EXPECT_FALSE(fs::exists(root_ / "s3"));
}

// A page's scan is bounded whatever its pattern: max_scan_bytes shared by the terms, forward within a file and
// backward by whole files; the token goes on where the page stopped, so paging reaches every event.
TEST_F(LogStoreTest, APagesScanIsBoundedWhateverItsTermsAndItsTokenGoesOn) {
  LogWriter w;
  ASSERT_TRUE(w.Open(dir_, LogLimits{4096, 64}).ok());  // files of at most 4 KiB
  const std::string filler(200, 'a');
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(w.Append(1000 + i, filler.data(), filler.size()));  // ~41 KB, 11 files
  ASSERT_TRUE(w.Append(5000, "needle", 6));
  ASSERT_GT(ListLogFiles(dir_).size(), 8u);

  LogQuery q;
  q.terms = std::vector<std::string>(31, "needle");  // 32 shares of the budget: 32 * 1024 / 32 = 1 KiB a page
  q.terms.push_back(std::string(1000, 'a') + "b");   // a term that a naive search would try at every byte
  q.max_scan_bytes = 32 * 1024;
  // Forward: each page scans at most ~1 KiB (five 206-byte records), finds nothing until the end.
  std::optional<uint64_t> position;
  int pages = 0;
  for (; pages < 1000; ++pages) {
    q.position = position;
    LogPage p = Read(q);
    EXPECT_THAT(p.events, SizeIs(0));
    if (p.at_end) break;
    ASSERT_TRUE(!position || p.next_forward > *position) << "a forward token must move on";
    position = p.next_forward;
  }
  EXPECT_GE(pages, 30) << "a page scanned more than its budget";

  // Backward, one term: whole files, newest first, none started past the budget; the events found meanwhile.
  LogQuery back;
  back.forward = false;
  back.terms = {"needle"};
  back.max_scan_bytes = 2 * 3000;  // 3,000 bytes with one term: one ~3.9 KB file a page (two for the newest, shorter)
  LogPage last = Read(back);
  ASSERT_THAT(Messages(last), ElementsAre("needle"));
  back.terms = {"nothing"};
  std::optional<uint64_t> end;
  pages = 0;
  for (; pages < 1000; ++pages) {
    back.position = end;
    LogPage p = Read(back);
    EXPECT_THAT(p.events, SizeIs(0));
    if (end && p.next_backward >= *end) break;  // the head of the stream: the token stays where it is
    end = p.next_backward;
  }
  EXPECT_GE(pages, 8) << "a backward page read more files than its budget";
}

TEST_F(LogStoreTest, TheAgentAnswersALogRequestFromTheStore) {
  const std::string arn = "arn:aws:ecs:us-east-1:1:task/c/t1";
  LogWriter w;
  ASSERT_TRUE(w.Open(LogDirectory(root_.string(), arn, "web"), {}).ok());
  Write(w, 0, 3);
  protocol::LogsRequest req;
  req.id = 7;
  req.task_arn = arn;
  req.container_name = "web";
  req.forward = false;
  req.limit = 2;
  protocol::LogsAnswer a = LogService::Answer(root_.string(), req);
  EXPECT_EQ(a.id, 7);
  EXPECT_TRUE(a.found);
  ASSERT_THAT(a.events, SizeIs(2));
  EXPECT_EQ(a.events[0].message, "line 1");
  EXPECT_EQ(a.events[0].timestamp, 1001);
  req.container_name = "other";
  EXPECT_FALSE(LogService::Answer(root_.string(), req).found);
  // Through the service's thread.
  LogService service(LogServiceOptions{root_.string()}, {});
  std::promise<protocol::LogsAnswer> answered;
  req.container_name = "web";
  service.Post(req, [&answered](const protocol::LogsAnswer& x) { answered.set_value(x); });
  auto fut = answered.get_future();
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_THAT(fut.get().events, SizeIs(2));
}

// ---- the process runtime's monitor writes the stream -------------------------------------------------------------

// The monitor (forked, or this program executed afresh) owns the workload's output: rotated files, every line
// in order, a last line without its newline kept when the program ends.
TEST_F(LogStoreTest, TheProcessMonitorRotatesTheOutputAndKeepsTheLastPartialLine) {
  for (const bool exec_monitor : {true, false}) {
    SCOPED_TRACE(exec_monitor ? "monitor executed" : "monitor forked");
    ProcessRuntimeOptions options;
    options.state_dir = (root_ / (exec_monitor ? "state-exec" : "state-fork")).string();
    options.log_dir = (root_ / (exec_monitor ? "logs-exec" : "logs-fork")).string();
    options.log_limits = LogLimits{4096, 3};
    options.exec_monitor = exec_monitor;
    auto runtime = MakeProcessRuntime(options);
    ASSERT_TRUE(runtime.ok()) << runtime.status().message();
    ContainerSpec spec;
    spec.task_arn = "arn:aws:ecs:us-east-1:1:task/c/rotate";
    spec.container_name = "out";
    spec.entry_point = {"/bin/sh", "-c"};
    spec.command = {R"(i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done; echo err >&2; printf tail)"};
    auto id = (*runtime)->Start(spec);
    ASSERT_TRUE(id.ok()) << id.status().message();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      auto st = (*runtime)->Inspect(*id);
      ASSERT_TRUE(st.ok());
      if (st->state != ContainerState::kRunning) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    dir_ = LogDirectory(options.log_dir, spec.task_arn, spec.container_name);
    const auto files = ListLogFiles(dir_);
    ASSERT_THAT(files, SizeIs(3));
    for (const LogFile& f : files) EXPECT_LE(f.size, 4096u);
    LogQuery q;
    q.limit = 100000;
    const std::vector<std::string> got = Messages(Read(q));
    ASSERT_GE(got.size(), 3u);
    EXPECT_EQ(got[got.size() - 3], "line 1999");
    EXPECT_EQ(got[got.size() - 2], "err");
    EXPECT_EQ(got.back(), "tail");
    const int first = std::stoi(got.front().substr(5));
    for (size_t i = 0; i + 2 < got.size(); ++i) EXPECT_EQ(got[i], "line " + std::to_string(first + i));
    EXPECT_TRUE((*runtime)->Remove(*id).ok());
    EXPECT_FALSE(ListLogFiles(dir_).empty());  // the logs outlive the container
  }
}

// ---- the docker runtime's copy of the engine's log ------------------------------------------------------------

// LogEngine answers Docker Engine API requests on a unix socket, one connection each: GET /version, and the logs
// of a container as the multiplexed stream with timestamps, filtered by `since` as the engine does (inclusive).
class LogEngine {
 public:
  struct Line {
    std::string time;  // RFC 3339 with nanoseconds
    double seconds;    // the same, for `since`
    int stream;        // 1 stdout, 2 stderr
    std::string text;
  };
  explicit LogEngine(const fs::path& dir)
      : engine_(SocketIn(dir), [this](int fd, const FakeDockerEngine::Request& r) { Answer(fd, r); },
                /*max_connections=*/50) {}
  const std::string& path() const { return engine_.path(); }
  void Add(Line line) {
    std::lock_guard lock(mu_);
    lines_.push_back(std::move(line));
  }
  std::vector<std::string> targets() {
    std::lock_guard lock(mu_);
    return targets_;
  }

 private:
  // SocketIn: the engine's socket in `dir`, made if missing.
  static std::string SocketIn(const fs::path& dir) {
    fs::create_directories(dir);
    return (dir / "engine.sock").string();
  }

  void Answer(int fd, const FakeDockerEngine::Request& request) {
    const std::string target = request.Target();
    std::string body;
    if (target == "/version") {
      body = R"({"Version":"fake","ApiVersion":"1.43","MinAPIVersion":"1.12"})";
    } else {
      std::lock_guard lock(mu_);
      targets_.push_back(target);
      double since = 0;
      if (const size_t at = target.find("since="); at != std::string::npos) since = std::stod(target.substr(at + 6));
      for (const Line& l : lines_) {
        if (l.seconds < since) continue;
        const std::string payload = l.time + " " + l.text + "\n";
        const uint32_t n = static_cast<uint32_t>(payload.size());
        body += std::string{static_cast<char>(l.stream), 0, 0, 0, static_cast<char>(n >> 24),
                            static_cast<char>((n >> 16) & 255), static_cast<char>((n >> 8) & 255),
                            static_cast<char>(n & 255)};
        body += payload;
      }
    }
    FakeDockerEngine::Reply(fd, "200 OK", body, /*content_type=*/"");
  }

  std::mutex mu_;
  std::vector<Line> lines_;
  std::vector<std::string> targets_;
  FakeDockerEngine engine_;  // last: its thread stops before the rest goes
};

TEST_F(LogStoreTest, DockerCopiesTheEnginesLinesOnceWithTheirTimestamps) {
  LogEngine engine(root_ / "engine");
  engine.Add({"2024-05-01T10:00:00.100000000Z", 1714557600.1, 1, "first"});
  engine.Add({"2024-05-01T10:00:00.200000000Z", 1714557600.2, 2, "to stderr"});
  DockerRuntimeOptions options;
  options.socket_path = engine.path();
  options.agent_label = "log-test";
  options.log_dir = (root_ / "logs").string();
  auto runtime = MakeDockerRuntime(options);
  ASSERT_TRUE(runtime.ok()) << runtime.status().message();
  const std::string arn = "arn:aws:ecs:us-east-1:1:task/c/t9";
  ASSERT_TRUE((*runtime)->CollectLogs(arn, "web").ok());
  dir_ = LogDirectory(options.log_dir, arn, "web");
  LogPage page = Read({});
  EXPECT_THAT(Messages(page), ElementsAre("first", "to stderr"));
  ASSERT_THAT(page.events, SizeIs(2));
  EXPECT_EQ(page.events[0].timestamp_ms, 1714557600100);
  // The next copy asks from the last line copied (the engine's `since` includes it) and adds only what is new.
  engine.Add({"2024-05-01T10:00:01.000000001Z", 1714557601.000000001, 1, "later"});
  ASSERT_TRUE((*runtime)->CollectLogs(arn, "web").ok());
  EXPECT_THAT(Messages(Read({})), ElementsAre("first", "to stderr", "later"));
  const auto targets = engine.targets();
  ASSERT_THAT(targets, SizeIs(2));
  EXPECT_EQ(targets[0], "/v1.41/containers/gpupack-t9-web/logs?stdout=1&stderr=1&timestamps=1");
  EXPECT_EQ(targets[1], "/v1.41/containers/gpupack-t9-web/logs?stdout=1&stderr=1&timestamps=1&since=1714557600.200000000");
}

}  // namespace
}  // namespace gpupack::agent
