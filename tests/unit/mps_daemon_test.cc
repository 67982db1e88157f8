// MpsControlDaemon against a fake control program (a shell script written by the test that emulates
// nvidia-cuda-mps-control), and FakeMps driven by its health file.
#include "agent/mps_daemon.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/temp_dir.h"

namespace gpupack::agent {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing_support::TempDir;

// The fake control program. Every run appends its arguments and MPS directories to $T/calls.log and each
// command it reads to $T/commands.log. With -d it "starts the daemon" by creating <pipe>/control. On stdin
// commands it answers while <pipe>/control exists and says "Cannot find MPS control daemon process" (exit 1)
// when it does not. Markers steer it:
//   <pipe>/hang             a command never gets an answer (a background sleep keeps a grandchild alive too)
//   $T/exit0-cannot-find    the "cannot find" answer comes with exit status 0
//   $T/start-fails          -d fails with exit 1
//   $T/start-never-serves   -d succeeds without creating <pipe>/control
//   $T/exit-at-once         exits 3 before reading stdin
//   $T/answers/<command>    the answer to that command, verbatim
constexpr char kScript[] = R"(#!/bin/sh
T='@T@'
P="$CUDA_MPS_PIPE_DIRECTORY"
echo "args=$* pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY" >> "$T/calls.log"
if [ -f "$T/exit-at-once" ]; then exit 3; fi
if [ "$1" = "-d" ]; then
  if [ -f "$T/start-fails" ]; then echo "An instance of this daemon is already running" >&2; exit 1; fi
  if [ ! -f "$T/start-never-serves" ]; then touch "$P/control"; fi
  exit 0
fi
while IFS= read -r cmd; do
  echo "$cmd" >> "$T/commands.log"
  if [ -f "$P/hang" ]; then
    sleep 1000 &
    echo $! > "$T/grandchild.pid"
    echo $$ > "$T/child.pid"
    wait
  fi
  if [ -f "$T/exit0-cannot-find" ]; then echo "Cannot find MPS control daemon process"; exit 0; fi
  if [ ! -f "$P/control" ]; then echo "Cannot find MPS control daemon process"; exit 1; fi
  if [ -f "$T/answers/$cmd" ]; then cat "$T/answers/$cmd"; continue; fi
  case "$cmd" in
    get_default_active_thread_percentage) echo "100.0" ;;
    quit) rm -f "$P/control" ;;
    *) echo "answer:$cmd" ;;
  esac
done
exit 0
)";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Touch(const std::string& path) { std::ofstream(path) << ""; }

// Alive: the process exists and is not a zombie waiting for a reaper.
bool Alive(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (stat.empty() || close == std::string::npos || close + 2 >= stat.size()) return false;
  const char state = stat[close + 2];
  return state != 'Z' && state != 'X';
}

bool EventuallyDead(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    if (!Alive(pid)) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return false;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

class MpsControlDaemonTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string script = kScript;
    script.replace(script.find("@T@"), 3, dir_);
    program_ = dir_ + "/fake-mps-control";
    std::ofstream(program_) << script;
    chmod(program_.c_str(), 0755);
    options_.control_program = program_;
    options_.pipe_dir = dir_ + "/run/pipe";  // neither exists yet
    options_.log_dir = dir_ + "/run/log";
    // Generous for a loaded machine (each probe runs a shell); the hung cases wait this long.
    options_.probe_timeout = milliseconds(1000);
    options_.start_timeout = milliseconds(5000);
  }

  std::unique_ptr<MpsSupervisor> Make() { return MakeMpsControlDaemon(options_); }
  std::string Calls() const { return ReadFile(dir_ + "/calls.log"); }
  std::string Commands() const { return ReadFile(dir_ + "/commands.log"); }
  bool DaemonUp() const { return fs::exists(options_.pipe_dir + "/control"); }
  void BringUp() const {
    fs::create_directories(options_.pipe_dir);
    Touch(options_.pipe_dir + "/control");
  }
  void TakeDown() const { fs::remove(options_.pipe_dir + "/control"); }

  TempDir temp_{"gpupack-mps"};  // removed with everything in it after each test
  const std::string dir_ = temp_.path();
  std::string program_;
  MpsOptions options_;
};

