// The process runtime against real processes: /bin/sh, /usr/bin/env and /bin/sleep in a temporary directory.
//
// Waits are bounded by generous deadlines and only ever end early: no test fails because the machine is slow.
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/proc_tree.h"
#include "agent/runtime.h"
#include "agent/task_uids.h"
#include "tests/unit/temp_dir.h"

namespace gpupack::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAreArray;
using testing_support::TempDir;

constexpr auto kDeadline = std::chrono::seconds(30);

// ReadText: a file's text; for a container's log directory (agent/log_store.h) its events' messages, a line each.
std::string ReadText(const fs::path& path) {
  if (fs::is_directory(path)) {
    std::string text;
    auto page = ReadLogPage(path.string(), LogQuery{});
    if (page.ok())
      for (const LogEvent& e : page->events) text += e.message + "\n";
    return text;
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ProcState is the state letter of /proc/<pid>/stat, or 0 when there is no such process.
char ProcState(pid_t pid) {
  std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
  auto paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? 0 : stat[paren + 2];
}

// ZombieChildren lists this process's children that nobody reaped.
std::vector<pid_t> ZombieChildren() {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (!std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::string stat = ReadText(entry.path() / "stat");
    auto paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 2));
    char state = 0;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid == getpid() && state == 'Z') out.push_back(std::stoi(name));
  }
  return out;
}

class ProcessRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.state_dir = (root_ / "state").string();
    options_.log_dir = (root_ / "logs").string();
    runtime_ = NewRuntime();
  }

  void TearDown() override {
    // Nothing a test started outlives it (temp_ then removes what it wrote).
    if (auto runtime = MakeProcessRuntime(options_); runtime.ok()) {
      if (auto list = (*runtime)->List(); list.ok()) {
        for (const RuntimeContainer& c : *list) (void)(*runtime)->Stop(c.id, milliseconds(0));
      }
    }
  }

  std::unique_ptr<Runtime> NewRuntime() {
    auto runtime = MakeProcessRuntime(options_);
    EXPECT_TRUE(runtime.ok()) << runtime.status().message();
    return runtime.ok() ? std::move(*runtime) : nullptr;
  }

  static ContainerSpec Spec(const std::string& task_id, const std::string& name, std::vector<std::string> argv,
                            std::vector<KeyValuePair> env = {}) {
    ContainerSpec spec;
    spec.task_arn = "arn:aws:ecs:us-east-1:123456789012:task/default/" + task_id;
    spec.container_name = name;
    spec.entry_point = {argv.front()};
    spec.command.assign(argv.begin() + 1, argv.end());
    spec.environment = std::move(env);
    return spec;
  }

  static ContainerSpec Shell(const std::string& task_id, const std::string& name, const std::string& script,
                             std::vector<KeyValuePair> env = {}) {
    return Spec(task_id, name, {"/bin/sh", "-c", script}, std::move(env));
  }

  std::string StartOk(const ContainerSpec& spec) {
    auto id = runtime_->Start(spec);
    EXPECT_TRUE(id.ok()) << id.status().message();
    return id.ok() ? *id : std::string();
  }

  static ContainerStatus WaitExited(Runtime& runtime, const std::string& id) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (true) {
      auto status = runtime.Inspect(id);
      EXPECT_TRUE(status.ok()) << status.status().message();
      if (!status.ok() || status->state != ContainerState::kRunning ||
          std::chrono::steady_clock::now() > deadline) {
        return status.ok() ? *status : ContainerStatus{};
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
  }

  // WaitForFile waits until `path` exists and contains `text`.
  static bool WaitForText(const fs::path& path, const std::string& text) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (std::chrono::steady_clock::now() < deadline) {
      if (ReadText(path).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }

  // LogOf: the container's log stream (its output a line per event; read with ReadText).
  fs::path LogOf(const std::string& task_id, const std::string& name) const {
    return root_ / "logs" / task_id / name;
  }

  TempDir temp_{"gpupack-process-runtime"};
  fs::path root_ = temp_.path();
  ProcessRuntimeOptions options_;
  std::unique_ptr<Runtime> runtime_;
};

TEST_F(ProcessRuntimeTest, EnvironmentIsExactlyTheSpecNothingInherited) {
  ASSERT_EQ(setenv("GPUPACK_AGENT_ONLY", "must-not-leak", 1), 0);
  // /usr/bin/env prints its environment to stdout, which is the container's log file.
  ContainerSpec spec = Spec("t-env", "app", {"/usr/bin/env"},
                            {{"CUDA_MPS_PIPE_DIRECTORY", "/run/gpupack/mps/pipe"},
                             {"WITH_SPACES", "a b  c"},
                             {"WITH_EQUALS", "x=y=z"},
                             {"EMPTY", ""},
                             {"OVERRIDDEN", "first"},
                             {"OVERRIDDEN", "second"}});  // a later duplicate wins, at the first position
  std::string id = StartOk(spec);
  ContainerStatus status = WaitExited(*runtime_, id);
  EXPECT_EQ(status.state, ContainerState::kExited);
  EXPECT_EQ(status.exit_code, 0);
  std::vector<std::string> lines;
  std::istringstream log(ReadText(LogOf("t-env", "app")));
  for (std::string line; std::getline(log, line);) lines.push_back(line);
  EXPECT_THAT(lines, UnorderedElementsAreArray({"CUDA_MPS_PIPE_DIRECTORY=/run/gpupack/mps/pipe",
                                                "WITH_SPACES=a b  c", "WITH_EQUALS=x=y=z", "EMPTY=",
                                                "OVERRIDDEN=second"}));
  unsetenv("GPUPACK_AGENT_ONLY");
}

// Issue 29: a root agent ran every process task as root with every capability: the task read other tasks' logs
// and wrote the agent's state files. With a task user the workload runs as that user, with no capability, no
// supplementary group and no_new_privs, and the runtime's state and log directories are the agent's alone.
// Needs root (CI runs as root), to change to another user.
TEST_F(ProcessRuntimeTest, ATaskRunsAsTheTaskUserWithoutCapabilitiesAndCannotReadTheAgentsState) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run a task as another user";
  fs::permissions(root_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                             fs::perms::others_read | fs::perms::others_exec);
  options_.task_user = "nobody";
  runtime_ = NewRuntime();
  ASSERT_NE(runtime_, nullptr);
  // A neighbour whose state record and log the task will try to read.
  const std::string neighbour = StartOk(Shell("neighbour", "app", "echo secret-of-the-neighbour"));
  EXPECT_EQ(WaitExited(*runtime_, neighbour).exit_code, 0);
  const fs::path state = fs::path(options_.state_dir) / (neighbour + ".json");
  ASSERT_TRUE(fs::exists(state));
  const std::string script =
      "echo uid=$(id -u) gid=$(id -g) groups=$(id -G); grep -E '^(CapPrm|CapEff|CapBnd|NoNewPrivs)' /proc/self/status;"
      "cat " + state.string() + " >/dev/null 2>&1 && echo READ-STATE; "
      "cat " + (LogOf("neighbour", "app") / "*").string() + " >/dev/null 2>&1 && echo READ-LOG; "
      "echo x > " + options_.state_dir + "/planted.json 2>/dev/null && echo WROTE-STATE; "
      "ls " + options_.log_dir + " >/dev/null 2>&1 && echo LISTED-LOGS; true";
  const std::string id = StartOk(Shell("prober", "app", script, {{"PATH", "/usr/bin:/bin"}}));
  EXPECT_EQ(WaitExited(*runtime_, id).exit_code, 0);
  const std::string out = ReadText(LogOf("prober", "app"));
  const struct passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  EXPECT_NE(out.find("uid=" + std::to_string(nobody->pw_uid) + " gid=" + std::to_string(nobody->pw_gid) +
                     " groups=" + std::to_string(nobody->pw_gid) + "\n"),
            std::string::npos) << out;
  EXPECT_NE(out.find("CapPrm:\t0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("CapEff:\t0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("NoNewPrivs:\t1"), std::string::npos) << out;
  for (const char* breach : {"READ-STATE", "READ-LOG", "WROTE-STATE", "LISTED-LOGS"})
    EXPECT_EQ(out.find(breach), std::string::npos) << breach << " in:\n" << out;
  EXPECT_FALSE(fs::exists(fs::path(options_.state_dir) / "planted.json"));
  // The directories are the agent's alone.
  for (const std::string& dir : {options_.state_dir, options_.log_dir})
    EXPECT_EQ(fs::status(dir).permissions() & fs::perms::all, fs::perms::owner_all) << dir;
}

// WorkloadPid: the workload's pid from a container's state file (its "pid" field), 0 when there is none.
pid_t WorkloadPid(const ProcessRuntimeOptions& options, const std::string& id) {
  const std::string state = ReadText(fs::path(options.state_dir) / (id + ".json"));
  const size_t at = state.find("\"pid\":");
  return at == std::string::npos ? 0 : std::atoi(state.c_str() + at + 6);
}

// PidsRunningAs: the live processes (not zombies) whose real uid is `uid`.
std::vector<pid_t> PidsRunningAs(int64_t uid) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (!std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const std::string status = ReadText(entry.path() / "status");
    const size_t at = status.find("\nUid:\t");
    if (at != std::string::npos && std::atoll(status.c_str() + at + 6) == uid &&
        status.find("\nState:\tZ") == std::string::npos)
      out.push_back(std::stoi(name));
  }
  return out;
}

