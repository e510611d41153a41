// The worker contract table (cases.json) for the C++ harness: each case's launch
// environment read by harness::ContextFromEnvironment, its steps run through the harness's
// own API (Reporter, WriteCheckpoint, PreemptContext) against a real gRPC fake master on
// loopback, and what that master received checked against the case. The Python package
// passes the same table (common/worker/python/tests/contract_test.py).
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/testing/wait_until.h"
#include "common/worker/cpp/collective/testing/process_group.h"
#include "common/worker/cpp/harness/checkpoint.h"
#include "common/worker/cpp/harness/context.h"
#include "common/worker/cpp/harness/preempt.h"
#include "common/worker/cpp/harness/reporter_client.h"
#include "common/worker/cpp/harness/testing/fake_master.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace det::harness {
namespace {

using ::det::testing::WaitUntil;
using ::testing::HasSubstr;
using Json = nlohmann::json;

const Json& Table() {
  static const Json* table = [] {
    std::ifstream in(det::testing::RunfilePath("common/worker/contract/cases.json"));
    std::stringstream text;
    text << in.rdbuf();
    return new Json(Json::parse(text.str(), nullptr, /*allow_exceptions=*/false));
  }();
  return *table;
}

std::vector<std::string> CaseNames() {
  std::vector<std::string> names;
  if (Table().is_object()) {
    for (const Json& c : Table()["cases"]) names.push_back(c["name"].get<std::string>());
  }
  return names;
}

const Json& Case(const std::string& name) {
  for (const Json& c : Table()["cases"]) {
    if (c["name"] == name) return c;
  }
  static const Json none;
  return none;
}

// `j` with "$CHECKPOINTS" replaced by `dir` in every string.
Json Substitute(const Json& j, const std::string& dir) {
  if (j.is_string()) return absl::StrReplaceAll(j.get<std::string>(), {{"$CHECKPOINTS", dir}});
  if (j.is_object() || j.is_array()) {
    Json out = j;
    for (auto& [k, v] : out.items()) v = Substitute(v, dir);
    return out;
  }
  return j;
}

grpc::StatusCode CodeNamed(const std::string& name) {
  static const std::map<std::string, grpc::StatusCode> codes = {
      {"UNAVAILABLE", grpc::StatusCode::UNAVAILABLE},
      {"RESOURCE_EXHAUSTED", grpc::StatusCode::RESOURCE_EXHAUSTED},
      {"FAILED_PRECONDITION", grpc::StatusCode::FAILED_PRECONDITION},
      {"PERMISSION_DENIED", grpc::StatusCode::PERMISSION_DENIED},
      {"UNIMPLEMENTED", grpc::StatusCode::UNIMPLEMENTED}};
  auto it = codes.find(name);
  EXPECT_NE(it, codes.end()) << "cases.json names an unknown status code " << name;
  return it == codes.end() ? grpc::StatusCode::UNKNOWN : it->second;
}

testing::FakeError ErrorOf(const Json& j) {
  testing::FakeError e;
  e.code = CodeNamed(j["code"].get<std::string>());
  e.message = j.value("message", "");
  e.times = j.value("times", -1);
  return e;
}

// The TrialContext value the table calls `name`, as JSON.
Json ContextValue(const TrialContext& c, const std::string& name) {
  const v1::TrialSpec& s = c.spec;
  if (name == "experiment_id") return s.experiment_id();
  if (name == "trial_id") return s.trial_id();
  if (name == "run_id") return s.run_id();
  if (name == "trial_seed") return s.trial_seed();
  if (name == "rank") return c.rank;
  if (name == "world_size") return c.world_size;
  if (name == "global_batch_size") return s.global_batch_size();
  if (name == "per_slot_batch_size") return c.per_slot_batch_size();
  if (name == "batches_per_epoch") return s.batches_per_epoch();
  if (name == "target_batches") return s.target_batches();
  if (name == "validation_period") return s.validation_period();
  if (name == "checkpoint_period") return s.checkpoint_period();
  if (name == "checkpoint_policy") return s.checkpoint_policy();
  if (name == "searcher_metric") return s.searcher().metric();
  if (name == "smaller_is_better") return s.searcher().smaller_is_better();
  if (name == "deterministic") return s.deterministic();
  if (name == "latest_checkpoint") return s.latest_checkpoint();
  if (name == "checkpoint_dir") return s.checkpoint_dir();
  if (name == "hparams") return c.hparams;
  if (name == "data") return c.data;
  ADD_FAILURE() << "cases.json names a context value the C++ harness does not map: " << name;
  return nullptr;
}

void ExpectMessageHas(const absl::Status& st, const Json& parts) {
  EXPECT_FALSE(st.ok());
  for (const Json& p : parts) EXPECT_THAT(std::string(st.message()), HasSubstr(p.get<std::string>()));
}

void ExpectAuth(const v1::WorkerAuth& auth, const Json& want) {
  EXPECT_EQ(auth.allocation_id(), want["allocation_id"]);
  EXPECT_EQ(auth.token(), want["token"]);
  EXPECT_EQ(auth.rank(), want["rank"]);
}

class Contract : public ::testing::TestWithParam<std::string> {};

TEST_P(Contract, CppHarnessPassesTheCase) {
  ASSERT_TRUE(Table().is_object()) << "common/worker/contract/cases.json is not JSON";
  const Json& table = Table();
  const Json& c = Case(GetParam());
  const std::string dir = det::testing::NewTempDir(GetParam());
  ASSERT_FALSE(dir.empty());

  testing::FakeMaster master;
  testing::FakeWorkerService& fake = master.service();
  const Json setup = c.value("master", Json::object());
  if (setup.contains("preempt")) fake.SetPreempt(setup["preempt"]["preempt"], setup["preempt"]["reason"]);
  if (setup.contains("preempt_error")) fake.SetPreemptError(ErrorOf(setup["preempt_error"]));
  if (setup.contains("metrics_error")) fake.SetMetricsError(ErrorOf(setup["metrics_error"]));

  // The launch environment.
  // (Each JSON a range-for walks is a named local: items() refers into it.)
  const Json spec_changes = c.value("spec", Json::object());
  const Json env_changes = Substitute(c.value("env", Json::object()), dir);
  const Json unset = c.value("unset", Json::array());
  const Json steps = c.value("steps", Json::array());
  Json spec = table["base"]["spec"];
  for (const auto& [k, v] : spec_changes.items()) spec[k] = v;
  spec = Substitute(spec, dir);
  const std::string spec_path = dir + "/spec.json";
  std::ofstream(spec_path) << (c.contains("spec_text") ? c["spec_text"].get<std::string>() : spec.dump());
  std::map<std::string, std::string> env = {{"DET_MASTER", master.address()},
                                            {"DET_TRIAL_SPEC_FILE", spec_path}};
  for (const auto& [k, v] : table["base"]["env"].items()) env[k] = v.get<std::string>();
  for (const auto& [k, v] : env_changes.items()) env[k] = v.get<std::string>();
  for (const Json& k : unset) env.erase(k.get<std::string>());

  const Json expect = Substitute(c["expect"], dir);
  absl::StatusOr<TrialContext> ctx = ContextFromEnvironment(env);
  if (expect.contains("context_error")) {
    ExpectMessageHas(ctx.status(), expect["context_error"]);
    return;
  }
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const Json context_expected = expect.value("context", Json::object());
  for (const auto& [name, want] : context_expected.items()) {
    EXPECT_EQ(ContextValue(*ctx, name), want) << name;
  }

  std::unique_ptr<Reporter> reporter = NewGrpcReporter(*ctx, absl::Seconds(30));
  std::unique_ptr<PreemptContext> preempt;
  for (const Json& step : steps) {
    const std::string op = step["op"];
    SCOPED_TRACE(step.dump());
    if (op == "report") {
      std::map<std::string, double> values = step["values"];
      absl::Status st = reporter->ReportMetrics(step["group"], step["total_batches"], values);
      if (step.contains("error")) {
        ExpectMessageHas(st, step["error"]);
      } else {
        EXPECT_TRUE(st.ok()) << st;
      }
    } else if (op == "checkpoint") {
      std::map<std::string, std::string> files = step["files"];
      absl::StatusOr<v1::Checkpoint> written =
          WriteCheckpoint(ctx->spec.checkpoint_dir(), NewCheckpointUuid(), files);
      ASSERT_TRUE(written.ok()) << written.status();
      written->set_total_batches(step["total_batches"]);
      absl::Status st = reporter->ReportCheckpoint(*written);
      EXPECT_TRUE(st.ok()) << st;
    } else if (op == "should_preempt") {
      if (!preempt) preempt = std::make_unique<PreemptContext>(NewGrpcPreemptSource(*ctx), nullptr);
      if (step.contains("until")) {
        EXPECT_TRUE(WaitUntil("should_preempt says stop", [&] {
          absl::StatusOr<bool> stop = preempt->ShouldPreempt();
          return stop.ok() && *stop;
        }, absl::Seconds(30)));
        EXPECT_EQ(preempt->reason(), step["reason"]);
      } else if (step.contains("until_error")) {
        absl::Status error;
        EXPECT_TRUE(WaitUntil("should_preempt fails", [&] {
          absl::StatusOr<bool> stop = preempt->ShouldPreempt();
          error = stop.status();
          return !stop.ok();
        }, absl::Seconds(30)));
        EXPECT_EQ(step["until_error"], "allocation_ended");
        EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition) << error;
        ExpectMessageHas(error, step["error"]);
      } else {
        absl::StatusOr<bool> stop = preempt->ShouldPreempt();
        ASSERT_TRUE(stop.ok()) << stop.status();
        EXPECT_EQ(*stop, step["expect"].get<bool>());
      }
    } else if (op == "wait_preempt_requests") {
      const size_t min = step["min"];
      EXPECT_TRUE(WaitUntil("the master was asked", [&] { return fake.preempt_requests().size() >= min; },
                            absl::Seconds(30)));
    } else {
      FAIL() << "cases.json: unknown op " << op;
    }
  }
  preempt.reset();  // Stops polling before the checks.

