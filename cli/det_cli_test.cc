// Runs the det CLI in-process against a fake master: a real gRPC server on 127.0.0.1
// with canned replies.
#include "cli/det_cli.h"
#include "cli/command_words.h"

#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/api.grpc.pb.h"

namespace det::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kConfigYaml[] =
    "name: mnist\n"
    "searcher:\n"
    "  name: single\n";

// Canned master: one experiment (id 7) with two trials; trial 1 has three log lines.
// Experiment 7 turns `final_state` after `ticks_to_end` GetExperiment calls.
class FakeApi final : public v1::Api::Service {
 public:
  FakeApi() {
    v1::Experiment& e = experiment_;
    e.set_id(7);
    e.set_name("mnist");
    e.set_owner("alice");
    e.set_state(v1::STATE_ACTIVE);
    e.set_config_yaml(kConfigYaml);
    e.set_start_time_ms(1700000000000);
    e.set_num_trials(2);
    e.set_progress(0.5);
    e.set_searcher("single");

    v1::Trial& t1 = trials_.emplace_back();
    t1.set_id(1);
    t1.set_experiment_id(7);
    t1.set_state(v1::STATE_RUNNING);
    t1.set_total_batches(200);
    t1.set_restarts(1);
    (*t1.mutable_validation_summary())["validation_loss"].set_last(0.125);
    (*t1.mutable_validation_summary())["accuracy"].set_last(0.9);
    v1::Trial& t2 = trials_.emplace_back();
    t2.set_id(2);
    t2.set_experiment_id(7);
    t2.set_state(v1::STATE_QUEUED);
    t2.set_pending_reason("waiting for 1 slot");

    const char* lines[][3] = {{"0", "stdout", "epoch 1"},
                              {"1", "stderr", "warning: slow"},
                              {"0", "stdout", "epoch 2\n"}};
    for (int i = 0; i < 3; ++i) {
      v1::LogLine& line = logs_.emplace_back();
      line.set_id(10 + i);
      line.set_trial_id(1);
      line.set_rank(std::stoi(lines[i][0]));
      line.set_stream(lines[i][1]);
      line.set_message(lines[i][2]);
      line.set_time_ms(1700000000000 + 1500 * i);
    }
  }

