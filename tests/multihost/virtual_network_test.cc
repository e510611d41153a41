// The multi-host harness: hosts reach each other over the bridge at their own addresses, a
// link taken down cuts a host off until it comes back up, the machine's own interfaces and
// routes are untouched, and a run's namespaces are gone after it (and a dead run's too).
#include "tests/multihost/virtual_network.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPython[] = "/usr/bin/python3";
// Answers every connection with "hello from <address>": python3 -c SERVER ADDRESS PORT.
constexpr char kServer[] = R"py(
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(8)
while True:
    c, _ = s.accept()
    c.sendall(b"hello from " + sys.argv[1].encode())
    c.close()
)py";
// Connects within 2 s and prints what it got: python3 -c CLIENT ADDRESS PORT.
constexpr char kClient[] = R"py(
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
print(s.recv(100).decode())
)py";

std::string RootNetworkState() {
  return RunCommand({VirtualNetwork::IpPath(), "-o", "link"}).out +
         RunCommand({VirtualNetwork::IpPath(), "-o", "addr"}).out +
         RunCommand({VirtualNetwork::IpPath(), "route", "show", "table", "all"}).out;
}

std::string Namespaces() { return RunCommand({VirtualNetwork::IpPath(), "netns", "list"}).out; }

class VirtualNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status st = VirtualNetwork::Available(); !st.ok()) GTEST_SKIP() << st.message();
  }
};

TEST_F(VirtualNetworkTest, HostsTalkOverTheBridgeUntilALinkGoesDown) {
  const std::string root_before = RootNetworkState();
  std::string tag;
  {
    absl::StatusOr<std::unique_ptr<VirtualNetwork>> created = VirtualNetwork::Create();
    ASSERT_TRUE(created.ok()) << created.status();
    VirtualNetwork& net = **created;
    tag = net.tag();
    absl::StatusOr<std::string> a = net.AddHost("a");
    absl::StatusOr<std::string> b = net.AddHost("b");
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(*a, net.subnet() + ".1");
    EXPECT_EQ(*b, net.subnet() + ".2");
    EXPECT_EQ(net.AddHost("a").status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(net.AddHost("toolong").status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_LE(net.Namespace("b").size(), 15u);
    EXPECT_THAT(Namespaces(), HasSubstr(net.Namespace("b")));

    SpawnOptions opts;
    opts.argv = net.InHost("a", {kPython, "-c", kServer, *a, "7070"});
    opts.stdout_mode = opts.stderr_mode = SpawnOptions::Output::kNull;
    absl::StatusOr<std::unique_ptr<Subprocess>> server = Subprocess::Spawn(opts);
    ASSERT_TRUE(server.ok()) << server.status();
    // The server's pid is the program's own (`ip netns exec` execs in place).
    ASSERT_TRUE(WaitUntil(
        [&] {
          for (int pid : net.Pids("a")) {
            if (pid == (*server)->pid()) return true;
          }
          return false;
        },
        absl::Seconds(10)));
    auto connect = [&] {
      return RunCommand(net.InHost("b", {kPython, "-c", kClient, *a, "7070"}), absl::Seconds(10));
    };
    CommandResult hello;
    ASSERT_TRUE(WaitUntil(
        [&] {
          hello = connect();
          return hello.exit.ok();
        },
        absl::Seconds(20)))
        << hello.err;
    EXPECT_THAT(hello.out, HasSubstr("hello from " + *a));
    // Host a's address is not the machine's: the root namespace cannot reach it.
    CommandResult from_root =
        RunCommand({kPython, "-c", kClient, *a, "7070"}, absl::Seconds(10));
    EXPECT_FALSE(from_root.exit.ok()) << from_root.out;

    ASSERT_TRUE(net.SetLink("b", false).ok());
    CommandResult cut = connect();
    EXPECT_FALSE(cut.exit.ok()) << cut.out;
    EXPECT_THAT(cut.err, Not(HasSubstr("hello")));
    ASSERT_TRUE(net.SetLink("b", true).ok());
    ASSERT_TRUE(WaitUntil([&] { return connect().exit.ok(); }, absl::Seconds(20)));
    EXPECT_EQ(net.SetLink("zz", false).code(), absl::StatusCode::kInvalidArgument);
    // The server is left running: the network's destruction kills it.
  }
  EXPECT_THAT(Namespaces(), Not(HasSubstr(absl::StrCat("mh", tag, "-"))));
  EXPECT_EQ(RootNetworkState(), root_before);
}

TEST_F(VirtualNetworkTest, NamespacesOfADeadRunAreRemoved) {
  // A pid that runs no process: a run that died without cleaning up. Derived from this
  // test's own pid so that concurrent runs of this test use different leftovers.
  int dead = 4000000 + getpid() % 190000;
  while (kill(dead, 0) == 0 || errno != ESRCH) ++dead;
  const std::string leftover = absl::StrCat("mh", VirtualNetwork::TagOf(dead), "-a");
  // Added here (the add fails when it exists); another test's Create() may already remove it.
  ASSERT_TRUE(RunCommand({VirtualNetwork::IpPath(), "netns", "add", leftover}).exit.ok());
  absl::StatusOr<std::unique_ptr<VirtualNetwork>> net = VirtualNetwork::Create();
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_THAT(Namespaces(), Not(HasSubstr(leftover)));
}

}  // namespace
}  // namespace det::testing
