#include "cli/format.h"

#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace det::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(TableTest, AlignsColumnsUnderHeader) {
  Table table({"ID", "Name", "State"});
  table.AddRow({"1", "a-long-experiment-name", "ACTIVE"});
  table.AddRow({"12345", "x", "COMPLETED"});
  std::ostringstream out;
  table.Render(out);
  EXPECT_EQ(out.str(),
            " ID    | Name                   | State\n"
            "-------+------------------------+-----------\n"
            " 1     | a-long-experiment-name | ACTIVE\n"
            " 12345 | x                      | COMPLETED\n");
}

TEST(TableTest, SeparatorsLineUpOnEveryRow) {
  Table table({"A", "B", "C"});
  table.AddRow({"xxxxxxxx", "", "z"});
  table.AddRow({"", "yyyyyyyyyyyy", ""});
  std::ostringstream out;
  table.Render(out);
  std::vector<std::string> lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 4u);
  const size_t first = lines[0].find('|');
  const size_t second = lines[0].find('|', first + 1);
  EXPECT_EQ(lines[1].find('+'), first);
  EXPECT_EQ(lines[1].find('+', first + 1), second);
  for (size_t i : {2u, 3u}) {
    EXPECT_EQ(lines[i].find('|'), first) << lines[i];
    EXPECT_EQ(lines[i].find('|', first + 1), second) << lines[i];
  }
  for (const std::string& line : lines) EXPECT_NE(line.back(), ' ') << line;
}

TEST(TableTest, CountsUtf8CodePoints) {
  Table table({"Name", "X"});
  table.AddRow({"\xc3\xa9t\xc3\xa9", "1"});  // "été": 3 code points, 5 bytes
  std::ostringstream out;
  table.Render(out);
  EXPECT_THAT(out.str(), HasSubstr(" \xc3\xa9t\xc3\xa9  | 1\n"));
}

TEST(KeyValuesTest, AlignsValues) {
  std::ostringstream out;
  RenderKeyValues({{"ID", "3"}, {"Start Time", "t"}, {"Empty", ""}}, out);
  EXPECT_EQ(out.str(),
            "ID:         3\n"
            "Start Time: t\n"
            "Empty:\n");
}

TEST(JsonTest, KeepsProtoNamesAndPrintsDefaults) {
  v1::Experiment experiment;
  experiment.set_id(7);
  experiment.set_name("mnist");
  experiment.set_state(v1::STATE_ACTIVE);
  absl::StatusOr<std::string> json = ToJson(experiment);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_THAT(*json, HasSubstr("\"start_time_ms\": \"0\""));
  EXPECT_THAT(*json, HasSubstr("\"num_trials\": 0"));
  EXPECT_THAT(*json, HasSubstr("\"state\": \"STATE_ACTIVE\""));
  EXPECT_THAT(*json, HasSubstr("\"name\": \"mnist\""));

  v1::Experiment parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*json, &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), experiment.SerializeAsString());
}

TEST(JsonTest, CompactIsOneLine) {
  v1::LogLine line;
  line.set_message("hi\nthere");
  absl::StatusOr<std::string> json = ToJson(line, /*pretty=*/false);
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(json->find('\n'), std::string::npos);
  EXPECT_THAT(*json, HasSubstr("\"message\":\"hi\\nthere\""));
}