TEST_F(MpsControlDaemonTest, StartsTheDaemonWhenNoneAnswers) {
  auto mps = Make();
  Status s = mps->Start();
  ASSERT_TRUE(s.ok()) << s.message();
  // A probe first (no daemon: not serving), then `-d`, then probes until one answers.
  EXPECT_EQ(Count(Calls(), "args=-d "), 1) << Calls();
  EXPECT_TRUE(DaemonUp());
  EXPECT_EQ(mps->Probe(), MpsHealth::kServing);
  EXPECT_EQ(mps->consecutive_failures(), 0);
}

TEST_F(MpsControlDaemonTest, AdoptsADaemonThatAlreadyAnswers) {
  BringUp();
  auto mps = Make();
  Status s = mps->Start();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Count(Calls(), "args=-d "), 0) << Calls();  // nothing started
  EXPECT_EQ(Commands(), "get_default_active_thread_percentage\n");
  // An adopted daemon is quit on Stop like a started one.
  ASSERT_TRUE(mps->Stop().ok());
  EXPECT_EQ(Count(Commands(), "quit\n"), 1);
  EXPECT_FALSE(DaemonUp());
}

TEST_F(MpsControlDaemonTest, PassesItsOwnDirectoriesOverTheAgentsEnvironment) {
  setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps", 1);  // what the agent inherited must not leak through
  setenv("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps", 1);
  auto mps = Make();
  Status s = mps->Start();
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  unsetenv("CUDA_MPS_LOG_DIRECTORY");
  ASSERT_TRUE(s.ok()) << s.message();
  const std::string want = " pipe=" + options_.pipe_dir + " log=" + options_.log_dir + "\n";
  std::istringstream calls(Calls());
  int lines = 0;
  for (std::string line; std::getline(calls, line); ++lines) {
    EXPECT_NE((line + "\n").find(want), std::string::npos) << line;
  }
  EXPECT_GE(lines, 3);  // probe, -d, probe
}

// The directories are created 0755 whatever the umask, but for the pipe directory, which is 1777: the daemon starts
// each MPS server as the uid of its client (a task's, never root), and that server must reach the daemon's socket
// and make its own pipes there.
TEST_F(MpsControlDaemonTest, CreatesItsDirectories0755WhateverTheUmaskAndThePipeDirectory1777) {
  const mode_t old = umask(077);
  auto mps = Make();
  Status s = mps->Start();
  umask(old);
  ASSERT_TRUE(s.ok()) << s.message();
  for (const std::string& d : {dir_ + "/run", options_.pipe_dir, options_.log_dir}) {
    struct stat st {};
    ASSERT_EQ(stat(d.c_str(), &st), 0) << d;
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, d == options_.pipe_dir ? 01777u : 0755u) << d;
  }
}

// A pipe directory made owner-only before (by an older agent, or by hand) is opened too, and a task's uid then makes
// an entry in it but cannot remove the daemon's (the sticky bit). Needs root, to be that uid.
TEST_F(MpsControlDaemonTest, ATaskUidMakesItsPipesInThePipeDirectoryButCannotRemoveTheDaemons) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to act as a task's uid";
  fs::create_directories(options_.pipe_dir);
  chmod(dir_.c_str(), 0755);
  chmod((dir_ + "/run").c_str(), 0755);
  chmod(options_.pipe_dir.c_str(), 0700);
  auto mps = Make();
  Status s = mps->Start();
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(DaemonUp());  // <pipe_dir>/control, root's, standing for the daemon's socket
  const std::string mine = options_.pipe_dir + "/server-pipe";
  const std::string daemons = options_.pipe_dir + "/control";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // as the task: 1 when it cannot make its entry, 2 when it removed the daemon's
    if (setgroups(0, nullptr) != 0 || setresgid(200000, 200000, 200000) != 0 || setresuid(200000, 200000, 200000) != 0)
      _exit(3);
    const int fd = open(mine.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd < 0) _exit(1);
    close(fd);
    _exit(unlink(daemons.c_str()) == 0 ? 2 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the task's uid could not make its entry; 2: it removed the daemon's";
  EXPECT_TRUE(fs::exists(mine));
  EXPECT_TRUE(DaemonUp());
}

