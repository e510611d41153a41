#include "agent/gpu/slots.h"

#include <cstdlib>

#include "agent/gpu/fake_nvml.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::HasSubstr;

FakeNvml::Gpu Gpu(const std::string& name, const std::string& uuid, int64_t gib) {
  FakeNvml::Gpu g;
  g.device = {name, uuid, gib << 30};
  g.usage = {0, gib << 30, gib << 30};
  return g;
}

TEST(GpuSlots, OneCudaSlotPerDeviceWithNameUuidAndMemory) {
  FakeNvml nvml({Gpu("NVIDIA H100 80GB HBM3", "GPU-aaaa", 80), Gpu("NVIDIA A10", "GPU-bbbb", 24)});
  auto slots = GpuSlots(nvml);
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 2u);
  EXPECT_EQ((*slots)[0].id(), "0");
  EXPECT_EQ((*slots)[0].type(), "cuda");
  EXPECT_EQ((*slots)[0].device_name(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ((*slots)[0].uuid(), "GPU-aaaa");
  EXPECT_EQ((*slots)[0].memory_bytes(), int64_t{80} << 30);
  EXPECT_TRUE((*slots)[0].enabled());
  EXPECT_EQ((*slots)[1].id(), "1");
  EXPECT_EQ((*slots)[1].uuid(), "GPU-bbbb");
  EXPECT_EQ((*slots)[1].memory_bytes(), int64_t{24} << 30);
}

TEST(GpuSlots, NoDeviceIsNotFound) {
  FakeNvml nvml;
  auto slots = GpuSlots(nvml);
  EXPECT_TRUE(absl::IsNotFound(slots.status()));
  EXPECT_THAT(slots.status().message(), HasSubstr("no GPU"));
}

TEST(GpuSlots, FailingNvmlIsReported) {
  FakeNvml nvml({Gpu("g", "GPU-1", 1)});
  nvml.FailWith(absl::InternalError("nvmlDeviceGetCount: GPU is lost"));
  auto slots = GpuSlots(nvml);
  EXPECT_TRUE(absl::IsInternal(slots.status()));
  EXPECT_THAT(slots.status().message(), HasSubstr("GPU is lost"));
}

TEST(DiscoverSlots, CpuNeverLooksAtGpus) {
  FakeNvml nvml({Gpu("g", "GPU-1", 1)});
  auto slots = DiscoverSlots("cpu", 3, &nvml);
  ASSERT_TRUE(slots.ok());
  ASSERT_EQ(slots->size(), 3u);
  EXPECT_EQ((*slots)[2].id(), "2");
  EXPECT_EQ((*slots)[2].type(), "cpu");
}

TEST(DiscoverSlots, AutoPrefersGpusAndFallsBackToCpu) {
  FakeNvml two({Gpu("a", "GPU-1", 1), Gpu("b", "GPU-2", 1)});
  auto gpus = DiscoverSlots("auto", 1, &two);
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].type(), "cuda");

  FakeNvml none;
  auto cpu = DiscoverSlots("auto", 2, &none);
  ASSERT_TRUE(cpu.ok());
  ASSERT_EQ(cpu->size(), 2u);
  EXPECT_EQ((*cpu)[0].type(), "cpu");

  auto no_driver = DiscoverSlots("auto", 1, absl::NotFoundError("no NVIDIA driver"));
  ASSERT_TRUE(no_driver.ok());
  EXPECT_EQ((*no_driver)[0].type(), "cpu");
}

TEST(DiscoverSlots, CudaWithoutGpusSaysWhy) {
  auto no_driver = DiscoverSlots("cuda", 1, absl::NotFoundError("no NVIDIA driver: cannot load x"));
  EXPECT_TRUE(absl::IsNotFound(no_driver.status()));
  EXPECT_THAT(no_driver.status().message(), HasSubstr("no NVIDIA driver"));
  FakeNvml none;
  EXPECT_THAT(DiscoverSlots("cuda", 1, &none).status().message(), HasSubstr("no GPU"));
}

}  // namespace
}  // namespace det::agent