TEST(FormatTest, Values) {
  EXPECT_EQ(StateName(v1::STATE_COMPLETED), "COMPLETED");
  EXPECT_TRUE(IsTerminal(v1::STATE_CANCELED));
  EXPECT_FALSE(IsTerminal(v1::STATE_STOPPING));
  EXPECT_EQ(FormatTimeMs(0), "");
  EXPECT_EQ(FormatTimeMs(1700000000123), "2023-11-14T22:13:20Z");
  EXPECT_EQ(FormatMetric(0.123456789), "0.123457");
  // As JSON and the web page write them, not printf's nan/inf.
  EXPECT_EQ(FormatMetric(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(FormatMetric(std::numeric_limits<double>::infinity()), "Infinity");
  EXPECT_EQ(FormatMetric(-std::numeric_limits<double>::infinity()), "-Infinity");
  // Hashes and checksums in hex, as the web page shows them; other metrics as numbers.
  EXPECT_EQ(FormatMetric("diag/params_hash_hi", 2335152647.0), "0x8b2f9a07");
  EXPECT_EQ(FormatMetric("diag/sample_checksum", 255.0), "0xff");
  EXPECT_EQ(FormatMetric("diag/params_hash_lo", 0.5), "0.5");
  EXPECT_EQ(FormatMetric("diag/params_hash_lo", -3.0), "-3");
  EXPECT_EQ(FormatMetric("accuracy", 2335152647.0), "2.33515e+09");
  EXPECT_EQ(FormatPercent(0.425), "42.5%");
  EXPECT_EQ(FormatBytes(100), "100 B");
  EXPECT_EQ(FormatBytes(uint64_t{70} << 20), "70.0 MiB");
}

TEST(FormatTest, LogLines) {
  v1::LogLine line;
  line.set_rank(2);
  line.set_stream("stdout");
  line.set_message("epoch 1\n");
  EXPECT_EQ(FormatLogLine(line), "[rank 2] epoch 1");
  line.set_stream("stderr");
  EXPECT_EQ(FormatLogLine(line), "[rank 2] [stderr] epoch 1");
  line.set_stream("agent");
  EXPECT_EQ(FormatLogLine(line), "[agent] epoch 1");
  line.set_rank(-1);
  line.set_stream("master");
  EXPECT_EQ(FormatLogLine(line), "[master] epoch 1");
}

TEST(FormatTest, TrialsTableHasMetricAndPendingColumnsOnlyWhenNeeded) {
  google::protobuf::RepeatedPtrField<v1::Trial> trials;
  v1::Trial* t1 = trials.Add();
  t1->set_id(1);
  t1->set_state(v1::STATE_RUNNING);
  t1->set_total_batches(100);
  (*t1->mutable_validation_summary())["loss"].set_last(0.25);
  std::ostringstream out;
  TrialsTable(trials).Render(out);
  EXPECT_EQ(Lines(out.str())[0], " Trial ID | State   | Restarts | Batches | loss");
  EXPECT_EQ(Lines(out.str())[2], " 1        | RUNNING | 0        | 100     | 0.25");

  v1::Trial* t2 = trials.Add();
  t2->set_id(2);
  t2->set_state(v1::STATE_QUEUED);
  t2->set_pending_reason("waiting for 2 slots");
  std::ostringstream out2;
  TrialsTable(trials).Render(out2);
  EXPECT_THAT(Lines(out2.str())[0], HasSubstr("Pending Reason      | loss"));
  EXPECT_THAT(out2.str(), HasSubstr("waiting for 2 slots"));
}

TEST(FormatTest, ExperimentsTableShowsTheOwnerAfterTheId) {
  google::protobuf::RepeatedPtrField<v1::Experiment> experiments;
  v1::Experiment* e = experiments.Add();
  e->set_id(3);
  e->set_owner("alice");
  e->set_name("mnist");
  e->set_state(v1::STATE_ACTIVE);
  e->set_progress(0.5);
  e->set_num_trials(2);
  experiments.Add()->set_id(4);  // Created before owners were recorded.
  std::ostringstream out;
  ExperimentsTable(experiments).Render(out);
  std::vector<std::string> lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 4u) << out.str();
  EXPECT_EQ(lines[0],
            " ID | Owner | Name  | State       | Progress | Trials | Start Time | End Time");
  EXPECT_EQ(lines[2], " 3  | alice | mnist | ACTIVE      | 50.0%    | 2      |            |");
  EXPECT_EQ(lines[3], " 4  |       |       | UNSPECIFIED | 0.0%     | 0      |            |");
}

TEST(FormatTest, AgentsTable) {
  google::protobuf::RepeatedPtrField<v1::Agent> agents;
  v1::Agent* a = agents.Add();
  a->set_id("agent-0");
  a->set_hostname("host");
  a->set_connected(true);
  a->set_enabled(true);
  a->set_resource_pool("default");
  v1::Slot* busy = a->add_slots();
  busy->set_allocation_id("alloc-1");
  busy->set_enabled(true);
  a->add_slots()->set_enabled(true);
  std::ostringstream out;
  AgentsTable(agents).Render(out);
  EXPECT_EQ(out.str(),
            " ID      | Hostname | Slots | Used | Connected | Enabled | Draining | Pool\n"
            "---------+----------+-------+------+-----------+---------+----------+---------\n"
            " agent-0 | host     | 2     | 1    | yes       | yes     | no       | default\n");
}

}  // namespace
}  // namespace det::cli

