// `gpupack keys issue-agent --host NAME --credentials FILE`: a new agent key for one host. It appends a profile
// [agent-NAME] (gpupack_role = agent, gpupack_host = NAME, a random key id and secret) to the server's credentials
// file, checked whole with the server's own reader before it replaces the file (atomically, mode 0600), and prints
// the credentials file the host's agent signs with. The server lets the key register host NAME only (one
// container instance, whose instanceId is NAME), and reads its file at start: restart it to use the key.
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>

#include "base/atomic_file.h"
#include "cli/commands.h"
#include "protocol/field_limits.h"
#include "protocol/sigv4.h"

namespace gpupack::cli {

namespace {

int Usage(const std::string& message) {
  std::fprintf(stderr, "gpupack: %s\n", message.c_str());
  return 2;
}
int Failure(const std::string& message) {
  std::fprintf(stderr, "gpupack: %s\n", message.c_str());
  return 1;
}

// RandomText: `n` characters of `alphabet` (at most 256 characters long), from the kernel's random source.
bool RandomText(size_t n, std::string_view alphabet, std::string& out) {
  out.clear();
  unsigned char buf[64];
  // Rejection sampling: a byte is used only below the largest multiple of the alphabet's size, so every
  // character is equally likely.
  const unsigned limit = 256 - 256 % alphabet.size();
  while (out.size() < n) {
    const ssize_t got = getrandom(buf, sizeof buf, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    for (ssize_t i = 0; i < got && out.size() < n; ++i)
      if (buf[i] < limit) out += alphabet[buf[i] % alphabet.size()];
  }
  return true;
}

// ProfileFor: the profile name of a host's key: "agent-" and the host, with anything but [A-Za-z0-9._-] as '-'.
std::string ProfileFor(const std::string& host) {
  std::string out = "agent-";
  for (char c : host)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '-';
  return out;
}

}  // namespace

void AddKeysFlags(CLI::App& app, KeysFlags& f) {
  app.require_subcommand(1);
  CLI::App* issue = app.add_subcommand(
      "issue-agent",
      "Add an agent key bound to one host to the server's credentials file and print the host's credentials file");
  issue->add_option("--host", f.host, "the host the key is for: its agent's --name (whose default is its host name)")
      ->required();
  issue->add_option("--credentials", f.credentials,
                    "the server's credentials file to add the key to (created, mode 0600, when missing)")
      ->required();
  issue->add_option("--profile", f.profile, "the new profile's name (default: agent-HOST)");
  issue->add_option("--out", f.out,
                    "write the host's credentials file here (created, mode 0600; it must not exist) instead of "
                    "printing it");
}

int RunKeys(const KeysFlags& f) {
  if (Status s = protocol::CheckField(f.host, protocol::kInstanceIdLimit, "--host"); !s.ok())
    return Usage(s.message() + " (the host's agent registers with its --name)");
  const std::string profile = f.profile.empty() ? ProfileFor(f.host) : f.profile;
  std::string text;
  std::error_code ec;
  if (std::filesystem::exists(f.credentials, ec)) {
    auto existing = protocol::LoadCredentialsFile(f.credentials);  // the server's own checks, mode 0600 included
    if (!existing.ok()) return Usage(existing.status().message());
    for (const protocol::Credential& c : *existing)
      if (c.profile == profile)
        return Usage(f.credentials + " already has a profile [" + profile + "] (a key for host " + f.host +
                     "?); remove it to issue a new one, or name another with --profile");
    std::ifstream in(f.credentials, std::ios::binary);
    std::ostringstream all;
    all << in.rdbuf();
    text = all.str();
    if (!text.empty() && text.back() != '\n') text += '\n';
  }
  if (!f.out.empty() && std::filesystem::exists(f.out, ec)) return Usage("--out " + f.out + " exists; choose a new file");
  std::string id, secret;
  if (!RandomText(16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", id) ||
      !RandomText(40, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", secret))
    return Failure(std::string("no random bytes from the kernel: ") + std::strerror(errno));
  id = "AKGP" + id;
  text += "\n# agent key for host " + f.host + " (gpupack keys issue-agent)\n[" + profile +
          "]\naws_access_key_id = " + id + "\naws_secret_access_key = " + secret +
          "\ngpupack_role = agent\ngpupack_host = " + f.host + "\n";
  // The new file must read as the server reads it before it replaces the old one.
  if (auto check = protocol::ParseCredentials(text, f.credentials); !check.ok())
    return Usage(check.status().message());
  const std::string agent_file = "# gpupack agent key for host " + f.host + " (profile [" + profile + "] of " +
                                 f.credentials + "); keep it mode 0600 on that host\n[default]\naws_access_key_id = " +
                                 id + "\naws_secret_access_key = " + secret + "\n";
  if (!f.out.empty()) {
    // Exclusive and owner-only from the start: the secret is never readable by others, not even for a moment.
    const int fd = ::open(f.out.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return Failure("--out " + f.out + ": " + std::strerror(errno));
    const bool written = ::write(fd, agent_file.data(), agent_file.size()) == static_cast<ssize_t>(agent_file.size());
    const bool closed = ::close(fd) == 0;
    if (!written || !closed) return Failure("--out " + f.out + ": could not write it whole");
  }
  if (Status s = WriteFileAtomically(f.credentials, text, 0600); !s.ok()) return Failure(s.message());
  if (f.out.empty()) std::fputs(agent_file.c_str(), stdout);
  std::fprintf(stderr,
               "gpupack: added agent key %s for host %s as profile [%s] of %s. Restart the server to use it (it "
               "reads the file at start); on %s run: gpupack agent --name %s --credentials %s ... (the key is bound "
               "to that name: the server refuses it for any other host)\n",
               id.c_str(), f.host.c_str(), profile.c_str(), f.credentials.c_str(), f.host.c_str(), f.host.c_str(),
               f.out.empty() ? "FILE" : f.out.c_str());
  return 0;
}

}  // namespace gpupack::cli
