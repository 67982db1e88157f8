// PrivatePostgres: a PostgreSQL server of the test's own, in a temporary directory, for the tests of
// PostgresStore and of several servers sharing one database.
//
// Start() runs initdb (trust authentication, user `postgres`) in a fresh temporary directory and `pg_ctl start`
// on a free loopback port, with its unix socket in that directory too, so nothing of the machine's own
// PostgreSQL (if any) is touched or needed. Stop() stops it (Kill(): SIGKILL of the postmaster, as a crash);
// Start() again reuses the data directory (a database restart). The destructor stops it, then the TempDir
// (tests/unit/temp_dir.h) that holds the directory removes it. The binaries come from the newest
// /usr/lib/postgresql/N/bin (or $GPUPACK_PG_BIN); when there are none, Available() is false and the tests skip,
// saying why.
//
// PostgreSQL refuses to run as root: when the test runs as root, initdb and postgres run as `nobody` through
// runuser, and the directory is given to that user.
//
// Shared: under ctest, $GPUPACK_TEST_PG names the directory of the one server the whole run shares (fixture
// `shared_postgres`, tests/unit/shared_postgres.sh, which writes its port to DIR/port). Options::shared then
// attaches to it instead of making one: Start() only reads the port, the destructor leaves it running, and
// databases get names unique across processes (and are dropped by DropDatabase). A test that stops or kills its
// server asks for a server of its own (shared = false).
//
// Not thread-safe: one test thread drives it.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/unit/temp_dir.h"

namespace gpupack::testing {

class PrivatePostgres {
 public:
  struct Options {
    bool durable = false;  // fsync on (benchmarks); tests run with fsync off, their machine does not crash
    bool shared = false;   // attach to the run's shared server when $GPUPACK_TEST_PG names one (see above)
  };

  PrivatePostgres() : PrivatePostgres(Options{}) {}
  explicit PrivatePostgres(Options options) : options_(options), bin_(FindBinDir()), shared_dir_(SharedDir(options)) {}
  ~PrivatePostgres() {
    if (running_ && shared_dir_.empty()) Stop();
  }
  PrivatePostgres(const PrivatePostgres&) = delete;
  PrivatePostgres& operator=(const PrivatePostgres&) = delete;

