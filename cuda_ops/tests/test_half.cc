// float16 / bfloat16 conversions against independent references.
#include <cmath>
#include <cstring>
#include <random>

#include "check.h"
#include "util/half.h"

using relax::bf16_to_float;
using relax::float_to_bf16;
using relax::float_to_half;
using relax::half_to_float;

namespace {

uint16_t reference_half_bits(float f) {
  _Float16 h = static_cast<_Float16>(f);  // GCC converts with round-to-nearest-even
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

// Nearest bfloat16 by comparing the two truncation candidates in double; ties go to even.
uint16_t reference_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t low = static_cast<uint16_t>(u >> 16);
  const uint16_t high = static_cast<uint16_t>(low + 1);
  const double lo = bf16_to_float(low), hi = bf16_to_float(high), x = f;
  const double dlo = std::fabs(x - lo), dhi = std::fabs(hi - x);
  if (dlo < dhi) return low;
  if (dhi < dlo) return high;
  return (low & 1) ? high : low;
}

}  // namespace

TEST(half_to_float_matches_compiler_for_every_bit_pattern) {
  int mismatches = 0;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    _Float16 h;
    const uint16_t b = static_cast<uint16_t>(bits);
    std::memcpy(&h, &b, 2);
    const float expected = static_cast<float>(h);
    const float got = half_to_float(b);
    if (std::isnan(expected) ? !std::isnan(got) : std::memcmp(&expected, &got, 4) != 0) ++mismatches;
  }
  CHECK_EQ(mismatches, 0);
}

TEST(float_to_half_rounds_like_the_compiler) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<uint32_t> any_bits;
  int mismatches = 0;
  const float specials[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f,
                            6.1035156e-05f, INFINITY, -INFINITY, 3.0e-5f, -1.5e-6f};
  for (float f : specials) mismatches += float_to_half(f) != reference_half_bits(f);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = any_bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) {
      mismatches += !std::isnan(half_to_float(float_to_half(f)));
      continue;
    }
    mismatches += float_to_half(f) != reference_half_bits(f);
  }
  CHECK_EQ(mismatches, 0);
}

TEST(bfloat16_round_trip_and_rounding) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  int mismatches = 0;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = any_bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) {
      mismatches += !std::isnan(bf16_to_float(float_to_bf16(f)));
    } else if (std::isfinite(f) && std::fabs(f) < 3.38e38f) {
      mismatches += float_to_bf16(f) != reference_bf16_bits(f);
    }
  }
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t b = static_cast<uint16_t>(bits);
    const float f = bf16_to_float(b);
    if (!std::isnan(f)) mismatches += float_to_bf16(f) != b;
  }
  CHECK_EQ(mismatches, 0);
}