TEST_F(MpsControlDaemonTest, ProbeTellsServingNotServingAndHungApart) {
  auto mps = Make();
  ASSERT_TRUE(mps->Start().ok());
  EXPECT_EQ(mps->Probe(), MpsHealth::kServing);
  TakeDown();  // "Cannot find MPS control daemon process", exit 1
  EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);
  BringUp();
  Touch(dir_ + "/exit0-cannot-find");  // the same answer with exit status 0 is still not serving
  EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);
  fs::remove(dir_ + "/exit0-cannot-find");
  EXPECT_EQ(mps->Probe(), MpsHealth::kServing);
  Touch(options_.pipe_dir + "/hang");
  EXPECT_EQ(mps->Probe(), MpsHealth::kHung);
  fs::remove(options_.pipe_dir + "/hang");
  EXPECT_EQ(mps->Probe(), MpsHealth::kServing);
}

TEST_F(MpsControlDaemonTest, HungProbeIsBoundedAndKillsTheProgramsProcessGroup) {
  auto mps = Make();
  ASSERT_TRUE(mps->Start().ok());
  Touch(options_.pipe_dir + "/hang");
  const auto start = Clock::now();
  EXPECT_EQ(mps->Probe(), MpsHealth::kHung);
  const auto took = Clock::now() - start;
  EXPECT_GE(took, milliseconds(1000));  // it waited for the timeout...
  EXPECT_LT(took, milliseconds(5000));  // ...and not for the grandchild's 1000 s sleep
  const pid_t child = std::stoi(ReadFile(dir_ + "/child.pid"));
  const pid_t grandchild = std::stoi(ReadFile(dir_ + "/grandchild.pid"));
  EXPECT_TRUE(EventuallyDead(child));
  EXPECT_TRUE(EventuallyDead(grandchild));  // killed with its process group
}

TEST_F(MpsControlDaemonTest, ImpairedAfterThreeFailuresInARowAndRecovery) {
  auto mps = Make();
  ASSERT_TRUE(mps->Start().ok());
  TakeDown();
  EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);
  EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);
  EXPECT_FALSE(mps->impaired());  // 2 of 3
  BringUp();
  Touch(options_.pipe_dir + "/hang");
  EXPECT_EQ(mps->Probe(), MpsHealth::kHung);  // hung counts as a failure too
  EXPECT_TRUE(mps->impaired());
  EXPECT_EQ(mps->consecutive_failures(), 3);
  fs::remove(options_.pipe_dir + "/hang");
  EXPECT_EQ(mps->Probe(), MpsHealth::kServing);  // recovery resets the count
  EXPECT_FALSE(mps->impaired());
  EXPECT_EQ(mps->consecutive_failures(), 0);
  TakeDown();
  EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);
  EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);
  EXPECT_FALSE(mps->impaired());  // not three in a row since the recovery
  EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);
  EXPECT_TRUE(mps->impaired());
}

TEST_F(MpsControlDaemonTest, StopSendsQuit) {
  auto mps = Make();
  ASSERT_TRUE(mps->Start().ok());
  ASSERT_TRUE(DaemonUp());
  Status s = mps->Stop();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Count(Commands(), "quit\n"), 1);
  EXPECT_FALSE(DaemonUp());
  EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);
  // A second Stop has nothing to quit.
  ASSERT_TRUE(mps->Stop().ok());
  EXPECT_EQ(Count(Commands(), "quit\n"), 1);
}

TEST_F(MpsControlDaemonTest, StopWithoutStartRunsNothing) {
  auto mps = Make();
  ASSERT_TRUE(mps->Stop().ok());
  EXPECT_EQ(Calls(), "");
}

TEST_F(MpsControlDaemonTest, StopOfADaemonThatIsAlreadyGoneIsOk) {
  auto mps = Make();
  ASSERT_TRUE(mps->Start().ok());
  TakeDown();
  EXPECT_TRUE(mps->Stop().ok());
}