// Uids: the numbers after each "uid=" in a task's output, in order.
std::vector<int64_t> Uids(const std::string& out) {
  std::vector<int64_t> uids;
  for (size_t at = out.find("uid="); at != std::string::npos; at = out.find("uid=", at + 1))
    uids.push_back(std::atoll(out.c_str() + at + 4));
  return uids;
}

// Process tasks all ran as the one task user, so each read the others' /proc/PID/environ (their secrets) and could
// signal them. With --task-uids every task runs as a uid of its own (gid the same, no supplementary group, no
// capability, no_new_privs): two tasks each try to read the other's environment and to signal it, and neither can,
// while each reads its own. Needs root (CI runs as root), to change to other users.
TEST_F(ProcessRuntimeTest, TasksOfARangeRunAsUidsOfTheirOwnAndNeitherReadsNorSignalsTheOther) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run tasks as other users";
  const fs::perms open = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                         fs::perms::others_read | fs::perms::others_exec;
  fs::permissions(root_, open);
  const fs::path peers = root_ / "peers";  // where the test tells each task the other's pid
  fs::create_directory(peers);
  fs::permissions(peers, open);
  options_.task_user = "nobody";
  options_.task_uids = "200000-200009";
  runtime_ = NewRuntime();
  ASSERT_NE(runtime_, nullptr);
  const auto prober = [&peers](const std::string& task) {
    const std::string peer = (peers / task).string();
    return Shell(task, "app",
                 "echo uid=$(id -u) gid=$(id -g) groups=$(id -G); grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; "
                 "while [ ! -s " + peer + " ]; do sleep 0.05; done; p=$(cat " + peer + "); "
                 "[ -d /proc/$p ] && echo PEER-SEEN; "
                 "grep -q SECRET=of-" + task + " /proc/self/environ && echo READ-OWN; "
                 "kill -0 $$ && echo SIGNALLED-OWN; cat /proc/$p/environ >/dev/null 2>&1 && echo READ-PEER; "
                 "kill -0 $p 2>/dev/null && echo SIGNALLED-PEER; echo done; exec sleep 60",
                 {{"PATH", "/usr/bin:/bin"}, {"SECRET", "of-" + task}});
  };
  const std::string a = StartOk(prober("task-a"));
  const std::string b = StartOk(prober("task-b"));
  ASSERT_NE(WorkloadPid(options_, a), 0);
  ASSERT_NE(WorkloadPid(options_, b), 0);
  std::ofstream(peers / "task-a") << WorkloadPid(options_, b) << "\n";
  std::ofstream(peers / "task-b") << WorkloadPid(options_, a) << "\n";
  ASSERT_TRUE(WaitForText(LogOf("task-a", "app"), "done")) << ReadText(LogOf("task-a", "app"));
  ASSERT_TRUE(WaitForText(LogOf("task-b", "app"), "done")) << ReadText(LogOf("task-b", "app"));
  std::vector<int64_t> uids;
  for (const char* task : {"task-a", "task-b"}) {
    const std::string out = ReadText(LogOf(task, "app"));
    const std::vector<int64_t> ids = Uids(out);
    ASSERT_FALSE(ids.empty()) << out;
    const int64_t uid = ids.front();
    EXPECT_GE(uid, 200000) << out;
    EXPECT_LE(uid, 200009) << out;
    EXPECT_NE(out.find("uid=" + std::to_string(uid) + " gid=" + std::to_string(uid) + " groups=" +
                       std::to_string(uid) + "\n"),
              std::string::npos) << out;
    EXPECT_NE(out.find("CapEff:\t0000000000000000"), std::string::npos) << out;
    EXPECT_NE(out.find("NoNewPrivs:\t1"), std::string::npos) << out;
    // The probes work: the peer is there, and its own environment the task reads and itself it signals.
    for (const char* control : {"PEER-SEEN", "READ-OWN", "SIGNALLED-OWN"})
      EXPECT_NE(out.find(control), std::string::npos) << control << " not in " << task << ":\n" << out;
    for (const char* breach : {"READ-PEER", "SIGNALLED-PEER"})
      EXPECT_EQ(out.find(breach), std::string::npos) << breach << " in " << task << ":\n" << out;
    uids.push_back(uid);
  }
  EXPECT_NE(uids[0], uids[1]);
  // The state file names the uid, for an agent started again.
  EXPECT_NE(ReadText(fs::path(options_.state_dir) / (a + ".json")).find("\"uid\":" + std::to_string(uids[0])),
            std::string::npos);
}