  const Json& every = table["every_call"];
  if (expect.contains("metrics")) {
    std::vector<Json> got;
    for (const v1::ReportMetricsRequest& r : fake.metrics()) {
      ExpectAuth(r.auth(), every["auth"]);
      EXPECT_EQ(r.trial_id(), every["trial_id"]);
      for (const v1::Metrics& m : r.metrics()) {
        EXPECT_EQ(m.trial_id(), every["trial_id"]);
        if (m.group() == "timings") continue;  // the runtime's own; not part of the contract
        Json values = Json::object();
        for (const auto& [k, v] : m.values()) values[k] = v;
        got.push_back({{"group", m.group()}, {"total_batches", m.total_batches()}, {"values", values}});
      }
    }
    EXPECT_EQ(Json(got), expect["metrics"]);
  }
  if (expect.contains("refused_metrics")) {
    EXPECT_EQ(fake.refused_metrics(), expect["refused_metrics"]);
  }
  if (expect.contains("checkpoints")) {
    std::vector<v1::ReportCheckpointRequest> got = fake.checkpoints();
    ASSERT_EQ(got.size(), expect["checkpoints"].size());
    for (size_t i = 0; i < got.size(); ++i) {
      const Json& want = expect["checkpoints"][i];
      const v1::Checkpoint& ck = got[i].checkpoint();
      ExpectAuth(got[i].auth(), every["auth"]);
      EXPECT_EQ(ck.total_batches(), want["total_batches"]);
      EXPECT_EQ(ck.storage_path(), absl::StrCat(ctx->spec.checkpoint_dir(), "/", ck.uuid()));
      for (const auto& [file, size] : want["resources_include"].items()) {
        ASSERT_TRUE(ck.resources().contains(file)) << file;
        EXPECT_EQ(ck.resources().at(file), size.get<int64_t>()) << file;
        std::ifstream in(absl::StrCat(ck.storage_path(), "/", file));
        EXPECT_TRUE(in.good()) << "the checkpoint's " << file << " is not there";
      }
    }
  }
  if (expect.contains("preempt_requests_min")) {
    std::vector<v1::ShouldPreemptRequest> asked = fake.preempt_requests();
    EXPECT_GE(asked.size(), expect["preempt_requests_min"].get<size_t>());
    for (const auto& r : asked) {
      ExpectAuth(r.auth(), every["auth"]);
      EXPECT_GT(r.wait_ms(), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Table, Contract, ::testing::ValuesIn(CaseNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace det::harness
