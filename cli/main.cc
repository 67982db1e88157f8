// gpupack: one binary, subcommands (server, agent, plan, up, aws-model, keys, backup, migrate). Wiring only; the work is in the libraries.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <functional>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.h"

namespace {

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "gpupack: %s\n", message.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpupack: a cluster scheduler for shared NVIDIA GPUs that speaks the Amazon ECS API"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(gpupack::cli::kVersion));

  gpupack::cli::ServerFlags server_flags;
  CLI::App* server = app.add_subcommand("server", "Run the control plane: ECS API, placement, state in SQLite");
  gpupack::cli::AddServerFlags(*server, server_flags);

  gpupack::cli::AgentFlags agent_flags;
  CLI::App* agent = app.add_subcommand("agent", "Run the node agent: GPUs, the MPS daemon, containers, the channel");
  gpupack::cli::AddAgentFlags(*agent, agent_flags);

  gpupack::cli::UpFlags up_flags;
  CLI::App* up = app.add_subcommand("up", "Run a local cluster: the server on loopback plus agents with simulated GPUs");
  gpupack::cli::AddUpFlags(*up, up_flags);

  gpupack::cli::PlanFlags plan_flags;
  CLI::App* plan = app.add_subcommand("plan", "Replay a workload against a fleet with the scheduler's own placement");
  gpupack::cli::AddPlanFlags(*plan, plan_flags);

  gpupack::cli::AwsModelFlags aws_model_flags;
  CLI::App* aws_model = app.add_subcommand(
      "aws-model", "Install an ECS model with gpupack's GPU-sharing fields for the AWS CLI and boto3 (~/.aws/models)");
  gpupack::cli::AddAwsModelFlags(*aws_model, aws_model_flags);

  gpupack::cli::KeysFlags keys_flags;
  CLI::App* keys = app.add_subcommand("keys", "Issue keys: `keys issue-agent --host NAME` for one GPU host's agent");
  gpupack::cli::AddKeysFlags(*keys, keys_flags);

  gpupack::cli::BackupFlags backup_flags;
  CLI::App* backup = app.add_subcommand(
      "backup", "Copy the server's database to a new file, consistently, also while the server runs");
  gpupack::cli::AddBackupFlags(*backup, backup_flags);

  gpupack::cli::MigrateFlags migrate_flags;
  CLI::App* migrate = app.add_subcommand(
      "migrate", "Copy the whole state from one database to another (SQLite to PostgreSQL, back, or a restore)");
  gpupack::cli::AddMigrateFlags(*migrate, migrate_flags);

  // An unknown command is named (CLI11 alone would only say that a subcommand is required).
  if (argc > 1 && argv[1][0] != '-') {
    const auto all = std::function<bool(const CLI::App*)>([](const CLI::App*) { return true; });
    bool known = false;
    std::string names;
    for (const CLI::App* sub : std::as_const(app).get_subcommands(all)) {
      known = known || sub->check_name(argv[1]);
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known)
      return Fail("unknown command '" + std::string(argv[1]) + "' (the commands are " + names + "; see gpupack --help)",
                  2);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Fail(std::string(e.what()) + " (see gpupack --help)", 2);
  }

  if (*server) return gpupack::cli::RunServer(server_flags);
  if (*backup) return gpupack::cli::RunBackup(backup_flags);
  if (*migrate) return gpupack::cli::RunMigrate(migrate_flags);
  if (*agent) return gpupack::cli::RunAgent(agent_flags);
  if (*up) return gpupack::cli::RunUp(up_flags);
  if (*plan) return gpupack::cli::RunPlan(plan_flags);
  if (*aws_model) return gpupack::cli::RunAwsModel(aws_model_flags);
  if (*keys) return gpupack::cli::RunKeys(keys_flags);
  return Fail("no command given (see gpupack --help)", 2);
}
