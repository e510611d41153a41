// The REST API against a real, in-process master (SQLite in a temp dir, gRPC and HTTP on
// 127.0.0.1 port 0). The test plays the agent through the master's AgentHandler and the
// worker through the real gRPC WorkerService.
#include "master/http/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <zlib.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/clock/clock.h"
#include "common/config/daemon_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/http/response_encoding.h"
#include "master/server/master.h"
#include "master/testing/master_testing.h"
#include "nlohmann/json.hpp"
#include "proto/api.grpc.pb.h"
#include "proto/worker.grpc.pb.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr char kAdminPassword[] = "correct horse 'battery' \"staple\"";

// Protobuf's JSON writes int64 as strings.
int64_t Int(const json& j) {
  if (j.is_number()) return j.get<int64_t>();
  int64_t v = -1;
  if (j.is_string() && absl::SimpleAtoi(j.get<std::string>(), &v)) return v;
  return -1;
}

using testing::ExperimentYaml;
using testing::Sync;

struct HttpReply {
  int status = 0;
  json body;
  std::string text;
};

class RestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("rest_");
    config_ = testing::LoopbackMasterConfig(dir_);
    config_.http_listen = "127.0.0.1:0";
    config_.admin_password = kAdminPassword;
    StartMaster();
    token_ = Login("admin", kAdminPassword);
    ASSERT_FALSE(token_.empty());
  }

  void TearDown() override {
    http_.reset();
    if (master_) master_->Shutdown();
  }

  // Starts the master on config_ (the same database after a restart); a fresh HTTP client.
  void StartMaster() {
    auto m = Master::Start(config_, clock_);
    ASSERT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
    const std::string& addr = master_->http_address();
    size_t colon = addr.rfind(':');
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(addr.substr(colon + 1), &port)) << addr;
    host_ = addr.substr(0, colon);
    port_ = port;
    http_ = std::make_unique<httplib::Client>(host_, port_);
    http_->set_read_timeout(60, 0);
  }

  // Logs in through REST; the token, or "" on failure.
  std::string Login(const std::string& user, const std::string& password) {
    HttpReply r = Post("/api/v1/auth/login",
                       json{{"username", user}, {"password", password}}.dump(), "");
    if (r.status != 200) return "";
    return r.body.value("token", "");
  }

  HttpReply Send(const std::string& method, const std::string& path, const std::string& body,
                 const std::string& token) {
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    httplib::Result res =
        method == "GET"      ? http_->Get(path.c_str(), headers)
        : method == "PUT"    ? http_->Put(path.c_str(), headers, body, "application/json")
        : method == "DELETE" ? http_->Delete(path.c_str(), headers, body, "application/json")
        : method == "PATCH"  ? http_->Patch(path.c_str(), headers, body, "application/json")
                             : http_->Post(path.c_str(), headers, body, "application/json");
    HttpReply r;
    if (!res) {
      ADD_FAILURE() << method << " " << path << ": " << httplib::to_string(res.error());
      return r;
    }
    r.status = res->status;
    r.text = res->body;
    r.body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    return r;
  }
  HttpReply Get(const std::string& path) { return Send("GET", path, "", token_); }
  HttpReply Post(const std::string& path, const std::string& body) {
    return Send("POST", path, body, token_);
  }
  HttpReply Post(const std::string& path, const std::string& body, const std::string& token) {
    return Send("POST", path, body, token);
  }

  int64_t CreateExperiment(const std::string& name, int slots = 1) {
    json body = {{"config_yaml", ExperimentYaml(name, slots)}, {"config_path", "rest.yaml"}};
    HttpReply r = Post("/api/v1/experiments", body.dump());
    EXPECT_EQ(r.status, 200) << r.text;
    return Int(r.body["experiment"]["id"]);
  }

  // Registers agent `id` with `slots` cpu slots, still running the allocations `running`,
  // through the AgentHandler; its session.
  std::string RegisterAgent(const std::string& id, int slots,
                            const std::vector<std::string>& running = {}) {
    v1::RegisterRequest req = testing::RegisterRequest(id, slots, running);
    // As a real agent keeps it in its work_dir: a connected id needs its credential.
    req.set_agent_credential(credentials_[id]);
    v1::RegisterResponse resp;
    absl::Status st = Sync<AgentHandler>(&master_->service(), &AgentHandler::Register, req, &resp);
    EXPECT_TRUE(st.ok()) << st;
    credentials_[id] = resp.agent_credential();
    return resp.session_id();
  }
  std::map<std::string, std::string> credentials_;  // agent id -> its agent credential

  // Waits for the next launch command of agent `id`.
  v1::LaunchCommand NextLaunch(const std::string& id, const std::string& session) {
    v1::PollCommandsRequest req;
    req.set_agent_id(id);
    req.set_session_id(session);
    req.set_wait_ms(20000);
    v1::PollCommandsResponse resp;
    absl::Status st = Sync<AgentHandler>(&master_->service(), &AgentHandler::PollCommands, req, &resp);
    EXPECT_TRUE(st.ok()) << st;
    for (const auto& c : resp.commands()) {
      if (c.has_launch()) return c.launch();
    }
    ADD_FAILURE() << "no launch command for agent " << id;
    return {};
  }

  void ShipLog(const std::string& agent, const std::string& session, const std::string& alloc,
               int64_t trial, const std::string& message, const std::string& stream = "stdout") {
    v1::ShipLogsRequest req;
    req.set_agent_id(agent);
    req.set_session_id(session);
    v1::LogLine* l = req.add_lines();
    l->set_trial_id(trial);
    l->set_allocation_id(alloc);
    l->set_rank(0);
    l->set_stream(stream);
    l->set_message(message);
    v1::ShipLogsResponse resp;
    ASSERT_TRUE(Sync<AgentHandler>(&master_->service(), &AgentHandler::ShipLogs, req, &resp).ok());
  }

  // Rank 0 of `alloc` on `agent` exited with `exit_code`.
  void ReportExit(const std::string& agent, const std::string& session, const std::string& alloc,
                  int exit_code) {
    v1::ReportExitRequest req;
    req.set_agent_id(agent);
    req.set_session_id(session);
    req.set_allocation_id(alloc);
    req.set_rank(0);
    req.set_exit_code(exit_code);
    v1::ReportExitResponse resp;
    ASSERT_TRUE(Sync<AgentHandler>(&master_->service(), &AgentHandler::ReportExit, req, &resp).ok());
  }

  // The worker of `launch` reports checkpoint `uuid` at `batches` under /ckpt.
  void ReportCheckpoint(const v1::LaunchCommand& launch, const std::string& uuid, int64_t batches) {
    v1::ReportCheckpointRequest req;
    req.mutable_auth()->set_allocation_id(launch.allocation_id());
    req.mutable_auth()->set_token(launch.env().at("DET_ALLOCATION_TOKEN"));
    req.mutable_checkpoint()->set_uuid(uuid);
    req.mutable_checkpoint()->set_total_batches(batches);
    req.mutable_checkpoint()->set_storage_path("/ckpt/" + uuid);
    grpc::ClientContext ctx;
    v1::ReportCheckpointResponse resp;
    grpc::Status st = WorkerStub()->ReportCheckpoint(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  // The CHECKPOINT_GC tasks of GET /api/v1/tasks.
  std::vector<json> GcTasks() {
    HttpReply tasks = Get("/api/v1/tasks");
    EXPECT_EQ(tasks.status, 200) << tasks.text;
    std::vector<json> out;
    for (const auto& t : tasks.body["tasks"]) {
      if (t.value("type", "") == "CHECKPOINT_GC") out.push_back(t);
    }
    return out;
  }

  // uuid -> state of experiment 1's checkpoints.
  std::map<std::string, std::string> CheckpointStates() {
    std::map<std::string, std::string> out;
    HttpReply r = Get("/api/v1/experiments/1/checkpoints");
    for (const auto& c : r.body["checkpoints"]) {
      out[c["uuid"].get<std::string>()] = c["state"].get<std::string>();
    }
    return out;
  }

  std::string TrialLogs() {
    std::string out;
    HttpReply r = Get("/api/v1/trials/1/logs?limit=5000");
    for (const auto& l : r.body["lines"]) {
      out += l.value("message", "") + "\n";
    }
    return out;
  }

  // Runs experiment `name`'s single trial on agent a1 to completion after checkpoints at
  // batches 10, 20 and 30 (no metrics: garbage collection keeps the latest, c-30), and
  // returns the checkpoint GC launch that follows.
  v1::LaunchCommand TrialWithThreeCheckpointsEnds(const std::string& session) {
    EXPECT_EQ(CreateExperiment("gc"), 1);
    v1::LaunchCommand launch = NextLaunch("a1", session);
    for (int b : {10, 20, 30}) ReportCheckpoint(launch, absl::StrCat("c-", b), b);
    EXPECT_TRUE(GcTasks().empty());  // Nothing to collect while the trial runs.
    ReportExit("a1", session, launch.allocation_id(), 0);
    return NextLaunch("a1", session);
  }

  std::unique_ptr<v1::WorkerService::Stub> WorkerStub() {
    return v1::WorkerService::NewStub(
        grpc::CreateChannel(master_->address(), grpc::InsecureChannelCredentials()));
  }

  RealClock clock_;
  config::MasterConfig config_;
  std::string dir_;
  std::unique_ptr<Master> master_;
  std::string host_;
  int port_ = 0;
  std::unique_ptr<httplib::Client> http_;
  std::string token_;
};

TEST_F(RestTest, MasterInfoHealthAndWebPage) {
  HttpReply info = Get("/api/v1/master");
  ASSERT_EQ(info.status, 200) << info.text;
  EXPECT_EQ(info.body["version"], kVersion);
  EXPECT_FALSE(info.body["cluster_id"].get<std::string>().empty());

  HttpReply health = Send("GET", "/health", "", "");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body["status"], "ok");

  auto page = http_->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_THAT(page->body, HasSubstr("<title>det</title>"));
  EXPECT_THAT(page->get_header_value("Content-Type"), HasSubstr("text/html"));
  auto js = http_->Get("/app.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  EXPECT_THAT(js->get_header_value("Content-Type"), HasSubstr("javascript"));
  EXPECT_THAT(js->body, HasSubstr("function"));
  auto charts = http_->Get("/charts.js");  // The page loads it before app.js.
  ASSERT_TRUE(charts);
  EXPECT_EQ(charts->status, 200);
  EXPECT_THAT(charts->body, HasSubstr("function lineChart("));
  EXPECT_THAT(page->body, HasSubstr("<script src=\"/charts.js\"></script>"));
  // Every script the page loads is served (the page is split into per-view files).
  int scripts = 0;
  for (size_t at = page->body.find("<script src=\"/"); at != std::string::npos;
       at = page->body.find("<script src=\"/", at + 1)) {
    size_t start = at + std::string("<script src=\"").size();
    std::string src = page->body.substr(start, page->body.find('"', start) - start);
    auto file = http_->Get(src);
    ASSERT_TRUE(file) << src;
    EXPECT_EQ(file->status, 200) << src;
    EXPECT_THAT(file->get_header_value("Content-Type"), HasSubstr("javascript")) << src;
    ++scripts;
  }
  EXPECT_GE(scripts, 7);
  auto missing = http_->Get("/nothing.js");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto css = http_->Get("/style.css");
  ASSERT_TRUE(css);
  EXPECT_EQ(css->status, 200);

  HttpReply none = Get("/api/v1/nothing-here");
  EXPECT_EQ(none.status, 404);
  EXPECT_EQ(none.body["code"], "NOT_FOUND");
  EXPECT_THAT(none.body["message"].get<std::string>(), HasSubstr("/api/v1/nothing-here"));
}

TEST_F(RestTest, ExperimentsCreateListFilterGetKill) {
  EXPECT_EQ(CreateExperiment("alpha"), 1);
  EXPECT_EQ(CreateExperiment("beta"), 2);
  EXPECT_EQ(CreateExperiment("alphabet"), 3);

  HttpReply all = Get("/api/v1/experiments");
  ASSERT_EQ(all.status, 200) << all.text;
  EXPECT_EQ(all.body["experiments"].size(), 3u);
  EXPECT_EQ(all.body["total"], 3);

  HttpReply page = Get("/api/v1/experiments?limit=1&offset=1");
  ASSERT_EQ(page.status, 200) << page.text;
  ASSERT_EQ(page.body["experiments"].size(), 1u);
  EXPECT_EQ(page.body["experiments"][0]["name"], "beta");
  EXPECT_EQ(page.body["total"], 3);

  HttpReply named = Get("/api/v1/experiments?name=alpha");
  ASSERT_EQ(named.status, 200) << named.text;
  ASSERT_EQ(named.body["experiments"].size(), 2u);
  EXPECT_EQ(named.body["experiments"][1]["name"], "alphabet");

  HttpReply killed = Post("/api/v1/experiments/2/kill", "");
  ASSERT_EQ(killed.status, 200) << killed.text;
  HttpReply two = Get("/api/v1/experiments/2");
  ASSERT_EQ(two.status, 200) << two.text;
  EXPECT_EQ(two.body["experiment"]["state"], "STATE_CANCELED");
  ASSERT_EQ(two.body["trials"].size(), 1u);
  EXPECT_EQ(two.body["trials"][0]["state"], "STATE_CANCELED");

  HttpReply canceled = Get("/api/v1/experiments?states=CANCELED");
  ASSERT_EQ(canceled.status, 200) << canceled.text;
  ASSERT_EQ(canceled.body["experiments"].size(), 1u);
  EXPECT_EQ(canceled.body["experiments"][0]["name"], "beta");
  HttpReply active = Get("/api/v1/experiments?states=STATE_ACTIVE,STATE_PAUSED");
  EXPECT_EQ(active.body["experiments"].size(), 2u);
  EXPECT_EQ(active.body["total"], 2);
}

TEST_F(RestTest, ExperimentsRecordTheirOwnerAndListByUser) {
  ASSERT_EQ(Post("/api/v1/users", R"({"username": "bob", "password": "bobs-password"})").status,
            200);
  std::string bob = Login("bob", "bobs-password");
  ASSERT_FALSE(bob.empty());
  EXPECT_EQ(CreateExperiment("admins"), 1);
  json body = {{"config_yaml", ExperimentYaml("bobs")}, {"config_path", "bob.yaml"}};
  HttpReply created = Post("/api/v1/experiments", body.dump(), bob);
  ASSERT_EQ(created.status, 200) << created.text;
  EXPECT_EQ(created.body["experiment"]["owner"], "bob");
  // Over gRPC, the caller of the "authorization" metadata owns it.
  {
    auto api = v1::Api::NewStub(
        grpc::CreateChannel(master_->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + bob);
    v1::CreateExperimentRequest req;
    req.set_config_yaml(ExperimentYaml("bobs-grpc"));
    v1::CreateExperimentResponse resp;
    grpc::Status st = api->CreateExperiment(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.experiment().id(), 3);
    EXPECT_EQ(resp.experiment().owner(), "bob");
  }

  auto owners = [&](const std::string& query) {
    HttpReply r = Get("/api/v1/experiments" + query);
    EXPECT_EQ(r.status, 200) << r.text;
    std::vector<std::string> out;
    for (const auto& e : r.body["experiments"]) out.push_back(e.value("owner", "?"));
    EXPECT_EQ(Int(r.body["total"]), static_cast<int64_t>(out.size())) << query;
    return out;
  };
  // (How ListExperiments filters by owner, and that the owner is kept across a restart:
  // master/experiments:experiment_manager_test.)
  using V = std::vector<std::string>;
  EXPECT_EQ(owners(""), (V{"admin", "bob", "bob"}));
  EXPECT_EQ(owners("?user=bob"), (V{"bob", "bob"}));
  EXPECT_EQ(owners("?user=admin&name=admins"), (V{"admin"}));
  EXPECT_EQ(Get("/api/v1/experiments/2").body["experiment"]["owner"], "bob");
}

TEST_F(RestTest, BadRequestsGetJsonErrors) {
  HttpReply malformed = Post("/api/v1/experiments", "{\"config_yaml\": ");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(malformed.body["code"], "INVALID_ARGUMENT");
  EXPECT_THAT(malformed.body["message"].get<std::string>(), HasSubstr("request body"));

  HttpReply unknown_field = Post("/api/v1/experiments", "{\"config_yml\": \"x\"}");
  EXPECT_EQ(unknown_field.status, 400);
  EXPECT_THAT(unknown_field.body["message"].get<std::string>(), HasSubstr("config_yml"));

  HttpReply bad_config = Post(
      "/api/v1/experiments",
      json{{"config_yaml", "name: x\nentrypoint: y\nsearcher: [oops\n"}, {"config_path", "b.yaml"}}
          .dump());
  EXPECT_EQ(bad_config.status, 400);
  EXPECT_THAT(bad_config.body["message"].get<std::string>(), HasSubstr("b.yaml:"));

  HttpReply bad_param = Get("/api/v1/experiments?limit=many");
  EXPECT_EQ(bad_param.status, 400);
  EXPECT_THAT(bad_param.body["message"].get<std::string>(), HasSubstr("limit"));
  HttpReply unknown_param = Get("/api/v1/experiments?colour=red");
  EXPECT_EQ(unknown_param.status, 400);
  EXPECT_THAT(unknown_param.body["message"].get<std::string>(), HasSubstr("colour"));
  HttpReply bad_state = Get("/api/v1/experiments?states=SLEEPING");
  EXPECT_EQ(bad_state.status, 400);

  for (const std::string path :
       {"/api/v1/experiments/99", "/api/v1/trials/99", "/api/v1/trials/99/metrics",
        "/api/v1/trials/99/timings", "/api/v1/trials/99/logs"}) {
    HttpReply r = Get(path);
    EXPECT_EQ(r.status, 404) << path << ": " << r.text;
    EXPECT_EQ(r.body["code"], "NOT_FOUND") << path;
    EXPECT_THAT(r.body["message"].get<std::string>(), HasSubstr("99 not found")) << path;
  }
  EXPECT_EQ(Post("/api/v1/experiments/99/kill", "").status, 404);
  EXPECT_EQ(Post("/api/v1/agents/nope/enable", "").status, 404);
  EXPECT_EQ(Post("/api/v1/jobs/99/priority", "{\"priority\": 10}").status, 404);
  EXPECT_EQ(Get("/api/v1/experiments/abc").status, 404);
}

TEST_F(RestTest, AgentsSlotsJobsTasksPoolsAndMetrics) {
  std::string session = RegisterAgent("a1", 2);
  EXPECT_EQ(CreateExperiment("one-slot"), 1);
  v1::LaunchCommand launch = NextLaunch("a1", session);
  ASSERT_EQ(launch.trial_id(), 1);
  EXPECT_EQ(CreateExperiment("two-slots", 2), 2);  // Waits: one slot is free.

  HttpReply agents = Get("/api/v1/agents");
  ASSERT_EQ(agents.status, 200) << agents.text;
  ASSERT_EQ(agents.body["agents"].size(), 1u);
  EXPECT_EQ(agents.body["agents"][0]["id"], "a1");
  EXPECT_EQ(agents.body["agents"][0]["hostname"], "host-a1");

  HttpReply slots = Get("/api/v1/slots");
  ASSERT_EQ(slots.status, 200) << slots.text;
  ASSERT_EQ(slots.body["slots"].size(), 2u);
  EXPECT_EQ(slots.body["slots"][0]["agent_id"], "a1");
  EXPECT_EQ(slots.body["slots"][0]["allocation_id"], launch.allocation_id());
  EXPECT_EQ(slots.body["slots"][1]["allocation_id"], "");

  HttpReply jobs = Get("/api/v1/jobs");
  ASSERT_EQ(jobs.status, 200) << jobs.text;
  ASSERT_EQ(jobs.body["jobs"].size(), 2u);
  const json* waiting = nullptr;
  for (const auto& j : jobs.body["jobs"]) {
    if (Int(j["experiment_id"]) == 2) waiting = &j;
  }
  ASSERT_NE(waiting, nullptr);
  EXPECT_EQ((*waiting)["state"], "QUEUED");
  EXPECT_THAT((*waiting)["reason"].get<std::string>(), HasSubstr("2 free slots"));
  EXPECT_EQ(Get("/api/v1/jobs?resource_pool=nope").status, 404);

  HttpReply priority = Post("/api/v1/jobs/2/priority", "{\"priority\": 10}");
  EXPECT_EQ(priority.status, 200) << priority.text;
  HttpReply bad_priority = Post("/api/v1/jobs/2/priority", "{\"priority\": 0}");
  EXPECT_EQ(bad_priority.status, 400);
  EXPECT_THAT(bad_priority.body["message"].get<std::string>(), HasSubstr("priority"));

  HttpReply tasks = Get("/api/v1/tasks");
  ASSERT_EQ(tasks.status, 200) << tasks.text;
  ASSERT_EQ(tasks.body["tasks"].size(), 1u);
  EXPECT_EQ(tasks.body["tasks"][0]["allocation_id"], launch.allocation_id());

  HttpReply pools = Get("/api/v1/resource-pools");
  ASSERT_EQ(pools.status, 200) << pools.text;
  ASSERT_EQ(pools.body["pools"].size(), 1u);
  EXPECT_EQ(pools.body["pools"][0]["name"], "default");
  EXPECT_EQ(pools.body["pools"][0]["slots"], 2);
  EXPECT_EQ(pools.body["pools"][0]["slots_used"], 1);
  EXPECT_EQ(pools.body["pools"][0]["queued_trials"], 1);

  HttpReply stats = Get("/api/v1/master/stats");
  ASSERT_EQ(stats.status, 200) << stats.text;
  EXPECT_EQ(stats.body["slots_used"], 1);
  EXPECT_EQ(stats.body["slots_free"], 1);
  EXPECT_EQ(stats.body["jobs_queued"], 1);

  auto prom = http_->Get("/metrics", {{"Authorization", "Bearer " + token_}});
  ASSERT_TRUE(prom);
  EXPECT_EQ(prom->status, 200);
  EXPECT_THAT(prom->get_header_value("Content-Type"), HasSubstr("text/plain"));
  EXPECT_THAT(prom->body, HasSubstr("# TYPE det_slots_used gauge\ndet_slots_used 1\n"));
  EXPECT_THAT(prom->body, HasSubstr("\ndet_agents_connected 1\n"));
  EXPECT_THAT(prom->body, HasSubstr("\ndet_trials_running 1\n"));
  EXPECT_THAT(prom->body, HasSubstr("\ndet_jobs_queued 1\n"));
  EXPECT_THAT(prom->body, HasSubstr("\ndet_experiments_created_total 2\n"));
  EXPECT_THAT(prom->body, HasSubstr("# TYPE det_http_requests_total counter\n"));

  HttpReply disabled = Post("/api/v1/agents/a1/disable", "{\"drain\": true}");
  ASSERT_EQ(disabled.status, 200) << disabled.text;
  EXPECT_EQ(disabled.body["agent"]["enabled"], false);
  HttpReply enabled = Post("/api/v1/agents/a1/enable", "");
  ASSERT_EQ(enabled.status, 200) << enabled.text;
  EXPECT_EQ(enabled.body["agent"]["enabled"], true);
}

// A trial's metrics, timings and logs as REST returns them (what is stored and summarised,
// and which allocation may report for which trial: master/metrics:metrics_manager_test).
TEST_F(RestTest, TrialMetricsTimingsAndLogs) {
  std::string session = RegisterAgent("a1", 2);
  ASSERT_EQ(CreateExperiment("first"), 1);
  v1::LaunchCommand one = NextLaunch("a1", session);
  ASSERT_EQ(one.trial_id(), 1);

  auto worker = WorkerStub();
  auto report = [&](const v1::LaunchCommand& as, int64_t for_trial,
                    const std::vector<v1::Metrics>& rows) {
    v1::ReportMetricsRequest req;
    req.mutable_auth()->set_allocation_id(as.allocation_id());
    req.mutable_auth()->set_token(as.env().at("DET_ALLOCATION_TOKEN"));
    req.set_trial_id(for_trial);
    for (const auto& m : rows) *req.add_metrics() = m;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ReportMetricsResponse resp;
    return worker->ReportMetrics(&ctx, req, &resp);
  };
  std::vector<v1::Metrics> rows;
  for (int b = 1; b <= 50; ++b) {
    v1::Metrics m;
    m.set_group("training");
    m.set_total_batches(b * 10);
    (*m.mutable_values())["loss"] = 2.0 / b;
    rows.push_back(m);
    if (b % 10 == 0) {
      m.set_group("validation");
      m.mutable_values()->clear();
      (*m.mutable_values())["validation_loss"] = 1.0 / b;
      rows.push_back(m);
      m.set_group("timings");
      m.mutable_values()->clear();
      (*m.mutable_values())["train_batch_mean_ms"] = 3.5;
      rows.push_back(m);
    }
  }
  grpc::Status ok = report(one, 1, rows);
  ASSERT_TRUE(ok.ok()) << ok.error_message();

  HttpReply trial = Get("/api/v1/trials/1");
  ASSERT_EQ(trial.status, 200) << trial.text;
  EXPECT_EQ(Int(trial.body["trial"]["total_batches"]), 500);
  EXPECT_EQ(Int(trial.body["trial"]["training_summary"]["loss"]["count"]), 50);

  HttpReply all = Get("/api/v1/trials/1/metrics");
  ASSERT_EQ(all.status, 200) << all.text;
  EXPECT_EQ(all.body["metrics"].size(), 60u);

  HttpReply thin = Get("/api/v1/trials/1/metrics?group=training&max_points=10");
  ASSERT_EQ(thin.status, 200) << thin.text;
  ASSERT_EQ(thin.body["metrics"].size(), 10u);
  EXPECT_EQ(Int(thin.body["metrics"][0]["total_batches"]), 10);
  EXPECT_EQ(Int(thin.body["metrics"][9]["total_batches"]), 500);
  for (const auto& m : thin.body["metrics"]) EXPECT_EQ(m["group"], "training");

  HttpReply timings = Get("/api/v1/trials/1/timings");
  ASSERT_EQ(timings.status, 200) << timings.text;
  ASSERT_EQ(timings.body["metrics"].size(), 5u);
  EXPECT_EQ(timings.body["metrics"][0]["values"]["train_batch_mean_ms"], 3.5);
  EXPECT_EQ(Get("/api/v1/trials/1/timings?group=training").status, 400);
  EXPECT_EQ(Get("/api/v1/trials/1/metrics?max_points=lots").status, 400);

  ShipLog("a1", session, one.allocation_id(), 1, "hello from rank 0");
  HttpReply logs = Get("/api/v1/trials/1/logs");
  ASSERT_EQ(logs.status, 200) << logs.text;
  int64_t last_id = 0;
  bool found = false;
  for (const auto& l : logs.body["lines"]) {
    last_id = std::max(last_id, Int(l["id"]));
    found |= l["message"] == "hello from rank 0";
  }
  EXPECT_TRUE(found) << logs.text;
  EXPECT_EQ(logs.body["done"], false);

  // follow=true waits for the next line.
  auto followed = std::async(std::launch::async, [&] {
    httplib::Client c(host_, port_);
    c.set_read_timeout(60, 0);
    return c.Get(absl::StrCat("/api/v1/trials/1/logs?follow=true&after_id=", last_id).c_str(),
                 {{"Authorization", "Bearer " + token_}});
  });
  ShipLog("a1", session, one.allocation_id(), 1, "a later line");
  httplib::Result next = followed.get();
  ASSERT_TRUE(next);
  ASSERT_EQ(next->status, 200) << next->body;
  json next_body = json::parse(next->body);
  ASSERT_GE(next_body["lines"].size(), 1u) << next->body;
  EXPECT_EQ(next_body["lines"][0]["message"], "a later line");

  HttpReply ranked = Get("/api/v1/trials/1/logs?rank=0&limit=1");
  ASSERT_EQ(ranked.status, 200) << ranked.text;
  EXPECT_EQ(ranked.body["lines"].size(), 1u);
  EXPECT_EQ(Get("/api/v1/trials/1/logs?follow=maybe").status, 400);
}


TEST_F(RestTest, TemplatesCrud) {
  const std::string yaml = "description: \"it's a \\\"template\\\"; DROP TABLE templates; --\"\n"
                           "resources:\n  slots_per_trial: 1\n";
  HttpReply created = Send("PUT", "/api/v1/templates/tpl-1",
                           json{{"config_yaml", yaml}, {"config_path", "tpl.yaml"}}.dump(), token_);
  ASSERT_EQ(created.status, 200) << created.text;
  EXPECT_EQ(created.body["created"], true);
  EXPECT_EQ(created.body["template"]["name"], "tpl-1");

  HttpReply got = Get("/api/v1/templates/tpl-1");
  ASSERT_EQ(got.status, 200) << got.text;
  EXPECT_EQ(got.body["template"]["config_yaml"], yaml);
  HttpReply list = Get("/api/v1/templates");
  ASSERT_EQ(list.status, 200) << list.text;
  ASSERT_EQ(list.body["templates"].size(), 1u);

  HttpReply replaced = Post("/api/v1/templates/tpl-1", json{{"config_yaml", yaml}}.dump());
  ASSERT_EQ(replaced.status, 200) << replaced.text;
  EXPECT_EQ(replaced.body["created"], false);

  HttpReply bad = Send("PUT", "/api/v1/templates/tpl-2",
                       json{{"config_yaml", "no_such_key: 1\n"}}.dump(), token_);
  EXPECT_EQ(bad.status, 400) << bad.text;
  HttpReply bad_name = Send("PUT", "/api/v1/templates/x%27%3B%20DROP",
                            json{{"config_yaml", yaml}}.dump(), token_);
  EXPECT_EQ(bad_name.status, 400) << bad_name.text;

  HttpReply removed = Send("DELETE", "/api/v1/templates/tpl-1", "", token_);
  ASSERT_EQ(removed.status, 200) << removed.text;
  EXPECT_EQ(Get("/api/v1/templates/tpl-1").status, 404);
  EXPECT_EQ(Send("DELETE", "/api/v1/templates/tpl-1", "", token_).status, 404);
}

// A worker's checkpoint as GET /api/v1/experiments/{id}/checkpoints lists it (which paths
// a worker may report is tested in master/checkpoints:checkpoint_manager_test).
TEST_F(RestTest, Checkpoints) {
  std::string session = RegisterAgent("a1", 1);
  ASSERT_EQ(CreateExperiment("ckpt"), 1);
  ReportCheckpoint(NextLaunch("a1", session), "c-1", 40);

  HttpReply all = Get("/api/v1/experiments/1/checkpoints");
  ASSERT_EQ(all.status, 200) << all.text;
  ASSERT_EQ(all.body["checkpoints"].size(), 1u);
  EXPECT_EQ(all.body["checkpoints"][0]["uuid"], "c-1");
  EXPECT_EQ(Int(all.body["checkpoints"][0]["total_batches"]), 40);
  EXPECT_EQ(Get("/api/v1/experiments/1/checkpoints?trial_id=1").body["checkpoints"].size(), 1u);
  EXPECT_EQ(Get("/api/v1/experiments/1/checkpoints?trial_id=7").status, 404);
  EXPECT_EQ(Get("/api/v1/experiments/9/checkpoints").status, 404);
}

// A CHECKPOINT_GC task as GET /api/v1/tasks shows it (zero slots, its agent, the
// checkpoints it deletes), and the checkpoints' states once it exits 0.
TEST_F(RestTest, CheckpointGcTasksAreListedWithTheirCheckpoints) {
  std::string session = RegisterAgent("a1", 1);
  v1::LaunchCommand gc = TrialWithThreeCheckpointsEnds(session);
  ASSERT_EQ(gc.allocation_id(), "gc-1.0");
  std::vector<json> tasks = GcTasks();
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0]["allocation_id"], "gc-1.0");
  EXPECT_EQ(tasks[0]["state"], "STATE_RUNNING");
  EXPECT_EQ(tasks[0].value("slots", 0), 0);
  EXPECT_EQ(tasks[0]["agents"], json::array({"a1"}));
  EXPECT_EQ(tasks[0]["checkpoint_uuids"], json::array({"c-10", "c-20"}));
  EXPECT_EQ(tasks[0]["resource_pool"], "default");
  EXPECT_EQ(Get("/api/v1/slots").body["slots"][0]["allocation_id"], "");

  ReportExit("a1", session, "gc-1.0", 0);
  tasks = GcTasks();
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0]["state"], "STATE_COMPLETED");
  EXPECT_GT(Int(tasks[0]["end_time_ms"]), 0);
  std::map<std::string, std::string> states = CheckpointStates();
  EXPECT_EQ(states["c-10"], "STATE_DELETED");
  EXPECT_EQ(states["c-20"], "STATE_DELETED");
  EXPECT_EQ(states["c-30"], "STATE_COMPLETED");
  EXPECT_THAT(TrialLogs(), HasSubstr("checkpoint garbage collection gc-1.0 completed on a1"));
}

