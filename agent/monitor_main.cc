// gpupack-monitor: the monitor of one process-runtime container, as a small static program.
//
// The agent executes a monitor for every container it starts (agent/process_launch.h has the design). It used to
// execute gpupack itself, whose dynamic loading and start cost about 4 ms of CPU each time; this program holds
// only agent/process_launch.cc, linked statically, and starts in a fraction of that. The agent uses it when it
// sits beside the gpupack executable (BundledMonitorProgram), and gpupack itself otherwise.
//
// process_launch.cc's constructor recognizes the monitor's argv and environment and becomes the monitor before
// main runs; main runs only when someone starts this program by hand.
#include <cstdio>

int main() {
  std::fputs("gpupack-monitor: started by `gpupack agent` only (it watches one container of the process runtime)\n",
             stderr);
  return 2;
}