  void set_final_state(v1::State state, int ticks) {
    absl::MutexLock lock(&mu_);
    final_state_ = state;
    ticks_to_end_ = ticks;
  }
  void set_create_error(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    create_error_ = status;
  }
  v1::CreateExperimentRequest last_create() {
    absl::MutexLock lock(&mu_);
    return last_create_;
  }
  v1::ListExperimentsRequest last_list() {
    absl::MutexLock lock(&mu_);
    return last_list_;
  }
  std::vector<v1::GetTrialLogsRequest> log_requests() {
    absl::MutexLock lock(&mu_);
    return log_requests_;
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  int64_t killed() {
    absl::MutexLock lock(&mu_);
    return killed_;
  }

  grpc::Status Login(grpc::ServerContext*, const v1::LoginRequest* request,
                     v1::LoginResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    response->set_token(absl::StrCat("token-of-", request->username()));
    response->mutable_user()->set_username(request->username());
    response->set_expires_ms(1700000000000);
    return grpc::Status::OK;
  }

  grpc::Status GetMasterInfo(grpc::ServerContext*, const v1::GetMasterInfoRequest*,
                             v1::GetMasterInfoResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    response->set_version("0.1.0");
    response->set_cluster_id("c-123");
    response->set_cluster_name("test");
    response->set_database("sqlite");
    response->set_scheduler("fair_share");
    return grpc::Status::OK;
  }

  grpc::Status CreateExperiment(grpc::ServerContext*,
                                const v1::CreateExperimentRequest* request,
                                v1::CreateExperimentResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    last_create_ = *request;
    if (!create_error_.ok()) return create_error_;
    *response->mutable_experiment() = experiment_;
    response->add_warnings("searcher.max_length is large");
    return grpc::Status::OK;
  }

  grpc::Status ListExperiments(grpc::ServerContext*, const v1::ListExperimentsRequest* request,
                               v1::ListExperimentsResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    last_list_ = *request;
    *response->add_experiments() = experiment_;
    v1::Experiment* done = response->add_experiments();
    done->set_id(12);
    done->set_name("a-much-longer-experiment-name");
    done->set_state(v1::STATE_COMPLETED);
    done->set_progress(1);
    done->set_num_trials(16);
    response->set_total(2);
    return grpc::Status::OK;
  }

  grpc::Status GetExperiment(grpc::ServerContext*, const v1::GetExperimentRequest* request,
                             v1::GetExperimentResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (request->id() != 7) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("experiment ", request->id(), " not found"));
    }
    if (ticks_to_end_ > 0 && --ticks_to_end_ == 0) {
      experiment_.set_state(final_state_);
      if (final_state_ == v1::STATE_ERROR) experiment_.set_error("trial 1 failed");
      for (v1::Trial& t : trials_) t.set_state(final_state_);
    }
    *response->mutable_experiment() = experiment_;
    for (const v1::Trial& t : trials_) *response->add_trials() = t;
    return grpc::Status::OK;
  }

  grpc::Status KillExperiment(grpc::ServerContext*, const v1::KillExperimentRequest* request,
                              v1::KillExperimentResponse*) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    killed_ = request->id();
    return grpc::Status::OK;
  }

  grpc::Status DeleteExperiment(grpc::ServerContext*, const v1::DeleteExperimentRequest* request,
                                v1::DeleteExperimentResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (request->id() != 7) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("experiment ", request->id(), " not found"));
    }
    response->set_checkpoints(2);
    response->set_gc_task("gc-3.0");
    return grpc::Status::OK;
  }

  grpc::Status KillTrial(grpc::ServerContext*, const v1::KillTrialRequest* request,
                         v1::KillTrialResponse*) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (request->id() == 2) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "trial 2 is COMPLETED");
    }
    return grpc::Status::OK;
  }

  grpc::Status GetMasterLogs(grpc::ServerContext*, const v1::GetMasterLogsRequest* request,
                             v1::GetMasterLogsResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    last_master_logs_ = *request;
    const char* messages[] = {"experiment 7 created", "experiment 7 deleted (2 trial(s))"};
    for (int i = 0; i < 2; ++i) {
      v1::MasterLogLine* line = response->add_lines();
      line->set_id(6 + i);
      line->set_time_ms(1700000000000 + i);
      line->set_level("info");
      line->set_component("master");
      line->set_message(messages[i]);
    }
    response->set_dropped(5);
    response->set_capacity(10000);
    return grpc::Status::OK;
  }

  v1::GetMasterLogsRequest last_master_logs() {
    absl::MutexLock lock(&mu_);
    return last_master_logs_;
  }

  grpc::Status GetTrial(grpc::ServerContext*, const v1::GetTrialRequest* request,
                        v1::GetTrialResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    for (const v1::Trial& t : trials_) {
      if (t.id() == request->id()) {
        *response->mutable_trial() = t;
        return grpc::Status::OK;
      }
    }
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "trial not found");
  }

  // Lines after `after_id` (two per page); done once the trial is no longer running and
  // every line went out.
  grpc::Status GetTrialLogs(grpc::ServerContext*, const v1::GetTrialLogsRequest* request,
                            v1::GetTrialLogsResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    log_requests_.push_back(*request);
    int sent = 0;
    bool more = false;
    for (const v1::LogLine& line : logs_) {
      if (line.trial_id() != request->trial_id() || line.id() <= request->after_id()) continue;
      if (request->has_rank() && line.rank() != request->rank()) continue;
      if (sent == 2) {
        more = true;
        break;
      }
      *response->add_lines() = line;
      ++sent;
    }
    bool running = true;
    for (const v1::Trial& t : trials_) {
      if (t.id() == request->trial_id()) running = t.state() == v1::STATE_RUNNING ||
                                                   t.state() == v1::STATE_QUEUED;
    }
    // A still-running trial "ends" once a follower has read everything.
    if (!more && request->wait_ms() > 0 && ticks_to_end_ < 0) running = false;
    response->set_done(!more && !running);
    return grpc::Status::OK;
  }

  // Experiment 7 becomes an adaptive search: a searcher metric, hyperparameters, one
  // trial stopped early, and checkpoints with metrics.
  void MakeSearch() {
    absl::MutexLock lock(&mu_);
    experiment_.set_config_yaml(
        "name: mnist\nsearcher:\n  name: adaptive_asha\n  metric: validation_loss\n"
        "  smaller_is_better: true\n");
    trials_[0].set_hparams_json(R"({"lr": 0.1000000000000000055511151231257827, "layers": 2,
                                   "optimizer": {"name": "sgd"}})");
    (*trials_[0].mutable_validation_summary())["validation_loss"].set_min(0.125);
    (*trials_[0].mutable_validation_summary())["validation_loss"].set_count(3);
    (*trials_[0].mutable_validation_summary())["diag/params_hash"].set_last(4.2e12);
    trials_[1].set_state(v1::STATE_COMPLETED);
    trials_[1].clear_pending_reason();
    trials_[1].set_hparams_json(R"({"lr": 0.01, "layers": 4, "optimizer": {"name": "adam"}})");
    (*trials_[1].mutable_validation_summary())["validation_loss"].set_min(0.5);
    (*trials_[1].mutable_validation_summary())["validation_loss"].set_last(0.5);
    (*trials_[1].mutable_validation_summary())["validation_loss"].set_count(1);
    trials_[1].mutable_search()->set_stopped_early(true);
    trials_[1].mutable_search()->set_stop_reason("rung 0: not in the top 1/4");
    const double losses[] = {0.5, 0.125, 0.25};
    for (int i = 0; i < 3; ++i) {
      v1::Checkpoint& c = checkpoints_.emplace_back();
      c.set_uuid(absl::StrCat("ckpt-", i));
      c.set_trial_id(1);
      c.set_total_batches(100 * (i + 1));
      (*c.mutable_metrics())["validation_loss"] = losses[i];
      (*c.mutable_metrics())["diag/params_hash"] = 4.2e12;
    }
    checkpoints_.emplace_back().set_uuid("ckpt-no-metric");
  }

  grpc::Status ListCheckpoints(grpc::ServerContext*, const v1::ListCheckpointsRequest*,
                               v1::ListCheckpointsResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    for (const v1::Checkpoint& c : checkpoints_) *response->add_checkpoints() = c;
    return grpc::Status::OK;
  }

  grpc::Status ListAgents(grpc::ServerContext*, const v1::ListAgentsRequest*,
                          v1::ListAgentsResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    v1::Agent* a = response->add_agents();
    a->set_id("agent-0");
    a->set_hostname("node-a");
    a->set_connected(true);
    a->set_enabled(true);
    a->set_resource_pool("default");
    v1::Slot* busy = a->add_slots();
    busy->set_allocation_id("alloc-1");
    busy->set_enabled(true);
    a->add_slots()->set_enabled(true);
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  v1::Experiment experiment_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Trial> trials_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::LogLine> logs_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Checkpoint> checkpoints_ ABSL_GUARDED_BY(mu_);
  v1::State final_state_ ABSL_GUARDED_BY(mu_) = v1::STATE_COMPLETED;
  // > 0: GetExperiment calls until the final state; -1: never.
  int ticks_to_end_ ABSL_GUARDED_BY(mu_) = -1;
  grpc::Status create_error_ ABSL_GUARDED_BY(mu_);
  v1::CreateExperimentRequest last_create_ ABSL_GUARDED_BY(mu_);
  v1::ListExperimentsRequest last_list_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::GetTrialLogsRequest> log_requests_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t killed_ ABSL_GUARDED_BY(mu_) = 0;
  v1::GetMasterLogsRequest last_master_logs_ ABSL_GUARDED_BY(mu_);
};

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// A port on 127.0.0.1 that nothing listens on (bound, then released).
int UnusedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class DetCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);

    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(tmp ? tmp : "/tmp") + "/det_cli_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }

  void TearDown() override {
    server_->Shutdown();
    std::filesystem::remove_all(dir_);
  }

  // Runs `det -m ADDRESS args...`; fills out_ and err_.
  int Det(std::vector<std::string> args) {
    args.insert(args.begin(), {"-m", address_});
    return DetRaw(std::move(args));
  }
  int DetRaw(const std::vector<std::string>& args) {
    std::ostringstream out, err;
    int code = RunDet(args, out, err);
    out_ = out.str();
    err_ = err.str();
    return code;
  }

  void WriteFile(const std::string& relative, const std::string& content) {
    std::filesystem::path path = std::filesystem::path(dir_) / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << content;
  }

  FakeApi fake_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::string dir_;
  std::string out_;
  std::string err_;
};

