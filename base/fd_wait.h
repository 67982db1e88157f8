// WaitFd: wait on one file descriptor until it is ready or a deadline passes (poll, EINTR retried). For the
// code that talks to sockets without an event loop: the PostgreSQL store and a standby's forwarding.
#pragma once

#include <chrono>

namespace gpupack {

// WaitFd polls `fd` for `events` (POLLIN, POLLOUT, ...) until `deadline`: true when poll reports it ready (an
// error or hang-up counts: the next read or write says which); false on timeout or a poll error.
bool WaitFd(int fd, short events, std::chrono::steady_clock::time_point deadline);

}  // namespace gpupack
