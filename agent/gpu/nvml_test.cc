// The real dlopen path of LoadNvml, against a fake libnvidia-ml built from testdata/.
#include "agent/gpu/nvml.h"

#include <stdlib.h>

#include "absl/strings/str_cat.h"
#include "agent/gpu/slots.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::HasSubstr;

std::string FakeLibrary() {
  const char* srcdir = getenv("TEST_SRCDIR");
  const char* workspace = getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/", workspace ? workspace : "det",
                      "/agent/gpu/libfake_nvml.so");
}

class LoadNvmlTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("FAKE_NVML_DEVICES");
    unsetenv("FAKE_NVML_INIT_ERROR");
  }
};

TEST_F(LoadNvmlTest, ReadsDevicesThroughTheLoadedLibrary) {
  setenv("FAKE_NVML_DEVICES",
         "NVIDIA H100 80GB HBM3,GPU-0d3c1c2e-aaaa,81559,80000,37;NVIDIA A10,GPU-77,23028,1000,100",
         1);
  auto nvml = LoadNvml(FakeLibrary());
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  ASSERT_EQ(*(*nvml)->DeviceCount(), 2);
  auto dev = (*nvml)->Device(0);
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(dev->name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(dev->uuid, "GPU-0d3c1c2e-aaaa");
  EXPECT_EQ(dev->memory_total_bytes, int64_t{81559} << 20);
  auto usage = (*nvml)->Usage(1);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->utilization_percent, 100);
  EXPECT_EQ(usage->memory_free_bytes, int64_t{1000} << 20);
  EXPECT_EQ(usage->memory_total_bytes, int64_t{23028} << 20);
  EXPECT_FALSE((*nvml)->Device(2).ok());

  auto slots = GpuSlots(**nvml);
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 2u);
  EXPECT_EQ((*slots)[1].device_name(), "NVIDIA A10");
  EXPECT_EQ((*slots)[1].uuid(), "GPU-77");
}

TEST_F(LoadNvmlTest, NoDeviceMeansCpuSlotsUnderAuto) {
  auto nvml = LoadNvml(FakeLibrary());
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  auto slots = DiscoverSlots("auto", 1, nvml->get());
  ASSERT_TRUE(slots.ok());
  EXPECT_EQ((*slots)[0].type(), "cpu");
}

TEST_F(LoadNvmlTest, InitialisationFailureIsNotFoundWithNvmlsReason) {
  setenv("FAKE_NVML_INIT_ERROR", "9", 1);
  auto nvml = LoadNvml(FakeLibrary());
  EXPECT_TRUE(absl::IsNotFound(nvml.status()));
  EXPECT_THAT(nvml.status().message(), HasSubstr("Driver Not Loaded"));
}

TEST_F(LoadNvmlTest, MissingLibraryIsNotFoundNamingIt) {
  auto nvml = LoadNvml("libno-such-nvml.so.1");
  EXPECT_TRUE(absl::IsNotFound(nvml.status()));
  EXPECT_THAT(nvml.status().message(), HasSubstr("libno-such-nvml.so.1"));
}

TEST_F(LoadNvmlTest, LibraryWithoutNvmlFunctionsIsRejected) {
  auto nvml = LoadNvml("libz.so.1");
  EXPECT_TRUE(absl::IsNotFound(nvml.status()));
  EXPECT_THAT(nvml.status().message(), HasSubstr("lacks the NVML functions"));
}

}  // namespace
}  // namespace det::agent
