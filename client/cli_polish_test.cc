// The CLI polish checks: shell completion generated from the
// command line's own definition, --help examples on every command, -o json
// on every read command, and the progress line of `wait`.

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/cli.h"
#include "client/completion.h"
#include "client/testing/cli_harness.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace trainctl::cli {
namespace {

namespace v1 = ::trainctl::v1;
using ::testing::_;
using ::testing::AllOf;
using ::testing::DoAll;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Return;
using ::testing::SetArgPointee;
using ::testing::StrictMock;

// What the test's own walk of the CLI11 App finds: every command path
// ("sweep describe") and, per path, its option names and footer.
struct AppFacts {
  std::vector<std::string> paths;
  std::set<std::string> subcommand_names;
  std::set<std::string> option_names;
  std::vector<std::pair<std::string, std::string>> footers;  // path, footer
  // path -> its options' long names.
  std::vector<std::pair<std::string, std::set<std::string>>> options_by_path;
};

void WalkApp(const CLI::App& app, const std::string& path, AppFacts* facts) {
  std::set<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& l : opt->get_lnames()) {
      facts->option_names.insert("--" + l);
      names.insert("--" + l);
    }
    for (const std::string& s : opt->get_snames()) {
      facts->option_names.insert("-" + s);
    }
  }
  facts->options_by_path.emplace_back(path, names);
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name().empty()) continue;  // an option group
    if (sub->get_group().empty()) continue;  // hidden
    const std::string sub_path =
        path.empty() ? sub->get_name() : absl::StrCat(path, " ", sub->get_name());
    facts->paths.push_back(sub_path);
    facts->subcommand_names.insert(sub->get_name());
    facts->footers.emplace_back(sub_path, sub->get_footer());
    WalkApp(*sub, sub_path, facts);
  }
}

// Runs command lines against a strict mock stub (any RPC a test does not
// expect fails it); time is a FakeClock. Also records what WalkApp finds in
// the App of the last Run.
class CliPolishTest : public CliHarness<> {
 protected:
  void SetUp() override { unsetenv("TRAINCTL_COORDINATOR"); }

  int Run(std::vector<std::string> args, bool progress = false,
          int terminal_width = 0) {
    options_.progress = progress;
    options_.terminal_width = terminal_width;
    facts_ = AppFacts();
    options_.inspect_app = [this](const CLI::App& app) {
      WalkApp(app, "", &facts_);
    };
    return CliHarness::Run(std::move(args));
  }