TEST_F(DetCliTest, ExperimentListTable) {
  ASSERT_EQ(Det({"experiment", "list"}), 0) << err_;
  EXPECT_EQ(err_, "");
  std::vector<std::string> lines = Lines(out_);
  ASSERT_EQ(lines.size(), 4u) << out_;
  EXPECT_THAT(lines[0], StartsWith(" ID | Owner | Name                          | State     |"
                                   " Progress | Trials | Start Time           | End Time"));
  EXPECT_THAT(lines[1], StartsWith("----+-------+-------------------------------+-----------+"));
  EXPECT_EQ(lines[2],
            " 7  | alice | mnist                         | ACTIVE    | 50.0%    | 2      |"
            " 2023-11-14T22:13:20Z |");
  EXPECT_EQ(lines[3],
            " 12 |       | a-much-longer-experiment-name | COMPLETED | 100.0%   | 16     |"
            "                      |");
  EXPECT_EQ(fake_.last_list().user(), "");
}

TEST_F(DetCliTest, ExperimentListByUser) {
  ASSERT_EQ(Det({"experiment", "list", "--user", "alice"}), 0) << err_;
  EXPECT_EQ(fake_.last_list().user(), "alice");
}

TEST_F(DetCliTest, ExperimentAliasAndMasterUrlForms) {
  ASSERT_EQ(DetRaw({"-m", "http://" + address_ + "/", "e", "list"}), 0) << err_;
  EXPECT_THAT(out_, HasSubstr("mnist"));
  ASSERT_EQ(DetRaw({"e", "list", "--master", address_}), 0) << err_;
  EXPECT_THAT(out_, HasSubstr("mnist"));
}

TEST_F(DetCliTest, MasterFromEnvironment) {
  ::setenv("DET_MASTER", address_.c_str(), 1);
  int code = DetRaw({"master", "info"});
  ::unsetenv("DET_MASTER");
  ASSERT_EQ(code, 0) << err_;
  EXPECT_THAT(out_, HasSubstr("Master:       " + address_ + "\n"));
  EXPECT_THAT(out_, HasSubstr("Version:      0.1.0\n"));
  EXPECT_THAT(out_, HasSubstr("Scheduler:    fair_share\n"));
}

TEST_F(DetCliTest, ExperimentListJson) {
  ASSERT_EQ(Det({"experiment", "list", "--json"}), 0) << err_;
  v1::ListExperimentsResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_, &parsed).ok()) << out_;
  ASSERT_EQ(parsed.experiments_size(), 2);
  EXPECT_EQ(parsed.experiments(0).name(), "mnist");
  EXPECT_EQ(parsed.experiments(0).owner(), "alice");
  EXPECT_EQ(parsed.total(), 2);
  EXPECT_THAT(out_, HasSubstr("\"config_yaml\": "));
  EXPECT_THAT(out_, HasSubstr("\"end_time_ms\": \"0\""));  // defaults printed
  EXPECT_THAT(out_, HasSubstr("\"num_trials\": 2"));       // proto field names
}

