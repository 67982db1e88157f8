// MpsControlDaemon: supervises `nvidia-cuda-mps-control` (docs/agent-channel.md). Small on purpose: Start, Stop, Probe,
// Send. It never changes a GPU setting (compute mode, MIG, clocks).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace gpupack::agent {

enum class MpsHealth {
  kServing,     // the control daemon answered a command in time
  kNotServing,  // no daemon: the pipe is missing or the control program says it cannot connect
  kHung,        // the control program did not answer within the probe timeout
};
const char* MpsHealthName(MpsHealth h);

// MpsFailure: why a control command (MpsSupervisor::Send) failed, for code to branch on; the Status's message is
// for people.
enum class MpsFailure {
  kNone,        // it answered
  kBadCommand,  // not one non-empty line: nothing ran
  kCannotRun,   // the control program did not run: it could not be started, exited 126/127 or was killed
  kNoAnswer,    // no answer within probe_timeout (a hung daemon): the program was killed
  kNoDaemon,    // the program ran and said that no daemon listens on the pipe directory
  kFailed,      // the program ran and failed otherwise (a non-zero exit)
};

// MpsAnswer: Send's answer (the output) or its failure: a Status with an MpsFailure beside it.
class [[nodiscard]] MpsAnswer : public Result<std::string> {
 public:
  MpsAnswer(std::string output) : Result(std::move(output)) {}  // NOLINT: implicit by design
  MpsAnswer(MpsFailure failure, Status status) : Result(std::move(status)), failure_(failure) {}
  MpsFailure failure() const { return failure_; }

 private:
  MpsFailure failure_ = MpsFailure::kNone;
};

struct MpsOptions {
  std::string control_program = "nvidia-cuda-mps-control";  // a path or a name on PATH
  std::string pipe_dir = "/run/gpupack-mps";                // CUDA_MPS_PIPE_DIRECTORY; never /tmp/nvidia-mps
  std::string log_dir = "/run/gpupack-mps/log";             // CUDA_MPS_LOG_DIRECTORY
  std::chrono::milliseconds probe_timeout{3000};  // bounds every control command (probe, Send, -d, quit)
  int failures_to_impair = 3;  // consecutive failed probes that mark the instance impaired
  std::chrono::milliseconds start_timeout{5000};  // Start: how long a freshly started daemon has to answer
};

// MpsSupervisor is what the agent talks to; MpsControlDaemon drives the real control program and
// FakeMps simulates one for --gpus fake. Thread-safe.
class MpsSupervisor {
 public:
  virtual ~MpsSupervisor() = default;
  // Start adopts a daemon that already answers on pipe_dir, else starts `control -d` with the pipe and log
  // directories in its environment, and waits (bounded) until it answers.
  virtual Status Start() = 0;
  // Stop sends `quit` to a daemon this supervisor started (an adopted one too), bounded by the timeout.
  virtual Status Stop() = 0;
  // Probe runs one health check, updates the consecutive-failure count and returns the health.
  virtual MpsHealth Probe() = 0;
  // Send writes one control command and returns its answer (e.g. "get_server_list", "ps"), or why it failed.
  virtual MpsAnswer Send(const std::string& command) = 0;
  // Impaired: the last failures_to_impair probes all failed. A serving probe resets the count.
  virtual bool impaired() const = 0;
  virtual int consecutive_failures() const = 0;
  virtual const MpsOptions& options() const = 0;
};

// MakeMpsControlDaemon: every control command runs `control_program` as a child in its own process group with
// CUDA_MPS_PIPE_DIRECTORY/CUDA_MPS_LOG_DIRECTORY set (Start creates the directories 0755, then makes the pipe
// directory 1777, so that an MPS server started as a task's uid reaches the daemon and makes its pipes), the command on
// its stdin and its answer read from stdout and stderr, all within probe_timeout; past it the child's process
// group is killed. Probe sends `get_default_active_thread_percentage`: an answer is kServing, no answer in time
// kHung, a non-zero exit or a "Cannot find MPS control daemon"-style answer kNotServing. Start refuses
// /tmp/nvidia-mps and a pipe directory longer than 80 characters (the daemon's unix sockets would not fit); it
// does not start a second daemon over a hung one. Probes made inside Start do not count toward impaired().
// Stop answers Ok when nothing listens any more. Send's errors start with "MPS control daemon is not responding"
// and carry an MpsFailure: a "Cannot find MPS control daemon"-style answer is kNoDaemon.
std::unique_ptr<MpsSupervisor> MakeMpsControlDaemon(MpsOptions options);

// FakeMps: a simulated daemon for hosts without GPUs. Its health is read from the file
// `<pipe_dir>/fake-mps-health` when present ("serving", "down", "hung"), so tests can take it down from
// outside the agent; absent means serving.
// The file is read on every Start, Probe and Send; "hung" makes the call take probe_timeout (as a real hung
// probe would; tests set a short one), any other word than serving/hung counts as down. Start fails unless the
// file says serving; after Stop (or Send("quit")) probes are kNotServing until the next Start. Send answers
// "100.0\n" to get_default_active_thread_percentage and "" to anything else; a hung one fails kNoAnswer, a
// down one kNoDaemon.
inline constexpr char kFakeMpsHealthFile[] = "fake-mps-health";

// ---- Reading the control daemon's answers (used for fault handling; pure functions) ----

// ParseMpsServerList reads `get_server_list`: one MPS server pid per line. Lines that are not a pid are skipped.
std::vector<int> ParseMpsServerList(std::string_view text);

// One row of `ps`: "PID ID SERVER DEVICE NAMESPACE COMMAND", DEVICE being the GPU's UUID cut to 22 characters.
struct MpsClientRow {
  int pid = 0;
  int server_pid = 0;
  std::string device;  // a prefix of the GPU's UUID, as the daemon prints it
};
// ParseMpsPs reads `ps`; the header and malformed rows are skipped.
std::vector<MpsClientRow> ParseMpsPs(std::string_view text);
// MpsDeviceMatches: whether a `ps` DEVICE cell names the GPU with this UUID (an exact match or a prefix of at
// least 12 characters).
bool MpsDeviceMatches(std::string_view cell, std::string_view uuid);
// MpsServerFaulted: whether `get_server_status <pid>` answered FAULT (anything else, e.g. ACTIVE, is not).
bool MpsServerFaulted(std::string_view status_answer);
std::unique_ptr<MpsSupervisor> MakeFakeMps(MpsOptions options);

}  // namespace gpupack::agent
