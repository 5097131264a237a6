// trainctl-coordinator: the cluster's coordinator (DESIGN.md section 1).

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/logging.h"
#include "coordinator/coordinator.h"
#include "coordinator/grpc_service.h"
#include "coordinator/state_store.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "address:port to serve agents, users and ranks on");
ABSL_FLAG(std::string, advertise, "",
          "address:port task processes use to reach this coordinator "
          "(TRAINCTL_COORDINATOR); default: the --listen address");
ABSL_FLAG(std::string, state_dir, "",
          "directory of the SQLite state file; default "
          "$XDG_DATA_HOME/trainctl or ~/.local/share/trainctl");
ABSL_FLAG(absl::Duration, node_timeout, absl::Seconds(10),
          "a node without a heartbeat for this long is lost and its tasks fail");
ABSL_FLAG(absl::Duration, heartbeat, absl::Seconds(1),
          "heartbeat period agents are told to use");
ABSL_FLAG(absl::Duration, stop_grace, absl::Seconds(10),
          "SIGTERM-to-SIGKILL grace period when tasks are stopped");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warn or error");

namespace {

absl::Notification g_shutdown;

void OnSignal(int) { g_shutdown.Notify(); }

std::string DefaultStateDir() {
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) {
    return absl::StrCat(xdg, "/trainctl");
  }
  const char* home = std::getenv("HOME");
  return absl::StrCat(home ? home : "/tmp", "/.local/share/trainctl");
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "trainctl-coordinator --listen 0.0.0.0:50051 --state-dir /var/lib/trainctl");
  absl::ParseCommandLine(argc, argv);
  trainctl::InitLogging("coordinator", absl::GetFlag(FLAGS_log_level));

  // Members in dependency order: clock and store before the core, the core
  // before the services, the services before the server.
  trainctl::RealClock clock;
  std::string state_dir = absl::GetFlag(FLAGS_state_dir);
  if (state_dir.empty()) state_dir = DefaultStateDir();
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) {
    TC_LOG_ERROR("cannot create --state-dir {}: {}", state_dir, ec.message());
    return 1;
  }
  auto store = trainctl::coord::SqliteStateStore::Open(state_dir + "/trainctl.db");
  if (!store.ok()) {
    TC_LOG_ERROR("{}", store.status().ToString());
    return 1;
  }

  trainctl::coord::CoordinatorConfig config;
  config.node_timeout = absl::GetFlag(FLAGS_node_timeout);
  config.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat);
  config.stop_grace = absl::GetFlag(FLAGS_stop_grace);
  const std::string listen = absl::GetFlag(FLAGS_listen);
  config.advertise_address = absl::GetFlag(FLAGS_advertise);
  auto core = trainctl::coord::Coordinator::Create(config, store->get(), &clock);
  if (!core.ok()) {
    TC_LOG_ERROR("cannot load state: {}", core.status().ToString());
    return 1;
  }
  trainctl::coord::GrpcCoordinatorServices services(core->get());
  int port = 0;
  auto server = trainctl::coord::StartCoordinatorServer(services, listen, &port);
  if (!server.ok()) {
    TC_LOG_ERROR("{}", server.status().ToString());
    return 1;
  }
  if (config.advertise_address.empty()) {
    // Port 0 binds a free port; tell tasks the real one.
    std::string host = listen.substr(0, listen.rfind(':'));
    if (host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
    (*core)->SetAdvertiseAddress(absl::StrCat(host, ":", port));
  }
  TC_LOG_INFO("listening on port {}; state in {}/trainctl.db (insecure mode: "
              "no TLS, no authentication)",
              port, state_dir);
  // Machine-readable line for scripts that start us with --listen ...:0.
  std::printf("trainctl-coordinator listening on port %d\n", port);
  std::fflush(stdout);

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  // The clock of the core: timeouts are applied every 100 ms.
  while (!g_shutdown.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    (*core)->Tick();
  }
  TC_LOG_INFO("shutting down");
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  return 0;
}