// The model registry's routes: a model, a version of the checkpoint the GC kept, and that
// checkpoint refused to DELETE /api/v1/checkpoints while the version exists.
TEST_F(RestTest, ModelsAndVersions) {
  std::string session = RegisterAgent("a1", 1);
  v1::LaunchCommand gc = TrialWithThreeCheckpointsEnds(session);  // gc-1.0 deletes c-10, c-20
  HttpReply created = Post("/api/v1/models", json{{"name", "mnist"}, {"labels", {"prod"}}}.dump());
  ASSERT_EQ(created.status, 200) << created.text;
  EXPECT_EQ(created.body["model"]["name"], "mnist");
  HttpReply twice = Post("/api/v1/models", json{{"name", "mnist"}}.dump());
  EXPECT_EQ(twice.status, 409) << twice.text;
  EXPECT_EQ(twice.body["message"], "model 'mnist' already exists");

  HttpReply v1 = Post("/api/v1/models/mnist/versions", json{{"checkpoint_uuid", "c-30"}}.dump());
  ASSERT_EQ(v1.status, 200) << v1.text;
  EXPECT_EQ(v1.body["model_version"]["version"], 1);
  EXPECT_EQ(v1.body["model_version"]["checkpoint"]["uuid"], "c-30");
  HttpReply doomed =
      Post("/api/v1/models/mnist/versions", json{{"checkpoint_uuid", "c-10"}}.dump());
  EXPECT_EQ(doomed.status, 400) << doomed.text;
  EXPECT_EQ(doomed.body["code"], "FAILED_PRECONDITION");
  EXPECT_THAT(doomed.body["message"].get<std::string>(),
              HasSubstr("checkpoint c-10 is being deleted"));

  HttpReply listed = Get("/api/v1/models?labels=prod");
  ASSERT_EQ(listed.status, 200) << listed.text;
  ASSERT_EQ(listed.body["models"].size(), 1u);
  EXPECT_EQ(listed.body["models"][0]["num_versions"], 1);
  EXPECT_EQ(Get("/api/v1/models?labels=other").body["models"].size(), 0u);
  HttpReply versions = Get("/api/v1/models/mnist/versions");
  ASSERT_EQ(versions.status, 200) << versions.text;
  EXPECT_EQ(versions.body["model"]["name"], "mnist");
  ASSERT_EQ(versions.body["model_versions"].size(), 1u);
  HttpReply latest = Get("/api/v1/models/mnist/versions/0");
  ASSERT_EQ(latest.status, 200) << latest.text;
  EXPECT_EQ(latest.body["model_version"]["checkpoint"]["total_batches"], "30");
  EXPECT_EQ(Get("/api/v1/models/mnist/versions/5").status, 404);
  HttpReply patched = Send("PATCH", "/api/v1/models/mnist",
                           json{{"description", "digits"}, {"add_labels", {"cnn"}}}.dump(), token_);
  ASSERT_EQ(patched.status, 200) << patched.text;
  EXPECT_EQ(patched.body["model"]["labels"], json::array({"prod", "cnn"}));

  HttpReply kept = Send("DELETE", "/api/v1/checkpoints/c-30", "", token_);
  EXPECT_EQ(kept.status, 400) << kept.text;
  EXPECT_THAT(kept.body["message"].get<std::string>(),
              HasSubstr("checkpoint c-30 is version 1 of model 'mnist'"));
  EXPECT_EQ(Send("DELETE", "/api/v1/models/mnist/versions/1", "", token_).status, 200);
  EXPECT_EQ(Send("DELETE", "/api/v1/models/mnist", "", token_).status, 200);
  HttpReply gone = Get("/api/v1/models/mnist");
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(gone.body["message"], "model 'mnist' does not exist");
  ReportExit("a1", session, gc.allocation_id(), 0);
}