TEST_F(MpsControlDaemonTest, StopOfAHungDaemonIsBoundedError) {
  auto mps = Make();
  ASSERT_TRUE(mps->Start().ok());
  Touch(options_.pipe_dir + "/hang");
  const auto start = Clock::now();
  Status s = mps->Stop();
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("quit"), std::string::npos) << s.message();
}

TEST_F(MpsControlDaemonTest, SendReturnsTheAnswer) {
  auto mps = Make();
  ASSERT_TRUE(mps->Start().ok());
  auto out = mps->Send("get_server_list");
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(*out, "answer:get_server_list\n");
  auto pct = mps->Send("get_default_active_thread_percentage");
  ASSERT_TRUE(pct.ok());
  EXPECT_EQ(*pct, "100.0\n");
}

TEST_F(MpsControlDaemonTest, SendFailsClearlyWhenTheDaemonDoesNotAnswer) {
  auto mps = Make();
  ASSERT_TRUE(mps->Start().ok());
  TakeDown();
  auto out = mps->Send("ps");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message().find("MPS control daemon is not responding"), 0u) << out.status().message();
  EXPECT_NE(out.status().message().find("Cannot find MPS control daemon process"), std::string::npos);
  EXPECT_EQ(out.failure(), MpsFailure::kNoDaemon);  // what callers branch on, not the words above
  BringUp();
  Touch(options_.pipe_dir + "/hang");
  out = mps->Send("ps");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("within 1000 ms"), std::string::npos) << out.status().message();
  EXPECT_EQ(out.failure(), MpsFailure::kNoAnswer);
  // Sending does not count toward impaired: only probes do.
  EXPECT_EQ(mps->consecutive_failures(), 0);
}

TEST_F(MpsControlDaemonTest, SendTakesOneLine) {
  auto mps = Make();
  EXPECT_EQ(mps->Send("quit\nset_default_active_thread_percentage 1").status().code(),
            ErrorCode::kInvalidParameter);
  EXPECT_EQ(mps->Send("").status().code(), ErrorCode::kInvalidParameter);
  EXPECT_EQ(mps->Send("").failure(), MpsFailure::kBadCommand);
}

TEST_F(MpsControlDaemonTest, AProgramThatStopsReadingDoesNotKillTheAgentWithSigpipe) {
  auto mps = Make();
  ASSERT_TRUE(mps->Start().ok());
  Touch(dir_ + "/exit-at-once");
  // 1 MiB does not fit the pipe: the write fails with EPIPE once the program has exited (no SIGPIPE death).
  auto out = mps->Send(std::string(1 << 20, 'x'));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("exit 3"), std::string::npos) << out.status().message();
  EXPECT_EQ(out.failure(), MpsFailure::kFailed);  // it ran, and said nothing about a missing daemon
}

int OpenDescriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST_F(MpsControlDaemonTest, LeavesNoDescriptorsOpen) {
  const int before = OpenDescriptors();
  {
    auto mps = Make();
    ASSERT_TRUE(mps->Start().ok());
    EXPECT_EQ(mps->Probe(), MpsHealth::kServing);
    TakeDown();
    EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);
    BringUp();
    Touch(options_.pipe_dir + "/hang");
    EXPECT_EQ(mps->Probe(), MpsHealth::kHung);
    fs::remove(options_.pipe_dir + "/hang");
    EXPECT_TRUE(mps->Send("ps").ok());
    EXPECT_TRUE(mps->Stop().ok());
  }
  EXPECT_EQ(OpenDescriptors(), before);
}

TEST_F(MpsControlDaemonTest, StartFailsWhenTheDaemonNeverAnswers) {
  Touch(dir_ + "/start-never-serves");
  options_.start_timeout = milliseconds(500);
  auto mps = Make();
  const auto start = Clock::now();
  Status s = mps->Start();
  const auto took = Clock::now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("did not answer within 500 ms (last probe: not serving)"), std::string::npos)
      << s.message();
  EXPECT_GE(took, milliseconds(500));
  EXPECT_LT(took, milliseconds(500) + 2 * options_.probe_timeout + milliseconds(2000));
  EXPECT_EQ(mps->consecutive_failures(), 0);  // Start's own probes do not count
  // It did start one: Stop still sends quit.
  EXPECT_TRUE(mps->Stop().ok());
  EXPECT_EQ(Count(Commands(), "quit\n"), 1);
}