// A task's uid is its own until its task has ended: its containers share it, one that exited still holds it until
// it is removed (also for an agent started again, which reads it from the state file), and a start that finds no
// free uid fails, saying so, while a shared (MPS) container still starts, as the task user. Needs root.
TEST_F(ProcessRuntimeTest, AUidIsReusedOnlyAfterItsTaskEndedAndARangeRunOutFailsTheStart) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run tasks as other users";
  options_.task_user = "nobody";
  options_.task_uids = "200010-200011";
  runtime_ = NewRuntime();
  ASSERT_NE(runtime_, nullptr);
  const std::string ended = StartOk(Shell("task-a", "app", "echo uid=$(id -u)", {{"PATH", "/usr/bin:/bin"}}));
  EXPECT_EQ(WaitExited(*runtime_, ended).exit_code, 0);
  StartOk(Shell("task-b", "app", "echo uid=$(id -u); exec sleep 60", {{"PATH", "/usr/bin:/bin"}}));
  StartOk(Shell("task-b", "sidecar", "echo uid=$(id -u); exec sleep 60", {{"PATH", "/usr/bin:/bin"}}));
  ASSERT_TRUE(WaitForText(LogOf("task-b", "app"), "uid="));
  ASSERT_TRUE(WaitForText(LogOf("task-b", "sidecar"), "uid="));
  const std::vector<int64_t> a_uid = Uids(ReadText(LogOf("task-a", "app")));
  const std::vector<int64_t> b_uid = Uids(ReadText(LogOf("task-b", "app")));
  ASSERT_EQ(a_uid.size(), 1u);
  ASSERT_EQ(b_uid.size(), 1u);
  EXPECT_NE(a_uid[0], b_uid[0]);
  EXPECT_EQ(Uids(ReadText(LogOf("task-b", "sidecar"))), b_uid);  // a uid per task, not per container

  runtime_ = NewRuntime();  // the agent started again: task-a's uid is known from its state file alone
  ASSERT_NE(runtime_, nullptr);
  auto refused = runtime_->Start(Shell("task-c", "app", "echo uid=$(id -u)", {{"PATH", "/usr/bin:/bin"}}));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("no free uid in --task-uids 200010-200011"));

  ContainerSpec shared = Shell("task-m", "app", "echo uid=$(id -u)", {{"PATH", "/usr/bin:/bin"}});
  shared.mps_pipe_dir = (root_ / "mps").string();
  const std::string m = StartOk(shared);
  EXPECT_EQ(WaitExited(*runtime_, m).exit_code, 0);
  const struct passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  EXPECT_EQ(Uids(ReadText(LogOf("task-m", "app"))), std::vector<int64_t>{nobody->pw_uid});

  ASSERT_TRUE(runtime_->Remove(ended).ok());  // task-a has ended: its uid is free
  const std::string c = StartOk(Shell("task-c", "app", "echo uid=$(id -u)", {{"PATH", "/usr/bin:/bin"}}));
  EXPECT_EQ(WaitExited(*runtime_, c).exit_code, 0);
  EXPECT_EQ(Uids(ReadText(LogOf("task-c", "app"))), a_uid);
}

// A process that left its task's process group (setsid) outlives the task: its uid goes to no other task while it
// runs, or that task could be signalled and read by it. Needs root.
TEST_F(ProcessRuntimeTest, AProcessThatOutlivedItsTaskKeepsItsUidFromTheNextTask) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run tasks as other users";
  options_.task_user = "nobody";
  options_.task_uids = "200020-200020";
  runtime_ = NewRuntime();
  ASSERT_NE(runtime_, nullptr);
  const std::string escaper =
      StartOk(Shell("task-a", "app",
                    // Exits only once the sleep has a session of its own (field 6 of stat), so the monitor's kill
                    // of the task's process group cannot take it first.
                    "setsid sleep 60 </dev/null >/dev/null 2>&1 & "
                    "while [ \"$(cut -d' ' -f6 /proc/$!/stat)\" = \"$(cut -d' ' -f6 /proc/$$/stat)\" ]; do "
                    "sleep 0.01; done",
                    {{"PATH", "/usr/bin:/bin"}}));
  EXPECT_EQ(WaitExited(*runtime_, escaper).exit_code, 0);
  ASSERT_TRUE(runtime_->Remove(escaper).ok());
  std::vector<pid_t> strays;
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while ((strays = PidsRunningAs(200020)).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));
  ASSERT_FALSE(strays.empty()) << "the setsid'd sleep is not running";
  auto refused = runtime_->Start(Shell("task-b", "app", "id -u", {{"PATH", "/usr/bin:/bin"}}));
  EXPECT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("no free uid"));
  for (pid_t pid : strays) kill(pid, SIGKILL);
  const auto gone_by = std::chrono::steady_clock::now() + kDeadline;
  while (!PidsRunningAs(200020).empty() && std::chrono::steady_clock::now() < gone_by)
    std::this_thread::sleep_for(milliseconds(10));
  const std::string next = StartOk(Shell("task-b", "app", "id -u", {{"PATH", "/usr/bin:/bin"}}));
  EXPECT_EQ(WaitExited(*runtime_, next).exit_code, 0);
  EXPECT_EQ(ReadText(LogOf("task-b", "app")), "200020\n");
}