// What a checkpoint GC task does (its launch, requeued when its agent restarts without it
// or is lost, reattached after a master restart, its failures) is tested on the managers
// (master/checkpoints:checkpoint_manager_test, FakeClock, no sockets).

// Every route, as (method, path, body).
struct RouteCase {
  std::string method;
  std::string path;
  std::string body;
};

std::vector<RouteCase> AllRoutes() {
  return {
      {"GET", "/api/v1/master", ""},
      {"GET", "/api/v1/master/stats", ""},
      {"GET", "/metrics", ""},
      {"GET", "/prom/det-state-metrics", ""},
      {"POST", "/api/v1/auth/logout", ""},
      {"GET", "/api/v1/me", ""},
      {"GET", "/api/v1/users", ""},
      {"POST", "/api/v1/users", R"({"username": "eve", "password": "eves-password"})"},
      {"POST", "/api/v1/users/admin/password", R"({"new_password": "hijacked-password"})"},
      {"GET", "/api/v1/experiments", ""},
      {"POST", "/api/v1/experiments", R"({"config_yaml": "name: x"})"},
      {"GET", "/api/v1/experiments/1", ""},
      {"POST", "/api/v1/experiments/1/kill", ""},
      {"GET", "/api/v1/experiments/1/checkpoints", ""},
      {"GET", "/api/v1/trials/1", ""},
      {"GET", "/api/v1/trials/1/metrics", ""},
      {"GET", "/api/v1/trials/1/timings", ""},
      {"GET", "/api/v1/trials/1/logs", ""},
      {"GET", "/api/v1/agents", ""},
      {"POST", "/api/v1/agents/a1/enable", ""},
      {"POST", "/api/v1/agents/a1/disable", ""},
      {"GET", "/api/v1/slots", ""},
      {"GET", "/api/v1/jobs", ""},
      {"POST", "/api/v1/jobs/1/priority", R"({"priority": 5})"},
      {"GET", "/api/v1/tasks", ""},
      {"GET", "/api/v1/resource-pools", ""},
      {"GET", "/api/v1/templates", ""},
      {"GET", "/api/v1/templates/t", ""},
      {"PUT", "/api/v1/templates/t", R"({"config_yaml": "description: x"})"},
      {"POST", "/api/v1/templates/t", R"({"config_yaml": "description: x"})"},
      {"DELETE", "/api/v1/templates/t", ""},
      {"GET", "/api/v1/models", ""},
      {"POST", "/api/v1/models", R"({"name": "m"})"},
      {"GET", "/api/v1/models/m", ""},
      {"PATCH", "/api/v1/models/m", R"({"description": "x"})"},
      {"DELETE", "/api/v1/models/m", ""},
      {"GET", "/api/v1/models/m/versions", ""},
      {"POST", "/api/v1/models/m/versions", R"({"checkpoint_uuid": "c"})"},
      {"GET", "/api/v1/models/m/versions/1", ""},
      {"DELETE", "/api/v1/models/m/versions/1", ""},
  };
}