TEST_F(DetCliTest, ExperimentDescribe) {
  ASSERT_EQ(Det({"experiment", "describe", "7"}), 0) << err_;
  EXPECT_THAT(out_, HasSubstr("ID:         7\n"));
  EXPECT_THAT(out_, HasSubstr("State:      ACTIVE\n"));
  EXPECT_THAT(out_, HasSubstr("Owner:      alice\n"));
  EXPECT_THAT(out_, HasSubstr("\nTrials:\n"
                              " Trial ID | State   | Restarts | Batches | Pending Reason"
                              "     | accuracy | validation_loss\n"));
  EXPECT_THAT(out_, HasSubstr(" 1        | RUNNING | 1        | 200     |"
                              "                    | 0.9      | 0.125\n"));
  EXPECT_THAT(out_, HasSubstr(" 2        | QUEUED  | 0        | 0       | waiting for 1 slot |          |\n"));
}

TEST_F(DetCliTest, ExperimentDescribeJson) {
  ASSERT_EQ(Det({"e", "describe", "7", "--json"}), 0) << err_;
  v1::GetExperimentResponse parsed;
  // The message's fields, and per trial "hparams" (an object) beside hparams_json.
  google::protobuf::util::JsonParseOptions lenient;
  lenient.ignore_unknown_fields = true;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_, &parsed, lenient).ok()) << out_;
  EXPECT_EQ(parsed.experiment().id(), 7);
  EXPECT_EQ(parsed.trials_size(), 2);
  EXPECT_THAT(out_, HasSubstr("\"hparams\": {}"));
}

TEST_F(DetCliTest, ExperimentDescribeUnknownKeepsMastersMessage) {
  EXPECT_EQ(Det({"experiment", "describe", "99"}), 1);
  EXPECT_EQ(err_, "det: experiment 99 not found\n");
  EXPECT_EQ(out_, "");
}

TEST_F(DetCliTest, ExperimentConfigPrintsYamlExactly) {
  ASSERT_EQ(Det({"experiment", "config", "7"}), 0) << err_;
  EXPECT_EQ(out_, kConfigYaml);
}

TEST_F(DetCliTest, ExperimentKill) {
  ASSERT_EQ(Det({"experiment", "kill", "7"}), 0) << err_;
  EXPECT_EQ(out_, "Killed experiment 7\n");
  EXPECT_EQ(fake_.killed(), 7);
}

TEST_F(DetCliTest, CreateSendsConfigAndContext) {
  WriteFile("exp.yaml", kConfigYaml);
  WriteFile("model/train.py", "print('hi')\n");
  WriteFile("model/.git/config", "x");
  const std::string config = dir_ + "/exp.yaml";
  ASSERT_EQ(Det({"experiment", "create", config, dir_ + "/model"}), 0) << err_;
  EXPECT_EQ(out_, "Created experiment 7\nWarning: searcher.max_length is large\n");
  v1::CreateExperimentRequest request = fake_.last_create();
  EXPECT_EQ(request.config_yaml(), kConfigYaml);
  EXPECT_EQ(request.config_path(), config);
  ASSERT_EQ(request.context_size(), 1);
  EXPECT_EQ(request.context(0).path(), "train.py");
  EXPECT_EQ(request.context(0).content(), "print('hi')\n");
}

TEST_F(DetCliTest, CreateShowsValidationError) {
  WriteFile("exp.yaml", "searcher: {name: bogus}\n");
  fake_.set_create_error(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      "exp.yaml:1: searcher.name: unknown searcher 'bogus'"));
  EXPECT_EQ(Det({"e", "create", dir_ + "/exp.yaml"}), 1);
  EXPECT_EQ(err_, "det: exp.yaml:1: searcher.name: unknown searcher 'bogus'\n");
}

TEST_F(DetCliTest, CreateWithMissingConfigFileNamesIt) {
  const std::string missing = dir_ + "/missing.yaml";
  EXPECT_NE(Det({"experiment", "create", missing}), 0);
  EXPECT_EQ(err_, "det: config file '" + missing + "' does not exist\n");
  EXPECT_EQ(out_, "");
  EXPECT_EQ(fake_.calls(), 0);
}

TEST_F(DetCliTest, CreateFollowPrintsLogsAndSummary) {
  WriteFile("exp.yaml", kConfigYaml);
  fake_.set_final_state(v1::STATE_COMPLETED, 3);
  ASSERT_EQ(Det({"experiment", "create", "-f", dir_ + "/exp.yaml"}), 0) << err_;
  EXPECT_THAT(out_, StartsWith("Created experiment 7\n"));
  EXPECT_THAT(out_, HasSubstr("[trial 1] [rank 0] epoch 1\n"
                              "[trial 1] [rank 1] [stderr] warning: slow\n"
                              "[trial 1] [rank 0] epoch 2\n"));
  EXPECT_EQ(out_.find("epoch 1"), out_.rfind("epoch 1"));  // each line once
  EXPECT_THAT(out_, HasSubstr("Experiment 7 ended: COMPLETED\n"));
  EXPECT_THAT(out_, HasSubstr("| accuracy | validation_loss\n"));
  EXPECT_THAT(out_, HasSubstr("| 0.9      | 0.125\n"));
}

