// Limits at the door (issue 15 point 4), attacked through the real det CLI and through a
// client speaking the master's gRPC API itself (so that the CLI's own checks are not what
// holds): a 50 MB description, 100,001 context files, context paths that leave the
// directory or repeat, a config that is not UTF-8, and a length whose arithmetic
// overflows. Each is refused at submit with an error naming the limit, the path or the
// byte, and nothing is stored. A real det-master; no agent is needed (requests use force).
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/rpc/context_upload.h"
#include "common/rpc/rpc.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/api.grpc.pb.h"
#include "tests/security/security_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kConfig[] =
    "name: attack\nentrypoint: [\"./train.sh\"]\nsearcher:\n  name: single\n  metric: loss\n"
    "  max_length:\n    batches: 1\nresources:\n  slots_per_trial: 1\n";

// The pid of the det-master whose --config lies in `dir`, from /proc; 0 if none.
int MasterPid(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> proc(opendir("/proc"), closedir);
  while (dirent* e = proc ? readdir(proc.get()) : nullptr) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::string cmdline = Slurp(absl::StrCat("/proc/", pid, "/cmdline"));
    if (cmdline.find("det-master") != std::string::npos &&
        cmdline.find(dir + "/") != std::string::npos) {
      return pid;
    }
  }
  return 0;
}

// VmRSS of `pid` in KiB (from /proc/PID/status); -1 when unknown.
int64_t RssKiB(int pid) {
  for (absl::string_view line :
       absl::StrSplit(Slurp(absl::StrCat("/proc/", pid, "/status")), '\n')) {
    if (!absl::ConsumePrefix(&line, "VmRSS:")) continue;
    int64_t kib = -1;
    if (absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(line), " kB"), &kib)) {
      return kib;
    }
  }
  return -1;
}

class InputLimitsTest : public SecurityCluster {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    // An attacker's client: it sends what det's own clients refuse to (messages over
    // rpc::kMaxMasterReceiveBytes), so that the master's own limit is what holds.
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(256 << 20);
    stub_ = v1::Api::NewStub(
        grpc::CreateCustomChannel(cluster_.address(), rpc::MasterChannelCredentials(), args));
  }

  // Sets force (so that no agent is needed) and a config path on `req`; a call context as
  // the admin.
  std::unique_ptr<grpc::ClientContext> AsAdmin(v1::CreateExperimentRequest* req) {
    req->set_force(true);
    if (req->config_path().empty()) req->set_config_path("attack.yaml");
    auto ctx = rpc::Context(absl::Seconds(60));
    ctx->AddMetadata("authorization", "Bearer " + cluster_.token());
    return ctx;
  }

  // CreateExperiment as the admin, straight to the master (no CLI), with force so that no
  // agent is needed.
  grpc::Status Create(v1::CreateExperimentRequest req) {
    v1::CreateExperimentResponse resp;
    auto ctx = AsAdmin(&req);
    return stub_->CreateExperiment(ctx.get(), req, &resp);
  }

  // CreateExperimentStream as the admin (the context in pieces, as det experiment create
  // sends it), with force.
  grpc::Status CreateStream(v1::CreateExperimentRequest req) {
    v1::CreateExperimentResponse resp;
    auto ctx = AsAdmin(&req);
    auto writer = stub_->CreateExperimentStream(ctx.get(), &resp);
    if (rpc::SplitContext(req, [&](const v1::CreateExperimentChunk& c) { return writer->Write(c); })) {
      writer->WritesDone();
    }
    return writer->Finish();
  }

  size_t StoredExperiments() {
    nlohmann::json list = cluster_.DetJson({"experiment", "list"});
    return list.value("experiments", nlohmann::json::array()).size();
  }

  std::unique_ptr<v1::Api::Stub> stub_;
};