namespace det::cli {
namespace {

TEST(FormatTest, TimingsTableListsPhasesInTrainingOrderWithTheLatestValues) {
  v1::Trial t;
  auto set = [&](const std::string& key, double last) {
    v1::MetricSummary s;
    s.set_last(last);
    s.set_count(3);
    (*t.mutable_timings_summary())[key] = s;
  };
  for (const char* stat : {"mean", "p50", "p90", "p99", "max"}) {
    set(std::string("train_batch_") + stat + "_ms", 5);
    set(std::string("dataloader_next_") + stat + "_ms", 0.5);
    set(std::string("gradient_sync_") + stat + "_ms", 2);
  }
  set("train_batch_count", 100);
  set("samples_per_second", 12000);
  std::ostringstream out;
  TrialTimingsTable(t).Render(out);
  auto lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 5u) << out.str();
  EXPECT_THAT(lines[0], HasSubstr("Phase"));
  EXPECT_THAT(lines[2], HasSubstr("dataloader_next | 500 µs"));
  EXPECT_THAT(lines[3], HasSubstr("train_batch"));
  EXPECT_THAT(lines[4], HasSubstr("gradient_sync"));  // Not a standard phase: last.
  EXPECT_EQ(TrialTimingsTable(v1::Trial()).num_rows(), 0u);
}

TEST(FormatTest, TimingsOverReportsAverageEveryReportWeightedByItsCount) {
  google::protobuf::RepeatedPtrField<v1::Metrics> reports;
  auto report = [&](double mean, double p50, double max, double count) {
    v1::Metrics* m = reports.Add();
    m->set_group("timings");
    (*m->mutable_values())["train_batch_mean_ms"] = mean;
    (*m->mutable_values())["train_batch_p50_ms"] = p50;
    (*m->mutable_values())["train_batch_max_ms"] = max;
    (*m->mutable_values())["train_batch_count"] = count;
    (*m->mutable_values())["batches_per_second"] = 40;
  };
  report(2, 1, 9, 30);
  report(6, 5, 7, 10);
  (*reports.Add()->mutable_values())["step_optimizer_mean_ms"] = 0.25;  // No count, no p50.
  std::ostringstream out;
  TimingsOverReportsTable(reports).Render(out);
  auto lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 4u) << out.str();
  EXPECT_THAT(lines[0], HasSubstr("Phase"));
  // (2*30 + 6*10) / 40 = 3 ms mean, (1*30 + 5*10) / 40 = 2 ms p50, max 9 ms, 40 batches.
  EXPECT_THAT(lines[2], HasSubstr("train_batch    | 3 ms   | 2 ms | 9 ms   | 40"));
  EXPECT_THAT(lines[3], HasSubstr("step_optimizer | 250 µs | -    | 250 µs | 1"));
  EXPECT_EQ(TimingsOverReportsTable({}).num_rows(), 0u);
}

TEST(FormatTest, DurationsAndRatesForPeople) {
  EXPECT_EQ(FormatDurationMs(4.21216e-05), "42.1 ns");
  EXPECT_EQ(FormatDurationMs(0.5), "500 µs");
  EXPECT_EQ(FormatDurationMs(4.21216), "4.21 ms");
  EXPECT_EQ(FormatDurationMs(0), "0 ms");
  EXPECT_EQ(FormatDurationMs(1534), "1.53 s");
  EXPECT_EQ(FormatDurationMs(3.6e6), "3600 s");
  EXPECT_EQ(FormatRate(2.78181, "IOPS"), "2.78 IOPS");
}