TEST_F(DetCliTest, CreateFollowFailsWhenExperimentErrors) {
  WriteFile("exp.yaml", kConfigYaml);
  fake_.set_final_state(v1::STATE_ERROR, 2);
  EXPECT_EQ(Det({"experiment", "create", "--follow", dir_ + "/exp.yaml"}), 1);
  EXPECT_THAT(out_, HasSubstr("Experiment 7 ended: ERROR\n"));
  EXPECT_EQ(err_, "det: experiment 7 ended in ERROR: trial 1 failed\n");
}

TEST_F(DetCliTest, TrialDescribe) {
  ASSERT_EQ(Det({"trial", "describe", "1"}), 0) << err_;
  EXPECT_THAT(out_, HasSubstr("Trial ID:        1\n"));
  EXPECT_THAT(out_, HasSubstr("State:           RUNNING\n"));
  EXPECT_THAT(out_, HasSubstr(" validation | validation_loss | 0   | 0   | 0.125 | 0\n"));
  ASSERT_EQ(Det({"t", "describe", "2", "--json"}), 0) << err_;
  v1::GetTrialResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_, &parsed).ok()) << out_;
  EXPECT_EQ(parsed.trial().pending_reason(), "waiting for 1 slot");
}

TEST_F(DetCliTest, TrialLogsPagesWithCursor) {
  ASSERT_EQ(Det({"trial", "logs", "1"}), 0) << err_;
  EXPECT_EQ(out_,
            "[rank 0] epoch 1\n"
            "[rank 1] [stderr] warning: slow\n"
            "[rank 0] epoch 2\n");
  std::vector<v1::GetTrialLogsRequest> requests = fake_.log_requests();
  ASSERT_EQ(requests.size(), 3u);  // 2 lines, 1 line, none
  EXPECT_EQ(requests[1].after_id(), 11);
  EXPECT_EQ(requests[2].after_id(), 12);
  EXPECT_EQ(requests[0].wait_ms(), 0);
}

TEST_F(DetCliTest, TrialLogsFollowWithRank) {
  ASSERT_EQ(Det({"t", "logs", "1", "-f", "--rank", "0"}), 0) << err_;
  EXPECT_EQ(out_, "[rank 0] epoch 1\n[rank 0] epoch 2\n");
  std::vector<v1::GetTrialLogsRequest> requests = fake_.log_requests();
  ASSERT_FALSE(requests.empty());
  EXPECT_TRUE(requests[0].has_rank());
  EXPECT_EQ(requests[0].rank(), 0);
  EXPECT_EQ(requests[0].wait_ms(), 5000);
}

TEST_F(DetCliTest, AgentList) {
  ASSERT_EQ(Det({"agent", "list"}), 0) << err_;
  EXPECT_EQ(out_,
            " ID      | Hostname | Slots | Used | Connected | Enabled | Draining | Pool\n"
            "---------+----------+-------+------+-----------+---------+----------+---------\n"
            " agent-0 | node-a   | 2     | 1    | yes       | yes     | no       | default\n");
  ASSERT_EQ(Det({"a", "list", "--json"}), 0) << err_;
  v1::ListAgentsResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_, &parsed).ok()) << out_;
  EXPECT_EQ(parsed.agents(0).hostname(), "node-a");
  EXPECT_THAT(out_, HasSubstr("\"resource_pool\": \"default\""));
}

TEST_F(DetCliTest, MasterInfoJson) {
  ASSERT_EQ(Det({"master", "info", "--json"}), 0) << err_;
  EXPECT_THAT(out_, HasSubstr("\"cluster_id\": \"c-123\""));
  EXPECT_THAT(out_, HasSubstr("\"start_time_ms\": \"0\""));
}

TEST_F(DetCliTest, UnreachableMasterNamesTheAddress) {
  const std::string address = absl::StrCat("127.0.0.1:", UnusedPort());
  EXPECT_EQ(DetRaw({"-m", address, "experiment", "list"}), 1);
  EXPECT_THAT(err_, StartsWith("det: cannot reach the master at " + address + ": "));
  EXPECT_EQ(Lines(err_).size(), 1u) << err_;
  EXPECT_EQ(out_, "");
}

TEST_F(DetCliTest, WebPortIsRecognisedAndTheGrpcPortSuggested) {
  httplib::Server web;
  web.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content("hi", "text/plain"); });
  int port = web.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  // Bound and listening already: connections queue until the accept loop runs.
  std::thread serve([&] { web.listen_after_bind(); });
  int code = DetRaw({"-m", absl::StrCat("127.0.0.1:", port), "master", "info"});
  web.stop();
  serve.join();
  EXPECT_EQ(code, 1);
  EXPECT_THAT(err_, HasSubstr("that port speaks HTTP/1: it is the master's web and REST port; "
                              "det talks gRPC to the master's grpc_listen port"))
      << err_;
}