TEST_F(MpsControlDaemonTest, StartReportsAFailingControlProgram) {
  Touch(dir_ + "/start-fails");
  auto mps = Make();
  Status s = mps->Start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("-d failed (exit 1): An instance of this daemon is already running"),
            std::string::npos)
      << s.message();
}

TEST_F(MpsControlDaemonTest, StartDoesNotStartASecondDaemonOverAHungOne) {
  BringUp();
  Touch(options_.pipe_dir + "/hang");
  auto mps = Make();
  Status s = mps->Start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("hung"), std::string::npos) << s.message();
  EXPECT_EQ(Count(Calls(), "args=-d "), 0);
}

TEST_F(MpsControlDaemonTest, MissingControlProgram) {
  options_.control_program = dir_ + "/no-such-program";
  auto mps = Make();
  Status s = mps->Start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no-such-program"), std::string::npos) << s.message();
  EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);
  EXPECT_FALSE(mps->Send("ps").ok());
  EXPECT_EQ(mps->Send("ps").failure(), MpsFailure::kCannotRun);
}

TEST_F(MpsControlDaemonTest, RefusesTheDefaultPipeDirectory) {
  for (const char* dir : {"/tmp/nvidia-mps", "/tmp/nvidia-mps/", ""}) {
    options_.pipe_dir = dir;
    Status s = Make()->Start();
    ASSERT_FALSE(s.ok()) << dir;
    EXPECT_EQ(s.code(), ErrorCode::kInvalidParameter);
  }
  EXPECT_EQ(Calls(), "");  // never ran the program
  options_.pipe_dir = dir_ + "/" + std::string(100, 'p');
  Status s = Make()->Start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("longer than 80"), std::string::npos) << s.message();
}

TEST(MpsHealthTest, Names) {
  EXPECT_STREQ(MpsHealthName(MpsHealth::kServing), "serving");
  EXPECT_STREQ(MpsHealthName(MpsHealth::kNotServing), "not serving");
  EXPECT_STREQ(MpsHealthName(MpsHealth::kHung), "hung");
}

// ---- FakeMps ----------------------------------------------------------------------------------------------

class FakeMpsTest : public testing::Test {
 protected:
  void SetUp() override {
    options_.pipe_dir = dir_ + "/pipe";
    options_.log_dir = dir_ + "/log";
    options_.probe_timeout = milliseconds(200);
  }
  void SetHealth(const std::string& word) const {
    std::ofstream(options_.pipe_dir + "/" + kFakeMpsHealthFile) << word << "\n";
  }

  TempDir temp_{"gpupack-fakemps"};  // removed with everything in it after each test
  const std::string dir_ = temp_.path();
  MpsOptions options_;
};

TEST_F(FakeMpsTest, ServingWithoutAHealthFile) {
  auto mps = MakeFakeMps(options_);
  ASSERT_TRUE(mps->Start().ok());
  EXPECT_TRUE(fs::is_directory(options_.pipe_dir));
  EXPECT_TRUE(fs::is_directory(options_.log_dir));
  EXPECT_EQ(mps->Probe(), MpsHealth::kServing);
  auto out = mps->Send("get_default_active_thread_percentage");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "100.0\n");
}

