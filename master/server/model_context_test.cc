// Model contexts through the master's real gRPC server on loopback (real SQLite file):
// uploaded with CreateExperimentStream (its limits checked piece by piece), never copied
// into launch commands, fetched by agents with GetModelContext only for allocations placed
// on them; and a message over the master's receive limit refused by gRPC.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock/clock.h"
#include "common/rpc/context_sha256.h"
#include "common/rpc/context_upload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/server/master.h"
#include "master/testing/master_testing.h"
#include "proto/agent.grpc.pb.h"
#include "proto/api.grpc.pb.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

class ModelContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config::MasterConfig config = testing::LoopbackMasterConfig(testing::FreshTestDir("ctx_"));
    config.admin_password = "admin-pw";
    auto m = Master::Start(config, clock_);
    ASSERT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
    // An agent's channel receives contexts of up to 64 MiB in one message.
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    auto channel = grpc::CreateCustomChannel(master_->address(),
                                             grpc::InsecureChannelCredentials(), args);
    api_ = v1::Api::NewStub(channel);
    agents_ = v1::AgentService::NewStub(channel);
    v1::LoginRequest login;
    login.set_username("admin");
    login.set_password("admin-pw");
    v1::LoginResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = api_->Login(&ctx, login, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    token_ = resp.token();
  }
  void TearDown() override {
    if (master_) master_->Shutdown();
  }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata("authorization", "Bearer " + token_);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return ctx;
  }

  // CreateExperimentStream with `chunks` as they are (then WritesDone).
  grpc::Status Stream(const std::vector<v1::CreateExperimentChunk>& chunks,
                      v1::CreateExperimentResponse* resp) {
    auto ctx = Context();
    auto writer = api_->CreateExperimentStream(ctx.get(), resp);
    for (const auto& c : chunks) {
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }
  // The chunks SplitContext makes of `req`.
  static std::vector<v1::CreateExperimentChunk> Split(const v1::CreateExperimentRequest& req) {
    std::vector<v1::CreateExperimentChunk> out;
    rpc::SplitContext(req, [&](const v1::CreateExperimentChunk& c) {
      out.push_back(c);
      return true;
    });
    return out;
  }
  static v1::CreateExperimentRequest Request(int64_t bytes = 0) {
    v1::CreateExperimentRequest req;
    req.set_config_yaml(testing::ExperimentYaml("ctx"));
    req.set_config_path("ctx.yaml");
    req.set_force(true);
    v1::ContextFile* f = req.add_context();
    f->set_path("train.sh");
    f->set_content("#!/bin/sh\n");
    f->set_mode(0755);
    if (bytes > 0) {
      v1::ContextFile* big = req.add_context();
      big->set_path("data/weights.bin");
      big->set_content(std::string(bytes, 'w'));
    }
    return req;
  }

  std::string Register(const std::string& id) {
    v1::RegisterResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = agents_->Register(&ctx, testing::RegisterRequest(id, 1), &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.session_id();
  }
  grpc::Status Fetch(const std::string& agent, const std::string& session,
                     const std::string& allocation, v1::GetModelContextResponse* resp) {
    v1::GetModelContextRequest req;
    req.set_agent_id(agent);
    req.set_session_id(session);
    req.set_allocation_id(allocation);
    grpc::ClientContext ctx;
    return agents_->GetModelContext(&ctx, req, resp);
  }

  RealClock clock_;
  std::unique_ptr<Master> master_;
  std::unique_ptr<v1::Api::Stub> api_;
  std::unique_ptr<v1::AgentService::Stub> agents_;
  std::string token_;
};

TEST_F(ModelContextTest, AStreamedContextReachesOnlyTheAgentItIsPlacedOn) {
  // 6 MiB: more than the master receives in one message, in pieces of 1 MiB.
  const v1::CreateExperimentRequest req = Request(6 << 20);
  v1::CreateExperimentResponse created;
  grpc::Status st = Stream(Split(req), &created);
  ASSERT_TRUE(st.ok()) << st.error_message();

  const std::string session_a = Register("a");
  v1::PollCommandsRequest poll;
  poll.set_agent_id("a");
  poll.set_session_id(session_a);
  poll.set_wait_ms(20000);
  v1::PollCommandsResponse commands;
  grpc::ClientContext poll_ctx;
  ASSERT_TRUE(agents_->PollCommands(&poll_ctx, poll, &commands).ok());
  ASSERT_EQ(commands.commands_size(), 1);
  const v1::LaunchCommand& launch = commands.commands(0).launch();
  // The launch names the context; it does not carry it.
  EXPECT_LT(launch.ByteSizeLong(), 64u << 10);
  EXPECT_EQ(launch.model_context().experiment_id(), created.experiment().id());
  v1::ModelContext expected;
  for (const auto& f : req.context()) *expected.add_files() = f;
  EXPECT_EQ(launch.model_context().sha256(), rpc::ContextSha256(expected.SerializeAsString()));

  v1::GetModelContextResponse fetched;
  st = Fetch("a", session_a, launch.allocation_id(), &fetched);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(fetched.sha256(), launch.model_context().sha256());
  v1::ModelContext got;
  ASSERT_TRUE(got.ParseFromString(fetched.model_context()));
  ASSERT_EQ(got.files_size(), 2);
  EXPECT_EQ(got.files(0).path(), "train.sh");
  EXPECT_EQ(got.files(0).mode(), 0755u);
  EXPECT_EQ(got.files(1).content(), req.context(1).content());

  // Another agent of the cluster, with its own valid session, is refused.
  const std::string session_b = Register("b");
  st = Fetch("b", session_b, launch.allocation_id(), &fetched);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_THAT(st.error_message(),
              HasSubstr(absl::StrCat("agent b may fetch the model context only of allocations "
                                     "placed on it: allocation ",
                                     launch.allocation_id(), " has no rank on it")));
  // A session that is not the agent's: NOT_FOUND (register again), nothing sent.
  st = Fetch("a", "stolen", launch.allocation_id(), &fetched);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  st = Fetch("a", session_a, "99.0", &fetched);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("allocation 99.0 is not running"));
}