  // Writes `text` to a file in a fresh temp dir and returns its path.
  std::string WriteTemp(const std::string& name, const std::string& text) {
    if (dir_.empty()) {
      char tmpl[] = "/tmp/cli_polish_test.XXXXXX";
      dir_ = mkdtemp(tmpl);
    }
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  AppFacts facts_;
  std::string dir_;
};

// Runs `command` with /bin/sh; returns its exit status and stdout.
std::pair<int, std::string> Shell(const std::string& command) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// ------------------------------------------------------------ completion

TEST_F(CliPolishTest, CompletionBash_MentionsEverySubcommandAndFlag) {
  ASSERT_EQ(Run({"completion", "bash"}), 0) << err_.str();
  const std::string script = out_.str();
  // The walk found the commands that exist today (more may come).
  ASSERT_THAT(facts_.paths, testing::IsSupersetOf({"submit", "list", "describe",
                                                   "logs", "cancel", "wait",
                                                   "nodes", "sweep describe",
                                                   "completion"}));
  for (const std::string& name : facts_.subcommand_names) {
    EXPECT_THAT(script, HasSubstr(name)) << "subcommand " << name;
  }
  // The script's words: names appear in single-quoted, space-separated
  // lists.
  std::set<std::string> words = absl::StrSplit(script, absl::ByAnyChar(" '\"\n|"),
                                               absl::SkipEmpty());
  for (const std::string& name : facts_.option_names) {
    EXPECT_EQ(words.count(name), 1u) << "option " << name;
  }
}

TEST_F(CliPolishTest, CompletionZsh_MentionsEverySubcommandAndFlag) {
  ASSERT_EQ(Run({"completion", "zsh"}), 0) << err_.str();
  const std::string script = out_.str();
  EXPECT_THAT(script, HasSubstr("#compdef trainctl"));
  for (const std::string& name : facts_.subcommand_names) {
    EXPECT_THAT(script, HasSubstr("'" + name + ":")) << "subcommand " << name;
  }
  for (const std::string& name : facts_.option_names) {
    EXPECT_THAT(script, HasSubstr("'" + name + ":")) << "option " << name;
  }
}

TEST_F(CliPolishTest, CompletionBash_ParsesWithBashN) {
  ASSERT_EQ(Run({"completion", "bash"}), 0);
  const std::string path = WriteTemp("trainctl.bash", out_.str());
  auto [status, output] = Shell("bash -n " + path + " 2>&1");
  EXPECT_EQ(status, 0) << output;
}

TEST_F(CliPolishTest, CompletionZsh_ParsesWithZshN) {
  if (Shell("command -v zsh").first != 0) {
    GTEST_SKIP() << "zsh not installed (deploy/install-deps.sh installs it)";
  }
  ASSERT_EQ(Run({"completion", "zsh"}), 0);
  const std::string path = WriteTemp("_trainctl", out_.str());
  auto [status, output] = Shell("zsh -n " + path + " 2>&1");
  EXPECT_EQ(status, 0) << output;
}

// What the bash completion offers for the words of a command line (the
// last one is the word being completed).
std::string BashComplete(const std::string& script_path,
                         const std::vector<std::string>& words) {
  std::vector<std::string> quoted;
  for (const std::string& w : words) quoted.push_back("'" + w + "'");
  auto [status, output] = Shell(absl::StrFormat(
      "bash -c 'source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _trainctl; "
      "echo \"${COMPREPLY[*]}\"' 2>&1",
      script_path, absl::StrReplaceAll(absl::StrJoin(quoted, " "), {{"'", "'\\''"}}),
      words.size() - 1));
  return std::string(absl::StripTrailingAsciiWhitespace(output));
}

TEST_F(CliPolishTest, CompletionBash_CompletesWhatTheParserAccepts) {
  ASSERT_EQ(Run({"completion", "bash"}), 0);
  const std::string path = WriteTemp("trainctl.bash", out_.str());
  // Subcommands, at each level.
  EXPECT_EQ(BashComplete(path, {"trainctl", "de"}), "describe");
  EXPECT_EQ(BashComplete(path, {"trainctl", "sweep", "d"}), "describe");
  // Options of the subcommand, and the program's own (--coordinator).
  EXPECT_EQ(BashComplete(path, {"trainctl", "submit", "--gpu-f"}),
            "--gpu-fraction");
  EXPECT_EQ(BashComplete(path, {"trainctl", "list", "--coo"}), "--coordinator");
  // Fixed values: -o table|json|yaml, --state names.
  EXPECT_EQ(BashComplete(path, {"trainctl", "nodes", "-o", ""}), "table json yaml");
  EXPECT_EQ(BashComplete(path, {"trainctl", "list", "--state", "run"}),
            "running");
  // An option's value is not taken for a subcommand ("--name list").
  EXPECT_EQ(BashComplete(path, {"trainctl", "submit", "--name", "list", "--wa"}),
            "--wait");
  // After --: the job's command; nothing of ours (file names instead).
  EXPECT_EQ(BashComplete(path, {"trainctl", "submit", "--", "py"}), "");
}

TEST_F(CliPolishTest, CompleteIds_OneListJobs_JobIdsNewestFirstThenEachSweepOnce) {
  EXPECT_CALL(stub_, ListJobs(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Proto<v1::ListJobsResponse>(R"pb(
                        jobs { id: 3 spec { sweep_id: "sw-a" } }
                        jobs { id: 7 }
                        jobs { id: 5 spec { sweep_id: "sw-a" } }
                      )pb")),
                      Return(grpc::Status::OK)));
  ASSERT_EQ(Run({kIdsCommandName}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "job 7\njob 5\njob 3\nsweep sw-a\n");
  // Hidden: neither in --help nor in the completion scripts.
  ASSERT_EQ(Run({"--help"}), 0);
  EXPECT_THAT(out_.str(), Not(HasSubstr(kIdsCommandName)));
  ASSERT_EQ(Run({"completion", "bash"}), 0);
  EXPECT_THAT(out_.str(), Not(HasSubstr(absl::StrCat("'", kIdsCommandName, "'"))));
}

TEST_F(CliPolishTest, CompletionBash_JobAndSweepIds_FromOneCachedCall) {
  ASSERT_EQ(Run({"completion", "bash"}), 0);
  const std::string script = WriteTemp("trainctl.bash", out_.str());
  // A `trainctl` on PATH that answers __complete-ids and counts its calls.
  const std::string calls = dir_ + "/calls";
  const std::string fake = WriteTemp(
      "trainctl", absl::StrCat("#!/bin/sh\necho x >> ", calls,
                               "\nprintf 'job 12\\njob 11\\njob 7\\nsweep sw-a\\nsweep sw-b\\n'\n"));
  ASSERT_EQ(chmod(fake.c_str(), 0755), 0);
  // Five completions in one shell, as Tab presses in one terminal.
  auto [status, output] = Shell(absl::StrFormat(
      "PATH=%s:$PATH bash -c 'source %s\n"
      "c() { COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); _trainctl; echo \"${COMPREPLY[*]}\"; }\n"
      "c trainctl describe 1; c trainctl logs \"\"; c trainctl sweep describe sw-\n"
      "c trainctl cancel --sweep sw-a; c trainctl cancel 7 1' 2>&1",
      dir_, script));
  ASSERT_EQ(status, 0) << output;
  EXPECT_EQ(output, "12 11\n12 11 7\nsw-a sw-b\nsw-a\n12 11\n");
  std::ifstream in(calls);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "x\n") << "one __complete-ids call for five completions";
  // No ids where the argument is not one (submit's command, --name).
  EXPECT_EQ(BashComplete(script, {"trainctl", "submit", "--name", "1"}), "");
}

TEST_F(CliPolishTest, Completion_UnknownShell_UsageError) {
  EXPECT_EQ(Run({"completion", "fish"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("fish"));
}

TEST(WalkCommandsTest, WalkCommands_Subcommand_HasOwnAndProgramOptions) {
  CLI::App app("test", "prog");
  app.fallthrough();
  std::string address, output;
  bool wait = false;
  app.add_option("--address", address, "where");
  CLI::App* get = app.add_subcommand("get", "get a thing");
  get->add_option("-o,--output", output, "format")
      ->check(CLI::IsMember({"table", "json"}));
  get->add_flag("--wait", wait, "wait for it");
  get->add_option("ID", address, "positional: not offered");

  std::vector<CompletionCommand> commands = WalkCommands(app);
  ASSERT_EQ(commands.size(), 2u);
  EXPECT_TRUE(commands[0].path.empty());
  ASSERT_EQ(commands[0].subcommands.size(), 1u);
  EXPECT_EQ(commands[0].subcommands[0].first, "get");
  EXPECT_EQ(commands[0].subcommands[0].second, "get a thing");
  const CompletionCommand& get_cmd = commands[1];
  EXPECT_EQ(get_cmd.path, std::vector<std::string>{"get"});
  std::vector<std::string> names;
  for (const CompletionOption& o : get_cmd.options) {
    names.push_back(absl::StrJoin(o.names, ","));
    if (o.names.back() == "--output") {
      EXPECT_TRUE(o.takes_value);
      EXPECT_EQ(o.choices, (std::vector<std::string>{"table", "json"}));
    }
    if (o.names.back() == "--wait") {
      EXPECT_FALSE(o.takes_value);
    }
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"-h,--help", "-o,--output", "--wait",
                                      "--address"}));
}

// ------------------------------------------------------------ --help

TEST_F(CliPolishTest, Help_EveryCommand_HasAnExample) {
  ASSERT_EQ(Run({"completion", "bash"}), 0);
  ASSERT_FALSE(facts_.footers.empty());
  for (const auto& [path, footer] : facts_.footers) {
    EXPECT_THAT(footer, HasSubstr("Example:")) << "trainctl " << path;
    EXPECT_THAT(footer, HasSubstr("trainctl ")) << "trainctl " << path;
  }
}

TEST_F(CliPolishTest, Help_NestedCommand_PrintsItsUsageAndExample) {
  ASSERT_EQ(Run({"help", "sweep", "describe"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), AllOf(HasSubstr("trainctl sweep describe"),
                                HasSubstr("--output"), HasSubstr("Example:")));
}

TEST_F(CliPolishTest, Help_UnknownCommand_UsageErrorNamingIt) {
  EXPECT_EQ(Run({"help", "frobnicate"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("frobnicate"));
}

// ------------------------------------------------------------ -o json

// The commands that only change things or stream bytes; every other
// command reads state and must offer -o json.
const std::set<std::string>& NotReadCommands() {
  static const auto* kSet = new std::set<std::string>{
      "submit", "sweep", "cancel", "sweep cancel", "wait",
      "node",  // only its subcommands act (each has -o json)
      "logs",  // raw bytes of a rank's log, as written
      "report",  // sends metrics from inside a task
      "completion", "help",
      "token",  // a group: each of its commands has -o json
      "top",  // a live view (if present); its data is `nodes -o json`
      // Interactive sessions: a remote command's bytes, or a forwarded
      // port's.
      "exec", "shell", "attach", "port-forward"};
  return *kSet;
}

TEST_F(CliPolishTest, Json_EveryReadCommand_HasOutputJson) {
  ASSERT_EQ(Run({"completion", "bash"}), 0);
  for (const auto& [path, names] : facts_.options_by_path) {
    if (path.empty() || NotReadCommands().count(path) > 0) continue;
    EXPECT_EQ(names.count("--output"), 1u)
        << "trainctl " << path << " reads state but has no -o json";
  }
}

// One output model: every command that prints state takes -o json and
// -o yaml (the same data; yaml is the json's, JsonToYaml).
TEST_F(CliPolishTest, Output_EveryReadCommand_TakesJsonAndYaml) {
  ASSERT_EQ(Run({"completion", "bash"}), 0);
  const std::string script = WriteTemp("trainctl.bash", out_.str());
  for (const auto& [path, names] : facts_.options_by_path) {
    if (path.empty() || names.count("--output") == 0) continue;
    // `top -o json` is a stream, one JSON frame per line (NDJSON): a YAML of
    // it would be no document.
    if (path == "top") continue;
    std::vector<std::string> words = {"trainctl"};
    for (absl::string_view w : absl::StrSplit(path, ' ')) words.emplace_back(w);
    words.push_back("-o");
    words.push_back("");
    const std::string values = BashComplete(script, words);
    EXPECT_THAT(values, HasSubstr("json")) << "trainctl " << path;
    EXPECT_THAT(values, HasSubstr("yaml")) << "trainctl " << path;
  }
}

// Runs `args` (ending in -o json) and parses the output back into `T`.
template <typename T>
void ExpectJsonParsesAs(CliPolishTest* test, int status, const std::string& out) {
  ASSERT_EQ(status, 0);
  T parsed;
  auto s = google::protobuf::util::JsonStringToMessage(out, &parsed);
  EXPECT_TRUE(s.ok()) << s.ToString() << "\n" << out;
}

TEST_F(CliPolishTest, Json_ReadCommands_PrintValidJson) {
  auto jobs = Proto<v1::ListJobsResponse>(R"pb(
    jobs { id: 2 spec { sweep_id: "sw-1" params { key: "lr" value: "0.1" } } }
    jobs { id: 1 spec { name: "plain" } attempt_token: "secret" }
  )pb");
  EXPECT_CALL(stub_, ListJobs(_, _, _))
      .WillRepeatedly(DoAll(SetArgPointee<2>(jobs), Return(grpc::Status::OK)));
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Proto<v1::GetJobResponse>(
                          "job { id: 1 attempt_token: \"secret\" }")),
                      Return(grpc::Status::OK)));
  EXPECT_CALL(stub_, ListNodes(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Proto<v1::ListNodesResponse>(
                          "nodes { node { name: \"n1\" gpus { index: 0 } } }")),
                      Return(grpc::Status::OK)));

