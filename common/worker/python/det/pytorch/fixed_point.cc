// The fixed-point arithmetic of det.pytorch's deterministic mode (deterministic.py) in one
// pass over memory: the micro-batch gradients of a parameter, already in fixed-point units
// (x 2^32), are clamped to +-bound, rounded half to even to integers and summed exactly in
// float64; the step's sum becomes the mean gradient in the parameters' dtype.
//
// A C ABI for ctypes: the package depends on no torch version (it passes data pointers) and
// falls back to torch/numpy operations with the same bits when this library is absent
// (deterministic_test checks both give the same gradients, bit for bit).
//
// Exactness: every rounded value is an integer of magnitude <= bound <= 2^53, and the
// caller's bound keeps every partial sum within 2^53 (fixed_point_bound), where float64
// addition of integers is exact: the sum is the same whatever the order, the grouping, the
// number of parts per call or the rank count.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string_view>

namespace {

// Elements per block: the block's slice of the sum stays in L1 while every part is added.
constexpr int64_t kBlock = 2048;

// round_half_even(clamp(v, -bound, bound)) for a power-of-two bound <= 2^53 (exact in
// float32 and float64), NaN kept, as torch.clamp then torch.round give it, in v's own
// dtype T. Branch-free, so that it vectorizes: for |c| < 2^(digits-1), (|c| + 2^(digits-1))
// - 2^(digits-1) rounds |c| to an integer in the default rounding mode (half to even);
// every value of larger magnitude is already an integer. A float32 rounded to an integer is
// exact in float32, so rounding before widening gives the integer the float64 sum adds.
template <typename T>
inline T FixedUnits(T v, T bound) {
  constexpr T kIntegral = static_cast<T>(int64_t{1} << (std::numeric_limits<T>::digits - 1));
  T c = v > bound ? bound : v;
  c = c < -bound ? -bound : c;  // NaN compares false both times and stays NaN.
  T a = std::fabs(c);
  T r = a < kIntegral ? (a + kIntegral) - kIntegral : a;
  return std::copysign(r, c);
}

// out[lo, hi) (+)= FixedUnits of each part, widened to float64.
template <typename T>
inline void __attribute__((always_inline))
AddBlock(const T* const* parts, int32_t count, int64_t lo, int64_t hi, T bound, double* out,
         bool accumulate) {
  if (!accumulate) {
    // 0.0 + value, as the fallback's first add: a -0.0 sum becomes 0.0.
    for (int64_t i = lo; i < hi; ++i) out[i] = 0.0;
  }
  // Up to four parts per pass over the block's sum: one load and one store of the sum for
  // four parts. Exact in any grouping (see fixed_point_bound: every partial sum of these
  // integers stays within 2^53).
  double* __restrict o = out;
  int32_t k = 0;
  for (; k + 4 <= count; k += 4) {
    const T* __restrict p0 = parts[k];
    const T* __restrict p1 = parts[k + 1];
    const T* __restrict p2 = parts[k + 2];
    const T* __restrict p3 = parts[k + 3];
    for (int64_t i = lo; i < hi; ++i) {
      o[i] += (static_cast<double>(FixedUnits(p0[i], bound)) +
               static_cast<double>(FixedUnits(p1[i], bound))) +
              (static_cast<double>(FixedUnits(p2[i], bound)) +
               static_cast<double>(FixedUnits(p3[i], bound)));
    }
  }
  for (; k + 2 <= count; k += 2) {
    const T* __restrict p0 = parts[k];
    const T* __restrict p1 = parts[k + 1];
    for (int64_t i = lo; i < hi; ++i) {
      o[i] += static_cast<double>(FixedUnits(p0[i], bound)) +
              static_cast<double>(FixedUnits(p1[i], bound));
    }
  }
  for (; k < count; ++k) {
    const T* __restrict p = parts[k];
    for (int64_t i = lo; i < hi; ++i) o[i] += static_cast<double>(FixedUnits(p[i], bound));
  }
}

// Every block of the n values (inlined into the two instruction-set variants below).
template <typename T>
inline void __attribute__((always_inline))
AddBlocks(const T* const* parts, int32_t count, int64_t n, T bound, double* out,
          bool accumulate) {
  for (int64_t lo = 0; lo < n; lo += kBlock) {
    AddBlock(parts, count, lo, lo + kBlock < n ? lo + kBlock : n, bound, out, accumulate);
  }
}

template <typename T>
__attribute__((target("avx2"))) void FixedSumAvx2(const T* const* parts, int32_t count,
                                                  int64_t n, T bound, double* out,
                                                  bool accumulate) {
  AddBlocks(parts, count, n, bound, out, accumulate);
}

template <typename T>
void FixedSumBaseline(const T* const* parts, int32_t count, int64_t n, T bound, double* out,
                      bool accumulate) {
  AddBlocks(parts, count, n, bound, out, accumulate);
}

// Whether the AVX2 variant runs: the CPU has it and DET_FIXED_POINT_BASELINE is not 1
// (which deterministic_test sets to check the baseline variant on an AVX2 machine).
bool UseAvx2() {
  static const bool avx2 = [] {
    const char* force = std::getenv("DET_FIXED_POINT_BASELINE");
    if (force != nullptr && std::string_view(force) == "1") return false;
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return avx2;
}

// The same arithmetic either way (IEEE operations, no contraction: no product is added):
// AVX2 only widens the vectors.
template <typename T>
void FixedSum(const T* const* parts, int32_t count, int64_t n, double bound, double* out,
              bool accumulate) {
  if (UseAvx2()) {
    FixedSumAvx2(parts, count, n, static_cast<T>(bound), out, accumulate);
  } else {
    FixedSumBaseline(parts, count, n, static_cast<T>(bound), out, accumulate);
  }
}

template <typename T>
void SumMany(const void* const* parts, const int64_t* sizes, int32_t nparams, int32_t count,
             double bound, double* out, bool accumulate) {
  const T* present[64];
  for (int32_t j = 0; j < nparams; ++j) {
    // The parameter's non-null parts, in groups of at most 64 per pass.
    int32_t k = 0;
    bool first_pass = true;
    do {
      int32_t m = 0;
      for (; k < count && m < 64; ++k) {
        const void* part = parts[static_cast<int64_t>(j) * count + k];
        if (part != nullptr) present[m++] = static_cast<const T*>(part);
      }
      FixedSum(present, m, sizes[j], bound, out, accumulate || !first_pass);
      first_pass = false;
    } while (k < count);
    out += sizes[j];
  }
}

template <typename T>
void MeanInto(const double* sum, int64_t n, double divisor, bool power_of_two, T* out) {
  if (power_of_two) {
    // Dividing by a power of two is multiplying by its inverse, exactly (numpy's multiply in
    // the fallback).
    const double inverse = 1.0 / divisor;
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(sum[i] * inverse);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(sum[i] / divisor);
  }
}

}  // namespace

extern "C" {

// The ABI version deterministic.py expects; bump on any change of a signature below.
int det_fixed_point_abi() { return 1; }

// The variant the sums use: 2 for AVX2, 0 for the baseline (SSE2 on x86-64).
int det_fixed_point_isa() { return UseAvx2() ? 2 : 0; }

// For each of nparams parameters j, whose n = sizes[j] values follow the previous one's in
// out: out[i] = (accumulate ? out[i] : 0.0) + the sum over k < count of
// FixedUnits(parts[j * count + k][i]). A null part adds nothing (a parameter that a
// micro-batch did not use); count may be 0 (out zeroed unless accumulating).
void det_fixed_sum_many_f32(const void* const* parts, const int64_t* sizes, int32_t nparams,
                            int32_t count, double bound, double* out, int32_t accumulate) {
  SumMany<float>(parts, sizes, nparams, count, bound, out, accumulate != 0);
}

void det_fixed_sum_many_f64(const void* const* parts, const int64_t* sizes, int32_t nparams,
                            int32_t count, double bound, double* out, int32_t accumulate) {
  SumMany<double>(parts, sizes, nparams, count, bound, out, accumulate != 0);
}

// out[i] = sum[i] / divisor rounded once to out's dtype (as a multiply by 1 / divisor when
// divisor is a power of two).
void det_fixed_mean_f32(const double* sum, int64_t n, double divisor, int32_t power_of_two,
                        float* out) {
  MeanInto(sum, n, divisor, power_of_two != 0, out);
}

void det_fixed_mean_f64(const double* sum, int64_t n, double divisor, int32_t power_of_two,
                        double* out) {
  MeanInto(sum, n, divisor, power_of_two != 0, out);
}

}  // extern "C"