// Files a task leaves in /tmp and /dev/shm are its uid's, and passed to the next task given that uid, which read and
// changed them. Task A, on the range's one uid, leaves a file and a tree in /tmp, a file in a directory of root's
// that anyone may write (mode 1777, as a shared drop box) and a shared-memory file; once A has ended, task B, given
// the same uid, finds none of them, while the files of other owners beside them stay. Needs root.
TEST_F(ProcessRuntimeTest, WhatATaskLeftInTmpAndDevShmIsGoneBeforeItsUidGoesToTheNextTask) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run tasks as other users";
  options_.task_user = "nobody";
  options_.task_uids = "200030-200030";
  runtime_ = NewRuntime();
  ASSERT_NE(runtime_, nullptr);
  const std::string tag = "gpupack-sweep-" + std::to_string(getpid());
  const fs::path drop = fs::path("/tmp") / (tag + "-drop");
  fs::create_directory(drop);
  fs::permissions(drop, fs::perms::all | fs::perms::sticky_bit);
  std::ofstream(drop / "roots") << "root's\n";
  const fs::path others = fs::path("/tmp") / (tag + "-nobody");
  std::ofstream(others) << "nobody's\n";
  const struct passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  ASSERT_EQ(chown(others.c_str(), nobody->pw_uid, nobody->pw_gid), 0);
  const std::vector<std::string> left = {"/tmp/" + tag + "-file", "/tmp/" + tag + "-tree",
                                         (drop / "left").string(), "/dev/shm/" + tag};
  const std::string a = StartOk(Shell("task-a", "app",
                                      "echo secret > " + left[0] + " && mkdir -p " + left[1] + "/x/y && echo secret > " +
                                          left[1] + "/x/y/z && chmod -R 777 " + left[1] + " && echo secret > " +
                                          left[2] + " && echo secret > " + left[3] + " && id -u",
                                      {{"PATH", "/usr/bin:/bin"}}));
  EXPECT_EQ(WaitExited(*runtime_, a).exit_code, 0) << ReadText(LogOf("task-a", "app"));
  for (const std::string& path : left) EXPECT_TRUE(fs::exists(path)) << path << ": task A did not leave it";
  ASSERT_TRUE(runtime_->Remove(a).ok());  // task A has ended: its uid is free

  std::string probe;
  for (const std::string& path : left) probe += "[ -e " + path + " ] && echo LEFT:" + path + "; ";
  const std::string b = StartOk(Shell("task-b", "app", probe + "id -u", {{"PATH", "/usr/bin:/bin"}}));
  EXPECT_EQ(WaitExited(*runtime_, b).exit_code, 0);
  EXPECT_EQ(ReadText(LogOf("task-a", "app")), "200030\n");
  EXPECT_EQ(ReadText(LogOf("task-b", "app")), "200030\n");  // the same uid, and nothing of A's found
  for (const std::string& path : left) EXPECT_FALSE(fs::exists(path)) << path;
  EXPECT_EQ(ReadText(drop / "roots"), "root's\n");
  EXPECT_EQ(ReadText(others), "nobody's\n");
  std::error_code ec;
  fs::remove_all(drop, ec);
  fs::remove(others, ec);
  for (const std::string& path : left) fs::remove_all(path, ec);
}

// SweepUid on a tree of its own, as root: it removes what the uid owns where the uid could have written it and the
// next task reach it, follows no symbolic link out of the scratch directory, leaves other owners' files and what
// the uid cannot reach, makes a tree of the uid's too deep to empty root's (mode 0700), and says when its budget
// stopped it. Needs root (to give files to the uid).
TEST(TaskUidSweepTest, RemovesWhatTheUidLeftWithinReachFollowingNoLinkAndLocksAwayWhatCannotGo) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to give files to another uid";
  constexpr uid_t kUid = 200031;
  TempDir temp("gpupack-sweep");
  const fs::path scratch = fs::path(temp.path()) / "scratch";
  const fs::path outside = fs::path(temp.path()) / "outside";
  const auto make_dir = [](const fs::path& dir, fs::perms perms, uid_t owner) {
    fs::create_directories(dir);
    fs::permissions(dir, perms);
    EXPECT_EQ(lchown(dir.c_str(), owner, owner), 0) << dir;
  };
  const auto make_file = [](const fs::path& file, uid_t owner) {
    std::ofstream(file) << "x\n";
    EXPECT_EQ(lchown(file.c_str(), owner, owner), 0) << file;
  };
  const fs::perms open = fs::perms::all | fs::perms::sticky_bit;
  const fs::perms searchable = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec;
  make_dir(scratch, open, 0);
  make_dir(outside, searchable, 0);
  make_file(outside / "victim", kUid);  // the uid's, but outside the scratch directory
  make_file(scratch / "own", kUid);
  make_dir(scratch / "own-dir", fs::perms::owner_all, kUid);
  make_dir(scratch / "own-dir" / "sub", fs::perms::owner_all, kUid);
  make_file(scratch / "own-dir" / "sub" / "roots", 0);  // whoever's: inside a directory of the uid's
  ASSERT_EQ(symlink(outside.c_str(), (scratch / "link").c_str()), 0);
  ASSERT_EQ(lchown((scratch / "link").c_str(), kUid, kUid), 0);
  ASSERT_EQ(symlink(outside.c_str(), (scratch / "roots-link").c_str()), 0);  // root's link: not followed either
  make_dir(scratch / "shared", open, 0);
  make_file(scratch / "shared" / "own", kUid);
  make_file(scratch / "shared" / "roots", 0);
  make_dir(scratch / "closed", fs::perms::owner_all, 0);  // the uid cannot enter it: what is in it stays
  make_file(scratch / "closed" / "own", kUid);
  fs::path deep = scratch / "own-deep";
  for (int i = 0; i <= kSweepDepth + 1; ++i, deep /= "d") make_dir(deep, fs::perms::owner_all, kUid);

  auto report = SweepUid(kUid, {scratch.string(), (fs::path(temp.path()) / "missing").string()});
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->removed, 4u);  // own, own-dir, link, shared/own
  for (const char* gone : {"own", "own-dir", "link", "shared/own"})
    EXPECT_FALSE(fs::exists(fs::symlink_status(scratch / gone))) << gone;
  for (const char* kept : {"shared/roots", "closed/own", "roots-link"})
    EXPECT_TRUE(fs::exists(fs::symlink_status(scratch / kept))) << kept;
  EXPECT_TRUE(fs::exists(outside / "victim"));
  EXPECT_EQ(report->locked, std::vector<std::string>{(scratch / "own-deep").string()});
  struct stat st {};
  ASSERT_EQ(lstat((scratch / "own-deep").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_FALSE(report->cut_short);

  for (int i = 0; i < 10; ++i) make_file(scratch / ("f" + std::to_string(i)), 0);
  auto cut = SweepUid(kUid, {scratch.string()}, 3);
  ASSERT_TRUE(cut.ok());
  EXPECT_TRUE(cut->cut_short);
}

TEST(TaskUidsTest, ParsesARangeAndRefusesBadOnesSayingWhy) {
  auto range = ParseTaskUids("200000-200999");
  ASSERT_TRUE(range.ok()) << range.status().message();
  EXPECT_EQ(range->first, 200000);
  EXPECT_EQ(range->last, 200999);
  auto one = ParseTaskUids("300000-300000");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->first, one->last);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"200000", "FIRST-LAST"},
      {"", "FIRST-LAST"},
      {"200999-200000", "FIRST is above LAST"},
      {"0-999", "uid 0"},
      {"abc-def", "decimal"},
      {"-5-10", "decimal"},
      {"200000-", "decimal"},
      {" 1-2", "decimal"},
      {"1-2147483648", "above 2147483647"},
      {"1-4294967295", "decimal"},
      {"100000-165536", "at most 65536"},
  };
  for (const auto& [text, why] : refused) {
    auto r = ParseTaskUids(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidParameter) << text;
    EXPECT_THAT(r.status().message(), HasSubstr("--task-uids '" + text + "'")) << text;
    EXPECT_THAT(r.status().message(), HasSubstr(why)) << text;
  }
}