TEST_F(FakeMpsTest, HealthFileTellsServingNotServingAndHungApart) {
  auto mps = MakeFakeMps(options_);
  ASSERT_TRUE(mps->Start().ok());
  SetHealth("down");
  EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);
  EXPECT_FALSE(mps->Send("ps").ok());
  EXPECT_EQ(mps->Send("ps").failure(), MpsFailure::kNoDaemon);
  SetHealth("serving");
  EXPECT_EQ(mps->Probe(), MpsHealth::kServing);
  SetHealth("hung");
  const auto start = Clock::now();
  EXPECT_EQ(mps->Probe(), MpsHealth::kHung);
  const auto took = Clock::now() - start;
  EXPECT_GE(took, milliseconds(200));  // as long as the probe timeout, not 3 s
  EXPECT_LT(took, milliseconds(2000));
  SetHealth("garbage");
  EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);  // unknown words fail safe
  fs::remove(options_.pipe_dir + "/" + kFakeMpsHealthFile);
  EXPECT_EQ(mps->Probe(), MpsHealth::kServing);
}

TEST_F(FakeMpsTest, ImpairedAfterThreeFailuresAndRecovery) {
  auto mps = MakeFakeMps(options_);
  ASSERT_TRUE(mps->Start().ok());
  SetHealth("down");
  mps->Probe();
  mps->Probe();
  EXPECT_FALSE(mps->impaired());
  mps->Probe();
  EXPECT_TRUE(mps->impaired());
  SetHealth("serving");
  EXPECT_EQ(mps->Probe(), MpsHealth::kServing);
  EXPECT_FALSE(mps->impaired());
  EXPECT_EQ(mps->consecutive_failures(), 0);
}

TEST_F(FakeMpsTest, StartFailsWhileDownAndStopQuits) {
  fs::create_directories(options_.pipe_dir);
  SetHealth("down");
  auto mps = MakeFakeMps(options_);
  Status s = mps->Start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not serving"), std::string::npos) << s.message();
  SetHealth("serving");
  ASSERT_TRUE(mps->Start().ok());
  ASSERT_TRUE(mps->Stop().ok());
  EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);  // stopped: nothing serves until the next Start
  ASSERT_TRUE(mps->Start().ok());
  EXPECT_EQ(mps->Probe(), MpsHealth::kServing);
}

TEST_F(FakeMpsTest, RefusesTheDefaultPipeDirectory) {
  options_.pipe_dir = "/tmp/nvidia-mps";
  EXPECT_EQ(MakeFakeMps(options_)->Start().code(), ErrorCode::kInvalidParameter);
}

// ---- Parsing the control daemon's answers -----------------------------------------------------------------
// The real answers below are what nvidia-cuda-mps-control printed on an H200 (driver 580) with two clients.

constexpr char kRealPs[] =
    "PID       ID        SERVER         DEVICE                    NAMESPACE      COMMAND\n"
    "445       1         484            GPU-33a20bea-234b-1d40    4026531836     python3\n"
    "446       2         484            GPU-33a20bea-234b-1d40    4026531836     python3\n";
constexpr char kRealUuid[] = "GPU-33a20bea-234b-1d40-9972-0f3a2161ddaf";

TEST(ParseMpsServerListTest, RealAnswer) { EXPECT_EQ(ParseMpsServerList("484\n"), std::vector<int>{484}); }

TEST(ParseMpsServerListTest, SeveralServersWithAndWithoutTrailingNewlineOrCarriageReturns) {
  EXPECT_EQ(ParseMpsServerList("484\n512\n"), (std::vector<int>{484, 512}));
  EXPECT_EQ(ParseMpsServerList("484\n512"), (std::vector<int>{484, 512}));
  EXPECT_EQ(ParseMpsServerList("  484 \r\n\r\n512\r\n"), (std::vector<int>{484, 512}));
}

TEST(ParseMpsServerListTest, MalformedLinesAreSkipped) {
  EXPECT_TRUE(ParseMpsServerList("").empty());
  EXPECT_TRUE(ParseMpsServerList("\n\n").empty());
  EXPECT_TRUE(ParseMpsServerList("Cannot find MPS control daemon process\n").empty());
  EXPECT_TRUE(ParseMpsServerList("abc\n").empty());
  EXPECT_TRUE(ParseMpsServerList("-484\n").empty());
  EXPECT_TRUE(ParseMpsServerList("0\n").empty());
  EXPECT_TRUE(ParseMpsServerList("484x\n").empty());
  EXPECT_TRUE(ParseMpsServerList("484 512\n").empty());  // two words is not one pid
  EXPECT_TRUE(ParseMpsServerList("99999999999999999999\n").empty());  // would overflow an int
  EXPECT_TRUE(ParseMpsServerList("2147483648\n").empty());
  // Garbage around a good line does not hide it.
  EXPECT_EQ(ParseMpsServerList("junk\n484\n-1\n"), std::vector<int>{484});
}