TEST_F(ModelContextTest, AStreamIsRefusedAtThePieceThatBreaksALimit) {
  v1::CreateExperimentResponse resp;
  // Truncated: the stream ends inside a file.
  std::vector<v1::CreateExperimentChunk> chunks = Split(Request(3 << 20));
  chunks.pop_back();
  grpc::Status st = Stream(chunks, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("model context: file 'data/weights.bin': the upload stopped after "
                        "2097152 of its 3145728 bytes"));
  // Truncated between files: fewer than declared.
  chunks = Split(Request(3 << 20));
  chunks.resize(2);
  st = Stream(chunks, &resp);
  EXPECT_THAT(st.error_message(),
              HasSubstr("model context: the upload stopped after 1 of 2 files"));

  // A piece over 1 MiB.
  chunks = Split(Request());
  chunks[1].mutable_file()->set_content(std::string((1 << 20) + 1, 'x'));
  chunks[1].mutable_file()->set_size((1 << 20) + 1);
  chunks[0].set_context_bytes((1 << 20) + 1);
  st = Stream(chunks, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("model context: file 'train.sh': a piece of 1048577 bytes; at most "
                        "1048576 per piece"));

  // A path that leaves the directory.
  v1::CreateExperimentRequest bad = Request();
  bad.mutable_context(0)->set_path("../escape.sh");
  st = Stream(Split(bad), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("file '../escape.sh': a '..' component; paths stay inside the context"));
  // A file that is also a directory of another: the whole list's check, as for the unary
  // call.
  bad = Request();
  v1::ContextFile* under = bad.add_context();
  under->set_path("train.sh/x");
  under->set_content("x");
  st = Stream(Split(bad), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("'train.sh' is a file and also the directory of 'train.sh/x'"));

  // More than 64 MiB, refused at the first message, before any byte of it is sent.
  chunks = Split(Request());
  chunks[0].set_context_bytes((64 << 20) + 1);
  st = Stream(chunks, &resp);
  EXPECT_THAT(st.error_message(), HasSubstr("model context: 67108865 bytes; at most 64 MiB"));
  // A file past the declared total (the 64 MiB limit passed while it arrives).
  chunks = Split(Request(2 << 20));
  chunks[0].set_context_bytes(1 << 20);
  st = Stream(chunks, &resp);
  EXPECT_THAT(st.error_message(),
              HasSubstr("file 'data/weights.bin': more than the 1048576 bytes declared"));

  // Nothing was created.
  v1::ListExperimentsResponse list;
  auto ctx = Context();
  ASSERT_TRUE(api_->ListExperiments(ctx.get(), v1::ListExperimentsRequest(), &list).ok());
  EXPECT_EQ(list.total(), 0);
}

TEST_F(ModelContextTest, AStreamWithoutATokenIsRefusedBeforeItsPiecesAreRead) {
  grpc::ClientContext ctx;
  v1::CreateExperimentResponse resp;
  auto writer = api_->CreateExperimentStream(&ctx, &resp);
  for (const auto& c : Split(Request(2 << 20))) {
    if (!writer->Write(c)) break;
  }
  writer->WritesDone();
  grpc::Status st = writer->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
}

TEST_F(ModelContextTest, AUnaryRequestOverTheReceiveLimitIsRefusedByGrpc) {
  v1::CreateExperimentRequest req = Request(5 << 20);
  v1::CreateExperimentResponse resp;
  auto ctx = Context();
  grpc::Status st = api_->CreateExperiment(ctx.get(), req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("4194304"));
  // A small one still works unary (REST and older callers).
  ctx = Context();
  st = api_->CreateExperiment(ctx.get(), Request(), &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

}  // namespace
}  // namespace det::master