TEST_F(RestTest, EveryRouteButLoginAndHealthNeedsAToken) {
  ASSERT_EQ(CreateExperiment("guarded"), 1);
  for (const auto& r : AllRoutes()) {
    for (const std::string& token : {std::string(), std::string(64, 'f'), std::string("x y")}) {
      HttpReply reply = Send(r.method, r.path, r.body, token);
      EXPECT_EQ(reply.status, 401) << r.method << " " << r.path << " token '" << token
                                   << "': " << reply.text;
      EXPECT_EQ(reply.body["code"], "UNAUTHENTICATED") << r.method << " " << r.path;
    }
  }
  // Nothing happened: experiment 1 still runs, no user was made, admin's password holds.
  HttpReply e = Get("/api/v1/experiments/1");
  EXPECT_EQ(e.body["experiment"]["state"], "STATE_ACTIVE");
  EXPECT_EQ(Get("/api/v1/users").body["users"].size(), 1u);
  EXPECT_FALSE(Login("admin", kAdminPassword).empty());
  // A bearer token in another header or a query parameter does not count.
  EXPECT_EQ(Send("GET", "/api/v1/master?token=" + token_, "", "").status, 401);

  EXPECT_EQ(Send("GET", "/health", "", "").status, 200);
  EXPECT_EQ(Send("GET", "/", "", "").status, 200);

  // With the token every route answers something other than 401.
  for (const auto& r : AllRoutes()) {
    if (r.path == "/api/v1/auth/logout" || r.path == "/api/v1/users/admin/password") continue;
    HttpReply reply = Send(r.method, r.path, r.body, token_);
    EXPECT_NE(reply.status, 401) << r.method << " " << r.path << ": " << reply.text;
    EXPECT_NE(reply.status, 0) << r.method << " " << r.path;
  }

  HttpReply stats = Get("/api/v1/master/stats");
  EXPECT_GE(Int(stats.body["api_calls_rejected_total"]), 3 * static_cast<int64_t>(AllRoutes().size()));
  EXPECT_GE(Int(stats.body["api_calls_authenticated_total"]), 1);
}