TEST(ParseMpsPsTest, RealAnswer) {
  auto rows = ParseMpsPs(kRealPs);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].pid, 445);
  EXPECT_EQ(rows[0].server_pid, 484);
  EXPECT_EQ(rows[0].device, "GPU-33a20bea-234b-1d40");
  EXPECT_EQ(rows[1].pid, 446);
  EXPECT_EQ(rows[1].server_pid, 484);
  EXPECT_EQ(rows[1].device, "GPU-33a20bea-234b-1d40");
}

TEST(ParseMpsPsTest, CommandWithSpacesAndTabsAndCarriageReturns) {
  auto rows = ParseMpsPs("PID ID SERVER DEVICE NAMESPACE COMMAND\r\n"
                         "7\t3\t9\tGPU-aaaaaaaa-bbbb-cccc\t1\tpython3 train.py --x\r\n");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].pid, 7);
  EXPECT_EQ(rows[0].server_pid, 9);
  EXPECT_EQ(rows[0].device, "GPU-aaaaaaaa-bbbb-cccc");
}

TEST(ParseMpsPsTest, MalformedInputGivesNoRows) {
  EXPECT_TRUE(ParseMpsPs("").empty());
  EXPECT_TRUE(ParseMpsPs("\n").empty());
  EXPECT_TRUE(ParseMpsPs(std::string(kRealPs).substr(0, std::string(kRealPs).find('\n') + 1)).empty());  // header only
  EXPECT_TRUE(ParseMpsPs("Cannot find MPS control daemon process\n").empty());
  EXPECT_TRUE(ParseMpsPs("\x01\x02 garbage \xff\xfe\n").empty());
  EXPECT_TRUE(ParseMpsPs("445       1         484\n").empty());      // truncated: no DEVICE
  EXPECT_TRUE(ParseMpsPs("445\n").empty());
  EXPECT_TRUE(ParseMpsPs("-445 1 484 GPU-33a20bea-234b-1d40 1 python3\n").empty());  // negative pid
  EXPECT_TRUE(ParseMpsPs("445 1 -484 GPU-33a20bea-234b-1d40 1 python3\n").empty());  // negative server
  EXPECT_TRUE(ParseMpsPs("0 1 484 GPU-33a20bea-234b-1d40 1 python3\n").empty());
  EXPECT_TRUE(ParseMpsPs("99999999999999999999 1 484 GPU-33a20bea-234b-1d40 1 python3\n").empty());  // huge
  EXPECT_TRUE(ParseMpsPs("445 1 99999999999999999999 GPU-33a20bea-234b-1d40 1 python3\n").empty());
  EXPECT_TRUE(ParseMpsPs("445 x 484 GPU-33a20bea-234b-1d40 1 python3\n").empty());
}

TEST(ParseMpsPsTest, GoodRowsSurviveBadNeighbours) {
  std::string text = std::string("garbage\n445 1\n") + kRealPs + "-1 2 3 GPU-x 1 y\n";
  auto rows = ParseMpsPs(text);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].pid, 445);
  EXPECT_EQ(rows[1].pid, 446);
  // A truncated last row (the answer cut mid-line) is skipped, the full rows before it kept.
  std::string cut = std::string(kRealPs).substr(0, std::string(kRealPs).rfind("484"));
  rows = ParseMpsPs(cut);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].pid, 445);
}

TEST(MpsDeviceMatchesTest, TheCutUuidOfTheRealAnswerNamesTheGpu) {
  EXPECT_TRUE(MpsDeviceMatches("GPU-33a20bea-234b-1d40", kRealUuid));
  EXPECT_TRUE(MpsDeviceMatches(kRealUuid, kRealUuid));  // a daemon that prints the whole UUID
  for (const auto& row : ParseMpsPs(kRealPs)) EXPECT_TRUE(MpsDeviceMatches(row.device, kRealUuid));
}

