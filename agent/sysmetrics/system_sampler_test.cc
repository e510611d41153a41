#include "agent/sysmetrics/system_sampler.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "agent/gpu/fake_nvml.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::HasSubstr;

// A fake /proc in a temp directory.
class FakeProc {
 public:
  FakeProc() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = absl::StrCat(tmp ? tmp : "/tmp", "/proc-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    mkdir(root_.c_str(), 0755);
    mkdir((root_ + "/net").c_str(), 0755);
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(root_ + "/" + name) << text;
  }
  // Counters: cpu (user idle iowait), disk sda (reads, sectors read, writes, sectors written),
  // its partition sda1 and a loop device with the same numbers, eth0 and lo bytes.
  void Set(uint64_t user, uint64_t idle, uint64_t reads, uint64_t sectors_read, uint64_t writes,
           uint64_t sectors_written, uint64_t rx, uint64_t tx) {
    Write("stat", absl::StrCat("cpu  ", user, " 0 0 ", idle,
                               " 0 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n", "intr 12345\n"));
    std::string disk = absl::StrCat(reads, " 0 ", sectors_read, " 0 ", writes, " 0 ",
                                    sectors_written, " 0 0 0 0 0 0 0 0 0 0");
    Write("diskstats", absl::StrCat("   8       0 sda ", disk, "\n   8       1 sda1 ", disk,
                                    "\n   7       0 loop0 ", disk, "\n 259 0 nvme0n1 ", disk,
                                    "\n 259 1 nvme0n1p1 ", disk, "\n"));
    Write("net/dev",
          absl::StrCat(
              "Inter-|   Receive                                                |  Transmit\n",
              " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets "
              "errs drop fifo colls carrier compressed\n",
              "    lo: 999999 10 0 0 0 0 0 0 999999 10 0 0 0 0 0 0\n", "  eth0: ", rx,
              " 10 0 0 0 0 0 0 ", tx, " 10 0 0 0 0 0 0\n"));
    Write(
        "meminfo",
        "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    8000000 kB\n");
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

TEST(SystemSampler, RatesOverTheIntervalFromFakeProc) {
  FakeProc proc;
  proc.Set(/*user=*/100, /*idle=*/900, /*reads=*/10, /*sectors_read=*/100, /*writes=*/20,
           /*sectors_written=*/200, /*rx=*/1000, /*tx=*/2000);
  SystemSampler sampler(proc.root());
  absl::Time t0 = absl::FromUnixSeconds(1700000000);
  auto first = sampler.Sample(t0);
  EXPECT_TRUE(absl::IsUnavailable(first.status())) << first.status();

  // In 2 s: 150 of 200 ticks busy; 40 reads of 800 sectors and 10 writes of 80 sectors on
  // each of the two whole disks (sda, nvme0n1); 4000 bytes in and 1000 out on eth0.
  proc.Set(250, 950, 50, 900, 30, 280, 5000, 3000);
  auto m = sampler.Sample(t0 + absl::Seconds(2));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->time_ms(), absl::ToUnixMillis(t0 + absl::Seconds(2)));
  EXPECT_DOUBLE_EQ(m->cpu_utilization_percent(), 75.0);
  EXPECT_EQ(m->memory_free_bytes(), int64_t{8000000} * 1024);
  EXPECT_EQ(m->memory_total_bytes(), int64_t{16000000} * 1024);
  EXPECT_DOUBLE_EQ(m->disk_read_iops(), 2 * 40 / 2.0);
  EXPECT_DOUBLE_EQ(m->disk_write_iops(), 2 * 10 / 2.0);
  EXPECT_DOUBLE_EQ(m->disk_read_bytes_per_second(), 2 * 800 * 512 / 2.0);
  EXPECT_DOUBLE_EQ(m->disk_write_bytes_per_second(), 2 * 80 * 512 / 2.0);
  EXPECT_DOUBLE_EQ(m->network_received_bytes_per_second(), 2000);
  EXPECT_DOUBLE_EQ(m->network_sent_bytes_per_second(), 500);
  EXPECT_EQ(m->gpus_size(), 0);
}

TEST(SystemSampler, CountersGoingBackwardsGiveZeroNotGarbage) {
  FakeProc proc;
  proc.Set(100, 900, 50, 900, 30, 280, 5000, 3000);
  SystemSampler sampler(proc.root());
  absl::Time t0 = absl::FromUnixSeconds(1700000000);
  ASSERT_FALSE(sampler.Sample(t0).ok());
  proc.Set(100, 900, 10, 100, 20, 200, 1000, 2000);
  auto m = sampler.Sample(t0 + absl::Seconds(1));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->cpu_utilization_percent(), 0);
  EXPECT_EQ(m->disk_read_iops(), 0);
  EXPECT_EQ(m->network_sent_bytes_per_second(), 0);
}