// POSTs `body_bytes` of zeros to `path` on the HTTP server at host:port `address` with
// `headers`, over a raw socket, 1 MiB at a time until everything is sent, the server stops
// reading, or its answer arrives (a server that answers before it read the body); returns
// the first line of the answer ("" when none came) and the body bytes sent.
std::pair<std::string, int64_t> RawPost(const std::string& address, const std::string& path,
                                        int64_t body_bytes, const std::string& headers = "") {
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) return {};
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return {};
  }
  timeval tv{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string head = absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: ", address,
                                  "\r\nContent-Type: application/json\r\nContent-Length: ",
                                  body_bytes, "\r\n", headers, "\r\n");
  int64_t sent = 0;
  std::string answer;
  char buf[512];
  if (send(fd, head.data(), head.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(head.size())) {
    std::string chunk(1 << 20, '0');
    while (sent < body_bytes) {
      ssize_t got = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
      if (got > 0) {
        answer.assign(buf, got);
        break;
      }
      ssize_t n = send(fd, chunk.data(), std::min<int64_t>(chunk.size(), body_bytes - sent),
                       MSG_NOSIGNAL);
      if (n <= 0) break;  // the server closed the connection
      sent += n;
    }
  }
  if (answer.empty()) {
    ssize_t got = recv(fd, buf, sizeof(buf) - 1, 0);
    if (got > 0) answer.assign(buf, got);
  }
  close(fd);
  return {answer.substr(0, answer.find("\r\n")), sent};
}

// Issue 25: the HTTP server read bodies of up to 128 MiB before authenticating: 32 parallel
// 120 MB POSTs without a token took the master to 4.27 GB. Now the token is checked (and a
// route's body limit applied) before any body is read.
TEST_F(InputLimitsTest, UnauthenticatedBigPostsCostTheMasterKilobytesNotTheirBodies) {
  // With a token, a body over the route's own limit is refused by its declared length
  // (first: the flood below makes the master slow down failed logins from this address).
  auto [too_big, big_sent] =
      RawPost(cluster_.http_address(), "/api/v1/experiments/1/kill", 50'000'000,
              absl::StrCat("Authorization: Bearer ", cluster_.token(), "\r\n"));
  EXPECT_THAT(too_big, HasSubstr(" 413 ")) << too_big;
  EXPECT_LT(big_sent, 50'000'000);
  const int pid = MasterPid(cluster_.dir());
  ASSERT_GT(pid, 0);
  const int64_t idle = RssKiB(pid);
  ASSERT_GT(idle, 0);
  constexpr int64_t kBody = 120'000'000;
  // The master's resident size, sampled while the requests come (VmHWM holds the peak of
  // its start: hashing the admin's password takes 64 MiB).
  std::atomic<bool> done{false};
  std::atomic<int64_t> peak{idle};
  std::thread sampler([&] {
    while (!done) {
      int64_t now = RssKiB(pid);
      if (now > peak) peak = now;
      absl::SleepFor(absl::Milliseconds(2));
    }
  });
  std::vector<std::thread> posts;
  std::vector<std::pair<std::string, int64_t>> answers(32);
  for (int i = 0; i < 32; ++i) {
    posts.emplace_back([&, i] {
      answers[i] = RawPost(cluster_.http_address(), "/api/v1/experiments", kBody);
    });
  }
  for (auto& t : posts) t.join();
  done = true;
  sampler.join();
  int refused = 0;
  for (const auto& [status, sent] : answers) {
    // Refused (or, once many failed, slowed down) from the headers alone. The master then
    // closes the connection with the body unread, so the client may see the reset before
    // the answer ("" here); either way it stopped taking the body.
    EXPECT_THAT(status, ::testing::AnyOf(HasSubstr(" 401 "), HasSubstr(" 429 "), ""))
        << status;
    if (!status.empty()) ++refused;
    EXPECT_LT(sent, kBody) << "the master took the whole body";
  }
  EXPECT_GT(refused, 0);
  EXPECT_LT(peak, idle + 64 * 1024) << "idle " << idle << " KiB, peak " << peak << " KiB";
  EXPECT_GE(RssKiB(pid), 0);  // the master is still up
}