TEST(TaskUserTest, ResolvesNamesAndIdsAndRefusesUnknownUsers) {
  const struct passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  auto by_name = ResolveTaskUser("nobody", 0);
  ASSERT_TRUE(by_name.ok()) << by_name.status().message();
  EXPECT_EQ(by_name->uid, static_cast<int64_t>(nobody->pw_uid));
  EXPECT_EQ(by_name->gid, static_cast<int64_t>(nobody->pw_gid));
  auto numeric = ResolveTaskUser("4242:4343", 0);
  ASSERT_TRUE(numeric.ok()) << numeric.status().message();
  EXPECT_EQ(numeric->uid, 4242);
  EXPECT_EQ(numeric->gid, 4343);
  auto keep = ResolveTaskUser("", 0);
  ASSERT_TRUE(keep.ok());
  EXPECT_EQ(keep->uid, -1);
  auto unknown = ResolveTaskUser("no-such-user-here", 0);
  EXPECT_EQ(unknown.status().code(), ErrorCode::kInvalidParameter);
  EXPECT_NE(unknown.status().message().find("no-such-user-here"), std::string::npos);
  EXPECT_FALSE(ResolveTaskUser("nobody:staff", 0).ok());
}

TEST_F(ProcessRuntimeTest, StdoutAndStderrGoToTheLogUnderTheTaskId) {
  std::string id = StartOk(Shell("0123abcd", "web", "echo to-stdout; echo to-stderr >&2"));
  EXPECT_EQ(id, "0123abcd-web");
  EXPECT_EQ(WaitExited(*runtime_, id).exit_code, 0);
  EXPECT_EQ(ReadText(LogOf("0123abcd", "web")), "to-stdout\nto-stderr\n");
}

TEST_F(ProcessRuntimeTest, IdIsSanitized) {
  ContainerSpec spec = Shell("task id", "a/b", "exit 0");
  std::string id = StartOk(spec);
  EXPECT_EQ(id, "task_id-a_b");
  EXPECT_EQ(WaitExited(*runtime_, id).exit_code, 0);
  EXPECT_TRUE(fs::exists(LogOf("task_id", "a_b")));
}

TEST_F(ProcessRuntimeTest, ExitCodes) {
  struct Case {
    std::string script;
    int exit_code;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"exit 0", 0, ""},
      {"exit 3", 3, ""},
      {"exit 255", 255, ""},
      {"kill -TERM $$", 128 + 15, "killed by signal 15"},  // 128 + signal, as a shell reports it
      {"kill -KILL $$", 128 + 9, "killed by signal 9"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].script);
    std::string id = StartOk(Shell("t-exit", "c" + std::to_string(i), cases[i].script));
    ContainerStatus status = WaitExited(*runtime_, id);
    EXPECT_EQ(status.state, ContainerState::kExited);
    EXPECT_EQ(status.exit_code, cases[i].exit_code);
    EXPECT_EQ(status.reason, cases[i].reason);
  }
}

TEST_F(ProcessRuntimeTest, ExecFailureIsReportedAndLeavesNothingBehind) {
  const fs::path not_executable = root_ / "data.txt";
  std::ofstream(not_executable) << "not a program\n";
  struct Case {
    std::vector<std::string> argv;
    std::vector<KeyValuePair> env;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"/nonexistent/prog", "arg"}, {}, "exec failed: No such file or directory: /nonexistent/prog"},
      // Looked up on the container's PATH, not the agent's.
      {{"gpupack-no-such-program"}, {}, "exec failed: No such file or directory: gpupack-no-such-program"},
      {{"env"}, {{"PATH", (root_ / "empty-dir").string()}}, "exec failed: No such file or directory: env"},
      {{not_executable.string()}, {}, "exec failed: Permission denied: " + not_executable.string()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    auto id = runtime_->Start(Spec("t-fail", "app", c.argv, c.env));
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.status().message(), c.message);
    auto list = runtime_->List();
    ASSERT_TRUE(list.ok());
    EXPECT_THAT(*list, IsEmpty());  // no record: the same container can be started again
  }
  // A program found on the container's PATH runs.
  std::string id = StartOk(Spec("t-fail", "app", {"env"}, {{"PATH", "/usr/bin:/bin"}}));
  EXPECT_EQ(WaitExited(*runtime_, id).exit_code, 0);
}

TEST_F(ProcessRuntimeTest, StartRejectsInvalidSpecs) {
  ContainerSpec no_argv = Spec("t-bad", "a", {"/bin/true"});
  no_argv.entry_point.clear();
  EXPECT_EQ(runtime_->Start(no_argv).status().code(), ErrorCode::kInvalidParameter);
  EXPECT_EQ(runtime_->Start(Spec("t-bad", "b", {"/bin/true"}, {{"A=B", "c"}})).status().code(),
            ErrorCode::kInvalidParameter);
  EXPECT_EQ(runtime_->Start(Spec("t-bad", "c", {"/bin/true"}, {{"", "c"}})).status().code(),
            ErrorCode::kInvalidParameter);
  EXPECT_EQ(runtime_->Inspect("../state").status().code(), ErrorCode::kInvalidParameter);
  EXPECT_EQ(runtime_->Stop("a/b", milliseconds(0)).code(), ErrorCode::kInvalidParameter);
  EXPECT_EQ(runtime_->Remove(".hidden").code(), ErrorCode::kInvalidParameter);
}

TEST_F(ProcessRuntimeTest, StopSendsSigtermFirst) {
  std::string id = StartOk(Spec("t-term", "app", {"/bin/sleep", "600"}));
  ASSERT_EQ(runtime_->Inspect(id)->state, ContainerState::kRunning);
  ASSERT_TRUE(runtime_->Stop(id, std::chrono::seconds(20)).ok());
  // Right after Stop the exit is recorded.
  auto status = runtime_->Inspect(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state, ContainerState::kExited);
  EXPECT_EQ(status->exit_code, 128 + 15);
  EXPECT_EQ(status->reason, "killed by signal 15");
}