TEST(SystemSampler, GpusFromNvml) {
  FakeProc proc;
  proc.Set(100, 900, 10, 100, 20, 200, 1000, 2000);
  FakeNvml::Gpu gpu;
  gpu.device = {"NVIDIA H100", "GPU-1234", int64_t{80} << 30};
  gpu.usage = {42, int64_t{60} << 30, int64_t{80} << 30};
  FakeNvml nvml({gpu, gpu});
  nvml.SetUsage(1, {100, int64_t{1} << 30, int64_t{80} << 30});
  SystemSampler sampler(proc.root(), &nvml);
  absl::Time t0 = absl::FromUnixSeconds(1700000000);
  ASSERT_FALSE(sampler.Sample(t0).ok());
  auto m = sampler.Sample(t0 + absl::Seconds(5));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->gpus_size(), 2);
  EXPECT_EQ(m->gpus(0).slot_id(), "0");
  EXPECT_EQ(m->gpus(0).uuid(), "GPU-1234");
  EXPECT_EQ(m->gpus(0).utilization_percent(), 42);
  EXPECT_EQ(m->gpus(0).memory_free_bytes(), int64_t{60} << 30);
  EXPECT_EQ(m->gpus(1).utilization_percent(), 100);
  EXPECT_EQ(m->gpus(1).memory_free_bytes(), int64_t{1} << 30);

  // A GPU that stops answering is left out; the host metrics still come.
  nvml.FailWith(absl::InternalError("GPU is lost"));
  m = sampler.Sample(t0 + absl::Seconds(10));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->gpus_size(), 0);
}

TEST(SystemSampler, MissingFileIsNamed) {
  SystemSampler sampler("/no/such/proc");
  auto m = sampler.Sample(absl::Now());
  EXPECT_TRUE(absl::IsNotFound(m.status()));
  EXPECT_THAT(m.status().message(), HasSubstr("/no/such/proc/stat"));
}

TEST(SystemSampler, MalformedStatIsNamed) {
  FakeProc proc;
  proc.Set(1, 1, 1, 1, 1, 1, 1, 1);
  proc.Write("stat", "cpu  12 x 3 4 5\n");
  SystemSampler sampler(proc.root());
  auto m = sampler.Sample(absl::Now());
  EXPECT_TRUE(absl::IsDataLoss(m.status()));
  EXPECT_THAT(m.status().message(), HasSubstr("/stat: bad cpu field \"x\""));
}

// The real /proc of this machine gives plausible values.
TEST(SystemSampler, RealProcIsPlausible) {
  SystemSampler sampler;
  absl::Time t0 = absl::Now();
  ASSERT_TRUE(absl::IsUnavailable(sampler.Sample(t0).status()));
  // Some work between the samples.
  volatile double x = 0;
  for (int i = 0; i < 20000000; ++i) x = x + i * 0.5;
  auto m = sampler.Sample(absl::Now());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GE(m->cpu_utilization_percent(), 0);
  EXPECT_LE(m->cpu_utilization_percent(), 100);
  EXPECT_GT(m->memory_free_bytes(), 0);
  EXPECT_LE(m->memory_free_bytes(), m->memory_total_bytes());
  EXPECT_GE(m->disk_read_iops(), 0);
  EXPECT_GE(m->network_sent_bytes_per_second(), 0);
}

}  // namespace
}  // namespace det::agent