// Determined users give -m the port they open the web page on: det reaches the gRPC port
// below it (web = gRPC + 1), keeps the session under the gRPC address and finds it again.
TEST_F(DetCliTest, WebPortLeadsToTheGrpcPortBelowIt) {
  httplib::Server web;
  web.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content("hi", "text/plain"); });
  int grpc_port = std::stoi(address_.substr(address_.rfind(':') + 1));
  // The port above the fake master's may be taken: then move the fake master.
  for (int attempt = 0; !web.bind_to_port("127.0.0.1", grpc_port + 1); ++attempt) {
    ASSERT_LT(attempt, 20) << "no free pair of adjacent ports";
    server_->Shutdown();
    server_.reset();
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &grpc_port);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = absl::StrCat("127.0.0.1:", grpc_port);
  }
  std::thread serve([&] { web.listen_after_bind(); });
  const std::string web_address = absl::StrCat("127.0.0.1:", grpc_port + 1);
  int code = DetRaw({"-m", web_address, "master", "info"});
  EXPECT_EQ(code, 0) << err_;
  EXPECT_THAT(out_, HasSubstr("Version:      0.1.0\n"));
  // A login through the web port keeps the session under the gRPC address.
  const std::string home = dir_ + "/home";
  std::filesystem::create_directories(home);
  const char* old_home = std::getenv("HOME");
  const std::string saved_home = old_home != nullptr ? old_home : "";
  ::setenv("HOME", home.c_str(), 1);
  ::setenv("DET_PASSWORD", "secret-pass", 1);
  code = DetRaw({"-m", web_address, "user", "login", "alice"});
  ::unsetenv("DET_PASSWORD");
  if (old_home != nullptr) ::setenv("HOME", saved_home.c_str(), 1); else ::unsetenv("HOME");
  web.stop();
  serve.join();
  EXPECT_EQ(code, 0) << err_;
  EXPECT_THAT(out_, HasSubstr(absl::StrCat("Logged in as alice on ", address_)));
  std::ifstream auth(home + "/.det/auth.json");
  std::stringstream text;
  text << auth.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr(absl::StrCat("\"", address_, "\"")));
  EXPECT_THAT(text.str(), Not(HasSubstr(web_address)));
}

TEST_F(DetCliTest, HttpsMeansTlsNeverPlaintext) {
  // The fake master serves plaintext gRPC: an https:// address must not reach it.
  EXPECT_EQ(DetRaw({"-m", "https://" + address_, "master", "info"}), 1);
  EXPECT_THAT(err_, HasSubstr("no TLS session with the master")) << err_;
  EXPECT_EQ(fake_.calls(), 0);
  // http:// (or no scheme) stays plaintext.
  EXPECT_EQ(DetRaw({"-m", "http://" + address_, "master", "info"}), 0) << err_;
}

TEST_F(DetCliTest, BadMasterAddress) {
  EXPECT_EQ(DetRaw({"-m", "host:notaport", "master", "info"}), 1);
  EXPECT_EQ(err_, "det: invalid master address 'host:notaport': bad port 'notaport'\n");
}

TEST_F(DetCliTest, BadCommandLinesGetCli11Messages) {
  EXPECT_NE(Det({"experiment", "frobnicate"}), 0);
  EXPECT_NE(err_, "");
  EXPECT_NE(Det({"experiment", "list", "--no-such-flag"}), 0);
  EXPECT_THAT(err_, HasSubstr("--no-such-flag"));
  EXPECT_NE(Det({"experiment", "describe", "not-a-number"}), 0);
  EXPECT_NE(err_, "");
  EXPECT_EQ(fake_.calls(), 0);
}

TEST_F(DetCliTest, UnknownCommandWordIsNamedWithTheNearestOne) {
  EXPECT_NE(Det({"experiment", "lsit"}), 0);
  EXPECT_THAT(err_, StartsWith("det: unknown command 'lsit' for 'det experiment'; did you "
                               "mean 'list'?\ncommands: create, list (ls), "));
  EXPECT_NE(Det({"expriment", "list"}), 0);
  EXPECT_THAT(err_, StartsWith("det: unknown command 'expriment' for 'det'; did you mean "
                               "'experiment'?"));
  // Nothing close: no guess, but the list of commands.
  EXPECT_NE(Det({"trial", "zzzzzz", "1"}), 0);
  EXPECT_THAT(err_, StartsWith("det: unknown command 'zzzzzz' for 'det trial'\ncommands: "));
  EXPECT_THAT(err_, HasSubstr("describe"));
  // An option's value is not a command word.
  EXPECT_NE(Det({"--master", address_, "e", "frob"}), 0);
  EXPECT_THAT(err_, HasSubstr("unknown command 'frob' for 'det experiment'"));
  // A group without its command names what it takes.
  EXPECT_NE(Det({"e"}), 0);
  EXPECT_THAT(err_, StartsWith("det: 'det experiment' needs a command: create, list (ls)"));
  EXPECT_EQ(fake_.calls(), 0);
}

TEST_F(DetCliTest, NearestWord) {
  EXPECT_EQ(NearestWord("lsit", {"list", "logs", "kill"}), "list");
  EXPECT_EQ(NearestWord("describ", {"describe", "delete"}), "describe");
  EXPECT_EQ(NearestWord("act", {"activate", "archive"}), "activate");
  EXPECT_EQ(NearestWord("zz", {"ls", "lt"}), "");
  EXPECT_EQ(NearestWord("KILL", {"kill"}), "kill");
}