TEST_F(ProcessRuntimeTest, StopEscalatesToSigkillAfterTheGracePeriod) {
  // The shell ignores SIGTERM, and exec keeps the ignored disposition for sleep.
  std::string id = StartOk(Shell("t-kill", "stubborn", "trap '' TERM; echo ready; exec sleep 600"));
  ASSERT_TRUE(WaitForText(LogOf("t-kill", "stubborn"), "ready\n"));
  const milliseconds grace(300);
  const auto begin = std::chrono::steady_clock::now();
  ASSERT_TRUE(runtime_->Stop(id, grace).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - begin, grace);
  auto status = runtime_->Inspect(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state, ContainerState::kExited);
  EXPECT_EQ(status->exit_code, 128 + 9);
  EXPECT_EQ(status->reason, "killed by signal 9");
  // Idempotent: stopping an exited container, or one that never existed, is fine.
  EXPECT_TRUE(runtime_->Stop(id, grace).ok());
  EXPECT_TRUE(runtime_->Stop("no-such-container", grace).ok());
  EXPECT_EQ(runtime_->Inspect(id)->exit_code, 128 + 9);
}

TEST_F(ProcessRuntimeTest, StopKillsTheWholeProcessGroup) {
  const fs::path pid_file = root_ / "grandchild.pid";
  // A background child that ignores SIGTERM outlives the shell unless the group is killed.
  std::string id = StartOk(Shell("t-group", "app",
                                 "(trap '' TERM; exec sleep 600) & echo $! > \"$PID_FILE\"; wait",
                                 {{"PID_FILE", pid_file.string()}}));
  ASSERT_TRUE(WaitForText(pid_file, "\n"));
  const pid_t grandchild = std::stoi(ReadText(pid_file));
  ASSERT_TRUE(runtime_->Stop(id, milliseconds(200)).ok());
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (ProcState(grandchild) != 0 && ProcState(grandchild) != 'Z' &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  const char state = ProcState(grandchild);
  EXPECT_TRUE(state == 0 || state == 'Z') << "grandchild " << grandchild << " is still alive (" << state << ")";
}

TEST_F(ProcessRuntimeTest, WhatTheProgramLeftRunningEndsWithIt) {
  const fs::path pid_file = root_ / "orphan.pid";
  std::string id = StartOk(Shell("t-orphan", "app", "sleep 600 & echo $! > \"$PID_FILE\"",
                                 {{"PID_FILE", pid_file.string()}}));
  EXPECT_EQ(WaitExited(*runtime_, id).exit_code, 0);
  ASSERT_TRUE(WaitForText(pid_file, "\n"));
  const pid_t orphan = std::stoi(ReadText(pid_file));
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (ProcState(orphan) != 0 && ProcState(orphan) != 'Z' && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  const char state = ProcState(orphan);
  EXPECT_TRUE(state == 0 || state == 'Z') << "background process " << orphan << " is still alive";
}

TEST_F(ProcessRuntimeTest, ListRemoveAndConflicts) {
  const fs::path flag = root_ / "flag";
  const std::string wait_for_flag = "while [ ! -e \"$FLAG\" ]; do sleep 0.02; done; exit 4";
  std::string a = StartOk(Shell("t-list", "a", wait_for_flag, {{"FLAG", flag.string()}}));
  std::string b = StartOk(Shell("t-list", "b", "sleep 600"));

  auto list = runtime_->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].id, a);
  EXPECT_EQ((*list)[0].task_arn, "arn:aws:ecs:us-east-1:123456789012:task/default/t-list");
  EXPECT_EQ((*list)[0].container_name, "a");
  EXPECT_EQ((*list)[0].status.state, ContainerState::kRunning);
  EXPECT_EQ((*list)[1].id, b);

  // Nothing is started twice, and a running container is not forgotten.
  EXPECT_EQ(runtime_->Start(Shell("t-list", "a", "exit 0")).status().code(), ErrorCode::kConflict);
  EXPECT_EQ(runtime_->Remove(a).code(), ErrorCode::kConflict);

  std::ofstream(flag) << "go";
  EXPECT_EQ(WaitExited(*runtime_, a).exit_code, 4);
  ASSERT_TRUE(runtime_->Remove(a).ok());
  EXPECT_TRUE(runtime_->Remove(a).ok());  // idempotent
  EXPECT_EQ(runtime_->Inspect(a)->state, ContainerState::kMissing);
  EXPECT_TRUE(fs::exists(LogOf("t-list", "a")));  // logs are kept
  list = runtime_->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].id, b);

  // Once removed, the same container can be started again.
  std::string again = StartOk(Shell("t-list", "a", "exit 5"));
  EXPECT_EQ(again, a);
  EXPECT_EQ(WaitExited(*runtime_, again).exit_code, 5);
  ASSERT_TRUE(runtime_->Stop(b, milliseconds(0)).ok());  // SIGTERM and, at once, SIGKILL: either one wins
  EXPECT_THAT(runtime_->Inspect(b)->exit_code, ::testing::AnyOf(128 + 15, 128 + 9));
  EXPECT_THAT(ZombieChildren(), IsEmpty());
}

TEST_F(ProcessRuntimeTest, AFreshRuntimeReadoptsWhatAKilledAgentStarted) {
  const fs::path flag = root_ / "flag";
  int ids_pipe[2];
  ASSERT_EQ(pipe(ids_pipe), 0);
  // The "agent": a child process that starts two containers and is killed with SIGKILL.
  pid_t agent = fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {
    close(ids_pipe[0]);
    auto runtime = MakeProcessRuntime(options_);
    if (!runtime.ok()) _exit(2);
    auto a = (*runtime)->Start(Shell("t-adopt", "waits", "while [ ! -e \"$FLAG\" ]; do sleep 0.02; done; exit 7",
                                     {{"FLAG", flag.string()}}));
    auto b = (*runtime)->Start(Spec("t-adopt", "sleeps", {"/bin/sleep", "600"}));
    if (!a.ok() || !b.ok()) _exit(3);
    std::string ids = *a + "\n" + *b + "\n";
    if (write(ids_pipe[1], ids.data(), ids.size()) != static_cast<ssize_t>(ids.size())) _exit(4);
    raise(SIGKILL);
  }
  close(ids_pipe[1]);
  std::string ids;
  char chunk[256];
  for (ssize_t n; (n = read(ids_pipe[0], chunk, sizeof chunk)) > 0;) ids.append(chunk, static_cast<size_t>(n));
  close(ids_pipe[0]);
  int wstatus = 0;
  ASSERT_EQ(waitpid(agent, &wstatus, 0), agent);
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) << "status " << wstatus << ", ids " << ids;
  ASSERT_EQ(ids, "t-adopt-waits\nt-adopt-sleeps\n");

  auto restarted = NewRuntime();
  auto list = restarted->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].id, "t-adopt-sleeps");
  EXPECT_EQ((*list)[0].container_name, "sleeps");
  EXPECT_EQ((*list)[0].status.state, ContainerState::kRunning);
  EXPECT_EQ((*list)[1].id, "t-adopt-waits");
  EXPECT_EQ((*list)[1].task_arn, "arn:aws:ecs:us-east-1:123456789012:task/default/t-adopt");
  EXPECT_EQ((*list)[1].status.state, ContainerState::kRunning);

  // The adopted container's exit code still arrives, and the other one can be stopped.
  std::ofstream(flag) << "go";
  EXPECT_EQ(WaitExited(*restarted, "t-adopt-waits").exit_code, 7);
  ASSERT_TRUE(restarted->Stop("t-adopt-sleeps", std::chrono::seconds(20)).ok());
  EXPECT_EQ(restarted->Inspect("t-adopt-sleeps")->exit_code, 128 + 15);
  EXPECT_THAT(ZombieChildren(), IsEmpty());
}

