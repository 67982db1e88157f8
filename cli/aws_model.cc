// `gpupack aws-model`: installs an ECS service model that knows the GPU-sharing shapes gpupack serves, for the
// AWS CLI and boto3 (botocore) of this user. Their bundled ECS models predate GPU sharing: they refuse
// `sharingStrategy` in RegisterTaskDefinition and drop `gpuDevices` and `gpuSharingStrategy` from answers. Both
// read extra models from ~/.aws/models first (what `aws configure add-model` writes), so the command takes the
// ECS model of the botocore installed here, adds the shapes, and writes it there.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/atomic_file.h"
#include "cli/commands.h"
#include "cli/ecs_model.h"

namespace gpupack::cli {

namespace {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// RunCapture runs `command` through the shell and returns its stdout; false when it fails.
bool RunCapture(const std::string& command, std::string& out) {
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return false;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  return ::pclose(p) == 0;
}

// kBotocoreEcsModel: prints the ECS service model bundled with the botocore that `python` imports (plain or
// gzipped, as newer botocore ships it), its directory on stderr's last line being of no interest.
constexpr const char* kBotocoreEcsModel =
    "import botocore, gzip, os, sys\n"
    "base = os.path.join(os.path.dirname(botocore.__file__), 'data', 'ecs')\n"
    "version = sorted(os.listdir(base))[-1]\n"
    "path = os.path.join(base, version, 'service-2.json')\n"
    "data = open(path).read() if os.path.exists(path) else gzip.open(path + '.gz', 'rt').read()\n"
    "sys.stdout.write(data)\n";

}  // namespace

void AddAwsModelFlags(CLI::App& app, AwsModelFlags& f) {
  app.add_option("--python", f.python,
                 "the Python whose botocore's ECS model is the base (the one boto3 and the AWS CLI use)")
      ->capture_default_str();
  app.add_option("--from", f.from, "an ECS service-2.json (or .json.gz) to start from instead of botocore's");
  app.add_option("--models-dir", f.models_dir, "where to install (default: ~/.aws/models, as aws configure add-model)");
  app.add_flag("--stdout", f.to_stdout, "print the model instead of installing it");
}

int RunAwsModel(const AwsModelFlags& f) {
  auto fail = [](const std::string& m, int code) {
    std::fprintf(stderr, "gpupack: aws-model: %s\n", m.c_str());
    return code;
  };
  std::string text, source;
  if (!f.from.empty()) {
    source = f.from;
    const bool gz = f.from.size() > 3 && f.from.compare(f.from.size() - 3, 3, ".gz") == 0;
    if (gz) {
      if (!RunCapture("gzip -dc " + ShellQuote(f.from), text)) return fail("cannot read " + f.from, 1);
    } else {
      std::ifstream in(f.from, std::ios::binary);
      if (!in) return fail("cannot read " + f.from, 1);
      std::ostringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
  } else {
    source = "the botocore of " + f.python;
    if (!RunCapture(ShellQuote(f.python) + " -c " + ShellQuote(kBotocoreEcsModel), text) || text.empty())
      return fail("cannot read the ECS model of the botocore that " + f.python +
                      " imports: install boto3 (Debian: python3-boto3), pass --python, or --from FILE",
                  1);
  }
  // The model is read as untrusted input (cli/ecs_model.h): a malformed one is refused, never a crash, and its
  // API version, which becomes a directory name, must be a plain date.
  auto model = ReadEcsModel(text, source);
  if (!model.ok()) return fail(model.status().message(), 1);
  const std::string version = (*model)["metadata"]["apiVersion"].get<std::string>();
  const std::vector<std::string> added = AddGpuSharingShapes(*model);
  const std::string out = model->dump(1, ' ', false, ModelJson::error_handler_t::replace);
  if (f.to_stdout) {
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  std::string dir = f.models_dir;
  if (dir.empty()) {
    const char* home = std::getenv("HOME");
    if (!home || !*home) return fail("HOME is not set: pass --models-dir", 2);
    dir = std::string(home) + "/.aws/models";
  }
  namespace fs = std::filesystem;
  const fs::path target = ModelPath(dir, *model);
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) return fail("cannot create " + target.parent_path().string() + ": " + ec.message(), 1);
  // 0666 less the umask, as an ofstream made it.
  if (Status s = WriteFileAtomically(target.string(), out + '\n', 0666); !s.ok())
    return fail("cannot install " + target.string() + ": " + s.message(), 1);
  std::string what;
  for (const auto& a : added) what += (what.empty() ? "" : ", ") + a;
  std::printf("gpupack aws-model: installed %s\n  from %s (ECS API %s)\n  added %s\n", target.string().c_str(),
              source.c_str(), version.c_str(), what.empty() ? "nothing (already there)" : what.c_str());
  std::printf("The AWS CLI and boto3 of this user read it from now on; remove the file to go back.\n");
  return 0;
}

}  // namespace gpupack::cli