// Every Determined command det offers resolves, its aliases included (what a user's
// muscle memory types).
TEST_F(DetCliTest, DeterminedCommandsAndAliasesResolve) {
  const std::vector<std::vector<std::string>> commands = {
      {"experiment", "create"}, {"e", "list"}, {"e", "ls"}, {"e", "describe"},
      {"e", "config"}, {"e", "kill"}, {"e", "pause"}, {"e", "activate"},
      {"e", "list-trials"}, {"e", "lt"}, {"e", "list-checkpoints"}, {"e", "lc"},
      {"e", "logs"}, {"e", "wait"}, {"e", "set", "slots"}, {"trial", "describe"},
      {"t", "logs"}, {"agent", "list"}, {"agent", "enable"}, {"agent", "disable"},
      {"slot", "list"}, {"task", "list"}, {"job", "list"}, {"job", "update"},
      {"master", "info"}, {"user", "login"}, {"user", "logout"}, {"user", "whoami"},
      {"user", "create"}, {"user", "list"}, {"template", "list"}, {"tpl", "set"},
      {"tpl", "describe"}, {"tpl", "remove"}, {"resource-pool", "list"},
      {"deploy", "local", "cluster-up"}, {"deploy", "local", "cluster-down"},
      {"e", "archive"}, {"e", "unarchive"}, {"e", "label", "add"}, {"e", "label", "remove"},
      {"e", "set", "description"}, {"e", "set", "name"}, {"e", "set", "priority"},
      {"checkpoint", "list"}, {"checkpoint", "ls"}, {"checkpoint", "describe"},
      {"master", "config"}, {"e", "set", "gc-policy"}, {"checkpoint", "delete"}, {"tpl", "rm"},
      {"user", "link-with-agent-user"},
      {"experiment", "delete"}, {"e", "delete"}, {"e", "set", "max-slots"}, {"trial", "kill"},
      {"t", "kill"}, {"checkpoint", "download"}, {"master", "logs"}, {"e", "list", "-u", "x"},
      {"e", "list", "--user", "x"}};
  for (std::vector<std::string> words : commands) {
    words.push_back("--help");
    EXPECT_EQ(DetRaw(words), 0) << absl::StrJoin(words, " ") << ": " << err_;
    EXPECT_THAT(out_, HasSubstr("Usage")) << absl::StrJoin(words, " ");
  }
}

TEST_F(DetCliTest, DeleteAsksForYesWithoutATerminal) {
  // Tests run without a terminal on stdin: nothing is asked, nothing sent.
  EXPECT_EQ(Det({"e", "delete", "7"}), 1);
  EXPECT_THAT(err_, HasSubstr("Delete experiment 7 with its trials, metrics, logs and checkpoint "
                              "files: not confirmed (stdin is not a terminal); pass --yes"));
  EXPECT_EQ(fake_.calls(), 0);
  ASSERT_EQ(Det({"e", "delete", "7", "--yes"}), 0) << err_;
  EXPECT_EQ(out_,
            "Deleting experiment 7: the files of 2 checkpoint(s) first (task gc-3.0 on an agent; "
            "det task list), then its records\n");
  ASSERT_EQ(Det({"experiment", "delete", "7", "-y", "--json"}), 0) << err_;
  EXPECT_THAT(out_, HasSubstr("\"gc_task\": \"gc-3.0\""));
  EXPECT_EQ(Det({"e", "delete", "8", "-y"}), 1);
  EXPECT_THAT(err_, HasSubstr("experiment 8 not found"));
}

TEST_F(DetCliTest, TrialKillAndMaxSlotsAndMasterLogs) {
  ASSERT_EQ(Det({"t", "kill", "1"}), 0) << err_;
  EXPECT_EQ(out_, "Killing trial 1 (CANCELED once its workers exited)\n");
  EXPECT_EQ(Det({"trial", "kill", "2"}), 1);
  EXPECT_THAT(err_, HasSubstr("trial 2 is COMPLETED"));

  const int before = fake_.calls();
  EXPECT_EQ(Det({"e", "set", "max-slots", "7"}), 1);
  EXPECT_THAT(err_, HasSubstr("max-slots: give N (0: unlimited) or --clear"));
  EXPECT_NE(Det({"e", "set", "max-slots", "7", "2", "--clear"}), 0);
  EXPECT_EQ(fake_.calls(), before);

  ASSERT_EQ(Det({"master", "logs", "--tail", "2"}), 0) << err_;
  EXPECT_EQ(fake_.last_master_logs().tail(), 2);
  EXPECT_EQ(out_,
            "2023-11-14T22:13:20.000Z info [master] experiment 7 created\n"
            "2023-11-14T22:13:20.001Z info [master] experiment 7 deleted (2 trial(s))\n");
  EXPECT_EQ(err_, "(5 older lines not kept: the master keeps its last 10000)\n");
  ASSERT_EQ(Det({"master", "logs", "--json"}), 0) << err_;
  EXPECT_EQ(Lines(out_).size(), 2u);
  EXPECT_THAT(Lines(out_)[1], HasSubstr("\"message\":\"experiment 7 deleted (2 trial(s))\""));
}