TEST_F(ProcessRuntimeTest, AReusedPidIsNotTheContainer) {
  // A record whose pid now belongs to another process (this test, started at another time): neither running
  // nor signalled.
  fs::create_directories(options_.state_dir);
  std::ofstream(fs::path(options_.state_dir) / "t-reuse-app.json")
      << R"({"version":1,"id":"t-reuse-app","task_arn":"arn:aws:ecs:us-east-1:1:task/c/t-reuse",)"
      << R"("container_name":"app","argv0":"/bin/sleep","log_path":"/dev/null","state":"running",)"
      << R"("monitor_pid":)" << getpid() << R"(,"monitor_start_time":1,"pid":)" << getpid()
      << R"(,"start_time":1})";
  auto status = runtime_->Inspect("t-reuse-app");
  ASSERT_TRUE(status.ok()) << status.status().message();
  EXPECT_EQ(status->state, ContainerState::kExited);
  EXPECT_EQ(status->exit_code, std::nullopt);
  EXPECT_THAT(status->reason, HasSubstr("exit status unknown"));
  EXPECT_TRUE(runtime_->Stop("t-reuse-app", milliseconds(0)).ok());  // and this process is still here
  EXPECT_TRUE(runtime_->Remove("t-reuse-app").ok());
  EXPECT_THAT(*runtime_->List(), IsEmpty());
}

TEST_F(ProcessRuntimeTest, StartsWhileOtherThreadsAllocateAndOpenFiles) {
  // The agent has other threads: the forked processes must not depend on locks those threads may hold, and
  // descriptors they open must not leak into containers.
  std::atomic<bool> done{false};
  std::vector<std::thread> busy;
  for (int t = 0; t < 2; ++t) {
    busy.emplace_back([&] {
      while (!done) {
        std::vector<std::string> junk(64, std::string(256, 'x'));
        std::ifstream("/proc/self/stat") >> junk[0];
      }
    });
  }
  std::vector<std::string> ids;
  for (int i = 0; i < 10; ++i) {
    // The container lists its open descriptors: 0, 1 and 2 only (3 is ls's own directory handle).
    ids.push_back(StartOk(Spec("t-threads", "c" + std::to_string(i), {"/bin/ls", "/proc/self/fd"})));
  }
  done = true;
  for (std::thread& t : busy) t.join();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(WaitExited(*runtime_, ids[i]).exit_code, 0);
    EXPECT_EQ(ReadText(LogOf("t-threads", "c" + std::to_string(i))), "0\n1\n2\n3\n");
  }
}

// The monitor is a program executed afresh (agent/process_launch.h): this one, or the static gpupack-monitor the
// agent finds beside it; with exec_monitor off it is a fork of the agent instead. All give the same container:
// its exit code, its environment, no stray descriptor, a stop.
TEST_F(ProcessRuntimeTest, EveryKindOfMonitorBehavesTheSame) {
  struct Kind {
    const char* name;
    bool exec;
    std::string program;
  };
  std::vector<Kind> kinds = {{"this program executed", true, ""}, {"forked", false, ""}};
#ifdef GPUPACK_MONITOR_PROGRAM
  kinds.push_back({"gpupack-monitor executed", true, GPUPACK_MONITOR_PROGRAM});
#endif
  int n = 0;
  for (const Kind& kind : kinds) {
    SCOPED_TRACE(kind.name);
    options_.exec_monitor = kind.exec;
    options_.monitor_program = kind.program;
    runtime_ = NewRuntime();
    const std::string task = "t-" + std::to_string(++n);
    const std::string exits = StartOk(Shell(task, "exits", "ls /proc/self/fd; echo \"$MINE\"; exit 7", {{"MINE", "1"}}));
    EXPECT_EQ(WaitExited(*runtime_, exits).exit_code, 7);
    EXPECT_EQ(ReadText(LogOf(task, "exits")), "0\n1\n2\n3\n1\n");  // 3 is ls's own directory handle
    const std::string sleeps = StartOk(Spec(task, "sleeps", {"/bin/sleep", "60"}));
    auto running = runtime_->Inspect(sleeps);
    ASSERT_TRUE(running.ok());
    EXPECT_EQ(running->state, ContainerState::kRunning);
    // The monitor that watches it is the program asked for (the record names its pid).
    const std::string record = ReadText(fs::path(options_.state_dir) / (sleeps + ".json"));
    const auto at = record.find("\"monitor_pid\":");
    ASSERT_NE(at, std::string::npos) << record;
    const pid_t monitor = static_cast<pid_t>(std::stol(record.substr(at + 14)));
    std::error_code ec;
    const std::string exe = fs::read_symlink("/proc/" + std::to_string(monitor) + "/exe", ec).string();
    if (!kind.program.empty()) EXPECT_EQ(exe, fs::canonical(kind.program).string());
    else EXPECT_EQ(exe, fs::read_symlink("/proc/self/exe").string());
    EXPECT_TRUE(runtime_->Stop(sleeps, milliseconds(2000)).ok());
    EXPECT_EQ(WaitExited(*runtime_, sleeps).exit_code, 128 + SIGTERM);
    EXPECT_TRUE(runtime_->Remove(exits).ok());
    EXPECT_TRUE(runtime_->Remove(sleeps).ok());
  }
}

TEST_F(ProcessRuntimeTest, MakeRequiresDirectories) {
  EXPECT_EQ(MakeProcessRuntime({}).status().code(), ErrorCode::kInvalidParameter);
  EXPECT_EQ(runtime_->Name(), "process");
}

// ---- Owners: which container a process (a pid NVML reported) belongs to -------------------------------------

// ReadPid waits for `path` to hold a line and returns the number on it (0 when it never does).
pid_t ReadPid(const fs::path& path) {
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string text = ReadText(path);
    if (text.find('\n') != std::string::npos) return static_cast<pid_t>(std::stol(text));
    std::this_thread::sleep_for(milliseconds(10));
  }
  return 0;
}

