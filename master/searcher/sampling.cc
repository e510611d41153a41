#include "master/searcher/sampling.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/config/json_text.h"

namespace det::master::searcher {
namespace {

using config::Hyperparameter;

constexpr uint64_t kMaxSeed = 0x7fffffff;

// Appends the axes of `hp`'s leaves, depth first in name order.
void CollectAxes(const Hyperparameter& hp, std::vector<std::vector<std::string>>* axes) {
  switch (hp.type) {
    case Hyperparameter::Type::kObject:
      for (const auto& f : hp.fields) CollectAxes(f, axes);
      return;
    case Hyperparameter::Type::kConst:
      axes->push_back({hp.value_json});
      return;
    case Hyperparameter::Type::kCategorical:
      axes->push_back(hp.vals_json);
      return;
    case Hyperparameter::Type::kInt: {
      const int64_t lo = static_cast<int64_t>(hp.minval), hi = static_cast<int64_t>(hp.maxval);
      const int64_t n = std::max<int64_t>(1, std::min<int64_t>(hp.count, hi - lo + 1));
      std::vector<std::string> values;
      if (n == 1) {
        // Floor of the midpoint, without overflow.
        values.push_back(absl::StrCat(lo + (hi - lo) / 2));
      } else {
        const double step = static_cast<double>(hi - lo) / static_cast<double>(n - 1);
        for (int64_t i = 0; i < n; ++i) {
          values.push_back(absl::StrCat(lo + static_cast<int64_t>(std::llround(i * step))));
        }
      }
      axes->push_back(std::move(values));
      return;
    }
    case Hyperparameter::Type::kDouble:
    case Hyperparameter::Type::kLog: {
      const int64_t n = std::max(1, hp.count);
      std::vector<std::string> values;
      for (int64_t i = 0; i < n; ++i) {
        double x = n == 1 ? hp.minval + (hp.maxval - hp.minval) / 2
                          : hp.minval + (hp.maxval - hp.minval) * static_cast<double>(i) /
                                            static_cast<double>(n - 1);
        if (hp.type == Hyperparameter::Type::kLog) x = std::pow(hp.base, x);
        values.push_back(JsonNumber(x));
      }
      axes->push_back(std::move(values));
      return;
    }
  }
}

// Writes `hp` as JSON, taking leaf values from `values` starting at `*next`.
void WritePoint(const Hyperparameter& hp, const std::vector<const std::string*>& values,
                size_t* next, std::string* out) {
  if (hp.type != Hyperparameter::Type::kObject) {
    out->append(*values[(*next)++]);
    return;
  }
  out->push_back('{');
  for (size_t i = 0; i < hp.fields.size(); ++i) {
    if (i) out->push_back(',');
    absl::StrAppend(out, config::JsonString(hp.fields[i].name), ":");
    WritePoint(hp.fields[i], values, next, out);
  }
  out->push_back('}');
}

void Sample(const Hyperparameter& hp, Generator& gen, std::string* out) {
  switch (hp.type) {
    case Hyperparameter::Type::kObject:
      out->push_back('{');
      for (size_t i = 0; i < hp.fields.size(); ++i) {
        if (i) out->push_back(',');
        absl::StrAppend(out, config::JsonString(hp.fields[i].name), ":");
        Sample(hp.fields[i], gen, out);
      }
      out->push_back('}');
      return;
    case Hyperparameter::Type::kConst:
      out->append(hp.value_json);
      return;
    case Hyperparameter::Type::kInt: {
      const int64_t lo = static_cast<int64_t>(hp.minval), hi = static_cast<int64_t>(hp.maxval);
      absl::StrAppend(out, lo + static_cast<int64_t>(gen.NextBelow(static_cast<uint64_t>(hi - lo) + 1)));
      return;
    }
    case Hyperparameter::Type::kDouble:
      out->append(JsonNumber(hp.minval + (hp.maxval - hp.minval) * gen.NextUniform()));
      return;
    case Hyperparameter::Type::kLog:
      out->append(JsonNumber(std::pow(hp.base, hp.minval + (hp.maxval - hp.minval) * gen.NextUniform())));
      return;
    case Hyperparameter::Type::kCategorical:
      out->append(hp.vals_json[gen.NextBelow(hp.vals_json.size())]);
      return;
  }
}

}  // namespace

uint64_t Generator::Next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double Generator::NextUniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

uint64_t Generator::NextBelow(uint64_t n) {
  // The largest multiple of n that fits: values at or above it would favour small results.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = Next();
  } while (x >= limit);
  return x % n;
}

std::string SampleHyperparameters(const config::Hyperparameter& space, Generator& gen) {
  std::string out;
  Sample(space, gen, &out);
  return out;
}

uint32_t DrawTrialSeed(Generator& gen) { return static_cast<uint32_t>(gen.Next() & kMaxSeed); }

Grid::Grid(const config::Hyperparameter& space) : space_(space) {
  CollectAxes(space_, &axes_);
  for (const auto& axis : axes_) size_ *= static_cast<int64_t>(axis.size());
}

std::string Grid::Point(int64_t i) const {
  std::vector<const std::string*> values(axes_.size());
  for (size_t a = axes_.size(); a-- > 0;) {
    const int64_t n = static_cast<int64_t>(axes_[a].size());
    values[a] = &axes_[a][i % n];
    i /= n;
  }
  std::string out;
  size_t next = 0;
  WritePoint(space_, values, &next, &out);
  return out;
}

std::string JsonNumber(double value) {
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, result.ptr);
}

}  // namespace det::master::searcher