  int status = Run({"list", "-o", "json"});
  ExpectJsonParsesAs<v1::ListJobsResponse>(this, status, out_.str());
  status = Run({"describe", "1", "-o", "json"});
  ExpectJsonParsesAs<v1::GetJobResponse>(this, status, out_.str());
  EXPECT_THAT(out_.str(), Not(HasSubstr("secret")));
  status = Run({"nodes", "-o", "json"});
  ExpectJsonParsesAs<v1::ListNodesResponse>(this, status, out_.str());
  status = Run({"sweep", "describe", "sw-1", "-o", "json"});
  ExpectJsonParsesAs<v1::ListJobsResponse>(this, status, out_.str());

  // sweep list -o json: the table's data, one entry per sweep, states as
  // describe spells them.
  status = Run({"sweep", "list", "-o", "json"});
  v1::SweepList sweeps;
  ASSERT_EQ(status, 0);
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &sweeps).ok())
      << out_.str();
  ASSERT_EQ(sweeps.sweeps_size(), 1);
  EXPECT_EQ(sweeps.sweeps(0).sweep_id(), "sw-1");
  EXPECT_EQ(sweeps.sweeps(0).trials(), 1);
  EXPECT_EQ(sweeps.sweeps(0).by_state().count("JOB_STATE_PENDING"), 1u);
}

