#include "master/allocations/chief_ports.h"

#include "gtest/gtest.h"

namespace det::master {
namespace {

TEST(ChiefPortsTest, LowestFreePortPerAgentHeldUntilReleased) {
  ChiefPorts ports;
  EXPECT_EQ(ports.Lowest("a", 29500, 29502), 29500);
  ports.Hold("a", 29500, "1.0");
  EXPECT_EQ(ports.Lowest("a", 29500, 29502), 29501);
  EXPECT_EQ(ports.Lowest("b", 29500, 29502), 29500);  // Per agent.
  ports.Hold("a", 29501, "2.0");
  ports.Hold("a", 29502, "3.0");
  EXPECT_EQ(ports.Lowest("a", 29500, 29502), std::nullopt);  // Exhausted.
  EXPECT_EQ(ports.Held("a"), 3);
  ports.Release("2.0");
  EXPECT_EQ(ports.Lowest("a", 29500, 29502), 29501);
  ports.Release("2.0");  // Twice: harmless.
  ports.Release("unknown");
  EXPECT_EQ(ports.Held("a"), 2);
}

TEST(ChiefPortsTest, HoldingAgainMovesTheAllocationsPort) {
  ChiefPorts ports;
  ports.Hold("a", 29500, "1.0");
  ports.Hold("a", 29505, "1.0");
  EXPECT_EQ(ports.Lowest("a", 29500, 29505), 29500);
  EXPECT_EQ(ports.Held("a"), 1);
}

}  // namespace
}  // namespace det::master
