#include "base/fd_wait.h"

#include <poll.h>

#include <cerrno>

namespace gpupack {

bool WaitFd(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    // Rounded up: poll's milliseconds never end the wait before the deadline.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

}  // namespace gpupack