TEST(FormatTest, HyperparametersFlattenedForPeople) {
  auto flat = FlattenHparams(R"({"lr": 0.1000000000000000055511151231257827, "b": 32,
                                 "opt": {"name": "sgd", "m": 0.9}, "l": [1, 2]})");
  std::vector<std::pair<std::string, std::string>> expected = {
      {"b", "32"}, {"l", "[1,2]"}, {"lr", "0.1"}, {"opt.m", "0.9"}, {"opt.name", "sgd"}};
  EXPECT_EQ(flat, expected);
  EXPECT_TRUE(FlattenHparams("").empty());
  EXPECT_TRUE(FlattenHparams("[1]").empty());
}

TEST(FormatTest, SearcherMetricFromConfig) {
  auto m = ParseSearcherMetric("searcher:\n  metric: accuracy\n  smaller_is_better: false\n");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->name, "accuracy");
  EXPECT_FALSE(m->smaller_is_better);
  EXPECT_TRUE(ParseSearcherMetric("searcher:\n  metric: loss\n")->smaller_is_better);
  EXPECT_FALSE(ParseSearcherMetric("searcher:\n  name: single\n").has_value());
  EXPECT_FALSE(ParseSearcherMetric(": : [").has_value());
}

TEST(FormatTest, DiagnosticMetricsLeftOutUnlessAsked) {
  v1::Trial t;
  (*t.mutable_validation_summary())["accuracy"].set_last(0.9);
  (*t.mutable_validation_summary())["diag/params_hash"].set_last(4.2e12);
  std::ostringstream out;
  TrialMetricsTable(t).Render(out);
  EXPECT_THAT(out.str(), Not(HasSubstr("diag/")));
  std::ostringstream all;
  TrialMetricsTable(t, /*diagnostics=*/true).Render(all);
  EXPECT_THAT(all.str(), HasSubstr("diag/params_hash"));
  EXPECT_TRUE(IsDiagnosticMetric("diag/sample_checksum"));
  EXPECT_FALSE(IsDiagnosticMetric("diagnosis"));
}

TEST(FormatTest, CheckpointsTable) {
  google::protobuf::RepeatedPtrField<v1::Checkpoint> cs;
  v1::Checkpoint* c = cs.Add();
  c->set_uuid("u-1");
  c->set_trial_id(3);
  c->set_total_batches(200);
  c->set_state(v1::STATE_DELETED);
  (*c->mutable_resources())["model.bin"] = 2048;
  (*c->mutable_resources())["state.json"] = 1024;
  (*c->mutable_metrics())["validation_loss"] = 0.25;
  c->set_storage_path("/ckpt/u-1");
  std::ostringstream out;
  CheckpointsTable(cs).Render(out);
  auto lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[2], HasSubstr("u-1"));
  EXPECT_THAT(lines[2], HasSubstr("| 200 "));
  EXPECT_THAT(lines[2], HasSubstr("DELETED"));
  EXPECT_THAT(lines[2], HasSubstr("3.0 KiB"));
  EXPECT_THAT(lines[2], HasSubstr("validation_loss=0.25"));
  EXPECT_THAT(lines[2], HasSubstr("/ckpt/u-1"));
}

TEST(FormatTest, TrialFieldsShowEachWarning) {
  v1::Trial t;
  t.set_id(4);
  t.add_warnings("trial 4 has no checkpoint storage: its progress will be lost");
  t.add_warnings("trial 4 reported no metrics and no progress");
  std::vector<std::pair<std::string, std::string>> warnings;
  for (const auto& [key, value] : TrialFields(t)) {
    if (key == "Warning") warnings.emplace_back(key, value);
  }
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0].second, "trial 4 has no checkpoint storage: its progress will be lost");
  EXPECT_EQ(warnings[1].second, "trial 4 reported no metrics and no progress");
  v1::Trial quiet;
  for (const auto& [key, value] : TrialFields(quiet)) EXPECT_NE(key, "Warning");
}

}  // namespace
}  // namespace det::cli