// ------------------------------------------------------------ table widths

// Every line of `text` is at most `width` columns wide.
void ExpectFits(const std::string& text, int width) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    EXPECT_LE(static_cast<int>(line.size()), width) << line;
  }
}

TEST_F(CliPolishTest, ListAndNodes_Widths60And120_EveryLineFits) {
  auto jobs = Proto<v1::ListJobsResponse>(absl::StrFormat(
      R"pb(
        jobs {
          id: 1042
          kind: JOB_KIND_GANG
          state: JOB_STATE_PENDING
          spec { name: "llama-7b-finetune-lr3e-4-bs128-warmup2000" nodes: 2 gpus_per_node: 8 }
          reason: "waiting for 16 GPUs on 2 nodes: 9 free; the head of the queue holds a reservation"
          submit_time_ms: %d
        }
        jobs {
          id: 1041
          kind: JOB_KIND_EXPERIMENT
          state: JOB_STATE_RUNNING
          spec { name: "mnist" gpu_fraction: 0.25 }
          submit_time_ms: %d
          start_time_ms: %d
        }
      )pb",
      kNowMs - 300'000, kNowMs - 3'720'000, kNowMs - 3'660'000));
  auto nodes = Proto<v1::ListNodesResponse>(R"pb(
    nodes {
      node {
        name: "gpu-node-17.rack-b.cluster.example"
        state: NODE_STATE_READY
        gpus { index: 0 name: "NVIDIA H100 80GB HBM3" memory_total_bytes: 85899345920
               memory_used_bytes: 12884901888 utilization_pct: 97 temperature_c: 71 power_w: 612 }
      }
      gpu_tasks { tasks { job_id: 1042 rank: 3 } tasks { job_id: 1041 } }
    }
  )pb");
  EXPECT_CALL(stub_, ListJobs(_, _, _))
      .WillRepeatedly(DoAll(SetArgPointee<2>(jobs), Return(grpc::Status::OK)));
  EXPECT_CALL(stub_, ListNodes(_, _, _))
      .WillRepeatedly(DoAll(SetArgPointee<2>(nodes), Return(grpc::Status::OK)));
  for (int width : {60, 120}) {
    SCOPED_TRACE(width);
    ASSERT_EQ(Run({"list"}, /*progress=*/false, width), 0);
    ExpectFits(out_.str(), width);
    EXPECT_THAT(out_.str(), AllOf(HasSubstr("1042"), HasSubstr("pending"),
                                  HasSubstr("llama"), HasSubstr("waiting")));
    ASSERT_EQ(Run({"nodes"}, /*progress=*/false, width), 0);
    ExpectFits(out_.str(), width);
    EXPECT_THAT(out_.str(), AllOf(HasSubstr("gpu-no"), HasSubstr("97%"),
                                  HasSubstr("ready")));
  }
  // At 120 every column is there; the name and reason share what is left.
  ASSERT_EQ(Run({"list"}, /*progress=*/false, 120), 0);
  EXPECT_THAT(out_.str(), AllOf(HasSubstr("llama-7b-finetune-lr3e-4"),
                                HasSubstr("ATTEMPT"), HasSubstr("RUNTIME")));
  ASSERT_EQ(Run({"nodes"}, /*progress=*/false, 120), 0);
  EXPECT_THAT(out_.str(), AllOf(HasSubstr("gpu-node-17.rack-b.cluster.example"),
                                HasSubstr("71C"), HasSubstr("612W")));
}

// ------------------------------------------------------------ progress

v1::WaitJobResponse WaitResponse(const std::string& job_text, bool done) {
  auto response = Proto<v1::WaitJobResponse>("job {" + job_text + "}");
  response.set_done(done);
  return response;
}

// Two polls find the job pending, then running (the fake clock moves 65 s
// between them), the third finds it done.
void ExpectPendingRunningDone(StrictMock<v1::MockCoordinatorStub>& stub,
                              FakeClock& clock, std::vector<int64_t>* polls) {
  EXPECT_CALL(stub, WaitJob(_, _, _))
      .WillOnce([&clock, polls](auto*, const v1::WaitJobRequest& r,
                                v1::WaitJobResponse* out) {
        polls->push_back(r.timeout_ms());
        *out = WaitResponse(
            "id: 42 state: JOB_STATE_PENDING reason: \"waiting for 8 GPUs\"",
            false);
        clock.Advance(absl::Seconds(5));
        return grpc::Status::OK;
      })
      .WillOnce([&clock, polls](auto*, const v1::WaitJobRequest& r,
                                v1::WaitJobResponse* out) {
        polls->push_back(r.timeout_ms());
        *out = WaitResponse("id: 42 state: JOB_STATE_RUNNING attempt: 1", false);
        clock.Advance(absl::Seconds(60));
        return grpc::Status::OK;
      })
      .WillOnce([polls](auto*, const v1::WaitJobRequest& r,
                        v1::WaitJobResponse* out) {
        polls->push_back(r.timeout_ms());
        *out = WaitResponse("id: 42 state: JOB_STATE_SUCCEEDED", true);
        return grpc::Status::OK;
      });
}

TEST_F(CliPolishTest, Wait_Progress_DrawsStateAndElapsedThenClearsIt) {
  std::vector<int64_t> polls;
  ExpectPendingRunningDone(stub_, clock_, &polls);
  EXPECT_EQ(Run({"wait", "42"}, /*progress=*/true, /*terminal_width=*/80), 0);
  // Each poll redraws the line in place; the summary follows a cleared line.
  EXPECT_EQ(err_.str(),
            "\r\033[K| job 42 pending 5s: waiting for 8 GPUs"
            "\r\033[K/ job 42 running 1m5s (attempt 1)"
            "\r\033[Kjob 42 succeeded\n");
  // Polls of 1 s keep the line current.
  EXPECT_EQ(polls, (std::vector<int64_t>{1000, 1000, 1000}));
  EXPECT_EQ(out_.str(), "");
}

TEST_F(CliPolishTest, Wait_ProgressNarrowTerminal_LineNeverWraps) {
  std::vector<int64_t> polls;
  ExpectPendingRunningDone(stub_, clock_, &polls);
  EXPECT_EQ(Run({"wait", "42"}, /*progress=*/true, /*terminal_width=*/30), 0);
  for (absl::string_view line : absl::StrSplit(err_.str(), "\r\033[K")) {
    EXPECT_LE(line.size(), 29u) << line;
  }
}

TEST_F(CliPolishTest, Wait_NoTerminal_NoProgressLineAndLongPolls) {
  std::vector<int64_t> polls;
  ExpectPendingRunningDone(stub_, clock_, &polls);
  EXPECT_EQ(Run({"wait", "42"}, /*progress=*/false, /*terminal_width=*/80), 0);
  EXPECT_EQ(err_.str(), "job 42 succeeded\n");
  EXPECT_EQ(polls[0], 30000);
}

TEST_F(CliPolishTest, SubmitWait_Progress_IdOnStdoutLineOnStderr) {
  v1::SubmitJobResponse submitted;
  submitted.set_job_id(42);
  EXPECT_CALL(stub_, SubmitJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(submitted), Return(grpc::Status::OK)));
  std::vector<int64_t> polls;
  ExpectPendingRunningDone(stub_, clock_, &polls);
  EXPECT_EQ(Run({"submit", "--wait", "--", "python", "train.py"},
                /*progress=*/true, /*terminal_width=*/80),
            0);
  EXPECT_EQ(out_.str(), "42\n");
  EXPECT_THAT(err_.str(), HasSubstr("\r\033[K/ job 42 running 1m5s"));
}

}  // namespace
}  // namespace trainctl::cli