// Gone says whether a process has exited (or is a zombie nobody reaped yet).
bool WaitGone(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (std::chrono::steady_clock::now() < deadline) {
    const char state = ProcState(pid);
    if (state == 0 || state == 'Z') return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

TEST_F(ProcessRuntimeTest, OwnersMapsTheWorkloadAndWhatItSpawnedAndNothingElse) {
  const fs::path shell_file = root_ / "shell.pid", child_file = root_ / "child.pid";
  const fs::path escaped_file = root_ / "escaped.pid", other_file = root_ / "other.pid";
  // The workload (the shell), a child in its process group, and a child that left for its own session and
  // process group (setsid): attributed through its parent, the shell.
  std::string a = StartOk(Shell("t-own", "a",
                                "echo $$ > \"$D/shell.pid\"; "
                                "sleep 30 & echo $! > \"$D/child.pid\"; "
                                "setsid sleep 30 & echo $! > \"$D/escaped.pid\"; wait",
                                {{"D", root_.string()}}));
  std::string b = StartOk(Shell("t-own", "b", "echo $$ > \"$D/other.pid\"; exec sleep 30",
                                {{"D", root_.string()}}));
  const pid_t shell = ReadPid(shell_file), child = ReadPid(child_file), escaped = ReadPid(escaped_file);
  const pid_t other = ReadPid(other_file);
  ASSERT_GT(shell, 0);
  ASSERT_GT(child, 0);
  ASSERT_GT(escaped, 0);
  ASSERT_GT(other, 0);
  // setsid has exec'd sleep (or is about to): wait until the escaped child really is in a session of its own.
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (getsid(escaped) != escaped && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(getsid(escaped), escaped);
  ASSERT_NE(getpgid(escaped), shell);

  const std::vector<uint32_t> pids = {static_cast<uint32_t>(shell),  static_cast<uint32_t>(child),
                                      static_cast<uint32_t>(escaped), static_cast<uint32_t>(other),
                                      static_cast<uint32_t>(getpid()), 1u, 0u, 0xFFFFFFFFu, 4194304u};
  const std::map<uint32_t, std::string> want = {{static_cast<uint32_t>(shell), a},
                                                {static_cast<uint32_t>(child), a},
                                                {static_cast<uint32_t>(escaped), a},
                                                {static_cast<uint32_t>(other), b}};
  EXPECT_EQ(runtime_->Owners(pids), want);
  // A fresh runtime on the same state (the agent restarted) knows the same.
  EXPECT_EQ(NewRuntime()->Owners(pids), want);

  EXPECT_THAT(runtime_->Owners({}), IsEmpty());
  EXPECT_THAT(runtime_->Owners({static_cast<uint32_t>(getpid()), 1u}), IsEmpty());

  // Once a container has exited its processes are no longer its own, even one that outlived it.
  ASSERT_TRUE(runtime_->Stop(a, milliseconds(0)).ok());
  ASSERT_TRUE(WaitGone(shell));
  ASSERT_TRUE(WaitGone(child));
  const std::map<uint32_t, std::string> after = {{static_cast<uint32_t>(other), b}};
  EXPECT_EQ(runtime_->Owners(pids), after);
  if (ProcState(escaped) != 0) kill(escaped, SIGKILL);  // it left the group Stop signalled
  ASSERT_TRUE(runtime_->Stop(b, milliseconds(0)).ok());
  EXPECT_THAT(runtime_->Owners(pids), IsEmpty());
}

TEST_F(ProcessRuntimeTest, OwnersWithoutContainersIsEmpty) {
  EXPECT_THAT(runtime_->Owners({}), IsEmpty());
  EXPECT_THAT(runtime_->Owners({static_cast<uint32_t>(getpid()), 1u}), IsEmpty());
  // An exited container does not own its former pid.
  const fs::path pid_file = root_ / "gone.pid";
  std::string id = StartOk(Shell("t-gone", "app", "echo $$ > \"$F\"", {{"F", pid_file.string()}}));
  const pid_t pid = ReadPid(pid_file);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExited(*runtime_, id).exit_code, 0);
  EXPECT_THAT(runtime_->Owners({static_cast<uint32_t>(pid)}), IsEmpty());
}

// ---- ParseProcStat / ReadProcIds ----------------------------------------------------------------------------

TEST(ProcTreeTest, ParsesACommandHoldingSpacesAndParentheses) {
  // The command is "a b) (c) S 9 9 9": only the last ')' ends it.
  auto ids = ParseProcStat("4242 (a b) (c) S 9 9 9) S 17 4242 4000 34816 4242 4194560 110 0 0 0\n");
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(ids->pid, 4242);
  EXPECT_EQ(ids->ppid, 17);
  EXPECT_EQ(ids->pgrp, 4242);
  EXPECT_EQ(ids->session, 4000);
  auto sd = ParseProcStat("812 ((sd-pam)) S 811 811 811 0 -1 1077936448 50 0 0 0");
  ASSERT_TRUE(sd.has_value());
  EXPECT_EQ(sd->pid, 812);
  EXPECT_EQ(sd->ppid, 811);
  EXPECT_EQ(sd->pgrp, 811);
  EXPECT_EQ(sd->session, 811);
  auto open = ParseProcStat("5 (x (y) R 1 2 3 0");
  ASSERT_TRUE(open.has_value());
  EXPECT_EQ(open->pid, 5);
  EXPECT_EQ(open->ppid, 1);
  EXPECT_EQ(open->pgrp, 2);
  EXPECT_EQ(open->session, 3);
}

TEST(ProcTreeTest, MalformedStatIsNullopt) {
  for (const char* text : {"", "4242", "4242 (sleep)", "4242 (sleep) S", "4242 (sleep) S 1 2",
                           "abc (sleep) S 1 2 3", "4242x (sleep) S 1 2 3", "(sleep) S 1 2 3",
                           "4242 (sleep S 1 2 3", "4242 sleep) S 1 2 3", "4242 (sleep) S x 2 3",
                           "4242 (sleep) S 1 2 3x", "4242 (sleep) S 1 99999999999 3"}) {
    EXPECT_FALSE(ParseProcStat(text).has_value()) << text;
  }
}

TEST(ProcTreeTest, ReadsThisProcess) {
  auto ids = ReadProcIds(getpid());
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(ids->pid, getpid());
  EXPECT_EQ(ids->ppid, getppid());
  EXPECT_EQ(ids->pgrp, getpgrp());
  EXPECT_EQ(ids->session, getsid(0));
  EXPECT_FALSE(ReadProcIds(0).has_value());
  EXPECT_FALSE(ReadProcIds(-1).has_value());
}

}  // namespace
}  // namespace gpupack::agent
