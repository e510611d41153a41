// Real NVIDIA GPUs through the driver's NVML. Skipped where no driver is installed, unless
// DET_REQUIRE_GPU=1 (set it on GPU machines so that a broken driver fails the test).
#include <stdlib.h>

#include <iostream>

#include "agent/gpu/nvml.h"
#include "agent/gpu/slots.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

TEST(RealGpu, SlotsMatchTheDriver) {
  auto nvml = LoadNvml();
  const char* require = getenv("DET_REQUIRE_GPU");
  if (!nvml.ok() && !(require && std::string(require) == "1")) {
    GTEST_SKIP() << "no NVIDIA driver here: " << nvml.status();
  }
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  auto slots = GpuSlots(**nvml);
  ASSERT_TRUE(slots.ok()) << slots.status();
  for (size_t i = 0; i < slots->size(); ++i) {
    const v1::Slot& s = (*slots)[i];
    std::cout << "slot " << s.id() << ": " << s.device_name() << " " << s.uuid() << " "
              << (s.memory_bytes() >> 20) << " MiB\n";
    EXPECT_EQ(s.type(), "cuda");
    EXPECT_FALSE(s.device_name().empty());
    EXPECT_EQ(s.uuid().rfind("GPU-", 0), 0u) << s.uuid();
    EXPECT_GT(s.memory_bytes(), int64_t{1} << 30);
    auto usage = (*nvml)->Usage(static_cast<int>(i));
    ASSERT_TRUE(usage.ok()) << usage.status();
    std::cout << "  utilisation " << usage->utilization_percent << "%, free "
              << (usage->memory_free_bytes >> 20) << " MiB\n";
    EXPECT_GE(usage->utilization_percent, 0);
    EXPECT_LE(usage->utilization_percent, 100);
    EXPECT_GT(usage->memory_free_bytes, 0);
    EXPECT_LE(usage->memory_free_bytes, usage->memory_total_bytes);
  }
}

}  // namespace
}  // namespace det::agent