TEST_F(RestTest, LoginWhoAmIUsersAndLogout) {
  HttpReply wrong = Post("/api/v1/auth/login", R"({"username": "admin", "password": "nope-nope"})", "");
  EXPECT_EQ(wrong.status, 401);
  EXPECT_THAT(wrong.body["message"].get<std::string>(), HasSubstr("wrong user name or password"));
  EXPECT_EQ(Post("/api/v1/auth/login", "{not json", "").status, 400);

  HttpReply me = Get("/api/v1/me");
  ASSERT_EQ(me.status, 200) << me.text;
  EXPECT_EQ(me.body["user"]["username"], "admin");
  EXPECT_EQ(me.body["user"]["admin"], true);

  HttpReply created = Post("/api/v1/users", R"({"username": "bob", "password": "bobs-password"})");
  ASSERT_EQ(created.status, 200) << created.text;
  EXPECT_EQ(created.body["user"]["admin"], false);
  EXPECT_EQ(Post("/api/v1/users", R"({"username": "bob", "password": "bobs-password"})").status,
            409);
  std::string bob = Login("bob", "bobs-password");
  ASSERT_FALSE(bob.empty());
  HttpReply refused =
      Post("/api/v1/users", R"({"username": "eve", "password": "eves-password"})", bob);
  EXPECT_EQ(refused.status, 403);
  EXPECT_EQ(refused.body["code"], "PERMISSION_DENIED");
  // Users can read the cluster.
  EXPECT_EQ(Send("GET", "/api/v1/experiments", "", bob).status, 200);

  HttpReply changed = Post("/api/v1/users/bob/password",
                           R"({"old_password": "bobs-password", "new_password": "bobs-new-pw"})", bob);
  ASSERT_EQ(changed.status, 200) << changed.text;
  EXPECT_FALSE(Login("bob", "bobs-new-pw").empty());
  EXPECT_EQ(Post("/api/v1/users/admin/password", R"({"new_password": "hijacked-password"})", bob)
                .status,
            403);

  HttpReply out = Post("/api/v1/auth/logout", "", bob);
  ASSERT_EQ(out.status, 200) << out.text;
  EXPECT_EQ(Send("GET", "/api/v1/me", "", bob).status, 401);
}

TEST_F(RestTest, NamesFullOfQuotesAndSqlComeBackUnchanged) {
  const std::vector<std::string> names = {
      "it's \"quoted\"",
      "x'); DROP TABLE experiments; --",
      "\" OR 1=1 --",
      "Robert'); DELETE FROM users WHERE ('a'='a",
      "back\\slash %_ wildcards; SELECT * FROM sessions",
      "<script>alert('x')</script> & more",
  };
  for (const auto& n : names) ASSERT_GT(CreateExperiment(n), 0) << n;
  HttpReply list = Get("/api/v1/experiments");
  ASSERT_EQ(list.status, 200) << list.text;
  ASSERT_EQ(list.body["experiments"].size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(list.body["experiments"][i]["name"], names[i]);
    HttpReply one = Get(absl::StrCat("/api/v1/experiments/", i + 1));
    EXPECT_EQ(one.body["experiment"]["name"], names[i]);
  }
  // The name filter is a plain substring match.
  HttpReply filtered = Get("/api/v1/experiments?name=%27%3B%20DROP");
  ASSERT_EQ(filtered.status, 200) << filtered.text;
  ASSERT_EQ(filtered.body["experiments"].size(), 0u);
  filtered = Get("/api/v1/experiments?name=%27)%3B%20DROP");
  ASSERT_EQ(filtered.body["experiments"].size(), 1u);
  EXPECT_EQ(filtered.body["experiments"][0]["name"], names[1]);
  EXPECT_EQ(Get("/api/v1/experiments?name=%25_").body["experiments"].size(), 1u);

  // The same after a restart, read back from SQLite.
  master_->Shutdown();
  master_.reset();
  config::MasterConfig config;
  config.grpc_listen = "127.0.0.1:0";
  config.http_listen = absl::StrCat(host_, ":", port_);
  config.data_dir = dir_;
  config.db_path = dir_ + "/det.db";
  config.resource_pools.push_back({"default", "", false, absl::Seconds(60)});
  auto m = Master::Start(config, clock_);
  ASSERT_TRUE(m.ok()) << m.status();
  master_ = std::move(*m);
  http_ = std::make_unique<httplib::Client>(host_, port_);
  list = Get("/api/v1/experiments");  // The session survived the restart too.
  ASSERT_EQ(list.status, 200) << list.text;
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(list.body["experiments"][i]["name"], names[i]);
}


