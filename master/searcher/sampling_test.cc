#include "master/searcher/sampling.h"

#include <set>
#include <string>
#include <vector>

#include "common/config/experiment_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace det::master::searcher {
namespace {

using ::testing::ElementsAre;

config::ExperimentConfig Parse(const std::string& hyperparameters, const std::string& searcher = "single") {
  std::string yaml = "entrypoint: x\nsearcher: {name: " + searcher +
                     ", metric: loss, max_length: {batches: 8}" +
                     (searcher == "random" ? ", max_trials: 4" : "") + "}\nhyperparameters:\n" +
                     hyperparameters;
  auto parsed = config::ParseExperimentConfig(yaml, "exp.yaml", 1);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? parsed->config : config::ExperimentConfig{};
}

TEST(Generator, IsSplitMix64FromTheSeed) {
  // SplitMix64's published outputs for state 0.
  Generator gen(0);
  EXPECT_EQ(gen.Next(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(gen.Next(), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(gen.Next(), 0x06C45D188009454FULL);
  Generator a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    EXPECT_NE(x, c.Next());
  }
}

TEST(Generator, NextBelowAndUniformStayInRange) {
  Generator gen(5);
  std::set<uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    uint64_t v = gen.NextBelow(7);
    ASSERT_LT(v, 7u);
    seen.insert(v);
    double u = gen.NextUniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  EXPECT_EQ(seen.size(), 7u);
  EXPECT_EQ(gen.NextBelow(1), 0u);
}

TEST(Sampling, EveryTypeNestedAndInRange) {
  config::ExperimentConfig c = Parse(R"(
  global_batch_size: 64
  optimizer:
    lr: {type: log, minval: -4, maxval: -1, base: 10}
    momentum: {type: double, minval: 0.5, maxval: 0.9}
  layers: {type: int, minval: 1, maxval: 3}
  act: {type: categorical, vals: [relu, tanh, {name: gelu}]}
  tag: {type: const, val: [1, 2]}
)");
  Generator gen(11);
  std::set<int> layers;
  std::set<std::string> acts;
  for (int i = 0; i < 300; ++i) {
    auto j = nlohmann::json::parse(SampleHyperparameters(c.hyperparameters, gen));
    EXPECT_EQ(j["global_batch_size"], 64);
    EXPECT_EQ(j["tag"], nlohmann::json::parse("[1,2]"));
    double lr = j["optimizer"]["lr"];
    EXPECT_GE(lr, 1e-4);
    EXPECT_LT(lr, 1e-1);
    double m = j["optimizer"]["momentum"];
    EXPECT_GE(m, 0.5);
    EXPECT_LT(m, 0.9);
    layers.insert(j["layers"].get<int>());
    acts.insert(j["act"].dump());
  }
  EXPECT_EQ(layers, (std::set<int>{1, 2, 3}));
  EXPECT_EQ(acts.size(), 3u);
  // Names in sorted order, nested group in its place.
  Generator again(11);
  std::string first = SampleHyperparameters(c.hyperparameters, again);
  EXPECT_EQ(first.find("\"act\""), 1u);
  EXPECT_LT(first.find("\"layers\""), first.find("\"optimizer\""));
}

TEST(Sampling, ConstantsTakeNoDraws) {
  config::ExperimentConfig c = Parse("  a: 1\n  b: {type: const, val: x}\n");
  Generator gen(3), fresh(3);
  EXPECT_EQ(SampleHyperparameters(c.hyperparameters, gen), R"({"a":1,"b":"x"})");
  EXPECT_EQ(gen.Next(), fresh.Next());
}

struct GridCase {
  std::string hyperparameters;
  std::vector<std::string> points;
};

TEST(Grid, Enumeration) {
  const std::vector<GridCase> cases = {
      {"  a: {type: int, minval: 1, maxval: 5, count: 3}\n", {R"({"a":1})", R"({"a":3})", R"({"a":5})"}},
      {"  a: {type: int, minval: 1, maxval: 6, count: 1}\n", {R"({"a":3})"}},
      {"  a: {type: int, minval: 1, maxval: 3, count: 10}\n", {R"({"a":1})", R"({"a":2})", R"({"a":3})"}},
      {"  a: {type: int, minval: 0, maxval: 10, count: 4}\n",
       {R"({"a":0})", R"({"a":3})", R"({"a":7})", R"({"a":10})"}},
      {"  a: {type: double, minval: 0, maxval: 1, count: 3}\n",
       {R"({"a":0})", R"({"a":0.5})", R"({"a":1})"}},
      {"  a: {type: double, minval: 2, maxval: 4, count: 1}\n", {R"({"a":3})"}},
      {"  a: {type: log, minval: -3, maxval: -1, count: 3}\n",
       {R"({"a":0.001})", R"({"a":0.01})", R"({"a":0.1})"}},
      {"  a: {type: log, base: 2, minval: 1, maxval: 3, count: 3}\n",
       {R"({"a":2})", R"({"a":4})", R"({"a":8})"}},
      // The first axis (in name order) varies slowest; constants are one-point axes.
      {"  z: {type: categorical, vals: [x, y]}\n  b: {type: int, minval: 1, maxval: 2, count: 2}\n  c: 7\n",
       {R"({"b":1,"c":7,"z":"x"})", R"({"b":1,"c":7,"z":"y"})", R"({"b":2,"c":7,"z":"x"})",
        R"({"b":2,"c":7,"z":"y"})"}},
      // Nested groups: their members at the group's place.
      {"  opt:\n    lr: {type: categorical, vals: [1, 2]}\n    m: 0.9\n  a: {type: categorical, vals: [p, q]}\n",
       {R"({"a":"p","opt":{"lr":1,"m":0.9}})", R"({"a":"p","opt":{"lr":2,"m":0.9}})",
        R"({"a":"q","opt":{"lr":1,"m":0.9}})", R"({"a":"q","opt":{"lr":2,"m":0.9}})"}},
      {"  {}\n", {"{}"}},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.hyperparameters);
    config::ExperimentConfig c = Parse(tc.hyperparameters, "grid");
    Grid grid(c.hyperparameters);
    std::vector<std::string> points;
    for (int64_t i = 0; i < grid.size(); ++i) points.push_back(grid.Point(i));
    EXPECT_EQ(points, tc.points);
  }
}

TEST(Json, NumbersAndStrings) {
  EXPECT_EQ(JsonNumber(0.1), "0.1");
  EXPECT_EQ(JsonNumber(100), "100");
  EXPECT_EQ(JsonNumber(1e-7), "1e-07");
}

}  // namespace
}  // namespace det::master::searcher
