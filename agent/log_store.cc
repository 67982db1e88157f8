#include "agent/log_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>

namespace gpupack::agent {

bool IsNameChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '-';
}

std::string Sanitized(std::string_view raw) {
  std::string out;
  for (char c : raw.substr(0, 200)) out.push_back(IsNameChar(c) ? c : '_');
  if (out.empty()) out = "_";
  if (out[0] == '.') out[0] = '_';
  return out;
}

namespace {

namespace fs = std::filesystem;

constexpr size_t kDigits = 20;           // a file's start offset in its name
constexpr size_t kRecordOverhead = 24;   // timestamp digits, space, newline (at most)
constexpr size_t kReadChunk = 1 << 20;   // a reader's read size


std::string TaskIdOf(const std::string& task_arn) {
  auto slash = task_arn.rfind('/');
  return slash == std::string::npos ? task_arn : task_arn.substr(slash + 1);
}

bool WriteAll(int fd, const char* p, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// PutDigits writes `value` as decimal into `out` (no terminator); returns the count. `width` pads with zeros.
size_t PutDigits(char* out, uint64_t value, size_t width = 0) {
  char digits[24];
  size_t n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (n < width) digits[n++] = '0';
  for (size_t i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  return n;
}

// ParseStart: the start offset of a file named by it ("<20 digits>.log"), nullopt for any other name.
std::optional<uint64_t> ParseStart(const std::string& name) {
  if (name.size() != kDigits + 4 || !name.ends_with(".log")) return std::nullopt;
  uint64_t v = 0;
  for (size_t i = 0; i < kDigits; ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return v;
}

// ParseRecord splits a line "<timestamp> <message>" (a line that is not one is a message stamped 0).
LogEvent ParseRecord(std::string_view line) {
  size_t i = 0;
  int64_t ts = 0;
  while (i < line.size() && i < 19 && line[i] >= '0' && line[i] <= '9') ts = ts * 10 + (line[i++] - '0');
  if (i == 0 || i >= line.size() || line[i] != ' ') return LogEvent{0, std::string(line)};
  return LogEvent{ts, std::string(line.substr(i + 1))};
}

// Scan calls take(offset in file, record length, line) for each whole line of `path` from `from`, until take
// says false; `end` is then where the line it refused starts, else past the last whole line. A `from` that is
// not the start of a line (the byte before it is not a newline) skips to the next line.
template <typename Take>
bool Scan(const std::string& path, uint64_t from, Take&& take, uint64_t& end) {
  end = from;
  std::ifstream in(path, std::ios::binary);
  if (!in) return true;
  bool skip_first = false;
  if (from > 0) {
    in.seekg(static_cast<std::streamoff>(from - 1));
    char before = 0;
    if (!in.get(before)) return true;  // shorter than that: nothing to read
    skip_first = before != '\n';
  }
  std::string buf;
  uint64_t base = from;  // file offset of buf[0]
  std::vector<char> chunk(kReadChunk);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    buf.append(chunk.data(), static_cast<size_t>(got));
    size_t idx = 0;
    for (size_t nl; (nl = buf.find('\n', idx)) != std::string::npos; idx = nl + 1) {
      if (skip_first) {
        skip_first = false;
        end = base + nl + 1;
        continue;
      }
      if (!take(base + idx, nl + 1 - idx, std::string_view(buf).substr(idx, nl - idx))) {
        end = base + idx;
        return false;
      }
      end = base + nl + 1;
    }
    buf.erase(0, idx);
    base += idx;
  }
  return true;  // what is left in buf is a line still being written
}

bool Matches(const LogQuery& q, const LogEvent& e) {
  if (q.start_ms && e.timestamp_ms < *q.start_ms) return false;
  if (q.end_ms && e.timestamp_ms >= *q.end_ms) return false;
  // memmem (glibc's two-way search) is linear in the message whatever the term: no term makes a line dear.
  for (const std::string& term : q.terms)
    if (!term.empty() && memmem(e.message.data(), e.message.size(), term.data(), term.size()) == nullptr)
      return false;
  return true;
}

// ScanBudget: the bytes one page may scan: max_scan_bytes shared by the terms each line is searched for.
uint64_t ScanBudget(const LogQuery& q) { return std::max<uint64_t>(1, q.max_scan_bytes / (1 + q.terms.size())); }

size_t Cost(const LogEvent& e) { return e.message.size() + 26; }

}  // namespace

std::string TaskLogDirectory(const std::string& root, const std::string& task_arn) {
  return (fs::path(root) / Sanitized(TaskIdOf(task_arn))).string();
}

std::string LogDirectory(const std::string& root, const std::string& task_arn, const std::string& container_name) {
  return (fs::path(TaskLogDirectory(root, task_arn)) / Sanitized(container_name)).string();
}

int64_t NowMs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::string FormatRecord(int64_t timestamp_ms, std::string_view message) {
  return std::to_string(timestamp_ms) + " " + std::string(message) + "\n";
}

// ---- LogWriter ------------------------------------------------------------------------------------------------

LogWriter::~LogWriter() { Close(); }

Status LogWriter::Open(const std::string& dir, LogLimits limits) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Server("log store: cannot create " + dir + ": " + ec.message());
  std::vector<uint64_t> starts;
  for (const LogFile& f : ListLogFiles(dir)) starts.push_back(f.start);
  uint64_t size = 0;
  if (starts.empty()) starts.push_back(0);
  Resume(dir, limits, -1, starts, 0);
  while (starts_.size() > static_cast<size_t>(limits_.files)) {
    FilePath(starts_.front());
    unlink(path_.data());
    starts_.erase(starts_.begin());
  }
  FilePath(starts_.back());
  fd_ = open(path_.data(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) return Status::Server("log store: cannot open " + std::string(path_.data()) + ": " + strerror(errno));
  struct stat st {};
  if (fstat(fd_, &st) == 0) size = static_cast<uint64_t>(st.st_size);
  size_ = size;
  // A record cut short (the writer died in the middle of it) is ended, so the next one starts a line.
  if (size_ > 0) {
    char last = '\n';
    if (pread(fd_, &last, 1, static_cast<off_t>(size_ - 1)) == 1 && last != '\n' && WriteAll(fd_, "\n", 1)) ++size_;
  }
  return Status::Ok();
}

void LogWriter::Resume(const std::string& dir, LogLimits limits, int fd, const std::vector<uint64_t>& starts,
                       uint64_t size) {
  Close();
  dir_ = dir;
  limits_ = limits;
  limits_.files = std::clamp(limits_.files, 1, kMaxLogFiles);
  if (limits_.file_bytes < 4096) limits_.file_bytes = 4096;
  starts_.clear();
  starts_.reserve(kMaxLogFiles + starts.size() + 1);
  starts_ = starts;
  if (starts_.empty()) starts_.push_back(0);
  fd_ = fd;
  size_ = size;
  path_.assign(dir_.size() + kDigits + 8, '\0');
  record_.assign(kMaxLineBytes + kRecordOverhead, '\0');
  partial_.assign(kMaxLineBytes, '\0');
  partial_size_ = 0;
}

void LogWriter::FilePath(uint64_t start) {
  char* p = path_.data();
  std::memcpy(p, dir_.data(), dir_.size());
  p += dir_.size();
  *p++ = '/';
  p += PutDigits(p, start, kDigits);
  std::memcpy(p, ".log", 5);
}

bool LogWriter::Rotate() {
  if (fd_ >= 0) close(fd_);
  const uint64_t start = End();
  starts_.push_back(start);
  size_ = 0;
  FilePath(start);
  fd_ = open(path_.data(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  while (starts_.size() > static_cast<size_t>(limits_.files)) {
    FilePath(starts_.front());
    unlink(path_.data());
    starts_.erase(starts_.begin());
  }
  return fd_ >= 0;
}

bool LogWriter::WriteRecord(int64_t timestamp_ms, const char* message, size_t size) {
  if (record_.empty()) return false;  // never opened
  size = std::min(size, kMaxLineBytes);
  char* r = record_.data();
  size_t n = PutDigits(r, static_cast<uint64_t>(std::max<int64_t>(0, timestamp_ms)));
  r[n++] = ' ';
  std::memcpy(r + n, message, size);
  n += size;
  r[n++] = '\n';
  if (size_ > 0 && size_ + n > limits_.file_bytes && !Rotate()) return false;
  if (fd_ < 0) return false;
  if (!WriteAll(fd_, r, n)) return false;
  size_ += n;
  return true;
}

bool LogWriter::Append(int64_t timestamp_ms, const char* message, size_t size) {
  const char* nl = static_cast<const char*>(std::memchr(message, '\n', size));
  if (nl != nullptr) size = static_cast<size_t>(nl - message);
  if (size > 0 && message[size - 1] == '\r') --size;  // CRLF
  return WriteRecord(timestamp_ms, message, size);
}

void LogWriter::Feed(const char* data, size_t size, int64_t now_ms) {
  while (size > 0) {
    const char* nl = static_cast<const char*>(std::memchr(data, '\n', size));
    const size_t line = nl != nullptr ? static_cast<size_t>(nl - data) : size;
    if (partial_size_ == 0 && nl != nullptr && line <= kMaxLineBytes) {
      Append(now_ms, data, line);  // the common case: a whole line in the chunk
    } else {
      const size_t room = partial_.size() - partial_size_;
      const size_t take = std::min(line, room);
      std::memcpy(partial_.data() + partial_size_, data, take);
      partial_size_ += take;
      if (take < line) {  // the line is longer than an event: this much is one
        Append(now_ms, partial_.data(), partial_size_);
        partial_size_ = 0;
        data += take;
        size -= take;
        continue;
      }
      if (nl == nullptr) return;  // waits for its end
      Append(now_ms, partial_.data(), partial_size_);
      partial_size_ = 0;
    }
    data += line + 1;
    size -= line + 1;
  }
}

void LogWriter::Flush(int64_t now_ms) {
  if (partial_size_ == 0) return;
  Append(now_ms, partial_.data(), partial_size_);
  partial_size_ = 0;
}

void LogWriter::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

// ---- reading ----------------------------------------------------------------------------------------------------

std::vector<LogFile> ListLogFiles(const std::string& dir) {
  std::vector<LogFile> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    auto start = ParseStart(name);
    if (!start) continue;
    std::error_code size_ec;
    const uintmax_t size = fs::file_size(it->path(), size_ec);
    if (size_ec) continue;  // deleted meanwhile
    out.push_back(LogFile{*start, static_cast<uint64_t>(size), it->path().string()});
  }
  std::sort(out.begin(), out.end(), [](const LogFile& a, const LogFile& b) { return a.start < b.start; });
  return out;
}

Result<LogPage> ReadLogPage(const std::string& dir, const LogQuery& q) {
  LogPage page;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return page;  // found = false
  page.found = true;
  const std::vector<LogFile> files = ListLogFiles(dir);
  const size_t limit = std::max<size_t>(1, q.limit);
  if (files.empty()) {
    page.next_forward = page.next_backward = q.position.value_or(0);
    page.at_end = true;
    return page;
  }

  if (q.forward) {
    uint64_t cur = std::max(q.position.value_or(files.front().start), files.front().start);
    std::optional<uint64_t> first;
    size_t bytes = 0;
    uint64_t scanned = 0;
    const uint64_t budget = ScanBudget(q);
    bool stopped = false;
    for (size_t i = 0; i < files.size() && !stopped; ++i) {
      const LogFile& f = files[i];
      if (i + 1 < files.size() && files[i + 1].start <= cur) continue;  // cur is in a later file
      const uint64_t from = cur > f.start ? cur - f.start : 0;
      uint64_t end = from;
      stopped = !Scan(
          f.path, from,
          [&](uint64_t at, size_t length, std::string_view line) {
            if (page.events.size() >= limit || scanned >= budget) return false;
            LogEvent e = ParseRecord(line);
            if (Matches(q, e)) {
              if (!page.events.empty() && bytes + Cost(e) > q.max_bytes) return false;
              bytes += Cost(e);
              if (!first) first = f.start + at;
              page.events.push_back(std::move(e));
            }
            scanned += length;
            return true;
          },
          end);
      cur = f.start + end;
      // A file read to its end goes on in the next one, which starts where the stream went on.
      if (!stopped && i + 1 < files.size()) cur = files[i + 1].start;
    }
    page.at_end = !stopped;
    page.next_forward = cur;
    page.next_backward = first.value_or(cur);
    return page;
  }

  // Backward: the newest events ending at or before `end_pos`, a file at a time from the newest one.
  const uint64_t end_pos = q.position.value_or(std::numeric_limits<uint64_t>::max());
  struct Found {
    uint64_t at, end;
    LogEvent event;
  };
  std::deque<Found> kept;  // oldest first
  size_t bytes = 0;
  uint64_t stream_end = 0;
  bool full = false;
  // A page scans whole files, newest first, and starts no older one once it has scanned its budget: the page
  // then ends at the oldest file it read (its token goes on before it).
  const uint64_t budget = ScanBudget(q);
  uint64_t scanned = 0;
  std::optional<uint64_t> cut_at;
  for (size_t i = files.size(); i-- > 0 && !full;) {
    const LogFile& f = files[i];
    if (f.start >= end_pos && i > 0) continue;
    if (scanned >= budget) {
      cut_at = files[i + 1].start;
      break;
    }
    std::vector<Found> here;
    uint64_t end = 0;
    Scan(
        f.path, 0,
        [&](uint64_t at, size_t length, std::string_view line) {
          if (f.start + at + length > end_pos) return false;
          LogEvent e = ParseRecord(line);
          if (Matches(q, e)) here.push_back(Found{f.start + at, f.start + at + length, std::move(e)});
          scanned += length;
          return true;
        },
        end);
    if (stream_end == 0) stream_end = f.start + end;  // the newest file read: where the stream ends
    for (size_t k = here.size(); k-- > 0;) {
      if (kept.size() >= limit || (!kept.empty() && bytes + Cost(here[k].event) > q.max_bytes)) {
        full = true;
        break;
      }
      bytes += Cost(here[k].event);
      kept.push_front(std::move(here[k]));
    }
  }
  const uint64_t at = std::min(end_pos, stream_end);
  page.next_backward = kept.empty() ? cut_at.value_or(at) : kept.front().at;
  page.next_forward = kept.empty() ? at : kept.back().end;
  for (Found& f : kept) page.events.push_back(std::move(f.event));
  return page;
}

size_t PurgeLogs(const std::string& root, std::chrono::seconds retention,
                 const std::function<bool(const std::string& task_id)>& keep) {
  size_t purged = 0;
  const auto now = fs::file_time_type::clock::now();
  std::error_code ec;
  std::vector<fs::path> old;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory()) continue;
    const std::string task_id = it->path().filename().string();
    if (keep && keep(task_id)) continue;
    bool recent = false;
    std::error_code walk_ec;
    for (fs::recursive_directory_iterator f(it->path(), walk_ec), fend; !walk_ec && f != fend && !recent;
         f.increment(walk_ec)) {
      std::error_code t_ec;
      const auto t = fs::last_write_time(f->path(), t_ec);
      if (!t_ec && now - t < retention) recent = true;
    }
    if (!recent) old.push_back(it->path());
  }
  for (const fs::path& p : old) {
    std::error_code rm_ec;
    if (fs::remove_all(p, rm_ec) > 0 && !rm_ec) ++purged;
  }
  return purged;
}

LogCapResult CapLogs(const std::string& root, uint64_t cap_bytes,
                     const std::function<bool(const std::string& task_id)>& keep) {
  struct TaskLogs {
    fs::path path;
    uint64_t bytes = 0;
    fs::file_time_type newest = fs::file_time_type::min();
    bool kept = false;
  };
  std::vector<TaskLogs> tasks;
  LogCapResult out;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory()) continue;
    TaskLogs t;
    t.path = it->path();
    t.kept = keep && keep(t.path.filename().string());
    std::error_code walk_ec;
    for (fs::recursive_directory_iterator f(t.path, walk_ec), fend; !walk_ec && f != fend; f.increment(walk_ec)) {
      std::error_code f_ec;
      if (!f->is_regular_file(f_ec)) continue;
      const uintmax_t size = f->file_size(f_ec);
      if (!f_ec) t.bytes += size;
      const auto when = fs::last_write_time(f->path(), f_ec);
      if (!f_ec && when > t.newest) t.newest = when;
    }
    out.bytes += t.bytes;
    tasks.push_back(std::move(t));
  }
  if (out.bytes <= cap_bytes) return out;
  // The tasks the agent no longer has, least recently written first.
  std::sort(tasks.begin(), tasks.end(), [](const TaskLogs& a, const TaskLogs& b) {
    return a.newest != b.newest ? a.newest < b.newest : a.path < b.path;
  });
  for (const TaskLogs& t : tasks) {
    if (out.bytes <= cap_bytes) break;
    if (t.kept) continue;
    std::error_code rm_ec;
    fs::remove_all(t.path, rm_ec);
    if (rm_ec) continue;
    out.bytes -= t.bytes;
    out.removed_bytes += t.bytes;
    ++out.removed_tasks;
  }
  return out;
}

}  // namespace gpupack::agent