// HTTPS with http_tls in master.yaml: a certificate made here with the openssl tool.
TEST_F(RestTest, AJsonBodyIsReadWhateverItsContentTypeAndNeverEchoed) {
  // The docs' `curl -d` login: curl says application/x-www-form-urlencoded.
  const std::string login =
      json{{"username", "admin"}, {"password", kAdminPassword}}.dump();
  for (const char* type : {"application/x-www-form-urlencoded", "text/plain", ""}) {
    auto r = http_->Post("/api/v1/auth/login", login, type);
    ASSERT_TRUE(r) << type;
    EXPECT_EQ(r->status, 200) << type << ": " << r->body;
    EXPECT_FALSE(json::parse(r->body, nullptr, false).value("token", "").empty()) << type;
  }
  // A broken body, a wrong field type or an unknown field: a JSON error that does not
  // repeat the body's values (an unknown field's name is said).
  const std::string secret = "s3cret-horse-battery";
  for (const std::string& body :
       {absl::StrCat("{\"username\": \"admin\", \"password\": \"", secret, "\""),
        absl::StrCat("{\"username\": \"admin\", \"password\": {\"", secret, "\": 1}}"),
        absl::StrCat("{\"username\": \"admin\", \"passwd\": \"", secret, "\"}"),
        absl::StrCat("{\"username\": \"admin\", \"password\": [\"", secret, "\"]}"),
        absl::StrCat("username=admin&password=", secret)}) {
    for (const char* type : {"application/x-www-form-urlencoded", "application/json"}) {
      auto r = http_->Post("/api/v1/auth/login", body, type);
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 400) << body;
      json j = json::parse(r->body, nullptr, false);
      EXPECT_EQ(j.value("code", ""), "INVALID_ARGUMENT") << r->body;
      EXPECT_THAT(j.value("message", ""), HasSubstr("LoginRequest")) << r->body;
      EXPECT_THAT(r->body, ::testing::Not(HasSubstr(secret))) << r->body;
    }
  }
}

// Sends `request` (raw HTTP/1.1 text) to 127.0.0.1:`port`; the response (headers and the
// Content-Length bytes of body), or what came before the server closed the connection.
std::string RawHttp(int port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
    timeval tv{30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) {
      out.append(buf, n);
      size_t head = out.find("\r\n\r\n");
      size_t at = out.find("Content-Length: ");
      size_t length = 0;
      if (head != std::string::npos && at != std::string::npos && at < head &&
          absl::SimpleAtoi(out.substr(at + 16, out.find("\r\n", at) - at - 16), &length) &&
          out.size() >= head + 4 + length) {
        break;
      }
    }
  }
  close(fd);
  return out;
}

// `gzip` (a whole gzip stream) inflated, or "<not gzip>".
std::string Gunzip(const std::string& gzip) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return "<not gzip>";
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gzip.data()));
  z.avail_in = static_cast<uInt>(gzip.size());
  int rc = Z_OK;
  char buf[16384];
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - z.avail_out);
  }
  inflateEnd(&z);
  return rc == Z_STREAM_END && z.avail_in == 0 ? out : "<not gzip>";
}

// A GET of `path` with `headers` (and the session's token) whose body is returned as sent.
httplib::Result RawGet(const std::string& host, int port, const std::string& path,
                       httplib::Headers headers) {
  httplib::Client c(host, port);
  c.set_decompress(false);
  c.set_read_timeout(60, 0);
  return c.Get(path.c_str(), headers);
}

// Answers of 1 KiB or more go gzip-compressed to a client whose Accept-Encoding takes
// gzip (a browser's "gzip, deflate, br" gets gzip), the same bytes once inflated; never to
// one that sends no Accept-Encoding or refuses gzip; small answers go as they are.
TEST_F(RestTest, LargeAnswersAreGzippedWhenTheClientAcceptsIt) {
  for (const char* name : {"one", "two", "three"}) CreateExperiment(name);
  const httplib::Headers auth = {{"Authorization", "Bearer " + token_}};
  auto with = [&](const std::string& accept) {
    httplib::Headers h = auth;
    h.emplace("Accept-Encoding", accept);
    return h;
  };
  // No Accept-Encoding at all (httplib's client would add one): raw HTTP.
  std::string plain = RawHttp(port_, absl::StrCat("GET /api/v1/experiments HTTP/1.1\r\nHost: x\r\n"
                                                  "Authorization: Bearer ", token_,
                                                  "\r\nConnection: close\r\n\r\n"));
  ASSERT_THAT(plain, ::testing::StartsWith("HTTP/1.1 200"));
  const std::string head = plain.substr(0, plain.find("\r\n\r\n"));
  const std::string list = plain.substr(head.size() + 4);
  EXPECT_THAT(head, ::testing::Not(HasSubstr("Content-Encoding")));
  EXPECT_THAT(head, HasSubstr("Vary: Accept-Encoding"));
  ASSERT_GT(list.size(), rest::kMinGzipBytes);
  EXPECT_EQ(json::parse(list, nullptr, false)["experiments"].size(), 3u) << list;

  for (const char* accept : {"gzip", "gzip, deflate, br", "br;q=1.0, gzip;q=0.5", "*"}) {
    auto gz = RawGet(host_, port_, "/api/v1/experiments", with(accept));
    ASSERT_TRUE(gz) << accept;
    EXPECT_EQ(gz->status, 200) << accept;
    EXPECT_EQ(gz->get_header_value("Content-Encoding"), "gzip") << accept;
    EXPECT_EQ(gz->get_header_value("Vary"), "Accept-Encoding") << accept;
    EXPECT_EQ(gz->get_header_value("Content-Length"), std::to_string(gz->body.size()));
    EXPECT_LT(gz->body.size(), list.size()) << accept;
    EXPECT_EQ(Gunzip(gz->body), list) << accept;
  }
  for (const char* accept : {"identity", "gzip;q=0", "br", "deflate"}) {
    auto as_is = RawGet(host_, port_, "/api/v1/experiments", with(accept));
    ASSERT_TRUE(as_is) << accept;
    EXPECT_FALSE(as_is->has_header("Content-Encoding")) << accept;
    EXPECT_EQ(as_is->body, list) << accept;
  }
  // The web page's files too; a small answer goes as it is.
  auto js = RawGet(host_, port_, "/app.js", with("gzip"));
  ASSERT_TRUE(js);
  EXPECT_EQ(js->get_header_value("Content-Encoding"), "gzip");
  EXPECT_THAT(Gunzip(js->body), HasSubstr("function"));
  auto small = RawGet(host_, port_, "/api/v1/experiments/1/checkpoints", with("gzip"));
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 200) << small->body;
  ASSERT_LT(small->body.size(), rest::kMinGzipBytes);
  EXPECT_FALSE(small->has_header("Content-Encoding"));
  EXPECT_EQ(json::parse(small->body, nullptr, false)["checkpoints"].size(), 0u) << small->body;
}