TEST(MpsDeviceMatchesTest, OtherGpusAndShortOrEmptyCellsDoNotMatch) {
  EXPECT_FALSE(MpsDeviceMatches("GPU-33a20bea-234b-1d40", "GPU-33a20bea-234b-1d41-9972-0f3a2161ddaf"));
  EXPECT_FALSE(MpsDeviceMatches("GPU-33a20bea-234b-1d40", "GPU-fakeffff-ffff-ffff-0000-000000000000"));
  EXPECT_FALSE(MpsDeviceMatches("", kRealUuid));
  EXPECT_FALSE(MpsDeviceMatches("GPU-", kRealUuid));      // too short to name one GPU
  EXPECT_FALSE(MpsDeviceMatches("GPU-33a20be", kRealUuid));  // 11 characters
  EXPECT_TRUE(MpsDeviceMatches("GPU-33a20bea", kRealUuid));  // 12
  EXPECT_FALSE(MpsDeviceMatches(kRealUuid, "GPU-33a20bea-234b-1d40"));  // the cell is longer than the UUID
  EXPECT_FALSE(MpsDeviceMatches("GPU-33a20bea-234b-1d40", ""));
  EXPECT_FALSE(MpsDeviceMatches("33a20bea-234b-1d40-99", kRealUuid));  // not a prefix
}

// The daemon's answers as Send returns them (with their trailing newlines) feed the parsers: a FAULT server
// found through get_server_list, get_server_status and ps names the real GPU.
TEST_F(MpsControlDaemonTest, SentAnswersFeedTheParsers) {
  fs::create_directories(dir_ + "/answers");
  std::ofstream(dir_ + "/answers/get_server_list") << "484\n";
  std::ofstream(dir_ + "/answers/get_server_status 484") << "FAULT\n";
  std::ofstream(dir_ + "/answers/get_server_status 512") << "ACTIVE\n";
  std::ofstream(dir_ + "/answers/ps") << kRealPs;
  auto mps = Make();
  ASSERT_TRUE(mps->Start().ok());
  auto list = mps->Send("get_server_list");
  ASSERT_TRUE(list.ok()) << list.status().message();
  EXPECT_EQ(ParseMpsServerList(*list), std::vector<int>{484});
  auto faulted = mps->Send("get_server_status 484");
  ASSERT_TRUE(faulted.ok()) << faulted.status().message();
  EXPECT_EQ(*faulted, "FAULT\n");
  EXPECT_TRUE(MpsServerFaulted(*faulted));
  auto active = mps->Send("get_server_status 512");
  ASSERT_TRUE(active.ok());
  EXPECT_FALSE(MpsServerFaulted(*active));
  auto ps = mps->Send("ps");
  ASSERT_TRUE(ps.ok());
  auto rows = ParseMpsPs(*ps);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].server_pid, 484);
  EXPECT_TRUE(MpsDeviceMatches(rows[0].device, kRealUuid));
}

TEST(MpsServerFaultedTest, ActiveIsNotFaultAndFaultIs) {
  EXPECT_FALSE(MpsServerFaulted("ACTIVE\n"));  // the real answer
  EXPECT_FALSE(MpsServerFaulted("INIT\n"));
  EXPECT_TRUE(MpsServerFaulted("FAULT\n"));
  EXPECT_TRUE(MpsServerFaulted("FAULT"));
  EXPECT_TRUE(MpsServerFaulted("  FAULT \r\n"));
}

TEST(MpsServerFaultedTest, MalformedAnswersAreNotFault) {
  EXPECT_FALSE(MpsServerFaulted(""));
  EXPECT_FALSE(MpsServerFaulted("\n"));
  EXPECT_FALSE(MpsServerFaulted("FAULTY\n"));
  EXPECT_FALSE(MpsServerFaulted("Cannot find MPS control daemon process\n"));
  EXPECT_FALSE(MpsServerFaulted("Server 484 not found\n"));
}

}  // namespace
}  // namespace gpupack::agent