  // FindBinDir: $GPUPACK_PG_BIN, else the newest /usr/lib/postgresql/N/bin holding initdb; "" when none.
  static std::string FindBinDir() {
    if (const char* env = std::getenv("GPUPACK_PG_BIN"); env != nullptr && *env != '\0') return env;
    namespace fs = std::filesystem;
    std::error_code ec;
    int best = -1;
    std::string out;
    for (const auto& e : fs::directory_iterator("/usr/lib/postgresql", ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      if (!fs::exists(e.path() / "bin" / "initdb", ec)) continue;
      if (const int v = std::stoi(name); v > best) {
        best = v;
        out = (e.path() / "bin").string();
      }
    }
    return out;
  }

  bool Available() const { return !bin_.empty(); }
  std::string WhyUnavailable() const {
    return "PostgreSQL's server binaries (initdb, pg_ctl) are not installed: no /usr/lib/postgresql/N/bin and no "
           "$GPUPACK_PG_BIN (Debian: apt-get install postgresql; scripts/install-deps.sh does)";
  }

  // Start initializes the directory on first use, then starts the server; false (with *error) on failure.
  bool Start(std::string* error) {
    if (!Available()) {
      *error = WhyUnavailable();
      return false;
    }
    if (!shared_dir_.empty()) {  // the run's shared server: started by the fixture, only its port is read
      std::ifstream port_file(shared_dir_ + "/port");
      if (!(port_file >> port_) || port_ <= 0) {
        *error = "the shared PostgreSQL of this ctest run (" + shared_dir_ + ") did not start: see the test " +
                 "shared_postgres_start";
        return false;
      }
      dir_ = shared_dir_;
      running_ = true;
      return true;
    }
    if (dir_.empty() && !Init(error)) return false;
    for (int attempt = 0; attempt < 5; ++attempt) {  // a free port can be taken between probe and start
      if (port_ == 0 || attempt > 0) port_ = FreePort();
      const std::string opts = "-p " + std::to_string(port_) + " -k " + dir_ +
                               " -c listen_addresses=127.0.0.1 -c max_connections=200" +
                               (options_.durable ? "" : " -c fsync=off -c full_page_writes=off");
      if (Run(bin_ + "/pg_ctl start -w -t 60 -D " + dir_ + "/data -l " + dir_ + "/log -o '" + opts + "'")) {
        running_ = true;
        return true;
      }
    }
    *error = "pg_ctl start failed; its log:\n" + ReadFile(dir_ + "/log");
    return false;
  }

  // Stop: a fast shutdown (the data stay); Kill: SIGKILL of the postmaster, recovery happens at the next Start.
  void Stop() {
    Run(bin_ + "/pg_ctl stop -w -m fast -D " + dir_ + "/data");
    running_ = false;
  }
  void Kill() {
    std::ifstream pid_file(dir_ + "/data/postmaster.pid");
    long pid = 0;
    if (pid_file >> pid && pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
    // Its backends notice the postmaster is gone; wait until the server no longer answers.
    for (int i = 0; i < 100 && Run(bin_ + "/pg_isready -q -h 127.0.0.1 -p " + std::to_string(port_)); ++i)
      ::usleep(50'000);
    std::error_code ec;
    std::filesystem::remove(dir_ + "/data/postmaster.pid", ec);
    running_ = false;
  }

  int port() const { return port_; }
  const std::string& dir() const { return dir_; }

  // Uri: a libpq URI of database `db` on this server (TCP, loopback).
  std::string Uri(const std::string& db = "postgres") const {
    return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/" + db;
  }
  // UriOnPort: the same database reached through another port (a proxy in front of this server).
  static std::string UriOnPort(int port, const std::string& db) {
    return "postgresql://postgres@127.0.0.1:" + std::to_string(port) + "/" + db;
  }

  // CreateDatabase makes a new empty database and returns its URI ("" on failure). On the shared server the
  // name holds this process's id, so test processes running side by side never collide.
  std::string CreateDatabase() {
    const std::string name =
        "t" + (shared_dir_.empty() ? "" : std::to_string(::getpid()) + "_") + std::to_string(++databases_);
    if (!Psql("CREATE DATABASE " + name)) return "";
    return Uri(name);
  }
  // DropDatabase drops the database `uri` names, closing its connections (best effort: the shared server
  // would otherwise keep every test's database until the run ends).
  void DropDatabase(const std::string& uri) {
    if (!uri.empty()) Psql("DROP DATABASE IF EXISTS " + uri.substr(uri.rfind('/') + 1) + " WITH (FORCE)");
  }
  bool shared() const { return !shared_dir_.empty(); }

  // Psql runs one SQL statement with psql against database `db`; true on success.
  bool Psql(const std::string& sql, const std::string& db = "postgres") {
    return Run(bin_ + "/psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p " + std::to_string(port_) + " -U postgres -d " +
               db + " -c \"" + sql + "\"");
  }

 private:
  bool Init(std::string* error) {
    tmp_.emplace("gpupack-pg");
    dir_ = tmp_->path();
    if (::geteuid() == 0) {
      if (std::system(("chown nobody " + dir_).c_str()) != 0) {
        *error = "cannot give " + dir_ + " to user nobody";
        return false;
      }
    }
    if (!Run(bin_ + "/initdb -A trust -U postgres -E UTF8 --no-sync -D " + dir_ + "/data > " + dir_ +
             "/initdb.log 2>&1")) {
      *error = "initdb failed: " + ReadFile(dir_ + "/initdb.log");
      return false;
    }
    return true;
  }

  // Run runs a shell command (as nobody when this process is root); true when it exits 0.
  bool Run(const std::string& command) const {
    std::string cmd = command;
    if (::geteuid() == 0) {
      std::string quoted;
      for (char c : command) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      cmd = "runuser -u nobody -- sh -c '" + quoted + "'";
    }
    if (cmd.find(" > ") == std::string::npos && cmd.find(">/dev/null") == std::string::npos)
      cmd += " > /dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
  }

  static std::string SharedDir(const Options& options) {
    const char* env = std::getenv("GPUPACK_TEST_PG");
    if (!options.shared || options.durable || env == nullptr || *env == '\0') return "";
    return std::filesystem::exists(std::string(env) + "/port") ? std::string(env) : std::string();
  }

  static int FreePort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
    ::close(fd);
    return port;
  }

  static std::string ReadFile(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  const Options options_;
  const std::string bin_;
  const std::string shared_dir_;  // the run's shared server's directory; "" for a server of our own
  std::optional<testing_support::TempDir> tmp_;  // tmp_: made by the first Start, removed after the destructor's Stop
  std::string dir_;                               // tmp_'s path; "" before the first Start
  int port_ = 0;
  bool running_ = false;
  int databases_ = 0;
};

// PrivatePostgresTest: a fixture whose suite shares one PrivatePostgres (started once, stopped at the end; under
// ctest the run's shared server). SetUp skips without PostgreSQL's binaries, fails when the server could not
// start, and gives each test a database of its own (uri_), dropped again by TearDown. A fixture that overrides
// SetUp calls this one first and returns when it skipped or failed. A test that stops or restarts its database
// uses OwnServer(): a server of its own, its database in uri_ (the shared one is never stopped).
class PrivatePostgresTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pg_ = new PrivatePostgres(PrivatePostgres::Options{.shared = true});
    start_error_.clear();
    if (pg_->Available() && !pg_->Start(&start_error_)) start_error_ = "cannot start PostgreSQL: " + start_error_;
  }
  static void TearDownTestSuite() {
    delete pg_;
    pg_ = nullptr;
  }
  void SetUp() override {
    if (!pg_->Available()) GTEST_SKIP() << pg_->WhyUnavailable();
    ASSERT_TRUE(start_error_.empty()) << start_error_;
    uri_ = pg_->CreateDatabase();
    ASSERT_FALSE(uri_.empty());
  }
  void TearDown() override {
    if (pg_ != nullptr && pg_->shared() && !own_) pg_->DropDatabase(uri_);
  }

  // OwnServer: a server for this test alone (made on first use; stopped with the test), with a fresh database
  // in uri_; null after a failure (recorded with ADD_FAILURE).
  PrivatePostgres* OwnServer() {
    if (own_) return own_.get();
    if (pg_->shared()) pg_->DropDatabase(uri_);
    own_ = std::make_unique<PrivatePostgres>();
    std::string error;
    if (!own_->Start(&error)) {
      ADD_FAILURE() << "cannot start a PostgreSQL of this test's own: " << error;
      own_.reset();
      return nullptr;
    }
    uri_ = own_->CreateDatabase();
    return own_.get();
  }

  std::unique_ptr<PrivatePostgres> own_;

  static inline PrivatePostgres* pg_ = nullptr;
  static inline std::string start_error_;
  std::string uri_;
};

}  // namespace gpupack::testing