// Every 200 to a GET has a strong ETag and "Cache-Control: no-cache"; asked again with
// If-None-Match naming it (or its gzip twin, or as a weak tag) it is 304 with no body, and
// 200 with the body when the tag is another or the answer changed.
TEST_F(RestTest, GetsCarryAnETagAndAMatchingIfNoneMatchGets304) {
  CreateExperiment("tagged");
  const httplib::Headers auth = {{"Authorization", "Bearer " + token_}};
  auto get = [&](const std::string& path, const std::string& if_none_match,
                 const std::string& accept = "identity") {
    httplib::Headers h = auth;
    h.emplace("Accept-Encoding", accept);
    if (!if_none_match.empty()) h.emplace("If-None-Match", if_none_match);
    return RawGet(host_, port_, path, h);
  };
  auto first = get("/api/v1/experiments", "");
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200);
  const std::string etag = first->get_header_value("ETag");
  EXPECT_THAT(etag, ::testing::MatchesRegex("\"[0-9a-f]{32}\""));
  EXPECT_EQ(first->get_header_value("Cache-Control"), "no-cache");
  auto gz = get("/api/v1/experiments", "", "gzip");
  ASSERT_TRUE(gz);
  const std::string gz_etag = gz->get_header_value("ETag");
  EXPECT_EQ(gz_etag, etag.substr(0, etag.size() - 1) + "-gzip\"");

  for (const std::string& tag : {etag, gz_etag, "W/" + etag, "\"other\", " + etag, std::string("*")}) {
    auto again = get("/api/v1/experiments", tag);
    ASSERT_TRUE(again) << tag;
    EXPECT_EQ(again->status, 304) << tag;
    EXPECT_TRUE(again->body.empty()) << tag;
    EXPECT_EQ(again->get_header_value("ETag"), etag) << tag;
  }
  auto gz_again = get("/api/v1/experiments", etag, "gzip");
  ASSERT_TRUE(gz_again);
  EXPECT_EQ(gz_again->status, 304);
  EXPECT_EQ(gz_again->get_header_value("ETag"), gz_etag);

  auto other = get("/api/v1/experiments", "\"0123456789abcdef0123456789abcdef\"");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_EQ(other->body, first->body);
  EXPECT_EQ(other->get_header_value("ETag"), etag);

  // Another route's tag, and the same route after a change: 200 with the new answer.
  auto one = get("/api/v1/experiments/1", etag);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  EXPECT_NE(one->get_header_value("ETag"), etag);
  CreateExperiment("changed");
  auto changed = get("/api/v1/experiments", etag);
  ASSERT_TRUE(changed);
  EXPECT_EQ(changed->status, 200);
  EXPECT_NE(changed->get_header_value("ETag"), etag);
  EXPECT_EQ(json::parse(changed->body, nullptr, false)["experiments"].size(), 2u);

  // The web page's files revalidate the same way; errors and POSTs have no tag.
  auto js = get("/app.js", "");
  ASSERT_TRUE(js);
  EXPECT_EQ(get("/app.js", js->get_header_value("ETag"))->status, 304);
  auto missing = get("/api/v1/experiments/99", "");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_FALSE(missing->has_header("ETag"));
  EXPECT_EQ(get("/api/v1/experiments/99", "*")->status, 404);
}

// Archive, unarchive and PATCH (name, description, labels) over REST; archived
// experiments are listed only with include_archived=true.
TEST_F(RestTest, ExperimentsAreArchivedRenamedAndLabelled) {
  ASSERT_EQ(CreateExperiment("edits"), 1);
  HttpReply refused = Post("/api/v1/experiments/1/archive", "{}");
  EXPECT_EQ(refused.status, 400) << refused.text;
  EXPECT_EQ(refused.body["code"], "FAILED_PRECONDITION");
  EXPECT_THAT(refused.body["message"].get<std::string>(), HasSubstr("experiment 1 is ACTIVE"));
  HttpReply patched = Send("PATCH", "/api/v1/experiments/1",
                           R"({"name": "renamed", "add_labels": ["x", "y"]})", token_);
  ASSERT_EQ(patched.status, 200) << patched.text;
  EXPECT_EQ(patched.body["experiment"]["name"], "renamed");
  EXPECT_EQ(patched.body["experiment"]["labels"], json({"x", "y"}));
  HttpReply bad = Send("PATCH", "/api/v1/experiments/1", R"({"name": ""})", token_);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body["message"], "name: must not be empty");
  ASSERT_EQ(Post("/api/v1/experiments/1/kill", "{}").status, 200);
  ASSERT_EQ(Post("/api/v1/experiments/1/archive", "{}").status, 200);
  EXPECT_EQ(Get("/api/v1/experiments").body["experiments"].size(), 0u);
  HttpReply all = Get("/api/v1/experiments?include_archived=true");
  ASSERT_EQ(all.body["experiments"].size(), 1u);
  EXPECT_EQ(all.body["experiments"][0]["archived"], true);
  ASSERT_EQ(Post("/api/v1/experiments/1/unarchive", "{}").status, 200);
  EXPECT_EQ(Get("/api/v1/experiments").body["experiments"].size(), 1u);
  EXPECT_EQ(Get("/api/v1/checkpoints/nope").status, 404);
}

// DELETE an experiment (refused while it runs, then gone: it kept no checkpoint), kill a
// trial (refused once it ended), and the master's own log lines, as routes, status codes
// and JSON. (The behaviour: checkpoint_manager_test's DeletingAnExperiment... and
// experiment_manager_test's KillingATrialCancelsItAlone.)
TEST_F(RestTest, ExperimentsDeletedTrialsKilledAndMasterLogs) {
  ASSERT_EQ(CreateExperiment("doomed"), 1);
  HttpReply running = Send("DELETE", "/api/v1/experiments/1", "", token_);
  EXPECT_EQ(running.status, 400) << running.text;
  EXPECT_EQ(running.body["code"], "FAILED_PRECONDITION");
  EXPECT_THAT(running.body["message"].get<std::string>(),
              HasSubstr("experiment 1 is ACTIVE: only an ended experiment"));
  const int64_t trial = Int(Get("/api/v1/experiments/1").body["trials"][0]["id"]);
  HttpReply killed = Post(absl::StrCat("/api/v1/trials/", trial, "/kill"), "{}");
  ASSERT_EQ(killed.status, 200) << killed.text;
  EXPECT_EQ(Get(absl::StrCat("/api/v1/trials/", trial)).body["trial"]["state"], "STATE_CANCELED");
  HttpReply again = Post(absl::StrCat("/api/v1/trials/", trial, "/kill"), "{}");
  EXPECT_EQ(again.status, 400);
  EXPECT_EQ(again.body["message"], absl::StrCat("trial ", trial, " is CANCELED"));
  EXPECT_EQ(Post("/api/v1/trials/999/kill", "{}").status, 404);
  EXPECT_EQ(Get("/api/v1/experiments/1").body["experiment"]["state"], "STATE_CANCELED");

  HttpReply deleted = Send("DELETE", "/api/v1/experiments/1", "", token_);
  ASSERT_EQ(deleted.status, 200) << deleted.text;
  EXPECT_EQ(deleted.body["gc_task"], "");
  EXPECT_EQ(Get("/api/v1/experiments/1").status, 404);
  EXPECT_EQ(Send("DELETE", "/api/v1/experiments/1", "", token_).status, 404);

  HttpReply logs = Get("/api/v1/master/logs?tail=50");
  ASSERT_EQ(logs.status, 200) << logs.text;
  ASSERT_TRUE(logs.body["lines"].is_array());
  EXPECT_LE(logs.body["lines"].size(), 50u);
  bool seen = false;
  for (const auto& line : logs.body["lines"]) {
    seen |= line["message"] == "experiment 1 deleted (1 trial(s))" && line["component"] == "master";
  }
  EXPECT_TRUE(seen) << logs.text;
  EXPECT_EQ(Get("/api/v1/master/logs?tail=-1").status, 400);
}