// Issue 25: the master kept DET_ADMIN_PASSWORD in its environment after creating the admin,
// readable by the machine's other processes of its user (a trial's, say) through
// /proc/<pid>/environ. It is gone from there, while the admin it created still logs in.
TEST_F(InputLimitsTest, TheAdminPasswordIsNotInTheMastersEnvironment) {
  const int pid = MasterPid(cluster_.dir());
  ASSERT_GT(pid, 0);
  const std::string environ = Slurp(absl::StrCat("/proc/", pid, "/environ"));
  ASSERT_FALSE(environ.empty());
  EXPECT_THAT(environ, Not(HasSubstr("DET_ADMIN_PASSWORD=")));
  EXPECT_THAT(environ, Not(HasSubstr(kTestAdminPassword)));
  EXPECT_FALSE(cluster_.token().empty());  // the admin exists and logged in
}

// Issue 15: a 50 MB description was accepted after 75 s with the master at 1.2 GB, and
// every later experiment list took 10 s. Now gRPC refuses the message (over the master's
// 4 MiB receive limit) before it is read whole: master RSS unchanged. (The time each
// refusal took is printed, not asserted: a functional test makes no speed claim.)
TEST_F(InputLimitsTest, AFiftyMegabyteConfigIsRefusedUnreadAndNothingIsKept) {
  const int pid = MasterPid(cluster_.dir());
  ASSERT_GT(pid, 0);
  v1::CreateExperimentRequest req;
  req.set_config_yaml(absl::StrCat(kConfig, "description: '", std::string(50 << 20, 'x'), "'\n"));
  const int64_t first_before = RssKiB(pid);
  ASSERT_GT(first_before, 0);
  std::vector<int64_t> rss_kib;
  for (int i = 0; i < 4; ++i) {
    const absl::Time start = absl::Now();
    grpc::Status st = Create(req);
    const absl::Duration took = absl::Now() - start;
    // The connection's read buffers of the refused message are freed as the call is torn
    // down, usually at once; gRPC may also keep them for the connection until its next call
    // (seen here once in five runs: +20-44 MiB until the next attempt). RSS is read once it
    // is back within 8 MiB, or after 2 s (then checked against the 64 MiB bound below).
    int64_t rss = 0;
    (void)::det::testing::WaitUntil(
        "master RSS back within 8 MiB",
        [&] { return (rss = RssKiB(pid)) - first_before < (8 << 10); }, absl::Seconds(2),
        absl::Milliseconds(10));
    rss_kib.push_back(rss);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("vs. 4194304")) << st.error_message();
    std::cout << "50 MB config " << i << " refused in " << absl::FormatDuration(took)
              << "; master VmRSS " << rss_kib.back() << " KiB (before the first: "
              << first_before << " KiB)\n";
  }
  // Nothing of the description is kept, nor buffered whole: after each refusal the master
  // holds at most one connection's read buffers (under 64 MiB, not growing with the
  // attempts), and once the client's connection is gone its RSS is back where it was
  // (within 8 MiB).
  for (int64_t kib : rss_kib) {
    EXPECT_LT(kib - first_before, 64 << 10) << "VmRSS after each: "
                                           << absl::StrJoin(rss_kib, ", ") << " KiB (before: "
                                           << first_before << " KiB)";
  }
  stub_.reset();  // closes the attacker's channel
  EXPECT_TRUE(WaitUntil([&] { return RssKiB(pid) - first_before < (8 << 10); },
                        absl::Seconds(10)))
      << "VmRSS " << RssKiB(pid) << " KiB 10 s after the connection closed (before: "
      << first_before << " KiB)";
  EXPECT_EQ(StoredExperiments(), 0u);

  // Through the CLI: a string field past its limit, in a config under 1 MiB, names it.
  std::string config = cluster_.WriteFile(
      "long.yaml", absl::StrCat(kConfig, "description: '", std::string(100 << 10, 'x'), "'\n"));
  std::string ctx = cluster_.dir() + "/ctx";
  mkdir(ctx.c_str(), 0755);
  CommandResult r = cluster_.Det({"experiment", "create", config, ctx, "--force"});
  EXPECT_EQ(r.exit.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("description")) << r.err;
  EXPECT_EQ(StoredExperiments(), 0u);
}

