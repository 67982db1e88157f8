// WriteFileAtomically: the one way we replace a file whole (state files, records, cursors, installed models).
// The content goes to a new temporary file in the target's directory (O_EXCL, O_NOFOLLOW, the mode given, less
// the umask), is written whole and fsynced, is renamed over the target, and the directory is fsynced: a crash
// leaves the old content or the new, never a mix, and the new survives once the call returned. On any failure
// the temporary is removed and the target is as it was.
//
// Thread-safe: each call writes its own temporary. Two calls on one target at once leave one of the two contents.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "base/status.h"

namespace gpupack {

// WriteFileAtomically replaces `path` with `content`; the temporary is "<path>.tmp.<pid>.<n>". The error names
// the file and says errno's text, e.g. "cannot write /x/y.json: No space left on device".
Status WriteFileAtomically(const std::string& path, std::string_view content, mode_t mode = 0666);

// WriteFileAtomicallyAt is the same with a temporary path the caller chose (in the target's directory, used by
// this writer alone: a stale one from a crashed write is removed first). It allocates nothing and calls only
// async-signal-safe functions, for the container monitor (agent/process_launch.cc). 0, or the errno of the step
// that failed.
int WriteFileAtomicallyAt(const char* path, const char* temp_path, const void* data, size_t size, mode_t mode);

}  // namespace gpupack