TEST_F(RestTest, EveryErrorIsTheJsonErrorShape) {
  ASSERT_EQ(CreateExperiment("shapes"), 1);
  auto expect_error = [&](const std::string& what, const httplib::Result& r, int status,
                          const std::string& code, const std::string& mentions) {
    ASSERT_TRUE(r) << what;
    EXPECT_EQ(r->status, status) << what << ": " << r->body;
    EXPECT_THAT(r->get_header_value("Content-Type"), HasSubstr("application/json")) << what;
    json j = json::parse(r->body, nullptr, false);
    EXPECT_EQ(j.value("code", ""), code) << what << ": " << r->body;
    EXPECT_THAT(j.value("message", ""), HasSubstr(mentions)) << what << ": " << r->body;
  };
  httplib::Headers auth = {{"Authorization", "Bearer " + token_}};
  expect_error("unknown route", http_->Get("/api/v1/nothing", auth), 404, "NOT_FOUND",
               "no route for GET /api/v1/nothing");
  expect_error("unknown POST route", http_->Post("/nothing", auth, "{}", "application/json"), 404,
               "NOT_FOUND", "no route for POST /nothing");
  expect_error("PATCH", http_->Patch("/api/v1/experiments/1/kill", auth, "{}", "application/json"),
               404, "NOT_FOUND", "no route for PATCH");
  expect_error("OPTIONS", http_->Options("/api/v1/experiments", auth), 404, "NOT_FOUND",
               "no route for OPTIONS");
  expect_error("a body that is no JSON",
               http_->Post("/api/v1/jobs/1/priority", auth, "priority=5", "text/plain"), 400,
               "INVALID_ARGUMENT", "UpdateJobPriorityRequest");
  expect_error("a body of the wrong message",
               http_->Post("/api/v1/experiments", auth, "[1, 2]", "application/json"), 400,
               "INVALID_ARGUMENT", "CreateExperimentRequest");
  // No body at all: the empty request, which the handler judges.
  expect_error("create with no body", http_->Post("/api/v1/experiments", auth, "", ""), 400,
               "INVALID_ARGUMENT", "");
  auto kill = http_->Post("/api/v1/experiments/1/kill", auth, "", "");
  ASSERT_TRUE(kill);
  EXPECT_EQ(kill->status, 200) << kill->body;
  // `curl -X POST` sends no Content-Length at all: still the empty request.
  ASSERT_EQ(CreateExperiment("no length"), 2);
  std::string no_length = RawHttp(
      port_, absl::StrCat("POST /api/v1/experiments/2/kill HTTP/1.1\r\nHost: x\r\n"
                          "Authorization: Bearer ", token_, "\r\nConnection: close\r\n\r\n"));
  EXPECT_THAT(no_length, ::testing::StartsWith("HTTP/1.1 200")) << no_length;
  // A method nobody serves, a request line that is no HTTP: JSON errors too.
  std::string brew = RawHttp(port_, "BREW /coffee HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(brew, ::testing::StartsWith("HTTP/1.1 4")) << brew;
  EXPECT_THAT(brew, HasSubstr("{\"code\":\"")) << brew;
  std::string garbage = RawHttp(port_, "hello there\r\n\r\n");
  EXPECT_THAT(garbage, ::testing::StartsWith("HTTP/1.1 400")) << garbage;
  EXPECT_THAT(garbage, HasSubstr("{\"code\":\"INVALID_ARGUMENT\"")) << garbage;

  // Query parameters: 400 naming the parameter.
  const std::vector<std::pair<std::string, std::string>> bad_params = {
      {"/api/v1/experiments?limit=-5", "'limit'"},
      {"/api/v1/experiments?offset=-1", "'offset'"},
      {"/api/v1/experiments?limit=ten", "'limit'"},
      {"/api/v1/trials/1/metrics?group=bogus", "'group'"},
      {"/api/v1/trials/1/metrics?max_points=-3", "'max_points'"},
      {"/api/v1/trials/1/logs?wait_ms=-1", "'wait_ms'"},
      {"/api/v1/trials/1/logs?wait_ms=99999", "'wait_ms'"},
      {"/api/v1/trials/1/logs?wait_ms=soon", "'wait_ms'"},
      {"/api/v1/trials/1/logs?after_id=-2", "'after_id'"},
      {"/api/v1/trials/1/logs?limit=-1", "'limit'"},
      {"/api/v1/trials/1/logs?follow=maybe", "'follow'"},
      {"/api/v1/trials/1/timings?group=training", "'group'"},
      {"/api/v1/experiments?colour=red", "'colour'"},
  };
  for (const auto& [path, param] : bad_params) {
    expect_error(path, http_->Get(path, auth), 400, "INVALID_ARGUMENT", param);
  }
  for (const std::string path :
       {"/api/v1/experiments?limit=0&offset=0", "/api/v1/trials/1/metrics?group=validation",
        "/api/v1/trials/1/logs?wait_ms=0&after_id=0&limit=5"}) {
    EXPECT_EQ(Get(path).status, 200) << path;
  }
}

// A UserHandler that only makes HttpServer register the user routes.
class NoUsers : public UserHandler {
 public:
  void Authenticate(const std::string&, Caller*, Done done) override { done(Unimplemented()); }
  void Login(const v1::LoginRequest&, v1::LoginResponse*, Done done) override {
    done(Unimplemented());
  }
  void Logout(const Caller&, const v1::LogoutRequest&, v1::LogoutResponse*, Done done) override {
    done(Unimplemented());
  }
  void WhoAmI(const Caller&, const v1::WhoAmIRequest&, v1::WhoAmIResponse*, Done done) override {
    done(Unimplemented());
  }
  void CreateUser(const Caller&, const v1::CreateUserRequest&, v1::CreateUserResponse*,
                  Done done) override {
    done(Unimplemented());
  }
  void ListUsers(const Caller&, const v1::ListUsersRequest&, v1::ListUsersResponse*,
                 Done done) override {
    done(Unimplemented());
  }
  void ChangePassword(const Caller&, const v1::ChangePasswordRequest&,
                      v1::ChangePasswordResponse*, Done done) override {
    done(Unimplemented());
  }
  void LinkWithAgentUser(const Caller&, const v1::LinkWithAgentUserRequest&,
                         v1::LinkWithAgentUserResponse*, Done done) override {
    done(Unimplemented());
  }

 private:
  static absl::Status Unimplemented() { return absl::UnimplementedError("no users here"); }
};

// docs/rest-api.md of the source tree: found from web/index.html (a data file of this
// test, a link to the source) three directories up.
std::string RestApiDocPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  std::string page = absl::StrCat(srcdir ? srcdir : ".", "/", workspace ? workspace : "det",
                                  "/master/http/web/index.html");
  char real[PATH_MAX];
  if (realpath(page.c_str(), real) == nullptr) return "";
  std::string path = real;
  for (int i = 0; i < 4; ++i) path = path.substr(0, path.rfind('/'));
  return path + "/docs/rest-api.md";
}

TEST_F(RestTest, DocsListEveryRouteAndNoOther) {
  const std::string path = RestApiDocPath();
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read docs/rest-api.md (tried '" << path << "')";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_THAT(doc, HasSubstr("# REST API")) << path;

  NoUsers users;
  HttpServerOptions options;
  options.listen = "127.0.0.1:0";
  options.threads = 2;
  auto server = HttpServer::Start(options, master_->service(), &users);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::vector<std::string>& routes = (*server)->routes();
  ASSERT_GT(routes.size(), 30u);
  // Every route is in the doc as `METHOD /path`.
  for (const std::string& route : routes) {
    EXPECT_THAT(doc, HasSubstr(absl::StrCat("`", route, "`")))
        << route << " is served but docs/rest-api.md does not list it";
  }
  // Every `METHOD /path` of the doc is served.
  std::regex doc_route("`((GET|POST|PUT|DELETE|PATCH) /[^`]*)`");
  int listed = 0;
  for (std::sregex_iterator it(doc.begin(), doc.end(), doc_route), end; it != end; ++it) {
    ++listed;
    const std::string route = (*it)[1].str();
    EXPECT_NE(std::find(routes.begin(), routes.end(), route), routes.end())
        << "docs/rest-api.md lists " << route << ", which is not served";
  }
  EXPECT_GE(listed, static_cast<int>(routes.size()));
}

TEST(HttpsTest, ServesTheApiOverTls) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/rest_tls");
  ASSERT_EQ(std::system(absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'").c_str()), 0);
  const std::string cert = dir + "/cert.pem", key = dir + "/key.pem";
  const std::string openssl = absl::StrCat(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 "
      "-addext subjectAltName=IP:127.0.0.1 -keyout '", key, "' -out '", cert, "' 2>'", dir,
      "/openssl.log'");
  ASSERT_EQ(std::system(openssl.c_str()), 0) << "openssl (deploy/setup.sh installs it) failed";

  config::MasterConfig config;
  config.grpc_listen = "127.0.0.1:0";
  config.http_listen = "127.0.0.1:0";
  config.data_dir = dir;
  config.db_path = dir + "/det.db";
  config.resource_pools.push_back({"default", "", false, absl::Seconds(60)});
  config.admin_password = kAdminPassword;
  config.http_tls_cert_file = cert;
  config.http_tls_key_file = key;
  RealClock clock;
  auto master = Master::Start(config, clock);
  ASSERT_TRUE(master.ok()) << master.status();
  const std::string& addr = (*master)->http_address();
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(addr.substr(addr.rfind(':') + 1), &port));

  httplib::SSLClient tls("127.0.0.1", port);
  tls.set_ca_cert_path(cert.c_str());
  tls.enable_server_certificate_verification(true);
  auto health = tls.Get("/health");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  auto login = tls.Post("/api/v1/auth/login",
                        json{{"username", "admin"}, {"password", kAdminPassword}}.dump(),
                        "application/json");
  ASSERT_TRUE(login);
  ASSERT_EQ(login->status, 200) << login->body;
  std::string token = json::parse(login->body)["token"];
  auto info = tls.Get("/api/v1/master", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(info);
  EXPECT_EQ(info->status, 200);

  httplib::Client plain("127.0.0.1", port);  // Plain HTTP gets nothing.
  auto refused = plain.Get("/health");
  EXPECT_TRUE(!refused || refused->status != 200);

  config.http_tls_key_file = dir + "/missing.pem";
  config.data_dir = dir + "/second";
  config.db_path = dir + "/second/det.db";
  auto bad = Master::Start(config, clock);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("missing.pem"));
  (*master)->Shutdown();
}


TEST(MasterYamlTest, HttpKeys) {
  auto c = config::ParseMasterConfig(
      "http_listen: \"0.0.0.0:8081\"\nhttp_address_file: /tmp/h\n"
      "http_tls:\n  cert_file: /c.pem\n  key_file: /k.pem\nsession_ttl: 12h\n",
      "master.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->http_listen, "0.0.0.0:8081");
  EXPECT_EQ(c->http_address_file, "/tmp/h");
  EXPECT_EQ(c->http_tls_cert_file, "/c.pem");
  EXPECT_EQ(c->http_tls_key_file, "/k.pem");
  EXPECT_EQ(c->session_ttl, absl::Hours(12));
  auto half = config::ParseMasterConfig("http_tls:\n  cert_file: /c.pem\n", "master.yaml");
  EXPECT_THAT(half.status().message(), HasSubstr("http_tls.key_file"));
  auto plain = config::ParseMasterConfig("data_dir: /x\n", "master.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->http_listen, "");  // No HTTP server unless asked for.
  EXPECT_EQ(plain->session_ttl, absl::Hours(168));
}

}  // namespace
}  // namespace det::master