// Issue 15: 100,001 empty context files were accepted (the limit counted bytes only).
TEST_F(InputLimitsTest, ContextsOfTooManyFilesAreRefusedNamingTheLimit) {
  v1::CreateExperimentRequest req;
  req.set_config_yaml(kConfig);
  for (int i = 0; i < 100001; ++i) req.add_context()->set_path(absl::StrCat("f", i));
  grpc::Status st = Create(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(),
              HasSubstr("model context: 100001 files; at most 10000 are accepted"));
  // Through the stream: refused at its first message, before any file is sent.
  st = CreateStream(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(),
              HasSubstr("model context: 100001 files; at most 10000 are accepted"));
  EXPECT_EQ(StoredExperiments(), 0u);
}

// A context over 64 MiB: through the stream it is refused at the first message (its
// declared size); sent whole in one message, gRPC refuses it (over the 4 MiB the master
// receives).
TEST_F(InputLimitsTest, AContextOverSixtyFourMebibytesIsRefusedNamingTheLimit) {
  v1::CreateExperimentRequest req;
  req.set_config_yaml(kConfig);
  for (int i = 0; i < 3; ++i) {
    v1::ContextFile* f = req.add_context();
    f->set_path(absl::StrCat("chunk", i));
    f->set_content(std::string(22 << 20, 'x'));
  }
  grpc::Status st = CreateStream(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(),
              HasSubstr("model context: 69206016 bytes; at most 64 MiB are accepted"));
  st = Create(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("vs. 4194304"));
  EXPECT_EQ(StoredExperiments(), 0u);
}

// Issue 15: such paths were accepted at submit and failed only at launch with exit 127.
TEST_F(InputLimitsTest, ContextPathsThatLeaveTheDirectoryOrRepeatAreRefusedNamingThePath) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"train.sh", "../escape.py"},
       "file '../escape.py': a '..' component; paths stay inside the context"},
      {{"train.sh", "a/../../b.py"}, "file 'a/../../b.py': a '..' component"},
      {{"train.sh", "/etc/cron.d/evil"},
       "file '/etc/cron.d/evil': an absolute path; context paths are relative"},
      {{"train.sh", "lib/x.py", "train.sh"}, "file 'train.sh': appears twice"},
      {{"train.sh", "lib", "lib/x.py"}, "'lib' is a file and also the directory of 'lib/x.py'"},
  };
  for (const auto& [paths, error] : cases) {
    SCOPED_TRACE(error);
    v1::CreateExperimentRequest req;
    req.set_config_yaml(kConfig);
    for (const std::string& p : paths) {
      v1::ContextFile* f = req.add_context();
      f->set_path(p);
      f->set_content("echo pwned\n");
    }
    grpc::Status st = Create(req);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(error));
  }
  EXPECT_EQ(StoredExperiments(), 0u);
}

// Issue 15: a config with invalid UTF-8 got "gRPC code 12".
TEST_F(InputLimitsTest, AConfigThatIsNotUtf8IsRefusedNamingTheByte) {
  std::string config =
      cluster_.WriteFile("latin1.yaml", absl::StrCat(kConfig, "description: caf\xe9 au lait\n"));
  std::string ctx = cluster_.dir() + "/ctx";
  mkdir(ctx.c_str(), 0755);
  CommandResult r = cluster_.Det({"experiment", "create", config, ctx, "--force"});
  EXPECT_EQ(r.exit.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("latin1.yaml"));
  EXPECT_THAT(r.err, HasSubstr("is not valid UTF-8 at line 10, byte offset 157 (0xe9)")) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("code 12")));
  EXPECT_EQ(StoredExperiments(), 0u);
}

// Issue 15: epochs x records_per_epoch overflowed to a wrapped target of
// 9079256848778919937 batches.
TEST_F(InputLimitsTest, ALengthWhoseArithmeticOverflowsIsRefused) {
  v1::CreateExperimentRequest req;
  req.set_config_yaml(
      "name: overflow\nentrypoint: [\"./train.sh\"]\nrecords_per_epoch: 1000000000000000\n"
      "hyperparameters:\n  global_batch_size: 1\nsearcher:\n  name: single\n  metric: loss\n"
      "  max_length:\n    epochs: 1000000000000\n");
  grpc::Status st = Create(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(),
              HasSubstr("1000000000000 epochs of 1000000000000000 batches is more than "
                        "1000000000000 batches, the longest length accepted"));
  EXPECT_EQ(StoredExperiments(), 0u);
}

}  // namespace
}  // namespace det::testing