TEST_F(DetCliTest, ListTrialsOfASearchShowsHyperparametersBestAndEarlyStops) {
  fake_.MakeSearch();
  ASSERT_EQ(Det({"e", "lt", "7"}), 0) << err_;
  std::vector<std::string> lines = Lines(out_);
  ASSERT_EQ(lines.size(), 4u) << out_;
  EXPECT_EQ(lines[0],
            " Trial ID | Best | State     | Restarts | Batches | layers | lr   | optimizer.name |"
            " Best validation_loss | Stopped Early              | accuracy");
  EXPECT_EQ(lines[2],
            " 1        | *    | RUNNING   | 1        | 200     | 2      | 0.1  | sgd            |"
            " 0.125                |                            | 0.9");
  EXPECT_EQ(lines[3],
            " 2        |      | COMPLETED | 0        | 0       | 4      | 0.01 | adam           |"
            " 0.5                  | rung 0: not in the top 1/4 |");
  EXPECT_THAT(out_, Not(HasSubstr("diag/")));
  ASSERT_EQ(Det({"e", "list-trials", "7", "--diagnostics"}), 0) << err_;
  EXPECT_THAT(out_, HasSubstr("diag/params_hash"));

  ASSERT_EQ(Det({"e", "describe", "7"}), 0) << err_;
  EXPECT_THAT(out_, HasSubstr("Best trial: 1 (validation_loss 0.125, smaller is better)\n"));
  ASSERT_EQ(Det({"e", "describe", "7", "--json"}), 0) << err_;
  EXPECT_THAT(out_, HasSubstr("\"hparams\": {"));
  EXPECT_THAT(out_, HasSubstr("\"name\": \"sgd\""));
}

TEST_F(DetCliTest, ListCheckpointsBestRanksBySearcherMetric) {
  fake_.MakeSearch();
  ASSERT_EQ(Det({"e", "lc", "7", "--best", "2"}), 0) << err_;
  std::vector<std::string> lines = Lines(out_);
  ASSERT_EQ(lines.size(), 4u) << out_;
  EXPECT_THAT(lines[2], StartsWith(" ckpt-1 "));
  EXPECT_THAT(lines[3], StartsWith(" ckpt-2 "));
  EXPECT_THAT(out_, Not(HasSubstr("diag/")));
  ASSERT_EQ(Det({"e", "list-checkpoints", "7"}), 0) << err_;
  EXPECT_EQ(Lines(out_).size(), 6u) << out_;  // all four, unranked
  EXPECT_NE(Det({"e", "lc", "7", "--best", "0"}), 0);
}

TEST_F(DetCliTest, ListCheckpointsBestNeedsASearcherMetric) {
  EXPECT_EQ(Det({"e", "lc", "7", "--best", "1"}), 1);
  EXPECT_EQ(err_, "det: --best: experiment 7's config names no searcher.metric to rank by\n");
}

TEST_F(DetCliTest, ExperimentWaitEndsWithTheFinalState) {
  fake_.set_final_state(v1::STATE_COMPLETED, 2);
  ASSERT_EQ(Det({"e", "wait", "7", "--interval", "0.1"}), 0) << err_;
  EXPECT_EQ(out_, "Experiment 7 ended: COMPLETED\n");
}

TEST_F(DetCliTest, ExperimentWaitFailsWhenItErrored) {
  fake_.set_final_state(v1::STATE_ERROR, 1);
  EXPECT_EQ(Det({"e", "wait", "7", "--interval", "0.1"}), 1);
  EXPECT_EQ(out_, "Experiment 7 ended: ERROR\n");
  EXPECT_EQ(err_, "det: experiment 7 ended in ERROR: trial 1 failed\n");
}

TEST_F(DetCliTest, ExperimentLogsPrintsEveryTrialsLines) {
  ASSERT_EQ(Det({"e", "logs", "7"}), 0) << err_;
  EXPECT_EQ(out_,
            "[trial 1] [rank 0] epoch 1\n"
            "[trial 1] [rank 1] [stderr] warning: slow\n"
            "[trial 1] [rank 0] epoch 2\n");
}

TEST_F(DetCliTest, TrialLogsHeadTailAndTimestamps) {
  ASSERT_EQ(Det({"t", "logs", "1", "--head", "2"}), 0) << err_;
  EXPECT_EQ(out_, "[rank 0] epoch 1\n[rank 1] [stderr] warning: slow\n");
  ASSERT_EQ(Det({"t", "logs", "1", "--tail", "1"}), 0) << err_;
  EXPECT_EQ(out_, "[rank 0] epoch 2\n");
  ASSERT_EQ(Det({"t", "logs", "1", "--tail", "2", "--timestamps"}), 0) << err_;
  EXPECT_EQ(out_,
            "2023-11-14T22:13:21.500Z [rank 1] [stderr] warning: slow\n"
            "2023-11-14T22:13:23.000Z [rank 0] epoch 2\n");
  EXPECT_NE(Det({"t", "logs", "1", "--head", "1", "-f"}), 0);
  EXPECT_THAT(err_, HasSubstr("excludes"));
}

TEST_F(DetCliTest, HelpGoesToOut) {
  EXPECT_EQ(DetRaw({"--help"}), 0);
  EXPECT_THAT(out_, HasSubstr("experiment"));
  EXPECT_THAT(out_, HasSubstr("deploy"));
}

}  // namespace
}  // namespace det::cli
